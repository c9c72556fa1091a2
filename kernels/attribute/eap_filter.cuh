/* The CUDA attribute profiles' filter bodies, per attribute filter (area,
 * std, diagonal or inertia, thresholds t_0 < ... < t_(l-1)):
 *   pass(C) = number of thresholds <= attribute(C) (body_pass);
 *   kept(C) = min of pass over C and its ancestors, by pointer jumping
 *     (body_jump_min, log2(levels) rounds: a path of the node tree has at
 *     most `levels` nodes); none for the increasing attributes (area,
 *     diagonal), whose pass never grows towards the leaves;
 *   up(C) = the first proper ancestor with a larger kept (body_jump_up,
 *     pointer jumping again).
 * The output of threshold j at a pixel is the level of the first node on
 * the chain C, up(C), up(up(C)), ... whose kept > j, 0 if none: at most
 * nthresholds + 1 steps (body_out). The kernels are in eap_filter.cu. */
#ifndef HYPROF_EAP_FILTER_CUH
#define HYPROF_EAP_FILTER_CUH

#include "eap_attribute.cuh"

namespace eap {

/* pass(C): the number of thresholds <= attribute(C) (binary search, the
 * thresholds ascending); kept starts as pass, the jump pointers at the
 * parent. */
EAP_FN void body_pass(const Args &a, const Filter &f, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (!is_node(a, o, p))
        return;
    double v = attribute_of(a, f.attribute, o + p);
    int lo = 0, hi = f.nt; /* first threshold > v */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (f.thr[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    a.k0[o + p] = (uint8_t)lo;
    a.aux[o + p] = a.par[o + p];
}

/* One round of kept = min over the path: K, J -> K', J'. */
EAP_FN void body_jump_min(const Args &a, const uint8_t *kin, const uint32_t *jin,
                          uint8_t *kout, uint32_t *jout, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (!is_node(a, o, p))
        return;
    uint32_t j = jin[o + p];
    uint8_t k = kin[o + p], kj = kin[o + j];
    kout[o + p] = kj < k ? kj : k;
    jout[o + p] = jin[o + j];
}

EAP_FN void body_up_init(const Args &a, uint32_t *u, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (is_node(a, o, p))
        u[o + p] = a.par[o + p];
}

/* One round towards up(C) = the first proper ancestor with a larger kept
 * (C itself when there is none). Between C and U(C) every node has C's kept. */
EAP_FN void body_jump_up(const Args &a, const uint8_t *k, const uint32_t *uin, uint32_t *uout,
                         int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (!is_node(a, o, p))
        return;
    uint32_t u = uin[o + p];
    if (u == (uint32_t)p || k[o + u] > k[o + p]) {
        uout[o + p] = u;
        return;
    }
    uint32_t uu = uin[o + u];
    uout[o + p] = uu == u ? (uint32_t)p : uu;
}

/* Plane of threshold j (maxtree.c's plane_of). */
EAP_FN size_t plane_of(const Filter &f, int j, int closing)
{
    return closing ? f.off + (size_t)(f.nt - 1 - j) : f.off + (size_t)f.nt + f.first + j;
}

template <typename T> EAP_FN T out_value(unsigned v, const Filter &f, int masked);
template <> EAP_FN uint16_t out_value<uint16_t>(unsigned v, const Filter &f, int masked)
{
    return masked ? f.nodata16 : (uint16_t)v;
}
/* 8-bit planes, widened on the host (which writes nodata under the mask):
 * a quarter of the float planes' download. */
template <> EAP_FN uint8_t out_value<uint8_t>(unsigned v, const Filter &f, int masked)
{
    return masked ? 0 : (uint8_t)v;
}
template <> EAP_FN float out_value<float>(unsigned v, const Filter &f, int masked)
{
    return masked ? f.nodata32 : (float)v;
}

/* Every threshold's output at pixel p (batch output: band img/2, its planes). */
template <typename T>
EAP_FN void body_out(const Args &a, const Filter &f, const uint8_t *k, const uint32_t *u,
                     T *out, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    int closing = img & 1;
    T *band = out + (size_t)(img / 2) * f.planes * f.stride - f.p0;
    if (!valid(a, p)) {
        for (int j = 0; j < f.nt; j++)
            band[plane_of(f, j, closing) * f.stride + p] = out_value<T>(0, f, 1);
        return;
    }
    uint32_t c = node_of(a.par + o, a.lev + o, (uint32_t)p);
    long steps = 0;
    for (int j = 0; j < f.nt; j++) {
        while (k[o + c] <= j) {
            uint32_t up = u[o + c];
            if (up == c)
                break;
            c = up;
            if (++steps > kPathCap) {
                EAP_OR32(a.error, kErrOut);
                return;
            }
        }
        unsigned v = k[o + c] > j ? a.lev[o + c] : 0;
        if (closing)
            v = a.top - v;
        band[plane_of(f, j, closing) * f.stride + p] = out_value<T>(v, f, 0);
    }
}

/* The band itself (filter 0's middle plane). */
template <typename T>
EAP_FN void body_band(const Args &a, const Filter &f, T *out, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    T *band = out + (size_t)(img / 2) * f.planes * f.stride - f.p0;
    band[(f.off + f.nt) * f.stride + p] = out_value<T>(a.lev[o + p], f, !valid(a, p));
}

} /* namespace eap */

#endif
