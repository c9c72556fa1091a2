/* CPU / CUDA parity of PCA and the spectral DWT, through the public API only.
 *
 *   test_gpu_parity [RAW W H B]
 *
 * Synthetic cubes (seeded; some with masked pixels, odd band counts, 224
 * bands) and, optionally, a real cube given as raw float32 BSQ (RAW, width W,
 * height H, bands B). Each GPU case runs three ways: the default plan (one chunk,
 * cube resident), and two device-memory caps ($HYPROF_DEVICE_MEMORY, computed
 * from the cube's size) that leave room for the resident cube and chunks of
 * about a fifth of it, or only for chunks of about an eighth streamed from
 * pinned host memory; the PCA fit's debug log must name the plan the mode
 * forces. Tolerances (CPU result as reference):
 *   PCA   means relative 1e-9, eigenvalues relative 1e-9, component loadings
 *         absolute 1e-6, projections: max error of each output band below
 *         1e-4 of that band's max |value|;
 *   DWT   |gpu - cpu| <= 1e-5 * max(|cpu|, 1e-3 * band max |value|);
 *   masked pixels: identical nodata on both backends.
 * Exit 0 when all pass, 1 on any failure (each printed), 77 when there is no
 * CUDA device (ctest: skipped). */
#define _POSIX_C_SOURCE 200809L
#include "hyprof/hyprof.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_test_util.h"

static void check(int ok, const char *what, double value, double tol)
{
    g_checks++;
    if (!ok)
        FAIL("%s = %.3g exceeds %.1g", what, value, tol);
}

/* ---- synthetic cubes ------------------------------------------------------------ */

/* A cube with a few well-separated latent factors (so the leading principal
 * components are well conditioned), a smooth mean spectrum and noise.
 * `masked` of the pixels are nodata (mask 0, value -9999). `spread` scales
 * the factors; `integer`: the values rounded to integers, as sensors store
 * them (the CUDA covariance's exact integer path). */
static int make_cube(hyprof_cube_t *cube, size_t w, size_t h, size_t bands, uint64_t seed,
                     double masked, double offset, double spread, int integer)
{
    g_rng = seed;
    if (hyprof_cube_alloc(cube, HYPROF_FLOAT32, w, h, bands) != HYPROF_OK)
        return -1;
    size_t npix = w * h, nf = bands < 8 ? bands : 8;
    float *x = (float *)cube->data;
    double *load = malloc(nf * bands * sizeof *load), *z = malloc(nf * sizeof *z);
    if (!load || !z) {
        free(load);
        free(z);
        return -1;
    }
    for (size_t k = 0; k < nf; k++)
        for (size_t b = 0; b < bands; b++)
            load[k * bands + b] = rng_normal() * 300.0 * spread / pow(1.9, (double)k);
    for (size_t p = 0; p < npix; p++) {
        for (size_t k = 0; k < nf; k++)
            z[k] = rng_normal();
        for (size_t b = 0; b < bands; b++) {
            double v = offset + 2000.0 + 800.0 * sin(0.05 * (double)b) + 3.0 * rng_normal();
            for (size_t k = 0; k < nf; k++)
                v += z[k] * load[k * bands + b];
            x[p + b * npix] = integer ? (float)rint(v) : (float)v;
        }
    }
    free(load);
    free(z);
    if (masked > 0.0) {
        if (hyprof_cube_alloc_mask(cube) != HYPROF_OK)
            return -1;
        cube->nodata = -9999.0;
        cube->has_nodata = 1;
        for (size_t y = 0; y < h; y++)
            for (size_t xx = 0; xx < w; xx++)
                if (rng_uniform() < masked) {
                    cube->mask[(ptrdiff_t)y * cube->mask_stride_y + (ptrdiff_t)xx] = 0;
                    for (size_t b = 0; b < bands; b++)
                        x[y * w + xx + b * npix] = -9999.0f;
                }
    }
    return 0;
}

/* ---- GPU modes ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    int capped;   /* set $HYPROF_DEVICE_MEMORY from the cube's size */
    int resident; /* the plan the cap forces: the cube stays on the device */
} gpu_mode_t;

