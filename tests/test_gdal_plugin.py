"""The GDAL plugin gdal_HYPROF.so: VRT pixel functions (hyprof_pca, hyprof_dwt,
hyprof_scale, hyprof_rmse, hyprof_classify, hyprof_decision, hyprof_abundance)
and the HYPROF raster driver.

Oracles: the `hyprof` executable's output for the same operation (bit for bit:
the plugin must give what the CLI writes: labels, vote fractions, softmax
and abundances run the same library code), NumPy for scaling and RMSE (same
arithmetic, exact), and GDAL itself for decimation (a nearest-neighbour
`-outsize` of the CLI's output). Every read pattern GDAL uses is tried: whole
images, -srcwin, -outsize 25%, COG tiles, arbitrary ReadAsArray windows with
other buffer types, several threads at once.

The plugin is $HYPROF_GDAL_PLUGIN_DIR/gdal_HYPROF.so when set, else
build/gdal_driver (a missing plugin is a failure). tests/CMakeLists.txt passes
its folder. Bad-input tests run once more under AddressSanitizer when an ASan
build exists (build-asan/, see test_bad_input_under_asan).

Run: /usr/bin/python3 -m pytest tests/test_gdal_plugin.py
"""

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import (ROOT, SAMPLES, SAMSON, INDIAN_PINES, gdal, gdal_env, load_gdal_plugin, osr,
                      run_ok, write_cube)

PCA_MODEL = SAMPLES / "samson.pca"  # 3 components of samson.tif (hyprof pca --save-model)
SVM_MODEL = SAMPLES / "indian_pines_svm.model"  # 15 bands: the EADP profile of classmap.vrt
ENDMEMBERS = SAMPLES / "samson_unmix.csv"  # 3 endmembers of samson.tif (hyprof unmix)
UNDER_ASAN = os.environ.get("HYPROF_UNDER_ASAN") == "1"


@pytest.fixture(scope="module", autouse=True)
def plugin_loaded():
    load_gdal_plugin()
    yield


def translate(src, dst, *opts, cwd=None, ok=True):
    """gdal_translate in a subprocess (the real program, plugin from GDAL_DRIVER_PATH)."""
    r = subprocess.run(["gdal_translate", "-q", *map(str, opts), str(src), str(dst)],
                       capture_output=True, text=True, env=gdal_env(), cwd=cwd, timeout=300)
    if ok:
        assert r.returncode == 0, "gdal_translate %s -> %d: %s" % (src, r.returncode, r.stderr)
    return r


def array(path, **kw):
    a = gdal.Open(str(path)).ReadAsArray(**kw)
    return a[None] if a.ndim == 2 else a


