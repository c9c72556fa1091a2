/* CUDA backend of `classify` (semantics: algorithms/classify/classify_impl.h):
 * RBF SVMs, and ELMs at the end of the file.
 *
 * Per chunk of pixels (float32 BSQ = column-major m x bands), on one of the
 * pipeline's two streams:
 *   scale     X = -1 + 2 (x - min) / (max - min) in double (the host formula,
 *             bit for bit), |x|^2 per pixel;
 *   gemm      G = X S (S: bands x nsv, the support vectors), cublasDgemm;
 *   rbf       G = exp(-gamma (|x|^2 + |sv|^2 - 2 G));
 *   gemm      D = G A (A: nsv x pairs, the one-vs-one coefficients of each
 *             pair of classes on its two classes' support vectors, 0 elsewhere);
 *   vote      d = D - rho, LIBSVM's voting and tie rule, and a flag for every
 *             pixel whose labels the GPU's rounding could change: a decision
 *             value within a bound of 0 or a tie of votes.
 * The host then recomputes the flagged pixels with LIBSVM's exact formula
 * (hyprof_classify, in parallel), so the labels are LIBSVM's.
 *
 * The trust bound and the pair matrix come from hyprof__svm_prep
 * (algorithms/classify/svm_blocks.c, which runs the same method on the CPU). */
#include "../core/cuda_util.h"

#include "classify/classify_impl.h"

#include <climits>
#include <cmath>
#include <vector>

using namespace hyprof_cuda;

namespace {

const int kThreads = 256;
/* G per chunk at most: a Pavia Centre-size stack (784k pixels, a few hundred
 * support vectors) is then one chunk, copied without page-locked staging
 * (freshly pinning chunk buffers cost more than it saves, as for PCA). */
const size_t kKernelMatrixBytes = (size_t)8 << 30;
const double kUlp = 2.220446049250313e-16;

inline unsigned grid_y(size_t n) { return (unsigned)(n < 65535 ? (n ? n : 1) : 65535); }

/* X[p + b*m] scaled, xn[p] = sum of squares. */
__global__ void scale_kernel(const float *__restrict__ in, size_t m, size_t bands, int scale,
                             const double *__restrict__ lo, const double *__restrict__ range,
                             double *__restrict__ X, double *__restrict__ xn)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m)
        return;
    double s = 0.0;
    for (size_t b = 0; b < bands; ++b) {
        double v = (double)in[p + b * m];
        if (scale)
            v = range[b] > 0.0 ? __dadd_rn(-1.0, __dmul_rn(2.0, __ddiv_rn(__dsub_rn(v, lo[b]),
                                                                           range[b])))
                               : 0.0;
        X[p + b * m] = v;
        s += v * v;
    }
    xn[p] = s;
}

__global__ void rbf_kernel(double *__restrict__ G, size_t m, size_t nsv,
                           const double *__restrict__ xn, const double *__restrict__ svn,
                           double gamma)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m)
        return;
    for (size_t i = blockIdx.y; i < nsv; i += gridDim.y) {
        double d = xn[p] + svn[i] - 2.0 * G[p + i * m];
        G[p + i * m] = exp(-gamma * (d > 0.0 ? d : 0.0));
    }
}

/* out[p] = class value, out[m + p] = 1 when the host must recheck,
 * out[(2 + k) m + p] = vote fraction of the model's class k (with scores). */
