/* CUDA backend of the EADP step (semantics: algorithms/diffusion/eadp_impl.h).
 *
 * All bands of a group (normally the whole cube) go through the same launches
 * (grid z = band); the cube is uploaded once and nothing but the float profile
 * bands and the contrasts come back.
 *
 *   prep        per 32 x 32 tile (32 x 16 for radii above 4): H = Gx * (m u)
 *               and Gx * m of the rows it needs (shared memory), s = Gy * H /
 *               Gy * Hm (0 where the denominator is 0), G = gx^2 + gy^2
 *               (Scharr) and the high word of G's selection key; per band
 *               counts of valid, G == 0 and G > 0. For sigma > 8/3 (radius
 *               > 8):
 *   gauss_h     H = Gx * (m u) for every band, and Gx * m as one extra "band"
 *   gauss_v     s = Gy * H_band / Gy * H_mask
 *   scharr      G and the counts
 *   selection   the contrast k per band on the device: an exact radix select
 *               (6 passes of 9/11 bits over the bit patterns of G, which order
 *               like the values since G >= 0; the last three over the keys
 *               the third one collects) of the order statistics that
 *               NumPy's linear percentile of sqrt(G) needs, for the main
 *               percentile and for the G > 0 fallback at once; then k as in
 *               eadp.c (lo + t (hi - lo), the same fallbacks). The first
 *               three passes read the keys' high words (written by the
 *               gradient pass: their digits lie there; 4 bytes a pixel
 *               instead of 8); the last three, their scans and k run in one
 *               block per band (sel_last_kernel, histograms in shared
 *               memory: one launch instead of 7). No setup or scan
 *               launches: every block of a pass (sel_pass_kernel) finds
 *               the pass's states itself in its prologue (pass 0: the
 *               ranks from the counts; later: the bins holding the ranks
 *               in the previous pass's histograms, which stay in L2), one
 *               block per band stores them for the next launch; each pass
 *               has its own slot of states and histograms (pass p clears
 *               slot p + 1), so no block reads what its own launch
 *               writes. The passes also count coarse histograms (32 digits
 *               a bin) so that one warp a query finds the bin
 *               (sel_find_step: a few hundred bytes instead of every
 *               thread scanning 16 KB). H100, 2026-11-27 08:12 round:
 *               prepare 0.235-0.237 ms of event time (3 runs) against
 *               0.256-0.258 (main: separate setup and scan launches);
 *               Nsight: passes 16.6, 21.5, 19.5 us against 15.9 + 2.9
 *               (setup), 17.2 + 5.7, 16.1 + 7.2 (hist + scan);
 *               sel_last_kernel 18.7 us against 20.8 for the old tail.
 *               Slower: every block's 1024 threads loading and scanning
 *               the whole 16 KB histograms (sel_scan_step) instead of the
 *               coarse search, passes 24.4 and 23.8 us, prepare 0.246-0.247
 *               (08:05 and 08:12 rounds); sel_last_kernel on 256 threads,
 *               prepare 0.249-0.253 against 0.247 (08:05). 15:50 round (H100,
 *               Nsight, one call): selection 0.101 ms (main 0.141), prep
 *               0.092 (0.108), diffuse_cond 0.057 (0.065); prepare stage
 *               0.264 ms of event time against 0.324 with all four off.
 *               Tried and slower (H100, 02:55 and 03:08 rounds, CUPTI
 *               kernel times): the first histogram counted in prep_kernel
 *               (warp-aggregated shared atomics; prep 107.6 us against
 *               89.4) and the setup and scans run by the launches' last
 *               blocks (sel_hist 41.5 and 29.5 us against 19.4 + 5.2 and
 *               14.4 + 5.2 for hist + scan), prepare 0.322 ms against
 *               0.310; diffuse_cond on 32-row tiles, all loads first (64
 *               registers), 64.4 us against 57.1. Nor prep_kernel's loops
 *               without divisions or bounds (every shared entry computed,
 *               lanes on columns) and S in row pairs from shared registers
 *               (2026-11-27 08:08 round, H100, Nsight): 62.7 M instructions
 *               against 69.7 M, but 93.5 us against 92.7 (its issue slots
 *               73.7 % busy, 3.1 IPC: not bound by the count alone).
 *   diffuse     g per pixel (-1 marks a masked pixel), u = x (0 where masked);
 *               for the float FED's default kernel (fed_shfl_body) the edge
 *               conductances towards the east and south neighbours instead
 *               of g (diffuse_cond_body: g is fixed per band, so they are
 *               computed once per band instead of once per FED launch)
 *   FED         per increment, cycles x nsteps Jacobi steps, in float by
 *               default (u and g stored as float: 12 bytes per pixel and
 *               launch; $HYPROF_EADP_PRECISION=double for double), fused K steps per
 *               launch (float: K = 6 on 64 x 64 regions; double: K = 4 on
 *               64 x 32 regions, the sizes below): a block loads a 64 x 32 region of u
 *               and g (the output tile plus a halo of K), computes its edge
 *               conductances (g(p) + g(q)) / 2 once into registers, and runs K
 *               steps in shared memory, each thread holding a vertical strip
 *               of 8 pixels (float; 4 in double) in registers (neighbours across strips through
 *               shared memory, one barrier per step); only the inner
 *               (64-2K) x (32-2K) tile is written back. One launch moves u and
 *               g through device memory once for K steps instead of K times.
 *               At step s the first and last thread rows skip the rows within
 *               s of the region's edge, which can no longer reach the tile
 *               (double); the float kernel (fed_fused_pad_body) updates every
 *               row and reads edge neighbours from a zero border instead
 *               (fewer instructions: it is issue-bound).
 *               Float default: fed_shfl_body, K = 7 steps on 64 x 64
 *               regions (the default schedule's 28 steps in 4 launches),
 *               the steps of fed_shfl_steps_diff (each difference of neighbours
 *               formed once and negated for the other pixel: 7 flops per
 *               pixel and step instead of 9, the same bits; inner regions
 *               loaded without per-load conditions),
 *               each thread 2 columns x 8 rows in registers (256 threads a
 *               region, two regions per SM), the
 *               conductances loaded (not computed) per launch,
 *               east/west neighbours across threads by warp shuffles and only
 *               the strips' first and last rows through shared memory; the
 *               warps whose rows can no longer reach the tile stop computing;
 *               $HYPROF_EADP_FED=pad: the padded kernel above.
 *               Measured (H100 80GB HBM3, Houston size x 7 PCs, lead's
 *               rounds of 12:04 and 12:36, Nsight Compute per launch): the
 *               padded kernel 48.6 us a 6-step launch (35.3 M instructions,
 *               72 % issue slots); fed_shfl_body with 2 x 4 pixels 41-43 us
 *               (23.4 M instructions, 58 % issue: bound by latency, the
 *               barrier and the loads, 46 % of the warp slots occupied);
 *               with 4 x 4 pixels (half the shuffles and halo, 110
 *               registers, one block per SM) 55.8 us; with the conductances
 *               in shared memory to fit 64 or 40 registers (two 512-thread
 *               blocks of 4 x 4 or three of 2 x 4 per SM, or 128 x 128
 *               regions) slower again (more shared loads, spills). Event
 *               time of the FED per call: 1.61 ms for K = 7, 1.82 for
 *               K = 6, 1.76 for K = 8, padded kernel 1.97 (main: 1.97);
 *               13:10 round: 1.58 ms with 8-row strips against 1.63 with
 *               4-row ones; Nsight kernel sum of the FED 1.58 ms a call
 *               (main 1.95), 12 bytes per pixel and step: 7.9 TB/s
 *               unfused-equivalent, 236 % of the H100's 3.35 TB/s peak
 *               (each launch reads 68 MB of DRAM for 7 steps, 1.4 TB/s).
 *               Not faster: the conductance planes in persisting L2,
 *               bands in L2-sized chunks (see the schedule below), the
 *               conductances from g in the FED ($HYPROF_EADP_COND=0: 1.62),
 *               a separate output pass ($HYPROF_EADP_FED_OUTPUT=0: FED 1.53
 *               + output 0.14 ms).
 *               15:50 round (H100, Nsight): 44.9 us a launch with
 *               fed_shfl_steps_diff and the inner loads (21.0 M instructions, 50 %
 *               issue, long-scoreboard and LSU-throttle stalls) against
 *               46.8 us without (24.9 M, 56 %); FED 1.50 ms a call (main
 *               1.53), event time 1.542 ms (1.55 TB/s counted per launch).
 *               Not kept: a persistent grid whose CTAs prefetch their next
 *               region (cp.async) while computing one, tried in the 15:10
 *               round: FED 1.70-1.82 ms a call against 1.585 (H100; issue
 *               slots no fuller, the copies' MIO queue full). Nor with
 *               Hopper bulk copies (one cp.async.bulk a row into shared
 *               memory, mbarrier; 2026-11-27 03:06 round, H100,
 *               Nsight): 48.4 us an ordinary launch against 44.4, 52.0-53.1
 *               an output launch against 52.9-54.2 (a per-lane copy is
 *               issued one lane at a time: 26.1 M instructions against
 *               21.0, the copying warps late at every first barrier).
 *               Schedule: the bands go through an increment's launches in
 *               $HYPROF_EADP_FED_BRANCHES (2) chains of launches, each on a
 *               stream of its own (parallel branches of the increment's
 *               graph): while one chain's launch drains its last wave, the
 *               other's fills the SMs it frees; one chain of all bands
 *               left them idle at each launch's tail (the last 0.2 of 7.2
 *               waves) and gap, 32 times a call.
 *               Measured (H100, FED event time per call, main timed in
 *               the same runs, bench checksum unchanged), 03:03 round: 2
 *               chains 1.339-1.345 ms, 3 chains 1.363-1.374, one chain
 *               1.526-1.528 (its graph now holds the output launch too),
 *               main 1.548-1.552; device kernels 2.49-2.54 ms against
 *               2.70-2.75. Nsight (launches serialised): 23.8 us a 3-band
 *               launch, 29.3 a 4-band one, 46.8 a 7-band one. Earlier
 *               rounds (02:45, 02:57), with a kernel that loaded u after
 *               its conductances (1.7 us slower a launch): 2 chains
 *               1.392-1.395, 3 chains 1.406-1.415, 4 chains 1.428-1.435,
 *               7 (one per band) 1.439-1.446. With slot_u (2026-11-27
 *               08:29 round): 2 chains 1.280-1.283, 3 chains 1.312-1.314,
 *               one 1.457; the longer chain's stream at the greatest
 *               priority (cudaStreamCreateWithPriority) 1.280-1.281, no
 *               change, not kept.
 *               Not kept: programmatic dependent launch between a chain's
 *               launches (griddepcontrol.launch_dependents at the kernel's
 *               start, griddepcontrol.wait before its first load of u, the
 *               attribute captured into the graph): one chain 1.527 ms
 *               against 1.544 without, 3 chains 1.357-1.360 against 1.364
 *               (the chains already fill the tails); with the wait after
 *               the conductance loads (so that they overlap the previous
 *               launch's tail) 1.568-1.571 and, 3 chains, 1.406-1.415:
 *               Nsight 48.2 us a launch against 47.2 and main's 46.4 (the
 *               loads in two batches). Chains started one after another
 *               so that each one's data stays in L2 (the former
 *               $HYPROF_EADP_L2_BANDS): 3 chains, each after the previous
 *               one's 4 launches, 1.731 ms; each after the previous one's
 *               3rd launch 1.627; 4 chains after the 2nd 1.560.
 *               The launches of an increment are captured once into a CUDA
 *               graph and replayed when the same schedule comes again (the
 *               default times: every increment; one graph per starting
 *               ping-pong buffer and output slot: three; with slot_u, whose
 *               input slot cycles too, four, the first used once).
 *               Copy engine (sm_90, the default there; fed_tma_kernel): the
 *               same steps on a persistent grid of two CTAs per SM, each
 *               region's u, ce and cs brought into shared memory by three
 *               tensor copies (cp.async.bulk.tensor, zeros outside the
 *               image) that one thread starts for the CTA's next region as
 *               soon as the current one is in registers, so the copy runs
 *               under the 7 steps; the planes' rows padded to a multiple
 *               of 4 floats (the copy engine's rule; the output slots too,
 *               downloaded by a 3-D copy that drops the padding), regions
 *               starting at multiples of 4 columns (48 output columns
 *               instead of 50), the 7 steps unrolled, 8-byte stores.
 *               H100, Houston size, 2026-11-27 10:02 round (main in the
 *               same run): FED 1.202-1.207 ms of event time against
 *               1.282-1.286, 2.38 GB counted in 1.205 ms: 1.98 TB/s;
 *               with rows of 50 columns, plain steps and 4-byte stores
 *               (09:54 round) 1.239-1.242 against 1.276-1.278. Nsight (a
 *               4-band launch, serialised): 11.3 M instructions against
 *               12.0 M, 49 % of the issue slots busy, SMs active 77 % of
 *               the launch (its first copies and its last regions).
 *               $HYPROF_EADP_TMA=0: fed_shfl_kernel on dense planes.
 *               2026-11-27 11:52-12:19 rounds (H100s, Nsight source
 *               counters): the staged region and the edge rows were
 *               reached through generic addresses (the shared array
 *               aligned through an integer), 44 LD.E and 34 ST.E instead
 *               of LDS/STS; fixed, FED 1.141-1.146 ms against
 *               1.203-1.204. Then warp 0 alone started the next region's
 *               three copies after the region's barrier, with the
 *               divisions of its origin: the other warps waited for it at
 *               the first step's barrier (7.0 % of the stall samples);
 *               the copies now start from warps 0, 1 and 2 and the
 *               divisions run before the mbarrier wait: 2.0 %, FED
 *               1.118-1.119 against 1.125 (one issuing warp, divisions
 *               moved). Final check 12:12-12:14 (be80996, run_bench):
 *               FED 1.129-1.138 ms, 2.09-2.11 TB/s, 71-73 % of the CuPy
 *               copy (2888-2951 GB/s), 70.1-71.0 % of PyTorch's
 *               (2972-2984); 12:26 (aee20b8): 1.118 ms, 2.13 TB/s, 72 % of
 *               the 2960 GB/s CuPy copy, 71.6 % of PyTorch's 2977. What
 *               the samples show now: 17-19 % waiting
 *               for a region's copies (mostly each launch's first
 *               region: every CTA asks at once), 9-10 % at barriers (4 %
 *               at the region's). Not kept (same builds, knobs removed):
 *               tensor stores of the output tiles from shared memory (two
 *               tile buffers, the copy engine clipping the edges)
 *               1.133-1.138 against 1.116-1.118 (12:19); the region's
 *               barrier replaced by an "empty" mbarrier for the issuing
 *               warps, the edge rows' planes alternating across regions,
 *               1.132-1.139 against 1.125-1.131 (12:10); programmatic
 *               dependent launch (the conductances' copies before
 *               griddepcontrol.wait, u's after) 1.127-1.130 against
 *               1.127 (12:06); grids balanced to equal regions per CTA
 *               (fewer CTAs) 1.235-1.237 against 1.203-1.204 (11:52).
 *               Taken when each chain's launch has at least 3 regions
 *               per CTA (plan_tma: the smaller scenes lost, Pavia U's
 *               FED 0.504 ms against 0.420).
 *               Not kept: two stages (the copy two regions ahead;
 *               10:06 round: 1.208-1.211 against 1.202-1.204 with one);
 *               the step sizes in shared memory (10:26, 1.233-1.250
 *               against main's 1.287-1.299, no gain); one CTA per SM
 *               (1.398); one chain 1.332, three 1.326; one launch per
 *               increment whose CTAs claim the regions of all its groups
 *               in order (an atomic counter) and wait for the 3 x 3
 *               regions of the group before (flags released after the
 *               stores): 1.53 ms with the claiming done by one of the
 *               computing threads (an H200, 10:16; main 1.236 there),
 *               1.51 with a ninth, copying warp (H100, 10:22; main
 *               1.28-1.30): the flags' fences and the claims' latency sit
 *               on every region's path. From 14 bands a call instead of
 *               7 (10:09 round): 0.158 ms of FED a band against 0.172, so
 *               about 6 us of each launch group is its fill and drain.
 *   output      u -> float (float u: a flat copy), nodata where masked, into a
 *               ring of device slots (with fed_shfl_kernel the increment's
 *               last FED launch writes its slot itself: no copy_out pass;
 *               the increment waits for its slot before its first launch,
 *               outside the timed interval, so that its graph holds all
 *               its launches;
 *               $HYPROF_EADP_FED_OUTPUT=0 for the separate pass);
 *               each slot goes to the host with one 2-D copy (all bands of the
 *               group) on a second stream while the next increments compute.
 *               Without a mask the profile band and u are the same floats:
 *               the last launch then writes u into the slot only, and the
 *               next increment's first launch reads it from there (slot_u,
 *               u_into_slot), one store a pixel instead of two. H100,
 *               Houston size, 2026-11-27 07:58 round: FED 1.269-1.275 ms of
 *               event time against 1.337-1.340 (main and
 *               $HYPROF_EADP_SLOT_U=0 in the same run), Nsight 23.0 and
 *               27.7 us an output launch (3 and 4 bands) against 25.2 and
 *               32.5, like an ordinary launch; checksum unchanged.
 *
 * Arithmetic: double up to the diffusivity, in the order of the CPU backend
 * (eadp.c) without FMA contraction (explicit _rn intrinsics), so that the
 * contrast k and, with $HYPROF_EADP_PRECISION=double and g2, the whole
 * profile agree with the CPU bit for bit (g1 and g3 call exp(), whose last
 * bit may differ between CUDA and the C library). The float FED (default)
 * stays within 1e-4 of the CPU's double result (DESIGN.md's bound; the Leja
 * step order keeps float rounding from being amplified: ~1e-6 measured with
 * NumPy on Indian Pines and Samson).
 * $HYPROF_EADP_FMA=1 lets the FED step use fused multiply-adds (fewer
 * double-precision instructions; no longer bit-identical to the CPU, the
 * difference being rounding-level with the Leja step order).
 * Memory: 28 bytes per pixel and band (x, u ping-pong, g) + 4 per output slot;
 * bands are processed in groups when they do not all fit.
 *
 * Knobs for tests and tuning (environment): $HYPROF_EADP_FUSE = steps per FED
 * launch (1 = one plain kernel per step; 2, 4 (default), 6 or 8 = fused; 7
 * for fed_shfl_kernel only: the default 28 steps in 4 launches);
 * $HYPROF_EADP_TILE_ROWS=64 uses 64 x 64 regions (one block per SM, less
 * halo) instead of 64 x 32 (two blocks per SM);
 * $HYPROF_EADP_STRIP=8 gives each thread 8 rows instead of 4 (half the
 * threads per region, more registers each, fewer warps to hide latency), =2
 * 2 rows (1024 threads per 64 x 32 region);
 * $HYPROF_EADP_PERSIST=1 runs the fused steps (K >= 4) on a persistent grid
 * whose CTAs prefetch their next tile while computing one (fed_persist_body),
 * =2 the same with two columns per thread; $HYPROF_EADP_FED_BRANCHES=n runs the
 * FED launches of an increment as n concurrent chains of bands (1: one chain);
 * $HYPROF_EADP_PREP_ROWS=16 prep_kernel on 16-row tiles for radii up to 4 too
 * (32 rows by default there);
 * $HYPROF_EADP_PREP=split runs the smoothing and gradient as three kernels
 * (gauss_h, gauss_v, scharr) instead of prep_kernel's one pass;
 * $HYPROF_EADP_COLS=4 gives fed_shfl_body's threads 4 columns instead of 2
 * (128 x 64 regions, one block per SM), $HYPROF_EADP_STRIP=8 8 rows instead
 * of 4 (2 columns: 8 warps per region instead of 16);
 * $HYPROF_EADP_OCC=2 two blocks per SM for 4 x 4 pixels per thread (64
 * registers, the conductances in shared memory: FedShflCond), =3 three for
 * 2 x 4 pixels (40 registers, the same);
 * $HYPROF_EADP_TILE_ROWS=128 128 x 128 regions of 1024 threads (the same);
 * $HYPROF_EADP_COND=0 makes fed_shfl_body read g and form the
 * conductances itself (12 bytes per pixel and launch instead of 16, more
 * instructions); $HYPROF_EADP_FED=pad the padded kernel;
 * $HYPROF_EADP_DIFF=0 the default shape with fed_shfl_steps (every difference
 * formed); $HYPROF_EADP_SEL_HI=0 the selection's first passes on the full
 * keys, $HYPROF_EADP_SEL_TAIL=0 its last passes as separate kernels,
 * $HYPROF_EADP_SEL_THREADS=256 its passes on 256-thread blocks;
 * $HYPROF_EADP_TMA=0 keeps fed_shfl_kernel on sm_90 (dense planes), =1
 * takes fed_tma_kernel whatever the regions per CTA;
 * $HYPROF_EADP_TMA_CTAS=n gives fed_tma_kernel n CTAs per SM (at most 2; it
 * forces the kernel too);
 * $HYPROF_EADP_GRAPH=0 disables CUDA graphs; $HYPROF_EADP_SLOT_U=0 keeps u out
 * of the output slots; $HYPROF_EADP_BAND_GROUP=N forces
 * at most N bands per group; $HYPROF_EADP_SLOTS=1|2 fewer output slots (as
 * when memory is short). All of them give bit-identical results.
 *
 * The kernel bodies are written against the HYPROF_EADP_* macros below (thread
 * and block indices passed in, __syncthreads and atomics behind macros) so that
 * a host harness can define them and run the bodies on the CPU. */
#include "../core/cuda_util.h"
#include "../core/hopper.h"
#include "../core/stage_clock.h"
#include "diffusion/eadp_impl.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cuda_pipeline.h>
#include <cstdint>
#include <cstring>
#include <vector>

#ifndef HYPROF_EADP_FN
#define HYPROF_EADP_FN __device__ __forceinline__
#endif
#ifndef HYPROF_EADP_SYNC
#define HYPROF_EADP_SYNC() __syncthreads()
#endif
#ifndef HYPROF_EADP_ATOMIC_ADD_U32
#define HYPROF_EADP_ATOMIC_ADD_U32(p, v) atomicAdd((p), (v))
#endif
#ifndef HYPROF_EADP_ATOMIC_ADD_U64
#define HYPROF_EADP_ATOMIC_ADD_U64(p, v) atomicAdd((p), (v))
#endif
#ifndef HYPROF_EADP_STORE2 /* p[0] = a, p[1] = b; p 16-byte aligned */
#define HYPROF_EADP_STORE2(p, a, b) (*reinterpret_cast<double2 *>(p) = make_double2((a), (b)))
#endif
#ifndef HYPROF_EADP_COPY_ASYNC /* 8 bytes global -> shared, completed by _WAIT */
#define HYPROF_EADP_COPY_ASYNC(dst, src) __pipeline_memcpy_async((dst), (src), 8)
#define HYPROF_EADP_COPY_COMMIT() __pipeline_commit()
#define HYPROF_EADP_COPY_WAIT() __pipeline_wait_prior(0)
#endif

using namespace hyprof_cuda;

