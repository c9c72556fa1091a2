/* Page-locked host memory (include/hyprof/core.h): hyprof_cube_alloc_pinned
 * and the process-wide cache of page-locked blocks that large outputs of
 * operations running on CUDA are taken from (hyprof_pinned_cache_set).
 *
 * Why a cache: page-locking fresh memory costs more than the copies it
 * speeds up, so blocks are locked once and handed out again by best fit. */
#include "internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 32
/* Each block starts with its size, HEADER bytes before the cube's data (a
 * multiple of any element's alignment and of a cache line). */
#define HEADER 64

typedef struct {
    void *p;
    size_t bytes;
} block_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t limit;            /* bytes the idle blocks may hold */
static size_t idle_bytes;       /* bytes they hold */
static block_t idle[MAX_BLOCKS];
static size_t nidle;

/* Drops idle blocks, largest first, until they hold at most `keep` bytes.
 * Called with the lock held. */
static void trim(size_t keep)
{
    while (idle_bytes > keep && nidle > 0) {
        size_t big = 0;
        for (size_t i = 1; i < nidle; ++i)
            if (idle[i].bytes > idle[big].bytes)
                big = i;
        hyprof__cuda_host_free(idle[big].p);
        idle_bytes -= idle[big].bytes;
        idle[big] = idle[--nidle];
    }
}

void hyprof_pinned_cache_set(size_t bytes)
{
    pthread_mutex_lock(&lock);
    limit = bytes;
    trim(limit);
    pthread_mutex_unlock(&lock);
}

size_t hyprof_pinned_cache_limit(void)
{
    pthread_mutex_lock(&lock);
    size_t l = limit;
    pthread_mutex_unlock(&lock);
    return l;
}

size_t hyprof_pinned_cache_bytes(void)
{
    pthread_mutex_lock(&lock);
    size_t b = idle_bytes;
    pthread_mutex_unlock(&lock);
    return b;
}

/* The smallest idle block of at least `bytes` and at most twice that (a far
 * larger one is left for a larger cube), or a freshly locked one; NULL when
 * locking fails (no device, or the system's limit on locked memory). */
static void *take(size_t bytes, size_t *got)
{
    pthread_mutex_lock(&lock);
    size_t best = nidle;
    for (size_t i = 0; i < nidle; ++i)
        if (idle[i].bytes >= bytes && idle[i].bytes / 2 <= bytes &&
            (best == nidle || idle[i].bytes < idle[best].bytes))
            best = i;
    if (best < nidle) {
        void *p = idle[best].p;
        *got = idle[best].bytes;
        idle_bytes -= *got;
        idle[best] = idle[--nidle];
        pthread_mutex_unlock(&lock);
        return p;
    }
    pthread_mutex_unlock(&lock);
    *got = bytes;
    return hyprof__cuda_host_alloc(bytes);
}

/* Back to the cache (or freed): the data of a cube from alloc_locked. */
void hyprof__pinned_release(void *data)
{
    if (!data)
        return;
    void *p = (char *)data - HEADER;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    pthread_mutex_lock(&lock);
    if (nidle == MAX_BLOCKS)
        trim(0);
    if (bytes <= limit) {
        idle[nidle].p = p;
        idle[nidle].bytes = bytes;
        ++nidle;
        idle_bytes += bytes;
        trim(limit);
        p = NULL;
    }
    pthread_mutex_unlock(&lock);
    if (p)
        hyprof__cuda_host_free(p);
}

/* The data of `bytes` in a page-locked block (its size in the header), or
 * NULL when locking failed. `bytes` <= SIZE_MAX - HEADER. */
static void *take_data(size_t bytes)
{
    size_t got = 0;
    char *p = take(bytes + HEADER, &got);
    if (!p)
        return NULL;
    memcpy(p, &got, sizeof got);
    return p + HEADER;
}

/* Whether an operation on ctx takes its outputs and scratch from the cache:
 * the cache is on and a device may run it. */
static int cache_applies(const hyprof_ctx_t *ctx)
{
    return hyprof_pinned_cache_limit() > 0 && ctx->backend != HYPROF_BACKEND_CPU &&
           hyprof_cuda_device_count() > ctx->device;
}

/* A cube of page-locked memory, or NULL data when locking failed. */
static hyprof_status_t alloc_locked(hyprof_cube_t *cube, hyprof_dtype_t dtype, size_t width,
                                    size_t height, size_t bands)
{
    size_t bytes;
    *cube = hyprof_cube_bsq(NULL, dtype, width, height, bands);
    if (!hyprof__cube_bytes(dtype, width, height, bands, &bytes))
        return HYPROF_ERR_ARGUMENT;
    if (bytes > SIZE_MAX - HEADER)
        return HYPROF_ERR_ARGUMENT;
    cube->data = take_data(bytes);
    if (cube->data)
        cube->owns = HYPROF_OWNS_DATA | HYPROF_OWNS_PINNED;
    return HYPROF_OK;
}

hyprof_status_t hyprof_cube_alloc_pinned(hyprof_cube_t *cube, hyprof_dtype_t dtype, size_t width,
                                         size_t height, size_t bands)
{
    hyprof_status_t st = alloc_locked(cube, dtype, width, height, bands);
    if (st != HYPROF_OK || cube->data)
        return st;
    return hyprof_cube_alloc(cube, dtype, width, height, bands); /* plain memory */
}

/* Scratch that goes to the device: a block of the cache (sized in its
 * header) when the cache is on and a device may run the operation, else
 * malloc'd memory behind a header of size 0. */
void *hyprof__host_scratch(hyprof_ctx_t *ctx, size_t bytes)
{
    if (bytes > SIZE_MAX - HEADER)
        return NULL;
    void *data = cache_applies(ctx) ? take_data(bytes) : NULL;
    if (data)
        return data;
    char *p = malloc(bytes + HEADER);
    if (!p)
        return NULL;
    const size_t none = 0; /* malloc'd: hyprof__host_scratch_free frees it */
    memcpy(p, &none, sizeof none);
    return p + HEADER;
}

void hyprof__host_scratch_free(void *data)
{
    if (!data)
        return;
    size_t got;
    memcpy(&got, (char *)data - HEADER, sizeof got);
    if (got)
        hyprof__pinned_release(data);
    else
        free((char *)data - HEADER);
}

hyprof_status_t hyprof__cube_alloc_out(hyprof_ctx_t *ctx, hyprof_cube_t *cube, hyprof_dtype_t dtype,
                                       size_t width, size_t height, size_t bands)
{
    if (cache_applies(ctx)) {
        hyprof_status_t st = alloc_locked(cube, dtype, width, height, bands);
        if (st != HYPROF_OK || cube->data)
            return st;
    }
    return hyprof_cube_alloc(cube, dtype, width, height, bands);
}
