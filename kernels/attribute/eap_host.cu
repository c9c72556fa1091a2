/* The CUDA attribute profiles' orchestration (the stages: eap_cuda.cuh; the
 * path as a whole: docs/internals/eap.md).
 *
 * A call plans (eap_plan.cu), starts the output's preparation on a helper
 * thread (OutputPrep: page faults, page-locking), carves its buffers,
 * page-locks the levels for their upload, then runs the bands:
 * - in batches (hyprof_attribute_profiles): a batch's levels up, its trees,
 *   attributes and filters on stream 0, its planes down. With the output
 *   page-locked (for the call, or the caller's), a batch of two bands or
 *   more is pipelined: the trees of all its bands at once (the global
 *   flooding is latency-bound: about the same time for 2 images as for
 *   16), then a band at a time its attributes and filters, each band's
 *   planes going to the host on a copy stream while the next ones compute.
 *   Float planes into the caller's page-locked output go as 8-bit planes
 *   every other band (staged and widened on the host on a second copy
 *   stream), the bus and the host's memory both at work;
 * - one band at a time (hyprof_attribute_profiles_bands): with two planes
 *   slots, band b's compute on stream 0 while band b - 1's planes go to the
 *   host on a copy stream and to the caller, and band b + 1's levels go up
 *   on a third stream.
 * Stage times (device events) and host times are logged at debug level;
 * with HYPROF_LOG=debug every launch is also waited for and traced. */
#include "eap_cuda.cuh"

#include <cstdio>

namespace eap {

StageTimer::~StageTimer()
{
    for (cudaEvent_t &e : ev_)
        if (e)
            (void)cudaEventDestroy(e);
}

hyprof_status_t StageTimer::mark(hyprof_ctx_t *ctx, const char *op, int stage)
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

hyprof_status_t StageTimer::add(hyprof_ctx_t *ctx, const char *op)
{
    if (!used_)
        return HYPROF_OK;
    HYPROF_CUDA_CHECK(cudaEventSynchronize(ev_[used_ - 1]));
    for (size_t i = 0; i + 1 < used_; i++) {
        float t = 0.0f;
        HYPROF_CUDA_CHECK(cudaEventElapsedTime(&t, ev_[i], ev_[i + 1]));
        if (stage_[i] >= 0 && stage_[i] < kCount)
            ms_[stage_[i]] += t;
    }
    used_ = 0;
    return HYPROF_OK;
}

Run::Run(hyprof_ctx_t *c, const hyprof_eap_args_t *args) : ctx(c), a(args), op(args->op)
{
    trace.on = hyprof__log_debug() != 0;
}

Run::~Run()
{
    each.copy.reset();
    pipe.copy2.reset();
    each.up.reset();
    staging_release(*this);
    for (cudaEvent_t &e : each.dl)
        if (e)
            (void)cudaEventDestroy(e);
    for (cudaEvent_t &e : pipe.ev)
        (void)cudaEventDestroy(e);
    give_arena(*this);
    if (trace.start)
        (void)cudaEventDestroy(trace.start);
    if (trace.now)
        (void)cudaEventDestroy(trace.now);
}

/* With HYPROF_LOG=debug: waits after the launch and logs the kernel, the
 * time since the batch began and the error bits. */
hyprof_status_t traced(Run &r, const char *kernel)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    if (!r.trace.on)
        return HYPROF_OK;
    HYPROF_CUDA_CHECK(cudaDeviceSynchronize());
    int err = 0;
    HYPROF_CUDA_CHECK(cudaMemcpy(&err, r.d.error.get(), sizeof err, cudaMemcpyDeviceToHost));
    float ms = 0.0f;
    HYPROF_CUDA_CHECK(cudaEventRecord(r.trace.now, 0));
    HYPROF_CUDA_CHECK(cudaEventSynchronize(r.trace.now));
    HYPROF_CUDA_CHECK(cudaEventElapsedTime(&ms, r.trace.start, r.trace.now));
    hyprof__log(ctx, HYPROF_LOG_DEBUG, "%s: trace: %s done, %.3f ms into the batch%s", op,
                kernel, ms, err ? " (error bits set)" : "");
    return HYPROF_OK;
}