namespace {

typedef unsigned long long u64;

/* ---- shapes ------------------------------------------------------------------- */

const int kPixBX = 32, kPixBY = 8;       /* block of the per-pixel kernels */
const int kSelThreads = 256;             /* selection passes ($HYPROF_EADP_SEL_THREADS=256) */
const int kSelLast = 1024;               /* sel_last_kernel */
const int kSelBins = 2048;               /* 11-bit digits */
const int kSelCoarse = kSelBins / 32;    /* coarse bins of 32 digits (sel_find_step) */
const int kSelQueries = 4;               /* lo, hi; lo, hi of the G > 0 fallback */
const int kSelPasses = 6;
const int kSelCollect = 2; /* the pass that collects the candidate keys */
const int kSelShift[kSelPasses] = {55, 44, 33, 22, 11, 0};
const int kSelWidth[kSelPasses] = {9, 11, 11, 11, 11, 11};
const int kMaxFuse = 8;

/* Fused FED tile: 64 x BY threads (BY = 4 or 8), each a vertical strip of 8
 * pixels: a region of 64 x 32 or 64 x 64 pixels. */
const int kFedBX = 64;
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

struct FedSteps {
    double tau[kMaxFuse];
    int n;
};

/* ---- arithmetic in the CPU's order, without contraction ------------------------- */

HYPROF_EADP_FN double mul_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
HYPROF_EADP_FN double add_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
HYPROF_EADP_FN double sub_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
HYPROF_EADP_FN double fma_rn(double a, double b, double c)
{
#ifdef __CUDA_ARCH__
    return __fma_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}
HYPROF_EADP_FN u64 dbl_bits(double d)
{
#ifdef __CUDA_ARCH__
    return (u64)__double_as_longlong(d);
#else
    u64 b;
    memcpy(&b, &d, sizeof b);
    return b;
#endif
}
HYPROF_EADP_FN double bits_dbl(u64 b)
{
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)b);
#else
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
#endif
}

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
HYPROF_EADP_FN float pos0(float x)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(x, 0.0f);
#else
    volatile float z = 0.0f;
    return x + z;
#endif
}

/* Edge conductance between two pixels (g = -1: masked or outside the image). */
HYPROF_EADP_FN double edge_c(double ga, double gb)
{
    return (ga < 0.0 || gb < 0.0) ? 0.0 : mul_rn(0.5, add_rn(ga, gb));
}

/* One Jacobi FED update: the flux in eadp.c's order (east, west, south, north). */
template <bool Fma>
HYPROF_EADP_FN double fed_update(double u, double ue, double uw, double us, double un, double ce,
                                 double cw, double cs, double cn, double tau)
{
    if (Fma) {
        double f = mul_rn(ce, sub_rn(ue, u));
        f = fma_rn(cw, sub_rn(uw, u), f);
        f = fma_rn(cs, sub_rn(us, u), f);
        f = fma_rn(cn, sub_rn(un, u), f);
        return fma_rn(tau, f, u);
    }
    double f = 0.0;
    f = add_rn(f, mul_rn(ce, sub_rn(ue, u)));
    f = add_rn(f, mul_rn(cw, sub_rn(uw, u)));
    f = add_rn(f, mul_rn(cs, sub_rn(us, u)));
    f = add_rn(f, mul_rn(cn, sub_rn(un, u)));
    return add_rn(u, mul_rn(tau, f));
}

/* The float FED path ($HYPROF_EADP_PRECISION, default): u, g and the
 * arithmetic in float. Written with explicit _rn intrinsics and a fixed FMA
 * pattern so that every kernel variant (fused or not, any tile) rounds the
 * same way and their results stay bit-identical to each other. */
HYPROF_EADP_FN float edge_c(float ga, float gb)
{
#ifdef __CUDA_ARCH__
    return (ga < 0.0f || gb < 0.0f) ? 0.0f : __fmul_rn(0.5f, __fadd_rn(ga, gb));
#else
    return (ga < 0.0f || gb < 0.0f) ? 0.0f : 0.5f * (ga + gb);
#endif
}

template <bool Fma>
HYPROF_EADP_FN float fed_update(float u, float ue, float uw, float us, float un, float ce,
                                float cw, float cs, float cn, float tau)
{
#ifdef __CUDA_ARCH__
    float f = __fmul_rn(ce, __fsub_rn(ue, u));
    f = __fmaf_rn(cw, __fsub_rn(uw, u), f);
    f = __fmaf_rn(cs, __fsub_rn(us, u), f);
    f = __fmaf_rn(cn, __fsub_rn(un, u), f);
    return __fmaf_rn(tau, f, u);
#else
    float f = ce * (ue - u);
    f = std::fma(cw, uw - u, f);
    f = std::fma(cs, us - u, f);
    f = std::fma(cn, un - u, f);
    return std::fma(tau, f, u);
#endif
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

/* ---- kernel bodies ------------------------------------------------------------- */

/* H[b] = Gx * (m x_b) for b < nb, H[nb] = Gx * m. grid z: nb + 1. */
HYPROF_EADP_FN void gauss_h_body(const Thr &t, const float *x, const uint8_t *mask, int W, int H,
                                 size_t npix, int nb, const double *w, int r, double *Hout)
{
    const int b = t.bz;
    const int xx = t.bx * t.bdx + t.tx;
    if (xx >= W)
        return;
    const float *xb = x + (size_t)(b < nb ? b : 0) * npix;
    for (int y = t.by * t.bdy + t.ty; y < H; y += t.gdy * t.bdy) {
        const size_t row = (size_t)y * W;
        double acc = 0.0;
        for (int j = -r; j <= r; ++j) {
            const size_t q = row + reflect_index(xx + j, W);
            const bool m = !mask || mask[q];
            const double v = m ? (b < nb ? (double)xb[q] : 1.0) : 0.0;
            acc = add_rn(acc, mul_rn(w[j + r], v));
        }
        Hout[(size_t)b * npix + row + xx] = acc;
    }
}

/* s[b] = Gy * H[b] / Gy * H[nb], 0 where the denominator is not > 0. grid z: nb. */
HYPROF_EADP_FN void gauss_v_body(const Thr &t, const double *Hin, int W, int H, size_t npix,
                                 int nb, const double *w, int r, double *s)
{
    const int b = t.bz;
    const int xx = t.bx * t.bdx + t.tx;
    if (xx >= W)
        return;
    const double *hb = Hin + (size_t)b * npix, *hd = Hin + (size_t)nb * npix;
    for (int y = t.by * t.bdy + t.ty; y < H; y += t.gdy * t.bdy) {
        double sn = 0.0, sd = 0.0;
        for (int j = -r; j <= r; ++j) {
            const size_t q = (size_t)reflect_index(y + j, H) * W + xx;
            sn = add_rn(sn, mul_rn(w[j + r], hb[q]));
            sd = add_rn(sd, mul_rn(w[j + r], hd[q]));
        }
        s[(size_t)b * npix + (size_t)y * W + xx] = sd > 0.0 ? sn / sd : 0.0;
    }
}

/* The Scharr gradient at one pixel from its three rows of s (rm, r0, rp at
 * columns xm, xc, xp, reflected by the caller): Gb[p] = gx^2 + gy^2 (and its
 * selection key's high word in Kb), returned. The one place of this
 * arithmetic, so scharr_body and prep_body give the same bits. */
HYPROF_EADP_FN double scharr_g(const double *rm, const double *r0, const double *rp, int xm,
                               int xc, int xp, size_t p, double *Gb, unsigned *Kb)
{
    double gx = add_rn(add_rn(mul_rn(3.0, sub_rn(rm[xp], rm[xm])),
                              mul_rn(10.0, sub_rn(r0[xp], r0[xm]))),
                       mul_rn(3.0, sub_rn(rp[xp], rp[xm])));
    gx = gx / 32.0;
    double gy = add_rn(add_rn(mul_rn(3.0, sub_rn(rp[xm], rm[xm])),
                              mul_rn(10.0, sub_rn(rp[xc], rm[xc]))),
                       mul_rn(3.0, sub_rn(rp[xp], rm[xp])));
    gy = gy / 32.0;
    const double g = add_rn(mul_rn(gx, gx), mul_rn(gy, gy));
    Gb[p] = g;
    if (Kb) /* the key's high word, for the selection's first passes */
        Kb[p] = (unsigned)(sel_key(g) >> 32);
    return g;
}

/* scharr_g, and the pixel counted in `cnt_sh` (valid, valid with G == 0,
 * with G > 0). */
HYPROF_EADP_FN void scharr_at(const double *rm, const double *r0, const double *rp, int xm,
                              int xc, int xp, const uint8_t *mask, size_t p, double *Gb,
                              unsigned *Kb, unsigned *cnt_sh)
{
    const double g = scharr_g(rm, r0, rp, xm, xc, xp, p, Gb, Kb);
    if (!mask || mask[p]) {
        HYPROF_EADP_ATOMIC_ADD_U32(&cnt_sh[0], 1u);
        if (g == 0.0)
            HYPROF_EADP_ATOMIC_ADD_U32(&cnt_sh[1], 1u);
        else if (g > 0.0)
            HYPROF_EADP_ATOMIC_ADD_U32(&cnt_sh[2], 1u);
    }
}

/* G[b] = gx^2 + gy^2 of s[b]; cnt[3b..3b+2] += valid, valid with G == 0, with G > 0.
 * `cnt_sh` is three shared counters. */
HYPROF_EADP_FN void scharr_body(const Thr &t, unsigned *cnt_sh, const double *s,
                                const uint8_t *mask, int W, int H, size_t npix, double *G,
                                unsigned *Kh, u64 *cnt)
{
    const int tid = t.ty * t.bdx + t.tx;
    if (tid < 3)
        cnt_sh[tid] = 0;
    HYPROF_EADP_SYNC();
    const int b = t.bz;
    const int x = t.bx * t.bdx + t.tx;
    const double *sb = s + (size_t)b * npix;
    if (x < W) {
        const int xm = reflect_index(x - 1, W), xp = reflect_index(x + 1, W);
        for (int y = t.by * t.bdy + t.ty; y < H; y += t.gdy * t.bdy) {
            const int ym = reflect_index(y - 1, H), yp = reflect_index(y + 1, H);
            const double *rm = sb + (size_t)ym * W, *r0 = sb + (size_t)y * W,
                         *rp = sb + (size_t)yp * W;
            scharr_at(rm, r0, rp, xm, x, xp, mask, (size_t)y * W + x, G + (size_t)b * npix,
                      Kh ? Kh + (size_t)b * npix : NULL, cnt_sh);
        }
    }
    HYPROF_EADP_SYNC();
    if (tid < 3 && cnt_sh[tid])
        HYPROF_EADP_ATOMIC_ADD_U64(&cnt[(size_t)b * 3 + tid], (u64)cnt_sh[tid]);
}

/* gauss_h, gauss_v and scharr in one pass for a kPrepTX x kPrepTY tile of
 * band t.bz: the horizontal sums of the rows the tile's smoothing needs go
 * to shared memory (Hn: of m x, Hd: of m; row k holds image row
 * reflect(y0 - 1 - r + k)), then s over the tile plus a 1-pixel border (S),
 * then G and the counts. The same operations in the same order as the three
 * kernels, so the same bits; r <= kPrepMaxR. */
/* Tile height: 32 rows up to radius 4 (the horizontal sums' halo rows
 * 1.25 times the tile instead of 1.5; 41 KiB of shared memory), 16 above. */
const int kPrepTX = 32, kPrepMaxR = 8;
constexpr int prep_ty(int r) { return r <= 4 ? 32 : 16; }
const int kPrepSW = kPrepTX + 2;
const int kPrepXW = kPrepTX + 2 + 2 * kPrepMaxR; /* staged input columns */

template <int RT, int kPrepTY = prep_ty(RT)>
HYPROF_EADP_FN void prep_body(const Thr &t, float (*Xv)[kPrepXW], unsigned char (*Xm)[kPrepXW],
                              double (*Hn)[kPrepSW], double (*Hd)[kPrepSW], double (*S)[kPrepSW],
                              unsigned *cnt_sh, const float *x, const uint8_t *mask, int W,
                              int H, size_t npix, const double *wg, double *G, unsigned *Kh,
                              u64 *cnt)
{
    /* The radius as a constant and the weights in registers: the tap loops
     * unroll, no weight load per tap. */
    const int r = RT;
    double w[2 * RT + 1];
    for (int j = 0; j < 2 * RT + 1; ++j)
        w[j] = wg[j];
    const int tid = t.ty * t.bdx + t.tx, nthr = t.bdx * t.bdy;
    const int b = t.bz, x0 = t.bx * kPrepTX, y0 = t.by * kPrepTY;
    const float *xb = x + (size_t)b * npix;
    if (tid < 3)
        cnt_sh[tid] = 0;
    /* The input the tile needs, staged once: row k, column cc hold image
     * (reflect(y0 - 1 - r + k), reflect(x0 - 1 - r + cc)), 0 where masked. */
    const int nh = kPrepTY + 2 + 2 * r, nxw = kPrepTX + 2 + 2 * r;
    /* Rows by thread rows, columns by lanes (no division by nxw). */
    for (int k = t.ty; k < nh; k += t.bdy) {
        const size_t row = (size_t)reflect_index(y0 - 1 - r + k, H) * W;
        for (int cc = t.tx; cc < nxw; cc += t.bdx) {
            const size_t q = row + reflect_index(x0 - 1 - r + cc, W);
            const bool m = !mask || mask[q];
            Xv[k][cc] = m ? xb[q] : 0.0f;
            Xm[k][cc] = m ? 1 : 0;
        }
    }
    /* Without a mask every weight sum is the same: Gx * 1 and Gy * (Gx * 1),
     * summed here in the per-pixel order (the same bits), so only the
     * numerators are convolved. */
    double d1 = 0.0, d2 = 0.0;
    if (!mask) {
        for (int j = -r; j <= r; ++j)
            d1 = add_rn(d1, mul_rn(w[j + r], 1.0));
        for (int j = -r; j <= r; ++j)
            d2 = add_rn(d2, mul_rn(w[j + r], d1));
    }
    HYPROF_EADP_SYNC();
    for (int e = tid; e < nh * kPrepSW; e += nthr) {
        const int k = e / kPrepSW, cx = e % kPrepSW, xs = x0 - 1 + cx;
        if (xs < 0 || xs >= W)
            continue;
        double an = 0.0, ad = 0.0;
        if (mask)
            for (int j = -r; j <= r; ++j) { /* image column xs + j: staged column cx + r + j */
                an = add_rn(an, mul_rn(w[j + r], (double)Xv[k][cx + r + j]));
                ad = add_rn(ad, mul_rn(w[j + r], Xm[k][cx + r + j] ? 1.0 : 0.0));
            }
        else
            for (int j = -r; j <= r; ++j)
                an = add_rn(an, mul_rn(w[j + r], (double)Xv[k][cx + r + j]));
        Hn[k][cx] = an;
        Hd[k][cx] = ad;
    }
    HYPROF_EADP_SYNC();
    for (int e = tid; e < (kPrepTY + 2) * kPrepSW; e += nthr) {
        const int ky = e / kPrepSW, cx = e % kPrepSW, xs = x0 - 1 + cx, ys = y0 - 1 + ky;
        if (xs < 0 || xs >= W || ys < 0 || ys >= H)
            continue;
        double sn = 0.0, sd = d2;
        if (mask) {
            sd = 0.0;
            for (int j = -r; j <= r; ++j) { /* image row ys + j is shared row ky + r + j */
                sn = add_rn(sn, mul_rn(w[j + r], Hn[ky + r + j][cx]));
                sd = add_rn(sd, mul_rn(w[j + r], Hd[ky + r + j][cx]));
            }
        } else
            for (int j = -r; j <= r; ++j)
                sn = add_rn(sn, mul_rn(w[j + r], Hn[ky + r + j][cx]));
        S[ky][cx] = sd > 0.0 ? sn / sd : 0.0;
    }
    HYPROF_EADP_SYNC();
    /* The counts in registers, added once a warp, instead of two shared
     * atomics a pixel on the same three counters (H100, Nsight: 91.6 us
     * against 93.6). */
    unsigned cv = 0, cz = 0, cp = 0;
    for (int e = tid; e < kPrepTY * kPrepTX; e += nthr) {
        const int xx = x0 + e % kPrepTX, y = y0 + e / kPrepTX;
        if (xx >= W || y >= H)
            continue;
        /* s at image (Y, X) is S[Y - y0 + 1][X - x0 + 1] */
        const int xm = reflect_index(xx - 1, W) - x0 + 1, xp = reflect_index(xx + 1, W) - x0 + 1;
        const int xc = xx - x0 + 1;
        const double *rm = S[reflect_index(y - 1, H) - y0 + 1], *r0 = S[y - y0 + 1],
                     *rp = S[reflect_index(y + 1, H) - y0 + 1];
        const size_t p = (size_t)y * W + xx;
        const double g = scharr_g(rm, r0, rp, xm, xc, xp, p, G + (size_t)b * npix,
                                  Kh ? Kh + (size_t)b * npix : NULL);
        if (!mask || mask[p]) {
            ++cv;
            cz += g == 0.0;
            cp += g > 0.0;
        }
    }
    cv = __reduce_add_sync(0xffffffffu, cv);
    cz = __reduce_add_sync(0xffffffffu, cz);
    cp = __reduce_add_sync(0xffffffffu, cp);
    if ((tid & 31) == 0) {
        if (cv)
            HYPROF_EADP_ATOMIC_ADD_U32(&cnt_sh[0], cv);
        if (cz)
            HYPROF_EADP_ATOMIC_ADD_U32(&cnt_sh[1], cz);
        if (cp)
            HYPROF_EADP_ATOMIC_ADD_U32(&cnt_sh[2], cp);
    }
    HYPROF_EADP_SYNC();
    if (tid < 3 && cnt_sh[tid])
        HYPROF_EADP_ATOMIC_ADD_U64(&cnt[(size_t)b * 3 + tid], (u64)cnt_sh[tid]);
}

/* Position of a NumPy-linear percentile among n sorted values: rank of the
 * lower order statistic and of the upper one (equal when no interpolation). */
HYPROF_EADP_FN void pct_ranks(double pct, u64 n, long long *lo, long long *hi, double *pos)
{
    *pos = pct * (double)(n - 1);
    u64 i = (u64)floor(*pos);
    if (i > n - 1)
        i = n - 1;
    *lo = (long long)i;
    *hi = (i + 1 >= n || *pos == (double)i) ? (long long)i : (long long)(i + 1);
}

/* The ranks to select in a band (its counts cb: valid, G == 0, G > 0). */
HYPROF_EADP_FN void sel_ranks(const u64 *cb, double pct, SelState *s)
{
    const u64 n = cb[0], z = cb[1], np = cb[2];
    for (int q = 0; q < kSelQueries; ++q) {
        s[q].prefix = 0;
        s[q].rank = -1;
    }
    long long lo, hi;
    double pos;
    if (n >= 1) {
        pct_ranks(pct, n, &lo, &hi, &pos);
        s[0].rank = lo;
        s[1].rank = hi;
    }
    if (np >= 1) {
        pct_ranks(pct, np, &lo, &hi, &pos);
        s[2].rank = (long long)z + lo;
        s[3].rank = (long long)z + hi;
    }
}

/* Counts `key` for the first active query whose prefix it has (and with
 * cand, appends it to the band's candidate list). */
const int kSelUnroll = 4;

HYPROF_EADP_FN void sel_count(unsigned *sh, u64 key, u64 hmask, int shift, unsigned dmask,
                              const bool *act, const u64 *pre, u64 *cand, u64 *ncand, int b,
                              size_t npix, const double *gfull)
{
    const u64 km = key & hmask;
    for (int q = 0; q < kSelQueries; ++q)
        if (act[q] && km == pre[q]) {
            HYPROF_EADP_ATOMIC_ADD_U32(&sh[q * kSelBins + (int)((key >> shift) & dmask)], 1u);
            if (cand)
                cand[(size_t)b * npix + HYPROF_EADP_ATOMIC_ADD_U64(&ncand[b], 1ull)] =
                    gfull ? sel_key(*gfull) : key; /* gfull: key holds the high word only */
            break;
        }
}

/* Histogram of the next digit of the keys that match each query's prefix. Each
 * key counts once, for the first query with its prefix (queries with equal
 * prefixes share it: see sel_scan_step). `sh`: kSelQueries * kSelBins shared
 * counters; `s`: the band's states; gcoarse (or NULL): the coarse histograms
 * (kSelCoarse bins of 32 digits a query and band) that sel_find_step reads.
 * grid z = band. */
HYPROF_EADP_FN void sel_hist_body(const Thr &t, unsigned *sh, const double *G,
                                  const unsigned *Kh, const uint8_t *mask, size_t npix,
                                  const SelState *s, u64 hmask, int shift, unsigned dmask,
                                  u64 *ghist, u64 *gcoarse, const u64 *list, u64 *cand,
                                  u64 *ncand)
{
    const int tid = t.ty * t.bdx + t.tx, nthr = t.bdx * t.bdy;
    const int b = t.bz;
    u64 pre[kSelQueries];
    bool act[kSelQueries], lead[kSelQueries];
    for (int q = 0; q < kSelQueries; ++q) {
        act[q] = s[q].rank >= 0;
        pre[q] = s[q].prefix & hmask;
        lead[q] = act[q];
        for (int q2 = 0; q2 < q; ++q2)
            if (act[q2] && pre[q2] == pre[q])
                lead[q] = false;
    }
    /* Only the counters that can count: the digit's bins (512 in the first
     * pass) of the queries whose prefix no earlier query shares (the keys
     * count for the first one). Zeroing and flushing all 4 x 2048 took more
     * time than the counting, at 4096 pixels per block. */
    const int nbins = (int)dmask + 1;
    for (int q = 0; q < kSelQueries; ++q)
        if (lead[q])
            for (int i = tid; i < nbins; i += nthr)
                sh[q * kSelBins + i] = 0;
    HYPROF_EADP_SYNC();
    /* The keys: of G's valid pixels, or (list) the band's candidates that an
     * earlier pass collected; with cand, the keys that match a query also go
     * to the band's candidate list (ncand[b] counts them). */
    const double *gb = G + (size_t)b * npix;
    const u64 *lb = list ? list + (size_t)b * npix : NULL;
    /* Kh (passes whose digits lie in the key's high word): 4 bytes a pixel
     * instead of 8; a collected key's low word from G. */
    const unsigned *kb = Kh && !list ? Kh + (size_t)b * npix : NULL;
    const size_t n = list ? (size_t)ncand[b] : npix;
    /* kSelUnroll keys loaded before any is counted: more loads in flight
     * (one at a time, a full pass read G at 1.5 TB/s, an H100). */
    const size_t stride = (size_t)t.gdx * nthr;
    size_t p = (size_t)t.bx * nthr + tid;
    for (; p + (kSelUnroll - 1) * stride < n; p += kSelUnroll * stride) {
        u64 keys[kSelUnroll];
        bool valid[kSelUnroll];
        for (int j = 0; j < kSelUnroll; ++j) {
            const size_t pj = p + (size_t)j * stride;
            valid[j] = list || !mask || mask[pj];
            keys[j] = list ? lb[pj] : kb ? (u64)kb[pj] << 32 : sel_key(gb[pj]);
        }
        for (int j = 0; j < kSelUnroll; ++j)
            if (valid[j])
                sel_count(sh, keys[j], hmask, shift, dmask, act, pre, cand, ncand, b, npix,
                          kb ? gb + p + (size_t)j * stride : NULL);
    }
    for (; p < n; p += stride)
        if (list || !mask || mask[p])
            sel_count(sh, list ? lb[p] : kb ? (u64)kb[p] << 32 : sel_key(gb[p]), hmask, shift,
                      dmask, act, pre, cand, ncand, b, npix, kb ? gb + p : NULL);
    HYPROF_EADP_SYNC();
    u64 *gh = ghist + (size_t)b * kSelQueries * kSelBins;
    u64 *gc = gcoarse ? gcoarse + (size_t)b * kSelQueries * kSelCoarse : NULL;
    for (int q = 0; q < kSelQueries; ++q)
        if (lead[q])
            for (int i = tid; i < nbins; i += nthr) { /* whole warps: nbins, nthr % 32 == 0 */
                const unsigned v = sh[q * kSelBins + i];
                if (v)
                    HYPROF_EADP_ATOMIC_ADD_U64(&gh[q * kSelBins + i], (u64)v);
                if (gc) { /* a warp's 32 bins are one coarse bin */
                    const unsigned c = __reduce_add_sync(0xffffffffu, v);
                    if ((tid & 31) == 0 && c)
                        HYPROF_EADP_ATOMIC_ADD_U64(&gc[q * kSelCoarse + i / 32], (u64)c);
                }
            }
}

/* A selection step in a block of NT threads (NT / 32 warps): for each query,
 * the bin that holds its rank; appends the digit to the prefix and makes the
 * rank relative to the bin. kSelBins / NT bins a thread, the queries' prefix
 * sums side by side by warp shuffles (two barriers): the states after the
 * pass whose histograms are `gh` (the band's, in shared memory) from the
 * states `cur` before it, into ss.nxt. cur is read and gh
 * loaded before the first barrier and ss.nxt written after it (exactly one
 * thread writes each query's state), so cur may be ss.nxt itself; every
 * thread sees ss.nxt after the second. */
template <int NT> struct SelStep {
    u64 wsum[kSelQueries][NT / 32];
    SelState nxt[kSelQueries];
};

template <int NT>
HYPROF_EADP_FN void sel_scan_step(const Thr &t, SelStep<NT> &ss, const SelState *cur, u64 hmask,
                                  int shift, const u64 *gh)
{
    constexpr int per = kSelBins / NT, nw = NT / 32;
    const int tid = t.ty * t.bdx + t.tx, lane = tid & 31, warp = tid >> 5;
    /* The digit's bins: 512 in the first pass (sel_hist_body fills no more). */
    const int nbins = 64 - shift < 11 ? 1 << (64 - shift) : kSelBins;
    const bool used = tid * per < nbins;
    u64 pre[kSelQueries], rank[kSelQueries], hv[kSelQueries][per], incl[kSelQueries];
    bool on[kSelQueries];
#pragma unroll
    for (int q = 0; q < kSelQueries; ++q) {
        pre[q] = cur[q].prefix;
        rank[q] = (u64)cur[q].rank;
        on[q] = cur[q].rank >= 0; /* the same for every thread */
    }
#pragma unroll
    for (int q = 0; q < kSelQueries; ++q) {
        int a = q; /* the histogram query q counts in: the first with its prefix */
        for (int q2 = 0; q2 < q; ++q2)
            if (on[q2] && (pre[q2] & hmask) == (pre[q] & hmask)) {
                a = q2;
                break;
            }
        const u64 *h = gh + (size_t)a * kSelBins + (size_t)tid * per;
        incl[q] = 0;
#pragma unroll
        for (int j = 0; j < per; ++j) {
            hv[q][j] = on[q] && used ? h[j] : 0;
            incl[q] += hv[q][j];
        }
    }
#pragma unroll
    for (int off = 1; off < 32; off <<= 1)
#pragma unroll
        for (int q = 0; q < kSelQueries; ++q) {
            const u64 v = __shfl_up_sync(0xffffffffu, incl[q], off);
            if (lane >= off)
                incl[q] += v;
        }
    if (lane == 31)
#pragma unroll
        for (int q = 0; q < kSelQueries; ++q)
            ss.wsum[q][warp] = incl[q];
    HYPROF_EADP_SYNC();
#pragma unroll
    for (int q = 0; q < kSelQueries; ++q) {
        /* this warp's offset: the sum of the earlier warps' totals */
        u64 w = lane < nw ? ss.wsum[q][lane] : 0;
#pragma unroll
        for (int off = 1; off < nw; off <<= 1) {
            const u64 v = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off)
                w += v;
        }
        const u64 base = __shfl_sync(0xffffffffu, w, warp > 0 ? warp - 1 : 0);
        if (!on[q]) {
            if (tid == q) /* unused: unchanged */
                ss.nxt[q] = SelState{pre[q], (long long)rank[q]};
            continue;
        }
        u64 cum = (warp > 0 ? base : 0) + incl[q];
        const u64 end = cum;
#pragma unroll
        for (int j = 0; j < per; ++j)
            cum -= hv[q][j]; /* cum: the keys before this thread's bins */
        if (rank[q] >= cum && rank[q] < end) { /* the first bin whose end passes rank */
            int jj = -1;
            u64 bb = 0;
#pragma unroll
            for (int j = 0; j < per; ++j) {
                if (jj < 0 && rank[q] < cum + hv[q][j]) {
                    jj = j;
                    bb = cum;
                }
                cum += hv[q][j];
            }
            ss.nxt[q] = SelState{pre[q] | ((u64)(tid * per + jj) << shift),
                                 (long long)(rank[q] - bb)};
        } else if (tid == NT - 1 && rank[q] >= end) { /* past every key: unchanged */
            ss.nxt[q] = SelState{pre[q], (long long)rank[q]};
        }
    }
    HYPROF_EADP_SYNC();
}

