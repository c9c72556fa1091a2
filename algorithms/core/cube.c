/* Cube views: BSQ allocation, windows, conversion to float32 BSQ, masks. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

hyprof_cube_t hyprof_cube_bsq(void *data, hyprof_dtype_t dtype, size_t width,
                              size_t height, size_t bands)
{
    hyprof_cube_t c;
    memset(&c, 0, sizeof c);
    c.data = data;
    c.dtype = dtype;
    c.width = width;
    c.height = height;
    c.bands = bands;
    c.stride_x = 1;
    c.stride_y = (ptrdiff_t)width;
    c.stride_b = (ptrdiff_t)(width * height);
    c.mask_stride_y = (ptrdiff_t)width;
    return c;
}

/* Overflow-checked product of the three sizes. */
static int cube_elems(size_t w, size_t h, size_t b, size_t esize, size_t *bytes)
{
    size_t n = w;
    if (h && n > SIZE_MAX / h)
        return 0;
    n *= h;
    if (b && n > SIZE_MAX / b)
        return 0;
    n *= b;
    if (esize && n > SIZE_MAX / esize)
        return 0;
    *bytes = n * esize;
    return 1;
}

int hyprof__cube_bytes(hyprof_dtype_t dtype, size_t width, size_t height, size_t bands,
                       size_t *bytes)
{
    return hyprof_dtype_size(dtype) &&
           cube_elems(width, height, bands, hyprof_dtype_size(dtype), bytes);
}

hyprof_status_t hyprof_cube_alloc(hyprof_cube_t *cube, hyprof_dtype_t dtype, size_t width,
                                  size_t height, size_t bands)
{
    size_t bytes;
    *cube = hyprof_cube_bsq(NULL, dtype, width, height, bands);
    if (!hyprof_dtype_size(dtype) || !cube_elems(width, height, bands, hyprof_dtype_size(dtype),
                                                 &bytes))
        return HYPROF_ERR_ARGUMENT;
    cube->data = calloc(bytes ? bytes : 1, 1);
    if (!cube->data)
        return HYPROF_ERR_NOMEM;
    cube->owns = HYPROF_OWNS_DATA;
    return HYPROF_OK;
}

hyprof_status_t hyprof_cube_alloc_mask(hyprof_cube_t *cube)
{
    size_t n = cube->width * cube->height;
    uint8_t *m = malloc(n ? n : 1);
    if (!m)
        return HYPROF_ERR_NOMEM;
    memset(m, 1, n);
    if (cube->owns & HYPROF_OWNS_MASK)
        free(cube->mask);
    cube->mask = m;
    cube->mask_stride_y = (ptrdiff_t)cube->width;
    cube->owns |= HYPROF_OWNS_MASK;
    return HYPROF_OK;
}

void hyprof_cube_free(hyprof_cube_t *cube)
{
    if (!cube)
        return;
    if (cube->owns & HYPROF_OWNS_PINNED)
        hyprof__pinned_release(cube->data);
    else if (cube->owns & HYPROF_OWNS_DATA)
        free(cube->data);
    if (cube->owns & HYPROF_OWNS_MASK)
        free(cube->mask);
    memset(cube, 0, sizeof *cube);
}

hyprof_status_t hyprof_cube_check(const hyprof_cube_t *cube, char *why, size_t why_len)
{
    const char *reason = NULL;
    size_t bytes;
    if (!cube)
        reason = "no cube";
    else if (!cube->data)
        reason = "cube has no data";
    else if (!hyprof_dtype_size(cube->dtype))
        reason = "unknown data type";
    else if (cube->width == 0 || cube->height == 0 || cube->bands == 0)
        reason = "cube has a zero dimension";
    else if (!cube_elems(cube->width, cube->height, cube->bands, hyprof_dtype_size(cube->dtype),
                         &bytes))
        reason = "cube size overflows";
    else if (cube->stride_x == 0 || cube->stride_y == 0 || cube->stride_b == 0)
        reason = "cube has a zero stride";
    else if (cube->mask && (size_t)llabs((long long)cube->mask_stride_y) < cube->width)
        reason = "mask row stride is smaller than the width";
    if (reason && why && why_len) {
        if (cube && cube->data && (cube->width == 0 || cube->height == 0 || cube->bands == 0))
            snprintf(why, why_len, "%s (%zux%zux%zu)", reason, cube->width, cube->height,
                     cube->bands);
        else
            snprintf(why, why_len, "%s", reason);
    }
    return reason ? HYPROF_ERR_ARGUMENT : HYPROF_OK;
}

