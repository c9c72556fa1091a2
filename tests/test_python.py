"""The Python package `hyprof` (python/hyprof) against the executable.

Every registry operation with a `run` gives through Python exactly the
CLI's output (values, band names) on crops of the samples; errors raise
hyprof.Error subclasses (ValueError/TypeError naming the parameter for bad
arguments); a progress callback cancels; Ctrl-C cancels; hyprof.xarray keeps
coordinates, attributes and CRS; train/predict/save/load equals `hyprof
train/classify/assess`; the CMake install rule gives an importable package.

Run: /usr/bin/python3 -m pytest -q tests/test_python.py. The library is
$HYPROF_LIBRARY, else libhyprof.so of the executable's build folder
($HYPROF_EXE/../..), else build/libhyprof.so. The package is imported under
its name `hyprof`, which the QGIS plugin's package also has: the fixture
puts back whatever `hyprof` modules were loaded before it.
"""

import contextlib
import ctypes
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from osgeo import gdal

from conftest import INDIAN_PINES, ROOT, SAMPLES, SAMSON, exe_path, read_cube, run_ok, write_cube

# CLI arguments of every operation with a `run`, small enough to stay fast.
OPS = {
    "pca": ["--components", "5"],
    "dwt": ["--levels", "3", "--wavelet", "db2"],
    "eadp": ["--components", "3", "--count", "3", "--step", "40"],
    "eap": ["--features", "3", "--attribute", "area,std"],
    "emp": ["--radii", "1,2,4"],
    "wmcd": ["--radii", "1,3"],
    "sspp": ["--endmembers", "3"],
    "unmix": ["--endmembers", "3", "--sspp"],
}
ON_SAMSON = {"sspp", "unmix"}


def library_path():
    env = os.environ.get("HYPROF_LIBRARY")
    if env:
        return env
    exe = Path(exe_path())
    lib = exe.parent.parent / "libhyprof.so"
    return str(lib if lib.is_file() else ROOT / "build" / "libhyprof.so")


