/* The CUDA attribute profiles' plan and device buffers.
 *
 * plan() makes every choice of a call, from the arguments, the output and
 * the free device memory (hyprof__cuda_budget, which the tests cap with
 * HYPROF_DEVICE_MEMORY to force the fallbacks):
 * - the tree: tile floods for 8-bit levels (images under 2^29 pixels: an
 *   edge is p << 3 | j in 32 bits), else the pixels' flooding;
 * - the planes on the device: 8-bit for 8-bit levels (widened on the host),
 *   unless the caller's output is page-locked (then in its type, copied
 *   straight into it);
 * - bands a batch: as many as fit (the trees' buffers and the planes);
 *   hyprof_attribute_profiles_bands: one, with two planes slots when they
 *   fit (band b's compute overlaps band b - 1's download); when not even
 *   one band's planes fit next to its trees, one band with its planes in
 *   chunks of pixels (in the output's type); when not even its trees fit,
 *   HYPROF_ERR_DEVICE_MEMORY (auto falls back to the CPU);
 * - the output page-locked for the call: planes in the output's type, not
 *   the caller's page-locked memory, at most kPinAll bytes.
 *
 * Device memory: all of a call's buffers are carved from one allocation,
 * kept for the process after the call (one per device, up to an eighth of
 * the device's memory) and taken again by the next call that fits in it:
 * the twenty-odd allocations and frees of a call otherwise cost a tenth of
 * its compute. The memory it holds counts as free for plan() (the call
 * takes it, or frees it before allocating a larger one). A call that finds
 * it taken (a concurrent call) allocates its own. */
#include "eap_cuda.cuh"

#include <mutex>

namespace eap {
namespace {

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
/* Back to the cache (or freed); the device work on it is over. Kept up to
 * an eighth of the device's memory (capped as hyprof__cuda_mem_info does;
 * no message: this runs after the call's own error, if any). */
void arena_give(int device, void *p, size_t bytes)
{
    if (!p)
        return;
    size_t free_b = 0, total = 0, cap = hyprof__device_memory_cap();
    bool known = cudaMemGetInfo(&free_b, &total) == cudaSuccess;
    if (cap && cap < total)
        total = cap;
    bool keep = device >= 0 && device < 64 && known && bytes <= total / 8;
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

/* The choices that follow from the arguments and the output alone. */
void choose(Run &r)
{
    const hyprof_eap_args_t *a = r.a;
    Plan &p = r.p;
    p.n = a->width * a->height;
    for (size_t f = 0; f < a->nfilters; f++) {
        switch (a->filters[f].attribute) {
        case HYPROF_ATTRIBUTE_STD: p.need_cnt = p.need_std = true; break;
        case HYPROF_ATTRIBUTE_INERTIA: p.need_cnt = p.need_inertia = true; break;
        case HYPROF_ATTRIBUTE_DIAGONAL: p.need_box = true; break;
        default: p.need_cnt = true; break; /* HYPROF_ATTRIBUTE_AREA */
        }
        p.nthr += a->filters[f].nthresholds;
    }
    p.esize = a->out16 ? sizeof(uint16_t) : sizeof(float);
    p.each = a->each != nullptr;
    r.out_base = a->out16 ? (unsigned char *)a->out16 : (unsigned char *)a->out32;
    /* the caller's page-locked output: the planes in its type, copied
     * straight into it at the bus speed, with nothing to fault, lock or
     * widen on the host */
    p.caller_pinned = !p.each && hyprof__cuda_is_pinned(r.out_base);
    /* otherwise 8-bit planes for 8-bit levels: a quarter of the float
     * download, half the 16-bit one, and no page-locking of the output */
    p.narrow = a->levels <= 256 && !p.caller_pinned;
    p.dsize = p.narrow ? 1 : p.esize;
    p.rounds = a->levels > 256 ? 16 : 8;
    p.ftile = a->levels <= kFloodLevels && p.n < ((size_t)1 << 29);
    p.ecap = p.ftile ? p.n * (a->connectivity == 8 ? 4 : 2) : p.n;
}

/* device bytes per pixel of one image (not counting the output planes) */
size_t image_bytes(const Plan &p)
{
    return 2 + 4 * 4 + 3 + 4 * p.ecap / (p.n ? p.n : 1) + (p.need_cnt ? 4 : 0) +
           (p.need_std ? 16 : 0) + (p.need_inertia ? 32 : 0) + (p.need_box ? 16 : 0);
}

/* One band with its planes in chunks of pixels: only its trees must fit. */
hyprof_status_t plan_chunks(Run &r, size_t budget, size_t fixed, size_t tree)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    Plan &p = r.p;
    p.slots = 1;
    size_t room = budget > fixed + tree ? budget - fixed - tree : 0;
    p.oc = room / (r.a->planes * p.esize);
    size_t least = p.n < 4096 ? p.n : 4096;
    if (p.oc < least)
        return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                             "the trees of one band of %zux%zu pixels need %zu bytes of "
                             "device memory, %zu usable",
                             r.a->width, r.a->height, tree + fixed + least * r.a->planes * p.esize,
                             budget);
    if (p.oc > p.n)
        p.oc = p.n;
    p.nb = 1;
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "%s: cuda, one band at a time, its planes in chunks of %zu pixels", op, p.oc);
    return HYPROF_OK;
}

