/* The CUDA attribute profiles' kernel bodies (kernels/attribute/eap_*.cuh:
 * tile floods and pixels' flooding, canonical form, attributes, filters) run
 * on the host,
 * one kernel after the other and every "thread" of a kernel in turn, against
 * the CPU backend (hyprof_attribute_profiles): a check of the algorithm that
 * needs no GPU. The pixels of each level are shuffled (the order in which
 * the GPU's threads link the trees must not matter), and the planes are
 * written in chunks of 1000 pixels (the out-of-memory path). It does not
 * exercise the GPU's races: tests/test_gpu_eap.c does, on a device.
 *
 * CTest runs it (test eap_bodies_host, tests/CMakeLists.txt) against the
 * library of the build. Prints a line per case; exits 1 when any differs. */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

/* The device primitives, sequential: every atomic returns the old value. */
static inline uint32_t h_cas(uint32_t *p, uint32_t o, uint32_t n)
{
    uint32_t v = *p;
    if (v == o)
        *p = n;
    return v;
}
template <class T> static inline T h_add(T *p, T v)
{
    T o = *p;
    *p += v;
    return o;
}
template <class T> static inline T h_sub(T *p, T v)
{
    T o = *p;
    *p -= v;
    return o;
}
static inline uint32_t h_min(uint32_t *p, uint32_t v)
{
    uint32_t o = *p;
    *p = v < o ? v : o;
    return o;
}
static inline uint32_t h_max(uint32_t *p, uint32_t v)
{
    uint32_t o = *p;
    *p = v > o ? v : o;
    return o;
}
template <class T> static inline T h_or(T *p, T v)
{
    T o = *p;
    *p |= v;
    return o;
}
#define EAP_BODIES_ONLY
#define EAP_FN inline
#define EAP_ACAS32(p, o, n) h_cas((p), (o), (n))
#define EAP_ADD32(p, v) h_add<uint32_t>((p), (v))
#define EAP_SUB32(p, v) h_sub<uint32_t>((p), (v))
#define EAP_ADD64(p, v) h_add<unsigned long long>((p), (v))
#define EAP_MIN32(p, v) h_min((p), (v))
#define EAP_MAX32(p, v) h_max((p), (v))
#define EAP_FENCE()
#define EAP_LOAD32(p) (*(p))
#define EAP_STORE32(p, v) (*(p) = (v))
#define EAP_SLOAD32(p) (*(p))
#define EAP_SSTORE32(p, v) (*(p) = (v))
#define EAP_SOR32(p, v) h_or<uint32_t>((p), (v))
#define EAP_RLOAD32(p) (*(p))
#define EAP_RSTORE32(p, v) (*(p) = (v))
#define EAP_OR32(p, v) h_or<int>((p), (v))
#define EAP_LDCG32(p) (*(p))
#define EAP_LDCG64(p) (*(p))
#define EAP_SADD32(p, v) h_add<uint32_t>((p), (v))
#define ft_popc(m) __builtin_popcount(m)
#define ft_ctz(m) __builtin_ctz(m)
#include "../kernels/attribute/eap_filter.cuh"
#include "../kernels/attribute/eap_tree.cuh"

#include "hyprof/attribute.h"
#include "hyprof/hyprof.h"

using namespace eap;

static std::mt19937_64 rng(1);

/* A counting sort's layout with each level's entries shuffled (the device's
 * scatter order is arbitrary): level l's buckets b[l] into dst from off[l],
 * off[L] the total, which it returns; maxn[l] the most entries of level l
 * over the images. */
static uint32_t lay_out(std::vector<std::vector<uint32_t>> &b, uint32_t *off, uint32_t *dst,
                        std::vector<size_t> &maxn)
{
    uint32_t s = 0;
    for (size_t l = 0; l < b.size(); l++) {
        std::shuffle(b[l].begin(), b[l].end(), rng);
        off[l] = s;
        for (uint32_t v : b[l])
            dst[s++] = v;
        maxn[l] = std::max(maxn[l], b[l].size());
    }
    off[b.size()] = s;
    return s;
}
static unsigned L = 256; /* levels of the current case */
static const int kFilters = 4;
static const hyprof_attribute_t kAttr[kFilters] = {HYPROF_ATTRIBUTE_AREA, HYPROF_ATTRIBUTE_DIAGONAL,
                                                  HYPROF_ATTRIBUTE_INERTIA, HYPROF_ATTRIBUTE_STD};
