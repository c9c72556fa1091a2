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

hyprof_status_t hyprof__cpu_distance(hyprof_ctx_t *ctx, void *args)
{
    hyprof_dist_args_t *a = args;
    #pragma omp parallel for num_threads(hyprof__threads(ctx)) schedule(static)
    for (size_t px = 0; px < a->npix; px++)
        a->dist[px] = (a->mask && !a->mask[px]) ? -1.0 : sqdist(a->x, a->npix, px, a->bands, a->c);
    return HYPROF_OK;
}

/* Nearest centre of every pixel; returns how many labels changed. */
static size_t assign(const hyprof_kmeans_args_t *a, int threads)
{
    size_t changed = 0;
    #pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : changed)
    for (size_t px = 0; px < a->npix; px++) {
        if (a->mask && !a->mask[px]) {
            a->labels[px] = -1;
            a->dist[px] = 0.0;
            continue;
        }
        double best = sqdist(a->x, a->npix, px, a->bands, a->centres);
        int32_t lab = 0;
        for (size_t c = 1; c < a->k; c++) {
            double d = sqdist(a->x, a->npix, px, a->bands, a->centres + c * a->bands);
            if (d < best) {
                best = d;
                lab = (int32_t)c;
            }
        }
        changed += a->labels[px] != lab;
        a->labels[px] = lab;
        a->dist[px] = best;
    }
    return changed;
}

/* Centres as the mean of their pixels, in double, pixels in raster order. */
static void update(const hyprof_kmeans_args_t *a, double *sum, size_t *cnt, int threads)
{
    size_t B = a->bands, k = a->k;
    memset(cnt, 0, k * sizeof *cnt);
    for (size_t px = 0; px < a->npix; px++)
        if (a->labels[px] >= 0)
            cnt[a->labels[px]]++;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t b = 0; b < B; b++) {
        double *s = sum + b * k;
        for (size_t c = 0; c < k; c++)
            s[c] = 0.0;
        const float *xb = a->x + b * a->npix;
        for (size_t px = 0; px < a->npix; px++)
            if (a->labels[px] >= 0)
                s[a->labels[px]] += (double)xb[px];
        for (size_t c = 0; c < k; c++)
            if (cnt[c])
                a->centres[c * B + b] = s[c] / (double)cnt[c];
    }
}

hyprof_status_t hyprof__cpu_kmeans(hyprof_ctx_t *ctx, void *args)
{
    hyprof_kmeans_args_t *a = args;
    int threads = hyprof__threads(ctx);
    double *sum = malloc(a->k * a->bands * sizeof *sum);
    size_t *cnt = malloc(a->k * sizeof *cnt);
    if (!sum || !cnt) {
        free(sum);
        free(cnt);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    }
    for (size_t px = 0; px < a->npix; px++)
        a->labels[px] = -2; /* every label "changes" in the first assignment */
    hyprof_status_t st = HYPROF_OK;
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
    free(sum);
    free(cnt);
    return st;
}

/* ---- the host side: initialisation, then Lloyd ------------------------------- */

static hyprof_status_t farthest_first(hyprof_ctx_t *ctx, const char *op,
                                      hyprof_kmeans_args_t *a, size_t *init)
{
    size_t B = a->bands, npix = a->npix, nvalid = 0;
    double *mind = malloc(npix * sizeof *mind), *dist = a->dist;
    if (!mind)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    /* Mean spectrum of the valid pixels: the first centre is farthest from it. */
    double *c = a->centres;
    memset(c, 0, B * sizeof *c);
    for (size_t b = 0; b < B; b++) {
        double s = 0.0;
        nvalid = 0;
        for (size_t px = 0; px < npix; px++)
            if (!a->mask || a->mask[px]) {
                s += a->x[b * npix + px];
                nvalid++;
            }
        c[b] = s / (double)nvalid;
    }
    hyprof_status_t st = HYPROF_OK;
    for (size_t px = 0; px < npix; px++)
        mind[px] = 0.0;
    const double *ref = c;
    double *tmp = malloc(B * sizeof *tmp);
    if (!tmp) {
        free(mind);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    }
    memcpy(tmp, c, B * sizeof *tmp);
    ref = tmp;
    for (size_t j = 0; j < a->k && st == HYPROF_OK; j++) {
        hyprof_dist_args_t d = {a->x, a->mask, npix, B, ref, dist};
        st = hyprof__dispatch(ctx, op, hyprof__cpu_distance, HYPROF_CUDA_IMPL(hyprof__cuda_distance),
                              &d);
        if (st != HYPROF_OK)
            break;
        size_t best = npix;
        for (size_t px = 0; px < npix; px++) {
            if (dist[px] < 0.0)
                continue;
            /* j = 0: distance to the mean, not to a centre; j = 1: the first centre. */
            if (j <= 1 || dist[px] < mind[px])
                mind[px] = dist[px];
            if (best == npix || mind[px] > mind[best])
                best = px;
        }
        init[j] = best;
        for (size_t b = 0; b < B; b++)
            a->centres[j * B + b] = a->x[b * npix + best];
        ref = a->centres + j * B;
    }
    (void)nvalid;
    free(tmp);
    free(mind);
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
    hyprof_kmeans_args_t a = {x, mask, npix, bands, k, max_iter, centres, labels, dist, 0};
    double saved[2];
    hyprof__progress_push(ctx, 0.0, 0.2, saved);
    st = farthest_first(ctx, op, &a, init);
    hyprof__progress_pop(ctx, saved);
    if (st != HYPROF_OK)
        goto done;
    hyprof__progress_push(ctx, 0.2, 1.0, saved);
    st = hyprof__dispatch(ctx, op, hyprof__cpu_kmeans, HYPROF_CUDA_IMPL(hyprof__cuda_kmeans), &a);
    hyprof__progress_pop(ctx, saved);
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
