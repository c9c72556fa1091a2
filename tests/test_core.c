/* Unit tests of the library core: status texts, the registry and argument
 * parsing, cube views, nodata masks, dispatch, PCA and DWT on cases with
 * known answers, model files, cancellation. Exits non-zero on any failure. */
#define _GNU_SOURCE
#include "hyprof/hyprof.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures, checks;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        checks++;                                                             \
        if (!(cond)) {                                                        \
            failures++;                                                       \
            fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

static void test_status(void)
{
    for (int s = HYPROF_OK; s <= HYPROF_ERR_INTERNAL; s++) {
        const char *t = hyprof_status_text((hyprof_status_t)s);
        CHECK(t && *t && strcmp(t, "unknown status") != 0, "status %d has no text", s);
    }
    CHECK(strcmp(hyprof_status_text((hyprof_status_t)999), "unknown status") == 0, "bad status");
    hyprof_backend_t b;
    CHECK(hyprof_backend_parse("cuda", &b) == HYPROF_OK && b == HYPROF_BACKEND_CUDA, "cuda");
    CHECK(hyprof_backend_parse("gpu", &b) == HYPROF_ERR_ARGUMENT, "gpu accepted");
    CHECK(hyprof_backend_parse(NULL, &b) == HYPROF_ERR_ARGUMENT, "NULL accepted");
}

static void test_registry(void)
{
    CHECK(hyprof_op_count() >= 2, "ops: %zu", hyprof_op_count());
    for (size_t i = 0; i < hyprof_op_count(); i++) {
        const hyprof_op_t *op = hyprof_op_at(i);
        CHECK(op->name && op->group && op->summary && op->help && op->output, "op %zu", i);
        CHECK(hyprof_op_find(op->name) == op, "find %s", op->name);
        /* Every default parses (hyprof_args_new fails otherwise). */
        hyprof_args_t *a = hyprof_args_new(op);
        CHECK(a != NULL, "defaults of %s do not parse", op->name);
        for (size_t j = 0; a && j < op->nparams; j++) {
            const hyprof_param_t *p = &op->params[j];
            CHECK(p->help && *p->help, "%s.%s has no help", op->name, p->name);
            CHECK(hyprof_op_param(op, p->name) == p, "param lookup %s", p->name);
            for (size_t k = 0; k < j; k++)
                CHECK(strcmp(op->params[k].name, p->name) != 0, "%s declared twice", p->name);
        }
        hyprof_args_free(&a);
        CHECK(a == NULL, "free clears the pointer");
    }
    CHECK(hyprof_op_find("nope") == NULL, "unknown op found");
    size_t nc;
    const hyprof_param_t *common = hyprof_common_params(&nc);
    CHECK(nc == 8 && strcmp(common[0].name, "backend") == 0 &&
              strcmp(common[5].name, "of") == 0 && strcmp(common[6].name, "co") == 0 &&
              strcmp(common[7].name, "overviews") == 0,
          "common params");

    /* The dwt wavelet choices are exactly the wavelet table. */
    const hyprof_param_t *wp = hyprof_op_param(hyprof_op_find("dwt"), "wavelet");
    size_t nchoices = 1;
    for (const char *c = wp->choices; *c; c++)
        nchoices += *c == '|';
    CHECK(nchoices == hyprof_wavelet_count(), "%zu choices, %zu wavelets", nchoices,
          hyprof_wavelet_count());
    for (size_t i = 0; i < hyprof_wavelet_count(); i++)
        CHECK(strstr(wp->choices, hyprof_wavelet_at(i)->name), "%s not a choice",
              hyprof_wavelet_at(i)->name);
}

/* auto's size rule for a fresh process: the CPU estimate is the declared
 * cost times the voxels over the threads, and wins below the GPU's start-up
 * (only a CUDA build has a choice). */
static void test_cpu_is_quicker(void)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_ctx_set_threads(ctx, 2);
    const hyprof_op_t *pca = hyprof_op_find("pca"), *emp = hyprof_op_find("emp");
    double s = -1;
    int quick = hyprof_op_cpu_is_quicker(ctx, pca, 100, 100, 100, 7, &s);
    double want = 1e4 * 100 * pca->cpu_ns[0] * 1e-9 / 2;
    CHECK(pca->cpu_ns[0] > 0 && fabs(s - want) <= 1e-12 * want, "pca estimate %g, want %g", s, want);
    int cuda = strcmp(hyprof_build_info(), "cuda") == 0; /* else nothing to choose */
    CHECK(quick == cuda, "a small pca: %d in a %s build", quick, hyprof_build_info());
    CHECK(hyprof_op_cpu_is_quicker(ctx, pca, 4000, 4000, 200, 7, &s) == 0 &&
              s > HYPROF_CUDA_START_S,
          "a 4000x4000x200 pca estimated at %g s is not left to the CPU", s);
    hyprof_args_t *a = hyprof_args_new(emp); /* per output voxel: the operation's band count */
    size_t out = 0;
    CHECK(emp->bands(ctx, a, 50, &out) == HYPROF_OK && out > 0, "emp bands");
    hyprof_op_cpu_is_quicker(ctx, emp, 10, 10, 50, out, &s);
    want = 100.0 * (double)out * emp->cpu_ns[1] * 1e-9 / 2;
    CHECK(emp->cpu_ns[1] > 0 && fabs(s - want) <= 1e-12 * want, "emp estimate %g, want %g", s, want);
    hyprof_args_free(&a);
    const hyprof_op_t *train = hyprof_op_find("train"); /* no declared cost: never */
    CHECK(hyprof_op_cpu_is_quicker(ctx, train, 2, 2, 2, 0, &s) == 0, "train has no cost");
    hyprof_ctx_free(&ctx);
}

