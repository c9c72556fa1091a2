/* The K-means assignment (CPU backend): the nearest centre of every pixel,
 * the first on ties, by the exact double distances of unmixing_impl.h. A
 * float pre-pass (one sgemm a tile of pixels, on the cube as it lies) with a
 * rigorous error bound rules out the centres that cannot be nearest; only
 * the centres left get the exact distance, so the labels are the full
 * computation's. Each tile's share of the centre sums, or the moves of its
 * changed pixels, follows while the tile is in the cache. */
#include "kmeans_impl.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

/* OpenBLAS's own thread pool is set to one thread around the assignment,
 * whose OpenMP threads each call sgemm (hyprof__blas_threads_set). */

/* The exact squared distance of pixel px to c: the full computation. */
static double sqdist(const float *x, size_t npix, size_t px, size_t B, const double *c)
{
    double d = 0.0;
    for (size_t b = 0; b < B; b++) {
        double t = (double)x[b * npix + px] - c[b];
        d += t * t;
    }
    return d;
}

/* The assignment's pre-pass: for a tile of n pixels, the squared distances
 * to every centre in the expanded form s = |a|^2 - 2 (x.e - mu.e) + |e|^2,
 * where mu is the mean spectrum, a = x - mu (|a|^2 is the initialisation's
 * first distance, exact to double rounding) and e = c - mu rounded to float;
 * the dot products x.e by one sgemm on the cube as it lies (one BLAS thread:
 * each OpenMP thread calls its own). Shifting the centres keeps |e| near the
 * spread of the data rather than its level, which is what the error of the
 * expanded form scales with. With u = 2^-24, M = |mu| and R = |a| + |e|: the
 * sgemm's error is below 1.004 B u |x||e| for any summation order (fused or
 * not), and |x| <= |a| + M; rounding e moves |a - e| by at most 1.0002 u |e|
 * from the true distance |x - c|, which moves the square by at most
 * 2.001 u R^2; underflow adds absolute terms below (B + 4) 2^-120. So
 *   E = (2.01 B + 2) u (|a| + M) |e| + 3 u R^2 + (B + 4) 2^-120
 * covers the error with room for the double roundings of |a|^2, mu.e and s:
 * the true squared distance lies in [s - E, s + E]. The exact distance of the
 * full computation, a double sum of B positive terms, is within a relative
 * (B + 3) 2^-53 of the true one; so a centre whose lower bound exceeds the
 * smallest upper bound by a factor 1 + 1e-9 is strictly farther in that
 * arithmetic too, and only the centres left get the exact distance: the
 * labels are the full computation's. A bound that is not finite (overflow,
 * NaN) rules nothing out. The bounds are evaluated as
 *   s +- E = (|a|^2 +- g2 |a|^2) + (K_c +- R_c) - 2 x.e +- |a| Q_c
 * with g1, g2 the two coefficients of E, K_c = |e|^2 + 2 mu.e,
 * Q_c = (g1 + 2 g2) |e| and R_c = g1 M |e| + g2 |e|^2 + (B + 4) 2^-120 (the
 * same E); their double roundings stay far inside E's room. */
#define PTILE 256
#define PREPASS_MAX_BANDS 65536 /* keeps B u far below 1: the bound above holds */

typedef struct {
    const double *mu; /* B: the mean spectrum */
    const double *aa; /* npix: |x - mu|^2 */
    float *e;         /* B x kp, column-major: the centres minus mu, in float, */
    size_t kp;        /* then zero columns up to kp, k rounded up to 8 (sgemm's
                       * kernels run fastest on whole groups of columns) */
    double *ce;       /* k: K_c + R_c, then k: K_c - R_c, then k: Q_c */
    double g2;
} fcentres_t;

typedef struct {
    float *dot;      /* PTILE x kp, column-major: x.e */
    double *na;      /* PTILE: |a| */
    double *thr;     /* PTILE: the smallest upper bound times 1 + 1e-9, less
                      * |a|^2 - g2 |a|^2: a centre is ruled out when
                      * K_c - R_c - 2 x.e - |a| Q_c exceeds it */
    uint32_t *left;  /* PTILE: centres not ruled out */
    uint32_t *first; /* PTILE: the first of them */
} prepass_t;

