/* The search's insides: the cross-validation of one candidate's training
 * pixels over the C x gamma grid on fixed folds (search_cv.c). */
#ifndef HYPROF_SEARCH_IMPL_H
#define HYPROF_SEARCH_IMPL_H

#include "classifier.h"
#include "hyprof/search.h"

/* n scaled samples (n x bands), class values y, folds 0..k-1. Runs the folds
 * one after the other, the grid points of a fold in parallel, and stops after
 * a fold when even every remaining pixel right could not bring the best grid
 * point above `beat` correct pixels (the first candidate with the most
 * correct pixels wins, so equalling is not winning). *correct and *best_g
 * receive the best grid point's pooled correct count and its index;
 * *folds_run the folds run. */
hyprof_status_t hyprof__search_cv(hyprof_ctx_t *ctx, const double *x, size_t bands, const int *y,
                                  size_t n, const int *fold, int k,
                                  const hyprof_train_params_t *grid, long beat, long *correct,
                                  size_t *best_g, int *folds_run);

#endif