/* In a warp whose lanes hold counts v in order: the first lane whose inclusive
 * prefix sum passes r (the same in every lane), and (*before) the counts of
 * the lanes before it; 32 when r is past them all. */
HYPROF_EADP_FN int warp_find(int lane, u64 v, u64 r, u64 *before)
{
    u64 incl = v;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const u64 u = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off)
            incl += u;
    }
    const unsigned m = __ballot_sync(0xffffffffu, incl > r);
    if (!m)
        return 32;
    const int l = __ffs((int)m) - 1;
    *before = __shfl_sync(0xffffffffu, incl - v, l);
    return l;
}

/* sel_scan_step's result from the coarse histograms as well (`gc`: kSelCoarse
 * bins of 32 digits, the band's), for the passes' prologues, where every
 * block of the band does it: warp q alone finds query q's coarse bin (2 a
 * lane), then its digit among the 32 of that bin: 3 dependent loads of a few
 * hundred bytes instead of every thread loading and scanning the 16 KB
 * histograms (which took 7 us a pass: header comment). The same contract
 * (ss.nxt after the one barrier). */
template <int NT>
HYPROF_EADP_FN void sel_find_step(const Thr &t, SelStep<NT> &ss, const SelState *cur, u64 hmask,
                                  int shift, const u64 *gh, const u64 *gc)
{
    const int tid = t.ty * t.bdx + t.tx, lane = tid & 31, q = tid >> 5;
    if (q < kSelQueries) {
        const SelState c = cur[q];
        SelState n = c; /* unused, or past every key: unchanged */
        if (c.rank >= 0) {
            int a = q; /* the histogram query q counts in: the first with its prefix */
            for (int q2 = 0; q2 < q; ++q2) {
                const SelState o = cur[q2];
                if (o.rank >= 0 && (o.prefix & hmask) == (c.prefix & hmask)) {
                    a = q2;
                    break;
                }
            }
            const u64 *ca = gc + (size_t)a * kSelCoarse;
            const u64 c0 = ca[2 * lane], c1 = ca[2 * lane + 1];
            u64 r = (u64)c.rank, bef = 0;
            const int l = warp_find(lane, c0 + c1, r, &bef);
            if (l < 32) { /* warp-uniform */
                const u64 c0l = __shfl_sync(0xffffffffu, c0, l);
                int cb = 2 * l;
                if (r - bef >= c0l) {
                    ++cb;
                    bef += c0l;
                }
                r -= bef;
                const u64 v = gh[(size_t)a * kSelBins + 32 * cb + lane];
                const int l2 = warp_find(lane, v, r, &bef); /* < 32: the bin holds r */
                if (l2 < 32) {
                    n.prefix = c.prefix | ((u64)(32 * cb + l2) << shift);
                    n.rank = (long long)(r - bef);
                }
            }
        }
        if (lane == 0)
            ss.nxt[q] = n;
    }
    HYPROF_EADP_SYNC();
}

/* eadp.c's percentile from the two selected order statistics. */
HYPROF_EADP_FN double pct_value(double pct, u64 n, const SelState *lo_hi)
{
    long long lo, hi;
    double pos;
    pct_ranks(pct, n, &lo, &hi, &pos);
    const double a = sqrt(bits_dbl(lo_hi[0].prefix));
    if (hi == lo)
        return a;
    const double bv = sqrt(bits_dbl(lo_hi[1].prefix));
    return add_rn(a, mul_rn(sub_rn(pos, (double)lo), sub_rn(bv, a)));
}

HYPROF_EADP_FN bool good_k(double k) { return k > 0.0 && k <= 1.7976931348623157e308; }

/* A band's k from its counts cb and selected states s, with the fallbacks of
 * eadp_impl.h / eadp.c. */
HYPROF_EADP_FN double sel_k(const u64 *cb, const SelState *s, double pct)
{
    const u64 n = cb[0], np = cb[2];
    double v = n ? pct_value(pct, n, s) : 0.0;
    if (!good_k(v)) {
        v = np ? pct_value(pct, np, s + 2) : 1.0;
        if (!good_k(v))
            v = 1.0;
    }
    return v;
}

/* The diffusivity of a pixel whose squared gradient is Gv (k2 = k^2). */
HYPROF_EADP_FN double diffusivity_of(double Gv, double k2, int diffusivity)
{
    const double r = Gv / k2;
    if (diffusivity == (int)HYPROF_DIFFUSIVITY_G1)
        return exp(-r);
    if (diffusivity == (int)HYPROF_DIFFUSIVITY_G3)
        return r > 0.0 ? sub_rn(1.0, exp(-3.315 / mul_rn(mul_rn(mul_rn(r, r), r), r))) : 1.0;
    return 1.0 / add_rn(1.0, r);
}

/* Diffusivity (g, -1 where masked) from G, and u = x (0 where masked), both
 * as T (u may overwrite G: each element is read before it is written). */
template <typename T>
HYPROF_EADP_FN void diffuse_body(const Thr &t, const float *x, const uint8_t *mask, int W, int H,
                                 size_t npix, const double *k, int diffusivity, const double *G,
                                 T *u, T *gm)
{
    const int b = t.bz;
    const int xx = t.bx * t.bdx + t.tx;
    if (xx >= W)
        return;
    const double kb = k[b], k2 = mul_rn(kb, kb);
    for (int y = t.by * t.bdy + t.ty; y < H; y += t.gdy * t.bdy) {
        const size_t p = (size_t)y * W + xx, i = (size_t)b * npix + p;
        if (mask && !mask[p]) {
            gm[i] = (T)-1.0;
            u[i] = (T)0.0;
            continue;
        }
        gm[i] = (T)diffusivity_of(G[i], k2, diffusivity);
        u[i] = sizeof(T) == sizeof(float) ? (T)pos0(x[i]) : (T)x[i];
    }
}

/* The float g of pixel p (band offset off), -1 where masked. */
HYPROF_EADP_FN float g_f32(const uint8_t *mask, const double *G, size_t off, size_t p, double k2,
                           int diffusivity)
{
    return (mask && !mask[p]) ? -1.0f : (float)diffusivity_of(G[off + p], k2, diffusivity);
}

/* For the float FED of fed_shfl_body: u = x (0 where masked) and the fixed
 * edge conductances of each pixel towards its east and south neighbours,
 * ce = edge_c(g_p, g_east) and cs = edge_c(g_p, g_south) (0 at the image's
 * edge and next to masked pixels), from the same float g as diffuse_body:
 * the FED then multiplies the same conductances, bit for bit. Per block of
 * kPixBX x kPixBY pixels, g of the block plus one column and one row goes
 * to shared memory `gs` first (1.16 evaluations of g per pixel instead of
 * 3). G, u, ce and cs must not overlap. u, ce, cs and out are planes of
 * rows `ld` floats apart, `plane` floats a band (the FED's layout: W and
 * npix, or padded for the copy engine); x and G are dense. */
HYPROF_EADP_FN void diffuse_cond_body(const Thr &t, float (*gs)[kPixBX + 1], const float *x,
                                      const uint8_t *mask, int W, int H, size_t npix, int ld,
                                      size_t plane, const double *k, int diffusivity,
                                      const double *G, float *u, float *ce, float *cs, float *out,
                                      float nodata)
{
    const int b = t.bz, x0 = t.bx * kPixBX, tid = t.ty * kPixBX + t.tx;
    const double kb = k[b], k2 = mul_rn(kb, kb);
    const size_t off = (size_t)b * npix, poff = (size_t)b * plane;
    for (int y0 = t.by * kPixBY; y0 < H; y0 += t.gdy * kPixBY) { /* uniform per block */
        /* This pixel's input loaded before the diffusivities' pass (its
         * latency under theirs instead of after the barrier). */
        const int px = x0 + t.tx, py = y0 + t.ty;
        const bool here = px < W && py < H;
        const size_t p = (size_t)py * W + px, i = off + p, o = poff + (size_t)py * ld + px;
        const float xi = here ? x[i] : 0.0f;
        const bool masked = here && mask && !mask[p];
        for (int e = tid; e < (kPixBY + 1) * (kPixBX + 1); e += kPixBX * kPixBY) {
            const int ry = e / (kPixBX + 1), rx = e % (kPixBX + 1), y = y0 + ry, xx = x0 + rx;
            gs[ry][rx] = y < H && xx < W
                             ? g_f32(mask, G, off, (size_t)y * W + xx, k2, diffusivity)
                             : -1.0f;
        }
        HYPROF_EADP_SYNC();
        if (here) {
            const float gp = gs[t.ty][t.tx];
            u[o] = gp < 0.0f ? 0.0f : pos0(xi);
            if (out) /* the profile's first band (copy_out_body's values) */
                out[o] = masked ? nodata : xi;
            ce[o] = gp < 0.0f ? 0.0f : edge_c(gp, gs[t.ty][t.tx + 1]);
            cs[o] = gp < 0.0f ? 0.0f : edge_c(gp, gs[t.ty + 1][t.tx]);
        }
        HYPROF_EADP_SYNC();
    }
}

/* One FED step over all bands, straight from device memory. */
template <bool Fma, typename T>
HYPROF_EADP_FN void fed_step_body(const Thr &t, const T *uin, T *uout, const T *gm, int W, int H,
                                  size_t npix, T tau)
{
    const int x = t.bx * t.bdx + t.tx;
    if (x >= W)
        return;
    const size_t off = (size_t)t.bz * npix;
    const T *u = uin + off, *g = gm + off;
    const T none = (T)-1.0, zero = (T)0.0;
    for (int y = t.by * t.bdy + t.ty; y < H; y += t.gdy * t.bdy) {
        const size_t p = (size_t)y * W + x;
        const T up = u[p], gp = g[p];
        if (gp < zero) {
            uout[off + p] = up;
            continue;
        }
        const bool e = x + 1 < W, w = x > 0, s = y + 1 < H, n = y > 0;
        const T ce = edge_c(gp, e ? g[p + 1] : none), cw = edge_c(w ? g[p - 1] : none, gp);
        const T cs = edge_c(gp, s ? g[p + W] : none), cn = edge_c(n ? g[p - W] : none, gp);
        uout[off + p] = fed_update<Fma>(up, e ? u[p + 1] : zero, w ? u[p - 1] : zero,
                                        s ? u[p + W] : zero, n ? u[p - W] : zero, ce, cw, cs, cn,
                                        tau);
    }
}

/* K fused FED steps on a kFedRW x (BY R) region (output tile + halo K) in
 * shared memory `buf` (two planes). Thread (c, ty) owns column c, rows
 * ty*R .. ty*R+R-1 of the region. Pixels outside the image or masked have
 * g = -1 (no flux) and u = 0. After step s the values at distance >= s from the
 * region's edge are exact; the tile at distance >= K is written. */
template <int K, int BY, int R, bool Fma, typename T>
HYPROF_EADP_FN void fed_fused_body(const Thr &t, T (*buf)[BY * R][kFedRW], const T *uin,
                                   T *uout, const T *gm, int W, int H, size_t npix,
                                   const FedSteps &steps)
{
    const int RW = kFedRW, RH = BY * R;
    const int OW = RW - 2 * K, OH = RH - 2 * K;
    const int c = t.tx, rb = t.ty * R;
    const size_t off = (size_t)t.bz * npix;
    const int x = t.bx * OW - K + c;
    const int y0 = t.by * OH - K + rb;
    const bool colin = x >= 0 && x < W;
    const T none = (T)-1.0, zero = (T)0.0;

    T u[R], g[R], ce[R], cw[R], cs[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int y = y0 + i;
        const bool in = colin && y >= 0 && y < H;
        const size_t p = in ? off + (size_t)y * W + x : 0;
        u[i] = in ? uin[p] : zero;
        g[i] = in ? gm[p] : none;
        buf[1][rb + i][c] = g[i];
    }
    HYPROF_EADP_SYNC();
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const T ge = c + 1 < RW ? buf[1][rb + i][c + 1] : none;
        const T gw = c > 0 ? buf[1][rb + i][c - 1] : none;
        const T gs = i + 1 < R ? g[i + 1] : (rb + R < RH ? buf[1][rb + R][c] : none);
        ce[i] = edge_c(g[i], ge);
        cw[i] = edge_c(gw, g[i]);
        cs[i] = edge_c(g[i], gs);
    }
    const T cn0 = edge_c(rb > 0 ? buf[1][rb - 1][c] : none, g[0]);
    /* No barrier needed here: step 0 writes plane 0, and plane 1 (read just
     * above) is written again only after step 0's barrier. */
    for (int s = 0; s < steps.n; ++s) {
        T(*b)[kFedRW] = buf[s & 1];
#pragma unroll
        for (int i = 0; i < R; ++i)
            b[rb + i][c] = u[i];
        HYPROF_EADP_SYNC();
        const T tau = (T)steps.tau[s];
        T un = rb > 0 ? b[rb - 1][c] : zero; /* old value of the north neighbour */
        const T us_end = rb + R < RH ? b[rb + R][c] : zero;
        /* Only rows at distance >= s + 1 from the region's top and bottom can
         * still reach the written tile: the first and last strips skip the
         * others (the same rows for a whole warp, which is one thread row).
         * Computed values are unchanged; skipped ones are never read by a
         * row that is computed. */
        const int lo = s + 1 - rb, hi = RH - 1 - s - rb;
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const T old = u[i];
            if (i >= lo && i < hi) {
                const T ue = c + 1 < RW ? b[rb + i][c + 1] : zero;
                const T uw = c > 0 ? b[rb + i][c - 1] : zero;
                const T us = i + 1 < R ? u[i + 1] : us_end;
                const T cn = i == 0 ? cn0 : cs[i - 1];
                u[i] = fed_update<Fma>(old, ue, uw, us, un, ce[i], cw[i], cs[i], cn, tau);
            }
            un = old;
        }
    }
    if (c < K || c >= RW - K || !colin)
        return;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = rb + i, y = y0 + i;
        if (r >= K && r < RH - K && y >= 0 && y < H)
            uout[off + (size_t)y * W + x] = u[i];
    }
}

/* fed_fused_body for the float path, with fewer instructions per pixel and
 * step (the kernel is issue-bound: 76 % of the issue slots, 3.2 IPC, an H200,
 * 09:40 round): the two shared planes have a border of one zero cell on each
 * side (written once), so the neighbours of the region's edge pixels are
 * read without a condition; every row is updated at every step (rows within
 * s of the region's edge get values that no row of the output tile depends
 * on: the halo argument of fed_fused_body, without its per-row test; with
 * the test back, 6 steps on 64 x 64 regions took 2.32 ms instead of 1.94,
 * an H200, 10:04 and 10:40 rounds); row offsets are carried from row to row. The output tile gets the same values
 * by the same operations as fed_fused_body, so the same bits.
 * Shared memory: 2 planes of (BY R + 2) x (kFedRW + 2) T. */
const int kFedPW = kFedRW + 2;

template <int K, int BY, int R, typename T>
HYPROF_EADP_FN void fed_fused_pad_body(const Thr &t, T (*buf)[BY * R + 2][kFedPW], const T *uin,
                                       T *uout, const T *gm, int W, int H, size_t npix,
                                       const FedSteps &steps)
{
    const int RW = kFedRW, RH = BY * R;
    const int OW = RW - 2 * K, OH = RH - 2 * K;
    const int c = t.tx, rb = t.ty * R;
    const int x = t.bx * OW - K + c;
    const int y0 = t.by * OH - K + rb;
    const bool colin = x >= 0 && x < W;
    const T none = (T)-1.0, zero = (T)0.0;
    const T *ub = uin + (size_t)t.bz * npix, *gb = gm + (size_t)t.bz * npix;

    T u[R], g[R], ce[R], cw[R], cs[R];
    long long ro = (long long)y0 * W + x; /* offset of (y0 + i, x) in the band */
#pragma unroll
    for (int i = 0; i < R; ++i, ro += W) {
        const bool in = colin && (unsigned)(y0 + i) < (unsigned)H;
        u[i] = in ? ub[ro] : zero;
        g[i] = in ? gb[ro] : none;
        buf[1][rb + i + 1][c + 1] = g[i];
    }
    if (t.ty == 0) /* the zero border (never written again): columns, then rows */
        for (int e = c; e < 4 * RH; e += RW) {
            const int pl = e / (2 * RH), side = (e / RH) & 1;
            buf[pl][e % RH + 1][side ? RW + 1 : 0] = zero;
        }
    if (rb == 0 || rb + R == RH) {
        const int row = rb == 0 ? 0 : RH + 1;
        buf[0][row][c + 1] = zero;
        buf[1][row][c + 1] = zero;
    }
    HYPROF_EADP_SYNC();
#pragma unroll
    for (int i = 0; i < R; ++i) { /* plane 1's interior holds g (its border: not read) */
        const T ge = c + 1 < RW ? buf[1][rb + i + 1][c + 2] : none;
        const T gw = c > 0 ? buf[1][rb + i + 1][c] : none;
        const T gs = i + 1 < R ? g[i + 1] : (rb + R < RH ? buf[1][rb + R + 1][c + 1] : none);
        ce[i] = edge_c(g[i], ge);
        cw[i] = edge_c(gw, g[i]);
        cs[i] = edge_c(g[i], gs);
    }
    const T cn0 = edge_c(rb > 0 ? buf[1][rb][c + 1] : none, g[0]);
    for (int s = 0; s < steps.n; ++s) {
        T(*b)[kFedPW] = buf[s & 1];
#pragma unroll
        for (int i = 0; i < R; ++i)
            b[rb + i + 1][c + 1] = u[i];
        HYPROF_EADP_SYNC();
        const T tau = (T)steps.tau[s];
        T un = b[rb][c + 1]; /* old value of the north neighbour (0 above the region) */
        const T us_end = b[rb + R + 1][c + 1];
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const T old = u[i];
            const T us = i + 1 < R ? u[i + 1] : us_end;
            const T cn = i == 0 ? cn0 : cs[i - 1];
            u[i] = fed_update<false>(old, b[rb + i + 1][c + 2], b[rb + i + 1][c], us, un, ce[i],
                                     cw[i], cs[i], cn, tau);
            un = old;
        }
    }
    if (c < K || c >= RW - K || !colin)
        return;
    T *ob = uout + (size_t)t.bz * npix;
    ro = (long long)y0 * W + x;
#pragma unroll
    for (int i = 0; i < R; ++i, ro += W) {
        const int r = rb + i;
        if (r >= K && r < RH - K && (unsigned)(y0 + i) < (unsigned)H)
            ob[ro] = u[i];
    }
}

