/* Attribute profiles, the step shared by the CPU backend (maxtree.c) and the
 * CUDA one (kernels/attribute/eap_*.cu): the profiles of a batch of quantised bands.
 *
 * Exact semantics, per band f (levels 0..L-1, L = `levels`) and validity mask
 * m (all valid when mask is NULL); see include/hyprof/attribute.h for the
 * attributes:
 *
 * 1. Graph: valid pixels, edges between 4- (or 8-) neighbours that are both
 *    valid. Opening tree: the max-tree of f; closing tree: the max-tree of
 *    g = L-1-f (the min-tree of f).
 * 2. Nodes: the connected components C of {p : f(p) >= k} for every level k
 *    (a node stands for every k between its parent's level + 1 and its own
 *    level: the same set). Attributes per node, accumulated from the leaves:
 *    n = |C|; sum and sum of squares of the levels (std); bounding box
 *    (diagonal); sums of x, y, x^2, y^2 (inertia), all exact integers.
 *      std      = sqrt(n * S2 - S1^2) / n               (double, correctly rounded steps)
 *      diagonal = sqrt((xmax-xmin+1)^2 + (ymax-ymin+1)^2)
 *      inertia  = (6 (n Sxx - Sx^2 + n Syy - Sy^2) + n^2) / (6 n^3)
 *    where the integer numerators are exact (128-bit) and converted to double
 *    once. A node passes threshold t when attribute >= t.
 * 3. Kept: with thresholds t_0 < ... < t_(l-1), pass(C) = the number of t_i
 *    that C passes; kept(C) = min(pass(C), kept(parent(C))), and for a root
 *    kept = pass. (For increasing attributes pass never grows towards the
 *    leaves, so this is plain merging; for the others it is the min rule.)
 * 4. Output for threshold i at a valid pixel p: the level of the deepest node
 *    containing p whose kept > i; 0 if there is none (a failing root). The
 *    closing is L-1 minus that output on g.
 * Output layout per band (hyprof_attribute_planes planes): see attribute.h. */
#ifndef HYPROF_EAP_IMPL_H
#define HYPROF_EAP_IMPL_H

#include "../core/internal.h"
#include "hyprof/attribute.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const uint16_t *q;          /* width*height*bands levels, BSQ (< levels where valid) */
    const uint8_t *mask;        /* width*height, 1 = valid, or NULL */
    size_t width, height, bands;
    unsigned levels;            /* 256 or 65536 */
    int connectivity;           /* 4 or 8 */
    const hyprof_attribute_filter_t *filters;
    size_t nfilters;
    size_t planes;              /* per band: hyprof_attribute_planes(filters, nfilters) */
    uint16_t *out16;            /* bands*planes planes of levels, or NULL */
    float *out32;               /* the same as float32, or NULL (exactly one is set) */
    uint16_t nodata16;          /* what masked pixels receive */
    float nodata32;
    const char *op;             /* name in messages and progress */
    /* hyprof_attribute_profiles_bands: out16 holds one band's planes, handed
     * to each(each_user, band, out16) after every band (NULL otherwise) */
    hyprof_attribute_band_fn each;
    void *each_user;
} hyprof_eap_args_t;

hyprof_status_t hyprof__cpu_eap(hyprof_ctx_t *ctx, void *args);
/* hyprof_quantise with the messages tagged by `op` (emp and wmcd reuse it). */
hyprof_status_t hyprof__quantise(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *in,
                                 unsigned levels, uint16_t *out, double *range);
/* The staged download of 8-bit planes, widened as the pieces arrive: piece
 * k (bytes [k * piece, ...) of `count`) lands in stage[k % nstages] once
 * ready(user, k) returns 1 (0: not yet, < 0: failed); its stage can take
 * piece k + nstages, queued by issue(user, k + nstages) (0: ok), once it
 * has been widened (pieces 0 .. nstages - 1 are queued by the caller).
 * ready and issue run on the calling thread only. One parallel region on
 * the context's threads, the work in small units taken in turn, no barrier
 * a piece: threads that the system runs late (other busy threads on the
 * cores) delay only their own units. Returns 0, or the failing callback's
 * value. */
typedef struct {
    int (*ready)(void *user, size_t k);
    int (*issue)(void *user, size_t k);
    void *user;
    const uint8_t *const *stage;
    int nstages;
    size_t piece, count;
    size_t first, n; /* src holds elements [first, first + count) of the output's
                      * planes (pixel = index % n): written to out32 or out16
                      * (one is NULL) at the same index, nodata where mask is 0 */
    const uint8_t *mask;
    float *out32;
    uint16_t *out16;
    float nodata32;
    uint16_t nodata16;
} hyprof_eap_stream_t;
int hyprof__eap_widen_stream(const hyprof_ctx_t *ctx, const hyprof_eap_stream_t *s);
/* kernels/attribute/eap_host.cu (CUDA builds only): the same planes, bit for bit. */
hyprof_status_t hyprof__cuda_eap(hyprof_ctx_t *ctx, void *args);

#ifdef __cplusplus
}
#endif
#endif
