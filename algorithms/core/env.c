/* The library's environment switches, read here and nowhere else:
 *
 *   HYPROF_BACKEND        auto|cpu|cuda: replaces the context's "auto"
 *                         (context.c; an unknown value is reported by the CLI).
 *   HYPROF_LOG            debug|info|warning: the lowest level passed to the log
 *                         callback. "debug" turns on every operation's stage
 *                         traces (timings of uploads, kernels and downloads).
 *   HYPROF_DEVICE_MEMORY  a byte count with an optional K, M or G suffix: the
 *                         most device memory an operation plans with, so tests
 *                         reach the chunked and low-memory paths on any GPU.
 *
 * Tuning choices are made from what can be queried (device, data, free
 * memory); choices that change results are registry parameters. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

int hyprof__env_backend(hyprof_backend_t *backend)
{
    return hyprof_backend_parse(getenv("HYPROF_BACKEND"), backend) == HYPROF_OK;
}

hyprof_log_level_t hyprof__log_threshold(void)
{
    const char *s = getenv("HYPROF_LOG");
    if (s && strcasecmp(s, "debug") == 0)
        return HYPROF_LOG_DEBUG;
    if (s && strcasecmp(s, "info") == 0)
        return HYPROF_LOG_INFO;
    return HYPROF_LOG_WARNING;
}

int hyprof__log_debug(void) { return hyprof__log_threshold() == HYPROF_LOG_DEBUG; }

size_t hyprof__device_memory_cap(void)
{
    const char *s = getenv("HYPROF_DEVICE_MEMORY");
    if (!s || !*s)
        return 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: break;
    }
    if (v > (~0ULL >> shift))
        return 0;
    return (size_t)(v << shift);
}
