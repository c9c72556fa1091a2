/* Private to libhyprof: the context's insides, error and progress helpers and
 * the dispatch between backends. Included by algorithms/ and kernels/. */
#ifndef HYPROF_INTERNAL_H
#define HYPROF_INTERNAL_H

#include "hyprof/core.h"

#ifdef __cplusplus
#include <atomic>
typedef std::atomic<int> hyprof__atomic_int;
extern "C" {
#else
#include <stdatomic.h>
typedef atomic_int hyprof__atomic_int;
#endif

#if defined(__GNUC__)
#define HYPROF_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define HYPROF_PRINTF(f, a)
#endif

struct hyprof_ctx {
    hyprof_backend_t backend;   /* requested (after $HYPROF_BACKEND) */
    hyprof_backend_t used;      /* what the last operation ran on */
    int device;
    int threads;                /* 0: all */
    hyprof_progress_fn progress;
    void *progress_user;
    hyprof_log_fn log;
    void *log_user;
    hyprof_band_fn band_done;
    void *band_user;
    hyprof__atomic_int cancel;
    /* Nested stages report into [lo, hi] of the caller's progress range. */
    double progress_lo, progress_hi;
    int fallback_told;          /* auto has said once why it runs on the CPU */
    char error[1024];
};

/* Records "op: message" as the last error and returns status. */
hyprof_status_t hyprof__error(hyprof_ctx_t *ctx, hyprof_status_t status, const char *op,
                              const char *fmt, ...) HYPROF_PRINTF(4, 5);
void hyprof__log(hyprof_ctx_t *ctx, hyprof_log_level_t level, const char *fmt, ...)
    HYPROF_PRINTF(3, 4);
/* Reports progress (fraction of the current stage range); returns
 * HYPROF_ERR_CANCELLED (with the error text set) if asked to stop. */
hyprof_status_t hyprof__progress(hyprof_ctx_t *ctx, double fraction, const char *stage);
/* The same from inside an OpenMP region: calls to the callback are
 * serialised. Returns non-zero to stop. */
int hyprof__progress_omp(hyprof_ctx_t *ctx, double fraction, const char *stage);
/* Narrows the progress range to [a, b] of the current one; returns the old
 * range in *saved (two doubles) for hyprof__progress_pop. */
void hyprof__progress_push(hyprof_ctx_t *ctx, double a, double b, double saved[2]);
void hyprof__progress_pop(hyprof_ctx_t *ctx, const double saved[2]);
/* Tells the caller that band `band` of the operation's result cube is final
 * (see hyprof_ctx_set_band_done); only for the cube the operation returns,
 * never for an intermediate one. */
void hyprof__band_done(hyprof_ctx_t *ctx, size_t band, const float *data);
/* Tells the caller that the announced bands are about to be freed (a failed
 * operation); returns once the caller no longer reads them. */
void hyprof__bands_revoke(hyprof_ctx_t *ctx);
/* OpenBLAS's thread count set to `threads` (blas.c); returns the count
 * before, for hyprof__blas_threads_restore. No-ops with another CBLAS. */
int hyprof__blas_threads_set(int threads);
void hyprof__blas_threads_restore(int before);
/* Thread count for OpenMP regions. */
int hyprof__threads(const hyprof_ctx_t *ctx);

/* The environment switches (env.c): whether $HYPROF_BACKEND names a backend
 * (then *backend is it; an unknown value is reported by the CLI); the lowest log level passed on
 * ($HYPROF_LOG, default warning); whether it is debug (stage traces); the
 * device-memory cap in bytes ($HYPROF_DEVICE_MEMORY, 0: none). */
int hyprof__env_backend(hyprof_backend_t *backend);
hyprof_log_level_t hyprof__log_threshold(void);
int hyprof__log_debug(void);
size_t hyprof__device_memory_cap(void);

/* One backend implementation of an operation step: both backends take the
 * same argument struct, private to the operation. */
typedef hyprof_status_t (*hyprof__impl_fn)(hyprof_ctx_t *ctx, void *args);

/* The dispatch point. With CUDA requested, runs `cuda` or fails (no
 * fallback, so a test can prove the GPU path ran). With AUTO, runs `cuda` when
 * a device exists and falls back to `cpu` (saying so in the log) when the
 * device is missing or short of memory. `cuda` is NULL in CPU-only builds. */
hyprof_status_t hyprof__dispatch(hyprof_ctx_t *ctx, const char *op, hyprof__impl_fn cpu,
                                 hyprof__impl_fn cuda, void *args);
/* The dispatch point of an operation whose CUDA path is bound by the bus
 * (copying its input to the device and its output back takes longer than
 * its kernels: the spectral DWT). With AUTO it runs on the CPU when the
 * context has HYPROF__BUS_BOUND_CPU_THREADS threads or more, which are
 * faster than the copies at every measured size (bench/NOTES.md); else as
 * hyprof__dispatch. */
#define HYPROF__BUS_BOUND_CPU_THREADS 8
hyprof_status_t hyprof__dispatch_bus_bound(hyprof_ctx_t *ctx, const char *op,
                                           hyprof__impl_fn cpu, hyprof__impl_fn cuda,
                                           void *args);

/* Declares a CUDA implementation that exists only in CUDA builds. */
#ifdef HYPROF_HAVE_CUDA
#define HYPROF_CUDA_IMPL(fn) (fn)
#else
#define HYPROF_CUDA_IMPL(fn) ((hyprof__impl_fn)0)
#endif

/* Validates an input cube for an operation (non-empty, sane strides) and
 * returns a float32 BSQ version of it: `*bsq` points either to `in` itself or
 * to `tmp`, which the caller frees with hyprof_cube_free. */
hyprof_status_t hyprof__input_f32(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *in,
                                  hyprof_cube_t *tmp, const hyprof_cube_t **bsq);

/* Gives dst (same width and height) a copy of src's mask, and its nodata
 * value (NaN when src has masked pixels but declared no nodata). */
hyprof_status_t hyprof__cube_copy_mask(hyprof_cube_t *dst, const hyprof_cube_t *src);

/* w * h * b elements of dtype in bytes; 0 on overflow or an unknown type. */
int hyprof__cube_bytes(hyprof_dtype_t dtype, size_t width, size_t height, size_t bands,
                       size_t *bytes);

/* Allocates an operation's output cube: page-locked (from the cache of
 * hyprof_pinned_cache_set, contents undefined: the operation writes every
 * element) when that cache is on and the operation may run on CUDA, else as
 * hyprof_cube_alloc. */
hyprof_status_t hyprof__cube_alloc_out(hyprof_ctx_t *ctx, hyprof_cube_t *cube, hyprof_dtype_t dtype,
                                       size_t width, size_t height, size_t bands);
/* Host scratch an operation copies to the device (EAP's quantised levels):
 * from the page-locked cache under the same rule as hyprof__cube_alloc_out,
 * else malloc'd; freed (or returned to the cache) by hyprof__host_scratch_free. */
void *hyprof__host_scratch(hyprof_ctx_t *ctx, size_t bytes);
void hyprof__host_scratch_free(void *p);
/* Returns a block of alloc_locked to the cache (hyprof_cube_free). */
void hyprof__pinned_release(void *data);

/* Page-locked host memory for every device (portable), NULL when it cannot be
 * had (no CUDA build, no device, the system's locked-memory limit); its free;
 * whether p lies in page-locked memory (then copies from or to it need no
 * staging). CPU-only builds: NULL, nothing, 0. */
void *hyprof__cuda_host_alloc(size_t bytes);
void hyprof__cuda_host_free(void *p);
int hyprof__cuda_is_pinned(const void *p);

/* The value masked pixels receive in float outputs: the input's nodata, or NaN. */
float hyprof__nodata_f32(const hyprof_cube_t *in);

#ifdef __cplusplus
}
#endif
#endif