__global__ void vote_kernel(const double *__restrict__ D, size_t m, int nc,
                            const double *__restrict__ rho, const double *__restrict__ sumabs,
                            const double *__restrict__ xn, double tol_a, double tol_b,
                            const int *__restrict__ label, const int *__restrict__ model_index,
                            int scores, float *__restrict__ out)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m)
        return;
    int votes[256];
    for (int i = 0; i < nc; ++i)
        votes[i] = 0;
    const double tol = tol_a * xn[p] + tol_b;
    bool flag = false;
    size_t q = 0;
    for (int i = 0; i < nc; ++i)
        for (int j = i + 1; j < nc; ++j, ++q) {
            double d = D[p + q * m] - rho[q];
            if (!(fabs(d) > sumabs[q] * tol))
                flag = true;
            ++votes[d > 0 ? i : j];
        }
    int best = 0;
    for (int i = 1; i < nc; ++i)
        if (votes[i] > votes[best])
            best = i;
    for (int i = 0; i < nc; ++i)
        if (i != best && votes[i] == votes[best])
            flag = true;
    out[p] = (float)label[best];
    out[m + p] = flag ? 1.0f : 0.0f;
    if (scores)
        for (int i = 0; i < nc; ++i)
            out[(size_t)(2 + model_index[i]) * m + p] = (float)votes[i] / (float)(nc - 1);
}

template <typename T>
hyprof_status_t upload(hyprof_ctx_t *ctx, const char *op, DeviceBuffer<T> &d, const T *h, size_t n)
{
    HYPROF_TRY(d.alloc(ctx, op, n));
    HYPROF_CUDA_CHECK(cudaMemcpy(d.get(), h, n * sizeof(T), cudaMemcpyHostToDevice));
    return HYPROF_OK;
}

/* The model on the device, prepared as for the CPU's tiles (svm_blocks.c). */
struct DeviceModel {
    DeviceBuffer<double> sv, svn, A, rho, sumabs, lo, range;
    DeviceBuffer<int> label, model_index;
    double tol_a = 0.0, tol_b = 0.0;
};

hyprof_status_t upload_model(hyprof_ctx_t *ctx, const char *op, const hyprof_classifier_t *m,
                             DeviceModel &d)
{
    const hyprof__svm_t *s = &m->svm;
    const size_t B = m->bands, nsv = s->nsv, nc = s->nr_class;
    hyprof__svm_prep_t prep;
    if (!hyprof__svm_prep(m, &prep))
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    std::vector<double> range(B);
    for (size_t b = 0; b < B; ++b)
        range[b] = m->max[b] - m->min[b];
    d.tol_a = prep.tol_a;
    d.tol_b = prep.tol_b;
    hyprof_status_t st = HYPROF_OK;
    if ((st = upload(ctx, op, d.sv, s->sv, nsv * B)) == HYPROF_OK &&
        (st = upload(ctx, op, d.svn, prep.svn, nsv)) == HYPROF_OK &&
        (st = upload(ctx, op, d.A, prep.A, nsv * prep.npairs)) == HYPROF_OK &&
        (st = upload(ctx, op, d.rho, s->rho, prep.npairs)) == HYPROF_OK &&
        (st = upload(ctx, op, d.sumabs, prep.sumabs, prep.npairs)) == HYPROF_OK &&
        (st = upload(ctx, op, d.lo, m->min, B)) == HYPROF_OK &&
        (st = upload(ctx, op, d.range, range.data(), B)) == HYPROF_OK &&
        (st = upload(ctx, op, d.label, s->label, nc)) == HYPROF_OK)
        st = upload(ctx, op, d.model_index, prep.model_index, nc);
    hyprof__svm_prep_free(&prep);
    return st;
}

/* Per slot: scaled chunk, norms, kernel matrix, decision values. */
struct Work {
    DeviceBuffer<double> X, xn, G, D;
};

/* Labels, flags and scores of the pipeline's output -> the map and the
 * recheck flags (hyprof_classify recomputes the flagged pixels on the host,
 * in parallel). */
void unpack(hyprof__classify_args_t *a, const float *out, size_t cols)
{
    const size_t npix = a->in->width * a->in->height, K = a->model->nclasses;
    for (size_t p = 0; p < npix; ++p) {
        a->map[p] = (uint16_t)out[p];
        a->recheck[p] = out[npix + p] != 0.0f;
    }
    if (a->scores && cols > 2)
        memcpy(a->scores, out + 2 * npix, K * npix * sizeof(float));
}

