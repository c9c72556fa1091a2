"""`hyprof assess --match` and vector references, `hyprof split --samples`.

Oracles: the class names of both rasters compared in NumPy (accuracy over the
reference's labelled pixels, scikit-learn's confusion_matrix); gdal.Rasterize
of the vector reference (each class burnt where its features lie) for
--reference-vector; numpy.random.default_rng for the feature split.
Bad input: a clear one-line message, exit code 2, no output left.

Run: /usr/bin/python3 -m pytest tests/test_assess_match.py
"""

import json
import re

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix

from conftest import (EXIT_USAGE, INDIAN_PINES, SAMPLES, gdal, leftovers, message_lines,
                      read_cube, run, run_ok, write_cube)

import conftest
from osgeo import ogr, osr

GT = SAMPLES / "indian_pines_gt.tif"
TRAIN = SAMPLES / "indian_pines_train.tif"
TEST = SAMPLES / "indian_pines_test.tif"
FIXED = ["--grid", "C=32,gamma=2"]


def band1(path):
    return read_cube(path, np.int64)[0]


def categories(path):
    return gdal.Info(str(path), format="json")["bands"][0].get("categories")


GT_NAMES = categories(GT)            # index = class value, [0] = "Unlabelled"
SORTED = sorted(GT_NAMES[1:])        # a text field's numbering: 1 = first name


def write_classmap(path, values, names):
    """A Byte class map on the sample's grid (conftest.write_classmap)."""
    return conftest.write_classmap(path, values, names, GT)


def alphabetical(values):
    """GT values renumbered as a model trained from a text field numbers them."""
    perm = np.array([0] + [SORTED.index(n) + 1 for n in GT_NAMES[1:]])
    return perm[values]


def name_accuracy(map_path, ref_path):
    """OA by class name, computed from the two rasters' category names."""
    m, r = band1(map_path), band1(ref_path)
    mn, rn = categories(map_path), categories(ref_path)
    lab = r > 0
    norm = lambda s: re.sub(r"\s+", "", s).lower()
    same = [norm(mn[a]) == norm(rn[b]) if a < len(mn) else False
            for a, b in zip(m[lab], r[lab])]
    return np.mean(same)


def assess_json(*args):
    r = run_ok("assess", "--json", *args)
    return json.loads(r.stdout), r.stderr


# ---- matching by name ------------------------------------------------------------------

def test_renumbered_classes_match_by_name(tmp_path):
    """The issue's case: class numbers in alphabetical order against the reference's."""
    cmap = write_classmap(tmp_path / "map.tif", alphabetical(band1(GT)), ["Unlabelled"] + SORTED)
    rep, err = assess_json("--reference", GT, cmap)
    assert rep["match"]["by"] == "names" and rep["oa"] == 1.0 and rep["kappa"] == 1.0
    assert rep["match"]["notes"] == [] and "warning" not in err
    pairs = {(p["classmap_value"], p["reference_value"]) for p in rep["match"]["pairs"]}
    assert pairs == {(SORTED.index(n) + 1, v) for v, n in enumerate(GT_NAMES) if v}
    # Each class labelled with the class map's name, and its class-map value given.
    assert [(c["name"], c["classmap_value"]) for c in rep["classes"]] == \
        [(n, SORTED.index(n) + 1) for n in GT_NAMES[1:]]
    # By number, the same map scores what plain value comparison gives.
    rep, err = assess_json("--match", "numbers", "--reference", GT, cmap)
    g = band1(GT)
    want = np.mean(alphabetical(g)[g > 0] == g[g > 0])
    assert rep["match"]["by"] == "numbers" and rep["oa"] == pytest.approx(want, abs=1e-12)
    assert rep["oa"] < 0.05
    # ... and says that the names disagree, on stderr and in the report.
    assert re.search(r"warning: .*names disagree.*2 'Corn-notill' \('Buildings-Grass-Trees-"
                     r"Drives' in the class map\)", err)
    assert any("2 'Corn-notill'" in n for n in rep["match"]["notes"])


