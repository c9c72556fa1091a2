/* EadpCuda, the host side of the CUDA EADP backend: eadp_plan.cu plans the
 * kernels, the band groups and the device memory; eadp_host.cu runs them.
 *
 * All bands of a group (normally the whole cube) go through the same
 * launches; the cube is uploaded once and nothing but the float profile
 * bands and the contrasts come back. Per group: upload, prepare (smoothing,
 * gradient, contrast, diffusivity and u: eadp_prep.cu, eadp_select.cu), then
 * per increment its FED launches (eadp_fed.cu) and its profile band into a
 * ring of device output slots, each slot downloaded by one 2-D copy on a
 * second stream while the next increments compute.
 *
 * The FED launches of an increment run as kFedBranches chains of bands,
 * each on a stream of its own (parallel branches of the increment's graph):
 * while one chain's launch drains its last wave, the other's fills the SMs
 * it frees. An increment's launches are captured once into a CUDA graph and
 * replayed when the same schedule, starting buffer and output slot come
 * again. */
#ifndef HYPROF_KERNELS_EADP_HOST_CUH
#define HYPROF_KERNELS_EADP_HOST_CUH

#include "../core/stage_clock.h"
#include "eadp_cuda.cuh"

#include <vector>

namespace hyprof_cuda {
namespace eadp {

class GraphExec {
  public:
    GraphExec() = default;
    ~GraphExec() { reset(); }
    GraphExec(const GraphExec &) = delete;
    GraphExec &operator=(const GraphExec &) = delete;
    void reset()
    {
        if (e_)
            (void)cudaGraphExecDestroy(e_); /* in-flight launches finish first */
        e_ = NULL;
    }
    cudaGraphExec_t get() const { return e_; }
    cudaGraphExec_t *put()
    {
        reset();
        return &e_;
    }

  private:
    cudaGraphExec_t e_ = NULL;
};

/* Byte offsets of the device buffers inside one allocation. */
struct Layout {
    size_t mask, w, x, A, B, gm, cnt, st, hist, k, ncand, slot0, slot_bytes, total;
};

/* The size of nb float planes of `plane` floats, 256-byte aligned (one of
 * u's buffers, an output slot); saturates at 2^62 ("does not fit"). */
size_t fplanes(size_t plane, size_t nb);
Layout plan_layout(size_t npix, size_t plane, bool has_mask, int r, size_t nb, size_t nslots);

const int kMaxSlots = 3;
const int kFedBranches = 2; /* concurrent FED chains (enqueue_fed) */

class EadpCuda {
  public:
    EadpCuda(hyprof_ctx_t *c, const hyprof_eadp_args_t *args, const float *d_x = NULL)
        : ctx(c), a(args), dev_x(d_x)
    {
    }
    hyprof_status_t run();

  private:
    hyprof_ctx_t *ctx;
    const char *op = "eadp";
    const hyprof_eadp_args_t *a;
    const float *dev_x; /* the input already on the device, or NULL: a->x */

    int W = 0, H = 0, r = 0;
    int fuse = 1; /* FED steps per launch */
    size_t npix = 0, C = 0, nslots = 2, group = 1;
    /* The float FED's planes (u, ce, cs, output slots): rows ld floats apart,
     * plane floats a band; W and npix except for fed_tma_kernel (ld a
     * multiple of 4, the copy engine's rule). */
    int ld = 0;
    size_t plane = 0;
    bool f32 = true;        /* FED in float (u, g, arithmetic); false: double */
    bool shfl = false;      /* float FED on fed_shfl_kernel or fed_tma_kernel */
    bool tma = false;       /* fed_tma_kernel (sm_90) */
    int tma_ctas = 0;       /* its persistent grid */
    bool prep_fused = true; /* smoothing and gradient in prep_kernel's one pass */
    bool slot_u = false;    /* u written into the output slots (u_into_slot) */
    bool input_out = false; /* diffuse_cond_kernel writes the input band's output slot */
    int sms = 0;            /* the device's multiprocessors */
    int cc_major = 0;       /* its compute capability */
    /* Tensor maps of u's buffers (ubuf 0, 1, the slots 2 .. 4), ce (5), cs (6) */
    static const int kMapCe = 5, kMapCs = 6;
    CUtensorMap tmaps[7];
    std::vector<double> weights;
    std::vector<std::vector<double>> sched; /* flattened steps of each increment */
    std::vector<size_t> sched_id;           /* first increment with the same steps */

