/* The CUDA PCA's fit: its plan and orchestration, and the entry points of
 * the dispatcher (semantics: algorithms/spectral/pca_impl.h).
 *
 * Plan (plan_fit, from the device-memory budget, the compute capability and
 * the cube): the cube stays resident on the device when it fits beside a
 * working chunk, else it streams from the host in pixel chunks through the
 * two-slot pipeline (page-locked staging when there are several chunks).
 *
 * Pass 1 uploads a resident cube (band sums overlapped on the two-pass path;
 * shift_kernel after it on the one-pass paths). Covariance, by preference:
 *   resident, <= 144 bands, sm_80+: gram_i8_kernel, exact in integers, when
 *        the cube is integer-valued (a sample is checked first, every value
 *        during the pass); otherwise, or when its check fails,
 *   resident, <= 144 bands, enough shared memory: gram_tc_kernel, FP64
 *        tensor cores, one pass about the shift;
 *   resident, <= 144 bands otherwise: gram_mma_kernel after the band sums;
 *   otherwise: centred chunks into a batched DGEMM (pca_cov_twopass.cu).
 * The one-pass kernels' finish writes the mean and the covariance into
 * mapped page-locked memory (HostStage) for the host eigh (pca_eigh.cu).
 * The fit-transform of a resident cube then projects it on the device
 * (pca_project.cu); otherwise the projection streams the cube again. Stage
 * times from CUDA events go to the debug log. */
#include "pca_cuda.cuh"

#include <climits>
#include <vector>

