/* The projections of the CUDA PCA, Y = (X - mean) V (semantics:
 * algorithms/spectral/pca_impl.h): of the cube the fit left on the device
 * (fit-transform, project_resident) and of a cube streamed from the host in
 * pixel chunks (hyprof__cuda_pca_apply). Float out, nodata for masked pixels.
 *
 * Every path reads the float cube once, centres each value in double and
 * multiplies it into eight components at a time:
 *   project_bulk_kernel  sm_90, the fit-transform's default: bulk copies
 *                        (cp.async.bulk) of 8 bands' runs into shared stages
 *                        feed m16n8k8 FP64 tensor-core steps;
 *   project_tc_kernel    the same steps with the pixels loaded straight into
 *                        the fragments: the streamed apply, and the
 *                        fit-transform where the bulk copies do not apply
 *                        (sm_80: the m16n8k8 step as four m8n8k4);
 *   project_kernel       the CUDA cores, for bands whose V does not fit in
 *                        48 KiB of shared memory (more than 680);
 * the streamed apply of such bands centres each chunk to double and
 * multiplies with cublasDgemm. The tensor cores sum in their own order:
 * rounding-level differences from the CPU's sequential sums. */
#include "pca_cuda.cuh"
#include "../core/hopper.h"

#include <climits>
#include <cstring>

namespace {

/* out (m x k, float, leading dimension ld) = y, nodata for masked rows. */
__global__ void to_float_kernel(const double *__restrict__ y, size_t m, size_t k,
                                const uint8_t *__restrict__ mask, float nodata,
                                float *__restrict__ out, size_t ld)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m)
        return;
    const bool valid = !mask || mask[i];
    for (size_t c = blockIdx.y; c < k; c += gridDim.y)
        out[i + c * ld] = valid ? (float)y[i + c * m] : nodata;
}

/* Y = (X - mean) V of a resident cube in one pass over it on the CUDA cores:
 * a thread per pixel pair (p, p + blockDim.x: loads stay coalesced, and each
 * shared-memory load of V and the mean serves both), components k0 .. k0 +
 * kProjK - 1 (V and the mean are read by all threads of a warp at once:
 * broadcasts). Sum over the bands in order, fused multiply-adds. */
const int kProjK = 8;

/* project_kernel keeps nk vectors and the mean in shared memory when they fit
 * in the default 48 KiB (up to 666 bands). */
__host__ __device__ inline bool proj_smem_fits(size_t bands, int nk)
{
    return ((size_t)nk + 1) * bands * sizeof(double) <= 48 * 1024;
}

template <int PX>
__global__ void __launch_bounds__(kThreads)
    project_kernel(const float *__restrict__ x, size_t n, size_t bands,
                   const uint8_t *__restrict__ mask, const double *__restrict__ mean,
                   const double *__restrict__ V, size_t k0, int nk, float nodata,
                   float *__restrict__ out)
{
    /* The block's copy of the nk vectors and the mean in shared memory when
     * the launch gives room for them (dynamic size > 0): read by every thread
     * at every band, from global memory they cost one load instruction each. */
    extern __shared__ double proj_smem[];
    const double *v = V + k0 * bands, *mu = mean;
    if (proj_smem_fits(bands, nk)) {
        for (size_t i = threadIdx.x; i < (size_t)nk * bands; i += blockDim.x)
            proj_smem[i] = v[i];
        for (size_t i = threadIdx.x; i < bands; i += blockDim.x)
            proj_smem[(size_t)nk * bands + i] = mean[i];
        __syncthreads();
        v = proj_smem;
        mu = proj_smem + (size_t)nk * bands;
    }
    size_t p[PX];
    bool on[PX], any = false;
#pragma unroll
    for (int q = 0; q < PX; ++q) {
        p[q] = ((size_t)blockIdx.x * PX + q) * blockDim.x + threadIdx.x;
        on[q] = p[q] < n && (!mask || mask[p[q]]);
        any = any || on[q];
        if (p[q] < n && !on[q])
            for (int k = 0; k < nk; ++k)
                out[p[q] + (k0 + (size_t)k) * n] = nodata;
    }
    if (!any)
        return;
    double acc[PX][kProjK];
#pragma unroll
    for (int q = 0; q < PX; ++q)
#pragma unroll
        for (int k = 0; k < kProjK; ++k)
            acc[q][k] = 0.0;
    /* Eight bands' loads issued together: a latency-bound loop otherwise. */
    size_t b = 0;
    for (; b + 8 <= bands; b += 8) {
        float xv[PX][8];
#pragma unroll
        for (int q = 0; q < PX; ++q)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                xv[q][j] = on[q] ? x[p[q] + (b + (size_t)j) * n] : 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const double m = mu[b + (size_t)j];
            double vk[kProjK];
#pragma unroll
            for (int k = 0; k < kProjK; ++k)
                vk[k] = k < nk ? v[b + (size_t)j + (size_t)k * bands] : 0.0;
#pragma unroll
            for (int q = 0; q < PX; ++q) {
                const double xb = (double)xv[q][j] - m;
#pragma unroll
                for (int k = 0; k < kProjK; ++k)
                    if (k < nk)
                        acc[q][k] = fma(xb, vk[k], acc[q][k]);
            }
        }
    }
    for (; b < bands; ++b) {
#pragma unroll
        for (int q = 0; q < PX; ++q) {
            const double xb = (double)(on[q] ? x[p[q] + b * n] : 0.0f) - mu[b];
#pragma unroll
            for (int k = 0; k < kProjK; ++k)
                if (k < nk)
                    acc[q][k] = fma(xb, v[b + (size_t)k * bands], acc[q][k]);
        }
    }
