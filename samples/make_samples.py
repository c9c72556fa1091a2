#!/usr/bin/env python3
"""Build hyprof's bundled real-data samples (GeoTIFF) from their sources.

Usage (from anywhere; outputs always go next to this script, in samples/):

    /usr/bin/python3 samples/make_samples.py [--tensorly-wheel PATH] [--data DIR]

Needs Python 3 with GDAL (osgeo), NumPy and SciPy.  Deterministic and rerunnable:
every output is removed and rewritten; the same inputs and the same GDAL give the
same bytes (GeoTIFF gets no timestamp tag; the split uses a fixed seed).

Inputs
------
--data DIR (default /work/shared/data):
    samson/samson_1.img(.hdr)       Samson cube, ENVI int16 BSQ, 95x95x156
    samson/end3.mat                 reference endmembers M (156x3), abundances A (3x9025)
    indian_pines/Indian_pines_gt.npy  Indian Pines reference map, 145x145 uint8
--tensorly-wheel PATH:
    tensorly-0.9.0-py3-none-any.whl; the Indian Pines cube is read straight out of
    the zip (tensorly/datasets/data/Indian_pines_corrected.npy).  Without the
    option the wheel is fetched with
    `python3 -m pip download --no-deps tensorly==0.9.0 -d TMPDIR`.
    The .npy member's SHA-256 is checked against INDIAN_PINES_NPY_SHA256 below.

Outputs (samples/)
------------------
samson.tif               Int16 cube, 156 bands, EPSG:32610, 1 m pixels, band
                         descriptions "Band i (w nm)", band metadata wavelength /
                         wavelength_units.  The ENVI header's "coordinate system
                         string" is corrupt (semi-major axis 637813, false easting
                         50000); the CRS is taken from its "map info" line instead.
samson_abundances.tif    Float32, bands rock, tree, water (end3.mat A, see
                         samson_pixel_order() for the pixel-order check).
samson_endmembers.csv    band, wavelength_nm, rock, tree, water (end3.mat M).
indian_pines.tif         UInt16 cube, 200 bands, approximate georeference (see
                         INDIAN_PINES_* constants), band i named by its number in
                         the 220-band AVIRIS distribution ("AVIRIS band N").
indian_pines_gt.tif      Byte reference map, nodata 0, colour table, category names.
indian_pines_train.tif   Training split (Table I counts of the EADP paper).
indian_pines_test.tif    Every other labelled pixel.
*.aux.xml                GDAL PAM sidecars of the three class maps: GTiff keeps
                         category names only there, so the names are also written
                         as CLASS_<n> metadata items inside each TIFF.

All rasters: tiled 256x256, COMPRESS=DEFLATE, PREDICTOR=2 (integers) or 3 (float).
"""

import argparse
import csv
import hashlib
import io
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import scipy.io
from osgeo import gdal, osr

gdal.UseExceptions()

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = Path("/work/shared/data")

# ----------------------------------------------------------------------------- Samson
SAMSON_EPSG = 32610          # UTM zone 10 N, WGS-84 (from the header's map info line)
SAMSON_SHAPE = (156, 95, 95)  # bands, rows, cols
SAMSON_CLASSES = ("rock", "tree", "water")  # end3.mat 'cood': 1-rock, 2-Tree, 3-water

