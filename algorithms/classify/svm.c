/* RBF C-SVC: LIBSVM's prediction formula reimplemented exactly (for builds
 * without LIBSVM and for the CUDA path's recheck of borderline pixels), and,
 * when LIBSVM is linked, training with a cross-validated grid over C and
 * gamma run in parallel (OpenMP over grid points x folds). Every svm_train
 * runs in a child process (svm_child.c), so that a cancellation stops it
 * at once instead of waiting for LIBSVM to return. */
#include "classifier.h"
#include "svm_child.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HYPROF_HAVE_LIBSVM
#include <svm.h>
#endif
#ifdef _OPENMP
#include <omp.h>
static int omp_threads(void) { return omp_get_max_threads(); }
#else
static int omp_threads(void) { return 1; }
#endif

#define OP "train"

int hyprof__svm_predict_exact(const hyprof__svm_t *s, size_t bands, const double *x,
                              double *kvalue, int *votes)
{
    /* Kernel::k_function, RBF, on dense vectors: the squared differences are
     * added in index order, as LIBSVM's sparse merge does (an index missing
     * from one side adds value*value, the same number as (value - 0)^2). */
    for (size_t i = 0; i < s->nsv; i++) {
        const double *v = s->sv + i * bands;
        double sum = 0.0;
        for (size_t b = 0; b < bands; b++) {
            double d = x[b] - v[b];
            sum += d * d;
        }
        kvalue[i] = exp(-s->gamma * sum);
    }
    /* svm_predict_values for C_SVC. */
    size_t nc = s->nr_class, p = 0;
    size_t start[nc];
    start[0] = 0;
    for (size_t i = 1; i < nc; i++)
        start[i] = start[i - 1] + (size_t)s->nsv_class[i - 1];
    for (size_t i = 0; i < nc; i++)
        votes[i] = 0;
    for (size_t i = 0; i < nc; i++)
        for (size_t j = i + 1; j < nc; j++) {
            double sum = 0.0;
            const double *coef1 = s->coef + (j - 1) * s->nsv;
            const double *coef2 = s->coef + i * s->nsv;
            for (size_t k = 0; k < (size_t)s->nsv_class[i]; k++)
                sum += coef1[start[i] + k] * kvalue[start[i] + k];
            for (size_t k = 0; k < (size_t)s->nsv_class[j]; k++)
                sum += coef2[start[j] + k] * kvalue[start[j] + k];
            sum -= s->rho[p++];
            if (sum > 0)
                ++votes[i];
            else
                ++votes[j];
        }
    size_t best = 0;
    for (size_t i = 1; i < nc; i++)
        if (votes[i] > votes[best])
            best = i;
    return s->label[best];
}

#ifndef HYPROF_HAVE_LIBSVM

int hyprof_have_libsvm(void) { return 0; }

hyprof_status_t hyprof__svm_train(hyprof_ctx_t *ctx, hyprof_classifier_t *m, const double *x,
                                  const int *y, size_t n, const hyprof_train_params_t *p)
{
    (void)m, (void)x, (void)y, (void)n, (void)p;
    return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                         "--classifier svm: this build of hyprof has no LIBSVM (install "
                         "libsvm-dev and rebuild), use --classifier elm");
}

#else

int hyprof_have_libsvm(void) { return 1; }

static void quiet(const char *s) { (void)s; }

struct svm_model *hyprof__libsvm_view(const hyprof__svm_t *s, size_t bands)
{
    struct svm_model *m = calloc(1, sizeof *m);
    struct svm_node *nodes = malloc(s->nsv * (bands + 1) * sizeof *nodes);
    struct svm_node **sv = malloc(s->nsv * sizeof *sv);
    double **coef = malloc((s->nr_class - 1) * sizeof *coef);
    if (!m || !nodes || !sv || !coef) {
        free(m), free(nodes), free(sv), free(coef);
        return NULL;
    }
    for (size_t i = 0; i < s->nsv; i++) {
        struct svm_node *row = nodes + i * (bands + 1);
        for (size_t b = 0; b < bands; b++) {
            row[b].index = (int)b + 1;
            row[b].value = s->sv[i * bands + b];
        }
        row[bands].index = -1;
        sv[i] = row;
    }
    for (size_t r = 0; r + 1 < s->nr_class; r++)
        coef[r] = s->coef + r * s->nsv;
    m->param.svm_type = C_SVC;
    m->param.kernel_type = RBF;
    m->param.gamma = s->gamma;
    m->param.C = s->c;
    m->nr_class = (int)s->nr_class;
    m->l = (int)s->nsv;
    m->SV = sv;
    m->sv_coef = coef;
    m->rho = s->rho;
    m->label = s->label;
    m->nSV = s->nsv_class;
    m->free_sv = 0;
    return m;
}