#pragma unroll
    for (int q = 0; q < PX; ++q)
#pragma unroll
        for (int k = 0; k < kProjK; ++k) /* unrolled: acc stays in registers */
            if (k < nk && on[q])
                out[p[q] + (k0 + (size_t)k) * n] = (float)acc[q][k];
}

/* Y = (X - mean) V on the FP64 tensor cores: a warp per 16 pixels, their centred values loaded straight from
 * the cube into the A fragments of m16n8k8 (pixels g and g + 8, bands t and
 * t + 4 of each step of 8 bands: every 32-byte sector read is used whole),
 * V (8 components, zero-padded, and the bands padded to a multiple of 8 with
 * zeros) from shared memory as the B fragments. Per value: a load, a
 * conversion and a subtraction; the 8 multiply-adds are one eighth of an
 * mma (on the CUDA cores, project_kernel, the FP64 pipe and the shared loads
 * of V bound it). The sums run in the tensor cores' order: rounding-level differences from
 * the CPU's sequential sums. Components k0 .. k0 + nk - 1 (nk <= 8). */
const int kProjTcWarps = 8;

inline size_t project_tc_smem_bytes(size_t bands)
{
    const size_t bp = (bands + 7) / 8 * 8;
    return (bp * 8 + bp) * sizeof(double);
}

/* V[b][c] of components k0 + c (zero-padded to bp bands and 8 components)
 * and the mean (zero-padded) into shared memory, by the whole block. */
__device__ __forceinline__ void project_tc_stage_v(double *vs, double *ms, int bands, int bp,
                                                   const double *__restrict__ mean,
                                                   const double *__restrict__ V, size_t k0,
                                                   int nk)
{
    for (int i = threadIdx.x; i < 8 * bp; i += blockDim.x) {
        const int b = i / 8, c = i % 8;
        vs[i] = b < bands && c < nk ? V[(size_t)b + (k0 + (size_t)c) * bands] : 0.0;
    }
    for (int i = threadIdx.x; i < bp; i += blockDim.x)
        ms[i] = i < bands ? mean[i] : 0.0;
}

/* v[q][h]: pixel base + 16 q + g + 8 h is in the cube and not masked. */
template <int kTiles>
__device__ __forceinline__ void project_tc_valid(bool (&v)[kTiles][2], const uint8_t *__restrict__ mask,
                                                 size_t n, size_t base, int g)
{
#pragma unroll
    for (int q = 0; q < kTiles; ++q)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const size_t p = base + 16 * q + g + 8 * h;
            v[q][h] = p < n && (!mask || mask[p]);
        }
}

/* One step of 8 bands (b = 8 s + t and b + 4 of lane t) into the tiles'
 * accumulators; f[q]: pixels g, g + 8 of band b, then of band b + 4. */
