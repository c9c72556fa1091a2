/* One run of a classification operation (job.c): shared by train and
 * classify (classify.c), assess (assess.c) and split (split.c). */
#ifndef HYPROF_CLI_JOB_H
#define HYPROF_CLI_JOB_H

#include "cli.h"
#include "raster_io.h"

typedef struct {
    cli_command_t *cmd;
    const char *name;
    int overwrite;
    cli_progress_t pg;
    hyprof_ctx_t *ctx;
    hyprof_io_progress_t io;
    cli_outputs_t outs; /* written to temporaries, committed at the end */
    char err[1024];
} job_t;

/* Positional inputs readable, outputs creatable, parameters' files too. */
int check_positionals(const cli_command_t *cmd, int overwrite);
int job_start(job_t *j, cli_command_t *cmd);
/* Renames every output written so far onto its target, or none. */
int job_commit(job_t *j);
/* Removes the temporaries of a run that did not commit. */
int job_end(job_t *j, int rc);
/* The temporary an output is written to (NULL, after a message: out of memory). */
const char *job_output(job_t *j, const char *path, int raster);
/* Class maps and references hold class numbers: a float raster is refused. */
int need_integers(job_t *j, const char *what, const char *path);
/* A failed library call: its message, its exit code. */
int lib_fail(job_t *j, hyprof_status_t st);
/* A failed read or write: the message in j->err. */
int io_fail(job_t *j, hyprof_status_t st, int reading);
/* Reads `path` with progress from lo to hi of the run. */
hyprof_status_t read_raster(job_t *j, const char *path, hyprof_raster_t *r, double lo,
                            double hi);
/* Whether two rasters' grids differ (said, naming both). */
int grid_mismatch(job_t *j, const hyprof_raster_t *a, const hyprof_raster_t *b);

/* The runners of cli_run_classification. */
int run_train(job_t *j);
int run_classify(job_t *j);
int run_assess(job_t *j);
int run_split(job_t *j);

#endif
