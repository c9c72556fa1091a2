/* libFuzzer target: the hyprof_* VRT pixel functions' argument lists, as GDAL
 * hands them over (name=value strings from <PixelFunctionArguments>), each
 * function called directly on small in-memory sources; no dataset is opened.
 *
 * Input: byte 0 picks the function, byte 1 the number of sources (1..200,
 * so the sample models' 156 and 15 bands are reachable), byte 2 the source
 * type; the rest is the argument list, one name=value a line. File
 * arguments are resolved from the current folder (run it from the
 * repository root so the seeds' samples/ models load). Seeds:
 * tests/fuzz/corpus/drv_pixfn_args/. */
#include "pixfn.h"

#include <cpl_error.h>
#include <cpl_string.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern const hyprof_pixfn_t hyprof_pixfn_abundance, hyprof_pixfn_classify, hyprof_pixfn_decision,
    hyprof_pixfn_dwt, hyprof_pixfn_pca, hyprof_pixfn_rmse, hyprof_pixfn_scale;

static const hyprof_pixfn_t *const functions[] = {
    &hyprof_pixfn_abundance, &hyprof_pixfn_classify, &hyprof_pixfn_decision, &hyprof_pixfn_dwt,
    &hyprof_pixfn_pca, &hyprof_pixfn_rmse, &hyprof_pixfn_scale};
#define NFUNCTIONS (sizeof functions / sizeof *functions)

enum { W = 4, H = 3, MAXSRC = 200 };

/* Sources of one type with varied values, one NaN (for float types). */
static void fill_sources(GDALDataType type, int n, void **sources)
{
    for (int s = 0; s < n; s++) {
        double v[W * H];
        for (int i = 0; i < W * H; i++)
            v[i] = (double)((s * 7 + i * 3) % 17) * 3.5 - 2.0;
        if (s == 0)
            v[5] = NAN;
        GDALCopyWords(v, GDT_Float64, sizeof(double), sources[s], type,
                      GDALGetDataTypeSizeBytes(type), W * H);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const GDALDataType types[] = {GDT_Float32, GDT_Byte, GDT_Int16, GDT_Float64};
    static void *sources[MAXSRC];
    static double out[W * H];
    if (!sources[0]) {
        CPLSetErrorHandler(CPLQuietErrorHandler);
        for (int s = 0; s < MAXSRC; s++)
            sources[s] = calloc(W * H, sizeof(double));
    }
    if (size < 3)
        return 0;
    const hyprof_pixfn_t *f = functions[data[0] % NFUNCTIONS];
    int n = 1 + data[1] % MAXSRC;
    GDALDataType type = types[data[2] % 4];
    char *text = malloc(size - 3 + 1);
    if (!text)
        return 0;
    memcpy(text, data + 3, size - 3);
    text[size - 3] = '\0';
    char **args = CSLTokenizeString2(text, "\n", 0);
    fill_sources(type, n, sources);
    hyprof_pixfn_check_names(f, args);
    (void)f->fn(sources, n, out, W, H, type, GDT_Float64, sizeof(double),
                (int)(W * sizeof(double)), args);
    CSLDestroy(args);
    free(text);
    return 0;
}
