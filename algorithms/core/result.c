/* Results of raster operations: the output cube, band names, metadata. */
#include "internal.h"
#include "hyprof/registry.h"

#include "ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hyprof_result_init(hyprof_result_t *res) { memset(res, 0, sizeof *res); }

void hyprof_result_free(hyprof_result_t *res)
{
    if (!res)
        return;
    for (size_t b = 0; res->band_names && b < res->cube.bands; b++)
        free(res->band_names[b]);
    free(res->band_names);
    for (size_t i = 0; i < res->nmeta; i++) {
        free(res->meta_keys[i]);
        free(res->meta_values[i]);
    }
    free(res->meta_keys);
    free(res->meta_values);
    hyprof_cube_free(&res->cube);
    hyprof_result_init(res);
}

hyprof_status_t hyprof__result_adopt(hyprof_result_t *res, const hyprof_cube_t *like)
{
    free(res->band_names);
    res->band_names = calloc(res->cube.bands, sizeof *res->band_names);
    if (!res->band_names)
        return HYPROF_ERR_NOMEM;
    return like ? hyprof__cube_copy_mask(&res->cube, like) : HYPROF_OK;
}

hyprof_status_t hyprof_result_alloc(hyprof_result_t *res, size_t width, size_t height,
                                    size_t bands, const hyprof_cube_t *like)
{
    hyprof_status_t st = hyprof_cube_alloc(&res->cube, HYPROF_FLOAT32, width, height, bands);
    if (st != HYPROF_OK)
        return st;
    return hyprof__result_adopt(res, like);
}

static char *vformat(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

/* *slot becomes the formatted text (its old text freed). */
static hyprof_status_t set_text(char **slot, const char *fmt, va_list ap)
{
    char *s = vformat(fmt, ap);
    if (!s)
        return HYPROF_ERR_NOMEM;
    free(*slot);
    *slot = s;
    return HYPROF_OK;
}

hyprof_status_t hyprof_result_set_band_name(hyprof_result_t *res, size_t band,
                                            const char *fmt, ...)
{
    if (band >= res->cube.bands || !res->band_names)
        return HYPROF_ERR_ARGUMENT;
    va_list ap;
    va_start(ap, fmt);
    hyprof_status_t st = set_text(&res->band_names[band], fmt, ap);
    va_end(ap);
    return st;
}

hyprof_status_t hyprof_result_add_meta(hyprof_result_t *res, const char *key, const char *fmt,
                                       ...)
{
    char **k = realloc(res->meta_keys, (res->nmeta + 1) * sizeof *k);
    if (!k)
        return HYPROF_ERR_NOMEM;
    res->meta_keys = k;
    char **v = realloc(res->meta_values, (res->nmeta + 1) * sizeof *v);
    if (!v)
        return HYPROF_ERR_NOMEM;
    res->meta_values = v;
    va_list ap;
    va_start(ap, fmt);
    char *val = vformat(fmt, ap);
    va_end(ap);
    char *kk = strdup(key);
    if (!val || !kk) {
        free(val);
        free(kk);
        return HYPROF_ERR_NOMEM;
    }
    res->meta_keys[res->nmeta] = kk;
    res->meta_values[res->nmeta] = val;
    res->nmeta++;
    return HYPROF_OK;
}

hyprof_status_t hyprof__name(char **names, size_t i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hyprof_status_t st = set_text(&names[i], fmt, ap);
    va_end(ap);
    return st;
}
