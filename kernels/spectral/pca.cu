/* CUDA backend of the PCA steps (semantics: algorithms/spectral/pca_impl.h).
 *
 * Fit, in pixel chunks (float32 BSQ = column-major npix x bands):
 *   resident cube of up to 144 bands (the default; EADP's case): the upload
 *           alone, then one pass (gram_tc_kernel, FP64 tensor cores) gives
 *           the band sums and the Gram matrix about a per-band shift K (the
 *           mean of a sample of pixels), and gram_finish_kernel the mean
 *           K + s / n and the covariance (G - s s^T / n) / (n - 1): the
 *           accuracy of the centred formula (K is near the mean: no
 *           cancellation), one pass over the cube fewer;
 *   otherwise pass 1: masked per-band sums in double (deterministic
 *           two-stage reduction), mean = sum / nvalid, overlapped with the
 *           upload; pass 2: each chunk centred to double (masked rows
 *           zeroed), C += Xc^T Xc with cuBLAS (a batched DGEMM), or for a
 *           resident cube ($HYPROF_PCA_GRAM=mma or fp64) gram_mma_kernel /
 *           gram_kernel in one pass; then C / (nvalid - 1);
 *   then    the eigen-decomposition on the host: LAPACK's dsyevd (all
 *           eigenpairs, as the CPU backend), or, when the caller keeps few
 *           components of many bands, all eigenvalues and the top vectors
 *           only (eigh_top); cuSOLVER's syevd with $HYPROF_PCA_EIGH=device.
 * When the whole cube fits in device memory it is uploaded once during pass 1
 * and later passes read it from there; otherwise each pass streams the chunks
 * from the host. Each of the two pipeline slots accumulates its own sums and
 * its own covariance (so the two streams never write the same memory); the
 * two halves are added at the end, which keeps the result independent of
 * timing. Every reduction adds per-CTA slices in a fixed order.
 *
 * Apply, in pixel chunks: centre to double, Y = Xc V with cublasDgemm, convert
 * to float, nodata for masked pixels; the fit-transform of a resident cube
 * projects it in one pass (project_tc_kernel on the FP64 tensor cores;
 * project_kernel on the CUDA cores with $HYPROF_PCA_PROJECT=pair or one).
 * Stage times from CUDA events go to the debug log.
 *
 * Measured (NVIDIA H100 80GB HBM3, lead's round of 15:49, Nsight Compute
 * kernel times of one call of the eadp operation, Houston size 1905 x 349 x
 * 144, 7 components, main's build in the same run): the PCA's kernels 0.64
 * ms against 0.84 for main: covariance 0.449 against 0.644 (gram_tc_kernel:
 * producers with 16-byte copies, consumers with compile-time tile counts),
 * projection 0.168 against 0.174, finish 0.013 and shift 0.009 both; the
 * host eigh (1.1-1.3 ms of host time, the device idle meanwhile: not in
 * these sums) as main. Tried on the same runs and slower, since removed:
 * covariance producers copying a float a lane 0.538 ms, mbarrier hand-over
 * 0.543 (0.455 with the 16-byte producers), m16n8k16 fragments 0.604, 2 x 4
 * tile blocks 0.609 / 0.580, converting a pixel a lane; projection with one
 * tile 0.173, six steps 0.177, pixels staged in shared memory 0.179.
 * Stage event windows (H100, 03:12 round, hyprof_bench EADP Houston, CUDA
 * events, main in the same run): covariance 0.566 ms against 0.616 (the
 * end mark queued before the host drains the streams, shift_kernel with
 * pass 1), eigh 0.002 against 0.055 (the mean and covariance written into
 * mapped page-locked memory by gram_finish_kernel: HostStage), projection
 * 0.186 against 0.202 (the end mark before the drain). */
#include "../core/cuda_util.h"
#include "../core/hopper.h"
#include "../core/stage_clock.h"

#include <algorithm>
#include <type_traits>
#include <cstring>
#include <vector>
#include "spectral/pca_impl.h"

#include <climits>
#include <ctime>
#include <cuda_pipeline.h>
#include <mutex>
#include <lapacke.h>

/* OpenBLAS's pool (weak: any LAPACK works, then its own settings apply). */
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

using namespace hyprof_cuda;

namespace {

const int kThreads = 256;
const int kSumMaxBlocks = 128;
const size_t kChunkTargetBytes = (size_t)32 << 20; /* float input per chunk */

inline unsigned grid_y(size_t n) { return (unsigned)(n < 65535 ? (n ? n : 1) : 65535); }

/* partial[b * gridDim.x + blockIdx.x] = sum of valid src[i + b*ld] over this
 * block's share of i < m. */
__global__ void band_sum_kernel(const float *__restrict__ src, size_t ld,
                                const uint8_t *__restrict__ mask, size_t m, size_t bands,
                                double *__restrict__ partial)
{
    __shared__ double warp_sums[kThreads / 32];
    for (size_t b = blockIdx.y; b < bands; b += gridDim.y) {
        const float *col = src + b * ld;
        const size_t stride = (size_t)gridDim.x * kThreads;
        double acc = 0.0;
        size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x;
        /* Four loads in flight, added in the same order as one at a time (a
         * latency-bound loop otherwise: 1.7 TB/s on an H100). */
        for (; i + 3 * stride < m; i += 4 * stride) {
            float v[4];
            bool ok[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[j] = col[i + (size_t)j * stride];
                ok[j] = !mask || mask[i + (size_t)j * stride];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (ok[j])
                    acc += (double)v[j];
        }
        for (; i < m; i += stride)
            if (!mask || mask[i])
                acc += (double)col[i];
        for (int off = 16; off > 0; off >>= 1)
            acc += __shfl_down_sync(0xffffffffu, acc, off);
        if ((threadIdx.x & 31) == 0)
            warp_sums[threadIdx.x >> 5] = acc;
        __syncthreads();
        if (threadIdx.x == 0) {
            double t = 0.0;
            for (int w = 0; w < kThreads / 32; ++w)
                t += warp_sums[w];
            partial[b * gridDim.x + blockIdx.x] = t;
        }
        __syncthreads();
    }
}

__global__ void band_sum_accumulate(const double *__restrict__ partial, unsigned nblocks,
                                    size_t bands, double *__restrict__ sums)
{
    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= bands)
        return;
    double t = 0.0;
    for (unsigned g = 0; g < nblocks; ++g)
        t += partial[b * nblocks + g];
    sums[b] += t;
}

__global__ void mean_kernel(const double *__restrict__ s0, const double *__restrict__ s1,
                            size_t bands, double n, double *__restrict__ mean)
{
    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bands)
        mean[b] = (s0[b] + s1[b]) / n;
}

/* dst (m x bands, dense, double) = src - mean for valid rows, 0 for masked. */
__global__ void centre_kernel(const float *__restrict__ src, size_t ld,
                              const uint8_t *__restrict__ mask, size_t m, size_t bands,
                              const double *__restrict__ mean, double *__restrict__ dst)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m)
        return;
    const bool valid = !mask || mask[i];
    for (size_t b = blockIdx.y; b < bands; b += gridDim.y)
        dst[i + b * m] = valid ? (double)src[i + b * ld] - mean[b] : 0.0;
}

__global__ void cov_finalize_kernel(const double *__restrict__ c0, const double *__restrict__ c1,
                                    size_t count, double denom, double *__restrict__ a)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count)
        a[i] = (c0[i] + c1[i]) / denom;
}

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

/* Y = (X - mean) V of a resident cube in one pass over it, float out with
 * nodata for masked pixels: a thread per pixel, components k0 .. k0 +
 * kProjK - 1 (V and the mean are read by all threads of a warp at once:
 * broadcasts). The cube is read once, in float, where centre + DGEMM wrote
 * and read it back in double. Sum over the bands in order, fused
 * multiply-adds. */
const int kProjK = 8;

/* project_kernel keeps nk vectors and the mean in shared memory when they fit
 * in the default 48 KiB (up to 666 bands). */
__host__ __device__ inline bool proj_smem_fits(size_t bands, int nk)
{
    return ((size_t)nk + 1) * bands * sizeof(double) <= 48 * 1024;
}

/* PX pixels per thread (p, p + blockDim.x, ...: loads stay coalesced), so
 * that each shared-memory load of V and the mean serves PX pixels: PX = 2 by
 * default (Houston size on an H200, 09:40 round: 193 us a call, against 376
 * for PX = 1 and 238 for the kernel before), $HYPROF_PCA_PROJECT=one: PX = 1.
 * The same operations per pixel. */
template <int PX>
__global__ void __launch_bounds__(kThreads)
    project_kernel(const float *__restrict__ x, size_t n, size_t bands,
                   const uint8_t *__restrict__ mask, const double *__restrict__ mean,
                   const double *__restrict__ V, size_t k0, int nk, float nodata,
                   float *__restrict__ out)
{
    /* The block's copy of the nk vectors and the mean in shared memory when
     * the launch gives room for them (dynamic size > 0): read by every thread
     * at every band, from global memory they cost one load instruction each
     * (0.28 ms, 1.4 TB/s, for Houston on an H100). */
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
    /* Eight bands' loads issued together: a latency-bound loop otherwise
     * (measured 1.2 TB/s on an H100 with one load per iteration in flight). */
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

/* Covariance numerator of a resident cube in one pass over it (float in,
 * double accumulation), instead of centring it to double and a DGEMM per
 * chunk. Each CTA takes a contiguous range of pixels, kGramP at a time: their
 * raw floats are copied into shared memory asynchronously one stage ahead
 * (two buffers), then centred to double (0 where masked) into a third, and
 * every thread accumulates an 8 x 8 block of X^T X: with G = ceil(B / 8),
 * thread (I, J), I >= J, owns rows I + G r and columns J + G c (r, c < 8),
 * which covers each entry of the lower triangle or its transpose
 * (interleaved rows: the threads of a warp read neighbouring words). The
 * CTA writes its sums into its own B x B slice of `partial` (lower
 * triangle); gram_reduce_kernel adds the slices in CTA order, so the result
 * does not depend on timing. Used for B <= 8 kGramG (144) bands; larger
 * cubes keep centre + DGEMM. */
#ifndef HYPROF_PCA_FN
#define HYPROF_PCA_FN __device__ __forceinline__
#define HYPROF_PCA_SYNC() __syncthreads()
#define HYPROF_PCA_COPY4(dst, src) __pipeline_memcpy_async((dst), (src), 4)
#define HYPROF_PCA_COMMIT() __pipeline_commit()
#define HYPROF_PCA_WAIT() __pipeline_wait_prior(0)
#endif
const int kGramG = 18, kGramThreads = 192, kGramP = 32;

/* Shared memory of gram_body: raw[2][8 G][kGramP] floats, msk[2][kGramP]
 * bytes (padded to 8 bytes), cen[kGramP][8 G + 1] doubles. */
inline size_t gram_smem_bytes(int bands)
{
    const size_t G = (size_t)(bands + 7) / 8;
    return 2 * 8 * G * kGramP * sizeof(float) + 2 * kGramP + kGramP * (8 * G + 1) * sizeof(double);
}

HYPROF_PCA_FN void gram_body(int tid, int cta, int ncta, unsigned char *smem, const float *x,
                             size_t n, int bands, const uint8_t *mask, const double *mean,
                             double *partial)
{
    const int G = (bands + 7) / 8, ld = 8 * G + 1, pairs = G * (G + 1) / 2;
    float *raw = reinterpret_cast<float *>(smem);                 /* [2][8G][kGramP] */
    unsigned char *msk = smem + 2 * 8 * G * kGramP * sizeof(float); /* [2][kGramP] */
    double *cen = reinterpret_cast<double *>(msk + 2 * kGramP);   /* [kGramP][ld] */
    int I = 0, J = tid;
    while (J > I) { /* tid -> (I, J): row I holds pairs J = 0..I */
        J -= I + 1;
        I++;
    }
    const bool active = tid < pairs;
    double acc[8][8];
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c)
            acc[r][c] = 0.0;
    const size_t per = ((n + (size_t)ncta - 1) / (size_t)ncta + kGramP - 1) / kGramP * kGramP;
    const size_t p_begin = (size_t)cta * per, p_end = p_begin + per < n ? p_begin + per : n;

    /* Stage of pixels p0 .. p0 + kGramP - 1 into raw/msk buffer `buf`. */
    auto issue = [&](size_t p0, int buf) {
        float *rb = raw + (size_t)buf * 8 * G * kGramP;
        for (int e = tid; e < kGramP * bands; e += kGramThreads) {
            const int q = e % kGramP, b = e / kGramP;
            if (p0 + (size_t)q < p_end)
                HYPROF_PCA_COPY4(rb + b * kGramP + q, x + p0 + (size_t)q + (size_t)b * n);
        }
        HYPROF_PCA_COMMIT();
        if (tid < kGramP) /* a plain load; stored when the next stage is converted */
            msk[buf * kGramP + tid] =
                p0 + (size_t)tid < p_end && (!mask || mask[p0 + (size_t)tid]) ? 1 : 0;
    };

    int buf = 0;
    if (p_begin < p_end)
        issue(p_begin, 0);
    for (size_t p0 = p_begin; p0 < p_end; p0 += kGramP, buf ^= 1) {
        HYPROF_PCA_WAIT();
        HYPROF_PCA_SYNC(); /* stage p0 is in raw[buf]; the last compute is done */
        const float *rb = raw + (size_t)buf * 8 * G * kGramP;
        for (int e = tid; e < kGramP * 8 * G; e += kGramThreads) {
            const int q = e % kGramP, b = e / kGramP;
            double v = 0.0;
            if (b < bands && msk[buf * kGramP + q])
                v = (double)rb[b * kGramP + q] - mean[b];
            cen[q * ld + b] = v;
        }
        HYPROF_PCA_SYNC(); /* cen is ready; raw[buf] and msk[buf] are free */
        if (p0 + kGramP < p_end)
            issue(p0 + kGramP, buf ^ 1);
        if (active)
            for (int q = 0; q < kGramP; ++q) {
                const double *row = cen + q * ld;
                double a[8], bv[8];
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    a[r] = row[I + G * r];
                    bv[r] = row[J + G * r];
                }
#pragma unroll
                for (int r = 0; r < 8; ++r)
#pragma unroll
                    for (int c = 0; c < 8; ++c)
                        acc[r][c] = fma(a[r], bv[c], acc[r][c]);
            }
    }
    if (!active)
        return;
    double *out = partial + (size_t)cta * bands * bands;
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            const int i = I + G * r, j = J + G * c;
            if (i < bands && j < bands)
                out[(i > j ? i : j) + (size_t)(i > j ? j : i) * bands] = acc[r][c];
        }
}