static const gpu_mode_t g_modes[] = {
    {"default", 0, 1},
    {"chunked-resident", 1, 1},
    {"chunked-streamed", 1, 0},
};
#define NMODES (sizeof g_modes / sizeof g_modes[0])

/* The margin hyprof__cuda_budget keeps below a cap under 1.25 GiB (64 MiB). */
#define BUDGET_MARGIN ((size_t)64 << 20)

/* The pixels a chunk of mode m should hold (0: not capped). */
static size_t mode_chunk(const gpu_mode_t *m, size_t npix)
{
    if (!m->capped)
        return 0;
    if (m->resident) /* about a fifth, the last one ragged; the fit keeps at least 1024 */
        return npix / 5 + 13 > 1024 ? npix / 5 + 13 : 1024;
    return npix / 8 + 13;
}

/* The cap that makes the PCA fit plan mode m for a cube of npix x bands
 * (mask: one byte a pixel): resident, the cube plus a chunk at 2 doubles a
 * band a pixel; streamed, a chunk at 2 (float + double + mask) a band a
 * pixel, which leaves no room for the cube. */
static size_t mode_cap(const gpu_mode_t *m, size_t npix, size_t bands, int masked)
{
    const size_t chunk = mode_chunk(m, npix), mb = masked ? 1 : 0;
    if (m->resident)
        return BUDGET_MARGIN + npix * bands * sizeof(float) + npix * mb +
               chunk * 2 * bands * sizeof(double);
    return BUDGET_MARGIN + chunk * 2 * (bands * sizeof(float) + bands * sizeof(double) + mb);
}

static void set_mode(const gpu_mode_t *m, const hyprof_cube_t *cube)
{
    if (!m->capped) {
        unsetenv("HYPROF_DEVICE_MEMORY");
        return;
    }
    char buf[32];
    snprintf(buf, sizeof buf, "%zu",
             mode_cap(m, cube->width * cube->height, cube->bands, cube->mask != NULL));
    setenv("HYPROF_DEVICE_MEMORY", buf, 1);
}

static void clear_mode(void) { unsetenv("HYPROF_DEVICE_MEMORY"); }

/* ---- comparisons -------------------------------------------------------------- */

/* Max over output bands of (max |a-b| over valid pixels) / (max |ref| over valid
 * pixels); masked pixels must be identical. */
static double compare_projection(const hyprof_cube_t *in, const hyprof_cube_t *ref,
                                 const hyprof_cube_t *got, size_t *nodata_mismatch)
{
    size_t npix = in->width * in->height;
    const float *r = ref->data, *g = got->data;
    double worst = 0.0;
    *nodata_mismatch = 0;
    for (size_t k = 0; k < ref->bands; k++) {
        double maxabs = 0.0, maxerr = 0.0;
        for (size_t p = 0; p < npix; p++) {
            float a = r[p + k * npix], b = g[p + k * npix];
            if (!pixel_valid(in, p)) {
                if (!same_float(a, b))
                    (*nodata_mismatch)++;
                continue;
            }
            if (fabs(a) > maxabs)
                maxabs = fabs(a);
            double e = fabs((double)a - (double)b);
            if (!(e <= maxerr)) /* NaN counts as worst */
                maxerr = isnan(e) ? INFINITY : e;
        }
        double rel = maxabs > 0.0 ? maxerr / maxabs : maxerr;
        if (!(rel <= worst))
            worst = rel;
    }
    return worst;
}

/* Which covariance the CUDA fit's debug log named: 'i' exact integers, 'f'
 * FP64 after the integer check failed, 0 neither (another path); and its
 * plan: the chunk count and whether the cube stayed on the device. */
static char g_cov_path;
static size_t g_fit_chunks;
static int g_fit_resident = -1;

static void log_cov_path(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    const char *plan = strstr(message, "pca: CUDA fit of ");
    if (strstr(message, "pca: covariance exact in integers"))
        g_cov_path = 'i';
    else if (strstr(message, "pca: covariance in FP64"))
        g_cov_path = 'f';
    else if (plan && strstr(plan, " chunk(s) of ")) {
        const char *c = strstr(plan, "bands, ");
        g_fit_chunks = c ? strtoull(c + 7, NULL, 10) : 0;
        g_fit_resident = strstr(plan, "cube resident on the device") != NULL;
    }
}

