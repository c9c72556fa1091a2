/* The fused one-pass covariance of a resident cube on the FP64 tensor cores
 * (semantics: algorithms/spectral/pca_impl.h): the default for a float-valued
 * cube of up to kTcMaxBands bands, and the fallback of the exact integer
 * kernel (pca_cov_int8.cu) when a value is not an integer.
 *
 * One pass over the cube gives both the band sums and the Gram matrix, about
 * a shift K (a per-band estimate of the mean from a sample of pixels,
 * shift_kernel): G = sum (x - K)(x - K)^T and s = sum (x - K) over the valid
 * pixels, then mean = K + s / n and the covariance numerator G - s s^T / n.
 * With K within a fraction of a standard deviation of the mean, the
 * correction s s^T / n is a small fraction of G: no cancellation, the
 * accuracy of the centred two-pass formula, one pass fewer.
 *
 * Warp-specialised: kTcProducers producer warps load stages of kTcP pixels,
 * convert them to double minus K (0 where masked) into one of kTcBufs shared
 * planes cen[band][pixel]; the consumer warps multiply each full plane while
 * the producers fill the next (named barriers FULL / FREE per plane). The
 * producers copy a ring of raw stages with 16-byte cp.async (the default), or
 * load the next stage into registers where the ring does not fit in shared
 * memory. The lower triangle is cut into 16 x 8 tiles (tile (r, c) needed
 * when 16 r + 15 >= 8 c), row by row into groups of up to kTcMaxCols tiles,
 * one group per consumer warp, the groups spread over the four
 * sub-partitions by their tile counts (TcPlan). Each tile is a chain of
 * mma.sync m16n8k8 f64 on sm_90 (fragments: g = lane / 4, t = lane % 4;
 * A rows g, g + 8 and pixels t, t + 4; B column g, pixels t, t + 4; C rows
 * g, g + 8, columns 2 t, 2 t + 1), or the same fragments as four m8n8k4 on
 * sm_80. The warp holding a row's first group also adds its A fragments: the
 * band sums s. Each CTA writes its G (lower triangle) and s into its own
 * slice; gram_finish_kernel adds the slices in CTA order, so the result does
 * not depend on timing. */
#include "pca_cuda.cuh"

#include <algorithm>
#include <cuda_pipeline.h>
#include <vector>

