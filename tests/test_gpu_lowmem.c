/* Every CUDA operation when the device has little memory, through the public
 * API only.
 *
 *   test_gpu_lowmem
 *
 * pca, dwt, eadp, eap, emp, wmcd and unmix (through the registry, as the CLI
 * runs them) and classify (an SVM trained on the CPU) run on a seeded
 * synthetic cube (192 x 160 x 48, integer values, 2 % masked pixels; eap on
 * 6 of its bands, --reduction none) under device-memory caps
 * ($HYPROF_DEVICE_MEMORY, set before each call: the library reads it at every
 * call) from 1 MiB, where nothing fits, to 256 MiB, where the cube fits in
 * pieces. For each cap:
 *   backend cuda  either the result equals the CPU's within the tolerances of
 *                 the parity tests and the CUDA path ran, or the status is
 *                 HYPROF_ERR_DEVICE_MEMORY with a message;
 *   backend auto  the result is produced (on whichever backend) and equals
 *                 the CPU's within the same tolerances.
 * Tolerances (CPU result as reference; masked pixels identical nodata):
 *   pca    each band's max error below 1e-4 of its max |value| (test_gpu_parity)
 *   dwt    |gpu - cpu| <= 1e-5 * max(|cpu|, 1e-3 * band max |value|) (test_gpu_parity)
 *   eadp   max error below 1e-4 of the max |value| (test_gpu_eadp, FED in float)
 *   emp, wmcd  each band within 1e-5 of its max |value| (test_gpu_emp)
 *   eap    identical (8-bit levels of integer bands: test_gpu_eap)
 *   unmix  abundances within 1e-5, RMSE band relative 1e-5 (test_gpu_unmix)
 *   classify  identical labels, vote fractions within 1e-5 (test_gpu_classify)
 * Exit 0 when all pass, 1 on any failure (each printed), 77 when there is no
 * CUDA device (ctest: skipped). */
#define _POSIX_C_SOURCE 200809L
#include "hyprof/hyprof.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test_util.h"

#define W 192
#define H 160
#define B 48

static const char *const g_caps[] = {"1M", "48M", "72M", "100M", "256M"};
#define NCAPS (sizeof g_caps / sizeof g_caps[0])

/* How a result is compared with the CPU's. */
typedef enum {
    CMP_BAND_REL, /* per band, relative to the band's max |value| */
    CMP_GLOBAL,   /* relative to the whole result's max |value| */
    CMP_DWT,      /* elementwise, as test_gpu_parity's DWT */
    CMP_UNMIX,    /* absolute on the abundances, relative on the last (RMSE) band */
    CMP_ABS,      /* absolute */
} cmp_kind_t;

typedef struct {
    const char *op;
    const char *const *args; /* name, value, ..., NULL */
    int small;               /* on the 6-band cube */
    cmp_kind_t cmp;
    double tol;
} op_case_t;

static const char *const pca_args[] = {"components", "7", NULL};
static const char *const dwt_args[] = {"levels", "2", NULL};
static const char *const eap_args[] = {"reduction", "none", NULL};
static const char *const unmix_args[] = {"endmembers", "4", NULL};

static const op_case_t g_ops[] = {
    {"pca", pca_args, 0, CMP_BAND_REL, 1e-4},
    {"dwt", dwt_args, 0, CMP_DWT, 1e-5},
    {"eadp", NULL, 0, CMP_GLOBAL, 1e-4},
    {"eap", eap_args, 1, CMP_BAND_REL, 0.0},
    {"emp", NULL, 0, CMP_BAND_REL, 1e-5},
    {"wmcd", NULL, 0, CMP_BAND_REL, 1e-5},
    {"unmix", unmix_args, 0, CMP_UNMIX, 1e-5},
};
#define NOPS (sizeof g_ops / sizeof g_ops[0])

/* ---- the cube ------------------------------------------------------------------- */

/* Smooth spectra of four latent factors plus noise, rounded to integers as
 * sensors store them; `masked` of the pixels nodata (-9999). `labels` (if not
 * NULL) receives, for every 13th valid pixel, the dominant factor + 1 (0
 * elsewhere): separable classes for the SVM. */
