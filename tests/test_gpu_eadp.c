/* CPU / CUDA parity of EADP (hyprof_eadp), through the public API only.
 *
 *   test_gpu_eadp [RAW W H B]
 *
 * Seeded synthetic images (smooth field + step edges + noise; odd sizes, a
 * 1-pixel-wide line, 3 % masked pixels with a nodata value and with NaN under
 * the mask, a constant band, g1/g2/g3, a given contrast, other percentiles,
 * a smoothing radius above prep_kernel's, the default times 65..520 with 1
 * and 3 cycles, irregular times) and, optionally, the first 3 bands of a
 * real cube given as raw float32 BSQ (RAW, width W, height H, bands B).
 *
 * Checks (the CPU's double result as reference): for every output band, max
 * |cuda - cpu| / max |cpu| over valid pixels below 1e-4 for the default CUDA
 * run (FED in float: DESIGN.md's bound for a float path) and below 1e-6 with
 * precision double; the contrast k relative 1e-9; masked pixels identical
 * (nodata) on both backends; the CUDA path really ran. The fallbacks must
 * give results bit-identical to the default run of the same precision:
 * smaller band groups and fewer output slots (device memory capped with
 * $HYPROF_DEVICE_MEMORY at the smallest caps that give 1 band a group and 1
 * slot, 1 band and 2 slots, 2 bands and 2 slots, found by bisection on the
 * plan's debug line); and on a cube large enough for fed_tma_kernel on sm_90
 * (1905 x 349 x 7), its first band alone (fed_shfl_kernel: too few regions
 * per CTA), bands being independent. On sm_80 both runs take fed_shfl_kernel:
 * the copy-engine kernel is covered only where the device is sm_90 or later.
 * Images too tall for the fused FED grids (one plain step a launch, and the
 * smoothing in three kernels) are checked against the CPU. A cancelled run
 * must return HYPROF_ERR_CANCELLED. The eadp operation (PCA to 7
 * components, then the profile), whose CUDA path hands the PCs from the PCA
 * to the diffusion on the device, must equal the two public calls
 * (hyprof_pca_fit_transform, hyprof_eadp) bit for bit, masked cubes included.
 *
 * Timing (information only, never asserted): ms per CUDA run of a 1905 x 349 x 7
 * synthetic cube with the default parameters, median of 5 after a warm-up (and of
 * 3 with precision double), host to host (upload, diffusion, download of the
 * 63 profile bands), each followed by the library's device stage times and
 * FED bandwidth (its CUDA events, from the debug log). $HYPROF_TEST_TIMING=0
 * skips it.
 *
 * Exit 0 when all pass, 1 on any failure (each printed), 77 when there is no
 * CUDA device (ctest: skipped). */
#define _POSIX_C_SOURCE 200809L
#include "hyprof/hyprof.h"
#include "hyprof/diffusion.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_test_util.h"

#define REL_TOL 1e-6   /* FED in double */
#define FLOAT_TOL 1e-4 /* FED in float (the default): DESIGN.md's bound */
#define K_TOL 1e-9

/* ---- synthetic images -------------------------------------------------------- */

typedef struct {
    double masked;    /* fraction of masked pixels */
    int nan_under;    /* masked pixels hold NaN and the cube has no nodata value */
    int const_band;   /* index of a constant band, or -1 */
} image_opts_t;

/* Each band: a smooth field, a few rectangles and a disk with sharp edges,
 * Gaussian noise; scales decrease with the band index, like principal
 * components. Masked pixels are nodata (-9999) or NaN. */
