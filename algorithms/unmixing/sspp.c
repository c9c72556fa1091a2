/* SSPP, spatial-spectral preprocessing (Martin and Plaza; the seed paper
 * 004): spatial homogeneity (RMSE between each pixel and its Gaussian-smoothed
 * version), PCA spectral purity, K-means clusters and their fusion into the
 * candidate pixels of endmember extraction. The `sspp` operation. */
#include "unmixing_impl.h"
#include "../core/ops.h"
#include "hyprof/spectral.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "sspp"

/* ---- homogeneity, CPU backend ------------------------------------------------- */

static size_t reflect(long i, size_t n)
{
    while (i < 0 || i >= (long)n)
        i = i < 0 ? -i - 1 : 2 * (long)n - i - 1;
    return (size_t)i;
}

/* One separable pass over rows (along_x) or columns of num and den; ix / iy
 * map -r..n+r-1 (offset by r) to the reflected indices. */
static void pass(const double *num, const double *den, double *onum, double *oden, size_t w,
                 size_t h, const double *k, long r, int along_x, const size_t *ix,
                 const size_t *iy)
{
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++) {
            double sn = 0.0, sd = 0.0;
            for (long j = -r; j <= r; j++) {
                size_t q = along_x ? y * w + ix[(long)x + j + r] : iy[(long)y + j + r] * w + x;
                sn += k[j + r] * num[q];
                sd += k[j + r] * den[q];
            }
            onum[y * w + x] = sn;
            oden[y * w + x] = sd;
        }
}

/* Squared differences between band b and its smoothed version into d2. */
static void band_d2(const hyprof_homog_args_t *a, size_t b, const double *k, long r,
                    const size_t *ix, const size_t *iy, double *t, double *d2)
{
    size_t w = a->width, h = a->height, n = w * h;
    const float *xb = a->x + b * n;
    for (size_t p = 0; p < n; p++) {
        int m = !a->mask || a->mask[p];
        t[p] = m ? xb[p] : 0.0; /* not m * x: a NaN under the mask would spread */
        t[n + p] = m ? 1.0 : 0.0;
    }
    pass(t, t + n, t + 2 * n, t + 3 * n, w, h, k, r, 1, ix, iy);
    pass(t + 2 * n, t + 3 * n, t, t + n, w, h, k, r, 0, ix, iy);
    for (size_t p = 0; p < n; p++) {
        double s = t[n + p] > 0.0 ? t[p] / t[n + p] : 0.0, d = (double)xb[p] - s;
        d2[p] = d * d;
    }
}

/* Groups of HOMOG_GROUP bands are filtered in parallel (one band a thread),
 * then their squared differences are added in band order, so the sums are
 * the same whatever the thread count (and the CUDA backend's). */
#define HOMOG_GROUP 16

hyprof_status_t hyprof__cpu_homogeneity(hyprof_ctx_t *ctx, void *args)
{
    hyprof_homog_args_t *a = args;
    size_t n = a->width * a->height, G = a->bands < HOMOG_GROUP ? a->bands : HOMOG_GROUP;
    int threads = hyprof__threads(ctx), nomem = 0;
    long r = (long)(3.0 * a->sigma + 0.5);
    double *k = malloc((2 * r + 1) * sizeof *k), ksum = 0.0;
    double *acc = calloc(n, sizeof *acc), *d2 = malloc(G * n * sizeof *d2);
    size_t *ix = malloc((a->width + 2 * r) * sizeof *ix), *iy = malloc((a->height + 2 * r) * sizeof *iy);
    hyprof_status_t st = HYPROF_OK;
    if (!k || !acc || !d2 || !ix || !iy) {
        free(k);
        free(acc);
        free(d2);
        free(ix);
        free(iy);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate filter buffers");
    }
    for (long i = -r; i < (long)a->width + r; i++)
        ix[i + r] = reflect(i, a->width);
    for (long i = -r; i < (long)a->height + r; i++)
        iy[i + r] = reflect(i, a->height);
    for (long j = -r; j <= r; j++)
        ksum += k[j + r] = exp(-(double)(j * j) / (2.0 * a->sigma * a->sigma));
    for (long j = -r; j <= r; j++)
        k[j + r] /= ksum;
    for (size_t b0 = 0; b0 < a->bands && st == HYPROF_OK; b0 += G) {
        size_t g = a->bands - b0 < G ? a->bands - b0 : G;
        #pragma omp parallel num_threads(threads)
        {
            double *t = malloc(4 * n * sizeof *t);
            if (!t) {
                #pragma omp atomic write
                nomem = 1;
            }
            #pragma omp for schedule(dynamic, 1)
            for (size_t i = 0; i < g; i++)
                if (t)
                    band_d2(a, b0 + i, k, r, ix, iy, t, d2 + i * n);
            free(t);
            #pragma omp for schedule(static)
            for (size_t p = 0; p < n; p++)
                for (size_t i = 0; i < g; i++)
                    acc[p] += d2[i * n + p];
        }
        if (nomem)
            st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate filter buffers");
        else
            st = hyprof__progress(ctx, (double)(b0 + g) / (double)a->bands, "homogeneity");
    }
    for (size_t p = 0; st == HYPROF_OK && p < n; p++)
        a->rmse[p] = (a->mask && !a->mask[p]) ? a->nodata
                                              : (float)sqrt(acc[p] / (double)a->bands);
    free(k);
    free(acc);
    free(d2);
    free(ix);
    free(iy);
    return st;
}

