/* Command-line options of an operation, parsed through the registry. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

const hyprof_op_t *cli_common_op(void)
{
    static hyprof_op_t common;
    if (!common.name) {
        common.name = "common";
        common.params = hyprof_common_params(&common.nparams);
    }
    return &common;
}

void cli_command_free(cli_command_t *cmd)
{
    hyprof_args_free(&cmd->args);
    hyprof_args_free(&cmd->common);
    free(cmd->co);
    cmd->co = NULL;
    cmd->nco = 0;
}

size_t cli_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return (size_t)-1;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* The option of op or the common ones closest to `name`, when it is close
 * enough to be a typo of it (at most 2 edits, or a third of its length). */
static const char *closest_option(const hyprof_op_t *op, const char *name)
{
    const hyprof_op_t *ops[2] = {op, cli_common_op()};
    const char *best = NULL;
    size_t best_d = (size_t)-1, len = strlen(name);
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < ops[k]->nparams; i++) {
            size_t d = cli_edit_distance(name, ops[k]->params[i].name);
            if (d < best_d) {
                best_d = d;
                best = ops[k]->params[i].name;
            }
        }
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit ? best : NULL;
}

static void unknown_option(const hyprof_op_t *op, const char *typed, const char *name)
{
    const char *guess = closest_option(op, name);
    if (guess)
        cli_error(op->name, "unknown option '%s': did you mean --%s?", typed, guess);
    else
        cli_error(op->name, "unknown option '%s' (see 'hyprof %s --help')", typed, op->name);
}

/* --co NAME=VALUE, which may be repeated: kept in order for the writer. */
static int add_creation_option(cli_command_t *cmd, const char *value)
{
    const char *eq = strchr(value, '=');
    if (!eq || eq == value) {
        cli_error(cmd->op->name, "--co '%s': a creation option is NAME=VALUE", value);
        return -1;
    }
    const char **co = realloc(cmd->co, (cmd->nco + 2) * sizeof *co);
    if (!co) {
        cli_error(cmd->op->name, "out of memory");
        return -1;
    }
    cmd->co = co;
    co[cmd->nco++] = value;
    co[cmd->nco] = NULL;
    return 0;
}

/* Sets --name[=value] (value possibly the next argument); returns the number
 * of extra arguments consumed, or -1 after printing an error. */
static int parse_option(cli_command_t *cmd, const char *arg, const char *next)
{
    char name[64];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof name) {
        cli_error(cmd->op->name, "unknown option '--%.40s...'", arg);
        return -1;
    }
    memcpy(name, arg, len);
    name[len] = '\0';
    hyprof_args_t *target = cmd->args;
    const hyprof_param_t *p = hyprof_op_param(cmd->op, name);
    if (!p) {
        target = cmd->common;
        p = hyprof_op_param(cli_common_op(), name);
    }
    if (!p) {
        char typed[72];
        snprintf(typed, sizeof typed, "--%s", name);
        unknown_option(cmd->op, typed, name);
        return -1;
    }
    const char *value = eq ? eq + 1 : NULL;
    int used = 0;
    if (!value && p->type == HYPROF_PARAM_BOOL)
        value = "true";
    if (!value) {
        if (!next) {
            cli_error(cmd->op->name, "option '--%s' needs a value", name);
            return -1;
        }
        value = next;
        used = 1;
    }
    if (hyprof_args_set(target, name, value) != HYPROF_OK) {
        cli_error(cmd->op->name, "--%s", hyprof_args_error(target));
        return -1;
    }
    if (target == cmd->common && strcmp(name, "co") == 0 && add_creation_option(cmd, value) != 0)
        return -1;
    return used;
}

int cli_positionals(const hyprof_op_t *op, int i, char *kind, size_t kn, char *name, size_t nn)
{
    const char *s = op->positionals ? op->positionals : "raster_in:INPUT raster_out:OUTPUT";
    int n = 0;
    while (*s) {
        size_t len = strcspn(s, " ");
        if (n == i) {
            const char *colon = memchr(s, ':', len);
            size_t k = colon ? (size_t)(colon - s) : 0;
            if (kind && kn)
                snprintf(kind, kn, "%.*s", (int)k, s);
            if (name && nn)
                snprintf(name, nn, "%.*s", (int)(len - (colon ? k + 1 : 0)), colon ? colon + 1 : s);
        }
        n++;
        s += len;
        while (*s == ' ')
            s++;
    }
    return n;
}

/* "FEATURES MODEL" */
static void file_usage(const hyprof_op_t *op, char *out, size_t n)
{
    out[0] = '\0';
    int count = cli_positionals(op, -1, NULL, 0, NULL, 0);
    for (int i = 0; i < count; i++) {
        char name[64];
        cli_positionals(op, i, NULL, 0, name, sizeof name);
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%s%s", i ? " " : "", name);
    }
}

