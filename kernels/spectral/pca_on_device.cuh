/* The PCA of a cube already on the device, with its eigen-decomposition on
 * the device too (CUDA C++ only; kernels/spectral/pca_on_device.cu). Used by
 * SSPP's purity step on the unmixing chain's device copy of the cube. */
#ifndef HYPROF_KERNELS_PCA_ON_DEVICE_CUH
#define HYPROF_KERNELS_PCA_ON_DEVICE_CUH

#include "core/internal.h"

#include <cstddef>
#include <cstdint>

namespace hyprof_pca {

/* On the current device, from dx (npix x B, BSQ) and dmask (NULL: every
 * pixel valid): the masked mean, the covariance over the nvalid valid
 * pixels divided by nvalid - 1 and its eigen-decomposition, as
 * hyprof_pca_fit defines them; out: mean (B), the first p components (p x B,
 * by decreasing eigenvalue, each with its largest-magnitude loading
 * positive) and the total variance. */
hyprof_status_t fit_on_device(hyprof_ctx_t *ctx, const char *op, const float *dx,
                              const uint8_t *dmask, size_t npix, size_t B, size_t nvalid,
                              size_t p, double *mean, double *vectors, double *total);

} /* namespace hyprof_pca */

#endif
