/* The profile search of `hyprof train --search`. Each candidate recipe is
 * computed once on the whole raw cube (the context's backend), its training
 * pixels are scaled to [-1, 1] from their min and max and cross-validated on
 * the spatial folds over the whole C x gamma grid (search_cv.c); a candidate
 * scores its best grid point's pooled accuracy. Candidates run in the given
 * order, the first with the most correct pixels wins, and a candidate is
 * dropped after a fold once it cannot beat the best so far. The winner is
 * computed again and trained on all training pixels with its C and gamma. */
#include "search_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OP "train"

/* The default space: each profile family at the seeds' parameters and at
 * smaller and larger scales, then the same stacked with principal components
 * (the spectral information the reductions keep least of). */
static const char *const default_space[] = {
    "eadp step=65 count=8",
    "eadp step=20 count=8",
    "eadp step=5 count=8",
    "eap attribute=area",
    "eap attribute=area thresholds=4,9,16,36,64,100,196",
    "eap attribute=std",
    "emp radii=1,3,5,7",
    "emp radii=1,2,3,4,5",
    "wmcd",
    "wmcd radii=1,2,3,4,5",
    "eadp step=65 count=8 + pca components=10",
    "eadp step=20 count=8 + pca components=10",
    "eadp step=5 count=8 + pca components=10",
    "eap attribute=area + pca components=10",
    "eap attribute=area thresholds=4,9,16,36,64,100,196 + pca components=10",
    "eap attribute=std + pca components=10",
    "emp radii=1,3,5,7 + pca components=10",
    "emp radii=1,2,3,4,5 + pca components=10",
    "wmcd + pca components=10",
    "wmcd radii=1,2,3,4,5 + pca components=10",
};

const char *const *hyprof_search_default_space(size_t *count)
{
    *count = sizeof default_space / sizeof *default_space;
    return default_space;
}

const char *hyprof_classifier_profile(const hyprof_classifier_t *m) { return m->profile; }
size_t hyprof_classifier_input_bands(const hyprof_classifier_t *m) { return m->input_bands; }

void hyprof_search_report_free(hyprof_search_report_t *r)
{
    for (size_t i = 0; r->recipe && i < r->n; i++)
        free(r->recipe[i]);
    free(r->recipe);
    free(r->accuracy);
    free(r->c);
    free(r->gamma);
    free(r->seconds);
    free(r->bands);
    free(r->folds_run);
    memset(r, 0, sizeof *r);
}

static hyprof_status_t report_alloc(hyprof_search_report_t *r, const char *const *recipes,
                                    size_t n)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    r->recipe = calloc(n, sizeof *r->recipe);
    r->accuracy = calloc(n, sizeof *r->accuracy);
    r->c = calloc(n, sizeof *r->c);
    r->gamma = calloc(n, sizeof *r->gamma);
    r->seconds = calloc(n, sizeof *r->seconds);
    r->bands = calloc(n, sizeof *r->bands);
    r->folds_run = calloc(n, sizeof *r->folds_run);
    if (!r->recipe || !r->accuracy || !r->c || !r->gamma || !r->seconds || !r->bands ||
        !r->folds_run)
        return HYPROF_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        r->accuracy[i] = NAN;
        if (!(r->recipe[i] = strdup(recipes[i])))
            return HYPROF_ERR_NOMEM;
    }
    return HYPROF_OK;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The training pixels: labelled (folds >= 0) and valid in the raw cube. */
typedef struct {
    size_t n;
    size_t *pixel;
    int *y, *fold;
} train_set_t;

static hyprof_status_t collect(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                               const hyprof_cube_t *labels, const int *fold, train_set_t *t)
{
    size_t W = raw->width, npix = W * raw->height;
    t->n = 0;
    t->pixel = malloc(npix * sizeof *t->pixel);
    t->y = malloc(npix * sizeof *t->y);
    t->fold = malloc(npix * sizeof *t->fold);
    if (!t->pixel || !t->y || !t->fold)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    for (size_t i = 0; i < npix; i++) {
        if (fold[i] < 0 || !hyprof_cube_valid(raw, i % W, i / W))
            continue;
        t->pixel[t->n] = i;
        t->y[t->n] = (int)hyprof_cube_get(labels, i % W, i / W, 0);
        t->fold[t->n++] = fold[i];
    }
    if (t->n == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP, "no labelled pixel is valid in the input");
    return HYPROF_OK;
}

