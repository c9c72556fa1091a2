/* K-means on the spectra (SSPP's spectral clustering): the farthest-point
 * initialisation and Lloyd's iterations; the CPU backend of both steps. */
#include "unmixing_impl.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "kmeans"

/* OpenBLAS's own thread pool is set to one thread around the assignment,
 * whose OpenMP threads each call sgemm (hyprof__blas_threads_set). */

static double sqdist(const float *x, size_t npix, size_t px, size_t B, const double *c)
{
    double d = 0.0;
    for (size_t b = 0; b < B; b++) {
        double t = (double)x[b * npix + px] - c[b];
        d += t * t;
    }
    return d;
}

#define TILE 1024

/* d[i] = squared distance of pixel p0+i to c, for a tile of n pixels: bands
 * in the outer loop so the cube is read contiguously, each sum still over b
 * in increasing order (the per-pixel order of sqdist). The AVX2 clone runs
 * the same subtractions, multiplies and adds (no fused multiply-add), four
 * pixels at a time: the same bits. */
__attribute__((target_clones("avx2", "default")))
static void tile_dist(const float *x, size_t npix, size_t B, const double *c, size_t p0, size_t n,
                      double *d)
{
    for (size_t i = 0; i < n; i++)
        d[i] = 0.0;
    for (size_t b = 0; b < B; b++) {
        const float *xb = x + b * npix + p0;
        double cb = c[b];
        for (size_t i = 0; i < n; i++) {
            double t = (double)xb[i] - cb;
            d[i] += t * t;
        }
    }
}

/* One past the last pixel of block blk. */
static size_t end_of(const hyprof_kmeans_args_t *a, size_t blk)
{
    size_t end = (blk + 1) * HYPROF_KMEANS_BLOCK;
    return end < a->npix ? end : a->npix;
}

#define SUM_BANDS 8

/* The centre sums of bands b0 .. b0+nb (nb <= SUM_BANDS) over pixels q0 .. q1
 * of block blk, each in pixel order (the block's sums start at zero with its
 * first pixel, so a block summed piece by piece gives the same bits). A run
 * of pixels of one label adds into registers and stores once at its end:
 * the same additions in the same order, without a store and reload between
 * two pixels of a run; SUM_BANDS bands share the pass, independent chains
 * where one would wait on its own latency. */
static void block_sums(const hyprof_kmeans_args_t *a, double *part, size_t blk, size_t b0,
                       size_t nb, size_t q0, size_t q1)
{
    size_t B = a->bands, k = a->k;
    double *s[SUM_BANDS];
    const float *xb[SUM_BANDS];
    for (size_t j = 0; j < nb; j++) {
        s[j] = part + (blk * B + b0 + j) * k;
        xb[j] = a->x + (b0 + j) * a->npix;
        for (size_t c = 0; q0 == blk * HYPROF_KMEANS_BLOCK && c < k; c++)
            s[j][c] = 0.0;
    }
    for (size_t px = q0, end; px < q1; px = end) {
        int32_t c = a->labels[px];
        for (end = px + 1; end < q1 && a->labels[end] == c;)
            end++;
        if (c < 0)
            continue;
        if (nb == SUM_BANDS) {
            double acc[SUM_BANDS];
            for (size_t j = 0; j < SUM_BANDS; j++)
                acc[j] = s[j][c];
            for (size_t q = px; q < end; q++)
                for (size_t j = 0; j < SUM_BANDS; j++)
                    acc[j] += (double)xb[j][q];
            for (size_t j = 0; j < SUM_BANDS; j++)
                s[j][c] = acc[j];
            continue;
        }
        for (size_t j = 0; j < nb; j++) {
            double acc = s[j][c];
            for (size_t q = px; q < end; q++)
                acc += (double)xb[j][q];
            s[j][c] = acc;
        }
    }
}

/* All the bands' centre sums over pixels q0 .. q1 of block blk. */
static void range_sums(const hyprof_kmeans_args_t *a, double *part, size_t blk, size_t q0,
                       size_t q1)
{
    for (size_t b0 = 0; b0 < a->bands; b0 += SUM_BANDS)
        block_sums(a, part, blk, b0, a->bands - b0 < SUM_BANDS ? a->bands - b0 : SUM_BANDS, q0, q1);
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
 * NaN) rules nothing out. */
