/* The classification operations: train, classify, assess, split. Their file
 * arguments are the registry's positionals; the library computes, this file
 * reads, checks grids, writes and reports. */
#include "cli.h"
#include "classmap_io.h"
#include "report.h"
#include "vector_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
static int check_positionals(const cli_command_t *cmd, int overwrite)
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

static int job_start(job_t *j, cli_command_t *cmd)
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

static int io_fail(job_t *j, hyprof_status_t st, int reading);

/* Renames every output written so far onto its target, or none. */
static int job_commit(job_t *j)
{
    cli_progress_done(&j->pg);
    return cli_outputs_commit(&j->outs, j->name, j->overwrite);
}

/* Removes the temporaries of a run that did not commit. */
static int job_end(job_t *j, int rc)
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
static const char *job_output(job_t *j, const char *path, int raster)
{
    const char *tmp = cli_outputs_add(&j->outs, path, raster);
    if (!tmp)
        cli_error(j->name, "out of memory");
    return tmp;
}

/* Class maps and references hold class numbers: a float raster is refused. */
static int need_integers(job_t *j, const char *what, const char *path)
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
static int lib_fail(job_t *j, hyprof_status_t st)
{
    cli_progress_done(&j->pg);
    cli_lib_error(j->name, hyprof_ctx_last_error(j->ctx));
    return cli_exit_code(st, 0);
}

/* A failed read or write: the message in j->err. */
static int io_fail(job_t *j, hyprof_status_t st, int reading)
{
    cli_progress_done(&j->pg);
    cli_error(j->name, "%s", j->err);
    return st == HYPROF_ERR_ARGUMENT ? EXIT_USAGE : cli_exit_code(st, reading);
}

static hyprof_status_t read_raster(job_t *j, const char *path, hyprof_raster_t *r, double lo,
                                   double hi)
{
    cli_progress_stage(&j->pg, lo, hi);
    return hyprof_raster_read(j->ctx, path, &j->io, r, j->err, sizeof j->err);
}

static int grid_mismatch(job_t *j, const hyprof_raster_t *a, const hyprof_raster_t *b)
{
    char why[768];
    if (hyprof_same_grid(a, b, why, sizeof why))
        return 0;
    cli_progress_done(&j->pg);
    cli_error(j->name, "not on the same grid: %s", why);
    return 1;
}

/* ---- train ------------------------------------------------------------------------------ */

typedef struct {
    double *c, *gamma;
    size_t nc, ng;
} grid_t;

/* "C=1,10,gamma=0.5,2": a key starts a list, bare numbers continue it. */
static int parse_grid(const char *text, grid_t *g, char *err, size_t n)
{
    memset(g, 0, sizeof *g);
    if (strcmp(text, "default") == 0)
        return 0;
    size_t len = strlen(text);
    g->c = malloc((len + 1) * sizeof *g->c);
    g->gamma = malloc((len + 1) * sizeof *g->gamma);
    if (!g->c || !g->gamma)
        return snprintf(err, n, "out of memory"), -1;
    double *list = NULL;
    size_t *count = NULL;
    const char *s = text;
    while (*s) {
        size_t tl = strcspn(s, ",");
        const char *v = s;
        if (strncasecmp(s, "C=", 2) == 0)
            list = g->c, count = &g->nc, v = s + 2;
        else if (strncasecmp(s, "gamma=", 6) == 0)
            list = g->gamma, count = &g->ng, v = s + 6;
        char *end;
        double x = strtod(v, &end);
        if (!list || end == v || end != s + tl || !(x > 0) || !isfinite(x))
            return snprintf(err, n, "--grid: bad item '%.*s' in '%s' (expected 'default' or "
                            "'C=1,10,gamma=0.5,2': positive numbers)", (int)tl, s, text), -1;
        list[(*count)++] = x;
        s += tl;
        if (*s == ',')
            s++;
    }
    if (!g->nc || !g->ng)
        return snprintf(err, n, "--grid '%s': give at least one C and one gamma", text), -1;
    return 0;
}

