/* Extended attribute profiles (the EAP seed paper, with DESIGN.md's
 * definitions): argument checks, quantisation, the dispatch, and the `eap`
 * operation. The tree and the filters are in maxtree.c; the exact semantics
 * in eap_impl.h. */
#define _DEFAULT_SOURCE /* madvise, sched_yield */
#include "eap_impl.h"
#include "hyprof/wavelet.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define OP "eap"

/* A monotonic clock in milliseconds (the debug log's host timings). */
static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static const char *const attribute_names[] = {"area", "std", "diagonal", "inertia"};
#define NATTR (sizeof attribute_names / sizeof attribute_names[0])

const char *hyprof_attribute_name(hyprof_attribute_t attribute)
{
    return (unsigned)attribute < NATTR ? attribute_names[attribute] : NULL;
}

hyprof_status_t hyprof_attribute_parse(const char *text, hyprof_attribute_t *attribute)
{
    for (size_t i = 0; text && i < NATTR; i++)
        if (strcmp(text, attribute_names[i]) == 0) {
            *attribute = (hyprof_attribute_t)i;
            return HYPROF_OK;
        }
    return HYPROF_ERR_ARGUMENT;
}

int hyprof_attribute_is_increasing(hyprof_attribute_t attribute)
{
    return attribute == HYPROF_ATTRIBUTE_AREA || attribute == HYPROF_ATTRIBUTE_DIAGONAL;
}

size_t hyprof_attribute_planes(const hyprof_attribute_filter_t *filters, size_t nfilters)
{
    size_t n = 1;
    for (size_t f = 0; filters && f < nfilters; f++)
        n += 2 * filters[f].nthresholds;
    return n;
}

static const double paper_thresholds[] = {36, 144, 324, 576, 900, 1296, 1764};
static const hyprof_attribute_filter_t paper_filter = {
    HYPROF_ATTRIBUTE_AREA, paper_thresholds,
    sizeof paper_thresholds / sizeof paper_thresholds[0]};

void hyprof_eap_params_default(hyprof_eap_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->connectivity = 4;
    p->levels = 256;
    p->filters = &paper_filter;
    p->nfilters = 1;
}

/* ---- checks ----------------------------------------------------------------- */

static hyprof_status_t check_filters(hyprof_ctx_t *ctx, int connectivity, unsigned levels,
                                     const hyprof_attribute_filter_t *filters, size_t nfilters)
{
    if (connectivity != 4 && connectivity != 8)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "connectivity %d must be 4 or 8",
                             connectivity);
    if (levels != 256 && levels != 65536)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "quantisation levels %u must be 256 or 65536", levels);
    if (!filters || nfilters == 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no attribute filter given");
    for (size_t f = 0; f < nfilters; f++) {
        const hyprof_attribute_filter_t *a = &filters[f];
        const char *name = hyprof_attribute_name(a->attribute);
        if (!name)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "unknown attribute %d",
                                 (int)a->attribute);
        if (!a->thresholds || a->nthresholds == 0)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no %s thresholds given", name);
        if (a->nthresholds > HYPROF_ATTRIBUTE_MAX_THRESHOLDS)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                 "%zu %s thresholds: at most %d", a->nthresholds, name,
                                 HYPROF_ATTRIBUTE_MAX_THRESHOLDS);
        for (size_t i = 0; i < a->nthresholds; i++) {
            double t = a->thresholds[i];
            if (!isfinite(t) || t < 0.0)
                return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                     "%s threshold %g must be finite and >= 0", name, t);
            if (i && !(t > a->thresholds[i - 1]))
                return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                     "%s thresholds must be strictly increasing: %g after %g",
                                     name, t, a->thresholds[i - 1]);
        }
    }
    return HYPROF_OK;
}

static hyprof_status_t check_size(hyprof_ctx_t *ctx, size_t width, size_t height,
                                  const hyprof_attribute_filter_t *filters, size_t nfilters)
{
    if (width == 0 || height == 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "empty image (%zux%zu)", width,
                             height);
    if (width > UINT32_MAX / height)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "%zux%zu pixels: a band must have fewer than 2^32 pixels", width,
                             height);
    /* The inertia sums x^2 and y^2 over a component in 64 bits. */
    double n = (double)width * (double)height, w = (double)width, h = (double)height;
    for (size_t f = 0; f < nfilters; f++)
        if (filters[f].attribute == HYPROF_ATTRIBUTE_INERTIA &&
            (n * w * w >= 1.8e19 || n * h * h >= 1.8e19))
            return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                                 "%zux%zu pixels: too large for the inertia sums", width,
                                 height);
    return HYPROF_OK;
}

