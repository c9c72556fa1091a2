/* CUDA vs LIBSVM labels of `classify` (label gpu).
 *
 * The GPU machine has no LIBSVM, so the reference labels are a fixture made
 * here by LIBSVM's own svm_predict (tests/data/make_classify_fixture.py): 6
 * principal components of Indian Pines plus 2030 pixels placed between
 * training pixels of different classes (borderline on purpose), and the model
 * trained on them. Checks, labels to be identical everywhere:
 *   - CPU path (LIBSVM's svm_predict_values, or the exact reimplementation in
 *     builds without LIBSVM) against the fixture;
 *   - CUDA against the fixture and the CPU, vote fractions identical, in one
 *     chunk and in chunks of about 1000 pixels (a device-memory cap), with
 *     nodata pixels;
 *   - random LIBSVM-format models (5 and 12 classes) on random pixels, and a
 *     model whose decision values are all exactly 0 (every pixel a tie,
 *     decided on the host by LIBSVM's rule), CUDA against CPU;
 *   - ELMs (300 and 800 neurons) trained on the fixture: CUDA labels equal to
 *     the CPU's, softmax scores within 1e-5;
 *   - ELM training on the device (300 and 800 neurons): output weights within
 *     a tolerance from the condition number of H'H + I/C, and the fixture's
 *     labels by both models equal except where the two largest outputs are
 *     closer than the weights' difference can move them (counted, printed);
 *     a singular system (C = 1e300, 300 neurons, 20 samples) fails on both
 *     backends with the same message.
 * Without a device, the CPU checks run and the test exits 77 (skipped). */
#include "gpu_test_util.h"

#include "../algorithms/classify/classifier.h"

#include <libgen.h>
#include <unistd.h>

#define FW 145
#define FH 159
#define FB 6

static char g_data[4096];

static void log_fn(void *user, hyprof_log_level_t level, const char *msg)
{
    (void)user;
    if (level >= HYPROF_LOG_INFO)
        printf("  [log] %s\n", msg);
}

static hyprof_ctx_t *context(hyprof_backend_t b)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_ctx_set_backend(ctx, b);
    hyprof_ctx_set_log(ctx, log_fn, NULL);
    return ctx;
}

static int load_labels(const char *path, uint16_t *out, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        FAIL("cannot open %s", path);
        return -1;
    }
    size_t got = fread(out, sizeof *out, n, f);
    fclose(f);
    if (got != n) {
        FAIL("%s: %zu of %zu labels", path, got, n);
        return -1;
    }
    return 0;
}

/* Runs classify; returns 0 and fills map (and scores) or -1. */
static int classify(hyprof_ctx_t *ctx, const hyprof_classifier_t *m, const hyprof_cube_t *in,
                    hyprof_cube_t *map, hyprof_cube_t *scores, const char *what)
{
    hyprof_status_t st = hyprof_classify(ctx, m, in, map, scores);
    g_checks++;
    if (st != HYPROF_OK) {
        FAIL("%s: %s", what, hyprof_ctx_last_error(ctx));
        return -1;
    }
    return 0;
}

static void compare_labels(const uint16_t *got, const uint16_t *want, const hyprof_cube_t *in,
                           size_t n, const char *what)
{
    size_t bad = 0, first = (size_t)-1;
    for (size_t p = 0; p < n; p++) {
        uint16_t w = pixel_valid(in, p) ? want[p] : 0;
        if (got[p] != w) {
            if (!bad)
                first = p;
            bad++;
        }
    }
    g_checks++;
    if (bad)
        FAIL("%s: %zu of %zu labels differ (first at pixel %zu: %u, expected %u)", what, bad, n,
             first, got[first], pixel_valid(in, first) ? want[first] : 0);
    else
        printf("ok   %s: %zu labels identical\n", what, n);
}

static void compare_scores(const hyprof_cube_t *a, const hyprof_cube_t *b, const char *what)
{
    size_t n = a->width * a->height * a->bands, bad = 0;
    double maxd = 0.0;
    const float *x = a->data, *y = b->data;
    for (size_t i = 0; i < n; i++)
        if (!same_float(x[i], y[i])) {
            bad++;
            double d = fabs((double)x[i] - (double)y[i]);
            maxd = d > maxd ? d : maxd;
        }
    g_checks++;
    if (bad)
        FAIL("%s: %zu of %zu vote fractions differ (max abs difference %g)", what, bad, n, maxd);
    else
        printf("ok   %s: %zu vote fractions identical\n", what, n);
}