namespace hyprof_pca {

bool device_limits(int *sms, int *optin, int *major)
{
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
           cudaDeviceGetAttribute(optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
               cudaSuccess &&
           cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess;
}

/* The end mark is queued on stream 0 behind slot 1's last chunk before the
 * host waits, so that the interval ends with the device work (recorded after
 * the drain, it would hold the host's wake-up). */
hyprof_status_t end_then_drain(hyprof_ctx_t *ctx, const char *op, Pipeline &pipe,
                               PcaClock &clock, size_t tid)
{
    HYPROF_TRY(pipe.join(ctx, op));
    HYPROF_TRY(clock.end(ctx, op, tid, pipe.stream(0)));
    return pipe.drain(ctx, op);
}

} /* namespace hyprof_pca */

using namespace hyprof_pca;

namespace {

/* Device times of the fit's stages (debug log): each interval is recorded on
 * stream 0 at points where the host has drained both pipeline streams, so
 * it spans the device work of that stage on both. "upload" is pass 1: the
 * upload of a resident cube with the band sums overlapped. */
void log_stages(hyprof_ctx_t *ctx, PcaClock &clock)
{
    if (clock.collect(ctx, "pca") != HYPROF_OK) {
        ctx->error[0] = '\0'; /* only the figures are lost */
        return;
    }
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "pca: cuda device ms: upload %.3f, covariance %.3f, eigh %.3f, projection %.3f, "
                "download %.3f",
                clock.ms(kPcaUpload), clock.ms(kPcaCovariance), clock.ms(kPcaEigh),
                clock.ms(kPcaProjection), clock.ms(kPcaDownload));
}

/* The state of one fit. Declaration order matters: memory first, then the
 * pipeline (its streams wait for their work when destroyed), then the
 * library handles (their destruction synchronises the device). */
struct Fit {
    const hyprof_pca_fit_args_t *a = NULL;
    size_t N = 0, B = 0;
    DeviceBuffer<double> d_mean, d_sum[2], d_partial[2], d_cov[2], d_A;
    DeviceBuffer<double> d_gram[2], d_ones, d_shift, d_tcpart, d_tcsum;
    DeviceBuffer<long long> d_i8acc, d_i8sum;
    DeviceBuffer<unsigned> d_bad;
    DeviceBuffer<float> d_cube;
    DeviceBuffer<uint8_t> d_cmask;
    DeviceBuffer<double> d_c[2];
    Pipeline pipe;
    Blas blas[2];
    PcaClock clock;
    HostStage hstage;
    /* the plan */
    size_t m = 0;          /* pixels a chunk */
    bool resident = false; /* the cube stays on the device */
    bool fused = false;    /* the one-pass covariance (gram_tc_kernel) */
    bool i8 = false;       /* tried first: gram_i8_kernel */
    TcLaunch tcl;
    I8Launch i8l;
    double *stage = NULL;  /* HostStage: mean, covariance, the two integer flags */
    double *mapped = NULL; /* its device address (one-pass paths) */
    const uint8_t *cmask() const { return a->mask ? d_cmask.get() : NULL; }
};

const char kOp[] = "pca";

/* The handles and the buffers every path uses. */
hyprof_status_t alloc_fit(hyprof_ctx_t *ctx, Fit &F)
{
    const char *op = kOp;
    const size_t B = F.B;
    HYPROF_TRY(F.blas[0].create(ctx, op));
    HYPROF_TRY(F.blas[1].create(ctx, op));
    HYPROF_TRY(F.d_mean.alloc(ctx, op, B));
    for (int s = 0; s < 2; ++s) {
        HYPROF_TRY(F.d_sum[s].alloc(ctx, op, B));
        HYPROF_TRY(F.d_partial[s].alloc(ctx, op, (size_t)kSumMaxBlocks * B));
        HYPROF_TRY(F.d_cov[s].alloc(ctx, op, B * B));
        HYPROF_TRY(F.d_gram[s].alloc(ctx, op, kGramSlices * B * B));
    }
    {
        const std::vector<double> ones(kGramSlices, 1.0);
        HYPROF_TRY(F.d_ones.alloc(ctx, op, kGramSlices));
        HYPROF_CUDA_CHECK(cudaMemcpy(F.d_ones.get(), ones.data(), kGramSlices * sizeof(double),
                                     cudaMemcpyHostToDevice));
    }
    HYPROF_TRY(F.d_A.alloc(ctx, op, B * B));
    return HYPROF_OK;
}

/* Chunk size and residency from the device-memory budget: the cube stays on
 * the device when a chunk of at least min(target, 1024) pixels still fits
 * beside it; else chunks stream from the host. */
hyprof_status_t plan_chunks(hyprof_ctx_t *ctx, Fit &F)
{
    const char *op = kOp;
    const size_t N = F.N, B = F.B;
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    size_t target = hyprof__cuda_default_chunk(B, kChunkTargetBytes);
    if (target > N)
        target = N;
    const size_t mask_bytes = F.a->mask ? 1 : 0;
    if (N <= ((size_t)-1 >> 4) / B) {
        const size_t cube_bytes = N * B * sizeof(float) + N * mask_bytes;
        F.m = plan_chunk(budget, cube_bytes, 2 * B * sizeof(double), target, N, B);
        size_t need = target < 1024 ? target : 1024;
        if (F.m >= need && F.m > 0) {
            F.resident = true;
            /* 4 floats more: gram_tc_kernel's producers copy 16-byte chunks,
             * and the last may start 1 to 3 floats before the cube's end
             * (cp.async copies only the bytes inside, but memory checkers
             * see a 16-byte read). */
            if (F.d_cube.alloc(ctx, op, N * B + 4) != HYPROF_OK ||
                (F.a->mask && F.d_cmask.alloc(ctx, op, N) != HYPROF_OK)) {
                F.d_cube.reset();
                F.d_cmask.reset();
                F.resident = false;
            }
        }
    }
    if (!F.resident) {
        F.m = plan_chunk(budget, 0, 2 * (B * sizeof(float) + B * sizeof(double) + mask_bytes),
                         target, N, B);
        if (F.m == 0)
            return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                                 "not enough device memory for one pixel of %zu bands "
                                 "(%zu bytes usable)",
                                 B, budget);
    }
    return HYPROF_OK;
}

