/* The hyprof executable's pieces. The CLI parses and reports; the library
 * computes. */
#ifndef HYPROF_CLI_H
#define HYPROF_CLI_H

#include "hyprof/hyprof.h"

#include <stdio.h>

/* Exit codes of the CLI contract. */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_CANCELLED = 3 };

/* A parsed command line for one operation. */
typedef struct {
    const hyprof_op_t *op;
    hyprof_args_t *args;    /* the operation's parameters */
    hyprof_args_t *common;  /* backend, device, threads, progress, overwrite */
    const char *input, *output;
    int help;
} cli_command_t;

/* The pseudo-operation holding the common options. */
const hyprof_op_t *cli_common_op(void);
/* Parses argv (after the operation name); on error prints one line and
 * returns EXIT_USAGE. */
int cli_parse(const hyprof_op_t *op, int argc, char **argv, cli_command_t *cmd);
void cli_command_free(cli_command_t *cmd);
void cli_print_op_help(FILE *f, const hyprof_op_t *op);

int cli_describe(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_run(cli_command_t *cmd);

/* Progress and log output on stderr, and SIGINT/SIGTERM -> cancel. */
typedef enum { PROGRESS_NONE, PROGRESS_BAR, PROGRESS_JSON } cli_progress_mode_t;
typedef struct {
    cli_progress_mode_t mode;
    double lo, hi;          /* the current stage's share of the whole run */
    double last;
    char last_stage[32];
    int verbose;
} cli_progress_t;

void cli_progress_init(cli_progress_t *p, const char *mode);
void cli_progress_stage(cli_progress_t *p, double lo, double hi);
int cli_progress_fn(void *user, double fraction, const char *stage);
void cli_progress_done(cli_progress_t *p);
void cli_log_fn(void *user, hyprof_log_level_t level, const char *message);
void cli_install_signals(hyprof_ctx_t *ctx);
int cli_interrupted(void);

/* JSON string literal of s on f. */
void cli_json_string(FILE *f, const char *s);
/* One-line error: "hyprof OP: message". */
void cli_error(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