template <bool kSplit, int kTiles>
__device__ __forceinline__ void project_tc_step(double (&acc)[kTiles][4],
                                                const bool (&v)[kTiles][2],
                                                const float (&f)[kTiles][4], const double *vs,
                                                const double *ms, int b, int bands, int g)
{
    const double m0 = ms[b], m1 = ms[b + 4], w0 = vs[b * 8 + g], w1 = vs[(b + 4) * 8 + g];
    const bool r0 = b < bands, r1 = b + 4 < bands;
#pragma unroll
    for (int q = 0; q < kTiles; ++q) {
        /* (x - mean) for valid pixels and real bands; 0 otherwise
         * (padding bands have V = 0, but x - mean must not be NaN). */
        const double a[4] = {v[q][0] && r0 ? (double)f[q][0] - m0 : 0.0,
                             v[q][1] && r0 ? (double)f[q][1] - m0 : 0.0,
                             v[q][0] && r1 ? (double)f[q][2] - m1 : 0.0,
                             v[q][1] && r1 ? (double)f[q][3] - m1 : 0.0};
        dmma_16x8x8<kSplit>(acc[q], a, w0, w1);
    }
}

/* c0, c1: pixel g of the tile, components 2t, 2t + 1; c2, c3: pixel g + 8. */
template <int kTiles>
__device__ __forceinline__ void project_tc_store(const double (&acc)[kTiles][4],
                                                 const bool (&v)[kTiles][2], size_t n,
                                                 size_t base, int g, int t, size_t k0, int nk,
                                                 float nodata, float *__restrict__ out)
{
#pragma unroll
    for (int q = 0; q < kTiles; ++q)
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            const size_t p = base + 16 * q + g + 8 * (h >> 1);
            const int c = 2 * t + (h & 1);
            if (p < n && c < nk)
                out[p + (k0 + (size_t)c) * n] = v[q][h >> 1] ? (float)acc[q][h] : nodata;
        }
}

/* The tiles of one warp from pixel base, loaded straight from the cube:
 * kUnroll steps of 8 bands whose loads are issued together. Masked pixels
 * are read (coalesced) and zeroed; those past n read pixel 0. */
template <bool kSplit, int kTiles, int kUnroll>
__device__ __forceinline__ void project_tc_warp(const float *__restrict__ x, size_t n, int bands,
                                                const uint8_t *__restrict__ mask,
                                                const double *vs, const double *ms, size_t k0,
                                                int nk, float nodata, float *__restrict__ out,
                                                size_t base, int lane)
{
    const int g = lane >> 2, t = lane & 3, steps = (bands + 7) / 8;
    bool v[kTiles][2];
    const float *xp[kTiles][2];
    double acc[kTiles][4];
    project_tc_valid<kTiles>(v, mask, n, base, g);
#pragma unroll
    for (int q = 0; q < kTiles; ++q)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const size_t p = base + 16 * q + g + 8 * h;
            xp[q][h] = x + (p < n ? p : 0);
            acc[q][2 * h] = acc[q][2 * h + 1] = 0.0;
        }
    for (int s0 = 0; s0 < steps; s0 += kUnroll) {
        float f[kUnroll][kTiles][4];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int b = 8 * (s0 + u) + t;
            const bool in0 = s0 + u < steps && b < bands, in1 = s0 + u < steps && b + 4 < bands;
#pragma unroll
            for (int q = 0; q < kTiles; ++q) {
                f[u][q][0] = in0 ? xp[q][0][(size_t)b * n] : 0.0f;
                f[u][q][1] = in0 ? xp[q][1][(size_t)b * n] : 0.0f;
                f[u][q][2] = in1 ? xp[q][0][(size_t)(b + 4) * n] : 0.0f;
                f[u][q][3] = in1 ? xp[q][1][(size_t)(b + 4) * n] : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (s0 + u >= steps)
                break;
            project_tc_step<kSplit, kTiles>(acc, v, f[u], vs, ms, 8 * (s0 + u) + t, bands, g);
        }
    }
    project_tc_store<kTiles>(acc, v, n, base, g, t, k0, nk, nodata, out);
}

/* kTiles tiles of 16 pixels a warp, kUnroll steps of 8 bands whose loads
 * are issued together: 2 and 2 by the fit-transform where
 * project_bulk_kernel does not apply (two tiles: 32 consecutive pixels, 128
 * bytes of each band), 1 and 3 by the streamed apply. The warps wait on
 * their loads: the kernel is bound by the loads in flight. */