/* Dynamic shared memory: gram_smem_bytes(bands). */
__global__ void __launch_bounds__(kGramThreads, 2)
    gram_kernel(const float *__restrict__ x, size_t n, int bands,
                const uint8_t *__restrict__ mask, const double *__restrict__ mean,
                double *__restrict__ partial)
{
    extern __shared__ double gram_smem[];
    gram_body((int)threadIdx.x, (int)blockIdx.x, (int)gridDim.x,
              reinterpret_cast<unsigned char *>(gram_smem), x, n, bands, mask, mean, partial);
}

/* The same covariance numerator on the FP64 tensor cores (the default):
 * the stages of pixels are copied and centred as in gram_body, but into
 * cen[b][q] (band-major, a row stride of kMmaLdq = kGramP + 4 doubles: the
 * fragment loads below hit every bank pair exactly twice, the minimum for 32
 * doubles), and each warp owns a 24 x 24 block (3 x 3 tiles of 8 x 8) of the
 * lower triangle of X^T X, accumulated with mma.sync m8n8k4 f64 (A = X^T rows
 * of its tiles, B = X columns of its tiles; both fragments are
 * cen[tile row + lane / 4][k + lane % 4]). Bands are padded to a multiple of
 * 24 with zero rows. Per pixel the products are the same doubles; only the
 * order of the additions differs from gram_body (rounding-level). */
const int kMmaLdq = kGramP + 4;

__host__ __device__ inline int mma_rows(int bands) { return 24 * ((bands + 23) / 24); }
inline int mma_warps(int bands)
{
    const int wt = mma_rows(bands) / 24;
    return wt * (wt + 1) / 2;
}
inline size_t gram_mma_smem_bytes(int bands)
{
    return 2 * (size_t)bands * kGramP * sizeof(float) + 2 * kGramP +
           2 * (size_t)mma_rows(bands) * kMmaLdq * sizeof(double);
}

__device__ __forceinline__ void dmma_8x8x4(double (&c)[2], double a, double b)
{
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                 : "+d"(c[0]), "+d"(c[1])
                 : "d"(a), "d"(b));
}

/* Dynamic shared memory: gram_mma_smem_bytes(bands); 32 mma_warps(bands) threads. */
__global__ void __launch_bounds__(32 * 21, 1)
    gram_mma_kernel(const float *__restrict__ x, size_t n, int bands,
                    const uint8_t *__restrict__ mask, const double *__restrict__ mean,
                    double *__restrict__ partial)
{
    extern __shared__ double gram_smem[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(gram_smem);
    const int tid = (int)threadIdx.x, nthreads = (int)blockDim.x, cta = (int)blockIdx.x;
    const int ncta = (int)gridDim.x, rows = mma_rows(bands);
    float *raw = reinterpret_cast<float *>(smem);                     /* [2][bands][kGramP] */
    unsigned char *msk = smem + 2 * (size_t)bands * kGramP * sizeof(float); /* [2][kGramP] */
    double *cen = reinterpret_cast<double *>(msk + 2 * kGramP); /* [2][rows][kMmaLdq] */
    const int warp = tid >> 5, lane = tid & 31;
    int I = 0, J = warp;
    while (J > I) { /* warp -> block (I, J), I >= J */
        J -= I + 1;
        I++;
    }
    double acc[3][3][2];
#pragma unroll
    for (int a = 0; a < 3; ++a)
#pragma unroll
        for (int b = 0; b < 3; ++b)
            acc[a][b][0] = acc[a][b][1] = 0.0;
    const size_t per = ((n + (size_t)ncta - 1) / (size_t)ncta + kGramP - 1) / kGramP * kGramP;
    const size_t p_begin = (size_t)cta * per, p_end = p_begin + per < n ? p_begin + per : n;

    auto issue = [&](size_t p0, int buf) {
        float *rb = raw + (size_t)buf * bands * kGramP;
        for (int e = tid; e < kGramP * bands; e += nthreads) {
            const int q = e % kGramP, b = e / kGramP;
            if (p0 + (size_t)q < p_end)
                HYPROF_PCA_COPY4(rb + b * kGramP + q, x + p0 + (size_t)q + (size_t)b * n);
        }
        HYPROF_PCA_COMMIT();
        if (tid < kGramP)
            msk[buf * kGramP + tid] =
                p0 + (size_t)tid < p_end && (!mask || mask[p0 + (size_t)tid]) ? 1 : 0;
    };

    const int ra = (I * 24 + (lane >> 2)) * kMmaLdq + (lane & 3);
    const int rbo = (J * 24 + (lane >> 2)) * kMmaLdq + (lane & 3);
    const size_t plane = (size_t)rows * kMmaLdq;
    auto products = [&](const double *c) { /* this warp's block over one stage */
#pragma unroll 2
        for (int k0 = 0; k0 < kGramP; k0 += 4) {
            double fa[3], fb[3];
#pragma unroll
            for (int t = 0; t < 3; ++t) {
                fa[t] = c[ra + t * 8 * kMmaLdq + k0];
                fb[t] = c[rbo + t * 8 * kMmaLdq + k0];
            }
#pragma unroll
            for (int a = 0; a < 3; ++a)
#pragma unroll
                for (int b = 0; b < 3; ++b)
                    dmma_8x8x4(acc[a][b], fa[a], fb[b]);
        }
    };
    /* Two cen planes, one barrier per stage: stage n is centred into plane
     * n & 1 while the warps that are done multiply stage n - 1 (plane
     * (n - 1) & 1, complete at this stage's barrier). */
    int stage = 0;
    if (p_begin < p_end)
        issue(p_begin, 0);
    for (size_t p0 = p_begin; p0 < p_end; p0 += kGramP, ++stage) {
        const int buf = stage & 1;
        HYPROF_PCA_WAIT();
        HYPROF_PCA_SYNC(); /* raw[buf] is in; stage n - 1's centring and n - 2's products are done */
        const float *rw = raw + (size_t)buf * bands * kGramP;
        double *cb = cen + (size_t)buf * plane;
        for (int e = tid; e < kGramP * rows; e += nthreads) {
            const int q = e % kGramP, b = e / kGramP;
            double v = 0.0;
            if (b < bands && msk[buf * kGramP + q])
                v = (double)rw[b * kGramP + q] - mean[b];
            cb[b * kMmaLdq + q] = v;
        }
        if (p0 + kGramP < p_end)
            issue(p0 + kGramP, buf ^ 1); /* raw[buf ^ 1] was centred before the barrier */
        if (stage > 0)
            products(cen + (size_t)(buf ^ 1) * plane);
    }
    HYPROF_PCA_SYNC();
    if (stage > 0)
        products(cen + (size_t)((stage - 1) & 1) * plane);
    double *out = partial + (size_t)cta * bands * bands;
#pragma unroll
    for (int a = 0; a < 3; ++a)
#pragma unroll
        for (int b = 0; b < 3; ++b)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = I * 24 + a * 8 + (lane >> 2), j = J * 24 + b * 8 + (lane & 3) * 2 + h;
                if (i < bands && j < bands && i >= j) /* I > J: always i > j */
                    out[i + (size_t)j * bands] = acc[a][b][h];
            }
}

/* c (B x B, both triangles) += the sum of the ncta slices' lower triangles. */
__global__ void gram_reduce_kernel(const double *__restrict__ partial, int ncta, int bands,
                                   double *__restrict__ c)
{
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, bb = (size_t)bands * bands;
    if (idx >= bb)
        return;
    const int i = (int)(idx % bands), j = (int)(idx / bands);
    if (i < j)
        return;
    double t = 0.0;
    for (int k = 0; k < ncta; ++k)
        t += partial[(size_t)k * bb + idx];
    c[idx] += t;
    if (i != j)
        c[j + (size_t)i * bands] += t;
}

/* ---- the fused covariance (the default for a resident cube of up to
 * kTcMaxBands bands) ----
 *
 * One pass over the cube gives both the band sums and the Gram matrix, about
 * a shift K (a per-band estimate of the mean from a sample of pixels,
 * shift_kernel): G = sum (x - K)(x - K)^T and s = sum (x - K) over the valid
 * pixels, then mean = K + s / n and the covariance numerator G - s s^T / n.
 * With K within a fraction of a standard deviation of the mean, the
 * correction s s^T / n is a small fraction of G: no cancellation, the
 * accuracy of the centred two-pass formula, one pass fewer (the band sums
 * were 0.2 ms of kernels per call besides the Gram, Houston size, H200).
 *
 * Warp-specialised: kTcProducers warps (warps 0-3, one per SM sub-partition)
 * load stages of kTcP pixels (a lane per pixel, coalesced), convert them to
 * double minus K (0 where masked) into one of kTcBufs shared planes
 * cen[band][pixel]; the consumer warps multiply each full plane while the
 * producers fill the next (named barriers FULL / FREE per plane), so the
 * conversion no longer stalls the tensor pipe between barriers as in
 * gram_mma_kernel. The lower triangle is cut into 16 x 8 tiles (tile (r, c)
 * needed when 16 r + 15 >= 8 c), row by row into groups of up to kTcMaxCols
 * tiles, one group per consumer warp, the groups spread over the four
 * sub-partitions by their tile counts (TcPlan). Each tile is a chain of
 * mma.sync m16n8k8 f64 on sm_90 (fragments: g = lane / 4, t = lane % 4;
 * A rows g, g + 8 and pixels t, t + 4; B column g, pixels t, t + 4; C rows
 * g, g + 8, columns 2 t, 2 t + 1), or the same fragments as four m8n8k4
 * (sm_80, or $HYPROF_PCA_GRAM=tc4 to compare). The warp holding a row's
 * first group also adds its A fragments: the band sums s. Each CTA writes
 * its G (lower triangle) and s into its own slice; gram_finish_kernel adds
 * the slices in CTA order, so the result does not depend on timing. */
