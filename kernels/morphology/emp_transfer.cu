/* Host transfers of the CUDA chain (kernels/morphology/emp_cuda.cuh): the
 * output's preparation (prefaulting its pages while the devices compute),
 * the pool of page-locked staging buffers, and the staged download of the
 * float output planes (device -> staging -> output, the host copying one
 * piece out while the next piece's copy runs). */
#include "emp_cuda.cuh"

#include <sys/mman.h>

namespace emp_cuda {

/* ---- OutputPrep ------------------------------------------------------------------------ */

OutputPrep::~OutputPrep()
{
    if (t_.joinable())
        t_.join();
}

void OutputPrep::start(int prefault_threads, void *p, size_t bytes,
                       const std::vector<std::pair<size_t, size_t>> &ranges)
{
    caller_pinned_ = hyprof__cuda_is_pinned(p) != 0;
    if (caller_pinned_) {
        pr_.set_value();
        return;
    }
    threads_ = prefault_threads;
    plan(p, bytes, ranges);
    try {
        t_ = std::thread(&OutputPrep::work, this);
    } catch (...) {
        work();
    }
}

void OutputPrep::ensure(const void *q, size_t len) const
{
    if (!touch_ || len == 0)
        return;
    const size_t c0 = chunk_of(q), c1 = chunk_of((const char *)q + len - 1);
    for (size_t c = c0; c <= c1 && c < nchunk_; ++c) {
        if (st_[c].load(std::memory_order_acquire) == 2)
            continue;
        if (claim(c))
            touch(c);
        else
            while (st_[c].load(std::memory_order_acquire) != 2)
                std::this_thread::yield();
    }
}

/* the chunks and the order the prefault threads take them in */
void OutputPrep::plan(void *p, size_t bytes, const std::vector<std::pair<size_t, size_t>> &ranges)
{
    touch_ = bytes > 0;
    if (!touch_)
        return;
    p_lo_ = (char *)p;
    p_hi_ = p_lo_ + bytes;
    first_ = (uintptr_t)p / kChunk;
    nchunk_ = (size_t)((uintptr_t)(p_hi_ - 1) / kChunk - first_ + 1);
    st_.reset(new std::atomic<unsigned char>[nchunk_]);
    for (size_t c = 0; c < nchunk_; ++c)
        st_[c].store(0, std::memory_order_relaxed);
    std::vector<std::pair<size_t, size_t>> at; /* per share: next chunk, last chunk */
    for (const auto &r : ranges)
        if (r.second > r.first)
            at.push_back(std::make_pair(chunk_of(p_lo_ + r.first), chunk_of(p_lo_ + r.second - 1)));
    for (bool more = true; more;) { /* the shares in turn */
        more = false;
        for (auto &x : at)
            if (x.first <= x.second) {
                order_.push_back(x.first++);
                more = true;
            }
    }
    for (size_t c = 0; c < nchunk_; ++c) /* anything outside the ranges */
        order_.push_back(c);
}

bool OutputPrep::claim(size_t c) const
{
    unsigned char e = 0;
    return st_[c].compare_exchange_strong(e, 1, std::memory_order_acq_rel);
}

void OutputPrep::touch(size_t c) const
{
    const uintptr_t a = (first_ + c) * kChunk, b = a + kChunk;
    char *lo = (uintptr_t)p_lo_ > a ? p_lo_ : (char *)a;
    char *hi = (uintptr_t)p_hi_ < b ? p_hi_ : (char *)b;
    for (volatile char *q = lo; q < hi; q += 4096) /* one write per page: it is zero */
        *q = 0;
    if (hi > lo)
        hi[-1] = 0; /* the last page when lo is not page-aligned */
    st_[c].store(2, std::memory_order_release);
}

void OutputPrep::prefault()
{
    /* 2 MiB pages where the kernel allows them: 512 times fewer faults */
    const uintptr_t a = ((uintptr_t)p_lo_ + kChunk - 1) & ~(kChunk - 1),
                    e = (uintptr_t)p_hi_ & ~(kChunk - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
    auto loop = [this] {
        for (;;) {
            const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
            if (i >= order_.size())
                return;
            if (claim(order_[i]))
                touch(order_[i]);
        }
    };
    std::vector<std::thread> th;
    try {
        for (int t = 1; t < threads_; ++t)
            th.emplace_back(loop);
    } catch (...) { /* fewer threads */
    }
    loop();
    for (auto &t : th)
        t.join();
}

void OutputPrep::work()
{
    const auto t0 = std::chrono::steady_clock::now();
    if (touch_)
        prefault();
    prefault_ms_ = ms_since(t0);
    pr_.set_value();
}

/* ---- staging --------------------------------------------------------------------------- */

bool StagingPool::take(size_t bytes, Buf *b)
{
    {
        std::lock_guard<std::mutex> l(mu());
        std::vector<Buf> &v = list();
        for (size_t i = 0; i < v.size(); ++i)
            if (v[i].bytes >= bytes) {
                *b = v[i];
                v.erase(v.begin() + (ptrdiff_t)i);
                return true;
            }
    }
    bytes = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1); /* reusable */
    if (cudaHostAlloc(&b->p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        b->p = NULL;
        return false;
    }
    b->bytes = bytes;
    return true;
}

void StagingPool::give(Buf b)
{
    if (!b.p)
        return;
    {
        std::lock_guard<std::mutex> l(mu());
        std::vector<Buf> &v = list();
        size_t held = 0;
        for (const Buf &x : v)
            held += x.bytes;
        if (held + b.bytes <= kPoolBytes) {
            try {
                v.push_back(b);
                return;
            } catch (...) {
            }
        }
    }
    (void)cudaFreeHost(b.p);
    (void)cudaGetLastError();
}

std::mutex &StagingPool::mu()
{
    static std::mutex m;
    return m;
}

std::vector<StagingPool::Buf> &StagingPool::list()
{
    static std::vector<Buf> *v = new std::vector<Buf>(); /* never destroyed: no exit order issue */
    return *v;
}

Staging::~Staging()
{
    if (b_.p) {
        (void)cudaStreamSynchronize(s_);
        (void)cudaGetLastError();
        StagingPool::give(b_);
    }
}

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
