/* The CPU backend of attribute profiles: one union-find max-tree per band and
 * polarity (Berger et al. 2007, with Najman-Couprie's canonical form), pixels
 * sorted by a counting sort since levels are integers; every attribute and
 * threshold is derived from that one tree. OpenMP over (band, polarity).
 * The semantics are those of eap_impl.h. */
#include "eap_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NONE UINT32_MAX

typedef unsigned __int128 u128;

/* Per-thread buffers for one tree of width*height pixels. */
typedef struct {
    size_t n, maxthr;
    uint16_t *g;        /* the complemented band (closing tree) */
    uint32_t *S;        /* valid pixels by increasing level */
    uint32_t *parent;   /* canonical parent of every valid pixel */
    uint32_t *zpar;     /* union-find forest, then the pixel count of nodes */
    uint32_t *repr;     /* union-find: the top pixel of each set */
    uint32_t *hist;     /* levels counters */
    uint8_t *kept;      /* thresholds kept per node */
    uint16_t *vals;     /* per node, its output for every threshold */
    uint64_t *acc[4];   /* attribute accumulators (allocated when needed) */
} work_t;

static void work_free(work_t *w)
{
    free(w->g);
    free(w->S);
    free(w->parent);
    free(w->zpar);
    free(w->repr);
    free(w->hist);
    free(w->kept);
    free(w->vals);
    for (int i = 0; i < 4; i++)
        free(w->acc[i]);
    memset(w, 0, sizeof *w);
}

static int needs_acc(const hyprof_eap_args_t *a)
{
    int k = 0;
    for (size_t f = 0; f < a->nfilters; f++) {
        int need = 0;
        switch (a->filters[f].attribute) {
        case HYPROF_ATTRIBUTE_STD: need = 2; break;
        case HYPROF_ATTRIBUTE_DIAGONAL: need = 2; break; /* packed min|max<<32 for x, y */
        case HYPROF_ATTRIBUTE_INERTIA: need = 4; break;
        default: break;
        }
        k = need > k ? need : k;
    }
    return k;
}

static int work_alloc(work_t *w, const hyprof_eap_args_t *a)
{
    size_t n = a->width * a->height;
    memset(w, 0, sizeof *w);
    w->n = n;
    for (size_t f = 0; f < a->nfilters; f++)
        if (a->filters[f].nthresholds > w->maxthr)
            w->maxthr = a->filters[f].nthresholds;
    w->g = malloc(n * sizeof *w->g);
    w->S = malloc(n * sizeof *w->S);
    w->parent = malloc(n * sizeof *w->parent);
    w->zpar = malloc(n * sizeof *w->zpar);
    w->repr = malloc(n * sizeof *w->repr);
    w->hist = malloc((size_t)a->levels * sizeof *w->hist);
    w->kept = malloc(n);
    w->vals = malloc(n * (w->maxthr ? w->maxthr : 1) * sizeof *w->vals);
    int ok = w->g && w->S && w->parent && w->zpar && w->repr && w->hist && w->kept && w->vals;
    for (int i = 0; ok && i < needs_acc(a); i++)
        ok = (w->acc[i] = malloc(n * sizeof *w->acc[i])) != NULL;
    if (!ok)
        work_free(w);
    return ok;
}

static inline uint32_t find_root(uint32_t *zpar, uint32_t x)
{
    while (zpar[x] != x) { /* path halving */
        zpar[x] = zpar[zpar[x]];
        x = zpar[x];
    }
    return x;
}

