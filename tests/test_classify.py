"""`hyprof train`, `classify`, `assess` and `split`.

Oracles: scikit-learn's accuracy_score, recall_score and cohen_kappa_score and
confusion_matrix for assess; LIBSVM's own svm-predict tool (libsvm-tools) and
python3-libsvm's svm_predict for the labels; numpy.random.default_rng for split
and the bundled samples/indian_pines_train.tif; a label raster made by NumPy for
the vector samples (GeoPackage in EPSG:4326 and EPSG:3857, points and polygons).
Bad input: a clear message, exit code 2, no output left.

Run: /usr/bin/python3 -m pytest tests/test_classify.py
"""

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, cohen_kappa_score, confusion_matrix, recall_score

from conftest import (EXIT_CANCELLED, EXIT_USAGE, INDIAN_PINES, SAMPLES, exe_path, gdal,
                      leftovers, message_lines, read_cube, run, run_ok, write_cube)

from osgeo import ogr, osr

GT = SAMPLES / "indian_pines_gt.tif"
TRAIN = SAMPLES / "indian_pines_train.tif"
TEST = SAMPLES / "indian_pines_test.tif"
TABLE1 = [0, 15, 50, 50, 50, 50, 50, 15, 50, 15, 50, 50, 50, 50, 50, 50, 50]
FIXED = ["--grid", "C=32,gamma=2"]


@pytest.fixture(scope="module")
def pca(tmp_path_factory):
    """Seven principal components of Indian Pines (the EADP paper's base)."""
    out = tmp_path_factory.mktemp("pca") / "pca.tif"
    run_ok("pca", "--components", "7", "--progress", "none", INDIAN_PINES, out)
    return out


