/* Training: the labelled pixels of a feature stack, their scaling, the
 * classes' names and colours, then the SVM (LIBSVM) or the ELM. */
#include "classifier.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "train"

/* The DESIGN.md grid: log2 C = -5, -3, ..., 15; log2 gamma = -15, -13, ..., 3. */
static const double default_c[] = {0x1p-5, 0x1p-3, 0x1p-1, 0x1p1, 0x1p3, 0x1p5,
                                   0x1p7,  0x1p9,  0x1p11, 0x1p13, 0x1p15};
static const double default_gamma[] = {0x1p-15, 0x1p-13, 0x1p-11, 0x1p-9, 0x1p-7,
                                       0x1p-5,  0x1p-3,  0x1p-1,  0x1p1,  0x1p3};

void hyprof_train_params_default(hyprof_train_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->kind = HYPROF_CLASSIFIER_SVM;
    p->scale = 1;
    p->c = default_c;
    p->n_c = sizeof default_c / sizeof *default_c;
    p->gamma = default_gamma;
    p->n_gamma = sizeof default_gamma / sizeof *default_gamma;
    p->folds = 5;
    p->seed = 1;
    p->neurons = 500;
    p->elm_c = 1024.0;
}

static hyprof_status_t check_params(hyprof_ctx_t *ctx, const hyprof_train_params_t *p)
{
    if (p->kind == HYPROF_CLASSIFIER_ELM) {
        if (p->neurons < 1 || p->neurons > 100000)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                 "neurons %zu out of range 1..100000", p->neurons);
        if (!(p->elm_c > 0.0) || !isfinite(p->elm_c))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "elm-c %g must be > 0", p->elm_c);
        return HYPROF_OK;
    }
    if (!p->c || !p->gamma || p->n_c < 1 || p->n_gamma < 1)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "empty C or gamma grid");
    for (size_t i = 0; i < p->n_c + p->n_gamma; i++) {
        double v = i < p->n_c ? p->c[i] : p->gamma[i - p->n_c];
        if (!(v > 0.0) || !isfinite(v))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "%s %g must be > 0",
                                 i < p->n_c ? "C" : "gamma", v);
    }
    if (p->n_c * p->n_gamma > 1 && (p->folds < 2 || p->folds > 100))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "folds %d out of range 2..100",
                             p->folds);
    return HYPROF_OK;
}

/* A label as an integer class value: 0 = unlabelled, -1 = not an integer
 * in 0..65535 (refused). */
static long label_at(const hyprof_cube_t *labels, size_t x, size_t y)
{
    if (!hyprof_cube_valid(labels, x, y))
        return 0;
    double v = hyprof_cube_get(labels, x, y, 0);
    if (!isfinite(v) || v < 0 || v > 65535 || v != floor(v))
        return -1;
    return (long)v;
}

typedef struct {
    size_t n;
    size_t *pixel;  /* y * width + x */
    int *value;
} samples_t;

static hyprof_status_t collect(hyprof_ctx_t *ctx, const hyprof_cube_t *f,
                               const hyprof_cube_t *labels, samples_t *s)
{
    size_t W = f->width, H = f->height;
    s->pixel = malloc(W * H * sizeof *s->pixel);
    s->value = malloc(W * H * sizeof *s->value);
    s->n = 0;
    if (!s->pixel || !s->value)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    size_t labelled = 0;
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++) {
            long v = label_at(labels, x, y);
            if (v < 0)
                return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                                     "label %g at pixel (%zu, %zu) is not a class value "
                                     "(integers 1..65535, 0 = unlabelled)",
                                     hyprof_cube_get(labels, x, y, 0), x, y);
            if (v == 0)
                continue;
            labelled++;
            if (!hyprof_cube_valid(f, x, y))
                continue;
            s->pixel[s->n] = y * W + x;
            s->value[s->n++] = (int)v;
        }
    if (s->n == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "no training pixel: %zu labelled pixel(s), none valid in the "
                             "features", labelled);
    return HYPROF_OK;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The sorted distinct class values of the samples. */
static size_t class_values(const samples_t *s, int **values)
{
    int *v = malloc(s->n * sizeof *v);
    if (!v)
        return 0;
    memcpy(v, s->value, s->n * sizeof *v);
    qsort(v, s->n, sizeof *v, cmp_int);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (k == 0 || v[i] != v[k - 1])
            v[k++] = v[i];
    *values = v;
    return k;
}

static hyprof_status_t describe_classes(hyprof_classifier_t *m, const hyprof_train_params_t *p,
                                        const int *values)
{
    const hyprof_class_legend_t *lg = &p->legend;
    for (size_t k = 0; k < m->nclasses; k++) {
        size_t v = (size_t)values[k];
        m->values[k] = values[k];
        const char *name = v < lg->n && lg->names && lg->names[v] ? lg->names[v] : NULL;
        char fallback[32];
        snprintf(fallback, sizeof fallback, "class %zu", v);
        m->names[k] = strdup(name && *name ? name : fallback);
        if (!m->names[k])
            return HYPROF_ERR_NOMEM;
        /* Without a colour (alpha 0) the class stays uncoloured: writers of
         * class maps give it its default colour by class number. */
        if (v < lg->n && lg->rgba)
            memcpy(m->rgba + 4 * k, lg->rgba + 4 * v, 4);
    }
    for (size_t b = 0; b < m->bands; b++) {
        const char *name = p->band_names && p->band_names[b] ? p->band_names[b] : "";
        if (!(m->band_names[b] = strdup(name)))
            return HYPROF_ERR_NOMEM;
    }
    return HYPROF_OK;
}

