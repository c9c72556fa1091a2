/* CPU / CUDA parity of the unmixing chain, through the public API only:
 * hyprof_abundances (FCLS, NNLS, UCLS; p = 3, 5, 12, 31) and the sspp and unmix
 * operations run through the registry.
 *
 *   test_gpu_unmix
 *
 * Seeded synthetic scenes: p smooth positive spectra mixed by smooth
 * simplex abundances, plus noise; odd sizes; 3 % masked pixels with a nodata
 * value in one scene.
 *
 * Checks (CPU result as reference):
 *   - abundances: max |cuda - cpu| over valid pixels below 1e-5, RMSE band
 *     relative 1e-5; masked pixels nodata on both;
 *   - sspp (also on integer-valued copies, whose K-means centre sums are
 *     exact): clusters identical, homogeneity identical bit for bit (same
 *     arithmetic, no FMA), K-means inertia relative 1e-12, the same initial
 *     pixels; purity within 1e-4 and at most max(2, 1 %) candidates differing
 *     (purity rests on PCA, whose eigenvectors cuSOLVER and LAPACK give to
 *     rounding only: near-equal noise eigenvalues can tilt the last component);
 *   - unmix: the same endmember pixels (with --sspp: unless the candidates
 *     differed, which is then reported), abundances within 1e-5;
 *   - the same under a device-memory cap ($HYPROF_DEVICE_MEMORY: a budget of
 *     half the cube) that leaves no room for the chain's device copy: each
 *     step uploads its own, the purity step fits with the library's PCA (its
 *     streamed path), the abundances stream in chunks;
 *   - p = 40 > 32 with backend cuda: HYPROF_ERR_DEVICE_MEMORY (auto falls back);
 *   - the CUDA path really ran.
 * Timing (information only): ms of hyprof_abundances FCLS on a 614 x 512 x 224
 * scene with p = 31 on each backend ($HYPROF_TEST_TIMING=0 skips it).
 *
 * Exit 0 when all pass, 1 on any failure (each printed), 77 without a device. */
#define _POSIX_C_SOURCE 200809L
#include "hyprof/hyprof.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_test_util.h"

/* A w x h x B scene of p endmembers; masked pixels hold -9999 (nodata). */
static int make_scene(hyprof_cube_t *c, size_t w, size_t h, size_t B, size_t p, uint64_t seed,
                      double masked)
{
    g_rng = seed;
    if (hyprof_cube_alloc(c, HYPROF_FLOAT32, w, h, B) != HYPROF_OK)
        return -1;
    double *E = malloc(p * B * sizeof *E), *ph = malloc(p * 4 * sizeof *ph), *a = malloc(p * sizeof *a);
    for (size_t k = 0; k < p; k++) {
        double f = 1 + 5 * rng_uniform(), o = 6.283 * rng_uniform(), base = 200 + 800 * rng_uniform();
        for (size_t b = 0; b < B; b++)
            E[k * B + b] = base * (1.2 + sin(f * (double)b / (double)B * 3.1416 + o));
        for (int t = 0; t < 4; t++)
            ph[k * 4 + t] = 6.283 * rng_uniform();
    }
    float *x = c->data;
    for (size_t y = 0; y < h; y++)
        for (size_t xx = 0; xx < w; xx++) {
            double s = 0.0;
            for (size_t k = 0; k < p; k++) {
                double g = sin(0.11 * xx + ph[k * 4]) + cos(0.07 * y + ph[k * 4 + 1]) +
                           sin(0.05 * (xx + y) + ph[k * 4 + 2]);
                a[k] = exp(3.0 * g);
                s += a[k];
            }
            for (size_t b = 0; b < B; b++) {
                double v = 0.0;
                for (size_t k = 0; k < p; k++)
                    v += E[k * B + b] * a[k] / s;
                x[b * w * h + y * w + xx] = (float)(v + 5.0 * rng_normal());
            }
        }
    if (masked > 0) {
        c->nodata = -9999;
        c->has_nodata = 1;
        for (size_t i = 0; i < w * h; i++)
            if (rng_uniform() < masked)
                for (size_t b = 0; b < B; b++)
                    x[b * w * h + i] = -9999.0f;
        hyprof_cube_mask_invalid(c);
    }
    free(E);
    free(ph);
    free(a);
    return 0;
}

