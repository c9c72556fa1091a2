"""Loading libhyprof and declaring the part of its C API the package calls.

ctypes, not cffi: the binding is a few dozen functions and structs whose
layout is fixed by include/hyprof/*.h, ctypes ships with every Python (no
package to install, nothing compiled at install time), and cffi's ABI mode
would not make a call faster where it matters (the work is in the library).

The library is the libhyprof.so installed beside this package (the CMake
install rule puts it there), else the file named by $HYPROF_LIBRARY (tests
and development trees).
"""

import ctypes as C
import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _find_library():
    for name in ("libhyprof.so", "libhyprof.so.0"):
        if (_HERE / name).is_file():
            return str(_HERE / name)
    env = os.environ.get("HYPROF_LIBRARY")
    if env:
        if not Path(env).is_file():
            raise ImportError("hyprof: $HYPROF_LIBRARY names '%s', which is not a file" % env)
        return env
    raise ImportError(
        "hyprof: libhyprof.so is neither beside the package (%s) nor named by $HYPROF_LIBRARY; "
        "install the package with 'cmake --install build --component python' (scripts/setup.sh "
        "does) or set HYPROF_LIBRARY=/path/to/build/libhyprof.so" % _HERE)


# ---- structs (include/hyprof/core.h, registry.h, classify.h) -------------------------

class Cube(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int),
                ("width", C.c_size_t), ("height", C.c_size_t), ("bands", C.c_size_t),
                ("stride_x", C.c_ssize_t), ("stride_y", C.c_ssize_t), ("stride_b", C.c_ssize_t),
                ("mask", C.POINTER(C.c_uint8)), ("mask_stride_y", C.c_ssize_t),
                ("nodata", C.c_double), ("has_nodata", C.c_int), ("owns", C.c_uint)]


class Param(C.Structure):
    _fields_ = [("name", C.c_char_p), ("type", C.c_int), ("default", C.c_char_p),
                ("min", C.c_double), ("max", C.c_double), ("choices", C.c_char_p),
                ("help", C.c_char_p), ("flags", C.c_uint)]


class Op(C.Structure):
    _fields_ = [("name", C.c_char_p), ("group", C.c_char_p), ("summary", C.c_char_p),
                ("help", C.c_char_p), ("params", C.POINTER(Param)), ("nparams", C.c_size_t),
                ("run", C.c_void_p), ("output", C.c_char_p), ("bands", C.c_void_p),
                ("positionals", C.c_char_p)]


class Result(C.Structure):
    _fields_ = [("cube", Cube), ("band_names", C.POINTER(C.c_char_p)),
                ("meta_keys", C.POINTER(C.c_char_p)), ("meta_values", C.POINTER(C.c_char_p)),
                ("nmeta", C.c_size_t)]


class Legend(C.Structure):
    _fields_ = [("n", C.c_size_t), ("names", C.POINTER(C.c_char_p)),
                ("rgba", C.POINTER(C.c_uint8))]


class TrainParams(C.Structure):
    _fields_ = [("kind", C.c_int), ("scale", C.c_int),
                ("c", C.POINTER(C.c_double)), ("gamma", C.POINTER(C.c_double)),
                ("n_c", C.c_size_t), ("n_gamma", C.c_size_t), ("folds", C.c_int),
                ("seed", C.c_uint64), ("neurons", C.c_size_t), ("elm_c", C.c_double),
                ("band_names", C.POINTER(C.c_char_p)), ("legend", Legend)]


class Assessment(C.Structure):
    _fields_ = [("nclasses", C.c_size_t), ("values", C.POINTER(C.c_int)),
                ("confusion", C.POINTER(C.c_uint64)), ("total", C.c_uint64),
                ("oa", C.c_double), ("aa", C.c_double), ("kappa", C.c_double),
                ("producer", C.POINTER(C.c_double)), ("user", C.POINTER(C.c_double))]


PROGRESS_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_double, C.c_char_p)
LOG_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_int, C.c_char_p)

_P = C.c_void_p
_S = C.c_char_p
_Z = C.c_size_t
_I = C.c_int
_ST = C.c_int  # hyprof_status_t

