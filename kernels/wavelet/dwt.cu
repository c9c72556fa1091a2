/* CUDA backend of the spectral DWT (semantics: algorithms/wavelet/dwt_impl.h).
 *
 * The paper's Algorithm 1 (one kernel, all levels in shared memory, filter in
 * constant memory) adapted to BSQ input:
 * - a block takes a tile of T consecutive pixels and has T x R threads
 *   (threadIdx.x = pixel of the tile, threadIdx.y = one of R rows);
 * - it loads the tile's spectra into shared memory transposed, band-major with
 *   the pixel fastest (s[b*T + t]): the global reads x[p + b*npix] are
 *   coalesced along pixels and the shared accesses are conflict-free;
 * - each level is computed in shared memory, in double: row r computes the
 *   outputs o = r, r+R, ... for all T pixels (one warp = one output index, so
 *   the periodic-extension branch is warp-uniform);
 * - the approximation coefficients are written as float, coalesced along pixels;
 * - the products and sums are rounded separately (no FMA contraction) in the
 *   order j = 0..flen-1, as in PyWavelets and the CPU backend, so the results
 *   are normally bit-identical to theirs.
 * The filter is a by-value __grid_constant__ kernel parameter: it lives in the
 * constant bank, is read by broadcast, and unlike a __constant__ symbol cannot
 * be overwritten by a concurrent call with another wavelet.
 *
 * Shared memory per pixel: two regions of ceil(B/2) doubles. Region 0 first
 * holds the input as floats (4B bytes), later the even levels' outputs; region 1
 * holds the odd levels' outputs. Big cubes are processed in pixel chunks
 * through the two-slot pipeline of cuda_util.h. */
#include "../core/cuda_util.h"
#include "wavelet/dwt_impl.h"

#include <climits>

using namespace hyprof_cuda;

