/* What the pixel functions share: sources in, values out, arguments. */
#include "pixfn.h"
#include "driver_text.h"

#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

hyprof_status_t hyprof_pixfn_sources(const char *fname, void **sources, int nsources,
                                     int width, int height, GDALDataType type, int has_nodata,
                                     double nodata, hyprof_cube_t *cube)
{
    size_t npix = (size_t)width * (size_t)height;
    int tsize = GDALGetDataTypeSizeBytes(type);
    hyprof_status_t st = hyprof_cube_alloc(cube, HYPROF_FLOAT32, (size_t)width, (size_t)height,
                                           (size_t)nsources);
    if (st == HYPROF_OK)
        st = hyprof_cube_alloc_mask(cube);
    if (st != HYPROF_OK) {
        hyprof_cube_free(cube);
        CPLError(CE_Failure, CPLE_OutOfMemory, "%s: cannot hold %d sources of %dx%d pixels",
                 fname, nsources, width, height);
        return st;
    }
    if (GDALDataTypeIsComplex(type)) {
        hyprof_cube_free(cube);
        CPLError(CE_Failure, CPLE_NotSupported, "%s: complex sources (%s) are not supported",
                 fname, GDALGetDataTypeName(type));
        return HYPROF_ERR_ARGUMENT;
    }
    float *x = cube->data;
    float ndf = (float)nodata;
    /* Through float32 as the CLI reads its input, so both see the same values. */
    for (int s = 0; s < nsources; s++) {
        float *xs = x + (size_t)s * npix;
        GDALCopyWords64(sources[s], type, tsize, xs, GDT_Float32, sizeof(float), (GPtrDiff_t)npix);
        for (size_t i = 0; i < npix; i++)
            if (!isfinite(xs[i]) || (has_nodata && (xs[i] == ndf || (isnan(nodata) && isnan(xs[i])))))
                cube->mask[i] = 0;
    }
    cube->has_nodata = has_nodata;
    cube->nodata = has_nodata ? nodata : NAN;
    return HYPROF_OK;
}

void hyprof_pixfn_write(const float *values, void *data, int width, int height,
                        GDALDataType type, int pixel_space, int line_space)
{
    for (int y = 0; y < height; y++)
        GDALCopyWords(values + (size_t)y * (size_t)width, GDT_Float32, sizeof(float),
                      (GByte *)data + (GPtrDiff_t)line_space * y, type, pixel_space, width);
}

void hyprof_pixfn_write64(const double *values, void *data, int width, int height,
                          GDALDataType type, int pixel_space, int line_space)
{
    for (int y = 0; y < height; y++)
        GDALCopyWords(values + (size_t)y * (size_t)width, GDT_Float64, sizeof(double),
                      (GByte *)data + (GPtrDiff_t)line_space * y, type, pixel_space, width);
}

void hyprof_pixfn_finish(float *values, const uint8_t *mask, size_t n, int has_nodata,
                         double nodata)
{
    float nd = has_nodata ? (float)nodata : NAN;
    for (size_t i = 0; i < n; i++) {
        if (mask && !mask[i])
            values[i] = nd;
        else if (has_nodata && values[i] == nd)
            values[i] = nextafterf(values[i], INFINITY);
    }
}

CPLErr hyprof_pixfn_apply(const char *fname, void **sources, int nsources, void *data,
                          int width, int height, GDALDataType stype, GDALDataType btype,
                          int pixel_space, int line_space, int has_nodata, double nodata,
                          hyprof_pixfn_compute_t compute, void *user)
{
    hyprof_cube_t x = {0};
    size_t npix = (size_t)width * (size_t)height;
    float *out = NULL;
    CPLErr err = CE_Failure;
    if (hyprof_pixfn_sources(fname, sources, nsources, width, height, stype, has_nodata, nodata,
                             &x) == HYPROF_OK &&
        (out = VSI_MALLOC2_VERBOSE(npix ? npix : 1, sizeof *out)) != NULL)
        err = compute(user, &x, out);
    if (err == CE_None) {
        hyprof_pixfn_finish(out, x.mask, npix, has_nodata, nodata);
        hyprof_pixfn_write(out, data, width, height, btype, pixel_space, line_space);
    }
    VSIFree(out);
    hyprof_cube_free(&x);
    return err;
}

CPLErr hyprof_pixfn_double(const char *fname, CSLConstList args, const char *name, int required,
                           double def, double min, double max, double *out)
{
    const char *v = CSLFetchNameValue(args, name);
    if (!v) {
        if (required) {
            CPLError(CE_Failure, CPLE_IllegalArg, "%s: argument '%s' is missing", fname, name);
            return CE_Failure;
        }
        *out = def;
        return CE_None;
    }
    char *end = NULL;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || errno == ERANGE || !isfinite(d)) {
        CPLError(CE_Failure, CPLE_IllegalArg, "%s: argument %s='%s' is not a finite number",
                 fname, name, v);
        return CE_Failure;
    }
    if (d < min || d > max) {
        CPLError(CE_Failure, CPLE_IllegalArg, "%s: argument %s=%s is out of range [%g, %g]",
                 fname, name, v, min, max);
        return CE_Failure;
    }
    *out = d;
    return CE_None;
}

