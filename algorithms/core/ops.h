/* The raster operations the registry points to, one per algorithms/ file. */
#ifndef HYPROF_OPS_H
#define HYPROF_OPS_H

#include "hyprof/registry.h"

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
hyprof_status_t hyprof__run_sspp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 const hyprof_cube_t *in, hyprof_result_t *out);
hyprof_status_t hyprof__run_unmix(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                  const hyprof_cube_t *in, hyprof_result_t *out);

#endif
