/* hyprof_pca: one principal component of the sources with a saved PCA model
 * (`hyprof pca --save-model`), as `hyprof pca --model` computes it. */
#include "model_cache.h"
#include "pixfn.h"

#include <cpl_conv.h>
#include <cpl_error.h>

#include <stdlib.h>

#define NAME "hyprof_pca"

static hyprof_status_t load(hyprof_ctx_t *ctx, const char *path, void **model)
{
    return hyprof_pca_model_load(ctx, path, (hyprof_pca_model_t **)model);
}

static void unload(void *model)
{
    hyprof_pca_model_t *m = model;
    hyprof_pca_model_free(&m);
}

static const hyprof_model_kind_t kind = {"PCA model", load, unload};

/* The arithmetic of the library's CPU projection, in its order (offset
 * first, then bands in turn, in double), so values match `hyprof pca` bit for
 * bit; masked pixels are set by hyprof_pixfn_finish. */
static void project(const hyprof_pca_model_t *m, size_t k, const float *x, size_t npix,
                    float *out)
{
    size_t B = hyprof_pca_model_bands(m);
    const double *v = hyprof_pca_model_vectors(m) + k * B, *mean = hyprof_pca_model_mean(m);
    double offset = 0.0;
    for (size_t b = 0; b < B; b++)
        offset += v[b] * mean[b];
    for (size_t i = 0; i < npix; i++) {
        double acc = -offset;
        for (size_t b = 0; b < B; b++)
            acc += v[b] * (double)x[b * npix + i];
        out[i] = (float)acc;
    }
}

typedef struct {
    const hyprof_pca_model_t *model;
    size_t component; /* 0-based */
} pca_user_t;

static CPLErr project_window(void *user, const hyprof_cube_t *x, float *out)
{
    const pca_user_t *u = user;
    project(u->model, u->component, x->data, x->width * x->height, out);
    return CE_None;
}

static CPLErr check(const hyprof_pca_model_t *m, const char *path, int nsources, long component)
{
    if (hyprof_pca_model_bands(m) != (size_t)nsources) {
        CPLError(CE_Failure, CPLE_IllegalArg,
                 NAME ": model '%s' was fitted on %zu bands but the band has %d sources", path,
                 hyprof_pca_model_bands(m), nsources);
        return CE_Failure;
    }
    if ((size_t)component > hyprof_pca_model_components(m)) {
        CPLError(CE_Failure, CPLE_IllegalArg,
                 NAME ": argument component=%ld is out of range: model '%s' has %zu components",
                 component, path, hyprof_pca_model_components(m));
        return CE_Failure;
    }
    return CE_None;
}

static CPLErr pca(void **sources, int nsources, void *data, int w, int h, GDALDataType stype,
                  GDALDataType btype, int pspace, int lspace, CSLConstList args)
{
    long component;
    int has_nd;
    double nd;
    if (hyprof_pixfn_int(NAME, args, "component", 0, 1, 1, 100000, &component) != CE_None ||
        hyprof_pixfn_nodata(NAME, args, &has_nd, &nd) != CE_None)
        return CE_Failure;
    char *path = hyprof_pixfn_file(NAME, args, "model");
    const hyprof_pca_model_t *m = path ? hyprof_model_acquire(NAME, &kind, path) : NULL;
    CPLErr err = m ? check(m, path, nsources, component) : CE_Failure;
    pca_user_t u = {m, (size_t)component - 1};
    if (err == CE_None)
        err = hyprof_pixfn_apply(NAME, sources, nsources, data, w, h, stype, btype, pspace,
                                 lspace, has_nd, nd, project_window, &u);
    hyprof_model_release(m);
    CPLFree(path);
    return err;
}

const hyprof_pixfn_t hyprof_pixfn_pca = {
    NAME, pca,
    "<PixelFunctionArgumentsList>"
    "<Argument name='model' type='string' description='PCA model file written by "
    "hyprof pca --save-model; relative paths: the current folder, then HYPROF_MODEL_PATH' "
    "mandatory='true'/>"
    "<Argument name='component' type='integer' description='component to output, 1-based' "
    "default='1'/>"
    "<Argument name='nodata' type='double' description='input nodata: pixels where any source "
    "equals it (or is NaN) become nodata (NaN without it)'/>"
    "</PixelFunctionArgumentsList>"};