static void test_args(void)
{
    const hyprof_op_t *pca = hyprof_op_find("pca");
    hyprof_args_t *a = hyprof_args_new(pca);
    CHECK(hyprof_args_int(a, "components") == 7, "default components");
    CHECK(!hyprof_args_given(a, "components") && hyprof_args_is_set(a, "components"), "given");
    CHECK(hyprof_args_set(a, "components", "12") == HYPROF_OK, "set 12");
    CHECK(hyprof_args_int(a, "components") == 12 && hyprof_args_given(a, "components"), "12");
    CHECK(hyprof_args_set(a, "components", "0") == HYPROF_ERR_ARGUMENT, "0 accepted");
    CHECK(strstr(hyprof_args_error(a), "components") && strstr(hyprof_args_error(a), "0"),
          "error names param and value: %s", hyprof_args_error(a));
    CHECK(hyprof_args_set(a, "components", "3x") == HYPROF_ERR_ARGUMENT, "3x accepted");
    CHECK(hyprof_args_set(a, "components", "2.5") == HYPROF_ERR_ARGUMENT, "2.5 accepted");
    CHECK(hyprof_args_set(a, "components", "") == HYPROF_ERR_ARGUMENT, "empty accepted");
    CHECK(hyprof_args_set(a, "components", "99999999999999999999") == HYPROF_ERR_ARGUMENT,
          "overflow accepted");
    CHECK(hyprof_args_int(a, "components") == 12, "a failed set keeps the old value");
    CHECK(hyprof_args_set(a, "bogus", "1") == HYPROF_ERR_ARGUMENT, "unknown accepted");
    CHECK(strstr(hyprof_args_error(a), "bogus"), "unknown named: %s", hyprof_args_error(a));
    CHECK(hyprof_args_str(a, "model") == NULL, "model unset");
    hyprof_args_free(&a);

    a = hyprof_args_new(hyprof_op_find("dwt"));
    CHECK(hyprof_args_set(a, "wavelet", "db4") == HYPROF_OK, "db4");
    CHECK(strcmp(hyprof_args_str(a, "wavelet"), "db4") == 0, "db4 kept");
    CHECK(hyprof_args_set(a, "wavelet", "db") == HYPROF_ERR_ARGUMENT, "prefix accepted");
    CHECK(hyprof_args_set(a, "wavelet", "db44") == HYPROF_ERR_ARGUMENT, "db44 accepted");
    hyprof_args_free(&a);

    /* Lists, floats and booleans through a synthetic operation. */
    static const hyprof_param_t params[] = {
        {"t", HYPROF_PARAM_INT_LIST, "36,144", 1, 1000, NULL, "thresholds", 0},
        {"s", HYPROF_PARAM_FLOAT, "1.5", 0.1, 10, NULL, "sigma", 0},
        {"f", HYPROF_PARAM_BOOL, "false", 0, 0, NULL, "flag", 0},
        {"r", HYPROF_PARAM_STRING, NULL, 0, 0, NULL, "required", HYPROF_PARAM_REQUIRED},
    };
    hyprof_op_t op = {"synthetic", "g", "s", "h", params, 4, NULL, "none"};
    a = hyprof_args_new(&op);
    size_t n;
    const double *l = hyprof_args_list(a, "t", &n);
    CHECK(n == 2 && l[0] == 36 && l[1] == 144, "list default");
    CHECK(hyprof_args_set(a, "t", "1,2,3") == HYPROF_OK, "list");
    l = hyprof_args_list(a, "t", &n);
    CHECK(n == 3 && l[2] == 3, "list parse");
    CHECK(hyprof_args_set(a, "t", "1,,3") == HYPROF_ERR_ARGUMENT, "empty element accepted");
    CHECK(hyprof_args_set(a, "t", "1,5000") == HYPROF_ERR_ARGUMENT, "range in list");
    CHECK(strstr(hyprof_args_error(a), "5000"), "element named: %s", hyprof_args_error(a));
    CHECK(hyprof_args_set(a, "s", "nan") == HYPROF_ERR_ARGUMENT, "nan accepted");
    CHECK(hyprof_args_set(a, "s", "0.05") == HYPROF_ERR_ARGUMENT, "below min accepted");
    CHECK(hyprof_args_set(a, "s", "2.25") == HYPROF_OK && hyprof_args_float(a, "s") == 2.25,
          "float");
    CHECK(hyprof_args_set(a, "f", "yes") == HYPROF_OK && hyprof_args_bool(a, "f"), "bool");
    CHECK(hyprof_args_set(a, "f", "maybe") == HYPROF_ERR_ARGUMENT, "maybe accepted");
    CHECK(hyprof_args_check(a) == HYPROF_ERR_ARGUMENT && strcmp(hyprof_args_error(a), "r is required") == 0,
          "required: %s", hyprof_args_error(a));
    CHECK(hyprof_args_set(a, "r", "x") == HYPROF_OK && hyprof_args_check(a) == HYPROF_OK,
          "required given");
    hyprof_args_free(&a);
}