# ----------------------------------------------------------------------- Indian Pines
TENSORLY_VERSION = "0.9.0"
INDIAN_PINES_MEMBER = "tensorly/datasets/data/Indian_pines_corrected.npy"
INDIAN_PINES_NPY_SHA256 = "8f038e4d81569e38ebfc72a15c9984c150de42580ab260be10a13442e912e451"
INDIAN_PINES_SHAPE = (145, 145, 200)  # rows, cols, bands as stored in the .npy
# Bands removed from the 220-band AVIRIS distribution (Purdue, 1-based) to make the
# 200-band "corrected" cube (water absorption): 104-108, 150-163, 220.  These numbers
# refer to the 220-band file: 224 - 20 would leave 204 bands, 220 - 20 leaves 200.
INDIAN_PINES_DROPPED = list(range(104, 109)) + list(range(150, 164)) + [220]
INDIAN_PINES_KEPT = [b for b in range(1, 221) if b not in INDIAN_PINES_DROPPED]
# Approximate georeference: the distributed cube has none.  The upper-left corner is
# put at about 40.46 N, 87.01 W (Tippecanoe County, Indiana), i.e. UTM 16 N
# (499152.2, 4478814.8), snapped to the 20 m grid.
INDIAN_PINES_EPSG = 32616
INDIAN_PINES_ORIGIN = (499160.0, 4478820.0)
INDIAN_PINES_PIXEL = 20.0
INDIAN_PINES_GEOREF_NOTE = (
    "approximate: the distributed Indian Pines cube has no georeference; this origin "
    "is an illustrative location in Tippecanoe County, Indiana (upper-left corner near "
    "40.46 N, 87.01 W), 20 m pixels, north up"
)
CLASS_NAMES = [
    "Unlabelled",
    "Alfalfa", "Corn-notill", "Corn-mintill", "Corn", "Grass-pasture", "Grass-trees",
    "Grass-pasture-mowed", "Hay-windrowed", "Oats", "Soybean-notill", "Soybean-mintill",
    "Soybean-clean", "Wheat", "Woods", "Buildings-Grass-Trees-Drives", "Stone-Steel-Towers",
]
# Fixed display palette (index 0 = unlabelled, black).
CLASS_COLOURS = [
    (0, 0, 0), (255, 254, 137), (3, 28, 241), (255, 89, 1), (5, 255, 133),
    (255, 2, 251), (89, 1, 255), (3, 171, 255), (12, 255, 7), (172, 175, 84),
    (160, 78, 158), (101, 173, 255), (60, 91, 112), (104, 192, 63), (139, 69, 46),
    (119, 255, 172), (254, 255, 3),
]
# Per-class training counts, Table I ("IndianP ... Train") of the EADP paper
# (seeds/000_23d5b581cd3dbb05.txt, "TABLE I: Houston, IndianP, and PaviaU datasets.
# ... numbers of train and test sets [3]").  Classes 1..16 in the order above.
TABLE_I_TRAIN = [15, 50, 50, 50, 50, 50, 15, 50, 15, 50, 50, 50, 50, 50, 50, 50]
# The same table's test counts, kept for reference only: they sum to 9440 and
# train + test = 10135, not the 10249 labelled pixels of the distributed reference
# (the table comes from an earlier version of the reference map); in two classes
# (Hay-windrowed, Wheat) they even exceed what is left after training.  Here the
# test set is simply every labelled pixel not used for training.
TABLE_I_TEST = [31, 1365, 767, 177, 426, 673, 11, 430, 5, 915, 2386, 525, 158, 1209, 321, 41]
SPLIT_SEED = 1992  # the year of the AVIRIS flight (12 June 1992)

TILE_OPTS = ["TILED=YES", "BLOCKXSIZE=256", "BLOCKYSIZE=256", "COMPRESS=DEFLATE", "ZLEVEL=9"]


# ============================================================================= helpers
def srs_from_epsg(code):
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(code)
    return srs.ExportToWkt()


def remove_outputs(path):
    for p in (path, Path(str(path) + ".aux.xml")):
        if p.exists():
            p.unlink()


def write_gtiff(path, array, gdal_type, geotransform, wkt, predictor, dataset_md,
                band_descriptions, band_md=None, nodata=None, colours=None,
                category_names=None):
    """Write a (bands, rows, cols) array as a tiled, compressed GeoTIFF.

    Written under a temporary name and renamed at the end, so an interrupted run
    never leaves a file that looks complete."""
    path = Path(path)
    remove_outputs(path)
    tmp = path.with_name(path.stem + ".tmp.tif")
    remove_outputs(tmp)
    nb, ny, nx = array.shape
    drv = gdal.GetDriverByName("GTiff")
    # Pixel interleaving: one tile holds every band of its pixels (spectra are read
    # whole), and it compresses these small cubes better than band interleaving
    # (Samson: 0.99 MB vs 1.63 MB).
    opts = TILE_OPTS + ["PREDICTOR=%d" % predictor, "INTERLEAVE=PIXEL"]
    ds = drv.Create(str(tmp), nx, ny, nb, gdal_type, options=opts)
    ds.SetGeoTransform(geotransform)
    ds.SetProjection(wkt)
    ds.SetMetadata({k: str(v) for k, v in dataset_md.items()})
    for i in range(nb):
        band = ds.GetRasterBand(i + 1)
        band.SetDescription(band_descriptions[i])
        if band_md is not None and band_md[i]:
            band.SetMetadata({k: str(v) for k, v in band_md[i].items()})
        if nodata is not None:
            band.SetNoDataValue(nodata)
        if colours is not None:
            ct = gdal.ColorTable()
            for idx, rgb in enumerate(colours):
                ct.SetColorEntry(idx, tuple(rgb) + (255,))
            band.SetRasterColorTable(ct)
            band.SetRasterColorInterpretation(gdal.GCI_PaletteIndex)
        if category_names is not None:
            band.SetCategoryNames(list(category_names))
        band.WriteArray(array[i])
    ds.FlushCache()
    ds = None
    os.replace(tmp, path)
    aux = Path(str(tmp) + ".aux.xml")
    if aux.exists():
        os.replace(aux, Path(str(path) + ".aux.xml"))