/* hyprof_attribute_profiles_bands on the CPU: a band at a time (its two
 * trees on two threads: the scenes this is for have bands of 10^8 pixels,
 * whose trees' buffers are the memory limit anyway). */
static hyprof_status_t cpu_each(hyprof_ctx_t *ctx, void *args)
{
    const hyprof_eap_args_t *a = args;
    size_t n = a->width * a->height;
    hyprof_status_t st = HYPROF_OK;
    for (size_t b = 0; b < a->bands && st == HYPROF_OK; b++) {
        hyprof_eap_args_t one = *a;
        one.q = a->q + b * n;
        one.bands = 1;
        one.each = NULL;
        double saved[2];
        hyprof__progress_push(ctx, (double)b / (double)a->bands,
                              (double)(b + 1) / (double)a->bands, saved);
        st = hyprof__cpu_eap(ctx, &one);
        hyprof__progress_pop(ctx, saved);
        if (st == HYPROF_OK && a->each(a->each_user, b, a->out16))
            st = hyprof__error(ctx, HYPROF_ERR_CANCELLED, a->op, "stopped after band %zu",
                               b + 1);
    }
    return st;
}

/* Both backends give identical planes (kernels/attribute/eap_*.cu). With 8-bit
 * levels the CUDA path is the faster one (its trees are built by tile floods,
 * a run of levels a launch); with 16-bit levels its flooding needs a launch
 * per level present (tens of thousands) and the CPU is faster (figures:
 * bench/NOTES.md). So `auto` runs 8-bit profiles on the GPU (falling
 * back to the CPU when the device memory is short, as every operation) and
 * 16-bit ones on the CPU. */
static hyprof_status_t dispatch(hyprof_ctx_t *ctx, hyprof_eap_args_t *a)
{
    hyprof__impl_fn cuda = (hyprof__impl_fn)0;
    if (ctx->backend == HYPROF_BACKEND_CUDA ||
        (ctx->backend == HYPROF_BACKEND_AUTO && a->levels <= 256))
        cuda = HYPROF_CUDA_IMPL(hyprof__cuda_eap);
    else if (ctx->backend == HYPROF_BACKEND_AUTO)
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "%s: auto runs 16-bit levels on the CPU (faster than the CUDA path there; "
                    "--backend cuda runs that one)", OP);
    return hyprof__dispatch(ctx, OP, a->each ? cpu_each : hyprof__cpu_eap, cuda, a);
}

#if defined(__SSE2__)
/* o[i] = src[i] with non-temporal stores: the output is written once and
 * not read back here, so its lines need not be read into the cache first
 * (half the memory traffic of plain stores). */
static void widen_f32_stream(const uint8_t *src, size_t len, float *o)
{
    size_t i = 0;
    for (; i < len && ((uintptr_t)(o + i) & 15); i++)
        o[i] = (float)src[i];
    const __m128i z = _mm_setzero_si128();
    for (; i + 16 <= len; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i lo = _mm_unpacklo_epi8(b, z), hi = _mm_unpackhi_epi8(b, z);
        _mm_stream_ps(o + i, _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)));
        _mm_stream_ps(o + i + 4, _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)));
        _mm_stream_ps(o + i + 8, _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)));
        _mm_stream_ps(o + i + 12, _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)));
    }
    for (; i < len; i++)
        o[i] = (float)src[i];
    _mm_sfence(); /* the stores visible before the piece is counted done */
}
#endif

/* Elements [first, first + len) of the planes from src, on this thread
 * (non-temporal stores for the unmasked float output). */