    /* Declaration order: memory first (freed last), then the streams (their
     * destructors wait for queued work), then events and graphs. */
    DeviceBuffer<uint8_t> arena;
    Layout L{};
    Stream cs, xs;           /* compute, copies */
    Stream bs[kFedBranches]; /* the FED chains (enqueue_fed) */
    Event conv[kMaxSlots], copied[kMaxSlots];
    Event fork_ev, join_ev[kFedBranches];
    bool copy_issued[kMaxSlots] = {false, false, false};
    /* Device stage times for the debug log (report()). */
    enum { kUpload, kPrepare, kFed, kOutput, kDownload, kNumStages };
    StageClock<kNumStages> clock;
    size_t fed_launches = 0, fed_max_steps = 0;
    double fed_launch_pix = 0.0, fed_step_pix = 0.0; /* pixel-bands, summed */
    struct GraphEntry {
        size_t id = 0;
        int cur = 0;
        int slot = -1; /* the output slot its last launches write (-1: none) */
        bool valid = false;
        GraphExec exec;
    };
    std::vector<GraphEntry> graphs; /* sized once: entries never move */

    template <typename T> T *dev(size_t off) const
    {
        return reinterpret_cast<T *>(arena.get() + off);
    }
    /* u's ping-pong buffers: A and B in double; in float both inside B (free
     * once the gradient is computed; it holds `group` bands of double); in
     * float, which = 2 + s is output slot s (slot_u). */
    template <typename T> T *ubuf(int which) const;

    /* eadp_plan.cu */
    hyprof_status_t check_args();
    hyprof_status_t plan();
    void plan_schedule();
    hyprof_status_t plan_kernels();
    hyprof_status_t plan_tma();
    hyprof_status_t plan_memory();
    hyprof_status_t make_tensor_maps();
    void plan_graphs();
    void report();

    /* eadp_host.cu */
    hyprof_status_t launch_fed_f32(const std::vector<double> &steps, size_t b0, size_t nb,
                                   int *cur, int oslot, cudaStream_t st);
    hyprof_status_t launch_fed_f64(const std::vector<double> &steps, size_t b0, size_t nb,
                                   int *cur, cudaStream_t st);
    bool output_in_fed(size_t nsteps) const;
    bool u_into_slot(int cur, int oslot) const;
    int u_next(int cur, int oslot, bool last) const;
    int u_after(int cur, size_t nsteps, int oslot) const;
    size_t fed_branches(size_t nb) const;
    cudaError_t download(float *dst, const float *slot, size_t nb, cudaStream_t st) const;
    hyprof_status_t prepare(size_t nb);
    hyprof_status_t enqueue_fed(const std::vector<double> &steps, size_t nb, int *cur,
                                int oslot);
    hyprof_status_t capture_increment(GraphEntry &ge, const std::vector<double> &steps,
                                      size_t nb, int cur, int oslot);
    hyprof_status_t enqueue_increment(size_t i, size_t nb, int *cur);
    hyprof_status_t enqueue_output(size_t i, size_t nb, int cur);
    hyprof_status_t run_group(size_t g0, size_t nb);
};

template <> double *EadpCuda::ubuf<double>(int which) const;
template <> float *EadpCuda::ubuf<float>(int which) const;

} /* namespace eadp */
} /* namespace hyprof_cuda */

#endif
