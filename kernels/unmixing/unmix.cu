/* CUDA backend of the unmixing steps (semantics: algorithms/unmixing/unmixing_impl.h).
 *
 * The chain (between hyprof__unmix_hold and hyprof__unmix_release) keeps one
 * device copy of the cube for all its steps. The first step to need it
 * uploads it in 8 MiB chunks through page-locked staging that the host fills
 * with several threads while the DMA empties the previous chunk; the
 * homogeneity step runs on each group of bands as soon as it has arrived.
 * CUDA events time each device stage (hyprof__unmix_device_seconds).
 *
 * - abundances: one thread per pixel runs the active-set solver of lsq.h (the
 *   CPU's own code) with its work arrays in local memory, templated on the
 *   endmember bound (8, 16 or 32); the cube streams through the two-slot
 *   pipeline of cuda_util.h (or, inside a chain, runs over its device copy in
 *   one launch, the output coming back through the staging); M and G stay on
 *   the device.
 * - homogeneity: per band a row pass and a column pass of the normalised
 *   Gaussian, the second one adding the squared difference to a per-pixel
 *   double accumulator: the row passes of a group of bands in one launch,
 *   then one thread per pixel adding the group's squared differences in band
 *   order (band by band with $HYPROF_CUDA_RESIDENT=0). Every product and sum
 *   uses __dmul_rn/__dadd_rn (no fused multiply-add), in the CPU's order, so
 *   the result is the CPU's bit for bit.
 * - purity: the PCA from the chain's device copy (masked mean, cublasDsyrk
 *   on centred chunks, cusolverDnDsyevd; the library's PCA outside a chain),
 *   projections on its skewers (one thread per pixel, sums in registers),
 *   per-component min/max reductions, weights.
 * - kmeans: the farthest-point initialisation (distances, running minimum, a
 *   first-index argmax and the new centre, step after step on the device);
 *   the assignment (one thread per pixel reading its spectrum once, the k
 *   sums in registers for k <= 32, all the centres in shared memory, same
 *   arithmetic as the CPU; a changed label marks its pixel block); the centre
 *   update in the CPU's fixed order (partial sums of HYPROF_KMEANS_BLOCK
 *   pixels by one warp per block and 32 bands, recomputed only for the marked
 *   blocks, then the blocks in order). When the centres fit in shared memory
 *   twice, a float pre-pass with rigorous error bounds leaves the exact
 *   double distances to the few centres it cannot rule out (the same labels;
 *   $HYPROF_KMEANS_F32=0 turns it off). Hamerly's bounds were tried and
 *   measured slower on the WTC bench cube: nearly every pixel failed its
 *   bound test, so the pruned pass cost as much as a full one.
 * - extraction (CPU) gathers its candidates from the device copy. */
#include "../core/cuda_util.h"

#include "unmixing/lsq.h"
#include "unmixing/unmixing_impl.h"

#include <functional>
#include <mutex>
#include <vector>

using namespace hyprof_cuda;

namespace {

const int kThreads = 128;
const size_t kChunkTargetBytes = (size_t)64 << 20;

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

/* ---- device times of the chain ------------------------------------------------ */

/* Stages timed with CUDA events between hyprof__unmix_hold and release. */
enum {
    kDevUpload = 0,
    kDevHomogeneity,
    kDevPurity,
    kDevKmeans,
    kDevAbundances,
    kDevDownload,
    kDevStages
};
const char *const kDevNames[kDevStages] = {"upload", "homogeneity", "purity", "kmeans",
                                           "abundances", "download"};

struct StageTimer {
    cudaEvent_t a = NULL, b = NULL;
    int device = -1;
    bool open = false, used = false;
};

/* ---- the held cube -------------------------------------------------------------- */

/* The cube of the running chain (hyprof__unmix_hold), uploaded by the first step
 * that needs it. Per thread, so concurrent chains in other threads keep theirs. */
struct Held {
    bool active = false;
    const float *x = NULL;
    const uint8_t *mask = NULL;
    size_t npix = 0, bands = 0;
    int device = -1;
    float *dx = NULL;
    uint8_t *dmask = NULL;
    StageTimer timer[kDevStages];
};
thread_local Held g_held;

/* Marks the start / end of a device stage on stream st (only inside a chain;
 * timing never fails a step). */
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

/* Called when bands [b0, b0+nb) of the cube are on the device (ordered before
 * any later work of the default stream): the first stage runs on them while
 * the rest uploads. */
typedef std::function<hyprof_status_t(size_t b0, size_t nb)> BandsReady;

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

/* The device copy of (x, mask) on the current device: the held one (uploaded
 * now if this is the first step to ask), or a fresh upload into own_x/own_mask.
 * `ready`, when given, is called band group by band group during an upload
 * (*uploaded = true); not at all when the held copy was there already. */
hyprof_status_t device_cube(hyprof_ctx_t *ctx, const char *op, const float *x,
                            const uint8_t *mask, size_t npix, size_t bands,
                            DeviceBuffer<float> &own_x, DeviceBuffer<uint8_t> &own_mask,
                            const float **dx, const uint8_t **dmask,
                            const BandsReady *ready = NULL, bool *uploaded = NULL)
{
    int dev = -1;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    Held &h = g_held;
    if (uploaded)
        *uploaded = false;
    bool held = h.active && h.x == x && h.mask == mask && h.npix == npix && h.bands == bands &&
                hyprof__cuda_resident_allowed();
    if (held && h.dx && h.device == dev) {
        *dx = h.dx;
        *dmask = mask ? h.dmask : NULL;
        return HYPROF_OK;
    }
    if (held && !h.dx) {
        /* First step of the chain: upload into buffers that live until release. */
        held_free();
        void *px = NULL, *pm = NULL;
        bool ok = cudaMalloc(&px, npix * bands * sizeof(float)) == cudaSuccess &&
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
        /* No room to keep it: this step uploads its own copy, as without a hold. */
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

/* ---- homogeneity ------------------------------------------------------------------- */

__device__ inline size_t reflect_idx(long i, size_t n)
{
    while (i < 0 || i >= (long)n)
        i = i < 0 ? -i - 1 : 2 * (long)n - i - 1;
    return (size_t)i;
}

/* Row pass of (m x, m) for one band. */
__global__ void rows_kernel(const float *__restrict__ xb, const uint8_t *__restrict__ mask,
                            size_t w, size_t h, const double *__restrict__ k, long r,
                            double *__restrict__ num, double *__restrict__ den)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= w * h)
        return;
    size_t y = p / w, x = p % w;
    double sn = 0.0, sd = 0.0;
    for (long j = -r; j <= r; j++) {
        size_t q = y * w + reflect_idx((long)x + j, w);
        int valid = !mask || mask[q];
        double v = valid ? (double)xb[q] : 0.0, one = valid ? 1.0 : 0.0;
        sn = __dadd_rn(sn, __dmul_rn(k[j + r], v));
        sd = __dadd_rn(sd, __dmul_rn(k[j + r], one));
    }
    num[p] = sn;
    den[p] = sd;
}

/* Column pass, then acc += (x - num/den)^2. */
__global__ void cols_acc_kernel(const float *__restrict__ xb, size_t w, size_t h,
                                const double *__restrict__ k, long r,
                                const double *__restrict__ num, const double *__restrict__ den,
                                double *__restrict__ acc)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= w * h)
        return;
    size_t y = p / w, x = p % w;
    double sn = 0.0, sd = 0.0;
    for (long j = -r; j <= r; j++) {
        size_t q = reflect_idx((long)y + j, h) * w + x;
        sn = __dadd_rn(sn, __dmul_rn(k[j + r], num[q]));
        sd = __dadd_rn(sd, __dmul_rn(k[j + r], den[q]));
    }
    double s = sd > 0.0 ? __ddiv_rn(sn, sd) : 0.0;
    double d = __dsub_rn((double)xb[p], s);
    acc[p] = __dadd_rn(acc[p], __dmul_rn(d, d));
}