/* Pixels per chunk: the widest per-pixel matrix (`inner` doubles: kernel row
 * or hidden layer) at most kKernelMatrixBytes, at least 1024 pixels, both
 * pipeline slots within the device budget; `widest` bounds cuBLAS dimensions.
 * `what` names the inner dimension in the out-of-memory message. */
hyprof_status_t plan_prediction_chunk(hyprof_ctx_t *ctx, const char *op, size_t N,
                                      size_t per_pixel, size_t inner, size_t widest,
                                      const char *what, size_t *chunk)
{
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    size_t target = kKernelMatrixBytes / (inner * sizeof(double));
    if (target < 1024)
        target = 1024;
    *chunk = plan_chunk(budget, 0, per_pixel, target, N, widest);
    if (*chunk == 0)
        return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                             "not enough device memory for %zu %s", inner, what);
    return HYPROF_OK;
}

} /* namespace */

static hyprof_status_t classify_svm(hyprof_ctx_t *ctx, hyprof__classify_args_t *a)
{
    static const char op[] = "classify";
    const hyprof_classifier_t *m = a->model;
    const hyprof__svm_t *s = &m->svm;
    const size_t N = a->in->width * a->in->height, B = m->bands, nsv = s->nsv;
    const size_t nc = s->nr_class, npairs = nc * (nc - 1) / 2;
    if (nc > 256)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "the CUDA backend classifies with SVMs of at most 256 classes");
    if (B > (size_t)INT_MAX || nsv > (size_t)INT_MAX || npairs > (size_t)INT_MAX)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "model too large for cuBLAS");
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));

    const size_t cols = 2 + (a->scores ? m->nclasses : 0);
    std::vector<float> out(N * cols);
    DeviceModel dm;
    Work w[2];
    Pipeline pipe;
    Blas blas[2];
    HYPROF_TRY(blas[0].create(ctx, op));
    HYPROF_TRY(blas[1].create(ctx, op));
    HYPROF_TRY(upload_model(ctx, op, m, dm));

    /* Chunk: G (m x nsv doubles) 8 GiB at most, both slots within the budget. */
    const size_t per_pixel = 2 * (B * sizeof(float) + (B + 1 + nsv + npairs) * sizeof(double) +
                                  cols * sizeof(float));
    size_t widest = B > nsv ? B : nsv, chunk = 0;
    widest = widest > npairs ? widest : npairs;
    HYPROF_TRY(plan_prediction_chunk(ctx, op, N, per_pixel, nsv, widest > cols ? widest : cols,
                                     "support vectors", &chunk));
    HYPROF_TRY(pipe.init(ctx, op, (const float *)a->in->data, NULL, N, B, cols, out.data(), chunk,
                         true));
    const size_t nch = pipe.nchunks();
    for (int k = 0; k < (nch > 1 ? 2 : 1); ++k) {
        HYPROF_TRY(w[k].X.alloc(ctx, op, chunk * B));
        HYPROF_TRY(w[k].xn.alloc(ctx, op, chunk));
        HYPROF_TRY(w[k].G.alloc(ctx, op, chunk * nsv));
        HYPROF_TRY(w[k].D.alloc(ctx, op, chunk * npairs));
    }
    for (int k = 0; k < 2; ++k)
        HYPROF_CUBLAS_CHECK(cublasSetStream(blas[k].get(), pipe.stream(k)));
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "classify: CUDA RBF SVM, %zu pixels x %zu bands, %zu support vectors, %zu "
                "classes, %zu chunk(s) of %zu pixels", N, B, nsv, nc, nch, chunk);

    const double tol_a = dm.tol_a, tol_b = dm.tol_b;
    const double one = 1.0, zero = 0.0;
    for (size_t i = 0; i < nch; ++i) {
        const int k = (int)(i & 1);
        const size_t p0 = i * chunk, mi = (N - p0 < chunk) ? N - p0 : chunk;
        HYPROF_TRY(pipe.acquire(ctx, op, k));
        cudaStream_t st = pipe.stream(k);
        Slot &sl = pipe.slot[k];
        HYPROF_TRY(pipe.upload(ctx, op, k, p0, mi));
        const unsigned blocks = (unsigned)div_up(mi, kThreads);
        scale_kernel<<<blocks, kThreads, 0, st>>>(sl.in.get(), mi, B, m->scale, dm.lo.get(),
                                                  dm.range.get(), w[k].X.get(), w[k].xn.get());
        HYPROF_CUDA_CHECK_LAUNCH("scale_kernel");
        HYPROF_CUBLAS_CHECK(cublasDgemm(blas[k].get(), CUBLAS_OP_N, CUBLAS_OP_N, (int)mi,
                                        (int)nsv, (int)B, &one, w[k].X.get(), (int)mi,
                                        dm.sv.get(), (int)B, &zero, w[k].G.get(), (int)mi));
        rbf_kernel<<<dim3(blocks, grid_y(nsv)), kThreads, 0, st>>>(
            w[k].G.get(), mi, nsv, w[k].xn.get(), dm.svn.get(), s->gamma);
        HYPROF_CUDA_CHECK_LAUNCH("rbf_kernel");
        HYPROF_CUBLAS_CHECK(cublasDgemm(blas[k].get(), CUBLAS_OP_N, CUBLAS_OP_N, (int)mi,
                                        (int)npairs, (int)nsv, &one, w[k].G.get(), (int)mi,
                                        dm.A.get(), (int)nsv, &zero, w[k].D.get(), (int)mi));
        vote_kernel<<<blocks, kThreads, 0, st>>>(w[k].D.get(), mi, (int)nc, dm.rho.get(),
                                                 dm.sumabs.get(), w[k].xn.get(), tol_a, tol_b,
                                                 dm.label.get(), dm.model_index.get(),
                                                 a->scores != NULL, sl.out.get());
        HYPROF_CUDA_CHECK_LAUNCH("vote_kernel");
        HYPROF_TRY(pipe.download(ctx, op, k, p0, mi));
        HYPROF_TRY(pipe.release(ctx, op, k));
        HYPROF_TRY(hyprof__progress(ctx, 0.9 * (double)(i + 1) / (double)nch, op));
    }
    HYPROF_TRY(pipe.drain(ctx, op));
    unpack(a, out.data(), cols);
    return HYPROF_OK;
}

