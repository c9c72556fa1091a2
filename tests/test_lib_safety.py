"""The library's parsers, limits and cancellation seen through the CLI (issue 23,
items 6, 7 and 11): model files cut short or written with CRLF, sizes a model
declares but does not hold, list parameters with an empty element, wavelength
counts, absurd FED schedules, cancellation inside a long diffusion, and thread
counts under a memory limit."""

import resource
import signal
import subprocess
import time

import numpy as np
import pytest
from osgeo import gdal

from conftest import (EXIT_CANCELLED, EXIT_OK, EXIT_USAGE, INDIAN_PINES, SAMPLES, SAMSON,
                      exe_path, run, run_ok)

SVM_MODEL = SAMPLES / "indian_pines_svm.model"


def one_line_error(r, *tokens):
    """stderr is one line (no raw newline or CR inside a message) naming tokens."""
    err = r.stderr.rstrip("\n")
    assert "\n" not in err and "\r" not in err, repr(r.stderr)
    for t in tokens:
        assert t in err, (t, err)


@pytest.fixture(scope="module")
def ip_profile(tmp_path_factory):
    """The 15-band EADP profile the sample SVM model was trained on."""
    out = tmp_path_factory.mktemp("profile") / "ip_eadp.tif"
    run_ok("eadp", "--components", 3, "--count", 4, "--progress", "none", INDIAN_PINES, out)
    return out


def labels(path):
    return gdal.Open(str(path)).ReadAsArray()


def test_svm_model_cut_inside_last_line_is_refused(ip_profile, tmp_path):
    text = SVM_MODEL.read_bytes()
    cut = tmp_path / "svm_truncated.model"
    cut.write_bytes(text[:-300])  # inside the last support vector's line
    r = run("classify", "--model", cut, "--progress", "none", ip_profile, tmp_path / "c.tif")
    assert r.returncode == EXIT_USAGE, r.stderr
    one_line_error(r, "svm_truncated.model", "line ")
    assert not (tmp_path / "c.tif").exists()


def test_crlf_model_classifies_as_the_original(ip_profile, tmp_path):
    crlf = tmp_path / "crlf.model"
    crlf.write_bytes(SVM_MODEL.read_bytes().replace(b"\n", b"\r\n"))
    run_ok("classify", "--model", SVM_MODEL, "--progress", "none", ip_profile, tmp_path / "a.tif")
    run_ok("classify", "--model", crlf, "--progress", "none", ip_profile, tmp_path / "b.tif")
    assert np.array_equal(labels(tmp_path / "a.tif"), labels(tmp_path / "b.tif"))


@pytest.mark.parametrize("key,line", [
    ("total_sv", "total_sv 100000000"),
    ("class 16 ", "class 4294967312 255 254 137 255 Stone-Steel-Towers"),  # was read as 16
    ("nr_class", "nr_class -1"),
])
def test_bad_model_numbers_are_format_errors(ip_profile, tmp_path, key, line):
    text = SVM_MODEL.read_text()
    at = text.index(key)
    bad = text[:at] + line + text[text.index("\n", at):]
    path = tmp_path / "bad.model"
    path.write_text(bad)
    r = run("classify", "--model", path, "--progress", "none", ip_profile, tmp_path / "c.tif")
    assert r.returncode == EXIT_USAGE, r.stderr
    one_line_error(r, "bad.model", "line ")


def test_pca_model_declaring_huge_sizes(tmp_path):
    text = (SAMPLES / "samson.pca").read_text()
    text = text.replace("bands 156\n", "bands 1000000\n").replace("components 3\n",
                                                                   "components 1000000\n")
    path = tmp_path / "huge.pca"
    path.write_text(text)
    r = run("pca", "--model", path, "--progress", "none", SAMSON, tmp_path / "p.tif")
    assert r.returncode == EXIT_USAGE, r.stderr
    one_line_error(r, "huge.pca", "components")


@pytest.mark.parametrize("value", ["area,", ",area", "area,,std"])
def test_eap_attribute_empty_element(tmp_path, value):
    r = run("eap", "--attribute", value, "--progress", "none", SAMSON, tmp_path / "o.tif")
    assert r.returncode == EXIT_USAGE, r.stderr
    one_line_error(r, "empty element")


