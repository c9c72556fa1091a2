/* CPU / CUDA parity of the attribute profiles (hyprof_attribute_profiles,
 * hyprof_eap), through the public API only.
 *
 *   test_gpu_eap [--quick] [RAW W H B]
 *
 * --quick: the small cases only, no timing (for compute-sanitizer).
 * One line per case as it ends ("ok ..." with the CUDA call's time, or
 * FAIL). The first three tiny cases run with $HYPROF_EAP_TRACE=1 and print
 * the CUDA path's log, a line per kernel: a kernel that never ends is the one
 * after the last line. After $HYPROF_TEST_BUDGET_S seconds (45) only the
 * essential cases run (no large bands, no timing).
 * Seeded synthetic bands at Indian Pines (145 x 145) and Samson (95 x 95)
 * sizes and odd ones: random images with 2 to 16 levels, random images over
 * the whole range, smooth random fields with noise, plateaus (flat
 * rectangles on a smooth field), constant images, one pixel, one row, one
 * column; 8- and 16-bit levels, connectivity 4 and 8, without and with a
 * mask (10 % of the pixels). Every call asks for the four attributes at once
 * (area, diagonal: merge rule; std, inertia: min rule), so every plane of
 * each is compared. Then whole cubes through hyprof_eap (float planes,
 * nodata under a mask; by default 8-bit planes on the device, widened on the
 * host), also with $HYPROF_EAP_BAND_GROUP=1 and 2 (batches of bands; with 1
 * also $HYPROF_EAP_STAGE=100000, the 8-bit planes downloaded through staging
 * pieces that do not line up with the batches, with 2 $HYPROF_EAP_NARROW=0
 * and $HYPROF_EAP_PIN_ALL=0, float planes and the large outputs' download),
 * $HYPROF_EAP_OUT_CHUNK=1000 (one band at a time, its planes in chunks of
 * pixels: the path for bands whose planes do not fit the device),
 * $HYPROF_EAP_TILES=1 (8-bit trees by tiles and border joins instead of
 * flooding), $HYPROF_EAP_NARROW=0 with $HYPROF_EAP_PIN_PIECE=100000 (float
 * planes, the output page-locked and downloaded in pieces),
 * $HYPROF_EAP_WARP_UNITE=0 with $HYPROF_EAP_TILE_FLOOD=0 (the pixels'
 * flooding, each lane's unions on its own, rather than a warp's on one
 * root pooled; also on the larger bands),
 * $HYPROF_EAP_TILE_FLOOD=0 (8-bit trees by flooding the pixels, without the
 * tile floods; also on larger bands); larger bands with
 * $HYPROF_EAP_FLOOD_RUN=0 and 64 (after the tile floods, a launch for
 * every level, or runs only of the levels of at most 64 edges an image, the
 * others a launch each); band cases with
 * $HYPROF_EAP_NARROW=0 (16-bit output from 16-bit planes on the device);
 * and, optionally, the first 4 bands of a real cube given as raw
 * float32 BSQ (RAW, width W, height H, bands B).
 *
 * Checks: the CUDA planes equal the CPU planes bit for bit (the CPU backend
 * is exact against scikit-image, tests/test_eap.py); on a failure the count
 * of differing values, the largest difference and the first differing
 * plane and pixel are printed. The CUDA path must really have run.
 *
 * Timing (information only, never asserted): a 1096 x 715 x 8 synthetic cube
 * (Pavia Centre after the reduction to 8 features) with the paper's area
 * thresholds, host to host, median of 5 after a warm-up, next to one CPU run.
 * $HYPROF_TEST_TIMING=0 skips it.
 *
 * Exit 0 when all pass, 1 on any failure, 77 when there is no CUDA device. */
#define _POSIX_C_SOURCE 200809L
#include "hyprof/hyprof.h"
#include "hyprof/attribute.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_test_util.h"

/* ---- synthetic bands ----------------------------------------------------------- */

typedef enum { FEW, FULL, SMOOTH, PLATEAUS, CONSTANT } kind_t;
static const char *const kind_names[] = {"few", "full", "smooth", "plateaus", "constant"};

/* A smooth field in [0, 1]: a few random waves. */
static void smooth_field(double *v, size_t w, size_t h)
{
    double ax[4], ay[4], ph[4], amp[4], lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < 4; k++) {
        ax[k] = rng_uniform() * 0.3;
        ay[k] = rng_uniform() * 0.3;
        ph[k] = rng_uniform() * 6.283185307179586;
        amp[k] = 0.5 + rng_uniform();
    }
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++) {
            double s = 0.0;
            for (int k = 0; k < 4; k++)
                s += amp[k] * sin(ax[k] * (double)x + ay[k] * (double)y + ph[k]);
            v[y * w + x] = s;
            lo = s < lo ? s : lo;
            hi = s > hi ? s : hi;
        }
    for (size_t p = 0; p < w * h; p++)
        v[p] = hi > lo ? (v[p] - lo) / (hi - lo) : 0.0;
}

