"""`hyprof unmix`: the per-pixel solvers against SciPy (nnls, an exact FCLS built
from it and checked by its KKT conditions, lstsq), the Samson scene against its
reference endmembers and abundances (end3.mat), a synthetic USGS scene with known
endmembers and abundances, the saved endmember set (CSV/JSON, wavelengths,
reload), and bad input.

Run: /usr/bin/python3 -m pytest tests/test_unmix.py
"""

import json

import numpy as np
import pytest

from conftest import (EXIT_OK, EXIT_USAGE, SAMSON, gdal, leftovers, message_lines, read_cube,
                      run, run_ok, write_cube)

import unmix_reference as ref  # noqa: E402  (the oracle)


def unmix(inp, out, *args):
    return run_ok("unmix", "--backend", "cpu", "--progress", "none", *args, inp, out)


def write_set(path, M, wavelengths=None):
    """An endmember CSV (the format unmix writes) of M (bands, p)."""
    B, p = M.shape
    with open(path, "w") as f:
        f.write("band,wavelength," + ",".join("E%d" % (k + 1) for k in range(p)) + "\n")
        for b in range(B):
            wl = "" if wavelengths is None else "%.17g" % wavelengths[b]
            f.write("%d,%s," % (b + 1, wl) + ",".join("%.17g" % v for v in M[b]) + "\n")
    return path


def read_set(path):
    return np.genfromtxt(path, delimiter=",", skip_header=1)


def metadata(path):
    md = gdal.Open(str(path)).GetMetadata()
    return {k[len("HYPROF_"):] if k.startswith("HYPROF_") else k: v for k, v in md.items()}


# ---- the solvers against SciPy ----------------------------------------------------------

def random_system(rng, B, p, H=6, W=7, collinear=False):
    M = rng.random((B, p)) + 0.05
    if collinear:  # two nearly parallel endmembers: an ill-conditioned G
        M[:, 1] = M[:, 0] * 1.02 + 1e-3 * rng.random(B)
    A = rng.dirichlet(np.ones(p), H * W).T
    Y = M @ A + 0.3 * rng.standard_normal((B, H * W))  # off the simplex on purpose
    return M, Y.astype(np.float32)


@pytest.mark.parametrize("method", ["fcls", "nnls", "ucls"])
@pytest.mark.parametrize("B,p,collinear", [(30, 2, False), (50, 6, False), (40, 12, False),
                                           (25, 5, True)])
def test_solvers_match_scipy(tmp_path, method, B, p, collinear):
    rng = np.random.default_rng(B * 100 + p)
    M, Y = random_system(rng, B, p, collinear=collinear)
    cube = Y.reshape(B, 6, 7)
    write_cube(tmp_path / "y.tif", cube)
    write_set(tmp_path / "m.csv", M)
    unmix(tmp_path / "y.tif", tmp_path / "a.tif", "--model", tmp_path / "m.csv",
          "--abundances", method)
    out = read_cube(tmp_path / "a.tif").reshape(p + 1, -1)
    Y64 = Y.astype(np.float64)
    worst = 0.0
    for i in range(Y.shape[1]):
        y = Y64[:, i]
        r = {"fcls": ref.ref_fcls, "nnls": ref.ref_nnls, "ucls": ref.ref_ucls}[method](M, y)
        if collinear and method == "ucls":
            continue  # the unconstrained answer is not unique enough to compare
        worst = max(worst, np.abs(out[:p, i] - r).max() / max(1.0, np.abs(r).max()))
        if method == "fcls":
            assert ref.fcls_kkt(M, y, out[:p, i].astype(np.float64), 1.0) < 1e-4 * B
        rec = np.sqrt(((y - M @ out[:p, i].astype(np.float64)) ** 2).mean())
        assert abs(out[p, i] - rec) <= 1e-5 * max(1.0, rec)
    tol = 1e-4 if collinear else 1e-5  # float32 output; collinear: conditioning
    assert worst < tol, "%s: max relative difference to SciPy %.3g" % (method, worst)
    if method == "fcls":
        assert np.abs(out[:p].sum(axis=0) - 1).max() < 1e-6
    if method != "ucls":
        assert out[:p].min() >= 0.0


