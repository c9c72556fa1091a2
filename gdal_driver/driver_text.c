/* Exact strings, paths and file stamps (see driver_text.h): every length is
 * measured, nothing is written into a fixed buffer. */
/* VSIStatBufL is struct stat64, with st_mtim */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "driver_text.h"

#include <cpl_conv.h>
#include <cpl_string.h>
#include <cpl_vsi.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

void hyprof_text_append(hyprof_text_t *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->len + n + 1)
            cap *= 2;
        t->s = CPLRealloc(t->s, cap);
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void append_v(hyprof_text_t *t, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n > 0) {
        if (t->len + (size_t)n + 1 > t->cap) {
            t->cap = t->len + (size_t)n + 1;
            t->s = CPLRealloc(t->s, t->cap);
        }
        vsnprintf(t->s + t->len, (size_t)n + 1, fmt, again);
        t->len += (size_t)n;
    }
    va_end(again);
}

void hyprof_text_printf(hyprof_text_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    append_v(t, fmt, ap);
    va_end(ap);
}

char *hyprof_text_take(hyprof_text_t *t)
{
    char *s = t->s ? t->s : CPLStrdup("");
    t->s = NULL;
    t->len = t->cap = 0;
    return s;
}

char *hyprof_strdup_printf(const char *fmt, ...)
{
    hyprof_text_t t = {0};
    va_list ap;
    va_start(ap, fmt);
    append_v(&t, fmt, ap);
    va_end(ap);
    return hyprof_text_take(&t);
}

char *hyprof_strndup(const char *s, size_t n)
{
    hyprof_text_t t = {0};
    hyprof_text_append(&t, s, n);
    return hyprof_text_take(&t);
}

char *hyprof_path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir);
    if (n == 0)
        return CPLStrdup(name);
    return hyprof_strdup_printf("%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name);
}

char *hyprof_path_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return CPLStrdup("");
    return hyprof_strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

int hyprof_ends_with_ci(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && EQUAL(name + n - k, suffix);
}

const char *hyprof_file_problem(const char *path, int *exists)
{
    VSIStatBufL sb;
    *exists = VSIStatL(path, &sb) == 0;
    if (!*exists)
        return "does not exist";
    if (VSI_ISDIR(sb.st_mode))
        return "is a directory";
    if (S_ISFIFO(sb.st_mode))
        return "is a FIFO (named pipe), not a regular file";
    if (S_ISCHR(sb.st_mode))
        return "is a character device, not a regular file";
    if (S_ISBLK(sb.st_mode))
        return "is a block device, not a regular file";
    if (S_ISSOCK(sb.st_mode))
        return "is a socket, not a regular file";
    if (!VSI_ISREG(sb.st_mode))
        return "is not a regular file";
    if (sb.st_size == 0)
        return "is empty (0 bytes)";
    return NULL;
}

char *hyprof_file_stamp(const char *path)
{
    VSIStatBufL sb;
    if (VSIStatL(path, &sb) != 0)
        return NULL;
    return hyprof_strdup_printf("dev %llu ino %llu mtime %lld.%09ld size %lld",
                                (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino,
                                (long long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec,
                                (long long)sb.st_size);
}
