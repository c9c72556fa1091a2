/* Profile recipes: "OP NAME=VALUE ... + OP ...", parsed into registry
 * arguments and run through hyprof_op_run on the raw cube; the parts' output
 * bands are concatenated (each band named "part k: its own name" when there
 * are several parts). Only parameters that are plain values are allowed (no
 * file reads or writes), so a recipe stored in a model is self-contained. */
#include "search_impl.h"

#include <stdlib.h>
#include <string.h>

#define OP "profile"
#define MAX_PARTS 8

typedef struct {
    const hyprof_op_t *op;
    hyprof_args_t *args;
} part_t;

static void parts_free(part_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hyprof_args_free(&p[i].args);
}

static int plain_value(const hyprof_param_t *p)
{
    return p->type != HYPROF_PARAM_FILE_IN && p->type != HYPROF_PARAM_FILE_OUT &&
           p->type != HYPROF_PARAM_RASTER_IN && p->type != HYPROF_PARAM_VECTOR_IN &&
           p->type != HYPROF_PARAM_FIELD;
}

/* One word "NAME=VALUE" of a part. */
static hyprof_status_t set_word(hyprof_ctx_t *ctx, part_t *p, char *word)
{
    char *eq = strchr(word, '=');
    if (!eq || eq == word)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "recipe word '%s' of '%s': expected NAME=VALUE", word, p->op->name);
    *eq = '\0';
    const hyprof_param_t *par = hyprof_op_param(p->op, word);
    if (!par || !plain_value(par))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "'%s' is not a value parameter of '%s' in a recipe", word,
                             p->op->name);
    if (hyprof_args_set(p->args, word, eq + 1) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "%s: %s", p->op->name,
                             hyprof_args_error(p->args));
    return HYPROF_OK;
}

static hyprof_status_t start_part(hyprof_ctx_t *ctx, part_t *p, const char *name)
{
    p->op = hyprof_op_find(name);
    if (!p->op || !p->op->run || !p->op->bands || strcmp(p->op->name, "sspp") == 0 ||
        strcmp(p->op->name, "unmix") == 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "'%s' is not a feature operation (pca, dwt, eadp, eap, emp, wmcd)",
                             name);
    p->args = hyprof_args_new(p->op);
    return p->args ? HYPROF_OK : hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
}

/* Splits the recipe on white space; '+' starts the next part. */
static hyprof_status_t recipe_parse(hyprof_ctx_t *ctx, const char *recipe, part_t *parts,
                                    size_t *nparts)
{
    *nparts = 0;
    char *text = strdup(recipe ? recipe : "");
    if (!text)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    hyprof_status_t st = HYPROF_OK;
    int want_op = 1;
    for (char *save = NULL, *w = strtok_r(text, " \t\r\n", &save); w && st == HYPROF_OK;
         w = strtok_r(NULL, " \t\r\n", &save)) {
        if (strcmp(w, "+") == 0) {
            if (want_op)
                st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "recipe '%s': '+' without "
                                   "an operation before it", recipe);
            want_op = 1;
        } else if (want_op) {
            if (*nparts == MAX_PARTS)
                st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                   "recipe '%s': more than %d parts", recipe, MAX_PARTS);
            else
                st = start_part(ctx, &parts[(*nparts)++], w);
            want_op = 0;
        } else {
            st = set_word(ctx, &parts[*nparts - 1], w);
        }
    }
    if (st == HYPROF_OK && (want_op || *nparts == 0))
        st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "recipe '%s': %s", recipe,
                           *nparts ? "ends with '+'" : "names no operation");
    for (size_t i = 0; st == HYPROF_OK && i < *nparts; i++)
        if (hyprof_args_check(parts[i].args) != HYPROF_OK)
            st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "%s: %s", parts[i].op->name,
                               hyprof_args_error(parts[i].args));
    free(text);
    if (st != HYPROF_OK) {
        parts_free(parts, *nparts);
        *nparts = 0;
    }
    return st;
}

hyprof_status_t hyprof_profile_check(hyprof_ctx_t *ctx, const char *recipe, size_t in_bands,
                                     size_t *out_bands)
{
    part_t parts[MAX_PARTS];
    size_t n;
    *out_bands = 0;
    hyprof_status_t st = recipe_parse(ctx, recipe, parts, &n);
    size_t total = 0;
    for (size_t i = 0; st == HYPROF_OK && i < n; i++) {
        size_t b = 0;
        st = hyprof_op_output_bands(ctx, parts[i].op, parts[i].args, in_bands, &b);
        total = b && (i == 0 || total) ? total + b : 0;
    }
    if (st == HYPROF_OK)
        *out_bands = total;
    parts_free(parts, n);
    return st;
}

/* Appends part k's bands to `out` (allocated for all parts' bands). */
static hyprof_status_t append(hyprof_result_t *out, size_t *at, const hyprof_result_t *r,
                              size_t k, size_t nparts)
{
    size_t npix = r->cube.width * r->cube.height;
    float *dst = (float *)out->cube.data;
    for (size_t b = 0; b < r->cube.bands; b++, (*at)++) {
        const float *src = (const float *)r->cube.data + b * npix;
        memcpy(dst + *at * npix, src, npix * sizeof *dst);
        const char *name = r->band_names && r->band_names[b] ? r->band_names[b] : "";
        hyprof_status_t st = nparts > 1
                                 ? hyprof_result_set_band_name(out, *at, "%zu %s", k + 1, name)
                                 : hyprof_result_set_band_name(out, *at, "%s", name);
        if (st != HYPROF_OK)
            return st;
    }
    return HYPROF_OK;
}

static hyprof_status_t concat(hyprof_ctx_t *ctx, const hyprof_cube_t *raw, hyprof_result_t *r,
                              size_t n, hyprof_result_t *out)
{
    size_t total = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].cube.dtype != HYPROF_FLOAT32 || r[i].cube.width != raw->width ||
            r[i].cube.height != raw->height)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                 "part %zu is not a float32 raster on the input's grid", i + 1);
        total += r[i].cube.bands;
    }
    hyprof_status_t st = hyprof_result_alloc(out, raw->width, raw->height, total, raw);
    for (size_t i = 0; st == HYPROF_OK && i < n; i++)
        st = append(out, &at, &r[i], i, n);
    if (st != HYPROF_OK) {
        hyprof_result_free(out);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu bands)", total);
    }
    return HYPROF_OK;
}

hyprof_status_t hyprof_profile_compute(hyprof_ctx_t *ctx, const char *recipe,
                                       const hyprof_cube_t *raw, hyprof_result_t *out)
{
    part_t parts[MAX_PARTS];
    hyprof_result_t res[MAX_PARTS];
    size_t n;
    hyprof_result_init(out);
    hyprof_status_t st = recipe_parse(ctx, recipe, parts, &n);
    if (st != HYPROF_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        hyprof_result_init(&res[i]);
    for (size_t i = 0; st == HYPROF_OK && i < n; i++) {
        double saved[2];
        hyprof__progress_push(ctx, (double)i / (double)n, (double)(i + 1) / (double)n, saved);
        st = hyprof_op_run(ctx, parts[i].op, parts[i].args, raw, &res[i]);
        hyprof__progress_pop(ctx, saved);
    }
    if (st == HYPROF_OK && n == 1) {
        *out = res[0];
        hyprof_result_init(&res[0]);
    } else if (st == HYPROF_OK) {
        st = concat(ctx, raw, res, n, out);
    }
    for (size_t i = 0; i < n; i++)
        hyprof_result_free(&res[i]);
    parts_free(parts, n);
    return st;
}