def test_fcls_reference_is_exact():
    """The FCLS oracle itself: KKT holds to rounding on a random system."""
    rng = np.random.default_rng(3)
    M, Y = random_system(rng, 40, 6)
    for i in range(10):
        a = ref.ref_fcls(M, Y[:, i].astype(np.float64))
        assert ref.fcls_kkt(M, Y[:, i].astype(np.float64), a, 1.0) < 1e-9


# ---- Samson against end3.mat --------------------------------------------------------------

def samson_scores(tmp_path, name, *args):
    out = tmp_path / (name + ".tif")
    unmix(SAMSON, out, "--endmembers", "3", *args)
    E = read_set(out.with_suffix(".csv"))[:, 2:]
    ab = read_cube(out)
    M, A = ref.samson_reference()
    r, c, ang = ref.match(E, M)
    rmse = np.sqrt(np.mean([(ab[i] - A[j]) ** 2 for i, j in zip(r, c)]))
    return np.degrees(ang.mean()), rmse


def test_samson_against_reference(tmp_path):
    """Measured (CPU, this build): N-FINDR on all pixels: mean SAD 4.02 deg, abundance
    RMSE 0.323; with SSPP candidates: 3.90 deg, 0.278. Thresholds a little above."""
    sad, rmse = samson_scores(tmp_path, "plain")
    sad_s, rmse_s = samson_scores(tmp_path, "sspp", "--sspp")
    assert sad < 4.5 and rmse < 0.35, (sad, rmse)
    assert sad_s < 4.3 and rmse_s < 0.30, (sad_s, rmse_s)
    # SSPP must not make the chain worse than plain extraction.
    assert sad_s <= sad + 1e-9 and rmse_s <= rmse + 1e-9, ((sad, rmse), (sad_s, rmse_s))


def test_samson_reference_endmembers(tmp_path):
    """FCLS with end3.mat's own endmembers, scaled to the cube's units by the best
    single factor: on the cube rebuilt as M A it recovers A (Samson's endmembers
    are strongly correlated: a real conditioning test); on the real cube it stays
    near A (measured RMSE 0.215: the reference was not made by FCLS on these
    radiances, see samples/README.md)."""
    M, A = ref.samson_reference()
    cube = read_cube(SAMSON)
    rec = np.einsum("bp,phw->bhw", M, A)
    scale = (cube * rec).sum() / (rec * rec).sum()
    write_set(tmp_path / "m.csv", M * scale)
    write_cube(tmp_path / "rec.tif", (scale * rec).astype(np.float32))
    unmix(tmp_path / "rec.tif", tmp_path / "r.tif", "--model", tmp_path / "m.csv")
    ab = read_cube(tmp_path / "r.tif")
    assert np.abs(ab[:3] - A).max() < 1e-3, np.abs(ab[:3] - A).max()
    unmix(SAMSON, tmp_path / "a.tif", "--model", tmp_path / "m.csv")
    ab = read_cube(tmp_path / "a.tif")
    rmse = np.sqrt(((ab[:3] - A) ** 2).mean())
    assert rmse < 0.25, rmse


# ---- a synthetic USGS scene ------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    Y, M, A = ref.synthetic_scene()
    path = write_cube(tmp_path_factory.mktemp("syn") / "syn.tif", Y)
    return path, M, A


@pytest.mark.parametrize("args", [[], ["--sspp"], ["--extract", "vca"], ["--extract", "atgp"],
                                  ["--sspp", "--extract", "vca"]])
