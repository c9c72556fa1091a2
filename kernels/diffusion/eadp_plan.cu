/* CUDA EADP, the plan (EadpCuda, eadp_host.cuh): the arguments, the FED
 * schedules, the kernels, the band groups and the device memory, the graphs.
 *
 * Every choice that depends on the hardware or the data is made once, in
 * plan_kernels and plan_tma (the kernels) and plan_memory (the groups):
 *   - precision (a parameter): float FED on fed_shfl_kernel, or double on
 *     fed_fused_kernel;
 *   - the image's size: one plain FED step a launch (fed_step_kernel) when
 *     the fused kernels' grids or 32-bit offsets cannot cover it; the
 *     smoothing in three kernels for radii above kPrepMaxR;
 *   - sm_90 and the regions per CTA: fed_tma_kernel for the float FED when
 *     each chain's launch has at least 3 regions per CTA of its persistent
 *     grid (with fewer, the first region's copy is not hidden and the
 *     narrower output tiles cost more than the copy engine gains);
 *   - the device memory (hyprof__cuda_budget, capped by HYPROF_DEVICE_MEMORY):
 *     the largest band group that fits with up to kMaxSlots output slots.
 *
 * Memory: per pixel and band x (4 bytes), A and B (8 each: H and s, then G
 * and the float u buffers), gm (8: G's key words, then g or ce and cs) and 4
 * per output slot; the selection's histograms and states per band. */
#include "eadp_host.cuh"

#include <algorithm>
#include <climits>
#include <cmath>

namespace hyprof_cuda {
namespace eadp {

static const size_t kHuge = (size_t)1 << 62; /* "does not fit" */

static size_t mul_sat(size_t a, size_t b) { return (a && b > kHuge / a) ? kHuge : a * b; }

/* Appends `bytes` (256-byte aligned) at *off; returns the offset. */
static size_t take(size_t *off, size_t bytes)
{
    const size_t o = *off;
    *off = (bytes >= kHuge || o >= kHuge) ? kHuge : o + ((bytes + 255) & ~(size_t)255);
    return o;
}

size_t fplanes(size_t plane, size_t nb)
{
    return (mul_sat(mul_sat(plane, sizeof(float)), nb) + 255) & ~(size_t)255;
}

/* plane: floats per band of the float FED's planes (u, ce, cs, the output
 * slots; npix, or more with padded rows). */
Layout plan_layout(size_t npix, size_t plane, bool has_mask, int r, size_t nb, size_t nslots)
{
    Layout L;
    size_t off = 0;
    const size_t fband = mul_sat(npix, sizeof(float)), dband = mul_sat(npix, sizeof(double));
    const size_t dplanes = mul_sat(dband, nb), two = mul_sat(fplanes(plane, nb), 2);
    L.mask = take(&off, has_mask ? npix : 0);
    L.w = take(&off, (size_t)(2 * r + 1) * sizeof(double));
    L.x = take(&off, mul_sat(fband, nb));
    L.A = take(&off, mul_sat(dband, nb + 1));
    /* B: s, then the float u buffers (ubuf); gm: G's keys, then g or ce and cs */
    L.B = take(&off, (dplanes > two ? dplanes : two) + 256);
    L.gm = take(&off, dplanes > two ? dplanes : two);
    /* cnt right before hist: one memset clears the counts and the first
     * pass's histograms; a slot of states and histograms per selection pass */
    L.cnt = take(&off, nb * 3 * sizeof(u64));
    L.hist = take(&off, mul_sat(mul_sat(nb, kSelPasses * sizeof(u64)), sel_slot(1)));
    L.st = take(&off, nb * kSelPasses * kSelQueries * sizeof(SelState));
    L.k = take(&off, nb * sizeof(double));
    L.ncand = take(&off, nb * sizeof(u64));
    L.slot_bytes = fplanes(plane, nb);
    L.slot0 = take(&off, mul_sat(L.slot_bytes, nslots));
    L.total = off;
    return L;
}

hyprof_status_t EadpCuda::check_args()
{
    if (!a || !(a->x || dev_x) || !a->out)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "CUDA EADP called without data");
    if (a->width == 0 || a->height == 0 || a->bands == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "empty cube (%zu x %zu x %zu)", a->width,
                             a->height, a->bands);
    if (a->width > (size_t)INT_MAX / 2 || a->height > (size_t)INT_MAX / 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "image %zu x %zu is too large",
                             a->width, a->height);
    if (!(a->sigma > 0.0) || !(a->sigma <= 1e6))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "sigma %g must be in (0, 1e6]",
                             a->sigma);
    if (!(a->contrast > 0.0) && !(a->percentile > 0.0 && a->percentile < 1.0))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "contrast percentile %g must be inside (0, 1)", a->percentile);
    if (a->diffusivity < HYPROF_DIFFUSIVITY_G1 || a->diffusivity > HYPROF_DIFFUSIVITY_G3)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "unknown diffusivity %d",
                             (int)a->diffusivity);
    if (a->precision != HYPROF_EADP_FLOAT && a->precision != HYPROF_EADP_DOUBLE)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "unknown precision %d",
                             (int)a->precision);
    if (a->cycles < 1)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "cycles %d must be >= 1", a->cycles);
    if (a->ntimes && !a->nsteps)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "no FED schedule given");
    for (size_t i = 0; i < a->ntimes; ++i)
        if (a->nsteps[i] && (!a->tau || !a->tau[i]))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                                 "no step sizes for increment %zu", i + 1);
    return HYPROF_OK;
}

