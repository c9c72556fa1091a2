/* The CUDA attribute profiles' trees: one max-tree per band and polarity,
 * all images of a batch in the same launches (grid y = image: 2i the
 * opening image f, 2i + 1 the closing image L-1-f), in canonical form (the
 * bodies and their reasoning: eap_tree.cuh).
 *
 * Tile floods (8-bit levels): k_flood_prepare, k_ftile (a block a 64 x 64
 * tile floods its pixels level by level in shared memory), a copy of the
 * global edges' counts to the host, k_ftscatter (their counting sort),
 * the global flooding (k_ftflood_run for runs of levels with few edges,
 * k_ftflood a level otherwise), k_canon1 and k_canon2.
 * Pixels' flooding (16-bit levels, or 2^29 pixels or more): k_flood_prepare,
 * k_hist and k_scatter (the pixels' counting sort by level), k_flood_unite a
 * level (a thread an edge of the level's pixels), k_canon1 and k_canon2. */
#include "eap_cuda.cuh"
#include "eap_tree.cuh"

#include <algorithm>

#include <cub/warp/warp_scan.cuh>

namespace eap {
namespace {

/* The counting sort (a block per chunk of pixels; with 8-bit levels its
 * histogram in shared memory, one global atomic per level and block; with
 * more levels global atomics per pixel) and the flooding steps. */
const int kSortChunk = 4096;
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
/* The tile floods (see FTile): a block a tile, its shared memory laid out
 * by ft_carve; a barrier after each phase and after each level present in
 * the tile. */
const int kFTThreads = 512;
/* off: counts to offsets, by warp 0 (8 levels a lane, cub::WarpScan over
 * the lanes' sums) */
template <class I> __device__ void ft_scan_warp(const FTile<I> &s)
{
    using Scan = cub::WarpScan<uint32_t>;
    __shared__ typename Scan::TempStorage scan_tmp;
    const int lane = (int)(threadIdx.x & 31);
    uint32_t v[8], sum = 0;
    for (int k = 0; k < 8; k++) {
        v[k] = s.off[lane * 8 + k];
        sum += v[k];
    }
    uint32_t run, total;
    Scan(scan_tmp).ExclusiveSum(sum, run, total);
    for (int k = 0; k < 8; k++) {
        s.off[lane * 8 + k] = s.cur[lane * 8 + k] = run;
        run += v[k];
    }
    if (lane == 31)
        s.off[256] = total;
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
/* The global edges' counting sort, as k_scatter (2 * levels bins), each
 * pixel counting and placing its tree edge and its border edges. */
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
 * tile floods a level has a few hundred to a few thousand an image), where
 * a launch a level costs more than the level's work. The levels' offsets
 * are in shared memory. */
const int kRunThreads = 1024;
const uint32_t kRunEdges = 4096; /* levels of at most this many edges an image go in runs */
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
            mu_unite<false>(uf, a.par + o, a.lev + o, p, q, __ldcg(&uf[p]), __ldcg(&uf[q]));
        }
        __syncthreads();
    }
}
#define EAP_LEVEL_IDX                                                                     \
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;                             \
    int img = (int)blockIdx.y
__global__ void k_flood_unite(Args a, Flood fl, unsigned t)
{
    EAP_LEVEL_IDX;
    body_flood_unite(a, fl, img, i, t);
}
__global__ void k_canon1(Args a) { EAP_IDX; body_canon1(a, img, p); }
__global__ void k_canon2(Args a) { EAP_IDX; body_canon2(a, img, p); }

/* ---- host ---- */

/* The canonical form of a tree in par (links to smaller keys). */
hyprof_status_t canon(Run &r, int nimg)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    dim3 gr = pixel_grid(r, nimg);
    k_canon1<<<gr, kThreads>>>(r.g);
    HYPROF_CUDA_CHECK_LAUNCH("k_canon1");
    HYPROF_TRY(traced(r, "k_canon1"));
    k_canon2<<<gr, kThreads>>>(r.g);
    HYPROF_CUDA_CHECK_LAUNCH("k_canon2");
    HYPROF_TRY(traced(r, "k_canon2"));
    return HYPROF_OK;
}

