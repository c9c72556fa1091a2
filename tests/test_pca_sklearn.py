"""`hyprof pca` against scikit-learn's PCA (the oracle), on the bundled samples.

DESIGN.md, "Numerical definitions": centre each band, covariance over valid
pixels, symmetric eigen-decomposition, components by decreasing eigenvalue, sign
fixed so that the largest-magnitude loading is positive. scikit-learn's
PCA(svd_solver='full') on the same float64 data gives the same subspace; its
components are flipped by that rule before comparing.

Run: /usr/bin/python3 -m pytest tests/test_pca_sklearn.py
"""

import numpy as np
import pytest

from conftest import (EXIT_USAGE, INDIAN_PINES, SAMSON, gdal, leftovers, message_lines,
                      read_cube, run, run_ok, write_cube)

import sklearn.decomposition as sklearn_decomposition  # noqa: E402  (the oracle)

REL_TOL = 1e-5        # max abs error / max |value| of a component band (float32 output)
EVR_TOL = 1e-5        # explained variance ratio (written with 6 decimals)
EIG_RTOL = 1e-8       # eigenvalues in the model file (written with %.17g)
ND = -9999            # nodata of the masked Samson copy


# ---- the oracle ---------------------------------------------------------------

def sign_fixed(components):
    """Flips each row so that its largest-|loading| (the first on ties) is positive."""
    c = np.array(components, dtype=np.float64)
    for k in range(c.shape[0]):
        i = int(np.argmax(np.abs(c[k])))
        if c[k, i] < 0:
            c[k] = -c[k]
    return c


class Oracle:
    """sklearn PCA fitted on the valid pixels of a (bands, rows, cols) cube."""

    def __init__(self, cube, k, valid=None):
        b = cube.shape[0]
        x = cube.reshape(b, -1).T.astype(np.float64)
        self.valid = np.ones(x.shape[0], bool) if valid is None else valid.reshape(-1)
        self.pca = sklearn_decomposition.PCA(n_components=k, svd_solver="full")
        self.pca.fit(x[self.valid])
        self.components = sign_fixed(self.pca.components_)
        self.mean = self.pca.mean_
        self.scores = (x - self.mean) @ self.components.T          # (pixels, k)
        self.total_variance = float(np.var(x[self.valid], axis=0, ddof=1).sum())


def assert_bands_match(out, oracle, valid=None):
    """Every output band equals the oracle's scores on the valid pixels."""
    k = oracle.components.shape[0]
    assert out.shape[0] == k, "expected %d bands, got %d" % (k, out.shape[0])
    flat = out.reshape(k, -1)
    sel = np.ones(flat.shape[1], bool) if valid is None else valid.reshape(-1)
    for i in range(k):
        ref = oracle.scores[sel, i]
        got = flat[i, sel]
        rel = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
        assert rel < REL_TOL, "PC%d differs from sklearn: relative error %.3g" % (i + 1, rel)


def parse_model(path):
    """The text model: `key v1 v2 ...` lines; `component k ...` keyed by k."""
    model = {"component": {}}
    lines = path.read_text().splitlines()
    assert lines and lines[0].split()[0] == "hyprof-pca-model", "not a model file: %r" % lines[:1]
    for line in lines[1:]:
        if not line.strip():
            continue
        parts = line.split()
        if parts[0] == "component":
            model["component"][int(parts[1])] = np.array(parts[2:], dtype=np.float64)
        else:
            vals = np.array(parts[1:], dtype=np.float64)
            model[parts[0]] = vals
    for key in ("bands", "components", "samples", "total_variance", "eigenvalues", "mean"):
        assert key in model, "model file %s lacks the '%s' line" % (path, key)
    return model


def explained_ratio(path):
    md = gdal.Open(str(path)).GetMetadata()
    assert "HYPROF_PCA_EXPLAINED_VARIANCE_RATIO" in md, sorted(md)
    return float(md["HYPROF_PCA_EXPLAINED_VARIANCE_RATIO"])


# ---- fitted runs, shared by the tests of one sample ------------------------------

class Fitted:
    def __init__(self, folder, sample, k):
        self.folder, self.sample, self.k = folder, sample, k
        self.out = folder / "pca.tif"
        self.model = folder / "model.pca"
        self.result = run_ok("pca", "--backend", "cpu", "--components", k, "--save-model",
                             self.model, sample, self.out, cwd=folder)
        self.cube = read_cube(sample)
        self.oracle = Oracle(self.cube, k)


@pytest.fixture(scope="module", params=["samson", "indian_pines"])
def fitted(request, tmp_path_factory):
    sample = {"samson": SAMSON, "indian_pines": INDIAN_PINES}[request.param]
    return Fitted(tmp_path_factory.mktemp("pca_" + request.param), sample, 7)