static int make_cube(hyprof_cube_t *c, size_t bands, uint64_t seed, double masked,
                     uint16_t *labels)
{
    g_rng = seed;
    if (hyprof_cube_alloc(c, HYPROF_FLOAT32, W, H, bands) != HYPROF_OK ||
        hyprof_cube_alloc_mask(c) != HYPROF_OK)
        return -1;
    c->nodata = -9999.0;
    c->has_nodata = 1;
    size_t n = (size_t)W * H;
    float *x = c->data;
    double load[4][B];
    for (int k = 0; k < 4; k++)
        for (size_t b = 0; b < bands; b++)
            load[k][b] = 400.0 * sin(0.07 * (double)(b + 1) * (k + 1)) / (k + 1) + 60.0 * rng_normal();
    for (size_t p = 0; p < n; p++) {
        double z[4];
        int best = 0;
        for (int k = 0; k < 4; k++) {
            z[k] = rng_normal();
            if (k < 3 && z[k] > z[best])
                best = k;
        }
        int bad = rng_uniform() < masked;
        for (size_t b = 0; b < bands; b++) {
            double v = 2000.0 + 500.0 * cos(0.03 * (double)b) + 4.0 * rng_normal();
            for (int k = 0; k < 4; k++)
                v += z[k] * load[k][b];
            x[b * n + p] = bad ? -9999.0f : (float)rint(v);
        }
        c->mask[(p / W) * c->mask_stride_y + p % W] = !bad;
        if (labels)
            labels[p] = !bad && p % 13 == 0 ? (uint16_t)(best + 1) : 0;
    }
    return 0;
}

/* ---- comparisons ---------------------------------------------------------------- */

/* Worst error of `got` against `ref` by `kind`, divided by the tolerance's
 * scale (so <= tol passes); counts nodata mismatches. */
static double compare(const hyprof_cube_t *in, const hyprof_cube_t *ref, const hyprof_cube_t *got,
                      cmp_kind_t kind, size_t *nodata_mismatch)
{
    size_t n = ref->width * ref->height;
    const float *r = ref->data, *g = got->data;
    double worst = 0.0, global_max = 0.0, global_err = 0.0;
    *nodata_mismatch = 0;
    for (size_t k = 0; k < ref->bands; k++) {
        double maxabs = 0.0, maxerr = 0.0, dwt_worst = 0.0;
        for (size_t p = 0; p < n; p++)
            if (pixel_valid(in, p) && fabs(r[k * n + p]) > maxabs)
                maxabs = fabs(r[k * n + p]);
        for (size_t p = 0; p < n; p++) {
            float a = r[k * n + p], b = g[k * n + p];
            if (!pixel_valid(in, p)) {
                *nodata_mismatch += !same_float(a, b);
                continue;
            }
            double e = fabs((double)a - (double)b);
            if (isnan(e))
                e = INFINITY;
            maxerr = e > maxerr ? e : maxerr;
            double scale = fmax(fabs(a), 1e-3 * maxabs);
            double d = scale > 0 ? e / scale : (e > 0 ? INFINITY : 0.0);
            dwt_worst = d > dwt_worst ? d : dwt_worst;
        }
        double rel = maxabs > 0 ? maxerr / maxabs : maxerr;
        double band;
        switch (kind) {
        case CMP_DWT: band = dwt_worst; break;
        case CMP_UNMIX: band = k + 1 < ref->bands ? maxerr : rel; break;
        case CMP_ABS: band = maxerr; break;
        default: band = rel; break;
        }
        worst = band > worst ? band : worst;
        global_max = maxabs > global_max ? maxabs : global_max;
        global_err = maxerr > global_err ? maxerr : global_err;
    }
    if (kind == CMP_GLOBAL)
        return global_max > 0 ? global_err / global_max : global_err;
    return worst;
}

static int same_shape(const hyprof_cube_t *a, const hyprof_cube_t *b)
{
    return a->width == b->width && a->height == b->height && a->bands == b->bands;
}

/* ---- the operations ------------------------------------------------------------- */

static hyprof_status_t run_op(hyprof_ctx_t *ctx, const op_case_t *oc, const hyprof_cube_t *in,
                              hyprof_result_t *res)
{
    const hyprof_op_t *o = hyprof_op_find(oc->op);
    hyprof_result_init(res);
    hyprof_args_t *args = o ? hyprof_args_new(o) : NULL;
    if (!args)
        return HYPROF_ERR_INTERNAL;
    hyprof_status_t st = HYPROF_OK;
    for (const char *const *kv = oc->args; kv && kv[0] && st == HYPROF_OK; kv += 2)
        st = hyprof_args_set(args, kv[0], kv[1]);
    if (st == HYPROF_OK)
        st = hyprof_op_run(ctx, o, args, in, res);
    hyprof_args_free(&args);
    return st;
}