/* Builds the canonical max-tree of f over the valid pixels; returns their count. */
static size_t build_tree(const hyprof_eap_args_t *a, const uint16_t *f, work_t *w)
{
    const uint8_t *m = a->mask;
    size_t width = a->width, height = a->height, n = w->n;
    uint32_t *S = w->S, *parent = w->parent, *zpar = w->zpar, *hist = w->hist;

    /* counting sort of the valid pixels by level */
    memset(hist, 0, (size_t)a->levels * sizeof *hist);
    for (size_t p = 0; p < n; p++)
        if (!m || m[p])
            hist[f[p]]++;
    uint32_t sum = 0;
    for (unsigned l = 0; l < a->levels; l++) {
        uint32_t c = hist[l];
        hist[l] = sum;
        sum += c;
    }
    size_t nv = sum;
    for (size_t p = 0; p < n; p++)
        if (!m || m[p])
            S[hist[f[p]]++] = (uint32_t)p;

    /* union-find from the highest level down (Berger et al.: union by rank
     * in zpar, `repr` the current top pixel of each set): every processed
     * neighbour's component becomes a child of p. Masked pixels are never
     * processed. */
    uint32_t *repr = w->repr;
    uint8_t *rank = w->kept;
    memset(zpar, 0xff, n * sizeof *zpar);
    int eight = a->connectivity == 8;
#define TRY(q)                                                       \
    do {                                                             \
        uint32_t q_ = (uint32_t)(q);                                 \
        if (zpar[q_] != NONE) {                                      \
            uint32_t r_ = find_root(zpar, q_);                       \
            if (r_ != zp) {                                          \
                parent[repr[r_]] = p;                                \
                if (rank[zp] < rank[r_]) {                           \
                    uint32_t t_ = zp;                                \
                    zp = r_;                                         \
                    r_ = t_;                                         \
                }                                                    \
                zpar[r_] = zp;                                       \
                repr[zp] = p;                                        \
                if (rank[zp] == rank[r_])                            \
                    rank[zp]++;                                      \
            }                                                        \
        }                                                            \
    } while (0)
    for (size_t i = nv; i-- > 0;) {
        uint32_t p = S[i], zp = p;
        parent[p] = p;
        zpar[p] = p;
        repr[p] = p;
        rank[p] = 0;
        size_t y = p / width, x = p - y * width;
        int l = x > 0, r = x + 1 < width, u = y > 0, d = y + 1 < height;
        if (l)
            TRY(p - 1);
        if (r)
            TRY(p + 1);
        if (u)
            TRY(p - width);
        if (d)
            TRY(p + width);
        if (eight) {
            if (u && l)
                TRY(p - width - 1);
            if (u && r)
                TRY(p - width + 1);
            if (d && l)
                TRY(p + width - 1);
            if (d && r)
                TRY(p + width + 1);
        }
    }
#undef TRY

    /* canonical form: every pixel points to the canonical element of its
     * node, which points to the canonical element of the parent node */
    for (size_t i = 0; i < nv; i++) {
        uint32_t p = S[i], q = parent[p];
        if (f[parent[q]] == f[q])
            parent[p] = parent[q];
    }
    return nv;
}

/* Attributes accumulated from the leaves up (into the canonical elements);
 * one loop pair per attribute, so that each loop stays simple. */
