/* Endmember refinement (`unmix --refine mean`): each extracted endmember
 * pixel is replaced by the mean spectrum of the k valid pixels closest to it
 * in spectral angle (itself included), k = round(share * nvalid / p), at
 * least 1 and at most nvalid.
 *
 * Why: extraction picks single extreme pixels, and the extremes of a noisy
 * simplex are the pixels the noise pushed furthest out; a dark material
 * (water) is the worst, its pixels having the lowest signal-to-noise ratio.
 * Averaging the spectrally nearest pixels keeps the endmember's direction
 * and cancels most of the noise; the angle, unlike the Euclidean distance,
 * does not prefer pixels of one brightness (illumination varies within a
 * material), so the mean keeps the material's typical brightness. The mean
 * is taken once, from the extracted pixel: iterating it lets the sets drift
 * across the simplex.
 *
 * Deterministic and host-side, after the extraction, so both backends give
 * the same spectra: cosines in double over bands in increasing order, the k
 * largest chosen with ties to the lower pixel index, their spectra added in
 * double in increasing pixel order. */
#include "unmixing_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double cos;
    size_t px;
} ranked_t;

/* Larger cosine first; ties to the lower pixel. */
static int by_cosine(const void *a, const void *b)
{
    const ranked_t *u = a, *v = b;
    if (u->cos != v->cos)
        return u->cos > v->cos ? -1 : 1;
    return u->px < v->px ? -1 : u->px > v->px;
}

static int by_pixel(const void *a, const void *b)
{
    const ranked_t *u = a, *v = b;
    return u->px < v->px ? -1 : u->px > v->px;
}

/* Euclidean norm of every pixel (0 for masked ones). */
static void pixel_norms(hyprof_ctx_t *ctx, const float *x, const uint8_t *mask, size_t npix,
                        size_t bands, double *norm)
{
    #pragma omp parallel for num_threads(hyprof__threads(ctx)) schedule(static)
    for (size_t q = 0; q < npix; q++) {
        double s = 0.0;
        size_t nb = !mask || mask[q] ? bands : 0;
        for (size_t b = 0; b < nb; b++)
            s += (double)x[b * npix + q] * (double)x[b * npix + q];
        norm[q] = sqrt(s);
    }
}

/* The valid pixels ranked by their cosine with pixel c, best first, into r
 * (nvalid entries); a pixel of zero norm has cosine -2 (ranked last). */
static void rank_pixels(hyprof_ctx_t *ctx, const float *x, const uint8_t *mask, size_t npix,
                        size_t bands, const double *norm, size_t c, ranked_t *r, size_t nvalid)
{
    size_t n = 0;
    for (size_t q = 0; q < npix; q++)
        if (!mask || mask[q])
            r[n++].px = q;
    #pragma omp parallel for num_threads(hyprof__threads(ctx)) schedule(static)
    for (size_t i = 0; i < nvalid; i++) {
        size_t q = r[i].px;
        double d = 0.0;
        for (size_t b = 0; b < bands; b++)
            d += (double)x[b * npix + q] * (double)x[b * npix + c];
        r[i].cos = norm[q] > 0.0 && norm[c] > 0.0 ? d / (norm[q] * norm[c]) : -2.0;
    }
    qsort(r, nvalid, sizeof *r, by_cosine);
}

hyprof_status_t hyprof__refine_mean(hyprof_ctx_t *ctx, const char *op, const float *x,
                                    const uint8_t *mask, size_t npix, size_t bands,
                                    const size_t *chosen, double share, hyprof_endmembers_t *em,
                                    size_t *k_out)
{
    size_t p = em->count, nvalid = 0;
    for (size_t q = 0; q < npix; q++)
        nvalid += !mask || mask[q];
    double want = floor(share * (double)nvalid / (double)p + 0.5);
    size_t k = want < 1.0 ? 1 : want > (double)nvalid ? nvalid : (size_t)want;
    double *norm = malloc((npix ? npix : 1) * sizeof *norm);
    ranked_t *r = malloc((nvalid ? nvalid : 1) * sizeof *r);
    if (!norm || !r) {
        free(norm);
        free(r);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory (endmember refinement)");
    }
    pixel_norms(ctx, x, mask, npix, bands, norm);
    hyprof_status_t st = HYPROF_OK;
    for (size_t e = 0; e < p && st == HYPROF_OK; e++) {
        rank_pixels(ctx, x, mask, npix, bands, norm, chosen[e], r, nvalid);
        qsort(r, k, sizeof *r, by_pixel);
        double *s = em->spectra + e * bands;
        #pragma omp parallel for num_threads(hyprof__threads(ctx)) schedule(static)
        for (size_t b = 0; b < bands; b++) {
            double acc = 0.0;
            for (size_t i = 0; i < k; i++)
                acc += (double)x[b * npix + r[i].px];
            s[b] = acc / (double)k;
        }
        st = hyprof__progress(ctx, (double)(e + 1) / (double)p, "refine");
    }
    free(norm);
    free(r);
    *k_out = k;
    return st;
}