template <bool kSplit, int kTiles, int kUnroll>
__global__ void __launch_bounds__(32 * kProjTcWarps)
    project_tc_kernel(const float *__restrict__ x, size_t n, int bands,
                      const uint8_t *__restrict__ mask, const double *__restrict__ mean,
                      const double *__restrict__ V, size_t k0, int nk, float nodata,
                      float *__restrict__ out)
{
    extern __shared__ double ptc_smem[];
    const int bp = (bands + 7) / 8 * 8;
    double *vs = ptc_smem;          /* [bp][8]: V[b][c] of components k0 + c */
    double *ms = ptc_smem + 8 * bp; /* [bp] */
    project_tc_stage_v(vs, ms, bands, bp, mean, V, k0, nk);
    __syncthreads();
    const size_t base = ((size_t)blockIdx.x * kProjTcWarps + (threadIdx.x >> 5)) * 16 * kTiles;
    if (base >= n)
        return;
    project_tc_warp<kSplit, kTiles, kUnroll>(x, n, bands, mask, vs, ms, k0, nk, nodata, out, base,
                                             threadIdx.x & 31);
}

/* The same projection fed by bulk copies (sm_90, the fit-transform's
 * default): persistent blocks, each a producer warp and kProjTcWarps
 * consumer warps. The cube is cut into blocks of kPix pixels (kTiles tiles
 * a warp); for each step of 8 bands the producer's lane 0 copies the 8
 * bands' runs of the block (cp.async.bulk, kPix + 4 floats from the 16-byte
 * boundary below the run: the planes of an odd n are only 4-byte aligned)
 * into one of `depth` shared stages, whose full barrier counts the bytes;
 * the consumers read their fragments there and release the stage through
 * its empty barrier, every consumer thread arriving (an arrive releases
 * only the arriving thread's own reads). Keeps up to depth x 8 x (kPix + 4)
 * x 4 bytes in flight per block with one thread issuing, where the register loads of
 * project_tc_kernel keep 16 floats a thread; the copies, not the tensor-core
 * side, bound it. Same sums in the same order: the results are
 * project_tc_kernel's, bit for bit. Blocks whose last copy would pass the
 * cube's end (the last one or two) are loaded from global memory as
 * project_tc_kernel does. */
template <int kTiles>
struct ProjBulk {
    static const int kPix = kProjTcWarps * 16 * kTiles;
};

inline size_t project_bulk_smem_bytes(int bands, int tiles, int depth)
{
    const size_t bp = ((size_t)bands + 7) / 8 * 8;
    const size_t row = (size_t)kProjTcWarps * 16 * tiles + 8;
    return (9 * bp + 2 * (size_t)depth) * sizeof(double) + (size_t)depth * 8 * row * sizeof(float);
}

/* smem_u32, mbar_*, bulk_copy: core/hopper.h */

