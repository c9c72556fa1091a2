/* SSPP's K-means on the GPU (semantics: algorithms/unmixing/unmixing_impl.h,
 * the CPU's kmeans.c: the same rules, the same arithmetic, the same labels).
 *
 * The farthest-point initialisation: the distances, the running minimum, a
 * first-index argmax and the new centre, step after step on the device.
 * The assignment: one thread per pixel reading its spectrum once (the loads
 * a few bands ahead), the k sums in registers for k <= 32. When the centres
 * fit in shared memory in float, a float pre-pass with rigorous error
 * bounds leaves the exact double distances to the few centres it cannot
 * rule out (unmix_kmeans_moves.cu, a warp a pixel: the same labels); the
 * last assignment also takes each pixel's exact distance to its centre (the
 * inertia). Otherwise every distance is in double, the centres in shared
 * memory a group of bands at a time. A changed label marks its pixel block.
 * The centre update in the CPU's fixed order: partial sums of
 * HYPROF_KMEANS_BLOCK pixels by one warp per block and 32 bands, recomputed
 * only for the marked blocks, then the blocks in order; when the sums are
 * exact (integer-valued cubes), the updates after the first move the
 * changed pixels between exact totals instead (unmix_kmeans_moves.cu). The
 * host reads the change counts every few iterations, not every one. */
#include "unmix_cuda.cuh"

#include <cub/block/block_reduce.cuh>

#include <vector>

using namespace hyprof_unmix;

namespace {

__device__ inline double sqdist_dev(const float *__restrict__ x, size_t npix, size_t i, int B,
                                    const double *__restrict__ c)
{
    double d = 0.0;
#pragma unroll 8
    for (int b = 0; b < B; b++) {
        double t = __dsub_rn((double)x[(size_t)b * npix + i], c[b]);
        d = __dadd_rn(d, __dmul_rn(t, t));
    }
    return d;
}

/* One step of the farthest-point initialisation: mind = d (j <= 1) or
 * min(mind, d) with d the squared distance to ref; -1 for masked pixels. */
__global__ void mind_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                            size_t npix, int B, const double *__restrict__ ref, size_t j,
                            double *__restrict__ mind)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npix)
        return;
    if (mask && !mask[i]) {
        mind[i] = -1.0;
        return;
    }
    double d = sqdist_dev(x, npix, i, B, ref);
    if (j <= 1 || d < mind[i])
        mind[i] = d;
}

/* The first index of the largest value: per block, then over blocks on the host. */
__device__ inline void better(double &v, unsigned long long &i, double v2, unsigned long long i2)
{
    if (v2 > v || (v2 == v && i2 < i)) {
        v = v2;
        i = i2;
    }
}

const int kArgmaxThreads = 256, kArgmaxBlocks = 512;

/* A candidate of the arg-max; `better` is a total order on candidates that
 * never hold NaN (each thread starts at -2 and never takes a NaN), so the
 * block's result does not depend on the order cub::BlockReduce combines in. */
struct ArgBest {
    double v;
    unsigned long long i;
};
struct ArgBetter {
    __device__ ArgBest operator()(ArgBest a, const ArgBest &b) const
    {
        better(a.v, a.i, b.v, b.i);
        return a;
    }
};

__global__ void argmax_kernel(const double *__restrict__ v, size_t n, double *__restrict__ bv,
                              unsigned long long *__restrict__ bi)
{
    using Reduce = cub::BlockReduce<ArgBest, kArgmaxThreads>;
    __shared__ typename Reduce::TempStorage tmp;
    ArgBest b = {-2.0, ~0ull};
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        better(b.v, b.i, v[i], i);
    b = Reduce(tmp).Reduce(b, ArgBetter{});
    if (threadIdx.x == 0) {
        bv[blockIdx.x] = b.v;
        bi[blockIdx.x] = b.i;
    }
}

__global__ void fill_labels_kernel(const uint8_t *__restrict__ mask, size_t npix, int32_t valid,
                                   int32_t *__restrict__ labels)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < npix)
        labels[i] = (mask && !mask[i]) ? -1 : valid;
}

/* Nearest centre: the cube is read once (bands outer), the k running sums
 * stay in registers (MAXK <= 32); each sum still runs over b in increasing
 * order, as the CPU's. The centres sit in shared memory, band-major (all of
 * them when they fit, else `tb` bands at a time), one broadcast load per
 * centre and band; the count of changed labels is one atomic per warp, and
 * a changed label marks its pixel block dirty (its centre sums must be
 * recomputed). */
const int kAssignThreads = 256;
const size_t kAssignSmem = (size_t)96 << 10; /* bytes of centres in shared memory at most */