@pytest.fixture(scope="module")
def samson_fit(tmp_path_factory):
    return Fitted(tmp_path_factory.mktemp("pca_samson_model"), SAMSON, 7)


# ---- the tests ------------------------------------------------------------------

def test_components_match_sklearn(fitted):
    out = read_cube(fitted.out)
    assert out.shape[1:] == fitted.cube.shape[1:]
    assert_bands_match(out, fitted.oracle)


def test_explained_variance_ratio(fitted):
    want = float(np.sum(fitted.oracle.pca.explained_variance_ratio_))
    assert abs(explained_ratio(fitted.out) - want) < EVR_TOL


def test_variance_shares_are_metadata(fitted):
    """Each component's share of the variance (data) is metadata, as sklearn's
    explained_variance_ratio_ in percent; the band names (parameters) are PC1.."""
    ds = gdal.Open(str(fitted.out))
    shares = [float(v) for v in ds.GetMetadata()["HYPROF_PCA_VARIANCE_PERCENT"].split(",")]
    want = 100.0 * fitted.oracle.pca.explained_variance_ratio_
    assert np.allclose(shares, want, rtol=0, atol=0.006), (shares, want)
    names = [ds.GetRasterBand(i + 1).GetDescription() for i in range(ds.RasterCount)]
    assert names == ["PC%d" % (i + 1) for i in range(fitted.k)]


def test_saved_model_matches_sklearn(fitted):
    m = parse_model(fitted.model)
    b = fitted.cube.shape[0]
    o = fitted.oracle
    assert int(m["bands"][0]) == b
    assert int(m["components"][0]) == fitted.k
    assert int(m["samples"][0]) == fitted.cube.shape[1] * fitted.cube.shape[2]
    np.testing.assert_allclose(m["eigenvalues"], o.pca.explained_variance_, rtol=EIG_RTOL)
    np.testing.assert_allclose(m["total_variance"][0], o.total_variance, rtol=EIG_RTOL)
    np.testing.assert_allclose(m["mean"], o.mean, rtol=1e-12, atol=1e-9)
    assert sorted(m["component"]) == list(range(1, fitted.k + 1))
    for k in range(fitted.k):
        v = m["component"][k + 1]
        assert v.shape == (b,)
        np.testing.assert_allclose(np.linalg.norm(v), 1.0, atol=1e-10)
        np.testing.assert_allclose(v, o.components[k], atol=1e-6,
                                   err_msg="component %d of the model file" % (k + 1))


def test_model_reproduces_output(fitted):
    """The output is (x - mean) . v_k with the saved model's own numbers."""
    m = parse_model(fitted.model)
    b = fitted.cube.shape[0]
    x = fitted.cube.reshape(b, -1).T
    v = np.stack([m["component"][k + 1] for k in range(fitted.k)])
    ref = (x - m["mean"]) @ v.T
    out = read_cube(fitted.out).reshape(fitted.k, -1).T
    rel = np.max(np.abs(out - ref), axis=0) / np.max(np.abs(ref), axis=0)
    assert np.all(rel < 1e-6), rel


def test_model_reapplied_is_identical(fitted):
    again = fitted.folder / "again.tif"
    run_ok("pca", "--backend", "cpu", "--model", fitted.model, fitted.sample, again,
           cwd=fitted.folder)
    a, b = read_cube(fitted.out, np.float32), read_cube(again, np.float32)
    assert a.shape == b.shape
    assert np.array_equal(a, b), "re-applying the saved model changed the output"


def test_model_fewer_components(samson_fit):
    """--components N with --model keeps the model's N leading components."""
    f = samson_fit
    three = f.folder / "three.tif"
    run_ok("pca", "--backend", "cpu", "--model", f.model, "--components", 3, f.sample, three,
           cwd=f.folder)
    a, b = read_cube(f.out, np.float32), read_cube(three, np.float32)
    assert b.shape[0] == 3
    assert np.array_equal(a[:3], b)


def test_model_more_components_than_saved(samson_fit):
    f = samson_fit
    out = f.folder / "nine.tif"
    r = run("pca", "--model", f.model, "--components", 9, f.sample, out, cwd=f.folder)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "9" in r.stderr
    assert not leftovers(f.folder, out.name)


def test_model_other_band_count_refused(samson_fit):
    """Samson's model (156 bands) on Indian Pines (200 bands): exit 2, both counts named."""
    f = samson_fit
    out = f.folder / "wrong_bands.tif"
    r = run("pca", "--model", f.model, INDIAN_PINES, out, cwd=f.folder)
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stderr)
    msg = message_lines(r.stderr)
    assert len(msg) == 1, r.stderr
    assert "156" in msg[0] and "200" in msg[0], msg[0]
    assert not leftovers(f.folder, out.name)