/* One run under a cap: with cuda, a result within tolerance or
 * HYPROF_ERR_DEVICE_MEMORY with a message; with auto, a result within
 * tolerance. Returns 1 when the CUDA path produced the result. */
static int check_run(const char *what, hyprof_ctx_t *ctx, hyprof_status_t st, int cuda,
                     const hyprof_cube_t *in, const hyprof_cube_t *ref, const hyprof_cube_t *got,
                     cmp_kind_t kind, double tol)
{
    const char *msg = hyprof_ctx_last_error(ctx);
    g_checks++;
    if (st != HYPROF_OK) {
        if (cuda && st == HYPROF_ERR_DEVICE_MEMORY && msg && *msg) {
            printf("ok   %s: not enough device memory (%s)\n", what, msg);
            return 0;
        }
        FAIL("%s: %s (%s)", what, hyprof_status_text(st), msg ? msg : "no message");
        return 0;
    }
    int on_cuda = hyprof_ctx_used_backend(ctx) == HYPROF_BACKEND_CUDA;
    if (cuda && !expect_cuda(ctx, what))
        return 0;
    if (!same_shape(ref, got)) {
        FAIL("%s: %zux%zux%zu, the CPU gives %zux%zux%zu", what, got->width, got->height,
             got->bands, ref->width, ref->height, ref->bands);
        return 0;
    }
    size_t nd = 0;
    double err = compare(in, ref, got, kind, &nd);
    g_checks++;
    if (!(err <= tol) || nd)
        FAIL("%s: error %.3g (tolerance %.0e), %zu nodata mismatches", what, err, tol, nd);
    else
        printf("ok   %s: on %s, error %.3g (tolerance %.0e)\n", what, on_cuda ? "cuda" : "cpu",
               err, tol);
    return on_cuda;
}

static void test_op(const op_case_t *oc, const hyprof_cube_t *in, hyprof_ctx_t *cpu,
                    hyprof_ctx_t *gpu, hyprof_ctx_t *aut)
{
    hyprof_result_t ref, got;
    unsetenv("HYPROF_DEVICE_MEMORY");
    g_checks++;
    if (run_op(cpu, oc, in, &ref) != HYPROF_OK) {
        FAIL("%s: cpu: %s", oc->op, hyprof_ctx_last_error(cpu));
        hyprof_result_free(&ref);
        return;
    }
    int ran_cuda = 0;
    for (size_t i = 0; i < NCAPS; i++) {
        char what[96];
        setenv("HYPROF_DEVICE_MEMORY", g_caps[i], 1);
        snprintf(what, sizeof what, "%s, cap %s, backend cuda", oc->op, g_caps[i]);
        hyprof_status_t st = run_op(gpu, oc, in, &got);
        ran_cuda += check_run(what, gpu, st, 1, in, &ref.cube, &got.cube, oc->cmp, oc->tol);
        hyprof_result_free(&got);
        snprintf(what, sizeof what, "%s, cap %s, backend auto", oc->op, g_caps[i]);
        st = run_op(aut, oc, in, &got);
        check_run(what, aut, st, 0, in, &ref.cube, &got.cube, oc->cmp, oc->tol);
        hyprof_result_free(&got);
    }
    unsetenv("HYPROF_DEVICE_MEMORY");
    g_checks++;
    if (!ran_cuda) /* the largest cap holds the cube: something must run there */
        FAIL("%s: the CUDA path ran under no cap", oc->op);
    hyprof_result_free(&ref);
}