/* Labels on the features' grid: --labels (checked) or --samples (rasterised). */
static int train_labels(job_t *j, const hyprof_raster_t *feat, hyprof_raster_t *labels,
                        float **burnt, hyprof_legend_t *legend)
{
    const char *lpath = hyprof_args_str(j->cmd->args, "labels");
    const char *spath = hyprof_args_str(j->cmd->args, "samples");
    const char *field = hyprof_args_str(j->cmd->args, "class-field");
    if (!!lpath == !!spath) {
        cli_error(j->name, "give either --labels RASTER or --samples VECTOR --class-field NAME");
        return EXIT_USAGE;
    }
    hyprof_status_t st;
    if (lpath) {
        if ((st = read_raster(j, lpath, labels, 0.1, 0.15)) != HYPROF_OK)
            return io_fail(j, st, 1);
        if (grid_mismatch(j, feat, labels))
            return EXIT_USAGE;
        if ((st = hyprof_legend_read(lpath, legend, j->err, sizeof j->err)) != HYPROF_OK)
            return io_fail(j, st, 1);
        return EXIT_OK;
    }
    if (!field) {
        cli_error(j->name, "--samples needs --class-field (the attribute holding the class)");
        return EXIT_USAGE;
    }
    size_t npix = feat->cube.width * feat->cube.height;
    if (!(*burnt = calloc(npix, sizeof **burnt))) {
        cli_error(j->name, "out of memory");
        return EXIT_RUNTIME;
    }
    st = hyprof_rasterize_samples(spath, hyprof_args_str(j->cmd->args, "layer"), field, feat,
                                  *burnt, legend, j->err, sizeof j->err);
    if (st != HYPROF_OK)
        return io_fail(j, st, 1);
    labels->cube = hyprof_cube_bsq(*burnt, HYPROF_FLOAT32, feat->cube.width, feat->cube.height, 1);
    return EXIT_OK;
}

static void report_model(job_t *j, const hyprof_classifier_t *m, const char *path)
{
    int svm = hyprof_classifier_kind(m) == HYPROF_CLASSIFIER_SVM;
    printf("%s: wrote %s (%s, %zu classes, %zu bands, %zu training pixels", j->name, path,
           svm ? "svm" : "elm", hyprof_classifier_classes(m), hyprof_classifier_bands(m),
           hyprof_classifier_train_pixels(m));
    if (svm)
        printf(", C=%g, gamma=%g, %zu support vectors", hyprof_classifier_c(m),
               hyprof_classifier_gamma(m), hyprof_classifier_size(m));
    else
        printf(", %zu neurons", hyprof_classifier_size(m));
    if (!isnan(hyprof_classifier_cv_accuracy(m)))
        printf(", cross-validation accuracy %.4f", hyprof_classifier_cv_accuracy(m));
    printf(")\n");
}

