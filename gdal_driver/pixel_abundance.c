/* hyprof_abundance: the abundance of one endmember of a saved set (the CSV
 * `hyprof unmix` writes), as `hyprof unmix --model` computes band K. */
#include "model_cache.h"
#include "pixfn.h"

#include <cpl_conv.h>
#include <cpl_string.h>
#include <cpl_error.h>

#include <string.h>

#define NAME "hyprof_abundance"

static CPLErr check(const hyprof_endmembers_t *em, const char *path, int nsources, long k)
{
    if (em->bands != (size_t)nsources) {
        CPLError(CE_Failure, CPLE_IllegalArg,
                 NAME ": endmember set '%s' has %zu bands but the band has %d sources", path,
                 em->bands, nsources);
        return CE_Failure;
    }
    if ((size_t)k > em->count) {
        CPLError(CE_Failure, CPLE_IllegalArg,
                 NAME ": argument endmember=%ld is out of range: set '%s' has %zu endmembers", k,
                 path, em->count);
        return CE_Failure;
    }
    return CE_None;
}

static CPLErr method_arg(CSLConstList args, hyprof_abundance_method_t *m)
{
    const char *v = CSLFetchNameValueDef(args, "method", "fcls");
    if (hyprof_abundance_method_parse(v, m) == HYPROF_OK)
        return CE_None;
    CPLError(CE_Failure, CPLE_IllegalArg,
             NAME ": argument method='%s' is not one of fcls, nnls, ucls", v);
    return CE_Failure;
}

/* The window's abundances (all endmembers: one library call solves each
 * pixel once), band k kept. */
typedef struct {
    const hyprof_endmembers_t *em;
    hyprof_abundance_method_t method;
    long k; /* 1-based */
} abundance_user_t;

static CPLErr unmix(void *user, const hyprof_cube_t *x, float *out)
{
    const hyprof_endmembers_t *em = ((const abundance_user_t *)user)->em;
    hyprof_abundance_method_t method = ((const abundance_user_t *)user)->method;
    long k = ((const abundance_user_t *)user)->k;
    hyprof_ctx_t *ctx = hyprof_pixfn_ctx(NAME);
    hyprof_cube_t a;
    memset(&a, 0, sizeof a);
    hyprof_status_t st = ctx ? hyprof_abundances(ctx, em, x, method, &a) : HYPROF_ERR_NOMEM;
    size_t npix = x->width * x->height;
    if (st == HYPROF_OK)
        memcpy(out, (const float *)a.data + (size_t)(k - 1) * npix, npix * sizeof *out);
    else if (ctx)
        CPLError(CE_Failure, CPLE_AppDefined, NAME ": %s", hyprof_ctx_last_error(ctx));
    hyprof_cube_free(&a);
    hyprof_ctx_free(&ctx);
    return st == HYPROF_OK ? CE_None : CE_Failure;
}

static CPLErr abundance(void **sources, int nsources, void *data, int w, int h,
                        GDALDataType stype, GDALDataType btype, int pspace, int lspace,
                        CSLConstList args)
{
    long k;
    int has_nd;
    double nd;
    hyprof_abundance_method_t method;
    if (hyprof_pixfn_int(NAME, args, "endmember", 0, 1, 1, 100000, &k) != CE_None ||
        method_arg(args, &method) != CE_None ||
        hyprof_pixfn_nodata(NAME, args, &has_nd, &nd) != CE_None)
        return CE_Failure;
    char *path = hyprof_pixfn_file(NAME, args, "endmembers");
    const hyprof_endmembers_t *em =
        path ? hyprof_model_acquire(NAME, &hyprof_model_endmembers, path) : NULL;
    CPLErr err = em ? check(em, path, nsources, k) : CE_Failure;
    abundance_user_t u = {em, method, k};
    if (err == CE_None)
        err = hyprof_pixfn_apply(NAME, sources, nsources, data, w, h, stype, btype, pspace,
                                 lspace, has_nd, nd, unmix, &u);
    hyprof_model_release(em);
    CPLFree(path);
    return err;
}

const hyprof_pixfn_t hyprof_pixfn_abundance = {
    NAME, abundance,
    "<PixelFunctionArgumentsList>"
    "<Argument name='endmembers' type='string' description='endmember set: the CSV written by "
    "hyprof unmix (band, wavelength, E1..Ep), with as many bands as the sources; relative "
    "paths: the current folder, then HYPROF_MODEL_PATH' mandatory='true'/>"
    "<Argument name='method' type='string-select' default='fcls' description='fcls: "
    "non-negative, summing to one; nnls: non-negative; ucls: unconstrained least squares'>"
    "<Value>fcls</Value><Value>nnls</Value><Value>ucls</Value></Argument>"
    "<Argument name='endmember' type='integer' description='endmember whose abundance to "
    "output, 1-based (band K of hyprof unmix --model)' default='1'/>"
    "<Argument name='nodata' type='double' description='input nodata: pixels where any source "
    "equals it (or is NaN) become nodata (NaN without it)'/>"
    "</PixelFunctionArgumentsList>"};
