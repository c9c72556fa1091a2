/* CPU / CUDA parity of EMP and W-MCD (hyprof_emp, hyprof_wmcd), through the
 * public API only, and one GPU against two.
 *
 *   test_gpu_emp
 *
 * Seeded synthetic feature cubes: smooth fields with plateaus and noise (odd
 * sizes, sizes that are not multiples of the 32-pixel tiles), a spiral
 * corridor whose reconstruction has to cross many tiles back and forth, 3 %
 * masked pixels, disk/square/diamond, soft and hard thresholds, Haar and db2.
 *
 * Checks (CPU result as reference): EMP bit-identical (8-bit levels as float,
 * nodata included); W-MCD max |cuda - cpu| / max |cpu| over valid pixels below
 * 1e-5 and masked pixels identical; the CUDA path really ran. Several devices
 * (the rows of the spectral stage and the feature bands shared, the rows
 * exchanged between the devices): identical EMP and W-MCD within 1e-5 of
 * one device, on hyprof_emp/hyprof_wmcd and on the whole `emp`/`wmcd`
 * operations from the input bands (--reduction dwt: the spectral DWT runs in
 * the chain), with two and three shares, and with more shares than feature
 * bands. With one device the shares are all on device 0 (--devices 0,0):
 * the same partition and exchange code runs, through same-device copies.
 * The chains again with a page-locked input and outputs (the copies go
 * straight to and from them instead of through the staging pool). Low
 * device memory (HYPROF_DEVICE_MEMORY): the denoising in groups of two
 * planes through two group buffers that take turns (instead of the whole
 * output on the device), and, with too little memory for one plane,
 * HYPROF_ERR_DEVICE_MEMORY on cuda and the CPU's result on auto.
 *
 * Timing (information only, never asserted): ms per CUDA run of a
 * Pavia Centre-size 1096 x 715 x 4 feature cube (EMP, W-MCD), median of 3
 * after a warm-up, host to host, one device and (if present) two; the last
 * repetition prints the library's per-device stage times (HYPROF_LOG=debug).
 * $HYPROF_TEST_TIMING=0 skips it.
 *
 * Exit 0 when all pass, 1 on any failure (each printed), 77 without a CUDA
 * device (ctest: skipped). */
#define _POSIX_C_SOURCE 200809L
#include "hyprof/hyprof.h"
#include "hyprof/morphology.h"
#include "hyprof/registry.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_test_util.h"

#define REL_TOL 1e-5

/* Smooth field + plateaus + noise per band; `masked` fraction of nodata. */
static int make_features(hyprof_cube_t *c, size_t w, size_t h, size_t bands, uint64_t seed,
                         double masked)
{
    g_rng = seed;
    if (hyprof_cube_alloc(c, HYPROF_FLOAT32, w, h, bands) != HYPROF_OK)
        return -1;
    float *d = c->data;
    for (size_t b = 0; b < bands; b++)
        for (size_t y = 0; y < h; y++)
            for (size_t x = 0; x < w; x++) {
                double v = 50.0 * sin((double)x / (7.0 + b)) * cos((double)y / 5.0) +
                           ((x / 9 + y / 13 + b) % 4) * 30.0 + 12.0 * rng_normal();
                d[(b * h + y) * w + x] = (float)v;
            }
    if (masked > 0.0) {
        c->has_nodata = 1;
        c->nodata = -9999.0;
        for (size_t p = 0; p < w * h; p++)
            if (rng_uniform() < masked)
                for (size_t b = 0; b < bands; b++)
                    d[b * w * h + p] = -9999.0f;
        hyprof_cube_mask_invalid(c);
    }
    return 0;
}

/* A square spiral corridor, 2 pixels wide, of bright pixels on a dark noisy
 * background, starting at a bright blob: erosions remove the corridor but not
 * the blob, and the opening's reconstruction runs from the blob along the
 * whole corridor (across many tiles, back and forth). */
