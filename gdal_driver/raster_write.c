/* Writing results as self-describing rasters (tiled, compressed GeoTIFF by
 * default; the format through raster_format.c), atomically. */
#include "raster_io.h"

#include <gdal.h>
#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>

#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

hyprof_status_t hyprof_io_error(hyprof_status_t st, char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return st;
}

#define say hyprof_io_error

static char *folder_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return NULL;
    char *d = strdup(dirname(copy));
    free(copy);
    return d;
}

hyprof_status_t hyprof_output_check(const char *path, int overwrite, char *err, size_t n)
{
    struct stat sb;
    if (!path || !*path)
        return say(HYPROF_ERR_ARGUMENT, err, n, "no output file given");
    char *dir = folder_of(path);
    if (!dir)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory");
    hyprof_status_t st = HYPROF_OK;
    if (stat(dir, &sb) != 0)
        st = say(HYPROF_ERR_ARGUMENT, err, n, "output folder '%s' does not exist", dir);
    else if (!S_ISDIR(sb.st_mode))
        st = say(HYPROF_ERR_ARGUMENT, err, n, "output folder '%s' is not a folder", dir);
    else if (access(dir, W_OK | X_OK) != 0)
        st = say(HYPROF_ERR_ARGUMENT, err, n, "output folder '%s' is not writable: %s", dir,
                 strerror(errno));
    else if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        st = say(HYPROF_ERR_ARGUMENT, err, n, "output '%s' is a folder", path);
    else if (stat(path, &sb) == 0 && !overwrite)
        st = say(HYPROF_ERR_ARGUMENT, err, n,
                 "output '%s' exists; use --overwrite to replace it", path);
    free(dir);
    return st;
}

/* "save-model" -> "SAVE_MODEL": GDAL metadata keys are upper case by habit. */
static void meta_key(char *dst, size_t n, const char *prefix, const char *name)
{
    snprintf(dst, n, "%s%s", prefix, name);
    for (char *c = dst; *c; c++)
        *c = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
}

void hyprof_set_args_metadata(GDALMajorObjectH obj, const hyprof_args_t *args)
{
    const hyprof_op_t *op = hyprof_args_op(args);
    char key[128];
    GDALSetMetadataItem(obj, "HYPROF_OPERATION", op->name, NULL);
    GDALSetMetadataItem(obj, "HYPROF_VERSION", hyprof_version(), NULL);
    for (size_t i = 0; i < op->nparams; i++) {
        const char *v = hyprof_args_str(args, op->params[i].name);
        if (!v)
            continue;
        meta_key(key, sizeof key, "HYPROF_PARAM_", op->params[i].name);
        GDALSetMetadataItem(obj, key, v, NULL);
    }
}

void hyprof_set_result_metadata(GDALMajorObjectH obj, const hyprof_result_t *res)
{
    char key[128];
    for (size_t i = 0; i < res->nmeta; i++) {
        meta_key(key, sizeof key, "HYPROF_", res->meta_keys[i]);
        GDALSetMetadataItem(obj, key, res->meta_values[i], NULL);
    }
}

void hyprof_set_output_metadata(GDALDatasetH ds, const hyprof_raster_t *src,
                                const hyprof_result_t *res, const hyprof_args_t *args,
                                const char *backend)
{
    hyprof_set_args_metadata(ds, args);
    GDALSetMetadataItem(ds, "HYPROF_BACKEND", backend, NULL);
    GDALSetMetadataItem(ds, "HYPROF_INPUT", src->path, NULL);
    hyprof_set_result_metadata(ds, res);
}

void hyprof_set_band_info(GDALDatasetH ds, const hyprof_result_t *res, size_t bands, int nodata)
{
    for (size_t b = 0; b < bands; b++) {
        GDALRasterBandH h = GDALGetRasterBand(ds, (int)b + 1);
        if (res->band_names && res->band_names[b])
            GDALSetDescription(h, res->band_names[b]);
        if (nodata)
            GDALSetRasterNoDataValue(h, HYPROF_FLOAT_NODATA);
    }
}

void hyprof_set_georef(GDALDatasetH ds, const hyprof_raster_t *src)
{
    if (src->wkt)
        GDALSetProjection(ds, src->wkt);
    if (src->has_geotransform)
        GDALSetGeoTransform(ds, (double *)src->geotransform);
}

void hyprof_result_band_f32(const hyprof_cube_t *c, size_t b, float *buf)
{
    size_t npix = c->width * c->height;
    const float *src = (const float *)c->data + b * npix;
    for (size_t i = 0; i < npix; i++)
        buf[i] = !c->mask || c->mask[i] ? src[i] : HYPROF_FLOAT_NODATA;
}

