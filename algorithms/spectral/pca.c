/* PCA feature extraction: argument checks, the fit/apply dispatch, the
 * ordering and sign rule, the CPU backend and the `pca` operation. */
#include "pca_impl.h"
#include "pca_model.h"
#include "../core/ops.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "pca"

/* The covariance: chunks of COV_CHUNK pixels, centred into a double buffer
 * and added by one single-threaded dsyrk each; OpenMP threads take groups of
 * consecutive chunks, each group summing its chunks in order into its own
 * partial matrix, and the partials are added in group order. The group count
 * comes from the cube's shape (at most COV_GROUPS, and the partials within
 * COV_PARTIAL_BYTES), never from the thread count: every machine computes the
 * same model. */
#define COV_CHUNK 2048
#define COV_GROUPS 64
#define COV_PARTIAL_BYTES ((size_t)64 << 20)

/* ---- CPU backend --------------------------------------------------------- */

/* Band means over the valid pixels, each a sequential double sum. Four bands
 * share a pass over the pixels: four independent sums keep the adder busy
 * where one would wait on its own latency (the same sums, the same bits). */
static void masked_means(const hyprof_pca_fit_args_t *a, int threads)
{
    size_t groups = (a->bands + 3) / 4;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t g = 0; g < groups; g++) {
        const float *x[4];
        for (size_t j = 0; j < 4; j++)
            x[j] = a->x + (4 * g + j < a->bands ? 4 * g + j : 4 * g) * a->npix;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (size_t p = 0; p < a->npix; p++)
            if (!a->mask || a->mask[p]) {
                s0 += x[0][p];
                s1 += x[1][p];
                s2 += x[2][p];
                s3 += x[3][p];
            }
        double s[4] = {s0, s1, s2, s3};
        for (size_t j = 0; j < 4 && 4 * g + j < a->bands; j++)
            a->mean[4 * g + j] = s[j] / (double)a->nvalid;
    }
}

/* Copies pixels [p0, p0+n) centred into buf (n x bands, column-major);
 * masked pixels become zero rows so they add nothing to products. */
static void centre_chunk(const float *x, const uint8_t *mask, size_t npix, size_t bands,
                         const double *mean, size_t p0, size_t n, double *buf)
{
    for (size_t b = 0; b < bands; b++) {
        const float *xb = x + b * npix + p0;
        double *d = buf + b * n;
        for (size_t i = 0; i < n; i++)
            d[i] = (!mask || mask[p0 + i]) ? (double)xb[i] - mean[b] : 0.0;
    }
}

static size_t cov_group_count(size_t nchunks, size_t bands)
{
    size_t g = COV_PARTIAL_BYTES / (bands * bands * sizeof(double));
    g = g < COV_GROUPS ? g : COV_GROUPS;
    g = g < nchunks ? g : nchunks;
    return g > 0 ? g : 1;
}

/* Chunks [c0, c1) added in order into part (bands x bands, upper triangle). */
static void cov_group(const hyprof_pca_fit_args_t *a, size_t c0, size_t c1, double *buf,
                      double *part)
{
    size_t B = a->bands;
    for (size_t c = c0; c < c1; c++) {
        size_t p0 = c * COV_CHUNK, n = a->npix - p0 < COV_CHUNK ? a->npix - p0 : COV_CHUNK;
        centre_chunk(a->x, a->mask, a->npix, B, a->mean, p0, n, buf);
        cblas_dsyrk(CblasColMajor, CblasUpper, CblasTrans, (int)B, (int)n, 1.0, buf, (int)n,
                    1.0, part, (int)B);
    }
}

/* The sums of products of the centred pixels into cov's upper triangle (zeroed
 * by the caller). The caller holds OpenBLAS at one thread. */
