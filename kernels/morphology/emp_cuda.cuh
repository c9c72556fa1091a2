/* Declarations shared by the .cu files of the CUDA EMP / W-MCD chain
 * (kernels/morphology/emp*.cu; the stages: docs/internals/emp.md):
 *
 *   emp.cu              the entry point, the shares and their threads, the
 *                       plan (every automatic choice), setup and trace
 *   emp_features.cu     spectral stage, statistics, quantisation, exchange
 *   emp_reconstruct.cu  markers, reconstruction by dilation, finish
 *   emp_denoise.cu      the W-MCD denoising of the EMP planes
 *   emp_transfer.cu     staged downloads (staging and output preparation:
 *                       kernels/core/staging.cuh, kernels/core/output_prep.cuh)
 *
 * Kernels stay inside the file that launches them (no relocatable device
 * code); the host classes below are shared. */
#ifndef HYPROF_KERNELS_EMP_CUDA_CUH
#define HYPROF_KERNELS_EMP_CUDA_CUH

#include "morphology/emp_impl.h"
#include "../core/cuda_util.h"
#include "../core/output_prep.cuh"
#include "../core/staging.cuh"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace emp_cuda {

using namespace hyprof_cuda;

constexpr int kTile = 32;            /* reconstruction tile side (one warp) */
constexpr int kStride = kTile + 4;   /* shared row stride: 9 words, no bank conflicts */
constexpr int kMaxFilter = 32;       /* taps of the 2-D denoising's filters */

/* Per feature band: its valid min and max as order-preserving unsigned keys
 * of the float bits, and the first valid pixel that is not finite. */
struct FeatStats {
    unsigned lo, hi;
    unsigned long long bad;
};

/* One order statistic of the radix select of the median of |HH1|: the bits
 * found so far and the rank left inside them. */
struct SelQ {
    unsigned long long prefix;
    long long rank;
};

static inline dim3 grid2(size_t x, size_t y, size_t z, dim3 b)
{
    return dim3((unsigned)div_up(x, b.x), (unsigned)div_up(y, b.y), (unsigned)z);
}

static inline double ms_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
        .count();
}

/* ---- the plan: every automatic choice (defined in emp.cu) ------------------------------ */

/* Host threads per share packing the input chunks (pack) and copying the
 * output out (unpack), and the prefault threads touching the output. */
struct HostThreads {
    int pack, unpack, prefault;
};
HostThreads plan_host_threads(const hyprof_ctx_t *ctx, size_t nshares);
/* Pixels per input chunk of the spectral stage. */
size_t chunk_pixels(size_t bands, size_t np);
/* Floats per piece of a staged download. */
size_t piece_floats();
/* The denoising's planes per group (0: not even one plane fits) and whether
 * the whole float output stays on the device. */
struct DenoisePlan {
    size_t group;
    bool whole;
};
DenoisePlan plan_denoise(size_t budget, size_t planes, size_t n, size_t per_plane);
/* Whether the share's large buffers come from the device's stream-ordered
 * pool (set up on first use). */
bool pool_on(hyprof_ctx_t *ctx, const char *op, int device);

/* ---- host transfers (emp_transfer.cu) -------------------------------------------------- */

/* The share's compute stream while its thread runs, when the pool is on
 * (__thread: a plain TLS slot, no C++ initialisation wrapper). */
extern __thread cudaStream_t t_pool_stream;

/* A DeviceBuffer on the share's compute stream (t_pool_stream) when the
 * pool is on: stream-ordered allocation and release. */
template <typename T> class PoolBuffer : public DeviceBuffer<T> {
  public:
    hyprof_status_t alloc(hyprof_ctx_t *ctx, const char *op, size_t count)
    {
        return DeviceBuffer<T>::alloc(ctx, op, count, t_pool_stream);
    }
};

/* ---- the shares ------------------------------------------------------------------------ */

/* A barrier for the device threads. A failing thread breaks it, so that the
 * others stop instead of waiting for it forever. */
class Rendezvous {
  public:
    explicit Rendezvous(size_t n) : n_(n) {}
    bool arrive();
    void brk();

