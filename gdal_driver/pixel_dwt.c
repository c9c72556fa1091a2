/* hyprof_dwt: one approximation coefficient of the spectral DWT of the
 * sources, as `hyprof dwt` computes it (wavelet and levels parsed and
 * checked by the registry's `dwt` parameters). */
#include "pixfn.h"

#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>

#include <string.h>

#define NAME "hyprof_dwt"

/* wavelet= and levels= through the registry: its defaults, ranges and
 * choices, declared once. */
static hyprof_args_t *parse(CSLConstList args)
{
    hyprof_args_t *a = hyprof_args_new(hyprof_op_find("dwt"));
    static const char *const names[] = {"wavelet", "levels"};
    if (!a) {
        CPLError(CE_Failure, CPLE_OutOfMemory, NAME ": out of memory");
        return NULL;
    }
    for (size_t i = 0; i < 2; i++) {
        const char *v = CSLFetchNameValue(args, names[i]);
        if (v && hyprof_args_set(a, names[i], v) != HYPROF_OK) {
            CPLError(CE_Failure, CPLE_IllegalArg, NAME ": %s", hyprof_args_error(a));
            hyprof_args_free(&a);
            return NULL;
        }
    }
    return a;
}

typedef struct {
    const hyprof_args_t *args;
    long coefficient;
} dwt_user_t;

static CPLErr run(void *user, const hyprof_cube_t *x, float *out)
{
    const hyprof_args_t *a = ((const dwt_user_t *)user)->args;
    long coefficient = ((const dwt_user_t *)user)->coefficient;
    const hyprof_wavelet_t *w = hyprof_wavelet_find(hyprof_args_str(a, "wavelet"));
    int levels = (int)hyprof_args_int(a, "levels");
    size_t nb = x->bands >= 2 && levels <= hyprof_dwt_max_levels(x->bands)
                    ? hyprof_dwt_bands(x->bands, levels) : 0;
    if (nb && (size_t)coefficient > nb) {
        CPLError(CE_Failure, CPLE_IllegalArg,
                 NAME ": argument coefficient=%ld is out of range: %zu sources at %d levels "
                 "give %zu coefficients", coefficient, x->bands, levels, nb);
        return CE_Failure;
    }
    hyprof_ctx_t *ctx = hyprof_pixfn_ctx(NAME);
    hyprof_cube_t c = {0};
    CPLErr err = CE_Failure;
    if (ctx && hyprof_dwt_spectral(ctx, x, w, levels, &c) != HYPROF_OK)
        CPLError(CE_Failure, CPLE_IllegalArg, NAME ": %s", hyprof_ctx_last_error(ctx));
    else if (ctx) {
        size_t npix = x->width * x->height;
        memcpy(out, (float *)c.data + (size_t)(coefficient - 1) * npix, npix * sizeof *out);
        err = CE_None;
    }
    hyprof_cube_free(&c);
    hyprof_ctx_free(&ctx);
    return err;
}

static CPLErr dwt(void **sources, int nsources, void *data, int w, int h, GDALDataType stype,
                  GDALDataType btype, int pspace, int lspace, CSLConstList args)
{
    long coefficient;
    int has_nd;
    double nd;
    if (hyprof_pixfn_int(NAME, args, "coefficient", 0, 1, 1, 1000000, &coefficient) != CE_None ||
        hyprof_pixfn_nodata(NAME, args, &has_nd, &nd) != CE_None)
        return CE_Failure;
    hyprof_args_t *a = parse(args);
    if (!a)
        return CE_Failure;
    dwt_user_t u = {a, coefficient};
    CPLErr err = hyprof_pixfn_apply(NAME, sources, nsources, data, w, h, stype, btype, pspace,
                                    lspace, has_nd, nd, run, &u);
    hyprof_args_free(&a);
    return err;
}

const hyprof_pixfn_t hyprof_pixfn_dwt = {
    NAME, dwt,
    "<PixelFunctionArgumentsList>"
    "<Argument name='wavelet' type='string' description='wavelet, as hyprof dwt --wavelet "
    "(haar, db2, ..., bior4.4), same default'/>"
    "<Argument name='levels' type='integer' description='decomposition levels, as hyprof dwt "
    "--levels, same default and range'/>"
    "<Argument name='coefficient' type='integer' description='approximation coefficient to "
    "output, 1-based (band A&lt;k&gt; of hyprof dwt)' default='1'/>"
    "<Argument name='nodata' type='double' description='input nodata: pixels where any source "
    "equals it (or is NaN) become nodata (NaN without it)'/>"
    "</PixelFunctionArgumentsList>"};
