"""hyprof.dask on a LocalCluster (2 worker processes, 1 thread each; every
server of it, HTTP ones included, listening on 127.0.0.1 only: checked)
gives the single-machine results.

A 48x40 crop of Indian Pines with NaN pixels in every block, cut into 4 row
blocks: pca's fit within 1e-10 relative of the library's and its
projection bit for bit given the fitted model; eadp, eap, emp and wmcd bit
for bit (PCA features: against the single call on the projection by the
fitted model, and the single call itself equals that decomposition), band
names and metadata equal; dwt, classify and unmix bit for bit; a
Dask-backed rioxarray cube keeps its coordinates and CRS; bad arguments
fail on the client; a feature band over the workers' memory limit is a
MemoryError before anything is sent; map_files on three scenes, one
unreadable (its error reported, the others written with their CRS, no
temporary left); python3 -m hyprof against the cluster's scheduler.

Run: /usr/bin/python3 -m pytest -q tests/test_dask.py (about 35 s on 2
cores; under ASan too).
"""

import contextlib
import ctypes
import importlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from osgeo import gdal

from conftest import INDIAN_PINES, ROOT, exe_path

distributed = pytest.importorskip("distributed")
pytest.importorskip("rioxarray")

ROWS = 10  # rows per block: 4 blocks of the 40-row crop
PROFILES = {
    "eadp": dict(components=3, count=3, step=40),
    "eap": dict(features=3, attribute="area,std"),
    "emp": dict(radii=[1, 2, 4]),
    "wmcd": dict(radii=[1, 3]),
}


def library_path():
    env = os.environ.get("HYPROF_LIBRARY")
    if env:
        return env
    lib = Path(exe_path()).parent.parent / "libhyprof.so"
    return str(lib if lib.is_file() else ROOT / "build" / "libhyprof.so")


@contextlib.contextmanager
def leaks_unchecked():
    """Under ASan, what rasterio allocates in this process is not leak-checked
    (see test_python.py's rasterio_leaks_ignored)."""
    lsan = ctypes.CDLL(None) if os.environ.get("HYPROF_UNDER_ASAN") == "1" else None
    if lsan is not None:
        lsan.__lsan_disable()
    try:
        yield
    finally:
        if lsan is not None:
            lsan.__lsan_enable()


@pytest.fixture(scope="module")
def env():
    """hyprof and hyprof.dask from python/ over this build's library; the
    worker processes get the same path and library through the environment."""
    saved_mods = {k: v for k, v in sys.modules.items() if k == "hyprof" or k.startswith("hyprof.")}
    for k in saved_mods:
        del sys.modules[k]
    saved_env = {k: os.environ.get(k) for k in ("HYPROF_LIBRARY", "PYTHONPATH")}
    os.environ["HYPROF_LIBRARY"] = library_path()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python")] + ([saved_env["PYTHONPATH"]] if saved_env["PYTHONPATH"] else []))
    sys.path.insert(0, str(ROOT / "python"))
    try:
        hp = importlib.import_module("hyprof")
        hd = importlib.import_module("hyprof.dask")
        assert Path(hp.__file__).parent == ROOT / "python" / "hyprof"
        yield hp, hd
    finally:
        sys.path.remove(str(ROOT / "python"))
        for k in [k for k in sys.modules if k == "hyprof" or k.startswith("hyprof.")]:
            del sys.modules[k]
        sys.modules.update(saved_mods)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def client(env):
    hp, hd = env
    cluster = hd.local_cluster(n_workers=2, threads_per_worker=1)
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.fixture(scope="module")
def cube():
    ds = gdal.Translate("/vsimem/dask_ip.tif", str(INDIAN_PINES), srcWin=[20, 30, 48, 40])
    a = ds.ReadAsArray().astype(np.float32)
    gdal.Unlink("/vsimem/dask_ip.tif")
    for r, c in ((0, 0), (12, 5), (25, 40), (39, 47), (31, 3)):  # nodata in every block
        a[r % 7, r, c] = np.nan
    return a


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.array_equal(a, b, equal_nan=True), "max difference %g" % np.nanmax(np.abs(a - b))


def meta(da):
    return {k[7:]: v for k, v in da.attrs.items()
            if k.startswith("hyprof_") and k not in ("hyprof_operation", "hyprof_pca_model")}


def read_model(path):
    """A PCA model file as {key: values}."""
    out = {}
    for line in Path(path).read_text().splitlines():
        words = line.split()
        n = 2 if words[0] == "component" else 1
        vals = words[n:]
        out[" ".join(words[:n])] = vals if words[0] == "hyprof-pca-model" else \
            np.array([float(v) for v in vals])
    return out


