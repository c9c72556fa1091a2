/* CPU / CUDA parity of the attribute profiles (hyprof_attribute_profiles,
 * hyprof_attribute_profiles_bands, hyprof_eap), through the public API only.
 *
 *   test_gpu_eap [--quick] [RAW W H B]
 *
 * --quick: the small cases only, no timing (for compute-sanitizer).
 * One line per case as it ends ("ok ..." with the CUDA call's time, or
 * FAIL). The first three tiny cases run with HYPROF_LOG=debug and print the
 * CUDA path's log, a line per kernel: a kernel that never ends is the one
 * after the last line. After $HYPROF_TEST_BUDGET_S seconds (45) only the
 * essential cases run (no large bands, no timing).
 *
 * The CUDA path has one default and these fallbacks, each covered here:
 * - trees: tile floods (8-bit levels) and the pixels' flooding (16-bit
 *   levels; also taken by 8-bit images of 2^29 pixels or more, which no
 *   test here reaches);
 * - planes: 8-bit on the device widened on the host (8-bit levels), or in
 *   the output's type: 16-bit levels, the caller's page-locked output
 *   (hyprof_cube_alloc_pinned, hyprof_pinned_cache_set; then the batch is
 *   pipelined and float planes go as 8-bit every other band), chunks;
 * - device memory (HYPROF_DEVICE_MEMORY caps it; the smallest caps that
 *   give a plan are searched for, and the plan read from the debug log):
 *   batches of 1 and 2 bands, one band with its planes in chunks of pixels,
 *   too little for one band's trees (HYPROF_ERR_DEVICE_MEMORY, and `auto`
 *   falls back to the CPU); for hyprof_attribute_profiles_bands, one planes
 *   slot instead of two. Chunks are reachable only where a band's 8-bit
 *   planes outgrow the least chunk's (4096 pixels) in the output's type: a
 *   "note" line says so for the smaller sizes;
 * - masks, connectivity 4 and 8, cancellation midway through a batch.
 * Not reachable here: outputs over 8 GB (page-locked 1 GB at a time).
 * The kernels do not depend on the compute capability: the device at hand
 * runs the same code as any other.
 *
 * Seeded synthetic bands at Indian Pines (145 x 145) and Samson (95 x 95)
 * sizes and odd ones: random images with 2 to 16 levels, random images over
 * the whole range, smooth random fields with noise, plateaus (flat
 * rectangles on a smooth field), constant images, one pixel, one row, one
 * column; 8- and 16-bit levels, connectivity 4 and 8, without and with a
 * mask (10 % of the pixels). Every call asks for the four attributes at once
 * (area, diagonal: merge rule; std, inertia: min rule), so every plane of
 * each is compared. Then whole cubes through hyprof_eap (float planes,
 * nodata under a mask) and, optionally, the first 4 bands of a real cube
 * given as raw float32 BSQ (RAW, width W, height H, bands B).
 *
 * Checks: the CUDA planes equal the CPU planes bit for bit (the CPU backend
 * is exact against scikit-image, tests/test_eap.py); on a failure the count
 * of differing values, the largest difference and the first differing
 * plane and pixel are printed. The CUDA path must really have run, and took
 * the plan the case is for.
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
#include "hyprof/core.h"
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

/* Debug log of the CUDA path: with HYPROF_LOG=debug a line per kernel. */
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

/* ---- device-memory caps ------------------------------------------------------------ */

/* What the CUDA path's debug lines said about its plan. */
typedef struct {
    size_t batch;  /* bands a batch */
    int chunks;    /* one band, its planes in chunks of pixels */
    int overlap;   /* bands one by one, downloads overlapping the next band */
    int pipelined; /* a batch in groups, downloads overlapping the compute */
    int fallback;  /* auto: fell back to the CPU */
} plan_t;

