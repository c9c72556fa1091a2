/* Reading any GDAL raster into a float32 BSQ cube with its validity mask. */
#include "raster_io.h"

#include <gdal.h>
#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define say hyprof_io_error

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* GDAL's own explanation, or a generic one. */
static const char *gdal_reason(void)
{
    const char *m = CPLGetLastErrorMsg();
    return m && *m ? m : "GDAL gave no reason";
}

void hyprof_raster_free(hyprof_raster_t *r)
{
    if (!r)
        return;
    /* The names first: their count is the cube's, which freeing it clears. */
    for (size_t b = 0; r->band_names && b < r->cube.bands; b++)
        free(r->band_names[b]);
    free(r->band_names);
    hyprof_cube_free(&r->cube);
    free(r->path);
    free(r->driver);
    free(r->data_type);
    free(r->wkt);
    free(r->wavelengths);
    free(r->wavelength_units);
    memset(r, 0, sizeof *r);
}

/* Marks pixel i invalid. Readers of several bands share the mask and only
 * ever clear it: a relaxed atomic store is the plain store, without a race. */
static inline void invalid(uint8_t *mask, size_t i)
{
    __atomic_store_n(&mask[i], 0, __ATOMIC_RELAXED);
}

/* Rows of a GDAL mask band read at a time: a reader's scratch is at most
 * this many rows, whatever its unit (a whole band, or a block of rows). */
#define MASK_ROWS 64

/* Clears mask entries for the pixels GDAL marks invalid in rows [y0, y0+ht)
 * of band `h` (data and mask point at row y0); *scratch (w x MASK_ROWS bytes)
 * is allocated on the first band with a mask band. */
static hyprof_status_t apply_band_mask(GDALRasterBandH h, const float *data, size_t w, size_t y0,
                                       size_t ht, uint8_t *mask, uint8_t **scratch)
{
    int flags = GDALGetMaskFlags(h);
    size_t n = w * ht;
    if (flags & GMF_NODATA) {
        int has = 0;
        double nd = GDALGetRasterNoDataValue(h, &has);
        float ndf = (float)nd;
        for (size_t i = 0; has && i < n; i++)
            if (data[i] == ndf || (isnan(nd) && isnan(data[i])))
                invalid(mask, i);
    } else if (!(flags & GMF_ALL_VALID)) {
        if (!*scratch && !(*scratch = malloc(w * MASK_ROWS)))
            return HYPROF_ERR_NOMEM;
        for (size_t y = 0; y < ht; y += MASK_ROWS) {
            size_t rows = ht - y < MASK_ROWS ? ht - y : MASK_ROWS;
            if (GDALRasterIO(GDALGetMaskBand(h), GF_Read, 0, (int)(y0 + y), (int)w, (int)rows,
                             *scratch, (int)w, (int)rows, GDT_Byte, 0, 0) != CE_None)
                return HYPROF_ERR_IO;
            for (size_t i = 0; i < w * rows; i++)
                if (!(*scratch)[i])
                    invalid(mask, y * w + i);
        }
    }
    /* NaN and infinities are nodata; integer pixels converted to float are
     * always finite. */
    if (!GDALDataTypeIsInteger(GDALGetRasterDataType(h)))
        for (size_t i = 0; i < n; i++)
            if (!isfinite(data[i]))
                invalid(mask, i);
    return HYPROF_OK;
}

/* Band descriptions and wavelengths (ENVI and others put them in metadata). */
static void read_band_info(GDALDatasetH ds, hyprof_raster_t *r)
{
    size_t nb = r->cube.bands;
    int any = 0;
    r->wavelengths = malloc(nb * sizeof *r->wavelengths);
    for (size_t b = 0; b < nb; b++) {
        GDALRasterBandH h = GDALGetRasterBand(ds, (int)b + 1);
        r->band_names[b] = strdup(GDALGetDescription(h));
        const char *wl = GDALGetMetadataItem(h, "wavelength", NULL);
        if (!wl)
            wl = GDALGetMetadataItem(h, "WAVELENGTH", NULL);
        char *end = NULL;
        double v = wl ? strtod(wl, &end) : NAN;
        if (r->wavelengths)
            r->wavelengths[b] = (wl && end != wl) ? v : NAN;
        if (wl && end != wl) {
            any = 1;
            if (!r->wavelength_units)
                r->wavelength_units = dup_or_null(GDALGetMetadataItem(h, "wavelength_units", NULL));
        }
    }
    if (!any) {
        free(r->wavelengths);
        r->wavelengths = NULL;
    }
}

