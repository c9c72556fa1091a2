/* The format of raster outputs: which GDAL driver writes a file, with which
 * creation options, and how.
 *
 * The driver is the one --of names, or the one the output's extension names
 * as gdal_translate chooses it (a raster driver that can write and lists the
 * extension; .tif/.tiff and names without an extension are GTiff; several
 * candidates are an error asking for --of). An extension the chosen driver
 * does not list is an error naming both. Before any work the user's creation
 * options are validated against the driver's list and a small dataset of the
 * output's shape (band count, data type, colour table) is written to
 * /vsimem/ with them, so a format that cannot hold the output fails with
 * GDAL's reason before the computation.
 *
 * A driver that can Create writes the temporary file directly, with hyprof's
 * defaults (GTiff: tiled 256x256, BIGTIFF when needed; profiles ZSTD at level
 * 1 without a predictor, class maps DEFLATE with the horizontal predictor)
 * under the user's options. The profile codec is the measured best for speed
 * and size on float profiles (bench/results.md): the floating-point
 * predictor costs more time than it saves bytes there. A driver that can only copy (COG, PNG,
 * JPEG...) gets the raster filled into an uncompressed GTiff beside the
 * temporary and copied from it (CreateCopy, strict: no silent conversion);
 * the intermediate is deleted. GTiff outputs build internal overviews on
 * request (--overviews: nearest for class maps, average for profiles); COG
 * builds its own with the same resampling. */
#include "raster_io.h"

#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <cpl_vsi.h>
#include <gdal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define say hyprof_io_error

/* The process-wide choice (the CLI's --of, --co, --overviews). */
static struct {
    char *format;
    char **co;
    int overviews;
} chosen;

hyprof_status_t hyprof_output_format_set(const char *format, const char *const *co,
                                         int overviews)
{
    CPLFree(chosen.format);
    CSLDestroy(chosen.co);
    chosen.format = format ? CPLStrdup(format) : NULL;
    chosen.co = NULL;
    for (size_t i = 0; co && co[i]; i++)
        chosen.co = CSLAddString(chosen.co, co[i]);
    chosen.overviews = overviews;
    return HYPROF_OK;
}

/* GDAL's last message on one line (its drivers break long ones), into buf. */
static const char *gdal_message(char *buf, size_t n)
{
    const char *m = CPLGetLastErrorMsg();
    size_t k = 0;
    for (const char *c = m ? m : ""; *c && k + 1 < n; c++) {
        int space = *c == '\n' || *c == '\r' || *c == ' ' || *c == '\t';
        if (space && (k == 0 || buf[k - 1] == ' '))
            continue;
        buf[k++] = space ? ' ' : *c;
    }
    while (k && buf[k - 1] == ' ')
        k--;
    buf[k] = '\0';
    return k ? buf : "GDAL gave no reason";
}

/* The extension of path's file name without the dot ("" when none). */
static const char *extension_of(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return dot && dot != base ? dot + 1 : "";
}

static int lists_extension(GDALDriverH drv, const char *ext)
{
    const char *exts = GDALGetMetadataItem(drv, GDAL_DMD_EXTENSIONS, NULL);
    if (!exts)
        exts = GDALGetMetadataItem(drv, GDAL_DMD_EXTENSION, NULL);
    char **list = CSLTokenizeString2(exts ? exts : "", " ", 0);
    int hit = CSLFindString(list, ext) >= 0; /* case-insensitive */
    CSLDestroy(list);
    return hit;
}

static int can_write(GDALDriverH drv)
{
    return GDALGetMetadataItem(drv, GDAL_DCAP_RASTER, NULL) &&
           (GDALGetMetadataItem(drv, GDAL_DCAP_CREATE, NULL) ||
            GDALGetMetadataItem(drv, GDAL_DCAP_CREATECOPY, NULL));
}

/* Drivers that write no pixels of their own: MEM (nothing on disk), VRT
 * (references to the sources, and the source here is a temporary). */
