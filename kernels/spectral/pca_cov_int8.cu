/* The exact covariance of an integer-valued resident cube on the integer
 * tensor cores (semantics: algorithms/spectral/pca_impl.h): the default for
 * a resident cube of up to kTcMaxBands bands on sm_80 and later.
 *
 * Sensors deliver integers (AVIRIS, ROSIS, Houston, EnMAP and PRISMA store
 * 12- to 16-bit counts or scaled reflectance), and for integers the Gram
 * matrix needs no floating point at all: with an integer shift K (the
 * rounded shift_kernel estimate) each value v = x - K is an integer, split
 * into v = 256 h + l with h signed and l unsigned bytes, and
 *   G = sum v v^T = 65536 sum h h^T + 256 sum (h l^T + l h^T) + sum l l^T,
 * three int8 products on the integer tensor cores (mma.sync m16n8k32, int32
 * accumulators: exact), combined in int64 and added up over the CTAs by
 * 64-bit integer atomics, which gram_finish_kernel<long long> reads: G and
 * s = sum v are exact, and the covariance (G - s s^T / n) / (n - 1) has only
 * the rounding of its last double operations. The integer multiply-adds cost
 * a fraction of the FP64 pipe's and the bytes staged in shared memory a
 * quarter of the doubles.
 *
 * It applies when every valid value is an integer of magnitude below 2^22
 * within 32767 of its band's K; the converting threads check each value on
 * the way (a float add and subtract of 1.5 2^23 round to the integer and
 * back) and raise *bad otherwise, which the finish kernel passes to the host
 * (HostStage): then the caller runs gram_tc_kernel (pca_cov_tc.cu) instead,
 * so any cube gets the same covariance, to rounding, either way.
 *
 * Layout: every warp converts and multiplies. A ring of kI8Ring raw stages
 * of kTcP pixels arrives by cp.async, queued by the warps with 2 tiles or
 * fewer (the converters); each stage is converted to bytes in one of two
 * planes [h rows | l rows][kI8Ld] (rows: the bands padded to a multiple of
 * 16 with zeros), an item (a band's 4 pixels) a thread and the rest by the
 * converters, while the other plane is multiplied: one barrier a stage. A
 * warp owns a group of up to kI8MaxCols 16 x 8 tiles of one tile row of the
 * lower triangle, each with three int32 accumulators (hh, the cross sum
 * hl + lh, ll: 12 registers). The pixels of a stage are the mma's k: their
 * order does not matter, so they sit in the order of the fragments (pixel
 * positions 8 t .. 8 t + 7 hold pixels 4 t .. 4 t + 3 and 16 + 4 t .. 16 +
 * 4 t + 3): a lane's A or B fragment of a row is one 8-byte load, and the
 * 32-byte rows put a warp's loads on distinct banks. An int32 accumulator
 * takes at most 65280 a pixel (the cross sum): kI8MaxPx pixels a CTA at
 * most, so larger cubes get more CTAs. The kernel is latency-bound (about
 * half the DRAM bandwidth): the stage loop's barriers, not its arithmetic,
 * set its time. */
#include "pca_cuda.cuh"

#include <algorithm>
#include <cuda_pipeline.h>
#include <vector>