namespace {

const int kMaxFilter = 128;
const int kBlockThreads = 256;
const size_t kChunkTargetBytes = (size_t)32 << 20;

struct DwtFilter {
    double lo[kMaxFilter];
};

struct DwtShape {
    int bands;       /* input length */
    int levels;
    int out_bands;   /* coefficients written (<= final length) */
    int flen;
    size_t half_doubles; /* ceil(bands/2): doubles per pixel in each region */
};

/* One periodized analysis step on the tile: dst[o*T + t] for o < (n + n%2)/2. */
template <typename TS>
__device__ __forceinline__ void dwt_level(const TS *__restrict__ src, double *__restrict__ dst,
                                          int n, int T, int t, int r, int R,
                                          const DwtFilter &f, int flen)
{
    const int np = n + (n & 1); /* an odd signal repeats its last sample */
    const int no = np >> 1;
    const int half = flen >> 1;
    for (int o = r; o < no; o += R) {
        const int base = half + 2 * o;
        double acc = 0.0;
        if (base - (flen - 1) >= 0 && base < n) {
            /* every tap inside the signal: no wrapping */
            const TS *s = src + (size_t)base * T + t;
            for (int j = 0; j < flen; ++j)
                acc = __dadd_rn(acc, __dmul_rn(f.lo[j], (double)s[-(ptrdiff_t)j * T]));
        } else {
            for (int j = 0; j < flen; ++j) {
                int i = (base - j) % np;
                if (i < 0)
                    i += np;
                if (i >= n)
                    i = n - 1; /* the repeated last sample of an odd signal */
                acc = __dadd_rn(acc, __dmul_rn(f.lo[j], (double)src[(size_t)i * T + t]));
            }
        }
        dst[(size_t)o * T + t] = acc;
    }
}

__global__ void __launch_bounds__(kBlockThreads)
    dwt_kernel(const float *__restrict__ x, size_t ld_in, const uint8_t *__restrict__ mask,
               size_t m, float nodata, float *__restrict__ out, size_t ld_out, DwtShape sh,
               const __grid_constant__ DwtFilter f)
{
    extern __shared__ double smem[];
    const int T = blockDim.x, R = blockDim.y;
    const int t = threadIdx.x, r = threadIdx.y;
    float *s0 = reinterpret_cast<float *>(smem);
    double *r0 = smem;
    double *r1 = smem + (size_t)T * sh.half_doubles;

    const size_t p = (size_t)blockIdx.x * T + t;
    const bool inside = p < m;
    for (int b = r; b < sh.bands; b += R)
        s0[(size_t)b * T + t] = inside ? x[p + (size_t)b * ld_in] : 0.0f;
    __syncthreads();

    int n = sh.bands;
    for (int l = 1; l <= sh.levels; ++l) {
        if (l == 1)
            dwt_level<float>(s0, r1, n, T, t, r, R, f, sh.flen);
        else if (l & 1)
            dwt_level<double>(r0, r1, n, T, t, r, R, f, sh.flen);
        else
            dwt_level<double>(r1, r0, n, T, t, r, R, f, sh.flen);
        n = (n + 1) >> 1;
        __syncthreads();
    }

    if (!inside)
        return;
    const bool valid = !mask || mask[p];
    for (int k = r; k < sh.out_bands; k += R) {
        float v;
        if (!valid)
            v = nodata;
        else if (sh.levels == 0)
            v = s0[(size_t)k * T + t];
        else if (sh.levels & 1)
            v = (float)r1[(size_t)k * T + t];
        else
            v = (float)r0[(size_t)k * T + t];
        out[p + (size_t)k * ld_out] = v;
    }
}

/* The kernel's shape, filter and launch geometry for a signal of `bands`
 * samples on the current device (`device`): tile x rows threads, `shared`
 * bytes of shared memory. */
struct DwtPlan {
    DwtShape sh;
    DwtFilter filt;
    dim3 block;
    size_t shared;
};

static hyprof_status_t plan_dwt(hyprof_ctx_t *ctx, const char *op, int device, size_t B,
                                int levels, const double *lo, size_t flen, size_t K,
                                DwtPlan *pl)
{
    DwtShape &sh = pl->sh;
    sh.bands = (int)B;
    sh.levels = levels;
    sh.out_bands = (int)K;
    sh.flen = (int)flen;
    sh.half_doubles = (B + 1) / 2;
    for (int j = 0; j < kMaxFilter; ++j)
        pl->filt.lo[j] = j < sh.flen ? lo[j] : 0.0;

    int max_shared = 0;
    HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                             device));
    const size_t per_px = 2 * sh.half_doubles * sizeof(double);
    int rows = 1;
    while (rows < 8 && (size_t)rows * 2 <= sh.half_doubles)
        rows *= 2;
    int tile = kBlockThreads / rows;
    while (tile > 1 && (size_t)tile * per_px > (size_t)max_shared)
        tile /= 2;
    pl->shared = (size_t)tile * per_px;
    if (pl->shared > (size_t)max_shared)
        return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                             "%zu bands need %zu bytes of shared memory per pixel, the device "
                             "allows %d per block",
                             B, per_px, max_shared);
    HYPROF_CUDA_CHECK(cudaFuncSetAttribute(dwt_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)pl->shared));
    pl->block = dim3((unsigned)tile, (unsigned)rows);
    return HYPROF_OK;
}

} /* namespace */

