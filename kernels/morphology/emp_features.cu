/* The features of the CUDA chain (kernels/morphology/emp_cuda.cuh), on each
 * share's block of image rows:
 *
 *   spectral  the input in pixel chunks (chunk_pixels in emp.cu), packed by
 *             host threads into page-locked staging (kept for the next call),
 *             copied on an upload stream while the previous chunk is
 *             transformed (kernels/wavelet/dwt.cu's kernel) on the compute
 *             stream; a caller's page-locked input goes up directly, and
 *             without staging the copies are pageable
 *   quantise  each feature's valid min and max (order-preserving integer
 *             keys, atomics: stats_kernel), pooled over the shares, then
 *             hyprof_quantise's 8-bit rule in the same double operations
 *             (quantise_kernel): the levels are the CPU's, bit for bit
 *   exchange  with several shares, each pulls its feature bands' rows from
 *             every share's quantised rows (cudaMemcpyPeerAsync: direct with
 *             peer access, else through the host). */
#include "emp_cuda.cuh"
#include "wavelet/dwt_impl.h"

#include <cub/warp/warp_reduce.cuh>
#include <cuda/functional>

namespace {

using namespace emp_cuda;

__device__ __forceinline__ unsigned ord_key(float f)
{
    const unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void stats_init_kernel(FeatStats *st, int K)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < K)
        st[k] = {0xffffffffu, 0u, ~0ull};
}

const int kStatsThreads = 256;

/* grid (blocks, K), kStatsThreads threads: the statistics of rows' pixels
 * [0, np) of feature k (f + k * np); `mask` and pixel numbers relative to
 * the share's first pixel p0. */
__global__ void stats_kernel(const float *__restrict__ f, size_t np,
                             const uint8_t *__restrict__ mask, size_t p0, FeatStats *st)
{
    const float *fk = f + (size_t)blockIdx.y * np;
    unsigned lo = 0xffffffffu, hi = 0u;
    unsigned long long bad = ~0ull;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < np;
         i += (size_t)gridDim.x * blockDim.x) {
        if (mask && !mask[i])
            continue;
        const float v = fk[i];
        if (!isfinite(v)) {
            bad = min(bad, (unsigned long long)(p0 + i));
            continue;
        }
        const unsigned key = ord_key(v);
        lo = min(lo, key);
        hi = max(hi, key);
    }
    /* the warp's extremes in lane 0 (integers: any order gives the same) */
    using Red32 = cub::WarpReduce<unsigned>;
    using Red64 = cub::WarpReduce<unsigned long long>;
    __shared__ typename Red32::TempStorage r32[kStatsThreads / 32];
    __shared__ typename Red64::TempStorage r64[kStatsThreads / 32];
    const int w = (int)(threadIdx.x >> 5);
    lo = Red32(r32[w]).Reduce(lo, cuda::minimum<>{});
    hi = Red32(r32[w]).Reduce(hi, cuda::maximum<>{});
    bad = Red64(r64[w]).Reduce(bad, cuda::minimum<>{});
    if ((threadIdx.x & 31) == 0) {
        FeatStats *s = st + blockIdx.y;
        atomicMin(&s->lo, lo);
        atomicMax(&s->hi, hi);
        if (bad != ~0ull)
            atomicMin(&s->bad, bad);
    }
}

/* grid (pixels, K): hyprof_quantise's 8-bit levels, the same double
 * operations in the same order, each rounded on its own (no contraction):
 * floor((x - min) * 255 / span + 0.5) clipped, 0 where masked or flat. */
__global__ void quantise_kernel(const float *__restrict__ f, size_t np,
                                const uint8_t *__restrict__ mask,
                                const double *__restrict__ lohi, uint8_t *__restrict__ q)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= np)
        return;
    const int k = blockIdx.y;
    const double lo = lohi[2 * k], span = __dsub_rn(lohi[2 * k + 1], lo);
    unsigned v = 0;
    if (!(mask && !mask[i]) && span > 0.0) {
        const double x = (double)f[(size_t)k * np + i];
        const double s =
            floor(__dadd_rn(__ddiv_rn(__dmul_rn(__dsub_rn(x, lo), 255.0), span), 0.5));
        v = s < 0.0 ? 0u : s > 255.0 ? 255u : (unsigned)s;
    }
    q[(size_t)k * np + i] = (uint8_t)v;
}

