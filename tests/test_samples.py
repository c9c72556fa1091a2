"""Checks of the committed real-data samples in samples/ (see samples/README.md).

Run: /usr/bin/python3 -m pytest tests/test_samples.py
Samples are read-only here: nothing is computed that would make GDAL write a
.aux.xml sidecar (no statistics, no histograms).
"""

import csv
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

gdal = pytest.importorskip("osgeo.gdal")
from osgeo import osr  # noqa: E402

gdal.UseExceptions()

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SHARED = Path("/work/shared/data")

SAMSON_GT = (612730.910, 1.0, 0.0, 4074488.708, 0.0, -1.0)
CLASS_NAMES = [
    "Unlabelled",
    "Alfalfa", "Corn-notill", "Corn-mintill", "Corn", "Grass-pasture", "Grass-trees",
    "Grass-pasture-mowed", "Hay-windrowed", "Oats", "Soybean-notill", "Soybean-mintill",
    "Soybean-clean", "Wheat", "Woods", "Buildings-Grass-Trees-Drives", "Stone-Steel-Towers",
]
# EADP paper (seeds/000_...), Table I, IndianP "Train" column, classes 1..16.
TABLE_I_TRAIN = [15, 50, 50, 50, 50, 50, 15, 50, 15, 50, 50, 50, 50, 50, 50, 50]
# Labelled pixels per class of the distributed reference (10,249 in all).
GT_COUNTS = [46, 1428, 830, 237, 483, 730, 28, 478, 20, 972, 2455, 593, 205, 1265, 386, 93]
# Float32 abundances: max |sum - 1| measured 4.5e-8 (float64 sum of the float32
# values), 1.2e-7 summed in float32.
SUM_TOL = 1e-6
CLASS_MAPS = ("indian_pines_gt.tif", "indian_pines_train.tif", "indian_pines_test.tif")


def open_(name):
    path = SAMPLES / name
    assert path.exists(), "missing sample %s" % path
    return gdal.Open(str(path))


def epsg(ds):
    srs = osr.SpatialReference(wkt=ds.GetProjection())
    srs.AutoIdentifyEPSG()
    return srs.GetAuthorityCode(None)


def read(name):
    return open_(name).ReadAsArray()


def labels(name):
    a = read(name)
    assert a.shape == (145, 145)
    return a