def parse_envi_header(path):
    """Minimal ENVI header parser: keeps values as the exact strings written."""
    text = Path(path).read_text()
    items = {}
    for m in re.finditer(r"^\s*([^=\n]+?)\s*=\s*(\{.*?\}|[^\n]*)", text, re.S | re.M):
        key, val = m.group(1).strip().lower(), m.group(2).strip()
        if val.startswith("{"):
            val = val[1:-1]
        items[key] = val
    return items


# ============================================================================== Samson
def samson_pixel_order(cube, M, A):
    """Decide whether end3.mat's 9025 pixel columns are row- or column-major.

    cube: (bands, rows, cols) float.  For both orders the cube is flattened to
    (bands, 9025), scaled by the single least-squares factor s that best matches
    M @ A (the .mat data were normalised, the ENVI cube is raw int16), and compared:
    relative RMS error ||X/s - M A|| / ||X/s|| and the mean spectral angle between
    each pixel and its reconstruction.

    Measured on these files: column-major (MATLAB order) rel. error 0.504,
    mean SAD 2.32 deg; row-major rel. error 0.621, mean SAD 20.6 deg.  Fitting one
    scale per endmember instead gives 0.314 vs 0.562.  So pixel p of A is at
    row = p % 95, col = p // 95 (MATLAB's reshape), as expected of a .mat file.
    The rest of the error is not an order issue: the reference endmembers are
    normalised to peak 1 and do not fit the raw radiance magnitudes exactly."""
    nb = cube.shape[0]
    R = M @ A
    result = {}
    for name, X in (("row-major", cube.reshape(nb, -1)),
                    ("column-major", cube.transpose(0, 2, 1).reshape(nb, -1))):
        s = float((X * R).sum() / (R * R).sum())
        Y = X / s
        rel = float(np.linalg.norm(Y - R) / np.linalg.norm(Y))
        cosang = (X * R).sum(0) / (np.linalg.norm(X, axis=0) * np.linalg.norm(R, axis=0))
        sad = float(np.degrees(np.arccos(np.clip(cosang, -1, 1))).mean())
        result[name] = (rel, sad, s)
    return result


