/* Attribute filters on max-trees and the extended attribute profile (EAP).
 *
 * Every filter works on a quantised band (integer levels 0..levels-1, levels
 * 256 or 65536, stored as uint16_t) and its max-tree: the connected
 * components of the upper threshold sets {p : f(p) >= k} (openings) or, on
 * the complement levels-1-f, of the lower ones (closings), 4- or
 * 8-connected. Masked pixels are not part of the graph (they connect
 * nothing) and come out as `nodata`.
 *
 * A component passes a threshold t when its attribute is >= t:
 *   area      pixel count (increasing);
 *   std       population standard deviation of the component's levels
 *             (divide by n; non-increasing);
 *   diagonal  length of the diagonal of the component's bounding box,
 *             sqrt(w^2 + h^2) with w, h in pixels (increasing);
 *   inertia   moment of inertia normalised by the squared area (Hu's first
 *             invariant, pixels as unit squares):
 *             (sum over the component of |p - centroid|^2 + n/6) / n^2;
 *             1/6 for one pixel, about 1/(2 pi) for a disk, larger for
 *             elongated shapes (non-increasing).
 * Increasing attributes: a failing component merges into its parent, i.e.
 * each pixel takes the level of its nearest containing component that passes
 * (for area: exactly skimage.morphology.area_opening / area_closing).
 * Non-increasing attributes use the min rule: a component is kept only if it
 * and every component containing it pass. Such filters are thinnings, not
 * openings: they are not idempotent. The root (a whole connected region of
 * valid pixels) is filtered like any component; when it fails, its pixels
 * take the bottom of the lattice (0 for an opening, levels-1 for a closing),
 * as in scikit-image.
 *
 * Profile order (one band, filters f = 0..F-1, each with thresholds
 * t_0 < ... < t_(l-1)): for f = 0: the closings by t_(l-1) down to t_0, the
 * band itself, the openings by t_0 up to t_(l-1); for every further filter
 * the same without the band (as in EMAPs, where the band appears once).
 * Plane count: 1 + sum over filters of 2 l_f (hyprof_attribute_planes). */
#ifndef HYPROF_ATTRIBUTE_H
#define HYPROF_ATTRIBUTE_H

#include "hyprof/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    HYPROF_ATTRIBUTE_AREA = 0,
    HYPROF_ATTRIBUTE_STD,
    HYPROF_ATTRIBUTE_DIAGONAL,
    HYPROF_ATTRIBUTE_INERTIA
} hyprof_attribute_t;

#define HYPROF_ATTRIBUTE_MAX_THRESHOLDS 255

/* "area", "std", "diagonal", "inertia" (NULL for an unknown value). */
const char *hyprof_attribute_name(hyprof_attribute_t attribute);
/* Parses one of those names; HYPROF_ERR_ARGUMENT otherwise. */
hyprof_status_t hyprof_attribute_parse(const char *text, hyprof_attribute_t *attribute);
/* 1 for area and diagonal, 0 for std and inertia (min rule). */
int hyprof_attribute_is_increasing(hyprof_attribute_t attribute);

/* One attribute and its thresholds: finite, >= 0, strictly increasing, at
 * most HYPROF_ATTRIBUTE_MAX_THRESHOLDS of them. A threshold of 0 keeps
 * every component (that plane equals the band). */
typedef struct {
    hyprof_attribute_t attribute;
    const double *thresholds;
    size_t nthresholds;
} hyprof_attribute_filter_t;

/* Planes of one band's profile: 1 + sum of 2 * nthresholds. */
size_t hyprof_attribute_planes(const hyprof_attribute_filter_t *filters, size_t nfilters);

/* The attribute profile of one quantised band (row-major width x height,
 * values < levels; `mask` NULL or width*height bytes, 1 = valid) for one
 * attribute: 2 * nthresholds + 1 planes of width*height into `out`. */
hyprof_status_t hyprof_attribute_profile(hyprof_ctx_t *ctx, const uint16_t *band,
                                         const uint8_t *mask, size_t width, size_t height,
                                         unsigned levels, int connectivity,
                                         hyprof_attribute_t attribute, const double *thresholds,
                                         size_t nthresholds, uint16_t nodata, uint16_t *out);

/* The same for several attributes from one max-tree (and one min-tree) of
 * the band: hyprof_attribute_planes(filters, nfilters) planes into `out`. */
hyprof_status_t hyprof_attribute_profiles(hyprof_ctx_t *ctx, const uint16_t *band,
                                          const uint8_t *mask, size_t width, size_t height,
                                          unsigned levels, int connectivity,
                                          const hyprof_attribute_filter_t *filters,
                                          size_t nfilters, uint16_t nodata, uint16_t *out);

/* Receives band `band`'s planes (hyprof_attribute_planes planes of
 * width*height levels) from hyprof_attribute_profiles_bands; they are
 * overwritten by the next band's after it returns. Non-zero stops the call
 * (HYPROF_ERR_CANCELLED). */
typedef int (*hyprof_attribute_band_fn)(void *user, size_t band, const uint16_t *planes);

/* hyprof_attribute_profiles for `nbands` bands (`bands`: nbands BSQ bands of
 * width*height levels, one mask for all), one band at a time through the
 * one band's planes of `out`, each handed to `fn` in band order: for scenes
 * whose whole profile would not fit the host. The planes are those of
 * hyprof_attribute_profiles, band by band. With CUDA the bands are
 * pipelined: the next band's trees are built while a band's planes are
 * copied to `out` and handed over, and the device buffers are allocated
 * once. */
hyprof_status_t hyprof_attribute_profiles_bands(hyprof_ctx_t *ctx, const uint16_t *bands,
                                                size_t nbands, const uint8_t *mask,
                                                size_t width, size_t height, unsigned levels,
                                                int connectivity,
                                                const hyprof_attribute_filter_t *filters,
                                                size_t nfilters, uint16_t nodata, uint16_t *out,
                                                hyprof_attribute_band_fn fn, void *user);

/* Linear quantisation of every band of `in` to 0..levels-1 from the band's
 * min and max over the valid pixels:
 *   q = floor((x - min) * (levels - 1) / (max - min) + 0.5)   (double arithmetic)
 * (a constant band gives 0). `out`: width*height*bands levels, BSQ; masked
 * pixels get 0. `range` (optional, 2*bands): min and max of each band (NaN
 * for a band without valid pixel). A valid pixel that is not finite is an
 * error (HYPROF_ERR_INPUT). */
hyprof_status_t hyprof_quantise(hyprof_ctx_t *ctx, const hyprof_cube_t *in, unsigned levels,
                                uint16_t *out, double *range);

typedef struct {
    int connectivity;                          /* 4 or 8 */
    unsigned levels;                           /* quantisation: 256 or 65536 */
    const hyprof_attribute_filter_t *filters;  /* at least one */
    size_t nfilters;
} hyprof_eap_params_t;

/* The seed paper's EAP: area, thresholds 36, 144, 324, 576, 900, 1296, 1764,
 * 4-connectivity, 8-bit quantisation. */
void hyprof_eap_params_default(hyprof_eap_params_t *p);

/* Extended attribute profile: every band of `in` is quantised
 * (hyprof_quantise) and replaced by its profile (hyprof_attribute_profiles).
 * `out` becomes an owned float32 BSQ cube of bands * planes bands holding the
 * levels; masked pixels are nodata (the input's nodata, or NaN). `range`
 * (optional, 2*bands) receives each band's quantisation min and max. */
hyprof_status_t hyprof_eap(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                           const hyprof_eap_params_t *params, hyprof_cube_t *out, double *range);

#ifdef __cplusplus
}
#endif
#endif