/* Batched form of the two passes for G bands at once (blockIdx.y = band of
 * the group): the row pass of m x only, since the normaliser Gy*(Gx*m) is the
 * same for every band and is computed once (den2); then one thread per pixel
 * adds the group's squared differences in band order. Same operations in the
 * same order as rows_kernel + cols_acc_kernel, so the same bits. */
__global__ void rows_group_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                                  size_t w, size_t h, const double *__restrict__ k, long r,
                                  double *__restrict__ num)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = w * h;
    if (p >= n)
        return;
    const float *xb = x + (size_t)blockIdx.y * n;
    size_t y = p / w, xx = p % w;
    double sn = 0.0;
    for (long j = -r; j <= r; j++) {
        size_t q = y * w + reflect_idx((long)xx + j, w);
        double v = (!mask || mask[q]) ? (double)xb[q] : 0.0;
        sn = __dadd_rn(sn, __dmul_rn(k[j + r], v));
    }
    num[(size_t)blockIdx.y * n + p] = sn;
}

__global__ void cols_den_kernel(size_t w, size_t h, const double *__restrict__ k, long r,
                                const double *__restrict__ den, double *__restrict__ den2)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= w * h)
        return;
    size_t y = p / w, x = p % w;
    double sd = 0.0;
    for (long j = -r; j <= r; j++)
        sd = __dadd_rn(sd, __dmul_rn(k[j + r], den[reflect_idx((long)y + j, h) * w + x]));
    den2[p] = sd;
}

__global__ void cols_group_acc_kernel(const float *__restrict__ x, size_t w, size_t h,
                                      const double *__restrict__ k, long r, int G,
                                      const double *__restrict__ num,
                                      const double *__restrict__ den2, double *__restrict__ acc)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = w * h;
    if (p >= n)
        return;
    size_t y = p / w, xx = p % w;
    double a = acc[p], sd = den2[p];
    for (int g = 0; g < G; g++) {
        const double *ng = num + (size_t)g * n;
        double sn = 0.0;
        for (long j = -r; j <= r; j++)
            sn = __dadd_rn(sn, __dmul_rn(k[j + r], ng[reflect_idx((long)y + j, h) * w + xx]));
        double s = sd > 0.0 ? __ddiv_rn(sn, sd) : 0.0;
        double d = __dsub_rn((double)x[(size_t)g * n + p], s);
        a = __dadd_rn(a, __dmul_rn(d, d));
    }
    acc[p] = a;
}

__global__ void rmse_kernel(const double *__restrict__ acc, const uint8_t *__restrict__ mask,
                            size_t n, size_t B, float nodata, float *__restrict__ out)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p < n)
        out[p] = (mask && !mask[p]) ? nodata : (float)__dsqrt_rn(__ddiv_rn(acc[p], (double)B));
}

/* ---- purity ----------------------------------------------------------------------------- */

/* v[k*npix + i] = (float) sum_b V[k][b] (x_b(i) - mean_b), the sums in registers. */
template <int MAXK>
__global__ void project_kernel(const float *__restrict__ x, size_t npix, int B, int P,
                               const double *__restrict__ mean, const double *__restrict__ V,
                               float *__restrict__ v)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npix)
        return;
    double acc[MAXK];
#pragma unroll
    for (int k = 0; k < MAXK; k++)
        acc[k] = 0.0;
    for (int b = 0; b < B; b++) {
        double xb = (double)x[(size_t)b * npix + i] - mean[b];
#pragma unroll
        for (int k = 0; k < MAXK; k++)
            if (k < P)
                acc[k] += V[(size_t)k * B + b] * xb;
    }
#pragma unroll
    for (int k = 0; k < MAXK; k++)
        if (k < P)
            v[(size_t)k * npix + i] = (float)acc[k];
}

/* Per component (blockIdx.y) and block: min and max of the valid projections. */
__global__ void minmax_kernel(const float *__restrict__ v, const uint8_t *__restrict__ mask,
                              size_t npix, float *__restrict__ lo, float *__restrict__ hi)
{
    __shared__ float slo[256], shi[256];
    const float *vk = v + (size_t)blockIdx.y * npix;
    float l = INFINITY, h = -INFINITY;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x)
        if (!mask || mask[i]) {
            l = fminf(l, vk[i]);
            h = fmaxf(h, vk[i]);
        }
    slo[threadIdx.x] = l;
    shi[threadIdx.x] = h;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            slo[threadIdx.x] = fminf(slo[threadIdx.x], slo[threadIdx.x + s]);
            shi[threadIdx.x] = fmaxf(shi[threadIdx.x], shi[threadIdx.x + s]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        lo[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = slo[0];
        hi[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = shi[0];
    }
}

__global__ void weights_kernel(const float *__restrict__ v, const uint8_t *__restrict__ mask,
                               size_t npix, int P, const double *__restrict__ lohi, double theta,
                               float *__restrict__ out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npix)
        return;
    float s = 0.0f;
    for (int k = 0; k < P && (!mask || mask[i]); k++) {
        double lo = lohi[2 * k], hi = lohi[2 * k + 1];
        double mid = 0.5 * (lo + hi), half = 0.5 * (hi - lo);
        double w = half > 0.0 ? fabs((double)v[(size_t)k * npix + i] - mid) / half : 0.0;
        if (half > 0.0 && w >= theta)
            s += (float)w;
    }
    out[i] = (float)(rint((double)s * 1e5) * 1e-5);
}

/* ---- K-means ---------------------------------------------------------------------------- */

__device__ inline double sqdist_dev(const float *__restrict__ x, size_t npix, size_t i, int B,
                                    const double *__restrict__ c)
{
    double d = 0.0;
#pragma unroll 8
    for (int b = 0; b < B; b++) {
        double t = __dsub_rn((double)x[(size_t)b * npix + i], c[b]);
        d = __dadd_rn(d, __dmul_rn(t, t));
    }
    return d;
}

/* One step of the farthest-point initialisation: mind = d (j <= 1) or
 * min(mind, d) with d the squared distance to ref; -1 for masked pixels. */
__global__ void mind_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                            size_t npix, int B, const double *__restrict__ ref, size_t j,
                            double *__restrict__ mind)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npix)
        return;
    if (mask && !mask[i]) {
        mind[i] = -1.0;
        return;
    }
    double d = sqdist_dev(x, npix, i, B, ref);
    if (j <= 1 || d < mind[i])
        mind[i] = d;
}

/* The first index of the largest value: per block, then over blocks on the host. */
__device__ inline void better(double &v, unsigned long long &i, double v2, unsigned long long i2)
{
    if (v2 > v || (v2 == v && i2 < i)) {
        v = v2;
        i = i2;
    }
}

const int kArgmaxThreads = 256, kArgmaxBlocks = 512;

__global__ void argmax_kernel(const double *__restrict__ v, size_t n, double *__restrict__ bv,
                              unsigned long long *__restrict__ bi)
{
    __shared__ double sv[kArgmaxThreads / 32];
    __shared__ unsigned long long si[kArgmaxThreads / 32];
    double best = -2.0;
    unsigned long long idx = ~0ull;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        better(best, idx, v[i], i);
    for (int off = 16; off > 0; off >>= 1) {
        double ov = __shfl_down_sync(0xffffffffu, best, off);
        unsigned long long oi = __shfl_down_sync(0xffffffffu, idx, off);
        better(best, idx, ov, oi);
    }
    if ((threadIdx.x & 31) == 0) {
        sv[threadIdx.x >> 5] = best;
        si[threadIdx.x >> 5] = idx;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kArgmaxThreads / 32; w++)
            better(best, idx, sv[w], si[w]);
        bv[blockIdx.x] = best;
        bi[blockIdx.x] = idx;
    }
}

