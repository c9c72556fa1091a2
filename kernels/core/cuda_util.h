/* Private CUDA helpers shared by the .cu files of libhyprof (CUDA C++ only).
 *
 * - hyprof__cuda_select(): makes the context's device current, or fails with
 *   HYPROF_ERR_NO_DEVICE naming the id and the device count;
 *   hyprof__cuda_device_scope does the same and restores the caller's device;
 * - HYPROF_CUDA_CHECK / HYPROF_CUBLAS_CHECK / HYPROF_CUSOLVER_CHECK: turn a failed
 *   call into hyprof__error(ctx, HYPROF_ERR_DEVICE, op, "<call>: <error text>")
 *   and return it; allocation failures become HYPROF_ERR_DEVICE_MEMORY so that
 *   the dispatcher can fall back to the CPU. They expect `ctx` and `op` in scope;
 * - RAII owners (device buffer, pinned host buffer, stream, event, cuBLAS and
 *   cuSOLVER handles) so that every return path frees what was allocated; the
 *   handles' create() loads cuBLAS and cuSOLVER first (cuda_libs.h);
 * - free device memory (hyprof__cuda_mem_info, capped by $HYPROF_DEVICE_MEMORY)
 *   and the budget a chunked operation plans with (hyprof__cuda_budget);
 * - hyprof_cuda::Pipeline, the two-slot pixel-chunk pipeline used by PCA and DWT.
 *
 * Everything here is static/inline: nothing is exported from the library. */
#ifndef HYPROF_KERNELS_CUDA_UTIL_H
#define HYPROF_KERNELS_CUDA_UTIL_H

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cusolverDn.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "core/internal.h"
#include "cuda_libs.h"

/* ---- error mapping --------------------------------------------------------- */

static inline const char *hyprof__cusolver_text(cusolverStatus_t s)
{
    switch (s) {
    case CUSOLVER_STATUS_SUCCESS: return "success";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "library not initialized";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "resource allocation failed";
    case CUSOLVER_STATUS_INVALID_VALUE: return "invalid value";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUSOLVER_STATUS_MAPPING_ERROR: return "mapping error";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "internal error";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "matrix type not supported";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "unknown cuSOLVER status";
    }
}

static inline hyprof_status_t hyprof__cuda_fail(hyprof_ctx_t *ctx, const char *op,
                                                cudaError_t e, const char *call)
{
    if (e == cudaSuccess)
        return HYPROF_OK;
    /* Clear a non-sticky error so that later calls (and the CPU fallback's
     * teardown) do not see it again. */
    (void)cudaGetLastError();
    hyprof_status_t st = (e == cudaErrorMemoryAllocation) ? HYPROF_ERR_DEVICE_MEMORY
                         : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
                             ? HYPROF_ERR_NO_DEVICE
                             : HYPROF_ERR_DEVICE;
    return hyprof__error(ctx, st, op, "%s failed: %s (%s)", call, cudaGetErrorString(e),
                         cudaGetErrorName(e));
}

static inline hyprof_status_t hyprof__cublas_fail(hyprof_ctx_t *ctx, const char *op,
                                                  cublasStatus_t s, const char *call)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return HYPROF_OK;
    (void)cudaGetLastError();
    hyprof_status_t st =
        (s == CUBLAS_STATUS_ALLOC_FAILED) ? HYPROF_ERR_DEVICE_MEMORY : HYPROF_ERR_DEVICE;
    return hyprof__error(ctx, st, op, "%s failed: %s (cuBLAS status %d)", call,
                         cublasGetStatusString(s), (int)s);
}

