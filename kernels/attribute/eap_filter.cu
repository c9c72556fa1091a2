/* The CUDA attribute profiles' filters, one attribute filter after the
 * other (the area, std, diagonal or inertia filter and its thresholds; the
 * bodies: eap_filter.cuh). Launches per filter: k_pass (each node's number
 * of thresholds passed), for the non-increasing attributes (std, inertia)
 * log2(levels) rounds of k_jump_min and k_up_init (kept: the minimum over
 * the path to the root), log2(levels) rounds of k_jump_up (up: the first
 * ancestor with a larger kept), then k_out over the planes' pixels: all of
 * them, or (when the planes do not fit the device) a chunk at a time, each
 * chunk downloaded before the next. */
#include "eap_cuda.cuh"
#include "eap_filter.cuh"

#include <utility>

namespace eap {
namespace {

__global__ void k_pass(Args a, Filter f) { EAP_IDX; body_pass(a, f, img, p); }
__global__ void k_jump_min(Args a, const uint8_t *kin, const uint32_t *jin, uint8_t *kout,
                           uint32_t *jout)
{
    EAP_IDX;
    body_jump_min(a, kin, jin, kout, jout, img, p);
}
__global__ void k_up_init(Args a, uint32_t *u) { EAP_IDX; body_up_init(a, u, img, p); }
__global__ void k_jump_up(Args a, const uint8_t *k, const uint32_t *uin, uint32_t *uout)
{
    EAP_IDX;
    body_jump_up(a, k, uin, uout, img, p);
}
/* The output kernels run over the filter's pixels [p0, p1). */
#define EAP_OUT_IDX                                                                       \
    size_t p = f.p0 + (size_t)blockIdx.x * blockDim.x + threadIdx.x;                      \
    if (p >= f.p1)                                                                        \
        return;                                                                           \
    int img = (int)blockIdx.y
/* The thresholds' planes, and with the first filter the band's plane
 * (between its closings and openings). */
template <typename T>
__global__ void k_out(Args a, Filter f, const uint8_t *k, const uint32_t *u, T *out)
{
    EAP_OUT_IDX;
    body_out<T>(a, f, k, u, out, img, p);
    if (f.first && !(img & 1))
        body_band<T>(a, f, out, img, p);
}

/* kept (in *kin) and up (in *jin) of every node for filter f. */
hyprof_status_t kept_and_up(Run &r, int nimg, const Filter &f, uint8_t **kin, uint32_t **jin)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    const Args &g = r.g;
    dim3 gr = pixel_grid(r, nimg);
    k_pass<<<gr, kThreads>>>(g, f);
    HYPROF_CUDA_CHECK_LAUNCH("k_pass");
    HYPROF_TRY(traced(r, "k_pass"));
    uint8_t *ki = g.k0, *ko = g.k1;
    uint32_t *ji = g.aux, *jo = g.aux2; /* k_pass: aux = the parent */
    /* An increasing attribute (area, diagonal) never grows towards the
     * leaves: pass is its own path minimum, kept = pass. */
    if (!hyprof_attribute_is_increasing((hyprof_attribute_t)f.attribute)) {
        for (int i = 0; i < r.p.rounds; i++) {
            k_jump_min<<<gr, kThreads>>>(g, ki, ji, ko, jo);
            HYPROF_CUDA_CHECK_LAUNCH("k_jump_min");
            HYPROF_TRY(traced(r, "k_jump_min"));
            std::swap(ki, ko);
            std::swap(ji, jo);
        }
        k_up_init<<<gr, kThreads>>>(g, ji);
        HYPROF_CUDA_CHECK_LAUNCH("k_up_init");
        HYPROF_TRY(traced(r, "k_up_init"));
    }
    for (int i = 0; i < r.p.rounds; i++) {
        k_jump_up<<<gr, kThreads>>>(g, ki, ji, jo);
        HYPROF_CUDA_CHECK_LAUNCH("k_jump_up");
        HYPROF_TRY(traced(r, "k_jump_up"));
        std::swap(ji, jo);
    }
    *kin = ki;
    *jin = ji;
    return HYPROF_OK;
}

/* One attribute filter's planes into out (all pixels, or chunk by chunk). */
template <typename T> hyprof_status_t filter(Run &r, int nimg, Filter f, T *out)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    uint8_t *kin;
    uint32_t *jin;
    HYPROF_TRY(kept_and_up(r, nimg, f, &kin, &jin));
    const size_t n = r.p.n, oc = r.p.oc;
    for (size_t p0 = 0; p0 < n; p0 += oc) {
        f.p0 = p0;
        f.p1 = n - p0 < oc ? n : p0 + oc;
        f.stride = oc;
        dim3 go((unsigned)((f.p1 - p0 + kThreads - 1) / kThreads), nimg);
        k_out<T><<<go, kThreads>>>(r.g, f, kin, jin, out);
        HYPROF_CUDA_CHECK_LAUNCH("k_out");
        HYPROF_TRY(traced(r, "k_out"));
        if (oc < n)
            HYPROF_TRY(download_chunk(r, f, (const unsigned char *)out));
    }
    return HYPROF_OK;
}

template <typename T> hyprof_status_t filters_as(Run &r, int nimg, T *out)
{
    size_t off = 0, t = 0;
    for (size_t fi = 0; fi < r.a->nfilters; fi++) {
        const hyprof_attribute_filter_t *fl = &r.a->filters[fi];
        Filter f;
        f.attribute = (int)fl->attribute;
        f.thr = r.d.thr.get() + t;
        f.nt = (int)fl->nthresholds;
        f.planes = r.a->planes;
        f.off = off;
        f.first = fi == 0;
        f.nodata16 = r.a->nodata16;
        f.nodata32 = r.a->nodata32;
        HYPROF_TRY(filter<T>(r, nimg, f, out));
        off += 2 * fl->nthresholds + (fi == 0);
        t += fl->nthresholds;
    }
    return HYPROF_OK;
}

} /* namespace */

hyprof_status_t filters(Run &r, int nimg, unsigned char *dev, bool narrow)
{
    if (narrow)
        return filters_as<uint8_t>(r, nimg, dev);
    if (r.a->out16)
        return filters_as<uint16_t>(r, nimg, (uint16_t *)dev);
    return filters_as<float>(r, nimg, (float *)dev);
}

} /* namespace eap */
