/* The CUDA unmixing chain's device copy of the cube, and the abundances
 * (semantics: algorithms/unmixing/unmixing_impl.h).
 *
 * The chain (between hyprof__unmix_hold and hyprof__unmix_release) keeps one
 * device copy of the cube for all its steps when it fits in the
 * device-memory budget; otherwise each step uploads its own. The first step
 * to need it uploads it in 8 MiB chunks through page-locked staging that the
 * host fills with several threads while the DMA empties the previous chunk;
 * the homogeneity step runs on each group of bands as soon as it has
 * arrived. CUDA events time each device stage
 * (hyprof__unmix_device_seconds). The extraction (CPU) gathers its
 * candidates from the device copy.
 *
 * Abundances: one thread per pixel runs the active-set solver of lsq.h (the
 * CPU's own code) with its work arrays in local memory, templated on the
 * endmember bound (8, 16 or 32); inside a chain it runs over the device copy
 * in one launch, the output coming back through the staging; otherwise the
 * cube streams through the two-slot pipeline of cuda_util.h. M and G stay
 * on the device. */
#include "unmix_cuda.cuh"

#include "unmixing/lsq.h"

#include <mutex>
#include <vector>

namespace hyprof_unmix {

const char *const kDevNames[kDevStages] = {"upload", "homogeneity", "purity", "kmeans",
                                           "abundances", "download"};
thread_local Held g_held;

void stage_begin(int s, cudaStream_t st)
{
    Held &h = g_held;
    int dev = -1;
    if (!h.active || cudaGetDevice(&dev) != cudaSuccess)
        return;
    StageTimer &t = h.timer[s];
    if (t.open) /* begun already (the purity step's PCA, then its projection) */
        return;
    if (t.a && t.device != dev) {
        (void)cudaEventDestroy(t.a);
        (void)cudaEventDestroy(t.b);
        t = StageTimer();
    }
    if (!t.a && (cudaEventCreate(&t.a) != cudaSuccess || cudaEventCreate(&t.b) != cudaSuccess)) {
        (void)cudaGetLastError();
        return;
    }
    t.device = dev;
    t.used = false;
    t.open = cudaEventRecord(t.a, st) == cudaSuccess;
    (void)cudaGetLastError();
}

void stage_end(int s, cudaStream_t st)
{
    StageTimer &t = g_held.timer[s];
    if (g_held.active && t.open && cudaEventRecord(t.b, st) == cudaSuccess)
        t.used = true;
    t.open = false;
    (void)cudaGetLastError();
}

} /* namespace hyprof_unmix */

using namespace hyprof_unmix;

namespace {

const size_t kChunkTargetBytes = (size_t)64 << 20;

void held_free()
{
    if (!g_held.dx && !g_held.dmask)
        return;
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && g_held.device >= 0 && prev != g_held.device)
        (void)cudaSetDevice(g_held.device);
    if (g_held.dx)
        (void)cudaFree(g_held.dx);
    if (g_held.dmask)
        (void)cudaFree(g_held.dmask);
    if (prev >= 0 && prev != g_held.device)
        (void)cudaSetDevice(prev);
    (void)cudaGetLastError();
    g_held.dx = NULL;
    g_held.dmask = NULL;
}

/* ---- the upload ------------------------------------------------------------------- */

/* Page-locked staging of the upload: kStageSlots buffers of kStageBytes that
 * the host fills (several threads) while the DMA empties the previous one.
 * Pinned once for the life of the process (pinning costs more than the copy
 * it speeds up), on the device first used; one upload at a time (another
 * thread meanwhile copies from pageable memory). */
const int kStageSlots = 3;
const size_t kStageBytes = (size_t)8 << 20;

struct Staging {
    std::mutex lock;
    bool tried = false;
    int device = -1;
    void *buf[kStageSlots] = {};
    cudaEvent_t done[kStageSlots] = {};
    cudaStream_t stream = NULL;
};
Staging g_staging;

/* Sets the staging up on device dev (under its lock); false if it cannot be. */
bool staging_ready(int dev)
{
    Staging &g = g_staging;
    if (g.tried)
        return g.device == dev;
    g.tried = true;
    bool ok = cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking) == cudaSuccess;
    for (int s = 0; ok && s < kStageSlots; s++)
        ok = cudaHostAlloc(&g.buf[s], kStageBytes, cudaHostAllocPortable) == cudaSuccess &&
             cudaEventCreateWithFlags(&g.done[s], cudaEventDisableTiming) == cudaSuccess;
    if (!ok) {
        (void)cudaGetLastError();
        return false; /* what was made stays unused; device stays -1 */
    }
    g.device = dev;
    return true;
}