static int holds_no_data(GDALDriverH drv)
{
    const char *name = GDALGetDriverShortName(drv);
    return strcasecmp(name, "MEM") == 0 || strcasecmp(name, "VRT") == 0;
}

/* The raster drivers that can write and list `ext`, as "A, B, C"; their count. */
static int writers_of(const char *ext, GDALDriverH *first, char *names, size_t n)
{
    int count = 0;
    names[0] = '\0';
    for (int i = 0; i < GDALGetDriverCount(); i++) {
        GDALDriverH d = GDALGetDriver(i);
        if (!can_write(d) || !lists_extension(d, ext))
            continue;
        if (!count++)
            *first = d;
        size_t used = strlen(names);
        snprintf(names + used, n - used, "%s%s", used ? ", " : "", GDALGetDriverShortName(d));
    }
    return count;
}

/* The driver for a path with no --of: by its extension. */
static hyprof_status_t driver_by_extension(const char *path, GDALDriverH *drv, char *err,
                                           size_t n)
{
    const char *ext = extension_of(path);
    char names[512];
    if (!*ext || strcasecmp(ext, "tif") == 0 || strcasecmp(ext, "tiff") == 0) {
        *drv = GDALGetDriverByName("GTiff");
        return *drv ? HYPROF_OK : say(HYPROF_ERR_IO, err, n, "GDAL has no GTiff driver");
    }
    int count = writers_of(ext, drv, names, sizeof names);
    if (count == 0)
        return say(HYPROF_ERR_ARGUMENT, err, n,
                   "output '%s': no GDAL raster driver writes .%s files; name it .tif or "
                   "choose a format with --of", path, ext);
    if (count > 1)
        return say(HYPROF_ERR_ARGUMENT, err, n,
                   "output '%s': .%s files are written by several GDAL drivers (%s); choose "
                   "one with --of", path, ext, names);
    return HYPROF_OK;
}

/* The driver --of names, checked against the output's extension. */
static hyprof_status_t driver_by_name(const char *path, const char *format, GDALDriverH *drv,
                                      char *err, size_t n)
{
    *drv = GDALGetDriverByName(format);
    if (!*drv || !GDALGetMetadataItem(*drv, GDAL_DCAP_RASTER, NULL))
        return say(HYPROF_ERR_ARGUMENT, err, n,
                   "--of %s: GDAL has no raster driver of that name (see gdalinfo --formats)",
                   format);
    if (!can_write(*drv))
        return say(HYPROF_ERR_ARGUMENT, err, n, "--of %s: GDAL's %s driver cannot write files",
                   format, GDALGetDriverShortName(*drv));
    const char *ext = extension_of(path);
    const char *exts = GDALGetMetadataItem(*drv, GDAL_DMD_EXTENSIONS, NULL);
    if (!*ext || !exts || !*exts || lists_extension(*drv, ext))
        return HYPROF_OK;
    char list[256] = "";
    char **e = CSLTokenizeString2(exts, " ", 0);
    for (int i = 0; e && e[i]; i++) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s.%s", i ? ", " : "", e[i]);
    }
    CSLDestroy(e);
    return say(HYPROF_ERR_ARGUMENT, err, n,
               "output '%s': the extension .%s does not match --of %s, which writes %s files",
               path, ext, GDALGetDriverShortName(*drv), list);
}

hyprof_status_t hyprof_output_driver(const char *path, GDALDriverH *drv, char *err, size_t n)
{
    hyprof_status_t st = chosen.format ? driver_by_name(path, chosen.format, drv, err, n)
                                       : driver_by_extension(path, drv, err, n);
    if (st != HYPROF_OK)
        return st;
    if (holds_no_data(*drv))
        return say(HYPROF_ERR_ARGUMENT, err, n,
                   "output '%s': the %s format holds no pixels of its own; choose a format "
                   "that stores them (GTiff, COG...)", path, GDALGetDriverShortName(*drv));
    return HYPROF_OK;
}

static int is_driver(GDALDriverH drv, const char *name)
{
    return strcasecmp(GDALGetDriverShortName(drv), name) == 0;
}