static void hyprof__eap_widen_range(const uint8_t *src, size_t len, size_t first, size_t n,
                                    const uint8_t *mask, float *out32, uint16_t *out16,
                                    float nodata32, uint16_t nodata16)
{
    if (!mask && out32) {
        float *o = out32 + first;
#if defined(__SSE2__)
        widen_f32_stream(src, len, o);
#else
        for (size_t i = 0; i < len; i++)
            o[i] = (float)src[i];
#endif
        return;
    }
    if (!mask) {
        uint16_t *o = out16 + first;
        for (size_t i = 0; i < len; i++)
            o[i] = src[i];
        return;
    }
    size_t p = first % n;
    for (size_t i = 0; i < len; i++) {
        size_t g = first + i;
        if (out32)
            out32[g] = mask[p] ? (float)src[i] : nodata32;
        else
            out16[g] = mask[p] ? (uint16_t)src[i] : nodata16;
        if (++p == n)
            p = 0;
    }
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int hyprof__eap_widen_stream(const hyprof_ctx_t *ctx, const hyprof_eap_stream_t *s)
{
    const size_t unit = (size_t)1 << 20; /* a unit of work: 1 MB of levels */
    size_t pieces = (s->count + s->piece - 1) / s->piece, upp = (s->piece + unit - 1) / unit;
    size_t total = pieces * upp;
    atomic_size_t *done = malloc((pieces ? pieces : 1) * sizeof *done);
    if (!done)
        return -1;
    for (size_t k = 0; k < pieces; k++)
        atomic_init(&done[k], 0);
    atomic_size_t avail, next;
    atomic_init(&avail, 0);
    atomic_init(&next, 0);
    atomic_int failed;
    atomic_init(&failed, 0);
    int threads = hyprof__threads(ctx);
    #pragma omp parallel num_threads(threads > 1 ? threads : 2)
    {
        int master = omp_get_thread_num() == 0, team = omp_get_num_threads();
        if (team == 1) { /* alone: each piece in turn */
            for (size_t k = 0; k < pieces && !atomic_load(&failed); k++) {
                int r;
                while ((r = s->ready(s->user, k)) == 0)
                    sched_yield();
                if (r < 0) {
                    atomic_store(&failed, r);
                    break;
                }
                size_t len = s->count - k * s->piece;
                len = len < s->piece ? len : s->piece;
                hyprof__eap_widen_range(s->stage[k % (size_t)s->nstages], len,
                                        s->first + k * s->piece, s->n, s->mask, s->out32,
                                        s->out16, s->nodata32, s->nodata16);
                if (k + (size_t)s->nstages < pieces &&
                    (r = s->issue(s->user, k + (size_t)s->nstages)) != 0)
                    atomic_store(&failed, r);
            }
            atomic_store(&next, total);
        }
        if (master && team > 1) {
            /* the copies: which pieces are on the host, which stages are free */
            size_t ready = 0, issued = pieces < (size_t)s->nstages ? pieces : (size_t)s->nstages;
            while (ready < pieces || issued < pieces) {
                int moved = 0;
                if (atomic_load(&failed)) { /* let the others finish: no more copies */
                    atomic_store(&avail, pieces);
                    break;
                }
                if (ready < issued) { /* (a stage's event is its last piece's) */
                    int r = s->ready(s->user, ready);
                    if (r < 0 && !atomic_load(&failed))
                        atomic_store(&failed, r);
                    if (r) {
                        atomic_store(&avail, ++ready);
                        moved = 1;
                    }
                }
                if (issued < pieces && atomic_load(&done[issued - s->nstages]) == upp) {
                    int r = atomic_load(&failed) ? 0 : s->issue(s->user, issued);
                    if (r && !atomic_load(&failed))
                        atomic_store(&failed, r);
                    issued++;
                    moved = 1;
                }
                if (!moved) /* spin on the core: a yield could hand it to a busy thread */
                    cpu_relax();
            }
        }
        for (;;) {
            size_t u = atomic_fetch_add(&next, 1);
            if (u >= total)
                break;
            size_t k = u / upp, i0 = (u % upp) * unit, len = s->count - k * s->piece;
            len = len < s->piece ? len : s->piece;
            while (atomic_load(&avail) <= k)
                sched_yield();
            if (i0 < len && !atomic_load(&failed))
                hyprof__eap_widen_range(s->stage[k % (size_t)s->nstages] + i0,
                                        (len - i0 < unit ? len - i0 : unit),
                                        s->first + k * s->piece + i0, s->n, s->mask, s->out32,
                                        s->out16, s->nodata32, s->nodata16);
            atomic_fetch_add(&done[k], 1);
        }
    }
    free(done);
    return atomic_load(&failed);
}

/* ---- one band ------------------------------------------------------------------ */

/* The checks of hyprof_attribute_profiles(_bands): every valid level of
 * every band below `levels`. */
static hyprof_status_t check_bands(hyprof_ctx_t *ctx, const uint16_t *bands, size_t nbands,
                                   const uint8_t *mask, size_t width, size_t height,
                                   unsigned levels, int connectivity,
                                   const hyprof_attribute_filter_t *filters, size_t nfilters,
                                   const uint16_t *out)
{
    hyprof_status_t st = check_filters(ctx, connectivity, levels, filters, nfilters);
    if (st == HYPROF_OK)
        st = check_size(ctx, width, height, filters, nfilters);
    if (st != HYPROF_OK)
        return st;
    if (!bands || !out || nbands == 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no band or no output buffer");
    size_t n = width * height, bad = SIZE_MAX;
    for (size_t b = 0; b < nbands; b++) {
        const uint16_t *band = bands + b * n;
        #pragma omp parallel for reduction(min : bad) num_threads(hyprof__threads(ctx))
        for (size_t p = 0; p < n; p++)
            if ((!mask || mask[p]) && band[p] >= levels && p < bad)
                bad = p;
        if (bad != SIZE_MAX)
            return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                                 "level %u at pixel (%zu, %zu)%s is not below %u",
                                 (unsigned)band[bad], bad % width, bad / width,
                                 nbands > 1 ? " of a band" : "", levels);
    }
    return HYPROF_OK;
}

hyprof_status_t hyprof_attribute_profiles(hyprof_ctx_t *ctx, const uint16_t *band,
                                          const uint8_t *mask, size_t width, size_t height,
                                          unsigned levels, int connectivity,
                                          const hyprof_attribute_filter_t *filters,
                                          size_t nfilters, uint16_t nodata, uint16_t *out)
{
    hyprof_status_t st = check_bands(ctx, band, 1, mask, width, height, levels, connectivity,
                                     filters, nfilters, out);
    if (st != HYPROF_OK)
        return st;
    hyprof_eap_args_t a = {band, mask, width, height, 1, levels, connectivity, filters,
                           nfilters, hyprof_attribute_planes(filters, nfilters), out, NULL,
                           nodata, 0.0f, OP, NULL, NULL};
    return dispatch(ctx, &a);
}

hyprof_status_t hyprof_attribute_profiles_bands(hyprof_ctx_t *ctx, const uint16_t *bands,
                                                size_t nbands, const uint8_t *mask,
                                                size_t width, size_t height, unsigned levels,
                                                int connectivity,
                                                const hyprof_attribute_filter_t *filters,
                                                size_t nfilters, uint16_t nodata, uint16_t *out,
                                                hyprof_attribute_band_fn fn, void *user)
{
    hyprof_status_t st = check_bands(ctx, bands, nbands, mask, width, height, levels,
                                     connectivity, filters, nfilters, out);
    if (st != HYPROF_OK)
        return st;
    if (!fn)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no function to hand the bands to");
    hyprof_eap_args_t a = {bands, mask, width, height, nbands, levels, connectivity, filters,
                           nfilters, hyprof_attribute_planes(filters, nfilters), out, NULL,
                           nodata, 0.0f, OP, fn, user};
    return dispatch(ctx, &a);
}

hyprof_status_t hyprof_attribute_profile(hyprof_ctx_t *ctx, const uint16_t *band,
                                         const uint8_t *mask, size_t width, size_t height,
                                         unsigned levels, int connectivity,
                                         hyprof_attribute_t attribute, const double *thresholds,
                                         size_t nthresholds, uint16_t nodata, uint16_t *out)
{
    hyprof_attribute_filter_t f = {attribute, thresholds, nthresholds};
    return hyprof_attribute_profiles(ctx, band, mask, width, height, levels, connectivity, &f,
                                     1, nodata, out);
}

/* ---- quantisation and the cube ---------------------------------------------------- */

/* Pixels [p0, p1) of one band: the valid min and max into lo_hi, and the
 * first valid pixel that is not finite (or SIZE_MAX). */
static size_t band_range(const float *v, const uint8_t *m, size_t p0, size_t p1,
                         double lo_hi[2])
{
    if (!m) { /* no branch a pixel; a rescan below finds the culprit, if any */
        float flo = INFINITY, fhi = -INFINITY;
        int bad = 0;
        for (size_t p = p0; p < p1; p++) {
            float x = v[p];
            bad |= !(x - x == 0.0f); /* inf or NaN */
            flo = x < flo ? x : flo;
            fhi = x > fhi ? x : fhi;
        }
        if (!bad) { /* the float min and max, widened: the double ones */
            lo_hi[0] = flo;
            lo_hi[1] = fhi;
            return SIZE_MAX;
        }
    }
    double lo = INFINITY, hi = -INFINITY;
    for (size_t p = p0; p < p1; p++) {
        if (m && !m[p])
            continue;
        if (!isfinite(v[p])) {
            lo_hi[0] = lo;
            lo_hi[1] = hi;
            return p;
        }
        lo = v[p] < lo ? v[p] : lo;
        hi = v[p] > hi ? v[p] : hi;
    }
    lo_hi[0] = lo;
    lo_hi[1] = hi;
    return SIZE_MAX;
}

/* Pixels [p0, p1) of one band: their levels from the band's lo and hi. */
/* floor((x - min) * top / span + 0.5), no multiply-add to fuse: the same
 * rounding as NumPy's ((x - min) * top / span + 0.5) */
static double level_exact(double x, double lo, double top, double span)
{
    return floor((x - lo) * top / span + 0.5);
}

static void band_levels(const float *v, const uint8_t *m, size_t p0, size_t p1,
                        unsigned levels, double lo, double hi, uint16_t *q)
{
    double top = (double)(levels - 1), span = hi - lo, inv = 1.0 / span;
    /* The division is the slow part: t * inv is within 2 ulps of t / span
     * (values below 65536: under 1e-10 apart, and so are the two sums with
     * 0.5), so its floor is the exact one unless the sum lies within 1e-9
     * of an integer, where the exact expression is evaluated instead. */
    if (!(span > 0.0)) {
        memset(q + p0, 0, (p1 - p0) * sizeof *q);
        return;
    }
    /* A valid pixel has x >= lo, so r >= 0.5 and its truncation is its
     * floor (a conversion, not a call to floor()); r < 65536.5 fits an
     * int32. Without a mask: one loop with no branch (vectorised), a flag
     * for any sum near an integer, and then the loop below for the lot. */
    if (!m) {
        const int32_t topi = (int32_t)(levels - 1);
        int near = 0;
        for (size_t p = p0; p < p1; p++) {
            double x = (double)v[p], r = (x - lo) * top * inv + 0.5;
            int32_t k = (int32_t)r;
            double s = (double)k;
            near |= (r - s < 1e-9) | (s + 1.0 - r < 1e-9);
            q[p] = (uint16_t)(k > topi ? topi : k);
        }
        if (!near)
            return;
    }
    for (size_t p = p0; p < p1; p++) {
        if (m && !m[p]) {
            q[p] = 0;
            continue;
        }
        double x = (double)v[p], r = (x - lo) * top * inv + 0.5, s = (double)(int64_t)r;
        if (r - s < 1e-9 || s + 1.0 - r < 1e-9)
            s = level_exact(x, lo, top, span);
        q[p] = (uint16_t)(s < 0.0 ? 0.0 : s > top ? top : s);
    }
}

/* Both passes over (band, chunk of pixels) pairs, so that a few large bands
 * (the 10748 x 12288 x 8 scene) use every thread, not one each. */
static hyprof_status_t quantise_f32(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *x,
                                    unsigned levels, uint16_t *out, double *range)
{
    /* 64 K pixels a task: 96 for Pavia Centre's 8 bands, about 6 for each
     * of 16 threads (with 256 K, 24 tasks left the threads of the second
     * round half idle) */
    const size_t chunk = (size_t)1 << 16;
    size_t n = x->width * x->height, nb = x->bands, nc = n ? (n + chunk - 1) / chunk : 0;
    size_t *bad = malloc((nb * nc + 1) * sizeof *bad);
    double *lh = malloc((2 * nb * nc + 2) * sizeof *lh), *blh = malloc((2 * nb + 2) * sizeof *blh);
    if (!bad || !lh || !blh) {
        free(bad);
        free(lh);
        free(blh);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    }
    const float *v = x->data;
    #pragma omp parallel for schedule(dynamic) num_threads(hyprof__threads(ctx))
    for (size_t k = 0; k < nb * nc; k++) {
        size_t b = k / nc, p0 = (k % nc) * chunk, p1 = p0 + chunk < n ? p0 + chunk : n;
        bad[k] = band_range(v + b * n, x->mask, p0, p1, lh + 2 * k);
    }
    hyprof_status_t st = HYPROF_OK;
    for (size_t b = 0; b < nb && st == HYPROF_OK; b++) {
        double lo = INFINITY, hi = -INFINITY;
        size_t p = SIZE_MAX;
        for (size_t c = 0; c < nc && p == SIZE_MAX; c++) {
            size_t k = b * nc + c;
            p = bad[k];
            lo = lh[2 * k] < lo ? lh[2 * k] : lo;
            hi = lh[2 * k + 1] > hi ? lh[2 * k + 1] : hi;
        }
        if (p != SIZE_MAX)
            st = hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                               "band %zu: value %g at pixel (%zu, %zu) is not finite and not "
                               "masked", b + 1, (double)v[b * n + p], p % x->width,
                               p / x->width);
        blh[2 * b] = lo <= hi ? lo : NAN;
        blh[2 * b + 1] = lo <= hi ? hi : NAN;
        if (range) {
            range[2 * b] = blh[2 * b];
            range[2 * b + 1] = blh[2 * b + 1];
        }
    }
    if (st == HYPROF_OK) {
        #pragma omp parallel for schedule(dynamic) num_threads(hyprof__threads(ctx))
        for (size_t k = 0; k < nb * nc; k++) {
            size_t b = k / nc, p0 = (k % nc) * chunk, p1 = p0 + chunk < n ? p0 + chunk : n;
            band_levels(v + b * n, x->mask, p0, p1, levels, blh[2 * b], blh[2 * b + 1],
                        out + b * n);
        }
    }
    free(bad);
    free(lh);
    free(blh);
    return st;
}