/* x (npix x bands, BSQ) into dst, in kStageBytes chunks through the staging;
 * the default stream waits for each chunk before what `ready` launches. */
hyprof_status_t upload_cube(hyprof_ctx_t *ctx, const char *op, const float *x, size_t npix,
                            size_t bands, float *dst, const BandsReady *ready)
{
    int dev = -1;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    std::unique_lock<std::mutex> lock(g_staging.lock, std::try_to_lock);
    const bool staged = lock.owns_lock() && staging_ready(dev);
    cudaStream_t cs = staged ? g_staging.stream : 0;
    const size_t total = npix * bands, cap = kStageBytes / sizeof(float);
    const int threads = hyprof__threads(ctx);
    size_t bands_done = 0;
    stage_begin(kDevUpload, cs);
    for (size_t off = 0, c = 0; off < total; off += cap, c++) {
        const size_t m = total - off < cap ? total - off : cap;
        if (staged) {
            const int s = (int)(c % kStageSlots);
            HYPROF_CUDA_CHECK(cudaEventSynchronize(g_staging.done[s]));
            hyprof__unmix_copy(g_staging.buf[s], x + off, m * sizeof(float), threads);
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(dst + off, g_staging.buf[s], m * sizeof(float),
                                              cudaMemcpyHostToDevice, cs));
            HYPROF_CUDA_CHECK(cudaEventRecord(g_staging.done[s], cs));
            HYPROF_CUDA_CHECK(cudaStreamWaitEvent(0, g_staging.done[s], 0));
        } else {
            HYPROF_CUDA_CHECK(cudaMemcpy(dst + off, x + off, m * sizeof(float),
                                         cudaMemcpyHostToDevice));
        }
        const size_t nb = off + m == total ? bands : (off + m) / npix;
        if (ready && nb > bands_done) {
            HYPROF_TRY((*ready)(bands_done, nb - bands_done));
            bands_done = nb;
        }
    }
    stage_end(kDevUpload, cs);
    return HYPROF_OK;
}

/* Whether the chain may keep a cube of `bytes` on the device: within the
 * device-memory budget (which $HYPROF_DEVICE_MEMORY caps). */
hyprof_status_t hold_fits(hyprof_ctx_t *ctx, const char *op, size_t bytes, bool *fits)
{
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    *fits = bytes <= budget;
    return HYPROF_OK;
}

/* ---- abundances ---------------------------------------------------------------- */

/* G sits in shared memory (the solver reads it at random); M'y and the
 * residual accumulate in registers (unrolled over MAXP) and only the
 * solver's arrays live in local memory; hyprof__lsq_solve keeps the
 * Cholesky factor between subproblems. The CPU runs the same solver. */
template <int MAXP>
__global__ void __launch_bounds__(kThreads)
abundance_kernel(const float *__restrict__ x, size_t m, const uint8_t *__restrict__ mask, int B,
                 int p, const double *__restrict__ M, const double *__restrict__ G, int method,
                 float nodata, float *__restrict__ out)
{
    __shared__ double sG[MAXP * MAXP];
    for (int t = threadIdx.x; t < p * p; t += blockDim.x)
        sG[t] = G[t];
    __syncthreads();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m)
        return;
    if (mask && !mask[i]) {
        for (int j = 0; j <= p; j++)
            out[(size_t)j * m + i] = nodata;
        return;
    }
    double acc[MAXP];
#pragma unroll
    for (int j = 0; j < MAXP; j++)
        acc[j] = 0.0;
    for (int b = 0; b < B; b++) {
        double yb = (double)x[(size_t)b * m + i];
#pragma unroll
        for (int j = 0; j < MAXP; j++)
            if (j < p)
                acc[j] += M[j * B + b] * yb;
    }
    double bv[MAXP], a[MAXP], work[MAXP * MAXP + 2 * MAXP];
    int idx[MAXP];
#pragma unroll
    for (int j = 0; j < MAXP; j++)
        if (j < p)
            bv[j] = acc[j];
    hyprof__lsq_solve(p, sG, bv, method, a, work, idx);
#pragma unroll
    for (int j = 0; j < MAXP; j++)
        acc[j] = j < p ? a[j] : 0.0;
    double r = 0.0;
    for (int b = 0; b < B; b++) {
        double s = 0.0;
#pragma unroll
        for (int j = 0; j < MAXP; j++)
            if (j < p)
                s += M[j * B + b] * acc[j];
        double d = (double)x[(size_t)b * m + i] - s;
        r += d * d;
    }
