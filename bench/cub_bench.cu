/* cub_bench: the library's hand-written device-wide sorts and selections
 * against CUB's, on the bench scenes' sizes, in one process (issue 22,
 * point 7). Each comparison runs both on the same device buffers, times them
 * with CUDA events (median of 20 after a warm-up), checks that both give the
 * same result exactly (and against a host reference), and prints one JSON
 * line.
 *
 *   eadp_select  EADP's contrast selection (launch_select: the radix
 *                selection of eadp_select.cu, as the op runs it, with the
 *                memset of its first histograms) against the keys
 *                (sel_key), cub::DeviceRadixSort::SortKeys a band on a
 *                DoubleBuffer (or one cub::DeviceSegmentedSort::SortKeys
 *                over the bands) and a pick of the order statistics; k
 *                compared bit for bit.
 *                Houston: 1905 x 349, 7 bands.
 *   eap_sort     EAP's counting sort of the pixels by level (k_hist, the
 *                counts to the host and their offsets back, k_scatter: the
 *                pixels' flooding of eap_tree.cu) against the same counts
 *                and offsets followed by cub::DeviceRadixSort::SortPairs on
 *                (image, level) keys; each level's pixels compared as sets
 *                (the counting sort's order within a level is that of its
 *                atomics, the tree does not depend on it). Pavia Centre:
 *                1096 x 715, 16 images (8 features, both polarities), 8-bit
 *                and 16-bit levels.
 *   eap_ftscatter the tile floods' sort of the global edges (k_ftscatter,
 *                after k_flood_prepare and k_ftile as build_ftile runs them;
 *                8-bit levels, 4-connectivity: the EAP default) against CUB
 *                from the same flags: the edges' counts, an exclusive scan
 *                (cub::DeviceScan), their emission unsorted and
 *                cub::DeviceRadixSort::SortPairs on (image, bin) keys; each
 *                bin compared as a set. Pavia Centre, 16 images.
 *
 * The kernels are the library's: this file includes their sources (their
 * symbols are hidden in libhyprof). The inputs are synthetic, with the
 * scenes' sizes and no mask: G a heavy-tailed positive field with 1 pixel
 * in 16 at 0; the levels a smooth field plus noise over the full range.
 * Usage: cub_bench [reps] (default 20). */
#include "../kernels/attribute/eap_tree.cu"
#include "../kernels/diffusion/eadp_select.cu"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

/* The library functions eap_tree.cu's host side calls (its launch helpers
 * are not used here; they only have to link). */
extern "C" hyprof_status_t hyprof__error(hyprof_ctx_t *, hyprof_status_t st, const char *,
                                         const char *, ...)
{
    return st;
}
extern "C" void hyprof__log(hyprof_ctx_t *, hyprof_log_level_t, const char *, ...) {}
namespace eap {
hyprof_status_t traced(Run &, const char *) { return HYPROF_OK; }
} /* namespace eap */

namespace {

#define CK(call)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "cub_bench: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), \
                    __LINE__);                                                            \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

int g_reps = 20;
char g_device[256];

/* Median of g_reps timings of f (CUDA events on the default stream), after
 * one warm-up; `before` runs untimed ahead of each. */
