/* Parsed, range-checked argument values of one operation, from text. */
#define _GNU_SOURCE
#include "internal.h"
#include "hyprof/registry.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int set, given;
    char *text;     /* normalised value */
    double num;     /* INT, FLOAT, BOOL */
    double *list;   /* *_LIST */
    size_t nlist;
} arg_value_t;

struct hyprof_args {
    const hyprof_op_t *op;
    arg_value_t *values;
    char *error; /* the last error, whole however long the value it quotes */
    int error_lost; /* the last error could not be formatted (out of memory) */
};

/* Records the error (on the heap: a long value is quoted whole); without
 * memory for it, a fixed text says what failed. */
static hyprof_status_t fail(hyprof_args_t *a, const char *fmt, ...) HYPROF_PRINTF(2, 3);
static hyprof_status_t fail(hyprof_args_t *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    free(a->error);
    a->error = msg;
    a->error_lost = msg == NULL;
    return HYPROF_ERR_ARGUMENT;
}

static int param_index(const hyprof_args_t *a, const char *name)
{
    for (size_t i = 0; name && i < a->op->nparams; i++)
        if (strcmp(a->op->params[i].name, name) == 0)
            return (int)i;
    return -1;
}

static int has_range(const hyprof_param_t *p) { return p->min != 0.0 || p->max != 0.0; }

/* A bound of p's range as the user types it: integers whole ("1000000000",
 * not %g's "1e+09"), other numbers to 15 significant digits. */
static void bound_text(const hyprof_param_t *p, double v, char *buf, size_t n)
{
    int integer = p->type == HYPROF_PARAM_INT || p->type == HYPROF_PARAM_INT_LIST;
    snprintf(buf, n, integer && fabs(v) < 0x1p63 ? "%.0f" : "%.15g", v);
}

/* "components 0: must be between 1 and 200" (the front end puts its own
 * "--" or nothing before the name); list elements say which they are. */
static hyprof_status_t range_error(hyprof_args_t *a, const hyprof_param_t *p, const char *s,
                                   const char *what, const char *where)
{
    char lo[40], hi[40];
    bound_text(p, p->min, lo, sizeof lo);
    bound_text(p, p->max, hi, sizeof hi);
    return fail(a, "%s %s: %s between %s and %s%s", p->name, s, what, lo, hi, where);
}

/* Parses one number; `integer` demands an integral value. The whole text
 * must be the number (end pointer checked), in range of the type (overflow
 * checked) and, for a parameter that cannot be negative, without a sign
 * (strtoll and strtod would take "-0"; strtoull would take "-1" as 2^64-1).
 * `where` ends a message about one element of a list ("" otherwise). */
static hyprof_status_t parse_number(hyprof_args_t *a, const hyprof_param_t *p, const char *s,
                                    int integer, const char *where, double *out)
{
    char *end = NULL;
    errno = 0;
    double v;
    if (integer) {
        long long n = strtoll(s, &end, 10);
        v = (double)n;
    } else {
        v = strtod(s, &end);
        if (errno == ERANGE && fabs(v) < 1.0)
            errno = 0; /* underflow: the nearest double (0 or subnormal) is the value */
    }
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v) || strpbrk(s, "xX"))
        return fail(a, "%s: '%s' is not %s%s", p->name, s,
                    integer ? "an integer" : "a finite number", where);
    if (has_range(p) && p->min >= 0.0 && strchr(s, '-') == s + strspn(s, " \t"))
        return range_error(a, p, s, "negative; must be", where);
    if (has_range(p) && (v < p->min || v > p->max))
        return range_error(a, p, s, "must be", where);
    *out = v;
    return HYPROF_OK;
}

/* A comma-separated list, split without a copy of the whole text: every
 * element is parsed whole, however long the list; an empty element is an
 * error naming its position. */
static hyprof_status_t parse_list(hyprof_args_t *a, const hyprof_param_t *p, const char *s,
                                  arg_value_t *v)
{
    size_t n = 1;
    for (const char *c = s; *c; c++)
        n += *c == ',';
    double *list = calloc(n, sizeof *list);
    if (!list)
        return fail(a, "out of memory");
    hyprof_status_t st = HYPROF_OK;
    const char *c = s;
    for (size_t k = 0; k < n && st == HYPROF_OK; k++) {
        size_t len = strcspn(c, ",");
        char *tok = len ? strndup(c, len) : NULL;
        char where[64];
        snprintf(where, sizeof where, " (element %zu of %zu)", k + 1, n);
        if (!len)
            st = fail(a, "%s '%s': element %zu of %zu is empty", p->name, s, k + 1, n);
        else if (!tok)
            st = fail(a, "out of memory");
        else
            st = parse_number(a, p, tok, p->type == HYPROF_PARAM_INT_LIST, where, &list[k]);
        free(tok);
        c += len + 1;
    }
    if (st != HYPROF_OK) {
        free(list);
        return st;
    }
    free(v->list);
    v->list = list;
    v->nlist = n;
    return HYPROF_OK;
}

static int choice_ok(const char *choices, const char *s)
{
    size_t len = strlen(s);
    for (const char *c = choices; c && *c;) {
        const char *bar = strchr(c, '|');
        size_t n = bar ? (size_t)(bar - c) : strlen(c);
        if (n == len && strncmp(c, s, n) == 0)
            return 1;
        c = bar ? bar + 1 : NULL;
    }
    return 0;
}