#pragma unroll
    for (int j = 0; j < MAXP; j++)
        if (j < p)
            out[(size_t)j * m + i] = (float)acc[j];
    out[(size_t)p * m + i] = (float)sqrt(r / (double)B);
}

template <int MAXP>
void launch_abundance(size_t m, cudaStream_t st, const float *x, const uint8_t *mask, int B, int p,
                      const double *M, const double *G, int method, float nodata, float *out)
{
    abundance_kernel<MAXP><<<(unsigned)div_up(m, kThreads), kThreads, 0, st>>>(
        x, m, mask, B, p, M, G, method, nodata, out);
}
__global__ void gather_kernel(const float *__restrict__ x, size_t npix, int B,
                              const unsigned long long *__restrict__ idx, size_t n,
                              float *__restrict__ D)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * (size_t)B)
        return;
    size_t i = t / B, b = t % B;
    D[t] = x[b * npix + idx[i]];
}


} /* namespace */

namespace hyprof_unmix {

/* The device copy of (x, mask) on the current device: the held one (uploaded
 * now if this is the first step to ask), or a fresh upload into own_x/own_mask.
 * `ready`, when given, is called band group by band group during an upload;
 * *uploaded tells whether this call uploaded the cube. */
hyprof_status_t device_cube(hyprof_ctx_t *ctx, const char *op, const float *x,
                            const uint8_t *mask, size_t npix, size_t bands,
                            DeviceBuffer<float> &own_x, DeviceBuffer<uint8_t> &own_mask,
                            const float **dx, const uint8_t **dmask, const BandsReady *ready,
                            bool *uploaded)
{
    int dev = -1;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    Held &h = g_held;
    if (uploaded)
        *uploaded = false;
    bool held = h.active && h.x == x && h.mask == mask && h.npix == npix && h.bands == bands;
    if (held && h.dx && h.device == dev) {
        *dx = h.dx;
        *dmask = mask ? h.dmask : NULL;
        return HYPROF_OK;
    }
    if (held && !h.dx) {
        /* First step of the chain: upload into buffers that live until release. */
        held_free();
        void *px = NULL, *pm = NULL;
        bool ok = false;
        HYPROF_TRY(hold_fits(ctx, op, npix * bands * sizeof(float) + (mask ? npix : 0), &ok));
        ok = ok && cudaMalloc(&px, npix * bands * sizeof(float)) == cudaSuccess &&
                  (!mask || cudaMalloc(&pm, npix) == cudaSuccess);
        ok = ok && (!mask || cudaMemcpy(pm, mask, npix, cudaMemcpyHostToDevice) == cudaSuccess);
        if (ok) {
            h.device = dev;
            h.dx = (float *)px;
            h.dmask = (uint8_t *)pm;
            *dx = h.dx;
            *dmask = mask ? h.dmask : NULL;
            if (uploaded)
                *uploaded = true;
            hyprof_status_t st = upload_cube(ctx, op, x, npix, bands, h.dx, ready);
            if (st != HYPROF_OK) { /* a partial copy must not serve later steps */
                held_free();
                h.active = false;
            }
            return st;
        }
        /* No room to keep it (past the budget, or the allocation failed): this
         * step uploads its own copy, as without a hold. */
        if (px)
            (void)cudaFree(px);
        if (pm)
            (void)cudaFree(pm);
        (void)cudaGetLastError();
        h.active = false;
    }
    HYPROF_TRY(own_x.alloc(ctx, op, npix * bands));
    if (mask) {
        HYPROF_TRY(own_mask.alloc(ctx, op, npix));
        HYPROF_CUDA_CHECK(cudaMemcpy(own_mask.get(), mask, npix, cudaMemcpyHostToDevice));
    }
    *dx = own_x.get();
    *dmask = mask ? own_mask.get() : NULL;
    if (uploaded)
        *uploaded = true;
    return upload_cube(ctx, op, x, npix, bands, own_x.get(), ready);
}

/* count floats from the device to the host through the page-locked staging:
 * the DMA of one chunk overlaps the host's copy (several threads) of the
 * previous one; a plain copy when the staging is busy or missing. */
hyprof_status_t download_flat(hyprof_ctx_t *ctx, const char *op, const float *src, float *dst,
                              size_t count)
{
    int dev = -1;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    std::unique_lock<std::mutex> lock(g_staging.lock, std::try_to_lock);
    if (!lock.owns_lock() || !staging_ready(dev)) {
        HYPROF_CUDA_CHECK(cudaMemcpy(dst, src, count * sizeof(float), cudaMemcpyDeviceToHost));
        return HYPROF_OK;
    }
    Staging &g = g_staging;
    const size_t cap = kStageBytes / sizeof(float), nch = div_up(count, cap);
    const int threads = hyprof__threads(ctx);
    /* The copy stream waits for what the default stream computed. */
    HYPROF_CUDA_CHECK(cudaEventRecord(g.done[0], 0));
    HYPROF_CUDA_CHECK(cudaStreamWaitEvent(g.stream, g.done[0], 0));
    stage_begin(kDevDownload, g.stream);
    for (size_t c = 0; c <= nch; c++) {
        if (c == nch)
            stage_end(kDevDownload, g.stream);
        if (c < nch) { /* queue chunk c */
            const int s = (int)(c % kStageSlots);
            const size_t off = c * cap, m = count - off < cap ? count - off : cap;
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(g.buf[s], src + off, m * sizeof(float),
                                              cudaMemcpyDeviceToHost, g.stream));
            HYPROF_CUDA_CHECK(cudaEventRecord(g.done[s], g.stream));
        }
        if (c > 0) { /* hand chunk c-1 to the host */
            const int s = (int)((c - 1) % kStageSlots);
            const size_t off = (c - 1) * cap, m = count - off < cap ? count - off : cap;
            HYPROF_CUDA_CHECK(cudaEventSynchronize(g.done[s]));
            hyprof__unmix_copy(dst + off, g.buf[s], m * sizeof(float), threads);
        }
    }
    return HYPROF_OK;
}

} /* namespace hyprof_unmix */

