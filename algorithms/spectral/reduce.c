/* Spectral reduction before a profile (--reduction pca|dwt|none): the
 * features each profile operation works on, with their names. */
#include "../core/ops.h"
#include "../core/internal.h"
#include "pca_impl.h"
#include "hyprof/spectral.h"
#include "hyprof/wavelet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hyprof_status_t name_bands(hyprof_ctx_t *ctx, const char *op, size_t n,
                                  const char *prefix, char ***names)
{
    *names = calloc(n, sizeof **names);
    for (size_t i = 0; *names && i < n; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%s%zu", prefix, i + 1);
        if (!((*names)[i] = strdup(buf))) {
            hyprof__free_names(*names, i);
            *names = NULL;
        }
    }
    return *names ? HYPROF_OK : hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
}

void hyprof__free_names(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

/* Computed features keep the input's mask: the profile must not take
 * nodata pixels for data. */
static hyprof_status_t finish(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *in,
                              hyprof_cube_t *features, const char *prefix, char ***names,
                              hyprof_status_t st)
{
    if (st == HYPROF_OK && (st = hyprof__cube_copy_mask(features, in)) != HYPROF_OK)
        hyprof__error(ctx, st, op, "out of memory");
    if (st == HYPROF_OK)
        st = name_bands(ctx, op, features->bands, prefix, names);
    if (st != HYPROF_OK)
        hyprof_cube_free(features);
    return st;
}

const char *hyprof__reduce_prefix(const hyprof_args_t *args)
{
    const char *how = hyprof_args_str(args, "reduction");
    return !how || strcmp(how, "none") == 0 ? "B" : strcmp(how, "pca") == 0 ? "PC" : "A";
}

hyprof_status_t hyprof__reduce(hyprof_ctx_t *ctx, const char *op, const hyprof_args_t *args,
                               const hyprof_cube_t *in, hyprof_cube_t *features, char ***names)
{
    return hyprof__reduce_device(ctx, op, args, in, features, names, NULL, NULL);
}

hyprof_status_t hyprof__reduce_device(hyprof_ctx_t *ctx, const char *op,
                                      const hyprof_args_t *args, const hyprof_cube_t *in,
                                      hyprof_cube_t *features, char ***names,
                                      hyprof_pca_device_fn on_device, void *device_user)
{
    const char *how = hyprof_args_str(args, "reduction");
    hyprof_status_t st;
    memset(features, 0, sizeof *features);
    *names = NULL;
    if (!how || strcmp(how, "none") == 0) {
        *features = *in; /* a view: the profile reads the input bands as they are */
        features->owns = 0;
        return name_bands(ctx, op, in->bands, "B", names);
    }
    if (strcmp(how, "pca") == 0) {
        hyprof_pca_model_t *m = NULL;
        st = hyprof__pca_fit_transform_device(
            ctx, in, (size_t)hyprof_args_int(args, "components"), &m, features, on_device,
            device_user);
        hyprof_pca_model_free(&m);
        return finish(ctx, op, in, features, "PC", names, st);
    }
    const hyprof_wavelet_t *w = hyprof_wavelet_find(hyprof_args_str(args, "wavelet"));
    st = hyprof_dwt_spectral(ctx, in, w, (int)hyprof_args_int(args, "levels"), features);
    return finish(ctx, op, in, features, "A", names, st);
}

/* DWT levels: --levels when given, else the level count whose approximation
 * has the band count closest to --features (ties: more bands). */
static hyprof_status_t dwt_levels(hyprof_ctx_t *ctx, const char *op, const hyprof_args_t *args,
                                  size_t bands, int *levels)
{
    int given_l = hyprof_args_given(args, "levels"), given_f = hyprof_args_given(args, "features");
    if (given_l && given_f)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "--features %ld and --levels %ld both given: use one",
                             hyprof_args_int(args, "features"), hyprof_args_int(args, "levels"));
    if (given_l) {
        *levels = (int)hyprof_args_int(args, "levels");
        return HYPROF_OK;
    }
    *levels = hyprof_dwt_levels_for_features(bands, hyprof_args_int(args, "features"));
    return HYPROF_OK;
}

