"""Shared fixtures and helpers of the Python tests of the `hyprof` executable.

Run: /usr/bin/python3 -m pytest tests -q
The executable is $HYPROF_EXE when set, else build/cli/hyprof of this checkout
(build it first: cmake -S . -B build && cmake --build build). A missing
executable is a failure, not a skip: these tests are the CLI's contract.

Every test works in its own temporary folder (pytest's tmp_path); nothing is ever
written into samples/ (checked at the end of the session).
"""

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("HYPROF_UNDER_ASAN"):
    # LeakSanitizer (GCC 12's) crashes at the Python process's exit, scanning a
    # bogus dynamic-TLS block, when scikit-learn's libraries (with psutil, which
    # python3-distributed brings) load after GDAL and the ASan-built plugin;
    # loaded before them, they do not. Tests importing scikit-learn load it first.
    import sklearn.metrics  # noqa: F401

try:
    from osgeo import gdal, osr
except ImportError as e:  # a wrong interpreter must not turn the suite into skips
    raise ImportError("these tests need GDAL's Python bindings (osgeo), NumPy, scikit-learn "
                      "and PyWavelets: run them with /usr/bin/python3 -m pytest tests") from e

gdal.UseExceptions()

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SAMSON = SAMPLES / "samson.tif"
INDIAN_PINES = SAMPLES / "indian_pines.tif"

# Exit codes of the CLI contract (DESIGN.md).
EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 3


def exe_path():
    """The executable under test; fails (never skips) when it is missing."""
    env = os.environ.get("HYPROF_EXE")
    path = Path(env) if env else ROOT / "build" / "cli" / "hyprof"
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            "hyprof executable not found at %s (%s); build it with "
            "'cmake -S %s -B %s/build && cmake --build %s/build' or set HYPROF_EXE"
            % (path, "from $HYPROF_EXE" if env else "default location", ROOT, ROOT, ROOT),
            pytrace=False,
        )
    return str(path)


def plugin_dir():
    """The folder of the GDAL plugin under test; fails (never skips) when it is missing."""
    env = os.environ.get("HYPROF_GDAL_PLUGIN_DIR")
    d = Path(env) if env else ROOT / "build" / "gdal_driver"
    if not (d / "gdal_HYPROF.so").is_file():
        pytest.fail("gdal_HYPROF.so not found in %s; build it (cmake --build build) or set "
                    "HYPROF_GDAL_PLUGIN_DIR" % d, pytrace=False)
    return d


def gdal_env():
    """The environment of a GDAL program that loads the plugin under test."""
    return dict(os.environ, GDAL_DRIVER_PATH=str(plugin_dir()))


def load_gdal_plugin():
    """Loads the plugin into this process (GDAL_DRIVER_PATH is read when drivers
    are registered; the bindings registered once already at import)."""
    from osgeo import gdal
    gdal.SetConfigOption("GDAL_DRIVER_PATH", str(plugin_dir()))
    gdal.AllRegister()
    assert gdal.GetDriverByName("HYPROF") is not None, "the HYPROF driver did not register"


@pytest.fixture(scope="session")
def hyprof_exe():
    return exe_path()