static int run_train(job_t *j)
{
    const hyprof_args_t *args = j->cmd->args;
    hyprof_raster_t feat, labels;
    memset(&feat, 0, sizeof feat);
    memset(&labels, 0, sizeof labels);
    hyprof_legend_t legend = {0, NULL, NULL};
    float *burnt = NULL;
    hyprof_classifier_t *model = NULL;
    grid_t grid;
    int rc = EXIT_OK;
    hyprof_status_t st;
    if (parse_grid(hyprof_args_str(args, "grid"), &grid, j->err, sizeof j->err) != 0) {
        cli_error(j->name, "%s", j->err);
        rc = EXIT_USAGE;
        goto done;
    }
    if ((st = read_raster(j, j->cmd->files[0], &feat, 0.0, 0.1)) != HYPROF_OK) {
        rc = io_fail(j, st, 1);
        goto done;
    }
    if ((rc = train_labels(j, &feat, &labels, &burnt, &legend)) != EXIT_OK)
        goto done;
    hyprof_train_params_t p;
    hyprof_train_params_default(&p);
    p.kind = strcmp(hyprof_args_str(args, "classifier"), "elm") == 0 ? HYPROF_CLASSIFIER_ELM
                                                                       : HYPROF_CLASSIFIER_SVM;
    p.scale = strcmp(hyprof_args_str(args, "scale"), "none") != 0;
    if (grid.nc) {
        p.c = grid.c, p.n_c = grid.nc;
        p.gamma = grid.gamma, p.n_gamma = grid.ng;
    }
    p.folds = (int)hyprof_args_int(args, "folds");
    p.seed = (uint64_t)hyprof_args_int(args, "seed");
    p.neurons = (size_t)hyprof_args_int(args, "neurons");
    p.elm_c = hyprof_args_float(args, "elm-c");
    p.band_names = (const char *const *)feat.band_names;
    p.legend.n = legend.n;
    p.legend.names = (const char *const *)legend.names;
    p.legend.rgba = legend.rgba;
    cli_progress_stage(&j->pg, 0.15, 0.98);
    if ((st = hyprof_train(j->ctx, &feat.cube, &labels.cube, &p, &model)) != HYPROF_OK) {
        rc = lib_fail(j, st);
        goto done;
    }
    const char *tmp = job_output(j, j->cmd->files[1], 0);
    if (!tmp) {
        rc = EXIT_RUNTIME;
        goto done;
    }
    if ((st = hyprof_classifier_save(j->ctx, model, tmp)) != HYPROF_OK) {
        rc = lib_fail(j, st);
        goto done;
    }
    if ((rc = job_commit(j)) == EXIT_OK)
        report_model(j, model, j->cmd->files[1]);
done:
    hyprof_classifier_free(&model);
    if (burnt)
        labels.cube.data = NULL;
    free(burnt);
    hyprof_raster_free(&labels);
    hyprof_raster_free(&feat);
    hyprof_legend_free(&legend);
    free(grid.c);
    free(grid.gamma);
    return rc;
}

/* ---- classify ------------------------------------------------------------------------------ */

static hyprof_status_t model_legend(const hyprof_classifier_t *m, hyprof_legend_t *l)
{
    memset(l, 0, sizeof *l);
    for (size_t k = 0; k < hyprof_classifier_classes(m); k++) {
        hyprof_status_t st = hyprof_legend_set(l, (size_t)hyprof_classifier_class_value(m, k),
                                               hyprof_classifier_class_name(m, k),
                                               hyprof_classifier_class_rgba(m, k));
        if (st != HYPROF_OK)
            return st;
    }
    return HYPROF_OK;
}

/* --probabilities: one float32 band per class, named after it. */
static hyprof_status_t write_scores(job_t *j, const hyprof_raster_t *in,
                                    const hyprof_classifier_t *m, hyprof_cube_t *scores,
                                    const char *path, const char *tmp, const char *backend)
{
    hyprof_result_t res;
    hyprof_result_init(&res);
    res.cube = *scores;
    res.band_names = calloc(scores->bands, sizeof *res.band_names);
    hyprof_status_t st = res.band_names ? HYPROF_OK : HYPROF_ERR_NOMEM;
    for (size_t k = 0; st == HYPROF_OK && k < scores->bands; k++)
        st = hyprof_result_set_band_name(&res, k, "%s", hyprof_classifier_class_name(m, k));
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(&res, "scores",
                                    hyprof_classifier_kind(m) == HYPROF_CLASSIFIER_SVM
                                        ? "fraction of one-vs-one votes won by the class"
                                        : "softmax of the ELM output layer");
    if (st == HYPROF_OK)
        st = hyprof_raster_write(path, tmp, in, &res, j->cmd->args, backend, &j->io, j->err,
                                 sizeof j->err);
    else
        snprintf(j->err, sizeof j->err, "out of memory");
    res.cube.owns = 0; /* the names and items go, the caller frees the cube */
    hyprof_result_free(&res);
    return st;
}

