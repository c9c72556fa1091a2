/* Pairing the classes of a class map with those of a reference (`assess
 * --match`, hyprof.assess(match=...)). A model trained from a text field
 * numbers its classes in sorted name order, a reference numbers them its own
 * way: equal numbers are then different classes. By name, each reference class pairs with the class-map
 * class of the same name (ASCII case and whitespace ignored); the class map
 * is renumbered into the reference's values before scoring, and what has no
 * partner is listed. By number, values pair as they are and names that
 * disagree are listed. auto takes names when both sides name their classes
 * (each name once), else numbers, and says why. */
#include "classifier.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "assess"

/* Equal up to ASCII case and whitespace. */
static int same_name(const char *a, const char *b)
{
    for (;; a++, b++) {
        while (*a && isspace((unsigned char)*a))
            a++;
        while (*b && isspace((unsigned char)*b))
            b++;
        if (!*a || !*b)
            return !*a && !*b;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    }
}

/* The class name of value v, NULL when it has none (see hyprof_match_classes). */
static const char *class_name(const hyprof_class_legend_t *l, int v)
{
    if (v < 1 || (size_t)v >= l->n || !l->names || !l->names[v])
        return NULL;
    const char *s = l->names[v];
    char num[16], cls[32];
    snprintf(num, sizeof num, "%d", v);
    snprintf(cls, sizeof cls, "class %d", v);
    return same_name(s, "") || same_name(s, num) || same_name(s, cls) ? NULL : s;
}

/* A one-line list of classes under construction ("2 'Oats', 5 'Corn'"). */
typedef struct {
    char text[4096];
    size_t len, count;
} class_list_t;

static void list_add(class_list_t *l, int v, const char *name, const char *other)
{
    char item[1100];
    int k = other ? snprintf(item, sizeof item, "%d '%s' ('%s' in the class map)", v, name, other)
            : name ? snprintf(item, sizeof item, "%d '%s'", v, name)
                   : snprintf(item, sizeof item, "%d", v);
    size_t need = (size_t)(k > 0 ? k : 0) + 2;
    if (l->len + need + 4 < sizeof l->text)
        l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s%s",
                                   l->count ? ", " : "", item);
    else if (!strstr(l->text, "..."))
        l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, ", ...");
    l->count++;
}

/* A note "<what>: <list>" when the list is not empty; -1 when out of memory. */
static int add_note(hyprof_class_match_t *m, const char *what, const class_list_t *l)
{
    if (!l->count)
        return 0;
    size_t len = strlen(what) + l->len + 3;
    char *note = malloc(len);
    char **n = realloc(m->notes, (m->nnotes + 1) * sizeof *n);
    if (n)
        m->notes = n;
    if (!note || !n) {
        free(note);
        return -1;
    }
    snprintf(note, len, "%s: %s", what, l->text);
    m->notes[m->nnotes++] = note;
    return 0;
}

void hyprof_class_match_free(hyprof_class_match_t *m)
{
    for (size_t i = 0; i < m->nnotes; i++)
        free(m->notes[i]);
    free(m->notes);
    free(m->pairs);
    free(m->map_to_ref);
    memset(m, 0, sizeof *m);
}

/* Whether a side names any of its classes (`present`, or every legend entry
 * when present is NULL); a name given to two classes goes into `dup`. */
static int names_of(const hyprof_class_legend_t *l, const uint8_t *present, char *dup, size_t n)
{
    int named = 0;
    for (size_t v = 1; v < l->n && v < 65536; v++) {
        const char *a = (!present || present[v]) ? class_name(l, (int)v) : NULL;
        if (!a)
            continue;
        named = 1;
        for (size_t w = v + 1; !*dup && w < l->n && w < 65536; w++) {
            const char *b = (!present || present[w]) ? class_name(l, (int)w) : NULL;
            if (b && same_name(a, b))
                snprintf(dup, n, "'%s' names classes %zu and %zu", a, v, w);
        }
    }
    return named;
}

/* By name: the pairs, the renumbering and the classes without partner (on
 * the class map's side, those predicted on labelled reference pixels). */