static inline hyprof_status_t hyprof__cusolver_fail(hyprof_ctx_t *ctx, const char *op,
                                                    cusolverStatus_t s, const char *call)
{
    if (s == CUSOLVER_STATUS_SUCCESS)
        return HYPROF_OK;
    (void)cudaGetLastError();
    hyprof_status_t st =
        (s == CUSOLVER_STATUS_ALLOC_FAILED) ? HYPROF_ERR_DEVICE_MEMORY : HYPROF_ERR_DEVICE;
    return hyprof__error(ctx, st, op, "%s failed: %s (cuSOLVER status %d)", call,
                         hyprof__cusolver_text(s), (int)s);
}

/* cuBLAS and cuSOLVER loaded (they are opened on first use), or the reason they cannot be. */
static inline hyprof_status_t hyprof__cuda_libs(hyprof_ctx_t *ctx, const char *op)
{
    const char *why = NULL;
    if (hyprof__cuda_libs_load(&why) == 0)
        return HYPROF_OK;
    return hyprof__error(ctx, HYPROF_ERR_DEVICE, op, "%s", why);
}

/* `ctx` and `op` must be in scope; the enclosing function returns hyprof_status_t. */
#define HYPROF_CUDA_CHECK(call)                                                      \
    do {                                                                             \
        cudaError_t hyprof__e = (call);                                              \
        if (hyprof__e != cudaSuccess)                                                \
            return hyprof__cuda_fail(ctx, op, hyprof__e, #call);                     \
    } while (0)

#define HYPROF_CUBLAS_CHECK(call)                                                    \
    do {                                                                             \
        cublasStatus_t hyprof__s = (call);                                           \
        if (hyprof__s != CUBLAS_STATUS_SUCCESS)                                      \
            return hyprof__cublas_fail(ctx, op, hyprof__s, #call);                   \
    } while (0)

#define HYPROF_CUSOLVER_CHECK(call)                                                  \
    do {                                                                             \
        cusolverStatus_t hyprof__s = (call);                                         \
        if (hyprof__s != CUSOLVER_STATUS_SUCCESS)                                    \
            return hyprof__cusolver_fail(ctx, op, hyprof__s, #call);                 \
    } while (0)

/* Propagates any non-OK hyprof_status_t. */
#define HYPROF_TRY(expr)                                                             \
    do {                                                                             \
        hyprof_status_t hyprof__st = (expr);                                         \
        if (hyprof__st != HYPROF_OK)                                                 \
            return hyprof__st;                                                       \
    } while (0)

/* Checks the launch of the kernel just issued. */
#define HYPROF_CUDA_CHECK_LAUNCH(name)                                               \
    do {                                                                             \
        cudaError_t hyprof__e = cudaGetLastError();                                  \
        if (hyprof__e != cudaSuccess)                                                \
            return hyprof__cuda_fail(ctx, op, hyprof__e, "launch of " name);         \
    } while (0)

/* ---- device selection -------------------------------------------------------- */

/* Makes ctx->device current. No device (or no driver): HYPROF_ERR_NO_DEVICE. */
static inline hyprof_status_t hyprof__cuda_select(hyprof_ctx_t *ctx, const char *op)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return hyprof__error(ctx, HYPROF_ERR_NO_DEVICE, op, "no usable CUDA device: %s",
                             cudaGetErrorString(e));
    }
    if (count <= 0)
        return hyprof__error(ctx, HYPROF_ERR_NO_DEVICE, op, "no CUDA device found");
    if (ctx->device < 0 || ctx->device >= count)
        return hyprof__error(ctx, HYPROF_ERR_NO_DEVICE, op,
                             "CUDA device %d does not exist (%d device%s: 0..%d)", ctx->device,
                             count, count == 1 ? "" : "s", count - 1);
    e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return hyprof__error(ctx, e == cudaErrorMemoryAllocation ? HYPROF_ERR_DEVICE_MEMORY
                                                                 : HYPROF_ERR_NO_DEVICE,
                             op, "cannot use CUDA device %d: %s", ctx->device,
                             cudaGetErrorString(e));
    }
    return HYPROF_OK;
}