hyprof_status_t hyprof__quantise(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *in,
                                 unsigned levels, uint16_t *out, double *range)
{
    if (levels != 256 && levels != 65536)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "quantisation levels %u must be 256 or 65536", levels);
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    hyprof_status_t st = hyprof__input_f32(ctx, op, in, &tmp, &x);
    if (st == HYPROF_OK)
        st = quantise_f32(ctx, op, x, levels, out, range);
    hyprof_cube_free(&tmp);
    return st;
}

hyprof_status_t hyprof_quantise(hyprof_ctx_t *ctx, const hyprof_cube_t *in, unsigned levels,
                                uint16_t *out, double *range)
{
    return hyprof__quantise(ctx, OP, in, levels, out, range);
}

hyprof_status_t hyprof_eap(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                           const hyprof_eap_params_t *p, hyprof_cube_t *out, double *range)
{
    memset(out, 0, sizeof *out);
    hyprof_status_t st = check_filters(ctx, p->connectivity, p->levels, p->filters, p->nfilters);
    if (st == HYPROF_OK)
        st = check_size(ctx, in->width, in->height, p->filters, p->nfilters);
    if (st != HYPROF_OK)
        return st;
    /* the host's share of the call, logged (debug) next to the backend's
     * stages: t[0] input, t[1] scratch, t[2] quantisation, t[3] output
     * allocation, t[4] the backend, t[5] release */
    double t[7];
    t[0] = now_ms();
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    if ((st = hyprof__input_f32(ctx, OP, in, &tmp, &x)) != HYPROF_OK)
        return st;
    t[1] = now_ms();
    size_t n = x->width * x->height, planes = hyprof_attribute_planes(p->filters, p->nfilters);
    uint16_t *q = hyprof__host_scratch(ctx, n * x->bands * sizeof *q);
    if (!q)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate the quantised bands");
    t[2] = now_ms();
    if (st == HYPROF_OK)
        st = quantise_f32(ctx, OP, x, p->levels, q, range);
    t[3] = now_ms();
    if (st == HYPROF_OK &&
        (st = hyprof__cube_alloc_out(ctx, out, HYPROF_FLOAT32, x->width, x->height,
                                     x->bands * planes)) != HYPROF_OK)
        hyprof__error(ctx, st, OP, "cannot allocate the %zu-band output", x->bands * planes);
    t[4] = now_ms();
    if (st == HYPROF_OK) {
        out->has_nodata = x->has_nodata;
        out->nodata = x->nodata;
        hyprof_eap_args_t a = {q, x->mask, x->width, x->height, x->bands, p->levels,
                               p->connectivity, p->filters, p->nfilters, planes, NULL,
                               out->data, 0, hyprof__nodata_f32(x), OP, NULL, NULL};
        st = dispatch(ctx, &a);
    }
    t[5] = now_ms();
    hyprof__host_scratch_free(q);
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK)
        hyprof_cube_free(out);
    t[6] = now_ms();
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "%s: host ms: input %.2f, scratch %.2f, quantisation %.2f, output allocation "
                "%.2f, backend %.2f, release %.2f; total %.2f", OP, t[1] - t[0], t[2] - t[1],
                t[3] - t[2], t[4] - t[3], t[5] - t[4], t[6] - t[5], t[6] - t[0]);
    return st;
}

