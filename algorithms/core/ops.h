/* The raster operations the registry points to, one per algorithms/ file. */
#ifndef HYPROF_OPS_H
#define HYPROF_OPS_H

#include "hyprof/registry.h"
#include "hyprof/wavelet.h"

/* Completes a result whose cube an API call has just filled: band name slots,
 * and the mask and nodata of the input `like`. */
hyprof_status_t hyprof__result_adopt(hyprof_result_t *res, const hyprof_cube_t *like);

hyprof_status_t hyprof__run_pca(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out);
hyprof_status_t hyprof__run_eadp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 const hyprof_cube_t *in, hyprof_result_t *out);
hyprof_status_t hyprof__run_eap(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out);
hyprof_status_t hyprof__run_dwt(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out);

/* The features of a profile (--reduction pca|dwt|none, with the operation's
 * components/levels/wavelet), named PC1.., A1.. or B1..; with none, `features`
 * is a view of `in`. Free with hyprof_cube_free and hyprof__free_names. */
hyprof_status_t hyprof__reduce(hyprof_ctx_t *ctx, const char *op, const hyprof_args_t *args,
                               const hyprof_cube_t *in, hyprof_cube_t *features, char ***names);
void hyprof__free_names(char **names, size_t n);
/* hyprof__reduce for operations with --features (P_FEATURES): with dwt, the
 * level count is --levels when given, else the one whose band count is
 * closest to --features (ties: more bands); *levels receives it (0 for pca
 * and none). */
hyprof_status_t hyprof__reduce_features(hyprof_ctx_t *ctx, const char *op,
                                        const hyprof_args_t *args, const hyprof_cube_t *in,
                                        hyprof_cube_t *feat, char ***names, int *levels);

hyprof_status_t hyprof__run_emp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out);
hyprof_status_t hyprof__run_wmcd(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 const hyprof_cube_t *in, hyprof_result_t *out);

/* Output band counts without running (hyprof_op_output_bands): one per
 * operation, beside its run function; the reduction's share in reduce.c. */
hyprof_status_t hyprof__bands_pca(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                  size_t *out_bands);
hyprof_status_t hyprof__bands_dwt(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                  size_t *out_bands);
hyprof_status_t hyprof__bands_eadp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                   size_t in_bands, size_t *out_bands);
hyprof_status_t hyprof__bands_eap(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                  size_t *out_bands);
hyprof_status_t hyprof__bands_emp(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                  size_t *out_bands);
hyprof_status_t hyprof__bands_wmcd(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                   size_t in_bands, size_t *out_bands);
hyprof_status_t hyprof__bands_sspp(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                   size_t *out_bands);
hyprof_status_t hyprof__bands_unmix(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                    size_t *out_bands);
/* Whether a run is pixel by pixel (hyprof_op_pixelwise_fn). */
int hyprof__pixelwise_pca(const hyprof_args_t *args);
int hyprof__pixelwise_dwt(const hyprof_args_t *args);
int hyprof__pixelwise_unmix(const hyprof_args_t *args);
/* Band names without running (hyprof_op_names_fn): one per operation,
 * beside its bands function. */
#define HYPROF__NAMES_FN(op)                                                              \
    hyprof_status_t hyprof__names_##op(hyprof_ctx_t *ctx, const hyprof_args_t *args,       \
                                       size_t width, size_t height, size_t in_bands,      \
                                       size_t out_bands, char **names)
HYPROF__NAMES_FN(pca);
HYPROF__NAMES_FN(dwt);
HYPROF__NAMES_FN(eadp);
HYPROF__NAMES_FN(eap);
HYPROF__NAMES_FN(emp);
HYPROF__NAMES_FN(wmcd);
HYPROF__NAMES_FN(sspp);
HYPROF__NAMES_FN(unmix);
/* names[i] = the formatted text (malloc'ed; a previous one is freed). */
hyprof_status_t hyprof__name(char **names, size_t i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The prefix of the features --reduction names: PC (pca), A (dwt), B (none). */
const char *hyprof__reduce_prefix(const hyprof_args_t *args);
/* Features --reduction gives for `in_bands` bands (checked as hyprof__reduce does). */
hyprof_status_t hyprof__reduce_bands(hyprof_ctx_t *ctx, const char *op,
                                     const hyprof_args_t *args, size_t in_bands,
                                     size_t *features);
hyprof_status_t hyprof__run_sspp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 const hyprof_cube_t *in, hyprof_result_t *out);
hyprof_status_t hyprof__run_unmix(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                  const hyprof_cube_t *in, hyprof_result_t *out);
/* --reduction dwt of an operation with --features, planned but not run (a
 * chain that runs the transform itself: emp, wmcd): the wavelet, the level
 * count hyprof__reduce_features would use, and the features' names A1..,
 * checked as hyprof__reduce_bands checks them. */
hyprof_status_t hyprof__reduce_dwt_plan(hyprof_ctx_t *ctx, const char *op,
                                        const hyprof_args_t *args, size_t in_bands,
                                        const hyprof_wavelet_t **wavelet, int *levels,
                                        char ***names);

#endif
