/* classify through the HYPROF driver: the class values of a saved classifier
 * (`hyprof train`) for every pixel of the input, as `hyprof classify` writes
 * them (0 where the input is nodata), served as one float32 band with nodata
 * 0. The registry's classify has no raster -> raster runner (the CLI writes
 * the colour table and class names around the library's hyprof_classify);
 * the driver calls hyprof_classify itself, with the model from the model
 * cache the pixel functions share. Naming the model in a dataset name (a
 * descriptor or a connection string in a VRT source) is what lets a VRT give
 * its path relative to itself, which a pixel function argument cannot.
 *
 * A model trained by `train --search` records its profile recipe: given the
 * raw cube (the model's input band count), the driver computes the profile
 * first, as `hyprof classify` does (hyprof_classify_input).
 *
 * Opening loads the model and checks it against the input's band count, so
 * a missing, unreadable or mismatched model fails at open. */
#include "driver.h"
#include "model_cache.h"

#include <cpl_error.h>
#include <cpl_string.h>

#include <string.h>

#define WHO "HYPROF: classify"

int hyprof_gdal_is_classify(const hyprof_op_t *op)
{
    return strcmp(op->name, "classify") == 0;
}

static const hyprof_classifier_t *acquire(const hyprof_gdal_source_t *src)
{
    const char *path = hyprof_args_str(src->args, "model");
    if (!path) {
        CPLError(CE_Failure, CPLE_IllegalArg, WHO ": parameter 'model' is missing");
        return NULL;
    }
    return hyprof_model_acquire(WHO, &hyprof_model_classifier, path);
}

int hyprof_gdal_classify_open(hyprof_gdal_source_t *src)
{
    const hyprof_classifier_t *m = acquire(src);
    if (!m)
        return 0;
    size_t bands = hyprof_classifier_bands(m);
    size_t raw = hyprof_classifier_profile(m) ? hyprof_classifier_input_bands(m) : 0;
    hyprof_model_release(m);
    if (bands != (size_t)src->in_bands && raw != (size_t)src->in_bands) {
        CPLError(CE_Failure, CPLE_IllegalArg, WHO ": model '%s' was trained on %zu bands but "
                 "the input '%s' has %d", hyprof_args_str(src->args, "model"), bands,
                 src->input, src->in_bands);
        return 0;
    }
    src->bands = 1;
    src->band_names = CSLAddString(NULL, "class");
    src->nodata_known = src->has_nodata = 1;
    src->nodata = 0.0;
    return 1;
}

/* The uint16 class map as float32 values, 0 where the input is invalid. */
static hyprof_status_t to_result(const hyprof_cube_t *in, const hyprof_cube_t *map,
                                 hyprof_result_t *out)
{
    hyprof_status_t st = hyprof_result_alloc(out, in->width, in->height, 1, NULL);
    if (st == HYPROF_OK)
        st = hyprof_result_set_band_name(out, 0, "class");
    if (st != HYPROF_OK)
        return st;
    const uint16_t *labels = map->data;
    float *v = out->cube.data;
    for (size_t i = 0, n = in->width * in->height; i < n; i++)
        v[i] = in->mask && !in->mask[i] ? 0.0f : (float)labels[i];
    out->cube.has_nodata = 1;
    out->cube.nodata = 0.0;
    return HYPROF_OK;
}

int hyprof_gdal_classify_run(hyprof_ctx_t *ctx, const hyprof_gdal_source_t *src,
                             const hyprof_cube_t *in, hyprof_result_t *out)
{
    const hyprof_classifier_t *m = acquire(src);
    if (!m)
        return 0;
    hyprof_cube_t map = {0};
    hyprof_status_t st = hyprof_classify_input(ctx, m, in, &map, NULL);
    if (st != HYPROF_OK)
        CPLError(CE_Failure, CPLE_AppDefined, WHO ": model '%s': %s",
                 hyprof_args_str(src->args, "model"), hyprof_ctx_last_error(ctx));
    else if ((st = to_result(in, &map, out)) != HYPROF_OK)
        CPLError(CE_Failure, CPLE_OutOfMemory, WHO ": out of memory");
    hyprof_cube_free(&map);
    hyprof_model_release(m);
    return st == HYPROF_OK;
}
