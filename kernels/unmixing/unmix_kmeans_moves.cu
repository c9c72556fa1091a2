/* Two pieces of SSPP's K-means on the GPU (unmix_kmeans.cu runs them):
 *
 * - the pixels that the float pre-pass leaves with several candidate
 *   centres get their exact distances here, a warp a pixel;
 * - when every centre sum is exact in double whatever the order of its
 *   additions (the rule of kmeans.c's sums_exact: integer-valued cubes pass),
 *   the centre totals after the first update follow the changed labels
 *   alone, as the CPU's do: each changed pixel leaves its old total and joins
 *   its new one, and the centres are the totals over the counts. Exact sums
 *   are the same numbers in any order, so these centres are the fixed-order
 *   update's bit for bit, and the cube is read once an iteration, not twice. */
#include "unmix_cuda.cuh"

namespace {

using namespace hyprof_unmix;

/* amb[e]: pixel in the low 32 bits, the candidate mask in the high ones.
 * The lanes take the squared differences of 32 bands at a time and every
 * lane adds them in band order (shuffles): the CPU's exact distance; the
 * first smallest wins. A changed label counts in `changed`, marks its block
 * dirty and, with mv, is recorded there (kmeans_move_word) at the index the
 * count gives. */
__global__ void __launch_bounds__(kResolveThreads)
resolve_kernel(const float *__restrict__ x, size_t npix, int B, int k,
               const double *__restrict__ Ct, const unsigned long long *__restrict__ amb,
               const unsigned long long *__restrict__ amb_n, int32_t *__restrict__ labels,
               double *__restrict__ dist, unsigned long long *__restrict__ changed,
               uint8_t *__restrict__ dirty, unsigned long long *__restrict__ mv)
{
    const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
    const unsigned long long n = *amb_n;
    for (unsigned long long e = (unsigned long long)blockIdx.x * wpb + (threadIdx.x >> 5); e < n;
         e += (unsigned long long)gridDim.x * wpb) {
        const unsigned long long m = amb[e];
        const size_t i = (size_t)(m & 0xffffffffu);
        unsigned cand = (unsigned)(m >> 32);
        double best = INFINITY;
        int32_t lab = -1;
        while (cand) {
            const int c = __ffs(cand) - 1;
            cand &= cand - 1;
            double dc = 0.0;
            for (int b0 = 0; b0 < B; b0 += 32) {
                const int b = b0 + lane, nb = B - b0 < 32 ? B - b0 : 32;
                double q = 0.0;
                if (b < B) {
                    double t = __dsub_rn((double)x[(size_t)b * npix + i], Ct[(size_t)b * k + c]);
                    q = __dmul_rn(t, t);
                }
                for (int j = 0; j < nb; j++)
                    dc = __dadd_rn(dc, __shfl_sync(0xffffffffu, q, j));
            }
            if (dc < best) {
                best = dc;
                lab = c;
            }
        }
        if (lane == 0) {
            const int32_t old = labels[i];
            if (old != lab) {
                const unsigned long long at = atomicAdd(changed, 1ull);
                dirty[i / HYPROF_KMEANS_BLOCK] = 1;
                if (mv)
                    mv[at] = kmeans_move_word(i, old, lab);
            }
            labels[i] = lab;
            dist[i] = best;
        }
    }
}

/* One block a band: whether its valid values are multiples of some 2^q with
 * npix times their largest magnitude below 2^(q + 52) (kmeans.c's
 * sums_exact, NaN failing); *bad = 1 when not. */
const int kExactThreads = 1024;

__global__ void __launch_bounds__(kExactThreads)
exact_band_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, size_t npix,
                  int *__restrict__ bad)
{
    __shared__ unsigned mbits;
    if (threadIdx.x == 0)
        mbits = 0u;
    __syncthreads();
    const float *xb = x + (size_t)blockIdx.x * npix;
    float m = 0.0f;
    int nan = 0;
    for (size_t p = threadIdx.x; p < npix; p += blockDim.x) {
        if (mask && !mask[p])
            continue;
        const float v = fabsf(xb[p]);
        nan |= v != v;
        m = v > m ? v : m;
    }
    atomicMax(&mbits, __float_as_uint(m)); /* non-negative floats order as their bits */
    nan = __syncthreads_or(nan);
    m = __uint_as_float(mbits);
    int ok = !nan;
    if (ok && m > 0.0f) {
        int e;
        frexp((double)npix * (double)m * (1.0 + 0x1p-40), &e); /* npix m < 2^e */
        const int q = e - 52;
        ok = isfinite(m) && q >= -126 && q <= 126;
        const float scale = ok ? ldexpf(1.0f, -q) : 0.0f;
        for (size_t p = threadIdx.x; ok && p < npix; p += blockDim.x) {
            const float v = xb[p], y = v * scale;
            ok &= (mask && !mask[p]) || (y == truncf(y) && (v == 0.0f || fabsf(y) >= 1.0f));
        }
    }
    ok = __syncthreads_and(ok);
    if (!ok && threadIdx.x == 0)
        *bad = 1;
}

/* The moves mv[0 .. *nmv) into the totals tot (k x B) and counts: one warp
 * a block and group of 32 bands (lane = band), each block a run of the
 * moves, added into its own k x 32 sums in shared memory (eight moves'
 * values loaded before they are added), then into tot for the centres the
 * run touched. Exact sums: any order gives the same totals. */
