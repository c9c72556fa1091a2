/* CUDA backend of the attribute profiles (semantics: algorithms/attribute/eap_impl.h).
 *
 * One max-tree per band and polarity, all images of a batch of bands in the
 * same launches (grid y = image: band 2i is the opening image f, 2i+1 the
 * closing image L-1-f). Every threshold of every attribute is derived from
 * that one tree.
 *
 * Tree, 8-bit levels (the default): tile floods (see FTile below): a block
 *   per 64 x 64 tile floods its pixels level by level in shared memory
 *   (the tile's max-tree), then the flooding below runs over what crosses
 *   the tiles' borders only (the edges across, and the links of the tile
 *   nodes that reach a border to their tile parents: 0.118 edges a pixel
 *   instead of 2), the levels with few edges in runs of one launch; both
 *   with a union-find linked by atomicMin (mu_unite).
 *   $HYPROF_EAP_TILE_FLOOD=0: the flooding of all the pixels, as follows.
 *   Measured on an H100 at Pavia Centre size (16 images of 1096 x 715,
 *   PCA features, 4-connectivity), in the same run: trees 6.2 to 6.5 ms
 *   against 12.7 for the pixels' flooding (8-connectivity: 9.4 against
 *   19.0); of them the tiles 3.6 ms (1.05 G instructions; 78 % of the
 *   warps' time waiting at the level barriers: a tile's level has about
 *   50 edges, 2 of the 16 warps), the global levels 2.1 ms (one launch,
 *   about 8 us a level), the counting sort 0.3 and the canonical form 0.6.
 *   With compare-and-swap links instead of atomicMin the tiles took 3.9 ms
 *   and the global levels 4.8; a launch a global level 7.7 ms of trees
 *   instead of 6.5; loading a thread's next edge before a run's barrier,
 *   or compressing the finds' first nodes, was no faster.
 * Tree, by flooding level by level (see Flood below): a counting sort of
 *   the pixels by level, then, from the top level down, one launch a level
 *   over that level's pixels only, a thread an edge (unite with a lock-free
 *   union-find, recording the links as the tree), then the canonical form
 *   as below. With 8-bit levels at most 256 short launches, every one as
 *   parallel as its level is large; with 16-bit levels one launch per level
 *   present in any image of the batch (tens of thousands: slower than the
 *   CPU, but far faster than the tiles). With 8-bit levels the sort
 *   buckets the edges to unite rather than the pixels (see active_edges):
 *   a level's launch has a thread per such edge only.
 *   $HYPROF_EAP_FLOOD_LIST=pixels buckets the pixels (a thread per edge of
 *   each, half of them with nothing to unite), $HYPROF_EAP_FLOOD_EDGES=0
 *   runs a thread a pixel, $HYPROF_EAP_TILES=1 the tile path below instead.
 *   The unions of a warp's lanes that would link the same root are pooled
 *   (uf_unite_warp; $HYPROF_EAP_WARP_UNITE=0: not). Measured on an H200 at
 *   Pavia Centre size (PCA features): trees 14.4 ms with the pixel list,
 *   13.0 with the edge list, 11.6 with the pooled unions; the large scene's
 *   8 bands 962, 974 and 869 ms. Tried and dropped there: runs of small
 *   levels in one launch with a block barrier a level (no faster: a level
 *   is the latency of its chains of loads, not of its launch) and the
 *   union-find as an L2-persisting window (no faster).
 *
 * Tree by tiles ($HYPROF_EAP_TILES=1, the former path: tile-local trees
 * merged along the tile borders, after Blin et al., "Max-tree computation
 * on GPUs", TPDS 2022, but with no two threads ever on the same tree):
 *   Pixels are ordered by the strict key (level, index). The component tree
 *   of that total order is unique, and collapsing the links between pixels
 *   of equal level gives the max-tree (the node of p is the component of
 *   {f >= f(p)} containing p). Merging the ancestor chains of the two ends
 *   of an edge (Wilkinson's connect): climb the higher chain until the other
 *   end fits, insert it, then go on merging the rest of both chains. Links
 *   always go to a strictly smaller key, so no cycle can form, and the tree
 *   does not depend on the order of the merges. Within a level the chains
 *   are compressed (path halving and compression to the level root).
 *   tile        one thread per 32 x 32 tile, its tree in its own slice of
 *               shared memory: every edge inside the tile (local indices
 *               order like the global ones);
 *   join        regions of rw x rh tiles doubling in turn across and down:
 *               one thread per pair of neighbouring regions merges every
 *               edge crossing their common border (the pairs of a round are
 *               disjoint). The last rounds are long sequential loops: the
 *               price of a tree built without races (an earlier version
 *               merged every border edge at once with compare-and-swap, and
 *               did not finish on the GPU).
 *   canon       aux = the level root of each pixel; then par[] of a level
 *               root = the level root of its parent, par[] of any other
 *               pixel = its level root (the CPU's canonical form), and a
 *               node flag at each level root.
 * Attributes (exact integers): every pixel adds its contribution to its
 *   node with atomics; then the node tree is reduced from the leaves: each
 *   leaf's thread adds its node into the parent and decrements the parent's
 *   count of pending children; the thread that brings it to zero carries on
 *   with the parent (all its children are in).
 * Filter, per attribute: pass(C) = number of thresholds <= attribute(C),
 *   computed with the CPU's double expressions (correctly rounded, no
 *   contraction: the results are bit-identical); kept(C) = min of pass over
 *   C and its ancestors, by pointer jumping (log2(levels) rounds: a path
 *   of the node tree has at most `levels` nodes; none for area and
 *   diagonal, which never grow towards the leaves); then up(C) = the first
 *   proper ancestor with a larger kept (pointer jumping again). The output
 *   of threshold j at a pixel is the level of the first node on the chain
 *   C, up(C), up(up(C)), ... whose kept > j, 0 if none: at most
 *   nthresholds + 1 steps.
 * Output: with 8-bit levels the planes are 8-bit on the device (a quarter
 *   of the float download, half the 16-bit one) and each batch's go to the
 *   host through page-locked staging (kept for the process), 4 pieces of
 *   8 MB in flight, each widened to float or 16 bits (nodata under the
 *   mask) on the context's threads while the next ones copy
 *   (hyprof__eap_widen_stream: one parallel region, no barrier a piece);
 *   the output itself is only prefaulted (on the helper thread, during the
 *   trees), never page-locked.
 *   $HYPROF_EAP_NARROW=0: the planes in the output's type on the device
 *   (as below); $HYPROF_EAP_STAGE=N: staging pieces of N bytes.
 *   The levels are page-locked for their upload ($HYPROF_EAP_PIN_IN=0: not).
 * Pipeline (batch_piped): a batch's trees are built for all its bands at
 *   once, then the attributes and filters run a group of bands at a time
 *   (1 band; $HYPROF_EAP_PIPE_BANDS=N: N), all queued on stream 0, and each
 *   group's planes go to the host on a copy stream as soon as they are
 *   computed (into the caller's page-locked output, the output page-locked
 *   for the call, by pageable copies, or staged and widened as above), so
 *   that the download overlaps the next groups' compute. Not for the
 *   chunked planes and the output pinned piece by piece (their own
 *   downloads); $HYPROF_EAP_PIPE=0: none.
 * Device memory: all of a call's buffers are carved from one allocation,
 *   kept for the process (see ArenaCache; $HYPROF_EAP_KEEP=0: freed).
 * hyprof_attribute_profiles_bands (a->each): one band at a time, the device
 *   buffers allocated once for all bands, two planes buffers (slots): band
 *   b's trees and planes on stream 0 while band b - 1's planes are copied
 *   (on their own stream, staged as above; with 16-bit planes into the
 *   caller's one-band buffer, page-locked once for the call) and handed
 *   to its function; $HYPROF_EAP_PIPELINE=0 (or
 *   too little device memory for two slots): each band's download after
 *   its planes, as in a batch of one band. The next band's levels go up
 *   on a third stream meanwhile ($HYPROF_EAP_PREFETCH=0: not).
 * Memory: per band about 2 x (25 + accumulators) + planes x 1, 2 or 4 bytes a
 *   pixel (accumulators: 4 for the area, + 16 std, + 32 inertia, 16
 *   diagonal; + 8 or 16 for the flooding's edge list, 4 for a pixel list);
 *   bands are processed in batches that fit the free device memory. With
 *   planes in the output's type ($HYPROF_EAP_NARROW=0, or 16-bit levels)
 *   each batch's planes go to the host in one copy, into the output
 *   page-locked for the call (up to 8 GB, on a helper thread while the
 *   trees build; larger outputs are pinned 1 GB at a time for their
 *   copies). When one band's planes do
 *   not fit next to its trees, one band at a time with its planes computed
 *   and downloaded in chunks of pixels ($HYPROF_EAP_OUT_CHUNK=N forces
 *   chunks of N pixels); when not even its trees fit, the call fails with
 *   HYPROF_ERR_DEVICE_MEMORY and `auto` falls back to the CPU.
 *   $HYPROF_EAP_BAND_GROUP=N forces at most N bands a batch;
 *   $HYPROF_EAP_PIN_ALL=0 forces the piecewise pinning, $HYPROF_EAP_PIN=0
 *   pageable copies (no page-locking at all), $HYPROF_EAP_PREFAULT=0 leaves
 *   the page faults to the page-locking (or the copies),
 *   $HYPROF_EAP_PIN_PIECE=N prepares the output N bytes at a time, each
 *   piece downloaded when ready. Measured on an H100 at Pavia Centre size
 *   (376 MB of float planes): 42-54 ms host to host; pageable 55 ms;
 *   no prefault 133 ms (the locking faults 4 KB pages on one thread);
 *   32 MB pieces 71 ms.
 *
 * The kernel bodies are written against the EAP_* macros so that a host
 * harness can define them (and EAP_BODIES_ONLY) and run the bodies on the
 * CPU. */
#ifndef EAP_BODIES_ONLY
#include "../core/cuda_util.h"
#include "attribute/eap_impl.h"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#ifndef EAP_BODIES_ONLY
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#endif

#ifndef EAP_FN
#define EAP_FN __device__ __forceinline__
#define EAP_CAS32(p, o, n) eap_cas_plain((p), (o), (n))
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
/* The tree merges run in one thread per tree (tile, then region pair):
 * plain accesses, a compare-and-store without atomics. */
__device__ __forceinline__ uint32_t eap_cas_plain(uint32_t *p, uint32_t o, uint32_t n)
{
    uint32_t v = *p;
    if (v == o)
        *p = n;
    return v;
}
#define EAP_LDCG32(p) __ldcg(p)
#define EAP_LDCG64(p) __ldcg(p)
/* shared memory (the tile floods) */
#define EAP_SADD32(p, v) atomicAdd((p), (v))
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
    int *error;             /* set when a merge does not finish */
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
 * a plateau's chain, a merge at most two chains of level roots plus retries,
 * a path of the node tree at most `levels` nodes); reaching one sets a bit
 * of *error, so that a bug shows as an error, not as a hang. */
const long kWalkCap = 1L << 24, kMergeCap = 1L << 20, kPathCap = 1L << 17;
enum { kErrMerge = 1, kErrWalk = 2, kErrUp = 4, kErrOut = 8 };

