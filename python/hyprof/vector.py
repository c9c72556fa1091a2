"""Training samples from a vector layer, on a raster's grid, as `hyprof train
--samples` takes them (gdal_driver/classmap_io.c): each feature's geometry
reprojected to the grid's CRS (traditional GIS axis order), burnt in layer
order (a later feature wins where they overlap) into the pixels whose centre
it covers; a text class field is numbered by the sorted distinct names
(1, 2, ...) and the names kept; a numeric one must hold integers 1..65535.
Needs GDAL's Python bindings (Debian: python3-gdal); the library itself links
no GDAL."""

import math

import numpy as np

from ._errors import ArgumentError, InputError


def _ogr():
    try:
        from osgeo import gdal, ogr, osr
    except ImportError as e:
        raise ImportError("hyprof: training from a vector layer needs GDAL's Python bindings "
                          "(Debian: python3-gdal)") from e
    gdal.UseExceptions()
    return gdal, ogr, osr


def _layer(ogr, path, layer):
    ds = ogr.Open(str(path))
    if ds is None:
        raise InputError("hyprof: cannot open the vector '%s'" % path)
    lyr = ds.GetLayerByName(layer) if layer else ds.GetLayer(0)
    if lyr is None:
        raise InputError("hyprof: '%s' has no layer%s" % (path, " named " + layer if layer else ""))
    return ds, lyr


def _classes(lyr, fi, text, path):
    """Each feature's class (0: unset) and the class names (text fields)."""
    feats = list(lyr)
    names = sorted({f.GetFieldAsString(fi) for f in feats if f.IsFieldSetAndNotNull(fi)}) \
        if text else []
    rank = {n: k + 1 for k, n in enumerate(names)}
    out = []
    for f in feats:
        if not f.IsFieldSetAndNotNull(fi):
            out.append((f, 0))
        elif text:
            out.append((f, rank[f.GetFieldAsString(fi)]))
        else:
            v = f.GetFieldAsDouble(fi)
            if not (1 <= v <= 65535 and v == math.floor(v)):
                raise InputError("hyprof: feature %d of '%s': class '%s' is not an integer "
                                 "1..65535" % (f.GetFID(), path, f.GetFieldAsString(fi)))
            out.append((f, int(v)))
    return out, names


def samples_to_labels(vector, class_field, width, height, geotransform=None, crs_wkt=None,
                      layer=None):
    """(labels float32 (height, width), class names {value: name}) of the
    vector's features on the grid; geotransform is GDAL's six numbers (None:
    pixel coordinates), crs_wkt the grid's CRS (None: no reprojection)."""
    gdal, ogr, osr = _ogr()
    if not class_field:
        raise ArgumentError("hyprof: samples= needs class_field=")
    ds, lyr = _layer(ogr, vector, layer)
    defn = lyr.GetLayerDefn()
    fi = defn.GetFieldIndex(class_field)
    if fi < 0:
        raise InputError("hyprof: layer '%s' of '%s' has no field '%s'"
                         % (lyr.GetName(), vector, class_field))
    text = defn.GetFieldDefn(fi).GetType() == ogr.OFTString
    feats, names = _classes(lyr, fi, text, vector)
    ct = None
    src = lyr.GetSpatialRef()
    if src is not None and crs_wkt:
        s, d = src.Clone(), osr.SpatialReference()
        d.ImportFromWkt(crs_wkt)
        s.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
        d.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
        if not s.IsSame(d):
            ct = osr.CoordinateTransformation(s, d)
    mem = ogr.GetDriverByName("Memory").CreateDataSource("")
    grid_srs = None
    if crs_wkt:  # the grid's own CRS: RasterizeLayer then has nothing to transform
        grid_srs = osr.SpatialReference()
        grid_srs.ImportFromWkt(crs_wkt)
        grid_srs.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    burn = mem.CreateLayer("samples", srs=grid_srs, geom_type=ogr.wkbUnknown)
    burn.CreateField(ogr.FieldDefn("cls", ogr.OFTInteger))
    for f, v in feats:
        g = f.GetGeometryRef()
        if v == 0 or g is None:
            continue
        g = g.Clone()
        if ct is not None and g.Transform(ct) != 0:
            raise InputError("hyprof: feature %d of '%s' cannot be reprojected"
                             % (f.GetFID(), vector))
        out = ogr.Feature(burn.GetLayerDefn())
        out.SetGeometry(g)
        out.SetField("cls", v)
        burn.CreateFeature(out)
    grid = gdal.GetDriverByName("MEM").Create("", int(width), int(height), 1, gdal.GDT_Float32)
    grid.SetGeoTransform(list(geotransform) if geotransform else [0, 1, 0, 0, 0, 1])
    if crs_wkt:
        grid.SetProjection(crs_wkt)
    if burn.GetFeatureCount():
        gdal.RasterizeLayer(grid, [1], burn, options=["ATTRIBUTE=cls"])
    labels = grid.GetRasterBand(1).ReadAsArray().astype(np.float32)
    return labels, {k + 1: n for k, n in enumerate(names)}


def grid_of(da):
    """(width, height, GDAL geotransform, CRS WKT) of a rioxarray DataArray."""
    w, h = da.shape[-1], da.shape[-2]
    try:
        rio = da.rio
        t = rio.transform()
        crs = rio.crs
    except Exception:  # no rioxarray or no georeference: pixel coordinates
        return w, h, None, None
    gt = (t.c, t.a, t.b, t.f, t.d, t.e)
    return w, h, gt, crs.to_wkt() if crs is not None else None