/* Whether the driver fills a file itself (Create) rather than copying one. */
static int creates(GDALDriverH drv)
{
    return GDALGetMetadataItem(drv, GDAL_DCAP_CREATE, NULL) != NULL;
}

/* hyprof's defaults for the driver, then the user's options over them. */
static char **creation_options(GDALDriverH drv, hyprof_output_kind_t kind)
{
    char **o = NULL;
    int map = kind == HYPROF_OUTPUT_CLASSMAP;
    if (is_driver(drv, "GTiff")) {
        o = CSLSetNameValue(o, "TILED", "YES");
        o = CSLSetNameValue(o, "BLOCKXSIZE", "256");
        o = CSLSetNameValue(o, "BLOCKYSIZE", "256");
        o = CSLSetNameValue(o, "COMPRESS", map ? "DEFLATE" : "ZSTD");
        o = CSLSetNameValue(o, map ? "PREDICTOR" : "ZSTD_LEVEL", map ? "2" : "1");
        if (!map)
            o = CSLSetNameValue(o, "INTERLEAVE", "BAND");
        o = CSLSetNameValue(o, "BIGTIFF", "IF_SAFER");
        o = CSLSetNameValue(o, "NUM_THREADS", "ALL_CPUS");
    } else if (is_driver(drv, "COG")) {
        o = CSLSetNameValue(o, "COMPRESS", map ? "DEFLATE" : "ZSTD");
        o = CSLSetNameValue(o, map ? "PREDICTOR" : "LEVEL", map ? "YES" : "1");
        o = CSLSetNameValue(o, "BIGTIFF", "IF_SAFER");
        o = CSLSetNameValue(o, "NUM_THREADS", "ALL_CPUS");
        o = CSLSetNameValue(o, "RESAMPLING", map ? "NEAREST" : "AVERAGE");
    }
    for (char **c = chosen.co; c && *c; c++) {
        char *key = NULL;
        const char *v = CPLParseNameValue(*c, &key);
        if (key && v)
            o = CSLSetNameValue(o, key, v);
        CPLFree(key);
    }
    /* The fast level set above is ZSTD's: another codec chosen by the user
     * gets its own default level. */
    const char *codec = CSLFetchNameValue(chosen.co, "COMPRESS");
    if (!map && codec && strcasecmp(codec, "ZSTD") != 0)
        o = CSLSetNameValue(o, is_driver(drv, "COG") ? "LEVEL" : "ZSTD_LEVEL",
                            CSLFetchNameValue(chosen.co, is_driver(drv, "COG") ? "LEVEL"
                                                                               : "ZSTD_LEVEL"));
    /* COG's overviews are compressed as its full resolution unless told. */
    if (is_driver(drv, "COG") && !CSLFetchNameValue(chosen.co, "OVERVIEW_COMPRESS"))
        o = CSLSetNameValue(o, "OVERVIEW_COMPRESS", CSLFetchNameValue(o, "COMPRESS"));
    if (is_driver(drv, "COG") && !CSLFetchNameValue(chosen.co, "OVERVIEW_PREDICTOR"))
        o = CSLSetNameValue(o, "OVERVIEW_PREDICTOR", CSLFetchNameValue(o, "PREDICTOR"));
    return o;
}

/* The user's options against the driver's list: an unknown name or a value
 * out of its choices is named. */
static hyprof_status_t validate_options(GDALDriverH drv, char *err, size_t n)
{
    if (!chosen.co)
        return HYPROF_OK;
    CPLErrorReset();
    if (GDALValidateCreationOptions(drv, chosen.co))
        return HYPROF_OK;
    char why[512];
    return say(HYPROF_ERR_ARGUMENT, err, n, "--co: %s", gdal_message(why, sizeof why));
}

static GDALDataType output_type(hyprof_output_kind_t kind)
{
    return kind == HYPROF_OUTPUT_CLASSMAP ? GDT_Byte : GDT_Float32;
}

