/* The W-MCD denoising of the CUDA chain (kernels/morphology/emp_cuda.cuh):
 * every EMP plane, in double, through the 2-D DWT to the deepest of the three
 * levels, the universal threshold, soft or hard thresholding of the details
 * and the inverse from each of the three levels (the CPU's
 * hyprof__wmcd_plane: algorithms/wavelet/dwt2.c).
 *
 * The planes go in groups of G (grid z), each group's transforms queued on
 * the compute stream while the previous group's float planes download:
 *   forward    periodized separable analysis per level, columns then rows
 *              (dwt2_fwd_cols_kernel, dwt2_fwd_rows_kernel; filters in
 *              constant memory); the first level reads the 8-bit EMP planes
 *              themselves (exact in double)
 *   threshold  the median of |HH1| per plane by an exact radix select (8
 *              passes of 8 bits over the bit patterns of |d|: median_*),
 *              lambda = median / 0.6745 sqrt(2 ln n) (lambda_kernel), then
 *              every detail coefficient thresholded (threshold_kernel)
 *   inverse    per level, rows then columns (dwt2_inv_rows_kernel,
 *              dwt2_inv_cols_kernel); the last column step writes the float
 *              output planes, masked pixels nodata.
 * The group size and whether the whole float output stays on the device
 * come from the plan (plan_denoise in emp.cu); the buffers are allocated
 * while the markers compute (denoise_prepare). */
#include "emp_cuda.cuh"

#include <cub/warp/warp_scan.cuh>

namespace {

using namespace emp_cuda;

__constant__ double c_lo[kMaxFilter], c_hi[kMaxFilter];

__device__ __forceinline__ int pmod(int a, int m)
{
    const int r = a % m;
    return r < 0 ? r + m : r;
}

/* Analysis along columns: x h x w -> lo, hi half_up(h) x w. The first level
 * reads the 8-bit EMP planes themselves (exact in double), the next ones the
 * previous approximation. */
template <typename T>
__global__ void dwt2_fwd_cols_kernel(const T *__restrict__ x, size_t xs, int h, int w, int F,
                                     double *lo, double *hi, size_t os)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, o = blockIdx.y * blockDim.y + threadIdx.y;
    const int np = h + (h & 1);
    if (i >= w || o >= np / 2)
        return;
    const T *xp = x + blockIdx.z * xs;
    double sl = 0.0, sh = 0.0;
    for (int j = 0; j < F; ++j) {
        int row = pmod(F / 2 + 2 * o - j, np);
        row = row < h ? row : h - 1;
        const double v = (double)xp[(size_t)row * w + i];
        sl += c_lo[j] * v;
        sh += c_hi[j] * v;
    }
    lo[blockIdx.z * os + (size_t)o * w + i] = sl;
    hi[blockIdx.z * os + (size_t)o * w + i] = sh;
}

/* Analysis along rows: x h x w -> lo, hi h x half_up(w), for two sets of G
 * planes in one launch (grid z: 2 G; set 1: the column analysis' high band). */
__global__ void dwt2_fwd_rows_kernel(const double *__restrict__ x0,
                                     const double *__restrict__ x1, size_t xs, int h, int w,
                                     int F, double *lo0, double *hi0, double *lo1, double *hi1,
                                     size_t os, unsigned G)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    const int np = w + (w & 1), w2 = np / 2;
    if (o >= w2 || y >= h)
        return;
    const bool one = blockIdx.z >= G;
    const unsigned g = one ? blockIdx.z - G : blockIdx.z;
    const double *xr = (one ? x1 : x0) + g * xs + (size_t)y * w;
    double sl = 0.0, sh = 0.0;
    for (int j = 0; j < F; ++j) {
        int c = pmod(F / 2 + 2 * o - j, np);
        c = c < w ? c : w - 1;
        const double v = xr[c];
        sl += c_lo[j] * v;
        sh += c_hi[j] * v;
    }
    (one ? lo1 : lo0)[g * os + (size_t)y * w2 + o] = sl;
    (one ? hi1 : hi0)[g * os + (size_t)y * w2 + o] = sh;
}

/* Synthesis along rows: a, d h x w2 -> out h x wout (the transpose of the
 * analysis, gathered: output c receives from o with 2o = c + j - F/2 mod 2 w2),
 * for two sets of G planes in one launch (grid z: 2 G). */
