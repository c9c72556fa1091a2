/* Private declarations shared by the stages of the CUDA PCA (CUDA C++ only):
 *
 *   pca_cov_twopass.cu  band sums, centring, the DGEMM and FP64-tensor-core
 *                       Gram matrices of the two-pass covariance (fallbacks);
 *   pca_cov_tc.cu       the fused one-pass covariance of a resident cube on
 *                       the FP64 tensor cores (float-valued cubes);
 *   pca_cov_int8.cu     the exact covariance of an integer-valued resident
 *                       cube on the integer tensor cores (the default);
 *   pca_eigh.cu         the host eigen-decomposition (LAPACK);
 *   pca_project.cu      the projections (fit-transform and apply);
 *   pca_host.cu         the fit's plan and orchestration, the entry points;
 *   pca_on_device.cu    a device-resident cube's PCA with cuSOLVER (for SSPP's
 *                       purity step; its own header, pca_on_device.cuh).
 *
 * Device code and constants here have internal linkage (each stage compiles
 * its own copy of what it uses: no relocatable device code); the host
 * functions that one stage calls in another live in namespace hyprof_pca. */
#ifndef HYPROF_KERNELS_PCA_CUDA_CUH
#define HYPROF_KERNELS_PCA_CUDA_CUH

#include "../core/cuda_util.h"
#include "../core/stage_clock.h"

#include "spectral/pca_impl.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace {

using namespace hyprof_cuda;

const int kThreads = 256;
const int kSumMaxBlocks = 128;
const size_t kChunkTargetBytes = (size_t)32 << 20; /* float input per chunk */

inline unsigned grid_y(size_t n) { return (unsigned)(n < 65535 ? (n ? n : 1) : 65535); }

/* Pixels per stage of the one-pass covariance kernels (a producer lane each),
 * floats a band and stage in their rings (kTcP from a 16-byte boundary), and
 * the most bands they take. */
const int kTcP = 32;
const int kTcRaw = kTcP + 4;
const int kTcMaxBands = 144;

/* Consumer warps of either Gram kernel's plan (gram_i8_kernel's 28). */
const int kPlanMaxWarps = 28;

struct TcPlan {
    int warps; /* consumer warps (some may own no tile: padding for the balance) */
    int rows;  /* rows of a cen plane (a multiple of 16; zero beyond the bands) */
    int conv;  /* gram_i8_kernel: the warps that convert */
    unsigned group[kPlanMaxWarps]; /* consumer warp w: r | c0 << 8 | nc << 16 (| rank << 24) */
};

/* c (8 x 8) += a (8 x 4) b (4 x 8), mma.sync m8n8k4 f64 (sm_80 and later). */
__device__ __forceinline__ void dmma_8x8x4(double (&c)[2], double a, double b)
{
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                 : "+d"(c[0]), "+d"(c[1])
                 : "d"(a), "d"(b));
}

/* c (16 x 8) += a (16 x 8) b (8 x 8) in the m16n8k8 f64 fragments: one
 * m16n8k8 on sm_90, four m8n8k4 with kSplit (the sm_80 form). */
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

/* a (both triangles) = (G - s s^T / n) / (n - 1) and mean = K + s / n from
 * the ncta slices of gram_tc_kernel (T double) or the one int64 slice that
 * gram_i8_kernel's CTAs added up (T long long, ncta 1: exact; K its rounded
 * shift, and block 0 copies *bad after the matrix in host). kFinX entries a
 * block, each summed by kFinY threads over the slices k = y, y + kFinY, ...
 * (independent loads in flight), then over y in order: a fixed order, the
 * same for s_i wherever band i appears. With `host` (mapped page-locked
 * memory) the mean and the lower triangle are written there too. */
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

/* Device-time stages of the fit (debug log). */
enum { kPcaUpload, kPcaCovariance, kPcaEigh, kPcaProjection, kPcaDownload, kPcaStages };
typedef StageClock<kPcaStages> PcaClock;

} /* namespace */

