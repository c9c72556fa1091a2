/* hyprof assess: a class map scored against a reference raster or reference
 * points and polygons, its classes paired by name or number (match.c). */
#include "cli.h"
#include "classmap_io.h"
#include "job.h"
#include "match.h"
#include "report.h"
#include "vector_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- assess --------------------------------------------------------------------------------- */

static uint16_t *class_values(const hyprof_cube_t *c)
{
    size_t npix = c->width * c->height;
    uint16_t *v = calloc(npix, sizeof *v);
    for (size_t p = 0; v && p < npix; p++) {
        double x = hyprof_cube_valid(c, p % c->width, p / c->width)
                       ? hyprof_cube_get(c, p % c->width, p / c->width, 0)
                       : 0.0;
        v[p] = x >= 1 && x <= 65535 && x == floor(x) ? (uint16_t)x : 0;
    }
    return v;
}

/* dst's names where it has them, else src's; src's colours where it has them. */
static hyprof_status_t merge_legend(hyprof_legend_t *dst, const hyprof_legend_t *src)
{
    for (size_t v = 0; v < src->n; v++) {
        int named = v < dst->n && dst->names[v];
        const char *name = named ? NULL : src->names[v];
        const uint8_t *rgba = src->rgba[4 * v + 3] ? src->rgba + 4 * v : NULL;
        if ((name || rgba) && hyprof_legend_set(dst, v, name, rgba) != HYPROF_OK)
            return HYPROF_ERR_NOMEM;
    }
    return HYPROF_OK;
}

/* The inputs and results of one assessment. */
typedef struct {
    hyprof_raster_t map, ref;
    const char *ref_path, *ref_field;
    float *burnt, *renumbered;    /* a vector reference rasterised; the class map renumbered */
    hyprof_cube_t ref_cube;       /* the reference as scored */
    uint16_t *map_values, *ref_values;
    /* [v]: v predicted on a labelled reference pixel; [65536 + v]: v in the reference */
    uint8_t *present;
    hyprof_legend_t map_legend, ref_legend, legend, picture;
    cli_match_t match;
    hyprof_assessment_t a;
} assess_t;

