/* Classifier models: accessors and the text file format.
 *
 *   hyprof-classifier 1
 *   kind svm|elm
 *   bands B
 *   band NAME                         (B lines, possibly empty names)
 *   scale 0|1
 *   min m1 ... mB
 *   max M1 ... MB
 *   classes K
 *   class VALUE R G B A NAME          (K lines, increasing values)
 *   train_pixels N
 *   cv_accuracy A                     (-1: no cross-validation)
 * Version 2, written only for a model trained by `train --search`, adds
 * after cv_accuracy the recipe of the features (search.h) and the band count
 * of the raw cubes it is computed on:
 *   input_bands N
 *   profile RECIPE
 * (version 1 readers refuse such a model by its version; this reader takes
 * both.)
 * then for an SVM, its C (`svm_c C`: LIBSVM's model file has no place for it)
 * and LIBSVM's own model file, verbatim after the line
 *   libsvm_model
 * (svm_type c_svc, kernel_type rbf, gamma, nr_class, total_sv, rho, label,
 * nr_sv, SV, one line per support vector: coefficients then index:value),
 * so that `sed '1,/^libsvm_model$/d'` gives a file svm-predict reads; and
 * for an ELM:
 *   neurons H / elm_c C / seed S / weight k ... (H lines) / bias ... /
 *   beta k ... (H lines of K values)
 *
 * Version 3 is a fused model (fusion.c): the classes and the training
 * summary as above, then its members, each a complete version 2 model:
 *   hyprof-classifier 3
 *   fusion vote
 *   members M
 *   majority S                        (window side, 0: no filter)
 *   classes K / class ... (K lines) / train_pixels N / cv_accuracy A
 *   input_bands N
 *   member 1 / hyprof-classifier 2 ... (M times)
 *
 * Numbers are written with %.17g so a model reloads bit for bit. */
#include "fusion_impl.h"
#include "../core/textio.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "classifier model"
#define MAX_BANDS 1000000
#define MAX_CLASSES 65535

hyprof_classifier_t *hyprof__classifier_new(hyprof_classifier_kind_t kind, size_t bands,
                                            size_t nclasses)
{
    hyprof_classifier_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->kind = kind;
    m->bands = bands;
    m->nclasses = nclasses;
    m->cv_accuracy = NAN;
    m->band_names = calloc(bands, sizeof *m->band_names);
    m->min = calloc(bands, sizeof *m->min);
    m->max = calloc(bands, sizeof *m->max);
    m->values = calloc(nclasses, sizeof *m->values);
    m->names = calloc(nclasses, sizeof *m->names);
    m->rgba = calloc(nclasses * 4, 1);
    if (!m->band_names || !m->min || !m->max || !m->values || !m->names || !m->rgba)
        hyprof_classifier_free(&m);
    return m;
}

void hyprof__svm_free(hyprof__svm_t *s)
{
    free(s->label);
    free(s->nsv_class);
    free(s->sv);
    free(s->coef);
    free(s->rho);
    memset(s, 0, sizeof *s);
}

void hyprof_classifier_free(hyprof_classifier_t **model)
{
    if (!model || !*model)
        return;
    hyprof_classifier_t *m = *model;
    for (size_t j = 0; m->member && j < m->nmembers; j++)
        hyprof_classifier_free(&m->member[j]);
    free(m->member);
    for (size_t b = 0; m->band_names && b < m->bands; b++)
        free(m->band_names[b]);
    for (size_t k = 0; m->names && k < m->nclasses; k++)
        free(m->names[k]);
    free(m->band_names);
    free(m->names);
    free(m->min);
    free(m->max);
    free(m->profile);
    free(m->values);
    free(m->rgba);
    hyprof__svm_free(&m->svm);
    free(m->elm.w);
    free(m->elm.bias);
    free(m->elm.beta);
    free(m);
    *model = NULL;
}

int hyprof__class_index(const hyprof_classifier_t *m, int v)
{
    for (size_t k = 0; k < m->nclasses; k++)
        if (m->values[k] == v)
            return (int)k;
    return -1;
}

