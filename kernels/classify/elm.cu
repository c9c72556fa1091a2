/* CUDA backend of the ELM's output weights (semantics:
 * algorithms/classify/elm_impl.h), in double like the host:
 *   gemm     Hc = W X' (neurons x n, column-major = H row-major), cublasDgemm;
 *   sigmoid  Hc = 1 / (1 + exp(-(Hc + b)));
 *   syrk     G = H'H (upper triangle), cublasDsyrk; G += I/C on the diagonal;
 *   gemm     R = H'T (T = +1 / -1 built on the device from the class indices);
 *   solve    cusolverDnDpotrf + cusolverDnDpotrs on G, R; beta = R downloaded.
 * The seeded W and b come from the host (hyprof__elm_train), so both backends
 * solve the same system; they differ only by rounding. */
#include "../core/cuda_util.h"

#include "classify/elm_impl.h"

#include <climits>
#include <vector>

using namespace hyprof_cuda;

namespace {

const int kThreads = 256;

template <typename T>
hyprof_status_t to_device(hyprof_ctx_t *ctx, const char *op, DeviceBuffer<T> &d, const T *h,
                          size_t n)
{
    HYPROF_TRY(d.alloc(ctx, op, n));
    HYPROF_CUDA_CHECK(cudaMemcpy(d.get(), h, n * sizeof(T), cudaMemcpyHostToDevice));
    return HYPROF_OK;
}

/* Hc[k + i L] = sigmoid(Hc[k + i L] + bias[k]). */
__global__ void hidden_kernel(double *__restrict__ H, size_t L, size_t total,
                              const double *__restrict__ bias)
{
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x)
        H[j] = 1.0 / (1.0 + exp(-(H[j] + bias[j % L])));
}

/* Tc[c + i K] = +1 for the sample's class, -1 elsewhere. */
__global__ void targets_kernel(const int *__restrict__ y, size_t n, size_t K,
                               double *__restrict__ T)
{
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n * K;
         j += (size_t)gridDim.x * blockDim.x)
        T[j] = (size_t)y[j / K] == j % K ? 1.0 : -1.0;
}

__global__ void add_diagonal_kernel(double *__restrict__ G, size_t L, double v)
{
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < L)
        G[k + k * L] += v;
}

inline unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 65535 ? (b ? b : 1) : 65535);
}

} /* namespace */