def test_text_and_html_reports_say_how(tmp_path):
    cmap = write_classmap(tmp_path / "map.tif", alphabetical(band1(GT)), ["Unlabelled"] + SORTED)
    r = run_ok("assess", "--reference", GT, "--html", tmp_path / "r.html", cmap)
    assert "classes matched by name (case and whitespace ignored)" in r.stdout
    assert re.search(r"OA\s+1\.0000", r.stdout)
    assert re.search(r"\n\s+2  Corn-notill\s+%d\s+1428 " % (SORTED.index("Corn-notill") + 1),
                     r.stdout)
    html = (tmp_path / "r.html").read_text()
    assert "Class matching" in html and "classes matched by name" in html
    # The confusion matrix labels its rows and columns with the names.
    svg = html[html.index("<svg"):html.index("</svg>")]
    assert "</title>2 Corn-notill</text>" in svg
    assert "<title>15 Buildings-Grass-Trees-Drives</title>15 Buildings-Grass-Tree...<" in svg


def test_unmatched_and_differently_written_names(tmp_path):
    names = ["Unlabelled"] + SORTED
    names[SORTED.index("Oats") + 1] = "Avena"                    # no partner either way
    names[SORTED.index("Corn-notill") + 1] = "  corn - NOTILL"   # differs only in case/spaces
    cmap = write_classmap(tmp_path / "map.tif", alphabetical(band1(GT)), names)
    rep, err = assess_json("--reference", GT, cmap)
    assert rep["match"]["by"] == "names"
    assert rep["oa"] == pytest.approx(name_accuracy(cmap, GT), abs=1e-12)
    g = band1(GT)
    assert rep["oa"] == pytest.approx(1 - (g == 9).sum() / (g > 0).sum(), abs=1e-12)
    oats = next(c for c in rep["classes"] if c["value"] == 9)
    assert oats["classmap_value"] is None and oats["producer"] == 0
    lines = [l for l in message_lines(err) if "warning" in l]
    assert len(lines) == 2
    assert re.search(r"reference classes without a class of that name in the class map.*"
                     r"9 'Oats'", lines[0])
    assert re.search(r"class-map classes without a class of that name in the reference.*"
                     r"%d 'Avena'" % (SORTED.index("Oats") + 1), lines[1])
    assert rep["match"]["notes"] == [l.split("warning: ", 1)[1] for l in lines]


def test_names_missing_on_one_side(tmp_path):
    cmap = write_classmap(tmp_path / "map.tif", alphabetical(band1(GT)), ["Unlabelled"] + SORTED)
    bare = write_classmap(tmp_path / "bare.tif", band1(GT), None)   # no names, no sidecar
    rep, err = assess_json("--reference", bare, cmap)
    assert rep["match"]["by"] == "numbers"
    assert "the reference has no class names" in rep["match"]["how"]
    assert re.search(r"warning: classes matched by number: the reference has no class names",
                     err)
    r = run("assess", "--match", "names", "--reference", bare, cmap)
    assert r.returncode == EXIT_USAGE
    lines = message_lines(r.stderr)
    assert len(lines) == 1 and re.search(r"--match names: the reference '.*bare.tif' cannot "
                                         r"be matched by name: the reference has no class "
                                         r"names", lines[0])
    # One name for two classes: ambiguous, so numbers (auto) or an error (names).
    dup = ["Unlabelled"] + SORTED
    dup[5] = " " + dup[4].upper()
    write_classmap(tmp_path / "dup.tif", alphabetical(band1(GT)), dup)
    rep, err = assess_json("--reference", GT, tmp_path / "dup.tif")
    assert rep["match"]["by"] == "numbers"
    assert "warning: classes matched by number: in the class map, '%s' names classes 4 " \
        "and 5" % dup[4] in err
    r = run("assess", "--match", "names", "--reference", GT, tmp_path / "dup.tif")
    assert r.returncode == EXIT_USAGE and "the class map '" in r.stderr
    # Neither side named: numbers, quietly.
    plain = write_classmap(tmp_path / "plain.tif", band1(GT), None)
    rep, err = assess_json("--reference", bare, plain)
    assert rep["match"]["by"] == "numbers" and rep["oa"] == 1.0 and "warning" not in err