/* The fit's plan against the one mode m forces. */
static void check_plan(const char *label, const gpu_mode_t *m, size_t npix)
{
    const size_t chunk = mode_chunk(m, npix);
    g_checks++;
    if (g_fit_resident != m->resident)
        FAIL("%s [%s]: the CUDA fit %s the cube on the device", label, m->name,
             g_fit_resident == 1 ? "kept" : g_fit_resident == 0 ? "did not keep" : "logged no plan for");
    g_checks++;
    if (m->capped && chunk < npix && g_fit_chunks < 2)
        FAIL("%s [%s]: the CUDA fit ran %zu chunk(s), expected several of %zu pixels", label,
             m->name, g_fit_chunks, chunk);
}

/* path: the covariance the default mode must take ('i', 'f' or 0; '?' any). */
static void test_pca(const char *label, const hyprof_cube_t *cube, size_t ncomp,
                     hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, char path)
{
    size_t npix = cube->width * cube->height, B = cube->bands;
    hyprof_pca_model_t *mc = NULL;
    hyprof_cube_t pc;
    memset(&pc, 0, sizeof pc);
    g_checks++;
    if (hyprof_pca_fit(cpu, cube, ncomp, &mc) != HYPROF_OK) {
        FAIL("%s: CPU pca fit: %s", label, hyprof_ctx_last_error(cpu));
        return;
    }
    if (hyprof_pca_apply(cpu, mc, cube, &pc) != HYPROF_OK) {
        FAIL("%s: CPU pca apply: %s", label, hyprof_ctx_last_error(cpu));
        hyprof_pca_model_free(&mc);
        return;
    }
    const double *mean_c = hyprof_pca_model_mean(mc), *ev_c = hyprof_pca_model_eigenvalues(mc),
                 *vec_c = hyprof_pca_model_vectors(mc);
    double maxmean = 0.0;
    for (size_t b = 0; b < B; b++)
        if (fabs(mean_c[b]) > maxmean)
            maxmean = fabs(mean_c[b]);

    for (size_t mi = 0; mi < NMODES; mi++) {
        char what[256];
        set_mode(&g_modes[mi], cube);
        hyprof_pca_model_t *mg = NULL;
        g_cov_path = 0;
        g_fit_chunks = 0;
        g_fit_resident = -1;
        hyprof_status_t st = hyprof_pca_fit(gpu, cube, ncomp, &mg);
        g_checks++;
        if (st != HYPROF_OK) {
            FAIL("%s [%s]: CUDA pca fit: %s (%s)", label, g_modes[mi].name,
                 hyprof_status_text(st), hyprof_ctx_last_error(gpu));
            continue;
        }
        g_checks++;
        if (mi == 0 && path != '?' && g_cov_path != path)
            FAIL("%s: the CUDA covariance took path '%c', expected '%c' (i: exact integers, "
                 "f: FP64 fallback)", label, g_cov_path ? g_cov_path : '-', path ? path : '-');
        check_plan(label, &g_modes[mi], npix);
        snprintf(what, sizeof what, "%s [%s] pca fit", label, g_modes[mi].name);
        expect_cuda(gpu, what);
        const double *mean_g = hyprof_pca_model_mean(mg), *ev_g = hyprof_pca_model_eigenvalues(mg),
                     *vec_g = hyprof_pca_model_vectors(mg);
        double e_mean = 0.0, e_ev = 0.0, e_vec = 0.0;
        for (size_t b = 0; b < B; b++) {
            double d = fabs(mean_c[b]), den = d > 1e-6 * maxmean ? d : 1e-6 * maxmean;
            double e = den > 0.0 ? fabs(mean_g[b] - mean_c[b]) / den : fabs(mean_g[b]);
            if (!(e <= e_mean))
                e_mean = isnan(e) ? INFINITY : e;
        }
        for (size_t k = 0; k < ncomp; k++) {
            double d = fabs(ev_c[k]), den = d > 1e-12 * fabs(ev_c[0]) ? d : 1e-12 * fabs(ev_c[0]);
            double e = den > 0.0 ? fabs(ev_g[k] - ev_c[k]) / den : fabs(ev_g[k]);
            if (!(e <= e_ev))
                e_ev = isnan(e) ? INFINITY : e;
            for (size_t b = 0; b < B; b++) {
                double ev = fabs(vec_g[k * B + b] - vec_c[k * B + b]);
                if (!(ev <= e_vec))
                    e_vec = isnan(ev) ? INFINITY : ev;
            }
        }
        double tv_c = hyprof_pca_model_total_variance(mc), tv_g = hyprof_pca_model_total_variance(mg);
        double e_tv = fabs(tv_g - tv_c) / (fabs(tv_c) > 0 ? fabs(tv_c) : 1.0);
        g_checks++;
        if (hyprof_pca_model_samples(mg) != hyprof_pca_model_samples(mc))
            FAIL("%s [%s]: samples %zu (cuda) vs %zu (cpu)", label, g_modes[mi].name,
                 hyprof_pca_model_samples(mg), hyprof_pca_model_samples(mc));
        snprintf(what, sizeof what, "%s [%s] pca mean max rel err", label, g_modes[mi].name);
        check(e_mean <= 1e-9, what, e_mean, 1e-9);
        snprintf(what, sizeof what, "%s [%s] pca eigenvalue max rel err", label, g_modes[mi].name);
        check(e_ev <= 1e-9, what, e_ev, 1e-9);
        snprintf(what, sizeof what, "%s [%s] pca total variance rel err", label, g_modes[mi].name);
        check(e_tv <= 1e-9, what, e_tv, 1e-9);
        snprintf(what, sizeof what, "%s [%s] pca component max abs err", label, g_modes[mi].name);
        check(e_vec <= 1e-6, what, e_vec, 1e-6);

        /* Projections: the CPU model on the GPU (the apply step alone), and the
         * GPU model on the GPU (the whole GPU pipeline), both against CPU/CPU. */
        /* Pass 2 is the fit-transform, which projects the cube the fit left on
         * the device (or streams it again when it did not stay). */
        double err[3] = {NAN, NAN, NAN};
        size_t nbad[3] = {0, 0, 0};
        static const char *pass_name[3] = {"apply (cpu model)", "fit+apply", "fit-transform"};
        for (int pass = 0; pass < 3; pass++) {
            hyprof_cube_t pg;
            hyprof_pca_model_t *mt = NULL;
            memset(&pg, 0, sizeof pg);
            st = pass < 2 ? hyprof_pca_apply(gpu, pass == 0 ? mc : mg, cube, &pg)
                          : hyprof_pca_fit_transform(gpu, cube, ncomp, &mt, &pg);
            hyprof_pca_model_free(&mt);
            g_checks++;
            if (st != HYPROF_OK) {
                FAIL("%s [%s]: CUDA pca %s: %s (%s)", label, g_modes[mi].name, pass_name[pass],
                     hyprof_status_text(st), hyprof_ctx_last_error(gpu));
                continue;
            }
            snprintf(what, sizeof what, "%s [%s] pca %s", label, g_modes[mi].name,
                     pass_name[pass]);
            expect_cuda(gpu, what);
            g_checks++;
            if (pg.bands != ncomp || pg.width != cube->width || pg.height != cube->height)
                FAIL("%s [%s]: CUDA pca output is %zux%zux%zu", label, g_modes[mi].name, pg.width,
                     pg.height, pg.bands);
            else
                err[pass] = compare_projection(cube, &pc, &pg, &nbad[pass]);
            hyprof_cube_free(&pg);
        }
        for (int pass = 0; pass < 3; pass++) {
            snprintf(what, sizeof what, "%s [%s] pca %s rel err", label, g_modes[mi].name,
                     pass_name[pass]);
            check(err[pass] <= 1e-4, what, err[pass], 1e-4);
        }
        g_checks++;
        if (nbad[0] || nbad[1] || nbad[2])
            FAIL("%s [%s]: %zu/%zu/%zu masked pixels differ between backends", label,
                 g_modes[mi].name, nbad[0], nbad[1], nbad[2]);
        printf("  pca %-34s %-17s %zu px x %zu bands -> %zu: mean %.2e  eig %.2e  vec %.2e  "
               "apply %.2e  fit+apply %.2e  fit-transform %.2e\n",
               label, g_modes[mi].name, npix, B, ncomp, e_mean, e_ev, e_vec, err[0], err[1],
               err[2]);
        fflush(stdout);
        hyprof_pca_model_free(&mg);
    }
    clear_mode();
    hyprof_cube_free(&pc);
    hyprof_pca_model_free(&mc);
}