hyprof_classifier_kind_t hyprof_classifier_kind(const hyprof_classifier_t *m) { return m->kind; }
size_t hyprof_classifier_bands(const hyprof_classifier_t *m)
{
    return m->nmembers ? m->input_bands : m->bands;
}
const char *hyprof_classifier_band_name(const hyprof_classifier_t *m, size_t b)
{
    return b < m->bands && m->band_names[b] ? m->band_names[b] : "";
}
size_t hyprof_classifier_classes(const hyprof_classifier_t *m) { return m->nclasses; }
int hyprof_classifier_class_value(const hyprof_classifier_t *m, size_t k)
{
    return k < m->nclasses ? m->values[k] : 0;
}
const char *hyprof_classifier_class_name(const hyprof_classifier_t *m, size_t k)
{
    return k < m->nclasses && m->names[k] ? m->names[k] : "";
}
const uint8_t *hyprof_classifier_class_rgba(const hyprof_classifier_t *m, size_t k)
{
    return k < m->nclasses ? m->rgba + 4 * k : NULL;
}
double hyprof_classifier_c(const hyprof_classifier_t *m)
{
    return m->kind == HYPROF_CLASSIFIER_SVM ? m->svm.c : m->elm.c;
}
double hyprof_classifier_gamma(const hyprof_classifier_t *m)
{
    return m->kind == HYPROF_CLASSIFIER_SVM ? m->svm.gamma : NAN;
}
double hyprof_classifier_cv_accuracy(const hyprof_classifier_t *m) { return m->cv_accuracy; }
size_t hyprof_classifier_train_pixels(const hyprof_classifier_t *m) { return m->ntrain; }
size_t hyprof_classifier_size(const hyprof_classifier_t *m)
{
    if (m->nmembers) {
        size_t total = 0;
        for (size_t j = 0; j < m->nmembers; j++)
            total += hyprof_classifier_size(m->member[j]);
        return total;
    }
    return m->kind == HYPROF_CLASSIFIER_SVM ? m->svm.nsv : m->elm.neurons;
}

/* ---- writing -------------------------------------------------------------------- */

