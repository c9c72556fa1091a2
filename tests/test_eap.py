"""`hyprof eap` (extended attribute profiles): bit-exact against scikit-image's
area_opening/area_closing and against the max-tree and threshold-decomposition
references of tests/eap_reference.py, on the quantised features of the samples
and on random images; properties (order, threshold 0, idempotence of the
increasing filters, a non-idempotent std thinning), nodata, bad input, and the
library's one-band API through ctypes.

Every comparison is exact (integers): the output holds levels as float32.

Run: /usr/bin/python3 -m pytest tests/test_eap.py
"""

import ctypes
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from skimage.morphology import area_closing, area_opening

from conftest import (EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, INDIAN_PINES, SAMSON, exe_path, gdal,
                      leftovers, message_lines, read_cube, run, run_ok, write_cube)

import eap_reference as ref  # noqa: E402  (the oracle)

AREA = [36, 144, 324, 576, 900, 1296, 1764]  # the seed paper's
STD = [2, 4, 6, 8, 10, 12, 14]                # the registry's std default (8-bit levels)
DIAGONAL = [10, 25, 50, 100]
INERTIA = [0.2, 0.3, 0.4, 0.5]
DEFAULTS = {"area": AREA, "std": STD, "diagonal": DIAGONAL, "inertia": INERTIA}
ND = -9999.0


# ---- helpers --------------------------------------------------------------------

def eap(*args, **kw):
    return run_ok("eap", "--backend", "cpu", *args, **kw)


def band_names(path):
    ds = gdal.Open(str(path))
    return [ds.GetRasterBand(i + 1).GetDescription() for i in range(ds.RasterCount)]


def metadata(path):
    md = gdal.Open(str(path)).GetMetadata()
    return {k[len("HYPROF_"):] if k.startswith("HYPROF_") else k: v for k, v in md.items()}