namespace {

const int kI8MaxCols = 4;   /* 48 accumulator registers a lane */
/* Warps a CTA: 7 on each sub-partition leave 72 registers a thread (8: 64,
 * too few for 48 accumulators). 144 bands take 25 groups. */
const int kI8Warps = 28;
const int kI8Threads = 32 * kI8Warps;
const int kI8Ld = kTcP;     /* bytes a plane row: 8 banks, conflict-free fragment loads */
const int kI8Ring = 5;      /* raw stages: 4 in flight (83 KB an SM) */
const int kI8MaxPx = 32768; /* 65280 * 32768 < 2^31 */
/* Rows of the h and of the l plane, whatever the bands (those past the
 * plan's rows are never read): constant offsets spare registers. */
const int kI8Rows = (kTcMaxBands + 15) / 16 * 16;
const size_t kI8Plane = (size_t)2 * kI8Rows * kI8Ld; /* one stage: h rows, then l rows */

inline size_t gram_i8_smem_bytes(int bands)
{
    const size_t bp = (size_t)(bands + 1) / 2 * 2;
    return bp * (sizeof(long long) + 2 * sizeof(int)) + /* src, K, off */
           bp * 8 * sizeof(int) +                        /* S */
           2 * kI8Plane +                                /* planes */
           (size_t)kI8Ring * bands * kTcRaw * sizeof(float); /* raw ring */
}

/* The groups of gram_i8_kernel: each tile row's tiles in groups of
 * kI8MaxCols and the rest, padded with empty groups to kI8Warps; warps
 * with 2 tiles or fewer also convert (bits 24-31: their rank among the
 * converters, plan.conv of them). Groups go, converters first, to the
 * least loaded sub-partition with a free slot (warp w runs on w % 4).
 * warps 0: more groups than kI8Warps. */
static TcPlan i8_plan(int bands)
{
    struct Group { int r, c0, nc; };
    std::vector<Group> groups;
    const int rt = (bands + 15) / 16, ct = (bands + 7) / 8;
    for (int r = 0; r < rt; ++r) {
        const int need = 2 * r + 2 < ct ? 2 * r + 2 : ct; /* tiles c <= 2 r + 1 */
        int c = 0;
        for (; need - c >= kI8MaxCols; c += kI8MaxCols)
            groups.push_back({r, c, kI8MaxCols});
        if (c < need)
            groups.push_back({r, c, need - c});
    }
    TcPlan p;
    memset(&p, 0, sizeof p);
    p.rows = 16 * rt;
    if ((int)groups.size() > kI8Warps)
        return p;
    while ((int)groups.size() < kI8Warps)
        groups.push_back({0, 0, 0});
    auto cost = [](const Group &g) { return g.nc <= 2 ? 10 : g.nc; }; /* conversion dominates */
    std::stable_sort(groups.begin(), groups.end(),
                     [&](const Group &a, const Group &b) { return cost(a) > cost(b); });
    std::vector<Group> bin[4];
    int load[4] = {0, 0, 0, 0};
    for (const Group &g : groups) {
        int best = -1;
        for (int s = 0; s < 4; ++s)
            if ((int)bin[s].size() < kI8Warps / 4 && (best < 0 || load[s] < load[best]))
                best = s;
        bin[best].push_back(g);
        load[best] += cost(g);
    }
    for (int w = 0; w < kI8Warps; ++w) {
        const Group &g = bin[w % 4][w / 4];
        const unsigned rank = g.nc <= 2 ? (unsigned)p.conv++ : 255u;
        p.group[w] = (unsigned)g.r | (unsigned)g.c0 << 8 | (unsigned)g.nc << 16 | rank << 24;
    }
    p.warps = kI8Warps;
    return p;
}

/* d += a b for int8 fragments; S8A / S8B: a / b signed (else unsigned). */
template <bool S8A, bool S8B>
__device__ __forceinline__ void imma_16x8x32(int (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define HYPROF_IMMA(AT, BT)                                                                       \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." AT "." BT ".s32 {%0, %1, %2, %3}, "     \
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                                \
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
    if (S8A && S8B)
        HYPROF_IMMA("s8", "s8");
    else if (S8A)
        HYPROF_IMMA("s8", "u8");
    else if (S8B)
        HYPROF_IMMA("u8", "s8");
    else
        HYPROF_IMMA("u8", "u8");
#undef HYPROF_IMMA
#endif
}

__device__ __forceinline__ uint2 lds64(unsigned addr)
{
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}

/* A warp's tiles (r, c0 .. c0 + NC - 1) of the stage whose plane holds the
 * lane's A fragments at shared address pa and B fragments at pb. */
template <int NC>
__device__ __forceinline__ void i8_mma(unsigned pa, unsigned pb, int (&hh)[NC][4],
                                       int (&hl)[NC][4], int (&ll)[NC][4])
{
    constexpr unsigned lo = kI8Rows * kI8Ld; /* the l rows follow the h rows */
    const uint2 h0 = lds64(pa), h1 = lds64(pa + 8 * kI8Ld);
    const uint2 l0 = lds64(pa + lo), l1 = lds64(pa + lo + 8 * kI8Ld);
    const unsigned ah[4] = {h0.x, h1.x, h0.y, h1.y}, al[4] = {l0.x, l1.x, l0.y, l1.y};
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        const uint2 bh = lds64(pb + c * 8 * kI8Ld), bl = lds64(pb + lo + c * 8 * kI8Ld);
        imma_16x8x32<true, true>(hh[c], ah, bh.x, bh.y);
        imma_16x8x32<true, false>(hl[c], ah, bl.x, bl.y);
        imma_16x8x32<false, true>(hl[c], al, bh.x, bh.y);
        imma_16x8x32<false, false>(ll[c], al, bl.x, bl.y);
    }
}

/* Converters of any plan (8 for 129-144 bands, more below; i8_launch
 * checks): a converter lane's chunks and items a stage are bounded (the
 * items: kI8Threads + 32 kI8MinConv >= 8 kTcMaxBands). */
const int kI8MinConv = 8;
const int kI8Chunks = (kTcMaxBands * (kTcRaw / 4) + 32 * kI8MinConv - 1) / (32 * kI8MinConv);
static_assert(kI8Threads + 32 * kI8MinConv >= 8 * kTcMaxBands, "every item has a thread");

__device__ __forceinline__ void cp_async16s(unsigned dst, const float *src, unsigned bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes)
                 : "memory");
}

