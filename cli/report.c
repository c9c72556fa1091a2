/* Accuracy reports: text and JSON on stdout, a self-contained HTML page. */
#include "report.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *class_name(const hyprof_legend_t *l, int v, char *buf, size_t n)
{
    if ((size_t)v < l->n && l->names[v] && *l->names[v])
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
static int map_value(const cli_match_t *m, int v)
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
    const cli_match_t *m = r->match;
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

static void json_match(FILE *f, const cli_match_t *m)
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
        const cli_pair_t *p = &m->pairs[i];
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

static void base64(FILE *f, const unsigned char *d, size_t n)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        fputc(t[v >> 18 & 63], f);
        fputc(t[v >> 12 & 63], f);
        fputc(i + 1 < n ? t[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? t[v & 63] : '=', f);
    }
}

/* A class's label ("3 Corn-notill") cut to `max` characters, the whole label
 * as its tooltip; HTML-escaped. */
static void svg_label(FILE *f, const hyprof_legend_t *l, int v, size_t max)
{
    char buf[48], label[80];
    snprintf(label, sizeof label, "%d %s", v, class_name(l, v, buf, sizeof buf));
    fputs("<title>", f);
    cli_html_text(f, label);
    fputs("</title>", f);
    if (strlen(label) > max)
        strcpy(label + max - 3, "...");
    cli_html_text(f, label);
}

/* The confusion matrix as an SVG heat map: each cell shaded by its share of
 * the reference row, with its count; rows and columns labelled with the
 * classes' values and names (columns written upwards). */
static void confusion_svg(FILE *f, const hyprof_assessment_t *a, const hyprof_legend_t *l)
{
    size_t K = a->nclasses, cols = K + (size_t)has_other(a);
    const int cell = 34, left = 170, top = 150, max = 26;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%zu\" height=\"%zu\" "
               "font-family=\"sans-serif\" font-size=\"10\">\n",
            left + cols * cell + 10, top + K * cell + 10);
    fprintf(f, "<text x=\"%d\" y=\"12\">class map &#8594;</text><text x=\"4\" y=\"%d\">"
               "reference &#8595;</text>\n", left, top - 4);
    for (size_t c = 0; c < cols; c++) {
        size_t x = left + c * cell + cell / 2 + 4;
        fprintf(f, "<text transform=\"translate(%zu,%d) rotate(-90)\">", x, top - 6);
        if (c < K)
            svg_label(f, l, a->values[c], max);
        else
            fputs("other", f);
        fputs("</text>\n", f);
    }
    for (size_t r = 0; r < K; r++) {
        uint64_t row = row_total(a, r);
        fprintf(f, "<text x=\"%d\" y=\"%zu\" text-anchor=\"end\">", left - 6,
                top + r * cell + cell / 2 + 4);
        svg_label(f, l, a->values[r], max);
        fputs("</text>\n", f);
        for (size_t c = 0; c < cols; c++) {
            uint64_t v = a->confusion[r * (K + 1) + c];
            double share = row ? (double)v / (double)row : 0.0;
            int shade = (int)lround(255 * (1.0 - share));
            const char *ink = share > 0.5 ? "#fff" : "#000";
            int diag = r == c;
            fprintf(f, "<rect x=\"%zu\" y=\"%zu\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,"
                       "%d)\" stroke=\"#999\"/>",
                    left + c * cell, top + r * cell, cell, cell, diag ? shade : 255,
                    diag ? shade : shade, diag ? 255 : shade);
            if (v)
                fprintf(f, "<text x=\"%zu\" y=\"%zu\" text-anchor=\"middle\" fill=\"%s\">%llu"
                           "</text>", left + c * cell + cell / 2, top + r * cell + cell / 2 + 4,
                        ink, (unsigned long long)v);
            fputc('\n', f);
        }
    }
    fputs("</svg>\n", f);
}

