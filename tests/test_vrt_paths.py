"""Paths inside VRTs and .hyprof descriptors resolve against the file that names
them (GDAL's relativeToVRT convention), so the samples open from any working
directory; and a block that cannot be computed fails the read.

Oracles: the `hyprof` executable's output for the same operation (bit for bit),
and the programs' exit codes and messages.

Run: /usr/bin/python3 -m pytest tests/test_vrt_paths.py
"""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, SAMPLES, SAMSON, INDIAN_PINES, gdal, gdal_env, load_gdal_plugin, run_ok

PCA_MODEL = SAMPLES / "samson.pca"
SVM_MODEL = SAMPLES / "indian_pines_svm.model"


@pytest.fixture(scope="module", autouse=True)
def plugin_loaded():
    load_gdal_plugin()
    yield


def program(*args, cwd):
    env = gdal_env()
    env.pop("HYPROF_MODEL_PATH", None)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env,
                          cwd=str(cwd), timeout=300)


def array(path):
    ds = gdal.Open(str(path))
    a = ds.ReadAsArray()
    return a[None] if a.ndim == 2 else a


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), \
        "%d values differ" % np.count_nonzero(a != b)


@pytest.fixture
def places(tmp_path):
    """A copy of samples/ (gdalinfo -stats writes statistics into a .vrt) and
    another folder to run the programs from."""
    copy = tmp_path / "data" / "samples"
    shutil.copytree(SAMPLES, copy)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return copy, elsewhere


def sample_names():
    return sorted(p.name for p in SAMPLES.iterdir() if p.suffix in (".vrt", ".hyprof"))


@pytest.mark.parametrize("name", sample_names())
def test_sample_opens_and_computes_from_another_folder(name, places):
    """gdalinfo -stats on every sample VRT and descriptor, run from a folder
    that is not its own: statistics for every band and no error."""
    copy, elsewhere = places
    rel = os.path.relpath(copy / name, elsewhere)
    r = program("gdalinfo", "-stats", rel, cwd=elsewhere)
    assert r.returncode == 0 and "ERROR" not in r.stderr, r.stderr
    bands = r.stdout.count("\nBand ")
    assert bands > 0 and r.stdout.count("STATISTICS_MEAN=") == bands, r.stdout[-2000:]