def test_trained_from_a_text_field(tmp_path):
    """train --samples (text field: alphabetical numbers) -> classify -> assess
    against the test map: by name the right OA, by number nonsense."""
    pca = tmp_path / "pca.tif"
    run_ok("pca", "--components", "5", "--progress", "none", INDIAN_PINES, pca)
    lab = band1(TRAIN)
    write_points(tmp_path / "s.gpkg", 4326, [((c, r), GT_NAMES[lab[r, c]])
                                             for r, c in zip(*np.nonzero(lab))])
    run_ok("train", "--samples", tmp_path / "s.gpkg", "--class-field", "landcover", *FIXED,
           pca, tmp_path / "m.model")
    run_ok("classify", "--model", tmp_path / "m.model", pca, tmp_path / "map.tif")
    assert categories(tmp_path / "map.tif")[1:17] == SORTED
    rep, _ = assess_json("--reference", TEST, tmp_path / "map.tif")
    assert rep["match"]["by"] == "names"
    oa = name_accuracy(tmp_path / "map.tif", TEST)
    assert rep["oa"] == pytest.approx(oa, abs=1e-12) and oa > 0.5
    rep, _ = assess_json("--reference", TEST, "--match", "numbers", tmp_path / "map.tif")
    assert rep["oa"] < 0.2


# ---- vector reference -------------------------------------------------------------------

def transformer(epsg):
    src = osr.SpatialReference(wkt=gdal.Open(str(GT)).GetProjection())
    dst = osr.SpatialReference()
    dst.ImportFromEPSG(epsg)
    for s in (src, dst):
        s.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    ct = osr.CoordinateTransformation(src, dst)
    gt = gdal.Open(str(GT)).GetGeoTransform()
    return dst, lambda col, row: ct.TransformPoint(gt[0] + col * gt[1], gt[3] + row * gt[5])[:2]


def new_layer(path, epsg, text=True, name="ref"):
    dst, geo = transformer(epsg)
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(path))
    layer = ds.CreateLayer(name, dst, ogr.wkbUnknown)
    layer.CreateField(ogr.FieldDefn("landcover", ogr.OFTString if text else ogr.OFTInteger))
    layer.CreateField(ogr.FieldDefn("id", ogr.OFTInteger))
    return ds, layer, geo


def add(layer, wkt, cls, fid):
    f = ogr.Feature(layer.GetLayerDefn())
    f.SetField("landcover", cls)
    f.SetField("id", fid)
    f.SetGeometry(ogr.CreateGeometryFromWkt(wkt))
    layer.CreateFeature(f)


def write_points(path, epsg, points):
    ds, layer, geo = new_layer(path, epsg)
    for i, ((col, row), cls) in enumerate(points):
        add(layer, "POINT (%.10f %.10f)" % geo(col + 0.5, row + 0.5), cls, i)
    ds = None


def square(geo, c0, r0, c1, r1):
    """A polygon whose edges lie a quarter pixel inside the block's outline."""
    cs = [geo(c0 + .25, r0 + .25), geo(c1 + .75, r0 + .25), geo(c1 + .75, r1 + .75),
          geo(c0 + .25, r1 + .75)]
    return "POLYGON ((%s))" % ", ".join("%.10f %.10f" % c for c in cs + cs[:1])


# Blocks of the reference scene and the class each is said to be (names of the
# sample's legend, one written differently, one unknown to the class map).
BLOCKS = [((30, 30, 40, 38), "Corn-notill"), ((75, 20, 82, 30), "soybean-MINTILL"),
          ((100, 100, 110, 106), "Woods"), ((60, 120, 66, 126), "Grass-trees"),
          ((5, 60, 12, 64), "Hay-windrowed"), ((120, 10, 124, 14), "Marsh")]
_OTHERS = [n for n in GT_NAMES[1:] if n.lower() not in {b.lower() for _, b in BLOCKS}]
POINTS = [((3 + 9 * k, 4 + 8 * k), _OTHERS[k % len(_OTHERS)]) for k in range(15)]


def write_reference(path, epsg, text=True):
    ds, layer, geo = new_layer(path, epsg, text)
    code = lambda n: n if text else 1 + [b for _, b in BLOCKS + POINTS].index(n) % 200
    for i, (block, cls) in enumerate(BLOCKS):
        add(layer, square(geo, *block), code(cls), i)
    for i, ((col, row), cls) in enumerate(POINTS):
        add(layer, "POINT (%.10f %.10f)" % geo(col + 0.5, row + 0.5), code(cls), 100 + i)
    ds = None