/* Selects ctx->device for the lifetime of the object and restores the
 * caller's current device afterwards. Declare it before every other CUDA
 * resource of a function so that it is destroyed last. */
class hyprof__cuda_device_scope {
  public:
    hyprof__cuda_device_scope() = default;
    ~hyprof__cuda_device_scope()
    {
        if (prev_ >= 0 && prev_ != cur_) {
            (void)cudaSetDevice(prev_);
            (void)cudaGetLastError();
        }
    }
    hyprof__cuda_device_scope(const hyprof__cuda_device_scope &) = delete;
    hyprof__cuda_device_scope &operator=(const hyprof__cuda_device_scope &) = delete;
    hyprof_status_t select(hyprof_ctx_t *ctx, const char *op)
    {
        int prev = -1;
        if (cudaGetDevice(&prev) != cudaSuccess) {
            (void)cudaGetLastError();
            prev = -1;
        }
        hyprof_status_t st = hyprof__cuda_select(ctx, op);
        if (st == HYPROF_OK) {
            prev_ = prev;
            cur_ = ctx->device;
        }
        return st;
    }

  private:
    int prev_ = -1, cur_ = -1;
};

/* Free and total memory of the current device (every CUDA path asks here). */
static inline hyprof_status_t hyprof__cuda_mem_info(hyprof_ctx_t *ctx, const char *op,
                                                    size_t *free_bytes, size_t *total_bytes)
{
    size_t f = 0, t = 0;
    HYPROF_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    /* $HYPROF_DEVICE_MEMORY: the tests' cap, so any GPU takes the chunked
     * and low-memory paths. */
    size_t cap = hyprof__device_memory_cap();
    if (cap && cap < t)
        t = cap;
    if (f > t)
        f = t;
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return HYPROF_OK;
}

/* Bytes of device memory a chunked operation may plan to use now: the free
 * memory less a margin for cuBLAS/cuSOLVER workspaces, the CUDA runtime and
 * other processes (5 % of free, at least 64 MiB). */
static inline hyprof_status_t hyprof__cuda_budget(hyprof_ctx_t *ctx, const char *op,
                                                  size_t *budget)
{
    size_t f = 0;
    HYPROF_TRY(hyprof__cuda_mem_info(ctx, op, &f, NULL));
    size_t margin = f / 20;
    if (margin < ((size_t)64 << 20))
        margin = (size_t)64 << 20;
    *budget = f > margin ? f - margin : 0;
    return HYPROF_OK;
}

/* Preferred chunk: the whole cube when it fits in half the budget (one
 * upload, no page-locked staging to allocate, which costs more than it saves
 * for a single pass), else about `target_bytes` per chunk. */
static inline size_t hyprof__cuda_preferred_chunk(size_t npix, size_t per_pixel, size_t budget,
                                                  size_t bands, size_t target_bytes);

/* Default chunk size: about `target_bytes` of float input per chunk. */
static inline size_t hyprof__cuda_default_chunk(size_t bands, size_t target_bytes)
{
    size_t per = bands * sizeof(float);
    size_t m = per ? target_bytes / per : 1;
    if (m < 4096)
        m = 4096;
    return m;
}

static inline size_t hyprof__cuda_preferred_chunk(size_t npix, size_t per_pixel, size_t budget,
                                                  size_t bands, size_t target_bytes)
{
    if (per_pixel && npix <= budget / 2 / per_pixel)
        return npix;
    return hyprof__cuda_default_chunk(bands, target_bytes);
}

/* ---- RAII owners -------------------------------------------------------------- */

namespace hyprof_cuda {

template <typename T> class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    ~DeviceBuffer() { reset(); }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;

