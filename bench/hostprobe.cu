/* hyprof_hostprobe: the host-side limits of a host-to-host GPU chain on this
 * machine, each as one "probe <what> <figure>" line: page faults of fresh
 * memory, memcpy bandwidth by thread count (pageable and page-locked
 * destinations), the cost of cudaHostRegister, and the PCIe copy rates of
 * each GPU alone and of every GPU at once (page-locked, registered and
 * pageable sources). Used to find what bounds emp/wmcd with one and two
 * GPUs (bench/README.md). Usage: hyprof_hostprobe [MiB, default 1300]. */
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sys/mman.h>
#include <thread>
#include <vector>

namespace {

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/* f(t, T) on T threads; seconds. */
double par(int T, const std::function<void(int, int)> &f)
{
    const double t0 = now();
    std::vector<std::thread> th;
    for (int t = 0; t < T; ++t)
        th.emplace_back(f, t, T);
    for (auto &x : th)
        x.join();
    return now() - t0;
}

void range(size_t n, int t, int T, size_t *a, size_t *b)
{
    *a = n * (size_t)t / (size_t)T;
    *b = n * (size_t)(t + 1) / (size_t)T;
}

/* dst <- src in 256 KiB pieces split over T threads. */
double pcopy(int T, char *dst, const char *src, size_t bytes)
{
    const size_t piece = (size_t)256 << 10, np = (bytes + piece - 1) / piece;
    return par(T, [&](int t, int TT) {
        size_t a, b;
        range(np, t, TT, &a, &b);
        for (size_t i = a; i < b; ++i) {
            const size_t o = i * piece, len = bytes - o < piece ? bytes - o : piece;
            memcpy(dst + o, src + o, len);
        }
    });
}

void touch(char *p, size_t bytes, int T)
{
    par(T, [&](int t, int TT) {
        size_t a, b;
        range(bytes / 4096, t, TT, &a, &b);
        for (size_t i = a; i < b; ++i)
            ((volatile char *)p)[i * 4096] = 1;
    });
}

void madv_huge(void *p, size_t bytes)
{
    const uintptr_t h = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)p + h - 1) & ~(h - 1), e = ((uintptr_t)p + bytes) & ~(h - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
}

long anon_huge_kb()
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    long kb = -1;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

#define CK(x)                                                                                 \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            printf("probe cuda_error %s line %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); \
            return;                                                                           \
        }                                                                                     \
    } while (0)

double gbs(size_t bytes, double s) { return (double)bytes / s / 1e9; }

/* Fresh pages: one write per page with T threads, 4 KiB or 2 MiB pages; then
 * a full copy into fresh pages (the fault inside the copy). */
void probe_faults(size_t bytes, const char *src)
{
    const int ts[] = {8, 16, 32};
    for (int huge = 0; huge < 2; ++huge)
        for (int T : ts) {
            char *p = (char *)malloc(bytes);
            if (huge)
                madv_huge(p, bytes);
            const long h0 = anon_huge_kb();
            const double s = par(T, [&](int t, int TT) {
                size_t a, b;
                range(bytes / 4096, t, TT, &a, &b);
                for (size_t i = a; i < b; ++i)
                    ((volatile char *)p)[i * 4096] = 0;
            });
            printf("probe fault%s threads=%d %.1f ms (%.1f GB/s) anon_huge=%ld MB\n",
                   huge ? "_huge" : "_4k", T, s * 1e3, gbs(bytes, s),
                   (anon_huge_kb() - h0) >> 10);
            free(p);
        }
    for (int huge = 0; huge < 2; ++huge)
        for (int T : {8, 16, 32}) {
            char *p = (char *)malloc(bytes);
            if (huge)
                madv_huge(p, bytes);
            const double s = pcopy(T, p, src, bytes);
            printf("probe copy_into_fresh%s threads=%d %.1f ms (%.1f GB/s)\n",
                   huge ? "_huge" : "_4k", T, s * 1e3, gbs(bytes, s));
            free(p);
        }
}

void probe_copies(size_t bytes, char *src, char *dst, char *pin, size_t pin_bytes)
{
    for (int T : {4, 8, 16, 32}) {
        double best = 1e9;
        for (int r = 0; r < 2; ++r) {
            const double s = pcopy(T, dst, src, bytes);
            best = s < best ? s : best;
        }
        printf("probe memcpy pageable->pageable threads=%d %.1f ms (%.1f GB/s)\n", T, best * 1e3,
               gbs(bytes, best));
    }
    /* into page-locked memory: pin_bytes at a time, round the ring */
    for (int T : {4, 8, 16, 32}) {
        const double t0 = now();
        for (size_t o = 0; o < bytes; o += pin_bytes)
            pcopy(T, pin, src + o, bytes - o < pin_bytes ? bytes - o : pin_bytes);
        const double s = now() - t0;
        printf("probe memcpy pageable->pinned threads=%d %.1f ms (%.1f GB/s)\n", T, s * 1e3,
               gbs(bytes, s));
        const double t1 = now();
        for (size_t o = 0; o < bytes; o += pin_bytes)
            pcopy(T, dst + o, pin, bytes - o < pin_bytes ? bytes - o : pin_bytes);
        const double s1 = now() - t1;
        printf("probe memcpy pinned->pageable threads=%d %.1f ms (%.1f GB/s)\n", T, s1 * 1e3,
               gbs(bytes, s1));
    }
}

