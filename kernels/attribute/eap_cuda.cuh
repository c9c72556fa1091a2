/* The CUDA attribute profiles' host side, private to kernels/attribute:
 * the state of one call (Run, made of the small structs below) and the
 * functions of each stage, one file each:
 *   eap_plan.cu      the plan (every automatic choice) and the device buffers
 *   eap_tree.cu      the trees (tile floods, or the pixels' flooding)
 *   eap_attribute.cu the nodes' attributes
 *   eap_filter.cu    the attribute filters (area, std, diagonal, inertia)
 *   eap_transfer.cu  the planes' downloads (page-locked output or staging)
 *   eap_host.cu      the orchestration: batches, pipelines, bands one by one
 * The GPU path is described in docs/internals/eap.md. */
#ifndef HYPROF_EAP_CUDA_CUH
#define HYPROF_EAP_CUDA_CUH

#include "../core/cuda_util.h"
#include "attribute/eap_impl.h"
#include "eap_bodies.cuh"
#include "../core/output_prep.cuh"
#include "../core/staging.cuh"

#include <chrono>
#include <memory>
#include <vector>

namespace eap {

using namespace hyprof_cuda;

const int kThreads = 256;          /* threads a block of the per-pixel kernels */
const unsigned kFloodLevels = 256; /* up to this many levels: shared histograms, tile floods */
const int kStages = 4;             /* staging pieces in flight (8-bit planes) */
const size_t kStageBytes = (size_t)8 << 20;
const size_t kPinAll = (size_t)8 << 30;   /* outputs up to this are page-locked whole */
const size_t kPinChunk = (size_t)1 << 30; /* larger ones a piece at a time for its copy */

/* Thread (p, img) of a per-pixel kernel: pixel p of image img of the batch. */
#define EAP_IDX                                                                           \
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;                             \
    if (p >= a.n)                                                                         \
        return;                                                                           \
    int img = (int)blockIdx.y

/* What plan() (eap_plan.cu) decides for a call. */
struct Plan {
    size_t n = 0;            /* pixels of a band */
    size_t nb = 0;           /* bands a batch */
    size_t oc = 0;           /* pixels of the planes on the device: n, or a chunk (nb = 1) */
    size_t esize = 4;        /* bytes of an output element */
    size_t dsize = 4;        /* bytes of a plane element on the device */
    size_t nthr = 0;         /* thresholds of all filters */
    size_t ecap = 0;         /* ord per image: n, or the global edges' capacity */
    size_t out_bytes = 0;
    int slots = 1;           /* device planes buffers (each: 2, pipelined) */
    int rounds = 8;          /* pointer-jumping rounds: log2(levels) */
    bool each = false;       /* hyprof_attribute_profiles_bands: a band at a time */
    bool narrow = false;     /* 8-bit planes on the device, widened on the host */
    bool caller_pinned = false; /* the caller's output is page-locked */
    bool pinned = false;     /* the output page-locked for the call */
    bool ftile = false;      /* the tile floods, else the pixels' flooding */
    bool need_cnt = false, need_std = false, need_inertia = false, need_box = false;
};

/* A buffer carved from the call's allocation. */
template <typename T> class Slice {
  public:
    T *get() const { return p_; }
    void set(T *p) { p_ = p; }
    void reset() { p_ = nullptr; }

  private:
    T *p_ = nullptr;
};

/* The device buffers, all carved from one allocation (from the arena cache,
 * or the call's own), and the host copies of the counting sorts' counts. */
struct Buffers {
    Slice<uint32_t> ord, hist, off;
    Slice<uint8_t> mask, k0, k1, node;
    Slice<uint16_t> lev;
    Slice<uint32_t> par, aux, aux2, pend, cnt, box;
    Slice<u64> s64;
    Slice<double> thr;
    Slice<int> error;
    Slice<unsigned char> out;
    void *arena = nullptr;
    size_t arena_bytes = 0;
    int device = -1;
    std::vector<uint32_t> hist_h, off_h, maxc;
};

/* Timing events of one batch's stages (upload, tree, attributes, filters,
 * download), summed over the batches and logged at debug level. Marks on
 * stream 0, in order: mark(s) starts stage s (5: the end); the time to the
 * next mark counts towards stage s, so that a pipelined batch's stages may
 * alternate (attributes, filters, attributes, ... a group of bands each). */
class StageTimer {
  public:
    static const int kCount = 5;
    StageTimer() = default;
    StageTimer(const StageTimer &) = delete;
    StageTimer &operator=(const StageTimer &) = delete;
    ~StageTimer();
    hyprof_status_t mark(hyprof_ctx_t *ctx, const char *op, int stage);
    /* The batch's last mark, recorded (the copies on another stream time
     * themselves against it). */
    cudaEvent_t last() const { return used_ ? ev_[used_ - 1] : NULL; }
    /* After the batch's last mark: adds its stage times. */
    hyprof_status_t add(hyprof_ctx_t *ctx, const char *op);
    const double *ms() const { return ms_; }

