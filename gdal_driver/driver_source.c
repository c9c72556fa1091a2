/* Opening a HYPROF dataset name (parsed in driver_parse.c): the files it
 * names must be regular files, the input's header gives the size, CRS and
 * geotransform, the library gives the band count and names from the
 * parameters, and a result that could not fit (in memory or in GDAL's band
 * limit) fails here, naming the parameters, before anything is computed. */
/* VSIStatBufL is struct stat64 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "driver.h"
#include "driver_text.h"
#include "raster_io.h"

#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <cpl_vsi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ERR(cls, ...) CPLError(CE_Failure, cls, "HYPROF: " __VA_ARGS__)

/* "FOLDER/HYPROF:...": a connection string a VRT made relative to its folder,
 * when FOLDER exists and the whole name is no file. */
static int folder_connection(const char *filename)
{
    ptrdiff_t start = hyprof_gdal_connection_start(filename);
    VSIStatBufL sb;
    if (start <= 0 || VSIStatL(filename, &sb) == 0)
        return 0;
    char *dir = hyprof_strndup(filename, (size_t)start);
    int ok = VSIStatL(dir, &sb) == 0 && VSI_ISDIR(sb.st_mode);
    CPLFree(dir);
    return ok;
}

int hyprof_gdal_identify(const char *filename, const char *header, int header_len)
{
    if (STARTS_WITH_CI(filename, HYPROF_DRIVER_PREFIX))
        return 1;
    if (!header || header_len <= 0)
        return folder_connection(filename);
    if (!hyprof_ends_with_ci(filename, ".hyprof"))
        return 0;
    for (int i = 0; i < header_len; i++)
        if (!strchr(" \t\r\n", header[i]))
            return header[i] == '{';
    return 0;
}

/* Descriptors are small JSON files; a larger one is refused by name rather
 * than read in part. */
#define DESCRIPTOR_MAX ((vsi_l_offset)16 << 20)

static hyprof_gdal_source_t *open_descriptor(const char *path)
{
    int exists;
    const char *why = hyprof_file_problem(path, &exists);
    if (why) {
        ERR(CPLE_OpenFailed, "descriptor '%s' %s", path, why);
        return NULL;
    }
    GByte *text = NULL;
    vsi_l_offset size = 0;
    VSIStatBufL sb;
    if (VSIStatL(path, &sb) == 0 && (vsi_l_offset)sb.st_size > DESCRIPTOR_MAX) {
        ERR(CPLE_OpenFailed, "descriptor '%s' is %lld bytes; descriptors are limited to "
            "16 MiB", path, (long long)sb.st_size);
        return NULL;
    }
    if (!VSIIngestFile(NULL, path, &text, &size, (GIntBig)DESCRIPTOR_MAX)) {
        ERR(CPLE_OpenFailed, "cannot read descriptor '%s'", path);
        return NULL;
    }
    hyprof_gdal_source_t *src = hyprof_gdal_parse_descriptor((const char *)text, (size_t)size,
                                                             path);
    VSIFree(text);
    return src;
}

static int is_file_param(const hyprof_param_t *p)
{
    return hyprof_param_is_input(p);
}

/* Names GDAL may read without a file behind them (subdatasets such as
 * NETCDF:f.nc:var, network /vsi paths) are left to GDAL when stat cannot
 * find them. */
static int maybe_not_a_file(const char *name)
{
    return strchr(name, ':') != NULL;
}

/* The input and files named by parameters must be regular, non-empty files
 * (a FIFO or a device would block or never end). A folder is left to GDAL
 * for the input (some formats are folders). */
static int check_files(const hyprof_gdal_source_t *src)
{
    int exists;
    const char *why = hyprof_file_problem(src->input, &exists);
    if (!exists && maybe_not_a_file(src->input))
        why = NULL;
    if (why && strcmp(why, "is a directory") != 0) {
        ERR(CPLE_OpenFailed, "input '%s' %s", src->input, why);
        return 0;
    }
    for (size_t i = 0; i < src->op->nparams; i++) {
        const hyprof_param_t *p = &src->op->params[i];
        const char *v = hyprof_args_str(src->args, p->name);
        if (!v || !is_file_param(p))
            continue;
        why = hyprof_file_problem(v, &exists);
        if (!exists && p->type == HYPROF_PARAM_RASTER_IN && maybe_not_a_file(v))
            why = NULL;
        if (why) {
            ERR(CPLE_OpenFailed, "parameter '%s': '%s' %s", p->name, v, why);
            return 0;
        }
    }
    return 1;
}

static void add_file(hyprof_gdal_source_t *src, const char *path)
{
    char *stamp = hyprof_file_stamp(path);
    src->files = CSLAddString(src->files, path);
    src->stamps = CSLAddString(src->stamps, stamp ? stamp : "");
    CPLFree(stamp);
}

/* One field of the key, length-prefixed so that no value can pose as
 * another field. */