/* Item i of a stage (band i / 8, pixels 4 q .. 4 q + 3, q = i % 8) from
 * ring slot rs into plane cs: roff = off[b] + 4 q (floats), woff its word
 * of h in the plane (at the fragments' pixel position; l's is kI8Rows rows
 * on), kb = K[b] + the bits of 1.5 2^23. valid: 4 bits; kFull: all. */
template <bool kFull>
__device__ __forceinline__ void i8_item(const float *rs, unsigned char *cs, int roff, int woff,
                                        int kb, unsigned valid, int &sum, unsigned &bad)
{
    const float *rp = rs + roff;
    const float f0 = rp[0], f1 = rp[1], f2 = rp[2], f3 = rp[3];
    const int v0 = i8_value(f0, kb, kFull || (valid & 1u), bad);
    const int v1 = i8_value(f1, kb, kFull || (valid & 2u), bad);
    const int v2 = i8_value(f2, kb, kFull || (valid & 4u), bad);
    const int v3 = i8_value(f3, kb, kFull || (valid & 8u), bad);
    sum += v0 + v1 + v2 + v3;
    /* byte 1 of each v is h (v >> 8), byte 0 is l (v & 255) */
    *reinterpret_cast<unsigned *>(cs + woff) = __byte_perm(
        __byte_perm(v0, v1, 0x0051), __byte_perm(v2, v3, 0x0051), 0x5410);
    *reinterpret_cast<unsigned *>(cs + woff + kI8Rows * kI8Ld) = __byte_perm(
        __byte_perm(v0, v1, 0x0040), __byte_perm(v2, v3, 0x0040), 0x5410);
}

/* The 4 validity bits of item q's pixels in a stage of lim pixels (mask
 * m0: the stage's first pixel's). */
__device__ __forceinline__ unsigned i8_valid(int q, int lim, const uint8_t *m0)
{
    unsigned valid = 4 * q + 4 <= lim ? 15u : (1u << (lim > 4 * q ? lim - 4 * q : 0)) - 1u;
    if (m0)
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if ((valid >> j & 1u) && !m0[4 * q + j])
                valid &= ~(1u << j);
    return valid;
}

/* A converter lane's chunks, fixed for the call: stage 0's element offset
 * (-1: none) and the byte offset in a ring slot. */