static double kThr[kFilters][7] = {{1, 2, 5, 10, 36, 144, 1764},
                                   {1.5, 3, 5, 12, 40},
                                   {0.17, 0.2, 0.3, 0.5, 1, 2.5},
                                   {0.5, 1, 3, 10, 30}};
static const int kNt[kFilters] = {7, 5, 6, 5};

/* kind 0: 4 random levels (plateaus), 1: any level, 2: a ramp with noise, 3: constant */
static void make_band(int kind, int w, int h, bool masked, std::vector<uint16_t> &band,
                      std::vector<uint8_t> &mask)
{
    size_t n = (size_t)w * h;
    band.assign(n, 0);
    mask.assign(n, 1);
    for (size_t p = 0; p < n; p++) {
        int x = (int)(p % w), y = (int)(p / w);
        band[p] = kind == 0   ? rng() % 4
                  : kind == 1 ? rng() % L
                  : kind == 2 ? ((x * 7 + y * 3) / 5 % L + rng() % 3) % L
                              : 7;
        if (masked && rng() % 10 == 0)
            mask[p] = band[p] = 0;
    }
}

/* The tile floods (k_ftile, k_ftscatter, k_ftflood[_warp]) on the host: a
 * block after the other, its phases in turn, the threads of a phase in a
 * shuffled order (each level's unions too); then the global edges bucketed
 * by bin (each bin shuffled; their counts must be the tiles' counts) and
 * the global flooding, a level after the other. */
template <class I>
static int ftile_host(const Args &a, Flood &fl, std::vector<uint32_t> &eord, size_t ecap)
{
    const size_t n = a.n, nb = 2 * (size_t)L;
    const uint32_t tx = (a.width + kFT - 1) / kFT, ty = (a.height + kFT - 1) / kFT;
    std::vector<uint32_t> mem(ft_bytes<I>(a.eight) / 4 + 1), ghist(a.nimg * nb, 0);
    std::vector<uint32_t> order(kFTN);
    auto shuffled = [&](uint32_t count) {
        order.resize(count);
        for (uint32_t k = 0; k < count; k++)
            order[k] = k;
        std::shuffle(order.begin(), order.end(), rng);
        return order;
    };
    fl.ord = eord.data();
    fl.stride = ecap;
    fl.levels = L;
    for (int img = 0; img < a.nimg; img++)
        for (uint32_t blk = 0; blk < tx * ty; blk++) {
            FTile<I> s = ft_carve<I>(mem.data(), a, blk, img);
            for (uint32_t i = 0; i < (uint32_t)kFTN; i++)
                ft_load(a, s, L, i);
            for (uint32_t i = 0; i < (uint32_t)kFTN; i++)
                ft_count(a, s, i);
            ft_scan_seq(s);
            for (uint32_t i : shuffled(kFTN))
                ft_scatter(a, s, i);
            for (int t = (int)L - 1; t >= 0; t--)
                for (uint32_t k : shuffled(s.off[t + 1] - s.off[t]))
                    ft_unite(s, s.off[t] + k);
            for (uint32_t i : shuffled(kFTN))
                ft_levelroot(a, s, i);
            for (uint32_t i : shuffled(kFTN))
                ft_mark(a, s, i);
            for (uint32_t i = 0; i < (uint32_t)kFTN; i++)
                ft_emit(a, fl, s, i);
            for (size_t k = 0; k < nb; k++)
                ghist[img * nb + k] += s.bins[k];
        }
    uint32_t *off = const_cast<uint32_t *>(fl.off);
    std::vector<size_t> maxc(L, 0);
    for (int img = 0; img < a.nimg; img++) {
        size_t o = (size_t)img * n;
        std::vector<std::vector<uint32_t>> b(nb);
        for (size_t p = 0; p < n; p++)
            if (valid(a, p)) {
                if (a.k0[o + p])
                    b[ft_tree_bin(a, o, (uint32_t)p)].push_back((uint32_t)p);
                for (unsigned m = a.node[o + p]; m; m &= m - 1)
                    b[2 * a.lev[o + p] + 1].push_back((uint32_t)p << 3 |
                                                      (uint32_t)__builtin_ctz(m));
            }
        uint32_t s = 0;
        for (size_t k = 0; k < nb; k++) {
            if (b[k].size() != ghist[img * nb + k]) {
                printf("tile floods: bin %zu of image %d holds %zu edges, the tiles counted %u\n",
                       k, img, b[k].size(), ghist[img * nb + k]);
                return 1;
            }
            std::shuffle(b[k].begin(), b[k].end(), rng);
            off[img * (nb + 1) + k] = s;
            for (uint32_t e : b[k])
                eord[img * ecap + s++] = e;
        }
        off[img * (nb + 1) + nb] = s;
        if (s > ecap) {
            printf("tile floods: edge list overflow: %u > %zu\n", s, ecap);
            return 1;
        }
        for (unsigned l = 0; l < L; l++)
            maxc[l] = std::max(maxc[l], (size_t)(off[img * (nb + 1) + 2 * l + 2] -
                                                  off[img * (nb + 1) + 2 * l]));
    }
    for (int l = (int)L - 1; l >= 0; l--)
        for (int img = 0; img < a.nimg; img++) {
            std::vector<uint32_t> order(maxc[l]);
            for (uint32_t k = 0; k < maxc[l]; k++)
                order[k] = k;
            std::shuffle(order.begin(), order.end(), rng);
            for (uint32_t i : order)
                body_ft_unite(a, fl, img, i, (unsigned)l);
        }
    return 0;
}

