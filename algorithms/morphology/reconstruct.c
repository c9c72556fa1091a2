/* CPU backend of the EMP step: grey erosion by a structuring element,
 * reconstruction by dilation (Vincent's hybrid raster + FIFO algorithm,
 * 8-connected), openings and closings by reconstruction, and the W-MCD of
 * the planes. OpenMP over bands x radii. Semantics: include/hyprof/morphology.h. */
#define _DEFAULT_SOURCE /* clock_gettime */
#include "emp_impl.h"
#include "wavelet/dwt_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void hyprof__se_rows(hyprof_se_t se, int r, int *hw)
{
    for (int dy = -r; dy <= r; dy++) {
        int ady = dy < 0 ? -dy : dy, w = r;
        if (se == HYPROF_SE_DIAMOND)
            w = r - ady;
        else if (se == HYPROF_SE_DISK)
            while (w > 0 && w * w + ady * ady > r * r) /* exact: integers */
                w--;
        hw[dy + r] = w;
    }
}

/* ---- erosion ------------------------------------------------------------------ */

/* e = min of f over the structuring element, masked and outside pixels
 * ignored. Rows of the SE are horizontal segments: hmin[k] holds every row's
 * running minimum over [x-k, x+k] (clipped), built from hmin[k-1] in one
 * pass; a pixel then takes the minimum over dy of one hmin value each.
 * `hmin`: (r + 1) * width * height bytes. */
static void erode(const uint8_t *f, const uint8_t *mask, size_t W, size_t H, const int *hw,
                  int r, uint8_t *hmin, uint8_t *e)
{
    size_t n = W * H;
    for (size_t p = 0; p < n; p++)
        hmin[p] = (mask && !mask[p]) ? 255 : f[p];
    for (int k = 1; k <= r; k++) {
        const uint8_t *a = hmin + (size_t)(k - 1) * n;
        uint8_t *b = hmin + (size_t)k * n;
        for (size_t y = 0; y < H; y++) {
            const uint8_t *ar = a + y * W;
            uint8_t *br = b + y * W;
            for (size_t x = 0; x < W; x++) {
                uint8_t v = ar[x];
                if (x > 0 && ar[x - 1] < v)
                    v = ar[x - 1];
                if (x + 1 < W && ar[x + 1] < v)
                    v = ar[x + 1];
                br[x] = v;
            }
        }
    }
    for (size_t y = 0; y < H; y++) {
        uint8_t *er = e + y * W;
        memset(er, 255, W);
        for (int dy = -r; dy <= r; dy++) {
            long yy = (long)y + dy;
            if (yy < 0 || yy >= (long)H)
                continue;
            const uint8_t *src = hmin + (size_t)hw[dy + r] * n + (size_t)yy * W;
            for (size_t x = 0; x < W; x++)
                er[x] = src[x] < er[x] ? src[x] : er[x];
        }
    }
}

/* ---- reconstruction by dilation ------------------------------------------------- */

typedef struct {
    size_t *v;
    size_t head, tail, cap;
} fifo_t;

static int fifo_push(fifo_t *q, size_t p)
{
    if (q->tail == q->cap) {
        if (q->head > 0) { /* reuse the consumed front */
            memmove(q->v, q->v + q->head, (q->tail - q->head) * sizeof *q->v);
            q->tail -= q->head;
            q->head = 0;
        } else {
            size_t cap = q->cap ? 2 * q->cap : 1024;
            size_t *v = realloc(q->v, cap * sizeof *v);
            if (!v)
                return -1;
            q->v = v;
            q->cap = cap;
        }
    }
    q->v[q->tail++] = p;
    return 0;
}

static inline uint8_t max8(uint8_t a, uint8_t b) { return a > b ? a : b; }
static inline uint8_t min8(uint8_t a, uint8_t b) { return a < b ? a : b; }

/* J <- the reconstruction by dilation of J under I (J <= I), 8-connected
 * (L. Vincent, IEEE TIP 2(2), 1993, the hybrid algorithm): one raster and one
 * anti-raster scan, then a FIFO propagation from the pixels that can still
 * push. Returns -1 when out of memory. */