static int make_spiral(hyprof_cube_t *c, size_t s, uint64_t seed)
{
    g_rng = seed;
    if (hyprof_cube_alloc(c, HYPROF_FLOAT32, s, s, 1) != HYPROF_OK)
        return -1;
    float *d = c->data;
    for (size_t p = 0; p < s * s; p++)
        d[p] = (float)(20.0 * rng_uniform());
    for (size_t y = 2; y < 11; y++) /* a blob the SEs fit in, at the start */
        for (size_t x = 2; x < 11; x++)
            d[y * s + x] = 245.0f;
    long x = 2, y = 2, len = (long)s - 5, dir = 0;
    const long dx[4] = {1, 0, -1, 0}, dy[4] = {0, 1, 0, -1};
    while (len > 2) {
        for (long i = 0; i < len; i++) {
            for (long t = 0; t < 2; t++) /* 2 pixels wide */
                d[(size_t)(y + t * (dir % 2 == 0)) * s + (size_t)(x + t * (dir % 2 == 1))] =
                    (float)(200.0 + 40.0 * rng_uniform());
            x += dx[dir];
            y += dy[dir];
        }
        dir = (dir + 1) % 4;
        if (dir % 2 == 0)
            len -= 4;
    }
    return 0;
}

static void compare(const char *what, const hyprof_cube_t *ref, const hyprof_cube_t *got,
                    int exact)
{
    g_checks++;
    if (ref->bands != got->bands || ref->width != got->width || ref->height != got->height) {
        FAIL("%s: shapes differ (%zux%zux%zu vs %zux%zux%zu)", what, ref->width, ref->height,
             ref->bands, got->width, got->height, got->bands);
        return;
    }
    size_t n = ref->width * ref->height, ndiff = 0, worst_b = 0;
    double worst = 0.0;
    const float *r = ref->data, *g = got->data;
    for (size_t b = 0; b < ref->bands; b++) {
        double amax = 0.0, dmax = 0.0;
        for (size_t p = 0; p < n; p++) {
            float u = r[b * n + p], v = g[b * n + p];
            if (!pixel_valid(ref, p)) {
                if (!same_float(u, v))
                    ndiff++;
                continue;
            }
            if (exact && !same_float(u, v))
                ndiff++;
            amax = fabs(u) > amax ? fabs(u) : amax;
            double e = fabs((double)u - (double)v);
            dmax = e > dmax ? e : dmax;
        }
        double rel = amax > 0 ? dmax / amax : dmax;
        if (rel > worst) {
            worst = rel;
            worst_b = b;
        }
    }
    if (ndiff || (!exact && worst > REL_TOL))
        FAIL("%s: %zu values differ; max relative difference %.3g (band %zu)%s", what, ndiff,
             worst, worst_b + 1, exact ? " (must be identical)" : "");
    else
        printf("ok   %s: max relative difference %.3g over %zu bands\n", what, worst,
               ref->bands);
}

typedef struct {
    const char *name;
    size_t w, h, bands;
    double masked;
    int spiral;
    hyprof_se_t se;
    int radii[4];
    size_t nradii;
    const char *wavelet;
    int hard;
    int levels[3]; /* 0: auto */
} case_t;

static const case_t cases[] = {
    {"97x61x3 disk 1,3,5,7 haar soft", 97, 61, 3, 0.0, 0, HYPROF_SE_DISK, {1, 3, 5, 7}, 4,
     "haar", 0, {0, 0, 0}},
    {"200x150x2 masked square 2,4 haar hard", 200, 150, 2, 0.03, 0, HYPROF_SE_SQUARE,
     {2, 4, 0, 0}, 2, "haar", 1, {0, 0, 0}},
    {"131x131 spiral diamond 1,3 db2", 131, 131, 1, 0.0, 1, HYPROF_SE_DIAMOND, {1, 3, 0, 0},
     2, "db2", 0, {1, 2, 4}},
    {"33x64x2 disk 1,2 sym4", 33, 64, 2, 0.0, 0, HYPROF_SE_DISK, {1, 2, 0, 0}, 2, "sym4", 0,
     {1, 1, 2}},
};