/* key(u) > key(v) in the strict order (level, index) */
EAP_FN int higher(const uint16_t *lev, uint32_t u, uint32_t v)
{
    uint16_t lu = lev[u], lv = lev[v];
    return lu > lv || (lu == lv && u > v);
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
template <class I> EAP_FN uint32_t levelroot(I *par, const uint16_t *lev, uint32_t x, int &bad)
{
    uint16_t l = lev[x];
    uint32_t r = x;
    for (long it = 0;; it++) {
        if (it >= kWalkCap) {
            bad |= kErrWalk;
            return r;
        }
        uint32_t p = EAP_LOAD32(&par[r]);
        if (p == r || lev[p] != l)
            break;
        uint32_t g = EAP_LOAD32(&par[p]);
        if (g == p || lev[g] != l) {
            r = p;
            break;
        }
        EAP_STORE32(&par[r], g);
        r = g;
    }
    for (long it = 0; x > r && it < kWalkCap; it++) {
        uint32_t p = EAP_LOAD32(&par[x]);
        if (p <= r)
            break;
        EAP_STORE32(&par[x], r);
        x = p;
    }
    return r;
}

/* Merges the ancestor chains of the neighbours x and y. Returns 0, or error
 * bits if it gave up (never expected: a bound against endless loops). */
EAP_FN int merge(uint32_t *par, const uint16_t *lev, uint32_t x, uint32_t y)
{
    int bad = 0;
    for (long it = 0; it < kMergeCap; it++) {
        x = levelroot(par, lev, x, bad);
        y = levelroot(par, lev, y, bad);
        if (bad)
            return bad;
        if (x == y)
            return 0;
        if (higher(lev, y, x)) {
            uint32_t t = x;
            x = y;
            y = t;
        }
        /* key(x) > key(y): y goes somewhere above x */
        uint32_t z = EAP_LOAD32(&par[x]);
        if (z == x) { /* x is a root: y becomes its parent */
            if (EAP_CAS32(&par[x], x, y) == x)
                return 0;
            continue;
        }
        uint32_t zr = levelroot(par, lev, z, bad);
        if (bad)
            return bad;
        if (zr == y)
            return 0;
        if (higher(lev, zr, y)) { /* still above y: climb */
            x = zr;
            continue;
        }
        /* key(zr) < key(y) < key(x): insert y, then merge y with z's chain */
        if (EAP_CAS32(&par[x], z, y) == z) {
            x = y;
            y = zr;
        }
    }
    return kErrMerge;
}

EAP_FN void body_prepare(const Args &a, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (img & 1)
        a.lev[o + p] = valid(a, p) ? (uint16_t)(a.top - a.lev[o - a.n + p]) : 0;
    a.par[o + p] = (uint32_t)p;
}

/* ---- tile-local trees, in shared memory ----
 * A tile is kTile x kTile pixels, local index ly * kTile + lx: for two pixels
 * of a tile it orders like the global index, so the local trees are the
 * global tree's restrictions and the border merges complete them. */
const int kTile = 32;

struct Tile {
    uint32_t x0, y0, w, h; /* origin and size (partial at the right and bottom) */
};

EAP_FN Tile tile_of(const Args &a, unsigned block)
{
    uint32_t tiles_x = (a.width + kTile - 1) / kTile;
    Tile t;
    t.x0 = (block % tiles_x) * kTile;
    t.y0 = (block / tiles_x) * kTile;
    t.w = a.width - t.x0 < (uint32_t)kTile ? a.width - t.x0 : kTile;
    t.h = a.height - t.y0 < (uint32_t)kTile ? a.height - t.y0 : kTile;
    return t;
}

EAP_FN void body_tile_load(const Args &a, int img, const Tile &t, uint16_t *sl, uint32_t *sp,
                           int i)
{
    uint32_t lx = i % kTile, ly = i / kTile;
    sp[i] = (uint32_t)i;
    if (lx < t.w && ly < t.h)
        sl[i] = a.lev[(size_t)img * a.n + (size_t)(t.y0 + ly) * a.width + t.x0 + lx];
}

EAP_FN void body_tile_merge(const Args &a, const Tile &t, uint16_t *sl, uint32_t *sp, int i)
{
    uint32_t lx = i % kTile, ly = i / kTile;
    if (lx >= t.w || ly >= t.h)
        return;
    size_t p = (size_t)(t.y0 + ly) * a.width + t.x0 + lx, w = a.width;
    if (!valid(a, p))
        return;
    int r = lx + 1 < t.w, d = ly + 1 < t.h, bad = 0;
    uint32_t q = (uint32_t)i;
    if (r && valid(a, p + 1))
        bad |= merge(sp, sl, q, q + 1);
    if (d && valid(a, p + w))
        bad |= merge(sp, sl, q, q + kTile);
    if (a.eight && d) {
        if (r && valid(a, p + w + 1))
            bad |= merge(sp, sl, q, q + kTile + 1);
        if (lx > 0 && valid(a, p + w - 1))
            bad |= merge(sp, sl, q, q + kTile - 1);
    }
    if (bad)
        EAP_OR32(a.error, bad);
}

EAP_FN void body_tile_store(const Args &a, int img, const Tile &t, const uint32_t *sp, int i)
{
    uint32_t lx = i % kTile, ly = i / kTile;
    if (lx >= t.w || ly >= t.h)
        return;
    uint32_t r = sp[i], rx = r % kTile, ry = r / kTile;
    a.par[(size_t)img * a.n + (size_t)(t.y0 + ly) * a.width + t.x0 + lx] =
        (t.y0 + ry) * a.width + t.x0 + rx;
}

/* One edge, when both ends are valid. */
EAP_FN int edge(const Args &a, uint32_t *par, const uint16_t *lev, uint32_t x0, uint32_t y0,
                uint32_t x1, uint32_t y1)
{
    size_t p = (size_t)y0 * a.width + x0, q = (size_t)y1 * a.width + x1;
    if (!valid(a, p) || !valid(a, q))
        return 0;
    return merge(par, lev, (uint32_t)p, (uint32_t)q);
}

/* The regions doubling round: with regions of rw x rh tiles, pair k of
 * line `line` joins two neighbouring regions (left/right when !vertical,
 * top/bottom when vertical) through every edge that crosses their common
 * border with both ends inside the pair. One thread per pair, and the pairs
 * of a round are disjoint: nothing is shared, the tree of a region pair is
 * only touched by its own thread. */
EAP_FN void body_join(const Args &a, int img, int vertical, uint32_t rw, uint32_t rh,
                      uint32_t k, uint32_t line)
{
    uint32_t tiles_x = (a.width + kTile - 1) / kTile, tiles_y = (a.height + kTile - 1) / kTile;
    size_t o = (size_t)img * a.n;
    uint32_t *par = a.par + o;
    const uint16_t *lev = a.lev + o;
    int bad = 0;
    if (!vertical) {
        uint32_t bt = (2 * k + 1) * rw;
        if (bt >= tiles_x)
            return;
        uint32_t xb = bt * kTile, y0 = line * rh * kTile;
        uint32_t y1 = y0 + rh * kTile < a.height ? y0 + rh * kTile : a.height;
        for (uint32_t y = y0; y < y1 && !bad; y++) {
            bad |= edge(a, par, lev, xb - 1, y, xb, y);
            if (a.eight && y + 1 < y1) {
                bad |= edge(a, par, lev, xb - 1, y, xb, y + 1);
                bad |= edge(a, par, lev, xb, y, xb - 1, y + 1);
            }
        }
    } else {
        uint32_t bt = (2 * k + 1) * rh;
        if (bt >= tiles_y)
            return;
        uint32_t yb = bt * kTile, x0 = line * rw * kTile;
        uint32_t x1 = x0 + rw * kTile < a.width ? x0 + rw * kTile : a.width;
        for (uint32_t x = x0; x < x1 && !bad; x++) {
            bad |= edge(a, par, lev, x, yb - 1, x, yb);
            if (a.eight && x + 1 < x1) {
                bad |= edge(a, par, lev, x, yb - 1, x + 1, yb);
                bad |= edge(a, par, lev, x + 1, yb - 1, x, yb);
            }
        }
    }
    if (bad)
        EAP_OR32(a.error, bad);
}

/* After every merge: aux = the level root of each pixel (compressing: a
 * plateau may hang on a long chain of tile roots). */
EAP_FN void body_canon1(const Args &a, int img, size_t p)
{
    if (!valid(a, p))
        return;
    size_t o = (size_t)img * a.n;
    int bad = 0;
    a.aux[o + p] = levelroot(a.par + o, a.lev + o, (uint32_t)p, bad);
    if (bad)
        EAP_OR32(a.error, bad);
}

EAP_FN void body_canon2(const Args &a, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (!valid(a, p)) {
        a.node[o + p] = 0;
        return;
    }
    uint32_t r = a.aux[o + p];
    a.node[o + p] = r == (uint32_t)p;
    if (r == (uint32_t)p) {
        uint32_t q = a.par[o + p];
        a.par[o + p] = q == r ? r : a.aux[o + q];
    } else {
        a.par[o + p] = r;
    }
}

/* ---- the tree by flooding level by level ----
 * The components of {f >= t} for t from the top level down, in a union-find
 * `uf` over the pixels reached so far whose links go to smaller keys (level,
 * index) only, so that the root of a component is its pixel of smallest key:
 * a pixel of its lowest level, the canonical element of the component's
 * node. Step t, one launch over the pixels of level t (bucketed by a
 * counting sort): unite p with its neighbours of level >= t, lock-free (a
 * root is linked by compare-and-swap from itself; a lost race retries).
 * The root of p's component is always of level t (p is in it), so a root
 * that loses its root status is linked under a pixel of level t, and the
 * link is also recorded in par (once per pixel: only the winner of its
 * compare-and-swap writes it). par is then a max-tree in the sense of the
 * tile path: links to strictly smaller keys, and the last pixel of level l
 * on a pixel's par chain is the root its component had at the end of step
 * l (its node's canonical element): canon1 and canon2 finish it, as after
 * the tile joins. uf itself is compressed freely (path splitting), so no walk
 * ever follows the long chains of par. Measured on an H100 at Pavia Centre
 * size, the levels' launches take 11 to 12 ms of the 12 ms of trees: 15 to
 * 20 us for a sparse level, up to 150 us for the fullest (latency: a few
 * dependent global accesses a find). Tried and dropped: a thread a pixel
 * instead of an edge (13.5 ms), ordering a level's pixels by their place
 * in the bucket instead of their index (no faster), full path compression
 * (a find that has passed its root while others compress can point an
 * ancestor back at it: a cycle, it hung). */
struct Flood {
    const uint32_t *off; /* per image, levels + 1: the start of each level in ord */
    uint32_t *ord;       /* per image, its valid pixels by level (or its edges, see below) */
    uint32_t *uf;        /* union-find over the flooded pixels */
    unsigned levels;
    size_t stride;       /* of ord per image: n, or the edges' capacity */
};

/* The roots of a and b, given pa = uf[a] and pb = uf[b] as read: both walks
 * at once, a step of each in turn, so that their loads' latencies overlap
 * instead of adding up (a level's launch is bound by these chains of
 * dependent loads), one load a step. Path splitting: each pixel passed
 * gets its grandparent as parent. That pixel is no root (and never will be
 * again), and the grandparent is an ancestor, of smaller key: however the
 * walks of other threads interleave, links only ever go to smaller keys, so
 * no cycle can form. (Full path compression could point an ancestor back
 * at a pixel it had passed: it hung.) */
EAP_FN void uf_find2(uint32_t *uf, uint32_t &a, uint32_t &b, uint32_t pa, uint32_t pb)
{
    while (pa != a || pb != b) {
        uint32_t ga = pa != a ? EAP_LDCG32(&uf[pa]) : pa;
        uint32_t gb = pb != b ? EAP_LDCG32(&uf[pb]) : pb;
        if (pa != a) {
            if (ga != pa)
                EAP_STORE32(&uf[a], ga);
            a = pa;
            pa = ga;
        }
        if (pb != b) {
            if (gb != pb)
                EAP_STORE32(&uf[b], gb);
            b = pb;
            pb = gb;
        }
    }
}

/* Unites the components of a and b (pa, pb: their parents as read); the
 * root that goes under the other gets it as its parent in par too. */
EAP_FN void uf_unite(uint32_t *uf, uint32_t *par, const uint16_t *lev, uint32_t a, uint32_t b,
                     uint32_t pa, uint32_t pb)
{
    for (;;) {
        uf_find2(uf, a, b, pa, pb);
        if (a == b)
            return;
        if (higher(lev, b, a)) {
            uint32_t t = a;
            a = b;
            b = t;
        }
        uint32_t r = EAP_ACAS32(&uf[a], a, b);
        if (r == a) { /* key(a) > key(b): a under b */
            par[a] = b;
            return;
        }
        /* a has a parent now: r. b is taken for a root without a load. If it
         * no longer is one, the next link may go under b itself: b is still
         * a pixel of this level of smaller key in the same component, all
         * that par needs; and no cycle can form (links go to smaller keys
         * only, and only from roots). */
        pa = r;
        pb = b;
    }
}

/* The i-th pixel of level t of image img, or UINT32_MAX past the end. */
EAP_FN uint32_t flood_pixel(const Args &a, const Flood &fl, int img, size_t i, unsigned t)
{
    const uint32_t *off = fl.off + (size_t)img * (fl.levels + 1);
    uint32_t b = off[t], e = off[t + 1];
    return i < e - b ? fl.ord[(size_t)img * fl.stride + b + i] : UINT32_MAX;
}

EAP_FN void body_flood_prepare(const Args &a, const Flood &fl, int img, size_t p)
{
    body_prepare(a, img, p);
    fl.uf[(size_t)img * a.n + p] = (uint32_t)p;
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

/* Edge j of pixel p (of level t): united when the neighbour is of level t or
 * above (an edge within the level once). */
EAP_FN void flood_edge(const Args &a, const Flood &fl, size_t o, uint32_t p, int j, unsigned t)
{
    uint32_t q;
    if (!neighbour(a, p, j, q))
        return;
    /* the parents loaded with the level, before knowing whether they are
     * needed: one latency fewer on the chain */
    unsigned l = a.lev[o + q];
    uint32_t pp = EAP_LDCG32(&fl.uf[o + p]), pq = EAP_LDCG32(&fl.uf[o + q]);
    if (l > t || (l == t && q < p))
        uf_unite(fl.uf + o, a.par + o, a.lev + o, p, q, pp, pq);
}

/* Thread i: edge i % E of the (i / E)-th pixel of level t, E = 4 or 8 edges
 * a pixel (a thread an edge: a level's launch is short on latency); with
 * per_edge = 0, every edge of the i-th pixel. */
EAP_FN void body_flood_unite(const Args &a, const Flood &fl, int img, size_t i, unsigned t,
                             int per_edge)
{
    int e = a.eight ? 8 : 4;
    size_t o = (size_t)img * a.n;
    uint32_t p = flood_pixel(a, fl, img, per_edge ? i / e : i, t);
    if (p == UINT32_MAX)
        return;
    if (per_edge)
        flood_edge(a, fl, o, p, (int)(i % e), t);
    else
        for (int j = 0; j < e; j++)
            flood_edge(a, fl, o, p, j, t);
}

/* ---- the flooding over a list of edges (8-bit levels) ----
 * The edges that unite something: edge j of p is united at p's level when
 * the neighbour is above it or of its level with a smaller index (each
 * edge between valid pixels once, from its end of smaller key): at most 2
 * (4-connectivity) or 4 (8) a pixel. The counting sort buckets these edges,
 * as p << 3 | j, by p's level, so that a level's launch has a thread per
 * edge to unite and none for the others (about half of a pixel's), and
 * no thread loads a neighbour's level. */
EAP_FN unsigned active_edges(const Args &a, size_t o, uint32_t p)
{
    unsigned m = 0, l = a.lev[o + p];
    int e = a.eight ? 8 : 4;
    for (int j = 0; j < e; j++) {
        uint32_t q;
        if (neighbour(a, p, j, q)) {
            unsigned lq = a.lev[o + q];
            if (lq > l || (lq == l && q < p))
                m |= 1u << j;
        }
    }
    return m;
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

/* Thread i: the i-th edge of level t of image img. */
EAP_FN void body_flood_eunite(const Args &a, const Flood &fl, int img, size_t i, unsigned t)
{
    const uint32_t *off = fl.off + (size_t)img * (fl.levels + 1);
    uint32_t b = off[t], e = off[t + 1];
    if (i >= e - b)
        return;
    uint32_t v = fl.ord[(size_t)img * fl.stride + b + i];
    uint32_t p = v >> 3, q = (uint32_t)((int64_t)p + edge_delta(a, v & 7));
    size_t o = (size_t)img * a.n;
    uint32_t pp = EAP_LDCG32(&fl.uf[o + p]), pq = EAP_LDCG32(&fl.uf[o + q]);
    uf_unite(fl.uf + o, a.par + o, a.lev + o, p, q, pp, pq);
}

/* ---- the tree by tile floods (8-bit levels, the default) ----
 * The flooding above, in two stages. First a block per kFT x kFT tile
 * floods its own pixels, every level from the top down, in shared memory
 * (a barrier a level present in the tile, about 170 of 256 at Pavia
 * Centre size): the tile's max-tree, each of its nodes a component of the
 * tile's upper level set. Then the flooding over the whole image with only
 * what the tiles leave open: the edges that cross a tile border, and the
 * links of the tile nodes that reach a border to their tile parents
 * (tree edges): 0.118 edges a pixel at Pavia Centre size (0.087 tree,
 * 0.031 border; 32 x 32 tiles: 0.24), against 2.0 for the pixels'
 * flooding. Levels with up to 4096 of them an image go in runs of one
 * launch, a block an image and a barrier a level (k_ftflood_run; at
 * Pavia Centre size every level), the others a launch each (k_ftflood).
 * Both stages use the union-find of mu_unite (atomicMin). In the global union-find every pixel starts under its
 * tile node's canonical element (its level root), so the finds of a
 * border edge start one step from it. A node that reaches no border is a
 * component of the whole image's level set too: its parent is its tile
 * parent's node, as the tile wrote it, and it takes no part in the global
 * flooding. The par[] that comes out has links to smaller keys and the
 * same canonical elements as the pixel flooding's (the tile edges are
 * replaced by edges that join the same sets at every level: a node's
 * pixels to its level root at its level, a node to its parent at the
 * parent's level), so canon1 and canon2 finish it alike.
 * Global edges: bins 2t (tree edges: the child's pixel index, its tile
 * parent's level root in aux) and 2t + 1 (border edges, p << 3 | j) of
 * level t, per image 2 * levels + 1 offsets. */
const int kFT = 64;                 /* tile side */
const int kFTN = kFT * kFT;         /* local index ly * kFT + lx: orders like the global one */
const uint16_t kFTNone = 0xffff;    /* no pixel: outside the image, or masked */
const uint32_t kUfRoot = 0xffffffffu; /* a root's union-find entry (see mu_unite) */

/* One tile's shared memory (host buffers in the test harness); I: the
 * type of the local indices in uf and par (uint32_t: mu_unite's atomicMin
 * has no 16-bit form). */
template <class I> struct FTile {
    uint16_t *lev;  /* kFTN */
    I *uf;          /* kFTN: union-find, then each pixel's level root */
    I *par;         /* kFTN: the tile's tree, local indices */
    uint32_t *off;  /* 257: the tile's edges by level, counts then offsets */
    uint32_t *cur;  /* 256: scatter cursors */
    uint32_t *bins; /* 2 * levels: the tile's global edges by bin */
    uint16_t *edge; /* kFTN * (2 or 4): i << 3 | j by level */
    uint8_t *mark;  /* kFTN: 1 at the level root of a node that reaches a border */
    uint32_t x0, y0, w, h;
    int img;
};

/* Shared bytes of a tile (the layout of ft_carve). */
template <class I> EAP_HD size_t ft_bytes(int eight)
{
    return (257 + 256 + 512 + 3) * 4 + (size_t)kFTN * sizeof(I) * 2 +
           (size_t)kFTN * 2 * (eight ? 5 : 3) + kFTN;
}

template <class I> EAP_FN FTile<I> ft_carve(void *mem, const Args &a, unsigned block, int img)
{
    FTile<I> s;
    uint32_t *u = (uint32_t *)mem;
    s.off = u;
    s.cur = s.off + 260;
    s.bins = s.cur + 256;
    s.uf = (I *)(s.bins + 512);
    s.par = s.uf + kFTN;
    uint16_t *h = (uint16_t *)(s.par + kFTN);
    s.lev = h;
    s.edge = h + kFTN;
    s.mark = (uint8_t *)(s.edge + (size_t)kFTN * (a.eight ? 4 : 2));
    uint32_t tx = (a.width + kFT - 1) / kFT;
    s.x0 = block % tx * kFT;
    s.y0 = block / tx * kFT;
    s.w = a.width - s.x0 < (uint32_t)kFT ? a.width - s.x0 : kFT;
    s.h = a.height - s.y0 < (uint32_t)kFT ? a.height - s.y0 : kFT;
    s.img = img;
    return s;
}

/* The global index of local pixel i. */
template <class I> EAP_FN uint32_t ft_global(const Args &a, const FTile<I> &s, uint32_t i)
{
    return (s.y0 + i / kFT) * a.width + s.x0 + i % kFT;
}

template <class I> EAP_FN void ft_load(const Args &a, const FTile<I> &s, unsigned levels, uint32_t i)
{
    uint32_t lx = i % kFT, ly = i / kFT;
    uint16_t l = kFTNone;
    if (lx < s.w && ly < s.h) {
        size_t p = ft_global(a, s, i);
        if (valid(a, p))
            l = a.lev[(size_t)s.img * a.n + p];
    }
    s.lev[i] = l;
    s.uf[i] = kUfRoot;
    s.par[i] = i;
    s.mark[i] = 0;
    if (i < 257)
        s.off[i] = 0;
    if (i < 2 * levels)
        s.bins[i] = 0;
}

/* Neighbour j of local pixel i inside the tile, when it is a pixel. */
template <class I> EAP_FN int ft_neighbour(const FTile<I> &s, uint32_t i, int j, uint32_t &q)
{
    int x = (int)(i % kFT), y = (int)(i / kFT);
    int dx = j == 0 || j == 4 || j == 6 ? -1 : j == 1 || j == 5 || j == 7 ? 1 : 0;
    int dy = j == 2 || j == 4 || j == 5 ? -1 : j == 3 || j == 6 || j == 7 ? 1 : 0;
    x += dx;
    y += dy;
    if (x < 0 || y < 0 || x >= (int)s.w || y >= (int)s.h)
        return 0;
    q = (uint32_t)(y * kFT + x);
    return s.lev[q] != kFTNone;
}

/* The tile edges that local pixel i unites (as active_edges). */
template <class I> EAP_FN unsigned ft_active(const Args &a, const FTile<I> &s, uint32_t i)
{
    unsigned m = 0, l = s.lev[i];
    if (l == kFTNone)
        return 0;
    int e = a.eight ? 8 : 4;
    for (int j = 0; j < e; j++) {
        uint32_t q;
        if (ft_neighbour(s, i, j, q)) {
            unsigned lq = s.lev[q];
            if (lq > l || (lq == l && q < i))
                m |= 1u << j;
        }
    }
    return m;
}

/* (mark holds each pixel's active edges from ft_count to ft_scatter) */
template <class I> EAP_FN void ft_count(const Args &a, const FTile<I> &s, uint32_t i)
{
    unsigned m = ft_active(a, s, i);
    s.mark[i] = (uint8_t)m;
    if (m)
        EAP_SADD32(&s.off[s.lev[i]], ft_popc(m));
}

/* off: counts to offsets (off[256] the total), cur a copy (one thread). */
template <class I> EAP_FN void ft_scan_seq(const FTile<I> &s)
{
    uint32_t sum = 0;
    for (int l = 0; l < 256; l++) {
        uint32_t c = s.off[l];
        s.off[l] = s.cur[l] = sum;
        sum += c;
    }
    s.off[256] = sum;
}

template <class I> EAP_FN void ft_scatter(const Args &a, const FTile<I> &s, uint32_t i)
{
    unsigned m = s.mark[i];
    if (!m)
        return;
    s.mark[i] = 0;
    uint32_t at = EAP_SADD32(&s.cur[s.lev[i]], ft_popc(m));
    for (; m; m &= m - 1)
        s.edge[at++] = (uint16_t)(i << 3 | (uint32_t)ft_ctz(m));
}

/* The local offset of neighbour j. */
EAP_FN int ft_delta(unsigned j)
{
    switch (j) {
    case 0: return -1;
    case 1: return 1;
    case 2: return -kFT;
    case 3: return kFT;
    case 4: return -kFT - 1;
    case 5: return -kFT + 1;
    case 6: return kFT - 1;
    default: return kFT + 1;
    }
}

/* The union-find of the tile floods (in shared memory for a tile, in
 * global memory after): a root's entry is kUfRoot, and a root goes under
 * another by atomicMin, not compare-and-swap. A level's edges mostly join
 * the same few components: with compare-and-swap the threads that would
 * link the same root succeed one a round, each loser finding its roots
 * again (measured on an H100 at Pavia Centre size: 3.9 ms of tiles and
 * 4.8 ms of global levels, 19 us a level). atomicMin never fails: the
 * first to lower a root's entry links it (and records it in par), a later
 * one lowers the entry to a smaller index if it can and goes on uniting
 * the parent it read with its own root. Every link made joins pixels that
 * are connected at this level, and goes to a smaller key (the new parent
 * is the smaller-key root of the pair; all links made at level t go to
 * pixels of level t, among which the index orders like the key), so no
 * cycle can form, the root of a component stays its pixel of smallest key,
 * and every pixel's par is written once, when it stops being a root, with
 * a pixel of the level it was linked at, in its component. */

/* The roots of a and b, given pa = uf[a] and pb = uf[b] as read (both
 * walks at once, path splitting: as uf_find2). (Also putting the first two
 * nodes of each walk straight under the root found was no faster: 6.5 ms
 * of trees against 6.2 at Pavia Centre size on an H100; a find takes
 * about 2 steps, counted on the host.) */
EAP_FN void mu_find2(volatile uint32_t *uf, uint32_t &a, uint32_t &b, uint32_t pa, uint32_t pb)
{
    while (pa != kUfRoot || pb != kUfRoot) {
        uint32_t ga = kUfRoot, gb = kUfRoot;
        if (pa != kUfRoot)
            ga = uf[pa];
        if (pb != kUfRoot)
            gb = uf[pb];
        if (pa != kUfRoot) {
            if (ga != kUfRoot)
                uf[a] = ga;
            a = pa;
            pa = ga;
        }
        if (pb != kUfRoot) {
            if (gb != kUfRoot)
                uf[b] = gb;
            b = pb;
            pb = gb;
        }
    }
}

EAP_FN void mu_unite(uint32_t *uf, uint32_t *par, const uint16_t *lev, uint32_t a, uint32_t b,
                     uint32_t pa, uint32_t pb)
{
    for (;;) {
        mu_find2(uf, a, b, pa, pb);
        if (a == b)
            return;
        if (higher(lev, b, a)) {
            uint32_t t = a;
            a = b;
            b = t;
        }
        uint32_t r = EAP_MIN32(&uf[a], b);
        if (r == kUfRoot) { /* key(a) > key(b): a under b */
            par[a] = b;
            return;
        }
        /* a had a parent, r: unite r and b, both taken for roots (the next
         * atomicMin tells) */
        a = r;
        pa = pb = kUfRoot;
    }
}

template <class I> EAP_FN void ft_unite(const FTile<I> &s, uint32_t k)
{
    volatile uint32_t *uf = s.uf;
    uint32_t v = s.edge[k];
    uint32_t a = v >> 3, b = (uint32_t)((int)a + ft_delta(v & 7));
    mu_unite(s.uf, s.par, s.lev, a, b, uf[a], uf[b]);
}

/* uf becomes each pixel's level root (levelroot compresses par within a
 * level only: the level roots' links stay). */
template <class I> EAP_FN void ft_levelroot(const Args &a, const FTile<I> &s, uint32_t i)
{
    if (s.lev[i] == kFTNone)
        return;
    int bad = 0;
    s.uf[i] = levelroot(s.par, s.lev, i, bad);
    if (bad)
        EAP_OR32(a.error, bad);
}

/* Whether local pixel i has a neighbour outside the tile; with `active`,
 * the mask of such edges that p unites (as active_edges). */
template <class I> EAP_FN unsigned ft_crossing(const Args &a, const FTile<I> &s, uint32_t i, uint32_t p, int active)
{
    int x = (int)(i % kFT), y = (int)(i / kFT);
    if (x > 0 && y > 0 && x + 1 < (int)s.w && y + 1 < (int)s.h)
        return 0; /* inside: every neighbour in the tile */
    size_t o = (size_t)s.img * a.n;
    unsigned m = 0, l = s.lev[i];
    int e = a.eight ? 8 : 4;
    for (int j = 0; j < e; j++) {
        int dx = j == 0 || j == 4 || j == 6 ? -1 : j == 1 || j == 5 || j == 7 ? 1 : 0;
        int dy = j == 2 || j == 4 || j == 5 ? -1 : j == 3 || j == 6 || j == 7 ? 1 : 0;
        int nx = x + dx, ny = y + dy;
        if (nx >= 0 && ny >= 0 && nx < (int)s.w && ny < (int)s.h)
            continue; /* in the tile */
        int64_t gx = (int64_t)s.x0 + nx, gy = (int64_t)s.y0 + ny;
        if (gx < 0 || gy < 0 || gx >= (int64_t)a.width || gy >= (int64_t)a.height)
            continue;
        uint32_t q = (uint32_t)(gy * a.width + gx);
        if (!valid(a, q))
            continue;
        if (!active)
            return 1;
        unsigned lq = a.lev[o + q];
        if (lq > l || (lq == l && q < p))
            m |= 1u << j;
    }
    return m;
}

/* From each pixel next to the border, its node and their ancestors get a
 * mark (a walk stops at a marked node: whoever marked it walks on). */
template <class I> EAP_FN void ft_mark(const Args &a, const FTile<I> &s, uint32_t i)
{
    if (s.lev[i] == kFTNone || !ft_crossing(a, s, i, ft_global(a, s, i), 0))
        return;
    uint32_t x = s.uf[i];
    for (int it = 0; it < kFTN && !s.mark[x]; it++) {
        s.mark[x] = 1;
        uint32_t q = s.par[x];
        if (q == x)
            break;
        x = s.uf[q];
    }
}

/* Pixel i's par (its level root; a level root: its tile parent's level
 * root, or itself), its global union-find entry (its level root), its
 * tree edge (k0, aux) and its border edges (node: the mask), counted in
 * the tile's bins. */
template <class I> EAP_FN void ft_emit(const Args &a, const Flood &fl, const FTile<I> &s, uint32_t i)
{
    uint32_t lx = i % kFT, ly = i / kFT;
    if (lx >= s.w || ly >= s.h)
        return;
    size_t o = (size_t)s.img * a.n;
    uint32_t p = ft_global(a, s, i);
    if (s.lev[i] == kFTNone) {
        a.k0[o + p] = 0;
        a.node[o + p] = 0;
        return;
    }
    uint32_t r = s.uf[i], q = s.par[i], pg;
    int tree = 0;
    if (r != i)
        pg = ft_global(a, s, r);
    else if (q == i)
        pg = p;
    else {
        pg = ft_global(a, s, s.uf[q]);
        tree = s.mark[i];
    }
    a.par[o + p] = pg;
    fl.uf[o + p] = r == i ? kUfRoot : pg;
    a.k0[o + p] = (uint8_t)tree;
    if (tree) {
        a.aux[o + p] = pg;
        EAP_SADD32(&s.bins[2 * s.lev[q]], 1u);
    }
    unsigned m = ft_crossing(a, s, i, p, 1);
    a.node[o + p] = (uint8_t)m;
    if (m)
        EAP_SADD32(&s.bins[2 * s.lev[i] + 1], ft_popc(m));
}

/* The global edges' bin of pixel p's tree edge, and of its border edges. */
EAP_FN unsigned ft_tree_bin(const Args &a, size_t o, uint32_t p)
{
    return 2u * a.lev[o + a.aux[o + p]];
}

/* Thread i of level t's launch: the i-th global edge of level t of image
 * img (tree edges first); its two ends in p, q. 0 past the end. */
EAP_FN int ft_global_edge(const Args &a, const Flood &fl, int img, size_t i, unsigned t,
                          uint32_t &p, uint32_t &q)
{
    const uint32_t *off = fl.off + (size_t)img * (2 * fl.levels + 1);
    uint32_t b = off[2 * t], m = off[2 * t + 1], e = off[2 * t + 2];
    if (i >= e - b)
        return 0;
    uint32_t v = fl.ord[(size_t)img * fl.stride + b + i];
    if (i < m - b) {
        p = v;
        q = a.aux[(size_t)img * a.n + p];
    } else {
        p = v >> 3;
        q = (uint32_t)((int64_t)p + edge_delta(a, v & 7));
    }
    return 1;
}

EAP_FN void body_ft_unite(const Args &a, const Flood &fl, int img, size_t i, unsigned t)
{
    uint32_t p, q;
    if (!ft_global_edge(a, fl, img, i, t, p, q))
        return;
    size_t o = (size_t)img * a.n;
    uint32_t pp = EAP_LDCG32(&fl.uf[o + p]), pq = EAP_LDCG32(&fl.uf[o + q]);
    mu_unite(fl.uf + o, a.par + o, a.lev + o, p, q, pp, pq);
}

/* The canonical element of p's node (after canon2). */
EAP_FN uint32_t node_of(const uint32_t *par, const uint16_t *lev, uint32_t p)
{
    uint32_t q = par[p];
    return (q != p && lev[q] == lev[p]) ? q : p;
}

EAP_FN int is_node(const Args &a, size_t o, size_t p) { return a.node[o + p]; }

/* Each valid pixel's contribution to its node. */
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

/* The CPU's attribute_of (maxtree.c), term for term. */
EAP_FN double attribute_of(const Args &a, int attr, size_t c)
{
    switch (attr) {
    case 1: { /* std */
        u64 n = a.cnt[c], s1 = a.s1[c], s2 = a.s2[c];
        u128 num = (u128)n * s2 - (u128)s1 * s1;
        return sqrt(u128_to_double(num)) / (double)n;
    }
    case 2: { /* diagonal */
        u64 dx = (u64)(a.x1[c] - a.x0[c]) + 1, dy = (u64)(a.y1[c] - a.y0[c]) + 1;
        return sqrt((double)(dx * dx + dy * dy));
    }
    case 3: { /* inertia */
        u64 n = a.cnt[c], sx = a.sx[c], sy = a.sy[c], sxx = a.sxx[c], syy = a.syy[c];
        u128 num = 6 * ((u128)n * sxx - (u128)sx * sx + (u128)n * syy - (u128)sy * sy) +
                   (u128)n * n;
        return u128_to_double(num) / (6.0 * (double)n * (double)n * (double)n);
    }
    default:
        return (double)a.cnt[c];
    }
}

/* kept starts as pass (thresholds <= attribute); jump pointers at the parent. */
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

#ifndef EAP_BODIES_ONLY
/* ================================================================================ */

using namespace hyprof_cuda;
using namespace eap;

namespace {

const int kThreads = 256;

#define EAP_IDX                                                                           \
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;                             \
    if (p >= a.n)                                                                         \
        return;                                                                           \
    int img = (int)blockIdx.y

__global__ void k_prepare(Args a) { EAP_IDX; body_prepare(a, img, p); }
/* One thread per tile, the tile's tree in its own slice of shared memory
 * (8 tiles a block: 48 KB): no two threads ever touch the same tree. */
const int kTilesPerBlock = 8;
__global__ void __launch_bounds__(kTilesPerBlock) k_tile(Args a, unsigned tiles)
{
    __shared__ uint16_t sl[kTilesPerBlock][kTile * kTile];
    __shared__ uint32_t sp[kTilesPerBlock][kTile * kTile];
    unsigned tile = blockIdx.x * kTilesPerBlock + threadIdx.x;
    int img = (int)blockIdx.y;
    if (tile >= tiles)
        return;
    Tile t = tile_of(a, tile);
    uint16_t *l = sl[threadIdx.x];
    uint32_t *pp = sp[threadIdx.x];
    for (int i = 0; i < kTile * kTile; i++)
        body_tile_load(a, img, t, l, pp, i);
    for (int i = 0; i < kTile * kTile; i++)
        body_tile_merge(a, t, l, pp, i);
    for (int i = 0; i < kTile * kTile; i++)
        body_tile_store(a, img, t, pp, i);
}
__global__ void k_join(Args a, int vertical, uint32_t rw, uint32_t rh, uint32_t pairs,
                       uint32_t lines)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)pairs * lines)
        return;
    body_join(a, (int)blockIdx.y, vertical, rw, rh, (uint32_t)(i % pairs), (uint32_t)(i / pairs));
}
/* The counting sort (a block per chunk of pixels; with 8-bit levels its
 * histogram in shared memory, one global atomic per level and block; with
 * more levels global atomics per pixel) and the flooding steps. */
const int kSortChunk = 4096;
const unsigned kFloodLevels = 256; /* up to this many levels, shared histograms */
__global__ void k_flood_prepare(Args a, Flood fl) { EAP_IDX; body_flood_prepare(a, fl, img, p); }
__device__ void chunk_hist(const Args &a, int img, uint32_t *h)
{
    size_t o = (size_t)img * a.n, p0 = (size_t)blockIdx.x * kSortChunk;
    size_t p1 = p0 + kSortChunk < a.n ? p0 + kSortChunk : a.n;
    for (size_t p = p0 + threadIdx.x; p < p1; p += blockDim.x)
        if (valid(a, p))
            atomicAdd(&h[a.lev[o + p]], 1u);
}
__global__ void k_hist(Args a, uint32_t *hist, unsigned L)
{
    __shared__ uint32_t h[kFloodLevels];
    int img = (int)blockIdx.y;
    if (L > kFloodLevels) {
        chunk_hist(a, img, hist + (size_t)img * L);
        return;
    }
    for (unsigned i = threadIdx.x; i < kFloodLevels; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    chunk_hist(a, img, h);
    __syncthreads();
    for (unsigned i = threadIdx.x; i < kFloodLevels; i += blockDim.x)
        if (h[i])
            atomicAdd(&hist[(size_t)img * L + i], h[i]);
}
/* cursor: per image and level, the next free place in ord (from off). */
__global__ void k_scatter(Args a, Flood fl, uint32_t *cursor, unsigned L)
{
    __shared__ uint32_t h[kFloodLevels], base[kFloodLevels];
    int img = (int)blockIdx.y;
    if (L > kFloodLevels) {
        size_t o = (size_t)img * a.n, p0 = (size_t)blockIdx.x * kSortChunk;
        size_t p1 = p0 + kSortChunk < a.n ? p0 + kSortChunk : a.n;
        for (size_t p = p0 + threadIdx.x; p < p1; p += blockDim.x)
            if (valid(a, p))
                fl.ord[o + atomicAdd(&cursor[(size_t)img * L + a.lev[o + p]], 1u)] = (uint32_t)p;
        return;
    }
    for (unsigned i = threadIdx.x; i < kFloodLevels; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    chunk_hist(a, img, h);
    __syncthreads();
    for (unsigned i = threadIdx.x; i < kFloodLevels; i += blockDim.x) {
        base[i] = h[i] ? atomicAdd(&cursor[(size_t)img * L + i], h[i]) : 0;
        h[i] = 0;
    }
    __syncthreads();
    size_t o = (size_t)img * a.n, p0 = (size_t)blockIdx.x * kSortChunk;
    size_t p1 = p0 + kSortChunk < a.n ? p0 + kSortChunk : a.n;
    for (size_t p = p0 + threadIdx.x; p < p1; p += blockDim.x)
        if (valid(a, p)) {
            unsigned l = a.lev[o + p];
            fl.ord[o + base[l] + atomicAdd(&h[l], 1u)] = (uint32_t)p;
        }
}
/* The edge list's counting sort: as k_hist and k_scatter (8-bit levels),
 * each pixel counting and placing its edges to unite. */
__device__ void chunk_ehist(const Args &a, int img, uint32_t *h)
{
    size_t o = (size_t)img * a.n, p0 = (size_t)blockIdx.x * kSortChunk;
    size_t p1 = p0 + kSortChunk < a.n ? p0 + kSortChunk : a.n;
    for (size_t p = p0 + threadIdx.x; p < p1; p += blockDim.x)
        if (valid(a, p)) {
            unsigned c = __popc(active_edges(a, o, (uint32_t)p));
            if (c)
                atomicAdd(&h[a.lev[o + p]], c);
        }
}
__global__ void k_ehist(Args a, uint32_t *hist)
{
    __shared__ uint32_t h[kFloodLevels];
    int img = (int)blockIdx.y;
    for (unsigned i = threadIdx.x; i < kFloodLevels; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    chunk_ehist(a, img, h);
    __syncthreads();
    for (unsigned i = threadIdx.x; i < kFloodLevels; i += blockDim.x)
        if (h[i])
            atomicAdd(&hist[(size_t)img * kFloodLevels + i], h[i]);
}
__global__ void k_escatter(Args a, Flood fl, uint32_t *cursor)
{
    __shared__ uint32_t h[kFloodLevels], base[kFloodLevels];
    int img = (int)blockIdx.y;
    for (unsigned i = threadIdx.x; i < kFloodLevels; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    chunk_ehist(a, img, h);
    __syncthreads();
    for (unsigned i = threadIdx.x; i < kFloodLevels; i += blockDim.x) {
        base[i] = h[i] ? atomicAdd(&cursor[(size_t)img * kFloodLevels + i], h[i]) : 0;
        h[i] = 0;
    }
    __syncthreads();
    size_t o = (size_t)img * a.n, p0 = (size_t)blockIdx.x * kSortChunk;
    size_t p1 = p0 + kSortChunk < a.n ? p0 + kSortChunk : a.n;
    uint32_t *ord = fl.ord + (size_t)img * fl.stride;
    for (size_t p = p0 + threadIdx.x; p < p1; p += blockDim.x)
        if (valid(a, p)) {
            unsigned m = active_edges(a, o, (uint32_t)p);
            if (!m)
                continue;
            unsigned l = a.lev[o + p];
            uint32_t at = base[l] + atomicAdd(&h[l], (unsigned)__popc(m));
            for (; m; m &= m - 1)
                ord[at++] = (uint32_t)p << 3 | (uint32_t)(__ffs(m) - 1);
        }
}
__global__ void k_flood_eunite(Args a, Flood fl, unsigned t)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    body_flood_eunite(a, fl, (int)blockIdx.y, i, t);
}
/* uf_unite with the lanes of a warp
 * that would link the same root pooled. The edges of a level come in pixel
 * order, so the lanes of a warp are neighbours and mostly reach the same
 * root (the component that the level's pixels join): their compare-and-swaps
 * on it would succeed one a round. Here the lanes with the same root a elect
 * the one whose b is smallest (all the b are pixels of the current level, of
 * smaller key than a: any of them may be a's parent) and it links a under
 * bmin; then each other lane links its own b under bmin (its own root: no
 * contention), taking both for roots as after a lost compare-and-swap. */
__device__ void uf_unite_warp(uint32_t *uf, uint32_t *par, const uint16_t *lev, uint32_t a,
                              uint32_t b, uint32_t pa, uint32_t pb)
{
    const int lane = (int)(threadIdx.x & 31);
    for (;;) {
        uf_find2(uf, a, b, pa, pb);
        if (a == b)
            return;
        if (higher(lev, b, a)) {
            uint32_t t = a;
            a = b;
            b = t;
        }
        unsigned m = __activemask();
        unsigned g = __match_any_sync(m, a);
        uint32_t bmin = __reduce_min_sync(g, b);
        unsigned at_min = __ballot_sync(g, b == bmin);
        int leader = __ffs(at_min) - 1;
        uint32_t r = 0;
        if (lane == leader)
            r = atomicCAS(&uf[a], a, bmin);
        r = __shfl_sync(g, r, leader);
        if (r == a) {
            if (lane == leader)
                par[a] = bmin;
            if (b == bmin)
                return;
            a = b;
            b = bmin;
            pa = a;
            pb = b;
        } else {
            pa = r;
            pb = b;
        }
    }
}
__global__ void k_flood_eunite_warp(Args a, Flood fl, unsigned t)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int img = (int)blockIdx.y;
    const uint32_t *off = fl.off + (size_t)img * (fl.levels + 1);
    uint32_t b = off[t], e = off[t + 1];
    if (i >= e - b)
        return;
    uint32_t v = fl.ord[(size_t)img * fl.stride + b + i];
    uint32_t p = v >> 3, q = (uint32_t)((int64_t)p + edge_delta(a, v & 7));
    size_t o = (size_t)img * a.n;
    uint32_t pp = __ldcg(&fl.uf[o + p]), pq = __ldcg(&fl.uf[o + q]);
    uf_unite_warp(fl.uf + o, a.par + o, a.lev + o, p, q, pp, pq);
}
/* The tile floods (see FTile): a block a tile, its shared memory laid out
 * by ft_carve; a barrier after each phase and after each level present in
 * the tile. */
const int kFTThreads = 512;
/* off: counts to offsets, by warp 0 (8 levels a lane) */
template <class I> __device__ void ft_scan_warp(const FTile<I> &s)
{
    const int lane = (int)(threadIdx.x & 31);
    uint32_t v[8], sum = 0;
    for (int k = 0; k < 8; k++) {
        v[k] = s.off[lane * 8 + k];
        sum += v[k];
    }
    uint32_t inc = sum;
    for (int d = 1; d < 32; d <<= 1) {
        uint32_t y = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d)
            inc += y;
    }
    uint32_t run = inc - sum;
    for (int k = 0; k < 8; k++) {
        s.off[lane * 8 + k] = s.cur[lane * 8 + k] = run;
        run += v[k];
    }
    if (lane == 31)
        s.off[256] = inc;
}
#define FT_EACH(body)                                                                     \
    for (uint32_t i = threadIdx.x; i < (uint32_t)kFTN; i += blockDim.x)                   \
        body;                                                                             \
    __syncthreads()
/* ghist: per image, 2 * levels bins of global edges (counts) */
template <class I>
__global__ void __launch_bounds__(kFTThreads) k_ftile(Args a, Flood fl, uint32_t *ghist)
{
    extern __shared__ uint32_t ft_mem[];
    const FTile<I> s = ft_carve<I>(ft_mem, a, blockIdx.x, (int)blockIdx.y);
    const unsigned L = fl.levels;
    FT_EACH(ft_load(a, s, L, i));
    FT_EACH(ft_count(a, s, i));
    if (threadIdx.x < 32)
        ft_scan_warp(s);
    __syncthreads();
    FT_EACH(ft_scatter(a, s, i));
    for (int t = (int)L - 1; t >= 0; t--) {
        uint32_t b = s.off[t], e = s.off[t + 1];
        if (b == e)
            continue;
        for (uint32_t k = b + threadIdx.x; k < e; k += blockDim.x)
            ft_unite(s, k);
        __syncthreads();
    }
    FT_EACH(ft_levelroot(a, s, i));
    FT_EACH(ft_mark(a, s, i));
    FT_EACH(ft_emit(a, fl, s, i));
    uint32_t *g = ghist + (size_t)blockIdx.y * 2 * L;
    for (uint32_t k = threadIdx.x; k < 2 * L; k += blockDim.x)
        if (s.bins[k])
            atomicAdd(&g[k], s.bins[k]);
}
#undef FT_EACH
/* The global edges' counting sort, as k_escatter (2 * levels bins). */
__device__ void ft_chunk_hist(const Args &a, int img, uint32_t *h)
{
    size_t o = (size_t)img * a.n, p0 = (size_t)blockIdx.x * kSortChunk;
    size_t p1 = p0 + kSortChunk < a.n ? p0 + kSortChunk : a.n;
    for (size_t p = p0 + threadIdx.x; p < p1; p += blockDim.x)
        if (valid(a, p)) {
            if (a.k0[o + p])
                atomicAdd(&h[ft_tree_bin(a, o, (uint32_t)p)], 1u);
            unsigned m = a.node[o + p];
            if (m)
                atomicAdd(&h[2 * a.lev[o + p] + 1], (unsigned)__popc(m));
        }
}
__global__ void k_ftscatter(Args a, Flood fl, uint32_t *cursor)
{
    __shared__ uint32_t h[2 * kFloodLevels], base[2 * kFloodLevels];
    const unsigned nb = 2 * fl.levels;
    int img = (int)blockIdx.y;
    for (unsigned i = threadIdx.x; i < nb; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    ft_chunk_hist(a, img, h);
    __syncthreads();
    for (unsigned i = threadIdx.x; i < nb; i += blockDim.x) {
        base[i] = h[i] ? atomicAdd(&cursor[(size_t)img * nb + i], h[i]) : 0;
        h[i] = 0;
    }
    __syncthreads();
    size_t o = (size_t)img * a.n, p0 = (size_t)blockIdx.x * kSortChunk;
    size_t p1 = p0 + kSortChunk < a.n ? p0 + kSortChunk : a.n;
    uint32_t *ord = fl.ord + (size_t)img * fl.stride;
    for (size_t p = p0 + threadIdx.x; p < p1; p += blockDim.x)
        if (valid(a, p)) {
            if (a.k0[o + p]) {
                unsigned bin = ft_tree_bin(a, o, (uint32_t)p);
                ord[base[bin] + atomicAdd(&h[bin], 1u)] = (uint32_t)p;
            }
            unsigned m = a.node[o + p];
            if (!m)
                continue;
            unsigned bin = 2 * a.lev[o + p] + 1;
            uint32_t at = base[bin] + atomicAdd(&h[bin], (unsigned)__popc(m));
            for (; m; m &= m - 1)
                ord[at++] = (uint32_t)p << 3 | (uint32_t)(__ffs(m) - 1);
        }
}
/* The global flooding's level t: its tree and border edges. */
__global__ void k_ftflood(Args a, Flood fl, unsigned t)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    body_ft_unite(a, fl, (int)blockIdx.y, i, t);
}
/* Levels hi down to lo of the global flooding in one launch, a block an
 * image, a barrier a level: for runs of levels with few edges (after the
 * tile floods a level has a few hundred to a few thousand an image at
 * Pavia Centre size), where a launch a level costs more than the level's
 * work. The levels' offsets are in shared memory. (Loading each thread's
 * first edge of the next level before the barrier was no faster.) */
const int kRunThreads = 1024;
__global__ void __launch_bounds__(kRunThreads) k_ftflood_run(Args a, Flood fl, int hi, int lo)
{
    __shared__ uint32_t so[2 * kFloodLevels + 1];
    const int img = (int)blockIdx.y;
    const size_t o = (size_t)img * a.n;
    const unsigned nb = 2 * fl.levels;
    for (unsigned k = threadIdx.x; k <= nb; k += blockDim.x)
        so[k] = fl.off[(size_t)img * (nb + 1) + k];
    __syncthreads();
    const uint32_t *ord = fl.ord + (size_t)img * fl.stride;
    uint32_t *uf = fl.uf + o;
    for (int t = hi; t >= lo; t--) {
        uint32_t b = so[2 * t], m = so[2 * t + 1] - b, cnt = so[2 * t + 2] - b;
        for (uint32_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            uint32_t v = __ldcg(&ord[b + i]), p, q;
            if (i < m) { /* a tree edge */
                p = v;
                q = __ldcg(&a.aux[o + p]);
            } else {
                p = v >> 3;
                q = (uint32_t)((int64_t)p + edge_delta(a, v & 7));
            }
            mu_unite(uf, a.par + o, a.lev + o, p, q, __ldcg(&uf[p]), __ldcg(&uf[q]));
        }
        __syncthreads();
    }
}
#define EAP_LEVEL_IDX                                                                     \
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;                             \
    int img = (int)blockIdx.y
__global__ void k_flood_unite(Args a, Flood fl, unsigned t, int per_edge)
{
    EAP_LEVEL_IDX;
    body_flood_unite(a, fl, img, i, t, per_edge);
}
__global__ void k_canon1(Args a) { EAP_IDX; body_canon1(a, img, p); }
__global__ void k_canon2(Args a) { EAP_IDX; body_canon2(a, img, p); }
/* With the area alone, the lanes of a warp on the same node add their count
 * in one atomic (neighbouring pixels mostly share a node: the root and the
 * large nodes are where the atomics of every pixel would queue). Also each
 * node's count of children (k_pend's work: one pass fewer). */
__global__ void k_acc_pixel(Args a)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int img = (int)blockIdx.y;
    bool ok = p < a.n && valid(a, p);
    if (ok)
        body_pend(a, img, p);
    if (a.cnt && !a.s1 && !a.sx && !a.x0) {
        unsigned act = __ballot_sync(0xffffffffu, ok);
        if (!ok)
            return;
        size_t o = (size_t)img * a.n;
        unsigned long long c = o + node_of(a.par + o, a.lev + o, (uint32_t)p);
        unsigned same = __match_any_sync(act, c);
        if ((int)(threadIdx.x & 31) == __ffs(same) - 1)
            atomicAdd(&a.cnt[c], (uint32_t)__popc(same));
        return;
    }
    if (ok)
        body_acc_pixel(a, img, p);
}
__global__ void k_leaf(Args a) { EAP_IDX; body_leaf(a, img, p); }
__global__ void k_up(Args a) { EAP_IDX; body_up(a, img, p); }
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

bool env_is(const char *name, const char *value)
{
    const char *s = getenv(name);
    return s && strcmp(s, value) == 0;
}

size_t env_size(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    return end == s ? 0 : (size_t)v;
}

/* Timing events of one batch's stages (upload, tree, attributes, filters,
 * download), summed over the batches and logged at debug level. Marks on
 * stream 0, in order: mark(s) starts stage s (5: the end); the time to the
 * next mark counts towards stage s, so that a pipelined batch's stages may
 * alternate (attributes, filters, attributes, ... a group of bands each). */
class StageTimer {
  public:
    static const int kStages = 5;
    ~StageTimer()
    {
        for (cudaEvent_t &e : ev_)
            if (e)
                (void)cudaEventDestroy(e);
    }
    hyprof_status_t create(hyprof_ctx_t *ctx, const char *op)
    {
        (void)ctx;
        (void)op;
        return HYPROF_OK;
    }
    hyprof_status_t mark(hyprof_ctx_t *ctx, const char *op, int stage)
    {
        if (used_ == ev_.size()) {
            cudaEvent_t e = NULL;
            HYPROF_CUDA_CHECK(cudaEventCreate(&e));
            ev_.push_back(e);
            stage_.push_back(0);
        }
        stage_[used_] = stage;
        HYPROF_CUDA_CHECK(cudaEventRecord(ev_[used_], 0));
        used_++;
        return HYPROF_OK;
    }
    /* The batch's last mark, recorded (the copies on another stream time
     * themselves against it). */
    cudaEvent_t last() const { return used_ ? ev_[used_ - 1] : NULL; }
    /* After the batch's last mark: adds its stage times. */
    hyprof_status_t add(hyprof_ctx_t *ctx, const char *op)
    {
        if (!used_)
            return HYPROF_OK;
        HYPROF_CUDA_CHECK(cudaEventSynchronize(ev_[used_ - 1]));
        for (size_t i = 0; i + 1 < used_; i++) {
            float t = 0.0f;
            HYPROF_CUDA_CHECK(cudaEventElapsedTime(&t, ev_[i], ev_[i + 1]));
            if (stage_[i] >= 0 && stage_[i] < kStages)
                ms_[stage_[i]] += t;
        }
        used_ = 0;
        return HYPROF_OK;
    }
    const double *ms() const { return ms_; }

  private:
    std::vector<cudaEvent_t> ev_;
    std::vector<int> stage_;
    size_t used_ = 0;
    double ms_[kStages] = {};
};

/* The host side of the output, on a helper thread while the device builds
 * the trees (as EMP's OutputPrep): touches every page of the output (huge
 * pages where the kernel allows them, on the context's threads) and, when
 * `pin`, page-locks it, so that neither the page faults nor the locking come
 * before the first download. With `piece` < bytes it goes piece by piece and
 * says how far it got, so that the downloads of the first pieces overlap
 * the preparation of the next. The output is overwritten entirely, so the
 * zero written into each page is harmless. */
class OutputPrep {
  public:
    /* The pieces: [bound(k), bound(k + 1)), ending on page boundaries (no
     * page is locked twice); a copy must stay within one (a page-locked
     * range is an allocation of its own). */
    size_t bound(size_t k) const
    {
        if (k == 0)
            return 0;
        uintptr_t e = ((uintptr_t)p_ + k * piece_ + kPage - 1) & ~(uintptr_t)(kPage - 1);
        size_t b = (size_t)(e - (uintptr_t)p_);
        return b < bytes_ ? b : bytes_;
    }
    /* The end of the piece holding byte `off`. */
    size_t piece_end(size_t off) const
    {
        size_t k = off / piece_;
        while (k > 0 && bound(k) > off)
            k--;
        while (bound(k + 1) <= off)
            k++;
        return bound(k + 1);
    }
    OutputPrep() = default;
    OutputPrep(const OutputPrep &) = delete;
    OutputPrep &operator=(const OutputPrep &) = delete;
    ~OutputPrep()
    {
        join();
        unlock();
    }
    /* After the copies (or on an early return, after waiting for them). */
    void unlock()
    {
        if (!locked_.empty())
            (void)cudaDeviceSynchronize(); /* an early return may leave copies in flight */
        for (void *p : locked_)
            (void)cudaHostUnregister(p);
        locked_.clear();
        (void)cudaGetLastError();
    }
    void start(const hyprof_ctx_t *ctx, unsigned char *p, size_t bytes, bool pin, bool fault,
               int device, size_t piece)
    {
        fault_ = fault && !env_is("HYPROF_EAP_PREFAULT", "0"); /* "0": the locking faults them */
        p_ = p;
        bytes_ = bytes;
        piece_ = piece < kPage ? kPage : piece;
        try {
            locked_.reserve(bytes / piece + 1);
            t_ = std::thread(&OutputPrep::work, this, ctx, p, bytes, pin, device, piece);
        } catch (...) {
            work(ctx, p, bytes, pin, device, piece);
        }
    }
    /* Waits until the first `upto` bytes are prepared. */
    void wait_for(size_t upto)
    {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return ready_ >= upto || finished_; });
    }
    void join()
    {
        if (t_.joinable())
            t_.join();
    }
    double ms() const { return ms_; }
    double prefault_ms() const { return prefault_ms_; }

  private:
    static double ms_since(std::chrono::steady_clock::time_point t0)
    {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
            .count();
    }
    void work(const hyprof_ctx_t *ctx, unsigned char *p, size_t bytes, bool pin, int device,
              size_t piece)
    {
        const auto t0 = std::chrono::steady_clock::now();
        const bool fault = fault_;
        pin = pin && cudaSetDevice(device) == cudaSuccess;
        (void)piece;
        for (size_t k = 0; bound(k) < bytes; k++) {
            size_t off = bound(k), b = bound(k + 1) - off;
            auto t1 = std::chrono::steady_clock::now();
            if (fault)
                hyprof__eap_prefault(ctx, p + off, b);
            prefault_ms_ += ms_since(t1);
            if (pin && cudaHostRegister(p + off, b, cudaHostRegisterDefault) == cudaSuccess)
                locked_.push_back(p + off);
            (void)cudaGetLastError();
            std::lock_guard<std::mutex> lock(m_);
            ready_ = off + b;
            cv_.notify_all();
        }
        std::lock_guard<std::mutex> lock(m_);
        finished_ = true;
        ms_ = ms_since(t0);
        cv_.notify_all();
    }
    static const size_t kPage = 4096;
    unsigned char *p_ = nullptr;
    size_t bytes_ = 0, piece_ = 1;
    std::thread t_;
    std::mutex m_;
    std::condition_variable cv_;
    size_t ready_ = 0;
    bool finished_ = false, fault_ = true;
    std::vector<void *> locked_;
    double ms_ = 0.0, prefault_ms_ = 0.0;
};

