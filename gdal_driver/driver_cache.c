/* The HYPROF driver's results: computed once per process, kept in a cache
 * bounded by the HYPROF_CACHE_MAX configuration option (bytes, with K/M/G
 * suffixes, or a percentage of RAM; default 25 % of RAM, 1 GB when RAM is
 * unknown) and evicted least recently used first. A result being read
 * (pinned) is never evicted, nor the most recently used one, so a result larger than the
 * limit still serves its reads until another takes its place.
 *
 * A result is computed only from the files the dataset was opened on (their
 * stamps are compared before and after reading them) and after checking that
 * the input and the result fit in memory; a result is handed out only to a
 * dataset of its size, band count and type. */
#include "driver.h"
#include "raster_io.h"

#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    hyprof_gdal_result_t res; /* first: the pointer handed out */
    char *key;
    int ready;
    unsigned pins;
    unsigned long last_use;
    size_t bytes;
    struct entry *next;
} entry_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static entry_t *entries;
static unsigned long ticks, computations;
static size_t total;

static size_t cache_limit(void)
{
    GIntBig ram = CPLGetUsablePhysicalRAM();
    size_t def = ram > 0 ? (size_t)(ram / 4) : ((size_t)1 << 30);
    const char *v = CPLGetConfigOption("HYPROF_CACHE_MAX", NULL);
    if (!v || !*v)
        return def;
    char *end = NULL;
    double n = CPLStrtod(v, &end);
    while (*end == ' ')
        end++;
    double unit = 1.0;
    switch (*end) {
    case '%': unit = ram > 0 ? (double)ram / 100.0 : 0.0; break;
    case 'k': case 'K': unit = 1024.0; break;
    case 'm': case 'M': unit = 1024.0 * 1024.0; break;
    case 'g': case 'G': unit = 1024.0 * 1024.0 * 1024.0; break;
    case '\0': break;
    default: unit = -1.0;
    }
    if (end == v || n < 0 || unit < 0) {
        CPLError(CE_Warning, CPLE_IllegalArg,
                 "HYPROF: HYPROF_CACHE_MAX='%s' is not a size (bytes, 500M, 2G, 25%%); "
                 "using %zu bytes", v, def);
        return def;
    }
    double bytes = n * unit;
    return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

/* The library's log as GDAL messages: warnings as CE_Warning, the rest (the
 * stage traces of HYPROF_LOG=debug included) as CPLDebug("HYPROF"). */
static void log_to_gdal(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    if (level >= HYPROF_LOG_WARNING)
        CPLError(CE_Warning, CPLE_AppDefined, "HYPROF: %s", message);
    else
        CPLDebug("HYPROF", "%s", message);
}

/* Each stage the computation enters, once, as CPLDebug("HYPROF", "stage
 * NAME"): what a test counts to tell that something was computed. */
static int stage_to_gdal(void *user, double fraction, const char *stage)
{
    char *last = user;
    (void)fraction;
    if (stage && strncmp(stage, last, 63) != 0) {
        CPLDebug("HYPROF", "stage %s", stage);
        snprintf(last, 64, "%s", stage);
    }
    return 0;
}

static hyprof_ctx_t *make_ctx(const hyprof_gdal_source_t *src, char *stage)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_backend_t b = HYPROF_BACKEND_AUTO;
    if (!ctx)
        return NULL;
    hyprof_ctx_set_log(ctx, log_to_gdal, NULL);
    hyprof_ctx_set_progress(ctx, stage_to_gdal, stage);
    hyprof_backend_parse(hyprof_args_str(src->common, "backend"), &b);
    hyprof_ctx_set_backend(ctx, b);
    hyprof_ctx_set_device(ctx, (int)hyprof_args_int(src->common, "device"));
    hyprof_ctx_set_threads(ctx, (int)hyprof_args_int(src->common, "threads"));
    return ctx;
}

