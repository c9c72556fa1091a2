/* EADP step shared by the CPU (eadp.c) and CUDA (kernels/diffusion/eadp_*.cu)
 * backends: the whole diffusion profile of a batch of feature bands.
 *
 * Exact semantics, per band u (float32 input, all arithmetic in double), with
 * m the validity mask (1 valid, 0 nodata; all valid when mask is NULL):
 *
 * 1. Smoothing, a normalised separable Gaussian convolution:
 *      s = Gy*(Gx*(m u)) / Gy*(Gx*m)      (s = 0 where the denominator is 0)
 *    1-D weights w_j = exp(-j^2 / (2 sigma^2)), j = -r..r, r = ceil(3 sigma),
 *    borders by half-sample reflection: index -1 -> 0, -2 -> 1, n -> n-1,
 *    n+1 -> n-2 (repeated until inside, for images smaller than r).
 * 2. Scharr derivatives of s, same reflection (-1 -> 0, n -> n-1):
 *      gx = [3(s[y-1][x+1]-s[y-1][x-1]) + 10(s[y][x+1]-s[y][x-1]) + 3(s[y+1][x+1]-s[y+1][x-1])]/32
 *      gy = the same with x and y exchanged;  G = gx^2 + gy^2 (squared magnitude).
 * 3. Contrast k: `contrast` when > 0; else the `percentile` (in (0,1)) of
 *    sqrt(G) over the valid pixels, linear interpolation between order
 *    statistics at position percentile*(n-1) (NumPy's default). If that k is
 *    not > 0: the same percentile over the valid pixels with G > 0; if there
 *    are none (a constant band): k = 1 (any k gives g = 1 then).
 * 4. Diffusivity, fixed for the whole profile: with r = G / k^2,
 *      g1 = exp(-r),  g2 = 1 / (1 + r),  g3 = r > 0 ? 1 - exp(-3.315 / r^4) : 1.
 * 5. Profile: out band 0 = u; then for i = 1..ntimes, starting from the
 *    previous result, `cycles` FED cycles, each the steps tau[0..nsteps-1]
 *    (the schedule of increment i, in hyprof_fed_steps' Leja order:
 *    apply them in the order given), each step Jacobi:
 *      u'(p) = u(p) + tau * sum over the 4-neighbours q inside the image with
 *              m(p) and m(q) of (g(p) + g(q))/2 * (u(q) - u(p))
 *    out band i = u after increment i. Masked pixels hold u = 0 (never their
 *    input value: it may be NaN) and get `nodata` in every
 *    output band. Sum over valid pixels is conserved exactly up to rounding.
 * Output layout: band b's profile occupies out bands b*(ntimes+1) .. b*(ntimes+1)+ntimes. */
#ifndef HYPROF_EADP_IMPL_H
#define HYPROF_EADP_IMPL_H

#include "../core/internal.h"
#include "hyprof/diffusion.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const float *x;            /* width*height*bands, BSQ */
    const uint8_t *mask;       /* width*height or NULL */
    size_t width, height, bands;
    double sigma, percentile, contrast;
    hyprof_diffusivity_t diffusivity;
    size_t ntimes;             /* number of increments C */
    int cycles;
    const size_t *nsteps;      /* ntimes: steps per cycle of increment i */
    const double *const *tau;  /* ntimes arrays of nsteps[i] step sizes */
    float nodata;
    float *out;                /* width*height*bands*(ntimes+1), BSQ */
    double *contrast_out;      /* bands: the k used */
    hyprof_eadp_precision_t precision; /* the CUDA FED's arithmetic (the CPU: double) */
} hyprof_eadp_args_t;

hyprof_status_t hyprof__cpu_eadp(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_eadp(hyprof_ctx_t *ctx, void *args);
/* The CUDA backend with the input bands already on the current device:
 * d_x replaces args->x (same layout). Called from inside the PCA's CUDA
 * backend (the eadp operation with --reduction pca), never dispatched. */
hyprof_status_t hyprof__cuda_eadp_from_device(hyprof_ctx_t *ctx, const hyprof_eadp_args_t *args,
                                              const float *d_x);

#ifdef __cplusplus
}
#endif
#endif