static void make_band(kind_t kind, size_t w, size_t h, unsigned levels, uint16_t *q)
{
    size_t n = w * h;
    unsigned top = levels - 1;
    double *v = malloc(n * sizeof *v);
    if (!v)
        exit(1);
    switch (kind) {
    case FEW: {
        unsigned k = 2 + (unsigned)(rng_next() % 15);
        unsigned step = top / (k - 1);
        for (size_t p = 0; p < n; p++)
            q[p] = (uint16_t)((rng_next() % k) * step);
        break;
    }
    case FULL:
        for (size_t p = 0; p < n; p++)
            q[p] = (uint16_t)(rng_next() % levels);
        break;
    case SMOOTH:
        smooth_field(v, w, h);
        for (size_t p = 0; p < n; p++) {
            double s = v[p] * 0.9 + 0.05 + 0.02 * rng_normal();
            s = s < 0 ? 0 : s > 1 ? 1 : s;
            q[p] = (uint16_t)floor(s * top + 0.5);
        }
        break;
    case PLATEAUS:
        smooth_field(v, w, h);
        for (size_t p = 0; p < n; p++)
            q[p] = (uint16_t)floor(v[p] * top + 0.5);
        for (int r = 0; r < 12; r++) {
            size_t x0 = rng_next() % w, y0 = rng_next() % h;
            size_t x1 = x0 + 1 + rng_next() % (w / 3 + 1), y1 = y0 + 1 + rng_next() % (h / 3 + 1);
            uint16_t l = (uint16_t)(rng_next() % levels);
            for (size_t y = y0; y < y1 && y < h; y++)
                for (size_t x = x0; x < x1 && x < w; x++)
                    q[y * w + x] = l;
        }
        break;
    case CONSTANT: {
        uint16_t l = (uint16_t)(rng_next() % levels);
        for (size_t p = 0; p < n; p++)
            q[p] = l;
        break;
    }
    }
    free(v);
}

/* ---- filters --------------------------------------------------------------------- */

static const double t_area[] = {1, 2, 5, 10, 36, 144, 1764};
static const double t_diag[] = {1.5, 3, 5, 12, 40};
static const double t_inertia[] = {0.17, 0.2, 0.3, 0.5, 1, 2.5};
static const double t_std8[] = {0.5, 1, 3, 10, 30};
static const double t_std16[] = {100, 256, 768, 2560, 7680};

static void all_filters(unsigned levels, hyprof_attribute_filter_t f[4])
{
    f[0] = (hyprof_attribute_filter_t){HYPROF_ATTRIBUTE_AREA, t_area, 7};
    f[1] = (hyprof_attribute_filter_t){HYPROF_ATTRIBUTE_STD, levels > 256 ? t_std16 : t_std8, 5};
    f[2] = (hyprof_attribute_filter_t){HYPROF_ATTRIBUTE_DIAGONAL, t_diag, 5};
    f[3] = (hyprof_attribute_filter_t){HYPROF_ATTRIBUTE_INERTIA, t_inertia, 6};
}

/* ---- progress ----------------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double g_t0;        /* start of the run */
static double g_budget_ms; /* after this, only the essential cases run */
static int over_budget(void) { return now_ms() - g_t0 > g_budget_ms; }

/* Debug log of the CUDA path: with $HYPROF_EAP_TRACE=1 a line per kernel. */
static void print_log(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    printf("  [log] %s\n", message);
    fflush(stdout);
}

/* ---- comparisons ------------------------------------------------------------------ */

static void report_u16(const char *label, const uint16_t *a, const uint16_t *b, size_t planes,
                       size_t w, size_t h, double ms)
{
    size_t n = w * h, bad = 0, first = 0;
    int worst = 0;
    for (size_t i = 0; i < planes * n; i++)
        if (a[i] != b[i]) {
            if (!bad)
                first = i;
            bad++;
            int d = abs((int)a[i] - (int)b[i]);
            worst = d > worst ? d : worst;
        }
    g_checks++;
    if (bad)
        FAIL("%s: %zu of %zu values differ (max |cuda - cpu| = %d); first: plane %zu, "
             "pixel (%zu, %zu): cpu %u, cuda %u",
             label, bad, planes * n, worst, first / n, first % n % w, first % n / w,
             (unsigned)a[first], (unsigned)b[first]);
    else
        printf("ok   %s: %zu values identical (cuda %.1f ms)\n", label, planes * n, ms);
}

