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
} hyprof__reader_t;

hyprof_status_t hyprof__reader_open(hyprof_ctx_t *ctx, const char *op, const char *path,
                                    hyprof__reader_t *r);
void hyprof__reader_close(hyprof__reader_t *r);
/* First line: "magic version". */
hyprof_status_t hyprof__read_magic(hyprof__reader_t *r, const char *magic, int version);
/* Next line: "key rest": *value points to the rest (without the newline),
 * valid until the next read. */
hyprof_status_t hyprof__read_line(hyprof__reader_t *r, const char *key, const char **value);
/* Next line: "key N" with min <= N <= max. */
hyprof_status_t hyprof__read_size(hyprof__reader_t *r, const char *key, size_t min,
                                  size_t max, size_t *out);
/* Next line: "key" then exactly n finite numbers. */
hyprof_status_t hyprof__read_doubles(hyprof__reader_t *r, const char *key, double *out,
                                     size_t n);

#endif