__global__ void fill_labels_kernel(const uint8_t *__restrict__ mask, size_t npix, int32_t valid,
                                   int32_t *__restrict__ labels)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < npix)
        labels[i] = (mask && !mask[i]) ? -1 : valid;
}

/* Nearest centre: the cube is read once (bands outer), the k running sums
 * stay in registers (MAXK <= 32); each sum still runs over b in increasing
 * order, as the CPU's. The centres sit in shared memory, band-major (all of
 * them when they fit, else `tb` bands at a time), one broadcast load per
 * centre and band; the count of changed labels is one atomic per warp, and
 * a changed label marks its pixel block dirty (its centre sums must be
 * recomputed). */
const int kAssignThreads = 256;
const size_t kAssignSmem = (size_t)96 << 10; /* bytes of centres in shared memory at most */

template <int MAXK>
__global__ void __launch_bounds__(kAssignThreads)
assign_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, size_t npix, int B,
              int k, int tb, const double *__restrict__ Ct, int32_t *__restrict__ labels,
              double *__restrict__ dist, unsigned long long *__restrict__ changed,
              uint8_t *__restrict__ dirty)
{
    extern __shared__ double cs[]; /* tb x MAXK */
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool in = i < npix, live = in && !(mask && !mask[i]);
    double d[MAXK];
#pragma unroll
    for (int c = 0; c < MAXK; c++)
        d[c] = 0.0;
    for (int b0 = 0; b0 < B; b0 += tb) {
        int nb = B - b0 < tb ? B - b0 : tb;
        if (b0)
            __syncthreads();
        for (int t = threadIdx.x; t < nb * k; t += blockDim.x) /* Ct: band-major, coalesced */
            cs[(t / k) * MAXK + t % k] = Ct[(size_t)b0 * k + t];
        __syncthreads();
        if (!live)
            continue;
        for (int bb = 0; bb < nb; bb++) {
            double xb = (double)x[(size_t)(b0 + bb) * npix + i];
            const double *cb = cs + bb * MAXK;
#pragma unroll
            for (int c = 0; c < MAXK; c++)
                if (c < k) {
                    double t = __dsub_rn(xb, cb[c]);
                    d[c] = __dadd_rn(d[c], __dmul_rn(t, t));
                }
        }
    }
    double best = d[0];
    int32_t lab = 0;
#pragma unroll
    for (int c = 1; c < MAXK; c++)
        if (c < k && d[c] < best) {
            best = d[c];
            lab = c;
        }
    if (!live)
        lab = -1, best = 0.0;
    bool moved = in && labels[i] != lab;
    unsigned vote = __ballot_sync(0xffffffffu, moved);
    if ((threadIdx.x & 31) == 0 && vote)
        atomicAdd(changed, (unsigned long long)__popc(vote));
    if (moved)
        dirty[i / HYPROF_KMEANS_BLOCK] = 1;
    if (in) {
        labels[i] = lab;
        dist[i] = best;
    }
}

/* The same assignment with a float pre-pass, when all the centres fit in
 * shared memory twice (double and float): first every distance in float,
 * with a rigorous bound of its error, then the exact double distances (the
 * CPU's arithmetic) only to the centres that the bounds cannot rule out.
 * With u = 2^-24, cf = float(c) and t = fl(x - cf): |t| lies within
 * (1 +- u)(|x - c| -+ u|c|), and the float sum of the t^2 (fused
 * multiply-adds) within (1 +- g) of the exact one, g = 2(B+4)u (twice the
 * classical bound); by Minkowski the true distance r = ||x - c|| lies in
 *   [sqrt(s / ((1+g)(1+u)^2)) - u||c||, sqrt(s / ((1-g)(1-u)^2)) + u||c||]
 * for the float sum s (evaluated in double, widened by 1e-12). A centre
 * whose lower bound exceeds the smallest upper bound by a factor 1 + 1e-9
 * (far above the double sums' rounding) is strictly farther, in the exact
 * arithmetic too, than the centre of that upper bound; the others get the
 * exact distance and the first smallest wins, as in the full computation. */
template <int MAXK>
__global__ void __launch_bounds__(kAssignThreads)
assign_f32_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, size_t npix,
                  int B, int k, const double *__restrict__ Ct, const double *__restrict__ cnorm,
                  int32_t *__restrict__ labels, double *__restrict__ dist,
                  unsigned long long *__restrict__ changed, uint8_t *__restrict__ dirty)
{
    static_assert(MAXK % 4 == 0, "the centres are read as float4");
    extern __shared__ double cs[]; /* B x MAXK doubles, then B x MAXK floats */
    float *cf = (float *)(cs + (size_t)B * MAXK);
    for (int t = threadIdx.x; t < B * k; t += blockDim.x) {
        double v = Ct[t];
        cs[(t / k) * MAXK + t % k] = v;
        cf[(t / k) * MAXK + t % k] = (float)v;
    }
    __syncthreads();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool in = i < npix, live = in && !(mask && !mask[i]);
    double best = 0.0;
    int32_t lab = -1;
    if (live) {
        float s[MAXK];
#pragma unroll
        for (int c = 0; c < MAXK; c++)
            s[c] = 0.0f;
        /* The centres of a band come as float4 (one shared-memory load for
         * four centres, all threads of the warp at the same address): with a
         * load for every centre the loop was bound by the loads, not the
         * arithmetic. The arithmetic, and so every bound below, is the same. */
        for (int b = 0; b < B; b++) {
            float xb = x[(size_t)b * npix + i];
            const float4 *cb = reinterpret_cast<const float4 *>(cf + b * MAXK);
#pragma unroll
            for (int c4 = 0; c4 < MAXK / 4; c4++) {
                const float4 v = cb[c4];
                const float cv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (4 * c4 + j < k) {
                        float t = xb - cv[j];
                        s[4 * c4 + j] = fmaf(t, t, s[4 * c4 + j]);
                    }
            }
        }
        const double u = 5.9604644775390625e-08, g = 2.0 * (B + 4) * u;
        const double khi = (1.0 + 1e-12) / ((1.0 - g) * (1.0 - u) * (1.0 - u));
        const double klo = (1.0 - 1e-12) / ((1.0 + g) * (1.0 + u) * (1.0 + u));
        double lo[MAXK], m = INFINITY;
#pragma unroll
        for (int c = 0; c < MAXK; c++)
            if (c < k) {
                double sc = (double)s[c], cu = u * cnorm[c];
                double hi = (sqrt(sc * khi) + cu) * (1.0 + 1e-12);
                lo[c] = (sqrt(sc * klo) - cu) * (1.0 - 1e-12);
                m = hi < m ? hi : m;
            }
        unsigned cand = 0;
#pragma unroll
        for (int c = 0; c < MAXK; c++)
            if (c < k && !(lo[c] > m * (1.0 + 1e-9)))
                cand |= 1u << c;
        if (!(cand & (cand - 1))) { /* one candidate: it is the nearest */
            lab = __ffs(cand) - 1;
            best = -1.0; /* not computed (only the last, full assignment fills dist) */
        } else { /* the exact distance to each candidate, in increasing order */
            best = INFINITY;
            while (cand) {
                const int c = __ffs(cand) - 1;
                cand &= cand - 1;
                double dc = 0.0;
                for (int b = 0; b < B; b++) {
                    double t = __dsub_rn((double)x[(size_t)b * npix + i], cs[b * MAXK + c]);
                    dc = __dadd_rn(dc, __dmul_rn(t, t));
                }
                if (dc < best) {
                    best = dc;
                    lab = c;
                }
            }
        }
    }
    bool moved = in && labels[i] != lab;
    unsigned vote = __ballot_sync(0xffffffffu, moved);
    if ((threadIdx.x & 31) == 0 && vote)
        atomicAdd(changed, (unsigned long long)__popc(vote));
    if (moved)
        dirty[i / HYPROF_KMEANS_BLOCK] = 1;
    if (in) {
        labels[i] = lab;
        dist[i] = best;
    }
}

