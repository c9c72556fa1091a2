"""The HYPROF driver and the pixel functions against hostile or changing input
(issue 23): exact cache keys and parameters of any length, results checked
against the dataset they serve, sizes checked at open, files changed while a
dataset is open, and inputs that are not regular files.

Oracles: the `hyprof` executable's output for the same operation (bit for
bit), and exact properties (band counts from the parameters, the messages).
Cases that could block or run long run in a subprocess with a time limit.
They run once more under AddressSanitizer when build-asan/ exists.

Run: /usr/bin/python3 -m pytest tests/test_driver_safety.py
"""

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, SAMPLES, SAMSON, gdal, gdal_env, load_gdal_plugin, run_ok, write_cube

PCA_MODEL = SAMPLES / "samson.pca"
UNDER_ASAN = os.environ.get("HYPROF_UNDER_ASAN") == "1"
# AddressSanitizer reserves terabytes of address space and its own heap: a
# process under a memory limit cannot even start there.
limits_memory = pytest.mark.skipif(UNDER_ASAN, reason="memory limits under AddressSanitizer")


@pytest.fixture(scope="module", autouse=True)
def plugin_loaded():
    load_gdal_plugin()
    yield


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, "shape %s != %s" % (a.shape, b.shape)
    assert np.array_equal(a, b, equal_nan=True), "largest difference %g" % np.nanmax(
        np.abs(a.astype(np.float64) - b.astype(np.float64)))


def array(path):
    a = gdal.Open(str(path)).ReadAsArray()
    return a[None] if a.ndim == 2 else a


def cube(path, w, h, bands=1, seed=0):
    rng = np.random.default_rng(seed)
    return write_cube(path, rng.uniform(0, 100, (bands, h, w)).astype(np.float32))


def times(n, fmt="%d.25"):
    return ",".join(fmt % i for i in range(1, n + 1))


def gdalinfo(name, timeout=60, limit_data=None, cwd=None):
    """Plain gdalinfo in a subprocess (a blocked or runaway open fails the test by
    its time limit); `limit_data` caps its data segment (RLIMIT_DATA, bytes)."""
    def limit():
        if limit_data:
            resource.setrlimit(resource.RLIMIT_DATA, (limit_data, limit_data))
    t0 = time.monotonic()
    r = subprocess.run(["gdalinfo", str(name)], capture_output=True, text=True,
                       env=gdal_env(), timeout=timeout, preexec_fn=limit, cwd=cwd)
    return r, time.monotonic() - t0


def open_error(name):
    with pytest.raises(RuntimeError) as e:
        gdal.Open(str(name))
    return str(e.value)


# ---- 1: exact cache keys, results checked against the dataset ----------------------

def test_long_connection_string_other_input(tmp_path):
    """A connection string longer than CPLSPrintf's buffer, on two inputs of
    different sizes: the second gets its own result, equal to the CLI's."""
    small, large = cube(tmp_path / "small.tif", 8, 6), cube(tmp_path / "large.tif", 40, 30, seed=1)
    params = "reduction=none,times=" + times(1800, "%d")
    a = gdal.Open("HYPROF:eadp:%s:%s" % (params, small))
    assert a.RasterCount == 1801
    a.GetRasterBand(1801).ReadAsArray()
    b = gdal.Open("HYPROF:eadp:%s:%s" % (params, large))
    assert (b.RasterXSize, b.RasterYSize, b.RasterCount) == (40, 30, 1801)
    ref = tmp_path / "cli.tif"
    run_ok("eadp", "--backend", "cpu", "--reduction", "none", "--times", times(1800, "%d"), large, ref)
    same(b.ReadAsArray(), array(ref))


# ---- 5: parameters of any length, exactly ------------------------------------------

def test_long_times_list_connection(tmp_path):
    src = cube(tmp_path / "c.tif", 5, 4)
    ds = gdal.Open("HYPROF:eadp:reduction=none,times=%s:%s" % (times(3001, "%d"), src))
    assert ds.RasterCount == 3002


