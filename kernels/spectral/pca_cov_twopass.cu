/* The two-pass covariance of the CUDA PCA (semantics: algorithms/spectral/pca_impl.h),
 * used where the one-pass kernels (pca_cov_tc.cu, pca_cov_int8.cu) do not
 * apply: a cube streamed from the host (larger than the device), more than
 * kTcMaxBands bands, or a device without the shared memory they need.
 *
 * Pass 1: masked per-band sums in double (band_sum_kernel, a deterministic
 * two-stage reduction), mean = sum / nvalid. Pass 2, chunk by chunk: centre
 * to double (masked rows zeroed), then C += Xc^T Xc with cuBLAS (a batched
 * DGEMM, gram_accumulate) or, for a resident cube of up to 144 bands,
 * gram_mma_kernel on the FP64 tensor cores in one pass over the cube; then
 * C / (nvalid - 1). Each pipeline slot accumulates its own sums and its own
 * covariance (the two streams never write the same memory) and the halves
 * are added at the end: the result does not depend on timing. */
#include "pca_cuda.cuh"

#include <cuda_pipeline.h>

namespace {

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
        /* Four loads in flight, added in the same order as one at a time (the
         * loop is latency-bound otherwise). */
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

/* ---- the covariance numerator of a resident cube on the FP64 tensor cores ----
 *
 * Each CTA takes a contiguous range of pixels, kGramP at a time: their raw
 * floats are copied into shared memory asynchronously one stage ahead (two
 * buffers), then centred to double (0 where masked) into cen[b][q]
 * (band-major, a row stride of kMmaLdq = kGramP + 4 doubles: the fragment
 * loads below hit every bank pair exactly twice, the minimum for 32 doubles),
 * and each warp owns a 24 x 24 block (3 x 3 tiles of 8 x 8) of the lower
 * triangle of X^T X, accumulated with mma.sync m8n8k4 f64 (A = X^T rows of
 * its tiles, B = X columns of its tiles; both fragments are cen[tile row +
 * lane / 4][k + lane % 4]). Bands are padded to a multiple of 24 with zero
 * rows. The CTA writes its sums into its own B x B slice of `partial` (lower
 * triangle); gram_reduce_kernel adds the slices in CTA order, so the result
 * does not depend on timing. Used for B <= 8 kGramG (144) bands. */
const int kGramG = 18, kGramP = 32;
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
                __pipeline_memcpy_async(rb + b * kGramP + q, x + p0 + (size_t)q + (size_t)b * n, 4);
        }
        __pipeline_commit();
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
        __pipeline_wait_prior(0);
        __syncthreads(); /* raw[buf] is in; stage n - 1's centring and n - 2's products are done */
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
    __syncthreads();
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


} /* namespace */

namespace hyprof_pca {

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

hyprof_status_t mean_from_sums(hyprof_ctx_t *ctx, const char *op, cudaStream_t st,
                               const double *s0, const double *s1, size_t bands, double n,
                               double *mean)
{
    mean_kernel<<<(unsigned)div_up(bands, kThreads), kThreads, 0, st>>>(s0, s1, bands, n, mean);
    HYPROF_CUDA_CHECK_LAUNCH("mean_kernel");
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

hyprof_status_t cov_finalize(hyprof_ctx_t *ctx, const char *op, cudaStream_t st,
                             const double *c0, const double *c1, size_t count, double denom,
                             double *a)
{
    cov_finalize_kernel<<<(unsigned)div_up(count, kThreads), kThreads, 0, st>>>(c0, c1, count,
                                                                               denom, a);
    HYPROF_CUDA_CHECK_LAUNCH("cov_finalize_kernel");
    return HYPROF_OK;
}

/* cuBLAS runs syrk and gemm of this shape (B ~ 100-200, mi ~ 1e5-1e6) on a
 * handful of CTAs. So the rows are cut into up to kGramSlices slices whose
 * Gram matrices one batched gemm computes side by side, and a gemv with a
 * vector of ones adds them into C (a split-K by hand); leftover rows go
 * through one plain gemm. Fixed order: the result does not depend on timing. */
const size_t kGramRows = 2048;

hyprof_status_t gram_accumulate(hyprof_ctx_t *ctx, const char *op, cublasHandle_t h,
                                const double *A, size_t mi, size_t B, double *C, double *gram,
                                const double *ones)
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

/* gram_mma_kernel into c (on stream st), with as many CTAs as are resident
 * at once (one per SM for 144 bands); *done false when it does not apply
 * (more than 8 kGramG bands, or no memory for the per-CTA slices: the DGEMM
 * path follows). */
hyprof_status_t gram_resident(hyprof_ctx_t *ctx, const float *d_cube, size_t n, size_t B,
                              const uint8_t *d_mask, const double *d_mean, double *c,
                              cudaStream_t st, bool *done)
{
    static const char op[] = "pca";
    *done = false;
    if (B > (size_t)(8 * kGramG))
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
    const size_t shmem = gram_mma_smem_bytes((int)B);
    HYPROF_CUDA_CHECK(cudaFuncSetAttribute(gram_mma_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)shmem));
    int per_sm = 0;
    HYPROF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, gram_mma_kernel, 32 * mma_warps((int)B), shmem));
    const size_t resident = (size_t)(per_sm > 0 ? per_sm : 1) * (size_t)(sms > 0 ? sms : 1);
    ncta = resident < ncta ? resident : ncta;
    gram_mma_kernel<<<(unsigned)ncta, 32 * mma_warps((int)B), shmem, st>>>(
        d_cube, n, (int)B, d_mask, d_mean, partial.get());
    HYPROF_CUDA_CHECK_LAUNCH("gram_mma_kernel");
    gram_reduce_kernel<<<(unsigned)div_up(B * B, kThreads), kThreads, 0, st>>>(
        partial.get(), (int)ncta, (int)B, c);
    HYPROF_CUDA_CHECK_LAUNCH("gram_reduce_kernel");
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st)); /* before `partial` is freed */
    *done = true;
    return HYPROF_OK;
}

} /* namespace hyprof_pca */
