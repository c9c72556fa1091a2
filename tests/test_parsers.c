/* Unit tests of the library's parsers, limits and cancellation points: model
 * files (classifier, PCA, endmember CSV) that are cut short, written with
 * CRLF, or declare sizes they do not hold; argument text (signs, overflow,
 * long lists); the EADP schedule's bound and its cancellation. Run as
 * `test_parsers SOURCE_DIR` (for samples/). Exits non-zero on any failure. */
#define _GNU_SOURCE
#include "hyprof/hyprof.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures, checks;
static const char *source_dir = ".";
static char tmpdir[256];

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        checks++;                                                             \
        if (!(cond)) {                                                        \
            failures++;                                                       \
            fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

/* Contents of a file (NUL-terminated, *len bytes), or NULL. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s) {
        s[n] = '\0';
        *len = (size_t)n;
    }
    return s;
}

static const char *spit(const char *name, const char *data, size_t len)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
    return path;
}

static const char *sample(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/samples/%s", source_dir, name);
    return path;
}

/* The library's message: one line, no raw control byte. */
static int one_line(const char *msg)
{
    for (const char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20)
            return 0;
    return 1;
}

/* `text` with every "\n" turned into "\r\n". */
static char *to_crlf(const char *text, size_t len, size_t *out_len)
{
    char *s = malloc(2 * len + 1), *o = s;
    for (size_t i = 0; s && i < len; i++) {
        if (text[i] == '\n')
            *o++ = '\r';
        *o++ = text[i];
    }
    if (s)
        *o = '\0';
    *out_len = (size_t)(o - s);
    return s;
}

/* `text` with the first "key VALUE" line's value replaced. */
static char *replace_line(const char *text, const char *key, const char *line)
{
    const char *at = strstr(text, key);
    if (!at)
        return NULL;
    const char *end = strchr(at, '\n');
    size_t head = (size_t)(at - text), n = strlen(line);
    char *s = malloc(strlen(text) + n + 2);
    if (!s)
        return NULL;
    memcpy(s, text, head);
    memcpy(s + head, line, n);
    strcpy(s + head + n, end ? end : "");
    return s;
}

static hyprof_status_t load_classifier(hyprof_ctx_t *ctx, const char *name, const char *data,
                                       size_t len)
{
    hyprof_classifier_t *m = NULL;
    hyprof_status_t st = hyprof_classifier_load(ctx, spit(name, data, len), &m);
    CHECK(st != HYPROF_OK || m != NULL, "%s: OK without a model", name);
    CHECK(st == HYPROF_OK || m == NULL, "%s: a model with an error", name);
    CHECK(one_line(hyprof_ctx_last_error(ctx)), "%s: message spans lines: %s", name,
          hyprof_ctx_last_error(ctx));
    hyprof_classifier_free(&m);
    return st;
}

static void test_svm_model(void)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    size_t len = 0;
    char *text = slurp(sample("indian_pines_svm.model"), &len);
    CHECK(text != NULL, "cannot read %s", sample("indian_pines_svm.model"));
    if (!text) {
        hyprof_ctx_free(&ctx);
        return;
    }
    CHECK(load_classifier(ctx, "intact.model", text, len) == HYPROF_OK, "intact: %s",
          hyprof_ctx_last_error(ctx));
    /* Cut inside the last support vector's line: the values cut off would
     * read as 0 (728 of Indian Pines' 21,025 labels change). */
    CHECK(load_classifier(ctx, "cut.model", text, len - 300) == HYPROF_ERR_FORMAT,
          "a model cut inside its last support vector loads");
    CHECK(strstr(hyprof_ctx_last_error(ctx), "line ") != NULL, "no line named: %s",
          hyprof_ctx_last_error(ctx));
    /* Cut after a newline: a whole support vector is missing. */
    const char *last_nl = text + len - 1;
    const char *prev_nl = last_nl - 1;
    while (prev_nl > text && *prev_nl != '\n')
        prev_nl--;
    CHECK(load_classifier(ctx, "noline.model", text, (size_t)(prev_nl - text) + 1) ==
              HYPROF_ERR_FORMAT, "a model without its last line loads");
    /* Without its final newline the last value may have lost digits. */
    CHECK(load_classifier(ctx, "nonl.model", text, len - 1) == HYPROF_ERR_FORMAT,
          "a model without its final newline loads");
    size_t clen;
    char *crlf = to_crlf(text, len, &clen);
    CHECK(load_classifier(ctx, "crlf.model", crlf, clen) == HYPROF_OK, "CRLF model: %s",
          hyprof_ctx_last_error(ctx));
    CHECK(load_classifier(ctx, "crlf_cut.model", crlf, clen - 400) == HYPROF_ERR_FORMAT,
          "a CRLF model cut short loads");
    free(crlf);
    /* Integers that overflow or carry a sign are refused, not wrapped. */
    const char *bad_lines[][2] = {
        {"class 1 ", "class 4294967297 255 254 137 255 Alfalfa"},
        {"class 1 ", "class 1 4294967296 254 137 255 Alfalfa"},
        {"class 1 ", "class 1 -1 254 137 255 Alfalfa"},
        {"nr_class", "nr_class -16"},
        {"total_sv", "total_sv 18446744073709551926"},
        {"total_sv", "total_sv -1"},
        {"bands 15", "bands 15x"},
    };
    for (size_t i = 0; i < sizeof bad_lines / sizeof bad_lines[0]; i++) {
        char *t = replace_line(text, bad_lines[i][0], bad_lines[i][1]);
        CHECK(t && load_classifier(ctx, "bad.model", t, strlen(t)) == HYPROF_ERR_FORMAT,
              "'%s' accepted", bad_lines[i][1]);
        free(t);
    }
    /* A declared size the file cannot hold fails before anything is allocated
     * for it, as a format error (exit 2), not out of memory (exit 1). */
    char *t = replace_line(text, "total_sv", "total_sv 100000000");
    CHECK(t && load_classifier(ctx, "huge.model", t, strlen(t)) == HYPROF_ERR_FORMAT,
          "total_sv 1e8 in a 136 KB file: %s", hyprof_ctx_last_error(ctx));
    free(t);
    /* A NUL byte in a line is not text. */
    char *nul = malloc(len);
    memcpy(nul, text, len);
    nul[len / 2] = '\0';
    CHECK(load_classifier(ctx, "nul.model", nul, len) == HYPROF_ERR_FORMAT, "NUL byte accepted");
    free(nul);
    free(text);
    hyprof_ctx_free(&ctx);
}