static int reconstruct(uint8_t *J, const uint8_t *I, size_t W, size_t H, fifo_t *q)
{
    long w = (long)W, h = (long)H;
    for (long y = 0; y < h; y++)
        for (long x = 0; x < w; x++) {
            size_t p = (size_t)(y * w + x);
            uint8_t v = J[p];
            if (x > 0)
                v = max8(v, J[p - 1]);
            if (y > 0) {
                v = max8(v, J[p - W]);
                if (x > 0)
                    v = max8(v, J[p - W - 1]);
                if (x + 1 < w)
                    v = max8(v, J[p - W + 1]);
            }
            J[p] = min8(v, I[p]);
        }
    q->head = q->tail = 0;
    for (long y = h - 1; y >= 0; y--)
        for (long x = w - 1; x >= 0; x--) {
            size_t p = (size_t)(y * w + x);
            size_t nb[4];
            int k = 0;
            if (x + 1 < w)
                nb[k++] = p + 1;
            if (y + 1 < h) {
                nb[k++] = p + W;
                if (x > 0)
                    nb[k++] = p + W - 1;
                if (x + 1 < w)
                    nb[k++] = p + W + 1;
            }
            uint8_t v = J[p];
            for (int i = 0; i < k; i++)
                v = max8(v, J[nb[i]]);
            v = min8(v, I[p]);
            J[p] = v;
            for (int i = 0; i < k; i++)
                if (J[nb[i]] < v && J[nb[i]] < I[nb[i]]) {
                    if (fifo_push(q, p))
                        return -1;
                    break;
                }
        }
    while (q->head < q->tail) {
        size_t p = q->v[q->head++];
        long y = (long)(p / W), x = (long)(p % W);
        uint8_t v = J[p];
        for (long dy = -1; dy <= 1; dy++)
            for (long dx = -1; dx <= 1; dx++) {
                long yy = y + dy, xx = x + dx;
                if ((dx == 0 && dy == 0) || yy < 0 || yy >= h || xx < 0 || xx >= w)
                    continue;
                size_t r = (size_t)(yy * w + xx);
                if (J[r] < v && I[r] != J[r]) {
                    J[r] = min8(v, I[r]);
                    if (fifo_push(q, r))
                        return -1;
                }
            }
    }
    return 0;
}

/* ---- openings and closings by reconstruction ---------------------------------------- */

typedef struct {
    uint8_t *hmin, *f, *J;
    int *hw;
    fifo_t q;
} scratch_t;

static void scratch_free(scratch_t *s)
{
    free(s->hmin);
    free(s->f);
    free(s->J);
    free(s->hw);
    free(s->q.v);
    memset(s, 0, sizeof *s);
}

static int scratch_alloc(scratch_t *s, size_t n, int rmax)
{
    memset(s, 0, sizeof *s);
    s->hmin = malloc((size_t)(rmax + 1) * n);
    s->f = malloc(n);
    s->J = malloc(n);
    s->hw = malloc((size_t)(2 * rmax + 1) * sizeof *s->hw);
    if (!s->hmin || !s->f || !s->J || !s->hw) {
        scratch_free(s);
        return -1;
    }
    return 0;
}

/* out = opening (closing: dual) by reconstruction of band f. Masked pixels
 * are inert (0 in marker and mask), and outside the erosion. */
static int by_reconstruction(const uint8_t *band, const uint8_t *mask, size_t W, size_t H,
                             hyprof_se_t se, int r, int closing, scratch_t *s, uint8_t *out)
{
    size_t n = W * H;
    int *hw = s->hw;
    hyprof__se_rows(se, r, hw);
    for (size_t p = 0; p < n; p++)
        s->f[p] = closing ? (uint8_t)(255 - band[p]) : band[p];
    erode(s->f, mask, W, H, hw, r, s->hmin, s->J);
    if (mask)
        for (size_t p = 0; p < n; p++)
            if (!mask[p])
                s->f[p] = s->J[p] = 0;
    if (reconstruct(s->J, s->f, W, H, &s->q))
        return -1;
    for (size_t p = 0; p < n; p++)
        out[p] = closing ? (uint8_t)(255 - s->J[p]) : s->J[p];
    if (mask) /* level 0, as in the band plane: what the denoising sees there */
        for (size_t p = 0; p < n; p++)
            if (!mask[p])
                out[p] = 0;
    return 0;
}

/* Plane k of a band's profile: closings by the radii from the largest down
 * (k < nradii), the band (k == nradii), openings from the smallest up. */
static void plane_op(size_t k, size_t nradii, int *closing, size_t *radius_index)
{
    *closing = k < nradii;
    *radius_index = k < nradii ? nradii - 1 - k : k - nradii - 1;
}