const char *hyprof_input_problem(const struct stat *sb, int folder_ok)
{
    if (S_ISDIR(sb->st_mode))
        return folder_ok ? NULL : "is a folder, not a file";
    if (S_ISFIFO(sb->st_mode))
        return "is a FIFO (named pipe), not a file";
    if (S_ISCHR(sb->st_mode) || S_ISBLK(sb->st_mode))
        return "is a device, not a file";
    if (S_ISSOCK(sb->st_mode))
        return "is a socket, not a file";
    if (!S_ISREG(sb->st_mode))
        return "is not a regular file";
    if (sb->st_size == 0)
        return "is an empty file (0 bytes)";
    return NULL;
}

/* Paths GDAL resolves itself: /vsi... files and connection strings
 * ("HYPROF:...", "NETCDF:file:var"). */
static int gdal_name(const char *path)
{
    return strncmp(path, "/vsi", 4) == 0 || strchr(path, ':') != NULL;
}

static hyprof_status_t open_checked(const char *path, GDALDatasetH *ds, char *err, size_t n)
{
    struct stat sb;
    int found = stat(path, &sb) == 0;
    if (!found && !gdal_name(path))
        return say(HYPROF_ERR_IO, err, n, "input '%s' does not exist: %s", path,
                   strerror(errno));
    const char *wrong = found ? hyprof_input_problem(&sb, 0) : NULL;
    if (wrong)
        return say(HYPROF_ERR_INPUT, err, n, "input '%s' %s", path, wrong);
    CPLErrorReset();
    /* GTiff then decodes the blocks of one read on all cores (its
     * NUM_THREADS open option takes this default; other drivers ignore it). */
    CPLSetThreadLocalConfigOption("GDAL_NUM_THREADS", "ALL_CPUS");
    *ds = GDALOpenEx(path, GDAL_OF_RASTER | GDAL_OF_READONLY, NULL, NULL, NULL);
    CPLSetThreadLocalConfigOption("GDAL_NUM_THREADS", NULL);
    if (!*ds) {
        const char *m = CPLGetLastErrorMsg();
        if (m && *m)
            return say(HYPROF_ERR_IO, err, n, "cannot open '%s' as a raster: %s", path, m);
        return say(HYPROF_ERR_INPUT, err, n, "input '%s' is not a raster format GDAL recognises",
                   path);
    }
    int w = GDALGetRasterXSize(*ds), h = GDALGetRasterYSize(*ds), b = GDALGetRasterCount(*ds);
    const char *why = NULL;
    if (w <= 0 || h <= 0 || b <= 0) {
        GDALClose(*ds);
        return say(HYPROF_ERR_INPUT, err, n, "input '%s' is empty (%dx%d pixels, %d bands)",
                   path, w, h, b);
    }
    for (int i = 1; i <= b && !why; i++) {
        GDALDataType t = GDALGetRasterDataType(GDALGetRasterBand(*ds, i));
        if (GDALDataTypeIsComplex(t))
            why = GDALGetDataTypeName(t);
    }
    if (why) {
        GDALClose(*ds);
        return say(HYPROF_ERR_INPUT, err, n,
                   "input '%s' has complex pixels (%s); hyprof reads real values only (take "
                   "the real part, modulus or phase first, e.g. with a VRT pixel function)",
                   path, why);
    }
    return HYPROF_OK;
}

