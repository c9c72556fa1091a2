/* The CUDA attribute profiles' tree-building bodies: one max-tree per image
 * (band 2i: the opening image f, 2i + 1: the closing image L-1-f), as par[]
 * links to smaller keys (level, index), then its canonical form (canon1,
 * canon2: the CPU's). Two ways to the same tree, chosen by plan() (eap_plan.cu):
 * - the tile floods (8-bit levels, the default): FTile below;
 * - the pixels' flooding (16-bit levels, or 2^29 pixels or more, where the
 *   edge lists' p << 3 | j does not fit 32 bits): Flood below.
 * The kernels that run these bodies are in eap_tree.cu. */
#ifndef HYPROF_EAP_TREE_CUH
#define HYPROF_EAP_TREE_CUH

#include "eap_bodies.cuh"

namespace eap {

EAP_FN void body_prepare(const Args &a, int img, size_t p)
{
    size_t o = (size_t)img * a.n;
    if (img & 1)
        a.lev[o + p] = valid(a, p) ? (uint16_t)(a.top - a.lev[o - a.n + p]) : 0;
    a.par[o + p] = (uint32_t)p;
}

/* After the flooding: aux = the level root of each pixel (compressing: a
 * plateau may hang on a long chain of tile roots). */
EAP_FN void body_canon1(const Args &a, int img, size_t p)
{
    if (!valid(a, p))
        return;
    size_t o = (size_t)img * a.n;
    int bad = 0;
    a.aux[o + p] = levelroot<false>(a.par + o, a.lev + o, (uint32_t)p, bad);
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

/* ---- the pixels' flooding (16-bit levels, or images of 2^29 pixels or more) ----
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
 * compare-and-swap writes it). par is then a max-tree: links to strictly
 * smaller keys, and the last pixel of level l on a pixel's par chain is the
 * root its component had at the end of step l (its node's canonical
 * element): canon1 and canon2 finish it. uf itself is compressed freely
 * (path splitting), so no walk ever follows the long chains of par. A
 * level's launch is bound by the latency of the finds' dependent loads. */
struct Flood {
    const uint32_t *off; /* per image, levels + 1: the start of each level in ord */
    uint32_t *ord;       /* per image, its valid pixels by level (tile floods: the global edges) */
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
 * at a pixel it had passed: a cycle.) */
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
 * a pixel (a thread an edge: a level's launch is short on latency). */
EAP_FN void body_flood_unite(const Args &a, const Flood &fl, int img, size_t i, unsigned t)
{
    int e = a.eight ? 8 : 4;
    size_t o = (size_t)img * a.n;
    uint32_t p = flood_pixel(a, fl, img, i / e, t);
    if (p == UINT32_MAX)
        return;
    flood_edge(a, fl, o, p, (int)(i % e), t);
}

/* ---- the tile floods (8-bit levels, the default) ----
 * The flooding above, in two stages. First a block per kFT x kFT tile
 * floods its own pixels, every level from the top down, in shared memory
 * (a barrier a level present in the tile): the tile's max-tree, each of its
 * nodes a component of the tile's upper level set. Then the flooding over
 * the whole image with only what the tiles leave open: the edges that cross
 * a tile border, and the links of the tile nodes that reach a border to
 * their tile parents (tree edges), a small fraction of the pixels' 2 or 4
 * edges. Levels with up to kRunEdges of them an image go in runs of one
 * launch, a block an image and a barrier a level (k_ftflood_run), the others
 * a launch each (k_ftflood). Both stages use the union-find of mu_unite
 * (atomicMin). In the global union-find every pixel starts under its
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

/* The tile edges that local pixel i unites (each edge once, from its end of larger key). */
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
 * again. atomicMin never fails: the
 * first to lower a root's entry links it (and records it in par), a later
 * one lowers the entry to a smaller index if it can and goes on uniting
 * the parent it read with its own root. Every link made joins pixels that
 * are connected at this level, and goes to a smaller key (the new parent
 * is the smaller-key root of the pair; all links made at level t go to
 * pixels of level t, among which the index orders like the key), so no
 * cycle can form, the root of a component stays its pixel of smallest key,
 * and every pixel's par is written once, when it stops being a root, with
 * a pixel of the level it was linked at, in its component. */

/* uf's entries during the floods: shared-memory atomics in a tile's flood,
 * relaxed atomics in the global one (see EAP_SLOAD32). */
template <bool kTile> EAP_FN uint32_t mu_get(uint32_t *p)
{
    return kTile ? EAP_SLOAD32(p) : EAP_RLOAD32(p);
}
template <bool kTile> EAP_FN void mu_put(uint32_t *p, uint32_t v)
{
    if (kTile)
        EAP_SSTORE32(p, v);
    else
        EAP_RSTORE32(p, v);
}

/* The roots of a and b, given pa = uf[a] and pb = uf[b] as read (both
 * walks at once, path splitting: as uf_find2). */
template <bool kTile> EAP_FN void mu_find2(uint32_t *uf, uint32_t &a, uint32_t &b, uint32_t pa, uint32_t pb)
{
    while (pa != kUfRoot || pb != kUfRoot) {
        uint32_t ga = kUfRoot, gb = kUfRoot;
        if (pa != kUfRoot)
            ga = mu_get<kTile>(&uf[pa]);
        if (pb != kUfRoot)
            gb = mu_get<kTile>(&uf[pb]);
        if (pa != kUfRoot) {
            if (ga != kUfRoot)
                mu_put<kTile>(&uf[a], ga);
            a = pa;
            pa = ga;
        }
        if (pb != kUfRoot) {
            if (gb != kUfRoot)
                mu_put<kTile>(&uf[b], gb);
            b = pb;
            pb = gb;
        }
    }
}

template <bool kTile>
EAP_FN void mu_unite(uint32_t *uf, uint32_t *par, const uint16_t *lev, uint32_t a, uint32_t b,
                     uint32_t pa, uint32_t pb)
{
    for (;;) {
        mu_find2<kTile>(uf, a, b, pa, pb);
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
    uint32_t v = s.edge[k];
    uint32_t a = v >> 3, b = (uint32_t)((int)a + ft_delta(v & 7));
    mu_unite<true>(s.uf, s.par, s.lev, a, b, EAP_SLOAD32(&s.uf[a]), EAP_SLOAD32(&s.uf[b]));
}

/* uf becomes each pixel's level root (levelroot compresses par within a
 * level only: the level roots' links stay). */
template <class I> EAP_FN void ft_levelroot(const Args &a, const FTile<I> &s, uint32_t i)
{
    if (s.lev[i] == kFTNone)
        return;
    int bad = 0;
    s.uf[i] = levelroot<true>(s.par, s.lev, i, bad);
    if (bad)
        EAP_OR32(a.error, bad);
}

/* Whether local pixel i has a neighbour outside the tile; with `active`,
 * the mask of such edges that p unites (each edge once, from its end of larger key). */
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

/* Sets mark[x] (a byte) by an atomic on its 32-bit word; whether it was
 * set before. */
EAP_FN int ft_mark_set(uint8_t *mark, uint32_t x)
{
    uint32_t bit = 1u << (8 * (x & 3));
    return (EAP_SOR32((uint32_t *)(mark + (x & ~3u)), bit) & bit) != 0;
}

/* From each pixel next to the border, its node and their ancestors get a
 * mark (a walk stops at a marked node: whoever marked it walks on). */
template <class I> EAP_FN void ft_mark(const Args &a, const FTile<I> &s, uint32_t i)
{
    if (s.lev[i] == kFTNone || !ft_crossing(a, s, i, ft_global(a, s, i), 0))
        return;
    uint32_t x = s.uf[i];
    for (int it = 0; it < kFTN && !ft_mark_set(s.mark, x); it++) {
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
    mu_unite<false>(fl.uf + o, a.par + o, a.lev + o, p, q, pp, pq);
}

} /* namespace eap */

#endif