double time_ms(const std::function<void()> &f, const std::function<void()> &before = nullptr)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    if (before)
        before();
    f();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int i = 0; i < g_reps; ++i) {
        if (before)
            before();
        CK(cudaEventRecord(a, 0));
        f();
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
double unit(uint64_t x) { return (double)(mix(x) >> 11) * (1.0 / 9007199254740992.0); }

void print_line(const char *bench, const char *scene, const char *variant, double hand,
                double cub, bool same, bool host_same, const char *extra)
{
    printf("{\"bench\":\"%s\",\"scene\":\"%s\",\"cub\":\"%s\",\"hand_ms\":%.4f,\"cub_ms\":%.4f,"
           "\"cub_over_hand\":%.3f,\"same\":%s,\"host_same\":%s,%s\"device\":\"%s\"}\n",
           bench, scene, variant, hand, cub, cub / hand, same ? "true" : "false",
           host_same ? "true" : "false", extra, g_device);
    fflush(stdout);
}

/* ---- EADP: the contrast selection ---------------------------------------------- */

using hyprof_cuda::eadp::SelectArgs;

/* k of each band from its sorted keys (one thread a band): the ranks of
 * eadp_select.cu's queries, their keys read off the sorted array, and k by
 * the same sel_k. */
__global__ void pick_kernel(const u64 *sorted, size_t npix, const u64 *cnt, double pct,
                            double *k, int nb)
{
    const int b = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (b >= nb)
        return;
    SelState s[kSelQueries];
    sel_ranks(cnt + 3 * b, pct, s);
    for (int q = 0; q < kSelQueries; ++q)
        if (s[q].rank >= 0)
            s[q].prefix = sorted[(size_t)b * npix + (size_t)s[q].rank];
    k[b] = sel_k(cnt + 3 * b, s, pct);
}

/* The sort's keys of nb bands (n = nb * npix): sel_key of G, ~0 where
 * masked. */
__global__ void bench_key_kernel(const double *__restrict__ G, const uint8_t *__restrict__ mask,
                                 size_t npix, size_t n, u64 *__restrict__ key)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        key[i] = mask && !mask[i % npix] ? ~0ull : sel_key(G[i]);
}

template <typename T> T *dalloc(size_t n)
{
    T *p = nullptr;
    CK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
    return p;
}

/* The selection's input as prep_kernel leaves it: G of nb bands (1 pixel in
 * 16 at 0, the others heavy-tailed), its keys' high words and the counts
 * (valid, G == 0, G > 0) a band. */
void eadp_input(size_t npix, int nb, std::vector<double> &G, std::vector<unsigned> &kh,
                std::vector<u64> &cnt)
{
    const size_t n = npix * nb;
    G.assign(n, 0.0);
    kh.assign(n, 0u);
    cnt.assign(3 * (size_t)nb, 0);
    for (int b = 0; b < nb; ++b)
        for (size_t p = 0; p < npix; ++p) {
            const uint64_t id = (uint64_t)b * npix + p;
            const double u = unit(id);
            const double g = (mix(id ^ 0x5555) & 15) == 0 ? 0.0 : u * u * u * u * 1e3;
            G[id] = g;
            u64 key;
            memcpy(&key, &g, 8);
            kh[id] = (unsigned)(key >> 32);
            cnt[3 * b] += 1;
            cnt[3 * b + (g == 0.0 ? 1 : 2)] += 1;
        }
}