def test_long_descriptor_values(tmp_path):
    """A string parameter longer than 8191 characters, a JSON array longer than
    8 KB and array elements longer than 63 characters reach the library whole."""
    cube(tmp_path / "c.tif", 5, 4)
    desc = tmp_path / "s.hyprof"
    desc.write_text('{"operation": "eadp", "input": "c.tif", "parameters": '
                    '{"reduction": "none", "times": "%s"}}' % times(3001, "%d"))
    assert len(times(3001, "%d")) > 8192
    assert gdal.Open(str(desc)).RasterCount == 3002
    desc.write_text('{"operation": "eadp", "input": "c.tif", "parameters": '
                    '{"reduction": "none", "times": [%s]}}' % times(2000))
    assert gdal.Open(str(desc)).RasterCount == 2001
    long_one = "0" * 70 + "1.5"
    desc.write_text('{"operation": "eadp", "input": "c.tif", "parameters": '
                    '{"reduction": "none", "times": ["%s", 300]}}' % long_one)
    ds = gdal.Open(str(desc))
    assert ds.RasterCount == 3
    assert ds.GetMetadataItem("HYPROF_PARAM_TIMES") == long_one + ",300"


def deep_folder(root, total=2300):
    """A folder whose absolute name is longer than GDAL's 2048-character path buffer."""
    d = root
    while len(str(d)) < total:
        d = d / ("d" * 200)
    d.mkdir(parents=True)
    return d


def test_descriptor_in_a_deep_folder(tmp_path):
    """Relative names in a descriptor whose folder name exceeds CPLFormFilename's
    buffer resolve to the right files (not to '' or the current folder)."""
    d = deep_folder(tmp_path)
    (d / "scene.tif").symlink_to(SAMSON)
    shutil.copy(PCA_MODEL, d / "m.pca")
    desc = d / "p.hyprof"
    desc.write_text('{"operation": "pca", "input": "scene.tif", "parameters": '
                    '{"model": "m.pca", "components": 2}}')
    ref = tmp_path / "cli.tif"
    run_ok("pca", "--backend", "cpu", "--model", PCA_MODEL, "--components", "2", SAMSON, ref)
    same(gdal.Open(str(desc)).ReadAsArray(), array(ref))


def pca_vrt(path, model, component):
    """A .vrt of one hyprof_pca band over Samson's bands (`model` as written)."""
    n = gdal.Open(str(SAMSON)).RasterCount
    sources = "".join('<SimpleSource><SourceFilename relativeToVRT="0">%s</SourceFilename>'
                      "<SourceBand>%d</SourceBand></SimpleSource>" % (SAMSON, b)
                      for b in range(1, n + 1))
    path.write_text('<VRTDataset rasterXSize="95" rasterYSize="95"><VRTRasterBand '
                    'dataType="Float32" band="1" subClass="VRTDerivedRasterBand">'
                    "<PixelFunctionType>hyprof_pca</PixelFunctionType>"
                    '<PixelFunctionArguments model="%s" component="%d"/>'
                    "<SourceTransferType>Float32</SourceTransferType>%s"
                    "</VRTRasterBand></VRTDataset>" % (model, component, sources))
    return path


def test_pixel_function_model_in_a_deep_folder(tmp_path):
    """HYPROF_MODEL_PATH folders longer than GDAL's path buffer are searched."""
    d = deep_folder(tmp_path)
    shutil.copy(PCA_MODEL, d / "m.pca")
    ref = tmp_path / "cli.tif"
    run_ok("pca", "--backend", "cpu", "--model", PCA_MODEL, SAMSON, ref)
    vrt = pca_vrt(tmp_path / "pca.vrt", "m.pca", 2)
    gdal.SetConfigOption("HYPROF_MODEL_PATH", str(d))
    try:
        got = gdal.Open(str(vrt)).ReadAsArray()
    finally:
        gdal.SetConfigOption("HYPROF_MODEL_PATH", None)
    same(got, array(ref)[1])


# ---- 9: sizes checked at open, nothing computed for them ----------------------------

def test_absurd_band_count_fails_at_open(tmp_path):
    """A 90-byte descriptor asking for 70,007 bands: gdalinfo fails at once,
    naming the parameter, instead of computing 2.75 GB."""
    (tmp_path / "samson.tif").symlink_to(SAMSON)
    desc = tmp_path / "big.hyprof"
    desc.write_text('{"operation": "eadp", "input": "samson.tif", "parameters": {"count": 10000}}')
    assert desc.stat().st_size < 100
    r, seconds = gdalinfo(desc)
    assert r.returncode != 0
    assert "count=10000" in r.stderr and "70007 bands" in r.stderr, r.stderr
    assert seconds < 20


