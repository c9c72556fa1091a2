/* `hyprof train --search`: the candidates from --search, the library's search
 * (hyprof_train_search), the table of what was tried on stdout, and the side
 * outputs --search-report (JSON, or HTML for a .html name: the candidates and
 * the decision fusions scored) and --fold-map
 * (the fold of every training pixel, as a class map). */
#include "cli.h"
#include "classmap_io.h"
#include "job.h"
#include "report.h"
#include "search_cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* --search: 'default' (NULL list) or recipes separated by ';'. */
static int split_recipes(const char *text, char ***list, size_t *n)
{
    *list = NULL;
    *n = 0;
    if (strcmp(text, "default") == 0)
        return 0;
    size_t cap = 1;
    for (const char *s = text; *s; s++)
        cap += *s == ';';
    char *copy = strdup(text);
    *list = calloc(cap, sizeof **list);
    if (!copy || !*list) {
        free(copy);
        return -1;
    }
    for (char *save = NULL, *r = strtok_r(copy, ";", &save); r; r = strtok_r(NULL, ";", &save)) {
        r += strspn(r, " \t");
        if (*r && !((*list)[(*n)++] = strdup(r)))
            break;
    }
    free(copy);
    return 0;
}

static void free_recipes(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

static const char *folds_text(void)
{
    return "spatially disjoint: groups of 8-connected training pixels of one class never "
           "split, dealt per class largest first to the fold with the fewest pixels of the "
           "class";
}

static const char *fusion_text(void)
{
    return "The completed candidates in the order of a greedy forward selection (the best "
           "first, then each time the one whose addition makes the vote most accurate); fusion "
           "m is the plurality vote of the first m (ties: the earlier member), alone or then a "
           "3x3 majority filter, scored on the out-of-fold labels of each training pixel's 3x3 "
           "window; the most accurate is the model (ties: fewer members, then no filter)";
}

static void write_json(FILE *f, const hyprof_search_report_t *r)
{
    fprintf(f, "{\n  \"folds\": %d,\n  \"fold_method\": ", r->folds);
    cli_json_string(f, folds_text());
    fprintf(f, ",\n  \"training_pixels\": %zu,\n  \"groups\": %zu,\n  \"largest_group\": %zu,\n"
               "  \"best\": ", r->pixels, r->groups, r->largest_group);
    cli_json_string(f, r->recipe[r->best]);
    fputs(",\n  \"candidates\": [\n", f);
    for (size_t i = 0; i < r->n; i++) {
        fputs("    {\"recipe\": ", f);
        cli_json_string(f, r->recipe[i]);
        fprintf(f, ", \"bands\": %zu, \"accuracy\": ", r->bands[i]);
        cli_json_number(f, r->accuracy[i]);
        fputs(", \"c\": ", f);
        cli_json_number(f, r->c[i]);
        fputs(", \"gamma\": ", f);
        cli_json_number(f, r->gamma[i]);
        fprintf(f, ", \"folds_run\": %d, \"stopped_early\": %s, \"skipped\": %s, "
                   "\"seconds\": %.3f}%s\n", r->folds_run[i],
                r->folds_run[i] > 0 && r->folds_run[i] < r->folds ? "true" : "false",
                r->folds_run[i] == 0 ? "true" : "false", r->seconds[i], i + 1 < r->n ? "," : "");
    }
    fputs("  ],\n  \"fusion_rule\": ", f);
    cli_json_string(f, fusion_text());
    fputs(",\n  \"selection_order\": [", f);
    for (size_t j = 0; j < r->nranked; j++) {
        fputs(j ? ", " : "", f);
        cli_json_string(f, r->recipe[r->rank[j]]);
    }
    fputs("],\n  \"fusions\": [\n", f);
    for (size_t j = 0; j < r->nfusions; j++) {
        fprintf(f, "    {\"members\": %zu, \"majority\": %d, \"accuracy\": ",
                r->fusion_members[j], r->fusion_majority[j]);
        cli_json_number(f, r->fusion_accuracy[j]);
        fprintf(f, ", \"chosen\": %s}%s\n", j == r->fusion_chosen ? "true" : "false",
                j + 1 < r->nfusions ? "," : "");
    }
    fputs("  ]\n}\n", f);
}

static void write_html(FILE *f, const hyprof_search_report_t *r)
{
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>hyprof train --search"
          "</title><style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}"
          "td:first-child{text-align:left}tr.best{font-weight:bold}</style></head><body>\n"
          "<h1>Profile search</h1>\n<p>", f);
    fprintf(f, "%zu training pixels in %zu groups (largest %zu pixels), %d folds, ", r->pixels,
            r->groups, r->largest_group, r->folds);
    hyprof_html_text(f, folds_text());
    fputs(". Accuracy: the best C and gamma of the grid, pooled over the folds; a candidate "
          "stopped early could not come within 15 % of the best any more.</p>\n<table>\n"
          "<tr><th>recipe</th>"
          "<th>bands</th><th>CV accuracy</th><th>C</th><th>gamma</th><th>folds run</th>"
          "<th>seconds</th></tr>\n", f);
    for (size_t i = 0; i < r->n; i++) {
        fprintf(f, "<tr%s><td>", i == r->best ? " class=\"best\"" : "");
        hyprof_html_text(f, r->recipe[i]);
        if (isnan(r->accuracy[i]))
            fprintf(f, "</td><td>%zu</td><td>%s</td><td></td><td></td>", r->bands[i],
                    r->folds_run[i] ? "stopped" : "skipped");
        else
            fprintf(f, "</td><td>%zu</td><td>%.4f</td><td>%g</td><td>%g</td>", r->bands[i],
                    r->accuracy[i], r->c[i], r->gamma[i]);
        fprintf(f, "<td>%d/%d</td><td>%.2f</td></tr>\n", r->folds_run[i], r->folds,
                r->seconds[i]);
    }
    fputs("</table>\n<h2>Decision fusion</h2>\n<p>", f);
    hyprof_html_text(f, fusion_text());
    fputs(".</p>\n<table>\n<tr><th>members (added in order)</th><th>vote</th>"
          "<th>vote + 3x3 majority</th></tr>\n", f);
    for (size_t j = 0; j + 1 < r->nfusions; j += 2) {
        fprintf(f, "<tr><td>%zu: ", r->fusion_members[j]);
        hyprof_html_text(f, r->recipe[r->rank[r->fusion_members[j] - 1]]);
        fprintf(f, "</td><td%s>%.4f</td><td%s>%.4f</td></tr>\n",
                j == r->fusion_chosen ? " class=\"best\"" : "", r->fusion_accuracy[j],
                j + 1 == r->fusion_chosen ? " class=\"best\"" : "", r->fusion_accuracy[j + 1]);
    }
    fputs("</table>\n</body></html>\n", f);
}