void bench_eadp(int W, int H, int nb, const char *scene)
{
    const size_t npix = (size_t)W * H, n = npix * nb;
    const double pct = 0.7; /* the EADP default percentile */
    std::vector<double> G;
    std::vector<unsigned> kh;
    std::vector<u64> cnt;
    eadp_input(npix, nb, G, kh, cnt);
    double *dG = dalloc<double>(n);
    unsigned *dKh = dalloc<unsigned>(n);
    u64 *dcnt = dalloc<u64>(3 * (size_t)nb);
    const size_t hslot = hyprof_cuda::eadp::sel_slot((size_t)nb);
    u64 *dhist = dalloc<u64>(hslot * kSelPasses);
    SelState *dst = dalloc<SelState>((size_t)nb * kSelPasses * kSelQueries);
    u64 *dcand = dalloc<u64>(n), *dncand = dalloc<u64>((size_t)nb);
    double *dk_hand = dalloc<double>((size_t)nb), *dk_cub = dalloc<double>((size_t)nb);
    double *dk_seg = dalloc<double>((size_t)nb), *dk_host = dalloc<double>((size_t)nb);
    CK(cudaMemcpy(dG, G.data(), n * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dKh, kh.data(), n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcnt, cnt.data(), cnt.size() * 8, cudaMemcpyHostToDevice));
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(hyprof_cuda::eadp::select_setup());
    const SelectArgs sa = {dG, dKh, NULL, npix, (size_t)nb, sms, dcnt, dhist, dst,
                           dcand, dncand, pct, dk_hand};
    const double hand = time_ms([&] {
        CK(cudaMemsetAsync(dhist, 0, hslot * sizeof(u64), 0));
        CK(hyprof_cuda::eadp::launch_select(sa, 0));
    });

    /* CUB as the op would run it: the keys (sel_key, ~0 where masked) into
     * the candidates' buffer, a radix sort of each band between it and a
     * second buffer of the same size (DoubleBuffer: little temporary
     * storage), the pick. */
    u64 *sorted = dalloc<u64>(n);
    size_t tb = 0, tb2 = 0;
    cub::DoubleBuffer<u64> probe(dcand, sorted);
    CK(cub::DeviceRadixSort::SortKeys(nullptr, tb, probe, npix, 0, 64));
    /* the segmented sort: G >= 0 without NaN, so its bit patterns are the keys */
    const u64 *keys = reinterpret_cast<const u64 *>(dG);
    std::vector<int> offs(nb + 1);
    for (int b = 0; b <= nb; ++b)
        offs[b] = (int)(b * npix);
    int *doffs = dalloc<int>(offs.size());
    CK(cudaMemcpy(doffs, offs.data(), offs.size() * sizeof(int), cudaMemcpyHostToDevice));
    CK(cub::DeviceSegmentedSort::SortKeys(nullptr, tb2, keys, sorted, (int64_t)n, nb, doffs,
                                          doffs + 1));
    void *tmp = dalloc<char>(std::max(tb, tb2));
    const double cub = time_ms([&] {
        bench_key_kernel<<<(unsigned)((n + 255) / 256), 256>>>(dG, NULL, npix, n, dcand);
        CK(cudaGetLastError());
        const u64 *out = dcand;
        for (int b = 0; b < nb; ++b) {
            cub::DoubleBuffer<u64> d(dcand + b * npix, sorted + b * npix);
            CK(cub::DeviceRadixSort::SortKeys(tmp, tb, d, npix, 0, 64));
            out = d.Current() - b * npix;
        }
        pick_kernel<<<1, 32>>>(out, npix, dcnt, pct, dk_cub, nb);
        CK(cudaGetLastError());
    });
    const double seg = time_ms([&] {
        CK(cub::DeviceSegmentedSort::SortKeys(tmp, tb2, keys, sorted, (int64_t)n, nb, doffs,
                                              doffs + 1));
        pick_kernel<<<1, 32>>>(sorted, npix, dcnt, pct, dk_seg, nb);
        CK(cudaGetLastError());
    });
    /* The host reference: std::sort of each band's keys, the same pick. */
    std::vector<u64> hk(n);
    memcpy(hk.data(), G.data(), n * 8);
    for (int b = 0; b < nb; ++b)
        std::sort(hk.begin() + b * npix, hk.begin() + (b + 1) * npix);
    CK(cudaMemcpy(sorted, hk.data(), n * 8, cudaMemcpyHostToDevice));
    pick_kernel<<<1, 32>>>(sorted, npix, dcnt, pct, dk_host, nb);
    CK(cudaDeviceSynchronize());
    std::vector<double> k0(nb), k1(nb), k2(nb), k3(nb);
    CK(cudaMemcpy(k0.data(), dk_hand, nb * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(k1.data(), dk_cub, nb * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(k2.data(), dk_seg, nb * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(k3.data(), dk_host, nb * 8, cudaMemcpyDeviceToHost));
    const bool same1 = !memcmp(k0.data(), k1.data(), nb * 8);
    const bool same2 = !memcmp(k0.data(), k2.data(), nb * 8);
    const bool host = !memcmp(k0.data(), k3.data(), nb * 8);
    char extra[160];
    snprintf(extra, sizeof extra, "\"width\":%d,\"height\":%d,\"bands\":%d,\"k0\":%.17g,", W, H,
             nb, k0[0]);
    print_line("eadp_select", scene, "keys + DeviceRadixSort::SortKeys per band + pick", hand, cub,
               same1, host, extra);
    print_line("eadp_select", scene, "DeviceSegmentedSort::SortKeys + pick", hand, seg, same2,
               host, extra);
    for (void *p : {(void *)dG, (void *)dKh, (void *)dcnt, (void *)dhist, (void *)dst,
                    (void *)dcand, (void *)dncand, (void *)dk_hand, (void *)dk_cub,
                    (void *)dk_seg, (void *)dk_host, (void *)sorted, (void *)doffs, tmp})
        CK(cudaFree(p));
}

/* ---- EAP: the pixels' counting sort by level ----------------------------------- */

/* The op's host step between k_hist and k_scatter (eap_tree.cu count_offsets):
 * counts to offsets (off_h) and to the scatter's cursors (hist_h). */
void offsets_host(std::vector<uint32_t> &hist_h, std::vector<uint32_t> &off_h, int nimg,
                  unsigned nbins)
{
    for (int i = 0; i < nimg; i++) {
        uint32_t *h = hist_h.data() + (size_t)i * nbins;
        uint32_t *o = off_h.data() + (size_t)i * (nbins + 1);
        uint32_t sum = 0;
        for (unsigned k = 0; k < nbins; k++) {
            uint32_t c = h[k];
            o[k] = h[k] = sum;
            sum += c;
        }
        o[nbins] = sum;
    }
}

/* CUB's keys: image and level in one word, the pixel as the value. */
__global__ void eap_keys_kernel(const uint16_t *lev, size_t n, int shift, uint32_t *key,
                                uint32_t *val)
{
    const size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n)
        return;
    const size_t img = blockIdx.y;
    key[img * n + p] = (uint32_t)img << shift | lev[img * n + p];
    val[img * n + p] = (uint32_t)p;
}

/* A batch's levels: per feature a smooth field plus noise over the L levels,
 * the opening image f and the closing image L-1-f. */
std::vector<uint16_t> eap_levels(int W, int H, int nimg, unsigned L)
{
    const size_t n = (size_t)W * H;
    std::vector<uint16_t> lev(n * nimg);
    for (int f = 0; f < nimg / 2; ++f)
        for (size_t p = 0; p < n; ++p) {
            const double x = (double)(p % W), y = (double)(p / W);
            double v = 0.5 + 0.3 * sin(x * 0.021 + f) * cos(y * 0.017 - f) +
                       0.15 * (unit((uint64_t)f * n + p) - 0.5);
            v = v < 0 ? 0 : v > 1 ? 1 : v;
            const uint16_t l = (uint16_t)floor(v * (L - 1) + 0.5);
            lev[(size_t)(2 * f) * n + p] = l;
            lev[(size_t)(2 * f + 1) * n + p] = (uint16_t)(L - 1 - l);
        }
    return lev;
}

/* The kernels' arguments for a batch's levels (the sorts need no more). */
eap::Args eap_args(int W, int H, int nimg, unsigned L, uint16_t *dlev)
{
    eap::Args a{};
    a.n = (size_t)W * H;
    a.width = (uint32_t)W;
    a.height = (uint32_t)H;
    a.top = L - 1;
    a.nimg = nimg;
    a.lev = dlev;
    return a;
}
eap::Flood eap_flood(uint32_t *off, uint32_t *ord, unsigned L, size_t stride)
{
    eap::Flood fl{};
    fl.off = off;
    fl.ord = ord;
    fl.levels = L;
    fl.stride = stride;
    return fl;
}

int bits_for(int nimg)
{
    int ib = 0;
    while ((1 << ib) < nimg)
        ++ib;
    return ib;
}

void bench_eap(int W, int H, int nimg, int bits, const char *scene)
{
    using namespace eap;
    const size_t n = (size_t)W * H, tot = n * nimg;
    const unsigned L = 1u << bits;
    const std::vector<uint16_t> lev = eap_levels(W, H, nimg, L);
    uint16_t *dlev = dalloc<uint16_t>(tot);
    CK(cudaMemcpy(dlev, lev.data(), tot * 2, cudaMemcpyHostToDevice));
    uint32_t *dord = dalloc<uint32_t>(tot), *dhist = dalloc<uint32_t>((size_t)nimg * L);
    uint32_t *doff = dalloc<uint32_t>((size_t)nimg * (L + 1));
    const Args a = eap_args(W, H, nimg, L, dlev);
    const Flood fl = eap_flood(doff, dord, L, n);
    std::vector<uint32_t> hist_h((size_t)nimg * L), off_h((size_t)nimg * (L + 1));
    const size_t nh = (size_t)nimg * L;
    const dim3 gs((unsigned)((n + kSortChunk - 1) / kSortChunk), nimg);
    /* The counts, to the host, their offsets back: common to both. */
    auto counts = [&] {
        CK(cudaMemsetAsync(dhist, 0, nh * 4, 0));
        k_hist<<<gs, kThreads>>>(a, dhist, L);
        CK(cudaGetLastError());
        CK(cudaMemcpy(hist_h.data(), dhist, nh * 4, cudaMemcpyDeviceToHost));
        offsets_host(hist_h, off_h, nimg, L);
        CK(cudaMemcpy(doff, off_h.data(), off_h.size() * 4, cudaMemcpyHostToDevice));
    };
    auto scatter = [&] {
        k_scatter<<<gs, kThreads>>>(a, fl, dhist, L);
        CK(cudaGetLastError());
    };
    const double hand = time_ms([&] {
        counts();
        CK(cudaMemcpy(dhist, hist_h.data(), nh * 4, cudaMemcpyHostToDevice));
        scatter();
    });
    const double hand_scatter = time_ms(scatter, [&] {
        CK(cudaMemcpy(dhist, hist_h.data(), nh * 4, cudaMemcpyHostToDevice));
    });
    std::vector<uint32_t> ord_hand(tot);
    CK(cudaMemcpy(ord_hand.data(), dord, tot * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemset(dord, 0, tot * 4));

    const int ib = bits_for(nimg);
    uint32_t *dkey = dalloc<uint32_t>(tot), *dval = dalloc<uint32_t>(tot);
    uint32_t *dkey2 = dalloc<uint32_t>(tot);
    size_t tb = 0;
    CK(cub::DeviceRadixSort::SortPairs(nullptr, tb, dkey, dkey2, dval, dord, tot, 0, bits + ib));
    void *tmp = dalloc<char>(tb);
    auto cub_sort = [&] {
        eap_keys_kernel<<<dim3((unsigned)((n + 255) / 256), nimg), 256>>>(dlev, n, bits, dkey,
                                                                           dval);
        CK(cudaGetLastError());
        CK(cub::DeviceRadixSort::SortPairs(tmp, tb, dkey, dkey2, dval, dord, tot, 0, bits + ib));
    };
    const double cub = time_ms([&] {
        counts();
        cub_sort();
    });
    const double cub_scatter = time_ms(cub_sort);
    std::vector<uint32_t> ord_cub(tot);
    CK(cudaMemcpy(ord_cub.data(), dord, tot * 4, cudaMemcpyDeviceToHost));

    /* Exact: CUB's sort is stable (pixels ascending within a level), the
     * counting sort's order within a level is its atomics': each level's
     * pixels sorted before comparing. The host reference: a stable sort
     * of each image's pixels by level. */
    bool same = true, host = true;
    std::vector<uint32_t> ref(n);
    for (int i = 0; i < nimg && (same || host); ++i) {
        const uint32_t *o = off_h.data() + (size_t)i * (L + 1);
        uint32_t *h = ord_hand.data() + (size_t)i * n;
        for (unsigned l = 0; l < L; ++l)
            std::sort(h + o[l], h + o[l + 1]);
        const uint32_t *c = ord_cub.data() + (size_t)i * n;
        same = same && !memcmp(h, c, n * 4);
        for (size_t p = 0; p < n; ++p)
            ref[p] = (uint32_t)p;
        const uint16_t *li = lev.data() + (size_t)i * n;
        std::stable_sort(ref.begin(), ref.end(),
                         [li](uint32_t x, uint32_t y) { return li[x] < li[y]; });
        host = host && !memcmp(ref.data(), c, n * 4);
    }
    char extra[200];
    snprintf(extra, sizeof extra,
             "\"width\":%d,\"height\":%d,\"images\":%d,\"level_bits\":%d,"
             "\"hand_scatter_ms\":%.4f,\"cub_sort_ms\":%.4f,",
             W, H, nimg, bits, hand_scatter, cub_scatter);
    print_line("eap_sort", scene, "k_hist + DeviceRadixSort::SortPairs", hand, cub, same, host,
               extra);
    for (void *p : {(void *)dlev, (void *)dord, (void *)dhist, (void *)doff, (void *)dkey,
                    (void *)dval, (void *)dkey2, tmp})
        CK(cudaFree(p));
}

/* CUB's input for the global edges' sort: each pixel's edges (its tree edge,
 * then its border edges by j), at the place an exclusive scan of the counts
 * gives, keyed by (image, bin) as k_ftscatter bins them. */
__global__ void edge_count_kernel(eap::Args a, uint32_t *cnt)
{
    const size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= a.n)
        return;
    const size_t o = (size_t)blockIdx.y * a.n;
    cnt[o + p] = (a.k0[o + p] ? 1u : 0u) + (unsigned)__popc(a.node[o + p]);
}
__global__ void edge_emit_kernel(eap::Args a, const uint32_t *pos, int shift, uint32_t *key,
                                 uint32_t *val)
{
    const size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= a.n)
        return;
    const uint32_t img = blockIdx.y;
    const size_t o = (size_t)img * a.n;
    uint32_t at = pos[o + p];
    if (a.k0[o + p]) {
        key[at] = img << shift | eap::ft_tree_bin(a, o, (uint32_t)p);
        val[at++] = (uint32_t)p;
    }
    for (unsigned m = a.node[o + p]; m; m &= m - 1) {
        key[at] = img << shift | (2u * a.lev[o + p] + 1u);
        val[at++] = (uint32_t)p << 3 | (uint32_t)(__ffs(m) - 1);
    }
}

/* The edge sorts compared exactly: each bin's entries of the counting sort
 * (ord: ecap a image, offsets off_h) sorted (tree edges p, border edges
 * p << 3 | j: CUB's stable order) against CUB's (out: the images one after
 * another); the host reference from the tile floods' flags (a.k0, a.node,
 * a.aux): each pixel's edges in order, stably sorted by bin. */
void edges_check(const eap::Args &a, int nimg, const std::vector<uint16_t> &lev,
                 const std::vector<uint32_t> &off_h, std::vector<uint32_t> &ord, size_t ecap,
                 const std::vector<uint32_t> &out, bool &same, bool &host)
{
    const size_t n = a.n, tot = n * nimg, nb = 2 * (a.top + 1);
    std::vector<uint8_t> k0(tot), node(tot);
    std::vector<uint32_t> aux(tot);
    CK(cudaMemcpy(k0.data(), a.k0, tot, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(node.data(), a.node, tot, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(aux.data(), a.aux, tot * 4, cudaMemcpyDeviceToHost));
    same = host = true;
    size_t base = 0;
    std::vector<std::pair<uint32_t, uint32_t>> ref;
    for (int i = 0; i < nimg; ++i) {
        const uint32_t *o = off_h.data() + (size_t)i * (nb + 1);
        uint32_t *h = ord.data() + (size_t)i * ecap;
        for (size_t b = 0; b < nb; ++b)
            std::sort(h + o[b], h + o[b + 1]);
        same = same && !memcmp(h, out.data() + base, (size_t)o[nb] * 4);
        ref.clear();
        const size_t oi = (size_t)i * n;
        for (size_t p = 0; p < n; ++p) {
            if (k0[oi + p])
                ref.push_back({2u * lev[oi + aux[oi + p]], (uint32_t)p});
            for (unsigned m = node[oi + p]; m; m &= m - 1)
                ref.push_back({2u * lev[oi + p] + 1u,
                               (uint32_t)p << 3 | (uint32_t)__builtin_ctz(m)});
        }
        std::stable_sort(ref.begin(), ref.end(),
                         [](const std::pair<uint32_t, uint32_t> &x,
                            const std::pair<uint32_t, uint32_t> &y) { return x.first < y.first; });
        host = host && ref.size() == o[nb];
        for (size_t e = 0; host && e < ref.size(); ++e)
            host = ref[e].second == out[base + e];
        base += o[nb];
    }
}

void bench_eap_edges(int W, int H, int nimg, const char *scene)
{
    using namespace eap;
    const size_t n = (size_t)W * H, tot = n * nimg, ecap = 2 * n; /* 4-connectivity */
    const unsigned L = 256, nb = 2 * L;
    const std::vector<uint16_t> lev = eap_levels(W, H, nimg, L);
    uint16_t *dlev = dalloc<uint16_t>(tot);
    CK(cudaMemcpy(dlev, lev.data(), tot * 2, cudaMemcpyHostToDevice));
    uint32_t *dpar = dalloc<uint32_t>(tot), *daux = dalloc<uint32_t>(tot);
    uint32_t *duf = dalloc<uint32_t>(tot), *dord = dalloc<uint32_t>(ecap * nimg);
    uint8_t *dk0 = dalloc<uint8_t>(tot), *dnode = dalloc<uint8_t>(tot);
    uint32_t *dhist = dalloc<uint32_t>((size_t)nimg * nb);
    uint32_t *doff = dalloc<uint32_t>((size_t)nimg * (nb + 1));
    int *derr = dalloc<int>(1);
    CK(cudaMemset(derr, 0, sizeof(int)));
    Args a = eap_args(W, H, nimg, L, dlev);
    a.par = dpar;
    a.aux = daux;
    a.aux2 = duf;
    a.k0 = dk0;
    a.node = dnode;
    a.error = derr;
    Flood fl = eap_flood(doff, dord, L, ecap);
    fl.uf = duf;
    /* The tile floods as build_ftile runs them, up to the sort. */
    const dim3 gp((unsigned)((n + kThreads - 1) / kThreads), nimg);
    k_flood_prepare<<<gp, kThreads>>>(a, fl);
    CK(cudaGetLastError());
    const size_t nh = (size_t)nimg * nb, smem = ft_bytes<uint32_t>(0);
    CK(cudaMemset(dhist, 0, nh * 4));
    CK(cudaFuncSetAttribute(k_ftile<uint32_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smem));
    const unsigned tiles = (unsigned)(((W + kFT - 1) / kFT) * ((H + kFT - 1) / kFT));
    k_ftile<uint32_t><<<dim3(tiles, nimg), kFTThreads, smem>>>(a, fl, dhist);
    CK(cudaGetLastError());
    std::vector<uint32_t> hist_h(nh), off_h((size_t)nimg * (nb + 1));
    CK(cudaMemcpy(hist_h.data(), dhist, nh * 4, cudaMemcpyDeviceToHost));
    offsets_host(hist_h, off_h, nimg, nb);
    CK(cudaMemcpy(doff, off_h.data(), off_h.size() * 4, cudaMemcpyHostToDevice));
    const dim3 gs((unsigned)((n + kSortChunk - 1) / kSortChunk), nimg);
    const double hand = time_ms(
        [&] {
            k_ftscatter<<<gs, kThreads>>>(a, fl, dhist);
            CK(cudaGetLastError());
        },
        [&] { CK(cudaMemcpy(dhist, hist_h.data(), nh * 4, cudaMemcpyHostToDevice)); });
    std::vector<uint32_t> ord_hand(ecap * nimg);
    CK(cudaMemcpy(ord_hand.data(), dord, ord_hand.size() * 4, cudaMemcpyDeviceToHost));

    size_t E = 0; /* all images' global edges */
    for (int i = 0; i < nimg; ++i)
        E += off_h[(size_t)i * (nb + 1) + nb];
    const int shift = 9, ib = bits_for(nimg); /* bins: 9 bits */
    uint32_t *dcnt = dalloc<uint32_t>(tot), *dpos = dalloc<uint32_t>(tot);
    uint32_t *dkey = dalloc<uint32_t>(E), *dval = dalloc<uint32_t>(E);
    uint32_t *dkey2 = dalloc<uint32_t>(E), *dout = dalloc<uint32_t>(E);
    size_t tb = 0, tb2 = 0;
    CK(cub::DeviceScan::ExclusiveSum(nullptr, tb, dcnt, dpos, tot));
    CK(cub::DeviceRadixSort::SortPairs(nullptr, tb2, dkey, dkey2, dval, dout, E, 0,
                                       shift + ib));
    void *tmp = dalloc<char>(std::max(tb, tb2));
    const double cub = time_ms([&] {
        edge_count_kernel<<<gp, kThreads>>>(a, dcnt);
        CK(cudaGetLastError());
        CK(cub::DeviceScan::ExclusiveSum(tmp, tb, dcnt, dpos, tot));
        edge_emit_kernel<<<gp, kThreads>>>(a, dpos, shift, dkey, dval);
        CK(cudaGetLastError());
        CK(cub::DeviceRadixSort::SortPairs(tmp, tb2, dkey, dkey2, dval, dout, E, 0,
                                           shift + ib));
    });
    std::vector<uint32_t> out(E);
    CK(cudaMemcpy(out.data(), dout, E * 4, cudaMemcpyDeviceToHost));

    bool same, host;
    edges_check(a, nimg, lev, off_h, ord_hand, ecap, out, same, host);
    char extra[200];
    snprintf(extra, sizeof extra,
             "\"width\":%d,\"height\":%d,\"images\":%d,\"level_bits\":8,\"edges\":%zu,", W, H,
             nimg, E);
    print_line("eap_ftscatter", scene, "count + DeviceScan::ExclusiveSum + emit + SortPairs",
               hand, cub, same, host, extra);
    for (void *p : {(void *)dlev, (void *)dpar, (void *)daux, (void *)duf, (void *)dord,
                    (void *)dk0, (void *)dnode, (void *)dhist, (void *)doff, (void *)derr,
                    (void *)dcnt, (void *)dpos, (void *)dkey, (void *)dval, (void *)dkey2,
                    (void *)dout, tmp})
        CK(cudaFree(p));
}

} /* namespace */

int main(int argc, char **argv)
{
    if (argc > 1) {
        char *end = NULL;
        const long r = strtol(argv[1], &end, 10);
        if (!end || *end || r < 1 || r > 1000) {
            fprintf(stderr, "cub_bench: bad repetition count '%s' (1..1000)\n", argv[1]);
            return 2;
        }
        g_reps = (int)r;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        fprintf(stderr, "cub_bench: no CUDA device\n");
        return 1;
    }
    snprintf(g_device, sizeof g_device, "%s", prop.name);
    bench_eadp(1905, 349, 7, "houston");
    bench_eap(1096, 715, 16, 8, "pavia_centre");
    bench_eap(1096, 715, 16, 16, "pavia_centre");
    bench_eap_edges(1096, 715, 16, "pavia_centre");
    return 0;
}