namespace {

hyprof_status_t check_error(Run &r, int err, size_t b0, size_t nb)
{
    if (err)
        return hyprof__error(r.ctx, HYPROF_ERR_DEVICE, r.op,
                             "internal error (bands %zu..%zu):%s%s%s", b0 + 1, b0 + nb,
                             err & kErrWalk ? " a level-root walk did not end;" : "",
                             err & kErrUp ? " an attribute path did not end;" : "",
                             err & kErrOut ? " an output walk did not end;" : "");
    return HYPROF_OK;
}

/* The error bits after the batch (stream 0, synchronous). */
hyprof_status_t batch_error(Run &r, size_t b0, size_t nb)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    int err = 0;
    HYPROF_CUDA_CHECK(cudaMemcpy(&err, r.d.error.get(), sizeof err, cudaMemcpyDeviceToHost));
    return check_error(r, err, b0, nb);
}

/* The batch's levels to images 0, 2, 4, ... of lev (stream 0). Bands one by
 * one with two slots: band b0 + 1's levels go up on each.up into lev_next
 * meanwhile, and band b0's, when they came that way, are a copy on the
 * device. */
hyprof_status_t upload(Run &r, size_t b0, size_t nb)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    EachPipe &e = r.each;
    const size_t n = r.p.n;
    if (e.prefetched == b0 + 1) {
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(0, e.up_done.get(), 0));
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(r.d.lev.get(), e.lev_next.get(), n * sizeof(uint16_t),
                                          cudaMemcpyDeviceToDevice, 0));
        HYPROF_CUDA_CHECK(cudaEventRecord(e.lev_free.get(), 0));
    } else {
        for (size_t i = 0; i < nb; i++)
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(r.d.lev.get() + 2 * i * n, r.a->q + (b0 + i) * n,
                                              n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    }
    if (e.lev_next.get() && b0 + 1 < r.a->bands) {
        cudaStream_t us = e.up.get();
        if (e.pin_each) {
            auto t0 = std::chrono::steady_clock::now();
            e.in_pins.emplace_back(new HostPin);
            e.in_pins.back()->pin((void *)(r.a->q + (b0 + 1) * n), n * sizeof(uint16_t));
            r.t.pin_each += ms_since(t0);
        }
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(us, e.lev_free.get(), 0));
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(e.lev_next.get(), r.a->q + (b0 + 1) * n,
                                          n * sizeof(uint16_t), cudaMemcpyHostToDevice, us));
        HYPROF_CUDA_CHECK(cudaEventRecord(e.up_done.get(), us));
        e.prefetched = b0 + 2;
    }
    return HYPROF_OK;
}

/* Bands [b0, b0 + nb): their levels up and their trees built, on stream 0
 * (stage marks 0 and 1); the start of both batch shapes. */
hyprof_status_t upload_build(Run &r, size_t b0, size_t nb)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    int nimg = (int)(2 * nb);
    r.g.nimg = nimg;
    r.b0 = b0;
    HYPROF_TRY(r.timer.mark(ctx, op, 0));
    if (r.trace.on)
        HYPROF_CUDA_CHECK(cudaEventRecord(r.trace.start, 0));
    HYPROF_TRY(upload(r, b0, nb));
    HYPROF_TRY(r.timer.mark(ctx, op, 1));
    return build_trees(r, nimg);
}

/* Bands [b0, b0 + nb) on stream 0, up to their planes in `dev` (device);
 * stage marks 0 to 4. */
hyprof_status_t compute(Run &r, size_t b0, size_t nb, unsigned char *dev)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    int nimg = (int)(2 * nb);
    HYPROF_TRY(upload_build(r, b0, nb));
    HYPROF_TRY(r.timer.mark(ctx, op, 2));
    HYPROF_TRY(accumulate(r, nimg));
    HYPROF_TRY(r.timer.mark(ctx, op, 3));
    HYPROF_TRY(filters(r, nimg, dev, r.p.narrow));
    HYPROF_TRY(r.timer.mark(ctx, op, 4));
    return HYPROF_OK;
}

/* Marks 5 (no download on stream 0) and adds the band's stage times. */
hyprof_status_t finish_stages(Run &r)
{
    HYPROF_TRY(r.timer.mark(r.ctx, r.op, 5));
    return r.timer.add(r.ctx, r.op);
}

/* Bands one by one: band b's planes (in `dev`, computed once done[b % 2]
 * fires) to out16 on each.copy, then to the caller. */