/* ---- ELM ------------------------------------------------------------------------------
 * Per chunk: the same scaling; Z = X W' (cublasDgemm), H = sigmoid(Z + bias),
 * O = H beta (cublasDgemm); the largest output's class, and a recheck flag
 * when the two largest outputs are closer than a rounding bound (the host's
 * sum runs in another order). */

namespace {

__global__ void sigmoid_kernel(double *__restrict__ Z, size_t m, size_t neurons,
                               const double *__restrict__ bias)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m)
        return;
    for (size_t h = blockIdx.y; h < neurons; h += gridDim.y)
        Z[p + h * m] = 1.0 / (1.0 + exp(-(Z[p + h * m] + bias[h])));
}

__global__ void elm_argmax_kernel(const double *__restrict__ O, size_t m, int K,
                                  const int *__restrict__ values, double tol, int scores,
                                  float *__restrict__ out)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m)
        return;
    int best = 0;
    for (int k = 1; k < K; ++k)
        if (O[p + k * m] > O[p + best * m])
            best = k;
    double top = O[p + best * m], second = -INFINITY;
    for (int k = 0; k < K; ++k)
        if (k != best && O[p + k * m] > second)
            second = O[p + k * m];
    out[p] = (float)values[best];
    out[m + p] = !(top - second > tol) ? 1.0f : 0.0f;
    if (!scores)
        return;
    double sum = 0.0;
    for (int k = 0; k < K; ++k)
        sum += exp(O[p + k * m] - top);
    for (int k = 0; k < K; ++k)
        out[(size_t)(2 + k) * m + p] = (float)(exp(O[p + k * m] - top) / sum);
}