static void key_field(hyprof_text_t *key, const char *name, const char *value)
{
    hyprof_text_printf(key, "%zu:%s=%zu:%s\n", strlen(name), name, strlen(value), value);
}

/* The cache key, exact: the operation, every parameter, and the input and
 * named files with their identities (device, inode, modification time,
 * size: an edited file is a new result). Backend, device and threads do
 * not change the result. */
static void make_key(hyprof_gdal_source_t *src)
{
    hyprof_text_t key = {0};
    key_field(&key, "operation", src->op->name);
    add_file(src, src->input);
    for (size_t i = 0; i < src->op->nparams; i++) {
        const hyprof_param_t *p = &src->op->params[i];
        const char *v = hyprof_args_str(src->args, p->name);
        if (!v)
            continue;
        key_field(&key, p->name, v);
        if (is_file_param(p))
            add_file(src, v);
    }
    for (int i = 0; src->files && src->files[i]; i++) {
        key_field(&key, "file", src->files[i]);
        key_field(&key, "stamp", src->stamps[i]);
    }
    src->key = hyprof_text_take(&key);
}

int hyprof_gdal_source_unchanged(const hyprof_gdal_source_t *src)
{
    for (int i = 0; src->files && src->files[i]; i++) {
        if (!*src->stamps[i])
            continue;
        char *now = hyprof_file_stamp(src->files[i]);
        int same = now && strcmp(now, src->stamps[i]) == 0;
        CPLFree(now);
        if (!same) {
            ERR(CPLE_FileIO, "'%s' changed since the dataset was opened (its result would not "
                "be the one announced); open the dataset again", src->files[i]);
            return 0;
        }
    }
    return 1;
}

/* Files by absolute name, so that the key and metadata do not depend on
 * the current folder (names resolved from no folder are the current
 * folder's). */
static int absolute_files(hyprof_gdal_source_t *src)
{
    char *cwd = getcwd(NULL, 0);
    if (!cwd)
        return 1;
    char *input = hyprof_gdal_resolve(cwd, src->input);
    CPLFree(src->input);
    src->input = input;
    int ok = 1;
    for (size_t i = 0; ok && i < src->op->nparams; i++) {
        const hyprof_param_t *p = &src->op->params[i];
        const char *v = hyprof_args_str(src->args, p->name);
        if (!v || !is_file_param(p) || !CPLIsFilenameRelative(v))
            continue;
        char *abs = hyprof_gdal_resolve(cwd, v);
        ok = hyprof_args_set(src->args, p->name, abs) == HYPROF_OK;
        if (!ok)
            ERR(CPLE_IllegalArg, "%s", hyprof_args_error(src->args));
        CPLFree(abs);
    }
    free(cwd);
    return ok;
}

/* Nodata is known before computing when the input declares one (the output
 * has one: NaN, as every float output), or when no pixel can be masked
 * (integers, no mask band). */
static void input_nodata(hyprof_gdal_source_t *src, GDALDatasetH ds)
{
    GDALRasterBandH b1 = GDALGetRasterBand(ds, 1);
    int has = 0;
    (void)GDALGetRasterNoDataValue(b1, &has);
    if (has) {
        src->nodata_known = src->has_nodata = 1;
        src->nodata = HYPROF_FLOAT_NODATA;
        return;
    }
    int maskable = 0;
    for (int b = 1; b <= src->in_bands && !maskable; b++) {
        GDALRasterBandH h = GDALGetRasterBand(ds, b);
        maskable = !(GDALGetMaskFlags(h) & GMF_ALL_VALID) ||
                   GDALDataTypeIsFloating(GDALGetRasterDataType(h));
    }
    src->nodata_known = !maskable;
}

static int read_input_header(hyprof_gdal_source_t *src)
{
    CPLErrorReset();
    GDALDatasetH ds = GDALOpenEx(src->input, GDAL_OF_RASTER | GDAL_OF_READONLY, NULL, NULL, NULL);
    if (!ds) {
        VSIStatBufL sb;
        const char *why = CPLGetLastErrorType() != CE_None ? CPLGetLastErrorMsg() : "";
        int dir = VSIStatL(src->input, &sb) == 0 && VSI_ISDIR(sb.st_mode);
        char *reason = CPLStrdup(*why ? why : dir ? "it is a folder no GDAL driver reads"
                                                  : "no GDAL driver recognises its format");
        ERR(CPLE_OpenFailed, "cannot open input '%s' as a raster: %s", src->input, reason);
        CPLFree(reason);
        return 0;
    }
    src->width = GDALGetRasterXSize(ds);
    src->height = GDALGetRasterYSize(ds);
    src->in_bands = GDALGetRasterCount(ds);
    const char *wkt = GDALGetProjectionRef(ds);
    src->wkt = wkt && *wkt ? CPLStrdup(wkt) : NULL;
    src->has_geotransform = GDALGetGeoTransform(ds, src->geotransform) == CE_None;
    int ok = src->in_bands > 0;
    if (ok)
        input_nodata(src, ds);
    else
        ERR(CPLE_AppDefined, "input '%s' has no band", src->input);
    GDALClose(ds);
    return ok;
}

