/* SSPP's homogeneity and purity steps on the GPU (semantics:
 * algorithms/unmixing/unmixing_impl.h).
 *
 * Homogeneity: per band a row pass and a column pass of the normalised
 * Gaussian, the squared difference from the band added to a per-pixel
 * double accumulator. The normaliser Gy*(Gx*m) of the mask m is the same for
 * every band: computed once. The row passes of a group of bands run in one
 * launch, then one thread per pixel adds the group's squared differences in
 * band order; the groups follow the upload of the cube (unmix_chain.cu).
 * Every product and sum uses __dmul_rn/__dadd_rn (no fused multiply-add), in
 * the CPU's order, so the result is the CPU's bit for bit.
 *
 * Purity: the PCA from the chain's device copy (hyprof_pca::fit_on_device:
 * masked mean, cublasDsyrk on centred chunks, cusolverDnDsyevd; the
 * library's PCA outside a chain), projections on its skewers (one thread
 * per pixel, sums in registers), per-component min/max reductions,
 * weights. */
#include "unmix_cuda.cuh"
#include "../spectral/pca_on_device.cuh"

#include <vector>

using namespace hyprof_unmix;

namespace {

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


/* Batched form of the two passes for G bands at once (blockIdx.y = band of
 * the group): the row pass of m x only, since the normaliser Gy*(Gx*m) is the
 * same for every band and is computed once (den2); then one thread per pixel
 * adds the group's squared differences in band order: the CPU's operations
 * in the CPU's order, so the same bits. */
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

} /* namespace */

extern "C" int hyprof__unmix_pca(hyprof_ctx_t *ctx, const float *x, const uint8_t *mask,
                                 size_t npix, size_t bands, size_t nvalid, size_t p,
                                 double *mean, double *vectors, double *total,
                                 hyprof_status_t *st)
{
    static const char op[] = "sspp";
    const Held &h = g_held;
    if (!(h.active && h.dx && h.x == x && h.mask == mask && h.npix == npix &&
          h.bands == bands && h.device == ctx->device))
        return 0;
    hyprof__cuda_device_scope device_scope;
    *st = device_scope.select(ctx, op);
    if (*st != HYPROF_OK)
        return 1;
    stage_begin(kDevPurity, 0); /* closed by the purity step after its projection */
    *st = hyprof_pca::fit_on_device(ctx, op, h.dx, mask ? h.dmask : NULL, npix, bands, nvalid,
                                    p, mean, vectors, total);
    return 1;
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
     * groups follow the upload), at least 2. */
    size_t G = kStageBytes / sizeof(float) / n + 2;
    G = G > B ? B : G;
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
    HYPROF_TRY(device_cube(ctx, op, a->x, a->mask, n, B, own_x, own_mask, &dx, &msk, &group,
                           &uploaded));
    if (!uploaded) /* the chain's copy was there already */
        HYPROF_TRY(group(0, B));
    rmse_kernel<<<grid, 256>>>(d_acc.get(), msk, n, B, a->nodata, d_out.get());
    HYPROF_CUDA_CHECK_LAUNCH("rmse_kernel");
    stage_end(kDevHomogeneity, 0);
    HYPROF_CUDA_CHECK(cudaMemcpy(a->rmse, d_out.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    return HYPROF_OK;
}
