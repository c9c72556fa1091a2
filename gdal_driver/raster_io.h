/* Raster I/O through GDAL for the hyprof executable and the HYPROF driver:
 * any GDAL raster in as a float32 cube with its mask and georeference; tiled,
 * compressed GeoTIFF out, self-describing and written atomically. */
#ifndef HYPROF_RASTER_IO_H
#define HYPROF_RASTER_IO_H

#include "hyprof/hyprof.h"

#include <gdal.h>
#include <math.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    hyprof_cube_t cube;      /* float32 BSQ, mask = valid pixels */
    char *path;
    char *driver;            /* GDAL driver short name */
    char *data_type;         /* source data type name */
    char *wkt;               /* NULL without a CRS */
    double geotransform[6];
    int has_geotransform;
    char **band_names;       /* descriptions ("" when a band has none) */
    double *wavelengths;     /* NaN where unknown; NULL when no band has one */
    char *wavelength_units;
    size_t nvalid;           /* valid pixels */
} hyprof_raster_t;

/* Progress of reading or writing, as the library's callback. */
typedef struct {
    hyprof_progress_fn fn;
    void *user;
} hyprof_io_progress_t;

/* Reads a whole raster. Nodata values, GDAL mask bands, NaN and infinities
 * all mark a pixel invalid (in any band). Errors: HYPROF_ERR_IO (cannot open
 * or read, message names the file and GDAL's reason), HYPROF_ERR_INPUT (see
 * hyprof_raster_probe), HYPROF_ERR_NOMEM (the size the file declares does not
 * fit in the memory hyprof_host_memory_available() reports). */
hyprof_status_t hyprof_raster_read(hyprof_ctx_t *ctx, const char *path,
                                   const hyprof_io_progress_t *progress, hyprof_raster_t *out,
                                   char *err, size_t err_len);
void hyprof_raster_free(hyprof_raster_t *r);

/* What is wrong with an input file of this stat (a phrase after its name:
 * "is a FIFO (named pipe), not a file"), or NULL when it is a regular,
 * non-empty file (or a folder, with folder_ok). Such inputs make GDAL and
 * the model readers block (FIFO, /dev/zero) or fail without a reason. */
const char *hyprof_input_problem(const struct stat *sb, int folder_ok);

/* Opens `path` with the checks of hyprof_raster_read and gives its size and
 * whether band 1 holds integers, without reading pixels. Inputs that are not
 * regular non-empty files (folder, FIFO, device), formats GDAL does not
 * recognise and complex pixel types are refused (HYPROF_ERR_INPUT) with a
 * message naming what is wrong. */
hyprof_status_t hyprof_raster_probe(const char *path, size_t *w, size_t *h, size_t *bands,
                                    int *integer, char *err, size_t n);
/* The bytes hyprof_raster_read allocates for a w x h x bands raster
 * (SIZE_MAX when that overflows). */
size_t hyprof_raster_read_bytes(size_t w, size_t h, size_t bands);

/* Reading by blocks of rows, for an operation run pixel by pixel on an
 * input larger than the memory. hyprof_rows_open opens `path` with the
 * checks of hyprof_raster_read and fills `header` as hyprof_raster_read
 * would, without pixels (header->cube has the size, no data). Free the
 * header with hyprof_raster_free after hyprof_rows_close. */
typedef struct hyprof_rows hyprof_rows_t;
hyprof_status_t hyprof_rows_open(const char *path, hyprof_rows_t **rows, hyprof_raster_t *header,
                                 char *err, size_t n);
/* Rows [y0, y0+ht) of every band into `block` (allocated here: a float32
 * width x ht x bands cube with its mask, made as hyprof_raster_read makes
 * the whole one). */
hyprof_status_t hyprof_rows_read(hyprof_rows_t *rows, size_t y0, size_t ht, hyprof_cube_t *block,
                                 char *err, size_t n);
void hyprof_rows_close(hyprof_rows_t **rows);

/* Writes the message into err (n bytes) and returns st: the error style of
 * everything in this folder. */