/* Page-locked staging for the 8-bit planes' downloads, kept for the
 * process (4 x 8 MB, portable): cudaHostAlloc took 11 to 13 ms for them on
 * the H200 bench host, once per call, and freeing costs again. A call that
 * finds it taken (another call at the same time) allocates its own. */
struct StageCache {
    std::mutex m;
    uint8_t *p[4] = {};
    size_t bytes = 0;
    bool busy = false, failed = false;
};
StageCache &stage_cache()
{
    static StageCache c;
    return c;
}
/* The cache's buffers into p (true), or false: allocate your own. */
bool stage_cache_take(size_t bytes, uint8_t **p)
{
    StageCache &c = stage_cache();
    std::lock_guard<std::mutex> lock(c.m);
    if (c.busy || c.failed || bytes > ((size_t)8 << 20))
        return false;
    if (!c.bytes) {
        for (int i = 0; i < 4; i++)
            if (cudaHostAlloc((void **)&c.p[i], (size_t)8 << 20, cudaHostAllocPortable) !=
                cudaSuccess) {
                (void)cudaGetLastError();
                for (int j = 0; j < i; j++)
                    (void)cudaFreeHost(c.p[j]);
                c.failed = true;
                return false;
            }
        c.bytes = (size_t)8 << 20;
    }
    for (int i = 0; i < 4; i++)
        p[i] = c.p[i];
    c.busy = true;
    return true;
}
void stage_cache_give()
{
    StageCache &c = stage_cache();
    std::lock_guard<std::mutex> lock(c.m);
    c.busy = false;
}