    /* With a stream: stream-ordered (cudaMallocAsync, and cudaFreeAsync queued
     * after the stream's work so far, so later users of the memory wait for
     * that stream), from the device's memory pool, without cudaFree's
     * device-wide synchronisation. */
    hyprof_status_t alloc(hyprof_ctx_t *ctx, const char *op, size_t count,
                          cudaStream_t stream = NULL)
    {
        reset();
        if (count == 0)
            count = 1;
        if (count > (size_t)-1 / sizeof(T))
            return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                                 "device allocation of %zu elements overflows", count);
        void *p = NULL;
        cudaError_t e = stream ? cudaMallocAsync(&p, count * sizeof(T), stream)
                               : cudaMalloc(&p, count * sizeof(T));
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return hyprof__error(ctx,
                                 e == cudaErrorMemoryAllocation ? HYPROF_ERR_DEVICE_MEMORY
                                                                : HYPROF_ERR_DEVICE,
                                 op, "%s of %zu bytes failed: %s",
                                 stream ? "cudaMallocAsync" : "cudaMalloc", count * sizeof(T),
                                 cudaGetErrorString(e));
        }
        ptr_ = static_cast<T *>(p);
        count_ = count;
        stream_ = stream;
        return HYPROF_OK;
    }
    void reset()
    {
        if (ptr_ && stream_) {
            (void)cudaFreeAsync(ptr_, stream_);
            (void)cudaGetLastError();
        } else if (ptr_) {
            (void)cudaFree(ptr_);
        }
        ptr_ = NULL;
        count_ = 0;
        stream_ = NULL;
    }
    T *get() const { return ptr_; }
    size_t size() const { return count_; }

  private:
    T *ptr_ = NULL;
    size_t count_ = 0;
    cudaStream_t stream_ = NULL;
};

/* Page-locked host memory. try_alloc() returns false (and leaves no error) when
 * pinning fails, so callers can fall back to pageable copies. */
template <typename T> class PinnedBuffer {
  public:
    PinnedBuffer() = default;
    ~PinnedBuffer() { reset(); }
    PinnedBuffer(const PinnedBuffer &) = delete;
    PinnedBuffer &operator=(const PinnedBuffer &) = delete;

    bool try_alloc(size_t count)
    {
        reset();
        if (count == 0)
            count = 1;
        void *p = NULL;
        if (cudaMallocHost(&p, count * sizeof(T)) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        ptr_ = static_cast<T *>(p);
        return true;
    }
    void reset()
    {
        if (ptr_)
            (void)cudaFreeHost(ptr_);
        ptr_ = NULL;
    }
    T *get() const { return ptr_; }

  private:
    T *ptr_ = NULL;
};

/* A non-blocking stream; the destructor waits for its work before destroying
 * it, so buffers declared before the stream outlive the work that uses them. */
class Stream {
  public:
    Stream() = default;
    ~Stream() { reset(); }
    Stream(const Stream &) = delete;
    Stream &operator=(const Stream &) = delete;
    hyprof_status_t create(hyprof_ctx_t *ctx, const char *op)
    {
        reset();
        HYPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
        return HYPROF_OK;
    }
    void reset()
    {
        if (s_) {
            (void)cudaStreamSynchronize(s_);
            (void)cudaStreamDestroy(s_);
            (void)cudaGetLastError();
        }
        s_ = NULL;
    }
    cudaStream_t get() const { return s_; }

  private:
    cudaStream_t s_ = NULL;
};

class Event {
  public:
    Event() = default;
    ~Event() { reset(); }
    Event(const Event &) = delete;
    Event &operator=(const Event &) = delete;
    hyprof_status_t create(hyprof_ctx_t *ctx, const char *op)
    {
        reset();
        HYPROF_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming));
        return HYPROF_OK;
    }
    /* An event that only orders streams, also inside graph captures: it is
     * destroyed without waiting (waiting on an event last recorded in a
     * capture is an invalid-argument error, and nothing on the host depends
     * on it). */
    hyprof_status_t create_ordering(hyprof_ctx_t *ctx, const char *op)
    {
        HYPROF_TRY(create(ctx, op));
        wait_on_reset_ = false;
        return HYPROF_OK;
    }
    void reset()
    {
        if (e_) {
            if (wait_on_reset_)
                (void)cudaEventSynchronize(e_);
            (void)cudaEventDestroy(e_);
        }
        e_ = NULL;
        wait_on_reset_ = true;
    }
    cudaEvent_t get() const { return e_; }

  private:
    cudaEvent_t e_ = NULL;
    bool wait_on_reset_ = true;
};