def test_synthetic_scene(tmp_path, synthetic, args):
    """Measured (p = 5, 40 dB): angles 0.34-0.56 deg for four endmembers, 4.4-4.8 deg
    for a dark one (low reflectance: the noise tilts it most); abundance RMSE
    0.005-0.008."""
    path, M, A = synthetic
    out = tmp_path / "o.tif"
    unmix(path, out, "--endmembers", "5", *args)
    E = read_set(out.with_suffix(".csv"))[:, 2:]
    ab = read_cube(out)
    r, c, ang = ref.match(E, M)
    deg = np.degrees(ang)
    assert deg.max() < 6.0 and deg.mean() < 2.0, deg
    rmse = np.sqrt(np.mean([(ab[i] - A[j]) ** 2 for i, j in zip(r, c)]))
    assert rmse < 0.015, rmse
    assert ab[:5].min() >= 0.0
    assert np.abs(ab[:5].sum(axis=0) - 1).max() < 1e-6


@pytest.mark.parametrize("sample", ["samson.tif", "indian_pines.tif"])
def test_hysime_matches_reference(tmp_path, sample):
    """The count equals the reference HySime's (explicit regressions): measured 76 on
    Samson (its int16 noise is far from white: give --endmembers there) and 18 on
    Indian Pines."""
    path = SAMSON.parent / sample
    want = ref.hysime(read_cube(path))
    unmix(path, tmp_path / "o.tif", "--endmembers", "auto", "--extract", "atgp")
    assert int(metadata(tmp_path / "o.tif")["UNMIX_ENDMEMBERS"]) == want


def test_hysime_finds_the_endmember_count(tmp_path, synthetic):
    path, M, A = synthetic
    unmix(path, tmp_path / "o.tif")  # --endmembers auto is the default
    assert metadata(tmp_path / "o.tif")["UNMIX_ENDMEMBERS"] == "5"
    assert read_cube(tmp_path / "o.tif").shape[0] == 6


# ---- the endmember set beside the output -----------------------------------------------------

def test_endmember_files(tmp_path):
    out = tmp_path / "u.tif"
    r = unmix(SAMSON, out, "--endmembers", "3")
    assert "wrote %s" % (tmp_path / "u.csv") in r.stdout
    ds = gdal.Open(str(SAMSON))
    wl = [float(ds.GetRasterBand(b + 1).GetMetadataItem("wavelength"))
          for b in range(ds.RasterCount)]
    csv = read_set(tmp_path / "u.csv")
    assert np.array_equal(csv[:, 0], np.arange(1, 157))
    assert np.allclose(csv[:, 1], wl, rtol=0, atol=1e-6)
    js = json.loads((tmp_path / "u.json").read_text())
    assert js["format"] == "hyprof-endmembers" and js["count"] == 3 and js["bands"] == 156
    assert js["wavelength_units"].lower().startswith("nanomet")
    cube = read_cube(SAMSON)
    pixels = metadata(out)["UNMIX_ENDMEMBER_PIXELS"].split(";")
    ods = gdal.Open(str(out))
    names = [ods.GetRasterBand(b + 1).GetDescription() for b in range(4)]
    ods = None
    assert names[3] == "RMSE"
    for k, e in enumerate(js["endmembers"]):
        x, y = e["x"], e["y"]
        assert pixels[k] == "%d,%d" % (x, y)
        assert names[k] == "E%d abundance" % (k + 1)   # the pixel is data: metadata
        assert np.array_equal(e["spectrum"], cube[:, y, x])        # a real pixel
        assert np.array_equal(csv[:, 2 + k], cube[:, y, x])
    # Reloading the CSV gives the same abundances, bit for bit.
    unmix(SAMSON, tmp_path / "again.tif", "--model", tmp_path / "u.csv",
          "--endmembers-csv", tmp_path / "again_set.csv")
    assert np.array_equal(read_cube(out), read_cube(tmp_path / "again.tif"))
    assert np.array_equal(read_set(tmp_path / "again_set.csv")[:, 2:], csv[:, 2:])


