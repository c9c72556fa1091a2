/* CUDA EADP, first stage (semantics: algorithms/diffusion/eadp_impl.h, steps
 * 1, 2 and 4): for every band of a group at once (grid z = band),
 *
 *   prep_kernel   per 32 x 32 tile (32 x 16 above radius 4): H = Gx * (m u)
 *                 and Gx * m of the rows the tile needs in shared memory, then
 *                 s = Gy * H / Gy * Hm (0 where the denominator is 0) over the
 *                 tile and a 1-pixel border, then G = gx^2 + gy^2 (Scharr),
 *                 the high word of G's selection key and the per-band counts
 *                 of valid pixels, of G == 0 and of G > 0;
 *   gauss_h, gauss_v, scharr
 *                 the same values by three kernels through device memory, for
 *                 radii above kPrepMaxR (sigma > 8/3) or images too tall for
 *                 prep_kernel's grid;
 *   fill_kernel   the contrast when it is given;
 *   diffuse_cond_kernel
 *                 the float FED's inputs: u = x (0 where masked) and the edge
 *                 conductances towards the east and south neighbours (fixed
 *                 per band, so computed once instead of once per FED launch);
 *   diffuse_kernel
 *                 g per pixel (-1 where masked) and u, for the double FED and
 *                 the one-step-a-launch fallback.
 *
 * Arithmetic in double, in eadp.c's order without contraction, so that G,
 * the contrast and the diffusivity are the CPU's bit for bit (g1 and g3 call
 * exp(), whose last bit may differ between CUDA and the C library). */
#include "eadp_cuda.cuh"

using namespace hyprof_cuda;
using namespace hyprof_cuda::eadp;

namespace {

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
        atomicAdd(&cnt_sh[0], 1u);
        if (g == 0.0)
            atomicAdd(&cnt_sh[1], 1u);
        else if (g > 0.0)
            atomicAdd(&cnt_sh[2], 1u);
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
    __syncthreads();
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
    __syncthreads();
    if (tid < 3 && cnt_sh[tid])
        atomicAdd(&cnt[(size_t)b * 3 + tid], (u64)cnt_sh[tid]);
}

const int kPrepSW = kPrepTX + 2;
const int kPrepXW = kPrepTX + 2 + 2 * kPrepMaxR; /* staged input columns */

/* prep_body's last part: G (and its keys' high words) of the tile from S,
 * and the band's counts. */
template <int kPrepTY>
HYPROF_EADP_FN void prep_gradient(const Thr &t, double (*S)[kPrepSW], unsigned *cnt_sh,
                                  const uint8_t *mask, int W, int H, size_t npix, double *G,
                                  unsigned *Kh, u64 *cnt)
{
    const int tid = t.ty * t.bdx + t.tx, nthr = t.bdx * t.bdy;
    const int b = t.bz, x0 = t.bx * kPrepTX, y0 = t.by * kPrepTY;
    /* The counts in registers, added once a warp, instead of two shared
     * atomics a pixel on the same three counters. */
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
            atomicAdd(&cnt_sh[0], cv);
        if (cz)
            atomicAdd(&cnt_sh[1], cz);
        if (cp)
            atomicAdd(&cnt_sh[2], cp);
    }
    __syncthreads();
    if (tid < 3 && cnt_sh[tid])
        atomicAdd(&cnt[(size_t)b * 3 + tid], (u64)cnt_sh[tid]);
}

/* gauss_h, gauss_v and scharr in one pass for a kPrepTX x kPrepTY tile of
 * band t.bz: the horizontal sums of the rows the tile's smoothing needs go
 * to shared memory (Hn: of m x, Hd: of m; row k holds image row
 * reflect(y0 - 1 - r + k)), then s over the tile plus a 1-pixel border (S),
 * then G and the counts. The same operations in the same order as the three
 * kernels, so the same bits; r <= kPrepMaxR. */
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
    __syncthreads();
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
    __syncthreads();
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
    __syncthreads();
    prep_gradient<kPrepTY>(t, S, cnt_sh, mask, W, H, npix, G, Kh, cnt);
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
        __syncthreads();
        if (here) {
            const float gp = gs[t.ty][t.tx];
            u[o] = gp < 0.0f ? 0.0f : pos0(xi);
            if (out) /* the profile's first band (copy_out_body's values) */
                out[o] = masked ? nodata : xi;
            ce[o] = gp < 0.0f ? 0.0f : edge_c(gp, gs[t.ty][t.tx + 1]);
            cs[o] = gp < 0.0f ? 0.0f : edge_c(gp, gs[t.ty + 1][t.tx]);
        }
        __syncthreads();
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

} /* namespace */

