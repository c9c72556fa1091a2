/* The CUDA attribute profiles' attributes: every node's area, std sums,
 * inertia sums or bounding box from its pixels, reduced from the leaves to
 * the root (the bodies: eap_attribute.cuh). Launches, per batch: the sums
 * cleared, k_acc_pixel (each pixel into its node, and each node's count of
 * children), k_leaf (the leaves), k_up (the leaf-to-root reduction). */
#include "eap_attribute.cuh"
#include "eap_cuda.cuh"

namespace eap {
namespace {

/* The area alone: the lanes of a warp on the same node add their count in
 * one atomic (neighbouring pixels mostly share a node: the root and the
 * large nodes are where the atomics of every pixel would queue). */
__device__ __forceinline__ void acc_area_warp(const Args &a, int img, size_t p, bool ok)
{
    unsigned act = __ballot_sync(0xffffffffu, ok);
    if (!ok)
        return;
    size_t o = (size_t)img * a.n;
    unsigned long long c = o + node_of(a.par + o, a.lev + o, (uint32_t)p);
    unsigned same = __match_any_sync(act, c);
    if ((int)(threadIdx.x & 31) == __ffs(same) - 1)
        atomicAdd(&a.cnt[c], (uint32_t)__popc(same));
}

/* Each pixel's contribution to its node, and each node's count of children
 * (body_pend: one pass fewer). */
__global__ void k_acc_pixel(Args a)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int img = (int)blockIdx.y;
    bool ok = p < a.n && valid(a, p);
    if (ok)
        body_pend(a, img, p);
    if (a.cnt && !a.s1 && !a.sx && !a.x0) {
        acc_area_warp(a, img, p, ok);
        return;
    }
    if (ok)
        body_acc_pixel(a, img, p);
}
__global__ void k_leaf(Args a) { EAP_IDX; body_leaf(a, img, p); }
__global__ void k_up(Args a) { EAP_IDX; body_up(a, img, p); }

/* The sums the filters need, cleared (the bounding box's minima to ~0). */
hyprof_status_t clear_sums(Run &r, size_t m)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    const Args &g = r.g;
    if (g.cnt)
        HYPROF_CUDA_CHECK(cudaMemsetAsync(g.cnt, 0, m * sizeof(uint32_t)));
    if (g.s1) {
        HYPROF_CUDA_CHECK(cudaMemsetAsync(g.s1, 0, m * sizeof(u64)));
        HYPROF_CUDA_CHECK(cudaMemsetAsync(g.s2, 0, m * sizeof(u64)));
    }
    if (g.sx)
        for (u64 *s : {g.sx, g.sy, g.sxx, g.syy})
            HYPROF_CUDA_CHECK(cudaMemsetAsync(s, 0, m * sizeof(u64)));
    if (g.x0) {
        HYPROF_CUDA_CHECK(cudaMemsetAsync(g.x0, 0xff, m * sizeof(uint32_t)));
        HYPROF_CUDA_CHECK(cudaMemsetAsync(g.y0, 0xff, m * sizeof(uint32_t)));
        HYPROF_CUDA_CHECK(cudaMemsetAsync(g.x1, 0, m * sizeof(uint32_t)));
        HYPROF_CUDA_CHECK(cudaMemsetAsync(g.y1, 0, m * sizeof(uint32_t)));
    }
    HYPROF_CUDA_CHECK(cudaMemsetAsync(g.pend, 0, m * sizeof(uint32_t)));
    return HYPROF_OK;
}

} /* namespace */

hyprof_status_t accumulate(Run &r, int nimg)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    HYPROF_TRY(clear_sums(r, (size_t)nimg * r.p.n));
    dim3 gr = pixel_grid(r, nimg);
    k_acc_pixel<<<gr, kThreads>>>(r.g);
    HYPROF_CUDA_CHECK_LAUNCH("k_acc_pixel");
    HYPROF_TRY(traced(r, "k_acc_pixel"));
    k_leaf<<<gr, kThreads>>>(r.g);
    HYPROF_CUDA_CHECK_LAUNCH("k_leaf");
    HYPROF_TRY(traced(r, "k_leaf"));
    k_up<<<gr, kThreads>>>(r.g);
    HYPROF_CUDA_CHECK_LAUNCH("k_up");
    HYPROF_TRY(traced(r, "k_up"));
    return HYPROF_OK;
}

} /* namespace eap */