static void write_ints(FILE *f, const char *key, const int *v, size_t n)
{
    fputs(key, f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %d", v[i]);
    fputc('\n', f);
}

static void write_libsvm(FILE *f, const hyprof_classifier_t *m)
{
    const hyprof__svm_t *s = &m->svm;
    size_t npairs = s->nr_class * (s->nr_class - 1) / 2;
    fprintf(f, "svm_c %.17g\nlibsvm_model\nsvm_type c_svc\nkernel_type rbf\ngamma %.17g\n"
               "nr_class %zu\ntotal_sv %zu\n", s->c, s->gamma, s->nr_class, s->nsv);
    hyprof__write_doubles(f, "rho", s->rho, npairs);
    write_ints(f, "label", s->label, s->nr_class);
    write_ints(f, "nr_sv", s->nsv_class, s->nr_class);
    fputs("SV\n", f);
    for (size_t i = 0; i < s->nsv; i++) {
        for (size_t r = 0; r + 1 < s->nr_class; r++)
            fprintf(f, "%.17g ", s->coef[r * s->nsv + i]);
        for (size_t b = 0; b < m->bands; b++)
            fprintf(f, "%zu:%.17g ", b + 1, s->sv[i * m->bands + b]);
        fputc('\n', f);
    }
}

static void write_elm(FILE *f, const hyprof_classifier_t *m)
{
    const hyprof__elm_t *e = &m->elm;
    fprintf(f, "neurons %zu\nelm_c %.17g\nseed %llu\n", e->neurons, e->c,
            (unsigned long long)e->seed);
    for (size_t h = 0; h < e->neurons; h++) {
        char key[32];
        snprintf(key, sizeof key, "weight %zu", h + 1);
        hyprof__write_doubles(f, key, e->w + h * m->bands, m->bands);
    }
    hyprof__write_doubles(f, "bias", e->bias, e->neurons);
    for (size_t h = 0; h < e->neurons; h++) {
        char key[32];
        snprintf(key, sizeof key, "beta %zu", h + 1);
        hyprof__write_doubles(f, key, e->beta + h * m->nclasses, m->nclasses);
    }
}

static void write_classes(FILE *f, const hyprof_classifier_t *m)
{
    fprintf(f, "classes %zu\n", m->nclasses);
    for (size_t k = 0; k < m->nclasses; k++) {
        const uint8_t *c = m->rgba + 4 * k;
        fprintf(f, "class %d %u %u %u %u %s\n", m->values[k], c[0], c[1], c[2], c[3],
                m->names[k] ? m->names[k] : "");
    }
    fprintf(f, "train_pixels %zu\ncv_accuracy %.17g\n", m->ntrain,
            isnan(m->cv_accuracy) ? -1.0 : m->cv_accuracy);
}

static void write_model(FILE *f, const void *data);

static void write_fused(FILE *f, const hyprof_classifier_t *m)
{
    fprintf(f, "hyprof-classifier 3\nfusion vote\nmembers %zu\nmajority %d\n", m->nmembers,
            m->majority);
    write_classes(f, m);
    fprintf(f, "input_bands %zu\n", m->input_bands);
    for (size_t j = 0; j < m->nmembers; j++) {
        fprintf(f, "member %zu\n", j + 1);
        write_model(f, m->member[j]);
    }
}

static void write_model(FILE *f, const void *data)
{
    const hyprof_classifier_t *m = data;
    if (m->nmembers) {
        write_fused(f, m);
        return;
    }
    fprintf(f, "hyprof-classifier %d\nkind %s\nbands %zu\n", m->profile ? 2 : 1,
            m->kind == HYPROF_CLASSIFIER_SVM ? "svm" : "elm", m->bands);
    for (size_t b = 0; b < m->bands; b++)
        fprintf(f, "band %s\n", m->band_names[b] ? m->band_names[b] : "");
    fprintf(f, "scale %d\n", m->scale ? 1 : 0);
    hyprof__write_doubles(f, "min", m->min, m->bands);
    hyprof__write_doubles(f, "max", m->max, m->bands);
    write_classes(f, m);
    if (m->profile)
        fprintf(f, "input_bands %zu\nprofile %s\n", m->input_bands, m->profile);
    if (m->kind == HYPROF_CLASSIFIER_SVM)
        write_libsvm(f, m);
    else
        write_elm(f, m);
}

static hyprof_status_t check_writable(hyprof_ctx_t *ctx, const hyprof_classifier_t *m)
{
    for (size_t j = 0; j < m->nmembers; j++) {
        hyprof_status_t st = check_writable(ctx, m->member[j]);
        if (st != HYPROF_OK)
            return st;
        if (!m->member[j]->profile)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "fused member %zu has no profile",
                                 j + 1);
    }
    /* Newlines would break the line format; names come from user data. */
    for (size_t b = 0; b < m->bands; b++)
        if (m->band_names[b] && strpbrk(m->band_names[b], "\r\n"))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "band %zu's name has a newline",
                                 b + 1);
    for (size_t k = 0; k < m->nclasses; k++)
        if (m->names[k] && strpbrk(m->names[k], "\r\n"))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                 "class %d's name has a newline", m->values[k]);
    if (!m->nmembers && m->profile &&
        (strpbrk(m->profile, "\r\n") || !*m->profile || m->input_bands < 1))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "the profile recipe is empty or has a newline");
    return HYPROF_OK;
}

hyprof_status_t hyprof_classifier_save(hyprof_ctx_t *ctx, const hyprof_classifier_t *model,
                                       const char *path)
{
    hyprof_status_t st = check_writable(ctx, model);
    return st ? st : hyprof__write_atomic(ctx, OP, path, write_model, model);
}

