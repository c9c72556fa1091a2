/* The output's preparation on a helper thread (kernels/core/output_prep.cuh):
 * the chunk plan, the touching threads and the page-locking. */
#include "output_prep.cuh"

#include <sys/mman.h>

namespace hyprof_cuda {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
        .count();
}

} /* namespace */

void OutputPrep::start(const OutputPrepPlan &plan_in)
{
    caller_pinned_ = plan_in.caller_pinned;
    if (caller_pinned_) {
        pr_.set_value();
        return;
    }
    threads_ = plan_in.threads;
    populate_ = plan_in.populate;
    pin_ = plan_in.pin;
    device_ = plan_in.device;
    p_lo_ = (char *)plan_in.p;
    p_hi_ = p_lo_ + plan_in.bytes;
    if (plan_in.touch)
        plan(plan_in.p, plan_in.bytes, plan_in.ranges);
    try {
        t_ = std::thread(&OutputPrep::work, this);
    } catch (...) {
        work();
    }
}

void OutputPrep::unlock()
{
    if (locked_) {
        (void)cudaDeviceSynchronize(); /* an early return may leave copies in flight */
        (void)cudaHostUnregister(locked_);
    }
    locked_ = nullptr;
    (void)cudaGetLastError();
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
    first_ = (uintptr_t)p / kChunk;
    nchunk_ = (size_t)((uintptr_t)(p_hi_ - 1) / kChunk - first_ + 1);
    st_.reset(new std::atomic<unsigned char>[nchunk_]);
    for (size_t c = 0; c < nchunk_; ++c)
        st_[c].store(0, std::memory_order_relaxed);
    std::vector<std::pair<size_t, size_t>> at; /* per range: next chunk, last chunk */
    for (const auto &r : ranges)
        if (r.second > r.first)
            at.push_back(std::make_pair(chunk_of(p_lo_ + r.first), chunk_of(p_lo_ + r.second - 1)));
    for (bool more = true; more;) { /* the ranges in turn */
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
    bool done = false;
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    /* the chunk's pages in one call (Linux >= 5.14), without a fault per
     * page; the pages holding its first and last bytes are the output's too
     * (so mapped), whole */
    if (populate_ && hi > lo) {
        const uintptr_t s0 = (uintptr_t)lo & ~(uintptr_t)4095,
                        s1 = ((uintptr_t)hi + 4095) & ~(uintptr_t)4095;
        done = madvise((void *)s0, s1 - s0, MADV_POPULATE_WRITE) == 0;
    }
#endif
    if (!done) {
        for (volatile char *q = lo; q < hi; q += 4096) /* one write per page: it is zero */
            *q = 0;
        if (hi > lo)
            hi[-1] = 0; /* the last page when lo is not page-aligned */
    }
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
    const bool pin = pin_ && cudaSetDevice(device_) == cudaSuccess;
    const auto t1 = std::chrono::steady_clock::now();
    if (touch_)
        prefault();
    prefault_ms_ = ms_since(t1);
    if (pin && p_hi_ > p_lo_) {
        if (cudaHostRegister(p_lo_, (size_t)(p_hi_ - p_lo_), cudaHostRegisterDefault) ==
            cudaSuccess)
            locked_ = p_lo_;
        (void)cudaGetLastError();
    }
    ms_ = ms_since(t0);
    pr_.set_value();
}

} /* namespace hyprof_cuda */
