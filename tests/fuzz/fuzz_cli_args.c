/* Fuzz target: the command-line parser of the hyprof executable (cli/options.c
 * cli_parse), the code every QGIS run and every user's typing goes through.
 *
 * The input is argv after the program name, its elements separated by NUL
 * bytes: the first names the operation (an unknown name picks one from the
 * registry by its first byte, so every operation's options are reached), the
 * rest are its arguments as cli_parse receives them. Besides ASan and UBSan,
 * the target checks what the parser promises: an exit code of the CLI
 * contract (0, 1 or 2, never an exit or abort of its own); on success the
 * registry's number of file arguments, each one of the given arguments, and
 * every given option readable back; --help prints the operation's help. The
 * help text goes to an in-memory file, the one-line error messages to stderr
 * (run with -close_fd_mask=2 to silence them). Seeds: corpus/cli_args/. */
#define _GNU_SOURCE
#include "cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 64

static void fail(const char *what, int rc)
{
    fprintf(stderr, "fuzz_cli_args: %s (rc %d)\n", what, rc);
    abort();
}

/* The NUL-separated elements of data, copied (the last needs no NUL). */
static int split_args(const uint8_t *data, size_t size, char *buf, char **argv)
{
    memcpy(buf, data, size);
    buf[size] = '\0';
    int argc = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && argc < MAX_ARGS; i++)
        if (i == size || buf[i] == '\0') {
            argv[argc++] = buf + start;
            start = i + 1;
        }
    return argc;
}

static int is_given(char **argv, int argc, const char *s)
{
    for (int i = 0; i < argc; i++)
        if (argv[i] == s)
            return 1;
    return 0;
}

static void check_parsed(const cli_command_t *c, char **argv, int argc)
{
    int want = cli_positionals(c->op, -1, NULL, 0, NULL, 0);
    if (c->nfiles != want || !c->input || (want > 1) != (c->output != NULL))
        fail("file arguments differ from the registry's", c->nfiles);
    for (int i = 0; i < c->nfiles; i++)
        if (!is_given(argv, argc, c->files[i]))
            fail("a file argument that was not given", i);
    for (size_t i = 0; i < c->op->nparams; i++) {
        const char *name = c->op->params[i].name;
        if (hyprof_args_given(c->args, name) && !hyprof_args_str(c->args, name))
            fail("a given option without a value", (int)i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > 4096)
        return 0;
    char *buf = malloc(size + 1), *argv[MAX_ARGS + 1];
    if (!buf)
        return 0;
    int argc = split_args(data, size, buf, argv);
    argv[argc] = NULL;
    const hyprof_op_t *op = hyprof_op_find(argv[0]);
    if (!op)
        op = hyprof_op_at((size_t)data[0] % hyprof_op_count());
    cli_command_t c;
    int rc = cli_parse(op, argc - 1, argv + 1, &c);
    if (rc != EXIT_OK && rc != EXIT_USAGE && rc != EXIT_RUNTIME)
        fail("an exit code outside the CLI contract", rc);
    if (rc == EXIT_OK && c.help) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) {
            cli_print_op_help(f, op);
            fclose(f);
            if (!len)
                fail("an empty help text", 0);
        }
        free(text);
    } else if (rc == EXIT_OK) {
        check_parsed(&c, argv + 1, argc - 1);
    }
    cli_command_free(&c);
    free(buf);
    return 0;
}