class Blas {
  public:
    Blas() = default;
    ~Blas()
    {
        if (h_)
            (void)cublasDestroy(h_);
    }
    Blas(const Blas &) = delete;
    Blas &operator=(const Blas &) = delete;
    hyprof_status_t create(hyprof_ctx_t *ctx, const char *op)
    {
        HYPROF_TRY(hyprof__cuda_libs(ctx, op));
        HYPROF_CUBLAS_CHECK(cublasCreate(&h_));
        /* Plain IEEE double: no fixed-point FP64 emulation whatever the environment. */
        HYPROF_CUBLAS_CHECK(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH));
        HYPROF_CUBLAS_CHECK(cublasSetPointerMode(h_, CUBLAS_POINTER_MODE_HOST));
        return HYPROF_OK;
    }
    cublasHandle_t get() const { return h_; }

  private:
    cublasHandle_t h_ = NULL;
};

class Solver {
  public:
    Solver() = default;
    ~Solver()
    {
        if (h_)
            (void)cusolverDnDestroy(h_);
    }
    Solver(const Solver &) = delete;
    Solver &operator=(const Solver &) = delete;
    hyprof_status_t create(hyprof_ctx_t *ctx, const char *op)
    {
        HYPROF_TRY(hyprof__cuda_libs(ctx, op));
        HYPROF_CUSOLVER_CHECK(cusolverDnCreate(&h_));
        return HYPROF_OK;
    }
    cusolverDnHandle_t get() const { return h_; }

  private:
    cusolverDnHandle_t h_ = NULL;
};

/* Copies rows [p0, p0+m) of `rows` columns of a column-major host matrix with
 * leading dimension `ld` (BSQ: ld = npix, one column per band) into a dense
 * m x rows device matrix (`dst_ld` = m or, for a resident cube, npix). Uses
 * one 2-D copy when the pitch is allowed, else one copy per column. */
