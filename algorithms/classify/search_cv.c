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

/* LIBSVM rows viewing x (n x bands). */
static struct svm_node **make_rows(const double *x, size_t bands, size_t n,
                                   struct svm_node **nodes)
{
    *nodes = malloc(n * (bands + 1) * sizeof **nodes);
    struct svm_node **rows = malloc((n ? n : 1) * sizeof *rows);
    if (!*nodes || !rows) {
        free(*nodes), free(rows);
        *nodes = NULL;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        rows[i] = *nodes + i * (bands + 1);
        for (size_t b = 0; b < bands; b++) {
            rows[i][b].index = (int)b + 1;
            rows[i][b].value = x[i * bands + b];
        }
        rows[i][bands].index = -1;
    }
    return rows;
}

/* One fold for every grid point, in parallel; adds to correct[g]. */
static hyprof_status_t run_fold(hyprof_ctx_t *ctx, struct svm_node **rows, const int *y,
                                size_t n, const int *fold, int f,
                                const hyprof_train_params_t *grid, long *correct)
{
    size_t npoints = grid->n_c * grid->n_gamma;
    int failed = 0, stop = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(hyprof__threads(ctx))
    for (size_t g = 0; g < npoints; g++) {
        if (stop || failed)
            continue;
        long ok = hyprof__svm_fold_correct(rows, y, n, fold, f, grid->c[g / grid->n_gamma],
                                           grid->gamma[g % grid->n_gamma]);
        if (ok < 0) {
#pragma omp atomic write
            failed = 1;
            continue;
        }
        correct[g] += ok;
        if (hyprof_ctx_cancelled(ctx)) {
#pragma omp atomic write
            stop = 1;
        }
    }
    /* A cancel request is seen by the caller's next progress call. */
    return failed ? hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory in cross-validation")
                  : HYPROF_OK;
}

hyprof_status_t hyprof__search_cv(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                  size_t n, const int *fold, int k,
                                  const hyprof_train_params_t *grid, long beat, long *correct,
                                  size_t *best_g, int *folds_run)
{
    size_t npoints = grid->n_c * grid->n_gamma;
    struct svm_node *nodes = NULL;
    struct svm_node **rows = make_rows(x, bands, n, &nodes);
    long *count = calloc(npoints, sizeof *count);
    *correct = 0, *best_g = 0, *folds_run = 0;
    if (!rows || !count) {
        free(rows), free(nodes), free(count);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu samples)", n);
    }
    svm_set_print_string_function(quiet);
    long remaining = (long)n;
    hyprof_status_t st = HYPROF_OK;
    for (int f = 0; f < k && st == HYPROF_OK; f++) {
        st = run_fold(ctx, rows, y, n, fold, f, grid, count);
        for (size_t i = 0; i < n; i++)
            remaining -= fold[i] == f;
        *folds_run = f + 1;
        for (size_t g = 1; g < npoints; g++)
            if (count[g] > count[*best_g])
                *best_g = g;
        *correct = count[*best_g];
        if (st == HYPROF_OK)
            st = hyprof__progress(ctx, (double)(f + 1) / (double)k, "search");
        if (*correct + remaining <= beat)
            break;
    }
    free(rows);
    free(nodes);
    free(count);
    return st;
}

#endif
