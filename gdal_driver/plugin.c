/* gdal_HYPROF.so: what GDAL calls when it loads the plugin. It registers the
 * hyprof_* VRT pixel functions and the HYPROF raster driver. A new pixel
 * function is one pixel_<name>.c file defining `const hyprof_pixfn_t
 * hyprof_pixfn_<name>`: CMake lists those files in pixel_functions.inc. */
#include "driver.h"
#include "pixfn.h"

#include <cpl_error.h>

#define HYPROF_PIXEL_FUNCTION(name) extern const hyprof_pixfn_t hyprof_pixfn_##name;
#include "pixel_functions.inc"
#undef HYPROF_PIXEL_FUNCTION

/* What GDAL calls: the function itself, after warning about undeclared
 * argument names (hyprof_pixfn_check_names). */
#define HYPROF_PIXEL_FUNCTION(name)                                                          \
    static CPLErr checked_##name(void **sources, int nsources, void *data, int w, int h,    \
                                 GDALDataType stype, GDALDataType btype, int pspace,         \
                                 int lspace, CSLConstList args)                              \
    {                                                                                        \
        hyprof_pixfn_check_names(&hyprof_pixfn_##name, args);                                \
        return hyprof_pixfn_##name.fn(sources, nsources, data, w, h, stype, btype, pspace,   \
                                      lspace, args);                                         \
    }
#include "pixel_functions.inc"
#undef HYPROF_PIXEL_FUNCTION

typedef struct {
    const hyprof_pixfn_t *f;
    GDALDerivedPixelFuncWithArgs checked;
} registered_t;

#define HYPROF_PIXEL_FUNCTION(name) {&hyprof_pixfn_##name, checked_##name},
static const registered_t pixel_functions[] = {
#include "pixel_functions.inc"
};
#undef HYPROF_PIXEL_FUNCTION

/* GDAL looks for GDALRegister_HYPROF, then GDALRegisterMe; both are safe to
 * call more than once (pixel functions are replaced by name, the driver is
 * registered once). */
void GDALRegister_HYPROF(void) __attribute__((visibility("default")));
void GDALRegisterMe(void) __attribute__((visibility("default")));

void GDALRegister_HYPROF(void)
{
    for (size_t i = 0; i < sizeof pixel_functions / sizeof *pixel_functions; i++) {
        const hyprof_pixfn_t *f = pixel_functions[i].f;
        if (GDALAddDerivedBandPixelFuncWithArgs(f->name, pixel_functions[i].checked,
                                                f->arguments_xml) != CE_None)
            CPLError(CE_Warning, CPLE_AppDefined, "HYPROF: cannot register pixel function %s",
                     f->name);
    }
    hyprof_gdal_register_driver();
}

void GDALRegisterMe(void) { GDALRegister_HYPROF(); }