static int write_report(job_t *j, const char *path, const hyprof_search_report_t *r)
{
    const char *tmp = job_output(j, path, 0);
    if (!tmp)
        return EXIT_RUNTIME;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        cli_error(j->name, "cannot write '%s'", path);
        return EXIT_RUNTIME;
    }
    size_t len = strlen(path);
    if (len > 5 && strcasecmp(path + len - 5, ".html") == 0)
        write_html(f, r);
    else
        write_json(f, r);
    if (fclose(f) != 0) {
        cli_error(j->name, "cannot write '%s'", path);
        return EXIT_RUNTIME;
    }
    return EXIT_OK;
}

static int write_fold_map(job_t *j, const char *path, const hyprof_raster_t *raw,
                          const hyprof_cube_t *labels, int folds, uint64_t seed)
{
    size_t npix = raw->cube.width * raw->cube.height, groups, largest;
    int *fold = malloc(npix * sizeof *fold);
    uint16_t *v = malloc(npix * sizeof *v);
    hyprof_legend_t legend = {0, NULL, NULL};
    const char *tmp = job_output(j, path, 1);
    hyprof_status_t st = fold && v && tmp ? HYPROF_OK : HYPROF_ERR_NOMEM;
    if (st == HYPROF_OK &&
        (st = hyprof_search_folds(j->ctx, labels, folds, seed, fold, &groups, &largest)) != HYPROF_OK) {
        free(fold), free(v);
        return lib_fail(j, st);
    }
    for (size_t i = 0; st == HYPROF_OK && i < npix; i++)
        v[i] = (uint16_t)(fold[i] + 1);
    for (int f = 0; st == HYPROF_OK && f < folds; f++) {
        char name[32];
        snprintf(name, sizeof name, "fold %d", f + 1);
        st = hyprof_legend_set(&legend, (size_t)f + 1, name, NULL);
    }
    char *meta[] = {"HYPROF_OPERATION=train", "HYPROF_FOLD_MAP=cross-validation folds", NULL};
    if (st == HYPROF_OK)
        st = hyprof_classmap_write(path, tmp, raw, v, &legend, meta, j->err, sizeof j->err);
    else
        snprintf(j->err, sizeof j->err, "out of memory");
    free(fold);
    free(v);
    hyprof_legend_free(&legend);
    return st == HYPROF_OK ? EXIT_OK : io_fail(j, st, 0);
}

