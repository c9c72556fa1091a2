/* Accuracy reports of `assess`: text, JSON and a self-contained HTML page. */
#ifndef HYPROF_CLI_REPORT_H
#define HYPROF_CLI_REPORT_H

#include "classmap_io.h"
#include "match.h"

#include <stdio.h>

/* What a report shows: the scores, the classes' names and colours by
 * reference value, how the classes were paired, and the inputs. */
typedef struct {
    const hyprof_assessment_t *a;
    const hyprof_legend_t *legend;
    const cli_match_t *match;
    const char *map_path, *ref_path;
    const char *ref_field; /* the class field of a vector reference, else NULL */
} cli_report_t;

/* v as a JSON number (%.17g), null for NaN. */
void cli_json_number(FILE *f, double v);
/* `s` as HTML text: <, >, & and " escaped. */
void cli_html_text(FILE *f, const char *s);
void cli_assess_text(FILE *f, const cli_report_t *r);
void cli_assess_json(FILE *f, const cli_report_t *r);
/* The HTML report: figures, how classes were paired, per-class table, the
 * confusion matrix as an inline SVG picture and the class map (values, in
 * the colours of `picture`) as an inline PNG thumbnail; written into the file
 * `tmp`, which the caller renames to `path` (named in messages). */
hyprof_status_t cli_assess_html(const char *path, const char *tmp, const cli_report_t *r,
                                const hyprof_legend_t *picture, const uint16_t *map,
                                size_t width, size_t height, char *err, size_t n);

#endif