/* ---- the `eap` operation ------------------------------------------------------------ */

#include "../core/ops.h"

/* Registry parameter holding each attribute's own thresholds. */
static const char *const threshold_params[] = {"area-thresholds", "std-thresholds",
                                               "diagonal-thresholds", "inertia-thresholds"};

typedef struct {
    hyprof_attribute_filter_t filters[NATTR];
    double *thresholds[NATTR]; /* level units (std scaled for 16 bits) */
    const double *given[NATTR]; /* as the user gave them (names, metadata) */
    size_t nfilters;
    int connectivity;
    unsigned levels;
} op_params_t;

static void op_params_free(op_params_t *o)
{
    for (size_t i = 0; i < NATTR; i++)
        free(o->thresholds[i]);
}

/* "area,,std", "area," or ",area": an element of the comma-separated list
 * holds nothing but blanks (strtok_r below would skip it silently). */
static int has_empty_element(const char *list)
{
    for (const char *c = list;; c++) {
        c += strspn(c, " ");
        if (*c == ',' || *c == '\0')
            return 1;
        c += strcspn(c, ",");
        if (*c == '\0')
            return 0;
    }
}

static hyprof_status_t op_params(hyprof_ctx_t *ctx, const hyprof_args_t *args, op_params_t *o)
{
    memset(o, 0, sizeof *o);
    o->connectivity = atoi(hyprof_args_str(args, "connectivity"));
    o->levels = strcmp(hyprof_args_str(args, "quantisation"), "16") == 0 ? 65536u : 256u;
    const char *list = hyprof_args_str(args, "attribute");
    if (list && has_empty_element(list))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "--attribute '%s' has an empty element", list);
    char *copy = strdup(list ? list : "");
    if (!copy)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    hyprof_status_t st = HYPROF_OK;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ", ", &save); tok && st == HYPROF_OK;
         tok = strtok_r(NULL, ", ", &save)) {
        hyprof_attribute_t a;
        if (hyprof_attribute_parse(tok, &a) != HYPROF_OK) {
            st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                               "unknown attribute '%s' (area, std, diagonal or inertia)", tok);
            break;
        }
        for (size_t f = 0; f < o->nfilters; f++)
            if (o->filters[f].attribute == a)
                st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                   "attribute '%s' given twice in '%s'", tok, list);
        if (st == HYPROF_OK && o->nfilters == NATTR)
            st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "too many attributes in '%s'",
                               list);
        if (st == HYPROF_OK)
            o->filters[o->nfilters++].attribute = a;
    }
    free(copy);
    if (st == HYPROF_OK && o->nfilters == 0)
        st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no attribute in '%s'",
                           list ? list : "");
    /* --thresholds: the thresholds of the one attribute asked for */
    int shorthand = hyprof_args_given(args, "thresholds");
    if (st == HYPROF_OK && shorthand && o->nfilters > 1)
        st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                           "--thresholds with several attributes (%s): give each its own "
                           "list with --area-thresholds, --std-thresholds, ...", list);
    for (size_t f = 0; st == HYPROF_OK && f < o->nfilters; f++) {
        hyprof_attribute_t a = o->filters[f].attribute;
        const char *pname = threshold_params[a];
        if (shorthand && hyprof_args_given(args, pname)) {
            st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                               "--thresholds and --%s both given: use one", pname);
            break;
        }
        size_t nt = 0;
        const double *t = hyprof_args_list(args, shorthand ? "thresholds" : pname, &nt);
        double *own = malloc((nt ? nt : 1) * sizeof *own);
        if (!own) {
            st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
            break;
        }
        /* std is in 8-bit units whatever the quantisation: the same
         * thresholds mean the same filter at 16 bits */
        double scale = a == HYPROF_ATTRIBUTE_STD ? (double)(o->levels - 1) / 255.0 : 1.0;
        for (size_t i = 0; i < nt; i++)
            own[i] = t[i] * scale;
        o->thresholds[f] = own;
        o->given[f] = t;
        o->filters[f].thresholds = own;
        o->filters[f].nthresholds = nt;
        if (nt == 0)
            st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no %s thresholds given",
                               hyprof_attribute_name(a));
        for (size_t i = 1; st == HYPROF_OK && i < nt; i++)
            if (!(t[i] > t[i - 1]))
                st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                   "--%s must be strictly increasing: %g after %g",
                                   shorthand ? "thresholds" : pname, t[i], t[i - 1]);
    }
    if (st != HYPROF_OK)
        op_params_free(o);
    return st;
}

