/* The operation registry: the single declaration of every operation and its
 * parameters. The CLI's option parsing and --help, `hyprof describe --json`,
 * the HYPROF GDAL driver and the QGIS provider all read it. */
#ifndef HYPROF_REGISTRY_H
#define HYPROF_REGISTRY_H

#include "hyprof/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    HYPROF_PARAM_INT = 0,
    HYPROF_PARAM_FLOAT,
    HYPROF_PARAM_CHOICE,     /* one of `choices`, '|'-separated */
    HYPROF_PARAM_STRING,
    HYPROF_PARAM_INT_LIST,   /* comma-separated integers, each within [min, max] */
    HYPROF_PARAM_FLOAT_LIST, /* comma-separated numbers, each within [min, max] */
    HYPROF_PARAM_BOOL,       /* a flag: present = true */
    HYPROF_PARAM_FILE_IN,    /* a file that must exist (model, table) */
    HYPROF_PARAM_FILE_OUT,   /* a file the operation writes (model, report) */
    HYPROF_PARAM_RASTER_IN,  /* a second raster input (reference map, labels) */
    HYPROF_PARAM_VECTOR_IN,  /* a vector dataset (points or polygons, any CRS) */
    HYPROF_PARAM_FIELD       /* an attribute of the VECTOR_IN parameter named in `choices` */
} hyprof_param_type_t;

#define HYPROF_PARAM_REQUIRED 1u /* no default: must be given */
#define HYPROF_PARAM_ADVANCED 2u /* shown as advanced in QGIS */
/* A FILE_OUT written beside OUTPUT: when not given, the CLI names it OUTPUT
 * with its extension replaced by the one of the file filter in `choices`
 * ("Endmember spectra (*.csv)": out.tif -> out.csv). */
#define HYPROF_PARAM_BESIDE_OUTPUT 4u

typedef struct {
    const char *name;          /* option name without dashes: "components" */
    hyprof_param_type_t type;
    const char *def;           /* default as text; NULL: optional, unset */
    double min, max;           /* range of numbers and list elements */
    const char *choices;       /* CHOICE: "pca|dwt|none"; FILE_*: file filter */
    const char *help;
    unsigned flags;
} hyprof_param_t;

typedef struct hyprof_args hyprof_args_t;
typedef struct hyprof_result hyprof_result_t;

/* An operation that maps an input cube to an output cube. */
typedef hyprof_status_t (*hyprof_op_run_fn)(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                            const hyprof_cube_t *in, hyprof_result_t *out);
/* How many bands an operation's output has for an input of `in_bands` bands,
 * without computing it (the GDAL driver opens a dataset with it). Checks what
 * the count depends on, naming the bad value. */
typedef hyprof_status_t (*hyprof_op_bands_fn)(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                              size_t in_bands, size_t *out_bands);
/* The names of the `out_bands` output bands for a width x height x in_bands
 * input, from the parameters alone: what only the data tells (a component's
 * share of the variance, an endmember's pixel) is the result's metadata.
 * Fills names[0..out_bands-1] with malloc'ed strings. */
typedef hyprof_status_t (*hyprof_op_names_fn)(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                              size_t width, size_t height, size_t in_bands,
                                              size_t out_bands, char **names);

/* Non-zero when, with these arguments, each output pixel depends on that
 * input pixel's spectrum alone and the result's metadata not on the pixels:
 * a front end may then run the operation on blocks of rows and join them,
 * the same bytes as one run (the CLI does so for an input larger than the
 * memory). */
typedef int (*hyprof_op_pixelwise_fn)(const hyprof_args_t *args);

typedef struct {
    const char *name;   /* "pca" */
    const char *group;  /* "Feature extraction", "Profiles", "Unmixing", "Classification" */
    const char *summary;
    const char *help;   /* a paragraph: what it does, outputs, references */
    const hyprof_param_t *params;
    size_t nparams;
    hyprof_op_run_fn run; /* NULL: not a raster -> raster map; the front end runs it */
    const char *output; /* what OUTPUT receives, e.g. "raster: N bands (float32)" */
    hyprof_op_bands_fn bands; /* NULL: the count is known only after running */
    /* The file arguments, in order, as space-separated KIND:NAME with KIND
     * raster_in, raster_out or file_out ("raster_in:FEATURES file_out:MODEL").
     * NULL: "raster_in:INPUT raster_out:OUTPUT". */
    const char *positionals;
    /* NULL: the front end names the bands (classify). hyprof_op_run names
     * the result's bands with it, so a name known before running is the
     * name written. */
    hyprof_op_names_fn names;
    hyprof_op_pixelwise_fn pixelwise; /* NULL: never; needs `bands` */
    /* The CPU backend's work on one thread, in ns per input voxel and per
     * output voxel (hyprof_op_cpu_is_quicker; measured at default parameters).
     * {0, 0}: not declared, and `auto` never prefers the CPU for its size. */
    double cpu_ns[2];
} hyprof_op_t;

