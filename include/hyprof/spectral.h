/* Spectral feature extraction: PCA. */
#ifndef HYPROF_SPECTRAL_H
#define HYPROF_SPECTRAL_H

#include "hyprof/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A fitted PCA: band means, components (unit vectors, by decreasing
 * eigenvalue, sign fixed so the largest-magnitude loading is positive). */
typedef struct hyprof_pca_model hyprof_pca_model_t;

/* Fits `components` principal components on the valid pixels of `in`. */
hyprof_status_t hyprof_pca_fit(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                               size_t components, hyprof_pca_model_t **model);
/* Projects `in` on the model: `out` becomes an owned float32 BSQ cube with one
 * band per component; masked pixels get the input's nodata (or NaN). */
hyprof_status_t hyprof_pca_apply(hyprof_ctx_t *ctx, const hyprof_pca_model_t *model,
                                 const hyprof_cube_t *in, hyprof_cube_t *out);

/* Fit and apply on the same cube in one call (scikit-learn's fit_transform):
 * the same model and output as hyprof_pca_fit then hyprof_pca_apply, but the
 * CUDA backend uploads the cube once and projects it where it already lies. */
hyprof_status_t hyprof_pca_fit_transform(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                                         size_t components, hyprof_pca_model_t **model,
                                         hyprof_cube_t *out);

size_t hyprof_pca_model_bands(const hyprof_pca_model_t *model);
size_t hyprof_pca_model_components(const hyprof_pca_model_t *model);
const double *hyprof_pca_model_mean(const hyprof_pca_model_t *model);       /* bands */
/* Component k is components[k*bands .. k*bands+bands-1]. */
const double *hyprof_pca_model_vectors(const hyprof_pca_model_t *model);
const double *hyprof_pca_model_eigenvalues(const hyprof_pca_model_t *model); /* components */
double hyprof_pca_model_total_variance(const hyprof_pca_model_t *model);
size_t hyprof_pca_model_samples(const hyprof_pca_model_t *model);

/* Text format, exact to the last bit (%.17g); written atomically. */
hyprof_status_t hyprof_pca_model_save(hyprof_ctx_t *ctx, const hyprof_pca_model_t *model,
                                      const char *path);
hyprof_status_t hyprof_pca_model_load(hyprof_ctx_t *ctx, const char *path,
                                      hyprof_pca_model_t **model);
void hyprof_pca_model_free(hyprof_pca_model_t **model);

#ifdef __cplusplus
}
#endif
#endif