def make_samson(data):
    src = data / "samson" / "samson_1.img"
    hdr = parse_envi_header(str(src) + ".hdr")
    wl = [w.strip() for w in hdr["wavelength"].split(",")]
    units = hdr.get("wavelength units", "Nanometers")
    mi = [v.strip() for v in hdr["map info"].split(",")]
    # map info = {UTM, ref x, ref y, easting, northing, dx, dy, zone, North, WGS-84, ...}
    assert mi[0] == "UTM" and mi[7] == "10" and mi[8] == "North" and mi[9] == "WGS-84", mi
    refx, refy, e, n, dx, dy = (float(v) for v in mi[1:7])
    # ENVI reference pixel is 1-based; (1,1) is the upper-left corner of the image.
    gt = (e - (refx - 1) * dx, dx, 0.0, n + (refy - 1) * dy, 0.0, -dy)

    ds = gdal.Open(str(src))
    cube = ds.ReadAsArray()
    assert cube.shape == SAMSON_SHAPE and cube.dtype == np.int16, (cube.shape, cube.dtype)
    assert len(wl) == cube.shape[0]
    # cross-check GDAL's ENVI reader: same geotransform, same wavelengths
    assert np.allclose(ds.GetGeoTransform(), gt), (ds.GetGeoTransform(), gt)
    ds = None

    descs = ["Band %d (%.2f nm)" % (i + 1, float(w)) for i, w in enumerate(wl)]
    band_md = [{"wavelength": w, "wavelength_units": units} for w in wl]
    md = {
        "SOURCE": "Samson scene (SAMSON sensor), 95x95x156 subset distributed by F. Zhu "
                  "et al. for hyperspectral unmixing; file samson_1.img (ENVI, int16 BSQ)",
        "CRS_NOTE": "CRS corrected: the ENVI header's 'coordinate system string' is corrupt "
                    "(semi-major axis 637813, false easting 50000); EPSG:32610 (UTM 10 N, "
                    "WGS-84) and the geotransform are taken from its 'map info' line",
        "ENVI_MAP_INFO": "{" + hdr["map info"] + "}",
        "ENVI_DEFAULT_BANDS": hdr.get("default bands", ""),
        "wavelength_units": units,
        "CITATION": "F. Zhu, Y. Wang, S. Xiang, B. Fan, C. Pan, 'Structured sparse method for "
                    "hyperspectral unmixing', ISPRS J. Photogramm. Remote Sens. 88 (2014) "
                    "101-118; F. Zhu, 'Hyperspectral unmixing: ground truth labeling, "
                    "datasets, benchmark performances and survey', arXiv:1708.05125",
        "GENERATOR": "samples/make_samples.py",
    }
    wkt = srs_from_epsg(SAMSON_EPSG)
    write_gtiff(HERE / "samson.tif", cube, gdal.GDT_Int16, gt, wkt, 2, md, descs, band_md)

    # ---- abundances + endmembers
    mat = scipy.io.loadmat(str(data / "samson" / "end3.mat"))
    M, A = mat["M"].astype(np.float64), mat["A"].astype(np.float64)
    names = [str(np.asarray(c[0]).ravel()[0]) for c in mat["cood"].ravel()]
    assert [n.split("-", 1)[1].lower() for n in names] == list(SAMSON_CLASSES), names
    nb, ny, nx = cube.shape
    assert M.shape == (nb, 3) and A.shape == (3, ny * nx), (M.shape, A.shape)
    order = samson_pixel_order(cube.astype(np.float64), M, A)
    for k, (rel, sad, s) in order.items():
        print("  end3.mat %-12s rel.err %.3f  mean SAD %.2f deg  (scale %.1f)" % (k, rel, sad, s))
    col_major = order["column-major"][0] < order["row-major"][0]
    assert col_major and order["column-major"][1] < order["row-major"][1], order
    # column-major (MATLAB): A[:, c*ny + r] is pixel (r, c)
    ab = A.reshape(3, nx, ny).transpose(0, 2, 1).astype(np.float32)
    md_ab = {
        "SOURCE": "end3.mat (reference abundances of the Samson scene, F. Zhu et al.): "
                  "A 3x9025, columns in MATLAB column-major pixel order",
        "PIXEL_ORDER_CHECK": "column-major: rel.err %.3f, mean SAD %.2f deg; row-major: "
                             "rel.err %.3f, mean SAD %.2f deg (M@A vs least-squares-scaled cube)"
                             % (order["column-major"][0], order["column-major"][1],
                                order["row-major"][0], order["row-major"][1]),
        "ENDMEMBERS": ",".join(SAMSON_CLASSES),
        "ENDMEMBERS_CSV": "samson_endmembers.csv",
        "CRS_NOTE": "same grid and CRS as samson.tif (EPSG:32610, corrected)",
        "GENERATOR": "samples/make_samples.py",
    }
    write_gtiff(HERE / "samson_abundances.tif", ab, gdal.GDT_Float32, gt, wkt, 3, md_ab,
                list(SAMSON_CLASSES), [{"endmember": c} for c in SAMSON_CLASSES])

    with open(HERE / "samson_endmembers.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["band", "wavelength_nm"] + list(SAMSON_CLASSES))
        for i in range(nb):
            w.writerow([i + 1, wl[i]] + [repr(float(v)) for v in M[i]])
    return gt


# ======================================================================== Indian Pines
def fetch_wheel(tmpdir):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
           "tensorly==%s" % TENSORLY_VERSION, "-d", tmpdir]
    print("  " + " ".join(cmd))
    subprocess.run(cmd, check=True)
    wheels = sorted(Path(tmpdir).glob("tensorly-%s-*.whl" % TENSORLY_VERSION))
    if not wheels:
        sys.exit("pip download gave no tensorly wheel")
    return wheels[0]


