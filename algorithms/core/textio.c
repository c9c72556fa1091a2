/* Model files: atomic writes, strict line-by-line reads. */
#define _GNU_SOURCE
#include "textio.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

hyprof_status_t hyprof__write_atomic(hyprof_ctx_t *ctx, const char *op, const char *path,
                                     hyprof__writer_fn writer, const void *data)
{
    size_t n = strlen(path) + 64;
    char *tmp = malloc(n);
    if (!tmp)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    snprintf(tmp, n, "%s.tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        free(tmp);
        return hyprof__error(ctx, HYPROF_ERR_IO, op, "cannot write '%s': %s", path, strerror(e));
    }
    writer(f, data);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        free(tmp);
        return hyprof__error(ctx, HYPROF_ERR_IO, op, "cannot write '%s': %s", path, strerror(e));
    }
    free(tmp);
    return HYPROF_OK;
}

void hyprof__write_doubles(FILE *f, const char *key, const double *v, size_t n)
{
    fputs(key, f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %.17g", v[i]);
    fputc('\n', f);
}

const char *hyprof__quote(const char *s, char buf[64])
{
    size_t n = 0;
    for (; s && s[n] && n < 40; n++)
        buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    if (s && s[n])
        memcpy(buf + n, "...", 3), n += 3;
    buf[n] = '\0';
    return buf;
}

size_t hyprof__mul_sat(size_t a, size_t b)
{
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

hyprof_status_t hyprof__reader_open(hyprof_ctx_t *ctx, const char *op, const char *path,
                                    hyprof__reader_t *r)
{
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->op = op;
    r->path = path;
    r->size = -1;
    r->f = fopen(path, "r");
    if (!r->f)
        return hyprof__error(ctx, HYPROF_ERR_IO, op, "cannot read '%s': %s", path,
                             strerror(errno));
    struct stat sb;
    if (fstat(fileno(r->f), &sb) == 0 && S_ISREG(sb.st_mode))
        r->size = (long long)sb.st_size;
    return HYPROF_OK;
}

void hyprof__reader_close(hyprof__reader_t *r)
{
    if (r->f)
        fclose(r->f);
    free(r->line);
    r->f = NULL;
    r->line = NULL;
}

int hyprof__read_raw(hyprof__reader_t *r)
{
    ssize_t len = getline(&r->line, &r->cap, r->f);
    r->lineno++;
    if (len < 0)
        return 0;
    if (strlen(r->line) != (size_t)len) {
        hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op, "'%s' line %d holds a NUL byte",
                      r->path, r->lineno);
        return -1;
    }
    /* Every line hyprof writes ends with a newline: a last line without one
     * is where the file was cut, and its last number may have lost digits. */
    if (r->line[len - 1] != '\n') {
        hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                      "'%s' line %d: the file ends inside this line (no newline): it is cut "
                      "short", r->path, r->lineno);
        return -1;
    }
    r->line[--len] = '\0';
    if (len > 0 && r->line[len - 1] == '\r')
        r->line[--len] = '\0';
    return 1;
}

hyprof_status_t hyprof__reader_expect(hyprof__reader_t *r, const char *key, size_t count,
                                      size_t min_bytes, size_t bytes)
{
    long long pos = r->size >= 0 ? (long long)ftell(r->f) : -1;
    size_t left = pos >= 0 && pos <= r->size ? (size_t)(r->size - pos) : SIZE_MAX;
    if (r->size >= 0 && hyprof__mul_sat(count, min_bytes) > left)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                             "'%s' line %d: %s %zu cannot be: the %zu bytes left in the file "
                             "hold fewer (the file is cut short or the count is wrong)",
                             r->path, r->lineno, key, count, left);
    char why[256];
    if (hyprof_host_memory_check(bytes, key, why, sizeof why) != HYPROF_OK)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op, "'%s' line %d: %s %zu: %s",
                             r->path, r->lineno, key, count, why);
    return HYPROF_OK;
}

/* Reads the next line and returns the text after "key" (NULL on error). */
static const char *next_value(hyprof__reader_t *r, const char *key)
{
    int got = hyprof__read_raw(r);
    if (got < 0)
        return NULL;
    if (got == 0) {
        hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op, "'%s' ends early: line %d ('%s') is missing",
                      r->path, r->lineno, key);
        return NULL;
    }
    size_t k = strlen(key);
    if (strncmp(r->line, key, k) != 0 || (r->line[k] != ' ' && r->line[k] != '\0')) {
        char q[64];
        hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                      "'%s' line %d: expected '%s', found '%s'", r->path, r->lineno, key,
                      hyprof__quote(r->line, q));
        return NULL;
    }
    return r->line + k;
}

hyprof_status_t hyprof__read_line(hyprof__reader_t *r, const char *key, const char **value)
{
    const char *v = next_value(r, key);
    if (!v)
        return HYPROF_ERR_FORMAT;
    *value = *v == ' ' ? v + 1 : v;
    return HYPROF_OK;
}

hyprof_status_t hyprof__read_magic(hyprof__reader_t *r, const char *magic, int version)
{
    const char *v = next_value(r, magic);
    if (!v)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op, "'%s' is not a %s file", r->path,
                             magic);
    char *end, q[64];
    errno = 0;
    long ver = strtol(v, &end, 10);
    while (*end == ' ')
        end++;
    if (end == v || *end || errno || ver != version)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                             "'%s': unsupported %s version '%s' (this build reads %d)", r->path,
                             magic, hyprof__quote(v, q), version);
    return HYPROF_OK;
}

hyprof_status_t hyprof__read_size(hyprof__reader_t *r, const char *key, size_t min, size_t max,
                                  size_t *out)
{
    const char *v = next_value(r, key);
    if (!v)
        return HYPROF_ERR_FORMAT;
    while (*v == ' ')
        v++;
    char *end = (char *)v, q[64];
    errno = 0;
    /* strtoull takes "-1" as ULLONG_MAX: digits only. */
    unsigned long long n = *v >= '0' && *v <= '9' ? strtoull(v, &end, 10) : 0;
    while (*end == ' ')
        end++;
    if (end == v || *end || errno || n < min || n > max)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                             "'%s' line %d: bad %s value '%s' (expected %zu to %zu)", r->path,
                             r->lineno, key, hyprof__quote(v, q), min, max);
    *out = (size_t)n;
    return HYPROF_OK;
}

hyprof_status_t hyprof__read_doubles(hyprof__reader_t *r, const char *key, double *out, size_t n)
{
    const char *v = next_value(r, key);
    if (!v)
        return HYPROF_ERR_FORMAT;
    char *end, q[64];
    for (size_t i = 0; i < n; i++) {
        while (*v == ' ' || *v == '\t')
            v++;
        if (!*v)
            return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                                 "'%s' line %d: %s has %zu value(s), expected %zu", r->path,
                                 r->lineno, key, i, n);
        out[i] = strtod(v, &end);
        if (end == v || !isfinite(out[i]) || (*end && *end != ' ' && *end != '\t'))
            return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                                 "'%s' line %d: %s value %zu is not a finite number: '%s'",
                                 r->path, r->lineno, key, i + 1, hyprof__quote(v, q));
        v = end;
    }
    while (*v == ' ' || *v == '\t')
        v++;
    if (*v)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                             "'%s' line %d: %s has more than %zu values", r->path, r->lineno,
                             key, n);
    return HYPROF_OK;
}