  private:
    std::mutex m_;
    std::condition_variable cv_;
    size_t n_, count_ = 0, gen_ = 0;
    bool broken_ = false;
};

/* The seed's Fig. 5 decomposition. Each share (one host thread and one
 * device; a device may hold several shares) takes a block of image rows for
 * the spectral stage: it uploads only its rows of the cube, transforms them
 * and quantises its rows of every feature once the shares have pooled their
 * minima and maxima. Then it takes a range of feature bands for the EMP and
 * the denoising and pulls its bands' rows from every share
 * (cudaMemcpyPeerAsync: direct with peer access, else through the host). */
struct Share {
    int device = 0;
    size_t r0 = 0, r1 = 0;   /* rows of the spectral stage */
    size_t b0 = 0, b1 = 0;   /* feature bands of the EMP and denoising */
    std::vector<FeatStats> stats;
    const uint8_t *qreg = NULL; /* its rows of every quantised feature (device) */
    cudaEvent_t quantised = NULL;
    bool aborted = false;    /* stopped because another share failed */
};

struct Chain {
    const hyprof_emp_args_t *a;
    const hyprof_ctx_t *main;
    const OutputPrep *prep;
    std::vector<Share> sh;
    Rendezvous rv;
    HostThreads threads;
    Chain(const hyprof_emp_args_t *a, const hyprof_ctx_t *main, const OutputPrep *prep,
          size_t nshares);
    size_t pixels(size_t d) const { return (sh[d].r1 - sh[d].r0) * a->width; }
    /* The pooled statistics: each feature's min and max (lohi, 2 per feature)
     * or, when a valid value is not finite, the feature and the pixel. */
    bool pooled(std::vector<double> &lohi, size_t *bad_band, unsigned long long *bad_pixel) const;
};

/* Event pairs around each kernel or copy of one kind (tracing only): their
 * durations add up to that kind's device time without the waits in between
 * (the compute stream waiting for an upload, a copy for the host). */
class Spans {
  public:
    Spans() = default;
    Spans(const Spans &) = delete;
    Spans &operator=(const Spans &) = delete;
    ~Spans();
    void enable() { on_ = true; }
    int begin(cudaStream_t s);
    void end(int i, cudaStream_t s) const
    {
        if (i >= 0)
            (void)cudaEventRecord(v_[(size_t)i].second, s);
    }
    /* after the device has finished */
    double ms() const;

  private:
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> v_;
    bool on_ = false;
};

/* Level sizes of the 2-D pyramid. */
struct Pyramid {
    int J;
    size_t hs[64], ws[64];
    Pyramid(size_t h, size_t w, const int levels[3])
    {
        J = levels[0] > levels[1] ? levels[0] : levels[1];
        J = levels[2] > J ? levels[2] : J;
        hs[0] = h;
        ws[0] = w;
        for (int l = 1; l <= J; ++l) {
            hs[l] = (hs[l - 1] + 1) / 2;
            ws[l] = (ws[l - 1] + 1) / 2;
        }
    }
    size_t m(int l) const { return hs[l] * ws[l]; }
    /* doubles per plane: the pyramid, L/H, two inverse buffers */
    size_t doubles(size_t n) const
    {
        size_t t = 2 * hs[1] * ws[0] + 2 * n;
        for (int l = 1; l <= J; ++l)
            t += 4 * m(l);
        return t;
    }
};

/* The work buffers of a group of at most G planes, allocated once (a
 * cudaFree inside the loop would stall the overlapped downloads). */
struct DenoiseBufs {
    PoolBuffer<double> lh, t1, t2, lambda;
    std::vector<PoolBuffer<double>> lev;
    DeviceBuffer<SelQ> sel;
    DeviceBuffer<unsigned long long> hist;
    hyprof_status_t alloc(hyprof_ctx_t *ctx, const char *op, const Pyramid &py, size_t n,
                          size_t G);
};

/* One share's run on its device: setup, features (spectral stage,
 * statistics, quantisation, exchange), profiles (markers, reconstruction)
 * and the EMP's float output or its denoising. */