template <int kTiles>
__global__ void __launch_bounds__(32 * (kProjTcWarps + 1))
    project_bulk_kernel(const float *__restrict__ x, size_t n, int bands,
                        const uint8_t *__restrict__ mask, const double *__restrict__ mean,
                        const double *__restrict__ V, size_t k0, int nk, float nodata,
                        float *__restrict__ out, size_t nsafe, int depth)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    typedef ProjBulk<kTiles> P;
    const int kRow = P::kPix + 8; /* floats: 16-byte rows, 8 banks apart */
    const unsigned kCopy = (P::kPix + 4) * sizeof(float);
    extern __shared__ double ptc_smem[];
    const int bp = (bands + 7) / 8 * 8, steps = bp / 8;
    double *vs = ptc_smem, *ms = ptc_smem + 8 * bp;
    uint64_t *full = (uint64_t *)(ms + bp), *empty = full + depth;
    float *stage = (float *)(empty + depth); /* [depth][8][kRow] */
    project_tc_stage_v(vs, ms, bands, bp, mean, V, k0, nk);
    if (threadIdx.x == 0) {
        for (int i = 0; i < depth; ++i) {
            mbar_init(full + i, 1);
            mbar_init(empty + i, 32 * kProjTcWarps);
        }
        mbar_init_fence();
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int slot = 0;
    unsigned phase = 0;
    if (warp == kProjTcWarps) { /* the producer */
        if (lane != 0)
            return;
        for (size_t j = blockIdx.x; j < nsafe; j += gridDim.x)
            for (int s = 0; s < steps; ++s) {
                mbar_wait(empty + slot, phase ^ 1); /* the first use passes at once */
                const int nb = bands - 8 * s < 8 ? bands - 8 * s : 8;
                mbar_arrive_tx(full + slot, nb * kCopy);
                for (int r = 0; r < nb; ++r) {
                    const size_t at = ((size_t)(8 * s + r) * n + j * P::kPix) & ~(size_t)3;
                    bulk_copy(stage + (slot * 8 + r) * kRow, x + at, kCopy, full + slot);
                }
                if (++slot == depth) {
                    slot = 0;
                    phase ^= 1;
                }
            }
        return;
    }
    const int g = lane >> 2, t = lane & 3, pw = warp * 16 * kTiles;
    const unsigned n3 = (unsigned)(n & 3); /* the run of band b starts (b n3) % 4 floats in */
    for (size_t j = blockIdx.x; j < nsafe; j += gridDim.x) {
        const size_t base = j * P::kPix + pw;
        bool v[kTiles][2];
        double acc[kTiles][4];
        project_tc_valid<kTiles>(v, mask, n, base, g);
#pragma unroll
        for (int q = 0; q < kTiles; ++q)
            acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.0;
        for (int s = 0; s < steps; ++s) {
            const int b = 8 * s + t;
            const float *r0 = stage + (slot * 8 + t) * kRow + pw + g + ((unsigned)b * n3 & 3);
            const float *r1 =
                stage + (slot * 8 + t + 4) * kRow + pw + g + ((unsigned)(b + 4) * n3 & 3);
            float f[kTiles][4];
            mbar_wait(full + slot, phase);
#pragma unroll
            for (int q = 0; q < kTiles; ++q) {
                f[q][0] = r0[16 * q];
                f[q][1] = r0[16 * q + 8];
                f[q][2] = r1[16 * q];
                f[q][3] = r1[16 * q + 8];
            }
            mbar_arrive(empty + slot); /* each thread releases its own reads */
            if (++slot == depth) {
                slot = 0;
                phase ^= 1;
            }
            project_tc_step<false, kTiles>(acc, v, f, vs, ms, b, bands, g);
        }
        project_tc_store<kTiles>(acc, v, n, base, g, t, k0, nk, nodata, out);
    }
    const size_t nblk = (n + P::kPix - 1) / P::kPix;
    for (size_t j = nsafe + blockIdx.x; j < nblk; j += gridDim.x)
        project_tc_warp<false, kTiles, 1>(x, n, bands, mask, vs, ms, k0, nk, nodata, out,
                                          j * P::kPix + pw, lane);
#endif
}

} /* namespace */

namespace hyprof_pca {

/* project_bulk_kernel's launch for the resident cube x (n pixels, B bands):
 * 2 tiles a warp (256-pixel blocks, runs of 1 KB a band), 8 stages, 2
 * blocks a SM (156 KB of shared memory); grid 0 (project_tc_kernel then)
 * before sm_90, for a cube not 16-byte aligned or stages that do not fit. */
const int kProjBulkTiles = 2, kProjBulkDepth = 8, kProjBulkPerSm = 2;

struct BulkLaunch {
    unsigned grid;
    size_t smem, nsafe;
};

static BulkLaunch bulk_launch(const float *x, size_t n, size_t B)
{
    BulkLaunch L;
    memset(&L, 0, sizeof L);
    int sms = 0, optin = 0, major = 0, fit = 0;
    const int threads = 32 * (kProjTcWarps + 1);
    if (!device_limits(&sms, &optin, &major))
        return L;
    if (major < 9 || ((uintptr_t)x & 15) != 0 || B > (size_t)INT_MAX)
        return L;
    const size_t smem = project_bulk_smem_bytes((int)B, kProjBulkTiles, kProjBulkDepth);
    const void *fn = (const void *)project_bulk_kernel<kProjBulkTiles>;
    if (smem > (size_t)optin ||
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, fn, threads, smem) != cudaSuccess ||
        fit < 1) {
        (void)cudaGetLastError(); /* not an error: project_tc_kernel follows */
        return L;
    }
    /* Blocks whose copies all end inside the cube: that of the last band
     * starts at the 16-byte boundary below (B - 1) n + j kPix. */
    const size_t pix = ProjBulk<kProjBulkTiles>::kPix, end = B * n;
    size_t nsafe = n / pix;
    while (nsafe > 0 && (((B - 1) * n + (nsafe - 1) * pix) & ~(size_t)3) + pix + 4 > end)
        --nsafe;
    const size_t blocks = div_up(n, pix);
    const size_t grid = (size_t)sms * (kProjBulkPerSm < fit ? kProjBulkPerSm : fit);
    L.smem = smem;
    L.nsafe = nsafe;
    L.grid = (unsigned)(grid < blocks ? grid : blocks);
    return L;
}

