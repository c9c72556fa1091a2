/* The search's insides: the cross-validation of one candidate's training
 * pixels over the C x gamma grid on fixed folds (search_cv.c). */
#ifndef HYPROF_SEARCH_IMPL_H
#define HYPROF_SEARCH_IMPL_H

#include "classifier.h"
#include "hyprof/search.h"

/* n scaled samples (n x bands), class values y, folds 0..k-1. Runs the folds
 * one after the other, the grid points of a fold in parallel, and stops after
 * a fold when even every remaining pixel right could not bring the best grid
 * point above `beat` correct pixels. *correct and *best_g
 * receive the best grid point's pooled correct count and its index;
 * *folds_run the folds run. */
hyprof_status_t hyprof__search_cv(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                  size_t n, const int *fold, int k,
                                  const hyprof_train_params_t *grid, long beat, long *correct,
                                  size_t *best_g, int *folds_run);

/* Out-of-fold labels for the fusion (search_fusion.c): the SVM (c, gamma)
 * trained on the samples x outside fold f labels the nq query rows q (scaled
 * like x); q_label receives class values. */
hyprof_status_t hyprof__search_oof(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                   size_t n, const int *fold, int f, double c, double gamma,
                                   const double *q, size_t nq, int *q_label);

/* The fusions of the completed candidates (r->accuracy not NaN), scored on
 * their out-of-fold labels (oof[i]: n x 9 labels of each training pixel's
 * 3x3 window, row-major, 0 outside the image or where invalid; NULL for a
 * candidate not completed): r->rank := the candidates in the order of a
 * greedy forward selection, and fusion m the vote of the first m, alone and
 * then with a 3x3 majority. Fills the report's rank and fusion fields and
 * picks the most accurate (ties: fewer members, then no filter), or with
 * choose 0 the first candidate alone. */
hyprof_status_t hyprof__search_fusion(hyprof_ctx_t *ctx, int *const *oof, const int *y, size_t n,
                                      int choose, hyprof_search_report_t *r);

#endif