class EmpDevice {
  public:
    EmpDevice(hyprof_ctx_t *ctx, Chain &c, size_t share)
        : ctx(ctx), a(c.a), op(c.a->op), c(c), id(share), sp(c.sh[share]), b0(sp.b0),
          nb(sp.b1 - sp.b0), main(c.main), prep(c.prep), n(a->width * a->height),
          W((int)a->width), H((int)a->height), P(hyprof__emp_planes(a->nradii))
    {
    }
    ~EmpDevice()
    {
        for (int i = 0; i < kEvents; ++i)
            if (ev[i])
                (void)cudaEventDestroy(ev[i]);
    }
    hyprof_status_t run();

  private:
    hyprof_ctx_t *ctx;
    const hyprof_emp_args_t *a;
    const char *op;
    Chain &c;
    size_t id;
    Share &sp;
    size_t b0, nb;
    const hyprof_ctx_t *main;
    const OutputPrep *prep;
    size_t n;
    int W, H;
    size_t P;
    /* trace: start, transformed (spectral stage), quantised and exchanged,
     * markers, reconstructed, EMP done, computed, copied */
    static constexpr int kEvents = 8;
    cudaEvent_t ev[kEvents] = {};
    int launches = 0;
    double waited_ms = 0.0, pack_ms = 0.0, wait_staging_ms = 0.0, spectral_host_ms = 0.0,
           loop_ms = 0.0, unpack_ms = 0.0, alloc_ms = 0.0;
    size_t chunks = 0;
    const char *upload_mode = "none";
    /* traced device time: spectral transforms, statistics and quantisation,
     * host-to-device, device-to-host and device-to-device copies */
    Spans k_spec, k_quant, h2d, d2h, peer;
    void mark(int i, cudaStream_t st)
    {
        if (ev[i])
            (void)cudaEventRecord(ev[i], st);
    }
    void wait_output()
    {
        const auto t0 = std::chrono::steady_clock::now();
        prep->wait();
        waited_ms += ms_since(t0);
    }
    void report(double wall_ms);
    Stream s, up;
    DeviceBuffer<uint8_t> q, mask, emp;
    DeviceBuffer<int> radii, hw_off, hw, flag;

    hyprof_status_t cancelled()
    {
        if (hyprof_ctx_cancelled(main))
            return hyprof__error(ctx, HYPROF_ERR_CANCELLED, op, "cancelled");
        return HYPROF_OK;
    }
    hyprof_status_t meet()
    {
        if (c.rv.arrive())
            return HYPROF_OK;
        sp.aborted = true;
        return hyprof__error(ctx, HYPROF_ERR_DEVICE, op, "stopped: another device failed");
    }
    hyprof_status_t setup();
    hyprof_status_t spectral(PoolBuffer<float> &F);
    hyprof_status_t features();
    hyprof_status_t exchange(const DeviceBuffer<uint8_t> &qreg);
    hyprof_status_t profiles();
    hyprof_status_t reconstruct_bar(dim3 tiles);
    hyprof_status_t emp_out();
    hyprof_status_t denoise();
    typedef std::vector<std::pair<size_t, cudaEvent_t>> Ready;
    hyprof_status_t download_staged(const float *src, float *dst, size_t count,
                                    cudaStream_t cs, const Ready &ready);
    hyprof_status_t denoise_prepare();
    hyprof_status_t denoise_group(size_t t0, size_t G, DenoiseBufs &b, float *out);
    /* the denoising's buffers, allocated while the EMP computes */
    DenoiseBufs dbf;
    PoolBuffer<float> doutb[2];
    size_t dG = 0;
    bool dwhole = false, dready = false;
};

} /* namespace emp_cuda */

/* An allocation whose host time counts in alloc_ms (cudaMalloc of the large
 * buffers can take milliseconds while the stream waits). */
#define HYPROF_TIMED_ALLOC(expr)                                                   \
    do {                                                                           \
        const auto ta_ = std::chrono::steady_clock::now();                         \
        hyprof_status_t sa_ = (expr);                                              \
        alloc_ms += ms_since(ta_);                                                 \
        if (sa_ != HYPROF_OK)                                                      \
            return sa_;                                                            \
    } while (0)

#endif