extern "C" hyprof_status_t hyprof__cuda_dwt_launch(hyprof_ctx_t *ctx, const char *op,
                                                   const float *x, size_t ld_in, size_t m,
                                                   size_t bands, int levels, const double *lo,
                                                   size_t flen, size_t out_bands, float *out,
                                                   size_t ld_out, void *stream)
{
    if (flen < 2 || (flen & 1) || flen > (size_t)kMaxFilter)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "filter length %zu is not even or not in 2..%d", flen, kMaxFilter);
    int device = 0;
    HYPROF_CUDA_CHECK(cudaGetDevice(&device));
    DwtPlan pl;
    HYPROF_TRY(plan_dwt(ctx, op, device, bands, levels, lo, flen, out_bands, &pl));
    const dim3 grid((unsigned)div_up(m, (size_t)pl.block.x));
    dwt_kernel<<<grid, pl.block, pl.shared, (cudaStream_t)stream>>>(x, ld_in, NULL, m, 0.0f, out,
                                                                   ld_out, pl.sh, pl.filt);
    HYPROF_CUDA_CHECK_LAUNCH("dwt_kernel");
    return HYPROF_OK;
}

extern "C" hyprof_status_t hyprof__cuda_dwt_spectral(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "dwt";
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    const hyprof_dwt_args_t *a = (const hyprof_dwt_args_t *)vargs;
    if (!a || !a->x || !a->lo || !a->out)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "CUDA DWT called without data");
    const size_t N = a->npix, B = a->bands, K = a->out_bands;
    if (N == 0 || B == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "empty cube (%zu pixels, %zu bands)", N,
                             B);
    if (B > (size_t)INT_MAX / 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "too many bands (%zu)", B);
    if (a->flen < 2 || (a->flen & 1) || a->flen > (size_t)kMaxFilter)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "filter length %zu is not even or not in 2..%d", a->flen,
                             kMaxFilter);
    if (a->levels < 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "negative level count %d", a->levels);
    size_t final_len = B;
    for (int l = 0; l < a->levels && final_len > 1; ++l)
        final_len = (final_len + 1) / 2;
    if (K == 0 || K > final_len)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "%zu output bands requested, %d levels of %zu bands give %zu", K,
                             a->levels, B, final_len);
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));

    DwtPlan pl;
    HYPROF_TRY(plan_dwt(ctx, op, ctx->device, B, a->levels, a->lo, a->flen, K, &pl));
    const DwtShape &sh = pl.sh;
    const int tile = (int)pl.block.x, rows = (int)pl.block.y;
    const size_t shared_bytes = pl.shared;

    /* ---- chunks ---- */
    Pipeline pipe;
    const size_t per_pixel =
        2 * (B * sizeof(float) + K * sizeof(float) + (a->mask ? 1 : 0));
    size_t m = 0;
    HYPROF_TRY(plan_streamed_chunk(ctx, op, N, B, per_pixel, B, kChunkTargetBytes, &m));
    HYPROF_TRY(pipe.init(ctx, op, a->x, a->mask, N, B, K, a->out, m, true));
    const size_t nch = pipe.nchunks();
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "dwt: CUDA %d level(s) of %zu-tap filter on %zu pixels x %zu bands -> %zu, "
                "tile %d x %d threads, %zu B shared, %zu chunk(s) of %zu pixels%s",
                a->levels, a->flen, N, B, K, tile, rows, shared_bytes, nch, m,
                pipe.staged() ? ", pinned staging" : "");

    const dim3 block = pl.block;
    for (size_t i = 0; i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(pipe.acquire(ctx, op, s));
        Slot &sl = pipe.slot[s];
        HYPROF_TRY(pipe.upload(ctx, op, s, p0, mi));
        const dim3 grid((unsigned)div_up(mi, (size_t)tile));
        dwt_kernel<<<grid, block, shared_bytes, pipe.stream(s)>>>(
            sl.in.get(), mi, a->mask ? sl.mask.get() : NULL, mi, a->nodata, sl.out.get(), mi,
            sh, pl.filt);
        HYPROF_CUDA_CHECK_LAUNCH("dwt_kernel");
        HYPROF_TRY(pipe.download(ctx, op, s, p0, mi));
        HYPROF_TRY(pipe.release(ctx, op, s));
        HYPROF_TRY(hyprof__progress(ctx, (double)(i + 1) / (double)nch, "dwt"));
    }
    return pipe.drain(ctx, op);
}