static void test_dwt(const char *label, const hyprof_cube_t *cube, const char *wname,
                     int levels, hyprof_ctx_t *cpu, hyprof_ctx_t *gpu)
{
    size_t npix = cube->width * cube->height;
    const hyprof_wavelet_t *w = hyprof_wavelet_find(wname);
    g_checks++;
    if (!w) {
        FAIL("wavelet '%s' not found", wname);
        return;
    }
    hyprof_cube_t oc;
    memset(&oc, 0, sizeof oc);
    g_checks++;
    if (hyprof_dwt_spectral(cpu, cube, w, levels, &oc) != HYPROF_OK) {
        FAIL("%s: CPU dwt %s L=%d: %s", label, wname, levels, hyprof_ctx_last_error(cpu));
        return;
    }
    size_t nb = hyprof_dwt_bands(cube->bands, levels);
    g_checks++;
    if (oc.bands != nb)
        FAIL("%s: CPU dwt gives %zu bands, expected %zu", label, oc.bands, nb);
    for (size_t mi = 0; mi < NMODES; mi++) {
        /* Chunking does not change the DWT's arithmetic: run the chunked modes
         * on a subset to keep the test short. */
        if (mi > 0 && !(levels == 2 || levels == hyprof_dwt_max_levels(cube->bands)))
            continue;
        set_mode(&g_modes[mi], cube);
        hyprof_cube_t og;
        memset(&og, 0, sizeof og);
        hyprof_status_t st = hyprof_dwt_spectral(gpu, cube, w, levels, &og);
        g_checks++;
        if (st != HYPROF_OK) {
            FAIL("%s [%s]: CUDA dwt %s L=%d: %s (%s)", label, g_modes[mi].name, wname, levels,
                 hyprof_status_text(st), hyprof_ctx_last_error(gpu));
            continue;
        }
        char what[256];
        snprintf(what, sizeof what, "%s [%s] dwt %s L=%d", label, g_modes[mi].name, wname,
                 levels);
        expect_cuda(gpu, what);
        g_checks++;
        if (og.bands != oc.bands || og.width != oc.width || og.height != oc.height) {
            FAIL("%s: CUDA output %zu bands, CPU %zu", what, og.bands, oc.bands);
            hyprof_cube_free(&og);
            continue;
        }
        const float *r = oc.data, *g = og.data;
        double worst = 0.0;
        size_t bad_nodata = 0, n_exact = 0, n_valid = 0;
        for (size_t k = 0; k < oc.bands; k++) {
            double maxabs = 0.0;
            for (size_t p = 0; p < npix; p++)
                if (pixel_valid(cube, p) && fabs(r[p + k * npix]) > maxabs)
                    maxabs = fabs(r[p + k * npix]);
            for (size_t p = 0; p < npix; p++) {
                float a = r[p + k * npix], b = g[p + k * npix];
                if (!pixel_valid(cube, p)) {
                    if (!same_float(a, b))
                        bad_nodata++;
                    continue;
                }
                n_valid++;
                if (a == b)
                    n_exact++;
                double den = fabs(a) > 1e-3 * maxabs ? fabs(a) : 1e-3 * maxabs;
                double e = den > 0.0 ? fabs((double)a - (double)b) / den
                                     : fabs((double)a - (double)b);
                if (!(e <= worst))
                    worst = isnan(e) ? INFINITY : e;
            }
        }
        char what2[300];
        snprintf(what2, sizeof what2, "%s max rel err", what);
        check(worst <= 1e-5, what2, worst, 1e-5);
        g_checks++;
        if (bad_nodata)
            FAIL("%s: %zu masked values differ between backends", what, bad_nodata);
        printf("  dwt %-34s %-17s %-7s L=%d %zu px x %zu -> %zu bands: max rel %.2e, "
               "%.1f%% bit-identical\n",
               label, g_modes[mi].name, wname, levels, npix, cube->bands, oc.bands, worst,
               n_valid ? 100.0 * (double)n_exact / (double)n_valid : 100.0);
        fflush(stdout);
        hyprof_cube_free(&og);
    }
    clear_mode();
    hyprof_cube_free(&oc);
}