/* A small dataset of the output's shape (a MEM one to copy from, or made
 * by the driver itself when it can Create), written to the file `name`. */
static hyprof_status_t try_shape(GDALDriverH drv, hyprof_output_kind_t kind, size_t bands,
                                 char **opt, const char *name, char *err, size_t n)
{
    GDALDataType t = output_type(kind);
    GDALDatasetH src = GDALCreate(GDALGetDriverByName("MEM"), "", 8, 8, (int)bands, t, NULL);
    if (!src)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory checking the output format");
    GDALColorTableH ct = kind == HYPROF_OUTPUT_CLASSMAP ? GDALCreateColorTable(GPI_RGB) : NULL;
    if (ct) {
        GDALColorEntry e = {0, 0, 0, 255};
        GDALSetColorEntry(ct, 1, &e);
        GDALSetRasterColorTable(GDALGetRasterBand(src, 1), ct);
        GDALDestroyColorTable(ct);
    }
    CPLErrorReset();
    GDALDatasetH out = creates(drv)
        ? GDALCreate(drv, name, 8, 8, (int)bands, t, opt)
        : GDALCreateCopy(drv, name, src, TRUE, opt, NULL, NULL);
    hyprof_status_t st = HYPROF_OK;
    char why[512];
    if (!out || CPLGetLastErrorType() >= CE_Failure)
        st = say(HYPROF_ERR_ARGUMENT, err, n, "%s", gdal_message(why, sizeof why));
    if (out)
        GDALClose(out);
    GDALClose(src);
    CPLPushErrorHandler(CPLQuietErrorHandler); /* keeps the message above */
    GDALDeleteDataset(drv, name);
    VSIUnlink(name);
    char aux[1200];
    snprintf(aux, sizeof aux, "%s.aux.xml", name);
    VSIUnlink(aux);
    CPLPopErrorHandler();
    return st;
}

/* try_shape in memory, or, for a driver that cannot create in /vsimem/
 * (netCDF), in a hidden file beside the output (".probe.hyprof-<pid>.tmp",
 * which a later run removes if this one dies meanwhile). */
static hyprof_status_t check_shape(const char *path, GDALDriverH drv, hyprof_output_kind_t kind,
                                   size_t bands, char **opt, char *err, size_t n)
{
    char name[1200];
    const char *ext = GDALGetMetadataItem(drv, GDAL_DMD_EXTENSION, NULL);
    ext = ext && *ext ? ext : "out";
    snprintf(name, sizeof name, "/vsimem/hyprof-format-%ld.%s", (long)getpid(), ext);
    hyprof_status_t st = try_shape(drv, kind, bands, opt, name, err, n);
    if (st == HYPROF_OK || !strstr(err, "/vsimem/"))
        return st;
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path) : 1;
    snprintf(name, sizeof name, "%.*s/.probe.hyprof-%ld.tmp.%s", dir, slash ? path : ".",
             (long)getpid(), ext);
    return try_shape(drv, kind, bands, opt, name, err, n);
}