static void train_set_free(train_set_t *t)
{
    free(t->pixel);
    free(t->y);
    free(t->fold);
}

/* The training pixels' features, scaled to [-1, 1] from their own min/max. */
static double *scaled_features(const hyprof_cube_t *f, const train_set_t *t)
{
    size_t B = f->bands, W = f->width;
    double *x = malloc(t->n * B * sizeof *x);
    if (!x)
        return NULL;
    for (size_t b = 0; b < B; b++) {
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < t->n; i++) {
            double v = hyprof_cube_get(f, t->pixel[i] % W, t->pixel[i] / W, b);
            x[i * B + b] = v;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        for (size_t i = 0; i < t->n; i++)
            x[i * B + b] = hi > lo ? -1.0 + 2.0 * (x[i * B + b] - lo) / (hi - lo) : 0.0;
    }
    return x;
}

/* One candidate: compute, cross-validate, record. */
static hyprof_status_t try_one(hyprof_ctx_t *ctx, const hyprof_cube_t *raw, const train_set_t *t,
                               int k, const hyprof_train_params_t *tp, long *best_correct,
                               hyprof_search_report_t *r, size_t i)
{
    double t0 = now(), saved[2];
    hyprof_result_t res;
    hyprof__progress_push(ctx, 0.0, 0.3, saved);
    hyprof_status_t st = hyprof_profile_compute(ctx, r->recipe[i], raw, &res);
    hyprof__progress_pop(ctx, saved);
    if (st != HYPROF_OK)
        return st;
    r->bands[i] = res.cube.bands;
    double *x = scaled_features(&res.cube, t);
    hyprof_result_free(&res);
    if (!x)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu pixels)", t->n);
    long correct = 0;
    size_t g = 0;
    hyprof__progress_push(ctx, 0.3, 1.0, saved);
    st = hyprof__search_cv(ctx, x, r->bands[i], t->y, t->n, t->fold, k, tp, *best_correct,
                           &correct, &g, &r->folds_run[i]);
    hyprof__progress_pop(ctx, saved);
    free(x);
    r->c[i] = tp->c[g / tp->n_gamma];
    r->gamma[i] = tp->gamma[g % tp->n_gamma];
    r->seconds[i] = now() - t0;
    if (st == HYPROF_OK && r->folds_run[i] == k) {
        r->accuracy[i] = (double)correct / (double)t->n;
        if (correct > *best_correct) {
            *best_correct = correct;
            r->best = i;
        }
    }
    hyprof__log(ctx, HYPROF_LOG_INFO, "search: '%s': %zu bands, %s %.4f (%d/%d folds, %.2f s)",
                r->recipe[i], r->bands[i], r->folds_run[i] == k ? "accuracy" : "stopped at",
                (double)correct / (double)t->n, r->folds_run[i], k, r->seconds[i]);
    return st;
}

static hyprof_status_t check(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                             const hyprof_cube_t *labels, const hyprof_search_params_t *sp,
                             const hyprof_train_params_t *tp)
{
    if (tp->kind != HYPROF_CLASSIFIER_SVM)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "--search works with --classifier svm only");
    if (!tp->c || !tp->gamma || tp->n_c < 1 || tp->n_gamma < 1)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "empty C or gamma grid");
    if (labels->width != raw->width || labels->height != raw->height)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the labels are %zux%zu pixels, the input %zux%zu: they must be "
                             "on the same grid", labels->width, labels->height, raw->width,
                             raw->height);
    if (sp->recipes && sp->n == 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "--search: no candidate");
    size_t bands;
    for (size_t i = 0; sp->recipes && i < sp->n; i++) {
        hyprof_status_t st = hyprof_profile_check(ctx, sp->recipes[i], raw->bands, &bands);
        if (st != HYPROF_OK)
            return st;
    }
    return HYPROF_OK;
}

