/* The wavelet family's private declarations: the spectral DWT step shared by
 * the CPU (dwt.c) and CUDA (kernels/wavelet/dwt.cu) backends, and the CPU 2-D
 * denoising of one plane (dwt2.c) that the W-MCD chain calls
 * (morphology/reconstruct.c). */
#ifndef HYPROF_DWT_IMPL_H
#define HYPROF_DWT_IMPL_H

#include "../core/internal.h"
#include "hyprof/wavelet.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For every pixel p, the signal s[b] = x[p + b*npix], b < bands, goes through
 * `levels` periodized analysis steps with the low-pass filter `lo` (length
 * flen, even):
 *   n' = n + (n odd)            (an odd signal repeats its last sample)
 *   a[o] = sum_j lo[j] * s[(flen/2 + 2*o - j) mod n'],  o < n'/2
 * exactly as PyWavelets' downsampling_convolution_periodization. Arithmetic
 * is double; out[p + k*npix] receives a[k] as float (k < out_bands) for valid
 * pixels and `nodata` for masked ones. */
typedef struct {
    const float *x;
    const uint8_t *mask;
    size_t npix, bands;
    int levels;
    const double *lo;
    size_t flen;
    size_t out_bands;
    float nodata;
    float *out;
} hyprof_dwt_args_t;

hyprof_status_t hyprof__cpu_dwt_spectral(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_dwt_spectral(hyprof_ctx_t *ctx, void *args);

/* The CUDA kernel alone, for chains that keep the features on the device
 * (kernels/morphology/emp.cu): the DWT of m pixels of a device BSQ block
 * (band b of pixel i at x[i + b*ld_in]) into out[i + k*ld_out], k < out_bands,
 * queued on `stream` (a cudaStream_t) of the current device; no mask (every
 * pixel is transformed). levels 0 copies. */
hyprof_status_t hyprof__cuda_dwt_launch(hyprof_ctx_t *ctx, const char *op, const float *x,
                                        size_t ld_in, size_t m, size_t bands, int levels,
                                        const double *lo, size_t flen, size_t out_bands,
                                        float *out, size_t ld_out, void *stream);

/* CPU W-MCD of one plane (row-major width x height, n = w*h, as double):
 * out[k * n + p] for levels[k], k < 3. Returns 0, or -1 when out of memory.
 * (dwt2.c) */
int hyprof__wmcd_plane(const double *x, size_t width, size_t height,
                       const hyprof_wavelet_t *w, const int levels[3], int hard, double *out);
/* The universal threshold of a plane from |HH1| (n1 values, reordered):
 * median / 0.6745 * sqrt(2 ln npix), the median as NumPy's (mean of the two
 * middle values for an even count). */
double hyprof__universal_threshold(double *abs_hh1, size_t n1, size_t npix);

#ifdef __cplusplus
}
#endif
#endif
