/* `classify`: a class map from a trained model. The CPU backend is LIBSVM's
 * own svm_predict_values (the exact reimplementation in builds without
 * LIBSVM) or the ELM, parallel over pixels; the CUDA backend batches the RBF
 * kernel (or the ELM's layers) as gemms, and the pixels it flags as within
 * rounding of a tie are recomputed here with the exact host formula. */
#include "classify_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef HYPROF_HAVE_LIBSVM
#include <svm.h>
#endif

#define OP "classify"
#define ROWS_PER_STEP 16

void hyprof__svm_vote_scores(const hyprof_classifier_t *m, const int *votes, float *scores,
                             size_t npix, size_t p)
{
    const hyprof__svm_t *s = &m->svm;
    for (size_t i = 0; i < s->nr_class; i++) {
        int k = hyprof__class_index(m, s->label[i]);
        scores[(size_t)k * npix + p] = (float)votes[i] / (float)(s->nr_class - 1);
    }
}

static void scaled_pixel(const hyprof_classifier_t *m, const hyprof_cube_t *in, size_t p,
                         double *x)
{
    const float *d = in->data;
    size_t npix = in->width * in->height;
    for (size_t b = 0; b < m->bands; b++)
        x[b] = hyprof__scale(m, b, (double)d[b * npix + p]);
}

void hyprof__svm_pixel_exact(const hyprof__classify_args_t *a, size_t p, double *x,
                             double *kvalue, int *votes)
{
    const hyprof_classifier_t *m = a->model;
    scaled_pixel(m, a->in, p, x);
    a->map[p] = (uint16_t)hyprof__svm_predict_exact(&m->svm, m->bands, x, kvalue, votes);
    if (a->scores)
        hyprof__svm_vote_scores(m, votes, a->scores, a->in->width * a->in->height, p);
}

static void elm_pixel(const hyprof__classify_args_t *a, size_t p, double *x, double *hidden,
                      double *out)
{
    const hyprof_classifier_t *m = a->model;
    size_t K = m->nclasses, npix = a->in->width * a->in->height;
    scaled_pixel(m, a->in, p, x);
    size_t best = hyprof__elm_outputs(&m->elm, m->bands, K, x, hidden, out);
    a->map[p] = (uint16_t)m->values[best];
    if (!a->scores)
        return;
    double sum = 0.0;
    for (size_t k = 0; k < K; k++)
        sum += exp(out[k] - out[best]);
    for (size_t k = 0; k < K; k++)
        a->scores[k * npix + p] = (float)(exp(out[k] - out[best]) / sum);
}

#ifdef HYPROF_HAVE_LIBSVM
/* svm_predict_values on LIBSVM's own model; votes derived from its decision
 * values with its rule, for the scores. */
static void libsvm_pixel(const hyprof__classify_args_t *a, const struct svm_model *lm, size_t p,
                         double *x, struct svm_node *nodes, double *dec, int *votes)
{
    const hyprof_classifier_t *m = a->model;
    scaled_pixel(m, a->in, p, x);
    for (size_t b = 0; b < m->bands; b++) {
        nodes[b].index = (int)b + 1;
        nodes[b].value = x[b];
    }
    nodes[m->bands].index = -1;
    a->map[p] = (uint16_t)svm_predict_values(lm, nodes, dec);
    if (!a->scores)
        return;
    size_t nc = m->svm.nr_class, q = 0;
    memset(votes, 0, nc * sizeof *votes);
    for (size_t i = 0; i < nc; i++)
        for (size_t j = i + 1; j < nc; j++, q++)
            ++votes[dec[q] > 0 ? i : j];
    hyprof__svm_vote_scores(m, votes, a->scores, a->in->width * a->in->height, p);
}
#endif

typedef struct {
    double *x, *work, *out;
    int *votes;
    void *nodes;
} scratch_t;

static int scratch_alloc(scratch_t *s, const hyprof_classifier_t *m)
{
    size_t B = m->bands, K = m->nclasses;
    size_t nwork = m->kind == HYPROF_CLASSIFIER_SVM ? m->svm.nsv + K * K : m->elm.neurons;
    s->x = malloc(B * sizeof *s->x);
    s->work = malloc(nwork * sizeof *s->work);
    s->out = malloc(K * K * sizeof *s->out);
    s->votes = malloc(K * sizeof *s->votes);
    s->nodes = malloc((B + 1) * 16);
    return s->x && s->work && s->out && s->votes && s->nodes;
}

static void scratch_free(scratch_t *s)
{
    free(s->x), free(s->work), free(s->out), free(s->votes), free(s->nodes);
}

static void classify_pixel(const hyprof__classify_args_t *a, const void *lm, size_t p,
                           scratch_t *s)
{
    if (a->model->kind == HYPROF_CLASSIFIER_ELM) {
        elm_pixel(a, p, s->x, s->work, s->out);
        return;
    }
#ifdef HYPROF_HAVE_LIBSVM
    libsvm_pixel(a, lm, p, s->x, s->nodes, s->out, s->votes);
#else
    (void)lm;
    hyprof__svm_pixel_exact(a, p, s->x, s->work, s->votes);
#endif
}

