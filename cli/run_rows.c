/* An operation that works pixel by pixel (the registry's `pixelwise`) on an
 * input larger than the memory: blocks of rows are read, computed and
 * written one after the other, so the memory holds one block of the input
 * and of the output. The output is the one a single run would write (the
 * band names and metadata are the first block's, the same for every block).
 *
 * The operation reads its files (a model) again for every block: a file that
 * changes meanwhile fails the run, as a mix of two models would be no run's
 * output. Its side files (unmix's endmember spectra, copied from the model)
 * are the same for every block; each block writes them to their temporaries,
 * committed with OUTPUT. */
#include "cli.h"
#include "raster_io.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Blocks are multiples of this many rows when they can be: the output's tile
 * height, so that every block completes its tiles and GTiff writes each once. */
#define ROWS_ALIGN 256

/* The bytes a row takes: the input's bands and mask, the result's, and a
 * band of the writer's buffer. */
static size_t row_bytes(size_t w, size_t in_bands, size_t out_bands)
{
    return w * (in_bands * sizeof(float) + 1 + out_bands * sizeof(float) + 1 + sizeof(float));
}

size_t cli_plan_blocks(cli_progress_t *pg, const char *op, const char *input, size_t w,
                       size_t h, size_t in_bands, size_t out_bands)
{
    size_t per_row = row_bytes(w, in_bands, out_bands);
    size_t rows = hyprof_host_memory_available() / 2 / (per_row ? per_row : 1);
    if (rows >= ROWS_ALIGN)
        rows -= rows % ROWS_ALIGN;
    rows = rows < h ? rows : h;
    if (rows == 0) {
        cli_error(op, "'%s' (%zux%zu pixels, %zu bands) does not fit in memory, even a row "
                  "at a time (%.1f MiB a row)", input, w, h, in_bands,
                  (double)per_row / 1048576.0);
        return 0;
    }
    char line[CLI_MESSAGE_MAX];
    snprintf(line, sizeof line, "'%s' does not fit in memory: %zu rows at a time", input, rows);
    cli_log_fn(pg, HYPROF_LOG_INFO, line);
    return rows;
}

int cli_run_blocks(cli_progress_t *pg, const char *op, size_t h, size_t rows,
                   int (*block)(void *user, size_t y0, size_t n), void *user)
{
    for (size_t y0 = 0; y0 < h; y0 += rows) {
        size_t n = h - y0 < rows ? h - y0 : rows;
        if (cli_interrupted()) {
            cli_error(op, "cancelled; no output written");
            return EXIT_CANCELLED;
        }
        cli_progress_stage(pg, (double)y0 / (double)h, (double)(y0 + n) / (double)h);
        int rc = block(user, y0, n);
        if (rc != EXIT_OK)
            return rc;
    }
    return EXIT_OK;
}

/* The files the operation reads (FILE_IN parameters) as they are now. */
typedef struct {
    const char *path;
    struct stat sb;
} file_state_t;

static size_t snapshot_files(const cli_command_t *cmd, file_state_t *f, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < cmd->op->nparams && n < cap; i++) {
        const hyprof_param_t *p = &cmd->op->params[i];
        const char *v = hyprof_args_str(cmd->args, p->name);
        if (p->type == HYPROF_PARAM_FILE_IN && v && stat(v, &f[n].sb) == 0)
            f[n++].path = v;
    }
    return n;
}

/* The first file that is no longer what it was, or NULL. */
static const char *changed_file(const file_state_t *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct stat now;
        if (stat(f[i].path, &now) != 0 || now.st_ino != f[i].sb.st_ino ||
            now.st_dev != f[i].sb.st_dev || now.st_size != f[i].sb.st_size ||
            now.st_mtim.tv_sec != f[i].sb.st_mtim.tv_sec ||
            now.st_mtim.tv_nsec != f[i].sb.st_mtim.tv_nsec)
            return f[i].path;
    }
    return NULL;
}

typedef struct {
    cli_command_t *cmd;
    hyprof_ctx_t *ctx;
    cli_progress_t *pg;
    hyprof_rows_t *rows;
    const hyprof_raster_t *header;
    hyprof_rows_out_t *out;
    hyprof_result_t *first; /* the first block's result, its cube freed */
    cli_outputs_t *outs;
    const char *param[CLI_MAX_OUTPUTS]; /* the side files' parameters (cli_add_side_files) */
    file_state_t files[8];
    size_t nfiles;
} by_rows_t;

/* The result's band names and metadata without its pixels (the band count
 * stays: hyprof_result_free frees that many names). */
static void drop_pixels(hyprof_result_t *res)
{
    size_t bands = res->cube.bands;
    hyprof_cube_free(&res->cube);
    res->cube.bands = bands;
}

