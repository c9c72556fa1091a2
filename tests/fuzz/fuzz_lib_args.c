/* libFuzzer target: argument parsing (hyprof_args_set, hyprof_args_check, the
 * typed getters) for every registry parameter, then the operation's band
 * count (hyprof_op_output_bands), which parses what the registry leaves as
 * text (lists of attributes, devices, levels). Input: one byte choosing the
 * operation, one byte the input band count, then lines NAME=VALUE. Files are
 * never named: parameters that take a path are skipped, so the target reads
 * nothing from disk.
 *
 * By hand: build libhyprof with -fsanitize=fuzzer-no-link,address,undefined, then
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_lib_args.c \
 *         -Lbuild -lhyprof && ./a.out tests/fuzz/corpus/lib_args
 */
#include "hyprof/hyprof.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int takes_path(const hyprof_param_t *p)
{
    return p->type == HYPROF_PARAM_FILE_IN || p->type == HYPROF_PARAM_FILE_OUT ||
           p->type == HYPROF_PARAM_RASTER_IN;
}

static void read_back(const hyprof_args_t *a, const hyprof_op_t *op)
{
    volatile double sum = 0.0;
    for (size_t i = 0; i < op->nparams; i++) {
        const char *name = op->params[i].name;
        size_t n = 0;
        const double *list = hyprof_args_list(a, name, &n);
        for (size_t k = 0; list && k < n; k++)
            sum += list[k];
        const char *s = hyprof_args_str(a, name);
        sum += s ? (double)strlen(s) : 0.0;
        sum += (double)hyprof_args_int(a, name) + (double)hyprof_args_bool(a, name);
        (void)hyprof_args_float(a, name);
    }
    (void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || hyprof_op_count() == 0)
        return 0;
    const hyprof_op_t *op = hyprof_op_at(data[0] % hyprof_op_count());
    size_t in_bands = 1 + data[1];
    char *text = malloc(size - 1);
    if (!text)
        return 0;
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';
    hyprof_args_t *a = hyprof_args_new(op);
    int skipped = 0;
    for (char *line = text, *next; a && line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const hyprof_param_t *p = hyprof_op_param(op, line);
        if (p && takes_path(p)) {
            skipped = 1;
            continue;
        }
        (void)hyprof_args_set(a, line, eq + 1);
        (void)hyprof_args_error(a);
    }
    if (a && hyprof_args_check(a) == HYPROF_OK) {
        read_back(a, op);
        /* Required paths left unset make the check fail; so does a skipped one. */
        hyprof_ctx_t *ctx = hyprof_ctx_new();
        size_t bands = 0;
        if (ctx && !skipped && op->bands)
            (void)hyprof_op_output_bands(ctx, op, a, in_bands, &bands);
        hyprof_ctx_free(&ctx);
    }
    hyprof_args_free(&a);
    free(text);
    return 0;
}