const int kTcP = 32;              /* pixels per stage: a producer lane each */
const int kTcLd = kTcP + 8;       /* row stride of cen (doubles): conflict-free 16-byte fragment loads */
const int kTcBufs = 3;            /* planes: the producers run up to two stages ahead */
const int kTcProducers = 3;       /* warps */
const int kTcMaxCols = 7;         /* 16 x 8 tiles per consumer warp */
/* Consumer warps: 17 for 144 bands. Registers are per sub-partition (16K):
 * 20 warps, 5 on each, leave 96 a thread (21 would leave 80: spills). */
const int kTcMaxWarps = 17;
const int kTcMaxBands = 144;      /* ceil(144 / 4) = 36 values per producer lane and stage */
const int kTcPerLane = (kTcMaxBands + kTcProducers - 1) / kTcProducers;

/* Consumer warps of either Gram kernel's plan (gram_i8_kernel's 28). */
const int kPlanMaxWarps = 28;

struct TcPlan {
    int warps; /* consumer warps (some may own no tile: padding for the balance) */
    int rows;  /* rows of a cen plane (a multiple of 16; zero beyond the bands) */
    int conv;  /* gram_i8_kernel: the warps that convert */
    unsigned group[kPlanMaxWarps]; /* consumer warp w: r | c0 << 8 | nc << 16 (| rank << 24) */
};

/* Producers with a ring of raw stages (the default): kTcRing stages of floats
 * copied with cp.async, kTcRing - 1 of them in flight. */
const int kTcRing = 4;
/* 16-byte copies: floats a band and stage in the ring (kTcP pixels from an
 * offset of up to 3), and the producers' own named barrier. */
const int kTcRaw = kTcP + 4;
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

/* c (16 x 8) += a (16 x 8) b (8 x 8) in the m16n8k8 f64 fragments. */
template <bool kSplit>
__device__ __forceinline__ void dmma_16x8x8(double (&c)[4], const double (&a)[4], double b0,
                                            double b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (!kSplit) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
                     : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b0), "d"(b1));
        return;
    }
#endif
    /* Rows g (c0, c1) and g + 8 (c2, c3); pixels t (a0, a1, b0) then t + 4. */
    double lo[2] = {c[0], c[1]}, hi[2] = {c[2], c[3]};
    dmma_8x8x4(lo, a[0], b0);
    dmma_8x8x4(hi, a[1], b0);
    dmma_8x8x4(lo, a[2], b1);
    dmma_8x8x4(hi, a[3], b1);
    c[0] = lo[0];
    c[1] = lo[1];
    c[2] = hi[0];
    c[3] = hi[1];
}

/* The integer shift K of a band (|K| >= 2^22: no value qualifies anyway). */
__device__ __forceinline__ int i8_shift(double k)
{
    return fabs(k) < 4194304.0 ? (int)rint(k) : 0;
}

const int kI8Bias = 0x4B400000; /* the bits of 1.5 2^23 */

/* x - K as an integer v (0 when !valid); bad |= a valid x that is not an
 * integer of magnitude below 2^22 within [-32768, 32767] of K (the integer
 * covariance's condition). kbias is K + kI8Bias: x + 1.5 2^23 rounds x to an
 * integer held in the low mantissa bits (|x| < 2^22), exactly x if x is one. */
__device__ __forceinline__ int i8_value(float x, int kbias, bool valid, unsigned &bad)
{
    const float t = __fadd_rn(x, 12582912.0f);
    const int v = __float_as_int(t) - kbias;
    const bool ok = fabsf(x) < 4194304.0f && __fsub_rn(t, 12582912.0f) == x &&
                    (unsigned)(v + 32768) < 65536u;
    bad |= (unsigned)(valid && !ok);
    return valid ? v : 0;
}

/* Per-band shift K: the mean of the valid pixels among up to kShiftSample
 * evenly spaced ones (0 when none is valid: then the formula is the raw
 * moments', still exact in exact arithmetic). One block per band. With
 * `nonint` (device-mapped host memory, zeroed by the host), any sampled
 * value that would fail gram_i8_kernel's check (i8_value's) sets
 * *nonint: then the host runs the FP64 kernel at once instead of the
 * integer pass and its fallback (a float-valued cube paid both: about 0.8 ms against 0.57 for
 * Houston on an H100). */
const int kShiftSample = 1024; /* 4 a thread, loaded together (24 us a call with 4096 in a dependent loop) */

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
 * of a step issued before its multiplications, no per-tile predicates (the
 * generic loop of 13:11 tested c < nc before each tile and kept its
 * fragment offsets in local memory: ptxas, 96 registers). */
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

/* Dynamic shared memory: gram_tc_smem_bytes(bands, plan, kRing); 32
 * (kTcProducers + plan.warps) threads; bands <= kTcMaxBands. partial: ncta
 * slices of B x B (lower triangle written), psum: ncta slices of B.
 * tc_consume with a compile-time tile count, producers with 16-byte copies:
 * 449 us for Houston on an H100 (one launch, Nsight Compute, 15:49 round;
 * producers alone 310, consumers alone 360; main's kernel 652 us). With
 * kRing false ($HYPROF_PCA_GRAM=tcreg, or when the ring does not fit) the
 * producers load the next stage into registers. */
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
        /* 16-byte copies: each band's stage is the aligned run of kTcRaw
         * floats that holds its kTcP pixels (at offset o_b = (p_begin + b n)
         * mod 4: n may be odd), kTcRaw / 4 chunks a band spread over the
         * producer threads; lane = 4 pixels (4 q .. 4 q + 3) of bands bo,
         * bo + 12, ... (bo = lane / 8 + 4 warp), written as two 16-byte
         * stores. A lane converts what others copied: a producer barrier
         * (id kTcBarProd) between the copies' arrival and the conversion,
         * before the ring slot of stage s - 1 is refilled. The FULL / FREE
         * hand-over is unchanged. */
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
            HYPROF_PCA_COMMIT(); /* empty past the end: the group count stays uniform */
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

/* ---- the exact covariance of an integer-valued cube (the default) ----
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
 * s = sum v are exact, and the
 * covariance (G - s s^T / n) / (n - 1) has only the rounding of its last
 * double operations (the FP64 kernel's sums round at every step). The
 * integer multiply-adds cost a fraction of the FP64 pipe's and the bytes
 * staged in shared memory a quarter of the doubles (9 KB a stage against
 * 36 KB): 243-246 us against gram_tc_kernel's 542-546 for Houston on an
 * H100. Its floor, the cube's DRAM read, is about 130 us; the stage loop's
 * latency keeps it at about half of that bandwidth (below).
 *
 * It applies when every valid value is an integer of magnitude below 2^22
 * within 32767 of its band's K; the converting threads check each value on the way
 * (a float add and subtract of 1.5 2^23 round to the integer and back) and
 * raise *bad otherwise, which the finish kernel passes to the host
 * (HostStage): then the caller runs gram_tc_kernel instead, so any cube
 * gets the same covariance, to rounding, either way.
 *
 * Layout: every warp converts and multiplies (with three producer warps,
 * as gram_tc_kernel, their instruction latency bound the kernel at 576 us
 * for Houston on an H100, slower than the FP64 kernel's 544; converters
 * alone, 311-330 us). A ring of kI8Ring raw stages of kTcP pixels arrives
 * by cp.async, queued by the warps with 2 tiles or fewer (the converters);
 * each stage is converted to bytes in one of two planes [h rows | l
 * rows][kI8Ld] (rows: the bands padded to a multiple of 16 with zeros), an
 * item (a band's 4 pixels) a thread and the rest by the converters, while
 * the other plane is multiplied: one barrier a stage. A warp owns a group of up to
 * kI8MaxCols 16 x 8 tiles of one tile row of the lower triangle, each with
 * three int32 accumulators (hh, the cross sum hl + lh, ll: 12 registers).
 * The pixels of a stage are the mma's k: their order does not matter, so
 * they sit in the order of the fragments (pixel positions 8 t .. 8 t + 7
 * hold pixels 4 t .. 4 t + 3 and 16 + 4 t .. 16 + 4 t + 3): a lane's A or B
 * fragment of a row is one 8-byte load, and the 32-byte rows put a warp's
 * loads on distinct banks. An int32 accumulator takes at most 65280 a pixel
 * (the cross sum): kI8MaxPx pixels a CTA at most, so larger cubes get more
 * CTAs. Tried and slower (H100, Houston, same runs): two stages a barrier,
 * their items side by side (ring of 6), 270-274 us against 243-246; only
 * the warps without tiles queueing the copies (14 chunks a lane, no copy
 * descriptors beside the accumulators, fewer spills), 298-305 us against
 * 245 (covariance window 0.326-0.329 ms against 0.270-0.271). No faster:
 * the converters' ring offsets formed when each copy is queued (16 c)
 * instead of kept in registers (stack 56 bytes against 72), 245-248 us
 * either way (2026-11-27 08:24 round). Nsight
 * Compute on this kernel: 0.56 instructions issued a cycle per scheduler,
 * 1.6 of its 7 warps eligible, DRAM 49 % of peak: latency-bound. */
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

/* A warp's part of the CTA's loop: NC tiles (r, c0 ..). Every thread
 * converts item tid of each stage; the warps with NC <= 2 (converter cr of
 * nconv) also queue the copies and convert the items past kI8Threads (the
 * conversion's latency, not its instructions, set the stage time when
 * converters alone took every item: 311-330 us for Houston against 243-246
 * with every thread converting one, H100). Iteration s: (converters) wait
 * for their copies of stage s + 1; one barrier (stage s + 1 landed, plane
 * (s + 1) & 1 and ring slot s free); (converters) queue stage s +
 * kI8Ring into slot s; convert stage s + 1 into plane (s + 1) & 1;
 * multiply plane s & 1. Shared memory: src (stage 0's 16-byte aligned run
 * starts), K, off (b kTcRaw + the run's offset), S ([bands][8] item sums),
 * pl (two planes), raw (the ring). */