/* A copy of c with every value rounded to an integer (the nodata value stays):
 * the K-means centre sums are then exact in any order. */
static int round_scene(const hyprof_cube_t *c, hyprof_cube_t *r)
{
    if (hyprof_cube_alloc(r, HYPROF_FLOAT32, c->width, c->height, c->bands) != HYPROF_OK)
        return -1;
    size_t n = c->width * c->height * c->bands;
    for (size_t i = 0; i < n; i++)
        ((float *)r->data)[i] = rintf(((const float *)c->data)[i]);
    if (c->has_nodata) {
        r->nodata = c->nodata;
        r->has_nodata = 1;
        hyprof_cube_mask_invalid(r);
    }
    return 0;
}

static hyprof_endmembers_t *random_set(const hyprof_cube_t *c, size_t p, uint64_t seed)
{
    hyprof_endmembers_t *em = NULL;
    if (hyprof_endmembers_new(c->bands, p, &em) != HYPROF_OK)
        return NULL;
    g_rng = seed;
    size_t n = c->width * c->height;
    for (size_t k = 0; k < p; k++) { /* pixels of the scene, so the fits are realistic */
        size_t px = (size_t)(rng_uniform() * (double)n);
        while (!pixel_valid(c, px))
            px = (px + 1) % n;
        for (size_t b = 0; b < c->bands; b++)
            em->spectra[k * c->bands + b] = ((float *)c->data)[b * n + px] * (0.9 + 0.2 * rng_uniform());
    }
    return em;
}

/* max |a - b| over valid pixels of bands [b0, b1); relative to max |a| when rel. */
static double band_diff(const hyprof_cube_t *ref, const hyprof_cube_t *a, const hyprof_cube_t *b,
                        size_t b0, size_t b1, int rel, int *nodata_mismatch)
{
    size_t n = a->width * a->height;
    double d = 0.0, m = 0.0;
    const float *x = a->data, *y = b->data;
    for (size_t k = b0; k < b1; k++)
        for (size_t i = 0; i < n; i++) {
            if (!pixel_valid(ref, i)) {
                *nodata_mismatch += !same_float(x[k * n + i], y[k * n + i]);
                continue;
            }
            double t = fabs((double)x[k * n + i] - y[k * n + i]);
            d = t > d ? t : d;
            m = fabs(x[k * n + i]) > m ? fabs(x[k * n + i]) : m;
        }
    return rel && m > 0 ? d / m : d;
}

static void test_abundances(const char *label, const hyprof_cube_t *c, size_t p,
                            hyprof_ctx_t *cpu, hyprof_ctx_t *gpu)
{
    hyprof_endmembers_t *em = random_set(c, p, 1000 + p);
    static const char *names[] = {"fcls", "nnls", "ucls"};
    for (int m = 0; em && m < 3; m++) {
        hyprof_cube_t a, b;
        g_checks++;
        hyprof_status_t s1 = hyprof_abundances(cpu, em, c, (hyprof_abundance_method_t)m, &a);
        hyprof_status_t s2 = hyprof_abundances(gpu, em, c, (hyprof_abundance_method_t)m, &b);
        if (s1 != HYPROF_OK || s2 != HYPROF_OK) {
            FAIL("%s p=%zu %s: cpu %s / cuda %s (%s)", label, p, names[m], hyprof_status_text(s1),
                 hyprof_status_text(s2), hyprof_ctx_last_error(gpu));
            hyprof_cube_free(&a);
            hyprof_cube_free(&b);
            continue;
        }
        expect_cuda(gpu, "abundances");
        int nd = 0;
        double da = band_diff(c, &a, &b, 0, p, 0, &nd), dr = band_diff(c, &a, &b, p, p + 1, 1, &nd);
        /* UCLS with collinear random spectra can be ill-conditioned: relative there. */
        double tol = m == 2 ? 1e-4 : 1e-5;
        printf("%s p=%zu %s: max |abundance diff| %.3g, RMSE rel diff %.3g, nodata mismatches %d\n",
               label, p, names[m], da, dr, nd);
        g_checks++;
        if (da > tol || dr > 1e-5 || nd)
            FAIL("%s p=%zu %s: abundance diff %.3g (tol %.0e), RMSE rel %.3g, nodata %d", label,
                 p, names[m], da, tol, dr, nd);
        hyprof_cube_free(&a);
        hyprof_cube_free(&b);
    }
    hyprof_endmembers_free(&em);
}