static hyprof_status_t covariance(hyprof_ctx_t *ctx, const hyprof_pca_fit_args_t *a,
                                  int threads, double *cov)
{
    size_t B = a->bands, nchunks = (a->npix + COV_CHUNK - 1) / COV_CHUNK;
    size_t G = cov_group_count(nchunks, B), done = 0;
    double *part = G > 1 ? calloc(G * B * B, sizeof *part) : cov; /* one group: cov itself */
    if (!part)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate the covariance buffers");
    int stop = 0, nomem = 0;
    #pragma omp parallel num_threads(threads) if (G > 1)
    {
        double *buf = malloc(COV_CHUNK * B * sizeof *buf);
        #pragma omp for schedule(dynamic, 1)
        for (size_t g = 0; g < G; g++) {
            int halt;
            #pragma omp atomic read
            halt = stop;
            if (!buf) {
                #pragma omp atomic write
                nomem = 1;
            }
            if (halt || !buf)
                continue;
            cov_group(a, g * nchunks / G, (g + 1) * nchunks / G, buf, part + g * B * B);
            size_t now;
            #pragma omp atomic capture
            now = ++done;
            if (hyprof__progress_omp(ctx, 0.9 * (double)now / (double)G, OP)) {
                #pragma omp atomic write
                stop = 1;
            }
        }
        free(buf);
    }
    for (size_t g = 0; G > 1 && g < G && !nomem && !stop; g++)
        for (size_t j = 0; j < B; j++)
            for (size_t i = 0; i <= j; i++)
                cov[i + j * B] += part[g * B * B + i + j * B];
    if (part != cov)
        free(part);
    if (nomem)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate the covariance buffers");
    return stop ? hyprof__error(ctx, HYPROF_ERR_CANCELLED, OP, "cancelled") : HYPROF_OK;
}

hyprof_status_t hyprof__cpu_pca_fit(hyprof_ctx_t *ctx, void *args)
{
    hyprof_pca_fit_args_t *a = args;
    size_t B = a->bands;
    int threads = hyprof__threads(ctx);
    double *cov = calloc(B * B, sizeof *cov);
    if (!cov)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate the covariance");
    masked_means(a, threads);
    int blas_threads = hyprof__blas_threads_set(1);
    hyprof_status_t st = covariance(ctx, a, threads, cov);
    lapack_int info = 0;
    if (st == HYPROF_OK) {
        for (size_t j = 0; j < B; j++)
            for (size_t i = 0; i <= j; i++)
                cov[i + j * B] /= (double)(a->nvalid - 1);
        /* Still one BLAS thread: a band-sized eigenproblem is too small to
         * share, and OpenBLAS's threaded level-2 steps sum partial results in
         * an order that depends on the thread count; on one thread the model
         * is the same on every machine. */
        info = LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'U', (lapack_int)B, cov, (lapack_int)B,
                              a->eigenvalues);
    }
    hyprof__blas_threads_restore(blas_threads);
    if (st == HYPROF_OK && info != 0)
        st = hyprof__error(ctx, HYPROF_ERR_NUMERIC, OP,
                           "the symmetric eigensolver (dsyevd) failed, info=%d", (int)info);
    if (st == HYPROF_OK)
        memcpy(a->eigenvectors, cov, B * B * sizeof *cov);
    free(cov);
    return st;
}

/* Projection without BLAS: a skinny n x B x K product is memory-bound, and
 * OpenMP over pixel tiles beats many small threaded dgemm calls (whose
 * threads also fight OpenMP's). out = V^T x - V^T mean, accumulated in double
 * per pixel in band order: acc = -offset, then acc += v * x band by band.
 * PROJ_PIX pixels by PROJ_COMP components are accumulated in registers over
 * all the bands; the AVX2 clone runs the same multiplies and adds (no fused
 * multiply-add), four doubles at a time, so both clones give the same bits. */
#define APPLY_TILE 512
#define PROJ_PIX 8
#define PROJ_COMP 4

