/* Cross-validation of one search candidate: its training pixels, already
 * scaled, on the fixed spatial folds, over the whole C x gamma grid. Folds run
 * one after the other with the grid points of a fold in parallel (each a
 * LIBSVM training), so that after each fold the candidate can be dropped when
 * it cannot win any more: its best grid point's correct pixels plus every
 * pixel of the folds still to run is at most the best candidate's count. */
#include "search_impl.h"

#include <stdlib.h>
#include <string.h>

#define OP "train"

#ifndef HYPROF_HAVE_LIBSVM

hyprof_status_t hyprof__search_cv(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                  size_t n, const int *fold, int k,
                                  const hyprof_train_params_t *grid, long beat, long *correct,
                                  size_t *best_g, int *folds_run)
{
    (void)x, (void)bands, (void)y, (void)n, (void)fold, (void)k, (void)grid, (void)beat;
    *correct = 0, *best_g = 0, *folds_run = 0;
    return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                         "--search: this build of hyprof has no LIBSVM (install libsvm-dev "
                         "and rebuild)");
}

#else
#include <svm.h>

static void quiet(const char *s) { (void)s; }

hyprof_status_t hyprof__search_cv(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                  size_t n, const int *fold, int k,
                                  const hyprof_train_params_t *grid, long beat, long *correct,
                                  size_t *best_g, int *folds_run)
{
    size_t npoints = grid->n_c * grid->n_gamma;
    long *count = calloc(npoints, sizeof *count);
    *correct = 0, *best_g = 0, *folds_run = 0;
    if (!count)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    svm_set_print_string_function(quiet);
    hyprof__cv_set_t s = {x, bands, y, n, fold, NULL};
    long remaining = (long)n;
    hyprof_status_t st = hyprof__cv_prepare(ctx, &s);
    for (int f = 0; f < k && st == HYPROF_OK; f++) {
        double saved[2];
        hyprof__progress_push(ctx, (double)f / k, (double)(f + 1) / k, saved);
        st = hyprof__cv_grid(ctx, &s, f, f + 1, grid, count);
        hyprof__progress_pop(ctx, saved);
        for (size_t i = 0; i < n; i++)
            remaining -= fold[i] == f;
        *folds_run = f + 1;
        for (size_t g = 1; g < npoints; g++)
            if (count[g] > count[*best_g])
                *best_g = g;
        *correct = count[*best_g];
        if (*correct + remaining <= beat)
            break;
    }
    hyprof__cv_release(&s);
    free(count);
    return st;
}

#endif