static const char *elm_model =
    "hyprof-classifier 1\nkind elm\nbands 2\nband a\nband b\nscale 0\nmin 0 0\nmax 1 1\n"
    "classes 2\nclass 1 0 0 0 255 one\nclass 2 255 255 255 255 two\ntrain_pixels 4\n"
    "cv_accuracy -1\nneurons 2\nelm_c 1\nseed 7\nweight 1 0.5 -0.5\nweight 2 0.25 0.75\n"
    "bias 0.1 0.2\nbeta 1 1 -1\nbeta 2 -1 1\n";

static void test_elm_model(void)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    CHECK(load_classifier(ctx, "elm.model", elm_model, strlen(elm_model)) == HYPROF_OK,
          "ELM model: %s", hyprof_ctx_last_error(ctx));
    char *t = replace_line(elm_model, "seed", "seed -1");
    CHECK(load_classifier(ctx, "elm_seed.model", t, strlen(t)) == HYPROF_ERR_FORMAT,
          "seed -1 read as 2^64 - 1");
    free(t);
    t = replace_line(elm_model, "neurons", "neurons 1000000");
    CHECK(load_classifier(ctx, "elm_huge.model", t, strlen(t)) == HYPROF_ERR_FORMAT,
          "neurons 1e6 in a 300-byte file: %s", hyprof_ctx_last_error(ctx));
    free(t);
    /* The last line cut inside its last number: fewer values than declared. */
    CHECK(load_classifier(ctx, "elm_cut.model", elm_model, strlen(elm_model) - 3) ==
              HYPROF_ERR_FORMAT, "a cut ELM model loads");
    CHECK(strstr(hyprof_ctx_last_error(ctx), "line 21") != NULL, "line not named: %s",
          hyprof_ctx_last_error(ctx));
    hyprof_ctx_free(&ctx);
}

