/* Backends of `classify`: both fill the class map (and the vote fractions)
 * of every valid pixel of a float32 BSQ cube. */
#ifndef HYPROF_CLASSIFY_IMPL_H
#define HYPROF_CLASSIFY_IMPL_H

#include "classifier.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const hyprof_classifier_t *model;
    const hyprof_cube_t *in;  /* float32 BSQ, the model's band count */
    uint16_t *map;            /* width*height class values, 0 = nodata */
    float *scores;            /* nclasses x width*height (BSQ) or NULL */
    /* CUDA: width*height flags, 1 where the device's rounding could change the
     * label (a decision value near 0, a tie of votes): hyprof_classify then
     * recomputes those pixels on the host with the exact formula. */
    uint8_t *recheck;
    size_t rechecked;
} hyprof__classify_args_t;

hyprof_status_t hyprof__cpu_classify(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_classify(hyprof_ctx_t *ctx, void *args);

/* One pixel by LIBSVM's exact formula (svm.c): scales pixel p of `in` into
 * x (bands), writes the class value to map[p] and the vote fractions to
 * scores (if any). kvalue: nsv doubles; votes: nr_class ints. */
void hyprof__svm_pixel_exact(const hyprof__classify_args_t *a, size_t p, double *x,
                             double *kvalue, int *votes);

/* An RBF SVM prepared for prediction by gemms (svm_blocks.c, also used by
 * the CUDA backend): |sv|^2, the pair matrix A (nsv x npairs, column-major),
 * each pair's sum of |coefficients|, the trust bound tol_a |x|^2 + tol_b
 * (relative to that sum) and LIBSVM's class order -> the model's. */
typedef struct {
    size_t npairs;
    double *svn, *A, *sumabs;
    double tol_a, tol_b;
    int *model_index;
} hyprof__svm_prep_t;

/* 1 on success, 0 out of memory. */
int hyprof__svm_prep(const hyprof_classifier_t *m, hyprof__svm_prep_t *p);
void hyprof__svm_prep_free(hyprof__svm_prep_t *p);
/* Doubles of work space hyprof__svm_tile needs for n pixels. */
size_t hyprof__svm_tile_doubles(const hyprof_classifier_t *m, size_t n);
/* Classifies the n pixels px[0..n-1] by gemms: the class value (and vote
 * fractions) of each pixel it can trust; flag[i] = 1 for those it cannot
 * (the caller computes them with the exact formula). votes: nr_class ints. */
void hyprof__svm_tile(const hyprof__svm_prep_t *p, const hyprof__classify_args_t *a,
                      const size_t *px, size_t n, double *work, int *votes, uint8_t *flag);

/* Vote counts (LIBSVM's class order) -> per-class fractions in the model's
 * class order, into scores[k * npix + p]. */
void hyprof__svm_vote_scores(const hyprof_classifier_t *m, const int *votes, float *scores,
                             size_t npix, size_t p);

#ifdef __cplusplus
}
#endif
#endif
