/* K-means on the spectra (SSPP's spectral clustering): the farthest-point
 * initialisation and Lloyd's iterations; the CPU backend of both steps. */
#include "unmixing_impl.h"

#include <stdlib.h>
#include <string.h>

#define OP "kmeans"

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

/* Nearest centre of every pixel; returns how many labels changed. */
static size_t assign(const hyprof_kmeans_args_t *a, int threads)
{
    size_t changed = 0, ntiles = (a->npix + TILE - 1) / TILE;
    #pragma omp parallel num_threads(threads) reduction(+ : changed)
    {
        double *d = malloc(a->k * TILE * sizeof *d);
        #pragma omp for schedule(static)
        for (size_t t = 0; t < ntiles; t++) {
            size_t p0 = t * TILE, n = a->npix - p0 < TILE ? a->npix - p0 : TILE;
            if (d)
                tile_dist(a->x, a->npix, a->bands, a->centres, a->k, p0, n, d);
            for (size_t i = 0; i < n; i++) {
                size_t px = p0 + i;
                if (a->mask && !a->mask[px]) {
                    a->labels[px] = -1;
                    a->dist[px] = 0.0;
                    continue;
                }
                double best = d ? d[i] : sqdist(a->x, a->npix, px, a->bands, a->centres);
                int32_t lab = 0;
                for (size_t c = 1; c < a->k; c++) {
                    double dc = d ? d[c * TILE + i]
                                  : sqdist(a->x, a->npix, px, a->bands, a->centres + c * a->bands);
                    if (dc < best) {
                        best = dc;
                        lab = (int32_t)c;
                    }
                }
                changed += a->labels[px] != lab;
                a->labels[px] = lab;
                a->dist[px] = best;
            }
        }
        free(d);
    }
    return changed;
}

/* Centres as the mean of their pixels, in double. The sum order is fixed
 * (HYPROF_KMEANS_BLOCK consecutive pixels summed in order, then the blocks in
 * order) and is the CUDA backend's, so both give the same centres bit for bit. */
static void update(const hyprof_kmeans_args_t *a, double *part, size_t *cnt, int threads)
{
    size_t B = a->bands, k = a->k, nblk = (a->npix + HYPROF_KMEANS_BLOCK - 1) / HYPROF_KMEANS_BLOCK;
    memset(cnt, 0, k * sizeof *cnt);
    for (size_t px = 0; px < a->npix; px++)
        if (a->labels[px] >= 0)
            cnt[a->labels[px]]++;
    #pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
    for (size_t blk = 0; blk < nblk; blk++)
        for (size_t b = 0; b < B; b++) {
            double *s = part + (blk * B + b) * k;
            size_t p0 = blk * HYPROF_KMEANS_BLOCK, p1 = p0 + HYPROF_KMEANS_BLOCK;
            p1 = p1 < a->npix ? p1 : a->npix;
            for (size_t c = 0; c < k; c++)
                s[c] = 0.0;
            const float *xb = a->x + b * a->npix;
            for (size_t px = p0; px < p1; px++)
                if (a->labels[px] >= 0)
                    s[a->labels[px]] += (double)xb[px];
        }
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
        size_t changed = assign(a, threads);
        if (changed == 0)
            break;
        update(a, sum, cnt, threads);
        a->iterations = it + 1;
        if ((st = hyprof__progress(ctx, (double)(it + 1) / a->max_iter, OP)) != HYPROF_OK)
            break;
    }
    /* Distances to the final centres (the last update may have moved them). */
    if (st == HYPROF_OK && a->iterations > 0)
        assign(a, threads);
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
