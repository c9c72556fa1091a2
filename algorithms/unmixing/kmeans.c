/* K-means on the spectra (SSPP's spectral clustering): the farthest-point
 * initialisation and Lloyd's iterations; the CPU backend of both steps. */
#include "unmixing_impl.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "kmeans"

/* OpenBLAS's own thread pool is set to one thread around the assignment,
 * whose OpenMP threads each call dgemm (hyprof__blas_threads_set). */
/* Centres the pre-pass handles (its bounds live on the stack). */
#define HYPROF_KMEANS_PREPASS_MAXK 256

static double sqdist(const float *x, size_t npix, size_t px, size_t B, const double *c)
{
    double d = 0.0;
    for (size_t b = 0; b < B; b++) {
        double t = (double)x[b * npix + px] - c[b];
        d += t * t;
    }
    return d;
}

#define TILE 64

/* d[c*TILE + i] = squared distance of pixel p0+i to centre c, for a tile of n
 * pixels: bands in the outer loop so the cube is read contiguously, each sum
 * still over b in increasing order (the per-pixel order of sqdist). */
static void tile_dist(const float *x, size_t npix, size_t B, const double *C, size_t k,
                      size_t p0, size_t n, double *d)
{
    for (size_t c = 0; c < k; c++)
        for (size_t i = 0; i < n; i++)
            d[c * TILE + i] = 0.0;
    for (size_t b = 0; b < B; b++) {
        const float *xb = x + b * npix + p0;
        for (size_t c = 0; c < k; c++) {
            double cb = C[c * B + b], *dc = d + c * TILE;
            for (size_t i = 0; i < n; i++) {
                double t = (double)xb[i] - cb;
                dc[i] += t * t;
            }
        }
    }
}

/* The assignment's pre-pass: for a tile of n pixels, the squared distances
 * to every centre in the expanded form s = |x|^2 - 2 x.c + |c|^2, the dot
 * products by one dgemm (one BLAS thread: each OpenMP thread calls its own).
 * The form cancels, so s is only an estimate; what makes it useful is a
 * rigorous bound of its error. Every term of the three sums and of their
 * combination is a product of x and c entries, so with u = 2^-53 the error of
 * s is below gamma (|x| + |c|)^2, gamma = (B + 3) u for any summation order
 * (fused or not); E = 2 (B + 8) u (|x| + |c|)^2 covers it with room for the
 * rounding of |x| and |c| themselves. The true squared distance lies in
 * [s - E, s + E]. The exact distance of the full computation, a double sum
 * of B positive terms, is within a relative (B + 3) u of the true one; so a
 * centre whose lower bound exceeds the smallest upper bound by a factor
 * 1 + 1e-9 is strictly farther in that arithmetic too, and only the centres
 * left get the exact distance: the labels are the full computation's. */
#define PTILE 128

typedef struct {
    double *a;   /* PTILE x B, column-major: the tile in double */
    double *dot; /* PTILE x k, column-major: x.c */
    double *xx;  /* PTILE: |x|^2 */
} prepass_t;

static void prepass(const hyprof_kmeans_args_t *a, size_t p0, size_t n, prepass_t *w)
{
    size_t B = a->bands;
    for (size_t i = 0; i < n; i++)
        w->xx[i] = 0.0;
    for (size_t b = 0; b < B; b++) {
        const float *xb = a->x + b * a->npix + p0;
        double *ab = w->a + b * n;
        for (size_t i = 0; i < n; i++) {
            ab[i] = (double)xb[i];
            w->xx[i] += ab[i] * ab[i];
        }
    }
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)a->k, (int)B, 1.0, w->a,
                (int)n, a->centres, (int)B, 0.0, w->dot, (int)n);
}

/* The label of pixel i of the tile (pixel px), the first nearest centre as
 * in the full computation; its exact squared distance in *best when `exact`
 * or when the pre-pass leaves several candidates. w NULL: no pre-pass. cc:
 * the centres' |c|^2, then their |c|. */