static int run_classify(job_t *j)
{
    const char *model_path = hyprof_args_str(j->cmd->args, "model");
    const char *prob = hyprof_args_str(j->cmd->args, "probabilities");
    const char *out = j->cmd->files[1];
    hyprof_classifier_t *m = NULL;
    hyprof_raster_t in;
    memset(&in, 0, sizeof in);
    hyprof_cube_t map, scores;
    memset(&map, 0, sizeof map);
    memset(&scores, 0, sizeof scores);
    hyprof_legend_t legend = {0, NULL, NULL};
    int rc = EXIT_OK;
    hyprof_status_t st = hyprof_classifier_load(j->ctx, model_path, &m);
    if (st != HYPROF_OK) {
        rc = lib_fail(j, st);
        goto done;
    }
    if ((st = read_raster(j, j->cmd->files[0], &in, 0.0, 0.1)) != HYPROF_OK) {
        rc = io_fail(j, st, 1);
        goto done;
    }
    cli_progress_stage(&j->pg, 0.1, 0.9);
    if ((st = hyprof_classify(j->ctx, m, &in.cube, &map, prob ? &scores : NULL)) != HYPROF_OK) {
        rc = lib_fail(j, st);
        goto done;
    }
    cli_progress_stage(&j->pg, 0.9, 1.0);
    const char *backend = hyprof_backend_name(hyprof_ctx_used_backend(j->ctx));
    const char *map_tmp = job_output(j, out, 1), *prob_tmp = prob ? job_output(j, prob, 1) : NULL;
    if (!map_tmp || (prob && !prob_tmp)) {
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (prob && (st = write_scores(j, &in, m, &scores, prob, prob_tmp, backend)) != HYPROF_OK) {
        rc = io_fail(j, st, 0);
        goto done;
    }
    char model_item[1100], backend_item[64], kind_item[64];
    snprintf(model_item, sizeof model_item, "HYPROF_MODEL=%s", model_path);
    snprintf(backend_item, sizeof backend_item, "HYPROF_BACKEND=%s", backend);
    snprintf(kind_item, sizeof kind_item, "HYPROF_CLASSIFIER=%s",
             hyprof_classifier_kind(m) == HYPROF_CLASSIFIER_SVM ? "svm" : "elm");
    char *meta[] = {"HYPROF_OPERATION=classify", model_item, backend_item, kind_item, NULL};
    if ((st = model_legend(m, &legend)) == HYPROF_OK)
        st = hyprof_classmap_write(out, map_tmp, &in, map.data, &legend, meta, j->err,
                                   sizeof j->err);
    if (st != HYPROF_OK) {
        rc = io_fail(j, st, 0);
        goto done;
    }
    if ((rc = job_commit(j)) != EXIT_OK)
        goto done;
    printf("%s: wrote %s (%zux%zu, %zu classes, backend %s)\n", j->name, out, in.cube.width,
           in.cube.height, hyprof_classifier_classes(m), backend);
    if (prob)
        printf("%s: wrote %s\n", j->name, prob);
done:
    hyprof_classifier_free(&m);
    hyprof_cube_free(&map);
    hyprof_cube_free(&scores);
    hyprof_raster_free(&in);
    hyprof_legend_free(&legend);
    return rc;
}

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

static int run_assess(job_t *j)
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

/* ---- split ------------------------------------------------------------------------ */

static void count_classes(const uint16_t *v, size_t npix, char *out, size_t n)
{
    size_t *count = calloc(65536, sizeof *count);
    out[0] = '\0';
    if (!count)
        return;
    for (size_t p = 0; p < npix; p++)
        count[v[p]]++;
    size_t used = 0;
    for (size_t c = 1; c < 65536 && used + 16 < n; c++)
        if (count[c])
            used += (size_t)snprintf(out + used, n - used, "%s%zu:%zu", used ? "," : "", c,
                                     count[c]);
    free(count);
}

static int split_counts(job_t *j, double *per_class, const size_t **counts, size_t *ncounts)
{
    int preset = strcmp(hyprof_args_str(j->cmd->args, "preset"), "none") != 0;
    int given = hyprof_args_given(j->cmd->args, "per-class");
    if (preset == given) {
        cli_error(j->name, "give either --per-class N|FRACTION or --preset eadp-table1");
        return EXIT_USAGE;
    }
    *per_class = given ? hyprof_args_float(j->cmd->args, "per-class") : 0.0;
    *counts = preset ? hyprof_split_preset_eadp_table1(ncounts) : NULL;
    return EXIT_OK;
}

static int write_split(job_t *j, const hyprof_raster_t *ref, const hyprof_legend_t *legend,
                       uint16_t *train, uint16_t *test)
{
    size_t npix = ref->cube.width * ref->cube.height;
    char seed[64], counts_tr[4096], counts_te[4096], tr_item[4200], te_item[4200], src[1100];
    snprintf(seed, sizeof seed, "SPLIT_SEED=%ld", hyprof_args_int(j->cmd->args, "seed"));
    count_classes(train, npix, counts_tr, sizeof counts_tr);
    count_classes(test, npix, counts_te, sizeof counts_te);
    snprintf(tr_item, sizeof tr_item, "TRAIN_COUNTS=%s", counts_tr);
    snprintf(te_item, sizeof te_item, "TEST_COUNTS=%s", counts_te);
    snprintf(src, sizeof src, "HYPROF_REFERENCE=%s", ref->path);
    char *meta[] = {"HYPROF_OPERATION=split",
                    "SPLIT_METHOD=per class in increasing order: u=numpy.random.default_rng("
                    "SPLIT_SEED).random(n_c) over the class's pixels in row-major order; the "
                    "pixels with the smallest u train",
                    seed, tr_item, te_item, src, NULL};
    const char *tr_tmp = job_output(j, j->cmd->files[0], 1);
    const char *te_tmp = tr_tmp ? job_output(j, j->cmd->files[1], 1) : NULL;
    if (!te_tmp)
        return EXIT_RUNTIME;
    hyprof_status_t st = hyprof_classmap_write(j->cmd->files[0], tr_tmp, ref, train, legend,
                                               meta, j->err, sizeof j->err);
    if (st == HYPROF_OK)
        st = hyprof_classmap_write(j->cmd->files[1], te_tmp, ref, test, legend, meta, j->err,
                                   sizeof j->err);
    if (st != HYPROF_OK)
        return io_fail(j, st, 0);
    int rc = job_commit(j);
    if (rc != EXIT_OK)
        return rc;
    printf("%s: wrote %s (training pixels per class %s)\n%s: wrote %s (test pixels per class "
           "%s)\n", j->name, j->cmd->files[0], counts_tr, j->name, j->cmd->files[1], counts_te);
    return EXIT_OK;
}

/* ---- split of vector samples ---------------------------------------------------------- */

/* "name:count,..." (or "value:count") of the features marked in `part`. */
static void feature_counts(const hyprof_vector_classes_t *c, const uint16_t *part, char *out,
                           size_t n)
{
    size_t *count = calloc(65536, sizeof *count), used = 0;
    out[0] = '\0';
    if (!count)
        return;
    for (size_t i = 0; i < c->n; i++)
        count[part[i]]++;
    for (size_t v = 1; v < 65536 && used + 16 < n; v++)
        if (count[v]) {
            int k = c->nnames ? snprintf(out + used, n - used, "%s%s:%zu", used ? "," : "",
                                         c->names[v - 1], count[v])
                              : snprintf(out + used, n - used, "%s%zu:%zu", used ? "," : "", v,
                                         count[v]);
            used = k < 0 || (size_t)k >= n - used ? n - 1 : used + (size_t)k;
        }
    free(count);
}

/* A class with too few features for one to be left for testing, named as the
 * user knows it (hyprof_split would speak of pixels). */
static int check_feature_counts(job_t *j, const hyprof_vector_classes_t *c, double per_class)
{
    size_t *count = calloc(65536, sizeof *count);
    if (!count) {
        cli_error(j->name, "out of memory");
        return EXIT_RUNTIME;
    }
    for (size_t i = 0; i < c->n; i++)
        count[c->cls[i]]++;
    int rc = EXIT_OK;
    for (size_t v = 1; v < 65536 && rc == EXIT_OK; v++) {
        if (!count[v] || per_class <= 0 || (per_class >= 1 && per_class != floor(per_class)))
            continue;
        size_t k = per_class >= 1 ? (size_t)per_class : (size_t)nearbyint(per_class * count[v]);
        k = k < 1 ? 1 : k;
        if (k < count[v])
            continue;
        char num[16];
        snprintf(num, sizeof num, "%zu", v);
        cli_error(j->name, "class '%s' has %zu feature(s): %zu for training would leave none "
                  "for testing", c->nnames ? c->names[v - 1] : num, count[v], k);
        rc = EXIT_USAGE;
    }
    free(count);
    return rc;
}

static int write_vector_split(job_t *j, const hyprof_vector_classes_t *c, const uint16_t *train,
                              const uint16_t *test)
{
    const char *samples = hyprof_args_str(j->cmd->args, "samples");
    const char *layer = hyprof_args_str(j->cmd->args, "layer");
    const uint16_t *part[2] = {train, test};
    for (int k = 0; k < 2; k++) {
        const char *tmp = job_output(j, j->cmd->files[k], 0);
        if (!tmp)
            return EXIT_RUNTIME;
        hyprof_status_t st = hyprof_vector_write_subset(samples, layer, part[k], c->n,
                                                        j->cmd->files[k], tmp, j->err,
                                                        sizeof j->err);
        if (st != HYPROF_OK)
            return io_fail(j, st, 0);
    }
    int rc = job_commit(j);
    if (rc != EXIT_OK)
        return rc;
    char counts[2][4096];
    size_t unused = 0;
    feature_counts(c, train, counts[0], sizeof counts[0]);
    feature_counts(c, test, counts[1], sizeof counts[1]);
    for (size_t i = 0; i < c->n; i++)
        unused += !c->cls[i];
    printf("%s: wrote %s (training features per class %s)\n%s: wrote %s (test features per "
           "class %s)\n", j->name, j->cmd->files[0], counts[0], j->name, j->cmd->files[1],
           counts[1]);
    if (unused)
        printf("%s: %zu feature(s) without a class in neither\n", j->name, unused);
    return EXIT_OK;
}

/* Whole features drawn per class as hyprof_split draws pixels: the features
 * in layer order stand for the pixels of a one-row reference. */
static int run_split_vector(job_t *j, double per_class)
{
    const hyprof_args_t *args = j->cmd->args;
    const char *field = hyprof_args_str(args, "class-field");
    if (!field) {
        cli_error(j->name, "--samples needs --class-field (the attribute holding the class)");
        return EXIT_USAGE;
    }
    if (strcmp(hyprof_args_str(args, "preset"), "none") != 0) {
        cli_error(j->name, "--preset gives pixel counts of a --reference raster; with "
                  "--samples give --per-class");
        return EXIT_USAGE;
    }
    for (int k = 0; k < 2; k++)
        if (!hyprof_vector_format(j->cmd->files[k], j->err, sizeof j->err)) {
            cli_error(j->name, "%s", j->err);
            return EXIT_USAGE;
        }
    hyprof_vector_classes_t c;
    hyprof_status_t st = hyprof_vector_classes(hyprof_args_str(args, "samples"),
                                               hyprof_args_str(args, "layer"), field, &c,
                                               j->err, sizeof j->err);
    if (st != HYPROF_OK)
        return io_fail(j, st, 1);
    float *cls = malloc((c.n ? c.n : 1) * sizeof *cls);
    uint16_t *train = malloc((c.n ? c.n : 1) * sizeof *train);
    uint16_t *test = malloc((c.n ? c.n : 1) * sizeof *test);
    int rc = cls && train && test ? check_feature_counts(j, &c, per_class) : EXIT_RUNTIME;
    if (rc == EXIT_RUNTIME && (!cls || !train || !test))
        cli_error(j->name, "out of memory");
    for (size_t i = 0; rc == EXIT_OK && i < c.n; i++)
        cls[i] = c.cls[i];
    size_t classed = 0;
    for (size_t i = 0; i < c.n; i++)
        classed += c.cls[i] != 0;
    if (rc == EXIT_OK && classed == 0) {
        cli_error(j->name, "no feature of '%s' has a class in '%s'",
                  hyprof_args_str(args, "samples"), field);
        rc = EXIT_USAGE;
    }
    if (rc == EXIT_OK) {
        hyprof_cube_t ref = hyprof_cube_bsq(cls, HYPROF_FLOAT32, c.n, 1, 1);
        st = hyprof_split(j->ctx, &ref, per_class, NULL, 0,
                          (uint64_t)hyprof_args_int(args, "seed"), train, test);
        rc = st != HYPROF_OK ? lib_fail(j, st) : write_vector_split(j, &c, train, test);
    }
    free(cls);
    free(train);
    free(test);
    hyprof_vector_classes_free(&c);
    return rc;
}

static int run_split(job_t *j)
{
    const char *ref_path = hyprof_args_str(j->cmd->args, "reference");
    double per_class;
    const size_t *counts;
    size_t ncounts = 0;
    int rc = split_counts(j, &per_class, &counts, &ncounts);
    if (rc != EXIT_OK)
        return rc;
    if (!!ref_path == !!hyprof_args_str(j->cmd->args, "samples")) {
        cli_error(j->name, "give either --reference RASTER or --samples VECTOR --class-field "
                  "FIELD");
        return EXIT_USAGE;
    }
    if (!ref_path)
        return run_split_vector(j, per_class);
    if (hyprof_args_str(j->cmd->args, "class-field") || hyprof_args_str(j->cmd->args, "layer")) {
        cli_error(j->name, "--%s applies to --samples only",
                  hyprof_args_str(j->cmd->args, "class-field") ? "class-field" : "layer");
        return EXIT_USAGE;
    }
    hyprof_raster_t ref;
    memset(&ref, 0, sizeof ref);
    hyprof_legend_t legend = {0, NULL, NULL};
    uint16_t *train = NULL, *test = NULL;
    if ((rc = need_integers(j, "--reference", ref_path)) != EXIT_OK)
        return rc;
    hyprof_status_t st = read_raster(j, ref_path, &ref, 0.0, 0.5);
    if (st == HYPROF_OK)
        st = hyprof_legend_read(ref_path, &legend, j->err, sizeof j->err);
    if (st != HYPROF_OK) {
        rc = io_fail(j, st, 1);
        goto done;
    }
    size_t npix = ref.cube.width * ref.cube.height;
    train = malloc(npix * sizeof *train);
    test = malloc(npix * sizeof *test);
    if (!train || !test) {
        cli_error(j->name, "out of memory");
        rc = EXIT_RUNTIME;
        goto done;
    }
    st = hyprof_split(j->ctx, &ref.cube, per_class, counts, ncounts,
                      (uint64_t)hyprof_args_int(j->cmd->args, "seed"), train, test);
    rc = st != HYPROF_OK ? lib_fail(j, st) : write_split(j, &ref, &legend, train, test);
done:
    free(train);
    free(test);
    hyprof_raster_free(&ref);
    hyprof_legend_free(&legend);
    return rc;
}

int cli_run_classification(cli_command_t *cmd)
{
    static const struct {
        const char *name;
        int (*run)(job_t *);
    } runners[] = {
        {"train", run_train},
        {"classify", run_classify},
        {"assess", run_assess},
        {"split", run_split},
    };
    for (size_t i = 0; i < sizeof runners / sizeof *runners; i++) {
        if (strcmp(cmd->op->name, runners[i].name) != 0)
            continue;
        job_t j;
        int rc = job_start(&j, cmd);
        if (rc != EXIT_OK)
            return rc;
        return job_end(&j, runners[i].run(&j));
    }
    cli_error(cmd->op->name, "this operation has no command-line runner");
    return EXIT_RUNTIME;
}