template <typename T>
static inline cudaError_t copy_cols_h2d(T *dst, size_t dst_ld, const T *src, size_t src_ld,
                                        size_t m, size_t cols, cudaStream_t s)
{
    if (m == 0 || cols == 0)
        return cudaSuccess;
    if (dst_ld == m && src_ld == m)
        return cudaMemcpyAsync(dst, src, m * cols * sizeof(T), cudaMemcpyHostToDevice, s);
    const size_t max_pitch = (size_t)1 << 31; /* conservative cudaDevAttrMaxPitch */
    if (src_ld * sizeof(T) < max_pitch && dst_ld * sizeof(T) < max_pitch)
        return cudaMemcpy2DAsync(dst, dst_ld * sizeof(T), src, src_ld * sizeof(T),
                                 m * sizeof(T), cols, cudaMemcpyHostToDevice, s);
    for (size_t c = 0; c < cols; ++c) {
        cudaError_t e = cudaMemcpyAsync(dst + c * dst_ld, src + c * src_ld, m * sizeof(T),
                                        cudaMemcpyHostToDevice, s);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

template <typename T>
static inline cudaError_t copy_cols_d2h(T *dst, size_t dst_ld, const T *src, size_t src_ld,
                                        size_t m, size_t cols, cudaStream_t s)
{
    if (m == 0 || cols == 0)
        return cudaSuccess;
    if (dst_ld == m && src_ld == m)
        return cudaMemcpyAsync(dst, src, m * cols * sizeof(T), cudaMemcpyDeviceToHost, s);
    const size_t max_pitch = (size_t)1 << 31;
    if (src_ld * sizeof(T) < max_pitch && dst_ld * sizeof(T) < max_pitch)
        return cudaMemcpy2DAsync(dst, dst_ld * sizeof(T), src, src_ld * sizeof(T),
                                 m * sizeof(T), cols, cudaMemcpyDeviceToHost, s);
    for (size_t c = 0; c < cols; ++c) {
        cudaError_t e = cudaMemcpyAsync(dst + c * dst_ld, src + c * src_ld, m * sizeof(T),
                                        cudaMemcpyDeviceToHost, s);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* Host-side packing of a chunk into / out of a dense staging buffer. */
template <typename T>
static inline void pack_cols(T *dst, const T *src, size_t src_ld, size_t m, size_t cols)
{
    for (size_t c = 0; c < cols; ++c)
        memcpy(dst + c * m, src + c * src_ld, m * sizeof(T));
}

template <typename T>
static inline void unpack_cols(T *dst, size_t dst_ld, const T *src, size_t m, size_t cols)
{
    for (size_t c = 0; c < cols; ++c)
        memcpy(dst + c * dst_ld, src + c * m, m * sizeof(T));
}

static inline size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }

} /* namespace hyprof_cuda */

/* Page-locks a host range for the lifetime of the object, so copies to or
 * from it run at DMA speed instead of through the driver's pageable staging
 * (and, for fresh calloc'd output, page faults inside the copy). Best effort:
 * when pinning fails the range stays pageable and everything still works. */
class HostPin {
  public:
    HostPin() = default;
    HostPin(const HostPin &) = delete;
    HostPin &operator=(const HostPin &) = delete;
    ~HostPin()
    {
        if (p_) {
            /* An early return may leave copies in flight: let them land first. */
            (void)cudaDeviceSynchronize();
            (void)cudaHostUnregister(p_);
        }
    }
    void pin(void *p, size_t bytes)
    {
        if (p && hyprof__cuda_is_pinned(p)) /* the caller's page-locked memory */
            return;
        if (p && bytes && cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess)
            p_ = p;
        else
            (void)cudaGetLastError();
    }

  private:
    void *p_ = NULL;
};

/* ---- the pixel-chunk pipeline ---------------------------------------------- */

/* The pixel-chunk pipeline shared by the CUDA PCA and DWT launchers.
 *
 * A float32 BSQ cube (column-major npix x bands, optional npix mask) is processed
 * in chunks of `m` consecutive pixels. Two slots, each with its own stream, take
 * alternate chunks, so the copies of one chunk overlap the kernels of the other.
 * With more than one chunk the host packs each chunk into page-locked staging
 * (and unpacks results from it) while the GPU works on the other slot; with one
 * chunk, or when pinning fails, plain (pageable) 2-D copies are used instead.
 * Before a slot is reused the host waits for its previous chunk, which bounds
 * the run-ahead to two chunks and keeps progress and cancellation responsive. */
namespace hyprof_cuda {

struct Slot {
    /* Buffers first: members are destroyed in reverse order, so the stream
     * (which waits for its work) goes before the memory that work uses. */
    DeviceBuffer<float> in;      /* m x bands */
    DeviceBuffer<uint8_t> mask;  /* m (only with a mask) */
    DeviceBuffer<float> out;     /* m x out_cols (only with outputs) */
    PinnedBuffer<float> pin_in;
    PinnedBuffer<uint8_t> pin_mask;
    PinnedBuffer<float> pin_out;
    size_t out_p0 = 0, out_m = 0;
    bool out_pending = false;
    Event done;
    Stream stream;
};

class Pipeline {
  public:
    Slot slot[2];

    /* out_cols = 0: no output (the caller reduces on the device). in_buffers =
     * false: no device input buffers (a resident cube is used instead). */
    hyprof_status_t init(hyprof_ctx_t *ctx, const char *op, const float *x,
                         const uint8_t *mask, size_t npix, size_t bands, size_t out_cols,
                         float *out, size_t chunk, bool in_buffers)
    {
        x_ = x;
        mask_ = mask;
        npix_ = npix;
        bands_ = bands;
        out_cols_ = out_cols;
        out_ = out;
        m_ = chunk;
        nchunks_ = div_up(npix, chunk);
        staged_ = false;
        for (int s = 0; s < 2; ++s) {
            Slot &sl = slot[s];
            HYPROF_TRY(sl.stream.create(ctx, op));
            HYPROF_TRY(sl.done.create(ctx, op));
            if (s == 1 && nchunks_ < 2)
                continue; /* one chunk: the second slot is never used */
            if (in_buffers) {
                HYPROF_TRY(sl.in.alloc(ctx, op, m_ * bands_));
                if (mask_)
                    HYPROF_TRY(sl.mask.alloc(ctx, op, m_));
            }
            if (out_cols_)
                HYPROF_TRY(sl.out.alloc(ctx, op, m_ * out_cols_));
        }
        if (nchunks_ > 1 && (in_buffers || out_cols_)) {
            staged_ = true;
            for (int s = 0; s < 2 && staged_; ++s) {
                Slot &sl = slot[s];
                if (in_buffers && !sl.pin_in.try_alloc(m_ * bands_))
                    staged_ = false;
                if (staged_ && in_buffers && mask_ && !sl.pin_mask.try_alloc(m_))
                    staged_ = false;
                if (staged_ && out_cols_ && !sl.pin_out.try_alloc(m_ * out_cols_))
                    staged_ = false;
            }
            if (!staged_)
                for (int s = 0; s < 2; ++s) {
                    slot[s].pin_in.reset();
                    slot[s].pin_mask.reset();
                    slot[s].pin_out.reset();
                }
        }
        return HYPROF_OK;
    }

    size_t chunk() const { return m_; }
    size_t nchunks() const { return nchunks_; }
    bool staged() const { return staged_; }
    cudaStream_t stream(int s) const { return slot[s].stream.get(); }

    /* Waits until slot s is free and hands its finished output to the host. */
    hyprof_status_t acquire(hyprof_ctx_t *ctx, const char *op, int s)
    {
        Slot &sl = slot[s];
        HYPROF_CUDA_CHECK(cudaEventSynchronize(sl.done.get()));
        if (sl.out_pending) {
            if (staged_)
                unpack_cols(out_ + sl.out_p0, npix_, sl.pin_out.get(), sl.out_m, out_cols_);
            sl.out_pending = false;
        }
        return HYPROF_OK;
    }

    /* Queues the copy of chunk [p0, p0+m) into slot s's input buffers. */
    hyprof_status_t upload(hyprof_ctx_t *ctx, const char *op, int s, size_t p0, size_t m)
    {
        Slot &sl = slot[s];
        cudaStream_t st = sl.stream.get();
        if (staged_) {
            pack_cols(sl.pin_in.get(), x_ + p0, npix_, m, bands_);
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(sl.in.get(), sl.pin_in.get(),
                                              m * bands_ * sizeof(float),
                                              cudaMemcpyHostToDevice, st));
            if (mask_) {
                memcpy(sl.pin_mask.get(), mask_ + p0, m);
                HYPROF_CUDA_CHECK(cudaMemcpyAsync(sl.mask.get(), sl.pin_mask.get(), m,
                                                  cudaMemcpyHostToDevice, st));
            }
        } else {
            HYPROF_CUDA_CHECK(copy_cols_h2d(sl.in.get(), m, x_ + p0, npix_, m, bands_, st));
            if (mask_)
                HYPROF_CUDA_CHECK(
                    cudaMemcpyAsync(sl.mask.get(), mask_ + p0, m, cudaMemcpyHostToDevice, st));
        }
        return HYPROF_OK;
    }

    /* Queues the copy of slot s's output (m x out_cols) to out[p0..]; with
     * staging the host copy happens in the next acquire() of the slot. */
    hyprof_status_t download(hyprof_ctx_t *ctx, const char *op, int s, size_t p0, size_t m)
    {
        Slot &sl = slot[s];
        cudaStream_t st = sl.stream.get();
        if (staged_) {
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(sl.pin_out.get(), sl.out.get(),
                                              m * out_cols_ * sizeof(float),
                                              cudaMemcpyDeviceToHost, st));
            sl.out_p0 = p0;
            sl.out_m = m;
            sl.out_pending = true;
        } else {
            HYPROF_CUDA_CHECK(copy_cols_d2h(out_ + p0, npix_, sl.out.get(), m, m, out_cols_, st));
        }
        return HYPROF_OK;
    }

    /* Marks the end of the chunk's work queued on slot s. */
    hyprof_status_t release(hyprof_ctx_t *ctx, const char *op, int s)
    {
        HYPROF_CUDA_CHECK(cudaEventRecord(slot[s].done.get(), slot[s].stream.get()));
        return HYPROF_OK;
    }

    /* Makes slot 0's stream wait for the work released on slot 1: what is
     * queued on slot 0 next (a stage's end mark) comes after both slots'. */
    hyprof_status_t join(hyprof_ctx_t *ctx, const char *op)
    {
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(slot[0].stream.get(), slot[1].done.get(), 0));
        return HYPROF_OK;
    }

    /* Waits for both slots and delivers their outputs. */
    hyprof_status_t drain(hyprof_ctx_t *ctx, const char *op)
    {
        for (int s = 0; s < 2; ++s) {
            HYPROF_TRY(acquire(ctx, op, s));
            HYPROF_CUDA_CHECK(cudaStreamSynchronize(slot[s].stream.get()));
        }
        return HYPROF_OK;
    }

  private:
    const float *x_ = NULL;
    const uint8_t *mask_ = NULL;
    float *out_ = NULL;
    size_t npix_ = 0, bands_ = 0, out_cols_ = 0, m_ = 1, nchunks_ = 0;
    bool staged_ = false;
};

