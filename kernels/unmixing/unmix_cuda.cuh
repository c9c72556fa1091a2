/* Private declarations shared by the CUDA unmixing steps (CUDA C++ only):
 *
 *   unmix_chain.cu   the chain's device copy of the cube (hold / release),
 *                    its staged upload and download, the candidates' gather,
 *                    the abundances;
 *   unmix_sspp.cu    SSPP's homogeneity and purity;
 *   unmix_kmeans.cu  SSPP's K-means;
 *   unmix_kmeans_moves.cu  its exact distances of the pixels the float
 *                    pre-pass leaves open, and the centre totals moved by
 *                    the changed labels when the sums are exact.
 *
 * Device code has internal linkage in each file; the host functions and the
 * per-thread chain state that the files share live in namespace
 * hyprof_unmix. */
#ifndef HYPROF_KERNELS_UNMIX_CUDA_CUH
#define HYPROF_KERNELS_UNMIX_CUDA_CUH

#include "../core/cuda_util.h"

#include "unmixing/unmixing_impl.h"

#include <functional>

namespace hyprof_unmix {

using namespace hyprof_cuda;

const int kThreads = 128;

/* Bytes of a staging buffer of the upload and the download (unmix_chain.cu). */
const size_t kStageBytes = (size_t)8 << 20;

/* Stages timed with CUDA events between hyprof__unmix_hold and release. */
enum {
    kDevUpload = 0,
    kDevHomogeneity,
    kDevPurity,
    kDevKmeans,
    kDevAbundances,
    kDevDownload,
    kDevStages
};

struct StageTimer {
    cudaEvent_t a = NULL, b = NULL;
    int device = -1;
    bool open = false, used = false;
};

/* The cube of the running chain (hyprof__unmix_hold), uploaded by the first step
 * that needs it. Per thread, so concurrent chains in other threads keep theirs. */
struct Held {
    bool active = false;
    const float *x = NULL;
    const uint8_t *mask = NULL;
    size_t npix = 0, bands = 0;
    int device = -1;
    float *dx = NULL;
    uint8_t *dmask = NULL;
    StageTimer timer[kDevStages];
};
extern thread_local Held g_held;

/* Marks the start / end of a device stage on stream st (only inside a chain;
 * timing never fails a step). */
void stage_begin(int s, cudaStream_t st);
void stage_end(int s, cudaStream_t st);

/* Called when bands [b0, b0+nb) of the cube are on the device (ordered before
 * any later work of the default stream): the first stage runs on them while
 * the rest uploads. */
typedef std::function<hyprof_status_t(size_t b0, size_t nb)> BandsReady;

/* The device copy of (x, mask) on the current device: the held one (uploaded
 * now if this is the first step to ask and it fits in the device-memory
 * budget), or a fresh upload into own_x/own_mask. `ready`, when given, is
 * called band group by band group during an upload (*uploaded = true); not
 * at all when the held copy was there already. */
hyprof_status_t device_cube(hyprof_ctx_t *ctx, const char *op, const float *x,
                            const uint8_t *mask, size_t npix, size_t bands,
                            DeviceBuffer<float> &own_x, DeviceBuffer<uint8_t> &own_mask,
                            const float **dx, const uint8_t **dmask,
                            const BandsReady *ready = NULL, bool *uploaded = NULL);

/* ---- K-means (unmix_kmeans.cu, unmix_kmeans_moves.cu) ------------------------ */

const int kResolveThreads = 256, kResolveBlocks = 1056;

/* A changed label as one word: the pixel (below 2^32), its old and new label. */
__device__ inline unsigned long long kmeans_move_word(size_t i, int32_t from, int32_t to)
{
    return (unsigned long long)i | ((unsigned long long)(from & 0xff) << 32) |
           ((unsigned long long)(to & 0xff) << 40);
}

/* The pixels the float pre-pass left with several candidates (amb[0 ..
 * *amb_n): pixel, candidate mask << 32): their exact distances, labels,
 * dist, the count of changes, dirty marks and, with mv, the moves. */
hyprof_status_t kmeans_resolve(hyprof_ctx_t *ctx, const char *op, const float *x, size_t npix,
                               int B, int k, const double *Ct, const unsigned long long *amb,
                               const unsigned long long *amb_n, int32_t *labels, double *dist,
                               unsigned long long *changed, uint8_t *dirty,
                               unsigned long long *mv);

/* Whether every centre sum of the cube is exact in double in any order
 * (kmeans.c's rule); one synchronisation. */
hyprof_status_t kmeans_sums_exact(hyprof_ctx_t *ctx, const char *op, const float *x,
                                  const uint8_t *mask, size_t npix, int B, bool *exact);

/* The moves mv[0 .. *nmv) into the exact totals tot (k x B) and the counts,
 * then C = tot / cnt (an empty cluster keeps its centre) and Ct. */
hyprof_status_t kmeans_apply_moves(hyprof_ctx_t *ctx, const char *op, const float *x,
                                   size_t npix, int B, int k, const unsigned long long *mv,
                                   const unsigned long long *nmv, double *tot,
                                   unsigned long long *cnt, double *C, double *Ct);

/* count floats from the device to the host through the page-locked staging. */
hyprof_status_t download_flat(hyprof_ctx_t *ctx, const char *op, const float *src, float *dst,
                              size_t count);

} /* namespace hyprof_unmix */

#endif