/* The float FED's default kernel: K fused steps on a (32 C) x (BY R) region
 * (output tile + halo K) with the edge conductances precomputed
 * (diffuse_cond_body) and the horizontal neighbours exchanged by warp
 * shuffles. Warp w (thread row) owns rows w R .. w R + R - 1 of the region,
 * lane l the C adjacent columns C l .. C l + C - 1: a pixel's other
 * neighbours are in the thread's registers, except its north and south ones
 * at the strip's top and bottom rows, which go through shared memory (two
 * rows of the strip per step instead of all of them, one barrier per step),
 * and its west and east ones at the thread's first and last column (a
 * shuffle each). The region's edge columns (lanes 0 and 31) and rows
 * (warps 0 and BY - 1) get a neighbour that is not theirs (a finite value:
 * their own or zero): like every pixel within s of the region's edge after s
 * steps, they are wrong but never reach the output tile. Per pixel and
 * step: the nine float operations of fed_update, 2 / C shuffles and 4 / R
 * shared accesses per column (fed_fused_pad_body: one store and two loads).
 * Pixels outside the image have u = 0 and zero conductances (they stay 0).
 * Same operations in the same order as fed_fused_pad_body on the same
 * conductances: the same bits. Device code only (shuffles): no host
 * harness runs it. */
struct FedStepsF {
    float tau[kMaxFuse];
    int n;
};

template <int K, int BY, int R, int C> struct __align__(16) FedShflSmem { /* float4 accesses */
    float top[2][BY + 1][32 * C]; /* [plane][w]: warp w's first row; [BY]: zeros */
    float bot[2][BY + 1][32 * C]; /* [plane][w + 1]: warp w's last row; [0]: zeros */
};

/* The conductances in shared memory instead of registers (after a
 * FedShflSmem), for the variants with 64 registers a thread: ce of region
 * column c at [r][c + 4] ([r][3]: of the column left of the region), cs of
 * row r at [r + 1][c] ([0]: of the row above). */
template <int BY, int R, int C> struct __align__(16) FedShflCond {
    float ce[BY * R][32 * C + 4];
    float cs[BY * R + 1][32 * C];
};

template <int C> __device__ __forceinline__ void sm_store(float *p, const float (&v)[C])
{
    if (C == 4)
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    else if (C == 2)
        *reinterpret_cast<float2 *>(p) = make_float2(v[0], v[1]);
    else
        for (int j = 0; j < C; ++j)
            p[j] = v[j];
}
template <int C> __device__ __forceinline__ void sm_load(const float *p, float (&v)[C])
{
    if (C == 4) {
        const float4 q = *reinterpret_cast<const float4 *>(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else if (C == 2) {
        const float2 q = *reinterpret_cast<const float2 *>(p);
        v[0] = q.x, v[1] = q.y;
    } else
        for (int j = 0; j < C; ++j)
            v[j] = p[j];
}

/* fed_shfl_body's K steps on the region in registers (u; the conductances
 * ce, cs, cwl: of the column left of the thread's, cn0: of the row above
 * its strip; or in `cc` with SmemC). */
template <int K, int BY, int R, int C, bool SmemC>
__device__ __forceinline__ void fed_shfl_steps(FedShflSmem<K, BY, R, C> &sm,
                                               const FedShflCond<BY, R, C> &cc,
                                               float (&u)[R][C], const float (&ce)[R][C],
                                               const float (&cs)[R][C], const float (&cwl)[R],
                                               const float (&cn0)[C], const FedStepsF &steps)
{
    const int RH = BY * R;
    const int lane = (int)threadIdx.x, w = (int)threadIdx.y;
    const int c0 = C * lane, rb = w * R;
    /* Step s can still reach the output tile from rows s + 1 .. RH - 2 - s
     * only: the first and last warps stop computing after step `nc` and
     * only publish their edge rows (the neighbours' step nc reads u^nc) and
     * meet the other warps' barriers. A second loop rather than a test in
     * the first: that one cost register moves. */
    const int nc = min(steps.n, min(rb + R - 1, RH - 1 - rb));
#pragma unroll 2 /* the planes' addresses and no register moves between steps */
    for (int s = 0; s < nc; ++s) {
        const int p = s & 1;
        sm_store<C>(&sm.top[p][w][c0], u[0]);
        sm_store<C>(&sm.bot[p][w + 1][c0], u[R - 1]);
        __syncthreads();
        const float tau = steps.tau[s];
        float un[C], us_end[C], cnp[C]; /* cnp: cs of the row above */
        sm_load<C>(&sm.bot[p][w][c0], un);
        sm_load<C>(&sm.top[p][w + 1][c0], us_end);
        if (SmemC)
            sm_load<C>(&cc.cs[rb][c0], cnp);
        else
#pragma unroll
            for (int j = 0; j < C; ++j)
                cnp[j] = cn0[j];
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const float uw0 = __shfl_up_sync(0xffffffffu, u[i][C - 1], 1);
            const float ueC = __shfl_down_sync(0xffffffffu, u[i][0], 1);
            float nu[C], cer[C], csr[C], cwr;
            if (SmemC) {
                sm_load<C>(&cc.ce[rb + i][c0 + 4], cer);
                sm_load<C>(&cc.cs[rb + i + 1][c0], csr);
                cwr = cc.ce[rb + i][c0 + 3];
            } else {
#pragma unroll
                for (int j = 0; j < C; ++j) {
                    cer[j] = ce[i][j];
                    csr[j] = cs[i][j];
                }
                cwr = cwl[i];
            }
#pragma unroll
            for (int j = 0; j < C; ++j) {
                const float ue = j + 1 < C ? u[i][j + 1] : ueC;
                const float uw = j > 0 ? u[i][j - 1] : uw0;
                const float us = i + 1 < R ? u[i + 1][j] : us_end[j];
                const float cw = j > 0 ? cer[j - 1] : cwr;
                nu[j] = fed_update<false>(u[i][j], ue, uw, us, un[j], cer[j], cw, csr[j], cnp[j],
                                          tau);
            }
#pragma unroll
            for (int j = 0; j < C; ++j) {
                un[j] = u[i][j];
                u[i][j] = nu[j];
                cnp[j] = csr[j];
            }
        }
    }
    for (int s = nc; s < steps.n; ++s) { /* step nc's neighbours still read u^nc */
        const int p = s & 1;
        sm_store<C>(&sm.top[p][w][c0], u[0]);
        sm_store<C>(&sm.bot[p][w + 1][c0], u[R - 1]);
        __syncthreads();
    }
}

/* One step of fed_shfl_steps_diff (plane p of the edge rows). */
template <int K, int BY, int R>
__device__ __forceinline__ void fed_diff_step(FedShflSmem<K, BY, R, 2> &sm, int p,
                                              float (&u)[R][2], const float (&ce)[R][2],
                                              const float (&cs)[R][2], const float (&cwl)[R],
                                              const float (&cn0)[2], float tau)
{
    const int C = 2;
    const int lane = (int)threadIdx.x, w = (int)threadIdx.y;
    const int c0 = C * lane;
    sm_store<C>(&sm.top[p][w][c0], u[0]);
    sm_store<C>(&sm.bot[p][w + 1][c0], u[R - 1]);
    __syncthreads();
    float un[C], us_end[C], dn[C]; /* dn: un - u of the row */
    sm_load<C>(&sm.bot[p][w][c0], un);
    sm_load<C>(&sm.top[p][w + 1][c0], us_end);
#pragma unroll
    for (int j = 0; j < C; ++j)
        dn[j] = __fsub_rn(un[j], u[0][j]);
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const float ueC = __shfl_down_sync(0xffffffffu, u[i][0], 1);
        const float de0 = __fsub_rn(u[i][1], u[i][0]); /* ue - u of column 0 */
        const float de1 = __fsub_rn(ueC, u[i][1]);     /* ue - u of column 1 */
        const float dw0 = __shfl_up_sync(0xffffffffu, de1, 1); /* -(uw - u), column 0 */
        float ds[C];
#pragma unroll
        for (int j = 0; j < C; ++j)
            ds[j] = __fsub_rn(i + 1 < R ? u[i + 1][j] : us_end[j], u[i][j]);
        const float cn_0 = i ? cs[i - 1][0] : cn0[0], cn_1 = i ? cs[i - 1][1] : cn0[1];
        float f0 = __fmul_rn(ce[i][0], de0);
        f0 = __fmaf_rn(cwl[i], -dw0, f0);
        f0 = __fmaf_rn(cs[i][0], ds[0], f0);
        f0 = __fmaf_rn(cn_0, dn[0], f0);
        float f1 = __fmul_rn(ce[i][1], de1);
        f1 = __fmaf_rn(ce[i][0], -de0, f1);
        f1 = __fmaf_rn(cs[i][1], ds[1], f1);
        f1 = __fmaf_rn(cn_1, dn[1], f1);
        u[i][0] = __fmaf_rn(tau, f0, u[i][0]);
        u[i][1] = __fmaf_rn(tau, f1, u[i][1]);
#pragma unroll
        for (int j = 0; j < C; ++j)
            dn[j] = -ds[j];
    }
}

/* fed_shfl_steps for 2 columns and the conductances in registers, with
 * each difference of neighbours formed once: fed_update's uw - u of a pixel
 * is -(ue - u) of its west neighbour, un - u is -(us - u) of its north one
 * (IEEE subtraction is antisymmetric, and u holds no -0: pos0), and
 * fma(c, -d, f) rounds like fma(c, uw - u, f). 7 floating-point operations
 * per pixel and step instead of 9, the same bits. The west difference of
 * a thread's first column comes from its left neighbour's last one by a
 * shuffle (instead of its u). Full: steps.n == K and every warp computes
 * every step (8-row strips: rb + R - 1 >= K for all of them): the K steps
 * unrolled, their step sizes at fixed offsets. */
template <int K, int BY, int R, bool Full = false>
__device__ __forceinline__ void fed_shfl_steps_diff(FedShflSmem<K, BY, R, 2> &sm,
                                                    float (&u)[R][2], const float (&ce)[R][2],
                                                    const float (&cs)[R][2],
                                                    const float (&cwl)[R], const float (&cn0)[2],
                                                    const FedStepsF &steps)
{
    if constexpr (Full) {
#pragma unroll
        for (int s = 0; s < K; ++s)
            fed_diff_step<K, BY, R>(sm, s & 1, u, ce, cs, cwl, cn0, steps.tau[s]);
        return;
    }
    const int C = 2, RH = BY * R;
    const int lane = (int)threadIdx.x, w = (int)threadIdx.y;
    const int c0 = C * lane, rb = w * R;
    const int nc = min(steps.n, min(rb + R - 1, RH - 1 - rb));
#pragma unroll 2
    for (int s = 0; s < nc; ++s)
        fed_diff_step<K, BY, R>(sm, s & 1, u, ce, cs, cwl, cn0, steps.tau[s]);
    for (int s = nc; s < steps.n; ++s) { /* step nc's neighbours still read u^nc */
        const int p = s & 1;
        sm_store<C>(&sm.top[p][w][c0], u[0]);
        sm_store<C>(&sm.bot[p][w + 1][c0], u[R - 1]);
        __syncthreads();
    }
}

/* The output tile's part of the thread's strip (first pixel (y0, x0), at
 * ro = y0 ld + x0 in band boff of rows ld floats apart; at mo = y0 W + x0 in
 * the mask; the region's output columns XL .. 32 C - 1 - XL): u into uout,
 * and with out (the increment's last launch) also its profile band: u,
 * nodata where masked (copy_out_body's values, without its pass). Pair
 * (fed_tma_kernel: C = 2, x0 and ld even, XL even): a thread's two columns
 * as one 8-byte store (one 4-byte store at the image's right edge). */
template <int K, int BY, int R, int C, int XL = K, bool Pair = false>
__device__ __forceinline__ void fed_shfl_store(const float (&u)[R][C], float *uout, float *out,
                                               const uint8_t *mask, size_t boff, int ro, int mo,
                                               int x0, int y0, int W, int H, int ld, float nodata)
{
    const int RW = 32 * C, RH = BY * R;
    const int lane = (int)threadIdx.x, w = (int)threadIdx.y;
    const int c0 = C * lane, rb = w * R;
    if (Pair && (c0 < XL || c0 >= RW - XL || x0 >= W))
        return;
    const bool pair = x0 + 1 < W;
    bool colin[C];
#pragma unroll
    for (int j = 0; j < C; ++j)
        colin[j] = (unsigned)(x0 + j) < (unsigned)W;
    float *po = uout + boff + ro, *pw = out ? out + boff + ro : NULL;
    const uint8_t *pm = mask + mo;
#pragma unroll
    for (int i = 0; i < R; ++i, po += ld, pw += ld, pm += W) {
        const int r = rb + i;
        if (r < K || r >= RH - K || (unsigned)(y0 + i) >= (unsigned)H)
            continue;
        if constexpr (Pair) {
            if (pair)
                *reinterpret_cast<float2 *>(po) = make_float2(u[i][0], u[i][1]);
            else
                po[0] = u[i][0];
            if (!out)
                continue;
            const float o0 = (mask && !pm[0]) ? nodata : u[i][0];
            if (pair)
                *reinterpret_cast<float2 *>(pw) =
                    make_float2(o0, (mask && !pm[1]) ? nodata : u[i][1]);
            else
                pw[0] = o0;
        } else {
#pragma unroll
            for (int j = 0; j < C; ++j)
                if (c0 + j >= XL && c0 + j < RW - XL && colin[j]) {
                    po[j] = u[i][j];
                    if (out)
                        pw[j] = (mask && !pm[j]) ? nodata : u[i][j];
                }
        }
    }
}

template <int K, int BY, int R, int C, bool Cond, bool SmemC, bool Diff>
__device__ __forceinline__ void fed_shfl_body(FedShflSmem<K, BY, R, C> &sm, const float *uin,
                                              float *uout, const float *ceg, const float *csg,
                                              int W, int H, size_t npix, const FedStepsF &steps,
                                              float *out, const uint8_t *mask, float nodata)
{
    const int RW = 32 * C, RH = BY * R;
    const int OW = RW - 2 * K, OH = RH - 2 * K;
    const int lane = (int)threadIdx.x, w = (int)threadIdx.y;
    const int c0 = C * lane, rb = w * R;
    const int x0 = (int)blockIdx.x * OW - K + c0;
    const int y0 = (int)blockIdx.y * OH - K + rb;
    const size_t boff = (size_t)blockIdx.z * npix;
    const float *ub = uin + boff, *eb = ceg + boff, *sb = csg + boff;

    float u[R][C], ce[R][C], cs[R][C], cwl[R], cn0[C];
    bool colin[C];
#pragma unroll
    for (int j = 0; j < C; ++j)
        colin[j] = (unsigned)(x0 + j) < (unsigned)W;
    /* Row pointers formed unconditionally (never dereferenced outside the
     * image): one address per row and array, the columns at immediate
     * offsets (the prologue is a third of the kernel's instructions). */
    const int ro = y0 * W + x0; /* offset of (y0, x0) in the band (< 2^31: checked on the host) */
    const float *pu = ub + ro, *pe = eb + ro, *ps = sb + ro;
    /* A region whose loads (and the column left of it, the row above it)
     * all fall inside the image (most of them): the loads without their
     * conditions (block-uniform branch). */
    const int xr = (int)blockIdx.x * OW - K, yr = (int)blockIdx.y * OH - K;
    const bool inner = xr >= 1 && xr + RW <= W && yr >= 1 && yr + RH <= H;
    if (Cond && inner) {
#pragma unroll
        for (int j = 0; j < C; ++j)
            cn0[j] = __ldg(ps + j - W);
#pragma unroll
        for (int i = 0; i < R; ++i, pu += W, pe += W, ps += W) {
#pragma unroll
            for (int j = 0; j < C; ++j) {
                u[i][j] = __ldg(pu + j);
                ce[i][j] = __ldg(pe + j);
                cs[i][j] = __ldg(ps + j);
            }
            cwl[i] = __ldg(pe - 1);
        }
    } else if (Cond) {
        const bool rin = (unsigned)(y0 - 1) < (unsigned)H;
#pragma unroll
        for (int j = 0; j < C; ++j)
            cn0[j] = rin && colin[j] ? __ldg(ps + j - W) : 0.0f;
#pragma unroll
        for (int i = 0; i < R; ++i, pu += W, pe += W, ps += W) {
            const bool rin = (unsigned)(y0 + i) < (unsigned)H;
#pragma unroll
            for (int j = 0; j < C; ++j) {
                const bool in = rin && colin[j];
                u[i][j] = in ? __ldg(pu + j) : 0.0f;
                ce[i][j] = in ? __ldg(pe + j) : 0.0f;
                cs[i][j] = in ? __ldg(ps + j) : 0.0f;
            }
            cwl[i] = rin && colin[0] && x0 > 0 ? __ldg(pe - 1) : 0.0f;
        }
    } else {
        /* ceg is g (-1: masked; outside the image too): the conductances
         * from it and its neighbours' (one more row above and below, one
         * more column left and right), 12 bytes per pixel and launch
         * instead of 16. */
        const bool cl = (unsigned)(x0 - 1) < (unsigned)W, cr = (unsigned)(x0 + C) < (unsigned)W;
        float g[R + 2][C], gl[R], gr[R];
        pe -= W;
#pragma unroll
        for (int i = 0; i < R + 2; ++i, pe += W) {
            const bool rin = (unsigned)(y0 - 1 + i) < (unsigned)H;
#pragma unroll
            for (int j = 0; j < C; ++j)
                g[i][j] = rin && colin[j] ? __ldg(pe + j) : -1.0f;
            if (i >= 1 && i <= R) {
                gl[i - 1] = rin && cl ? __ldg(pe - 1) : -1.0f;
                gr[i - 1] = rin && cr ? __ldg(pe + C) : -1.0f;
            }
        }
#pragma unroll
        for (int i = 0; i < R; ++i, pu += W) {
            const bool rin = (unsigned)(y0 + i) < (unsigned)H;
#pragma unroll
            for (int j = 0; j < C; ++j) {
                u[i][j] = rin && colin[j] ? __ldg(pu + j) : 0.0f;
                ce[i][j] = edge_c(g[i + 1][j], j + 1 < C ? g[i + 1][j + 1] : gr[i]);
                cs[i][j] = edge_c(g[i + 1][j], g[i + 2][j]);
            }
            cwl[i] = edge_c(gl[i], g[i + 1][0]);
        }
#pragma unroll
        for (int j = 0; j < C; ++j)
            cn0[j] = edge_c(g[0][j], g[1][j]);
    }
    FedShflCond<BY, R, C> &cc = *reinterpret_cast<FedShflCond<BY, R, C> *>(&sm + 1);
    if (SmemC) { /* read after the first step's barrier */
#pragma unroll
        for (int i = 0; i < R; ++i) {
            sm_store<C>(&cc.ce[rb + i][c0 + 4], ce[i]);
            sm_store<C>(&cc.cs[rb + i + 1][c0], cs[i]);
            if (lane == 0)
                cc.ce[rb + i][3] = cwl[i];
        }
        if (w == 0)
            sm_store<C>(&cc.cs[0][c0], cn0);
    }
    if (w == 0 || w == BY - 1) { /* the zero rows (never written again) */
        float z[C];
#pragma unroll
        for (int j = 0; j < C; ++j)
            z[j] = 0.0f;
        for (int p = 0; p < 2; ++p)
            sm_store<C>(w == 0 ? &sm.bot[p][0][c0] : &sm.top[p][BY][c0], z);
    }
    if constexpr (Diff) /* 2 columns, conductances in registers */
        fed_shfl_steps_diff<K, BY, R>(sm, u, ce, cs, cwl, cn0, steps);
    else
        fed_shfl_steps<K, BY, R, C, SmemC>(sm, cc, u, ce, cs, cwl, cn0, steps);
    fed_shfl_store<K, BY, R, C>(u, uout, out, mask, boff, ro, ro, x0, y0, W, H, W, nodata);
}

/* fed_tma_kernel's regions: 64 x 64, the output tile OW x OH at (XL, K);
 * XL: K rounded up to 4 (a box starts at a multiple of 16 bytes in x). */
__host__ __device__ constexpr int fed_tma_xl(int K) { return (K + 3) / 4 * 4; }
template <int K> struct FedTmaShape {
    static const int XL = fed_tma_xl(K), OW = 64 - 2 * XL, OH = 64 - 2 * K;
};

/* fed_shfl_body's default shape (64 x 64 regions, 8 warps of 8 x 2 pixels,
 * the steps of fed_shfl_steps_diff) on a persistent grid fed by the copy
 * engine (sm_90): each CTA takes regions blockIdx.x, + gridDim.x, ... of the
 * (bands x rows x columns of regions) sequence; one thread asks for the
 * next region's u, ce and cs (three 64 x 64 boxes of tensor maps, zeros
 * outside the image) as soon as the threads have taken the current one
 * from shared memory into their registers, so the copy runs under the K
 * steps instead of before them, and no thread issues a global load. The
 * conductance of the column left of a thread's comes from its left
 * neighbour by a shuffle and that of the row above its strip from the
 * staged cs (both only wrong on the region's edge, which never reaches
 * the output tile). Same operations on the same values as fed_shfl_body
 * for every output pixel: the same bits. The planes' rows are `ld` floats
 * apart (a multiple of 4: the copy engine's rule), and a box must start at
 * a multiple of 16 bytes in x (an illegal instruction otherwise: seen on an
 * H100, 2026-11-27), so the regions' columns start at multiples of 4: a
 * halo of XL = K rounded up to 4 on either side (output tiles of 48
 * columns for K = 7 instead of 50: 2.6 % more regions on Houston). K
 * steps unrolled when a launch has K (its step sizes then at fixed
 * offsets of the parameter), 8-byte stores (fed_shfl_store's Pair). Measured: see
 * the header comment (FED, copy engine). Dynamic shared memory:
 * sizeof(FedTmaSmem) + 128 (alignment). */
template <int K> struct __align__(128) FedTmaSmem {
    float st[3][64][64]; /* u, ce, cs of the region */
    FedShflSmem<K, 8, 8, 2> fs;
    uint64_t full; /* the region's three boxes have arrived */
};