/* Page-locked cubes and their cache: exact properties that hold with or
 * without a device (tests/test_gpu_emp.c checks the device copies). */
static void test_pinned(void)
{
    const int dev = hyprof_cuda_device_count() > 0;
    hyprof_cube_t c;
    CHECK(hyprof_cube_alloc_pinned(&c, HYPROF_FLOAT32, 0, 1, 1) == HYPROF_OK && c.data,
          "an empty pinned cube has data");
    hyprof_cube_free(&c);
    CHECK(hyprof_cube_alloc_pinned(&c, HYPROF_FLOAT32, SIZE_MAX / 2, 3, 1) == HYPROF_ERR_ARGUMENT,
          "overflowing size accepted");
    CHECK(hyprof_cube_alloc_pinned(&c, HYPROF_UINT16, 7, 5, 3) == HYPROF_OK, "alloc_pinned");
    CHECK(c.width == 7 && c.height == 5 && c.bands == 3 && c.stride_b == 35 && !c.mask,
          "pinned cube shape");
    CHECK(!(c.owns & HYPROF_OWNS_PINNED) == !dev, "page-locked only with a device (owns %u)",
          c.owns);
    for (size_t i = 0; i < 7 * 5 * 3; i++) /* the whole cube is writable */
        ((uint16_t *)c.data)[i] = (uint16_t)i;
    CHECK(hyprof_cube_get(&c, 6, 4, 2) == 104, "pinned element");
    void *first = c.data;
    hyprof_pinned_cache_set(1 << 20);
    CHECK(hyprof_pinned_cache_limit() == 1 << 20, "cache limit");
    hyprof_cube_free(&c);
    CHECK(c.data == NULL, "free clears the cube");
    CHECK(hyprof_pinned_cache_bytes() == (dev ? 7 * 5 * 3 * 2 + 64 : 0u),
          "cached bytes %zu", hyprof_pinned_cache_bytes());
    /* a cube of the same size takes the cached block again */
    CHECK(hyprof_cube_alloc_pinned(&c, HYPROF_UINT16, 5, 7, 3) == HYPROF_OK, "alloc again");
    CHECK(!dev || (c.data == first && hyprof_pinned_cache_bytes() == 0), "cache not reused");
    hyprof_cube_free(&c);
    hyprof_pinned_cache_set(0);
    CHECK(hyprof_pinned_cache_bytes() == 0 && hyprof_pinned_cache_limit() == 0,
          "limit 0 empties the cache");
}

static void test_cubes(void)
{
    /* A 3x2x2 BIP int16 cube: value = 100*b + 10*y + x. */
    int16_t bip[2 * 3 * 2];
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++)
            for (int b = 0; b < 2; b++)
                bip[(y * 3 + x) * 2 + b] = (int16_t)(100 * b + 10 * y + x);
    hyprof_cube_t c = {bip, HYPROF_INT16, 3, 2, 2, 2, 6, 1, NULL, 3, 0, 0, 0};
    char why[128];
    CHECK(hyprof_cube_check(&c, why, sizeof why) == HYPROF_OK, "valid cube: %s", why);
    CHECK(!hyprof_cube_is_f32_bsq(&c), "BIP is not BSQ");
    CHECK(hyprof_cube_get(&c, 2, 1, 1) == 112, "get: %g", hyprof_cube_get(&c, 2, 1, 1));
    hyprof_cube_t f;
    CHECK(hyprof_cube_to_f32_bsq(&c, &f) == HYPROF_OK && hyprof_cube_is_f32_bsq(&f), "to bsq");
    CHECK(((float *)f.data)[1 * 6 + 1 * 3 + 2] == 112.0f, "bsq element");
    hyprof_cube_t band = hyprof_cube_band(&f, 1), win;
    CHECK(hyprof_cube_get(&band, 0, 1, 0) == 110, "band view");
    CHECK(hyprof_cube_window(&c, 1, 1, 2, 1, &win) == HYPROF_OK && win.width == 2 &&
              hyprof_cube_get(&win, 1, 0, 1) == 112, "window");
    CHECK(hyprof_cube_window(&c, 2, 0, 2, 1, &win) == HYPROF_ERR_ARGUMENT, "window overflow");
    CHECK(hyprof_cube_window(&c, 0, 0, 0, 1, &win) == HYPROF_ERR_ARGUMENT, "empty window");
    hyprof_cube_free(&f);

    hyprof_cube_t z = c;
    z.width = 0;
    CHECK(hyprof_cube_check(&z, why, sizeof why) == HYPROF_ERR_ARGUMENT && strstr(why, "0x2x2"),
          "zero width named: %s", why);
    z = c;
    z.data = NULL;
    CHECK(hyprof_cube_check(&z, why, sizeof why) == HYPROF_ERR_ARGUMENT, "no data");
    z = c;
    z.width = SIZE_MAX / 2;
    CHECK(hyprof_cube_check(&z, why, sizeof why) == HYPROF_ERR_ARGUMENT, "overflow");
}

