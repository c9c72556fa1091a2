"""GeoTIFF reading and writing for the benchmarks, through GDAL's own Python
bindings (osgeo) when they import, else through rasterio.

The GPU machine has no GDAL package; a rasterio wheel carries a whole libgdal
(docs/internals/device_e2e.md), so the same bench scripts run there and here.
Both paths drive the same GDAL calls: creation options go to GDAL as they are
("NAME=VALUE", rasterio's keyword arguments), band-by-band writes, reads
converted to the requested type inside GDAL, open options on reads.

  create(path, width, height, count, dtype, options, geotransform=None)
      a writer (a context manager) with .write(band, array), bands from 1
  read(path, dtype=None, open_options=())  -> (bands, height, width) array
  structure(path)  -> the IMAGE_STRUCTURE metadata (COMPRESSION, PREDICTOR...)
  version()        -> "GDAL 3.6.2 (osgeo)", "GDAL 3.12.2 (rasterio 1.5.2)"

select("osgeo" | "rasterio") picks one explicitly (a test of the other path on
a machine that has both); BACKEND names the one in use.
"""
import numpy as np

BACKEND = None
_gdal = None
_rio = None


def select(name):
    """Uses the bindings `name` ("osgeo" or "rasterio"); ImportError if absent."""
    global BACKEND, _gdal, _rio
    if name == "osgeo":
        from osgeo import gdal
        gdal.UseExceptions()
        _gdal = gdal
    elif name == "rasterio":
        import warnings
        import rasterio
        import rasterio.errors
        import rasterio.transform
        # the floor's and the codecs' scratch files have no georeferencing
        warnings.filterwarnings("ignore", category=rasterio.errors.NotGeoreferencedWarning)
        _rio = rasterio
    else:
        raise ValueError(f"gdal_io: unknown bindings {name!r} (osgeo or rasterio)")
    BACKEND = name


def _auto():
    try:
        select("osgeo")
    except ImportError:
        select("rasterio")


def _split(options):
    """["NAME=VALUE", ...] -> {"NAME": "VALUE"} (rasterio's keyword form)."""
    out = {}
    for o in options:
        k, sep, v = o.partition("=")
        if not sep:
            raise ValueError(f"gdal_io: option {o!r} is not NAME=VALUE")
        out[k.upper()] = v
    return out


class _OsgeoWriter:
    def __init__(self, path, w, h, count, dtype, options, gt):
        gtype = _gdal.GetDataTypeByName(_GDAL_TYPES[np.dtype(dtype).name])
        self.ds = _gdal.GetDriverByName("GTiff").Create(path, w, h, count, gtype, list(options))
        if gt is not None:
            self.ds.SetGeoTransform(list(gt))

    def write(self, band, arr):
        self.ds.GetRasterBand(band).WriteArray(arr)

    def close(self):
        self.ds = None  # flushes and closes


class _RioWriter:
    def __init__(self, path, w, h, count, dtype, options, gt):
        kw = _split(options)
        if gt is not None:
            kw["transform"] = _rio.transform.Affine.from_gdal(*gt)
        self.ds = _rio.open(path, "w", driver="GTiff", width=w, height=h, count=count,
                            dtype=np.dtype(dtype).name, **kw)

    def write(self, band, arr):
        self.ds.write(arr, band)

    def close(self):
        self.ds.close()


_GDAL_TYPES = {"uint8": "Byte", "int8": "Int8", "uint16": "UInt16", "int16": "Int16",
               "uint32": "UInt32", "int32": "Int32", "float32": "Float32",
               "float64": "Float64"}


class create:
    """with create(path, w, h, count, dtype, options, gt) as dst: dst.write(1, a)"""

    def __init__(self, path, width, height, count, dtype, options, geotransform=None):
        if BACKEND is None:
            _auto()
        cls = _OsgeoWriter if BACKEND == "osgeo" else _RioWriter
        self._w = cls(path, width, height, count, dtype, options, geotransform)

    def write(self, band, arr):
        self._w.write(band, arr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._w.close()
        return False


def read(path, dtype=None, open_options=()):
    """All bands as (bands, height, width), converted to dtype by GDAL if given."""
    if BACKEND is None:
        _auto()
    if BACKEND == "osgeo":
        ds = _gdal.OpenEx(path, open_options=list(open_options))
        kw = {}
        if dtype is not None:
            kw["buf_type"] = _gdal.GetDataTypeByName(_GDAL_TYPES[np.dtype(dtype).name])
        arr = ds.ReadAsArray(**kw)
        ds = None
        return arr[None] if arr.ndim == 2 else arr
    with _rio.open(path, **_split(open_options)) as ds:
        return ds.read(out_dtype=None if dtype is None else np.dtype(dtype).name)


def structure(path):
    """The file's IMAGE_STRUCTURE metadata domain as a dict."""
    if BACKEND is None:
        _auto()
    if BACKEND == "osgeo":
        ds = _gdal.Open(path)
        st = dict(ds.GetMetadata("IMAGE_STRUCTURE") or {})
        ds = None
        return st
    with _rio.open(path) as ds:
        return dict(ds.tags(ns="IMAGE_STRUCTURE"))


def version():
    if BACKEND is None:
        _auto()
    if BACKEND == "osgeo":
        return f"GDAL {_gdal.__version__} (osgeo)"
    return f"GDAL {_rio.__gdal_version__} (rasterio {_rio.__version__})"