template <int MAXK>
__global__ void __launch_bounds__(kAssignThreads)
assign_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, size_t npix, int B,
              int k, int tb, const double *__restrict__ Ct, int32_t *__restrict__ labels,
              double *__restrict__ dist, unsigned long long *__restrict__ changed,
              uint8_t *__restrict__ dirty)
{
    extern __shared__ double cs[]; /* tb x MAXK */
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool in = i < npix, live = in && !(mask && !mask[i]);
    double d[MAXK];
#pragma unroll
    for (int c = 0; c < MAXK; c++)
        d[c] = 0.0;
    for (int b0 = 0; b0 < B; b0 += tb) {
        int nb = B - b0 < tb ? B - b0 : tb;
        if (b0)
            __syncthreads();
        for (int t = threadIdx.x; t < nb * k; t += blockDim.x) /* Ct: band-major, coalesced */
            cs[(t / k) * MAXK + t % k] = Ct[(size_t)b0 * k + t];
        __syncthreads();
        if (!live)
            continue;
        for (int bb = 0; bb < nb; bb++) {
            double xb = (double)x[(size_t)(b0 + bb) * npix + i];
            const double *cb = cs + bb * MAXK;
#pragma unroll
            for (int c = 0; c < MAXK; c++)
                if (c < k) {
                    double t = __dsub_rn(xb, cb[c]);
                    d[c] = __dadd_rn(d[c], __dmul_rn(t, t));
                }
        }
    }
    double best = d[0];
    int32_t lab = 0;
#pragma unroll
    for (int c = 1; c < MAXK; c++)
        if (c < k && d[c] < best) {
            best = d[c];
            lab = c;
        }
    if (!live)
        lab = -1, best = 0.0;
    bool moved = in && labels[i] != lab;
    unsigned vote = __ballot_sync(0xffffffffu, moved);
    if ((threadIdx.x & 31) == 0 && vote)
        atomicAdd(changed, (unsigned long long)__popc(vote));
    if (moved)
        dirty[i / HYPROF_KMEANS_BLOCK] = 1;
    if (in) {
        labels[i] = lab;
        dist[i] = best;
    }
}

/* The same assignment with a float pre-pass, when the centres fit in shared
 * memory in float: first every distance in float, with a rigorous bound of
 * its error, then the exact double distances (the CPU's arithmetic) only to
 * the centres that the bounds cannot rule out (kmeans_resolve). With
 * u = 2^-24, cf = float(c) and t = fl(x - cf): |t| lies within
 * (1 +- u)(|x - c| -+ u|c|), and the float sum of the t^2 (fused
 * multiply-adds) within (1 +- g) of the exact one, g = 2(B+4)u (twice the
 * classical bound); by Minkowski the true distance
 * r = ||x - c|| lies in
 *   [sqrt(s / ((1+g)(1+u)^2)) - u||c||, sqrt(s / ((1-g)(1-u)^2)) + u||c||]
 * for the float sum s (evaluated in double, widened by 1e-12). A centre
 * whose lower bound exceeds the smallest upper bound by a factor 1 + 1e-9
 * (far above the double sums' rounding) is strictly farther, in the exact
 * arithmetic too, than the centre of that upper bound; the others get the
 * exact distance and the first smallest wins, as in the full computation.
 * With `own` (the last assignment) a pixel left with one candidate gets its
 * exact distance too: dist then holds the full computation's values. */
const int kF32Prefetch = 8; /* bands of x loaded ahead of their use */
const int kF32Pixels = 1;   /* pixels a thread, kF32Threads apart */
const int kF32Threads = 256, kF32MinBlocks = 3; /* a block's threads; blocks an SM */

/* The float sums of kF32Pixels pixels (i0 + j * blockDim.x) to the MAXK
 * centres: each centre value loaded from shared memory serves every pixel
 * of the thread (the loads, one float per lane and cycle, bound the loop
 * otherwise). All MAXK sums are taken, the centres past k being zeros: a
 * test per centre would split the band's arithmetic into a branch a centre,
 * which the compiler cannot interleave. Out-of-range pixels read zeros
 * (their sums are not used). */
template <int MAXK>
__device__ inline void f32_sums(const float *__restrict__ x, size_t npix, size_t i0, int B,
                                int k, const float *cf, float (&s)[kF32Pixels][MAXK])
{
    float xr[kF32Prefetch][kF32Pixels];
    bool in[kF32Pixels];
#pragma unroll
    for (int j = 0; j < kF32Pixels; j++)
        in[j] = i0 + (size_t)j * blockDim.x < npix;
#pragma unroll
    for (int r = 0; r < kF32Prefetch; r++)
#pragma unroll
        for (int j = 0; j < kF32Pixels; j++)
            xr[r][j] = r < B && in[j] ? x[(size_t)r * npix + i0 + (size_t)j * blockDim.x] : 0.0f;
    for (int b0 = 0; b0 < B; b0 += kF32Prefetch) {
#pragma unroll
        for (int r = 0; r < kF32Prefetch; r++) {
            const int b = b0 + r;
            if (b >= B)
                break;
            float xb[kF32Pixels]; /* the loads of band b + kF32Prefetch go out now */
#pragma unroll
            for (int j = 0; j < kF32Pixels; j++) {
                xb[j] = xr[r][j];
                xr[r][j] = b + kF32Prefetch < B && in[j]
                               ? x[(size_t)(b + kF32Prefetch) * npix + i0 + (size_t)j * blockDim.x]
                               : 0.0f;
            }
            /* The centres of a band come as float4 (one shared-memory load for
             * four centres, all threads of the warp at the same address). */
            const float4 *cb = reinterpret_cast<const float4 *>(cf + b * MAXK);
#pragma unroll
            for (int c4 = 0; c4 < MAXK / 4; c4++) {
                const float4 v = cb[c4];
                const float cv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int q = 0; q < 4; q++)
#pragma unroll
                    for (int j = 0; j < kF32Pixels; j++) {
                        float t = xb[j] - cv[q];
                        s[j][4 * c4 + q] = fmaf(t, t, s[j][4 * c4 + q]);
                    }
            }
        }
    }
}

/* The exact squared distance of pixel i to centre c (band-major Ct). */
__device__ inline double exact_dist(const float *__restrict__ x, size_t npix, size_t i, int B,
                                    int k, const double *__restrict__ Ct, int c)
{
    double dc = 0.0;
#pragma unroll 8
    for (int b = 0; b < B; b++) {
        double t = __dsub_rn((double)x[(size_t)b * npix + i], __ldg(Ct + (size_t)b * k + c));
        dc = __dadd_rn(dc, __dmul_rn(t, t));
    }
    return dc;
}

