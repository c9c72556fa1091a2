/* Vector samples split by feature: the class of every feature of a layer,
 * and subsets of the layer's features written as new vector files. */
#ifndef HYPROF_VECTOR_IO_H
#define HYPROF_VECTOR_IO_H

#include "raster_io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The features of one layer in reading order and their classes. */
typedef struct {
    size_t n;        /* features */
    uint16_t *cls;   /* class per feature; 0: the field is empty (no class) */
    char **names;    /* text field: its distinct values sorted (class k+1 = names[k]) */
    size_t nnames;   /* 0 for a numeric field (classes are its integers) */
} hyprof_vector_classes_t;

/* Reads the classes of `field` in `layer` (NULL: the first) of `vector`: names
 * are numbered 1, 2, ... in sorted order, as hyprof_rasterize_samples numbers
 * them; numbers must be integers 1..65535 (else HYPROF_ERR_INPUT naming the
 * feature). */
hyprof_status_t hyprof_vector_classes(const char *vector, const char *layer, const char *field,
                                      hyprof_vector_classes_t *out, char *err, size_t n);
void hyprof_vector_classes_free(hyprof_vector_classes_t *c);

/* The GDAL driver of a vector output, from the extension of `path`: .gpkg
 * (and no extension) GPKG, .geojson/.json GeoJSON, .fgb FlatGeobuf; NULL,
 * with the reason in err, for others (formats of several files, such as
 * Shapefile, cannot be written through one temporary). */
const char *hyprof_vector_format(const char *path, char *err, size_t n);

/* Writes into the file `tmp`, in the format of `path` (named in messages),
 * one layer with the name, CRS, geometry type, fields and FIDs of the source
 * layer, holding the features whose `keep` entry (reading order, one per
 * feature) is nonzero, attributes and geometry unchanged. */
hyprof_status_t hyprof_vector_write_subset(const char *vector, const char *layer,
                                           const uint16_t *keep, size_t nkeep,
                                           const char *path, const char *tmp, char *err,
                                           size_t n);

#ifdef __cplusplus
}
#endif
#endif