static void test_nodata(void)
{
    float d[2 * 2 * 2] = {1, 2, -9999, 4, /* band 2: */ 5, NAN, 7, 8};
    hyprof_cube_t c = hyprof_cube_bsq(d, HYPROF_FLOAT32, 2, 2, 2);
    c.has_nodata = 1;
    c.nodata = -9999;
    CHECK(hyprof_cube_count_valid(&c) == 4, "no mask: all valid");
    size_t v = hyprof_cube_mask_invalid(&c);
    CHECK(v == 2 && c.mask[0] && !c.mask[1] && !c.mask[2] && c.mask[3],
          "NaN in one band and nodata in another mask their pixels (%zu valid)", v);
    hyprof_cube_t w;
    CHECK(hyprof_cube_window(&c, 1, 0, 1, 2, &w) == HYPROF_OK &&
              !hyprof_cube_valid(&w, 0, 0) && hyprof_cube_valid(&w, 0, 1) &&
              hyprof_cube_count_valid(&w) == 1, "mask follows a window");
    hyprof_cube_t f;
    CHECK(hyprof_cube_to_f32_bsq(&w, &f) == HYPROF_OK && f.mask && !f.mask[0] && f.mask[1],
          "mask copied");
    hyprof_cube_free(&f);
    hyprof_cube_free(&c);
}

/* hyprof_cube_all_finite against the definition, value by value: every
 * position of a strided (BIP) float32 cube and a float64 cube, NaN and both
 * infinities, on 1 and 2 threads; integer cubes are finite. */
static void test_all_finite(void)
{
    enum { W = 67, H = 5, B = 3 };
    static float f[W * H * B];
    static double g[W * H * B];
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < W * H * B; i++)
        f[i] = g[i] = (float)i - 100.0f;
    hyprof_cube_t c = hyprof_cube_bsq(f, HYPROF_FLOAT32, W, H, B);
    c.stride_x = B; /* BIP: pixel-interleaved */
    c.stride_y = (ptrdiff_t)W * B;
    c.stride_b = 1;
    hyprof_cube_t d = hyprof_cube_bsq(g, HYPROF_FLOAT64, W, H, B);
    CHECK(hyprof_cube_all_finite(&c, 1) && hyprof_cube_all_finite(&d, 2), "finite cubes");
    for (size_t i = 0; i < W * H * B; i += 7) {
        float keep = f[i];
        double keepd = g[i];
        f[i] = bad[i % 3];
        g[i] = bad[(i + 1) % 3];
        CHECK(!hyprof_cube_all_finite(&c, 2) && !hyprof_cube_all_finite(&c, 1),
              "float32 value %zu (%g) not found", i, f[i]);
        CHECK(!hyprof_cube_all_finite(&d, 2), "float64 value %zu (%g) not found", i, g[i]);
        f[i] = keep;
        g[i] = keepd;
    }
    f[0] = 3.4e38f; /* the largest finite values are finite */
    g[0] = 1.7e308;
    CHECK(hyprof_cube_all_finite(&c, 0) && hyprof_cube_all_finite(&d, 0), "large finite");
    int16_t k[4] = {-32768, 0, 1, 32767};
    hyprof_cube_t e = hyprof_cube_bsq(k, HYPROF_INT16, 2, 2, 1);
    CHECK(hyprof_cube_all_finite(&e, 0), "integers are finite");
}

static hyprof_ctx_t *cpu_ctx(void)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CPU);
    return ctx;
}

