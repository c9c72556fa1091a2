/* What emp.c shares with wmcd.c: checks, the quantise-and-dispatch run, and
 * the operation frame (arguments, reduction, band names). */
#ifndef HYPROF_EMP_INTERNAL_H
#define HYPROF_EMP_INTERNAL_H

#include "emp_impl.h"
#include "hyprof/registry.h"

#define HYPROF__EMP_MAX_DEVICES 64

/* Sizes, structuring element and radii (strictly increasing, 2r+1 within the
 * smaller side; width and height at least 2). */
hyprof_status_t hyprof__emp_check(hyprof_ctx_t *ctx, const char *op, size_t width,
                                  size_t height, const hyprof_emp_params_t *p);

/* Runs the chain on the backend the context chooses: the features of `in`
 * (its spectral DWT by `spec` to spec_levels levels, or its bands when spec
 * is NULL), quantised to 8 bits, their EMP and, when `wavelet` is set, its
 * W-MCD. Allocates `out`; `range` (optional): 2 per feature. */
hyprof_status_t hyprof__emp_run(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *in,
                                const hyprof_wavelet_t *spec, int spec_levels,
                                const hyprof_emp_params_t *p, const hyprof_wavelet_t *wavelet,
                                const int levels[3], int hard, hyprof_cube_t *out,
                                double *range);

/* The EMP parameters of an operation's arguments (--radii, --se, --devices). */
typedef struct {
    hyprof_emp_params_t p;
    int radii[HYPROF_EMP_MAX_RADII];
    int devices[HYPROF__EMP_MAX_DEVICES];
} hyprof__emp_op_t;

hyprof_status_t hyprof__emp_op_params(hyprof_ctx_t *ctx, const char *op,
                                      const hyprof_args_t *args, hyprof__emp_op_t *o);

/* What the chain starts from: the input and its spectral DWT (spec set:
 * --reduction dwt), or computed features (spec NULL); nfeat features. */
typedef struct {
    const hyprof_cube_t *cube;
    const hyprof_wavelet_t *spec;
    int spec_levels;
    size_t nfeat;
} hyprof__emp_src_t;

typedef hyprof_status_t (*hyprof__emp_body_fn)(hyprof_ctx_t *ctx, const hyprof__emp_src_t *src,
                                               char **names, double *range, void *user);

hyprof_status_t hyprof__emp_op_frame(hyprof_ctx_t *ctx, const char *op,
                                     const hyprof_args_t *args, const hyprof_cube_t *in,
                                     hyprof__emp_body_fn body, void *user);

/* The quantisation metadata of `nfeat` features under `prefix`. */
hyprof_status_t hyprof__emp_describe(hyprof_result_t *out, const char *prefix, char **names,
                                     size_t nfeat, const double *range, int dwt_levels);
/* Band names in EMP order, `per` bands per plane (named " j=levels[k]" when
 * levels is set), for out_bands bands: "A1 closing r=7 j=1". */
hyprof_status_t hyprof__emp_band_names(const hyprof_args_t *args, const hyprof_emp_params_t *p,
                                       const int *levels, size_t per, size_t out_bands,
                                       char **names);

#endif
