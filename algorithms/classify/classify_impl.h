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

/* Vote counts (LIBSVM's class order) -> per-class fractions in the model's
 * class order, into scores[k * npix + p]. */
void hyprof__svm_vote_scores(const hyprof_classifier_t *m, const int *votes, float *scores,
                             size_t npix, size_t p);

#ifdef __cplusplus
}
#endif
#endif