static void test_dispatch(void)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    float d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    hyprof_cube_t c = hyprof_cube_bsq(d, HYPROF_FLOAT32, 4, 1, 2), out;
    setenv("HYPROF_BACKEND", "cpu", 1);
    hyprof_ctx_t *env = hyprof_ctx_new();
    CHECK(hyprof_ctx_backend(env) == HYPROF_BACKEND_CPU, "HYPROF_BACKEND=cpu");
    hyprof_ctx_set_backend(env, HYPROF_BACKEND_CUDA);
    CHECK(hyprof_ctx_backend(env) == HYPROF_BACKEND_CUDA, "explicit backend wins over env");
    unsetenv("HYPROF_BACKEND");
    hyprof_ctx_free(&env);
    CHECK(env == NULL, "free clears the pointer");

    CHECK(hyprof_dwt_spectral(ctx, &c, hyprof_wavelet_find("haar"), 1, &out) == HYPROF_OK,
          "auto runs: %s", hyprof_ctx_last_error(ctx));
    if (hyprof_cuda_device_count() == 0)
        CHECK(hyprof_ctx_used_backend(ctx) == HYPROF_BACKEND_CPU, "auto without a GPU is CPU");
    hyprof_cube_free(&out);
    if (hyprof_cuda_device_count() == 0) {
        hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CUDA);
        hyprof_status_t st = hyprof_dwt_spectral(ctx, &c, hyprof_wavelet_find("haar"), 1, &out);
        CHECK(st == HYPROF_ERR_NO_DEVICE && strstr(hyprof_ctx_last_error(ctx), "cuda"),
              "cuda without a device: %d %s", st, hyprof_ctx_last_error(ctx));
    }
    int ndev = hyprof_cuda_device_count();
    CHECK(hyprof_cuda_warm_up(ndev) == HYPROF_ERR_NO_DEVICE, "warm-up of device %d of %d", ndev,
          ndev);
    CHECK(hyprof_cuda_warm_up(-1) == HYPROF_ERR_NO_DEVICE, "warm-up of device -1");
    CHECK(hyprof_cuda_warm_up(0) == (ndev ? HYPROF_OK : HYPROF_ERR_NO_DEVICE),
          "warm-up of device 0 (%d found)", ndev);
    CHECK(hyprof_ctx_set_device(ctx, -1) == HYPROF_ERR_ARGUMENT, "negative device");
    CHECK(hyprof_ctx_set_threads(ctx, -2) == HYPROF_ERR_ARGUMENT, "negative threads");
    hyprof_ctx_free(&ctx);
}

/* Points on a line y = 2x (plus the mean): one component along (1,2)/sqrt5,
 * eigenvalue = variance along it. */