static void assess_free(assess_t *s)
{
    hyprof_raster_free(&s->map);
    hyprof_raster_free(&s->ref);
    free(s->burnt);
    free(s->renumbered);
    free(s->map_values);
    free(s->ref_values);
    free(s->present);
    hyprof_legend_free(&s->map_legend);
    hyprof_legend_free(&s->ref_legend);
    hyprof_legend_free(&s->legend);
    hyprof_legend_free(&s->picture);
    cli_match_free(&s->match);
    hyprof_assessment_free(&s->a);
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

/* Class values of both sides, which values occur, and how they pair. */
static int match_classes(job_t *j, assess_t *s)
{
    size_t npix = s->map.cube.width * s->map.cube.height;
    s->map_values = class_values(&s->map.cube);
    s->ref_values = class_values(&s->ref_cube);
    s->present = calloc(2 * 65536, 1);
    if (!s->map_values || !s->ref_values || !s->present) {
        cli_error(j->name, "out of memory");
        return EXIT_RUNTIME;
    }
    size_t labelled = 0;
    for (size_t p = 0; p < npix; p++) {
        s->present[s->map_values[p]] |= s->ref_values[p] != 0;
        s->present[65536 + s->ref_values[p]] = 1;
        labelled += s->ref_values[p] != 0;
    }
    if (!labelled && s->burnt) {
        cli_progress_done(&j->pg);
        cli_error(j->name, "no feature of '%s' covers a pixel centre of the class map '%s' "
                  "(compared in the class map's CRS)", s->ref_path, j->cmd->files[0]);
        return EXIT_USAGE;
    }
    cli_progress_done(&j->pg);
    return cli_match_classes(j->name, hyprof_args_str(j->cmd->args, "match"), j->cmd->files[0],
                             &s->map_legend, s->present, s->ref_path, &s->ref_legend,
                             s->present + 65536, &s->match);
}

/* The report's legend by reference value (by name: the class map's names and
 * colours of the pairs) and the thumbnail's by class-map value. */
static hyprof_status_t report_legends(assess_t *s)
{
    const cli_match_t *m = &s->match;
    if (!m->by_names) {
        hyprof_status_t st = merge_legend(&s->legend, &s->ref_legend);
        if (st == HYPROF_OK)
            st = merge_legend(&s->legend, &s->map_legend);
        if (st == HYPROF_OK)
            st = merge_legend(&s->picture, &s->legend);
        return st;
    }
    if (merge_legend(&s->legend, &s->ref_legend) != HYPROF_OK ||
        merge_legend(&s->picture, &s->map_legend) != HYPROF_OK)
        return HYPROF_ERR_NOMEM;
    for (size_t i = 0; i < m->npairs; i++) {
        size_t mv = (size_t)m->pairs[i].map, rv = (size_t)m->pairs[i].ref;
        const uint8_t *mc = s->map_legend.rgba + 4 * mv;
        const uint8_t *rc = rv < s->ref_legend.n && s->ref_legend.rgba[4 * rv + 3]
                                ? s->ref_legend.rgba + 4 * rv : NULL;
        if (hyprof_legend_set(&s->legend, rv, m->pairs[i].map_name, mc[3] ? mc : NULL) !=
                HYPROF_OK ||
            (!mc[3] && hyprof_legend_set(&s->picture, mv, NULL, rc) != HYPROF_OK))
            return HYPROF_ERR_NOMEM;
    }
    return HYPROF_OK;
}

/* Scores the class map (renumbered into the reference's values by name). */
static int score(job_t *j, assess_t *s)
{
    hyprof_cube_t map = s->map.cube;
    if (s->match.by_names) {
        size_t npix = map.width * map.height;
        if (!(s->renumbered = malloc(npix * sizeof *s->renumbered))) {
            cli_error(j->name, "out of memory");
            return EXIT_RUNTIME;
        }
        for (size_t p = 0; p < npix; p++)
            s->renumbered[p] = (float)s->match.map_to_ref[s->map_values[p]];
        map = hyprof_cube_bsq(s->renumbered, HYPROF_FLOAT32, map.width, map.height, 1);
    }
    hyprof_status_t st = hyprof_assess(j->ctx, &map, &s->ref_cube, &s->a);
    if (st != HYPROF_OK)
        return lib_fail(j, st);
    if (report_legends(s) != HYPROF_OK) {
        cli_error(j->name, "out of memory");
        return EXIT_RUNTIME;
    }
    if (s->match.fallback)
        fprintf(stderr, "hyprof %s: warning: %s\n", j->name, s->match.how);
    for (size_t i = 0; i < s->match.nnotes; i++)
        fprintf(stderr, "hyprof %s: warning: %s\n", j->name, s->match.notes[i]);
    return EXIT_OK;
}

static int assess_report(job_t *j, assess_t *s)
{
    const char *html = hyprof_args_str(j->cmd->args, "html");
    int json = hyprof_args_bool(j->cmd->args, "json");
    cli_report_t r = {&s->a, &s->legend, &s->match, j->cmd->files[0], s->ref_path,
                      s->burnt ? s->ref_field : NULL};
    if (json)
        cli_assess_json(stdout, &r);
    else
        cli_assess_text(stdout, &r);
    if (!html)
        return EXIT_OK;
    const char *tmp = job_output(j, html, 0);
    if (!tmp)
        return EXIT_RUNTIME;
    hyprof_status_t st = cli_assess_html(html, tmp, &r, &s->picture, s->map_values,
                                         s->map.cube.width, s->map.cube.height, j->err,
                                         sizeof j->err);
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
    if ((rc = read_reference(j, &s)) == EXIT_OK && (rc = match_classes(j, &s)) == EXIT_OK &&
        (rc = score(j, &s)) == EXIT_OK)
        rc = assess_report(j, &s);
done:
    assess_free(&s);
    return rc;
}
