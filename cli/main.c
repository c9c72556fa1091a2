/* hyprof: spectral-spatial profiles of hyperspectral cubes, on the command line.
 *
 *   hyprof --version | --help | describe --json
 *   hyprof info [--json] INPUT
 *   hyprof <op> [options] INPUT OUTPUT */
#include "cli.h"
#include "raster_io.h"

#include <cpl_error.h>
#include <gdal.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int has_variable(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
            return 1;
    return 0;
}

/* Commands that run no operation (no OpenMP threads): not worth a second load. */
static int runs_no_operation(int argc, char **argv)
{
    static const char *const quick[] = {"--version", "--help", "-h", "help", "describe", "info"};
    if (argc < 2)
        return 1;
    for (size_t i = 0; i < sizeof quick / sizeof *quick; i++)
        if (strcmp(argv[1], quick[i]) == 0)
            return 1;
    return 0;
}

/* Variables that a shell or a login sets for its own bookkeeping and that no
 * library's initialiser reads: the ones that may be lent. */
static const char *const spare[] = {"_=",   "OLDPWD=", "SHLVL=",    "LS_COLORS=", "PWD=",
                                    "MAIL=", "HISTSIZE=", "HISTCONTROL=", "LESSOPEN=",
                                    "LESSCLOSE="};

/* The slot of envp lent to OMP_WAIT_POLICY while the libraries initialise,
 * or -1 if the environment holds none of the spare variables. */
static int slot_to_lend(char **envp)
{
    for (size_t k = 0; k < sizeof spare / sizeof *spare; k++)
        for (int i = 0; envp && envp[i]; i++)
            if (strncmp(envp[i], spare[k], strlen(spare[k])) == 0)
                return i;
    return -1;
}

/* SIGINT and SIGTERM, the signals that cancel a run. */
static sigset_t cancel_signals(void)
{
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    return sigs;
}

/* Installs the cancellation handlers, then lets the signals blocked since
 * the start (pending ones included) reach them. */
static void handle_signals(void)
{
    sigset_t sigs = cancel_signals();
    cli_install_signals();
    sigprocmask(SIG_UNBLOCK, &sigs, NULL);
}

static char **lent_envp;
static char *lent_value;
static int lent_slot = -1;

/* Runs from the executable's .preinit_array: after the loader has mapped
 * every library, before any library's initialiser.
 *
 * libgomp reads OMP_WAIT_POLICY in its initialiser, from the environment the
 * process started with (libc's initialiser, which runs after this one,
 * resets `environ` to that array, so setenv here would be lost). When the
 * user has chosen neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT, a process that
 * runs an operation lends the slot of a spare variable (a shell's `_`,
 * SHLVL, PWD...) of that array to "OMP_WAIT_POLICY=PASSIVE" until its own
 * constructor (return_slot, after every library's initialiser) puts the
 * variable back: its threads then sleep at barriers instead of spinning,
 * which keeps several hyprof processes on shared cores (QGIS batch runs)
 * from spinning against each other, and the program's environment stays the
 * user's. With no spare variable, the process executes itself once with
 * OMP_WAIT_POLICY added.
 *
 * SIGINT and SIGTERM are blocked from the first instruction here to the
 * installation of the handlers (a blocked signal stays pending across an
 * exec), so a signal at any time after the program is loaded becomes a
 * cancellation (exit 3). */
static void early_start(int argc, char **argv, char **envp)
{
    sigset_t sigs = cancel_signals();
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    if (!runs_no_operation(argc, argv) && !has_variable(envp, "OMP_WAIT_POLICY") &&
        !has_variable(envp, "GOMP_SPINCOUNT")) {
        static char passive[] = "OMP_WAIT_POLICY=PASSIVE";
        lent_slot = slot_to_lend(envp);
        if (lent_slot >= 0) {
            lent_envp = envp;
            lent_value = envp[lent_slot];
            envp[lent_slot] = passive;
            return; /* return_slot handles the signals */
        }
        size_t n = 0;
        while (envp && envp[n])
            n++;
        char *env[n + 2];
        for (size_t i = 0; i < n; i++)
            env[i] = envp[i];
        env[n] = passive;
        env[n + 1] = NULL;
        execve("/proc/self/exe", argv, env);
        /* No /proc: run as we are, with libgomp's default policy. */
    }
    handle_signals();
}

__attribute__((section(".preinit_array"), used)) static void (*const preinit)(int, char **,
                                                                             char **) = early_start;

/* The executable's constructor, run after every library's initialiser:
 * gives the lent slot its variable back (through setenv's copy if an
 * initialiser has changed the environment meanwhile), then handles the
 * signals. */
__attribute__((constructor)) static void return_slot(void)
{
    if (lent_slot < 0)
        return;
    extern char **environ;
    if (environ == lent_envp)
        lent_envp[lent_slot] = lent_value;
    else {
        unsetenv("OMP_WAIT_POLICY");
        putenv(lent_value);
    }
    handle_signals();
}

/* HYPROF_BACKEND, the library's override of --backend auto: an unknown value
 * would be ignored, so it is refused. */
static int check_backend_env(const char *op)
{
    const char *v = getenv("HYPROF_BACKEND");
    hyprof_backend_t b;
    if (!v || !*v || hyprof_backend_parse(v, &b) == HYPROF_OK)
        return EXIT_OK;
    cli_error(op, "HYPROF_BACKEND='%s' is not one of auto, cpu, cuda", v);
    return EXIT_USAGE;
}