/* Components k0 .. k0+kn (kn <= PROJ_COMP) of pixels p0+i0 .. p0+i0+PROJ_PIX. */
__attribute__((target_clones("avx2", "default")))
static void project_block(const hyprof_pca_apply_args_t *a, const double *offset, size_t p0,
                          size_t i0, size_t k0, size_t kn, double acc[PROJ_COMP][PROJ_PIX])
{
    double v[PROJ_COMP];
    for (size_t kk = 0; kk < PROJ_COMP; kk++)
        for (size_t i = 0; i < PROJ_PIX; i++)
            acc[kk][i] = kk < kn ? -offset[k0 + kk] : 0.0;
    for (size_t b = 0; b < a->bands; b++) {
        const float *x = a->x + b * a->npix + p0 + i0;
        double xd[PROJ_PIX];
        for (size_t i = 0; i < PROJ_PIX; i++)
            xd[i] = (double)x[i];
        for (size_t kk = 0; kk < PROJ_COMP; kk++)
            v[kk] = kk < kn ? a->vectors[b + (k0 + kk) * a->bands] : 0.0;
        for (size_t kk = 0; kk < PROJ_COMP; kk++)
            for (size_t i = 0; i < PROJ_PIX; i++)
                acc[kk][i] += v[kk] * xd[i];
    }
}

/* Pixel p of the tile, one at a time (the tile's last pixels): the same sums. */
static double project_one(const hyprof_pca_apply_args_t *a, const double *offset, size_t p,
                          size_t k)
{
    double acc = -offset[k];
    for (size_t b = 0; b < a->bands; b++)
        acc += a->vectors[b + k * a->bands] * (double)a->x[b * a->npix + p];
    return acc;
}

static void project_tile(const hyprof_pca_apply_args_t *a, const double *offset, size_t p0,
                         size_t n)
{
    size_t K = a->components, nb = n - n % PROJ_PIX;
    double acc[PROJ_COMP][PROJ_PIX];
    for (size_t k0 = 0; k0 < K; k0 += PROJ_COMP) {
        size_t kn = K - k0 < PROJ_COMP ? K - k0 : PROJ_COMP;
        for (size_t i0 = 0; i0 < nb; i0 += PROJ_PIX) {
            project_block(a, offset, p0, i0, k0, kn, acc);
            for (size_t kk = 0; kk < kn; kk++)
                for (size_t i = 0; i < PROJ_PIX; i++) {
                    size_t p = p0 + i0 + i;
                    a->out[(k0 + kk) * a->npix + p] =
                        (!a->mask || a->mask[p]) ? (float)acc[kk][i] : a->nodata;
                }
        }
    }
    for (size_t p = p0 + nb; p < p0 + n; p++)
        for (size_t k = 0; k < K; k++)
            a->out[k * a->npix + p] =
                (!a->mask || a->mask[p]) ? (float)project_one(a, offset, p, k) : a->nodata;
}

hyprof_status_t hyprof__cpu_pca_apply(hyprof_ctx_t *ctx, void *args)
{
    hyprof_pca_apply_args_t *a = args;
    size_t K = a->components, ntiles = (a->npix + APPLY_TILE - 1) / APPLY_TILE, done = 0;
    double *offset = calloc(K, sizeof *offset);
    int stop = 0;
    if (!offset)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    for (size_t k = 0; k < K; k++)
        for (size_t b = 0; b < a->bands; b++)
            offset[k] += a->vectors[b + k * a->bands] * a->mean[b];
    #pragma omp parallel for num_threads(hyprof__threads(ctx)) schedule(dynamic, 16)
    for (size_t t = 0; t < ntiles; t++) {
        int halt;
        #pragma omp atomic read
        halt = stop;
        if (halt)
            continue;
        size_t p0 = t * APPLY_TILE;
        project_tile(a, offset, p0, a->npix - p0 < APPLY_TILE ? a->npix - p0 : APPLY_TILE);
        size_t now;
        #pragma omp atomic capture
        now = ++done;
        if (now % 64 == 0 && hyprof__progress_omp(ctx, (double)now / (double)ntiles, OP)) {
            #pragma omp atomic write
            stop = 1;
        }
    }
    free(offset);
    if (stop)
        return hyprof__error(ctx, HYPROF_ERR_CANCELLED, OP, "cancelled");
    return hyprof__progress(ctx, 1.0, OP);
}

/* Fit-transform on the CPU: the fit, the model, then the projection (the
 * fit's progress is the first 60 %). */
