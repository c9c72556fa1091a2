/* Spectral 1-D DWT feature extraction (the W-MCD paper's first stage):
 * argument checks, dispatch, the CPU backend and the `dwt` operation. */
#include "dwt_impl.h"
#include "hyprof/wavelet.h"
#include "../core/ops.h"

#include <stdlib.h>
#include <string.h>

#define OP "dwt"
/* Pixels per thread task: 64 spectra of a few hundred bands (as double)
 * stay in L2, and 64 is a long enough inner loop for SIMD. */
#define CPU_TILE 64

size_t hyprof_dwt_bands(size_t bands, int levels)
{
    for (int l = 0; l < levels; l++)
        bands = (bands + 1) / 2;
    return bands;
}

int hyprof_dwt_max_levels(size_t bands)
{
    int l = 0;
    while (bands >= 2) {
        bands /= 2;
        l++;
    }
    return l;
}

int hyprof_dwt_levels_for_features(size_t bands, long features)
{
    int maxl = hyprof_dwt_max_levels(bands), best = 1;
    long best_d = -1;
    for (int l = 1; l <= (maxl > 1 ? maxl : 1); l++) {
        long d = labs((long)hyprof_dwt_bands(bands, l) - features);
        if (best_d < 0 || d < best_d) {
            best_d = d;
            best = l;
        }
    }
    return best;
}

/* One periodized analysis step on a tile of T spectra stored band-major
 * (s[b*T + i] is band b of pixel i), PyWavelets' convention: an odd signal
 * repeats its last sample, then a[o] = sum_j lo[j] s[(flen/2 + 2o - j) mod n'].
 * The index arithmetic is done once per (o, j) and the inner loop runs over
 * the tile's pixels, contiguous, so it vectorises. s needs room for n+1 rows. */
static size_t analysis_step(double *s, size_t n, size_t T, const double *lo, size_t flen,
                            double *a)
{
    if (n & 1) {
        memcpy(s + n * T, s + (n - 1) * T, T * sizeof *s);
        n++;
    }
    size_t half = n / 2;
    for (size_t o = 0; o < half; o++) {
        double *ao = a + o * T;
        memset(ao, 0, T * sizeof *ao);
        long c = (long)(flen / 2 + 2 * o);
        for (size_t j = 0; j < flen; j++) {
            long k = (c - (long)j) % (long)n;
            const double *sk = s + (size_t)(k < 0 ? k + (long)n : k) * T;
            double v = lo[j];
            for (size_t i = 0; i < T; i++)
                ao[i] += v * sk[i];
        }
    }
    return half;
}

hyprof_status_t hyprof__cpu_dwt_spectral(hyprof_ctx_t *ctx, void *args)
{
    hyprof_dwt_args_t *a = args;
    size_t ntiles = (a->npix + CPU_TILE - 1) / CPU_TILE, done = 0;
    int threads = hyprof__threads(ctx), failed = 0;
    #pragma omp parallel num_threads(threads)
    {
        /* Per thread: the tile's spectra and one level's output, band-major. */
        double *spec = malloc(CPU_TILE * (a->bands + 1) * sizeof *spec);
        double *tmp = malloc(CPU_TILE * (a->bands / 2 + 1) * sizeof *tmp);
        if (!spec || !tmp) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(dynamic)
        for (size_t t = 0; t < ntiles; t++) {
            int stop;
            #pragma omp atomic read
            stop = failed;
            if (stop)
                continue;
            size_t p0 = t * CPU_TILE, n = a->npix - p0 < CPU_TILE ? a->npix - p0 : CPU_TILE;
            for (size_t b = 0; b < a->bands; b++) {
                const float *x = a->x + b * a->npix + p0;
                for (size_t i = 0; i < n; i++)
                    spec[b * n + i] = x[i];
            }
            size_t len = a->bands;
            for (int l = 0; l < a->levels; l++) {
                len = analysis_step(spec, len, n, a->lo, a->flen, tmp);
                memcpy(spec, tmp, len * n * sizeof *spec);
            }
            for (size_t k = 0; k < a->out_bands; k++) {
                float *o = a->out + k * a->npix + p0;
                for (size_t i = 0; i < n; i++)
                    o[i] = (!a->mask || a->mask[p0 + i]) ? (float)spec[k * n + i] : a->nodata;
            }
            size_t now;
            #pragma omp atomic capture
            now = ++done;
            if (hyprof__progress_omp(ctx, (double)now / (double)ntiles, OP)) {
                #pragma omp atomic write
                failed = 2;
            }
        }
        free(spec);
        free(tmp);
    }
    if (failed == 1)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate tile buffers");
    if (failed == 2)
        return hyprof__error(ctx, HYPROF_ERR_CANCELLED, OP, "cancelled");
    return HYPROF_OK;
}