/* A call's device buffers are carved from one allocation (Slice below),
 * kept for the process after the call, one per device, and taken again by
 * the next call that fits in it: the twenty-odd cudaMalloc and cudaFree of a
 * call took 0.9 and 1.2 ms at Pavia Centre size on the H200 (a tenth of the
 * compute). Kept only up to an eighth of the device's memory (a large
 * scene's are freed), never with $HYPROF_EAP_KEEP=0. The memory it holds is
 * counted as free by plan() (the call takes it, or frees it before
 * allocating a larger one), so planning is unchanged for EAP; other
 * operations see it as used (as EMP's pool, which keeps up to the same
 * eighth). A call that finds it taken (a concurrent call) allocates its own. */
struct ArenaSlot {
    void *p = nullptr;
    size_t bytes = 0;
    bool busy = false;
};
struct ArenaCache {
    std::mutex m;
    ArenaSlot slot[64];
};
ArenaCache &arena_cache()
{
    static ArenaCache *c = new ArenaCache; /* never freed: no cudaFree after the runtime's exit */
    return *c;
}
bool arena_keep() { return !env_is("HYPROF_EAP_KEEP", "0"); }
/* Bytes the idle cached allocation of `device` holds (0: none, or taken). */
size_t arena_idle(int device)
{
    if (device < 0 || device >= 64)
        return 0;
    ArenaCache &c = arena_cache();
    std::lock_guard<std::mutex> lock(c.m);
    const ArenaSlot &s = c.slot[device];
    return s.p && !s.busy ? s.bytes : 0;
}
/* The cached allocation when it holds `need` bytes (its size in *got), else
 * null, having freed an idle one too small (room for the new one). */
