/* The PCA of a cube already on the device, its eigen-decomposition on the
 * device (semantics: algorithms/spectral/pca_impl.h): SSPP's purity step
 * runs it on the unmixing chain's device copy of the cube, so that only the
 * mean, the eigenvalues and the eigenvectors cross to the host.
 *
 * The mean in one block a band (a tree of per-thread double sums), the
 * covariance from centred chunks of 65536 pixels by cublasDsyrk, scaled by
 * 1 / (nvalid - 1), and cusolverDnDsyevd. Its arithmetic is not that of the
 * fit in pca_host.cu (shift, one-pass tensor-core or integer Gram matrix,
 * host LAPACK): both give the PCA to rounding, and each keeps its results
 * bit for bit. */
#include "pca_on_device.cuh"

#include "../core/cuda_util.h"

#include <cmath>
#include <vector>

using namespace hyprof_cuda;

namespace {

/* cuBLAS and cuSOLVER handles of this thread, kept between calls (creating
 * them costs more than the work they do here). */
struct Handles {
    int device = -1;
    cublasHandle_t blas = NULL;
    cusolverDnHandle_t solver = NULL;
};
thread_local Handles g_handles;

hyprof_status_t get_handles(hyprof_ctx_t *ctx, const char *op, Handles **out)
{
    int dev = -1;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    Handles &h = g_handles;
    if (h.device != dev) {
        if (h.blas)
            (void)cublasDestroy(h.blas);
        if (h.solver)
            (void)cusolverDnDestroy(h.solver);
        h = Handles();
    }
    if (!h.blas) {
        HYPROF_CUBLAS_CHECK(cublasCreate(&h.blas));
        HYPROF_CUBLAS_CHECK(cublasSetMathMode(h.blas, CUBLAS_DEFAULT_MATH)); /* plain FP64 */
        HYPROF_CUBLAS_CHECK(cublasSetPointerMode(h.blas, CUBLAS_POINTER_MODE_HOST));
    }
    if (!h.solver)
        HYPROF_CUSOLVER_CHECK(cusolverDnCreate(&h.solver));
    h.device = dev;
    *out = &h;
    return HYPROF_OK;
}

/* mean[b] = (sum over valid pixels of band b, in double) / nvalid; one block a band. */
__global__ void band_mean_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                                 size_t npix, double nvalid, double *__restrict__ mean)
{
    __shared__ double part[256];
    const float *xb = x + (size_t)blockIdx.x * npix;
    double s = 0.0;
    for (size_t i = threadIdx.x; i < npix; i += blockDim.x)
        if (!mask || mask[i])
            s += (double)xb[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        mean[blockIdx.x] = part[0] / nvalid;
}

/* xc (m x B, column-major) = pixels [p0, p0+m) centred, in double; masked rows 0. */
__global__ void centre_rows_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                                   size_t npix, size_t p0, size_t m,
                                   const double *__restrict__ mean, double *__restrict__ xc)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (i >= m)
        return;
    bool valid = !mask || mask[p0 + i];
    xc[b * m + i] = valid ? (double)x[b * npix + p0 + i] - mean[b] : 0.0;
}

} /* namespace */

namespace hyprof_pca {

hyprof_status_t fit_on_device(hyprof_ctx_t *ctx, const char *op, const float *dx,
                              const uint8_t *dmask, size_t npix, size_t B, size_t nvalid,
                              size_t p, double *mean, double *vectors, double *total)
{
    Handles *hd = NULL;
    HYPROF_TRY(get_handles(ctx, op, &hd));
    const size_t m = npix < 65536 ? npix : 65536;
    DeviceBuffer<double> d_mean, d_xc, d_C, d_W, d_work;
    DeviceBuffer<int> d_info;
    HYPROF_TRY(d_mean.alloc(ctx, op, B));
    HYPROF_TRY(d_xc.alloc(ctx, op, m * B));
    HYPROF_TRY(d_C.alloc(ctx, op, B * B));
    HYPROF_TRY(d_W.alloc(ctx, op, B));
    HYPROF_TRY(d_info.alloc(ctx, op, 1));
    band_mean_kernel<<<(unsigned)B, 256>>>(dx, dmask, npix, (double)nvalid, d_mean.get());
    HYPROF_CUDA_CHECK_LAUNCH("band_mean_kernel");
    const double one = 1.0;
    for (size_t p0 = 0; p0 < npix; p0 += m) {
        const size_t mi = npix - p0 < m ? npix - p0 : m;
        const double beta = p0 ? 1.0 : 0.0;
        centre_rows_kernel<<<dim3((unsigned)div_up(mi, 256), (unsigned)B), 256>>>(
            dx, dmask, npix, p0, mi, d_mean.get(), d_xc.get());
        HYPROF_CUDA_CHECK_LAUNCH("centre_rows_kernel");
        HYPROF_CUBLAS_CHECK(cublasDsyrk(hd->blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, (int)B,
                                        (int)mi, &one, d_xc.get(), (int)mi, &beta, d_C.get(),
                                        (int)B));
    }
    const double scale = 1.0 / (double)(nvalid - 1);
    HYPROF_CUBLAS_CHECK(cublasDscal(hd->blas, (int)(B * B), &scale, d_C.get(), 1));
    int lwork = 0;
    HYPROF_CUSOLVER_CHECK(cusolverDnDsyevd_bufferSize(hd->solver, CUSOLVER_EIG_MODE_VECTOR,
                                                      CUBLAS_FILL_MODE_LOWER, (int)B, d_C.get(),
                                                      (int)B, d_W.get(), &lwork));
    HYPROF_TRY(d_work.alloc(ctx, op, (size_t)(lwork > 0 ? lwork : 1)));
    HYPROF_CUSOLVER_CHECK(cusolverDnDsyevd(hd->solver, CUSOLVER_EIG_MODE_VECTOR,
                                           CUBLAS_FILL_MODE_LOWER, (int)B, d_C.get(), (int)B,
                                           d_W.get(), d_work.get(), lwork, d_info.get()));
    std::vector<double> W(B), V(B * B);
    int info = 0;
    HYPROF_CUDA_CHECK(cudaMemcpy(mean, d_mean.get(), B * sizeof(double), cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(W.data(), d_W.get(), B * sizeof(double), cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(V.data(), d_C.get(), B * B * sizeof(double),
                                 cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(&info, d_info.get(), sizeof info, cudaMemcpyDeviceToHost));
    if (info != 0)
        return hyprof__error(ctx, HYPROF_ERR_NUMERIC, op,
                             "the symmetric eigensolver (cusolverDnDsyevd) failed, info=%d", info);
    for (size_t k = 0; k < p; k++) { /* ascending from the solver: component k is B-1-k */
        const double *v = V.data() + (B - 1 - k) * B;
        size_t imax = 0;
        for (size_t i = 1; i < B; i++)
            if (fabs(v[i]) > fabs(v[imax]))
                imax = i;
        double sign = v[imax] < 0.0 ? -1.0 : 1.0;
        for (size_t i = 0; i < B; i++)
            vectors[k * B + i] = sign * v[i];
    }
    double t = 0.0;
    for (size_t i = 0; i < B; i++)
        t += W[i];
    *total = t;
    return HYPROF_OK;
}

} /* namespace hyprof_pca */
