/* CUDA EADP, the FED steps and the output bands (eadp_impl.h, step 5): per
 * increment, cycles x nsteps Jacobi steps over all bands of a group (grid z
 * = band, or a persistent grid over the bands' regions), several steps fused
 * into one launch: a block loads a region of u and the conductances (the
 * output tile plus a halo of K pixels), runs K steps on chip, and writes
 * back only the tile, so u moves through device memory once for K steps.
 * After step s the values within s of the region's edge are wrong; the
 * tile, at distance >= K, is exact.
 *
 * Float FED (precision float, the default): u and the conductances in
 * float, kFuseF = 7 steps a launch (the default schedule's 28 steps in 4
 * launches) on 64 x 64 regions, 256 threads of 2 columns x 8 rows each:
 *   fed_shfl_kernel  a CTA per region; the edge conductances towards the
 *                    east and south neighbours precomputed per band
 *                    (diffuse_cond_kernel: 16 bytes a pixel and launch),
 *                    horizontal neighbours by warp shuffles, only the
 *                    strips' first and last rows through shared memory (one
 *                    barrier a step), each difference of neighbours formed
 *                    once (fed_shfl_steps_diff: 7 flops a pixel and step
 *                    instead of 9, the same bits);
 *   fed_tma_kernel   (sm_90) the same steps on a persistent grid of two CTAs
 *                    an SM, each region's u, ce and cs brought into shared
 *                    memory by three tensor copies that start for the CTA's
 *                    next region as soon as the current one is in registers
 *                    (the copy runs under the steps); planes with rows padded
 *                    to a multiple of 4 floats, regions starting at multiples
 *                    of 4 columns (48 output columns instead of 50). Taken
 *                    when each launch has enough regions per CTA to hide the
 *                    first copy (EadpCuda::plan_tma).
 * The increment's last launch also writes the profile band (nodata where
 * masked) into its output slot, or, without a mask, u itself into the slot
 * (the next increment reads it there: one store a pixel instead of two).
 *
 * Double FED (precision double): fed_fused_kernel, kFuseD = 4 steps on
 * 64 x 32 regions in shared memory, 4-row strips a thread, each step in the
 * CPU's order without FMA: the whole profile agrees with the CPU's bit for
 * bit with g2. fed_step_kernel: one plain step a launch, for images too
 * large for the fused kernels' grids or 32-bit offsets.
 *
 * Output: copy_out_kernel (float u or the input band, a flat copy, nodata
 * where masked), to_float_kernel (double u). The float FED stays within 1e-4
 * of the CPU's double result (DESIGN.md's bound; the Leja step order keeps
 * float rounding from being amplified). */
#include "eadp_cuda.cuh"

using namespace hyprof_cuda;
using namespace hyprof_cuda::eadp;

namespace {

/* One FED step over all bands, straight from device memory. */
template <typename T>
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
        uout[off + p] = fed_update(up, e ? u[p + 1] : zero, w ? u[p - 1] : zero,
                                        s ? u[p + W] : zero, n ? u[p - W] : zero, ce, cw, cs, cn,
                                        tau);
    }
}

/* K fused FED steps on a kFedRW x (BY R) region (output tile + halo K) in
 * shared memory `buf` (two planes). Thread (c, ty) owns column c, rows
 * ty*R .. ty*R+R-1 of the region. Pixels outside the image or masked have
 * g = -1 (no flux) and u = 0. After step s the values at distance >= s from the
 * region's edge are exact; the tile at distance >= K is written. */
template <int K, int BY, int R, typename T>
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
    __syncthreads();
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
        __syncthreads();
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
                u[i] = fed_update(old, ue, uw, us, un, ce[i], cw[i], cs[i], cn, tau);
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


/* fed_shfl_kernel's body: K fused steps on a (32 C) x (BY R) region
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
 * step: the float operations of fed_update (fed_shfl_steps_diff: 7 instead
 * of 9), 2 / C shuffles and 4 / R shared accesses per column. Pixels outside
 * the image have u = 0 and zero conductances (they stay 0). The same
 * operations in the same order as fed_step_kernel<float> on the same
 * conductances: the same bits. */