/* Before reading anything: the files are those the dataset was opened on,
 * and the input and result fit in the memory this process may allocate. */
static int can_compute(const hyprof_gdal_source_t *src)
{
    if (!hyprof_gdal_source_unchanged(src))
        return 0;
    double need = hyprof_gdal_source_bytes(src, src->bands ? (size_t)src->bands
                                                           : (size_t)src->in_bands);
    size_t avail = hyprof_host_memory_available();
    if (need > (double)avail) {
        CPLError(CE_Failure, CPLE_OutOfMemory,
                 "HYPROF: computing %s on '%s' needs %.1f MiB of memory for its input and "
                 "result, but only %.1f MiB is available", src->op->name, src->input,
                 need / 1048576.0, avail / 1048576.0);
        return 0;
    }
    return 1;
}

static int read_input(hyprof_ctx_t *ctx, const hyprof_gdal_source_t *src, hyprof_raster_t *in)
{
    size_t n = strlen(src->input) + 1024; /* the reader's messages quote the name */
    char *err = CPLMalloc(n);
    hyprof_status_t st = hyprof_raster_read(ctx, src->input, NULL, in, err, n);
    if (st != HYPROF_OK)
        CPLError(CE_Failure, CPLE_FileIO, "HYPROF: %s", err);
    CPLFree(err);
    return st == HYPROF_OK;
}

/* The registry's operation, or the driver's classify (which the registry
 * leaves to the CLI); a CPLError on failure. */
static hyprof_status_t run(hyprof_ctx_t *ctx, const hyprof_gdal_source_t *src,
                           const hyprof_cube_t *in, hyprof_result_t *out)
{
    if (!src->op->run)
        return hyprof_gdal_classify_run(ctx, src, in, out) ? HYPROF_OK : HYPROF_ERR_INPUT;
    hyprof_status_t st = hyprof_op_run(ctx, src->op, src->args, in, out);
    if (st != HYPROF_OK)
        CPLError(CE_Failure, CPLE_AppDefined, "HYPROF: %s", hyprof_ctx_last_error(ctx));
    return st;
}

/* Outside the lock: read the input, run the operation, turn the bands into
 * what the CLI writes. */
static int compute(const hyprof_gdal_source_t *src, hyprof_gdal_result_t *out)
{
    hyprof_result_init(&out->result);
    if (!can_compute(src))
        return 0;
    char stage[64] = "";
    hyprof_ctx_t *ctx = make_ctx(src, stage);
    hyprof_raster_t in;
    if (!ctx) {
        CPLError(CE_Failure, CPLE_OutOfMemory, "HYPROF: out of memory");
        return 0;
    }
    if (!read_input(ctx, src, &in)) {
        hyprof_ctx_free(&ctx);
        return 0;
    }
    CPLDebug("HYPROF", "computing %s on %s", src->op->name, src->input);
    hyprof_status_t st = run(ctx, src, &in.cube, &out->result);
    hyprof_raster_free(&in);
    if (st == HYPROF_OK && !hyprof_gdal_source_unchanged(src)) /* changed while read */
        st = HYPROF_ERR_INPUT;
    hyprof_cube_t *c = &out->result.cube;
    if (st == HYPROF_OK) {
        for (size_t b = 0; b < c->bands; b++) /* in place: same index in and out */
            hyprof_result_band_f32(c, b, (float *)c->data + b * c->width * c->height);
        c->nodata = HYPROF_FLOAT_NODATA;
        out->backend = hyprof_backend_name(hyprof_ctx_used_backend(ctx));
    } else {
        hyprof_result_free(&out->result);
    }
    hyprof_ctx_free(&ctx);
    return st == HYPROF_OK;
}

/* A result serves a dataset only with the dataset's size, band count and
 * type: reading it otherwise would read outside it or give other pixels. */
