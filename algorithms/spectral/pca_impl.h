/* PCA steps shared by the CPU (pca.c) and CUDA (kernels/spectral/pca_*.cu)
 * backends. Data is float32 BSQ, i.e. a column-major npix x bands matrix. */
#ifndef HYPROF_PCA_IMPL_H
#define HYPROF_PCA_IMPL_H

#include "../core/internal.h"
#include "hyprof/registry.h"
#include "hyprof/spectral.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Apply step: out[p + k*npix] = sum_b (x[p + b*npix] - mean[b]) * vectors[b + k*bands]
 * for valid pixels, `nodata` for masked ones. */
typedef struct {
    const float *x;
    const uint8_t *mask;
    size_t npix, bands, components;
    const double *mean;      /* bands */
    const double *vectors;   /* bands x components column-major */
    float nodata;
    float *out;              /* npix * components, BSQ */
} hyprof_pca_apply_args_t;

/* Fit-transform on CUDA with the cube resident (see hyprof_pca_fit_args_t):
 * receives the projected components on the device. */
typedef hyprof_status_t (*hyprof_pca_device_fn)(void *device_user, const float *d_out,
                                                const hyprof_pca_apply_args_t *apply,
                                                int *consumed);

/* Fit step: mean of each band and the eigen-decomposition of the covariance
 * over valid pixels (divided by nvalid - 1), eigenvalues ascending as LAPACK's
 * dsyevd returns them; ordering and signs are fixed afterwards, once, in pca.c. */
typedef struct {
    const float *x;          /* npix * bands, BSQ */
    const uint8_t *mask;     /* npix, 1 = valid; NULL = all valid */
    size_t npix, bands;
    size_t nvalid;           /* number of valid pixels (>= 2) */
    double *mean;            /* out: bands */
    double *eigenvalues;     /* out: bands, ascending */
    double *eigenvectors;    /* out: bands x bands column-major, column j for eigenvalue j */
    /* Fit-transform: when `apply` is set, the backend goes on to project the
     * same cube once `finish(user)` has turned the raw decomposition into the
     * ordered, signed model that apply->mean and apply->vectors point to. The
     * CUDA backend then projects from the cube it already holds on the device
     * instead of uploading it a second time. */
    hyprof_pca_apply_args_t *apply;
    hyprof_status_t (*finish)(void *user);
    void *user;
    /* Fit-transform, CUDA, cube resident: when set, called with the projected
     * components still on the device (float, npix x components BSQ, nodata
     * where masked; valid during the call) before they are copied to
     * apply->out. Setting *consumed skips that copy: the caller took what it
     * needed on the device (the eadp operation diffuses them there). */
    hyprof_pca_device_fn on_device;
    void *device_user;
    /* Components the caller keeps: a backend may then return the
     * eigenvectors of the top `components` eigenvalues only (the other
     * columns zero; all eigenvalues are still returned). 0: all. */
    size_t components;
} hyprof_pca_fit_args_t;

/* Fit-transform (hyprof_pca_fit_transform) with `on_device` as above. */
hyprof_status_t hyprof__pca_fit_transform_device(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                                                 size_t components, hyprof_pca_model_t **model,
                                                 hyprof_cube_t *out,
                                                 hyprof_pca_device_fn on_device,
                                                 void *device_user);

hyprof_status_t hyprof__cpu_pca_fit(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cpu_pca_apply(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_pca_fit(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_pca_apply(hyprof_ctx_t *ctx, void *args);
/* Fit, `finish`, then apply (args: the fit's, with apply, finish and user set). */
hyprof_status_t hyprof__cuda_pca_fit_transform(hyprof_ctx_t *ctx, void *args);

/* hyprof__reduce (core/ops.h) with `on_device` passed to the PCA's
 * fit-transform when --reduction is pca. */
hyprof_status_t hyprof__reduce_device(hyprof_ctx_t *ctx, const char *op,
                                      const hyprof_args_t *args, const hyprof_cube_t *in,
                                      hyprof_cube_t *features, char ***names,
                                      hyprof_pca_device_fn on_device, void *device_user);

#ifdef __cplusplus
}
#endif
#endif
