/* The classifier's insides, shared by training, the model file, the CPU and
 * CUDA prediction and the ELM. */
#ifndef HYPROF_CLASSIFIER_H
#define HYPROF_CLASSIFIER_H

#include "hyprof/classify.h"
#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An RBF C-SVC exactly as LIBSVM holds it: support vectors grouped by class in
 * LIBSVM's class order (`label`), nr_class - 1 coefficient rows, one rho per
 * pair (i < j, row-major over i). Support vectors are dense (bands values). */
typedef struct {
    size_t nr_class, nsv;
    int *label;      /* class values in LIBSVM's order */
    int *nsv_class;  /* support vectors per class, same order */
    double *sv;      /* nsv x bands */
    double *coef;    /* (nr_class - 1) x nsv */
    double *rho;     /* nr_class (nr_class - 1) / 2 */
    double gamma, c;
} hyprof__svm_t;

/* Sigmoid hidden layer with fixed random input weights, linear output. */
typedef struct {
    size_t neurons;
    double *w;       /* neurons x bands */
    double *bias;    /* neurons */
    double *beta;    /* neurons x nclasses */
    double c;
    uint64_t seed;
} hyprof__elm_t;

struct hyprof_classifier {
    hyprof_classifier_kind_t kind;
    size_t bands;
    char **band_names;
    int scale;
    double *min, *max;       /* per band (training set) */
    size_t nclasses;
    int *values;             /* increasing */
    char **names;
    uint8_t *rgba;           /* 4 per class */
    size_t ntrain;
    double cv_accuracy;      /* NaN without a grid search */
    char *profile;           /* the recipe computed on raw cubes (search.h), or NULL */
    size_t input_bands;      /* the raw cubes' band count with a recipe */
    /* A fused model (train --search): nmembers > 0 models, each with its
     * recipe, whose labels are voted on and filtered by a majority of
     * `majority` x `majority` pixels (0: none) (fusion.c); then `profile`
     * describes the fusion, and the svm and scaling above are unused. */
    size_t nmembers;
    struct hyprof_classifier **member;
    int majority;
    hyprof__svm_t svm;
    hyprof__elm_t elm;
};

hyprof_classifier_t *hyprof__classifier_new(hyprof_classifier_kind_t kind, size_t bands,
                                            size_t nclasses);
/* Index of class value v in m->values, or -1. */
int hyprof__class_index(const hyprof_classifier_t *m, int v);

/* The one feature scaling of every path (a model's bands, the search's
 * folds): -1 + 2 (x - min) / (max - min) in double, 0 for a constant band. */
static inline double hyprof__scale_value(double min, double max, double x)
{
    double range = max - min;
    return range > 0.0 ? -1.0 + 2.0 * (x - min) / range : 0.0;
}

/* A model's scaling of band b; x unchanged without scaling. */
static inline double hyprof__scale(const hyprof_classifier_t *m, size_t b, double x)
{
    return m->scale ? hyprof__scale_value(m->min[b], m->max[b], x) : x;
}

/* Training samples (train.c, shared with the search): x (count x f's bands)
 * := f's values at the pixels (y * width + x), and each band's min and max
 * over n rows of x (n >= 1). */
void hyprof__gather_rows(const hyprof_cube_t *f, const size_t *pixel, size_t count, double *x);
void hyprof__row_range(const double *x, size_t n, size_t bands, double *min, double *max);

/* LIBSVM's prediction, reimplemented bit for bit: dense RBF k_function
 * (sum of squared differences in band order, exp(-gamma sum)), one-vs-one
 * decision values summed in LIBSVM's order, votes (> 0 votes for i, else j)
 * and the first class with the most votes. `x` is the scaled pixel; `kvalue`
 * has room for nsv values, `votes` for nr_class. Returns the class value. */
int hyprof__svm_predict_exact(const hyprof__svm_t *s, size_t bands, const double *x,
                              double *kvalue, int *votes);

/* ELM outputs (nclasses values) of a scaled pixel; `hidden` has room for
 * neurons values. Returns the index of the largest output (first on ties). */
size_t hyprof__elm_outputs(const hyprof__elm_t *e, size_t bands, size_t nclasses,
                           const double *x, double *hidden, double *out);

/* ELM training on n scaled samples (n x bands, row-major), class indices y. */
hyprof_status_t hyprof__elm_train(hyprof_ctx_t *ctx, hyprof_classifier_t *m, const double *x,
                                  const int *y, size_t n);

/* SVM training through LIBSVM (grid search included); HYPROF_ERR_ARGUMENT
 * when this build has no LIBSVM. y holds class values. */
hyprof_status_t hyprof__svm_train(hyprof_ctx_t *ctx, hyprof_classifier_t *m, const double *x,
                                  const int *y, size_t n, const hyprof_train_params_t *p);
void hyprof__svm_free(hyprof__svm_t *s);

/* A splitmix64 stream: folds and ELM weights. */
static inline uint64_t hyprof__splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#ifdef HYPROF_HAVE_LIBSVM
struct svm_model;
/* A LIBSVM model viewing `s` (dense support vectors), for svm_predict;
 * free with hyprof__libsvm_view_free. NULL when out of memory. */
struct svm_model *hyprof__libsvm_view(const hyprof__svm_t *s, size_t bands);
void hyprof__libsvm_view_free(struct svm_model *m);
struct svm_node;
/* Trains on the rows whose fold is not f and returns how many of fold f's
 * rows it predicts right: -1 with `why` (96 bytes) when that failed, -2 when
 * cancelled (the training runs in a child process the cancel kills:
 * svm_child.c). With `precomputed`, the rows are LIBSVM precomputed-kernel
 * rows (svm_grid.c) and gamma only labels them. */
long hyprof__svm_fold_correct(hyprof_ctx_t *ctx, struct svm_node **x, const int *y, size_t n,
                              const int *fold, int f, double c, double gamma, int precomputed,
                              char *why);

/* Cross-validation samples (svm_grid.c): n scaled samples (n x bands), class
 * values, folds; dist is the prepared pairwise squared distances (NULL: too
 * large, LIBSVM computes the kernel). */
typedef struct {
    const double *x;
    size_t bands;
    const int *y;
    size_t n;
    const int *fold;
    double *dist;
} hyprof__cv_set_t;
/* The samples' squared distances into s->dist (NULL when a kernel table would
 * not fit: LIBSVM then computes the kernel); HYPROF_ERR_CANCELLED when a
 * cancel came meanwhile. */
hyprof_status_t hyprof__cv_prepare(hyprof_ctx_t *ctx, hyprof__cv_set_t *s);
void hyprof__cv_release(hyprof__cv_set_t *s);
/* Adds to correct[g] (grid point g = C index x n_gamma + gamma index) the
 * right predictions of folds f0..f1-1, each trained on the other folds;
 * parallel over the grid and the folds, progress 0..1 of the current range. */
hyprof_status_t hyprof__cv_grid(hyprof_ctx_t *ctx, const hyprof__cv_set_t *s, int f0, int f1,
                                const hyprof_train_params_t *grid, long *correct);
#endif

#ifdef __cplusplus
}
#endif
#endif