__global__ void dwt2_inv_rows_kernel(const double *__restrict__ a0,
                                     const double *__restrict__ d0,
                                     const double *__restrict__ a1,
                                     const double *__restrict__ d1, size_t is, int h, int w2,
                                     int wout, int F, double *out0, double *out1, size_t os,
                                     unsigned G)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= wout || y >= h)
        return;
    const bool one = blockIdx.z >= G;
    const unsigned g = one ? blockIdx.z - G : blockIdx.z;
    const int np = 2 * w2;
    const double *ar = (one ? a1 : a0) + g * is + (size_t)y * w2,
                 *dr = (one ? d1 : d0) + g * is + (size_t)y * w2;
    double s = 0.0;
    for (int j = 0; j < F; ++j) {
        const int t = pmod(c + j - F / 2, np);
        if (t & 1)
            continue;
        s += c_lo[j] * ar[t / 2] + c_hi[j] * dr[t / 2];
    }
    (one ? out1 : out0)[g * os + (size_t)y * wout + c] = s;
}

/* Synthesis along columns: a, d h2 x w -> out hout x w (plane stride os) or,
 * for the last step (fo not NULL), straight into the float output planes:
 * plane z's version `band` of 3 at fo + (3 z + band) os, masked pixels
 * nodata (a float conversion, without the double plane in between). */
__global__ void dwt2_inv_cols_kernel(const double *__restrict__ a, const double *__restrict__ d,
                                     size_t is, int h2, int w, int hout, int F, double *out,
                                     size_t os, float *fo, const uint8_t *__restrict__ mask,
                                     float nodata, int band)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= w || k >= hout)
        return;
    const int np = 2 * h2;
    const double *ap = a + blockIdx.z * is, *dp = d + blockIdx.z * is;
    double s = 0.0;
    for (int j = 0; j < F; ++j) {
        const int t = pmod(k + j - F / 2, np);
        if (t & 1)
            continue;
        const size_t r = (size_t)(t / 2) * w + i;
        s += c_lo[j] * ap[r] + c_hi[j] * dp[r];
    }
    const size_t p = (size_t)k * w + i;
    if (fo)
        fo[((size_t)3 * blockIdx.z + band) * os + p] = (mask && !mask[p]) ? nodata : (float)s;
    else
        out[blockIdx.z * os + p] = s;
}

/* The median of |HH1| per plane by an exact radix select on the bit patterns
 * of |d| (non-negative doubles order like their bits): 8 passes of 8 bits for
 * the two middle order statistics (equal for an odd count). */

__global__ void median_init_kernel(SelQ *q, int G, size_t m)
{
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= G)
        return;
    q[2 * g] = {0ull, (long long)(m / 2 - ((m & 1) ? 0 : 1))};
    q[2 * g + 1] = {0ull, (long long)(m / 2)};
}

/* grid (blocks, G), 256 threads: histogram of the digit at `shift` of the keys
 * that match each query's prefix above it. */
__global__ void median_hist_kernel(const double *__restrict__ d, size_t is, size_t m,
                                   const SelQ *__restrict__ q, int shift,
                                   unsigned long long *ghist)
{
    __shared__ unsigned h[2][256];
    for (int i = threadIdx.x; i < 512; i += blockDim.x)
        h[i / 256][i % 256] = 0;
    __syncthreads();
    const int g = blockIdx.y;
    const unsigned long long hmask = shift + 8 >= 64 ? 0ull : ~0ull << (shift + 8);
    const unsigned long long p0 = q[2 * g].prefix & hmask, p1 = q[2 * g + 1].prefix & hmask;
    const double *dp = d + (size_t)g * is;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        const unsigned long long key = (unsigned long long)__double_as_longlong(fabs(dp[i]));
        const unsigned digit = (unsigned)(key >> shift) & 255u;
        if ((key & hmask) == p0)
            atomicAdd(&h[0][digit], 1u);
        if ((key & hmask) == p1)
            atomicAdd(&h[1][digit], 1u);
    }
    __syncthreads();
    unsigned long long *gh = ghist + (size_t)g * 512;
    for (int i = threadIdx.x; i < 512; i += blockDim.x)
        if (h[i / 256][i % 256])
            atomicAdd(gh + i, (unsigned long long)h[i / 256][i % 256]);
}

/* grid G, 64 threads (one warp per query): the bin holding the rank (each
 * lane sums 8 bins, a warp scan of the sums (cub::WarpScan) finds the lane,
 * that lane its bin); clears the histograms for the next pass. */
