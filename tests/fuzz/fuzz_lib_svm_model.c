/* libFuzzer target: the classifier model reader (hyprof_classifier_load),
 * SVM and ELM models alike (one reader, model.c over textio.c). The input is
 * the file's bytes, handed over as a memfd's /proc/self/fd path.
 *
 * By hand: build libhyprof with -fsanitize=fuzzer-no-link,address,undefined, then
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_lib_svm_model.c \
 *         -Lbuild -lhyprof && ./a.out tests/fuzz/corpus/lib_svm_model
 */
#include "fuzz_memfile.h"
#include "hyprof/hyprof.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile("model", data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    hyprof_classifier_t *m = NULL;
    if (hyprof_classifier_load(ctx, path, &m) == HYPROF_OK) {
        /* Walk what a loaded model offers, as classify does. */
        for (size_t b = 0; b < hyprof_classifier_bands(m); b++)
            (void)hyprof_classifier_band_name(m, b);
        for (size_t k = 0; k < hyprof_classifier_classes(m); k++)
            (void)hyprof_classifier_class_rgba(m, k);
    }
    hyprof_classifier_free(&m);
    hyprof_ctx_free(&ctx);
    close(fd);
    return 0;
}