/* cnorm[c] = ||C[c]|| (double), widened by 1e-12: the float pre-pass's bound. */
__global__ void cnorm_kernel(const double *__restrict__ C, int B, double *__restrict__ cnorm)
{
    const double *c = C + (size_t)blockIdx.x * B;
    double s = 0.0;
    for (int b = threadIdx.x; b < B; b += 32)
        s += c[b] * c[b];
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, off);
    if (threadIdx.x == 0)
        cnorm[blockIdx.x] = sqrt(s) * (1.0 + 1e-12);
}

/* More than 32 centres: the sums in local memory, the centres from global. */
__global__ void assign_many_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                                   size_t npix, int B, int k, const double *__restrict__ C,
                                   int32_t *__restrict__ labels, double *__restrict__ dist,
                                   unsigned long long *__restrict__ changed,
                                   uint8_t *__restrict__ dirty)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npix)
        return;
    if (mask && !mask[i]) {
        labels[i] = -1;
        dist[i] = 0.0;
        return;
    }
    double d[HYPROF_MAX_ENDMEMBERS];
    for (int c = 0; c < k; c++)
        d[c] = 0.0;
    for (int b = 0; b < B; b++) {
        double xb = (double)x[(size_t)b * npix + i];
        for (int c = 0; c < k; c++) {
            double t = __dsub_rn(xb, C[(size_t)c * B + b]);
            d[c] = __dadd_rn(d[c], __dmul_rn(t, t));
        }
    }
    double best = d[0];
    int32_t lab = 0;
    for (int c = 1; c < k; c++)
        if (d[c] < best) {
            best = d[c];
            lab = c;
        }
    if (labels[i] != lab) {
        atomicAdd(changed, 1ull);
        dirty[i / HYPROF_KMEANS_BLOCK] = 1;
    }
    labels[i] = lab;
    dist[i] = best;
}

/* Cluster sizes: a shared-memory histogram per block, then one atomic per
 * block and cluster (one global atomic per pixel serialised on k addresses). */
__global__ void count_kernel(const int32_t *__restrict__ labels, size_t npix, int k,
                             unsigned long long *__restrict__ cnt)
{
    extern __shared__ unsigned int hist[];
    for (int c = threadIdx.x; c < k; c += blockDim.x)
        hist[c] = 0;
    __syncthreads();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npix;
         i += (size_t)gridDim.x * blockDim.x)
        if (labels[i] >= 0)
            atomicAdd(&hist[labels[i]], 1u);
    __syncthreads();
    for (int c = threadIdx.x; c < k; c += blockDim.x)
        if (hist[c])
            atomicAdd(&cnt[c], (unsigned long long)hist[c]);
}

/* part[(blk*B + b)*k + c]: sum of band b over the pixels of cluster c in block
 * blk, pixels in order. One warp per pixel block and group of 32 bands (lane =
 * band): a 32 x 32 tile of the cube at a time goes through shared memory with
 * coalesced loads (the next tile's loads issued before the current one is
 * added, so their latency hides behind the additions), each lane adding its
 * band's values into its own k sums in pixel order (the CPU's order); lane j
 * holds the label of the tile's pixel j. Blocks whose labels did not change
 * since their last sums (dirty[blk] == 0) are skipped: the same numbers. */
const int kPartialBands = 32, kPartialTile = 32;

__global__ void __launch_bounds__(32)
partial_kernel(const float *__restrict__ x, const int32_t *__restrict__ labels, size_t npix,
               int B, int k, const uint8_t *__restrict__ dirty, double *__restrict__ part)
{
    if (dirty && !dirty[blockIdx.x])
        return;
    extern __shared__ double sums[]; /* k x 32 */
    __shared__ float tile[kPartialBands][kPartialTile + 1];
    const int lane = threadIdx.x;
    const size_t blk = blockIdx.x, p0 = blk * HYPROF_KMEANS_BLOCK;
    const int b0 = blockIdx.y * kPartialBands, b = b0 + lane;
    const int nb = B - b0 < kPartialBands ? B - b0 : kPartialBands;
    size_t p1 = p0 + HYPROF_KMEANS_BLOCK;
    p1 = p1 < npix ? p1 : npix;
    const int n = (int)(p1 - p0);
    for (int c = 0; c < k; c++)
        sums[c * 32 + lane] = 0.0;
    float next[kPartialBands];
    int32_t nlab = -1;
#pragma unroll
    for (int r = 0; r < kPartialBands; r++)
        next[r] = (r < nb && lane < n) ? x[(size_t)(b0 + r) * npix + p0 + lane] : 0.0f;
    if (lane < n)
        nlab = labels[p0 + lane];
    for (int t0 = 0; t0 < n; t0 += kPartialTile) {
        const int m = n - t0 < kPartialTile ? n - t0 : kPartialTile;
        __syncwarp();
#pragma unroll
        for (int r = 0; r < kPartialBands; r++)
            tile[r][lane] = next[r];
        const int32_t mylab = nlab;
        __syncwarp();
        const int t1 = t0 + kPartialTile; /* prefetch the next tile */
        if (t1 < n) {
            const bool ok = t1 + lane < n;
#pragma unroll
            for (int r = 0; r < kPartialBands; r++)
                next[r] = (r < nb && ok) ? x[(size_t)(b0 + r) * npix + p0 + t1 + lane] : 0.0f;
            nlab = ok ? labels[p0 + t1 + lane] : -1;
        }
        for (int j = 0; j < m; j++) {
            int32_t l = __shfl_sync(0xffffffffu, mylab, j);
            if (l >= 0 && lane < nb)
                sums[l * 32 + lane] = __dadd_rn(sums[l * 32 + lane], (double)tile[lane][j]);
        }
    }
    if (lane < nb)
        for (int c = 0; c < k; c++)
            part[(blk * B + b) * k + c] = sums[c * 32 + lane];
}

/* C[c][b] = (sum over blocks, in order, of part) / cnt[c]; the loads of eight
 * blocks are issued before their (ordered) additions. */
__global__ void centre_kernel(const double *__restrict__ part, const unsigned long long *cnt,
                              int B, int k, size_t nblk, double *__restrict__ C,
                              double *__restrict__ Ct)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)B * k)
        return;
    size_t b = t / k, c = t % k, stride = (size_t)B * k;
    const double *q = part + b * k + c;
    double s = 0.0;
    size_t blk = 0;
    for (; blk + 8 <= nblk; blk += 8) {
        double v[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = q[(blk + u) * stride];
#pragma unroll
        for (int u = 0; u < 8; u++)
            s = __dadd_rn(s, v[u]);
    }
    for (; blk < nblk; blk++)
        s = __dadd_rn(s, q[blk * stride]);
    if (cnt[c]) {
        double v = __ddiv_rn(s, (double)cnt[c]);
        C[c * B + b] = v;
        if (Ct) /* band-major copy for the assignment */
            Ct[b * k + c] = v;
    }
}

/* Ct[b*k + c] = C[c*B + b]. */
__global__ void transpose_centres_kernel(const double *__restrict__ C, int B, int k,
                                         double *__restrict__ Ct)
{
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < (size_t)B * k)
        Ct[t] = C[(t % k) * B + t / k];
}