static void report_f32(const char *label, const hyprof_cube_t *a, const hyprof_cube_t *b,
                       double ms)
{
    size_t n = a->width * a->height, total = n * a->bands, bad = 0, first = 0;
    double worst = 0.0;
    const float *x = a->data, *y = b->data;
    g_checks++;
    if (b->bands != a->bands || b->width != a->width || b->height != a->height) {
        FAIL("%s: cuda output %zux%zux%zu, cpu %zux%zux%zu", label, b->width, b->height,
             b->bands, a->width, a->height, a->bands);
        return;
    }
    for (size_t i = 0; i < total; i++)
        if (!same_float(x[i], y[i])) {
            if (!bad)
                first = i;
            bad++;
            double d = fabs((double)x[i] - (double)y[i]);
            if (!(d <= worst))
                worst = isnan(d) ? INFINITY : d;
        }
    if (bad)
        FAIL("%s: %zu of %zu values differ (max |cuda - cpu| = %g); first: plane %zu, "
             "pixel (%zu, %zu): cpu %g, cuda %g",
             label, bad, total, worst, first / n, first % n % a->width, first % n / a->width,
             (double)x[first], (double)y[first]);
    else
        printf("ok   %s: %zu values identical (cuda %.1f ms)\n", label, total, ms);
}

/* ---- one band through hyprof_attribute_profiles ----------------------------------- */

/* appended to the band cases' labels (the environment they run under) */
static const char *g_note = "";

/* variants: bit 0 plain 4-connectivity, bit 1 plain 8, bit 2 masked 4, bit 3 masked 8 */
static void band_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, kind_t kind, size_t w, size_t h,
                      unsigned levels, uint64_t seed, unsigned variants)
{
    size_t n = w * h;
    hyprof_attribute_filter_t f[4];
    all_filters(levels, f);
    size_t planes = hyprof_attribute_planes(f, 4);
    uint16_t *q = malloc(n * sizeof *q), *a = malloc(planes * n * sizeof *a),
             *b = malloc(planes * n * sizeof *b);
    uint8_t *mask = malloc(n);
    if (!q || !a || !b || !mask)
        exit(1);
    g_rng = seed;
    make_band(kind, w, h, levels, q);
    for (size_t p = 0; p < n; p++)
        mask[p] = rng_next() % 10 != 0;
    for (int masked = 0; masked < 2; masked++)
        for (int conn = 4; conn <= 8; conn += 4) {
            if (!(variants >> (2 * masked + conn / 8) & 1))
                continue;
            char label[160];
            snprintf(label, sizeof label, "%s %zux%zu, %u levels, connectivity %d%s%s",
                     kind_names[kind], w, h, levels, conn, masked ? ", masked" : "", g_note);
            const uint8_t *m = masked ? mask : NULL;
            memset(b, 0x5a, planes * n * sizeof *b);
            hyprof_status_t sc = hyprof_attribute_profiles(cpu, q, m, w, h, levels, conn, f, 4,
                                                           12345, a);
            double t0 = now_ms();
            hyprof_status_t sg = hyprof_attribute_profiles(gpu, q, m, w, h, levels, conn, f, 4,
                                                           12345, b);
            double ms = now_ms() - t0;
            g_checks++;
            if (sc != HYPROF_OK || sg != HYPROF_OK) {
                FAIL("%s: cpu %s, cuda %s (%s)", label, hyprof_status_text(sc),
                     hyprof_status_text(sg), hyprof_ctx_last_error(sg ? gpu : cpu));
                continue;
            }
            if (!expect_cuda(gpu, label))
                continue;
            report_u16(label, a, b, planes, w, h, ms);
        }
    free(q);
    free(a);
    free(b);
    free(mask);
}

/* ---- several bands through hyprof_attribute_profiles_bands --------------------- */

/* The band function: each band's planes against the CPU's of that band,
 * in band order; stops after `stop_after` bands when it is set. */
typedef struct {
    const uint16_t *ref;   /* every band's CPU planes */
    size_t count, planes, w, h, next, stop_after;
    int order_bad;
    char label[200];
} bands_check_t;

static int bands_check(void *user, size_t band, const uint16_t *planes)
{
    bands_check_t *c = user;
    if (band != c->next)
        c->order_bad = 1;
    c->next = band + 1;
    char label[260];
    snprintf(label, sizeof label, "%s, band %zu", c->label, band + 1);
    report_u16(label, c->ref + band * c->count, planes, c->planes, c->w, c->h, 0.0);
    return c->stop_after && c->next >= c->stop_after;
}

/* variant 0: pipelined (8-bit planes widened on the host), 1: 16-bit planes
 * ($HYPROF_EAP_NARROW=0), each band's levels uploaded in turn
 * ($HYPROF_EAP_PREFETCH=0), 2: not pipelined ($HYPROF_EAP_PIPELINE=0), 3: planes in
 * chunks of 1000 pixels, 4: stopped by the function after 2 bands. */