template <int K>
__global__ void __launch_bounds__(256, 2)
    fed_tma_kernel(const __grid_constant__ CUtensorMap tu, const __grid_constant__ CUtensorMap tce,
                   const __grid_constant__ CUtensorMap tcs, float *__restrict__ uout,
                   float *__restrict__ out, const uint8_t *__restrict__ mask, int W, int H, int ld,
                   size_t plane, int z0, int gx, int gy, int ntiles,
                   const __grid_constant__ FedStepsF steps, float nodata)
{
#ifdef HYPROF_HOPPER
    const int BY = 8, R = 8, C = 2, RW = 64, RH = 64;
    const int XL = FedTmaShape<K>::XL, OW = FedTmaShape<K>::OW, OH = FedTmaShape<K>::OH;
    extern __shared__ float4 fed_tma_raw[];
    /* Aligned by an offset from the shared array, not by a round trip
     * through an integer: that loses the address space, and every access
     * to `sm` became a generic load or store (LD.E / ST.E instead of LDS /
     * STS: longer latency, counted as long-scoreboard stalls). */
    FedTmaSmem<K> &sm = *reinterpret_cast<FedTmaSmem<K> *>(
        reinterpret_cast<char *>(fed_tma_raw) + ((128u - (smem_u32(fed_tma_raw) & 127u)) & 127u));
    const int lane = (int)threadIdx.x, w = (int)threadIdx.y;
    const int c0 = C * lane, rb = w * R;
    /* Warps 0, 1, 2 each start one of the three copies (u, ce, cs; each
     * arriving on the mbarrier with its own box's bytes), so that no warp
     * is late by all three at the first step's barrier (H100, 2026-11-27
     * 12:02 round: FED 1.118-1.119 ms against 1.125 with warp 0 starting
     * them all; Nsight: stalls at the first step's barrier 2.0 % of the
     * samples, 3.4 % with warp 0 starting them all and 7.0 % when it also
     * computed the next region's origin there). */
    const bool issuer = lane == 0 && w < 3;
    /* Region `tile`'s band and first column and row (the copies' origin). */
    auto origin = [&](int tile, int *x, int *y) {
        *x = tile % gx * OW - XL;
        *y = (tile / gx) % gy * OH - K;
        return tile / (gx * gy);
    };
    auto issue = [&](int x, int y, int z) { /* by the issuers */
        mbar_arrive_tx(&sm.full, RW * RH * (unsigned)sizeof(float));
        tensor_copy_3d(sm.st[w], w == 0 ? &tu : w == 1 ? &tce : &tcs, x, y, z0 + z, &sm.full);
    };
    if (lane == 0 && w == 0) {
        mbar_init(&sm.full, 3); /* one arrival per issuer */
        mbar_init_fence();
    }
    if (w == 0 || w == BY - 1) { /* the zero rows (never written again) */
        const float z[C] = {0.0f, 0.0f};
        for (int p = 0; p < 2; ++p)
            sm_store<C>(w == 0 ? &sm.fs.bot[p][0][c0] : &sm.fs.top[p][BY][c0], z);
    }
    __syncthreads();
    if (issuer && (int)blockIdx.x < ntiles) {
        int x, y;
        const int z = origin((int)blockIdx.x, &x, &y);
        issue(x, y, z);
    }
    unsigned phase = 0;
    for (int tile = (int)blockIdx.x; tile < ntiles; tile += (int)gridDim.x) {
        /* The divisions before the wait, off the first step's path: this
         * region's origin (for the stores) and, for the issuers, the next
         * one's. */
        const int next = tile + (int)gridDim.x;
        int x0, y0, nx = 0, ny = 0, nz = 0;
        const int bz = origin(tile, &x0, &y0);
        if (issuer && next < ntiles)
            nz = origin(next, &nx, &ny);
        mbar_wait(&sm.full, phase);
        phase ^= 1u;
        float u[R][C], ce[R][C], cs[R][C], cwl[R], cn0[C] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < R; ++i) {
            sm_load<C>(&sm.st[0][rb + i][c0], u[i]);
            sm_load<C>(&sm.st[1][rb + i][c0], ce[i]);
            sm_load<C>(&sm.st[2][rb + i][c0], cs[i]);
        }
        if (rb > 0) /* warp-uniform */
            sm_load<C>(&sm.st[2][rb - 1][c0], cn0);
#pragma unroll
        for (int i = 0; i < R; ++i)
            cwl[i] = __shfl_up_sync(0xffffffffu, ce[i][1], 1);
        __syncthreads(); /* the region is in registers; the last one's steps are done */
        if (issuer && next < ntiles) {
            fence_proxy_async();
            issue(nx, ny, nz);
        }
        if (steps.n == K) /* 8-row strips: every warp computes every step (R - 1 >= K) */
            fed_shfl_steps_diff<K, BY, R, R - 1 >= K>(sm.fs, u, ce, cs, cwl, cn0, steps);
        else
            fed_shfl_steps_diff<K, BY, R>(sm.fs, u, ce, cs, cwl, cn0, steps);
        x0 += c0, y0 += rb;
        fed_shfl_store<K, BY, R, C, XL, true>(u, uout, out, mask, (size_t)bz * plane,
                                              y0 * ld + x0, y0 * W + x0, x0, y0, W, H, ld,
                                              nodata);
    }
#endif
}

/* The fused FED steps with a persistent grid: each CTA takes tiles
 * blockIdx.x, + gridDim.x, ... of the (bands x rows x columns of tiles)
 * sequence and, while it runs the K steps of one tile, copies the next
 * tile's u and g into two more shared planes (asynchronous copies), so
 * loading and computing overlap inside the CTA. A thread owns CW adjacent
 * columns (1 or 2) of R rows: with 2, the neighbour between its own columns
 * comes from registers, which halves the shared-memory loads per pixel. The
 * arithmetic per pixel is fed_fused_body's. Shared memory: 4 planes of BY R x
 * kFedRW doubles; blockDim.x = kFedRW / CW. */
template <int K, int BY, int R, int CW, bool Fma>
HYPROF_EADP_FN void fed_persist_body(const Thr &t, double (*buf)[BY * R][kFedRW],
                                     const double *uin, double *uout, const double *gm, int W,
                                     int H, size_t npix, int gx, int gy, int nb,
                                     const FedSteps &steps)
{
    const int RW = kFedRW, RH = BY * R;
    const int OW = RW - 2 * K, OH = RH - 2 * K;
    const int c0 = t.tx * CW, rb = t.ty * R;
    double(*pu)[kFedRW] = buf[2], (*pg)[kFedRW] = buf[3];
    const int ntiles = gx * gy * nb;

    /* Prefetch of tile `tile`: this thread's columns of u and g (outside the
     * image: u = 0, g = -1, stored directly). */
    auto issue = [&](int tile) {
        const int bx = tile % gx, by = (tile / gx) % gy, bz = tile / (gx * gy);
        const size_t off = (size_t)bz * npix;
        const int y0 = by * OH - K + rb;
#pragma unroll
        for (int j = 0; j < CW; ++j) {
            const int x = bx * OW - K + c0 + j;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const int y = y0 + i;
                if (x >= 0 && x < W && y >= 0 && y < H) {
                    const size_t p = off + (size_t)y * W + x;
                    HYPROF_EADP_COPY_ASYNC(&pu[rb + i][c0 + j], uin + p);
                    HYPROF_EADP_COPY_ASYNC(&pg[rb + i][c0 + j], gm + p);
                } else {
                    pu[rb + i][c0 + j] = 0.0;
                    pg[rb + i][c0 + j] = -1.0;
                }
            }
        }
        HYPROF_EADP_COPY_COMMIT();
    };

    int tile = t.bx;
    if (tile < ntiles)
        issue(tile);
    for (; tile < ntiles; tile += t.gdx) {
        HYPROF_EADP_COPY_WAIT();
        HYPROF_EADP_SYNC(); /* the tile is in pu/pg; the last tile's steps are done */
        double u[CW][R], ce[CW][R], cw[R], cs[CW][R], cn0[CW];
#pragma unroll
        for (int j = 0; j < CW; ++j) {
            const int c = c0 + j;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const double gi = pg[rb + i][c];
                const double ge = c + 1 < RW ? pg[rb + i][c + 1] : -1.0;
                const double gs = rb + i + 1 < RH ? pg[rb + i + 1][c] : -1.0;
                u[j][i] = pu[rb + i][c];
                ce[j][i] = edge_c(gi, ge);
                cs[j][i] = edge_c(gi, gs);
                if (j == 0)
                    cw[i] = edge_c(c > 0 ? pg[rb + i][c - 1] : -1.0, gi);
            }
            cn0[j] = edge_c(rb > 0 ? pg[rb - 1][c] : -1.0, pg[rb][c]);
        }
        HYPROF_EADP_SYNC(); /* pu/pg read by all: free for the next tile */
        if (tile + t.gdx < ntiles)
            issue(tile + t.gdx);
        for (int s = 0; s < steps.n; ++s) {
            double(*b)[kFedRW] = buf[s & 1];
#pragma unroll
            for (int i = 0; i < R; ++i) {
                if (CW == 2) /* one 16-byte store (c0 even, rows of 64 doubles) */
                    HYPROF_EADP_STORE2(&b[rb + i][c0], u[0][i], u[CW - 1][i]);
                else
                    b[rb + i][c0] = u[0][i];
            }
            HYPROF_EADP_SYNC();
            const double tau = steps.tau[s];
            double un[CW], us_end[CW];
#pragma unroll
            for (int j = 0; j < CW; ++j) {
                un[j] = rb > 0 ? b[rb - 1][c0 + j] : 0.0;
                us_end[j] = rb + R < RH ? b[rb + R][c0 + j] : 0.0;
            }
            const int lo = s + 1 - rb, hi = RH - 1 - s - rb; /* as in fed_fused_body */
#pragma unroll
            for (int i = 0; i < R; ++i) {
                if (!(i >= lo && i < hi)) {
#pragma unroll
                    for (int j = 0; j < CW; ++j)
                        un[j] = u[j][i];
                    continue;
                }
                /* Old values of this row first: the update of column j reads
                 * column j + 1's old value. */
                double old[CW];
#pragma unroll
                for (int j = 0; j < CW; ++j)
                    old[j] = u[j][i];
                const double uwest = c0 > 0 ? b[rb + i][c0 - 1] : 0.0;
                const double ueast = c0 + CW < RW ? b[rb + i][c0 + CW] : 0.0;
#pragma unroll
                for (int j = 0; j < CW; ++j) {
                    const double ue = j + 1 < CW ? old[j + 1] : ueast;
                    const double uw = j > 0 ? old[j - 1] : uwest;
                    const double us = i + 1 < R ? u[j][i + 1] : us_end[j];
                    const double cn = i == 0 ? cn0[j] : cs[j][i - 1];
                    const double cwj = j > 0 ? ce[j - 1][i] : cw[i];
                    u[j][i] = fed_update<Fma>(old[j], ue, uw, us, un[j], ce[j][i], cwj,
                                              cs[j][i], cn, tau);
                    un[j] = old[j];
                }
            }
        }
        const int bx = tile % gx, by = (tile / gx) % gy, bz = tile / (gx * gy);
        const int y0 = by * OH - K + rb;
#pragma unroll
        for (int j = 0; j < CW; ++j) {
            const int c = c0 + j, x = bx * OW - K + c;
            if (c < K || c >= RW - K || x < 0 || x >= W)
                continue;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const int r = rb + i, y = y0 + i;
                if (r >= K && r < RH - K && y >= 0 && y < H)
                    uout[(size_t)bz * npix + (size_t)y * W + x] = u[j][i];
            }
        }
    }
}

/* out[b] = float(src[b]) where valid, nodata where masked. */
template <typename T>
HYPROF_EADP_FN void to_float_body(const Thr &t, const T *src, const uint8_t *mask, int W, int H,
                                  size_t npix, float nodata, float *out)
{
    const int x = t.bx * t.bdx + t.tx;
    if (x >= W)
        return;
    const size_t off = (size_t)t.bz * npix;
    for (int y = t.by * t.bdy + t.ty; y < H; y += t.gdy * t.bdy) {
        const size_t p = (size_t)y * W + x;
        out[off + p] = (!mask || mask[p]) ? (float)src[off + p] : nodata;
    }
}

/* The float source as it is, nodata where masked, over the bands as one flat
 * array of n values (4 at a time: src and out are 16-byte aligned), planes
 * of `plane` values with rows ld apart (the mask's: W; the columns from W
 * on are padding, copied as they are). */
HYPROF_EADP_FN void copy_out_body(const Thr &t, const float *src, const uint8_t *mask, int W,
                                  int ld, size_t plane, size_t n, float nodata, float *out)
{
    const size_t stride = (size_t)t.gdx * t.bdx * 4;
    for (size_t i = ((size_t)t.bx * t.bdx + t.tx) * 4; i < n; i += stride) {
        if (i + 4 <= n && !mask) {
            *reinterpret_cast<float4 *>(out + i) = *reinterpret_cast<const float4 *>(src + i);
            continue;
        }
        for (size_t j = i; j < i + 4 && j < n; ++j) {
            const size_t q = j % plane, c = q % (size_t)ld;
            out[j] = (!mask || c >= (size_t)W || mask[q / (size_t)ld * (size_t)W + c]) ? src[j]
                                                                                       : nodata;
        }
    }
}

/* ---- kernels ------------------------------------------------------------------- */

__global__ void __launch_bounds__(kPixBX *kPixBY)
    gauss_h_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, int W, int H,
                   size_t npix, int nb, const double *__restrict__ w, int r,
                   double *__restrict__ Hout)
{
    gauss_h_body(HYPROF_EADP_THR, x, mask, W, H, npix, nb, w, r, Hout);
}

__global__ void __launch_bounds__(kPixBX *kPixBY)
    gauss_v_kernel(const double *__restrict__ Hin, int W, int H, size_t npix, int nb,
                   const double *__restrict__ w, int r, double *__restrict__ s)
{
    gauss_v_body(HYPROF_EADP_THR, Hin, W, H, npix, nb, w, r, s);
}

__global__ void __launch_bounds__(kPixBX *kPixBY)
    scharr_kernel(const double *__restrict__ s, const uint8_t *__restrict__ mask, int W, int H,
                  size_t npix, double *__restrict__ G, unsigned *__restrict__ Kh,
                  u64 *__restrict__ cnt)
{
    __shared__ unsigned cnt_sh[3];
    scharr_body(HYPROF_EADP_THR, cnt_sh, s, mask, W, H, npix, G, Kh, cnt);
}

template <int RT, int TY = prep_ty(RT)>
__global__ void __launch_bounds__(kPixBX *kPixBY)
    prep_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, int W, int H,
                size_t npix, const double *__restrict__ w, double *__restrict__ G,
                unsigned *__restrict__ Kh, u64 *__restrict__ cnt)
{
    constexpr int HR = TY + 2 + 2 * RT;
    __shared__ double Hn[HR][kPrepSW], Hd[HR][kPrepSW], S[TY + 2][kPrepSW];
    __shared__ float Xv[HR][kPrepXW];
    __shared__ unsigned char Xm[HR][kPrepXW];
    __shared__ unsigned cnt_sh[3];
    prep_body<RT, TY>(HYPROF_EADP_THR, Xv, Xm, Hn, Hd, S, cnt_sh, x, mask, W, H, npix, w, G, Kh,
                  cnt);
}

/* Where a folded selection pass gets its states: pass 0 from the counts, a
 * later one by scanning the previous pass's histograms itself (every block of
 * the band, redundantly: no scan launch between two passes). Each pass has
 * its own slot of states and histograms, so no block reads what another block
 * of its launch writes. */
struct SelFold {
    const u64 *cnt;       /* pass 0: the ranks from the counts (else NULL) */
    double pct;           /* the percentile (pass 0) */
    const SelState *prev; /* a later pass: the previous pass's states ... */
    const u64 *phist;     /* ... and histograms (all bands) */
    const u64 *pcoarse;   /* ... and its coarse ones (sel_find_step) */
    u64 phmask;           /* the previous pass's digit */
    int pshift;
    SelState *out; /* this pass's states (all bands), for the next pass: block 0 writes them */
    u64 *zero;     /* the next pass's slot of histograms, zeroed here (NULL: none) ... */
    size_t nzero;  /* ... its elements */
};

/* The states after the previous pass (f), band b, into ss.nxt. */
template <int NT>
HYPROF_EADP_FN void sel_prev_states(const Thr &t, SelStep<NT> &ss, const SelFold &f, int b)
{
    sel_find_step<NT>(t, ss, f.prev + (size_t)b * kSelQueries, f.phmask, f.pshift,
                      f.phist + (size_t)b * kSelQueries * kSelBins,
                      f.pcoarse + (size_t)b * kSelQueries * kSelCoarse);
}

/* The pass's states of band t.bz into ss.nxt (every thread sees them); block 0
 * stores them, and (pass 0) clears the band's candidate count. */
template <int NT>
HYPROF_EADP_FN void sel_fold_states(const Thr &t, SelStep<NT> &ss, const SelFold &f, u64 *ncand)
{
    const int tid = t.ty * t.bdx + t.tx, b = t.bz;
    if (f.zero) /* this block's share of the next slot */
        for (size_t i = ((size_t)b * t.gdx + t.bx) * NT + tid; i < f.nzero;
             i += (size_t)t.gdx * t.gdz * NT)
            f.zero[i] = 0;
    if (f.cnt) {
        if (tid == 0)
            sel_ranks(f.cnt + 3 * b, f.pct, ss.nxt);
        HYPROF_EADP_SYNC();
    } else {
        sel_prev_states<NT>(t, ss, f, b);
    }
    if (t.bx == 0 && tid < kSelQueries)
        f.out[(size_t)b * kSelQueries + tid] = ss.nxt[tid];
    if (f.cnt && t.bx == 0 && tid == 0)
        ncand[b] = 0;
}

/* A selection pass: its states (sel_fold_states), then its histograms
 * (sel_hist_body) into ghist and gcoarse, this pass's slot. */
template <int NT>
__global__ void __launch_bounds__(NT, NT == 1024 ? 2 : 1)
    sel_pass_kernel(const double *__restrict__ G, const unsigned *__restrict__ Kh,
                    const uint8_t *__restrict__ mask, size_t npix, SelFold f, u64 hmask,
                    int shift, unsigned dmask, u64 *__restrict__ ghist, u64 *gcoarse,
                    const u64 *list, u64 *cand, u64 *ncand)
{
    __shared__ unsigned sh[kSelQueries * kSelBins];
    __shared__ SelStep<NT> ss;
    sel_fold_states<NT>(HYPROF_EADP_THR, ss, f, ncand);
    sel_hist_body(HYPROF_EADP_THR, sh, G, Kh, mask, npix, ss.nxt, hmask, shift, dmask, ghist,
                  gcoarse, list, cand, ncand);
}

/* The selection's end, one block of kSelLast threads per band: the states
 * after pass first - 1 (f), the passes first .. kSelPasses - 1 over the band's
 * candidates (normally a few thousand keys) with the histograms in shared
 * memory, their scans, and k: one launch instead of 7 (each a few
 * microseconds of latency). first = kSelPasses: only the last step and k. */
struct SelLastShared {
    unsigned cnt[kSelQueries * kSelBins];
    u64 hist[kSelQueries * kSelBins];
    SelStep<kSelLast> step;
};

__global__ void __launch_bounds__(kSelLast)
    sel_last_kernel(size_t npix, SelFold f, int first, const u64 *list, const u64 *ncand,
                    const u64 *__restrict__ cnt, double pct, double *__restrict__ k)
{
    extern __shared__ float4 sel_last_smem[];
    SelLastShared &sh = *reinterpret_cast<SelLastShared *>(sel_last_smem);
    const int b = (int)blockIdx.z, tid = (int)threadIdx.x;
    const Thr one{tid, 0, 0, 0, 0, kSelLast, 1, 1, 1, 1}; /* the kernels' view: band index 0 */
    sel_prev_states<kSelLast>(one, sh.step, f, b);
    const u64 *lb = list + (size_t)b * npix, *nc = ncand + b;
    for (int pass = first; pass < kSelPasses; ++pass) {
        for (int i = tid; i < kSelQueries * kSelBins; i += kSelLast)
            sh.hist[i] = 0; /* the previous scan loaded it before its first barrier */
        const int shift = 55 - 11 * pass, width = 11; /* kSelShift, kSelWidth (host arrays) */
        const u64 hmask = shift + width >= 64 ? 0ull : ~0ull << (shift + width);
        sel_hist_body(one, sh.cnt, NULL, NULL, NULL, npix, sh.step.nxt, hmask, shift,
                      (1u << width) - 1u, sh.hist, NULL, lb, NULL, const_cast<u64 *>(nc));
        __syncthreads();
        sel_scan_step<kSelLast>(one, sh.step, sh.step.nxt, hmask, shift, sh.hist);
    }
    if (tid == 0)
        k[b] = sel_k(cnt + 3 * b, sh.step.nxt, pct);
}

__global__ void fill_kernel(double *__restrict__ k, int nb, double v)
{
    const int b = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (b < nb)
        k[b] = v;
}

/* G and u may be the same buffer (double: u overwrites G). */
template <typename T>
__global__ void __launch_bounds__(kPixBX *kPixBY)
    diffuse_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, int W, int H,
                   size_t npix, const double *__restrict__ k, int diffusivity, const double *G,
                   T *u, T *__restrict__ gm)
{
    diffuse_body<T>(HYPROF_EADP_THR, x, mask, W, H, npix, k, diffusivity, G, u, gm);
}

template <bool Fma, typename T>
__global__ void __launch_bounds__(kPixBX *kPixBY)
    fed_step_kernel(const T *__restrict__ uin, T *__restrict__ uout, const T *__restrict__ gm,
                    int W, int H, size_t npix, T tau)
{
    fed_step_body<Fma, T>(HYPROF_EADP_THR, uin, uout, gm, W, H, npix, tau);
}

/* Dynamic shared memory: 2 * BY * R * kFedRW T (64 KiB for 64-row regions
 * of double); 2 blocks per SM for 32-row regions, 1 for 64-row ones. */
template <int K, int BY, int R, bool Fma, typename T>
__global__ void __launch_bounds__(kFedBX *BY, 64 / (BY * R))
    fed_fused_kernel(const T *__restrict__ uin, T *__restrict__ uout, const T *__restrict__ gm,
                     int W, int H, size_t npix, const __grid_constant__ FedSteps steps)
{
    extern __shared__ double fed_smem[];
    fed_fused_body<K, BY, R, Fma, T>(HYPROF_EADP_THR,
                                     reinterpret_cast<T(*)[BY * R][kFedRW]>(fed_smem), uin, uout,
                                     gm, W, H, npix, steps);
}

/* Dynamic shared memory: 2 * (BY * R + 2) * kFedPW T; 4 blocks per SM for
 * 32-row regions of 8- or 16-row strips (64 or 128 registers at most).
 * More strips per region: as fed_fused_kernel. */
template <int K, int BY, int R, typename T>
__global__ void __launch_bounds__(kFedBX *BY, (R >= 8 ? 128 : 64) / (BY * R))
    fed_fused_pad_kernel(const T *__restrict__ uin, T *__restrict__ uout, const T *__restrict__ gm,
                         int W, int H, size_t npix, const __grid_constant__ FedSteps steps)
{
    extern __shared__ double fed_smem[];
    fed_fused_pad_body<K, BY, R, T>(HYPROF_EADP_THR,
                                    reinterpret_cast<T(*)[BY * R + 2][kFedPW]>(fed_smem), uin,
                                    uout, gm, W, H, npix, steps);
}

/* Dynamic shared memory: a FedShflSmem (35 KiB for 64-row regions, 66 for
 * 128-row ones); at least MinB blocks of 32 BY threads per SM (512 threads,
 * MinB = 1: about 110 registers, one block per SM; MinB = 2 or 1024
 * threads: 64 registers, some spilled). Diff (2 columns, conductances in
 * registers): the steps of fed_shfl_steps_diff. */
template <int K, int BY, int R, int C, int MinB, bool Cond, bool Diff>
__global__ void __launch_bounds__(32 * BY, MinB)
    fed_shfl_kernel(const float *__restrict__ uin, float *__restrict__ uout,
                    const float *__restrict__ ceg, const float *__restrict__ csg, int W, int H,
                    size_t npix, const __grid_constant__ FedStepsF steps, float *__restrict__ out,
                    const uint8_t *__restrict__ mask, float nodata)
{
    extern __shared__ float4 fed_shfl_smem[];
    /* 64 registers (4 x 4 pixels: two blocks per SM or 1024 threads) or 40
     * (2 x 4 pixels, three blocks per SM) */
    constexpr bool SmemC = (C == 4 && (MinB >= 2 || BY >= 32)) || (C == 2 && MinB >= 3);
    fed_shfl_body<K, BY, R, C, Cond, SmemC, Diff && C == 2 && !SmemC>(
        *reinterpret_cast<FedShflSmem<K, BY, R, C> *>(fed_shfl_smem), uin, uout, ceg, csg, W, H,
        npix, steps, out, mask, nodata);
}