__device__ __forceinline__ void i8_chunk_offsets(int cr, int lane, int nconv, int bands,
                                                 const long long *src,
                                                 long long (&ge)[kI8Chunks],
                                                 unsigned (&so)[kI8Chunks])
{
    constexpr int kCh = kTcRaw / 4;
#pragma unroll
    for (int m = 0; m < kI8Chunks; ++m) {
        const int c = cr * 32 + lane + m * 32 * nconv, b = c / kCh, k = c - kCh * b;
        ge[m] = c < bands * kCh ? src[b] + 4 * k : -1;
        so[m] = (unsigned)(b * kTcRaw + 4 * k) * 4u;
    }
}

/* The end of a warp's loop: the failed-check flag, its items' sums into S
 * (each |S| <= 32768 kI8MaxPx / 8 = 2^27) and G's entries of its NC tiles
 * (r, c0 ..), the h 256 + l parts combined in 64 bits, added to the CTAs'
 * total. */
template <int NC, int NA>
__device__ __forceinline__ void i8_finish(const int (&hh)[NA][4], const int (&hl)[NA][4],
                                          const int (&ll)[NA][4], int r, int c0, int bands,
                                          int lane, unsigned nok, unsigned *bad, int *S, int i0,
                                          bool has0, int sum0, int i1, bool has1, int sum1,
                                          long long *acc)
{
    constexpr bool kConv = NC <= 2;
    const int g = lane >> 2, t = lane & 3;
    if (__any_sync(0xffffffffu, nok) && lane == 0)
        *bad = 1u;
    if (has0)
        S[i0] = sum0;
    if (kConv && has1)
        S[i1] = sum1;
    if constexpr (NC > 0)
#pragma unroll
        for (int c = 0; c < NA; ++c)
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                const int i = 16 * r + g + (h >> 1) * 8, j = 8 * (c0 + c) + 2 * t + (h & 1);
                if (i < bands && j <= i)
                    atomicAdd(reinterpret_cast<unsigned long long *>(acc) + i + (size_t)j * bands,
                              (unsigned long long)(65536LL * hh[c][h] + 256LL * hl[c][h] +
                                                   (long long)ll[c][h]));
            }
}

/* A warp's part of the CTA's loop: NC tiles (r, c0 ..). Every thread
 * converts item tid of each stage; the warps with NC <= 2 (converter cr of
 * nconv) also queue the copies and convert the items past kI8Threads (the
 * conversion's latency, not its instructions, sets the stage time: every
 * thread converting one item hides it better than the converters alone).
 * Iteration s: (converters) wait
 * for their copies of stage s + 1; one barrier (stage s + 1 landed, plane
 * (s + 1) & 1 and ring slot s free); (converters) queue stage s +
 * kI8Ring into slot s; convert stage s + 1 into plane (s + 1) & 1;
 * multiply plane s & 1. A thread's items are fixed for the call: tid, and
 * for converters kI8Threads + 32 cr + lane (none past the stage's 8 bands
 * items); so are a converter's chunks (i8_chunk_offsets). Shared memory: src
 * (stage 0's 16-byte aligned run starts), K, off (b kTcRaw + the run's
 * offset), S ([bands][8] item sums), pl (two planes), raw (the ring). */
/* The CTA barrier of i8_loop. Warps run different instances of i8_loop
 * (gram_i8_kernel's switch on their tile count), so the CTA's threads reach
 * the barrier at different instructions: that needs the non-aligned
 * barrier.sync (an aligned __syncthreads requires one instruction for the
 * whole CTA). Every thread still arrives 1 + nst times. */
__device__ __forceinline__ void i8_cta_sync()
{
    asm volatile("barrier.sync 0;\n" ::: "memory");
}