static void bands_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, size_t w, size_t h, size_t nb,
                       uint64_t seed)
{
    size_t n = w * h;
    hyprof_attribute_filter_t f[4];
    all_filters(256, f);
    size_t planes = hyprof_attribute_planes(f, 4);
    uint16_t *q = malloc(nb * n * sizeof *q), *ref = malloc(nb * planes * n * sizeof *ref),
             *buf = malloc(planes * n * sizeof *buf);
    uint8_t *mask = malloc(n);
    if (!q || !ref || !buf || !mask)
        exit(1);
    g_rng = seed;
    for (size_t b = 0; b < nb; b++)
        make_band((kind_t)(b % 4), w, h, 256, q + b * n);
    for (size_t p = 0; p < n; p++)
        mask[p] = rng_next() % 10 != 0;
    for (size_t b = 0; b < nb; b++)
        if (hyprof_attribute_profiles(cpu, q + b * n, mask, w, h, 256, 8, f, 4, 777,
                                      ref + b * planes * n) != HYPROF_OK) {
            FAIL("bands: cpu: %s", hyprof_ctx_last_error(cpu));
            goto done;
        }
    static const char *const names[] = {"pipelined", "16-bit planes, no prefetch",
                                         "not pipelined",
                                         "planes in chunks of 1000 pixels",
                                         "stopped after 2 bands"};
    for (int v = 0; v < 5; v++) {
        bands_check_t c = {ref, planes * n, planes, w, h, 0, v == 4 ? 2 : 0, 0, ""};
        snprintf(c.label, sizeof c.label, "bands %zux%zux%zu masked, 4 attributes, 8-conn, %s",
                 w, h, nb, names[v]);
        if (v == 1) {
            setenv("HYPROF_EAP_NARROW", "0", 1);
            setenv("HYPROF_EAP_PREFETCH", "0", 1);
        }
        if (v == 2)
            setenv("HYPROF_EAP_PIPELINE", "0", 1);
        if (v == 3)
            setenv("HYPROF_EAP_OUT_CHUNK", "1000", 1);
        memset(buf, 0x5a, planes * n * sizeof *buf);
        hyprof_status_t st = hyprof_attribute_profiles_bands(gpu, q, nb, mask, w, h, 256, 8, f, 4,
                                                             777, buf, bands_check, &c);
        unsetenv("HYPROF_EAP_NARROW");
        unsetenv("HYPROF_EAP_PIPELINE");
        unsetenv("HYPROF_EAP_PREFETCH");
        unsetenv("HYPROF_EAP_OUT_CHUNK");
        g_checks++;
        size_t want = v == 4 ? 2 : nb;
        if (v == 4 ? st != HYPROF_ERR_CANCELLED : st != HYPROF_OK)
            FAIL("%s: status %d: %s", c.label, (int)st, hyprof_ctx_last_error(gpu));
        else if (c.order_bad || c.next != want)
            FAIL("%s: %zu bands handed over (%zu expected)%s", c.label, c.next, want,
                 c.order_bad ? ", out of order" : "");
        else if (expect_cuda(gpu, c.label))
            printf("ok   %s: %zu bands in order\n", c.label, c.next);
    }
done:
    free(q);
    free(ref);
    free(buf);
    free(mask);
}

/* ---- whole cubes through hyprof_eap ------------------------------------------------ */

static int make_cube(hyprof_cube_t *c, size_t w, size_t h, size_t bands, uint64_t seed,
                     double masked)
{
    g_rng = seed;
    if (hyprof_cube_alloc(c, HYPROF_FLOAT32, w, h, bands) != HYPROF_OK)
        return -1;
    size_t n = w * h;
    double *v = malloc(n * sizeof *v);
    if (!v)
        return -1;
    float *x = c->data;
    for (size_t b = 0; b < bands; b++) {
        smooth_field(v, w, h);
        double scale = 1000.0 / (double)(b + 1);
        for (size_t p = 0; p < n; p++)
            x[b * n + p] = (float)(scale * (v[p] + 0.03 * rng_normal()));
    }
    free(v);
    if (masked > 0.0) {
        if (hyprof_cube_alloc_mask(c) != HYPROF_OK)
            return -1;
        c->nodata = -9999.0;
        c->has_nodata = 1;
        for (size_t y = 0; y < h; y++)
            for (size_t xx = 0; xx < w; xx++)
                if (rng_uniform() < masked) {
                    c->mask[(ptrdiff_t)y * c->mask_stride_y + (ptrdiff_t)xx] = 0;
                    for (size_t b = 0; b < bands; b++)
                        x[b * n + y * w + xx] = -9999.0f;
                }
    }
    return 0;
}