static void test_pca_known(void)
{
    hyprof_ctx_t *ctx = cpu_ctx();
    float d[2 * 5];
    for (int i = 0; i < 5; i++) {
        d[i] = (float)(i - 2) + 10.0f;
        d[5 + i] = 2.0f * (float)(i - 2) - 3.0f;
    }
    hyprof_cube_t c = hyprof_cube_bsq(d, HYPROF_FLOAT32, 5, 1, 2), out;
    hyprof_pca_model_t *m = NULL;
    CHECK(hyprof_pca_fit(ctx, &c, 2, &m) == HYPROF_OK, "fit: %s", hyprof_ctx_last_error(ctx));
    if (!m)
        return;
    const double *v = hyprof_pca_model_vectors(m), *ev = hyprof_pca_model_eigenvalues(m);
    CHECK(fabs(v[0] - 1 / sqrt(5.0)) < 1e-12 && fabs(v[1] - 2 / sqrt(5.0)) < 1e-12,
          "PC1 = (1,2)/sqrt5 with the positive sign: %g %g", v[0], v[1]);
    /* variance along (1,2): sum((i-2)^2 * 5)/(n-1) = 10*5/4 */
    CHECK(fabs(ev[0] - 12.5) < 1e-9 && fabs(ev[1]) < 1e-9, "eigenvalues %g %g", ev[0], ev[1]);
    CHECK(fabs(hyprof_pca_model_mean(m)[0] - 10) < 1e-12, "mean");
    CHECK(hyprof_pca_apply(ctx, m, &c, &out) == HYPROF_OK, "apply");
    CHECK(fabs(((float *)out.data)[4] - 2 * sqrt(5.0)) < 1e-5, "projection %g",
          ((float *)out.data)[4]);
    /* Fit-transform gives the same model and projection, bit for bit. */
    hyprof_pca_model_t *mt = NULL;
    hyprof_cube_t ft;
    CHECK(hyprof_pca_fit_transform(ctx, &c, 2, &mt, &ft) == HYPROF_OK && mt &&
              ft.bands == 2 && !memcmp(ft.data, out.data, 10 * sizeof(float)) &&
              !memcmp(hyprof_pca_model_vectors(mt), v, 4 * sizeof(double)) &&
              hyprof_pca_model_samples(mt) == hyprof_pca_model_samples(m),
          "fit-transform = fit + apply: %s", hyprof_ctx_last_error(ctx));
    hyprof_pca_model_free(&mt);
    hyprof_cube_free(&ft);
    CHECK(hyprof_pca_fit_transform(ctx, &c, 3, &mt, &ft) == HYPROF_ERR_ARGUMENT && !mt &&
              !ft.data, "fit-transform: 3 of 2 components refused, nothing left");
    hyprof_cube_free(&out);

    /* Model files reload bit for bit, and bad ones are refused by name. */
    char path[] = "/tmp/hyprof_test_modelXXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(hyprof_pca_model_save(ctx, m, path) == HYPROF_OK, "save");
    hyprof_pca_model_t *m2 = NULL;
    CHECK(hyprof_pca_model_load(ctx, path, &m2) == HYPROF_OK, "load: %s",
          hyprof_ctx_last_error(ctx));
    CHECK(m2 && memcmp(hyprof_pca_model_vectors(m2), v, 4 * sizeof(double)) == 0 &&
              hyprof_pca_model_eigenvalues(m2)[0] == ev[0], "reload is exact");
    hyprof_pca_model_free(&m2);
    FILE *f = fopen(path, "w");
    fputs("hyprof-pca-model 1\nbands 2\ncomponents 2\nsamples 5\ntotal_variance 1\n"
          "eigenvalues 1\n", f);
    fclose(f);
    CHECK(hyprof_pca_model_load(ctx, path, &m2) == HYPROF_ERR_FORMAT && !m2 &&
              strstr(hyprof_ctx_last_error(ctx), "eigenvalues"),
          "short line refused: %s", hyprof_ctx_last_error(ctx));
    f = fopen(path, "w");
    fputs("hyprof-svm-model 1\n", f);
    fclose(f);
    CHECK(hyprof_pca_model_load(ctx, path, &m2) == HYPROF_ERR_FORMAT, "wrong magic refused");
    remove(path);
    CHECK(hyprof_pca_model_load(ctx, path, &m2) == HYPROF_ERR_IO &&
              strstr(hyprof_ctx_last_error(ctx), path), "missing file named");

    /* Wrong band count, too many components, too few pixels. */
    float d3[3 * 5] = {0};
    hyprof_cube_t c3 = hyprof_cube_bsq(d3, HYPROF_FLOAT32, 5, 1, 3);
    CHECK(hyprof_pca_apply(ctx, m, &c3, &out) == HYPROF_ERR_INPUT &&
              strstr(hyprof_ctx_last_error(ctx), "2 bands") &&
              strstr(hyprof_ctx_last_error(ctx), "3"), "band mismatch: %s",
          hyprof_ctx_last_error(ctx));
    hyprof_pca_model_free(&m);
    CHECK(hyprof_pca_fit(ctx, &c, 3, &m) == HYPROF_ERR_ARGUMENT && !m, "3 of 2 components");
    hyprof_cube_t one = hyprof_cube_bsq(d, HYPROF_FLOAT32, 1, 1, 2);
    CHECK(hyprof_pca_fit(ctx, &one, 1, &m) == HYPROF_ERR_INPUT &&
              strstr(hyprof_ctx_last_error(ctx), "1 valid"), "1 pixel: %s",
          hyprof_ctx_last_error(ctx));
    hyprof_ctx_free(&ctx);
}

/* Masked pixels stay out of the statistics: the result equals the fit on the
 * valid pixels alone. */
static void test_pca_mask(void)
{
    hyprof_ctx_t *ctx = cpu_ctx();
    enum { W = 40, B = 4 };
    float d[W * B], dv[W * B];
    uint8_t mask[W];
    size_t nv = 0;
    srand(7);
    for (int i = 0; i < W; i++)
        mask[i] = (i % 5) != 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < W; i++)
            d[b * W + i] = mask[i] ? (float)(rand() % 1000) / 10.0f : 1e6f;
    for (int i = 0; i < W; i++)
        if (mask[i]) {
            for (int b = 0; b < B; b++)
                dv[b * (W * 4 / 5) + nv] = d[b * W + i];
            nv++;
        }
    hyprof_cube_t c = hyprof_cube_bsq(d, HYPROF_FLOAT32, W, 1, B);
    c.mask = mask;
    c.has_nodata = 1;
    c.nodata = -1;
    hyprof_cube_t cv = hyprof_cube_bsq(dv, HYPROF_FLOAT32, nv, 1, B), out;
    hyprof_pca_model_t *m = NULL, *mv = NULL;
    hyprof_pca_fit(ctx, &c, 3, &m);
    hyprof_pca_fit(ctx, &cv, 3, &mv);
    double err = 0;
    for (int k = 0; m && mv && k < 3 * B; k++)
        err = fmax(err, fabs(hyprof_pca_model_vectors(m)[k] - hyprof_pca_model_vectors(mv)[k]));
    CHECK(m && mv && err < 1e-12, "masked fit differs from the valid-only fit by %g", err);
    CHECK(m && hyprof_pca_model_samples(m) == nv, "samples");
    CHECK(m && hyprof_pca_apply(ctx, m, &c, &out) == HYPROF_OK && ((float *)out.data)[0] == -1 &&
              ((float *)out.data)[W] == -1 && ((float *)out.data)[1] != -1,
          "masked pixels get nodata");
    hyprof_cube_free(&out);
    hyprof_pca_model_free(&m);
    hyprof_pca_model_free(&mv);
    uint8_t none[W] = {0};
    c.mask = none;
    CHECK(hyprof_pca_fit(ctx, &c, 1, &m) == HYPROF_ERR_INPUT, "all nodata refused");
    hyprof_ctx_free(&ctx);
}