/* The covariance kernels of a resident cube (see the file's header), their
 * buffers, and the mapped HostStage memory that carries the results. */
hyprof_status_t plan_covariance(hyprof_ctx_t *ctx, Fit &F)
{
    const char *op = kOp;
    const size_t N = F.N, B = F.B;
    F.fused = F.resident && B <= (size_t)kTcMaxBands;
    F.tcl = F.fused ? tc_launch(N, B) : TcLaunch();
    const size_t tc_ncta = F.tcl.ncta;
    F.fused = F.fused && tc_ncta > 0;
    if (F.fused && (F.d_shift.alloc(ctx, op, B) != HYPROF_OK ||
                    F.d_tcpart.alloc(ctx, op, tc_ncta * B * B) != HYPROF_OK ||
                    F.d_tcsum.alloc(ctx, op, tc_ncta * B) != HYPROF_OK)) {
        ctx->error[0] = '\0'; /* not an error: the two-pass path follows */
        F.fused = false;
    }
    /* stage: mean, covariance, gram_i8_kernel's flag, shift_kernel's */
    F.stage = F.hstage.take(B + B * B + 2);
    if (F.stage && F.fused) {
        void *dp = NULL;
        if (cudaHostGetDevicePointer(&dp, F.stage, 0) == cudaSuccess)
            F.mapped = static_cast<double *>(dp);
        else
            (void)cudaGetLastError();
    }
    /* The integer kernel tells the host through HostStage whether the cube
     * was integer-valued: only with mapped memory. */
    F.i8l = F.fused && F.mapped ? i8_launch(N, B) : I8Launch();
    F.i8 = F.i8l.ncta > 0;
    if (F.i8 && (F.d_i8acc.alloc(ctx, op, B * B) != HYPROF_OK ||
                 F.d_i8sum.alloc(ctx, op, B) != HYPROF_OK ||
                 F.d_bad.alloc(ctx, op, 1) != HYPROF_OK)) {
        ctx->error[0] = '\0'; /* not an error: the FP64 kernel follows */
        F.i8 = false;
    }
    return HYPROF_OK;
}

/* Where chunk [p0, p0+mi) lies on the device for slot s: in the resident
 * cube (uploaded during pass 1, when `first`) or in the slot's buffers,
 * streamed in each pass. */
hyprof_status_t chunk_source(hyprof_ctx_t *ctx, Fit &F, int s, size_t p0, size_t mi, bool first,
                             const float **src, const uint8_t **msk, size_t *ld)
{
    const char *op = kOp;
    const hyprof_pca_fit_args_t *a = F.a;
    if (!F.resident) {
        HYPROF_TRY(F.pipe.upload(ctx, op, s, p0, mi));
        *src = F.pipe.slot[s].in.get();
        *msk = a->mask ? F.pipe.slot[s].mask.get() : NULL;
        *ld = mi;
        return HYPROF_OK;
    }
    if (first) {
        cudaStream_t st = F.pipe.stream(s);
        HYPROF_CUDA_CHECK(copy_cols_h2d(F.d_cube.get() + p0, F.N, a->x + p0, F.N, mi, F.B, st));
        if (a->mask)
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(F.d_cmask.get() + p0, a->mask + p0, mi,
                                              cudaMemcpyHostToDevice, st));
    }
    *src = F.d_cube.get() + p0;
    *msk = F.cmask() ? F.d_cmask.get() + p0 : NULL;
    *ld = F.N;
    return HYPROF_OK;
}