static void class_table(FILE *f, const cli_report_t *r)
{
    const hyprof_assessment_t *a = r->a;
    const cli_match_t *m = r->match;
    char buf[48];
    fprintf(f, "<table><tr><th></th><th>class</th><th>name</th>%s<th>pixels</th>"
               "<th>producer's</th><th>user's</th></tr>\n",
            m->by_names ? "<th>class map value</th>" : "");
    for (size_t k = 0; k < a->nclasses; k++) {
        int v = a->values[k];
        const uint8_t *c = (size_t)v < r->legend->n ? r->legend->rgba + 4 * v : NULL;
        fprintf(f, "<tr><td style=\"background:rgb(%d,%d,%d);width:1.5em\"></td><td>%d</td><td>",
                c ? c[0] : 255, c ? c[1] : 255, c ? c[2] : 255, v);
        cli_html_text(f, class_name(r->legend, v, buf, sizeof buf));
        fputs("</td>", f);
        if (m->by_names && map_value(m, v))
            fprintf(f, "<td>%d</td>", map_value(m, v));
        else if (m->by_names)
            fputs("<td>none</td>", f);
        fprintf(f, "<td>%llu</td><td>%.4f</td><td>%.4f</td></tr>\n",
                (unsigned long long)row_total(a, k), a->producer[k], a->user[k]);
    }
    fputs("</table>\n", f);
}

/* How the classes were paired, the pairs by name and the warnings. */
static void match_section(FILE *f, const cli_match_t *m)
{
    fputs("<h2>Class matching</h2>\n<p>", f);
    cli_html_text(f, m->how);
    fputs(".</p>\n", f);
    if (m->nnotes) {
        fputs("<ul class=\"warn\">\n", f);
        for (size_t i = 0; i < m->nnotes; i++) {
            fputs("<li>", f);
            cli_html_text(f, m->notes[i]);
            fputs("</li>\n", f);
        }
        fputs("</ul>\n", f);
    }
    if (!m->npairs)
        return;
    fputs("<table><tr><th>class map value</th><th>class map name</th><th>reference value</th>"
          "<th>reference name</th></tr>\n", f);
    for (size_t i = 0; i < m->npairs; i++) {
        fprintf(f, "<tr><td>%d</td><td>", m->pairs[i].map);
        cli_html_text(f, m->pairs[i].map_name);
        fprintf(f, "</td><td>%d</td><td>", m->pairs[i].ref);
        cli_html_text(f, m->pairs[i].ref_name);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void write_html(FILE *f, const cli_report_t *r, const unsigned char *png, size_t png_len)
{
    const hyprof_assessment_t *a = r->a;
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>hyprof accuracy report"
          "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
          "collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
          ".warn{color:#a00}"
          ".fig{display:inline-block;vertical-align:top;margin-right:2em}</style></head><body>\n"
          "<h1>Accuracy report</h1>\n<p>Class map: <code>", f);
    cli_html_text(f, r->map_path);
    fputs("</code><br>Reference: <code>", f);
    cli_html_text(f, r->ref_path);
    fputs("</code>", f);
    if (r->ref_field) {
        fputs(" (class field <code>", f);
        cli_html_text(f, r->ref_field);
        fputs("</code>, rasterised on the class map's grid)", f);
    }
    fprintf(f, "<br>hyprof %s</p>\n<table><tr><th>pixels</th><th>OA</th><th>AA</th>"
               "<th>kappa</th></tr><tr><td>%llu</td><td>%.4f</td><td>%.4f</td><td>%.4f</td>"
               "</tr></table>\n",
            hyprof_version(), (unsigned long long)a->total, a->oa, a->aa, a->kappa);
    match_section(f, r->match);
    fputs("<h2>Classes</h2>\n", f);
    class_table(f, r);
    fputs("<div class=\"fig\"><h2>Confusion matrix</h2>\n", f);
    confusion_svg(f, a, r->legend);
    fputs("</div><div class=\"fig\"><h2>Class map</h2>\n<img alt=\"class map\" "
          "src=\"data:image/png;base64,", f);
    base64(f, png, png_len);
    fputs("\"></div>\n</body></html>\n", f);
}

hyprof_status_t cli_assess_html(const char *path, const char *tmp, const cli_report_t *r,
                                const hyprof_legend_t *picture, const uint16_t *map,
                                size_t width, size_t height, char *err, size_t n)
{
    unsigned char *png = NULL;
    size_t png_len = 0;
    hyprof_status_t st = hyprof_classmap_png(map, width, height, picture, 400, &png, &png_len,
                                             err, n);
    if (st != HYPROF_OK)
        return st;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, n, "cannot write '%s': %s", path, strerror(errno));
        st = HYPROF_ERR_IO;
    } else {
        write_html(f, r, png, png_len);
        int bad = ferror(f);
        bad |= fclose(f) != 0;
        if (bad) {
            snprintf(err, n, "cannot write '%s': %s", path, strerror(errno));
            st = HYPROF_ERR_IO;
        }
    }
    free(png);
    return st;
}