/* The quantisation bounds and filters (the band names: hyprof__names_eap). */
static hyprof_status_t describe_profile(hyprof_result_t *out, char **names, size_t nfeat,
                                        const op_params_t *o, const double *range, int levels)
{
    hyprof_status_t st = HYPROF_OK;
    for (size_t b = 0; st == HYPROF_OK && b < nfeat; b++) {
        char key[64];
        snprintf(key, sizeof key, "EAP_QUANT_MIN_%s", names[b]);
        if (st == HYPROF_OK)
            st = hyprof_result_add_meta(out, key, "%.17g", range[2 * b]);
        snprintf(key, sizeof key, "EAP_QUANT_MAX_%s", names[b]);
        if (st == HYPROF_OK)
            st = hyprof_result_add_meta(out, key, "%.17g", range[2 * b + 1]);
    }
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "EAP_FEATURES", "%zu", nfeat);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "EAP_QUANT_LEVELS", "%u", o->levels);
    if (st == HYPROF_OK && levels > 0)
        st = hyprof_result_add_meta(out, "EAP_DWT_LEVELS", "%d", levels);
    for (size_t f = 0; st == HYPROF_OK && f < o->nfilters; f++) {
        char key[64], val[4096];
        size_t len = 0;
        val[0] = '\0';
        for (size_t j = 0; j < o->filters[f].nthresholds && len < sizeof val - 32; j++)
            len += (size_t)snprintf(val + len, sizeof val - len, "%s%g", j ? "," : "",
                                    o->given[f][j]);
        snprintf(key, sizeof key, "EAP_THRESHOLDS_%s", hyprof_attribute_name(o->filters[f].attribute));
        for (char *c = key; *c; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
        st = hyprof_result_add_meta(out, key, "%s", val);
    }
    return st;
}