/* ---- the fixture ------------------------------------------------------------------- */

static int fixture_cpu(hyprof_classifier_t **m, hyprof_cube_t *in, uint16_t *want)
{
    char path[4200];
    hyprof_ctx_t *cpu = context(HYPROF_BACKEND_CPU);
    snprintf(path, sizeof path, "%s/classify_svm.model", g_data);
    if (hyprof_classifier_load(cpu, path, m) != HYPROF_OK) {
        FAIL("%s", hyprof_ctx_last_error(cpu));
        hyprof_ctx_free(&cpu);
        return -1;
    }
    snprintf(path, sizeof path, "%s/classify_features.f32", g_data);
    int rc = load_raw(path, FW, FH, FB, in);
    snprintf(path, sizeof path, "%s/classify_labels.u16", g_data);
    if (rc == 0)
        rc = load_labels(path, want, (size_t)FW * FH);
    hyprof_cube_t map;
    if (rc == 0 && classify(cpu, *m, in, &map, NULL, "cpu fixture") == 0) {
        compare_labels(map.data, want, in, (size_t)FW * FH, "cpu vs LIBSVM svm_predict");
        hyprof_cube_free(&map);
    }
    hyprof_ctx_free(&cpu);
    return rc;
}

static void gpu_vs(const hyprof_classifier_t *m, const hyprof_cube_t *in, const uint16_t *want,
                   const char *what)
{
    hyprof_ctx_t *cpu = context(HYPROF_BACKEND_CPU), *gpu = context(HYPROF_BACKEND_CUDA);
    hyprof_cube_t cmap, cs, gmap, gs;
    char label[256];
    if (classify(cpu, m, in, &cmap, &cs, what) == 0) {
        if (classify(gpu, m, in, &gmap, &gs, what) == 0) {
            expect_cuda(gpu, what);
            size_t n = in->width * in->height;
            snprintf(label, sizeof label, "%s: cuda vs cpu", what);
            compare_labels(gmap.data, cmap.data, in, n, label);
            if (want) {
                snprintf(label, sizeof label, "%s: cuda vs LIBSVM svm_predict", what);
                compare_labels(gmap.data, want, in, n, label);
            }
            snprintf(label, sizeof label, "%s: scores", what);
            compare_scores(&gs, &cs, label);
            hyprof_cube_free(&gmap);
            hyprof_cube_free(&gs);
        }
        hyprof_cube_free(&cmap);
        hyprof_cube_free(&cs);
    }
    hyprof_ctx_free(&cpu);
    hyprof_ctx_free(&gpu);
}

/* $HYPROF_DEVICE_MEMORY such that the SVM prediction's chunks hold about
 * `pixels` pixels: the budget (the cap less its 64 MiB margin) for both
 * pipeline slots at the per-pixel bytes classify.cu plans with (input,
 * kernel row, decision values and outputs with scores). */
static void set_chunk_cap(const hyprof_classifier_t *m, size_t pixels)
{
    const size_t B = m->bands, nsv = m->svm.nsv, nc = m->svm.nr_class;
    const size_t npairs = nc * (nc - 1) / 2, cols = 2 + m->nclasses;
    const size_t per_pixel = 2 * (B * sizeof(float) + (B + 1 + nsv + npairs) * sizeof(double) +
                                  cols * sizeof(float));
    char buf[32];
    snprintf(buf, sizeof buf, "%zu", ((size_t)64 << 20) + pixels * per_pixel);
    setenv("HYPROF_DEVICE_MEMORY", buf, 1);
}

static void fixture_gpu(const hyprof_classifier_t *m, hyprof_cube_t *in, const uint16_t *want)
{
    gpu_vs(m, in, want, "fixture, one chunk");
    set_chunk_cap(m, 1000);
    gpu_vs(m, in, want, "fixture, chunks of about 1000");
    unsetenv("HYPROF_DEVICE_MEMORY");
    /* Nodata: every 7th pixel NaN in one band. */
    float *d = in->data;
    for (size_t p = 0; p < in->width * in->height; p += 7)
        d[2 * in->width * in->height + p] = NAN;
    hyprof_cube_mask_invalid(in);
    gpu_vs(m, in, want, "fixture with nodata");
}