Flood flood_of(Run &r)
{
    Flood fl;
    fl.off = r.d.off.get();
    fl.ord = r.d.ord.get();
    fl.uf = r.g.aux2;
    fl.levels = r.a->levels;
    fl.stride = r.p.ecap;
    return fl;
}

/* The per-image counts in hist_h to offsets in off_h (nbins a image) and to
 * the scatter's cursors in hist_h; maxc[l] = the most entries of level l
 * (bins 2l and 2l + 1 when two a level) over the images. */
void count_offsets(Run &r, int nimg, unsigned nbins, unsigned per_level)
{
    uint32_t *maxc = r.d.maxc.data();
    std::fill(r.d.maxc.begin(), r.d.maxc.end(), 0u);
    for (int i = 0; i < nimg; i++) {
        uint32_t *h = r.d.hist_h.data() + (size_t)i * nbins;
        uint32_t *o = r.d.off_h.data() + (size_t)i * (nbins + 1);
        uint32_t sum = 0;
        for (unsigned k = 0; k < nbins; k++) {
            uint32_t c = h[k];
            o[k] = h[k] = sum; /* hist becomes the scatter's cursor */
            sum += c;
        }
        o[nbins] = sum;
        for (unsigned l = 0; l < nbins / per_level; l++)
            maxc[l] = std::max(maxc[l], o[per_level * (l + 1)] - o[per_level * l]);
    }
}

/* The counts and cursors back to the device (stream 0, synchronous). */
hyprof_status_t upload_offsets(Run &r, int nimg, unsigned nbins)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    size_t nh = (size_t)nimg * nbins;
    HYPROF_CUDA_CHECK(cudaMemcpy(r.d.off.get(), r.d.off_h.data(),
                                 (size_t)nimg * (nbins + 1) * sizeof(uint32_t),
                                 cudaMemcpyHostToDevice));
    HYPROF_CUDA_CHECK(cudaMemcpy(r.d.hist.get(), r.d.hist_h.data(), nh * sizeof(uint32_t),
                                 cudaMemcpyHostToDevice));
    return HYPROF_OK;
}

/* The pixels' flooding (16-bit levels, or very large images): the counting
 * sort of the pixels into ord (one small copy to the host: the level sizes
 * give each level's grid and skip the empty levels), then one launch a
 * level (see Flood) and the canonical form. */
hyprof_status_t build_flood(Run &r, int nimg)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    const unsigned L = r.a->levels;
    Flood fl = flood_of(r);
    k_flood_prepare<<<pixel_grid(r, nimg), kThreads>>>(r.g, fl);
    HYPROF_CUDA_CHECK_LAUNCH("k_flood_prepare");
    size_t nh = (size_t)nimg * L;
    HYPROF_CUDA_CHECK(cudaMemsetAsync(r.d.hist.get(), 0, nh * sizeof(uint32_t)));
    dim3 gs((unsigned)((r.p.n + kSortChunk - 1) / kSortChunk), nimg);
    k_hist<<<gs, kThreads>>>(r.g, r.d.hist.get(), L);
    HYPROF_CUDA_CHECK_LAUNCH("k_hist");
    HYPROF_CUDA_CHECK(cudaMemcpy(r.d.hist_h.data(), r.d.hist.get(), nh * sizeof(uint32_t),
                                 cudaMemcpyDeviceToHost));
    count_offsets(r, nimg, L, 1);
    HYPROF_TRY(upload_offsets(r, nimg, L));
    k_scatter<<<gs, kThreads>>>(r.g, fl, r.d.hist.get(), L);
    HYPROF_CUDA_CHECK_LAUNCH("k_scatter");
    HYPROF_TRY(traced(r, "k_scatter"));
    const uint32_t *maxc = r.d.maxc.data();
    size_t edges = r.g.eight ? 8 : 4;
    for (int l = (int)L - 1; l >= 0; l--)
        if (maxc[l]) {
            size_t th = maxc[l] * edges;
            k_flood_unite<<<dim3((unsigned)((th + kThreads - 1) / kThreads), nimg), kThreads>>>(
                r.g, fl, (unsigned)l);
            HYPROF_CUDA_CHECK_LAUNCH("k_flood_unite");
        }
    HYPROF_TRY(traced(r, "flood levels"));
    return canon(r, nimg);
}