/* Which kernel projects a resident cube of n pixels and B bands here:
 * project_bulk_kernel on sm_90 (bulk.grid > 0), project_tc_kernel where it
 * does not apply (split: m8n8k4 fragments before sm_90), project_kernel when
 * V does not fit in 48 KiB of shared memory (tc false). */
struct ResidentProjection {
    bool split, tc;
    size_t tc_shmem;
    BulkLaunch bulk;
};

static hyprof_status_t plan_resident_projection(hyprof_ctx_t *ctx, const char *op,
                                                const float *d_cube, size_t N, size_t B,
                                                ResidentProjection *P)
{
    int dev = 0, major = 0;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    P->split = major < 9;
    P->tc_shmem = project_tc_smem_bytes(B);
    P->tc = B <= (size_t)INT_MAX && P->tc_shmem <= 48 * 1024;
    P->bulk = P->tc && !P->split ? bulk_launch(d_cube, N, B) : BulkLaunch();
    return HYPROF_OK;
}

/* The launches of plan P that project the resident cube into d_out (N x K
 * floats) on stream st, eight components a launch. */
static hyprof_status_t project_resident_launch(hyprof_ctx_t *ctx, const char *op,
                                               const ResidentProjection &P,
                                               const hyprof_pca_apply_args_t *ap,
                                               const float *d_cube, const uint8_t *d_cmask,
                                               const double *d_mean, const double *d_V,
                                               float *d_out, cudaStream_t st)
{
    const size_t N = ap->npix, B = ap->bands, K = ap->components;
    const bool split = P.split, tc = P.tc;
    const size_t tc_shmem = P.tc_shmem;
    const BulkLaunch &bulk = P.bulk;
    for (size_t k0 = 0; bulk.grid && k0 < K; k0 += 8) {
        const int nk = (int)(K - k0 < 8 ? K - k0 : 8);
        project_bulk_kernel<kProjBulkTiles><<<bulk.grid, 32 * (kProjTcWarps + 1), bulk.smem, st>>>(
            d_cube, N, (int)B, d_cmask, d_mean, d_V, k0, nk, ap->nodata, d_out, bulk.nsafe,
            kProjBulkDepth);
        HYPROF_CUDA_CHECK_LAUNCH("project_bulk_kernel");
    }
    for (size_t k0 = 0; tc && !bulk.grid && k0 < K; k0 += 8) {
        const int nk = (int)(K - k0 < 8 ? K - k0 : 8);
        const unsigned blocks = (unsigned)div_up(div_up(N, (size_t)32), (size_t)kProjTcWarps);
        if (split)
            project_tc_kernel<true, 2, 2><<<blocks, 32 * kProjTcWarps, tc_shmem, st>>>(
                d_cube, N, (int)B, d_cmask, d_mean, d_V, k0, nk, ap->nodata, d_out);
        else
            project_tc_kernel<false, 2, 2><<<blocks, 32 * kProjTcWarps, tc_shmem, st>>>(
                d_cube, N, (int)B, d_cmask, d_mean, d_V, k0, nk, ap->nodata, d_out);
        HYPROF_CUDA_CHECK_LAUNCH("project_tc_kernel");
    }
    for (size_t k0 = 0; !tc && k0 < K; k0 += kProjK) {
        const int nk = (int)(K - k0 < (size_t)kProjK ? K - k0 : (size_t)kProjK);
        const size_t shmem = proj_smem_fits(B, nk) ? ((size_t)nk + 1) * B * sizeof(double) : 0;
        project_kernel<2><<<(unsigned)div_up(N, 2 * kThreads), kThreads, shmem, st>>>(
            d_cube, N, B, d_cmask, d_mean, d_V, k0, nk, ap->nodata, d_out);
        HYPROF_CUDA_CHECK_LAUNCH("project_kernel");
    }
    return HYPROF_OK;
}

/* Projection of the cube the fit left on the device (fit-transform) into a
 * device output that is handed to a->on_device or copied back once. Returns
 * with *done false, having projected nothing, when the output does not fit:
 * the caller then streams the cube. */
