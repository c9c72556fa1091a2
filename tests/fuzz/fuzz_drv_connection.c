/* libFuzzer target: HYPROF connection strings ("HYPROF:op:key=value,...:input"),
 * the text a user or a program hands to GDALOpen, through the driver's
 * parser hyprof_gdal_parse_connection (which opens no file) and
 * hyprof_gdal_identify. Seeds: tests/fuzz/corpus/drv_connection/. */
#include "driver.h"

#include <cpl_error.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        CPLSetErrorHandler(CPLQuietErrorHandler);
        quiet = 1;
    }
    char *name = malloc(size + 1);
    if (!name)
        return 0;
    memcpy(name, data, size);
    name[size] = '\0';
    (void)hyprof_gdal_identify(name, NULL, 0);
    hyprof_gdal_source_free(hyprof_gdal_parse_connection(name));
    free(name);
    return 0;
}