/* Chunk size from the memory budget: `per_pixel` device bytes per chunk pixel,
 * `fixed` bytes needed regardless; `target` the preferred size. 0 if even one
 * pixel does not fit. */
static inline size_t plan_chunk(size_t budget, size_t fixed, size_t per_pixel, size_t target,
                                size_t npix, size_t bands)
{
    if (budget <= fixed || per_pixel == 0)
        return 0;
    size_t m = (budget - fixed) / per_pixel;
    if (m > target)
        m = target;
    if (m > npix)
        m = npix;
    /* Keep cuBLAS dimensions and m*bands comfortably inside int. */
    size_t cap = (size_t)0x7fffffff / (bands ? bands : 1);
    if (m > cap)
        m = cap;
    return m;
}

/* The chunk of a streamed operation (PCA apply, DWT, abundances): the whole
 * cube when it fits, else about `target_bytes` of input; bounded by the
 * device-memory budget at `per_pixel` bytes a pixel, and m * cap_cols kept
 * inside int. */
static inline hyprof_status_t plan_streamed_chunk(hyprof_ctx_t *ctx, const char *op,
                                                  size_t npix, size_t bands, size_t per_pixel,
                                                  size_t cap_cols, size_t target_bytes,
                                                  size_t *m)
{
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    const size_t target =
        hyprof__cuda_preferred_chunk(npix, per_pixel, budget, bands, target_bytes);
    *m = plan_chunk(budget, 0, per_pixel, target, npix, cap_cols);
    if (*m == 0)
        return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                             "not enough device memory for one pixel of %zu bands "
                             "(%zu bytes usable)",
                             bands, budget);
    return HYPROF_OK;
}

} /* namespace hyprof_cuda */

#endif
