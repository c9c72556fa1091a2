/* HYPROF dataset names: "HYPROF:op:key=value,...:input" connection strings
 * and .hyprof JSON descriptors, parsed through the operation registry, and
 * what opening one tells without computing. */
/* VSIStatBufL is struct stat64 */
#define _GNU_SOURCE
#include "driver.h"

#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <cpl_vsi.h>
#include <json.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR(cls, ...) CPLError(CE_Failure, cls, "HYPROF: " __VA_ARGS__)

/* The common options a dataset may set; progress and overwrite mean nothing
 * to a reader. */
static const char *const common_names[] = {"backend", "device", "threads"};

static hyprof_op_t common;
static pthread_once_t common_once = PTHREAD_ONCE_INIT;

static void init_common(void)
{
    common.params = hyprof_common_params(&common.nparams);
    common.name = "common";
}

static const hyprof_op_t *common_op(void)
{
    pthread_once(&common_once, init_common);
    return &common;
}

void hyprof_gdal_source_free(hyprof_gdal_source_t *src)
{
    if (!src)
        return;
    hyprof_args_free(&src->args);
    hyprof_args_free(&src->common);
    CPLFree(src->input);
    CPLFree(src->key);
    CPLFree(src->wkt);
    CPLFree(src);
}

static int is_common(const char *name)
{
    for (size_t i = 0; i < sizeof common_names / sizeof *common_names; i++)
        if (strcmp(name, common_names[i]) == 0)
            return 1;
    return 0;
}

/* One parameter; relative file names are taken from `base` (the
 * descriptor's folder; NULL: the current folder). */
static int set_param(hyprof_gdal_source_t *src, const char *name, const char *value,
                     const char *base)
{
    const hyprof_param_t *p = hyprof_op_param(src->op, name);
    if (!p && is_common(name)) {
        if (hyprof_args_set(src->common, name, value) == HYPROF_OK)
            return 1;
        ERR(CPLE_IllegalArg, "%s", hyprof_args_error(src->common));
        return 0;
    }
    if (p && p->type == HYPROF_PARAM_FILE_OUT) {
        ERR(CPLE_NotSupported, "parameter '%s' of operation '%s' writes a file; the driver "
            "only reads", name, src->op->name);
        return 0;
    }
    char *path = NULL;
    if (p && (p->type == HYPROF_PARAM_FILE_IN || p->type == HYPROF_PARAM_RASTER_IN) && base &&
        CPLIsFilenameRelative(value))
        value = path = CPLStrdup(CPLFormFilename(base, value, NULL));
    int ok = hyprof_args_set(src->args, name, value) == HYPROF_OK;
    if (!ok)
        ERR(CPLE_IllegalArg, "%s", hyprof_args_error(src->args));
    CPLFree(path);
    return ok;
}

/* "key=value,key=value": a piece without '=' continues the previous value,
 * so lists (thresholds=36,144,324) need no quoting; a lone name sets a flag. */
static int parse_params(hyprof_gdal_source_t *src, const char *text)
{
    char **tok = CSLTokenizeString2(text, ",", CSLT_PRESERVEQUOTES);
    char *name = NULL, *value = NULL;
    int ok = 1;
    for (int i = 0; ok && tok && tok[i]; i++) {
        const char *eq = strchr(tok[i], '=');
        if (!eq && value) {
            char *longer = CPLStrdup(CPLSPrintf("%s,%s", value, tok[i]));
            CPLFree(value);
            value = longer;
            continue;
        }
        if (name)
            ok = set_param(src, name, value, NULL);
        CPLFree(name);
        CPLFree(value);
        name = eq ? CPLStrdup(CPLSPrintf("%.*s", (int)(eq - tok[i]), tok[i])) : CPLStrdup(tok[i]);
        value = CPLStrdup(eq ? eq + 1 : "true");
    }
    if (ok && name)
        ok = set_param(src, name, value, NULL);
    CPLFree(name);
    CPLFree(value);
    CSLDestroy(tok);
    return ok;
}