hyprof_status_t hyprof_raster_probe(const char *path, size_t *w, size_t *h, size_t *bands,
                                    int *integer, char *err, size_t n)
{
    GDALDatasetH ds = NULL;
    hyprof_status_t st = open_checked(path, &ds, err, n);
    if (st != HYPROF_OK)
        return st;
    *w = (size_t)GDALGetRasterXSize(ds);
    *h = (size_t)GDALGetRasterYSize(ds);
    *bands = (size_t)GDALGetRasterCount(ds);
    if (integer) {
        GDALDataType t = GDALGetRasterDataType(GDALGetRasterBand(ds, 1));
        *integer = GDALDataTypeIsInteger(t);
    }
    GDALClose(ds);
    return HYPROF_OK;
}

static size_t processors(void)
{
    long procs = sysconf(_SC_NPROCESSORS_ONLN);
    return procs > 0 ? (size_t)procs : 1;
}

/* The memory hyprof_raster_read takes for a w x h x nb raster: the cube, the
 * mask and each reader's mask scratch (one reader a processor at most). */
size_t hyprof_raster_read_bytes(size_t w, size_t h, size_t nb)
{
    size_t npix = w * h, rows = h < MASK_ROWS ? h : MASK_ROWS, readers = processors();
    if (h && npix / h != w)
        return SIZE_MAX;
    if (npix > SIZE_MAX / (nb * sizeof(float) + 1))
        return SIZE_MAX;
    size_t fixed = npix * nb * sizeof(float) + npix;
    if (w && readers > SIZE_MAX / w / (rows ? rows : 1))
        return SIZE_MAX;
    size_t scratch = readers * w * rows;
    return scratch > SIZE_MAX - fixed ? SIZE_MAX : fixed + scratch;
}

/* The input is read by several readers, each with its own handle of the file
 * (GDAL handles are not shared between threads), so the decoding runs on
 * every core without GDAL's decoding threads (whose requests of several bands
 * crash in GDAL 3.6: bench/NOTES.md). A reader takes every T-th unit: whole
 * bands when the file stores its bands apart (INTERLEAVE=BAND, or one band),
 * else blocks of rows of every band, so that each compressed block holding
 * several bands is decoded once. The calling thread reports progress and
 * passes a cancellation on. */
typedef struct read_shared {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    size_t done;              /* units read */
    int running, stop;
} read_shared_t;

typedef struct {
    GDALDatasetH ds;          /* this reader's handle */
    hyprof_raster_t *r;
    size_t rows;              /* rows a unit; 0: a unit is a whole band */
    size_t first, step, units;
    hyprof_status_t st;
    char err[1024];
    pthread_t thread;
    int started;
    read_shared_t *sh;
} reader_t;

/* Band b's rows [y0, y0+n) of `ds` into dst (w x n values) and their
 * validity into mask (w x n, row y0 first); an error names `path`. */
static hyprof_status_t read_rows(GDALDatasetH ds, const char *path, size_t b, size_t y0,
                                 size_t n, size_t w, float *dst, uint8_t *mask,
                                 uint8_t **scratch, char *err, size_t len)
{
    GDALRasterBandH hb = GDALGetRasterBand(ds, (int)b + 1);
    hyprof_status_t m;
    if (GDALRasterIO(hb, GF_Read, 0, (int)y0, (int)w, (int)n, dst, (int)w, (int)n, GDT_Float32, 0,
                     0) != CE_None)
        return say(HYPROF_ERR_IO, err, len, "cannot read band %zu of '%s': %s", b + 1, path,
                   gdal_reason());
    if ((m = apply_band_mask(hb, dst, w, y0, n, mask, scratch)) != HYPROF_OK)
        return m == HYPROF_ERR_NOMEM
            ? say(m, err, len, "out of memory reading '%s'", path)
            : say(m, err, len, "cannot read the mask of band %zu of '%s': %s", b + 1, path,
                  gdal_reason());
    return HYPROF_OK;
}

/* Band b's rows [y0, y0+n) into the reader's cube; an error goes to rd->err. */
static hyprof_status_t read_band_rows(reader_t *rd, size_t b, size_t y0, size_t n,
                                      uint8_t **scratch)
{
    hyprof_raster_t *r = rd->r;
    size_t w = r->cube.width, npix = w * r->cube.height;
    return read_rows(rd->ds, r->path, b, y0, n, w, (float *)r->cube.data + b * npix + y0 * w,
                     r->cube.mask + y0 * w, scratch, rd->err, sizeof rd->err);
}

