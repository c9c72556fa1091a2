"""The hyprof functions on xarray.DataArray cubes (band, y, x).

hyprof.xarray.eadp(da, ...) and the other registry operations take a
DataArray whose dimensions are (band, y, x) (any names: a dimension called
'band' goes first, the other two keep their order; a 2-D array is one band)
and return one, its first dimension named 'band', with the same spatial
dimensions, coordinates, attributes and
CRS (rioxarray's spatial_ref coordinate and grid mapping), its band
coordinate holding the band names of the command line ('PC1', 'PC1 T=65',
...), `long_name` the same names (rioxarray writes them as band
descriptions) and `_FillValue` the nodata value (NaN, as in the CLI's
float outputs). The nodata value is rioxarray's
(da.rio.nodata) when rioxarray is imported, else the `_FillValue` or
`nodata` attribute. train, predict and assess work the same way."""

import sys

import numpy as np
import xarray as xr

import hyprof as _hp

_BAND_ATTRS = ("long_name", "scale_factor", "add_offset", "_FillValue", "nodata",
               "missing_value", "units", "description", "wavelength", "band_names")


def _ordered(da):
    if not isinstance(da, xr.DataArray):
        raise TypeError("hyprof.xarray: expected an xarray.DataArray, not %s" % type(da).__name__)
    if da.ndim == 2:
        da = da.expand_dims("band")
    if da.ndim != 3:
        raise ValueError("hyprof.xarray: the DataArray must have dimensions (band, y, x), not %s"
                         % (da.dims,))
    if "band" in da.dims and da.dims[0] != "band":
        da = da.transpose("band", *[d for d in da.dims if d != "band"])
    return da


def _nodata(da):
    rio = getattr(da, "rio", None) if "rioxarray" in sys.modules else None
    nd = None
    if rio is not None:
        try:
            nd = rio.nodata
        except Exception:  # rioxarray present but the array has no spatial dims it knows
            nd = None
    if nd is None:
        nd = da.attrs.get("_FillValue", da.attrs.get("nodata"))
    if nd is None:
        nd = da.encoding.get("_FillValue")
    return None if nd is None or (isinstance(nd, float) and np.isnan(nd)) else nd


def _band_names(da):
    band = da.dims[0]
    if band in da.coords:
        vals = da.coords[band].values
        if vals.dtype.kind in "UO":
            return [str(v) for v in vals]
    ln = da.attrs.get("long_name")
    if isinstance(ln, (list, tuple)) and len(ln) == da.shape[0]:
        return [str(v) for v in ln]
    return None


def _spatial(da, data, bands=None, band_dim="band", attrs=None):
    """A DataArray of `data` on `da`'s grid: its spatial coordinates and the
    coordinates that do not depend on the band (spatial_ref among them)."""
    band_old, ydim, xdim = da.dims
    coords = {k: v for k, v in da.coords.items() if band_old not in v.dims}
    if bands is None:
        out = xr.DataArray(data, dims=(ydim, xdim), coords=coords, attrs=attrs or {})
    else:
        coords[band_dim] = bands
        out = xr.DataArray(data, dims=(band_dim, ydim, xdim), coords=coords, attrs=attrs or {})
    for k in ("grid_mapping",):
        if k in da.encoding:
            out.encoding[k] = da.encoding[k]
    return out


def _kept_attrs(da):
    return {k: v for k, v in da.attrs.items() if k not in _BAND_ATTRS}


def _wrap(name):
    fn = getattr(_hp, name)

    def op(da, **kw):
        d = _ordered(da)
        if "nodata" not in kw:
            kw["nodata"] = _nodata(d)
        res = fn(d.values, **kw)
        attrs = _kept_attrs(d)
        attrs.update({"long_name": tuple(res.band_names), "_FillValue": np.float32(res.nodata),
                      "hyprof_operation": name})
        attrs.update({"hyprof_" + k: v for k, v in res.metadata.items()})
        return _spatial(d, np.asarray(res), res.band_names, "band", attrs)

    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    op.__doc__ = ("hyprof.%s on an xarray.DataArray (band, y, x); returns a DataArray with "
                  "the band names as the band coordinate, coordinates, attributes and CRS "
                  "kept.\n\n" % name) + (fn.__doc__ or "")
    return op


for _name in _hp._generated:
    globals()[_name] = _wrap(_name)


def train(features, labels=None, *, samples=None, class_field=None, layer=None, **kw):
    """hyprof.train on DataArrays: the band names come from the band coordinate
    (or `long_name`), the labels from a (y, x) or (1, y, x) DataArray or array,
    or from a vector layer: samples=PATH (points or polygons, any CRS),
    class_field=FIELD (integers, or text: classes numbered by sorted name, the
    names kept), layer=NAME, rasterised on the features' grid as `hyprof train
    --samples` does (hyprof.vector; needs python3-gdal)."""
    f = _ordered(features)
    kw.setdefault("nodata", _nodata(f))
    kw.setdefault("band_names", _band_names(f))
    if (labels is None) == (samples is None):
        raise TypeError("hyprof.xarray.train: give labels or samples=, not %s"
                        % ("both" if samples is not None else "neither"))
    if samples is not None:
        from .vector import grid_of, samples_to_labels
        w, h, gt, wkt = grid_of(f)
        lab, names = samples_to_labels(samples, class_field, w, h, gt, wkt, layer)
        if names:
            kw.setdefault("class_names", names)
    else:
        lab = labels.values if isinstance(labels, xr.DataArray) else np.asarray(labels)
    return _hp.train(f.values, lab, **kw)


def predict(model, features, scores=False, **kw):
    """model.predict on a DataArray: the class map as a (y, x) uint16 DataArray
    on the features' grid (0 = nodata), with `class_values`, `class_names`
    attributes; with scores=True, also the scores as a (class, y, x) DataArray."""
    f = _ordered(features)
    kw.setdefault("nodata", _nodata(f))
    out = model.predict(f.values, scores=scores, **kw)
    attrs = _kept_attrs(f)
    attrs.update({"class_values": list(model.classes), "class_names": list(model.class_names),
                  "_FillValue": 0, "hyprof_operation": "classify"})
    cmap = _spatial(f, out[0] if scores else out, attrs=attrs)
    if not scores:
        return cmap
    s = out[1]
    sattrs = _kept_attrs(f)
    sattrs.update({"long_name": tuple(s.band_names), "_FillValue": np.float32(np.nan)})
    return cmap, _spatial(f, np.asarray(s), list(s.band_names), "class", sattrs)


def _class_names(x):
    """A DataArray's class names as predict() stores them: attributes
    class_values and class_names (value -> name), or class_names alone
    (classes 1, 2, ...); None for anything else."""
    if not isinstance(x, xr.DataArray) or x.attrs.get("class_names") is None:
        return None
    names, values = list(x.attrs["class_names"]), x.attrs.get("class_values")
    if values is None:
        return names
    values = list(np.atleast_1d(values))
    return dict(zip((int(v) for v in values), names)) if len(values) == len(names) else None


def assess(class_map, reference, **kw):
    """hyprof.assess on DataArrays (or arrays). The class names of each side
    default to its attributes class_values and class_names (those predict()
    sets), so classes pair by name when both sides carry names (match='auto')."""
    def arr(x):
        return x.values if isinstance(x, xr.DataArray) else np.asarray(x)
    if "class_names" not in kw:
        kw.setdefault("map_names", _class_names(class_map))
        kw.setdefault("reference_names", _class_names(reference))
    return _hp.assess(arr(class_map), arr(reference), **kw)


__all__ = sorted(_hp._generated) + ["train", "predict", "assess"]
