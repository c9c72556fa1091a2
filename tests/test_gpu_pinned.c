/* Page-locked caller memory on CUDA (include/hyprof/core.h): every operation
 * that copies straight from a page-locked input (hyprof_cube_alloc_pinned)
 * or into a page-locked output (hyprof_pinned_cache_set) gives bit for bit
 * what it gives from and into pageable memory. The cache is primed with
 * blocks full of 0xff bytes, so an element the operation fails to write
 * shows as a NaN where the pageable run has a value. Ops: eadp (PCA, then
 * the FED on the device), wmcd and emp (DWT, several shares), eap (PCA).
 * Skipped (77) without a device. */
#include "gpu_test_util.h"

#include "hyprof/hyprof.h"

static int make_cube(hyprof_cube_t *c, size_t w, size_t h, size_t bands, int pinned)
{
    hyprof_status_t st = pinned ? hyprof_cube_alloc_pinned(c, HYPROF_FLOAT32, w, h, bands)
                                : hyprof_cube_alloc(c, HYPROF_FLOAT32, w, h, bands);
    if (st != HYPROF_OK)
        return -1;
    g_rng = 4242;
    float *d = c->data;
    for (size_t b = 0; b < bands; b++)
        for (size_t y = 0; y < h; y++)
            for (size_t x = 0; x < w; x++)
                d[(b * h + y) * w + x] =
                    (float)(40.0 * sin((double)x / (5.0 + b)) * cos((double)y / 6.0) +
                            ((x / 7 + y / 11 + b) % 5) * 25.0 + 10.0 * rng_normal());
    /* a few nodata pixels: the masked outputs must be written too */
    c->has_nodata = 1;
    c->nodata = -9999.0;
    for (size_t p = 0; p < w * h; p += 37)
        for (size_t b = 0; b < bands; b++)
            d[b * w * h + p] = -9999.0f;
    hyprof_cube_mask_invalid(c);
    return 0;
}

/* Leaves `bytes` of 0xff-filled page-locked blocks in the cache. */
static void prime_cache(size_t bytes)
{
    hyprof_cube_t junk;
    if (hyprof_cube_alloc_pinned(&junk, HYPROF_UINT8, bytes, 1, 1) != HYPROF_OK) {
        FAIL("cannot allocate %zu page-locked bytes", bytes);
        return;
    }
    memset(junk.data, 0xff, bytes);
    hyprof_cube_free(&junk);
}

static hyprof_status_t run(hyprof_ctx_t *ctx, const char *op, const char *const *kv,
                           const hyprof_cube_t *in, hyprof_result_t *res)
{
    const hyprof_op_t *o = hyprof_op_find(op);
    hyprof_args_t *args = o ? hyprof_args_new(o) : NULL;
    hyprof_result_init(res);
    if (!args)
        return HYPROF_ERR_NOMEM;
    hyprof_status_t st = HYPROF_OK;
    for (; st == HYPROF_OK && kv && kv[0]; kv += 2)
        st = hyprof_args_set(args, kv[0], kv[1]);
    if (st == HYPROF_OK)
        st = hyprof_op_run(ctx, o, args, in, res);
    hyprof_args_free(&args);
    return st;
}

static void check_op(hyprof_ctx_t *gpu, const char *op, const char *const *kv,
                     const hyprof_cube_t *pageable, const hyprof_cube_t *pinned)
{
    hyprof_result_t ref, got;
    if (run(gpu, op, kv, pageable, &ref) != HYPROF_OK) {
        FAIL("%s pageable: %s", op, hyprof_ctx_last_error(gpu));
        hyprof_result_free(&ref);
        return;
    }
    size_t bytes = ref.cube.width * ref.cube.height * ref.cube.bands * sizeof(float);
    hyprof_pinned_cache_set((size_t)1 << 30);
    prime_cache(bytes + 64); /* the output's size: it takes this block */
    hyprof_status_t st = run(gpu, op, kv, pinned, &got);
    g_checks++;
    if (st != HYPROF_OK) {
        FAIL("%s page-locked: %s", op, hyprof_ctx_last_error(gpu));
    } else if (expect_cuda(gpu, op)) {
        g_checks++;
        if (!(got.cube.owns & HYPROF_OWNS_PINNED))
            FAIL("%s: the output is not page-locked with the cache on", op);
        g_checks++;
        if (got.cube.bands != ref.cube.bands) {
            FAIL("%s: %zu bands, expected %zu", op, got.cube.bands, ref.cube.bands);
        } else {
            const float *a = ref.cube.data, *b = got.cube.data;
            size_t n = bytes / sizeof(float), bad = 0, first = 0;
            for (size_t i = 0; i < n; i++)
                if (!same_float(a[i], b[i]) && bad++ == 0)
                    first = i;
            if (bad)
                FAIL("%s: %zu of %zu values differ from the pageable run's (first at %zu: %.9g "
                     "against %.9g)", op, bad, n, first, b[first], a[first]);
            else
                printf("ok   %s: page-locked input and output identical to pageable (%zu "
                       "values)\n", op, n);
        }
    }
    hyprof_result_free(&got);
    hyprof_result_free(&ref);
    hyprof_pinned_cache_set(0);
}

int main(void)
{
    if (hyprof_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return SKIP_CODE;
    }
    hyprof_ctx_t *gpu = hyprof_ctx_new();
    hyprof_ctx_set_backend(gpu, HYPROF_BACKEND_CUDA);
    hyprof_cube_t pageable, pinned;
    if (make_cube(&pageable, 83, 61, 24, 0) || make_cube(&pinned, 83, 61, 24, 1)) {
        printf("cannot build the inputs\n");
        return 1;
    }
    g_checks++;
    if (!(pinned.owns & HYPROF_OWNS_PINNED))
        FAIL("hyprof_cube_alloc_pinned did not page-lock with a device present");
    static const char *const eadp[] = {"components", "3", "count", "3", NULL};
    static const char *const wmcd[] = {"features", "3", NULL};
    static const char *const wmcd2[] = {"features", "3", "devices", "0,0", NULL};
    static const char *const emp[] = {"features", "2", NULL};
    static const char *const eap[] = {"reduction", "pca", "features", "3", NULL};
    check_op(gpu, "eadp", eadp, &pageable, &pinned);
    check_op(gpu, "wmcd", wmcd, &pageable, &pinned);
    check_op(gpu, "wmcd", wmcd2, &pageable, &pinned);
    check_op(gpu, "emp", emp, &pageable, &pinned);
    check_op(gpu, "eap", eap, &pageable, &pinned);
    hyprof_cube_free(&pinned);
    hyprof_cube_free(&pageable);
    hyprof_ctx_free(&gpu);
    printf("%d checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