hyprof_status_t project_resident(hyprof_ctx_t *ctx, const char *op,
                                 const hyprof_pca_fit_args_t *a, const float *d_cube,
                                 const uint8_t *d_cmask, Pipeline &pipe, bool *done,
                                 PcaClock &clock)
{
    const hyprof_pca_apply_args_t *ap = a->apply;
    const size_t N = ap->npix, B = ap->bands, K = ap->components;
    *done = false;
    DeviceBuffer<double> d_mean, d_V;
    DeviceBuffer<float> d_out;
    if (K > (size_t)INT_MAX || d_out.alloc(ctx, op, N * K) != HYPROF_OK ||
        d_mean.alloc(ctx, op, B) != HYPROF_OK || d_V.alloc(ctx, op, B * K) != HYPROF_OK) {
        ctx->error[0] = '\0'; /* not an error: the streamed projection follows */
        return HYPROF_OK;
    }
    HYPROF_CUDA_CHECK(cudaMemcpy(d_mean.get(), ap->mean, B * sizeof(double),
                                 cudaMemcpyHostToDevice));
    HYPROF_CUDA_CHECK(cudaMemcpy(d_V.get(), ap->vectors, B * K * sizeof(double),
                                 cudaMemcpyHostToDevice));
    ResidentProjection plan;
    HYPROF_TRY(plan_resident_projection(ctx, op, d_cube, N, B, &plan));
    size_t tid;
    HYPROF_TRY(clock.begin(ctx, op, kPcaProjection, pipe.stream(0), &tid));
    HYPROF_TRY(project_resident_launch(ctx, op, plan, ap, d_cube, d_cmask, d_mean.get(),
                                       d_V.get(), d_out.get(), pipe.stream(0)));
    HYPROF_TRY(end_then_drain(ctx, op, pipe, clock, tid));
    int consumed = 0;
    if (a->on_device) {
        HYPROF_TRY(clock.collect(ctx, op)); /* before the consumer's own work */
        HYPROF_TRY(a->on_device(a->device_user, d_out.get(), ap, &consumed));
    }
    if (!consumed) {
        HYPROF_TRY(clock.begin(ctx, op, kPcaDownload, pipe.stream(0), &tid));
        HYPROF_CUDA_CHECK(
            cudaMemcpy(ap->out, d_out.get(), N * K * sizeof(float), cudaMemcpyDeviceToHost));
        HYPROF_TRY(clock.end(ctx, op, tid, pipe.stream(0)));
    }
    *done = true;
    return hyprof__progress(ctx, 1.0, op);
}

/* One chunk of the streamed apply in slot s of the pipeline, uploaded:
 * project_tc_kernel (1 tile a warp, 3 steps of 8 bands a load batch), or,
 * for bands whose V does not fit in 48 KiB (tc false), centre + DGEMM +
 * conversion in the slot's d_c and d_y. */
static hyprof_status_t apply_chunk(hyprof_ctx_t *ctx, const char *op,
                                   const hyprof_pca_apply_args_t *a, Slot &sl, cudaStream_t st,
                                   size_t mi, bool tc, bool split, const double *d_mean,
                                   const double *d_V, cublasHandle_t blas, double *d_c,
                                   double *d_y)
{
    const size_t B = a->bands, K = a->components;
    const uint8_t *msk = a->mask ? sl.mask.get() : NULL;
    const size_t tc_shmem = project_tc_smem_bytes(B);
    for (size_t k0 = 0; tc && k0 < K; k0 += 8) {
        const int nk = (int)(K - k0 < 8 ? K - k0 : 8);
        const unsigned blocks = (unsigned)div_up(div_up(mi, (size_t)16), (size_t)kProjTcWarps);
        if (split)
            project_tc_kernel<true, 1, 3><<<blocks, 32 * kProjTcWarps, tc_shmem, st>>>(
                sl.in.get(), mi, (int)B, msk, d_mean, d_V, k0, nk, a->nodata, sl.out.get());
        else
            project_tc_kernel<false, 1, 3><<<blocks, 32 * kProjTcWarps, tc_shmem, st>>>(
                sl.in.get(), mi, (int)B, msk, d_mean, d_V, k0, nk, a->nodata, sl.out.get());
        HYPROF_CUDA_CHECK_LAUNCH("project_tc_kernel");
    }
    if (tc)
        return HYPROF_OK;
    const double one = 1.0, zero = 0.0;
    HYPROF_TRY(centre(ctx, op, st, sl.in.get(), mi, msk, mi, B, d_mean, d_c));
    HYPROF_CUBLAS_CHECK(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)mi, (int)K, (int)B,
                                    &one, d_c, (int)mi, d_V, (int)B, &zero, d_y, (int)mi));
    dim3 grid((unsigned)div_up(mi, kThreads), grid_y(K));
    to_float_kernel<<<grid, kThreads, 0, st>>>(d_y, mi, K, msk, a->nodata, sl.out.get(), mi);
    HYPROF_CUDA_CHECK_LAUNCH("to_float_kernel");
    return HYPROF_OK;
}

} /* namespace hyprof_pca */