hyprof_status_t deliver(Run &r, size_t b, const unsigned char *dev)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    EachPipe &e = r.each;
    cudaStream_t cs = e.copy.get();
    HYPROF_CUDA_CHECK(cudaStreamWaitEvent(cs, e.done[b % 2].get(), 0));
    HYPROF_CUDA_CHECK(cudaEventRecord(e.dl[0], cs));
    size_t count = r.a->planes * r.p.n;
    if (r.p.narrow) {
        HYPROF_TRY(download_narrow(r, 0, count, dev, cs));
    } else {
        r.prep->join(); /* out16 page-locked */
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(r.a->out16, dev, count * r.p.esize,
                                          cudaMemcpyDeviceToHost, cs));
    }
    HYPROF_CUDA_CHECK(cudaEventRecord(e.dl[1], cs));
    int err = 0;
    HYPROF_CUDA_CHECK(
        cudaMemcpyAsync(&err, r.d.error.get(), sizeof err, cudaMemcpyDeviceToHost, cs));
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(cs));
    float ms = 0.0f;
    HYPROF_CUDA_CHECK(cudaEventElapsedTime(&ms, e.dl[0], e.dl[1]));
    r.t.each_dl += ms;
    HYPROF_TRY(check_error(r, err, b, 1));
    if (r.a->each(r.a->each_user, b, r.a->out16))
        return hyprof__error(ctx, HYPROF_ERR_CANCELLED, op, "stopped after band %zu", b + 1);
    return hyprof__progress(ctx, (double)(b + 1) / (double)r.a->bands, op);
}

/* Bands one by one with two planes slots: band b's trees and planes (slot
 * b % 2) on stream 0 while band b - 1's planes go to the host on each.copy
 * and to the caller. Band b + 1 only writes its slot once band b - 1 has
 * been handed over (the host waits for that before queuing band b + 1). */
hyprof_status_t run_each(Run &r)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    EachPipe &e = r.each;
    HYPROF_TRY(e.copy.create(ctx, op));
    HYPROF_TRY(e.up.create(ctx, op)); /* the next band's levels go up early */
    HYPROF_TRY(e.up_done.create(ctx, op));
    HYPROF_TRY(e.lev_free.create(ctx, op));
    HYPROF_TRY(e.lev_next.alloc(ctx, op, r.p.n));
    for (int i = 0; i < 2; i++) {
        HYPROF_TRY(e.done[i].create(ctx, op));
        HYPROF_CUDA_CHECK(cudaEventCreate(&e.dl[i]));
    }
    size_t slot_bytes = r.a->planes * r.p.n * r.p.dsize;
    for (size_t b = 0; b <= r.a->bands; b++) {
        if (b < r.a->bands) {
            if (b > 0) /* band b - 1's stage times (it is complete before band b's sort) */
                HYPROF_TRY(finish_stages(r));
            HYPROF_TRY(compute(r, b, 1, r.d.out.get() + (b % 2) * slot_bytes));
            HYPROF_CUDA_CHECK(cudaEventRecord(e.done[b % 2].get(), 0));
        }
        if (b > 0)
            HYPROF_TRY(deliver(r, b - 1, r.d.out.get() + ((b - 1) % 2) * slot_bytes));
    }
    return finish_stages(r);
}

/* Bands a group of batch [b0, b0 + nb)'s pipeline, 0 for none: groups of
 * one band, when the output is page-locked (for the call, or the caller's)
 * and the batch has two bands or more. Not for the chunked planes (one
 * band) nor the bands handed over one by one. */
size_t pipe_bands(const Run &r, size_t nb)
{
    if (r.p.each || r.p.oc < r.p.n || nb < 2)
        return 0;
    return r.p.caller_pinned || r.p.pinned ? 1 : 0;
}

/* r.g for images [img0, img0 + nimg) of the batch: every per-image array
 * from image img0 on (the kernels index image i at i * n). */
