"""Styled outputs: class maps' colours, colour tables, attribute tables and
`hyprof info`'s class list; NaN as the nodata of float outputs.

Oracles: the palette listed in docs/classmaps.md (read from the document, not
from the code), GDAL's Python API for the colour table and the raster
attribute table, NumPy's bincount for the pixel counts, QGIS's own paletted
renderer (offscreen) for what an analyst sees, and PyWavelets' Haar
transform for the float output.

Run: /usr/bin/python3 -m pytest tests/test_classmap_style.py
"""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import pywt

from conftest import INDIAN_PINES, ROOT, gdal, read_cube, run_ok, write_cube

from osgeo import ogr, osr

FIXED = ["--grid", "C=32,gamma=2"]
SIZE = 40


def documented_palette():
    """The colours docs/classmaps.md lists, in its order, as (r, g, b)."""
    text = (ROOT / "docs" / "classmaps.md").read_text()
    rows = re.findall(r"^\|\s*(\d+)\s*\|[^|]*\|\s*`#([0-9a-fA-F]{6})`", text, re.M)
    assert [int(k) for k, _ in rows] == list(range(1, len(rows) + 1)), rows
    return [tuple(int(h[i:i + 2], 16) for i in (0, 2, 4)) for _, h in rows]


def shade(rgb, v, n):
    """The documented rule past the list: round 2 40 % towards black, round 3
    40 % towards white, then again."""
    r = ((v - 1) // n) % 3
    f = {0: lambda c: c, 1: lambda c: 0.6 * c, 2: lambda c: c + 0.4 * (255 - c)}[r]
    return tuple(int(math.floor(f(c) + 0.5)) for c in rgb)


def palette_rgba(v):
    pal = documented_palette()
    return shade(pal[(v - 1) % len(pal)], v, len(pal)) + (255,)


def features(tmp_path, values):
    """A 2-band feature raster whose pixels carry their class value: band 1 =
    value, band 2 = -value (on Indian Pines' georeference)."""
    cube = np.stack([values, -values]).astype(np.float32)
    return write_cube(tmp_path / "features.tif", cube, like=INDIAN_PINES)


def class_values(n):
    """SIZE x SIZE pixels in n vertical stripes of classes 1..n (column-major
    runs of equal length)."""
    return (np.arange(SIZE * SIZE) * n // (SIZE * SIZE) + 1).reshape(SIZE, SIZE).T


def polygons_gpkg(path, grid, stripes):
    """Squares inside stripes (col0, col1, name) of `grid`, in EPSG:4326."""
    src = osr.SpatialReference(wkt=gdal.Open(str(grid)).GetProjection())
    dst = osr.SpatialReference()
    dst.ImportFromEPSG(4326)
    for s in (src, dst):
        s.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    ct = osr.CoordinateTransformation(src, dst)
    gt = gdal.Open(str(grid)).GetGeoTransform()
    geo = lambda c, r: ct.TransformPoint(gt[0] + c * gt[1], gt[3] + r * gt[5])[:2]
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(path))
    layer = ds.CreateLayer("samples", dst, ogr.wkbPolygon)
    layer.CreateField(ogr.FieldDefn("landcover", ogr.OFTString))
    for c0, c1, name in stripes:
        corners = [geo(c0 + .25, 5.25), geo(c1 + .75, 5.25), geo(c1 + .75, 30.75),
                   geo(c0 + .25, 30.75)]
        f = ogr.Feature(layer.GetLayerDefn())
        f.SetField("landcover", name)
        ring = ", ".join("%.10f %.10f" % c for c in corners + corners[:1])
        f.SetGeometry(ogr.CreateGeometryFromWkt("POLYGON ((%s))" % ring))
        layer.CreateFeature(f)
    ds = None
    return path


def colour_table(path):
    ds = gdal.Open(str(path))  # kept open while its colour table is read
    ct = ds.GetRasterBand(1).GetColorTable()
    return [ct.GetColorEntry(i) for i in range(ct.GetCount())]


def attribute_table(path):
    """The RAT of band 1 as {usage name: column values}."""
    ds = gdal.Open(str(path))  # kept open while its table is read
    rat = ds.GetRasterBand(1).GetDefaultRAT()
    assert rat is not None, "no raster attribute table"
    usage = {gdal.GFU_MinMax: "value", gdal.GFU_Name: "name", gdal.GFU_Red: "r",
             gdal.GFU_Green: "g", gdal.GFU_Blue: "b", gdal.GFU_Alpha: "a"}
    out = {}
    for c in range(rat.GetColumnCount()):
        key = usage.get(rat.GetUsageOfCol(c))
        if key:
            get = rat.GetValueAsString if key == "name" else rat.GetValueAsInt
            out[key] = [get(r, c) for r in range(rat.GetRowCount())]
    return out


@pytest.fixture(scope="module")
def vector_map(tmp_path_factory):
    """Polygons named field/forest/water (classes 1, 2, 3: sorted names) ->
    train -> classify."""
    d = tmp_path_factory.mktemp("vector")
    feat = features(d, class_values(3))
    gpkg = polygons_gpkg(d / "s.gpkg", feat, [(1, 10, "field"), (15, 24, "forest"),
                                              (29, 38, "water")])
    run_ok("train", "--samples", gpkg, "--class-field", "landcover", *FIXED, feat, d / "m.model")
    run_ok("classify", "--model", d / "m.model", feat, d / "map.tif")
    return d / "map.tif"


def test_vector_trained_map_has_the_documented_palette(vector_map):
    ct = colour_table(vector_map)
    assert len(ct) == 4, "colour table: max class + 1 entries, got %d" % len(ct)
    assert ct[0][3] == 0, "0 (no class) is transparent"
    assert ct[1:] == [palette_rgba(v) for v in (1, 2, 3)]
    assert len({c[:3] for c in ct[1:]}) == 3 and all(sum(c[:3]) > 0 for c in ct[1:])


def test_vector_trained_map_has_an_attribute_table(vector_map):
    rat = attribute_table(vector_map)
    assert rat["value"] == [1, 2, 3]
    assert rat["name"] == ["field", "forest", "water"]
    ct = colour_table(vector_map)
    assert list(zip(rat["r"], rat["g"], rat["b"], rat["a"])) == ct[1:]
    info = subprocess.run(["gdalinfo", str(vector_map)], capture_output=True, text=True)
    assert "GDALRasterAttributeTable" in info.stdout and "forest" in info.stdout


def test_qgis_legend_lists_the_classes(vector_map):
    """QGIS 3.22 opens the map with a paletted renderer of exactly 0..3, named."""
    code = ("import os, sys\n"
            "os.environ['QT_QPA_PLATFORM'] = 'offscreen'\n"
            "from qgis.core import QgsApplication, QgsRasterLayer\n"
            "app = QgsApplication([], False); app.initQgis()\n"
            "l = QgsRasterLayer(sys.argv[1], 'map')\n"
            "r = l.renderer()\n"
            "print(type(r).__name__)\n"
            "for c in r.classes(): print(int(c.value), c.label, c.color.name(), c.color.alpha())\n"
            "sys.stdout.flush(); os._exit(0)  # exitQgis can crash offscreen\n")
    r = subprocess.run([sys.executable, "-c", code, str(vector_map)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == "QgsPalettedRasterRenderer", r.stdout
    got = [l.split() for l in lines[1:] if l.strip()]
    want = [["0", "Unlabelled", "#000000", "0"]] + [
        [str(v), n, "#%02x%02x%02x" % palette_rgba(v)[:3], "255"]
        for v, n in ((1, "field"), (2, "forest"), (3, "water"))]
    assert got == want


def test_training_raster_colours_are_kept(tmp_path):
    """Colours of the training raster's table stay; a class it leaves out (3)
    takes the palette's."""
    values = class_values(3)
    feat = features(tmp_path, values)
    labels = write_cube(tmp_path / "labels.tif", values.astype(np.uint8), nodata=0,
                        like=INDIAN_PINES)
    ds = gdal.Open(str(labels), gdal.GA_Update)
    ct = gdal.ColorTable()
    for i, c in enumerate([(0, 0, 0, 0), (10, 20, 30, 255), (200, 100, 50, 255)]):
        ct.SetColorEntry(i, c)
    ds.GetRasterBand(1).SetRasterColorTable(ct)
    ds = None
    run_ok("train", "--labels", labels, *FIXED, feat, tmp_path / "m.model")
    run_ok("classify", "--model", tmp_path / "m.model", feat, tmp_path / "map.tif")
    got = colour_table(tmp_path / "map.tif")
    assert got[1:] == [(10, 20, 30, 255), (200, 100, 50, 255), palette_rgba(3)]


def test_many_classes_follow_the_documented_rule(tmp_path):
    """50 classes: the whole list, then its darker round; the table stops at 50."""
    values = class_values(50)
    feat = features(tmp_path, values)
    labels = write_cube(tmp_path / "labels.tif", values.astype(np.uint8), nodata=0,
                        like=INDIAN_PINES)
    run_ok("train", "--labels", labels, *FIXED, feat, tmp_path / "m.model")
    run_ok("classify", "--model", tmp_path / "m.model", feat, tmp_path / "map.tif")
    got = colour_table(tmp_path / "map.tif")
    assert len(got) == 51
    assert got[1:] == [palette_rgba(v) for v in range(1, 51)]
    assert len(documented_palette()) == 24
    assert len(set(got[1:49])) == 48, "two rounds of 24 distinct colours"


def test_absent_classes_are_transparent(tmp_path):
    """A model of classes 2 and 5: entries 1, 3, 4 are not classes (transparent,
    no row in the attribute table)."""
    values = np.where(class_values(2) == 1, 2, 5)
    feat = features(tmp_path, values)
    labels = write_cube(tmp_path / "labels.tif", values.astype(np.uint8), nodata=0,
                        like=INDIAN_PINES)
    run_ok("train", "--labels", labels, *FIXED, feat, tmp_path / "m.model")
    run_ok("classify", "--model", tmp_path / "m.model", feat, tmp_path / "map.tif")
    ct = colour_table(tmp_path / "map.tif")
    assert len(ct) == 6
    assert [ct[v][3] for v in range(6)] == [0, 0, 255, 0, 0, 255]
    assert ct[2] == palette_rgba(2) and ct[5] == palette_rgba(5)
    rat = attribute_table(tmp_path / "map.tif")
    assert rat["value"] == [2, 5] and rat["name"] == ["class 2", "class 5"]


def test_info_lists_the_classes(vector_map):
    counts = np.bincount(read_cube(vector_map, np.int64)[0].ravel(), minlength=4)
    j = json.loads(run_ok("info", "--json", vector_map).stdout)
    want = [{"value": v, "name": n, "rgba": list(palette_rgba(v)), "pixels": int(counts[v])}
            for v, n in ((1, "field"), (2, "forest"), (3, "water"))]
    assert j["classes"] == want
    assert sum(c["pixels"] for c in j["classes"]) == j["valid_pixels"]
    text = run_ok("info", vector_map).stdout
    for c in want:
        hexa = "#%02x%02x%02x" % tuple(c["rgba"][:3])
        assert re.search(r"class %d: %s, %s, %d pixels" % (c["value"], c["name"], hexa,
                                                           c["pixels"]), text), text
    # A float raster has no class list.
    assert json.loads(run_ok("info", "--json", INDIAN_PINES).stdout)["classes"] is None


# ---- NaN nodata ------------------------------------------------------------------------

def test_float_output_nodata_is_nan_and_zero_stays_valid(tmp_path):
    """Nodata 0 on the input; Haar's approximation of (5, -5) is a genuine 0.
    The output declares NaN, masked pixels are NaN, the 0 stays 0 and valid."""
    cube = np.full((2, 8, 6), 7, np.int16)
    cube[:, 1, 1] = 0                     # nodata pixel
    cube[0, 2, 3], cube[1, 2, 3] = 5, -5  # approximation exactly 0
    src = write_cube(tmp_path / "in.tif", cube, nodata=0, like=INDIAN_PINES)
    out = tmp_path / "out.tif"
    run_ok("dwt", "--wavelet", "haar", "--levels", "1", src, out)
    ref = pywt.dwt(cube.astype(np.float64), "haar", mode="periodization", axis=0)[0]
    for path in (out, "HYPROF:dwt:wavelet=haar,levels=1:%s" % src):
        ds = gdal.Open(str(path))
        band = ds.GetRasterBand(1)
        assert math.isnan(band.GetNoDataValue()), path
        got = band.ReadAsArray()
        mask = band.GetMaskBand().ReadAsArray()
        assert np.isnan(got[1, 1]) and mask[1, 1] == 0
        assert got[2, 3] == 0.0 and mask[2, 3] == 255, "a genuine 0 is masked or moved"
        valid = np.ones((8, 6), bool)
        valid[1, 1] = False
        assert np.allclose(got[valid], ref[0][valid], rtol=1e-6)
        ds = None
