"""NumPy arrays as hyprof cubes, and results as arrays.

An input array (bands, rows, cols) of a dtype the library reads (float32,
float64, uint8, uint16, int16, int32) is passed as a strided view of its own
memory: no copy, whatever its layout (BSQ, BIP from a transposed array,
slices). Other real dtypes are converted to float64 first (exact for int8,
uint32 and float16). Invalid pixels are those of `mask` (False = nodata),
those where a band equals `nodata`, and, as when the CLI reads a raster,
those where a band is NaN or infinite.

A result is a float32 array (bands, rows, cols) over the library's own
buffer (no copy; the buffer is freed when the last view of it goes), with
the band names, the mask and the metadata of the operation attached."""

import ctypes as C

import numpy as np

from ._lib import Cube, lib, text
from ._run import on_library_thread

_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.uint8): 2,
           np.dtype(np.uint16): 3, np.dtype(np.int16): 4, np.dtype(np.int32): 5}


class Result(np.ndarray):
    """A float32 array (bands, rows, cols) with `band_names` (one str per band,
    as the CLI names the output bands), `mask` (bool (rows, cols), True =
    valid, or None when every pixel is valid),
    `metadata` (dict of the operation's items), `backend` (where it ran) and
    `nodata` (the value of invalid pixels: NaN, whatever the input's nodata,
    as in the CLI's float outputs, so that a valid 0 stays valid)."""

    def __array_finalize__(self, obj):
        for a in ("band_names", "mask", "metadata", "backend", "nodata"):
            setattr(self, a, getattr(obj, a, None))

    def __reduce__(self):  # pickles as a plain array plus the attributes
        base = super().__reduce__()
        return (base[0], base[1], (base[2], self.band_names, self.mask, self.metadata,
                                   self.backend, self.nodata))

    def __setstate__(self, state):
        super().__setstate__(state[0])
        self.band_names, self.mask, self.metadata, self.backend, self.nodata = state[1:]


def as_array(cube):
    """The input as a 3-D array of a dtype the library reads (a view when it can be)."""
    if isinstance(cube, np.ma.MaskedArray):
        cube = cube.data
    a = np.asarray(cube)
    if a.dtype.kind not in "fiub":
        raise TypeError("hyprof: the cube must be an array of real numbers, not %s" % a.dtype)
    if a.ndim == 2:
        a = a[np.newaxis]
    if a.ndim != 3:
        raise ValueError("hyprof: the cube must be an array (bands, rows, cols) or (rows, cols), "
                         "not of shape %s" % (a.shape,))
    if 0 in a.shape:
        raise ValueError("hyprof: the cube has an empty dimension (shape %s)" % (a.shape,))
    if a.dtype not in _DTYPES:
        native = a.dtype.newbyteorder("=")
        # a supported dtype in the other byte order keeps its type; other
        # integer widths, float16 and bool become float64 (exact for them)
        a = a.astype(native if native in _DTYPES else np.float64)
    if not a.flags.aligned or any((s == 0 and n > 1) or s % a.itemsize
                                  for s, n in zip(a.strides, a.shape)):
        # broadcast or unaligned views: an aligned contiguous copy
        a = np.array(a, order="C", copy=True)
    return a


def input_mask(cube, mask, shape):
    """The validity mask (uint8 (rows, cols), 1 = valid, a new array) from the
    `mask` argument and a masked array's mask; None when neither is given."""
    m = None
    if isinstance(cube, np.ma.MaskedArray) and cube.mask is not np.ma.nomask:
        cm = np.asarray(cube.mask)
        m = ~(cm.any(axis=0) if cm.ndim == 3 else cm)
    if mask is not None:
        given = np.asarray(mask)
        if given.dtype.kind not in "biu":
            raise TypeError("hyprof: mask must be boolean (True = valid pixel), not %s"
                            % given.dtype)
        if given.shape != shape:
            raise ValueError("hyprof: mask has shape %s, the cube's pixels are %s"
                             % (given.shape, shape))
        m = given.astype(bool) if m is None else (m & given.astype(bool))
    return None if m is None else np.ascontiguousarray(m, dtype=np.uint8)