template <int NC>
__device__ __forceinline__ void i8_loop(const float *__restrict__ x, size_t n, int bands,
                                        const uint8_t *__restrict__ mask, size_t p_begin,
                                        size_t p_end, int nst, int nconv, const long long *src,
                                        const int *K, const int *off, int *S, unsigned char *pl,
                                        float *raw, int r, int c0, int cr, long long *acc,
                                        unsigned *bad)
{
    constexpr bool kConv = NC <= 2, kMma = NC > 0;
    constexpr int NA = NC > 0 ? NC : 1;
    const int tid = (int)threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    int hh[NA][4], hl[NA][4], ll[NA][4];
#pragma unroll
    for (int c = 0; c < NA; ++c)
#pragma unroll
        for (int h = 0; h < 4; ++h)
            hh[c][h] = hl[c][h] = ll[c][h] = 0;
    unsigned nok = 0;
    const unsigned base = (unsigned)__cvta_generic_to_shared(pl);
    const unsigned sa = base + (16 * r + g) * kI8Ld + 8 * t, sb = base + (8 * c0 + g) * kI8Ld + 8 * t;
    const int i0 = tid, i1 = kConv ? kI8Threads + cr * 32 + lane : 8 * bands;
    const bool has0 = i0 < 8 * bands, has1 = i1 < 8 * bands;
    const int b0 = has0 ? i0 >> 3 : 0, b1 = has1 ? i1 >> 3 : 0;
    const int ro0 = off[b0] + 4 * (i0 & 7), kb0 = kI8Bias + K[b0];
    const int wo0 = b0 * kI8Ld + ((i0 & 7) < 4 ? 8 * (i0 & 7) : 8 * ((i0 & 7) - 4) + 4);
    const int ro1 = off[b1] + 4 * (i1 & 7), kb1 = kI8Bias + K[b1];
    const int wo1 = b1 * kI8Ld + ((i1 & 7) < 4 ? 8 * (i1 & 7) : 8 * ((i1 & 7) - 4) + 4);
    int sum0 = 0, sum1 = 0;
    long long ge[kConv ? kI8Chunks : 1];
    unsigned so[kConv ? kI8Chunks : 1];
    const long long total = (long long)n * bands, last = src[bands - 1] + kTcRaw;
    const unsigned rawb = (unsigned)__cvta_generic_to_shared(raw), slot = bands * kTcRaw * 4;
    if constexpr (kConv)
        i8_chunk_offsets(cr, lane, nconv, bands, src, ge, so);
    auto issue = [&](int s) {
        if constexpr (kConv) {
            if (s < nst) {
                const long long ds = (long long)s * kTcP;
                const bool safe = last + ds <= total; /* no run crosses the cube's end */
                const unsigned dst = rawb + (unsigned)(s % kI8Ring) * slot;
#pragma unroll
                for (int m = 0; m < kI8Chunks; ++m) {
                    if (ge[m] < 0)
                        continue;
                    const long long e = ge[m] + ds;
                    const unsigned in = safe || e + 4 <= total ? 16u
                                        : e < total         ? 4u * (unsigned)(total - e)
                                                            : 0u;
                    cp_async16s(dst + so[m], x + (in ? e : 0), in);
                }
            }
            __pipeline_commit(); /* empty past the end: the group count stays uniform */
        }
    };
    auto convert = [&](int s) {
        const float *rs = raw + (size_t)(s % kI8Ring) * bands * kTcRaw;
        unsigned char *cs = pl + (size_t)(s & 1) * kI8Plane;
        const size_t p0 = p_begin + (size_t)s * kTcP;
        const int lim = p_end - p0 < (size_t)kTcP ? (int)(p_end - p0) : kTcP;
        if (lim == kTcP && !mask) {
            if (has0)
                i8_item<true>(rs, cs, ro0, wo0, kb0, 15u, sum0, nok);
            if (kConv && has1)
                i8_item<true>(rs, cs, ro1, wo1, kb1, 15u, sum1, nok);
        } else {
            const uint8_t *m0 = mask ? mask + p0 : NULL;
            if (has0)
                i8_item<false>(rs, cs, ro0, wo0, kb0, i8_valid(i0 & 7, lim, m0), sum0, nok);
            if (kConv && has1)
                i8_item<false>(rs, cs, ro1, wo1, kb1, i8_valid(i1 & 7, lim, m0), sum1, nok);
        }
    };
    if (kConv) {
        for (int s = 0; s < kI8Ring; ++s)
            issue(s);
        __pipeline_wait_prior(kI8Ring - 1);
    }
    i8_cta_sync();
    if (nst > 0)
        convert(0);
#pragma unroll 1
    for (int s = 0; s < nst; ++s) {
        if (kConv)
            __pipeline_wait_prior(kI8Ring - 2); /* this thread's copies of stage s + 1 */
        i8_cta_sync();
        issue(s + kI8Ring);
        if (s + 1 < nst)
            convert(s + 1);
        if constexpr (kMma) {
            const unsigned po = (unsigned)(s & 1) * (unsigned)kI8Plane;
            i8_mma<NA>(sa + po, sb + po, hh, hl, ll);
        }
    }
    if (kConv)
        __pipeline_wait_prior(0);
    i8_finish<NC, NA>(hh, hl, ll, r, c0, bands, lane, nok, bad, S, i0, has0, sum0, i1, has1, sum1,
                      acc);
}