hyprof_status_t hyprof_output_format_check(const char *path, hyprof_output_kind_t kind,
                                           size_t bands, char *err, size_t n)
{
    GDALDriverH drv;
    hyprof_status_t st = hyprof_output_driver(path, &drv, err, n);
    if (st == HYPROF_OK)
        st = validate_options(drv, err, n);
    if (st == HYPROF_OK && chosen.overviews && !is_driver(drv, "GTiff") && !is_driver(drv, "COG"))
        return say(HYPROF_ERR_ARGUMENT, err, n,
                   "--overviews: only GTiff and COG outputs hold overviews, not %s ('%s')",
                   GDALGetDriverShortName(drv), path);
    if (st != HYPROF_OK || !bands || !GDALGetMetadataItem(drv, GDAL_DCAP_VIRTUALIO, NULL))
        return st;
    char msg[1024];
    char **opt = creation_options(drv, kind);
    st = check_shape(path, drv, kind, bands, opt, msg, sizeof msg);
    CSLDestroy(opt);
    if (st != HYPROF_OK)
        return say(st, err, n, "output '%s': the %s format cannot hold %zu %s band%s: %s", path,
                   GDALGetDriverShortName(drv), bands,
                   kind == HYPROF_OUTPUT_CLASSMAP ? "class" : "float32", bands == 1 ? "" : "s",
                   msg);
    return HYPROF_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* The intermediate of a copying driver: plain tiled GTiff, read once. */
static GDALDatasetH create_via(hyprof_output_t *o, size_t w, size_t h, size_t bands,
                               GDALDataType t)
{
    size_t len = strlen(o->tmp) + 9;
    o->via = malloc(len);
    if (!o->via)
        return NULL;
    snprintf(o->via, len, "%s.src.tif", o->tmp);
    char **opt = NULL;
    opt = CSLSetNameValue(opt, "TILED", "YES");
    opt = CSLSetNameValue(opt, "BIGTIFF", "IF_SAFER");
    opt = CSLSetNameValue(opt, "INTERLEAVE", "BAND");
    GDALDatasetH ds = GDALCreate(GDALGetDriverByName("GTiff"), o->via, (int)w, (int)h,
                                 (int)bands, t, opt);
    CSLDestroy(opt);
    return ds;
}

hyprof_status_t hyprof_output_create(hyprof_output_t *o, const char *path, const char *tmp,
                                     hyprof_output_kind_t kind, size_t w, size_t h, size_t bands,
                                     GDALDataType t, char *err, size_t n)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    o->tmp = tmp;
    o->kind = kind;
    hyprof_status_t st = hyprof_output_driver(path, &o->drv, err, n);
    if (st != HYPROF_OK)
        return st;
    int copy = !creates(o->drv) || is_driver(o->drv, "COG");
    int overviews = (chosen.overviews && is_driver(o->drv, "GTiff")) || copy;
    o->fill_share = overviews ? 0.5 : 1.0;
    CPLErrorReset();
    if (copy) {
        o->ds = create_via(o, w, h, bands, t);
    } else {
        char **opt = creation_options(o->drv, kind);
        o->ds = GDALCreate(o->drv, tmp, (int)w, (int)h, (int)bands, t, opt);
        CSLDestroy(opt);
    }
    if (!o->ds) {
        char why[512];
        st = say(HYPROF_ERR_IO, err, n, "cannot create a temporary file for '%s': %s", path,
                 gdal_message(why, sizeof why));
        hyprof_output_abandon(o);
    }
    return st;
}

int hyprof_output_progress(const hyprof_output_t *o, const hyprof_io_progress_t *pg,
                           double fraction, const char *stage)
{
    return pg && pg->fn ? pg->fn(pg->user, fraction * o->fill_share, stage) : 0;
}

typedef struct {
    const hyprof_io_progress_t *pg;
    double lo, hi;
    const char *stage;
} gdal_progress_t;

static int CPL_STDCALL on_gdal_progress(double f, const char *msg, void *user)
{
    (void)msg;
    const gdal_progress_t *g = user;
    if (!g->pg || !g->pg->fn)
        return TRUE;
    return !g->pg->fn(g->pg->user, g->lo + f * (g->hi - g->lo), g->stage);
}

/* Overview factors 2, 4, ... until the smaller level fits in about one
 * 256-pixel block (at least one level when the raster has 2 pixels a side). */
static int overview_levels(GDALDatasetH ds, int *levels, int max)
{
    int w = GDALGetRasterXSize(ds), h = GDALGetRasterYSize(ds), side = w > h ? w : h, n = 0;
    int small = w < h ? w : h;
    for (int f = 2; n < max && small / f >= 1 && (n == 0 || side / (f / 2) > 256); f *= 2)
        levels[n++] = f;
    return n;
}