/* ---- ELM ----------------------------------------------------------------------------- */

/* Scores within a tolerance (the ELM's softmax is computed in another order
 * on the device); labels exact. */
static void compare_scores_close(const hyprof_cube_t *a, const hyprof_cube_t *b, double tol,
                                 const char *what)
{
    size_t n = a->width * a->height * a->bands, bad = 0;
    double maxd = 0.0;
    const float *x = a->data, *y = b->data;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i]) && isnan(y[i]))
            continue;
        double d = fabs((double)x[i] - (double)y[i]);
        maxd = d > maxd || isnan(d) ? d : maxd;
        bad += !(d <= tol);
    }
    g_checks++;
    if (bad)
        FAIL("%s: %zu of %zu scores differ by more than %g (max abs difference %g)", what, bad,
             n, tol, maxd);
    else
        printf("ok   %s: %zu scores within %g (max abs difference %g)\n", what, n, tol, maxd);
}

/* An ELM trained (on the host: no LIBSVM needed) on every 13th pixel of the
 * fixture with the fixture's labels, then CPU and CUDA predictions. */
static void elm_case(const hyprof_cube_t *in, const uint16_t *want, size_t neurons)
{
    hyprof_ctx_t *cpu = context(HYPROF_BACKEND_CPU), *gpu = context(HYPROF_BACKEND_CUDA);
    size_t npix = in->width * in->height;
    float *lab = calloc(npix, sizeof *lab);
    for (size_t p = 0; lab && p < npix; p += 13)
        lab[p] = pixel_valid(in, p) ? want[p] : 0;
    hyprof_cube_t labels = hyprof_cube_bsq(lab, HYPROF_FLOAT32, in->width, in->height, 1);
    hyprof_train_params_t tp;
    hyprof_train_params_default(&tp);
    tp.kind = HYPROF_CLASSIFIER_ELM;
    tp.neurons = neurons;
    tp.seed = 42;
    hyprof_classifier_t *m = NULL;
    char what[64];
    snprintf(what, sizeof what, "ELM %zu neurons", neurons);
    g_checks++;
    if (!lab || hyprof_train(cpu, in, &labels, &tp, &m) != HYPROF_OK) {
        FAIL("%s: training failed: %s", what, hyprof_ctx_last_error(cpu));
    } else {
        hyprof_cube_t cmap, cs, gmap, gs;
        if (classify(cpu, m, in, &cmap, &cs, what) == 0) {
            if (classify(gpu, m, in, &gmap, &gs, what) == 0) {
                expect_cuda(gpu, what);
                char label[128];
                snprintf(label, sizeof label, "%s: cuda vs cpu", what);
                compare_labels(gmap.data, cmap.data, in, npix, label);
                snprintf(label, sizeof label, "%s: softmax scores", what);
                compare_scores_close(&gs, &cs, 1e-5, label);
                hyprof_cube_free(&gmap);
                hyprof_cube_free(&gs);
            }
            hyprof_cube_free(&cmap);
            hyprof_cube_free(&cs);
        }
    }
    hyprof_classifier_free(&m);
    free(lab);
    hyprof_ctx_free(&cpu);
    hyprof_ctx_free(&gpu);
}

/* ELM training, CPU vs CUDA: the same seeded W and b (drawn on the host), so
 * the output weights differ by rounding only. G = H'H + I/C has lambda_min >=
 * 1/C and lambda_max <= trace(G) < n L + L/C (hidden values in (0, 1)), so
 * kappa(G) < C (n L + L/C); the solutions may differ (normwise, relative) by
 * about kappa u. Tolerance: 16 kappa_bound u (at least 1e-8). */
static hyprof_classifier_t *elm_fit(hyprof_backend_t b, const hyprof_cube_t *in,
                                    const hyprof_cube_t *labels, size_t neurons, double c,
                                    hyprof_status_t *st, char *msg, size_t msg_len)
{
    hyprof_ctx_t *ctx = context(b);
    hyprof_train_params_t tp;
    hyprof_train_params_default(&tp);
    tp.kind = HYPROF_CLASSIFIER_ELM;
    tp.neurons = neurons;
    tp.elm_c = c;
    tp.seed = 7;
    hyprof_classifier_t *m = NULL;
    *st = hyprof_train(ctx, in, labels, &tp, &m);
    snprintf(msg, msg_len, "%s", *st ? hyprof_ctx_last_error(ctx) : "");
    if (*st == HYPROF_OK && b == HYPROF_BACKEND_CUDA)
        expect_cuda(ctx, "ELM training");
    hyprof_ctx_free(&ctx);
    return m;
}