/* Copies `bytes` to (h2d) or from each of `ngpu` GPUs at once, one host
 * thread and stream each, from host memory h + share offset. */
double dma(int ngpu, bool h2d, char *h, size_t bytes, size_t piece, std::vector<void *> &dbuf,
           std::vector<cudaStream_t> &st)
{
    return par(ngpu, [&](int g, int G) {
        size_t a, b;
        range(bytes, g, G, &a, &b);
        cudaSetDevice(g);
        for (size_t o = a; o < b; o += piece) {
            const size_t len = b - o < piece ? b - o : piece;
            if (h2d)
                cudaMemcpyAsync(dbuf[g], h + o, len, cudaMemcpyHostToDevice, st[g]);
            else
                cudaMemcpyAsync(h + o, dbuf[g], len, cudaMemcpyDeviceToHost, st[g]);
        }
        cudaStreamSynchronize(st[g]);
    });
}

void probe_dma(size_t bytes, char *src, char *dst, char *pin, size_t pin_bytes, int ngpu)
{
    std::vector<void *> dbuf(ngpu);
    std::vector<cudaStream_t> st(ngpu), st2(ngpu);
    for (int g = 0; g < ngpu; ++g) {
        CK(cudaSetDevice(g));
        CK(cudaMalloc(&dbuf[g], (size_t)256 << 20));
        CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
        CK(cudaStreamCreateWithFlags(&st2[g], cudaStreamNonBlocking));
    }
    const size_t piece = (size_t)16 << 20;
    /* page-locked, the same ring round and round: 1 GB per GPU */
    for (int G = 1; G <= ngpu; ++G)
        for (int dir = 0; dir < 2; ++dir) {
            const size_t per = (size_t)1 << 30;
            const double s = par(G, [&](int g, int) {
                cudaSetDevice(g);
                for (size_t o = 0; o < per; o += piece) {
                    char *h = pin + (o / piece) % (pin_bytes / piece) * piece;
                    if (dir == 0)
                        cudaMemcpyAsync(dbuf[g], h, piece, cudaMemcpyHostToDevice, st[g]);
                    else
                        cudaMemcpyAsync(h, dbuf[g], piece, cudaMemcpyDeviceToHost, st[g]);
                }
                cudaStreamSynchronize(st[g]);
            });
            printf("probe dma_pinned %s gpus=%d %.1f ms (%.1f GB/s per GPU, %.1f GB/s in all)\n",
                   dir ? "d2h" : "h2d", G, s * 1e3, gbs(per, s), gbs(per * G, s));
        }
    /* both directions at once on every GPU */
    {
        const size_t per = (size_t)1 << 30, half = pin_bytes / 2;
        const double s = par(ngpu, [&](int g, int) {
            cudaSetDevice(g);
            for (size_t o = 0; o < per; o += piece) {
                cudaMemcpyAsync(dbuf[g], pin, piece, cudaMemcpyHostToDevice, st[g]);
                cudaMemcpyAsync(pin + half, (char *)dbuf[g] + ((size_t)128 << 20), piece,
                                cudaMemcpyDeviceToHost, st2[g]);
            }
            cudaStreamSynchronize(st[g]);
            cudaStreamSynchronize(st2[g]);
        });
        printf("probe dma_pinned bidir gpus=%d %.1f ms (%.1f GB/s each way per GPU)\n", ngpu,
               s * 1e3, gbs(per, s));
    }
    /* pageable sources and destinations: the driver's own staging */
    for (int G = 1; G <= ngpu; ++G) {
        const double s = dma(G, true, src, bytes, piece, dbuf, st);
        printf("probe dma_pageable h2d gpus=%d %.1f ms (%.1f GB/s in all)\n", G, s * 1e3,
               gbs(bytes, s));
        const double s2 = dma(G, false, dst, bytes, piece, dbuf, st);
        printf("probe dma_pageable d2h gpus=%d %.1f ms (%.1f GB/s in all)\n", G, s2 * 1e3,
               gbs(bytes, s2));
    }
    /* pageable, several host threads per GPU, each with its own stream */
    for (int T : {4, 8}) {
        std::vector<cudaStream_t> ms((size_t)ngpu * T);
        std::vector<void *> mb((size_t)ngpu * T);
        bool ok = true;
        for (int g = 0; g < ngpu; ++g) {
            cudaSetDevice(g);
            for (int t = 0; t < T; ++t) {
                ok = ok && cudaStreamCreateWithFlags(&ms[g * T + t], cudaStreamNonBlocking) ==
                               cudaSuccess;
                ok = ok && cudaMalloc(&mb[g * T + t], piece) == cudaSuccess;
            }
        }
        for (int dir = 0; ok && dir < 2; ++dir) {
            const double sp = par(ngpu * T, [&](int i, int I) {
                size_t a, b;
                range(bytes, i, I, &a, &b);
                cudaSetDevice(i / T);
                for (size_t o = a; o < b; o += piece) {
                    const size_t len = b - o < piece ? b - o : piece;
                    if (dir == 0)
                        cudaMemcpyAsync(mb[i], src + o, len, cudaMemcpyHostToDevice, ms[i]);
                    else
                        cudaMemcpyAsync(dst + o, mb[i], len, cudaMemcpyDeviceToHost, ms[i]);
                }
                cudaStreamSynchronize(ms[i]);
            });
            printf("probe dma_pageable %s gpus=%d threads_per_gpu=%d %.1f ms (%.1f GB/s in all)\n",
                   dir ? "d2h" : "h2d", ngpu, T, sp * 1e3, gbs(bytes, sp));
        }
        for (int g = 0; g < ngpu; ++g) {
            cudaSetDevice(g);
            for (int t = 0; t < T; ++t) {
                cudaStreamDestroy(ms[g * T + t]);
                cudaFree(mb[g * T + t]);
            }
        }
        (void)cudaGetLastError();
    }
    /* registering the (resident) source in T page-aligned pieces, T threads */
    const uintptr_t pg = 4096;
    char *lo = (char *)(((uintptr_t)src + pg - 1) / pg * pg);
    const size_t span = (size_t)(((uintptr_t)src + bytes) / pg * pg - (uintptr_t)lo);
    auto reg = [&](char *base, size_t len, int T, unsigned flags, int *fails) {
        *fails = 0;
        std::vector<int> bad(T, 0);
        const double s = par(T, [&](int t, int TT) {
            const size_t a = len / pg * (size_t)t / (size_t)TT * pg,
                         b = len / pg * (size_t)(t + 1) / (size_t)TT * pg;
            if (b > a && cudaHostRegister(base + a, b - a, flags) != cudaSuccess) {
                bad[t] = 1;
                (void)cudaGetLastError();
            }
        });
        for (int x : bad)
            *fails += x;
        return s;
    };
    auto unreg = [&](char *base, size_t len, int T) {
        return par(T, [&](int t, int TT) {
            const size_t a = len / pg * (size_t)t / (size_t)TT * pg,
                         b = len / pg * (size_t)(t + 1) / (size_t)TT * pg;
            if (b > a)
                (void)cudaHostUnregister(base + a);
            (void)cudaGetLastError();
        });
    };
    for (unsigned flags : {(unsigned)cudaHostRegisterDefault, (unsigned)cudaHostRegisterReadOnly})
        for (int T : {1, 2, 4, 8, 16}) {
            int fails = 0;
            const double t_reg = reg(lo, span, T, flags, &fails);
            const double s = fails ? 0.0 : dma(ngpu, true, lo, span, piece, dbuf, st);
            const double t_unreg = unreg(lo, span, T);
            printf("probe register%s threads=%d %.1f ms (%.1f GB/s)%s, h2d from it gpus=%d %.1f "
                   "ms (%.1f GB/s in all), unregister %.1f ms\n",
                   flags ? "_readonly" : "", T, t_reg * 1e3, gbs(span, t_reg),
                   fails ? " FAILED" : "", ngpu, s * 1e3, gbs(span, s), t_unreg * 1e3);
        }
    /* a copy across two registrations: still direct (and right)? */
    {
        int fails = 0;
        reg(lo, span, 2, cudaHostRegisterDefault, &fails);
        const size_t mid = span / pg / 2 * pg, len = (size_t)16 << 20;
        cudaSetDevice(0);
        double t_in = 0.0, t_across = 0.0;
        for (int r = 0; r < 5; ++r) {
            double t0 = now();
            cudaMemcpyAsync(dbuf[0], lo + mid - 2 * len, len, cudaMemcpyHostToDevice, st[0]);
            cudaStreamSynchronize(st[0]);
            t_in += now() - t0;
            t0 = now();
            cudaMemcpyAsync(dbuf[0], lo + mid - len / 2, len, cudaMemcpyHostToDevice, st[0]);
            cudaStreamSynchronize(st[0]);
            t_across += now() - t0;
        }
        std::vector<char> back(len);
        cudaMemcpy(back.data(), dbuf[0], len, cudaMemcpyDeviceToHost);
        const bool same = memcmp(back.data(), lo + mid - len / 2, len) == 0;
        unreg(lo, span, 2);
        printf("probe register 2 pieces%s: 16 MiB h2d inside one %.1f GB/s, across both %.1f "
               "GB/s, %s\n",
               fails ? " FAILED" : "", gbs(5 * len, t_in), gbs(5 * len, t_across),
               same ? "right" : "WRONG DATA");
    }
    /* registering resident memory in 2 MiB pages (prefaulted with huge pages) */
    for (int T : {1, 4, 8, 16}) {
        char *p = (char *)malloc(bytes);
        madv_huge(p, bytes);
        touch(p, bytes, 32);
        char *flo = (char *)(((uintptr_t)p + pg - 1) / pg * pg);
        const size_t fspan = (size_t)(((uintptr_t)p + bytes) / pg * pg - (uintptr_t)flo);
        int fails = 0;
        const double s = reg(flo, fspan, T, cudaHostRegisterDefault, &fails);
        const double u = unreg(flo, fspan, T);
        printf("probe register_resident_huge threads=%d %.1f ms (%.1f GB/s)%s, unregister %.1f ms\n",
               T, s * 1e3, gbs(fspan, s), fails ? " FAILED" : "", u * 1e3);
        free(p);
    }
    /* registering fresh memory (the output): the faults + the locking */
    for (int T : {1, 4, 8, 16}) {
        char *p = (char *)malloc(bytes);
        madv_huge(p, bytes);
        char *flo = (char *)(((uintptr_t)p + pg - 1) / pg * pg);
        const size_t fspan = (size_t)(((uintptr_t)p + bytes) / pg * pg - (uintptr_t)flo);
        int fails = 0;
        const double s = reg(flo, fspan, T, cudaHostRegisterDefault, &fails);
        const double d = fails ? 0.0 : dma(ngpu, false, flo, fspan, piece, dbuf, st);
        const double u = unreg(flo, fspan, T);
        printf("probe register_fresh threads=%d %.1f ms (%.1f GB/s)%s, d2h into it gpus=%d %.1f "
               "ms (%.1f GB/s in all), unregister %.1f ms\n",
               T, s * 1e3, gbs(fspan, s), fails ? " FAILED" : "", ngpu, d * 1e3, gbs(fspan, d),
               u * 1e3);
        free(p);
    }
    /* host copies while every GPU uploads from page-locked memory */
    {
        const size_t per = (size_t)1 << 30;
        double sd = 0.0;
        std::thread up([&] {
            sd = par(ngpu, [&](int g, int) {
                cudaSetDevice(g);
                for (size_t o = 0; o < per; o += piece)
                    cudaMemcpyAsync(dbuf[g], pin, piece, cudaMemcpyHostToDevice, st[g]);
                cudaStreamSynchronize(st[g]);
            });
        });
        const double s = pcopy(16, dst, src, bytes);
        up.join();
        printf("probe memcpy 16 threads during h2d: %.1f GB/s; h2d %.1f GB/s per GPU\n",
               gbs(bytes, s), gbs(per, sd));
    }
    for (int g = 0; g < ngpu; ++g) {
        cudaSetDevice(g);
        cudaFree(dbuf[g]);
        cudaStreamDestroy(st[g]);
        cudaStreamDestroy(st2[g]);
    }
}