static void accumulate(const hyprof_eap_args_t *a, hyprof_attribute_t attr,
                       const uint16_t *f, size_t nv, work_t *w)
{
    const uint32_t *S = w->S, *parent = w->parent;
    uint32_t *cnt = w->zpar;
    uint64_t *A = w->acc[0], *B = w->acc[1], *C = w->acc[2], *D = w->acc[3];
    size_t width = a->width;
    switch (attr) {
    case HYPROF_ATTRIBUTE_STD:
        for (size_t i = 0; i < nv; i++) {
            uint32_t p = S[i];
            cnt[p] = 1;
            A[p] = f[p];
            B[p] = (uint64_t)f[p] * f[p];
        }
        for (size_t i = nv; i-- > 0;) {
            uint32_t p = S[i], q = parent[p];
            if (q != p) {
                cnt[q] += cnt[p];
                A[q] += A[p];
                B[q] += B[p];
            }
        }
        break;
    case HYPROF_ATTRIBUTE_DIAGONAL: /* x and y ranges packed as min | max << 32 */
        for (size_t i = 0; i < nv; i++) {
            uint32_t p = S[i];
            uint64_t y = p / width, x = p - y * width;
            A[p] = x | x << 32;
            B[p] = y | y << 32;
        }
        for (size_t i = nv; i-- > 0;) {
            uint32_t p = S[i], q = parent[p];
            if (q == p)
                continue;
            uint64_t ax = A[q], bx = A[p], ay = B[q], by = B[p];
            uint64_t x0 = (uint32_t)ax < (uint32_t)bx ? (uint32_t)ax : (uint32_t)bx;
            uint64_t x1 = (ax >> 32) > (bx >> 32) ? ax >> 32 : bx >> 32;
            uint64_t y0 = (uint32_t)ay < (uint32_t)by ? (uint32_t)ay : (uint32_t)by;
            uint64_t y1 = (ay >> 32) > (by >> 32) ? ay >> 32 : by >> 32;
            A[q] = x0 | x1 << 32;
            B[q] = y0 | y1 << 32;
        }
        break;
    case HYPROF_ATTRIBUTE_INERTIA:
        for (size_t i = 0; i < nv; i++) {
            uint32_t p = S[i];
            uint64_t y = p / width, x = p - y * width;
            cnt[p] = 1;
            A[p] = x;
            B[p] = y;
            C[p] = x * x;
            D[p] = y * y;
        }
        for (size_t i = nv; i-- > 0;) {
            uint32_t p = S[i], q = parent[p];
            if (q != p) {
                cnt[q] += cnt[p];
                A[q] += A[p];
                B[q] += B[p];
                C[q] += C[p];
                D[q] += D[p];
            }
        }
        break;
    default:
        for (size_t i = 0; i < nv; i++)
            cnt[S[i]] = 1;
        for (size_t i = nv; i-- > 0;) {
            uint32_t p = S[i], q = parent[p];
            if (q != p)
                cnt[q] += cnt[p];
        }
        break;
    }
}

static double attribute_of(hyprof_attribute_t attr, const work_t *w, uint32_t p)
{
    uint64_t n = w->zpar[p];
    switch (attr) {
    case HYPROF_ATTRIBUTE_STD: {
        uint64_t s1 = w->acc[0][p], s2 = w->acc[1][p];
        u128 num = (u128)n * s2 - (u128)s1 * s1;
        return sqrt((double)num) / (double)n;
    }
    case HYPROF_ATTRIBUTE_DIAGONAL: {
        uint64_t ax = w->acc[0][p], ay = w->acc[1][p];
        uint64_t dx = (ax >> 32) - (uint32_t)ax + 1, dy = (ay >> 32) - (uint32_t)ay + 1;
        return sqrt((double)(dx * dx + dy * dy));
    }
    case HYPROF_ATTRIBUTE_INERTIA: {
        uint64_t sx = w->acc[0][p], sy = w->acc[1][p], sxx = w->acc[2][p], syy = w->acc[3][p];
        u128 num = 6 * ((u128)n * sxx - (u128)sx * sx + (u128)n * syy - (u128)sy * sy) +
                   (u128)n * n;
        return (double)num / (6.0 * (double)n * (double)n * (double)n);
    }
    default:
        return (double)n;
    }
}

/* Plane of threshold j of filter `fi` (closing or opening) within a band's profile. */
static size_t plane_of(const hyprof_eap_args_t *a, size_t fi, size_t j, int closing)
{
    size_t off = 0;
    for (size_t f = 0; f < fi; f++)
        off += 2 * a->filters[f].nthresholds + (f == 0);
    size_t l = a->filters[fi].nthresholds;
    return closing ? off + (l - 1 - j) : off + l + (fi == 0) + j;
}