__global__ void median_scan_kernel(SelQ *q, int shift, unsigned long long *ghist)
{
    using Scan = cub::WarpScan<unsigned long long>;
    __shared__ typename Scan::TempStorage scan_tmp[2];
    const int g = blockIdx.x, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    unsigned long long *h = ghist + (size_t)g * 512 + (size_t)w * 256;
    SelQ s = q[2 * g + w]; /* read by every lane before the scan's shuffles */
    unsigned long long v[8], sum = 0;
    for (int j = 0; j < 8; ++j) {
        v[j] = h[lane * 8 + j];
        sum += v[j];
    }
    unsigned long long incl; /* inclusive prefix over the lanes */
    Scan(scan_tmp[w]).InclusiveSum(sum, incl);
    const unsigned long long excl = incl - sum;
    const unsigned long long rank = (unsigned long long)s.rank;
    if (rank >= excl && rank < incl) { /* exactly one lane */
        unsigned long long cum = excl;
        for (int j = 0; j < 8; ++j) {
            if (rank < cum + v[j]) {
                s.prefix |= (unsigned long long)(lane * 8 + j) << shift;
                s.rank -= (long long)cum;
                break;
            }
            cum += v[j];
        }
        q[2 * g + w] = s;
    }
    for (int j = 0; j < 8; ++j)
        h[lane * 8 + j] = 0;
}

__global__ void lambda_kernel(const SelQ *__restrict__ q, size_t m, int G, double npix,
                              double *lambda)
{
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= G)
        return;
    const double lo = __longlong_as_double((long long)q[2 * g].prefix);
    const double hi = __longlong_as_double((long long)q[2 * g + 1].prefix);
    const double med = (m & 1) ? hi : (lo + hi) / 2.0;
    lambda[g] = med / 0.6745 * sqrt(2.0 * log(npix));
}

/* Soft or hard thresholding of `count` coefficients per plane (grid y), of
 * the three detail subbands (grid z, stride zs) of a level. */
__global__ void threshold_kernel(double *d, size_t is, size_t zs, size_t count,
                                 const double *__restrict__ lambda, int hard)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count)
        return;
    double *v = d + blockIdx.z * zs + blockIdx.y * is + i;
    const double a = fabs(*v), l = lambda[blockIdx.y];
    if (hard)
        *v = a >= l ? *v : 0.0;
    else
        *v = a > l ? copysign(a - l, *v) : 0.0;
}

} /* namespace */