static hyprof_gdal_source_t *new_source(const char *op_name)
{
    const hyprof_op_t *op = hyprof_op_find(op_name);
    if (!op) {
        ERR(CPLE_IllegalArg, "unknown operation '%s' (see 'hyprof --help')", op_name);
        return NULL;
    }
    if (!op->run) {
        ERR(CPLE_NotSupported, "operation '%s' does not map a raster to a raster", op_name);
        return NULL;
    }
    hyprof_gdal_source_t *src = CPLCalloc(1, sizeof *src);
    src->op = op;
    src->args = hyprof_args_new(op);
    src->common = hyprof_args_new(common_op());
    if (!src->args || !src->common) {
        ERR(CPLE_OutOfMemory, "out of memory");
        hyprof_gdal_source_free(src);
        return NULL;
    }
    return src;
}

/* "HYPROF:op:params:input"; the input is everything after the third colon
 * (it may hold colons itself: /vsicurl/http://...). */
static hyprof_gdal_source_t *parse_connection(const char *name)
{
    const char *op = name + strlen(HYPROF_DRIVER_PREFIX);
    const char *c1 = strchr(op, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2 || !c2[1]) {
        ERR(CPLE_IllegalArg, "'%s' is not HYPROF:operation:key=value,...:input", name);
        return NULL;
    }
    char *op_name = CPLStrdup(CPLSPrintf("%.*s", (int)(c1 - op), op));
    char *params = CPLStrdup(CPLSPrintf("%.*s", (int)(c2 - c1 - 1), c1 + 1));
    hyprof_gdal_source_t *src = new_source(op_name);
    if (src && !parse_params(src, params)) {
        hyprof_gdal_source_free(src);
        src = NULL;
    }
    if (src)
        src->input = CPLStrdup(c2 + 1);
    CPLFree(op_name);
    CPLFree(params);
    return src;
}

/* A JSON value as parameter text: lists comma-joined, numbers exactly. */
static int json_text(json_object *v, char *buf, size_t n)
{
    switch (json_object_get_type(v)) {
    case json_type_string: snprintf(buf, n, "%s", json_object_get_string(v)); return 1;
    case json_type_boolean: snprintf(buf, n, "%s", json_object_get_boolean(v) ? "true" : "false"); return 1;
    case json_type_int: snprintf(buf, n, "%lld", (long long)json_object_get_int64(v)); return 1;
    case json_type_double: {
        double d = json_object_get_double(v);
        snprintf(buf, n, "%.15g", d);
        if (strtod(buf, NULL) != d)
            snprintf(buf, n, "%.17g", d);
        return 1;
    }
    case json_type_array: {
        size_t len = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            json_object *e = json_object_array_get_idx(v, i);
            char one[64];
            if (json_object_get_type(e) == json_type_array || !json_text(e, one, sizeof one))
                return 0;
            int w = snprintf(buf + len, n - len, "%s%s", i ? "," : "", one);
            if (w < 0 || (size_t)w >= n - len)
                return 0;
            len += (size_t)w;
        }
        return 1;
    }
    default: return 0;
    }
}

static int descriptor_params(hyprof_gdal_source_t *src, json_object *params, const char *path,
                             const char *base)
{
    if (json_object_get_type(params) != json_type_object) {
        ERR(CPLE_AppDefined, "descriptor '%s': \"parameters\" must be an object", path);
        return 0;
    }
    char buf[8192];
    json_object_object_foreach(params, key, val) {
        if (!json_text(val, buf, sizeof buf)) {
            ERR(CPLE_AppDefined, "descriptor '%s': parameter '%s' must be a string, number, "
                "boolean or list of those", path, key);
            return 0;
        }
        if (!set_param(src, key, buf, base))
            return 0;
    }
    return 1;
}

