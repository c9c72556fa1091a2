/* Accuracy reports: text and JSON on stdout; the HTML page comes from the
 * library (hyprof_assess_html) and is written here. */
#include "report.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *class_name(const hyprof_class_legend_t *l, int v, char *buf, size_t n)
{
    if ((size_t)v < l->n && l->names && l->names[v] && *l->names[v])
        return l->names[v];
    snprintf(buf, n, "class %d", v);
    return buf;
}

static int has_other(const hyprof_assessment_t *a)
{
    size_t K = a->nclasses;
    for (size_t r = 0; r < K; r++)
        if (a->confusion[r * (K + 1) + K])
            return 1;
    return 0;
}

/* The class-map value paired with reference value v by name (0: none). */
static int map_value(const hyprof_class_match_t *m, int v)
{
    for (size_t i = 0; i < m->npairs; i++)
        if (m->pairs[i].ref == v)
            return m->pairs[i].map;
    return 0;
}

static uint64_t row_total(const hyprof_assessment_t *a, size_t k)
{
    uint64_t row = 0;
    for (size_t c = 0; c <= a->nclasses; c++)
        row += a->confusion[k * (a->nclasses + 1) + c];
    return row;
}

void cli_assess_text(FILE *f, const cli_report_t *r)
{
    const hyprof_assessment_t *a = r->a;
    const hyprof_class_match_t *m = r->match;
    size_t K = a->nclasses;
    char buf[48];
    fprintf(f, "pixels  %llu\nOA      %.4f\nAA      %.4f\nkappa   %.4f\n\n%s\n",
            (unsigned long long)a->total, a->oa, a->aa, a->kappa, m->how);
    for (size_t i = 0; i < m->nnotes; i++)
        fprintf(f, "warning: %s\n", m->notes[i]);
    fprintf(f, "\n%6s  %-30s %s%9s %9s %9s\n", "class", "name", m->by_names ? "  map " : "",
            "pixels", "producer", "user");
    for (size_t k = 0; k < K; k++) {
        fprintf(f, "%6d  %-30.30s ", a->values[k],
                class_name(r->legend, a->values[k], buf, sizeof buf));
        int mv = m->by_names ? map_value(m, a->values[k]) : 0;
        if (m->by_names && mv)
            fprintf(f, "%5d ", mv);
        else if (m->by_names)
            fprintf(f, "%5s ", "-");
        fprintf(f, "%9llu %9.4f %9.4f\n", (unsigned long long)row_total(a, k), a->producer[k],
                a->user[k]);
    }
    fputs("\nconfusion matrix (rows: reference, columns: class map, both in the order of the "
          "classes above", f);
    fputs(has_other(a) ? "; last column: other or no class)\n" : ")\n", f);
    size_t cols = K + (size_t)has_other(a);
    for (size_t i = 0; i < K; i++) {
        for (size_t c = 0; c < cols; c++)
            fprintf(f, "%s%llu", c ? " " : "", (unsigned long long)a->confusion[i * (K + 1) + c]);
        fputc('\n', f);
    }
}

void cli_json_number(FILE *f, double v)
{
    if (isnan(v))
        fputs("null", f);
    else
        fprintf(f, "%.17g", v);
}

static void json_match(FILE *f, const hyprof_class_match_t *m)
{
    fprintf(f, ",\"match\":{\"by\":\"%s\",\"how\":", m->by_names ? "names" : "numbers");
    cli_json_string(f, m->how);
    fputs(",\"notes\":[", f);
    for (size_t i = 0; i < m->nnotes; i++) {
        fputs(i ? "," : "", f);
        cli_json_string(f, m->notes[i]);
    }
    fputs("],\"pairs\":[", f);
    for (size_t i = 0; i < m->npairs; i++) {
        const hyprof_class_pair_t *p = &m->pairs[i];
        fprintf(f, "%s{\"classmap_value\":%d,\"classmap_name\":", i ? "," : "", p->map);
        cli_json_string(f, p->map_name);
        fprintf(f, ",\"reference_value\":%d,\"reference_name\":", p->ref);
        cli_json_string(f, p->ref_name);
        fputc('}', f);
    }
    fputs("]}", f);
}

static void json_classes(FILE *f, const cli_report_t *r)
{
    const hyprof_assessment_t *a = r->a;
    char buf[48];
    fputs(",\"classes\":[", f);
    for (size_t k = 0; k < a->nclasses; k++) {
        fprintf(f, "%s{\"value\":%d,\"name\":", k ? "," : "", a->values[k]);
        cli_json_string(f, class_name(r->legend, a->values[k], buf, sizeof buf));
        if (r->match->by_names) {
            int mv = map_value(r->match, a->values[k]);
            if (mv)
                fprintf(f, ",\"classmap_value\":%d", mv);
            else
                fputs(",\"classmap_value\":null", f);
        }
        fputs(",\"producer\":", f);
        cli_json_number(f, a->producer[k]);
        fputs(",\"user\":", f);
        cli_json_number(f, a->user[k]);
        fputc('}', f);
    }
    fputc(']', f);
}

void cli_assess_json(FILE *f, const cli_report_t *r)
{
    const hyprof_assessment_t *a = r->a;
    size_t K = a->nclasses;
    fputs("{\"classmap\":", f);
    cli_json_string(f, r->map_path);
    fputs(",\"reference\":", f);
    cli_json_string(f, r->ref_path);
    if (r->ref_field) {
        fputs(",\"reference_field\":", f);
        cli_json_string(f, r->ref_field);
    }
    fprintf(f, ",\"pixels\":%llu,\"oa\":", (unsigned long long)a->total);
    cli_json_number(f, a->oa);
    fputs(",\"aa\":", f);
    cli_json_number(f, a->aa);
    fputs(",\"kappa\":", f);
    cli_json_number(f, a->kappa);
    json_match(f, r->match);
    json_classes(f, r);
    fputs(",\"confusion\":[", f);
    for (size_t i = 0; i < K; i++) {
        fputs(i ? ",[" : "[", f);
        for (size_t c = 0; c < K; c++)
            fprintf(f, "%s%llu", c ? "," : "", (unsigned long long)a->confusion[i * (K + 1) + c]);
        fputc(']', f);
    }
    fputs("],\"unclassified\":[", f);
    for (size_t i = 0; i < K; i++)
        fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)a->confusion[i * (K + 1) + K]);
    fputs("]}\n", f);
}

/* ---- HTML ---------------------------------------------------------------------------- */

void cli_html_text(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

hyprof_status_t cli_write_text(const char *path, const char *tmp, const char *text, size_t len,
                               char *err, size_t n)
{
    FILE *f = fopen(tmp, "w");
    int bad = !f || fwrite(text, 1, len, f) != len;
    if (f) {
        bad |= ferror(f);
        bad |= fclose(f) != 0;
    }
    if (!bad)
        return HYPROF_OK;
    snprintf(err, n, "cannot write '%s': %s", path, strerror(errno));
    return HYPROF_ERR_IO;
}