/* Where the float sums s leave pixel i: its label (*lab, with *best as
 * described above), or the mask of its candidates when there are several
 * (returned; 0 otherwise). */
template <int MAXK>
__device__ inline unsigned f32_bounds(const float *__restrict__ x, size_t npix, size_t i, int B,
                                      int k, const double *__restrict__ Ct,
                                      const double *__restrict__ cnorm, const float (&s)[MAXK],
                                      int own, int32_t *lab, double *best)
{
    const double u = 5.9604644775390625e-08, g = 2.0 * (B + 4) * u;
    const double khi = (1.0 + 1e-12) / ((1.0 - g) * (1.0 - u) * (1.0 - u));
    const double klo = (1.0 - 1e-12) / ((1.0 + g) * (1.0 + u) * (1.0 + u));
    double m = INFINITY;
#pragma unroll
    for (int c = 0; c < MAXK; c++) /* the smallest upper bound */
        if (c < k) {
            double hi = (sqrt((double)s[c] * khi) + u * cnorm[c]) * (1.0 + 1e-12);
            m = hi < m ? hi : m;
        }
    m *= 1.0 + 1e-9;
    unsigned cand = 0; /* the lower bounds, recomputed: fewer registers than kept */
#pragma unroll
    for (int c = 0; c < MAXK; c++)
        if (c < k && !((sqrt((double)s[c] * klo) - u * cnorm[c]) * (1.0 - 1e-12) > m))
            cand |= 1u << c;
    if (cand & (cand - 1))
        return cand;
    *lab = __ffs(cand) - 1; /* one candidate: it is the nearest */
    /* not computed (only the last, full assignment fills dist) */
    *best = own ? exact_dist(x, npix, i, B, k, Ct, *lab) : -1.0;
    return 0;
}

/* The label of pixel i (in: i < npix) from the pre-pass: written with its
 * count and dirty mark, or, with several candidates, appended to amb for
 * kmeans_resolve (a warp a pixel, not one divergent lane), which sets its
 * label, dist, count and dirty mark. With mv, each changed label is
 * recorded there (exact sums). All the warp's lanes call it. */
__device__ inline void f32_settle(size_t i, bool in, int32_t lab, double best, unsigned defer,
                                  int32_t *__restrict__ labels, double *__restrict__ dist,
                                  unsigned long long *__restrict__ changed,
                                  uint8_t *__restrict__ dirty, unsigned long long *__restrict__ amb,
                                  unsigned long long *__restrict__ amb_n,
                                  unsigned long long *__restrict__ mv)
{
    const unsigned dv = __ballot_sync(0xffffffffu, defer != 0);
    if (dv) {
        unsigned long long base = 0;
        if ((threadIdx.x & 31) == 0)
            base = atomicAdd(amb_n, (unsigned long long)__popc(dv));
        base = __shfl_sync(0xffffffffu, base, 0);
        if (defer)
            amb[base + __popc(dv & ((1u << (threadIdx.x & 31)) - 1u))] =
                (unsigned long long)i | ((unsigned long long)defer << 32);
    }
    const int32_t old = in ? labels[i] : -1;
    const bool moved = in && !defer && old != lab;
    const unsigned vote = __ballot_sync(0xffffffffu, moved);
    unsigned long long at = 0;
    if ((threadIdx.x & 31) == 0 && vote)
        at = atomicAdd(changed, (unsigned long long)__popc(vote));
    if (mv) { /* the moves, at the indices the count gives */
        at = __shfl_sync(0xffffffffu, at, 0);
        if (moved)
            mv[at + __popc(vote & ((1u << (threadIdx.x & 31)) - 1u))] =
                kmeans_move_word(i, old, lab);
    }
    if (moved)
        dirty[i / HYPROF_KMEANS_BLOCK] = 1;
    if (in && !defer) {
        labels[i] = lab;
        dist[i] = best;
    }
}

/* One block: kF32Pixels x kF32Threads pixels. */
template <int MAXK>
__global__ void __launch_bounds__(kF32Threads, kF32MinBlocks)
assign_f32_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, size_t npix,
                  int B, int k, const double *__restrict__ Ct, const double *__restrict__ cnorm,
                  int32_t *__restrict__ labels, double *__restrict__ dist,
                  unsigned long long *__restrict__ changed, uint8_t *__restrict__ dirty, int own,
                  unsigned long long *__restrict__ amb, unsigned long long *__restrict__ amb_n,
                  unsigned long long *__restrict__ mv)
{
    static_assert(MAXK % 4 == 0, "the centres are read as float4");
    extern __shared__ float cf[]; /* B x MAXK */
    for (int t = threadIdx.x; t < B * MAXK; t += blockDim.x) {
        const int b = t / MAXK, c = t % MAXK;
        cf[t] = c < k ? (float)Ct[(size_t)b * k + c] : 0.0f;
    }
    __syncthreads();
    const size_t i0 = (size_t)blockIdx.x * kF32Pixels * blockDim.x + threadIdx.x;
    float s[kF32Pixels][MAXK];
#pragma unroll
    for (int j = 0; j < kF32Pixels; j++)
#pragma unroll
        for (int c = 0; c < MAXK; c++)
            s[j][c] = 0.0f;
    f32_sums<MAXK>(x, npix, i0, B, k, cf, s);
#pragma unroll
    for (int j = 0; j < kF32Pixels; j++) {
        const size_t i = i0 + (size_t)j * blockDim.x;
        const bool in = i < npix, live = in && !(mask && !mask[i]);
        double best = 0.0;
        int32_t lab = -1;
        unsigned defer = 0;
        if (live)
            defer = f32_bounds<MAXK>(x, npix, i, B, k, Ct, cnorm, s[j], own, &lab, &best);
        f32_settle(i, in, lab, best, defer, labels, dist, changed, dirty, amb, amb_n, mv);
    }
}