static json_object *read_json(const char *path)
{
    GByte *text = NULL;
    if (!VSIIngestFile(NULL, path, &text, NULL, 1024 * 1024)) {
        ERR(CPLE_OpenFailed, "cannot read descriptor '%s'", path);
        return NULL;
    }
    enum json_tokener_error jerr = json_tokener_success;
    json_object *doc = json_tokener_parse_verbose((const char *)text, &jerr);
    VSIFree(text);
    if (!doc)
        ERR(CPLE_AppDefined, "descriptor '%s' is not valid JSON: %s", path,
            json_tokener_error_desc(jerr));
    else if (json_object_get_type(doc) != json_type_object) {
        ERR(CPLE_AppDefined, "descriptor '%s' must be a JSON object", path);
        json_object_put(doc);
        doc = NULL;
    }
    return doc;
}

static const char *member_string(json_object *doc, const char *key, const char *path)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(doc, key, &v) || json_object_get_type(v) != json_type_string) {
        ERR(CPLE_AppDefined, "descriptor '%s': \"%s\" (a string) is missing", path, key);
        return NULL;
    }
    return json_object_get_string(v);
}

/* {"operation": "eadp", "parameters": {...}, "input": "scene.tif"}; relative
 * files are relative to the descriptor. */
static hyprof_gdal_source_t *parse_descriptor(const char *path)
{
    json_object *doc = read_json(path);
    if (!doc)
        return NULL;
    hyprof_gdal_source_t *src = NULL;
    char *base = CPLStrdup(CPLGetPath(path));
    const char *op = member_string(doc, "operation", path);
    const char *input = op ? member_string(doc, "input", path) : NULL;
    json_object_object_foreach(doc, key, val) {
        (void)val;
        if (input && strcmp(key, "operation") && strcmp(key, "input") && strcmp(key, "parameters")) {
            ERR(CPLE_AppDefined, "descriptor '%s': unknown member \"%s\" (operation, "
                "parameters, input)", path, key);
            input = NULL;
        }
    }
    json_object *params = NULL;
    if (input && (src = new_source(op)) != NULL) {
        if (json_object_object_get_ex(doc, "parameters", &params) &&
            !descriptor_params(src, params, path, base)) {
            hyprof_gdal_source_free(src);
            src = NULL;
        } else {
            src->input = CPLStrdup(CPLIsFilenameRelative(input)
                                       ? CPLFormFilename(base, input, NULL) : input);
        }
    }
    CPLFree(base);
    json_object_put(doc);
    return src;
}

int hyprof_gdal_identify(const char *filename, const char *header, int header_len)
{
    if (STARTS_WITH_CI(filename, HYPROF_DRIVER_PREFIX))
        return 1;
    if (!EQUAL(CPLGetExtension(filename), "hyprof") || !header || header_len <= 0)
        return 0;
    for (int i = 0; i < header_len; i++)
        if (!strchr(" \t\r\n", header[i]))
            return header[i] == '{';
    return 0;
}

static int file_stamp(const char *path, char *buf, size_t n)
{
    VSIStatBufL sb;
    if (VSIStatL(path, &sb) != 0)
        return 0;
    snprintf(buf, n, "%lld:%lld", (long long)sb.st_mtime, (long long)sb.st_size);
    return 1;
}

/* Files named by parameters must exist (as the CLI checks before work). */
static int check_files(const hyprof_gdal_source_t *src)
{
    char stamp[64];
    for (size_t i = 0; i < src->op->nparams; i++) {
        const hyprof_param_t *p = &src->op->params[i];
        const char *v = hyprof_args_str(src->args, p->name);
        if (v && (p->type == HYPROF_PARAM_FILE_IN || p->type == HYPROF_PARAM_RASTER_IN) &&
            !file_stamp(v, stamp, sizeof stamp)) {
            ERR(CPLE_OpenFailed, "parameter '%s': '%s' does not exist", p->name, v);
            return 0;
        }
    }
    return 1;
}

/* The cache key: the operation, every parameter, and the input and named
 * files with their modification times and sizes (an edited input is a new
 * result). Backend, device and threads do not change the result. */