/* Device state of one K-means run. */
struct KMeansDev {
    DeviceBuffer<float> own_x;
    DeviceBuffer<uint8_t> own_mask;
    const float *x = NULL;
    const uint8_t *mask = NULL; /* NULL without a mask */
    DeviceBuffer<double> C, Ct, dist, part, ref, bv; /* Ct: C band-major */
    DeviceBuffer<unsigned long long> bi;
    DeviceBuffer<int32_t> labels;
    DeviceBuffer<unsigned long long> cnt, changed;
    DeviceBuffer<uint8_t> dirty; /* per pixel block: a label changed since its sums */
    DeviceBuffer<double> cnorm;  /* the float pre-pass: the centres' norms */
    bool fast = false;           /* the float pre-pass ($HYPROF_KMEANS_F32=0: off) */
    const hyprof_kmeans_args_t *a;
    size_t nblk;
};

/* Centres as the means of their pixels. With `all`, every block's partial
 * sums (the mean spectrum, k = 1, and the first update); otherwise only the
 * dirty blocks', the others' being the same numbers as last time. */
hyprof_status_t update_dev(hyprof_ctx_t *ctx, const char *op, KMeansDev &d, int k, double *C,
                           bool all)
{
    const hyprof_kmeans_args_t *a = d.a;
    const int B = (int)a->bands;
    HYPROF_CUDA_CHECK(cudaMemset(d.cnt.get(), 0, k * sizeof(unsigned long long)));
    unsigned nb = (unsigned)div_up(a->npix, 256);
    nb = nb > 1024 ? 1024 : nb;
    count_kernel<<<nb, 256, (size_t)k * sizeof(unsigned int)>>>(d.labels.get(), a->npix, k,
                                                                 d.cnt.get());
    HYPROF_CUDA_CHECK_LAUNCH("count_kernel");
    const size_t smem = (size_t)k * 32 * sizeof(double);
    if (smem > 32 * 1024) /* with the static tile, past the default 48 KiB */
        HYPROF_CUDA_CHECK(cudaFuncSetAttribute(partial_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem));
    partial_kernel<<<dim3((unsigned)d.nblk, (unsigned)div_up(B, kPartialBands)), 32, smem>>>(
        d.x, d.labels.get(), a->npix, B, k, all ? NULL : d.dirty.get(), d.part.get());
    HYPROF_CUDA_CHECK_LAUNCH("partial_kernel");
    centre_kernel<<<(unsigned)div_up((size_t)B * k, 128), 128>>>(
        d.part.get(), d.cnt.get(), B, k, d.nblk, C, C == d.C.get() ? d.Ct.get() : NULL);
    HYPROF_CUDA_CHECK_LAUNCH("centre_kernel");
    HYPROF_CUDA_CHECK(cudaMemsetAsync(d.dirty.get(), 0, d.nblk, 0));
    return HYPROF_OK;
}

template <int MAXK>
hyprof_status_t launch_assign(hyprof_ctx_t *ctx, const char *op, KMeansDev &d, bool exact)
{
    const hyprof_kmeans_args_t *a = d.a;
    const int B = (int)a->bands, k = (int)a->k;
    const size_t smem2 = (size_t)B * MAXK * (sizeof(double) + sizeof(float));
    if (!exact && d.fast && smem2 <= kAssignSmem) { /* the float pre-pass */
        cnorm_kernel<<<k, 32>>>(d.C.get(), B, d.cnorm.get());
        HYPROF_CUDA_CHECK_LAUNCH("cnorm_kernel");
        if (smem2 > 48 * 1024)
            HYPROF_CUDA_CHECK(cudaFuncSetAttribute(assign_f32_kernel<MAXK>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)smem2));
        assign_f32_kernel<MAXK>
            <<<(unsigned)div_up(a->npix, kAssignThreads), kAssignThreads, smem2>>>(
                d.x, d.mask, a->npix, B, k, d.Ct.get(), d.cnorm.get(), d.labels.get(),
                d.dist.get(), d.changed.get(), d.dirty.get());
        HYPROF_CUDA_CHECK_LAUNCH("assign_f32_kernel");
        return HYPROF_OK;
    }
    size_t tb = kAssignSmem / (MAXK * sizeof(double));
    tb = tb > (size_t)B ? (size_t)B : tb;
    const size_t smem = tb * MAXK * sizeof(double);
    if (smem > 48 * 1024)
        HYPROF_CUDA_CHECK(cudaFuncSetAttribute(assign_kernel<MAXK>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem));
    assign_kernel<MAXK><<<(unsigned)div_up(a->npix, kAssignThreads), kAssignThreads, smem>>>(
        d.x, d.mask, a->npix, B, k, (int)tb, d.Ct.get(), d.labels.get(), d.dist.get(),
        d.changed.get(), d.dirty.get());
    HYPROF_CUDA_CHECK_LAUNCH("assign_kernel");
    return HYPROF_OK;
}

/* Every pixel's nearest centre; `changed` gets the number of labels that
 * changed. `exact`: every distance in double (dist filled for every pixel:
 * the last assignment); else the float pre-pass where it applies (the same
 * labels; dist only where two centres had to be compared). */
hyprof_status_t assign_dev(hyprof_ctx_t *ctx, const char *op, KMeansDev &d,
                           unsigned long long *changed, bool exact)
{
    const hyprof_kmeans_args_t *a = d.a;
    HYPROF_CUDA_CHECK(cudaMemset(d.changed.get(), 0, sizeof(unsigned long long)));
    const int k = (int)a->k;
    if (k <= 8)
        HYPROF_TRY(launch_assign<8>(ctx, op, d, exact));
    else if (k <= 16)
        HYPROF_TRY(launch_assign<16>(ctx, op, d, exact));
    else if (k <= 32)
        HYPROF_TRY(launch_assign<32>(ctx, op, d, exact));
    else {
        assign_many_kernel<<<(unsigned)div_up(a->npix, kThreads), kThreads>>>(
            d.x, d.mask, a->npix, (int)a->bands, k, d.C.get(), d.labels.get(), d.dist.get(),
            d.changed.get(), d.dirty.get());
        HYPROF_CUDA_CHECK_LAUNCH("assign_many_kernel");
    }
    HYPROF_CUDA_CHECK(cudaMemcpy(changed, d.changed.get(), sizeof *changed,
                                 cudaMemcpyDeviceToHost));
    return HYPROF_OK;
}

/* One block: the first index of the largest value over the argmax partials
 * (the host loop's rule, as a tree), best[j] = that pixel (npix when no
 * pixel is valid), and its spectrum as centre j, the next step's reference. */
__global__ void pick_kernel(const double *__restrict__ bv, const unsigned long long *__restrict__ bi,
                            int nb, const float *__restrict__ x, size_t npix, int B, int j,
                            double *__restrict__ C, unsigned long long *__restrict__ best)
{
    __shared__ double sv[256];
    __shared__ unsigned long long si[256];
    __shared__ unsigned long long pick;
    double v = -2.0;
    unsigned long long i = ~0ull;
    for (int t = threadIdx.x; t < nb; t += blockDim.x)
        better(v, i, bv[t], bi[t]);
    sv[threadIdx.x] = v;
    si[threadIdx.x] = i;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) {
            double v2 = sv[threadIdx.x + h];
            unsigned long long i2 = si[threadIdx.x + h];
            if (v2 > sv[threadIdx.x] || (v2 == sv[threadIdx.x] && i2 < si[threadIdx.x])) {
                sv[threadIdx.x] = v2;
                si[threadIdx.x] = i2;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        pick = (sv[0] >= 0.0 && si[0] < npix) ? si[0] : npix;
        best[j] = pick;
    }
    __syncthreads();
    for (int b = threadIdx.x; pick < npix && b < B; b += blockDim.x)
        C[(size_t)j * B + b] = (double)x[(size_t)b * npix + pick];
}

/* hyprof__kmeans_init's farthest-point steps (kmeans.c: the same rule, the
 * same arithmetic) without a round trip to the host a step: the distances
 * and running minimum, the argmax and the new centre stay on the device;
 * the k chosen pixels come back at the end. */
