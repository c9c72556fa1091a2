/* `hyprof describe --json`: the whole registry, for the QGIS provider, the
 * GDAL driver and anyone scripting hyprof. */
#include "cli.h"

#include <string.h>

static int is_number(hyprof_param_type_t t)
{
    return t == HYPROF_PARAM_INT || t == HYPROF_PARAM_FLOAT;
}

static void print_param(FILE *f, const hyprof_param_t *p)
{
    fputs("{\"name\":", f);
    cli_json_string(f, p->name);
    fprintf(f, ",\"type\":\"%s\",\"default\":", hyprof_param_type_name(p->type));
    if (!p->def)
        fputs("null", f);
    else if (is_number(p->type) || p->type == HYPROF_PARAM_BOOL)
        fputs(p->def, f);
    else
        cli_json_string(f, p->def);
    if (p->min != 0.0 || p->max != 0.0)
        fprintf(f, ",\"min\":%.17g,\"max\":%.17g", p->min, p->max);
    if (p->type == HYPROF_PARAM_CHOICE) {
        fputs(",\"choices\":[", f);
        const char *c = p->choices;
        while (c && *c) {
            const char *bar = strchr(c, '|');
            size_t n = bar ? (size_t)(bar - c) : strlen(c);
            fprintf(f, "\"%.*s\"%s", (int)n, c, bar ? "," : "");
            c = bar ? bar + 1 : NULL;
        }
        fputc(']', f);
    } else if (p->type == HYPROF_PARAM_FIELD) {
        fputs(",\"parent\":", f);
        cli_json_string(f, p->choices);
    } else if (p->choices) {
        fputs(",\"file_filter\":", f);
        cli_json_string(f, p->choices);
    }
    fputs(",\"help\":", f);
    cli_json_string(f, p->help);
    fprintf(f, ",\"required\":%s,\"advanced\":%s",
            p->flags & HYPROF_PARAM_REQUIRED ? "true" : "false",
            p->flags & HYPROF_PARAM_ADVANCED ? "true" : "false");
    /* A side file the CLI names after OUTPUT when it is not given. */
    if (p->flags & HYPROF_PARAM_BESIDE_OUTPUT)
        fputs(",\"beside_output\":true", f);
    fputc('}', f);
}

static void print_params(FILE *f, const hyprof_param_t *p, size_t n)
{
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",\n    " : "\n    ", f);
        print_param(f, &p[i]);
    }
    fputc(']', f);
}

/* Operations with other file arguments than INPUT OUTPUT list them in order
 * ("files": [{"name":"FEATURES","type":"raster_in"}, ...]) with what they
 * produce. */
static void print_files(FILE *f, const hyprof_op_t *op)
{
    int n = cli_positionals(op, -1, NULL, 0, NULL, 0);
    fputs(",\"files\":[", f);
    for (int i = 0; i < n; i++) {
        char kind[32], name[64];
        cli_positionals(op, i, kind, sizeof kind, name, sizeof name);
        fprintf(f, "%s{\"name\":", i ? "," : "");
        cli_json_string(f, name);
        fputs(",\"type\":", f);
        cli_json_string(f, kind);
        fputc('}', f);
    }
    fputs("],\"result\":", f);
    cli_json_string(f, op->output);
}

static void print_op(FILE *f, const hyprof_op_t *op)
{
    fputs("{\"name\":", f);
    cli_json_string(f, op->name);
    fputs(",\"group\":", f);
    cli_json_string(f, op->group);
    fputs(",\"summary\":", f);
    cli_json_string(f, op->summary);
    fputs(",\"help\":", f);
    cli_json_string(f, op->help);
    if (op->positionals) {
        print_files(f, op);
    } else {
        fputs(",\"input\":{\"name\":\"INPUT\",\"type\":\"raster\"}", f);
        fputs(",\"output\":{\"name\":\"OUTPUT\",\"type\":\"raster\",\"format\":\"GTiff\","
              "\"description\":", f);
        cli_json_string(f, op->output);
        fputc('}', f);
    }
    fputs(",\"params\":", f);
    print_params(f, op->params, op->nparams);
    fputc('}', f);
}

int cli_describe(int argc, char **argv)
{
    if (argc != 1 || strcmp(argv[0], "--json") != 0) {
        cli_error("describe", "usage: hyprof describe --json");
        return EXIT_USAGE;
    }
    size_t nc;
    const hyprof_param_t *common = hyprof_common_params(&nc);
    printf("{\"hyprof\":\"%s\",\"build\":\"%s\",\"exit_codes\":{\"ok\":0,\"runtime\":1,"
           "\"usage\":2,\"cancelled\":3},\n \"common\":",
           hyprof_version(), hyprof_build_info());
    print_params(stdout, common, nc);
    fputs(",\n \"operations\":[", stdout);
    for (size_t i = 0; i < hyprof_op_count(); i++) {
        fputs(i ? ",\n  " : "\n  ", stdout);
        print_op(stdout, hyprof_op_at(i));
    }
    fputs("]}\n", stdout);
    return EXIT_OK;
}
