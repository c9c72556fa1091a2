"""`hyprof dwt` against PyWavelets (the oracle).

DESIGN.md, "Numerical definitions": Mallat filter bank with periodic extension,
i.e. PyWavelets' mode='periodization'; the feature bands are the approximation
coefficients after L levels, ceil(B / 2^L) of them:
    pywt.wavedec(x, w, mode='periodization', level=L, axis=0)[0]
Checked for every wavelet `hyprof describe --json` offers, levels 1..4 and the
largest allowed one, on Indian Pines (200 bands) and on cubes with odd and tiny
band counts; also the filter coefficients compiled into the library.

Run: /usr/bin/python3 -m pytest tests/test_dwt_pywt.py
"""

import json
import math
import os
import re
import subprocess
import warnings

import numpy as np
import pytest

from conftest import (EXIT_USAGE, INDIAN_PINES, ROOT, gdal, leftovers, message_lines,
                      read_cube, run, run_ok, write_cube)

import pywt  # noqa: E402  (the oracle)

REL_TOL = 1e-6
FILTERS_C = ROOT / "algorithms" / "wavelet" / "filters.c"
# What the registry offered when these tests were written; the test
# test_tested_wavelets_are_the_registry_choices keeps it honest.
KNOWN_WAVELETS = ["haar", "db2", "db3", "db4", "db6", "db8", "sym4", "coif2", "bior2.2",
                  "bior4.4"]
MAIN_WAVELETS = ["haar", "db2", "db4", "bior4.4"]
# Band counts of the small cubes: even, odd, prime, tiny.
BAND_COUNTS = [200, 155, 101, 7, 3, 2]
CROP = (41, 39)   # cols, rows: 1599 pixels, several CPU tiles of 256 and a partial one