/* ---- reading -------------------------------------------------------------------- */

static hyprof_status_t bad(hyprof__reader_t *r, const char *what, const char *text)
{
    char q[64];
    return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, OP, "'%s' line %d: %s '%s'", r->path,
                         r->lineno, what, hyprof__quote(text, q));
}

/* Next integer of a line: decimal digits with an optional '-', no overflow,
 * within [min, max]; advances *s. */
static int next_int(const char **s, long min, long max, long *out)
{
    const char *v = *s;
    while (*v == ' ' || *v == '\t')
        v++;
    if (!((*v >= '0' && *v <= '9') || (*v == '-' && v[1] >= '0' && v[1] <= '9')))
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || x < min || x > max || (*end && *end != ' ' && *end != '\t'))
        return 0;
    *out = x;
    *s = end;
    return 1;
}

static char *dup_text(const char *s) { return strdup(s ? s : ""); }

static hyprof_status_t read_kind(hyprof__reader_t *r, hyprof_classifier_kind_t *kind)
{
    const char *v;
    hyprof_status_t st = hyprof__read_line(r, "kind", &v);
    if (st)
        return st;
    if (strcmp(v, "svm") == 0)
        *kind = HYPROF_CLASSIFIER_SVM;
    else if (strcmp(v, "elm") == 0)
        *kind = HYPROF_CLASSIFIER_ELM;
    else
        return bad(r, "unknown classifier kind", v);
    return HYPROF_OK;
}

static hyprof_status_t read_class(hyprof__reader_t *r, hyprof_classifier_t *m, size_t k)
{
    const char *v;
    hyprof_status_t st = hyprof__read_line(r, "class", &v);
    if (st)
        return st;
    const char *s = v;
    long value = 0, c[4] = {0, 0, 0, 0};
    int ok = next_int(&s, 1, 65535, &value);
    for (int i = 0; ok && i < 4; i++)
        ok = next_int(&s, 0, 255, &c[i]);
    if (!ok || (*s && *s != ' ') || (k > 0 && value <= m->values[k - 1]))
        return bad(r, "expected 'class VALUE R G B A NAME' with increasing values 1..65535 "
                      "and R G B A 0..255, found", v);
    m->values[k] = (int)value;
    for (int i = 0; i < 4; i++)
        m->rgba[4 * k + i] = (uint8_t)c[i];
    m->names[k] = dup_text(*s ? s + 1 : s);
    return m->names[k] ? HYPROF_OK : HYPROF_ERR_NOMEM;
}

static hyprof_status_t read_ints(hyprof__reader_t *r, const char *key, int *out, size_t n)
{
    const char *v;
    hyprof_status_t st = hyprof__read_line(r, key, &v);
    if (st)
        return st;
    for (size_t i = 0; i < n; i++) {
        long x;
        if (!next_int(&v, 0, 1000000000, &x))
            return bad(r, "bad integer list, found", v);
        out[i] = (int)x;
    }
    while (*v == ' ' || *v == '\t')
        v++;
    return *v ? bad(r, "too many values:", v) : HYPROF_OK;
}

static hyprof_status_t expect_line(hyprof__reader_t *r, const char *key, const char *value)
{
    const char *v;
    hyprof_status_t st = hyprof__read_line(r, key, &v);
    if (st)
        return st;
    return strcmp(v, value) == 0 ? HYPROF_OK : bad(r, key, v);
}

/* One support vector line: nr_class - 1 coefficients then 1:v .. B:v (an
 * index LIBSVM left out because its value was 0 reads as 0; a line the file
 * ends inside, whose cut values would read as 0 too, hyprof__read_raw
 * refuses). */