def same(a, b):
    """Exact equality, NaN equal to NaN; a message with the largest difference."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    both_nan = np.isnan(a) & np.isnan(b) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    diff = (a != b) & ~both_nan
    assert not diff.any(), "%d values differ, max |diff| %g" % (
        diff.sum(), np.nanmax(np.abs(a.astype(float) - b.astype(float))))


def decimated(path, tmp_path, name):
    """The full result decimated by GDAL (nearest, 25 %): the oracle of -outsize."""
    out = tmp_path / ("dec_" + name + ".tif")
    translate(path, out, "-outsize", "25%", "25%", "-r", "nearest")
    return array(out)


# ---- VRT construction ---------------------------------------------------------------

def vrt_header(ref):
    ds = gdal.Open(str(ref))
    srs = ds.GetSpatialRef().ExportToWkt().replace('"', "&quot;")
    gt = ", ".join("%.17g" % g for g in ds.GetGeoTransform())
    return ('<VRTDataset rasterXSize="%d" rasterYSize="%d">\n'
            '<SRS dataAxisToSRSAxisMapping="1,2">%s</SRS><GeoTransform>%s</GeoTransform>\n'
            % (ds.RasterXSize, ds.RasterYSize, srs, gt))


def derived_band(n, func, args, sources, dtype="Float32", nodata=None):
    s = ['<VRTRasterBand dataType="%s" band="%d" subClass="VRTDerivedRasterBand">' % (dtype, n)]
    if nodata is not None:
        s.append("<NoDataValue>%r</NoDataValue>" % nodata)
    s.append("<PixelFunctionType>%s</PixelFunctionType>" % func)
    if args:
        s.append("<PixelFunctionArguments %s/>" % " ".join('%s="%s"' % kv for kv in args.items()))
    s.append("<SourceTransferType>Float32</SourceTransferType>")
    for f, b in sources:
        s.append('<SimpleSource><SourceFilename relativeToVRT="0">%s</SourceFilename>'
                 "<SourceBand>%d</SourceBand></SimpleSource>" % (f, b))
    s.append("</VRTRasterBand>")
    return "\n".join(s)


def write_vrt(path, ref, bands):
    path.write_text(vrt_header(ref) + "\n".join(bands) + "\n</VRTDataset>\n")
    return path


def nbands(path):
    return gdal.Open(str(path)).RasterCount


def all_bands(path):
    return [(str(path), b) for b in range(1, nbands(path) + 1)]


# ---- pixel functions: each case builds a VRT and its oracle --------------------------

def case_pca(tmp_path):
    ref = tmp_path / "cli_pca.tif"
    run_ok("pca", "--backend", "cpu", "--model", PCA_MODEL, SAMSON, ref)
    vrt = write_vrt(tmp_path / "pca.vrt", SAMSON, [
        derived_band(k, "hyprof_pca", {"model": PCA_MODEL, "component": k}, all_bands(SAMSON))
        for k in (1, 2, 3)])
    return vrt, ref


def case_dwt(tmp_path):
    ref = tmp_path / "cli_dwt.tif"
    run_ok("dwt", "--backend", "cpu", "--levels", "3", "--wavelet", "db2", SAMSON, ref)
    picks = [1, 7, 20]  # ceil(156 / 8) = 20 coefficients
    vrt = write_vrt(tmp_path / "dwt.vrt", SAMSON, [
        derived_band(i + 1, "hyprof_dwt", {"wavelet": "db2", "levels": 3, "coefficient": c},
                     all_bands(SAMSON)) for i, c in enumerate(picks)])
    sel = tmp_path / "cli_dwt_sel.tif"
    translate(ref, sel, *sum([["-b", str(c)] for c in picks], []))
    return vrt, sel


def case_scale(tmp_path):
    x = array(SAMSON).astype(np.float32).astype(np.float64)
    ref = write_cube(tmp_path / "ref_scale.tif", np.stack([x[59] * 0.0025 + 1.5, x[9] * -3.0]),
                     like=SAMSON)
    vrt = write_vrt(tmp_path / "scale.vrt", SAMSON, [
        derived_band(1, "hyprof_scale", {"scale": 0.0025, "offset": 1.5}, [(SAMSON, 60)],
                     "Float64"),
        derived_band(2, "hyprof_scale", {"scale": -3}, [(SAMSON, 10)], "Float64")])
    return vrt, ref


def rmse_reference(x, n):
    acc = np.zeros(x.shape[1:])
    for b in range(n):  # sequential, as the pixel function sums
        d = x[b] - x[b + n]
        acc += d * d
    return np.sqrt(acc / n)


def case_rmse(tmp_path):
    x = array(SAMSON).astype(np.float32).astype(np.float64)
    ref = write_cube(tmp_path / "ref_rmse.tif", rmse_reference(x[:20], 10), like=SAMSON)
    vrt = write_vrt(tmp_path / "rmse.vrt", SAMSON, [
        derived_band(1, "hyprof_rmse", {}, [(SAMSON, b) for b in range(1, 21)], "Float64")])
    return vrt, ref


def samson_labels(tmp_path):
    """Training labels for samson.tif: the dominant reference abundance (1 rock,
    2 tree, 3 water) at every 7th pixel, 0 elsewhere."""
    ab = array(SAMPLES / "samson_abundances.tif")
    lab = (np.argmax(ab, axis=0) + 1).astype(np.uint8)
    keep = np.zeros(lab.size, bool)
    keep[::7] = True
    lab[~keep.reshape(lab.shape)] = 0
    return write_cube(tmp_path / "labels.tif", lab, like=SAMSON)


def classifier(tmp_path, kind):
    """A model trained by the CLI on samson.tif (156 bands): an SVM with fixed C
    and gamma (no cross-validation, to stay fast) or an ELM."""
    model = tmp_path / ("samson_%s.model" % kind)
    if not model.exists():
        extra = ["--grid", "C=100,gamma=2"] if kind == "svm" else ["--neurons", "60"]
        run_ok("train", "--backend", "cpu", "--classifier", kind, *extra, "--labels",
               samson_labels(tmp_path), SAMSON, model)
    return model


def classified(tmp_path, kind, cube=SAMSON):
    """`hyprof classify` of `cube`: the class map and the per-class scores."""
    model = classifier(tmp_path, kind)
    ref, prob = tmp_path / ("cli_%s_map.tif" % kind), tmp_path / ("cli_%s_prob.tif" % kind)
    run_ok("classify", "--backend", "cpu", "--model", model, "--probabilities", prob, cube, ref)
    return model, ref, prob


def case_classify(tmp_path):
    model, ref, _ = classified(tmp_path, "svm")
    assert len(np.unique(array(ref))) == 3  # every class present: a test that can fail
    vrt = write_vrt(tmp_path / "classify.vrt", SAMSON, [
        derived_band(1, "hyprof_classify", {"model": model}, all_bands(SAMSON), "UInt16")])
    return vrt, ref


def case_decision(tmp_path):
    model, _, prob = classified(tmp_path, "svm")
    vrt = write_vrt(tmp_path / "decision.vrt", SAMSON, [
        derived_band(k, "hyprof_decision", {"model": model, "class": k}, all_bands(SAMSON))
        for k in (1, 2, 3)])
    return vrt, prob


def case_decision_elm(tmp_path):
    """ELM: the softmax of class 2, and the labels (the ELM path of classify)."""
    model, ref, prob = classified(tmp_path, "elm")
    vrt = write_vrt(tmp_path / "elm.vrt", SAMSON, [
        derived_band(1, "hyprof_decision", {"model": model, "class": 2}, all_bands(SAMSON)),
        derived_band(2, "hyprof_classify", {"model": model}, all_bands(SAMSON))])
    both = write_cube(tmp_path / "ref_elm.tif",
                      np.stack([array(prob)[1], array(ref)[0].astype(np.float32)]), like=SAMSON)
    return vrt, both


def case_abundance(tmp_path):
    """E1 by FCLS, E2 by NNLS, E3 by UCLS: each against `hyprof unmix --model`."""
    bands = []
    for k, method in ((1, "fcls"), (2, "nnls"), (3, "ucls")):
        out = tmp_path / ("cli_unmix_%s.tif" % method)
        run_ok("unmix", "--backend", "cpu", "--model", ENDMEMBERS, "--abundances", method,
               "--endmembers-csv", tmp_path / ("e_%s.csv" % method),
               "--endmembers-json", tmp_path / ("e_%s.json" % method), SAMSON, out)
        bands.append(array(out)[k - 1])
    ref = write_cube(tmp_path / "ref_abundance.tif", np.stack(bands), like=SAMSON)
    vrt = write_vrt(tmp_path / "abundance.vrt", SAMSON, [
        derived_band(k, "hyprof_abundance",
                     {"endmembers": ENDMEMBERS, "method": m, "endmember": k}, all_bands(SAMSON))
        for k, m in ((1, "fcls"), (2, "nnls"), (3, "ucls"))])
    return vrt, ref


PIXEL_CASES = {"pca": case_pca, "dwt": case_dwt, "scale": case_scale, "rmse": case_rmse,
               "classify": case_classify, "decision": case_decision,
               "decision_elm": case_decision_elm, "abundance": case_abundance}


@pytest.fixture(scope="module")
def pixel_case(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            made[name] = PIXEL_CASES[name](tmp_path_factory.mktemp("pix_" + name))
        return made[name]
    return get


@pytest.mark.parametrize("name", sorted(PIXEL_CASES))
def test_pixel_function_translate_equals_reference(name, pixel_case, tmp_path):
    vrt, ref = pixel_case(name)
    out = tmp_path / "out.tif"
    translate(vrt, out)
    same(array(out), array(ref))


@pytest.mark.parametrize("name", sorted(PIXEL_CASES))
def test_pixel_function_srcwin(name, pixel_case, tmp_path):
    vrt, ref = pixel_case(name)
    out = tmp_path / "win.tif"
    translate(vrt, out, "-srcwin", 13, 7, 50, 61)
    same(array(out), array(ref)[:, 7:68, 13:63])


@pytest.mark.parametrize("name", sorted(PIXEL_CASES))
def test_pixel_function_outsize(name, pixel_case, tmp_path):
    vrt, ref = pixel_case(name)
    out = tmp_path / "small.tif"
    translate(vrt, out, "-outsize", "25%", "25%", "-r", "nearest")
    got = array(out)
    assert got.shape[1:] == (23, 23)  # 25 % of 95
    same(got, decimated(ref, tmp_path, name))


@pytest.mark.parametrize("name", sorted(PIXEL_CASES))
def test_pixel_function_cog(name, pixel_case, tmp_path):
    vrt, ref = pixel_case(name)
    out = tmp_path / "out_cog.tif"
    translate(vrt, out, "-of", "COG", "-co", "BLOCKSIZE=32", "-co", "OVERVIEWS=NONE")
    ds = gdal.Open(str(out))
    assert ds.GetRasterBand(1).GetBlockSize() == [32, 32]
    same(array(out), array(ref))


WINDOWS = [  # xoff, yoff, xsize, ysize, buf_xsize, buf_ysize
    (0, 0, 95, 95, None, None), (3, 4, 1, 1, None, None), (90, 0, 5, 95, None, None),
    (10, 20, 37, 11, None, None), (0, 0, 95, 95, 19, 19), (5, 9, 80, 60, 20, 15)]


@pytest.mark.parametrize("name", sorted(PIXEL_CASES))
def test_pixel_function_read_windows(name, pixel_case):
    vrt, ref = pixel_case(name)
    ds, rds = gdal.Open(str(vrt)), gdal.Open(str(ref))
    for xo, yo, xs, ys, bx, by in WINDOWS:
        for btype in (gdal.GDT_Float32, gdal.GDT_Float64, gdal.GDT_Int16):
            kw = dict(xoff=xo, yoff=yo, xsize=xs, ysize=ys, buf_type=btype)
            if bx:
                kw.update(buf_xsize=bx, buf_ysize=by, resample_alg=gdal.GRIORA_NearestNeighbour)
            got = ds.ReadAsArray(**kw)
            # the reference read the same way: GDAL's own sampling and conversion
            same(got, rds.ReadAsArray(**kw))


def test_pixel_function_buffer_types_convert_like_gdal(pixel_case):
    """Int16 reads of the PCA are the float values rounded and clamped by GDAL."""
    vrt, ref = pixel_case("pca")
    f = gdal.Open(str(ref)).ReadAsArray()
    i = gdal.Open(str(vrt)).ReadAsArray(buf_type=gdal.GDT_Int16)
    assert i.dtype == np.int16
    assert np.abs(i - np.clip(f, -32768, 32767)).max() <= 0.5


def test_pixel_function_nodata(tmp_path):
    """Pixels where any source is the input nodata (or NaN) come out as nodata, as
    `hyprof pca --model` writes them."""
    x = array(SAMSON).astype(np.float32)
    x[:, 3, 4] = -9999.0
    x[17, 50, 60] = -9999.0
    x[2, 70, 10] = np.nan
    cube = write_cube(tmp_path / "nd.tif", x, nodata=-9999.0, like=SAMSON)
    ref = tmp_path / "cli.tif"
    run_ok("pca", "--backend", "cpu", "--model", PCA_MODEL, cube, ref)
    vrt = write_vrt(tmp_path / "nd.vrt", cube, [
        derived_band(k, "hyprof_pca", {"model": PCA_MODEL, "component": k, "nodata": -9999},
                     all_bands(cube), nodata=-9999.0) for k in (1, 2, 3)])
    out = tmp_path / "out.tif"
    translate(vrt, out)
    got = array(out)
    # The pixel function writes its nodata argument; the CLI writes NaN.
    same(got, np.where(np.isnan(array(ref)), np.float32(-9999.0), array(ref)))
    assert got[0, 3, 4] == -9999.0 and got[2, 50, 60] == -9999.0 and got[1, 70, 10] == -9999.0


def test_pixel_function_nodata_classify_abundance(tmp_path):
    """Nodata pixels: class 0 and nodata abundances, as `hyprof classify` and
    `hyprof unmix --model` write them."""
    x = array(SAMSON).astype(np.float32)
    x[:, 3, 4] = -9999.0
    x[17, 50, 60] = -9999.0
    x[2, 70, 10] = np.nan
    cube = write_cube(tmp_path / "nd.tif", x, nodata=-9999.0, like=SAMSON)
    model, ref, _ = classified(tmp_path, "svm", cube)
    unmixed = tmp_path / "cli_unmix.tif"
    run_ok("unmix", "--backend", "cpu", "--model", ENDMEMBERS, cube, unmixed)
    vrt = write_vrt(tmp_path / "nd.vrt", cube, [
        derived_band(1, "hyprof_classify", {"model": model, "nodata": -9999}, all_bands(cube),
                     "Float32", nodata=0),
        derived_band(2, "hyprof_abundance", {"endmembers": ENDMEMBERS, "endmember": 2,
                                             "nodata": -9999}, all_bands(cube),
                     nodata=-9999.0)])
    got = array(vrt)
    same(got[0], array(ref)[0].astype(np.float32))
    # The pixel function writes its nodata argument; the CLI writes NaN.
    u = array(unmixed)[1]
    same(got[1], np.where(np.isnan(u), np.float32(-9999.0), u))
    for y, xx in ((3, 4), (50, 60), (70, 10)):
        assert got[0, y, xx] == 0 and got[1, y, xx] == -9999.0


def in_threads(fn, n):
    """fn() in n threads at once; their n results. Any exception fails the test."""
    results, errors = [None] * n, []

    def run(i):
        try:
            results[i] = fn()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


@pytest.mark.parametrize("name", ["pca", "classify", "abundance"])
def test_pixel_function_threads(name, pixel_case):
    """Six threads read a model's VRT at once (each its own dataset, as GDAL wants):
    the shared model cache hands out one model, every result is right."""
    vrt, ref = pixel_case(name)
    want = array(ref)
    for r in in_threads(lambda: array(vrt), 6):
        same(r, want)


def test_pixel_function_model_reloaded_when_changed(tmp_path):
    """The model cache is keyed by path and modification time: replacing the file
    gives the new model's values in the same process."""
    model = tmp_path / "m.pca"
    run_ok("pca", "--backend", "cpu", "--components", "2", "--save-model", model, SAMSON,
           tmp_path / "a.tif")
    vrt = write_vrt(tmp_path / "m.vrt", SAMSON, [
        derived_band(1, "hyprof_pca", {"model": model, "component": 2}, all_bands(SAMSON))])
    same(array(vrt), array(tmp_path / "a.tif")[1:2])
    x = array(SAMSON).astype(np.float32)
    other = write_cube(tmp_path / "other.tif", x[:, ::-1, :] * 2 + 5, like=SAMSON)
    new_model = tmp_path / "n.pca"
    run_ok("pca", "--backend", "cpu", "--components", "2", "--save-model", new_model, other,
           tmp_path / "b.tif")
    os.replace(new_model, model)
    os.utime(model, ns=(os.stat(model).st_atime_ns, os.stat(model).st_mtime_ns + 10**9))
    ref = tmp_path / "ref.tif"
    run_ok("pca", "--backend", "cpu", "--model", model, SAMSON, ref)
    got = array(vrt)
    same(got, array(ref)[1:2])
    assert not np.array_equal(got, array(tmp_path / "a.tif")[1:2])