/* Haar at one level on [1..4]: (1+2)/sqrt2, (3+4)/sqrt2; odd lengths repeat
 * the last sample: [1,2,3] -> (1+2)/sqrt2, (3+3)/sqrt2. */
static void test_dwt_known(void)
{
    hyprof_ctx_t *ctx = cpu_ctx();
    const hyprof_wavelet_t *haar = hyprof_wavelet_find("haar");
    float d4[4] = {1, 2, 3, 4}, d3[3] = {1, 2, 3};
    hyprof_cube_t c4 = hyprof_cube_bsq(d4, HYPROF_FLOAT32, 1, 1, 4), out;
    hyprof_cube_t c3 = hyprof_cube_bsq(d3, HYPROF_FLOAT32, 1, 1, 3);
    const float *o;
    CHECK(hyprof_dwt_spectral(ctx, &c4, haar, 1, &out) == HYPROF_OK && out.bands == 2, "4->2");
    o = out.data;
    CHECK(fabs(o[0] - 3 / sqrt(2.0)) < 1e-6 && fabs(o[1] - 7 / sqrt(2.0)) < 1e-6, "haar %g %g",
          o[0], o[1]);
    hyprof_cube_free(&out);
    CHECK(hyprof_dwt_spectral(ctx, &c3, haar, 1, &out) == HYPROF_OK && out.bands == 2, "3->2");
    o = out.data;
    CHECK(fabs(o[1] - 6 / sqrt(2.0)) < 1e-6, "odd length repeats the last sample: %g", o[1]);
    hyprof_cube_free(&out);
    CHECK(hyprof_dwt_spectral(ctx, &c4, haar, 2, &out) == HYPROF_OK && out.bands == 1 &&
              fabs(((float *)out.data)[0] - 5.0) < 1e-6, "two levels: sum/2 = 5");
    hyprof_cube_free(&out);
    CHECK(hyprof_dwt_spectral(ctx, &c4, haar, 3, &out) == HYPROF_ERR_ARGUMENT &&
              strstr(hyprof_ctx_last_error(ctx), "levels 3"), "too many levels: %s",
          hyprof_ctx_last_error(ctx));
    hyprof_cube_t c1 = hyprof_cube_bsq(d4, HYPROF_FLOAT32, 4, 1, 1);
    CHECK(hyprof_dwt_spectral(ctx, &c1, haar, 1, &out) == HYPROF_ERR_INPUT, "one band refused");
    CHECK(hyprof_dwt_bands(200, 4) == 13 && hyprof_dwt_bands(7, 1) == 4 &&
              hyprof_dwt_max_levels(200) == 7, "band counts");
    /* Closest band count: 200 bands give 7 at L=5 and 4 at L=6; 102 give 7 at
     * L=4 and 4 at L=5; 8 give 4 at L=1. */
    CHECK(hyprof_dwt_levels_for_features(200, 4) == 6 &&
              hyprof_dwt_levels_for_features(102, 8) == 4 &&
              hyprof_dwt_levels_for_features(102, 4) == 5 &&
              hyprof_dwt_levels_for_features(8, 8) == 1,
          "levels for a feature count");
    /* Every filter bank: orthonormal low-pass sums to sqrt2. */
    for (size_t i = 0; i < hyprof_wavelet_count(); i++) {
        const hyprof_wavelet_t *w = hyprof_wavelet_at(i);
        double s = 0;
        for (size_t j = 0; j < w->length; j++)
            s += w->dec_lo[j];
        CHECK(fabs(s - sqrt(2.0)) < 1e-9, "%s dec_lo sums to %g", w->name, s);
    }
    hyprof_ctx_free(&ctx);
}

static int cancel_at_first(void *user, double f, const char *stage)
{
    (void)f;
    (void)stage;
    ++*(int *)user;
    return 1;
}

