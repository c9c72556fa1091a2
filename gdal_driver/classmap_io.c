/* Class maps through GDAL: legends, writing, vector samples. */
#include "classmap_io.h"

#include <gdal.h>
#include <gdal_alg.h>
#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <cpl_vsi.h>
#include <ogr_api.h>
#include <ogr_srs_api.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define say hyprof_io_error

static const char *gdal_reason(void)
{
    const char *m = CPLGetLastErrorMsg();
    return m && *m ? m : "GDAL gave no reason";
}

/* ---- legends ------------------------------------------------------------------------- */

void hyprof_legend_free(hyprof_legend_t *l)
{
    for (size_t v = 0; l->names && v < l->n; v++)
        free(l->names[v]);
    free(l->names);
    free(l->rgba);
    memset(l, 0, sizeof *l);
}

static hyprof_status_t legend_grow(hyprof_legend_t *l, size_t n)
{
    if (n <= l->n)
        return HYPROF_OK;
    char **names = realloc(l->names, n * sizeof *names);
    if (!names)
        return HYPROF_ERR_NOMEM;
    l->names = names;
    uint8_t *rgba = realloc(l->rgba, n * 4);
    if (!rgba)
        return HYPROF_ERR_NOMEM;
    l->rgba = rgba;
    memset(l->names + l->n, 0, (n - l->n) * sizeof *names);
    memset(l->rgba + 4 * l->n, 0, (n - l->n) * 4);
    l->n = n;
    return HYPROF_OK;
}

hyprof_status_t hyprof_legend_set(hyprof_legend_t *l, size_t v, const char *name,
                                  const uint8_t *rgba)
{
    if (legend_grow(l, v + 1) != HYPROF_OK)
        return HYPROF_ERR_NOMEM;
    if (name) {
        free(l->names[v]);
        if (!(l->names[v] = strdup(name)))
            return HYPROF_ERR_NOMEM;
    }
    if (rgba)
        memcpy(l->rgba + 4 * v, rgba, 4);
    return HYPROF_OK;
}

static int opaque_black(GDALColorTableH ct, int v)
{
    const GDALColorEntry *e = GDALGetColorEntry(ct, v);
    return e->c1 == 0 && e->c2 == 0 && e->c3 == 0 && e->c4 == 255;
}

/* A GeoTIFF's colour map has 256 or 65536 entries whatever the table it was
 * given, padded with opaque black: a trailing run of opaque black entries in
 * a table of that length counts as no colour. */
static hyprof_status_t read_colours(GDALRasterBandH band, hyprof_legend_t *l)
{
    GDALColorTableH ct = GDALGetRasterColorTable(band);
    int count = ct ? GDALGetColorEntryCount(ct) : 0;
    if (count == 256 || count == 65536)
        while (count > 0 && opaque_black(ct, count - 1))
            count--;
    for (int v = 0; v < count && v < 65536; v++) {
        const GDALColorEntry *e = GDALGetColorEntry(ct, v);
        uint8_t c[4] = {(uint8_t)e->c1, (uint8_t)e->c2, (uint8_t)e->c3, (uint8_t)e->c4};
        if (hyprof_legend_set(l, (size_t)v, NULL, c) != HYPROF_OK)
            return HYPROF_ERR_NOMEM;
    }
    return HYPROF_OK;
}

static hyprof_status_t read_names(GDALDatasetH ds, GDALRasterBandH band, hyprof_legend_t *l)
{
    char **cat = GDALGetRasterCategoryNames(band);
    for (int v = 0; cat && cat[v] && v < 65536; v++)
        if (*cat[v] && hyprof_legend_set(l, (size_t)v, cat[v], NULL) != HYPROF_OK)
            return HYPROF_ERR_NOMEM;
    if (cat && cat[0])
        return HYPROF_OK;
    /* GeoTIFF keeps category names in the .aux.xml sidecar only: the samples
     * repeat them as CLASS_<v> items, which survive a lost sidecar. */
    char **md = GDALGetMetadata(ds, NULL);
    for (int i = 0; md && md[i]; i++) {
        /* Digits only and no overflow: "%u" would read CLASS_4294967312 as 16. */
        const char *d = md[i] + 6;
        char *end = NULL;
        errno = 0;
        unsigned long v = strncmp(md[i], "CLASS_", 6) == 0 && *d >= '0' && *d <= '9'
                              ? strtoul(d, &end, 10) : 65536;
        if (v < 65536 && !errno && *end == '=' &&
            hyprof_legend_set(l, (unsigned)v, end + 1, NULL) != HYPROF_OK)
            return HYPROF_ERR_NOMEM;
    }
    return HYPROF_OK;
}