/* The smoothing weights and each increment's flattened FED steps. */
void EadpCuda::plan_schedule()
{
    W = (int)a->width;
    H = (int)a->height;
    npix = a->width * a->height;
    C = a->ntimes;
    r = (int)ceil(3.0 * a->sigma);
    weights.resize((size_t)(2 * r + 1));
    for (int j = -r; j <= r; ++j) /* the host's exp(), as in eadp.c */
        weights[(size_t)(j + r)] = exp(-(double)(j * j) / (2.0 * a->sigma * a->sigma));
    sched.resize(C);
    sched_id.resize(C);
    for (size_t i = 0; i < C; ++i) {
        for (int c = 0; c < a->cycles; ++c)
            for (size_t j = 0; j < a->nsteps[i]; ++j)
                sched[i].push_back(a->tau[i][j]);
        sched_id[i] = i;
        for (size_t k = 0; k < i; ++k)
            if (sched[k] == sched[i]) {
                sched_id[i] = k;
                break;
            }
    }
}

/* The kernels for this device, image and precision (the file's comment). */
hyprof_status_t EadpCuda::plan_kernels()
{
    int dev = 0;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    HYPROF_CUDA_CHECK(select_setup());
    f32 = a->precision != HYPROF_EADP_DOUBLE;
    /* fed_shfl_kernel: int offsets, grid y of 64 - 2 kFuseF rows a region;
     * fed_fused_kernel: grid y of kRowsD - 2 kFuseD rows. */
    const int oh = f32 ? 64 - 2 * kFuseF : kRowsD - 2 * kFuseD;
    const bool fits = (size_t)(H + oh - 1) / (size_t)oh <= 65535u &&
                      (!f32 || (double)(H + 2 * kMaxFuse) * (double)(W + 128) < (double)INT_MAX);
    fuse = !fits ? 1 : f32 ? kFuseF : kFuseD;
    shfl = f32 && fuse > 1;
    slot_u = !a->mask && shfl;
    input_out = shfl;
    const int pty = prep_ty(r);
    prep_fused = r <= kPrepMaxR && (unsigned)((H + pty - 1) / pty) <= 65535u;
    HYPROF_TRY(plan_tma());
    HYPROF_CUDA_CHECK(fed_setup(shfl, !f32 && fuse > 1));
    return HYPROF_OK;
}

/* fed_tma_kernel for the float FED on sm_90 when each chain's launch has at
 * least 3 regions per CTA (its planes' rows padded to a multiple of 4
 * floats); otherwise fed_shfl_kernel on dense planes. Sets ld and plane
 * either way. */
hyprof_status_t EadpCuda::plan_tma()
{
    ld = W;
    plane = npix;
    int gx = 0, gy = 0;
    fed_tma_grid(W, H, &gx, &gy);
    const double per_band = (double)gx * (double)gy, tiles = per_band * (double)a->bands;
    tma = shfl && cc_major >= 9 && tiles < (double)INT_MAX && tensor_map_encoder() != NULL;
    if (!tma)
        return HYPROF_OK;
    int per_sm = 0;
    HYPROF_CUDA_CHECK(fed_tma_setup(&per_sm));
    if (per_sm < 1) {
        tma = false;
        return HYPROF_OK;
    }
    tma_ctas = per_sm * (sms > 0 ? sms : 1);
    const size_t maxg = std::min(a->bands, (size_t)65534); /* plan_memory's largest group */
    const double chain_tiles =
        per_band * (double)(maxg / std::min(maxg, (size_t)kFedBranches));
    if (chain_tiles < 3.0 * tma_ctas) {
        tma = false;
        return HYPROF_OK;
    }
    ld = (W + 3) & ~3;
    plane = (size_t)ld * (size_t)H;
    return HYPROF_OK;
}