static hyprof_status_t build_overviews(hyprof_output_t *o, const hyprof_io_progress_t *pg,
                                       char *err, size_t n)
{
    int levels[32], count = overview_levels(o->ds, levels, 32);
    if (!count)
        return HYPROF_OK;
    gdal_progress_t g = {pg, o->fill_share, 1.0, "overviews"};
    const char *resampling = o->kind == HYPROF_OUTPUT_CLASSMAP ? "NEAREST" : "AVERAGE";
    CPLErrorReset();
    if (GDALBuildOverviews(o->ds, resampling, count, levels, 0, NULL, on_gdal_progress, &g) ==
        CE_None)
        return HYPROF_OK;
    if (pg && pg->fn && pg->fn(pg->user, 1.0, "overviews"))
        return say(HYPROF_ERR_CANCELLED, err, n, "cancelled while writing '%s'", o->path);
    char why[512];
    return say(HYPROF_ERR_IO, err, n, "cannot build the overviews of '%s': %s", o->path,
               gdal_message(why, sizeof why));
}

/* The copying driver's file from the filled intermediate. */
static hyprof_status_t copy_out(hyprof_output_t *o, const hyprof_io_progress_t *pg, char *err,
                                size_t n)
{
    gdal_progress_t g = {pg, o->fill_share, 1.0, "write"};
    char **opt = creation_options(o->drv, o->kind);
    /* --overviews: as many levels as a GTiff gets, where COG's own rule
     * (down to one block) would give none to a small raster. */
    int levels[32], count = overview_levels(o->ds, levels, 32);
    if (chosen.overviews && is_driver(o->drv, "COG") && count &&
        !CSLFetchNameValue(chosen.co, "OVERVIEW_COUNT")) {
        char c[16];
        snprintf(c, sizeof c, "%d", count);
        opt = CSLSetNameValue(opt, "OVERVIEW_COUNT", c);
    }
    CPLErrorReset();
    GDALDatasetH out = GDALCreateCopy(o->drv, o->tmp, o->ds, TRUE, opt, on_gdal_progress, &g);
    CSLDestroy(opt);
    hyprof_status_t st = HYPROF_OK;
    char why[512];
    if (!out && CPLGetLastErrorNo() == CPLE_UserInterrupt)
        st = say(HYPROF_ERR_CANCELLED, err, n, "cancelled while writing '%s'", o->path);
    else if (!out)
        st = say(HYPROF_ERR_IO, err, n, "cannot write '%s' as %s: %s", o->path,
                 GDALGetDriverShortName(o->drv), gdal_message(why, sizeof why));
    if (out) {
        CPLErrorReset();
        GDALClose(out);
        if (CPLGetLastErrorType() >= CE_Failure)
            st = say(HYPROF_ERR_IO, err, n, "cannot finish '%s': %s", o->path,
                     gdal_message(why, sizeof why));
    }
    return st;
}

hyprof_status_t hyprof_output_finish(hyprof_output_t *o, const hyprof_io_progress_t *pg,
                                     char *err, size_t n)
{
    hyprof_status_t st = HYPROF_OK;
    if (o->via)
        st = copy_out(o, pg, err, n);
    else if (chosen.overviews && is_driver(o->drv, "GTiff"))
        st = build_overviews(o, pg, err, n);
    CPLErrorReset();
    GDALClose(o->ds);
    o->ds = NULL;
    char why[512];
    if (st == HYPROF_OK && !o->via && CPLGetLastErrorType() >= CE_Failure)
        st = say(HYPROF_ERR_IO, err, n, "cannot finish '%s': %s", o->path,
                 gdal_message(why, sizeof why));
    hyprof_output_abandon(o);
    return st;
}

void hyprof_output_abandon(hyprof_output_t *o)
{
    if (o->ds)
        GDALClose(o->ds);
    o->ds = NULL;
    if (o->via) {
        GDALDeleteDataset(GDALGetDriverByName("GTiff"), o->via);
        unlink(o->via); /* when GDAL could not open it to delete it */
        size_t len = strlen(o->via) + 9;
        char *aux = malloc(len);
        if (aux) {
            snprintf(aux, len, "%s.aux.xml", o->via);
            unlink(aux);
        }
        free(aux);
    }
    free(o->via);
    o->via = NULL;
}