/* The pipeline and its per-slot state, before pass 1. */
hyprof_status_t start_pipeline(hyprof_ctx_t *ctx, Fit &F)
{
    const char *op = kOp;
    const size_t N = F.N, B = F.B;
    HYPROF_TRY(F.pipe.init(ctx, op, F.a->x, F.a->mask, N, B, 0, NULL, F.m, !F.resident));
    const size_t nch = F.pipe.nchunks();
    for (int s = 0; s < (nch > 1 ? 2 : 1); ++s)
        HYPROF_TRY(F.d_c[s].alloc(ctx, op, F.m * B));
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "pca: CUDA fit of %zu pixels x %zu bands, %zu chunk(s) of %zu pixels, %s%s", N,
                B, nch, F.m, F.resident ? "cube resident on the device" : "streamed from the host",
                F.pipe.staged() ? ", pinned staging" : "");
    for (int s = 0; s < 2; ++s) {
        cudaStream_t st = F.pipe.stream(s);
        HYPROF_CUDA_CHECK(cudaMemsetAsync(F.d_sum[s].get(), 0, B * sizeof(double), st));
        HYPROF_CUDA_CHECK(cudaMemsetAsync(F.d_cov[s].get(), 0, B * B * sizeof(double), st));
        HYPROF_CUBLAS_CHECK(cublasSetStream(F.blas[s].get(), st));
    }
    return HYPROF_OK;
}

/* After pass 1: the mean (two-pass path), or the shift of the one-pass
 * covariance, which also samples the cube for the integer check. */
hyprof_status_t finish_pass1(hyprof_ctx_t *ctx, Fit &F)
{
    const char *op = kOp;
    const size_t B = F.B;
    cudaStream_t st = F.pipe.stream(0);
    if (!F.fused)
        return mean_from_sums(ctx, op, st, F.d_sum[0].get(), F.d_sum[1].get(), B,
                              (double)F.a->nvalid, F.d_mean.get());
    if (F.i8) { /* gram_i8_kernel's flag and sums start from 0 */
        HYPROF_CUDA_CHECK(cudaMemsetAsync(F.d_bad.get(), 0, sizeof(unsigned), st));
        HYPROF_CUDA_CHECK(cudaMemsetAsync(F.d_i8acc.get(), 0, B * B * sizeof(long long), st));
        HYPROF_CUDA_CHECK(cudaMemsetAsync(F.d_i8sum.get(), 0, B * sizeof(long long), st));
        F.stage[B + B * B + 1] = 0.0; /* no kernel of this call reads it yet */
    }
    return launch_shift(ctx, op, st, F.d_cube.get(), F.N, B, F.cmask(), F.d_shift.get(),
                        F.i8 ? F.mapped + B + B * B + 1 : NULL);
}

/* Pass 1: the upload of a resident cube, the masked band sums of the
 * two-pass path; then the mean or the shift. */
hyprof_status_t pass1(hyprof_ctx_t *ctx, Fit &F, double pscale)
{
    const char *op = kOp;
    const size_t N = F.N, B = F.B, m = F.m, nch = F.pipe.nchunks();
    size_t tid;
    HYPROF_TRY(F.clock.begin(ctx, op, kPcaUpload, F.pipe.stream(0), &tid));
    for (size_t i = 0; i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(F.pipe.acquire(ctx, op, s));
        const float *src;
        const uint8_t *msk;
        size_t ld;
        HYPROF_TRY(chunk_source(ctx, F, s, p0, mi, true, &src, &msk, &ld));
        if (!F.fused)
            HYPROF_TRY(band_sums(ctx, op, F.pipe.stream(s), src, ld, msk, mi, B,
                                 F.d_partial[s].get(), F.d_sum[s].get()));
        HYPROF_TRY(F.pipe.release(ctx, op, s));
        HYPROF_TRY(
            hyprof__progress(ctx, pscale * 0.45 * (double)(i + 1) / (double)nch, "pca"));
    }
    HYPROF_TRY(F.pipe.drain(ctx, op));
    HYPROF_TRY(finish_pass1(ctx, F));
    HYPROF_TRY(F.clock.end(ctx, op, tid, F.pipe.stream(0)));
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(F.pipe.stream(0)));
    if (F.i8 && F.stage[B + B * B + 1] != 0.0) { /* a sampled value failed the integer check */
        hyprof__log(ctx, HYPROF_LOG_DEBUG, "pca: covariance in FP64 (gram_tc_kernel): the cube "
                                           "is not integer-valued within 32767 of its shifts "
                                           "(a sampled value)");
        F.i8 = false;
    }
    return HYPROF_OK;
}