/* Bands a batch, planes slots and chunks from the free device memory. */
hyprof_status_t plan_memory(Run &r)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    Plan &p = r.p;
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    if (r.d.device < 0)
        HYPROF_CUDA_CHECK(cudaGetDevice(&r.d.device));
    budget += arena_idle(r.d.device); /* this call takes it, or frees it first */
    if (hyprof__device_memory_cap()) { /* the tests' cap holds the idle arena too */
        size_t total = 0;
        HYPROF_TRY(hyprof__cuda_mem_info(ctx, op, NULL, &total));
        size_t margin = total / 20 > ((size_t)64 << 20) ? total / 20 : (size_t)64 << 20;
        size_t most = total > margin ? total - margin : 0;
        budget = budget < most ? budget : most;
    }
    for (;;) {
        /* + per band: the histograms and offsets of its two images */
        size_t tree = p.n * 2 * image_bytes(p) + 2 * (2 * (size_t)r.a->levels + 1) * 8;
        size_t planes = p.n * r.a->planes * p.dsize;
        size_t fixed = p.n + p.nthr * sizeof(double) + 4096;
        p.nb = budget > fixed ? (budget - fixed) / (tree + planes) : 0;
        p.oc = p.n;
        p.slots = 1;
        if (p.each) { /* a band at a time; two planes buffers when they fit */
            p.nb = p.nb ? 1 : 0;
            if (budget > fixed && budget - fixed >= tree + 2 * planes + p.n * sizeof(uint16_t))
                p.slots = 2;
        }
        if (p.nb)
            break;
        if (p.narrow) { /* the chunks go straight to the output */
            p.narrow = false;
            p.dsize = p.esize;
            continue;
        }
        HYPROF_TRY(plan_chunks(r, budget, fixed, tree));
        break;
    }
    if (p.nb > r.a->bands)
        p.nb = r.a->bands;
    if (p.nb > 32767) /* grid y: 2 images a band */
        p.nb = 32767;
    return HYPROF_OK;
}

/* The buffers' places from `base` (null: their total size only). */
size_t carve(Run &r, unsigned char *base)
{
    const Plan &p = r.p;
    Buffers &d = r.d;
    Carver c(base);
    size_t m = 2 * p.nb * p.n;
    c.take(d.lev, m);
    c.take(d.node, m);
    c.take(d.par, m);
    c.take(d.aux, m);
    c.take(d.aux2, m);
    c.take(d.pend, m);
    c.take(d.k0, m);
    c.take(d.k1, m);
    if (p.need_cnt)
        c.take(d.cnt, m);
    size_t n64 = (p.need_std ? 2 : 0) + (p.need_inertia ? 4 : 0);
    if (n64)
        c.take(d.s64, n64 * m);
    if (p.need_box)
        c.take(d.box, 4 * m);
    c.take(d.out, p.slots * p.nb * r.a->planes * p.oc * p.dsize);
    c.take(d.error, 1);
    size_t bins = p.ftile ? 2 * (size_t)r.a->levels : r.a->levels; /* tree and border edges */
    c.take(d.ord, 2 * p.nb * p.ecap);
    c.take(d.hist, 2 * p.nb * bins);
    c.take(d.off, 2 * p.nb * (bins + 1));
    c.take(d.thr, p.nthr);
    if (r.a->mask)
        c.take(d.mask, p.n);
    return c.used();
}