/* The device buffers of one band's two images (0: f, 1: L-1-f), on the host. */
struct Bufs {
    std::vector<uint16_t> lev;
    std::vector<uint32_t> par, aux, aux2, pend, cnt, box, ord, off;
    std::vector<uint8_t> k0, k1, node;
    std::vector<unsigned long long> s64;
    int err = 0;
    Args a{};
    Bufs(int w, int h, int eight, const uint8_t *mask, const std::vector<uint16_t> &band)
    {
        const size_t n = (size_t)w * h, m = 2 * n;
        lev.assign(m, 0);
        for (auto *v : {&par, &aux, &aux2, &pend, &cnt, &ord})
            v->assign(m, 0);
        box.assign(4 * m, 0);
        off.assign(2 * (2 * L + 1), 0);
        for (auto *v : {&k0, &k1, &node})
            v->assign(m, 0);
        s64.assign(6 * m, 0);
        a.n = n;
        a.width = w;
        a.height = h;
        a.eight = eight;
        a.top = L - 1;
        a.nimg = 2;
        a.mask = mask;
        a.lev = lev.data();
        a.par = par.data();
        a.aux = aux.data();
        a.aux2 = aux2.data();
        a.pend = pend.data();
        a.k0 = k0.data();
        a.k1 = k1.data();
        a.node = node.data();
        a.cnt = cnt.data();
        a.s1 = s64.data();
        a.s2 = s64.data() + m;
        a.sx = s64.data() + 2 * m;
        a.sy = s64.data() + 3 * m;
        a.sxx = s64.data() + 4 * m;
        a.syy = s64.data() + 5 * m;
        a.x0 = box.data();
        a.x1 = box.data() + m;
        a.y0 = box.data() + 2 * m;
        a.y1 = box.data() + 3 * m;
        a.error = &err;
        std::copy(band.begin(), band.end(), lev.begin());
    }
};
#define EACH_PIXEL                                                                        \
    for (int img = 0; img < B.a.nimg; img++)                                              \
        for (size_t p = 0; p < B.a.n; p++)

