/* Streaming a result into its file while the operation computes it.
 *
 * The output is created before the computation. The library tells when a
 * band is final (hyprof_ctx_set_band_done); the band goes into a queue and
 * a writer thread converts it (masked pixels as NaN, the input's mask) and
 * hands it to GDAL, whose GTiff driver compresses blocks on its own worker
 * threads, so writing overlaps the computation of the next bands. The
 * computing thread makes no GDAL call meanwhile: the dataset is the writer
 * thread's alone until hyprof_stream_close joins it.
 *
 * hyprof_stream_close writes the bands the operation did not announce
 * (operations that finish all bands at once, or a result whose mask is not
 * the input's, written again from the result), then band names, nodata and
 * metadata, and finishes the file (overviews, or the copy of a copying
 * driver). A write error stops the computation (hyprof_ctx_cancel) and is
 * the error the run reports. */
#include "raster_io.h"

#include <cpl_error.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define say hyprof_io_error

struct hyprof_stream {
    hyprof_output_t o;
    hyprof_ctx_t *ctx;
    const uint8_t *mask;      /* the input's valid pixels (NULL: all) */
    size_t w, h, bands;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t *queue;            /* bands announced, in order; each at most once */
    const float **data;
    size_t head, tail;
    unsigned char *written;
    pthread_t thread;
    int closing, started;
    float *buf;
    hyprof_status_t st;       /* the writer's first failure */
    char err[1024];
};

/* Band b (values in data) into the file; the writer's status. */
static hyprof_status_t put_band(hyprof_stream_t *s, size_t b, const float *data,
                                const uint8_t *mask, int flush)
{
    size_t npix = s->w * s->h;
    for (size_t i = 0; i < npix; i++)
        s->buf[i] = !mask || mask[i] ? data[i] : HYPROF_FLOAT_NODATA;
    GDALRasterBandH h = GDALGetRasterBand(s->o.ds, (int)b + 1);
    CPLErrorReset();
    if (GDALRasterIO(h, GF_Write, 0, 0, (int)s->w, (int)s->h, s->buf, (int)s->w, (int)s->h,
                     GDT_Float32, 0, 0) != CE_None ||
        (flush && GDALFlushRasterCache(h) != CE_None)) /* compressed now, not at the close */
        return say(HYPROF_ERR_IO, s->err, sizeof s->err, "cannot write band %zu of '%s': %s",
                   b + 1, s->o.path, CPLGetLastErrorMsg());
    s->written[b] = 1;
    return HYPROF_OK;
}

static void *writer(void *user)
{
    hyprof_stream_t *s = user;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->head == s->tail && !s->closing)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->head == s->tail) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        size_t b = s->queue[s->head];
        const float *data = s->data[s->head++];
        pthread_mutex_unlock(&s->mu);
        if (s->st == HYPROF_OK && (s->st = put_band(s, b, data, s->mask, 1)) != HYPROF_OK)
            hyprof_ctx_cancel(s->ctx);
    }
}

static void join_writer(hyprof_stream_t *s);

/* A failed operation revokes its bands: the writer drops the queue and is
 * joined before the operation frees the data. */
static void revoke_bands(hyprof_stream_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->head = s->tail;
    pthread_mutex_unlock(&s->mu);
    join_writer(s);
}

