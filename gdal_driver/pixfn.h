/* VRT pixel functions of the hyprof plugin (hyprof_*): the table entry each
 * pixel_<name>.c file defines (as hyprof_pixfn_<name>), and what they share.
 *
 * GDAL 3.6 hands a pixel function the sources of one window at the buffer's
 * resolution, but not the window itself: only per-pixel operations can be
 * pixel functions (whole-image ones go through the HYPROF driver). Every
 * function here computes each output pixel from the same pixel of its
 * sources, so any window, any decimation and any buffer type give the values
 * of the full-resolution result at those pixels. */
#ifndef HYPROF_PIXFN_H
#define HYPROF_PIXFN_H

#include "hyprof/hyprof.h"

#include <gdal.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;          /* "hyprof_pca" */
    GDALDerivedPixelFuncWithArgs fn;
    const char *arguments_xml; /* <PixelFunctionArgumentsList>: documents the arguments */
} hyprof_pixfn_t;

/* Warns (CE_Warning, once per function and name in a process) about each
 * argument of `args` that `f`'s arguments_xml does not declare: a misspelt
 * argument would otherwise be ignored and its default used in silence.
 * plugin.c calls it before every pixel function. */
void hyprof_pixfn_check_names(const hyprof_pixfn_t *f, CSLConstList args);

/* The sources of one call as a float32 BSQ cube (one band per source, as the
 * CLI reads its input) with its mask: a pixel is invalid where any source is
 * NaN, infinite or equal to `nodata` (when has_nodata). On failure, a
 * CPLError names `fname`. Free with hyprof_cube_free. */
hyprof_status_t hyprof_pixfn_sources(const char *fname, void **sources, int nsources,
                                     int width, int height, GDALDataType type, int has_nodata,
                                     double nodata, hyprof_cube_t *cube);

/* Writes `values` (width*height float32, row-major) into GDAL's buffer of any
 * type and spacing. */
void hyprof_pixfn_write(const float *values, void *data, int width, int height,
                        GDALDataType type, int pixel_space, int line_space);

/* The same from double values (functions with no CLI counterpart keep full
 * precision for Float64 buffers). */
void hyprof_pixfn_write64(const double *values, void *data, int width, int height,
                          GDALDataType type, int pixel_space, int line_space);

/* Arguments: a number or integer in [min, max]; absent gives `def` unless
 * `required`. Errors are CPLErrors naming the function, argument and value. */
CPLErr hyprof_pixfn_double(const char *fname, CSLConstList args, const char *name, int required,
                           double def, double min, double max, double *out);
CPLErr hyprof_pixfn_int(const char *fname, CSLConstList args, const char *name, int required,
                        long def, long min, long max, long *out);
/* The optional `nodata` argument: the input's nodata value (pixels where any
 * source equals it are nodata in the output, which then holds it). */
CPLErr hyprof_pixfn_nodata(const char *fname, CSLConstList args, int *has, double *nodata);
/* The nodata value written for invalid pixels, and the ulp nudge of valid
 * values equal to it: the CLI's rules, so outputs compare bit for bit. */
void hyprof_pixfn_finish(float *values, const uint8_t *mask, size_t n, int has_nodata,
                         double nodata);

/* The frame of the pixel functions that give one float32 value a pixel:
 * the window's sources as a cube (hyprof_pixfn_sources), `compute` filling
 * `out` (width*height values; masked pixels are set afterwards), then
 * hyprof_pixfn_finish and hyprof_pixfn_write into GDAL's buffer. */
typedef CPLErr (*hyprof_pixfn_compute_t)(void *user, const hyprof_cube_t *x, float *out);
CPLErr hyprof_pixfn_apply(const char *fname, void **sources, int nsources, void *data,
                          int width, int height, GDALDataType stype, GDALDataType btype,
                          int pixel_space, int line_space, int has_nodata, double nodata,
                          hyprof_pixfn_compute_t compute, void *user);

/* A file argument, resolved: absolute paths as they are; relative ones against
 * the current folder, then each folder of the HYPROF_MODEL_PATH configuration
 * option (colon-separated). GDAL 3.6 does not tell a pixel function where its
 * .vrt is (a VRT whose model must resolve against its own folder names it
 * through the HYPROF driver, see driver.h). Returns a CPLMalloc'ed path or NULL after a CPLError. */
char *hyprof_pixfn_file(const char *fname, CSLConstList args, const char *name);

/* A library context for pixel work: the CPU (a window is too small for the
 * device to pay), all threads. */
hyprof_ctx_t *hyprof_pixfn_ctx(const char *fname);

/* hyprof_classify and hyprof_decision: the sources of one call classified in
 * one library call with the classifier named by the `model` argument. */
typedef struct {
    const hyprof_classifier_t *model; /* from the model cache */
    char *path;                       /* the model file, resolved */
    hyprof_cube_t x;                  /* the sources, with their mask */
    hyprof_cube_t map;                /* uint16 class values, 0 where invalid */
    hyprof_cube_t scores;             /* float32, one band per class (want_scores) */
    int has_nodata;
    double nodata;
} hyprof_pixfn_classified_t;

/* Parses `model` and `nodata`, checks the model's band count against the
 * sources and `klass` (1-based, when > 0) against its classes, and classifies.
 * CE_Failure after a CPLError naming `fname` and the problem. Always free
 * with hyprof_pixfn_classified_free. */
CPLErr hyprof_pixfn_classify_window(const char *fname, CSLConstList args, void **sources,
                                    int nsources, int width, int height, GDALDataType type,
                                    long klass, int want_scores, hyprof_pixfn_classified_t *out);
void hyprof_pixfn_classified_free(hyprof_pixfn_classified_t *c);

#ifdef __cplusplus
}
#endif
#endif