def run(*args, **kw):
    """Runs `hyprof ARGS...` and returns the CompletedProcess (text, captured).

    Keyword arguments go to subprocess.run (cwd, env, timeout, input...)."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    cmd = [exe_path()] + [str(a) for a in args]
    return subprocess.run(cmd, **kw)


def run_ok(*args, **kw):
    """run(), asserting exit 0 (with the command's stderr in the message)."""
    r = run(*args, **kw)
    assert r.returncode == EXIT_OK, "hyprof %s -> %d\nstdout: %s\nstderr: %s" % (
        " ".join(map(str, args)), r.returncode, r.stdout, r.stderr)
    return r


@pytest.fixture(scope="session", autouse=True)
def samples_untouched():
    """Nothing may write into samples/ (no outputs, no .aux.xml sidecars)."""
    def snapshot():
        return {p.name: (p.stat().st_size, p.stat().st_mtime_ns)
                for p in SAMPLES.iterdir()} if SAMPLES.is_dir() else {}
    before = snapshot()
    yield
    after = snapshot()
    assert after == before, "samples/ changed during the tests: %s" % sorted(
        set(after.items()) ^ set(before.items()))


# ---- rasters ----------------------------------------------------------------

def read_cube(path, dtype=np.float64):
    """(bands, rows, cols) array of a raster, always 3-D."""
    ds = gdal.Open(str(path))
    a = ds.ReadAsArray()
    if a.ndim == 2:
        a = a[None]
    return a.astype(dtype)


def write_cube(path, cube, gdal_type=None, nodata=None, like=None, options=None):
    """Writes a (bands, rows, cols) array as a GeoTIFF; `like` copies the CRS and
    geotransform of another raster (by default the sample's, when given)."""
    cube = np.asarray(cube)
    if cube.ndim == 2:
        cube = cube[None]
    types = {np.dtype(np.int16): gdal.GDT_Int16, np.dtype(np.uint16): gdal.GDT_UInt16,
             np.dtype(np.float32): gdal.GDT_Float32, np.dtype(np.float64): gdal.GDT_Float64,
             np.dtype(np.uint8): gdal.GDT_Byte, np.dtype(np.int32): gdal.GDT_Int32}
    if gdal_type is None:
        gdal_type = types[cube.dtype]
    b, h, w = cube.shape
    ds = gdal.GetDriverByName("GTiff").Create(str(path), w, h, b, gdal_type,
                                              options or ["INTERLEAVE=BAND"])
    if like is not None:
        src = gdal.Open(str(like))
        ds.SetProjection(src.GetProjection())
        ds.SetGeoTransform(src.GetGeoTransform())
        src = None
    for i in range(b):
        band = ds.GetRasterBand(i + 1)
        if nodata is not None:
            band.SetNoDataValue(nodata)
        band.WriteArray(cube[i])
        band.SetDescription("test band %d" % (i + 1))
    ds = None
    return Path(path)


def write_classmap(path, values, names, like):
    """A Byte class map on `like`'s grid; names[v] is class v's name (None: no
    names at all)."""
    write_cube(path, values.astype(np.uint8), like=like)
    if names is not None:
        ds = gdal.Open(str(path), gdal.GA_Update)
        ds.GetRasterBand(1).SetCategoryNames(list(names))
        ds = None
    return path


def same_crs(a, b):
    sa = osr.SpatialReference(wkt=gdal.Open(str(a)).GetProjection())
    sb = osr.SpatialReference(wkt=gdal.Open(str(b)).GetProjection())
    return bool(sa.IsSame(sb))


# ---- stderr, progress and leftovers ----------------------------------------

def message_lines(stderr):
    """stderr lines that are not JSON progress/log objects and not blank."""
    return [l for l in stderr.splitlines() if l.strip() and not l.lstrip().startswith("{")]


def json_lines(stderr):
    """Every stderr line starting with '{', parsed (fails on invalid JSON)."""
    out = []
    for l in stderr.splitlines():
        if l.lstrip().startswith("{"):
            try:
                out.append(json.loads(l))
            except json.JSONDecodeError as e:  # pragma: no cover - the failure itself
                pytest.fail("stderr line is not JSON: %r (%s)" % (l, e))
    return out


def leftovers(folder, output_name):
    """Files in `folder` that look like (a piece of) the output `output_name`:
    the output itself or any temporary name derived from it."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    pat = re.compile(r"(^|\.)%s($|\.)|hyprof-\d+\.tmp" % re.escape(output_name))
    return sorted(p.name for p in folder.iterdir() if pat.search(p.name))


def is_root():
    return hasattr(os, "geteuid") and os.geteuid() == 0


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes (deselect with -m 'not slow')")