def test_pixel_function_over_driver(tmp_path):
    """Pixel functions layered on a HYPROF dataset: the RMSE between the features
    and their diffused versions of an EADP profile, against NumPy on the CLI's."""
    params = {"components": "2", "times": "50"}
    ref = array(cli_for("eadp", params, SAMSON, tmp_path)).astype(np.float64)
    vrt = write_vrt(tmp_path / "layer.vrt", SAMSON, [derived_band(
        1, "hyprof_rmse", {}, [(connection("eadp", params, SAMSON), b) for b in (1, 3, 2, 4)],
        "Float64")])
    out = tmp_path / "out.tif"
    translate(vrt, out)
    same(array(out)[0], rmse_reference(ref[[0, 2, 1, 3]], 2))


def test_sample_vrts(tmp_path):
    """samples/pca.vrt (the HYPROF driver, its files relative to the .vrt),
    scale.vrt, eadp_profile.vrt; and a hyprof_pca VRT whose relative model is
    found from the current folder or HYPROF_MODEL_PATH, loaded once per process."""
    ref = tmp_path / "cli_pca.tif"
    run_ok("pca", "--backend", "cpu", "--model", PCA_MODEL, SAMSON, ref)
    out = tmp_path / "pca.tif"
    translate("pca.vrt", out, cwd=SAMPLES)
    same(array(out), array(ref))
    out = tmp_path / "pca_elsewhere.tif"
    translate(SAMPLES / "pca.vrt", out, cwd=tmp_path)
    same(array(out), array(ref))
    vrt = write_vrt(tmp_path / "pca_fn.vrt", SAMSON, [
        derived_band(k, "hyprof_pca", {"model": "samson.pca", "component": k}, all_bands(SAMSON))
        for k in (1, 2, 3)])
    out = tmp_path / "pca_fn.tif"
    r = translate(vrt, out, "--config", "CPL_DEBUG", "HYPROF", cwd=SAMPLES)
    same(array(out), array(ref))
    assert len(re.findall(r"loaded PCA model", r.stderr)) == 1, r.stderr  # once per process
    out2 = tmp_path / "pca_fn2.tif"
    translate(vrt, out2, "--config", "HYPROF_MODEL_PATH", SAMPLES, cwd=tmp_path)
    same(array(out2), array(ref))

    out = tmp_path / "scale.tif"
    translate(SAMPLES / "scale.vrt", out)
    x = array(SAMSON).astype(np.float32).astype(np.float64)
    same(array(out)[0], (x[59] * 0.0025).astype(np.float32))

    ref = tmp_path / "cli_eadp.tif"
    run_ok("eadp", "--backend", "cpu", "--components", "3", "--count", "4", SAMSON, ref)
    out = tmp_path / "eadp.tif"
    translate(SAMPLES / "eadp_profile.vrt", out)
    same(array(out), array(ref))
    assert band_names(out) == band_names(ref)


