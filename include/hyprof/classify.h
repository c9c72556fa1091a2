/* Classification: train an RBF SVM (LIBSVM) or an extreme learning machine on
 * labelled pixels of a feature stack, apply it (CPU or CUDA, same labels as
 * LIBSVM's own prediction), score a class map against a reference, and split
 * a reference map into training and test pixels. */
#ifndef HYPROF_CLASSIFY_H
#define HYPROF_CLASSIFY_H

#include "hyprof/core.h"

#include <stdio.h>

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

/* ---- class matching and the accuracy report ---------------------------------------- */

/* The default colour of class v (assess_palette.c, listed in docs/classmaps.md):
 * 24 colour-blind-safe colours in three shades, by class number alone;
 * transparent black for v = 0. */
void hyprof_palette_rgba(size_t v, uint8_t rgba[4]);
size_t hyprof_palette_size(void);

/* How the classes of a class map pair with those of a reference: by name
 * when both sides name their classes (auto), by name or by number as asked. */
typedef enum {
    HYPROF_MATCH_AUTO = 0,
    HYPROF_MATCH_NAMES,
    HYPROF_MATCH_NUMBERS
} hyprof_match_mode_t;

typedef struct {
    int map, ref;                    /* class values */
    const char *map_name, *ref_name; /* into the legends given to hyprof_match_classes */
} hyprof_class_pair_t;

typedef struct {
    int by_names;         /* 1: paired by name; 0: by number */
    int fallback;         /* auto took numbers although one side names its classes */
    char how[320];        /* one sentence: how the classes are paired and why */
    char **notes;         /* one line each: classes without partner, names that disagree */
    size_t nnotes;
    hyprof_class_pair_t *pairs; /* by name: the pairs, by reference value */
    size_t npairs;
    uint16_t *map_to_ref; /* by name: 65536 entries, class-map value -> reference value or 0 */
} hyprof_class_match_t;

/* Pairs classes per `mode`. present_map[v] tells whether the class map gives
 * value v to a labelled reference pixel, present_ref[v] whether the
 * reference holds v (65536 entries each). A name that is empty, "N" or
 * "class N" for its own value N counts as no name; names compare with ASCII
 * case and whitespace ignored. HYPROF_ERR_ARGUMENT when names are asked for
 * but missing or given twice on one side: the message names the side (and
 * its label, e.g. a file name, when not NULL). */
hyprof_status_t hyprof_match_classes(hyprof_ctx_t *ctx, hyprof_match_mode_t mode,
                                     const hyprof_class_legend_t *map_legend,
                                     const uint8_t *present_map, const char *map_label,
                                     const hyprof_class_legend_t *ref_legend,
                                     const uint8_t *present_ref, const char *ref_label,
                                     hyprof_class_match_t *m);
void hyprof_class_match_free(hyprof_class_match_t *m);

/* An assessment with its classes paired: the scores (over the reference's
 * values; by name, the class map renumbered into them), the pairing, the
 * report's legend by reference value and the thumbnail's by class-map value. */
typedef struct {
    hyprof_assessment_t scores;
    hyprof_class_match_t match;
    hyprof_class_legend_t legend;  /* names and colours of the report, by reference value */
    hyprof_class_legend_t picture; /* colours of the thumbnail, by class-map value */
    uint16_t *map;                 /* the class map's values (0: none), width*height */
    size_t width, height;
    size_t labelled;               /* the reference's labelled pixels */
} hyprof_class_assessment_t;

/* Scores `map` against `reference` (same grid, band 0 of each) with their
 * classes paired per `mode` (hyprof_match_classes; labels name the two sides
 * in messages, may be NULL). Legends may be NULL (no names, no colours).
 * HYPROF_ERR_INPUT when the reference has no labelled pixel (out->labelled
 * is then 0), HYPROF_ERR_ARGUMENT when names cannot pair as asked. The
 * pairs' names point into the two legends: keep them while *out is used. */
hyprof_status_t hyprof_assess_classes(hyprof_ctx_t *ctx, const hyprof_cube_t *map,
                                      const hyprof_cube_t *reference,
                                      const hyprof_class_legend_t *map_legend,
                                      const hyprof_class_legend_t *ref_legend,
                                      hyprof_match_mode_t mode, const char *map_label,
                                      const char *ref_label, hyprof_class_assessment_t *out);
void hyprof_class_assessment_free(hyprof_class_assessment_t *r);

/* What the reports show (assess_report.c): a class's name in a legend
 * ("class V" when it has none; buf holds that text), whether any reference
 * pixel was predicted as no reference class, the pixels of reference class
 * k, and the class-map value paired by name with reference value `ref` (0:
 * none). */
const char *hyprof_class_legend_name(const hyprof_class_legend_t *l, int v, char *buf, size_t n);
int hyprof_assessment_has_other(const hyprof_assessment_t *a);
uint64_t hyprof_assessment_row_total(const hyprof_assessment_t *a, size_t k);
int hyprof_class_match_map_value(const hyprof_class_match_t *m, int ref);
/* `s` as HTML text: <, >, & and " escaped. */
void hyprof_html_text(FILE *f, const char *s);

/* The self-contained HTML report of an assessment (the page `hyprof assess
 * --html` writes): figures, how classes were paired, per-class table, the
 * confusion matrix as an inline SVG picture and the class map as an inline
 * PNG thumbnail. map_label and ref_label name the inputs; ref_field, when not
 * NULL, is the class field of a rasterised vector reference. *html (len
 * bytes, NUL-terminated) is freed with free(). */
hyprof_status_t hyprof_assess_html(hyprof_ctx_t *ctx, const hyprof_class_assessment_t *r,
                                   const char *map_label, const char *ref_label,
                                   const char *ref_field, char **html, size_t *len);
/* A PNG (8-bit RGB, band-sequential input) encoded as libpng does by default
 * (adaptive filters, zlib level 6); *png is freed with free(). */
hyprof_status_t hyprof_png_encode_rgb(const uint8_t *rgb, size_t width, size_t height,
                                     unsigned char **png, size_t *len);

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
