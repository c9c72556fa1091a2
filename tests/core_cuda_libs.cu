/* cuBLAS and cuSOLVER opened on first use (kernels/core/cuda_libs.cu, not
 * exported by the library): nothing of them is mapped before, both are after,
 * every forwarded function resolves (the load fails otherwise), and the
 * forwarders reach the real libraries: cuBLAS's own status text everywhere,
 * a product and a Cholesky solve where a device is present. */
#include "core/cuda_libs.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>

static int failures = 0;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static bool mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    bool found = false;
    while (f && fgets(line, sizeof line, f))
        found |= strstr(line, name) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* C = A B (2x2, column-major) with cuBLAS, then A x = b by cuSOLVER's Cholesky. */
static void compute_on_device(void)
{
    const double A[4] = {4, 2, 2, 3}, B[4] = {1, 0, 0, 1}, b[2] = {2, 1};
    double *dA, *dB, *dC, *dx, *dwork;
    int *dinfo, lwork = 0, info = -1;
    double C[4], x[2], one = 1, zero = 0;
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    CHECK(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    CHECK(cusolverDnCreate(&solver) == CUSOLVER_STATUS_SUCCESS, "cusolverDnCreate");
    cudaMalloc(&dA, sizeof A);
    cudaMalloc(&dB, sizeof B);
    cudaMalloc(&dC, sizeof C);
    cudaMalloc(&dx, sizeof x);
    cudaMalloc(&dinfo, sizeof info);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    cudaMemcpy(dx, b, sizeof b, cudaMemcpyHostToDevice);
    CHECK(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, dA, 2, dB, 2, &zero, dC, 2) ==
              CUBLAS_STATUS_SUCCESS,
          "cublasDgemm");
    cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 4; i++)
        CHECK(C[i] == A[i], "A I [%d] = %g, want %g", i, C[i], A[i]);
    CHECK(cusolverDnDpotrf_bufferSize(solver, CUBLAS_FILL_MODE_LOWER, 2, dA, 2, &lwork) ==
              CUSOLVER_STATUS_SUCCESS,
          "potrf buffer size");
    cudaMalloc(&dwork, (lwork > 0 ? lwork : 1) * sizeof(double));
    CHECK(cusolverDnDpotrf(solver, CUBLAS_FILL_MODE_LOWER, 2, dA, 2, dwork, lwork, dinfo) ==
              CUSOLVER_STATUS_SUCCESS,
          "potrf");
    CHECK(cusolverDnDpotrs(solver, CUBLAS_FILL_MODE_LOWER, 2, 1, dA, 2, dx, 2, dinfo) ==
              CUSOLVER_STATUS_SUCCESS,
          "potrs");
    cudaMemcpy(x, dx, sizeof x, cudaMemcpyDeviceToHost);
    cudaMemcpy(&info, dinfo, sizeof info, cudaMemcpyDeviceToHost);
    /* [4 2; 2 3] x = [2; 1]: x = [0.5; 0] */
    CHECK(info == 0 && fabs(x[0] - 0.5) < 1e-12 && fabs(x[1]) < 1e-12, "x = %g %g (info %d)", x[0],
          x[1], info);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(dx);
    cudaFree(dinfo);
    cudaFree(dwork);
    cusolverDnDestroy(solver);
    cublasDestroy(blas);
}

int main(void)
{
    CHECK(!mapped("libcublas") && !mapped("libcusolver"), "cuBLAS or cuSOLVER mapped before use");
    const char *why = NULL;
    int rc = hyprof__cuda_libs_load(&why);
    CHECK(rc == 0, "load: %s", why);
    CHECK(mapped("libcublas.so") && mapped("libcusolver.so"), "not mapped after the load");
    CHECK(hyprof__cuda_libs_load(NULL) == rc, "a second load differs");
    /* The forwarder's answer is the real function's, looked up here directly. */
    void *h = dlopen(HYPROF_CUBLAS_SONAME, RTLD_NOW | RTLD_NOLOAD);
    typedef const char *(*text_fn)(cublasStatus_t);
    text_fn real = h ? (text_fn)dlsym(h, "cublasGetStatusString") : NULL;
    CHECK(real != NULL, "%s is not loaded", HYPROF_CUBLAS_SONAME);
    for (int s = CUBLAS_STATUS_SUCCESS; real && s <= CUBLAS_STATUS_LICENSE_ERROR; s++) {
        const char *text = cublasGetStatusString((cublasStatus_t)s);
        CHECK(text && strcmp(text, real((cublasStatus_t)s)) == 0, "status %d: '%s'", s, text);
    }
    int devices = 0;
    if (rc == 0 && cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0)
        compute_on_device();
    else
        printf("no device: the product and the solve are not run\n");
    if (failures)
        return 1;
    printf("cuda_libs: ok\n");
    return 0;
}