/* The global flooding after the tile floods: from the top level down, runs
 * of levels with few edges in one launch each, the others a launch a level. */
hyprof_status_t flood_levels(Run &r, int nimg, const Flood &fl)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    const uint32_t *maxc = r.d.maxc.data();
    for (int l = (int)r.a->levels - 1; l >= 0;) {
        if (!maxc[l]) {
            l--;
            continue;
        }
        if (maxc[l] <= kRunEdges) {
            int hi = l;
            while (l >= 0 && maxc[l] <= kRunEdges)
                l--;
            k_ftflood_run<<<dim3(1, nimg), kRunThreads>>>(r.g, fl, hi, l + 1);
            HYPROF_CUDA_CHECK_LAUNCH("k_ftflood_run");
            continue;
        }
        dim3 ge((unsigned)((maxc[l] + kThreads - 1) / kThreads), nimg);
        k_ftflood<<<ge, kThreads>>>(r.g, fl, (unsigned)l);
        HYPROF_CUDA_CHECK_LAUNCH("k_ftflood");
        l--;
    }
    return traced(r, "global flood levels");
}

/* The tile floods (see FTile): the tiles' trees (one launch, their global
 * edges counted by bin), one small copy to the host (each level's grid, the
 * empty levels skipped), the global edges' counting sort, the global
 * flooding, the canonical form. */
hyprof_status_t build_ftile(Run &r, int nimg)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    const unsigned L = r.a->levels, nb = 2 * L;
    Flood fl = flood_of(r);
    k_flood_prepare<<<pixel_grid(r, nimg), kThreads>>>(r.g, fl);
    HYPROF_CUDA_CHECK_LAUNCH("k_flood_prepare");
    HYPROF_TRY(traced(r, "k_flood_prepare"));
    size_t nh = (size_t)nimg * nb;
    HYPROF_CUDA_CHECK(cudaMemsetAsync(r.d.hist.get(), 0, nh * sizeof(uint32_t)));
    size_t smem = ft_bytes<uint32_t>(r.g.eight);
    auto kern = k_ftile<uint32_t>;
    HYPROF_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)smem));
    unsigned tiles =
        (unsigned)(((r.a->width + kFT - 1) / kFT) * ((r.a->height + kFT - 1) / kFT));
    kern<<<dim3(tiles, nimg), kFTThreads, smem>>>(r.g, fl, r.d.hist.get());
    HYPROF_CUDA_CHECK_LAUNCH("k_ftile");
    HYPROF_TRY(traced(r, "k_ftile"));
    HYPROF_CUDA_CHECK(cudaMemcpy(r.d.hist_h.data(), r.d.hist.get(), nh * sizeof(uint32_t),
                                 cudaMemcpyDeviceToHost));
    count_offsets(r, nimg, nb, 2);
    if (r.trace.on) {
        size_t total = 0;
        for (int i = 0; i < nimg; i++)
            total += r.d.off_h[(size_t)i * (nb + 1) + nb];
        hyprof__log(ctx, HYPROF_LOG_DEBUG, "%s: trace: %zu global edges, %.3f a pixel", op,
                    total, (double)total / ((double)nimg * (double)r.p.n));
    }
    HYPROF_TRY(upload_offsets(r, nimg, nb));
    dim3 gs((unsigned)((r.p.n + kSortChunk - 1) / kSortChunk), nimg);
    k_ftscatter<<<gs, kThreads>>>(r.g, fl, r.d.hist.get());
    HYPROF_CUDA_CHECK_LAUNCH("k_ftscatter");
    HYPROF_TRY(traced(r, "k_ftscatter"));
    HYPROF_TRY(flood_levels(r, nimg, fl));
    return canon(r, nimg);
}

} /* namespace */

hyprof_status_t build_trees(Run &r, int nimg)
{
    return r.p.ftile ? build_ftile(r, nimg) : build_flood(r, nimg);
}

} /* namespace eap */
