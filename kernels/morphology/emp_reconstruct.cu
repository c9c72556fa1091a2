/* The EMP of the CUDA chain (kernels/morphology/emp_cuda.cuh): for each of
 * the share's 8-bit feature bands q, the 2 nradii planes of its openings and
 * closings by reconstruction, then the band plane itself.
 *
 *   markers      per band: running row minima of f and 255 - f for every
 *                half-width up to the largest radius (row_min_kernel, one
 *                pass), then the markers of all radii and both polarities
 *                (marker_kernel, grid z): the minimum over the structuring
 *                element's rows (half-width table) of those row minima, the
 *                erosion of f (of 255 - f for the closings); masked pixels
 *                ignored, as the CPU's algorithm does
 *   reconstruct  block-asynchronous reconstruction (the seed's BAR,
 *                reconstruct_kernel): one warp per 32 x 32 tile (+ 1-pixel
 *                halo) in shared memory runs row-parallel left/right and
 *                column-parallel down/up scans (8-connected) until the tile is
 *                stable, writes it back and raises a device flag; the host
 *                relaunches until no tile changes. Chaotic relaxation of a
 *                monotone operator reaches the same fixpoint as Vincent's
 *                algorithm: the result is exact (integer), like the CPU's.
 *   finish       closings back to 255 - J, the band plane, masked pixels 0
 *                (finish_kernel); without the denoising, the float output
 *                planes (to_float_kernel) and their download. */
#include "emp_cuda.cuh"

namespace {

using namespace emp_cuda;

/* Reconstruction plane z of a band range -> band, radius index, polarity and
 * position in the band's profile (closings by the largest radius first). */
__device__ __forceinline__ void plane_of(int z, int nradii, int *band, int *ri, bool *closing,
                                         int *outk)
{
    const int per = 2 * nradii, k = z % per;
    *band = z / per;
    *closing = k < nradii;
    *ri = k < nradii ? nradii - 1 - k : k - nradii;
    *outk = k < nradii ? k : k + 1;
}

/* Running row minima of one band for both polarities (z: 0 = f, 1 = 255 - f):
 * hm[(z * (rmax + 1) + k) * n + p] = min over [x - k, x + k] of the row
 * (clipped; masked pixels count as 255, i.e. are ignored). */
__global__ void row_min_kernel(const uint8_t *__restrict__ qb, const uint8_t *__restrict__ mask,
                               int W, size_t n, int rmax, uint8_t *__restrict__ hm)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, pol = blockIdx.z;
    if (x >= W)
        return;
    const size_t r0 = (size_t)y * W;
    auto val = [&](int xx) -> unsigned {
        if (mask && !mask[r0 + xx])
            return 255u;
        const unsigned v = __ldg(qb + r0 + xx);
        return pol ? 255u - v : v;
    };
    unsigned m = val(x);
    uint8_t *out = hm + (size_t)pol * (rmax + 1) * n + r0 + x;
    out[0] = (uint8_t)m;
    for (int k = 1; k <= rmax; ++k) {
        if (x - k >= 0)
            m = min(m, val(x - k));
        if (x + k < W)
            m = min(m, val(x + k));
        out[(size_t)k * n] = (uint8_t)m;
    }
}

/* Markers of one band's 2 nradii reconstruction planes (grid z): the erosion
 * of f (255 - f for closings) by the SE, the minimum over its rows of the
 * running row minima of the row's half-width; masked pixels get 0 (inert in
 * the reconstruction). `embp`: the band's first profile plane. */
__global__ void marker_kernel(const uint8_t *__restrict__ hm, const uint8_t *__restrict__ mask,
                              int W, int H, size_t n, int rmax, int nradii,
                              const int *__restrict__ radii, const int *__restrict__ hw_off,
                              const int *__restrict__ hw, uint8_t *__restrict__ embp)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H)
        return;
    int band, ri, outk;
    bool closing;
    plane_of(blockIdx.z, nradii, &band, &ri, &closing, &outk);
    const size_t p = (size_t)y * W + x;
    uint8_t *dst = embp + (size_t)outk * n + p;
    if (mask && !mask[p]) {
        *dst = 0;
        return;
    }
    const int r = radii[ri];
    const int *h = hw + hw_off[ri];
    const uint8_t *base = hm + (size_t)(closing ? 1 : 0) * (rmax + 1) * n + x;
    unsigned m = 255;
    for (int dy = -r; dy <= r; ++dy) {
        const int yy = y + dy;
        if (yy < 0 || yy >= H)
            continue;
        m = min(m, (unsigned)__ldg(base + (size_t)h[dy + r] * n + (size_t)yy * W));
    }
    *dst = (uint8_t)m;
}

