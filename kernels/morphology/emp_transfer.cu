/* Host transfers of the CUDA chain (kernels/morphology/emp_cuda.cuh): the
 * staged download of the float output planes (device -> staging of
 * kernels/core/staging.cuh -> output, the host copying one piece out while
 * the next piece's copy runs). */
#include "emp_cuda.cuh"

namespace emp_cuda {

__thread cudaStream_t t_pool_stream = NULL;

/* ---- the staged download --------------------------------------------------------------- */

/* Downloads `count` floats from the device at src to the host at dst through
 * three pinned staging slots of piece_floats(): the copy of one slot (on cs) runs
 * while host threads copy the previous one out. Each piece first waits for
 * the event of the first group whose end (offset in floats, increasing in
 * `ready`) covers it. */
hyprof_status_t EmpDevice::download_staged(const float *src, float *dst, size_t count,
                                           cudaStream_t cs, const Ready &ready)
{
    constexpr int NS = 3;
    const size_t piece = piece_floats(), np = div_up(count, piece);
    Staging stg[NS];
    Event got[NS];
    bool pinned = true;
    for (int k = 0; k < NS && (size_t)k < np; ++k) {
        HYPROF_TRY(got[k].create(ctx, op));
        pinned = pinned && stg[k].take((piece < count ? piece : count) * sizeof(float), cs);
    }
    if (!pinned)
        wait_output(); /* the prefault writes the pages: it must be done */
    auto out = [&](size_t o, size_t len, int k) {
        const auto w0 = std::chrono::steady_clock::now();
        prep->ensure(dst + o, len * sizeof(float)); /* only these pages */
        waited_ms += ms_since(w0);
        const auto u0 = std::chrono::steady_clock::now();
        hyprof__pack_cols(c.threads.unpack, dst + o, stg[k].get(), len, len, 1, 1);
        unpack_ms += ms_since(u0);
    };
    size_t r = 0;
    for (size_t j = 0; j < np; ++j) {
        const size_t off = j * piece, len = count - off < piece ? count - off : piece;
        while (r + 1 < ready.size() && ready[r].first < off + len)
            ++r;
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(cs, ready[r].second, 0));
        if (!pinned) {
            const int dd = d2h.begin(cs);
            HYPROF_CUDA_CHECK(cudaMemcpyAsync(dst + off, src + off, len * sizeof(float),
                                              cudaMemcpyDeviceToHost, cs));
            d2h.end(dd, cs);
            continue;
        }
        const int k = (int)(j % NS);
        if (j >= (size_t)NS) { /* slot k holds piece j - NS: out with it */
            const size_t o = (j - NS) * piece;
            HYPROF_CUDA_CHECK(cudaEventSynchronize(got[k].get()));
            out(o, piece, k);
        }
        const int dd = d2h.begin(cs);
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(stg[k].get(), src + off, len * sizeof(float),
                                          cudaMemcpyDeviceToHost, cs));
        d2h.end(dd, cs);
        HYPROF_CUDA_CHECK(cudaEventRecord(got[k].get(), cs));
    }
    for (size_t j = np > (size_t)NS ? np - NS : 0; pinned && j < np; ++j) {
        const int k = (int)(j % NS);
        const size_t o = j * piece, len = count - o < piece ? count - o : piece;
        HYPROF_CUDA_CHECK(cudaEventSynchronize(got[k].get()));
        out(o, len, k);
    }
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(cs));
    return HYPROF_OK;
}

} /* namespace emp_cuda */