/* cnorm[c] = ||C[c]|| (double), widened by 1e-12: the float pre-pass's bound. */
__global__ void cnorm_kernel(const double *__restrict__ C, int B, double *__restrict__ cnorm)
{
    const double *c = C + (size_t)blockIdx.x * B;
    double s = 0.0;
    for (int b = threadIdx.x; b < B; b += 32)
        s += c[b] * c[b];
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, off);
    if (threadIdx.x == 0)
        cnorm[blockIdx.x] = sqrt(s) * (1.0 + 1e-12);
}

/* More than 32 centres: the sums in local memory, the centres from global. */
__global__ void assign_many_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                                   size_t npix, int B, int k, const double *__restrict__ C,
                                   int32_t *__restrict__ labels, double *__restrict__ dist,
                                   unsigned long long *__restrict__ changed,
                                   uint8_t *__restrict__ dirty)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npix)
        return;
    if (mask && !mask[i]) {
        labels[i] = -1;
        dist[i] = 0.0;
        return;
    }
    double d[HYPROF_MAX_ENDMEMBERS];
    for (int c = 0; c < k; c++)
        d[c] = 0.0;
    for (int b = 0; b < B; b++) {
        double xb = (double)x[(size_t)b * npix + i];
        for (int c = 0; c < k; c++) {
            double t = __dsub_rn(xb, C[(size_t)c * B + b]);
            d[c] = __dadd_rn(d[c], __dmul_rn(t, t));
        }
    }
    double best = d[0];
    int32_t lab = 0;
    for (int c = 1; c < k; c++)
        if (d[c] < best) {
            best = d[c];
            lab = c;
        }
    if (labels[i] != lab) {
        atomicAdd(changed, 1ull);
        dirty[i / HYPROF_KMEANS_BLOCK] = 1;
    }
    labels[i] = lab;
    dist[i] = best;
}

/* Cluster sizes: a shared-memory histogram per block, then one atomic per
 * block and cluster (one global atomic per pixel serialised on k addresses). */
__global__ void count_kernel(const int32_t *__restrict__ labels, size_t npix, int k,
                             unsigned long long *__restrict__ cnt)
{
    extern __shared__ unsigned int hist[];
    for (int c = threadIdx.x; c < k; c += blockDim.x)
        hist[c] = 0;
    __syncthreads();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x)
        if (labels[i] >= 0)
            atomicAdd(&hist[labels[i]], 1u);
    __syncthreads();
    for (int c = threadIdx.x; c < k; c += blockDim.x)
        if (hist[c])
            atomicAdd(&cnt[c], (unsigned long long)hist[c]);
}

/* part[(blk*B + b)*k + c]: sum of band b over the pixels of cluster c in block
 * blk, pixels in order. One warp per pixel block and group of 32 bands (lane =
 * band): a 32 x 32 tile of the cube at a time goes through shared memory with
 * coalesced loads (the next tile's loads issued before the current one is
 * added, so their latency hides behind the additions), each lane adding its
 * band's values into its own k sums in pixel order (the CPU's order); lane j
 * holds the label of the tile's pixel j. Blocks whose labels did not change
 * since their last sums (dirty[blk] == 0) are skipped: the same numbers. */
const int kPartialBands = 32, kPartialTile = 32;

__global__ void __launch_bounds__(32)
partial_kernel(const float *__restrict__ x, const int32_t *__restrict__ labels, size_t npix,
               int B, int k, const uint8_t *__restrict__ dirty, double *__restrict__ part)
{
    if (dirty && !dirty[blockIdx.x])
        return;
    extern __shared__ double sums[]; /* k x 32 */
    __shared__ float tile[kPartialBands][kPartialTile + 1];
    const int lane = threadIdx.x;
    const size_t blk = blockIdx.x, p0 = blk * HYPROF_KMEANS_BLOCK;
    const int b0 = blockIdx.y * kPartialBands, b = b0 + lane;
    const int nb = B - b0 < kPartialBands ? B - b0 : kPartialBands;
    size_t p1 = p0 + HYPROF_KMEANS_BLOCK;
    p1 = p1 < npix ? p1 : npix;
    const int n = (int)(p1 - p0);
    for (int c = 0; c < k; c++)
        sums[c * 32 + lane] = 0.0;
    float next[kPartialBands];
    int32_t nlab = -1;
#pragma unroll
    for (int r = 0; r < kPartialBands; r++)
        next[r] = (r < nb && lane < n) ? x[(size_t)(b0 + r) * npix + p0 + lane] : 0.0f;
    if (lane < n)
        nlab = labels[p0 + lane];
    for (int t0 = 0; t0 < n; t0 += kPartialTile) {
        const int m = n - t0 < kPartialTile ? n - t0 : kPartialTile;
        __syncwarp();
#pragma unroll
        for (int r = 0; r < kPartialBands; r++)
            tile[r][lane] = next[r];
        const int32_t mylab = nlab;
        __syncwarp();
        const int t1 = t0 + kPartialTile; /* prefetch the next tile */
        if (t1 < n) {
            const bool ok = t1 + lane < n;
#pragma unroll
            for (int r = 0; r < kPartialBands; r++)
                next[r] = (r < nb && ok) ? x[(size_t)(b0 + r) * npix + p0 + t1 + lane] : 0.0f;
            nlab = ok ? labels[p0 + t1 + lane] : -1;
        }
        for (int j = 0; j < m; j++) {
            int32_t l = __shfl_sync(0xffffffffu, mylab, j);
            if (l >= 0 && lane < nb)
                sums[l * 32 + lane] = __dadd_rn(sums[l * 32 + lane], (double)tile[lane][j]);
        }
    }
    if (lane < nb)
        for (int c = 0; c < k; c++)
            part[(blk * B + b) * k + c] = sums[c * 32 + lane];
}

