/* hyprof: spectral-spatial profiles of hyperspectral cubes, on the command line.
 *
 *   hyprof --version | --help | describe --json
 *   hyprof info [--json] INPUT
 *   hyprof <op> [options] INPUT OUTPUT */
#include "cli.h"

#include <cpl_error.h>
#include <gdal.h>
#include <string.h>

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
    fputs("\nINPUT is anything GDAL reads; OUTPUT is a GeoTIFF. Exit codes: 0 ok, 1 runtime "
          "failure,\n2 bad arguments or unreadable input, 3 cancelled.\n", f);
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
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        print_usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "describe") == 0)
        return cli_describe(argc - 2, argv + 2);
    GDALAllRegister();
    /* GDAL's reasons are folded into hyprof's own one-line messages. */
    CPLSetErrorHandler(CPLQuietErrorHandler);
    if (strcmp(cmd, "info") == 0)
        return cli_info(argc - 2, argv + 2);
    const hyprof_op_t *op = hyprof_op_find(cmd);
    if (!op) {
        cli_error(NULL, "unknown operation '%s' (see 'hyprof --help')", cmd);
        return EXIT_USAGE;
    }
    cli_command_t c;
    int rc = cli_parse(op, argc - 2, argv + 2, &c);
    if (rc == EXIT_OK && c.help)
        cli_print_op_help(stdout, op);
    else if (rc == EXIT_OK)
        rc = op->run ? cli_run(&c) : cli_run_classification(&c);
    cli_command_free(&c);
    return rc;
}