/* The filter of a zero-level transform (a copy): never applied. */
static const double kCopyFilter[2] = {0.0, 0.0};

} /* namespace */

namespace emp_cuda {

/* The spectral stage of the share's rows into F (features x rows' pixels):
 * chunks of pixels packed by the host into page-locked staging (three
 * slots), copied on the upload stream, transformed on the compute stream. */
hyprof_status_t EmpDevice::spectral(PoolBuffer<float> &F)
{
    const auto t0 = std::chrono::steady_clock::now();
    const size_t B = a->in_bands, K = a->bands, np = c.pixels(id), P0 = sp.r0 * a->width;
    cudaStream_t st = s.get(), us = up.get();
    HYPROF_TIMED_ALLOC(F.alloc(ctx, op, K * np));
    if (np == 0)
        return HYPROF_OK;
    constexpr int NS = 3;
    const size_t m = chunk_pixels(B, np), nch = div_up(np, m);
    chunks = nch;
    PoolBuffer<float> din[NS];
    Event loaded[NS], used[NS];
    Staging stg[NS];
    /* the caller's page-locked input goes up directly */
    const bool caller = hyprof__cuda_is_pinned(a->x) != 0;
    bool pinned = !caller;
    for (int k = 0; k < NS && (size_t)k < nch; ++k) {
        HYPROF_TIMED_ALLOC(din[k].alloc(ctx, op, m * B));
        HYPROF_TRY(loaded[k].create(ctx, op));
        HYPROF_TRY(used[k].create(ctx, op));
        if (pinned && !stg[k].take(m * B * sizeof(float), us))
            pinned = false; /* pageable copies: slower, still right */
    }
    upload_mode = caller ? "caller-pinned" : pinned ? "pinned" : "pageable";
    { /* the chunk buffers come from the compute stream's pool: the uploads wait for it */
        Event allocated;
        HYPROF_TRY(allocated.create(ctx, op));
        HYPROF_CUDA_CHECK(cudaEventRecord(allocated.get(), st));
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(us, allocated.get(), 0));
    }
    const double *lo = a->spec_levels ? a->spec_lo : kCopyFilter;
    const size_t flen = a->spec_levels ? a->spec_flen : 2;
    const auto l0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < nch; ++i) {
        const int k = (int)(i % NS);
        const size_t p0 = P0 + i * m, mi = P0 + np - p0 < m ? P0 + np - p0 : m;
        if (i >= (size_t)NS) {
            const auto w0 = std::chrono::steady_clock::now();
            if (pinned) /* the slot's staging has been copied */
                HYPROF_CUDA_CHECK(cudaEventSynchronize(loaded[k].get()));
            wait_staging_ms += ms_since(w0);
            /* and its device buffer transformed */
            HYPROF_CUDA_CHECK(cudaStreamWaitEvent(us, used[k].get(), 0));
        }
        if (pinned) {
            const auto p = std::chrono::steady_clock::now();
            hyprof__pack_cols(c.threads.pack, stg[k].get(), a->x + p0, n, mi, B, 0);
            pack_ms += ms_since(p);
            const int u = h2d.begin(us);
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(din[k].get(), stg[k].get(), mi * B * sizeof(float),
                                              cudaMemcpyHostToDevice, us));
            h2d.end(u, us);
        } else {
            const int u = h2d.begin(us);
            HYPROF_CUDA_CHECK(copy_cols_h2d(din[k].get(), mi, a->x + p0, n, mi, B, us));
            h2d.end(u, us);
        }
        HYPROF_CUDA_CHECK(cudaEventRecord(loaded[k].get(), us));
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(st, loaded[k].get(), 0));
        const int kk = k_spec.begin(st);
        HYPROF_TRY(hyprof__cuda_dwt_launch(ctx, op, din[k].get(), mi, mi, B, a->spec_levels, lo,
                                           flen, K, F.get() + (p0 - P0), np, st));
        k_spec.end(kk, st);
        HYPROF_CUDA_CHECK(cudaEventRecord(used[k].get(), st));
        if ((i & 3) == 3)
            HYPROF_TRY(cancelled());
    }
    loop_ms = ms_since(l0);
    spectral_host_ms = ms_since(t0);
    return HYPROF_OK;
}

/* Pulls the rows of the share's feature bands from every share's quantised
 * rows into q. */