def rasterize_oracle(vector, out):
    """gdal.Rasterize of each class (sorted name order = its number) on GT's grid,
    with the names as categories."""
    ds = gdal.GetDriverByName("GTiff").Create(str(out), 145, 145, 1, gdal.GDT_Byte)
    src = gdal.Open(str(GT))
    ds.SetProjection(src.GetProjection())
    ds.SetGeoTransform(src.GetGeoTransform())
    names = sorted({n for _, n in BLOCKS + POINTS})
    for k, n in enumerate(names):
        gdal.Rasterize(ds, str(vector), burnValues=[k + 1], where="landcover = '%s'" % n)
    ds.GetRasterBand(1).SetCategoryNames(["Unlabelled"] + names)
    ds = None
    return out


@pytest.mark.parametrize("epsg", [4326, 3857])
def test_vector_reference_equals_its_rasterisation(tmp_path, epsg):
    write_reference(tmp_path / "ref.gpkg", epsg)
    oracle = rasterize_oracle(tmp_path / "ref.gpkg", tmp_path / "oracle.tif")
    assert (band1(oracle) > 0).sum() > 300
    cmap = write_classmap(tmp_path / "map.tif", alphabetical(band1(GT)), ["Unlabelled"] + SORTED)
    vec, err = assess_json("--reference-vector", tmp_path / "ref.gpkg", "--class-field",
                           "landcover", cmap)
    ras, _ = assess_json("--reference", oracle, cmap)
    for key in ("pixels", "oa", "aa", "kappa", "classes", "confusion", "unclassified"):
        assert vec[key] == ras[key], key
    assert vec["match"]["by"] == "names" and vec["reference_field"] == "landcover"
    assert vec["match"]["notes"] == ras["match"]["notes"]
    assert re.search(r"warning: reference classes without a class of that name .*'Marsh'", err)
    # The independent count: class names compared pixel by pixel.
    assert vec["oa"] == pytest.approx(name_accuracy(cmap, oracle), abs=1e-12)
    r, m = band1(oracle), band1(cmap)
    names = categories(oracle)
    to_ref = {SORTED.index(n) + 1: names.index(n) for n in names[1:] if n in SORTED}
    to_ref[SORTED.index("Soybean-mintill") + 1] = names.index("soybean-MINTILL")
    pred = np.vectorize(lambda v: to_ref.get(v, 0))(m[r > 0])
    cm = confusion_matrix(r[r > 0], pred, labels=list(range(1, len(names))) + [0])
    assert np.array_equal(np.array(vec["confusion"]), cm[:-1, :-1])


def test_vector_reference_with_integer_classes(tmp_path):
    """An integer field carries no names: classes pair by number (and say why)."""
    write_reference(tmp_path / "ref.gpkg", 4326, text=False)
    cmap = write_classmap(tmp_path / "map.tif", band1(GT), GT_NAMES)
    rep, err = assess_json("--reference-vector", tmp_path / "ref.gpkg", "--class-field",
                           "landcover", "--layer", "ref", cmap)
    assert rep["match"]["by"] == "numbers"
    assert "warning: classes matched by number: the reference has no class names" in err
    # Same as rasterising the integer field directly.
    ds = gdal.GetDriverByName("GTiff").Create(str(tmp_path / "o.tif"), 145, 145, 1, gdal.GDT_Byte)
    src = gdal.Open(str(GT))
    ds.SetProjection(src.GetProjection())
    ds.SetGeoTransform(src.GetGeoTransform())
    gdal.Rasterize(ds, str(tmp_path / "ref.gpkg"), attribute="landcover")
    ds = None
    ras, _ = assess_json("--reference", tmp_path / "o.tif", cmap)
    assert rep["confusion"] == ras["confusion"] and rep["oa"] == ras["oa"]


# ---- vector split -----------------------------------------------------------------------