static hyprof_status_t read_sv(hyprof__reader_t *r, hyprof_classifier_t *m, size_t i)
{
    hyprof__svm_t *s = &m->svm;
    int got = hyprof__read_raw(r);
    if (got < 0)
        return HYPROF_ERR_FORMAT;
    if (got == 0)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, OP,
                             "'%s' ends early: line %d (support vector %zu of %zu) is missing",
                             r->path, r->lineno, i + 1, s->nsv);
    const char *v = r->line;
    char *end;
    for (size_t k = 0; k + 1 < s->nr_class; k++) {
        s->coef[k * s->nsv + i] = strtod(v, &end);
        if (end == v || !isfinite(s->coef[k * s->nsv + i]))
            return bad(r, "bad support vector coefficient in", r->line);
        v = end;
    }
    double *x = s->sv + i * m->bands;
    long last = 0;
    for (;;) {
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v == '\0')
            break;
        errno = 0;
        long idx = *v >= '0' && *v <= '9' ? strtol(v, &end, 10) : 0;
        if (errno || idx == 0 || *end != ':' || idx <= last || idx > (long)m->bands)
            return bad(r, "bad index:value (indices must increase within 1..bands) in", v);
        v = end + 1;
        x[idx - 1] = strtod(v, &end);
        if (end == v || !isfinite(x[idx - 1]))
            return bad(r, "bad support vector value in", v);
        if (*end && *end != ' ' && *end != '\t')
            return bad(r, "bad support vector value in", v);
        v = end;
        last = idx;
    }
    return HYPROF_OK;
}

static hyprof_status_t alloc_svm(hyprof__svm_t *s, size_t bands)
{
    size_t npairs = s->nr_class * (s->nr_class - 1) / 2;
    s->label = calloc(s->nr_class, sizeof *s->label);
    s->nsv_class = calloc(s->nr_class, sizeof *s->nsv_class);
    s->rho = calloc(npairs, sizeof *s->rho);
    s->coef = calloc((s->nr_class - 1) * s->nsv, sizeof *s->coef);
    s->sv = calloc(s->nsv * bands, sizeof *s->sv);
    return s->label && s->nsv_class && s->rho && s->coef && s->sv ? HYPROF_OK : HYPROF_ERR_NOMEM;
}

/* The labels must be the model's classes and the counts add up. */
static hyprof_status_t check_svm(hyprof__reader_t *r, const hyprof_classifier_t *m)
{
    const hyprof__svm_t *s = &m->svm;
    size_t total = 0;
    for (size_t k = 0; k < s->nr_class; k++) {
        char v[32];
        snprintf(v, sizeof v, "%d", s->label[k]);
        if (hyprof__class_index(m, s->label[k]) < 0)
            return bad(r, "LIBSVM label is not one of the model's classes:", v);
        for (size_t j = 0; j < k; j++)
            if (s->label[j] == s->label[k])
                return bad(r, "LIBSVM label repeated:", v);
        total += (size_t)s->nsv_class[k];
    }
    if (total != s->nsv)
        return bad(r, "nr_sv does not add up to total_sv", "");
    return HYPROF_OK;
}

static hyprof_status_t read_libsvm(hyprof__reader_t *r, hyprof_classifier_t *m)
{
    hyprof__svm_t *s = &m->svm;
    hyprof_status_t st;
    if ((st = hyprof__read_doubles(r, "svm_c", &s->c, 1)) ||
        (st = expect_line(r, "libsvm_model", "")) || (st = expect_line(r, "svm_type", "c_svc")) ||
        (st = expect_line(r, "kernel_type", "rbf")) ||
        (st = hyprof__read_doubles(r, "gamma", &s->gamma, 1)) ||
        (st = hyprof__read_size(r, "nr_class", m->nclasses, m->nclasses, &s->nr_class)) ||
        (st = hyprof__read_size(r, "total_sv", 1, 100000000, &s->nsv)))
        return st;
    /* Each support vector line holds at least its nr_class - 1 coefficients. */
    size_t per_sv = (m->bands + s->nr_class) * sizeof(double);
    if ((st = hyprof__reader_expect(r, "total_sv", s->nsv, 2 * (s->nr_class - 1),
                                    hyprof__mul_sat(s->nsv, per_sv))))
        return st;
    if (alloc_svm(s, m->bands) != HYPROF_OK)
        return hyprof__error(r->ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate %zu support vectors",
                             s->nsv);
    if ((st = hyprof__read_doubles(r, "rho", s->rho, s->nr_class * (s->nr_class - 1) / 2)) ||
        (st = read_ints(r, "label", s->label, s->nr_class)) ||
        (st = read_ints(r, "nr_sv", s->nsv_class, s->nr_class)) || (st = check_svm(r, m)) ||
        (st = expect_line(r, "SV", "")))
        return st;
    for (size_t i = 0; i < s->nsv && st == HYPROF_OK; i++)
        st = read_sv(r, m, i);
    return st;
}

