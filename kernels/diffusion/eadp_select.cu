/* CUDA EADP, the contrast k per band (eadp_impl.h, step 3) on the device: an
 * exact radix selection of the order statistics that NumPy's linear
 * percentile of sqrt(G) needs, for the main percentile and for the G > 0
 * fallback at once (kSelQueries queries a band), then k as in eadp.c (lo +
 * t (hi - lo), the same fallbacks). G >= 0, so its bit patterns order like
 * its values: the key of a pixel is its bit pattern (sel_key).
 *
 * Six passes of 9/11 bits (kSelShift, kSelWidth), each a histogram of the
 * next digit of the keys that match each query's prefix:
 *
 *   sel_pass_kernel (passes 0 .. kSelCollect, one launch each, 1024-thread
 *                   blocks, two an SM, one wave over the bands): every
 *                   block first finds the pass's states itself (pass 0: the
 *                   ranks from the counts; later ones: the bin that holds
 *                   each rank in the previous pass's histograms, read
 *                   through the coarse histograms, sel_find_step) and one
 *                   block per band stores them; no setup or scan launches.
 *                   Passes 0 to 2 read the keys' high words that the
 *                   gradient pass wrote (their digits lie there: 4 bytes a
 *                   pixel instead of 8); pass kSelCollect also copies the
 *                   keys that match a query (20 bits decided: normally a few
 *                   thousand) into a candidate list.
 *   sel_last_kernel (one 1024-thread block per band): the last three passes
 *                   over the candidates with the histograms in shared
 *                   memory, their scans, and k.
 *
 * Each pass has its own slot of states and histograms (pass p clears slot
 * p + 1), so no block reads what another block of its launch writes. */
#include "eadp_cuda.cuh"

#include <cmath>

#include <cub/warp/warp_scan.cuh>

using namespace hyprof_cuda;
using namespace hyprof_cuda::eadp;