static int32_t nearest(const hyprof_kmeans_args_t *a, const double *cc, const prepass_t *w,
                       size_t n, size_t i, size_t px, int exact, double *best)
{
    size_t k = a->k, left = k, first = 0;
    uint8_t cand[HYPROF_KMEANS_PREPASS_MAXK];
    if (w) {
        const double u = 1.1102230246251565e-16, g = 2.0 * ((double)a->bands + 8.0) * u;
        double xx = w->xx[i], nx = sqrt(xx), m = INFINITY, lo[HYPROF_KMEANS_PREPASS_MAXK];
        for (size_t c = 0; c < k; c++) {
            double s = xx - 2.0 * w->dot[c * n + i] + cc[c], r = nx + cc[k + c];
            lo[c] = s - g * r * r;
            m = s + g * r * r < m ? s + g * r * r : m;
        }
        left = 0;
        for (size_t c = 0; c < k; c++) {
            cand[c] = !(lo[c] > m * (1.0 + 1e-9));
            if (cand[c] && !left++)
                first = c;
        }
        if (left == 1) {
            if (exact)
                *best = sqdist(a->x, a->npix, px, a->bands, a->centres + first * a->bands);
            return (int32_t)first;
        }
    }
    int32_t lab = -1;
    for (size_t c = 0; c < k; c++) {
        if (w && left > 0 && !cand[c])
            continue;
        double dc = sqdist(a->x, a->npix, px, a->bands, a->centres + c * a->bands);
        if (lab < 0 || dc < *best) {
            *best = dc;
            lab = (int32_t)c;
        }
    }
    return lab;
}

/* The centre sums of bands b0 .. b0+nb (nb <= 4) over one block of pixels,
 * each in pixel order. Four bands share a pass over the labels: four
 * independent chains of additions where one would wait on its own latency
 * (the same sums, the same bits). */
static void block_sums(const hyprof_kmeans_args_t *a, double *part, size_t blk, size_t b0,
                       size_t nb)
{
    size_t B = a->bands, k = a->k, p0 = blk * HYPROF_KMEANS_BLOCK;
    size_t p1 = p0 + HYPROF_KMEANS_BLOCK < a->npix ? p0 + HYPROF_KMEANS_BLOCK : a->npix;
    double *s[4];
    const float *xb[4];
    for (size_t j = 0; j < nb; j++) {
        s[j] = part + (blk * B + b0 + j) * k;
        xb[j] = a->x + (b0 + j) * a->npix;
        for (size_t c = 0; c < k; c++)
            s[j][c] = 0.0;
    }
    if (nb == 4) {
        for (size_t px = p0; px < p1; px++) {
            int32_t c = a->labels[px];
            if (c >= 0) {
                s[0][c] += (double)xb[0][px];
                s[1][c] += (double)xb[1][px];
                s[2][c] += (double)xb[2][px];
                s[3][c] += (double)xb[3][px];
            }
        }
        return;
    }
    for (size_t j = 0; j < nb; j++)
        for (size_t px = p0; px < p1; px++)
            if (a->labels[px] >= 0)
                s[j][a->labels[px]] += (double)xb[j][px];
}

/* Labels (and with `exact` distances) of the n pixels from p0; returns how
 * many labels changed. */
static size_t assign_tile(const hyprof_kmeans_args_t *a, const double *cc, const prepass_t *w,
                          size_t p0, size_t n, int exact)
{
    size_t changed = 0;
    for (size_t i = 0; i < n; i++) {
        size_t px = p0 + i;
        if (a->mask && !a->mask[px]) {
            a->labels[px] = -1;
            a->dist[px] = 0.0;
            continue;
        }
        double best = 0.0;
        int32_t lab = nearest(a, cc, w, n, i, px, exact, &best);
        changed += a->labels[px] != lab;
        a->labels[px] = lab;
        if (exact)
            a->dist[px] = best;
    }
    return changed;
}

/* Nearest centre of every pixel; returns how many labels changed. `exact`:
 * every pixel's distance to its centre in dist (the last assignment). With
 * `part`, each block of HYPROF_KMEANS_BLOCK pixels also gets its centre sums
 * (update's first step) while its pixels are still in the cache: one pass
 * over the cube an iteration instead of two, the same sums. */