void hyprof__gather_rows(const hyprof_cube_t *f, const size_t *pixel, size_t count, double *x)
{
    size_t B = f->bands, W = f->width;
    for (size_t i = 0; i < count; i++)
        for (size_t b = 0; b < B; b++)
            x[i * B + b] = hyprof_cube_get(f, pixel[i] % W, pixel[i] / W, b);
}

void hyprof__row_range(const double *x, size_t n, size_t bands, double *min, double *max)
{
    for (size_t b = 0; b < bands; b++) {
        min[b] = max[b] = x[b];
        for (size_t i = 1; i < n; i++) {
            double v = x[i * bands + b];
            min[b] = v < min[b] ? v : min[b];
            max[b] = v > max[b] ? v : max[b];
        }
    }
}

/* Training min/max per band, then the scaled samples (n x bands). */
static double *scaled_samples(hyprof_classifier_t *m, const hyprof_cube_t *f,
                              const samples_t *s)
{
    size_t B = m->bands;
    double *x = malloc(s->n * B * sizeof *x);
    if (!x)
        return NULL;
    hyprof__gather_rows(f, s->pixel, s->n, x);
    hyprof__row_range(x, s->n, B, m->min, m->max);
    for (size_t i = 0; i < s->n * B; i++)
        x[i] = hyprof__scale(m, i % B, x[i]);
    return x;
}

static hyprof_status_t check_inputs(hyprof_ctx_t *ctx, const hyprof_cube_t *f,
                                    const hyprof_cube_t *labels)
{
    char why[160];
    if (hyprof_cube_check(f, why, sizeof why) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "bad feature cube: %s", why);
    if (hyprof_cube_check(labels, why, sizeof why) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "bad label cube: %s", why);
    if (labels->width != f->width || labels->height != f->height)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the labels are %zux%zu pixels, the features %zux%zu: they must "
                             "be on the same grid", labels->width, labels->height, f->width,
                             f->height);
    return HYPROF_OK;
}

static hyprof_status_t fit(hyprof_ctx_t *ctx, hyprof_classifier_t *m, const double *x,
                           const samples_t *s, const hyprof_train_params_t *p)
{
    if (p->kind == HYPROF_CLASSIFIER_SVM)
        return hyprof__svm_train(ctx, m, x, s->value, s->n, p);
    int *idx = malloc(s->n * sizeof *idx);
    if (!idx)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    for (size_t i = 0; i < s->n; i++)
        idx[i] = hyprof__class_index(m, s->value[i]);
    m->elm.neurons = p->neurons;
    m->elm.c = p->elm_c;
    m->elm.seed = p->seed;
    hyprof_status_t st = hyprof__elm_train(ctx, m, x, idx, s->n);
    free(idx);
    return st;
}

hyprof_status_t hyprof_train(hyprof_ctx_t *ctx, const hyprof_cube_t *features,
                             const hyprof_cube_t *labels, const hyprof_train_params_t *params,
                             hyprof_classifier_t **model)
{
    *model = NULL;
    hyprof_status_t st;
    if ((st = check_params(ctx, params)) || (st = check_inputs(ctx, features, labels)))
        return st;
    samples_t s = {0, NULL, NULL};
    int *values = NULL;
    double *x = NULL;
    hyprof_classifier_t *m = NULL;
    if ((st = collect(ctx, features, labels, &s)) != HYPROF_OK)
        goto done;
    size_t nclasses = class_values(&s, &values);
    if (nclasses == 0) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
        goto done;
    }
    if (nclasses < 2) {
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "one class only (value %d, %zu pixels): a classifier needs at least "
                           "two", values[0], s.n);
        goto done;
    }
    m = hyprof__classifier_new(params->kind, features->bands, nclasses);
    if (!m || describe_classes(m, params, values) != HYPROF_OK) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
        goto done;
    }
    m->scale = params->scale;
    m->ntrain = s.n;
    if (!(x = scaled_samples(m, features, &s))) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu samples)", s.n);
        goto done;
    }
    hyprof__log(ctx, HYPROF_LOG_INFO, "train: %zu pixels, %zu classes, %zu bands", s.n, nclasses,
                m->bands);
    if ((st = fit(ctx, m, x, &s, params)) == HYPROF_OK)
        st = hyprof__progress(ctx, 1.0, "train");
done:
    free(s.pixel);
    free(s.value);
    free(values);
    free(x);
    if (st != HYPROF_OK)
        hyprof_classifier_free(&m);
    *model = m;
    return st;
}