def test_sample_classmap_abundances(tmp_path):
    """samples/classmap.vrt (the HYPROF driver's classify, indian_pines_classmap.hyprof,
    over the HYPROF dataset indian_pines_eadp.hyprof) and abundances.vrt equal the
    CLI's chain."""
    profile = tmp_path / "eadp.tif"
    run_ok("eadp", "--backend", "cpu", "--components", "3", "--count", "4", INDIAN_PINES,
           profile)
    ref = tmp_path / "cli_map.tif"
    run_ok("classify", "--backend", "cpu", "--model", SVM_MODEL, profile, ref)
    out = tmp_path / "classmap.tif"
    translate("classmap.vrt", out, cwd=SAMPLES)
    got = array(out)
    same(got, array(ref))
    assert set(np.unique(got)) == set(range(1, 17))
    ds = gdal.Open(str(out))
    assert ds.GetRasterBand(1).GetColorTable() is not None

    ref = tmp_path / "cli_unmix.tif"
    run_ok("unmix", "--backend", "cpu", "--model", ENDMEMBERS, SAMSON, ref)
    out = tmp_path / "abundances.tif"
    translate(SAMPLES / "abundances.vrt", out, cwd=tmp_path)
    same(array(out), array(ref)[:3])


# ---- the HYPROF driver --------------------------------------------------------------

