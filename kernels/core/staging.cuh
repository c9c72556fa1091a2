/* Page-locked staging shared by the CUDA operations' downloads: a process-wide
 * pool of portable page-locked buffers (StagingPool) and one buffer taken
 * from it for a scope (Staging). */
#ifndef HYPROF_CORE_STAGING_CUH
#define HYPROF_CORE_STAGING_CUH

#include "cuda_util.h"

#include <mutex>
#include <vector>

namespace hyprof_cuda {

/* Page-locked staging, kept for the next call: pinning fresh memory costs
 * about as much as the copy it speeds up, so the buffers (portable: any
 * device may read them) are allocated once per process and reused, at most
 * kPoolBytes of them. */
class StagingPool {
  public:
    static constexpr size_t kPoolBytes = (size_t)256 << 20;
    struct Buf {
        void *p = NULL;
        size_t bytes = 0;
    };
    static bool take(size_t bytes, Buf *b);
    /* The copies from b must be done. */
    static void give(Buf b);

  private:
    static std::mutex &mu();
    static std::vector<Buf> &list();
};

/* One staging buffer, back to the pool once `stream`'s copies from it are done. */
class Staging {
  public:
    Staging() = default;
    Staging(const Staging &) = delete;
    Staging &operator=(const Staging &) = delete;
    ~Staging();
    bool take(size_t bytes, cudaStream_t s)
    {
        s_ = s;
        return StagingPool::take(bytes, &b_);
    }
    template <typename T = float> T *get() const { return static_cast<T *>(b_.p); }

  private:
    StagingPool::Buf b_;
    cudaStream_t s_ = NULL;
};

} /* namespace hyprof_cuda */

#endif