static void test_cancel(void)
{
    hyprof_ctx_t *ctx = cpu_ctx();
    int calls = 0;
    hyprof_ctx_set_progress(ctx, cancel_at_first, &calls);
    size_t w = 4096;
    float *d = calloc(w * 8, sizeof *d);
    for (size_t i = 0; i < w * 8; i++)
        d[i] = (float)(i % 97);
    hyprof_cube_t c = hyprof_cube_bsq(d, HYPROF_FLOAT32, w, 1, 8), out;
    hyprof_status_t st = hyprof_dwt_spectral(ctx, &c, hyprof_wavelet_find("db2"), 2, &out);
    CHECK(st == HYPROF_ERR_CANCELLED && calls >= 1 && out.data == NULL,
          "progress callback cancels (%d, %d calls)", st, calls);
    hyprof_ctx_free(&ctx);
    ctx = cpu_ctx();
    hyprof_ctx_cancel(ctx);
    hyprof_pca_model_t *m = NULL;
    CHECK(hyprof_pca_fit(ctx, &c, 2, &m) == HYPROF_ERR_CANCELLED && !m, "cancel flag stops fit");
    free(d);
    hyprof_ctx_free(&ctx);
}

/* The band callback's record: how often each band was announced, and its
 * values at that moment. */
typedef struct {
    size_t npix, nbands;
    int *count;
    float *seen;
    hyprof_ctx_t *cancel;  /* cancelled at the first announcement (NULL: never) */
    int revoked, after_revoke;
} bands_seen_t;

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;

static void record_band(void *user, size_t band, const float *data)
{
    bands_seen_t *r = user;
    pthread_mutex_lock(&record_lock); /* W-MCD announces from several threads */
    if (band == HYPROF_BANDS_REVOKED) {
        r->revoked++;
    } else if (r->revoked) {
        r->after_revoke++;
    } else if (band < r->nbands) {
        if (r->cancel)
            hyprof_ctx_cancel(r->cancel);
        r->count[band]++;
        memcpy(r->seen + band * r->npix, data, r->npix * sizeof *data);
    }
    pthread_mutex_unlock(&record_lock);
}

/* EADP, EAP, EMP and W-MCD on the CPU announce every band of their result once,
 * with the values the result holds when the operation returns. */
static void test_band_done(void)
{
    const char *ops[] = {"eadp", "eap", "emp", "wmcd"};
    size_t w = 40, h = 36, nb = 12, npix = w * h;
    float *d = malloc(npix * nb * sizeof *d);
    for (size_t i = 0; i < npix * nb; i++)
        d[i] = (float)((i * 7919u) % 251u) + (float)(i / npix);
    hyprof_cube_t c = hyprof_cube_bsq(d, HYPROF_FLOAT32, w, h, nb);
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        hyprof_ctx_t *ctx = cpu_ctx();
        const hyprof_op_t *op = hyprof_op_find(ops[k]);
        hyprof_args_t *a = hyprof_args_new(op);
        size_t out_bands = 0;
        CHECK(op->bands(ctx, a, nb, &out_bands) == HYPROF_OK && out_bands, "%s bands", ops[k]);
        bands_seen_t r = {npix, out_bands, calloc(out_bands, sizeof(int)),
                          calloc(out_bands * npix, sizeof(float)), NULL, 0, 0};
        hyprof_ctx_set_band_done(ctx, record_band, &r);
        hyprof_result_t res;
        hyprof_result_init(&res);
        hyprof_status_t st = hyprof_op_run(ctx, op, a, &c, &res);
        CHECK(st == HYPROF_OK && res.cube.bands == out_bands, "%s runs (%d)", ops[k], st);
        for (size_t b = 0; st == HYPROF_OK && b < out_bands; b++)
            CHECK(r.count[b] == 1 && memcmp(r.seen + b * npix,
                                            (const float *)res.cube.data + b * npix,
                                            npix * sizeof(float)) == 0,
                  "%s band %zu: announced %d times, or changed after", ops[k], b, r.count[b]);
        CHECK(r.revoked == 0, "%s: bands revoked by a run that succeeded", ops[k]);
        hyprof_result_free(&res);
        /* Cancelled at its first band: a run that stops revokes its bands
         * (the caller may still be writing them) before it returns, and
         * announces none after. (EMP announces its bands after its last
         * progress point, so it completes.) */
        r.cancel = ctx;
        st = hyprof_op_run(ctx, op, a, &c, &res);
        CHECK(st == (strcmp(ops[k], "emp") ? HYPROF_ERR_CANCELLED : HYPROF_OK) &&
                  (r.revoked >= 1) == (st != HYPROF_OK) && r.after_revoke == 0,
              "%s cancelled: status %d, revoked %d times, %d bands after", ops[k], st, r.revoked,
              r.after_revoke);
        hyprof_result_free(&res);
        free(r.count);
        free(r.seen);
        hyprof_args_free(&a);
        hyprof_ctx_free(&ctx);
    }
    free(d);
}

int main(void)
{
    test_status();
    test_registry();
    test_cpu_is_quicker();
    test_args();
    test_cubes();
    test_pinned();
    test_nodata();
    test_all_finite();
    test_dispatch();
    test_pca_known();
    test_pca_mask();
    test_dwt_known();
    test_cancel();
    test_band_done();
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