hyprof_status_t hyprof_dwt_spectral(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                                    const hyprof_wavelet_t *wavelet, int levels,
                                    hyprof_cube_t *out)
{
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    memset(out, 0, sizeof *out);
    if (!wavelet)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no wavelet given");
    hyprof_status_t st = hyprof__input_f32(ctx, OP, in, &tmp, &x);
    if (st != HYPROF_OK)
        return st;
    int maxl = hyprof_dwt_max_levels(x->bands);
    if (x->bands < 2)
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "the input has %zu band; a spectral DWT needs at least 2", x->bands);
    else if (levels < 1 || levels > maxl)
        st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                           "levels %d is out of range: %zu bands allow 1 to %d", levels,
                           x->bands, maxl);
    size_t nb = hyprof_dwt_bands(x->bands, levels);
    if (st == HYPROF_OK && (st = hyprof_cube_alloc(out, HYPROF_FLOAT32, x->width, x->height,
                                                   nb)) != HYPROF_OK)
        hyprof__error(ctx, st, OP, "cannot allocate the %zu-band output", nb);
    if (st == HYPROF_OK) {
        hyprof_dwt_args_t a = {x->data, x->mask, x->width * x->height, x->bands, levels,
                               wavelet->dec_lo, wavelet->length, nb, hyprof__nodata_f32(x),
                               out->data};
        st = hyprof__dispatch_bus_bound(ctx, OP, hyprof__cpu_dwt_spectral,
                                        HYPROF_CUDA_IMPL(hyprof__cuda_dwt_spectral), &a);
    }
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK)
        hyprof_cube_free(out);
    return st;
}

/* ---- the `dwt` operation --------------------------------------------------- */

hyprof_status_t hyprof__run_dwt(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out)
{
    const char *name = hyprof_args_str(args, "wavelet");
    const hyprof_wavelet_t *w = hyprof_wavelet_find(name);
    int levels = (int)hyprof_args_int(args, "levels");
    if (!w)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "unknown wavelet '%s'", name);
    hyprof_status_t st = hyprof_dwt_spectral(ctx, in, w, levels, &out->cube);
    if (st == HYPROF_OK)
        st = hyprof__result_adopt(out, in);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "DWT_WAVELET_LABEL", "%s", w->label);
    return st;
}

/* Each pixel's spectrum is transformed on its own. */
int hyprof__pixelwise_dwt(const hyprof_args_t *args)
{
    (void)args;
    return 1;
}

/* Checked as hyprof_dwt_spectral checks them. */
hyprof_status_t hyprof__bands_dwt(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                  size_t *out_bands)
{
    int levels = (int)hyprof_args_int(args, "levels"), maxl = hyprof_dwt_max_levels(in_bands);
    if (in_bands < 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the input has %zu band; a spectral DWT needs at least 2", in_bands);
    if (levels < 1 || levels > maxl)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "levels %d is out of range: %zu bands allow 1 to %d", levels,
                             in_bands, maxl);
    *out_bands = hyprof_dwt_bands(in_bands, levels);
    return HYPROF_OK;
}

/* Approximation coefficient k summarises input bands [k*2^L, (k+1)*2^L). */
HYPROF__NAMES_FN(dwt)
{
    (void)width, (void)height;
    const char *name = hyprof_args_str(args, "wavelet");
    const hyprof_wavelet_t *w = hyprof_wavelet_find(name);
    int levels = (int)hyprof_args_int(args, "levels");
    if (!w)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "unknown wavelet '%s'", name);
    size_t span = (size_t)1 << levels;
    hyprof_status_t st = HYPROF_OK;
    for (size_t k = 0; st == HYPROF_OK && k < out_bands; k++) {
        size_t lo = k * span + 1, hi = (k + 1) * span < in_bands ? (k + 1) * span : in_bands;
        st = hyprof__name(names, k, "A%zu %s L%d (bands %zu-%zu)", k + 1, w->name, levels, lo,
                          hi);
    }
    return st;
}