/* The 8-bit EMP of every band into emp (bands * planes planes). */
static hyprof_status_t cpu_profiles(hyprof_ctx_t *ctx, const hyprof_emp_args_t *a,
                                    const uint8_t *q, uint8_t *emp, double progress_share)
{
    size_t n = a->width * a->height, planes = hyprof__emp_planes(a->nradii);
    size_t ntasks = a->bands * planes, done = 0;
    int failed = 0, rmax = a->radii[a->nradii - 1];
    #pragma omp parallel num_threads(hyprof__threads(ctx))
    {
        scratch_t s;
        if (scratch_alloc(&s, n, rmax)) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(dynamic)
        for (size_t t = 0; t < ntasks; t++) {
            int stop;
            #pragma omp atomic read
            stop = failed;
            if (stop)
                continue;
            size_t b = t / planes, k = t % planes, ri;
            const uint8_t *band = q + b * n;
            uint8_t *dst = emp + t * n;
            int closing;
            plane_op(k, a->nradii, &closing, &ri);
            if (k == a->nradii)
                memcpy(dst, band, n);
            else if (by_reconstruction(band, a->mask, a->width, a->height, a->se, a->radii[ri],
                                       closing, &s, dst)) {
                #pragma omp atomic write
                failed = 1;
            }
            size_t now;
            #pragma omp atomic capture
            now = ++done;
            if (hyprof__progress_omp(ctx, progress_share * (double)now / (double)ntasks, "emp")) {
                #pragma omp atomic write
                failed = 2;
            }
        }
        scratch_free(&s);
    }
    if (failed == 1)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, a->op, "out of memory in the EMP");
    if (failed == 2)
        return hyprof__error(ctx, HYPROF_ERR_CANCELLED, a->op, "cancelled");
    return HYPROF_OK;
}

/* Every EMP plane denoised at the three levels into a->out. */
static hyprof_status_t cpu_denoise(hyprof_ctx_t *ctx, const hyprof_emp_args_t *a,
                                   const uint8_t *emp, size_t nplanes)
{
    size_t n = a->width * a->height, done = 0;
    int failed = 0;
    #pragma omp parallel num_threads(hyprof__threads(ctx))
    {
        double *x = malloc(n * sizeof *x), *y = malloc(3 * n * sizeof *y);
        if (!x || !y) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(dynamic)
        for (size_t t = 0; t < nplanes; t++) {
            int stop;
            #pragma omp atomic read
            stop = failed;
            if (stop)
                continue;
            for (size_t p = 0; p < n; p++)
                x[p] = emp[t * n + p];
            if (hyprof__wmcd_plane(x, a->width, a->height, a->wavelet, a->levels, a->hard, y)) {
                #pragma omp atomic write
                failed = 1;
                continue;
            }
            for (size_t k = 0; k < 3; k++) {
                float *o = a->out + (3 * t + k) * n;
                for (size_t p = 0; p < n; p++)
                    o[p] = (a->mask && !a->mask[p]) ? a->nodata : (float)y[k * n + p];
                hyprof__band_done(ctx, 3 * t + k, o);
            }
            size_t now;
            #pragma omp atomic capture
            now = ++done;
            if (hyprof__progress_omp(ctx, 0.5 + 0.5 * (double)now / (double)nplanes, "denoise")) {
                #pragma omp atomic write
                failed = 2;
            }
        }
        free(x);
        free(y);
    }
    if (failed == 1)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, a->op, "out of memory in the denoising");
    if (failed == 2)
        return hyprof__error(ctx, HYPROF_ERR_CANCELLED, a->op, "cancelled");
    return HYPROF_OK;
}

/* memcpy with streaming stores: the destination's lines are not fetched
 * first, a third less memory traffic than memcpy's cached stores below its
 * non-temporal threshold, for a destination nobody reads soon (the output
 * copied out of the staging). Packing the input into staging that the DMA
 * reads next stays with memcpy: there the cached stores are faster. */
static void copy_stream(void *dst, const void *src, size_t bytes)
{
#if defined(__SSE2__)
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > bytes)
        head = bytes;
    memcpy(d, s, head);
    d += head, s += head, bytes -= head;
    for (; bytes >= 64; d += 64, s += 64, bytes -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)s + 1),
                c = _mm_loadu_si128((const __m128i *)s + 2), e = _mm_loadu_si128((const __m128i *)s + 3);
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)d + 1, b);
        _mm_stream_si128((__m128i *)d + 2, c);
        _mm_stream_si128((__m128i *)d + 3, e);
    }
    memcpy(d, s, bytes);
    _mm_sfence(); /* visible to the next reader (another thread, the DMA) */