template <int NC>
__device__ __forceinline__ void i8_loop(const float *__restrict__ x, size_t n, int bands,
                                        const uint8_t *__restrict__ mask, size_t p_begin,
                                        size_t p_end, int nst, int nconv, const long long *src,
                                        const int *K, const int *off, int *S, unsigned char *pl,
                                        float *raw, int r, int c0, int cr, long long *acc,
                                        unsigned *bad)
{
    constexpr bool kConv = NC <= 2, kMma = NC > 0;
    constexpr int NA = NC > 0 ? NC : 1, kCh = kTcRaw / 4;
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
    /* the items, fixed for the call: tid, and for converters kI8Threads +
     * 32 cr + lane (none when past the stage's 8 bands items) */
    const int i0 = tid, i1 = kConv ? kI8Threads + cr * 32 + lane : 8 * bands;
    const bool has0 = i0 < 8 * bands, has1 = i1 < 8 * bands;
    const int b0 = has0 ? i0 >> 3 : 0, b1 = has1 ? i1 >> 3 : 0;
    const int ro0 = off[b0] + 4 * (i0 & 7), kb0 = kI8Bias + K[b0];
    const int wo0 = b0 * kI8Ld + ((i0 & 7) < 4 ? 8 * (i0 & 7) : 8 * ((i0 & 7) - 4) + 4);
    const int ro1 = off[b1] + 4 * (i1 & 7), kb1 = kI8Bias + K[b1];
    const int wo1 = b1 * kI8Ld + ((i1 & 7) < 4 ? 8 * (i1 & 7) : 8 * ((i1 & 7) - 4) + 4);
    int sum0 = 0, sum1 = 0;
    /* a converter lane's chunks, fixed too: stage 0's element offset (-1:
     * none) and the byte offset in a ring slot */
    long long ge[kConv ? kI8Chunks : 1];
    unsigned so[kConv ? kI8Chunks : 1];
    const long long total = (long long)n * bands, last = src[bands - 1] + kTcRaw;
    const unsigned rawb = (unsigned)__cvta_generic_to_shared(raw), slot = bands * kTcRaw * 4;
    if constexpr (kConv) {
#pragma unroll
        for (int m = 0; m < kI8Chunks; ++m) {
            const int c = cr * 32 + lane + m * 32 * nconv, b = c / kCh, k = c - kCh * b;
            ge[m] = c < bands * kCh ? src[b] + 4 * k : -1;
            so[m] = (unsigned)(b * kTcRaw + 4 * k) * 4u;
        }
    }
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
            HYPROF_PCA_COMMIT(); /* empty past the end: the group count stays uniform */
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
    __syncthreads();
    if (nst > 0)
        convert(0);
#pragma unroll 1
    for (int s = 0; s < nst; ++s) {
        if (kConv)
            __pipeline_wait_prior(kI8Ring - 2); /* this thread's copies of stage s + 1 */
        __syncthreads();
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
    if (__any_sync(0xffffffffu, nok) && lane == 0)
        *bad = 1u;
    if (has0)
        S[i0] = sum0; /* each item's sum: |S| <= 32768 kI8MaxPx / 8 = 2^27 */
    if (kConv && has1)
        S[i1] = sum1;
    if constexpr (kMma) /* G's entries, added to the CTAs' total in 64 bits */
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

/* a (both triangles) = (G - s s^T / n) / (n - 1) and mean = K + s / n from
 * the ncta slices of gram_tc_kernel (T double) or the one int64 slice that
 * gram_i8_kernel's CTAs added up (T long long, ncta 1: exact; K its rounded
 * shift, and block 0 copies *bad after the matrix in host): kFinX entries a
 * block, each summed by kFinY threads over
 * the slices k = y, y + kFinY, ... (independent loads in flight; one thread
 * an entry took 65-79 us a call for 132 slices of 144 x 144 on an H100),
 * then over y in order: a fixed order, the same for s_i wherever band i
 * appears. */
const int kFinX = 32, kFinY = 8;

template <typename T>
__global__ void __launch_bounds__(kFinX * kFinY)
    gram_finish_kernel(const T *__restrict__ partial, const T *__restrict__ psum, int ncta,
                       int bands, const double *__restrict__ shift, double n,
                       const unsigned *__restrict__ bad, double *__restrict__ a,
                       double *__restrict__ mean, double *__restrict__ host)
{
    __shared__ T sg[kFinY][kFinX], ssi[kFinY][kFinX], ssj[kFinY][kFinX];
    const int tx = (int)threadIdx.x % kFinX, ty = (int)threadIdx.x / kFinX;
    const size_t idx = (size_t)blockIdx.x * kFinX + tx, bb = (size_t)bands * bands;
    const int i = idx < bb ? (int)(idx % bands) : 0, j = idx < bb ? (int)(idx / bands) : 0;
    const bool lower = idx < bb && i >= j;
    if (bad && host && blockIdx.x == 0 && threadIdx.x == 0)
        host[bands + bb] = *bad ? 1.0 : 0.0;
    T g = 0, si = 0, sj = 0;
    if (lower) {
#pragma unroll 4
        for (int k = ty; k < ncta; k += kFinY) {
            g += partial[(size_t)k * bb + idx];
            si += psum[(size_t)k * bands + i];
            sj += psum[(size_t)k * bands + j];
        }
    }
    sg[ty][tx] = g;
    ssi[ty][tx] = si;
    ssj[ty][tx] = sj;
    __syncthreads();
    if (ty != 0 || !lower)
        return;
    T Gt = 0, St = 0, Su = 0;
    for (int y = 0; y < kFinY; ++y) {
        Gt += sg[y][tx];
        St += ssi[y][tx];
        Su += ssj[y][tx];
    }
    const double G = (double)Gt, Si = (double)St, Sj = (double)Su;
    const double c = (G - Si * (Sj / n)) / (n - 1.0);
    a[idx] = c;
    a[j + (size_t)i * bands] = c;
    double K = 0.0;
    if constexpr (std::is_same<T, double>::value)
        K = i == j ? shift[i] : 0.0;
    else
        K = i == j ? (double)i8_shift(shift[i]) : 0.0;
    const double mu = i == j ? K + Si / n : 0.0;
    if (i == j)
        mean[i] = mu;
    if (host) { /* mapped host memory (HostStage): the mean, then the lower triangle */
        host[bands + idx] = c;
        if (i == j)
            host[i] = mu;
    }
}

/* Y = (X - mean) V of a resident cube on the FP64 tensor cores (the
 * default): a warp per 16 pixels, their centred values loaded straight from
 * the cube into the A fragments of m16n8k8 (pixels g and g + 8, bands t and
 * t + 4 of each step of 8 bands: every 32-byte sector read is used whole),
 * V (8 components, zero-padded, and the bands padded to a multiple of 8 with
 * zeros) from shared memory as the B fragments. Per value: a load, a
 * conversion and a subtraction; the 8 multiply-adds are one eighth of an
 * mma (project_kernel does them on the CUDA cores, where the FP64 pipe and
 * the shared loads of V bound it at 2 TB/s: 193 us for Houston on an H200).
 * The sums run in the tensor cores' order: rounding-level differences from
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
 * are issued together. Used with 2 and 2 by the fit-transform where
 * project_bulk_kernel does not apply (before sm_90; $HYPROF_PCA_PROJECT=tc)
 * (168 us for Houston on an H100, 15:49 round, 70 % of the DRAM bandwidth:
 * the warps wait on their loads), 1 and 3 by the streamed apply (173 us); 4
 * tiles (64 consecutive pixels, but 120 registers: half the warps) took 196
 * us (13:11), 1 and 6 177 us (15:49). */
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
 * its empty barrier. Keeps up to depth x 8 x (kPix + 4) x 4 bytes in
 * flight per block with one thread issuing, where the register loads of
 * project_tc_kernel keep 16 floats a thread. Same sums in the same order:
 * the results are project_tc_kernel's, bit for bit (EADP bench checksum
 * unchanged). Blocks whose last copy would pass the cube's end (the last
 * one or two) are loaded from global memory as project_tc_kernel does.
 * Measured (H100 80GB HBM3, 2026-11-27 04:30 and 04:37 rounds, Nsight
 * Compute kernel time of one EADP call for Houston, main's
 * project_tc_kernel in the same runs): 159.5-161.9 us against 166.8-170.1
 * (74.5 % of the DRAM bandwidth against 70.4-71.2); projection event
 * window 0.178-0.185 ms against 0.186-0.195. With the consumers skipping
 * all their work it still took 160.6 us: the copies bound it, not the
 * tensor-core side. Tried in the same rounds, no faster: 4 blocks a SM of
 * 4 stages 159.7 us, 12 stages 161.4, 2 or 4 producer warps (stages dealt
 * round-robin) 161.1-161.2; slower: 4 tiles a warp (512-pixel blocks, 2 KB
 * runs) 170.9-174.3, one block a SM of 16 stages (0.236 ms of event
 * window). Nor the mean and V uploaded with cudaMemcpyAsync ahead of the
 * begin mark: projection window 0.185 ms against 0.184 synchronous. */
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
            mbar_init(empty + i, kProjTcWarps);
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
            __syncwarp();
            if (lane == 0)
                mbar_arrive(empty + slot);
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

/* sums += masked column sums of src (m x bands, leading dimension ld). */
hyprof_status_t band_sums(hyprof_ctx_t *ctx, const char *op, cudaStream_t st, const float *src,
                          size_t ld, const uint8_t *mask, size_t m, size_t bands,
                          double *partial, double *sums)
{
    size_t nb = div_up(m, (size_t)kThreads * 8);
    if (nb > (size_t)kSumMaxBlocks)
        nb = kSumMaxBlocks;
    if (nb == 0)
        nb = 1;
    dim3 grid((unsigned)nb, grid_y(bands));
    band_sum_kernel<<<grid, kThreads, 0, st>>>(src, ld, mask, m, bands, partial);
    HYPROF_CUDA_CHECK_LAUNCH("band_sum_kernel");
    band_sum_accumulate<<<(unsigned)div_up(bands, kThreads), kThreads, 0, st>>>(
        partial, (unsigned)nb, bands, sums);
    HYPROF_CUDA_CHECK_LAUNCH("band_sum_accumulate");
    return HYPROF_OK;
}

hyprof_status_t centre(hyprof_ctx_t *ctx, const char *op, cudaStream_t st, const float *src,
                       size_t ld, const uint8_t *mask, size_t m, size_t bands,
                       const double *mean, double *dst)
{
    dim3 grid((unsigned)div_up(m, kThreads), grid_y(bands));
    centre_kernel<<<grid, kThreads, 0, st>>>(src, ld, mask, m, bands, mean, dst);
    HYPROF_CUDA_CHECK_LAUNCH("centre_kernel");
    return HYPROF_OK;
}

} /* namespace */

/* C += A^T A for a tall mi x B block A (lda mi). cuBLAS runs syrk and gemm
 * of this shape (B ~ 100-200, mi ~ 1e5-1e6) on a handful of CTAs: measured on
 * an H100, 7 ms at about 100 GB/s for a 1905x349x144 cube. So the rows are cut
 * into up to kGramSlices slices whose Gram matrices one batched gemm computes
 * side by side, and a gemv with a vector of ones adds them into C (a split-K
 * by hand); leftover rows go through one plain gemm. Fixed order: the result
 * does not depend on timing. */
const size_t kGramSlices = 64, kGramRows = 2048;

static hyprof_status_t gram_accumulate(hyprof_ctx_t *ctx, const char *op, cublasHandle_t h,
                                       const double *A, size_t mi, size_t B, double *C,
                                       double *gram, const double *ones)
{
    const double one = 1.0, zero = 0.0;
    size_t S = mi / kGramRows < kGramSlices ? mi / kGramRows : kGramSlices;
    size_t r = S >= 2 ? mi / S : 0, done = S >= 2 ? S * r : 0;
    if (S >= 2) {
        HYPROF_CUBLAS_CHECK(cublasDgemmStridedBatched(
            h, CUBLAS_OP_T, CUBLAS_OP_N, (int)B, (int)B, (int)r, &one, A, (int)mi,
            (long long)r, A, (int)mi, (long long)r, &zero, gram, (int)B, (long long)(B * B),
            (int)S));
        HYPROF_CUBLAS_CHECK(cublasDgemv(h, CUBLAS_OP_N, (int)(B * B), (int)S, &one, gram,
                                        (int)(B * B), ones, 1, &one, C, 1));
    }
    if (done < mi)
        HYPROF_CUBLAS_CHECK(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)B, (int)B,
                                        (int)(mi - done), &one, A + done, (int)mi, A + done,
                                        (int)mi, &one, C, (int)B));
    return HYPROF_OK;
}

/* Device times of the fit's stages (debug log): each interval is recorded on
 * stream 0 at points where the host has drained both pipeline streams, so
 * it spans the device work of that stage on both. "upload" is pass 1: the
 * upload of a resident cube with the band sums overlapped. */
enum { kPcaUpload, kPcaCovariance, kPcaEigh, kPcaProjection, kPcaDownload, kPcaStages };
typedef StageClock<kPcaStages> PcaClock;

static void log_stages(hyprof_ctx_t *ctx, PcaClock &clock)
{
    if (clock.collect(ctx, "pca") != HYPROF_OK) {
        ctx->error[0] = '\0'; /* only the figures are lost */
        return;
    }
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "pca: cuda device ms: upload %.3f, covariance %.3f, eigh %.3f, projection %.3f, "
                "download %.3f",
                clock.ms(kPcaUpload), clock.ms(kPcaCovariance), clock.ms(kPcaEigh),
                clock.ms(kPcaProjection), clock.ms(kPcaDownload));
}

