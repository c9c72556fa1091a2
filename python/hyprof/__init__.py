"""hyprof: spectral-spatial profiles, unmixing and classification of
hyperspectral cubes, over libhyprof (CPU/OpenMP or CUDA).

Every raster operation of the registry is a function here (hyprof.pca,
hyprof.dwt, hyprof.eadp, hyprof.eap, hyprof.emp, hyprof.wmcd, hyprof.sspp,
hyprof.unmix): a NumPy array (bands, rows, cols) in, a hyprof.Result (a
float32 array with band_names, mask, metadata) out; the parameters are those
of `hyprof OP --help`. Classification: hyprof.train, hyprof.Model
(predict, save, load), hyprof.assess, hyprof.split. hyprof.xarray has the
same functions for xarray.DataArray (band, y, x). See docs/python.md."""

from ._errors import (ArgumentError, Cancelled, DeviceError, DeviceMemoryError, Error,
                      FileError, FormatError, InputError, InternalError, NoDevice, NumericError,
                      OutOfMemory)
from ._cube import Result
from ._lib import PATH as library_path
from ._lib import lib as _lib
from ._lib import text as _text
from ._ops import make_function as _make_function
from ._ops import operations as _operations
from .classify import Assessment, Model, assess, load_model, split, train

__version__ = _text(_lib.hyprof_version())
build_info = _text(_lib.hyprof_build_info())

#: Every registry operation (runnable or not), by name: parameters, help.
OPERATIONS = _operations()
_generated = []
for _name, _op in OPERATIONS.items():
    if _op.runnable:
        globals()[_name] = _make_function(_op)
        _generated.append(_name)


def cuda_device_count():
    """Number of usable CUDA devices (0 without CUDA in the library or a device)."""
    return int(_lib.hyprof_cuda_device_count())


__all__ = sorted(_generated) + [
    "Assessment", "Model", "Result", "assess", "load_model", "split", "train",
    "Error", "ArgumentError", "InputError", "FileError", "FormatError", "OutOfMemory",
    "NoDevice", "DeviceMemoryError", "DeviceError", "NumericError", "Cancelled",
    "InternalError", "OPERATIONS", "cuda_device_count", "library_path"]