/* fed_tma_kernel's tensor maps, once the buffers exist. */
hyprof_status_t EadpCuda::make_tensor_maps()
{
    memset(tmaps, 0, sizeof tmaps);
    if (!tma)
        return HYPROF_OK;
    const float *ce = dev<float>(L.gm), *buf[7] = {ubuf<float>(0), ubuf<float>(1), NULL, NULL,
                                                    NULL, ce, ce + group * plane};
    for (size_t s = 0; s < nslots; ++s)
        buf[2 + s] = ubuf<float>(2 + (int)s);
    for (int m = 0; m < 7; ++m)
        if (buf[m] && !float_tensor_map(&tmaps[m], buf[m], (size_t)W, (size_t)H, group,
                                        (size_t)ld, plane, 64, 64))
            return hyprof__error(ctx, HYPROF_ERR_DEVICE, op,
                                 "cuTensorMapEncodeTiled failed for %d x %d x %zu floats", W, H,
                                 group);
    return HYPROF_OK;
}

/* Band groups: as many bands as fit with up to kMaxSlots output slots;
 * fewer than 3 slots only if that makes the group larger, 1 slot (no
 * copy/compute overlap) only if 2 do not fit. */
hyprof_status_t EadpCuda::plan_memory()
{
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    const size_t maxg = a->bands < 65534 ? a->bands : 65534; /* grid z: bands + 1 */
    const bool has_mask = a->mask != NULL;
    const size_t want_slots = C + 1 < (size_t)kMaxSlots ? C + 1 : (size_t)kMaxSlots;
    size_t fit[kMaxSlots + 1] = {0, 0, 0, 0};
    for (size_t ns = 1; ns <= want_slots; ++ns) {
        size_t lo = 0, hi = maxg; /* largest nb with plan_layout(nb).total <= budget */
        while (lo < hi) {
            size_t mid = lo + (hi - lo + 1) / 2;
            if (plan_layout(npix, plane, has_mask, r, mid, ns).total <= budget)
                lo = mid;
            else
                hi = mid - 1;
        }
        fit[ns] = lo;
    }
    nslots = want_slots;
    while (nslots > 2 && fit[nslots] < fit[nslots - 1])
        nslots--;
    while (nslots > 1 && fit[nslots] == 0)
        nslots--;
    group = fit[nslots];
    if (group == 0)
        return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                             "not enough device memory for one %zu x %zu band (%zu bytes "
                             "usable, %zu needed)",
                             a->width, a->height, budget,
                             plan_layout(npix, plane, has_mask, r, 1, 1).total);
    L = plan_layout(npix, plane, has_mask, r, group, nslots);
    return HYPROF_OK;
}

/* Graphs: one per (schedule, starting buffer, output slot) that occurs at
 * least twice, or with slot_u (u's slot cycles, so some keys occur once);
 * every group starts with u in buffer A, so the sequence is the same. */
void EadpCuda::plan_graphs()
{
    struct Key {
        size_t id;
        int cur, slot;
        bool operator==(const Key &o) const
        {
            return id == o.id && cur == o.cur && slot == o.slot;
        }
    };
    std::vector<Key> keys(C);
    int cur = 0;
    for (size_t i = 0; i < C; ++i) {
        const int slot = output_in_fed(sched[i].size()) ? (int)((i + 1) % nslots) : -1;
        keys[i] = {sched_id[i], cur, slot};
        cur = u_after(cur, sched[i].size(), slot);
    }
    std::vector<size_t> first_of; /* increments that get a graph */
    for (size_t i = 0; i < C; ++i) {
        size_t uses = 0, first = i;
        for (size_t j = 0; j < C; ++j)
            if (keys[j] == keys[i]) {
                uses++;
                first = j < first ? j : first;
            }
        if ((uses >= 2 || slot_u) && first == i && !sched[i].empty())
            first_of.push_back(i);
    }
    graphs = std::vector<GraphEntry>(first_of.size());
    for (size_t e = 0; e < first_of.size(); ++e) {
        graphs[e].id = keys[first_of[e]].id;
        graphs[e].cur = keys[first_of[e]].cur;
        graphs[e].slot = keys[first_of[e]].slot;
    }
}

