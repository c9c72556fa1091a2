/* The CUDA attribute profiles' attribute bodies: every node's attributes
 * from the canonical tree, as exact integers. Each valid pixel adds its
 * contribution to its node with atomics (body_acc_pixel); then the node
 * tree is reduced from the leaves (body_up): each leaf's thread adds its
 * node into the parent and decrements the parent's count of pending
 * children, and the thread that brings it to zero carries on with the
 * parent (all its children are in). attribute_of then gives the area, std,
 * diagonal or inertia of a node in the CPU's double expressions (correctly
 * rounded, no contraction: bit-identical to the CPU). The kernels that run
 * these bodies are in eap_attribute.cu. */
#ifndef HYPROF_EAP_ATTRIBUTE_CUH
#define HYPROF_EAP_ATTRIBUTE_CUH

#include "eap_bodies.cuh"
#include "hyprof/attribute.h"

namespace eap {

/* Each valid pixel's contribution to its node: area (count), std (sums of
 * levels and squares), inertia (sums of x, y, x^2, y^2), diagonal (bounding
 * box); only the sums that the filters need (the others' pointers are null). */
EAP_FN void body_acc_pixel(const Args &a, int img, size_t p)
{
    if (!valid(a, p))
        return;
    size_t o = (size_t)img * a.n;
    size_t c = o + node_of(a.par + o, a.lev + o, (uint32_t)p);
    u64 x = p % a.width, y = p / a.width, l = a.lev[o + p];
    if (a.cnt)
        EAP_ADD32(&a.cnt[c], 1u);
    if (a.s1) {
        EAP_ADD64(&a.s1[c], l);
        EAP_ADD64(&a.s2[c], l * l);
    }
    if (a.sx) {
        EAP_ADD64(&a.sx[c], x);
        EAP_ADD64(&a.sy[c], y);
        EAP_ADD64(&a.sxx[c], x * x);
        EAP_ADD64(&a.syy[c], y * y);
    }
    if (a.x0) {
        EAP_MIN32(&a.x0[c], (uint32_t)x);
        EAP_MAX32(&a.x1[c], (uint32_t)x);
        EAP_MIN32(&a.y0[c], (uint32_t)y);
        EAP_MAX32(&a.y1[c], (uint32_t)y);
    }
}

EAP_FN void body_pend(const Args &a, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (!is_node(a, o, p))
        return;
    uint32_t q = a.par[o + p];
    if (q != (uint32_t)p)
        EAP_ADD32(&a.pend[o + q], 1u);
}

EAP_FN void body_leaf(const Args &a, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    a.k0[o + p] = is_node(a, o, p) && a.pend[o + p] == 0;
}

/* From each leaf up: add the node into its parent; the thread that
 * completes the parent (its last pending child) carries on with it. */
EAP_FN void body_up(const Args &a, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (!a.k0[o + p])
        return;
    size_t r = o + p;
    for (long it = 0;; it++) {
        if (it >= kPathCap) {
            EAP_OR32(a.error, kErrUp);
            return;
        }
        size_t q = o + a.par[r];
        if (q == r)
            return;
        if (a.cnt)
            EAP_ADD32(&a.cnt[q], EAP_LDCG32(&a.cnt[r]));
        if (a.s1) {
            EAP_ADD64(&a.s1[q], EAP_LDCG64(&a.s1[r]));
            EAP_ADD64(&a.s2[q], EAP_LDCG64(&a.s2[r]));
        }
        if (a.sx) {
            EAP_ADD64(&a.sx[q], EAP_LDCG64(&a.sx[r]));
            EAP_ADD64(&a.sy[q], EAP_LDCG64(&a.sy[r]));
            EAP_ADD64(&a.sxx[q], EAP_LDCG64(&a.sxx[r]));
            EAP_ADD64(&a.syy[q], EAP_LDCG64(&a.syy[r]));
        }
        if (a.x0) {
            EAP_MIN32(&a.x0[q], EAP_LDCG32(&a.x0[r]));
            EAP_MAX32(&a.x1[q], EAP_LDCG32(&a.x1[r]));
            EAP_MIN32(&a.y0[q], EAP_LDCG32(&a.y0[r]));
            EAP_MAX32(&a.y1[q], EAP_LDCG32(&a.y1[r]));
        }
        EAP_FENCE();
        if (EAP_SUB32(&a.pend[q], 1u) != 1u)
            return;
        EAP_FENCE();
        r = q;
    }
}

/* u128 -> double rounded to nearest even, like the host's conversion: the
 * top 64 bits with a sticky bit for the rest, converted once, then scaled
 * exactly. */
EAP_FN double u128_to_double(u128 v)
{
    u64 hi = (u64)(v >> 64), lo = (u64)v;
    if (hi == 0)
        return (double)lo;
    int lz = 0;
    while (!(hi >> 63)) {
        hi <<= 1;
        lz++;
    }
    u64 m = lz ? hi | (lo >> (64 - lz)) : hi;
    u64 rest = lz ? lo << lz : lo;
    if (rest)
        m |= 1; /* sticky: below the rounding position of a 53-bit mantissa */
    return ldexp((double)m, 64 - lz);
}

/* Each attribute of node c as the CPU's attribute_of (maxtree.c) computes
 * it, term for term: exact integer numerators, one rounding to double. */
EAP_FN double area_of(const Args &a, size_t c) { return (double)a.cnt[c]; }

EAP_FN double std_of(const Args &a, size_t c)
{
    u64 n = a.cnt[c], s1 = a.s1[c], s2 = a.s2[c];
    u128 num = (u128)n * s2 - (u128)s1 * s1;
    return sqrt(u128_to_double(num)) / (double)n;
}

EAP_FN double diagonal_of(const Args &a, size_t c)
{
    u64 dx = (u64)(a.x1[c] - a.x0[c]) + 1, dy = (u64)(a.y1[c] - a.y0[c]) + 1;
    return sqrt((double)(dx * dx + dy * dy));
}

EAP_FN double inertia_of(const Args &a, size_t c)
{
    u64 n = a.cnt[c], sx = a.sx[c], sy = a.sy[c], sxx = a.sxx[c], syy = a.syy[c];
    u128 num = 6 * ((u128)n * sxx - (u128)sx * sx + (u128)n * syy - (u128)sy * sy) +
               (u128)n * n;
    return u128_to_double(num) / (6.0 * (double)n * (double)n * (double)n);
}

/* attr: a hyprof_attribute_t */
EAP_FN double attribute_of(const Args &a, int attr, size_t c)
{
    switch (attr) {
    case HYPROF_ATTRIBUTE_STD:
        return std_of(a, c);
    case HYPROF_ATTRIBUTE_DIAGONAL:
        return diagonal_of(a, c);
    case HYPROF_ATTRIBUTE_INERTIA:
        return inertia_of(a, c);
    default: /* HYPROF_ATTRIBUTE_AREA */
        return area_of(a, c);
    }
}

} /* namespace eap */

#endif