void cat(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[256];
    if (f && fgets(line, sizeof line, f))
        printf("probe %s: %s", path, line);
    if (f)
        fclose(f);
}

} /* namespace */

int main(int argc, char **argv)
{
    const size_t bytes = (size_t)(argc > 1 ? atol(argv[1]) : 1300) << 20;
    const size_t pin_bytes = (size_t)256 << 20;
    cat("/sys/kernel/mm/transparent_hugepage/enabled");
    cat("/sys/kernel/mm/transparent_hugepage/defrag");
    printf("probe threads %u, %.2f GB\n", std::thread::hardware_concurrency(), bytes / 1e9);
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess)
        ngpu = 0;
    ngpu = ngpu > 8 ? 8 : ngpu;
    char *src = (char *)malloc(bytes), *dst = (char *)malloc(bytes), *pin = NULL;
    if (!src || !dst)
        return 1;
    touch(src, bytes, 16);
    touch(dst, bytes, 16);
    for (size_t i = 0; i < bytes; i += 64)
        src[i] = (char)i;
    if (ngpu && cudaHostAlloc((void **)&pin, pin_bytes, cudaHostAllocPortable) != cudaSuccess)
        pin = NULL;
    probe_faults(bytes, src);
    if (pin)
        probe_copies(bytes, src, dst, pin, pin_bytes);
    if (pin)
        probe_dma(bytes, src, dst, pin, pin_bytes, ngpu);
    else
        printf("probe no GPU\n");
    return 0;
}
