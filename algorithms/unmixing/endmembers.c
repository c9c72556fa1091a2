/* Endmember sets: allocation and the CSV/JSON files beside an unmix output.
 *
 *   band,wavelength,E1,...,Ep          (CSV: one row per band, %.17g)
 *   {"format": "hyprof-endmembers", "version": 1, "bands": B, "count": p,
 *    "wavelength_units": ..., "wavelengths": [...] | null,
 *    "endmembers": [{"name": "E1", "x": .., "y": .., "spectrum": [...]}, ...]}
 *
 * The CSV is the form that loads back (--model, a GDAL pixel function); the
 * JSON says the same with the pixel positions, for other programs. */
#include "unmixing_impl.h"
#include "../core/textio.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "endmembers"

hyprof_status_t hyprof_endmembers_new(size_t bands, size_t count, hyprof_endmembers_t **em)
{
    hyprof_endmembers_t *e = calloc(1, sizeof *e);
    *em = NULL;
    if (!e)
        return HYPROF_ERR_NOMEM;
    e->bands = bands;
    e->count = count;
    e->spectra = calloc(bands * count > 0 ? bands * count : 1, sizeof *e->spectra);
    e->pixel_x = malloc((count ? count : 1) * sizeof *e->pixel_x);
    e->pixel_y = malloc((count ? count : 1) * sizeof *e->pixel_y);
    if (!e->spectra || !e->pixel_x || !e->pixel_y) {
        hyprof_endmembers_free(&e);
        return HYPROF_ERR_NOMEM;
    }
    for (size_t k = 0; k < count; k++)
        e->pixel_x[k] = e->pixel_y[k] = -1;
    *em = e;
    return HYPROF_OK;
}

void hyprof_endmembers_free(hyprof_endmembers_t **em)
{
    if (!em || !*em)
        return;
    free((*em)->spectra);
    free((*em)->wavelengths);
    free((*em)->wavelength_units);
    free((*em)->pixel_x);
    free((*em)->pixel_y);
    free(*em);
    *em = NULL;
}

static void write_csv(FILE *f, const void *data)
{
    const hyprof_endmembers_t *e = data;
    fprintf(f, "band,wavelength");
    for (size_t k = 0; k < e->count; k++)
        fprintf(f, ",E%zu", k + 1);
    fputc('\n', f);
    for (size_t b = 0; b < e->bands; b++) {
        fprintf(f, "%zu,", b + 1);
        if (e->wavelengths && isfinite(e->wavelengths[b]))
            fprintf(f, "%.17g", e->wavelengths[b]);
        for (size_t k = 0; k < e->count; k++)
            fprintf(f, ",%.17g", e->spectra[k * e->bands + b]);
        fputc('\n', f);
    }
}

static void json_number(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

static void json_text(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
    fputc('"', f);
}

static void write_json(FILE *f, const void *data)
{
    const hyprof_endmembers_t *e = data;
    fprintf(f, "{\"format\": \"hyprof-endmembers\", \"version\": 1, \"bands\": %zu, "
               "\"count\": %zu,\n \"wavelength_units\": ", e->bands, e->count);
    if (e->wavelength_units)
        json_text(f, e->wavelength_units);
    else
        fputs("null", f);
    fputs(",\n \"wavelengths\": ", f);
    if (e->wavelengths) {
        fputc('[', f);
        for (size_t b = 0; b < e->bands; b++) {
            fputs(b ? ", " : "", f);
            json_number(f, e->wavelengths[b]);
        }
        fputc(']', f);
    } else {
        fputs("null", f);
    }
    fputs(",\n \"endmembers\": [", f);
    for (size_t k = 0; k < e->count; k++) {
        fprintf(f, "%s\n  {\"name\": \"E%zu\", \"x\": %ld, \"y\": %ld, \"spectrum\": [",
                k ? "," : "", k + 1, e->pixel_x[k], e->pixel_y[k]);
        for (size_t b = 0; b < e->bands; b++) {
            fputs(b ? ", " : "", f);
            json_number(f, e->spectra[k * e->bands + b]);
        }
        fputs("]}", f);
    }
    fputs("\n ]}\n", f);
}

hyprof_status_t hyprof_endmembers_save_csv(hyprof_ctx_t *ctx, const hyprof_endmembers_t *em,
                                           const char *path)
{
    return hyprof__write_atomic(ctx, OP, path, write_csv, em);
}

hyprof_status_t hyprof_endmembers_save_json(hyprof_ctx_t *ctx, const hyprof_endmembers_t *em,
                                            const char *path)
{
    return hyprof__write_atomic(ctx, OP, path, write_json, em);
}

/* ---- loading the CSV ---------------------------------------------------------- */

static size_t count_fields(const char *line)
{
    size_t n = 1;
    for (; *line; line++)
        n += *line == ',';
    return n;
}

/* Parses the next comma-separated number; an empty field gives NaN when
 * allow_empty. Returns 0 on a malformed field. */
static int next_number(char **s, double *v, int allow_empty)
{
    char *p = *s, *end;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == ',' || *p == '\0' || *p == '\n' || *p == '\r') {
        if (!allow_empty)
            return 0;
        *v = NAN;
        end = p;
    } else {
        errno = 0;
        *v = strtod(p, &end);
        if (end == p || errno == ERANGE)
            return 0;
    }
    while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
        end++;
    if (*end == ',')
        end++;
    else if (*end != '\0')
        return 0;
    *s = end;
    return 1;
}

