/* The fuzz targets of file readers: the input's bytes as a file, an
 * anonymous memfd named by its /proc/self/fd path (no disk, no clean-up). */
#ifndef HYPROF_FUZZ_MEMFILE_H
#define HYPROF_FUZZ_MEMFILE_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* The memfd holding data (path into `path`), or -1 when it cannot be made. */
static inline int fuzz_memfile(const char *name, const uint8_t *data, size_t size, char *path,
                               size_t len)
{
    int fd = memfd_create(name, 0);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
