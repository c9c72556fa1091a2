/* Status texts, names of backends and data types, version. */
#include "internal.h"

#include <string.h>

const char *hyprof_version(void) { return HYPROF_VERSION_STRING; }

const char *hyprof_build_info(void)
{
#ifdef HYPROF_HAVE_CUDA
    return "cuda";
#else
    return "cpu-only";
#endif
}

const char *hyprof_status_text(hyprof_status_t status)
{
    switch (status) {
    case HYPROF_OK: return "success";
    case HYPROF_ERR_ARGUMENT: return "invalid argument";
    case HYPROF_ERR_INPUT: return "unusable input data";
    case HYPROF_ERR_IO: return "file input/output error";
    case HYPROF_ERR_FORMAT: return "malformed file";
    case HYPROF_ERR_NOMEM: return "out of host memory";
    case HYPROF_ERR_NO_DEVICE: return "no usable CUDA device";
    case HYPROF_ERR_DEVICE_MEMORY: return "out of device memory";
    case HYPROF_ERR_DEVICE: return "CUDA device error";
    case HYPROF_ERR_NUMERIC: return "numerical failure";
    case HYPROF_ERR_CANCELLED: return "cancelled";
    case HYPROF_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *hyprof_backend_name(hyprof_backend_t backend)
{
    switch (backend) {
    case HYPROF_BACKEND_AUTO: return "auto";
    case HYPROF_BACKEND_CPU: return "cpu";
    case HYPROF_BACKEND_CUDA: return "cuda";
    }
    return "unknown";
}

hyprof_status_t hyprof_backend_parse(const char *text, hyprof_backend_t *backend)
{
    static const hyprof_backend_t all[] = {HYPROF_BACKEND_AUTO, HYPROF_BACKEND_CPU,
                                           HYPROF_BACKEND_CUDA};
    for (size_t i = 0; text && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(text, hyprof_backend_name(all[i])) == 0) {
            *backend = all[i];
            return HYPROF_OK;
        }
    return HYPROF_ERR_ARGUMENT;
}

size_t hyprof_dtype_size(hyprof_dtype_t dtype)
{
    switch (dtype) {
    case HYPROF_FLOAT32: return 4;
    case HYPROF_FLOAT64: return 8;
    case HYPROF_UINT8: return 1;
    case HYPROF_UINT16: return 2;
    case HYPROF_INT16: return 2;
    case HYPROF_INT32: return 4;
    }
    return 0;
}

const char *hyprof_dtype_name(hyprof_dtype_t dtype)
{
    switch (dtype) {
    case HYPROF_FLOAT32: return "float32";
    case HYPROF_FLOAT64: return "float64";
    case HYPROF_UINT8: return "uint8";
    case HYPROF_UINT16: return "uint16";
    case HYPROF_INT16: return "int16";
    case HYPROF_INT32: return "int32";
    }
    return "unknown";
}