/* One attribute's filters on a built tree, written to its planes. */
static void filter_tree(const hyprof_eap_args_t *a, size_t band, int closing, size_t fi,
                        const uint16_t *f, size_t nv, work_t *w)
{
    const hyprof_attribute_filter_t *flt = &a->filters[fi];
    const double *t = flt->thresholds;
    size_t nt = flt->nthresholds, n = w->n;
    if (nt == 0)
        return;
    accumulate(a, flt->attribute, f, nv, w);
    const uint32_t *S = w->S, *parent = w->parent;
    uint8_t *kept = w->kept;
    uint16_t *vals = w->vals;
    for (size_t i = 0; i < nv; i++) {
        uint32_t p = S[i], q = parent[p];
        if (q != p && f[q] == f[p])
            continue; /* not canonical: its node's canonical element decides */
        double v = attribute_of(flt->attribute, w, p);
        size_t lim = q == p ? nt : kept[q], k = 0;
        while (k < lim && t[k] <= v)
            k++;
        kept[p] = (uint8_t)k;
        uint16_t *vp = vals + (size_t)p * nt;
        const uint16_t *vq = vals + (size_t)q * nt;
        for (size_t j = 0; j < nt; j++)
            vp[j] = j < k ? f[p] : (q == p ? 0 : vq[j]);
    }
    /* every pixel takes its node's outputs (closing: complemented back) */
    uint16_t top = (uint16_t)(a->levels - 1), flip = closing ? top : 0;
    size_t base[HYPROF_ATTRIBUTE_MAX_THRESHOLDS];
    for (size_t j = 0; j < nt; j++)
        base[j] = (band * a->planes + plane_of(a, fi, j, closing)) * n;
    for (size_t p = 0; p < n; p++) {
        if (a->mask && !a->mask[p])
            continue;
        uint32_t q = parent[p], c = (q != p && f[q] == f[p]) ? q : (uint32_t)p;
        const uint16_t *vc = vals + (size_t)c * nt;
        if (a->out16)
            for (size_t j = 0; j < nt; j++)
                a->out16[base[j] + p] = (uint16_t)(flip ? flip - vc[j] : vc[j]);
        else
            for (size_t j = 0; j < nt; j++)
                a->out32[base[j] + p] = (float)(flip ? flip - vc[j] : vc[j]);
    }
}

/* Masked pixels of every plane of one polarity (and, for the opening, the band). */
static void fill_band_and_nodata(const hyprof_eap_args_t *a, size_t band, int closing)
{
    size_t n = a->width * a->height;
    const uint16_t *q = a->q + band * n;
    for (size_t fi = 0; fi < a->nfilters; fi++)
        for (size_t j = 0; j < a->filters[fi].nthresholds; j++) {
            size_t pl = band * a->planes + plane_of(a, fi, j, closing);
            for (size_t p = 0; a->mask && p < n; p++)
                if (!a->mask[p]) {
                    if (a->out16)
                        a->out16[pl * n + p] = a->nodata16;
                    else
                        a->out32[pl * n + p] = a->nodata32;
                }
        }
    if (closing)
        return;
    size_t pl = band * a->planes + (a->nfilters ? a->filters[0].nthresholds : 0);
    for (size_t p = 0; p < n; p++) {
        int valid = !a->mask || a->mask[p];
        if (a->out16)
            a->out16[pl * n + p] = valid ? q[p] : a->nodata16;
        else
            a->out32[pl * n + p] = valid ? (float)q[p] : a->nodata32;
    }
}

static void profile_task(const hyprof_eap_args_t *a, size_t band, int closing, work_t *w)
{
    size_t n = w->n;
    const uint16_t *f = a->q + band * n;
    if (closing) {
        uint16_t top = (uint16_t)(a->levels - 1);
        for (size_t p = 0; p < n; p++)
            w->g[p] = (!a->mask || a->mask[p]) ? (uint16_t)(top - f[p]) : 0;
        f = w->g;
    }
    size_t nv = build_tree(a, f, w);
    for (size_t fi = 0; fi < a->nfilters; fi++)
        filter_tree(a, band, closing, fi, f, nv, w);
    fill_band_and_nodata(a, band, closing);
}