static void cube_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const char *name,
                      const hyprof_cube_t *c, const hyprof_eap_params_t *p, int groups)
{
    hyprof_cube_t ref, got;
    char label[160];
    if (hyprof_eap(cpu, c, p, &ref, NULL) != HYPROF_OK) {
        FAIL("%s: cpu: %s", name, hyprof_ctx_last_error(cpu));
        return;
    }
    for (int g = 0; g <= (groups ? 14 : 0); g++) {
        if (g >= 9) { /* the batch's pipeline: groups of bands' downloads overlapping */
            static const char *const what[] = {
                "no pipeline (the whole batch's download after its compute)",
                "pipelined in groups of 2 bands, attributes of all bands first, 8-bit planes "
                "staged in pieces of 100000 bytes",
                "pipelined, float planes on the device, output page-locked for the call",
                "pipelined, float planes, pageable copies",
                "pipelined in groups of 2 bands, attributes of all bands first, page-locked "
                "output (hyprof_pinned_cache_set), every other group widened on the host",
                "pipelined, page-locked output, float planes only"};
            if (g == 9)
                setenv("HYPROF_EAP_PIPE", "0", 1);
            if (g == 10 || g == 13) {
                setenv("HYPROF_EAP_PIPE_BANDS", "2", 1);
                setenv("HYPROF_EAP_PIPE_ACC", "all", 1);
            }
            if (g == 10 || g == 12) /* (pageable: not pipelined by default) */
                setenv("HYPROF_EAP_PIPE", "1", 1);
            if (g == 10)
                setenv("HYPROF_EAP_STAGE", "100000", 1);
            if (g == 11 || g == 12)
                setenv("HYPROF_EAP_NARROW", "0", 1);
            if (g == 12)
                setenv("HYPROF_EAP_PIN", "0", 1);
            if (g == 13 || g == 14)
                hyprof_pinned_cache_set((size_t)1 << 30);
            if (g == 14)
                setenv("HYPROF_EAP_HYBRID", "0", 1);
            snprintf(label, sizeof label, "%s, %s", name, what[g - 9]);
        } else if (g == 8) { /* the output from the page-locked cache, primed with garbage */
            hyprof_cube_t junk;
            hyprof_pinned_cache_set((size_t)1 << 30);
            if (hyprof_cube_alloc_pinned(&junk, HYPROF_FLOAT32, ref.width, ref.height,
                                         ref.bands) == HYPROF_OK) {
                memset(junk.data, 0xff, ref.width * ref.height * ref.bands * sizeof(float));
                hyprof_cube_free(&junk);
            }
            snprintf(label, sizeof label, "%s, page-locked output (hyprof_pinned_cache_set)",
                     name);
        } else if (g == 7) { /* the 8-bit trees by the pixels' flooding (no tile floods) */
            setenv("HYPROF_EAP_TILE_FLOOD", "0", 1);
            snprintf(label, sizeof label, "%s, pixels' flooding", name);
        } else if (g == 6) { /* each lane's unions on its own (the default pools a warp's) */
            setenv("HYPROF_EAP_WARP_UNITE", "0", 1); /* (the pixels' flooding's) */
            setenv("HYPROF_EAP_TILE_FLOOD", "0", 1);
            snprintf(label, sizeof label, "%s, pixels' flooding, unions lane by lane", name);
        } else if (g == 5) { /* the planes as float on the device, pinned output in pieces */
            setenv("HYPROF_EAP_NARROW", "0", 1);
            setenv("HYPROF_EAP_PIN_PIECE", "100000", 1);
            snprintf(label, sizeof label,
                     "%s, float planes on the device, output prepared in pieces of 100000 "
                     "bytes", name);
        } else if (g == 3) { /* the planes of one band at a time in chunks of 1000 pixels */
            setenv("HYPROF_EAP_OUT_CHUNK", "1000", 1);
            snprintf(label, sizeof label, "%s, planes in chunks of 1000 pixels", name);
        } else if (g == 4) { /* the 8-bit trees by tiles, as the 16-bit ones */
            setenv("HYPROF_EAP_TILES", "1", 1);
            snprintf(label, sizeof label, "%s, trees by tiles", name);
        } else if (g) {
            char v[8];
            snprintf(v, sizeof v, "%d", g);
            setenv("HYPROF_EAP_BAND_GROUP", v, 1);
            if (g == 1) /* staging pieces that do not line up with the batches */
                setenv("HYPROF_EAP_STAGE", "100000", 1);
            if (g == 2) { /* the float planes' download of large outputs */
                setenv("HYPROF_EAP_NARROW", "0", 1);
                setenv("HYPROF_EAP_PIN_ALL", "0", 1);
            }
            snprintf(label, sizeof label, "%s, batches of %d band%s%s", name, g, g > 1 ? "s" : "",
                     g == 2 ? ", float planes, output pinned piece by piece"
                            : ", 8-bit planes staged in pieces of 100000 bytes");
        } else {
            snprintf(label, sizeof label, "%s", name);
        }
        double t0 = now_ms();
        hyprof_status_t st = hyprof_eap(gpu, c, p, &got, NULL);
        double ms = now_ms() - t0;
        unsetenv("HYPROF_EAP_BAND_GROUP");
        unsetenv("HYPROF_EAP_PIN_ALL");
        unsetenv("HYPROF_EAP_OUT_CHUNK");
        unsetenv("HYPROF_EAP_PIN_PIECE");
        unsetenv("HYPROF_EAP_TILES");
        unsetenv("HYPROF_EAP_NARROW");
        unsetenv("HYPROF_EAP_STAGE");
        unsetenv("HYPROF_EAP_WARP_UNITE");
        unsetenv("HYPROF_EAP_TILE_FLOOD");
        unsetenv("HYPROF_EAP_PIPE");
        unsetenv("HYPROF_EAP_PIPE_BANDS");
        unsetenv("HYPROF_EAP_PIN");
        unsetenv("HYPROF_EAP_HYBRID");
        unsetenv("HYPROF_EAP_PIPE_ACC");
        g_checks++;
        if (st != HYPROF_OK) {
            FAIL("%s: cuda: %s", label, hyprof_ctx_last_error(gpu));
            hyprof_pinned_cache_set(0);
            continue;
        }
        if ((g == 8 || g >= 13) && !(got.owns & HYPROF_OWNS_PINNED))
            FAIL("%s: the output is not page-locked", label);
        if (expect_cuda(gpu, label))
            report_f32(label, &ref, &got, ms);
        hyprof_cube_free(&got);
        hyprof_pinned_cache_set(0);
    }
    hyprof_cube_free(&ref);
}