@pytest.fixture(scope="module")
def pca_model(pca, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "pca.model"
    run_ok("train", "--labels", TRAIN, *FIXED, "--progress", "none", pca, out)
    return out


def categories(path):
    """Category names of band 1 (gdal.Info: the bindings' GetCategoryNames returned
    None here for GeoTIFFs whose names live in the .aux.xml sidecar)."""
    return gdal.Info(str(path), format="json")["bands"][0].get("categories")


def band1(path):
    return read_cube(path, np.int64)[0]


def libsvm_part(model, folder):
    """The LIBSVM model inside a hyprof model, as svm-predict reads it."""
    lines = Path(model).read_text().split("\n")
    path = Path(folder) / "libsvm.model"
    path.write_text("\n".join(lines[lines.index("libsvm_model") + 1:]))
    return path


def scaling(model):
    lines = Path(model).read_text().split("\n")
    get = lambda k: np.array(next(l for l in lines if l.startswith(k + " ")).split()[1:], float)
    return get("min"), get("max")


def scaled_pixels(features, model):
    """Every pixel scaled as hyprof does: -1 + 2 (x - min) / (max - min) in double."""
    x = read_cube(features, np.float32).astype(np.float64)
    x = x.reshape(x.shape[0], -1).T
    lo, hi = scaling(model)
    return -1.0 + 2.0 * (x - lo) / (hi - lo)


# ---- assess against scikit-learn ---------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_assess_matches_sklearn(tmp_path, seed):
    rng = np.random.default_rng(seed)
    ref = rng.integers(0, 7, (60, 80)).astype(np.uint8)      # 0 = unlabelled
    ref[ref == 4] = 9                                        # a gap in the class values
    pred = np.where(rng.random(ref.shape) < 0.7, ref, rng.integers(1, 10, ref.shape))
    pred[ref == 0] = rng.integers(0, 10, (ref == 0).sum())    # never scored
    pred = pred.astype(np.uint8)
    write_cube(tmp_path / "ref.tif", ref, nodata=0, like=GT)
    write_cube(tmp_path / "map.tif", pred, like=GT)
    r = run_ok("assess", "--reference", tmp_path / "ref.tif", "--json", tmp_path / "map.tif")
    rep = json.loads(r.stdout)
    y, p = ref[ref > 0], pred[ref > 0]
    classes = sorted(set(y.tolist()))
    assert [c["value"] for c in rep["classes"]] == classes
    assert rep["pixels"] == y.size
    assert rep["oa"] == pytest.approx(accuracy_score(y, p), abs=1e-12)
    recall = recall_score(y, p, labels=classes, average=None, zero_division=0)
    assert rep["aa"] == pytest.approx(recall.mean(), abs=1e-12)
    assert rep["kappa"] == pytest.approx(cohen_kappa_score(y, p), abs=1e-12)
    # Predictions outside the reference's classes count in "unclassified".
    labels = classes + [c for c in range(1, 10) if c not in classes]
    cm = confusion_matrix(y, p, labels=labels)
    assert np.array_equal(np.array(rep["confusion"]), cm[:len(classes), :len(classes)])
    assert rep["unclassified"] == cm[:len(classes), len(classes):].sum(axis=1).tolist()
    for k, c in enumerate(rep["classes"]):
        assert c["producer"] == pytest.approx(recall[k], abs=1e-12)
        col = cm[:len(classes), k].sum()
        assert c["user"] == pytest.approx(cm[k, k] / col if col else np.nan, nan_ok=True)


def test_assess_text_and_html(tmp_path):
    r = run_ok("assess", "--reference", TEST, "--html", tmp_path / "r.html", TRAIN)
    # The training map against the test map: disjoint, so nothing is right.
    assert re.search(r"OA\s+0\.0000", r.stdout)
    html = (tmp_path / "r.html").read_text()
    assert "<svg" in html and "data:image/png;base64," in html and "Alfalfa" in html
    # The test map against the whole reference: the 695 training pixels are 0 there,
    # "other" in the last column of the confusion matrix.
    r = run_ok("assess", "--reference", GT, TEST)
    assert re.search(r"pixels\s+10249", r.stdout)
    assert re.search(r"OA\s+%.4f" % (9554 / 10249), r.stdout)
    assert r.stdout.splitlines()[-1].split() == ["0"] * 15 + ["43", "50"]


# ---- labels against LIBSVM -------------------------------------------------------------

def test_labels_match_libsvm_svm_predict(tmp_path, pca, pca_model):
    if not shutil.which("svm-predict"):
        pytest.fail("svm-predict (Debian's libsvm-tools) is needed as the oracle")
    out = tmp_path / "map.tif"
    run_ok("classify", "--backend", "cpu", "--model", pca_model, pca, out)
    x = scaled_pixels(pca, pca_model)
    with open(tmp_path / "x.txt", "w") as f:
        for row in x:
            f.write("0 " + " ".join("%d:%.17g" % (j + 1, v) for j, v in enumerate(row)) + "\n")
    subprocess.run(["svm-predict", "-q", tmp_path / "x.txt", libsvm_part(pca_model, tmp_path),
                    tmp_path / "pred.txt"], check=True, capture_output=True)
    want = np.loadtxt(tmp_path / "pred.txt").astype(np.int64)
    got = band1(out).ravel()
    assert np.array_equal(got, want), "%d labels differ" % (got != want).sum()


def test_labels_match_python_libsvm_on_borderline_pixels(tmp_path, pca, pca_model):
    """Pixels on segments between training pixels of two classes, where decision
    values come close to 0: hyprof's labels are still LIBSVM's."""
    import svmutil
    cube = read_cube(pca, np.float32)
    train = band1(TRAIN).ravel()
    px = cube.reshape(cube.shape[0], -1).T
    idx = np.flatnonzero(train)
    rng = np.random.default_rng(5)
    a, b = rng.choice(idx, 3000), rng.choice(idx, 3000)
    t = rng.random((3000, 1))
    mid = ((1 - t) * px[a] + t * px[b]).astype(np.float32)
    img = mid.T.reshape(cube.shape[0], 20, 150)
    write_cube(tmp_path / "mid.tif", img, like=None)
    run_ok("classify", "--backend", "cpu", "--model", pca_model, tmp_path / "mid.tif",
           tmp_path / "map.tif")
    m = svmutil.svm_load_model(str(libsvm_part(pca_model, tmp_path)))
    x = scaled_pixels(tmp_path / "mid.tif", pca_model)
    rows = [{j + 1: float(v) for j, v in enumerate(r)} for r in x]
    want, _, _ = svmutil.svm_predict([0] * len(rows), rows, m, "-q")
    got = band1(tmp_path / "map.tif").ravel()
    assert np.array_equal(got, np.array(want, dtype=np.int64))


# ---- class map ------------------------------------------------------------------------

def test_classmap_legend_nodata_and_scores(tmp_path, pca, pca_model):
    cube = read_cube(pca, np.float32)
    cube[:, 10:20, 30:50] = -9999
    write_cube(tmp_path / "nd.tif", cube, nodata=-9999, like=pca)
    out, prob = tmp_path / "map.tif", tmp_path / "prob.tif"
    r = run_ok("classify", "--model", pca_model, "--probabilities", prob, tmp_path / "nd.tif", out)
    assert "wrote %s" % prob in r.stdout
    ds = gdal.Open(str(out))
    band = ds.GetRasterBand(1)
    assert band.DataType == gdal.GDT_Byte and band.GetNoDataValue() == 0
    assert categories(out)[:3] == ["Unlabelled", "Alfalfa", "Corn-notill"]
    assert ds.GetMetadataItem("CLASS_16") == "Stone-Steel-Towers"
    ref_ds = gdal.Open(str(GT))
    ct, ref_ct = band.GetColorTable(), ref_ds.GetRasterBand(1).GetColorTable()
    assert [ct.GetColorEntry(i) for i in range(1, 17)] == [ref_ct.GetColorEntry(i)
                                                            for i in range(1, 17)]
    labels = band.ReadAsArray()
    ct = ref_ct = band = ds = ref_ds = None
    assert (labels[10:20, 30:50] == 0).all() and (np.delete(labels.ravel(), []) >= 0).all()
    assert labels[0, 0] > 0 and (labels[20:] > 0).all()
    p = read_cube(prob, np.float64)
    assert p.shape[0] == 16
    ds = gdal.Open(str(prob))
    assert ds.GetRasterBand(1).GetDescription() == "Alfalfa"
    valid = labels > 0
    # Vote fractions: each pixel's 120 pairwise votes, 15 per class at most.
    assert np.allclose(p[:, valid].sum(axis=0) * 15, 120, atol=1e-4)
    won = np.argmax(p[:, valid], axis=0) + 1
    agree = (won == labels[valid]) | (np.sort(p[:, valid], axis=0)[-1] ==
                                      np.sort(p[:, valid], axis=0)[-2])
    assert agree.all()


def test_elm_is_reproducible_and_learns(tmp_path, pca):
    for name in ("a", "b"):
        run_ok("train", "--labels", TRAIN, "--classifier", "elm", "--neurons", "300",
               "--seed", "3", pca, tmp_path / (name + ".model"))
    assert (tmp_path / "a.model").read_text() == (tmp_path / "b.model").read_text()
    run_ok("classify", "--model", tmp_path / "a.model", "--probabilities", tmp_path / "p.tif",
           pca, tmp_path / "map.tif")
    r = json.loads(run_ok("assess", "--json", "--reference", TEST, tmp_path / "map.tif").stdout)
    assert r["oa"] > 0.5  # measured 0.62 (raw PCA, 300 neurons)
    p = read_cube(tmp_path / "p.tif", np.float64)  # softmax of the outputs
    assert np.allclose(p.sum(axis=0), 1.0, atol=1e-5)
    assert np.array_equal(np.argmax(p, axis=0) + 1, band1(tmp_path / "map.tif"))


def test_model_roundtrip_and_report(tmp_path, pca):
    r = run_ok("train", "--labels", TRAIN, "--grid", "C=8,32,gamma=0.5,2", "--folds", "3",
               pca, tmp_path / "m.model")
    assert re.search(r"cross-validation accuracy 0\.\d+", r.stdout)
    text = (tmp_path / "m.model").read_text().split("\n")
    assert text[0] == "hyprof-classifier 1" and "kind svm" in text
    assert text[3] == "band PC1" and any(l.startswith("class 16 ") for l in text)


# ---- split --------------------------------------------------------------------------

def numpy_split(gt, counts, seed):
    rng = np.random.default_rng(seed)
    flat = gt.ravel()
    train = np.zeros_like(flat)
    for c in range(1, flat.max() + 1):
        idx = np.flatnonzero(flat == c)
        if idx.size == 0:
            continue
        n = counts[c] if isinstance(counts, list) else counts
        train[idx[np.argsort(rng.random(idx.size), kind="stable")[:n]]] = c
    test = np.where(train > 0, 0, flat)
    return train.reshape(gt.shape), test.reshape(gt.shape)


def test_split_preset_reproduces_the_sample(tmp_path):
    run_ok("split", "--reference", GT, "--preset", "eadp-table1", "--seed", "1992",
           tmp_path / "tr.tif", tmp_path / "te.tif")
    assert np.array_equal(band1(tmp_path / "tr.tif"), band1(TRAIN))
    assert np.array_equal(band1(tmp_path / "te.tif"), band1(TEST))
    assert categories(tmp_path / "tr.tif")[9] == "Oats"


@pytest.mark.parametrize("per_class,seed", [("15", 7), ("0.1", 11)])
def test_split_matches_numpy(tmp_path, per_class, seed):
    gt = band1(GT)
    run_ok("split", "--reference", GT, "--per-class", per_class, "--seed", str(seed),
           tmp_path / "tr.tif", tmp_path / "te.tif")
    tr, te = band1(tmp_path / "tr.tif"), band1(tmp_path / "te.tif")
    if per_class == "0.1":
        counts = [0] + [max(1, int(np.rint(0.1 * (gt == c).sum()))) for c in range(1, 17)]
    else:
        counts = int(per_class)
    want_tr, want_te = numpy_split(gt, counts, seed)
    assert np.array_equal(tr, want_tr) and np.array_equal(te, want_te)
    assert not ((tr > 0) & (te > 0)).any() and np.array_equal(tr + te, gt)


def test_split_refuses_a_class_without_test_pixels(tmp_path):
    r = run("split", "--reference", GT, "--per-class", "30", tmp_path / "a.tif", tmp_path / "b.tif")
    assert r.returncode == EXIT_USAGE and "class 7 has 28 pixel(s)" in r.stderr
    assert leftovers(tmp_path, "a.tif") == [] and leftovers(tmp_path, "b.tif") == []


# ---- vector samples ------------------------------------------------------------------

def write_samples(path, epsg, grid, points, polygons, names=None):
    """Points at pixel centres and squares around pixel blocks of `grid`, in another
    CRS; the class as a name, or as its number in `names` (1-based) when given."""
    src = osr.SpatialReference(wkt=gdal.Open(str(grid)).GetProjection())
    dst = osr.SpatialReference()
    dst.ImportFromEPSG(epsg)
    for s in (src, dst):
        s.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    ct = osr.CoordinateTransformation(src, dst)
    gt = gdal.Open(str(grid)).GetGeoTransform()
    geo = lambda col, row: ct.TransformPoint(gt[0] + col * gt[1], gt[3] + row * gt[5])[:2]
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(path))
    layer = ds.CreateLayer("samples", dst, ogr.wkbUnknown)
    layer.CreateField(ogr.FieldDefn("landcover", ogr.OFTInteger if names else ogr.OFTString))
    value = (lambda n: names.index(n) + 1) if names else (lambda n: n)
    for (col, row), name in points:
        f = ogr.Feature(layer.GetLayerDefn())
        f.SetField("landcover", value(name))
        f.SetGeometry(ogr.CreateGeometryFromWkt("POINT (%.10f %.10f)" % geo(col + 0.5, row + 0.5)))
        layer.CreateFeature(f)
    for (c0, r0, c1, r1), name in polygons:
        # Edges a quarter pixel inside the block's outline: exactly the block's pixel
        # centres (at +0.5) inside.
        corners = [geo(c0 + .25, r0 + .25), geo(c1 + .75, r0 + .25), geo(c1 + .75, r1 + .75),
                   geo(c0 + .25, r1 + .75)]
        ring = ", ".join("%.10f %.10f" % c for c in corners + corners[:1])
        f = ogr.Feature(layer.GetLayerDefn())
        f.SetField("landcover", value(name))
        f.SetGeometry(ogr.CreateGeometryFromWkt("POLYGON ((%s))" % ring))
        layer.CreateFeature(f)
    ds = None


