/* Spectral unmixing: endmember sets and per-pixel abundances.
 *
 * An endmember set is a fitted model like a PCA: extracted once (the `unmix`
 * operation), saved as CSV (and JSON) with the band wavelengths, and applied
 * per pixel to any cube with the same bands (hyprof_abundances), e.g. by a
 * GDAL pixel function. */
#ifndef HYPROF_UNMIXING_H
#define HYPROF_UNMIXING_H

#include "hyprof/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* p endmember spectra over `bands` bands. Plain struct, owned by the library
 * when made by it (free with hyprof_endmembers_free). */
typedef struct {
    size_t bands, count;
    double *spectra;        /* count x bands: endmember k is spectra[k*bands ..] */
    double *wavelengths;    /* bands, NaN where unknown; NULL when none is known */
    char *wavelength_units; /* NULL when unknown */
    long *pixel_x, *pixel_y;/* count: where each was found; -1 when not from a pixel */
} hyprof_endmembers_t;

/* A zeroed set of `count` endmembers of `bands` bands, pixels at -1. */
hyprof_status_t hyprof_endmembers_new(size_t bands, size_t count, hyprof_endmembers_t **em);
void hyprof_endmembers_free(hyprof_endmembers_t **em);
/* CSV: header "band,wavelength,E1,...,Ep" then one row per band (%.17g, so it
 * reloads bit for bit); JSON: the same with the pixel positions. Written
 * atomically. */
hyprof_status_t hyprof_endmembers_save_csv(hyprof_ctx_t *ctx, const hyprof_endmembers_t *em,
                                           const char *path);
hyprof_status_t hyprof_endmembers_save_json(hyprof_ctx_t *ctx, const hyprof_endmembers_t *em,
                                            const char *path);
/* Reads the CSV form (the wavelength column may be empty). */
hyprof_status_t hyprof_endmembers_load_csv(hyprof_ctx_t *ctx, const char *path,
                                           hyprof_endmembers_t **em);

typedef enum {
    HYPROF_ABUNDANCE_FCLS = 0, /* non-negative, summing to one (exact active set) */
    HYPROF_ABUNDANCE_NNLS,     /* non-negative (Lawson-Hanson) */
    HYPROF_ABUNDANCE_UCLS      /* unconstrained least squares */
} hyprof_abundance_method_t;

/* Parses "fcls", "nnls" or "ucls". */
hyprof_status_t hyprof_abundance_method_parse(const char *text, hyprof_abundance_method_t *m);

/* Abundances of every pixel of `in` (which must have em->bands bands): `out`
 * becomes an owned float32 BSQ cube of count + 1 bands, the abundances of
 * endmembers 1..p then the reconstruction RMSE sqrt(mean_b (y - M a)^2).
 * Masked pixels get the input's nodata (or NaN) and keep the mask. */
hyprof_status_t hyprof_abundances(hyprof_ctx_t *ctx, const hyprof_endmembers_t *em,
                                  const hyprof_cube_t *in, hyprof_abundance_method_t method,
                                  hyprof_cube_t *out);

#ifdef __cplusplus
}
#endif
#endif