hyprof_status_t init_dev(hyprof_ctx_t *ctx, const char *op, KMeansDev &d)
{
    hyprof_kmeans_args_t *a = (hyprof_kmeans_args_t *)d.a;
    const size_t n = a->npix, B = a->bands, k = a->k;
    DeviceBuffer<unsigned long long> d_best;
    HYPROF_TRY(d_best.alloc(ctx, op, k));
    unsigned nb = (unsigned)div_up(n, kArgmaxThreads);
    nb = nb > (unsigned)kArgmaxBlocks ? (unsigned)kArgmaxBlocks : nb;
    const double *ref = d.ref.get(); /* the mean spectrum first */
    for (size_t j = 0; j < k; j++) {
        mind_kernel<<<(unsigned)div_up(n, kThreads), kThreads>>>(d.x, d.mask, n, (int)B, ref, j,
                                                                 d.dist.get());
        HYPROF_CUDA_CHECK_LAUNCH("mind_kernel");
        argmax_kernel<<<nb, kArgmaxThreads>>>(d.dist.get(), n, d.bv.get(), d.bi.get());
        HYPROF_CUDA_CHECK_LAUNCH("argmax_kernel");
        pick_kernel<<<1, 256>>>(d.bv.get(), d.bi.get(), (int)nb, d.x, n, (int)B, (int)j,
                                d.C.get(), d_best.get());
        HYPROF_CUDA_CHECK_LAUNCH("pick_kernel");
        ref = d.C.get() + j * B;
    }
    std::vector<unsigned long long> best(k);
    HYPROF_CUDA_CHECK(cudaMemcpy(best.data(), d_best.get(), k * sizeof(unsigned long long),
                                 cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < k; j++) {
        if (best[j] >= n)
            return hyprof__error(ctx, HYPROF_ERR_INTERNAL, "kmeans", "no valid pixel to start from");
        a->init[j] = (size_t)best[j];
    }
    return HYPROF_OK;
}

/* ---- candidates and outputs ------------------------------------------------------ */

/* D[i*B + b] = x[b*npix + idx[i]]: one thread per value, b fastest. */
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

/* ---- the purity step's PCA on the device ------------------------------------------- */

/* cuBLAS and cuSOLVER handles of this thread, kept between calls (creating
 * them costs more than the work they do here). */
struct Handles {
    int device = -1;
    cublasHandle_t blas = NULL;
    cusolverDnHandle_t solver = NULL;
};
thread_local Handles g_handles;

hyprof_status_t get_handles(hyprof_ctx_t *ctx, const char *op, Handles **out)
{
    int dev = -1;
    HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
    Handles &h = g_handles;
    if (h.device != dev) {
        if (h.blas)
            (void)cublasDestroy(h.blas);
        if (h.solver)
            (void)cusolverDnDestroy(h.solver);
        h = Handles();
    }
    if (!h.blas) {
        HYPROF_CUBLAS_CHECK(cublasCreate(&h.blas));
        HYPROF_CUBLAS_CHECK(cublasSetMathMode(h.blas, CUBLAS_DEFAULT_MATH)); /* plain FP64 */
        HYPROF_CUBLAS_CHECK(cublasSetPointerMode(h.blas, CUBLAS_POINTER_MODE_HOST));
    }
    if (!h.solver)
        HYPROF_CUSOLVER_CHECK(cusolverDnCreate(&h.solver));
    h.device = dev;
    *out = &h;
    return HYPROF_OK;
}

/* mean[b] = (sum over valid pixels of band b, in double) / nvalid; one block a band. */
__global__ void band_mean_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                                 size_t npix, double nvalid, double *__restrict__ mean)
{
    __shared__ double part[256];
    const float *xb = x + (size_t)blockIdx.x * npix;
    double s = 0.0;
    for (size_t i = threadIdx.x; i < npix; i += blockDim.x)
        if (!mask || mask[i])
            s += (double)xb[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        mean[blockIdx.x] = part[0] / nvalid;
}

/* xc (m x B, column-major) = pixels [p0, p0+m) centred, in double; masked rows 0. */
__global__ void centre_rows_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask,
                                   size_t npix, size_t p0, size_t m,
                                   const double *__restrict__ mean, double *__restrict__ xc)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (i >= m)
        return;
    bool valid = !mask || mask[p0 + i];
    xc[b * m + i] = valid ? (double)x[b * npix + p0 + i] - mean[b] : 0.0;
}

/* The PCA of hyprof_pca_fit (mean, covariance / (nvalid - 1), eigenvectors by
 * decreasing eigenvalue, largest-magnitude loading positive) from the device
 * copy: centred chunks into cublasDsyrk, cusolverDnDsyevd; only the mean, the
 * eigenvalues and the eigenvectors come back. */