static int pair_by_name(const hyprof_class_legend_t *ml, const uint8_t *pm, const hyprof_class_legend_t *rl,
                        const uint8_t *pr, hyprof_class_match_t *m)
{
    m->map_to_ref = calloc(65536, sizeof *m->map_to_ref);
    m->pairs = malloc(65536 * sizeof *m->pairs);
    class_list_t *l = calloc(4, sizeof *l); /* unnamed ref, unpaired ref, unnamed map, unpaired map */
    if (!m->map_to_ref || !m->pairs || !l) {
        free(l);
        return -1;
    }
    for (int r = 1; r < 65536; r++) {
        const char *rn = pr[r] ? class_name(rl, r) : NULL;
        int hit = 0;
        for (size_t v = 1; rn && !hit && v < ml->n && v < 65536; v++) {
            const char *mn = class_name(ml, (int)v);
            if (mn && same_name(mn, rn)) {
                hit = (int)v;
                m->map_to_ref[v] = (uint16_t)r;
                m->pairs[m->npairs++] = (hyprof_class_pair_t){hit, r, mn, rn};
            }
        }
        if (pr[r] && !hit)
            list_add(&l[rn ? 1 : 0], r, rn, NULL);
    }
    for (int v = 1; v < 65536; v++)
        if (pm[v] && !m->map_to_ref[v])
            list_add(&l[class_name(ml, v) ? 3 : 2], v, class_name(ml, v), NULL);
    int bad = add_note(m, "reference classes without a name (no class of the class map pairs "
                       "with them)", &l[0]) ||
              add_note(m, "reference classes without a class of that name in the class map "
                       "(none of their pixels can be right)", &l[1]) ||
              add_note(m, "class-map classes without a name, predicted on reference pixels "
                       "(counted as other)", &l[2]) ||
              add_note(m, "class-map classes without a class of that name in the reference, "
                       "predicted on reference pixels (counted as other)", &l[3]);
    free(l);
    return bad;
}

/* By number: the classes whose two names disagree. */
static int compare_names(const hyprof_class_legend_t *ml, const hyprof_class_legend_t *rl, const uint8_t *pr,
                         hyprof_class_match_t *m)
{
    class_list_t *l = calloc(1, sizeof *l);
    if (!l)
        return -1;
    for (int v = 1; v < 65536; v++) {
        const char *mn = pr[v] ? class_name(ml, v) : NULL, *rn = class_name(rl, v);
        if (mn && rn && !same_name(mn, rn))
            list_add(l, v, rn, mn);
    }
    int bad = add_note(m, "classes matched by number whose names disagree (reference name "
                       "first)", l);
    free(l);
    return bad;
}

/* Why classes cannot pair by name ("" when they can), and whether either
 * side names any class. */
static int why_not_names(const hyprof_class_legend_t *ml, const hyprof_class_legend_t *rl,
                         const uint8_t *pr, char *why, size_t n, int *ref_bad)
{
    char mdup[600] = "", rdup[600] = "";
    int map_named = names_of(ml, NULL, mdup, sizeof mdup);
    int ref_named = names_of(rl, pr, rdup, sizeof rdup);
    const char *missing = !map_named && !ref_named ? "neither the class map nor the reference "
                                                     "names its classes"
                          : !map_named             ? "the class map has no class names"
                          : !ref_named             ? "the reference has no class names"
                                                   : NULL;
    *why = 0;
    if (missing)
        snprintf(why, n, "%s", missing);
    else if (*mdup || *rdup)
        snprintf(why, n, "in the %s, %s", *rdup ? "reference" : "class map", *rdup ? rdup : mdup);
    *ref_bad = !ref_named || *rdup;
    return map_named || ref_named;
}

hyprof_status_t hyprof_match_classes(hyprof_ctx_t *ctx, hyprof_match_mode_t mode,
                                     const hyprof_class_legend_t *map_legend,
                                     const uint8_t *present_map, const char *map_label,
                                     const hyprof_class_legend_t *ref_legend,
                                     const uint8_t *present_ref, const char *ref_label,
                                     hyprof_class_match_t *m)
{
    memset(m, 0, sizeof *m);
    if (mode != HYPROF_MATCH_AUTO && mode != HYPROF_MATCH_NAMES && mode != HYPROF_MATCH_NUMBERS)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "unknown match mode %d", (int)mode);
    static const hyprof_class_legend_t none = {0, NULL, NULL};
    const hyprof_class_legend_t *ml = map_legend ? map_legend : &none;
    const hyprof_class_legend_t *rl = ref_legend ? ref_legend : &none;
    char why[700];
    int ref_bad, named = why_not_names(ml, rl, present_ref, why, sizeof why, &ref_bad);
    if (mode == HYPROF_MATCH_NAMES && *why) {
        const char *label = ref_bad ? ref_label : map_label;
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "the %s%s%s%s cannot be matched by name: %s",
                             ref_bad ? "reference" : "class map", label ? " '" : "",
                             label ? label : "", label ? "'" : "", why);
    }
    m->by_names = mode != HYPROF_MATCH_NUMBERS && !*why;
    m->fallback = mode == HYPROF_MATCH_AUTO && *why && named;
    if (mode == HYPROF_MATCH_NUMBERS)
        snprintf(m->how, sizeof m->how, "classes matched by number, as asked (--match numbers)");
    else if (m->by_names)
        snprintf(m->how, sizeof m->how, "classes matched by name (case and whitespace "
                 "ignored)%s", mode == HYPROF_MATCH_AUTO ? ": both sides name their classes"
                                                         : ", as asked");
    else
        snprintf(m->how, sizeof m->how, "classes matched by number: %.250s", why);
    int bad = m->by_names ? pair_by_name(ml, present_map, rl, present_ref, m)
                          : compare_names(ml, rl, present_ref, m);
    if (bad) {
        hyprof_class_match_free(m);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    }
    return HYPROF_OK;
}