static void *reader_main(void *arg)
{
    reader_t *rd = arg;
    size_t h = rd->r->cube.height;
    uint8_t *scratch = NULL;
    for (size_t u = rd->first; u < rd->units && rd->st == HYPROF_OK; u += rd->step) {
        if (__atomic_load_n(&rd->sh->stop, __ATOMIC_RELAXED))
            break;
        CPLErrorReset();
        if (rd->rows) { /* the first band decodes the unit's blocks, GDAL's cache serves the rest */
            size_t y0 = u * rd->rows, n = h - y0 < rd->rows ? h - y0 : rd->rows;
            for (size_t b = 0; b < rd->r->cube.bands && rd->st == HYPROF_OK; b++)
                rd->st = read_band_rows(rd, b, y0, n, &scratch);
        } else {
            rd->st = read_band_rows(rd, u, 0, h, &scratch);
        }
        pthread_mutex_lock(&rd->sh->lock);
        rd->sh->done += rd->st == HYPROF_OK;
        rd->sh->stop |= rd->st != HYPROF_OK;
        pthread_cond_signal(&rd->sh->changed);
        pthread_mutex_unlock(&rd->sh->lock);
    }
    free(scratch);
    pthread_mutex_lock(&rd->sh->lock);
    rd->sh->running--;
    pthread_cond_signal(&rd->sh->changed);
    pthread_mutex_unlock(&rd->sh->lock);
    return NULL;
}

/* Rows a unit (0: whole bands): a multiple of the file's block height of at
 * least 64 rows when the bands are stored together. */
static size_t unit_rows(GDALDatasetH ds)
{
    const char *il = GDALGetMetadataItem(ds, "INTERLEAVE", "IMAGE_STRUCTURE");
    if (GDALGetRasterCount(ds) == 1 || (il && EQUAL(il, "BAND")))
        return 0;
    int bx = 0, by = 0;
    GDALGetBlockSize(GDALGetRasterBand(ds, 1), &bx, &by);
    size_t blk = by > 0 ? (size_t)by : 1;
    return (64 + blk - 1) / blk * blk;
}

/* Readers for `path`: one a processor (at most `threads` when positive) and
 * a unit, each with its own handle; a single reader uses `ds` (GDAL then
 * decodes a request's blocks on its own threads). Only regular files are
 * opened again: /vsi streams and connection strings have one reader. */
static size_t reader_count(const char *path, size_t units, int threads)
{
    struct stat sb;
    size_t t = processors();
    if (threads > 0 && (size_t)threads < t)
        t = (size_t)threads;
    if (t > units)
        t = units;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && !gdal_name(path) ? t : 1;
}

/* Waits for the readers, reporting progress; a cancellation stops them. */
static hyprof_status_t watch_readers(read_shared_t *sh, size_t units,
                                     const hyprof_io_progress_t *pg)
{
    hyprof_status_t st = HYPROF_OK;
    size_t told = 0;
    pthread_mutex_lock(&sh->lock);
    while (sh->running > 0 || sh->done != told) { /* every unit told, the last one too */
        if (sh->done == told) {
            pthread_cond_wait(&sh->changed, &sh->lock);
            continue;
        }
        told = sh->done;
        pthread_mutex_unlock(&sh->lock);
        int cancel = pg && pg->fn && st == HYPROF_OK &&
                     pg->fn(pg->user, (double)told / (double)units, "read");
        pthread_mutex_lock(&sh->lock);
        if (cancel) {
            st = HYPROF_ERR_CANCELLED;
            sh->stop = 1;
        }
    }
    pthread_mutex_unlock(&sh->lock);
    return st;
}