@pytest.mark.parametrize("epsg,integer", [(4326, False), (3857, False), (4326, True)])
def test_vector_samples_reprojected_and_rasterised(tmp_path, pca, epsg, integer):
    points = [((5 + 7 * k, 3 + 11 * k), "water" if k % 2 else "forest") for k in range(12)]
    polygons = [((20, 30, 25, 34), "field"), ((100, 60, 103, 70), "forest"),
                ((60, 110, 64, 112), "water")]
    names = sorted({n for _, n in points + polygons})
    write_samples(tmp_path / "s.gpkg", epsg, pca, points, polygons, names if integer else None)
    labels = np.zeros((145, 145), np.uint8)
    for (col, row), n in points:
        labels[row, col] = names.index(n) + 1
    for (c0, r0, c1, r1), n in polygons:
        labels[r0:r1 + 1, c0:c1 + 1] = names.index(n) + 1
    write_cube(tmp_path / "labels.tif", labels, nodata=0, like=pca)
    run_ok("train", "--samples", tmp_path / "s.gpkg", "--class-field", "landcover", *FIXED,
           pca, tmp_path / "v.model")
    run_ok("train", "--labels", tmp_path / "labels.tif", *FIXED, pca, tmp_path / "r.model")
    v = (tmp_path / "v.model").read_text().split("\n")
    r = (tmp_path / "r.model").read_text().split("\n")
    # Same pixels, same classes -> the same LIBSVM model and scaling.
    assert v[v.index("libsvm_model"):] == r[r.index("libsvm_model"):]
    assert [l for l in v if l.startswith(("min", "max", "train_pixels"))] == \
        [l for l in r if l.startswith(("min", "max", "train_pixels"))]
    assert ["class 1", "class 2", "class 3"] == [l[:7] for l in v if l.startswith("class ")]
    # Names from a text field; an integer field has none ("class N").
    want = names if not integer else ["1", "2", "3"]
    assert [l.split()[-1] for l in v if l.startswith("class ")] == want


