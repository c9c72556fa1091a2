/* hyprof assess: a class map scored against a reference raster or reference
 * points and polygons, its classes paired by name or number and
 * scored by the library (hyprof_assess_classes), which also renders the HTML
 * report; this file reads the inputs and writes the reports. */
#include "cli.h"
#include "classmap_io.h"
#include "job.h"
#include "report.h"
#include "vector_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The inputs and results of one assessment. */
typedef struct {
    hyprof_raster_t map, ref;
    const char *ref_path, *ref_field;
    float *burnt;                 /* a vector reference rasterised */
    hyprof_cube_t ref_cube;       /* the reference as scored */
    hyprof_legend_t map_legend, ref_legend;
    hyprof_class_assessment_t r;  /* scores, pairing and the report's legends */
} assess_t;

static void assess_free(assess_t *s)
{
    hyprof_raster_free(&s->map);
    hyprof_raster_free(&s->ref);
    free(s->burnt);
    hyprof_legend_free(&s->map_legend);
    hyprof_legend_free(&s->ref_legend);
    hyprof_class_assessment_free(&s->r);
}

/* --reference RASTER or --reference-vector VECTOR --class-field FIELD [--layer]. */
static int reference_options(job_t *j, assess_t *s)
{
    const hyprof_args_t *args = j->cmd->args;
    const char *vec = hyprof_args_str(args, "reference-vector");
    s->ref_path = vec ? vec : hyprof_args_str(args, "reference");
    s->ref_field = hyprof_args_str(args, "class-field");
    if (!!hyprof_args_str(args, "reference") == !!vec) {
        cli_error(j->name, "give either --reference RASTER or --reference-vector VECTOR "
                  "--class-field FIELD");
        return EXIT_USAGE;
    }
    if (vec && !s->ref_field) {
        cli_error(j->name, "--reference-vector needs --class-field (the attribute holding the "
                  "class)");
        return EXIT_USAGE;
    }
    if (!vec && (s->ref_field || hyprof_args_str(args, "layer"))) {
        cli_error(j->name, "--%s applies to --reference-vector only",
                  s->ref_field ? "class-field" : "layer");
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* The reference on the class map's grid: read and checked, or rasterised. */
static int read_reference(job_t *j, assess_t *s)
{
    hyprof_status_t st;
    if (!hyprof_args_str(j->cmd->args, "reference-vector")) {
        if ((st = read_raster(j, s->ref_path, &s->ref, 0.45, 0.9)) != HYPROF_OK)
            return io_fail(j, st, 1);
        if (grid_mismatch(j, &s->map, &s->ref))
            return EXIT_USAGE;
        s->ref_cube = s->ref.cube;
        if ((st = hyprof_legend_read(s->ref_path, &s->ref_legend, j->err, sizeof j->err)) !=
            HYPROF_OK)
            return io_fail(j, st, 1);
        return EXIT_OK;
    }
    size_t w = s->map.cube.width, h = s->map.cube.height;
    if (!(s->burnt = calloc(w * h, sizeof *s->burnt))) {
        cli_error(j->name, "out of memory");
        return EXIT_RUNTIME;
    }
    cli_progress_stage(&j->pg, 0.45, 0.9);
    st = hyprof_rasterize_samples(s->ref_path, hyprof_args_str(j->cmd->args, "layer"),
                                  s->ref_field, &s->map, s->burnt, &s->ref_legend, j->err,
                                  sizeof j->err);
    if (st != HYPROF_OK)
        return io_fail(j, st, 1);
    s->ref_cube = hyprof_cube_bsq(s->burnt, HYPROF_FLOAT32, w, h, 1);
    return EXIT_OK;
}

static hyprof_class_legend_t legend_view(const hyprof_legend_t *l)
{
    return (hyprof_class_legend_t){l->n, (const char *const *)l->names, l->rgba};
}

static hyprof_match_mode_t match_mode(const char *mode)
{
    return strcmp(mode, "names") == 0     ? HYPROF_MATCH_NAMES
           : strcmp(mode, "numbers") == 0 ? HYPROF_MATCH_NUMBERS
                                          : HYPROF_MATCH_AUTO;
}

/* Pairs the classes by name or number (--match) and scores the class map. */
static int score(job_t *j, assess_t *s)
{
    hyprof_class_legend_t ml = legend_view(&s->map_legend), rl = legend_view(&s->ref_legend);
    cli_progress_done(&j->pg);
    hyprof_status_t st = hyprof_assess_classes(
        j->ctx, &s->map.cube, &s->ref_cube, &ml, &rl,
        match_mode(hyprof_args_str(j->cmd->args, "match")), j->cmd->files[0], s->ref_path, &s->r);
    if (st != HYPROF_OK && !s->r.labelled && s->burnt) {
        cli_error(j->name, "no feature of '%s' covers a pixel centre of the class map '%s' "
                  "(compared in the class map's CRS)", s->ref_path, j->cmd->files[0]);
        return EXIT_USAGE;
    }
    if (st == HYPROF_ERR_ARGUMENT) {
        const char *m = hyprof_ctx_last_error(j->ctx);
        size_t k = strlen(j->name);
        if (strncmp(m, j->name, k) == 0 && m[k] == ':' && m[k + 1] == ' ')
            m += k + 2;
        cli_error(j->name, "--match names: %s", m);
        return EXIT_USAGE;
    }
    if (st != HYPROF_OK)
        return lib_fail(j, st);
    if (s->r.match.fallback)
        fprintf(stderr, "hyprof %s: warning: %s\n", j->name, s->r.match.how);
    for (size_t i = 0; i < s->r.match.nnotes; i++)
        fprintf(stderr, "hyprof %s: warning: %s\n", j->name, s->r.match.notes[i]);
    return EXIT_OK;
}

static int assess_report(job_t *j, assess_t *s)
{
    const char *html = hyprof_args_str(j->cmd->args, "html");
    int json = hyprof_args_bool(j->cmd->args, "json");
    cli_report_t r = {&s->r, j->cmd->files[0], s->ref_path, s->burnt ? s->ref_field : NULL};
    if (json)
        cli_assess_json(stdout, &r);
    else
        cli_assess_text(stdout, &r);
    if (!html)
        return EXIT_OK;
    const char *tmp = job_output(j, html, 0);
    if (!tmp)
        return EXIT_RUNTIME;
    char *page = NULL;
    size_t len = 0;
    hyprof_status_t st = hyprof_assess_html(j->ctx, &s->r, r.map_path, r.ref_path, r.ref_field,
                                            &page, &len);
    if (st != HYPROF_OK)
        return lib_fail(j, st);
    st = cli_write_text(html, tmp, page, len, j->err, sizeof j->err);
    free(page);
    if (st != HYPROF_OK)
        return io_fail(j, st, 0);
    int rc = job_commit(j);
    if (rc == EXIT_OK && !json)
        printf("%s: wrote %s\n", j->name, html);
    return rc;
}

int run_assess(job_t *j)
{
    assess_t s;
    memset(&s, 0, sizeof s);
    hyprof_status_t st;
    int rc = reference_options(j, &s);
    if (rc == EXIT_OK)
        rc = need_integers(j, "CLASSMAP", j->cmd->files[0]);
    if (rc == EXIT_OK && !s.ref_field)
        rc = need_integers(j, "--reference", s.ref_path);
    if (rc != EXIT_OK)
        goto done;
    if ((st = read_raster(j, j->cmd->files[0], &s.map, 0.0, 0.45)) != HYPROF_OK ||
        (st = hyprof_legend_read(j->cmd->files[0], &s.map_legend, j->err, sizeof j->err)) !=
            HYPROF_OK) {
        rc = io_fail(j, st, 1);
        goto done;
    }
    if ((rc = read_reference(j, &s)) == EXIT_OK && (rc = score(j, &s)) == EXIT_OK)
        rc = assess_report(j, &s);
done:
    assess_free(&s);
    return rc;
}
