/* CUDA backend of the EMP / W-MCD chain (semantics: include/hyprof/morphology.h,
 * algorithms/morphology/emp_impl.h). Everything stays on the device between
 * the stages; the host sees the float input bands go in and the float planes
 * come out. The stages, each in its own file (declarations: emp_cuda.cuh;
 * overview: docs/internals/emp.md):
 *
 *   features     emp_features.cu: the spectral DWT of the input in pixel
 *                chunks (kernels/wavelet/dwt.cu's kernel), each feature's
 *                valid range and its 8-bit quantisation, bit for bit the CPU's
 *   profiles     emp_reconstruct.cu: erosion markers, block-asynchronous
 *                reconstruction by dilation (exact), the EMP planes
 *   denoise      emp_denoise.cu: (W-MCD) the 2-D DWT denoising of every plane
 *                in double, in groups of planes
 *   transfers    emp_transfer.cu: staged downloads (page-locked staging and
 *                the output's prefault: kernels/core/staging.cuh, output_prep.cuh)
 *
 * This file holds the entry point, the plan (every automatic choice of the
 * chain, from the context's threads, the share count, the data's size and
 * the device's free memory), the shares and their threads, and the stage
 * trace (HYPROF_LOG=debug).
 *
 * Several devices (--devices, the seed's Fig. 5): one host thread per share.
 * Share d takes rows [H d/D, H (d+1)/D) for the spectral stage (it uploads
 * only those rows of the cube), the shares pool their features' minima and
 * maxima, each quantises its rows, then takes the feature bands
 * [K d/D, K (d+1)/D) for the EMP and the denoising and pulls their rows from
 * the other shares (cudaMemcpyPeerAsync: direct with peer access, else
 * through the host), and writes its own output planes. A device may hold
 * several shares (--devices 0,0: the partition tested on one GPU). */
#include "emp_cuda.cuh"

#include <climits>
#include <math.h>
#include <new>
#include <string.h>