/* Dynamic shared memory: gram_i8_smem_bytes(bands); kI8Threads threads;
 * plan: i8_plan(bands); at most kI8MaxPx pixels a CTA. Every CTA adds its
 * part of G's lower triangle into acc (B x B int64) and of the band sums
 * into psum (B int64), both zeroed by the caller (integer atomics: the same
 * sums in any order); *bad set (never cleared) if a valid value does not
 * qualify. */
__global__ void __launch_bounds__(kI8Threads, 1)
    gram_i8_kernel(const float *__restrict__ x, size_t n, int bands,
                   const uint8_t *__restrict__ mask, const double *__restrict__ shift,
                   const TcPlan plan, long long *__restrict__ acc, long long *__restrict__ psum,
                   unsigned *__restrict__ bad)
{
    extern __shared__ double2 i8_smem[]; /* 16-byte aligned */
    __shared__ unsigned groups[kI8Warps];
    const int tid = (int)threadIdx.x, warp = tid >> 5, rows = plan.rows;
    if (tid == 0) { /* constant indices: the plan stays in the parameter space */
#pragma unroll
        for (int i = 0; i < kI8Warps; ++i)
            groups[i] = plan.group[i];
    }
    const int bpad = (bands + 1) / 2 * 2;
    long long *src = reinterpret_cast<long long *>(i8_smem);
    int *K = reinterpret_cast<int *>(src + bpad), *off = K + bpad, *S = off + bpad;
    unsigned char *pl = reinterpret_cast<unsigned char *>(S + 8 * bpad);
    float *raw = reinterpret_cast<float *>(pl + 2 * kI8Plane);
    const int cta = (int)blockIdx.x, ncta = (int)gridDim.x;
    const size_t per = ((n + (size_t)ncta - 1) / (size_t)ncta + kTcP - 1) / kTcP * kTcP;
    const size_t p_begin = (size_t)cta * per < n ? (size_t)cta * per : n;
    const size_t p_end = p_begin + per < n ? p_begin + per : n;
    const int nst = (int)((p_end - p_begin + kTcP - 1) / kTcP);
    for (int b = tid; b < bands; b += kI8Threads) {
        const size_t e = p_begin + (size_t)b * n;
        src[b] = (long long)(e & ~(size_t)3);
        off[b] = b * kTcRaw + (int)(e & 3);
        K[b] = i8_shift(shift[b]);
    }
    for (int i = tid; i < 2 * 2 * (rows - bands) * kI8Ld / 4; i += kI8Threads) {
        const int per_plane = (rows - bands) * kI8Ld / 4, e = i % per_plane; /* padding rows */
        const int half = i / per_plane; /* plane and h / l */
        reinterpret_cast<unsigned *>(pl + (size_t)half * kI8Rows * kI8Ld +
                                     (size_t)bands * kI8Ld)[e] = 0u;
    }
    __syncthreads();
    const unsigned grp = groups[warp];
    const int r = (int)(grp & 255u), c0 = (int)(grp >> 8 & 255u), nc = (int)(grp >> 16 & 255u);
    const int cr = (int)(grp >> 24);
    switch (nc) {
#define HYPROF_I8_LOOP(NC)                                                                       \
    case NC:                                                                                     \
        i8_loop<NC>(x, n, bands, mask, p_begin, p_end, nst, plan.conv, src, K, off, S, pl, raw,   \
                    r, c0, cr, acc, bad);                                                        \
        break;
        HYPROF_I8_LOOP(1)
        HYPROF_I8_LOOP(2)
        HYPROF_I8_LOOP(3)
        HYPROF_I8_LOOP(4)
#undef HYPROF_I8_LOOP
    default: /* no tile: a converter only */
        i8_loop<0>(x, n, bands, mask, p_begin, p_end, nst, plan.conv, src, K, off, S, pl, raw, r,
                   c0, cr, acc, bad);
        break;
    }
    __syncthreads(); /* every item's sum in S: a thread a band adds its 8 */
    for (int b = tid; b < bands; b += kI8Threads) {
        long long v = 0; /* each |S| <= 32768 kI8MaxPx / 8 = 2^27 */
        for (int q = 0; q < 8; ++q)
            v += S[8 * b + q];
        atomicAdd(reinterpret_cast<unsigned long long *>(psum) + b, (unsigned long long)v);
    }
}

} /* namespace */

