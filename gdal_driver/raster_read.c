/* Reading any GDAL raster into a float32 BSQ cube with its validity mask. */
#include "raster_io.h"

#include <gdal.h>
#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* Clears mask entries for the pixels GDAL marks invalid in band `h`. */
static hyprof_status_t apply_band_mask(GDALRasterBandH h, const float *data, size_t w,
                                       size_t ht, uint8_t *mask, uint8_t *scratch)
{
    int flags = GDALGetMaskFlags(h);
    size_t n = w * ht;
    if (flags & GMF_NODATA) {
        int has = 0;
        double nd = GDALGetRasterNoDataValue(h, &has);
        float ndf = (float)nd;
        for (size_t i = 0; has && i < n; i++)
            if (data[i] == ndf || (isnan(nd) && isnan(data[i])))
                mask[i] = 0;
    } else if (!(flags & GMF_ALL_VALID)) {
        if (GDALRasterIO(GDALGetMaskBand(h), GF_Read, 0, 0, (int)w, (int)ht, scratch, (int)w,
                         (int)ht, GDT_Byte, 0, 0) != CE_None)
            return HYPROF_ERR_IO;
        for (size_t i = 0; i < n; i++)
            if (!scratch[i])
                mask[i] = 0;
    }
    /* NaN and infinities are nodata; integer pixels converted to float are
     * always finite. */
    if (!GDALDataTypeIsInteger(GDALGetRasterDataType(h)))
        for (size_t i = 0; i < n; i++)
            if (!isfinite(data[i]))
                mask[i] = 0;
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

/* The memory hyprof_raster_read takes for a w x h x nb raster. */
size_t hyprof_raster_read_bytes(size_t w, size_t h, size_t nb)
{
    size_t npix = w * h;
    if (h && npix / h != w)
        return SIZE_MAX;
    if (npix > SIZE_MAX / (nb * sizeof(float) + 2))
        return SIZE_MAX;
    return npix * nb * sizeof(float) + 2 * npix; /* cube, mask, mask scratch */
}

static hyprof_status_t read_bands(GDALDatasetH ds, hyprof_raster_t *r,
                                  const hyprof_io_progress_t *pg, char *err, size_t n)
{
    size_t w = r->cube.width, h = r->cube.height, npix = w * h;
    uint8_t *scratch = malloc(npix);
    if (!scratch)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory reading '%s'", r->path);
    hyprof_status_t st = HYPROF_OK;
    for (size_t b = 0; b < r->cube.bands && st == HYPROF_OK; b++) {
        GDALRasterBandH hb = GDALGetRasterBand(ds, (int)b + 1);
        float *dst = (float *)r->cube.data + b * npix;
        CPLErrorReset();
        if (GDALRasterIO(hb, GF_Read, 0, 0, (int)w, (int)h, dst, (int)w, (int)h, GDT_Float32, 0,
                         0) != CE_None)
            st = say(HYPROF_ERR_IO, err, n, "cannot read band %zu of '%s': %s", b + 1, r->path,
                     gdal_reason());
        else if (apply_band_mask(hb, dst, w, h, r->cube.mask, scratch) != HYPROF_OK)
            st = say(HYPROF_ERR_IO, err, n, "cannot read the mask of band %zu of '%s': %s",
                     b + 1, r->path, gdal_reason());
        else if (pg && pg->fn && pg->fn(pg->user, (double)(b + 1) / (double)r->cube.bands, "read"))
            st = say(HYPROF_ERR_CANCELLED, err, n, "cancelled while reading '%s'", r->path);
    }
    free(scratch);
    return st;
}

hyprof_status_t hyprof_raster_read(hyprof_ctx_t *ctx, const char *path,
                                   const hyprof_io_progress_t *pg, hyprof_raster_t *r,
                                   char *err, size_t n)
{
    (void)ctx;
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
    st = read_bands(ds, r, pg, err, n);
    GDALClose(ds);
    if (st != HYPROF_OK) {
        hyprof_raster_free(r);
        return st;
    }
    r->nvalid = hyprof_cube_count_valid(&r->cube);
    return HYPROF_OK;
}