namespace emp_cuda {

/* ---- the plan: every automatic choice --------------------------------------------------- */

/* Packing the input chunks and copying the output out: three quarters of the
 * context's threads over the shares, at most 16 each (memory bandwidth, not
 * cores, limits a copy, and the prefault and the device threads need cores
 * meanwhile); copying out takes as many (the packing and most of the
 * prefault are over by then). The prefault: a quarter of the threads, at
 * most 8 (it runs while the input is packed, and more threads only take
 * memory bandwidth from the packing). */
HostThreads plan_host_threads(const hyprof_ctx_t *ctx, size_t nshares)
{
    HostThreads t;
    const long most = hyprof__threads(ctx) * 3 / 4;
    const long total = most < 1 ? 1 : most;
    long per = total / (long)nshares;
    if (per > 16)
        per = 16;
    t.pack = per < 1 ? 1 : (int)per;
    t.unpack = t.pack;
    const int q = hyprof__threads(ctx) / 4;
    t.prefault = q < 1 ? 1 : q > 8 ? 8 : q;
    return t;
}

/* About 16 MiB of float input per chunk, so that packing one chunk overlaps
 * the copy of the previous one and the transform of the one before. */
size_t chunk_pixels(size_t bands, size_t np)
{
    size_t m = ((size_t)16 << 20) / (bands * sizeof(float));
    m = m < 1024 ? 1024 : m;
    return m < np ? m : np;
}

/* Download pieces of 16 MiB. */
size_t piece_floats() { return ((size_t)16 << 20) / sizeof(float); }

/* Planes per group: what half the budget holds (the other half: a margin
 * for the EMP's buffers), at most 32767 (grid z: 2 G for the paired row
 * transforms), and the planes split into 4 groups for an output share of
 * 512 MB or more, else 2: each group downloads (copy stream) while the next
 * computes, and more groups mean more launches of small kernels. The whole
 * float output stays on the device when it fits: the transforms then never
 * wait for a download, and the downloads follow as the host side gets
 * ready; otherwise two group buffers take turns. */
DenoisePlan plan_denoise(size_t budget, size_t planes, size_t n, size_t per_plane)
{
    DenoisePlan d = {budget / 2 / per_plane, false};
    if (d.group == 0)
        return d;
    if (d.group > 32767)
        d.group = 32767;
    const bool big = 3 * planes * n * sizeof(float) >= ((size_t)512 << 20);
    const size_t ng = big ? 4 : 2;
    const size_t per_group = (planes + ng - 1) / ng;
    if (d.group > per_group)
        d.group = per_group;
    d.whole = 3 * planes * n * sizeof(float) + d.group * per_plane < budget / 2;
    return d;
}

/* The large per-call device buffers come from the device's stream-ordered
 * pool where the device has one: allocated and freed on the share's compute
 * stream (t_pool_stream, set by the share's thread), the pool keeping up to
 * an eighth of the device's memory between calls (cudaMalloc and cudaFree of
 * the gigabytes a large W-MCD needs take milliseconds on the stream's
 * path). */
bool pool_on(hyprof_ctx_t *ctx, const char *op, int device)
{
    int ok = 0;
    if (cudaDeviceGetAttribute(&ok, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess ||
        !ok) {
        (void)cudaGetLastError();
        return false;
    }
    static std::mutex m;
    static std::vector<char> set;
    std::lock_guard<std::mutex> l(m);
    if ((size_t)device >= set.size())
        set.resize((size_t)device + 1, 0);
    if (!set[(size_t)device]) {
        cudaMemPool_t pool;
        size_t total = 0;
        if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
            hyprof__cuda_mem_info(ctx, op, NULL, &total) != HYPROF_OK) {
            (void)cudaGetLastError();
            return false;
        }
        uint64_t keep = total / 8;
        (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        (void)cudaGetLastError();
        set[(size_t)device] = 1;
    }
    return true;
}

/* ---- the shares ------------------------------------------------------------------------ */

bool Rendezvous::arrive()
{
    std::unique_lock<std::mutex> l(m_);
    if (broken_)
        return false;
    const size_t gen = gen_;
    if (++count_ == n_) {
        count_ = 0;
        ++gen_;
        cv_.notify_all();
        return true;
    }
    cv_.wait(l, [&] { return gen_ != gen || broken_; });
    return gen_ != gen;
}

void Rendezvous::brk()
{
    std::lock_guard<std::mutex> l(m_);
    broken_ = true;
    cv_.notify_all();
}

static float key_float(unsigned k)
{
    const unsigned u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

Chain::Chain(const hyprof_emp_args_t *a, const hyprof_ctx_t *main, const OutputPrep *prep,
             size_t nshares)
    : a(a), main(main), prep(prep), sh(nshares), rv(nshares),
      threads(plan_host_threads(main, nshares))
{
    for (size_t d = 0; d < nshares; ++d) {
        Share &s = sh[d];
        s.device = a->devices && a->ndevices ? a->devices[d] : main->device;
        s.r0 = a->height * d / nshares;
        s.r1 = a->height * (d + 1) / nshares;
        s.b0 = a->bands * d / nshares;
        s.b1 = a->bands * (d + 1) / nshares;
    }
}

/* The pooled statistics: each feature's min and max (lohi, 2 per feature)
 * or, when a valid value is not finite, the feature and the pixel. */
bool Chain::pooled(std::vector<double> &lohi, size_t *bad_band,
                   unsigned long long *bad_pixel) const
{
    const size_t K = a->bands;
    lohi.assign(2 * K, 0.0);
    for (size_t k = 0; k < K; ++k) {
        unsigned lo = 0xffffffffu, hi = 0u;
        unsigned long long bad = ~0ull;
        for (const Share &s : sh) {
            lo = s.stats[k].lo < lo ? s.stats[k].lo : lo;
            hi = s.stats[k].hi > hi ? s.stats[k].hi : hi;
            bad = s.stats[k].bad < bad ? s.stats[k].bad : bad;
        }
        if (bad != ~0ull) {
            *bad_band = k;
            *bad_pixel = bad;
            return false;
        }
        const bool any = lo <= hi; /* else every pixel of the band is masked */
        lohi[2 * k] = any ? (double)key_float(lo) : NAN;
        lohi[2 * k + 1] = any ? (double)key_float(hi) : NAN;
    }
    return true;
}

/* ---- the stage trace (HYPROF_LOG=debug) ------------------------------------------------ */

Spans::~Spans()
{
    for (auto &p : v_) {
        (void)cudaEventDestroy(p.first);
        (void)cudaEventDestroy(p.second);
    }
    (void)cudaGetLastError();
}

int Spans::begin(cudaStream_t s)
{
    if (!on_)
        return -1;
    cudaEvent_t b = NULL, e = NULL;
    if (cudaEventCreate(&b) != cudaSuccess || cudaEventCreate(&e) != cudaSuccess) {
        if (b)
            (void)cudaEventDestroy(b);
        (void)cudaGetLastError();
        return -1; /* the trace misses a span, the run goes on */
    }
    v_.push_back(std::make_pair(b, e));
    (void)cudaEventRecord(b, s);
    return (int)v_.size() - 1;
}

/* after the device has finished */
double Spans::ms() const
{
    double t = 0.0;
    for (const auto &p : v_) {
        float x = 0.0f;
        if (cudaEventElapsedTime(&x, p.first, p.second) == cudaSuccess)
            t += x;
    }
    (void)cudaGetLastError();
    return t;
}

/* Peer access to the other shares' devices, the mask, the structuring
 * elements and the share's 8-bit bands. */
hyprof_status_t EmpDevice::setup()
{
    cudaStream_t st = s.get();
    for (const Share &o : c.sh) {
        int can = 0;
        if (o.device != sp.device && cudaDeviceCanAccessPeer(&can, sp.device, o.device) ==
                                         cudaSuccess && can)
            (void)cudaDeviceEnablePeerAccess(o.device, 0); /* or already enabled */
        (void)cudaGetLastError();
    }
    HYPROF_TIMED_ALLOC(q.alloc(ctx, op, nb * n));
    HYPROF_TIMED_ALLOC(emp.alloc(ctx, op, nb * P * n));
    if (a->mask) {
        HYPROF_TIMED_ALLOC(mask.alloc(ctx, op, n));
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(mask.get(), a->mask, n, cudaMemcpyHostToDevice, st));
    }
    /* the structuring elements' row half-widths, one table per radius */
    std::vector<int> off(a->nradii), rows;
    for (size_t i = 0; i < a->nradii; ++i) {
        const int r = a->radii[i];
        off[i] = (int)rows.size();
        rows.resize(rows.size() + 2 * (size_t)r + 1);
        hyprof__se_rows(a->se, r, rows.data() + off[i]);
    }
    HYPROF_TRY(radii.alloc(ctx, op, a->nradii));
    HYPROF_TRY(hw_off.alloc(ctx, op, a->nradii));
    HYPROF_TRY(hw.alloc(ctx, op, rows.size()));
    HYPROF_TRY(flag.alloc(ctx, op, 1));
    HYPROF_CUDA_CHECK(cudaMemcpyAsync(radii.get(), a->radii, a->nradii * sizeof(int),
                                      cudaMemcpyHostToDevice, st));
    HYPROF_CUDA_CHECK(cudaMemcpyAsync(hw_off.get(), off.data(), off.size() * sizeof(int),
                                      cudaMemcpyHostToDevice, st));
    HYPROF_CUDA_CHECK(cudaMemcpyAsync(hw.get(), rows.data(), rows.size() * sizeof(int),
                                      cudaMemcpyHostToDevice, st));
    /* the pageable sources above must not change before the copies run */
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
    return HYPROF_OK;
}

static size_t out_floats(const hyprof_emp_args_t *a)
{
    return a->bands * hyprof__emp_planes(a->nradii) * a->width * a->height *
           (a->wavelet ? 3 : 1);
}

hyprof_status_t EmpDevice::run()
{
    if (a->width > (size_t)INT_MAX / 2 || a->height > (size_t)INT_MAX / 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "%zux%zu pixels: too large for the GPU",
                             a->width, a->height);
    const auto t0 = std::chrono::steady_clock::now();
    HYPROF_TRY(s.create(ctx, op));
    HYPROF_TRY(up.create(ctx, op));
    t_pool_stream = pool_on(ctx, op, sp.device) ? s.get() : NULL;
    if (hyprof__log_debug()) {
        for (int i = 0; i < kEvents; ++i)
            HYPROF_CUDA_CHECK(cudaEventCreate(&ev[i]));
        for (Spans *sp : {&k_spec, &k_quant, &h2d, &d2h, &peer})
            sp->enable();
    }
    mark(0, s.get());
    HYPROF_TRY(setup());
    HYPROF_TRY(features());
    HYPROF_TRY(cancelled());
    if (nb) {
        HYPROF_TRY(profiles());
        HYPROF_TRY(cancelled());
        HYPROF_TRY(a->wavelet ? denoise() : emp_out());
    }
    if (ev[0])
        report(ms_since(t0));
    return HYPROF_OK;
}

void EmpDevice::report(double wall_ms)
{
    float t[kEvents] = {0};
    (void)cudaDeviceSynchronize();
    for (int i = 1; i < kEvents; ++i)
        if (!nb && i > 2)
            t[i] = 0.0f;
        else if (cudaEventElapsedTime(&t[i], ev[i - 1], ev[i]) != cudaSuccess)
            t[i] = -1.0f;
    float total = 0.0f;
    if (cudaEventElapsedTime(&total, ev[0], ev[nb ? kEvents - 1 : 2]) != cudaSuccess)
        total = -1.0f;
    (void)cudaGetLastError();
    /* the kernels alone: the spectral transforms and the quantisation
     * without the waits for the uploads, the EMP and denoising stages */
    const double spec_k = k_spec.ms(), quant_k = k_quant.ms();
    const double kernels = spec_k + quant_k + (nb ? (double)t[3] + t[4] + t[5] + t[6] : 0.0);
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "%s stages: share=%zu shares=%zu device=%d rows=%zu-%zu bands=%zu-%zu "
                "spectral_ms=%.3f exchange_ms=%.3f markers_ms=%.3f reconstruction_ms=%.3f "
                "launches=%d finish_ms=%.3f %s_ms=%.3f download_tail_ms=%.3f device_ms=%.3f "
                "wall_ms=%.3f kernels_ms=%.3f spectral_kernels_ms=%.3f quantise_kernels_ms=%.3f "
                "h2d_ms=%.3f d2h_ms=%.3f peer_ms=%.3f "
                "upload=%s chunks=%zu pack_threads=%d unpack_threads=%d pack_ms=%.3f "
                "staging_wait_ms=%.3f "
                "spectral_host_ms=%.3f loop_ms=%.3f unpack_ms=%.3f "
                "output_wait_ms=%.3f prefault_ms=%.3f output=%s alloc_ms=%.3f",
                op, id, c.sh.size(), sp.device, sp.r0, sp.r1, b0, b0 + nb, t[1], t[2], t[3],
                t[4], launches, t[5], a->wavelet ? "denoise" : "to_float", t[6], t[7], total,
                wall_ms, kernels, spec_k, quant_k, h2d.ms(), d2h.ms(), peer.ms(), upload_mode,
                chunks, c.threads.pack, c.threads.unpack, pack_ms, wait_staging_ms,
                spectral_host_ms, loop_ms, unpack_ms, waited_ms, prep->prefault_ms(),
                prep->caller_pinned() ? "caller-pinned" : "staged", alloc_ms);
}

/* Share `i` on its device; any failure breaks the rendezvous. */
static hyprof_status_t run_share(hyprof_ctx_t *ctx, Chain &c, size_t i)
{
    hyprof_status_t st;
    {
        hyprof__cuda_device_scope scope; /* first: restored last */
        st = scope.select(ctx, c.a->op);
        if (st == HYPROF_OK) {
            try {
                EmpDevice d(ctx, c, i);
                st = d.run();
            } catch (...) { /* std::vector growth */
                st = hyprof__error(ctx, HYPROF_ERR_NOMEM, c.a->op, "out of host memory");
            }
            t_pool_stream = NULL; /* the buffers have been freed on it */
        }
    }
    if (st != HYPROF_OK)
        c.rv.brk();
    return st;
}

/* One host thread per share, each with its own context for the error text
 * (the caller's is not thread-safe). The reported error is the first share's
 * own failure (not a stop caused by another's). */
static hyprof_status_t run_multi(hyprof_ctx_t *ctx, Chain &c)
{
    const char *op = c.a->op;
    const size_t nd = c.sh.size();
    std::vector<hyprof_ctx_t *> sub(nd, (hyprof_ctx_t *)NULL);
    std::vector<hyprof_status_t> st(nd, HYPROF_OK);
    hyprof_status_t res = HYPROF_OK;
    std::vector<std::thread> threads;
    try {
        threads.reserve(nd);
        for (size_t d = 0; d < nd; ++d)
            if (!(sub[d] = hyprof_ctx_new()))
                throw std::bad_alloc();
        for (size_t d = 0; d < nd; ++d) {
            sub[d]->device = c.sh[d].device;
            sub[d]->threads = ctx->threads;
            sub[d]->log = ctx->log; /* traces */
            sub[d]->log_user = ctx->log_user;
        }
        for (size_t d = 0; d < nd; ++d)
            threads.emplace_back([&st, &sub, &c, d]() { st[d] = run_share(sub[d], c, d); });
    } catch (...) {
        c.rv.brk(); /* the started threads stop at their next rendezvous */
        res = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "cannot start the device threads");
    }
    for (auto &t : threads) /* also after a failed start: never leave one running */
        t.join();
    for (int pass = 0; pass < 2 && res == HYPROF_OK; ++pass)
        for (size_t d = 0; d < nd && res == HYPROF_OK; ++d)
            if (st[d] != HYPROF_OK && (pass || !c.sh[d].aborted)) {
                res = st[d];
                snprintf(ctx->error, sizeof ctx->error, "%.1000s (device %d)", sub[d]->error,
                         c.sh[d].device);
            }
    for (size_t d = 0; d < nd; ++d)
        hyprof_ctx_free(&sub[d]);
    return res;
}

} /* namespace emp_cuda */

