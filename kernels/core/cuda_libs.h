/* cuBLAS and cuSOLVER, loaded on first use (kernels/core/cuda_libs.cu). */
#ifndef HYPROF_KERNELS_CUDA_LIBS_H
#define HYPROF_KERNELS_CUDA_LIBS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Loads both libraries once (every call after the first returns at once):
 * 0, or -1 with *why (if why is not NULL) saying which library or function
 * is missing. Thread-safe. */
int hyprof__cuda_libs_load(const char **why);

#ifdef __cplusplus
}
#endif

#endif