/* ---- purity ------------------------------------------------------------------- */

#define PTILE 256

/* Projections of pixels [p0, p0+n) on the p skewers into v (p x npix). */
static void project_tile(const hyprof_purity_args_t *a, size_t p0, size_t n, double *acc,
                         float *v)
{
    size_t P = a->p;
    for (size_t i = 0; i < P * PTILE; i++)
        acc[i] = 0.0;
    for (size_t b = 0; b < a->bands; b++) {
        const float *xb = a->x + b * a->npix + p0;
        for (size_t k = 0; k < P; k++) {
            double w = a->vectors[k * a->bands + b], m = a->mean[b], *ak = acc + k * PTILE;
            for (size_t i = 0; i < n; i++)
                ak[i] += w * ((double)xb[i] - m);
        }
    }
    for (size_t k = 0; k < P; k++)
        for (size_t i = 0; i < n; i++)
            v[k * a->npix + p0 + i] = (float)acc[k * PTILE + i];
}

hyprof_status_t hyprof__cpu_purity(hyprof_ctx_t *ctx, void *args)
{
    hyprof_purity_args_t *a = args;
    size_t n = a->npix, P = a->p, ntiles = (n + PTILE - 1) / PTILE;
    int threads = hyprof__threads(ctx), nomem = 0;
    float *v = malloc(P * n * sizeof *v);
    double *lo = malloc(P * sizeof *lo), *hi = malloc(P * sizeof *hi);
    if (!v || !lo || !hi) {
        free(v);
        free(lo);
        free(hi);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate the projections");
    }
    #pragma omp parallel num_threads(threads)
    {
        double *acc = malloc(P * PTILE * sizeof *acc);
        if (!acc) {
            #pragma omp atomic write
            nomem = 1;
        }
        #pragma omp for schedule(static)
        for (size_t t = 0; t < ntiles; t++)
            if (acc)
                project_tile(a, t * PTILE, n - t * PTILE < PTILE ? n - t * PTILE : PTILE, acc, v);
        free(acc);
        #pragma omp for schedule(static)
        for (size_t k = 0; k < P; k++) {
            double l = INFINITY, h = -INFINITY;
            for (size_t i = 0; i < n; i++)
                if (!a->mask || a->mask[i]) {
                    l = v[k * n + i] < l ? v[k * n + i] : l;
                    h = v[k * n + i] > h ? v[k * n + i] : h;
                }
            lo[k] = l;
            hi[k] = h;
        }
        #pragma omp for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float s = 0.0f;
            for (size_t k = 0; k < P && (!a->mask || a->mask[i]); k++) {
                double mid = 0.5 * (lo[k] + hi[k]), half = 0.5 * (hi[k] - lo[k]);
                double w = half > 0.0 ? fabs((double)v[k * n + i] - mid) / half : 0.0;
                if (half > 0.0 && w >= a->theta)
                    s += (float)w;
            }
            a->out[i] = (float)(nearbyint((double)s * 1e5) * 1e-5);
        }
    }
    free(v);
    free(lo);
    free(hi);
    if (nomem)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate projection tiles");
    return HYPROF_OK;
}

/* The PCA gives the skewers, the purity step projects on them. The PCA is
 * the library's (hyprof_pca_fit), or, when the chain's cube is on the device
 * already, the same fit from that copy (no second upload). Constant input has
 * no direction to project on. */
