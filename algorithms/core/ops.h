/* The raster operations the registry points to, one per algorithms/ file. */
#ifndef HYPROF_OPS_H
#define HYPROF_OPS_H

#include "hyprof/registry.h"

/* Completes a result whose cube an API call has just filled: band name slots,
 * and the mask and nodata of the input `like`. */
hyprof_status_t hyprof__result_adopt(hyprof_result_t *res, const hyprof_cube_t *like);

hyprof_status_t hyprof__run_pca(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out);
hyprof_status_t hyprof__run_dwt(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out);

#endif
