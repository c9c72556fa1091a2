/* hyprof_decision: the score of one class of a saved classifier, band K of
 * `hyprof classify --probabilities`: the fraction of the one-vs-one votes the
 * class won (SVM) or the softmax of the output layer (ELM). */
#include "pixfn.h"

#include <cpl_conv.h>

#include <string.h>

#define NAME "hyprof_decision"

static CPLErr decision(void **sources, int nsources, void *data, int w, int h,
                       GDALDataType stype, GDALDataType btype, int pspace, int lspace,
                       CSLConstList args)
{
    long klass;
    hyprof_pixfn_classified_t c;
    memset(&c, 0, sizeof c);
    CPLErr err = hyprof_pixfn_int(NAME, args, "class", 1, 0, 1, 65535, &klass);
    if (err == CE_None)
        err = hyprof_pixfn_classify_window(NAME, args, sources, nsources, w, h, stype, klass,
                                           1, &c);
    size_t npix = (size_t)w * (size_t)h;
    float *out = NULL;
    if (err == CE_None && !(out = VSI_MALLOC2_VERBOSE(npix ? npix : 1, sizeof *out)))
        err = CE_Failure;
    if (err == CE_None) {
        memcpy(out, (const float *)c.scores.data + (size_t)(klass - 1) * npix, npix * sizeof *out);
        hyprof_pixfn_finish(out, c.x.mask, npix, c.has_nodata, c.nodata);
        hyprof_pixfn_write(out, data, w, h, btype, pspace, lspace);
    }
    VSIFree(out);
    hyprof_pixfn_classified_free(&c);
    return err;
}

const hyprof_pixfn_t hyprof_pixfn_decision = {
    NAME, decision,
    "<PixelFunctionArgumentsList>"
    "<Argument name='model' type='string' description='classifier model file written by "
    "hyprof train (SVM or ELM); relative paths: the current folder, then HYPROF_MODEL_PATH' "
    "mandatory='true'/>"
    "<Argument name='class' type='integer' description='1-based position of the class in the "
    "model (band K of hyprof classify --probabilities); SVM: fraction of the one-vs-one votes "
    "it won, ELM: softmax of the output layer' mandatory='true'/>"
    "<Argument name='nodata' type='double' description='input nodata: pixels where any source "
    "equals it (or is NaN) become nodata (NaN without it)'/>"
    "</PixelFunctionArgumentsList>"};