/* C[c][b] = (sum over blocks, in order, of part) / cnt[c]; the loads of eight
 * blocks are issued before their (ordered) additions. */
__global__ void centre_kernel(const double *__restrict__ part, const unsigned long long *cnt,
                              int B, int k, size_t nblk, double *__restrict__ C,
                              double *__restrict__ Ct, double *__restrict__ tot)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)B * k)
        return;
    size_t b = t / k, c = t % k, stride = (size_t)B * k;
    const double *q = part + b * k + c;
    double s = 0.0;
    size_t blk = 0;
    for (; blk + 8 <= nblk; blk += 8) {
        double v[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = q[(blk + u) * stride];
#pragma unroll
        for (int u = 0; u < 8; u++)
            s = __dadd_rn(s, v[u]);
    }
    for (; blk < nblk; blk++)
        s = __dadd_rn(s, q[blk * stride]);
    if (tot) /* the exact sums' start */
        tot[c * B + b] = s;
    if (cnt[c]) {
        double v = __ddiv_rn(s, (double)cnt[c]);
        C[c * B + b] = v;
        if (Ct) /* band-major copy for the assignment */
            Ct[b * k + c] = v;
    }
}

/* Ct[b*k + c] = C[c*B + b]. */
__global__ void transpose_centres_kernel(const double *__restrict__ C, int B, int k,
                                         double *__restrict__ Ct)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < (size_t)B * k)
        Ct[t] = C[(t % k) * B + t / k];
}

/* Device state of one K-means run. */
struct KMeansDev {
    DeviceBuffer<float> own_x;
    DeviceBuffer<uint8_t> own_mask;
    const float *x = NULL;
    const uint8_t *mask = NULL; /* NULL without a mask */
    DeviceBuffer<double> C, Ct, dist, part, ref, bv; /* Ct: C band-major */
    DeviceBuffer<unsigned long long> bi;
    DeviceBuffer<int32_t> labels;
    DeviceBuffer<unsigned long long> cnt, changed;
    DeviceBuffer<uint8_t> dirty; /* per pixel block: a label changed since its sums */
    DeviceBuffer<double> cnorm;  /* the float pre-pass: the centres' norms */
    DeviceBuffer<unsigned long long> amb, amb_n; /* its pixels left with several candidates */
    bool exact_sums = false; /* the centre totals follow the moves (mv) after the first update */
    DeviceBuffer<unsigned long long> mv;
    DeviceBuffer<double> tot; /* k x B: the exact centre totals */
    const hyprof_kmeans_args_t *a;
    size_t nblk;
};

/* Centres as the means of their pixels. With `all`, every block's partial
 * sums (the mean spectrum, k = 1, and the first update); otherwise only the
 * dirty blocks', the others' being the same numbers as last time. */
hyprof_status_t update_dev(hyprof_ctx_t *ctx, const char *op, KMeansDev &d, int k, double *C,
                           bool all)
{
    const hyprof_kmeans_args_t *a = d.a;
    const int B = (int)a->bands;
    HYPROF_CUDA_CHECK(cudaMemset(d.cnt.get(), 0, k * sizeof(unsigned long long)));
    unsigned nb = (unsigned)div_up(a->npix, 256);
    nb = nb > 1024 ? 1024 : nb;
    count_kernel<<<nb, 256, (size_t)k * sizeof(unsigned int)>>>(d.labels.get(), a->npix, k,
                                                                 d.cnt.get());
    HYPROF_CUDA_CHECK_LAUNCH("count_kernel");
    const size_t smem = (size_t)k * 32 * sizeof(double);
    if (smem > 32 * 1024) /* with the static tile, past the default 48 KiB */
        HYPROF_CUDA_CHECK(cudaFuncSetAttribute(partial_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem));
    partial_kernel<<<dim3((unsigned)d.nblk, (unsigned)div_up(B, kPartialBands)), 32, smem>>>(
        d.x, d.labels.get(), a->npix, B, k, all ? NULL : d.dirty.get(), d.part.get());
    HYPROF_CUDA_CHECK_LAUNCH("partial_kernel");
    centre_kernel<<<(unsigned)div_up((size_t)B * k, 128), 128>>>(
        d.part.get(), d.cnt.get(), B, k, d.nblk, C, C == d.C.get() ? d.Ct.get() : NULL,
        C == d.C.get() && d.exact_sums ? d.tot.get() : NULL);
    HYPROF_CUDA_CHECK_LAUNCH("centre_kernel");
    HYPROF_CUDA_CHECK(cudaMemsetAsync(d.dirty.get(), 0, d.nblk, 0));
    return HYPROF_OK;
}