/* One polarity of `band` is finished: when the other is too, the band's
 * planes are final and go to the caller (hyprof__band_done), so a writer
 * can take them while the next bands compute. Float output only: that is
 * the cube hyprof_eap returns (the 16-bit planes of
 * hyprof_attribute_profiles_bands go to their own callback). Without
 * `halves` (its allocation failed) the planes are simply not announced. */
static void band_half_done(hyprof_ctx_t *ctx, const hyprof_eap_args_t *a, size_t band,
                           unsigned char *halves)
{
    if (!halves)
        return;
    unsigned char now;
    #pragma omp atomic capture
    now = ++halves[band];
    if (now != 2)
        return;
    size_t n = a->width * a->height;
    for (size_t k = 0; k < a->planes; k++)
        hyprof__band_done(ctx, band * a->planes + k, a->out32 + (band * a->planes + k) * n);
}

/* Bytes of work buffers one thread allocates (work_alloc). */
static size_t work_bytes(const hyprof_eap_args_t *a)
{
    size_t maxthr = 1;
    for (size_t f = 0; f < a->nfilters; f++)
        if (a->filters[f].nthresholds > maxthr)
            maxthr = a->filters[f].nthresholds;
    return a->width * a->height * (2 + 4 * 4 + 1 + 2 * maxthr + 8 * (size_t)needs_acc(a)) +
           (size_t)a->levels * 4;
}

/* Threads whose work buffers fit in a quarter of the physical memory (the
 * rest for the input, its quantised copy and the output): a 10748 x 12288
 * band needs about 4.4 GB a thread. At least one. */
static int threads_for_memory(const hyprof_eap_args_t *a, int threads)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return threads;
    size_t budget = (size_t)pages / 4 * (size_t)page, per = work_bytes(a);
    size_t fit = per ? budget / per : (size_t)threads;
    if (fit < 1)
        fit = 1;
    return fit < (size_t)threads ? (int)fit : threads;
}

hyprof_status_t hyprof__cpu_eap(hyprof_ctx_t *ctx, void *args)
{
    const hyprof_eap_args_t *a = args;
    size_t ntasks = 2 * a->bands;
    int threads = hyprof__threads(ctx);
    if ((size_t)threads > ntasks)
        threads = (int)ntasks;
    int fit = threads_for_memory(a, threads);
    if (fit < threads) {
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "%s: %d thread(s) instead of %d: %zu bytes of tree buffers each",
                    a->op, fit, threads, work_bytes(a));
        threads = fit;
    }
    int nomem = 0, stop = 0;
    size_t done = 0;
    unsigned char *halves = a->out32 ? calloc(a->bands, 1) : NULL;
    #pragma omp parallel num_threads(threads)
    {
        work_t w;
        int ok = work_alloc(&w, a);
        if (!ok) {
            #pragma omp atomic write
            nomem = 1;
        }
        #pragma omp for schedule(dynamic, 1)
        for (size_t t = 0; t < ntasks; t++) {
            int skip;
            #pragma omp atomic read
            skip = stop;
            if (!ok || skip)
                continue;
            profile_task(a, t / 2, (int)(t % 2), &w);
            band_half_done(ctx, a, t / 2, halves);
            size_t d;
            #pragma omp atomic capture
            d = ++done;
            if (hyprof__progress_omp(ctx, (double)d / (double)ntasks, a->op)) {
                #pragma omp atomic write
                stop = 1;
            }
        }
        if (ok)
            work_free(&w);
    }
    free(halves);
    if (nomem)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, a->op,
                             "cannot allocate the max-tree buffers (%zux%zu pixels, %d threads)",
                             a->width, a->height, threads);
    if (stop) /* hyprof__progress has recorded "op: cancelled" */
        return HYPROF_ERR_CANCELLED;
    return HYPROF_OK;
}