def load_endmembers():
    with open(SAMPLES / "samson_endmembers.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows


def mean_sad(X, R):
    cos = (X * R).sum(0) / (np.linalg.norm(X, axis=0) * np.linalg.norm(R, axis=0))
    return float(np.degrees(np.arccos(np.clip(cos, -1, 1))).mean())


def scaled_rel_error(X, R):
    s = (X * R).sum() / (R * R).sum()
    return float(np.linalg.norm(X / s - R) / np.linalg.norm(X / s))


# ---------------------------------------------------------------------------- general
def test_expected_files_present_and_small():
    names = ["samson.tif", "samson_abundances.tif", "samson_endmembers.csv",
             "indian_pines.tif", "README.md", "make_samples.py"] + list(CLASS_MAPS) + \
            [m + ".aux.xml" for m in CLASS_MAPS]
    for n in names:
        assert (SAMPLES / n).is_file(), n
    total = sum(p.stat().st_size for p in SAMPLES.iterdir() if p.is_file())
    assert total < 10 * 1024 * 1024, total


@pytest.mark.parametrize("name", ["samson.tif", "samson_abundances.tif", "indian_pines.tif"]
                         + list(CLASS_MAPS))
def test_tiled_compressed(name):
    ds = open_(name)
    assert ds.GetDriver().ShortName == "GTiff"
    st = ds.GetMetadata("IMAGE_STRUCTURE")
    assert st.get("COMPRESSION") == "DEFLATE"
    assert st.get("PREDICTOR") in ("2", "3")
    assert ds.GetRasterBand(1).GetBlockSize() == [256, 256]


# ----------------------------------------------------------------------------- Samson
def test_samson_georeference():
    ds = open_("samson.tif")
    assert epsg(ds) == "32610"
    assert np.allclose(ds.GetGeoTransform(), SAMSON_GT, rtol=0, atol=1e-6)
    srs = osr.SpatialReference(wkt=ds.GetProjection())
    assert abs(srs.GetSemiMajor() - 6378137.0) < 1e-3  # not the header's corrupt 637813
    md = ds.GetMetadata()
    assert "corrected" in md.get("CRS_NOTE", "").lower()
    assert "samson" in md.get("SOURCE", "").lower()


def test_samson_shape_dtype_bands():
    ds = open_("samson.tif")
    assert (ds.RasterCount, ds.RasterYSize, ds.RasterXSize) == (156, 95, 95)
    prev = 0.0
    for i in range(1, 157):
        b = ds.GetRasterBand(i)
        assert b.DataType == gdal.GDT_Int16
        md = b.GetMetadata()
        assert md.get("wavelength_units") == "Nanometers"
        w = float(md["wavelength"])
        assert 399 < w < 900 and w > prev
        prev = w
        m = re.fullmatch(r"Band (\d+) \((\d+\.\d\d) nm\)", b.GetDescription())
        assert m, b.GetDescription()
        assert int(m.group(1)) == i and m.group(2) == "%.2f" % w
    assert ds.GetRasterBand(12).GetDescription() == "Band 12 (436.29 nm)"
    assert ds.GetRasterBand(12).GetMetadataItem("wavelength") == "436.290314"


def test_samson_pixels_match_source():
    src = SHARED / "samson" / "samson_1.img"
    if not src.exists():
        pytest.skip("shared source data not available")
    a = read("samson.tif")
    b = gdal.Open(str(src)).ReadAsArray()
    assert a.dtype == np.int16 and np.array_equal(a, b)


def test_samson_abundances_grid_and_simplex():
    ds = open_("samson_abundances.tif")
    ref = open_("samson.tif")
    assert (ds.RasterCount, ds.RasterYSize, ds.RasterXSize) == (3, 95, 95)
    assert epsg(ds) == "32610"
    assert ds.GetGeoTransform() == ref.GetGeoTransform()
    assert [ds.GetRasterBand(i).GetDescription() for i in (1, 2, 3)] == ["rock", "tree", "water"]
    assert all(ds.GetRasterBand(i).DataType == gdal.GDT_Float32 for i in (1, 2, 3))
    a = ds.ReadAsArray().astype(np.float64)
    assert a.min() >= 0.0
    assert np.abs(a.sum(0) - 1.0).max() < SUM_TOL
    # every class dominates somewhere (a constant or scrambled map would not)
    assert set(np.argmax(a, 0).ravel()) == {0, 1, 2}


def test_samson_endmembers_csv():
    rows = load_endmembers()
    assert list(rows[0].keys()) == ["band", "wavelength_nm", "rock", "tree", "water"]
    assert len(rows) == 156
    ds = open_("samson.tif")
    for i, r in enumerate(rows, start=1):
        assert int(r["band"]) == i
        assert r["wavelength_nm"] == ds.GetRasterBand(i).GetMetadataItem("wavelength")
    M = np.array([[float(r[k]) for k in ("rock", "tree", "water")] for r in rows])
    assert M.min() >= 0 and np.isclose(M.max(), 1.0)


def test_samson_pixel_order_reconstruction():
    """M @ A with the sample's pixel order must fit the cube better than the
    transposed order (measured: mean SAD 2.32 vs 20.55 deg; rel. error 0.504 vs 0.621)."""
    X = read("samson.tif").astype(np.float64).reshape(156, -1)
    A = read("samson_abundances.tif").astype(np.float64)
    rows = load_endmembers()
    M = np.array([[float(r[k]) for k in ("rock", "tree", "water")] for r in rows])
    chosen = M @ A.reshape(3, -1)
    other = M @ A.transpose(0, 2, 1).reshape(3, -1)
    sad_c, sad_o = mean_sad(X, chosen), mean_sad(X, other)
    err_c, err_o = scaled_rel_error(X, chosen), scaled_rel_error(X, other)
    assert sad_c < 5.0, sad_c
    assert sad_c < sad_o / 3, (sad_c, sad_o)
    assert err_c < err_o, (err_c, err_o)


# ----------------------------------------------------------------------- Indian Pines
def expected_aviris_bands():
    dropped = set(range(104, 109)) | set(range(150, 164)) | {220}
    return [b for b in range(1, 221) if b not in dropped]


def test_indian_pines_cube():
    ds = open_("indian_pines.tif")
    assert (ds.RasterCount, ds.RasterYSize, ds.RasterXSize) == (200, 145, 145)
    assert epsg(ds) == "32616"
    gt = ds.GetGeoTransform()
    assert gt[1] == 20.0 and gt[5] == -20.0 and gt[2] == 0.0 and gt[4] == 0.0
    # origin in Tippecanoe County, Indiana (roughly 40.3-40.6 N, 86.7-87.1 W)
    srs = osr.SpatialReference(wkt=ds.GetProjection())
    geo = srs.CloneGeogCS()
    geo.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    srs.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    lon, lat, _ = osr.CoordinateTransformation(srs, geo).TransformPoint(gt[0], gt[3])
    assert 40.2 < lat < 40.7 and -87.2 < lon < -86.6, (lat, lon)
    assert "approximate" in ds.GetMetadataItem("GEOREFERENCE_NOTE").lower()
    names = [ds.GetRasterBand(i).GetDescription() for i in range(1, 201)]
    assert names == ["AVIRIS band %d" % b for b in expected_aviris_bands()]
    assert all(ds.GetRasterBand(i).DataType == gdal.GDT_UInt16 for i in range(1, 201))
    a = ds.ReadAsArray()
    assert a.dtype == np.uint16 and a.min() > 0  # no fill: the cube is fully valid


@pytest.mark.parametrize("name", CLASS_MAPS)
def test_class_map_encoding(name):
    ds = open_(name)
    ref = open_("indian_pines.tif")
    assert (ds.RasterCount, ds.RasterYSize, ds.RasterXSize) == (1, 145, 145)
    assert epsg(ds) == "32616"
    assert ds.GetGeoTransform() == ref.GetGeoTransform()
    assert "approximate" in ds.GetMetadataItem("GEOREFERENCE_NOTE").lower()
    b = ds.GetRasterBand(1)
    assert b.DataType == gdal.GDT_Byte
    assert b.GetNoDataValue() == 0
    ct = b.GetRasterColorTable()
    assert ct is not None and ct.GetCount() >= 17
    colours = {ct.GetColorEntry(i)[:3] for i in range(1, 17)}
    assert len(colours) == 16  # distinct colours per class
    assert b.GetCategoryNames() == CLASS_NAMES  # from the committed .aux.xml sidecar
    md = ds.GetMetadata()
    for i, n in enumerate(CLASS_NAMES):  # inside the TIFF itself
        assert md.get("CLASS_%d" % i) == n


def test_class_names_survive_without_sidecar(tmp_path):
    for name in CLASS_MAPS:
        dst = tmp_path / name
        dst.write_bytes((SAMPLES / name).read_bytes())
        ds = gdal.Open(str(dst))
        md = ds.GetMetadata()
        assert [md.get("CLASS_%d" % i) for i in range(17)] == CLASS_NAMES
        assert ds.GetRasterBand(1).GetRasterColorTable() is not None
        assert ds.GetRasterBand(1).GetNoDataValue() == 0


def test_reference_map():
    gt = labels("indian_pines_gt.tif")
    assert gt.dtype == np.uint8
    assert list(np.bincount(gt.ravel(), minlength=17)[1:]) == GT_COUNTS
    assert np.count_nonzero(gt) == 10249
    src = SHARED / "indian_pines" / "Indian_pines_gt.npy"
    if src.exists():
        assert np.array_equal(gt, np.load(src))


def test_reference_fits_cube_orientation():
    """Within-class spectral scatter is much lower for the map as stored than for
    its transpose (measured 1.38e7 vs 2.84e7)."""
    cube = read("indian_pines.tif").astype(np.float64).transpose(1, 2, 0)
    gt = labels("indian_pines_gt.tif")

    def scatter(lab):
        tot = 0.0
        for c in range(1, 17):
            x = cube[lab == c]
            tot += ((x - x.mean(0)) ** 2).sum()
        return tot

    assert scatter(gt) < 0.7 * scatter(gt.T)


def test_split_disjoint_covering_and_counts():
    gt = labels("indian_pines_gt.tif")
    tr = labels("indian_pines_train.tif")
    te = labels("indian_pines_test.tif")
    assert not np.any((tr > 0) & (te > 0)), "train and test overlap"
    assert np.array_equal((tr > 0) | (te > 0), gt > 0), "split does not cover the labels"
    assert np.array_equal(tr[tr > 0], gt[tr > 0])
    assert np.array_equal(te[te > 0], gt[te > 0])
    assert list(np.bincount(tr.ravel(), minlength=17)[1:]) == TABLE_I_TRAIN
    assert list(np.bincount(te.ravel(), minlength=17)[1:]) == \
        [g - t for g, t in zip(GT_COUNTS, TABLE_I_TRAIN)]


def test_split_metadata_and_reproducible():
    ds = open_("indian_pines_train.tif")
    md = ds.GetMetadata()
    seed = int(md["SPLIT_SEED"])
    assert md["TRAIN_COUNTS"] == ",".join("%d:%d" % (c, n) for c, n in enumerate(TABLE_I_TRAIN, 1))
    assert open_("indian_pines_test.tif").GetMetadataItem("SPLIT_SEED") == str(seed)
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.TABLE_I_TRAIN == TABLE_I_TRAIN and mod.SPLIT_SEED == seed
    tr, te = mod.split_train_test(labels("indian_pines_gt.tif"), TABLE_I_TRAIN, seed)
    assert np.array_equal(tr, labels("indian_pines_train.tif"))
    assert np.array_equal(te, labels("indian_pines_test.tif"))
    # a different seed gives a different split (the seed really matters)
    tr2, _ = mod.split_train_test(labels("indian_pines_gt.tif"), TABLE_I_TRAIN, seed + 1)
    assert not np.array_equal(tr2, tr)