static int make_image(hyprof_cube_t *cube, size_t w, size_t h, size_t bands, uint64_t seed,
                      const image_opts_t *o)
{
    g_rng = seed;
    if (hyprof_cube_alloc(cube, HYPROF_FLOAT32, w, h, bands) != HYPROF_OK)
        return -1;
    size_t npix = w * h;
    float *x = (float *)cube->data;
    for (size_t b = 0; b < bands; b++) {
        float *xb = x + b * npix;
        if ((int)b == o->const_band) {
            for (size_t p = 0; p < npix; p++)
                xb[p] = 123.25f;
            continue;
        }
        double scale = 1000.0 / pow(2.2, (double)b);
        double fx = 0.02 + 0.1 * rng_uniform(), fy = 0.02 + 0.1 * rng_uniform();
        double ph = 6.283185307179586 * rng_uniform();
        double rect[4][5];
        for (int k = 0; k < 4; k++) {
            rect[k][0] = rng_uniform() * (double)w;
            rect[k][1] = rng_uniform() * (double)h;
            rect[k][2] = rect[k][0] + (0.1 + 0.4 * rng_uniform()) * (double)w;
            rect[k][3] = rect[k][1] + (0.1 + 0.4 * rng_uniform()) * (double)h;
            rect[k][4] = (rng_uniform() - 0.5) * scale;
        }
        double cx = rng_uniform() * (double)w, cy = rng_uniform() * (double)h;
        double rad = (0.1 + 0.2 * rng_uniform()) * (double)(w < h ? w : h) + 1.0;
        double disk = (rng_uniform() - 0.5) * scale, noise = 0.02 * scale;
        for (size_t y = 0; y < h; y++)
            for (size_t xx = 0; xx < w; xx++) {
                double v = 0.3 * scale * sin(fx * (double)xx + ph) * cos(fy * (double)y);
                for (int k = 0; k < 4; k++)
                    if ((double)xx >= rect[k][0] && (double)xx < rect[k][2] &&
                        (double)y >= rect[k][1] && (double)y < rect[k][3])
                        v += rect[k][4];
                double dx = (double)xx - cx, dy = (double)y - cy;
                if (dx * dx + dy * dy < rad * rad)
                    v += disk;
                v += noise * rng_normal();
                xb[y * w + xx] = (float)v;
            }
    }
    if (o->masked > 0.0) {
        if (hyprof_cube_alloc_mask(cube) != HYPROF_OK)
            return -1;
        if (!o->nan_under) {
            cube->nodata = -9999.0;
            cube->has_nodata = 1;
        }
        for (size_t y = 0; y < h; y++)
            for (size_t xx = 0; xx < w; xx++)
                if (rng_uniform() < o->masked) {
                    cube->mask[(ptrdiff_t)y * cube->mask_stride_y + (ptrdiff_t)xx] = 0;
                    for (size_t b = 0; b < bands; b++)
                        x[y * w + xx + b * npix] = o->nan_under ? NAN : -9999.0f;
                }
    }
    return 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- the plan of a CUDA run ------------------------------------------------------ */

/* From the last run's plan line ("eadp: CUDA ..., G group(s) of up to N
 * band(s), S output slot(s), FED in P on KERNEL, ..."): N, S and KERNEL. */
static size_t g_plan_group, g_plan_slots;
static char g_plan_kernel[64];

static void watch_plan(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    const char *g = strstr(message, "group(s) of up to "), *k = strstr(message, " on fed_");
    if (strncmp(message, "eadp: CUDA ", 11) != 0 || !g || !k)
        return;
    if (sscanf(g, "group(s) of up to %zu band(s), %zu output slot(s)", &g_plan_group,
               &g_plan_slots) != 2)
        g_plan_group = g_plan_slots = 0;
    snprintf(g_plan_kernel, sizeof g_plan_kernel, "%.*s", (int)strcspn(k + 4, ","), k + 4);
}

/* One CUDA run with the device memory capped at `cap` bytes (0: not
 * capped), its plan recorded. */
static hyprof_status_t run_capped(hyprof_ctx_t *gpu, const hyprof_cube_t *cube,
                                  const hyprof_eadp_params_t *p, size_t cap, hyprof_cube_t *out,
                                  double *k)
{
    char v[32];
    if (cap) {
        snprintf(v, sizeof v, "%zu", cap);
        setenv("HYPROF_DEVICE_MEMORY", v, 1);
    }
    g_plan_group = g_plan_slots = 0;
    g_plan_kernel[0] = '\0';
    hyprof_ctx_set_log(gpu, watch_plan, NULL);
    hyprof_status_t st = hyprof_eadp(gpu, cube, p, out, k);
    hyprof_ctx_set_log(gpu, NULL, NULL);
    unsetenv("HYPROF_DEVICE_MEMORY");
    return st;
}

/* The smallest cap (to 256 bytes, the layout's alignment) at which the run
 * plans at least `group` bands a group and `slots` output slots, by
 * bisection (the plan's budget grows with the cap, above the library's
 * 64 MiB margin); 0 if none up to 256 MiB above the margin. */
static size_t cap_for(hyprof_ctx_t *gpu, const hyprof_cube_t *cube,
                      const hyprof_eadp_params_t *p, size_t group, size_t slots)
{
    size_t lo = (size_t)64 << 20, hi = lo + ((size_t)256 << 20);
    for (int first = 1; first || hi - lo > 256; first = 0) {
        const size_t mid = first ? hi : lo + (hi - lo) / 2;
        hyprof_cube_t out;
        memset(&out, 0, sizeof out);
        hyprof_status_t st = run_capped(gpu, cube, p, mid, &out, NULL);
        hyprof_cube_free(&out);
        const int ok = st == HYPROF_OK && g_plan_group >= group && g_plan_slots >= slots;
        if (first && !ok)
            return 0;
        if (!first && ok)
            hi = mid;
        else if (!first)
            lo = mid;
    }
    return hi;
}

/* ---- comparisons --------------------------------------------------------------- */

typedef struct {
    double rel;        /* max over bands of max|a-b| / max|ref| */
    size_t nodata_bad; /* masked pixels that differ */
    size_t exact, valid;
} cmp_t;

static cmp_t compare(const hyprof_cube_t *in, const hyprof_cube_t *ref, const hyprof_cube_t *got)
{
    cmp_t c = {0.0, 0, 0, 0};
    size_t npix = in->width * in->height;
    const float *r = ref->data, *g = got->data;
    for (size_t k = 0; k < ref->bands; k++) {
        double maxabs = 0.0, maxerr = 0.0;
        for (size_t p = 0; p < npix; p++) {
            float a = r[p + k * npix], b = g[p + k * npix];
            if (!pixel_valid(in, p)) {
                if (!same_float(a, b))
                    c.nodata_bad++;
                continue;
            }
            c.valid++;
            if (memcmp(&a, &b, sizeof a) == 0)
                c.exact++;
            if (fabs(a) > maxabs)
                maxabs = fabs(a);
            double e = fabs((double)a - (double)b);
            if (!(e <= maxerr)) /* NaN counts as worst */
                maxerr = isnan(e) ? INFINITY : e;
        }
        double rel = maxabs > 0.0 ? maxerr / maxabs : maxerr;
        if (!(rel <= c.rel))
            c.rel = isnan(rel) ? INFINITY : rel;
    }
    return c;
}

static double k_error(const double *kc, const double *kg, size_t n)
{
    double worst = 0.0;
    for (size_t b = 0; b < n; b++) {
        double e = fabs(kg[b] - kc[b]) / (fabs(kc[b]) > 0.0 ? fabs(kc[b]) : 1.0);
        if (!(e <= worst))
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static const double g_default_times[8] = {65, 130, 195, 260, 325, 390, 455, 520};

/* The run of `p` with smaller band groups and fewer output slots (the
 * smallest device-memory caps that plan 1 band a group and 1 slot, 1 band
 * and 2 slots, 2 bands and 2 slots while the cube has more: the plan takes
 * fewer than 3 slots only for a larger group) must equal `base` (the
 * uncapped run, contrasts kbase) bit for bit. */
static void check_groups(const char *label, const hyprof_cube_t *cube,
                         const hyprof_eadp_params_t *p, hyprof_ctx_t *gpu,
                         const hyprof_cube_t *base, const double *kbase)
{
    static const size_t want[3][2] = {{1, 1}, {1, 2}, {2, 2}};
    const char *prec = p->precision == HYPROF_EADP_DOUBLE ? "double" : "float";
    for (int v = 0; v < 3; v++) {
        if (want[v][0] >= cube->bands)
            continue;
        char what[160];
        snprintf(what, sizeof what, "%s [%s, groups of %zu, %zu slot(s)]", label, prec,
                 want[v][0], want[v][1]);
        const size_t cap = cap_for(gpu, cube, p, want[v][0], want[v][1]);
        hyprof_cube_t ov;
        memset(&ov, 0, sizeof ov);
        double *kv = calloc(cube->bands, sizeof *kv);
        g_checks += 2;
        hyprof_status_t st =
            !kv ? HYPROF_ERR_NOMEM : cap ? run_capped(gpu, cube, p, cap, &ov, kv) : HYPROF_ERR_INTERNAL;
        if (st != HYPROF_OK || g_plan_group != want[v][0] || g_plan_slots != want[v][1]) {
            FAIL("%s: cap %zu: %s, planned %zu band(s) a group, %zu slot(s)", what, cap,
                 hyprof_status_text(st), g_plan_group, g_plan_slots);
        } else if (expect_cuda(gpu, what)) {
            size_t n = base->width * base->height * base->bands, diff = 0;
            for (size_t i = 0; i < n; i++)
                if (!same_float(((float *)base->data)[i], ((float *)ov.data)[i]))
                    diff++;
            const int kdiff = memcmp(kv, kbase, cube->bands * sizeof *kv) != 0;
            if (diff || kdiff || ov.bands != base->bands)
                FAIL("%s: %zu values and %s differ from the default CUDA run", what, diff,
                     kdiff ? "the contrasts" : "no contrast");
            else
                printf("  %-34s bit-identical to the default CUDA run (cap %zu bytes)\n", what,
                       cap);
        }
        hyprof_cube_free(&ov);
        free(kv);
    }
}

/* Runs the case on both backends (and the band-group fallbacks when asked)
 * and checks. */
static void run_case(const char *label, const hyprof_cube_t *cube, const hyprof_eadp_params_t *p,
                     hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, int variants)
{
    size_t B = cube->bands;
    hyprof_cube_t oc, og, od;
    memset(&oc, 0, sizeof oc);
    memset(&og, 0, sizeof og);
    memset(&od, 0, sizeof od);
    double *kc = calloc(B, sizeof *kc), *kg = calloc(B, sizeof *kg), *kd = calloc(B, sizeof *kd);
    if (!kc || !kg || !kd) {
        FAIL("%s: out of memory", label);
        free(kc);
        free(kg);
        free(kd);
        return;
    }
    g_checks++;
    hyprof_status_t st = hyprof_eadp(cpu, cube, p, &oc, kc);
    if (st != HYPROF_OK) {
        FAIL("%s: CPU eadp: %s (%s)", label, hyprof_status_text(st), hyprof_ctx_last_error(cpu));
        goto done;
    }
    g_checks++;
    st = hyprof_eadp(gpu, cube, p, &og, kg);
    if (st != HYPROF_OK) {
        FAIL("%s: CUDA eadp: %s (%s)", label, hyprof_status_text(st),
             hyprof_ctx_last_error(gpu));
        goto done;
    }
    expect_cuda(gpu, label);
    hyprof_eadp_params_t q = *p;
    q.precision = HYPROF_EADP_DOUBLE;
    g_checks++;
    st = hyprof_eadp(gpu, cube, &q, &od, kd);
    if (st != HYPROF_OK) {
        FAIL("%s: CUDA eadp in double: %s (%s)", label, hyprof_status_text(st),
             hyprof_ctx_last_error(gpu));
        goto done;
    }
    expect_cuda(gpu, label);
    g_checks++;
    if (og.bands != oc.bands || og.width != oc.width || og.height != oc.height ||
        od.bands != oc.bands || oc.bands != B * (p->ntimes + 1)) {
        FAIL("%s: output %zux%zux%zu (cuda) vs %zux%zux%zu (cpu), expected %zu bands", label,
             og.width, og.height, og.bands, oc.width, oc.height, oc.bands, B * (p->ntimes + 1));
        goto done;
    }
    cmp_t c = compare(cube, &oc, &og), cd = compare(cube, &oc, &od);
    double ek = k_error(kc, kg, B), ekd = k_error(kc, kd, B);
    g_checks += 6;
    if (!(c.rel <= FLOAT_TOL))
        FAIL("%s: max relative error %.3g (FED in float) exceeds %.0e", label, c.rel, FLOAT_TOL);
    if (!(cd.rel <= REL_TOL))
        FAIL("%s: max relative error %.3g (FED in double) exceeds %.0e", label, cd.rel, REL_TOL);
    if (!(ek <= K_TOL) || !(ekd <= K_TOL))
        FAIL("%s: contrast relative error %.3g / %.3g (float / double) exceeds %.0e (k[0] cpu "
             "%.17g cuda %.17g)",
             label, ek, ekd, K_TOL, kc[0], kg[0]);
    if (c.nodata_bad || cd.nodata_bad)
        FAIL("%s: %zu / %zu masked values differ between backends (float / double)", label,
             c.nodata_bad, cd.nodata_bad);
    printf("  %-34s %4zux%-4zu x%zu -> %3zu bands: max rel float %.2e, double %.2e, k rel "
           "%.1e (k0 %.6g), double %.2f%% bit-identical\n",
           label, cube->width, cube->height, B, oc.bands, c.rel, cd.rel, ek, kc[0],
           cd.valid ? 100.0 * (double)cd.exact / (double)cd.valid : 100.0);

    if (variants) {
        check_groups(label, cube, p, gpu, &og, kg);
        check_groups(label, cube, &q, gpu, &od, kd);
    }
done:
    fflush(stdout);
    hyprof_cube_free(&oc);
    hyprof_cube_free(&og);
    hyprof_cube_free(&od);
    free(kc);
    free(kg);
    free(kd);
}

static void synthetic(const char *label, size_t w, size_t h, size_t bands, uint64_t seed,
                      image_opts_t o, const hyprof_eadp_params_t *p, hyprof_ctx_t *cpu,
                      hyprof_ctx_t *gpu, int variants)
{
    hyprof_cube_t c;
    memset(&c, 0, sizeof c);
    if (make_image(&c, w, h, bands, seed, &o)) {
        FAIL("%s: cannot build the image", label);
        hyprof_cube_free(&c);
        return;
    }
    run_case(label, &c, p, cpu, gpu, variants);
    hyprof_cube_free(&c);
}

/* ---- the eadp operation: PCs handed over on the device ------------------------------ */

static int g_device_handover;
static void watch_handover(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    if (strstr(message, "where the PCA left them"))
        g_device_handover++;
}

static hyprof_status_t run_op(hyprof_ctx_t *ctx, const hyprof_cube_t *in, hyprof_result_t *res)
{
    const hyprof_op_t *op = hyprof_op_find("eadp");
    hyprof_args_t *args = op ? hyprof_args_new(op) : NULL;
    hyprof_result_init(res);
    if (!args)
        return HYPROF_ERR_NOMEM;
    hyprof_status_t st = hyprof_op_run(ctx, op, args, in, res);
    hyprof_args_free(&args);
    return st;
}

/* The two public calls the eadp operation (--reduction pca, defaults) stands
 * for: hyprof_pca_fit_transform to 7 components, then hyprof_eadp of the PCs
 * carrying the input's mask and nodata (NaN when the input has none), as the
 * operation hands its features over. */
static hyprof_status_t two_calls(hyprof_ctx_t *gpu, const hyprof_cube_t *in, hyprof_cube_t *out)
{
    hyprof_eadp_params_t p;
    hyprof_eadp_params_default(&p);
    p.times = g_default_times;
    p.ntimes = 8;
    hyprof_pca_model_t *m = NULL;
    hyprof_cube_t pcs;
    memset(&pcs, 0, sizeof pcs);
    hyprof_status_t st = hyprof_pca_fit_transform(gpu, in, 7, &m, &pcs);
    hyprof_pca_model_free(&m);
    if (st == HYPROF_OK) {
        pcs.has_nodata = in->has_nodata;
        pcs.nodata = in->nodata;
    }
    if (st == HYPROF_OK && in->mask && (st = hyprof_cube_alloc_mask(&pcs)) == HYPROF_OK) {
        for (size_t y = 0; y < in->height; y++)
            memcpy(pcs.mask + (ptrdiff_t)y * pcs.mask_stride_y,
                   in->mask + (ptrdiff_t)y * in->mask_stride_y, in->width);
        if (!pcs.has_nodata && hyprof_cube_count_valid(&pcs) < in->width * in->height) {
            pcs.has_nodata = 1;
            pcs.nodata = NAN;
        }
    }
    if (st == HYPROF_OK)
        st = hyprof_eadp(gpu, &pcs, &p, out, NULL);
    hyprof_cube_free(&pcs);
    return st;
}

/* The eadp operation on CUDA hands the PCs from the PCA to the diffusion on
 * the device (once); its profile must equal the two public calls' bit for
 * bit, nodata flag included. */
static void test_handover(const char *label, size_t w, size_t h, size_t bands, uint64_t seed,
                          image_opts_t o, hyprof_ctx_t *gpu)
{
    hyprof_cube_t c, two;
    memset(&c, 0, sizeof c);
    memset(&two, 0, sizeof two);
    hyprof_result_t r1;
    hyprof_result_init(&r1);
    if (make_image(&c, w, h, bands, seed, &o)) {
        FAIL("%s: cannot build the image", label);
        hyprof_cube_free(&c);
        return;
    }
    g_device_handover = 0;
    hyprof_ctx_set_log(gpu, watch_handover, NULL);
    hyprof_status_t st = run_op(gpu, &c, &r1);
    hyprof_ctx_set_log(gpu, NULL, NULL);
    int handed = g_device_handover;
    if (st == HYPROF_OK)
        st = two_calls(gpu, &c, &two);
    g_checks += 4;
    if (st != HYPROF_OK) {
        FAIL("%s: eadp operation or its two calls: %s (%s)", label, hyprof_status_text(st),
             hyprof_ctx_last_error(gpu));
        goto done;
    }
    expect_cuda(gpu, label);
    if (handed != 1)
        FAIL("%s: device hand-over used %d time(s), expected 1", label, handed);
    if (r1.cube.bands != two.bands || r1.cube.width != two.width) {
        FAIL("%s: %zu bands on the device path, %zu from the two calls", label, r1.cube.bands,
             two.bands);
        goto done;
    }
    size_t n = two.width * two.height * two.bands, diff = 0;
    for (size_t i = 0; i < n; i++)
        if (!same_float(((float *)two.data)[i], ((float *)r1.cube.data)[i]))
            diff++;
    if (diff || r1.cube.has_nodata != two.has_nodata)
        FAIL("%s: device hand-over differs from the two calls: %zu values, nodata flag %d vs %d",
             label, diff, r1.cube.has_nodata, two.has_nodata);
    else
        printf("  %-34s eadp operation: PCs handed over on the device, %zu bands bit-identical "
               "to the two calls\n",
               label, two.bands);
done:
    fflush(stdout);
    hyprof_result_free(&r1);
    hyprof_cube_free(&two);
    hyprof_cube_free(&c);
}

/* ---- the automatic kernel choices ---------------------------------------------------- */

/* On a cube with enough regions per CTA for fed_tma_kernel (sm_90), the
 * profile of its first band must equal that of its first band alone (too few
 * regions: fed_shfl_kernel) bit for bit, bands being independent; the whole
 * cube is checked against the CPU too. */
static void test_regions(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const hyprof_eadp_params_t *p)
{
    const char *label = "regions-1905x349x7";
    hyprof_cube_t c, all, one;
    memset(&c, 0, sizeof c);
    memset(&all, 0, sizeof all);
    memset(&one, 0, sizeof one);
    image_opts_t o = {0.0, 0, -1};
    if (make_image(&c, 1905, 349, 7, 2024, &o)) {
        FAIL("%s: cannot build the image", label);
        hyprof_cube_free(&c);
        return;
    }
    run_case(label, &c, p, cpu, gpu, 0);
    char k_all[64], k_one[64];
    hyprof_status_t st = run_capped(gpu, &c, p, 0, &all, NULL);
    snprintf(k_all, sizeof k_all, "%s", g_plan_kernel);
    const size_t bands = c.bands;
    c.bands = 1; /* BSQ: the first band is a prefix */
    if (st == HYPROF_OK)
        st = run_capped(gpu, &c, p, 0, &one, NULL);
    c.bands = bands;
    snprintf(k_one, sizeof k_one, "%s", g_plan_kernel);
    g_checks += 2;
    if (st != HYPROF_OK) {
        FAIL("%s: CUDA eadp: %s (%s)", label, hyprof_status_text(st), hyprof_ctx_last_error(gpu));
    } else {
        size_t n = one.width * one.height * one.bands, diff = 0;
        for (size_t i = 0; i < n; i++)
            if (!same_float(((float *)all.data)[i], ((float *)one.data)[i]))
                diff++;
        if (diff)
            FAIL("%s: %zu values of band 1's profile differ between %s (7 bands) and %s (1 band)",
                 label, diff, k_all, k_one);
        else
            printf("  %-34s band 1's profile bit-identical on %s (7 bands) and %s (1 band)\n",
                   label, k_all, k_one);
    }
    hyprof_cube_free(&all);
    hyprof_cube_free(&one);
    hyprof_cube_free(&c);
}

/* An image too tall for the fused FED kernels' grids and for prep_kernel's:
 * one plain step a launch and the smoothing in three kernels, in both
 * precisions, against the CPU. */
static void test_tall(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const hyprof_eadp_params_t *p)
{
    const char *label = "tall-1x3300000";
    hyprof_cube_t c, out;
    memset(&c, 0, sizeof c);
    image_opts_t o = {0.0, 0, -1};
    if (make_image(&c, 1, 3300000, 1, 20, &o)) {
        FAIL("%s: cannot build the image", label);
        hyprof_cube_free(&c);
        return;
    }
    run_case(label, &c, p, cpu, gpu, 0);
    hyprof_eadp_params_t q = *p;
    for (int d = 0; d < 2; d++) {
        q.precision = d ? HYPROF_EADP_DOUBLE : HYPROF_EADP_FLOAT;
        memset(&out, 0, sizeof out);
        hyprof_status_t st = run_capped(gpu, &c, &q, 0, &out, NULL);
        g_checks++;
        if (st != HYPROF_OK || strcmp(g_plan_kernel, "fed_step_kernel") != 0)
            FAIL("%s: %s, FED on %s (expected fed_step_kernel)", label, hyprof_status_text(st),
                 g_plan_kernel);
        hyprof_cube_free(&out);
    }
    hyprof_cube_free(&c);
}

/* ---- cancellation -------------------------------------------------------------- */

static int cancel_on_second(void *user, double fraction, const char *stage)
{
    (void)fraction;
    (void)stage;
    int *calls = user;
    return ++*calls >= 2;
}

static void test_cancel(const hyprof_eadp_params_t *p)
{
    hyprof_cube_t c;
    memset(&c, 0, sizeof c);
    image_opts_t o = {0.0, 0, -1};
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    if (!ctx || make_image(&c, 80, 60, 3, 99, &o)) {
        FAIL("cancel: setup failed");
        hyprof_ctx_free(&ctx);
        hyprof_cube_free(&c);
        return;
    }
    hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CUDA);
    int calls = 0;
    hyprof_ctx_set_progress(ctx, cancel_on_second, &calls);
    hyprof_cube_t out;
    memset(&out, 0, sizeof out);
    hyprof_status_t st = hyprof_eadp(ctx, &c, p, &out, NULL);
    g_checks++;
    if (st != HYPROF_ERR_CANCELLED)
        FAIL("cancel: status %s (%s), expected cancelled", hyprof_status_text(st),
             hyprof_ctx_last_error(ctx));
    else
        printf("  cancel: cancelled after %d progress call(s): %s\n", calls,
               hyprof_ctx_last_error(ctx));
    hyprof_cube_free(&out);
    hyprof_ctx_free(&ctx);
    /* A cancelled context stays cancelled; a new one (and the device) works. */
    ctx = hyprof_ctx_new();
    if (ctx)
        hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CUDA);
    st = ctx ? hyprof_eadp(ctx, &c, p, &out, NULL) : HYPROF_ERR_NOMEM;
    g_checks++;
    if (st != HYPROF_OK)
        FAIL("after cancel: %s (%s)", hyprof_status_text(st),
             ctx ? hyprof_ctx_last_error(ctx) : "no context");
    hyprof_cube_free(&out);
    hyprof_cube_free(&c);
    hyprof_ctx_free(&ctx);
}

/* ---- real cube and timing --------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of `runs` timed CUDA runs (after one warm-up), in ms; < 0 on failure. */
static double time_runs(hyprof_ctx_t *gpu, const hyprof_cube_t *c, const hyprof_eadp_params_t *p,
                        int runs, double *tmin, double *tmax)
{
    double t[16];
    hyprof_cube_t out;
    memset(&out, 0, sizeof out);
    hyprof_status_t st = hyprof_eadp(gpu, c, p, &out, NULL); /* warm-up */
    hyprof_cube_free(&out);
    for (int i = 0; st == HYPROF_OK && i < runs; i++) {
        double t0 = now_ms();
        st = hyprof_eadp(gpu, c, p, &out, NULL);
        t[i] = now_ms() - t0;
        hyprof_cube_free(&out);
    }
    g_checks++;
    if (st != HYPROF_OK) {
        FAIL("timing: CUDA eadp: %s (%s)", hyprof_status_text(st), hyprof_ctx_last_error(gpu));
        return -1.0;
    }
    expect_cuda(gpu, "timing");
    qsort(t, (size_t)runs, sizeof t[0], cmp_double);
    *tmin = t[0];
    *tmax = t[runs - 1];
    return t[runs / 2];
}

/* The library's device figures of the last run (debug log): stage times
 * and the FED bandwidth, printed beside the host-to-host times. */
static char g_dev_ms[512], g_dev_bw[512];
static void keep_device_log(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    if (!strncmp(message, "eadp: cuda device ms:", 21))
        snprintf(g_dev_ms, sizeof g_dev_ms, "%s", message + 6);
    else if (!strncmp(message, "eadp: cuda FED bandwidth:", 25))
        snprintf(g_dev_bw, sizeof g_dev_bw, "%s", message + 6);
}

static void print_device(void)
{
    if (g_dev_ms[0])
        printf("timing:     %s\n", g_dev_ms);
    if (g_dev_bw[0])
        printf("timing:     %s\n", g_dev_bw);
    g_dev_ms[0] = g_dev_bw[0] = '\0';
}

static void timing(hyprof_ctx_t *gpu, const hyprof_eadp_params_t *p)
{
    hyprof_cube_t c;
    memset(&c, 0, sizeof c);
    image_opts_t o = {0.0, 0, -1};
    if (make_image(&c, 1905, 349, 7, 2024, &o)) {
        FAIL("timing: cannot build the cube");
        hyprof_cube_free(&c);
        return;
    }
    hyprof_ctx_set_log(gpu, keep_device_log, NULL);
    double lo, hi, med = time_runs(gpu, &c, p, 5, &lo, &hi);
    if (med >= 0.0)
        printf("timing: CUDA EADP of 1905 x 349 x 7 (8 times, %d cycle(s), 63 output bands): "
               "median %.2f ms per run (min %.2f, max %.2f; host to host)\n",
               p->cycles, med, lo, hi);
    print_device();
    hyprof_eadp_params_t q = *p;
    q.precision = HYPROF_EADP_DOUBLE;
    med = time_runs(gpu, &c, &q, 3, &lo, &hi);
    if (med >= 0.0)
        printf("timing:   precision double: median %.2f ms (min %.2f, max %.2f)\n", med, lo,
               hi);
    print_device();
    hyprof_ctx_set_log(gpu, NULL, NULL);
    hyprof_cube_free(&c);
}

/* The synthetic cases: odd shapes, masks, a constant band, the diffusivities,
 * contrasts, percentiles, radii and schedules; the band-group fallbacks on
 * four of them. */
static void synthetic_cases(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const hyprof_eadp_params_t *p)
{
    const image_opts_t plain = {0.0, 0, -1};

    synthetic("default-64x48", 64, 48, 3, 1, plain, p, cpu, gpu, 1);
    synthetic("odd-37x23", 37, 23, 2, 2, plain, p, cpu, gpu, 0);
    synthetic("line-1x5", 1, 5, 1, 3, plain, p, cpu, gpu, 0);
    synthetic("column-7x1", 7, 1, 2, 4, plain, p, cpu, gpu, 0);
    synthetic("tiles-300x200", 300, 200, 4, 5, plain, p, cpu, gpu, 0);
    {
        image_opts_t o = {0.03, 0, -1};
        synthetic("masked-3pct-150x100", 150, 100, 3, 6, o, p, cpu, gpu, 1);
    }
    {
        image_opts_t o = {0.03, 1, -1};
        synthetic("masked-nan-97x61", 97, 61, 2, 7, o, p, cpu, gpu, 0);
    }
    {
        image_opts_t o = {0.0, 0, 1};
        synthetic("constant-band-50x40", 50, 40, 3, 8, o, p, cpu, gpu, 0);
    }
    {
        hyprof_eadp_params_t q = *p;
        q.cycles = 3;
        synthetic("cycles3-37x23", 37, 23, 2, 9, plain, &q, cpu, gpu, 1);
        image_opts_t o = {0.03, 0, -1};
        synthetic("cycles3-masked-120x90", 120, 90, 2, 10, o, &q, cpu, gpu, 0);
    }
    {
        hyprof_eadp_params_t q = *p;
        q.diffusivity = HYPROF_DIFFUSIVITY_G1;
        synthetic("g1-64x48", 64, 48, 2, 11, plain, &q, cpu, gpu, 0);
        q.diffusivity = HYPROF_DIFFUSIVITY_G3;
        synthetic("g3-64x48", 64, 48, 2, 12, plain, &q, cpu, gpu, 0);
    }
    {
        hyprof_eadp_params_t q = *p;
        q.contrast = 25.0;
        synthetic("contrast-25-64x48", 64, 48, 2, 13, plain, &q, cpu, gpu, 0);
        q.contrast = 0.0;
        q.percentile = 0.3;
        synthetic("percentile-0.3-64x48", 64, 48, 2, 14, plain, &q, cpu, gpu, 0);
        q.percentile = 0.95;
        q.sigma = 2.5;
        synthetic("p0.95-sigma2.5-64x48", 64, 48, 2, 15, plain, &q, cpu, gpu, 0);
    }
    {
        static const double times[4] = {3.0, 10.0, 40.0, 41.0};
        hyprof_eadp_params_t q = *p;
        q.times = times;
        q.ntimes = 4;
        q.cycles = 2;
        synthetic("irregular-times-70x50", 70, 50, 3, 16, plain, &q, cpu, gpu, 1);
    }
    {
        hyprof_eadp_params_t q = *p;
        q.sigma = 3.0; /* radius 9: the smoothing in three kernels */
        synthetic("sigma3-64x48", 64, 48, 2, 21, plain, &q, cpu, gpu, 0);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int ndev = hyprof_cuda_device_count();
    if (ndev <= 0) {
        printf("test_gpu_eadp: no CUDA device (or a CPU-only build): skipped\n");
        return SKIP_CODE;
    }
    char name[256];
    size_t total = 0, freeb = 0;
    if (hyprof_cuda_device_info(0, name, sizeof name, &total, &freeb) == HYPROF_OK)
        printf("%s %s; device 0: %s, %.1f GiB, %.1f GiB free\n", hyprof_version(),
               hyprof_build_info(), name, (double)total / 1073741824.0,
               (double)freeb / 1073741824.0);
    hyprof_ctx_t *cpu = hyprof_ctx_new(), *gpu = hyprof_ctx_new();
    if (!cpu || !gpu) {
        printf("FAIL: hyprof_ctx_new\n");
        return 1;
    }
    if (hyprof_ctx_set_backend(cpu, HYPROF_BACKEND_CPU) != HYPROF_OK ||
        hyprof_ctx_set_backend(gpu, HYPROF_BACKEND_CUDA) != HYPROF_OK) {
        printf("FAIL: hyprof_ctx_set_backend\n");
        return 1;
    }

    hyprof_eadp_params_t p;
    hyprof_eadp_params_default(&p);
    p.times = g_default_times;
    p.ntimes = 8;
    synthetic_cases(cpu, gpu, &p);
    test_regions(cpu, gpu, &p);
    test_tall(cpu, gpu, &p);
    test_cancel(&p);
    {
        const image_opts_t plain = {0.0, 0, -1};
        test_handover("op-160x90x12", 160, 90, 12, 17, plain, gpu);
        image_opts_t o = {0.03, 0, -1};
        test_handover("op-masked-130x70x9", 130, 70, 9, 18, o, gpu);
        image_opts_t q = {0.03, 1, -1};
        test_handover("op-masked-nan-90x61x8", 90, 61, 8, 19, q, gpu);
    }

    if (argc >= 5) {
        size_t w = strtoull(argv[2], NULL, 10), h = strtoull(argv[3], NULL, 10),
               b = strtoull(argv[4], NULL, 10);
        hyprof_cube_t c;
        memset(&c, 0, sizeof c);
        if (!(w && h && b)) {
            FAIL("bad dimensions %s %s %s", argv[2], argv[3], argv[4]);
        } else if (load_raw(argv[1], w, h, b, &c) == 0) {
            c.bands = b < 3 ? b : 3; /* BSQ: the first bands are a prefix */
            run_case(argv[1], &c, &p, cpu, gpu, 0);
            c.bands = b;
            hyprof_cube_free(&c);
        }
    } else if (argc > 1) {
        printf("usage: %s [RAW_FLOAT32_BSQ WIDTH HEIGHT BANDS]\n", argv[0]);
        g_failures++;
    }

    const char *tm = getenv("HYPROF_TEST_TIMING");
    if (!(tm && strcmp(tm, "0") == 0))
        timing(gpu, &p);

    hyprof_ctx_free(&cpu);
    hyprof_ctx_free(&gpu);
    printf("%d checks, %d failure(s)\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
