/* hyprof split: disjoint, reproducible training and test sets per class, of
 * a reference raster's pixels or of a vector layer's whole features. */
#include "cli.h"
#include "classmap_io.h"
#include "job.h"
#include "vector_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int run_split(job_t *j)
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
