/* Private declarations of the CUDA EADP backend, shared by its stages:
 *
 *   eadp_prep.cu    smoothing, Scharr gradient and per-band counts
 *                   (prep_kernel, or gauss_h/gauss_v/scharr for large radii),
 *                   the given contrast (fill_kernel), the diffusivity and u
 *                   (diffuse_cond_kernel, diffuse_kernel)
 *   eadp_select.cu  the contrast k per band by exact radix selection
 *   eadp_fed.cu     the FED steps (fed_tma_kernel, fed_shfl_kernel,
 *                   fed_fused_kernel, fed_step_kernel) and the output bands
 *   eadp_plan.cu    EadpCuda: argument checks, kernel and memory plan
 *   eadp_host.cu    EadpCuda: streams, graphs, uploads and downloads
 *
 * Here: the block shapes, the types passed to the kernels, the device
 * arithmetic used by more than one stage (double in the CPU's order without
 * FMA contraction, explicit _rn intrinsics, so that the contrast and the
 * diffusivity agree with eadp.c bit for bit; the float FED's update with a
 * fixed FMA pattern), and the host-side launchers each stage exports.
 * Kernel bodies take their thread and block indices as a Thr (HYPROF_EADP_THR
 * in a kernel), which lets one body serve kernels of different shapes. */
#ifndef HYPROF_KERNELS_EADP_CUDA_CUH
#define HYPROF_KERNELS_EADP_CUDA_CUH

#include "../core/cuda_util.h"
#include "../core/hopper.h"
#include "diffusion/eadp_impl.h"

#include <cstdint>
#include <cstring>

#define HYPROF_EADP_FN __device__ __forceinline__