/* Rows [y0, y0+n): read, computed, written (cli_run_blocks' block). */
static int run_block(void *user, size_t y0, size_t n)
{
    by_rows_t *r = user;
    const char *name = r->cmd->op->name, *moved;
    char err[CLI_MESSAGE_MAX];
    hyprof_cube_t block;
    memset(&block, 0, sizeof block);
    hyprof_result_t res;
    hyprof_result_init(&res);
    hyprof_status_t st = hyprof_rows_read(r->rows, y0, n, &block, err, sizeof err);
    if (st != HYPROF_OK) {
        cli_error(name, "%s", err);
        return cli_exit_code(st, 1);
    }
    cli_route_side_files(r->cmd, r->outs, r->param, 1);
    st = hyprof_op_run(r->ctx, r->cmd->op, r->cmd->args, &block, &res);
    cli_route_side_files(r->cmd, r->outs, r->param, 0);
    hyprof_cube_free(&block);
    if (st != HYPROF_OK) {
        cli_lib_error(name, hyprof_ctx_last_error(r->ctx));
        hyprof_result_free(&res);
        return cli_exit_code(st, 0);
    }
    if ((moved = changed_file(r->files, r->nfiles))) {
        cli_error(name, "'%s' changed while the run read it, block by block; run again",
                  moved);
        hyprof_result_free(&res);
        return EXIT_RUNTIME;
    }
    st = hyprof_rows_out_put(r->out, y0, &res.cube, err, sizeof err);
    if (st == HYPROF_OK && y0 == 0) {
        drop_pixels(&res);
        *r->first = res;
        hyprof_result_init(&res);
    }
    hyprof_result_free(&res);
    if (st != HYPROF_OK) {
        cli_error(name, "%s", err);
        return cli_exit_code(st, 0);
    }
    return EXIT_OK;
}

int cli_run_by_rows(cli_command_t *cmd, hyprof_ctx_t *ctx, cli_progress_t *pg,
                    cli_outputs_t *outs, hyprof_result_t *first)
{
    const char *name = cmd->op->name;
    char err[CLI_MESSAGE_MAX];
    hyprof_raster_t header;
    hyprof_rows_t *rows = NULL;
    hyprof_status_t st = hyprof_rows_open(cmd->input, &rows, &header, err, sizeof err);
    if (st != HYPROF_OK) {
        cli_error(name, "%s", err);
        return cli_exit_code(st, 1);
    }
    size_t w = header.cube.width, h = header.cube.height, bands = 0;
    int rc = EXIT_OK;
    if (cmd->op->bands(ctx, cmd->args, header.cube.bands, &bands) != HYPROF_OK) {
        cli_lib_error(name, hyprof_ctx_last_error(ctx));
        rc = EXIT_USAGE;
    }
    size_t nrows = rc == EXIT_OK ? cli_plan_blocks(pg, name, cmd->input, w, h,
                                                    header.cube.bands, bands)
                                 : 0;
    if (rc == EXIT_OK && nrows == 0)
        rc = EXIT_USAGE;
    by_rows_t r = {cmd, ctx, pg, rows, &header, NULL, first, outs, {NULL}, {{0}}, 0};
    const char *tmp = rc == EXIT_OK ? cli_outputs_add(outs, cmd->output, 1) : NULL;
    if (rc == EXIT_OK && (!tmp || cli_add_side_files(cmd, outs, r.param) != 0)) {
        cli_error(name, "out of memory");
        rc = EXIT_RUNTIME;
    }
    hyprof_rows_out_t out;
    memset(&out, 0, sizeof out);
    if (rc == EXIT_OK &&
        (st = hyprof_rows_out_create(&out, cmd->output, tmp, &header, bands, err, sizeof err)) !=
            HYPROF_OK) {
        cli_error(name, "%s", err);
        rc = cli_exit_code(st, 0);
    }
    r.out = &out;
    r.nfiles = snapshot_files(cmd, r.files, sizeof r.files / sizeof *r.files);
    if (rc == EXIT_OK)
        rc = cli_run_blocks(pg, name, h, nrows, run_block, &r);
    hyprof_io_progress_t io = {cli_progress_fn, pg};
    if (rc == EXIT_OK) {
        cli_progress_stage(pg, 1.0, 1.0);
        st = hyprof_rows_out_finish(&out, &header, first, cmd->args,
                                    hyprof_backend_name(hyprof_ctx_used_backend(ctx)), &io, err,
                                    sizeof err);
        if (st != HYPROF_OK) {
            cli_error(name, "%s", err);
            rc = cli_exit_code(st, 0);
        }
    }
    hyprof_rows_out_abandon(&out);
    cli_progress_done(pg);
    first->cube.width = w; /* the shape written, for the caller's report */
    first->cube.height = h;
    hyprof_rows_close(&rows);
    hyprof_raster_free(&header);
    return rc;
}