/* classify: an SVM (an ELM without LIBSVM) trained on the CPU, applied under each cap. */
static void test_classify(const hyprof_cube_t *in, const uint16_t *labels, hyprof_ctx_t *cpu,
                          hyprof_ctx_t *gpu, hyprof_ctx_t *aut)
{
    hyprof_cube_t lab = hyprof_cube_bsq((void *)labels, HYPROF_UINT16, W, H, 1);
    hyprof_train_params_t tp;
    hyprof_train_params_default(&tp);
    static const double c = 32.0, gamma = 1.0 / B;
    tp.c = &c;
    tp.gamma = &gamma;
    tp.n_c = tp.n_gamma = 1;
    if (!hyprof_have_libsvm()) { /* the GPU machines have no LIBSVM: an ELM then */
        tp.kind = HYPROF_CLASSIFIER_ELM;
        printf("note classify: no LIBSVM in this build, an ELM instead of the SVM\n");
    }
    hyprof_classifier_t *m = NULL;
    hyprof_cube_t cmap, cs;
    unsetenv("HYPROF_DEVICE_MEMORY");
    g_checks++;
    if (hyprof_train(cpu, in, &lab, &tp, &m) != HYPROF_OK ||
        hyprof_classify(cpu, m, in, &cmap, &cs) != HYPROF_OK) {
        FAIL("classify: cpu: %s", hyprof_ctx_last_error(cpu));
        hyprof_classifier_free(&m);
        return;
    }
    int ran_cuda = 0;
    for (size_t i = 0; i < NCAPS; i++)
        for (int k = 0; k < 2; k++) {
            hyprof_ctx_t *ctx = k ? aut : gpu;
            char what[96];
            hyprof_cube_t gmap, gs;
            memset(&gmap, 0, sizeof gmap);
            memset(&gs, 0, sizeof gs);
            setenv("HYPROF_DEVICE_MEMORY", g_caps[i], 1);
            snprintf(what, sizeof what, "classify, cap %s, backend %s labels", g_caps[i],
                     k ? "auto" : "cuda");
            hyprof_status_t st = hyprof_classify(ctx, m, in, &gmap, &gs);
            /* Labels are compared as floats: exact, with tolerance 0. */
            hyprof_cube_t fc, fg;
            memset(&fc, 0, sizeof fc);
            memset(&fg, 0, sizeof fg);
            if (st == HYPROF_OK && (hyprof_cube_to_f32_bsq(&cmap, &fc) != HYPROF_OK ||
                                    hyprof_cube_to_f32_bsq(&gmap, &fg) != HYPROF_OK))
                st = HYPROF_ERR_NOMEM;
            int on = check_run(what, ctx, st, !k, in, &fc, &fg, CMP_BAND_REL, 0.0);
            if (st == HYPROF_OK) {
                snprintf(what, sizeof what, "classify, cap %s, backend %s vote fractions",
                         g_caps[i], k ? "auto" : "cuda");
                check_run(what, ctx, st, !k, in, &cs, &gs, CMP_ABS, 1e-5);
            }
            ran_cuda += !k && on;
            hyprof_cube_free(&fc);
            hyprof_cube_free(&fg);
            hyprof_cube_free(&gmap);
            hyprof_cube_free(&gs);
        }
    unsetenv("HYPROF_DEVICE_MEMORY");
    g_checks++;
    if (!ran_cuda)
        FAIL("classify: the CUDA path ran under no cap");
    hyprof_cube_free(&cmap);
    hyprof_cube_free(&cs);
    hyprof_classifier_free(&m);
}

static hyprof_ctx_t *context(hyprof_backend_t b)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    if (ctx)
        hyprof_ctx_set_backend(ctx, b);
    return ctx;
}

int main(void)
{
    if (hyprof_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return SKIP_CODE;
    }
    hyprof_ctx_t *cpu = context(HYPROF_BACKEND_CPU), *gpu = context(HYPROF_BACKEND_CUDA),
                 *aut = context(HYPROF_BACKEND_AUTO);
    hyprof_cube_t cube, small;
    memset(&cube, 0, sizeof cube);
    memset(&small, 0, sizeof small);
    uint16_t *labels = malloc((size_t)W * H * sizeof *labels);
    if (!cpu || !gpu || !aut || !labels || make_cube(&cube, B, 2311, 0.02, labels) ||
        make_cube(&small, 6, 977, 0.02, NULL)) {
        printf("FAIL: cannot set up the contexts and cubes\n");
        return 1;
    }
    for (size_t i = 0; i < NOPS; i++)
        test_op(&g_ops[i], g_ops[i].small ? &small : &cube, cpu, gpu, aut);
    test_classify(&cube, labels, cpu, gpu, aut);
    free(labels);
    hyprof_cube_free(&cube);
    hyprof_cube_free(&small);
    hyprof_ctx_free(&cpu);
    hyprof_ctx_free(&gpu);
    hyprof_ctx_free(&aut);
    printf("%d checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