/* One 32 x 32 tile (tx, ty) of reconstruction plane z, by one warp: loads it
 * with its 1-pixel halo into shared memory, scans until it is stable and
 * writes it back if it changed; returns whether it did. */
__device__ bool recon_tile(const uint8_t *__restrict__ q, const uint8_t *__restrict__ mask,
                           int W, int H, size_t n, int nradii, uint8_t *emp, int z, int tx,
                           int ty, uint8_t (*J)[kStride], uint8_t (*I)[kStride])
{
    int band, ri, outk;
    bool closing;
    plane_of(z, nradii, &band, &ri, &closing, &outk);
    uint8_t *plane = emp + ((size_t)band * (2 * nradii + 1) + outk) * n;
    const uint8_t *qb = q + (size_t)band * n;
    const int lane = threadIdx.x, x0 = tx * kTile, y0 = ty * kTile;
    for (int i = lane; i < (kTile + 2) * (kTile + 2); i += 32) {
        const int sy = i / (kTile + 2), sx = i % (kTile + 2);
        const int gy = y0 + sy - 1, gx = x0 + sx - 1;
        const bool in = gx >= 0 && gx < W && gy >= 0 && gy < H;
        const size_t p = in ? (size_t)gy * W + gx : 0;
        J[sy][sx] = in ? plane[p] : 0;
        if (sy >= 1 && sy <= kTile && sx >= 1 && sx <= kTile) {
            uint8_t v = 0;
            if (in && (!mask || mask[p]))
                v = closing ? (uint8_t)(255 - qb[p]) : qb[p];
            I[sy - 1][sx - 1] = v;
        }
    }
    __syncwarp();
    bool any = false;
    const int t = lane + 1;
    for (;;) {
        bool ch = false;
        /* rows, left to right and back: pixel (t, x) from column x -/+ 1 */
        for (int x = 1; x <= kTile; ++x) {
            unsigned v = J[t][x];
            v = max(v, (unsigned)J[t - 1][x - 1]);
            v = max(v, (unsigned)J[t][x - 1]);
            v = max(v, (unsigned)J[t + 1][x - 1]);
            v = min(v, (unsigned)I[t - 1][x - 1]);
            if (v != J[t][x]) {
                J[t][x] = (uint8_t)v;
                ch = true;
            }
            __syncwarp();
        }
        for (int x = kTile; x >= 1; --x) {
            unsigned v = J[t][x];
            v = max(v, (unsigned)J[t - 1][x + 1]);
            v = max(v, (unsigned)J[t][x + 1]);
            v = max(v, (unsigned)J[t + 1][x + 1]);
            v = min(v, (unsigned)I[t - 1][x - 1]);
            if (v != J[t][x]) {
                J[t][x] = (uint8_t)v;
                ch = true;
            }
            __syncwarp();
        }
        /* columns, top to bottom and back: pixel (y, t) from row y -/+ 1 */
        for (int y = 1; y <= kTile; ++y) {
            unsigned v = J[y][t];
            v = max(v, (unsigned)J[y - 1][t - 1]);
            v = max(v, (unsigned)J[y - 1][t]);
            v = max(v, (unsigned)J[y - 1][t + 1]);
            v = min(v, (unsigned)I[y - 1][t - 1]);
            if (v != J[y][t]) {
                J[y][t] = (uint8_t)v;
                ch = true;
            }
            __syncwarp();
        }
        for (int y = kTile; y >= 1; --y) {
            unsigned v = J[y][t];
            v = max(v, (unsigned)J[y + 1][t - 1]);
            v = max(v, (unsigned)J[y + 1][t]);
            v = max(v, (unsigned)J[y + 1][t + 1]);
            v = min(v, (unsigned)I[y - 1][t - 1]);
            if (v != J[y][t]) {
                J[y][t] = (uint8_t)v;
                ch = true;
            }
            __syncwarp();
        }
        if (!__any_sync(0xffffffffu, ch))
            break;
        any = true;
    }
    if (!any)
        return false;
    for (int i = lane; i < kTile * kTile; i += 32) {
        const int sy = i / kTile, sx = i % kTile, gy = y0 + sy, gx = x0 + sx;
        if (gx < W && gy < H)
            plane[(size_t)gy * W + gx] = J[sy + 1][sx + 1];
    }
    return true;
}