# name: (restype, argtypes)
_PROTOTYPES = {
    "hyprof_version": (_S, []),
    "hyprof_build_info": (_S, []),
    "hyprof_status_text": (_S, [_ST]),
    "hyprof_backend_parse": (_ST, [_S, C.POINTER(C.c_int)]),
    "hyprof_backend_name": (_S, [C.c_int]),
    "hyprof_ctx_new": (_P, []),
    "hyprof_ctx_free": (None, [C.POINTER(_P)]),
    "hyprof_ctx_set_backend": (_ST, [_P, C.c_int]),
    "hyprof_ctx_used_backend": (C.c_int, [_P]),
    "hyprof_ctx_set_device": (_ST, [_P, _I]),
    "hyprof_ctx_set_threads": (_ST, [_P, _I]),
    "hyprof_ctx_set_progress": (None, [_P, PROGRESS_FN, _P]),
    "hyprof_ctx_set_log": (None, [_P, LOG_FN, _P]),
    "hyprof_ctx_cancel": (None, [_P]),
    "hyprof_ctx_last_error": (_S, [_P]),
    "hyprof_cuda_device_count": (_I, []),
    "hyprof_cube_free": (None, [C.POINTER(Cube)]),
    "hyprof_cube_check": (_ST, [C.POINTER(Cube), C.c_char_p, _Z]),
    "hyprof_cube_all_finite": (C.c_int, [C.POINTER(Cube), C.c_int]),
    "hyprof_op_count": (_Z, []),
    "hyprof_op_at": (C.POINTER(Op), [_Z]),
    "hyprof_op_find": (C.POINTER(Op), [_S]),
    "hyprof_common_params": (C.POINTER(Param), [C.POINTER(_Z)]),
    "hyprof_param_type_name": (_S, [C.c_int]),
    "hyprof_args_new": (_P, [C.POINTER(Op)]),
    "hyprof_args_free": (None, [C.POINTER(_P)]),
    "hyprof_args_set": (_ST, [_P, _S, _S]),
    "hyprof_args_check": (_ST, [_P]),
    "hyprof_args_error": (_S, [_P]),
    "hyprof_args_str": (_S, [_P, _S]),
    "hyprof_result_free": (None, [C.POINTER(Result)]),
    "hyprof_op_run": (_ST, [_P, C.POINTER(Op), _P, C.POINTER(Cube), C.POINTER(Result)]),
    "hyprof_train_params_default": (None, [C.POINTER(TrainParams)]),
    "hyprof_train": (_ST, [_P, C.POINTER(Cube), C.POINTER(Cube), C.POINTER(TrainParams),
                           C.POINTER(_P)]),
    "hyprof_have_libsvm": (_I, []),
    "hyprof_classifier_free": (None, [C.POINTER(_P)]),
    "hyprof_classifier_save": (_ST, [_P, _P, _S]),
    "hyprof_classifier_load": (_ST, [_P, _S, C.POINTER(_P)]),
    "hyprof_classifier_kind": (_I, [_P]),
    "hyprof_classifier_bands": (_Z, [_P]),
    "hyprof_classifier_band_name": (_S, [_P, _Z]),
    "hyprof_classifier_classes": (_Z, [_P]),
    "hyprof_classifier_class_value": (_I, [_P, _Z]),
    "hyprof_classifier_class_name": (_S, [_P, _Z]),
    "hyprof_classifier_class_rgba": (C.POINTER(C.c_uint8), [_P, _Z]),
    "hyprof_classifier_c": (C.c_double, [_P]),
    "hyprof_classifier_gamma": (C.c_double, [_P]),
    "hyprof_classifier_cv_accuracy": (C.c_double, [_P]),
    "hyprof_classifier_train_pixels": (_Z, [_P]),
    "hyprof_classifier_size": (_Z, [_P]),
    "hyprof_classify": (_ST, [_P, _P, C.POINTER(Cube), C.POINTER(Cube), C.POINTER(Cube)]),
    "hyprof_assess": (_ST, [_P, C.POINTER(Cube), C.POINTER(Cube), C.POINTER(Assessment)]),
    "hyprof_assessment_free": (None, [C.POINTER(Assessment)]),
    "hyprof_split": (_ST, [_P, C.POINTER(Cube), C.c_double, C.POINTER(_Z), _Z, C.c_uint64,
                           C.POINTER(C.c_uint16), C.POINTER(C.c_uint16)]),
    "hyprof_split_preset_eadp_table1": (C.POINTER(_Z), [C.POINTER(_Z)]),
}


def _openmp_passive():
    """OpenMP threads that sleep at barriers, as in the hyprof executable:
    libgomp reads OMP_WAIT_POLICY once, when it is loaded, and by default its
    idle threads spin, slowing whatever runs next on the same cores (another
    team, NumPy's BLAS, a second process). Set only when the user has chosen
    neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT and no module has loaded
    libgomp yet (then the setting could no longer apply)."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    try:
        with open("/proc/self/maps") as f:
            if "libgomp" in f.read():
                return
    except OSError:
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def _load():
    _openmp_passive()
    lib = C.CDLL(_find_library())
    for name, (res, args) in _PROTOTYPES.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


lib = _load()
PATH = lib._name


def text(b):
    """A C string (bytes or None) as str or None."""
    return None if b is None else b.decode("utf-8", "replace")
