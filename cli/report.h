/* Accuracy reports of `assess`: text, JSON and a self-contained HTML page. */
#ifndef HYPROF_CLI_REPORT_H
#define HYPROF_CLI_REPORT_H

#include "classmap_io.h"

#include <stdio.h>

void cli_assess_text(FILE *f, const hyprof_assessment_t *a, const hyprof_legend_t *legend);
void cli_assess_json(FILE *f, const hyprof_assessment_t *a, const hyprof_legend_t *legend,
                     const char *map_path, const char *ref_path);
/* The HTML report: figures, per-class table, the confusion matrix as an
 * inline SVG picture and the class map as an inline PNG thumbnail; written
 * into the file `tmp`, which the caller renames to `path` (named in
 * messages). */
hyprof_status_t cli_assess_html(const char *path, const char *tmp, const hyprof_assessment_t *a,
                                const hyprof_legend_t *legend, const uint16_t *map,
                                size_t width, size_t height, const char *map_path,
                                const char *ref_path, char *err, size_t n);

#endif