def describe():
    from conftest import exe_path
    r = subprocess.run([exe_path(), "describe", "--json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def dwt_param(name):
    ops = {o["name"]: o for o in describe()["operations"]}
    assert "dwt" in ops, "describe --json has no dwt operation"
    params = {p["name"]: p for p in ops["dwt"]["params"]}
    assert name in params, "dwt has no '%s' parameter: %s" % (name, sorted(params))
    return params[name]


def registry_wavelets():
    """The choices of dwt's `wavelet` at collection time (static list when the
    executable is not there: the tests then fail on the missing executable)."""
    exe = os.environ.get("HYPROF_EXE") or str(ROOT / "build" / "cli" / "hyprof")
    try:
        r = subprocess.run([exe, "describe", "--json"], capture_output=True, text=True,
                           timeout=60)
        ops = {o["name"]: o for o in json.loads(r.stdout)["operations"]}
        params = {p["name"]: p for p in ops["dwt"]["params"]}
        return list(params["wavelet"]["choices"])
    except Exception:
        return list(KNOWN_WAVELETS)


WAVELETS = registry_wavelets()


def max_level(bands):
    return int(math.floor(math.log2(bands)))


def levels_for(bands):
    return sorted({l for l in (1, 2, 3, 4) if l <= max_level(bands)} | {max_level(bands)})


def reference(cube, wavelet, level):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "level too high: boundary effects"
        return pywt.wavedec(cube, wavelet, mode="periodization", level=level, axis=0)[0]


def check_dwt(src, out, wavelet, level, folder):
    r = run_ok("dwt", "--backend", "cpu", "--wavelet", wavelet, "--levels", level, src, out,
               cwd=folder)
    x = read_cube(src)
    got = read_cube(out)
    b = x.shape[0]
    want_bands = math.ceil(b / 2 ** level)
    assert got.shape == (want_bands,) + x.shape[1:], (got.shape, want_bands)
    ref = reference(x, wavelet, level)
    assert ref.shape == got.shape
    rel = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
    assert rel < REL_TOL, "%s L%d on %d bands: relative error %.3g" % (wavelet, level, b, rel)
    return r


# ---- cubes --------------------------------------------------------------------

@pytest.fixture(scope="module")
def crops(tmp_path_factory):
    """Small crops of Indian Pines with BAND_COUNTS bands (UInt16, values unchanged)."""
    folder = tmp_path_factory.mktemp("dwt_cubes")
    full = read_cube(INDIAN_PINES, np.uint16).astype(np.uint16)
    w, h = CROP
    rng = np.random.default_rng(7)
    out = {}
    for b in BAND_COUNTS:
        if b == 200:
            sel = np.arange(200)
        elif b == 101:   # a spread-out, unordered-looking but sorted subset
            sel = np.sort(rng.choice(200, size=b, replace=False))
        else:
            sel = np.arange(b)
        cube = full[sel, 30:30 + h, 60:60 + w]
        out[b] = write_cube(folder / ("crop_%d.tif" % b), cube, like=INDIAN_PINES)
    return folder, out


CASES = [(b, w, l) for w in WAVELETS for b in BAND_COUNTS for l in levels_for(b)]


@pytest.mark.parametrize("bands,wavelet,level", CASES,
                         ids=["%s-B%d-L%d" % (w, b, l) for b, w, l in CASES])
def test_dwt_matches_pywt_small(crops, tmp_path, bands, wavelet, level):
    folder, cubes = crops
    check_dwt(cubes[bands], tmp_path / "dwt.tif", wavelet, level, tmp_path)


FULL = [(w, l) for w in MAIN_WAVELETS for l in levels_for(200)]


@pytest.mark.parametrize("wavelet,level", FULL, ids=["%s-L%d" % c for c in FULL])
def test_dwt_matches_pywt_indian_pines(tmp_path, wavelet, level):
    check_dwt(INDIAN_PINES, tmp_path / "dwt.tif", wavelet, level, tmp_path)


def test_default_is_haar_level_4(tmp_path):
    p = dwt_param("levels")
    w = dwt_param("wavelet")
    out = tmp_path / "default.tif"
    run_ok("dwt", INDIAN_PINES, out, cwd=tmp_path)
    got = read_cube(out)
    x = read_cube(INDIAN_PINES)
    ref = reference(x, w["default"], int(p["default"]))
    assert got.shape == ref.shape == (math.ceil(200 / 2 ** int(p["default"])), 145, 145)
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < REL_TOL


def test_tested_wavelets_are_the_registry_choices():
    choices = dwt_param("wavelet")["choices"]
    assert set(choices) == set(WAVELETS)
    for w in MAIN_WAVELETS:
        assert w in choices, "the issue requires %s" % w


# ---- filter coefficients ----------------------------------------------------

def parse_filters():
    """{name: {'length': n, 'dec_lo': array, ...}} from filters.c."""
    assert FILTERS_C.is_file(), "missing %s" % FILTERS_C
    text = FILTERS_C.read_text()
    arrays = {}
    for m in re.finditer(r"static\s+const\s+double\s+(\w+)\s*\[\s*(\d+)\s*\]\s*=\s*\{([^}]*)\}",
                         text):
        vals = [float(v) for v in m.group(3).replace("\n", " ").split(",") if v.strip()]
        assert len(vals) == int(m.group(2)), "%s: %d values for [%s]" % (
            m.group(1), len(vals), m.group(2))
        arrays[m.group(1)] = np.array(vals)
    table = {}
    for m in re.finditer(r'\{\s*"([^"]+)"\s*,\s*"[^"]*"\s*,\s*(\d+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,'
                         r'\s*(\w+)\s*,\s*(\w+)\s*\}', text):
        name = m.group(1)
        table[name] = {"length": int(m.group(2))}
        for key, ident in zip(("dec_lo", "dec_hi", "rec_lo", "rec_hi"), m.group(3, 4, 5, 6)):
            assert ident in arrays, "%s: array %s not defined" % (name, ident)
            table[name][key] = arrays[ident]
    assert table, "no wavelet table found in %s" % FILTERS_C
    return table


@pytest.mark.parametrize("wavelet", WAVELETS)
def test_filter_coefficients_are_pywt(wavelet):
    table = parse_filters()
    assert wavelet in table, "%s is offered but not in %s" % (wavelet, FILTERS_C)
    ref = pywt.Wavelet(wavelet)
    f = table[wavelet]
    assert f["length"] == ref.dec_len
    for key in ("dec_lo", "dec_hi", "rec_lo", "rec_hi"):
        want = np.array(getattr(ref, key), dtype=np.float64)
        assert f[key].shape == want.shape, (key, f[key].shape, want.shape)
        np.testing.assert_allclose(f[key], want, rtol=0, atol=1e-16,
                                   err_msg="%s %s" % (wavelet, key))


# ---- levels out of range, nodata --------------------------------------------

@pytest.mark.parametrize("bands", [200, 7, 2])
def test_levels_beyond_max_refused(crops, tmp_path, bands):
    folder, cubes = crops
    bad = max_level(bands) + 1
    out = tmp_path / "too_deep.tif"
    r = run("dwt", "--levels", bad, cubes[bands], out, cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stderr)
    msg = message_lines(r.stderr)
    assert len(msg) == 1, r.stderr
    assert re.search(r"\b%d\b" % bad, msg[0]), msg[0]
    assert not leftovers(tmp_path, out.name)


def test_levels_zero_refused(tmp_path):
    out = tmp_path / "zero.tif"
    r = run("dwt", "--levels", 0, INDIAN_PINES, out, cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stderr)
    assert "0" in r.stderr and "levels" in r.stderr
    assert not leftovers(tmp_path, out.name)


def test_unknown_wavelet_refused(tmp_path):
    out = tmp_path / "db5.tif"
    r = run("dwt", "--wavelet", "db5", INDIAN_PINES, out, cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stderr)
    assert "db5" in r.stderr
    assert not leftovers(tmp_path, out.name)


def test_nodata_pixels(tmp_path):
    """Nodata pixels come out as nodata; the others are untouched by them."""
    nd = 0
    cube = read_cube(INDIAN_PINES, np.uint16)[:101, :50, :60].astype(np.uint16)
    cube[:, 5:15, 7:30] = nd
    cube[50, 40, 40] = nd            # one band only: the pixel is masked
    src = write_cube(tmp_path / "nd.tif", cube, nodata=nd, like=INDIAN_PINES)
    valid = np.all(cube != nd, axis=0)
    out = tmp_path / "dwt_nd.tif"
    run_ok("dwt", "--wavelet", "db4", "--levels", 3, src, out, cwd=tmp_path)
    got = read_cube(out)
    ref = reference(cube.astype(np.float64), "db4", 3)
    assert got.shape == ref.shape == (13, 50, 60)
    assert np.all(np.isnan(got[:, ~valid]))
    d = np.abs(got[:, valid] - ref[:, valid])
    assert np.max(d) / np.max(np.abs(ref[:, valid])) < REL_TOL
    ds = gdal.Open(str(out))
    assert all(math.isnan(ds.GetRasterBand(i + 1).GetNoDataValue())
               for i in range(ds.RasterCount)), "float outputs use NaN as nodata"
