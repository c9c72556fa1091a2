/* Device-side stage times from CUDA events, for the debug log (and through
 * it hyprof_bench's JSON): no profiler needed. Intervals are opened and
 * closed on any stream as work is queued (never inside a stream capture),
 * and read once the caller knows they have completed; their events are
 * recycled. Internal to the CUDA sources. */
#ifndef HYPROF_KERNELS_STAGE_CLOCK_H
#define HYPROF_KERNELS_STAGE_CLOCK_H

#include "cuda_util.h"

#include <vector>

namespace hyprof_cuda {

template <int N> class StageClock {
  public:
    StageClock() = default;
    StageClock(const StageClock &) = delete;
    StageClock &operator=(const StageClock &) = delete;
    ~StageClock()
    {
        for (Interval &iv : open_) {
            give(iv.a);
            give(iv.b);
        }
        for (cudaEvent_t e : pool_)
            (void)cudaEventDestroy(e);
    }

    /* Opens an interval of `stage` on stream s; *id names it for end(). */
    hyprof_status_t begin(hyprof_ctx_t *ctx, const char *op, int stage, cudaStream_t s,
                          size_t *id)
    {
        Interval iv = {stage, NULL, NULL};
        HYPROF_TRY(take(ctx, op, &iv.a));
        open_.push_back(iv);
        *id = open_.size() - 1;
        HYPROF_CUDA_CHECK(cudaEventRecord(iv.a, s));
        return HYPROF_OK;
    }
    hyprof_status_t end(hyprof_ctx_t *ctx, const char *op, size_t id, cudaStream_t s)
    {
        HYPROF_TRY(take(ctx, op, &open_[id].b));
        HYPROF_CUDA_CHECK(cudaEventRecord(open_[id].b, s));
        return HYPROF_OK;
    }
    /* Once every interval recorded so far has completed: adds their times to
     * the stage totals and the first-to-last time to the span. */
    hyprof_status_t collect(hyprof_ctx_t *ctx, const char *op)
    {
        if (open_.empty())
            return HYPROF_OK;
        float span = 0.0f;
        for (Interval &iv : open_) {
            if (!iv.b)
                continue;
            float t = 0.0f, u = 0.0f;
            HYPROF_CUDA_CHECK(cudaEventSynchronize(iv.b));
            HYPROF_CUDA_CHECK(cudaEventElapsedTime(&t, iv.a, iv.b));
            HYPROF_CUDA_CHECK(cudaEventElapsedTime(&u, open_[0].a, iv.b));
            ms_[iv.stage] += t;
            span = u > span ? u : span;
        }
        span_ += span;
        for (Interval &iv : open_) {
            give(iv.a);
            give(iv.b);
        }
        open_.clear();
        return HYPROF_OK;
    }
    double ms(int stage) const { return ms_[stage]; }
    double span_ms() const { return span_; }

  private:
    struct Interval {
        int stage;
        cudaEvent_t a, b;
    };
    std::vector<Interval> open_;
    std::vector<cudaEvent_t> pool_;
    double ms_[N] = {};
    double span_ = 0.0;

    hyprof_status_t take(hyprof_ctx_t *ctx, const char *op, cudaEvent_t *e)
    {
        if (!pool_.empty()) {
            *e = pool_.back();
            pool_.pop_back();
            return HYPROF_OK;
        }
        HYPROF_CUDA_CHECK(cudaEventCreate(e));
        return HYPROF_OK;
    }
    void give(cudaEvent_t e)
    {
        if (e)
            pool_.push_back(e);
    }
};

/* Theoretical DRAM bandwidth of the current device in GB/s (0 if unknown):
 * 2 transfers per memory clock (DDR/HBM) x bus width. */
static inline double device_peak_gbs()
{
    int dev = 0, khz = 0, bits = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0.0;
    }
    return 2.0 * (double)khz * 1e3 * (double)bits / 8.0 / 1e9;
}

} /* namespace hyprof_cuda */

#endif
