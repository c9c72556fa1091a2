/* One run of a classification operation (train, classify, assess, split):
 * its checks before any work, progress, library context, outputs written to
 * temporaries and committed at the end, and the one place errors are said. */
#include "job.h"
#include "classmap_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Positional inputs readable, outputs creatable, parameters' files too. */
int check_positionals(const cli_command_t *cmd, int overwrite)
{
    char kind[32], name[64], err[512];
    struct stat sb;
    for (int i = 0; i < cmd->nfiles; i++) {
        cli_positionals(cmd->op, i, kind, sizeof kind, name, sizeof name);
        const char *f = cmd->files[i];
        if (strstr(kind, "_in") && (stat(f, &sb) != 0 || access(f, R_OK) != 0)) {
            cli_error(cmd->op->name, "%s '%s' does not exist or is not readable", name, f);
            return EXIT_USAGE;
        }
        const char *wrong = strstr(kind, "_in") ? hyprof_input_problem(&sb, 0) : NULL;
        if (wrong) {
            cli_error(cmd->op->name, "%s '%s' %s", name, f, wrong);
            return EXIT_USAGE;
        }
        if (strstr(kind, "_out") &&
            hyprof_output_check(f, overwrite, err, sizeof err) != HYPROF_OK) {
            cli_error(cmd->op->name, "%s: %s", name, err);
            return EXIT_USAGE;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(cmd->files[j], f) == 0) {
                cli_error(cmd->op->name, "'%s' is given twice", f);
                return EXIT_USAGE;
            }
    }
    return EXIT_OK;
}

int job_start(job_t *j, cli_command_t *cmd)
{
    memset(j, 0, sizeof *j);
    j->cmd = cmd;
    j->name = cmd->op->name;
    j->overwrite = hyprof_args_bool(cmd->common, "overwrite");
    int rc = cli_check_distinct(cmd);
    if (rc == EXIT_OK)
        rc = cli_check_param_files(cmd, j->overwrite);
    if (rc == EXIT_OK)
        rc = check_positionals(cmd, j->overwrite);
    if (rc != EXIT_OK)
        return rc;
    cli_progress_init(&j->pg, hyprof_args_str(cmd->common, "progress"));
    j->ctx = cli_make_context(cmd, &j->pg);
    if (!j->ctx) {
        cli_error(j->name, "out of memory");
        return EXIT_RUNTIME;
    }
    cli_cancel_on_signal(j->ctx);
    j->io.fn = cli_progress_fn;
    j->io.user = &j->pg;
    return EXIT_OK;
}

/* Renames every output written so far onto its target, or none. */
int job_commit(job_t *j)
{
    cli_progress_done(&j->pg);
    return cli_outputs_commit(&j->outs, j->name, j->overwrite);
}

/* Removes the temporaries of a run that did not commit. */
int job_end(job_t *j, int rc)
{
    cli_progress_done(&j->pg);
    cli_outputs_discard(&j->outs);
    if (cli_interrupted() && rc != EXIT_OK)
        rc = EXIT_CANCELLED;
    cli_cancel_on_signal(NULL);
    hyprof_ctx_free(&j->ctx);
    return rc;
}

/* The temporary an output is written to (NULL, after a message: out of memory). */
const char *job_output(job_t *j, const char *path, int raster)
{
    const char *tmp = cli_outputs_add(&j->outs, path, raster);
    if (!tmp)
        cli_error(j->name, "out of memory");
    return tmp;
}

/* Class maps and references hold class numbers: a float raster is refused. */
int need_integers(job_t *j, const char *what, const char *path)
{
    size_t w, h, b;
    int integer = 0;
    hyprof_status_t st = hyprof_raster_probe(path, &w, &h, &b, &integer, j->err, sizeof j->err);
    if (st != HYPROF_OK)
        return io_fail(j, st, 1);
    if (integer)
        return EXIT_OK;
    cli_error(j->name, "%s '%s' is not an integer raster: class values are whole numbers "
              "(convert it, e.g. gdal_translate -ot UInt16)", what, path);
    return EXIT_USAGE;
}

/* A failed library call: its message, its exit code. */
int lib_fail(job_t *j, hyprof_status_t st)
{
    cli_progress_done(&j->pg);
    cli_lib_error(j->name, hyprof_ctx_last_error(j->ctx));
    return cli_exit_code(st, 0);
}

/* A failed read or write: the message in j->err. */
int io_fail(job_t *j, hyprof_status_t st, int reading)
{
    cli_progress_done(&j->pg);
    cli_error(j->name, "%s", j->err);
    return st == HYPROF_ERR_ARGUMENT ? EXIT_USAGE : cli_exit_code(st, reading);
}

hyprof_status_t read_raster(job_t *j, const char *path, hyprof_raster_t *r, double lo,
                            double hi)
{
    cli_progress_stage(&j->pg, lo, hi);
    return hyprof_raster_read(j->ctx, path, &j->io, r, j->err, sizeof j->err);
}

int grid_mismatch(job_t *j, const hyprof_raster_t *a, const hyprof_raster_t *b)
{
    char why[768];
    if (hyprof_same_grid(a, b, why, sizeof why))
        return 0;
    cli_progress_done(&j->pg);
    cli_error(j->name, "not on the same grid: %s", why);
    return 1;
}