#else
    memcpy(dst, src, bytes);
#endif
}

void hyprof__pack_cols(int threads, float *dst, const float *src, size_t src_ld, size_t m,
                       size_t cols, int stream)
{
    /* pieces of at least 256 KiB: one column can be split among threads */
    const size_t piece = (size_t)64 << 10, per = (m + piece - 1) / piece, total = per * cols;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t t = 0; t < total; t++) {
        size_t c = t / per, i0 = (t % per) * piece, len = m - i0 < piece ? m - i0 : piece;
        if (stream)
            copy_stream(dst + c * m + i0, src + c * src_ld + i0, len * sizeof *dst);
        else
            memcpy(dst + c * m + i0, src + c * src_ld + i0, len * sizeof *dst);
    }
}

/* The features of the chain: the spectral DWT of a->x, or a->x itself. */
static hyprof_status_t cpu_features(hyprof_ctx_t *ctx, const hyprof_emp_args_t *a, float **feat)
{
    *feat = (float *)a->x;
    if (!a->spec_levels)
        return HYPROF_OK;
    size_t n = a->width * a->height;
    if (!(*feat = malloc(n * a->bands * sizeof **feat)))
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, a->op, "cannot allocate the %zu features",
                             a->bands);
    hyprof_dwt_args_t d = {a->x, NULL, n, a->in_bands, a->spec_levels, a->spec_lo, a->spec_flen,
                           a->bands, 0.0f, *feat};
    double saved[2];
    hyprof__progress_push(ctx, 0.0, 0.2, saved);
    hyprof_status_t st = hyprof__cpu_dwt_spectral(ctx, &d);
    hyprof__progress_pop(ctx, saved);
    if (st != HYPROF_OK) {
        free(*feat);
        *feat = NULL;
    }
    return st;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

hyprof_status_t hyprof__cpu_emp(hyprof_ctx_t *ctx, void *args)
{
    const hyprof_emp_args_t *a = args;
    size_t n = a->width * a->height, nplanes = a->bands * hyprof__emp_planes(a->nradii);
    double t[5];
    t[0] = now_ms();
    float *feat = NULL;
    hyprof_status_t st = cpu_features(ctx, a, &feat);
    if (st != HYPROF_OK)
        return st;
    t[1] = now_ms();
    uint8_t *q = malloc(n * a->bands), *emp = malloc(nplanes * n);
    if (!q || !emp)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, a->op, "cannot allocate the %zu EMP planes",
                           nplanes);
    if (st == HYPROF_OK)
        st = hyprof__emp_quantise(ctx, a, feat, q);
    if (feat != a->x)
        free(feat);
    t[2] = now_ms();
    double saved[2];
    hyprof__progress_push(ctx, a->spec_levels ? 0.2 : 0.0, 1.0, saved);
    if (st == HYPROF_OK)
        st = cpu_profiles(ctx, a, q, emp, a->wavelet ? 0.5 : 1.0);
    t[3] = now_ms();
    if (st == HYPROF_OK && a->wavelet)
        st = cpu_denoise(ctx, a, emp, nplanes);
    else if (st == HYPROF_OK)
        for (size_t i = 0; i < nplanes; i++) {
            for (size_t p = 0; p < n; p++)
                a->out[i * n + p] = (a->mask && !a->mask[p]) ? a->nodata : (float)emp[i * n + p];
            hyprof__band_done(ctx, i, a->out + i * n);
        }
    hyprof__progress_pop(ctx, saved);
    t[4] = now_ms();
    free(q);
    free(emp);
    /* HYPROF_LOG=debug: the stage line the CUDA backend logs per device */
    if (st == HYPROF_OK && hyprof__log_debug())
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "%s stages: share=0 shares=1 device=cpu threads=%d spectral_ms=%.3f "
                    "quantise_ms=%.3f emp_ms=%.3f %s_ms=%.3f wall_ms=%.3f", a->op,
                    hyprof__threads(ctx), t[1] - t[0], t[2] - t[1], t[3] - t[2],
                    a->wavelet ? "denoise" : "to_float", t[4] - t[3], t[4] - t[0]);
    return st;
}
