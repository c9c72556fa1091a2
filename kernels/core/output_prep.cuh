/* The host side of a CUDA operation's output, prepared on a helper thread
 * while the device computes, so that neither the page faults nor the
 * page-locking come before the first download.
 *
 * - Touch: the output's fresh pages are touched (one write per page, or one
 *   madvise(MADV_POPULATE_WRITE) per chunk where the kernel has it) by
 *   `threads` threads, in address-aligned 2 MiB chunks (huge pages where the
 *   kernel allows them), in the order the downloads need them: the byte
 *   ranges of `ranges` taken in turn, each from its start, then the rest in
 *   address order. The output is overwritten entirely, so the zero written
 *   into each page is harmless.
 * - Page-lock (`pin`): after the touch, cudaHostRegister on `device`, until
 *   unlock().
 * - A caller's page-locked output is resident: nothing to touch or lock,
 *   and no helper thread.
 *
 * Waiting: wait() (any thread) or join() (the thread that called start())
 * for all of it; ensure() for the pages of one piece only, touching a chunk
 * itself when no prefault thread has taken it yet. */
#ifndef HYPROF_CORE_OUTPUT_PREP_CUH
#define HYPROF_CORE_OUTPUT_PREP_CUH

#include "cuda_util.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace hyprof_cuda {

struct OutputPrepPlan {
    void *p = nullptr;
    size_t bytes = 0;
    bool caller_pinned = false; /* the caller's page-locked memory: nothing to do */
    bool touch = true;          /* touch the pages */
    bool populate = false;      /* a chunk by MADV_POPULATE_WRITE first, writes where it fails */
    int threads = 1;            /* touching threads, the helper thread among them */
    std::vector<std::pair<size_t, size_t>> ranges; /* byte ranges touched first, in turn */
    bool pin = false;                              /* page-lock after the touch */
    int device = 0;                                /* the device current for the page-locking */
};

class OutputPrep {
  public:
    OutputPrep() : fut_(pr_.get_future().share()) {}
    OutputPrep(const OutputPrep &) = delete;
    OutputPrep &operator=(const OutputPrep &) = delete;
    ~OutputPrep()
    {
        join();
        unlock();
    }
    void start(const OutputPrepPlan &plan);
    void wait() const { fut_.wait(); }
    bool ready() const
    {
        return fut_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
    void join()
    {
        if (t_.joinable())
            t_.join();
    }
    /* the pages of [q, q + len) inside the output are touched */
    void ensure(const void *q, size_t len) const;
    /* After the copies (or on an early return, after waiting for them). */
    void unlock();
    double ms() const { return ms_; }
    double prefault_ms() const { return prefault_ms_; }
    bool caller_pinned() const { return caller_pinned_; }
    /* the output through staging (not the caller's page-locked memory) */
    bool staged() const { return !caller_pinned_; }

  private:
    static constexpr size_t kChunk = (size_t)2 << 20;
    void plan(void *p, size_t bytes, const std::vector<std::pair<size_t, size_t>> &ranges);
    size_t chunk_of(const void *q) const { return (size_t)((uintptr_t)q / kChunk - first_); }
    bool claim(size_t c) const;
    void touch(size_t c) const;
    void prefault();
    void work();
    std::promise<void> pr_;
    std::shared_future<void> fut_;
    std::thread t_;
    int threads_ = 1;
    bool touch_ = false, populate_ = false, pin_ = false;
    int device_ = 0;
    char *p_lo_ = NULL, *p_hi_ = NULL;
    uintptr_t first_ = 0;
    size_t nchunk_ = 0;
    std::unique_ptr<std::atomic<unsigned char>[]> st_;
    std::vector<size_t> order_;
    std::atomic<size_t> next_{0};
    void *locked_ = nullptr;
    double ms_ = 0.0, prefault_ms_ = 0.0;
    bool caller_pinned_ = false;
};

} /* namespace hyprof_cuda */

#endif
