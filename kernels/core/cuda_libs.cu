/* cuBLAS and cuSOLVER, loaded when first used.
 *
 * Loading them costs a process about 0.15-0.2 s (their relocations and
 * initialisers), which every run of the executable, every GDAL process that
 * loads the plugin and every CPU-only run would pay if libhyprof were linked
 * against them. The library defines instead the few functions it calls,
 * under their own names (cublas_v2.h's macros give the _v2 ones), each
 * forwarding to the function of the library opened on the first call: the
 * full path found at build time, else the soname through the usual search.
 * Every function is looked up at once, so a library that lacks one fails
 * to load with its name. The version script keeps these definitions local:
 * another cuBLAS user in the process (CuPy beside the Python binding) still
 * binds to the real library. */
#include "cuda_libs.h"

#include <cublas_v2.h>
#include <cusolverDn.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define HYPROF_STR_(x) #x
#define HYPROF_STR(x) HYPROF_STR_(x) /* after macro expansion: cublasCreate -> "cublasCreate_v2" */

/* Every function the library calls: return type, name, parameters, arguments. */
#define HYPROF_CUBLAS_FUNCTIONS(X)                                                                 \
    X(cublasStatus_t, cublasCreate, (cublasHandle_t * handle), (handle))                          \
    X(cublasStatus_t, cublasDestroy, (cublasHandle_t handle), (handle))                           \
    X(cublasStatus_t, cublasSetStream, (cublasHandle_t handle, cudaStream_t stream),              \
      (handle, stream))                                                                            \
    X(cublasStatus_t, cublasSetPointerMode, (cublasHandle_t handle, cublasPointerMode_t mode),    \
      (handle, mode))                                                                              \
    X(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode),              \
      (handle, mode))                                                                              \
    X(cublasStatus_t, cublasDgemm,                                                                 \
      (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,    \
       const double *alpha, const double *A, int lda, const double *B, int ldb,                   \
       const double *beta, double *C, int ldc),                                                    \
      (handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))                              \
    X(cublasStatus_t, cublasDgemmStridedBatched,                                                   \
      (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,    \
       const double *alpha, const double *A, int lda, long long int sA, const double *B, int ldb, \
       long long int sB, const double *beta, double *C, int ldc, long long int sC, int batch),    \
      (handle, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch))           \
    X(cublasStatus_t, cublasDsyrk,                                                                 \
      (cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t t, int n, int k,           \
       const double *alpha, const double *A, int lda, const double *beta, double *C, int ldc),    \
      (handle, uplo, t, n, k, alpha, A, lda, beta, C, ldc))                                        \
    X(cublasStatus_t, cublasDscal,                                                                 \
      (cublasHandle_t handle, int n, const double *alpha, double *x, int incx),                   \
      (handle, n, alpha, x, incx))                                                                 \
    X(cublasStatus_t, cublasDgemv,                                                                 \
      (cublasHandle_t handle, cublasOperation_t t, int m, int n, const double *alpha,             \
       const double *A, int lda, const double *x, int incx, const double *beta, double *y,        \
       int incy),                                                                                  \
      (handle, t, m, n, alpha, A, lda, x, incx, beta, y, incy))

#define HYPROF_CUSOLVER_FUNCTIONS(X)                                                               \
    X(cusolverStatus_t, cusolverDnCreate, (cusolverDnHandle_t * handle), (handle))                \
    X(cusolverStatus_t, cusolverDnDestroy, (cusolverDnHandle_t handle), (handle))                 \
    X(cusolverStatus_t, cusolverDnDsyevd_bufferSize,                                               \
      (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n,           \
       const double *A, int lda, const double *W, int *lwork),                                    \
      (handle, jobz, uplo, n, A, lda, W, lwork))                                                   \
    X(cusolverStatus_t, cusolverDnDsyevd,                                                          \
      (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n,           \
       double *A, int lda, double *W, double *work, int lwork, int *info),                        \
      (handle, jobz, uplo, n, A, lda, W, work, lwork, info))                                       \
    X(cusolverStatus_t, cusolverDnDpotrf_bufferSize,                                               \
      (cusolverDnHandle_t handle, cublasFillMode_t uplo, int n, double *A, int lda, int *lwork),  \
      (handle, uplo, n, A, lda, lwork))                                                            \
    X(cusolverStatus_t, cusolverDnDpotrf,                                                          \
      (cusolverDnHandle_t handle, cublasFillMode_t uplo, int n, double *A, int lda, double *work, \
       int lwork, int *info),                                                                      \
      (handle, uplo, n, A, lda, work, lwork, info))                                                \
    X(cusolverStatus_t, cusolverDnDpotrs,                                                          \
      (cusolverDnHandle_t handle, cublasFillMode_t uplo, int n, int nrhs, const double *A,        \
       int lda, double *B, int ldb, int *info),                                                    \
      (handle, uplo, n, nrhs, A, lda, B, ldb, info))