using namespace hyprof_pca;

/* The streamed projection: chunks of m pixels through the two-slot pipeline
 * (the whole cube in one chunk when it fits, else about kChunkTargetBytes of
 * input, within the device-memory budget). */
extern "C" hyprof_status_t hyprof__cuda_pca_apply(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "pca";
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    const hyprof_pca_apply_args_t *a = (const hyprof_pca_apply_args_t *)vargs;
    if (!a || !a->x || !a->mean || !a->vectors || !a->out)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "CUDA apply called without data");
    const size_t N = a->npix, B = a->bands, K = a->components;
    if (N == 0 || B == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "empty cube (%zu pixels, %zu bands)", N,
                             B);
    if (K == 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "no components to project on");
    if (B > (size_t)INT_MAX || K > (size_t)INT_MAX)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "too many bands (%zu) or components (%zu)",
                             B, K);
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));

    DeviceBuffer<double> d_mean, d_V, d_c[2], d_y[2];
    Pipeline pipe;
    Blas blas[2];

    HYPROF_TRY(blas[0].create(ctx, op));
    HYPROF_TRY(blas[1].create(ctx, op));
    HYPROF_TRY(d_mean.alloc(ctx, op, B));
    HYPROF_TRY(d_V.alloc(ctx, op, B * K));
    HYPROF_CUDA_CHECK(
        cudaMemcpy(d_mean.get(), a->mean, B * sizeof(double), cudaMemcpyHostToDevice));
    HYPROF_CUDA_CHECK(
        cudaMemcpy(d_V.get(), a->vectors, B * K * sizeof(double), cudaMemcpyHostToDevice));

    const size_t per_pixel = 2 * (B * sizeof(float) + (a->mask ? 1 : 0) + B * sizeof(double) +
                                  K * sizeof(double) + K * sizeof(float));
    size_t m = 0;
    HYPROF_TRY(plan_streamed_chunk(ctx, op, N, B, per_pixel, B > K ? B : K, kChunkTargetBytes,
                                   &m));
    HYPROF_TRY(pipe.init(ctx, op, a->x, a->mask, N, B, K, a->out, m, true));
    const size_t nch = pipe.nchunks();
    int dev = 0, major = 0;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const bool split = major < 9;
    const bool tc = project_tc_smem_bytes(B) <= 48 * 1024;
    for (int s = 0; !tc && s < (nch > 1 ? 2 : 1); ++s) {
        HYPROF_TRY(d_c[s].alloc(ctx, op, m * B));
        HYPROF_TRY(d_y[s].alloc(ctx, op, m * K));
    }
    for (int s = 0; s < 2; ++s)
        HYPROF_CUBLAS_CHECK(cublasSetStream(blas[s].get(), pipe.stream(s)));
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "pca: CUDA projection of %zu pixels x %zu bands on %zu components, %zu "
                "chunk(s) of %zu pixels%s",
                N, B, K, nch, m, pipe.staged() ? ", pinned staging" : "");

    for (size_t i = 0; i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(pipe.acquire(ctx, op, s));
        HYPROF_TRY(pipe.upload(ctx, op, s, p0, mi));
        HYPROF_TRY(apply_chunk(ctx, op, a, pipe.slot[s], pipe.stream(s), mi, tc, split,
                               d_mean.get(), d_V.get(), blas[s].get(), d_c[s].get(),
                               d_y[s].get()));
        HYPROF_TRY(pipe.download(ctx, op, s, p0, mi));
        HYPROF_TRY(pipe.release(ctx, op, s));
        HYPROF_TRY(hyprof__progress(ctx, (double)(i + 1) / (double)nch, "pca"));
    }
    return pipe.drain(ctx, op);
}