const int kMoveBlocks = 264, kMoveBatch = 8;

__global__ void __launch_bounds__(32)
moves_kernel(const float *__restrict__ x, size_t npix, int B, int k,
             const unsigned long long *__restrict__ mv, const unsigned long long *__restrict__ nmv,
             double *__restrict__ tot, unsigned long long *__restrict__ cnt)
{
    extern __shared__ double sums[]; /* k x 32 */
    const int lane = threadIdx.x, b = blockIdx.y * 32 + lane;
    const unsigned long long n = *nmv, per = (n + gridDim.x - 1) / gridDim.x;
    const unsigned long long e0 = blockIdx.x * per, e1 = e0 + per < n ? e0 + per : n;
    if (e0 >= e1)
        return;
    for (int c = 0; c < k; c++)
        sums[c * 32 + lane] = 0.0;
    unsigned touched = 0;
    for (unsigned long long e = e0; e < e1; e += kMoveBatch) {
        unsigned long long w[kMoveBatch];
        float v[kMoveBatch];
#pragma unroll
        for (int j = 0; j < kMoveBatch; j++) {
            w[j] = e + j < e1 ? mv[e + j] : 0ull;
            v[j] = e + j < e1 && b < B ? x[(size_t)b * npix + (size_t)(w[j] & 0xffffffffu)] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kMoveBatch; j++) {
            if (e + j >= e1)
                break;
            const int from = (int8_t)(w[j] >> 32), to = (int8_t)(w[j] >> 40);
            touched |= (1u << from) | (1u << to);
            sums[from * 32 + lane] -= (double)v[j];
            sums[to * 32 + lane] += (double)v[j];
            if (blockIdx.y == 0 && lane == 0) {
                atomicAdd(&cnt[from], ~0ull); /* minus one */
                atomicAdd(&cnt[to], 1ull);
            }
        }
    }
    if (b < B)
        for (; touched; touched &= touched - 1) {
            const int c = __ffs(touched) - 1;
            atomicAdd(&tot[(size_t)c * B + b], sums[c * 32 + lane]);
        }
}

/* C[c][b] = tot[c][b] / cnt[c] (an empty cluster keeps its centre), and Ct. */
__global__ void totals_centres_kernel(const double *__restrict__ tot,
                                      const unsigned long long *__restrict__ cnt, int B, int k,
                                      double *__restrict__ C, double *__restrict__ Ct)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)B * k)
        return;
    const size_t c = t / B, b = t % B;
    const long long n = (long long)cnt[c];
    if (n > 0) {
        const double v = __ddiv_rn(tot[t], (double)n);
        C[t] = v;
        Ct[b * k + c] = v;
    }
}

} /* namespace */

namespace hyprof_unmix {

hyprof_status_t kmeans_resolve(hyprof_ctx_t *ctx, const char *op, const float *x, size_t npix,
                               int B, int k, const double *Ct, const unsigned long long *amb,
                               const unsigned long long *amb_n, int32_t *labels, double *dist,
                               unsigned long long *changed, uint8_t *dirty,
                               unsigned long long *mv)
{
    resolve_kernel<<<kResolveBlocks, kResolveThreads>>>(x, npix, B, k, Ct, amb, amb_n, labels,
                                                        dist, changed, dirty, mv);
    HYPROF_CUDA_CHECK_LAUNCH("resolve_kernel");
    return HYPROF_OK;
}

hyprof_status_t kmeans_sums_exact(hyprof_ctx_t *ctx, const char *op, const float *x,
                                  const uint8_t *mask, size_t npix, int B, bool *exact)
{
    DeviceBuffer<int> bad;
    HYPROF_TRY(bad.alloc(ctx, op, 1));
    HYPROF_CUDA_CHECK(cudaMemsetAsync(bad.get(), 0, sizeof(int), 0));
    exact_band_kernel<<<B, kExactThreads>>>(x, mask, npix, bad.get());
    HYPROF_CUDA_CHECK_LAUNCH("exact_band_kernel");
    int h = 1;
    HYPROF_CUDA_CHECK(cudaMemcpy(&h, bad.get(), sizeof h, cudaMemcpyDeviceToHost));
    *exact = h == 0;
    return HYPROF_OK;
}

hyprof_status_t kmeans_apply_moves(hyprof_ctx_t *ctx, const char *op, const float *x,
                                   size_t npix, int B, int k, const unsigned long long *mv,
                                   const unsigned long long *nmv, double *tot,
                                   unsigned long long *cnt, double *C, double *Ct)
{
    moves_kernel<<<dim3(kMoveBlocks, (unsigned)div_up((size_t)B, 32)), 32,
                   (size_t)k * 32 * sizeof(double)>>>(x, npix, B, k, mv, nmv, tot, cnt);
    HYPROF_CUDA_CHECK_LAUNCH("moves_kernel");
    totals_centres_kernel<<<(unsigned)div_up((size_t)B * k, 256), 256>>>(tot, cnt, B, k, C, Ct);
    HYPROF_CUDA_CHECK_LAUNCH("totals_centres_kernel");
    return HYPROF_OK;
}

} /* namespace hyprof_unmix */