static hyprof_status_t read_rows(hyprof_ctx_t *ctx, const char *path, FILE *f, size_t p,
                                 double **spectra, double **wl, size_t *bands)
{
    char *line = NULL;
    size_t cap = 0, n = 0, alloc = 0;
    int lineno = 1, any_wl = 0;
    hyprof_status_t st = HYPROF_OK;
    *spectra = NULL;
    *wl = NULL;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (strlen(line) != (size_t)len) {
            st = hyprof__error(ctx, HYPROF_ERR_FORMAT, OP, "'%s' line %d holds a NUL byte", path,
                               lineno);
            break;
        }
        if (line[0] == '\n' || line[0] == '\r')
            continue;
        if (n == alloc) {
            alloc = alloc ? 2 * alloc : 256;
            double *s2 = realloc(*spectra, alloc * p * sizeof *s2), *w2;
            if (s2)
                *spectra = s2;
            w2 = s2 ? realloc(*wl, alloc * sizeof *w2) : NULL;
            if (!s2 || !w2) {
                st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory reading '%s'", path);
                break;
            }
            *wl = w2;
        }
        char *s = line;
        double band, v;
        int ok = next_number(&s, &band, 0) && next_number(&s, &(*wl)[n], 1);
        for (size_t k = 0; ok && k < p; k++) {
            ok = next_number(&s, &v, 0) && isfinite(v);
            (*spectra)[n * p + k] = v;
        }
        if (!ok || *s != '\0' || band != (double)(n + 1)) {
            st = hyprof__error(ctx, HYPROF_ERR_FORMAT, OP,
                               "'%s' line %d: expected band %zu, a wavelength (or nothing) "
                               "and %zu finite numbers", path, lineno, n + 1, p);
            break;
        }
        any_wl |= isfinite((*wl)[n]);
        n++;
    }
    free(line);
    if (st == HYPROF_OK && n == 0)
        st = hyprof__error(ctx, HYPROF_ERR_FORMAT, OP, "'%s' has no band rows", path);
    if (st == HYPROF_OK && !any_wl) {
        free(*wl);
        *wl = NULL;
    }
    *bands = n;
    return st;
}

hyprof_status_t hyprof_endmembers_load_csv(hyprof_ctx_t *ctx, const char *path,
                                           hyprof_endmembers_t **em)
{
    *em = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return hyprof__error(ctx, HYPROF_ERR_IO, OP, "cannot open '%s': %s", path,
                             strerror(errno));
    char *line = NULL;
    size_t cap = 0, bands = 0;
    double *rows = NULL, *wl = NULL;
    hyprof_status_t st = HYPROF_OK;
    ssize_t len = getline(&line, &cap, f);
    if (len <= 0 || strlen(line) != (size_t)len || strncmp(line, "band,wavelength", 15) != 0)
        st = hyprof__error(ctx, HYPROF_ERR_FORMAT, OP,
                           "'%s' line 1: expected the header 'band,wavelength,E1,...'", path);
    size_t p = st == HYPROF_OK ? count_fields(line) - 2 : 0;
    if (st == HYPROF_OK && (p < 1 || p > HYPROF_MAX_ENDMEMBERS))
        st = hyprof__error(ctx, HYPROF_ERR_FORMAT, OP, "'%s': %zu endmember columns (1..%d)",
                           path, p, HYPROF_MAX_ENDMEMBERS);
    if (st == HYPROF_OK)
        st = read_rows(ctx, path, f, p, &rows, &wl, &bands);
    free(line);
    fclose(f);
    hyprof_endmembers_t *e = NULL;
    if (st == HYPROF_OK && hyprof_endmembers_new(bands, p, &e) != HYPROF_OK)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    if (st == HYPROF_OK) {
        for (size_t b = 0; b < bands; b++)
            for (size_t k = 0; k < p; k++)
                e->spectra[k * bands + b] = rows[b * p + k];
        e->wavelengths = wl;
        wl = NULL;
    }
    free(rows);
    free(wl);
    *em = e;
    return st;
}