def test_pca_fit_and_projection(env, client, cube, tmp_path):
    hp, hd = env
    r = hd.pca(cube, components=4, client=client, row_block=ROWS)
    assert r.data.numblocks[1] == 4
    (tmp_path / "d.pca").write_text(r.attrs["hyprof_pca_model"])
    single = hp.pca(cube, components=4, save_model=tmp_path / "s.pca")
    got, want = read_model(tmp_path / "d.pca"), read_model(tmp_path / "s.pca")
    assert got.keys() == want.keys()
    for k in want:
        if k != "hyprof-pca-model":
            scale = np.abs(want[k]).max() or 1.0
            assert np.abs(got[k] - want[k]).max() <= 1e-10 * scale, k
    same(r.values, hp.pca(cube, model=tmp_path / "d.pca"))
    assert list(r.band.values) == single.band_names


@pytest.mark.parametrize("op", sorted(PROFILES))
def test_profiles(env, client, cube, tmp_path, op):
    hp, hd = env
    kw = PROFILES[op]
    r = getattr(hd, op)(cube, client=client, row_block=ROWS, **kw)
    single = getattr(hp, op)(cube, **kw)
    if "hyprof_pca_model" in r.attrs:  # same fitted statistics: the projection by its model
        (tmp_path / "m.pca").write_text(r.attrs["hyprof_pca_model"])
        rest = {k: v for k, v in kw.items() if k != "components"}
        want = getattr(hp, op)(hp.pca(cube, model=tmp_path / "m.pca"), reduction="none", **rest)
        # and the single call is that decomposition with its own PCA
        same(single, getattr(hp, op)(hp.pca(cube, components=kw["components"]),
                                     reduction="none", **rest))
    else:
        want = single
    same(r.values, want)
    assert list(r.band.values) == single.band_names
    assert meta(r) == single.metadata


def test_dwt_rows(env, client, cube):
    hp, hd = env
    r = hd.dwt(cube, levels=3, wavelet="db2", client=client, row_block=ROWS)
    same(r.values, hp.dwt(cube, levels=3, wavelet="db2"))


def test_unmix(env, client, cube, tmp_path):
    hp, hd = env
    r = hd.unmix(cube, endmembers=3, client=client, row_block=ROWS,
                 endmembers_csv=tmp_path / "d.csv")
    single = hp.unmix(cube, endmembers=3, endmembers_csv=tmp_path / "s.csv")
    same(r.values, single)
    assert list(r.band.values) == single.band_names
    assert (tmp_path / "d.csv").read_bytes() == (tmp_path / "s.csv").read_bytes()
    drop = ("UNMIX_SECONDS", "UNMIX_EXTRACT_SECONDS")
    assert {k: v for k, v in meta(r).items() if k not in drop} == \
        {k: v for k, v in single.metadata.items() if k not in drop}


def test_classify(env, client, cube, tmp_path):
    hp, hd = env
    feats = hp.pca(cube, components=4)
    labels = np.zeros(cube.shape[1:], np.uint16)
    labels[2:8, 2:8], labels[30:36, 30:40], labels[15:20, 20:30] = 1, 2, 3
    model = hp.train(feats, labels, grid="C=100,gamma=0.5")
    r = hd.classify(feats, model, client=client, row_block=ROWS)
    want = model.predict(feats)
    same(r.values, want)
    model.save(tmp_path / "m.model")
    same(hd.classify(feats, tmp_path / "m.model", client=client, row_block=7).values, want)


def test_xarray_dask_backed(env, client, tmp_path):
    hp, hd = env
    import rioxarray
    src = tmp_path / "ip.tif"
    gdal.Translate(str(src), str(INDIAN_PINES), srcWin=[0, 0, 40, 32])
    with leaks_unchecked():
        cube = rioxarray.open_rasterio(src, chunks={"y": 8})
        r = hd.emp(cube, radii=[1, 2], client=client)
        values = r.values
        assert r.rio.crs == cube.rio.crs
        assert r.rio.transform() == cube.rio.transform()
        single = hp.emp(cube.values, radii=[1, 2])
    same(values, single)
    np.testing.assert_array_equal(r.x.values, cube.x.values)
    np.testing.assert_array_equal(r.y.values, cube.y.values)
    assert list(r.band.values) == single.band_names


def test_bad_arguments_fail_on_the_client(env, client, cube):
    hp, hd = env
    with pytest.raises(ValueError, match="components"):
        hd.eadp(cube, components=0, client=client)
    with pytest.raises(ValueError, match="not an operation"):
        hd.run("train", cube, client=client)
    with pytest.raises(TypeError):
        hd.eadp("cube.tif", client=client)
    with pytest.raises(TypeError, match="'mask'.*nodata"):
        hd.emp(cube, mask=np.ones(cube.shape[1:], bool), client=client)


