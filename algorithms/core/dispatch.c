/* The one dispatch point between backends, used by every operation. */
#include "internal.h"
#include "hyprof/registry.h"

#include <stdio.h>

#ifndef HYPROF_HAVE_CUDA
/* CPU-only builds: no device, ever. */
int hyprof_cuda_device_count(void) { return 0; }

hyprof_status_t hyprof_cuda_warm_up(int device)
{
    (void)device;
    return HYPROF_ERR_NO_DEVICE;
}

hyprof_status_t hyprof_cuda_device_info(int device, char *name, size_t name_len,
                                        size_t *total_bytes, size_t *free_bytes)
{
    (void)device;
    if (name && name_len)
        name[0] = '\0';
    if (total_bytes)
        *total_bytes = 0;
    if (free_bytes)
        *free_bytes = 0;
    return HYPROF_ERR_NO_DEVICE;
}

void *hyprof__cuda_host_alloc(size_t bytes)
{
    (void)bytes;
    return NULL;
}

void hyprof__cuda_host_free(void *p) { (void)p; }

int hyprof__cuda_is_pinned(const void *p)
{
    (void)p;
    return 0;
}
#endif

/* The CPU paths announce bands as they finish them: a failure revokes them
 * before the operation frees its output. */
static hyprof_status_t run_cpu(hyprof_ctx_t *ctx, hyprof__impl_fn cpu, void *args)
{
    ctx->used = HYPROF_BACKEND_CPU;
    hyprof_status_t st = cpu(ctx, args);
    if (st != HYPROF_OK)
        hyprof__bands_revoke(ctx);
    return st;
}

/* Why auto runs on the CPU where a CUDA path exists (only CUDA builds have
 * one): at `level` the first time in a context, debug lines after (the
 * stages of one run would repeat it). */
static void tell_fallback(hyprof_ctx_t *ctx, const char *op, const char *why,
                          hyprof_log_level_t level)
{
    if (ctx->fallback_told)
        level = HYPROF_LOG_DEBUG;
    hyprof__log(ctx, level, "%s: falling back to the CPU (%s)", op, why);
    ctx->fallback_told = 1;
}

hyprof_status_t hyprof__dispatch(hyprof_ctx_t *ctx, const char *op, hyprof__impl_fn cpu,
                                 hyprof__impl_fn cuda, void *args)
{
    if (ctx->backend == HYPROF_BACKEND_CPU)
        return run_cpu(ctx, cpu, args);

    int ndev = cuda ? hyprof_cuda_device_count() : 0;
    if (ctx->backend == HYPROF_BACKEND_CUDA) {
        if (!cuda)
            return hyprof__error(ctx, HYPROF_ERR_NO_DEVICE, op, "backend cuda requested but %s",
#ifdef HYPROF_HAVE_CUDA
                                 "this operation has no CUDA implementation yet "
                                 "(use --backend cpu or auto)"
#else
                                 "this build has no CUDA support"
#endif
            );
        if (ctx->device >= ndev)
            return hyprof__error(ctx, HYPROF_ERR_NO_DEVICE, op,
                                 "backend cuda requested but device %d does not exist "
                                 "(%d CUDA device(s) found)", ctx->device, ndev);
        ctx->used = HYPROF_BACKEND_CUDA;
        return cuda(ctx, args);
    }

    /* auto */
    if (!cuda) {
        hyprof__log(ctx, HYPROF_LOG_DEBUG, "%s: no CUDA implementation, running on the CPU",
                    op);
        return run_cpu(ctx, cpu, args);
    }
    /* Without any device, the CPU is what auto means (info); a device that
     * is asked for and missing, or one that cannot run the case, is a
     * fallback the user hears about (warning). */
    if (ctx->device >= ndev) {
        char why[96];
        snprintf(why, sizeof why, ndev ? "CUDA device %d does not exist (%d found)"
                                        : "no CUDA device found", ctx->device, ndev);
        tell_fallback(ctx, op, why, ndev ? HYPROF_LOG_WARNING : HYPROF_LOG_INFO);
        return run_cpu(ctx, cpu, args);
    }
    ctx->used = HYPROF_BACKEND_CUDA;
    hyprof_status_t st = cuda(ctx, args);
    if (st == HYPROF_ERR_DEVICE_MEMORY || st == HYPROF_ERR_NO_DEVICE) {
        tell_fallback(ctx, op, ctx->error, HYPROF_LOG_WARNING);
        ctx->error[0] = '\0';
        return run_cpu(ctx, cpu, args);
    }
    return st;
}

hyprof_status_t hyprof__dispatch_bus_bound(hyprof_ctx_t *ctx, const char *op,
                                           hyprof__impl_fn cpu, hyprof__impl_fn cuda,
                                           void *args)
{
    int threads = hyprof__threads(ctx);
    if (ctx->backend == HYPROF_BACKEND_AUTO && cuda &&
        threads >= HYPROF__BUS_BOUND_CPU_THREADS) {
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "%s: auto runs on the CPU (%d threads are faster than the copies to "
                    "the device and back)", op, threads);
        return run_cpu(ctx, cpu, args);
    }
    return hyprof__dispatch(ctx, op, cpu, cuda, args);
}

int hyprof_op_cpu_is_quicker(const hyprof_ctx_t *ctx, const hyprof_op_t *op, size_t width,
                             size_t height, size_t in_bands, size_t out_bands, double *seconds)
{
    double ns = (double)width * (double)height *
                ((double)in_bands * op->cpu_ns[0] + (double)out_bands * op->cpu_ns[1]);
    *seconds = ns * 1e-9 / hyprof__threads(ctx);
#ifdef HYPROF_HAVE_CUDA
    return (op->cpu_ns[0] > 0 || op->cpu_ns[1] > 0) && *seconds < HYPROF_CUDA_START_S;
#else
    return 0;
#endif
}