__global__ void __launch_bounds__(kPixBX *kPixBY)
    diffuse_cond_kernel(const float *__restrict__ x, const uint8_t *__restrict__ mask, int W,
                        int H, size_t npix, int ld, size_t plane, const double *__restrict__ k,
                        int diffusivity, const double *__restrict__ G, float *__restrict__ u,
                        float *__restrict__ ce, float *__restrict__ cs, float *__restrict__ out,
                        float nodata)
{
    __shared__ float gs[kPixBY + 1][kPixBX + 1];
    diffuse_cond_body(HYPROF_EADP_THR, gs, x, mask, W, H, npix, ld, plane, k, diffusivity, G, u,
                      ce, cs, out, nodata);
}

/* Dynamic shared memory: 4 * BY * R * kFedRW doubles; grid: a few CTAs per SM. */
template <int K, int BY, int R, int CW, bool Fma>
__global__ void __launch_bounds__(kFedBX / CW * BY, 64 / (BY * R))
    fed_persist_kernel(const double *__restrict__ uin, double *__restrict__ uout,
                       const double *__restrict__ gm, int W, int H, size_t npix, int gx, int gy,
                       int nb, const __grid_constant__ FedSteps steps)
{
    extern __shared__ double fed_smem[];
    fed_persist_body<K, BY, R, CW, Fma>(HYPROF_EADP_THR,
                                        reinterpret_cast<double(*)[BY * R][kFedRW]>(fed_smem),
                                        uin, uout, gm, W, H, npix, gx, gy, nb, steps);
}

__global__ void __launch_bounds__(256)
    copy_out_kernel(const float *__restrict__ src, const uint8_t *__restrict__ mask, int W, int ld,
                    size_t plane, size_t n, float nodata, float *__restrict__ out)
{
    copy_out_body(HYPROF_EADP_THR, src, mask, W, ld, plane, n, nodata, out);
}

template <typename T>
__global__ void __launch_bounds__(kPixBX *kPixBY)
    to_float_kernel(const T *__restrict__ src, const uint8_t *__restrict__ mask, int W, int H,
                    size_t npix, float nodata, float *__restrict__ out)
{
    to_float_body<T>(HYPROF_EADP_THR, src, mask, W, H, npix, nodata, out);
}

/* ---- host side ----------------------------------------------------------------- */

/* The fused FED kernel for K steps, strips of R rows on `rows`-row regions
 * (BY = rows / R thread rows), with or without FMA: one CTA per tile (CW =
 * 0), or persistent with CW columns per thread (K = 4, 6, 8). */
template <int BY, int R, bool F, int CW> const void *fused_kernel_ptr_k(int K)
{
    if (CW)
        switch (K) {
        case 6: return (const void *)fed_persist_kernel<6, BY, R, (CW ? CW : 1), F>;
        case 8: return (const void *)fed_persist_kernel<8, BY, R, (CW ? CW : 1), F>;
        default: return (const void *)fed_persist_kernel<4, BY, R, (CW ? CW : 1), F>;
        }
    switch (K) {
    case 2: return (const void *)fed_fused_kernel<2, BY, R, F, double>;
    case 6: return (const void *)fed_fused_kernel<6, BY, R, F, double>;
    case 8: return (const void *)fed_fused_kernel<8, BY, R, F, double>;
    default: return (const void *)fed_fused_kernel<4, BY, R, F, double>;
    }
}

template <int R, bool F, int CW> const void *fused_kernel_ptr_r(int K, int rows)
{
    return rows == 64 ? fused_kernel_ptr_k<64 / R, R, F, CW>(K)
                      : fused_kernel_ptr_k<32 / R, R, F, CW>(K);
}

template <bool F, int CW> const void *fused_kernel_ptr_f(int K, int rows, int R)
{
    if (R == 2) /* 32-row regions, one CTA per tile only (1024 threads) */
        return fused_kernel_ptr_k<16, 2, F, 0>(K);
    return R == 4 ? fused_kernel_ptr_r<4, F, CW>(K, rows) : fused_kernel_ptr_r<8, F, CW>(K, rows);
}

/* cw: 0 one CTA per tile; 1 or 2 persistent, columns per thread. */
template <bool F> const void *fused_kernel_ptr_c(int K, int rows, int R, int cw)
{
    if (cw == 2)
        return fused_kernel_ptr_f<F, 2>(K, rows, R);
    return cw == 1 ? fused_kernel_ptr_f<F, 1>(K, rows, R) : fused_kernel_ptr_f<F, 0>(K, rows, R);
}

const void *fused_kernel_ptr(int K, int rows, int R, bool fma, int cw)
{
    return fma ? fused_kernel_ptr_c<true>(K, rows, R, cw)
               : fused_kernel_ptr_c<false>(K, rows, R, cw);
}

/* The float path's fused kernel (padded planes; no FMA choice, no persistent
 * grid) and the dynamic shared memory of a fused launch. */
size_t fed_smem_bytes(bool f32, int rows, bool persist)
{
    if (f32)
        return (size_t)2 * (size_t)(rows + 2) * kFedPW * sizeof(float);
    return (size_t)(persist ? 4 : 2) * (size_t)rows * kFedRW * sizeof(double);
}

template <int BY, int R> const void *fused_f32_ptr_k(int K)
{
    switch (K) {
    case 2: return (const void *)fed_fused_pad_kernel<2, BY, R, float>;
    case 6: return (const void *)fed_fused_pad_kernel<6, BY, R, float>;
    case 8: return (const void *)fed_fused_pad_kernel<8, BY, R, float>;
    default: return (const void *)fed_fused_pad_kernel<4, BY, R, float>;
    }
}

const void *fused_f32_ptr(int K, int rows, int R)
{
    if (R == 2)
        return fused_f32_ptr_k<16, 2>(K);
    if (R == 4)
        return rows == 64 ? fused_f32_ptr_k<16, 4>(K) : fused_f32_ptr_k<8, 4>(K);
    if (R == 16)
        return rows == 64 ? fused_f32_ptr_k<4, 16>(K) : fused_f32_ptr_k<2, 16>(K);
    return rows == 64 ? fused_f32_ptr_k<8, 8>(K) : fused_f32_ptr_k<4, 8>(K);
}

/* fed_shfl_kernel for K steps on 64-row regions of R-row strips, C columns
 * per thread, MinB blocks per SM (see plan()). */
template <int BY, int R, int C, int MinB, bool Cond, bool Diff = false>
const void *fed_shfl_ptr_k(int K)
{
    switch (K) {
    case 4: return (const void *)fed_shfl_kernel<4, BY, R, C, MinB, Cond, Diff>;
    case 7: return (const void *)fed_shfl_kernel<7, BY, R, C, MinB, Cond, Diff>;
    case 8: return (const void *)fed_shfl_kernel<8, BY, R, C, MinB, Cond, Diff>;
    default: return (const void *)fed_shfl_kernel<6, BY, R, C, MinB, Cond, Diff>;
    }
}

/* diff: the 8 x 2-pixel default with fed_shfl_steps_diff (the other shapes ignore it) */
template <bool Cond> const void *fed_shfl_ptr_c(int K, int rows, int R, int C, int occ, bool diff)
{
    if (rows == 128) /* 4 x 4 pixels per thread, 1024 threads */
        return fed_shfl_ptr_k<32, 4, 4, 1, Cond>(K);
    if (R == 8)
        return diff ? fed_shfl_ptr_k<8, 8, 2, 2, Cond, true>(K)
                    : fed_shfl_ptr_k<8, 8, 2, 2, Cond, false>(K);
    if (C == 2)
        return occ == 3 ? fed_shfl_ptr_k<16, 4, 2, 3, Cond>(K) : fed_shfl_ptr_k<16, 4, 2, 2, Cond>(K);
    return occ == 2 ? fed_shfl_ptr_k<16, 4, 4, 2, Cond>(K) : fed_shfl_ptr_k<16, 4, 4, 1, Cond>(K);
}

/* rows: region height (64, or 128 with 4 x 4 pixels per thread); cond:
 * conductances precomputed (diffuse_cond_body) or from g. */
const void *fed_shfl_ptr(int K, int rows, int R, int C, int occ, bool cond, bool diff)
{
    return cond ? fed_shfl_ptr_c<true>(K, rows, R, C, occ, diff)
                : fed_shfl_ptr_c<false>(K, rows, R, C, occ, diff);
}

/* sizeof(FedShflSmem) of a region of `rows` rows, R-row strips, C columns,
 * + sizeof(FedShflCond) for the 64-register variants (occ 2 or 128 rows). */
size_t fed_shfl_smem_bytes(int rows, int R, int C, int occ)
{
    const size_t rw = (size_t)(32 * C);
    size_t b = (size_t)2 * 2 * (size_t)(rows / R + 1) * rw * sizeof(float);
    if ((C == 4 && (occ == 2 || rows == 128)) || (C == 2 && occ == 3))
        b += ((size_t)rows * (rw + 4) + (size_t)(rows + 1) * rw) * sizeof(float);
    return b;
}

/* fed_tma_kernel for K steps (those of fed_shfl_ptr_k). */
const void *fed_tma_ptr(int K)
{
    switch (K) {
    case 4: return (const void *)fed_tma_kernel<4>;
    case 7: return (const void *)fed_tma_kernel<7>;
    case 8: return (const void *)fed_tma_kernel<8>;
    default: return (const void *)fed_tma_kernel<6>;
    }
}

/* Its dynamic shared memory: a FedTmaSmem (the same size for every K), 128-byte aligned. */
size_t fed_tma_smem_bytes(int) { return sizeof(FedTmaSmem<7>) + 128; }

int env_int(const char *name, int dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || v < INT_MIN || v > INT_MAX)
        return dflt;
    return (int)v;
}

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

const size_t kHuge = (size_t)1 << 62; /* "does not fit" */

size_t mul_sat(size_t a, size_t b) { return (a && b > kHuge / a) ? kHuge : a * b; }

/* Appends `bytes` (256-byte aligned) at *off; returns the offset. */
size_t take(size_t *off, size_t bytes)
{
    const size_t o = *off;
    *off = (bytes >= kHuge || o >= kHuge) ? kHuge : o + ((bytes + 255) & ~(size_t)255);
    return o;
}

/* A selection pass's slot of histograms (u64): nb bands' kSelQueries x kSelBins
 * digits, then their kSelQueries x kSelCoarse coarse bins. */
size_t sel_slot(size_t nb) { return nb * kSelQueries * (kSelBins + kSelCoarse); }

/* The size of nb float planes, 256-byte aligned (one of u's buffers, an output slot). */
size_t fplanes(size_t plane, size_t nb)
{
    return (mul_sat(mul_sat(plane, sizeof(float)), nb) + 255) & ~(size_t)255;
}

/* plane: floats per band of the float FED's planes (u, ce, cs, the output
 * slots; npix, or more with padded rows). */
Layout plan_layout(size_t npix, size_t plane, bool has_mask, int r, size_t nb, size_t nslots)
{
    Layout L;
    size_t off = 0;
    const size_t fband = mul_sat(npix, sizeof(float)), dband = mul_sat(npix, sizeof(double));
    const size_t dplanes = mul_sat(dband, nb), two = mul_sat(fplanes(plane, nb), 2);
    L.mask = take(&off, has_mask ? npix : 0);
    L.w = take(&off, (size_t)(2 * r + 1) * sizeof(double));
    L.x = take(&off, mul_sat(fband, nb));
    L.A = take(&off, mul_sat(dband, nb + 1));
    /* B: s, then the float u buffers (ubuf); gm: G's keys, then g or ce and cs */
    L.B = take(&off, (dplanes > two ? dplanes : two) + 256);
    L.gm = take(&off, dplanes > two ? dplanes : two);
    /* cnt right before hist: one memset clears the counts and the first
     * pass's histograms; a slot of states and histograms per selection pass
     * (the folded passes: SelFold) */
    L.cnt = take(&off, nb * 3 * sizeof(u64));
    L.hist = take(&off, mul_sat(mul_sat(nb, kSelPasses * sizeof(u64)), sel_slot(1)));
    L.st = take(&off, nb * kSelPasses * kSelQueries * sizeof(SelState));
    L.k = take(&off, nb * sizeof(double));
    L.ncand = take(&off, nb * sizeof(u64));
    L.slot_bytes = fplanes(plane, nb);
    L.slot0 = take(&off, mul_sat(L.slot_bytes, nslots));
    L.total = off;
    return L;
}

const int kMaxSlots = 3;

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

    int W = 0, H = 0, r = 0, fuse = 4, tile_rows = 32, strip = 4; /* FED region, strip */
    size_t npix = 0, C = 0, nslots = 2, group = 1;
    /* The float FED's planes (u, ce, cs, output slots): rows ld floats apart,
     * plane floats a band; W and npix except for fed_tma_kernel (ld a
     * multiple of 4, the copy engine's rule). */
    int ld = 0;
    size_t plane = 0;
    bool tma = false; /* fed_tma_kernel (sm_90, the default shape) */
    int tma_ctas = 0; /* its persistent grid */
    /* Tensor maps of u's buffers (ubuf 0, 1, the slots 2 .. 4), ce (5), cs (6) */
    static const int kMapCe = 5, kMapCs = 6;
    CUtensorMap tmaps[7];
    bool use_graphs = true, fma = false;
    bool f32 = true;      /* FED in float (u, g, arithmetic); false: double */
    bool shfl = false;    /* float FED on precomputed conductances (fed_shfl_kernel) */
    int cols = 4;         /* fed_shfl_kernel: columns per thread */
    int occ = 1;          /* fed_shfl_kernel (4 x 4 pixels per thread): blocks per SM */
    bool fed_output = true; /* fed_shfl_kernel writes the profile bands (output_in_fed) */
    bool slot_u = false;    /* ... as u itself (no mask: the same values), see u_into_slot */
    bool cond = true;       /* fed_shfl_kernel reads ce and cs (false: g) */
    bool sel_tail = true;   /* the selection's last passes in sel_last_kernel */
    bool sel_hi = true;     /* the first passes read the keys' high words (4 bytes) */
    int sel_threads = 1024; /* a selection pass's block ($HYPROF_EADP_SEL_THREADS=256) */
    int sms = 0;            /* the device's multiprocessors (selection and persistent grids) */
    int cc_major = 0;       /* its compute capability (fed_tma_kernel: 9 and up) */
    bool diff = true;       /* fed_shfl_kernel's default shape with fed_shfl_steps_diff */
    bool input_out = false; /* diffuse_cond_kernel wrote the input band's output slot */
    bool fused_prep = true; /* smoothing + gradient in one kernel (prep_kernel) */
    bool prep16 = false;    /* prep_kernel on 16-row tiles for every radius */
    int persist = 0;      /* 0: a CTA per FED tile; 1, 2: persistent, columns per thread */
    int persist_ctas = 0; /* persistent FED grid: CTAs that fit on the device at once */
    size_t fed_branches_max = 2; /* concurrent FED chains (enqueue_fed) */
    std::vector<double> weights;
    std::vector<std::vector<double>> sched; /* flattened steps of each increment */
    std::vector<size_t> sched_id;           /* first increment with the same steps */

    /* Declaration order: memory first (freed last), then the streams (their
     * destructors wait for queued work), then events and graphs. */
    DeviceBuffer<uint8_t> arena;
    Layout L{};
    Stream cs, xs; /* compute, copies */
    static const int kMaxBranches = 8;
    Stream bs[kMaxBranches]; /* the FED chains (enqueue_fed) */
    Event conv[kMaxSlots], copied[kMaxSlots];
    Event fork_ev, join_ev[kMaxBranches];
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
    template <typename T>
    hyprof_status_t launch_fed(const std::vector<double> &steps, size_t b0, size_t nb,
                               int *cur, int oslot, cudaStream_t st);
    hyprof_status_t launch_fed_any(const std::vector<double> &steps, size_t b0, size_t nb,
                                   int *cur, int oslot, cudaStream_t st);
    bool output_in_fed(size_t nsteps) const;
    bool u_into_slot(int cur, int oslot) const;
    int u_next(int cur, int oslot, bool last) const;
    int u_after(int cur, size_t nsteps, int oslot) const;
    size_t fed_branches(size_t nb) const;

    hyprof_status_t check_args();
    hyprof_status_t plan();
    hyprof_status_t plan_tma();
    void tma_grid(int *gx, int *gy) const;
    hyprof_status_t make_tensor_maps();
    hyprof_status_t launch_tma(const FedStepsF &ff, size_t b0, size_t nb, int cur, float *uo,
                               float *o, cudaStream_t st);
    cudaError_t download(float *dst, const float *slot, size_t nb, cudaStream_t st) const;
    hyprof_status_t prepare(size_t nb);
    size_t sel_blocks(size_t nb) const;
    hyprof_status_t select_contrast(size_t nb, const unsigned *kh);
    hyprof_status_t enqueue_fed(const std::vector<double> &steps, size_t nb, int *cur,
                                int oslot);
    hyprof_status_t enqueue_increment(size_t i, size_t nb, int *cur);
    hyprof_status_t enqueue_output(size_t i, size_t nb, int cur);
    hyprof_status_t run_group(size_t g0, size_t nb);
    void report();
};

template <> double *EadpCuda::ubuf<double>(int which) const
{
    return which ? dev<double>(L.B) : dev<double>(L.A);
}
template <> float *EadpCuda::ubuf<float>(int which) const
{
    if (which >= 2)
        return dev<float>(L.slot0 + (size_t)(which - 2) * L.slot_bytes);
    /* The second one 256-byte aligned (copy_out_kernel reads float4). */
    const size_t second = fplanes(plane, group);
    return reinterpret_cast<float *>(arena.get() + L.B + (which ? second : 0));
}

hyprof_status_t EadpCuda::check_args()
{
    if (!a || !(a->x || dev_x) || !a->out)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "CUDA EADP called without data");
    if (a->width == 0 || a->height == 0 || a->bands == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "empty cube (%zu x %zu x %zu)", a->width,
                             a->height, a->bands);
    if (a->width > (size_t)INT_MAX / 2 || a->height > (size_t)INT_MAX / 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "image %zu x %zu is too large",
                             a->width, a->height);
    if (!(a->sigma > 0.0) || !(a->sigma <= 1e6))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "sigma %g must be in (0, 1e6]",
                             a->sigma);
    if (!(a->contrast > 0.0) && !(a->percentile > 0.0 && a->percentile < 1.0))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "contrast percentile %g must be inside (0, 1)", a->percentile);
    if (a->diffusivity < HYPROF_DIFFUSIVITY_G1 || a->diffusivity > HYPROF_DIFFUSIVITY_G3)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "unknown diffusivity %d",
                             (int)a->diffusivity);
    if (a->cycles < 1)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "cycles %d must be >= 1", a->cycles);
    if (a->ntimes && !a->nsteps)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "no FED schedule given");
    for (size_t i = 0; i < a->ntimes; ++i)
        if (a->nsteps[i] && (!a->tau || !a->tau[i]))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                                 "no step sizes for increment %zu", i + 1);
    return HYPROF_OK;
}