static void test_cube(const char *label, const hyprof_cube_t *cube, size_t ncomp,
                      hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, char path)
{
    static const char *wavelets[] = {"haar", "db2", "db4", "bior4.4"};
    printf("%s: %zu x %zu x %zu, %zu valid pixels\n", label, cube->width, cube->height,
           cube->bands, hyprof_cube_count_valid(cube));
    test_pca(label, cube, ncomp, cpu, gpu, path);
    int maxl = hyprof_dwt_max_levels(cube->bands);
    for (size_t i = 0; i < sizeof wavelets / sizeof wavelets[0]; i++) {
        int levels[4] = {1, 2, 3, maxl}, nl = 0;
        for (int j = 0; j < 4; j++) {
            int l = levels[j], dup = 0;
            for (int q = 0; q < j; q++)
                dup |= levels[q] == l;
            if (l >= 1 && l <= maxl && !dup) {
                test_dwt(label, cube, wavelets[i], l, cpu, gpu);
                nl++;
            }
        }
        (void)nl;
    }
}

/* ---- cancellation ------------------------------------------------------------- */

typedef struct {
    int calls;
} cancel_state_t;

static int cancel_on_second(void *user, double fraction, const char *stage)
{
    (void)fraction;
    (void)stage;
    cancel_state_t *s = user;
    return ++s->calls >= 2;
}