static int run_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const case_t *k, int ndev)
{
    hyprof_cube_t in;
    memset(&in, 0, sizeof in);
    int rc = k->spiral ? make_spiral(&in, k->w, 11) : make_features(&in, k->w, k->h, k->bands,
                                                                     (uint64_t)k->w * 131 + k->h,
                                                                     k->masked);
    if (rc) {
        FAIL("%s: cannot build the input", k->name);
        return -1;
    }
    hyprof_wmcd_params_t p;
    hyprof_wmcd_params_default(&p);
    p.emp.se = k->se;
    p.emp.radii = k->radii;
    p.emp.nradii = k->nradii;
    p.wavelet = hyprof_wavelet_find(k->wavelet);
    p.hard = k->hard;
    memcpy(p.levels, k->levels, sizeof p.levels);
    hyprof_cube_t ec, eg, wc, wg;
    char what[256];
    hyprof_status_t s1 = hyprof_emp(cpu, &in, &p.emp, &ec, NULL);
    hyprof_status_t s2 = hyprof_emp(gpu, &in, &p.emp, &eg, NULL);
    if (s1 != HYPROF_OK || s2 != HYPROF_OK) {
        FAIL("%s: emp failed (cpu: %s, cuda: %s)", k->name,
             s1 ? hyprof_ctx_last_error(cpu) : "ok", s2 ? hyprof_ctx_last_error(gpu) : "ok");
    } else if (expect_cuda(gpu, k->name)) {
        snprintf(what, sizeof what, "EMP %s", k->name);
        compare(what, &ec, &eg, 1);
    }
    s1 = hyprof_wmcd(cpu, &in, &p, &wc, NULL, NULL);
    s2 = hyprof_wmcd(gpu, &in, &p, &wg, NULL, NULL);
    if (s1 != HYPROF_OK || s2 != HYPROF_OK) {
        FAIL("%s: wmcd failed (cpu: %s, cuda: %s)", k->name,
             s1 ? hyprof_ctx_last_error(cpu) : "ok", s2 ? hyprof_ctx_last_error(gpu) : "ok");
    } else {
        snprintf(what, sizeof what, "W-MCD %s", k->name);
        compare(what, &wc, &wg, 0);
    }
    if (s2 == HYPROF_OK) {
        static const int two_devices[2] = {0, 1}, one_device[2] = {0, 0};
        hyprof_wmcd_params_t p2 = p;
        p2.emp.devices = ndev >= 2 ? two_devices : one_device;
        p2.emp.ndevices = 2;
        hyprof_cube_t e2, w2;
        if (hyprof_emp(gpu, &in, &p2.emp, &e2, NULL) != HYPROF_OK ||
            hyprof_wmcd(gpu, &in, &p2, &w2, NULL, NULL) != HYPROF_OK) {
            FAIL("%s: two devices failed: %s", k->name, hyprof_ctx_last_error(gpu));
        } else {
            snprintf(what, sizeof what, "EMP 2 shares vs 1 %s", k->name);
            compare(what, &eg, &e2, 1);
            snprintf(what, sizeof what, "W-MCD 2 shares vs 1 %s", k->name);
            compare(what, &wg, &w2, 0);
            hyprof_cube_free(&e2);
            hyprof_cube_free(&w2);
        }
    }
    hyprof_cube_free(&ec);
    hyprof_cube_free(&eg);
    hyprof_cube_free(&wc);
    hyprof_cube_free(&wg);
    hyprof_cube_free(&in);
    return 0;
}

/* ---- the whole operations, from the input bands ------------------------------------- */

/* `op` (emp or wmcd) through the registry with --reduction dwt (the default)
 * and `features`, on `devices` (NULL: the context's device). */
static hyprof_status_t run_op(hyprof_ctx_t *ctx, const char *op, const char *features,
                              const char *devices, const hyprof_cube_t *in, hyprof_result_t *res)
{
    const hyprof_op_t *o = hyprof_op_find(op);
    hyprof_args_t *args = o ? hyprof_args_new(o) : NULL;
    hyprof_result_init(res);
    if (!args)
        return HYPROF_ERR_NOMEM;
    hyprof_status_t st = hyprof_args_set(args, "features", features);
    if (st == HYPROF_OK && devices)
        st = hyprof_args_set(args, "devices", devices);
    if (st != HYPROF_OK)
        printf("  args: %s\n", hyprof_args_error(args));
    if (st == HYPROF_OK)
        st = hyprof_op_run(ctx, o, args, in, res);
    hyprof_args_free(&args);
    return st;
}

/* The same band names and metadata (the quantisation ranges come from the
 * device's pooled statistics on the GPU). */