namespace emp_cuda {

hyprof_status_t DenoiseBufs::alloc(hyprof_ctx_t *ctx, const char *op, const Pyramid &py,
                                   size_t n, size_t G)
{
    lev = std::vector<PoolBuffer<double>>(py.J + 1);
    HYPROF_TRY(lh.alloc(ctx, op, 2 * G * py.hs[1] * py.ws[0]));
    HYPROF_TRY(t1.alloc(ctx, op, G * n));
    HYPROF_TRY(t2.alloc(ctx, op, G * n));
    HYPROF_TRY(sel.alloc(ctx, op, 2 * G));
    HYPROF_TRY(hist.alloc(ctx, op, 512 * G));
    HYPROF_TRY(lambda.alloc(ctx, op, G));
    for (int l = 1; l <= py.J; ++l)
        HYPROF_TRY(lev[l].alloc(ctx, op, 4 * G * py.m(l)));
    return HYPROF_OK;
}

/* Enqueues the W-MCD of planes [t0, t0 + G) on the compute stream; the float
 * planes go to `outd` (3 G planes, in output order). */
hyprof_status_t EmpDevice::denoise_group(size_t t0, size_t G, DenoiseBufs &bf, float *outd)
{
    cudaStream_t st = s.get();
    const Pyramid py(a->height, a->width, a->levels);
    const int F = (int)a->wavelet->length;
    PoolBuffer<double> &lh = bf.lh, &t1 = bf.t1, &t2 = bf.t2, &lambda = bf.lambda;
    std::vector<PoolBuffer<double>> &lev = bf.lev;
    DeviceBuffer<SelQ> &sel = bf.sel;
    DeviceBuffer<unsigned long long> &hist = bf.hist;
    const size_t m1 = py.m(1);
    const dim3 b2(32, 8), b1(256);
    /* forward to the deepest level: [A | AD | DA | DD] per level, plane stride m */
    const double *prev = NULL;
    size_t prev_stride = n;
    for (int l = 1; l <= py.J; ++l) {
        const size_t h = py.hs[l - 1], w = py.ws[l - 1], m = py.m(l), hw2 = py.hs[l] * w;
        double *L = lh.get(), *Hh = lh.get() + G * hw2, *A = lev[l].get();
        if (l == 1) /* from the 8-bit planes */
            dwt2_fwd_cols_kernel<uint8_t><<<grid2(w, py.hs[l], G, b2), b2, 0, st>>>(
                emp.get() + t0 * n, n, (int)h, (int)w, F, L, Hh, hw2);
        else
            dwt2_fwd_cols_kernel<double><<<grid2(w, py.hs[l], G, b2), b2, 0, st>>>(
                prev, prev_stride, (int)h, (int)w, F, L, Hh, hw2);
        HYPROF_CUDA_CHECK_LAUNCH("dwt2_fwd_cols_kernel");
        dwt2_fwd_rows_kernel<<<grid2(py.ws[l], py.hs[l], 2 * G, b2), b2, 0, st>>>(
            L, Hh, hw2, (int)py.hs[l], (int)w, F, A, A + G * m, A + 2 * G * m, A + 3 * G * m, m,
            (unsigned)G);
        HYPROF_CUDA_CHECK_LAUNCH("dwt2_fwd_rows_kernel");
        prev = A;
        prev_stride = m;
    }
    /* the universal threshold of every plane from the median of |HH1| */
    median_init_kernel<<<(unsigned)div_up(G, 128), 128, 0, st>>>(sel.get(), (int)G, m1);
    HYPROF_CUDA_CHECK_LAUNCH("median_init_kernel");
    HYPROF_CUDA_CHECK(cudaMemsetAsync(hist.get(), 0, 512 * G * sizeof(unsigned long long), st));
    const unsigned sel_blocks = (unsigned)(m1 / 8192 < 1 ? 1 : m1 / 8192 > 64 ? 64 : m1 / 8192);
    for (int shift = 56; shift >= 0; shift -= 8) {
        median_hist_kernel<<<dim3(sel_blocks, (unsigned)G), 256, 0, st>>>(
            lev[1].get() + 3 * G * m1, m1, m1, sel.get(), shift, hist.get());
        HYPROF_CUDA_CHECK_LAUNCH("median_hist_kernel");
        median_scan_kernel<<<(unsigned)G, 64, 0, st>>>(sel.get(), shift, hist.get());
        HYPROF_CUDA_CHECK_LAUNCH("median_scan_kernel");
    }
    lambda_kernel<<<(unsigned)div_up(G, 128), 128, 0, st>>>(sel.get(), m1, (int)G, (double)n,
                                                           lambda.get());
    HYPROF_CUDA_CHECK_LAUNCH("lambda_kernel");
    for (int l = 1; l <= py.J; ++l) {
        const size_t m = py.m(l);
        threshold_kernel<<<dim3((unsigned)div_up(m, 256), (unsigned)G, 3), b1, 0, st>>>(
            lev[l].get() + G * m, m, G * m, m, lambda.get(), a->hard);
        HYPROF_CUDA_CHECK_LAUNCH("threshold_kernel");
    }
    /* the inverse from each level j */
    for (int k = 0; k < 3; ++k) {
        const int j = a->levels[k];
        const double *A = lev[j].get();
        size_t astride = py.m(j);
        for (int l = j; l >= 1; --l) {
            const size_t h = py.hs[l - 1], w = py.ws[l - 1], m = py.m(l), hw2 = py.hs[l] * w;
            const double *D = lev[l].get();
            double *L = lh.get(), *Hh = lh.get() + G * hw2;
            double *dst = (l & 1) ? t1.get() : t2.get();
            /* A's plane stride is astride; D's subbands have stride m (== astride) */
            dwt2_inv_rows_kernel<<<grid2(w, py.hs[l], 2 * G, b2), b2, 0, st>>>(
                A, D + G * m, D + 2 * G * m, D + 3 * G * m, m, (int)py.hs[l], (int)py.ws[l],
                (int)w, F, L, Hh, hw2, (unsigned)G);
            HYPROF_CUDA_CHECK_LAUNCH("dwt2_inv_rows_kernel");
            /* the last step writes the float output planes */
            dwt2_inv_cols_kernel<<<grid2(w, h, G, b2), b2, 0, st>>>(
                L, Hh, hw2, (int)py.hs[l], (int)w, (int)h, F, dst, h * w, l == 1 ? outd : NULL,
                a->mask ? mask.get() : NULL, a->nodata, k);
            HYPROF_CUDA_CHECK_LAUNCH("dwt2_inv_cols_kernel");
            A = dst;
            astride = h * w;
        }
        (void)astride;
    }
    return HYPROF_OK;
}

/* The denoising's group size and buffers and its filters (queued): called
 * while the device computes the EMP, so that the allocations (milliseconds
 * for a large output, longer with several devices allocating at once) do not
 * hold the stream. */
hyprof_status_t EmpDevice::denoise_prepare()
{
    if (a->wavelet->length > (size_t)kMaxFilter)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "filter of %zu taps: at most %d",
                             a->wavelet->length, kMaxFilter);
    const Pyramid py(a->height, a->width, a->levels);
    const size_t per_plane = py.doubles(n) * sizeof(double) + 6 * n * sizeof(float) + 4200;
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    const size_t planes = nb * P;
    const DenoisePlan dp = plan_denoise(budget, planes, n, per_plane);
    if (dp.group == 0)
        return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                             "%zu bytes of device memory per plane are not available",
                             per_plane);
    const size_t G = dp.group;
    const bool whole = dp.whole;
    HYPROF_TIMED_ALLOC(dbf.alloc(ctx, op, py, n, G));
    HYPROF_TIMED_ALLOC(doutb[0].alloc(ctx, op, whole ? 3 * planes * n : 3 * G * n));
    if (!whole)
        HYPROF_TIMED_ALLOC(doutb[1].alloc(ctx, op, 3 * G * n));
    /* the filters' sources are the wavelet's own tables: no wait for the copies */
    HYPROF_CUDA_CHECK(cudaMemcpyToSymbolAsync(c_lo, a->wavelet->dec_lo,
                                              a->wavelet->length * sizeof(double), 0,
                                              cudaMemcpyHostToDevice, s.get()));
    HYPROF_CUDA_CHECK(cudaMemcpyToSymbolAsync(c_hi, a->wavelet->dec_hi,
                                              a->wavelet->length * sizeof(double), 0,
                                              cudaMemcpyHostToDevice, s.get()));
    dG = G;
    dwhole = whole;
    dready = true;
    return HYPROF_OK;
}