/* Cancels at the second progress report strictly between 0 and 1 (the
 * pipelined batch reports after each group of bands). */
typedef struct {
    int midway;
    double at;
} cancel_t;
static int cancel_midway(void *user, double fraction, const char *stage)
{
    cancel_t *c = user;
    (void)stage;
    if (fraction > 0.0 && fraction < 1.0 && ++c->midway == 2) {
        c->at = fraction;
        return 1;
    }
    return 0;
}

/* A cancel in the middle of a pipelined batch (with pageable and with
 * page-locked output): HYPROF_ERR_CANCELLED, no output cube; and no copy
 * of the cancelled call lands later in the page-locked block its output
 * had (the next cube taken from the cache keeps what is written into it
 * while the device runs another call). */
static void cancel_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const hyprof_cube_t *c,
                        const hyprof_eap_params_t *p)
{
    for (int pinned = 0; pinned < 2; pinned++) {
        char label[160];
        snprintf(label, sizeof label, "cancel midway through a pipelined batch, %s output",
                 pinned ? "page-locked" : "pageable");
        hyprof_ctx_t *ctx = hyprof_ctx_new();
        cancel_t cc = {0, 0.0};
        hyprof_cube_t got;
        memset(&got, 0, sizeof got);
        if (pinned)
            hyprof_pinned_cache_set((size_t)1 << 30);
        hyprof_status_t st = HYPROF_ERR_ARGUMENT;
        if (ctx && hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CUDA) == HYPROF_OK) {
            hyprof_ctx_set_progress(ctx, cancel_midway, &cc);
            setenv("HYPROF_EAP_PIPE", "1", 1); /* (pageable: not pipelined by default) */
            st = hyprof_eap(ctx, c, p, &got, NULL);
            unsetenv("HYPROF_EAP_PIPE");
        }
        g_checks++;
        if (st != HYPROF_ERR_CANCELLED || got.data || cc.midway < 2)
            FAIL("%s: status %d (want %d), output %s, %d progress reports midway", label,
                 (int)st, (int)HYPROF_ERR_CANCELLED, got.data ? "left" : "none", cc.midway);
        else
            printf("ok   %s: cancelled at %.3f, no output\n", label, cc.at);
        hyprof_cube_free(&got);
        hyprof_ctx_free(&ctx);
        if (pinned) {
            size_t planes = hyprof_attribute_planes(p->filters, p->nfilters);
            size_t count = c->width * c->height * c->bands * planes;
            hyprof_cube_t block, ref, again;
            g_checks++;
            if (hyprof_cube_alloc_pinned(&block, HYPROF_FLOAT32, c->width, c->height,
                                         c->bands * planes) != HYPROF_OK) {
                FAIL("%s: no page-locked block", label);
            } else {
                memset(block.data, 0x5a, count * sizeof(float));
                hyprof_status_t s2 = hyprof_eap(gpu, c, p, &again, NULL);
                hyprof_status_t s1 = hyprof_eap(cpu, c, p, &ref, NULL);
                size_t bad = 0;
                const unsigned char *b = block.data;
                for (size_t i = 0; i < count * sizeof(float); i++)
                    bad += b[i] != 0x5a;
                if (s1 != HYPROF_OK || s2 != HYPROF_OK || bad)
                    FAIL("%s: after the cancel: %zu bytes of a reused block overwritten, "
                         "next call %s", label, bad, s2 == HYPROF_OK ? "ok" : "failed");
                else
                    printf("ok   %s: the reused block untouched, the next call runs\n",
                           label);
                if (s1 == HYPROF_OK && s2 == HYPROF_OK)
                    report_f32("the call after the cancel", &ref, &again, 0.0);
                if (s1 == HYPROF_OK)
                    hyprof_cube_free(&ref);
                if (s2 == HYPROF_OK)
                    hyprof_cube_free(&again);
                hyprof_cube_free(&block);
            }
            hyprof_pinned_cache_set(0);
        }
    }
}