hyprof_status_t hyprof_io_error(hyprof_status_t st, char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Band descriptions (res's names) of the first `bands` bands of `ds`, and
 * NaN as their nodata when `nodata`. */
void hyprof_set_band_info(GDALDatasetH ds, const hyprof_result_t *res, size_t bands, int nodata);

/* The CRS and geotransform of `src` (when it has them) onto a new dataset. */
void hyprof_set_georef(GDALDatasetH ds, const hyprof_raster_t *src);

/* Checks, before any work, that `path` can be created: its folder exists and
 * is writable, and the file does not exist unless overwrite. */
hyprof_status_t hyprof_output_check(const char *path, int overwrite, char *err, size_t err_len);

/* ---- output formats (raster_format.c) ---- */

/* The format of every raster output of the process: the driver `format`
 * names (NULL: by the output's extension), creation options `co` (NAME=VALUE,
 * NULL-terminated; NULL for none) over hyprof's defaults, and internal
 * overviews for GTiff. Copied; set once by the CLI before it writes. */
hyprof_status_t hyprof_output_format_set(const char *format, const char *const *co,
                                         int overviews);

typedef enum { HYPROF_OUTPUT_PROFILE, HYPROF_OUTPUT_CLASSMAP } hyprof_output_kind_t;

/* The driver that writes `path`; HYPROF_ERR_ARGUMENT with a message naming
 * the extension and the format when they disagree, none or several drivers
 * write the extension, or the driver cannot write. */
hyprof_status_t hyprof_output_driver(const char *path, GDALDriverH *drv, char *err, size_t n);
/* Checks before any work that `path` can be written as chosen: its driver,
 * the creation options (GDALValidateCreationOptions), --overviews, and, when
 * bands > 0, that the format holds that many float32 bands (profiles) or a
 * class band with a colour table (class maps). */
hyprof_status_t hyprof_output_format_check(const char *path, hyprof_output_kind_t kind,
                                           size_t bands, char *err, size_t n);

/* One raster output being written: `ds` is filled by the caller, then
 * hyprof_output_finish builds overviews or copies it into the final driver
 * and closes it (or hyprof_output_abandon drops it). */
typedef struct {
    GDALDriverH drv;
    GDALDatasetH ds;
    char *via;           /* the intermediate GTiff of a driver that only copies */
    const char *path, *tmp;
    hyprof_output_kind_t kind;
    double fill_share;   /* the share of the write progress that filling takes */
} hyprof_output_t;

hyprof_status_t hyprof_output_create(hyprof_output_t *o, const char *path, const char *tmp,
                                     hyprof_output_kind_t kind, size_t w, size_t h, size_t bands,
                                     GDALDataType t, char *err, size_t n);
/* Reports `fraction` of the filling as progress; non-zero: cancel. */
int hyprof_output_progress(const hyprof_output_t *o, const hyprof_io_progress_t *pg,
                           double fraction, const char *stage);
hyprof_status_t hyprof_output_finish(hyprof_output_t *o, const hyprof_io_progress_t *pg,
                                     char *err, size_t n);
void hyprof_output_abandon(hyprof_output_t *o);

/* Writes `res` into the file `tmp` in the chosen format (GeoTIFF by default)
 * with the source's CRS and geotransform, NaN as nodata where the result has
 * nodata, band descriptions, and metadata: the operation,
 * every parameter of `args`, the backend used and the result's own items.
 * `path` is the output `tmp` becomes once the caller has renamed it (and any
 * tmp.aux.xml GDAL wrote), named in messages. On failure or cancellation
 * (HYPROF_ERR_CANCELLED) the caller removes tmp. */
hyprof_status_t hyprof_raster_write(const char *path, const char *tmp,
                                    const hyprof_raster_t *src, const hyprof_result_t *res,
                                    const hyprof_args_t *args, const char *backend,
                                    const hyprof_io_progress_t *progress, char *err,
                                    size_t err_len);

/* Writing by blocks of rows, the counterpart of hyprof_rows_read: create
 * the output for `bands` float32 bands of src's size and georeference, put
 * each block's rows (masked pixels as NaN), then finish with the band names
 * and metadata of the first block's result (the same for every block of an
 * operation run pixel by pixel) and nodata if any block had masked pixels;
 * or abandon (the caller removes tmp). */
typedef struct {
    hyprof_output_t o;
    size_t w, h, bands, cap;
    int created, nodata;
    float *buf;
} hyprof_rows_out_t;
hyprof_status_t hyprof_rows_out_create(hyprof_rows_out_t *ro, const char *path, const char *tmp,
                                       const hyprof_raster_t *src, size_t bands, char *err,
                                       size_t n);
hyprof_status_t hyprof_rows_out_put(hyprof_rows_out_t *ro, size_t y0, const hyprof_cube_t *block,
                                    char *err, size_t n);
hyprof_status_t hyprof_rows_out_finish(hyprof_rows_out_t *ro, const hyprof_raster_t *src,
                                       const hyprof_result_t *first, const hyprof_args_t *args,
                                       const char *backend, const hyprof_io_progress_t *pg,
                                       char *err, size_t n);
void hyprof_rows_out_abandon(hyprof_rows_out_t *ro);

/* The metadata hyprof_raster_write records: the operation and its
 * parameters, the backend, the input's path and the result's own items. */
void hyprof_set_output_metadata(GDALDatasetH ds, const hyprof_raster_t *src,
                                const hyprof_result_t *res, const hyprof_args_t *args,
                                const char *backend);

/* ---- streaming a result while it is computed (raster_stream.c) ---- */

typedef struct hyprof_stream hyprof_stream_t;

/* Creates the output `tmp` (named `path` in messages) for `bands` float32
 * bands of src's size and georeference, and starts the writer thread.
 * Pass hyprof_stream_band and the stream to hyprof_ctx_set_band_done: each
 * band the operation announces is written while it computes the next. A
 * write error cancels ctx's operation (see hyprof_stream_stop). */
hyprof_status_t hyprof_stream_open(hyprof_stream_t **s, hyprof_ctx_t *ctx, const char *path,
                                   const char *tmp, const hyprof_raster_t *src, size_t bands,
                                   char *err, size_t n);
/* The band callback (hyprof_band_fn) of a stream. */
void hyprof_stream_band(void *stream, size_t band, const float *data);
/* Waits for the bands queued so far; the writer's error, if any (then the
 * operation's cancellation was its doing). */
hyprof_status_t hyprof_stream_stop(hyprof_stream_t *s, char *err, size_t n);
/* Writes what was not streamed, band names, nodata and metadata as
 * hyprof_raster_write does, and finishes the file; the stream is freed.
 * HYPROF_ERR_FORMAT when res's shape is not the one the file was made for. */
hyprof_status_t hyprof_stream_close(hyprof_stream_t *s, const hyprof_raster_t *src,
                                    const hyprof_result_t *res, const hyprof_args_t *args,
                                    const char *backend, const hyprof_io_progress_t *pg,
                                    char *err, size_t n);
/* Stops the writer and drops the file (the caller removes tmp). */
void hyprof_stream_abandon(hyprof_stream_t *s);

/* The nodata of every float output, whatever the input's: NaN is never a
 * valid result, so a valid 0 (or a value equal to the input's nodata) stays
 * what it is and is not read as missing. */
#define HYPROF_FLOAT_NODATA ((double)NAN)

/* Band `b` of a result cube as written: masked pixels get NaN
 * (HYPROF_FLOAT_NODATA), valid ones their value. `buf` holds width*height
 * floats. */
void hyprof_result_band_f32(const hyprof_cube_t *cube, size_t b, float *buf);

/* Metadata of an output (dataset or any GDAL object): HYPROF_OPERATION,
 * HYPROF_VERSION and HYPROF_PARAM_* of every set parameter; and the result's
 * own items as HYPROF_<KEY>. */
void hyprof_set_args_metadata(GDALMajorObjectH obj, const hyprof_args_t *args);
void hyprof_set_result_metadata(GDALMajorObjectH obj, const hyprof_result_t *res);

#ifdef __cplusplus
}
#endif
#endif