#define PTILE 256
#define PREPASS_MAX_BANDS 65536 /* keeps B u far below 1: the bound above holds */

typedef struct {
    const double *mu; /* B: the mean spectrum */
    const double *aa; /* npix: |x - mu|^2 */
    float *e;         /* B x k, column-major: the centres minus mu, in float */
    double *ce;       /* k: |e|^2, then k: |e|, then k: mu.e */
    double g1, g2, abs, m;
} fcentres_t;

typedef struct {
    float *dot;      /* PTILE x k, column-major: x.e */
    double *na;      /* PTILE: |a| */
    double *hi;      /* PTILE: the smallest upper bound, times 1 + 1e-9 */
    uint32_t *left;  /* PTILE: centres not ruled out */
    uint32_t *first; /* PTILE: the first of them */
} prepass_t;

static int fcentres_make(const hyprof_kmeans_args_t *a, const double *mu, const double *aa,
                         fcentres_t *f)
{
    size_t B = a->bands, k = a->k;
    f->mu = mu;
    f->aa = aa;
    f->e = malloc(k * B * sizeof *f->e);
    f->ce = malloc(3 * k * sizeof *f->ce);
    if (!mu || !aa || !f->e || !f->ce || B > PREPASS_MAX_BANDS || a->npix > INT_MAX)
        return 0;
    double mm = 0.0;
    for (size_t b = 0; b < B; b++)
        mm += mu[b] * mu[b];
    for (size_t c = 0; c < k; c++) {
        double ee = 0.0, me = 0.0;
        for (size_t b = 0; b < B; b++) {
            float v = (float)(a->centres[c * B + b] - mu[b]);
            f->e[c * B + b] = v;
            ee += (double)v * (double)v;
            me += mu[b] * (double)v;
        }
        f->ce[c] = ee;
        f->ce[k + c] = sqrt(ee);
        f->ce[2 * k + c] = me;
    }
    f->m = sqrt(mm);
    f->g1 = (2.01 * (double)B + 2.0) * 0x1p-24;
    f->g2 = 3.0 * 0x1p-24;
    f->abs = ((double)B + 4.0) * 0x1p-120;
    return 1;
}

/* The lower (sign -1) or upper (+1) bound of the squared distance of the
 * tile's pixel i (pixel px) to centre c. */
static inline double bound(const prepass_t *w, const fcentres_t *f, size_t k, size_t n, size_t i,
                           size_t px, size_t c, double sign)
{
    double ne = f->ce[k + c], na = w->na[i], r = na + ne;
    double s = f->aa[px] - 2.0 * ((double)w->dot[c * n + i] - f->ce[2 * k + c]) + f->ce[c];
    return s + sign * (f->g1 * (na + f->m) * ne + f->g2 * r * r + f->abs);
}

/* For each pixel of the tile from p0: how many centres the bounds leave, and
 * the first (the centres in decreasing order, so the last one kept is it). */
__attribute__((target_clones("avx2", "default")))
static void bounds_tile(const fcentres_t *f, size_t k, size_t p0, size_t n, prepass_t *w)
{
    for (size_t i = 0; i < n; i++) {
        w->na[i] = sqrt(f->aa[p0 + i]);
        w->hi[i] = INFINITY;
        w->left[i] = 0;
        w->first[i] = 0;
    }
    for (size_t c = 0; c < k; c++)
        for (size_t i = 0; i < n; i++) {
            double hi = bound(w, f, k, n, i, p0 + i, c, 1.0);
            w->hi[i] = hi < w->hi[i] ? hi : w->hi[i];
        }
    for (size_t i = 0; i < n; i++)
        w->hi[i] *= 1.0 + 1e-9;
    for (size_t c = k; c-- > 0;)
        for (size_t i = 0; i < n; i++) {
            uint32_t in = !(bound(w, f, k, n, i, p0 + i, c, -1.0) > w->hi[i]);
            w->left[i] += in;
            w->first[i] = in ? (uint32_t)c : w->first[i];
        }
}