static hyprof_status_t read_units(GDALDatasetH ds, int threads, hyprof_raster_t *r,
                                  const hyprof_io_progress_t *pg, char *err, size_t n)
{
    size_t rows = unit_rows(ds), h = r->cube.height;
    size_t units = rows ? (h + rows - 1) / rows : r->cube.bands;
    size_t T = reader_count(r->path, units, threads);
    reader_t *rd = calloc(T, sizeof *rd);
    read_shared_t sh = {.running = 0};
    if (!rd)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory reading '%s'", r->path);
    pthread_mutex_init(&sh.lock, NULL);
    pthread_cond_init(&sh.changed, NULL);
    hyprof_status_t st = HYPROF_OK;
    for (size_t i = 0; i < T && st == HYPROF_OK; i++) {
        rd[i] = (reader_t){.ds = ds, .r = r, .rows = rows, .first = i, .step = T, .units = units,
                           .sh = &sh};
        if (T > 1 && !(rd[i].ds = GDALOpenEx(r->path, GDAL_OF_RASTER | GDAL_OF_READONLY, NULL,
                                             NULL, NULL)))
            st = say(HYPROF_ERR_IO, err, n, "cannot open '%s' again to read it: %s", r->path,
                     gdal_reason());
    }
    sh.running = st == HYPROF_OK ? (int)T : 0;
    for (size_t i = 0; i < T && st == HYPROF_OK; i++) {
        rd[i].started = pthread_create(&rd[i].thread, NULL, reader_main, &rd[i]) == 0;
        if (!rd[i].started) {
            pthread_mutex_lock(&sh.lock);
            sh.running -= (int)(T - i);
            sh.stop = 1;
            pthread_mutex_unlock(&sh.lock);
            st = say(HYPROF_ERR_NOMEM, err, n, "cannot start a thread to read '%s'", r->path);
        }
    }
    hyprof_status_t w = watch_readers(&sh, units, pg);
    for (size_t i = 0; i < T; i++) {
        if (rd[i].started)
            pthread_join(rd[i].thread, NULL);
        if (st == HYPROF_OK && rd[i].st != HYPROF_OK)
            st = say(rd[i].st, err, n, "%s", rd[i].err);
        if (T > 1 && rd[i].ds)
            GDALClose(rd[i].ds);
    }
    if (st == HYPROF_OK && w != HYPROF_OK)
        st = say(w, err, n, "cancelled while reading '%s'", r->path);
    pthread_cond_destroy(&sh.changed);
    pthread_mutex_destroy(&sh.lock);
    free(rd);
    return st;
}

/* What the file says of itself: its path, driver, source type, CRS,
 * geotransform, nodata, band names and wavelengths (r->cube's size is set
 * and r->band_names allocated). */
static void read_header(GDALDatasetH ds, const char *path, hyprof_raster_t *r)
{
    r->path = strdup(path);
    r->driver = strdup(GDALGetDriverShortName(GDALGetDatasetDriver(ds)));
    GDALRasterBandH b1 = GDALGetRasterBand(ds, 1);
    r->data_type = strdup(GDALGetDataTypeName(GDALGetRasterDataType(b1)));
    const char *wkt = GDALGetProjectionRef(ds);
    r->wkt = wkt && *wkt ? strdup(wkt) : NULL;
    r->has_geotransform = GDALGetGeoTransform(ds, r->geotransform) == CE_None;
    int has_nd = 0;
    double nd = GDALGetRasterNoDataValue(b1, &has_nd);
    r->cube.has_nodata = has_nd;
    r->cube.nodata = has_nd ? nd : 0.0;
    read_band_info(ds, r);
}