namespace {

const int kSelShift[kSelPasses] = {55, 44, 33, 22, 11, 0};
const int kSelWidth[kSelPasses] = {9, 11, 11, 11, 11, 11};

/* Position of a NumPy-linear percentile among n sorted values: rank of the
 * lower order statistic and of the upper one (equal when no interpolation). */
HYPROF_EADP_FN void pct_ranks(double pct, u64 n, long long *lo, long long *hi, double *pos)
{
    *pos = pct * (double)(n - 1);
    u64 i = (u64)floor(*pos);
    if (i > n - 1)
        i = n - 1;
    *lo = (long long)i;
    *hi = (i + 1 >= n || *pos == (double)i) ? (long long)i : (long long)(i + 1);
}

/* The ranks to select in a band (its counts cb: valid, G == 0, G > 0). */
HYPROF_EADP_FN void sel_ranks(const u64 *cb, double pct, SelState *s)
{
    const u64 n = cb[0], z = cb[1], np = cb[2];
    for (int q = 0; q < kSelQueries; ++q) {
        s[q].prefix = 0;
        s[q].rank = -1;
    }
    long long lo, hi;
    double pos;
    if (n >= 1) {
        pct_ranks(pct, n, &lo, &hi, &pos);
        s[0].rank = lo;
        s[1].rank = hi;
    }
    if (np >= 1) {
        pct_ranks(pct, np, &lo, &hi, &pos);
        s[2].rank = (long long)z + lo;
        s[3].rank = (long long)z + hi;
    }
}

/* Counts `key` for the first active query whose prefix it has (and with
 * cand, appends it to the band's candidate list). */
const int kSelUnroll = 4;

HYPROF_EADP_FN void sel_count(unsigned *sh, u64 key, u64 hmask, int shift, unsigned dmask,
                              const bool *act, const u64 *pre, u64 *cand, u64 *ncand, int b,
                              size_t npix, const double *gfull)
{
    const u64 km = key & hmask;
    for (int q = 0; q < kSelQueries; ++q)
        if (act[q] && km == pre[q]) {
            atomicAdd(&sh[q * kSelBins + (int)((key >> shift) & dmask)], 1u);
            if (cand)
                cand[(size_t)b * npix + atomicAdd(&ncand[b], 1ull)] =
                    gfull ? sel_key(*gfull) : key; /* gfull: key holds the high word only */
            break;
        }
}

/* Histogram of the next digit of the keys that match each query's prefix. Each
 * key counts once, for the first query with its prefix (queries with equal
 * prefixes share it: see sel_scan_step). `sh`: kSelQueries * kSelBins shared
 * counters; `s`: the band's states; gcoarse (or NULL): the coarse histograms
 * (kSelCoarse bins of 32 digits a query and band) that sel_find_step reads.
 * grid z = band. */
HYPROF_EADP_FN void sel_hist_body(const Thr &t, unsigned *sh, const double *G,
                                  const unsigned *Kh, const uint8_t *mask, size_t npix,
                                  const SelState *s, u64 hmask, int shift, unsigned dmask,
                                  u64 *ghist, u64 *gcoarse, const u64 *list, u64 *cand,
                                  u64 *ncand)
{
    const int tid = t.ty * t.bdx + t.tx, nthr = t.bdx * t.bdy;
    const int b = t.bz;
    u64 pre[kSelQueries];
    bool act[kSelQueries], lead[kSelQueries];
    for (int q = 0; q < kSelQueries; ++q) {
        act[q] = s[q].rank >= 0;
        pre[q] = s[q].prefix & hmask;
        lead[q] = act[q];
        for (int q2 = 0; q2 < q; ++q2)
            if (act[q2] && pre[q2] == pre[q])
                lead[q] = false;
    }
    /* Only the counters that can count: the digit's bins (512 in the first
     * pass) of the queries whose prefix no earlier query shares (the keys
     * count for the first one). Zeroing and flushing all 4 x 2048 took more
     * time than the counting, at 4096 pixels per block. */
    const int nbins = (int)dmask + 1;
    for (int q = 0; q < kSelQueries; ++q)
        if (lead[q])
            for (int i = tid; i < nbins; i += nthr)
                sh[q * kSelBins + i] = 0;
    __syncthreads();
    /* The keys: of G's valid pixels, or (list) the band's candidates that an
     * earlier pass collected; with cand, the keys that match a query also go
     * to the band's candidate list (ncand[b] counts them). */
    const double *gb = G + (size_t)b * npix;
    const u64 *lb = list ? list + (size_t)b * npix : NULL;
    /* Kh (passes whose digits lie in the key's high word): 4 bytes a pixel
     * instead of 8; a collected key's low word from G. */
    const unsigned *kb = Kh && !list ? Kh + (size_t)b * npix : NULL;
    const size_t n = list ? (size_t)ncand[b] : npix;
    /* kSelUnroll keys loaded before any is counted: more loads in flight. */
    const size_t stride = (size_t)t.gdx * nthr;
    size_t p = (size_t)t.bx * nthr + tid;
    for (; p + (kSelUnroll - 1) * stride < n; p += kSelUnroll * stride) {
        u64 keys[kSelUnroll];
        bool valid[kSelUnroll];
        for (int j = 0; j < kSelUnroll; ++j) {
            const size_t pj = p + (size_t)j * stride;
            valid[j] = list || !mask || mask[pj];
            keys[j] = list ? lb[pj] : kb ? (u64)kb[pj] << 32 : sel_key(gb[pj]);
        }
        for (int j = 0; j < kSelUnroll; ++j)
            if (valid[j])
                sel_count(sh, keys[j], hmask, shift, dmask, act, pre, cand, ncand, b, npix,
                          kb ? gb + p + (size_t)j * stride : NULL);
    }
    for (; p < n; p += stride)
        if (list || !mask || mask[p])
            sel_count(sh, list ? lb[p] : kb ? (u64)kb[p] << 32 : sel_key(gb[p]), hmask, shift,
                      dmask, act, pre, cand, ncand, b, npix, kb ? gb + p : NULL);
    __syncthreads();
    u64 *gh = ghist + (size_t)b * kSelQueries * kSelBins;
    u64 *gc = gcoarse ? gcoarse + (size_t)b * kSelQueries * kSelCoarse : NULL;
    for (int q = 0; q < kSelQueries; ++q)
        if (lead[q])
            for (int i = tid; i < nbins; i += nthr) { /* whole warps: nbins, nthr % 32 == 0 */
                const unsigned v = sh[q * kSelBins + i];
                if (v)
                    atomicAdd(&gh[q * kSelBins + i], (u64)v);
                if (gc) { /* a warp's 32 bins are one coarse bin */
                    const unsigned c = __reduce_add_sync(0xffffffffu, v);
                    if ((tid & 31) == 0 && c)
                        atomicAdd(&gc[q * kSelCoarse + i / 32], (u64)c);
                }
            }
}

using SelWarpScan = cub::WarpScan<u64>;

/* The queries' counts side by side, added element by element: one warp scan
 * for all queries. */
struct SelSums {
    u64 v[kSelQueries];
};
struct SelSumsAdd {
    HYPROF_EADP_FN SelSums operator()(const SelSums &a, const SelSums &b) const
    {
        SelSums r;
#pragma unroll
        for (int q = 0; q < kSelQueries; ++q)
            r.v[q] = a.v[q] + b.v[q];
        return r;
    }
};
using SelSumsScan = cub::WarpScan<SelSums>;

/* A selection step in a block of NT threads (NT / 32 warps): for each query,
 * the bin that holds its rank; appends the digit to the prefix and makes the
 * rank relative to the bin. kSelBins / NT bins a thread, the queries' prefix
 * sums side by side (SelSums) by cub::WarpScan, in each warp and then over
 * the warps' totals (two barriers; cub::BlockScan of the same would spill
 * registers in sel_last_kernel's 64): the states after the pass whose
 * histograms are `gh` (the band's, in shared memory) from the states `cur`
 * before it, into ss.nxt. cur is read and gh loaded before the first barrier
 * and ss.nxt written after it (exactly one thread writes each query's
 * state), so cur may be ss.nxt itself; every thread sees ss.nxt after the
 * second. */
template <int NT> struct SelStep {
    u64 wsum[kSelQueries][NT / 32];
    SelSumsScan::TempStorage scan[NT / 32]; /* a warp's */
    SelWarpScan::TempStorage find[kSelQueries]; /* sel_find_step's warps */
    SelState nxt[kSelQueries];
};

template <int NT>
HYPROF_EADP_FN void sel_scan_step(const Thr &t, SelStep<NT> &ss, const SelState *cur, u64 hmask,
                                  int shift, const u64 *gh)
{
    constexpr int per = kSelBins / NT, nw = NT / 32;
    const int tid = t.ty * t.bdx + t.tx, lane = tid & 31, warp = tid >> 5;
    /* The digit's bins: 512 in the first pass (sel_hist_body fills no more). */
    const int nbins = 64 - shift < 11 ? 1 << (64 - shift) : kSelBins;
    const bool used = tid * per < nbins;
    u64 pre[kSelQueries], rank[kSelQueries], hv[kSelQueries][per];
    SelSums mine, incl;
    bool on[kSelQueries];
#pragma unroll
    for (int q = 0; q < kSelQueries; ++q) {
        pre[q] = cur[q].prefix;
        rank[q] = (u64)cur[q].rank;
        on[q] = cur[q].rank >= 0; /* the same for every thread */
    }
#pragma unroll
    for (int q = 0; q < kSelQueries; ++q) {
        int a = q; /* the histogram query q counts in: the first with its prefix */
        for (int q2 = 0; q2 < q; ++q2)
            if (on[q2] && (pre[q2] & hmask) == (pre[q] & hmask)) {
                a = q2;
                break;
            }
        const u64 *h = gh + (size_t)a * kSelBins + (size_t)tid * per;
        mine.v[q] = 0;
#pragma unroll
        for (int j = 0; j < per; ++j) {
            hv[q][j] = on[q] && used ? h[j] : 0;
            mine.v[q] += hv[q][j];
        }
    }
    /* the keys up to this thread's bins in its warp, each query */
    SelSumsScan(ss.scan[warp]).InclusiveScan(mine, incl, SelSumsAdd{});
    if (lane == 31)
#pragma unroll
        for (int q = 0; q < kSelQueries; ++q)
            ss.wsum[q][warp] = incl.v[q];
    __syncthreads();
    /* each warp's offset: the sum of the earlier warps' totals */
    SelSums w;
#pragma unroll
    for (int q = 0; q < kSelQueries; ++q)
        w.v[q] = lane < nw ? ss.wsum[q][lane] : 0;
    SelSumsScan(ss.scan[warp]).InclusiveScan(w, w, SelSumsAdd{});
#pragma unroll
    for (int q = 0; q < kSelQueries; ++q) {
        const u64 base = __shfl_sync(0xffffffffu, w.v[q], warp > 0 ? warp - 1 : 0);
        incl.v[q] += warp > 0 ? base : 0;
        if (!on[q]) {
            if (tid == q) /* unused: unchanged */
                ss.nxt[q] = SelState{pre[q], (long long)rank[q]};
            continue;
        }
        u64 cum = incl.v[q];
        const u64 end = cum;
#pragma unroll
        for (int j = 0; j < per; ++j)
            cum -= hv[q][j]; /* cum: the keys before this thread's bins */
        if (rank[q] >= cum && rank[q] < end) { /* the first bin whose end passes rank */
            int jj = -1;
            u64 bb = 0;
#pragma unroll
            for (int j = 0; j < per; ++j) {
                if (jj < 0 && rank[q] < cum + hv[q][j]) {
                    jj = j;
                    bb = cum;
                }
                cum += hv[q][j];
            }
            ss.nxt[q] = SelState{pre[q] | ((u64)(tid * per + jj) << shift),
                                 (long long)(rank[q] - bb)};
        } else if (tid == NT - 1 && rank[q] >= end) { /* past every key: unchanged */
            ss.nxt[q] = SelState{pre[q], (long long)rank[q]};
        }
    }
    __syncthreads();
}

/* In a warp whose lanes hold counts v in order: the first lane whose inclusive
 * prefix sum (cub::WarpScan) passes r (the same in every lane), and (*before)
 * the counts of the lanes before it; 32 when r is past them all. */
HYPROF_EADP_FN int warp_find(SelWarpScan::TempStorage &tmp, u64 v, u64 r, u64 *before)
{
    u64 incl;
    SelWarpScan(tmp).InclusiveSum(v, incl);
    const unsigned m = __ballot_sync(0xffffffffu, incl > r);
    if (!m)
        return 32;
    const int l = __ffs((int)m) - 1;
    *before = __shfl_sync(0xffffffffu, incl - v, l);
    return l;
}

/* sel_scan_step's result from the coarse histograms as well (`gc`: kSelCoarse
 * bins of 32 digits, the band's), for the passes' prologues, where every
 * block of the band does it: warp q alone finds query q's coarse bin (2 a
 * lane), then its digit among the 32 of that bin: 3 dependent loads of a few
 * hundred bytes instead of every thread loading and scanning the 16 KB
 * histograms. The same contract
 * (ss.nxt after the one barrier). */
template <int NT>
HYPROF_EADP_FN void sel_find_step(const Thr &t, SelStep<NT> &ss, const SelState *cur, u64 hmask,
                                  int shift, const u64 *gh, const u64 *gc)
{
    const int tid = t.ty * t.bdx + t.tx, lane = tid & 31, q = tid >> 5;
    if (q < kSelQueries) {
        const SelState c = cur[q];
        SelState n = c; /* unused, or past every key: unchanged */
        if (c.rank >= 0) {
            int a = q; /* the histogram query q counts in: the first with its prefix */
            for (int q2 = 0; q2 < q; ++q2) {
                const SelState o = cur[q2];
                if (o.rank >= 0 && (o.prefix & hmask) == (c.prefix & hmask)) {
                    a = q2;
                    break;
                }
            }
            const u64 *ca = gc + (size_t)a * kSelCoarse;
            const u64 c0 = ca[2 * lane], c1 = ca[2 * lane + 1];
            u64 r = (u64)c.rank, bef = 0;
            const int l = warp_find(ss.find[q], c0 + c1, r, &bef);
            if (l < 32) { /* warp-uniform */
                const u64 c0l = __shfl_sync(0xffffffffu, c0, l);
                int cb = 2 * l;
                if (r - bef >= c0l) {
                    ++cb;
                    bef += c0l;
                }
                r -= bef;
                const u64 v = gh[(size_t)a * kSelBins + 32 * cb + lane];
                const int l2 = warp_find(ss.find[q], v, r, &bef); /* < 32: the bin holds r */
                if (l2 < 32) {
                    n.prefix = c.prefix | ((u64)(32 * cb + l2) << shift);
                    n.rank = (long long)(r - bef);
                }
            }
        }
        if (lane == 0)
            ss.nxt[q] = n;
    }
    __syncthreads();
}

/* eadp.c's percentile from the two selected order statistics. */
HYPROF_EADP_FN double pct_value(double pct, u64 n, const SelState *lo_hi)
{
    long long lo, hi;
    double pos;
    pct_ranks(pct, n, &lo, &hi, &pos);
    const double a = sqrt(bits_dbl(lo_hi[0].prefix));
    if (hi == lo)
        return a;
    const double bv = sqrt(bits_dbl(lo_hi[1].prefix));
    return add_rn(a, mul_rn(sub_rn(pos, (double)lo), sub_rn(bv, a)));
}

HYPROF_EADP_FN bool good_k(double k) { return k > 0.0 && k <= 1.7976931348623157e308; }

/* A band's k from its counts cb and selected states s, with the fallbacks of
 * eadp_impl.h / eadp.c. */
HYPROF_EADP_FN double sel_k(const u64 *cb, const SelState *s, double pct)
{
    const u64 n = cb[0], np = cb[2];
    double v = n ? pct_value(pct, n, s) : 0.0;
    if (!good_k(v)) {
        v = np ? pct_value(pct, np, s + 2) : 1.0;
        if (!good_k(v))
            v = 1.0;
    }
    return v;
}


/* ---- kernels ------------------------------------------------------------------- */

/* Where a folded selection pass gets its states: pass 0 from the counts, a
 * later one by scanning the previous pass's histograms itself (every block of
 * the band, redundantly: no scan launch between two passes). Each pass has
 * its own slot of states and histograms, so no block reads what another block
 * of its launch writes. */
struct SelFold {
    const u64 *cnt;       /* pass 0: the ranks from the counts (else NULL) */
    double pct;           /* the percentile (pass 0) */
    const SelState *prev; /* a later pass: the previous pass's states ... */
    const u64 *phist;     /* ... and histograms (all bands) */
    const u64 *pcoarse;   /* ... and its coarse ones (sel_find_step) */
    u64 phmask;           /* the previous pass's digit */
    int pshift;
    SelState *out; /* this pass's states (all bands), for the next pass: block 0 writes them */
    u64 *zero;     /* the next pass's slot of histograms, zeroed here (NULL: none) ... */
    size_t nzero;  /* ... its elements */
};

/* The states after the previous pass (f), band b, into ss.nxt. */
template <int NT>
HYPROF_EADP_FN void sel_prev_states(const Thr &t, SelStep<NT> &ss, const SelFold &f, int b)
{
    sel_find_step<NT>(t, ss, f.prev + (size_t)b * kSelQueries, f.phmask, f.pshift,
                      f.phist + (size_t)b * kSelQueries * kSelBins,
                      f.pcoarse + (size_t)b * kSelQueries * kSelCoarse);
}

/* The pass's states of band t.bz into ss.nxt (every thread sees them); block 0
 * stores them, and (pass 0) clears the band's candidate count. */
template <int NT>
HYPROF_EADP_FN void sel_fold_states(const Thr &t, SelStep<NT> &ss, const SelFold &f, u64 *ncand)
{
    const int tid = t.ty * t.bdx + t.tx, b = t.bz;
    if (f.zero) /* this block's share of the next slot */
        for (size_t i = ((size_t)b * t.gdx + t.bx) * NT + tid; i < f.nzero;
             i += (size_t)t.gdx * t.gdz * NT)
            f.zero[i] = 0;
    if (f.cnt) {
        if (tid == 0)
            sel_ranks(f.cnt + 3 * b, f.pct, ss.nxt);
        __syncthreads();
    } else {
        sel_prev_states<NT>(t, ss, f, b);
    }
    if (t.bx == 0 && tid < kSelQueries)
        f.out[(size_t)b * kSelQueries + tid] = ss.nxt[tid];
    if (f.cnt && t.bx == 0 && tid == 0)
        ncand[b] = 0;
}

/* A selection pass: its states (sel_fold_states), then its histograms
 * (sel_hist_body) into ghist and gcoarse, this pass's slot. */
template <int NT>
__global__ void __launch_bounds__(NT, NT == 1024 ? 2 : 1)
    sel_pass_kernel(const double *__restrict__ G, const unsigned *__restrict__ Kh,
                    const uint8_t *__restrict__ mask, size_t npix, SelFold f, u64 hmask,
                    int shift, unsigned dmask, u64 *__restrict__ ghist, u64 *gcoarse,
                    const u64 *list, u64 *cand, u64 *ncand)
{
    __shared__ unsigned sh[kSelQueries * kSelBins];
    __shared__ SelStep<NT> ss;
    sel_fold_states<NT>(HYPROF_EADP_THR, ss, f, ncand);
    sel_hist_body(HYPROF_EADP_THR, sh, G, Kh, mask, npix, ss.nxt, hmask, shift, dmask, ghist,
                  gcoarse, list, cand, ncand);
}

/* The selection's end, one block of kSelLast threads per band: the states
 * after pass first - 1 (f), the passes first .. kSelPasses - 1 over the band's
 * candidates (normally a few thousand keys) with the histograms in shared
 * memory, their scans, and k: one launch instead of 7 (each a few
 * microseconds of latency). first = kSelPasses: only the last step and k. */
struct SelLastShared {
    unsigned cnt[kSelQueries * kSelBins];
    u64 hist[kSelQueries * kSelBins];
    SelStep<kSelLast> step;
};

__global__ void __launch_bounds__(kSelLast)
    sel_last_kernel(size_t npix, SelFold f, int first, const u64 *list, const u64 *ncand,
                    const u64 *__restrict__ cnt, double pct, double *__restrict__ k)
{
    extern __shared__ float4 sel_last_smem[];
    SelLastShared &sh = *reinterpret_cast<SelLastShared *>(sel_last_smem);
    const int b = (int)blockIdx.z, tid = (int)threadIdx.x;
    const Thr one{tid, 0, 0, 0, 0, kSelLast, 1, 1, 1, 1}; /* the kernels' view: band index 0 */
    sel_prev_states<kSelLast>(one, sh.step, f, b);
    const u64 *lb = list + (size_t)b * npix, *nc = ncand + b;
    for (int pass = first; pass < kSelPasses; ++pass) {
        for (int i = tid; i < kSelQueries * kSelBins; i += kSelLast)
            sh.hist[i] = 0; /* the previous scan loaded it before its first barrier */
        const int shift = 55 - 11 * pass, width = 11; /* kSelShift, kSelWidth (host arrays) */
        const u64 hmask = shift + width >= 64 ? 0ull : ~0ull << (shift + width);
        sel_hist_body(one, sh.cnt, NULL, NULL, NULL, npix, sh.step.nxt, hmask, shift,
                      (1u << width) - 1u, sh.hist, NULL, lb, NULL, const_cast<u64 *>(nc));
        __syncthreads();
        sel_scan_step<kSelLast>(one, sh.step, sh.step.nxt, hmask, shift, sh.hist);
    }
    if (tid == 0)
        k[b] = sel_k(cnt + 3 * b, sh.step.nxt, pct);
}

} /* namespace */