Args shifted(const Args &w, size_t img0, int nimg, size_t n)
{
    Args g = w;
    size_t o = img0 * n;
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

/* The pipelined batch's groups, and which are 8-bit (hybrid: every other
 * group of float planes into the caller's page-locked output). */
struct Groups {
    size_t b0, nb, gb, ng;
    bool hybrid;
    size_t first(size_t g) const { return g * gb; }
    size_t count(size_t g) const { return nb - g * gb < gb ? nb - g * gb : gb; }
    bool narrow(const Run &r, size_t g) const { return r.p.narrow || (hybrid && (g & 1)); }
};

hyprof_status_t pipe_events(Run &r, size_t ng)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    GroupPipe &pp = r.pipe;
    if (!r.each.copy.get())
        HYPROF_TRY(r.each.copy.create(ctx, op));
    while (pp.done.size() < ng) {
        pp.done.emplace_back(new Event);
        HYPROF_TRY(pp.done.back()->create(ctx, op));
    }
    while (pp.ev.size() < 2 * ng) {
        cudaEvent_t e = NULL;
        HYPROF_CUDA_CHECK(cudaEventCreate(&e));
        pp.ev.push_back(e);
    }
    return HYPROF_OK;
}

/* Group by group on stream 0: the attributes and filters (all queued at
 * once), an event after each group's planes. */
hyprof_status_t pipe_compute(Run &r, const Groups &G)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    const Args whole = r.g;
    size_t band_bytes = r.a->planes * r.p.n * r.p.dsize;
    hyprof_status_t st = HYPROF_OK;
    for (size_t g = 0; g < G.ng && st == HYPROF_OK; g++) {
        int nimg = (int)(2 * G.count(g));
        r.g = shifted(whole, 2 * G.first(g), nimg, r.p.n);
        unsigned char *dev = r.d.out.get() + G.first(g) * band_bytes;
        st = r.timer.mark(ctx, op, 2);
        if (st == HYPROF_OK)
            st = accumulate(r, nimg);
        if (st == HYPROF_OK)
            st = r.timer.mark(ctx, op, 3);
        if (st == HYPROF_OK)
            st = filters(r, nimg, dev, G.narrow(r, g));
        if (st == HYPROF_OK && cudaEventRecord(r.pipe.done[g]->get(), 0) != cudaSuccess)
            st = hyprof__error(ctx, HYPROF_ERR_DEVICE, op, "cudaEventRecord failed");
    }
    r.g = whole;
    return st;
}

/* The float groups' copies queued on each.copy, then the 8-bit ones staged
 * and widened on this thread, group by group (hybrid: on pipe.copy2). */
hyprof_status_t pipe_download(Run &r, const Groups &G)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    size_t band_bytes = r.a->planes * r.p.n * r.p.dsize;
    for (int pass = 0; pass < 2; pass++)
        for (size_t g = 0; g < G.ng; g++) {
            if (G.narrow(r, g) != (pass == 1))
                continue;
            size_t g0 = G.first(g), gn = G.count(g);
            size_t first = out_index(r, G.b0 + g0), count = gn * r.a->planes * r.p.n;
            const unsigned char *dev = r.d.out.get() + g0 * band_bytes;
            cudaStream_t gs = G.hybrid && pass == 1 ? r.pipe.copy2.get() : r.each.copy.get();
            HYPROF_CUDA_CHECK(cudaStreamWaitEvent(gs, r.pipe.done[g]->get(), 0));
            HYPROF_CUDA_CHECK(cudaEventRecord(r.pipe.ev[2 * g], gs));
            if (pass == 1) {
                HYPROF_TRY(download_narrow(r, first, count, dev, gs));
            } else {
                HYPROF_CUDA_CHECK(cudaMemcpyAsync(r.out_base + first * r.p.esize, dev,
                                                  count * r.p.esize, cudaMemcpyDeviceToHost, gs));
            }
            HYPROF_CUDA_CHECK(cudaEventRecord(r.pipe.ev[2 * g + 1], gs));
            if (r.p.narrow && g + 1 < G.ng) /* widened: the group is in the output */
                HYPROF_TRY(hyprof__progress(ctx, (double)(G.b0 + g0 + gn) / (double)r.a->bands,
                                            op));
        }
    return HYPROF_OK;
}

/* Waits for the groups' copies: their times, progress after each, and the
 * time from the compute's end to the last copy's. */