/* The column of a raster attribute table with this usage, or -1. */
static int rat_column(GDALRasterAttributeTableH rat, GDALRATFieldUsage use)
{
    int c = GDALRATGetColOfUsage(rat, use);
    if (c < 0 && use == GFU_MinMax)
        c = GDALRATGetColOfUsage(rat, GFU_Min);
    return c;
}

/* Names and colours of a raster attribute table with a Value column, where
 * the colour table and the category names give none. */
static hyprof_status_t read_attribute_table(GDALRasterBandH band, hyprof_legend_t *l)
{
    GDALRasterAttributeTableH rat = GDALGetDefaultRAT(band);
    int cv = rat ? rat_column(rat, GFU_MinMax) : -1;
    if (cv < 0)
        return HYPROF_OK;
    int cn = rat_column(rat, GFU_Name);
    int cc[4] = {rat_column(rat, GFU_Red), rat_column(rat, GFU_Green),
                 rat_column(rat, GFU_Blue), rat_column(rat, GFU_Alpha)};
    for (int row = 0; row < GDALRATGetRowCount(rat); row++) {
        int v = GDALRATGetValueAsInt(rat, row, cv);
        if (v < 0 || v > 65535)
            continue;
        int named = (size_t)v < l->n && l->names[v];
        int coloured = (size_t)v < l->n && l->rgba[4 * v + 3];
        const char *name = cn >= 0 && !named ? GDALRATGetValueAsString(rat, row, cn) : NULL;
        uint8_t c[4] = {0, 0, 0, 255};
        for (int k = 0; k < 4; k++)
            if (cc[k] >= 0) {
                int x = GDALRATGetValueAsInt(rat, row, cc[k]);
                c[k] = (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
            }
        int has_colour = cc[0] >= 0 && cc[1] >= 0 && cc[2] >= 0 && !coloured;
        if (hyprof_legend_set(l, (size_t)v, name && *name ? name : NULL,
                              has_colour ? c : NULL) != HYPROF_OK)
            return HYPROF_ERR_NOMEM;
    }
    return HYPROF_OK;
}

hyprof_status_t hyprof_legend_read(const char *path, hyprof_legend_t *l, char *err, size_t n)
{
    memset(l, 0, sizeof *l);
    CPLErrorReset();
    GDALDatasetH ds = GDALOpen(path, GA_ReadOnly);
    if (!ds)
        return say(HYPROF_ERR_IO, err, n, "cannot open '%s': %s", path, gdal_reason());
    GDALRasterBandH band = GDALGetRasterBand(ds, 1);
    hyprof_status_t st = band ? read_colours(band, l) : HYPROF_OK;
    if (st == HYPROF_OK && band)
        st = read_names(ds, band, l);
    if (st == HYPROF_OK && band)
        st = read_attribute_table(band, l);
    GDALClose(ds);
    if (st != HYPROF_OK)
        return say(st, err, n, "out of memory reading the legend of '%s'", path);
    return HYPROF_OK;
}

/* ---- grids ----------------------------------------------------------------------------- */

static int same_crs(const char *a, const char *b)
{
    if (!a || !b)
        return 1; /* one has no CRS: nothing to compare */
    OGRSpatialReferenceH sa = OSRNewSpatialReference(a), sb = OSRNewSpatialReference(b);
    int same = sa && sb && OSRIsSame(sa, sb);
    OSRDestroySpatialReference(sa);
    OSRDestroySpatialReference(sb);
    return same;
}

int hyprof_same_grid(const hyprof_raster_t *a, const hyprof_raster_t *b, char *why, size_t n)
{
    if (a->cube.width != b->cube.width || a->cube.height != b->cube.height) {
        snprintf(why, n, "'%s' is %zux%zu pixels, '%s' %zux%zu", a->path, a->cube.width,
                 a->cube.height, b->path, b->cube.width, b->cube.height);
        return 0;
    }
    if (a->has_geotransform && b->has_geotransform) {
        double pix = fabs(a->geotransform[1]) + fabs(a->geotransform[5]);
        for (int i = 0; i < 6; i++)
            if (fabs(a->geotransform[i] - b->geotransform[i]) > 1e-6 * pix) {
                snprintf(why, n,
                         "'%s' and '%s' have different geotransforms (origin %.10g, %.10g "
                         "against %.10g, %.10g; pixel %.10g against %.10g)",
                         a->path, b->path, a->geotransform[0], a->geotransform[3],
                         b->geotransform[0], b->geotransform[3], a->geotransform[1],
                         b->geotransform[1]);
                return 0;
            }
    }
    if (!same_crs(a->wkt, b->wkt)) {
        snprintf(why, n, "'%s' and '%s' have different CRSs", a->path, b->path);
        return 0;
    }
    return 1;
}

/* ---- writing a class map ------------------------------------------------------------------ */

/* Marks the values the legend names as classes besides those seen (values
 * the map holds), 0 never; returns the largest class. */
static uint16_t name_classes(uint8_t *seen, const hyprof_legend_t *l)
{
    for (size_t v = 1; v < l->n && v < 65536; v++)
        if (l->names[v] && *l->names[v])
            seen[v] = 1;
    seen[0] = 0;
    for (size_t v = 65535; v > 0; v--)
        if (seen[v])
            return (uint16_t)v;
    return 0;
}

/* The classes of a map (flags 0..*maxv): the values 1..65535 it holds and
 * those the legend names, *maxv the largest (0 when there is none). Named
 * classes absent from this map keep their entry: a training map without
 * some class still says what that class is. */
static uint8_t *class_flags(const uint16_t *values, size_t npix, const hyprof_legend_t *l,
                            uint16_t *maxv)
{
    uint8_t *seen = calloc(65536, 1);
    if (!seen)
        return NULL;
    for (size_t i = 0; i < npix; i++)
        seen[values[i]] = 1;
    *maxv = name_classes(seen, l);
    return seen;
}

/* Value v's colour: the legend's, else the default palette's; transparent
 * for 0 and for values that are not classes. */
static void class_colour(const hyprof_legend_t *l, const uint8_t *is_class, size_t v, uint8_t c[4])
{
    if (v == 0 || !is_class[v])
        memset(c, 0, 4);
    else if (v < l->n && l->rgba[4 * v + 3])
        memcpy(c, l->rgba + 4 * v, 4);
    else
        hyprof_palette_rgba(v, c);
}

static const char *class_name(const hyprof_legend_t *l, size_t v)
{
    return v < l->n && l->names[v] ? l->names[v] : (v == 0 ? "Unlabelled" : "");
}

static void set_class_items(GDALDatasetH ds, const hyprof_legend_t *l, uint16_t maxv)
{
    for (size_t v = 1; v <= maxv; v++)
        if (*class_name(l, v)) {
            char key[32];
            snprintf(key, sizeof key, "CLASS_%zu", v);
            GDALSetMetadataItem(ds, key, class_name(l, v), NULL);
        }
}

static CPLErr set_colour_table(GDALRasterBandH band, const hyprof_legend_t *l,
                               const uint8_t *is_class, uint16_t maxv)
{
    GDALColorTableH ct = GDALCreateColorTable(GPI_RGB);
    char **cat = NULL;
    for (size_t v = 0; v <= maxv; v++) {
        uint8_t c[4];
        class_colour(l, is_class, v, c);
        GDALColorEntry e = {c[0], c[1], c[2], c[3]};
        GDALSetColorEntry(ct, (int)v, &e);
        cat = CSLAddString(cat, class_name(l, v));
    }
    CPLErr e1 = GDALSetRasterColorTable(band, ct);
    CPLErr e2 = GDALSetRasterCategoryNames(band, cat);
    CPLErr e3 = GDALSetRasterColorInterpretation(band, GCI_PaletteIndex);
    GDALDestroyColorTable(ct);
    CSLDestroy(cat);
    return e1 != CE_None ? e1 : e2 != CE_None ? e2 : e3;
}

/* One row per class: Value, Class name, Red, Green, Blue, Alpha. */
static CPLErr set_attribute_table(GDALRasterBandH band, const hyprof_legend_t *l,
                                  const uint8_t *is_class, uint16_t maxv)
{
    static const char *const cname[4] = {"Red", "Green", "Blue", "Alpha"};
    static const GDALRATFieldUsage cuse[4] = {GFU_Red, GFU_Green, GFU_Blue, GFU_Alpha};
    GDALRasterAttributeTableH rat = GDALCreateRasterAttributeTable();
    GDALRATCreateColumn(rat, "Value", GFT_Integer, GFU_MinMax);
    GDALRATCreateColumn(rat, "Class name", GFT_String, GFU_Name);
    for (int k = 0; k < 4; k++)
        GDALRATCreateColumn(rat, cname[k], GFT_Integer, cuse[k]);
    GDALRATSetTableType(rat, GRTT_THEMATIC);
    int row = 0;
    for (size_t v = 1; v <= maxv; v++) {
        if (!is_class[v])
            continue;
        uint8_t c[4];
        class_colour(l, is_class, v, c);
        GDALRATSetValueAsInt(rat, row, 0, (int)v);
        GDALRATSetValueAsString(rat, row, 1, class_name(l, v));
        for (int k = 0; k < 4; k++)
            GDALRATSetValueAsInt(rat, row, 2 + k, c[k]);
        row++;
    }
    CPLErr e = GDALSetDefaultRAT(band, rat);
    GDALDestroyRasterAttributeTable(rat);
    return e;
}

/* Whether tmp.aux.xml holds a whole PAM document, to its last byte (GDAL
 * ends it with "</PAMDataset>" and a line feed): GDAL saves the sidecar when
 * the dataset closes and does not report a failed write (a full disk leaves
 * it cut short). */
static int sidecar_complete(const char *tmp)
{
    static const char tail[] = "</PAMDataset>\n";
    const size_t nt = sizeof tail - 1;
    size_t len = strlen(tmp) + sizeof ".aux.xml";
    char *aux = malloc(len), end[sizeof tail] = {0};
    if (!aux)
        return 0;
    snprintf(aux, len, "%s.aux.xml", tmp);
    VSILFILE *f = VSIFOpenL(aux, "rb");
    int ok = f && VSIFSeekL(f, 0, SEEK_END) == 0 && VSIFTellL(f) >= nt &&
             VSIFSeekL(f, VSIFTellL(f) - nt, SEEK_SET) == 0 && VSIFReadL(end, 1, nt, f) == nt &&
             memcmp(end, tail, nt) == 0;
    if (f)
        VSIFCloseL(f);
    if (ok) {
        CPLPushErrorHandler(CPLQuietErrorHandler);
        CPLXMLNode *x = CPLParseXMLFile(aux);
        CPLPopErrorHandler();
        ok = x && CPLGetXMLNode(x, "=PAMDataset") != NULL;
        CPLDestroyXMLNode(x);
    }
    free(aux);
    return ok;
}

/* The legend of the finished file `tmp`, opened read-only so that it goes to
 * the tmp.aux.xml sidecar (see hyprof_classmap_write). */
static hyprof_status_t set_legend(const char *path, const char *tmp, const hyprof_legend_t *l,
                                  const uint8_t *is_class, uint16_t maxv, char *err, size_t n)
{
    CPLErrorReset();
    GDALDatasetH ds = GDALOpenEx(tmp, GDAL_OF_RASTER | GDAL_OF_READONLY, NULL, NULL, NULL);
    if (!ds)
        return say(HYPROF_ERR_IO, err, n, "cannot reopen '%s': %s", path, gdal_reason());
    GDALRasterBandH band = GDALGetRasterBand(ds, 1);
    int ok = set_colour_table(band, l, is_class, maxv) == CE_None &&
             set_attribute_table(band, l, is_class, maxv) == CE_None;
    if (!ok) {
        GDALClose(ds);
        return say(HYPROF_ERR_IO, err, n, "cannot write the legend of '%s': %s", path,
                   gdal_reason());
    }
    CPLErrorReset();
    GDALClose(ds);
    if (CPLGetLastErrorType() >= CE_Failure || !sidecar_complete(tmp))
        return say(HYPROF_ERR_IO, err, n, "cannot write the legend of '%s' into %s.aux.xml: %s",
                   path, path, gdal_reason());
    return HYPROF_OK;
}

/* GeoTIFF pads its own colour map to 256 or 65536 entries, so for GTiff and
 * COG the legend goes to the finished file's sidecar (set_legend); other
 * formats (PNG's palette, for one) keep it in the file. */
static int legend_in_sidecar(GDALDriverH drv)
{
    const char *name = drv ? GDALGetDriverShortName(drv) : "";
    return strcmp(name, "GTiff") == 0 || strcmp(name, "COG") == 0;
}

/* The class map's dataset on src's grid, with its band's nodata and name and
 * the `meta` items; its legend comes at the end (classmap_end). */
static hyprof_status_t classmap_begin(hyprof_output_t *o, const char *path, const char *tmp,
                                      const hyprof_raster_t *src, GDALDataType t, char **meta,
                                      char *err, size_t n)
{
    hyprof_status_t st = hyprof_output_create(o, path, tmp, HYPROF_OUTPUT_CLASSMAP,
                                              src->cube.width, src->cube.height, 1, t, err, n);
    if (st != HYPROF_OK)
        return st;
    hyprof_set_georef(o->ds, src);
    GDALRasterBandH band = GDALGetRasterBand(o->ds, 1);
    GDALSetRasterNoDataValue(band, 0.0);
    GDALSetDescription(band, "class");
    for (size_t i = 0; meta && meta[i]; i++) {
        char *key = NULL;
        const char *v = CPLParseNameValue(meta[i], &key);
        if (key && v)
            GDALSetMetadataItem(o->ds, key, v, NULL);
        CPLFree(key);
    }
    return HYPROF_OK;
}

/* The CLASS_<v> items and, in a format that keeps it in the file, the colour
 * table and attribute table, before the pixels are written. */
static hyprof_status_t classmap_legend_in_file(hyprof_output_t *o, const hyprof_legend_t *l,
                                               const uint8_t *is_class, uint16_t maxv,
                                               char *err, size_t n)
{
    GDALRasterBandH band = GDALGetRasterBand(o->ds, 1);
    set_class_items(o->ds, l, maxv);
    if (!legend_in_sidecar(o->drv) && (set_colour_table(band, l, is_class, maxv) != CE_None ||
                                       set_attribute_table(band, l, is_class, maxv) != CE_None))
        return say(HYPROF_ERR_IO, err, n, "cannot write the legend of '%s': %s", o->path,
                   gdal_reason());
    return HYPROF_OK;
}

/* Closes the filled map and, for GeoTIFF and COG, writes its legend into the
 * finished file's sidecar. */
static hyprof_status_t classmap_end(hyprof_output_t *o, const hyprof_legend_t *l,
                                    const uint8_t *is_class, uint16_t maxv, char *err, size_t n)
{
    const int sidecar = legend_in_sidecar(o->drv);
    hyprof_status_t st = hyprof_output_finish(o, NULL, err, n);
    if (st == HYPROF_OK && sidecar)
        st = set_legend(o->path, o->tmp, l, is_class, maxv, err, n);
    return st;
}

hyprof_status_t hyprof_classmap_write(const char *path, const char *tmp,
                                      const hyprof_raster_t *src, const uint16_t *values,
                                      const hyprof_legend_t *legend, char **meta, char *err,
                                      size_t n)
{
    size_t W = src->cube.width, H = src->cube.height;
    uint16_t maxv = 0;
    uint8_t *is_class = class_flags(values, W * H, legend, &maxv);
    if (!is_class)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory writing '%s'", path);
    hyprof_output_t o;
    hyprof_status_t st =
        classmap_begin(&o, path, tmp, src, maxv <= 255 ? GDT_Byte : GDT_UInt16, meta, err, n);
    if (st != HYPROF_OK) {
        free(is_class);
        return st;
    }
    st = classmap_legend_in_file(&o, legend, is_class, maxv, err, n);
    if (st == HYPROF_OK &&
        GDALRasterIO(GDALGetRasterBand(o.ds, 1), GF_Write, 0, 0, (int)W, (int)H, (void *)values,
                     (int)W, (int)H, GDT_UInt16, 0, 0) != CE_None)
        st = say(HYPROF_ERR_IO, err, n, "cannot write '%s': %s", path, gdal_reason());
    if (st != HYPROF_OK)
        hyprof_output_abandon(&o);
    else
        st = classmap_end(&o, legend, is_class, maxv, err, n);
    free(is_class);
    return st;
}

hyprof_status_t hyprof_classmap_rows_create(hyprof_classmap_rows_t *cr, const char *path,
                                            const char *tmp, const hyprof_raster_t *src,
                                            uint16_t max_class, char **meta, char *err,
                                            size_t n)
{
    memset(cr, 0, sizeof *cr);
    cr->seen = calloc(65536, 1);
    if (!cr->seen)
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory writing '%s'", path);
    GDALDriverH drv = NULL;
    hyprof_status_t st = hyprof_output_driver(path, &drv, err, n);
    if (st == HYPROF_OK && !legend_in_sidecar(drv))
        st = say(HYPROF_ERR_ARGUMENT, err, n,
                 "'%s': a class map written by blocks of rows (an input larger than the "
                 "memory) must be a GeoTIFF or a COG", path);
    if (st == HYPROF_OK)
        st = classmap_begin(&cr->o, path, tmp, src, max_class <= 255 ? GDT_Byte : GDT_UInt16,
                            meta, err, n);
    if (st != HYPROF_OK) {
        free(cr->seen);
        cr->seen = NULL;
        return st;
    }
    cr->created = 1;
    return HYPROF_OK;
}

hyprof_status_t hyprof_classmap_rows_put(hyprof_classmap_rows_t *cr, size_t y0, size_t rows,
                                         const uint16_t *values, char *err, size_t n)
{
    size_t W = (size_t)GDALGetRasterXSize(cr->o.ds);
    for (size_t i = 0; i < W * rows; i++)
        cr->seen[values[i]] = 1;
    if (GDALRasterIO(GDALGetRasterBand(cr->o.ds, 1), GF_Write, 0, (int)y0, (int)W, (int)rows,
                     (void *)values, (int)W, (int)rows, GDT_UInt16, 0, 0) != CE_None)
        return say(HYPROF_ERR_IO, err, n, "cannot write '%s': %s", cr->o.path, gdal_reason());
    return HYPROF_OK;
}

hyprof_status_t hyprof_classmap_rows_finish(hyprof_classmap_rows_t *cr,
                                            const hyprof_legend_t *legend, char *err, size_t n)
{
    uint16_t maxv = name_classes(cr->seen, legend);
    hyprof_status_t st = classmap_legend_in_file(&cr->o, legend, cr->seen, maxv, err, n);
    if (st == HYPROF_OK)
        st = classmap_end(&cr->o, legend, cr->seen, maxv, err, n);
    else
        hyprof_output_abandon(&cr->o);
    cr->created = 0;
    free(cr->seen);
    cr->seen = NULL;
    return st;
}

void hyprof_classmap_rows_abandon(hyprof_classmap_rows_t *cr)
{
    if (cr->created)
        hyprof_output_abandon(&cr->o);
    cr->created = 0;
    free(cr->seen);
    cr->seen = NULL;
}

/* ---- vector samples -------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Distinct names of a string field, sorted (class k+1 = names[k]). */
static char **field_names(OGRLayerH layer, int field, size_t *count)
{
    char **names = NULL;
    size_t n = 0, cap = 0;
    OGR_L_ResetReading(layer);
    OGRFeatureH f;
    while ((f = OGR_L_GetNextFeature(layer))) {
        if (OGR_F_IsFieldSetAndNotNull(f, field)) {
            const char *s = OGR_F_GetFieldAsString(f, field);
            int seen = 0;
            for (size_t i = 0; i < n && !seen; i++)
                seen = strcmp(names[i], s) == 0;
            if (!seen) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 16;
                    names = realloc(names, cap * sizeof *names);
                }
                names[n++] = strdup(s);
            }
        }
        OGR_F_Destroy(f);
    }
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    *count = n;
    return names;
}