static void test_cancel(const hyprof_cube_t *cube)
{
    for (int op = 0; op < 2; op++) {
        hyprof_ctx_t *ctx = hyprof_ctx_new();
        if (!ctx) {
            FAIL("hyprof_ctx_new failed");
            return;
        }
        hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CUDA);
        cancel_state_t s = {0};
        hyprof_ctx_set_progress(ctx, cancel_on_second, &s);
        set_mode(&g_modes[2], cube);
        hyprof_status_t st;
        if (op == 0) {
            hyprof_pca_model_t *m = NULL;
            st = hyprof_pca_fit(ctx, cube, 3, &m);
            hyprof_pca_model_free(&m);
        } else {
            hyprof_cube_t o;
            memset(&o, 0, sizeof o);
            st = hyprof_dwt_spectral(ctx, cube, hyprof_wavelet_find("db4"), 2, &o);
            hyprof_cube_free(&o);
        }
        clear_mode();
        g_checks++;
        if (st != HYPROF_ERR_CANCELLED)
            FAIL("cancel %s: status %s (%s), expected cancelled", op == 0 ? "pca fit" : "dwt",
                 hyprof_status_text(st), hyprof_ctx_last_error(ctx));
        else
            printf("  cancel %-8s cancelled after %d progress call(s): %s\n",
                   op == 0 ? "pca fit" : "dwt", s.calls, hyprof_ctx_last_error(ctx));
        hyprof_ctx_free(&ctx);
    }
}

/* ---- real cube ---------------------------------------------------------------- */

/* Auto's rule for the bus-bound DWT (algorithms/core/dispatch.c): the CPU
 * with 8 threads or more, CUDA with fewer; the same output either way. */