/* Block-asynchronous reconstruction (BAR), one launch: one warp per tile of
 * every plane. A tile is skipped when neither it nor a neighbour changed in
 * the previous launch (`prev`, NULL: the first launch): then its pixels and
 * its halo are what they were when it was last found stable. Changed tiles
 * are marked in `cur` (cleared before the launch) and raise *changed. */
__global__ void __launch_bounds__(32)
    reconstruct_kernel(const uint8_t *__restrict__ q, const uint8_t *__restrict__ mask, int W,
                       int H, size_t n, int nradii, uint8_t *emp,
                       const uint8_t *__restrict__ prev, uint8_t *cur, int *changed)
{
    __shared__ uint8_t J[kTile + 2][kStride];
    __shared__ uint8_t I[kTile][kStride];
    const int tx = blockIdx.x, ty = blockIdx.y, ntx = gridDim.x, nty = gridDim.y;
    const size_t tiles = (size_t)ntx * nty, tile = blockIdx.z * tiles + (size_t)ty * ntx + tx;
    if (prev) {
        bool active = false;
        for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx) {
                const int yy = ty + dy, xx = tx + dx;
                if (yy >= 0 && yy < nty && xx >= 0 && xx < ntx &&
                    prev[blockIdx.z * tiles + (size_t)yy * ntx + xx])
                    active = true;
            }
        if (!active)
            return;
    }
    if (!recon_tile(q, mask, W, H, n, nradii, emp, blockIdx.z, tx, ty, J, I))
        return;
    if (threadIdx.x == 0) {
        cur[tile] = 1;
        *changed = 1;
    }
}

/* Closings back to 255 - J, the band plane from q, masked pixels 0. */
__global__ void finish_kernel(const uint8_t *__restrict__ q, const uint8_t *__restrict__ mask,
                              size_t n, int nradii, uint8_t *emp)
{
    const size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n)
        return;
    const int P = 2 * nradii + 1, k = blockIdx.y % P, band = blockIdx.y / P;
    uint8_t *d = emp + (size_t)blockIdx.y * n + p;
    if (mask && !mask[p])
        *d = 0;
    else if (k == nradii)
        *d = q[(size_t)band * n + p];
    else if (k < nradii)
        *d = (uint8_t)(255 - *d);
}

__global__ void to_float_kernel(const uint8_t *__restrict__ src, const uint8_t *__restrict__ mask,
                                size_t n, float nodata, float *__restrict__ dst)
{
    const size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n)
        return;
    const size_t i = (size_t)blockIdx.y * n + p;
    dst[i] = (mask && !mask[p]) ? nodata : (float)src[i];
}

} /* namespace */

namespace emp_cuda {

/* BAR: relaunches until no tile changes. */
hyprof_status_t EmpDevice::reconstruct_bar(dim3 tiles)
{
    cudaStream_t st = s.get();
    const uint8_t *m = a->mask ? mask.get() : NULL;
    /* tile activity, ping-pong; two launches per look at the flag (a launch
     * after convergence skips every tile) */
    const size_t ntiles = (size_t)tiles.x * tiles.y * tiles.z;
    DeviceBuffer<uint8_t> act;
    HYPROF_TRY(act.alloc(ctx, op, 2 * ntiles));
    uint8_t *buf[2] = {act.get(), act.get() + ntiles};
    const uint8_t *prev = NULL;
    int changed = 1, which = 0;
    for (int it = 0; changed; ++it) {
        for (int k = 0; k < 2; ++k) {
            uint8_t *cur = buf[which];
            HYPROF_CUDA_CHECK(cudaMemsetAsync(cur, 0, ntiles, st));
            if (k == 1)
                HYPROF_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), st));
            reconstruct_kernel<<<tiles, 32, 0, st>>>(q.get(), m, W, H, n, (int)a->nradii,
                                                     emp.get(), prev, cur, flag.get());
            HYPROF_CUDA_CHECK_LAUNCH("reconstruct_kernel");
            ++launches;
            prev = cur;
            which ^= 1;
        }
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(&changed, flag.get(), sizeof(int),
                                          cudaMemcpyDeviceToHost, st));
        HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
        if ((it & 7) == 7)
            HYPROF_TRY(cancelled());
    }
    return HYPROF_OK;
}

