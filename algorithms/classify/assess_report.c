/* The HTML accuracy report of `assess`: one self-contained page with the
 * figures, how the classes were paired, the per-class table, the confusion
 * matrix as an inline SVG heat map and the class map as an inline PNG
 * thumbnail (assess_png.c). Written with stdio into a memory stream, so the
 * command line (which writes it to a file) and the Python binding (which
 * returns it or writes it) get the same bytes. */
#define _POSIX_C_SOURCE 200809L
#include "classifier.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "assess"

/* What the page shows: the paired assessment and the names of the inputs. */
typedef struct {
    const hyprof_assessment_t *a;
    const hyprof_class_legend_t *legend;
    const hyprof_class_match_t *match;
    const char *map_path, *ref_path;
    const char *ref_field; /* the class field of a vector reference, else NULL */
} report_t;

const char *hyprof_class_legend_name(const hyprof_class_legend_t *l, int v, char *buf, size_t n)
{
    if ((size_t)v < l->n && l->names && l->names[v] && *l->names[v])
        return l->names[v];
    snprintf(buf, n, "class %d", v);
    return buf;
}

int hyprof_assessment_has_other(const hyprof_assessment_t *a)
{
    size_t K = a->nclasses;
    for (size_t r = 0; r < K; r++)
        if (a->confusion[r * (K + 1) + K])
            return 1;
    return 0;
}

int hyprof_class_match_map_value(const hyprof_class_match_t *m, int ref)
{
    for (size_t i = 0; i < m->npairs; i++)
        if (m->pairs[i].ref == ref)
            return m->pairs[i].map;
    return 0;
}

uint64_t hyprof_assessment_row_total(const hyprof_assessment_t *a, size_t k)
{
    uint64_t row = 0;
    for (size_t c = 0; c <= a->nclasses; c++)
        row += a->confusion[k * (a->nclasses + 1) + c];
    return row;
}

void hyprof_html_text(FILE *f, const char *s)
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
static void svg_label(FILE *f, const hyprof_class_legend_t *l, int v, size_t max)
{
    char buf[48], label[80];
    snprintf(label, sizeof label, "%d %s", v, hyprof_class_legend_name(l, v, buf, sizeof buf));
    fputs("<title>", f);
    hyprof_html_text(f, label);
    fputs("</title>", f);
    if (strlen(label) > max)
        strcpy(label + max - 3, "...");
    hyprof_html_text(f, label);
}

/* The confusion matrix as an SVG heat map: each cell shaded by its share of
 * the reference row, with its count; rows and columns labelled with the
 * classes' values and names (columns written upwards). */
