/* Vector samples split by feature (`split --samples`): the class of every
 * feature, read in the layer's order, and subsets of the features copied
 * whole into new single-file vector datasets.
 *
 * A subset is built in GDAL's in-memory file system under the target's
 * extension (FlatGeobuf, for one, takes a name without ".fgb" for a folder),
 * then copied into the caller's temporary, which the caller renames onto the
 * target with the run's other outputs; the memory it takes is checked first
 * against the source's size. */
#include "vector_io.h"

#include <gdal.h>
#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <cpl_vsi.h>
#include <ogr_api.h>
#include <ogr_srs_api.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define say hyprof_io_error

static const char *gdal_reason(void)
{
    const char *m = CPLGetLastErrorMsg();
    return m && *m ? m : "GDAL gave no reason";
}

/* The source layer: `name`, or the first. */
static hyprof_status_t open_layer(const char *vector, const char *name, GDALDatasetH *ds,
                                  OGRLayerH *layer, char *err, size_t n)
{
    CPLErrorReset();
    *ds = GDALOpenEx(vector, GDAL_OF_VECTOR | GDAL_OF_READONLY, NULL, NULL, NULL);
    if (!*ds)
        return say(HYPROF_ERR_IO, err, n, "cannot open the vector '%s': %s", vector,
                   gdal_reason());
    *layer = name ? GDALDatasetGetLayerByName(*ds, name) : GDALDatasetGetLayer(*ds, 0);
    if (*layer)
        return HYPROF_OK;
    GDALClose(*ds);
    *ds = NULL;
    return say(HYPROF_ERR_INPUT, err, n, "'%s' has no layer%s%s", vector, name ? " named " : "",
               name ? name : "");
}

/* ---- classes ------------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void hyprof_vector_classes_free(hyprof_vector_classes_t *c)
{
    for (size_t k = 0; k < c->nnames; k++)
        free(c->names[k]);
    free(c->names);
    free(c->cls);
    memset(c, 0, sizeof *c);
}

/* Appends to a growing array of `size`-byte items. */
static int push(void **a, size_t *len, size_t *cap, const void *item, size_t size)
{
    if (*len == *cap) {
        size_t nc = *cap ? 2 * *cap : 256;
        void *g = realloc(*a, nc * size);
        if (!g)
            return -1;
        *a = g;
        *cap = nc;
    }
    memcpy((char *)*a + *len * size, item, size);
    (*len)++;
    return 0;
}

/* One pass over the layer: numbers as classes, or each feature's text kept in
 * texts[] (NULL: empty) for numbering once every name is known. */
static hyprof_status_t read_field(OGRLayerH layer, int fi, int text, hyprof_vector_classes_t *c,
                                  char ***texts, char *err, size_t n)
{
    size_t cap = 0, tcap = 0, tlen = 0;
    hyprof_status_t st = HYPROF_OK;
    OGRFeatureH f;
    OGR_L_ResetReading(layer);
    while (st == HYPROF_OK && (f = OGR_L_GetNextFeature(layer))) {
        int set = OGR_F_IsFieldSetAndNotNull(f, fi);
        uint16_t v = 0;
        char *s = NULL;
        if (set && text) {
            if (!(s = strdup(OGR_F_GetFieldAsString(f, fi))))
                st = say(HYPROF_ERR_NOMEM, err, n, "out of memory");
        } else if (set) {
            double x = OGR_F_GetFieldAsDouble(f, fi);
            if (x >= 1 && x <= 65535 && x == floor(x))
                v = (uint16_t)x;
            else
                st = say(HYPROF_ERR_INPUT, err, n,
                         "feature %lld: class '%s' is not an integer 1..65535",
                         (long long)OGR_F_GetFID(f), OGR_F_GetFieldAsString(f, fi));
        }
        /* texts[] and cls[] keep the same length, also on failure. */
        if (st == HYPROF_OK && push((void **)&c->cls, &c->n, &cap, &v, sizeof v) != 0)
            st = say(HYPROF_ERR_NOMEM, err, n, "out of memory");
        else if (st == HYPROF_OK && text && push((void **)texts, &tlen, &tcap, &s, sizeof s)) {
            c->n--;
            st = say(HYPROF_ERR_NOMEM, err, n, "out of memory");
        }
        if (st != HYPROF_OK)
            free(s);
        OGR_F_Destroy(f);
    }
    return st;
}