def band_names(path):
    ds = gdal.Open(str(path))
    return [ds.GetRasterBand(b + 1).GetDescription() for b in range(ds.RasterCount)]


def hyprof_metadata(ds):
    md = ds.GetMetadata()
    return {k: v for k, v in md.items() if k.startswith("HYPROF_") and k != "HYPROF_INPUT"}


def cli_for(op, params, src, tmp_path, name="cli.tif"):
    """The CLI's output for the same operation and parameters (dict of text)."""
    args = []
    for k, v in params.items():
        args += ["--" + k] if v == "true" else ["--%s=%s" % (k, v)]
    out = tmp_path / name
    run_ok(op, "--backend", "cpu", *args, src, out)
    return out


def connection(op, params, src):
    return "HYPROF:%s:%s:%s" % (op, ",".join("%s=%s" % kv for kv in params.items()), src)


def computations():
    """Results computed so far in this process (the driver's HYPROF_CACHE domain)."""
    ds = gdal.Open(connection("dwt", {"levels": 5}, SAMSON))
    return int(ds.GetMetadataItem("COMPUTATIONS", "HYPROF_CACHE"))


DRIVER_CASES = [
    ("eadp", {"components": "3", "count": "2"}),
    ("eadp", {"reduction": "dwt", "levels": "4", "times": "30,100", "backend": "cpu"}),
    ("eap", {"thresholds": "100,1000", "features": "6"}),
    ("eap", {"attribute": "area,std", "reduction": "pca", "components": "2"}),
    ("pca", {"components": "4"}),
    ("pca", {"model": str(PCA_MODEL), "components": "2"}),
    ("dwt", {"levels": "3", "wavelet": "db4"}),
    ("eadp", {"reduction": "none", "count": "1", "step": "20"}),
    ("eap", {"levels": "5", "thresholds": "50", "connectivity": "8"}),
    ("emp", {"radii": "1,2"}),
    ("wmcd", {"radii": "1", "features": "2"}),
]


@pytest.mark.parametrize("op,params", DRIVER_CASES, ids=lambda v: v if isinstance(v, str) else
                         ",".join("%s=%s" % kv for kv in v.items()).replace(str(SAMPLES), ""))
def test_driver_equals_cli(op, params, tmp_path):
    """Band count (told by the library before computing), pixels, names, metadata,
    CRS, geotransform and nodata equal the CLI's output."""
    cli_params = {k: v for k, v in params.items() if k != "backend"}
    ref = cli_for(op, cli_params, SAMSON, tmp_path)
    ds = gdal.Open(connection(op, params, SAMSON))
    assert ds.RasterCount == nbands(ref)
    out = tmp_path / "drv.tif"
    translate(connection(op, params, SAMSON), out)
    same(array(out), array(ref))
    assert band_names(out) == band_names(ref)
    # The result's metadata joins the dataset's once it has read its result
    # (gdal_translate copies the metadata before reading).
    ds.GetRasterBand(1).ReadRaster(0, 0, 1, 1)
    assert hyprof_metadata(ds) == hyprof_metadata(gdal.Open(str(ref)))
    rds = gdal.Open(str(ref))
    assert ds.GetGeoTransform() == rds.GetGeoTransform()
    assert ds.GetSpatialRef().IsSame(rds.GetSpatialRef())
    assert ds.GetRasterBand(1).GetNoDataValue() == rds.GetRasterBand(1).GetNoDataValue()


def test_driver_descriptor(tmp_path):
    """A .hyprof descriptor with relative paths (to itself) and JSON numbers, lists
    and booleans; the same result as the connection string and the CLI."""
    sub = tmp_path / "d"
    sub.mkdir()
    (sub / "scene.tif").symlink_to(SAMSON)
    desc = sub / "p.hyprof"
    desc.write_text('{"operation": "eadp", "input": "scene.tif", "parameters": '
                    '{"components": 2, "times": [65, 130.5], "sigma": 1.5}}')
    ref = cli_for("eadp", {"components": "2", "times": "65,130.5", "sigma": "1.5"}, SAMSON, tmp_path)
    out = tmp_path / "out.tif"
    translate(desc, out, cwd=ROOT)
    same(array(out), array(ref))
    assert band_names(out) == band_names(ref)