typedef struct {
    OGRGeometryH *geoms;
    double *burn;
    size_t n, cap;
} burn_list_t;

static int add_geom(burn_list_t *b, OGRGeometryH g, double v)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        OGRGeometryH *gg = realloc(b->geoms, b->cap * sizeof *gg);
        double *bb = realloc(b->burn, b->cap * sizeof *bb);
        if (gg)
            b->geoms = gg;
        if (bb)
            b->burn = bb;
        if (!gg || !bb)
            return -1;
    }
    b->geoms[b->n] = g;
    b->burn[b->n++] = v;
    return 0;
}

static OGRCoordinateTransformationH to_grid(OGRLayerH layer, const hyprof_raster_t *grid)
{
    OGRSpatialReferenceH src = OGR_L_GetSpatialRef(layer);
    if (!src || !grid->wkt)
        return NULL;
    OGRSpatialReferenceH s = OSRClone(src), d = OSRNewSpatialReference(grid->wkt);
    OSRSetAxisMappingStrategy(s, OAMS_TRADITIONAL_GIS_ORDER);
    OSRSetAxisMappingStrategy(d, OAMS_TRADITIONAL_GIS_ORDER);
    OGRCoordinateTransformationH ct = OSRIsSame(s, d) ? NULL : OCTNewCoordinateTransformation(s, d);
    OSRDestroySpatialReference(s);
    OSRDestroySpatialReference(d);
    return ct;
}