def profiles(path, nfeat):
    """(nfeat, planes, H, W) int64 of the output (levels stored as float32), and the
    raw float32 cube."""
    a = read_cube(path, np.float32)
    return a, a.reshape(nfeat, a.shape[0] // nfeat, *a.shape[1:])


def split(block, nt):
    """(closings by increasing threshold, band, openings by increasing threshold) of a
    one-attribute profile block [closing t_max .. closing t_0, band, opening t_0 ..]."""
    return block[:nt][::-1], block[nt], block[nt + 1:]


def as_levels(a):
    assert np.all(a == np.round(a)), "non-integer levels in the output"
    return a.astype(np.int64)


def skimage_area(q, thresholds, connectivity, levels=256):
    """(closings, openings) by scikit-image on uint8 (uint16) levels, whose closing
    complements with 255 (65535) = levels - 1. Its max_tree needs every axis >= 3: the
    framed max-tree reference of eap_reference replaces it below that."""
    if min(q.shape) < 3:
        return ref.maxtree_profile(q, "area", thresholds, connectivity, levels)
    c = 1 if connectivity == 4 else 2
    q = np.ascontiguousarray(q, dtype=np.uint8 if levels == 256 else np.uint16)
    return ([area_closing(q, t, connectivity=c).astype(np.int64) for t in thresholds],
            [area_opening(q, t, connectivity=c).astype(np.int64) for t in thresholds])


def assert_profile(got_block, band, want, nt, what):
    """got_block: one feature's planes of one attribute (2 nt + 1); want: (closings,
    openings) by increasing threshold."""
    closings, b, openings = split(as_levels(got_block), nt)
    assert np.array_equal(b, band), "%s: the profile's band is not the quantised band" % what
    for j in range(nt):
        for kind, got, exp in (("closing", closings[j], want[0][j]),
                               ("opening", openings[j], want[1][j])):
            bad = np.argwhere(got != exp)
            assert bad.size == 0, "%s: %s %d differs at %d pixels, first %s: %d, want %d" % (
                what, kind, j, len(bad), tuple(bad[0]), got[tuple(bad[0])], exp[tuple(bad[0])])


def write_levels(path, q, levels=256):
    """A band of levels as a uint8/uint16 GeoTIFF (the identity under quantisation
    when it holds 0 and levels-1)."""
    return write_cube(path, np.asarray(q).astype(np.uint8 if levels == 256 else np.uint16))


def plateau_image(rng, shape, nlev=6, span=255):
    """Random image with plateaus: few distinct values, blocks of equal pixels."""
    h, w = shape
    small = rng.integers(0, nlev, size=(max(1, (h + 1) // 2), max(1, (w + 1) // 2)))
    img = np.kron(small, np.ones((2, 2), np.int64))[:h, :w]
    noise = rng.random(shape) < 0.25
    img = np.where(noise, rng.integers(0, nlev, size=shape), img)
    return (img * (span // (nlev - 1))).astype(np.float32)


# ---- the samples' features ------------------------------------------------------------

class Features:
    """`hyprof dwt` features of a sample at the level count --features 8 picks, and
    their 8-bit quantisation by the reference, also written as a uint8 GeoTIFF."""

    def __init__(self, folder, sample):
        self.sample = sample
        self.bands = gdal.Open(str(sample)).RasterCount
        self.levels = ref.dwt_levels(self.bands, 8)
        dwt = folder / "dwt.tif"
        run_ok("dwt", "--backend", "cpu", "--levels", self.levels, sample, dwt, cwd=folder)
        self.x = read_cube(dwt, np.float32)
        self.n = self.x.shape[0]
        self.q = np.stack([ref.quantise(b)[0] for b in self.x]).astype(np.int64)
        self.range = [ref.quantise(b)[1] for b in self.x]
        self.qfile = write_levels(folder / "q.tif", self.q)


@pytest.fixture(scope="module", params=["samson", "indian_pines"])
def feats(request, tmp_path_factory):
    sample = {"samson": SAMSON, "indian_pines": INDIAN_PINES}[request.param]
    return Features(tmp_path_factory.mktemp("eap_" + request.param), sample)


@pytest.fixture(scope="module")
def samson_feats(tmp_path_factory):
    return Features(tmp_path_factory.mktemp("eap_samson_small"), SAMSON)


# ---- area on the samples, against scikit-image ------------------------------------------

def test_default_dwt_path_matches_skimage(feats, tmp_path):
    """`hyprof eap INPUT OUTPUT`: wavelet features (level count from --features 8),
    quantised to 8 bits exactly as NumPy does, area profile = scikit-image, 4-connected."""
    out = tmp_path / "eap.tif"
    eap(feats.sample, out, cwd=tmp_path)
    md = metadata(out)
    assert int(md["EAP_DWT_LEVELS"]) == feats.levels
    assert int(md["EAP_FEATURES"]) == feats.n
    assert int(md["EAP_QUANT_LEVELS"]) == 256
    assert md["EAP_THRESHOLDS_AREA"] == ",".join(map(str, AREA))
    for i, (lo, hi) in enumerate(feats.range):
        assert float(md["EAP_QUANT_MIN_A%d" % (i + 1)]) == lo
        assert float(md["EAP_QUANT_MAX_A%d" % (i + 1)]) == hi
    raw, prof = profiles(out, feats.n)
    assert raw.shape[0] == feats.n * (2 * len(AREA) + 1)
    for i in range(feats.n):
        assert_profile(prof[i], feats.q[i], skimage_area(feats.q[i], AREA, 4), len(AREA),
                       "%s A%d" % (feats.sample.stem, i + 1))


@pytest.mark.parametrize("connectivity", [4, 8])
def test_none_on_levels_matches_skimage(feats, tmp_path, connectivity):
    """--reduction none on a uint8 image holding 0 and 255: the quantisation is the
    identity and every opening/closing equals scikit-image's (connectivity 1 or 2)."""
    out = tmp_path / "eap.tif"
    eap("--reduction", "none", "--connectivity", connectivity, feats.qfile, out, cwd=tmp_path)
    _, prof = profiles(out, feats.n)
    for i in range(feats.n):
        assert_profile(prof[i], feats.q[i], skimage_area(feats.q[i], AREA, connectivity),
                       len(AREA), "%s B%d %d-connected" % (feats.sample.stem, i + 1,
                                                             connectivity))


def test_band_names(samson_feats, tmp_path):
    out = tmp_path / "eap.tif"
    eap("--reduction", "none", "--thresholds", "36,144", samson_feats.qfile, out, cwd=tmp_path)
    names = band_names(out)
    assert names[:5] == ["B1 area closing 144", "B1 area closing 36", "B1",
                         "B1 area opening 36", "B1 area opening 144"]
    assert len(names) == samson_feats.n * 5


# ---- std (and diagonal, inertia) on the samples, against the max-tree reference ----------

@pytest.mark.parametrize("connectivity", [4, 8])
def test_std_matches_maxtree_reference(feats, tmp_path, connectivity):
    """Standard deviation, min rule: bit for bit the reference built on
    skimage.morphology.max_tree (count, sum, sum of squares up the tree; min rule from
    the root down), every threshold."""
    out = tmp_path / "eap.tif"
    eap("--reduction", "none", "--attribute", "std", "--connectivity", connectivity,
        feats.qfile, out, cwd=tmp_path)
    _, prof = profiles(out, feats.n)
    for i in range(feats.n):
        want = ref.maxtree_profile(feats.q[i], "std", STD, connectivity)
        assert_profile(prof[i], feats.q[i], want, len(STD),
                       "%s B%d std %d-connected" % (feats.sample.stem, i + 1, connectivity))


@pytest.mark.parametrize("attribute", ["diagonal", "inertia"])
def test_diagonal_inertia_match_reference(samson_feats, tmp_path, attribute):
    out = tmp_path / "eap.tif"
    eap("--reduction", "none", "--attribute", attribute, samson_feats.qfile, out, cwd=tmp_path)
    _, prof = profiles(out, samson_feats.n)
    th = DEFAULTS[attribute]
    for i in range(samson_feats.n):
        want = ref.maxtree_profile(samson_feats.q[i], attribute, th, 4)
        assert_profile(prof[i], samson_feats.q[i], want, len(th),
                       "samson B%d %s" % (i + 1, attribute))


def test_several_attributes_concatenate(samson_feats, tmp_path):
    """--attribute area,std,diagonal,inertia: per feature the area profile (with the
    band), then each further attribute's closings and openings without the band; each
    block equals the single-attribute run."""
    q = samson_feats.qfile
    out = tmp_path / "emap.tif"
    eap("--reduction", "none", "--attribute", "area,std,diagonal,inertia", q, out,
        cwd=tmp_path)
    names = band_names(out)
    per = 1 + 2 * sum(len(v) for v in DEFAULTS.values())
    assert len(names) == samson_feats.n * per
    assert names[len(AREA)] == "B1" and names.count("B1") == 1
    assert names[2 * len(AREA) + 1] == "B1 std closing 14"
    assert names[per - 1] == "B1 inertia opening 0.5"
    _, prof = profiles(out, samson_feats.n)
    k = 0
    for attr in ("area", "std", "diagonal", "inertia"):
        single = tmp_path / ("%s.tif" % attr)
        eap("--reduction", "none", "--attribute", attr, q, single, cwd=tmp_path)
        _, sp = profiles(single, samson_feats.n)
        nt = len(DEFAULTS[attr])
        block = prof[:, k:k + 2 * nt + (attr == "area")]
        want = sp if attr == "area" else np.concatenate([sp[:, :nt], sp[:, nt + 1:]], axis=1)
        assert np.array_equal(block, want), attr
        k += block.shape[1]


# ---- random images -------------------------------------------------------------------

SHAPES = [(1, 1), (1, 17), (17, 1), (2, 9), (3, 2), (5, 5), (31, 47), (64, 64)]
AREA_SMALL = [0, 1, 2, 3, 5, 8, 13, 36, 100]


@pytest.mark.parametrize("connectivity", [4, 8])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "%dx%d" % s)
def test_random_area_matches_skimage(tmp_path, shape, connectivity):
    """Random float images with plateaus (and sizes below the thresholds, where the
    root itself fails): every threshold, scikit-image on the NumPy quantisation."""
    rng = np.random.default_rng(shape[0] * 1000 + shape[1] + connectivity)
    img = plateau_image(rng, shape) * 1.7 - 3.25
    src = write_cube(tmp_path / "img.tif", img)
    out = tmp_path / "eap.tif"
    eap("--reduction", "none", "--connectivity", connectivity, "--thresholds",
        ",".join(map(str, AREA_SMALL)), src, out, cwd=tmp_path)
    q = ref.quantise(img)[0].astype(np.int64)
    _, prof = profiles(out, 1)
    assert_profile(prof[0], q, skimage_area(q, AREA_SMALL, connectivity), len(AREA_SMALL),
                   "%s %d-connected" % (shape, connectivity))


OTHER = {"std": [0, 1, 10, 30, 60, 90], "diagonal": [0, 1.5, 2, 3, 4.5, 9],
         "inertia": [0, 0.1, 0.17, 0.2, 0.3, 0.6]}


@pytest.mark.parametrize("attribute", sorted(OTHER))
@pytest.mark.parametrize("connectivity", [4, 8])
def test_random_other_attributes_match_references(tmp_path, attribute, connectivity):
    """std, diagonal and inertia on random images of every size: the max-tree reference
    and, independently, the threshold-decomposition one."""
    th = OTHER[attribute]
    for shape in SHAPES:
        rng = np.random.default_rng(7 * shape[0] + shape[1])
        img = plateau_image(rng, shape)
        src = write_cube(tmp_path / "img.tif", img)
        out = tmp_path / "eap.tif"
        eap("--reduction", "none", "--attribute", attribute, "--connectivity", connectivity,
            "--thresholds", ",".join(map(str, th)), "--overwrite", src, out, cwd=tmp_path)
        q = ref.quantise(img)[0].astype(np.int64)
        _, prof = profiles(out, 1)
        what = "%s %s %d-connected" % (attribute, shape, connectivity)
        assert_profile(prof[0], q, ref.maxtree_profile(q, attribute, th, connectivity),
                       len(th), what)
        if q.size <= 1024:
            assert_profile(prof[0], q, ref.levelset_profile(q, attribute, th, connectivity),
                           len(th), what + " (level sets)")


def test_references_agree_with_skimage():
    """The two references against scikit-image's area filters (the oracle of the
    oracles), on random plateau images of sizes scikit-image handles."""
    th = [0, 1, 2, 4, 9, 30]
    for i, shape in enumerate([(3, 3), (4, 7), (12, 9), (20, 20)]):
        q = ref.quantise(plateau_image(np.random.default_rng(i), shape))[0].astype(np.int64)
        for conn in (4, 8):
            want = skimage_area(q, th, conn)
            for name, got in (("max-tree", ref.maxtree_profile(q, "area", th, conn)),
                              ("level sets", ref.levelset_profile(q, "area", th, conn))):
                for j in range(len(th)):
                    assert np.array_equal(got[0][j], want[0][j]), (name, shape, conn, th[j])
                    assert np.array_equal(got[1][j], want[1][j]), (name, shape, conn, th[j])


def test_sixteen_bits(tmp_path):
    """--quantisation 16 on a uint16 image holding 0 and 65535: the identity; area =
    scikit-image on uint16 (its closing complements with 65535 = levels - 1); std
    thresholds are in 8-bit units, i.e. x257 on 16-bit levels."""
    rng = np.random.default_rng(16)
    img = (plateau_image(rng, (40, 37), nlev=9, span=8).astype(np.int64) * 8191)
    img = img + rng.integers(0, 3, size=img.shape)  # near-plateaus
    img = np.clip(img, 0, 65535)
    img[0, 0], img[-1, -1] = 0, 65535
    src = write_levels(tmp_path / "img16.tif", img, 65536)
    out = tmp_path / "eap.tif"
    eap("--reduction", "none", "--quantisation", "16", "--thresholds", "1,3,8,36,144", src,
        out, cwd=tmp_path)
    assert int(metadata(out)["EAP_QUANT_LEVELS"]) == 65536
    _, prof = profiles(out, 1)
    q = img.astype(np.uint16)
    assert_profile(prof[0], img, skimage_area(q, [1, 3, 8, 36, 144], 4, 65536), 5, "16-bit area")
    out2 = tmp_path / "eap_std.tif"
    eap("--reduction", "none", "--quantisation", "16", "--attribute", "std", "--thresholds",
        "1,5,20,40", src, out2, cwd=tmp_path)
    _, prof = profiles(out2, 1)
    want = ref.maxtree_profile(img, "std", [t * 257.0 for t in (1, 5, 20, 40)], 4, 65536)
    assert_profile(prof[0], img, want, 4, "16-bit std")


# ---- properties ---------------------------------------------------------------------

def test_order_and_threshold_zero(samson_feats, tmp_path):
    """For every attribute: closings >= band >= openings, both monotone in the
    threshold; a threshold of 0 gives the band itself."""
    for attr, th in DEFAULTS.items():
        th = [0] + list(th)
        out = tmp_path / ("%s.tif" % attr)
        eap("--reduction", "none", "--attribute", attr, "--thresholds",
            ",".join(map(str, th)), samson_feats.qfile, out, cwd=tmp_path)
        _, prof = profiles(out, samson_feats.n)
        for i in range(samson_feats.n):
            c, b, o = split(as_levels(prof[i]), len(th))
            assert np.array_equal(c[0], b) and np.array_equal(o[0], b), (attr, i, "t=0")
            for j in range(1, len(th)):
                assert np.all(c[j] >= c[j - 1]) and np.all(o[j] <= o[j - 1]), (attr, i, th[j])


def test_increasing_filters_are_idempotent(tmp_path):
    """Area and diagonal openings/closings are idempotent: filtering an output again
    (through the CLI: the image holds 0 and 255 in blocks no filter removes, so the
    re-quantisation is the identity) changes nothing."""
    rng = np.random.default_rng(3)
    img = plateau_image(rng, (80, 80))
    img[:22, :22] = 255.0
    img[-22:, -22:] = 0.0
    src = write_cube(tmp_path / "img.tif", img)
    for attr, th in (("area", [4, 36, 144, 324]), ("diagonal", [3, 8, 20])):
        out = tmp_path / ("%s.tif" % attr)
        eap("--reduction", "none", "--attribute", attr, "--thresholds",
            ",".join(map(str, th)), src, out, cwd=tmp_path)
        _, prof = profiles(out, 1)
        c, _, o = split(as_levels(prof[0]), len(th))
        for j, t in enumerate(th):
            for kind, once in (("closing", c[j]), ("opening", o[j])):
                assert once.min() == 0 and once.max() == 255
                again_src = write_levels(tmp_path / "once.tif", once)
                again = tmp_path / "again.tif"
                eap("--reduction", "none", "--attribute", attr, "--thresholds", t,
                    "--overwrite", again_src, again, cwd=tmp_path)
                _, p2 = profiles(again, 1)
                c2, _, o2 = split(as_levels(p2[0]), 1)
                twice = c2[0] if kind == "closing" else o2[0]
                assert np.array_equal(twice, once), "%s %s %g is not idempotent" % (
                    attr, kind, t)


# A plateau at 100 with a one-pixel peak at 200, between zeros: the peak (std 0)
# fails, the plateau with its peak (std 35) and the whole line (std 56.7) pass
# threshold 30, so the first thinning flattens the peak; the flat plateau (std 0)
# then fails the second time: the std thinning is not idempotent.
STD_CASE = np.array([[0, 100, 100, 100, 200, 100, 100, 100, 0]])


def test_std_thinning_is_not_idempotent_reference():
    once = ref.maxtree_profile(STD_CASE, "std", [30], 4)[1][0]
    assert once.tolist() == [[0, 100, 100, 100, 100, 100, 100, 100, 0]]
    twice = ref.maxtree_profile(once, "std", [30], 4)[1][0]
    assert twice.tolist() == [[0] * 9]


# ---- nodata -------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["nodata", "nan"])
def test_nodata_excluded(tmp_path, how):
    """Masked pixels (the nodata value or NaN) are no part of the graph: a masked
    column splits the image, scattered ones make holes. The quantisation uses the
    valid min/max only; every output plane is nodata there; valid pixels equal the
    threshold-decomposition reference on the valid pixels (area and std)."""
    rng = np.random.default_rng(11)
    img = plateau_image(rng, (24, 40)) + 1000.0
    valid = np.ones(img.shape, bool)
    valid[:, 17] = False
    valid[rng.random(img.shape) < 0.08] = False
    bad = np.float32(ND) if how == "nodata" else np.float32(np.nan)
    img_in = np.where(valid, img, bad).astype(np.float32)
    src = write_cube(tmp_path / "img.tif", img_in, nodata=ND if how == "nodata" else None)
    q, (lo, hi) = ref.quantise(img, valid)
    q = q.astype(np.int64)
    for attr, th in (("area", [1, 2, 5, 13, 36, 100]), ("std", [1, 10, 30, 60])):
        out = tmp_path / ("%s.tif" % attr)
        eap("--reduction", "none", "--attribute", attr, "--thresholds",
            ",".join(map(str, th)), src, out, cwd=tmp_path)
        md = metadata(out)
        assert float(md["EAP_QUANT_MIN_B1"]) == lo and float(md["EAP_QUANT_MAX_B1"]) == hi
        raw = read_cube(out, np.float32)
        for k in range(raw.shape[0]):
            plane = raw[k][~valid]
            assert np.all(np.isnan(plane)), \
                "%s plane %d: masked pixels are not nodata" % (attr, k)
        closings, openings = ref.levelset_profile(q, attr, th, 4, valid=valid)
        c, b, o = split(raw, len(th))
        assert np.array_equal(b[valid], q[valid])
        for j in range(len(th)):
            assert np.array_equal(c[j][valid], closings[j][valid]), (attr, "closing", th[j])
            assert np.array_equal(o[j][valid], openings[j][valid]), (attr, "opening", th[j])


# ---- odd images ---------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1), (50, 50)], ids=["1x1", "50x50"])
def test_constant_image(tmp_path, shape):
    """A constant band quantises to 0; the profile is scikit-image's on it (closings
    of an image smaller than the threshold: the whole image fails, 255)."""
    src = write_cube(tmp_path / "c.tif", np.full(shape, 7.5, np.float32))
    out = tmp_path / "eap.tif"
    eap("--reduction", "none", src, out, cwd=tmp_path)
    _, prof = profiles(out, 1)
    z = np.zeros(shape, np.int64)
    assert_profile(prof[0], z, ref.maxtree_profile(z, "area", AREA, 4), len(AREA), "constant")
    assert np.all(prof[0][len(AREA) + 1:] == 0)


def test_features_choose_dwt_levels(tmp_path):
    """--features F: the level count whose band count is closest to F; --levels L
    instead: L itself."""
    out = tmp_path / "f.tif"
    eap("--features", 13, "--thresholds", "36", INDIAN_PINES, out, cwd=tmp_path)
    md = metadata(out)
    assert int(md["EAP_DWT_LEVELS"]) == 4 == ref.dwt_levels(200, 13)
    assert int(md["EAP_FEATURES"]) == 13
    out2 = tmp_path / "l.tif"
    eap("--levels", 6, "--thresholds", "36", INDIAN_PINES, out2, cwd=tmp_path)
    assert int(metadata(out2)["EAP_DWT_LEVELS"]) == 6
    assert len(band_names(out2)) == 4 * 3  # ceil(200 / 64) = 4 features
    assert [ref.dwt_levels(b, 8) for b in (102, 103, 144, 156, 200, 204, 224)] == \
        [4, 4, 4, 4, 5, 5, 5]


# ---- bad input ----------------------------------------------------------------------

BAD = {
    "negative threshold": (["--thresholds", "36,-1"], "-1"),
    "unsorted thresholds": (["--thresholds", "144,36"], "36"),
    "repeated thresholds": (["--attribute", "std", "--std-thresholds", "5,5"], "5"),
    "empty thresholds": (["--thresholds", ""], "thresholds"),
    "connectivity 6": (["--connectivity", "6"], "6"),
    "unknown attribute": (["--attribute", "volume"], "volume"),
    "attribute twice": (["--attribute", "area,std,area"], "area"),
    "features 0": (["--features", "0"], "0"),
    "features and levels": (["--features", "4", "--levels", "2"], "levels"),
    "shorthand with two attributes": (["--attribute", "area,std", "--thresholds", "5"],
                                      "thresholds"),
    "quantisation 12": (["--quantisation", "12"], "12"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(tmp_path, case):
    args, named = BAD[case]
    r = run("eap", "--backend", "cpu", *args, SAMSON, tmp_path / "out.tif", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, "exit %d; stderr: %s" % (r.returncode, r.stderr)
    msg = " ".join(message_lines(r.stderr))
    assert named in msg, "the message does not name %r: %s" % (named, msg)
    assert leftovers(tmp_path, "out.tif") == []


def test_backend_cuda_without_device_is_refused_auto_picks_by_levels(tmp_path):
    """Without a usable device, --backend cuda fails with a message saying so (no
    output). auto runs 8-bit profiles on the GPU when there is one (the faster path
    there) and on the CPU otherwise; 16-bit profiles always on the CPU (README)."""
    src = write_cube(tmp_path / "img.tif", plateau_image(np.random.default_rng(1), (9, 9)))
    device = "device 0" in run("--version").stdout
    if not device:
        r = run("eap", "--backend", "cuda", "--reduction", "none", src, tmp_path / "out.tif",
                cwd=tmp_path)
        assert r.returncode == EXIT_RUNTIME, r.stderr
        assert "cuda" in r.stderr.lower(), r.stderr
        assert leftovers(tmp_path, "out.tif") == []
    env = dict(os.environ)
    env.pop("HYPROF_BACKEND", None)
    for bits, expect in (("8", "cuda" if device else "cpu"), ("16", "cpu")):
        out = tmp_path / f"auto{bits}.tif"
        run_ok("eap", "--backend", "auto", "--reduction", "none", "--quantisation", bits, src,
               out, cwd=tmp_path, env=env)
        assert metadata(out)["BACKEND"] == expect, bits


# ---- the library's one-band API (ctypes) -----------------------------------------------

def libhyprof():
    """The libhyprof the executable under test loads (from `ldd`), or None."""
    try:
        r = subprocess.run(["ldd", exe_path()], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    m = re.search(r"libhyprof\.so\S*\s+=>\s+(\S+)", r.stdout)
    return ctypes.CDLL(m.group(1)) if m and Path(m.group(1)).is_file() else None


ATTR_CODE = {"area": 0, "std": 1, "diagonal": 2, "inertia": 3}


class Lib:
    def __init__(self):
        self.lib = libhyprof()
        if self.lib is None:
            pytest.skip("libhyprof.so not found through ldd of the executable (static build?)")
        L = self.lib
        L.hyprof_ctx_new.restype = ctypes.c_void_p
        L.hyprof_ctx_last_error.restype = ctypes.c_char_p
        L.hyprof_ctx_last_error.argtypes = [ctypes.c_void_p]
        L.hyprof_ctx_set_backend.argtypes = [ctypes.c_void_p, ctypes.c_int]
        L.hyprof_ctx_free.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        f = L.hyprof_attribute_profile
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                      ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_int,
                      ctypes.POINTER(ctypes.c_double), ctypes.c_size_t, ctypes.c_uint16,
                      ctypes.c_void_p]

    def profile(self, band, attribute, thresholds, connectivity=4, levels=256, mask=None,
                nodata=0, backend=1):
        """(status, error text, planes) of hyprof_attribute_profile."""
        band = np.ascontiguousarray(band, dtype=np.uint16)
        h, w = band.shape
        nt = len(thresholds)
        out = np.zeros((2 * nt + 1, h, w), np.uint16)
        t = (ctypes.c_double * max(nt, 1))(*thresholds)
        m = None if mask is None else np.ascontiguousarray(mask, dtype=np.uint8)
        ctx = ctypes.c_void_p(self.lib.hyprof_ctx_new())
        try:
            self.lib.hyprof_ctx_set_backend(ctx, backend)
            st = self.lib.hyprof_attribute_profile(
                ctx, band.ctypes.data, None if m is None else m.ctypes.data, w, h, levels,
                connectivity, ATTR_CODE[attribute], t, nt, nodata, out.ctypes.data)
            err = self.lib.hyprof_ctx_last_error(ctx).decode()
        finally:
            self.lib.hyprof_ctx_free(ctypes.byref(ctx))
        return st, err, out.astype(np.int64)


@pytest.fixture(scope="module")
def lib():
    return Lib()


def test_library_one_band(lib):
    """hyprof_attribute_profile on uint16 levels: scikit-image's area filters; a
    masked pixel gets `nodata`; a level >= levels is refused naming it; CUDA is
    refused (no implementation yet)."""
    rng = np.random.default_rng(21)
    q = ref.quantise(plateau_image(rng, (33, 21)))[0].astype(np.int64)
    st, err, out = lib.profile(q, "area", AREA_SMALL, 8)
    assert st == 0, err
    assert_profile(out, q, skimage_area(q, AREA_SMALL, 8), len(AREA_SMALL), "library")
    mask = np.ones(q.shape, np.uint8)
    mask[4, 5] = 0
    st, err, out = lib.profile(q, "std", [1, 20], mask=mask, nodata=999)
    assert st == 0 and np.all(out[:, 4, 5] == 999), err
    bad = q.copy()
    bad[2, 3] = 300
    st, err, _ = lib.profile(bad, "area", [4])
    assert st != 0 and "300" in err, err
    st, err, _ = lib.profile(q, "area", [4], connectivity=6)
    assert st != 0 and "6" in err, err
    st, err, _ = lib.profile(q, "area", [4], backend=2)
    assert st != 0 and "cuda" in err.lower(), err


def test_library_std_thinning_is_not_idempotent(lib):
    """The STD_CASE line through the library: once, then again on the result."""
    st, err, once = lib.profile(STD_CASE, "std", [30])
    assert st == 0, err
    assert once[2].tolist() == [[0, 100, 100, 100, 100, 100, 100, 100, 0]]
    st, err, twice = lib.profile(once[2], "std", [30])
    assert twice[2].tolist() == [[0] * 9]


def test_library_increasing_idempotent_random(lib):
    """Area and diagonal openings and closings applied twice: unchanged (random
    plateau images, both connectivities, levels straight to the library)."""
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        q = ref.quantise(plateau_image(rng, (20 + seed, 31)))[0].astype(np.int64)
        for attr, th in (("area", [2, 5, 30, 200]), ("diagonal", [2, 4, 9, 30])):
            for conn in (4, 8):
                _, _, once = lib.profile(q, attr, th, conn)
                for j, t in enumerate(th):
                    for k in (len(th) - 1 - j, len(th) + 1 + j):  # closing, opening
                        _, _, again = lib.profile(once[k], attr, [t], conn)
                        sel = 0 if k < len(th) else 2
                        assert np.array_equal(again[sel], once[k]), (seed, attr, conn, t, k)