struct ElmWork {
    DeviceBuffer<double> X, xn, Z, O;
};

} /* namespace */

/* Rounding bound of an ELM output: hidden values (in (0, 1)) off by at most
 * (bands + 2) u (|bias| + sum |w x|) / 4 with |x| <= max |x|, then the sum
 * over neurons; 8 times that, as for the SVM. */
static double elm_tolerance(const hyprof_classifier_t *m)
{
    const hyprof__elm_t *e = &m->elm;
    const size_t B = m->bands, L = e->neurons, K = m->nclasses;
    double wmax = 0.0, bmax = 0.0, betasum = 0.0;
    for (size_t i = 0; i < L * B; ++i)
        wmax = fabs(e->w[i]) > wmax ? fabs(e->w[i]) : wmax;
    for (size_t h = 0; h < L; ++h) {
        bmax = fabs(e->bias[h]) > bmax ? fabs(e->bias[h]) : bmax;
        double row = 0.0;
        for (size_t k = 0; k < K; ++k)
            row += fabs(e->beta[h * K + k]);
        betasum += row;
    }
    double xmax = 1.0;
    if (!m->scale)
        for (size_t b = 0; b < B; ++b)
            xmax = fmax(xmax, fmax(fabs(m->min[b]), fabs(m->max[b])));
    return 16.0 * kUlp * betasum *
           ((double)(B + 2) * (bmax + (double)B * wmax * xmax) / 4.0 + (double)L + 4.0);
}