static int fcentres_make(const hyprof_kmeans_args_t *a, const double *mu, const double *aa,
                         fcentres_t *f)
{
    size_t B = a->bands, k = a->k;
    f->mu = mu;
    f->aa = aa;
    f->kp = (k + 7) / 8 * 8;
    f->e = calloc(f->kp * B, sizeof *f->e);
    f->ce = malloc(3 * k * sizeof *f->ce);
    if (!mu || !aa || !f->e || !f->ce || B > PREPASS_MAX_BANDS || a->npix > INT_MAX)
        return 0;
    double mm = 0.0;
    for (size_t b = 0; b < B; b++)
        mm += mu[b] * mu[b];
    double m = sqrt(mm), g1 = (2.01 * (double)B + 2.0) * 0x1p-24, g2 = 3.0 * 0x1p-24;
    double abs = ((double)B + 4.0) * 0x1p-120;
    for (size_t c = 0; c < k; c++) {
        double ee = 0.0, me = 0.0;
        for (size_t b = 0; b < B; b++) {
            float v = (float)(a->centres[c * B + b] - mu[b]);
            f->e[c * B + b] = v;
            ee += (double)v * (double)v;
            me += mu[b] * (double)v;
        }
        double ne = sqrt(ee), kc = ee + 2.0 * me, rc = g1 * m * ne + g2 * ee + abs;
        f->ce[c] = kc + rc;
        f->ce[k + c] = kc - rc;
        f->ce[2 * k + c] = (g1 + 2.0 * g2) * ne;
    }
    f->g2 = g2;
    return 1;
}

/* K_c - R_c - 2 x.e - |a| Q_c for the tile's pixel i: compared with thr. */
static inline double lower_part(const prepass_t *w, const fcentres_t *f, size_t k, size_t n,
                                size_t i, size_t c)
{
    return f->ce[k + c] - 2.0 * (double)w->dot[c * n + i] - w->na[i] * f->ce[2 * k + c];
}

/* For each pixel of the tile from p0: how many centres the bounds leave, and
 * the first (the centres in decreasing order, so the last one kept is it). */
__attribute__((target_clones("avx2", "default")))
static void bounds_tile(const fcentres_t *f, size_t k, size_t p0, size_t n, prepass_t *w)
{
    const double *aa = f->aa + p0;
    for (size_t i = 0; i < n; i++) {
        w->na[i] = sqrt(aa[i]);
        w->thr[i] = INFINITY;
        w->left[i] = 0;
        w->first[i] = 0;
    }
    for (size_t c = 0; c < k; c++)
        for (size_t i = 0; i < n; i++) {
            double hi = f->ce[c] - 2.0 * (double)w->dot[c * n + i] + w->na[i] * f->ce[2 * k + c];
            w->thr[i] = hi < w->thr[i] ? hi : w->thr[i];
        }
    for (size_t i = 0; i < n; i++)
        w->thr[i] = (aa[i] + f->g2 * aa[i] + w->thr[i]) * (1.0 + 1e-9) - (aa[i] - f->g2 * aa[i]);
    for (size_t c = k; c-- > 0;)
        for (size_t i = 0; i < n; i++) {
            uint32_t in = !(lower_part(w, f, k, n, i, c) > w->thr[i]);
            w->left[i] += in;
            w->first[i] = in ? (uint32_t)c : w->first[i];
        }
}

static void prepass(const hyprof_kmeans_args_t *a, const fcentres_t *f, size_t p0, size_t n,
                    prepass_t *w)
{
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)f->kp, (int)a->bands, 1.0f,
                a->x + p0, (int)a->npix, f->e, (int)a->bands, 0.0f, w->dot, (int)n);
    bounds_tile(f, a->k, p0, n, w);
}

/* The label of pixel i of the tile (pixel px), the first nearest centre as
 * in the full computation (its exact squared distance in *best when the
 * pre-pass leaves several candidates). w NULL: no pre-pass. */
static int32_t nearest(const hyprof_kmeans_args_t *a, const fcentres_t *f, const prepass_t *w,
                       size_t n, size_t i, size_t px, double *best)
{
    size_t k = a->k;
    if (w && w->left[i] == 1)
        return (int32_t)w->first[i];
    int32_t lab = -1;
    for (size_t c = 0; c < k; c++) {
        if (w && lower_part(w, f, k, n, i, c) > w->thr[i])
            continue;
        double dc = sqdist(a->x, a->npix, px, a->bands, a->centres + c * a->bands);
        if (lab < 0 || dc < *best) {
            *best = dc;
            lab = (int32_t)c;
        }
    }
    return lab;
}

/* A changed label's move between the exact centre totals: the pixel leaves
 * its old cluster and joins its new one. */
static void move_pixel(const hyprof_kmeans_args_t *a, size_t px, int32_t from, int32_t to,
                       hyprof_kmeans_totals_t *d)
{
    size_t B = a->bands;
    for (size_t b = 0; b < B; b++) {
        double v = (double)a->x[b * a->npix + px];
        if (from >= 0)
            d->tot[from * B + b] -= v;
        if (to >= 0)
            d->tot[to * B + b] += v;
    }
    if (from >= 0)
        d->cnt[from]--;
    if (to >= 0)
        d->cnt[to]++;
}

/* d[i] = the exact squared distance of pixel p0+i to its centre (0 for a
 * masked pixel): sqdist's arithmetic, bands outer so the tile is read
 * contiguously; the AVX2 clone has no fused multiply-add: the same bits. */
