"""`hyprof sspp` (spatial-spectral preprocessing): the homogeneity band against
scipy.ndimage.gaussian_filter, the purity band against a NumPy PCA, the clusters
against scikit-learn's KMeans from the same initial centres, the candidate mask
against the fusion rule applied to the output's own bands; nodata and bad input.

Run: /usr/bin/python3 -m pytest tests/test_sspp.py
"""

import numpy as np
import pytest
from sklearn.cluster import KMeans

from conftest import EXIT_USAGE, SAMSON, gdal, leftovers, message_lines, read_cube, run, run_ok, write_cube

import unmix_reference as ref  # noqa: E402  (the oracle)


def sspp(inp, out, *args):
    return run_ok("sspp", "--backend", "cpu", "--progress", "none", *args, inp, out)


def metadata(path):
    md = gdal.Open(str(path)).GetMetadata()
    return {k[len("HYPROF_"):] if k.startswith("HYPROF_") else k: v for k, v in md.items()}


@pytest.fixture(scope="module")
def samson(tmp_path_factory):
    out = tmp_path_factory.mktemp("sspp") / "s.tif"
    sspp(SAMSON, out, "--endmembers", "4", "--candidates-per-cluster", "60")
    return out, read_cube(out), read_cube(SAMSON).astype(np.float32)


def test_bands_and_metadata(samson):
    out, res, _ = samson
    ds = gdal.Open(str(out))
    names = [ds.GetRasterBand(b + 1).GetDescription() for b in range(ds.RasterCount)]
    ds = None
    assert names == ["candidate", "homogeneity RMSE", "purity", "cluster"]
    md = metadata(out)
    assert md["SSPP_ENDMEMBERS"] == "4" and md["SSPP_CANDIDATES"] == "240"
    assert set(np.unique(res[0])) == {0.0, 1.0} and res[0].sum() == 240
    assert set(np.unique(res[3])) == {1.0, 2.0, 3.0, 4.0}


def test_homogeneity_matches_scipy(samson):
    _, res, cube = samson
    want = ref.homogeneity(cube, 1.2)
    assert np.allclose(res[1], want, rtol=1e-5, atol=1e-4), np.abs(res[1] - want).max()


def test_homogeneity_other_sigma(tmp_path):
    cube = np.random.default_rng(5).random((6, 13, 9)).astype(np.float32)
    write_cube(tmp_path / "r.tif", cube)
    sspp(tmp_path / "r.tif", tmp_path / "o.tif", "--endmembers", "2", "--sigma", "2.7")
    got = read_cube(tmp_path / "o.tif")[1]
    assert np.allclose(got, ref.homogeneity(cube, 2.7), rtol=1e-5, atol=1e-6)


def test_purity_matches_numpy_pca(samson):
    _, res, cube = samson
    W = ref.purity_weights(cube, 4)
    want = np.where(W >= 0.7, W, 0.0).sum(axis=0)
    near = (np.abs(W - 0.7) < 1e-4).any(axis=0)  # float rounding may flip the cut there
    assert np.allclose(res[2][~near], want[~near], atol=1e-4), np.abs(res[2] - want)[~near].max()
    assert (res[2] > 0).sum() > 0 and res[2].max() <= 4.0 + 1e-6


def test_kmeans_matches_sklearn(samson):
    out, res, cube = samson
    md = metadata(out)
    init = [int(v) for v in md["KMEANS_INIT_PIXELS"].split(",")]
    X = cube.reshape(cube.shape[0], -1).T.astype(np.float64)
    km = KMeans(n_clusters=4, init=X[init], n_init=1, max_iter=50, tol=0.0,
                algorithm="lloyd").fit(X)
    ours = float(md["KMEANS_INERTIA"])
    assert abs(ours - km.inertia_) <= 1e-6 * km.inertia_, (ours, km.inertia_)
    labels = res[3].ravel().astype(int) - 1
    assert (labels == km.labels_).mean() > 0.999, (labels == km.labels_).mean()


def test_farthest_point_init(samson):
    out, _, cube = samson
    init = [int(v) for v in metadata(out)["KMEANS_INIT_PIXELS"].split(",")]
    X = cube.reshape(cube.shape[0], -1).T.astype(np.float64)
    want = [int(np.argmax(((X - X.mean(axis=0)) ** 2).sum(axis=1)))]
    mind = ((X - X[want[0]]) ** 2).sum(axis=1)
    for _ in range(3):
        want.append(int(np.argmax(mind)))
        mind = np.minimum(mind, ((X - X[want[-1]]) ** 2).sum(axis=1))
    assert init == want


def test_fusion_rule(samson):
    _, res, _ = samson
    want = ref.fusion(res[1], res[2], res[3].astype(int) - 1, 4, 60)
    assert np.array_equal(res[0].ravel() == 1, want)


def test_nodata(tmp_path):
    cube = read_cube(SAMSON).astype(np.float32)[:, :40, :40]
    cube[:, 5:9, 3:30] = np.nan
    write_cube(tmp_path / "nd.tif", cube)
    sspp(tmp_path / "nd.tif", tmp_path / "o.tif", "--endmembers", "3")
    res = read_cube(tmp_path / "o.tif")
    assert np.isnan(res[:, 5:9, 3:30]).all()
    assert not np.isnan(np.delete(res.reshape(4, -1), np.flatnonzero(
        np.isnan(cube[0]).ravel()), axis=1)).any()


def assert_refused(tmp_path, inp, *args, says):
    r = run("sspp", "--progress", "none", *args, inp, tmp_path / "bad.tif")
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stderr)
    lines = message_lines(r.stderr)
    assert len(lines) == 1 and says in lines[0], lines
    assert leftovers(tmp_path, "bad.tif") == []


def test_bad_input(tmp_path):
    assert_refused(tmp_path, SAMSON, "--endmembers", "1", says="--endmembers 1")
    assert_refused(tmp_path, SAMSON, "--endmembers", "200", says="200")
    assert_refused(tmp_path, SAMSON, "--theta", "1.5", says="theta")
    write_cube(tmp_path / "two.tif", np.random.default_rng(0).random((10, 1, 2)).astype(np.float32))
    assert_refused(tmp_path, tmp_path / "two.tif", "--endmembers", "3", says="2 valid pixels")
    const = np.ones((12, 8, 8), np.float32)
    write_cube(tmp_path / "c.tif", const)
    assert_refused(tmp_path, tmp_path / "c.tif", "--endmembers", "3", says="same spectrum")