/* Schedules, knobs, the band groups and the device memory. */
hyprof_status_t EadpCuda::plan()
{
    W = (int)a->width;
    H = (int)a->height;
    npix = a->width * a->height;
    C = a->ntimes;
    r = (int)ceil(3.0 * a->sigma);
    weights.resize((size_t)(2 * r + 1));
    for (int j = -r; j <= r; ++j) /* the host's exp(), as in eadp.c */
        weights[(size_t)(j + r)] = exp(-(double)(j * j) / (2.0 * a->sigma * a->sigma));

    sched.resize(C);
    sched_id.resize(C);
    for (size_t i = 0; i < C; ++i) {
        for (int c = 0; c < a->cycles; ++c)
            for (size_t j = 0; j < a->nsteps[i]; ++j)
                sched[i].push_back(a->tau[i][j]);
        sched_id[i] = i;
        for (size_t k = 0; k < i; ++k)
            if (sched[k] == sched[i]) {
                sched_id[i] = k;
                break;
            }
    }

    /* Float: 6 steps per launch on 64 x 64 regions (FED 1.94 ms against 2.29
     * for 4 steps on 64 x 32, an H200, 10:04 round); double: 4 on 64 x 32. */
    const char *prec0 = getenv("HYPROF_EADP_PRECISION");
    const bool float_fed = !(prec0 && strcmp(prec0, "double") == 0);
    fuse = env_int("HYPROF_EADP_FUSE", float_fed ? 6 : 4);
    if (fuse != 1 && fuse != 2 && fuse != 4 && fuse != 6 && fuse != 7 && fuse != 8)
        fuse = 4;
    use_graphs = env_int("HYPROF_EADP_GRAPH", 1) != 0;
    sel_tail = env_int("HYPROF_EADP_SEL_TAIL", 1) != 0;
    sel_hi = env_int("HYPROF_EADP_SEL_HI", 1) != 0;
    sel_threads = env_int("HYPROF_EADP_SEL_THREADS", 1024) == 1024 ? 1024 : kSelThreads;
    {
        int dev = 0;
        HYPROF_CUDA_CHECK(cudaGetDevice(&dev));
        HYPROF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        HYPROF_CUDA_CHECK(
            cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    }
    diff = env_int("HYPROF_EADP_DIFF", 1) != 0;
    HYPROF_CUDA_CHECK(cudaFuncSetAttribute(sel_last_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)sizeof(SelLastShared)));
    /* 2 concurrent FED chains by default: FED 1.34 ms a call against 1.37
     * for 3 and 1.53 for one (H100, 03:03 round; header comment). */
    const int fbr = env_int("HYPROF_EADP_FED_BRANCHES", 2);
    fed_branches_max = fbr < 1 ? 1 : fbr > kMaxBranches ? (size_t)kMaxBranches : (size_t)fbr;
    /* Float FED: the Leja step order keeps float within ~1e-6 of double on real
     * data (DESIGN.md's bound: 1e-4); half the bytes per step. */
    const char *prec = getenv("HYPROF_EADP_PRECISION");
    f32 = !(prec && strcmp(prec, "double") == 0);
    fma = !f32 && env_int("HYPROF_EADP_FMA", 0) != 0;
    const char *prep = getenv("HYPROF_EADP_PREP");
    fused_prep = !(prep && strcmp(prep, "split") == 0);
    prep16 = env_int("HYPROF_EADP_PREP_ROWS", 32) == 16;
    const int rows_env = env_int("HYPROF_EADP_TILE_ROWS", float_fed ? 64 : 32);
    tile_rows = rows_env == 64 || rows_env == 128 ? rows_env : 32;
    /* 4-row strips: 512 threads per 64 x 32 region, 60 registers, 32 warps per
     * SM; 8-row ones (256 threads, 98 registers) measured 12 % slower on an
     * H100 (FED 4.27 -> 3.77 ms of event time, Houston size, 7 bands). */
    /* Float: 8-row strips (256 threads per region) by default, measured 9 %
     * faster than 4-row ones on an H200 (FED 2.27 against 2.50 ms of event
     * time, Houston size, 7 bands); 16-row ones for float only. */
    /* The float default: fed_shfl_kernel ($HYPROF_EADP_FED=pad: the padded
     * shared-memory kernel), 64-row regions only, 4 or 8 rows per thread, 2
     * or 4 columns, K >= 4; offsets in int. */
    const char *fedk = getenv("HYPROF_EADP_FED");
    /* 8-row strips by default (256 threads per 64 x 64 region, two blocks
     * per SM): FED 1.58 ms against 1.63 for 4-row ones, an H100, 13:10
     * round. With STRIP=4 (the padded kernel's other strips too): 4 rows. */
    const char *strip_env = getenv("HYPROF_EADP_STRIP");
    int sstrip = env_int("HYPROF_EADP_STRIP", 8);
    /* 2 columns by default: two 512-thread blocks per SM (64 registers);
     * 4 columns (128 x 64 regions, half the instructions per pixel, 110
     * registers, one block per SM) measured 2.31 ms of FED against 1.73, an
     * H100, 12:04 round: the SM idles while its only block loads or waits
     * at a barrier. */
    cols = env_int("HYPROF_EADP_COLS", 2) == 4 || tile_rows == 128 ? 4 : 2;
    occ = env_int("HYPROF_EADP_OCC", 0);
    if (occ == 0)
        occ = cols == 2 ? 2 : 1;
    if (occ != 2 && occ != 3)
        occ = 1;
    if (cols == 2 && occ == 1)
        occ = 2;
    if (cols == 4 && occ == 3)
        occ = 2;
    fed_output = env_int("HYPROF_EADP_FED_OUTPUT", 1) != 0;
    slot_u = !a->mask && env_int("HYPROF_EADP_SLOT_U", 1) != 0; /* with shfl, below */
    cond = env_int("HYPROF_EADP_COND", 1) != 0;
    if (!strip_env && (cols == 4 || occ == 3)) /* 8-row strips: 2 columns, occ 2 only */
        sstrip = 4;
    shfl = f32 && fuse >= 4 && (sstrip == 4 || (sstrip == 8 && cols == 2 && occ == 2)) &&
           (tile_rows == 64 || (tile_rows == 128 && sstrip == 4 && cols == 4)) &&
           !(fedk && strcmp(fedk, "pad") == 0) &&
           (double)(H + 2 * kMaxFuse) * (double)(W + 128) < (double)INT_MAX;
    if (tile_rows == 128 && !shfl) /* 128-row regions: fed_shfl_kernel only */
        tile_rows = 64;
    /* fed_shfl_kernel: 7 steps per launch by default (the default schedule's
     * 28 steps in 4 launches instead of 5): FED 1.61 ms against 1.82 for 6,
     * 1.76 for 8, an H100, 12:36 round. */
    if (shfl && !getenv("HYPROF_EADP_FUSE"))
        fuse = 7;
    strip = shfl ? sstrip : env_int("HYPROF_EADP_STRIP", f32 ? 8 : 4);
    if (strip != 2 && strip != 8 && !(strip == 16 && f32))
        strip = 4;
    if (strip == 2) /* 1024 threads per 64 x 32 region: no 64-row regions */
        tile_rows = 32;
    const int OH = tile_rows - 2 * fuse;
    if (fuse > 1 && (size_t)(H + OH - 1) / (size_t)OH > 65535u)
        fuse = 1; /* too tall for grid y: plain steps (grid-stride in y) */
    shfl = shfl && fuse >= 4;
    slot_u = slot_u && shfl && fed_output;
    if (tile_rows == 128 && !shfl)
        tile_rows = 64;
    if (fuse == 7 && !shfl) /* 7 (28 steps = 4 launches): fed_shfl_kernel only */
        fuse = 6;
    persist = env_int("HYPROF_EADP_PERSIST", 0);
    if (fuse < 4 || (persist != 1 && persist != 2) || strip == 2 || f32)
        persist = 0;
    HYPROF_TRY(plan_tma());
    if (shfl)
        HYPROF_CUDA_CHECK(cudaFuncSetAttribute(
            fed_shfl_ptr(fuse, tile_rows, strip, cols, occ, cond, diff),
            cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int)fed_shfl_smem_bytes(tile_rows, strip, cols, occ)));
    if (fuse > 1 && !shfl) {
        /* Opt in to the dynamic shared memory of the kernel in use (64 KiB > 48). */
        const int bytes = (int)fed_smem_bytes(f32, tile_rows, persist != 0);
        const void *fn = f32 ? fused_f32_ptr(fuse, tile_rows, strip)
                             : fused_kernel_ptr(fuse, tile_rows, strip, fma, persist);
        HYPROF_CUDA_CHECK(
            cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        if (persist) {
            int per_sm = 0;
            HYPROF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &per_sm, fn, kFedBX / persist * (tile_rows / strip), (size_t)bytes));
            persist_ctas = (per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
        }
    }

    /* Band groups: as many bands as fit with up to kMaxSlots output slots. */
    size_t budget = 0;
    HYPROF_TRY(hyprof__cuda_budget(ctx, op, &budget));
    size_t maxg = a->bands < 65534 ? a->bands : 65534; /* grid z: bands + 1 */
    const int forced = env_int("HYPROF_EADP_BAND_GROUP", 0);
    if (forced > 0 && (size_t)forced < maxg)
        maxg = (size_t)forced;
    const bool has_mask = a->mask != NULL;
    size_t want_slots = C + 1 < (size_t)kMaxSlots ? C + 1 : (size_t)kMaxSlots;
    const int forced_slots = env_int("HYPROF_EADP_SLOTS", 0);
    if (forced_slots > 0 && (size_t)forced_slots < want_slots)
        want_slots = (size_t)forced_slots;
    /* Largest group for 1..3 slots; fewer than 3 slots only if that makes the
     * group larger, 1 slot (no copy/compute overlap) only if 2 do not fit. */
    size_t fit[kMaxSlots + 1] = {0, 0, 0, 0};
    for (size_t ns = 1; ns <= want_slots; ++ns) {
        size_t lo = 0, hi = maxg; /* largest nb with plan_layout(nb).total <= budget */
        while (lo < hi) {
            size_t mid = lo + (hi - lo + 1) / 2;
            if (plan_layout(npix, plane, has_mask, r, mid, ns).total <= budget)
                lo = mid;
            else
                hi = mid - 1;
        }
        fit[ns] = lo;
    }
    nslots = want_slots;
    while (nslots > 2 && fit[nslots] < fit[nslots - 1])
        nslots--;
    while (nslots > 1 && fit[nslots] == 0)
        nslots--;
    group = fit[nslots];
    if (group == 0)
        return hyprof__error(ctx, HYPROF_ERR_DEVICE_MEMORY, op,
                             "not enough device memory for one %zu x %zu band (%zu bytes "
                             "usable, %zu needed)",
                             a->width, a->height, budget,
                             plan_layout(npix, plane, has_mask, r, 1, 1).total);
    L = plan_layout(npix, plane, has_mask, r, group, nslots);
    HYPROF_TRY(arena.alloc(ctx, op, L.total));
    HYPROF_TRY(make_tensor_maps());
    HYPROF_TRY(cs.create(ctx, op));
    HYPROF_TRY(xs.create(ctx, op));
    const size_t nbr = fed_branches(group);
    if (nbr > 1) {
        HYPROF_TRY(fork_ev.create(ctx, op));
        for (size_t j = 0; j < nbr; ++j) {
            HYPROF_TRY(bs[j].create(ctx, op));
            HYPROF_TRY(join_ev[j].create(ctx, op));
        }
    }
    for (size_t s = 0; s < nslots; ++s) {
        HYPROF_TRY(conv[s].create(ctx, op));
        HYPROF_TRY(copied[s].create(ctx, op));
    }
    if (a->mask)
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(dev<uint8_t>(L.mask), a->mask, npix,
                                          cudaMemcpyHostToDevice, cs.get()));
    HYPROF_CUDA_CHECK(cudaMemcpyAsync(dev<double>(L.w), weights.data(),
                                      weights.size() * sizeof(double), cudaMemcpyHostToDevice,
                                      cs.get()));
    /* Graphs: one per (schedule, starting buffer, output slot) that occurs
     * at least twice (every group starts with u in buffer A, so the sequence
     * is the same). */
    if (use_graphs) {
        struct Key {
            size_t id;
            int cur, slot;
            bool operator==(const Key &o) const
            {
                return id == o.id && cur == o.cur && slot == o.slot;
            }
        };
        std::vector<Key> keys(C);
        int cur = 0;
        for (size_t i = 0; i < C; ++i) {
            const int slot = output_in_fed(sched[i].size()) ? (int)((i + 1) % nslots) : -1;
            keys[i] = {sched_id[i], cur, slot};
            cur = u_after(cur, sched[i].size(), slot);
        }
        std::vector<size_t> first_of; /* increments that get a graph */
        for (size_t i = 0; i < C; ++i) {
            size_t uses = 0, first = i;
            for (size_t j = 0; j < C; ++j)
                if (keys[j] == keys[i]) {
                    uses++;
                    first = j < first ? j : first;
                }
            /* slot_u: u's slot cycles, so some keys occur once */
            if ((uses >= 2 || slot_u) && first == i && !sched[i].empty())
                first_of.push_back(i);
        }
        graphs = std::vector<GraphEntry>(first_of.size());
        for (size_t e = 0; e < first_of.size(); ++e) {
            graphs[e].id = keys[first_of[e]].id;
            graphs[e].cur = keys[first_of[e]].cur;
            graphs[e].slot = keys[first_of[e]].slot;
        }
    }
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "eadp: CUDA %zu x %zu x %zu, %zu increment(s) x %d cycle(s), %zu group(s) of up "
                "to %zu band(s), %zu output slot(s), %s in %s, %zu graph(s)%s, %zu bytes on the "
                "device",
                a->width, a->height, a->bands, C, a->cycles, (a->bands + group - 1) / group,
                group, nslots, fuse > 1 ? "fused FED steps" : "one kernel per FED step",
                f32 ? "float" : "double", graphs.size(), fma ? ", FMA" : "", L.total);
    if (shfl)
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "eadp: %d FED steps per launch on %d x %d regions, %d x %d pixels per "
                    "thread, %s, shuffles",
                    fuse, 32 * cols, tile_rows, cols, strip,
                    cond ? "precomputed conductances" : "conductances from g");
    else if (fuse > 1)
        hyprof__log(ctx, HYPROF_LOG_DEBUG,
                    "eadp: %d FED steps per launch on 64 x %d regions, %d rows per thread%s",
                    fuse, tile_rows, strip,
                    persist == 2   ? ", persistent CTAs prefetching, 2 columns per thread"
                    : persist == 1 ? ", persistent CTAs prefetching"
                                   : "");
    return HYPROF_OK;
}

/* fed_tma_kernel for the float FED's default shape on sm_90 when each
 * chain's launch has at least 3 regions per CTA (its planes' rows padded to
 * a multiple of 4 floats; otherwise fed_shfl_kernel on dense planes;
 * $HYPROF_EADP_TMA=0: never, =1: always), its persistent grid
 * ($HYPROF_EADP_TMA_CTAS: CTAs per SM, at most what fits; setting it
 * forces the kernel too). Sets ld and plane either way. */
hyprof_status_t EadpCuda::plan_tma()
{
    ld = W;
    plane = npix;
    int gx = 0, gy = 0;
    tma_grid(&gx, &gy);
    const double per_band = (double)gx * (double)gy, tiles = per_band * (double)a->bands;
    const int mode = env_int("HYPROF_EADP_TMA", -1); /* -1: when it pays */
    const bool forced = mode == 1 || getenv("HYPROF_EADP_TMA_CTAS") != NULL;
    tma = shfl && cond && diff && fed_output && cols == 2 && strip == 8 && tile_rows == 64 &&
          occ == 2 && cc_major >= 9 && tiles < (double)INT_MAX && mode != 0 &&
          tensor_map_encoder() != NULL;
    if (!tma)
        return HYPROF_OK;
    const void *fn = fed_tma_ptr(fuse);
    const size_t bytes = fed_tma_smem_bytes(fuse);
    HYPROF_CUDA_CHECK(
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    int per_sm = 0;
    HYPROF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, 256, bytes));
    const int want = env_int("HYPROF_EADP_TMA_CTAS", 0);
    if (want > 0 && want < per_sm)
        per_sm = want;
    if (per_sm < 1) {
        tma = false;
        return HYPROF_OK;
    }
    tma_ctas = per_sm * (sms > 0 ? sms : 1);
    /* Only with a few regions per CTA in every chain's launch: the first
     * region's copy is not hidden, and the regions are 48 columns wide
     * instead of 50. H100, 2026-11-27 10:30 run_bench against 08:32: FED
     * on Houston (3.2 and 4.2 regions a CTA) 1.198 ms against 1.282; on
     * Pavia U (1.2 and 1.6) 0.504 against 0.420, on Indian Pines (0.2)
     * 0.243 against 0.191. */
    const size_t maxg = std::min(a->bands, (size_t)65534); /* plan()'s largest group */
    const double chain_tiles = per_band * (double)(maxg / std::min(maxg, fed_branches_max));
    if (!forced && chain_tiles < 3.0 * tma_ctas) {
        tma = false;
        return HYPROF_OK;
    }
    ld = (W + 3) & ~3;
    plane = (size_t)ld * (size_t)H;
    return HYPROF_OK;
}

/* fed_tma_kernel's regions across and down the image (FedTmaShape<fuse>). */
void EadpCuda::tma_grid(int *gx, int *gy) const
{
    const int ow = 64 - 2 * fed_tma_xl(fuse), oh = 64 - 2 * fuse;
    *gx = (W + ow - 1) / ow;
    *gy = (H + oh - 1) / oh;
}

/* fed_tma_kernel's tensor maps, once the buffers exist. */
hyprof_status_t EadpCuda::make_tensor_maps()
{
    memset(tmaps, 0, sizeof tmaps);
    if (!tma)
        return HYPROF_OK;
    const float *ce = dev<float>(L.gm), *buf[7] = {ubuf<float>(0), ubuf<float>(1), NULL, NULL,
                                                    NULL, ce, ce + group * plane};
    for (size_t s = 0; s < nslots; ++s)
        buf[2 + s] = ubuf<float>(2 + (int)s);
    for (int m = 0; m < 7; ++m)
        if (buf[m] && !float_tensor_map(&tmaps[m], buf[m], (size_t)W, (size_t)H, group,
                                        (size_t)ld, plane, 64, 64))
            return hyprof__error(ctx, HYPROF_ERR_DEVICE, op,
                                 "cuTensorMapEncodeTiled failed for %d x %d x %zu floats", W, H,
                                 group);
    return HYPROF_OK;
}

/* The FED launch of bands b0 .. b0 + nb - 1 from u's buffer `cur` into uo
 * (and the profile band into o) on fed_tma_kernel. */
hyprof_status_t EadpCuda::launch_tma(const FedStepsF &ff, size_t b0, size_t nb, int cur,
                                     float *uo, float *o, cudaStream_t st)
{
    int gx = 0, gy = 0, z0 = (int)b0;
    tma_grid(&gx, &gy);
    int ntiles = gx * gy * (int)nb; /* < INT_MAX: plan_tma */
    const unsigned ctas = (unsigned)(ntiles < tma_ctas ? ntiles : tma_ctas);
    const uint8_t *mask = a->mask ? dev<uint8_t>(L.mask) : NULL;
    float nodata = a->nodata;
    FedStepsF steps = ff;
    void *params[] = {(void *)&tmaps[cur], (void *)&tmaps[kMapCe], (void *)&tmaps[kMapCs],
                      (void *)&uo,         (void *)&o,             (void *)&mask,
                      (void *)&W,          (void *)&H,             (void *)&ld,
                      (void *)&plane,      (void *)&z0,            (void *)&gx,
                      (void *)&gy,         (void *)&ntiles,        (void *)&steps,
                      (void *)&nodata};
    HYPROF_CUDA_CHECK(cudaLaunchKernel(fed_tma_ptr(fuse), dim3(ctas), dim3(32, 8), params,
                                       fed_tma_smem_bytes(fuse), st));
    return HYPROF_OK;
}

static dim3 pix_grid(int W, int H, size_t nz)
{
    unsigned gy = (unsigned)((H + kPixBY - 1) / kPixBY);
    if (gy > 65535u)
        gy = 65535u;
    return dim3((unsigned)((W + kPixBX - 1) / kPixBX), gy, (unsigned)nz);
}

/* A selection pass's blocks per band. 4096 pixels per block of 256 threads:
 * 40 such blocks per band (Houston size) left the SMs with 2 blocks each and
 * ran at 0.9 TB/s (an H100, 41 us a pass). Blocks of 1024 threads, two an SM
 * and one wave over the bands (37 a band): each block flushes its histogram
 * once for 18k pixels instead of 4096, so 4 times fewer global atomics on the
 * same bins (H100, 2026-11-27 07:45 round, Nsight: 15.9, 17.2, 16.1 us for
 * passes 0-2 against 17.6, 27.5, 21.0; prepare stage 0.259-0.262 ms against
 * 0.277-0.279). Counting a warp's equal bins once (__match_any_sync) in pass
 * 0, where every key falls in a few bins, did not help (0.261 against
 * 0.259). */
size_t EadpCuda::sel_blocks(size_t nb) const
{
    size_t nblk = npix / 4096;
    if (sel_threads == 1024) /* two blocks an SM, one wave over the bands */
        nblk = (size_t)(2 * sms) / nb < npix / 4096 ? (size_t)(2 * sms) / nb
                                                       : npix / 4096;
    return nblk < 1 ? 1 : nblk > 512 ? 512 : nblk;
}

/* The contrast k per band: the selection passes with their setup and scans
 * folded into the passes' prologues (SelFold): pass p's states and
 * histograms in slot p of L.st and L.hist (slot 0 of hist cleared with the
 * counts, slot p + 1 by pass p). Pass kSelCollect also copies the keys that
 * match a query (20 bits decided: normally a few thousand) into B, free here;
 * the later passes read that list instead of G: in sel_last_kernel (or,
 * $HYPROF_EADP_SEL_TAIL=0, as launches of their own, sel_last_kernel then only
 * scanning and computing k). */
hyprof_status_t EadpCuda::select_contrast(size_t nb, const unsigned *kh)
{
    cudaStream_t st = cs.get();
    const uint8_t *mask = a->mask ? dev<uint8_t>(L.mask) : NULL;
    const double *A = dev<double>(L.A);
    u64 *cnt = dev<u64>(L.cnt), *hist = dev<u64>(L.hist);
    u64 *cand = dev<u64>(L.B), *ncand = dev<u64>(L.ncand);
    SelState *sst = dev<SelState>(L.st);
    const size_t nblk = sel_blocks(nb), hslot = sel_slot(nb), sslot = nb * kSelQueries;
    const size_t cof = nb * kSelQueries * kSelBins; /* the coarse bins in a slot */
    const int passes = sel_tail ? kSelCollect + 1 : kSelPasses;
    SelFold f = {};
    for (int pass = 0; pass <= passes; ++pass) {
        if (pass == 0) {
            f.cnt = cnt;
            f.pct = a->percentile;
        } else { /* the previous pass's slot */
            const int ps = kSelShift[pass - 1], pw = kSelWidth[pass - 1];
            f.cnt = NULL;
            f.prev = sst + (size_t)(pass - 1) * sslot;
            f.phist = hist + (size_t)(pass - 1) * hslot;
            f.pcoarse = f.phist + cof;
            f.phmask = ps + pw >= 64 ? 0ull : ~0ull << (ps + pw);
            f.pshift = ps;
        }
        if (pass == passes)
            break;
        f.out = sst + (size_t)pass * sslot;
        f.zero = pass + 1 < passes ? hist + (size_t)(pass + 1) * hslot : NULL;
        f.nzero = hslot;
        u64 *ph = hist + (size_t)pass * hslot;
        const int shift = kSelShift[pass], width = kSelWidth[pass];
        const u64 hmask = shift + width >= 64 ? 0ull : ~0ull << (shift + width);
        const unsigned dmask = (1u << width) - 1u;
        (sel_threads == 1024 ? sel_pass_kernel<1024> : sel_pass_kernel<kSelThreads>)<<<
            dim3((unsigned)nblk, 1, (unsigned)nb), sel_threads, 0, st>>>(
            A, kh, mask, npix, f, hmask, shift, dmask, ph, ph + cof,
            pass > kSelCollect ? cand : NULL, pass == kSelCollect ? cand : NULL, ncand);
        HYPROF_CUDA_CHECK_LAUNCH("sel_pass_kernel");
    }
    sel_last_kernel<<<dim3(1, 1, (unsigned)nb), kSelLast, sizeof(SelLastShared), st>>>(
        npix, f, passes, cand, ncand, cnt, a->percentile, dev<double>(L.k));
    HYPROF_CUDA_CHECK_LAUNCH("sel_last_kernel");
    return HYPROF_OK;
}

/* Upload, smoothing, gradient, contrast, diffusivity and u of one group. */
hyprof_status_t EadpCuda::prepare(size_t nb)
{
    cudaStream_t st = cs.get();
    const uint8_t *mask = a->mask ? dev<uint8_t>(L.mask) : NULL;
    const dim3 block(kPixBX, kPixBY);
    float *x = dev<float>(L.x);
    double *A = dev<double>(L.A), *B = dev<double>(L.B), *gm = dev<double>(L.gm);
    const double *w = dev<double>(L.w);
    u64 *cnt = dev<u64>(L.cnt);
    double *k = dev<double>(L.k);
    /* The keys' high words (passes 0 .. kSelCollect) in gm, free until the
     * diffusivity is written there. */
    unsigned *kh = sel_hi && !(a->contrast > 0.0) ? reinterpret_cast<unsigned *>(gm) : NULL;
    size_t tid;
    HYPROF_TRY(clock.begin(ctx, op, kPrepare, st, &tid));

    /* With the selection, the first pass's histograms too (right after cnt). */
    HYPROF_CUDA_CHECK(cudaMemsetAsync(cnt, 0,
                                      a->contrast > 0.0 ? nb * 3 * sizeof(u64)
                                                        : L.hist - L.cnt + sel_slot(nb) * sizeof(u64),
                                      st));
    const int pty = prep16 ? 16 : prep_ty(r);
    const unsigned prep_rows = (unsigned)((H + pty - 1) / pty);
    if (fused_prep && r <= kPrepMaxR && prep_rows <= 65535u) {
        const dim3 grid((unsigned)((W + kPrepTX - 1) / kPrepTX), prep_rows, (unsigned)nb);
        void (*pk)(const float *, const uint8_t *, int, int, size_t, const double *, double *,
                   unsigned *, u64 *) = prep_kernel<8>;
        switch (r) { /* r <= kPrepMaxR = 8 here */
        case 1: pk = prep16 ? prep_kernel<1, 16> : prep_kernel<1>; break;
        case 2: pk = prep16 ? prep_kernel<2, 16> : prep_kernel<2>; break;
        case 3: pk = prep16 ? prep_kernel<3, 16> : prep_kernel<3>; break;
        case 4: pk = prep16 ? prep_kernel<4, 16> : prep_kernel<4>; break;
        case 5: pk = prep_kernel<5>; break;
        case 6: pk = prep_kernel<6>; break;
        case 7: pk = prep_kernel<7>; break;
        default: break;
        }
        pk<<<grid, block, 0, st>>>(x, mask, W, H, npix, w, A, kh, cnt);
        HYPROF_CUDA_CHECK_LAUNCH("prep_kernel");
    } else {
        gauss_h_kernel<<<pix_grid(W, H, nb + 1), block, 0, st>>>(x, mask, W, H, npix, (int)nb,
                                                                  w, r, A);
        HYPROF_CUDA_CHECK_LAUNCH("gauss_h_kernel");
        gauss_v_kernel<<<pix_grid(W, H, nb), block, 0, st>>>(A, W, H, npix, (int)nb, w, r, B);
        HYPROF_CUDA_CHECK_LAUNCH("gauss_v_kernel");
        scharr_kernel<<<pix_grid(W, H, nb), block, 0, st>>>(B, mask, W, H, npix, A, kh, cnt);
        HYPROF_CUDA_CHECK_LAUNCH("scharr_kernel");
    }

    const unsigned sb = (unsigned)((nb + 127) / 128);
    if (a->contrast > 0.0) {
        fill_kernel<<<sb, 128, 0, st>>>(k, (int)nb, a->contrast);
        HYPROF_CUDA_CHECK_LAUNCH("fill_kernel");
    } else {
        HYPROF_TRY(select_contrast(nb, kh));
    }
    input_out = shfl && cond && fed_output;
    if (input_out && copy_issued[0]) /* diffuse_cond_kernel writes the input band's slot */
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(st, copied[0].get(), 0));
    if (shfl && cond) /* B (s) is free now: u goes there; ce and cs into gm's 8 bytes */
        diffuse_cond_kernel<<<pix_grid(W, H, nb), block, 0, st>>>(
            x, mask, W, H, npix, ld, plane, k, (int)a->diffusivity, A, ubuf<float>(0),
            reinterpret_cast<float *>(gm), reinterpret_cast<float *>(gm) + group * plane,
            input_out ? dev<float>(L.slot0) : NULL, a->nodata);
    else if (f32) /* B (s) is free now: u goes there */
        diffuse_kernel<float><<<pix_grid(W, H, nb), block, 0, st>>>(
            x, mask, W, H, npix, k, (int)a->diffusivity, A, ubuf<float>(0),
            reinterpret_cast<float *>(gm));
    else
        diffuse_kernel<double><<<pix_grid(W, H, nb), block, 0, st>>>(
            x, mask, W, H, npix, k, (int)a->diffusivity, A, A, gm);
    HYPROF_CUDA_CHECK_LAUNCH("diffuse_kernel");
    return clock.end(ctx, op, tid, st);
}