static void cubes(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu)
{
    hyprof_eap_params_t p;
    hyprof_eap_params_default(&p);
    hyprof_cube_t c;
    /* the pipeline's edges: one band (no pipeline), an odd number of bands */
    if (make_cube(&c, 95, 95, 1, 103, 0.0) == 0)
        cube_case(cpu, gpu, "cube 95x95x1, paper defaults", &c, &p, 1);
    hyprof_cube_free(&c);
    if (make_cube(&c, 120, 77, 7, 104, 0.03) == 0) {
        cube_case(cpu, gpu, "cube 120x77x7 masked, paper defaults", &c, &p, 1);
        cancel_case(cpu, gpu, &c, &p);
    }
    hyprof_cube_free(&c);
    if (make_cube(&c, 145, 145, 5, 101, 0.0) == 0)
        cube_case(cpu, gpu, "cube indian-pines-like 145x145x5, paper defaults", &c, &p, 1);
    hyprof_cube_free(&c);
    if (make_cube(&c, 95, 95, 4, 102, 0.05) == 0) {
        hyprof_attribute_filter_t f[4];
        all_filters(256, f);
        hyprof_eap_params_t q = p;
        q.filters = f;
        q.nfilters = 4;
        q.connectivity = 8;
        cube_case(cpu, gpu, "cube samson-like 95x95x4 masked, 4 attributes, 8-conn", &c, &q, 1);
        all_filters(65536, f);
        q.levels = 65536;
        q.connectivity = 4;
        cube_case(cpu, gpu, "cube samson-like 95x95x4 masked, 4 attributes, 16-bit", &c, &q, 0);
    }
    hyprof_cube_free(&c);
}

static void raw_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const char *path, size_t w, size_t h,
                     size_t bands)
{
    hyprof_cube_t c;
    if (load_raw(path, w, h, bands, &c) != 0)
        return;
    if (bands > 4)
        c.bands = 4; /* BSQ: the first 4 bands are the first 4 planes */
    hyprof_eap_params_t p;
    hyprof_eap_params_default(&p);
    char label[200];
    snprintf(label, sizeof label, "raw %s (first %zu bands), paper defaults", path, c.bands);
    cube_case(cpu, gpu, label, &c, &p, 0);
    hyprof_attribute_filter_t f[4];
    all_filters(256, f);
    p.filters = f;
    p.nfilters = 4;
    p.connectivity = 8;
    snprintf(label, sizeof label, "raw %s, 4 attributes, 8-conn", path);
    cube_case(cpu, gpu, label, &c, &p, 0);
    c.bands = bands;
    hyprof_cube_free(&c);
}

/* ---- timing ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Keeps the CUDA path's stage message (debug level). */
static void keep_stages(void *user, hyprof_log_level_t level, const char *message)
{
    (void)level;
    if (strstr(message, "device ms"))
        snprintf((char *)user, 512, "%s", message);
}

