/* CUDA EADP, the run (EadpCuda, eadp_host.cuh): per band group the upload,
 * the prepare stage, the increments' FED launches (from CUDA graphs when a
 * schedule repeats) and the downloads of the profile bands, pipelined over
 * kMaxSlots output slots; the entry points hyprof__cuda_eadp and
 * hyprof__cuda_eadp_from_device (eadp_impl.h).
 *
 * u's buffers: in float, two ping-pong planes inside B (free once the
 * gradient is computed) and, without a mask, the output slots themselves:
 * an increment's last launch writes u into its slot, where the next
 * increment's first launch reads it (u_into_slot). In double, A and B. */
#include "eadp_host.cuh"

namespace hyprof_cuda {
namespace eadp {

template <> double *EadpCuda::ubuf<double>(int which) const
{
    return which ? dev<double>(L.B) : dev<double>(L.A);
}
template <> float *EadpCuda::ubuf<float>(int which) const
{
    if (which >= 2)
        return dev<float>(L.slot0 + (size_t)(which - 2) * L.slot_bytes);
    /* The second one 256-byte aligned (copy_out_kernel reads float4). */
    const size_t second = fplanes(plane, group);
    return reinterpret_cast<float *>(arena.get() + L.B + (which ? second : 0));
}

/* Smoothing, gradient, contrast, diffusivity and u of one uploaded group. */
hyprof_status_t EadpCuda::prepare(size_t nb)
{
    cudaStream_t st = cs.get();
    const uint8_t *mask = a->mask ? dev<uint8_t>(L.mask) : NULL;
    const float *x = dev<float>(L.x);
    double *A = dev<double>(L.A), *B = dev<double>(L.B), *gm = dev<double>(L.gm);
    u64 *cnt = dev<u64>(L.cnt);
    double *k = dev<double>(L.k);
    const bool given = a->contrast > 0.0;
    /* The keys' high words (the selection's first passes) in gm, free until
     * the diffusivity is written there. */
    unsigned *kh = given ? NULL : reinterpret_cast<unsigned *>(gm);
    size_t tid;
    HYPROF_TRY(clock.begin(ctx, op, kPrepare, st, &tid));
    /* With the selection, the first pass's histograms too (right after cnt). */
    HYPROF_CUDA_CHECK(cudaMemsetAsync(
        cnt, 0, given ? nb * 3 * sizeof(u64) : L.hist - L.cnt + sel_slot(nb) * sizeof(u64), st));
    HYPROF_CUDA_CHECK(launch_smooth_gradient(prep_fused, x, mask, W, H, npix, nb, r,
                                             dev<double>(L.w), A, B, kh, cnt, st));
    if (given) {
        HYPROF_CUDA_CHECK(launch_fill_k(k, nb, a->contrast, st));
    } else {
        const SelectArgs s = {A,   kh,  mask,           npix,           nb,
                              sms, cnt, dev<u64>(L.hist), dev<SelState>(L.st),
                              dev<u64>(L.B), dev<u64>(L.ncand), a->percentile, k};
        HYPROF_CUDA_CHECK(launch_select(s, st));
    }
    if (input_out && copy_issued[0]) /* diffuse_cond_kernel writes the input band's slot */
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(st, copied[0].get(), 0));
    const int dif = (int)a->diffusivity;
    float *gf = reinterpret_cast<float *>(gm);
    if (shfl) /* B (s) is free now: u goes there; ce and cs into gm's 8 bytes */
        HYPROF_CUDA_CHECK(launch_diffuse_cond(x, mask, W, H, npix, ld, plane, nb, k, dif, A,
                                              ubuf<float>(0), gf, gf + group * plane,
                                              input_out ? dev<float>(L.slot0) : NULL,
                                              a->nodata, st));
    else if (f32) /* B (s) is free now: u goes there */
        HYPROF_CUDA_CHECK(
            launch_diffuse<float>(x, mask, W, H, npix, nb, k, dif, A, ubuf<float>(0), gf, st));
    else
        HYPROF_CUDA_CHECK(launch_diffuse<double>(x, mask, W, H, npix, nb, k, dif, A, A, gm, st));
    return clock.end(ctx, op, tid, st);
}

/* How many chains enqueue_fed splits nb bands into. */
size_t EadpCuda::fed_branches(size_t nb) const
{
    return nb < (size_t)kFedBranches ? nb : (size_t)kFedBranches;
}

/* The FED steps of one increment (bands 0 .. nb - 1) from the compute
 * stream; *cur: buffer of u; oslot: the output slot the last launch writes,
 * or -1. The bands go through the launches in fed_branches(nb) chains, each
 * on a stream of its own, forked from and joined to the compute stream (in
 * a graph: parallel branches). Every chain ends in the same buffer. */
hyprof_status_t EadpCuda::enqueue_fed(const std::vector<double> &steps, size_t nb, int *cur,
                                      int oslot)
{
    const size_t nbr = fed_branches(nb);
    if (nbr == 1 || steps.empty())
        return f32 ? launch_fed_f32(steps, 0, nb, cur, oslot, cs.get())
                   : launch_fed_f64(steps, 0, nb, cur, cs.get());
    HYPROF_CUDA_CHECK(cudaEventRecord(fork_ev.get(), cs.get()));
    int c = *cur;
    for (size_t j = 0; j < nbr; ++j) {
        const size_t b0 = j * nb / nbr, n = (j + 1) * nb / nbr - b0;
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(bs[j].get(), fork_ev.get(), 0));
        c = *cur;
        HYPROF_TRY(f32 ? launch_fed_f32(steps, b0, n, &c, oslot, bs[j].get())
                       : launch_fed_f64(steps, b0, n, &c, bs[j].get()));
        HYPROF_CUDA_CHECK(cudaEventRecord(join_ev[j].get(), bs[j].get()));
    }
    for (size_t j = 0; j < nbr; ++j)
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(cs.get(), join_ev[j].get(), 0));
    *cur = c;
    return HYPROF_OK;
}