namespace {

const int kTcLd = kTcP + 8;       /* row stride of cen (doubles): conflict-free 16-byte fragment loads */
const int kTcBufs = 3;            /* planes: the producers run up to two stages ahead */
const int kTcProducers = 3;       /* warps */
const int kTcMaxCols = 7;         /* 16 x 8 tiles per consumer warp */
/* Consumer warps: 17 for 144 bands. Registers are per sub-partition (16K):
 * 20 warps, 5 on each, leave 96 a thread (21 would leave 80: spills). */
const int kTcMaxWarps = 17;
const int kTcPerLane = (kTcMaxBands + kTcProducers - 1) / kTcProducers; /* 48 values a lane */

/* Producers with a ring of raw stages (the default): kTcRing stages of floats
 * copied with cp.async, kTcRing - 1 of them in flight; the producers' own
 * named barrier. */
const int kTcRing = 4;
const int kTcBarProd = 1 + 2 * kTcBufs;

inline size_t gram_tc_smem_bytes(int bands, const TcPlan &plan, bool ring, int ld = kTcLd,
                                 int raw = kTcRaw)
{
    return (size_t)(bands + 1) / 2 * 2 * sizeof(double) +
           (size_t)kTcBufs * plan.rows * ld * sizeof(double) +
           (ring ? (size_t)kTcRing * bands * raw * sizeof(float) : 0);
}

/* Tile groups of the lower triangle for `bands` (<= kTcMaxBands), balanced
 * over the four sub-partitions: warp w runs on sub-partition w % 4, the
 * producers are warps 0 .. kTcProducers - 1 and consumer warp w is warp
 * kTcProducers + w, so each sub-partition has a fixed number of consumer
 * slots; the groups go longest first to the least loaded sub-partition with
 * a free slot (144 bands: 17 groups, 22, 22, 22 and 24 tiles, the last on
 * the sub-partition without a producer). warps 0: more groups than
 * kTcMaxWarps (not for bands <= 144). */
static TcPlan tc_plan(int bands)
{
    struct Group { int r, c0, nc; };
    std::vector<Group> groups;
    const int rt = (bands + 15) / 16, ct = (bands + 7) / 8;
    for (int r = 0; r < rt; ++r) {
        const int need = 2 * r + 2 < ct ? 2 * r + 2 : ct; /* tiles c <= 2 r + 1 */
        const int ng = (need + kTcMaxCols - 1) / kTcMaxCols;
        for (int g = 0, c = 0; g < ng; ++g) {
            const int nc = (need - c) / (ng - g); /* even sizes: 14 -> 5, 5, 4 */
            const int take = (need - c) % (ng - g) ? nc + 1 : nc;
            groups.push_back({r, c, take});
            c += take;
        }
    }
    TcPlan p;
    memset(&p, 0, sizeof p);
    p.rows = 16 * rt;
    const int C = (int)groups.size();
    if (C > kTcMaxWarps)
        return p;
    size_t cap[4] = {0, 0, 0, 0};
    for (int w = 0; w < C; ++w)
        cap[(kTcProducers + w) % 4]++;
    std::vector<int> order(groups.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = (int)i;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        return groups[a].nc != groups[b].nc ? groups[a].nc > groups[b].nc : a < b;
    });
    std::vector<int> bin[4];
    int load[4] = {0, 0, 0, 0};
    for (int i : order) {
        int best = -1;
        for (int s = 0; s < 4; ++s)
            if (bin[s].size() < cap[s] && (best < 0 || load[s] < load[best]))
                best = s;
        bin[best].push_back(i);
        load[best] += groups[i].nc;
    }
    size_t next[4] = {0, 0, 0, 0};
    for (int w = 0; w < C; ++w) {
        const int s = (kTcProducers + w) % 4;
        const Group &g = groups[bin[s][next[s]++]];
        p.group[w] = (unsigned)g.r | (unsigned)g.c0 << 8 | (unsigned)g.nc << 16;
    }
    p.warps = C;
    return p;
}

__device__ __forceinline__ void bar_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* The stage hand-over of gram_tc_kernel: FULL (the producers wrote plane
 * buf) and FREE (the consumers are done with it), named barriers. */
struct TcSync {
    int nthreads;
};

/* 16 bytes global -> shared, the first `bytes` of them copied (a multiple of
 * 4), the rest zero-filled; in the cp.async groups of __pipeline_commit. */
__device__ __forceinline__ void cp_async16(float *dst, const float *src, unsigned bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes)
                 : "memory");
}

/* Stage s of plane buf = s % kTcBufs. */
__device__ __forceinline__ void tc_wait_full(const TcSync &y, int s)
{
    bar_sync(1 + s % kTcBufs, y.nthreads);
}
__device__ __forceinline__ void tc_arrive_full(const TcSync &y, int s)
{
    bar_arrive(1 + s % kTcBufs, y.nthreads);
}
/* Before stage s (>= kTcBufs) overwrites the plane of stage s - kTcBufs. */
__device__ __forceinline__ void tc_wait_free(const TcSync &y, int s)
{
    bar_sync(1 + kTcBufs + s % kTcBufs, y.nthreads);
}
__device__ __forceinline__ void tc_arrive_free(const TcSync &y, int s)
{
    bar_arrive(1 + kTcBufs + s % kTcBufs, y.nthreads);
}

/* Per-band shift K: the mean of the valid pixels among up to kShiftSample
 * evenly spaced ones (0 when none is valid: then the formula is the raw
 * moments', still exact in exact arithmetic). One block per band. With
 * `nonint` (device-mapped host memory, zeroed by the host), any sampled
 * value that would fail gram_i8_kernel's check (i8_value's) sets
 * *nonint: then the host runs the FP64 kernel at once instead of the
 * integer pass and its fallback (a float-valued cube would pay both). */