@limits_memory
def test_result_beyond_memory_fails_at_open(tmp_path):
    """A result larger than the memory the process may allocate fails at open,
    naming the parameter; a small one under the same limit opens and computes."""
    limit = 700 << 20
    r, _ = gdalinfo("HYPROF:eadp:count=3000:%s" % SAMSON, limit_data=limit)
    assert r.returncode != 0
    assert "count=3000" in r.stderr and "MiB is available" in r.stderr, r.stderr
    r, _ = gdalinfo("HYPROF:eadp:count=2,components=2:%s" % SAMSON, limit_data=limit)
    assert r.returncode == 0, r.stderr
    assert "Band 6 " in r.stdout and "PC2 T=130" in r.stdout


def test_open_computes_nothing_for_sizes(tmp_path):
    """Opening checks sizes from the parameters alone: the cache is untouched."""
    ds0 = gdal.Open("HYPROF:dwt:levels=5:%s" % SAMSON)
    before = int(ds0.GetMetadataItem("COMPUTATIONS", "HYPROF_CACHE"))
    ds = gdal.Open("HYPROF:eadp:count=900,components=3,step=11:%s" % SAMSON)
    assert ds.RasterCount == 3 * 901
    assert int(ds.GetMetadataItem("COMPUTATIONS", "HYPROF_CACHE")) == before


READ_UNDER_LIMIT = """
import resource, sys
from osgeo import gdal
gdal.UseExceptions()
ds = gdal.Open(sys.argv[1])
status = open("/proc/self/status").read()
vmdata = int(status.split("VmData:")[1].split()[0]) * 1024
limit = vmdata + (40 << 20)
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
try:
    ds.GetRasterBand(1).ReadAsArray(0, 0, 2, 2)
except RuntimeError as e:
    print(e)
    sys.exit(3)
"""