/* The kernels' arguments over the carved buffers. */
void set_args(Run &r)
{
    const Plan &p = r.p;
    const Buffers &d = r.d;
    Args &g = r.g;
    size_t m = 2 * p.nb * p.n;
    g.n = p.n;
    g.width = (uint32_t)r.a->width;
    g.height = (uint32_t)r.a->height;
    g.eight = r.a->connectivity == 8;
    g.top = r.a->levels - 1;
    g.mask = r.a->mask ? d.mask.get() : nullptr;
    g.lev = d.lev.get();
    g.par = d.par.get();
    g.aux = d.aux.get();
    g.aux2 = d.aux2.get();
    g.pend = d.pend.get();
    g.k0 = d.k0.get();
    g.k1 = d.k1.get();
    g.node = d.node.get();
    g.cnt = p.need_cnt ? d.cnt.get() : nullptr;
    u64 *s = d.s64.get();
    if (p.need_std) {
        g.s1 = s;
        g.s2 = s + m;
        s += 2 * m;
    }
    if (p.need_inertia) {
        g.sx = s;
        g.sy = s + m;
        g.sxx = s + 2 * m;
        g.syy = s + 3 * m;
    }
    if (p.need_box) {
        g.x0 = d.box.get();
        g.x1 = g.x0 + m;
        g.y0 = g.x0 + 2 * m;
        g.y1 = g.x0 + 3 * m;
    }
    g.error = d.error.get();
}

} /* namespace */

hyprof_status_t plan(Run &r)
{
    choose(r);
    HYPROF_TRY(plan_memory(r));
    const Plan &p = r.p;
    r.p.out_bytes = (p.each ? 1 : r.a->bands) * r.a->planes * p.n * p.esize;
    /* Page-locked output: the downloads run at the bus speed. Not for
     * outputs of many GB, where pinning would hold that much of the host
     * memory at once. */
    r.p.pinned = !p.narrow && !p.caller_pinned && p.out_bytes <= kPinAll;
    return HYPROF_OK;
}

hyprof_status_t alloc_buffers(Run &r)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    Buffers &d = r.d;
    size_t need = carve(r, nullptr), got = 0;
    if (d.device < 0)
        HYPROF_CUDA_CHECK(cudaGetDevice(&d.device));
    d.arena = arena_take(d.device, need, &got);
    d.arena_bytes = got;
    if (!d.arena) {
        cudaError_t e = cudaMalloc(&d.arena, need);
        if (e != cudaSuccess) {
            d.arena = nullptr;
            (void)cudaGetLastError();
            return hyprof__error(ctx,
                                 e == cudaErrorMemoryAllocation ? HYPROF_ERR_DEVICE_MEMORY
                                                                : HYPROF_ERR_DEVICE,
                                 op, "cudaMalloc of %zu bytes failed: %s", need,
                                 cudaGetErrorString(e));
        }
        d.arena_bytes = need;
    }
    carve(r, (unsigned char *)d.arena);
    size_t L = r.a->levels, bins = r.p.ftile ? 2 * L : L;
    d.hist_h.resize(2 * r.p.nb * bins);
    d.off_h.resize(2 * r.p.nb * (bins + 1));
    d.maxc.resize(L);
    size_t t = 0;
    for (size_t f = 0; f < r.a->nfilters; f++) {
        const hyprof_attribute_filter_t *fl = &r.a->filters[f];
        HYPROF_CUDA_CHECK(cudaMemcpy(d.thr.get() + t, fl->thresholds,
                                     fl->nthresholds * sizeof(double), cudaMemcpyHostToDevice));
        t += fl->nthresholds;
    }
    if (r.a->mask)
        HYPROF_CUDA_CHECK(cudaMemcpy(d.mask.get(), r.a->mask, r.p.n, cudaMemcpyHostToDevice));
    HYPROF_CUDA_CHECK(cudaMemset(d.error.get(), 0, sizeof(int)));
    set_args(r);
    return HYPROF_OK;
}

/* The allocation back to the cache once the device is done with it (an
 * early return may leave kernels and copies queued). */
void give_arena(Run &r)
{
    Buffers &d = r.d;
    if (!d.arena)
        return;
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
    arena_give(d.device, d.arena, d.arena_bytes);
    d.arena = nullptr;
    d.arena_bytes = 0;
}

/* The device buffers back before the call returns (timed). */
void release_buffers(Run &r)
{
    Buffers &d = r.d;
    d.ord.reset();
    d.hist.reset();
    d.off.reset();
    d.mask.reset();
    d.k0.reset();
    d.k1.reset();
    d.node.reset();
    d.lev.reset();
    d.par.reset();
    d.aux.reset();
    d.aux2.reset();
    d.pend.reset();
    d.cnt.reset();
    d.box.reset();
    d.s64.reset();
    d.thr.reset();
    d.out.reset();
    d.error.reset();
    r.each.lev_next.reset();
    give_arena(r);
}

} /* namespace eap */
