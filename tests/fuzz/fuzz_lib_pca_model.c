/* libFuzzer target: the PCA model reader (hyprof_pca_model_load). The input
 * is the file's bytes, handed over as a memfd's /proc/self/fd path.
 *
 * By hand: build libhyprof with -fsanitize=fuzzer-no-link,address,undefined, then
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_lib_pca_model.c \
 *         -Lbuild -lhyprof && ./a.out tests/fuzz/corpus/lib_pca_model
 */
#include "fuzz_memfile.h"
#include "hyprof/hyprof.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile("pca", data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_pca_model_t *m = NULL;
    if (hyprof_pca_model_load(ctx, path, &m) == HYPROF_OK) {
        size_t n = hyprof_pca_model_bands(m) * hyprof_pca_model_components(m);
        const double *v = hyprof_pca_model_vectors(m);
        volatile double sum = 0.0;
        for (size_t i = 0; i < n; i++)
            sum += v[i];
        (void)sum;
    }
    hyprof_pca_model_free(&m);
    hyprof_ctx_free(&ctx);
    close(fd);
    return 0;
}
