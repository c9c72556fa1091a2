/* `assess` with its classes paired: the class values of both maps, which
 * values occur on labelled reference pixels, the pairing by name or number
 * (assess_match.c), the class map renumbered into the reference's values
 * when paired by name, the scores (assess.c), and the legends the report
 * shows: by reference value (names of the reference, else of the class map;
 * by name, the class map's names and colours of each pair) and by class-map
 * value for the thumbnail. The command line and the Python binding both call
 * this, so their numbers and reports agree. */
#include "classifier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "assess"

/* An owned legend, grown as values are set. */
typedef struct {
    size_t n;
    char **names;
    uint8_t *rgba;
} legend_t;

static int legend_set(legend_t *l, size_t v, const char *name, const uint8_t *rgba)
{
    if (v >= l->n) {
        char **names = realloc(l->names, (v + 1) * sizeof *names);
        if (names)
            l->names = names;
        uint8_t *c = names ? realloc(l->rgba, (v + 1) * 4) : NULL;
        if (!c)
            return -1;
        l->rgba = c;
        memset(l->names + l->n, 0, (v + 1 - l->n) * sizeof *names);
        memset(l->rgba + 4 * l->n, 0, (v + 1 - l->n) * 4);
        l->n = v + 1;
    }
    if (name) {
        free(l->names[v]);
        if (!(l->names[v] = strdup(name)))
            return -1;
    }
    if (rgba)
        memcpy(l->rgba + 4 * v, rgba, 4);
    return 0;
}

static hyprof_class_legend_t legend_view(const legend_t *l)
{
    return (hyprof_class_legend_t){l->n, (const char *const *)l->names, l->rgba};
}

static void legend_free(hyprof_class_legend_t *v)
{
    for (size_t i = 0; v->names && i < v->n; i++)
        free((char *)v->names[i]);
    free((void *)v->names);
    free((void *)v->rgba);
    memset(v, 0, sizeof *v);
}

static const uint8_t *colour_of(const hyprof_class_legend_t *l, size_t v)
{
    return l->rgba && v < l->n && l->rgba[4 * v + 3] ? l->rgba + 4 * v : NULL;
}

/* dst's names where it has them, else src's; src's colours where it has them. */
static int merge_legend(legend_t *dst, const hyprof_class_legend_t *src)
{
    for (size_t v = 0; v < src->n; v++) {
        int named = v < dst->n && dst->names[v];
        const char *name = named || !src->names ? NULL : src->names[v];
        const uint8_t *rgba = colour_of(src, v);
        if ((name || rgba) && legend_set(dst, v, name, rgba))
            return -1;
    }
    return 0;
}

/* The report's legend by reference value and the thumbnail's by class-map value. */
static int report_legends(const hyprof_class_match_t *m, const hyprof_class_legend_t *ml,
                          const hyprof_class_legend_t *rl, legend_t *legend, legend_t *picture)
{
    if (!m->by_names) {
        if (merge_legend(legend, rl) || merge_legend(legend, ml))
            return -1;
        hyprof_class_legend_t view = legend_view(legend);
        return merge_legend(picture, &view);
    }
    if (merge_legend(legend, rl) || merge_legend(picture, ml))
        return -1;
    for (size_t i = 0; i < m->npairs; i++) {
        size_t mv = (size_t)m->pairs[i].map, rv = (size_t)m->pairs[i].ref;
        const uint8_t *mc = colour_of(ml, mv), *rc = colour_of(rl, rv);
        if (legend_set(legend, rv, m->pairs[i].map_name, mc) ||
            (!mc && legend_set(picture, mv, NULL, rc)))
            return -1;
    }
    return 0;
}

/* Band 0's class values (1..65535; 0 for nodata, 0 and anything else). */
static uint16_t *class_values(const hyprof_cube_t *c)
{
    size_t npix = c->width * c->height;
    uint16_t *v = calloc(npix ? npix : 1, sizeof *v);
    for (size_t p = 0; v && p < npix; p++) {
        size_t x = p % c->width, y = p / c->width;
        double d = hyprof_cube_valid(c, x, y) ? hyprof_cube_get(c, x, y, 0) : 0.0;
        v[p] = d >= 1 && d <= 65535 && d == floor(d) ? (uint16_t)d : 0;
    }
    return v;
}

