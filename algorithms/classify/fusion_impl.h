/* Decision fusion (fusion.c): the rules that combine the labels of several
 * profiles' classifiers, shared by classify and by the search that scores
 * them on its folds. Labels are class values, 0 (or less) for none. */
#ifndef HYPROF_FUSION_IMPL_H
#define HYPROF_FUSION_IMPL_H

#include "classifier.h"
#include "hyprof/search.h"

/* Limits of a fused model: members, and the majority filter's window side. */
#define HYPROF_FUSION_MAX_MEMBERS 64
#define HYPROF_FUSION_MAX_WINDOW 7

/* The plurality of the m members' labels (in the members' order); ties go to
 * the class of the earliest member among the tied; 0 when no member has one. */
int hyprof__fusion_vote(const int *label, size_t m);

/* The majority filter's value for one pixel: the most frequent label among
 * the n labels of its window (centre at index `centre`, labels <= 0 not
 * counted); ties keep the centre's label, then the first in window order.
 * A centre without a label stays as it is. */
int hyprof__fusion_majority(const int *label, size_t n, size_t centre);

/* m->profile := a description of the fusion, e.g. "vote of 3: eadp; eap
 * attribute=area; wmcd; then a 3x3 majority" (HYPROF_ERR_NOMEM). */
hyprof_status_t hyprof__fusion_describe(hyprof_classifier_t *m);

/* hyprof_classify_input for a fused model (model->nmembers > 0): `raw` must
 * have the members' input band count. scores: each class's share of the
 * members' votes. */
hyprof_status_t hyprof__classify_fused(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                       const hyprof_cube_t *raw, hyprof_cube_t *map,
                                       hyprof_cube_t *scores);

#endif