int hyprof_cube_is_f32_bsq(const hyprof_cube_t *cube)
{
    return cube->dtype == HYPROF_FLOAT32 && cube->stride_x == 1 &&
           cube->stride_y == (ptrdiff_t)cube->width &&
           cube->stride_b == (ptrdiff_t)(cube->width * cube->height) &&
           (!cube->mask || cube->mask_stride_y == (ptrdiff_t)cube->width);
}

void *hyprof_cube_at(const hyprof_cube_t *cube, size_t x, size_t y, size_t b)
{
    ptrdiff_t off = (ptrdiff_t)x * cube->stride_x + (ptrdiff_t)y * cube->stride_y +
                    (ptrdiff_t)b * cube->stride_b;
    return (char *)cube->data + off * (ptrdiff_t)hyprof_dtype_size(cube->dtype);
}

double hyprof_cube_get(const hyprof_cube_t *cube, size_t x, size_t y, size_t b)
{
    const void *p = hyprof_cube_at(cube, x, y, b);
    switch (cube->dtype) {
    case HYPROF_FLOAT32: return *(const float *)p;
    case HYPROF_FLOAT64: return *(const double *)p;
    case HYPROF_UINT8: return *(const uint8_t *)p;
    case HYPROF_UINT16: return *(const uint16_t *)p;
    case HYPROF_INT16: return *(const int16_t *)p;
    case HYPROF_INT32: return *(const int32_t *)p;
    }
    return NAN;
}

int hyprof_cube_valid(const hyprof_cube_t *cube, size_t x, size_t y)
{
    return !cube->mask || cube->mask[(ptrdiff_t)y * cube->mask_stride_y + (ptrdiff_t)x];
}

hyprof_cube_t hyprof_cube_band(const hyprof_cube_t *cube, size_t b)
{
    hyprof_cube_t v = *cube;
    v.owns = 0;
    v.bands = 1;
    v.data = hyprof_cube_at(cube, 0, 0, b);
    return v;
}

hyprof_status_t hyprof_cube_window(const hyprof_cube_t *cube, size_t x0, size_t y0,
                                   size_t width, size_t height, hyprof_cube_t *view)
{
    if (width == 0 || height == 0 || x0 > cube->width || y0 > cube->height ||
        width > cube->width - x0 || height > cube->height - y0)
        return HYPROF_ERR_ARGUMENT;
    *view = *cube;
    view->owns = 0;
    view->data = hyprof_cube_at(cube, x0, y0, 0);
    view->width = width;
    view->height = height;
    if (cube->mask)
        view->mask = cube->mask + (ptrdiff_t)y0 * cube->mask_stride_y + (ptrdiff_t)x0;
    return HYPROF_OK;
}

hyprof_status_t hyprof_cube_to_f32_bsq(const hyprof_cube_t *cube, hyprof_cube_t *out)
{
    hyprof_status_t st = hyprof_cube_alloc(out, HYPROF_FLOAT32, cube->width, cube->height,
                                           cube->bands);
    if (st != HYPROF_OK)
        return st;
    out->nodata = cube->nodata;
    out->has_nodata = cube->has_nodata;
    float *d = out->data;
    size_t w = cube->width, h = cube->height;
    for (size_t b = 0; b < cube->bands; b++)
        for (size_t y = 0; y < h; y++)
            for (size_t x = 0; x < w; x++)
                d[(b * h + y) * w + x] = (float)hyprof_cube_get(cube, x, y, b);
    if (cube->mask) {
        if ((st = hyprof_cube_alloc_mask(out)) != HYPROF_OK) {
            hyprof_cube_free(out);
            return st;
        }
        for (size_t y = 0; y < h; y++)
            memcpy(out->mask + y * w, cube->mask + (ptrdiff_t)y * cube->mask_stride_y, w);
    }
    return HYPROF_OK;
}