/* Pixels per gemm tile of the SVM path. */
#define TILE 256

/* Per thread: the tile's pixels, flags and gemm work space (SVM path). */
typedef struct {
    size_t *px;
    uint8_t *flag;
    double *work;
    size_t rechecked;
} tile_t;

static int tile_alloc(tile_t *t, const hyprof_classifier_t *m, int gemms)
{
    memset(t, 0, sizeof *t);
    if (!gemms)
        return 1;
    t->px = malloc(TILE * sizeof *t->px);
    t->flag = malloc(TILE);
    t->work = malloc(hyprof__svm_tile_doubles(m, TILE) * sizeof *t->work);
    return t->px && t->flag && t->work;
}

static void tile_free(tile_t *t)
{
    free(t->px), free(t->flag), free(t->work);
}

/* The SVM's tile by gemms, then its flagged pixels by the exact formula. */
static void run_tile(const hyprof__classify_args_t *a, const hyprof__svm_prep_t *prep,
                     const void *lm, tile_t *t, size_t n, scratch_t *s)
{
    hyprof__svm_tile(prep, a, t->px, n, t->work, s->votes, t->flag);
    for (size_t i = 0; i < n; i++)
        if (t->flag[i]) {
            classify_pixel(a, lm, t->px[i], s);
            t->rechecked++;
        }
}

/* Rows y0..y1-1: every valid pixel, by tiles of gemms (prep) or one by one. */
static void classify_rows(const hyprof__classify_args_t *a, const hyprof__svm_prep_t *prep,
                          const void *lm, size_t y0, size_t y1, tile_t *t, scratch_t *s)
{
    const hyprof_cube_t *in = a->in;
    size_t W = in->width, n = 0;
    for (size_t p = y0 * W; p < y1 * W; p++) {
        if (!hyprof_cube_valid(in, p % W, p / W))
            continue;
        if (!prep) {
            classify_pixel(a, lm, p, s);
            continue;
        }
        t->px[n++] = p;
        if (n == TILE) {
            run_tile(a, prep, lm, t, n, s);
            n = 0;
        }
    }
    if (n)
        run_tile(a, prep, lm, t, n, s);
}

typedef struct {
    const hyprof__classify_args_t *a;
    const hyprof__svm_prep_t *prep; /* NULL: pixel by pixel */
    const void *lm;
    size_t rechecked;
    int failed, stop;
} cpu_run_t;

static void cpu_rows(hyprof_ctx_t *ctx, cpu_run_t *r)
{
    const size_t H = r->a->in->height;
    size_t rows_done = 0, rechecked = 0;
#pragma omp parallel num_threads(hyprof__threads(ctx)) reduction(+ : rechecked)
    {
        scratch_t s;
        tile_t t;
        int ok = scratch_alloc(&s, r->a->model);
        ok = tile_alloc(&t, r->a->model, r->prep != NULL) && ok;
        if (!ok) {
#pragma omp atomic write
            r->failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (size_t y0 = 0; y0 < H; y0 += ROWS_PER_STEP) {
            if (r->failed || r->stop)
                continue;
            size_t y1 = y0 + ROWS_PER_STEP < H ? y0 + ROWS_PER_STEP : H;
            classify_rows(r->a, r->prep, r->lm, y0, y1, &t, &s);
            size_t done;
#pragma omp atomic capture
            done = rows_done += y1 - y0;
            if (hyprof__progress_omp(ctx, (double)done / (double)H, OP)) {
#pragma omp atomic write
                r->stop = 1;
            }
        }
        rechecked += t.rechecked;
        tile_free(&t);
        scratch_free(&s);
    }
    r->rechecked = rechecked;
}

hyprof_status_t hyprof__cpu_classify(hyprof_ctx_t *ctx, void *args)
{
    hyprof__classify_args_t *a = args;
    const hyprof_classifier_t *m = a->model;
    cpu_run_t r = {a, NULL, NULL, 0, 0, 0};
    hyprof__svm_prep_t prep;
    int gemms = m->kind == HYPROF_CLASSIFIER_SVM && m->svm.nr_class >= 2 && m->svm.nsv > 0;
    if (gemms && !hyprof__svm_prep(m, &prep))
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    r.prep = gemms ? &prep : NULL;
#ifdef HYPROF_HAVE_LIBSVM
    if (m->kind == HYPROF_CLASSIFIER_SVM && !(r.lm = hyprof__libsvm_view(&m->svm, m->bands))) {
        if (gemms)
            hyprof__svm_prep_free(&prep);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    }
#endif
    /* Each OpenMP thread calls BLAS: BLAS itself on one thread. */
    int blas = hyprof__blas_threads_set(1);
    cpu_rows(ctx, &r);
    hyprof__blas_threads_restore(blas);
#ifdef HYPROF_HAVE_LIBSVM
    hyprof__libsvm_view_free((void *)r.lm);
#endif
    if (gemms) {
        hyprof__svm_prep_free(&prep);
        hyprof__log(ctx, HYPROF_LOG_DEBUG, "classify: %zu pixel(s) within rounding of a tie "
                    "computed again with LIBSVM's exact formula", r.rechecked);
    }
    if (r.failed)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    return r.stop ? hyprof__progress(ctx, 1.0, OP) : HYPROF_OK;
}

/* One pixel by the exact host formula: LIBSVM's (reimplemented) or the ELM's. */
static void exact_pixel(const hyprof__classify_args_t *a, size_t p, scratch_t *s)
{
    if (a->model->kind == HYPROF_CLASSIFIER_ELM)
        elm_pixel(a, p, s->x, s->work, s->out);
    else
        hyprof__svm_pixel_exact(a, p, s->x, s->work, s->votes);
}

/* After the CUDA path: the flagged pixels again, by the exact formula; and
 * nodata pixels back to 0 (the device classified every pixel). */
static hyprof_status_t recheck_pixels(hyprof_ctx_t *ctx, hyprof__classify_args_t *a)
{
    const hyprof_cube_t *in = a->in;
    const size_t W = in->width, npix = W * in->height, K = a->model->nclasses;
    size_t n = 0;
    int failed = 0;
#pragma omp parallel num_threads(hyprof__threads(ctx)) reduction(+ : n)
    {
        scratch_t s;
        if (!scratch_alloc(&s, a->model)) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 4096)
        for (size_t p = 0; p < npix; p++) {
            if (failed)
                continue;
            if (!hyprof_cube_valid(in, p % W, p / W)) {
                a->map[p] = 0;
                for (size_t k = 0; a->scores && k < K; k++)
                    a->scores[k * npix + p] = hyprof__nodata_f32(in);
            } else if (a->recheck[p]) {
                exact_pixel(a, p, &s);
                n++;
            }
        }
        scratch_free(&s);
    }
    if (failed)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    a->rechecked = n;
    hyprof__log(ctx, HYPROF_LOG_INFO, "classify: %zu of %zu pixel(s) (a result within rounding "
                "of a tie) recomputed on the host with the exact formula", n, npix);
    return hyprof__progress(ctx, 1.0, OP);
}