hyprof_status_t EmpDevice::exchange(const DeviceBuffer<uint8_t> &qreg)
{
    cudaStream_t st = s.get();
    sp.qreg = qreg.get();
    Event done;
    HYPROF_TRY(done.create(ctx, op));
    HYPROF_CUDA_CHECK(cudaEventRecord(done.get(), st));
    sp.quantised = done.get();
    HYPROF_TRY(meet()); /* every share's rows are quantised (or queued) */
    for (size_t d = 0; d < c.sh.size(); ++d) {
        const Share &o = c.sh[d];
        const size_t npd = c.pixels(d), p0 = o.r0 * a->width;
        if (npd == 0 || nb == 0)
            continue;
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(st, o.quantised, 0));
        const int pe = peer.begin(st);
        for (size_t k = b0; k < b0 + nb; ++k)
            HYPROF_CUDA_CHECK(cudaMemcpyPeerAsync(q.get() + (k - b0) * n + p0, sp.device,
                                                  o.qreg + k * npd, o.device, npd, st));
        peer.end(pe, st);
    }
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
    return meet(); /* nobody reads another share's rows any more */
}

/* The features of the share's rows, the pooled statistics, the quantised
 * rows and, with several shares, the exchange: q holds the share's bands. */
hyprof_status_t EmpDevice::features()
{
    cudaStream_t st = s.get();
    const size_t K = a->bands, np = c.pixels(id), P0 = sp.r0 * a->width;
    const bool single = c.sh.size() == 1;
    PoolBuffer<float> F;
    DeviceBuffer<FeatStats> stats;
    DeviceBuffer<double> lohi;
    DeviceBuffer<uint8_t> qreg;
    HYPROF_TRY(spectral(F));
    HYPROF_TRY(stats.alloc(ctx, op, K));
    stats_init_kernel<<<(unsigned)div_up(K, 64), 64, 0, st>>>(stats.get(), (int)K);
    HYPROF_CUDA_CHECK_LAUNCH("stats_init_kernel");
    const uint8_t *m = a->mask ? mask.get() + P0 : NULL;
    if (np) {
        const unsigned blocks = (unsigned)(np / 8192 < 1 ? 1 : np / 8192 > 128 ? 128 : np / 8192);
        const int kq = k_quant.begin(st);
        stats_kernel<<<dim3(blocks, (unsigned)K), kStatsThreads, 0, st>>>(F.get(), np, m, P0,
                                                                         stats.get());
        HYPROF_CUDA_CHECK_LAUNCH("stats_kernel");
        k_quant.end(kq, st);
    }
    mark(1, st);
    sp.stats.resize(K);
    HYPROF_CUDA_CHECK(cudaMemcpyAsync(sp.stats.data(), stats.get(), K * sizeof(FeatStats),
                                      cudaMemcpyDeviceToHost, st));
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
    if (!single)
        HYPROF_TRY(meet()); /* every share's statistics are in */
    std::vector<double> lh;
    size_t bad_band = 0;
    unsigned long long bad_pixel = 0;
    if (!c.pooled(lh, &bad_band, &bad_pixel))
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                             "feature %zu: a value at pixel (%llu, %llu) is not finite and "
                             "not masked", bad_band + 1, bad_pixel % a->width,
                             bad_pixel / a->width);
    if (id == 0)
        memcpy(a->range, lh.data(), 2 * K * sizeof(double));
    HYPROF_TRY(lohi.alloc(ctx, op, 2 * K));
    HYPROF_CUDA_CHECK(cudaMemcpyAsync(lohi.get(), lh.data(), 2 * K * sizeof(double),
                                      cudaMemcpyHostToDevice, st));
    if (!single)
        HYPROF_TIMED_ALLOC(qreg.alloc(ctx, op, K * np));
    if (np) {
        const int kq = k_quant.begin(st);
        quantise_kernel<<<dim3((unsigned)div_up(np, 256), (unsigned)K), 256, 0, st>>>(
            F.get(), np, m, lohi.get(), single ? q.get() : qreg.get());
        HYPROF_CUDA_CHECK_LAUNCH("quantise_kernel");
        k_quant.end(kq, st);
    }
    if (!single)
        HYPROF_TRY(exchange(qreg));
    mark(2, st);
    /* lh (pageable) must outlive its copy */
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
    return HYPROF_OK;
}

} /* namespace emp_cuda */