def test_unmix_wavelengths_count_must_match(tmp_path):
    r = run("unmix", "--endmembers", 3, "--wavelengths", "400,500,600", "--endmembers-csv",
            tmp_path / "e.csv", "--progress", "none", SAMSON, tmp_path / "o.tif")
    assert r.returncode == EXIT_USAGE, r.stderr
    one_line_error(r, "3 values", "156 bands")
    assert not (tmp_path / "o.tif").exists() and not (tmp_path / "e.csv").exists()


def tiny(tmp_path):
    path = tmp_path / "tiny.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 2, 2, 3, gdal.GDT_Float32)
    ds.WriteRaster(0, 0, 2, 2, np.arange(12, dtype=np.float32).tobytes())
    ds = None
    return path


def test_eadp_largest_step_is_refused_at_once(tmp_path):
    t0 = time.monotonic()
    r = run("eadp", "--step", "1e9", "--components", 2, "--progress", "none", tiny(tmp_path),
            tmp_path / "o.tif", timeout=60)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert time.monotonic() - t0 < 20
    one_line_error(r, "--step 1e+09", "FED steps")


def test_eadp_long_increment_is_cancellable(tmp_path):
    """One increment of 1000 cycles of ~1,900 steps on Indian Pines (minutes):
    SIGTERM ends it with exit 3 within seconds, nothing written."""
    out = tmp_path / "o.tif"
    p = subprocess.Popen([exe_path(), "eadp", "--components", "1", "--count", "1", "--step",
                          "3e8", "--cycles", "1000", "--backend", "cpu", "--progress", "none",
                          str(INDIAN_PINES), str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    p.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    try:
        _, err = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("eadp ignored SIGTERM for 15 s")
    assert p.returncode == EXIT_CANCELLED, err
    assert time.monotonic() - t0 < 15
    assert not out.exists()


def sanitized():
    """AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot apply."""
    with open(exe_path(), "rb") as f:
        return b"__asan_init" in f.read()


def test_threads_beyond_the_processors_under_a_memory_limit(tmp_path):
    if sanitized():
        pytest.skip("RLIMIT_AS under AddressSanitizer")

    def limit():  # room for the CUDA libraries, not for 4096 thread stacks
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    r = run("pca", "--threads", 4096, "--progress", "none", SAMSON, tmp_path / "p.tif",
            preexec_fn=limit)
    assert r.returncode == EXIT_OK, r.stderr


def test_class_metadata_number_overflow_is_not_wrapped(ip_profile, tmp_path):
    """A CLASS_<v> name item of a label map whose v overflows 32 bits names no
    class (it was read modulo 2^32: CLASS_4294967312 named class 16)."""
    src = gdal.Open(str(SAMPLES / "indian_pines_train.tif"))
    labels_path = tmp_path / "labels.tif"
    gdal.SetConfigOption("GDAL_PAM_ENABLED", "NO")
    try:
        ds = gdal.GetDriverByName("GTiff").Create(str(labels_path), src.RasterXSize,
                                                  src.RasterYSize, 1, gdal.GDT_Byte)
        ds.GetRasterBand(1).WriteArray(src.GetRasterBand(1).ReadAsArray())
        md = {k: v for k, v in src.GetMetadata().items()
              if k.startswith("CLASS_") and k not in ("CLASS_16", "CLASS_NAMES")}
        md["CLASS_4294967312"] = "Bogus"
        ds.SetMetadata(md)
        ds = None
    finally:
        gdal.SetConfigOption("GDAL_PAM_ENABLED", None)
    model = tmp_path / "m.model"
    run_ok("train", "--classifier", "elm", "--neurons", 20, "--labels", labels_path,
           "--progress", "none", ip_profile, model)
    classes = [l for l in model.read_text().splitlines() if l.startswith("class ")]
    assert len(classes) == 16 and "Bogus" not in classes[15], classes[15]


def test_driver_refuses_the_largest_step_when_opening():
    """The HYPROF driver's open asks the band count; the FED bound is checked
    there, before gdalinfo or a read computes anything."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="FED steps"):
        gdal.Open("HYPROF:eadp:step=1e9:%s" % SAMSON)
    assert time.monotonic() - t0 < 20
