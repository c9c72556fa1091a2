/* Running a raster operation: check files, read, compute, write, report. */
#include "cli.h"
#include "raster_io.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Shares of the whole run's progress. */
#define READ_END 0.1
#define COMPUTE_END 0.9

int cli_exit_code(hyprof_status_t st, int reading)
{
    switch (st) {
    case HYPROF_OK: return EXIT_OK;
    case HYPROF_ERR_CANCELLED: return EXIT_CANCELLED;
    case HYPROF_ERR_ARGUMENT:
    case HYPROF_ERR_INPUT:
    case HYPROF_ERR_FORMAT: return EXIT_USAGE;
    case HYPROF_ERR_IO:
    case HYPROF_ERR_NOMEM: return reading ? EXIT_USAGE : EXIT_RUNTIME;
    default: return EXIT_RUNTIME;
    }
}

/* A name GDAL opens without a file of that name ("HYPROF:...", "/vsizip/..."). */
static int gdal_name(const char *path)
{
    return strncmp(path, "/vsi", 4) == 0 || strchr(path, ':') != NULL;
}

/* An input file (role: "INPUT", "--model:") that must exist, be readable and
 * be a regular file (a folder where folder_ok). */
static int check_input(const cli_command_t *cmd, const char *role, const char *v, int folder_ok)
{
    struct stat sb;
    if (stat(v, &sb) != 0 || access(v, R_OK) != 0) {
        cli_error(cmd->op->name, "%s '%s' does not exist or is not readable", role, v);
        return EXIT_USAGE;
    }
    const char *wrong = hyprof_input_problem(&sb, folder_ok);
    if (wrong) {
        cli_error(cmd->op->name, "%s '%s' %s", role, v, wrong);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* Every input of the command (file arguments, then parameters' files), so
 * that a missing input is reported before anything about the outputs. */
static int check_inputs(const cli_command_t *cmd)
{
    char kind[32], name[64], role[72];
    for (int i = 0; i < cmd->nfiles; i++) {
        cli_positionals(cmd->op, i, kind, sizeof kind, name, sizeof name);
        if (!strstr(kind, "_in") || (strcmp(kind, "raster_in") == 0 && gdal_name(cmd->files[i])))
            continue;
        if (check_input(cmd, name, cmd->files[i], 0) != EXIT_OK)
            return EXIT_USAGE;
    }
    for (size_t i = 0; i < cmd->op->nparams; i++) {
        const hyprof_param_t *p = &cmd->op->params[i];
        const char *v = hyprof_args_str(cmd->args, p->name);
        if (!v || !hyprof_param_is_input(p))
            continue;
        snprintf(role, sizeof role, "--%s:", p->name);
        if (check_input(cmd, role, v, p->type == HYPROF_PARAM_VECTOR_IN) != EXIT_OK)
            return EXIT_USAGE;
    }
    return EXIT_OK;
}

static int check_format(const cli_command_t *cmd, const char *path, hyprof_output_kind_t kind,
                        size_t bands)
{
    char err[CLI_MESSAGE_MAX];
    hyprof_status_t st = hyprof_output_format_check(path, kind, bands, err, sizeof err);
    if (st == HYPROF_OK)
        return EXIT_OK;
    cli_error(cmd->op->name, "%s", err);
    return cli_exit_code(st, 0);
}

/* The format of the raster outputs known before the input is read: class
 * maps (the file arguments of the classification operations, one band) and
 * rasters named by parameters (--probabilities; their band count comes with
 * the model). OUTPUT of a profile operation is checked with its band count
 * (check_memory). */
/* Whether a VECTOR_IN parameter is given: the raster_out file arguments of
 * an operation given vectors are vector files (split --samples writes TRAIN
 * and TEST so), whose format follows the extension and is the vector
 * writer's to check. */
static int vector_outputs(const cli_command_t *cmd)
{
    for (size_t i = 0; i < cmd->op->nparams && !cmd->op->run; i++)
        if (cmd->op->params[i].type == HYPROF_PARAM_VECTOR_IN &&
            hyprof_args_str(cmd->args, cmd->op->params[i].name))
            return 1;
    return 0;
}

static int check_formats(const cli_command_t *cmd)
{
    char kind[32];
    if (vector_outputs(cmd)) {
        if (hyprof_args_given(cmd->common, "of") || hyprof_args_given(cmd->common, "overviews") ||
            cmd->nco) {
            cli_error(cmd->op->name, "--of, --co and --overviews apply to raster outputs; with "
                      "--samples the outputs are vector files (.gpkg, .geojson, .fgb)");
            return EXIT_USAGE;
        }
        return EXIT_OK;
    }
    for (int i = 0; i < cmd->nfiles && !cmd->op->run; i++) {
        cli_positionals(cmd->op, i, kind, sizeof kind, NULL, 0);
        int rc = strcmp(kind, "raster_out") == 0
                     ? check_format(cmd, cmd->files[i], HYPROF_OUTPUT_CLASSMAP, 1)
                     : EXIT_OK;
        if (rc != EXIT_OK)
            return rc;
    }
    for (size_t i = 0; i < cmd->op->nparams; i++) {
        const hyprof_param_t *p = &cmd->op->params[i];
        const char *v = hyprof_args_str(cmd->args, p->name);
        int raster = p->type == HYPROF_PARAM_FILE_OUT && p->choices && strstr(p->choices, "*.tif");
        int rc = v && raster ? check_format(cmd, v, HYPROF_OUTPUT_PROFILE, 0) : EXIT_OK;
        if (rc != EXIT_OK)
            return rc;
    }
    return EXIT_OK;
}

/* Inputs first (all of them), then the files named by parameters that the
 * run writes, and the format of the raster outputs; before any work. */
int cli_check_param_files(const cli_command_t *cmd, int overwrite)
{
    char err[CLI_MESSAGE_MAX];
    int rc = check_inputs(cmd);
    if (rc != EXIT_OK)
        return rc;
    for (size_t i = 0; i < cmd->op->nparams; i++) {
        const hyprof_param_t *p = &cmd->op->params[i];
        const char *v = hyprof_args_str(cmd->args, p->name);
        if (v && p->type == HYPROF_PARAM_FILE_OUT &&
            hyprof_output_check(v, overwrite, err, sizeof err) != HYPROF_OK) {
            cli_error(cmd->op->name, "--%s: %s", p->name, err);
            return EXIT_USAGE;
        }
    }
    return check_formats(cmd);
}

static int check_files(const cli_command_t *cmd, int overwrite)
{
    char err[CLI_MESSAGE_MAX];
    int rc = cli_check_param_files(cmd, overwrite);
    if (rc != EXIT_OK)
        return rc;
    if (hyprof_output_check(cmd->output, overwrite, err, sizeof err) != HYPROF_OK) {
        cli_error(cmd->op->name, "%s", err);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

int cli_add_side_files(cli_command_t *cmd, cli_outputs_t *o, const char **param)
{
    for (size_t i = 0; i < cmd->op->nparams; i++) {
        const hyprof_param_t *p = &cmd->op->params[i];
        const char *v = hyprof_args_str(cmd->args, p->name);
        if (p->type != HYPROF_PARAM_FILE_OUT || !v)
            continue;
        param[o->n] = p->name;
        if (!cli_outputs_add(o, v, 0))
            return -1;
    }
    return 0;
}

void cli_route_side_files(cli_command_t *cmd, const cli_outputs_t *o, const char **param,
                          int to_tmp)
{
    for (size_t i = 1; i < o->n; i++)
        hyprof_args_set(cmd->args, param[i], to_tmp ? o->f[i].tmp : o->f[i].final);
}

/* Side files named after OUTPUT (HYPROF_PARAM_BESIDE_OUTPUT): OUTPUT with its
 * extension replaced by the one in the parameter's file filter. */
static int name_beside_output(cli_command_t *cmd)
{
    for (size_t i = 0; i < cmd->op->nparams; i++) {
        const hyprof_param_t *p = &cmd->op->params[i];
        const char *ext = p->choices ? strstr(p->choices, "(*.") : NULL;
        if (!(p->flags & HYPROF_PARAM_BESIDE_OUTPUT) || !ext ||
            hyprof_args_given(cmd->args, p->name))
            continue;
        ext += 2;
        size_t elen = strcspn(ext, ")"), olen = strlen(cmd->output);
        const char *slash = strrchr(cmd->output, '/'), *dot = strrchr(cmd->output, '.');
        size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - cmd->output) : olen;
        char *path = malloc(stem + elen + 1);
        if (!path)
            return EXIT_RUNTIME;
        memcpy(path, cmd->output, stem);
        memcpy(path + stem, ext, elen);
        path[stem + elen] = '\0';
        hyprof_status_t st = hyprof_args_set(cmd->args, p->name, path);
        free(path);
        if (st != HYPROF_OK) {
            cli_error(cmd->op->name, "%s", hyprof_args_error(cmd->args));
            return EXIT_USAGE;
        }
    }
    return EXIT_OK;
}

/* The input's band wavelengths, for operations that record them (unmix). */
static void pass_wavelengths(cli_command_t *cmd, const hyprof_raster_t *in)
{
    if (!hyprof_op_param(cmd->op, "wavelengths") || hyprof_args_given(cmd->args, "wavelengths") ||
        !in->wavelengths)
        return;
    size_t n = in->cube.bands, len = 0;
    char *list = malloc(n * 26 + 1);
    for (size_t b = 0; list && b < n; b++) {
        if (!(in->wavelengths[b] >= 0.0)) { /* NaN: not known for every band */
            free(list);
            return;
        }
        len += (size_t)snprintf(list + len, 26, "%s%.17g", b ? "," : "", in->wavelengths[b]);
    }
    if (list)
        hyprof_args_set(cmd->args, "wavelengths", list);
    free(list);
    if (in->wavelength_units && hyprof_op_param(cmd->op, "wavelength-units") &&
        !hyprof_args_given(cmd->args, "wavelength-units"))
        hyprof_args_set(cmd->args, "wavelength-units", in->wavelength_units);
}

hyprof_ctx_t *cli_make_context(const cli_command_t *cmd, cli_progress_t *pg)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    if (!ctx)
        return NULL;
    const char *backend = hyprof_args_str(cmd->common, "backend");
    hyprof_backend_t b = HYPROF_BACKEND_AUTO;
    hyprof_backend_parse(backend, &b); /* the registry has checked the choice */
    hyprof_ctx_set_backend(ctx, b);
    hyprof_ctx_set_device(ctx, (int)hyprof_args_int(cmd->common, "device"));
    hyprof_ctx_set_threads(ctx, (int)hyprof_args_int(cmd->common, "threads"));
    hyprof_ctx_set_progress(ctx, cli_progress_fn, pg);
    hyprof_ctx_set_log(ctx, cli_log_fn, pg);
    return ctx;
}

/* The memory the run needs before it starts (the input as the file declares
 * it and the output as the operation will make it), and whether OUTPUT's
 * format can hold that output. An operation that works pixel by pixel on an
 * input that does not fit runs by blocks of rows instead (*by_rows). The
 * input's size and the output's band count go to dims (width, height, bands
 * in, bands out; 0 out when unknown before running). */
static int check_memory(cli_command_t *cmd, hyprof_ctx_t *ctx, int *by_rows, size_t dims[4])
{
    size_t w, h, nb, out_bands = 0;
    char err[CLI_MESSAGE_MAX], what[CLI_MESSAGE_MAX];
    hyprof_status_t st = hyprof_raster_probe(cmd->input, &w, &h, &nb, NULL, err, sizeof err);
    if (st != HYPROF_OK) {
        cli_error(cmd->op->name, "%s", err);
        return cli_exit_code(st, 1);
    }
    if (!cmd->op->bands || cmd->op->bands(ctx, cmd->args, nb, &out_bands) != HYPROF_OK)
        out_bands = 0;
    dims[0] = w, dims[1] = h, dims[2] = nb, dims[3] = out_bands;
    size_t in = hyprof_raster_read_bytes(w, h, nb), out = hyprof_raster_read_bytes(w, h, out_bands);
    size_t need = in > SIZE_MAX - out ? SIZE_MAX : in + out;
    snprintf(what, sizeof what, "'%s' (%zux%zu pixels, %zu bands in, %zu out)", cmd->input, w, h,
             nb, out_bands);
    *by_rows = 0;
    if (hyprof_host_memory_check(need, what, err, sizeof err) != HYPROF_OK) {
        *by_rows = cmd->op->pixelwise && cmd->op->bands && cmd->op->pixelwise(cmd->args);
        if (!*by_rows) {
            cli_error(cmd->op->name, "%s", err);
            return EXIT_USAGE;
        }
    }
    return check_format(cmd, cmd->output, HYPROF_OUTPUT_PROFILE, out_bands);
}

/* With --backend auto, a run the CPU finishes before the GPU has even
 * started (hyprof_op_cpu_is_quicker) runs on the CPU: each command line is a
 * new process, which pays the device's start-up again. */
static void settle_backend(const cli_command_t *cmd, hyprof_ctx_t *ctx, cli_progress_t *pg,
                           const size_t dims[4])
{
    double s;
    if (hyprof_ctx_backend(ctx) == HYPROF_BACKEND_AUTO &&
        hyprof_op_cpu_is_quicker(ctx, cmd->op, dims[0], dims[1], dims[2], dims[3], &s)) {
        hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CPU);
        char line[160];
        snprintf(line, sizeof line,
                 "auto runs on the CPU: about %.2f s of work there, less than the GPU's "
                 "%.1f s start-up", s, HYPROF_CUDA_START_S);
        cli_log_fn(pg, HYPROF_LOG_INFO, line);
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The run's stage times as one debug line (HYPROF_LOG=debug), where the
 * time of a command line goes: reading, computing, writing. */
static void trace_stages(cli_progress_t *pg, const double *t)
{
    char line[160];
    snprintf(line, sizeof line, "run s: read %.3f, compute %.3f, write %.3f; total %.3f",
             t[1] - t[0], t[2] - t[1], t[3] - t[2], t[3] - t[0]);
    cli_log_fn(pg, HYPROF_LOG_DEBUG, line);
}

/* OUTPUT opened before the computation, its bands written as the
 * operation finishes them; NULL (and *st OK) when the operation does not
 * declare its band count: then OUTPUT is written after. */
static hyprof_stream_t *open_stream(cli_command_t *cmd, hyprof_ctx_t *ctx,
                                    const hyprof_raster_t *in, const char *tmp,
                                    hyprof_status_t *st, char *err, size_t n)
{
    size_t bands = 0;
    hyprof_stream_t *s = NULL;
    *st = HYPROF_OK;
    if (!cmd->op->bands || cmd->op->bands(ctx, cmd->args, in->cube.bands, &bands) != HYPROF_OK ||
        !bands)
        return NULL;
    *st = hyprof_stream_open(&s, ctx, cmd->output, tmp, in, bands, err, n);
    if (*st == HYPROF_OK)
        hyprof_ctx_set_band_done(ctx, hyprof_stream_band, s);
    return s;
}

/* The result into OUTPUT's temporary: through the stream when its shape is
 * the one the stream was opened for, else written whole. */
static hyprof_status_t finish_output(cli_command_t *cmd, hyprof_ctx_t *ctx, hyprof_stream_t *s,
                                     const hyprof_raster_t *in, const hyprof_result_t *res,
                                     const char *tmp, const hyprof_io_progress_t *io, char *err,
                                     size_t n)
{
    const char *used = hyprof_backend_name(hyprof_ctx_used_backend(ctx));
    const hyprof_cube_t *c = &res->cube;
    if (s && c->width == in->cube.width && c->height == in->cube.height)
        return hyprof_stream_close(s, in, res, cmd->args, used, io, err, n);
    hyprof_status_t st = s ? hyprof_stream_stop(s, err, n) : HYPROF_OK;
    hyprof_stream_abandon(s);
    if (st != HYPROF_OK)
        return st;
    return hyprof_raster_write(cmd->output, tmp, in, res, cmd->args, used, io, err, n);
}

/* The device's context is created on a thread while the input is read: the
 * first CUDA call costs a fraction of a second that would otherwise follow
 * the read. Nothing happens with --backend cpu or without a device. */
typedef struct {
    pthread_t thread;
    int device, started;
} warm_up_t;

static void *warm_up_main(void *arg)
{
    (void)hyprof_cuda_warm_up(((warm_up_t *)arg)->device);
    return NULL;
}

static void warm_up_start(warm_up_t *w, const hyprof_ctx_t *ctx)
{
    w->device = hyprof_ctx_device(ctx);
    w->started = hyprof_ctx_backend(ctx) != HYPROF_BACKEND_CPU &&
                 pthread_create(&w->thread, NULL, warm_up_main, w) == 0;
}

static void warm_up_join(warm_up_t *w)
{
    if (w->started)
        pthread_join(w->thread, NULL);
    w->started = 0;
}

/* Computes the result and writes every output to its temporary. */
static int compute_and_write(cli_command_t *cmd, hyprof_ctx_t *ctx, cli_progress_t *pg,
                             hyprof_raster_t *in, hyprof_result_t *res, cli_outputs_t *outs)
{
    const char *name = cmd->op->name, *param[CLI_MAX_OUTPUTS];
    char err[CLI_MESSAGE_MAX];
    hyprof_io_progress_t io = {cli_progress_fn, pg};
    double t[4] = {now_s(), 0, 0, 0};
    cli_progress_stage(pg, 0.0, READ_END);
    warm_up_t warm;
    warm_up_start(&warm, ctx);
    hyprof_status_t st = hyprof_raster_read(ctx, cmd->input, &io, in, err, sizeof err);
    warm_up_join(&warm);
    if (st != HYPROF_OK) {
        cli_progress_done(pg);
        cli_error(name, "%s", err);
        return cli_exit_code(st, 1);
    }
    t[1] = now_s();
    pass_wavelengths(cmd, in);
    if (!cli_outputs_add(outs, cmd->output, 1) || cli_add_side_files(cmd, outs, param) != 0) {
        cli_error(name, "out of memory");
        return EXIT_RUNTIME;
    }
    hyprof_stream_t *s = open_stream(cmd, ctx, in, outs->f[0].tmp, &st, err, sizeof err);
    if (st != HYPROF_OK) {
        cli_progress_done(pg);
        cli_error(name, "%s", err);
        return st == HYPROF_ERR_ARGUMENT ? EXIT_USAGE : cli_exit_code(st, 0);
    }
    cli_progress_stage(pg, READ_END, COMPUTE_END);
    cli_route_side_files(cmd, outs, param, 1);
    st = hyprof_op_run(ctx, cmd->op, cmd->args, &in->cube, res);
    cli_route_side_files(cmd, outs, param, 0);
    hyprof_ctx_set_band_done(ctx, NULL, NULL);
    if (st != HYPROF_OK) {
        /* A failed write cancels the computation: its error is the run's. */
        hyprof_status_t wst = s ? hyprof_stream_stop(s, err, sizeof err) : HYPROF_OK;
        hyprof_stream_abandon(s);
        cli_progress_done(pg);
        if (wst != HYPROF_OK) {
            cli_error(name, "%s", err);
            return cli_exit_code(wst, 0);
        }
        cli_lib_error(name, hyprof_ctx_last_error(ctx));
        return cli_exit_code(st, 0);
    }
    t[2] = now_s();
    cli_progress_stage(pg, COMPUTE_END, 1.0);
    st = finish_output(cmd, ctx, s, in, res, outs->f[0].tmp, &io, err, sizeof err);
    t[3] = now_s();
    cli_progress_done(pg);
    trace_stages(pg, t);
    if (st != HYPROF_OK) {
        cli_error(name, "%s", err);
        return st == HYPROF_ERR_ARGUMENT ? EXIT_USAGE : cli_exit_code(st, 0);
    }
    return EXIT_OK;
}

int cli_run(cli_command_t *cmd)
{
    const char *name = cmd->op->name;
    int overwrite = hyprof_args_bool(cmd->common, "overwrite");
    int rc = name_beside_output(cmd);
    if (rc == EXIT_OK)
        rc = cli_check_distinct(cmd);
    if (rc == EXIT_OK)
        rc = check_files(cmd, overwrite);
    if (rc != EXIT_OK)
        return rc;
    cli_progress_t pg;
    cli_progress_init(&pg, hyprof_args_str(cmd->common, "progress"));
    hyprof_ctx_t *ctx = cli_make_context(cmd, &pg);
    if (!ctx) {
        cli_error(name, "out of memory");
        return EXIT_RUNTIME;
    }
    cli_cancel_on_signal(ctx);
    hyprof_raster_t in;
    memset(&in, 0, sizeof in);
    hyprof_result_t res;
    hyprof_result_init(&res);
    cli_outputs_t outs = {.n = 0};
    int by_rows = 0;
    size_t dims[4];
    rc = check_memory(cmd, ctx, &by_rows, dims);
    if (rc == EXIT_OK)
        settle_backend(cmd, ctx, &pg, dims);
    if (rc == EXIT_OK && by_rows)
        rc = cli_run_by_rows(cmd, ctx, &pg, &outs, &res);
    else if (rc == EXIT_OK)
        rc = compute_and_write(cmd, ctx, &pg, &in, &res, &outs);
    if (rc == EXIT_OK)
        rc = cli_outputs_commit(&outs, name, overwrite);
    cli_outputs_discard(&outs);
    if (rc == EXIT_OK) {
        printf("%s: wrote %s (%zux%zu, %zu bands, backend %s)\n", name, cmd->output,
               res.cube.width, res.cube.height, res.cube.bands,
               hyprof_backend_name(hyprof_ctx_used_backend(ctx)));
        for (size_t i = 0; i < cmd->op->nparams; i++)
            if (cmd->op->params[i].type == HYPROF_PARAM_FILE_OUT &&
                hyprof_args_str(cmd->args, cmd->op->params[i].name))
                printf("%s: wrote %s\n", name,
                       hyprof_args_str(cmd->args, cmd->op->params[i].name));
    }
    if (cli_interrupted() && rc != EXIT_OK)
        rc = EXIT_CANCELLED;
    cli_cancel_on_signal(NULL);
    hyprof_result_free(&res);
    hyprof_raster_free(&in);
    hyprof_ctx_free(&ctx);
    return rc;
}
