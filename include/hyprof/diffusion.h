/* Non-linear diffusion by Fast Explicit Diffusion (FED) and the extended
 * anisotropic diffusion profile (EADP). */
#ifndef HYPROF_DIFFUSION_H
#define HYPROF_DIFFUSION_H

#include "hyprof/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    HYPROF_DIFFUSIVITY_G1 = 1, /* exp(-|grad|^2 / k^2)              (Perona-Malik 1) */
    HYPROF_DIFFUSIVITY_G2 = 2, /* 1 / (1 + |grad|^2 / k^2)          (Perona-Malik 2, default) */
    HYPROF_DIFFUSIVITY_G3 = 3  /* 1 - exp(-3.315 / (|grad|/k)^8)    (Weickert) */
} hyprof_diffusivity_t;

/* The arithmetic of the CUDA backend's FED steps. The CPU backend computes in
 * double either way. */
typedef enum {
    HYPROF_EADP_FLOAT = 0, /* float u and conductances (default): within 1e-4 of double */
    HYPROF_EADP_DOUBLE = 1 /* double, in the CPU's order: the CPU's result with g2 */
} hyprof_eadp_precision_t;

typedef struct {
    double sigma;             /* Gaussian pre-smoothing (> 0), kernel radius ceil(3 sigma) */
    double percentile;        /* contrast k from this percentile of |grad|, in (0, 1) */
    double contrast;          /* k given directly when > 0 (percentile ignored) */
    hyprof_diffusivity_t diffusivity;
    const double *times;      /* increasing process times T_1 < ... < T_C (> 0) */
    size_t ntimes;
    int cycles;               /* FED cycles per increment T_i - T_(i-1) (>= 1) */
    hyprof_eadp_precision_t precision; /* CUDA FED arithmetic (HYPROF_EADP_FLOAT) */
} hyprof_eadp_params_t;

/* Sets the seed paper's defaults: sigma 1, percentile 0.7, g2, one cycle, and
 * no times (the caller provides them); precision float. */
void hyprof_eadp_params_default(hyprof_eadp_params_t *p);

/* For every band X of `in` (features: principal components, wavelet
 * coefficients or raw bands), the anisotropic diffusion profile
 * {X, Diff(X, T_1), ..., Diff(X, T_C)}; `out` becomes an owned float32 BSQ
 * cube of bands * (C + 1) bands in that order. Masked pixels take no part and
 * come out as nodata. `contrast_out` (optional, bands entries) receives the k
 * used for each band. */
hyprof_status_t hyprof_eadp(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                            const hyprof_eadp_params_t *params, hyprof_cube_t *out,
                            double *contrast_out);

/* FED schedule: the number of steps of one cycle of length t (Eq. 8 of the
 * EADP paper, tau_max = 0.25) and its step sizes (Eq. 7, scaled to sum to t),
 * in Leja order (of the eigenvalues 1/tau they damp), which keeps both the
 * intermediate values and the rounding errors from being amplified by the
 * long steps (float32 stays within 1e-5 of float64 on real data). Returns the step count (0 for t <= 0 or
 * on allocation failure); fills tau when not NULL (room for the count). */
size_t hyprof_fed_steps(double t, double *tau);

#ifdef __cplusplus
}
#endif
#endif