int cli_parse(const hyprof_op_t *op, int argc, char **argv, cli_command_t *cmd)
{
    memset(cmd, 0, sizeof *cmd);
    cmd->op = op;
    cmd->args = hyprof_args_new(op);
    cmd->common = hyprof_args_new(cli_common_op());
    if (!cmd->args || !cmd->common) {
        cli_error(op->name, "out of memory");
        return EXIT_RUNTIME;
    }
    const char *pos[CLI_MAX_FILES + 1];
    int npos = 0, only_pos = 0, want = cli_positionals(op, -1, NULL, 0, NULL, 0);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = 1;
        } else if (!only_pos && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            cmd->help = 1;
            return EXIT_OK;
        } else if (!only_pos && strncmp(a, "--", 2) == 0) {
            int used = parse_option(cmd, a + 2, i + 1 < argc ? argv[i + 1] : NULL);
            if (used < 0)
                return EXIT_USAGE;
            i += used;
        } else if (!only_pos && a[0] == '-' && a[1] != '\0') {
            const char *guess = closest_option(op, a + 1);
            if (guess)
                cli_error(op->name, "unknown option '%s' (options start with --): did you mean "
                          "--%s?", a, guess);
            else
                cli_error(op->name, "unknown option '%s' (options start with --)", a);
            return EXIT_USAGE;
        } else if (npos < CLI_MAX_FILES + 1) {
            pos[npos++] = a;
        } else {
            npos++;
        }
    }
    if (npos != want) {
        char usage[128];
        file_usage(op, usage, sizeof usage);
        cli_error(op->name, "expected %s, got %d file argument(s) (usage: hyprof %s [options] %s)",
                  usage, npos, op->name, usage);
        return EXIT_USAGE;
    }
    if (hyprof_args_check(cmd->args) != HYPROF_OK) {
        cli_error(op->name, "--%s", hyprof_args_error(cmd->args));
        return EXIT_USAGE;
    }
    for (int i = 0; i < npos; i++)
        cmd->files[i] = pos[i];
    cmd->nfiles = npos;
    cmd->input = pos[0];
    cmd->output = npos > 1 ? pos[1] : NULL;
    return EXIT_OK;
}

static void print_param(FILE *f, const hyprof_param_t *p)
{
    char head[96];
    if (p->type == HYPROF_PARAM_BOOL)
        snprintf(head, sizeof head, "--%s", p->name);
    else if (p->type == HYPROF_PARAM_CHOICE)
        snprintf(head, sizeof head, "--%s %s", p->name, p->choices);
    else
        snprintf(head, sizeof head, "--%s %s", p->name,
                 p->type == HYPROF_PARAM_INT ? "N"
                 : p->type == HYPROF_PARAM_FLOAT ? "X"
                 : p->type == HYPROF_PARAM_INT_LIST || p->type == HYPROF_PARAM_FLOAT_LIST
                     ? "A,B,..."
                 : p->type == HYPROF_PARAM_STRING ? "TEXT"
                 : p->type == HYPROF_PARAM_FIELD ? "FIELD" : "FILE");
    fprintf(f, "  %-28s %s", head, p->help);
    if (p->def && p->type != HYPROF_PARAM_BOOL)
        fprintf(f, " [default: %s]", p->def);
    if ((p->min != 0.0 || p->max != 0.0) && p->type != HYPROF_PARAM_CHOICE) {
        int integer = p->type == HYPROF_PARAM_INT || p->type == HYPROF_PARAM_INT_LIST;
        fprintf(f, integer ? " [range: %.0f..%.0f]" : " [range: %.15g..%.15g]", p->min, p->max);
    }
    if (p->flags & HYPROF_PARAM_REQUIRED)
        fputs(" [required]", f);
    fputc('\n', f);
}

void cli_print_op_help(FILE *f, const hyprof_op_t *op)
{
    size_t nc;
    const hyprof_param_t *common = hyprof_common_params(&nc);
    char usage[128];
    file_usage(op, usage, sizeof usage);
    fprintf(f, "usage: hyprof %s [options] %s\n\n%s.\n\n%s\n\n", op->name, usage, op->summary,
            op->help);
    if (op->positionals)
        fprintf(f, "Result: %s\n\noptions:\n", op->output);
    else
        fprintf(f, "OUTPUT: %s (GeoTIFF, or the format --of or its extension names)\n\n"
                   "options:\n", op->output);
    for (size_t i = 0; i < op->nparams; i++)
        print_param(f, &op->params[i]);
    fputs("\ncommon options:\n", f);
    for (size_t i = 0; i < nc; i++)
        print_param(f, &common[i]);
}
