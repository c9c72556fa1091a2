/* How much host memory a process may still allocate: the least of the
 * kernel's estimate of available memory (MemAvailable), the cgroup's limit
 * less its usage (v2 and v1), and the address-space and data-segment limits
 * (RLIMIT_AS, RLIMIT_DATA) less what the process already maps. Operations and
 * readers compare what they will allocate against it before allocating, so a
 * file that declares an absurd size fails with a message instead of being
 * killed by the kernel or aborting inside an allocator. */
#include "internal.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static size_t read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return SIZE_MAX;
    unsigned long long v = 0;
    char word[32] = "";
    int n = fscanf(f, "%31s", word);
    fclose(f);
    if (n != 1 || strcmp(word, "max") == 0 || sscanf(word, "%llu", &v) != 1)
        return SIZE_MAX;
    return (size_t)v;
}

/* kB field of /proc/<file> ("MemAvailable:", "VmSize:"), in bytes. */
static size_t proc_field(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return SIZE_MAX;
    char line[256];
    size_t klen = strlen(key), v = SIZE_MAX;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (strncmp(line, key, klen) == 0 && sscanf(line + klen, "%llu", &kb) == 1) {
            v = (size_t)kb * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

static size_t headroom(size_t limit, size_t used)
{
    if (limit == SIZE_MAX)
        return SIZE_MAX;
    return used != SIZE_MAX && used < limit ? limit - used : (used == SIZE_MAX ? limit : 0);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* The address space the threads a run starts take before they allocate
 * anything: a stack (8 MiB) and a malloc arena (64 MiB reserved) each, for
 * an OpenMP team and one reader a processor. An address-space limit
 * (RLIMIT_AS) counts these reservations; GDAL aborts when an allocation
 * fails inside it, so they are set aside before the limit is compared. */
static size_t thread_reservations(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return (size_t)(cpus > 0 ? cpus : 1) * 2 * ((size_t)72 << 20);
}

size_t hyprof_host_memory_available(void)
{
    size_t avail = proc_field("/proc/meminfo", "MemAvailable:");
    avail = min_size(avail, headroom(read_number("/sys/fs/cgroup/memory.max"),
                                     read_number("/sys/fs/cgroup/memory.current")));
    avail = min_size(avail,
                     headroom(read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
                              read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes")));
    size_t vm = proc_field("/proc/self/status", "VmSize:");
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        avail = min_size(avail, headroom((size_t)rl.rlim_cur,
                                         vm == SIZE_MAX ? vm : vm + thread_reservations()));
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        avail = min_size(avail, headroom((size_t)rl.rlim_cur,
                                         proc_field("/proc/self/status", "VmData:")));
    return avail;
}

hyprof_status_t hyprof_host_memory_check(size_t bytes, const char *what, char *err, size_t len)
{
    size_t avail = hyprof_host_memory_available();
    if (bytes <= avail)
        return HYPROF_OK;
    if (err && len)
        snprintf(err, len, "%s needs %.1f MiB of memory, but only %.1f MiB is available",
                 what ? what : "the operation", bytes / 1048576.0, avail / 1048576.0);
    return HYPROF_ERR_NOMEM;
}