static hyprof_status_t purity(hyprof_ctx_t *ctx, const hyprof_cube_t *x, size_t p,
                              double theta, float *out)
{
    size_t B = x->bands, npix = x->width * x->height;
    double *mean = malloc(B * sizeof *mean), *vectors = malloc(p * B * sizeof *vectors), total = 0;
    hyprof_pca_model_t *m = NULL;
    hyprof_status_t st = HYPROF_OK;
    if (!mean || !vectors)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    else if (!hyprof__unmix_pca(ctx, x->data, x->mask, npix, B, hyprof_cube_count_valid(x), p,
                                mean, vectors, &total, &st)) {
        st = hyprof_pca_fit(ctx, x, p, &m);
        if (st == HYPROF_OK) {
            memcpy(mean, hyprof_pca_model_mean(m), B * sizeof *mean);
            memcpy(vectors, hyprof_pca_model_vectors(m), p * B * sizeof *vectors);
            total = hyprof_pca_model_total_variance(m);
        }
    }
    if (st == HYPROF_OK && !(total > 0.0))
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "every valid pixel has the same spectrum: nothing to unmix");
    if (st == HYPROF_OK) {
        hyprof_purity_args_t a = {x->data, x->mask, npix, B, p, mean, vectors, theta, out};
        st = hyprof__dispatch(ctx, OP, hyprof__cpu_purity, HYPROF_CUDA_IMPL(hyprof__cuda_purity),
                              &a);
    }
    hyprof_pca_model_free(&m);
    free(mean);
    free(vectors);
    return st;
}

/* ---- fusion ------------------------------------------------------------------- */

/* The fusion's three orders as 64-bit keys (value in the high half, the
 * cluster-local index in the low half, so ties go to the lower index, i.e.
 * the lower pixel) sorted by radix: the same orders as comparison sorts on
 * (value, index), several times faster than qsort with a comparator. */