const int kShiftSample = 1024; /* 4 a thread, loaded together */

__global__ void shift_kernel(const float *__restrict__ x, size_t n, const uint8_t *__restrict__ mask,
                             double *__restrict__ shift, double *__restrict__ nonint)
{
    __shared__ double ws[kThreads / 32];
    __shared__ unsigned wc[kThreads / 32];
    __shared__ double kb;
    const size_t b = blockIdx.x, S = n < (size_t)kShiftSample ? n : (size_t)kShiftSample;
    double acc = 0.0;
    unsigned cnt = 0;
    float v[kShiftSample / kThreads];
    bool ok[kShiftSample / kThreads];
#pragma unroll
    for (int u = 0; u < kShiftSample / kThreads; ++u) {
        const size_t i = threadIdx.x + (size_t)u * kThreads, p = i * n / (S ? S : 1);
        ok[u] = i < S && (!mask || mask[p]);
        v[u] = ok[u] ? x[p + b * n] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kShiftSample / kThreads; ++u)
        if (ok[u]) {
            acc += (double)v[u];
            cnt++;
        }
    for (int off = 16; off > 0; off >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, off);
        cnt += __shfl_down_sync(0xffffffffu, cnt, off);
    }
    if ((threadIdx.x & 31) == 0) {
        ws[threadIdx.x >> 5] = acc;
        wc[threadIdx.x >> 5] = cnt;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        unsigned c = 0;
        for (int w = 0; w < kThreads / 32; ++w) {
            t += ws[w];
            c += wc[w];
        }
        shift[b] = kb = c ? t / (double)c : 0.0;
    }
    if (!nonint)
        return;
    __syncthreads();
    const int kbias = kI8Bias + i8_shift(kb);
    unsigned bad = 0;
#pragma unroll
    for (int u = 0; u < kShiftSample / kThreads; ++u)
        (void)i8_value(v[u], kbias, ok[u], bad);
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        *nonint = 1.0; /* the same value from any block */
}

/* The consumer warps of gram_tc_kernel with a compile-time tile count NC
 * (the group r | c0 | NC of the plan): the stage loop unrolled, the loads
 * of a step issued before its multiplications, no per-tile predicates (a
 * loop over a run-time count keeps its fragment offsets in local memory). */
template <int NC>
__device__ __forceinline__ void tc_write(const double (&acc)[NC][4], int r, int c0, int bands,
                                         int lane, bool sums, double rs0, double rs1, double *out,
                                         double *ps);

template <bool kSplit, int NC>
__device__ __forceinline__ void tc_consume(const double *cen, size_t plane, int nst,
                                           const TcSync &y, int r, int c0, int bands, int lane,
                                           double *out, double *ps)
{
    constexpr int LD = kTcLd, KS = 8;
    const int g = lane >> 2, t = lane & 3;
    const bool sums = NC > 0 && c0 == 0;
    double acc[NC > 0 ? NC : 1][4];
#pragma unroll
    for (int c = 0; c < (NC > 0 ? NC : 1); ++c)
        acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.0;
    double rs0 = 0.0, rs1 = 0.0;
    const int ra = (16 * r + g) * LD + 2 * t, rb = (8 * c0 + g) * LD + 2 * t;
    for (int s = 0; s < nst; ++s) {
        const int buf = s % kTcBufs;
        tc_wait_full(y, s);
        const double *cb = cen + (size_t)buf * plane;
        if (NC > 0) {
#pragma unroll(kTcP / KS)
            for (int k0 = 0; k0 < kTcP; k0 += KS) {
                const double2 lo = *reinterpret_cast<const double2 *>(cb + ra + k0);
                const double2 hi = *reinterpret_cast<const double2 *>(cb + ra + 8 * LD + k0);
                const double a[4] = {lo.x, hi.x, lo.y, hi.y};
                if (sums) {
                    rs0 += a[0] + a[2];
                    rs1 += a[1] + a[3];
                }
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    const double2 bv =
                        *reinterpret_cast<const double2 *>(cb + rb + c * 8 * LD + k0);
                    dmma_16x8x8<kSplit>(acc[c], a, bv.x, bv.y);
                }
            }
        }
        if (s + kTcBufs < nst)
            tc_arrive_free(y, s);
    }
    if constexpr (NC == 0)
        return;
    else
        tc_write<NC>(acc, r, c0, bands, lane, sums, rs0, rs1, out, ps);
}