void hyprof__libsvm_view_free(struct svm_model *m)
{
    if (!m)
        return;
    free(m->SV ? m->SV[0] : NULL);
    free(m->SV);
    free(m->sv_coef);
    free(m);
}

/* Copies a trained LIBSVM model into the dense form (an index LIBSVM left
 * out stays 0). */
static hyprof_status_t from_libsvm(const struct svm_model *lm, size_t bands, hyprof__svm_t *s)
{
    memset(s, 0, sizeof *s);
    s->nr_class = (size_t)lm->nr_class;
    s->nsv = (size_t)lm->l;
    s->gamma = lm->param.gamma;
    s->c = lm->param.C;
    size_t npairs = s->nr_class * (s->nr_class - 1) / 2;
    s->label = malloc(s->nr_class * sizeof *s->label);
    s->nsv_class = malloc(s->nr_class * sizeof *s->nsv_class);
    s->rho = malloc(npairs * sizeof *s->rho);
    s->coef = malloc((s->nr_class - 1) * s->nsv * sizeof *s->coef);
    s->sv = calloc(s->nsv * bands, sizeof *s->sv);
    if (!s->label || !s->nsv_class || !s->rho || !s->coef || !s->sv) {
        hyprof__svm_free(s);
        return HYPROF_ERR_NOMEM;
    }
    memcpy(s->label, lm->label, s->nr_class * sizeof *s->label);
    memcpy(s->nsv_class, lm->nSV, s->nr_class * sizeof *s->nsv_class);
    memcpy(s->rho, lm->rho, npairs * sizeof *s->rho);
    for (size_t r = 0; r + 1 < s->nr_class; r++)
        memcpy(s->coef + r * s->nsv, lm->sv_coef[r], s->nsv * sizeof *s->coef);
    for (size_t i = 0; i < s->nsv; i++)
        for (const struct svm_node *nd = lm->SV[i]; nd->index != -1; nd++)
            s->sv[i * bands + (size_t)nd->index - 1] = nd->value;
    return HYPROF_OK;
}

/* LIBSVM's kernel cache, in MB: the whole kernel matrix of n samples (floats)
 * when it fits in a share of the free host memory per thread, else that
 * share. LIBSVM fills it column by column as the solver asks, so a large
 * bound costs nothing a small problem does not use. */
static double cache_mb(size_t n, int threads)
{
    double whole = (double)n * (double)n * 4.0 / 1048576.0 + 1.0;
    double share = (double)hyprof_host_memory_available() / 1048576.0 / 4.0 /
                   (threads > 0 ? threads : 1);
    double mb = whole < share ? whole : share;
    return mb > 1.0 ? mb : 1.0;
}

static struct svm_parameter rbf_param(double c, double gamma, size_t n, int precomputed)
{
    struct svm_parameter p;
    memset(&p, 0, sizeof p);
    p.svm_type = C_SVC;
    p.kernel_type = precomputed ? PRECOMPUTED : RBF;
    p.gamma = gamma;
    p.C = c;
    p.cache_size = cache_mb(n, omp_threads());
    p.eps = 1e-3;
    p.shrinking = 1;
    return p;
}

/* Stratified folds: each class's samples shuffled with the seed, then dealt
 * to folds in turn. */