/* The whole plan; the buffers, streams and events; the mask and weights queued. */
hyprof_status_t EadpCuda::plan()
{
    plan_schedule();
    HYPROF_TRY(plan_kernels());
    HYPROF_TRY(plan_memory());
    HYPROF_TRY(arena.alloc(ctx, op, L.total));
    HYPROF_TRY(make_tensor_maps());
    HYPROF_TRY(cs.create(ctx, op));
    HYPROF_TRY(xs.create(ctx, op));
    const size_t nbr = fed_branches(group);
    if (nbr > 1) {
        HYPROF_TRY(fork_ev.create_ordering(ctx, op));
        for (size_t j = 0; j < nbr; ++j) {
            HYPROF_TRY(bs[j].create(ctx, op));
            HYPROF_TRY(join_ev[j].create_ordering(ctx, op));
        }
    }
    for (size_t s = 0; s < nslots; ++s) {
        HYPROF_TRY(conv[s].create(ctx, op));
        HYPROF_TRY(copied[s].create(ctx, op));
    }
    if (a->mask)
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(dev<uint8_t>(L.mask), a->mask, npix,
                                          cudaMemcpyHostToDevice, cs.get()));
    HYPROF_CUDA_CHECK(cudaMemcpyAsync(dev<double>(L.w), weights.data(),
                                      weights.size() * sizeof(double), cudaMemcpyHostToDevice,
                                      cs.get()));
    plan_graphs();
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "eadp: CUDA %zu x %zu x %zu, %zu increment(s) x %d cycle(s), %zu group(s) of up "
                "to %zu band(s), %zu output slot(s), FED in %s on %s, %d step(s) per launch, "
                "%zu graph(s), %zu bytes on the device",
                a->width, a->height, a->bands, C, a->cycles, (a->bands + group - 1) / group,
                group, nslots, f32 ? "float" : "double",
                tma ? "fed_tma_kernel" : shfl ? "fed_shfl_kernel"
                : fuse > 1               ? "fed_fused_kernel"
                                         : "fed_step_kernel",
                fuse, graphs.size(), L.total);
    return HYPROF_OK;
}

/* Device stage times and the FED kernel's bandwidth, at debug level. Bytes
 * counted per FED launch: u and g read, u written, 8 bytes each per pixel
 * and band (4 in float; fed_shfl_kernel and fed_tma_kernel read u, ce and
 * cs: 16 bytes in all), what a launch must move at least (halo re-reads come
 * from L2); the unfused equivalent counts 3 values per step instead. */
void EadpCuda::report()
{
    const double fed_ms = clock.ms(kFed), peak = device_peak_gbs();
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "eadp: cuda device ms: upload %.3f, prepare %.3f, fed %.3f, output %.3f, "
                "download %.3f, span %.3f",
                clock.ms(kUpload), clock.ms(kPrepare), fed_ms, clock.ms(kOutput),
                clock.ms(kDownload), clock.span_ms());
    if (!(fed_ms > 0.0))
        return;
    const double bytes = f32 ? 12.0 : 24.0; /* u and g read, u written */
    const double gb = (shfl ? 16.0 : bytes) * fed_launch_pix / 1e9;
    const double gbs = gb / (fed_ms * 1e-3);
    const double eq = bytes * fed_step_pix / 1e9 / (fed_ms * 1e-3);
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "eadp: cuda FED bandwidth: %.0f GB/s (%.0f%% of the %.0f GB/s peak; %zu "
                "launches of up to %zu steps, %.3f GB in %.3f ms); %.0f GB/s unfused-equivalent "
                "(%.0f B per pixel and step, %s), %.3g pixel-steps/s",
                gbs, peak > 0.0 ? 100.0 * gbs / peak : 0.0, peak, fed_launches, fed_max_steps,
                gb, fed_ms, eq, bytes, f32 ? "float" : "double", fed_step_pix / (fed_ms * 1e-3));
}

} /* namespace eadp */
} /* namespace hyprof_cuda */