/* `auto`'s choice for a process whose GPU has not started yet (the command
 * line asks before it starts the device): the seconds `op` would take on the
 * CPU for a width x height input of in_bands bands and an output of
 * out_bands (hyprof_op_output_bands) with the context's threads, from its
 * declared cpu_ns, in *seconds. Returns 1 when that is less than the GPU's
 * start-up (driver, context, cuBLAS and cuSOLVER, HYPROF_CUDA_START_S), so
 * the CPU finishes first; 0 when it is not, when op declares no cost, or in
 * a build without CUDA. */
#define HYPROF_CUDA_START_S 0.3
int hyprof_op_cpu_is_quicker(const hyprof_ctx_t *ctx, const hyprof_op_t *op, size_t width,
                             size_t height, size_t in_bands, size_t out_bands, double *seconds);

size_t hyprof_op_count(void);
const hyprof_op_t *hyprof_op_at(size_t index);
const hyprof_op_t *hyprof_op_find(const char *name);
const hyprof_param_t *hyprof_op_param(const hyprof_op_t *op, const char *name);
/* The options every operation takes (backend, device, threads, progress, overwrite). */
const hyprof_param_t *hyprof_common_params(size_t *count);
const char *hyprof_param_type_name(hyprof_param_type_t type);
/* Whether the parameter names a file the operation reads (FILE_IN, RASTER_IN,
 * VECTOR_IN). */
int hyprof_param_is_input(const hyprof_param_t *p);

/* ---- parsed arguments ------------------------------------------------------ */

/* Arguments of one operation, all at their defaults. */
hyprof_args_t *hyprof_args_new(const hyprof_op_t *op);
void hyprof_args_free(hyprof_args_t **args);
const hyprof_op_t *hyprof_args_op(const hyprof_args_t *args);
/* Parses and range-checks one value; on error the message names the parameter
 * and the value (hyprof_args_error). Unknown names are errors. */
hyprof_status_t hyprof_args_set(hyprof_args_t *args, const char *name, const char *value);
/* Fails, naming the parameter, if a required one is missing. */
hyprof_status_t hyprof_args_check(hyprof_args_t *args);
const char *hyprof_args_error(const hyprof_args_t *args);
int hyprof_args_is_set(const hyprof_args_t *args, const char *name);  /* given or defaulted */
int hyprof_args_given(const hyprof_args_t *args, const char *name);   /* given explicitly */
/* A FLOAT value read as an integer is truncated and saturated to long. */
long hyprof_args_int(const hyprof_args_t *args, const char *name);
double hyprof_args_float(const hyprof_args_t *args, const char *name);
int hyprof_args_bool(const hyprof_args_t *args, const char *name);
/* The value as given or defaulted (booleans normalised to true/false); NULL
 * if unset. */
const char *hyprof_args_str(const hyprof_args_t *args, const char *name);
const double *hyprof_args_list(const hyprof_args_t *args, const char *name, size_t *count);

/* ---- results --------------------------------------------------------------- */

/* What a raster operation produces: an owned float32 BSQ cube with its mask,
 * a name for every band and metadata items (the parameters are added by the
 * writer from the args). */
struct hyprof_result {
    hyprof_cube_t cube;
    char **band_names;
    char **meta_keys;
    char **meta_values;
    size_t nmeta;
};

void hyprof_result_init(hyprof_result_t *res);
void hyprof_result_free(hyprof_result_t *res);
/* Allocates the output cube (float32 BSQ) and its band name slots; the mask and
 * nodata of `like` (if not NULL) are copied. */
hyprof_status_t hyprof_result_alloc(hyprof_result_t *res, size_t width, size_t height,
                                    size_t bands, const hyprof_cube_t *like);
hyprof_status_t hyprof_result_set_band_name(hyprof_result_t *res, size_t band,
                                            const char *fmt, ...);
hyprof_status_t hyprof_result_add_meta(hyprof_result_t *res, const char *key,
                                       const char *fmt, ...);

/* The output band count of `op` with `args` for an input of `in_bands` bands,
 * without running it. *out_bands is 0 (and HYPROF_OK returned) when the
 * operation cannot tell before running. */
hyprof_status_t hyprof_op_output_bands(hyprof_ctx_t *ctx, const hyprof_op_t *op,
                                       const hyprof_args_t *args, size_t in_bands,
                                       size_t *out_bands);

/* The names of the `out_bands` bands of `op`'s output for a width x height x
 * in_bands input, without running it (`out_bands` from hyprof_op_output_bands,
 * or the result's count when that was 0). *names is NULL (and HYPROF_OK
 * returned) when the operation does not name its bands itself. Free with
 * hyprof_band_names_free. */
hyprof_status_t hyprof_op_band_names(hyprof_ctx_t *ctx, const hyprof_op_t *op,
                                     const hyprof_args_t *args, size_t width, size_t height,
                                     size_t in_bands, size_t out_bands, char ***names);
void hyprof_band_names_free(char **names, size_t count);

/* Checks the arguments and runs the operation on `in`; the bands are named
 * as hyprof_op_band_names names them. */
hyprof_status_t hyprof_op_run(hyprof_ctx_t *ctx, const hyprof_op_t *op,
                              const hyprof_args_t *args, const hyprof_cube_t *in,
                              hyprof_result_t *out);

#ifdef __cplusplus
}
#endif
#endif