/* The two-pass covariance's chunk loop: centre, then the DGEMM. */
hyprof_status_t centred_gram(hyprof_ctx_t *ctx, Fit &F, double pscale)
{
    const char *op = kOp;
    const size_t N = F.N, B = F.B, m = F.m, nch = F.pipe.nchunks();
    for (size_t i = 0; i < nch; ++i) {
        const int s = (int)(i & 1);
        const size_t p0 = i * m, mi = (N - p0 < m) ? N - p0 : m;
        HYPROF_TRY(F.pipe.acquire(ctx, op, s));
        cudaStream_t st = F.pipe.stream(s);
        const float *src;
        const uint8_t *msk;
        size_t ld;
        HYPROF_TRY(chunk_source(ctx, F, s, p0, mi, false, &src, &msk, &ld));
        HYPROF_TRY(centre(ctx, op, st, src, ld, msk, mi, B, F.d_mean.get(), F.d_c[s].get()));
        HYPROF_TRY(gram_accumulate(ctx, op, F.blas[s].get(), F.d_c[s].get(), mi, B,
                                   F.d_cov[s].get(), F.d_gram[s].get(), F.d_ones.get()));
        HYPROF_TRY(F.pipe.release(ctx, op, s));
        HYPROF_TRY(hyprof__progress(
            ctx, pscale * (0.45 + 0.45 * (double)(i + 1) / (double)nch), "pca"));
    }
    return HYPROF_OK;
}

hyprof_status_t fused_gram(hyprof_ctx_t *ctx, Fit &F)
{
    return gram_fused(ctx, F.tcl, F.d_cube.get(), F.N, F.B, F.cmask(), F.a->nvalid,
                      F.d_shift.get(), F.d_tcpart.get(), F.d_tcsum.get(), F.d_A.get(),
                      F.d_mean.get(), F.mapped, F.pipe.stream(0));
}

/* Pass 2: the covariance, by the kernel the plan chose; the integer kernel's
 * failed check (a value that is not an integer) runs the FP64 one after it. */
hyprof_status_t pass2(hyprof_ctx_t *ctx, Fit &F, double pscale)
{
    const char *op = kOp;
    const size_t B = F.B;
    size_t tid;
    HYPROF_TRY(F.clock.begin(ctx, op, kPcaCovariance, F.pipe.stream(0), &tid));
    bool gram_done = F.fused;
    if (F.i8)
        HYPROF_TRY(gram_i8(ctx, F.i8l, F.d_cube.get(), F.N, B, F.cmask(), F.a->nvalid,
                           F.d_shift.get(), F.d_i8acc.get(), F.d_i8sum.get(), F.d_bad.get(),
                           F.d_A.get(), F.d_mean.get(), F.mapped, F.pipe.stream(0)));
    else if (F.fused)
        HYPROF_TRY(fused_gram(ctx, F));
    else if (F.resident)
        HYPROF_TRY(gram_resident(ctx, F.d_cube.get(), F.N, B, F.cmask(), F.d_mean.get(),
                                 F.d_cov[0].get(), F.pipe.stream(0), &gram_done));
    if (!gram_done)
        HYPROF_TRY(centred_gram(ctx, F, pscale));
    HYPROF_TRY(end_then_drain(ctx, op, F.pipe, F.clock, tid));
    if (F.i8 && F.stage[B + B * B] != 0.0) { /* not integer-valued: the FP64 kernel */
        hyprof__log(ctx, HYPROF_LOG_DEBUG, "pca: covariance in FP64 (gram_tc_kernel): the cube "
                                           "is not integer-valued within 32767 of its shifts");
        HYPROF_TRY(F.clock.begin(ctx, op, kPcaCovariance, F.pipe.stream(0), &tid));
        HYPROF_TRY(fused_gram(ctx, F));
        HYPROF_TRY(end_then_drain(ctx, op, F.pipe, F.clock, tid));
    } else if (F.i8) {
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "pca: covariance exact in integers (gram_i8_kernel, %zu CTAs)", F.i8l.ncta);
    }
    return HYPROF_OK;
}