static void test_auto_bus_bound(void)
{
    hyprof_cube_t c;
    memset(&c, 0, sizeof c);
    if (make_cube(&c, 64, 48, 32, 31, 0.05, 0.0, 1.0, 0)) {
        FAIL("auto rule: cannot build the cube");
        return;
    }
    const int procs = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const int threads[2] = {1, 8};
    const hyprof_backend_t want[2] = {HYPROF_BACKEND_CUDA, HYPROF_BACKEND_CPU};
    hyprof_cube_t out[2];
    memset(out, 0, sizeof out);
    for (int k = 0; k < 2; k++) {
        if (threads[k] > procs) {
            printf("  auto rule, %d threads: skipped (%d processors)\n", threads[k], procs);
            continue;
        }
        hyprof_ctx_t *ctx = hyprof_ctx_new();
        hyprof_ctx_set_threads(ctx, threads[k]);
        hyprof_status_t st = hyprof_dwt_spectral(ctx, &c, hyprof_wavelet_find("db4"), 2, &out[k]);
        hyprof_backend_t used = hyprof_ctx_used_backend(ctx);
        g_checks++;
        if (st != HYPROF_OK || used != want[k])
            FAIL("auto rule, %d threads: status %s, ran on %s, expected %s", threads[k],
                 hyprof_status_text(st), hyprof_backend_name(used), hyprof_backend_name(want[k]));
        else
            printf("  auto rule, %d thread(s): dwt ran on %s\n", threads[k],
                   hyprof_backend_name(used));
        hyprof_ctx_free(&ctx);
    }
    if (out[0].data && out[1].data) {
        size_t n = c.width * c.height * out[0].bands;
        double worst = 0.0, top = 0.0;
        for (size_t i = 0; i < n; i++) {
            float a = ((float *)out[0].data)[i], b = ((float *)out[1].data)[i];
            if (isnan(a) != isnan(b))
                worst = INFINITY;
            else if (!isnan(a)) {
                worst = fmax(worst, fabs((double)a - b));
                top = fmax(top, fabs((double)b));
            }
        }
        check(worst <= 1e-5 * top, "auto rule: CUDA and CPU outputs", worst / top, 1e-5);
    }
    hyprof_cube_free(&out[0]);
    hyprof_cube_free(&out[1]);
    hyprof_cube_free(&c);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int ndev = hyprof_cuda_device_count();
    if (ndev <= 0) {
        printf("test_gpu_parity: no CUDA device (or a CPU-only build): skipped\n");
        return SKIP_CODE;
    }
    char name[256];
    size_t total = 0, freeb = 0;
    hyprof_status_t st = hyprof_cuda_device_info(0, name, sizeof name, &total, &freeb);
    g_checks++;
    if (st != HYPROF_OK)
        FAIL("hyprof_cuda_device_info(0): %s", hyprof_status_text(st));
    else
        printf("%s %s, %d device(s); device 0: %s, %.1f GiB, %.1f GiB free\n", hyprof_version(),
               hyprof_build_info(), ndev, name, (double)total / 1073741824.0,
               (double)freeb / 1073741824.0);
    g_checks++;
    if (hyprof_cuda_device_info(ndev, name, sizeof name, NULL, NULL) == HYPROF_OK)
        FAIL("hyprof_cuda_device_info(%d) accepted a device that does not exist", ndev);
    clear_mode();

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

    hyprof_ctx_set_log(gpu, log_cov_path, NULL);
    /* path: the CUDA covariance of the default mode: 'i' the exact integer
     * kernel (integer-valued cubes of up to 144 bands), 'f' its FP64
     * fallback (values that are not integers, or too far from the means),
     * 0 neither (more than 144 bands: the two-pass path). */
    struct {
        const char *label;
        size_t w, h, b, ncomp;
        uint64_t seed;
        double masked, offset, spread;
        int integer;
        char path;
    } cases[] = {
        {"small-45b-masked", 37, 23, 45, 6, 11, 0.10, 0.0, 1.0, 0, 'f'},
        {"pavia-like-103b", 64, 48, 103, 7, 12, 0.0, 0.0, 1.0, 0, 'f'},
        {"multispectral-8b-masked", 150, 100, 8, 4, 13, 0.05, 0.0, 1.0, 0, 'f'},
        {"tiny-5b", 9, 7, 5, 3, 14, 0.0, 0.0, 1.0, 0, 'f'},
        {"wtc-like-224b-masked", 256, 200, 224, 7, 15, 0.03, 0.0, 1.0, 0, 0},
        /* 144 bands (the most the fused covariance takes) and means about
         * 300 times the bands' standard deviations: its one-pass formula
         * about a shift must not cancel */
        {"offset-1e5-144b-masked", 320, 200, 144, 7, 17, 0.02, 1.0e5, 1.0, 0, 'f'},
        {"9b-9pc-masked", 41, 29, 9, 9, 16, 0.05, 0.0, 1.0, 0, 'f'}, /* 9 > 8 components: 2 projection passes */
        /* integer-valued (as sensors store them): the exact integer
         * covariance, with masked pixels, ragged tiles (37 bands), a large
         * offset (integer shifts near 1e5) and two bands; values
         * spread beyond 32767 of the mean fall back to FP64 */
        {"int-144b-masked", 320, 200, 144, 7, 18, 0.02, 0.0, 1.0, 1, 'i'},
        {"int-37b", 61, 43, 37, 5, 19, 0.0, 0.0, 1.0, 1, 'i'},
        {"int-offset-1e5-144b", 200, 150, 144, 7, 20, 0.0, 1.0e5, 1.0, 1, 'i'},
        {"int-2b-masked", 64, 64, 2, 2, 21, 0.05, 0.0, 1.0, 1, 'i'},
        {"int-wide-64b", 160, 120, 64, 6, 22, 0.0, 0.0, 60.0, 1, 'f'},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hyprof_cube_t c;
        memset(&c, 0, sizeof c);
        if (make_cube(&c, cases[i].w, cases[i].h, cases[i].b, cases[i].seed, cases[i].masked,
                      cases[i].offset, cases[i].spread, cases[i].integer)) {
            FAIL("cannot build cube %s", cases[i].label);
            continue;
        }
        test_cube(cases[i].label, &c, cases[i].ncomp, cpu, gpu, cases[i].path);
        if (i == sizeof cases / sizeof cases[0] - 1)
            test_cancel(&c);
        hyprof_cube_free(&c);
    }

    test_auto_bus_bound();

    /* A bad device id is refused, not crashed on. */
    {
        hyprof_ctx_t *bad = hyprof_ctx_new();
        hyprof_cube_t c;
        memset(&c, 0, sizeof c);
        if (bad && make_cube(&c, 8, 8, 16, 21, 0.0, 0.0, 1.0, 0) == 0) {
            hyprof_ctx_set_backend(bad, HYPROF_BACKEND_CUDA);
            if (hyprof_ctx_set_device(bad, ndev) == HYPROF_OK) {
                hyprof_cube_t o;
                memset(&o, 0, sizeof o);
                st = hyprof_dwt_spectral(bad, &c, hyprof_wavelet_find("haar"), 1, &o);
                hyprof_cube_free(&o);
                g_checks++;
                if (st != HYPROF_ERR_NO_DEVICE)
                    FAIL("device %d: status %s, expected no device", ndev,
                         hyprof_status_text(st));
                else
                    printf("  device %d refused: %s\n", ndev, hyprof_ctx_last_error(bad));
            }
        }
        hyprof_cube_free(&c);
        hyprof_ctx_free(&bad);
    }

    if (argc >= 5) {
        size_t w = strtoull(argv[2], NULL, 10), h = strtoull(argv[3], NULL, 10),
               b = strtoull(argv[4], NULL, 10);
        hyprof_cube_t c;
        memset(&c, 0, sizeof c);
        if (w && h && b && load_raw(argv[1], w, h, b, &c) == 0) {
            test_cube(argv[1], &c, b < 7 ? b : 7, cpu, gpu, '?'); /* either covariance */
            hyprof_cube_free(&c);
        } else if (!(w && h && b)) {
            FAIL("bad dimensions %s %s %s", argv[2], argv[3], argv[4]);
        }
    } else if (argc > 1) {
        printf("usage: %s [RAW_FLOAT32_BSQ WIDTH HEIGHT BANDS]\n", argv[0]);
        g_failures++;
    }

    hyprof_ctx_free(&cpu);
    hyprof_ctx_free(&gpu);
    printf("%d checks, %d failure(s)\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
