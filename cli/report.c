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

void cli_assess_text(FILE *f, const hyprof_assessment_t *a, const hyprof_legend_t *legend)
{
    size_t K = a->nclasses;
    char buf[48];
    fprintf(f, "pixels  %llu\nOA      %.4f\nAA      %.4f\nkappa   %.4f\n\n",
            (unsigned long long)a->total, a->oa, a->aa, a->kappa);
    fprintf(f, "%6s  %-30s %9s %9s %9s\n", "class", "name", "pixels", "producer", "user");
    for (size_t k = 0; k < K; k++) {
        uint64_t row = 0;
        for (size_t c = 0; c <= K; c++)
            row += a->confusion[k * (K + 1) + c];
        fprintf(f, "%6d  %-30.30s %9llu %9.4f %9.4f\n", a->values[k],
                class_name(legend, a->values[k], buf, sizeof buf), (unsigned long long)row,
                a->producer[k], a->user[k]);
    }
    fputs("\nconfusion matrix (rows: reference, columns: class map", f);
    fputs(has_other(a) ? "; last column: other or no class)\n" : ")\n", f);
    size_t cols = K + (size_t)has_other(a);
    for (size_t r = 0; r < K; r++) {
        for (size_t c = 0; c < cols; c++)
            fprintf(f, "%s%llu", c ? " " : "", (unsigned long long)a->confusion[r * (K + 1) + c]);
        fputc('\n', f);
    }
}

static void json_number(FILE *f, double v)
{
    if (isnan(v))
        fputs("null", f);
    else
        fprintf(f, "%.17g", v);
}

void cli_assess_json(FILE *f, const hyprof_assessment_t *a, const hyprof_legend_t *legend,
                     const char *map_path, const char *ref_path)
{
    size_t K = a->nclasses;
    char buf[48];
    fputs("{\"classmap\":", f);
    cli_json_string(f, map_path);
    fputs(",\"reference\":", f);
    cli_json_string(f, ref_path);
    fprintf(f, ",\"pixels\":%llu,\"oa\":", (unsigned long long)a->total);
    json_number(f, a->oa);
    fputs(",\"aa\":", f);
    json_number(f, a->aa);
    fputs(",\"kappa\":", f);
    json_number(f, a->kappa);
    fputs(",\"classes\":[", f);
    for (size_t k = 0; k < K; k++) {
        fprintf(f, "%s{\"value\":%d,\"name\":", k ? "," : "", a->values[k]);
        cli_json_string(f, class_name(legend, a->values[k], buf, sizeof buf));
        fputs(",\"producer\":", f);
        json_number(f, a->producer[k]);
        fputs(",\"user\":", f);
        json_number(f, a->user[k]);
        fputc('}', f);
    }
    fputs("],\"confusion\":[", f);
    for (size_t r = 0; r < K; r++) {
        fputs(r ? ",[" : "[", f);
        for (size_t c = 0; c < K; c++)
            fprintf(f, "%s%llu", c ? "," : "", (unsigned long long)a->confusion[r * (K + 1) + c]);
        fputc(']', f);
    }
    fputs("],\"unclassified\":[", f);
    for (size_t r = 0; r < K; r++)
        fprintf(f, "%s%llu", r ? "," : "", (unsigned long long)a->confusion[r * (K + 1) + K]);
    fputs("]}\n", f);
}

/* ---- HTML ---------------------------------------------------------------------------- */

static void html_text(FILE *f, const char *s)
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

/* The confusion matrix as an SVG heat map: each cell shaded by its share of
 * the reference row, with its count. */