size_t hyprof_cube_mask_invalid(hyprof_cube_t *cube)
{
    size_t w = cube->width, h = cube->height, valid = 0;
    if (!cube->mask && hyprof_cube_alloc_mask(cube) != HYPROF_OK)
        return hyprof_cube_count_valid(cube);
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++) {
            uint8_t *m = &cube->mask[(ptrdiff_t)y * cube->mask_stride_y + (ptrdiff_t)x];
            for (size_t b = 0; *m && b < cube->bands; b++) {
                double v = hyprof_cube_get(cube, x, y, b);
                if (!isfinite(v) || (cube->has_nodata && v == cube->nodata))
                    *m = 0;
            }
            valid += *m != 0;
        }
    return valid;
}

size_t hyprof_cube_count_valid(const hyprof_cube_t *cube)
{
    if (!cube->mask)
        return cube->width * cube->height;
    size_t valid = 0;
    for (size_t y = 0; y < cube->height; y++)
        for (size_t x = 0; x < cube->width; x++)
            valid += hyprof_cube_valid(cube, x, y) != 0;
    return valid;
}

hyprof_status_t hyprof__input_f32(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *in,
                                  hyprof_cube_t *tmp, const hyprof_cube_t **bsq)
{
    char why[160];
    memset(tmp, 0, sizeof *tmp);
    if (hyprof_cube_check(in, why, sizeof why) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "bad input cube: %s", why);
    if (hyprof_cube_count_valid(in) == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                             "the input has no valid pixel: all %zu are nodata",
                             in->width * in->height);
    if (hyprof_cube_is_f32_bsq(in)) {
        *bsq = in;
        return HYPROF_OK;
    }
    hyprof_status_t st = hyprof_cube_to_f32_bsq(in, tmp);
    if (st != HYPROF_OK)
        return hyprof__error(ctx, st, op, "cannot convert the input to float32 (%zux%zux%zu)",
                             in->width, in->height, in->bands);
    *bsq = tmp;
    return HYPROF_OK;
}

hyprof_status_t hyprof__cube_copy_mask(hyprof_cube_t *dst, const hyprof_cube_t *src)
{
    dst->has_nodata = src->has_nodata;
    dst->nodata = src->nodata;
    if (!src->mask)
        return HYPROF_OK;
    hyprof_status_t st = hyprof_cube_alloc_mask(dst);
    if (st != HYPROF_OK)
        return st;
    for (size_t y = 0; y < dst->height; y++)
        memcpy(dst->mask + y * dst->width, src->mask + (ptrdiff_t)y * src->mask_stride_y,
               dst->width);
    /* Masked pixels need a nodata value: the source's, or NaN if it had none. */
    if (!dst->has_nodata && hyprof_cube_count_valid(dst) < dst->width * dst->height) {
        dst->has_nodata = 1;
        dst->nodata = NAN;
    }
    return HYPROF_OK;
}

/* One row of a float cube: 1 when a value is NaN or infinite (its exponent
 * bits all set). Integer tests, so the loop vectorises without fast math. */
static int row_nonfinite(const hyprof_cube_t *c, size_t y, size_t b)
{
    unsigned bad = 0;
    if (c->dtype == HYPROF_FLOAT32) {
        const uint32_t *p = hyprof_cube_at(c, 0, y, b);
        if (c->stride_x == 1) /* the common layout: a loop the compiler vectorises */
            for (size_t x = 0; x < c->width; x++)
                bad |= (p[x] & 0x7f800000u) == 0x7f800000u;
        else
            for (size_t x = 0; x < c->width; x++)
                bad |= (p[(ptrdiff_t)x * c->stride_x] & 0x7f800000u) == 0x7f800000u;
    } else {
        const uint64_t *p = hyprof_cube_at(c, 0, y, b);
        const uint64_t e = 0x7ff0000000000000ull;
        for (size_t x = 0; x < c->width; x++)
            bad |= (p[(ptrdiff_t)x * c->stride_x] & e) == e;
    }
    return bad != 0;
}

int hyprof_cube_all_finite(const hyprof_cube_t *cube, int threads)
{
    if (cube->dtype != HYPROF_FLOAT32 && cube->dtype != HYPROF_FLOAT64)
        return 1;
    const long rows = (long)(cube->bands * cube->height);
    int bad = 0;
    if (threads <= 0) {
#ifdef _OPENMP
        threads = omp_get_num_procs();
#else
        threads = 1;
#endif
    }
#pragma omp parallel for schedule(static) reduction(| : bad) num_threads(threads) if (rows > 64)
    for (long r = 0; r < rows; r++)
        bad |= row_nonfinite(cube, (size_t)r % cube->height, (size_t)r / cube->height);
    return !bad;
}
