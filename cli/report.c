/* Accuracy reports: text and JSON on stdout; the HTML page comes from the
 * library (hyprof_assess_html) and is written here. */
#include "report.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


void cli_assess_text(FILE *f, const cli_report_t *r)
{
    const hyprof_assessment_t *a = &r->r->scores;
    const hyprof_class_match_t *m = &r->r->match;
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
                hyprof_class_legend_name(&r->r->legend, a->values[k], buf, sizeof buf));
        int mv = m->by_names ? hyprof_class_match_map_value(m, a->values[k]) : 0;
        if (m->by_names && mv)
            fprintf(f, "%5d ", mv);
        else if (m->by_names)
            fprintf(f, "%5s ", "-");
        fprintf(f, "%9llu %9.4f %9.4f\n", (unsigned long long)hyprof_assessment_row_total(a, k), a->producer[k],
                a->user[k]);
    }
    fputs("\nconfusion matrix (rows: reference, columns: class map, both in the order of the "
          "classes above", f);
    fputs(hyprof_assessment_has_other(a) ? "; last column: other or no class)\n" : ")\n", f);
    size_t cols = K + (size_t)hyprof_assessment_has_other(a);
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
    const hyprof_assessment_t *a = &r->r->scores;
    char buf[48];
    fputs(",\"classes\":[", f);
    for (size_t k = 0; k < a->nclasses; k++) {
        fprintf(f, "%s{\"value\":%d,\"name\":", k ? "," : "", a->values[k]);
        cli_json_string(f, hyprof_class_legend_name(&r->r->legend, a->values[k], buf, sizeof buf));
        if (r->r->match.by_names) {
            int mv = hyprof_class_match_map_value(&r->r->match, a->values[k]);
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
    const hyprof_assessment_t *a = &r->r->scores;
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
    json_match(f, &r->r->match);
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