/* The class of a feature: names -> 1-based rank; integers as they are. */
static long feature_class(OGRFeatureH f, int field, char **names, size_t nnames)
{
    if (!OGR_F_IsFieldSetAndNotNull(f, field))
        return 0;
    if (names) {
        const char *s = OGR_F_GetFieldAsString(f, field);
        char **hit = bsearch(&s, names, nnames, sizeof *names, cmp_str);
        return hit ? (long)(hit - names) + 1 : 0;
    }
    double v = OGR_F_GetFieldAsDouble(f, field);
    if (!(v >= 1 && v <= 65535) || v != floor(v))
        return -1;
    return (long)v;
}

static hyprof_status_t collect_geoms(OGRLayerH layer, int field, char **names, size_t nnames,
                                     const hyprof_raster_t *grid, burn_list_t *b, char *err,
                                     size_t n)
{
    OGRCoordinateTransformationH ct = to_grid(layer, grid);
    hyprof_status_t st = HYPROF_OK;
    OGR_L_ResetReading(layer);
    OGRFeatureH f;
    while (st == HYPROF_OK && (f = OGR_L_GetNextFeature(layer))) {
        long v = feature_class(f, field, names, nnames);
        OGRGeometryH g = OGR_F_GetGeometryRef(f);
        if (v < 0)
            st = say(HYPROF_ERR_INPUT, err, n,
                     "feature %lld: class '%s' is not an integer 1..65535",
                     (long long)OGR_F_GetFID(f), OGR_F_GetFieldAsString(f, field));
        else if (v > 0 && g) {
            OGRGeometryH c = OGR_G_Clone(g);
            if (ct && OGR_G_Transform(c, ct) != OGRERR_NONE) {
                st = say(HYPROF_ERR_INPUT, err, n, "feature %lld cannot be reprojected: %s",
                         (long long)OGR_F_GetFID(f), gdal_reason());
                OGR_G_DestroyGeometry(c);
            } else if (add_geom(b, c, (double)v) != 0) {
                st = say(HYPROF_ERR_NOMEM, err, n, "out of memory");
                OGR_G_DestroyGeometry(c);
            }
        }
        OGR_F_Destroy(f);
    }
    if (ct)
        OCTDestroyCoordinateTransformation(ct);
    return st;
}