static hyprof_status_t classify_elm(hyprof_ctx_t *ctx, hyprof__classify_args_t *a)
{
    static const char op[] = "classify";
    const hyprof_classifier_t *m = a->model;
    const hyprof__elm_t *e = &m->elm;
    const size_t N = a->in->width * a->in->height, B = m->bands, L = e->neurons, K = m->nclasses;
    if (B > (size_t)INT_MAX || L > (size_t)INT_MAX || K > (size_t)INT_MAX)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "model too large for cuBLAS");
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));

    const size_t cols = 2 + (a->scores ? K : 0);
    std::vector<float> out(N * cols);
    std::vector<double> range(B);
    for (size_t b = 0; b < B; ++b)
        range[b] = m->max[b] - m->min[b];
    const double tol = elm_tolerance(m);

    DeviceBuffer<double> d_w, d_bias, d_beta, d_lo, d_range;
    DeviceBuffer<int> d_values;
    ElmWork w[2];
    Pipeline pipe;
    Blas blas[2];
    HYPROF_TRY(blas[0].create(ctx, op));
    HYPROF_TRY(blas[1].create(ctx, op));
    HYPROF_TRY(upload(ctx, op, d_w, e->w, L * B));
    HYPROF_TRY(upload(ctx, op, d_bias, e->bias, L));
    HYPROF_TRY(upload(ctx, op, d_beta, e->beta, L * K));
    HYPROF_TRY(upload(ctx, op, d_lo, m->min, B));
    HYPROF_TRY(upload(ctx, op, d_range, range.data(), B));
    HYPROF_TRY(upload(ctx, op, d_values, m->values, K));

    const size_t per_pixel =
        2 * (B * sizeof(float) + (B + 1 + L + K) * sizeof(double) + cols * sizeof(float));
    size_t widest = B > L ? B : L, chunk = 0;
    widest = widest > cols ? widest : cols;
    HYPROF_TRY(plan_prediction_chunk(ctx, op, N, per_pixel, L, widest, "neurons", &chunk));
    HYPROF_TRY(pipe.init(ctx, op, (const float *)a->in->data, NULL, N, B, cols, out.data(), chunk,
                         true));
    const size_t nch = pipe.nchunks();
    for (int k = 0; k < (nch > 1 ? 2 : 1); ++k) {
        HYPROF_TRY(w[k].X.alloc(ctx, op, chunk * B));
        HYPROF_TRY(w[k].xn.alloc(ctx, op, chunk));
        HYPROF_TRY(w[k].Z.alloc(ctx, op, chunk * L));
        HYPROF_TRY(w[k].O.alloc(ctx, op, chunk * K));
    }
    for (int k = 0; k < 2; ++k)
        HYPROF_CUBLAS_CHECK(cublasSetStream(blas[k].get(), pipe.stream(k)));
    const double one = 1.0, zero = 0.0;
    for (size_t i = 0; i < nch; ++i) {
        const int k = (int)(i & 1);
        const size_t p0 = i * chunk, mi = (N - p0 < chunk) ? N - p0 : chunk;
        HYPROF_TRY(pipe.acquire(ctx, op, k));
        cudaStream_t st = pipe.stream(k);
        Slot &sl = pipe.slot[k];
        HYPROF_TRY(pipe.upload(ctx, op, k, p0, mi));
        const unsigned blocks = (unsigned)div_up(mi, kThreads);
        scale_kernel<<<blocks, kThreads, 0, st>>>(sl.in.get(), mi, B, m->scale, d_lo.get(),
                                                  d_range.get(), w[k].X.get(), w[k].xn.get());
        HYPROF_CUDA_CHECK_LAUNCH("scale_kernel");
        /* W is neurons x bands row-major: bands x neurons column-major. */
        HYPROF_CUBLAS_CHECK(cublasDgemm(blas[k].get(), CUBLAS_OP_N, CUBLAS_OP_N, (int)mi, (int)L,
                                        (int)B, &one, w[k].X.get(), (int)mi, d_w.get(), (int)B,
                                        &zero, w[k].Z.get(), (int)mi));
        sigmoid_kernel<<<dim3(blocks, grid_y(L)), kThreads, 0, st>>>(w[k].Z.get(), mi, L,
                                                                     d_bias.get());
        HYPROF_CUDA_CHECK_LAUNCH("sigmoid_kernel");
        /* beta is neurons x classes row-major: its transpose column-major. */
        HYPROF_CUBLAS_CHECK(cublasDgemm(blas[k].get(), CUBLAS_OP_N, CUBLAS_OP_T, (int)mi, (int)K,
                                        (int)L, &one, w[k].Z.get(), (int)mi, d_beta.get(), (int)K,
                                        &zero, w[k].O.get(), (int)mi));
        elm_argmax_kernel<<<blocks, kThreads, 0, st>>>(w[k].O.get(), mi, (int)K,
                                                       d_values.get(), tol, a->scores != NULL,
                                                       sl.out.get());
        HYPROF_CUDA_CHECK_LAUNCH("elm_argmax_kernel");
        HYPROF_TRY(pipe.download(ctx, op, k, p0, mi));
        HYPROF_TRY(pipe.release(ctx, op, k));
        HYPROF_TRY(hyprof__progress(ctx, 0.9 * (double)(i + 1) / (double)nch, op));
    }
    HYPROF_TRY(pipe.drain(ctx, op));
    unpack(a, out.data(), cols);
    return HYPROF_OK;
}

extern "C" hyprof_status_t hyprof__cuda_classify(hyprof_ctx_t *ctx, void *vargs)
{
    hyprof__classify_args_t *a = (hyprof__classify_args_t *)vargs;
    if (!a->recheck)
        return hyprof__error(ctx, HYPROF_ERR_INTERNAL, "classify", "no recheck flags");
    return a->model->kind == HYPROF_CLASSIFIER_ELM ? classify_elm(ctx, a) : classify_svm(ctx, a);
}
