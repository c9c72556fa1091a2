// The named-barrier hand-over of gram_tc_kernel (kernels/spectral/pca_cov_tc.cu) alone: P producer
// warps (argv[1], 1..3) fill a ring of 3 shared-memory planes that 4 consumer warps sum (producers
// bar.arrive FULL / bar.sync FREE, consumers bar.sync FULL / bar.arrive FREE); argv[2] = 1 makes the
// producers bar.sync FULL instead (more synchronisation). Race-free by construction; the host checks
// the sums. Not built by CMake: bench/NOTES.md ("Sanitizers") says what racecheck reports:
//   nvcc -arch=sm_90 -o rc bench/rc_named_barriers.cu
//   compute-sanitizer --tool racecheck ./rc 3 0; compute-sanitizer --tool racecheck ./rc 3 1
#include <cstdio>
#include <cstdlib>
__device__ __forceinline__ void bar_sync(int id, int count)
{ asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int count)
{ asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory"); }
constexpr int N = 1024;
__global__ void k(float *out, int nst, int P, int allsync)
{
    __shared__ float buf[3][N];
    const int tid = threadIdx.x, warp = tid >> 5, n = blockDim.x;
    if (warp < P) {
        for (int s = 0; s < nst; ++s) {
            if (s >= 3)
                bar_sync(4 + s % 3, n);
            for (int i = tid; i < N; i += 32 * P)
                buf[s % 3][i] = (float)(s + i);
            if (allsync) bar_sync(1 + s % 3, n); else bar_arrive(1 + s % 3, n);
        }
    } else {
        float acc = 0;
        const int t = tid - 32 * P;
        for (int s = 0; s < nst; ++s) {
            bar_sync(1 + s % 3, n);
            for (int i = t; i < N; i += n - 32 * P)
                acc += buf[s % 3][i];
            if (s + 3 < nst)
                bar_arrive(4 + s % 3, n);
        }
        out[t] = acc;
    }
}
int main(int argc, char **argv)
{
    const int P = argc > 1 ? atoi(argv[1]) : 1, allsync = argc > 2 ? atoi(argv[2]) : 0;
    const int nst = 12, T = 32 * (P + 4), C = T - 32 * P;
    float *d, h[128];
    cudaMalloc(&d, C * sizeof(float));
    k<<<1, T>>>(d, nst, P, allsync);
    cudaMemcpy(h, d, C * sizeof(float), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int t = 0; t < C; ++t) {
        float e = 0;
        for (int s = 0; s < nst; ++s)
            for (int i = t; i < N; i += C)
                e += (float)(s + i);
        bad += h[t] != e;
    }
    printf("rc_barP P=%d allsync=%d: %s (%d wrong sums)\n", P, allsync, bad ? "WRONG" : "sums right", bad);
    return bad != 0;
}
