/* Endmember refinement (`unmix --refine mean`): each extracted endmember
 * pixel is replaced by the mean spectrum of the valid pixels that are pure
 * in it, the pixel itself always included.
 *
 * Why: extraction picks single extreme pixels, and the extremes of a noisy
 * simplex are the pixels that noise (or a material's own variability) pushed
 * furthest out; a dark material (water) is the worst, its pixels having the
 * lowest signal-to-noise ratio. The mean of a material's pure pixels cancels
 * most of that and keeps the material's typical spectrum and brightness.
 *
 * Purity: the non-negative least-squares abundances a_j of every pixel on
 * the extracted spectra e_j (no sum-to-one: illumination scales a pixel);
 * the share of the pixel's signal that comes from e_i,
 *   purity_i = a_i |e_i| / sum_j a_j |e_j|,
 * is independent of the pixel's brightness; a pixel is pure in e_i when
 * purity_i >= tau (--refine-purity; tau > 0.5 makes the sets disjoint). The
 * count adapts to the scene: a material with large pure regions averages
 * many pixels, a rare or only-mixed one keeps few (at least its own pixel).
 *
 * Host-side and deterministic, after the extraction: the abundances come
 * from the CPU solver (fcls.c) whatever the backend, the purities in double,
 * the spectra are added in double in increasing pixel order, so both
 * backends give the same endmembers. */
#include "unmixing_impl.h"
#include "lsq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* NNLS abundances of every pixel on em's spectra into ab (npix * (p+1)). */
static hyprof_status_t nnls_all(hyprof_ctx_t *ctx, const char *op, const float *x,
                                const uint8_t *mask, size_t npix, size_t bands,
                                const hyprof_endmembers_t *em, float *ab)
{
    size_t p = em->count;
    double *G = malloc(p * p * sizeof *G);
    if (!G)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory (endmember refinement)");
    hyprof__endmember_gram(em, bands, G);
    hyprof_abund_args_t a = {x, mask, npix, bands, p, em->spectra, G, HYPROF__LSQ_NNLS,
                             0.0f, ab};
    hyprof_status_t st = hyprof__cpu_abundances(ctx, &a);
    free(G);
    return st;
}

/* The pixels pure in endmember e (increasing order) into sel; their count. */
static size_t pure_pixels(const float *ab, const uint8_t *mask, size_t npix, size_t p,
                          const double *enorm, size_t e, size_t self, double tau, size_t *sel)
{
    size_t n = 0;
    for (size_t q = 0; q < npix; q++) {
        if (mask && !mask[q])
            continue;
        double tot = 0.0;
        for (size_t j = 0; j < p; j++)
            tot += (double)ab[j * npix + q] * enorm[j];
        double mine = (double)ab[e * npix + q] * enorm[e];
        if (q == self || (tot > 0.0 && mine >= tau * tot))
            sel[n++] = q;
    }
    return n;
}

hyprof_status_t hyprof__refine_mean(hyprof_ctx_t *ctx, const char *op, const float *x,
                                    const uint8_t *mask, size_t npix, size_t bands,
                                    const size_t *chosen, double tau, hyprof_endmembers_t *em,
                                    size_t *count)
{
    size_t p = em->count;
    float *ab = malloc((npix ? npix : 1) * (p + 1) * sizeof *ab);
    size_t *sel = malloc((npix ? npix : 1) * sizeof *sel);
    double *enorm = malloc(p * sizeof *enorm);
    hyprof_status_t st = HYPROF_OK;
    if (!ab || !sel || !enorm)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory (endmember refinement)");
    double saved[2];
    hyprof__progress_push(ctx, 0.0, 0.9, saved);
    if (st == HYPROF_OK)
        st = nnls_all(ctx, op, x, mask, npix, bands, em, ab);
    hyprof__progress_pop(ctx, saved);
    for (size_t j = 0; st == HYPROF_OK && j < p; j++) {
        double s = 0.0;
        for (size_t b = 0; b < bands; b++)
            s += em->spectra[j * bands + b] * em->spectra[j * bands + b];
        enorm[j] = sqrt(s);
    }
    /* The purities come from ab and enorm, both computed from the extracted
     * spectra, so replacing spectrum e does not change the later selections. */
    for (size_t e = 0; st == HYPROF_OK && e < p; e++) {
        size_t n = pure_pixels(ab, mask, npix, p, enorm, e, chosen[e], tau, sel);
        double *out = em->spectra + e * bands;
        #pragma omp parallel for num_threads(hyprof__threads(ctx)) schedule(static)
        for (size_t b = 0; b < bands; b++) {
            double acc = 0.0;
            for (size_t i = 0; i < n; i++)
                acc += (double)x[b * npix + sel[i]];
            out[b] = acc / (double)n;
        }
        count[e] = n;
    }
    if (st == HYPROF_OK)
        st = hyprof__progress(ctx, 1.0, "refine");
    free(ab);
    free(sel);
    free(enorm);
    return st;
}