/* The consumer warp's tiles and band sums into its CTA's slices. */
template <int NC>
__device__ __forceinline__ void tc_write(const double (&acc)[NC][4], int r, int c0, int bands,
                                         int lane, bool sums, double rs0, double rs1, double *out,
                                         double *ps)
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            const int i = 16 * r + g + (h >> 1) * 8, j = 8 * (c0 + c) + 2 * t + (h & 1);
            if (i < bands && j <= i)
                out[i + (size_t)j * bands] = acc[c][h];
        }
    if (sums) {
        for (int off = 1; off < 4; off <<= 1) { /* over t: the 4 lanes of a row */
            rs0 += __shfl_xor_sync(0xffffffffu, rs0, off);
            rs1 += __shfl_xor_sync(0xffffffffu, rs1, off);
        }
        if (t == 0 && 16 * r + g < bands)
            ps[16 * r + g] = rs0;
        if (t == 0 && 16 * r + g + 8 < bands)
            ps[16 * r + g + 8] = rs1;
    }
}

/* The producers of gram_tc_kernel with a ring of raw stages (the default):
 * 16-byte copies: each band's stage is the aligned run of kTcRaw floats that
 * holds its kTcP pixels (at offset o_b = (p_begin + b n) mod 4: n may be
 * odd), kTcRaw / 4 chunks a band spread over the producer threads; lane = 4
 * pixels (4 q .. 4 q + 3) of bands bo, bo + 12, ... (bo = lane / 8 + 4 warp),
 * written as two 16-byte stores. A lane converts what others copied: a
 * producer barrier (id kTcBarProd) between the copies' arrival and the
 * conversion, before the ring slot of stage s - 1 is refilled. */
