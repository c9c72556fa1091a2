/* The EMP / W-MCD step shared by the CPU backend (reconstruct.c, denoise in
 * wavelet/dwt2.c) and the CUDA one (kernels/morphology/emp.cu): the profiles
 * of a batch of 8-bit bands, and optionally their denoising, in one call so
 * that the GPU keeps everything on the device. Semantics:
 * include/hyprof/morphology.h. */
#ifndef HYPROF_EMP_IMPL_H
#define HYPROF_EMP_IMPL_H

#include "../core/internal.h"
#include "hyprof/morphology.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* The chain's input: width*height*in_bands float32 BSQ; the features are
     * its spectral DWT (spec_levels levels of the low-pass filter spec_lo,
     * spec_flen taps: hyprof_dwt_args_t's definition) or, with spec_levels 0,
     * the bands themselves (in_bands == bands). */
    const float *x;
    size_t in_bands;
    int spec_levels;
    const double *spec_lo;
    size_t spec_flen;
    const uint8_t *mask;   /* width*height, 1 = valid, or NULL */
    size_t width, height, bands; /* bands: features */
    const int *radii;      /* strictly increasing */
    size_t nradii;
    hyprof_se_t se;
    const int *devices;    /* CUDA devices (NULL: the context's); one may repeat */
    size_t ndevices;
    /* W-MCD (wavelet NULL: EMP only) */
    const hyprof_wavelet_t *wavelet;
    int levels[3];
    int hard;
    float nodata;          /* what masked pixels receive */
    float *out;            /* bands * planes (* 3 with W-MCD) planes */
    double *range;         /* 2 * bands: each feature's quantisation min and max */
    const char *op;        /* name in messages and progress */
} hyprof_emp_args_t;

/* Every feature band quantised to 8 bits as hyprof_quantise(256) does it
 * (range: 2 * bands): the CPU backend's, and the rule the CUDA one follows. */
hyprof_status_t hyprof__emp_quantise(hyprof_ctx_t *ctx, const hyprof_emp_args_t *a,
                                     const float *feat, uint8_t *q);

/* Copies `cols` columns of m floats (column c from src + c*src_ld) into
 * dst + c*m on `threads` OpenMP threads: the CUDA backend's packing of a
 * pixel chunk into page-locked staging, and its copying of the output out of
 * it. `stream`: streaming stores (for a destination nobody reads soon: the
 * output; staging that the DMA reads next is better left in the cache). */
void hyprof__pack_cols(int threads, float *dst, const float *src, size_t src_ld, size_t m,
                       size_t cols, int stream);

/* Planes of one band's EMP: 2 nradii + 1. */
static inline size_t hyprof__emp_planes(size_t nradii) { return 2 * nradii + 1; }

/* Half-widths of the structuring element's rows dy = -r..r: hw[dy + r]
 * (the row holds x = -hw..hw). */
void hyprof__se_rows(hyprof_se_t se, int r, int *hw);

hyprof_status_t hyprof__cpu_emp(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_emp(hyprof_ctx_t *ctx, void *args);

#ifdef __cplusplus
}
#endif
#endif
