/* The CUDA attribute profiles' device code shared by every stage (tree,
 * attributes, filters): the kernels' arguments, the error bits, the strict
 * pixel order and the level-root walk (semantics:
 * algorithms/attribute/eap_impl.h; the GPU path: docs/internals/eap.md).
 *
 * The bodies are written against the EAP_* macros (atomics, cache-global
 * loads, fences), which default to the CUDA primitives. A host harness
 * (tests/eap_bodies_host.cpp) defines them, and EAP_BODIES_ONLY, before
 * including the body headers, and runs every kernel body on the CPU. */
#ifndef HYPROF_EAP_BODIES_CUH
#define HYPROF_EAP_BODIES_CUH

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) && !defined(EAP_FN)
#include <cuda/atomic>
#endif
#ifndef EAP_FN
#define EAP_FN __device__ __forceinline__
#define EAP_ADD32(p, v) atomicAdd((p), (v))
#define EAP_SUB32(p, v) atomicSub((p), (v))
#define EAP_ADD64(p, v) atomicAdd((p), (v))
#define EAP_MIN32(p, v) atomicMin((p), (v))
#define EAP_MAX32(p, v) atomicMax((p), (v))
#define EAP_FENCE() __threadfence()
#define EAP_LOAD32(p) (*(p))
#define EAP_STORE32(p, v) (*(p) = (v))
#define EAP_OR32(p, v) atomicOr((p), (v))
#define EAP_ACAS32(p, o, n) atomicCAS((p), (o), (n))
#define EAP_LDCG32(p) __ldcg(p)
#define EAP_LDCG64(p) __ldcg(p)
/* shared memory (the tile floods) */
#define EAP_SADD32(p, v) atomicAdd((p), (v))
/* Entries that many threads read and write at once (the floods' union-find
 * and the level-root walks; the algorithms tolerate reading any ancestor).
 * In a tile's shared memory: atomic read-modify-writes, the accesses that
 * compute-sanitizer's racecheck knows as atomic (it reports relaxed loads
 * and stores of shared memory as hazards). In global memory: relaxed
 * atomics, as cheap as plain accesses. */
#define EAP_SLOAD32(p) atomicOr((p), 0u)
#define EAP_SSTORE32(p, v) ((void)atomicExch((p), (v)))
#define EAP_SOR32(p, v) atomicOr((p), (v))
#define EAP_RLOAD32(p) (cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*(p)).load(cuda::memory_order_relaxed))
#define EAP_RSTORE32(p, v) (cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*(p)).store((v), cuda::memory_order_relaxed))
#define ft_popc(m) __popc(m)
#define ft_ctz(m) (__ffs(m) - 1)
#endif

#ifdef __CUDACC__
#define EAP_HD __host__ __device__ inline
#else
#define EAP_HD inline
#endif

