/* hyprof core: status codes, the context, cube views.
 *
 * Every call returns a hyprof_status_t; on failure the context holds a one-line
 * message naming the operation and the bad value (hyprof_ctx_last_error).
 * The library never prints, never exits and never aborts on bad input. */
#ifndef HYPROF_CORE_H
#define HYPROF_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HYPROF_VERSION_MAJOR 0
#define HYPROF_VERSION_MINOR 1
#define HYPROF_VERSION_PATCH 0
#define HYPROF_VERSION_STRING "0.1.0"

/* The library's version, and how it was built ("cuda" or "cpu-only"). */
const char *hyprof_version(void);
const char *hyprof_build_info(void);

/* Status codes, in bands as in ArrayFire: argument/input errors, environment
 * errors, device errors, then cancellation. */
typedef enum {
    HYPROF_OK = 0,
    HYPROF_ERR_ARGUMENT,      /* a parameter value is out of range or malformed */
    HYPROF_ERR_INPUT,         /* the input data cannot be processed (size, bands, all nodata) */
    HYPROF_ERR_IO,            /* a file could not be read or written */
    HYPROF_ERR_FORMAT,        /* a file was read but its content is not what it must be */
    HYPROF_ERR_NOMEM,         /* host memory exhausted */
    HYPROF_ERR_NO_DEVICE,     /* CUDA not built in, or no usable device */
    HYPROF_ERR_DEVICE_MEMORY, /* not enough device memory */
    HYPROF_ERR_DEVICE,        /* a CUDA, cuBLAS or cuSOLVER call failed */
    HYPROF_ERR_NUMERIC,       /* a numerical method failed (eigensolver did not converge) */
    HYPROF_ERR_CANCELLED,     /* the progress callback or hyprof_ctx_cancel() asked to stop */
    HYPROF_ERR_INTERNAL
} hyprof_status_t;

const char *hyprof_status_text(hyprof_status_t status);

typedef enum {
    HYPROF_BACKEND_AUTO = 0,
    HYPROF_BACKEND_CPU,
    HYPROF_BACKEND_CUDA
} hyprof_backend_t;

const char *hyprof_backend_name(hyprof_backend_t backend);
/* Parses "auto", "cpu" or "cuda"; returns HYPROF_ERR_ARGUMENT otherwise. */
hyprof_status_t hyprof_backend_parse(const char *text, hyprof_backend_t *backend);

/* Host memory this process may still allocate, in bytes: the least of the
 * system's available memory, the cgroup's remaining limit and the process's
 * address-space and data limits (SIZE_MAX when nothing can be read). */
size_t hyprof_host_memory_available(void);
/* HYPROF_OK when `bytes` fits in hyprof_host_memory_available(); otherwise
 * HYPROF_ERR_NOMEM with "WHAT needs X MiB of memory, but only Y MiB is
 * available" in err. */
hyprof_status_t hyprof_host_memory_check(size_t bytes, const char *what, char *err, size_t len);

/* Progress: fraction in [0,1] of the current operation and a short stage name.
 * Returning non-zero asks the library to stop (HYPROF_ERR_CANCELLED). */
typedef int (*hyprof_progress_fn)(void *user, double fraction, const char *stage);

typedef enum {
    HYPROF_LOG_DEBUG = 0,
    HYPROF_LOG_INFO,
    HYPROF_LOG_WARNING
} hyprof_log_level_t;

typedef void (*hyprof_log_fn)(void *user, hyprof_log_level_t level, const char *message);

typedef struct hyprof_ctx hyprof_ctx_t;

/* A new context: backend auto (or $HYPROF_BACKEND), device 0, all threads. */
hyprof_ctx_t *hyprof_ctx_new(void);
/* Frees the context and clears the caller's pointer. */
void hyprof_ctx_free(hyprof_ctx_t **ctx);