static const char *meta(const hyprof_result_t *r, const char *key)
{
    for (size_t i = 0; i < r->nmeta; i++)
        if (strcmp(r->meta_keys[i], key) == 0)
            return r->meta_values[i];
    return "";
}

static hyprof_status_t run_op(hyprof_ctx_t *ctx, const char *op, const char *const *kv,
                              const hyprof_cube_t *c, hyprof_result_t *res)
{
    const hyprof_op_t *o = hyprof_op_find(op);
    hyprof_args_t *args = hyprof_args_new(o);
    for (; kv && kv[0]; kv += 2)
        hyprof_args_set(args, kv[0], kv[1]);
    hyprof_result_init(res);
    hyprof_status_t st = hyprof_op_run(ctx, o, args, c, res);
    hyprof_args_free(&args);
    return st;
}

/* Number of pixels whose band b differs between two results. */
static size_t count_diff(const hyprof_cube_t *a, const hyprof_cube_t *b, size_t band)
{
    size_t n = a->width * a->height, k = 0;
    const float *x = (const float *)a->data + band * n, *y = (const float *)b->data + band * n;
    for (size_t i = 0; i < n; i++)
        k += !same_float(x[i], y[i]);
    return k;
}

/* Runs sspp on both backends; returns how many candidates differ (or -1). */
static long test_sspp(const char *label, const hyprof_cube_t *c, const char *p,
                      const char *per_cluster, hyprof_ctx_t *cpu, hyprof_ctx_t *gpu)
{
    const char *kv[] = {"endmembers", p, "candidates-per-cluster", per_cluster, NULL};
    hyprof_result_t a, b;
    long cand = -1;
    g_checks++;
    hyprof_status_t s1 = run_op(cpu, "sspp", kv, c, &a), s2 = run_op(gpu, "sspp", kv, c, &b);
    if (s1 != HYPROF_OK || s2 != HYPROF_OK) {
        FAIL("%s sspp: cpu %s / cuda %s (%s)", label, hyprof_status_text(s1),
             hyprof_status_text(s2), hyprof_ctx_last_error(gpu));
    } else {
        expect_cuda(gpu, "sspp");
        int nd = 0;
        double dh = band_diff(c, &a.cube, &b.cube, 1, 2, 0, &nd);
        double dp = band_diff(c, &a.cube, &b.cube, 2, 3, 0, &nd);
        double dk = band_diff(c, &a.cube, &b.cube, 3, 4, 0, &nd);
        size_t ncand = (size_t)atol(meta(&a, "SSPP_CANDIDATES"));
        cand = (long)count_diff(&a.cube, &b.cube, 0);
        double ia = atof(meta(&a, "KMEANS_INERTIA")), ib = atof(meta(&b, "KMEANS_INERTIA"));
        printf("%s sspp p=%s: %ld of %zu candidates differ, homogeneity diff %.3g, purity "
               "%.3g, cluster diff %g, inertia %.17g / %.17g, init %s / %s, iterations %s / %s\n",
               label, p, cand, ncand, dh, dp, dk, ia, ib, meta(&a, "KMEANS_INIT_PIXELS"),
               meta(&b, "KMEANS_INIT_PIXELS"), meta(&a, "KMEANS_ITERATIONS"),
               meta(&b, "KMEANS_ITERATIONS"));
        size_t allowed = ncand / 100 > 2 ? ncand / 100 : 2;
        g_checks++;
        if ((size_t)cand > allowed || dh != 0 || dp > 1e-4 || dk != 0 || nd ||
            fabs(ia - ib) > 1e-12 * fabs(ia) ||
            strcmp(meta(&a, "KMEANS_INIT_PIXELS"), meta(&b, "KMEANS_INIT_PIXELS")))
            FAIL("%s sspp: the backends differ (see the line above; nodata mismatches %d)", label,
                 nd);
    }
    hyprof_result_free(&a);
    hyprof_result_free(&b);
    return cand;
}