static int fits(const hyprof_gdal_result_t *res, const hyprof_gdal_source_t *src)
{
    const hyprof_cube_t *c = &res->result.cube;
    if (c->width == (size_t)src->width && c->height == (size_t)src->height &&
        (!src->bands || c->bands == (size_t)src->bands) && c->dtype == HYPROF_FLOAT32 && c->data)
        return 1;
    CPLError(CE_Failure, CPLE_AppDefined,
             "HYPROF: %s gave a %zux%zux%zu result, but the dataset is %dx%dx%d float32 "
             "(a bug: refusing to read it)", src->op->name, c->width, c->height, c->bands,
             src->width, src->height, src->bands);
    return 0;
}

static void unlink_entry(entry_t *e)
{
    for (entry_t **p = &entries; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
}

static void free_entry(entry_t *e)
{
    hyprof_result_free(&e->res.result);
    CPLFree(e->key);
    CPLFree(e);
}

/* Under the lock: least recently used first, until under the limit; the
 * most recently used one stays. */
static void evict(void)
{
    size_t limit = cache_limit();
    while (total > limit) {
        entry_t *lru = NULL, *mru = NULL;
        for (entry_t *e = entries; e; e = e->next)
            if (e->ready && (!mru || e->last_use > mru->last_use))
                mru = e;
        for (entry_t *e = entries; e; e = e->next)
            if (e->ready && !e->pins && e != mru && (!lru || e->last_use < lru->last_use))
                lru = e;
        if (!lru)
            return;
        CPLDebug("HYPROF", "cache: evicting %zu bytes (limit %zu)", lru->bytes, limit);
        unlink_entry(lru);
        total -= lru->bytes;
        free_entry(lru);
    }
}

static entry_t *find(const char *key)
{
    for (entry_t *e = entries; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

const hyprof_gdal_result_t *hyprof_gdal_result_acquire(const hyprof_gdal_source_t *src)
{
    pthread_mutex_lock(&lock);
    entry_t *e;
    while ((e = find(src->key)) != NULL && !e->ready)
        pthread_cond_wait(&done, &lock); /* another thread computes it */
    if (e) {
        e->pins++;
        e->last_use = ++ticks;
        pthread_mutex_unlock(&lock);
        if (fits(&e->res, src))
            return &e->res;
        hyprof_gdal_result_release(&e->res);
        return NULL;
    }
    e = CPLCalloc(1, sizeof *e);
    e->key = CPLStrdup(src->key);
    e->pins = 1;
    e->next = entries;
    entries = e;
    pthread_mutex_unlock(&lock);

    int ok = compute(src, &e->res);

    pthread_mutex_lock(&lock);
    if (!ok) {
        unlink_entry(e); /* waiters find nothing and try themselves */
        free_entry(e);
        e = NULL;
    } else {
        const hyprof_cube_t *c = &e->res.result.cube;
        e->ready = 1;
        e->bytes = c->width * c->height * c->bands * sizeof(float);
        e->last_use = ++ticks;
        total += e->bytes;
        computations++;
        evict();
    }
    pthread_cond_broadcast(&done);
    pthread_mutex_unlock(&lock);
    if (e && !fits(&e->res, src)) {
        hyprof_gdal_result_release(&e->res);
        e = NULL;
    }
    return e ? &e->res : NULL;
}

void hyprof_gdal_result_release(const hyprof_gdal_result_t *res)
{
    if (!res)
        return;
    pthread_mutex_lock(&lock);
    entry_t *e = (entry_t *)res;
    if (e->pins)
        e->pins--;
    evict();
    pthread_mutex_unlock(&lock);
}

void hyprof_gdal_cache_stats(unsigned long *computations_done, size_t *nentries, size_t *bytes,
                             size_t *limit)
{
    pthread_mutex_lock(&lock);
    size_t n = 0;
    for (entry_t *e = entries; e; e = e->next)
        n += e->ready;
    *computations_done = computations;
    *nentries = n;
    *bytes = total;
    pthread_mutex_unlock(&lock);
    *limit = cache_limit();
}