static void compare_meta(const char *what, const hyprof_result_t *ref,
                         const hyprof_result_t *got)
{
    g_checks++;
    int bad = ref->nmeta != got->nmeta;
    for (size_t i = 0; !bad && i < ref->nmeta; i++)
        if (strcmp(ref->meta_keys[i], got->meta_keys[i]) ||
            strcmp(ref->meta_values[i], got->meta_values[i])) {
            FAIL("%s: metadata %s = %s, expected %s = %s", what, got->meta_keys[i],
                 got->meta_values[i], ref->meta_keys[i], ref->meta_values[i]);
            return;
        }
    for (size_t b = 0; !bad && b < ref->cube.bands; b++)
        bad = strcmp(ref->band_names[b], got->band_names[b]) != 0;
    if (bad)
        FAIL("%s: band names or metadata differ", what);
}

typedef struct {
    const char *name;
    size_t w, h, bands;
    const char *features;
    double masked;
} chain_case_t;

static const chain_case_t chain_cases[] = {
    {"173x119x61 masked, 4 features", 173, 119, 61, "4", 0.03},
    {"64x200x33, 2 features (3 shares: one without bands)", 64, 200, 33, "1", 0.0},
    {"91x47x20, 5 features", 91, 47, 20, "5", 0.01},
};

/* `in` moved into page-locked memory (hyprof_cube_alloc_pinned), mask and
 * nodata included; 0 on success. */
static int pin_cube(hyprof_cube_t *in)
{
    hyprof_cube_t p;
    if (hyprof_cube_alloc_pinned(&p, in->dtype, in->width, in->height, in->bands) != HYPROF_OK)
        return -1;
    if (!(p.owns & HYPROF_OWNS_PINNED)) {
        hyprof_cube_free(&p);
        return -1;
    }
    memcpy(p.data, in->data, in->width * in->height * in->bands * hyprof_dtype_size(in->dtype));
    if (in->mask) {
        if (hyprof_cube_alloc_mask(&p) != HYPROF_OK) {
            hyprof_cube_free(&p);
            return -1;
        }
        for (size_t y = 0; y < in->height; y++)
            memcpy(p.mask + y * p.mask_stride_y, in->mask + y * in->mask_stride_y, in->width);
    }
    p.nodata = in->nodata;
    p.has_nodata = in->has_nodata;
    hyprof_cube_free(in);
    *in = p;
    return 0;
}

/* pinned: the input page-locked and the outputs from the page-locked cache
 * (the copies go straight to and from them), checked against the CPU and
 * the pageable runs alike. */
static void run_chain_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const chain_case_t *k,
                           const char *const *multi, size_t nmulti, int pinned)
{
    hyprof_cube_t in;
    if (make_features(&in, k->w, k->h, k->bands, (uint64_t)k->bands * 7 + k->w, k->masked)) {
        FAIL("%s: cannot build the input", k->name);
        return;
    }
    if (pinned && pin_cube(&in)) {
        FAIL("%s: cannot page-lock the input", k->name);
        hyprof_cube_free(&in);
        return;
    }
    if (pinned)
        hyprof_pinned_cache_set((size_t)1 << 30);
    static const char *const ops[2] = {"emp", "wmcd"};
    char what[256];
    for (int oi = 0; oi < 2; oi++) {
        hyprof_result_t rc, rg;
        hyprof_status_t s1 = run_op(cpu, ops[oi], k->features, NULL, &in, &rc);
        hyprof_status_t s2 = run_op(gpu, ops[oi], k->features, NULL, &in, &rg);
        if (s1 != HYPROF_OK || s2 != HYPROF_OK) {
            FAIL("%s %s: failed (cpu: %s, cuda: %s)", ops[oi], k->name,
                 s1 ? hyprof_ctx_last_error(cpu) : "ok", s2 ? hyprof_ctx_last_error(gpu) : "ok");
        } else if (expect_cuda(gpu, k->name)) {
            g_checks++;
            if (pinned && !(rg.cube.owns & HYPROF_OWNS_PINNED))
                FAIL("%s %s: the output is not page-locked with the cache on", ops[oi], k->name);
            snprintf(what, sizeof what, "%s chain CUDA vs CPU %s", ops[oi], k->name);
            compare(what, &rc.cube, &rg.cube, oi == 0);
            compare_meta(what, &rc, &rg);
            for (size_t d = 0; d < nmulti; d++) {
                hyprof_result_t rm;
                if (run_op(gpu, ops[oi], k->features, multi[d], &in, &rm) != HYPROF_OK) {
                    FAIL("%s %s --devices %s: %s", ops[oi], k->name, multi[d],
                         hyprof_ctx_last_error(gpu));
                } else {
                    snprintf(what, sizeof what, "%s chain --devices %s vs one %s", ops[oi],
                             multi[d], k->name);
                    compare(what, &rg.cube, &rm.cube, oi == 0);
                    compare_meta(what, &rg, &rm);
                }
                if (pinned && rm.cube.data) /* the next run's output gets this garbage */
                    memset(rm.cube.data, 0xff, rm.cube.width * rm.cube.height * rm.cube.bands *
                                                   sizeof(float));
                hyprof_result_free(&rm);
            }
        }
        hyprof_result_free(&rc);
        hyprof_result_free(&rg);
    }
    hyprof_cube_free(&in);
    if (pinned) {
        g_checks++;
        if (hyprof_pinned_cache_bytes() == 0)
            FAIL("%s: the freed page-locked cubes did not stay in the cache", k->name);
        hyprof_pinned_cache_set(0);
        if (hyprof_pinned_cache_bytes() != 0)
            FAIL("%s: the cache kept %zu bytes at limit 0", k->name, hyprof_pinned_cache_bytes());
    }
}

