/* The profile search of `hyprof train --search`. Each candidate recipe is
 * computed once on the whole raw cube (the context's backend), its training
 * pixels are scaled to [-1, 1] from their min and max and cross-validated on
 * the spatial folds over the whole C x gamma grid (search_cv.c); a candidate
 * scores its best grid point's pooled accuracy, and a candidate that
 * completes its folds keeps the out-of-fold labels of its training pixels'
 * 3x3 windows. Candidates run in the given order, the first with the most
 * correct pixels is the best, and a candidate is dropped after a fold once it
 * cannot come within STOP_MARGIN of the best so far. The decision fusions of
 * the completed candidates are scored on those labels (search_fusion.c); the
 * chosen fusion's members (or the best alone) are computed again and trained
 * on all training pixels, each with its C and gamma. */
#include "fusion_impl.h"
#include "search_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OP "train"
/* A candidate stops early once it cannot come within this share of the
 * training pixels of the best so far: a weaker one still joins the fusion's
 * vote (on Indian Pines the greedy selection takes one 9 points below the
 * best), a failed one does not. */
#define STOP_MARGIN 0.15

/* The default space: each profile family at the seeds' parameters and at
 * smaller and larger scales, then the same stacked with principal components
 * (the spectral information the reductions keep least of). */
static const char *const default_space[] = {
    "eadp step=65 count=8",
    "eadp step=20 count=8",
    "eadp step=5 count=8",
    "eadp step=65 count=8 components=5",
    "eadp step=65 count=8 components=4",
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
size_t hyprof_classifier_members(const hyprof_classifier_t *m) { return m->nmembers; }
const hyprof_classifier_t *hyprof_classifier_member(const hyprof_classifier_t *m, size_t i)
{
    return i < m->nmembers ? m->member[i] : NULL;
}
int hyprof_classifier_majority(const hyprof_classifier_t *m) { return m->majority; }

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
    free(r->rank);
    free(r->fusion_members);
    free(r->fusion_majority);
    free(r->fusion_accuracy);
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

/* Rows x (count x bands) scaled in place by the training pixels' range. */
static void scale_rows(double *x, size_t count, size_t bands, const double *lo,
                       const double *hi)
{
    for (size_t i = 0; i < count * bands; i++)
        x[i] = hyprof__scale_value(lo[i % bands], hi[i % bands], x[i]);
}

/* The pixels of the 3x3 windows of fold fo's training pixels that lie in the
 * image and are valid (qpix), and where their labels go (slot: pixel i's
 * window position o is i * 9 + o). Returns their count. */
static size_t fold_queries(const hyprof_cube_t *f, const train_set_t *t, int fo, size_t *qpix,
                           size_t *slot)
{
    size_t W = f->width, H = f->height, nq = 0;
    for (size_t i = 0; i < t->n; i++)
        for (int o = 0; t->fold[i] == fo && o < 9; o++) {
            long x = (long)(t->pixel[i] % W) + o % 3 - 1, y = (long)(t->pixel[i] / W) + o / 3 - 1;
            if (x < 0 || y < 0 || x >= (long)W || y >= (long)H ||
                !hyprof_cube_valid(f, (size_t)x, (size_t)y))
                continue;
            qpix[nq] = (size_t)y * W + (size_t)x;
            slot[nq++] = i * 9 + (size_t)o;
        }
    return nq;
}

/* The out-of-fold labels of every training pixel's 3x3 window (n x 9, 0
 * outside the image or where invalid) at C and gamma, fold by fold: the
 * window of a pixel of fold f is labelled by the SVM trained outside f. */
static hyprof_status_t window_labels(hyprof_ctx_t *ctx, const hyprof_cube_t *f,
                                     const train_set_t *t, const double *x, int k, double c,
                                     double gamma, const double *lo, const double *hi, int **out)
{
    size_t B = f->bands, nq, most = 0;
    for (int fo = 0; fo < k; fo++) { /* room for the queries of the largest fold */
        size_t count = 0;
        for (size_t i = 0; i < t->n; i++)
            count += t->fold[i] == fo;
        most = count > most ? count : most;
    }
    int *lab = calloc(t->n * 9, sizeof *lab), *qlab = malloc(most * 9 * sizeof *qlab);
    size_t *qpix = malloc(most * 9 * sizeof *qpix), *slot = malloc(most * 9 * sizeof *slot);
    double *q = malloc(most * 9 * B * sizeof *q);
    hyprof_status_t st = lab && qlab && qpix && slot && q ? HYPROF_OK : HYPROF_ERR_NOMEM;
    if (st != HYPROF_OK)
        st = hyprof__error(ctx, st, OP, "out of memory (%zu pixels)", t->n);
    for (int fo = 0; fo < k && st == HYPROF_OK; fo++) {
        nq = fold_queries(f, t, fo, qpix, slot);
        hyprof__gather_rows(f, qpix, nq, q);
        scale_rows(q, nq, B, lo, hi);
        st = hyprof__search_oof(ctx, x, B, t->y, t->n, t->fold, fo, c, gamma, q, nq, qlab);
        for (size_t j = 0; st == HYPROF_OK && j < nq; j++)
            lab[slot[j]] = qlab[j];
        if (st == HYPROF_OK)
            st = hyprof__progress(ctx, (double)(fo + 1) / k, "fusion");
    }
    free(qlab), free(qpix), free(slot), free(q);
    if (st != HYPROF_OK)
        free(lab), lab = NULL;
    *out = lab;
    return st;
}

/* One candidate: compute, cross-validate, and for a completed one the
 * out-of-fold labels of the fusion; record. */
static hyprof_status_t try_one(hyprof_ctx_t *ctx, const hyprof_cube_t *raw, const train_set_t *t,
                               int k, const hyprof_train_params_t *tp, long *best_correct,
                               hyprof_search_report_t *r, size_t i, int **oof)
{
    double t0 = now(), saved[2];
    hyprof_result_t res;
    hyprof__progress_push(ctx, 0.0, 0.3, saved);
    hyprof_status_t st = hyprof_profile_compute(ctx, r->recipe[i], raw, &res);
    hyprof__progress_pop(ctx, saved);
    if (st != HYPROF_OK)
        return st;
    size_t B = r->bands[i] = res.cube.bands;
    double *x = malloc(t->n * B * sizeof *x), *lo = malloc(2 * B * sizeof *lo);
    if (!x || !lo) {
        free(x), free(lo);
        hyprof_result_free(&res);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu pixels)", t->n);
    }
    hyprof__gather_rows(&res.cube, t->pixel, t->n, x);
    hyprof__row_range(x, t->n, B, lo, lo + B);
    scale_rows(x, t->n, B, lo, lo + B);
    long correct = 0;
    size_t g = 0;
    hyprof__progress_push(ctx, 0.3, 0.9, saved);
    long beat = *best_correct - (long)(STOP_MARGIN * (double)t->n);
    st = hyprof__search_cv(ctx, x, B, t->y, t->n, t->fold, k, tp, beat, &correct, &g,
                           &r->folds_run[i]);
    hyprof__progress_pop(ctx, saved);
    r->c[i] = tp->c[g / tp->n_gamma];
    r->gamma[i] = tp->gamma[g % tp->n_gamma];
    if (st == HYPROF_OK && r->folds_run[i] == k) {
        hyprof__progress_push(ctx, 0.9, 1.0, saved);
        st = window_labels(ctx, &res.cube, t, x, k, r->c[i], r->gamma[i], lo, lo + B, oof);
        hyprof__progress_pop(ctx, saved);
    }
    free(x), free(lo);
    hyprof_result_free(&res);
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

/* Trains candidate w on every training pixel with its C and gamma. */
static hyprof_status_t train_member(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                                    const hyprof_cube_t *labels, const hyprof_train_params_t *tp,
                                    const hyprof_search_report_t *r, size_t w,
                                    hyprof_classifier_t **model)
{
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

/* The fused model over its trained members: their classes, the fusion's
 * cross-validated accuracy. */
static hyprof_status_t fused_model(hyprof_classifier_t **mem, size_t m, int majority,
                                   double accuracy, size_t input_bands,
                                   hyprof_classifier_t **model)
{
    const hyprof_classifier_t *e = mem[0];
    hyprof_classifier_t *f = *model = hyprof__classifier_new(HYPROF_CLASSIFIER_SVM, 1, e->nclasses);
    if (!f)
        return HYPROF_ERR_NOMEM;
    f->member = mem;
    f->nmembers = m;
    f->majority = majority;
    f->ntrain = e->ntrain;
    f->cv_accuracy = accuracy;
    f->input_bands = input_bands;
    memcpy(f->values, e->values, e->nclasses * sizeof *e->values);
    memcpy(f->rgba, e->rgba, 4 * e->nclasses);
    for (size_t k = 0; k < e->nclasses; k++)
        if (e->names[k] && !(f->names[k] = strdup(e->names[k])))
            return HYPROF_ERR_NOMEM;
    return hyprof__fusion_describe(f);
}

/* Trains the chosen fusion: the best candidate alone, or its members. */
static hyprof_status_t train_chosen(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                                    const hyprof_cube_t *labels, const hyprof_train_params_t *tp,
                                    const hyprof_search_report_t *r, hyprof_classifier_t **model)
{
    size_t c = r->fusion_chosen, m = r->fusion_members[c];
    int majority = r->fusion_majority[c];
    if (m == 1 && majority == 0)
        return train_member(ctx, raw, labels, tp, r, r->rank[0], model);
    hyprof_classifier_t **mem = calloc(m, sizeof *mem);
    if (!mem)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    hyprof_status_t st = HYPROF_OK;
    for (size_t j = 0; j < m && st == HYPROF_OK; j++) {
        double saved[2];
        hyprof__progress_push(ctx, (double)j / (double)m, (double)(j + 1) / (double)m, saved);
        st = train_member(ctx, raw, labels, tp, r, r->rank[j], &mem[j]);
        hyprof__progress_pop(ctx, saved);
    }
    if (st == HYPROF_OK &&
        (st = fused_model(mem, m, majority, r->fusion_accuracy[c], raw->bands, model)) == HYPROF_OK)
        return HYPROF_OK;
    if (*model) { /* it holds the members */
        hyprof_classifier_free(model);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    }
    if (st == HYPROF_ERR_NOMEM)
        hyprof__error(ctx, st, OP, "out of memory");
    for (size_t j = 0; j < m; j++)
        hyprof_classifier_free(&mem[j]);
    free(mem);
    return st;
}

static hyprof_status_t run_search(hyprof_ctx_t *ctx, const hyprof_cube_t *raw,
                                  const hyprof_cube_t *labels, const hyprof_search_params_t *sp,
                                  const hyprof_train_params_t *tp, hyprof_search_report_t *r)
{
    size_t npix = raw->width * raw->height;
    int *fold = malloc(npix * sizeof *fold), **oof = calloc(r->n, sizeof *oof);
    train_set_t t = {0, NULL, NULL, NULL};
    if (!fold || !oof) {
        free(fold), free(oof);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    }
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
        st = try_one(ctx, raw, &t, sp->folds, tp, &best, r, i, &oof[i]);
        hyprof__progress_pop(ctx, saved);
    }
    if (st == HYPROF_OK && best == 0)
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "no candidate classified any training pixel right in "
                           "cross-validation");
    if (st == HYPROF_OK)
        st = hyprof__search_fusion(ctx, oof, t.y, t.n, sp->fusion, r);
    for (size_t i = 0; i < r->n; i++)
        free(oof[i]);
    free(oof);
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
        st = train_chosen(ctx, raw, labels, tp, r, model);
        hyprof__progress_pop(ctx, saved);
    }
    return st;
}

hyprof_status_t hyprof_classify_input(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                      const hyprof_cube_t *input, hyprof_cube_t *map,
                                      hyprof_cube_t *scores)
{
    if (model->nmembers)
        return hyprof__classify_fused(ctx, model, input, map, scores);
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