/* The model's outputs for one scaled pixel (the library's formula; its own
 * function is hidden); returns the largest's index. */
static size_t elm_outputs(const hyprof__elm_t *e, size_t B, size_t K, const double *x,
                          double *h, double *o)
{
    for (size_t k = 0; k < e->neurons; k++) {
        double v = e->bias[k];
        for (size_t b = 0; b < B; b++)
            v += e->w[k * B + b] * x[b];
        h[k] = 1.0 / (1.0 + exp(-v));
    }
    size_t best = 0;
    for (size_t c = 0; c < K; c++) {
        o[c] = 0.0;
        for (size_t k = 0; k < e->neurons; k++)
            o[c] += h[k] * e->beta[k * K + c];
        best = o[c] > o[best] ? c : best;
    }
    return best;
}

/* Pixels whose CPU labels by the two models differ, and of them those not
 * explained by a near tie: the top two outputs (CPU model) closer than twice
 * the largest change the weights' difference can make, |h| < 1 summed. */
static void elm_labels(const hyprof_classifier_t *mc, const hyprof_classifier_t *mg,
                       const hyprof_cube_t *in, double max_dout, const char *what)
{
    hyprof_ctx_t *cpu = context(HYPROF_BACKEND_CPU);
    hyprof_cube_t a, b;
    if (classify(cpu, mc, in, &a, NULL, what) == 0) {
        if (classify(cpu, mg, in, &b, NULL, what) == 0) {
            size_t n = in->width * in->height, B = mc->bands, K = mc->nclasses, diff = 0,
                   unexplained = 0;
            double *x = malloc(B * sizeof *x), *h = malloc(mc->elm.neurons * sizeof *h),
                   *o = malloc(K * sizeof *o);
            const uint16_t *la = a.data, *lb = b.data;
            const float *d = in->data;
            for (size_t p = 0; x && h && o && p < n; p++) {
                if (la[p] == lb[p])
                    continue;
                diff++;
                for (size_t k = 0; k < B; k++)
                    x[k] = hyprof__scale(mc, k, d[k * n + p]);
                size_t best = elm_outputs(&mc->elm, B, K, x, h, o);
                double second = -INFINITY;
                for (size_t k = 0; k < K; k++)
                    if (k != best && o[k] > second)
                        second = o[k];
                if (!(o[best] - second <= 2.0 * max_dout))
                    unexplained++;
            }
            g_checks++;
            if (unexplained || !x || !h || !o)
                FAIL("%s: %zu of %zu labels differ, %zu of them not near ties", what, diff, n,
                     unexplained);
            else
                printf("ok   %s: labels by the two models identical on %zu of %zu pixels "
                       "(%zu near ties)\n", what, n - diff, n, diff);
            free(x), free(h), free(o);
            hyprof_cube_free(&b);
        }
        hyprof_cube_free(&a);
    }
    hyprof_ctx_free(&cpu);
}