hyprof_status_t hyprof__run_eap(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out)
{
    op_params_t o;
    hyprof_status_t st = op_params(ctx, args, &o);
    if (st != HYPROF_OK)
        return st;
    hyprof_eap_params_t p = {o.connectivity, o.levels, o.filters, o.nfilters};
    /* everything the library checks, before the reduction's work */
    st = check_filters(ctx, p.connectivity, p.levels, p.filters, p.nfilters);
    if (st == HYPROF_OK)
        st = check_size(ctx, in->width, in->height, p.filters, p.nfilters);
    hyprof_cube_t feat;
    memset(&feat, 0, sizeof feat);
    char **names = NULL;
    double saved[2], *range = NULL;
    int levels = 0;
    if (st == HYPROF_OK) {
        hyprof__progress_push(ctx, 0.0, 0.3, saved);
        st = hyprof__reduce_features(ctx, OP, args, in, &feat, &names, &levels);
        hyprof__progress_pop(ctx, saved);
    }
    if (st == HYPROF_OK && !(range = calloc(2 * feat.bands, sizeof *range)))
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    if (st == HYPROF_OK) {
        hyprof__progress_push(ctx, 0.3, 1.0, saved);
        st = hyprof_eap(ctx, &feat, &p, &out->cube, range);
        hyprof__progress_pop(ctx, saved);
    }
    if (st == HYPROF_OK)
        st = hyprof__result_adopt(out, in);
    if (st == HYPROF_OK)
        st = describe_profile(out, names, feat.bands, &o, range, levels);
    if (names)
        hyprof__free_names(names, feat.bands);
    hyprof_cube_free(&feat);
    free(range);
    op_params_free(&o);
    return st;
}

