/* kernels/core/output_prep.cuh: the output's preparation touches every page
 * of the output, and none outside the 2 MiB chunks holding it, whatever its
 * alignment, size, thread count, range order and touch mode (page writes or
 * MADV_POPULATE_WRITE); ensure() makes a piece resident before the helper
 * thread is done; a caller's page-locked output starts no work; with a
 * device, `pin` page-locks the output until unlock(). Residency is read
 * back with mincore(2), an oracle independent of the module. */
#include "core/output_prep.cuh"

#include <cstdio>
#include <sys/mman.h>

using namespace hyprof_cuda;

namespace {

const size_t kPage = 4096, kHuge = (size_t)2 << 20;

bool resident(const char *page)
{
    unsigned char v = 0;
    return mincore((void *)page, 1, &v) == 0 && (v & 1);
}

/* page-locked, as the runtime sees it */
bool locked(const void *p)
{
    cudaPointerAttributes a;
    const bool yes = cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost;
    (void)cudaGetLastError();
    return yes;
}

/* pages holding bytes of [lo, hi) not resident (want) or resident (!want) */
size_t count(const char *lo, const char *hi, bool want)
{
    size_t n = 0;
    for (uintptr_t q = (uintptr_t)lo & ~(uintptr_t)(kPage - 1); q < (uintptr_t)hi; q += kPage)
        n += resident((const char *)q) != want;
    return n;
}

int check(bool populate, int threads, size_t off, size_t bytes, bool pin)
{
    const size_t total = off + bytes + 3 * kHuge;
    char *base = (char *)mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    if (base == MAP_FAILED)
        return 1;
    char *p = (char *)(((uintptr_t)base + kHuge - 1) & ~(uintptr_t)(kHuge - 1)) + off;
    int bad = 0;
    {
        OutputPrep prep;
        OutputPrepPlan plan;
        plan.p = p;
        plan.bytes = bytes;
        plan.populate = populate;
        plan.threads = threads;
        plan.ranges.push_back(std::make_pair(bytes / 2, bytes));
        plan.ranges.push_back(std::make_pair((size_t)0, bytes / 2));
        plan.pin = pin;
        prep.start(plan);
        const size_t piece = bytes / 3 < 1 ? 1 : bytes / 3 < kHuge ? bytes / 3 : kHuge;
        prep.ensure(p + bytes / 3, piece);
        bad |= count(p + bytes / 3, p + bytes / 3 + piece, true) != 0;
        prep.wait();
        prep.join();
        bad |= !prep.ready() || prep.caller_pinned() || !prep.staged();
        if (pin)
            bad |= !locked(p);
        prep.unlock();
        if (pin)
            bad |= locked(p);
    }
    const char *lo = (const char *)((uintptr_t)p & ~(uintptr_t)(kHuge - 1));
    const char *hi = (const char *)(((uintptr_t)(p + bytes) + kHuge - 1) & ~(uintptr_t)(kHuge - 1));
    const size_t missing = count(p, p + bytes, true);
    const size_t outside = count(base, lo, false) + count(hi, base + total, false);
    if (missing || outside || bad) {
        std::printf("FAIL populate=%d threads=%d off=%zu bytes=%zu pin=%d: %zu pages missing, "
                    "%zu touched outside\n", populate, threads, off, bytes, pin, missing, outside);
        bad = 1;
    }
    munmap(base, total);
    return bad;
}

} /* namespace */

int main()
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess)
        devices = 0;
    (void)cudaGetLastError();
    int bad = 0, runs = 0;
    for (int populate = 0; populate < 2; populate++)
        for (int threads : {1, 4})
            for (size_t off : {(size_t)0, 3 * kPage + 17, 3 * (kHuge / 2) + 5})
                for (size_t bytes : {(size_t)1, kPage - 1, 7 * (kHuge / 2) + 123, 32 * kHuge})
                    for (int pin = 0; pin < (devices ? 2 : 1); pin++, runs++)
                        bad |= check(populate, threads, off, bytes, pin);
    OutputPrep caller;
    OutputPrepPlan plan;
    plan.p = &runs;
    plan.bytes = sizeof runs;
    plan.caller_pinned = true;
    caller.start(plan);
    bad |= !caller.ready() || !caller.caller_pinned() || caller.staged();
    std::printf("%s: %d preparations (%s)\n", bad ? "FAIL" : "ok", runs,
                devices ? "with page-locking" : "no device: page-locking not checked");
    return bad;
}
