/* Classification: train an RBF SVM (LIBSVM) or an extreme learning machine on
 * labelled pixels of a feature stack, apply it (CPU or CUDA, same labels as
 * LIBSVM's own prediction), score a class map against a reference, and split
 * a reference map into training and test pixels. */
#ifndef HYPROF_CLASSIFY_H
#define HYPROF_CLASSIFY_H

#include "hyprof/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { HYPROF_CLASSIFIER_SVM = 0, HYPROF_CLASSIFIER_ELM } hyprof_classifier_kind_t;

/* A trained classifier: feature scaling, classes (value, name, colour), the
 * band count and names it was trained on, and the SVM or ELM itself. */
typedef struct hyprof_classifier hyprof_classifier_t;

/* What a class map's legend says about the classes of a label raster, by
 * class value (index 0..n-1 = value); names or rgba may be NULL. */
typedef struct {
    size_t n;
    const char *const *names;
    const uint8_t *rgba; /* 4 bytes per value */
} hyprof_class_legend_t;

typedef struct {
    hyprof_classifier_kind_t kind;
    int scale;                 /* scale every band to [-1, 1] from the training min/max */
    /* SVM: candidate C and gamma; one of each trains directly, more are
     * chosen by stratified k-fold cross-validation (accuracy; ties go to the
     * first in C-major, gamma-minor order). */
    const double *c, *gamma;
    size_t n_c, n_gamma;
    int folds;
    uint64_t seed;             /* folds; ELM input weights */
    /* ELM: hidden neurons and the ridge regularisation C (beta = (H'H + I/C)^-1 H'T). */
    size_t neurons;
    double elm_c;
    const char *const *band_names; /* optional, one per band */
    hyprof_class_legend_t legend;  /* optional names and colours of the label values */
} hyprof_train_params_t;

/* Defaults: SVM, scaling on, the DESIGN.md grid (C = 2^-5, 2^-3, ..., 2^15;
 * gamma = 2^-15, 2^-13, ..., 2^3), 5 folds, seed 1, 500 neurons, elm_c 2^10. */
void hyprof_train_params_default(hyprof_train_params_t *p);

/* Trains on the pixels of `features` whose `labels` value (band 0, rounded)
 * is > 0 and that are valid in both. Errors name the bad value: labels on
 * another grid, no training pixel, one class only, a class with fewer pixels
 * than folds, SVM training without LIBSVM in this build. */
hyprof_status_t hyprof_train(hyprof_ctx_t *ctx, const hyprof_cube_t *features,
                             const hyprof_cube_t *labels, const hyprof_train_params_t *params,
                             hyprof_classifier_t **model);

/* 1 when this build can train SVMs (linked with LIBSVM). */
int hyprof_have_libsvm(void);

void hyprof_classifier_free(hyprof_classifier_t **model);
hyprof_status_t hyprof_classifier_save(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                       const char *path);
hyprof_status_t hyprof_classifier_load(hyprof_ctx_t *ctx, const char *path,
                                       hyprof_classifier_t **model);

hyprof_classifier_kind_t hyprof_classifier_kind(const hyprof_classifier_t *m);
size_t hyprof_classifier_bands(const hyprof_classifier_t *m);
const char *hyprof_classifier_band_name(const hyprof_classifier_t *m, size_t band);
size_t hyprof_classifier_classes(const hyprof_classifier_t *m);
int hyprof_classifier_class_value(const hyprof_classifier_t *m, size_t k);
const char *hyprof_classifier_class_name(const hyprof_classifier_t *m, size_t k);
/* Alpha 0: the training data gave the class no colour. */
const uint8_t *hyprof_classifier_class_rgba(const hyprof_classifier_t *m, size_t k);
/* Training report: chosen C and gamma (SVM), cross-validation accuracy (NaN
 * without a grid search), training pixels, support vectors (SVM) or neurons. */
double hyprof_classifier_c(const hyprof_classifier_t *m);
double hyprof_classifier_gamma(const hyprof_classifier_t *m);
double hyprof_classifier_cv_accuracy(const hyprof_classifier_t *m);
size_t hyprof_classifier_train_pixels(const hyprof_classifier_t *m);
size_t hyprof_classifier_size(const hyprof_classifier_t *m);

/* Applies the model to every valid pixel of `features` (its band count must be
 * the model's). `map` receives a new uint16 one-band cube of class values,
 * 0 where the input is nodata (its mask copied). With `scores` not NULL, a new
 * float32 cube with one band per class: the fraction of one-vs-one votes the
 * class won (SVM), or the softmax of the output layer (ELM). CUDA: labels
 * identical to LIBSVM's svm_predict (pixels with a decision value near 0 or a
 * vote tie are recomputed on the host with LIBSVM's exact formula). */
hyprof_status_t hyprof_classify(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                const hyprof_cube_t *features, hyprof_cube_t *map,
                                hyprof_cube_t *scores);

/* ---- accuracy ---------------------------------------------------------------- */

typedef struct {
    size_t nclasses;      /* the reference's classes (values > 0) */
    int *values;          /* class values, increasing */
    /* confusion[r * (nclasses + 1) + c]: reference class r predicted as class
     * c; column nclasses counts pixels predicted as no reference class
     * (nodata, 0 or a value absent from the reference). */
    uint64_t *confusion;
    uint64_t total;       /* scored pixels: labelled in the reference */
    double oa, aa, kappa;
    double *producer;     /* per class: recall (NaN if absent from the reference) */
    double *user;         /* per class: precision (NaN if never predicted) */
} hyprof_assessment_t;

/* Scores `map` against `reference` (same grid, band 0 of each) over the
 * reference's labelled pixels (> 0 and valid). */
hyprof_status_t hyprof_assess(hyprof_ctx_t *ctx, const hyprof_cube_t *map,
                              const hyprof_cube_t *reference, hyprof_assessment_t *out);
void hyprof_assessment_free(hyprof_assessment_t *a);

/* ---- train/test split ----------------------------------------------------------- */

/* Per class value v (> 0) of `reference`: counts[v] training pixels when
 * counts is given (ncounts values, 0 = none), else `per_class` pixels (>= 1)
 * or that fraction of the class (< 1, rounded half to even, at least 1). The pixels with
 * the smallest uniform draws of numpy.random.default_rng(seed).random(n_v)
 * over the class's pixels in row-major order are taken (classes in
 * increasing order, one generator): exactly samples/make_samples.py's
 * method. A class that would keep no test pixel is refused. `train` and
 * `test` (width*height each) receive class values or 0. */
hyprof_status_t hyprof_split(hyprof_ctx_t *ctx, const hyprof_cube_t *reference,
                             double per_class, const size_t *counts, size_t ncounts,
                             uint64_t seed, uint16_t *train, uint16_t *test);

/* The EADP paper's Table I training counts for Indian Pines (16 classes),
 * indexed by class value (17 entries, [0] = 0). */
const size_t *hyprof_split_preset_eadp_table1(size_t *ncounts);

#ifdef __cplusplus
}
#endif
#endif
