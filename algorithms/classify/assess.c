/* `assess`: confusion matrix and accuracies of a class map against a
 * reference map, over the reference's labelled pixels. */
#include "classifier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "assess"

/* A class value of band 0, or -1 when nodata, unlabelled (0) or not an
 * integer 1..65535. */
static long class_at(const hyprof_cube_t *c, size_t x, size_t y)
{
    if (!hyprof_cube_valid(c, x, y))
        return -1;
    double v = hyprof_cube_get(c, x, y, 0);
    if (!isfinite(v) || v < 1 || v > 65535 || v != floor(v))
        return -1;
    return (long)v;
}

static hyprof_status_t reference_classes(hyprof_ctx_t *ctx, const hyprof_cube_t *ref,
                                         hyprof_assessment_t *a, int *index)
{
    for (int v = 0; v <= 65535; v++)
        index[v] = -1;
    for (size_t y = 0; y < ref->height; y++)
        for (size_t x = 0; x < ref->width; x++) {
            long v = class_at(ref, x, y);
            if (v > 0)
                index[v] = 0;
        }
    for (int v = 1; v <= 65535; v++)
        if (index[v] == 0)
            a->nclasses++;
    if (a->nclasses == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the reference has no labelled pixel (class values 1..65535)");
    size_t K = a->nclasses;
    a->values = malloc(K * sizeof *a->values);
    a->confusion = calloc(K * (K + 1), sizeof *a->confusion);
    a->producer = malloc(K * sizeof *a->producer);
    a->user = malloc(K * sizeof *a->user);
    if (!a->values || !a->confusion || !a->producer || !a->user)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    size_t k = 0;
    for (int v = 1; v <= 65535; v++)
        if (index[v] == 0) {
            index[v] = (int)k;
            a->values[k++] = v;
        }
    return HYPROF_OK;
}

static void scores(hyprof_assessment_t *a)
{
    size_t K = a->nclasses, cols = K + 1;
    uint64_t diag = 0;
    double pe = 0.0, n = (double)a->total, aa = 0.0;
    size_t present = 0;
    for (size_t k = 0; k < K; k++) {
        uint64_t row = 0, col = 0;
        for (size_t j = 0; j < cols; j++)
            row += a->confusion[k * cols + j];
        for (size_t r = 0; r < K; r++)
            col += a->confusion[r * cols + k];
        uint64_t tp = a->confusion[k * cols + k];
        diag += tp;
        a->producer[k] = row ? (double)tp / (double)row : NAN;
        a->user[k] = col ? (double)tp / (double)col : NAN;
        if (row) {
            aa += a->producer[k];
            present++;
        }
        pe += ((double)row / n) * ((double)col / n);
    }
    a->oa = (double)diag / n;
    a->aa = present ? aa / (double)present : NAN;
    a->kappa = pe < 1.0 ? (a->oa - pe) / (1.0 - pe) : NAN;
}

hyprof_status_t hyprof_assess(hyprof_ctx_t *ctx, const hyprof_cube_t *map,
                              const hyprof_cube_t *reference, hyprof_assessment_t *out)
{
    memset(out, 0, sizeof *out);
    char why[160];
    if (hyprof_cube_check(map, why, sizeof why) != HYPROF_OK ||
        hyprof_cube_check(reference, why, sizeof why) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "bad cube: %s", why);
    if (map->width != reference->width || map->height != reference->height)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the class map is %zux%zu pixels, the reference %zux%zu: they "
                             "must be on the same grid", map->width, map->height,
                             reference->width, reference->height);
    int *index = malloc(65536 * sizeof *index);
    if (!index)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    hyprof_status_t st = reference_classes(ctx, reference, out, index);
    size_t cols = out->nclasses + 1;
    for (size_t y = 0; st == HYPROF_OK && y < reference->height; y++)
        for (size_t x = 0; x < reference->width; x++) {
            long r = class_at(reference, x, y);
            if (r < 0)
                continue;
            long p = class_at(map, x, y);
            size_t c = p > 0 && index[p] >= 0 ? (size_t)index[p] : out->nclasses;
            out->confusion[(size_t)index[r] * cols + c]++;
            out->total++;
        }
    free(index);
    if (st == HYPROF_OK)
        scores(out);
    else
        hyprof_assessment_free(out);
    return st;
}

void hyprof_assessment_free(hyprof_assessment_t *a)
{
    if (!a)
        return;
    free(a->values);
    free(a->confusion);
    free(a->producer);
    free(a->user);
    memset(a, 0, sizeof *a);
}