/* An explicit backend is never overridden; with AUTO, $HYPROF_BACKEND decides. */
hyprof_status_t hyprof_ctx_set_backend(hyprof_ctx_t *ctx, hyprof_backend_t backend);
hyprof_backend_t hyprof_ctx_backend(const hyprof_ctx_t *ctx);
/* The backend the last operation actually ran on (CPU or CUDA). */
hyprof_backend_t hyprof_ctx_used_backend(const hyprof_ctx_t *ctx);
hyprof_status_t hyprof_ctx_set_device(hyprof_ctx_t *ctx, int device);
int hyprof_ctx_device(const hyprof_ctx_t *ctx);
/* 0 means all available cores. */
hyprof_status_t hyprof_ctx_set_threads(hyprof_ctx_t *ctx, int threads);
int hyprof_ctx_threads(const hyprof_ctx_t *ctx);
void hyprof_ctx_set_progress(hyprof_ctx_t *ctx, hyprof_progress_fn fn, void *user);
void hyprof_ctx_set_log(hyprof_ctx_t *ctx, hyprof_log_fn fn, void *user);
/* Told when band `band` of the running operation's output cube is final:
 * `data` holds its width*height values, which do not change before the
 * operation returns, so the caller may write them out meanwhile (the
 * hyprof executable streams them to the output file). Called once per band
 * at most, possibly from several computing threads at once (the callback
 * must be thread-safe), in no fixed band order. Operations that finish all
 * bands together (the GPU paths) need not call it: every band is final when
 * the operation returns.
 * An operation that fails calls fn(user, HYPROF_BANDS_REVOKED, NULL) before
 * it frees what it announced (possibly more than once, and also when it
 * announced nothing): the callback returns only when nothing reads an
 * announced band's data any more. */
#define HYPROF_BANDS_REVOKED ((size_t)-1)
typedef void (*hyprof_band_fn)(void *user, size_t band, const float *data);
void hyprof_ctx_set_band_done(hyprof_ctx_t *ctx, hyprof_band_fn fn, void *user);
/* Asks the running operation to stop at its next progress point.
 * Async-signal-safe: may be called from a signal handler. */
void hyprof_ctx_cancel(hyprof_ctx_t *ctx);
int hyprof_ctx_cancelled(const hyprof_ctx_t *ctx);
const char *hyprof_ctx_last_error(const hyprof_ctx_t *ctx);

/* Number of usable CUDA devices (0 when built without CUDA or none present). */
int hyprof_cuda_device_count(void);
/* Creates the CUDA context of `device` and loads cuBLAS and cuSOLVER now
 * (the library opens them on first use), the cost of a process's first
 * CUDA work (a fraction of a second), so that a caller can overlap it with
 * other work, such as reading the input (the hyprof executable does).
 * HYPROF_ERR_NO_DEVICE without that device (always in CPU-only builds),
 * HYPROF_ERR_DEVICE when the context cannot be created or the libraries
 * cannot be loaded. Thread-safe. */
hyprof_status_t hyprof_cuda_warm_up(int device);
/* Name and memory of a device, for reports and benchmark tables. */
hyprof_status_t hyprof_cuda_device_info(int device, char *name, size_t name_len,
                                        size_t *total_bytes, size_t *free_bytes);

/* ---- cubes ---------------------------------------------------------------- */

typedef enum {
    HYPROF_FLOAT32 = 0,
    HYPROF_FLOAT64,
    HYPROF_UINT8,
    HYPROF_UINT16,
    HYPROF_INT16,
    HYPROF_INT32
} hyprof_dtype_t;

size_t hyprof_dtype_size(hyprof_dtype_t dtype);
const char *hyprof_dtype_name(hyprof_dtype_t dtype);

/* A view of a width x height x bands cube. Strides are in elements, so BSQ is
 * (1, width, width*height) and BIP is (bands, width*bands, 1). The mask is
 * row-major with its own row stride: 1 = valid pixel, 0 = nodata; NULL means
 * every pixel is valid. nodata is the value written for masked pixels. */
typedef struct {
    void *data;
    hyprof_dtype_t dtype;
    size_t width, height, bands;
    ptrdiff_t stride_x, stride_y, stride_b;
    uint8_t *mask;
    ptrdiff_t mask_stride_y;
    double nodata;
    int has_nodata;
    unsigned owns; /* HYPROF_OWNS_DATA | HYPROF_OWNS_MASK: freed by hyprof_cube_free */
} hyprof_cube_t;

#define HYPROF_OWNS_DATA 1u
#define HYPROF_OWNS_MASK 2u
#define HYPROF_OWNS_PINNED 4u /* the data is page-locked (hyprof_cube_alloc_pinned) */

/* A view on caller memory laid out band-sequentially (no ownership). */
hyprof_cube_t hyprof_cube_bsq(void *data, hyprof_dtype_t dtype, size_t width,
                              size_t height, size_t bands);