/* The trees: tflood 1 the tile floods (8-bit levels), 0 the pixels'
 * flooding (the path of 16-bit levels and of very large images, here at
 * any levels), each level's pixels shuffled; then the canonical form. */
static int host_tree(Bufs &B, int tflood)
{
    const Args &a = B.a;
    const size_t n = a.n;
    Flood fl;
    fl.off = B.off.data();
    fl.ord = B.ord.data();
    fl.uf = B.aux2.data();
    fl.levels = L;
    fl.stride = n;
    const size_t ecap = n * (a.eight ? 4 : 2);
    std::vector<uint32_t> eord(2 * ecap);
    EACH_PIXEL body_flood_prepare(a, fl, img, p);
    if (tflood) { /* the tile floods, then the global flooding */
        if (ftile_host<uint32_t>(a, fl, eord, ecap))
            return 1;
    } else { /* a level after the other, a thread an edge of the level's pixels */
        std::vector<size_t> maxc(L, 0);
        for (int img = 0; img < a.nimg; img++) {
            std::vector<std::vector<uint32_t>> b(L);
            for (size_t p = 0; p < n; p++)
                if (valid(a, p))
                    b[B.lev[img * n + p]].push_back((uint32_t)p);
            lay_out(b, &B.off[img * (L + 1)], &B.ord[img * n], maxc);
        }
        for (int l = L - 1; l >= 0; l--)
            for (int img = 0; img < a.nimg; img++)
                for (size_t i = 0; i < maxc[l] * (a.eight ? 8 : 4); i++)
                    body_flood_unite(a, fl, img, i, (unsigned)l);
    }
    EACH_PIXEL body_canon1(a, img, p);
    EACH_PIXEL body_canon2(a, img, p);
    return 0;
}

static void host_attributes(Bufs &B)
{
    const Args &a = B.a;
    const size_t m = 2 * a.n;
    std::fill(B.box.begin(), B.box.begin() + m, 0xffffffffu);         /* x0 */
    std::fill(B.box.begin() + 2 * m, B.box.begin() + 3 * m, 0xffffffffu); /* y0 */
    EACH_PIXEL body_acc_pixel(a, img, p);
    EACH_PIXEL body_pend(a, img, p);
    EACH_PIXEL body_leaf(a, img, p);
    EACH_PIXEL body_up(a, img, p);
}

/* kept (in *kin) and up (in *jin) for filter F. */
static void host_kept_up(Bufs &B, const Filter &F, uint8_t **kin, uint32_t **jin)
{
    const Args &a = B.a;
    EACH_PIXEL body_pass(a, F, img, p);
    uint8_t *ki = a.k0, *ko = a.k1;
    uint32_t *ji = a.aux, *jo = a.aux2;
    if (!hyprof_attribute_is_increasing((hyprof_attribute_t)F.attribute)) {
        for (int r = 0; r < (L > 256 ? 16 : 8); r++) {
            EACH_PIXEL body_jump_min(a, ki, ji, ko, jo, img, p);
            std::swap(ki, ko);
            std::swap(ji, jo);
        }
        EACH_PIXEL body_up_init(a, ji, img, p);
    }
    for (int r = 0; r < (L > 256 ? 16 : 8); r++) {
        EACH_PIXEL body_jump_up(a, ki, ji, jo, img, p);
        std::swap(ji, jo);
    }
    *kin = ki;
    *jin = ji;
}

/* Filter F's planes of pixels [F.p0, F.p1) into out (via a chunk of oc
 * pixels a plane, 8-bit when `narrow`). */
