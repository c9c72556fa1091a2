/* Morphological profiles by reconstruction (EMP) and their wavelet
 * multi-component denoising (W-MCD), after Quesada-Barriuso et al.
 *
 * Every feature band is linearly quantised to 8 bits (hyprof_quantise with
 * 256 levels) and filtered as an integer image:
 *   erosion   e(p) = min of f over p + B, B the structuring element of radius
 *             r, pixels outside the image (or masked) ignored (the same as
 *             scikit-image's erosion with its reflecting border, B being
 *             symmetric and convex along rows and columns);
 *   opening by reconstruction   R(f, e): the reconstruction by dilation of the
 *             marker e under f, 8-connected (the limit of
 *             J <- min(dilate_3x3(J), f)), as skimage.morphology.reconstruction;
 *   closing by reconstruction   the dual: 255 - opening of 255 - f.
 * Masked pixels connect nothing and come out as nodata.
 *
 * Profile of one band with radii r_1 < ... < r_n: the closings by r_n down to
 * r_1, the band, the openings by r_1 up to r_n (2n + 1 planes).
 *
 * W-MCD: every EMP plane C (as double) goes through, for each of three levels
 * j: the 2-D DWT to level j (rows and columns, Mallat filter bank with
 * periodic extension: PyWavelets' wavedec2(C, w, 'periodization', j)),
 * thresholding of every detail coefficient by lambda = sigma sqrt(2 ln n)
 * (n: pixels of the plane, sigma = median(|HH1|) / 0.6745, HH1 the diagonal
 * details of the first level), and the inverse transform (waverec2) cropped
 * to the plane's size. Soft: sign(d) max(|d| - lambda, 0); hard: d where
 * |d| >= lambda, else 0 (pywt.threshold). Masked pixels enter the transform
 * at level 0 and come out as nodata. */
#ifndef HYPROF_MORPHOLOGY_H
#define HYPROF_MORPHOLOGY_H

#include "hyprof/core.h"
#include "hyprof/wavelet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    HYPROF_SE_DISK = 0, /* x^2 + y^2 <= r^2 (skimage.morphology.disk(r)) */
    HYPROF_SE_SQUARE,   /* |x|, |y| <= r (square(2r + 1)) */
    HYPROF_SE_DIAMOND   /* |x| + |y| <= r (diamond(r)) */
} hyprof_se_t;

/* "disk", "square", "diamond" (NULL for an unknown value), and back. */
const char *hyprof_se_name(hyprof_se_t se);
hyprof_status_t hyprof_se_parse(const char *text, hyprof_se_t *se);

#define HYPROF_EMP_MAX_RADII 64

typedef struct {
    const int *radii;   /* strictly increasing, >= 1, 2 r + 1 <= the smaller side */
    size_t nradii;
    hyprof_se_t se;
    /* CUDA devices sharing the planes (NULL: the context's device). The
     * result does not depend on them. */
    const int *devices;
    size_t ndevices;
} hyprof_emp_params_t;

/* The seed's EMP: disk, radii 1, 3, 5, 7. */
void hyprof_emp_params_default(hyprof_emp_params_t *p);

/* Extended morphological profile of every band of `in`: `out` becomes an
 * owned float32 BSQ cube of bands * (2 nradii + 1) bands holding 8-bit levels,
 * masked pixels nodata (the input's, or NaN). `range` (optional, 2*bands):
 * each band's quantisation min and max. */
hyprof_status_t hyprof_emp(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                           const hyprof_emp_params_t *params, hyprof_cube_t *out,
                           double *range);

typedef struct {
    hyprof_emp_params_t emp;
    const hyprof_wavelet_t *wavelet; /* orthogonal (not bior*) */
    int levels[3];                   /* all 0: auto (hyprof_wmcd_auto_levels) */
    int hard;                        /* 0: soft thresholding */
} hyprof_wmcd_params_t;

/* The seed's W-MCD: the default EMP, Haar, auto levels, soft. */
void hyprof_wmcd_params_default(hyprof_wmcd_params_t *p);

/* The seed's levels for a width x height image: 1, floor(log2(w)/2) and
 * floor(log2(w)) - 1, w the smaller side. */
void hyprof_wmcd_auto_levels(size_t width, size_t height, int levels[3]);

/* W-MCD of every band of `in`: `out` becomes an owned float32 BSQ cube of
 * 3 * bands * (2 nradii + 1) bands: for every EMP plane, its denoised versions
 * at levels[0], levels[1], levels[2]. `levels_used` (optional, 3) receives
 * the levels. */
hyprof_status_t hyprof_wmcd(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                            const hyprof_wmcd_params_t *params, hyprof_cube_t *out,
                            double *range, int *levels_used);

#ifdef __cplusplus
}
#endif
#endif