__attribute__((target_clones("avx2", "default")))
static void own_dist(const hyprof_kmeans_args_t *a, size_t p0, size_t n, double *d)
{
    const int32_t *lab = a->labels + p0;
    size_t B = a->bands;
    for (size_t i = 0; i < n; i++)
        d[i] = 0.0;
    for (size_t b = 0; b < B; b++) {
        const float *xb = a->x + b * a->npix + p0;
        for (size_t i = 0; i < n; i++) {
            double t = (double)xb[i] - a->centres[(size_t)(lab[i] < 0 ? 0 : lab[i]) * B + b];
            d[i] += lab[i] < 0 ? 0.0 : t * t;
        }
    }
}

/* Labels (and with `exact` distances) of the n pixels from p0; returns how
 * many labels changed; with d, each change moves the pixel in d. */
static size_t assign_tile(const hyprof_kmeans_args_t *a, const fcentres_t *f, const prepass_t *w,
                          size_t p0, size_t n, int exact, hyprof_kmeans_totals_t *d)
{
    size_t changed = 0;
    for (size_t i = 0; i < n; i++) {
        size_t px = p0 + i;
        int32_t lab = -1;
        double best = 0.0;
        if (!a->mask || a->mask[px])
            lab = nearest(a, f, w, n, i, px, &best);
        if (a->labels[px] != lab) {
            changed++;
            if (d)
                move_pixel(a, px, a->labels[px], lab, d);
        }
        a->labels[px] = lab;
    }
    if (exact)
        own_dist(a, p0, n, a->dist + p0);
    return changed;
}

static void prepass_free(prepass_t *w)
{
    free(w->dot);
    free(w->na);
    free(w->thr);
    free(w->left);
    free(w->first);
}

/* The labels of one block of HYPROF_KMEANS_BLOCK pixels, tile by tile; with
 * `part`, each tile's share of the block's centre sums too (update's first
 * step, while the tile is still in the cache); with d, the moves. */
static size_t assign_block(const hyprof_kmeans_args_t *a, const fcentres_t *f, prepass_t *w,
                           size_t blk, int exact, double *part, hyprof_kmeans_totals_t *d)
{
    size_t changed = 0, end = hyprof__kmeans_block_end(a, blk);
    for (size_t p0 = blk * HYPROF_KMEANS_BLOCK; p0 < end; p0 += PTILE) {
        size_t n = end - p0 < PTILE ? end - p0 : PTILE;
        if (w)
            prepass(a, f, p0, n, w);
        changed += assign_tile(a, f, w, p0, n, exact, d);
        if (part)
            hyprof__kmeans_range_sums(a, part, blk, p0, p0 + n);
    }
    return changed;
}

/* Adds a thread's moves to the totals (exact sums: any order, the same bits). */
static void delta_merge(const hyprof_kmeans_args_t *a, const hyprof_kmeans_totals_t *d,
                        hyprof_kmeans_totals_t *into)
{
    for (size_t i = 0; i < a->k * a->bands; i++)
        into->tot[i] += d->tot[i];
    for (size_t c = 0; c < a->k; c++)
        into->cnt[c] += d->cnt[c];
}

/* Nearest centre of every pixel; returns how many labels changed. With
 * `part`, the centre sums of every block (one pass over the cube an
 * iteration instead of two); with `moves`, the changed labels' moves. */
size_t hyprof__kmeans_assign(const hyprof_kmeans_args_t *a, int threads,
                             hyprof_kmeans_assign_t *as)
{
    size_t changed = 0, k = a->k, B = a->bands;
    size_t nblk = hyprof__kmeans_blocks(a);
    fcentres_t f;
    int fok = fcentres_make(a, as->mu, as->aa, &f), lost = 0;
    int blas_threads = hyprof__blas_threads_set(1);
    #pragma omp parallel num_threads(threads) reduction(+ : changed) reduction(| : lost)
    {
        prepass_t w = {malloc(PTILE * f.kp * sizeof(float)), malloc(PTILE * sizeof(double)),
                       malloc(PTILE * sizeof(double)), malloc(PTILE * sizeof(uint32_t)),
                       malloc(PTILE * sizeof(uint32_t))};
        int ok = fok && w.dot && w.na && w.thr && w.left && w.first;
        hyprof_kmeans_totals_t d = {NULL, NULL};
        if (as->moves) {
            d.tot = calloc(k * B, sizeof *d.tot);
            d.cnt = calloc(k, sizeof *d.cnt);
            lost = !d.tot || !d.cnt;
        }
        #pragma omp for schedule(dynamic)
        for (size_t blk = 0; blk < nblk; blk++)
            changed += assign_block(a, &f, ok ? &w : NULL, blk, as->exact, as->part,
                                    d.tot && d.cnt ? &d : NULL);
        if (d.tot && d.cnt)
            #pragma omp critical(hyprof_kmeans_moves)
            delta_merge(a, &d, as->moves);
        free(d.tot);
        free(d.cnt);
        prepass_free(&w);
    }
    hyprof__blas_threads_restore(blas_threads);
    as->lost = lost;
    free(f.e);
    free(f.ce);
    return changed;
}