def load_indian_pines(wheel):
    with zipfile.ZipFile(wheel) as z:
        raw = z.read(INDIAN_PINES_MEMBER)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != INDIAN_PINES_NPY_SHA256:
        sys.exit("%s in %s has SHA-256 %s, expected %s"
                 % (INDIAN_PINES_MEMBER, wheel, digest, INDIAN_PINES_NPY_SHA256))
    cube = np.load(io.BytesIO(raw), allow_pickle=False)
    if cube.shape != INDIAN_PINES_SHAPE:
        sys.exit("Indian Pines cube has shape %s, expected %s" % (cube.shape, INDIAN_PINES_SHAPE))
    return cube, digest


def class_md(extra=None):
    md = {"CLASS_%d" % i: n for i, n in enumerate(CLASS_NAMES)}
    md["CLASS_NAMES"] = ",".join(CLASS_NAMES)
    if extra:
        md.update(extra)
    return md


def within_class_scatter(cube, labels):
    """Mean squared distance of labelled pixels to their class mean spectrum."""
    tot = 0.0
    for c in range(1, len(CLASS_NAMES)):
        x = cube[labels == c].astype(np.float64)
        tot += ((x - x.mean(0)) ** 2).sum()
    return tot / np.count_nonzero(labels)


def split_train_test(gt, counts=TABLE_I_TRAIN, seed=SPLIT_SEED):
    """Per class c (1..16, in order), draw counts[c-1] training pixels uniformly at
    random from the class's pixels (listed in row-major order) using
    numpy.random.default_rng(seed): one rng.random(n_c) draw per class, the pixels
    with the counts[c-1] smallest draws (stable argsort) are the training pixels.
    (Generator.random is used, not choice/permutation, because its output stream is
    the most stable across NumPy versions.)  Test = every other labelled pixel."""
    rng = np.random.default_rng(seed)
    flat = gt.ravel()
    train = np.zeros_like(flat)
    for c, n in enumerate(counts, start=1):
        idx = np.flatnonzero(flat == c)
        if n > idx.size:
            raise ValueError("class %d has %d pixels, %d requested" % (c, idx.size, n))
        pick = idx[np.argsort(rng.random(idx.size), kind="stable")[:n]]
        train[pick] = c
    train = train.reshape(gt.shape)
    test = np.where(train == 0, gt, 0).astype(gt.dtype)
    return train.astype(gt.dtype), test