static hyprof_status_t check_model_input(hyprof_ctx_t *ctx, const hyprof_classifier_t *m,
                                         const hyprof_cube_t *in)
{
    if (m->nmembers)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the model fuses %zu profiles: it classifies raw cubes of %zu "
                             "bands (hyprof_classify_input), not features", m->nmembers,
                             m->input_bands);
    if (in->bands != m->bands)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the input has %zu band(s) but the model was trained on %zu",
                             in->bands, m->bands);
    return HYPROF_OK;
}

static hyprof_status_t alloc_outputs(const hyprof_classifier_t *m, const hyprof_cube_t *in,
                                     hyprof_cube_t *map, hyprof_cube_t *scores)
{
    size_t W = in->width, H = in->height;
    hyprof_status_t st = hyprof_cube_alloc(map, HYPROF_UINT16, W, H, 1);
    if (st == HYPROF_OK)
        st = hyprof__cube_copy_mask(map, in);
    map->has_nodata = 1;
    map->nodata = 0.0;
    if (st == HYPROF_OK && scores) {
        st = hyprof_cube_alloc(scores, HYPROF_FLOAT32, W, H, m->nclasses);
        if (st == HYPROF_OK)
            st = hyprof__cube_copy_mask(scores, in);
        float nd = hyprof__nodata_f32(in);
        float *d = scores->data;
        for (size_t i = 0; st == HYPROF_OK && i < W * H * m->nclasses; i++)
            d[i] = nd;
    }
    return st;
}

hyprof_status_t hyprof_classify(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                const hyprof_cube_t *features, hyprof_cube_t *map,
                                hyprof_cube_t *scores)
{
    memset(map, 0, sizeof *map);
    if (scores)
        memset(scores, 0, sizeof *scores);
    hyprof_cube_t tmp;
    const hyprof_cube_t *in;
    hyprof_status_t st = check_model_input(ctx, model, features);
    if (st == HYPROF_OK)
        st = hyprof__input_f32(ctx, OP, features, &tmp, &in);
    if (st != HYPROF_OK)
        return st;
    if ((st = alloc_outputs(model, in, map, scores)) != HYPROF_OK) {
        hyprof_cube_free(&tmp);
        hyprof_cube_free(map);
        if (scores)
            hyprof_cube_free(scores);
        return hyprof__error(ctx, st, OP, "out of memory for a %zux%zu class map", in->width,
                             in->height);
    }
    hyprof__impl_fn cuda = HYPROF_CUDA_IMPL(hyprof__cuda_classify);
    uint8_t *recheck = cuda ? calloc(in->width * in->height, 1) : NULL;
    hyprof__classify_args_t a = {model, in, map->data, scores ? scores->data : NULL, recheck, 0};
    if (cuda && !recheck)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    else
        st = hyprof__dispatch(ctx, OP, hyprof__cpu_classify, cuda, &a);
    if (st == HYPROF_OK && hyprof_ctx_used_backend(ctx) == HYPROF_BACKEND_CUDA)
        st = recheck_pixels(ctx, &a);
    free(recheck);
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK) {
        hyprof_cube_free(map);
        if (scores)
            hyprof_cube_free(scores);
    }
    return st;
}