static void confusion_svg(FILE *f, const hyprof_assessment_t *a)
{
    size_t K = a->nclasses, cols = K + (size_t)has_other(a);
    const int cell = 34, left = 60, top = 60;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%zu\" height=\"%zu\" "
               "font-family=\"sans-serif\" font-size=\"10\">\n",
            left + cols * cell + 10, top + K * cell + 10);
    fprintf(f, "<text x=\"%d\" y=\"14\">class map &#8594;</text><text x=\"4\" y=\"%d\">"
               "reference &#8595;</text>\n", left, top - 8);
    for (size_t c = 0; c < cols; c++)
        if (c < K)
            fprintf(f, "<text x=\"%zu\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
                    left + c * cell + cell / 2, top - 24, a->values[c]);
        else
            fprintf(f, "<text x=\"%zu\" y=\"%d\" text-anchor=\"middle\">other</text>\n",
                    left + c * cell + cell / 2, top - 24);
    for (size_t r = 0; r < K; r++) {
        uint64_t row = 0;
        for (size_t c = 0; c <= K; c++)
            row += a->confusion[r * (K + 1) + c];
        fprintf(f, "<text x=\"%d\" y=\"%zu\" text-anchor=\"end\">%d</text>\n", left - 6,
                top + r * cell + cell / 2 + 4, a->values[r]);
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

static void class_table(FILE *f, const hyprof_assessment_t *a, const hyprof_legend_t *legend)
{
    char buf[48];
    size_t K = a->nclasses;
    fputs("<table><tr><th></th><th>class</th><th>name</th><th>pixels</th><th>producer's</th>"
          "<th>user's</th></tr>\n", f);
    for (size_t k = 0; k < K; k++) {
        int v = a->values[k];
        uint64_t row = 0;
        for (size_t c = 0; c <= K; c++)
            row += a->confusion[k * (K + 1) + c];
        const uint8_t *c = (size_t)v < legend->n ? legend->rgba + 4 * v : NULL;
        fprintf(f, "<tr><td style=\"background:rgb(%d,%d,%d);width:1.5em\"></td><td>%d</td><td>",
                c ? c[0] : 255, c ? c[1] : 255, c ? c[2] : 255, v);
        html_text(f, class_name(legend, v, buf, sizeof buf));
        fprintf(f, "</td><td>%llu</td><td>%.4f</td><td>%.4f</td></tr>\n",
                (unsigned long long)row, a->producer[k], a->user[k]);
    }
    fputs("</table>\n", f);
}

static void write_html(FILE *f, const hyprof_assessment_t *a, const hyprof_legend_t *legend,
                       const unsigned char *png, size_t png_len, const char *map_path,
                       const char *ref_path)
{
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>hyprof accuracy report"
          "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
          "collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
          ".fig{display:inline-block;vertical-align:top;margin-right:2em}</style></head><body>\n"
          "<h1>Accuracy report</h1>\n<p>Class map: <code>", f);
    html_text(f, map_path);
    fputs("</code><br>Reference: <code>", f);
    html_text(f, ref_path);
    fprintf(f, "</code><br>hyprof %s</p>\n<table><tr><th>pixels</th><th>OA</th><th>AA</th>"
               "<th>kappa</th></tr><tr><td>%llu</td><td>%.4f</td><td>%.4f</td><td>%.4f</td>"
               "</tr></table>\n<h2>Classes</h2>\n",
            hyprof_version(), (unsigned long long)a->total, a->oa, a->aa, a->kappa);
    class_table(f, a, legend);
    fputs("<div class=\"fig\"><h2>Confusion matrix</h2>\n", f);
    confusion_svg(f, a);
    fputs("</div><div class=\"fig\"><h2>Class map</h2>\n<img alt=\"class map\" "
          "src=\"data:image/png;base64,", f);
    base64(f, png, png_len);
    fputs("\"></div>\n</body></html>\n", f);
}

hyprof_status_t cli_assess_html(const char *path, const char *tmp, const hyprof_assessment_t *a,
                                const hyprof_legend_t *legend, const uint16_t *map,
                                size_t width, size_t height, const char *map_path,
                                const char *ref_path, char *err, size_t n)
{
    unsigned char *png = NULL;
    size_t png_len = 0;
    hyprof_status_t st = hyprof_classmap_png(map, width, height, legend, 400, &png, &png_len,
                                             err, n);
    if (st != HYPROF_OK)
        return st;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, n, "cannot write '%s': %s", path, strerror(errno));
        st = HYPROF_ERR_IO;
    } else {
        write_html(f, a, legend, png, png_len, map_path, ref_path);
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
