/* Small line-oriented text files for fitted models: atomic writing and strict
 * reading with messages that name the file, the line and the bad value. */
#ifndef HYPROF_TEXTIO_H
#define HYPROF_TEXTIO_H

#include "internal.h"

#include <stdio.h>

typedef void (*hyprof__writer_fn)(FILE *f, const void *data);

/* Writes through `writer` into a temporary file beside `path`, then renames
 * it over `path`; nothing is left behind on failure. */
hyprof_status_t hyprof__write_atomic(hyprof_ctx_t *ctx, const char *op, const char *path,
                                     hyprof__writer_fn writer, const void *data);
/* "key v1 v2 ...\n" with %.17g. */
void hyprof__write_doubles(FILE *f, const char *key, const double *v, size_t n);

typedef struct {
    hyprof_ctx_t *ctx;
    const char *op, *path;
    FILE *f;
    char *line;
    size_t cap;
    int lineno;
    long long size; /* bytes in the file; -1 when not a regular file */
} hyprof__reader_t;

/* Up to about 40 bytes of `s` for a one-line message: control bytes (a
 * newline, a CR, a tab) become '?', and "..." marks a cut. */
const char *hyprof__quote(const char *s, char buf[64]);

hyprof_status_t hyprof__reader_open(hyprof_ctx_t *ctx, const char *op, const char *path,
                                    hyprof__reader_t *r);
void hyprof__reader_close(hyprof__reader_t *r);
/* First line: "magic version". */
hyprof_status_t hyprof__read_magic(hyprof__reader_t *r, const char *magic, int version);
/* Reads the next line into r->line without its line end (LF or CRLF);
 * returns 0 at the end of the file, -1 (error recorded) for a line holding
 * a NUL byte or one the file ends inside (no newline: cut short). */
int hyprof__read_raw(hyprof__reader_t *r);
/* A declared count checked before anything is allocated for it: `count`
 * items of at least `min_bytes` bytes each must fit in what is left of the
 * file, and `bytes` (what the reader will allocate) in the memory
 * hyprof_host_memory_available() reports; HYPROF_ERR_FORMAT naming the line
 * and the key otherwise. */
hyprof_status_t hyprof__reader_expect(hyprof__reader_t *r, const char *key, size_t count,
                                      size_t min_bytes, size_t bytes);
/* a * b, or SIZE_MAX when it overflows. */
size_t hyprof__mul_sat(size_t a, size_t b);
/* Next line: "key rest": *value points to the rest (without the newline),
 * valid until the next read. */
hyprof_status_t hyprof__read_line(hyprof__reader_t *r, const char *key, const char **value);
/* Next line: "key N" with min <= N <= max, N written as decimal digits. */
hyprof_status_t hyprof__read_size(hyprof__reader_t *r, const char *key, size_t min,
                                  size_t max, size_t *out);
/* Next line: "key" then exactly n finite numbers. */
hyprof_status_t hyprof__read_doubles(hyprof__reader_t *r, const char *key, double *out,
                                     size_t n);

#endif