namespace hyprof_cuda {
namespace eadp {

typedef unsigned long long u64;

/* ---- shapes ------------------------------------------------------------------- */

const int kPixBX = 32, kPixBY = 8;    /* block of the per-pixel kernels */
const int kSelLast = 1024;            /* sel_last_kernel; the passes too */
const int kSelBins = 2048;            /* 11-bit digits */
const int kSelCoarse = kSelBins / 32; /* coarse bins of 32 digits (sel_find_step) */
const int kSelQueries = 4;            /* lo, hi; lo, hi of the G > 0 fallback */
const int kSelPasses = 6;
const int kSelCollect = 2; /* the pass that collects the candidate keys */
const int kMaxFuse = 8;    /* room for step sizes in FedSteps, FedStepsF */

/* prep_kernel: 32-column tiles of 32 rows up to radius 4, 16 above (the
 * horizontal sums' halo rows 1.25 times the tile instead of 1.5; 41 KiB of
 * shared memory); radii above kPrepMaxR take the three-kernel path. */
const int kPrepTX = 32, kPrepMaxR = 8;
constexpr int prep_ty(int r) { return r <= 4 ? 32 : 16; }

/* The FED's shapes: float, fed_shfl_kernel and fed_tma_kernel, kFuseF
 * steps a launch on 64 x 64 regions; double, fed_fused_kernel, kFuseD steps
 * on 64 x kRowsD regions of kStripD-row strips; one plain step a launch
 * (fed_step_kernel) for images too large for those grids. */
const int kFuseF = 7, kFuseD = 4, kRowsD = 32, kStripD = 4;
const int kFedBX = 64; /* fed_fused_kernel's region width (threads across) */
const int kFedRW = kFedBX;

struct Thr {
    int tx, ty, bx, by, bz, bdx, bdy, gdx, gdy, gdz;
};

#define HYPROF_EADP_THR                                                                     \
    Thr{(int)threadIdx.x, (int)threadIdx.y, (int)blockIdx.x,  (int)blockIdx.y,            \
        (int)blockIdx.z,  (int)blockDim.x,  (int)blockDim.y, (int)gridDim.x,              \
        (int)gridDim.y,   (int)gridDim.z}

struct SelState {
    u64 prefix;     /* bits of the key decided so far (the key at the end) */
    long long rank; /* rank still to find among the keys with that prefix; -1: unused */
};

struct FedSteps { /* a double FED launch's step sizes */
    double tau[kMaxFuse];
    int n;
};

struct FedStepsF { /* a float FED launch's step sizes */
    float tau[kMaxFuse];
    int n;
};

/* A selection pass's slot of histograms (u64): nb bands' kSelQueries x kSelBins
 * digits, then their kSelQueries x kSelCoarse coarse bins. */
inline size_t sel_slot(size_t nb) { return nb * kSelQueries * (kSelBins + kSelCoarse); }

/* The grid of the per-pixel kernels (kPixBX x kPixBY blocks, grid-stride in y). */
inline dim3 pix_grid(int W, int H, size_t nz)
{
    unsigned gy = (unsigned)((H + kPixBY - 1) / kPixBY);
    if (gy > 65535u)
        gy = 65535u;
    return dim3((unsigned)((W + kPixBX - 1) / kPixBX), gy, (unsigned)nz);
}

/* ---- arithmetic in the CPU's order, without contraction ------------------------- */

HYPROF_EADP_FN double mul_rn(double a, double b) { return __dmul_rn(a, b); }
HYPROF_EADP_FN double add_rn(double a, double b) { return __dadd_rn(a, b); }
HYPROF_EADP_FN double sub_rn(double a, double b) { return __dsub_rn(a, b); }
HYPROF_EADP_FN u64 dbl_bits(double d) { return (u64)__double_as_longlong(d); }
HYPROF_EADP_FN double bits_dbl(u64 b) { return __longlong_as_double((long long)b); }

/* Half-sample reflection: -1 -> 0, -2 -> 1, n -> n-1, n+1 -> n-2, periodic in 2n. */
HYPROF_EADP_FN int reflect_index(int i, int n)
{
    if (i >= 0 && i < n)
        return i;
    long long p = 2LL * n, m = (long long)i % p;
    if (m < 0)
        m += p;
    return (int)(m < n ? m : p - 1 - m);
}

/* x, with -0 as +0: the float FED's u never holds -0 (an update is -0 only
 * from a -0), which lets fed_shfl_steps_diff negate differences instead of
 * recomputing them and still round like fed_update, sign of 0 included. */
HYPROF_EADP_FN float pos0(float x) { return __fadd_rn(x, 0.0f); }

/* Edge conductance between two pixels (g = -1: masked or outside the image). */
HYPROF_EADP_FN double edge_c(double ga, double gb)
{
    return (ga < 0.0 || gb < 0.0) ? 0.0 : mul_rn(0.5, add_rn(ga, gb));
}

/* One Jacobi FED update: the flux in eadp.c's order (east, west, south, north). */
HYPROF_EADP_FN double fed_update(double u, double ue, double uw, double us, double un, double ce,
                                 double cw, double cs, double cn, double tau)
{
    double f = 0.0;
    f = add_rn(f, mul_rn(ce, sub_rn(ue, u)));
    f = add_rn(f, mul_rn(cw, sub_rn(uw, u)));
    f = add_rn(f, mul_rn(cs, sub_rn(us, u)));
    f = add_rn(f, mul_rn(cn, sub_rn(un, u)));
    return add_rn(u, mul_rn(tau, f));
}

/* The float FED (precision float, the default): u, g and the arithmetic in
 * float, with explicit _rn intrinsics and a fixed FMA pattern so that every
 * float FED kernel rounds the same way and their results are bit-identical. */
HYPROF_EADP_FN float edge_c(float ga, float gb)
{
    return (ga < 0.0f || gb < 0.0f) ? 0.0f : __fmul_rn(0.5f, __fadd_rn(ga, gb));
}

HYPROF_EADP_FN float fed_update(float u, float ue, float uw, float us, float un, float ce,
                                float cw, float cs, float cn, float tau)
{
    float f = __fmul_rn(ce, __fsub_rn(ue, u));
    f = __fmaf_rn(cw, __fsub_rn(uw, u), f);
    f = __fmaf_rn(cs, __fsub_rn(us, u), f);
    f = __fmaf_rn(cn, __fsub_rn(un, u), f);
    return __fmaf_rn(tau, f, u);
}

/* Sort key of G >= 0: its bit pattern (NaN last). */
HYPROF_EADP_FN u64 sel_key(double g)
{
    if (g != g)
        return ~0ull;
    if (g == 0.0)
        return 0ull;
    return dbl_bits(g);
}

/* ---- launchers (each returns the launch's error, cudaSuccess when queued) --------- */

/* eadp_prep.cu: G (and its keys' high words in Kh, unless NULL) and the counts
 * of nb bands of x; prep_kernel when `fused`, else gauss_h, gauss_v, scharr
 * (s in B, H in A). */
cudaError_t launch_smooth_gradient(bool fused, const float *x, const uint8_t *mask, int W, int H,
                                   size_t npix, size_t nb, int r, const double *w, double *A,
                                   double *B, unsigned *Kh, u64 *cnt, cudaStream_t st);
cudaError_t launch_fill_k(double *k, size_t nb, double v, cudaStream_t st);
/* u, ce, cs (planes of rows ld floats apart, plane floats a band) and, with
 * out, the input band's profile band, for the float FED on fed_shfl_kernel. */
cudaError_t launch_diffuse_cond(const float *x, const uint8_t *mask, int W, int H, size_t npix,
                                int ld, size_t plane, size_t nb, const double *k,
                                int diffusivity, const double *G, float *u, float *ce, float *cs,
                                float *out, float nodata, cudaStream_t st);
/* g (-1 where masked) and u = x as T (float or double); u may be G (double). */
template <typename T>
cudaError_t launch_diffuse(const float *x, const uint8_t *mask, int W, int H, size_t npix,
                           size_t nb, const double *k, int diffusivity, const double *G, T *u,
                           T *g, cudaStream_t st);

/* eadp_select.cu: the contrast k of nb bands (see the file). */
struct SelectArgs {
    const double *G;
    const unsigned *Kh; /* G's keys' high words */
    const uint8_t *mask;
    size_t npix, nb;
    int sms;             /* the device's multiprocessors */
    u64 *cnt, *hist;     /* the counts; kSelPasses slots of sel_slot(nb) histograms */
    SelState *st;        /* kSelPasses slots of nb * kSelQueries states */
    u64 *cand, *ncand;   /* the candidate keys (nb * npix), their counts */
    double pct;
    double *k;
};
cudaError_t select_setup();
cudaError_t launch_select(const SelectArgs &s, cudaStream_t st);

/* eadp_fed.cu: one FED launch of nb bands; see the kernels there. */
/* The dynamic shared memory of the FED kernel in use (fed_shfl_kernel, or
 * fed_fused_kernel in double); fed_tma_kernel's, and its CTAs per SM. */
cudaError_t fed_setup(bool shfl, bool fused_f64);
cudaError_t fed_tma_setup(int *per_sm);
template <typename T> /* float or double: one plain step a launch */
cudaError_t launch_fed_step(const T *uin, T *uout, const T *g, int W, int H, size_t npix,
                            size_t nb, T tau, cudaStream_t st);
cudaError_t launch_fed_fused_f64(const double *uin, double *uout, const double *g, int W, int H,
                                 size_t npix, size_t nb, const FedSteps &steps, cudaStream_t st);
cudaError_t launch_fed_shfl(const float *uin, float *uout, const float *ce, const float *cs,
                            int W, int H, size_t npix, size_t nb, const FedStepsF &steps,
                            float *out, const uint8_t *mask, float nodata, cudaStream_t st);
/* fed_tma_kernel's regions across and down a W x H image, and its launch. */
void fed_tma_grid(int W, int H, int *gx, int *gy);
cudaError_t launch_fed_tma(const CUtensorMap *tu, const CUtensorMap *tce, const CUtensorMap *tcs,
                           float *uout, float *out, const uint8_t *mask, int W, int H, int ld,
                           size_t plane, size_t b0, size_t nb, int ctas,
                           const FedStepsF &steps, float nodata, cudaStream_t st);
/* The profile band from float u (a flat copy, nodata where masked) or double u. */
cudaError_t launch_copy_out(const float *src, const uint8_t *mask, int W, int ld, size_t plane,
                            size_t n, float nodata, float *out, cudaStream_t st);
cudaError_t launch_to_float_f64(const double *src, const uint8_t *mask, int W, int H,
                                size_t npix, size_t nb, float nodata, float *out,
                                cudaStream_t st);

} /* namespace eadp */
} /* namespace hyprof_cuda */

#endif