/* Low device memory (HYPROF_DEVICE_MEMORY caps what the chain plans with).
 * cases[0] is 97 x 61, 3 bands, 4 radii: 27 planes of 354,624 bytes of
 * denoising work each. With 64 MiB + 1.8 MB the budget is 1.8 MB (the free
 * memory less its 64 MiB margin), half of it holds two planes: groups of
 * two, through two group buffers that take turns, since the whole float
 * output does not fit beside them. With 64 MiB the budget is 0: not one
 * plane fits, cuda fails with HYPROF_ERR_DEVICE_MEMORY and auto falls back
 * to the CPU. */
static void low_memory(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, int ndev)
{
    printf("low device memory (HYPROF_DEVICE_MEMORY):\n");
    setenv("HYPROF_DEVICE_MEMORY", "68908864", 1);
    run_case(cpu, gpu, &cases[0], ndev);
    setenv("HYPROF_DEVICE_MEMORY", "64M", 1);
    hyprof_cube_t in, ref, out;
    hyprof_wmcd_params_t p;
    hyprof_wmcd_params_default(&p);
    if (make_features(&in, 97, 61, 3, 7, 0.0)) {
        FAIL("low memory: cannot build the input");
        unsetenv("HYPROF_DEVICE_MEMORY");
        return;
    }
    g_checks++;
    hyprof_status_t st = hyprof_wmcd(gpu, &in, &p, &out, NULL, NULL);
    if (st != HYPROF_ERR_DEVICE_MEMORY)
        FAIL("W-MCD in 64 MiB on cuda: expected HYPROF_ERR_DEVICE_MEMORY, got %s",
             hyprof_status_text(st));
    else
        printf("ok   W-MCD in 64 MiB on cuda: %s\n", hyprof_ctx_last_error(gpu));
    if (st == HYPROF_OK)
        hyprof_cube_free(&out);
    /* auto (HYPROF_BACKEND, when set, replaces it: then there is no fallback) */
    hyprof_ctx_t *aut = getenv("HYPROF_BACKEND") ? NULL : hyprof_ctx_new();
    if (!aut) {
        printf("skip W-MCD in 64 MiB on auto: HYPROF_BACKEND is set\n");
    } else if (hyprof_wmcd(aut, &in, &p, &out, NULL, NULL) != HYPROF_OK) {
        FAIL("W-MCD in 64 MiB on auto: %s", hyprof_ctx_last_error(aut));
    } else {
        g_checks++;
        if (hyprof_ctx_used_backend(aut) != HYPROF_BACKEND_CPU)
            FAIL("W-MCD in 64 MiB on auto: ran on %s, not on the CPU",
                 hyprof_backend_name(hyprof_ctx_used_backend(aut)));
        if (hyprof_wmcd(cpu, &in, &p, &ref, NULL, NULL) != HYPROF_OK) {
            FAIL("W-MCD on the CPU: %s", hyprof_ctx_last_error(cpu));
        } else {
            compare("W-MCD in 64 MiB on auto vs CPU", &ref, &out, 1);
            hyprof_cube_free(&ref);
        }
        hyprof_cube_free(&out);
    }
    hyprof_ctx_free(&aut);
    hyprof_cube_free(&in);
    unsetenv("HYPROF_DEVICE_MEMORY");
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The library's stage lines (HYPROF_LOG=debug: stage times per device). */
static void print_log(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    printf("  %s\n", message);
}

static void timing(hyprof_ctx_t *gpu, int ndev)
{
    hyprof_cube_t in;
    if (make_features(&in, 1096, 715, 4, 5, 0.0)) {
        FAIL("timing: cannot build the input");
        return;
    }
    static const int two[2] = {0, 1};
    for (int nd = 1; nd <= (ndev >= 2 ? 2 : 1); nd++) {
        hyprof_wmcd_params_t p;
        hyprof_wmcd_params_default(&p);
        if (nd == 2) {
            p.emp.devices = two;
            p.emp.ndevices = 2;
        }
        for (int which = 0; which < 2; which++) {
            double t[4];
            for (int i = 0; i < 4; i++) {
                hyprof_cube_t out;
                if (i == 3) { /* the last repetition traces its stages */
                    setenv("HYPROF_LOG", "debug", 1);
                    hyprof_ctx_set_log(gpu, print_log, NULL);
                }
                double t0 = now_ms();
                hyprof_status_t st = which ? hyprof_wmcd(gpu, &in, &p, &out, NULL, NULL)
                                           : hyprof_emp(gpu, &in, &p.emp, &out, NULL);
                t[i] = now_ms() - t0;
                if (i == 3) {
                    unsetenv("HYPROF_LOG");
                    hyprof_ctx_set_log(gpu, NULL, NULL);
                }
                if (st != HYPROF_OK) {
                    FAIL("timing: %s", hyprof_ctx_last_error(gpu));
                    hyprof_cube_free(&in);
                    return;
                }
                hyprof_cube_free(&out);
            }
            qsort(t + 1, 3, sizeof *t, cmp_d);
            printf("time %s 1096x715x4 (Pavia Centre size, 4 features, disk 1,3,5,7%s), %d "
                   "GPU%s: %.1f ms host to host (median of 3)\n",
                   which ? "W-MCD" : "EMP", which ? ", haar, auto levels" : "", nd,
                   nd > 1 ? "s" : "", t[2]);
        }
    }
    hyprof_cube_free(&in);
}

int main(void)
{
    int ndev = hyprof_cuda_device_count();
    if (ndev <= 0) {
        printf("no CUDA device: skipped\n");
        return SKIP_CODE;
    }
    hyprof_ctx_t *cpu = hyprof_ctx_new(), *gpu = hyprof_ctx_new();
    hyprof_ctx_set_backend(cpu, HYPROF_BACKEND_CPU);
    hyprof_ctx_set_backend(gpu, HYPROF_BACKEND_CUDA);
    /* several shares: on two devices when there are, else all on device 0 */
    static const char *const multi2[2] = {"0,1", "0,1,0"}, *const multi1[2] = {"0,0", "0,0,0"};
    const char *const *multi = ndev >= 2 ? multi2 : multi1;
    printf("%d CUDA device(s): the several-share checks run with --devices %s and %s%s\n", ndev,
           multi[0], multi[1], ndev < 2 ? " (one device: every share on device 0)" : "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(cpu, gpu, &cases[i], ndev);
    for (size_t i = 0; i < sizeof chain_cases / sizeof chain_cases[0]; i++)
        run_chain_case(cpu, gpu, &chain_cases[i], multi, 2, 0);
    printf("page-locked input and outputs (hyprof_cube_alloc_pinned, hyprof_pinned_cache_set):\n");
    for (size_t i = 0; i < sizeof chain_cases / sizeof chain_cases[0]; i++)
        run_chain_case(cpu, gpu, &chain_cases[i], multi, 2, 1);
    low_memory(cpu, gpu, ndev);
    const char *tm = getenv("HYPROF_TEST_TIMING");
    if (!tm || strcmp(tm, "0") != 0)
        timing(gpu, ndev);
    printf("%d checks, %d failed\n", g_checks, g_failures);
    hyprof_ctx_free(&cpu);
    hyprof_ctx_free(&gpu);
    return g_failures ? 1 : 0;
}
