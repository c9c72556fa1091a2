/* Profile recipes and the cross-validated search for the profile that suits a
 * scene (`hyprof train --search`): every candidate profile is computed once on
 * the whole raw cube, its training pixels are scored by k-fold cross-validation
 * of the RBF SVM (C and gamma chosen inside, on the same folds) with spatially
 * disjoint folds, and the winner is trained on all training pixels. The model
 * records the recipe, so classification of a raw cube computes it again. */
#ifndef HYPROF_SEARCH_H
#define HYPROF_SEARCH_H

#include "hyprof/classify.h"
#include "hyprof/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A recipe: one or more registry operations joined by '+', each written
 * "OP NAME=VALUE ..." (the operation's own parameter names, without dashes),
 * e.g. "eadp step=20 count=8 + pca components=7". The features are the
 * concatenation of each part's output bands, in the recipe's order, computed
 * on `raw` with the context's backend. Errors name the bad word. */
hyprof_status_t hyprof_profile_compute(hyprof_ctx_t *ctx, const char *recipe,
                                       const hyprof_cube_t *raw, hyprof_result_t *out);
/* Checks a recipe without computing it; *out_bands receives its band count
 * for an input of `in_bands` bands (0 when only running can tell). */
hyprof_status_t hyprof_profile_check(hyprof_ctx_t *ctx, const char *recipe, size_t in_bands,
                                     size_t *out_bands);

/* The default search space: its recipes, in the order they are tried. */
const char *const *hyprof_search_default_space(size_t *count);

/* Spatially disjoint cross-validation folds. A group is a set of labelled
 * pixels of one class connected through their 8 neighbours (a polygon
 * rasterised, or several touching); a group is never split. Per class, groups
 * are shuffled with `seed`, ordered by decreasing size and dealt to the fold
 * holding the fewest pixels of that class (ties: fewest pixels in all, then
 * the lowest fold). `fold` (width x height) receives 0..folds-1, or -1 for
 * unlabelled pixels; *groups the number of groups, *largest the largest's
 * pixel count. */
hyprof_status_t hyprof_search_folds(hyprof_ctx_t *ctx, const hyprof_cube_t *labels, int folds,
                                    uint64_t seed, int *fold, size_t *groups, size_t *largest);

typedef struct {
    const char *const *recipes; /* candidates; NULL: the default space */
    size_t n;
    int folds;                  /* >= 2 */
    uint64_t seed;              /* of the folds */
    int fusion;                 /* 0: the best candidate alone; 1: the most accurate fusion */
} hyprof_search_params_t;

/* What the search tried. accuracy: the best cross-validated accuracy over the
 * C x gamma grid (pooled over folds), NaN when the recipe was stopped early
 * (folds_run < folds: even all its remaining pixels right could not bring it
 * within 15 % of the training pixels of the best so far) or failed. */
typedef struct {
    size_t n;
    char **recipe;
    double *accuracy, *c, *gamma, *seconds;
    size_t *bands;
    int *folds_run;
    size_t best;
    int folds;
    size_t pixels, groups, largest_group;
    /* The decision fusions scored on the same folds (the out-of-fold labels
     * of each training pixel's 3x3 window at each completed candidate's C and
     * gamma): rank lists the completed candidates in the order of a greedy
     * forward selection (the best first, then each time the one that makes
     * the vote most accurate); fusion j is the plurality vote of the first
     * fusion_members[j] of them,
     * then a majority filter of fusion_majority[j] pixels a side (0: none),
     * with its pooled accuracy. The model is fusion `fusion_chosen`: the best
     * candidate alone when it has one member and no filter. */
    size_t nranked, *rank;
    size_t nfusions, *fusion_members;
    int *fusion_majority;
    double *fusion_accuracy;
    size_t fusion_chosen;
} hyprof_search_report_t;

/* Searches `recipes` on `raw` with the training labels (band 0 values > 0 on
 * raw's grid), scores the decision fusions of the completed candidates, then
 * trains the chosen fusion's members (or the winner alone) on all training
 * pixels, each with its C and gamma (`train` gives the grid, scaling and the
 * classes' legend; its kind must be SVM). The model records the recipes and
 * raw's band count. */
hyprof_status_t hyprof_train_search(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                                    const hyprof_cube_t *labels,
                                    const hyprof_search_params_t *search,
                                    const hyprof_train_params_t *train,
                                    hyprof_classifier_t **model, hyprof_search_report_t *report);
void hyprof_search_report_free(hyprof_search_report_t *report);

/* The recipe a model was trained on (NULL: the model takes features as they
 * are; for a fused model, a description of the fusion) and the band count of
 * the raw cubes it expects. */
const char *hyprof_classifier_profile(const hyprof_classifier_t *m);
size_t hyprof_classifier_input_bands(const hyprof_classifier_t *m);
/* A fused model's members (0: a model of one classifier), member i (a model
 * with its own recipe), and the side of its majority filter (0: none). */
size_t hyprof_classifier_members(const hyprof_classifier_t *m);
const hyprof_classifier_t *hyprof_classifier_member(const hyprof_classifier_t *m, size_t i);
int hyprof_classifier_majority(const hyprof_classifier_t *m);

/* hyprof_classify on `input`: a model with a recipe given a cube of its raw
 * band count computes the recipe first; otherwise `input` is the features. */
hyprof_status_t hyprof_classify_input(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                      const hyprof_cube_t *input, hyprof_cube_t *map,
                                      hyprof_cube_t *scores);

#ifdef __cplusplus
}
#endif
#endif