# ---- bad input ---------------------------------------------------------------------

def expect_usage(tmp_path, out_name, *args, message):
    r = run(*args)
    assert r.returncode == EXIT_USAGE, r.stderr
    lines = message_lines(r.stderr)
    assert len(lines) == 1 and re.search(message, lines[0]), r.stderr
    assert leftovers(tmp_path, out_name) == []


def test_wrong_band_count(tmp_path, pca_model):
    expect_usage(tmp_path, "map.tif", "classify", "--model", pca_model, INDIAN_PINES,
                 tmp_path / "map.tif",
                 message=r"the input has 200 band\(s\) but the model was trained on 7")


def test_labels_on_another_grid(tmp_path, pca):
    lab = band1(TRAIN).astype(np.uint8)[:100]
    write_cube(tmp_path / "lab.tif", lab, nodata=0, like=TRAIN)
    expect_usage(tmp_path, "m.model", "train", "--labels", tmp_path / "lab.tif", pca,
                 tmp_path / "m.model", message=r"not on the same grid: .*145x145.*145x100")
    # Same size, shifted origin.
    ds = gdal.Open(str(TRAIN))
    gt = list(ds.GetGeoTransform())
    gt[0] += 100
    write_cube(tmp_path / "shift.tif", band1(TRAIN).astype(np.uint8), nodata=0, like=TRAIN)
    s = gdal.Open(str(tmp_path / "shift.tif"), gdal.GA_Update)
    s.SetGeoTransform(gt)
    s = None
    expect_usage(tmp_path, "m.model", "train", "--labels", tmp_path / "shift.tif", pca,
                 tmp_path / "m.model", message=r"different geotransforms")