/* The FED steps of one increment (bands 0 .. nb - 1) from the compute
 * stream; *cur: buffer of u; out: the output slot the last launch writes, or
 * NULL. The bands go through the launches in fed_branches(nb) groups, each a
 * chain of launches on a stream of its own, forked from and joined to the
 * compute stream (in a graph: parallel branches): while one chain's launch
 * drains its last wave, the other's fills the SMs it frees (one chain of
 * all bands left them idle at each of the 32 launches' tail and gap). Every
 * chain ends in the same buffer. */
hyprof_status_t EadpCuda::enqueue_fed(const std::vector<double> &steps, size_t nb, int *cur,
                                      int oslot)
{
    const size_t nbr = fed_branches(nb);
    if (nbr == 1 || steps.empty())
        return launch_fed_any(steps, 0, nb, cur, oslot, cs.get());
    HYPROF_CUDA_CHECK(cudaEventRecord(fork_ev.get(), cs.get()));
    int c = *cur;
    for (size_t j = 0; j < nbr; ++j) {
        const size_t b0 = j * nb / nbr, n = (j + 1) * nb / nbr - b0;
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(bs[j].get(), fork_ev.get(), 0));
        c = *cur;
        HYPROF_TRY(launch_fed_any(steps, b0, n, &c, oslot, bs[j].get()));
        HYPROF_CUDA_CHECK(cudaEventRecord(join_ev[j].get(), bs[j].get()));
    }
    for (size_t j = 0; j < nbr; ++j)
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(cs.get(), join_ev[j].get(), 0));
    *cur = c;
    return HYPROF_OK;
}

/* How many chains enqueue_fed splits nb bands into. */
size_t EadpCuda::fed_branches(size_t nb) const
{
    return nb < fed_branches_max ? nb : fed_branches_max;
}

/* launch_fed in the FED's precision. */
hyprof_status_t EadpCuda::launch_fed_any(const std::vector<double> &steps, size_t b0, size_t nb,
                                         int *cur, int oslot, cudaStream_t st)
{
    return f32 ? launch_fed<float>(steps, b0, nb, cur, oslot, st)
               : launch_fed<double>(steps, b0, nb, cur, oslot, st);
}

/* The buffer after buffer `cur` in an increment's ping-pong (from a slot: A). */
static int next_u(int cur) { return cur == 0 ? 1 : 0; }

/* Whether the increment's last launch writes its profile band (slot oslot,
 * -1: none) as u itself, read from there by the next increment's first
 * launch: without a mask the band and u are the same floats, so one store
 * a pixel instead of two. Not when u is already in that slot (one launch
 * would read and write it). */
bool EadpCuda::u_into_slot(int cur, int oslot) const
{
    return slot_u && oslot >= 0 && cur != 2 + oslot;
}

/* Where a FED launch that reads u from `cur` leaves it (last: the
 * increment's last launch, which may write u into slot oslot). */
int EadpCuda::u_next(int cur, int oslot, bool last) const
{
    return last && u_into_slot(cur, oslot) ? 2 + oslot : next_u(cur);
}

/* Where u is after an increment of nsteps steps that starts in `cur`. */
int EadpCuda::u_after(int cur, size_t nsteps, int oslot) const
{
    const size_t per = fuse > 1 ? (size_t)fuse : 1, n = (nsteps + per - 1) / per;
    for (size_t l = 0; l < n; ++l)
        cur = u_next(cur, oslot, l + 1 == n);
    return cur;
}

template <typename T>
hyprof_status_t EadpCuda::launch_fed(const std::vector<double> &steps, size_t b0, size_t nb,
                                     int *cur, int oslot, cudaStream_t st)
{
    const T *gm = dev<T>(L.gm) + b0 * plane; /* plane = npix but in fed_tma_kernel's layout */
    const size_t per = fuse > 1 ? (size_t)fuse : 1;
    float *out = oslot >= 0 ? dev<float>(L.slot0 + (size_t)oslot * L.slot_bytes) : NULL;
    for (size_t s0 = 0; s0 < steps.size(); s0 += per) {
        const T *uin = ubuf<T>(*cur) + b0 * plane;
        T *uout = ubuf<T>(next_u(*cur)) + b0 * plane;
        if (fuse <= 1) {
            if (fma)
                fed_step_kernel<true, T><<<pix_grid(W, H, nb), dim3(kPixBX, kPixBY), 0, st>>>(
                    uin, uout, gm, W, H, npix, (T)steps[s0]);
            else
                fed_step_kernel<false, T><<<pix_grid(W, H, nb), dim3(kPixBX, kPixBY), 0, st>>>(
                    uin, uout, gm, W, H, npix, (T)steps[s0]);
            HYPROF_CUDA_CHECK_LAUNCH("fed_step_kernel");
        } else {
            FedSteps fs;
            memset(&fs, 0, sizeof fs);
            fs.n = (int)(steps.size() - s0 < per ? steps.size() - s0 : per);
            for (int j = 0; j < fs.n; ++j)
                fs.tau[j] = steps[s0 + (size_t)j];
            if (shfl) {
                FedStepsF ff;
                memset(&ff, 0, sizeof ff);
                ff.n = fs.n;
                for (int j = 0; j < fs.n; ++j)
                    ff.tau[j] = (float)fs.tau[j];
                const int ow = 32 * cols - 2 * fuse, oh = tile_rows - 2 * fuse;
                const dim3 grid((unsigned)((W + ow - 1) / ow), (unsigned)((H + oh - 1) / oh),
                                (unsigned)nb);
                const float *ce = dev<float>(L.gm) + b0 * plane;
                const float *cs = ce + group * plane;
                const float *ui = reinterpret_cast<const float *>(uin);
                float *uo = reinterpret_cast<float *>(uout);
                float *o = out && s0 + per >= steps.size() ? out + b0 * plane : NULL;
                const int ncur = u_next(*cur, oslot, s0 + per >= steps.size());
                const bool into_slot = ncur >= 2; /* o != NULL then */
                if (into_slot) {
                    uo = o;
                    o = NULL;
                }
                if (tma) {
                    HYPROF_TRY(launch_tma(ff, b0, nb, *cur, uo, o, st));
                    *cur = ncur;
                    continue;
                }
                const uint8_t *mask = a->mask ? dev<uint8_t>(L.mask) : NULL;
                float nodata = a->nodata;
                void *params[] = {(void *)&ui, (void *)&uo, (void *)&ce,     (void *)&cs,
                                  (void *)&W,  (void *)&H,  (void *)&npix,   (void *)&ff,
                                  (void *)&o,  (void *)&mask, (void *)&nodata};
                HYPROF_CUDA_CHECK(cudaLaunchKernel(
                    fed_shfl_ptr(fuse, tile_rows, strip, cols, occ, cond, diff), grid,
                    dim3(32, (unsigned)(tile_rows / strip)), params,
                    fed_shfl_smem_bytes(tile_rows, strip, cols, occ), st));
                *cur = ncur;
                continue;
            }
            const int OW = kFedRW - 2 * fuse, OH = tile_rows - 2 * fuse;
            const dim3 grid((unsigned)((W + OW - 1) / OW), (unsigned)((H + OH - 1) / OH),
                            (unsigned)nb);
            const dim3 block((unsigned)(kFedBX / (persist ? persist : 1)),
                             (unsigned)(tile_rows / strip));
            const void *fn = f32 ? fused_f32_ptr(fuse, tile_rows, strip)
                                 : fused_kernel_ptr(fuse, tile_rows, strip, fma, persist);
            if (persist) {
                int gx = (int)grid.x, gy = (int)grid.y, gz = (int)nb;
                const long long tiles = (long long)gx * gy * gz;
                const unsigned ctas =
                    (unsigned)(tiles < persist_ctas ? tiles : (long long)persist_ctas);
                const size_t shmem = (size_t)4 * tile_rows * kFedRW * sizeof(double);
                void *params[] = {(void *)&uin, (void *)&uout, (void *)&gm, (void *)&W,
                                  (void *)&H,   (void *)&npix, (void *)&gx, (void *)&gy,
                                  (void *)&gz,  (void *)&fs};
                HYPROF_CUDA_CHECK(cudaLaunchKernel(fn, dim3(ctas), block, params, shmem, st));
            } else {
                const size_t shmem = fed_smem_bytes(f32, tile_rows, false);
                void *params[] = {(void *)&uin, (void *)&uout, (void *)&gm, (void *)&W,
                                  (void *)&H,   (void *)&npix, (void *)&fs};
                HYPROF_CUDA_CHECK(cudaLaunchKernel(fn, grid, block, params, shmem, st));
            }
        }
        *cur = next_u(*cur);
    }
    return HYPROF_OK;
}

/* What the FED steps of an increment move, for the bandwidth figures. */
static void count_fed(size_t nsteps, int fuse, size_t pix, size_t chunks, size_t *launches,
                      size_t *max_steps, double *launch_pix, double *step_pix)
{
    const size_t per = fuse > 1 ? (size_t)fuse : 1, n = (nsteps + per - 1) / per;
    *launches += n * chunks; /* pix: all chunks of bands together */
    const size_t most = nsteps < per ? nsteps : per;
    *max_steps = most > *max_steps ? most : *max_steps;
    *launch_pix += (double)n * (double)pix;
    *step_pix += (double)nsteps * (double)pix;
}

/* Whether the increment's last FED launch writes its profile band too
 * (fed_shfl_kernel, at least one step). */
bool EadpCuda::output_in_fed(size_t nsteps) const
{
    return shfl && fed_output && nsteps > 0;
}

/* Increment i (1-based) on the compute stream: the FED steps (from a graph
 * when this schedule repeats), then its output. With the output in the
 * last launch, the whole increment waits for its slot to be free (the
 * download of increment i - nslots), outside the timed interval: the
 * downloads take longer than the FED, so this costs nothing with 2 or more
 * slots, and the graph then holds all the increment's launches. */
hyprof_status_t EadpCuda::enqueue_increment(size_t i, size_t nb, int *cur)
{
    const std::vector<double> &all = sched[i - 1];
    size_t tid;
    count_fed(all.size(), fuse, nb * npix, fed_branches(nb), &fed_launches, &fed_max_steps,
              &fed_launch_pix, &fed_step_pix);
    const bool fo = output_in_fed(all.size());
    const size_t s = i % nslots;
    const int oslot = fo ? (int)s : -1;
    if (fo && copy_issued[s]) /* the slot's previous band is on the host */
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(cs.get(), copied[s].get(), 0));
    GraphEntry *ge = NULL;
    for (size_t e = 0; e < graphs.size() && !all.empty(); ++e)
        if (graphs[e].id == sched_id[i - 1] && graphs[e].cur == *cur &&
            graphs[e].slot == (fo ? (int)s : -1))
            ge = &graphs[e];
    if (ge && !ge->valid) {
        cudaStream_t st = cs.get();
        HYPROF_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        int c = *cur;
        hyprof_status_t r = enqueue_fed(all, nb, &c, oslot);
        cudaGraph_t graph = NULL;
        cudaError_t e = cudaStreamEndCapture(st, &graph);
        if (r != HYPROF_OK) {
            if (graph)
                (void)cudaGraphDestroy(graph);
            (void)cudaGetLastError();
            return r;
        }
        if (e != cudaSuccess)
            return hyprof__cuda_fail(ctx, op, e, "cudaStreamEndCapture");
        e = cudaGraphInstantiate(ge->exec.put(), graph, 0);
        (void)cudaGraphDestroy(graph);
        if (e != cudaSuccess)
            return hyprof__cuda_fail(ctx, op, e, "cudaGraphInstantiate");
        ge->valid = true;
    }
    /* Outside the capture, after the instantiation (host work while the
     * stream may be idle): the events time the FED's execution. */
    HYPROF_TRY(clock.begin(ctx, op, kFed, cs.get(), &tid));
    if (ge) {
        HYPROF_CUDA_CHECK(cudaGraphLaunch(ge->exec.get(), cs.get()));
        *cur = u_after(*cur, all.size(), oslot);
    } else
        HYPROF_TRY(enqueue_fed(all, nb, cur, oslot));
    HYPROF_TRY(clock.end(ctx, op, tid, cs.get()));
    if (!fo)
        return enqueue_output(i, nb, *cur);
    HYPROF_CUDA_CHECK(cudaEventRecord(conv[s].get(), cs.get()));
    return HYPROF_OK;
}

/* Profile band i of every band of the group into its slot (i = 0: the input). */
hyprof_status_t EadpCuda::enqueue_output(size_t i, size_t nb, int cur)
{
    cudaStream_t st = cs.get();
    const size_t s = i % nslots;
    if (copy_issued[s])
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(st, copied[s].get(), 0));
    const uint8_t *mask = a->mask ? dev<uint8_t>(L.mask) : NULL;
    float *slot = dev<float>(L.slot0 + s * L.slot_bytes);
    const dim3 grid = pix_grid(W, H, nb), block(kPixBX, kPixBY);
    size_t tid;
    HYPROF_TRY(clock.begin(ctx, op, kOutput, st, &tid));
    if (i == 0 || f32) { /* float already: a flat copy (nodata where masked) */
        /* x is dense: with padded planes (fed_tma_kernel) diffuse_cond_kernel
         * writes the input band's slot (input_out), never this copy. */
        if (i == 0 && ld != W)
            return hyprof__error(ctx, HYPROF_ERR_INTERNAL, op, "input band copy with padded rows");
        const size_t n = nb * plane;
        size_t blocks = (n + 4 * 256 - 1) / (4 * 256);
        blocks = blocks < 4096 ? blocks : 4096;
        copy_out_kernel<<<(unsigned)blocks, 256, 0, st>>>(i == 0 ? dev<float>(L.x)
                                                                 : ubuf<float>(cur),
                                                          mask, W, ld, plane, n, a->nodata,
                                                          slot);
    } else
        to_float_kernel<double><<<grid, block, 0, st>>>(ubuf<double>(cur), mask, W, H, npix,
                                                        a->nodata, slot);
    HYPROF_CUDA_CHECK_LAUNCH("to_float_kernel");
    HYPROF_TRY(clock.end(ctx, op, tid, st));
    HYPROF_CUDA_CHECK(cudaEventRecord(conv[s].get(), st));
    return HYPROF_OK;
}

/* Profile band i of nb bands from its slot to the host (dst: band 0's; a
 * band's profile bands are (C + 1) npix floats apart there): one 2-D copy, or
 * a 3-D one that drops the padding of fed_tma_kernel's rows. */
cudaError_t EadpCuda::download(float *dst, const float *slot, size_t nb, cudaStream_t st) const
{
    if (ld == W)
        return copy_cols_d2h(dst, (C + 1) * npix, slot, npix, npix, nb, st);
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(const_cast<float *>(slot), (size_t)ld * sizeof(float),
                                   (size_t)W * sizeof(float), (size_t)H);
    p.dstPtr = make_cudaPitchedPtr(dst, (size_t)W * sizeof(float), (size_t)W * sizeof(float),
                                   (C + 1) * (size_t)H);
    p.extent = make_cudaExtent((size_t)W * sizeof(float), (size_t)H, nb);
    p.kind = cudaMemcpyDeviceToHost;
    return cudaMemcpy3DAsync(&p, st);
}

hyprof_status_t EadpCuda::run_group(size_t g0, size_t nb)
{
    cudaStream_t st = cs.get();
    /* After the previous group's first output (which reads x): stream order. */
    size_t tid;
    HYPROF_TRY(clock.begin(ctx, op, kUpload, st, &tid));
    if (dev_x)
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(dev<float>(L.x), dev_x + g0 * npix,
                                          nb * npix * sizeof(float), cudaMemcpyDeviceToDevice,
                                          st));
    else
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(dev<float>(L.x), a->x + g0 * npix,
                                          nb * npix * sizeof(float), cudaMemcpyHostToDevice, st));
    HYPROF_TRY(clock.end(ctx, op, tid, st));
    HYPROF_TRY(prepare(nb));
    int cur = 0; /* u is in A */
    if (input_out) /* written by diffuse_cond_kernel */
        HYPROF_CUDA_CHECK(cudaEventRecord(conv[0].get(), st));
    else
        HYPROF_TRY(enqueue_output(0, nb, cur));
    size_t next = 1;
    while (next <= C && next < nslots)
        HYPROF_TRY(enqueue_increment(next++, nb, &cur));
    for (size_t i = 0; i <= C; ++i) {
        const size_t s = i % nslots;
        HYPROF_CUDA_CHECK(cudaStreamWaitEvent(xs.get(), conv[s].get(), 0));
        HYPROF_TRY(clock.begin(ctx, op, kDownload, xs.get(), &tid));
        /* Pageable destination: returns when the copy is done, while the
         * increments queued before it run on the compute stream. */
        HYPROF_CUDA_CHECK(download(a->out + (g0 * (C + 1) + i) * npix,
                                   dev<float>(L.slot0 + s * L.slot_bytes), nb, xs.get()));
        HYPROF_TRY(clock.end(ctx, op, tid, xs.get()));
        HYPROF_CUDA_CHECK(cudaEventRecord(copied[s].get(), xs.get()));
        copy_issued[s] = true;
        while (next <= C && next < i + 1 + nslots)
            HYPROF_TRY(enqueue_increment(next++, nb, &cur));
        HYPROF_CUDA_CHECK(cudaEventSynchronize(copied[s].get()));
        HYPROF_TRY(hyprof__progress(
            ctx, ((double)g0 + (double)nb * (double)(i + 1) / (double)(C + 1)) / (double)a->bands,
            op));
    }
    if (a->contrast_out)
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->contrast_out + g0, dev<double>(L.k),
                                          nb * sizeof(double), cudaMemcpyDeviceToHost, st));
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
    return clock.collect(ctx, op);
}

/* Device stage times and the FED kernel's bandwidth, at debug level. Bytes
 * counted per FED launch: u and g read, u written, 8 bytes each per pixel
 * and band (4 in float) (what a launch must move at least; halo re-reads come from L2);
 * the unfused equivalent counts those 24 bytes per step instead. */
void EadpCuda::report()
{
    const double fed_ms = clock.ms(kFed), peak = device_peak_gbs();
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "eadp: cuda device ms: upload %.3f, prepare %.3f, fed %.3f, output %.3f, "
                "download %.3f, span %.3f",
                clock.ms(kUpload), clock.ms(kPrepare), fed_ms, clock.ms(kOutput),
                clock.ms(kDownload), clock.span_ms());
    if (!(fed_ms > 0.0))
        return;
    const double bytes = f32 ? 12.0 : 24.0; /* u and g read, u written */
    /* fed_shfl_kernel reads u, ce and cs: 16 bytes per pixel and launch */
    const double gb = (shfl && cond ? 16.0 : bytes) * fed_launch_pix / 1e9;
    const double gbs = gb / (fed_ms * 1e-3);
    const double eq = bytes * fed_step_pix / 1e9 / (fed_ms * 1e-3);
    hyprof__log(ctx, HYPROF_LOG_DEBUG,
                "eadp: cuda FED bandwidth: %.0f GB/s (%.0f%% of the %.0f GB/s peak; %zu "
                "launches of up to %zu steps, %.3f GB in %.3f ms); %.0f GB/s unfused-equivalent "
                "(%.0f B per pixel and step, %s), %.3g pixel-steps/s",
                gbs, peak > 0.0 ? 100.0 * gbs / peak : 0.0, peak, fed_launches, fed_max_steps,
                gb, fed_ms, eq, bytes, f32 ? "float" : "double", fed_step_pix / (fed_ms * 1e-3));
}

hyprof_status_t EadpCuda::run()
{
    HYPROF_TRY(check_args());
    HYPROF_TRY(plan());
    /* The output is (count+1) times the input: pinned, its downloads overlap
     * the FED steps for real (pageable copies ran at a fraction of the bus). */
    HostPin out_pin, in_pin;
    out_pin.pin(a->out, a->bands * (C + 1) * npix * sizeof(float));
    /* The input pinned too: its upload is then a DMA that returns at once, so
     * the prepare stage's launches are queued while it runs and the stage
     * starts when it ends. After a pageable upload (it returns when done)
     * the device waited for the host's first launches: prepare 0.292 ms of
     * event time against 0.251 pinned, upload 3.58 ms against 0.38 (H100,
     * 03:12 round). */
    if (!dev_x)
        in_pin.pin(const_cast<float *>(a->x), a->bands * npix * sizeof(float));
    for (size_t g0 = 0; g0 < a->bands; g0 += group) {
        const size_t nb = a->bands - g0 < group ? a->bands - g0 : group;
        if (nb != group)
            for (size_t e = 0; e < graphs.size(); ++e) { /* captured for another grid */
                graphs[e].exec.reset();
                graphs[e].valid = false;
            }
        HYPROF_TRY(run_group(g0, nb));
    }
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(xs.get()));
    report();
    return HYPROF_OK;
}

} /* namespace */

extern "C" hyprof_status_t hyprof__cuda_eadp(hyprof_ctx_t *ctx, void *vargs)
{
    static const char op[] = "eadp";
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    hyprof__cuda_device_scope device_scope; /* first: restored last */
    HYPROF_TRY(device_scope.select(ctx, op));
    try {
        EadpCuda run(ctx, (const hyprof_eadp_args_t *)vargs);
        return run.run();
    } catch (...) { /* std::vector growth: nothing else throws */
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of host memory");
    }
}

extern "C" hyprof_status_t hyprof__cuda_eadp_from_device(hyprof_ctx_t *ctx,
                                                         const hyprof_eadp_args_t *args,
                                                         const float *d_x)
{
    static const char op[] = "eadp";
    if (!ctx)
        return HYPROF_ERR_ARGUMENT;
    if (!d_x)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "no device input");
    try { /* the caller (the PCA's backend) has selected the device */
        EadpCuda run(ctx, args, d_x);
        return run.run();
    } catch (...) {
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of host memory");
    }
}