static hyprof_status_t burn(const hyprof_raster_t *grid, const burn_list_t *b, float *labels,
                            char *err, size_t n)
{
    size_t W = grid->cube.width, H = grid->cube.height;
    GDALDatasetH mem = GDALCreate(GDALGetDriverByName("MEM"), "", (int)W, (int)H, 1, GDT_Float32,
                                  NULL);
    if (!mem)
        return say(HYPROF_ERR_NOMEM, err, n, "cannot create the label grid: %s", gdal_reason());
    double gt[6] = {0, 1, 0, 0, 0, 1};
    GDALSetGeoTransform(mem, grid->has_geotransform ? (double *)grid->geotransform : gt);
    if (grid->wkt)
        GDALSetProjection(mem, grid->wkt);
    int band = 1;
    hyprof_status_t st = HYPROF_OK;
    if (b->n && GDALRasterizeGeometries(mem, 1, &band, (int)b->n, b->geoms, NULL, NULL, b->burn,
                                        NULL, NULL, NULL) != CE_None)
        st = say(HYPROF_ERR_IO, err, n, "cannot rasterise the samples: %s", gdal_reason());
    if (st == HYPROF_OK &&
        GDALRasterIO(GDALGetRasterBand(mem, 1), GF_Read, 0, 0, (int)W, (int)H, labels, (int)W,
                     (int)H, GDT_Float32, 0, 0) != CE_None)
        st = say(HYPROF_ERR_IO, err, n, "cannot read the rasterised samples: %s", gdal_reason());
    GDALClose(mem);
    return st;
}