hyprof_status_t EmpDevice::profiles()
{
    cudaStream_t st = s.get();
    const size_t nrec = nb * 2 * a->nradii;
    const uint8_t *m = a->mask ? mask.get() : NULL;
    const int rmax = a->radii[a->nradii - 1];
    PoolBuffer<uint8_t> hm;
    HYPROF_TIMED_ALLOC(hm.alloc(ctx, op, 2 * (size_t)(rmax + 1) * n));
    const dim3 eb(32, 8);
    for (size_t b = 0; b < nb; ++b) { /* one band at a time: hm is (rmax + 1) planes */
        row_min_kernel<<<dim3((unsigned)div_up(a->width, 128), (unsigned)a->height, 2), 128,
                         0, st>>>(q.get() + b * n, m, W, n, rmax, hm.get());
        HYPROF_CUDA_CHECK_LAUNCH("row_min_kernel");
        marker_kernel<<<grid2(a->width, a->height, 2 * a->nradii, eb), eb, 0, st>>>(
            hm.get(), m, W, H, n, rmax, (int)a->nradii, radii.get(), hw_off.get(), hw.get(),
            emp.get() + b * P * n);
        HYPROF_CUDA_CHECK_LAUNCH("marker_kernel");
    }
    mark(3, st);
    if (a->wavelet) /* while the markers compute */
        HYPROF_TRY(denoise_prepare());
    const dim3 tiles((unsigned)div_up(a->width, kTile), (unsigned)div_up(a->height, kTile),
                     (unsigned)nrec);
    HYPROF_TRY(reconstruct_bar(tiles));
    mark(4, st);
    finish_kernel<<<dim3((unsigned)div_up(n, 256), (unsigned)(nb * P)), 256, 0, st>>>(
        q.get(), m, n, (int)a->nradii, emp.get());
    HYPROF_CUDA_CHECK_LAUNCH("finish_kernel");
    mark(5, st);
    return HYPROF_OK;
}

hyprof_status_t EmpDevice::emp_out()
{
    cudaStream_t st = s.get();
    PoolBuffer<float> out;
    HYPROF_TIMED_ALLOC(out.alloc(ctx, op, nb * P * n));
    to_float_kernel<<<dim3((unsigned)div_up(n, 256), (unsigned)(nb * P)), 256, 0, st>>>(
        emp.get(), a->mask ? mask.get() : NULL, n, a->nodata, out.get());
    HYPROF_CUDA_CHECK_LAUNCH("to_float_kernel");
    mark(6, st);
    if (prep->staged()) {
        Event computed;
        HYPROF_TRY(computed.create(ctx, op));
        HYPROF_CUDA_CHECK(cudaEventRecord(computed.get(), st));
        HYPROF_TRY(download_staged(out.get(), a->out + b0 * P * n, nb * P * n, st,
                                   Ready(1, std::make_pair(nb * P * n, computed.get()))));
    } else {
        wait_output();
        const int dd = d2h.begin(st);
        HYPROF_CUDA_CHECK(cudaMemcpyAsync(a->out + b0 * P * n, out.get(),
                                          nb * P * n * sizeof(float), cudaMemcpyDeviceToHost,
                                          st));
        d2h.end(dd, st);
    }
    mark(7, st);
    HYPROF_CUDA_CHECK(cudaStreamSynchronize(st));
    return HYPROF_OK;
}

} /* namespace emp_cuda */