def test_three_components(tmp_path):
    out = tmp_path / "pc3.tif"
    run_ok("pca", "--backend", "cpu", "--components", 3, SAMSON, out, cwd=tmp_path)
    cube = read_cube(SAMSON)
    got = read_cube(out)
    assert got.shape == (3,) + cube.shape[1:]
    o = Oracle(cube, 3)
    assert_bands_match(got, o)
    want = float(np.sum(o.pca.explained_variance_ratio_))
    assert abs(explained_ratio(out) - want) < EVR_TOL


def test_all_components(tmp_path):
    """--components = band count is allowed and explains all the variance."""
    out = tmp_path / "all.tif"
    run_ok("pca", "--backend", "cpu", "--components", 156, SAMSON, out, cwd=tmp_path)
    assert gdal.Open(str(out)).RasterCount == 156
    assert abs(explained_ratio(out) - 1.0) < EVR_TOL


def test_nodata_pixels_excluded(tmp_path):
    """A block of nodata pixels, and pixels with nodata in one band only: they are
    left out of the statistics and come out as nodata."""
    cube = read_cube(SAMSON, np.int16).astype(np.int16)
    cube[:, 10:30, 20:50] = ND                       # 600 pixels, every band
    partial = [(0, 0, 0), (77, 50, 3), (155, 94, 94), (40, 60, 70), (100, 5, 90)]
    for b, r, c in partial:                          # nodata in one band only
        cube[b, r, c] = ND
    src = write_cube(tmp_path / "samson_nd.tif", cube, nodata=ND, like=SAMSON)
    valid = np.all(cube != ND, axis=0)
    assert valid.sum() == 95 * 95 - 600 - len(partial)

    out = tmp_path / "pca_nd.tif"
    model = tmp_path / "nd.pca"
    run_ok("pca", "--backend", "cpu", "--components", 5, "--save-model", model, src, out,
           cwd=tmp_path)
    o = Oracle(cube.astype(np.float64), 5, valid)
    got = read_cube(out)
    assert_bands_match(got, o, valid)
    assert np.all(np.isnan(got[:, ~valid])), "masked pixels must come out as nodata (NaN)"
    ds = gdal.Open(str(out))
    for i in range(ds.RasterCount):
        assert np.isnan(ds.GetRasterBand(i + 1).GetNoDataValue())
    assert int(ds.GetMetadata()["HYPROF_PCA_SAMPLES"]) == int(valid.sum())
    want = float(np.sum(o.pca.explained_variance_ratio_))
    assert abs(explained_ratio(out) - want) < EVR_TOL
    m = parse_model(model)
    assert int(m["samples"][0]) == int(valid.sum())
    np.testing.assert_allclose(m["mean"], o.mean, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(m["eigenvalues"], o.pca.explained_variance_, rtol=EIG_RTOL)


def test_nan_pixels_excluded(tmp_path):
    """Float input without a nodata value: NaN pixels are masked like nodata."""
    cube = read_cube(SAMSON, np.float32)
    cube[:, 50:60, 0:40] = np.nan
    cube[12, 3, 4] = np.nan
    src = write_cube(tmp_path / "samson_nan.tif", cube, like=SAMSON)
    valid = np.all(np.isfinite(cube), axis=0)
    out = tmp_path / "pca_nan.tif"
    run_ok("pca", "--backend", "cpu", "--components", 4, src, out, cwd=tmp_path)
    o = Oracle(np.where(np.isfinite(cube), cube, 0).astype(np.float64), 4, valid)
    got = read_cube(out)
    assert_bands_match(got, o, valid)
    ds = gdal.Open(str(out))  # keep the dataset alive while its band is used
    nd = ds.GetRasterBand(1).GetNoDataValue()
    bad = got[:, ~valid]
    assert np.all(np.isnan(bad)) or (nd is not None and np.all(bad == nd)), \
        "NaN pixels must stay missing in the output"


def test_mask_band_pixels_excluded(tmp_path):
    """An internal mask band (no nodata value) masks pixels like nodata does."""
    cube = read_cube(SAMSON, np.int16).astype(np.int16)
    src = tmp_path / "samson_mask.tif"
    b, h, w = cube.shape
    ds = gdal.GetDriverByName("GTiff").Create(str(src), w, h, b, gdal.GDT_Int16,
                                              ["INTERLEAVE=BAND"])
    ds.WriteRaster(0, 0, w, h, cube.tobytes())
    ds.CreateMaskBand(gdal.GMF_PER_DATASET)
    mask = np.full((h, w), 255, np.uint8)
    mask[60:80, 5:25] = 0
    ds.GetRasterBand(1).GetMaskBand().WriteArray(mask)
    ds = None
    valid = mask != 0
    out = tmp_path / "pca_mask.tif"
    run_ok("pca", "--backend", "cpu", "--components", 4, src, out, cwd=tmp_path)
    o = Oracle(cube.astype(np.float64), 4, valid)
    got = read_cube(out)
    assert_bands_match(got, o, valid)
    ds = gdal.Open(str(out))
    assert int(ds.GetMetadata()["HYPROF_PCA_SAMPLES"]) == int(valid.sum())
    nd = ds.GetRasterBand(1).GetNoDataValue()
    bad = got[:, ~valid]
    assert np.all(np.isnan(bad)) or (nd is not None and np.all(bad == nd)), \
        "masked pixels must come out as nodata"


def test_same_bits_on_any_thread_count(tmp_path):
    """The covariance is summed in groups of pixels fixed by the cube's shape, not by
    the thread count: 1, 2 and 3 threads give the same bytes (and sklearn's PCs)."""
    outs = []
    for t in (1, 2, 3):
        out = tmp_path / ("t%d.tif" % t)
        run_ok("pca", "--backend", "cpu", "--threads", t, "--components", 5, INDIAN_PINES,
               out, cwd=tmp_path)
        outs.append(read_cube(out))
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    assert_bands_match(outs[0], Oracle(read_cube(INDIAN_PINES), 5))


@pytest.mark.parametrize("layout", [["INTERLEAVE=BAND"],
                                    ["INTERLEAVE=PIXEL", "TILED=YES", "BLOCKYSIZE=32",
                                     "BLOCKXSIZE=32", "COMPRESS=DEFLATE"],
                                    ["INTERLEAVE=PIXEL"]],
                         ids=["band-units", "row-units-tiled", "row-units-strips"])
def test_read_by_several_readers(tmp_path, layout):
    """The input is read by one reader a processor (at most --threads), each with its
    own handle, by whole bands (INTERLEAVE=BAND) or by blocks of rows of every band
    (other layouts): NaN in one band, nodata in another, infinities, an all-nodata
    block and a dataset mask give the same mask and output with one reader as with
    several, and sklearn's PCs on the valid pixels."""
    cube = read_cube(SAMSON, np.float32)
    cube[:, 70:90, 10:30] = ND
    cube[3, 5, 6] = np.nan
    cube[150, 40, 41] = ND
    cube[77, 1:3, 90:94] = np.inf
    src = write_cube(tmp_path / "samson_mixed.tif", cube, nodata=ND, like=SAMSON,
                     options=layout)
    valid = np.all(np.isfinite(cube) & (cube != ND), axis=0)
    outs = []
    for t in (1, 2, 4):
        out = tmp_path / ("r%d.tif" % t)
        run_ok("pca", "--backend", "cpu", "--threads", t, "--components", 4, src, out,
               cwd=tmp_path)
        outs.append(read_cube(out))
        assert int(gdal.Open(str(out)).GetMetadata()["HYPROF_PCA_SAMPLES"]) == int(valid.sum())
    assert all(np.array_equal(outs[0], o, equal_nan=True) for o in outs[1:])
    assert_bands_match(outs[0], Oracle(np.where(valid, cube, 0).astype(np.float64), 4, valid),
                       valid)


def test_read_by_row_units_with_a_mask_band(tmp_path):
    """A pixel-interleaved cube with an internal dataset mask (no nodata): the rows'
    masks are read with the rows, by one reader or several."""
    cube = read_cube(SAMSON, np.int16).astype(np.int16)
    b, h, w = cube.shape
    src = tmp_path / "samson_pix_mask.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(src), w, h, b, gdal.GDT_Int16,
                                              ["INTERLEAVE=PIXEL", "TILED=YES",
                                               "BLOCKXSIZE=16", "BLOCKYSIZE=16"])
    ds.WriteRaster(0, 0, w, h, cube.tobytes())
    ds.CreateMaskBand(gdal.GMF_PER_DATASET)
    mask = np.full((h, w), 255, np.uint8)
    mask[60:80, 5:25] = 0
    mask[3, 90] = 0
    ds.GetRasterBand(1).GetMaskBand().WriteArray(mask)
    ds = None
    outs = []
    for t in (1, 3):
        out = tmp_path / ("m%d.tif" % t)
        run_ok("pca", "--backend", "cpu", "--threads", t, "--components", 4, src, out,
               cwd=tmp_path)
        outs.append(read_cube(out))
    assert np.array_equal(outs[0], outs[1], equal_nan=True)
    assert_bands_match(outs[0], Oracle(cube.astype(np.float64), 4, mask != 0), mask != 0)