hyprof_status_t EmpDevice::denoise()
{
    if (!dready)
        HYPROF_TRY(denoise_prepare());
    const size_t planes = nb * P, G = dG, ngroups = div_up(planes, G);
    const bool whole = dwhole;
    DenoiseBufs &bf = dbf;
    PoolBuffer<float> *outb = doutb;
    Stream cs;
    std::vector<Event> done(ngroups), copied(2);
    HYPROF_TRY(cs.create(ctx, op));
    for (size_t i = 0; i < ngroups; ++i)
        HYPROF_TRY(done[i].create(ctx, op));
    for (int k = 0; k < 2; ++k)
        HYPROF_TRY(copied[k].create(ctx, op));
    auto download = [&](size_t i, const float *src) -> hyprof_status_t {
        const size_t t0 = i * G, g = planes - t0 < G ? planes - t0 : G;
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(cs.get(), done[i].get(), 0));
        const int dd = d2h.begin(cs.get());
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->out + 3 * (b0 * P + t0) * n, src,
                                          3 * g * n * sizeof(float), cudaMemcpyDeviceToHost,
                                          cs.get()));
        d2h.end(dd, cs.get());
        HYPROF_CUDA_CHECK(cudaEventRecord(copied[i & 1].get(), cs.get()));
        return HYPROF_OK;
    };
    size_t queued = 0; /* groups whose download is queued (whole output) */
    const bool staged = prep->staged();
    for (size_t i = 0; i < ngroups; ++i) {
        const size_t t0 = i * G, g = planes - t0 < G ? planes - t0 : G, k = i & 1;
        HYPROF_TRY(cancelled());
        float *dst = whole ? outb[0].get() + 3 * t0 * n : outb[k].get();
        if (!whole && i >= 2) /* the buffer's previous download must be done */
            HYPROF_CUDA_CHECK(cudaStreamWaitEvent(s.get(), copied[k].get(), 0));
        HYPROF_TRY(denoise_group(t0, g, bf, dst));
        HYPROF_CUDA_CHECK(cudaEventRecord(done[i].get(), s.get()));
        if (!whole) {
            if (i == 0)
                wait_output();
            HYPROF_TRY(download(i, dst));
        } else if (!staged && prep->ready()) { /* the host is ready: overlap the copies */
            for (; queued <= i; ++queued)
                HYPROF_TRY(download(queued, outb[0].get() + 3 * queued * G * n));
        }
    }
    mark(6, s.get());
    if (whole && staged) {
        Ready ready;
        for (size_t i = 0; i < ngroups; ++i)
            ready.push_back(std::make_pair(3 * (i * G + (planes - i * G < G ? planes - i * G : G)) * n,
                                           done[i].get()));
        HYPROF_TRY(download_staged(outb[0].get(), a->out + 3 * b0 * P * n, 3 * planes * n,
                                   cs.get(), ready));
    } else if (whole) {
        wait_output();
        for (; queued < ngroups; ++queued)
            HYPROF_TRY(download(queued, outb[0].get() + 3 * queued * G * n));
    }
    mark(7, cs.get());
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(cs.get()));
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(s.get()));
    return HYPROF_OK;
}

} /* namespace emp_cuda */