/* The class map renumbered into the reference's values, scored. */
static hyprof_status_t score(hyprof_ctx_t *ctx, const hyprof_cube_t *map,
                             const hyprof_cube_t *ref, hyprof_class_assessment_t *r)
{
    if (!r->match.by_names)
        return hyprof_assess(ctx, map, ref, &r->scores);
    size_t npix = r->width * r->height;
    float *renumbered = malloc((npix ? npix : 1) * sizeof *renumbered);
    if (!renumbered)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    for (size_t p = 0; p < npix; p++)
        renumbered[p] = (float)r->match.map_to_ref[r->map[p]];
    hyprof_cube_t c = hyprof_cube_bsq(renumbered, HYPROF_FLOAT32, r->width, r->height, 1);
    hyprof_status_t st = hyprof_assess(ctx, &c, ref, &r->scores);
    free(renumbered);
    return st;
}

static hyprof_status_t pair_and_score(hyprof_ctx_t *ctx, const hyprof_cube_t *map,
                                      const hyprof_cube_t *ref,
                                      const hyprof_class_legend_t *ml,
                                      const hyprof_class_legend_t *rl, hyprof_match_mode_t mode,
                                      const char *map_label, const char *ref_label,
                                      uint8_t *present, hyprof_class_assessment_t *r)
{
    uint16_t *refv = class_values(ref);
    if (!refv)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    for (size_t p = 0; p < r->width * r->height; p++) {
        present[r->map[p]] |= refv[p] != 0;
        present[65536 + refv[p]] = 1;
        r->labelled += refv[p] != 0;
    }
    free(refv);
    if (!r->labelled)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the reference has no labelled pixel (class values 1..65535)");
    hyprof_status_t st = hyprof_match_classes(ctx, mode, ml, present, map_label, rl,
                                              present + 65536, ref_label, &r->match);
    if (st == HYPROF_OK)
        st = score(ctx, map, ref, r);
    legend_t legend = {0, NULL, NULL}, picture = {0, NULL, NULL};
    int bad = st == HYPROF_OK && report_legends(&r->match, ml, rl, &legend, &picture);
    r->legend = legend_view(&legend);
    r->picture = legend_view(&picture);
    if (bad)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    return st;
}

hyprof_status_t hyprof_assess_classes(hyprof_ctx_t *ctx, const hyprof_cube_t *map,
                                      const hyprof_cube_t *reference,
                                      const hyprof_class_legend_t *map_legend,
                                      const hyprof_class_legend_t *ref_legend,
                                      hyprof_match_mode_t mode, const char *map_label,
                                      const char *ref_label, hyprof_class_assessment_t *out)
{
    memset(out, 0, sizeof *out);
    if (!map || !reference || !map->data || !reference->data)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "a class map and a reference are "
                             "needed");
    if (map->width != reference->width || map->height != reference->height)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the class map is %zux%zu pixels, the reference %zux%zu",
                             map->width, map->height, reference->width, reference->height);
    static const hyprof_class_legend_t none = {0, NULL, NULL};
    out->width = map->width;
    out->height = map->height;
    out->map = class_values(map);
    uint8_t *present = calloc(2 * 65536, 1);
    hyprof_status_t st = out->map && present
                             ? pair_and_score(ctx, map, reference, map_legend ? map_legend : &none,
                                              ref_legend ? ref_legend : &none, mode, map_label,
                                              ref_label, present, out)
                             : hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    free(present);
    if (st != HYPROF_OK) {
        size_t labelled = out->labelled;
        hyprof_class_assessment_free(out);
        out->labelled = labelled;
    }
    return st;
}

void hyprof_class_assessment_free(hyprof_class_assessment_t *r)
{
    hyprof_assessment_free(&r->scores);
    hyprof_class_match_free(&r->match);
    legend_free(&r->legend);
    legend_free(&r->picture);
    free(r->map);
    memset(r, 0, sizeof *r);
}