static void keep_plan(void *user, hyprof_log_level_t level, const char *message)
{
    plan_t *p = user;
    const char *s = strstr(message, "in batches of ");
    (void)level;
    if (s)
        p->batch = (size_t)strtoull(s + 14, NULL, 10);
    if (strstr(message, "its planes in chunks of"))
        p->chunks = 1;
    if (strstr(message, "downloads overlapping the next band"))
        p->overlap = 1;
    if (strstr(message, "pipelined"))
        p->pipelined = 1;
    if (strstr(message, "falling back to the CPU"))
        p->fallback = 1;
}

typedef hyprof_status_t (*call_fn)(hyprof_ctx_t *ctx, void *user);
static const size_t kMargin = (size_t)64 << 20; /* the CUDA paths' least planning margin */
static const size_t kStep = (size_t)4 << 10;

static const size_t kNoCap = (size_t)1 << 62;

/* call(ctx) under a device-memory cap of the margin + extra bytes (kNoCap:
 * none), the plan it took in *p. */
static hyprof_status_t capped(hyprof_ctx_t *ctx, size_t extra, call_fn call, void *user,
                              plan_t *p)
{
    char v[32];
    snprintf(v, sizeof v, "%zu", kMargin + extra);
    if (extra != kNoCap)
        setenv("HYPROF_DEVICE_MEMORY", v, 1);
    memset(p, 0, sizeof *p);
    hyprof_ctx_set_log(ctx, keep_plan, p);
    hyprof_status_t st = call(ctx, user);
    hyprof_ctx_set_log(ctx, NULL, NULL);
    unsetenv("HYPROF_DEVICE_MEMORY");
    return st;
}

/* The least extra (a multiple of kStep, up to 4 GiB) at which the call
 * succeeds with at least `batch` bands a batch (0: any plan, chunks too);
 * 0 when there is none (then a FAIL). */
static size_t least_extra(hyprof_ctx_t *gpu, call_fn call, void *user, size_t batch,
                          const char *label)
{
    size_t lo = 0, hi = ((size_t)4 << 30) / kStep; /* ok(hi) assumed, checked below */
    plan_t p;
    hyprof_status_t st = capped(gpu, hi * kStep, call, user, &p);
    if (st != HYPROF_OK || p.batch < batch) {
        FAIL("%s: no plan of %zu band(s) a batch under a 4 GiB cap (%s)", label, batch,
             hyprof_ctx_last_error(gpu));
        return 0;
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        st = capped(gpu, mid * kStep, call, user, &p);
        if (st == HYPROF_OK && p.batch >= batch && (batch == 0 || !p.chunks))
            hi = mid;
        else
            lo = mid;
    }
    return hi * kStep;
}

/* ---- one band through hyprof_attribute_profiles ----------------------------------- */

/* variants: bit 0 plain 4-connectivity, bit 1 plain 8, bit 2 masked 4, bit 3 masked 8;
 * with `pinned`, the CUDA output page-locked (the planes in 16 bits on the
 * device, copied straight into it) */
static void band_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, kind_t kind, size_t w, size_t h,
                      unsigned levels, uint64_t seed, unsigned variants, int pinned)
{
    size_t n = w * h;
    hyprof_attribute_filter_t f[4];
    all_filters(levels, f);
    size_t planes = hyprof_attribute_planes(f, 4);
    hyprof_cube_t locked = {0};
    uint16_t *q = malloc(n * sizeof *q), *a = malloc(planes * n * sizeof *a), *b = NULL;
    if (pinned && hyprof_cube_alloc_pinned(&locked, HYPROF_UINT16, w, h, planes) == HYPROF_OK)
        b = locked.data;
    else if (!pinned)
        b = malloc(planes * n * sizeof *b);
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
                     kind_names[kind], w, h, levels, conn, masked ? ", masked" : "",
                     pinned ? ", page-locked output" : "");
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
    if (pinned)
        hyprof_cube_free(&locked);
    else
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

/* One hyprof_attribute_profiles_bands call (a call_fn). */
typedef struct {
    const uint16_t *q;
    size_t nb, w, h;
    unsigned levels;
    const uint8_t *mask;
    const hyprof_attribute_filter_t *f;
    uint16_t *buf;
    bands_check_t *check; /* null: the planes are not looked at (the cap search) */
} bands_call_t;

