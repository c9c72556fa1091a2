/* Shared by the GPU parity tests (tests/test_gpu_*.c): check counters, the
 * FAIL macro, a seeded generator, value comparisons and raw cube loading.
 * Header-only: each test is one translation unit. */
#ifndef HYPROF_GPU_TEST_UTIL_H
#define HYPROF_GPU_TEST_UTIL_H

#include "hyprof/hyprof.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_CODE 77

static int g_checks, g_failures;

#define FAIL(...)                                                                          \
    do {                                                                                   \
        printf("FAIL: ");                                                                  \
        printf(__VA_ARGS__);                                                               \
        printf("\n");                                                                      \
        fflush(stdout);                                                                    \
        g_failures++;                                                                      \
    } while (0)

static uint64_t g_rng;
static uint64_t rng_next(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }

static double rng_normal(void)
{
    double u = rng_uniform(), v = rng_uniform();
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static int pixel_valid(const hyprof_cube_t *c, size_t p)
{
    if (!c->mask)
        return 1;
    size_t y = p / c->width, x = p % c->width;
    return c->mask[(ptrdiff_t)y * c->mask_stride_y + (ptrdiff_t)x] != 0;
}

static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

static int expect_cuda(hyprof_ctx_t *gpu, const char *what)
{
    g_checks++;
    if (hyprof_ctx_used_backend(gpu) != HYPROF_BACKEND_CUDA) {
        FAIL("%s: ran on %s, not cuda", what, hyprof_backend_name(hyprof_ctx_used_backend(gpu)));
        return 0;
    }
    return 1;
}

static int load_raw(const char *path, size_t w, size_t h, size_t b, hyprof_cube_t *cube)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        FAIL("cannot open %s", path);
        return -1;
    }
    if (hyprof_cube_alloc(cube, HYPROF_FLOAT32, w, h, b) != HYPROF_OK) {
        fclose(f);
        FAIL("cannot allocate a %zux%zux%zu cube", w, h, b);
        return -1;
    }
    size_t n = w * h * b, got = fread(cube->data, sizeof(float), n, f);
    fclose(f);
    if (got != n) {
        FAIL("%s: read %zu of %zu floats", path, got, n);
        hyprof_cube_free(cube);
        return -1;
    }
    hyprof_cube_mask_invalid(cube);
    return 0;
}

#endif