hyprof_status_t pca_dev(hyprof_ctx_t *ctx, const float *dx, const uint8_t *dmask, size_t npix,
                        size_t B, size_t nvalid, size_t p, double *mean, double *vectors,
                        double *total)
{
    static const char op[] = "sspp";
    hyprof__cuda_device_scope device_scope;
    HYPROF_TRY(device_scope.select(ctx, op));
    stage_begin(kDevPurity, 0);
    Handles *hd = NULL;
    HYPROF_TRY(get_handles(ctx, op, &hd));
    const size_t m = npix < 65536 ? npix : 65536;
    DeviceBuffer<double> d_mean, d_xc, d_C, d_W, d_work;
    DeviceBuffer<int> d_info;
    HYPROF_TRY(d_mean.alloc(ctx, op, B));
    HYPROF_TRY(d_xc.alloc(ctx, op, m * B));
    HYPROF_TRY(d_C.alloc(ctx, op, B * B));
    HYPROF_TRY(d_W.alloc(ctx, op, B));
    HYPROF_TRY(d_info.alloc(ctx, op, 1));
    band_mean_kernel<<<(unsigned)B, 256>>>(dx, dmask, npix, (double)nvalid, d_mean.get());
    HYPROF_CUDA_CHECK_LAUNCH("band_mean_kernel");
    const double one = 1.0;
    for (size_t p0 = 0; p0 < npix; p0 += m) {
        const size_t mi = npix - p0 < m ? npix - p0 : m;
        const double beta = p0 ? 1.0 : 0.0;
        centre_rows_kernel<<<dim3((unsigned)div_up(mi, 256), (unsigned)B), 256>>>(
            dx, dmask, npix, p0, mi, d_mean.get(), d_xc.get());
        HYPROF_CUDA_CHECK_LAUNCH("centre_rows_kernel");
        HYPROF_CUBLAS_CHECK(cublasDsyrk(hd->blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, (int)B,
                                        (int)mi, &one, d_xc.get(), (int)mi, &beta, d_C.get(),
                                        (int)B));
    }
    const double scale = 1.0 / (double)(nvalid - 1);
    HYPROF_CUBLAS_CHECK(cublasDscal(hd->blas, (int)(B * B), &scale, d_C.get(), 1));
    int lwork = 0;
    HYPROF_CUSOLVER_CHECK(cusolverDnDsyevd_bufferSize(hd->solver, CUSOLVER_EIG_MODE_VECTOR,
                                                      CUBLAS_FILL_MODE_LOWER, (int)B, d_C.get(),
                                                      (int)B, d_W.get(), &lwork));
    HYPROF_TRY(d_work.alloc(ctx, op, (size_t)(lwork > 0 ? lwork : 1)));
    HYPROF_CUSOLVER_CHECK(cusolverDnDsyevd(hd->solver, CUSOLVER_EIG_MODE_VECTOR,
                                           CUBLAS_FILL_MODE_LOWER, (int)B, d_C.get(), (int)B,
                                           d_W.get(), d_work.get(), lwork, d_info.get()));
    std::vector<double> W(B), V(B * B);
    int info = 0;
    HYPROF_CUDA_CHECK(cudaMemcpy(mean, d_mean.get(), B * sizeof(double), cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(W.data(), d_W.get(), B * sizeof(double), cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(V.data(), d_C.get(), B * B * sizeof(double),
                                 cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(&info, d_info.get(), sizeof info, cudaMemcpyDeviceToHost));
    if (info != 0)
        return hyprof__error(ctx, HYPROF_ERR_NUMERIC, op,
                             "the symmetric eigensolver (cusolverDnDsyevd) failed, info=%d", info);
    for (size_t k = 0; k < p; k++) { /* ascending from the solver: component k is B-1-k */
        const double *v = V.data() + (B - 1 - k) * B;
        size_t imax = 0;
        for (size_t i = 1; i < B; i++)
            if (fabs(v[i]) > fabs(v[imax]))
                imax = i;
        double sign = v[imax] < 0.0 ? -1.0 : 1.0;
        for (size_t i = 0; i < B; i++)
            vectors[k * B + i] = sign * v[i];
    }
    double t = 0.0;
    for (size_t i = 0; i < B; i++)
        t += W[i];
    *total = t;
    return HYPROF_OK;
}

} /* namespace */

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
    if (!(h.active && h.dx && h.x == x && h.npix == npix && h.bands == bands && n > 0 &&
          hyprof__cuda_resident_allowed()))
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

extern "C" int hyprof__unmix_pca(hyprof_ctx_t *ctx, const float *x, const uint8_t *mask,
                                 size_t npix, size_t bands, size_t nvalid, size_t p,
                                 double *mean, double *vectors, double *total,
                                 hyprof_status_t *st)
{
    const Held &h = g_held;
    if (!(h.active && h.dx && h.x == x && h.mask == mask && h.npix == npix &&
          h.bands == bands && h.device == ctx->device && hyprof__cuda_resident_allowed()))
        return 0;
    *st = pca_dev(ctx, h.dx, mask ? h.dmask : NULL, npix, bands, nvalid, p, mean, vectors,
                  total);
    return 1;
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
        h.bands == B && hyprof__cuda_resident_allowed()) {
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

extern "C" hyprof_status_t hyprof__cuda_purity(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "sspp";
    const hyprof_purity_args_t *a = (const hyprof_purity_args_t *)vargs;
    const size_t n = a->npix, B = a->bands, P = a->p;
    hyprof__cuda_device_scope device_scope;
    HYPROF_TRY(device_scope.select(ctx, op));
    DeviceBuffer<float> own_x, d_v, d_out, d_lo, d_hi;
    DeviceBuffer<uint8_t> own_mask;
    DeviceBuffer<double> d_mean, d_V, d_lohi;
    const float *dx = NULL;
    const uint8_t *msk = NULL;
    HYPROF_TRY(device_cube(ctx, op, a->x, a->mask, n, B, own_x, own_mask, &dx, &msk));
    stage_begin(kDevPurity, 0); /* open already when the PCA ran on the device */
    const unsigned nb = 64;
    HYPROF_TRY(d_v.alloc(ctx, op, P * n));
    HYPROF_TRY(d_out.alloc(ctx, op, n));
    HYPROF_TRY(d_lo.alloc(ctx, op, P * nb));
    HYPROF_TRY(d_hi.alloc(ctx, op, P * nb));
    HYPROF_TRY(d_mean.alloc(ctx, op, B));
    HYPROF_TRY(d_V.alloc(ctx, op, P * B));
    HYPROF_TRY(d_lohi.alloc(ctx, op, 2 * P));
    HYPROF_CUDA_CHECK(cudaMemcpy(d_mean.get(), a->mean, B * sizeof(double), cudaMemcpyHostToDevice));
    HYPROF_CUDA_CHECK(cudaMemcpy(d_V.get(), a->vectors, P * B * sizeof(double),
                                 cudaMemcpyHostToDevice));
    const unsigned grid = (unsigned)div_up(n, kThreads);
    if (P <= 8)
        project_kernel<8><<<grid, kThreads>>>(dx, n, (int)B, (int)P, d_mean.get(), d_V.get(),
                                              d_v.get());
    else if (P <= 16)
        project_kernel<16><<<grid, kThreads>>>(dx, n, (int)B, (int)P, d_mean.get(), d_V.get(),
                                               d_v.get());
    else if (P <= 32)
        project_kernel<32><<<grid, kThreads>>>(dx, n, (int)B, (int)P, d_mean.get(), d_V.get(),
                                               d_v.get());
    else
        project_kernel<HYPROF_MAX_ENDMEMBERS><<<grid, kThreads>>>(dx, n, (int)B, (int)P,
                                                                  d_mean.get(), d_V.get(),
                                                                  d_v.get());
    HYPROF_CUDA_CHECK_LAUNCH("project_kernel");
    minmax_kernel<<<dim3(nb, (unsigned)P), 256>>>(d_v.get(), msk, n, d_lo.get(), d_hi.get());
    HYPROF_CUDA_CHECK_LAUNCH("minmax_kernel");
    std::vector<float> lo(P * nb), hi(P * nb);
    std::vector<double> lohi(2 * P);
    HYPROF_CUDA_CHECK(cudaMemcpy(lo.data(), d_lo.get(), P * nb * sizeof(float),
                                 cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(hi.data(), d_hi.get(), P * nb * sizeof(float),
                                 cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < P; k++) {
        float l = INFINITY, h = -INFINITY;
        for (unsigned b = 0; b < nb; b++) {
            l = lo[k * nb + b] < l ? lo[k * nb + b] : l;
            h = hi[k * nb + b] > h ? hi[k * nb + b] : h;
        }
        lohi[2 * k] = l;
        lohi[2 * k + 1] = h;
    }
    HYPROF_CUDA_CHECK(cudaMemcpy(d_lohi.get(), lohi.data(), 2 * P * sizeof(double),
                                 cudaMemcpyHostToDevice));
    weights_kernel<<<grid, kThreads>>>(d_v.get(), msk, n, (int)P, d_lohi.get(), a->theta,
                                       d_out.get());
    HYPROF_CUDA_CHECK_LAUNCH("weights_kernel");
    stage_end(kDevPurity, 0);
    HYPROF_CUDA_CHECK(cudaMemcpy(a->out, d_out.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    return HYPROF_OK;
}

extern "C" hyprof_status_t hyprof__cuda_homogeneity(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "sspp";
    const hyprof_homog_args_t *a = (const hyprof_homog_args_t *)vargs;
    const size_t w = a->width, h = a->height, n = w * h, B = a->bands;
    hyprof__cuda_device_scope device_scope;
    HYPROF_TRY(device_scope.select(ctx, op));
    long r = (long)(3.0 * a->sigma + 0.5);
    std::vector<double> k(2 * r + 1);
    double ksum = 0.0;
    for (long j = -r; j <= r; j++)
        ksum += k[j + r] = exp(-(double)(j * j) / (2.0 * a->sigma * a->sigma));
    for (long j = -r; j <= r; j++)
        k[j + r] /= ksum;
    DeviceBuffer<float> own_x, d_out;
    DeviceBuffer<uint8_t> own_mask;
    DeviceBuffer<double> d_k, d_num, d_den, d_acc, d_nums;
    const float *dx = NULL;
    const uint8_t *msk = NULL;
    HYPROF_TRY(d_out.alloc(ctx, op, n));
    HYPROF_TRY(d_k.alloc(ctx, op, k.size()));
    HYPROF_TRY(d_num.alloc(ctx, op, n));
    HYPROF_TRY(d_den.alloc(ctx, op, n));
    HYPROF_TRY(d_acc.alloc(ctx, op, n));
    HYPROF_CUDA_CHECK(cudaMemcpy(d_k.get(), k.data(), k.size() * sizeof(double),
                                 cudaMemcpyHostToDevice));
    HYPROF_CUDA_CHECK(cudaMemset(d_acc.get(), 0, n * sizeof(double)));
    const unsigned grid = (unsigned)div_up(n, 256);
    /* Groups of bands: as many as one upload chunk completes at most (the
     * groups follow the upload), at least 2. $HYPROF_CUDA_RESIDENT=0 keeps
     * the band-by-band form instead (tests run both). */
    const bool grouped = hyprof__cuda_resident_allowed();
    size_t G = kStageBytes / sizeof(float) / n + 2;
    G = G > B ? B : G;
    if (grouped)
        HYPROF_TRY(d_nums.alloc(ctx, op, G * n));
    bool den_done = false;
    /* Bands [b0, b0+g) (g <= G): their row passes in one launch, then one
     * thread per pixel adds their squared differences in band order. */
    BandsReady group = [&](size_t b0, size_t g) -> hyprof_status_t {
        if (!den_done) { /* the normaliser Gy*(Gx*m), once; band 0 is there */
            stage_begin(kDevHomogeneity, 0);
            rows_kernel<<<grid, 256>>>(dx, msk, w, h, d_k.get(), r, d_num.get(), d_den.get());
            HYPROF_CUDA_CHECK_LAUNCH("rows_kernel");
            cols_den_kernel<<<grid, 256>>>(w, h, d_k.get(), r, d_den.get(), d_num.get());
            HYPROF_CUDA_CHECK_LAUNCH("cols_den_kernel");
            den_done = true;
        }
        for (size_t b = b0; b < b0 + g; b += G) {
            size_t gg = b0 + g - b < G ? b0 + g - b : G;
            rows_group_kernel<<<dim3(grid, (unsigned)gg), 256>>>(dx + b * n, msk, w, h,
                                                                 d_k.get(), r, d_nums.get());
            HYPROF_CUDA_CHECK_LAUNCH("rows_group_kernel");
            cols_group_acc_kernel<<<grid, 256>>>(dx + b * n, w, h, d_k.get(), r, (int)gg,
                                                 d_nums.get(), d_num.get(), d_acc.get());
            HYPROF_CUDA_CHECK_LAUNCH("cols_group_acc_kernel");
        }
        return hyprof__progress(ctx, (double)(b0 + g) / (double)B, "homogeneity");
    };
    bool uploaded = false;
    HYPROF_TRY(device_cube(ctx, op, a->x, a->mask, n, B, own_x, own_mask, &dx, &msk,
                           grouped ? &group : NULL, &uploaded));
    if (grouped && !uploaded) /* the chain's copy was there already */
        HYPROF_TRY(group(0, B));
    if (!grouped)
        stage_begin(kDevHomogeneity, 0);
    for (size_t b = 0; !grouped && b < B; b++) {
        const float *xb = dx + b * n;
        rows_kernel<<<grid, 256>>>(xb, msk, w, h, d_k.get(), r, d_num.get(), d_den.get());
        HYPROF_CUDA_CHECK_LAUNCH("rows_kernel");
        cols_acc_kernel<<<grid, 256>>>(xb, w, h, d_k.get(), r, d_num.get(), d_den.get(),
                                       d_acc.get());
        HYPROF_CUDA_CHECK_LAUNCH("cols_acc_kernel");
        if ((b & 31) == 31)
            HYPROF_TRY(hyprof__progress(ctx, (double)(b + 1) / (double)B, "homogeneity"));
    }
    rmse_kernel<<<grid, 256>>>(d_acc.get(), msk, n, B, a->nodata, d_out.get());
    HYPROF_CUDA_CHECK_LAUNCH("rmse_kernel");
    stage_end(kDevHomogeneity, 0);
    HYPROF_CUDA_CHECK(cudaMemcpy(a->rmse, d_out.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    return HYPROF_OK;
}

extern "C" hyprof_status_t hyprof__cuda_kmeans(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "kmeans";
    hyprof_kmeans_args_t *a = (hyprof_kmeans_args_t *)vargs;
    const size_t n = a->npix, B = a->bands, k = a->k;
    hyprof__cuda_device_scope device_scope;
    HYPROF_TRY(device_scope.select(ctx, op));
    KMeansDev d;
    d.a = a;
    d.nblk = div_up(n, HYPROF_KMEANS_BLOCK);
    HYPROF_TRY(device_cube(ctx, op, a->x, a->mask, n, B, d.own_x, d.own_mask, &d.x, &d.mask));
    stage_begin(kDevKmeans, 0);
    HYPROF_TRY(d.C.alloc(ctx, op, k * B));
    HYPROF_TRY(d.Ct.alloc(ctx, op, k * B));
    HYPROF_TRY(d.dist.alloc(ctx, op, n));
    HYPROF_TRY(d.part.alloc(ctx, op, d.nblk * B * k));
    HYPROF_TRY(d.ref.alloc(ctx, op, B));
    HYPROF_TRY(d.bv.alloc(ctx, op, kArgmaxBlocks));
    HYPROF_TRY(d.bi.alloc(ctx, op, kArgmaxBlocks));
    HYPROF_TRY(d.labels.alloc(ctx, op, n));
    HYPROF_TRY(d.cnt.alloc(ctx, op, k));
    HYPROF_TRY(d.changed.alloc(ctx, op, 1));
    HYPROF_TRY(d.dirty.alloc(ctx, op, d.nblk));
    HYPROF_TRY(d.cnorm.alloc(ctx, op, k));
    const char *f32 = getenv("HYPROF_KMEANS_F32");
    d.fast = !(f32 && !strcmp(f32, "0"));
    const uint8_t *msk = d.mask;
    const unsigned grid = (unsigned)div_up(n, 256);

    /* The mean spectrum: the update with every valid pixel in cluster 0. */
    fill_labels_kernel<<<grid, 256>>>(msk, n, 0, d.labels.get());
    HYPROF_CUDA_CHECK_LAUNCH("fill_labels_kernel");
    HYPROF_TRY(update_dev(ctx, op, d, 1, d.ref.get(), true));
    HYPROF_TRY(init_dev(ctx, op, d));
    transpose_centres_kernel<<<(unsigned)div_up(k * B, 256), 256>>>(d.C.get(), (int)B, (int)k,
                                                                    d.Ct.get());
    HYPROF_CUDA_CHECK_LAUNCH("transpose_centres_kernel");

    fill_labels_kernel<<<grid, 256>>>(msk, n, -2, d.labels.get());
    HYPROF_CUDA_CHECK_LAUNCH("fill_labels_kernel");
    a->iterations = 0;
    for (int it = 0; it < a->max_iter; it++) {
        unsigned long long changed = 0;
        HYPROF_TRY(assign_dev(ctx, op, d, &changed, false));
        if (changed == 0)
            break;
        /* The first update sums every block (the partials held the mean's). */
        HYPROF_TRY(update_dev(ctx, op, d, (int)k, d.C.get(), it == 0));
        a->iterations = it + 1;
        HYPROF_TRY(hyprof__progress(ctx, (double)(it + 1) / a->max_iter, op));
    }
    /* The distances to the final centres, all exact (the inertia); when the
     * loop ended on no change, the labels stay as they are. */
    unsigned long long changed = 0;
    HYPROF_TRY(assign_dev(ctx, op, d, &changed, true));
    stage_end(kDevKmeans, 0);
    HYPROF_CUDA_CHECK(cudaMemcpy(a->labels, d.labels.get(), n * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(a->dist, d.dist.get(), n * sizeof(double), cudaMemcpyDeviceToHost));
    HYPROF_CUDA_CHECK(cudaMemcpy(a->centres, d.C.get(), k * B * sizeof(double),
                                 cudaMemcpyDeviceToHost));
    return HYPROF_OK;
}
