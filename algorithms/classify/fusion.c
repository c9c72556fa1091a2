/* Decision fusion of a model `train --search` made from several profiles:
 * every member (a model with its own recipe) classifies the raw cube, the
 * members' labels are combined pixel by pixel by a plurality vote, and the
 * fused map is optionally regularised by a majority filter. The vote and the
 * filter are the rules the search scores on its folds (search_fusion.c), so
 * what the search measured is what classify computes. */
#include "fusion_impl.h"

#include <stdlib.h>
#include <string.h>

#define OP "classify"

int hyprof__fusion_vote(const int *label, size_t m)
{
    int best = 0;
    size_t best_count = 0;
    for (size_t j = 0; j < m; j++) {
        if (label[j] <= 0)
            continue;
        size_t count = 0, seen = 0;
        for (size_t i = 0; i < m; i++) {
            count += label[i] == label[j];
            seen += i < j && label[i] == label[j];
        }
        if (!seen && count > best_count) /* ties: the earlier member's class */
            best = label[j], best_count = count;
    }
    return best;
}

int hyprof__fusion_majority(const int *label, size_t n, size_t centre)
{
    int c = label[centre];
    if (c <= 0)
        return c;
    size_t c_count = 0;
    for (size_t i = 0; i < n; i++)
        c_count += label[i] == c;
    int best = c;
    size_t best_count = c_count;
    for (size_t j = 0; j < n; j++) {
        if (label[j] <= 0 || label[j] == c)
            continue;
        size_t count = 0;
        for (size_t i = 0; i < n; i++)
            count += label[i] == label[j];
        if (count > best_count) /* ties: the centre's class, then the first in the window */
            best = label[j], best_count = count;
    }
    return best;
}

/* The majority of the (2r+1)^2 window around every labelled pixel of `in`,
 * the window clipped at the image's edges. */
static void majority_map(hyprof_ctx_t *ctx, const uint16_t *in, size_t W, size_t H, int size,
                         uint16_t *out)
{
    long r = size / 2;
#pragma omp parallel for schedule(static) num_threads(hyprof__threads(ctx))
    for (size_t y = 0; y < H; y++) {
        int win[HYPROF_FUSION_MAX_WINDOW * HYPROF_FUSION_MAX_WINDOW];
        for (size_t x = 0; x < W; x++) {
            size_t n = 0, centre = 0;
            for (long dy = -r; dy <= r; dy++)
                for (long dx = -r; dx <= r; dx++) {
                    long yy = (long)y + dy, xx = (long)x + dx;
                    if (yy < 0 || xx < 0 || yy >= (long)H || xx >= (long)W)
                        continue;
                    if (dy == 0 && dx == 0)
                        centre = n;
                    win[n++] = in[(size_t)yy * W + (size_t)xx];
                }
            out[y * W + x] = (uint16_t)hyprof__fusion_majority(win, n, centre);
        }
    }
}

/* Each member's class map of `raw`, one after the other. */
static hyprof_status_t member_maps(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                   const hyprof_cube_t *raw, hyprof_cube_t *maps)
{
    hyprof_status_t st = HYPROF_OK;
    for (size_t j = 0; j < model->nmembers && st == HYPROF_OK; j++) {
        double saved[2];
        hyprof__progress_push(ctx, 0.95 * (double)j / (double)model->nmembers,
                              0.95 * (double)(j + 1) / (double)model->nmembers, saved);
        st = hyprof_classify_input(ctx, model->member[j], raw, &maps[j], NULL);
        hyprof__progress_pop(ctx, saved);
    }
    return st;
}

/* The vote of the members' maps into `out` (which may be the first member's
 * map), and the members' share of each class into `scores` (NULL: none). */
static void vote_maps(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                      const hyprof_cube_t *maps, uint16_t *out, float *scores)
{
    size_t M = model->nmembers, npix = maps[0].width * maps[0].height;
#pragma omp parallel for schedule(static) num_threads(hyprof__threads(ctx))
    for (size_t p = 0; p < npix; p++) {
        int label[HYPROF_FUSION_MAX_MEMBERS];
        for (size_t j = 0; j < M; j++)
            label[j] = ((const uint16_t *)maps[j].data)[p];
        out[p] = (uint16_t)hyprof__fusion_vote(label, M);
        for (size_t k = 0; scores && k < model->nclasses; k++) {
            size_t count = 0;
            for (size_t j = 0; j < M; j++)
                count += label[j] == model->values[k];
            scores[k * npix + p] = (float)count / (float)M;
        }
    }
}

static hyprof_status_t fuse(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                            hyprof_cube_t *maps, hyprof_cube_t *map, hyprof_cube_t *scores)
{
    size_t W = maps[0].width, H = maps[0].height, npix = W * H;
    uint16_t *out = maps[0].data; /* the vote reads each pixel before writing it */
    uint16_t *voted = model->majority > 1 ? malloc(npix * sizeof *voted) : out;
    hyprof_status_t st = voted ? HYPROF_OK : HYPROF_ERR_NOMEM;
    if (st == HYPROF_OK && scores) {
        st = hyprof_cube_alloc(scores, HYPROF_FLOAT32, W, H, model->nclasses);
        if (st == HYPROF_OK)
            st = hyprof__cube_copy_mask(scores, &maps[0]);
    }
    if (st != HYPROF_OK) {
        if (voted != out)
            free(voted);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zux%zu pixels)", W, H);
    }
    vote_maps(ctx, model, maps, voted, scores ? scores->data : NULL);
    if (voted != out) {
        majority_map(ctx, voted, W, H, model->majority, out);
        free(voted);
    }
    float nd = hyprof__nodata_f32(&maps[0]);
    for (size_t p = 0; scores && p < npix; p++) /* as hyprof_classify marks nodata */
        if (!hyprof_cube_valid(&maps[0], p % W, p / W))
            for (size_t k = 0; k < model->nclasses; k++)
                ((float *)scores->data)[k * npix + p] = nd;
    *map = maps[0];
    memset(&maps[0], 0, sizeof maps[0]);
    return HYPROF_OK;
}

hyprof_status_t hyprof__fusion_describe(hyprof_classifier_t *m)
{
    size_t len = 64;
    for (size_t j = 0; j < m->nmembers; j++)
        len += strlen(m->member[j]->profile) + 2;
    free(m->profile);
    if (!(m->profile = malloc(len)))
        return HYPROF_ERR_NOMEM;
    char *s = m->profile;
    s += sprintf(s, "vote of %zu: ", m->nmembers);
    for (size_t j = 0; j < m->nmembers; j++)
        s += sprintf(s, "%s%s", j ? "; " : "", m->member[j]->profile);
    if (m->majority > 1)
        sprintf(s, "; then a %dx%d majority", m->majority, m->majority);
    return HYPROF_OK;
}

hyprof_status_t hyprof__classify_fused(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                       const hyprof_cube_t *raw, hyprof_cube_t *map,
                                       hyprof_cube_t *scores)
{
    if (raw->bands != model->input_bands)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the model fuses %zu profiles of %zu-band cubes: the input has "
                             "%zu band(s)", model->nmembers, model->input_bands, raw->bands);
    hyprof_cube_t *maps = calloc(model->nmembers, sizeof *maps);
    if (!maps)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    hyprof_status_t st = member_maps(ctx, model, raw, maps);
    if (st == HYPROF_OK)
        st = fuse(ctx, model, maps, map, scores);
    for (size_t j = 0; j < model->nmembers; j++)
        hyprof_cube_free(&maps[j]);
    free(maps);
    if (st == HYPROF_OK)
        st = hyprof__progress(ctx, 1.0, OP);
    return st;
}
