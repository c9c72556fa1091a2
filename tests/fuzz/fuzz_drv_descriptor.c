/* libFuzzer target: .hyprof JSON descriptors, through the driver's parser
 * hyprof_gdal_parse_descriptor (text in, no file opened) and the driver's
 * hyprof_gdal_identify on the same bytes as a file header. Seeds:
 * tests/fuzz/corpus/drv_descriptor/. */
#include "driver.h"

#include <cpl_error.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        CPLSetErrorHandler(CPLQuietErrorHandler);
        quiet = 1;
    }
    (void)hyprof_gdal_identify("/fuzz/scene.hyprof", (const char *)data,
                               size > INT_MAX ? INT_MAX : (int)size);
    hyprof_gdal_source_free(
        hyprof_gdal_parse_descriptor((const char *)data, size, "/fuzz/scene.hyprof"));
    return 0;
}
