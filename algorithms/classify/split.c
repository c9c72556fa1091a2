/* `split`: reproducible, disjoint training and test pixels per class, drawn
 * exactly as samples/make_samples.py does with NumPy: one
 * numpy.random.default_rng(seed) (SeedSequence -> PCG64), for each class in
 * increasing order u = rng.random(n) over the class's pixels in row-major
 * order, the n_train pixels with the smallest u (stable) for training. */
#include "classifier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "split"

/* ---- numpy.random.SeedSequence(seed).generate_state(4, uint64) ------------------ */

#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L 0xca01f9ddu
#define SS_MIX_R 0x4973f715u
#define SS_POOL 4

static uint32_t hashmix(uint32_t value, uint32_t *hash_const)
{
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> 16;
    return value;
}

static uint32_t mix(uint32_t x, uint32_t y)
{
    uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
    return r ^ (r >> 16);
}

static void seed_sequence(uint64_t seed, uint64_t out[4])
{
    /* The entropy as 32-bit words, least significant first (at least one). */
    uint32_t entropy[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    size_t nent = entropy[1] ? 2 : 1;
    uint32_t pool[SS_POOL], hc = SS_INIT_A;
    for (size_t i = 0; i < SS_POOL; i++)
        pool[i] = hashmix(i < nent ? entropy[i] : 0u, &hc);
    for (size_t s = 0; s < SS_POOL; s++)
        for (size_t d = 0; d < SS_POOL; d++)
            if (s != d)
                pool[d] = mix(pool[d], hashmix(pool[s], &hc));
    uint32_t words[8], hb = SS_INIT_B;
    for (size_t i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL];
        v ^= hb;
        hb *= SS_MULT_B;
        v *= hb;
        v ^= v >> 16;
        words[i] = v;
    }
    for (size_t i = 0; i < 4; i++)
        out[i] = (uint64_t)words[2 * i] | ((uint64_t)words[2 * i + 1] << 32);
}

/* ---- PCG64 (XSL-RR 128/64) and Generator.random() ------------------------------------ */

typedef unsigned __int128 u128;

typedef struct {
    u128 state, inc;
} pcg64_t;

static const u128 PCG_MULT = ((u128)2549297995355413924ull << 64) | 4865540595714422341ull;

static void pcg_step(pcg64_t *r) { r->state = r->state * PCG_MULT + r->inc; }

static void pcg_seed(pcg64_t *r, uint64_t seed)
{
    uint64_t v[4];
    seed_sequence(seed, v);
    u128 initstate = ((u128)v[0] << 64) | v[1], initseq = ((u128)v[2] << 64) | v[3];
    r->state = 0;
    r->inc = (initseq << 1) | 1u;
    pcg_step(r);
    r->state += initstate;
    pcg_step(r);
}

static double pcg_random(pcg64_t *r)
{
    pcg_step(r);
    uint64_t hi = (uint64_t)(r->state >> 64), lo = (uint64_t)r->state;
    unsigned rot = (unsigned)(r->state >> 122);
    uint64_t x = hi ^ lo, v = (x >> rot) | (x << ((64 - rot) & 63));
    return (double)(v >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- the split -------------------------------------------------------------------------- */

static const size_t eadp_table1[17] = {0,  15, 50, 50, 50, 50, 50, 15, 50,
                                       15, 50, 50, 50, 50, 50, 50, 50};

const size_t *hyprof_split_preset_eadp_table1(size_t *ncounts)
{
    if (ncounts)
        *ncounts = 17;
    return eadp_table1;
}

typedef struct {
    double u;
    size_t pixel;
} draw_t;

static int cmp_draw(const void *a, const void *b)
{
    const draw_t *x = a, *y = b;
    if (x->u != y->u)
        return x->u < y->u ? -1 : 1;
    return (x->pixel > y->pixel) - (x->pixel < y->pixel); /* stable */
}

static long value_at(const hyprof_cube_t *c, size_t p)
{
    size_t x = p % c->width, y = p / c->width;
    if (!hyprof_cube_valid(c, x, y))
        return 0;
    double v = hyprof_cube_get(c, x, y, 0);
    if (!isfinite(v) || v < 0 || v > 65535 || v != floor(v))
        return -1;
    return (long)v;
}

static size_t train_count(double per_class, const size_t *counts, size_t ncounts, long v,
                          size_t n)
{
    if (counts)
        return (size_t)v < ncounts ? counts[v] : 0;
    if (per_class >= 1.0)
        return (size_t)per_class;
    size_t k = (size_t)nearbyint(per_class * (double)n); /* ties to even, as numpy.rint */
    return k < 1 ? 1 : k;
}

/* Draws class v's pixels (listed in `pix`, n of them) and marks the split. */
static void split_class(pcg64_t *rng, const size_t *pix, size_t n, size_t ntrain, long v,
                        draw_t *d, uint16_t *train, uint16_t *test)
{
    for (size_t i = 0; i < n; i++) {
        d[i].u = pcg_random(rng);
        d[i].pixel = pix[i];
    }
    qsort(d, n, sizeof *d, cmp_draw);
    for (size_t i = 0; i < n; i++)
        (i < ntrain ? train : test)[d[i].pixel] = (uint16_t)v;
}

hyprof_status_t hyprof_split(hyprof_ctx_t *ctx, const hyprof_cube_t *reference,
                             double per_class, const size_t *counts, size_t ncounts,
                             uint64_t seed, uint16_t *train, uint16_t *test)
{
    char why[160];
    if (hyprof_cube_check(reference, why, sizeof why) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "bad reference cube: %s", why);
    if (!counts && !(per_class > 0.0 && isfinite(per_class)))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "per-class %g must be a count >= 1 or a fraction in (0, 1)",
                             per_class);
    if (!counts && per_class >= 1.0 && per_class != floor(per_class))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "per-class %g: a count must be a whole number", per_class);
    size_t npix = reference->width * reference->height;
    memset(train, 0, npix * sizeof *train);
    memset(test, 0, npix * sizeof *test);
    size_t *pix = malloc(npix * sizeof *pix);
    draw_t *d = malloc(npix * sizeof *d);
    size_t *count = calloc(65536, sizeof *count);
    hyprof_status_t st = HYPROF_OK;
    if (!pix || !d || !count)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    for (size_t p = 0; st == HYPROF_OK && p < npix; p++) {
        long v = value_at(reference, p);
        if (v < 0)
            st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                               "reference value %g at pixel (%zu, %zu) is not a class value",
                               hyprof_cube_get(reference, p % reference->width,
                                               p / reference->width, 0),
                               p % reference->width, p / reference->width);
        else
            count[v]++;
    }
    pcg64_t rng;
    pcg_seed(&rng, seed);
    size_t classes = 0;
    for (long v = 1; st == HYPROF_OK && v <= 65535; v++) {
        if (!count[v])
            continue;
        classes++;
        size_t n = 0, ntrain = train_count(per_class, counts, ncounts, v, count[v]);
        if (ntrain >= count[v]) {
            st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                               "class %ld has %zu pixel(s): %zu for training would leave none "
                               "for testing", v, count[v], ntrain);
            break;
        }
        for (size_t p = 0; p < npix; p++)
            if (value_at(reference, p) == v)
                pix[n++] = p;
        split_class(&rng, pix, n, ntrain, v, d, train, test);
    }
    if (st == HYPROF_OK && classes == 0)
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP, "the reference has no labelled pixel");
    free(pix);
    free(d);
    free(count);
    return st;
}
