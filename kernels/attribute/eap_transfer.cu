/* The CUDA attribute profiles' downloads of the planes.
 * - Planes in the output's type: one copy a batch into the output, which
 *   is page-locked for the call when it is up to kPinAll (on the helper
 *   thread of OutputPrep, while the trees build) or is the caller's
 *   page-locked memory; larger outputs are page-locked kPinChunk at a time
 *   for their copies (a pageable copy runs at a fraction of the bus).
 * - 8-bit planes (8-bit levels; a quarter of the float planes' bytes): the
 *   copies go through page-locked staging (the pool of
 *   kernels/core/staging.cuh), kStages pieces of kStageBytes in flight,
 *   each piece widened into the output (float or 16-bit, nodata under the
 *   mask) on the context's threads while the next ones copy
 *   (hyprof__eap_widen_stream). The pool keeps the staging for the
 *   process: its allocation costs about as much as a call's compute.
 * - Chunked planes (one band's planes do not fit the device): each chunk's
 *   rows to their places in the output, by a 2-D copy. */
#include "eap_cuda.cuh"

namespace eap {
namespace {

/* kStages buffers of `bytes` from the staging pool into s.pooled (true),
 * or none of them (false: the call allocates its own). */
bool pool_take(PlaneStaging &s)
{
    for (int i = 0; i < kStages; i++)
        if (!StagingPool::take(s.bytes, &s.pooled[i])) {
            for (int j = 0; j < i; j++) {
                StagingPool::give(s.pooled[j]);
                s.pooled[j] = StagingPool::Buf();
            }
            return false;
        }
    for (int i = 0; i < kStages; i++)
        s.ptr[i] = (uint8_t *)s.pooled[i].p;
    return true;
}

/* The staging, once per call: the pool's, or the call's own. */
hyprof_status_t staging_take(Run &r)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    PlaneStaging &s = r.stage;
    auto t0 = std::chrono::steady_clock::now();
    s.bytes = kStageBytes;
    s.cached = pool_take(s);
    for (int i = 0; i < kStages; i++) {
        if (!s.cached) {
            if (!s.own[i].try_alloc(s.bytes))
                return hyprof__error(ctx, HYPROF_ERR_NOMEM, op,
                                     "cannot page-lock %zu bytes of staging", s.bytes);
            s.ptr[i] = s.own[i].get();
        }
        HYPROF_TRY(s.ev[i].create(ctx, op));
    }
    r.t.stage = ms_since(t0);
    return HYPROF_OK;
}

/* download_narrow's copies, called by hyprof__eap_widen_stream on this
 * thread. */
struct NarrowCopy {
    Run *r;
    const uint8_t *src;
    size_t count;
    cudaStream_t stream;
    std::chrono::steady_clock::time_point t0;
    cudaError_t err;
    double wait_ms;
    size_t first; /* the output element of src[0] */
};
int ready_cb(void *user, size_t k)
{
    NarrowCopy *c = (NarrowCopy *)user;
    cudaError_t e = cudaEventQuery(c->r->stage.ev[k % kStages].get());
    if (e == cudaSuccess) {
        if (k == 0) /* until the first piece: the rest of the device's work */
            c->wait_ms = ms_since(c->t0);
        return 1;
    }
    if (e == cudaErrorNotReady)
        return 0;
    c->err = e;
    return -1;
}
int issue_cb(void *user, size_t k)
{
    NarrowCopy *c = (NarrowCopy *)user;
    PlaneStaging &s = c->r->stage;
    size_t sb = s.bytes, len = c->count - k * sb < sb ? c->count - k * sb : sb;
    int i = (int)(k % kStages);
    cudaError_t e = cudaMemcpyAsync((void *)s.ptr[i], c->src + k * sb, len,
                                    cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(s.ev[i].get(), c->stream);
    if (e == cudaSuccess)
        return 0;
    c->err = e;
    return -1;
}

} /* namespace */

/* Device to host; without the whole output page-locked, each kPinChunk
 * piece is page-locked for its copy. */
hyprof_status_t download(Run &r, unsigned char *dst, const unsigned char *src, size_t bytes)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    r.prep->join();
    if (r.p.pinned || r.p.caller_pinned) {
        HYPROF_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
        return HYPROF_OK;
    }
    for (size_t off = 0; off < bytes; off += kPinChunk) {
        size_t b = bytes - off < kPinChunk ? bytes - off : kPinChunk;
        HostPin pin;
        pin.pin(dst + off, b);
        HYPROF_CUDA_CHECK(cudaMemcpy(dst + off, src + off, b, cudaMemcpyDeviceToHost));
    }
    return HYPROF_OK;
}