template <int MAXK>
hyprof_status_t launch_assign(hyprof_ctx_t *ctx, const char *op, KMeansDev &d, int slot,
                              bool exact)
{
    const hyprof_kmeans_args_t *a = d.a;
    const int B = (int)a->bands, k = (int)a->k;
    const size_t smem2 = (size_t)B * MAXK * sizeof(float);
    unsigned long long *changed = d.changed.get() + slot;
    if (smem2 <= kAssignSmem && a->npix <= 0xffffffffu) { /* the float pre-pass */
        cnorm_kernel<<<k, 32>>>(d.C.get(), B, d.cnorm.get());
        HYPROF_CUDA_CHECK_LAUNCH("cnorm_kernel");
        if (smem2 > 48 * 1024)
            HYPROF_CUDA_CHECK(cudaFuncSetAttribute(assign_f32_kernel<MAXK>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)smem2));
        assign_f32_kernel<MAXK>
            <<<(unsigned)div_up(a->npix, (size_t)kF32Pixels * kF32Threads), kF32Threads,
               smem2>>>(
                d.x, d.mask, a->npix, B, k, d.Ct.get(), d.cnorm.get(), d.labels.get(),
                d.dist.get(), changed, d.dirty.get(), exact ? 1 : 0, d.amb.get(),
                d.amb_n.get() + slot, d.exact_sums ? d.mv.get() : NULL);
        HYPROF_CUDA_CHECK_LAUNCH("assign_f32_kernel");
        return kmeans_resolve(ctx, op, d.x, a->npix, B, k, d.Ct.get(), d.amb.get(),
                              d.amb_n.get() + slot, d.labels.get(), d.dist.get(), changed,
                              d.dirty.get(), d.exact_sums ? d.mv.get() : NULL);
    }
    size_t tb = kAssignSmem / (MAXK * sizeof(double));
    tb = tb > (size_t)B ? (size_t)B : tb;
    const size_t smem = tb * MAXK * sizeof(double);
    if (smem > 48 * 1024)
        HYPROF_CUDA_CHECK(cudaFuncSetAttribute(assign_kernel<MAXK>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem));
    assign_kernel<MAXK><<<(unsigned)div_up(a->npix, kAssignThreads), kAssignThreads, smem>>>(
        d.x, d.mask, a->npix, B, k, (int)tb, d.Ct.get(), d.labels.get(), d.dist.get(), changed,
        d.dirty.get());
    HYPROF_CUDA_CHECK_LAUNCH("assign_kernel");
    return HYPROF_OK;
}

/* Every pixel's nearest centre, queued on the default stream; the device
 * counter changed[slot] (zero before) gets the number of labels that
 * changed, amb_n[slot] the pixels the float pre-pass left with several
 * candidates. `exact`: dist gets every pixel's exact distance to its centre
 * (the last assignment); else only where two centres had to be compared.
 * The labels are the full computation's either way. */
hyprof_status_t assign_dev(hyprof_ctx_t *ctx, const char *op, KMeansDev &d, int slot, bool exact)
{
    const hyprof_kmeans_args_t *a = d.a;
    const int k = (int)a->k;
    if (k <= 8)
        HYPROF_TRY(launch_assign<8>(ctx, op, d, slot, exact));
    else if (k <= 16)
        HYPROF_TRY(launch_assign<16>(ctx, op, d, slot, exact));
    else if (k <= 32)
        HYPROF_TRY(launch_assign<32>(ctx, op, d, slot, exact));
    else {
        assign_many_kernel<<<(unsigned)div_up(a->npix, kThreads), kThreads>>>(
            d.x, d.mask, a->npix, (int)a->bands, k, d.C.get(), d.labels.get(), d.dist.get(),
            d.changed.get() + slot, d.dirty.get());
        HYPROF_CUDA_CHECK_LAUNCH("assign_many_kernel");
    }
    return HYPROF_OK;
}

const int kPickThreads = 256;

/* One block of kPickThreads: the first index of the largest value over the
 * argmax partials (the host loop's rule, by cub::BlockReduce), best[j] =
 * that pixel (npix when no pixel is valid), and its spectrum as centre j,
 * the next step's reference. */
__global__ void pick_kernel(const double *__restrict__ bv, const unsigned long long *__restrict__ bi,
                            int nb, const float *__restrict__ x, size_t npix, int B, int j,
                            double *__restrict__ C, unsigned long long *__restrict__ best)
{
    using Reduce = cub::BlockReduce<ArgBest, kPickThreads>;
    __shared__ typename Reduce::TempStorage tmp;
    __shared__ unsigned long long pick;
    ArgBest b = {-2.0, ~0ull};
    for (int t = threadIdx.x; t < nb; t += blockDim.x)
        better(b.v, b.i, bv[t], bi[t]);
    b = Reduce(tmp).Reduce(b, ArgBetter{});
    if (threadIdx.x == 0) {
        pick = (b.v >= 0.0 && b.i < npix) ? b.i : npix;
        best[j] = pick;
    }
    __syncthreads();
    for (int b = threadIdx.x; pick < npix && b < B; b += blockDim.x)
        C[(size_t)j * B + b] = (double)x[(size_t)b * npix + pick];
}

/* hyprof__kmeans_init's farthest-point steps (kmeans.c: the same rule, the
 * same arithmetic) without a round trip to the host a step: the distances
 * and running minimum, the argmax and the new centre stay on the device;
 * the k chosen pixels come back at the end. */