hyprof_status_t pipe_wait(Run &r, const Groups &G)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    GroupPipe &pp = r.pipe;
    for (size_t g = 0; g < G.ng; g++) {
        HYPROF_CUDA_CHECK(cudaEventSynchronize(pp.ev[2 * g + 1]));
        float ms = 0.0f;
        HYPROF_CUDA_CHECK(cudaEventElapsedTime(&ms, pp.ev[2 * g], pp.ev[2 * g + 1]));
        pp.dl_ms += ms;
        if (!r.p.narrow && g + 1 < G.ng)
            HYPROF_TRY(hyprof__progress(
                ctx, (double)(G.b0 + G.first(g) + G.count(g)) / (double)r.a->bands, op));
    }
    float tail = 0.0f;
    HYPROF_CUDA_CHECK(cudaEventSynchronize(r.timer.last())); /* (ordered after the last group only) */
    for (size_t g = 0; g < G.ng; g++) {
        float t = 0.0f;
        HYPROF_CUDA_CHECK(cudaEventElapsedTime(&t, r.timer.last(), pp.ev[2 * g + 1]));
        tail = t > tail ? t : tail;
    }
    pp.tail_ms += tail;
    return HYPROF_OK;
}

/* The pipelined batch (pipe_bands): trees for all, then group by group the
 * attributes and filters on stream 0, each group's download on a copy
 * stream after its planes; progress after each group's copy (a cancel
 * returns after the copies in flight land: the streams' reset waits for
 * them, and the caller frees the output). */
hyprof_status_t batch_piped(Run &r, size_t b0, size_t nb, size_t gb)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    Groups G{b0, nb, gb, (nb + gb - 1) / gb, false};
    HYPROF_TRY(pipe_events(r, G.ng));
    HYPROF_TRY(upload_build(r, b0, nb));
    G.hybrid = !r.p.narrow && r.p.caller_pinned && r.a->levels <= 256 && G.ng > 1;
    if (G.hybrid && !r.pipe.copy2.get())
        HYPROF_TRY(r.pipe.copy2.create(ctx, op));
    HYPROF_TRY(pipe_compute(r, G));
    HYPROF_TRY(r.timer.mark(ctx, op, 5)); /* the compute's end */
    if (!r.p.narrow)
        r.prep->join(); /* the output page-locked (pinned) */
    HYPROF_TRY(pipe_download(r, G));
    HYPROF_TRY(pipe_wait(r, G));
    r.pipe.gb = gb;
    HYPROF_TRY(r.timer.add(ctx, op));
    return batch_error(r, b0, nb);
}

hyprof_status_t batch(Run &r, size_t b0, size_t nb)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    size_t gb = pipe_bands(r, nb);
    if (gb)
        return batch_piped(r, b0, nb, gb);
    HYPROF_TRY(compute(r, b0, nb, r.d.out.get()));
    size_t count = nb * r.a->planes * r.p.n, first = out_index(r, b0);
    if (r.p.narrow)
        HYPROF_TRY(download_narrow(r, first, count, r.d.out.get(), 0));
    else if (r.p.oc == r.p.n) /* else filters() has downloaded the chunks */
        HYPROF_TRY(download(r, r.out_base + first * r.p.esize, r.d.out.get(), count * r.p.esize));
    HYPROF_TRY(r.timer.mark(ctx, op, 5));
    HYPROF_TRY(r.timer.add(ctx, op));
    return batch_error(r, b0, nb);
}

hyprof_status_t run_batches(Run &r)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    const hyprof_eap_args_t *a = r.a;
    if (r.p.each && r.p.slots == 2)
        return run_each(r);
    for (size_t b0 = 0; b0 < a->bands; b0 += r.p.nb) {
        size_t nb = a->bands - b0 < r.p.nb ? a->bands - b0 : r.p.nb;
        HYPROF_TRY(batch(r, b0, nb));
        if (r.p.each && a->each(a->each_user, b0, a->out16))
            return hyprof__error(ctx, HYPROF_ERR_CANCELLED, op, "stopped after band %zu", b0 + 1);
        HYPROF_TRY(hyprof__progress(ctx, (double)(b0 + nb) / (double)a->bands, op));
    }
    return HYPROF_OK;
}

/* Host times of a call, for the debug summary. */
struct CallTimes {
    double plan, prep_start, setup, batches, release, total, in_pin;
};