/* Features (the reduction, with the levels --features picks) times the
 * planes: the band and a closing and an opening per threshold. */
hyprof_status_t hyprof__bands_eap(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                  size_t *out_bands)
{
    op_params_t o;
    hyprof_status_t st = op_params(ctx, args, &o);
    if (st != HYPROF_OK)
        return st;
    size_t planes = 1, nfeat = 0;
    for (size_t f = 0; f < o.nfilters; f++)
        planes += 2 * o.filters[f].nthresholds;
    op_params_free(&o);
    st = hyprof__reduce_bands(ctx, OP, args, in_bands, &nfeat);
    if (st == HYPROF_OK)
        *out_bands = nfeat * planes;
    return st;
}

/* Per feature (PC1, A1 or B1...): for each attribute, its closings from the
 * largest threshold down, the feature itself (after the first attribute's
 * closings), its openings from the smallest up: "A1 area closing 1764". */
HYPROF__NAMES_FN(eap)
{
    (void)width, (void)height, (void)in_bands;
    op_params_t o;
    hyprof_status_t st = op_params(ctx, args, &o);
    if (st != HYPROF_OK)
        return st;
    const char *prefix = hyprof__reduce_prefix(args);
    size_t planes = hyprof_attribute_planes(o.filters, o.nfilters), k = 0;
    for (size_t b = 0; st == HYPROF_OK && b < out_bands / planes; b++)
        for (size_t f = 0; st == HYPROF_OK && f < o.nfilters; f++) {
            const char *an = hyprof_attribute_name(o.filters[f].attribute);
            size_t nt = o.filters[f].nthresholds;
            for (size_t j = nt; st == HYPROF_OK && j-- > 0;)
                st = hyprof__name(names, k++, "%s%zu %s closing %g", prefix, b + 1, an,
                                  o.given[f][j]);
            if (st == HYPROF_OK && f == 0)
                st = hyprof__name(names, k++, "%s%zu", prefix, b + 1);
            for (size_t j = 0; st == HYPROF_OK && j < nt; j++)
                st = hyprof__name(names, k++, "%s%zu %s opening %g", prefix, b + 1, an,
                                  o.given[f][j]);
        }
    op_params_free(&o);
    return st;
}
