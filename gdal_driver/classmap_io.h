/* Class maps through GDAL: legends (colour table and category names) of
 * label rasters, class maps written with their legend, vector training
 * samples rasterised on a raster's grid. */
#ifndef HYPROF_CLASSMAP_IO_H
#define HYPROF_CLASSMAP_IO_H

#include "raster_io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Names and colours by class value (index = value, 0..n-1). */
typedef struct {
    size_t n;
    char **names;     /* NULL entries: no name */
    uint8_t *rgba;    /* 4 per value; alpha 0 = no colour */
} hyprof_legend_t;

void hyprof_legend_free(hyprof_legend_t *l);
/* Sets value v's name and colour (rgba may be NULL), growing the legend. */
hyprof_status_t hyprof_legend_set(hyprof_legend_t *l, size_t v, const char *name,
                                  const uint8_t *rgba);
/* The legend of band 1 of a raster: its colour table, its category names, or
 * CLASS_<v> metadata items where it has no category names; then its raster
 * attribute table (Value, Name, Red, Green, Blue, Alpha usages) for the
 * values those leave without a name or colour. */
hyprof_status_t hyprof_legend_read(const char *path, hyprof_legend_t *l, char *err, size_t n);

/* True when the two rasters share size, geotransform and CRS; else the reason. */
int hyprof_same_grid(const hyprof_raster_t *a, const hyprof_raster_t *b, char *why, size_t n);

/* Writes into the file `tmp`, in the chosen output format (GeoTIFF by
 * default, see hyprof_output_format_set), a one-band class map (Byte when
 * every value is <= 255, else UInt16; 0 = nodata) on src's grid, with
 * CLASS_<v> metadata and `meta` (NULL-terminated KEY=VALUE list). Its classes
 * are the values 1..max that the map holds or the legend names (max: the
 * largest of them); each keeps the legend's colour, or takes
 * hyprof_palette_rgba's when the legend gives none (alpha 0). The colour
 * table (entries 0..max: 0 and values that are not classes transparent), the
 * category names and a raster attribute table (Value, Class name, Red, Green,
 * Blue, Alpha; one row per class) go to GDAL's sidecar tmp.aux.xml, written
 * on the finished file, since a GeoTIFF's own colour map always has 256 or
 * 65536 entries: the caller renames both files onto `path` (named in
 * messages) and path.aux.xml. */
hyprof_status_t hyprof_classmap_write(const char *path, const char *tmp,
                                      const hyprof_raster_t *src, const uint16_t *values,
                                      const hyprof_legend_t *legend, char **meta, char *err,
                                      size_t n);

/* hyprof_classmap_write by blocks of rows (classify on an input larger than
 * the memory), GeoTIFF or COG only: create (Byte when max_class, the largest
 * value the map can hold, is <= 255, else UInt16), put each block's values,
 * then finish with the legend (the classes the blocks held or the legend
 * names), or abandon (the caller removes tmp). The file is the one
 * hyprof_classmap_write makes of the whole map whenever the legend names
 * max_class. */
typedef struct {
    hyprof_output_t o;
    uint8_t *seen; /* 65536 flags: the values put so far */
    int created;
} hyprof_classmap_rows_t;
hyprof_status_t hyprof_classmap_rows_create(hyprof_classmap_rows_t *cr, const char *path,
                                            const char *tmp, const hyprof_raster_t *src,
                                            uint16_t max_class, char **meta, char *err,
                                            size_t n);
hyprof_status_t hyprof_classmap_rows_put(hyprof_classmap_rows_t *cr, size_t y0, size_t rows,
                                         const uint16_t *values, char *err, size_t n);
hyprof_status_t hyprof_classmap_rows_finish(hyprof_classmap_rows_t *cr,
                                            const hyprof_legend_t *legend, char *err, size_t n);
void hyprof_classmap_rows_abandon(hyprof_classmap_rows_t *cr);

/* Rasterises the features of a vector layer on `grid` (reprojected to its
 * CRS): labels (width*height, 0 = none) receive the class of `field`
 * (integers, or names numbered 1.. in sorted order; the names then go into
 * the legend). Polygons take the pixels whose centre they contain, points
 * and lines the pixels they touch. */
hyprof_status_t hyprof_rasterize_samples(const char *vector, const char *layer,
                                         const char *field, const hyprof_raster_t *grid,
                                         float *labels, hyprof_legend_t *legend, char *err,
                                         size_t n);

#ifdef __cplusplus
}
#endif
#endif