def test_class_with_fewer_pixels_than_folds(tmp_path, pca):
    lab = band1(TRAIN).astype(np.uint8)
    keep = np.flatnonzero(lab.ravel() == 9)[:3]
    lab.ravel()[np.flatnonzero(lab.ravel() == 9)[3:]] = 0
    write_cube(tmp_path / "lab.tif", lab, nodata=0, like=TRAIN)
    assert keep.size == 3
    expect_usage(tmp_path, "m.model", "train", "--labels", tmp_path / "lab.tif",
                 "--grid", "C=1,2,gamma=1", pca, tmp_path / "m.model",
                 message=r"class 9 has 3 training pixel\(s\), fewer than the 5")


def test_no_training_pixel_and_one_class(tmp_path, pca):
    write_cube(tmp_path / "none.tif", np.zeros((145, 145), np.uint8), nodata=0, like=TRAIN)
    expect_usage(tmp_path, "m.model", "train", "--labels", tmp_path / "none.tif", pca,
                 tmp_path / "m.model", message=r"no training pixel")
    one = np.where(band1(TRAIN) == 2, 2, 0).astype(np.uint8)
    write_cube(tmp_path / "one.tif", one, nodata=0, like=TRAIN)
    expect_usage(tmp_path, "m.model", "train", "--labels", tmp_path / "one.tif", pca,
                 tmp_path / "m.model", message=r"one class only \(value 2, 50 pixels\)")


