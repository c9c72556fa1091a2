/* K-means on the spectra (SSPP's spectral clustering): the farthest-point
 * initialisation and Lloyd's iterations; the CPU backend of both steps (the
 * assignment in kmeans_assign.c). The centre update sums each cluster's
 * pixels in a fixed order (the CUDA backend's); when those sums are provably
 * exact (integer-valued cubes), any order gives their bits, and after the
 * first iteration only the pixels that change cluster move between exact
 * totals. */
#include "kmeans_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "kmeans"

#define TILE 1024 /* pixels of an initialisation step's tile: long runs of each band */

/* d[i] = squared distance of pixel p0+i to c, for a tile of n pixels: bands
 * in the outer loop so the cube is read contiguously, each sum still over b
 * in increasing order (the per-pixel order of the exact distance). The AVX2
 * clone runs the same subtractions, multiplies and adds (no fused
 * multiply-add), four pixels at a time: the same bits. */
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

void hyprof__kmeans_range_sums(const hyprof_kmeans_args_t *a, double *part, size_t blk, size_t q0,
                               size_t q1)
{
    for (size_t b0 = 0; b0 < a->bands; b0 += SUM_BANDS)
        block_sums(a, part, blk, b0, a->bands - b0 < SUM_BANDS ? a->bands - b0 : SUM_BANDS, q0, q1);
}

/* Centres as the mean of their pixels, in double. The sum order is fixed
 * (HYPROF_KMEANS_BLOCK consecutive pixels summed in order, then the blocks in
 * order) and is the CUDA backend's, so both give the same centres bit for bit.
 * tot (or NULL) gets the sums, k x B. */
static void reduce(const hyprof_kmeans_args_t *a, const double *part, size_t *cnt,
                   int threads, double *tot)
{
    size_t B = a->bands, k = a->k, nblk = hyprof__kmeans_blocks(a);
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
    size_t B = a->bands, nblk = hyprof__kmeans_blocks(a);
    size_t groups = (B + SUM_BANDS - 1) / SUM_BANDS;
    #pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
    for (size_t blk = 0; blk < nblk; blk++)
        for (size_t g = 0; g < groups; g++)
            block_sums(a, part, blk, SUM_BANDS * g,
                       B - SUM_BANDS * g < SUM_BANDS ? B - SUM_BANDS * g : SUM_BANDS,
                       blk * HYPROF_KMEANS_BLOCK, hyprof__kmeans_block_end(a, blk));
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
static void centres_from(const hyprof_kmeans_args_t *a, const hyprof_kmeans_totals_t *t)
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
                      double *sum, size_t *cnt, hyprof_kmeans_totals_t *tot, int threads)
{
    hyprof_kmeans_assign_t as = {mean, aa, 0, sum, NULL, 0};
    if (!first && tot->tot) {
        as.part = NULL;
        as.moves = tot;
    }
    size_t changed = hyprof__kmeans_assign(a, threads, &as);
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
    hyprof_kmeans_totals_t tot = {NULL, NULL};
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
    size_t nblk = hyprof__kmeans_blocks(a);
    double *sum = malloc(nblk * a->k * a->bands * sizeof *sum), *mean = malloc(a->bands * sizeof *mean);
    size_t *cnt = malloc(a->k * sizeof *cnt);
    double *aa = malloc(a->npix * sizeof *aa);
    double t[4] = {hyprof__now(), 0.0, 0.0, 0.0}; /* start; init, iterations, last seconds */
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
    t[3] = hyprof__now();
    hyprof_kmeans_assign_t last = {mean, aa, 1, NULL, NULL, 0};
    if (st == HYPROF_OK && a->iterations > 0)
        hyprof__kmeans_assign(a, threads, &last);
    t[3] = hyprof__now() - t[3];
    if (st == HYPROF_OK && hyprof__log_debug())
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "kmeans stages: device=cpu threads=%d sums=%s iterations=%d init_ms=%.3f "
                    "iterations_ms=%.3f last_ms=%.3f wall_ms=%.3f", threads,
                    exact ? "exact" : "ordered", a->iterations, 1e3 * t[1], 1e3 * t[2], 1e3 * t[3],
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