__device__ __forceinline__ void tc_produce_ring(const float *__restrict__ x, size_t n, int bands,
                                                const uint8_t *__restrict__ mask, double *K,
                                                double *cen, size_t plane, size_t p_begin,
                                                size_t p_end, int nst, const TcSync &y, int tid,
                                                int warp, int lane)
{
    constexpr int LD = kTcLd;
    static_assert(kTcProducers == 3 && kTcMaxBands <= 144, "12 lanes' bands x 12");
    /* [kTcRing][bands][kTcRaw], 16-byte aligned */
    float *raw = reinterpret_cast<float *>(K + (bands + 1) / 2 * 2);
    const int pt = tid, q = lane & 7, bo = (lane >> 3) + 4 * warp;
    constexpr int kChunks = kTcRaw / 4;
    const size_t total = n * (size_t)bands;
    auto issue = [&](int s) -> unsigned {
        const size_t p0 = p_begin + (size_t)s * kTcP;
        if (s < nst) {
            float *rb = raw + (size_t)(s % kTcRing) * bands * kTcRaw;
            for (int c = pt; c < bands * kChunks; c += 32 * kTcProducers) {
                const int b = c / kChunks, k = c - kChunks * b;
                const size_t e = ((p0 + (size_t)b * n) & ~(size_t)3) + 4 * (size_t)k;
                /* past the cube's end: zeros (the last chunk keeps what lies inside) */
                const unsigned in = e + 4 <= total ? 16u : e < total ? 4u * (unsigned)(total - e) : 0u;
                cp_async16(rb + b * kTcRaw + 4 * k, x + (in ? e : 0), in);
            }
        }
        __pipeline_commit(); /* empty past the end: the group count stays uniform */
        unsigned v = 0;
        if (s < nst) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const size_t p = p0 + 4 * q + j;
                if (p < p_end && (!mask || mask[p]))
                    v |= 1u << j;
            }
        }
        return v;
    };
    auto step = [&](int s, unsigned valid, unsigned &next) {
        __pipeline_wait_prior(kTcRing - 2); /* stage s has landed (this thread's copies) */
        bar_sync(kTcBarProd, 32 * kTcProducers); /* everyone's; slot of s - 1 free */
        next = issue(s + kTcRing - 1);
        const int buf = s % kTcBufs;
        if (s >= kTcBufs)
            tc_wait_free(y, s); /* stage s - 3 consumed */
        const float *rb = raw + (size_t)(s % kTcRing) * bands * kTcRaw + 4 * q;
        double *cb = cen + (size_t)buf * plane + 4 * q;
#pragma unroll
        for (int i = 0; i < 12; ++i) {
            const int b = bo + 12 * i;
            if (b < bands) {
                const int o = (int)((p_begin + (size_t)b * n) & 3);
                const float *r = rb + b * kTcRaw + o;
                const double k = K[b];
                const double d0 = valid & 1u ? (double)r[0] - k : 0.0;
                const double d1 = valid & 2u ? (double)r[1] - k : 0.0;
                const double d2 = valid & 4u ? (double)r[2] - k : 0.0;
                const double d3 = valid & 8u ? (double)r[3] - k : 0.0;
                *reinterpret_cast<double2 *>(cb + b * LD) = make_double2(d0, d1);
                *reinterpret_cast<double2 *>(cb + b * LD + 2) = make_double2(d2, d3);
            }
        }
        tc_arrive_full(y, s);
    };
    static_assert(kTcRing == 4, "the loop below rotates four stages");
    unsigned r0 = issue(0), r1 = issue(1), r2 = issue(2), r3 = 0;
    for (int s = 0; s < nst; s += 4) {
        step(s, r0, r3);
        if (s + 1 < nst)
            step(s + 1, r1, r0);
        if (s + 2 < nst)
            step(s + 2, r2, r1);
        if (s + 3 < nst)
            step(s + 3, r3, r2);
    }
}

/* Dynamic shared memory: gram_tc_smem_bytes(bands, plan, kRing); 32
 * (kTcProducers + plan.warps) threads; bands <= kTcMaxBands. partial: ncta
 * slices of B x B (lower triangle written), psum: ncta slices of B. With
 * kRing false (when the ring does not fit in shared memory) the producers
 * load the next stage into registers. */