static void prepass(const hyprof_kmeans_args_t *a, const fcentres_t *f, size_t p0, size_t n,
                    prepass_t *w)
{
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)a->k, (int)a->bands, 1.0f,
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
        if (w && bound(w, f, k, n, i, px, c, -1.0) > w->hi[i])
            continue;
        double dc = sqdist(a->x, a->npix, px, a->bands, a->centres + c * a->bands);
        if (lab < 0 || dc < *best) {
            *best = dc;
            lab = (int32_t)c;
        }
    }
    return lab;
}

/* A changed label's move between the exact centre totals (delta_t): the
 * pixel leaves its old cluster and joins its new one. */
typedef struct {
    double *tot; /* k x B */
    long long *cnt;
} delta_t;

static void move_pixel(const hyprof_kmeans_args_t *a, size_t px, int32_t from, int32_t to,
                       delta_t *d)
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
                          size_t p0, size_t n, int exact, delta_t *d)
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
    free(w->hi);
    free(w->left);
    free(w->first);
}

/* The labels of one block of HYPROF_KMEANS_BLOCK pixels, tile by tile; with
 * `part`, each tile's share of the block's centre sums too (update's first
 * step, while the tile is still in the cache); with d, the moves. */
static size_t assign_block(const hyprof_kmeans_args_t *a, const fcentres_t *f, prepass_t *w,
                           size_t blk, int exact, double *part, delta_t *d)
{
    size_t changed = 0, end = end_of(a, blk);
    for (size_t p0 = blk * HYPROF_KMEANS_BLOCK; p0 < end; p0 += PTILE) {
        size_t n = end - p0 < PTILE ? end - p0 : PTILE;
        if (w)
            prepass(a, f, p0, n, w);
        changed += assign_tile(a, f, w, p0, n, exact, d);
        if (part)
            range_sums(a, part, blk, p0, p0 + n);
    }
    return changed;
}

/* Adds a thread's moves to the totals (exact sums: any order, the same bits). */
static void delta_merge(const hyprof_kmeans_args_t *a, const delta_t *d, delta_t *into)
{
    for (size_t i = 0; i < a->k * a->bands; i++)
        into->tot[i] += d->tot[i];
    for (size_t c = 0; c < a->k; c++)
        into->cnt[c] += d->cnt[c];
}

/* The assignment's inputs and outputs besides the arguments. */
typedef struct {
    const double *mu, *aa; /* the pre-pass's mean spectrum, |x - mu|^2 */
    int exact;             /* every pixel's distance to its centre in dist */
    double *part;          /* the blocks' centre sums, or NULL */
    delta_t *moves;        /* the exact totals the changed labels move in, or NULL */
    int lost;              /* out: moves were not recorded (no memory) */
} assign_t;

/* Nearest centre of every pixel; returns how many labels changed. With
 * `part`, the centre sums of every block (one pass over the cube an
 * iteration instead of two); with `moves`, the changed labels' moves. */