/* Allocates a zeroed BSQ cube (and no mask). */
hyprof_status_t hyprof_cube_alloc(hyprof_cube_t *cube, hyprof_dtype_t dtype,
                                  size_t width, size_t height, size_t bands);
/* Allocates a mask of width*height, all valid, owned by the cube. */
hyprof_status_t hyprof_cube_alloc_mask(hyprof_cube_t *cube);
void hyprof_cube_free(hyprof_cube_t *cube);

/* ---- page-locked host memory --------------------------------------------
 * A CUDA device copies to and from host memory at the full speed of its link
 * only when that memory is page-locked. The library copies pageable cubes
 * through page-locked staging buffers of its own, and the host's copies into
 * and out of them then bound a large operation: on a two-GPU host a
 * 1.3 GB W-MCD moves 2.6 GB through host memory. A caller that runs
 * operations on large cubes repeatedly can give the library page-locked
 * memory instead:
 *   inputs   a cube of hyprof_cube_alloc_pinned (or any memory the caller
 *            page-locked with CUDA) goes to the devices directly;
 *   outputs  with hyprof_pinned_cache_set(bytes > 0), the operations that
 *            may run on CUDA allocate their output cubes page-locked, and
 *            the devices copy into them directly (EMP and W-MCD).
 * Page-locking is slow (of the order of 0.1 s a GB) and takes memory from
 * the rest of the system, so the memory of freed page-locked cubes is kept
 * for the next ones, up to the cache's limit, for the process. Without CUDA
 * or a device, these are plain allocations. */

/* Like hyprof_cube_alloc, but page-locked when a CUDA device is present, and
 * the contents are undefined (memory may come back from the cache).
 * hyprof_cube_free returns the memory to the cache (or frees it). */
hyprof_status_t hyprof_cube_alloc_pinned(hyprof_cube_t *cube, hyprof_dtype_t dtype,
                                         size_t width, size_t height, size_t bands);
/* Process-wide: the page-locked memory freed cubes may leave in the cache
 * (default 0: none, and outputs pageable). Lowering it frees the excess. */
void hyprof_pinned_cache_set(size_t bytes);
size_t hyprof_pinned_cache_limit(void);
/* Page-locked bytes in the cache now, held for the next cube. */
size_t hyprof_pinned_cache_bytes(void);

/* Checks sizes and strides; returns HYPROF_ERR_ARGUMENT with a reason. */
hyprof_status_t hyprof_cube_check(const hyprof_cube_t *cube, char *why, size_t why_len);
/* True when the cube is float32 BSQ with no gaps (what the kernels want). */
int hyprof_cube_is_f32_bsq(const hyprof_cube_t *cube);
/* Address of element (x, y, b). */
void *hyprof_cube_at(const hyprof_cube_t *cube, size_t x, size_t y, size_t b);
double hyprof_cube_get(const hyprof_cube_t *cube, size_t x, size_t y, size_t b);
int hyprof_cube_valid(const hyprof_cube_t *cube, size_t x, size_t y);
/* Views (no copy): one band, a window. The mask follows the window. */
hyprof_cube_t hyprof_cube_band(const hyprof_cube_t *cube, size_t b);
hyprof_status_t hyprof_cube_window(const hyprof_cube_t *cube, size_t x0, size_t y0,
                                   size_t width, size_t height, hyprof_cube_t *view);
/* Copies any view into a new float32 BSQ cube; the mask is copied too. */
hyprof_status_t hyprof_cube_to_f32_bsq(const hyprof_cube_t *cube, hyprof_cube_t *out);
/* Marks as nodata every pixel where any band is NaN, infinite or equal to the
 * cube's nodata value (creating the mask if needed). Returns the valid count. */
size_t hyprof_cube_mask_invalid(hyprof_cube_t *cube);
size_t hyprof_cube_count_valid(const hyprof_cube_t *cube);
/* 1 when every value of the cube is finite (always for integer types), else
 * 0; masked pixels are read too. Rows are checked in parallel on `threads`
 * threads (0: all). One pass over the data: a caller that must mask NaN and
 * infinite values (hyprof_cube_mask_invalid) skips that work when it is 1. */
int hyprof_cube_all_finite(const hyprof_cube_t *cube, int threads);

#ifdef __cplusplus
}
#endif
#endif
