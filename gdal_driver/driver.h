/* The HYPROF raster driver's C side: what a dataset name means (a connection
 * string or a .hyprof descriptor), what opening it knows without computing,
 * and the process-wide cache of computed results. driver_shim.cpp holds only
 * what GDAL's C API cannot do: the driver's open callback and the dataset
 * and band classes. */
#ifndef HYPROF_DRIVER_H
#define HYPROF_DRIVER_H

#include "hyprof/hyprof.h"

#include <gdal.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HYPROF_DRIVER_PREFIX "HYPROF:"

/* An opened dataset name: the operation, its arguments (parsed by the
 * registry), the input and what it tells without reading pixels. */
typedef struct {
    const hyprof_op_t *op;
    hyprof_args_t *args;    /* the operation's parameters */
    hyprof_args_t *common;  /* backend, device, threads */
    char *input;            /* the input raster, absolute when it is a file */
    char *key;              /* identifies the result in the cache */
    int width, height, in_bands, bands;
    char *wkt;              /* NULL without a CRS */
    double geotransform[6];
    int has_geotransform;
    int nodata_known;       /* 0: nodata depends on the pixels (see hyprof_gdal_result_t) */
    int has_nodata;
    double nodata;
} hyprof_gdal_source_t;

/* True for "HYPROF:..." names and for .hyprof files whose first bytes look
 * like a JSON descriptor. */
int hyprof_gdal_identify(const char *filename, const char *header, int header_len);
/* Parses and checks the name, opens the input for its size, CRS and
 * geotransform, and derives the output band count through the library.
 * NULL after a CPLError naming the problem (unknown operation or parameter,
 * missing input, malformed descriptor...). */
hyprof_gdal_source_t *hyprof_gdal_source_open(const char *filename);
void hyprof_gdal_source_free(hyprof_gdal_source_t *src);

/* A computed result, as the CLI would write it: the operation's result with
 * its float32 bands as written (nodata and the ulp rule applied, no mask
 * left), band names, metadata items and nodata; and the backend that ran.
 * Read-only while pinned. */
typedef struct {
    hyprof_result_t result;
    char backend[16];
} hyprof_gdal_result_t;

/* The result of `src`: computed on first use (once per process: other
 * threads asking meanwhile wait for it), then served from the cache. Pinned
 * until hyprof_gdal_result_release. NULL after a CPLError. */
const hyprof_gdal_result_t *hyprof_gdal_result_acquire(const hyprof_gdal_source_t *src);
void hyprof_gdal_result_release(const hyprof_gdal_result_t *res);

/* The cache's state, for the HYPROF_CACHE metadata domain: computations done
 * in this process, entries and bytes held, and the limit. */
void hyprof_gdal_cache_stats(unsigned long *computations, size_t *entries, size_t *bytes,
                             size_t *limit);

/* Registers the driver (driver_shim.cpp); idempotent. */
void hyprof_gdal_register_driver(void);

#ifdef __cplusplus
}
#endif
#endif