extern "C" hyprof_status_t hyprof__cuda_elm_solve(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "train";
    hyprof__elm_solve_args_t *a = (hyprof__elm_solve_args_t *)vargs;
    hyprof__elm_t *e = a->elm;
    const size_t n = a->n, B = a->bands, L = e->neurons, K = a->nclasses;
    if (n > (size_t)INT_MAX || B > (size_t)INT_MAX || L > (size_t)INT_MAX || K > (size_t)INT_MAX)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "ELM training set too large for cuBLAS");
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));

    DeviceBuffer<double> d_x, d_w, d_bias, d_H, d_T, d_G, d_R, d_work;
    DeviceBuffer<int> d_y, d_info;
    Blas blas;
    Solver solver;
    HYPROF_TRY(blas.create(ctx, op));
    HYPROF_TRY(solver.create(ctx, op));
    HYPROF_TRY(to_device(ctx, op, d_x, a->x, n * B));
    HYPROF_TRY(to_device(ctx, op, d_w, e->w, L * B));
    HYPROF_TRY(to_device(ctx, op, d_bias, e->bias, L));
    HYPROF_TRY(to_device(ctx, op, d_y, a->y, n));
    HYPROF_TRY(d_H.alloc(ctx, op, n * L));
    HYPROF_TRY(d_T.alloc(ctx, op, n * K));
    HYPROF_TRY(d_G.alloc(ctx, op, L * L));
    HYPROF_TRY(d_R.alloc(ctx, op, L * K));
    HYPROF_TRY(d_info.alloc(ctx, op, 1));
    HYPROF_TRY(hyprof__progress(ctx, 0.1, op));

    const double one = 1.0, zero = 0.0;
    /* X (n x B row-major) is B x n column-major, W (L x B row-major) B x L. */
    HYPROF_CUBLAS_CHECK(cublasDgemm(blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, (int)L, (int)n, (int)B,
                                    &one, d_w.get(), (int)B, d_x.get(), (int)B, &zero,
                                    d_H.get(), (int)L));
    hidden_kernel<<<blocks_for(n * L), kThreads>>>(d_H.get(), L, n * L, d_bias.get());
    HYPROF_CUDA_CHECK_LAUNCH("hidden_kernel");
    targets_kernel<<<blocks_for(n * K), kThreads>>>(d_y.get(), n, K, d_T.get());
    HYPROF_CUDA_CHECK_LAUNCH("targets_kernel");
    /* G = Hc Hc' = H'H (upper triangle, column-major: the host's row-major
     * upper is the same symmetric matrix). */
    HYPROF_CUBLAS_CHECK(cublasDsyrk(blas.get(), CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, (int)L,
                                    (int)n, &one, d_H.get(), (int)L, &zero, d_G.get(), (int)L));
    add_diagonal_kernel<<<blocks_for(L), kThreads>>>(d_G.get(), L, 1.0 / e->c);
    HYPROF_CUDA_CHECK_LAUNCH("add_diagonal_kernel");
    /* R = H'T = Hc Tc' (L x K column-major). */
    HYPROF_CUBLAS_CHECK(cublasDgemm(blas.get(), CUBLAS_OP_N, CUBLAS_OP_T, (int)L, (int)K, (int)n,
                                    &one, d_H.get(), (int)L, d_T.get(), (int)K, &zero,
                                    d_R.get(), (int)L));
    HYPROF_TRY(hyprof__progress(ctx, 0.5, op));

    int lwork = 0, info = 0;
    HYPROF_CUSOLVER_CHECK(cusolverDnDpotrf_bufferSize(solver.get(), CUBLAS_FILL_MODE_UPPER,
                                                      (int)L, d_G.get(), (int)L, &lwork));
    HYPROF_TRY(d_work.alloc(ctx, op, (size_t)(lwork > 0 ? lwork : 1)));
    HYPROF_CUSOLVER_CHECK(cusolverDnDpotrf(solver.get(), CUBLAS_FILL_MODE_UPPER, (int)L,
                                           d_G.get(), (int)L, d_work.get(), lwork,
                                           d_info.get()));
    HYPROF_CUDA_CHECK(cudaMemcpy(&info, d_info.get(), sizeof info, cudaMemcpyDeviceToHost));
    if (info > 0)
        return hyprof__elm_not_positive_definite(ctx, info);
    if (info < 0)
        return hyprof__error(ctx, HYPROF_ERR_INTERNAL, op, "cusolverDnDpotrf: argument %d invalid",
                             -info);
    HYPROF_CUSOLVER_CHECK(cusolverDnDpotrs(solver.get(), CUBLAS_FILL_MODE_UPPER, (int)L, (int)K,
                                           d_G.get(), (int)L, d_R.get(), (int)L, d_info.get()));
    HYPROF_CUDA_CHECK(cudaMemcpy(&info, d_info.get(), sizeof info, cudaMemcpyDeviceToHost));
    if (info != 0)
        return hyprof__error(ctx, HYPROF_ERR_INTERNAL, op, "cusolverDnDpotrs: argument %d invalid",
                             -info);
    std::vector<double> R(L * K);
    HYPROF_CUDA_CHECK(cudaMemcpy(R.data(), d_R.get(), L * K * sizeof(double),
                                 cudaMemcpyDeviceToHost));
    /* Column-major L x K -> the model's row-major neurons x classes. */
    for (size_t k = 0; k < L; ++k)
        for (size_t c = 0; c < K; ++c)
            e->beta[k * K + c] = R[k + c * L];
    return hyprof__progress(ctx, 1.0, op);
}