def test_map_files(env, client, tmp_path):
    hp, hd = env
    import hyprof.xarray as hx
    import rioxarray
    scenes = []
    for i, win in enumerate(([0, 0, 36, 30], [50, 40, 30, 36])):
        p = tmp_path / ("scene%d.tif" % i)
        gdal.Translate(str(p), str(INDIAN_PINES), srcWin=win)
        scenes.append(p)
    bad = tmp_path / "broken.tif"
    bad.write_bytes(b"not a raster")
    out = tmp_path / "out"
    res = hd.map_files("emp", [scenes[0], bad, scenes[1]], out, client=client, radii=[1, 2])
    assert [r.ok for r in res] == [True, False, True]
    assert "broken.tif" in res[1].error
    assert not (out / "broken_emp.tif").exists()
    assert sorted(os.listdir(out)) == ["scene0_emp.tif", "scene1_emp.tif"]
    for scene, r in zip(scenes, (res[0], res[2])):
        with leaks_unchecked():
            want = hx.emp(rioxarray.open_rasterio(scene), radii=[1, 2])
        ds, src = gdal.Open(r.output), gdal.Open(str(scene))
        assert ds.GetSpatialRef().IsSame(src.GetSpatialRef())
        assert ds.GetGeoTransform() == src.GetGeoTransform()
        same(ds.ReadAsArray(), want.values)
        assert [ds.GetRasterBand(b + 1).GetDescription() for b in range(ds.RasterCount)] == \
            list(want.band.values)
    again = hd.map_files("emp", [scenes[0]], [out / "scene0_emp.tif"], client=client)
    assert not again[0].ok and "exists" in again[0].error


def test_map_files_never_replaces_a_file_written_meanwhile(env, tmp_path, monkeypatch):
    """A scene's output that another program creates after the early check
    (simulated: the check says nothing is there) is not replaced without
    overwrite: the scene fails with "exists", the file keeps its bytes and no
    temporary is left; with overwrite it is replaced."""
    hp, hd = env
    import hyprof.dask_files as files
    scene = tmp_path / "scene.tif"
    gdal.Translate(str(scene), str(INDIAN_PINES), srcWin=[0, 0, 20, 16])
    out = tmp_path / "out"
    out.mkdir()
    dst = out / "scene_emp.tif"
    dst.write_bytes(b"written by another program")
    monkeypatch.setattr(files, "_exists", lambda path: False)
    with leaks_unchecked():
        r = files._scene("emp", str(scene), str(dst), {"radii": [1]}, False)
    assert not r.ok and "exists" in r.error, r
    assert dst.read_bytes() == b"written by another program"
    assert sorted(os.listdir(out)) == ["scene_emp.tif"]
    with leaks_unchecked():
        r = files._scene("emp", str(scene), str(dst), {"radii": [1]}, True)
    assert r.ok, r.error
    assert gdal.Open(str(dst)).RasterCount == 12  # 4 features x (1 + 2 x 1 radius)
    assert sorted(os.listdir(out)) == ["scene_emp.tif"]


def test_cluster_listens_on_loopback_only(env, client):
    psutil = pytest.importorskip("psutil")
    pids = [os.getpid()] + list(client.run(os.getpid).values())
    pids += [p.pid for w in pids[1:] for p in psutil.Process(w).parents()[:1]]  # the nannies
    listening = [(pid, c.laddr) for pid in set(pids)
                 for c in psutil.Process(pid).connections(kind="inet") if c.status == "LISTEN"]
    assert len(listening) >= 3  # the scheduler and two workers at least
    assert all(addr.ip == "127.0.0.1" for _, addr in listening), listening


def test_band_over_the_worker_memory_is_a_clear_error(env, client):
    hp, hd = env
    import dask.array as da
    limit = min(w["memory_limit"] for w in client.scheduler_info()["workers"].values())
    side = int((limit / 4 / 5) ** 0.5) + 1  # a band and its 9 planes: 44 side^2 bytes > limit
    big = da.zeros((2, side, side), np.float32, chunks=(2, 512, side))  # never computed
    with pytest.raises(MemoryError, match="%dx%d pixels and its 9 planes" % (side, side)):
        hd.eadp(big, reduction="none", count=8, step=10, client=client)


def test_command_line_front_end(env, client, tmp_path):
    import subprocess
    src = tmp_path / "in.tif"
    gdal.Translate(str(src), str(INDIAN_PINES), srcWin=[10, 10, 30, 24])
    cmd = [sys.executable, "-m", "hyprof", "emp", "--scheduler", client.scheduler.address,
           "--radii", "1,2", str(src), str(tmp_path / "out.tif")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    hp, hd = env
    same(gdal.Open(str(tmp_path / "out.tif")).ReadAsArray(),
         hp.emp(gdal.Open(str(src)).ReadAsArray(), radii=[1, 2]))
    bad = subprocess.run(cmd[:6] + ["--radii", "x", str(src), str(tmp_path / "o2.tif")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--radii" in bad.stderr
    missing = subprocess.run(cmd[:8] + [str(tmp_path / "nope.tif"), str(tmp_path / "o3.tif")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "nope.tif" in missing.stderr
    assert not (tmp_path / "o3.tif").exists()
