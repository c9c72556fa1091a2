/* What hyprof_classify and hyprof_decision share: the model from the cache,
 * its checks, and the whole window classified in one library call. */
#include "model_cache.h"
#include "pixfn.h"

#include <cpl_conv.h>
#include <cpl_error.h>

#include <string.h>

static CPLErr check(const char *fname, const hyprof_classifier_t *m, const char *path,
                    int nsources, long klass)
{
    if (hyprof_classifier_bands(m) != (size_t)nsources) {
        CPLError(CE_Failure, CPLE_IllegalArg,
                 "%s: model '%s' was trained on %zu bands but the band has %d sources", fname,
                 path, hyprof_classifier_bands(m), nsources);
        return CE_Failure;
    }
    if (klass > 0 && (size_t)klass > hyprof_classifier_classes(m)) {
        CPLError(CE_Failure, CPLE_IllegalArg,
                 "%s: argument class=%ld is out of range: model '%s' has %zu classes", fname,
                 klass, path, hyprof_classifier_classes(m));
        return CE_Failure;
    }
    return CE_None;
}

/* The library picks the backend (HYPROF_BACKEND, else the device when there
 * is one): unlike a projection, an SVM window is worth the device, and its
 * labels are LIBSVM's on either backend. */
static CPLErr run(const char *fname, hyprof_pixfn_classified_t *c, int want_scores)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    if (!ctx) {
        CPLError(CE_Failure, CPLE_OutOfMemory, "%s: out of memory", fname);
        return CE_Failure;
    }
    hyprof_status_t st =
        hyprof_classify(ctx, c->model, &c->x, &c->map, want_scores ? &c->scores : NULL);
    if (st != HYPROF_OK)
        CPLError(CE_Failure, CPLE_AppDefined, "%s: model '%s': %s", fname, c->path,
                 hyprof_ctx_last_error(ctx));
    hyprof_ctx_free(&ctx);
    return st == HYPROF_OK ? CE_None : CE_Failure;
}

CPLErr hyprof_pixfn_classify_window(const char *fname, CSLConstList args, void **sources,
                                    int nsources, int width, int height, GDALDataType type,
                                    long klass, int want_scores, hyprof_pixfn_classified_t *out)
{
    memset(out, 0, sizeof *out);
    if (hyprof_pixfn_nodata(fname, args, &out->has_nodata, &out->nodata) != CE_None)
        return CE_Failure;
    out->path = hyprof_pixfn_file(fname, args, "model");
    if (out->path)
        out->model = hyprof_model_acquire(fname, &hyprof_model_classifier, out->path);
    CPLErr err = out->model ? check(fname, out->model, out->path, nsources, klass) : CE_Failure;
    if (err == CE_None &&
        hyprof_pixfn_sources(fname, sources, nsources, width, height, type, out->has_nodata,
                             out->nodata, &out->x) != HYPROF_OK)
        err = CE_Failure;
    return err == CE_None ? run(fname, out, want_scores) : err;
}

void hyprof_pixfn_classified_free(hyprof_pixfn_classified_t *c)
{
    hyprof_cube_free(&c->scores);
    hyprof_cube_free(&c->map);
    hyprof_cube_free(&c->x);
    hyprof_model_release(c->model);
    CPLFree(c->path);
    memset(c, 0, sizeof *c);
}