def test_bad_arguments(tmp_path, pca, pca_model):
    expect_usage(tmp_path, "m.model", "train", pca, tmp_path / "m.model",
                 message=r"give either --labels RASTER or --samples")
    expect_usage(tmp_path, "m.model", "train", "--labels", TRAIN, "--grid", "C=1,gamma=-2",
                 pca, tmp_path / "m.model", message=r"--grid: bad item 'gamma=-2'")
    expect_usage(tmp_path, "a.tif", "split", "--reference", GT, tmp_path / "a.tif",
                 tmp_path / "b.tif", message=r"give either --per-class")
    expect_usage(tmp_path, "m.tif", "classify", "--model", pca_model, pca,
                 message=r"expected FEATURES OUTPUT, got 1")
    bad = tmp_path / "bad.model"
    bad.write_text(pca_model.read_text().replace("kernel_type rbf", "kernel_type linear"))
    expect_usage(tmp_path, "m.tif", "classify", "--model", bad, pca, tmp_path / "m.tif",
                 message=r"bad.model' line \d+: kernel_type 'linear'")
    expect_usage(tmp_path, "x.tif", "assess", "--reference", GT, tmp_path / "x.tif",
                 message=r"CLASSMAP .* does not exist")


def test_describe_lists_file_arguments():
    ops = {o["name"]: o for o in json.loads(run_ok("describe", "--json").stdout)["operations"]}
    assert [f["name"] for f in ops["train"]["files"]] == ["FEATURES", "MODEL"]
    assert [f["type"] for f in ops["split"]["files"]] == ["raster_out", "raster_out"]
    assert ops["pca"]["input"]["name"] == "INPUT"


def test_cancelled_training_leaves_no_model(tmp_path):
    p = subprocess.Popen([exe_path(), "train", "--labels", TRAIN, "--progress", "json",
                          INDIAN_PINES, tmp_path / "m.model"], stderr=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    for line in p.stderr:  # wait until the cross-validation runs
        if "cross-validation" in line:
            break
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=120)
    assert p.returncode == EXIT_CANCELLED
    assert leftovers(tmp_path, "m.model") == []