/* Page-locked, device-mapped host memory for the mean and the covariance on
 * their way to the host eigh (B + B x B doubles, then gram_i8_kernel's
 * flag), kept for the process
 * (allocating it costs host milliseconds, freeing it synchronises the
 * device). The copies into the caller's pageable arrays took 53-58 us of
 * the eigh stage's event time (H100, Houston size: the driver's staging),
 * pinned copies 16-20 us; gram_finish_kernel writes into it directly
 * instead, so the stage holds no device work. One fit holds it at a time; a
 * concurrent fit copies to pageable memory as before. */
class HostStage {
  public:
    HostStage() = default;
    HostStage(const HostStage &) = delete;
    HostStage &operator=(const HostStage &) = delete;
    ~HostStage()
    {
        if (held_) {
            std::lock_guard<std::mutex> lock(pool().m);
            pool().busy = false;
        }
    }
    /* count doubles, or NULL (busy, or no page-locked memory) */
    double *take(size_t count)
    {
        Pool &p = pool();
        std::lock_guard<std::mutex> lock(p.m);
        if (p.busy)
            return NULL;
        if (p.count < count) {
            void *q = NULL;
            if (p.buf)
                (void)cudaFreeHost(p.buf);
            p.buf = NULL;
            p.count = 0;
            if (cudaHostAlloc(&q, count * sizeof(double),
                              cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
                (void)cudaGetLastError();
                return NULL;
            }
            p.buf = static_cast<double *>(q);
            p.count = count;
        }
        p.busy = held_ = true;
        return p.buf;
    }

  private:
    struct Pool {
        std::mutex m;
        double *buf = NULL; /* never freed: the driver may be gone at exit */
        size_t count = 0;
        bool busy = false;
    };
    static Pool &pool()
    {
        static Pool p;
        return p;
    }
    bool held_ = false;
};

/* All eigenvalues, and the eigenvectors of the top k only (columns B - k ..
 * B - 1 of a, the others zeroed), of the B x B matrix in a (lower triangle):
 * the tridiagonal form (dsytrd), all its eigenvalues (dsterf), the top k
 * eigenpairs by MRRR (dstemr) and their back-transformation (dormtr), where
 * dsyevd computes and back-transforms all B vectors. Returns LAPACK's info of
 * the first step that fails. */
static lapack_int eigh_top(size_t B, size_t k, double *a, double *w)
{
    const lapack_int n = (lapack_int)B, m = (lapack_int)k;
    std::vector<double> d(B), e(B), tau(B), d2(B), e2(B), wk(B), z(B * k);
    std::vector<lapack_int> isuppz(2 * B);
    lapack_int info = LAPACKE_dsytrd(LAPACK_COL_MAJOR, 'L', n, a, n, d.data(), e.data(), tau.data());
    if (info != 0)
        return info;
    memcpy(w, d.data(), B * sizeof(double));
    d2 = d;
    e2 = e;
    if ((info = LAPACKE_dsterf(n, w, e2.data())) != 0) /* ascending */
        return info;
    lapack_int found = 0;
    lapack_logical tryrac = 1;
    e2 = e;
    e2[B - 1] = 0.0;
    info = LAPACKE_dstemr(LAPACK_COL_MAJOR, 'V', 'I', n, d2.data(), e2.data(), 0.0, 0.0,
                          n - m + 1, n, &found, wk.data(), z.data(), n, m, isuppz.data(),
                          &tryrac);
    if (info != 0)
        return info;
    if (found != m)
        return -100;
    info = LAPACKE_dormtr(LAPACK_COL_MAJOR, 'L', 'L', 'N', n, m, a, n, tau.data(), z.data(), n);
    if (info != 0)
        return info;
    memset(a, 0, (B - k) * B * sizeof(double));
    memcpy(a + (B - k) * B, z.data(), B * k * sizeof(double));
    return 0;
}

/* The B x B covariance (finalised in d_A) goes to the host and LAPACK's
 * dsyevd decomposes it there, as the CPU backend does; cuSOLVER's syevd is a
 * chain of small latency-bound kernels for B ~ 100-200. When the caller
 * needs only the top a->components vectors (few of many), eigh_top instead
 * (EADP keeps 7 of 144: 1.26 against 2.23 ms for dsyevd on the H100 host,
 * 13:11 round; $HYPROF_PCA_EIGH=dsyevd keeps dsyevd). The host time is
 * logged apart from the device stages. */
static hyprof_status_t eigh_on_host(hyprof_ctx_t *ctx, const hyprof_pca_fit_args_t *a,
                                    const double *d_mean, const double *d_A, cudaStream_t st,
                                    PcaClock &clock, size_t tid, double *stage, bool staged)
{
    static const char op[] = "pca";
    const size_t B = a->bands;
    /* stage (HostStage, B + B x B): staged, gram_finish_kernel wrote the
     * mean and the lower triangle there; else one pinned copy of both. */
    if (stage && !staged) {
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(stage, d_mean, B * sizeof(double),
                                          cudaMemcpyDeviceToHost, st));
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(stage + B, d_A, B * B * sizeof(double),
                                          cudaMemcpyDeviceToHost, st));
    } else if (!stage) {
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->mean, d_mean, B * sizeof(double),
                                          cudaMemcpyDeviceToHost, st));
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->eigenvectors, d_A, B * B * sizeof(double),
                                          cudaMemcpyDeviceToHost, st));
    }
    HYPROF_TRY(clock.end(ctx, op, tid, st));
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
    if (stage) {
        memcpy(a->mean, stage, B * sizeof(double));
        if (staged) /* both triangles from the lower one: the matrix d_A holds */
            for (size_t j = 0; j < B; ++j)
                for (size_t i = j; i < B; ++i)
                    a->eigenvectors[i + j * B] = a->eigenvectors[j + i * B] =
                        stage[B + i + j * B];
        else
            memcpy(a->eigenvectors, stage + B, B * B * sizeof(double));
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* One BLAS thread: a B x B eigh gains nothing from the pool, and its
     * threads keep spinning on every core after the call, slowing the host
     * work that follows (EAP's plane widening took 15-25 ms instead of 4-7 on
     * a 32-core H200 host, 10:40 round). */
    int blas_threads = openblas_get_num_threads ? openblas_get_num_threads() : 0;
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
    const char *how = getenv("HYPROF_PCA_EIGH");
    /* Few vectors of a larger matrix only: on the build machine's core, 144
     * x 144, k = 7: 0.89 against 1.58 ms; k = 143: 5.6 against 1.6 ms; 9 x 9:
     * 0.04 against 0.01 ms. */
    const bool top = a->components > 0 && 4 * a->components <= B && B >= 32 &&
                     !(how && strcmp(how, "dsyevd") == 0);
    lapack_int info = 0;
    try {
        info = top ? eigh_top(B, a->components, a->eigenvectors, a->eigenvalues)
                   : LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', (lapack_int)B, a->eigenvectors,
                                    (lapack_int)B, a->eigenvalues);
    } catch (...) { /* std::vector */
        if (openblas_set_num_threads && blas_threads > 0)
            openblas_set_num_threads(blas_threads);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "no memory for the eigensolver");
    }
    if (openblas_set_num_threads && blas_threads > 0)
        openblas_set_num_threads(blas_threads);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const char *what = top ? "LAPACK dsytrd + dsterf + dstemr, top" : "LAPACK dsyevd, all";
    hyprof__log(ctx, HYPROF_LOG_DEBUG, "pca: host eigh (%s %zu of %zu x %zu): %.3f ms", what,
                top ? a->components : B, B, B,
                (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
    if (info != 0)
        return hyprof__error(ctx, HYPROF_ERR_NUMERIC, op,
                             "the symmetric eigensolver (%s) failed, info=%d",
                             top ? "dsytrd/dsterf/dstemr/dormtr" : "dsyevd", (int)info);
    return HYPROF_OK;
}

/* The covariance numerator of a resident cube with gram_mma_kernel (FP64
 * tensor cores; 0.88 ms against 1.18 for gram_kernel, Houston size on an
 * H200, 09:40 round; $HYPROF_PCA_GRAM=fp64 keeps gram_kernel), into c (on
 * stream st); *done false when it does not apply (more than 8 kGramG bands,
 * $HYPROF_PCA_GRAM=gemm, or no memory for the per-CTA slices). */
static hyprof_status_t gram_resident(hyprof_ctx_t *ctx, const float *d_cube, size_t n, size_t B,
                                     const uint8_t *d_mask, const double *d_mean, double *c,
                                     cudaStream_t st, bool *done)
{
    static const char op[] = "pca";
    const char *how = getenv("HYPROF_PCA_GRAM");
    const bool mma = !(how && strcmp(how, "fp64") == 0);
    *done = false;
    if (B > (size_t)(8 * kGramG) || (how && strcmp(how, "gemm") == 0))
        return HYPROF_OK;
    int dev = 0, sms = 0;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    size_t ncta = 2 * (size_t)(sms > 0 ? sms : 1);
    const size_t min_px = 4 * (size_t)kGramP; /* a few stages per CTA at least */
    if (ncta > n / min_px)
        ncta = n / min_px > 0 ? n / min_px : 1;
    DeviceBuffer<double> partial;
    if (partial.alloc(ctx, op, ncta * B * B) != HYPROF_OK) {
        ctx->error[0] = '\0'; /* not an error: the DGEMM path follows */
        return HYPROF_OK;
    }
    if (mma) {
        const size_t shmem = gram_mma_smem_bytes((int)B);
        HYPROF_CUDA_CHECK(cudaFuncSetAttribute(
            gram_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
        /* As many CTAs as are resident at once (one per SM for 144 bands). */
        int per_sm = 0;
        HYPROF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, gram_mma_kernel, 32 * mma_warps((int)B), shmem));
        const size_t resident = (size_t)(per_sm > 0 ? per_sm : 1) * (size_t)(sms > 0 ? sms : 1);
        ncta = resident < ncta ? resident : ncta;
        gram_mma_kernel<<<(unsigned)ncta, 32 * mma_warps((int)B), shmem, st>>>(
            d_cube, n, (int)B, d_mask, d_mean, partial.get());
        HYPROF_CUDA_CHECK_LAUNCH("gram_mma_kernel");
    } else {
        const size_t shmem = gram_smem_bytes((int)B);
        HYPROF_CUDA_CHECK(cudaFuncSetAttribute(
            gram_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
        gram_kernel<<<(unsigned)ncta, kGramThreads, shmem, st>>>(d_cube, n, (int)B, d_mask,
                                                                d_mean, partial.get());
        HYPROF_CUDA_CHECK_LAUNCH("gram_kernel");
    }
    gram_reduce_kernel<<<(unsigned)div_up(B * B, kThreads), kThreads, 0, st>>>(
        partial.get(), (int)ncta, (int)B, c);
    HYPROF_CUDA_CHECK_LAUNCH("gram_reduce_kernel");
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st)); /* before `partial` is freed */
    *done = true;
    return HYPROF_OK;
}

/* The current device's SM count, opt-in shared memory a block and compute
 * capability major; false when they cannot be read (the callers then keep
 * their fallback kernel). */
static bool device_limits(int *sms, int *optin, int *major)
{
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
           cudaDeviceGetAttribute(optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
               cudaSuccess &&
           cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess;
}

/* How gram_tc_kernel runs for B bands on this device: m16n8k8 on sm_90,
 * four m8n8k4 per tile elsewhere or with $HYPROF_PCA_GRAM=tc4; a CTA per SM
 * (fewer for small cubes). ncta 0: it cannot run here (a device with less
 * shared memory than the 140 KB it takes for 144 bands: sm_86 and sm_89
 * have 99; or no CTA would fit), then the two-pass path runs. */
struct TcLaunch {
    bool split, ring;
    TcPlan plan;
    int threads;
    size_t smem, ncta;
};

static const void *tc_fn(const TcLaunch &L)
{
    return L.split ? (L.ring ? (const void *)gram_tc_kernel<true, true>
                             : (const void *)gram_tc_kernel<true, false>)
                   : (L.ring ? (const void *)gram_tc_kernel<false, true>
                             : (const void *)gram_tc_kernel<false, false>);
}

static TcLaunch tc_launch(size_t n, size_t B)
{
    TcLaunch L;
    memset(&L, 0, sizeof L);
    int sms = 0, optin = 0, major = 0, per_sm = 0;
    if (!device_limits(&sms, &optin, &major))
        return L;
    const char *how = getenv("HYPROF_PCA_GRAM");
    L.split = major < 9 || (how && strcmp(how, "tc4") == 0);
    L.plan = tc_plan((int)B);
    L.threads = 32 * (kTcProducers + L.plan.warps);
    L.ring = !(how && strcmp(how, "tcreg") == 0);
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
static hyprof_status_t gram_fused(hyprof_ctx_t *ctx, const TcLaunch &L, const float *d_cube,
                                  size_t n, size_t B, const uint8_t *d_mask, size_t nvalid,
                                  double *d_shift, double *partial, double *psum, double *d_A,
                                  double *d_mean, double *host, cudaStream_t st)
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

/* How gram_i8_kernel runs for n pixels of B bands here: a CTA per SM, more
 * when a CTA would hold more than kI8MaxPx pixels. ncta 0: it cannot run
 * (before sm_80, no room for its shared memory, 129 KB for 144 bands, or
 * more bands than kTcMaxBands). */
struct I8Launch {
    TcPlan plan;
    size_t smem, ncta;
};

static I8Launch i8_launch(size_t n, size_t B)
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
 * the bands (integer atomics), so gram_finish_kernel reads one slice: 5.8
 * us against 17.2 for per-CTA slices of three int32 B x B (H100, Houston
 * size, 2026-11-27 07:45 round, Nsight; gram_i8_kernel unchanged at 246;
 * covariance 0.262-0.264 ms of event time against 0.272-0.275). */
static hyprof_status_t gram_i8(hyprof_ctx_t *ctx, const I8Launch &L, const float *d_cube,
                               size_t n, size_t B, const uint8_t *d_mask, size_t nvalid,
                               double *d_shift, long long *acc, long long *psum,
                               unsigned *d_bad, double *d_A, double *d_mean, double *host,
                               cudaStream_t st)
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

/* $HYPROF_PCA_EIGH=jacobi: cuSOLVER's Jacobi solver (syevj, default tolerance:
 * machine precision) instead of syevd, to compare their device times. */
static hyprof_status_t eigh_jacobi(hyprof_ctx_t *ctx, cusolverDnHandle_t h, double *d_A, size_t B,
                                   double *d_W, int *d_info)
{
    static const char op[] = "pca";
    syevjInfo_t params = NULL;
    HYPROF_CUSOLVER_CHECK(cusolverDnCreateSyevjInfo(&params));
    int lwork = 0;
    cusolverStatus_t e = cusolverDnDsyevj_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR,
                                                     CUBLAS_FILL_MODE_LOWER, (int)B, d_A, (int)B,
                                                     d_W, &lwork, params);
    DeviceBuffer<double> work;
    hyprof_status_t st = HYPROF_OK;
    if (e == CUSOLVER_STATUS_SUCCESS)
        st = work.alloc(ctx, op, lwork > 0 ? (size_t)lwork : 1);
    if (e == CUSOLVER_STATUS_SUCCESS && st == HYPROF_OK)
        e = cusolverDnDsyevj(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, (int)B, d_A,
                             (int)B, d_W, work.get(), lwork, d_info, params);
    if (e == CUSOLVER_STATUS_SUCCESS && st == HYPROF_OK)
        (void)cudaDeviceSynchronize(); /* before `work` is freed */
    (void)cusolverDnDestroySyevjInfo(params);
    if (e != CUSOLVER_STATUS_SUCCESS)
        return hyprof__cusolver_fail(ctx, op, e, "cusolverDnDsyevj");
    return st;
}

/* Closes stage interval tid and waits for both pipeline streams: the end
 * mark queued on stream 0 behind slot 1's last chunk, before the host
 * waits, so that the interval ends with the device work. Recorded after
 * the drain, it held the host's wake-up and the record's own latency:
 * covariance 0.605 and projection 0.197 ms of event time against 0.586 and
 * 0.183 (H100, 02:55 round). */
static hyprof_status_t end_then_drain(hyprof_ctx_t *ctx, const char *op, Pipeline &pipe,
                                      PcaClock &clock, size_t tid)
{
    HYPROF_TRY(pipe.join(ctx, op));
    HYPROF_TRY(clock.end(ctx, op, tid, pipe.stream(0)));
    return pipe.drain(ctx, op);
}

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

/* Projection of a resident cube (fit-transform): chunks of m pixels centred
 * into the slots' d_c buffers, Y = Xc V, converted into a device output that
 * is copied back once. Returns with *done false, having projected nothing,
 * when the extra buffers do not fit: the caller then streams the cube. */
static hyprof_status_t project_resident(hyprof_ctx_t *ctx, const char *op,
                                        const hyprof_pca_fit_args_t *a, const float *d_cube,
                                        const uint8_t *d_cmask, DeviceBuffer<double> *d_c,
                                        size_t m, Pipeline &pipe, Blas *blas, bool *done,
                                        PcaClock &clock)
{
    const hyprof_pca_apply_args_t *ap = a->apply;
    const size_t N = ap->npix, B = ap->bands, K = ap->components;
    const size_t nch = div_up(N, m);
    *done = false;
    DeviceBuffer<double> d_mean, d_V, d_y[2];
    DeviceBuffer<float> d_out;
    if (K > (size_t)INT_MAX || d_out.alloc(ctx, op, N * K) != HYPROF_OK ||
        d_mean.alloc(ctx, op, B) != HYPROF_OK || d_V.alloc(ctx, op, B * K) != HYPROF_OK ||
        d_y[0].alloc(ctx, op, m * K) != HYPROF_OK ||
        (nch > 1 && d_y[1].alloc(ctx, op, m * K) != HYPROF_OK)) {
        ctx->error[0] = '\0'; /* not an error: the streamed projection follows */
        return HYPROF_OK;
    }
    HYPROF_CUDA_CHECK(cudaMemcpy(d_mean.get(), ap->mean, B * sizeof(double),
                                 cudaMemcpyHostToDevice));
    HYPROF_CUDA_CHECK(cudaMemcpy(d_V.get(), ap->vectors, B * K * sizeof(double),
                                 cudaMemcpyHostToDevice));
    const double one = 1.0, zero = 0.0;
    /* $HYPROF_PCA_PROJECT=gemm: centre + DGEMM per chunk, as the streamed
     * apply; =pair or =one: project_kernel<2> or <1> on the CUDA cores;
     * default: project_bulk_kernel on sm_90 (=tc: project_tc_kernel),
     * project_tc_kernel (m16n8k8 on sm_90, m8n8k4 elsewhere or with =tc4)
     * where it does not apply. */
    const char *how = getenv("HYPROF_PCA_PROJECT");
    const bool fused = !(how && strcmp(how, "gemm") == 0);
    const bool cores = how && (strcmp(how, "pair") == 0 || strcmp(how, "one") == 0);
    const bool pair = !(how && strcmp(how, "one") == 0); /* 193 against 376 us (H200) */
    int dev = 0, major = 0;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const bool split = major < 9 || (how && strcmp(how, "tc4") == 0);
    const size_t tc_shmem = project_tc_smem_bytes(B);
    const bool tc = fused && !cores && B <= (size_t)INT_MAX && tc_shmem <= 48 * 1024;
    const BulkLaunch bulk = tc && !split && !(how && strcmp(how, "tc") == 0)
                                ? bulk_launch(d_cube, N, B)
                                : BulkLaunch();
    size_t tid;
    HYPROF_TRY(clock.begin(ctx, op, kPcaProjection, pipe.stream(0), &tid));
    for (size_t k0 = 0; bulk.grid && k0 < K; k0 += 8) {
        const int nk = (int)(K - k0 < 8 ? K - k0 : 8);
        project_bulk_kernel<kProjBulkTiles><<<bulk.grid, 32 * (kProjTcWarps + 1), bulk.smem,
                                              pipe.stream(0)>>>(
            d_cube, N, (int)B, d_cmask, d_mean.get(), d_V.get(), k0, nk, ap->nodata, d_out.get(),
            bulk.nsafe, kProjBulkDepth);
        HYPROF_CUDA_CHECK_LAUNCH("project_bulk_kernel");
    }
    /* Two tiles a warp (32 consecutive pixels, 128 bytes of each band), two
     * steps of 8 bands loaded together: 168 us for Houston on an H100 against
     * 173 for one tile and three steps (15:49 round). */
    for (size_t k0 = 0; tc && !bulk.grid && k0 < K; k0 += 8) {
        const int nk = (int)(K - k0 < 8 ? K - k0 : 8);
        const unsigned blocks = (unsigned)div_up(div_up(N, (size_t)32), (size_t)kProjTcWarps);
        if (split)
            project_tc_kernel<true, 2, 2><<<blocks, 32 * kProjTcWarps, tc_shmem, pipe.stream(0)>>>(
                d_cube, N, (int)B, d_cmask, d_mean.get(), d_V.get(), k0, nk, ap->nodata,
                d_out.get());
        else
            project_tc_kernel<false, 2, 2><<<blocks, 32 * kProjTcWarps, tc_shmem, pipe.stream(0)>>>(
                d_cube, N, (int)B, d_cmask, d_mean.get(), d_V.get(), k0, nk, ap->nodata,
                d_out.get());
        HYPROF_CUDA_CHECK_LAUNCH("project_tc_kernel");
    }
    for (size_t k0 = 0; fused && !tc && k0 < K; k0 += kProjK) {
        const int nk = (int)(K - k0 < (size_t)kProjK ? K - k0 : (size_t)kProjK);
        const size_t shmem = proj_smem_fits(B, nk) ? ((size_t)nk + 1) * B * sizeof(double) : 0;
        if (pair)
            project_kernel<2><<<(unsigned)div_up(N, 2 * kThreads), kThreads, shmem,
                                pipe.stream(0)>>>(d_cube, N, B, d_cmask, d_mean.get(), d_V.get(),
                                                  k0, nk, ap->nodata, d_out.get());
        else
            project_kernel<1><<<(unsigned)div_up(N, kThreads), kThreads, shmem, pipe.stream(0)>>>(
                d_cube, N, B, d_cmask, d_mean.get(), d_V.get(), k0, nk, ap->nodata, d_out.get());
        HYPROF_CUDA_CHECK_LAUNCH("project_kernel");
    }
    for (size_t i = 0; !fused && i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(pipe.acquire(ctx, op, s));
        cudaStream_t st = pipe.stream(s);
        const uint8_t *msk = d_cmask ? d_cmask + p0 : NULL;
        HYPROF_TRY(centre(ctx, op, st, d_cube + p0, N, msk, mi, B, d_mean.get(), d_c[s].get()));
        HYPROF_CUBLAS_CHECK(cublasDgemm(blas[s].get(), CUBLAS_OP_N, CUBLAS_OP_N, (int)mi, (int)K,
                                        (int)B, &one, d_c[s].get(), (int)mi, d_V.get(), (int)B,
                                        &zero, d_y[s].get(), (int)mi));
        dim3 grid((unsigned)div_up(mi, kThreads), grid_y(K));
        to_float_kernel<<<grid, kThreads, 0, st>>>(d_y[s].get(), mi, K, msk, ap->nodata,
                                                   d_out.get() + p0, N);
        HYPROF_CUDA_CHECK_LAUNCH("to_float_kernel");
        HYPROF_TRY(pipe.release(ctx, op, s));
        HYPROF_TRY(hyprof__progress(ctx, 0.6 + 0.35 * (double)(i + 1) / (double)nch, op));
    }
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

/* The fit; with `transform`, also the projection of the cube when it is
 * resident (then *projected is set), its progress being the last 40 %. */
static hyprof_status_t fit(hyprof_ctx_t *ctx, const hyprof_pca_fit_args_t *a, bool transform,
                           bool *projected)
{
    static const char op[] = "pca";
    const double pscale = transform ? 0.6 : 1.0;
    *projected = false;
    if (!a || !a->x || !a->mean || !a->eigenvalues || !a->eigenvectors)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "CUDA fit called without data");
    const size_t N = a->npix, B = a->bands;
    if (N == 0 || B == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "empty cube (%zu pixels, %zu bands)", N,
                             B);
    if (B > (size_t)INT_MAX)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "too many bands for cuSOLVER (%zu)", B);
    if (a->nvalid < 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                             "at least 2 valid pixels are needed (%zu valid)", a->nvalid);
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));

    /* Declaration order matters: memory first, then the pipeline (its
     * streams wait for their work when destroyed), then the library handles
     * (their destruction synchronises the device). */
    DeviceBuffer<double> d_mean, d_sum[2], d_partial[2], d_cov[2], d_A, d_W, d_work;
    DeviceBuffer<double> d_gram[2], d_ones, d_shift, d_tcpart, d_tcsum;
    DeviceBuffer<long long> d_i8acc, d_i8sum;
    DeviceBuffer<unsigned> d_bad;
    DeviceBuffer<int> d_info;
    DeviceBuffer<float> d_cube;
    DeviceBuffer<uint8_t> d_cmask;
    DeviceBuffer<double> d_c[2];
    Pipeline pipe;
    Blas blas[2];
    Solver solver;
    PcaClock clock;
    HostStage hstage;
    size_t tid;

    /* The eigen-decomposition runs on the host unless $HYPROF_PCA_EIGH says
     * device or jacobi (see below): then only is cuSOLVER needed. */
    const char *eig_env = getenv("HYPROF_PCA_EIGH");
    const bool host_eigh =
        !eig_env || (strcmp(eig_env, "device") != 0 && strcmp(eig_env, "jacobi") != 0);
    if (!host_eigh)
        HYPROF_TRY(solver.create(ctx, op));
    HYPROF_TRY(blas[0].create(ctx, op));
    HYPROF_TRY(blas[1].create(ctx, op));
    HYPROF_TRY(d_mean.alloc(ctx, op, B));
    for (int s = 0; s < 2; ++s) {
        HYPROF_TRY(d_sum[s].alloc(ctx, op, B));
        HYPROF_TRY(d_partial[s].alloc(ctx, op, (size_t)kSumMaxBlocks * B));
        HYPROF_TRY(d_cov[s].alloc(ctx, op, B * B));
        HYPROF_TRY(d_gram[s].alloc(ctx, op, kGramSlices * B * B));
    }
    {
        const std::vector<double> ones(kGramSlices, 1.0);
        HYPROF_TRY(d_ones.alloc(ctx, op, kGramSlices));
        HYPROF_CUDA_CHECK(cudaMemcpy(d_ones.get(), ones.data(), kGramSlices * sizeof(double),
                                     cudaMemcpyHostToDevice));
    }
    HYPROF_TRY(d_A.alloc(ctx, op, B * B));
    HYPROF_TRY(d_W.alloc(ctx, op, B));
    HYPROF_TRY(d_info.alloc(ctx, op, 1));
    int lwork = 0;
    if (!host_eigh)
        HYPROF_CUSOLVER_CHECK(cusolverDnDsyevd_bufferSize(
            solver.get(), CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, (int)B, d_A.get(),
            (int)B, d_W.get(), &lwork));
    HYPROF_TRY(d_work.alloc(ctx, op, lwork > 0 ? (size_t)lwork : 1));

    /* ---- plan the chunks ---- */
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    const size_t env_chunk = hyprof__cuda_chunk_override();
    size_t target = env_chunk ? env_chunk : hyprof__cuda_default_chunk(B, kChunkTargetBytes);
    if (target > N)
        target = N;
    const size_t mask_bytes = a->mask ? 1 : 0;
    size_t m = 0;
    bool resident = false;
    if (hyprof__cuda_resident_allowed() && N <= ((size_t)-1 >> 4) / B) {
        const size_t cube_bytes = N * B * sizeof(float) + N * mask_bytes;
        m = plan_chunk(budget, cube_bytes, 2 * B * sizeof(double), target, N, B);
        /* Worth it only if a reasonable chunk still fits beside the cube. */
        size_t need = target < 1024 ? target : 1024;
        if (m >= need && m > 0) {
            resident = true;
            if (d_cube.alloc(ctx, op, N * B) != HYPROF_OK ||
                (a->mask && d_cmask.alloc(ctx, op, N) != HYPROF_OK)) {
                d_cube.reset();
                d_cmask.reset();
                resident = false;
            }
        }
    }
    if (!resident) {
        m = plan_chunk(budget, 0, 2 * (B * sizeof(float) + B * sizeof(double) + mask_bytes),
                       target, N, B);
        if (m == 0)
            return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                                 "not enough device memory for one pixel of %zu bands "
                                 "(%zu bytes usable)",
                                 B, budget);
    }
    /* The fused covariance (shift + one pass) for a resident cube of up to
     * kTcMaxBands bands, unless $HYPROF_PCA_GRAM names another kernel
     * (mma, fp64, gemm: band sums during the upload, then the centred pass);
     * without the memory for its slices, the centred pass too. */
    const char *gram_env = getenv("HYPROF_PCA_GRAM");
    bool fused = resident && B <= (size_t)kTcMaxBands &&
                 (!gram_env || strcmp(gram_env, "tc") == 0 || strcmp(gram_env, "tc4") == 0 ||
                  strcmp(gram_env, "tcreg") == 0);
    const TcLaunch tcl = fused ? tc_launch(N, B) : TcLaunch();
    const size_t tc_ncta = tcl.ncta;
    fused = fused && tc_ncta > 0;
    if (fused && (d_shift.alloc(ctx, op, B) != HYPROF_OK ||
                  d_tcpart.alloc(ctx, op, tc_ncta * B * B) != HYPROF_OK ||
                  d_tcsum.alloc(ctx, op, tc_ncta * B) != HYPROF_OK)) {
        ctx->error[0] = '\0'; /* not an error: the two-pass path follows */
        fused = false;
    }
    /* The mean and covariance reach the host eigh through HostStage: written
     * there by gram_finish_kernel (fused: eigh stage 0.002 ms of event time
     * against 0.016-0.020 for pinned copies, 0.053 for pageable ones, H100,
     * 02:55 round), else copied. */
    /* stage: mean, covariance, gram_i8_kernel's flag, shift_kernel's */
    double *stage = host_eigh ? hstage.take(B + B * B + 2) : NULL;
    double *mapped = NULL;
    if (stage && fused) {
        void *dp = NULL;
        if (cudaHostGetDevicePointer(&dp, stage, 0) == cudaSuccess)
            mapped = static_cast<double *>(dp);
        else
            (void)cudaGetLastError();
    }
    /* The exact integer covariance first (gram_i8_kernel), where the fused
     * one applies and $HYPROF_PCA_GRAM names no kernel: it tells the host
     * through HostStage whether the cube was integer-valued. */
    const I8Launch i8l = fused && mapped && !gram_env ? i8_launch(N, B) : I8Launch();
    bool i8 = i8l.ncta > 0;
    if (i8 && (d_i8acc.alloc(ctx, op, B * B) != HYPROF_OK ||
               d_i8sum.alloc(ctx, op, B) != HYPROF_OK ||
               d_bad.alloc(ctx, op, 1) != HYPROF_OK)) {
        ctx->error[0] = '\0'; /* not an error: the FP64 kernel follows */
        i8 = false;
    }
    HYPROF_TRY(pipe.init(ctx, op, a->x, a->mask, N, B, 0, NULL, m, !resident));
    const size_t nch = pipe.nchunks();
    for (int s = 0; s < (nch > 1 ? 2 : 1); ++s)
        HYPROF_TRY(d_c[s].alloc(ctx, op, m * B));
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "pca: CUDA fit of %zu pixels x %zu bands, %zu chunk(s) of %zu pixels, %s%s", N,
                B, nch, m, resident ? "cube resident on the device" : "streamed from the host",
                pipe.staged() ? ", pinned staging" : "");

    for (int s = 0; s < 2; ++s) {
        cudaStream_t st = pipe.stream(s);
        HYPROF_CUDA_CHECK(cudaMemsetAsync(d_sum[s].get(), 0, B * sizeof(double), st));
        HYPROF_CUDA_CHECK(cudaMemsetAsync(d_cov[s].get(), 0, B * B * sizeof(double), st));
        HYPROF_CUBLAS_CHECK(cublasSetStream(blas[s].get(), st));
    }

    /* Where chunk [p0, p0+mi) lies on the device for slot s: in the resident
     * cube (uploaded during pass 1, when `first`) or in the slot's buffers,
     * streamed in each pass. */
    auto chunk_source = [&](int s, size_t p0, size_t mi, bool first, const float **src,
                            const uint8_t **msk, size_t *ld) -> hyprof_status_t {
        if (!resident) {
            HYPROF_TRY(pipe.upload(ctx, op, s, p0, mi));
            *src = pipe.slot[s].in.get();
            *msk = a->mask ? pipe.slot[s].mask.get() : NULL;
            *ld = mi;
            return HYPROF_OK;
        }
        if (first) {
            cudaStream_t st = pipe.stream(s);
            HYPROF_CUDA_CHECK(copy_cols_h2d(d_cube.get() + p0, N, a->x + p0, N, mi, B, st));
            if (a->mask)
                HYPROF_CUDA_CHECK(cudaMemcpyAsync(d_cmask.get() + p0, a->mask + p0, mi,
                                                  cudaMemcpyHostToDevice, st));
        }
        *src = d_cube.get() + p0;
        *msk = a->mask ? d_cmask.get() + p0 : NULL;
        *ld = N;
        return HYPROF_OK;
    };

    /* ---- pass 1: masked sums (and the upload of a resident cube) ---- */
    HYPROF_TRY(clock.begin(ctx, op, kPcaUpload, pipe.stream(0), &tid));
    for (size_t i = 0; i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(pipe.acquire(ctx, op, s));
        cudaStream_t st = pipe.stream(s);
        const float *src;
        const uint8_t *msk;
        size_t ld;
        HYPROF_TRY(chunk_source(s, p0, mi, true, &src, &msk, &ld));
        if (!fused)
            HYPROF_TRY(band_sums(ctx, op, st, src, ld, msk, mi, B, d_partial[s].get(),
                                 d_sum[s].get()));
        HYPROF_TRY(pipe.release(ctx, op, s));
        HYPROF_TRY(
            hyprof__progress(ctx, pscale * 0.45 * (double)(i + 1) / (double)nch, "pca"));
    }
    HYPROF_TRY(pipe.drain(ctx, op));
    if (!fused) {
        mean_kernel<<<(unsigned)div_up(B, kThreads), kThreads, 0, pipe.stream(0)>>>(
            d_sum[0].get(), d_sum[1].get(), B, (double)a->nvalid, d_mean.get());
        HYPROF_CUDA_CHECK_LAUNCH("mean_kernel");
    } else { /* the shift (a sample's mean) with pass 1, as the two-pass path's mean */
        if (i8) { /* gram_i8_kernel's flag and sums start from 0 */
            HYPROF_CUDA_CHECK(cudaMemsetAsync(d_bad.get(), 0, sizeof(unsigned), pipe.stream(0)));
            HYPROF_CUDA_CHECK(
                cudaMemsetAsync(d_i8acc.get(), 0, B * B * sizeof(long long), pipe.stream(0)));
            HYPROF_CUDA_CHECK(
                cudaMemsetAsync(d_i8sum.get(), 0, B * sizeof(long long), pipe.stream(0)));
        }
        if (i8)
            stage[B + B * B + 1] = 0.0; /* no kernel of this call reads it yet */
        shift_kernel<<<(unsigned)B, kThreads, 0, pipe.stream(0)>>>(
            d_cube.get(), N, a->mask ? d_cmask.get() : NULL, d_shift.get(),
            i8 ? mapped + B + B * B + 1 : NULL);
        HYPROF_CUDA_CHECK_LAUNCH("shift_kernel");
    }
    HYPROF_TRY(clock.end(ctx, op, tid, pipe.stream(0)));
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(pipe.stream(0)));
    if (i8 && stage[B + B * B + 1] != 0.0) { /* a sampled value failed the integer check */
        hyprof__log(ctx, HYPROF_LOG_DEBUG, "pca: covariance in FP64 (gram_tc_kernel): the cube "
                                           "is not integer-valued within 32767 of its shifts "
                                           "(a sampled value)");
        i8 = false;
    }

    /* ---- pass 2: covariance ---- */
    HYPROF_TRY(clock.begin(ctx, op, kPcaCovariance, pipe.stream(0), &tid));
    bool gram_done = fused;
    if (i8)
        HYPROF_TRY(gram_i8(ctx, i8l, d_cube.get(), N, B, a->mask ? d_cmask.get() : NULL,
                           a->nvalid, d_shift.get(), d_i8acc.get(), d_i8sum.get(), d_bad.get(),
                           d_A.get(), d_mean.get(), mapped, pipe.stream(0)));
    else if (fused)
        HYPROF_TRY(gram_fused(ctx, tcl, d_cube.get(), N, B, a->mask ? d_cmask.get() : NULL,
                              a->nvalid, d_shift.get(), d_tcpart.get(), d_tcsum.get(), d_A.get(),
                              d_mean.get(), mapped, pipe.stream(0)));
    else if (resident)
        HYPROF_TRY(gram_resident(ctx, d_cube.get(), N, B, a->mask ? d_cmask.get() : NULL,
                                 d_mean.get(), d_cov[0].get(), pipe.stream(0), &gram_done));
    for (size_t i = 0; !gram_done && i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(pipe.acquire(ctx, op, s));
        cudaStream_t st = pipe.stream(s);
        const float *src;
        const uint8_t *msk;
        size_t ld;
        HYPROF_TRY(chunk_source(s, p0, mi, false, &src, &msk, &ld));
        HYPROF_TRY(centre(ctx, op, st, src, ld, msk, mi, B, d_mean.get(), d_c[s].get()));
        HYPROF_TRY(gram_accumulate(ctx, op, blas[s].get(), d_c[s].get(), mi, B, d_cov[s].get(),
                                   d_gram[s].get(), d_ones.get()));
        HYPROF_TRY(pipe.release(ctx, op, s));
        HYPROF_TRY(hyprof__progress(
            ctx, pscale * (0.45 + 0.45 * (double)(i + 1) / (double)nch), "pca"));
    }
    HYPROF_TRY(end_then_drain(ctx, op, pipe, clock, tid));
    if (i8 && stage[B + B * B] != 0.0) { /* not integer-valued: the FP64 kernel */
        hyprof__log(ctx, HYPROF_LOG_DEBUG, "pca: covariance in FP64 (gram_tc_kernel): the cube "
                                           "is not integer-valued within 32767 of its shifts");
        HYPROF_TRY(clock.begin(ctx, op, kPcaCovariance, pipe.stream(0), &tid));
        HYPROF_TRY(gram_fused(ctx, tcl, d_cube.get(), N, B, a->mask ? d_cmask.get() : NULL,
                              a->nvalid, d_shift.get(), d_tcpart.get(), d_tcsum.get(), d_A.get(),
                              d_mean.get(), mapped, pipe.stream(0)));
        HYPROF_TRY(end_then_drain(ctx, op, pipe, clock, tid));
    } else if (i8) {
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "pca: covariance exact in integers (gram_i8_kernel, %zu CTAs)", i8l.ncta);
    }

    /* ---- eigen-decomposition ---- */
    cudaStream_t st = pipe.stream(0);
    HYPROF_TRY(clock.begin(ctx, op, kPcaEigh, st, &tid));
    if (!fused) { /* the fused pass wrote d_A */
        cov_finalize_kernel<<<(unsigned)div_up(B * B, kThreads), kThreads, 0, st>>>(
            d_cov[0].get(), d_cov[1].get(), B * B, (double)(a->nvalid - 1), d_A.get());
        HYPROF_CUDA_CHECK_LAUNCH("cov_finalize_kernel");
    }
    /* The eigen-decomposition of the small B x B matrix runs on the host by
     * default (LAPACK dsyevd, as the CPU backend): on an H100 cuSOLVER's
     * syevd took 1.25 ms of device time (about 1 ms of kernels, 144 bands)
     * and LAPACK 1.9 ms of host time, the same wall time, the device free.
     * $HYPROF_PCA_EIGH=device (cuSOLVER syevd) or =jacobi (syevj). */
    if (host_eigh) {
        HYPROF_TRY(eigh_on_host(ctx, a, d_mean.get(), d_A.get(), st, clock, tid, stage,
                                mapped != NULL));
    } else {
        HYPROF_CUSOLVER_CHECK(cusolverDnSetStream(solver.get(), st));
        if (eig_env && strcmp(eig_env, "jacobi") == 0)
            HYPROF_TRY(eigh_jacobi(ctx, solver.get(), d_A.get(), B, d_W.get(), d_info.get()));
        else
            HYPROF_CUSOLVER_CHECK(cusolverDnDsyevd(solver.get(), CUSOLVER_EIG_MODE_VECTOR,
                                                   CUBLAS_FILL_MODE_LOWER, (int)B, d_A.get(),
                                                   (int)B, d_W.get(), d_work.get(), lwork,
                                                   d_info.get()));
        int info = 0;
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(&info, d_info.get(), sizeof(int),
                                          cudaMemcpyDeviceToHost, st));
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->mean, d_mean.get(), B * sizeof(double),
                                          cudaMemcpyDeviceToHost, st));
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->eigenvalues, d_W.get(), B * sizeof(double),
                                          cudaMemcpyDeviceToHost, st));
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->eigenvectors, d_A.get(), B * B * sizeof(double),
                                          cudaMemcpyDeviceToHost, st));
        HYPROF_TRY(clock.end(ctx, op, tid, st));
        HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
        if (info > 0)
            return hyprof__error(ctx, HYPROF_ERR_NUMERIC, op,
                                 "cusolverDnDsyevd did not converge (info %d, %zu bands)",
                                 info, B);
        if (info < 0)
            return hyprof__error(ctx, HYPROF_ERR_INTERNAL, op,
                                 "cusolverDnDsyevd: parameter %d is invalid", -info);
    }
    HYPROF_TRY(hyprof__progress(ctx, pscale, "pca"));
    if (!transform || !resident) {
        log_stages(ctx, clock);
        return HYPROF_OK;
    }
    HYPROF_TRY(a->finish(a->user));
    for (int s = 0; s < 2; ++s)
        HYPROF_CUBLAS_CHECK(cublasSetStream(blas[s].get(), pipe.stream(s)));
    HYPROF_TRY(project_resident(ctx, op, a, d_cube.get(), a->mask ? d_cmask.get() : NULL,
                                d_c, m, pipe, blas, projected, clock));
    log_stages(ctx, clock);
    return HYPROF_OK;
}