/* The buffer after buffer `cur` in an increment's ping-pong (from a slot: A). */
static int next_u(int cur) { return cur == 0 ? 1 : 0; }

/* Whether the increment's last launch writes its profile band (slot oslot,
 * -1: none) as u itself, read from there by the next increment's first
 * launch: without a mask the band and u are the same floats, so one store
 * a pixel instead of two. Not when u is already in that slot (one launch
 * would read and write it). */
bool EadpCuda::u_into_slot(int cur, int oslot) const
{
    return slot_u && oslot >= 0 && cur != 2 + oslot;
}

/* Where a FED launch that reads u from `cur` leaves it (last: the
 * increment's last launch, which may write u into slot oslot). */
int EadpCuda::u_next(int cur, int oslot, bool last) const
{
    return last && u_into_slot(cur, oslot) ? 2 + oslot : next_u(cur);
}

/* Where u is after an increment of nsteps steps that starts in `cur`. */
int EadpCuda::u_after(int cur, size_t nsteps, int oslot) const
{
    const size_t per = fuse > 1 ? (size_t)fuse : 1, n = (nsteps + per - 1) / per;
    for (size_t l = 0; l < n; ++l)
        cur = u_next(cur, oslot, l + 1 == n);
    return cur;
}

/* The float FED launches of bands b0 .. b0 + nb - 1 (fed_tma_kernel,
 * fed_shfl_kernel or one step a launch); the last one also writes the
 * profile band into slot oslot (>= 0), or u itself there (u_into_slot). */
hyprof_status_t EadpCuda::launch_fed_f32(const std::vector<double> &steps, size_t b0, size_t nb,
                                         int *cur, int oslot, cudaStream_t st)
{
    const size_t per = fuse > 1 ? (size_t)fuse : 1;
    const float *ce = dev<float>(L.gm) + b0 * plane, *csp = ce + group * plane;
    float *out = oslot >= 0 ? dev<float>(L.slot0 + (size_t)oslot * L.slot_bytes) : NULL;
    const uint8_t *mask = a->mask ? dev<uint8_t>(L.mask) : NULL;
    for (size_t s0 = 0; s0 < steps.size(); s0 += per) {
        const float *ui = ubuf<float>(*cur) + b0 * plane;
        float *uo = ubuf<float>(next_u(*cur)) + b0 * plane;
        if (!shfl) { /* g in gm */
            HYPROF_CUDA_CHECK(
                launch_fed_step<float>(ui, uo, ce, W, H, npix, nb, (float)steps[s0], st));
            *cur = next_u(*cur);
            continue;
        }
        FedStepsF ff;
        memset(&ff, 0, sizeof ff);
        ff.n = (int)(steps.size() - s0 < per ? steps.size() - s0 : per);
        for (int j = 0; j < ff.n; ++j)
            ff.tau[j] = (float)steps[s0 + (size_t)j];
        const bool last = s0 + per >= steps.size();
        float *o = out && last ? out + b0 * plane : NULL;
        const int ncur = u_next(*cur, oslot, last);
        if (ncur >= 2) { /* into the slot (o != NULL then) */
            uo = o;
            o = NULL;
        }
        if (tma)
            HYPROF_CUDA_CHECK(launch_fed_tma(&tmaps[*cur], &tmaps[kMapCe], &tmaps[kMapCs], uo, o,
                                             mask, W, H, ld, plane, b0, nb, tma_ctas, ff,
                                             a->nodata, st));
        else
            HYPROF_CUDA_CHECK(launch_fed_shfl(ui, uo, ce, csp, W, H, npix, nb, ff, o, mask,
                                              a->nodata, st));
        *cur = ncur;
    }
    return HYPROF_OK;
}

