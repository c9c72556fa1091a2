/* The search's decision fusions: the completed candidates in the order of a
 * greedy forward selection, and the vote of the first m of them, alone or
 * followed by a 3x3 majority filter, scored on the out-of-fold labels of
 * every training pixel's 3x3 window with the rules classify applies
 * (fusion.c). A window's labels all come from the model of the centre's fold,
 * which never saw the centre's class group (8-connected pixels of one class,
 * never split by the folds): a labelled neighbour it was trained on is of
 * another class, so its label can only pull the centre away from its class. */
#include "fusion_impl.h"
#include "search_impl.h"

#include <math.h>
#include <stdlib.h>

#define OP "train"
#define WINDOW 9 /* 3x3, row-major: the centre is 4 */

/* Training pixels right for the vote of the first m of `rank`, with or
 * without the majority filter. */
static long score(hyprof_ctx_t *ctx, int *const *oof, const int *y, size_t n,
                  const size_t *rank, size_t m, int majority)
{
    long correct = 0;
#pragma omp parallel for reduction(+ : correct) schedule(static) num_threads(hyprof__threads(ctx))
    for (size_t i = 0; i < n; i++) {
        int fused[WINDOW], label[HYPROF_FUSION_MAX_MEMBERS];
        for (size_t o = 0; o < WINDOW; o++) {
            if (!majority && o != 4) {
                fused[o] = 0;
                continue;
            }
            for (size_t j = 0; j < m; j++)
                label[j] = oof[rank[j]][i * WINDOW + o];
            fused[o] = hyprof__fusion_vote(label, m);
        }
        int v = majority ? hyprof__fusion_majority(fused, WINDOW, 4) : fused[4];
        correct += v == y[i];
    }
    return correct;
}

/* r->rank := the completed candidates in the order of a greedy forward
 * selection: the best (r->best) first, then each time the one whose addition
 * makes the vote most accurate (ties: the more accurate candidate alone,
 * then the earlier). */
static void select_members(hyprof_ctx_t *ctx, int *const *oof, const int *y, size_t n,
                           hyprof_search_report_t *r)
{
    size_t done = 0;
    for (size_t i = 0; i < r->n; i++)
        done += !isnan(r->accuracy[i]);
    if (done > HYPROF_FUSION_MAX_MEMBERS)
        done = HYPROF_FUSION_MAX_MEMBERS;
    for (r->nranked = 0; r->nranked < done; r->nranked++) {
        long best = -1;
        size_t pick = r->best;
        for (size_t i = 0; r->nranked > 0 && i < r->n; i++) {
            int used = isnan(r->accuracy[i]);
            for (size_t j = 0; !used && j < r->nranked; j++)
                used = r->rank[j] == i;
            if (used)
                continue;
            r->rank[r->nranked] = i;
            long correct = score(ctx, oof, y, n, r->rank, r->nranked + 1, 0);
            if (correct > best || (correct == best && r->accuracy[i] > r->accuracy[pick]))
                best = correct, pick = i;
        }
        r->rank[r->nranked] = pick;
    }
}

hyprof_status_t hyprof__search_fusion(hyprof_ctx_t *ctx, int *const *oof, const int *y, size_t n,
                                      int choose, hyprof_search_report_t *r)
{
    r->rank = malloc(r->n * sizeof *r->rank);
    r->fusion_members = malloc(2 * r->n * sizeof *r->fusion_members);
    r->fusion_majority = malloc(2 * r->n * sizeof *r->fusion_majority);
    r->fusion_accuracy = malloc(2 * r->n * sizeof *r->fusion_accuracy);
    if (!r->rank || !r->fusion_members || !r->fusion_majority || !r->fusion_accuracy)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    select_members(ctx, oof, y, n, r);
    long best = -1;
    r->nfusions = 0;
    for (size_t m = 1; m <= r->nranked; m++)
        for (int majority = 0; majority <= 3; majority += 3) {
            long correct = score(ctx, oof, y, n, r->rank, m, majority);
            size_t j = r->nfusions++;
            r->fusion_members[j] = m;
            r->fusion_majority[j] = majority;
            r->fusion_accuracy[j] = (double)correct / (double)n;
            if (choose && correct > best)
                best = correct, r->fusion_chosen = j;
        }
    return r->nfusions ? HYPROF_OK
                       : hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                                       "no candidate completed the cross-validation");
}