static int bands_ignore(void *user, size_t band, const uint16_t *planes)
{
    (void)user;
    (void)band;
    (void)planes;
    return 0;
}

static hyprof_status_t bands_call(hyprof_ctx_t *ctx, void *user)
{
    bands_call_t *c = user;
    memset(c->buf, 0x5a, hyprof_attribute_planes(c->f, 4) * c->w * c->h * sizeof *c->buf);
    return hyprof_attribute_profiles_bands(ctx, c->q, c->nb, c->mask, c->w, c->h, c->levels, 8,
                                           c->f, 4, 777, c->buf,
                                           c->check ? bands_check : bands_ignore, c->check);
}

/* variant 0: two planes slots (band b's compute overlapping band b - 1's
 * download), 1: one slot (the least device memory for a band), 2: planes in
 * chunks of pixels (less), 3: stopped by the function after 2 bands. With
 * 16-bit levels (planes in 16 bits on the device) variants 0 and 3. */
static void bands_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, size_t w, size_t h, size_t nb,
                       unsigned levels, uint64_t seed)
{
    size_t n = w * h;
    hyprof_attribute_filter_t f[4];
    all_filters(levels, f);
    size_t planes = hyprof_attribute_planes(f, 4);
    uint16_t *q = malloc(nb * n * sizeof *q), *ref = malloc(nb * planes * n * sizeof *ref),
             *buf = malloc(planes * n * sizeof *buf);
    uint8_t *mask = malloc(n);
    if (!q || !ref || !buf || !mask)
        exit(1);
    g_rng = seed;
    for (size_t b = 0; b < nb; b++)
        make_band((kind_t)(b % 4), w, h, levels, q + b * n);
    for (size_t p = 0; p < n; p++)
        mask[p] = rng_next() % 10 != 0;
    for (size_t b = 0; b < nb; b++)
        if (hyprof_attribute_profiles(cpu, q + b * n, mask, w, h, levels, 8, f, 4, 777,
                                      ref + b * planes * n) != HYPROF_OK) {
            FAIL("bands: cpu: %s", hyprof_ctx_last_error(cpu));
            goto done;
        }
    static const char *const names[] = {"two planes slots", "one planes slot",
                                         "planes in chunks of pixels", "stopped after 2 bands"};
    bands_call_t call = {q, nb, w, h, levels, mask, f, buf, NULL};
    for (int v = 0; v < 4; v++) {
        if (levels > 256 && (v == 1 || v == 2))
            continue;
        bands_check_t c = {ref, planes * n, planes, w, h, 0, v == 3 ? 2 : 0, 0, ""};
        snprintf(c.label, sizeof c.label, "bands %zux%zux%zu masked, %u levels, 4 attributes, "
                 "8-conn, %s", w, h, nb, levels, names[v]);
        size_t extra = kNoCap;
        call.check = NULL;
        if (v == 1 || v == 2)
            extra = least_extra(gpu, bands_call, &call, v == 1 ? 1 : 0, c.label);
        if (!extra)
            continue;
        call.check = &c;
        plan_t p;
        hyprof_status_t st = capped(gpu, extra, bands_call, &call, &p);
        if (v == 2 && st == HYPROF_OK && !p.chunks) { /* 8-bit planes fit before a chunk */
            printf("note %s: not reachable at this size\n", c.label);
            continue;
        }
        g_checks++;
        size_t want = v == 3 ? 2 : nb;
        int plan_ok = v == 3 || (v == 1 ? !p.overlap && !p.chunks : v == 2 ? p.chunks : p.overlap);
        if (v == 3 ? st != HYPROF_ERR_CANCELLED : st != HYPROF_OK)
            FAIL("%s: status %d: %s", c.label, (int)st, hyprof_ctx_last_error(gpu));
        else if (c.order_bad || c.next != want)
            FAIL("%s: %zu bands handed over (%zu expected)%s", c.label, c.next, want,
                 c.order_bad ? ", out of order" : "");
        else if (!plan_ok)
            FAIL("%s: not the plan of the case (chunks %d, overlap %d)", c.label, p.chunks,
                 p.overlap);
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

/* One hyprof_eap call (a call_fn); the output freed unless `keep`. */
typedef struct {
    const hyprof_cube_t *c;
    const hyprof_eap_params_t *p;
    hyprof_cube_t got;
    int keep;
} cube_call_t;

static hyprof_status_t cube_call(hyprof_ctx_t *ctx, void *user)
{
    cube_call_t *k = user;
    hyprof_status_t st = hyprof_eap(ctx, k->c, k->p, &k->got, NULL);
    if (st == HYPROF_OK && !k->keep)
        hyprof_cube_free(&k->got);
    return st;
}

/* The page-locked output cache, primed with garbage (the next output cube
 * comes from it). */
static void pinned_output(const hyprof_cube_t *ref)
{
    hyprof_cube_t junk;
    hyprof_pinned_cache_set((size_t)1 << 30);
    if (hyprof_cube_alloc_pinned(&junk, HYPROF_FLOAT32, ref->width, ref->height, ref->bands) ==
        HYPROF_OK) {
        memset(junk.data, 0xff, ref->width * ref->height * ref->bands * sizeof(float));
        hyprof_cube_free(&junk);
    }
}

enum { CUBE_DEFAULT, CUBE_BATCH1, CUBE_BATCH2, CUBE_CHUNKS, CUBE_SHORT, CUBE_PINNED,
       CUBE_PINNED_BATCH2, CUBE_VARIANTS };
static const char *const cube_names[] = {
    "", ", batches of 1 band", ", batches of 2 bands", ", planes in chunks of pixels",
    ", too little device memory (auto: on the CPU)", ", page-locked output",
    ", page-locked output, batches of 2 bands"};

/* Whether the plan taken is the variant's. */
static int cube_plan_ok(int g, const plan_t *p, const hyprof_cube_t *c, unsigned levels)
{
    switch (g) {
    case CUBE_BATCH1: return p->batch == 1 && !p->chunks;
    case CUBE_BATCH2: return p->batch == 2 && !p->chunks;
    case CUBE_CHUNKS: return p->chunks;
    case CUBE_SHORT: return p->fallback;
    case CUBE_PINNED: return p->batch == c->bands && p->pipelined == (c->bands > 1);
    case CUBE_PINNED_BATCH2: return p->batch == 2 && p->pipelined;
    default: /* 8-bit planes pageable: not pipelined; float planes page-locked: pipelined */
        return p->batch == c->bands && p->pipelined == (levels > 256 && c->bands > 1);
    }
}

/* The cap for variant g (kNoCap: none; 0: none found, or the variant does
 * not apply). extra[] keeps the searches' results. */
static size_t cube_extra(hyprof_ctx_t *gpu, int g, cube_call_t *k, size_t extra[4],
                         const char *label)
{
    unsigned levels = k->p->levels;
    if ((g == CUBE_BATCH2 || g == CUBE_PINNED_BATCH2) && k->c->bands < 3)
        return 0;
    if (g == CUBE_SHORT && levels > 256) /* auto runs 16-bit levels on the CPU */
        return 0;
    if (g == CUBE_DEFAULT || g == CUBE_PINNED)
        return kNoCap;
    int i = g == CUBE_BATCH1 ? 0 : g == CUBE_BATCH2 ? 1 : g == CUBE_PINNED_BATCH2 ? 3 : 2;
    if (!extra[i]) { /* page-locked output: float planes, more memory a band */
        if (i == 3)
            hyprof_pinned_cache_set((size_t)1 << 30);
        extra[i] = least_extra(gpu, cube_call, k, i == 0 ? 1 : i == 2 ? 0 : 2, label);
        hyprof_pinned_cache_set(0);
    }
    if (g == CUBE_SHORT)
        return extra[i] >= kStep ? extra[i] - kStep : 0;
    return extra[i];
}

/* The CPU's cube against the CUDA's, under each variant (all of them with
 * `variants`, else the default only). */
static void cube_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const char *name,
                      const hyprof_cube_t *c, const hyprof_eap_params_t *p, int variants)
{
    hyprof_cube_t ref;
    char label[200];
    if (hyprof_eap(cpu, c, p, &ref, NULL) != HYPROF_OK) {
        FAIL("%s: cpu: %s", name, hyprof_ctx_last_error(cpu));
        return;
    }
    size_t extra[4] = {0, 0, 0, 0};
    hyprof_ctx_t *autox = hyprof_ctx_new();
    if (!autox)
        exit(1);
    for (int g = 0; g < (variants ? CUBE_VARIANTS : 1); g++) {
        snprintf(label, sizeof label, "%s%s", name, cube_names[g]);
        cube_call_t k = {c, p, {0}, 0};
        size_t x = cube_extra(gpu, g, &k, extra, label);
        if (!x)
            continue;
        if (g == CUBE_SHORT) { /* the CUDA backend fails, naming the memory */
            plan_t q;
            hyprof_status_t s = capped(gpu, x, cube_call, &k, &q);
            g_checks++;
            if (s != HYPROF_ERR_DEVICE_MEMORY)
                FAIL("%s: cuda status %d, want %d (HYPROF_ERR_DEVICE_MEMORY)", label, (int)s,
                     (int)HYPROF_ERR_DEVICE_MEMORY);
        }
        if (g == CUBE_PINNED || g == CUBE_PINNED_BATCH2)
            pinned_output(&ref);
        k.keep = 1;
        plan_t q;
        double t0 = now_ms();
        hyprof_status_t st = capped(g == CUBE_SHORT ? autox : gpu, x, cube_call, &k, &q);
        double ms = now_ms() - t0;
        g_checks++;
        if (st != HYPROF_OK) {
            FAIL("%s: cuda: %s", label, hyprof_ctx_last_error(g == CUBE_SHORT ? autox : gpu));
        } else {
            if ((g == CUBE_PINNED || g == CUBE_PINNED_BATCH2) &&
                !(k.got.owns & HYPROF_OWNS_PINNED))
                FAIL("%s: the output is not page-locked", label);
            if (g == CUBE_CHUNKS && !q.chunks && q.batch == 1) /* 8-bit planes fit first */
                printf("note %s: not reachable at this size\n", label);
            else if (!cube_plan_ok(g, &q, c, p->levels))
                FAIL("%s: not the plan of the case (batches of %zu, chunks %d, pipelined %d, "
                     "fallback %d)", label, q.batch, q.chunks, q.pipelined, q.fallback);
            if (g == CUBE_SHORT || expect_cuda(gpu, label))
                report_f32(label, &ref, &k.got, ms);
            hyprof_cube_free(&k.got);
        }
        hyprof_pinned_cache_set(0);
    }
    hyprof_ctx_free(&autox);
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

/* A cancel midway (pageable output in batches of one band; page-locked
 * output in a pipelined batch): HYPROF_ERR_CANCELLED, no output cube; and
 * no copy of the cancelled call lands later in the page-locked block its
 * output had (the next cube taken from the cache keeps what is written into
 * it while the device runs another call). */
static void cancel_case(hyprof_ctx_t *cpu, hyprof_ctx_t *gpu, const hyprof_cube_t *c,
                        const hyprof_eap_params_t *p)
{
    for (int pinned = 0; pinned < 2; pinned++) {
        char label[160];
        snprintf(label, sizeof label, "cancel midway, %s",
                 pinned ? "page-locked output, a pipelined batch"
                        : "pageable output, batches of one band");
        hyprof_ctx_t *ctx = hyprof_ctx_new();
        cancel_t cc = {0, 0.0};
        cube_call_t k = {c, p, {0}, 1};
        memset(&k.got, 0, sizeof k.got);
        hyprof_status_t st = HYPROF_ERR_ARGUMENT;
        if (ctx && hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CUDA) == HYPROF_OK) {
            size_t extra = pinned ? kNoCap : least_extra(ctx, cube_call, &k, 1, label);
            if (pinned)
                hyprof_pinned_cache_set((size_t)1 << 30);
            hyprof_ctx_set_progress(ctx, cancel_midway, &cc);
            plan_t q;
            if (extra)
                st = capped(ctx, extra, cube_call, &k, &q);
        }
        g_checks++;
        if (st != HYPROF_ERR_CANCELLED || k.got.data || cc.midway < 2)
            FAIL("%s: status %d (want %d), output %s, %d progress reports midway", label,
                 (int)st, (int)HYPROF_ERR_CANCELLED, k.got.data ? "left" : "none", cc.midway);
        else
            printf("ok   %s: cancelled at %.3f, no output\n", label, cc.at);
        if (st == HYPROF_OK)
            hyprof_cube_free(&k.got);
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
    /* large enough for chunks of planes (a band's 8-bit planes larger than
     * the least chunk's float planes) */
    if (make_cube(&c, 400, 300, 3, 105, 0.02) == 0)
        cube_case(cpu, gpu, "cube 400x300x3 masked, paper defaults", &c, &p, 1);
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
        cube_case(cpu, gpu, "cube samson-like 95x95x4 masked, 4 attributes, 16-bit", &c, &q, 1);
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
    const char *log_was = getenv("HYPROF_LOG");
    char log_keep[32] = "";
    if (log_was)
        snprintf(log_keep, sizeof log_keep, "%s", log_was);
    setenv("HYPROF_LOG", "debug", 1);
    hyprof_ctx_set_log(gpu, print_log, NULL);
    uint64_t seed = 1000;
    band_case(cpu, gpu, FEW, 4, 4, 256, seed++, 1, 0);
    band_case(cpu, gpu, FULL, 5, 3, 256, seed++, 2, 0);
    band_case(cpu, gpu, SMOOTH, 40, 35, 256, seed++, 1, 0);
    if (log_was)
        setenv("HYPROF_LOG", log_keep, 1);
    else
        unsetenv("HYPROF_LOG");
    hyprof_ctx_set_log(gpu, NULL, NULL);

    static const size_t sizes[][2] = {{1, 1}, {1, 9}, {13, 1}, {37, 23}, {95, 95}, {145, 145}};
    for (unsigned levels = 256; levels <= 65536; levels *= 256)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int k = FEW; k <= CONSTANT; k++)
                band_case(cpu, gpu, (kind_t)k, sizes[s][0], sizes[s][1], levels, seed++,
                          sizes[s][0] * sizes[s][1] >= 1000 ? 15u : 9u, 0);
    /* into page-locked output: 16-bit planes on the device (else 8-bit
     * planes widened on the host), nodata under the masks */
    for (int k = FEW; k <= PLATEAUS; k++)
        band_case(cpu, gpu, (kind_t)k, 145, 145, 256, seed++, 15u, 1);
    bands_case(cpu, gpu, 400, 300, 5, 256, seed++);
    bands_case(cpu, gpu, 37, 23, 3, 256, seed++);
    bands_case(cpu, gpu, 95, 95, 3, 65536, seed++);
    cubes(cpu, gpu);
    if (!quick && !over_budget()) { /* larger bands: long chains, big plateaus */
        band_case(cpu, gpu, PLATEAUS, 640, 480, 256, seed++, 15, 0);
        band_case(cpu, gpu, FEW, 1000, 700, 256, seed++, 3, 0);
        band_case(cpu, gpu, SMOOTH, 1000, 700, 256, seed++, 3, 0);
        if (!over_budget()) /* the pixels' flooding on larger bands */
            band_case(cpu, gpu, SMOOTH, 640, 480, 65536, seed++, 5, 0);
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