void log_summary(Run &r, const OutputPrep &prep, const CallTimes &c)
{
    const hyprof_eap_args_t *a = r.a;
    double t[StageTimer::kCount];
    for (int i = 0; i < StageTimer::kCount; i++)
        t[i] = r.timer.ms()[i];
    if (r.p.each && r.p.slots == 2)
        t[4] = r.t.each_dl; /* on each.copy, overlapping the next band's stages */
    if (r.pipe.gb)
        t[4] += r.pipe.dl_ms; /* on each.copy, overlapping the next groups' stages */
    char piped[128] = "";
    if (r.pipe.gb)
        snprintf(piped, sizeof piped,
                 ", groups of %zu band(s) pipelined (downloads after the compute %.3f ms)",
                 r.pipe.gb, r.pipe.tail_ms);
    hyprof__log(r.ctx, HYPROF_LOG_DEBUG,
                "%s: cuda host ms: plan %.2f, output preparation start %.2f, set-up %.2f "
                "(allocations included), batches %.2f, release %.2f; total %.2f",
                a->op, c.plan, c.prep_start, c.setup, c.batches, c.release, c.total);
    hyprof__log(r.ctx, HYPROF_LOG_DEBUG,
                "%s: cuda, %zu band(s) of %zux%zu in batches of %zu%s%s%s; device ms: upload "
                "%.3f, tree %.3f, attributes %.3f, filters %.3f, download %.3f; host "
                "output preparation %.1f ms (page faults %.1f, page-lock %.1f); host ms: "
                "device allocations %.1f, input page-lock %.1f, staging %.1f, waits for "
                "the copies %.1f, widening %.1f, release %.1f",
                a->op, a->bands, a->width, a->height, r.p.nb,
                r.p.narrow          ? ", 8-bit planes widened on the host"
                : r.p.caller_pinned ? ", into the caller's page-locked output"
                                    : "",
                r.p.each ? (r.p.slots == 2 ? ", handed over band by band, downloads overlapping "
                                             "the next band"
                                           : ", handed over band by band")
                         : "",
                piped, t[0], t[1], t[2], t[3], t[4], prep.ms(), prep.prefault_ms(),
                prep.ms() - prep.prefault_ms(), r.t.alloc, c.in_pin + r.t.pin_each, r.t.stage,
                r.t.wait, r.t.widen, c.release);
}

/* The whole call: plan, output preparation, buffers, input page-locking,
 * the bands, release. */
hyprof_status_t run(Run &r)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    CallTimes c{};
    auto r0 = std::chrono::steady_clock::now();
    HYPROF_TRY(plan(r));
    c.plan = ms_since(r0);
    OutputPrep prep;
    int device = 0;
    HYPROF_CUDA_CHECK(cudaGetDevice(&device));
    r.prep = &prep;
    OutputPrepPlan out;
    out.p = r.out_base;
    out.bytes = r.p.out_bytes;
    out.caller_pinned = r.p.caller_pinned;
    out.populate = true;
    out.threads = hyprof__threads(ctx);
    out.pin = r.p.pinned;
    out.device = device;
    prep.start(out);
    auto h0 = std::chrono::steady_clock::now();
    c.prep_start = ms_since(r0) - c.plan;
    HYPROF_TRY(alloc_buffers(r));
    r.t.alloc = ms_since(h0);
    if (r.trace.on) {
        HYPROF_CUDA_CHECK(cudaEventCreate(&r.trace.start));
        HYPROF_CUDA_CHECK(cudaEventCreate(&r.trace.now));
    }
    /* the levels page-locked: their upload at the bus speed (bands one by
     * one with two slots: a band at a time, just before its upload is
     * queued, while the device works on the band before) */
    HostPin in_pin;
    auto h2 = std::chrono::steady_clock::now();
    r.each.pin_each = r.p.each && r.p.slots == 2;
    in_pin.pin((void *)r.a->q, (r.each.pin_each ? 1 : r.a->bands) * r.p.n * sizeof(uint16_t));
    c.in_pin = ms_since(h2);
    auto hb = std::chrono::steady_clock::now();
    c.setup = ms_since(r0);
    HYPROF_TRY(run_batches(r));
    auto h1 = std::chrono::steady_clock::now();
    c.batches = ms_since(hb);
    release_buffers(r);
    prep.join();
    prep.unlock();
    c.release = ms_since(h1);
    c.total = ms_since(r0);
    log_summary(r, prep, c);
    return HYPROF_OK;
}

} /* namespace */
} /* namespace eap */

extern "C" hyprof_status_t hyprof__cuda_eap(hyprof_ctx_t *ctx, void *vargs)
{
    const hyprof_eap_args_t *a = (const hyprof_eap_args_t *)vargs;
    const char *op = a && a->op ? a->op : "eap";
    if (!ctx || !a)
        return HYPROF_ERR_ARGUMENT;
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));
    eap::Run r(ctx, a);
    return eap::run(r);
}