double hyprof_gdal_source_bytes(const hyprof_gdal_source_t *src, size_t bands)
{
    return (double)src->width * (double)src->height * ((double)bands + src->in_bands) *
           sizeof(float);
}

/* The parameters given, for messages about what they ask for (long values
 * shortened: the message names them, it does not restate them). */
static char *given_params(const hyprof_gdal_source_t *src)
{
    hyprof_text_t t = {0};
    for (size_t i = 0; i < src->op->nparams; i++) {
        const char *name = src->op->params[i].name, *v = hyprof_args_str(src->args, name);
        if (!v || !hyprof_args_given(src->args, name))
            continue;
        size_t n = strlen(v);
        hyprof_text_printf(&t, "%s%s=%.*s%s", t.len ? ", " : "", name, n > 40 ? 37 : (int)n, v,
                           n > 40 ? "..." : "");
    }
    if (!t.len)
        hyprof_text_printf(&t, "the defaults");
    return hyprof_text_take(&t);
}

/* A band count GDAL can hold and a result (with the input it is computed
 * from) that fits in the memory this process may still allocate. */
static int check_size(const hyprof_gdal_source_t *src, size_t bands)
{
    double need = hyprof_gdal_source_bytes(src, bands);
    double avail = (double)hyprof_host_memory_available();
    if (bands <= HYPROF_DRIVER_MAX_BANDS && need <= avail)
        return 1;
    char *given = given_params(src);
    if (bands > HYPROF_DRIVER_MAX_BANDS)
        ERR(CPLE_IllegalArg, "%s with %s gives %zu bands; a dataset holds at most %d",
            src->op->name, given, bands, HYPROF_DRIVER_MAX_BANDS);
    else
        ERR(CPLE_OutOfMemory, "%s with %s gives %zu bands of %dx%d pixels: with its input "
            "that needs %.1f MiB of memory, but only %.1f MiB is available", src->op->name,
            given, bands, src->width, src->height, need / 1048576.0, avail / 1048576.0);
    CPLFree(given);
    return 0;
}

/* The band names of `n` output bands from the library, from the parameters
 * alone (hyprof_op_band_names: the names the computed result carries). */
static int band_names(hyprof_ctx_t *ctx, hyprof_gdal_source_t *src, size_t n)
{
    char **names = NULL;
    if (hyprof_op_band_names(ctx, src->op, src->args, (size_t)src->width, (size_t)src->height,
                             (size_t)src->in_bands, n, &names) != HYPROF_OK) {
        ERR(CPLE_IllegalArg, "%s", hyprof_ctx_last_error(ctx));
        return 0;
    }
    for (size_t b = 0; names && b < n; b++)
        src->band_names = CSLAddString(src->band_names, names[b]);
    hyprof_band_names_free(names, n);
    return 1;
}

/* The band count of an operation that cannot tell it before running
 * (unmix with endmembers=auto: HySime decides), computed now after checking
 * that its input fits in memory. */
static size_t computed_bands(const hyprof_gdal_source_t *src)
{
    const hyprof_gdal_result_t *res = hyprof_gdal_result_acquire(src);
    if (!res)
        return 0;
    size_t n = res->result.cube.bands;
    hyprof_gdal_result_release(res);
    return n;
}

/* The output band count and band names from the library, from the
 * parameters alone. */
static int output_bands(hyprof_gdal_source_t *src)
{
    if (hyprof_gdal_is_classify(src->op))
        return hyprof_gdal_classify_open(src);
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    size_t n = 0;
    if (!ctx) {
        ERR(CPLE_OutOfMemory, "out of memory");
        return 0;
    }
    hyprof_status_t st = hyprof_op_output_bands(ctx, src->op, src->args, (size_t)src->in_bands, &n);
    if (st != HYPROF_OK)
        ERR(CPLE_IllegalArg, "%s", hyprof_ctx_last_error(ctx));
    int ok = st == HYPROF_OK && check_size(src, n ? n : (size_t)src->in_bands);
    if (ok && n == 0)
        ok = (n = computed_bands(src)) != 0;
    ok = ok && band_names(ctx, src, n);
    hyprof_ctx_free(&ctx);
    if (ok)
        src->bands = (int)n;
    return ok;
}

hyprof_gdal_source_t *hyprof_gdal_source_open(const char *filename)
{
    int connection = STARTS_WITH_CI(filename, HYPROF_DRIVER_PREFIX) ||
                     folder_connection(filename);
    hyprof_gdal_source_t *src = connection ? hyprof_gdal_parse_connection(filename)
                                    : open_descriptor(filename);
    if (!src)
        return NULL;
    if (!absolute_files(src) || !check_files(src)) {
        hyprof_gdal_source_free(src);
        return NULL;
    }
    make_key(src); /* stamps the files before their header is read */
    if (!read_input_header(src) || !output_bands(src)) {
        hyprof_gdal_source_free(src);
        return NULL;
    }
    return src;
}
