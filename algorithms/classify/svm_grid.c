/* Cross-validation over a C x gamma grid with LIBSVM, shared by `train`'s grid
 * search and `train --search`. The RBF kernel of every pair of training
 * samples is computed once per gamma (from the squared distances, computed
 * once) and handed to LIBSVM as a precomputed kernel, so the solver's kernel
 * evaluations, its main cost, become table lookups, shared by every C and
 * every fold of that gamma. Tasks (C x folds) run in parallel, one gamma after
 * the other. When the tables do not fit in a quarter of the free host memory,
 * LIBSVM computes the RBF kernel itself from the samples (same grid, same
 * folds). Only the cross-validation uses the tables: the final model is
 * trained as an ordinary RBF model. */
#include "classifier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef HYPROF_HAVE_LIBSVM
#include <svm.h>

#define OP "train"

/* Pairwise squared distances (n x n) into *out, or NULL there when they or a
 * kernel table would not fit. A cancel stops the rows early (then
 * HYPROF_ERR_CANCELLED and *out NULL). */
static hyprof_status_t distances(hyprof_ctx_t *ctx, const double *x, size_t bands, size_t n,
                                 double **out)
{
    *out = NULL;
    size_t table = n * (n + 1) * sizeof(struct svm_node) + n * n * sizeof(double);
    if (table > hyprof_host_memory_available() / 4)
        return HYPROF_OK;
    double *d = malloc(n * n * sizeof *d);
    if (!d)
        return HYPROF_OK;
#pragma omp parallel for schedule(dynamic, 16) num_threads(hyprof__threads(ctx))
    for (size_t i = 0; i < n; i++) {
        if (hyprof_ctx_cancelled(ctx))
            continue;
        for (size_t j = 0; j <= i; j++) {
            double s = 0.0;
            for (size_t b = 0; b < bands; b++) {
                double t = x[i * bands + b] - x[j * bands + b];
                s += t * t;
            }
            d[i * n + j] = d[j * n + i] = s;
        }
    }
    if (hyprof_ctx_cancelled(ctx)) {
        free(d);
        return hyprof__progress(ctx, 0.0, "cross-validation");
    }
    *out = d;
    return HYPROF_OK;
}

/* LIBSVM's precomputed-kernel rows: row i is {0: i + 1, j + 1: K(i, j)}. */
static void kernel_rows(hyprof_ctx_t *ctx, const double *d, size_t n, double gamma,
                        struct svm_node *nodes, struct svm_node **rows)
{
#pragma omp parallel for schedule(static) num_threads(hyprof__threads(ctx))
    for (size_t i = 0; i < n; i++) {
        if (hyprof_ctx_cancelled(ctx))
            continue; /* the caller reports it */
        struct svm_node *r = nodes + i * (n + 2);
        r[0].index = 0;
        r[0].value = (double)(i + 1);
        for (size_t j = 0; j < n; j++) {
            r[j + 1].index = (int)j + 1;
            r[j + 1].value = exp(-gamma * d[i * n + j]);
        }
        r[n + 1].index = -1;
        rows[i] = r;
    }
}

/* Dense rows for LIBSVM's own RBF kernel. */
static void sample_rows(const double *x, size_t bands, size_t n, struct svm_node *nodes,
                        struct svm_node **rows)
{
    for (size_t i = 0; i < n; i++) {
        rows[i] = nodes + i * (bands + 1);
        for (size_t b = 0; b < bands; b++) {
            rows[i][b].index = (int)b + 1;
            rows[i][b].value = x[i * bands + b];
        }
        rows[i][bands].index = -1;
    }
}

typedef struct {
    hyprof_ctx_t *ctx;
    const hyprof__cv_set_t *s;
    const hyprof_train_params_t *grid;
    int f0, f1;
    long *correct;
    size_t done, total;
} run_t;