static hyprof_status_t cpu_pca_fit_transform(hyprof_ctx_t *ctx, void *args)
{
    hyprof_pca_fit_args_t *a = args;
    double saved[2];
    hyprof__progress_push(ctx, 0.0, 0.6, saved);
    hyprof_status_t st = hyprof__cpu_pca_fit(ctx, a);
    hyprof__progress_pop(ctx, saved);
    if (st == HYPROF_OK)
        st = a->finish(a->user);
    if (st == HYPROF_OK) {
        hyprof__progress_push(ctx, 0.6, 1.0, saved);
        st = hyprof__cpu_pca_apply(ctx, a->apply);
        hyprof__progress_pop(ctx, saved);
    }
    return st;
}

/* ---- the public API: checks, dispatch, ordering ---------------------------- */

/* Descending order, and the sign rule: the largest-magnitude loading of each
 * component is positive (the first such loading on ties). Applied once here,
 * so both backends give the same model. */
static void order_and_sign(const hyprof_pca_fit_args_t *a, hyprof_pca_model_t *m)
{
    size_t B = a->bands;
    for (size_t k = 0; k < m->components; k++) {
        size_t src = B - 1 - k;
        const double *v = a->eigenvectors + src * B;
        size_t imax = 0;
        for (size_t i = 1; i < B; i++)
            if (fabs(v[i]) > fabs(v[imax]))
                imax = i;
        double sign = v[imax] < 0.0 ? -1.0 : 1.0;
        for (size_t i = 0; i < B; i++)
            m->vectors[k * B + i] = sign * v[i];
        m->eigenvalues[k] = a->eigenvalues[src];
    }
    m->total_variance = 0.0;
    for (size_t i = 0; i < B; i++)
        m->total_variance += a->eigenvalues[i];
}

/* What fit_model's finish step needs: the raw decomposition and the model. */
typedef struct {
    hyprof_pca_fit_args_t *fit;
    hyprof_pca_model_t *model;
} finish_t;

static hyprof_status_t finish_model(void *user)
{
    finish_t *f = user;
    order_and_sign(f->fit, f->model);
    f->model->samples = f->fit->nvalid;
    return HYPROF_OK;
}

/* The fit, and with `out` the projection of the same cube in the same
 * backend call (fit-transform: the CUDA backend uploads the cube once). */
static hyprof_status_t fit_model(hyprof_ctx_t *ctx, const hyprof_cube_t *in, size_t components,
                                 hyprof_pca_model_t **model, hyprof_cube_t *out,
                                 hyprof_pca_device_fn on_device, void *device_user)
{
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    *model = NULL;
    if (out)
        memset(out, 0, sizeof *out);
    hyprof_status_t st = hyprof__input_f32(ctx, OP, in, &tmp, &x);
    if (st != HYPROF_OK)
        return st;
    size_t B = x->bands, npix = x->width * x->height, nvalid = hyprof_cube_count_valid(x);
    if (B < 2)
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "the input has %zu band; PCA needs at least 2", B);
    else if (components < 1 || components > B)
        st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                           "components %zu is out of range: the input has %zu bands",
                           components, B);
    else if (nvalid < 2)
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "%zu valid pixel(s) of %zu; PCA needs at least 2", nvalid, npix);
    hyprof_pca_model_t *m = st == HYPROF_OK ? hyprof__pca_model_new(B, components) : NULL;
    double *work = st == HYPROF_OK ? malloc((B * B + B) * sizeof *work) : NULL;
    if (st == HYPROF_OK && (!m || !work))
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate a %zu-band model", B);
    if (st == HYPROF_OK && out &&
        hyprof_cube_alloc(out, HYPROF_FLOAT32, x->width, x->height, components) != HYPROF_OK)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate the %zu-component output",
                           components);
    if (st == HYPROF_OK) {
        hyprof_pca_fit_args_t a = {x->data, x->mask, npix, B, nvalid, m->mean, work, work + B,
                                   NULL, NULL, NULL, on_device, device_user, components};
        /* The apply step reads the model's component-major vectors as a
         * bands x components column-major matrix: the same memory. */
        hyprof_pca_apply_args_t ap = {x->data, x->mask, npix, B, components, m->mean,
                                      m->vectors, hyprof__nodata_f32(x), out ? out->data : NULL};
        finish_t f = {&a, m};
        if (out) {
            a.apply = &ap;
            a.finish = finish_model;
            a.user = &f;
            st = hyprof__dispatch(ctx, OP, cpu_pca_fit_transform,
                                  HYPROF_CUDA_IMPL(hyprof__cuda_pca_fit_transform), &a);
        } else {
            st = hyprof__dispatch(ctx, OP, hyprof__cpu_pca_fit,
                                  HYPROF_CUDA_IMPL(hyprof__cuda_pca_fit), &a);
            if (st == HYPROF_OK)
                st = finish_model(&f);
        }
    }
    free(work);
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK) {
        hyprof_pca_model_free(&m);
        if (out)
            hyprof_cube_free(out);
    }
    *model = m;
    return st;
}