/* Sorted distinct texts as the names (copies), each feature's class its rank + 1. */
static hyprof_status_t number_names(hyprof_vector_classes_t *c, char **texts, char *err,
                                    size_t n)
{
    char **sorted = malloc((c->n ? c->n : 1) * sizeof *sorted);
    c->names = malloc((c->n ? c->n : 1) * sizeof *c->names);
    if (!sorted || !c->names) {
        free(sorted);
        return say(HYPROF_ERR_NOMEM, err, n, "out of memory");
    }
    size_t m = 0;
    for (size_t i = 0; i < c->n; i++)
        if (texts[i])
            sorted[m++] = texts[i];
    qsort(sorted, m, sizeof *sorted, cmp_str);
    hyprof_status_t st = HYPROF_OK;
    for (size_t i = 0; st == HYPROF_OK && i < m; i++)
        if (!c->nnames || strcmp(c->names[c->nnames - 1], sorted[i]) != 0) {
            if (!(c->names[c->nnames] = strdup(sorted[i])))
                st = say(HYPROF_ERR_NOMEM, err, n, "out of memory");
            else
                c->nnames++;
        }
    free(sorted);
    if (st == HYPROF_OK && c->nnames > 65535)
        st = say(HYPROF_ERR_INPUT, err, n, "%zu distinct class names: at most 65535",
                 c->nnames);
    for (size_t i = 0; st == HYPROF_OK && i < c->n; i++)
        if (texts[i]) {
            char **hit = bsearch(&texts[i], c->names, c->nnames, sizeof *c->names, cmp_str);
            c->cls[i] = (uint16_t)(hit - c->names + 1);
        }
    return st;
}

hyprof_status_t hyprof_vector_classes(const char *vector, const char *layer_name,
                                      const char *field, hyprof_vector_classes_t *out, char *err,
                                      size_t n)
{
    memset(out, 0, sizeof *out);
    GDALDatasetH ds;
    OGRLayerH layer;
    hyprof_status_t st = open_layer(vector, layer_name, &ds, &layer, err, n);
    if (st != HYPROF_OK)
        return st;
    OGRFeatureDefnH defn = OGR_L_GetLayerDefn(layer);
    int fi = OGR_FD_GetFieldIndex(defn, field);
    if (fi < 0) {
        st = say(HYPROF_ERR_INPUT, err, n, "layer '%s' of '%s' has no field '%s'",
                 OGR_L_GetName(layer), vector, field);
        GDALClose(ds);
        return st;
    }
    int text = OGR_Fld_GetType(OGR_FD_GetFieldDefn(defn, fi)) == OFTString;
    char **texts = NULL;
    st = read_field(layer, fi, text, out, &texts, err, n);
    if (st == HYPROF_OK && text)
        st = number_names(out, texts, err, n);
    for (size_t i = 0; texts && i < out->n; i++)
        free(texts[i]);
    free(texts);
    GDALClose(ds);
    if (st != HYPROF_OK)
        hyprof_vector_classes_free(out);
    return st;
}

/* ---- writing a subset --------------------------------------------------------------- */

const char *hyprof_vector_format(const char *path, char *err, size_t n)
{
    static const struct {
        const char *ext, *driver;
    } formats[] = {{"gpkg", "GPKG"}, {"geojson", "GeoJSON"}, {"json", "GeoJSON"},
                   {"fgb", "FlatGeobuf"}};
    const char *base = strrchr(path, '/');
    const char *dot = strrchr(base ? base + 1 : path, '.');
    if (!dot)
        return "GPKG";
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (strcasecmp(dot + 1, formats[i].ext) == 0)
            return formats[i].driver;
    say(HYPROF_ERR_ARGUMENT, err, n,
        "'%s': vector outputs are .gpkg, .geojson (or .json) or .fgb files, not '%s'", path,
        dot);
    return NULL;
}

static OGRLayerH copy_layer_definition(GDALDatasetH dst, OGRLayerH src)
{
    OGRFeatureDefnH defn = OGR_L_GetLayerDefn(src);
    OGRLayerH out = GDALDatasetCreateLayer(dst, OGR_L_GetName(src), OGR_L_GetSpatialRef(src),
                                           OGR_FD_GetGeomType(defn), NULL);
    for (int i = 0; out && i < OGR_FD_GetFieldCount(defn); i++)
        if (OGR_L_CreateField(out, OGR_FD_GetFieldDefn(defn, i), TRUE) != OGRERR_NONE)
            return NULL;
    return out;
}

