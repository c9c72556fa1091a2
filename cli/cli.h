/* The hyprof executable's pieces. The CLI parses and reports; the library
 * computes. */
#ifndef HYPROF_CLI_H
#define HYPROF_CLI_H

#include "hyprof/hyprof.h"

#include <stdio.h>

/* Exit codes of the CLI contract. */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_CANCELLED = 3 };

#define CLI_MAX_FILES 4
/* Room for a message that quotes a path whole (PATH_MAX 4096) and more. */
#define CLI_MESSAGE_MAX 8192

/* A parsed command line for one operation. */
typedef struct {
    const hyprof_op_t *op;
    hyprof_args_t *args;    /* the operation's parameters */
    hyprof_args_t *common;  /* backend, device, threads, progress, overwrite */
    const char *input, *output;
    /* Every file argument in order (the registry's positionals; INPUT OUTPUT
     * by default). */
    const char *files[CLI_MAX_FILES];
    int nfiles;
    int help;
    /* Every --co NAME=VALUE in order, NULL-terminated (NULL when none). */
    const char **co;
    size_t nco;
} cli_command_t;

/* The pseudo-operation holding the common options. */
const hyprof_op_t *cli_common_op(void);
/* Parses argv (after the operation name); on error prints one line and
 * returns EXIT_USAGE. */
int cli_parse(const hyprof_op_t *op, int argc, char **argv, cli_command_t *cmd);
void cli_command_free(cli_command_t *cmd);
/* Edit distance between a and b (insertions, deletions, substitutions; -1
 * cast to size_t beyond 64 characters), for suggesting what a mistyped
 * option or operation was meant to be. */
size_t cli_edit_distance(const char *a, const char *b);
void cli_print_op_help(FILE *f, const hyprof_op_t *op);

int cli_describe(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_run(cli_command_t *cmd);
/* Operations without a raster -> raster `run` (train, classify, assess, split). */
int cli_run_classification(cli_command_t *cmd);

/* Progress and log output on stderr, and SIGINT/SIGTERM -> cancel. */
typedef enum { PROGRESS_NONE, PROGRESS_BAR, PROGRESS_JSON } cli_progress_mode_t;
typedef struct {
    cli_progress_mode_t mode;
    double lo, hi;          /* the current stage's share of the whole run */
    double last;
    char last_stage[32];
    hyprof_log_level_t min_level; /* library messages below it are not shown */
} cli_progress_t;

void cli_progress_init(cli_progress_t *p, const char *mode);
void cli_progress_stage(cli_progress_t *p, double lo, double hi);
int cli_progress_fn(void *user, double fraction, const char *stage);
void cli_progress_done(cli_progress_t *p);
void cli_log_fn(void *user, hyprof_log_level_t level, const char *message);
/* SIGINT/SIGTERM set the cancel flag from the start of the process
 * (cli_install_signals runs before main); cli_cancel_on_signal ties the flag
 * to a context, cancelling it at once when a signal came before. */
void cli_install_signals(void);
void cli_cancel_on_signal(hyprof_ctx_t *ctx);
int cli_interrupted(void);
/* The operation whose name prefixes log lines ("hyprof eadp: warning: ..."). */
void cli_set_op_name(const char *name);

/* JSON string literal of s on f. */
void cli_json_string(FILE *f, const char *s);
/* One-line error: "hyprof OP: message". */
void cli_error(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The library's last error under "hyprof OP: " (without repeating "OP: "
 * when the library's text starts with it; another stage's name stays). */
void cli_lib_error(const char *op, const char *message);

/* Shared by the runners (run.c). */
int cli_exit_code(hyprof_status_t st, int reading);
/* Checks the files named by parameters (inputs readable, outputs creatable). */
int cli_check_param_files(const cli_command_t *cmd, int overwrite);
hyprof_ctx_t *cli_make_context(const cli_command_t *cmd, cli_progress_t *pg);
/* The registry's positionals of an operation: count, and the KIND and NAME
 * of file i (into kind/name buffers). */
int cli_positionals(const hyprof_op_t *op, int i, char *kind, size_t kn, char *name, size_t nn);

/* ---- the files of a run (outputs.c) ---- */

#define CLI_MAX_OUTPUTS 8

typedef struct {
    char *final, *tmp;
    int raster; /* GDAL may give it an .aux.xml sidecar */
} cli_output_t;

/* Outputs written to temporaries, committed together. */
typedef struct {
    cli_output_t f[CLI_MAX_OUTPUTS];
    size_t n;
} cli_outputs_t;

/* Refuses (EXIT_USAGE, one message) an output that is the same file as an
 * input or as another output, with or without --overwrite. */
int cli_check_distinct(const cli_command_t *cmd);
/* Registers the output `path` and returns the temporary the run writes it to
 * (owned by o; NULL when out of memory). Removes the temporaries that dead
 * runs left in its folder. */
const char *cli_outputs_add(cli_outputs_t *o, const char *path, int raster);
/* Renames every temporary onto its target, or none: a cancellation flagged
 * until now (EXIT_CANCELLED), a target created meanwhile (EXIT_USAGE) or a
 * failed rename (EXIT_RUNTIME) leaves the old files as they were. Prints the
 * message; the set is emptied either way. */
int cli_outputs_commit(cli_outputs_t *o, const char *op, int overwrite);
/* Removes every temporary (and its sidecar). */
void cli_outputs_discard(cli_outputs_t *o);

/* Files an operation writes besides OUTPUT (models, endmember spectra) go
 * to temporaries committed with OUTPUT (registered in o after it, their
 * parameter names in param[1..]): cli_route_side_files points the
 * arguments at the temporaries (to_tmp) while the operation runs, and back
 * at the final names, which the output's metadata records. */
int cli_add_side_files(cli_command_t *cmd, cli_outputs_t *o, const char **param);
void cli_route_side_files(cli_command_t *cmd, const cli_outputs_t *o, const char **param,
                          int to_tmp);

/* Runs an operation that works pixel by pixel on blocks of rows, reading,
 * computing and writing one block after the other: for an input larger than
 * the memory (run_rows.c). OUTPUT's temporary is registered in outs; `res`
 * receives the shape, band names and metadata written, without pixels. */
int cli_run_by_rows(cli_command_t *cmd, hyprof_ctx_t *ctx, cli_progress_t *pg,
                    cli_outputs_t *outs, hyprof_result_t *res);
/* Rows a block of a run by rows: as many as half the available memory holds
 * with the input's and `out_bands` float32 bands a row, a multiple of 256
 * rows when it can be (the output's tile height); said at HYPROF_LOG=info.
 * 0, after the message, if not even one row fits. */
size_t cli_plan_blocks(cli_progress_t *pg, const char *op, const char *input, size_t w,
                       size_t h, size_t in_bands, size_t out_bands);
/* Calls block(user, y0, n) for the rows of a height-h input, `rows` at a
 * time, with the progress stage of each; stops at the first exit code that
 * is not EXIT_OK, or with EXIT_CANCELLED on SIGINT/SIGTERM. */
int cli_run_blocks(cli_progress_t *pg, const char *op, size_t h, size_t rows,
                   int (*block)(void *user, size_t y0, size_t n), void *user);

#endif