static void host_out_chunk(Bufs &B, Filter &F, const uint8_t *kin, const uint32_t *jin,
                           bool narrow, size_t rows, std::vector<uint16_t> &out)
{
    const Args &a = B.a;
    const size_t n = a.n, oc = F.stride;
    std::vector<uint16_t> chunk(F.planes * oc);
    std::vector<uint8_t> chunk8(F.planes * oc);
    for (int img = 0; img < a.nimg; img++)
        for (size_t p = F.p0; p < F.p1; p++) {
            if (narrow) {
                body_out<uint8_t>(a, F, kin, jin, chunk8.data(), img, p);
                if (F.first && img == 0)
                    body_band<uint8_t>(a, F, chunk8.data(), img, p);
            } else {
                body_out<uint16_t>(a, F, kin, jin, chunk.data(), img, p);
                if (F.first && img == 0)
                    body_band<uint16_t>(a, F, chunk.data(), img, p);
            }
        }
    for (size_t r = 0; r < rows; r++)
        for (size_t p = F.p0; p < F.p1; p++)
            out[(F.off + r) * n + p] = narrow ? chunk8[(F.off + r) * oc + p - F.p0]
                                              : chunk[(F.off + r) * oc + p - F.p0];
}

/* Every filter's planes, in chunks of 1000 pixels (the out-of-memory path). */
static void host_filters(Bufs &B, size_t planes, bool narrow, std::vector<uint16_t> &out)
{
    const size_t n = B.a.n, oc = 1000;
    size_t first_plane = 0;
    for (int fi = 0; fi < kFilters; fi++) {
        Filter F{};
        F.attribute = kAttr[fi];
        F.thr = kThr[fi];
        F.nt = kNt[fi];
        F.planes = planes;
        F.off = first_plane;
        F.first = fi == 0;
        uint8_t *kin;
        uint32_t *jin;
        host_kept_up(B, F, &kin, &jin);
        size_t rows = 2 * (size_t)kNt[fi] + F.first;
        for (size_t p0 = 0; p0 < n; p0 += oc) {
            F.p0 = p0;
            F.p1 = std::min(n, p0 + oc);
            F.stride = oc;
            host_out_chunk(B, F, kin, jin, narrow, rows, out);
        }
        first_plane += rows;
    }
}
#undef EACH_PIXEL

/* The CUDA path's launches for one band, on the host, against the CPU. */
static int run_case(int w, int h, int kind, int eight, bool masked, unsigned levels, int tflood)
{
    L = levels;
    for (int j = 0; j < kNt[3]; j++) /* std thresholds in levels: the same filter */
        kThr[3][j] = (j == 0 ? 0.5 : j == 1 ? 1 : j == 2 ? 3 : j == 3 ? 10 : 30) *
                     (levels > 256 ? 257.0 : 1.0);
    const size_t n = (size_t)w * h;
    std::vector<uint16_t> band;
    std::vector<uint8_t> mask;
    make_band(kind, w, h, masked, band, mask);
    hyprof_attribute_filter_t f[kFilters];
    for (int i = 0; i < kFilters; i++)
        f[i] = {kAttr[i], kThr[i], (size_t)kNt[i]};
    const size_t planes = hyprof_attribute_planes(f, kFilters);
    std::vector<uint16_t> ref(planes * n), out(planes * n);
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CPU);
    if (hyprof_attribute_profiles(ctx, band.data(), masked ? mask.data() : NULL, w, h, L,
                                  eight ? 8 : 4, f, kFilters, 0, ref.data()) != HYPROF_OK) {
        printf("cpu failed: %s\n", hyprof_ctx_last_error(ctx));
        hyprof_ctx_free(&ctx);
        return 1;
    }
    hyprof_ctx_free(&ctx);

    Bufs B(w, h, eight, masked ? mask.data() : nullptr, band);
    if (host_tree(B, tflood))
        return 1;
    host_attributes(B);
    /* 8-bit planes (the CUDA path's default for float output), for half the
     * 8-bit cases: masked pixels come out 0 there and get nodata (0 here)
     * from the host's widening */
    const bool narrow = L <= 256 && (kind & 1);
    host_filters(B, planes, narrow, out);

    size_t diff = 0, first = 0;
    for (size_t i = 0; i < planes * n; i++)
        if (out[i] != ref[i] && !diff++)
            first = i;
    const int err = B.err;
    printf("%dx%d kind %d, %u levels, %d-connectivity%s%s%s: %s", w, h, kind, L, eight ? 8 : 4,
           masked ? ", masked" : "", tflood ? ", tile floods" : ", pixels' flooding",
           narrow ? ", 8-bit planes" : "", diff || err ? "FAIL" : "ok");
    if (diff)
        printf(" (%zu values differ, the first at plane %zu, pixel %zu)", diff, first / n,
               first % n);
    if (err)
        printf(" (error bits %d)", err);
    printf("\n");
    return diff != 0 || err != 0;
}