/* The double FED launches of bands b0 .. b0 + nb - 1 (fed_fused_kernel, or
 * one step a launch). */
hyprof_status_t EadpCuda::launch_fed_f64(const std::vector<double> &steps, size_t b0, size_t nb,
                                         int *cur, cudaStream_t st)
{
    const double *g = dev<double>(L.gm) + b0 * plane;
    const size_t per = fuse > 1 ? (size_t)fuse : 1;
    for (size_t s0 = 0; s0 < steps.size(); s0 += per) {
        const double *uin = ubuf<double>(*cur) + b0 * plane;
        double *uout = ubuf<double>(next_u(*cur)) + b0 * plane;
        if (fuse <= 1) {
            HYPROF_CUDA_CHECK(launch_fed_step<double>(uin, uout, g, W, H, npix, nb, steps[s0], st));
        } else {
            FedSteps fs;
            memset(&fs, 0, sizeof fs);
            fs.n = (int)(steps.size() - s0 < per ? steps.size() - s0 : per);
            for (int j = 0; j < fs.n; ++j)
                fs.tau[j] = steps[s0 + (size_t)j];
            HYPROF_CUDA_CHECK(launch_fed_fused_f64(uin, uout, g, W, H, npix, nb, fs, st));
        }
        *cur = next_u(*cur);
    }
    return HYPROF_OK;
}

/* What the FED steps of an increment move, for the bandwidth figures. */
static void count_fed(size_t nsteps, int fuse, size_t pix, size_t chunks, size_t *launches,
                      size_t *max_steps, double *launch_pix, double *step_pix)
{
    const size_t per = fuse > 1 ? (size_t)fuse : 1, n = (nsteps + per - 1) / per;
    *launches += n * chunks; /* pix: all chunks of bands together */
    const size_t most = nsteps < per ? nsteps : per;
    *max_steps = most > *max_steps ? most : *max_steps;
    *launch_pix += (double)n * (double)pix;
    *step_pix += (double)nsteps * (double)pix;
}

/* Whether the increment's last FED launch writes its profile band too
 * (the float FED's fused kernels, at least one step). */
bool EadpCuda::output_in_fed(size_t nsteps) const { return shfl && nsteps > 0; }

