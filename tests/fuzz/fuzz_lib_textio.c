/* Fuzz target: the line reader under every model file (algorithms/core/
 * textio.c), on a small model format of its own that uses each of its calls:
 *
 *   fuzz 1            hyprof__read_magic
 *   n N               hyprof__read_size, 0 <= N <= 64
 *   values v1 .. vN   hyprof__read_doubles
 *   name TEXT         hyprof__read_line
 *
 * The input is read from memory (fmemopen) as if it were the file. Besides
 * ASan and UBSan, it checks what the reader promises: a failure comes with a
 * one-line message; values read are finite; and values written back with
 * hyprof__write_doubles read back bit for bit. Seeds: corpus/lib_textio/. */
#define _GNU_SOURCE
#include "core/textio.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUES 64

static hyprof_ctx_t *ctx;

/* A failure: a message on one line. */
static void check_error(hyprof_status_t st)
{
    if (st == HYPROF_OK)
        return;
    const char *msg = hyprof_ctx_last_error(ctx);
    if (!msg || !*msg || strchr(msg, '\n') || strchr(msg, '\r')) {
        fprintf(stderr, "status %d with message [%s]\n", (int)st, msg ? msg : "(null)");
        abort();
    }
}

static void open_memory(hyprof__reader_t *r, void *buf, size_t len)
{
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->op = "fuzz";
    r->path = "fuzz.model";
    r->f = fmemopen(buf, len, "r");
}

/* Writes v with hyprof__write_doubles and reads it back: every value
 * identical, bit for bit. */
static void check_round_trip(const double *v, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    hyprof__write_doubles(f, "values", v, n);
    fclose(f);
    hyprof__reader_t r;
    open_memory(&r, text, len);
    double back[MAX_VALUES];
    hyprof_status_t st = r.f ? hyprof__read_doubles(&r, "values", back, n) : HYPROF_OK;
    hyprof__reader_close(&r);
    if (st != HYPROF_OK || (n && memcmp(v, back, n * sizeof *v) != 0)) {
        fprintf(stderr, "round trip of %zu values failed: %s\n[%s]\n", n,
                hyprof_ctx_last_error(ctx), text);
        abort();
    }
    free(text);
}

static void parse(hyprof__reader_t *r)
{
    size_t n = 0;
    double v[MAX_VALUES];
    const char *name;
    hyprof_status_t st = hyprof__read_magic(r, "fuzz", 1);
    check_error(st);
    if (st == HYPROF_OK) {
        st = hyprof__read_size(r, "n", 0, MAX_VALUES, &n);
        check_error(st);
    }
    if (st == HYPROF_OK) {
        st = hyprof__read_doubles(r, "values", v, n);
        check_error(st);
    }
    if (st == HYPROF_OK) {
        for (size_t i = 0; i < n; i++)
            if (!isfinite(v[i]))
                abort();
        check_round_trip(v, n);
        st = hyprof__read_line(r, "name", &name);
        check_error(st);
        /* A line's value never holds a line end; one CR before the LF is
         * the CRLF end and is dropped (tests/test_parsers.c), any other CR
         * is data (a class name may hold any byte but LF). */
        if (st == HYPROF_OK && strchr(name, '\n'))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx)
        ctx = hyprof_ctx_new();
    if (size == 0)   /* fmemopen needs a buffer of at least one byte */
        return 0;
    void *copy = malloc(size);
    memcpy(copy, data, size);
    hyprof__reader_t r;
    open_memory(&r, copy, size);
    if (r.f)
        parse(&r);
    hyprof__reader_close(&r);
    free(copy);
    return 0;
}
