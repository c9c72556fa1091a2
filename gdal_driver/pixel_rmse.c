/* hyprof_rmse: per-pixel root mean square difference between two stacks of
 * N bands, the first N sources against the last N (a reconstruction against
 * its original, two profiles...). */
#include "pixfn.h"

#include <cpl_conv.h>
#include <cpl_error.h>

#include <math.h>

#define NAME "hyprof_rmse"

static CPLErr rmse(void **sources, int nsources, void *data, int w, int h, GDALDataType stype,
                   GDALDataType btype, int pspace, int lspace, CSLConstList args)
{
    double nd;
    int has_nd;
    if (nsources < 2 || nsources % 2) {
        CPLError(CE_Failure, CPLE_IllegalArg,
                 NAME ": the band has %d sources; it needs an even number, 2 or more (two "
                 "stacks of the same bands)", nsources);
        return CE_Failure;
    }
    if (hyprof_pixfn_nodata(NAME, args, &has_nd, &nd) != CE_None)
        return CE_Failure;
    hyprof_cube_t x = {0};
    size_t npix = (size_t)w * (size_t)h, n = (size_t)nsources / 2;
    double *out = NULL;
    if (hyprof_pixfn_sources(NAME, sources, nsources, w, h, stype, has_nd, nd, &x) != HYPROF_OK ||
        !(out = VSI_CALLOC_VERBOSE(npix ? npix : 1, sizeof *out))) {
        hyprof_cube_free(&x);
        return CE_Failure;
    }
    const float *v = x.data;
    for (size_t b = 0; b < n; b++) {
        const float *p = v + b * npix, *q = v + (b + n) * npix;
        for (size_t i = 0; i < npix; i++) {
            double d = (double)p[i] - (double)q[i];
            out[i] += d * d;
        }
    }
    for (size_t i = 0; i < npix; i++)
        out[i] = x.mask[i] ? sqrt(out[i] / (double)n) : nd;
    hyprof_pixfn_write64(out, data, w, h, btype, pspace, lspace);
    VSIFree(out);
    hyprof_cube_free(&x);
    return CE_None;
}

const hyprof_pixfn_t hyprof_pixfn_rmse = {
    NAME, rmse,
    "<PixelFunctionArgumentsList>"
    "<Argument name='nodata' type='double' description='input nodata: pixels where any source "
    "equals it (or is NaN) become nodata (NaN without it)'/>"
    "</PixelFunctionArgumentsList>"};