static void assign_folds(const int *y, size_t n, int folds, uint64_t seed, int *fold)
{
    uint64_t rng = seed;
    size_t *idx = malloc(n * sizeof *idx);
    char *done = calloc(n, 1);
    if (!idx || !done) {
        for (size_t i = 0; i < n; i++)
            fold[i] = (int)(i % (size_t)folds);
        free(idx), free(done);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        size_t m = 0;
        for (size_t j = i; j < n; j++)
            if (y[j] == y[i]) {
                idx[m++] = j;
                done[j] = 1;
            }
        for (size_t k = m; k > 1; k--) {
            size_t r = (size_t)(hyprof__splitmix(&rng) % k), t = idx[k - 1];
            idx[k - 1] = idx[r];
            idx[r] = t;
        }
        for (size_t k = 0; k < m; k++)
            fold[idx[k]] = (int)(k % (size_t)folds);
    }
    free(idx);
    free(done);
}

typedef struct {
    struct svm_node **x;  /* n rows */
    const int *y;
    size_t n;
    const int *fold;
} samples_t;

/* Trains on every fold but `f` and returns how many of fold f's samples are
 * predicted right (-1 when out of memory). */
static long fold_correct(const samples_t *s, int f, double c, double gamma, int precomputed)
{
    struct svm_problem prob;
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++)
        m += s->fold[i] != f;
    if (m == 0)
        return 0; /* every group of every class in fold f: nothing to train on */
    prob.l = (int)m;
    prob.x = malloc(m * sizeof *prob.x);
    prob.y = malloc(m * sizeof *prob.y);
    if (!prob.x || !prob.y) {
        free(prob.x), free(prob.y);
        return -1;
    }
    for (size_t i = 0, k = 0; i < s->n; i++)
        if (s->fold[i] != f) {
            prob.x[k] = s->x[i];
            prob.y[k++] = s->y[i];
        }
    struct svm_parameter par = rbf_param(c, gamma, m, precomputed);
    struct svm_model *model = svm_train(&prob, &par);
    long ok = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->fold[i] == f && (int)svm_predict(model, s->x[i]) == s->y[i])
            ok++;
    svm_free_and_destroy_model(&model);
    free(prob.x);
    free(prob.y);
    return ok;
}

typedef struct {
    const samples_t *s;
    int f;
    double c, gamma;
    int precomputed;
} fold_job_t;

/* fold_correct as a child's job: the count as a long. */
static int fold_job(void *arg, void **out, size_t *len)
{
    const fold_job_t *j = arg;
    long ok = fold_correct(j->s, j->f, j->c, j->gamma, j->precomputed), *r = NULL;
    if (ok < 0 || !(r = malloc(sizeof *r)))
        return 1;
    *r = ok;
    *out = r;
    *len = sizeof *r;
    return 0;
}

/* Fold f's correct count at (c, gamma), trained in a child process: -1 and
 * `why` when that failed, -2 when cancelled. */
static long fold_in_child(hyprof_ctx_t *ctx, const samples_t *s, int f, double c, double gamma,
                          int precomputed, char *why)
{
    fold_job_t job = {s, f, c, gamma, precomputed};
    void *out = NULL;
    size_t len = 0, rows = 0;
    for (size_t i = 0; i < s->n; i++)
        rows += s->fold[i] != f;
    hyprof_status_t st = hyprof__run_in_child(ctx, fold_job, &job, rows, &out, &len, why);
    long ok = st == HYPROF_ERR_CANCELLED ? -2 : -1;
    if (st == HYPROF_OK && len == sizeof ok)
        memcpy(&ok, out, sizeof ok);
    free(out);
    return ok;
}

long hyprof__svm_fold_correct(hyprof_ctx_t *ctx, struct svm_node **x, const int *y, size_t n,
                              const int *fold, int f, double c, double gamma, int precomputed,
                              char *why)
{
    samples_t s = {x, y, n, fold};
    return fold_in_child(ctx, &s, f, c, gamma, precomputed, why);
}

static hyprof_status_t check_folds(hyprof_ctx_t *ctx, const hyprof_classifier_t *m,
                                   const int *y, size_t n, int folds)
{
    for (size_t k = 0; k < m->nclasses; k++) {
        size_t count = 0;
        for (size_t i = 0; i < n; i++)
            count += y[i] == m->values[k];
        if (count < (size_t)folds)
            return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                                 "class %d has %zu training pixel(s), fewer than the %d "
                                 "cross-validation folds (--folds)", m->values[k], count, folds);
    }
    return HYPROF_OK;
}