/* Captures the increment's FED launches into ge (the stream left as it was). */
hyprof_status_t EadpCuda::capture_increment(GraphEntry &ge, const std::vector<double> &steps,
                                            size_t nb, int cur, int oslot)
{
    cudaStream_t st = cs.get();
    HYPROF_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    hyprof_status_t r = enqueue_fed(steps, nb, &cur, oslot);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(st, &graph);
    if (r != HYPROF_OK) {
        if (graph)
            (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        return r;
    }
    if (e != cudaSuccess)
        return hyprof__cuda_fail(ctx, op, e, "cudaStreamEndCapture");
    e = cudaGraphInstantiate(ge.exec.put(), graph, 0);
    (void)cudaGraphDestroy(graph);
    if (e != cudaSuccess)
        return hyprof__cuda_fail(ctx, op, e, "cudaGraphInstantiate");
    ge.valid = true;
    return HYPROF_OK;
}

/* Increment i (1-based) on the compute stream: the FED steps (from a graph
 * when this schedule repeats), then its output. With the output in the
 * last launch, the whole increment waits for its slot to be free (the
 * download of increment i - nslots), outside the timed interval: the
 * downloads take longer than the FED, so this costs nothing with 2 or more
 * slots, and the graph then holds all the increment's launches. */
hyprof_status_t EadpCuda::enqueue_increment(size_t i, size_t nb, int *cur)
{
    const std::vector<double> &all = sched[i - 1];
    size_t tid;
    count_fed(all.size(), fuse, nb * npix, fed_branches(nb), &fed_launches, &fed_max_steps,
              &fed_launch_pix, &fed_step_pix);
    const bool fo = output_in_fed(all.size());
    const size_t s = i % nslots;
    const int oslot = fo ? (int)s : -1;
    if (fo && copy_issued[s]) /* the slot's previous band is on the host */
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(cs.get(), copied[s].get(), 0));
    GraphEntry *ge = NULL;
    for (size_t e = 0; e < graphs.size() && !all.empty(); ++e)
        if (graphs[e].id == sched_id[i - 1] && graphs[e].cur == *cur && graphs[e].slot == oslot)
            ge = &graphs[e];
    if (ge && !ge->valid)
        HYPROF_TRY(capture_increment(*ge, all, nb, *cur, oslot));
    /* Outside the capture, after the instantiation (host work while the
     * stream may be idle): the events time the FED's execution. */
    HYPROF_TRY(clock.begin(ctx, op, kFed, cs.get(), &tid));
    if (ge) {
        HYPROF_CUDA_CHECK(cudaGraphLaunch(ge->exec.get(), cs.get()));
        *cur = u_after(*cur, all.size(), oslot);
    } else
        HYPROF_TRY(enqueue_fed(all, nb, cur, oslot));
    HYPROF_TRY(clock.end(ctx, op, tid, cs.get()));
    if (!fo)
        return enqueue_output(i, nb, *cur);
    HYPROF_CUDA_CHECK(cudaEventRecord(conv[s].get(), cs.get()));
    return HYPROF_OK;
}

/* Profile band i of every band of the group into its slot (i = 0: the input). */
hyprof_status_t EadpCuda::enqueue_output(size_t i, size_t nb, int cur)
{
    cudaStream_t st = cs.get();
    const size_t s = i % nslots;
    if (copy_issued[s])
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(st, copied[s].get(), 0));
    const uint8_t *mask = a->mask ? dev<uint8_t>(L.mask) : NULL;
    float *slot = dev<float>(L.slot0 + s * L.slot_bytes);
    size_t tid;
    HYPROF_TRY(clock.begin(ctx, op, kOutput, st, &tid));
    if (i == 0 || f32) { /* float already: a flat copy (nodata where masked) */
        /* x is dense: with padded planes (fed_tma_kernel) diffuse_cond_kernel
         * writes the input band's slot (input_out), never this copy. */
        if (i == 0 && ld != W)
            return hyprof__error(ctx, HYPROF_ERR_INTERNAL, op, "input band copy with padded rows");
        HYPROF_CUDA_CHECK(launch_copy_out(i == 0 ? dev<float>(L.x) : ubuf<float>(cur), mask, W,
                                          ld, plane, nb * plane, a->nodata, slot, st));
    } else
        HYPROF_CUDA_CHECK(
            launch_to_float_f64(ubuf<double>(cur), mask, W, H, npix, nb, a->nodata, slot, st));
    HYPROF_TRY(clock.end(ctx, op, tid, st));
    HYPROF_CUDA_CHECK(cudaEventRecord(conv[s].get(), st));
    return HYPROF_OK;
}

/* Profile band i of nb bands from its slot to the host (dst: band 0's; a
 * band's profile bands are (C + 1) npix floats apart there): one 2-D copy, or
 * a 3-D one that drops the padding of fed_tma_kernel's rows. */
cudaError_t EadpCuda::download(float *dst, const float *slot, size_t nb, cudaStream_t st) const
{
    if (ld == W)
        return copy_cols_d2h(dst, (C + 1) * npix, slot, npix, npix, nb, st);
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(const_cast<float *>(slot), (size_t)ld * sizeof(float),
                                   (size_t)W * sizeof(float), (size_t)H);
    p.dstPtr = make_cudaPitchedPtr(dst, (size_t)W * sizeof(float), (size_t)W * sizeof(float),
                                   (C + 1) * (size_t)H);
    p.extent = make_cudaExtent((size_t)W * sizeof(float), (size_t)H, nb);
    p.kind = cudaMemcpyDeviceToHost;
    return cudaMemcpy3DAsync(&p, st);
}