static void test_unmix(const char *label, const hyprof_cube_t *c, const char *p,
                       const char *extract, int sspp, hyprof_ctx_t *cpu, hyprof_ctx_t *gpu)
{
    const char *kv[] = {"endmembers", p, "sspp", sspp ? "true" : "false",
                        "candidates-per-cluster", "40", "extract", extract, NULL};
    long cand_diff = sspp ? test_sspp(label, c, p, "40", cpu, gpu) : 0;
    hyprof_result_t a, b;
    g_checks++;
    hyprof_status_t s1 = run_op(cpu, "unmix", kv, c, &a), s2 = run_op(gpu, "unmix", kv, c, &b);
    if (s1 != HYPROF_OK || s2 != HYPROF_OK) {
        FAIL("%s unmix: cpu %s / cuda %s (%s)", label, hyprof_status_text(s1),
             hyprof_status_text(s2), hyprof_ctx_last_error(gpu));
    } else {
        expect_cuda(gpu, "unmix");
        int nd = 0;
        size_t np = a.cube.bands - 1;
        double da = band_diff(c, &a.cube, &b.cube, 0, np, 0, &nd);
        const char *pa = meta(&a, "UNMIX_ENDMEMBER_PIXELS"), *pb = meta(&b, "UNMIX_ENDMEMBER_PIXELS");
        int same = strcmp(pa, pb) == 0;
        printf("%s unmix%s --extract %s p=%s: endmember pixels %s / %s, max |abundance "
               "diff| %.3g; cuda %s\n", label, sspp ? " --sspp" : "", extract, p, pa, pb, da,
               meta(&b, "UNMIX_SECONDS"));
        g_checks++;
        if (!same && cand_diff > 0)
            printf("%s unmix: other endmembers, explained by %ld differing SSPP candidate(s)\n",
                   label, cand_diff);
        else if (!same || da > 1e-5 || nd)
            FAIL("%s unmix %s: endmembers or abundances differ (nodata mismatches %d)", label,
                 extract, nd);
    }
    hyprof_result_free(&a);
    hyprof_result_free(&b);
}

/* $HYPROF_DEVICE_MEMORY such that the device-memory budget (the cap less a
 * 64 MiB margin below 1.25 GiB) is half the cube c: too small for the
 * unmixing chain to keep it on the device. */
