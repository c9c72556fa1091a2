/* libFuzzer target: the endmember set reader (hyprof_endmembers_load_csv,
 * the CSV that unmix --model and the GDAL pixel function load). The JSON
 * form is written only (endmembers.c has no JSON reader). The input is the
 * file's bytes, handed over as a memfd's /proc/self/fd path.
 *
 * By hand: build libhyprof with -fsanitize=fuzzer-no-link,address,undefined, then
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_lib_endmembers.c \
 *         -Lbuild -lhyprof && ./a.out tests/fuzz/corpus/lib_endmembers
 */
#include "fuzz_memfile.h"
#include "hyprof/hyprof.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile("endmembers", data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_endmembers_t *e = NULL;
    if (hyprof_endmembers_load_csv(ctx, path, &e) == HYPROF_OK) {
        volatile double sum = 0.0;
        for (size_t i = 0; i < e->bands * e->count; i++)
            sum += e->spectra[i];
        for (size_t b = 0; e->wavelengths && b < e->bands; b++)
            sum += e->wavelengths[b];
        (void)sum;
    }
    hyprof_endmembers_free(&e);
    hyprof_ctx_free(&ctx);
    close(fd);
    return 0;
}