template <int K, int BY, int R, int C> struct __align__(16) FedShflSmem { /* float4 accesses */
    float top[2][BY + 1][32 * C]; /* [plane][w]: warp w's first row; [BY]: zeros */
    float bot[2][BY + 1][32 * C]; /* [plane][w + 1]: warp w's last row; [0]: zeros */
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

template <int K, int BY, int R>
__device__ __forceinline__ void fed_shfl_body(FedShflSmem<K, BY, R, 2> &sm, const float *uin,
                                              float *uout, const float *ceg, const float *csg,
                                              int W, int H, size_t npix, const FedStepsF &steps,
                                              float *out, const uint8_t *mask, float nodata)
{
    const int C = 2, RW = 32 * C, RH = BY * R;
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
    if (inner) {
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
    } else {
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
    }
    if (w == 0 || w == BY - 1) { /* the zero rows (never written again) */
        float z[C];
#pragma unroll
        for (int j = 0; j < C; ++j)
            z[j] = 0.0f;
        for (int p = 0; p < 2; ++p)
            sm_store<C>(w == 0 ? &sm.bot[p][0][c0] : &sm.top[p][BY][c0], z);
    }
    fed_shfl_steps_diff<K, BY, R>(sm, u, ce, cs, cwl, cn0, steps);
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
 * a multiple of 16 bytes in x (an illegal instruction otherwise), so the
 * regions' columns start at multiples of 4: a halo of XL = K rounded up to 4
 * on either side (output tiles of 48 columns for K = 7 instead of 50). K
 * steps unrolled when a launch has K (its step sizes then at fixed offsets
 * of the parameter), 8-byte stores (fed_shfl_store's Pair). Dynamic shared
 * memory: sizeof(FedTmaSmem) + 128 (alignment). */
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
     * is late by all three at the first step's barrier. */
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

template <typename T>
__global__ void __launch_bounds__(kPixBX *kPixBY)
    fed_step_kernel(const T *__restrict__ uin, T *__restrict__ uout, const T *__restrict__ gm,
                    int W, int H, size_t npix, T tau)
{
    fed_step_body<T>(HYPROF_EADP_THR, uin, uout, gm, W, H, npix, tau);
}

/* Dynamic shared memory: 2 * BY * R * kFedRW T (64 KiB for 64-row regions
 * of double); 2 blocks per SM for 32-row regions, 1 for 64-row ones. */
template <int K, int BY, int R, typename T>
__global__ void __launch_bounds__(kFedBX *BY, 64 / (BY * R))
    fed_fused_kernel(const T *__restrict__ uin, T *__restrict__ uout, const T *__restrict__ gm,
                     int W, int H, size_t npix, const __grid_constant__ FedSteps steps)
{
    extern __shared__ double fed_smem[];
    fed_fused_body<K, BY, R, T>(HYPROF_EADP_THR,
                                     reinterpret_cast<T(*)[BY * R][kFedRW]>(fed_smem), uin, uout,
                                     gm, W, H, npix, steps);
}

/* Dynamic shared memory: a FedShflSmem; two blocks of 256 threads per SM. */
template <int K>
__global__ void __launch_bounds__(256, 2)
    fed_shfl_kernel(const float *__restrict__ uin, float *__restrict__ uout,
                    const float *__restrict__ ceg, const float *__restrict__ csg, int W, int H,
                    size_t npix, const __grid_constant__ FedStepsF steps, float *__restrict__ out,
                    const uint8_t *__restrict__ mask, float nodata)
{
    extern __shared__ float4 fed_shfl_smem[];
    fed_shfl_body<K, 8, 8>(*reinterpret_cast<FedShflSmem<K, 8, 8, 2> *>(fed_shfl_smem), uin,
                           uout, ceg, csg, W, H, npix, steps, out, mask, nodata);
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

} /* namespace */

namespace hyprof_cuda {
namespace eadp {

/* Dynamic shared memory of the launches. */
static const size_t kShflSmem = sizeof(FedShflSmem<kFuseF, 8, 8, 2>);
static const size_t kTmaSmem = sizeof(FedTmaSmem<kFuseF>) + 128; /* 128-byte aligned */
static const size_t kFusedSmem = (size_t)2 * kRowsD * kFedRW * sizeof(double);

cudaError_t fed_setup(bool shfl, bool fused_f64)
{
    if (shfl)
        return cudaFuncSetAttribute(fed_shfl_kernel<kFuseF>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kShflSmem);
    if (fused_f64)
        return cudaFuncSetAttribute(fed_fused_kernel<kFuseD, kRowsD / kStripD, kStripD, double>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kFusedSmem);
    return cudaSuccess;
}

cudaError_t fed_tma_setup(int *per_sm)
{
    const void *fn = (const void *)fed_tma_kernel<kFuseF>;
    cudaError_t e =
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kTmaSmem);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, fn, 256, kTmaSmem);
    return e;
}

template <typename T>
cudaError_t launch_fed_step(const T *uin, T *uout, const T *g, int W, int H, size_t npix,
                            size_t nb, T tau, cudaStream_t st)
{
    fed_step_kernel<T><<<pix_grid(W, H, nb), dim3(kPixBX, kPixBY), 0, st>>>(uin, uout, g, W, H,
                                                                             npix, tau);
    return cudaGetLastError();
}
template cudaError_t launch_fed_step<float>(const float *, float *, const float *, int, int,
                                            size_t, size_t, float, cudaStream_t);
template cudaError_t launch_fed_step<double>(const double *, double *, const double *, int, int,
                                             size_t, size_t, double, cudaStream_t);

cudaError_t launch_fed_fused_f64(const double *uin, double *uout, const double *g, int W, int H,
                                 size_t npix, size_t nb, const FedSteps &steps, cudaStream_t st)
{
    const int OW = kFedRW - 2 * kFuseD, OH = kRowsD - 2 * kFuseD;
    const dim3 grid((unsigned)((W + OW - 1) / OW), (unsigned)((H + OH - 1) / OH), (unsigned)nb);
    const dim3 block((unsigned)kFedBX, (unsigned)(kRowsD / kStripD));
    FedSteps fs = steps;
    void *params[] = {(void *)&uin, (void *)&uout, (void *)&g,  (void *)&W,
                      (void *)&H,   (void *)&npix, (void *)&fs};
    return cudaLaunchKernel(
        (const void *)fed_fused_kernel<kFuseD, kRowsD / kStripD, kStripD, double>, grid, block,
        params, kFusedSmem, st);
}

cudaError_t launch_fed_shfl(const float *uin, float *uout, const float *ce, const float *cs,
                            int W, int H, size_t npix, size_t nb, const FedStepsF &steps,
                            float *out, const uint8_t *mask, float nodata, cudaStream_t st)
{
    const int ow = 64 - 2 * kFuseF, oh = 64 - 2 * kFuseF;
    const dim3 grid((unsigned)((W + ow - 1) / ow), (unsigned)((H + oh - 1) / oh), (unsigned)nb);
    FedStepsF ff = steps;
    void *params[] = {(void *)&uin, (void *)&uout, (void *)&ce,   (void *)&cs,
                      (void *)&W,   (void *)&H,    (void *)&npix, (void *)&ff,
                      (void *)&out, (void *)&mask, (void *)&nodata};
    return cudaLaunchKernel((const void *)fed_shfl_kernel<kFuseF>, grid, dim3(32, 8), params,
                            kShflSmem, st);
}

void fed_tma_grid(int W, int H, int *gx, int *gy)
{
    const int ow = FedTmaShape<kFuseF>::OW, oh = FedTmaShape<kFuseF>::OH;
    *gx = (W + ow - 1) / ow;
    *gy = (H + oh - 1) / oh;
}

cudaError_t launch_fed_tma(const CUtensorMap *tu, const CUtensorMap *tce, const CUtensorMap *tcs,
                           float *uout, float *out, const uint8_t *mask, int W, int H, int ld,
                           size_t plane, size_t b0, size_t nb, int ctas,
                           const FedStepsF &steps, float nodata, cudaStream_t st)
{
    int gx = 0, gy = 0, z0 = (int)b0;
    fed_tma_grid(W, H, &gx, &gy);
    int ntiles = gx * gy * (int)nb; /* < INT_MAX: EadpCuda::plan_tma */
    const unsigned grid = (unsigned)(ntiles < ctas ? ntiles : ctas);
    FedStepsF ff = steps;
    void *params[] = {(void *)tu,     (void *)tce,    (void *)tcs, (void *)&uout,
                      (void *)&out,   (void *)&mask,  (void *)&W,  (void *)&H,
                      (void *)&ld,    (void *)&plane, (void *)&z0, (void *)&gx,
                      (void *)&gy,    (void *)&ntiles, (void *)&ff, (void *)&nodata};
    return cudaLaunchKernel((const void *)fed_tma_kernel<kFuseF>, dim3(grid), dim3(32, 8),
                            params, kTmaSmem, st);
}

cudaError_t launch_copy_out(const float *src, const uint8_t *mask, int W, int ld, size_t plane,
                            size_t n, float nodata, float *out, cudaStream_t st)
{
    size_t blocks = (n + 4 * 256 - 1) / (4 * 256);
    blocks = blocks < 4096 ? blocks : 4096;
    copy_out_kernel<<<(unsigned)blocks, 256, 0, st>>>(src, mask, W, ld, plane, n, nodata, out);
    return cudaGetLastError();
}

cudaError_t launch_to_float_f64(const double *src, const uint8_t *mask, int W, int H,
                                size_t npix, size_t nb, float nodata, float *out,
                                cudaStream_t st)
{
    to_float_kernel<double><<<pix_grid(W, H, nb), dim3(kPixBX, kPixBY), 0, st>>>(
        src, mask, W, H, npix, nodata, out);
    return cudaGetLastError();
}

} /* namespace eadp */
} /* namespace hyprof_cuda */