void *arena_take(int device, size_t need, size_t *got)
{
    if (device < 0 || device >= 64)
        return nullptr;
    ArenaCache &c = arena_cache();
    std::lock_guard<std::mutex> lock(c.m);
    ArenaSlot &s = c.slot[device];
    if (!s.p || s.busy)
        return nullptr;
    if (s.bytes >= need) {
        s.busy = true;
        *got = s.bytes;
        return s.p;
    }
    (void)cudaFree(s.p);
    (void)cudaGetLastError();
    s = ArenaSlot();
    return nullptr;
}
/* Back to the cache (or freed); the device work on it is over. */
void arena_give(int device, void *p, size_t bytes)
{
    if (!p)
        return;
    size_t free_b = 0, total = 0;
    bool keep = arena_keep() && device >= 0 && device < 64 &&
                cudaMemGetInfo(&free_b, &total) == cudaSuccess && bytes <= total / 8;
    (void)cudaGetLastError();
    {
        ArenaCache &c = arena_cache();
        std::lock_guard<std::mutex> lock(c.m);
        if (device >= 0 && device < 64) {
            ArenaSlot &s = c.slot[device];
            if (s.p == p) {
                if (keep) {
                    s.busy = false;
                    return;
                }
                s = ArenaSlot();
            } else if (keep && !s.p) {
                s.p = p;
                s.bytes = bytes;
                s.busy = false;
                return;
            }
        }
    }
    (void)cudaFree(p);
    (void)cudaGetLastError();
}

/* A buffer carved from the call's allocation (EapCuda::carve). */
template <typename T> class Slice {
  public:
    T *get() const { return p_; }
    void set(T *p) { p_ = p; }
    void reset() { p_ = nullptr; }

  private:
    T *p_ = nullptr;
};

/* Places buffers one after the other, 256-byte aligned, from `base` (null:
 * only their total size). */
class Carver {
  public:
    explicit Carver(unsigned char *base) : base_(base) {}
    template <typename T> void take(Slice<T> &s, size_t count)
    {
        if (count == 0)
            count = 1;
        off_ = (off_ + 255) & ~(size_t)255;
        s.set(base_ ? (T *)(base_ + off_) : nullptr);
        off_ += count * sizeof(T);
    }
    size_t used() const { return off_; }

  private:
    unsigned char *base_;
    size_t off_ = 0;
};

class EapCuda {
  public:
    EapCuda(hyprof_ctx_t *c, const hyprof_eap_args_t *a) : ctx(c), a_(a)
    {
        const char *t = getenv("HYPROF_EAP_TRACE");
        trace_ = t && strcmp(t, "1") == 0;
    }
    ~EapCuda()
    {
        copy_.reset();
        copy2_.reset();
        up_.reset();
        if (cached_stage_) {
            for (Event &e : stage_ev_)
                e.reset(); /* the copies into the cache's buffers are over */
            (void)cudaDeviceSynchronize();
            stage_cache_give();
        }
        for (cudaEvent_t &e : dl_)
            if (e)
                (void)cudaEventDestroy(e);
        for (cudaEvent_t &e : pipe_ev_)
            (void)cudaEventDestroy(e);
        give_arena();
        if (trace_start_)
            (void)cudaEventDestroy(trace_start_);
        if (trace_now_)
            (void)cudaEventDestroy(trace_now_);
    }