hyprof_status_t hyprof__reduce_bands(hyprof_ctx_t *ctx, const char *op,
                                     const hyprof_args_t *args, size_t in_bands,
                                     size_t *features)
{
    const char *how = hyprof_args_str(args, "reduction");
    hyprof_status_t st;
    if (!how || strcmp(how, "none") == 0) {
        *features = in_bands;
        return HYPROF_OK;
    }
    size_t k = (size_t)hyprof_args_int(args, "components");
    int levels = (int)hyprof_args_int(args, "levels"), maxl = hyprof_dwt_max_levels(in_bands);
    /* Operations with --features choose the levels from it (as
     * hyprof__reduce_features does). */
    if (strcmp(how, "dwt") == 0 && hyprof_op_param(hyprof_args_op(args), "features") &&
        (st = dwt_levels(ctx, op, args, in_bands, &levels)) != HYPROF_OK)
        return st;
    if (in_bands < 2)
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, op, "the input has %zu band; --reduction %s "
                           "needs at least 2", in_bands, how);
    else if (strcmp(how, "pca") == 0 && k > in_bands)
        st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                           "components %zu is out of range: the input has %zu bands", k,
                           in_bands);
    else if (strcmp(how, "dwt") == 0 && (levels < 1 || levels > maxl))
        st = hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                           "levels %d is out of range: %zu bands allow 1 to %d", levels,
                           in_bands, maxl);
    else
        st = HYPROF_OK;
    if (st == HYPROF_OK)
        *features = strcmp(how, "pca") == 0 ? k : hyprof_dwt_bands(in_bands, levels);
    return st;
}

hyprof_status_t hyprof__reduce_features(hyprof_ctx_t *ctx, const char *op,
                                        const hyprof_args_t *args, const hyprof_cube_t *in,
                                        hyprof_cube_t *feat, char ***names, int *levels)
{
    *levels = 0;
    memset(feat, 0, sizeof *feat);
    *names = NULL;
    if (strcmp(hyprof_args_str(args, "reduction"), "dwt") != 0)
        return hyprof__reduce(ctx, op, args, in, feat, names);
    hyprof_status_t st = dwt_levels(ctx, op, args, in->bands, levels);
    if (st != HYPROF_OK)
        return st;
    /* a copy of the arguments with the levels chosen here */
    const hyprof_op_t *o = hyprof_args_op(args);
    hyprof_args_t *copy = hyprof_args_new(o);
    if (!copy)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    for (size_t i = 0; st == HYPROF_OK && i < o->nparams; i++) {
        const char *t = hyprof_args_str(args, o->params[i].name);
        if (t)
            st = hyprof_args_set(copy, o->params[i].name, t);
    }
    char text[16];
    snprintf(text, sizeof text, "%d", *levels);
    if (st == HYPROF_OK)
        st = hyprof_args_set(copy, "levels", text);
    if (st != HYPROF_OK)
        st = hyprof__error(ctx, st, op, "%s", hyprof_args_error(copy));
    else
        st = hyprof__reduce(ctx, op, copy, in, feat, names);
    hyprof_args_free(&copy);
    return st;
}

hyprof_status_t hyprof__reduce_dwt_plan(hyprof_ctx_t *ctx, const char *op,
                                        const hyprof_args_t *args, size_t in_bands,
                                        const hyprof_wavelet_t **wavelet, int *levels,
                                        char ***names)
{
    size_t nfeat = 0;
    *names = NULL;
    hyprof_status_t st = hyprof__reduce_bands(ctx, op, args, in_bands, &nfeat);
    if (st == HYPROF_OK)
        st = dwt_levels(ctx, op, args, in_bands, levels);
    if (st != HYPROF_OK)
        return st;
    const char *wn = hyprof_args_str(args, "wavelet");
    if (!(*wavelet = hyprof_wavelet_find(wn)))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "unknown wavelet '%s'", wn);
    return name_bands(ctx, op, nfeat, "A", names);
}