namespace hyprof_cuda {
namespace eadp {

cudaError_t select_setup()
{
    return cudaFuncSetAttribute(sel_last_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)sizeof(SelLastShared));
}

/* A selection pass's blocks per band: two 1024-thread blocks an SM and one
 * wave over the bands (each block flushes its histograms once for many
 * pixels: fewer global atomics on the same bins), at most one per 4096
 * pixels. */
static size_t sel_blocks(size_t npix, size_t nb, int sms)
{
    size_t nblk = (size_t)(2 * sms) / nb < npix / 4096 ? (size_t)(2 * sms) / nb : npix / 4096;
    return nblk < 1 ? 1 : nblk > 512 ? 512 : nblk;
}

/* The passes: pass p's states and histograms in slot p of s.st and s.hist
 * (slot 0 of hist cleared with the counts, slot p + 1 by pass p); the
 * candidates of pass kSelCollect in s.cand, read by sel_last_kernel. */
cudaError_t launch_select(const SelectArgs &s, cudaStream_t st)
{
    const size_t nb = s.nb, nblk = sel_blocks(s.npix, nb, s.sms), hslot = sel_slot(nb);
    const size_t sslot = nb * kSelQueries;
    const size_t cof = nb * kSelQueries * kSelBins; /* the coarse bins in a slot */
    const int passes = kSelCollect + 1;
    SelFold f = {};
    for (int pass = 0; pass <= passes; ++pass) {
        if (pass == 0) {
            f.cnt = s.cnt;
            f.pct = s.pct;
        } else { /* the previous pass's slot */
            const int ps = kSelShift[pass - 1], pw = kSelWidth[pass - 1];
            f.cnt = NULL;
            f.prev = s.st + (size_t)(pass - 1) * sslot;
            f.phist = s.hist + (size_t)(pass - 1) * hslot;
            f.pcoarse = f.phist + cof;
            f.phmask = ps + pw >= 64 ? 0ull : ~0ull << (ps + pw);
            f.pshift = ps;
        }
        if (pass == passes)
            break;
        f.out = s.st + (size_t)pass * sslot;
        f.zero = pass + 1 < passes ? s.hist + (size_t)(pass + 1) * hslot : NULL;
        f.nzero = hslot;
        u64 *ph = s.hist + (size_t)pass * hslot;
        const int shift = kSelShift[pass], width = kSelWidth[pass];
        const u64 hmask = shift + width >= 64 ? 0ull : ~0ull << (shift + width);
        const unsigned dmask = (1u << width) - 1u;
        sel_pass_kernel<kSelLast><<<dim3((unsigned)nblk, 1, (unsigned)nb), kSelLast, 0, st>>>(
            s.G, s.Kh, s.mask, s.npix, f, hmask, shift, dmask, ph, ph + cof, NULL,
            pass == kSelCollect ? s.cand : NULL, s.ncand);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    sel_last_kernel<<<dim3(1, 1, (unsigned)nb), kSelLast, sizeof(SelLastShared), st>>>(
        s.npix, f, passes, s.cand, s.ncand, s.cnt, s.pct, s.k);
    return cudaGetLastError();
}

} /* namespace eadp */
} /* namespace hyprof_cuda */
