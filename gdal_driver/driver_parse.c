/* HYPROF dataset names as text: "HYPROF:op:key=value,...:input" connection
 * strings and .hyprof JSON descriptors, parsed through the operation
 * registry into a hyprof_gdal_source_t. Nothing here opens a file or a
 * dataset (the fuzz targets call these functions on arbitrary text); every
 * value is copied whole, whatever its length. */
#include "driver.h"
#include "driver_text.h"

#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <json.h>

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
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
    CSLDestroy(src->files);
    CSLDestroy(src->stamps);
    CSLDestroy(src->band_names);
    CPLFree(src);
}

static int is_common(const char *name)
{
    for (size_t i = 0; i < sizeof common_names / sizeof *common_names; i++)
        if (strcmp(name, common_names[i]) == 0)
            return 1;
    return 0;
}

/* A GDAL dataset name of another driver's syntax ("NETCDF:f.nc:var"): a
 * driver prefix of letters, digits and underscores, then a colon. */
static int other_driver_syntax(const char *name)
{
    size_t n = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
    return n > 0 && name[n] == ':' && !STARTS_WITH_CI(name, HYPROF_DRIVER_PREFIX);
}

char *hyprof_gdal_resolve(const char *base, const char *name)
{
    if (!base || !*base || !*name || !CPLIsFilenameRelative(name) || other_driver_syntax(name))
        return CPLStrdup(name);
    return hyprof_path_join(base, name);
}

/* One parameter; relative file names are taken from `base` (the folder of
 * the file naming them; NULL: the current folder). */
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
    char *path = hyprof_param_is_input(p) ? hyprof_gdal_resolve(base, value) : NULL;
    int ok = hyprof_args_set(src->args, name, path ? path : value) == HYPROF_OK;
    if (!ok)
        ERR(CPLE_IllegalArg, "%s", hyprof_args_error(src->args));
    CPLFree(path);
    return ok;
}

/* "key=value,key=value": a piece without '=' continues the previous value,
 * so lists (thresholds=36,144,324) need no quoting; a lone name sets a flag. */