static hyprof_status_t parse_bool(hyprof_args_t *a, const hyprof_param_t *p, const char *s,
                                  double *out)
{
    static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcmp(s, yes[i]) == 0)
            return *out = 1.0, HYPROF_OK;
        if (strcmp(s, no[i]) == 0)
            return *out = 0.0, HYPROF_OK;
    }
    return fail(a, "%s: '%s' is not true or false", p->name, s);
}

static hyprof_status_t set_index(hyprof_args_t *a, int i, const char *value, int given)
{
    const hyprof_param_t *p = &a->op->params[i];
    arg_value_t *v = &a->values[i];
    hyprof_status_t st = HYPROF_OK;
    if (!value || !*value)
        return fail(a, "%s: empty value", p->name);
    switch (p->type) {
    case HYPROF_PARAM_INT: st = parse_number(a, p, value, 1, "", &v->num); break;
    case HYPROF_PARAM_FLOAT: st = parse_number(a, p, value, 0, "", &v->num); break;
    case HYPROF_PARAM_BOOL: st = parse_bool(a, p, value, &v->num); break;
    case HYPROF_PARAM_INT_LIST:
    case HYPROF_PARAM_FLOAT_LIST: st = parse_list(a, p, value, v); break;
    case HYPROF_PARAM_CHOICE:
        if (!choice_ok(p->choices, value))
            st = fail(a, "%s: '%s' is not one of %s", p->name, value, p->choices);
        break;
    default: break;
    }
    if (st != HYPROF_OK)
        return st;
    char *text = strdup(p->type == HYPROF_PARAM_BOOL ? (v->num ? "true" : "false") : value);
    if (!text)
        return fail(a, "out of memory");
    free(v->text);
    v->text = text;
    v->set = 1;
    v->given = given;
    return HYPROF_OK;
}

hyprof_args_t *hyprof_args_new(const hyprof_op_t *op)
{
    if (!op)
        return NULL;
    hyprof_args_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->op = op;
    a->values = calloc(op->nparams ? op->nparams : 1, sizeof *a->values);
    if (!a->values) {
        free(a);
        return NULL;
    }
    for (size_t i = 0; i < op->nparams; i++)
        if (op->params[i].def && set_index(a, (int)i, op->params[i].def, 0) != HYPROF_OK) {
            hyprof_args_free(&a); /* a registry default that does not parse: a bug */
            return NULL;
        }
    return a;
}

void hyprof_args_free(hyprof_args_t **args)
{
    if (!args || !*args)
        return;
    hyprof_args_t *a = *args;
    for (size_t i = 0; i < a->op->nparams; i++) {
        free(a->values[i].text);
        free(a->values[i].list);
    }
    free(a->values);
    free(a->error);
    free(a);
    *args = NULL;
}

const hyprof_op_t *hyprof_args_op(const hyprof_args_t *args) { return args->op; }
const char *hyprof_args_error(const hyprof_args_t *args)
{
    if (args->error)
        return args->error;
    return args->error_lost ? "out of memory describing an argument error" : "";
}

hyprof_status_t hyprof_args_set(hyprof_args_t *args, const char *name, const char *value)
{
    int i = param_index(args, name);
    if (i < 0)
        return fail(args, "unknown parameter '%s' for operation '%s'", name ? name : "",
                    args->op->name);
    return set_index(args, i, value, 1);
}

hyprof_status_t hyprof_args_check(hyprof_args_t *args)
{
    for (size_t i = 0; i < args->op->nparams; i++)
        if ((args->op->params[i].flags & HYPROF_PARAM_REQUIRED) && !args->values[i].set)
            return fail(args, "%s is required", args->op->params[i].name);
    return HYPROF_OK;
}

static const arg_value_t *value_of(const hyprof_args_t *a, const char *name)
{
    int i = param_index(a, name);
    return i < 0 ? NULL : &a->values[i];
}

int hyprof_args_is_set(const hyprof_args_t *args, const char *name)
{
    const arg_value_t *v = value_of(args, name);
    return v && v->set;
}

int hyprof_args_given(const hyprof_args_t *args, const char *name)
{
    const arg_value_t *v = value_of(args, name);
    return v && v->given;
}

/* Integer parameters hold integral values within long long; a FLOAT one read
 * as an integer is truncated and saturated to [LONG_MIN, LONG_MAX] (0x1p63 is
 * LONG_MAX + 1, exactly representable), so no value converts out of range. */
long hyprof_args_int(const hyprof_args_t *args, const char *name)
{
    const arg_value_t *v = value_of(args, name);
    if (!v || !v->set || isnan(v->num))
        return 0;
    if (v->num >= 0x1p63)
        return LONG_MAX;
    if (v->num < -0x1p63)
        return LONG_MIN;
    return (long)v->num;
}

double hyprof_args_float(const hyprof_args_t *args, const char *name)
{
    const arg_value_t *v = value_of(args, name);
    return v && v->set ? v->num : NAN;
}

int hyprof_args_bool(const hyprof_args_t *args, const char *name)
{
    const arg_value_t *v = value_of(args, name);
    return v && v->set && v->num != 0.0;
}

const char *hyprof_args_str(const hyprof_args_t *args, const char *name)
{
    const arg_value_t *v = value_of(args, name);
    return v && v->set ? v->text : NULL;
}

const double *hyprof_args_list(const hyprof_args_t *args, const char *name, size_t *count)
{
    const arg_value_t *v = value_of(args, name);
    if (count)
        *count = v && v->set ? v->nlist : 0;
    return v && v->set ? v->list : NULL;
}