def make_indian_pines(data, wheel):
    cube, digest = load_indian_pines(wheel)
    gt = np.load(data / "indian_pines" / "Indian_pines_gt.npy", allow_pickle=False)
    assert gt.shape == INDIAN_PINES_SHAPE[:2] and gt.dtype == np.uint8, (gt.shape, gt.dtype)
    assert gt.max() == 16 and np.count_nonzero(gt) == 10249
    # The reference fits the cube as stored (not transposed): within-class spectral
    # scatter 1.38e7 as is, 2.84e7 transposed.
    assert within_class_scatter(cube, gt) < within_class_scatter(cube, gt.T)
    with zipfile.ZipFile(wheel) as z:
        gt_in_wheel = np.load(io.BytesIO(z.read("tensorly/datasets/data/Indian_pines_gt.npy")))
    assert np.array_equal(gt_in_wheel, gt)

    ny, nx, nb = cube.shape
    assert len(INDIAN_PINES_KEPT) == nb
    gt_geo = (INDIAN_PINES_ORIGIN[0], INDIAN_PINES_PIXEL, 0.0,
              INDIAN_PINES_ORIGIN[1], 0.0, -INDIAN_PINES_PIXEL)
    wkt = srs_from_epsg(INDIAN_PINES_EPSG)
    common = {
        "GEOREFERENCE_NOTE": INDIAN_PINES_GEOREF_NOTE,
        "CITATION": "Baumgardner, M. F., Biehl, L. L., Landgrebe, D. A. (2015). 220 Band "
                    "AVIRIS Hyperspectral Image Data Set: June 12, 1992 Indian Pine Test Site "
                    "3. Purdue University Research Repository. doi:10.4231/R7RX991C",
        "LICENSE": "CC BY 3.0 (https://creativecommons.org/licenses/by/3.0/)",
        "GENERATOR": "samples/make_samples.py",
    }
    md = dict(common)
    md.update({
        "SOURCE": "Indian Pines (AVIRIS, 12 June 1992), 200-band water-absorption-corrected "
                  "cube, from the PyPI wheel tensorly==%s, member %s (sha256 %s)"
                  % (TENSORLY_VERSION, INDIAN_PINES_MEMBER, digest),
        "BAND_NUMBERING": "band names give the band's number in the 220-band AVIRIS "
                          "distribution; bands 104-108, 150-163 and 220 were removed",
        "DROPPED_AVIRIS_BANDS": "104-108,150-163,220",
    })
    descs = ["AVIRIS band %d" % b for b in INDIAN_PINES_KEPT]
    band_md = [{"aviris_band": b} for b in INDIAN_PINES_KEPT]
    gdal_type = {np.dtype(np.uint16): gdal.GDT_UInt16, np.dtype(np.int16): gdal.GDT_Int16,
                 np.dtype(np.float32): gdal.GDT_Float32}[cube.dtype]
    write_gtiff(HERE / "indian_pines.tif", np.ascontiguousarray(cube.transpose(2, 0, 1)),
                gdal_type, gt_geo, wkt, 2, md, descs, band_md)

    counts = np.bincount(gt.ravel(), minlength=17)
    md_gt = class_md(common)
    md_gt.update({
        "SOURCE": "Indian Pines reference map (Indian_pines_gt.npy, identical to the one in "
                  "the tensorly %s wheel); 0 = unlabelled, 16 classes" % TENSORLY_VERSION,
        "CLASS_COUNTS": ",".join("%d:%d" % (c, counts[c]) for c in range(1, 17)),
    })
    write_gtiff(HERE / "indian_pines_gt.tif", gt[None], gdal.GDT_Byte, gt_geo, wkt, 2, md_gt,
                ["class"], nodata=0, colours=CLASS_COLOURS, category_names=CLASS_NAMES)

    train, test = split_train_test(gt)
    tr_counts = np.bincount(train.ravel(), minlength=17)
    te_counts = np.bincount(test.ravel(), minlength=17)
    assert list(tr_counts[1:]) == TABLE_I_TRAIN
    assert not np.any((train > 0) & (test > 0))
    assert np.array_equal(np.where(train > 0, train, test), gt)
    split_md = {
        "SPLIT_SEED": SPLIT_SEED,
        "SPLIT_METHOD": "per class c=1..16: rng=numpy.random.default_rng(SPLIT_SEED) (one "
                        "generator for all classes), u=rng.random(n_c) over the class's pixels "
                        "in row-major order, training = the TRAIN_COUNTS[c] pixels with the "
                        "smallest u (stable argsort); test = all other labelled pixels",
        "TRAIN_COUNTS_SOURCE": "Table I (IndianP, Train) of the EADP paper "
                               "(seeds/000_23d5b581cd3dbb05.txt)",
        "TRAIN_COUNTS": ",".join("%d:%d" % (c, tr_counts[c]) for c in range(1, 17)),
        "TEST_COUNTS": ",".join("%d:%d" % (c, te_counts[c]) for c in range(1, 17)),
        "TABLE_I_TEST_COUNTS": ",".join("%d:%d" % (c, n) for c, n in enumerate(TABLE_I_TEST, 1)),
    }
    for name, arr, role in (("indian_pines_train.tif", train, "train"),
                            ("indian_pines_test.tif", test, "test")):
        m = class_md(common)
        m.update(split_md)
        m["SPLIT"] = role
        m["SOURCE"] = ("%s part of a disjoint split of indian_pines_gt.tif "
                       "(train + test = every labelled pixel)" % role)
        write_gtiff(HERE / name, arr[None], gdal.GDT_Byte, gt_geo, wkt, 2, m, [role],
                    nodata=0, colours=CLASS_COLOURS, category_names=CLASS_NAMES)
    print("  train counts", list(tr_counts[1:]), "test counts", list(te_counts[1:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tensorly-wheel", type=Path,
                    help="tensorly-%s wheel (default: pip download it)" % TENSORLY_VERSION)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="shared data folder (default %(default)s)")
    args = ap.parse_args()

    print("Samson")
    make_samson(args.data)
    print("Indian Pines")
    if args.tensorly_wheel is not None:
        make_indian_pines(args.data, args.tensorly_wheel)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            make_indian_pines(args.data, fetch_wheel(tmp))
    for p in sorted(HERE.iterdir()):
        if p.suffix in (".tif", ".csv", ".xml"):
            print("  %-32s %9d bytes" % (p.name, p.stat().st_size))


if __name__ == "__main__":
    main()
