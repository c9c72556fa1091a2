/* The classification operations' dispatch, train and classify. Their file
 * arguments are the registry's positionals; the library computes, these files
 * read, check grids, write and report (assess.c, split.c, job.c). */
#include "cli.h"
#include "classmap_io.h"
#include "job.h"
#include "report.h"
#include "search_cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (hyprof_classifier_members(m)) {
        printf("%s: wrote %s (%zu svm members, %zu classes, %zu training pixels, %zu support "
               "vectors, cross-validation accuracy %.4f, %s, of %zu-band cubes)\n", j->name, path,
               hyprof_classifier_members(m), hyprof_classifier_classes(m),
               hyprof_classifier_train_pixels(m), hyprof_classifier_size(m),
               hyprof_classifier_cv_accuracy(m), hyprof_classifier_profile(m),
               hyprof_classifier_input_bands(m));
        return;
    }
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
    if (hyprof_classifier_profile(m))
        printf(", profile '%s' of %zu-band cubes", hyprof_classifier_profile(m),
               hyprof_classifier_input_bands(m));
    printf(")\n");
}

int run_train(job_t *j)
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
    if ((rc = cli_train_check_search(j)) != EXIT_OK)
        goto done;
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
    if (hyprof_args_str(args, "search")) {
        if ((rc = cli_train_search(j, &feat, &labels.cube, &p, &model)) != EXIT_OK)
            goto done;
    } else if ((st = hyprof_train(j->ctx, &feat.cube, &labels.cube, &p, &model)) != HYPROF_OK) {
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

/* The largest class value the model gives. */
static uint16_t max_class(const hyprof_classifier_t *m)
{
    int v = 0;
    for (size_t k = 0; k < hyprof_classifier_classes(m); k++)
        if (hyprof_classifier_class_value(m, k) > v)
            v = hyprof_classifier_class_value(m, k);
    return (uint16_t)(v < 65535 ? v : 65535);
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

/* The class map's metadata items (NULL-terminated): the operation, the
 * model, the backend, the classifier, and the profile the model was trained
 * on when the input is that profile. Free `profile`. */
typedef struct {
    char model[1100], backend[64], kind[64], *profile;
    char *items[6];
} map_meta_t;

static void map_meta(map_meta_t *mm, const hyprof_classifier_t *m, const char *model_path,
                     const char *backend, size_t in_bands)
{
    snprintf(mm->model, sizeof mm->model, "HYPROF_MODEL=%s", model_path);
    snprintf(mm->backend, sizeof mm->backend, "HYPROF_BACKEND=%s", backend);
    snprintf(mm->kind, sizeof mm->kind, "HYPROF_CLASSIFIER=%s",
             hyprof_classifier_kind(m) == HYPROF_CLASSIFIER_SVM ? "svm" : "elm");
    const char *recipe = hyprof_classifier_profile(m);
    mm->profile = NULL;
    if (recipe && in_bands == hyprof_classifier_input_bands(m) &&
        (mm->profile = malloc(strlen(recipe) + 32)))
        sprintf(mm->profile, "HYPROF_PROFILE=%s", recipe);
    char *items[6] = {"HYPROF_OPERATION=classify", mm->model, mm->backend, mm->kind,
                      mm->profile, NULL};
    memcpy(mm->items, items, sizeof items);
}

/* Whether classify goes by blocks of rows: the input and its map do not fit
 * in memory, and the classification is pixel by pixel (the input is the
 * model's features, not a raw cube it computes a profile of; no
 * --probabilities). */
static int classify_by_rows(job_t *j, const hyprof_classifier_t *m, const char *prob)
{
    size_t w, h, nb;
    char err[512], what[600];
    const char *path = j->cmd->files[0];
    if (hyprof_raster_probe(path, &w, &h, &nb, NULL, err, sizeof err) != HYPROF_OK)
        return 0; /* the whole read says why */
    size_t in = hyprof_raster_read_bytes(w, h, nb), map = w * h * sizeof(uint16_t);
    snprintf(what, sizeof what, "'%s' (%zux%zu pixels, %zu bands)", path, w, h, nb);
    int profile = hyprof_classifier_profile(m) && nb == hyprof_classifier_input_bands(m);
    return !prob && !profile &&
           hyprof_host_memory_check(in > SIZE_MAX - map ? SIZE_MAX : in + map, what, err,
                                    sizeof err) != HYPROF_OK;
}

/* A classification by blocks of rows: the input's reader, its header, the
 * map's writer (made with the first block) and its temporary. */
typedef struct {
    job_t *j;
    const hyprof_classifier_t *m;
    hyprof_rows_t *rows;
    const hyprof_raster_t *header;
    hyprof_classmap_rows_t cr;
    const char *tmp;
} classify_rows_t;

/* One block of rows classified into the map being written (cli_run_blocks'
 * block); the writer is created with the first block, once the backend
 * used is known. */
static int classify_block(void *user, size_t y0, size_t n)
{
    classify_rows_t *r = user;
    job_t *j = r->j;
    hyprof_cube_t block, map;
    memset(&block, 0, sizeof block);
    memset(&map, 0, sizeof map);
    hyprof_status_t st = hyprof_rows_read(r->rows, y0, n, &block, j->err, sizeof j->err);
    if (st != HYPROF_OK)
        return io_fail(j, st, 1);
    st = hyprof_classify_input(j->ctx, r->m, &block, &map, NULL);
    hyprof_cube_free(&block);
    if (st != HYPROF_OK)
        return lib_fail(j, st);
    if (y0 == 0) {
        map_meta_t mm;
        map_meta(&mm, r->m, hyprof_args_str(j->cmd->args, "model"),
                 hyprof_backend_name(hyprof_ctx_used_backend(j->ctx)), r->header->cube.bands);
        st = hyprof_classmap_rows_create(&r->cr, j->cmd->files[1], r->tmp, r->header,
                                         max_class(r->m), mm.items, j->err, sizeof j->err);
        free(mm.profile);
    }
    if (st == HYPROF_OK)
        st = hyprof_classmap_rows_put(&r->cr, y0, n, map.data, j->err, sizeof j->err);
    hyprof_cube_free(&map);
    return st == HYPROF_OK ? EXIT_OK : io_fail(j, st, 0);
}

/* classify on an input larger than the memory: blocks of rows read,
 * classified and written one after the other. The map is the one the whole
 * input gives (hyprof_classmap_rows_t). */
static int run_classify_by_rows(job_t *j, const hyprof_classifier_t *m)
{
    const char *in = j->cmd->files[0], *out = j->cmd->files[1];
    hyprof_raster_t header;
    classify_rows_t r = {.j = j, .m = m, .header = &header};
    hyprof_status_t st = hyprof_rows_open(in, &r.rows, &header, j->err, sizeof j->err);
    if (st != HYPROF_OK)
        return io_fail(j, st, 1);
    size_t w = header.cube.width, h = header.cube.height;
    size_t nrows = cli_plan_blocks(&j->pg, j->name, in, w, h, header.cube.bands, 1);
    r.tmp = nrows ? job_output(j, out, 1) : NULL;
    int rc = !nrows ? EXIT_USAGE : !r.tmp ? EXIT_RUNTIME : EXIT_OK;
    if (rc == EXIT_OK)
        rc = cli_run_blocks(&j->pg, j->name, h, nrows, classify_block, &r);
    hyprof_legend_t legend = {0, NULL, NULL};
    if (rc == EXIT_OK && model_legend(m, &legend) != HYPROF_OK) {
        snprintf(j->err, sizeof j->err, "out of memory");
        rc = io_fail(j, HYPROF_ERR_NOMEM, 0);
    }
    if (rc == EXIT_OK &&
        (st = hyprof_classmap_rows_finish(&r.cr, &legend, j->err, sizeof j->err)) != HYPROF_OK)
        rc = io_fail(j, st, 0);
    if (rc == EXIT_OK)
        rc = job_commit(j);
    hyprof_classmap_rows_abandon(&r.cr);
    if (rc == EXIT_OK)
        printf("%s: wrote %s (%zux%zu, %zu classes, backend %s)\n", j->name, out, w, h,
               hyprof_classifier_classes(m), hyprof_backend_name(hyprof_ctx_used_backend(j->ctx)));
    hyprof_legend_free(&legend);
    hyprof_rows_close(&r.rows);
    hyprof_raster_free(&header);
    return rc;
}

int run_classify(job_t *j)
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
    if (classify_by_rows(j, m, prob)) {
        rc = run_classify_by_rows(j, m);
        goto done;
    }
    if ((st = read_raster(j, j->cmd->files[0], &in, 0.0, 0.1)) != HYPROF_OK) {
        rc = io_fail(j, st, 1);
        goto done;
    }
    cli_progress_stage(&j->pg, 0.1, 0.9);
    if ((st = hyprof_classify_input(j->ctx, m, &in.cube, &map, prob ? &scores : NULL)) !=
        HYPROF_OK) {
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
    map_meta_t mm;
    map_meta(&mm, m, model_path, backend, in.cube.bands);
    if ((st = model_legend(m, &legend)) == HYPROF_OK)
        st = hyprof_classmap_write(out, map_tmp, &in, map.data, &legend, mm.items, j->err,
                                   sizeof j->err);
    free(mm.profile);
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