namespace hyprof_pca {

/* ---- pca_cov_twopass.cu ---- */

/* Slices of the batched DGEMM of gram_accumulate (a split-K by hand). */
const size_t kGramSlices = 64;

/* sums += masked column sums of src (m x bands, leading dimension ld). */
hyprof_status_t band_sums(hyprof_ctx_t *ctx, const char *op, cudaStream_t st, const float *src,
                          size_t ld, const uint8_t *mask, size_t m, size_t bands,
                          double *partial, double *sums);
/* mean = (s0 + s1) / n, on stream st. */
hyprof_status_t mean_from_sums(hyprof_ctx_t *ctx, const char *op, cudaStream_t st,
                               const double *s0, const double *s1, size_t bands, double n,
                               double *mean);
/* dst (m x bands, dense, double) = src - mean for valid rows, 0 for masked. */
hyprof_status_t centre(hyprof_ctx_t *ctx, const char *op, cudaStream_t st, const float *src,
                       size_t ld, const uint8_t *mask, size_t m, size_t bands,
                       const double *mean, double *dst);
/* C += A^T A for a tall mi x B block A (lda mi). */
hyprof_status_t gram_accumulate(hyprof_ctx_t *ctx, const char *op, cublasHandle_t h,
                                const double *A, size_t mi, size_t B, double *C, double *gram,
                                const double *ones);
/* a = (c0 + c1) / denom, count entries, on stream st. */
hyprof_status_t cov_finalize(hyprof_ctx_t *ctx, const char *op, cudaStream_t st,
                             const double *c0, const double *c1, size_t count, double denom,
                             double *a);
/* The covariance numerator of a resident cube with gram_mma_kernel into c;
 * *done false when it does not apply. */
hyprof_status_t gram_resident(hyprof_ctx_t *ctx, const float *d_cube, size_t n, size_t B,
                              const uint8_t *d_mask, const double *d_mean, double *c,
                              cudaStream_t st, bool *done);

/* ---- pca_cov_tc.cu ---- */

/* How gram_tc_kernel runs for B bands on this device; ncta 0: it cannot. */
struct TcLaunch {
    bool split, ring;
    TcPlan plan;
    int threads;
    size_t smem, ncta;
};
TcLaunch tc_launch(size_t n, size_t B);
/* The per-band shift (a sample's mean) of the fused covariance; with nonint
 * (mapped host memory) a sampled value that is not an integer is flagged. */
hyprof_status_t launch_shift(hyprof_ctx_t *ctx, const char *op, cudaStream_t st,
                             const float *d_cube, size_t n, size_t B, const uint8_t *d_mask,
                             double *d_shift, double *nonint);
hyprof_status_t gram_fused(hyprof_ctx_t *ctx, const TcLaunch &L, const float *d_cube, size_t n,
                           size_t B, const uint8_t *d_mask, size_t nvalid, double *d_shift,
                           double *partial, double *psum, double *d_A, double *d_mean,
                           double *host, cudaStream_t st);

/* ---- pca_cov_int8.cu ---- */

/* How gram_i8_kernel runs for n pixels of B bands here; ncta 0: it cannot. */
struct I8Launch {
    TcPlan plan;
    size_t smem, ncta;
};
I8Launch i8_launch(size_t n, size_t B);
hyprof_status_t gram_i8(hyprof_ctx_t *ctx, const I8Launch &L, const float *d_cube, size_t n,
                        size_t B, const uint8_t *d_mask, size_t nvalid, double *d_shift,
                        long long *acc, long long *psum, unsigned *d_bad, double *d_A,
                        double *d_mean, double *host, cudaStream_t st);

/* ---- pca_eigh.cu ---- */

/* Page-locked, device-mapped host memory for the mean and the covariance on
 * their way to the host eigh, kept for the process; one fit holds it at a
 * time (take() returns NULL to the others, which copy to pageable memory). */
class HostStage {
  public:
    HostStage() = default;
    HostStage(const HostStage &) = delete;
    HostStage &operator=(const HostStage &) = delete;
    ~HostStage();
    double *take(size_t count); /* count doubles, or NULL */

  private:
    bool held_ = false;
};

hyprof_status_t eigh_on_host(hyprof_ctx_t *ctx, const hyprof_pca_fit_args_t *a,
                             const double *d_mean, const double *d_A, cudaStream_t st,
                             PcaClock &clock, size_t tid, double *stage, bool staged);

/* ---- pca_project.cu ---- */

hyprof_status_t project_resident(hyprof_ctx_t *ctx, const char *op,
                                 const hyprof_pca_fit_args_t *a, const float *d_cube,
                                 const uint8_t *d_cmask, Pipeline &pipe, bool *done,
                                 PcaClock &clock);

/* ---- pca_host.cu ---- */

/* The current device's SM count, opt-in shared memory a block and compute
 * capability major; false when they cannot be read. */
bool device_limits(int *sms, int *optin, int *major);
/* Closes stage interval tid behind both pipeline streams, then waits for them. */
hyprof_status_t end_then_drain(hyprof_ctx_t *ctx, const char *op, Pipeline &pipe,
                               PcaClock &clock, size_t tid);

} /* namespace hyprof_pca */

#endif