static void set_half_cube_cap(const hyprof_cube_t *c)
{
    char buf[32];
    size_t bytes = c->width * c->height * c->bands * sizeof(float);
    snprintf(buf, sizeof buf, "%zu", ((size_t)64 << 20) + bytes / 2);
    setenv("HYPROF_DEVICE_MEMORY", buf, 1);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void timing(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu)
{
    const char *t = getenv("HYPROF_TEST_TIMING");
    if (t && strcmp(t, "0") == 0)
        return;
    hyprof_cube_t c;
    if (make_scene(&c, 614, 512, 224, 31, 99, 0.0))
        return;
    hyprof_endmembers_t *em = random_set(&c, 31, 5);
    hyprof_cube_t out;
    for (int k = 0; k < 2; k++) {
        hyprof_ctx_t *ctx = k ? gpu : cpu;
        double best = 1e30;
        for (int r = 0; r < (k ? 4 : 1); r++) {
            double t0 = now_ms();
            if (hyprof_abundances(ctx, em, &c, HYPROF_ABUNDANCE_FCLS, &out) == HYPROF_OK) {
                double dt = now_ms() - t0;
                best = dt < best ? dt : best;
                hyprof_cube_free(&out);
            }
        }
        printf("timing: FCLS abundances 614x512x224, p=31, %s: %.1f ms\n", k ? "cuda" : "cpu",
               best);
    }
    hyprof_endmembers_free(&em);
    hyprof_cube_free(&c);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (hyprof_cuda_device_count() <= 0) {
        printf("test_gpu_unmix: no CUDA device (or a CPU-only build): skipped\n");
        return SKIP_CODE;
    }
    hyprof_ctx_t *cpu = hyprof_ctx_new(), *gpu = hyprof_ctx_new();
    hyprof_ctx_set_backend(cpu, HYPROF_BACKEND_CPU);
    hyprof_ctx_set_backend(gpu, HYPROF_BACKEND_CUDA);

    hyprof_cube_t s1, s2;
    if (make_scene(&s1, 97, 83, 60, 5, 1, 0.03) || make_scene(&s2, 200, 150, 120, 12, 2, 0.0)) {
        printf("FAIL: cannot build the scenes\n");
        return 1;
    }
    test_abundances("97x83x60-masked", &s1, 3, cpu, gpu);
    test_abundances("97x83x60-masked", &s1, 5, cpu, gpu);
    test_abundances("200x150x120", &s2, 12, cpu, gpu);
    test_abundances("200x150x120", &s2, 31, cpu, gpu);
    test_sspp("97x83x60-masked", &s1, "5", "25", cpu, gpu);
    test_sspp("200x150x120", &s2, "12", "25", cpu, gpu);
    /* Integer-valued scenes: exact centre sums, which the CUDA K-means moves
     * with the changed labels after its first update. */
    hyprof_cube_t i1, i2;
    if (round_scene(&s1, &i1) || round_scene(&s2, &i2)) {
        printf("FAIL: cannot build the integer scenes\n");
        return 1;
    }
    test_sspp("97x83x60-masked-integer", &i1, "5", "25", cpu, gpu);
    test_sspp("200x150x120-integer", &i2, "31", "25", cpu, gpu);
    hyprof_cube_free(&i1);
    hyprof_cube_free(&i2);
    /* The paths outside the chain's device copy: a budget of half the cube
     * (each step uploads its own, the library's PCA streams the cube, the
     * abundances stream in chunks). */
    set_half_cube_cap(&s1);
    test_sspp("97x83x60-masked-nonresident", &s1, "5", "25", cpu, gpu);
    set_half_cube_cap(&s2);
    test_unmix("200x150x120-nonresident", &s2, "12", "nfindr", 1, cpu, gpu);
    unsetenv("HYPROF_DEVICE_MEMORY");
    test_unmix("97x83x60-masked", &s1, "5", "nfindr", 0, cpu, gpu);
    test_unmix("97x83x60-masked", &s1, "5", "nfindr", 1, cpu, gpu);
    test_unmix("200x150x120", &s2, "12", "vca", 1, cpu, gpu);
    test_unmix("200x150x120", &s2, "12", "atgp", 1, cpu, gpu);
    test_unmix("200x150x120", &s2, "12", "nfindr", 0, cpu, gpu);

    /* More endmembers than the CUDA solver holds: refused with cuda, CPU with auto. */
    hyprof_endmembers_t *em = random_set(&s2, 40, 7);
    hyprof_cube_t out;
    g_checks++;
    hyprof_status_t st = hyprof_abundances(gpu, em, &s2, HYPROF_ABUNDANCE_FCLS, &out);
    if (st != HYPROF_ERR_DEVICE_MEMORY)
        FAIL("p=40 on cuda: expected HYPROF_ERR_DEVICE_MEMORY, got %s", hyprof_status_text(st));
    hyprof_cube_free(&out);
    hyprof_ctx_t *autoc = hyprof_ctx_new();
    g_checks++;
    st = hyprof_abundances(autoc, em, &s2, HYPROF_ABUNDANCE_FCLS, &out);
    if (st != HYPROF_OK || hyprof_ctx_used_backend(autoc) != HYPROF_BACKEND_CPU)
        FAIL("p=40 on auto: expected a CPU fallback, got %s on %s", hyprof_status_text(st),
             hyprof_backend_name(hyprof_ctx_used_backend(autoc)));
    hyprof_cube_free(&out);
    hyprof_endmembers_free(&em);
    hyprof_ctx_free(&autoc);

    timing(cpu, gpu);
    hyprof_cube_free(&s1);
    hyprof_cube_free(&s2);
    hyprof_ctx_free(&cpu);
    hyprof_ctx_free(&gpu);
    printf("test_gpu_unmix: %d checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
