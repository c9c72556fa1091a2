/* CUDA device enumeration for the public API (include/hyprof/core.h). */
#include "cuda_util.h"

#include <cstdio>

extern "C" int hyprof_cuda_device_count(void)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count > 0 ? count : 0;
}

extern "C" hyprof_status_t hyprof_cuda_warm_up(int device)
{
    if (device < 0 || device >= hyprof_cuda_device_count())
        return HYPROF_ERR_NO_DEVICE;
    /* cudaSetDevice creates the device's primary context, which every later
     * call on that device, from any thread, shares; cuBLAS and cuSOLVER are
     * loaded too, as every operation that starts with a PCA needs them. */
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        (void)cudaGetLastError();
        return HYPROF_ERR_DEVICE;
    }
    return hyprof__cuda_libs_load(NULL) == 0 ? HYPROF_OK : HYPROF_ERR_DEVICE;
}

extern "C" hyprof_status_t hyprof_cuda_device_info(int device, char *name, size_t name_len,
                                                   size_t *total_bytes, size_t *free_bytes)
{
    if (name && name_len)
        name[0] = '\0';
    if (total_bytes)
        *total_bytes = 0;
    if (free_bytes)
        *free_bytes = 0;
    int count = hyprof_cuda_device_count();
    if (count == 0)
        return HYPROF_ERR_NO_DEVICE;
    if (device < 0 || device >= count)
        return HYPROF_ERR_ARGUMENT;

    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return HYPROF_ERR_DEVICE;
    }
    if (name && name_len) {
        snprintf(name, name_len, "%s", prop.name);
    }
    if (total_bytes)
        *total_bytes = prop.totalGlobalMem;
    if (free_bytes) {
        /* cudaMemGetInfo reports on the current device: switch to `device`
         * for the query and restore the caller's current device after. */
        int prev = -1;
        if (cudaGetDevice(&prev) != cudaSuccess) {
            (void)cudaGetLastError();
            prev = -1;
        }
        hyprof_status_t st = HYPROF_OK;
        size_t f = 0, t = 0;
        if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess) {
            (void)cudaGetLastError();
            st = HYPROF_ERR_DEVICE;
        } else {
            *free_bytes = f;
            if (total_bytes)
                *total_bytes = t;
        }
        if (prev >= 0 && prev != device) {
            (void)cudaSetDevice(prev);
            (void)cudaGetLastError();
        }
        return st;
    }
    return HYPROF_OK;
}

extern "C" void *hyprof__cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (hyprof_cuda_device_count() == 0 ||
        cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void hyprof__cuda_host_free(void *p)
{
    if (p && cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

extern "C" int hyprof__cuda_is_pinned(const void *p)
{
    cudaPointerAttributes at;
    if (!p || cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return at.type == cudaMemoryTypeHost;
}