void hyprof_stream_band(void *user, size_t band, const float *data)
{
    hyprof_stream_t *s = user;
    if (band == HYPROF_BANDS_REVOKED) {
        revoke_bands(s);
        return;
    }
    pthread_mutex_lock(&s->mu);
    if (band < s->bands && s->tail < s->bands) {
        s->queue[s->tail] = band;
        s->data[s->tail++] = data;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

static void join_writer(hyprof_stream_t *s)
{
    if (!s->started)
        return;
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->started = 0;
}

void hyprof_stream_abandon(hyprof_stream_t *s)
{
    if (!s)
        return;
    join_writer(s);
    hyprof_output_abandon(&s->o);
    free(s->queue);
    free(s->data);
    free(s->written);
    free(s->buf);
    free(s);
}

hyprof_status_t hyprof_stream_open(hyprof_stream_t **out, hyprof_ctx_t *ctx, const char *path,
                                   const char *tmp, const hyprof_raster_t *src, size_t bands,
                                   char *err, size_t n)
{
    *out = NULL;
    hyprof_stream_t *s = calloc(1, sizeof *s);
    size_t npix = src->cube.width * src->cube.height;
    if (s) {
        s->queue = calloc(bands, sizeof *s->queue);
        s->data = calloc(bands, sizeof *s->data);
        s->written = calloc(bands, 1);
        s->buf = malloc(npix * sizeof *s->buf);
    }
    if (!s || !s->queue || !s->data || !s->written || !s->buf) {
        hyprof_stream_abandon(s);
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory writing '%s'", path);
    }
    s->ctx = ctx;
    s->mask = src->cube.mask;
    s->w = src->cube.width;
    s->h = src->cube.height;
    s->bands = bands;
    hyprof_status_t st = hyprof_output_create(&s->o, path, tmp, HYPROF_OUTPUT_PROFILE, s->w, s->h,
                                              bands, GDT_Float32, err, n);
    if (st != HYPROF_OK) {
        hyprof_stream_abandon(s);
        return st;
    }
    hyprof_set_georef(s->o.ds, src);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    /* Without a thread every band is written at the close. */
    s->started = pthread_create(&s->thread, NULL, writer, s) == 0;
    *out = s;
    return HYPROF_OK;
}

static int same_mask(const hyprof_stream_t *s, const hyprof_cube_t *c)
{
    if (!s->mask || !c->mask)
        return !s->mask && !c->mask;
    return memcmp(s->mask, c->mask, s->w * s->h) == 0;
}

/* The bands not streamed (all of them when the result's mask is not the
 * input's), from the result, with progress. */
static hyprof_status_t put_rest(hyprof_stream_t *s, const hyprof_cube_t *c,
                                const hyprof_io_progress_t *pg)
{
    size_t npix = s->w * s->h;
    int again = !same_mask(s, c);
    for (size_t b = 0; b < s->bands; b++) {
        hyprof_status_t st = s->written[b] && !again
                                 ? HYPROF_OK
                                 : put_band(s, b, (const float *)c->data + b * npix, c->mask, 0);
        if (st != HYPROF_OK)
            return st;
        /* streamed bands count too: the write stage ends at 1 as always */
        if (hyprof_output_progress(&s->o, pg, (double)(b + 1) / (double)s->bands, "write"))
            return say(HYPROF_ERR_CANCELLED, s->err, sizeof s->err,
                       "cancelled while writing '%s'", s->o.path);
    }
    return HYPROF_OK;
}

hyprof_status_t hyprof_stream_stop(hyprof_stream_t *s, char *err, size_t n)
{
    join_writer(s);
    if (s->st != HYPROF_OK)
        snprintf(err, n, "%s", s->err);
    return s->st;
}

hyprof_status_t hyprof_stream_close(hyprof_stream_t *s, const hyprof_raster_t *src,
                                    const hyprof_result_t *res, const hyprof_args_t *args,
                                    const char *backend, const hyprof_io_progress_t *pg,
                                    char *err, size_t n)
{
    join_writer(s);
    const hyprof_cube_t *c = &res->cube;
    hyprof_status_t st = s->st;
    if (st == HYPROF_OK && (c->width != s->w || c->height != s->h || c->bands != s->bands))
        st = say(HYPROF_ERR_FORMAT, s->err, sizeof s->err,
                 "'%s': the result has %zux%zux%zu values, the file was made for %zux%zux%zu",
                 s->o.path, c->width, c->height, c->bands, s->w, s->h, s->bands);
    if (st == HYPROF_OK)
        st = put_rest(s, c, pg);
    if (st != HYPROF_OK) {
        snprintf(err, n, "%s", s->err);
        hyprof_stream_abandon(s);
        return st;
    }
    hyprof_set_band_info(s->o.ds, res, s->bands, c->has_nodata);
    hyprof_set_output_metadata(s->o.ds, src, res, args, backend);
    st = hyprof_output_finish(&s->o, pg, err, n);
    hyprof_stream_abandon(s);
    return st;
}