hyprof_status_t EadpCuda::run_group(size_t g0, size_t nb)
{
    cudaStream_t st = cs.get();
    /* After the previous group's first output (which reads x): stream order. */
    size_t tid;
    HYPROF_TRY(clock.begin(ctx, op, kUpload, st, &tid));
    if (dev_x)
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(dev<float>(L.x), dev_x + g0 * npix,
                                          nb * npix * sizeof(float), cudaMemcpyDeviceToDevice,
                                          st));
    else
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(dev<float>(L.x), a->x + g0 * npix,
                                          nb * npix * sizeof(float), cudaMemcpyHostToDevice, st));
    HYPROF_TRY(clock.end(ctx, op, tid, st));
    HYPROF_TRY(prepare(nb));
    int cur = 0; /* u is in A */
    if (input_out) /* written by diffuse_cond_kernel */
        HYPROF_CUDA_CHECK(cudaEventRecord(conv[0].get(), st));
    else
        HYPROF_TRY(enqueue_output(0, nb, cur));
    size_t next = 1;
    while (next <= C && next < nslots)
        HYPROF_TRY(enqueue_increment(next++, nb, &cur));
    for (size_t i = 0; i <= C; ++i) {
        const size_t s = i % nslots;
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(xs.get(), conv[s].get(), 0));
        HYPROF_TRY(clock.begin(ctx, op, kDownload, xs.get(), &tid));
        /* Pageable destination: returns when the copy is done, while the
         * increments queued before it run on the compute stream. */
        HYPROF_CUDA_CHECK(download(a->out + (g0 * (C + 1) + i) * npix,
                                   dev<float>(L.slot0 + s * L.slot_bytes), nb, xs.get()));
        HYPROF_TRY(clock.end(ctx, op, tid, xs.get()));
        HYPROF_CUDA_CHECK(cudaEventRecord(copied[s].get(), xs.get()));
        copy_issued[s] = true;
        while (next <= C && next < i + 1 + nslots)
            HYPROF_TRY(enqueue_increment(next++, nb, &cur));
        HYPROF_CUDA_CHECK(cudaEventSynchronize(copied[s].get()));
        HYPROF_TRY(hyprof__progress(
            ctx, ((double)g0 + (double)nb * (double)(i + 1) / (double)(C + 1)) / (double)a->bands,
            op));
    }
    if (a->contrast_out)
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->contrast_out + g0, dev<double>(L.k),
                                          nb * sizeof(double), cudaMemcpyDeviceToHost, st));
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
    return clock.collect(ctx, op);
}

hyprof_status_t EadpCuda::run()
{
    HYPROF_TRY(check_args());
    HYPROF_TRY(plan());
    /* The output is (count+1) times the input: pinned, its downloads overlap
     * the FED steps for real (pageable copies run at a fraction of the bus).
     * The input pinned too: its upload is then a DMA that returns at once, so
     * the prepare stage's launches are queued while it runs. */
    HostPin out_pin, in_pin;
    out_pin.pin(a->out, a->bands * (C + 1) * npix * sizeof(float));
    if (!dev_x)
        in_pin.pin(const_cast<float *>(a->x), a->bands * npix * sizeof(float));
    for (size_t g0 = 0; g0 < a->bands; g0 += group) {
        const size_t nb = a->bands - g0 < group ? a->bands - g0 : group;
        if (nb != group)
            for (size_t e = 0; e < graphs.size(); ++e) { /* captured for another grid */
                graphs[e].exec.reset();
                graphs[e].valid = false;
            }
        HYPROF_TRY(run_group(g0, nb));
    }
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(xs.get()));
    report();
    return HYPROF_OK;
}

} /* namespace eadp */
} /* namespace hyprof_cuda */

extern "C" hyprof_status_t hyprof__cuda_eadp(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "eadp";
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));
    try {
        hyprof_cuda::eadp::EadpCuda run(ctx, (const hyprof_eadp_args_t *)vargs);
        return run.run();
    } catch (...) { /* std::vector growth: nothing else throws */
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of host memory");
    }
}

extern "C" hyprof_status_t hyprof__cuda_eadp_from_device(hyprof_ctx_t *ctx,
                                                         const hyprof_eadp_args_t *args,
                                                         const float *d_x)
{
    static const char op[] = "eadp";
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    if (!d_x)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "no device input");
    try { /* the caller (the PCA's backend) has selected the device */
        hyprof_cuda::eadp::EadpCuda run(ctx, args, d_x);
        return run.run();
    } catch (...) {
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of host memory");
    }
}
