/* The eigen-decomposition of the CUDA PCA's covariance, on the host
 * (semantics: algorithms/spectral/pca_impl.h).
 *
 * The B x B covariance reaches the host through HostStage (page-locked,
 * device-mapped memory that gram_finish_kernel writes directly, so the stage
 * holds no device work; one pinned copy on the two-pass path) and LAPACK
 * decomposes it there, as the CPU backend does: dsyevd for all eigenpairs,
 * or, when the caller keeps few components of many bands, all eigenvalues
 * and the top vectors only (eigh_top). cuSOLVER's syevd is a chain of small
 * latency-bound kernels for B ~ 100-200, no faster than the host and
 * occupying the device. The host time is logged apart from the device
 * stages. */
#include "pca_cuda.cuh"

#include <ctime>
#include <lapacke.h>
#include <mutex>
#include <vector>

/* OpenBLAS's pool (weak: any LAPACK works, then its own settings apply). */
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

namespace hyprof_pca {

namespace {

/* The process's one buffer (allocating it costs host milliseconds, freeing
 * it synchronises the device). */
struct StagePool {
    std::mutex m;
    double *buf = NULL; /* never freed: the driver may be gone at exit */
    size_t count = 0;
    bool busy = false;
};

StagePool &stage_pool()
{
    static StagePool p;
    return p;
}

} /* namespace */

HostStage::~HostStage()
{
    if (held_) {
        std::lock_guard<std::mutex> lock(stage_pool().m);
        stage_pool().busy = false;
    }
}

double *HostStage::take(size_t count)
{
    StagePool &p = stage_pool();
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

/* The mean and the B x B covariance (finalised in d_A) to the host, closing
 * stage interval tid, and their eigen-decomposition there: dsyevd, or
 * eigh_top when the caller needs only the top a->components vectors (at most
 * a quarter of 32 or more bands: EADP keeps 7 of 144). */
hyprof_status_t eigh_on_host(hyprof_ctx_t *ctx, const hyprof_pca_fit_args_t *a,
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
     * work that follows. */
    int blas_threads = openblas_get_num_threads ? openblas_get_num_threads() : 0;
    if (openblas_set_num_threads)
        openblas_set_num_threads(1);
    /* Few vectors of a larger matrix only: for many vectors, or a small
     * matrix, dsyevd is faster. */
    const bool top = a->components > 0 && 4 * a->components <= B && B >= 32;
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

} /* namespace hyprof_pca */