static int parse_params(hyprof_gdal_source_t *src, const char *text, const char *base)
{
    char **tok = CSLTokenizeString2(text, ",", CSLT_PRESERVEQUOTES);
    char *name = NULL;
    hyprof_text_t value = {0};
    int ok = 1;
    for (int i = 0; ok && tok && tok[i]; i++) {
        const char *eq = strchr(tok[i], '=');
        if (!eq && name) {
            hyprof_text_append(&value, ",", 1);
            hyprof_text_append(&value, tok[i], strlen(tok[i]));
            continue;
        }
        if (name) {
            char *v = hyprof_text_take(&value);
            ok = set_param(src, name, v, base);
            CPLFree(v);
        }
        CPLFree(name);
        name = eq ? hyprof_strndup(tok[i], (size_t)(eq - tok[i])) : CPLStrdup(tok[i]);
        CPLFree(hyprof_text_take(&value));
        const char *v = eq ? eq + 1 : "true";
        hyprof_text_append(&value, v, strlen(v));
    }
    char *v = hyprof_text_take(&value);
    if (ok && name)
        ok = set_param(src, name, v, base);
    CPLFree(v);
    CPLFree(name);
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
    if (!op->run && !hyprof_gdal_is_classify(op)) {
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

ptrdiff_t hyprof_gdal_connection_start(const char *name)
{
    if (STARTS_WITH_CI(name, HYPROF_DRIVER_PREFIX))
        return 0;
    for (const char *p = strchr(name, '/'); p; p = strchr(p + 1, '/'))
        if (STARTS_WITH_CI(p + 1, HYPROF_DRIVER_PREFIX))
            return p + 1 - name;
    return -1;
}

/* "[FOLDER/]HYPROF:op:params:input"; the input is everything after the third
 * colon (it may hold colons itself: /vsicurl/http://...). Relative files are
 * taken from FOLDER. */
hyprof_gdal_source_t *hyprof_gdal_parse_connection(const char *name)
{
    ptrdiff_t start = hyprof_gdal_connection_start(name);
    if (start < 0) {
        ERR(CPLE_IllegalArg, "'%s' does not hold " HYPROF_DRIVER_PREFIX, name);
        return NULL;
    }
    const char *op = name + start + strlen(HYPROF_DRIVER_PREFIX);
    const char *c1 = strchr(op, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2 || !c2[1]) {
        ERR(CPLE_IllegalArg, "'%s' is not HYPROF:operation:key=value,...:input", name);
        return NULL;
    }
    char *base = start > 0 ? hyprof_strndup(name, (size_t)start) : NULL;
    char *op_name = hyprof_strndup(op, (size_t)(c1 - op));
    char *params = hyprof_strndup(c1 + 1, (size_t)(c2 - c1 - 1));
    hyprof_gdal_source_t *src = new_source(op_name);
    if (src && !parse_params(src, params, base)) {
        hyprof_gdal_source_free(src);
        src = NULL;
    }
    if (src)
        src->input = hyprof_gdal_resolve(base, c2 + 1);
    CPLFree(base);
    CPLFree(op_name);
    CPLFree(params);
    return src;
}

/* A JSON string as C text: NULL (and an error) when it holds a NUL
 * character, which C would silently cut it at. */
static const char *json_cstring(json_object *v, const char *path, const char *what)
{
    const char *s = json_object_get_string(v);
    if ((size_t)json_object_get_string_len(v) != strlen(s)) {
        ERR(CPLE_AppDefined, "descriptor '%s': %s holds a NUL character (\\u0000)", path, what);
        return NULL;
    }
    return s;
}

/* A JSON scalar appended as parameter text: numbers exactly (the shortest
 * form that reads back as the same double). */
static int json_scalar(json_object *v, hyprof_text_t *out)
{
    switch (json_object_get_type(v)) {
    case json_type_string: {
        const char *s = json_object_get_string(v);
        size_t n = (size_t)json_object_get_string_len(v);
        if (n != strlen(s))
            return 0;
        hyprof_text_append(out, s, n);
        return 1;
    }
    case json_type_boolean:
        hyprof_text_printf(out, "%s", json_object_get_boolean(v) ? "true" : "false");
        return 1;
    case json_type_int: hyprof_text_printf(out, "%lld", (long long)json_object_get_int64(v)); return 1;
    case json_type_double: {
        double d = json_object_get_double(v);
        char *s = hyprof_strdup_printf("%.15g", d);
        if (strtod(s, NULL) != d && !isnan(d)) {
            CPLFree(s);
            s = hyprof_strdup_printf("%.17g", d);
        }
        hyprof_text_append(out, s, strlen(s));
        CPLFree(s);
        return 1;
    }
    default: return 0;
    }
}

/* A JSON value as parameter text: a scalar, or a list of scalars
 * comma-joined. NULL when it is neither (or a string holds a NUL). */
static char *json_text(json_object *v)
{
    hyprof_text_t t = {0};
    int ok = 1;
    if (json_object_get_type(v) == json_type_array) {
        size_t n = json_object_array_length(v);
        for (size_t i = 0; ok && i < n; i++) {
            if (i)
                hyprof_text_append(&t, ",", 1);
            ok = json_scalar(json_object_array_get_idx(v, i), &t);
        }
    } else {
        ok = json_scalar(v, &t);
    }
    char *s = hyprof_text_take(&t);
    if (!ok) {
        CPLFree(s);
        s = NULL;
    }
    return s;
}

static int descriptor_params(hyprof_gdal_source_t *src, json_object *params, const char *path,
                             const char *base)
{
    if (json_object_get_type(params) != json_type_object) {
        ERR(CPLE_AppDefined, "descriptor '%s': \"parameters\" must be an object", path);
        return 0;
    }
    json_object_object_foreach(params, key, val) {
        char *text = json_text(val);
        if (!text) {
            ERR(CPLE_AppDefined, "descriptor '%s': parameter '%s' must be a string, number, "
                "boolean or list of those (strings without NUL characters)", path, key);
            return 0;
        }
        int ok = set_param(src, key, text, base);
        CPLFree(text);
        if (!ok)
            return 0;
    }
    return 1;
}

/* The whole text must be one JSON object (nothing after it but spaces). */
static json_object *parse_json(const char *text, size_t len, const char *path)
{
    if (memchr(text, '\0', len)) {
        ERR(CPLE_AppDefined, "descriptor '%s' is not text (it holds a NUL byte)", path);
        return NULL;
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        ERR(CPLE_OutOfMemory, "out of memory");
        return NULL;
    }
    json_object *doc = len <= INT32_MAX ? json_tokener_parse_ex(tok, text, (int)len) : NULL;
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    if (doc && jerr == json_tokener_success) {
        for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
            if (!strchr(" \t\r\n", text[i])) {
                ERR(CPLE_AppDefined, "descriptor '%s' is not valid JSON: text after the "
                    "object, at byte %zu", path, i);
                json_object_put(doc);
                doc = NULL;
                break;
            }
    } else {
        if (jerr == json_tokener_continue || jerr == json_tokener_success)
            ERR(CPLE_AppDefined, "descriptor '%s' is not valid JSON: it ends too early", path);
        else
            ERR(CPLE_AppDefined, "descriptor '%s' is not valid JSON: %s", path,
                json_tokener_error_desc(jerr));
        json_object_put(doc);
        doc = NULL;
    }
    json_tokener_free(tok);
    if (doc && json_object_get_type(doc) != json_type_object) {
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
    return json_cstring(v, path, key);
}

static int known_members(json_object *doc, const char *path)
{
    json_object_object_foreach(doc, key, val) {
        (void)val;
        if (strcmp(key, "operation") && strcmp(key, "input") && strcmp(key, "parameters")) {
            ERR(CPLE_AppDefined, "descriptor '%s': unknown member \"%s\" (operation, "
                "parameters, input)", path, key);
            return 0;
        }
    }
    return 1;
}

/* {"operation": "eadp", "parameters": {...}, "input": "scene.tif"}; relative
 * files are relative to the descriptor's folder. */
hyprof_gdal_source_t *hyprof_gdal_parse_descriptor(const char *text, size_t len,
                                                   const char *path)
{
    json_object *doc = parse_json(text, len, path);
    if (!doc)
        return NULL;
    hyprof_gdal_source_t *src = NULL;
    char *base = hyprof_path_dir(path);
    const char *op = member_string(doc, "operation", path);
    const char *input = op ? member_string(doc, "input", path) : NULL;
    json_object *params = NULL;
    if (input && !*input)
        ERR(CPLE_AppDefined, "descriptor '%s': \"input\" is empty", path);
    else if (input && known_members(doc, path) && (src = new_source(op)) != NULL) {
        if (json_object_object_get_ex(doc, "parameters", &params) &&
            !descriptor_params(src, params, path, base)) {
            hyprof_gdal_source_free(src);
            src = NULL;
        } else {
            src->input = hyprof_gdal_resolve(base, input);
        }
    }
    CPLFree(base);
    json_object_put(doc);
    return src;
}