static void confusion_svg(FILE *f, const hyprof_assessment_t *a, const hyprof_class_legend_t *l)
{
    size_t K = a->nclasses, cols = K + (size_t)hyprof_assessment_has_other(a);
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
        uint64_t row = hyprof_assessment_row_total(a, r);
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

static void class_table(FILE *f, const report_t *r)
{
    const hyprof_assessment_t *a = r->a;
    const hyprof_class_match_t *m = r->match;
    char buf[48];
    fprintf(f, "<table><tr><th></th><th>class</th><th>name</th>%s<th>pixels</th>"
               "<th>producer's</th><th>user's</th></tr>\n",
            m->by_names ? "<th>class map value</th>" : "");
    for (size_t k = 0; k < a->nclasses; k++) {
        int v = a->values[k];
        const uint8_t *c = (size_t)v < r->legend->n && r->legend->rgba ? r->legend->rgba + 4 * v
                                                                          : NULL;
        fprintf(f, "<tr><td style=\"background:rgb(%d,%d,%d);width:1.5em\"></td><td>%d</td><td>",
                c ? c[0] : 255, c ? c[1] : 255, c ? c[2] : 255, v);
        hyprof_html_text(f, hyprof_class_legend_name(r->legend, v, buf, sizeof buf));
        fputs("</td>", f);
        if (m->by_names && hyprof_class_match_map_value(m, v))
            fprintf(f, "<td>%d</td>", hyprof_class_match_map_value(m, v));
        else if (m->by_names)
            fputs("<td>none</td>", f);
        fprintf(f, "<td>%llu</td><td>%.4f</td><td>%.4f</td></tr>\n",
                (unsigned long long)hyprof_assessment_row_total(a, k), a->producer[k], a->user[k]);
    }
    fputs("</table>\n", f);
}

/* How the classes were paired, the pairs by name and the warnings. */
static void match_section(FILE *f, const hyprof_class_match_t *m)
{
    fputs("<h2>Class matching</h2>\n<p>", f);
    hyprof_html_text(f, m->how);
    fputs(".</p>\n", f);
    if (m->nnotes) {
        fputs("<ul class=\"warn\">\n", f);
        for (size_t i = 0; i < m->nnotes; i++) {
            fputs("<li>", f);
            hyprof_html_text(f, m->notes[i]);
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
        hyprof_html_text(f, m->pairs[i].map_name);
        fprintf(f, "</td><td>%d</td><td>", m->pairs[i].ref);
        hyprof_html_text(f, m->pairs[i].ref_name);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void write_html(FILE *f, const report_t *r, const unsigned char *png, size_t png_len)
{
    const hyprof_assessment_t *a = r->a;
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>hyprof accuracy report"
          "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
          "collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
          ".warn{color:#a00}"
          ".fig{display:inline-block;vertical-align:top;margin-right:2em}</style></head><body>\n"
          "<h1>Accuracy report</h1>\n<p>Class map: <code>", f);
    hyprof_html_text(f, r->map_path);
    fputs("</code><br>Reference: <code>", f);
    hyprof_html_text(f, r->ref_path);
    fputs("</code>", f);
    if (r->ref_field) {
        fputs(" (class field <code>", f);
        hyprof_html_text(f, r->ref_field);
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


/* The class map as an RGB picture (band-sequential) of at most max_side
 * pixels a side: large maps shrink, small ones grow by a whole factor
 * (nearest neighbour); legend colours, else the default palette; white for 0. */
static uint8_t *thumbnail(const hyprof_class_assessment_t *r, size_t max_side, size_t *w,
                          size_t *h)
{
    size_t width = r->width, height = r->height, side = width > height ? width : height;
    double f = side > max_side ? (double)max_side / (double)side
                               : floor((double)max_side / (double)side);
    *w = (size_t)fmax(1.0, floor(width * f));
    *h = (size_t)fmax(1.0, floor(height * f));
    uint8_t *rgb = malloc(3 * *w * *h);
    const hyprof_class_legend_t *l = &r->picture;
    for (size_t y = 0; rgb && y < *h; y++)
        for (size_t x = 0; x < *w; x++) {
            size_t sx = (size_t)((x + 0.5) / f), sy = (size_t)((y + 0.5) / f);
            sx = sx < width ? sx : width - 1;
            sy = sy < height ? sy : height - 1;
            uint16_t v = r->map[sy * width + sx];
            uint8_t c[4] = {255, 255, 255, 255};
            if (v && v < l->n && l->rgba && l->rgba[4 * v + 3])
                memcpy(c, l->rgba + 4 * v, 3);
            else if (v)
                hyprof_palette_rgba(v, c);
            for (int k = 0; k < 3; k++)
                rgb[k * *w * *h + y * *w + x] = c[k];
        }
    return rgb;
}

hyprof_status_t hyprof_assess_html(hyprof_ctx_t *ctx, const hyprof_class_assessment_t *r,
                                   const char *map_label, const char *ref_label,
                                   const char *ref_field, char **html, size_t *len)
{
    *html = NULL;
    *len = 0;
    if (!r || !r->map || !r->width || !r->height || !r->scores.nclasses)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no assessment to report");
    size_t w, h, png_len = 0;
    unsigned char *png = NULL;
    uint8_t *rgb = thumbnail(r, 400, &w, &h);
    hyprof_status_t st = rgb ? hyprof_png_encode_rgb(rgb, w, h, &png, &png_len)
                             : HYPROF_ERR_NOMEM;
    free(rgb);
    FILE *f = st == HYPROF_OK ? open_memstream(html, len) : NULL;
    if (f) {
        report_t rep = {&r->scores, &r->legend, &r->match, map_label ? map_label : "class map",
                        ref_label ? ref_label : "reference", ref_field};
        write_html(f, &rep, png, png_len);
        if (ferror(f) | fclose(f))
            st = HYPROF_ERR_NOMEM;
    } else {
        st = HYPROF_ERR_NOMEM;
    }
    free(png);
    if (st != HYPROF_OK) {
        free(*html);
        *html = NULL;
        *len = 0;
        return hyprof__error(ctx, st, OP, "out of memory (HTML report)");
    }
    return HYPROF_OK;
}