CPLErr hyprof_pixfn_int(const char *fname, CSLConstList args, const char *name, int required,
                        long def, long min, long max, long *out)
{
    const char *v = CSLFetchNameValue(args, name);
    if (!v) {
        if (required) {
            CPLError(CE_Failure, CPLE_IllegalArg, "%s: argument '%s' is missing", fname, name);
            return CE_Failure;
        }
        *out = def;
        return CE_None;
    }
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE) {
        CPLError(CE_Failure, CPLE_IllegalArg, "%s: argument %s='%s' is not an integer", fname,
                 name, v);
        return CE_Failure;
    }
    if (n < min || n > max) {
        CPLError(CE_Failure, CPLE_IllegalArg, "%s: argument %s=%s is out of range [%ld, %ld]",
                 fname, name, v, min, max);
        return CE_Failure;
    }
    *out = n;
    return CE_None;
}

CPLErr hyprof_pixfn_nodata(const char *fname, CSLConstList args, int *has, double *nodata)
{
    const char *v = CSLFetchNameValue(args, "nodata");
    *has = v != NULL;
    *nodata = NAN;
    if (!v || EQUAL(v, "nan"))
        return CE_None;
    char *end = NULL;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || (errno == ERANGE && isinf(d))) {
        CPLError(CE_Failure, CPLE_IllegalArg, "%s: argument nodata='%s' is not a number (or "
                 "beyond the range of a double)", fname, v);
        return CE_Failure;
    }
    *nodata = d;
    return CE_None;
}

/* The canonical name: the model cache's key must not depend on the folder a
 * relative name was found from. */
static char *canonical(const char *path)
{
    char *real = realpath(path, NULL);
    char *out = CPLStrdup(real ? real : path);
    free(real);
    return out;
}

/* A model file must be a regular, non-empty file: a FIFO or a device would
 * block or never end. */
char *hyprof_pixfn_file(const char *fname, CSLConstList args, const char *name)
{
    const char *v = CSLFetchNameValue(args, name);
    if (!v || !*v) {
        CPLError(CE_Failure, CPLE_IllegalArg, "%s: argument '%s' is missing", fname, name);
        return NULL;
    }
    int exists;
    const char *why = hyprof_file_problem(v, &exists);
    if (!why)
        return canonical(v);
    if (exists || !CPLIsFilenameRelative(v)) {
        CPLError(CE_Failure, CPLE_OpenFailed, "%s: %s '%s' %s", fname, name, v, why);
        return NULL;
    }
    char **dirs = CSLTokenizeString2(CPLGetConfigOption("HYPROF_MODEL_PATH", ""), ":", 0);
    char *found = NULL;
    for (int i = 0; dirs && dirs[i] && !found; i++) {
        char *p = hyprof_path_join(dirs[i], v);
        const char *problem = hyprof_file_problem(p, &exists);
        if (!problem)
            found = canonical(p);
        else if (exists) {
            CPLError(CE_Failure, CPLE_OpenFailed, "%s: %s '%s' (found as '%s') %s", fname,
                     name, v, p, problem);
            CPLFree(p);
            break;
        }
        CPLFree(p);
    }
    CSLDestroy(dirs);
    if (!found && !exists)
        CPLError(CE_Failure, CPLE_OpenFailed,
                 "%s: %s '%s' does not exist (relative paths are searched in the current "
                 "folder and the HYPROF_MODEL_PATH folders: GDAL does not tell a pixel "
                 "function its .vrt's folder; a HYPROF dataset in a relativeToVRT source "
                 "takes its files from there)", fname, name, v);
    return found;
}

hyprof_ctx_t *hyprof_pixfn_ctx(const char *fname)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    if (!ctx)
        CPLError(CE_Failure, CPLE_OutOfMemory, "%s: out of memory", fname);
    else
        hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CPU);
    return ctx;
}

/* Whether arguments_xml declares <Argument name='NAME'. */
static int declared(const char *xml, const char *name, size_t n)
{
    static const char tag[] = "<Argument name='";
    for (const char *p = strstr(xml, tag); p; p = strstr(p + 1, tag)) {
        const char *v = p + sizeof tag - 1;
        if (strncmp(v, name, n) == 0 && v[n] == '\'')
            return 1;
    }
    return 0;
}

/* Under `warned_lock`: whether "function:name" was warned about before;
 * remembers it (up to a bound: past it, warnings repeat). */
static int warned_before(const char *fname, const char *name, size_t n)
{
    static char *warned[64];
    char *key = hyprof_strdup_printf("%s:%.*s", fname, (int)n, name);
    size_t i = 0;
    for (; i < 64 && warned[i]; i++)
        if (strcmp(warned[i], key) == 0) {
            CPLFree(key);
            return 1;
        }
    if (i < 64)
        warned[i] = key;
    else
        CPLFree(key);
    return 0;
}

void hyprof_pixfn_check_names(const hyprof_pixfn_t *f, CSLConstList args)
{
    static pthread_mutex_t warned_lock = PTHREAD_MUTEX_INITIALIZER;
    for (int i = 0; args && args[i]; i++) {
        const char *eq = strchr(args[i], '=');
        size_t n = eq ? (size_t)(eq - args[i]) : strlen(args[i]);
        if (declared(f->arguments_xml, args[i], n))
            continue;
        pthread_mutex_lock(&warned_lock);
        int before = warned_before(f->name, args[i], n);
        pthread_mutex_unlock(&warned_lock);
        if (!before)
            CPLError(CE_Warning, CPLE_IllegalArg,
                     "%s: unknown argument '%.*s' is ignored (see the function's arguments "
                     "in GDAL's pixel function list)", f->name, (int)n, args[i]);
    }
}