static void print_usage(FILE *f)
{
    fprintf(f, "hyprof %s: spectral-spatial analysis of hyperspectral images\n\n"
               "usage:\n"
               "  hyprof <operation> [options] INPUT OUTPUT\n"
               "  hyprof <operation> --help\n"
               "  hyprof info [--json] INPUT\n"
               "  hyprof describe --json\n"
               "  hyprof --version | --help\n",
            hyprof_version());
    const char *group = NULL;
    for (size_t i = 0; i < hyprof_op_count(); i++) {
        const hyprof_op_t *op = hyprof_op_at(i);
        if (!group || strcmp(group, op->group) != 0)
            fprintf(f, "\n%s:\n", group = op->group);
        fprintf(f, "  %-10s %s\n", op->name, op->summary);
    }
    fputs("\nINPUT is anything GDAL reads; OUTPUT is a GeoTIFF unless --of or its extension "
          "names another\nGDAL format. Exit codes: 0 ok, 1 runtime failure, 2 bad arguments or "
          "unreadable\ninput, 3 cancelled.\n", f);
}

static void print_version(void)
{
    printf("hyprof %s (%s backend", hyprof_version(),
           strcmp(hyprof_build_info(), "cuda") == 0 ? "CPU + CUDA" : "CPU only");
    int n = hyprof_cuda_device_count();
    for (int d = 0; d < n; d++) {
        char name[256];
        hyprof_cuda_device_info(d, name, sizeof name, NULL, NULL);
        printf("; device %d: %s", d, name);
    }
    printf("), GDAL %s\n", GDALVersionInfo("RELEASE_NAME"));
}

/* The operation closest to a mistyped name (at most 2 edits), or NULL. */
static const char *closest_operation(const char *name)
{
    const char *best = NULL;
    size_t best_d = 3;
    for (size_t i = 0; i < hyprof_op_count(); i++) {
        size_t d = cli_edit_distance(name, hyprof_op_at(i)->name);
        if (d < best_d) {
            best_d = d;
            best = hyprof_op_at(i)->name;
        }
    }
    return best;
}

static int unknown_operation(const char *name)
{
    const char *guess = closest_operation(name);
    if (guess)
        cli_error(NULL, "unknown operation '%s': did you mean '%s'?", name, guess);
    else
        cli_error(NULL, "unknown operation '%s' (see 'hyprof --help')", name);
    return EXIT_USAGE;
}

/* `hyprof help OP`: the same text as `hyprof OP --help`. */
static int help_topic(const char *topic)
{
    const hyprof_op_t *op = hyprof_op_find(topic);
    if (op) {
        cli_print_op_help(stdout, op);
        return EXIT_OK;
    }
    if (strcmp(topic, "info") == 0 || strcmp(topic, "describe") == 0) {
        print_usage(stdout);
        return EXIT_OK;
    }
    return unknown_operation(topic);
}

/* Registers the HYPROF driver from `path` when that file exists. */
static int load_plugin(const char *path)
{
    if (access(path, R_OK) != 0)
        return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void (*reg)(void) = h ? (void (*)(void))dlsym(h, "GDALRegisterMe") : NULL;
    if (reg)
        reg();
    return GDALGetDriverByName("HYPROF") != NULL;
}

/* HYPROF: names and .hyprof descriptors as inputs (`hyprof info` included)
 * need the HYPROF driver. GDAL loads it from $GDAL_DRIVER_PATH or its own
 * plugin folder; where neither holds it, it comes from the folder it was
 * installed to, or from a build tree (cli/hyprof beside gdal_driver/). */
static void register_hyprof_driver(void)
{
    if (GDALGetDriverByName("HYPROF"))
        return;
#ifdef HYPROF_PLUGIN_DIR
    if (load_plugin(HYPROF_PLUGIN_DIR "/gdal_HYPROF.so"))
        return;
#endif
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    snprintf(path, sizeof path, "%s/../gdal_driver/gdal_HYPROF.so", dirname(exe));
    load_plugin(path);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0) {
        print_version();
        return EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0 && argc > 2)
        return help_topic(argv[2]);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        print_usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "describe") == 0)
        return cli_describe(argc - 2, argv + 2);
    const hyprof_op_t *op = hyprof_op_find(cmd);
    if (op) {
        cli_set_op_name(op->name);
        if (check_backend_env(op->name) != EXIT_OK)
            return EXIT_USAGE;
    }
    GDALAllRegister();
    register_hyprof_driver();
    /* GDAL's reasons are folded into hyprof's own one-line messages. */
    CPLSetErrorHandler(CPLQuietErrorHandler);
    if (strcmp(cmd, "info") == 0)
        return cli_info(argc - 2, argv + 2);
    if (!op)
        return unknown_operation(cmd);
    cli_command_t c;
    int rc = cli_parse(op, argc - 2, argv + 2, &c);
    if (rc == EXIT_OK)
        hyprof_output_format_set(hyprof_args_str(c.common, "of"), c.co,
                                 hyprof_args_bool(c.common, "overviews"));
    if (rc == EXIT_OK && c.help)
        cli_print_op_help(stdout, op);
    else if (rc == EXIT_OK)
        rc = op->run ? cli_run(&c) : cli_run_classification(&c);
    cli_command_free(&c);
    if (rc != EXIT_OK && cli_interrupted())
        rc = EXIT_CANCELLED;
    return rc;
}