/* hyprof_attribute_profiles_bands on the CPU backend: each band's planes,
 * handed over in order, equal hyprof_attribute_profiles' of that band; a
 * function that returns non-zero stops the call. */
static int bands_api()
{
    const int w = 37, h = 23, nb = 3;
    const size_t n = (size_t)w * h;
    hyprof_attribute_filter_t f[kFilters];
    for (int i = 0; i < kFilters; i++)
        f[i] = {kAttr[i], kThr[i], (size_t)kNt[i]};
    const size_t planes = hyprof_attribute_planes(f, kFilters);
    std::vector<uint16_t> q(nb * n), buf(planes * n), one(planes * n);
    std::vector<uint8_t> mask(n);
    std::vector<std::vector<uint16_t>> got;
    L = 256; /* make_band's levels */
    for (int b = 0; b < nb; b++) {
        std::vector<uint16_t> band;
        make_band(b % 3, w, h, true, band, mask);
        std::copy(band.begin(), band.end(), q.begin() + b * n);
    }
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CPU);
    struct Keep {
        std::vector<std::vector<uint16_t>> *got;
        size_t count, stop;
    } keep{&got, planes * n, 0};
    auto fn = [](void *user, size_t band, const uint16_t *p) -> int {
        Keep *k = (Keep *)user;
        if (band != k->got->size())
            return 1;
        k->got->emplace_back(p, p + k->count);
        return k->stop && k->got->size() >= k->stop;
    };
    int bad = 0;
    hyprof_status_t st = hyprof_attribute_profiles_bands(ctx, q.data(), nb, mask.data(), w, h,
                                                         256, 8, f, kFilters, 9, buf.data(), fn,
                                                         &keep);
    if (st != HYPROF_OK || got.size() != (size_t)nb) {
        printf("bands: status %d (%s), %zu bands\n", (int)st, hyprof_ctx_last_error(ctx),
               got.size());
        bad = 1;
    }
    for (int b = 0; b < nb && !bad; b++) {
        if (hyprof_attribute_profiles(ctx, q.data() + b * n, mask.data(), w, h, 256, 8, f,
                                      kFilters, 9, one.data()) != HYPROF_OK ||
            one != got[b])
            bad = 1;
    }
    got.clear();
    keep.stop = 2;
    st = hyprof_attribute_profiles_bands(ctx, q.data(), nb, mask.data(), w, h, 256, 8, f,
                                         kFilters, 9, buf.data(), fn, &keep);
    if (st != HYPROF_ERR_CANCELLED || got.size() != 2)
        bad = 1;
    hyprof_ctx_free(&ctx);
    printf("hyprof_attribute_profiles_bands (cpu) %dx%dx%d: %s\n", w, h, nb,
           bad ? "FAIL" : "ok");
    return bad;
}

int main()
{
    static const int sizes[][2] = {{1, 1}, {1, 9}, {13, 1}, {4, 4}, {37, 23}, {95, 95}, {145, 145},
                                   {400, 300}};
    int bad = 0;
    for (const auto &s : sizes)
        for (int kind = 0; kind < 4; kind++)
            for (int eight = 0; eight < 2; eight++)
                for (int masked = 0; masked < 2; masked++)
                    for (int tflood = 0; tflood < 2; tflood++)
                        bad |= run_case(s[0], s[1], kind, eight, masked != 0, 256, tflood);
    for (int kind = 0; kind < 4; kind++) /* 16-bit levels: as many launches as levels */
        for (int eight = 0; eight < 2; eight++)
            bad |= run_case(95, 95, kind, eight, kind == 2, 65536, 0);
    bad |= bands_api();
    printf(bad ? "SOME FAILED\n" : "all ok\n");
    return bad;
}