static void test_pca_model(void)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    size_t len = 0;
    char *text = slurp(sample("samson.pca"), &len);
    CHECK(text != NULL, "samson.pca");
    if (!text) {
        hyprof_ctx_free(&ctx);
        return;
    }
    hyprof_pca_model_t *m = NULL;
    CHECK(hyprof_pca_model_load(ctx, spit("ok.pca", text, len), &m) == HYPROF_OK, "%s",
          hyprof_ctx_last_error(ctx));
    hyprof_pca_model_free(&m);
    size_t clen;
    char *crlf = to_crlf(text, len, &clen);
    CHECK(hyprof_pca_model_load(ctx, spit("crlf.pca", crlf, clen), &m) == HYPROF_OK,
          "CRLF PCA model: %s", hyprof_ctx_last_error(ctx));
    hyprof_pca_model_free(&m);
    free(crlf);
    CHECK(hyprof_pca_model_load(ctx, spit("cut.pca", text, len - 10), &m) == HYPROF_ERR_FORMAT,
          "a cut PCA model loads");
    char *t = replace_line(text, "bands", "bands 1000000");
    char *t2 = t ? replace_line(t, "components", "components 1000000") : NULL;
    CHECK(t2 && hyprof_pca_model_load(ctx, spit("huge.pca", t2, strlen(t2)), &m) ==
                    HYPROF_ERR_FORMAT,
          "a 13 KB PCA model declaring 1e6 x 1e6: %s", hyprof_ctx_last_error(ctx));
    CHECK(one_line(hyprof_ctx_last_error(ctx)), "%s", hyprof_ctx_last_error(ctx));
    free(t);
    free(t2);
    t = replace_line(text, "hyprof-pca-model", "hyprof-pca-model 1\r\r");
    CHECK(t && hyprof_pca_model_load(ctx, spit("cr.pca", t, strlen(t)), &m) ==
                   HYPROF_ERR_FORMAT && one_line(hyprof_ctx_last_error(ctx)),
          "stray CR: %s", hyprof_ctx_last_error(ctx));
    free(t);
    free(text);
    hyprof_ctx_free(&ctx);
}

static void test_endmembers_csv(void)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    const char *csv = "band,wavelength,E1,E2\n1,400,0.5,0.25\n2,410,0.75,0.125\n";
    hyprof_endmembers_t *e = NULL;
    CHECK(hyprof_endmembers_load_csv(ctx, spit("e.csv", csv, strlen(csv)), &e) == HYPROF_OK,
          "%s", hyprof_ctx_last_error(ctx));
    hyprof_endmembers_free(&e);
    size_t clen;
    char *crlf = to_crlf(csv, strlen(csv), &clen);
    CHECK(hyprof_endmembers_load_csv(ctx, spit("e2.csv", crlf, clen), &e) == HYPROF_OK,
          "CRLF CSV: %s", hyprof_ctx_last_error(ctx));
    hyprof_endmembers_free(&e);
    free(crlf);
    /* The last row cut: fewer values than the header's columns. */
    CHECK(hyprof_endmembers_load_csv(ctx, spit("e3.csv", csv, strlen(csv) - 7), &e) ==
              HYPROF_ERR_FORMAT, "a cut CSV loads");
    CHECK(strstr(hyprof_ctx_last_error(ctx), "line 3") != NULL, "%s",
          hyprof_ctx_last_error(ctx));
    const char nul[] = "band,wavelength,E1\n1,400,0.5\0garbage\n";
    CHECK(hyprof_endmembers_load_csv(ctx, spit("e4.csv", nul, sizeof nul - 1), &e) ==
              HYPROF_ERR_FORMAT, "NUL byte accepted");
    hyprof_ctx_free(&ctx);
}