namespace eap {

typedef unsigned long long u64;
typedef unsigned __int128 u128;

/* Everything a kernel may need; passed by value. Arrays with an image
 * dimension hold nimg * n elements (image i at i * n). */
struct Args {
    size_t n;               /* pixels of a band */
    uint32_t width, height;
    int eight;              /* 8-connectivity */
    unsigned top;           /* levels - 1 */
    int nimg;               /* images in this batch (2 per band) */
    const uint8_t *mask;    /* n, or null */
    uint16_t *lev;          /* levels */
    uint32_t *par;          /* tree */
    uint32_t *aux, *aux2;   /* level roots, jump pointers (ping-pong) */
    uint32_t *pend;         /* pending children */
    uint8_t *k0, *k1;       /* leaf flags; kept counts (ping-pong) */
    uint8_t *node;          /* 1 at the canonical element of each node */
    uint32_t *cnt;          /* area (std, inertia need it too) */
    u64 *s1, *s2;           /* std: sums of levels and squares */
    u64 *sx, *sy, *sxx, *syy; /* inertia */
    uint32_t *x0, *x1, *y0, *y1; /* diagonal: bounding box */
    int *error;             /* kErr* bits, set when a walk does not end */
};

/* Parameters of one filter's launches. */
struct Filter {
    int attribute;
    const double *thr;      /* device, nt values */
    int nt;
    size_t planes;          /* per band */
    size_t off;             /* first plane of this filter's closing planes */
    int first;              /* filter 0: the band plane sits between */
    uint16_t nodata16;
    float nodata32;
    size_t p0, p1;          /* the pixels written (all, or a chunk of them) */
    size_t stride;          /* plane stride of the output buffer: n, or a chunk's size */
};

EAP_FN int valid(const Args &a, size_t p) { return !a.mask || a.mask[p]; }

/* Bounds on every loop (never reached by a correct tree: a walk is at most
 * a plateau's chain, a path of the node tree at most `levels` nodes);
 * reaching one sets a bit of *error, so that a bug shows as an error, not
 * as a hang. */
const long kWalkCap = 1L << 24, kPathCap = 1L << 17;
enum { kErrWalk = 2, kErrUp = 4, kErrOut = 8 };

/* key(u) > key(v) in the strict order (level, index) */
EAP_FN int higher(const uint16_t *lev, uint32_t u, uint32_t v)
{
    uint16_t lu = lev[u], lv = lev[v];
    return lu > lv || (lu == lv && u > v);
}

/* par's entries during the level-root walks: shared-memory atomics in a
 * tile (see EAP_SLOAD32), plain accesses in global memory. */
template <bool kTile, class I> EAP_FN uint32_t lr_get(I *p)
{
    return kTile ? EAP_SLOAD32(p) : EAP_LOAD32(p);
}
template <bool kTile, class I> EAP_FN void lr_put(I *p, uint32_t v)
{
    if (kTile)
        EAP_SSTORE32(p, v);
    else
        EAP_STORE32(p, v);
}

/* The level root of x (the last ancestor of its level), compressing the
 * path. Within a level, links go to smaller indices and a level root only
 * ever gets a same-level parent of smaller index, so every pixel of the set
 * with an index above r is no level root and never will be again: its parent
 * stays of its level, and it may point to any pixel of its set with a
 * smaller index (here r). Pixels at or below r are left alone, also when a
 * concurrent compression made the path skip r. The walk up halves the path
 * as it goes (a pixel skips its parent for its same-level grandparent), so
 * that long chains of tile roots (large plateaus) shrink for the threads
 * that come later. */
template <bool kTile, class I>
EAP_FN uint32_t levelroot(I *par, const uint16_t *lev, uint32_t x, int &bad)
{
    uint16_t l = lev[x];
    uint32_t r = x;
    for (long it = 0;; it++) {
        if (it >= kWalkCap) {
            bad |= kErrWalk;
            return r;
        }
        uint32_t p = lr_get<kTile>(&par[r]);
        if (p == r || lev[p] != l)
            break;
        uint32_t g = lr_get<kTile>(&par[p]);
        if (g == p || lev[g] != l) {
            r = p;
            break;
        }
        lr_put<kTile>(&par[r], g);
        r = g;
    }
    for (long it = 0; x > r && it < kWalkCap; it++) {
        uint32_t p = lr_get<kTile>(&par[x]);
        if (p <= r)
            break;
        lr_put<kTile>(&par[x], r);
        x = p;
    }
    return r;
}

/* Neighbour j (0..3: left, right, up, down; 4..7: the diagonals) of p when
 * it exists and is valid. */
EAP_FN int neighbour(const Args &a, uint32_t p, int j, uint32_t &q)
{
    uint32_t w = a.width, x = p % w, y = p / w;
    int dx = j == 0 || j == 4 || j == 6 ? -1 : j == 1 || j == 5 || j == 7 ? 1 : 0;
    int dy = j == 2 || j == 4 || j == 5 ? -1 : j == 3 || j == 6 || j == 7 ? 1 : 0;
    if ((dx < 0 && x == 0) || (dx > 0 && x + 1 >= w) || (dy < 0 && y == 0) ||
        (dy > 0 && y + 1 >= a.height))
        return 0;
    q = (uint32_t)((int64_t)p + dx + (int64_t)dy * w);
    return valid(a, q);
}

/* The offset of neighbour j (as in neighbour()). */
EAP_FN int64_t edge_delta(const Args &a, unsigned j)
{
    int64_t w = a.width;
    switch (j) {
    case 0: return -1;
    case 1: return 1;
    case 2: return -w;
    case 3: return w;
    case 4: return -w - 1;
    case 5: return -w + 1;
    case 6: return w - 1;
    default: return w + 1;
    }
}

/* The canonical element of p's node (after canon2). */
EAP_FN uint32_t node_of(const uint32_t *par, const uint16_t *lev, uint32_t p)
{
    uint32_t q = par[p];
    return (q != p && lev[q] == lev[p]) ? q : p;
}

EAP_FN int is_node(const Args &a, size_t o, size_t p) { return a.node[o + p]; }

} /* namespace eap */

#endif
