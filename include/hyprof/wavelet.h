/* Wavelets: filter banks and the spectral 1-D DWT feature extraction. */
#ifndef HYPROF_WAVELET_H
#define HYPROF_WAVELET_H

#include "hyprof/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An orthogonal or biorthogonal filter bank, coefficients as PyWavelets. */
typedef struct {
    const char *name;    /* PyWavelets name: "haar", "db2", "bior4.4" */
    const char *label;   /* "Haar", "Daubechies 2", "CDF 9/7 (bior4.4)" */
    size_t length;       /* filter length */
    const double *dec_lo, *dec_hi, *rec_lo, *rec_hi;
} hyprof_wavelet_t;

const hyprof_wavelet_t *hyprof_wavelet_find(const char *name);
size_t hyprof_wavelet_count(void);
const hyprof_wavelet_t *hyprof_wavelet_at(size_t index);

/* Number of approximation coefficients after `levels` periodized levels:
 * ceil(bands / 2^levels). */
size_t hyprof_dwt_bands(size_t bands, int levels);
/* Largest usable level count for `bands` (at least one coefficient left that
 * came from two or more samples): floor(log2(bands)). */
int hyprof_dwt_max_levels(size_t bands);
/* The level count (1..max) whose hyprof_dwt_bands() is closest to `features`
 * (ties: more bands): how eap, emp and wmcd turn --features into levels. */
int hyprof_dwt_levels_for_features(size_t bands, long features);

/* Largest 2-D level for the wavelet on a width x height image:
 * pywt.dwt_max_level(min(width, height), wavelet length). */
int hyprof_dwt2_max_levels(size_t width, size_t height, const hyprof_wavelet_t *wavelet);

/* Spectral DWT feature extraction: for every pixel, the approximation
 * coefficients after `levels` levels of the Mallat decomposition with periodic
 * extension (PyWavelets mode='periodization'). `out` becomes an owned float32
 * BSQ cube of hyprof_dwt_bands() bands. */
hyprof_status_t hyprof_dwt_spectral(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                                    const hyprof_wavelet_t *wavelet, int levels,
                                    hyprof_cube_t *out);

#ifdef __cplusplus
}
#endif
#endif