static size_t assign(const hyprof_kmeans_args_t *a, int threads, assign_t *as)
{
    size_t changed = 0, k = a->k, B = a->bands;
    size_t nblk = (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
    fcentres_t f;
    int fok = fcentres_make(a, as->mu, as->aa, &f), lost = 0;
    int blas_threads = hyprof__blas_threads_set(1);
    #pragma omp parallel num_threads(threads) reduction(+ : changed) reduction(| : lost)
    {
        prepass_t w = {malloc(PTILE * k * sizeof(float)), malloc(PTILE * sizeof(double)),
                       malloc(PTILE * sizeof(double)), malloc(PTILE * sizeof(uint32_t)),
                       malloc(PTILE * sizeof(uint32_t))};
        int ok = fok && w.dot && w.na && w.hi && w.left && w.first;
        delta_t d = {NULL, NULL};
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

/* Centres as the mean of their pixels, in double. The sum order is fixed
 * (HYPROF_KMEANS_BLOCK consecutive pixels summed in order, then the blocks in
 * order) and is the CUDA backend's, so both give the same centres bit for bit. */
static void reduce(const hyprof_kmeans_args_t *a, const double *part, size_t *cnt,
                   int threads, double *tot)
{
    size_t B = a->bands, k = a->k, nblk = (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
    memset(cnt, 0, k * sizeof *cnt);
    for (size_t px = 0; px < a->npix; px++)
        if (a->labels[px] >= 0)
            cnt[a->labels[px]]++;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t b = 0; b < B; b++)
        for (size_t c = 0; c < k; c++) {
            double s = 0.0;
            for (size_t blk = 0; blk < nblk; blk++)
                s += part[(blk * B + b) * k + c];
            if (tot)
                tot[c * B + b] = s;
            if (cnt[c])
                a->centres[c * B + b] = s / (double)cnt[c];
        }
}

/* The centre update in its fixed order; tot (or NULL): the centre sums, k x B. */
static void update(const hyprof_kmeans_args_t *a, double *part, size_t *cnt, int threads,
                   double *tot)
{
    size_t B = a->bands, nblk = (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
    size_t groups = (B + SUM_BANDS - 1) / SUM_BANDS;
    #pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
    for (size_t blk = 0; blk < nblk; blk++)
        for (size_t g = 0; g < groups; g++)
            block_sums(a, part, blk, SUM_BANDS * g,
                       B - SUM_BANDS * g < SUM_BANDS ? B - SUM_BANDS * g : SUM_BANDS,
                       blk * HYPROF_KMEANS_BLOCK, end_of(a, blk));
    reduce(a, part, cnt, threads, tot);
}

/* The farthest-point initialisation, written once for both backends over
 * their step (unmixing_impl.h). The first reference is the mean spectrum
 * (the update step with one cluster, so its sum order is fixed). */
hyprof_status_t hyprof__kmeans_init(hyprof_ctx_t *ctx, hyprof_kmeans_args_t *a,
                                    hyprof__kmeans_step_fn step, void *impl, const double *mean)
{
    size_t B = a->bands, npix = a->npix;
    const double *ref = mean;
    for (size_t j = 0; j < a->k; j++) {
        size_t best = npix;
        /* Each centre is a pass over the pixels: a cancellation point. */
        hyprof_status_t st = hyprof__progress(ctx, 0.0, OP);
        if (st == HYPROF_OK)
            st = step(ctx, impl, ref, j, &best);
        if (st != HYPROF_OK)
            return st;
        if (best >= npix)
            return hyprof__error(ctx, HYPROF_ERR_INTERNAL, OP, "no valid pixel to start from");
        a->init[j] = best;
        for (size_t b = 0; b < B; b++)
            a->centres[j * B + b] = a->x[b * npix + best];
        ref = a->centres + j * B;
    }
    return HYPROF_OK;
}

typedef struct {
    hyprof_kmeans_args_t *a;
    double *mind;
    double *aa; /* the distances to the mean (step 0), kept for the assignment */
} cpu_init_t;

static hyprof_status_t cpu_step(hyprof_ctx_t *ctx, void *impl, const double *ref, size_t j,
                                size_t *best)
{
    cpu_init_t *c = impl;
    hyprof_kmeans_args_t *a = c->a;
    size_t ntiles = (a->npix + TILE - 1) / TILE;
    #pragma omp parallel for num_threads(hyprof__threads(ctx)) schedule(static)
    for (size_t t = 0; t < ntiles; t++) {
        double d[TILE];
        size_t p0 = t * TILE, n = a->npix - p0 < TILE ? a->npix - p0 : TILE;
        tile_dist(a->x, a->npix, a->bands, ref, p0, n, d);
        for (size_t i = 0; i < n; i++) {
            size_t px = p0 + i;
            if (j == 0)
                c->aa[px] = d[i];
            if (a->mask && !a->mask[px])
                c->mind[px] = -1.0;
            else if (j <= 1 || d[i] < c->mind[px])
                c->mind[px] = d[i];
        }
    }
    *best = a->npix;
    for (size_t px = 0; px < a->npix; px++)
        if (c->mind[px] >= 0.0 && (*best == a->npix || c->mind[px] > c->mind[*best]))
            *best = px;
    return HYPROF_OK;
}

/* The largest |x| of a band's valid pixels (NaN never wins: the check below
 * catches it). */
__attribute__((target_clones("avx2", "default")))
static float band_absmax(const float *xb, const uint8_t *mask, size_t npix)
{
    float m = 0.0f;
    for (size_t px = 0; px < npix; px++) {
        float v = mask && !mask[px] ? 0.0f : fabsf(xb[px]);
        m = v > m ? v : m;
    }
    return m;
}

/* Whether every valid pixel of the band is a multiple of 1/scale (a power of
 * two): y = x scale is exact unless it overflows (then x is a multiple) or
 * falls below 1 (then x must be 0); NaN fails. */
__attribute__((target_clones("avx2", "default")))
static int band_multiple(const float *xb, const uint8_t *mask, size_t npix, float scale)
{
    int ok = 1;
    for (size_t px = 0; px < npix; px++) {
        float v = xb[px], y = v * scale;
        ok &= (mask && !mask[px]) || (y == truncf(y) && (v == 0.0f || fabsf(y) >= 1.0f));
    }
    return ok;
}

/* Whether every centre sum is exact in double whatever the order of its
 * additions and subtractions: true when each band's valid values are
 * multiples of some 2^q while npix times their largest magnitude stays below
 * 2^(q + 52) (every partial sum is then a multiple of 2^q below 2^(q + 53) in
 * magnitude: representable, so no operation rounds). Integer-valued cubes
 * pass. The sums are then the exact ones, which the fixed order of update()
 * (and the CUDA backend's) gives too. */
static int sums_exact(const hyprof_kmeans_args_t *a, int threads)
{
    int ok = 1;
    #pragma omp parallel for num_threads(threads) schedule(static) reduction(& : ok)
    for (size_t b = 0; b < a->bands; b++) {
        const float *xb = a->x + b * a->npix;
        float m = band_absmax(xb, a->mask, a->npix);
        if (!(m > 0.0f))
            continue; /* all zeros, or only NaN (which the check below fails) */
        int e;
        frexp((double)a->npix * (double)m * (1.0 + 0x1p-40), &e); /* npix m < 2^e */
        int q = e - 52;
        if (!isfinite(m) || q < -126 || q > 126)
            ok = 0;
        else
            ok &= band_multiple(xb, a->mask, a->npix, ldexpf(1.0f, -q));
    }
    return ok;
}

/* Centres as their exact totals over their counts (an empty cluster keeps its centre). */
static void centres_from(const hyprof_kmeans_args_t *a, const delta_t *t)
{
    size_t B = a->bands;
    for (size_t c = 0; c < a->k; c++)
        for (size_t b = 0; t->cnt[c] > 0 && b < B; b++)
            a->centres[c * B + b] = t->tot[c * B + b] / (double)t->cnt[c];
}

/* One iteration's assignment and update. The first fills the blocks' centre
 * sums in their fixed order (update's sums); later ones, when the sums are
 * exact (tot), move only the changed pixels between the totals. */
static size_t iterate(hyprof_kmeans_args_t *a, const double *mean, const double *aa, int first,
                      double *sum, size_t *cnt, delta_t *tot, int threads)
{
    assign_t as = {mean, aa, 0, sum, NULL, 0};
    if (!first && tot->tot) {
        as.part = NULL;
        as.moves = tot;
    }
    size_t changed = assign(a, threads, &as);
    if (changed == 0)
        return 0;
    if (as.moves && !as.lost) {
        centres_from(a, tot);
        return changed;
    }
    if (as.moves) /* moves not recorded (no memory): the full update */
        update(a, sum, cnt, threads, tot->tot);
    else
        reduce(a, sum, cnt, threads, tot->tot);
    for (size_t c = 0; tot->tot && c < a->k; c++)
        tot->cnt[c] = (long long)cnt[c];
    return changed;
}

/* Lloyd's iterations from the initial centres; t gets the iterations' seconds. */
static hyprof_status_t lloyd(hyprof_ctx_t *ctx, hyprof_kmeans_args_t *a, const double *mean,
                             const double *aa, double *sum, size_t *cnt, int threads, double *t,
                             int *exact)
{
    hyprof_status_t st = HYPROF_OK;
    delta_t tot = {NULL, NULL};
    if (sums_exact(a, threads)) {
        tot.tot = malloc(a->k * a->bands * sizeof *tot.tot);
        tot.cnt = malloc(a->k * sizeof *tot.cnt);
        if (!tot.tot || !tot.cnt) {
            free(tot.tot);
            free(tot.cnt);
            tot.tot = NULL;
            tot.cnt = NULL;
        }
    }
    for (size_t px = 0; px < a->npix; px++)
        a->labels[px] = -2; /* every label "changes" in the first assignment */
    a->iterations = 0;
    double t0 = hyprof__now();
    for (int it = 0; it < a->max_iter; it++) {
        if (iterate(a, mean, aa, it == 0, sum, cnt, &tot, threads) == 0)
            break;
        a->iterations = it + 1;
        if ((st = hyprof__progress(ctx, (double)(it + 1) / a->max_iter, OP)) != HYPROF_OK)
            break;
    }
    *t = hyprof__now() - t0;
    *exact = tot.tot != NULL;
    free(tot.tot);
    free(tot.cnt);
    return st;
}

hyprof_status_t hyprof__cpu_kmeans(hyprof_ctx_t *ctx, void *args)
{
    hyprof_kmeans_args_t *a = args;
    int threads = hyprof__threads(ctx);
    size_t nblk = (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
    double *sum = malloc(nblk * a->k * a->bands * sizeof *sum), *mean = malloc(a->bands * sizeof *mean);
    size_t *cnt = malloc(a->k * sizeof *cnt);
    double *aa = malloc(a->npix * sizeof *aa);
    double t[5] = {hyprof__now(), 0.0, 0.0, 0.0, 0.0}; /* start, init, iterations, -, last */
    hyprof_status_t st = HYPROF_OK;
    if (!sum || !cnt || !mean || !aa) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
        goto done;
    }
    /* The mean spectrum: the update step with every valid pixel in cluster 0. */
    for (size_t px = 0; px < a->npix; px++)
        a->labels[px] = (a->mask && !a->mask[px]) ? -1 : 0;
    hyprof_kmeans_args_t one = *a;
    one.k = 1;
    one.centres = mean;
    update(&one, sum, cnt, threads, NULL);
    cpu_init_t init = {a, a->dist, aa}; /* dist is free until the first assignment */
    if ((st = hyprof__kmeans_init(ctx, a, cpu_step, &init, mean)) != HYPROF_OK)
        goto done;
    t[1] = hyprof__now() - t[0];
    int exact = 0;
    st = lloyd(ctx, a, mean, aa, sum, cnt, threads, t + 2, &exact);
    /* Distances to the final centres (the last update may have moved them). */
    t[4] = hyprof__now();
    if (st == HYPROF_OK && a->iterations > 0)
        {
        assign_t as = {mean, aa, 1, NULL, NULL, 0};
        assign(a, threads, &as);
    }
    t[4] = hyprof__now() - t[4];
    if (st == HYPROF_OK && hyprof__log_debug())
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "kmeans stages: device=cpu threads=%d sums=%s iterations=%d init_ms=%.3f "
                    "iterations_ms=%.3f last_ms=%.3f wall_ms=%.3f", threads,
                    exact ? "exact" : "ordered", a->iterations, 1e3 * t[1], 1e3 * t[2], 1e3 * t[4],
                    1e3 * (hyprof__now() - t[0]));
done:
    free(sum);
    free(cnt);
    free(mean);
    free(aa);
    return st;
}

hyprof_status_t hyprof__kmeans(hyprof_ctx_t *ctx, const char *op, const float *x,
                               const uint8_t *mask, size_t npix, size_t bands, size_t k,
                               int max_iter, int32_t *labels, size_t *init, double *inertia,
                               int *iterations)
{
    double *centres = malloc(k * bands * sizeof *centres), *dist = malloc(npix * sizeof *dist);
    hyprof_status_t st = HYPROF_OK;
    if (!centres || !dist) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
        goto done;
    }
    hyprof_kmeans_args_t a = {x, mask, npix, bands, k, max_iter, centres, labels, dist, init, 0};
    st = hyprof__dispatch(ctx, op, hyprof__cpu_kmeans, HYPROF_CUDA_IMPL(hyprof__cuda_kmeans), &a);
    if (st != HYPROF_OK)
        goto done;
    double s = 0.0;
    for (size_t px = 0; px < npix; px++)
        s += dist[px];
    *inertia = s;
    *iterations = a.iterations;
done:
    free(centres);
    free(dist);
    return st;
}
