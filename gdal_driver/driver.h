/* The HYPROF raster driver's C side: what a dataset name means (a connection
 * string or a .hyprof descriptor), what opening it knows without computing,
 * and the process-wide cache of computed results. driver_shim.cpp holds only
 * what GDAL's C API cannot do: the driver's open callback and the dataset
 * and band classes. */
#ifndef HYPROF_DRIVER_H
#define HYPROF_DRIVER_H

#include "hyprof/hyprof.h"

#include <gdal.h>

#include <stddef.h>

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
    char *key;              /* identifies the result in the cache, exactly */
    char **files;           /* the input and the files parameters name (CSL)... */
    char **stamps;          /* ...and their identities when opened (hyprof_file_stamp) */
    int width, height, in_bands, bands;
    char **band_names;      /* one per band (CSL), from the parameters */
    char *wkt;              /* NULL without a CRS */
    double geotransform[6];
    int has_geotransform;
    int nodata_known;       /* 0: nodata depends on the pixels (see hyprof_gdal_result_t) */
    int has_nodata;
    double nodata;
} hyprof_gdal_source_t;

/* The largest band count a dataset may announce: GDAL's own default bound
 * (GDAL_MAX_BAND_COUNT). */
#define HYPROF_DRIVER_MAX_BANDS 65536

/* Relative file names resolve against the folder of the file that names
 * them, as GDAL resolves a VRT's relativeToVRT="1" sources: a descriptor's
 * folder for its input and parameters, and for a connection string the folder
 * written before it. GDAL forms such names itself: a VRT source
 * <SourceFilename relativeToVRT="1">HYPROF:pca:model=m.pca:scene.tif</...> in
 * samples/x.vrt is opened as "samples/HYPROF:pca:model=m.pca:scene.tif". A
 * plain connection string's names are the current folder's. */

/* Where "HYPROF:" starts in `name`: 0, or just after a folder's '/'; -1 when
 * it does not occur so. */
ptrdiff_t hyprof_gdal_connection_start(const char *name);
/* `name` taken from the folder `base` (NULL or "": left as it is) when it is
 * relative; absolute names, /vsi names and other drivers' syntax
 * ("NETCDF:f.nc:var") are left as they are. CPLMalloc'ed. */
char *hyprof_gdal_resolve(const char *base, const char *name);

/* The parsers of outside text, with no file or dataset opened: a connection
 * string, and a descriptor's JSON text (`path` names it in messages and its
 * folder anchors relative names). NULL after a CPLError naming the problem. */
hyprof_gdal_source_t *hyprof_gdal_parse_connection(const char *name);
hyprof_gdal_source_t *hyprof_gdal_parse_descriptor(const char *text, size_t len,
                                                   const char *path);

/* True for "[FOLDER/]HYPROF:..." names (FOLDER an existing folder and the
 * whole name no file) and for .hyprof files whose first bytes look
 * like a JSON descriptor. */
int hyprof_gdal_identify(const char *filename, const char *header, int header_len);
/* Parses and checks the name, opens the input for its size, CRS and
 * geotransform, and derives the output band count and names through the library.
 * NULL after a CPLError naming the problem (unknown operation or parameter,
 * missing input or one that is not a regular file, malformed descriptor, a
 * result too large for the memory or for GDAL...). */
hyprof_gdal_source_t *hyprof_gdal_source_open(const char *filename);
void hyprof_gdal_source_free(hyprof_gdal_source_t *src);
/* 1 when the input and the files named by parameters are as they were at
 * open; otherwise 0 after a CPLError naming the changed file (a result
 * computed now would not be the one the dataset announced). */
int hyprof_gdal_source_unchanged(const hyprof_gdal_source_t *src);
/* The bytes the result and the input take in memory (float32), in double
 * so that absurd sizes do not wrap. */
double hyprof_gdal_source_bytes(const hyprof_gdal_source_t *src, size_t bands);

/* A computed result, as the CLI would write it: the operation's result with
 * its float32 bands as written (masked pixels NaN, no mask
 * left), band names, metadata items and nodata; and the backend that ran.
 * Read-only while pinned. */
typedef struct {
    hyprof_result_t result;
    const char *backend; /* hyprof_backend_name's static text */
} hyprof_gdal_result_t;

/* The result of `src`: computed on first use (once per process: other
 * threads asking meanwhile wait for it), then served from the cache. Pinned
 * until hyprof_gdal_result_release. Its size, band count (when src->bands is
 * set) and type are checked against `src`: a mismatch is an error, never a
 * read. NULL after a CPLError. */
const hyprof_gdal_result_t *hyprof_gdal_result_acquire(const hyprof_gdal_source_t *src);
void hyprof_gdal_result_release(const hyprof_gdal_result_t *res);

/* The cache's state, for the HYPROF_CACHE metadata domain: computations done
 * in this process, entries and bytes held, and the limit. */
void hyprof_gdal_cache_stats(unsigned long *computations, size_t *entries, size_t *bytes,
                             size_t *limit);

/* classify, which the registry leaves to the CLI, run by the driver
 * (driver_classify.c): at open, the model loads and fits the input (one band,
 * nodata 0); on first read, the class values. 0 after a CPLError. */
int hyprof_gdal_is_classify(const hyprof_op_t *op);
int hyprof_gdal_classify_open(hyprof_gdal_source_t *src);
int hyprof_gdal_classify_run(hyprof_ctx_t *ctx, const hyprof_gdal_source_t *src,
                             const hyprof_cube_t *in, hyprof_result_t *out);

/* Registers the driver (driver_shim.cpp); idempotent. */
void hyprof_gdal_register_driver(void);

#ifdef __cplusplus
}
#endif
#endif