hyprof_status_t hyprof_raster_read(hyprof_ctx_t *ctx, const char *path,
                                   const hyprof_io_progress_t *pg, hyprof_raster_t *r,
                                   char *err, size_t n)
{
    memset(r, 0, sizeof *r);
    GDALDatasetH ds = NULL;
    hyprof_status_t st = open_checked(path, &ds, err, n);
    if (st != HYPROF_OK)
        return st;
    size_t w = (size_t)GDALGetRasterXSize(ds), h = (size_t)GDALGetRasterYSize(ds);
    size_t nb = (size_t)GDALGetRasterCount(ds);
    /* What the file declares, checked before allocating: a small sparse file
     * may declare gigabytes. */
    char what[1200];
    snprintf(what, sizeof what, "reading '%s' (%zux%zu pixels, %zu bands)", path, w, h, nb);
    if (hyprof_host_memory_check(hyprof_raster_read_bytes(w, h, nb), what, err, n) != HYPROF_OK) {
        GDALClose(ds);
        return HYPROF_ERR_NOMEM;
    }
    st = hyprof_cube_alloc(&r->cube, HYPROF_FLOAT32, w, h, nb);
    if (st == HYPROF_OK)
        st = hyprof_cube_alloc_mask(&r->cube);
    r->band_names = calloc(nb, sizeof *r->band_names);
    if (st != HYPROF_OK || !r->band_names) {
        GDALClose(ds);
        hyprof_raster_free(r);
        return say(HYPROF_ERR_NOMEM, err, n, "'%s' (%zux%zux%zu) does not fit in memory", path,
                   w, h, nb);
    }
    read_header(ds, path, r);
    st = read_units(ds, ctx ? hyprof_ctx_threads(ctx) : 0, r, pg, err, n);
    GDALClose(ds);
    if (st != HYPROF_OK) {
        hyprof_raster_free(r);
        return st;
    }
    r->nvalid = hyprof_cube_count_valid(&r->cube);
    return HYPROF_OK;
}

/* ---- by blocks of rows ---------------------------------------------------- */

struct hyprof_rows {
    GDALDatasetH ds;
    const hyprof_raster_t *header;
    uint8_t *scratch;
};

hyprof_status_t hyprof_rows_open(const char *path, hyprof_rows_t **out, hyprof_raster_t *header,
                                 char *err, size_t n)
{
    memset(header, 0, sizeof *header);
    *out = NULL;
    hyprof_rows_t *rows = calloc(1, sizeof *rows);
    if (!rows)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory opening '%s'", path);
    hyprof_status_t st = open_checked(path, &rows->ds, err, n);
    if (st != HYPROF_OK) {
        free(rows);
        return st;
    }
    size_t nb = (size_t)GDALGetRasterCount(rows->ds);
    header->cube.dtype = HYPROF_FLOAT32;
    header->cube.width = (size_t)GDALGetRasterXSize(rows->ds);
    header->cube.height = (size_t)GDALGetRasterYSize(rows->ds);
    header->cube.bands = nb;
    header->band_names = calloc(nb, sizeof *header->band_names);
    if (!header->band_names) {
        hyprof_rows_close(&rows);
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory opening '%s'", path);
    }
    read_header(rows->ds, path, header);
    rows->header = header;
    *out = rows;
    return HYPROF_OK;
}

hyprof_status_t hyprof_rows_read(hyprof_rows_t *rows, size_t y0, size_t ht, hyprof_cube_t *block,
                                 char *err, size_t n)
{
    const hyprof_raster_t *hd = rows->header;
    size_t w = hd->cube.width, nb = hd->cube.bands;
    hyprof_status_t st = hyprof_cube_alloc(block, HYPROF_FLOAT32, w, ht, nb);
    if (st == HYPROF_OK)
        st = hyprof_cube_alloc_mask(block);
    if (st != HYPROF_OK)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory reading rows %zu-%zu of '%s'", y0 + 1,
                   y0 + ht, hd->path);
    block->has_nodata = hd->cube.has_nodata;
    block->nodata = hd->cube.nodata;
    for (size_t b = 0; b < nb && st == HYPROF_OK; b++) {
        CPLErrorReset();
        st = read_rows(rows->ds, hd->path, b, y0, ht, w, (float *)block->data + b * w * ht,
                       block->mask, &rows->scratch, err, n);
    }
    if (st != HYPROF_OK)
        hyprof_cube_free(block);
    return st;
}

void hyprof_rows_close(hyprof_rows_t **rows)
{
    if (!rows || !*rows)
        return;
    if ((*rows)->ds)
        GDALClose((*rows)->ds);
    free((*rows)->scratch);
    free(*rows);
    *rows = NULL;
}