static void timing(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu)
{
    static char stages[512];
    const char *s = getenv("HYPROF_TEST_TIMING");
    if (s && strcmp(s, "0") == 0)
        return;
    hyprof_cube_t c, out;
    if (make_cube(&c, 1096, 715, 8, 7, 0.0) != 0)
        return;
    hyprof_eap_params_t p;
    hyprof_eap_params_default(&p);
    hyprof_ctx_set_log(gpu, keep_stages, stages);
    for (int levels = 256; levels <= 65536; levels *= 256) {
        p.levels = (unsigned)levels;
        double t0 = now_ms();
        if (hyprof_eap(cpu, &c, &p, &out, NULL) != HYPROF_OK)
            break;
        double tcpu = now_ms() - t0;
        hyprof_cube_free(&out);
        double t[6];
        int ok = 1;
        for (int i = 0; i < 6 && ok; i++) {
            t0 = now_ms();
            ok = hyprof_eap(gpu, &c, &p, &out, NULL) == HYPROF_OK;
            t[i] = now_ms() - t0;
            hyprof_cube_free(&out);
        }
        if (!ok)
            break;
        qsort(t + 1, 5, sizeof *t, cmp_double);
        printf("timing: eap 1096x715x8, area x 7, %d levels, host to host: cuda median %.2f ms "
               "(min %.2f, max %.2f, first %.2f), cpu %.1f ms\n",
               levels, t[3], t[1], t[5], t[0], tcpu);
        printf("timing:   last cuda run: %s\n", stages);
    }
    hyprof_ctx_set_log(gpu, NULL, NULL);
    hyprof_cube_free(&c);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_t0 = now_ms();
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (quick) {
        argv++;
        argc--;
    }
    const char *budget = getenv("HYPROF_TEST_BUDGET_S");
    g_budget_ms = 1e3 * (budget ? atof(budget) : 45.0);
    printf("test_gpu_eap: %s, %s\n", hyprof_version(), hyprof_build_info());
    int ndev = hyprof_cuda_device_count();
    if (ndev <= 0) {
        printf("test_gpu_eap: no CUDA device (or a CPU-only build): skipped\n");
        return SKIP_CODE;
    }
    char name[256];
    size_t total = 0, freeb = 0;
    if (hyprof_cuda_device_info(0, name, sizeof name, &total, &freeb) == HYPROF_OK)
        printf("device 0: %s, %.1f GiB, %.1f GiB free\n", name, (double)total / 1073741824.0,
               (double)freeb / 1073741824.0);
    hyprof_ctx_t *cpu = hyprof_ctx_new(), *gpu = hyprof_ctx_new();
    if (!cpu || !gpu || hyprof_ctx_set_backend(cpu, HYPROF_BACKEND_CPU) != HYPROF_OK ||
        hyprof_ctx_set_backend(gpu, HYPROF_BACKEND_CUDA) != HYPROF_OK) {
        printf("FAIL: contexts\n");
        return 1;
    }

    /* Tiny cases first, each kernel traced: a kernel that never ends is the
     * line after the last one printed. */
    setenv("HYPROF_EAP_TRACE", "1", 1);
    hyprof_ctx_set_log(gpu, print_log, NULL);
    uint64_t seed = 1000;
    band_case(cpu, gpu, FEW, 4, 4, 256, seed++, 1);
    band_case(cpu, gpu, FULL, 5, 3, 256, seed++, 2);
    band_case(cpu, gpu, SMOOTH, 40, 35, 256, seed++, 1);
    unsetenv("HYPROF_EAP_TRACE");
    hyprof_ctx_set_log(gpu, NULL, NULL);

    static const size_t sizes[][2] = {{1, 1}, {1, 9}, {13, 1}, {37, 23}, {95, 95}, {145, 145}};
    for (unsigned levels = 256; levels <= 65536; levels *= 256)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int k = FEW; k <= CONSTANT; k++)
                band_case(cpu, gpu, (kind_t)k, sizes[s][0], sizes[s][1], levels, seed++,
                          sizes[s][0] * sizes[s][1] >= 1000 ? 15u : 9u);
    /* 16-bit output from 16-bit planes on the device (the default: 8-bit
     * planes widened on the host), nodata under the masks */
    setenv("HYPROF_EAP_NARROW", "0", 1);
    g_note = ", 16-bit planes on the device";
    for (int k = FEW; k <= PLATEAUS; k++)
        band_case(cpu, gpu, (kind_t)k, 145, 145, 256, seed++, 15u);
    unsetenv("HYPROF_EAP_NARROW");
    g_note = "";
    bands_case(cpu, gpu, 145, 145, 5, seed++);
    bands_case(cpu, gpu, 37, 23, 3, seed++);
    cubes(cpu, gpu);
    if (!quick && !over_budget()) { /* larger bands: long chains, big plateaus */
        band_case(cpu, gpu, PLATEAUS, 640, 480, 256, seed++, 9);
        band_case(cpu, gpu, FEW, 1000, 700, 256, seed++, 1);
        setenv("HYPROF_EAP_WARP_UNITE", "0", 1);
        setenv("HYPROF_EAP_TILE_FLOOD", "0", 1);
        g_note = ", pixels' flooding, unions lane by lane";
        band_case(cpu, gpu, PLATEAUS, 640, 480, 256, seed++, 15);
        band_case(cpu, gpu, FEW, 1000, 700, 256, seed++, 3);
        band_case(cpu, gpu, SMOOTH, 1000, 700, 256, seed++, 3);
        unsetenv("HYPROF_EAP_WARP_UNITE");
        unsetenv("HYPROF_EAP_TILE_FLOOD");
        setenv("HYPROF_EAP_FLOOD_RUN", "0", 1);
        g_note = ", tile floods, then a launch a level";
        band_case(cpu, gpu, PLATEAUS, 640, 480, 256, seed++, 5);
        band_case(cpu, gpu, SMOOTH, 1000, 700, 256, seed++, 1);
        setenv("HYPROF_EAP_FLOOD_RUN", "64", 1);
        g_note = ", tile floods, then runs of the levels of up to 64 edges";
        band_case(cpu, gpu, FEW, 1000, 700, 256, seed++, 1);
        unsetenv("HYPROF_EAP_FLOOD_RUN");
        setenv("HYPROF_EAP_TILE_FLOOD", "0", 1);
        g_note = ", pixels' flooding";
        band_case(cpu, gpu, PLATEAUS, 640, 480, 256, seed++, 5);
        band_case(cpu, gpu, SMOOTH, 1000, 700, 256, seed++, 1);
        unsetenv("HYPROF_EAP_TILE_FLOOD");
        g_note = "";
        if (!over_budget())
            band_case(cpu, gpu, SMOOTH, 640, 480, 65536, seed++, 1);
    }
    if (argc == 5)
        raw_case(cpu, gpu, argv[1], (size_t)strtoull(argv[2], NULL, 10),
                 (size_t)strtoull(argv[3], NULL, 10), (size_t)strtoull(argv[4], NULL, 10));
    if (g_failures == 0 && !quick && !over_budget())
        timing(cpu, gpu);

    hyprof_ctx_free(&cpu);
    hyprof_ctx_free(&gpu);
    printf("test_gpu_eap: %d checks, %d failures, %.1f s\n", g_checks, g_failures,
           (now_ms() - g_t0) / 1e3);
    return g_failures ? 1 : 0;
}
