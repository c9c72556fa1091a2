/* PCA models: accessors and the text file format.
 *
 *   hyprof-pca-model 1
 *   bands B
 *   components N
 *   samples S
 *   total_variance V
 *   eigenvalues e1 ... eN
 *   mean m1 ... mB
 *   component k v1 ... vB        (N lines)
 *
 * Numbers are written with %.17g so a model reloads bit for bit. */
#include "pca_model.h"
#include "../core/internal.h"
#include "../core/textio.h"

#include <stdlib.h>
#include <string.h>

#define OP "pca model"

hyprof_pca_model_t *hyprof__pca_model_new(size_t bands, size_t components)
{
    hyprof_pca_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->bands = bands;
    m->components = components;
    m->mean = calloc(bands, sizeof *m->mean);
    m->vectors = calloc(bands * components, sizeof *m->vectors);
    m->eigenvalues = calloc(components, sizeof *m->eigenvalues);
    if (!m->mean || !m->vectors || !m->eigenvalues)
        hyprof_pca_model_free(&m);
    return m;
}

void hyprof_pca_model_free(hyprof_pca_model_t **model)
{
    if (!model || !*model)
        return;
    free((*model)->mean);
    free((*model)->vectors);
    free((*model)->eigenvalues);
    free(*model);
    *model = NULL;
}

size_t hyprof_pca_model_bands(const hyprof_pca_model_t *m) { return m->bands; }
size_t hyprof_pca_model_components(const hyprof_pca_model_t *m) { return m->components; }
const double *hyprof_pca_model_mean(const hyprof_pca_model_t *m) { return m->mean; }
const double *hyprof_pca_model_vectors(const hyprof_pca_model_t *m) { return m->vectors; }
const double *hyprof_pca_model_eigenvalues(const hyprof_pca_model_t *m) { return m->eigenvalues; }
double hyprof_pca_model_total_variance(const hyprof_pca_model_t *m) { return m->total_variance; }
size_t hyprof_pca_model_samples(const hyprof_pca_model_t *m) { return m->samples; }

static void write_model(FILE *f, const void *data)
{
    const hyprof_pca_model_t *m = data;
    fprintf(f, "hyprof-pca-model 1\nbands %zu\ncomponents %zu\nsamples %zu\n", m->bands,
            m->components, m->samples);
    fprintf(f, "total_variance %.17g\n", m->total_variance);
    hyprof__write_doubles(f, "eigenvalues", m->eigenvalues, m->components);
    hyprof__write_doubles(f, "mean", m->mean, m->bands);
    for (size_t k = 0; k < m->components; k++) {
        char key[32];
        snprintf(key, sizeof key, "component %zu", k + 1);
        hyprof__write_doubles(f, key, m->vectors + k * m->bands, m->bands);
    }
}

hyprof_status_t hyprof_pca_model_save(hyprof_ctx_t *ctx, const hyprof_pca_model_t *model,
                                      const char *path)
{
    return hyprof__write_atomic(ctx, OP, path, write_model, model);
}

hyprof_status_t hyprof_pca_model_load(hyprof_ctx_t *ctx, const char *path,
                                      hyprof_pca_model_t **model)
{
    *model = NULL;
    hyprof__reader_t r;
    hyprof_status_t st = hyprof__reader_open(ctx, OP, path, &r);
    if (st != HYPROF_OK)
        return st;
    size_t bands = 0, comps = 0, samples = 0;
    double total = 0.0;
    if ((st = hyprof__read_magic(&r, "hyprof-pca-model", 1)) ||
        (st = hyprof__read_size(&r, "bands", 1, 1000000, &bands)) ||
        (st = hyprof__read_size(&r, "components", 1, bands, &comps)) ||
        (st = hyprof__read_size(&r, "samples", 0, (size_t)-1, &samples)) ||
        (st = hyprof__read_doubles(&r, "total_variance", &total, 1)) ||
        (st = hyprof__reader_expect(&r, "components", comps + 1, 2 * bands,
                                    hyprof__mul_sat((comps + 2) * bands, sizeof(double))))) {
        hyprof__reader_close(&r);
        return st;
    }
    hyprof_pca_model_t *m = hyprof__pca_model_new(bands, comps);
    if (!m) {
        hyprof__reader_close(&r);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate a %zu-band model",
                             bands);
    }
    m->samples = samples;
    m->total_variance = total;
    st = hyprof__read_doubles(&r, "eigenvalues", m->eigenvalues, comps);
    if (st == HYPROF_OK)
        st = hyprof__read_doubles(&r, "mean", m->mean, bands);
    for (size_t k = 0; st == HYPROF_OK && k < comps; k++) {
        char key[32];
        snprintf(key, sizeof key, "component %zu", k + 1);
        st = hyprof__read_doubles(&r, key, m->vectors + k * bands, bands);
    }
    int more = st == HYPROF_OK ? hyprof__read_raw(&r) : 0;
    if (more > 0) {
        char q[64];
        st = hyprof__error(ctx, HYPROF_ERR_FORMAT, OP, "'%s' line %d: unexpected text after the "
                           "model: '%s'", path, r.lineno, hyprof__quote(r.line, q));
    } else if (more < 0) {
        st = HYPROF_ERR_FORMAT;
    }
    hyprof__reader_close(&r);
    if (st != HYPROF_OK)
        hyprof_pca_model_free(&m);
    *model = m;
    return st;
}
