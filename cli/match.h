/* How `assess` pairs the classes of a class map with those of a reference:
 * by name or by number (--match), and what has no partner. */
#ifndef HYPROF_CLI_MATCH_H
#define HYPROF_CLI_MATCH_H

#include "classmap_io.h"

typedef struct {
    int map, ref;                  /* class values */
    const char *map_name, *ref_name; /* into the legends given to cli_match_classes */
} cli_pair_t;

typedef struct {
    int by_names;        /* 1: paired by name; 0: by number */
    int fallback;        /* auto took numbers although one side names its classes */
    char how[320];       /* one sentence: how the classes are paired and why */
    char **notes;        /* one line each: classes without partner, names that disagree */
    size_t nnotes;
    cli_pair_t *pairs;   /* by name: the pairs, by reference value */
    size_t npairs;
    uint16_t *map_to_ref; /* by name: 65536 entries, class map value -> reference value or 0 */
} cli_match_t;

/* Pairs classes per `mode` (auto|names|numbers). present_map[v] tells
 * whether the class map gives value v to a labelled reference pixel,
 * present_ref[v] whether the reference holds v. A name that is empty,
 * "N" or "class N" for its own value N counts as no name. Returns EXIT_OK,
 * or, after a one-line message, EXIT_USAGE (names asked for but missing or
 * ambiguous on one side) or EXIT_RUNTIME (out of memory). */
int cli_match_classes(const char *op, const char *mode, const char *map_path,
                      const hyprof_legend_t *map_legend, const uint8_t *present_map,
                      const char *ref_path, const hyprof_legend_t *ref_legend,
                      const uint8_t *present_ref, cli_match_t *m);
void cli_match_free(cli_match_t *m);

/* The class name of value v in a legend, NULL when it has none (see above). */
const char *cli_class_name(const hyprof_legend_t *l, int v);

#endif