template <bool kSplit, bool kRing>
__global__ void __launch_bounds__(32 * (kTcProducers + kTcMaxWarps), 1)
    gram_tc_kernel(const float *__restrict__ x, size_t n, int bands,
                   const uint8_t *__restrict__ mask, const double *__restrict__ shift,
                   const TcPlan plan, double *__restrict__ partial, double *__restrict__ psum)
{
    constexpr int LD = kTcLd;
    extern __shared__ double2 tc_smem[]; /* 16-byte aligned */
    __shared__ unsigned groups[kTcMaxWarps];
    double *cen = reinterpret_cast<double *>(tc_smem); /* [kTcBufs][rows][LD] */
    const int tid = (int)threadIdx.x, nthreads = (int)blockDim.x;
    const int warp = tid >> 5, lane = tid & 31, rows = plan.rows;
    const size_t plane = (size_t)rows * LD;
    double *K = cen + kTcBufs * plane; /* [bands] */
    const int cta = (int)blockIdx.x, ncta = (int)gridDim.x;
    const size_t per = ((n + (size_t)ncta - 1) / (size_t)ncta + kTcP - 1) / kTcP * kTcP;
    const size_t p_begin = (size_t)cta * per < n ? (size_t)cta * per : n;
    const size_t p_end = p_begin + per < n ? p_begin + per : n;
    const int nst = (int)((p_end - p_begin + kTcP - 1) / kTcP);

    TcSync y;
    y.nthreads = nthreads;
    if (tid == 0) { /* constant indices: the plan stays in the parameter space */
#pragma unroll
        for (int i = 0; i < kTcMaxWarps; ++i)
            groups[i] = plan.group[i];
    }
    for (int i = tid; i < bands; i += nthreads)
        K[i] = shift[i];
    for (int i = tid; i < kTcBufs * (rows - bands) * LD; i += nthreads) { /* padding rows */
        const int bf = i / ((rows - bands) * LD), rest = i % ((rows - bands) * LD);
        cen[bf * plane + (size_t)bands * LD + rest] = 0.0;
    }
    __syncthreads();

    if (warp < kTcProducers && kRing) {
        tc_produce_ring(x, n, bands, mask, K, cen, plane, p_begin, p_end, nst, y, tid, warp, lane);
        return;
    }
    if (warp < kTcProducers) {
        /* Lane = pixel, bands warp, warp + kTcProducers, ... */
        float xr[kTcPerLane];
        bool ok = false;
        auto load = [&](int s) {
            const size_t p = p_begin + (size_t)s * kTcP + lane;
            ok = p < p_end && (!mask || mask[p]);
#pragma unroll
            for (int j = 0; j < kTcPerLane; ++j) {
                const int b = warp + kTcProducers * j;
                xr[j] = ok && b < bands ? x[p + (size_t)b * n] : 0.0f;
            }
        };
        if (nst > 0)
            load(0);
        for (int s = 0; s < nst; ++s) {
            const int buf = s % kTcBufs;
            if (s >= kTcBufs)
                tc_wait_free(y, s); /* stage s - 3 consumed */
            double *cb = cen + (size_t)buf * plane + lane;
#pragma unroll
            for (int j = 0; j < kTcPerLane; ++j) {
                const int b = warp + kTcProducers * j;
                if (b < bands)
                    cb[b * LD] = ok ? (double)xr[j] - K[b] : 0.0;
            }
            tc_arrive_full(y, s);
            if (s + 1 < nst)
                load(s + 1);
        }
        return;
    }

    const unsigned grp = groups[warp - kTcProducers];
    const int r = (int)(grp & 255u), c0 = (int)(grp >> 8 & 255u), nc = (int)(grp >> 16);
    {
        double *out = partial + (size_t)cta * bands * bands, *ps = psum + (size_t)cta * bands;
        switch (nc) {
#define HYPROF_TC_CONSUME(NC)                                                                    \
    case NC:                                                                                     \
        tc_consume<kSplit, NC>(cen, plane, nst, y, r, c0, bands, lane, out, ps);                  \
        return;
            HYPROF_TC_CONSUME(1)
            HYPROF_TC_CONSUME(2)
            HYPROF_TC_CONSUME(3)
            HYPROF_TC_CONSUME(4)
            HYPROF_TC_CONSUME(5)
            HYPROF_TC_CONSUME(6)
            HYPROF_TC_CONSUME(7)
#undef HYPROF_TC_CONSUME
        default: /* no tile: the barriers still count this warp */
            tc_consume<kSplit, 0>(cen, plane, nst, y, r, c0, bands, lane, out, ps);
            return;
        }
    }
}

} /* namespace */