/* Cross-validated accuracy of every grid point (svm_grid.c); returns the
 * best index (ties: the first). */
static hyprof_status_t grid_search(hyprof_ctx_t *ctx, hyprof__cv_set_t *s,
                                   const hyprof_train_params_t *p, size_t *best, double *best_acc)
{
    size_t npoints = p->n_c * p->n_gamma;
    long *correct = calloc(npoints, sizeof *correct);
    if (!correct)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    double saved[2];
    hyprof__progress_push(ctx, 0.0, 0.9, saved);
    hyprof_status_t st = hyprof__cv_prepare(ctx, s);
    if (st == HYPROF_OK)
        st = hyprof__cv_grid(ctx, s, 0, p->folds, p, correct);
    hyprof__cv_release(s);
    hyprof__progress_pop(ctx, saved);
    *best = 0;
    for (size_t g = 1; g < npoints; g++)
        if (correct[g] > correct[*best])
            *best = g;
    *best_acc = (double)correct[*best] / (double)s->n;
    free(correct);
    return st;
}

/* The dense model as bytes, for the child's answer: nr_class, nsv, gamma,
 * c, then label, nsv_class, rho, coef and sv as they are in memory. */
static size_t packed_size(size_t nr_class, size_t nsv, size_t bands)
{
    size_t npairs = nr_class * (nr_class - 1) / 2;
    return 2 * sizeof(uint64_t) + 2 * sizeof(double) + 2 * nr_class * sizeof(int) +
           (npairs + (nr_class - 1) * nsv + nsv * bands) * sizeof(double);
}

static void put(unsigned char **p, const void *src, size_t n)
{
    memcpy(*p, src, n);
    *p += n;
}

static void get(const unsigned char **p, void *dst, size_t n)
{
    memcpy(dst, *p, n);
    *p += n;
}

static int pack(const hyprof__svm_t *s, size_t bands, void **out, size_t *len)
{
    size_t nc = s->nr_class, npairs = nc * (nc - 1) / 2;
    uint64_t head[2] = {nc, s->nsv};
    *len = packed_size(nc, s->nsv, bands);
    unsigned char *p = *out = malloc(*len);
    if (!p)
        return 1;
    put(&p, head, sizeof head);
    put(&p, &s->gamma, sizeof s->gamma);
    put(&p, &s->c, sizeof s->c);
    put(&p, s->label, nc * sizeof *s->label);
    put(&p, s->nsv_class, nc * sizeof *s->nsv_class);
    put(&p, s->rho, npairs * sizeof *s->rho);
    put(&p, s->coef, (nc - 1) * s->nsv * sizeof *s->coef);
    put(&p, s->sv, s->nsv * bands * sizeof *s->sv);
    return 0;
}

static hyprof_status_t unpack(const void *in, size_t len, size_t bands, hyprof__svm_t *s)
{
    const unsigned char *p = in;
    uint64_t head[2];
    memset(s, 0, sizeof *s);
    if (len < sizeof head)
        return HYPROF_ERR_INTERNAL;
    get(&p, head, sizeof head);
    size_t nc = (size_t)head[0], nsv = (size_t)head[1], npairs = nc * (nc - 1) / 2;
    if (nc < 2 || nc > 65536 || nsv > len || len != packed_size(nc, nsv, bands))
        return HYPROF_ERR_INTERNAL;
    s->nr_class = nc;
    s->nsv = nsv;
    s->label = malloc(nc * sizeof *s->label);
    s->nsv_class = malloc(nc * sizeof *s->nsv_class);
    s->rho = malloc(npairs * sizeof *s->rho);
    s->coef = malloc(((nc - 1) * nsv + 1) * sizeof *s->coef);
    s->sv = malloc((nsv * bands + 1) * sizeof *s->sv);
    if (!s->label || !s->nsv_class || !s->rho || !s->coef || !s->sv) {
        hyprof__svm_free(s);
        return HYPROF_ERR_NOMEM;
    }
    get(&p, &s->gamma, sizeof s->gamma);
    get(&p, &s->c, sizeof s->c);
    get(&p, s->label, nc * sizeof *s->label);
    get(&p, s->nsv_class, nc * sizeof *s->nsv_class);
    get(&p, s->rho, npairs * sizeof *s->rho);
    get(&p, s->coef, (nc - 1) * nsv * sizeof *s->coef);
    get(&p, s->sv, nsv * bands * sizeof *s->sv);
    return HYPROF_OK;
}