#define HYPROF_POINTER(ret, name, params, args) ret(*name) params;
static struct {
    HYPROF_CUBLAS_FUNCTIONS(HYPROF_POINTER)
    HYPROF_CUSOLVER_FUNCTIONS(HYPROF_POINTER)
    const char *(*cublasGetStatusString)(cublasStatus_t);
} fn;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[512]; /* empty once both libraries are loaded */

static void *open_library(const char *dir, const char *soname)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, soname);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        snprintf(load_error, sizeof load_error, "cannot load %s: %s", soname, dlerror());
    return h;
}

static bool resolve(void *h, const char *soname, const char *name, void **slot)
{
    *slot = h ? dlsym(h, name) : NULL;
    if (h && !*slot && !load_error[0])
        snprintf(load_error, sizeof load_error, "%s has no function %s", soname, name);
    return *slot != NULL;
}

#define HYPROF_RESOLVE_ONE(ret, name, params, args)                                                \
    ok = resolve(h, soname_, HYPROF_STR(name), reinterpret_cast<void **>(&fn.name)) && ok;

static void load(void)
{
    void *blas = open_library(HYPROF_CUBLAS_DIR, HYPROF_CUBLAS_SONAME);
    void *solver = blas ? open_library(HYPROF_CUSOLVER_DIR, HYPROF_CUSOLVER_SONAME) : NULL;
    bool ok = blas && solver;
    const char *soname_ = HYPROF_CUBLAS_SONAME;
    void *h = blas;
    HYPROF_CUBLAS_FUNCTIONS(HYPROF_RESOLVE_ONE)
    ok = resolve(h, soname_, "cublasGetStatusString",
                 reinterpret_cast<void **>(&fn.cublasGetStatusString)) && ok;
    soname_ = HYPROF_CUSOLVER_SONAME;
    h = solver;
    HYPROF_CUSOLVER_FUNCTIONS(HYPROF_RESOLVE_ONE)
    if (!ok && !load_error[0])
        snprintf(load_error, sizeof load_error, "cannot load cuBLAS and cuSOLVER");
}

extern "C" int hyprof__cuda_libs_load(const char **why)
{
    pthread_once(&once, load);
    if (why)
        *why = load_error;
    return load_error[0] ? -1 : 0;
}

/* The definitions the kernels link against. */
#define HYPROF_FORWARD_CUBLAS(ret, name, params, args)                                             \
    ret name params                                                                                \
    {                                                                                              \
        return hyprof__cuda_libs_load(NULL) == 0 ? fn.name args : CUBLAS_STATUS_NOT_INITIALIZED;   \
    }
#define HYPROF_FORWARD_CUSOLVER(ret, name, params, args)                                           \
    ret name params                                                                                \
    {                                                                                              \
        return hyprof__cuda_libs_load(NULL) == 0 ? fn.name args                                    \
                                                 : CUSOLVER_STATUS_NOT_INITIALIZED;                \
    }
HYPROF_CUBLAS_FUNCTIONS(HYPROF_FORWARD_CUBLAS)
HYPROF_CUSOLVER_FUNCTIONS(HYPROF_FORWARD_CUSOLVER)

const char *cublasGetStatusString(cublasStatus_t status)
{
    return hyprof__cuda_libs_load(NULL) == 0 ? fn.cublasGetStatusString(status) : load_error;
}