static void print_table(job_t *j, const hyprof_search_report_t *r)
{
    printf("%s: search over %zu candidates, %d spatial folds (%zu training pixels in %zu "
           "groups, the largest %zu)\n", j->name, r->n, r->folds, r->pixels, r->groups,
           r->largest_group);
    for (size_t i = 0; i < r->n; i++) {
        if (r->folds_run[i] == 0)
            printf("  %-8s %s (skipped: not applicable to this cube)\n", "-", r->recipe[i]);
        else if (isnan(r->accuracy[i]))
            printf("  %-8s %s (stopped after %d folds, %.2f s)\n", "-", r->recipe[i],
                   r->folds_run[i], r->seconds[i]);
        else
            printf("  %.4f%s %s (C=%g, gamma=%g, %.2f s)\n", r->accuracy[i],
                   i == r->best ? " *" : "  ", r->recipe[i], r->c[i], r->gamma[i],
                   r->seconds[i]);
    }
    printf("%s: decision fusion (members added by greedy selection; vote, then vote + 3x3 "
           "majority):\n", j->name);
    for (size_t f = 0; f + 1 < r->nfusions; f += 2)
        printf("  %.4f%s %.4f%s %2zu %s\n", r->fusion_accuracy[f],
               f == r->fusion_chosen ? " *" : "  ", r->fusion_accuracy[f + 1],
               f + 1 == r->fusion_chosen ? " *" : "  ", r->fusion_members[f],
               r->recipe[r->rank[r->fusion_members[f] - 1]]);
}

int cli_train_check_search(job_t *j)
{
    const hyprof_args_t *a = j->cmd->args;
    if (hyprof_args_str(a, "search"))
        return EXIT_OK;
    const char *needs[] = {"search-report", "fold-map"};
    for (size_t i = 0; i < 2; i++)
        if (hyprof_args_str(a, needs[i])) {
            cli_error(j->name, "--%s needs --search", needs[i]);
            return EXIT_USAGE;
        }
    return EXIT_OK;
}

int cli_train_search(job_t *j, const hyprof_raster_t *raw, const hyprof_cube_t *labels,
                     const hyprof_train_params_t *p, hyprof_classifier_t **model)
{
    const hyprof_args_t *a = j->cmd->args;
    char **list;
    size_t n;
    if (split_recipes(hyprof_args_str(a, "search"), &list, &n) != 0) {
        cli_error(j->name, "out of memory");
        return EXIT_RUNTIME;
    }
    hyprof_search_params_t sp = {(const char *const *)list, n, p->folds, p->seed,
                                 strcmp(hyprof_args_str(a, "fusion"), "auto") == 0};
    hyprof_search_report_t r;
    hyprof_status_t st = hyprof_train_search(j->ctx, &raw->cube, labels, &sp, p, model, &r);
    int rc = st == HYPROF_OK ? EXIT_OK : lib_fail(j, st);
    if (rc == EXIT_OK)
        print_table(j, &r);
    const char *report = hyprof_args_str(a, "search-report");
    const char *fold_map = hyprof_args_str(a, "fold-map");
    if (rc == EXIT_OK && report)
        rc = write_report(j, report, &r);
    if (rc == EXIT_OK && fold_map)
        rc = write_fold_map(j, fold_map, raw, labels, p->folds, p->seed);
    hyprof_search_report_free(&r);
    free_recipes(list, n);
    return rc;
}