static hyprof_status_t write_bands(const hyprof_output_t *o, const hyprof_result_t *res,
                                   const hyprof_io_progress_t *pg, const char *path, char *err,
                                   size_t n)
{
    GDALDatasetH ds = o->ds;
    const hyprof_cube_t *c = &res->cube;
    size_t npix = c->width * c->height;
    float *buf = malloc(npix * sizeof *buf);
    if (!buf)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory writing '%s'", path);
    hyprof_status_t st = HYPROF_OK;
    hyprof_set_band_info(ds, res, c->bands, c->has_nodata);
    for (size_t b = 0; b < c->bands && st == HYPROF_OK; b++) {
        GDALRasterBandH h = GDALGetRasterBand(ds, (int)b + 1);
        hyprof_result_band_f32(c, b, buf);
        if (GDALRasterIO(h, GF_Write, 0, 0, (int)c->width, (int)c->height, buf, (int)c->width,
                         (int)c->height, GDT_Float32, 0, 0) != CE_None)
            st = say(HYPROF_ERR_IO, err, n, "cannot write band %zu of '%s': %s", b + 1, path,
                     CPLGetLastErrorMsg());
        else if (hyprof_output_progress(o, pg, (double)(b + 1) / (double)c->bands, "write"))
            st = say(HYPROF_ERR_CANCELLED, err, n, "cancelled while writing '%s'", path);
    }
    free(buf);
    return st;
}

hyprof_status_t hyprof_raster_write(const char *path, const char *tmp,
                                    const hyprof_raster_t *src, const hyprof_result_t *res,
                                    const hyprof_args_t *args, const char *backend,
                                    const hyprof_io_progress_t *pg, char *err, size_t n)
{
    const hyprof_cube_t *c = &res->cube;
    hyprof_output_t o;
    hyprof_status_t st = hyprof_output_create(&o, path, tmp, HYPROF_OUTPUT_PROFILE, c->width,
                                              c->height, c->bands, GDT_Float32, err, n);
    if (st != HYPROF_OK)
        return st;
    hyprof_set_georef(o.ds, src);
    hyprof_set_output_metadata(o.ds, src, res, args, backend);
    st = write_bands(&o, res, pg, path, err, n);
    if (st != HYPROF_OK) {
        hyprof_output_abandon(&o);
        return st;
    }
    return hyprof_output_finish(&o, pg, err, n);
}

/* ---- by blocks of rows ---------------------------------------------------- */

hyprof_status_t hyprof_rows_out_create(hyprof_rows_out_t *ro, const char *path, const char *tmp,
                                       const hyprof_raster_t *src, size_t bands, char *err,
                                       size_t n)
{
    memset(ro, 0, sizeof *ro);
    ro->w = src->cube.width;
    ro->h = src->cube.height;
    ro->bands = bands;
    hyprof_status_t st = hyprof_output_create(&ro->o, path, tmp, HYPROF_OUTPUT_PROFILE, ro->w,
                                              ro->h, bands, GDT_Float32, err, n);
    if (st != HYPROF_OK)
        return st;
    ro->created = 1;
    hyprof_set_georef(ro->o.ds, src);
    return HYPROF_OK;
}

hyprof_status_t hyprof_rows_out_put(hyprof_rows_out_t *ro, size_t y0, const hyprof_cube_t *block,
                                    char *err, size_t n)
{
    size_t npix = block->width * block->height;
    if (block->width != ro->w || block->bands != ro->bands || y0 + block->height > ro->h)
        return say(HYPROF_ERR_FORMAT, err, n,
                   "'%s': rows %zu-%zu have %zux%zu values, the file was made for %zux%zu",
                   ro->o.path, y0 + 1, y0 + block->height, block->width, block->bands, ro->w,
                   ro->bands);
    if (npix > ro->cap) {
        float *buf = realloc(ro->buf, npix * sizeof *buf);
        if (!buf)
            return say(HYPROF_ERR_NOMEM, err, n, "out of memory writing '%s'", ro->o.path);
        ro->buf = buf;
        ro->cap = npix;
    }
    ro->nodata |= block->has_nodata;
    for (size_t b = 0; b < ro->bands; b++) {
        hyprof_result_band_f32(block, b, ro->buf);
        CPLErrorReset();
        if (GDALRasterIO(GDALGetRasterBand(ro->o.ds, (int)b + 1), GF_Write, 0, (int)y0,
                         (int)block->width, (int)block->height, ro->buf, (int)block->width,
                         (int)block->height, GDT_Float32, 0, 0) != CE_None)
            return say(HYPROF_ERR_IO, err, n, "cannot write rows %zu-%zu of band %zu of '%s': %s",
                       y0 + 1, y0 + block->height, b + 1, ro->o.path, CPLGetLastErrorMsg());
    }
    return HYPROF_OK;
}

hyprof_status_t hyprof_rows_out_finish(hyprof_rows_out_t *ro, const hyprof_raster_t *src,
                                       const hyprof_result_t *first, const hyprof_args_t *args,
                                       const char *backend, const hyprof_io_progress_t *pg,
                                       char *err, size_t n)
{
    hyprof_set_band_info(ro->o.ds, first, ro->bands, ro->nodata);
    hyprof_set_output_metadata(ro->o.ds, src, first, args, backend);
    hyprof_status_t st = hyprof_output_finish(&ro->o, pg, err, n);
    ro->created = 0;
    hyprof_rows_out_abandon(ro);
    return st;
}

void hyprof_rows_out_abandon(hyprof_rows_out_t *ro)
{
    if (ro->created)
        hyprof_output_abandon(&ro->o);
    ro->created = 0;
    free(ro->buf);
    ro->buf = NULL;
    ro->cap = 0;
}