def invalid_pixels(a, mask, nodata, finite):
    """The validity mask (uint8, 1 = valid) with the pixels where a band is
    NaN, infinite or equal to `nodata` cleared, as when the CLI reads a
    raster; `mask` itself when there is nothing to clear. `finite` (the
    library's parallel pass, hyprof_cube_all_finite) tells whether any value
    is NaN or infinite; only then, or with a nodata value, are the bands
    compared one at a time (a temporary of one band's size)."""
    if finite and nodata is None:
        return mask
    valid = np.ones(a.shape[1:], bool) if mask is None else mask.astype(bool)
    nd = None if nodata is None else a.dtype.type(nodata) if a.dtype.kind == "f" else nodata
    for band in a:
        if not finite:
            valid &= np.isfinite(band)
        if nd is not None:
            valid &= band != nd
    return valid.view(np.uint8)


# Cubes of at most this many values are scanned for NaN/infinity by
# one thread: waking an OpenMP team costs more than so short a pass.
SCAN_ALONE = 1 << 16


class CubeView:
    """A hyprof_cube_t over an array's memory, keeping the array and the mask
    alive. defer=True leaves the NaN/infinity scan and the mask to
    complete(), which the caller runs on the library's thread just before the
    call that reads the cube (one hop to that thread instead of two)."""

    def __init__(self, cube, mask=None, nodata=None, threads=0, defer=False):
        a = as_array(cube)
        self.array = a
        nb, h, w = a.shape
        isz = a.itemsize
        c = Cube()
        c.data = a.ctypes.data
        c.dtype = _DTYPES[a.dtype]
        c.width, c.height, c.bands = w, h, nb
        # an axis of length 1 may have any stride, 0 included; the library
        # wants a non-zero one
        c.stride_b, c.stride_y, c.stride_x = (s // isz if s else 1 for s in a.strides)
        if nodata is not None:
            c.nodata, c.has_nodata = float(nodata), 1
        self.cube = c
        self.given_mask = input_mask(cube, mask, (h, w))
        self.nodata = nodata
        self.threads = threads if type(threads) is int and 0 <= threads <= 4096 else 0
        self.mask = None
        if not defer:
            self.complete(on_library_thread)

    def complete(self, call=lambda fn, *a: fn(*a)):
        """The mask: the given one with the pixels where a band is NaN,
        infinite or nodata cleared. The scan (hyprof_cube_all_finite, an
        OpenMP pass) runs through `call`: directly, or on the library's thread."""
        a, c = self.array, self.cube
        finite = a.dtype.kind != "f" or bool(call(
            lib.hyprof_cube_all_finite, C.byref(c), 1 if a.size <= SCAN_ALONE else self.threads))
        self.mask = invalid_pixels(a, self.given_mask, self.nodata, finite)
        if self.mask is not None:
            c.mask = self.mask.ctypes.data_as(C.POINTER(C.c_uint8))
            c.mask_stride_y = a.shape[2]


class _Owner:
    """Frees a library-owned struct when the last array over it goes."""

    def __init__(self, obj, free):
        self.obj, self.free = obj, free

    def __del__(self):
        self.free(C.byref(self.obj))


def cube_array(cube, owner, dtype=np.float32):
    """A (bands, rows, cols) array over a library-owned BSQ cube, no copy:
    `owner` is kept alive by the array and frees the cube with it."""
    n = cube.bands * cube.height * cube.width
    ctype = np.ctypeslib.as_ctypes_type(dtype)
    buf = (ctype * n).from_address(cube.data)
    buf._hyprof_owner = owner
    a = np.frombuffer(buf, dtype=dtype).reshape(cube.bands, cube.height, cube.width)
    return a


def cube_mask(cube):
    """The cube's mask as a new bool array (rows, cols), or None."""
    if not cube.mask:
        return None
    rows = np.ctypeslib.as_array(cube.mask, shape=(cube.height, cube.mask_stride_y))
    return rows[:, :cube.width] != 0


def result_from(res, backend):
    """A Result array over a filled hyprof_result_t (taking its ownership)."""
    owner = _Owner(res, lib.hyprof_result_free)
    cube = res.cube
    arr = cube_array(cube, owner)
    out = arr.view(Result)
    out.band_names = [text(res.band_names[b]) if res.band_names and res.band_names[b] else
                      "band %d" % (b + 1) for b in range(cube.bands)]
    out.metadata = {text(res.meta_keys[i]): text(res.meta_values[i]) for i in range(res.nmeta)}
    out.mask = cube_mask(cube)
    out.backend = backend
    out.nodata = float("nan")
    if out.mask is not None and not out.mask.all():
        arr[:, ~out.mask] = out.nodata
    return out