def write_split_samples(path, epsg):
    """Polygons and points of three classes (12, 7 and 3 features), interleaved."""
    ds, layer, geo = new_layer(path, epsg, name="samples")
    classes = ["wheat"] * 12 + ["oak"] * 7 + ["pond"] * 3
    order = np.random.default_rng(5).permutation(len(classes))
    for i, k in enumerate(order):
        c0, r0 = 6 * (i % 20), 6 * (i // 20) + 3
        wkt = square(geo, c0, r0, c0 + 3, r0 + 2) if i % 3 else \
            "POINT (%.10f %.10f)" % geo(c0 + 0.5, r0 + 0.5)
        add(layer, wkt, classes[k], i)
    f = ogr.Feature(layer.GetLayerDefn())         # no class: in neither part
    f.SetField("id", 999)
    f.SetGeometry(ogr.CreateGeometryFromWkt("POINT (%.10f %.10f)" % geo(1, 1)))
    layer.CreateFeature(f)
    ds = None


def features(path):
    ds = ogr.Open(str(path))
    layer = ds.GetLayer(0)
    out = [(f.GetField("id"), f.GetField("landcover"), f.GetGeometryRef().ExportToWkt())
           for f in layer]
    srs = layer.GetSpatialRef()
    return out, srs


def numpy_feature_split(samples, per_class, seed):
    """Classes in sorted name order; per class, u = default_rng(seed).random(n)
    over its features in layer order; the smallest u train."""
    feats, _ = features(samples)
    rng = np.random.default_rng(seed)
    train = set()
    for name in sorted({c for _, c, _ in feats if c}):
        ids = [i for i, c, _ in feats if c == name]
        k = per_class if per_class >= 1 else max(1, int(np.rint(per_class * len(ids))))
        u = rng.random(len(ids))
        train |= {ids[j] for j in np.argsort(u, kind="stable")[:k]}
    return train


@pytest.mark.parametrize("per_class,seed,ext", [(0.5, 7, "gpkg"), (2, 11, "geojson"),
                                                (0.3, 1, "fgb")])
def test_vector_split_whole_features(tmp_path, per_class, seed, ext):
    write_split_samples(tmp_path / "s.gpkg", 3857)
    tr, te = tmp_path / ("train." + ext), tmp_path / ("test." + ext)
    r = run_ok("split", "--samples", tmp_path / "s.gpkg", "--class-field", "landcover",
               "--per-class", per_class, "--seed", seed, tr, te)
    assert "1 feature(s) without a class in neither" in r.stdout
    src, srs = features(tmp_path / "s.gpkg")
    a, sa = features(tr)
    b, sb = features(te)
    ids_a, ids_b = {f[0] for f in a}, {f[0] for f in b}
    # Whole features, each on one side only, attributes and geometry unchanged.
    assert not ids_a & ids_b and len(ids_a) == len(a) and len(ids_b) == len(b)
    assert ids_a | ids_b == {f[0] for f in src if f[1]}
    by_id = {f[0]: f for f in src}
    for f in a + b:
        assert f[1] == by_id[f[0]][1]
        assert ogr.CreateGeometryFromWkt(f[2]).Equals(ogr.CreateGeometryFromWkt(by_id[f[0]][2]))
    assert sa.IsSame(srs) and sb.IsSame(srs)
    # Stratified and reproducible: NumPy's draw, feature for feature.
    assert ids_a == numpy_feature_split(tmp_path / "s.gpkg", per_class, seed)
    counts = {c: sum(1 for f in a if f[1] == c) for c in ("wheat", "oak", "pond")}
    n = {"wheat": 12, "oak": 7, "pond": 3}
    want = {c: per_class if per_class >= 1 else max(1, int(np.rint(per_class * n[c])))
            for c in n}
    assert counts == want
    run_ok("split", "--samples", tmp_path / "s.gpkg", "--class-field", "landcover",
           "--per-class", per_class, "--seed", seed, tmp_path / ("t2." + ext),
           tmp_path / ("e2." + ext))
    assert {f[0] for f in features(tmp_path / ("t2." + ext))[0]} == ids_a


def test_vector_split_feeds_train(tmp_path):
    write_split_samples(tmp_path / "s.gpkg", 4326)
    run_ok("split", "--samples", tmp_path / "s.gpkg", "--class-field", "landcover",
           "--per-class", "0.5", tmp_path / "tr.gpkg", tmp_path / "te.gpkg")
    pca = tmp_path / "pca.tif"
    run_ok("pca", "--components", "3", "--progress", "none", INDIAN_PINES, pca)
    run_ok("train", "--samples", tmp_path / "tr.gpkg", "--class-field", "landcover", *FIXED,
           "--folds", "2", pca, tmp_path / "m.model")
    run_ok("classify", "--model", tmp_path / "m.model", pca, tmp_path / "map.tif")
    rep, _ = assess_json("--reference-vector", tmp_path / "te.gpkg", "--class-field",
                         "landcover", tmp_path / "map.tif")
    assert rep["match"]["by"] == "names"
    assert [c["name"] for c in rep["classes"]] == ["oak", "pond", "wheat"]


# ---- bad input ---------------------------------------------------------------------------

def expect_usage(tmp_path, outs, *args, message):
    r = run(*args)
    assert r.returncode == EXIT_USAGE, r.stderr
    lines = message_lines(r.stderr)
    assert len(lines) == 1 and re.search(message, lines[0]), r.stderr
    for o in outs:
        assert leftovers(tmp_path, o) == []


def test_bad_arguments(tmp_path):
    write_reference(tmp_path / "ref.gpkg", 4326)
    write_split_samples(tmp_path / "s.gpkg", 4326)
    ref = ["--reference-vector", tmp_path / "ref.gpkg"]
    html = ["--html", tmp_path / "r.html"]
    expect_usage(tmp_path, ["r.html"], "assess", *ref, "--class-field", "landcover",
                 "--reference", GT, *html, TEST,
                 message=r"give either --reference RASTER or --reference-vector")
    expect_usage(tmp_path, ["r.html"], "assess", *html, TEST,
                 message=r"give either --reference RASTER or --reference-vector")
    expect_usage(tmp_path, ["r.html"], "assess", *ref, *html, TEST,
                 message=r"--reference-vector needs --class-field")
    expect_usage(tmp_path, ["r.html"], "assess", *ref, "--class-field", "nope", *html, TEST,
                 message=r"has no field 'nope'")
    expect_usage(tmp_path, ["r.html"], "assess", "--reference", GT, "--class-field", "x",
                 *html, TEST, message=r"--class-field applies to --reference-vector only")
    expect_usage(tmp_path, ["r.html"], "assess", "--match", "bogus", "--reference", GT, TEST,
                 message=r"'bogus' is not one of auto\|names\|numbers")
    # A reference outside the class map: nothing to score.
    write_classmap(tmp_path / "far.tif", band1(GT), GT_NAMES)
    ds = gdal.Open(str(tmp_path / "far.tif"), gdal.GA_Update)
    gt = list(ds.GetGeoTransform())
    gt[0] += 1e5
    ds.SetGeoTransform(gt)
    ds = None
    expect_usage(tmp_path, ["r.html"], "assess", *ref, "--class-field", "landcover", *html,
                 tmp_path / "far.tif", message=r"no feature of '.*ref.gpkg' covers a pixel")
    s = ["--samples", tmp_path / "s.gpkg", "--class-field", "landcover"]
    outs = ["a.gpkg", "b.shp", "b.gpkg"]
    expect_usage(tmp_path, outs, "split", *s, "--per-class", "2", tmp_path / "a.gpkg",
                 tmp_path / "b.shp", message=r"'.*b.shp': vector outputs are .gpkg")
    expect_usage(tmp_path, outs, "split", *s, "--preset", "eadp-table1", tmp_path / "a.gpkg",
                 tmp_path / "b.gpkg", message=r"--preset gives pixel counts")
    expect_usage(tmp_path, outs, "split", *s, "--per-class", "3", tmp_path / "a.gpkg",
                 tmp_path / "b.gpkg",
                 message=r"class 'pond' has 3 feature\(s\): 3 for training would leave none")
    expect_usage(tmp_path, outs, "split", *s, "--reference", GT, "--per-class", "2",
                 tmp_path / "a.gpkg", tmp_path / "b.gpkg",
                 message=r"give either --reference RASTER or --samples VECTOR")
    expect_usage(tmp_path, outs, "split", "--samples", tmp_path / "s.gpkg", "--per-class",
                 "2", tmp_path / "a.gpkg", tmp_path / "b.gpkg",
                 message=r"--samples needs --class-field")
    expect_usage(tmp_path, outs, "split", "--samples", tmp_path / "s.gpkg", "--class-field",
                 "id", "--per-class", "2", tmp_path / "a.gpkg", tmp_path / "b.gpkg",
                 message=r"feature 1: class '0' is not an integer 1\.\.65535")
    ds = ogr.Open(str(tmp_path / "s.gpkg"), 1)
    ds.GetLayer(0).CreateField(ogr.FieldDefn("empty", ogr.OFTString))
    ds = None
    expect_usage(tmp_path, outs, "split", "--samples", tmp_path / "s.gpkg", "--class-field",
                 "empty", "--per-class", "2", tmp_path / "a.gpkg", tmp_path / "b.gpkg",
                 message=r"no feature of '.*s.gpkg' has a class in 'empty'")