static void make_key(hyprof_gdal_source_t *src)
{
    char stamp[64] = "";
    char *key = CPLStrdup(CPLSPrintf("%s\n", src->op->name));
    for (size_t i = 0; i < src->op->nparams; i++) {
        const hyprof_param_t *p = &src->op->params[i];
        const char *v = hyprof_args_str(src->args, p->name);
        if (!v)
            continue;
        stamp[0] = '\0';
        if (p->type == HYPROF_PARAM_FILE_IN || p->type == HYPROF_PARAM_RASTER_IN)
            file_stamp(v, stamp, sizeof stamp);
        char *longer = CPLStrdup(CPLSPrintf("%s%s=%s %s\n", key, p->name, v, stamp));
        CPLFree(key);
        key = longer;
    }
    stamp[0] = '\0';
    file_stamp(src->input, stamp, sizeof stamp);
    src->key = CPLStrdup(CPLSPrintf("%sinput=%s %s", key, src->input, stamp));
    CPLFree(key);
}

/* Local files by absolute name, so the key and metadata do not depend on
 * the current folder. */
static void absolute_input(hyprof_gdal_source_t *src)
{
    if (STARTS_WITH(src->input, "/vsi") || strchr(src->input, ':') ||
        !CPLIsFilenameRelative(src->input))
        return;
    char *cwd = CPLGetCurrentDir();
    if (cwd) {
        char *abs = CPLStrdup(CPLFormFilename(cwd, src->input, NULL));
        CPLFree(src->input);
        src->input = abs;
        CPLFree(cwd);
    }
}

/* Nodata is known before computing when the input declares one (the output
 * keeps it), or when no pixel can be masked (integers, no mask band). */
static void input_nodata(hyprof_gdal_source_t *src, GDALDatasetH ds)
{
    GDALRasterBandH b1 = GDALGetRasterBand(ds, 1);
    int has = 0;
    double nd = GDALGetRasterNoDataValue(b1, &has);
    if (has) {
        src->nodata_known = src->has_nodata = 1;
        src->nodata = nd;
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
    VSIStatBufL sb;
    if (!strchr(src->input, ':') && VSIStatL(src->input, &sb) != 0) {
        ERR(CPLE_OpenFailed, "input '%s' does not exist", src->input);
        return 0;
    }
    GDALDatasetH ds = GDALOpenEx(src->input, GDAL_OF_RASTER | GDAL_OF_READONLY, NULL, NULL, NULL);
    if (!ds) {
        ERR(CPLE_OpenFailed, "cannot open input '%s' as a raster", src->input);
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

/* The output band count from the library (no computation); an operation
 * that cannot tell is computed now. */
static int output_bands(hyprof_gdal_source_t *src)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    size_t n = 0;
    if (!ctx) {
        ERR(CPLE_OutOfMemory, "out of memory");
        return 0;
    }
    hyprof_status_t st = hyprof_op_output_bands(ctx, src->op, src->args, (size_t)src->in_bands, &n);
    if (st != HYPROF_OK)
        ERR(CPLE_IllegalArg, "%s", hyprof_ctx_last_error(ctx));
    hyprof_ctx_free(&ctx);
    if (st != HYPROF_OK)
        return 0;
    if (n == 0) {
        const hyprof_gdal_result_t *res = hyprof_gdal_result_acquire(src);
        if (!res)
            return 0;
        n = res->result.cube.bands;
        hyprof_gdal_result_release(res);
    }
    src->bands = (int)n;
    return 1;
}

hyprof_gdal_source_t *hyprof_gdal_source_open(const char *filename)
{
    hyprof_gdal_source_t *src = STARTS_WITH_CI(filename, HYPROF_DRIVER_PREFIX)
                                    ? parse_connection(filename)
                                    : parse_descriptor(filename);
    if (!src)
        return NULL;
    absolute_input(src);
    make_key(src);
    if (!check_files(src) || !read_input_header(src) || !output_bands(src)) {
        hyprof_gdal_source_free(src);
        return NULL;
    }
    return src;
}
