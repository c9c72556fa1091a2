/* Exact text for the HYPROF driver and the pixel functions: formatted
 * strings, path joins and file identities of any length. GDAL's CPLSPrintf,
 * CPLFormFilename and CPLGetPath write into fixed static buffers (about 8000
 * and 2048 characters) and cut or empty what does not fit, which silently
 * changes a parameter, a path or a cache key; nothing in gdal_driver/ uses
 * them. Every string returned here is CPLMalloc'ed (free with CPLFree). */
#ifndef HYPROF_DRIVER_TEXT_H
#define HYPROF_DRIVER_TEXT_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HYPROF_GDAL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define HYPROF_GDAL_PRINTF(f, a)
#endif

/* A growing string: append never cuts (CPLRealloc aborts when memory runs
 * out, as every CPL allocation does). */
typedef struct {
    char *s;
    size_t len, cap;
} hyprof_text_t;

void hyprof_text_append(hyprof_text_t *t, const char *s, size_t n);
void hyprof_text_printf(hyprof_text_t *t, const char *fmt, ...) HYPROF_GDAL_PRINTF(2, 3);
/* The text, owned by the caller from now on ("" when nothing was appended). */
char *hyprof_text_take(hyprof_text_t *t);

char *hyprof_strdup_printf(const char *fmt, ...) HYPROF_GDAL_PRINTF(1, 2);
char *hyprof_strndup(const char *s, size_t n);

/* `dir`/`name` ("name" alone when dir is empty); the folder part of `path`
 * ("" when it has none, "/" for names in the root). */
char *hyprof_path_join(const char *dir, const char *name);
char *hyprof_path_dir(const char *path);
/* True when `name` ends with `suffix`, ignoring case. */
int hyprof_ends_with_ci(const char *name, const char *suffix);

/* What kind of file `path` is, for messages: NULL for a regular non-empty
 * file; otherwise "is a directory", "is a FIFO (named pipe)", "is a
 * character device", "is empty (0 bytes)"... `exists` tells whether stat
 * found it. VSI names (/vsizip/...) are stat'ed through GDAL. */
const char *hyprof_file_problem(const char *path, int *exists);

/* The file's identity and state: device, inode, modification time (ns) and
 * size, as text; NULL when it cannot be stat'ed. Two equal stamps mean the
 * same unchanged file (as far as stat can tell). */
char *hyprof_file_stamp(const char *path);

#ifdef __cplusplus
}
#endif
#endif