/* Every C and fold of gamma index gi (or of every gamma when gi < 0) on `rows`. */
static hyprof_status_t run_tasks(run_t *r, struct svm_node **rows, int precomputed, long gi)
{
    const hyprof_train_params_t *p = r->grid;
    size_t nf = (size_t)(r->f1 - r->f0), ng = gi < 0 ? p->n_gamma : 1;
    size_t ntasks = p->n_c * ng * nf;
    int failed = 0, stop = 0;
    char why[96] = "";
#pragma omp parallel for schedule(dynamic, 1) num_threads(hyprof__threads(r->ctx))
    for (size_t t = 0; t < ntasks; t++) {
        if (stop || failed)
            continue;
        int f = r->f0 + (int)(t % nf);
        size_t ci = t / nf / ng, gj = gi < 0 ? t / nf % ng : (size_t)gi;
        size_t g = ci * p->n_gamma + gj;
        char my_why[96] = "";
        long ok = hyprof__svm_fold_correct(r->ctx, rows, r->s->y, r->s->n, r->s->fold, f,
                                           p->c[ci], p->gamma[gj], precomputed, my_why);
        size_t done;
#pragma omp atomic capture
        done = ++r->done;
        if (ok == -2) { /* cancelled */
#pragma omp atomic write
            stop = 1;
            continue;
        }
        if (ok < 0) {
#pragma omp critical(hyprof_svm_grid_why)
            if (!why[0])
                memcpy(why, my_why, sizeof why);
#pragma omp atomic write
            failed = 1;
            continue;
        }
#pragma omp atomic
        r->correct[g] += ok;
        if (hyprof__progress_omp(r->ctx, (double)done / (double)r->total, "cross-validation")) {
#pragma omp atomic write
            stop = 1;
        }
    }
    if (stop)
        return hyprof__progress(r->ctx, 1.0, "cross-validation");
    if (failed)
        return hyprof__error(r->ctx, why[0] && !strstr(why, "memory") ? HYPROF_ERR_INTERNAL
                                                                      : HYPROF_ERR_NOMEM,
                             OP, "cross-validation failed: %s", why[0] ? why : "out of memory");
    return HYPROF_OK;
}

static hyprof_status_t precomputed(run_t *r, const double *d)
{
    size_t n = r->s->n;
    struct svm_node *nodes = malloc(n * (n + 2) * sizeof *nodes);
    struct svm_node **rows = malloc(n * sizeof *rows);
    hyprof_status_t st = nodes && rows ? HYPROF_OK : HYPROF_ERR_NOMEM;
    if (st != HYPROF_OK)
        st = hyprof__error(r->ctx, st, OP, "out of memory (kernel table of %zu samples)", n);
    for (size_t gi = 0; st == HYPROF_OK && gi < r->grid->n_gamma; gi++) {
        kernel_rows(r->ctx, d, n, r->grid->gamma[gi], nodes, rows);
        st = hyprof_ctx_cancelled(r->ctx) ? hyprof__progress(r->ctx, 1.0, "cross-validation")
                                          : run_tasks(r, rows, 1, (long)gi);
    }
    free(nodes);
    free(rows);
    return st;
}

static hyprof_status_t direct(run_t *r)
{
    size_t n = r->s->n, B = r->s->bands;
    struct svm_node *nodes = malloc(n * (B + 1) * sizeof *nodes);
    struct svm_node **rows = malloc(n * sizeof *rows);
    hyprof_status_t st = nodes && rows ? HYPROF_OK : HYPROF_ERR_NOMEM;
    if (st == HYPROF_OK) {
        sample_rows(r->s->x, B, n, nodes, rows);
        st = run_tasks(r, rows, 0, -1);
    } else {
        st = hyprof__error(r->ctx, st, OP, "out of memory (%zu samples)", n);
    }
    free(nodes);
    free(rows);
    return st;
}

hyprof_status_t hyprof__cv_prepare(hyprof_ctx_t *ctx, hyprof__cv_set_t *s)
{
    return distances(ctx, s->x, s->bands, s->n, &s->dist);
}

void hyprof__cv_release(hyprof__cv_set_t *s)
{
    free(s->dist);
    s->dist = NULL;
}

hyprof_status_t hyprof__cv_grid(hyprof_ctx_t *ctx, const hyprof__cv_set_t *s, int f0, int f1,
                                const hyprof_train_params_t *grid, long *correct)
{
    run_t r = {ctx, s, grid, f0, f1, correct, 0,
               grid->n_c * grid->n_gamma * (size_t)(f1 - f0)};
    return s->dist ? precomputed(&r, s->dist) : direct(&r);
}

#endif