static void test_args(void)
{
    const hyprof_op_t *eadp = hyprof_op_find("eadp"), *split = hyprof_op_find("split");
    hyprof_args_t *a = hyprof_args_new(eadp);
    /* A list is parsed whole, however long (3,001 values: no cut). */
    size_t cap = 3001 * 12, len = 0;
    char *list = malloc(cap);
    for (int i = 1; i <= 3001; i++)
        len += (size_t)snprintf(list + len, cap - len, "%s%d", i > 1 ? "," : "", i);
    CHECK(hyprof_args_set(a, "times", list) == HYPROF_OK, "%s", hyprof_args_error(a));
    size_t n = 0;
    const double *t = hyprof_args_list(a, "times", &n);
    CHECK(n == 3001 && t && t[3000] == 3001.0, "3,001 times parsed as %zu", n);
    free(list);
    const char *bad_times[] = {"1,", ",1", "1,,2", "1, ", "0x10", "1e400", "nan", "1 2"};
    for (size_t i = 0; i < sizeof bad_times / sizeof *bad_times; i++)
        CHECK(hyprof_args_set(a, "times", bad_times[i]) == HYPROF_ERR_ARGUMENT, "times='%s'",
              bad_times[i]);
    CHECK(hyprof_args_set(a, "times", "1,,3") == HYPROF_ERR_ARGUMENT &&
              strstr(hyprof_args_error(a), "element 2 of 3 is empty") != NULL,
          "%s", hyprof_args_error(a));
    CHECK(hyprof_args_set(a, "count", "99999999999999999999") == HYPROF_ERR_ARGUMENT,
          "overflow accepted");
    CHECK(hyprof_args_set(a, "count", "4294967297") == HYPROF_ERR_ARGUMENT, "2^32+1 accepted");
    CHECK(hyprof_args_set(a, "count", "8 ") == HYPROF_ERR_ARGUMENT, "trailing text accepted");
    CHECK(hyprof_args_set(a, "contrast", "1e-400") == HYPROF_ERR_ARGUMENT,
          "underflow to 0 below the minimum accepted");
    hyprof_args_free(&a);
    a = hyprof_args_new(split);
    CHECK(hyprof_args_set(a, "seed", "-1") == HYPROF_ERR_ARGUMENT, "seed -1 accepted");
    CHECK(hyprof_args_set(a, "seed", "-0") == HYPROF_ERR_ARGUMENT, "seed -0 accepted");
    CHECK(strstr(hyprof_args_error(a), "negative") != NULL, "%s", hyprof_args_error(a));
    CHECK(hyprof_args_set(a, "seed", "4294967295") == HYPROF_OK &&
              hyprof_args_int(a, "seed") == 4294967295L, "the largest seed");
    CHECK(hyprof_args_set(a, "seed", "4294967296") == HYPROF_ERR_ARGUMENT, "seed 2^32 accepted");
    CHECK(strstr(hyprof_args_error(a), "4294967295") != NULL, "range not printed whole: %s",
          hyprof_args_error(a));
    hyprof_args_free(&a);
}

/* Cancels at its first call and records the fraction reported then. */
static int cancel_first(void *user, double fraction, const char *stage)
{
    (void)stage;
    double *first = user;
    if (isnan(*first))
        *first = fraction;
    return 1;
}

static void test_eadp_bounds(void)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_ctx_set_backend(ctx, HYPROF_BACKEND_CPU);
    size_t w = 128, h = 128;
    float *px = malloc(w * h * sizeof *px);
    for (size_t i = 0; i < w * h; i++)
        px[i] = (float)((i * 7919) % 101);
    hyprof_cube_t in = hyprof_cube_bsq(px, HYPROF_FLOAT32, w, h, 1);
    hyprof_cube_t out;
    hyprof_eadp_params_t p;
    hyprof_eadp_params_default(&p);
    /* The registry's largest step asks for 109,545 steps a cycle (an
     * O(n^2) ordering of minutes): refused at once, naming the value. */
    double big[1] = {1e9};
    p.times = big;
    p.ntimes = 1;
    CHECK(hyprof_eadp(ctx, &in, &p, &out, NULL) == HYPROF_ERR_ARGUMENT, "times 1e9 accepted");
    CHECK(strstr(hyprof_ctx_last_error(ctx), "1e+09") != NULL, "%s", hyprof_ctx_last_error(ctx));
    /* 3e5 in one cycle: 2,000 steps of 16,384 pixels; a cancel asked at the
     * first progress report is honoured before the increment ends. */
    double t[1] = {3e5};
    p.times = t;
    double first = NAN;
    hyprof_ctx_set_progress(ctx, cancel_first, &first);
    CHECK(hyprof_eadp(ctx, &in, &p, &out, NULL) == HYPROF_ERR_CANCELLED, "not cancelled: %s",
          hyprof_ctx_last_error(ctx));
    CHECK(first < 0.5, "first chance to cancel at %g of the work", first);
    hyprof_ctx_free(&ctx);
    free(px);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        source_dir = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hyprof_test_parsers_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_svm_model();
    test_elm_model();
    test_pca_model();
    test_endmembers_csv();
    test_args();
    test_eadp_bounds();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    printf("test_parsers: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