namespace hyprof_pca {

/* The instance of gram_tc_kernel that L names. */
static const void *tc_fn(const TcLaunch &L)
{
    return L.split ? (L.ring ? (const void *)gram_tc_kernel<true, true>
                             : (const void *)gram_tc_kernel<true, false>)
                   : (L.ring ? (const void *)gram_tc_kernel<false, true>
                             : (const void *)gram_tc_kernel<false, false>);
}

/* How gram_tc_kernel runs for B bands on this device: m16n8k8 on sm_90, four
 * m8n8k4 per tile before; the producers' ring when it fits in the opt-in
 * shared memory, else the register producers; a CTA per SM (fewer for small
 * cubes). ncta 0: it cannot run here (a device with less shared memory than
 * the kernel takes, such as sm_86 and sm_89 with 99 KB, or no CTA would
 * fit), then the two-pass path runs. */
TcLaunch tc_launch(size_t n, size_t B)
{
    TcLaunch L;
    memset(&L, 0, sizeof L);
    int sms = 0, optin = 0, major = 0, per_sm = 0;
    if (!device_limits(&sms, &optin, &major))
        return L;
    L.split = major < 9;
    L.plan = tc_plan((int)B);
    L.threads = 32 * (kTcProducers + L.plan.warps);
    L.ring = true;
    L.smem = gram_tc_smem_bytes((int)B, L.plan, L.ring);
    if (L.ring && L.smem > (size_t)optin) { /* the register producers need less */
        L.ring = false;
        L.smem = gram_tc_smem_bytes((int)B, L.plan, false);
    }
    if (L.plan.warps == 0 || L.smem > (size_t)optin)
        return L;
    const void *fn = tc_fn(L);
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.smem) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, L.threads, L.smem) !=
            cudaSuccess ||
        per_sm < 1) {
        (void)cudaGetLastError(); /* not an error: the two-pass path follows */
        return L;
    }
    const size_t min_px = 4 * (size_t)kTcP; /* a few stages per CTA at least */
    L.ncta = (size_t)sms;
    if (L.ncta > n / min_px)
        L.ncta = n / min_px > 0 ? n / min_px : 1;
    return L;
}

/* The fused covariance of a resident cube about the shift in d_shift
 * (shift_kernel, launched with pass 1): the one pass and the finish, into
 * d_A (the covariance, both triangles) and d_mean, and with `host`
 * (device-mapped HostStage memory) the mean and the lower triangle there
 * too. The caller allocated `partial` (L.ncta B x B) and `psum` (L.ncta B). */
hyprof_status_t gram_fused(hyprof_ctx_t *ctx, const TcLaunch &L, const float *d_cube, size_t n,
                           size_t B, const uint8_t *d_mask, size_t nvalid, double *d_shift,
                           double *partial, double *psum, double *d_A, double *d_mean,
                           double *host, cudaStream_t st)
{
    static const char op[] = "pca";
    {
        const float *x = d_cube;
        int nb = (int)B;
        TcPlan plan = L.plan;
        void *args[] = {(void *)&x,       (void *)&n,    (void *)&nb,      (void *)&d_mask,
                        (void *)&d_shift, (void *)&plan, (void *)&partial, (void *)&psum};
        HYPROF_CUDA_CHECK(cudaLaunchKernel(tc_fn(L), dim3((unsigned)L.ncta), dim3(L.threads), args,
                                           L.smem, st));
    }
    HYPROF_CUDA_CHECK_LAUNCH("gram_tc_kernel");
    gram_finish_kernel<double><<<(unsigned)div_up(B * B, (size_t)kFinX), kFinX * kFinY, 0, st>>>(
        partial, psum, (int)L.ncta, (int)B, d_shift, (double)nvalid, NULL, d_A, d_mean, host);
    HYPROF_CUDA_CHECK_LAUNCH("gram_finish_kernel");
    return HYPROF_OK;
}

/* shift_kernel: a block a band. */
hyprof_status_t launch_shift(hyprof_ctx_t *ctx, const char *op, cudaStream_t st,
                             const float *d_cube, size_t n, size_t B, const uint8_t *d_mask,
                             double *d_shift, double *nonint)
{
    shift_kernel<<<(unsigned)B, kThreads, 0, st>>>(d_cube, n, d_mask, d_shift, nonint);
    HYPROF_CUDA_CHECK_LAUNCH("shift_kernel");
    return HYPROF_OK;
}

} /* namespace hyprof_pca */