using namespace emp_cuda;

extern "C" hyprof_status_t hyprof__cuda_emp(hyprof_ctx_t *ctx, void *vargs)
{
    const hyprof_emp_args_t *a = (const hyprof_emp_args_t *)vargs;
    const char *op = a->op;
    const size_t nshares = a->devices && a->ndevices ? a->ndevices : 1;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        count = 0;
    (void)cudaGetLastError();
    for (size_t d = 0; d < nshares; ++d) {
        const int dev = a->devices && a->ndevices ? a->devices[d] : ctx->device;
        if (dev < 0 || dev >= count)
            return hyprof__error(ctx, HYPROF_ERR_NO_DEVICE, op,
                                 "CUDA device %d does not exist (%d device(s))", dev, count);
    }
    int prev_dev = -1;
    (void)cudaGetDevice(&prev_dev);
    hyprof_status_t st;
    try {
        OutputPrep prep; /* joined and unlocked after every device is done */
        Chain c(a, ctx, &prep, nshares);
        /* each share's output planes (bytes): the prefault's order */
        const size_t plane = a->width * a->height * (a->wavelet ? 3 : 1) *
                             hyprof__emp_planes(a->nradii) * sizeof(float);
        OutputPrepPlan out;
        for (const Share &s : c.sh)
            out.ranges.push_back(std::make_pair(s.b0 * plane, s.b1 * plane));
        out.p = a->out;
        out.bytes = out_floats(a) * sizeof(float);
        out.caller_pinned = hyprof__cuda_is_pinned(a->out) != 0;
        out.threads = c.threads.prefault;
        prep.start(out);
        if (nshares == 1) {
            const int saved = ctx->device;
            ctx->device = c.sh[0].device;
            st = run_share(ctx, c, 0);
            ctx->device = saved;
        } else {
            st = run_multi(ctx, c);
        }
    } catch (...) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of host memory");
    }
    if (prev_dev >= 0)
        (void)cudaSetDevice(prev_dev);
    (void)cudaGetLastError();
    if (st == HYPROF_OK)
        st = hyprof__progress(ctx, 1.0, op);
    return st;
}
