/* Progress on stderr (a bar on a terminal, JSON lines for QGIS), log lines,
 * and the signal handlers that turn SIGINT/SIGTERM into a cancellation. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

static hyprof_ctx_t *volatile signal_ctx;
static volatile sig_atomic_t interrupted;
static const char *op_name;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
    hyprof_ctx_t *ctx = signal_ctx;
    if (ctx)
        hyprof_ctx_cancel(ctx);
}

void cli_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void cli_cancel_on_signal(hyprof_ctx_t *ctx)
{
    signal_ctx = ctx;
    if (interrupted && ctx)
        hyprof_ctx_cancel(ctx);
}

int cli_interrupted(void) { return interrupted; }

void cli_set_op_name(const char *name) { op_name = name; }

void cli_error(const char *op, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hyprof%s%s: ", op ? " " : "", op ? op : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void cli_lib_error(const char *op, const char *message)
{
    const char *m = message ? message : "unknown error";
    size_t len = op ? strlen(op) : 0;
    if (len && strncmp(m, op, len) == 0 && m[len] == ':' && m[len + 1] == ' ')
        m += len + 2;
    cli_error(op, "%s", m);
}

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c == '\n')
            fputs("\\n", f);
        else if (*c == '\t')
            fputs("\\t", f);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

void cli_progress_init(cli_progress_t *p, const char *mode)
{
    memset(p, 0, sizeof *p);
    p->hi = 1.0;
    p->last = -1.0;
    /* $HYPROF_LOG=info or debug shows the library's messages of that level
     * and above (warnings always). */
    const char *log = getenv("HYPROF_LOG");
    p->min_level = !log                          ? HYPROF_LOG_WARNING
                   : strcmp(log, "debug") == 0 ? HYPROF_LOG_DEBUG
                   : strcmp(log, "info") == 0  ? HYPROF_LOG_INFO
                                               : HYPROF_LOG_WARNING;
    if (!mode)
        p->mode = isatty(STDERR_FILENO) ? PROGRESS_BAR : PROGRESS_NONE;
    else if (strcmp(mode, "json") == 0)
        p->mode = PROGRESS_JSON;
    else if (strcmp(mode, "bar") == 0)
        p->mode = PROGRESS_BAR;
    else
        p->mode = PROGRESS_NONE;
}

void cli_progress_stage(cli_progress_t *p, double lo, double hi)
{
    p->lo = lo;
    p->hi = hi;
}

static void draw_bar(double f, const char *stage)
{
    int width = 40, filled = (int)(f * width + 0.5);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %3d%% %-12s", bar, (int)(f * 100.0 + 0.5), stage);
    fflush(stderr);
}

int cli_progress_fn(void *user, double fraction, const char *stage)
{
    cli_progress_t *p = user;
    if (interrupted)
        return 1;
    double f = p->lo + fraction * (p->hi - p->lo);
    int new_stage = strncmp(stage, p->last_stage, sizeof p->last_stage - 1) != 0;
    /* One line per percent at most (QGIS reads every one of them), and never
     * backwards: worker threads may report out of order. */
    if (!new_stage && floor(f * 100.0) <= floor(p->last * 100.0))
        return 0;
    p->last = f;
    snprintf(p->last_stage, sizeof p->last_stage, "%s", stage);
    if (p->mode == PROGRESS_JSON) {
        fprintf(stderr, "{\"progress\":%.3f,\"stage\":", f);
        cli_json_string(stderr, stage);
        fputs("}\n", stderr);
        fflush(stderr);
    } else if (p->mode == PROGRESS_BAR) {
        draw_bar(f, stage);
    }
    return 0;
}

void cli_progress_done(cli_progress_t *p)
{
    if (p->mode == PROGRESS_BAR && p->last >= 0.0)
        fputc('\n', stderr);
    p->last = -1.0;
}

void cli_log_fn(void *user, hyprof_log_level_t level, const char *message)
{
    cli_progress_t *p = user;
    if (level < p->min_level && level < HYPROF_LOG_WARNING)
        return;
    const char *lv = level >= HYPROF_LOG_WARNING ? "warning"
                     : level == HYPROF_LOG_INFO  ? "info"
                                                 : "debug";
    if (p->mode == PROGRESS_JSON) {
        fprintf(stderr, "{\"log\":\"%s\",\"message\":", lv);
        cli_json_string(stderr, message);
        fputs("}\n", stderr);
    } else {
        if (p->mode == PROGRESS_BAR && p->last >= 0.0)
            fputc('\n', stderr);
        fprintf(stderr, "hyprof%s%s: %s: %s\n", op_name ? " " : "", op_name ? op_name : "",
                lv, message);
    }
    fflush(stderr);
}