/* Trains the winner on every training pixel with its C and gamma. */
static hyprof_status_t train_winner(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                                    const hyprof_cube_t *labels, const hyprof_train_params_t *tp,
                                    const hyprof_search_report_t *r, hyprof_classifier_t **model)
{
    size_t w = r->best;
    hyprof_result_t res;
    hyprof_status_t st = hyprof_profile_compute(ctx, r->recipe[w], raw, &res);
    if (st != HYPROF_OK)
        return st;
    hyprof_train_params_t p = *tp;
    p.c = &r->c[w], p.n_c = 1;
    p.gamma = &r->gamma[w], p.n_gamma = 1;
    p.band_names = (const char *const *)res.band_names;
    st = hyprof_train(ctx, &res.cube, labels, &p, model);
    hyprof_result_free(&res);
    if (st != HYPROF_OK)
        return st;
    (*model)->cv_accuracy = r->accuracy[w];
    (*model)->input_bands = raw->bands;
    if (!((*model)->profile = strdup(r->recipe[w]))) {
        hyprof_classifier_free(model);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    }
    return HYPROF_OK;
}

static hyprof_status_t run_search(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                                  const hyprof_cube_t *labels, const hyprof_search_params_t *sp,
                                  const hyprof_train_params_t *tp, hyprof_search_report_t *r)
{
    size_t npix = raw->width * raw->height;
    int *fold = malloc(npix * sizeof *fold);
    train_set_t t = {0, NULL, NULL, NULL};
    if (!fold)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    hyprof_status_t st = hyprof_search_folds(ctx, labels, sp->folds, sp->seed, fold, &r->groups,
                                             &r->largest_group);
    if (st == HYPROF_OK)
        st = collect(ctx, raw, labels, fold, &t);
    free(fold);
    r->folds = sp->folds;
    r->pixels = t.n;
    long best = 0;
    for (size_t i = 0; st == HYPROF_OK && i < r->n; i++) {
        /* A default candidate this cube cannot take (more components than
         * bands, radii larger than the image) is skipped; a given list was
         * checked before the search. */
        size_t bands;
        if (hyprof_profile_check(ctx, r->recipe[i], raw->bands, &bands) != HYPROF_OK) {
            hyprof__log(ctx, HYPROF_LOG_INFO, "search: '%s' skipped: %s", r->recipe[i],
                        hyprof_ctx_last_error(ctx));
            continue;
        }
        double saved[2];
        hyprof__progress_push(ctx, 0.9 * (double)i / (double)r->n,
                              0.9 * (double)(i + 1) / (double)r->n, saved);
        st = try_one(ctx, raw, &t, sp->folds, tp, &best, r, i);
        hyprof__progress_pop(ctx, saved);
    }
    if (st == HYPROF_OK && best == 0)
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "no candidate classified any training pixel right in "
                           "cross-validation");
    train_set_free(&t);
    return st;
}

hyprof_status_t hyprof_train_search(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                                    const hyprof_cube_t *labels,
                                    const hyprof_search_params_t *sp,
                                    const hyprof_train_params_t *tp,
                                    hyprof_classifier_t **model, hyprof_search_report_t *r)
{
    *model = NULL;
    memset(r, 0, sizeof *r);
    hyprof_status_t st = check(ctx, raw, labels, sp, tp);
    if (st != HYPROF_OK)
        return st;
    size_t n = sp->n;
    const char *const *recipes = sp->recipes ? sp->recipes : hyprof_search_default_space(&n);
    if (report_alloc(r, recipes, n) != HYPROF_OK) {
        hyprof_search_report_free(r);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    }
    if ((st = run_search(ctx, raw, labels, sp, tp, r)) == HYPROF_OK) {
        double saved[2];
        hyprof__progress_push(ctx, 0.9, 1.0, saved);
        st = train_winner(ctx, raw, labels, tp, r, model);
        hyprof__progress_pop(ctx, saved);
    }
    return st;
}

hyprof_status_t hyprof_classify_input(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                      const hyprof_cube_t *input, hyprof_cube_t *map,
                                      hyprof_cube_t *scores)
{
    if (!model->profile || input->bands != model->input_bands)
        return hyprof_classify(ctx, model, input, map, scores);
    hyprof_result_t res;
    double saved[2];
    hyprof__progress_push(ctx, 0.0, 0.5, saved);
    hyprof_status_t st = hyprof_profile_compute(ctx, model->profile, input, &res);
    hyprof__progress_pop(ctx, saved);
    if (st != HYPROF_OK)
        return st;
    hyprof__progress_push(ctx, 0.5, 1.0, saved);
    st = hyprof_classify(ctx, model, &res.cube, map, scores);
    hyprof__progress_pop(ctx, saved);
    hyprof_result_free(&res);
    return st;
}
