"""hyprof.assess in Python against `hyprof assess`: class names and the HTML report.

Oracles: the executable on the same maps written as GeoTIFF (its --json
numbers and its --html page, byte for byte: both come from
hyprof_assess_classes and hyprof_assess_html); GDAL's PNG driver for the
report's thumbnail encoder (hyprof_png_encode_rgb gives the same bytes);
for pairing by name, a permuted legend whose true accuracy is known (the
class map equals the reference up to the renumbering). Bad arguments raise
ValueError/TypeError naming the parameter; an HTML path is written whole or
not at all.

Run: /usr/bin/python3 -m pytest -q tests/test_python_assess.py
"""

import ctypes
import json
import os
import warnings

import numpy as np
import pytest
from osgeo import gdal, ogr, osr

from conftest import SAMPLES, run_ok, write_classmap
from test_python import hp, library_path  # noqa: F401  (hp: the package over this build)

GT = SAMPLES / "indian_pines_gt.tif"
TRAIN = SAMPLES / "indian_pines_train.tif"
TEST = SAMPLES / "indian_pines_test.tif"


def legend(path):
    """(category names {value: name}, colours {value: rgba}) of a raster, as
    the CLI reads them (colour table entries of the values it holds)."""
    ds = gdal.Open(str(path))
    band = ds.GetRasterBand(1)
    band.GetDescription()  # GTiff reads the .aux.xml categories only after this (GDAL 3.6)
    names = band.GetCategoryNames()
    ct = band.GetColorTable()
    values = np.unique(band.ReadAsArray())
    colours = {int(v): ct.GetColorEntry(int(v)) for v in values if ct and v < ct.GetCount()}
    return (dict(enumerate(names)) if names else None), (colours or None)


def gt_names():
    return legend(GT)[0]


def write_map(path, values, names):
    return write_classmap(path, values, names, GT)


def permuted(tmp_path):
    """The reference with 20 % of its pixels changed, renumbered in sorted-name
    order (as a model trained from a text field numbers its classes)."""
    names = gt_names()
    g = gdal.Open(str(GT)).ReadAsArray().astype(int)
    rng = np.random.default_rng(5)
    noisy = g.copy()
    change = rng.random(g.shape) < 0.2
    noisy[change] = rng.integers(0, 17, change.sum())
    srt = sorted(names[v] for v in range(1, 17))
    perm = np.array([0] + [srt.index(names[v]) + 1 for v in range(1, 17)])
    return write_map(tmp_path / "perm.tif", perm[noisy], ["Unlabelled"] + srt), noisy, g