typedef struct {
    struct svm_problem *prob;
    struct svm_parameter par;
    size_t bands;
} final_job_t;

/* svm_train on all the samples as a child's job: the packed dense model. */
static int final_job(void *arg, void **out, size_t *len)
{
    final_job_t *j = arg;
    struct svm_model *lm = svm_train(j->prob, &j->par);
    hyprof__svm_t s;
    int rc = !lm || from_libsvm(lm, j->bands, &s) != HYPROF_OK;
    svm_free_and_destroy_model(&lm);
    if (!rc) {
        rc = pack(&s, j->bands, out, len);
        hyprof__svm_free(&s);
    }
    return rc;
}

/* The model at the chosen (C, gamma) on every sample, trained in a child. */
static hyprof_status_t train_final(hyprof_ctx_t *ctx, hyprof_classifier_t *m,
                                   struct svm_node **rows, const int *y, size_t n, double c,
                                   double gamma)
{
    struct svm_problem prob = {(int)n, NULL, rows};
    if (!(prob.y = malloc(n * sizeof *prob.y)))
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    for (size_t i = 0; i < n; i++)
        prob.y[i] = y[i];
    final_job_t job = {&prob, rbf_param(c, gamma, n, 0), m->bands};
    void *out = NULL;
    size_t len = 0;
    char why[96];
    hyprof_status_t st = hyprof__run_in_child(ctx, final_job, &job, n, &out, &len, why);
    if (st == HYPROF_OK && (st = unpack(out, len, m->bands, &m->svm)) != HYPROF_OK)
        snprintf(why, sizeof why, "the training process's answer is malformed");
    free(out);
    free(prob.y);
    if (st == HYPROF_ERR_CANCELLED)
        return hyprof__progress(ctx, 0.95, "train");
    if (st != HYPROF_OK)
        return hyprof__error(ctx, st, OP, "LIBSVM training failed: %s",
                             why[0] ? why : "out of memory");
    return HYPROF_OK;
}

hyprof_status_t hyprof__svm_train(hyprof_ctx_t *ctx, hyprof_classifier_t *m, const double *x,
                                  const int *y, size_t n, const hyprof_train_params_t *p)
{
    size_t B = m->bands, npoints = p->n_c * p->n_gamma;
    svm_set_print_string_function(quiet);
    struct svm_node *nodes = malloc(n * (B + 1) * sizeof *nodes);
    struct svm_node **rows = malloc(n * sizeof *rows);
    int *fold = malloc(n * sizeof *fold);
    if (!nodes || !rows || !fold) {
        free(nodes), free(rows), free(fold);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu samples)", n);
    }
    for (size_t i = 0; i < n; i++) {
        rows[i] = nodes + i * (B + 1);
        for (size_t b = 0; b < B; b++) {
            rows[i][b].index = (int)b + 1;
            rows[i][b].value = x[i * B + b];
        }
        rows[i][B].index = -1;
    }
    hyprof__cv_set_t s = {x, B, y, n, fold, NULL};
    size_t best = 0;
    hyprof_status_t st = HYPROF_OK;
    if (npoints > 1 && (st = check_folds(ctx, m, y, n, p->folds)) == HYPROF_OK) {
        assign_folds(y, n, p->folds, p->seed, fold);
        st = grid_search(ctx, &s, p, &best, &m->cv_accuracy);
    }
    if (st == HYPROF_OK)
        st = train_final(ctx, m, rows, y, n, p->c[best / p->n_gamma],
                         p->gamma[best % p->n_gamma]);
    free(nodes);
    free(rows);
    free(fold);
    return st;
}

#endif
