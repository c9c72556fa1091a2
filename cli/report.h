/* Accuracy reports of `assess`: text and JSON; the HTML page (rendered by
 * hyprof_assess_html) written to its file. */
#ifndef HYPROF_CLI_REPORT_H
#define HYPROF_CLI_REPORT_H

#include "classmap_io.h"

#include <stdio.h>

/* What a report shows: the paired assessment (scores, legend by reference
 * value, how the classes were paired) and the inputs' names. */
typedef struct {
    const hyprof_class_assessment_t *r;
    const char *map_path, *ref_path;
    const char *ref_field; /* the class field of a vector reference, else NULL */
} cli_report_t;

/* v as a JSON number (%.17g), null for NaN. */
void cli_json_number(FILE *f, double v);
void cli_assess_text(FILE *f, const cli_report_t *r);
void cli_assess_json(FILE *f, const cli_report_t *r);
/* Writes `len` bytes of `text` into the file `tmp`, which the caller renames
 * to `path` (named in messages). */
hyprof_status_t cli_write_text(const char *path, const char *tmp, const char *text, size_t len,
                               char *err, size_t n);

#endif