def test_sample_classmap_and_pca_equal_cli_from_another_folder(places, tmp_path):
    copy, elsewhere = places
    profile = tmp_path / "eadp.tif"
    run_ok("eadp", "--backend", "cpu", "--components", "3", "--count", "4", INDIAN_PINES,
           profile)
    ref = tmp_path / "map.tif"
    run_ok("classify", "--backend", "cpu", "--model", SVM_MODEL, profile, ref)
    r = program("gdal_translate", "-q", "../data/samples/classmap.vrt", "map.tif",
                cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    out = gdal.Open(str(elsewhere / "map.tif"))
    same(out.ReadAsArray(), array(ref)[0])
    assert out.GetRasterBand(1).GetColorTable() is not None
    assert out.GetRasterBand(1).GetCategoryNames()[1] == "Alfalfa"
    vrt = gdal.Open(str(copy / "classmap.vrt"))
    assert vrt.GetRasterBand(1).GetColorTable().GetCount() == 17  # 0 and the 16 classes

    ref = tmp_path / "pca.tif"
    run_ok("pca", "--backend", "cpu", "--model", PCA_MODEL, SAMSON, ref)
    r = program("gdal_translate", "-q", "../data/samples/pca.vrt", "pca.tif", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    same(array(elsewhere / "pca.tif"), array(ref))


def pca_source_vrt(path, source, relative):
    path.write_text(
        '<VRTDataset rasterXSize="95" rasterYSize="95"><VRTRasterBand dataType="Float32" '
        'band="1"><SimpleSource><SourceFilename relativeToVRT="%d">%s</SourceFilename>'
        "<SourceBand>2</SourceBand></SimpleSource></VRTRasterBand></VRTDataset>"
        % (relative, source))
    return path


def test_connection_string_relative_to_vrt(tmp_path):
    """relativeToVRT="1": GDAL puts the VRT's folder in front of the connection
    string and the driver takes its files from there; relativeToVRT="0": from
    the current folder, as GDAL does for any file."""
    ref = tmp_path / "cli.tif"
    run_ok("pca", "--backend", "cpu", "--model", PCA_MODEL, SAMSON, ref)
    want = array(ref)[1]
    sub = tmp_path / "project"
    sub.mkdir()
    shutil.copy(PCA_MODEL, sub / "m.pca")
    (sub / "scene.tif").symlink_to(SAMSON)
    conn = "HYPROF:pca:model=m.pca:scene.tif"
    pca_source_vrt(sub / "rel.vrt", conn, 1)
    pca_source_vrt(sub / "cwd.vrt", conn, 0)
    for cwd, name in ((tmp_path, "project/rel.vrt"), (ROOT, sub / "rel.vrt"),
                      (sub, "cwd.vrt")):
        r = program("gdal_translate", "-q", name, tmp_path / "out.tif", cwd=cwd)
        assert r.returncode == 0, r.stderr
        same(array(tmp_path / "out.tif")[0], want)
        (tmp_path / "out.tif").unlink()
    # relativeToVRT="0" from another folder: the names are the current folder's
    r = program("gdal_translate", "-q", sub / "cwd.vrt", tmp_path / "out.tif", cwd=tmp_path)
    assert "'%s' does not exist" % (tmp_path / "scene.tif") in r.stderr, r.stderr


def test_descriptor_names_connection_and_descriptor_relative_to_itself(tmp_path):
    """A descriptor's input may be a connection string or another descriptor:
    their names are taken from the descriptor's folder too."""
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    shutil.copy(PCA_MODEL, sub / "m.pca")
    (sub / "scene.tif").symlink_to(SAMSON)
    (sub / "pca.hyprof").write_text(
        '{"operation": "pca", "input": "scene.tif", "parameters": {"model": "m.pca"}}')
    (sub / "dwt_of_pca.hyprof").write_text(
        '{"operation": "dwt", "input": "pca.hyprof", "parameters": {"levels": 1}}')
    (sub / "dwt_of_conn.hyprof").write_text(
        '{"operation": "dwt", "input": "HYPROF:pca:model=m.pca:scene.tif", '
        '"parameters": {"levels": 1}}')
    pca = tmp_path / "pca.tif"
    run_ok("pca", "--backend", "cpu", "--model", PCA_MODEL, SAMSON, pca)
    ref = tmp_path / "dwt.tif"
    run_ok("dwt", "--backend", "cpu", "--levels", "1", pca, ref)
    for name in ("dwt_of_pca.hyprof", "dwt_of_conn.hyprof"):
        r = program("gdal_translate", "-q", "a/b/" + name, "out.tif", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        same(array(tmp_path / "out.tif"), array(ref))
        (tmp_path / "out.tif").unlink()


def test_classify_through_the_driver(tmp_path):
    """HYPROF:classify equals hyprof classify; a model that does not fit the
    input fails at open, naming both."""
    profile = tmp_path / "eadp.tif"
    run_ok("eadp", "--backend", "cpu", "--components", "3", "--count", "4", INDIAN_PINES,
           profile)
    ref = tmp_path / "map.tif"
    run_ok("classify", "--backend", "cpu", "--model", SVM_MODEL, profile, ref)
    ds = gdal.Open("HYPROF:classify:model=%s:%s" % (SVM_MODEL, profile))
    assert ds.RasterCount == 1 and ds.GetRasterBand(1).GetNoDataValue() == 0
    same(ds.ReadAsArray(), array(ref)[0].astype(np.float32))
    r = program("gdalinfo", "HYPROF:classify:model=%s:%s" % (SVM_MODEL, SAMSON), cwd=tmp_path)
    assert r.returncode != 0
    assert "trained on 15 bands" in r.stderr and "has 156" in r.stderr, r.stderr
    r = program("gdalinfo", "HYPROF:classify::%s" % SAMSON, cwd=tmp_path)
    assert r.returncode != 0 and "'model' is missing" in r.stderr, r.stderr


def test_failed_block_read_fails_the_programs(tmp_path):
    """A result that cannot be computed (sspp with more endmembers than the
    data allows: known only when computing) fails every read: gdal_translate
    exits 1 with the reason and leaves no output; gdalinfo -stats prints the
    reason and no statistics (GDAL's gdalinfo exits 0 once a dataset opened,
    whatever its reads gave)."""
    (tmp_path / "scene.tif").symlink_to(SAMSON)
    name = "HYPROF:sspp:endmembers=300:scene.tif"
    r = program("gdal_translate", "-q", name, "out.tif", cwd=tmp_path)
    assert r.returncode == 1 and "--endmembers 300 is out of range" in r.stderr, r.stderr
    assert not (tmp_path / "out.tif").exists()
    r = program("gdalinfo", "-stats", name, cwd=tmp_path)
    assert "IReadBlock failed" in r.stderr or "out of range" in r.stderr, r.stderr
    assert "STATISTICS_MEAN" not in r.stdout
    vrt = pca_source_vrt(tmp_path / "f.vrt", name, 1)
    r = program("gdal_translate", "-q", vrt.name, "out.tif", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert not (tmp_path / "out.tif").exists()
    ds = gdal.Open("HYPROF:sspp:endmembers=300:%s" % SAMSON)
    with pytest.raises(RuntimeError, match="out of range"):
        ds.GetRasterBand(1).ComputeStatistics(False)


OPEN_ONLY = """
import sys
from osgeo import gdal
gdal.UseExceptions()
ds = gdal.Open(sys.argv[1])
b = ds.GetRasterBand(1)
print(ds.RasterXSize, ds.RasterYSize, ds.RasterCount, ds.GetGeoTransform(),
      ds.GetSpatialRef() is not None, b.DataType, b.GetBlockSize(),
      ds.GetMetadataItem("COMPUTATIONS", "HYPROF_CACHE"))
sys.stdout.flush()
if len(sys.argv) > 2:
    b.ReadAsArray(0, 0, 1, 1)
"""


def stages(stderr):
    """The stages the driver's computations entered (HYPROF_LOG=debug traces)."""
    return [l for l in stderr.splitlines() if l.startswith("HYPROF: stage ")]


def traced(*args, cwd):
    env = dict(gdal_env(), CPL_DEBUG="HYPROF", HYPROF_LOG="debug")
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env,
                          cwd=str(cwd), timeout=300)


def test_open_runs_no_stage(tmp_path):
    """Opening a HYPROF dataset and asking what GDAL needs to use it (size,
    bands, georeference, type, blocks) runs no stage of the operation; the
    first pixel read does (which shows the counter sees computations)."""
    name = "HYPROF:eadp:components=2,count=2:%s" % SAMSON
    r = traced(sys.executable, "-c", OPEN_ONLY, name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:3] == ["95", "95", "6"] and r.stdout.split()[-1] == "0"
    assert stages(r.stderr) == [] and "computing" not in r.stderr, r.stderr
    r = traced(sys.executable, "-c", OPEN_ONLY, name, "read", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(stages(r.stderr)) > 0 and "computing eadp" in r.stderr, r.stderr


def test_gdalinfo_runs_no_stage(tmp_path):
    """gdalinfo lists the bands with their names (from the parameters) without
    computing; the result's metadata (what only the data tells) is not listed
    then. -checksum reads the pixels, and computes."""
    name = "HYPROF:eadp:components=2,count=2:%s" % SAMSON
    r = traced("gdalinfo", name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert stages(r.stderr) == [] and "computing" not in r.stderr, r.stderr
    names = re.findall(r"Description = (.*)", r.stdout)
    assert names == ["PC1", "PC1 T=65", "PC1 T=130", "PC2", "PC2 T=65", "PC2 T=130"]
    assert "HYPROF_OPERATION=eadp" in r.stdout and "EADP_CONTRAST" not in r.stdout
    r = traced("gdalinfo", "-checksum", name, cwd=tmp_path)
    assert r.returncode == 0 and "computing eadp" in r.stderr, r.stderr