static hyprof_status_t read_elm(hyprof__reader_t *r, hyprof_classifier_t *m)
{
    hyprof__elm_t *e = &m->elm;
    size_t seed = 0;
    hyprof_status_t st;
    if ((st = hyprof__read_size(r, "neurons", 1, 1000000, &e->neurons)) ||
        (st = hyprof__read_doubles(r, "elm_c", &e->c, 1)) ||
        (st = hyprof__read_size(r, "seed", 0, (size_t)-1, &seed)))
        return st;
    /* Each neuron has a weight line of B numbers and a beta line of K. */
    size_t per_neuron = (m->bands + m->nclasses + 1) * sizeof(double);
    if ((st = hyprof__reader_expect(r, "neurons", e->neurons, 2 * (m->bands + m->nclasses),
                                    hyprof__mul_sat(e->neurons, per_neuron))))
        return st;
    e->seed = seed;
    e->w = calloc(e->neurons * m->bands, sizeof *e->w);
    e->bias = calloc(e->neurons, sizeof *e->bias);
    e->beta = calloc(e->neurons * m->nclasses, sizeof *e->beta);
    if (!e->w || !e->bias || !e->beta)
        return hyprof__error(r->ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate %zu neurons",
                             e->neurons);
    char key[32];
    for (size_t h = 0; h < e->neurons && st == HYPROF_OK; h++) {
        snprintf(key, sizeof key, "weight %zu", h + 1);
        st = hyprof__read_doubles(r, key, e->w + h * m->bands, m->bands);
    }
    if (st == HYPROF_OK)
        st = hyprof__read_doubles(r, "bias", e->bias, e->neurons);
    for (size_t h = 0; h < e->neurons && st == HYPROF_OK; h++) {
        snprintf(key, sizeof key, "beta %zu", h + 1);
        st = hyprof__read_doubles(r, key, e->beta + h * m->nclasses, m->nclasses);
    }
    return st;
}

/* "hyprof-classifier 1", "2" (with a profile recipe) or "3" (fused). */
static hyprof_status_t read_version(hyprof__reader_t *r, int *version)
{
    const char *v;
    if (hyprof__read_line(r, "hyprof-classifier", &v) != HYPROF_OK)
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, OP, "'%s' is not a hyprof-classifier file",
                             r->path);
    if (strcmp(v, "1") != 0 && strcmp(v, "2") != 0 && strcmp(v, "3") != 0) {
        char q[64];
        return hyprof__error(r->ctx, HYPROF_ERR_FORMAT, OP,
                             "'%s': unsupported hyprof-classifier version '%s' (this build "
                             "reads 1 to 3)", r->path, hyprof__quote(v, q));
    }
    *version = v[0] - '0';
    return HYPROF_OK;
}

static hyprof_status_t read_profile(hyprof__reader_t *r, hyprof_classifier_t *m)
{
    const char *v;
    hyprof_status_t st;
    if ((st = hyprof__read_size(r, "input_bands", 1, MAX_BANDS, &m->input_bands)) ||
        (st = hyprof__read_line(r, "profile", &v)))
        return st;
    if (!*v)
        return bad(r, "empty profile recipe", v);
    return (m->profile = strdup(v)) ? HYPROF_OK : HYPROF_ERR_NOMEM;
}