hyprof_status_t init_dev(hyprof_ctx_t *ctx, const char *op, KMeansDev &d)
{
    hyprof_kmeans_args_t *a = (hyprof_kmeans_args_t *)d.a;
    const size_t n = a->npix, B = a->bands, k = a->k;
    DeviceBuffer<unsigned long long> d_best;
    HYPROF_TRY(d_best.alloc(ctx, op, k));
    unsigned nb = (unsigned)div_up(n, kArgmaxThreads);
    nb = nb > (unsigned)kArgmaxBlocks ? (unsigned)kArgmaxBlocks : nb;
    const double *ref = d.ref.get(); /* the mean spectrum first */
    for (size_t j = 0; j < k; j++) {
        mind_kernel<<<(unsigned)div_up(n, kThreads), kThreads>>>(d.x, d.mask, n, (int)B, ref, j,
                                                                 d.dist.get());
        HYPROF_CUDA_CHECK_LAUNCH("mind_kernel");
        argmax_kernel<<<nb, kArgmaxThreads>>>(d.dist.get(), n, d.bv.get(), d.bi.get());
        HYPROF_CUDA_CHECK_LAUNCH("argmax_kernel");
        pick_kernel<<<1, kPickThreads>>>(d.bv.get(), d.bi.get(), (int)nb, d.x, n, (int)B,
                                         (int)j, d.C.get(), d_best.get());
        HYPROF_CUDA_CHECK_LAUNCH("pick_kernel");
        ref = d.C.get() + j * B;
    }
    std::vector<unsigned long long> best(k);
    HYPROF_CUDA_CHECK(cudaMemcpy(best.data(), d_best.get(), k * sizeof(unsigned long long),
                                 cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < k; j++) {
        if (best[j] >= n)
            return hyprof__error(ctx, HYPROF_ERR_INTERNAL, "kmeans", "no valid pixel to start from");
        a->init[j] = (size_t)best[j];
    }
    return HYPROF_OK;
}

/* With HYPROF_LOG=debug, CUDA events split the stage (one debug line at the
 * end): the allocations, the mean spectrum, the initialisation, the
 * iterations' assignments and updates, the last assignment. */
enum { kTrAlloc = 0, kTrMean, kTrInit, kTrAssign, kTrUpdate, kTrLast, kTrKinds };

struct Trace {
    bool on = false;
    double host0 = 0.0, host_alloc = 0.0;
    std::vector<cudaEvent_t> ev;
    std::vector<int> kind; /* the kind of the interval that ends at ev[i] */
    Trace() = default;
    Trace(const Trace &) = delete;
    Trace &operator=(const Trace &) = delete;
    ~Trace()
    {
        for (cudaEvent_t e : ev)
            (void)cudaEventDestroy(e);
    }
    void start()
    {
        on = hyprof__log_debug() != 0;
        host0 = hyprof__now();
        mark(-1);
    }
    void mark(int kd)
    {
        cudaEvent_t e = NULL;
        if (!on)
            return;
        if (kd == kTrAlloc)
            host_alloc = hyprof__now() - host0;
        if (cudaEventCreate(&e) != cudaSuccess || cudaEventRecord(e, 0) != cudaSuccess) {
            (void)cudaGetLastError();
            if (e)
                (void)cudaEventDestroy(e);
            on = false; /* timing never fails the step */
            return;
        }
        ev.push_back(e);
        kind.push_back(kd);
    }
    void report(hyprof_ctx_t *ctx, int iterations, int launched, bool exact,
                unsigned long long amb)
    {
        if (!on || ev.size() < 2 || cudaEventSynchronize(ev.back()) != cudaSuccess) {
            (void)cudaGetLastError();
            return;
        }
        double ms[kTrKinds] = {0};
        for (size_t i = 1; i < ev.size(); i++) {
            float t = 0.0f;
            if (kind[i] >= 0 && cudaEventElapsedTime(&t, ev[i - 1], ev[i]) == cudaSuccess)
                ms[kind[i]] += t;
        }
        (void)cudaGetLastError();
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "kmeans stages: device=cuda iterations=%d launched=%d sums=%s deferred=%llu "
                    "alloc_host_ms=%.3f alloc_ms=%.3f mean_ms=%.3f init_ms=%.3f assign_ms=%.3f "
                    "update_ms=%.3f last_ms=%.3f wall_ms=%.3f",
                    iterations, launched, exact ? "exact" : "ordered", amb, 1e3 * host_alloc,
                    ms[kTrAlloc], ms[kTrMean], ms[kTrInit], ms[kTrAssign], ms[kTrUpdate],
                    ms[kTrLast], 1e3 * (hyprof__now() - host0));
    }
};

/* Lloyd's iterations, queued kCheckEvery at a time: the host reads the
 * group's change counts once after it (one synchronisation a group, not one
 * an iteration). The iterations queued after the first without a change
 * change nothing: no block is dirty, so the partial sums, the counts and
 * the centres come out the same, and so do the labels. *launched gets the
 * iterations queued. */
const int kCheckEvery = 5;

hyprof_status_t lloyd_dev(hyprof_ctx_t *ctx, const char *op, KMeansDev &d, Trace &tr,
                          int *launched)
{
    hyprof_kmeans_args_t *a = (hyprof_kmeans_args_t *)d.a;
    const int k = (int)a->k, T = a->max_iter;
    unsigned long long hc[kCheckEvery];
    a->iterations = 0;
    *launched = 0;
    for (int it0 = 0; it0 < T; it0 += kCheckEvery) {
        const int it1 = it0 + kCheckEvery < T ? it0 + kCheckEvery : T;
        for (int it = it0; it < it1; it++) {
            HYPROF_TRY(assign_dev(ctx, op, d, it, false));
            tr.mark(kTrAssign);
            /* The first update sums every block (the partials held the mean's);
             * with exact sums, later ones move the changed pixels. */
            if (d.exact_sums && it > 0)
                HYPROF_TRY(kmeans_apply_moves(ctx, op, d.x, a->npix, (int)a->bands, k,
                                              d.mv.get(), d.changed.get() + it, d.tot.get(),
                                              d.cnt.get(), d.C.get(), d.Ct.get()));
            else
                HYPROF_TRY(update_dev(ctx, op, d, k, d.C.get(), it == 0));
            tr.mark(kTrUpdate);
        }
        *launched = it1;
        HYPROF_CUDA_CHECK(cudaMemcpy(hc, d.changed.get() + it0,
                                     (size_t)(it1 - it0) * sizeof(unsigned long long),
                                     cudaMemcpyDeviceToHost));
        for (int it = it0; it < it1; it++) {
            if (hc[it - it0] == 0)
                return HYPROF_OK;
            a->iterations = it + 1;
            HYPROF_TRY(hyprof__progress(ctx, (double)(it + 1) / T, op));
        }
    }
    return HYPROF_OK;
}

} /* namespace */