  private:
    std::vector<cudaEvent_t> ev_;
    std::vector<int> stage_;
    size_t used_ = 0;
    double ms_[kCount] = {};
};

/* With HYPROF_LOG=debug: a wait after every launch and a line naming the
 * kernel, the time into the batch and the error bits, so that a kernel that
 * does not finish is named by the last line. */
struct Trace {
    bool on = false;
    cudaEvent_t start = NULL, now = NULL;
};

/* Page-locked staging of the 8-bit planes' downloads (kStages pieces). */
struct PlaneStaging {
    PinnedBuffer<uint8_t> own[kStages]; /* when the pool's cannot be had */
    StagingPool::Buf pooled[kStages];  /* the pool's (cached) */
    uint8_t *ptr[kStages] = {};
    bool cached = false;
    Event ev[kStages];
    size_t bytes = 0;
};

/* hyprof_attribute_profiles_bands with two planes slots: band b's compute
 * on stream 0 while band b - 1's planes go to the host on copy; the next
 * band's levels go up on up meanwhile. */
struct EachPipe {
    Stream copy, up;
    Event up_done, lev_free;
    DeviceBuffer<uint16_t> lev_next; /* the next band's levels */
    size_t prefetched = 0;           /* band + 1 whose levels are in lev_next (0: none) */
    bool pin_each = false;           /* the levels page-locked band by band */
    std::vector<std::unique_ptr<HostPin>> in_pins;
    Event done[2];                   /* a slot's planes computed */
    cudaEvent_t dl[2] = {NULL, NULL}; /* timing of a band's download */
};

/* The pipelined batch's groups: a group's planes computed, its copy's start
 * and end (timing). */
struct GroupPipe {
    Stream copy2; /* hybrid: the 8-bit groups' downloads */
    std::vector<std::unique_ptr<Event>> done;
    std::vector<cudaEvent_t> ev;
    double dl_ms = 0.0;   /* the copies, summed */
    double tail_ms = 0.0; /* from the compute's end to the last copy's */
    size_t gb = 0;        /* bands a group (0: no batch was pipelined) */
};

/* Host times for the debug summary. */
struct HostTimes {
    double alloc = 0.0, stage = 0.0, wait = 0.0, widen = 0.0, each_dl = 0.0, pin_each = 0.0;
};

/* One call. */
struct Run {
    Run(hyprof_ctx_t *c, const hyprof_eap_args_t *args);
    ~Run();
    Run(const Run &) = delete;
    Run &operator=(const Run &) = delete;

    hyprof_ctx_t *ctx;
    const hyprof_eap_args_t *a;
    const char *op;
    Plan p;
    Buffers d;
    Args g{};                 /* the kernels' arguments for the current batch */
    size_t b0 = 0;            /* the batch's first band */
    unsigned char *out_base = nullptr;
    OutputPrep *prep = nullptr; /* run()'s (eap_host.cu) */
    Trace trace;
    StageTimer timer;
    PlaneStaging stage;
    EachPipe each;
    GroupPipe pipe;
    HostTimes t;
};

/* eap_plan.cu */
hyprof_status_t plan(Run &r);
hyprof_status_t alloc_buffers(Run &r);
void release_buffers(Run &r);
void give_arena(Run &r);

/* eap_tree.cu: the trees of images [0, nimg) of the batch, canonical. */
hyprof_status_t build_trees(Run &r, int nimg);
/* eap_attribute.cu: the nodes' attributes. */
hyprof_status_t accumulate(Run &r, int nimg);
/* eap_filter.cu: every filter's planes into dev (device), 8-bit when
 * `narrow`, else in the output's type; chunked planes go to the output. */
hyprof_status_t filters(Run &r, int nimg, unsigned char *dev, bool narrow);

/* eap_transfer.cu */
hyprof_status_t download(Run &r, unsigned char *dst, const unsigned char *src, size_t bytes);
hyprof_status_t download_narrow(Run &r, size_t first, size_t count, const uint8_t *src,
                                cudaStream_t stream);
hyprof_status_t download_chunk(Run &r, const Filter &f, const unsigned char *out);
void staging_release(Run &r);

/* eap_host.cu */
hyprof_status_t traced(Run &r, const char *kernel);
/* The batch's planes: to the output, or (each) to the one band's planes of
 * out16, handed over after each band. */
inline size_t out_index(const Run &r, size_t b0) { return r.p.each ? 0 : b0 * r.a->planes * r.p.n; }
inline double ms_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
        .count();
}
inline dim3 pixel_grid(const Run &r, int nimg)
{
    return dim3((unsigned)((r.p.n + kThreads - 1) / kThreads), nimg);
}

} /* namespace eap */

#endif