namespace hyprof_pca {

/* How gram_i8_kernel runs for n pixels of B bands here: a CTA per SM, more
 * when a CTA would hold more than kI8MaxPx pixels. ncta 0: it cannot run
 * (before sm_80, no room for its shared memory, 129 KB for 144 bands, or
 * more bands than kTcMaxBands). */
I8Launch i8_launch(size_t n, size_t B)
{
    I8Launch L;
    memset(&L, 0, sizeof L);
    int sms = 0, optin = 0, major = 0, per_sm = 0;
    if (B > (size_t)kTcMaxBands || !device_limits(&sms, &optin, &major) || major < 8)
        return L;
    L.plan = i8_plan((int)B);
    L.smem = gram_i8_smem_bytes((int)B);
    if (L.plan.warps == 0 || L.plan.conv < kI8MinConv || L.smem > (size_t)optin)
        return L;
    if (cudaFuncSetAttribute(gram_i8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)L.smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gram_i8_kernel, kI8Threads,
                                                      L.smem) != cudaSuccess ||
        per_sm < 1) {
        (void)cudaGetLastError(); /* not an error: the FP64 kernel follows */
        return L;
    }
    const size_t min_px = 4 * (size_t)kTcP, most = (size_t)kI8MaxPx - kTcP;
    L.ncta = (size_t)sms;
    if (L.ncta > n / min_px)
        L.ncta = n / min_px > 0 ? n / min_px : 1;
    if (L.ncta < div_up(n, most)) /* a CTA's pixels, rounded up to a stage, stay <= kI8MaxPx */
        L.ncta = div_up(n, most);
    return L;
}

/* gram_fused with gram_i8_kernel: the same outputs, and host[B + B * B]
 * (mapped HostStage memory, required) is 1 when the cube did not qualify
 * (*d_bad, zeroed by the caller): then they are void. acc (B x B int64) and
 * psum (B int64), zeroed by the caller, receive the CTAs' sums of G and of
 * the bands (integer atomics), so gram_finish_kernel reads one slice. */
hyprof_status_t gram_i8(hyprof_ctx_t *ctx, const I8Launch &L, const float *d_cube, size_t n,
                        size_t B, const uint8_t *d_mask, size_t nvalid, double *d_shift,
                        long long *acc, long long *psum, unsigned *d_bad, double *d_A,
                        double *d_mean, double *host, cudaStream_t st)
{
    static const char op[] = "pca";
    gram_i8_kernel<<<(unsigned)L.ncta, kI8Threads, L.smem, st>>>(d_cube, n, (int)B, d_mask,
                                                                 d_shift, L.plan, acc, psum, d_bad);
    HYPROF_CUDA_CHECK_LAUNCH("gram_i8_kernel");
    gram_finish_kernel<long long>
        <<<(unsigned)div_up(B * B, (size_t)kFinX), kFinX * kFinY, 0, st>>>(
            acc, psum, 1, (int)B, d_shift, (double)nvalid, d_bad, d_A, d_mean, host);
    HYPROF_CUDA_CHECK_LAUNCH("gram_finish_kernel");
    return HYPROF_OK;
}


} /* namespace hyprof_pca */