def test_named_side_files_and_overwrite(tmp_path):
    out = tmp_path / "u.tif"
    unmix(SAMSON, out, "--endmembers", "2", "--endmembers-csv", tmp_path / "set.csv",
          "--endmembers-json", tmp_path / "set.json")
    assert (tmp_path / "set.csv").is_file() and (tmp_path / "set.json").is_file()
    assert not (tmp_path / "u.csv").exists()
    # An existing side file is not replaced without --overwrite, and nothing is written.
    (tmp_path / "v.csv").write_text("keep")
    r = run("unmix", "--endmembers", "2", SAMSON, tmp_path / "v.tif")
    assert r.returncode == EXIT_USAGE and "v.csv" in r.stderr
    assert (tmp_path / "v.csv").read_text() == "keep" and not (tmp_path / "v.tif").exists()


def test_describe_says_beside_output():
    d = json.loads(run_ok("describe", "--json").stdout)
    op = next(o for o in d["operations"] if o["name"] == "unmix")
    beside = sorted(p["name"] for p in op["params"] if p.get("beside_output"))
    assert beside == ["endmembers-csv", "endmembers-json"]


@pytest.mark.parametrize("args", [["--endmembers", "3"], ["--sspp"]])
def test_nodata_pixels(tmp_path, args):
    cube = read_cube(SAMSON).astype(np.float32)
    cube[:, :10, :] = -9999
    cube[:, 50, 20:30] = np.nan
    write_cube(tmp_path / "nd.tif", cube, nodata=-9999)
    unmix(tmp_path / "nd.tif", tmp_path / "o.tif", *args)
    out = read_cube(tmp_path / "o.tif")
    assert np.isnan(out[:, :10, :]).all() and np.isnan(out[:, 50, 20:30]).all()
    valid = np.ones(cube.shape[1:], bool)
    valid[:10] = False
    valid[50, 20:30] = False
    assert np.isfinite(out[:, valid]).all() and (out[:, valid] != -9999).all()
    js = json.loads((tmp_path / "o.json").read_text())
    assert all(valid[e["y"], e["x"]] for e in js["endmembers"])


# ---- bad input -------------------------------------------------------------------------------

def assert_refused(tmp_path, inp, *args, says):
    out = tmp_path / "bad.tif"
    r = run("unmix", "--progress", "none", *args, inp, out)
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stderr)
    lines = message_lines(r.stderr)
    assert len(lines) == 1 and says in lines[0], lines
    assert leftovers(tmp_path, "bad.tif") == [] and leftovers(tmp_path, "bad") == []


def test_bad_endmember_counts(tmp_path):
    assert_refused(tmp_path, SAMSON, "--endmembers", "157", says="157")
    assert_refused(tmp_path, SAMSON, "--endmembers", "1", says="--endmembers 1")
    assert_refused(tmp_path, SAMSON, "--endmembers", "three", says="'three'")


def test_fewer_pixels_than_endmembers(tmp_path):
    write_cube(tmp_path / "two.tif", np.random.default_rng(0).random((10, 1, 2)).astype(np.float32))
    assert_refused(tmp_path, tmp_path / "two.tif", "--endmembers", "3", says="2 valid pixels")


def test_constant_spectra(tmp_path):
    cube = np.tile(np.linspace(1, 2, 12, dtype=np.float32)[:, None, None], (1, 8, 8))
    write_cube(tmp_path / "c.tif", cube)
    for extract in ["nfindr", "vca", "atgp"]:
        assert_refused(tmp_path, tmp_path / "c.tif", "--endmembers", "3", "--extract", extract,
                       says="independent" if extract != "nfindr" else "constant")


def test_bad_model(tmp_path):
    write_set(tmp_path / "m.csv", np.ones((10, 3)))
    assert_refused(tmp_path, SAMSON, "--model", tmp_path / "m.csv", says="10 bands")
    (tmp_path / "junk.csv").write_text("band,wavelength,E1\n1,,abc\n")
    assert_refused(tmp_path, SAMSON, "--model", tmp_path / "junk.csv", says="line 2")