def cli_and_python(hp, tmp_path, cmap, ref, *cli_args, **py_kw):
    """`hyprof assess` (--json and --html) and hyprof.assess on the same files."""
    page = tmp_path / "cli.html"
    args = list(cli_args) + ["--reference", ref]
    want = json.loads(run_ok("assess", "--json", *args, cmap).stdout)
    run_ok("assess", "--html", page, *args, cmap)
    mn, mc = legend(cmap)
    rn, rc = legend(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = hp.assess(gdal.Open(str(cmap)).ReadAsArray(), gdal.Open(str(ref)).ReadAsArray(),
                        map_names=mn, reference_names=rn, map_colors=mc, reference_colors=rc,
                        map_label=str(cmap), reference_label=str(ref), html=True, **py_kw)
    return want, page.read_bytes(), got


def nulls(x):
    """NaN as JSON's null, as `--json` writes it."""
    if isinstance(x, dict):
        return {k: nulls(v) for k, v in x.items()}
    if isinstance(x, list):
        return [nulls(v) for v in x]
    return None if isinstance(x, float) and np.isnan(x) else x


def same_numbers(got, want):
    d = nulls(got.to_dict())
    for k in ("pixels", "oa", "aa", "kappa", "confusion", "unclassified", "classes"):
        assert d[k] == want[k], k
    assert d["match"] == want["match"]


@pytest.mark.parametrize("case", ["permuted", "permuted-numbers", "no-names", "samples"])
def test_numbers_and_html_equal_the_cli(hp, tmp_path, case):
    if case == "samples":
        cmap, ref, cli, kw = TRAIN, TEST, [], {}
    else:
        cmap, noisy, g = permuted(tmp_path)
        ref, cli, kw = GT, [], {}
        if case == "permuted-numbers":
            cli, kw = ["--match", "numbers"], {"match": "numbers"}
        if case == "no-names":
            cmap = write_map(tmp_path / "plain.tif", noisy, None)
    want, page, got = cli_and_python(hp, tmp_path, cmap, ref, *cli, **kw)
    same_numbers(got, want)
    assert got.html.encode() == page, "the Python report differs from the CLI's"
    assert b"data:image/png;base64," in page
    if case == "permuted":
        # by name the renumbering is undone: the accuracy of the unpermuted map
        assert got.match == "names" and got.classmap_values is not None
        lab = g > 0
        assert got.oa == pytest.approx(np.mean(noisy[lab] == g[lab]), abs=1e-12)
    if case == "permuted-numbers":
        assert got.match == "numbers" and got.oa < 0.3


def test_vector_reference_html_equals_the_cli(hp, tmp_path):
    """--reference-vector: the page names the class field; the reference burnt
    by hyprof.vector (as the CLI burns it) gives the same page."""
    cmap, _, g = permuted(tmp_path)
    names = gt_names()
    ds = gdal.Open(str(GT))
    gt, wkt = ds.GetGeoTransform(), ds.GetProjection()
    vec = tmp_path / "ref.gpkg"
    out = ogr.GetDriverByName("GPKG").CreateDataSource(str(vec))
    srs = osr.SpatialReference()
    srs.ImportFromWkt(wkt)
    lyr = out.CreateLayer("ref", srs, ogr.wkbPolygon)
    lyr.CreateField(ogr.FieldDefn("landcover", ogr.OFTString))
    corners = [(r, c) for r, c in [(10, 10), (40, 60), (100, 30), (120, 120), (70, 80),
                                   (20, 100), (30, 30), (90, 90)] if g[r + 3, c + 3]]
    for r0, c0 in corners:
        x0, y0 = gt[0] + (c0 + 0.2) * gt[1], gt[3] + (r0 + 0.2) * gt[5]
        ring = ogr.Geometry(ogr.wkbLinearRing)
        for dx, dy in [(0, 0), (6, 0), (6, 6), (0, 6), (0, 0)]:
            ring.AddPoint(x0 + dx * gt[1], y0 + dy * gt[5])
        poly = ogr.Geometry(ogr.wkbPolygon)
        poly.AddGeometry(ring)
        f = ogr.Feature(lyr.GetLayerDefn())
        f.SetField("landcover", names[int(g[r0 + 3, c0 + 3])])
        f.SetGeometry(poly)
        lyr.CreateFeature(f)
    out = None
    page = tmp_path / "cli.html"
    args = ["--reference-vector", vec, "--class-field", "landcover", cmap]
    want = json.loads(run_ok("assess", "--json", *args).stdout)
    run_ok("assess", "--html", page, *args)
    from hyprof.vector import samples_to_labels
    lab, rn = samples_to_labels(str(vec), "landcover", ds.RasterXSize, ds.RasterYSize, gt, wkt)
    mn, mc = legend(cmap)
    with pytest.warns(UserWarning, match="class-map classes without a class of that name"):
        got = hp.assess(gdal.Open(str(cmap)).ReadAsArray(), lab, map_names=mn,
                        reference_names=rn, map_colors=mc, map_label=str(cmap),
                        reference_label=str(vec), reference_field="landcover", html=True)
    same_numbers(got, want)
    assert got.match == "names" and got.pixels == 36 * len(corners) and len(corners) >= 4
    assert got.html.encode() == page.read_bytes()
    assert "class field <code>landcover</code>" in got.html


def test_html_path_is_written_whole(hp, tmp_path):
    g = gdal.Open(str(GT)).ReadAsArray()
    target = tmp_path / "report.html"
    target.write_text("old")
    a = hp.assess(g, g, html=target)
    assert target.read_bytes() == a.html.encode() and a.oa == 1.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    with pytest.raises(hp.FileError, match=r"parameter 'html'.*missing"):
        hp.assess(g, g, html=tmp_path / "missing" / "r.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    assert hp.assess(g, g).html is None


def test_match_names_without_names_is_refused(hp):
    g = gdal.Open(str(GT)).ReadAsArray()
    with pytest.raises(ValueError, match=r"parameter 'match': 'names': the class map cannot "
                                         r"be matched by name: the class map has no class"):
        hp.assess(g, g, match="names", reference_names=gt_names())
    with pytest.raises(ValueError, match=r"the reference 'gt\.tif' cannot be matched by name: "
                                         r"in the reference, 'x' names classes 1 and 2"):
        hp.assess(g, g, match="names", map_names={1: "a"}, reference_names={1: "x", 2: "X "},
                  reference_label="gt.tif")


@pytest.mark.parametrize("kw, exc, pattern", [
    ({"match": "bogus"}, ValueError, r"parameter 'match': 'bogus' is not one of"),
    ({"match": 2}, TypeError, r"parameter 'match' must be a string"),
    ({"map_names": 5}, TypeError, r"parameter 'map_names' must be a dict"),
    ({"reference_names": {1.5: "a"}}, TypeError, r"parameter 'reference_names': class values"),
    ({"map_names": {70000: "a"}}, ValueError, r"parameter 'map_names': class value 70000"),
    ({"map_names": {1: 3}}, TypeError, r"parameter 'map_names': the name of class 1"),
    ({"map_colors": {1: (300, 0, 0)}}, ValueError, r"parameter 'map_colors': the colour"),
    ({"reference_colors": [1, 2]}, TypeError, r"parameter 'reference_colors' must be a dict"),
    ({"html": 3}, TypeError, r"parameter 'html' must be True, False or a path"),
    ({"map_label": 3}, TypeError, r"parameter 'map_label' must be a string"),
    ({"class_names": ["a"], "map_names": ["a"]}, TypeError, r"class_names or map_names"),
])
def test_bad_arguments_name_the_parameter(hp, kw, exc, pattern):
    g = np.ones((4, 5), np.uint8)
    with pytest.raises(exc, match=pattern):
        hp.assess(g, g, **kw)


def test_class_names_is_deprecated_and_pairs_by_number(hp):
    g = gdal.Open(str(GT)).ReadAsArray()
    m = np.where(g == 3, 2, g)
    with pytest.warns(DeprecationWarning, match="class_names= is deprecated"):
        a = hp.assess(m, g, class_names=["Alfalfa", "Corn-notill"])
    assert a.match == "numbers" and a.names[:3] == ["Alfalfa", "Corn-notill", "class 3"]
    lab = g > 0
    assert a.oa == pytest.approx(np.mean(m[lab] == g[lab]), abs=1e-12)


def test_auto_falls_back_to_numbers_with_a_warning(hp):
    g = gdal.Open(str(GT)).ReadAsArray()
    with pytest.warns(UserWarning, match="matched by number: the class map has no class names"):
        a = hp.assess(g, g, reference_names=gt_names())
    assert a.match == "numbers" and a.oa == 1.0 and a.names[0] == "Alfalfa"


def test_xarray_takes_names_from_attributes(hp):
    xr = pytest.importorskip("xarray")
    import hyprof.xarray as hx
    ref = np.array([[1, 1, 2], [2, 0, 1]], np.uint16)
    swapped = np.array([0, 2, 1], np.uint16)[ref]
    r = xr.DataArray(ref, dims=("y", "x"), attrs={"class_values": [1, 2],
                                                  "class_names": ["wheat", "maize"]})
    m = xr.DataArray(swapped, dims=("y", "x"), attrs={"class_values": [1, 2],
                                                      "class_names": ["Maize", "Wheat"]})
    a = hx.assess(m, r)
    assert a.match == "names" and a.oa == 1.0 and a.classmap_values == [2, 1]
    assert a.names == ["Wheat", "Maize"]  # the class map's names, by reference value
    with pytest.warns(UserWarning, match=r"names disagree .*1 'wheat' \('Maize'"):
        assert hx.assess(m, r, match="numbers").oa == 0.0


def gdal_png(rgb):
    h, w = rgb.shape[1:]
    mem = gdal.GetDriverByName("MEM").Create("", w, h, 3, gdal.GDT_Byte)
    for k in range(3):
        mem.GetRasterBand(k + 1).WriteArray(rgb[k])
    name = "/vsimem/test_python_assess.png"
    gdal.GetDriverByName("PNG").CreateCopy(name, mem)
    f = gdal.VSIFOpenL(name, "rb")
    gdal.VSIFSeekL(f, 0, 2)
    n = gdal.VSIFTellL(f)
    gdal.VSIFSeekL(f, 0, 0)
    data = bytes(gdal.VSIFReadL(1, n, f))
    gdal.VSIFCloseL(f)
    gdal.Unlink(name)
    return data


@pytest.mark.parametrize("w, h, block", [(400, 300, 20), (400, 400, 1), (40, 3, 1), (1, 1, 1),
                                         (400, 7, 1), (123, 400, 7)])
def test_png_encoder_equals_gdal_png_driver(w, h, block):
    lib = ctypes.CDLL(library_path())
    enc = lib.hyprof_png_encode_rgb
    enc.restype = ctypes.c_int
    enc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                    ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    rng = np.random.default_rng(w * h + block)
    v = rng.integers(0, 6, (h // block + 1, w // block + 1))
    v = v.repeat(block, 0).repeat(block, 1)[:h, :w]
    rgb = np.ascontiguousarray(rng.integers(0, 256, (6, 3)).astype(np.uint8)[v]
                               .transpose(2, 0, 1))
    out, n = ctypes.c_void_p(), ctypes.c_size_t()
    assert enc(rgb.ctypes.data, w, h, ctypes.byref(out), ctypes.byref(n)) == 0
    try:
        assert ctypes.string_at(out, n.value) == gdal_png(rgb)
    finally:
        ctypes.CDLL(None).free(out)
