/* hyprof_scale: linear scaling of one source, value * scale + offset in
 * double, nodata kept (e.g. reflectance from scaled integers, or a feature
 * brought to a display range). */
#include "pixfn.h"

#include <cpl_conv.h>
#include <cpl_error.h>

#include <float.h>
#include <math.h>

#define NAME "hyprof_scale"

static CPLErr scale(void **sources, int nsources, void *data, int w, int h, GDALDataType stype,
                    GDALDataType btype, int pspace, int lspace, CSLConstList args)
{
    double a, b, nd;
    int has_nd;
    if (nsources != 1) {
        CPLError(CE_Failure, CPLE_IllegalArg, NAME ": the band has %d sources; it takes 1",
                 nsources);
        return CE_Failure;
    }
    if (hyprof_pixfn_double(NAME, args, "scale", 0, 1.0, -DBL_MAX, DBL_MAX, &a) != CE_None ||
        hyprof_pixfn_double(NAME, args, "offset", 0, 0.0, -DBL_MAX, DBL_MAX, &b) != CE_None ||
        hyprof_pixfn_nodata(NAME, args, &has_nd, &nd) != CE_None)
        return CE_Failure;
    hyprof_cube_t x = {0};
    size_t npix = (size_t)w * (size_t)h;
    double *out = NULL;
    if (hyprof_pixfn_sources(NAME, sources, 1, w, h, stype, has_nd, nd, &x) != HYPROF_OK ||
        !(out = VSI_MALLOC2_VERBOSE(npix ? npix : 1, sizeof *out))) {
        hyprof_cube_free(&x);
        return CE_Failure;
    }
    const float *v = x.data;
    for (size_t i = 0; i < npix; i++)
        out[i] = x.mask[i] ? (double)v[i] * a + b : nd;
    hyprof_pixfn_write64(out, data, w, h, btype, pspace, lspace);
    VSIFree(out);
    hyprof_cube_free(&x);
    return CE_None;
}

const hyprof_pixfn_t hyprof_pixfn_scale = {
    NAME, scale,
    "<PixelFunctionArgumentsList>"
    "<Argument name='scale' type='double' description='factor' default='1'/>"
    "<Argument name='offset' type='double' description='added after the factor' default='0'/>"
    "<Argument name='nodata' type='double' description='input nodata: kept as is (NaN and "
    "infinities become NaN without it)'/>"
    "</PixelFunctionArgumentsList>"};