namespace hyprof_cuda {
namespace eadp {

cudaError_t launch_smooth_gradient(bool fused, const float *x, const uint8_t *mask, int W, int H,
                                   size_t npix, size_t nb, int r, const double *w, double *A,
                                   double *B, unsigned *Kh, u64 *cnt, cudaStream_t st)
{
    const dim3 block(kPixBX, kPixBY);
    if (!fused) {
        gauss_h_kernel<<<pix_grid(W, H, nb + 1), block, 0, st>>>(x, mask, W, H, npix, (int)nb,
                                                                  w, r, A);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
        gauss_v_kernel<<<pix_grid(W, H, nb), block, 0, st>>>(A, W, H, npix, (int)nb, w, r, B);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
        scharr_kernel<<<pix_grid(W, H, nb), block, 0, st>>>(B, mask, W, H, npix, A, Kh, cnt);
        return cudaGetLastError();
    }
    const int pty = prep_ty(r);
    const dim3 grid((unsigned)((W + kPrepTX - 1) / kPrepTX), (unsigned)((H + pty - 1) / pty),
                    (unsigned)nb);
    void (*pk)(const float *, const uint8_t *, int, int, size_t, const double *, double *,
               unsigned *, u64 *) = prep_kernel<8>;
    switch (r) { /* r <= kPrepMaxR = 8 here */
    case 1: pk = prep_kernel<1>; break;
    case 2: pk = prep_kernel<2>; break;
    case 3: pk = prep_kernel<3>; break;
    case 4: pk = prep_kernel<4>; break;
    case 5: pk = prep_kernel<5>; break;
    case 6: pk = prep_kernel<6>; break;
    case 7: pk = prep_kernel<7>; break;
    default: break;
    }
    pk<<<grid, block, 0, st>>>(x, mask, W, H, npix, w, A, Kh, cnt);
    return cudaGetLastError();
}

cudaError_t launch_fill_k(double *k, size_t nb, double v, cudaStream_t st)
{
    fill_kernel<<<(unsigned)((nb + 127) / 128), 128, 0, st>>>(k, (int)nb, v);
    return cudaGetLastError();
}

cudaError_t launch_diffuse_cond(const float *x, const uint8_t *mask, int W, int H, size_t npix,
                                int ld, size_t plane, size_t nb, const double *k,
                                int diffusivity, const double *G, float *u, float *ce, float *cs,
                                float *out, float nodata, cudaStream_t st)
{
    diffuse_cond_kernel<<<pix_grid(W, H, nb), dim3(kPixBX, kPixBY), 0, st>>>(
        x, mask, W, H, npix, ld, plane, k, diffusivity, G, u, ce, cs, out, nodata);
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch_diffuse(const float *x, const uint8_t *mask, int W, int H, size_t npix,
                           size_t nb, const double *k, int diffusivity, const double *G, T *u,
                           T *g, cudaStream_t st)
{
    diffuse_kernel<T><<<pix_grid(W, H, nb), dim3(kPixBX, kPixBY), 0, st>>>(
        x, mask, W, H, npix, k, diffusivity, G, u, g);
    return cudaGetLastError();
}
template cudaError_t launch_diffuse<float>(const float *, const uint8_t *, int, int, size_t,
                                           size_t, const double *, int, const double *,
                                           float *, float *, cudaStream_t);
template cudaError_t launch_diffuse<double>(const float *, const uint8_t *, int, int, size_t,
                                            size_t, const double *, int, const double *,
                                            double *, double *, cudaStream_t);

} /* namespace eadp */
} /* namespace hyprof_cuda */
