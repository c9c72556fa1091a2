/* The context: backend choice, threads, progress, cancellation, last error. */
#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

hyprof_ctx_t *hyprof_ctx_new(void)
{
    hyprof_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    ctx->backend = HYPROF_BACKEND_AUTO;
    ctx->used = HYPROF_BACKEND_CPU;
    ctx->progress_hi = 1.0;
    atomic_init(&ctx->cancel, 0);
    /* The environment overrides auto only; an unknown value is ignored here
     * and reported by the CLI, which knows how to say so. */
    hyprof_backend_t env;
    if (hyprof__env_backend(&env))
        ctx->backend = env;
    return ctx;
}

void hyprof_ctx_free(hyprof_ctx_t **ctx)
{
    if (ctx && *ctx) {
        free(*ctx);
        *ctx = NULL;
    }
}

hyprof_status_t hyprof_ctx_set_backend(hyprof_ctx_t *ctx, hyprof_backend_t backend)
{
    if (backend != HYPROF_BACKEND_AUTO && backend != HYPROF_BACKEND_CPU &&
        backend != HYPROF_BACKEND_CUDA)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, "context", "unknown backend %d",
                             (int)backend);
    if (backend == HYPROF_BACKEND_AUTO) {
        hyprof_backend_t env;
        if (hyprof__env_backend(&env))
            backend = env;
    }
    ctx->backend = backend;
    return HYPROF_OK;
}

hyprof_backend_t hyprof_ctx_backend(const hyprof_ctx_t *ctx) { return ctx->backend; }
hyprof_backend_t hyprof_ctx_used_backend(const hyprof_ctx_t *ctx) { return ctx->used; }

hyprof_status_t hyprof_ctx_set_device(hyprof_ctx_t *ctx, int device)
{
    if (device < 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, "context",
                             "device %d is negative", device);
    ctx->device = device;
    return HYPROF_OK;
}

int hyprof_ctx_device(const hyprof_ctx_t *ctx) { return ctx->device; }

hyprof_status_t hyprof_ctx_set_threads(hyprof_ctx_t *ctx, int threads)
{
    if (threads < 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, "context",
                             "thread count %d is negative", threads);
    ctx->threads = threads;
    return HYPROF_OK;
}

int hyprof_ctx_threads(const hyprof_ctx_t *ctx) { return ctx->threads; }

void hyprof_ctx_set_progress(hyprof_ctx_t *ctx, hyprof_progress_fn fn, void *user)
{
    ctx->progress = fn;
    ctx->progress_user = user;
}

void hyprof_ctx_set_band_done(hyprof_ctx_t *ctx, hyprof_band_fn fn, void *user)
{
    ctx->band_done = fn;
    ctx->band_user = user;
}

void hyprof__band_done(hyprof_ctx_t *ctx, size_t band, const float *data)
{
    if (ctx->band_done)
        ctx->band_done(ctx->band_user, band, data);
}

void hyprof_ctx_set_log(hyprof_ctx_t *ctx, hyprof_log_fn fn, void *user)
{
    ctx->log = fn;
    ctx->log_user = user;
}

void hyprof_ctx_cancel(hyprof_ctx_t *ctx) { atomic_store(&ctx->cancel, 1); }
int hyprof_ctx_cancelled(const hyprof_ctx_t *ctx)
{
    return atomic_load((hyprof__atomic_int *)&ctx->cancel);
}
const char *hyprof_ctx_last_error(const hyprof_ctx_t *ctx) { return ctx->error; }

hyprof_status_t hyprof__error(hyprof_ctx_t *ctx, hyprof_status_t status, const char *op,
                              const char *fmt, ...)
{
    if (!ctx)
        return status;
    int n = snprintf(ctx->error, sizeof ctx->error, "%s: ", op ? op : "hyprof");
    if (n < 0 || (size_t)n >= sizeof ctx->error)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error + n, sizeof ctx->error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void hyprof__log(hyprof_ctx_t *ctx, hyprof_log_level_t level, const char *fmt, ...)
{
    if (!ctx || !ctx->log)
        return;
    /* The stack buffer serves the usual line; a longer one (the CUDA paths'
     * stage lines) is formatted again on the heap rather than cut. */
    char buf[1024], *msg = buf;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof buf && (msg = malloc((size_t)n + 1)) != NULL)
        vsnprintf(msg, (size_t)n + 1, fmt, again);
    else
        msg = buf; /* fits, or no memory: the cut line */
    va_end(again);
    ctx->log(ctx->log_user, level, msg);
    if (msg != buf)
        free(msg);
}

hyprof_status_t hyprof__progress(hyprof_ctx_t *ctx, double fraction, const char *stage)
{
    if (hyprof_ctx_cancelled(ctx))
        return hyprof__error(ctx, HYPROF_ERR_CANCELLED, stage, "cancelled");
    if (!ctx->progress)
        return HYPROF_OK;
    if (!(fraction >= 0.0))
        fraction = 0.0;
    if (fraction > 1.0)
        fraction = 1.0;
    double f = ctx->progress_lo + fraction * (ctx->progress_hi - ctx->progress_lo);
    if (ctx->progress(ctx->progress_user, f, stage)) {
        hyprof_ctx_cancel(ctx);
        return hyprof__error(ctx, HYPROF_ERR_CANCELLED, stage, "cancelled");
    }
    return HYPROF_OK;
}

void hyprof__progress_push(hyprof_ctx_t *ctx, double a, double b, double saved[2])
{
    saved[0] = ctx->progress_lo;
    saved[1] = ctx->progress_hi;
    double span = ctx->progress_hi - ctx->progress_lo;
    ctx->progress_lo = saved[0] + a * span;
    ctx->progress_hi = saved[0] + b * span;
}

void hyprof__progress_pop(hyprof_ctx_t *ctx, const double saved[2])
{
    ctx->progress_lo = saved[0];
    ctx->progress_hi = saved[1];
}

/* The threads an OpenMP region of this context uses: the count asked for, at
 * most one a processor. More threads than processors compute nothing faster,
 * and each one's stack and libgomp's per-thread state can exhaust a memory
 * limit (libgomp aborts when it cannot create a thread). */
int hyprof__threads(const hyprof_ctx_t *ctx)
{
#ifdef _OPENMP
    int procs = omp_get_num_procs();
    if (ctx->threads > 0)
        return ctx->threads < procs ? ctx->threads : procs;
    return omp_get_max_threads();
#else
    (void)ctx;
    return 1;
#endif
}

float hyprof__nodata_f32(const hyprof_cube_t *in)
{
    return in->has_nodata ? (float)in->nodata : NAN;
}

int hyprof__progress_omp(hyprof_ctx_t *ctx, double fraction, const char *stage)
{
    /* Any thread may be the one that finishes work (with dynamic schedules
     * one thread can take every task), so any thread reports, one at a time. */
    int stop;
    #pragma omp critical(hyprof_progress)
    stop = hyprof__progress(ctx, fraction, stage) != HYPROF_OK;
    return stop;
}