/* An unsigned image of v with the order of the floats (-0 taken as +0). */
static uint32_t float_key(float v)
{
    uint32_t u;
    if (v == 0.0f)
        v = 0.0f;
    memcpy(&u, &v, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* Ascending LSD radix sort of k[0..n) (8 bits a pass; passes whose byte is
 * the same in every key are skipped); tmp holds n keys. */
static void sort_keys(uint64_t *k, uint64_t *tmp, size_t n)
{
    uint64_t *src = k, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        size_t cnt[257] = {0};
        for (size_t i = 0; i < n; i++)
            cnt[((src[i] >> shift) & 255u) + 1]++;
        if (cnt[((src[0] >> shift) & 255u) + 1] == n)
            continue;
        for (int d = 0; d < 256; d++)
            cnt[d + 1] += cnt[d];
        for (size_t i = 0; i < n; i++)
            dst[cnt[(src[i] >> shift) & 255u]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != k)
        memcpy(k, src, n * sizeof *k);
}

/* The candidates of one cluster, whose pixels are px[0..n) in increasing
 * order (n < 2^31: the scores, below 2n, fit the high half). */
static int fuse_cluster(const size_t *px, size_t n, const hyprof_sspp_params_t *prm,
                        hyprof_sspp_out_t *o)
{
    uint64_t *key = malloc(n * sizeof *key), *tmp = malloc(n * sizeof *tmp);
    uint32_t *rank = malloc(n * sizeof *rank);
    int ok = key && tmp && rank && n < ((size_t)1 << 31);
    if (ok) {
        for (size_t i = 0; i < n; i++) /* increasing RMSE */
            key[i] = (uint64_t)float_key(o->rmse[px[i]]) << 32 | i;
        sort_keys(key, tmp, n);
        for (size_t i = 0; i < n; i++)
            rank[(uint32_t)key[i]] = (uint32_t)i;
        for (size_t i = 0; i < n; i++) /* decreasing purity */
            key[i] = (uint64_t)~float_key(o->purity[px[i]]) << 32 | i;
        sort_keys(key, tmp, n);
        for (size_t i = 0; i < n; i++) { /* score: the sum of the two ranks */
            uint32_t j = (uint32_t)key[i];
            key[i] = (uint64_t)(i + rank[j]) << 32 | j;
        }
        sort_keys(key, tmp, n);
        size_t keep = prm->per_cluster < n ? prm->per_cluster : n;
        for (size_t i = 0; i < keep; i++)
            o->candidate[px[(uint32_t)key[i]]] = 1;
    }
    free(key);
    free(tmp);
    free(rank);
    return ok;
}

/* In each cluster: rank by increasing RMSE and by decreasing purity; keep the
 * per_cluster pixels with the smallest sum of the two ranks (ties: lower
 * pixel index). Deterministic, so both backends select the same pixels;
 * clusters in parallel. */
static hyprof_status_t fuse(hyprof_ctx_t *ctx, size_t npix, const hyprof_sspp_params_t *prm,
                            hyprof_sspp_out_t *o)
{
    size_t k = prm->p, *start = calloc(k + 1, sizeof *start), *fill = malloc(k * sizeof *fill);
    size_t *order = malloc((npix ? npix : 1) * sizeof *order);
    int failed = !start || !fill || !order;
    memset(o->candidate, 0, npix);
    o->ncandidates = 0;
    for (size_t px = 0; !failed && px < npix; px++)
        if (o->labels[px] >= 0)
            start[o->labels[px] + 1]++;
    for (size_t c = 0; !failed && c < k; c++)
        start[c + 1] += start[c];
    for (size_t c = 0; !failed && c < k; c++)
        fill[c] = start[c];
    for (size_t px = 0; !failed && px < npix; px++) /* pixels grouped by cluster, in order */
        if (o->labels[px] >= 0)
            order[fill[o->labels[px]]++] = px;
    if (!failed) {
        #pragma omp parallel for num_threads(hyprof__threads(ctx)) schedule(dynamic, 1) \
            reduction(| : failed)
        for (size_t c = 0; c < k; c++)
            if (start[c + 1] > start[c])
                failed |= !fuse_cluster(order + start[c], start[c + 1] - start[c], prm, o);
    }
    for (size_t c = 0; !failed && c < k; c++) {
        size_t n = start[c + 1] - start[c];
        o->ncandidates += prm->per_cluster < n ? prm->per_cluster : n;
    }
    free(start);
    free(fill);
    free(order);
    return failed ? hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory") : HYPROF_OK;
}

/* ---- the whole preprocessing -------------------------------------------------- */

void hyprof__sspp_out_free(hyprof_sspp_out_t *o)
{
    free(o->rmse);
    free(o->purity);
    free(o->labels);
    free(o->candidate);
    free(o->init);
    memset(o, 0, sizeof *o);
}

static hyprof_status_t stage(hyprof_ctx_t *ctx, double a, double b, double saved[2])
{
    hyprof__progress_push(ctx, a, b, saved);
    return HYPROF_OK;
}

hyprof_status_t hyprof__sspp(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *x,
                             const hyprof_sspp_params_t *prm, hyprof_sspp_out_t *o)
{
    size_t n = x->width * x->height, nvalid = hyprof_cube_count_valid(x);
    memset(o, 0, sizeof *o);
    if (prm->p < 2 || prm->p > x->bands || prm->p > nvalid)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "endmembers %zu is out of range: need 2 <= p <= bands (%zu) and "
                             "p <= valid pixels (%zu)", prm->p, x->bands, nvalid);
    o->rmse = malloc(n * sizeof *o->rmse);
    o->purity = malloc(n * sizeof *o->purity);
    o->labels = malloc(n * sizeof *o->labels);
    o->candidate = malloc(n ? n : 1);
    o->init = malloc(prm->p * sizeof *o->init);
    if (!o->rmse || !o->purity || !o->labels || !o->candidate || !o->init) {
        hyprof__sspp_out_free(o);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    }
    double saved[2], t0 = hyprof__now();
    hyprof_homog_args_t h = {x->data, x->mask, x->width, x->height, x->bands, prm->sigma,
                             hyprof__nodata_f32(x), o->rmse};
    stage(ctx, 0.0, 0.3, saved);
    hyprof_status_t st = hyprof__dispatch(ctx, op, hyprof__cpu_homogeneity,
                                          HYPROF_CUDA_IMPL(hyprof__cuda_homogeneity), &h);
    hyprof__progress_pop(ctx, saved);
    double t1 = hyprof__now();
    if (st == HYPROF_OK) {
        stage(ctx, 0.3, 0.5, saved);
        st = purity(ctx, x, prm->p, prm->theta, o->purity);
        hyprof__progress_pop(ctx, saved);
    }
    double t2 = hyprof__now();
    if (st == HYPROF_OK) {
        stage(ctx, 0.5, 0.95, saved);
        st = hyprof__kmeans(ctx, op, x->data, x->mask, n, x->bands, prm->p, prm->kmeans_iter,
                            o->labels, o->init, &o->inertia, &o->iterations);
        hyprof__progress_pop(ctx, saved);
    }
    double t3 = hyprof__now();
    if (st == HYPROF_OK)
        st = fuse(ctx, n, prm, o);
    double t4 = hyprof__now();
    o->seconds[0] = t1 - t0;
    o->seconds[1] = t2 - t1;
    o->seconds[2] = t3 - t2;
    o->seconds[3] = t4 - t3;
    if (st != HYPROF_OK)
        hyprof__sspp_out_free(o);
    return st;
}

/* ---- the `sspp` operation ----------------------------------------------------- */

hyprof_status_t hyprof__run_sspp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 const hyprof_cube_t *in, hyprof_result_t *out)
{
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    hyprof_sspp_params_t prm;
    hyprof_sspp_out_t o;
    hyprof_status_t st = hyprof__input_f32(ctx, OP, in, &tmp, &x);
    if (st != HYPROF_OK)
        return st;
    hyprof__unmix_hold(x->data, x->mask, x->width * x->height, x->bands);
    char devsec[256];
    if ((st = hyprof__sspp_params(ctx, OP, args, x, &prm)) == HYPROF_OK)
        st = hyprof__sspp(ctx, OP, x, &prm, &o);
    int on_device = hyprof__unmix_device_seconds(devsec, sizeof devsec);
    hyprof__unmix_release();
    if (st != HYPROF_OK) {
        hyprof_cube_free(&tmp);
        return st;
    }
    size_t n = x->width * x->height;
    st = hyprof_result_alloc(out, x->width, x->height, 4, in);
    float nd = hyprof__nodata_f32(x), *d = out->cube.data;
    for (size_t px = 0; st == HYPROF_OK && px < n; px++) {
        int valid = !x->mask || x->mask[px];
        d[px] = valid ? (float)o.candidate[px] : nd;
        d[n + px] = valid ? o.rmse[px] : nd;
        d[2 * n + px] = valid ? o.purity[px] : nd;
        d[3 * n + px] = valid ? (float)(o.labels[px] + 1) : nd;
    }
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "SSPP_ENDMEMBERS", "%zu", prm.p);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "SSPP_CANDIDATES", "%zu", o.ncandidates);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "KMEANS_INERTIA", "%.17g", o.inertia);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "KMEANS_ITERATIONS", "%d", o.iterations);
    char buf[4096];
    size_t len = 0;
    buf[0] = '\0';
    for (size_t j = 0; j < prm.p && len + 24 < sizeof buf; j++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%zu", j ? "," : "", o.init[j]);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "KMEANS_INIT_PIXELS", "%s", buf);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "SSPP_SECONDS", "homogeneity=%.4f purity=%.4f "
                                    "kmeans=%.4f fusion=%.4f", o.seconds[0], o.seconds[1],
                                    o.seconds[2], o.seconds[3]);
    /* What the CUDA stages took on the device (events), next to the host times. */
    if (st == HYPROF_OK && on_device)
        st = hyprof_result_add_meta(out, "SSPP_DEVICE_SECONDS", "%s", devsec);
    hyprof__sspp_out_free(&o);
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK && !ctx->error[0])
        hyprof__error(ctx, st, OP, "cannot describe the output");
    return st;
}

/* Always four bands: candidate, homogeneity, purity, cluster. */
hyprof_status_t hyprof__bands_sspp(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                   size_t *out_bands)
{
    (void)args;
    if (in_bands < 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, "sspp",
                             "the input has %zu band; SSPP needs at least 2", in_bands);
    *out_bands = 4;
    return HYPROF_OK;
}

HYPROF__NAMES_FN(sspp)
{
    (void)ctx, (void)args, (void)width, (void)height, (void)in_bands;
    static const char *fixed[] = {"candidate", "homogeneity RMSE", "purity", "cluster"};
    hyprof_status_t st = HYPROF_OK;
    for (size_t b = 0; st == HYPROF_OK && b < out_bands && b < 4; b++)
        st = hyprof__name(names, b, "%s", fixed[b]);
    return st;
}