hyprof_status_t hyprof_pca_fit(hyprof_ctx_t *ctx, const hyprof_cube_t *in, size_t components,
                               hyprof_pca_model_t **model)
{
    return fit_model(ctx, in, components, model, NULL, NULL, NULL);
}

hyprof_status_t hyprof_pca_fit_transform(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                                         size_t components, hyprof_pca_model_t **model,
                                         hyprof_cube_t *out)
{
    if (!out)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "fit-transform without an output");
    return fit_model(ctx, in, components, model, out, NULL, NULL);
}

/* Fit-transform that hands the projected components to `on_device` when the
 * CUDA backend has them on the device (the eadp operation). */
hyprof_status_t hyprof__pca_fit_transform_device(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                                                 size_t components, hyprof_pca_model_t **model,
                                                 hyprof_cube_t *out,
                                                 hyprof_pca_device_fn on_device,
                                                 void *device_user)
{
    return fit_model(ctx, in, components, model, out, on_device, device_user);
}

hyprof_status_t hyprof_pca_apply(hyprof_ctx_t *ctx, const hyprof_pca_model_t *model,
                                 const hyprof_cube_t *in, hyprof_cube_t *out)
{
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    memset(out, 0, sizeof *out);
    hyprof_status_t st = hyprof__input_f32(ctx, OP, in, &tmp, &x);
    if (st != HYPROF_OK)
        return st;
    if (x->bands != model->bands) {
        hyprof_cube_free(&tmp);
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the model was fitted on %zu bands but the input has %zu",
                             model->bands, x->bands);
    }
    size_t npix = x->width * x->height, K = model->components, B = model->bands;
    /* The apply step wants bands x components column-major: the transpose of
     * the model's component-major layout is the same memory. */
    st = hyprof_cube_alloc(out, HYPROF_FLOAT32, x->width, x->height, K);
    if (st != HYPROF_OK) {
        hyprof_cube_free(&tmp);
        return hyprof__error(ctx, st, OP, "cannot allocate the %zu-component output", K);
    }
    hyprof_pca_apply_args_t a = {x->data, x->mask, npix, B, K, model->mean, model->vectors,
                                 hyprof__nodata_f32(x), out->data};
    st = hyprof__dispatch(ctx, OP, hyprof__cpu_pca_apply,
                          HYPROF_CUDA_IMPL(hyprof__cuda_pca_apply), &a);
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK)
        hyprof_cube_free(out);
    return st;
}

/* ---- the `pca` operation --------------------------------------------------- */

/* A saved model (--model), cut to --components when that is given. */
static hyprof_status_t load_model(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                  hyprof_pca_model_t **m)
{
    const char *path = hyprof_args_str(args, "model");
    size_t k = (size_t)hyprof_args_int(args, "components");
    hyprof_status_t st = hyprof_pca_model_load(ctx, path, m);
    if (st == HYPROF_OK && hyprof_args_given(args, "components") && k != (*m)->components) {
        if (k > (*m)->components) {
            st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                               "components %zu exceeds the %zu of model '%s'", k,
                               (*m)->components, path);
            hyprof_pca_model_free(m);
            return st;
        }
        (*m)->components = k; /* the leading components are the same model */
    }
    return st;
}

/* The projection with a saved model (--model), or the fit-transform of the
 * input, then the model saved if asked (--save-model). */
