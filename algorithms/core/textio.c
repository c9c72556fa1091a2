/* Model files: atomic writes, strict line-by-line reads. */
#define _GNU_SOURCE
#include "textio.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
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

hyprof_status_t hyprof__reader_open(hyprof_ctx_t *ctx, const char *op, const char *path,
                                    hyprof__reader_t *r)
{
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->op = op;
    r->path = path;
    r->f = fopen(path, "r");
    if (!r->f)
        return hyprof__error(ctx, HYPROF_ERR_IO, op, "cannot read '%s': %s", path,
                             strerror(errno));
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

/* Reads the next line and returns the text after "key " (NULL on error). */
static const char *next_value(hyprof__reader_t *r, const char *key)
{
    ssize_t len = getline(&r->line, &r->cap, r->f);
    r->lineno++;
    if (len < 0) {
        hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op, "'%s' ends early: line %d ('%s') is missing",
                      r->path, r->lineno, key);
        return NULL;
    }
    size_t k = strlen(key);
    if (strncmp(r->line, key, k) != 0 || (r->line[k] != ' ' && r->line[k] != '\n')) {
        r->line[strcspn(r->line, "\n")] = '\0';
        hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                      "'%s' line %d: expected '%s', found '%.40s'", r->path, r->lineno, key,
                      r->line);
        return NULL;
    }
    return r->line + k;
}

hyprof_status_t hyprof__read_line(hyprof__reader_t *r, const char *key, const char **value)
{
    const char *v = next_value(r, key);
    if (!v)
        return HYPROF_ERR_FORMAT;
    r->line[strcspn(r->line, "\r\n")] = '\0';
    *value = *v == ' ' ? v + 1 : v;
    return HYPROF_OK;
}

hyprof_status_t hyprof__read_magic(hyprof__reader_t *r, const char *magic, int version)
{
    const char *v = next_value(r, magic);
    if (!v)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op, "'%s' is not a %s file", r->path,
                             magic);
    char *end;
    long ver = strtol(v, &end, 10);
    if (end == v || ver != version)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                             "'%s': unsupported %s version '%.20s' (this build reads %d)",
                             r->path, magic, v, version);
    return HYPROF_OK;
}

hyprof_status_t hyprof__read_size(hyprof__reader_t *r, const char *key, size_t min, size_t max,
                                  size_t *out)
{
    const char *v = next_value(r, key);
    if (!v)
        return HYPROF_ERR_FORMAT;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    while (*end == ' ' || *end == '\n' || *end == '\r')
        end++;
    if (end == v || *end || errno || n < min || n > max)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                             "'%s' line %d: bad %s value '%.20s' (expected %zu to %zu)",
                             r->path, r->lineno, key, v, min, max);
    *out = (size_t)n;
    return HYPROF_OK;
}

hyprof_status_t hyprof__read_doubles(hyprof__reader_t *r, const char *key, double *out, size_t n)
{
    const char *v = next_value(r, key);
    if (!v)
        return HYPROF_ERR_FORMAT;
    char *end;
    for (size_t i = 0; i < n; i++) {
        out[i] = strtod(v, &end);
        if (end == v || !isfinite(out[i]))
            return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                                 "'%s' line %d: %s has %zu value(s), expected %zu", r->path,
                                 r->lineno, key, i, n);
        v = end;
    }
    while (*v == ' ' || *v == '\n' || *v == '\r')
        v++;
    if (*v)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, r->op,
                             "'%s' line %d: %s has more than %zu values", r->path, r->lineno,
                             key, n);
    return HYPROF_OK;
}
