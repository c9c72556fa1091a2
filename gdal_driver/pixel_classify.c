/* hyprof_classify: the class labels of a saved classifier (`hyprof train`),
 * as `hyprof classify --model` writes them: 0 where the input is nodata. The
 * whole window is classified in one library call. */
#include "pixfn.h"

#include <cpl_conv.h>

#define NAME "hyprof_classify"

static CPLErr classify(void **sources, int nsources, void *data, int w, int h,
                       GDALDataType stype, GDALDataType btype, int pspace, int lspace,
                       CSLConstList args)
{
    hyprof_pixfn_classified_t c;
    CPLErr err =
        hyprof_pixfn_classify_window(NAME, args, sources, nsources, w, h, stype, 0, 0, &c);
    size_t npix = (size_t)w * (size_t)h;
    float *out = NULL;
    if (err == CE_None && !(out = VSI_MALLOC2_VERBOSE(npix ? npix : 1, sizeof *out)))
        err = CE_Failure;
    if (err == CE_None) {
        const uint16_t *labels = c.map.data;
        for (size_t i = 0; i < npix; i++)
            out[i] = c.x.mask && !c.x.mask[i] ? 0.0f : (float)labels[i];
        hyprof_pixfn_write(out, data, w, h, btype, pspace, lspace);
    }
    VSIFree(out);
    hyprof_pixfn_classified_free(&c);
    return err;
}

const hyprof_pixfn_t hyprof_pixfn_classify = {
    NAME, classify,
    "<PixelFunctionArgumentsList>"
    "<Argument name='model' type='string' description='classifier model file written by "
    "hyprof train (SVM or ELM), trained on as many bands as the sources; relative paths: the "
    "current folder, then HYPROF_MODEL_PATH' mandatory='true'/>"
    "<Argument name='nodata' type='double' description='input nodata: pixels where any source "
    "equals it (or is NaN) get class 0'/>"
    "</PixelFunctionArgumentsList>"};