static hyprof_status_t project(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                               const hyprof_cube_t *in, hyprof_pca_model_t **m,
                               hyprof_cube_t *out)
{
    hyprof_status_t st;
    if (hyprof_args_str(args, "model")) {
        st = load_model(ctx, args, m);
        if (st == HYPROF_OK)
            st = hyprof_pca_apply(ctx, *m, in, out);
    } else {
        st = hyprof_pca_fit_transform(ctx, in, (size_t)hyprof_args_int(args, "components"), m,
                                      out);
    }
    const char *save = hyprof_args_str(args, "save-model");
    if (st == HYPROF_OK && save)
        st = hyprof_pca_model_save(ctx, *m, save);
    return st;
}

/* PCA_VARIANCE_PERCENT: "63.10,20.55,..." */
static hyprof_status_t add_variance_shares(hyprof_result_t *out, const hyprof_pca_model_t *m)
{
    size_t cap = m->components * 32 + 1, len = 0;
    char *text = malloc(cap);
    if (!text)
        return HYPROF_ERR_NOMEM;
    text[0] = '\0';
    for (size_t k = 0; k < m->components; k++)
        len += (size_t)snprintf(text + len, cap - len, "%s%.2f", k ? "," : "",
                                100.0 * m->eigenvalues[k] / m->total_variance);
    hyprof_status_t st = hyprof_result_add_meta(out, "PCA_VARIANCE_PERCENT", "%s", text);
    free(text);
    return st;
}

hyprof_status_t hyprof__run_pca(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out)
{
    hyprof_pca_model_t *m = NULL;
    hyprof_status_t st = project(ctx, args, in, &m, &out->cube);
    if (st == HYPROF_OK)
        st = hyprof__result_adopt(out, in);
    /* Each component's share of the variance: data, so metadata (the band
     * names come from the parameters, hyprof__names_pca). */
    if (st == HYPROF_OK)
        st = add_variance_shares(out, m);
    double cum = 0.0;
    for (size_t k = 0; m && k < m->components; k++)
        cum += m->eigenvalues[k];
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "PCA_EXPLAINED_VARIANCE_RATIO", "%.6f",
                                    cum / m->total_variance);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "PCA_SAMPLES", "%zu", m->samples);
    hyprof_pca_model_free(&m);
    if (st != HYPROF_OK && st != HYPROF_ERR_CANCELLED && !ctx->error[0])
        hyprof__error(ctx, st, OP, "cannot describe the output");
    return st;
}

/* Applying a saved model (without saving it again) projects each pixel on
 * its own; its metadata are the model's. A fit needs every pixel. */
int hyprof__pixelwise_pca(const hyprof_args_t *args)
{
    return hyprof_args_str(args, "model") && !hyprof_args_str(args, "save-model");
}

/* PC1, PC2, ... */
HYPROF__NAMES_FN(pca)
{
    (void)ctx, (void)args, (void)width, (void)height, (void)in_bands;
    hyprof_status_t st = HYPROF_OK;
    for (size_t k = 0; st == HYPROF_OK && k < out_bands; k++)
        st = hyprof__name(names, k, "PC%zu", k + 1);
    return st;
}

/* The component count: the model's (or fewer, as get_model), else
 * --components, which the fit will check against the input's bands. */
hyprof_status_t hyprof__bands_pca(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                  size_t *out_bands)
{
    const char *load = hyprof_args_str(args, "model");
    size_t k = (size_t)hyprof_args_int(args, "components");
    if (!load) {
        if (in_bands < 2)
            return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                                 "the input has %zu band; PCA needs at least 2", in_bands);
        if (k > in_bands)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                 "components %zu is out of range: the input has %zu bands", k,
                                 in_bands);
        *out_bands = k;
        return HYPROF_OK;
    }
    hyprof_pca_model_t *m = NULL;
    hyprof_status_t st = hyprof_pca_model_load(ctx, load, &m);
    if (st != HYPROF_OK)
        return st;
    if (m->bands != in_bands)
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "model '%s' was fitted on %zu bands but the input has %zu", load,
                           m->bands, in_bands);
    else if (hyprof_args_given(args, "components") && k > m->components)
        st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                           "components %zu exceeds the %zu of model '%s'", k, m->components,
                           load);
    else
        *out_bands = hyprof_args_given(args, "components") ? k : m->components;
    hyprof_pca_model_free(&m);
    return st;
}