@limits_memory
def test_compute_checks_memory_first():
    """Memory that shrank between open and the first read: the computation fails
    with a message before allocating its result (76 MB under a 40 MB margin)."""
    r = subprocess.run([sys.executable, "-c", READ_UNDER_LIMIT,
                        "HYPROF:eadp:count=300,step=1:%s" % SAMSON],
                       capture_output=True, text=True, env=gdal_env(), timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "computing eadp on" in r.stdout and "MiB is available" in r.stdout, r.stdout


def test_pixel_function_nodata_overflow(tmp_path):
    """nodata=1e999 overflows a double: an error naming it, not an infinite nodata."""
    n = gdal.Open(str(SAMSON)).RasterCount
    vrt = tmp_path / "s.vrt"
    vrt.write_text('<VRTDataset rasterXSize="95" rasterYSize="95"><VRTRasterBand '
                   'dataType="Float32" band="1" subClass="VRTDerivedRasterBand">'
                   "<PixelFunctionType>hyprof_scale</PixelFunctionType>"
                   '<PixelFunctionArguments scale="2" nodata="1e999"/>'
                   "<SourceTransferType>Float32</SourceTransferType>"
                   '<SimpleSource><SourceFilename relativeToVRT="0">%s</SourceFilename>'
                   "<SourceBand>1</SourceBand></SimpleSource>"
                   "</VRTRasterBand></VRTDataset>" % SAMSON)
    with pytest.raises(RuntimeError) as e:
        gdal.Open(str(vrt)).ReadAsArray()
    assert "nodata='1e999'" in str(e.value)
    assert n > 1


def test_pixel_function_unknown_argument_warns(tmp_path):
    """A misspelt argument (scael=2) is named in a warning instead of being
    ignored in silence; the declared ones still apply."""
    vrt = tmp_path / "s.vrt"
    vrt.write_text('<VRTDataset rasterXSize="95" rasterYSize="95"><VRTRasterBand '
                   'dataType="Float32" band="1" subClass="VRTDerivedRasterBand">'
                   "<PixelFunctionType>hyprof_scale</PixelFunctionType>"
                   '<PixelFunctionArguments scael="2" offset="1"/>'
                   "<SourceTransferType>Float32</SourceTransferType>"
                   '<SimpleSource><SourceFilename relativeToVRT="0">%s</SourceFilename>'
                   "<SourceBand>1</SourceBand></SimpleSource>"
                   "</VRTRasterBand></VRTDataset>" % SAMSON)
    r = subprocess.run(["gdalinfo", "-checksum", str(vrt)], capture_output=True, text=True,
                       env=gdal_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "hyprof_scale: unknown argument 'scael'" in r.stderr, r.stderr
    assert r.stderr.count("unknown argument") == 1


# ---- 9: files changed while a dataset is open --------------------------------------

def test_model_changed_while_open(tmp_path):
    """A dataset opened on a model keeps its result or fails when the model is
    replaced; it never serves the new model's values as its own. A dataset
    opened afterwards gets the new model's result."""
    model = tmp_path / "m.pca"
    shutil.copy(PCA_MODEL, model)
    conn = "HYPROF:pca:model=%s,components=2:%s" % (model, SAMSON)
    old = tmp_path / "old.tif"
    run_ok("pca", "--backend", "cpu", "--model", model, "--components", "2", SAMSON, old)
    ds = gdal.Open(conn)
    same(ds.GetRasterBand(1).ReadAsArray(), array(old)[0])

    doubled = write_cube(tmp_path / "x2.tif", (array(SAMSON) * 2).astype(np.float32))
    other = tmp_path / "other.pca"
    run_ok("pca", "--backend", "cpu", "--components", "3", "--save-model", other, doubled,
           tmp_path / "unused.tif")
    shutil.copyfile(other, model)
    later = time.time() + 10
    os.utime(model, (later, later))
    new = tmp_path / "new.tif"
    run_ok("pca", "--backend", "cpu", "--model", model, "--components", "2", SAMSON, new)
    assert not np.array_equal(array(new), array(old))

    gdal.SetConfigOption("HYPROF_CACHE_MAX", "1")  # the old result is evicted
    try:
        ds2 = gdal.Open(conn)
        same(ds2.ReadAsArray(), array(new))
        same(ds2.ReadAsArray(), array(new))
        try:
            band2 = ds.GetRasterBand(2).ReadAsArray()  # not read before: computed again
        except RuntimeError as e:
            assert "changed since the dataset was opened" in str(e) and str(model) in str(e)
        else:
            same(band2, array(old)[1])
    finally:
        gdal.SetConfigOption("HYPROF_CACHE_MAX", None)


def test_model_replaced_same_size_and_time(tmp_path):
    """A model replaced (rename) by one of the same size and modification time:
    the pixel function and a newly opened dataset use the new one."""
    model = tmp_path / "m.pca"
    shutil.copy(PCA_MODEL, model)
    text = model.read_text()
    first_mean = text.split("mean ")[1].split()[0]
    assert first_mean.startswith("28.")
    edited = tmp_path / "edited.pca"
    edited.write_text(text.replace("mean " + first_mean, "mean 9" + first_mean[1:], 1))
    vrt = pca_vrt(tmp_path / "pca.vrt", model, 1)
    conn = "HYPROF:pca:model=%s:%s" % (model, SAMSON)
    old_pix, old_drv = gdal.Open(str(vrt)).ReadAsArray(), gdal.Open(conn).ReadAsArray()
    st = os.stat(model)
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(edited).st_size == st.st_size
    os.replace(edited, model)
    ref = tmp_path / "ref.tif"
    run_ok("pca", "--backend", "cpu", "--model", model, SAMSON, ref)
    new_pix, new_drv = gdal.Open(str(vrt)).ReadAsArray(), gdal.Open(conn).ReadAsArray()
    same(new_pix, array(ref)[0])
    same(new_drv, array(ref))
    assert not np.array_equal(new_pix, old_pix) and not np.array_equal(new_drv, old_drv)


def test_input_changed_while_open(tmp_path):
    """An input replaced by a larger raster after open: reading fails naming the
    file, without reading outside the announced result."""
    src = cube(tmp_path / "in.tif", 20, 20, bands=2)
    ds = gdal.Open("HYPROF:eadp:reduction=none,count=1:%s" % src)
    assert (ds.RasterXSize, ds.RasterCount) == (20, 4)
    cube(tmp_path / "bigger.tif", 30, 30, bands=2, seed=3)
    os.replace(tmp_path / "bigger.tif", src)
    with pytest.raises(RuntimeError) as e:
        ds.ReadAsArray()
    assert "changed since the dataset was opened" in str(e.value)


def test_descriptor_changed_while_open(tmp_path):
    """A descriptor rewritten after open: the open dataset keeps its parameters,
    a new one gets the new parameters; each equals the CLI's result."""
    cube(tmp_path / "c.tif", 12, 10, bands=2)
    desc = tmp_path / "p.hyprof"
    desc.write_text('{"operation": "eadp", "input": "c.tif", "parameters": '
                    '{"reduction": "none", "count": 1}}')
    a = gdal.Open(str(desc))
    desc.write_text('{"operation": "eadp", "input": "c.tif", "parameters": '
                    '{"reduction": "none", "count": 3}}')
    b = gdal.Open(str(desc))
    assert (a.RasterCount, b.RasterCount) == (4, 8)
    for ds, count in ((b, 3), (a, 1)):
        ref = tmp_path / ("cli%d.tif" % count)
        run_ok("eadp", "--backend", "cpu", "--reduction", "none", "--count", str(count),
               tmp_path / "c.tif", ref)
        same(ds.ReadAsArray(), array(ref))


# ---- 10: inputs that are not regular files -----------------------------------------

def not_files(tmp_path):
    fifo = tmp_path / "fifo.tif"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    empty = tmp_path / "empty.tif"
    empty.write_bytes(b"")
    text = tmp_path / "text.tif"
    text.write_text("not a raster\n" * 10)
    s = SAMSON
    return [
        ("HYPROF:pca::%s" % fifo, "is a FIFO"),
        ("HYPROF:pca::/dev/zero", "'/dev/zero' is a character device"),
        ("HYPROF:pca::%s" % folder, "is a folder no GDAL driver reads"),
        ("HYPROF:pca::%s" % empty, "is empty"),
        ("HYPROF:pca::%s" % text, "cannot open input '%s' as a raster: " % text),
        ("HYPROF:pca:model=%s:%s" % (fifo, s), "parameter 'model': '%s' is a FIFO" % fifo),
        ("HYPROF:pca:model=/dev/zero:%s" % s, "parameter 'model': '/dev/zero' is a character"),
        ("HYPROF:pca:model=%s:%s" % (folder, s), "parameter 'model': '%s' is a directory" % folder),
        ("HYPROF:pca:model=%s:%s" % (empty, s), "'%s' is empty" % empty),
    ]


def test_not_regular_files(tmp_path):
    """Refused at open with the reason, without blocking (each in gdalinfo with
    a time limit)."""
    for name, text in not_files(tmp_path):
        r, _ = gdalinfo(name, timeout=30)
        assert r.returncode != 0, name
        assert text in r.stderr, "%s: %s" % (name, r.stderr)
        if "as a raster: " in text:
            assert r.stderr.split(text)[1].strip(), "no reason given: %s" % r.stderr


def test_descriptor_not_regular(tmp_path):
    """A descriptor that is empty, not text or too deep is refused by name."""
    empty = tmp_path / "e.hyprof"
    empty.write_bytes(b"")
    assert open_error(empty)  # GDAL itself refuses an empty file: no driver sees it
    nul = tmp_path / "n.hyprof"
    nul.write_bytes(b'{"operation": "pca", "input": "a\\u0000b.tif"}')
    assert "NUL" in open_error(nul)
    trailing = tmp_path / "t.hyprof"
    trailing.write_text('{"operation": "pca", "input": "%s"} {"x": 1}' % SAMSON)
    assert "text after the object" in open_error(trailing)


# ---- everything above under AddressSanitizer ----------------------------------------

def asan_build():
    d = Path(os.environ.get("HYPROF_ASAN_BUILD", ROOT / "build-asan"))
    return d if (d / "gdal_driver" / "gdal_HYPROF.so").is_file() else None


@pytest.mark.skipif(UNDER_ASAN or asan_build() is None,
                    reason="no AddressSanitizer build (cmake -B build-asan -DHYPROF_ASAN=ON)")
def test_under_asan():
    """This file again with the ASan build of the plugin preloaded into Python
    (see test_gdal_plugin.test_bad_input_under_asan): any invalid access aborts."""
    d = asan_build()

    def lib(name):
        return subprocess.run(["gcc", "-print-file-name=" + name], capture_output=True,
                              text=True).stdout.strip()
    env = dict(os.environ, LD_PRELOAD="%s:%s" % (lib("libasan.so"), lib("libstdc++.so")),
               HYPROF_UNDER_ASAN="1", ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               HYPROF_GDAL_PLUGIN_DIR=str(d / "gdal_driver"),
               GDAL_DRIVER_PATH=str(d / "gdal_driver"), HYPROF_EXE=str(d / "cli" / "hyprof"))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                        "-k", "not memory and not absurd"],
                       capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "passed" in r.stdout and "AddressSanitizer" not in r.stderr