@pytest.fixture(scope="module")
def eadp_driver(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drv")
    params = {"components": "2", "count": "3", "step": "40"}
    return connection("eadp", params, SAMSON), cli_for("eadp", params, SAMSON, tmp)


def test_driver_srcwin_outsize_cog(eadp_driver, tmp_path):
    conn, ref = eadp_driver
    out = tmp_path / "win.tif"
    translate(conn, out, "-srcwin", 13, 7, 50, 61)
    same(array(out), array(ref)[:, 7:68, 13:63])
    out = tmp_path / "small.tif"
    translate(conn, out, "-outsize", "25%", "25%", "-r", "nearest")
    same(array(out), decimated(ref, tmp_path, "eadp"))
    out = tmp_path / "cog.tif"
    translate(conn, out, "-of", "COG", "-co", "BLOCKSIZE=32")
    same(array(out), array(ref))


def test_driver_read_windows(eadp_driver):
    conn, ref = eadp_driver
    ds, rds = gdal.Open(conn), gdal.Open(str(ref))
    for xo, yo, xs, ys, bx, by in WINDOWS:
        for btype in (gdal.GDT_Float32, gdal.GDT_Float64, gdal.GDT_Int16):
            kw = dict(xoff=xo, yoff=yo, xsize=xs, ysize=ys, buf_type=btype)
            if bx:
                kw.update(buf_xsize=bx, buf_ysize=by, resample_alg=gdal.GRIORA_NearestNeighbour)
            same(ds.ReadAsArray(**kw), rds.ReadAsArray(**kw))


def test_driver_threads_compute_once(tmp_path):
    """Eight threads open and read the same (new) result at once: all get the CLI's
    values and the result is computed once."""
    params = {"components": "3", "count": "2", "step": "33"}
    ref = array(cli_for("eadp", params, SAMSON, tmp_path))
    before = computations()
    conn = connection("eadp", params, SAMSON)

    def read():
        ds = gdal.Open(conn)
        return np.stack([ds.GetRasterBand(b + 1).ReadAsArray(
            0, 0, 95, 95) for b in reversed(range(ds.RasterCount))][::-1])
    for r in in_threads(read, 8):
        same(r, ref)
    assert computations() == before + 1


def test_driver_two_parameter_sets(tmp_path):
    a_params, b_params = {"components": "2", "count": "2"}, {"components": "3", "count": "1"}
    a_ref = array(cli_for("eadp", a_params, SAMSON, tmp_path, "a.tif"))
    b_ref = array(cli_for("eadp", b_params, SAMSON, tmp_path, "b.tif"))
    a, b = gdal.Open(connection("eadp", a_params, SAMSON)), gdal.Open(connection("eadp", b_params, SAMSON))
    same(b.ReadAsArray(), b_ref)
    same(a.ReadAsArray(), a_ref)
    same(b.ReadAsArray(10, 10, 5, 5), b_ref[:, 10:15, 10:15])


def test_driver_cache_limit_evicts(tmp_path):
    """With HYPROF_CACHE_MAX below two results, reading a second evicts the first,
    which is computed again (right) when read again; with room, it is not."""
    pa, pb = {"levels": "1", "wavelet": "db3"}, {"levels": "2", "wavelet": "db3"}
    ra, rb = array(cli_for("dwt", pa, SAMSON, tmp_path, "a.tif")), array(cli_for("dwt", pb, SAMSON, tmp_path, "b.tif"))
    ca, cb = connection("dwt", pa, SAMSON), connection("dwt", pb, SAMSON)
    size_a = ra.size * 4
    gdal.SetConfigOption("HYPROF_CACHE_MAX", str(size_a + 1000))
    try:
        n0 = computations()
        same(gdal.Open(ca).ReadAsArray(), ra)
        same(gdal.Open(cb).ReadAsArray(), rb)  # evicts a (and the probe's dwt)
        ds = gdal.Open(ca)
        assert int(ds.GetMetadataItem("LIMIT", "HYPROF_CACHE")) == size_a + 1000
        assert int(ds.GetMetadataItem("BYTES", "HYPROF_CACHE")) <= size_a + 1000 or \
            int(ds.GetMetadataItem("ENTRIES", "HYPROF_CACHE")) == 1
        same(ds.ReadAsArray(), ra)
        assert computations() == n0 + 3, "a was not evicted"
        gdal.SetConfigOption("HYPROF_CACHE_MAX", "1G")
        same(gdal.Open(cb).ReadAsArray(), rb)
        same(gdal.Open(ca).ReadAsArray(), ra)
        n1 = computations()
        same(gdal.Open(cb).ReadAsArray(), rb)
        same(gdal.Open(ca).ReadAsArray(), ra)
        assert computations() == n1, "evicted although the cache had room"
    finally:
        gdal.SetConfigOption("HYPROF_CACHE_MAX", None)


def test_driver_nodata_crs_geotransform(tmp_path):
    """An input with nodata, masked pixels and its own CRS: the driver's output has
    the CLI's nodata (NaN, as every float output), masked pixels and
    georeference; an input without nodata but with NaN gets NaN nodata too."""
    x = array(SAMSON).astype(np.float32)[:40, :50, :60]
    x[:, 5, 6] = -1.0
    x[7, 30, 31] = -1.0
    ref_ds = gdal.Open(str(SAMSON))
    cube = write_cube(tmp_path / "nd.tif", x, nodata=-1.0)
    ds = gdal.Open(str(cube), gdal.GA_Update)
    ds.SetGeoTransform((1000.5, 2.0, 0.0, 5000.25, 0.0, -2.0))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(3035)
    ds.SetSpatialRef(srs)
    ds = None
    params = {"components": "2", "count": "2"}
    ref = cli_for("eadp", params, cube, tmp_path)
    out = tmp_path / "out.tif"
    translate(connection("eadp", params, cube), out)
    o, r = gdal.Open(str(out)), gdal.Open(str(ref))
    same(o.ReadAsArray(), r.ReadAsArray())
    assert np.isnan(o.GetRasterBand(1).GetNoDataValue())
    assert np.isnan(r.GetRasterBand(1).GetNoDataValue())
    assert np.isnan(o.ReadAsArray()[0, 5, 6]) and np.isnan(o.ReadAsArray()[3, 30, 31])
    assert o.GetGeoTransform() == (1000.5, 2.0, 0.0, 5000.25, 0.0, -2.0)
    assert o.GetSpatialRef().IsSame(r.GetSpatialRef())
    assert o.GetSpatialRef().IsSame(gdal.Open(str(cube)).GetSpatialRef())
    assert o.GetSpatialRef().GetAuthorityCode(None) == "3035"

    x[:, 5, 6] = 3.0
    x[7, 30, 31] = np.nan
    cube = write_cube(tmp_path / "nan.tif", x)
    ref = cli_for("eadp", params, cube, tmp_path, "cli_nan.tif")
    d = gdal.Open(connection("eadp", params, cube))
    assert np.isnan(d.GetRasterBand(1).GetNoDataValue())
    assert np.isnan(gdal.Open(str(ref)).GetRasterBand(1).GetNoDataValue())
    same(d.ReadAsArray(), array(ref))
    del ref_ds


def test_driver_open_is_cheap(tmp_path):
    """Opening (size, band count, CRS) computes nothing; the first pixel read does."""
    before = computations()
    ds = gdal.Open(connection("eadp", {"components": "2", "count": "5", "step": "17"}, SAMSON))
    assert (ds.RasterXSize, ds.RasterYSize, ds.RasterCount) == (95, 95, 12)
    ds.GetGeoTransform()
    ds.GetSpatialRef()
    assert computations() == before
    ds.GetRasterBand(5).ReadAsArray(0, 0, 2, 2)
    assert computations() == before + 1


@pytest.mark.parametrize("op,params,bands", [
    ("emp", {}, 45), ("wmcd", {"radii": "1,3"}, 75), ("sspp", {"endmembers": "3"}, 4),
    ("unmix", {"endmembers": "3"}, 4), ("unmix", {"model": str(SAMPLES / "samson_unmix.csv")}, 4),
], ids=["emp", "wmcd", "sspp", "unmix", "unmix-model"])
def test_driver_band_count_without_computing(op, params, bands):
    """Every operation that knows its band count from its parameters tells it at
    open (unmix --endmembers auto cannot: HySime decides)."""
    before = computations()
    ds = gdal.Open(connection(op, params, SAMSON))
    assert ds.RasterCount == bands
    assert computations() == before


# ---- bad input: a GDAL error naming the problem, never a crash ------------------------

def bad_vrt(tmp_path, func, args, sources):
    n = len(list(tmp_path.glob("bad_*.vrt")))
    return write_vrt(tmp_path / ("bad_%d_%s.vrt" % (n, func)), SAMSON,
                     [derived_band(1, func, args, sources)])


def bad_cases(tmp_path):
    """(id, dataset name, whether opening or reading fails, expected text)."""
    (tmp_path / "malformed.hyprof").write_text('{"operation": "eadp", "parameters": {"count": 2,')
    (tmp_path / "noop.hyprof").write_text('{"input": "x.tif"}')
    (tmp_path / "extra.hyprof").write_text('{"operation": "pca", "input": "%s", "outptu": 1}' % SAMSON)
    (tmp_path / "badparam.hyprof").write_text(
        '{"operation": "pca", "input": "%s", "parameters": {"components": {"a": 1}}}' % SAMSON)
    (tmp_path / "missing_in.hyprof").write_text('{"operation": "pca", "input": "nowhere.tif"}')
    s = SAMSON
    bands = all_bands(SAMSON)
    return [
        ("unknown op", "HYPROF:eadx:count=2:%s" % s, "open", "unknown operation 'eadx'"),
        ("unknown param", "HYPROF:eadp:count=2,sigmaa=1:%s" % s, "open", "unknown parameter 'sigmaa'"),
        ("bad value", "HYPROF:eadp:components=abc:%s" % s, "open", "'abc' is not an integer"),
        ("out of range", "HYPROF:eadp:components=500:%s" % s, "open", "components 500 is out of range"),
        ("bad choice", "HYPROF:dwt:wavelet=db99:%s" % s, "open", "'db99' is not one of"),
        ("writes a file", "HYPROF:pca:save-model=/tmp/m.pca:%s" % s, "open", "save-model"),
        ("malformed name", "HYPROF:eadp", "open", "HYPROF:operation:key=value"),
        ("missing input", "HYPROF:eadp::/nonexistent/scene.tif", "open", "'/nonexistent/scene.tif' does not exist"),
        ("missing input (descriptor)", str(tmp_path / "missing_in.hyprof"), "open", "nowhere.tif' does not exist"),
        ("missing model", "HYPROF:pca:model=/nonexistent.pca:%s" % s, "open", "'/nonexistent.pca' does not exist"),
        ("model band count", "HYPROF:pca:model=%s:%s" % (PCA_MODEL, INDIAN_PINES), "open",
         "fitted on 156 bands but the input has 200"),
        ("malformed JSON", str(tmp_path / "malformed.hyprof"), "open", "is not valid JSON"),
        ("no operation", str(tmp_path / "noop.hyprof"), "open", '"operation"'),
        ("unknown member", str(tmp_path / "extra.hyprof"), "open", '"outptu"'),
        ("object parameter", str(tmp_path / "badparam.hyprof"), "open", "parameter 'components'"),
        ("pixel: model band count", str(bad_vrt(tmp_path, "hyprof_pca", {"model": PCA_MODEL}, bands[:10])),
         "read", "fitted on 156 bands but the band has 10 sources"),
        ("pixel: missing model", str(bad_vrt(tmp_path, "hyprof_pca", {"model": "/no/such.pca"}, bands)),
         "read", "'/no/such.pca' does not exist"),
        ("pixel: not a model", str(bad_vrt(tmp_path, "hyprof_pca", {"model": SAMSON}, bands)),
         "read", "cannot load PCA model"),
        ("pixel: component", str(bad_vrt(tmp_path, "hyprof_dwt", {"coefficient": 99}, bands)),
         "read", "coefficient=99 is out of range"),
        ("pixel: wavelet", str(bad_vrt(tmp_path, "hyprof_dwt", {"wavelet": "db99"}, bands)),
         "read", "'db99' is not one of"),
        ("pixel: scale", str(bad_vrt(tmp_path, "hyprof_scale", {"scale": "two"}, bands[:1])),
         "read", "scale='two' is not a finite number"),
        ("pixel: rmse sources", str(bad_vrt(tmp_path, "hyprof_rmse", {}, bands[:3])),
         "read", "has 3 sources"),
        ("classify: model band count", str(bad_vrt(tmp_path, "hyprof_classify", {"model": SVM_MODEL}, bands)),
         "read", "was trained on 15 bands but the band has 156 sources"),
        ("classify: missing model", str(bad_vrt(tmp_path, "hyprof_classify", {"model": "/no/such.model"}, bands)),
         "read", "'/no/such.model' does not exist"),
        ("classify: not a model", str(bad_vrt(tmp_path, "hyprof_classify", {"model": PCA_MODEL}, bands)),
         "read", "cannot load classifier model"),
        ("decision: class index", str(bad_vrt(tmp_path, "hyprof_decision", {"model": SVM_MODEL, "class": 17}, bands[:15])),
         "read", "class=17 is out of range: model"),
        ("decision: no class", str(bad_vrt(tmp_path, "hyprof_decision", {"model": SVM_MODEL}, bands[:15])),
         "read", "argument 'class' is missing"),
        ("abundance: band count", str(bad_vrt(tmp_path, "hyprof_abundance", {"endmembers": ENDMEMBERS}, bands[:10])),
         "read", "has 156 bands but the band has 10 sources"),
        ("abundance: endmember index", str(bad_vrt(tmp_path, "hyprof_abundance", {"endmembers": ENDMEMBERS, "endmember": 4}, bands)),
         "read", "endmember=4 is out of range: set"),
        ("abundance: missing set", str(bad_vrt(tmp_path, "hyprof_abundance", {"endmembers": "/no/em.csv"}, bands)),
         "read", "'/no/em.csv' does not exist"),
        ("abundance: not a set", str(bad_vrt(tmp_path, "hyprof_abundance", {"endmembers": PCA_MODEL}, bands)),
         "read", "cannot load endmember set"),
        ("abundance: method", str(bad_vrt(tmp_path, "hyprof_abundance", {"endmembers": ENDMEMBERS, "method": "lsq"}, bands)),
         "read", "method='lsq' is not one of"),
    ]


def test_bad_input(tmp_path):
    for cid, name, when, text in bad_cases(tmp_path):
        with pytest.raises(RuntimeError) as e:
            ds = gdal.Open(name)
            assert when == "read", "%s: opened" % cid
            ds.GetRasterBand(1).ReadAsArray()
        assert text in str(e.value), "%s: %s" % (cid, e.value)


def test_bad_input_gdal_translate(tmp_path):
    """The programs too: exit 1 with the message, no crash, nothing left."""
    for cid, name, when, text in bad_cases(tmp_path)[::3]:
        out = tmp_path / "out.tif"
        r = translate(name, out, ok=False)
        assert r.returncode == 1, "%s: %d %s" % (cid, r.returncode, r.stderr)
        assert text in r.stderr, "%s: %s" % (cid, r.stderr)


def asan_build():
    d = Path(os.environ.get("HYPROF_ASAN_BUILD", ROOT / "build-asan"))
    return d if (d / "gdal_driver" / "gdal_HYPROF.so").is_file() else None


@pytest.mark.skipif(UNDER_ASAN or asan_build() is None,
                    reason="no AddressSanitizer build (cmake -B build-asan -DHYPROF_ASAN=ON)")
def test_bad_input_under_asan():
    """The bad-input and driver tests again, with the plugin and library built with
    -fsanitize=address and libasan preloaded into Python: any invalid access aborts."""
    d = asan_build()
    def lib(name):
        return subprocess.run(["gcc", "-print-file-name=" + name], capture_output=True,
                              text=True).stdout.strip()
    # libstdc++ preloaded too: Python does not link it, and ASan must find the real
    # __cxa_throw when it starts (PROJ throws and catches internally)
    env = dict(os.environ, LD_PRELOAD="%s:%s" % (lib("libasan.so"), lib("libstdc++.so")),
               HYPROF_UNDER_ASAN="1",
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               HYPROF_GDAL_PLUGIN_DIR=str(d / "gdal_driver"), GDAL_DRIVER_PATH=str(d / "gdal_driver"),
               HYPROF_EXE=str(d / "cli" / "hyprof"))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                        "-k", "bad_input or threads or cache_limit or two_parameter or "
                        "read_windows or over_driver or nodata_classify"],
                       capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "passed" in r.stdout and "AddressSanitizer" not in r.stderr