extern "C" hyprof_status_t hyprof__cuda_kmeans(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "kmeans";
    hyprof_kmeans_args_t *a = (hyprof_kmeans_args_t *)vargs;
    const size_t n = a->npix, B = a->bands, k = a->k;
    hyprof__cuda_device_scope device_scope;
    HYPROF_TRY(device_scope.select(ctx, op));
    KMeansDev d;
    d.a = a;
    d.nblk = div_up(n, HYPROF_KMEANS_BLOCK);
    HYPROF_TRY(device_cube(ctx, op, a->x, a->mask, n, B, d.own_x, d.own_mask, &d.x, &d.mask));
    stage_begin(kDevKmeans, 0);
    Trace tr;
    tr.start();
    HYPROF_TRY(d.C.alloc(ctx, op, k * B));
    HYPROF_TRY(d.Ct.alloc(ctx, op, k * B));
    HYPROF_TRY(d.dist.alloc(ctx, op, n));
    HYPROF_TRY(d.part.alloc(ctx, op, d.nblk * B * k));
    HYPROF_TRY(d.ref.alloc(ctx, op, B));
    HYPROF_TRY(d.bv.alloc(ctx, op, kArgmaxBlocks));
    HYPROF_TRY(d.bi.alloc(ctx, op, kArgmaxBlocks));
    HYPROF_TRY(d.labels.alloc(ctx, op, n));
    HYPROF_TRY(d.cnt.alloc(ctx, op, k));
    HYPROF_TRY(d.changed.alloc(ctx, op, (size_t)a->max_iter + 1));
    HYPROF_TRY(d.dirty.alloc(ctx, op, d.nblk));
    HYPROF_TRY(d.cnorm.alloc(ctx, op, k));
    HYPROF_TRY(d.amb.alloc(ctx, op, n));
    HYPROF_TRY(d.amb_n.alloc(ctx, op, (size_t)a->max_iter + 1));
    /* Exact sums where the float pre-pass runs (its moves are recorded). */
    const size_t maxk = k <= 8 ? 8 : k <= 16 ? 16 : 32;
    if (k <= 32 && B * maxk * sizeof(float) <= kAssignSmem && n <= 0xffffffffu) {
        HYPROF_TRY(kmeans_sums_exact(ctx, op, d.x, d.mask, n, (int)B, &d.exact_sums));
        if (d.exact_sums) {
            HYPROF_TRY(d.mv.alloc(ctx, op, n));
            HYPROF_TRY(d.tot.alloc(ctx, op, k * B));
        }
    }
    HYPROF_CUDA_CHECK(cudaMemsetAsync(d.changed.get(), 0,
                                      ((size_t)a->max_iter + 1) * sizeof(unsigned long long), 0));
    HYPROF_CUDA_CHECK(cudaMemsetAsync(d.amb_n.get(), 0,
                                      ((size_t)a->max_iter + 1) * sizeof(unsigned long long), 0));
    const uint8_t *msk = d.mask;
    const unsigned grid = (unsigned)div_up(n, 256);
    tr.mark(kTrAlloc);

    /* The mean spectrum: the update with every valid pixel in cluster 0. */
    fill_labels_kernel<<<grid, 256>>>(msk, n, 0, d.labels.get());
    HYPROF_CUDA_CHECK_LAUNCH("fill_labels_kernel");
    HYPROF_TRY(update_dev(ctx, op, d, 1, d.ref.get(), true));
    tr.mark(kTrMean);
    HYPROF_TRY(init_dev(ctx, op, d));
    transpose_centres_kernel<<<(unsigned)div_up(k * B, 256), 256>>>(d.C.get(), (int)B, (int)k,
                                                                    d.Ct.get());
    HYPROF_CUDA_CHECK_LAUNCH("transpose_centres_kernel");

    fill_labels_kernel<<<grid, 256>>>(msk, n, -2, d.labels.get());
    HYPROF_CUDA_CHECK_LAUNCH("fill_labels_kernel");
    tr.mark(kTrInit);
    int launched = 0;
    HYPROF_TRY(lloyd_dev(ctx, op, d, tr, &launched));
    /* The distances to the final centres, all exact (the inertia); when the
     * loop ended on no change, the labels stay as they are. */
    HYPROF_TRY(assign_dev(ctx, op, d, a->max_iter, true));
    tr.mark(kTrLast);
    stage_end(kDevKmeans, 0);
    HYPROF_CUDA_CHECK(cudaMemcpy(a->labels, d.labels.get(), n * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(a->dist, d.dist.get(), n * sizeof(double), cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(a->centres, d.C.get(), k * B * sizeof(double),
                                 cudaMemcpyDeviceToHost));
    unsigned long long amb = 0; /* the pixels the resolve step took, all assignments */
    std::vector<unsigned long long> namb(tr.on ? (size_t)a->max_iter + 1 : 0);
    if (tr.on && cudaMemcpy(namb.data(), d.amb_n.get(), namb.size() * sizeof namb[0],
                            cudaMemcpyDeviceToHost) == cudaSuccess)
        for (unsigned long long q : namb)
            amb += q;
    (void)cudaGetLastError();
    tr.report(ctx, a->iterations, launched, d.exact_sums, amb);
    return HYPROF_OK;
}