static void elm_train_case(const hyprof_cube_t *in, const uint16_t *want, size_t neurons)
{
    size_t npix = in->width * in->height, nlab = 0;
    float *lab = calloc(npix, sizeof *lab);
    for (size_t p = 0; lab && p < npix; p += 13) {
        lab[p] = pixel_valid(in, p) ? want[p] : 0;
        nlab += lab[p] != 0;
    }
    hyprof_cube_t labels = hyprof_cube_bsq(lab, HYPROF_FLOAT32, in->width, in->height, 1);
    char what[64], msg[512];
    snprintf(what, sizeof what, "ELM training, %zu neurons", neurons);
    hyprof_status_t sc, sg;
    const double c = 1024.0;
    hyprof_classifier_t *mc = elm_fit(HYPROF_BACKEND_CPU, in, &labels, neurons, c, &sc, msg,
                                      sizeof msg);
    if (sc)
        FAIL("%s: cpu: %s", what, msg);
    hyprof_classifier_t *mg = elm_fit(HYPROF_BACKEND_CUDA, in, &labels, neurons, c, &sg, msg,
                                      sizeof msg);
    g_checks++;
    if (sg)
        FAIL("%s: cuda: %s", what, msg);
    if (!sc && !sg) {
        size_t K = mc->nclasses, L = neurons;
        double maxc = 0.0, maxd = 0.0, maxrel = 0.0, maxcol = 0.0;
        for (size_t j = 0; j < K; j++) {
            double col = 0.0; /* bounds the change of output j (hidden values < 1) */
            for (size_t k = 0; k < L; k++) {
                double bc = mc->elm.beta[k * K + j], d = fabs(mg->elm.beta[k * K + j] - bc);
                maxc = fmax(maxc, fabs(bc));
                maxd = d > maxd || isnan(d) ? d : maxd;
                if (bc != 0.0)
                    maxrel = fmax(maxrel, d / fabs(bc));
                col += d;
            }
            maxcol = fmax(maxcol, col);
        }
        double kappa = c * ((double)nlab * (double)L + (double)L / c);
        double tol = fmax(1e-8, 16.0 * kappa * 2.220446049250313e-16), rel = maxd / maxc;
        g_checks++;
        if (!(rel <= tol))
            FAIL("%s: output weights differ by %g relative to the largest (tolerance %g, "
                 "kappa bound %.3g; max elementwise relative %g)", what, rel, tol, kappa, maxrel);
        else
            printf("ok   %s: output weights within %g of the largest (tolerance %g, kappa "
                   "bound %.3g; max elementwise relative %g), %zu samples\n",
                   what, rel, tol, kappa, maxrel, nlab);
        elm_labels(mc, mg, in, maxcol, what);
    }
    hyprof_classifier_free(&mc);
    hyprof_classifier_free(&mg);
    free(lab);
}

/* H'H of rank <= 20 with 300 neurons and 1/C ~ 0: both Cholesky factorisations
 * break down, with the same message (up to the order where it failed). */
static void elm_singular_case(const hyprof_cube_t *in, const uint16_t *want)
{
    size_t npix = in->width * in->height, nlab = 0;
    float *lab = calloc(npix, sizeof *lab);
    for (size_t p = 0; lab && p < npix && nlab < 20; p += 97)
        if (pixel_valid(in, p) && want[p]) {
            lab[p] = want[p];
            nlab++;
        }
    hyprof_cube_t labels = hyprof_cube_bsq(lab, HYPROF_FLOAT32, in->width, in->height, 1);
    char mc[512], mg[512];
    hyprof_status_t sc, sg;
    hyprof_classifier_t *a = elm_fit(HYPROF_BACKEND_CPU, in, &labels, 300, 1e300, &sc, mc,
                                     sizeof mc);
    hyprof_classifier_t *b = elm_fit(HYPROF_BACKEND_CUDA, in, &labels, 300, 1e300, &sg, mg,
                                     sizeof mg);
    const char *pc = strstr(mc, "(Cholesky"), *pg = strstr(mg, "(Cholesky");
    g_checks++;
    if (sc != HYPROF_ERR_NUMERIC || sg != HYPROF_ERR_NUMERIC || !pc || !pg ||
        pc - mc != pg - mg || strncmp(mc, mg, (size_t)(pc - mc)) != 0)
        FAIL("ELM singular system: cpu status %d \"%s\", cuda status %d \"%s\"", (int)sc, mc,
             (int)sg, mg);
    else
        printf("ok   ELM singular system: both fail: cpu \"%s\", cuda \"%s\"\n", mc, mg);
    hyprof_classifier_free(&a);
    hyprof_classifier_free(&b);
    free(lab);
}

/* ---- random models ----------------------------------------------------------------- */

/* A LIBSVM-format model with random support vectors and coefficients
 * (zero = every decision value exactly 0). */