static hyprof_status_t read_header(hyprof__reader_t *r, hyprof_classifier_t **out)
{
    hyprof_classifier_kind_t kind = HYPROF_CLASSIFIER_SVM;
    size_t bands = 0, nclasses = 0;
    hyprof_status_t st;
    if ((st = read_kind(r, &kind)) ||
        (st = hyprof__read_size(r, "bands", 1, MAX_BANDS, &bands)) ||
        (st = hyprof__reader_expect(r, "bands", bands, 4, bands * 5 * sizeof(double))))
        return st;
    /* The band names come before the class count: keep them aside. */
    char **names = calloc(bands, sizeof *names);
    if (!names)
        return hyprof__error(r->ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    for (size_t b = 0; b < bands && st == HYPROF_OK; b++) {
        const char *v;
        st = hyprof__read_line(r, "band", &v);
        if (st == HYPROF_OK && !(names[b] = dup_text(v)))
            st = HYPROF_ERR_NOMEM;
    }
    size_t scale = 0;
    double *mm = calloc(2 * bands, sizeof *mm);
    if (st == HYPROF_OK && !mm)
        st = HYPROF_ERR_NOMEM;
    if (st == HYPROF_OK && !((st = hyprof__read_size(r, "scale", 0, 1, &scale)) ||
                             (st = hyprof__read_doubles(r, "min", mm, bands)) ||
                             (st = hyprof__read_doubles(r, "max", mm + bands, bands)) ||
                             (st = hyprof__read_size(r, "classes", 2, MAX_CLASSES, &nclasses)) ||
                             (st = hyprof__reader_expect(r, "classes", nclasses, 15,
                                                         nclasses * 64)))) {
        *out = hyprof__classifier_new(kind, bands, nclasses);
        if (!*out)
            st = HYPROF_ERR_NOMEM;
    }
    if (st == HYPROF_OK) {
        hyprof_classifier_t *m = *out;
        memcpy(m->band_names, names, bands * sizeof *names);
        memset(names, 0, bands * sizeof *names);
        memcpy(m->min, mm, bands * sizeof *mm);
        memcpy(m->max, mm + bands, bands * sizeof *mm);
        m->scale = (int)scale;
    }
    for (size_t b = 0; b < bands; b++)
        free(names[b]);
    free(names);
    free(mm);
    if (st == HYPROF_ERR_NOMEM)
        hyprof__error(r->ctx, st, OP, "out of memory reading '%s'", r->path);
    return st;
}

/* The classes and the training summary, from "classes" to "cv_accuracy". */
static hyprof_status_t read_summary(hyprof__reader_t *r, hyprof_classifier_t *m)
{
    hyprof_status_t st = HYPROF_OK;
    for (size_t k = 0; st == HYPROF_OK && k < m->nclasses; k++)
        st = read_class(r, m, k);
    size_t ntrain = 0;
    double cv = 0.0;
    if (st == HYPROF_OK && !(st = hyprof__read_size(r, "train_pixels", 0, (size_t)-1, &ntrain)) &&
        !(st = hyprof__read_doubles(r, "cv_accuracy", &cv, 1))) {
        m->ntrain = ntrain;
        m->cv_accuracy = cv < 0.0 ? NAN : cv;
    }
    return st;
}

/* A model of version 1 or 2 after its first line; *out is set even on error. */
static hyprof_status_t read_plain(hyprof__reader_t *r, int version, hyprof_classifier_t **out)
{
    hyprof_status_t st = read_header(r, out);
    hyprof_classifier_t *m = *out;
    if (st == HYPROF_OK)
        st = read_summary(r, m);
    if (st == HYPROF_OK && version == 2)
        st = read_profile(r, m);
    if (st == HYPROF_OK)
        st = m->kind == HYPROF_CLASSIFIER_SVM ? read_libsvm(r, m) : read_elm(r, m);
    return st;
}

/* One member of a fused model: "member J" then a version 2 model with the
 * fused model's classes and input band count. */
static hyprof_status_t read_member(hyprof__reader_t *r, hyprof_classifier_t *m, size_t j)
{
    size_t number = 0;
    int version = 0;
    hyprof_status_t st = hyprof__read_size(r, "member", j + 1, j + 1, &number);
    if (st == HYPROF_OK && (st = read_version(r, &version)) == HYPROF_OK && version != 2)
        st = bad(r, "a fused model's member must be version 2, not", r->line);
    if (st == HYPROF_OK)
        st = read_plain(r, version, &m->member[j]);
    if (st != HYPROF_OK)
        return st;
    const hyprof_classifier_t *e = m->member[j];
    int same = e->nclasses == m->nclasses && e->input_bands == m->input_bands;
    for (size_t k = 0; same && k < m->nclasses; k++)
        same = e->values[k] == m->values[k];
    return same ? HYPROF_OK
                : hyprof__error(r->ctx, HYPROF_ERR_FORMAT, OP,
                                "'%s' line %d: member %zu's classes or input band count differ "
                                "from the fused model's", r->path, r->lineno, j + 1);
}

/* A fused model (version 3) after its first line. */
static hyprof_status_t read_fused(hyprof__reader_t *r, hyprof_classifier_t **out)
{
    const char *v;
    size_t members = 0, majority = 0, nclasses = 0, input_bands = 0;
    hyprof_status_t st;
    if ((st = hyprof__read_line(r, "fusion", &v)))
        return st;
    if (strcmp(v, "vote") != 0)
        return bad(r, "unknown fusion rule", v);
    if ((st = hyprof__read_size(r, "members", 1, HYPROF_FUSION_MAX_MEMBERS, &members)) ||
        (st = hyprof__read_size(r, "majority", 0, HYPROF_FUSION_MAX_WINDOW, &majority)) ||
        (st = hyprof__read_size(r, "classes", 2, MAX_CLASSES, &nclasses)) ||
        (st = hyprof__reader_expect(r, "classes", nclasses, 15, nclasses * 64)))
        return st;
    if (majority == 1 || (majority && majority % 2 == 0))
        return bad(r, "the majority window must be odd (0: none), not", r->line);
    hyprof_classifier_t *m = *out = hyprof__classifier_new(HYPROF_CLASSIFIER_SVM, 1, nclasses);
    if (!m || !(m->member = calloc(members, sizeof *m->member)))
        return HYPROF_ERR_NOMEM;
    m->nmembers = members;
    m->majority = (int)majority;
    if ((st = read_summary(r, m)) ||
        (st = hyprof__read_size(r, "input_bands", 1, MAX_BANDS, &input_bands)))
        return st;
    m->input_bands = input_bands;
    for (size_t j = 0; st == HYPROF_OK && j < members; j++)
        st = read_member(r, m, j);
    return st == HYPROF_OK ? hyprof__fusion_describe(m) : st;
}

hyprof_status_t hyprof_classifier_load(hyprof_ctx_t *ctx, const char *path,
                                       hyprof_classifier_t **model)
{
    *model = NULL;
    hyprof__reader_t r;
    hyprof_status_t st = hyprof__reader_open(ctx, OP, path, &r);
    if (st != HYPROF_OK)
        return st;
    hyprof_classifier_t *m = NULL;
    int version = 1;
    st = read_version(&r, &version);
    if (st == HYPROF_OK)
        st = version == 3 ? read_fused(&r, &m) : read_plain(&r, version, &m);
    int more = st == HYPROF_OK ? hyprof__read_raw(&r) : 0;
    if (more != 0)
        st = more < 0 ? HYPROF_ERR_FORMAT : bad(&r, "unexpected text after the model:", r.line);
    if (st == HYPROF_ERR_NOMEM)
        hyprof__error(ctx, st, OP, "out of memory reading '%s'", path);
    hyprof__reader_close(&r);
    if (st != HYPROF_OK)
        hyprof_classifier_free(&m);
    *model = m;
    return st;
}