/* The fit; with `transform`, also the projection of the cube when it is
 * resident (then *projected is set), its progress being the last 40 %. */
hyprof_status_t fit(hyprof_ctx_t *ctx, const hyprof_pca_fit_args_t *a, bool transform,
                    bool *projected)
{
    const char *op = kOp;
    const double pscale = transform ? 0.6 : 1.0;
    *projected = false;
    if (!a || !a->x || !a->mean || !a->eigenvalues || !a->eigenvectors)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "CUDA fit called without data");
    const size_t N = a->npix, B = a->bands;
    if (N == 0 || B == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "empty cube (%zu pixels, %zu bands)", N,
                             B);
    if (B > (size_t)INT_MAX)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "too many bands for cuSOLVER (%zu)", B);
    if (a->nvalid < 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                             "at least 2 valid pixels are needed (%zu valid)", a->nvalid);
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));
    Fit F;
    F.a = a;
    F.N = N;
    F.B = B;
    HYPROF_TRY(alloc_fit(ctx, F));
    HYPROF_TRY(plan_chunks(ctx, F));
    HYPROF_TRY(plan_covariance(ctx, F));
    HYPROF_TRY(start_pipeline(ctx, F));
    HYPROF_TRY(pass1(ctx, F, pscale));
    HYPROF_TRY(pass2(ctx, F, pscale));

    cudaStream_t st = F.pipe.stream(0);
    size_t tid;
    HYPROF_TRY(F.clock.begin(ctx, op, kPcaEigh, st, &tid));
    if (!F.fused) /* the one-pass kernels wrote d_A */
        HYPROF_TRY(cov_finalize(ctx, op, st, F.d_cov[0].get(), F.d_cov[1].get(), B * B,
                                (double)(a->nvalid - 1), F.d_A.get()));
    HYPROF_TRY(eigh_on_host(ctx, a, F.d_mean.get(), F.d_A.get(), st, F.clock, tid, F.stage,
                            F.mapped != NULL));
    HYPROF_TRY(hyprof__progress(ctx, pscale, "pca"));
    if (!transform || !F.resident) {
        log_stages(ctx, F.clock);
        return HYPROF_OK;
    }
    HYPROF_TRY(a->finish(a->user));
    HYPROF_TRY(project_resident(ctx, op, a, F.d_cube.get(), F.cmask(), F.pipe, projected,
                                F.clock));
    log_stages(ctx, F.clock);
    return HYPROF_OK;
}

} /* namespace */

extern "C" hyprof_status_t hyprof__cuda_pca_fit(hyprof_ctx_t *ctx, void *vargs)
{
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    bool projected;
    return fit(ctx, (const hyprof_pca_fit_args_t *)vargs, false, &projected);
}

/* Fit-transform: the projection runs on the resident cube when the fit kept
 * one; otherwise (a cube larger than the device) it streams the cube again. */
extern "C" hyprof_status_t hyprof__cuda_pca_fit_transform(hyprof_ctx_t *ctx, void *vargs)
{
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    const hyprof_pca_fit_args_t *a = (const hyprof_pca_fit_args_t *)vargs;
    if (!a || !a->apply || !a->finish)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, "pca",
                             "CUDA fit-transform called without a projection");
    bool projected = false;
    HYPROF_TRY(fit(ctx, a, true, &projected));
    if (projected)
        return HYPROF_OK;
    HYPROF_TRY(a->finish(a->user));
    double saved[2];
    hyprof__progress_push(ctx, 0.6, 1.0, saved);
    hyprof_status_t st = hyprof__cuda_pca_apply(ctx, a->apply);
    hyprof__progress_pop(ctx, saved);
    return st;
}