@pytest.fixture(scope="module")
def hp():
    """The package of python/hyprof over this build's library."""
    saved = {k: v for k, v in sys.modules.items() if k == "hyprof" or k.startswith("hyprof.")}
    for k in saved:
        del sys.modules[k]
    old_env = os.environ.get("HYPROF_LIBRARY")
    os.environ["HYPROF_LIBRARY"] = library_path()
    sys.path.insert(0, str(ROOT / "python"))
    try:
        mod = importlib.import_module("hyprof")
        assert Path(mod.__file__).parent == ROOT / "python" / "hyprof"
        yield mod
    finally:
        sys.path.remove(str(ROOT / "python"))
        for k in [k for k in sys.modules if k == "hyprof" or k.startswith("hyprof.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        if old_env is None:
            os.environ.pop("HYPROF_LIBRARY", None)
        else:
            os.environ["HYPROF_LIBRARY"] = old_env


@pytest.fixture(scope="module")
def crops(tmp_path_factory):
    """48x40 of Indian Pines, 40x36 of Samson (GeoTIFF, georeferenced)."""
    d = tmp_path_factory.mktemp("crops")
    ip, sa = d / "ip.tif", d / "samson.tif"
    gdal.Translate(str(ip), str(INDIAN_PINES), srcWin=[20, 30, 48, 40])
    gdal.Translate(str(sa), str(SAMSON), srcWin=[10, 12, 40, 36])
    return {"ip": ip, "samson": sa}


def raster(path):
    ds = gdal.Open(str(path))
    a = ds.ReadAsArray()
    a = a[None] if a.ndim == 2 else a
    names = [ds.GetRasterBand(i + 1).GetDescription() for i in range(ds.RasterCount)]
    return a, names


def typed(text):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text  # choices, and lists as text (typed lists are tested apart)


def py_kwargs(cli_args):
    """['--radii', '1,2,4', '--components', '3', '--sspp'] ->
    {'radii': '1,2,4', 'components': 3, 'sspp': True}."""
    kw, i = {}, 0
    while i < len(cli_args):
        name = cli_args[i][2:].replace("-", "_")
        if i + 1 < len(cli_args) and not cli_args[i + 1].startswith("--"):
            kw[name] = typed(cli_args[i + 1])
            i += 2
        else:
            kw[name] = True
            i += 1
    return kw


def test_every_runnable_operation_is_covered(hp):
    runnable = {n for n, op in hp.OPERATIONS.items() if op.runnable}
    assert runnable == set(OPS), "add the new operations to OPS"
    for name in runnable:
        assert callable(getattr(hp, name)) and name in hp.__all__


@pytest.mark.parametrize("op", sorted(OPS))
def test_operation_equals_cli(hp, crops, tmp_path, op):
    src = crops["samson" if op in ON_SAMSON else "ip"]
    out = tmp_path / (op + ".tif")
    run_ok(op, *OPS[op], "--backend", "cpu", "--progress", "none", src, out)
    want, names = raster(out)
    cube = gdal.Open(str(src)).ReadAsArray()  # the file's integer type: no copy, no conversion
    kw = py_kwargs(OPS[op])
    if op == "unmix":
        kw["endmembers_csv"] = tmp_path / "py.csv"
    res = getattr(hp, op)(cube, backend="cpu", **kw)
    assert isinstance(res, hp.Result) and res.dtype == np.float32
    assert res.shape == want.shape
    assert res.band_names == names
    assert res.backend == "cpu"
    np.testing.assert_array_equal(res, want)


def test_typed_values_equal_text(hp, crops):
    cube = read_cube(crops["ip"], np.float32)
    a = hp.emp(cube, radii=[1, 2, 4], features=3, se="square")
    b = hp.emp(cube, radii="1,2,4", features=3, se="square")
    np.testing.assert_array_equal(a, b)
    c = hp.eap(cube, features=2, attribute=["area", "std"], area_thresholds=(10, 50))
    d = hp.eap(cube, features=2, attribute="area,std", area_thresholds="10,50")
    np.testing.assert_array_equal(c, d)


def test_strided_views_and_dtypes_equal_contiguous(hp, crops):
    cube = gdal.Open(str(crops["ip"])).ReadAsArray()
    want = hp.pca(np.ascontiguousarray(cube), components=4)
    bip = np.ascontiguousarray(cube.transpose(1, 2, 0)).transpose(2, 0, 1)  # pixel-interleaved
    for variant in (bip, cube.astype(np.float64), cube.astype(np.int32), cube.astype(np.uint32),
                    cube.astype(">u2")):
        np.testing.assert_array_equal(hp.pca(variant, components=4), want)
    flipped = hp.pca(cube[:, ::-1, :], components=4)
    np.testing.assert_array_equal(flipped, hp.pca(np.ascontiguousarray(cube[:, ::-1]),
                                                  components=4))
    window = hp.pca(cube[:, 5:30, 7:40], components=4)
    np.testing.assert_array_equal(window, hp.pca(cube[:, 5:30, 7:40].copy(), components=4))
    # an array at an unaligned address (as Dask may deserialise one) is read
    # through an aligned copy: the library's loads assume aligned elements
    f32 = np.ascontiguousarray(cube, dtype=np.float32)
    raw = np.empty(f32.nbytes + 1, np.uint8)
    unaligned = np.frombuffer(raw[1:].data, dtype=np.float32).reshape(f32.shape)
    unaligned[...] = f32
    assert not unaligned.flags.aligned
    np.testing.assert_array_equal(hp.pca(unaligned, components=4), hp.pca(f32, components=4))
    # the result is a view of the library's buffer, not a copy
    assert not want.flags.owndata and want.base is not None


def test_nodata_and_mask_equal_cli(hp, crops, tmp_path):
    cube = read_cube(crops["ip"], np.float32)
    cube[:, 3:9, 4:11] = -1.0
    src = write_cube(tmp_path / "nd.tif", cube, nodata=-1.0, like=crops["ip"])
    out = tmp_path / "pca.tif"
    run_ok("pca", "--components", "3", "--backend", "cpu", "--progress", "none", src, out)
    want, _ = raster(out)
    res = hp.pca(cube, components=3, nodata=-1.0)
    np.testing.assert_array_equal(res, want)
    # nodata pixels are NaN whatever the input's nodata, as in the CLI's output
    assert np.isnan(res[:, 3:9, 4:11]).all() and not res.mask[3:9, 4:11].any()
    assert np.isnan(res.nodata) and res.mask.sum() == res.mask.size - 6 * 7
    valid = np.ones(cube.shape[1:], bool)
    valid[3:9, 4:11] = False
    # a mask instead of a nodata value: the same numbers, NaN where masked
    masked = np.ma.MaskedArray(cube, mask=np.broadcast_to(~valid, cube.shape))
    for res in (hp.pca(cube, components=3, mask=valid), hp.pca(masked, components=3)):
        np.testing.assert_array_equal(res.mask, valid)
        np.testing.assert_array_equal(res[:, valid], want[:, valid])
        assert np.isnan(res[:, ~valid]).all()
    nan = cube.copy()
    nan[0, 3:9, 4:11] = np.nan  # NaN is nodata, as when the CLI reads it
    res = hp.pca(nan, components=3)
    assert np.isnan(res[:, 3:9, 4:11]).all() and np.isnan(res.nodata)
    np.testing.assert_array_equal(res[:, res.mask], want[:, res.mask])


@pytest.mark.parametrize("shape", [(8, 16, 16), (8, 96, 96)])  # scanned by one thread, by all
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["bsq", "bip"])
def test_nonfinite_values_are_invalid(hp, shape, dtype, layout):
    rng = np.random.default_rng(3)
    nb, h, w = shape
    data = rng.random((h, w, nb)).astype(dtype)  # pixel-interleaved memory
    cube = np.ascontiguousarray(data.transpose(2, 0, 1)) if layout == "bsq" else \
        data.transpose(2, 0, 1)
    bad = [(0, 0, 0, np.nan), (nb - 1, h - 1, w - 1, np.inf), (nb // 2, h // 2, 3, -np.inf)]
    valid = np.ones((h, w), bool)
    for b, y, x, v in bad:
        cube[b, y, x] = v
        valid[y, x] = False
    res = hp.pca(cube, components=2, backend="cpu")
    np.testing.assert_array_equal(res.mask, valid)
    assert np.isnan(res[:, ~valid]).all() and np.isfinite(res[:, valid]).all()


def test_call_binding_errors(hp):
    cube = np.ones((3, 4, 4), np.float32)
    with pytest.raises(TypeError, match=r"hyprof.pca\(\): too many positional arguments"):
        hp.pca(cube, 3)
    with pytest.raises(TypeError, match=r"hyprof.pca\(\): missing a required argument: 'cube'"):
        hp.pca()
    with pytest.raises(TypeError, match=r"hyprof.pca\(\):.*'cube'"):
        hp.pca(cube=cube)


def test_signatures_follow_the_registry(hp, hyprof_exe):
    desc = json.loads(run_ok("describe", "--json").stdout)
    import inspect
    for op in desc["operations"]:
        if not hp.OPERATIONS[op["name"]].runnable:
            continue
        fn = getattr(hp, op["name"])
        sig = inspect.signature(fn)
        for p in op["params"]:
            name = p["name"].replace("-", "_")
            assert name in sig.parameters, (op["name"], name)
            default = sig.parameters[name].default
            want = p.get("default")
            if isinstance(want, str) and p["type"] in ("int_list", "float_list"):
                want = [float(x) for x in want.split(",")]
                default = [float(x) for x in default]
            assert default == want, (op["name"], name, default, want)
            assert " ".join(p["help"].split()[:6]) in " ".join(fn.__doc__.split()), name


def test_bad_arguments_name_the_parameter(hp, crops):
    cube = read_cube(crops["ip"], np.float32)
    with pytest.raises(ValueError, match="'components' 0: must be between 1 and") as e:
        hp.eadp(cube, components=0)
    assert isinstance(e.value, hp.ArgumentError) and e.value.status_name == "ARGUMENT"
    with pytest.raises(ValueError, match="'contrast_percentile'"):
        hp.eadp(cube, contrast_percentile=1.5)
    with pytest.raises(ValueError, match="'wavelet'.*'morlet'"):
        hp.dwt(cube, wavelet="morlet")
    with pytest.raises(ValueError, match="radii"):
        hp.emp(cube, radii=[3, 1])
    with pytest.raises(TypeError, match="'components' must be an integer"):
        hp.pca(cube, components=2.5)
    with pytest.raises(TypeError, match="'radii' must be a list"):
        hp.emp(cube, radii=["a"])
    with pytest.raises(TypeError, match="unexpected keyword argument 'componets'"):
        hp.pca(cube, componets=3)
    with pytest.raises(ValueError, match="'backend'"):
        hp.pca(cube, backend="gpu")
    with pytest.raises(TypeError, match="real numbers"):
        hp.pca(cube.astype(np.complex64))
    with pytest.raises(ValueError, match="shape"):
        hp.pca(cube[0, 0])
    with pytest.raises(hp.ArgumentError):  # unknown grid items, through the registry too
        hp.train(cube, np.ones(cube.shape[1:]), grid="C=1,beta=2")


def test_library_errors_raise_error_subclasses(hp, crops, tmp_path):
    cube = read_cube(crops["ip"], np.float32)
    with pytest.raises(hp.InputError, match="no valid pixel") as e:
        hp.pca(np.full((4, 6, 6), np.nan, np.float32))
    assert e.value.status == 2 and isinstance(e.value, hp.Error)
    with pytest.raises(hp.ArgumentError, match="components 300 .*bands"):
        hp.pca(cube, components=300)
    with pytest.raises(hp.Error) as e:
        hp.Model.load(tmp_path / "missing.model")
    assert e.value.status_name in ("IO", "FORMAT") and "missing.model" in str(e.value)
    (tmp_path / "bad.model").write_text("not a model\n")
    with pytest.raises(hp.Error, match="bad.model"):
        hp.Model.load(tmp_path / "bad.model")
    if hp.cuda_device_count() == 0:
        with pytest.raises(hp.NoDevice):
            hp.pca(cube, backend="cuda")


def test_progress_callback_cancels(hp, crops):
    cube = read_cube(crops["ip"], np.float32)
    seen = []

    def progress(fraction, stage):
        seen.append((fraction, stage))
        return len(seen) >= 2

    with pytest.raises(hp.Cancelled, match="cancel") as e:
        hp.eadp(cube, components=3, count=3, progress=progress)
    assert e.value.status_name == "CANCELLED" and len(seen) == 2
    assert all(0.0 <= f <= 1.0 and isinstance(s, str) and s for f, s in seen)
    # a callback that raises stops the operation and its exception comes out
    with pytest.raises(ZeroDivisionError):
        hp.eadp(cube, components=3, count=3, progress=lambda f, s: 1 / 0)
    # and a complete run reports up to the end
    seen.clear()
    hp.eadp(cube, components=3, count=3, progress=lambda f, s: seen.append(f) and False)
    assert seen and seen == sorted(seen) and seen[-1] <= 1.0


def test_ctrl_c_cancels_the_running_operation(hp, crops):
    cube = read_cube(crops["ip"], np.float32)
    calls = []
    taken = threading.Event()

    def on_sigint(signum, frame):  # Python's own handler, and a mark that it ran
        taken.set()
        signal.default_int_handler(signum, frame)

    def interrupt(fraction, stage):  # Ctrl-C as the operation runs
        calls.append((fraction, stage, threading.current_thread().name))
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
            # The operation waits here until the main thread has taken the
            # signal, and a moment more for it to cancel the operation: on
            # this small crop it would otherwise finish before a loaded
            # machine schedules the main thread.
            taken.wait(30)
            time.sleep(0.5)
        return False

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            hp.eadp(cube, components=3, count=6, progress=interrupt)
    finally:
        signal.signal(signal.SIGINT, old)
    assert taken.is_set(), "the main thread did not take SIGINT while the operation waited"
    # cancelled at the next progress point, not run to the end
    assert calls[-1][0] < 1.0, calls
    assert hp.pca(cube, components=2).shape == (2, 40, 48)  # the package still works


def test_ctrl_c_delivered_to_a_library_thread(hp, crops):
    """The kernel may hand a process's SIGINT to any thread that does not block
    it, here the library's own: nothing then wakes the main thread's wait, and
    the call must still be interrupted and cancelled, not run to its end."""
    cube = read_cube(crops["ip"], np.float32)
    calls = []
    taken = threading.Event()

    def on_sigint(signum, frame):
        taken.set()
        signal.default_int_handler(signum, frame)

    def interrupt(fraction, stage):
        calls.append(fraction)
        if len(calls) == 1:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            taken.wait(30)
            time.sleep(0.5)
        return False

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            hp.eadp(cube, components=3, count=6, progress=interrupt)
    finally:
        signal.signal(signal.SIGINT, old)
    assert taken.is_set()
    assert calls[-1] < 1.0, calls
    assert hp.pca(cube, components=2).shape == (2, 40, 48)


def test_ctrl_c_while_the_call_is_handed_over(hp, crops, monkeypatch):
    """KeyboardInterrupt can come at any bytecode of the main thread, also
    inside submit() after the operation was queued and has started: the call
    must still cancel it and return only once it stopped (it would otherwise
    run on, on a context and arrays the caller frees)."""
    import hyprof._run as run
    cube = read_cube(crops["ip"], np.float32)
    calls = []
    first = threading.Event()

    def progress(fraction, stage):
        calls.append(fraction)
        first.set()
        time.sleep(0.01)
        return False

    class InterruptedSubmit:
        def submit(self, fn, *args):
            fut = real.submit(fn, *args)
            first.wait(30)
            raise KeyboardInterrupt

    real = run._main_executor()
    monkeypatch.setattr(run, "_main_executor", lambda: InterruptedSubmit())
    with pytest.raises(KeyboardInterrupt):
        hp.eadp(cube, components=3, count=6, progress=progress)
    seen = len(calls)
    monkeypatch.undo()
    time.sleep(0.3)
    assert len(calls) == seen, "the operation ran on after the call returned"
    assert calls[-1] < 1.0, calls
    assert hp.pca(cube, components=2).shape == (2, 40, 48)


def test_ctrl_c_without_a_progress_callback(hp):
    """No Python code runs during the call: Ctrl-C still stops it within a
    progress point (the whole run takes minutes on one thread)."""
    cube = gdal.Open(str(INDIAN_PINES)).ReadAsArray()
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            hp.eadp(cube, components=1, count=3000, step=500, threads=1, backend="cpu")
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 15


@contextlib.contextmanager
def rasterio_leaks_ignored():
    """rasterio leaves a GDAL allocation at exit (168 bytes from VSICalloc per
    opened file, through frames LeakSanitizer's fast unwinder cannot walk up to
    Python, so the suppressions of scripts/test.sh miss it): under ASan, what
    rasterio allocates here is not leak-checked. hyprof's calls stay outside."""
    lsan = None
    if os.environ.get("HYPROF_UNDER_ASAN") == "1":
        lsan = ctypes.CDLL(None)
        lsan.__lsan_disable()
    try:
        yield
    finally:
        if lsan is not None:
            lsan.__lsan_enable()


def test_xarray_keeps_coordinates_attributes_and_crs(hp, crops, tmp_path):
    with rasterio_leaks_ignored():
        import rioxarray
        da = rioxarray.open_rasterio(crops["ip"])
    import xarray as xr
    hx = importlib.import_module("hyprof.xarray")
    da.attrs["note"] = "kept"
    out = hx.eadp(da, components=2, count=2, backend="cpu")
    cli = tmp_path / "eadp.tif"
    run_ok("eadp", "--components", "2", "--count", "2", "--backend", "cpu", "--progress",
           "none", crops["ip"], cli)
    want, names = raster(cli)
    assert isinstance(out, xr.DataArray) and out.dims == ("band", "y", "x")
    assert list(out.coords["band"].values) == names
    np.testing.assert_array_equal(out.values, want)
    np.testing.assert_array_equal(out.x.values, da.x.values)
    np.testing.assert_array_equal(out.y.values, da.y.values)
    assert "spatial_ref" in out.coords and out.rio.crs == da.rio.crs
    assert out.rio.transform() == da.rio.transform()
    assert out.attrs["note"] == "kept" and list(out.attrs["long_name"]) == names
    # written by rioxarray: the CLI's band names, georeference and NaN nodata
    written = tmp_path / "xr.tif"
    with rasterio_leaks_ignored():
        out.rio.to_raster(written)
    back, back_names = raster(written)
    assert back_names == names
    np.testing.assert_array_equal(back, want)
    ds = gdal.Open(str(written))
    assert ds.GetGeoTransform() == gdal.Open(str(cli)).GetGeoTransform()
    assert np.isnan(ds.GetRasterBand(1).GetNoDataValue())


def legend(path):
    ds = gdal.Open(str(path))  # kept: a band outlives its dataset only in C
    band = ds.GetRasterBand(1)
    band.GetDescription()  # GTiff reads the .aux.xml categories only after this (GDAL 3.6)
    names = band.GetCategoryNames() or []
    ct = band.GetColorTable()
    used = np.unique(band.ReadAsArray())
    colors = {int(v): ct.GetColorEntry(int(v)) for v in used if v > 0} if ct else None
    return {i: n for i, n in enumerate(names) if i > 0 and n}, colors


def test_train_predict_save_load_equal_cli(hp, tmp_path):
    feat_path, model_cli = tmp_path / "feat.tif", tmp_path / "cli.model"
    train_lab, test_lab = SAMPLES / "indian_pines_train.tif", SAMPLES / "indian_pines_test.tif"
    run_ok("pca", "--components", "6", "--backend", "cpu", "--progress", "none",
           INDIAN_PINES, feat_path)
    run_ok("train", "--labels", train_lab, "--grid", "C=16,gamma=0.5", "--progress", "none",
           feat_path, model_cli)
    cls_cli = tmp_path / "cli_classes.tif"
    run_ok("classify", "--model", model_cli, "--progress", "none", feat_path, cls_cli)
    want = gdal.Open(str(cls_cli)).ReadAsArray()
    report = json.loads(run_ok("assess", "--reference", test_lab, "--json", cls_cli).stdout)

    feat = hp.pca(gdal.Open(str(INDIAN_PINES)).ReadAsArray(), components=6, backend="cpu")
    names, colors = legend(train_lab)
    model = hp.train(feat, gdal.Open(str(train_lab)).ReadAsArray(), grid="C=16,gamma=0.5",
                     class_names=names, colors=colors)
    assert model.band_names == feat.band_names and model.kind == "svm"
    assert model.report["C"] == 16 and model.report["gamma"] == 0.5
    got = model.predict(feat)
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, want)
    # saved here, classified by the CLI; saved by the CLI, loaded here
    model_py = tmp_path / "py.model"
    model.save(model_py)
    assert model_py.read_text() == model_cli.read_text()
    cls_py = tmp_path / "py_classes.tif"
    run_ok("classify", "--model", model_py, "--progress", "none", feat_path, cls_py)
    np.testing.assert_array_equal(gdal.Open(str(cls_py)).ReadAsArray(), want)
    loaded = hp.load_model(model_cli)
    assert loaded.classes == model.classes and loaded.class_names == model.class_names
    cmap, scores = loaded.predict(feat, scores=True)
    np.testing.assert_array_equal(cmap, want)
    assert scores.shape == (len(loaded.classes),) + want.shape
    assert scores.band_names == loaded.class_names
    # accuracy: the numbers of `hyprof assess --json`
    a = hp.assess(got, gdal.Open(str(test_lab)).ReadAsArray())
    d = a.to_dict()
    for k in ("pixels", "oa", "aa", "kappa", "confusion", "unclassified"):
        assert d[k] == report[k], k
    assert [c["value"] for c in d["classes"]] == [c["value"] for c in report["classes"]]
    assert [c["producer"] for c in d["classes"]] == [c["producer"] for c in report["classes"]]


def test_split_equals_the_sample_split(hp):
    gt = gdal.Open(str(SAMPLES / "indian_pines_gt.tif")).ReadAsArray()
    train, test = hp.split(gt, preset="eadp-table1", seed=1992)
    np.testing.assert_array_equal(train, gdal.Open(str(SAMPLES / "indian_pines_train.tif"))
                                  .ReadAsArray())
    np.testing.assert_array_equal(test, gdal.Open(str(SAMPLES / "indian_pines_test.tif"))
                                  .ReadAsArray())
    with pytest.raises(ValueError, match="one of"):
        hp.split(gt)


def test_install_rule_gives_an_importable_package(tmp_path):
    """`cmake --install BUILD --component python` (what scripts/setup.sh runs):
    the package with the library inside it, importable with no variable set."""
    build = Path(exe_path()).parent.parent
    if not (build / "CMakeCache.txt").is_file():
        pytest.fail("no CMake build folder at %s" % build)
    env = dict(os.environ, DESTDIR=str(tmp_path))
    subprocess.run(["cmake", "--install", str(build), "--component", "python"], env=env,
                   check=True, capture_output=True, text=True)
    inits = list(tmp_path.rglob("hyprof/__init__.py"))
    assert len(inits) == 1
    pkg = inits[0].parent
    assert (pkg / "libhyprof.so").is_file() and (pkg / "xarray.py").is_file()
    env = {k: v for k, v in os.environ.items() if k != "HYPROF_LIBRARY"}
    env["PYTHONPATH"] = str(pkg.parent)
    r = subprocess.run([sys.executable, "-c", "import hyprof; print(hyprof.library_path); "
                        "print(hyprof.pca.__name__)"], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(pkg / "libhyprof.so"), "pca"]


@pytest.mark.parametrize("first,given,want", [
    ("", None, "PASSIVE"),          # the package's default, as the executable's
    ("", "ACTIVE", "ACTIVE"),       # the user's choice stays
    ("import sklearn.utils._openmp_helpers; ", None, None),  # libgomp already loaded
], ids=["default", "user-set", "libgomp-loaded"])
def test_openmp_threads_sleep_at_barriers(first, given, want):
    """`import hyprof` sets OMP_WAIT_POLICY=PASSIVE before libgomp loads (idle
    OpenMP threads then sleep instead of spinning against the next team or
    process), unless the user chose a policy or libgomp is already loaded."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(HYPROF_LIBRARY=library_path(), PYTHONPATH=str(ROOT / "python"))
    if given:
        env["OMP_WAIT_POLICY"] = given
    code = first + "import os, hyprof; print(os.environ.get('OMP_WAIT_POLICY'))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(want)]