static size_t assign(const hyprof_kmeans_args_t *a, int threads, int exact, double *part)
{
    size_t changed = 0, B = a->bands, k = a->k;
    size_t nblk = (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
    double *cc = malloc(2 * k * sizeof *cc); /* |c|^2, then |c| */
    if (cc)
        for (size_t c = 0; c < k; c++) {
            double s = 0.0;
            for (size_t b = 0; b < B; b++)
                s += a->centres[c * B + b] * a->centres[c * B + b];
            cc[c] = s;
            cc[k + c] = sqrt(s);
        }
    int blas_threads = hyprof__blas_threads_set(1);
    #pragma omp parallel num_threads(threads) reduction(+ : changed)
    {
        prepass_t w = {malloc(PTILE * B * sizeof(double)), malloc(PTILE * k * sizeof(double)),
                       malloc(PTILE * sizeof(double))};
        int ok = cc && w.a && w.dot && w.xx && k <= HYPROF_KMEANS_PREPASS_MAXK;
        #pragma omp for schedule(static)
        for (size_t blk = 0; blk < nblk; blk++) {
            size_t end = (blk + 1) * HYPROF_KMEANS_BLOCK;
            end = end < a->npix ? end : a->npix;
            for (size_t p0 = blk * HYPROF_KMEANS_BLOCK; p0 < end; p0 += PTILE) {
                size_t n = end - p0 < PTILE ? end - p0 : PTILE;
                if (ok)
                    prepass(a, p0, n, &w);
                changed += assign_tile(a, cc, ok ? &w : NULL, p0, n, exact);
            }
            for (size_t b0 = 0; part && b0 < B; b0 += 4)
                block_sums(a, part, blk, b0, B - b0 < 4 ? B - b0 : 4);
        }
        free(w.a);
        free(w.dot);
        free(w.xx);
    }
    hyprof__blas_threads_restore(blas_threads);
    free(cc);
    return changed;
}

/* Centres as the mean of their pixels, in double. The sum order is fixed
 * (HYPROF_KMEANS_BLOCK consecutive pixels summed in order, then the blocks in
 * order) and is the CUDA backend's, so both give the same centres bit for bit. */
static void reduce(const hyprof_kmeans_args_t *a, const double *part, size_t *cnt,
                   int threads)
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
            if (cnt[c])
                a->centres[c * B + b] = s / (double)cnt[c];
        }
}

static void update(const hyprof_kmeans_args_t *a, double *part, size_t *cnt, int threads)
{
    size_t B = a->bands, nblk = (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
    size_t groups = (B + 3) / 4;
    #pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
    for (size_t blk = 0; blk < nblk; blk++)
        for (size_t g = 0; g < groups; g++)
            block_sums(a, part, blk, 4 * g, B - 4 * g < 4 ? B - 4 * g : 4);
    reduce(a, part, cnt, threads);
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
        tile_dist(a->x, a->npix, a->bands, ref, 1, p0, n, d);
        for (size_t i = 0; i < n; i++) {
            size_t px = p0 + i;
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

hyprof_status_t hyprof__cpu_kmeans(hyprof_ctx_t *ctx, void *args)
{
    hyprof_kmeans_args_t *a = args;
    int threads = hyprof__threads(ctx);
    size_t nblk = (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
    double *sum = malloc(nblk * a->k * a->bands * sizeof *sum), *mean = malloc(a->bands * sizeof *mean);
    size_t *cnt = malloc(a->k * sizeof *cnt);
    hyprof_status_t st = HYPROF_OK;
    if (!sum || !cnt || !mean) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
        goto done;
    }
    /* The mean spectrum: the update step with every valid pixel in cluster 0. */
    for (size_t px = 0; px < a->npix; px++)
        a->labels[px] = (a->mask && !a->mask[px]) ? -1 : 0;
    hyprof_kmeans_args_t one = *a;
    one.k = 1;
    one.centres = mean;
    update(&one, sum, cnt, threads);
    cpu_init_t init = {a, a->dist}; /* dist is free until the first assignment */
    if ((st = hyprof__kmeans_init(ctx, a, cpu_step, &init, mean)) != HYPROF_OK)
        goto done;
    for (size_t px = 0; px < a->npix; px++)
        a->labels[px] = -2; /* every label "changes" in the first assignment */
    a->iterations = 0;
    for (int it = 0; it < a->max_iter; it++) {
        size_t changed = assign(a, threads, 0, sum);
        if (changed == 0)
            break;
        reduce(a, sum, cnt, threads);
        a->iterations = it + 1;
        if ((st = hyprof__progress(ctx, (double)(it + 1) / a->max_iter, OP)) != HYPROF_OK)
            break;
    }
    /* Distances to the final centres (the last update may have moved them). */
    if (st == HYPROF_OK && a->iterations > 0)
        assign(a, threads, 1, NULL);
done:
    free(sum);
    free(cnt);
    free(mean);
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