extern "C" hyprof_status_t hyprof__cuda_pca_fit(hyprof_ctx_t *ctx, void *vargs)
{
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    bool projected;
    return fit(ctx, (const hyprof_pca_fit_args_t *)vargs, false, &projected);
}

/* Fit-transform: the projection runs on the resident cube when the fit kept
 * one; otherwise (a cube larger than the device) it streams the cube again. */
extern "C" hyprof_status_t hyprof__cuda_pca_fit_transform(hyprof_ctx_t *ctx, void *vargs)
{
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    const hyprof_pca_fit_args_t *a = (const hyprof_pca_fit_args_t *)vargs;
    if (!a || !a->apply || !a->finish)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, "pca",
                             "CUDA fit-transform called without a projection");
    bool projected = false;
    HYPROF_TRY(fit(ctx, a, true, &projected));
    if (projected)
        return HYPROF_OK;
    HYPROF_TRY(a->finish(a->user));
    double saved[2];
    hyprof__progress_push(ctx, 0.6, 1.0, saved);
    hyprof_status_t st = hyprof__cuda_pca_apply(ctx, a->apply);
    hyprof__progress_pop(ctx, saved);
    return st;
}

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
    /* Each chunk through project_tc_kernel (FP64 tensor cores, one pass over
     * the float chunk) unless $HYPROF_PCA_PROJECT=gemm, pair or one: then
     * centre + DGEMM + conversion (1.5 ms a call for Houston on an H100, 12:37
     * round, against 0.17 for project_tc_kernel in the fit-transform). */
    const char *how = getenv("HYPROF_PCA_PROJECT");
    int dev = 0, major = 0;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const bool split = major < 9 || (how && strcmp(how, "tc4") == 0);
    const size_t tc_shmem = project_tc_smem_bytes(B);
    const bool tc = !(how && (strcmp(how, "gemm") == 0 || strcmp(how, "pair") == 0 ||
                              strcmp(how, "one") == 0)) &&
                    tc_shmem <= 48 * 1024;
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

    const double one = 1.0, zero = 0.0;
    for (size_t i = 0; i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(pipe.acquire(ctx, op, s));
        cudaStream_t st = pipe.stream(s);
        Slot &sl = pipe.slot[s];
        HYPROF_TRY(pipe.upload(ctx, op, s, p0, mi));
        const uint8_t *msk = a->mask ? sl.mask.get() : NULL;
        for (size_t k0 = 0; tc && k0 < K; k0 += 8) {
            const int nk = (int)(K - k0 < 8 ? K - k0 : 8);
            const unsigned blocks = (unsigned)div_up(div_up(mi, (size_t)16), (size_t)kProjTcWarps);
            if (split)
                project_tc_kernel<true, 1, 3><<<blocks, 32 * kProjTcWarps, tc_shmem, st>>>(
                    sl.in.get(), mi, (int)B, msk, d_mean.get(), d_V.get(), k0, nk, a->nodata,
                    sl.out.get());
            else
                project_tc_kernel<false, 1, 3><<<blocks, 32 * kProjTcWarps, tc_shmem, st>>>(
                    sl.in.get(), mi, (int)B, msk, d_mean.get(), d_V.get(), k0, nk, a->nodata,
                    sl.out.get());
            HYPROF_CUDA_CHECK_LAUNCH("project_tc_kernel");
        }
        if (tc) {
            HYPROF_TRY(pipe.download(ctx, op, s, p0, mi));
            HYPROF_TRY(pipe.release(ctx, op, s));
            HYPROF_TRY(hyprof__progress(ctx, (double)(i + 1) / (double)nch, "pca"));
            continue;
        }
        HYPROF_TRY(centre(ctx, op, st, sl.in.get(), mi, msk, mi, B, d_mean.get(), d_c[s].get()));
        HYPROF_CUBLAS_CHECK(cublasDgemm(blas[s].get(), CUBLAS_OP_N, CUBLAS_OP_N, (int)mi, (int)K,
                                        (int)B, &one, d_c[s].get(), (int)mi, d_V.get(), (int)B,
                                        &zero, d_y[s].get(), (int)mi));
        dim3 grid((unsigned)div_up(mi, kThreads), grid_y(K));
        to_float_kernel<<<grid, kThreads, 0, st>>>(d_y[s].get(), mi, K, msk, a->nodata,
                                                   sl.out.get(), mi);
        HYPROF_CUDA_CHECK_LAUNCH("to_float_kernel");
        HYPROF_TRY(pipe.download(ctx, op, s, p0, mi));
        HYPROF_TRY(pipe.release(ctx, op, s));
        HYPROF_TRY(hyprof__progress(ctx, (double)(i + 1) / (double)nch, "pca"));
    }
    return pipe.drain(ctx, op);
}
