/* Cross-validation of one search candidate: its training pixels, already
 * scaled, on the fixed spatial folds, over the whole C x gamma grid. Folds run
 * one after the other with the grid points of a fold in parallel (each a
 * LIBSVM training), so that after each fold the candidate can be dropped when
 * it cannot reach the caller's bar any more: its best grid point's correct
 * pixels plus every pixel of the folds still to run is at most `beat`. */
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

hyprof_status_t hyprof__search_oof(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                   size_t n, const int *fold, int f, double c, double gamma,
                                   const double *q, size_t nq, int *q_label)
{
    (void)x, (void)bands, (void)y, (void)n, (void)fold, (void)f, (void)c, (void)gamma, (void)q;
    (void)nq, (void)q_label;
    return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "--search: this build has no LIBSVM");
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

/* The SVM (c, gamma) trained on the samples outside fold f. */
static hyprof_status_t fold_model(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                  size_t n, const int *fold, int f, double c, double gamma,
                                  hyprof_classifier_t **out)
{
    size_t ns = 0;
    double *xs = malloc(n * bands * sizeof *xs);
    int *ys = malloc(n * sizeof *ys);
    hyprof_classifier_t *m = hyprof__classifier_new(HYPROF_CLASSIFIER_SVM, bands, 1);
    hyprof_status_t st = xs && ys && m ? HYPROF_OK : HYPROF_ERR_NOMEM;
    for (size_t i = 0; st == HYPROF_OK && i < n; i++)
        if (fold[i] != f) {
            memcpy(xs + ns * bands, x + i * bands, bands * sizeof *xs);
            ys[ns++] = y[i];
        }
    if (st == HYPROF_OK) {
        hyprof_train_params_t p;
        hyprof_train_params_default(&p);
        p.c = &c, p.n_c = 1;
        p.gamma = &gamma, p.n_gamma = 1;
        st = hyprof__svm_train(ctx, m, xs, ys, ns, &p);
    } else {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu samples)", n);
    }
    free(xs);
    free(ys);
    if (st != HYPROF_OK)
        hyprof_classifier_free(&m);
    *out = m;
    return st;
}

/* q_label of the nq queries by model m. */
static hyprof_status_t predict(hyprof_ctx_t *ctx, const hyprof_classifier_t *m, const double *q,
                               size_t nq, int *q_label)
{
    const hyprof__svm_t *s = &m->svm;
    int failed = 0;
#pragma omp parallel num_threads(hyprof__threads(ctx))
    {
        double *kvalue = malloc(s->nsv * sizeof *kvalue + 1);
        int *votes = malloc(s->nr_class * sizeof *votes + 1);
        if (!kvalue || !votes) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 64)
        for (size_t i = 0; i < nq; i++)
            if (!failed)
                q_label[i] = hyprof__svm_predict_exact(s, m->bands, q + i * m->bands, kvalue,
                                                       votes);
        free(kvalue);
        free(votes);
    }
    return failed ? hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory") : HYPROF_OK;
}

hyprof_status_t hyprof__search_oof(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                   size_t n, const int *fold, int f, double c, double gamma,
                                   const double *q, size_t nq, int *q_label)
{
    hyprof_classifier_t *m = NULL;
    hyprof_status_t st = fold_model(ctx, x, bands, y, n, fold, f, c, gamma, &m);
    if (st == HYPROF_OK)
        st = predict(ctx, m, q, nq, q_label);
    hyprof_classifier_free(&m);
    return st;
}

#endif
