/* Backends of the ELM's output weights: both take the model's seeded input
 * weights and biases (generated once on the host by hyprof__elm_train) and
 * fill e->beta (neurons x nclasses, row-major) with the solution of
 * (H'H + I/C) beta = H'T, H = sigmoid(X W' + b), T = +1 for the sample's class
 * and -1 elsewhere. */
#ifndef HYPROF_ELM_IMPL_H
#define HYPROF_ELM_IMPL_H

#include "classifier.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    hyprof__elm_t *elm;  /* w, bias set; beta allocated, filled by the backend */
    size_t bands, nclasses;
    const double *x;     /* n x bands, row-major, scaled */
    const int *y;        /* n class indices */
    size_t n;
} hyprof__elm_solve_args_t;

hyprof_status_t hyprof__cpu_elm_solve(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_elm_solve(hyprof_ctx_t *ctx, void *args);

/* The error of both backends when the Cholesky factorisation fails (info > 0:
 * the leading minor of that order is not positive definite). */
hyprof_status_t hyprof__elm_not_positive_definite(hyprof_ctx_t *ctx, int info);

#ifdef __cplusplus
}
#endif
#endif
