/* hyprof_search_run: `train --search` then `classify` through the library on
 * raw float32 files, without GDAL, for the GPU machines (bench/search_bench.py
 * is the command-line benchmark). Times hyprof_train_search and
 * hyprof_classify_input on the raw cube, scores the map on the test labels
 * and prints one JSON line.
 *
 *   hyprof_search_run --cube C.f32 --width W --height H --bands B
 *       --train T.f32 --test S.f32 [--backend cpu|cuda|auto] [--threads N]
 *       [--search default|"RECIPE;RECIPE"] [--fusion auto|none] [--folds 5] [--seed 1]
 *
 * The cube is band-sequential float32, the labels width x height float32
 * (0 = unlabelled); the SVM grid is the default one. Uses the public API. */
#define _POSIX_C_SOURCE 200809L

#include "hyprof/hyprof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *cube, *train, *test, *backend, *search, *fusion;
    size_t width, height, bands;
    long threads, folds, seed;
} opts_t;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *read_f32(const char *path, size_t count)
{
    FILE *f = fopen(path, "rb");
    float *d = f ? malloc(count * sizeof *d) : NULL;
    size_t got = d ? fread(d, sizeof *d, count, f) : 0;
    int extra = f ? fgetc(f) != EOF : 0;
    if (f)
        fclose(f);
    if (got != count || extra) {
        fprintf(stderr, "hyprof_search_run: '%s' is not %zu float32 values\n", path, count);
        free(d);
        return NULL;
    }
    return d;
}

static int parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){NULL, NULL, NULL, "auto", "default", "auto", 0, 0, 0, 0, 5, 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--cube")) o->cube = v;
        else if (!strcmp(k, "--train")) o->train = v;
        else if (!strcmp(k, "--test")) o->test = v;
        else if (!strcmp(k, "--backend")) o->backend = v;
        else if (!strcmp(k, "--search")) o->search = v;
        else if (!strcmp(k, "--fusion")) o->fusion = v;
        else if (!strcmp(k, "--width")) o->width = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--height")) o->height = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--bands")) o->bands = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--threads")) o->threads = strtol(v, NULL, 10);
        else if (!strcmp(k, "--folds")) o->folds = strtol(v, NULL, 10);
        else if (!strcmp(k, "--seed")) o->seed = strtol(v, NULL, 10);
        else {
            fprintf(stderr, "hyprof_search_run: unknown option '%s'\n", k);
            return -1;
        }
    }
    if (!o->cube || !o->train || !o->test || !o->width || !o->height || !o->bands) {
        fprintf(stderr, "usage: hyprof_search_run --cube C.f32 --width W --height H --bands B "
                        "--train T.f32 --test S.f32 [--backend B] [--threads N] [--search S] "
                        "[--fusion auto|none] [--folds K] [--seed N]\n");
        return -1;
    }
    return 0;
}

/* The recipes of --search ("default": NULL), split at ';' in place. */
static size_t recipes(char *text, const char **list, size_t cap)
{
    if (!strcmp(text, "default"))
        return 0;
    size_t n = 0;
    for (char *save = NULL, *r = strtok_r(text, ";", &save); r && n < cap;
         r = strtok_r(NULL, ";", &save))
        list[n++] = r;
    return n;
}

static double overall_accuracy(const hyprof_cube_t *map, const float *test, size_t npix)
{
    size_t right = 0, total = 0;
    for (size_t p = 0; p < npix; p++)
        if (test[p] > 0) {
            total++;
            right += ((const uint16_t *)map->data)[p] == (uint16_t)test[p];
        }
    return total ? (double)right / (double)total : 0.0;
}

static int run(hyprof_ctx_t *ctx, const opts_t *o, float *cube, float *train, const float *test)
{
    hyprof_cube_t raw = hyprof_cube_bsq(cube, HYPROF_FLOAT32, o->width, o->height, o->bands);
    hyprof_cube_t labels = hyprof_cube_bsq(train, HYPROF_FLOAT32, o->width, o->height, 1);
    char *text = strdup(o->search);
    const char *list[256];
    size_t n = text ? recipes(text, list, 256) : 0;
    hyprof_search_params_t sp = {n ? list : NULL, n, (int)o->folds, (uint64_t)o->seed,
                                 strcmp(o->fusion, "none") != 0};
    hyprof_train_params_t tp;
    hyprof_train_params_default(&tp);
    hyprof_classifier_t *model = NULL;
    hyprof_search_report_t rep;
    double t0 = now();
    hyprof_status_t st = hyprof_train_search(ctx, &raw, &labels, &sp, &tp, &model, &rep);
    double t1 = now();
    hyprof_cube_t map = {0};
    if (st == HYPROF_OK)
        st = hyprof_classify_input(ctx, model, &raw, &map, NULL);
    double t2 = now();
    if (st != HYPROF_OK) {
        fprintf(stderr, "hyprof_search_run: %s\n", hyprof_ctx_last_error(ctx));
    } else {
        size_t done = 0;
        for (size_t i = 0; i < rep.n; i++)
            done += rep.accuracy[i] == rep.accuracy[i];
        printf("{\"backend\": \"%s\", \"threads\": %ld, \"seed\": %ld, \"candidates\": %zu, "
               "\"completed\": %zu, \"members\": %zu, \"majority\": %d, \"cv_accuracy\": %.4f, "
               "\"oa\": %.4f, \"search_s\": %.2f, \"classify_s\": %.2f, \"model\": \"%s\"}\n",
               hyprof_backend_name(hyprof_ctx_used_backend(ctx)), o->threads, o->seed, rep.n,
               done, hyprof_classifier_members(model), hyprof_classifier_majority(model),
               hyprof_classifier_cv_accuracy(model),
               overall_accuracy(&map, test, o->width * o->height), t1 - t0, t2 - t1,
               hyprof_classifier_profile(model));
    }
    hyprof_cube_free(&map);
    hyprof_classifier_free(&model);
    hyprof_search_report_free(&rep);
    free(text);
    return st == HYPROF_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse(argc, argv, &o) != 0)
        return 2;
    size_t npix = o.width * o.height;
    float *cube = read_f32(o.cube, npix * o.bands), *train = read_f32(o.train, npix),
          *test = read_f32(o.test, npix);
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_backend_t backend;
    int rc = 1;
    if (cube && train && test && ctx && hyprof_backend_parse(o.backend, &backend) == HYPROF_OK &&
        hyprof_ctx_set_backend(ctx, backend) == HYPROF_OK &&
        hyprof_ctx_set_threads(ctx, (int)o.threads) == HYPROF_OK)
        rc = run(ctx, &o, cube, train, test);
    else if (ctx)
        fprintf(stderr, "hyprof_search_run: %s\n", hyprof_ctx_last_error(ctx));
    hyprof_ctx_free(&ctx);
    free(cube), free(train), free(test);
    return rc;
}