    hyprof_status_t run()
    {
        const hyprof_eap_args_t *a = a_;
        n_ = a->width * a->height;
        for (size_t f = 0; f < a->nfilters; f++) {
            switch (a->filters[f].attribute) {
            case HYPROF_ATTRIBUTE_STD: need_cnt_ = need_std_ = true; break;
            case HYPROF_ATTRIBUTE_INERTIA: need_cnt_ = need_inertia_ = true; break;
            case HYPROF_ATTRIBUTE_DIAGONAL: need_box_ = true; break;
            default: need_cnt_ = true; break;
            }
            nthr_ += a->filters[f].nthresholds;
        }
        esize_ = a->out16 ? sizeof(uint16_t) : sizeof(float);
        each_ = a->each != nullptr;
        /* 8-bit planes on the device, widened on the host, for 8-bit levels
         * ($HYPROF_EAP_NARROW=0: the planes in the output's type). For 16-bit
         * output too: half the download, and no page-locking of the output
         * (on the H200 the locking of a 10748x12288 band's 4 GB of planes
         * held up the trees' launches: 3.9 s for the large scene, 2.7 s
         * with 8-bit planes) */
        out_base_ = a->out16 ? (unsigned char *)a->out16 : (unsigned char *)a->out32;
        /* the caller's page-locked output (hyprof_pinned_cache_set): the
         * planes in its type, copied straight into it at the bus speed, with
         * nothing to fault, lock or widen on the host */
        caller_pinned_ = !each_ && hyprof__cuda_is_pinned(out_base_);
        /* (8-bit planes widened into the caller's page-locked output
         * measured slower on the H100: 18.9 ms against 16.5 for the hybrid
         * download, 15:10 and 15:47 rounds) */
        narrow_ = a->levels <= 256 && !caller_pinned_ && !env_is("HYPROF_EAP_NARROW", "0");
        dsize_ = narrow_ ? 1 : esize_;
        rounds_ = a->levels > 256 ? 16 : 8;
        flood_ = !env_is("HYPROF_EAP_TILES", "1");
        /* the edge list: 8-bit levels, p << 3 | j in 32 bits
         * ($HYPROF_EAP_FLOOD_LIST=pixels: the pixel list, a thread an edge
         * of each) */
        elist_ = flood_ && a->levels <= kFloodLevels && n_ < ((size_t)1 << 29) &&
                 !env_is("HYPROF_EAP_FLOOD_LIST", "pixels") &&
                 !env_is("HYPROF_EAP_FLOOD_EDGES", "0");
        ecap_ = elist_ ? n_ * (a->connectivity == 8 ? 4 : 2) : n_;
        /* the tile floods ($HYPROF_EAP_TILE_FLOOD=0: the pixels' flooding) */
        ftile_ = elist_ && !env_is("HYPROF_EAP_TILE_FLOOD", "0");
        auto r0 = std::chrono::steady_clock::now();
        HYPROF_TRY(plan());
        double plan_ms = ms_since(r0);
        /* Page-locked output: the downloads run at the bus speed (as in EADP,
         * pageable copies ran at a fraction of it). Not for outputs of many
         * GB (the large scene's is 63 GB), where pinning would hold that much
         * of the host memory at once. Prepared (faulted, and locked unless
         * the planes are 8-bit) while the device buffers are allocated and
         * the first trees build. */
        OutputPrep prep;
        size_t out_bytes = (each_ ? 1 : a->bands) * a->planes * n_ * esize_;
        out_bytes_ = out_bytes;
        const char *pin_env = getenv("HYPROF_EAP_PIN_ALL"); /* "0": piece by piece */
        pageable_ = env_is("HYPROF_EAP_PIN", "0");
        pinned_ = !narrow_ && !pageable_ && !caller_pinned_ && out_bytes <= kPinAll &&
                  !(pin_env && strcmp(pin_env, "0") == 0);
        int device = 0;
        {
            const char *op = a->op;
            HYPROF_CUDA_CHECK(cudaGetDevice(&device));
        }
        prep_ = &prep;
        /* $HYPROF_EAP_PIN_PIECE=N: prepared N bytes at a time, each piece's
         * download as soon as it is ready */
        piece_ = env_size("HYPROF_EAP_PIN_PIECE");
        /* (8-bit planes into pageable memory widened behind the prefault,
         * 64 MB at a time, measured slower on the H100 at Pavia Centre size:
         * the widening 9.8 ms instead of 4.1, the faults' threads and the
         * widening's sharing the cores; the profile 25.2 ms against 24.2) */
        if (!piece_ || piece_ > out_bytes)
            piece_ = out_bytes ? out_bytes : 1;
        prep.start(ctx, out_base_, out_bytes, pinned_, !caller_pinned_, device, piece_);
        auto h0 = std::chrono::steady_clock::now();
        double prep_start_ms = ms_since(r0) - plan_ms;
        HYPROF_TRY(alloc());
        alloc_ms_ = ms_since(h0);
        HYPROF_TRY(timer_.create(ctx, a->op));
        if (trace_) {
            const char *op = a->op;
            HYPROF_CUDA_CHECK(cudaEventCreate(&trace_start_));
            HYPROF_CUDA_CHECK(cudaEventCreate(&trace_now_));
        }
        /* the levels page-locked: their upload at the bus speed
         * ($HYPROF_EAP_PIN_IN=0: pageable) */
        HostPin in_pin;
        auto h2 = std::chrono::steady_clock::now();
        /* each_ pipelined: a band at a time, just before its upload is
         * queued (while the device works on the band before) */
        pin_each_ = each_ && slots_ == 2 && !env_is("HYPROF_EAP_PIN_IN", "0");
        if (!env_is("HYPROF_EAP_PIN_IN", "0"))
            in_pin.pin((void *)a->q, (pin_each_ ? 1 : a->bands) * n_ * sizeof(uint16_t));
        double in_pin_ms = ms_since(h2);
        auto hb = std::chrono::steady_clock::now();
        double setup_ms = ms_since(r0);
        if (each_ && slots_ == 2) {
            HYPROF_TRY(run_each());
        } else {
            for (size_t b0 = 0; b0 < a->bands; b0 += nb_) {
                size_t nb = a->bands - b0 < nb_ ? a->bands - b0 : nb_;
                HYPROF_TRY(batch(b0, nb));
                if (each_ && a->each(a->each_user, b0, a->out16))
                    return hyprof__error(ctx, HYPROF_ERR_CANCELLED, a->op,
                                         "stopped after band %zu", b0 + 1);
                HYPROF_TRY(hyprof__progress(ctx, (double)(b0 + nb) / (double)a->bands, a->op));
            }
        }
        double t[StageTimer::kStages];
        for (int i = 0; i < StageTimer::kStages; i++)
            t[i] = timer_.ms()[i];
        if (each_ && slots_ == 2)
            t[4] = each_dl_ms_; /* on copy_, overlapping the next band's stages */
        if (pipe_gb_)
            t[4] += pipe_dl_ms_; /* on copy_, overlapping the next groups' stages */
        char piped[128] = "";
        if (pipe_gb_)
            snprintf(piped, sizeof piped,
                     ", groups of %zu band(s) pipelined (downloads after the compute %.3f ms)",
                     pipe_gb_, pipe_tail_ms_);
        auto h1 = std::chrono::steady_clock::now();
        double batches_ms = ms_since(hb);
        release();
        prep.join();
        prep.unlock();
        double release_ms = ms_since(h1);
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "%s: cuda host ms: plan %.2f, output preparation start %.2f, set-up %.2f "
                    "(allocations included), batches %.2f, release %.2f; total %.2f",
                    a->op, plan_ms, prep_start_ms, setup_ms, batches_ms, release_ms,
                    ms_since(r0));
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "%s: cuda, %zu band(s) of %zux%zu in batches of %zu%s%s%s; device ms: upload "
                    "%.3f, tree %.3f, attributes %.3f, filters %.3f, download %.3f; host "
                    "output preparation %.1f ms (page faults %.1f, page-lock %.1f); host ms: "
                    "device allocations %.1f, input page-lock %.1f, staging %.1f, waits for "
                    "the copies %.1f, "
                    "widening %.1f, release %.1f",
                    a->op, a->bands, a->width, a->height, nb_,
                    narrow_ ? ", 8-bit planes widened on the host"
                    : caller_pinned_ ? ", into the caller's page-locked output" : "",
                    each_ ? (slots_ == 2 ? ", handed over band by band, downloads overlapping "
                                           "the next band"
                                         : ", handed over band by band")
                          : "",
                    piped, t[0], t[1], t[2],
                    t[3], t[4], prep.ms(), prep.prefault_ms(), prep.ms() - prep.prefault_ms(),
                    alloc_ms_, in_pin_ms + pin_each_ms_, stage_ms_, wait_ms_, widen_ms_,
                    release_ms);
        return HYPROF_OK;
    }

  private:
    static double ms_since(std::chrono::steady_clock::time_point t0)
    {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
            .count();
    }
    /* The device buffers back before the call returns (timed). */
    void release()
    {
        ord_.reset();
        hist_.reset();
        off_.reset();
        mask_.reset();
        k0_.reset();
        k1_.reset();
        node_.reset();
        lev_.reset();
        par_.reset();
        aux_.reset();
        aux2_.reset();
        pend_.reset();
        cnt_.reset();
        box_.reset();
        s64_.reset();
        thr_.reset();
        out_.reset();
        error_.reset();
        lev_next_.reset();
        give_arena();
    }
    /* The allocation back to the cache once the device is done with it (an
     * early return may leave kernels and copies queued). */
    void give_arena()
    {
        if (!arena_)
            return;
        (void)cudaDeviceSynchronize();
        (void)cudaGetLastError();
        arena_give(device_, arena_, arena_bytes_);
        arena_ = nullptr;
        arena_bytes_ = 0;
    }
    bool trace_ = false;
    cudaEvent_t trace_start_ = NULL, trace_now_ = NULL;
    static const size_t kPinAll = (size_t)8 << 30, kPinChunk = (size_t)1 << 30;
    hyprof_ctx_t *ctx;
    const hyprof_eap_args_t *a_;
    bool pinned_ = false, pageable_ = false, caller_pinned_ = false;
    OutputPrep *prep_ = nullptr; /* run()'s */
    unsigned char *out_base_ = nullptr;
    size_t piece_ = 1;
    size_t n_ = 0, nb_ = 0, esize_ = 4, nthr_ = 0;
    bool narrow_ = false; /* 8-bit planes on the device, widened on the host */
    bool each_ = false;   /* hyprof_attribute_profiles_bands: a band at a time */
    int slots_ = 1;       /* device planes buffers (each_: 2, pipelined) */
    Stream copy_;         /* each_, batch_piped: the planes' downloads */
    Stream copy2_;        /* batch_piped, hybrid: the 8-bit groups' downloads */
    Stream up_;           /* each_: the next band's upload */
    Event up_done_, lev_free_;
    DeviceBuffer<uint16_t> lev_next_; /* each_: the next band's levels */
    size_t prefetched_ = 0; /* band + 1 whose levels are in lev_next_ (0: none) */
    bool pin_each_ = false; /* each_: the levels page-locked band by band */
    std::vector<std::unique_ptr<HostPin>> in_pins_;
    double pin_each_ms_ = 0.0;
    Event done_[2];       /* each_: a slot's planes computed */
    cudaEvent_t dl_[2] = {NULL, NULL}; /* each_: timing of a band's download */
    size_t dsize_ = 4;    /* bytes of a plane element on the device */
    /* narrow_: page-locked staging of the downloads, widened while the next
     * copies run */
    static const int kStages = 4;
    static const size_t kStageBytes = (size_t)8 << 20;
    PinnedBuffer<uint8_t> stage_[kStages]; /* when the cache's are taken */
    uint8_t *stage_ptr_[kStages] = {};
    bool cached_stage_ = false;
    Event stage_ev_[kStages];
    size_t stage_bytes_ = 0;
    double alloc_ms_ = 0.0, stage_ms_ = 0.0, wait_ms_ = 0.0, widen_ms_ = 0.0;
    double each_dl_ms_ = 0.0; /* each_ pipelined: the downloads on copy_ */
    /* batch_piped: a group's planes computed; its copy's start and end
     * (timing) */
    std::vector<std::unique_ptr<Event>> pipe_done_;
    std::vector<cudaEvent_t> pipe_ev_;
    double pipe_dl_ms_ = 0.0;   /* the copies, summed */
    double pipe_tail_ms_ = 0.0; /* from the compute's end to the last copy's */
    size_t pipe_gb_ = 0;        /* bands a group (0: no batch was pipelined) */
    size_t out_bytes_ = 0;
    size_t oc_ = 0;     /* pixels of the planes on the device: n_, or a chunk (nb_ = 1) */
    size_t b0_ = 0;     /* the batch's first band */
    int rounds_ = 8;
    bool need_cnt_ = false, need_std_ = false, need_inertia_ = false, need_box_ = false;
    bool flood_ = false; /* 8-bit levels: the tree by flooding, else by tiles */
    bool elist_ = false; /* flooding over the list of edges to unite (8-bit levels) */
    bool ftile_ = false; /* the tile floods, then the global flooding of what they leave */
    size_t ecap_ = 0;    /* ord per image: n, or the edges' capacity */
    Slice<uint32_t> ord_, hist_, off_;
    std::vector<uint32_t> hist_h_, off_h_, maxc_;

    Slice<uint8_t> mask_, k0_, k1_, node_;
    Slice<uint16_t> lev_;
    Slice<uint32_t> par_, aux_, aux2_, pend_, cnt_, box_;
    Slice<u64> s64_;
    Slice<double> thr_;
    Slice<int> error_;
    Slice<unsigned char> out_;
    /* all of them, in one allocation (from the arena cache, or its own) */
    void *arena_ = nullptr;
    size_t arena_bytes_ = 0;
    int device_ = -1;
    Args args_{};
    StageTimer timer_;

    /* device bytes per pixel of one image (not counting the output planes) */
    size_t image_bytes() const
    {
        return 2 + 4 * 4 + 3 + (flood_ ? 4 * ecap_ / (n_ ? n_ : 1) : 0) + (need_cnt_ ? 4 : 0) +
               (need_std_ ? 16 : 0) +
               (need_inertia_ ? 32 : 0) + (need_box_ ? 16 : 0);
    }

    hyprof_status_t plan()
    {
        const char *op = a_->op;
        size_t budget = 0;
        HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
        if (device_ < 0)
            HYPROF_CUDA_CHECK(cudaGetDevice(&device_));
        budget += arena_idle(device_); /* this call takes it, or frees it first */
        /* + per band with flooding: the histograms and offsets of its two images */
        size_t tree = n_ * 2 * image_bytes() + (flood_ ? 2 * (2 * (size_t)a_->levels + 1) * 8 : 0);
        size_t planes = n_ * a_->planes * dsize_;
        size_t fixed = n_ + nthr_ * sizeof(double) + 4096;
        nb_ = budget > fixed ? (budget - fixed) / (tree + planes) : 0;
        oc_ = n_;
        slots_ = 1;
        if (each_) { /* a band at a time; two planes buffers when they fit */
            nb_ = nb_ ? 1 : 0;
            if (budget > fixed && budget - fixed >= tree + 2 * planes + n_ * sizeof(uint16_t) &&
                !env_is("HYPROF_EAP_PIPELINE", "0"))
                slots_ = 2;
        }
        size_t forced_oc = env_size("HYPROF_EAP_OUT_CHUNK");
        if (nb_ == 0 || (forced_oc && forced_oc < n_)) {
            if (narrow_) { /* the chunks go straight to the output */
                narrow_ = false;
                dsize_ = esize_;
                return plan();
            }
            slots_ = 1;
            /* one band at a time, its planes computed and downloaded in
             * chunks of pixels: only its trees must fit */
            size_t room = budget > fixed + tree ? budget - fixed - tree : 0;
            oc_ = room / (a_->planes * esize_);
            size_t least = n_ < 4096 ? n_ : 4096;
            if (oc_ < least)
                return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                                     "the trees of one band of %zux%zu pixels need %zu bytes of "
                                     "device memory, %zu usable",
                                     a_->width, a_->height,
                                     tree + fixed + least * a_->planes * esize_, budget);
            if (forced_oc && forced_oc < oc_)
                oc_ = forced_oc;
            if (oc_ > n_)
                oc_ = n_;
            nb_ = 1;
            hyprof__log(ctx, HYPROF_LOG_DEBUG,
                        "%s: cuda, one band at a time, its planes in chunks of %zu pixels", op,
                        oc_);
        }
        size_t forced = env_size("HYPROF_EAP_BAND_GROUP");
        if (forced && forced < nb_)
            nb_ = forced;
        if (nb_ > a_->bands)
            nb_ = a_->bands;
        if (nb_ > 32767) /* grid y: 2 images a band */
            nb_ = 32767;
        return HYPROF_OK;
    }

    /* The buffers' places from `base` (null: their total size only). */
    size_t carve(unsigned char *base)
    {
        Carver c(base);
        size_t m = 2 * nb_ * n_;
        c.take(lev_, m);
        c.take(node_, m);
        c.take(par_, m);
        c.take(aux_, m);
        c.take(aux2_, m);
        c.take(pend_, m);
        c.take(k0_, m);
        c.take(k1_, m);
        if (need_cnt_)
            c.take(cnt_, m);
        size_t n64 = (need_std_ ? 2 : 0) + (need_inertia_ ? 4 : 0);
        if (n64)
            c.take(s64_, n64 * m);
        if (need_box_)
            c.take(box_, 4 * m);
        c.take(out_, slots_ * nb_ * a_->planes * oc_ * dsize_);
        c.take(error_, 1);
        if (flood_) {
            size_t bins = ftile_ ? 2 * (size_t)a_->levels : a_->levels; /* tile floods: tree and border edges */
            c.take(ord_, 2 * nb_ * ecap_);
            c.take(hist_, 2 * nb_ * bins);
            c.take(off_, 2 * nb_ * (bins + 1));
        }
        c.take(thr_, nthr_);
        if (a_->mask)
            c.take(mask_, n_);
        return c.used();
    }

    hyprof_status_t alloc()
    {
        const char *op = a_->op;
        size_t m = 2 * nb_ * n_;
        size_t need = carve(nullptr), got = 0;
        if (device_ < 0)
            HYPROF_CUDA_CHECK(cudaGetDevice(&device_));
        arena_ = arena_take(device_, need, &got);
        arena_bytes_ = got;
        if (!arena_) {
            cudaError_t e = cudaMalloc(&arena_, need);
            if (e != cudaSuccess) {
                arena_ = nullptr;
                (void)cudaGetLastError();
                return hyprof__error(ctx,
                                     e == cudaErrorMemoryAllocation ? HYPROF_ERR_DEVICE_MEMORY
                                                                    : HYPROF_ERR_DEVICE,
                                     op, "cudaMalloc of %zu bytes failed: %s", need,
                                     cudaGetErrorString(e));
            }
            arena_bytes_ = need;
        }
        carve((unsigned char *)arena_);
        if (flood_) {
            size_t L = a_->levels;
            size_t bins = ftile_ ? 2 * L : L;
            hist_h_.resize(2 * nb_ * bins);
            off_h_.resize(2 * nb_ * (bins + 1));
            maxc_.resize(L);
        }
        size_t t = 0;
        for (size_t f = 0; f < a_->nfilters; f++) {
            const hyprof_attribute_filter_t *fl = &a_->filters[f];
            HYPROF_CUDA_CHECK(cudaMemcpy(thr_.get() + t, fl->thresholds,
                                         fl->nthresholds * sizeof(double),
                                         cudaMemcpyHostToDevice));
            t += fl->nthresholds;
        }
        if (a_->mask)
            HYPROF_CUDA_CHECK(cudaMemcpy(mask_.get(), a_->mask, n_, cudaMemcpyHostToDevice));
        HYPROF_CUDA_CHECK(cudaMemset(error_.get(), 0, sizeof(int)));

        Args &g = args_;
        g.n = n_;
        g.width = (uint32_t)a_->width;
        g.height = (uint32_t)a_->height;
        g.eight = a_->connectivity == 8;
        g.top = a_->levels - 1;
        g.mask = a_->mask ? mask_.get() : nullptr;
        g.lev = lev_.get();
        g.par = par_.get();
        g.aux = aux_.get();
        g.aux2 = aux2_.get();
        g.pend = pend_.get();
        g.k0 = k0_.get();
        g.k1 = k1_.get();
        g.node = node_.get();
        g.cnt = need_cnt_ ? cnt_.get() : nullptr;
        u64 *s = s64_.get();
        if (need_std_) {
            g.s1 = s;
            g.s2 = s + m;
            s += 2 * m;
        }
        if (need_inertia_) {
            g.sx = s;
            g.sy = s + m;
            g.sxx = s + 2 * m;
            g.syy = s + 3 * m;
        }
        if (need_box_) {
            g.x0 = box_.get();
            g.x1 = g.x0 + m;
            g.y0 = g.x0 + 2 * m;
            g.y1 = g.x0 + 3 * m;
        }
        g.error = error_.get();
        return HYPROF_OK;
    }

    dim3 grid(int nimg) const { return dim3((unsigned)((n_ + kThreads - 1) / kThreads), nimg); }

    /* 8-bit levels: the counting sort into ord (one small copy to the host:
     * the level sizes give each level's grid and skip the empty levels),
     * then one launch a level (see Flood) and the canonical form. */
    hyprof_status_t build_flood(int nimg)
    {
        const char *op = a_->op;
        Args &g = args_;
        const unsigned L = a_->levels;
        Flood fl;
        fl.off = off_.get();
        fl.ord = ord_.get();
        fl.uf = g.aux2;
        fl.levels = L;
        fl.stride = ecap_;
        dim3 gr = grid(nimg);
        k_flood_prepare<<<gr, kThreads>>>(g, fl);
        HYPROF_CUDA_CHECK_LAUNCH("k_flood_prepare");
        size_t nh = (size_t)nimg * L;
        HYPROF_CUDA_CHECK(cudaMemsetAsync(hist_.get(), 0, nh * sizeof(uint32_t)));
        dim3 gs((unsigned)((n_ + kSortChunk - 1) / kSortChunk), nimg);
        if (elist_)
            k_ehist<<<gs, kThreads>>>(g, hist_.get());
        else
            k_hist<<<gs, kThreads>>>(g, hist_.get(), L);
        HYPROF_CUDA_CHECK_LAUNCH("k_hist");
        HYPROF_CUDA_CHECK(cudaMemcpy(hist_h_.data(), hist_.get(), nh * sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost));
        uint32_t *maxc = maxc_.data();
        std::fill(maxc_.begin(), maxc_.end(), 0u);
        for (int i = 0; i < nimg; i++) {
            uint32_t *h = hist_h_.data() + (size_t)i * L, *o = off_h_.data() + (size_t)i * (L + 1);
            uint32_t sum = 0;
            for (unsigned l = 0; l < L; l++) {
                uint32_t c = h[l];
                maxc[l] = c > maxc[l] ? c : maxc[l];
                o[l] = h[l] = sum; /* hist becomes the scatter's cursor */
                sum += c;
            }
            o[L] = sum;
        }
        HYPROF_CUDA_CHECK(cudaMemcpy(off_.get(), off_h_.data(),
                                     (size_t)nimg * (L + 1) * sizeof(uint32_t),
                                     cudaMemcpyHostToDevice));
        HYPROF_CUDA_CHECK(cudaMemcpy(hist_.get(), hist_h_.data(), nh * sizeof(uint32_t),
                                     cudaMemcpyHostToDevice));
        if (elist_)
            k_escatter<<<gs, kThreads>>>(g, fl, hist_.get());
        else
            k_scatter<<<gs, kThreads>>>(g, fl, hist_.get(), L);
        HYPROF_CUDA_CHECK_LAUNCH("k_scatter");
        HYPROF_TRY(traced("k_scatter"));
        if (elist_) { /* a thread an edge to unite */
            /* $HYPROF_EAP_WARP_UNITE=0: a lane's unions on its own */
            bool warp = !env_is("HYPROF_EAP_WARP_UNITE", "0");
            for (int l = (int)L - 1; l >= 0;) {
                if (!maxc[l]) {
                    l--;
                    continue;
                }
                dim3 ge((unsigned)((maxc[l] + kThreads - 1) / kThreads), nimg);
                if (warp)
                    k_flood_eunite_warp<<<ge, kThreads>>>(g, fl, (unsigned)l);
                else
                    k_flood_eunite<<<ge, kThreads>>>(g, fl, (unsigned)l);
                HYPROF_CUDA_CHECK_LAUNCH("k_flood_eunite");
                l--;
            }
            HYPROF_TRY(traced("flood levels"));
            return canon(nimg);
        }
        /* $HYPROF_EAP_FLOOD_EDGES=0: a thread a pixel (to measure) */
        int per_edge = !env_is("HYPROF_EAP_FLOOD_EDGES", "0");
        size_t edges = per_edge ? (g.eight ? 8 : 4) : 1;
        for (int l = (int)L - 1; l >= 0; l--)
            if (maxc[l]) {
                size_t th = maxc[l] * edges;
                k_flood_unite<<<dim3((unsigned)((th + kThreads - 1) / kThreads), nimg),
                                kThreads>>>(g, fl, (unsigned)l, per_edge);
                HYPROF_CUDA_CHECK_LAUNCH("k_flood_unite");
            }
        HYPROF_TRY(traced("flood levels"));
        return canon(nimg);
    }

    /* The tile floods (see FTile): the tiles' trees (one launch, their
     * global edges counted by bin), one small copy to the host (each
     * level's grid, the empty levels skipped), the global edges' counting
     * sort, a launch a level of the global flooding, the canonical form. */
    hyprof_status_t build_ftile(int nimg)
    {
        const char *op = a_->op;
        Args &g = args_;
        const unsigned L = a_->levels, nb = 2 * L;
        Flood fl;
        fl.off = off_.get();
        fl.ord = ord_.get();
        fl.uf = g.aux2;
        fl.levels = L;
        fl.stride = ecap_;
        k_flood_prepare<<<grid(nimg), kThreads>>>(g, fl);
        HYPROF_CUDA_CHECK_LAUNCH("k_flood_prepare");
        HYPROF_TRY(traced("k_flood_prepare"));
        size_t nh = (size_t)nimg * nb;
        HYPROF_CUDA_CHECK(cudaMemsetAsync(hist_.get(), 0, nh * sizeof(uint32_t)));
        size_t smem = ft_bytes<uint32_t>(g.eight);
        auto kern = k_ftile<uint32_t>;
        HYPROF_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem));
        unsigned tiles = (unsigned)(((a_->width + kFT - 1) / kFT) * ((a_->height + kFT - 1) / kFT));
        kern<<<dim3(tiles, nimg), kFTThreads, smem>>>(g, fl, hist_.get());
        HYPROF_CUDA_CHECK_LAUNCH("k_ftile");
        HYPROF_TRY(traced("k_ftile"));
        HYPROF_CUDA_CHECK(cudaMemcpy(hist_h_.data(), hist_.get(), nh * sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost));
        uint32_t *maxc = maxc_.data();
        std::fill(maxc_.begin(), maxc_.end(), 0u);
        size_t total = 0;
        for (int i = 0; i < nimg; i++) {
            uint32_t *h = hist_h_.data() + (size_t)i * nb, *o = off_h_.data() + (size_t)i * (nb + 1);
            uint32_t sum = 0;
            for (unsigned k = 0; k < nb; k++) {
                uint32_t c = h[k];
                o[k] = h[k] = sum; /* hist becomes the scatter's cursor */
                sum += c;
            }
            o[nb] = sum;
            total += sum;
            for (unsigned l = 0; l < L; l++)
                maxc[l] = std::max(maxc[l], o[2 * l + 2] - o[2 * l]);
        }
        if (trace_)
            hyprof__log(ctx, HYPROF_LOG_DEBUG, "%s: trace: %zu global edges, %.3f a pixel", op,
                        total, (double)total / ((double)nimg * (double)n_));
        HYPROF_CUDA_CHECK(cudaMemcpy(off_.get(), off_h_.data(),
                                     (size_t)nimg * (nb + 1) * sizeof(uint32_t),
                                     cudaMemcpyHostToDevice));
        HYPROF_CUDA_CHECK(cudaMemcpy(hist_.get(), hist_h_.data(), nh * sizeof(uint32_t),
                                     cudaMemcpyHostToDevice));
        dim3 gs((unsigned)((n_ + kSortChunk - 1) / kSortChunk), nimg);
        k_ftscatter<<<gs, kThreads>>>(g, fl, hist_.get());
        HYPROF_CUDA_CHECK_LAUNCH("k_ftscatter");
        HYPROF_TRY(traced("k_ftscatter"));
        /* $HYPROF_EAP_FLOOD_RUN=N: levels of at most N edges an image go in
         * runs (k_ftflood_run), 0: a launch a level */
        const char *rs = getenv("HYPROF_EAP_FLOOD_RUN");
        uint32_t cap = rs ? (uint32_t)strtoul(rs, nullptr, 10) : 4096u;
        for (int l = (int)L - 1; l >= 0;) {
            if (!maxc[l]) {
                l--;
                continue;
            }
            if (maxc[l] <= cap) {
                int hi = l;
                while (l >= 0 && maxc[l] <= cap)
                    l--;
                k_ftflood_run<<<dim3(1, nimg), kRunThreads>>>(g, fl, hi, l + 1);
                HYPROF_CUDA_CHECK_LAUNCH("k_ftflood_run");
                continue;
            }
            dim3 ge((unsigned)((maxc[l] + kThreads - 1) / kThreads), nimg);
            k_ftflood<<<ge, kThreads>>>(g, fl, (unsigned)l);
            HYPROF_CUDA_CHECK_LAUNCH("k_ftflood");
            l--;
        }
        HYPROF_TRY(traced("global flood levels"));
        return canon(nimg);
    }

    /* The canonical form of a tree in par (links to smaller keys). */
    hyprof_status_t canon(int nimg)
    {
        const char *op = a_->op;
        Args &g = args_;
        dim3 gr = grid(nimg);
        k_canon1<<<gr, kThreads>>>(g);
        HYPROF_CUDA_CHECK_LAUNCH("k_canon1");
        HYPROF_TRY(traced("k_canon1"));
        k_canon2<<<gr, kThreads>>>(g);
        HYPROF_CUDA_CHECK_LAUNCH("k_canon2");
        HYPROF_TRY(traced("k_canon2"));
        return HYPROF_OK;
    }

    hyprof_status_t build(int nimg)
    {
        const char *op = a_->op;
        if (ftile_)
            return build_ftile(nimg);
        if (flood_)
            return build_flood(nimg);
        Args &g = args_;
        dim3 gr = grid(nimg);
        k_prepare<<<gr, kThreads>>>(g);
        HYPROF_CUDA_CHECK_LAUNCH("k_prepare");
        HYPROF_TRY(traced("k_prepare"));
        uint32_t tx = (uint32_t)((a_->width + kTile - 1) / kTile),
                 ty = (uint32_t)((a_->height + kTile - 1) / kTile);
        unsigned tiles = tx * ty;
        k_tile<<<dim3((tiles + kTilesPerBlock - 1) / kTilesPerBlock, nimg), kTilesPerBlock>>>(
            g, tiles);
        HYPROF_CUDA_CHECK_LAUNCH("k_tile");
        HYPROF_TRY(traced("k_tile"));
        /* regions of rw x rh tiles, doubling in turn across and down */
        for (uint32_t rw = 1, rh = 1; rw < tx || rh < ty;) {
            for (int vertical = 0; vertical < 2; vertical++) {
                uint32_t r = vertical ? rh : rw, along = vertical ? ty : tx;
                if (r >= along)
                    continue;
                uint32_t pairs = (along + 2 * r - 1) / (2 * r);
                uint32_t lines = vertical ? (tx + rw - 1) / rw : (ty + rh - 1) / rh;
                unsigned blocks = (unsigned)(((size_t)pairs * lines + 63) / 64);
                k_join<<<dim3(blocks, nimg), 64>>>(g, vertical, rw, rh, pairs, lines);
                HYPROF_CUDA_CHECK_LAUNCH("k_join");
                HYPROF_TRY(traced(vertical ? "k_join (down)" : "k_join (across)"));
                if (vertical)
                    rh *= 2;
                else
                    rw *= 2;
            }
        }
        return canon(nimg);
    }

    hyprof_status_t accumulate(int nimg)
    {
        const char *op = a_->op;
        Args &g = args_;
        size_t m = (size_t)nimg * n_;
        dim3 gr = grid(nimg);
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
        k_acc_pixel<<<gr, kThreads>>>(g);
        HYPROF_CUDA_CHECK_LAUNCH("k_acc_pixel");
        HYPROF_TRY(traced("k_acc_pixel"));
        k_leaf<<<gr, kThreads>>>(g);
        HYPROF_CUDA_CHECK_LAUNCH("k_leaf");
        HYPROF_TRY(traced("k_leaf"));
        k_up<<<gr, kThreads>>>(g);
        HYPROF_CUDA_CHECK_LAUNCH("k_up");
        HYPROF_TRY(traced("k_up"));
        return HYPROF_OK;
    }

    template <typename T> hyprof_status_t filter(int nimg, Filter f, T *out)
    {
        const char *op = a_->op;
        Args &g = args_;
        dim3 gr = grid(nimg);
        k_pass<<<gr, kThreads>>>(g, f);
        HYPROF_CUDA_CHECK_LAUNCH("k_pass");
        HYPROF_TRY(traced("k_pass"));
        uint8_t *kin = g.k0, *kout = g.k1;
        uint32_t *jin = g.aux, *jout = g.aux2; /* k_pass: aux = the parent */
        /* An increasing attribute never grows towards the leaves: pass is its
         * own path minimum, kept = pass. */
        if (!hyprof_attribute_is_increasing((hyprof_attribute_t)f.attribute)) {
            for (int r = 0; r < rounds_; r++) {
                k_jump_min<<<gr, kThreads>>>(g, kin, jin, kout, jout);
                HYPROF_CUDA_CHECK_LAUNCH("k_jump_min");
        HYPROF_TRY(traced("k_jump_min"));
                uint8_t *tk = kin;
                kin = kout;
                kout = tk;
                uint32_t *tj = jin;
                jin = jout;
                jout = tj;
            }
            k_up_init<<<gr, kThreads>>>(g, jin);
            HYPROF_CUDA_CHECK_LAUNCH("k_up_init");
        HYPROF_TRY(traced("k_up_init"));
        }
        for (int r = 0; r < rounds_; r++) {
            k_jump_up<<<gr, kThreads>>>(g, kin, jin, jout);
            HYPROF_CUDA_CHECK_LAUNCH("k_jump_up");
        HYPROF_TRY(traced("k_jump_up"));
            uint32_t *tj = jin;
            jin = jout;
            jout = tj;
        }
        for (size_t p0 = 0; p0 < n_; p0 += oc_) {
            f.p0 = p0;
            f.p1 = n_ - p0 < oc_ ? n_ : p0 + oc_;
            f.stride = oc_;
            dim3 go((unsigned)((f.p1 - p0 + kThreads - 1) / kThreads), nimg);
            k_out<T><<<go, kThreads>>>(g, f, kin, jin, out);
            HYPROF_CUDA_CHECK_LAUNCH("k_out");
            HYPROF_TRY(traced("k_out"));
            if (oc_ < n_)
                HYPROF_TRY(download_chunk(f, out));
        }
        return HYPROF_OK;
    }

    template <typename T> hyprof_status_t filters(int nimg, T *out)
    {
        size_t off = 0, t = 0;
        for (size_t fi = 0; fi < a_->nfilters; fi++) {
            const hyprof_attribute_filter_t *fl = &a_->filters[fi];
            Filter f;
            f.attribute = (int)fl->attribute;
            f.thr = thr_.get() + t;
            f.nt = (int)fl->nthresholds;
            f.planes = a_->planes;
            f.off = off;
            f.first = fi == 0;
            f.nodata16 = a_->nodata16;
            f.nodata32 = a_->nodata32;
            HYPROF_TRY(filter<T>(nimg, f, out));
            off += 2 * fl->nthresholds + (fi == 0);
            t += fl->nthresholds;
        }
        return HYPROF_OK;
    }

    /* $HYPROF_EAP_TRACE=1: waits after every launch and logs (debug) the
     * kernel, the time since the batch began and the error bits, so that a
     * kernel that does not finish is named by the last line. */
    hyprof_status_t traced(const char *kernel)
    {
        const char *op = a_->op;
        if (!trace_)
            return HYPROF_OK;
        HYPROF_CUDA_CHECK(cudaDeviceSynchronize());
        int err = 0;
        HYPROF_CUDA_CHECK(cudaMemcpy(&err, error_.get(), sizeof err, cudaMemcpyDeviceToHost));
        float ms = 0.0f;
        HYPROF_CUDA_CHECK(cudaEventRecord(trace_now_, 0));
        HYPROF_CUDA_CHECK(cudaEventSynchronize(trace_now_));
        HYPROF_CUDA_CHECK(cudaEventElapsedTime(&ms, trace_start_, trace_now_));
        hyprof__log(ctx, HYPROF_LOG_DEBUG, "%s: trace: %s done, %.3f ms into the batch%s", op,
                    kernel, ms, err ? " (error bits set)" : "");
        return HYPROF_OK;
    }

    /* Chunked planes (one band a batch): this filter's planes of pixels
     * [f.p0, f.p1) to their places in the output. */
    template <typename T> hyprof_status_t download_chunk(const Filter &f, const T *out)
    {
        const char *op = a_->op;
        prep_->join();
        size_t rows = 2 * (size_t)f.nt + (size_t)f.first;
        T *dst = (T *)(a_->out16 ? (void *)a_->out16 : (void *)a_->out32) + out_index(b0_) +
                 f.off * n_ + f.p0;
        HYPROF_CUDA_CHECK(cudaMemcpy2D(dst, n_ * sizeof(T), out + f.off * oc_, oc_ * sizeof(T),
                                       (f.p1 - f.p0) * sizeof(T), rows,
                                       cudaMemcpyDeviceToHost));
        return HYPROF_OK;
    }

    /* Device to host; without the whole output pinned, each 1 GB piece is
     * pinned for its copy (a pageable copy runs at a fraction of the bus). */
    hyprof_status_t download(unsigned char *dst, const unsigned char *src, size_t bytes)
    {
        const char *op = a_->op;
        if (pinned_ && piece_ < bytes) { /* each piece as soon as it is page-locked */
            size_t base = (size_t)(dst - out_base_);
            for (size_t off = 0; off < bytes;) {
                size_t end = prep_->piece_end(base + off) - base;
                end = end < bytes ? end : bytes;
                prep_->wait_for(base + end);
                HYPROF_CUDA_CHECK(cudaMemcpyAsync(dst + off, src + off, end - off,
                                                  cudaMemcpyDeviceToHost));
                off = end;
            }
            HYPROF_CUDA_CHECK(cudaStreamSynchronize(0));
            prep_->join();
            return HYPROF_OK;
        }
        prep_->join();
        if (pinned_ || pageable_ || caller_pinned_) {
            HYPROF_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
            return HYPROF_OK;
        }
        for (size_t off = 0; off < bytes; off += kPinChunk) {
            size_t b = bytes - off < kPinChunk ? bytes - off : kPinChunk;
            HostPin pin;
            pin.pin(dst + off, b);
            HYPROF_CUDA_CHECK(cudaMemcpy(dst + off, src + off, b, cudaMemcpyDeviceToHost));
        }
        return HYPROF_OK;
    }

    /* 8-bit planes: copies of kStages pieces in flight into page-locked
     * staging, each piece widened into the output (on the context's
     * threads) while the next ones copy. `first`: the batch's first element
     * in the output. */
    hyprof_status_t download_narrow(size_t first, size_t count, const uint8_t *src,
                                    cudaStream_t stream)
    {
        const char *op = a_->op;
        if (!stage_bytes_) {
            auto t0 = std::chrono::steady_clock::now();
            size_t sb = env_size("HYPROF_EAP_STAGE"); /* bytes a piece, to test */
            stage_bytes_ = sb ? sb : kStageBytes;
            cached_stage_ = stage_cache_take(stage_bytes_, stage_ptr_);
            for (int i = 0; i < kStages; i++) {
                if (!cached_stage_) {
                    if (!stage_[i].try_alloc(stage_bytes_))
                        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op,
                                             "cannot page-lock %zu bytes of staging",
                                             stage_bytes_);
                    stage_ptr_[i] = stage_[i].get();
                }
                HYPROF_TRY(stage_ev_[i].create(ctx, op));
            }
            stage_ms_ = ms_since(t0);
        }
        NarrowCopy c{this, src, count, stream, std::chrono::steady_clock::now(), cudaSuccess,
                     0.0, first};
        const uint8_t *stages[kStages];
        for (int i = 0; i < kStages; i++)
            stages[i] = stage_ptr_[i];
        size_t pieces = (count + stage_bytes_ - 1) / stage_bytes_;
        for (size_t k = 0; k < pieces && k < (size_t)kStages; k++)
            if (issue_cb(&c, k))
                break;
        prep_->join(); /* the output's pages faulted */
        hyprof_eap_stream_t st = {ready_cb, issue_cb, &c, stages, kStages, stage_bytes_, count,
                                  first, n_, a_->mask, a_->out32, a_->out16, a_->nodata32,
                                  a_->nodata16};
        int r = c.err == cudaSuccess ? hyprof__eap_widen_stream(ctx, &st) : -1;
        widen_ms_ += ms_since(c.t0) - c.wait_ms;
        wait_ms_ += c.wait_ms;
        if (r || c.err != cudaSuccess) {
            if (c.err != cudaSuccess) {
                (void)cudaGetLastError();
                return hyprof__error(ctx, HYPROF_ERR_DEVICE, op, "download of the planes: %s",
                                     cudaGetErrorString(c.err));
            }
            return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory in the download");
        }
        return HYPROF_OK;
    }

    /* download_narrow's copies, called by hyprof__eap_widen_stream on this
     * thread. */
    struct NarrowCopy {
        EapCuda *self;
        const uint8_t *src;
        size_t count;
        cudaStream_t stream;
        std::chrono::steady_clock::time_point t0;
        cudaError_t err;
        double wait_ms;
        size_t first; /* the output element of src[0] */
    };
    static int ready_cb(void *user, size_t k)
    {
        NarrowCopy *c = (NarrowCopy *)user;
        cudaError_t e = cudaEventQuery(c->self->stage_ev_[k % kStages].get());
        if (e == cudaSuccess) {
            if (k == 0) /* until the first piece: the rest of the device's work */
                c->wait_ms = ms_since(c->t0);
            return 1;
        }
        if (e == cudaErrorNotReady)
            return 0;
        c->err = e;
        return -1;
    }
    static int issue_cb(void *user, size_t k)
    {
        NarrowCopy *c = (NarrowCopy *)user;
        EapCuda *self = c->self;
        size_t sb = self->stage_bytes_, len = c->count - k * sb < sb ? c->count - k * sb : sb;
        int s = (int)(k % kStages);
        cudaError_t e = cudaMemcpyAsync((void *)self->stage_ptr_[s], c->src + k * sb, len,
                                        cudaMemcpyDeviceToHost, c->stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(self->stage_ev_[s].get(), c->stream);
        if (e == cudaSuccess)
            return 0;
        c->err = e;
        return -1;
    }


    /* each_ with two planes buffers: band b's trees and planes (slot b % 2)
     * on stream 0 while band b - 1's planes go to the host on copy_ and to
     * the caller. Band b + 1 only writes its slot once band b - 1 has been
     * handed over (the host waits for that before queuing band b + 1). */
    hyprof_status_t run_each()
    {
        const char *op = a_->op;
        const hyprof_eap_args_t *a = a_;
        HYPROF_TRY(copy_.create(ctx, op));
        if (!env_is("HYPROF_EAP_PREFETCH", "0")) { /* the next band's levels go up early */
            HYPROF_TRY(up_.create(ctx, op));
            HYPROF_TRY(up_done_.create(ctx, op));
            HYPROF_TRY(lev_free_.create(ctx, op));
            HYPROF_TRY(lev_next_.alloc(ctx, op, n_));
        }
        for (int i = 0; i < 2; i++) {
            HYPROF_TRY(done_[i].create(ctx, op));
            HYPROF_CUDA_CHECK(cudaEventCreate(&dl_[i]));
        }
        size_t slot_bytes = a->planes * n_ * dsize_;
        for (size_t b = 0; b <= a->bands; b++) {
            if (b < a->bands) {
                if (b > 0) /* band b - 1's stage times (it is complete before band b's sort) */
                    HYPROF_TRY(finish_stages());
                HYPROF_TRY(compute(b, 1, out_.get() + (b % 2) * slot_bytes));
                HYPROF_CUDA_CHECK(cudaEventRecord(done_[b % 2].get(), 0));
            }
            if (b > 0)
                HYPROF_TRY(deliver(b - 1, out_.get() + ((b - 1) % 2) * slot_bytes));
        }
        return finish_stages();
    }

    /* Marks 5 (no download on stream 0) and adds the band's stage times. */
    hyprof_status_t finish_stages()
    {
        const char *op = a_->op;
        HYPROF_TRY(timer_.mark(ctx, op, 5));
        return timer_.add(ctx, op);
    }

    /* each_: band b's planes (in `dev`, computed once done_[b % 2] fires) to
     * out16 on copy_, then to the caller. */
    hyprof_status_t deliver(size_t b, const unsigned char *dev)
    {
        const char *op = a_->op;
        cudaStream_t cs = copy_.get();
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(cs, done_[b % 2].get(), 0));
        HYPROF_CUDA_CHECK(cudaEventRecord(dl_[0], cs));
        size_t count = a_->planes * n_;
        if (narrow_) {
            HYPROF_TRY(download_narrow(0, count, dev, cs));
        } else {
            prep_->join(); /* out16 page-locked */
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(a_->out16, dev, count * esize_,
                                              cudaMemcpyDeviceToHost, cs));
        }
        HYPROF_CUDA_CHECK(cudaEventRecord(dl_[1], cs));
        int err = 0;
        HYPROF_CUDA_CHECK(
            cudaMemcpyAsync(&err, error_.get(), sizeof err, cudaMemcpyDeviceToHost, cs));
        HYPROF_CUDA_CHECK(cudaStreamSynchronize(cs));
        float ms = 0.0f;
        HYPROF_CUDA_CHECK(cudaEventElapsedTime(&ms, dl_[0], dl_[1]));
        each_dl_ms_ += ms;
        HYPROF_TRY(check_error(err, b, 1));
        if (a_->each(a_->each_user, b, a_->out16))
            return hyprof__error(ctx, HYPROF_ERR_CANCELLED, op, "stopped after band %zu", b + 1);
        return hyprof__progress(ctx, (double)(b + 1) / (double)a_->bands, op);
    }

    /* The batch's levels to images 0, 2, 4, ... of lev_ (stream 0). each_
     * pipelined: band b0 + 1's levels go up on up_ into lev_next_ meanwhile,
     * and band b0's, when they came that way, are a copy on the device. */
    hyprof_status_t upload(size_t b0, size_t nb)
    {
        const char *op = a_->op;
        if (prefetched_ == b0 + 1) {
            HYPROF_CUDA_CHECK(cudaStreamWaitEvent(0, up_done_.get(), 0));
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(lev_.get(), lev_next_.get(), n_ * sizeof(uint16_t),
                                              cudaMemcpyDeviceToDevice, 0));
            HYPROF_CUDA_CHECK(cudaEventRecord(lev_free_.get(), 0));
        } else {
            for (size_t i = 0; i < nb; i++)
                HYPROF_CUDA_CHECK(cudaMemcpyAsync(lev_.get() + 2 * i * n_,
                                                  a_->q + (b0 + i) * n_, n_ * sizeof(uint16_t),
                                                  cudaMemcpyHostToDevice));
        }
        if (lev_next_.get() && b0 + 1 < a_->bands) {
            cudaStream_t us = up_.get();
            if (pin_each_) {
                auto t0 = std::chrono::steady_clock::now();
                in_pins_.emplace_back(new HostPin);
                in_pins_.back()->pin((void *)(a_->q + (b0 + 1) * n_), n_ * sizeof(uint16_t));
                pin_each_ms_ += ms_since(t0);
            }
            HYPROF_CUDA_CHECK(cudaStreamWaitEvent(us, lev_free_.get(), 0));
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(lev_next_.get(), a_->q + (b0 + 1) * n_,
                                              n_ * sizeof(uint16_t), cudaMemcpyHostToDevice, us));
            HYPROF_CUDA_CHECK(cudaEventRecord(up_done_.get(), us));
            prefetched_ = b0 + 2;
        }
        return HYPROF_OK;
    }

    /* The batch's planes: to the output, or (each_) to the one band's planes
     * of out16, handed over after each band. */
    size_t out_index(size_t b0) const { return each_ ? 0 : b0 * a_->planes * n_; }

    /* Bands [b0, b0 + nb): their levels up and their trees built, on
     * stream 0 (stage marks 0 and 1); the start of both batch shapes. */
    hyprof_status_t upload_build(size_t b0, size_t nb)
    {
        const char *op = a_->op;
        int nimg = (int)(2 * nb);
        args_.nimg = nimg;
        b0_ = b0;
        HYPROF_TRY(timer_.mark(ctx, op, 0));
        if (trace_)
            HYPROF_CUDA_CHECK(cudaEventRecord(trace_start_, 0));
        HYPROF_TRY(upload(b0, nb));
        HYPROF_TRY(timer_.mark(ctx, op, 1));
        return build(nimg);
    }

    /* Bands [b0, b0 + nb) on stream 0, up to their planes in `dev` (device);
     * stage marks 0 to 4. */
    hyprof_status_t compute(size_t b0, size_t nb, unsigned char *dev)
    {
        const char *op = a_->op;
        int nimg = (int)(2 * nb);
        HYPROF_TRY(upload_build(b0, nb));
        HYPROF_TRY(timer_.mark(ctx, op, 2));
        HYPROF_TRY(accumulate(nimg));
        HYPROF_TRY(timer_.mark(ctx, op, 3));
        if (narrow_)
            HYPROF_TRY(filters<uint8_t>(nimg, dev));
        else if (a_->out16)
            HYPROF_TRY(filters<uint16_t>(nimg, (uint16_t *)dev));
        else
            HYPROF_TRY(filters<float>(nimg, (float *)dev));
        HYPROF_TRY(timer_.mark(ctx, op, 4));
        return HYPROF_OK;
    }

    /* Bands a group of batch [b0, b0 + nb)'s pipeline, 0 for none. A batch's
     * trees are built for all its bands at once (the flooding's global levels
     * are latency-bound: about the same time for 2 images as for 16), then
     * its bands go through the attributes and filters a group at a time, each
     * group's planes going to the host on copy_ while the next groups
     * compute: the download, the longest stage after the trees (376 MB of
     * float planes at Pavia Centre size), overlaps the compute but for one
     * group's. Not for the chunked planes (one band) and the piecewise pinned
     * outputs (a copy per locked piece). $HYPROF_EAP_PIPE=0: none;
     * $HYPROF_EAP_PIPE_BANDS=N: N bands a group (default 1). */
    size_t pipe_bands(size_t nb) const
    {
        if (each_ || oc_ < n_ || nb < 2 || env_is("HYPROF_EAP_PIPE", "0"))
            return 0;
        /* Into pageable memory through the staging the pipeline was slower
         * (H100, Pavia Centre: 32.6 ms against 26.9): a group's widening
         * waits for the whole output's page faults anyway, and the host then
         * works group by group. $HYPROF_EAP_PIPE=1: pipelined too. */
        bool locked = caller_pinned_ || (pinned_ && piece_ >= out_bytes_);
        if (!locked && !((narrow_ || pageable_) && env_is("HYPROF_EAP_PIPE", "1")))
            return 0;
        size_t g = env_size("HYPROF_EAP_PIPE_BANDS");
        g = g ? g : 1;
        return g < nb ? g : 0;
    }

    /* args_ for images [img0, img0 + nimg) of the batch: every per-image
     * array from image img0 on (the kernels index image i at i * n). */
    Args shifted(const Args &w, size_t img0, int nimg) const
    {
        Args g = w;
        size_t o = img0 * n_;
        g.nimg = nimg;
        g.lev += o;
        g.par += o;
        g.aux += o;
        g.aux2 += o;
        g.pend += o;
        g.k0 += o;
        g.k1 += o;
        g.node += o;
        if (g.cnt)
            g.cnt += o;
        if (g.s1) {
            g.s1 += o;
            g.s2 += o;
        }
        if (g.sx) {
            g.sx += o;
            g.sy += o;
            g.sxx += o;
            g.syy += o;
        }
        if (g.x0) {
            g.x0 += o;
            g.x1 += o;
            g.y0 += o;
            g.y1 += o;
        }
        return g;
    }

    template <typename T> hyprof_status_t group_planes(int nimg, unsigned char *dev, bool acc)
    {
        const char *op = a_->op;
        if (acc) {
            HYPROF_TRY(timer_.mark(ctx, op, 2));
            HYPROF_TRY(accumulate(nimg));
        }
        HYPROF_TRY(timer_.mark(ctx, op, 3));
        return filters<T>(nimg, (T *)dev);
    }

    /* The pipelined batch (pipe_bands): trees for all, then group by group
     * the attributes and filters on stream 0 (all queued at once), each
     * group's download on copy_ after its planes; progress after each
     * group's copy (a cancel returns after the copies in flight land:
     * copy_'s reset waits for them, and the caller frees the output). */
    hyprof_status_t batch_piped(size_t b0, size_t nb, size_t gb)
    {
        const char *op = a_->op;
        size_t ng = (nb + gb - 1) / gb;
        if (!copy_.get())
            HYPROF_TRY(copy_.create(ctx, op));
        while (pipe_done_.size() < ng) {
            pipe_done_.emplace_back(new Event);
            HYPROF_TRY(pipe_done_.back()->create(ctx, op));
        }
        while (pipe_ev_.size() < 2 * ng) {
            cudaEvent_t e = NULL;
            HYPROF_CUDA_CHECK(cudaEventCreate(&e));
            pipe_ev_.push_back(e);
        }
        int nimg = (int)(2 * nb);
        HYPROF_TRY(upload_build(b0, nb));
        const Args whole = args_;
        size_t band_bytes = a_->planes * n_ * dsize_;
        /* Hybrid (float planes into the caller's page-locked output): every
         * other group as 8-bit planes widened on the host (on a second copy
         * stream) while the float groups' copies run, the bus and the host's
         * memory both at work. H100, Pavia Centre: 18.2 ms host to host
         * against 19.3 with every group's float planes copied, 18.9 with
         * every group's widened. $HYPROF_EAP_HYBRID=0: float planes only. */
        const bool hybrid = !narrow_ && caller_pinned_ && a_->levels <= 256 && ng > 1 &&
                            !env_is("HYPROF_EAP_HYBRID", "0");
        /* the attributes of the whole batch at once before the groups'
         * filters ($HYPROF_EAP_PIPE_ACC=all), or a group's before its
         * filters (the leaf-to-root reductions are latency-bound: 1.7 ms
         * for 16 images at once, 3.3 ms in 8 groups of 2) */
        const bool acc_all = env_is("HYPROF_EAP_PIPE_ACC", "all");
        if (acc_all) {
            HYPROF_TRY(timer_.mark(ctx, op, 2));
            HYPROF_TRY(accumulate(nimg));
        }
        auto is_narrow = [&](size_t g) { return narrow_ || (hybrid && (g & 1)); };
        if (hybrid && !copy2_.get())
            HYPROF_TRY(copy2_.create(ctx, op));
        hyprof_status_t st = HYPROF_OK;
        for (size_t g = 0; g < ng && st == HYPROF_OK; g++) {
            size_t g0 = g * gb, gn = nb - g0 < gb ? nb - g0 : gb;
            args_ = shifted(whole, 2 * g0, (int)(2 * gn));
            unsigned char *dev = out_.get() + g0 * band_bytes;
            if (is_narrow(g))
                st = group_planes<uint8_t>((int)(2 * gn), dev, !acc_all);
            else if (a_->out16)
                st = group_planes<uint16_t>((int)(2 * gn), dev, !acc_all);
            else
                st = group_planes<float>((int)(2 * gn), dev, !acc_all);
            if (st == HYPROF_OK && cudaEventRecord(pipe_done_[g]->get(), 0) != cudaSuccess)
                st = hyprof__error(ctx, HYPROF_ERR_DEVICE, op, "cudaEventRecord failed");
        }
        args_ = whole;
        HYPROF_TRY(st);
        HYPROF_TRY(timer_.mark(ctx, op, 5)); /* the compute's end */
        cudaStream_t cs = copy_.get();
        if (!narrow_)
            prep_->join(); /* the output page-locked (pinned_) */
        /* the float groups' copies queued, then the 8-bit ones staged and
         * widened on this thread, group by group */
        for (int pass = 0; pass < 2; pass++)
            for (size_t g = 0; g < ng; g++) {
                if (is_narrow(g) != (pass == 1))
                    continue;
                size_t g0 = g * gb, gn = nb - g0 < gb ? nb - g0 : gb;
                size_t first = out_index(b0 + g0), count = gn * a_->planes * n_;
                const unsigned char *dev = out_.get() + g0 * band_bytes;
                cudaStream_t gs = hybrid && pass == 1 ? copy2_.get() : cs;
                HYPROF_CUDA_CHECK(cudaStreamWaitEvent(gs, pipe_done_[g]->get(), 0));
                HYPROF_CUDA_CHECK(cudaEventRecord(pipe_ev_[2 * g], gs));
                if (pass == 1) {
                    HYPROF_TRY(download_narrow(first, count, dev, gs));
                } else {
                    HYPROF_CUDA_CHECK(cudaMemcpyAsync(out_base_ + first * esize_, dev,
                                                      count * esize_, cudaMemcpyDeviceToHost,
                                                      gs));
                }
                HYPROF_CUDA_CHECK(cudaEventRecord(pipe_ev_[2 * g + 1], gs));
                if (narrow_ && g + 1 < ng) /* widened: the group is in the output */
                    HYPROF_TRY(hyprof__progress(
                        ctx, (double)(b0 + g0 + gn) / (double)a_->bands, op));
            }
        for (size_t g = 0; g < ng; g++) {
            size_t g0 = g * gb, gn = nb - g0 < gb ? nb - g0 : gb;
            HYPROF_CUDA_CHECK(cudaEventSynchronize(pipe_ev_[2 * g + 1]));
            float ms = 0.0f;
            HYPROF_CUDA_CHECK(cudaEventElapsedTime(&ms, pipe_ev_[2 * g], pipe_ev_[2 * g + 1]));
            pipe_dl_ms_ += ms;
            if (!narrow_ && g + 1 < ng)
                HYPROF_TRY(hyprof__progress(
                    ctx, (double)(b0 + g0 + gn) / (double)a_->bands, op));
        }
        float tail = 0.0f;
        HYPROF_CUDA_CHECK(cudaEventSynchronize(timer_.last())); /* (ordered after the last group only) */
        for (size_t g = 0; g < ng; g++) {
            float t = 0.0f;
            HYPROF_CUDA_CHECK(cudaEventElapsedTime(&t, timer_.last(), pipe_ev_[2 * g + 1]));
            tail = t > tail ? t : tail;
        }
        pipe_tail_ms_ += tail;
        pipe_gb_ = gb;
        HYPROF_TRY(timer_.add(ctx, op));
        int err = 0;
        HYPROF_CUDA_CHECK(cudaMemcpy(&err, error_.get(), sizeof err, cudaMemcpyDeviceToHost));
        return check_error(err, b0, nb);
    }

    hyprof_status_t batch(size_t b0, size_t nb)
    {
        const char *op = a_->op;
        size_t gb = pipe_bands(nb);
        if (gb)
            return batch_piped(b0, nb, gb);
        HYPROF_TRY(compute(b0, nb, out_.get()));
        size_t count = nb * a_->planes * n_, first = out_index(b0);
        unsigned char *dst = a_->out16 ? (unsigned char *)(a_->out16 + first)
                                       : (unsigned char *)(a_->out32 + first);
        if (narrow_)
            HYPROF_TRY(download_narrow(first, count, out_.get(), 0));
        else if (oc_ == n_) /* else filters() has downloaded the chunks */
            HYPROF_TRY(download(dst, out_.get(), count * esize_));
        HYPROF_TRY(timer_.mark(ctx, op, 5));
        HYPROF_TRY(timer_.add(ctx, op));
        int err = 0;
        HYPROF_CUDA_CHECK(cudaMemcpy(&err, error_.get(), sizeof err, cudaMemcpyDeviceToHost));
        return check_error(err, b0, nb);
    }

    hyprof_status_t check_error(int err, size_t b0, size_t nb)
    {
        const char *op = a_->op;
        if (err)
            return hyprof__error(ctx, HYPROF_ERR_DEVICE, op,
                                 "internal error (bands %zu..%zu):%s%s%s%s", b0 + 1, b0 + nb,
                                 err & kErrMerge ? " a tree merge did not finish;" : "",
                                 err & kErrWalk ? " a level-root walk did not end;" : "",
                                 err & kErrUp ? " an attribute path did not end;" : "",
                                 err & kErrOut ? " an output walk did not end;" : "");
        return HYPROF_OK;
    }
};

} /* namespace */

extern "C" hyprof_status_t hyprof__cuda_eap(hyprof_ctx_t *ctx, void *vargs)
{
    const hyprof_eap_args_t *a = (const hyprof_eap_args_t *)vargs;
    const char *op = a && a->op ? a->op : "eap";
    if (!ctx || !a)
        return HYPROF_ERR_ARGUMENT;
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));
    EapCuda run(ctx, a);
    return run.run();
}
#endif