/* 8-bit planes: copies of kStages pieces in flight into the staging, each
 * piece widened into the output while the next ones copy. `first`: the
 * batch's first element in the output. */
hyprof_status_t download_narrow(Run &r, size_t first, size_t count, const uint8_t *src,
                                cudaStream_t stream)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    if (!r.stage.bytes)
        HYPROF_TRY(staging_take(r));
    NarrowCopy c{&r, src, count, stream, std::chrono::steady_clock::now(), cudaSuccess, 0.0,
                 first};
    const uint8_t *stages[kStages];
    for (int i = 0; i < kStages; i++)
        stages[i] = r.stage.ptr[i];
    size_t pieces = (count + r.stage.bytes - 1) / r.stage.bytes;
    for (size_t k = 0; k < pieces && k < (size_t)kStages; k++)
        if (issue_cb(&c, k))
            break;
    r.prep->join(); /* the output's pages faulted */
    const hyprof_eap_args_t *a = r.a;
    hyprof_eap_stream_t st = {ready_cb, issue_cb, &c, stages, kStages, r.stage.bytes, count,
                              first, r.p.n, a->mask, a->out32, a->out16, a->nodata32,
                              a->nodata16};
    int ret = c.err == cudaSuccess ? hyprof__eap_widen_stream(ctx, &st) : -1;
    r.t.widen += ms_since(c.t0) - c.wait_ms;
    r.t.wait += c.wait_ms;
    if (ret || c.err != cudaSuccess) {
        if (c.err != cudaSuccess) {
            (void)cudaGetLastError();
            return hyprof__error(ctx, HYPROF_ERR_DEVICE, op, "download of the planes: %s",
                                 cudaGetErrorString(c.err));
        }
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory in the download");
    }
    return HYPROF_OK;
}

/* Chunked planes (one band a batch, planes in the output's type): this
 * filter's planes of pixels [f.p0, f.p1) to their places in the output. */
hyprof_status_t download_chunk(Run &r, const Filter &f, const unsigned char *out)
{
    hyprof_ctx_t *ctx = r.ctx;
    const char *op = r.op;
    r.prep->join();
    const size_t es = r.p.esize, n = r.p.n, oc = r.p.oc;
    size_t rows = 2 * (size_t)f.nt + (size_t)f.first;
    unsigned char *dst = r.out_base + (out_index(r, r.b0) + f.off * n + f.p0) * es;
    HYPROF_CUDA_CHECK(cudaMemcpy2D(dst, n * es, out + f.off * oc * es, oc * es,
                                   (f.p1 - f.p0) * es, rows, cudaMemcpyDeviceToHost));
    return HYPROF_OK;
}

/* The staging back to the pool once the copies into it are over. */
void staging_release(Run &r)
{
    if (!r.stage.cached)
        return;
    for (Event &e : r.stage.ev)
        e.reset(); /* the copies into the pool's buffers are over */
    (void)cudaDeviceSynchronize();
    for (StagingPool::Buf &b : r.stage.pooled) {
        StagingPool::give(b);
        b = StagingPool::Buf();
    }
    r.stage.cached = false;
}

} /* namespace eap */