extern "C" void hyprof__unmix_hold(const float *x, const uint8_t *mask, size_t npix,
                                   size_t bands)
{
    held_free();
    Held &h = g_held;
    h.active = true;
    h.x = x;
    h.mask = mask;
    h.npix = npix;
    h.bands = bands;
    h.device = -1;
    for (int s = 0; s < kDevStages; s++) /* the events are kept for the next chain */
        h.timer[s].open = h.timer[s].used = false;
}

extern "C" void hyprof__unmix_release(void)
{
    held_free();
    Held &h = g_held;
    h.active = false;
    h.x = NULL;
    h.mask = NULL;
    h.npix = h.bands = 0;
    h.device = -1;
}

extern "C" int hyprof__unmix_device_seconds(char *buf, size_t size)
{
    size_t len = 0;
    int any = 0;
    if (size)
        buf[0] = '\0';
    for (int s = 0; s < kDevStages; s++) {
        const StageTimer &t = g_held.timer[s];
        float ms = 0.0f;
        if (!t.used || cudaEventSynchronize(t.b) != cudaSuccess ||
            cudaEventElapsedTime(&ms, t.a, t.b) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        if (len + 40 < size)
            len += (size_t)snprintf(buf + len, size - len, "%s%s=%.4f", any ? " " : "",
                                    kDevNames[s], ms * 1e-3);
        any = 1;
    }
    return any;
}

extern "C" int hyprof__unmix_gather(const float *x, size_t npix, size_t bands,
                                    const size_t *idx, size_t n, float *D)
{
    const Held &h = g_held;
    if (!(h.active && h.dx && h.x == x && h.npix == npix && h.bands == bands && n > 0))
        return 0;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(h.device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    /* Any failure: 0, and the caller gathers from the host (no error left). */
    void *d_idx = NULL, *d_D = NULL;
    bool ok = cudaMalloc(&d_idx, n * sizeof(unsigned long long)) == cudaSuccess &&
              cudaMalloc(&d_D, n * bands * sizeof(float)) == cudaSuccess;
    std::vector<unsigned long long> hidx(idx, idx + n);
    ok = ok && cudaMemcpy(d_idx, hidx.data(), n * sizeof(unsigned long long),
                          cudaMemcpyHostToDevice) == cudaSuccess;
    if (ok) {
        gather_kernel<<<(unsigned)div_up(n * bands, 256), 256>>>(
            h.dx, npix, (int)bands, (const unsigned long long *)d_idx, n, (float *)d_D);
        ok = cudaGetLastError() == cudaSuccess &&
             cudaMemcpy(D, d_D, n * bands * sizeof(float), cudaMemcpyDeviceToHost) ==
                 cudaSuccess;
    }
    if (d_idx)
        (void)cudaFree(d_idx);
    if (d_D)
        (void)cudaFree(d_D);
    (void)cudaGetLastError();
    if (prev >= 0)
        (void)cudaSetDevice(prev);
    return ok ? 1 : 0;
}

extern "C" hyprof_status_t hyprof__cuda_abundances(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "abundances";
    const hyprof_abund_args_t *a = (const hyprof_abund_args_t *)vargs;
    const size_t N = a->npix, B = a->bands, p = a->count;
    if (p > HYPROF_CUDA_MAX_ENDMEMBERS)
        return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                             "%zu endmembers: the CUDA solver holds at most %d per thread", p,
                             HYPROF_CUDA_MAX_ENDMEMBERS);
    hyprof__cuda_device_scope device_scope;
    HYPROF_TRY(device_scope.select(ctx, op));
    DeviceBuffer<double> d_M, d_G;
    Pipeline pipe;
    HYPROF_TRY(d_M.alloc(ctx, op, p * B));
    HYPROF_TRY(d_G.alloc(ctx, op, p * p));
    HYPROF_CUDA_CHECK(cudaMemcpy(d_M.get(), a->M, p * B * sizeof(double), cudaMemcpyHostToDevice));
    HYPROF_CUDA_CHECK(cudaMemcpy(d_G.get(), a->G, p * p * sizeof(double), cudaMemcpyHostToDevice));
    int dev = -1;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    const Held &h = g_held;
    if (h.active && h.dx && h.device == dev && h.x == a->x && h.mask == a->mask && h.npix == N &&
        h.bands == B) {
        /* The chain's cube is on the device already: one launch over all of it. */
        DeviceBuffer<float> d_out;
        HYPROF_TRY(d_out.alloc(ctx, op, N * (p + 1)));
        const uint8_t *msk = a->mask ? h.dmask : NULL;
        stage_begin(kDevAbundances, 0);
        if (p <= 8)
            launch_abundance<8>(N, 0, h.dx, msk, (int)B, (int)p, d_M.get(), d_G.get(), a->method,
                                a->nodata, d_out.get());
        else if (p <= 16)
            launch_abundance<16>(N, 0, h.dx, msk, (int)B, (int)p, d_M.get(), d_G.get(),
                                 a->method, a->nodata, d_out.get());
        else
            launch_abundance<32>(N, 0, h.dx, msk, (int)B, (int)p, d_M.get(), d_G.get(),
                                 a->method, a->nodata, d_out.get());
        HYPROF_CUDA_CHECK_LAUNCH("abundance_kernel");
        stage_end(kDevAbundances, 0);
        HYPROF_TRY(download_flat(ctx, op, d_out.get(), a->out, N * (p + 1)));
        return hyprof__progress(ctx, 1.0, op);
    }
    const size_t per_pixel = 2 * (B * sizeof(float) + 1 + (p + 1) * sizeof(float));
    size_t m = 0;
    HYPROF_TRY(plan_streamed_chunk(ctx, op, N, B, per_pixel, B > p + 1 ? B : p + 1,
                                   kChunkTargetBytes, &m));
    HYPROF_TRY(pipe.init(ctx, op, a->x, a->mask, N, B, p + 1, a->out, m, true));
    const size_t nch = pipe.nchunks();
    for (size_t i = 0; i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(pipe.acquire(ctx, op, s));
        cudaStream_t st = pipe.stream(s);
        Slot &sl = pipe.slot[s];
        HYPROF_TRY(pipe.upload(ctx, op, s, p0, mi));
        const uint8_t *msk = a->mask ? sl.mask.get() : NULL;
        if (p <= 8)
            launch_abundance<8>(mi, st, sl.in.get(), msk, (int)B, (int)p, d_M.get(), d_G.get(),
                                a->method, a->nodata, sl.out.get());
        else if (p <= 16)
            launch_abundance<16>(mi, st, sl.in.get(), msk, (int)B, (int)p, d_M.get(), d_G.get(),
                                 a->method, a->nodata, sl.out.get());
        else
            launch_abundance<32>(mi, st, sl.in.get(), msk, (int)B, (int)p, d_M.get(), d_G.get(),
                                 a->method, a->nodata, sl.out.get());
        HYPROF_CUDA_CHECK_LAUNCH("abundance_kernel");
        HYPROF_TRY(pipe.download(ctx, op, s, p0, mi));
        HYPROF_TRY(pipe.release(ctx, op, s));
        HYPROF_TRY(hyprof__progress(ctx, (double)(i + 1) / (double)nch, op));
    }
    return pipe.drain(ctx, op);
}