/* Copies the kept features of src into out, in order, with their FIDs. */
static hyprof_status_t copy_features(OGRLayerH src, OGRLayerH out, const uint16_t *keep,
                                     size_t nkeep, const char *path, char *err, size_t n)
{
    OGRFeatureDefnH defn = OGR_L_GetLayerDefn(out);
    hyprof_status_t st = HYPROF_OK;
    size_t i = 0;
    OGRFeatureH f;
    OGR_L_ResetReading(src);
    while (st == HYPROF_OK && (f = OGR_L_GetNextFeature(src))) {
        if (i >= nkeep)
            st = say(HYPROF_ERR_IO, err, n, "the samples changed while being split");
        else if (keep[i]) {
            OGRFeatureH g = OGR_F_Create(defn);
            if (!g || OGR_F_SetFrom(g, f, TRUE) != OGRERR_NONE)
                st = say(HYPROF_ERR_IO, err, n, "cannot copy feature %lld into '%s': %s",
                         (long long)OGR_F_GetFID(f), path, gdal_reason());
            else {
                OGR_F_SetFID(g, OGR_F_GetFID(f));
                if (OGR_L_CreateFeature(out, g) != OGRERR_NONE)
                    st = say(HYPROF_ERR_IO, err, n, "cannot write feature %lld into '%s': %s",
                             (long long)OGR_F_GetFID(f), path, gdal_reason());
            }
            if (g)
                OGR_F_Destroy(g);
        }
        i++;
        OGR_F_Destroy(f);
    }
    return st;
}

/* The in-memory file's bytes into tmp. */
static hyprof_status_t save_memfile(const char *mem, const char *path, const char *tmp,
                                    char *err, size_t n)
{
    vsi_l_offset size = 0;
    GByte *data = VSIGetMemFileBuffer(mem, &size, TRUE);
    if (!data)
        return say(HYPROF_ERR_IO, err, n, "cannot write '%s': GDAL wrote nothing", path);
    FILE *f = fopen(tmp, "wb");
    hyprof_status_t st = HYPROF_OK;
    if (!f || fwrite(data, 1, (size_t)size, f) != (size_t)size)
        st = say(HYPROF_ERR_IO, err, n, "cannot write '%s': %s", path, strerror(errno));
    if (f && fclose(f) != 0 && st == HYPROF_OK)
        st = say(HYPROF_ERR_IO, err, n, "cannot write '%s': %s", path, strerror(errno));
    CPLFree(data);
    return st;
}

hyprof_status_t hyprof_vector_write_subset(const char *vector, const char *layer_name,
                                           const uint16_t *keep, size_t nkeep,
                                           const char *path, const char *tmp, char *err,
                                           size_t n)
{
    const char *fmt = hyprof_vector_format(path, err, n);
    if (!fmt)
        return HYPROF_ERR_ARGUMENT;
    GDALDriverH drv = GDALGetDriverByName(fmt);
    if (!drv)
        return say(HYPROF_ERR_IO, err, n, "GDAL's %s driver is missing", fmt);
    /* The subset is built in memory: at most the source's size, plus room
     * for the copy into tmp. */
    struct stat sb;
    hyprof_status_t st = HYPROF_OK;
    if (stat(vector, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0)
        st = hyprof_host_memory_check(2 * (size_t)sb.st_size, "writing the split in memory",
                                      err, n);
    if (st != HYPROF_OK)
        return st;
    GDALDatasetH src;
    OGRLayerH layer;
    if ((st = open_layer(vector, layer_name, &src, &layer, err, n)) != HYPROF_OK)
        return st;
    static unsigned counter;
    char mem[96];
    const char *ext = strcmp(fmt, "GPKG") == 0 ? "gpkg" : strcmp(fmt, "GeoJSON") == 0 ? "geojson"
                                                                                        : "fgb";
    snprintf(mem, sizeof mem, "/vsimem/hyprof-split-%ld-%u.%s", (long)getpid(), counter++, ext);
    CPLErrorReset();
    GDALDatasetH dst = GDALCreate(drv, mem, 0, 0, 0, GDT_Unknown, NULL);
    OGRLayerH out = dst ? copy_layer_definition(dst, layer) : NULL;
    if (!out)
        st = say(HYPROF_ERR_IO, err, n, "cannot create '%s': %s", path, gdal_reason());
    int tx = out && GDALDatasetStartTransaction(dst, FALSE) == OGRERR_NONE;
    if (st == HYPROF_OK)
        st = copy_features(layer, out, keep, nkeep, path, err, n);
    if (tx && st == HYPROF_OK && GDALDatasetCommitTransaction(dst) != OGRERR_NONE)
        st = say(HYPROF_ERR_IO, err, n, "cannot write '%s': %s", path, gdal_reason());
    CPLErrorReset();
    if (dst)
        GDALClose(dst);
    if (st == HYPROF_OK && CPLGetLastErrorType() >= CE_Failure)
        st = say(HYPROF_ERR_IO, err, n, "cannot finish '%s': %s", path, gdal_reason());
    if (st == HYPROF_OK)
        st = save_memfile(mem, path, tmp, err, n);
    VSIUnlink(mem);
    GDALClose(src);
    return st;
}