static OGRLayerH find_layer(GDALDatasetH ds, const char *layer)
{
    return layer ? GDALDatasetGetLayerByName(ds, layer) : GDALDatasetGetLayer(ds, 0);
}

hyprof_status_t hyprof_rasterize_samples(const char *vector, const char *layer_name,
                                         const char *field, const hyprof_raster_t *grid,
                                         float *labels, hyprof_legend_t *legend, char *err,
                                         size_t n)
{
    CPLErrorReset();
    GDALDatasetH ds = GDALOpenEx(vector, GDAL_OF_VECTOR | GDAL_OF_READONLY, NULL, NULL, NULL);
    if (!ds)
        return say(HYPROF_ERR_IO, err, n, "cannot open the vector '%s': %s", vector,
                   gdal_reason());
    OGRLayerH layer = find_layer(ds, layer_name);
    int fi = layer ? OGR_FD_GetFieldIndex(OGR_L_GetLayerDefn(layer), field) : -1;
    hyprof_status_t st = HYPROF_OK;
    if (!layer)
        st = say(HYPROF_ERR_INPUT, err, n, "'%s' has no layer%s%s", vector,
                 layer_name ? " named " : "", layer_name ? layer_name : "");
    else if (fi < 0)
        st = say(HYPROF_ERR_INPUT, err, n, "layer '%s' of '%s' has no field '%s'",
                 OGR_L_GetName(layer), vector, field);
    char **names = NULL;
    size_t nnames = 0;
    if (st == HYPROF_OK) {
        OGRFieldType t = OGR_Fld_GetType(OGR_FD_GetFieldDefn(OGR_L_GetLayerDefn(layer), fi));
        if (t == OFTString)
            names = field_names(layer, fi, &nnames);
        for (size_t k = 0; k < nnames && st == HYPROF_OK; k++)
            st = hyprof_legend_set(legend, k + 1, names[k], NULL);
    }
    burn_list_t b = {NULL, NULL, 0, 0};
    if (st == HYPROF_OK)
        st = collect_geoms(layer, fi, names, nnames, grid, &b, err, n);
    if (st == HYPROF_OK)
        st = burn(grid, &b, labels, err, n);
    for (size_t i = 0; i < b.n; i++)
        OGR_G_DestroyGeometry(b.geoms[i]);
    free(b.geoms);
    free(b.burn);
    for (size_t k = 0; k < nnames; k++)
        free(names[k]);
    free(names);
    GDALClose(ds);
    return st;
}
