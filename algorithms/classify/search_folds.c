/* Spatially disjoint cross-validation folds. A profile mixes every pixel with
 * its neighbours, so two neighbouring pixels of one training polygon on both
 * sides of a fold would let the test side see its own training data. Groups
 * are the 8-connected components of labelled pixels of one class (found by a
 * union-find over the raster), and a group always goes whole to one fold;
 * per class, groups are dealt largest first to the fold that has the fewest
 * pixels of that class, so folds stay stratified as far as the groups allow. */
#include "search_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "train"

static long label_value(const hyprof_cube_t *l, size_t x, size_t y)
{
    if (!hyprof_cube_valid(l, x, y))
        return 0;
    double v = hyprof_cube_get(l, x, y, 0);
    return isfinite(v) && v >= 1 && v <= 65535 && v == floor(v) ? (long)v : 0;
}

static size_t find(size_t *parent, size_t i)
{
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

static void unite(size_t *parent, size_t a, size_t b)
{
    a = find(parent, a);
    b = find(parent, b);
    if (a != b)
        parent[a > b ? a : b] = a < b ? a : b; /* the root is the first pixel */
}

/* Joins every labelled pixel to its labelled neighbours of the same class
 * (left, up-left, up, up-right: each pair once). value[] holds the labels. */
static void components(const long *value, size_t W, size_t H, size_t *parent)
{
    for (size_t i = 0; i < W * H; i++)
        parent[i] = i;
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++) {
            size_t i = y * W + x;
            if (!value[i])
                continue;
            if (x > 0 && value[i - 1] == value[i])
                unite(parent, i, i - 1);
            if (y == 0)
                continue;
            for (int dx = -1; dx <= 1; dx++) {
                if ((dx < 0 && x == 0) || (dx > 0 && x + 1 == W))
                    continue;
                size_t j = (y - 1) * W + (size_t)((long)x + dx);
                if (value[j] == value[i])
                    unite(parent, i, j);
            }
        }
}

typedef struct {
    size_t root, size;
    long value;
    uint64_t key; /* the seeded shuffle */
} group_t;

static int by_class_size_key(const void *a, const void *b)
{
    const group_t *g = a, *h = b;
    if (g->value != h->value)
        return g->value < h->value ? -1 : 1;
    if (g->size != h->size)
        return g->size > h->size ? -1 : 1;
    if (g->key != h->key)
        return g->key < h->key ? -1 : 1;
    return g->root < h->root ? -1 : g->root > h->root;
}

/* The groups of the components (root = its first pixel), sorted per class
 * by decreasing size then the seeded key. */
static group_t *list_groups(const long *value, size_t *parent, size_t npix, uint64_t seed,
                            size_t *ngroups)
{
    size_t n = 0;
    for (size_t i = 0; i < npix; i++)
        n += value[i] && find(parent, i) == i;
    group_t *g = malloc((n ? n : 1) * sizeof *g);
    size_t *slot = malloc(npix * sizeof *slot);
    if (!g || !slot) {
        free(g), free(slot);
        return NULL;
    }
    uint64_t rng = seed;
    size_t k = 0;
    for (size_t i = 0; i < npix; i++)
        if (value[i] && find(parent, i) == i) {
            g[k] = (group_t){i, 0, value[i], hyprof__splitmix(&rng)};
            slot[i] = k++;
        }
    for (size_t i = 0; i < npix; i++)
        if (value[i])
            g[slot[find(parent, i)]].size++;
    /* The slot of a root, reused by the caller through root order. */
    free(slot);
    qsort(g, n, sizeof *g, by_class_size_key);
    *ngroups = n;
    return g;
}

/* Deals the groups to folds; group_fold[i] receives group i's fold. */
static void deal(const group_t *g, size_t n, int folds, int *group_fold)
{
    size_t total[100] = {0}, in_class[100] = {0};
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || g[i].value != g[i - 1].value)
            memset(in_class, 0, sizeof in_class);
        int best = 0;
        for (int f = 1; f < folds; f++)
            if (in_class[f] < in_class[best] ||
                (in_class[f] == in_class[best] && total[f] < total[best]))
                best = f;
        group_fold[i] = best;
        in_class[best] += g[i].size;
        total[best] += g[i].size;
    }
}

static hyprof_status_t assign(hyprof_ctx_t *ctx, const long *value, size_t *parent, size_t npix,
                              int folds, uint64_t seed, int *fold, size_t *groups,
                              size_t *largest)
{
    size_t n = 0;
    group_t *g = list_groups(value, parent, npix, seed, &n);
    int *gf = malloc((n ? n : 1) * sizeof *gf);
    if (!g || !gf) {
        free(g), free(gf);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (folds)");
    }
    deal(g, n, folds, gf);
    /* parent[root] becomes the root's fold; roots are their own parents. */
    *largest = 0;
    for (size_t i = 0; i < n; i++) {
        fold[g[i].root] = gf[i];
        if (g[i].size > *largest)
            *largest = g[i].size;
    }
    for (size_t i = 0; i < npix; i++)
        fold[i] = value[i] ? fold[find(parent, i)] : -1;
    *groups = n;
    free(g);
    free(gf);
    return HYPROF_OK;
}

hyprof_status_t hyprof_search_folds(hyprof_ctx_t *ctx, const hyprof_cube_t *labels, int folds,
                                    uint64_t seed, int *fold, size_t *groups, size_t *largest)
{
    if (folds < 2 || folds > 100)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "folds %d out of range 2..100",
                             folds);
    size_t W = labels->width, H = labels->height, npix = W * H;
    long *value = malloc(npix * sizeof *value);
    size_t *parent = malloc(npix * sizeof *parent);
    if (!value || !parent) {
        free(value), free(parent);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (folds)");
    }
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++)
            value[y * W + x] = label_value(labels, x, y);
    components(value, W, H, parent);
    hyprof_status_t st = assign(ctx, value, parent, npix, folds, seed, fold, groups, largest);
    free(value);
    free(parent);
    return st;
}