static int write_random_model(const char *path, int nc, int per_class, int bands, double gamma,
                              int zero)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "hyprof-classifier 1\nkind svm\nbands %d\n", bands);
    for (int b = 0; b < bands; b++)
        fprintf(f, "band b%d\n", b + 1);
    fprintf(f, "scale 1\nmin");
    for (int b = 0; b < bands; b++)
        fprintf(f, " 0");
    fprintf(f, "\nmax");
    for (int b = 0; b < bands; b++)
        fprintf(f, " 1");
    fprintf(f, "\nclasses %d\n", nc);
    for (int k = 0; k < nc; k++)
        fprintf(f, "class %d 10 20 30 255 c%d\n", 3 * k + 2, k);
    fprintf(f, "train_pixels 0\ncv_accuracy -1\nsvm_c 1\nlibsvm_model\nsvm_type c_svc\n"
               "kernel_type rbf\ngamma %.17g\nnr_class %d\ntotal_sv %d\nrho",
            gamma, nc, nc * per_class);
    for (int p = 0; p < nc * (nc - 1) / 2; p++)
        fprintf(f, " %.17g", zero ? 0.0 : rng_normal() * 0.3);
    fprintf(f, "\nlabel");
    for (int k = nc - 1; k >= 0; k--) /* LIBSVM order differs from the sorted one */
        fprintf(f, " %d", 3 * k + 2);
    fprintf(f, "\nnr_sv");
    for (int k = 0; k < nc; k++)
        fprintf(f, " %d", per_class);
    fprintf(f, "\nSV\n");
    for (int i = 0; i < nc * per_class; i++) {
        for (int r = 0; r < nc - 1; r++)
            fprintf(f, "%.17g ", zero ? 0.0 : rng_normal() * 4.0);
        for (int b = 0; b < bands; b++)
            fprintf(f, "%d:%.17g ", b + 1, rng_uniform() * 2.0 - 1.0);
        fprintf(f, "\n");
    }
    return fclose(f);
}

static void random_case(int nc, int per_class, int bands, double gamma, int zero,
                        const char *what)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/hyprof-gpu-classify-%d.model", (int)getpid());
    hyprof_ctx_t *ctx = context(HYPROF_BACKEND_CPU);
    hyprof_classifier_t *m = NULL;
    if (write_random_model(path, nc, per_class, bands, gamma, zero) != 0 ||
        hyprof_classifier_load(ctx, path, &m) != HYPROF_OK) {
        FAIL("%s: cannot make the model: %s", what, hyprof_ctx_last_error(ctx));
        hyprof_ctx_free(&ctx);
        unlink(path);
        return;
    }
    unlink(path);
    hyprof_cube_t in;
    size_t w = 300, h = 211;
    hyprof_cube_alloc(&in, HYPROF_FLOAT32, w, h, (size_t)bands);
    float *d = in.data;
    for (size_t i = 0; i < w * h * (size_t)bands; i++)
        d[i] = (float)rng_uniform();
    gpu_vs(m, &in, NULL, what);
    hyprof_cube_free(&in);
    hyprof_classifier_free(&m);
    hyprof_ctx_free(&ctx);
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    char src[4096];
    snprintf(src, sizeof src, "%s", __FILE__);
    snprintf(g_data, sizeof g_data, "%s/data", dirname(src));
    g_rng = 20261126;
    hyprof_classifier_t *m = NULL;
    hyprof_cube_t in;
    uint16_t *want = malloc((size_t)FW * FH * sizeof *want);
    memset(&in, 0, sizeof in);
    int ok = want && fixture_cpu(&m, &in, want) == 0, rc = -1;
    if (!ok || g_failures) {
        printf("%d of %d checks failed\n", g_failures, g_checks);
        rc = 1;
    } else if (hyprof_cuda_device_count() == 0) {
        printf("no CUDA device: CPU checks passed, GPU checks skipped\n");
        rc = SKIP_CODE;
    }
    if (rc >= 0) {
        hyprof_cube_free(&in);
        hyprof_classifier_free(&m);
        free(want);
        return rc;
    }
    char name[256];
    hyprof_cuda_device_info(0, name, sizeof name, NULL, NULL);
    printf("device: %s\n", name);
    elm_case(&in, want, 300);
    elm_train_case(&in, want, 300);
    elm_singular_case(&in, want);
    fixture_gpu(m, &in, want); /* writes nodata into the cube: the cases below see it */
    elm_case(&in, want, 800);  /* with nodata pixels */
    elm_train_case(&in, want, 800);
    random_case(5, 30, 9, 0.7, 0, "random model, 5 classes");
    random_case(12, 25, 40, 0.05, 0, "random model, 12 classes");
    random_case(4, 10, 3, 1.0, 1, "all decision values 0 (ties)");
    hyprof_cube_free(&in);
    hyprof_classifier_free(&m);
    free(want);
    printf("%s: %d checks, %d failures\n", g_failures ? "FAIL" : "PASS", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
