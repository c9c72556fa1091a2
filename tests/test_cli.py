"""The CLI contract of DESIGN.md, end to end, through the `hyprof` executable.

    hyprof --version | --help | describe --json
    hyprof info [--json] INPUT
    hyprof <op> [options] INPUT OUTPUT
    exit codes: 0 ok, 1 runtime failure, 2 bad arguments or unreadable input,
                3 cancelled (SIGINT/SIGTERM); a one-line message on stderr names
                the bad value; outputs are written to a temporary name and renamed,
                never replace an existing file without --overwrite, keep CRS and
                geotransform, use NaN as nodata where the input has nodata, are
                tiled and compressed, name every band
                and record the operation and its parameters.

Run: /usr/bin/python3 -m pytest tests/test_cli.py
"""

import json
import os
import re
import shutil
import signal
import subprocess

import numpy as np
import pytest

from conftest import (EXIT_CANCELLED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, INDIAN_PINES, SAMSON,
                      exe_path, gdal, is_root, json_lines, leftovers, message_lines, read_cube,
                      run, run_ok, same_crs, write_cube)

OPS = ["pca", "dwt"]
ND = -9999


@pytest.fixture(scope="module")
def registry():
    r = run_ok("describe", "--json")
    return json.loads(r.stdout)


def op_entry(registry, name):
    ops = {o["name"]: o for o in registry["operations"]}
    assert name in ops, "describe --json lacks operation %s" % name
    return ops[name]


@pytest.fixture(scope="module")
def samson_nodata(tmp_path_factory):
    """Samson with nodata -9999 on a block of pixels."""
    cube = read_cube(SAMSON, np.int16).astype(np.int16)
    cube[:, 0:12, 40:70] = ND
    folder = tmp_path_factory.mktemp("cli_inputs")
    return write_cube(folder / "samson_nodata.tif", cube, nodata=ND, like=SAMSON)


def gpu_present():
    r = run("--version")
    return "device 0" in r.stdout


# ---- version, help, describe, info --------------------------------------------

def test_version(registry):
    r = run("--version")
    assert r.returncode == EXIT_OK, r.stderr
    assert re.match(r"^hyprof \d+\.\d+\.\d+", r.stdout), r.stdout
    assert registry["hyprof"] in r.stdout
    assert "GDAL" in r.stdout


def test_help_lists_operations(registry):
    r = run("--help")
    assert r.returncode == EXIT_OK, r.stderr
    assert "usage" in r.stdout.lower()
    for op in registry["operations"]:
        assert re.search(r"^\s+%s\s" % re.escape(op["name"]), r.stdout, re.M), op["name"]
    for code in ("0", "1", "2", "3"):
        assert code in r.stdout


def test_no_arguments_is_usage_error():
    r = run()
    assert r.returncode == EXIT_USAGE
    assert "usage" in r.stderr.lower()


def test_unknown_operation(tmp_path):
    r = run("frobnicate", SAMSON, tmp_path / "out.tif", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE
    assert "frobnicate" in r.stderr
    assert not leftovers(tmp_path, "out.tif")


@pytest.mark.parametrize("op", OPS)
def test_op_help_lists_every_parameter(registry, op):
    r = run(op, "--help")
    assert r.returncode == EXIT_OK, r.stderr
    assert r.stdout.startswith("usage: hyprof %s" % op)
    entry = op_entry(registry, op)
    for p in entry["params"] + registry["common"]:
        assert re.search(r"--%s\b" % re.escape(p["name"]), r.stdout), \
            "hyprof %s --help does not list --%s" % (op, p["name"])
        if p.get("choices"):
            for c in p["choices"]:
                assert c in r.stdout, (p["name"], c)


def test_describe_json(registry):
    assert set(OPS) <= {o["name"] for o in registry["operations"]}
    assert registry["exit_codes"] == {"ok": 0, "runtime": 1, "usage": 2, "cancelled": 3}
    common = {p["name"] for p in registry["common"]}
    assert {"backend", "device", "threads", "progress", "overwrite"} <= common
    for op in registry["operations"]:
        for key in ("name", "group", "help", "params"):
            assert key in op, (op.get("name"), key)
        for p in op["params"] + registry["common"]:
            for key in ("name", "type", "default", "help"):
                assert key in p, "%s.%s lacks '%s'" % (op["name"], p.get("name"), key)
            assert p["help"], (op["name"], p["name"])
            if p["type"] == "choice":
                assert p["choices"], p
                assert p["default"] is None or p["default"] in p["choices"], p
            if p["type"] == "int" and p["default"] is not None:
                assert p["min"] <= p["default"] <= p["max"], p
    pca = {p["name"]: p for p in op_entry(registry, "pca")["params"]}
    assert pca["components"]["default"] == 7
    dwt = {p["name"]: p for p in op_entry(registry, "dwt")["params"]}
    assert {"levels", "wavelet"} <= set(dwt)


def test_describe_needs_json():
    r = run("describe")
    assert r.returncode == EXIT_USAGE


def test_info_text():
    r = run("info", SAMSON)
    assert r.returncode == EXIT_OK, r.stderr
    out = r.stdout
    assert re.search(r"\b95\s*x\s*95\b", out) and re.search(r"\b156 bands\b", out)
    assert "Int16" in out
    assert "EPSG:32610" in out
    assert re.search(r"^band 156: ", out, re.M)


def test_info_json():
    for path in (SAMSON, INDIAN_PINES):
        r = run("info", "--json", path)
        assert r.returncode == EXIT_OK, r.stderr
        d = json.loads(r.stdout)
        ds = gdal.Open(str(path))
        assert (d["width"], d["height"], d["bands"]) == (ds.RasterXSize, ds.RasterYSize,
                                                         ds.RasterCount)
        assert d["data_type"] == gdal.GetDataTypeName(ds.GetRasterBand(1).DataType)
        np.testing.assert_allclose(d["geotransform"], ds.GetGeoTransform())
        assert d["valid_pixels"] == ds.RasterXSize * ds.RasterYSize
        assert len(d["band_names"]) == ds.RasterCount
    d = json.loads(run("info", "--json", SAMSON).stdout)
    assert d["epsg"].endswith("32610")


def test_info_missing_file(tmp_path):
    r = run("info", tmp_path / "nothere.tif", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE
    assert "nothere.tif" in r.stderr


# ---- what every output carries ------------------------------------------------

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("with_nodata", [False, True], ids=["no-nodata", "nodata"])
def test_output_contract(registry, samson_nodata, tmp_path, op, with_nodata):
    src = samson_nodata if with_nodata else SAMSON
    out = tmp_path / "out.tif"
    r = run_ok(op, "--backend", "cpu", src, out, cwd=tmp_path)
    assert "out.tif" in r.stdout, "results are reported on stdout: %r" % r.stdout
    assert not message_lines(r.stderr), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tif"], "stray files"
    ds_in, ds = gdal.Open(str(src)), gdal.Open(str(out))
    assert (ds.RasterXSize, ds.RasterYSize) == (ds_in.RasterXSize, ds_in.RasterYSize)
    assert same_crs(src, out), "CRS not kept"
    assert ds.GetGeoTransform() == ds_in.GetGeoTransform()
    descriptions = []
    for i in range(ds.RasterCount):
        band = ds.GetRasterBand(i + 1)
        nd = band.GetNoDataValue()
        assert (nd is not None and np.isnan(nd)) if with_nodata else nd is None, \
            "band %d nodata %r: NaN where the input has nodata, else none" % (i + 1, nd)
        assert band.DataType == gdal.GDT_Float32
        bx, by = band.GetBlockSize()
        assert by > 1 and bx % 16 == 0 and by % 16 == 0, "not tiled: block %dx%d" % (bx, by)
        descriptions.append(band.GetDescription())
    assert all(d.strip() for d in descriptions), descriptions
    assert len(set(descriptions)) == len(descriptions), "band names repeat: %s" % descriptions
    assert ds.GetMetadata("IMAGE_STRUCTURE").get("COMPRESSION") == "ZSTD"
    md = ds.GetMetadata()
    assert md.get("HYPROF_OPERATION") == op
    for p in op_entry(registry, op)["params"]:
        if p["default"] is None:
            continue
        key = "HYPROF_PARAM_" + p["name"].upper().replace("-", "_")
        assert key in md, "%s missing (have %s)" % (key, sorted(md))
        assert md[key] == str(p["default"]), (key, md[key], p["default"])
    if with_nodata:
        a = read_cube(out)
        assert np.all(np.isnan(a[:, 0:12, 40:70]))
        assert not np.any(np.isnan(a[:, 12:, :]))


def test_given_parameters_recorded(tmp_path):
    out = tmp_path / "out.tif"
    run_ok("dwt", "--wavelet", "db4", "--levels", "3", INDIAN_PINES, out, cwd=tmp_path)
    md = gdal.Open(str(out)).GetMetadata()
    assert md["HYPROF_OPERATION"] == "dwt"
    assert md["HYPROF_PARAM_WAVELET"] == "db4"
    assert md["HYPROF_PARAM_LEVELS"] == "3"
    assert gdal.Open(str(out)).RasterCount == 25


# ---- --overwrite and the atomic rule -----------------------------------------

def test_overwrite(tmp_path):
    out = tmp_path / "out.tif"
    run_ok("pca", SAMSON, out, cwd=tmp_path)
    before = out.read_bytes()
    mtime = out.stat().st_mtime_ns
    r = run("pca", "--components", 3, SAMSON, out, cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, r.stderr
    msg = message_lines(r.stderr)
    assert len(msg) == 1 and "out.tif" in msg[0] and "--overwrite" in msg[0], r.stderr
    assert out.read_bytes() == before and out.stat().st_mtime_ns == mtime
    assert leftovers(tmp_path, "out.tif") == ["out.tif"]
    run_ok("pca", "--components", 3, "--overwrite", SAMSON, out, cwd=tmp_path)
    assert gdal.Open(str(out)).RasterCount == 3
    assert leftovers(tmp_path, "out.tif") == ["out.tif"]


def test_overwrite_applies_to_model_file(tmp_path):
    model = tmp_path / "m.pca"
    model.write_text("precious\n")
    out = tmp_path / "out.tif"
    r = run("pca", "--save-model", model, SAMSON, out, cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "m.pca" in r.stderr
    assert model.read_text() == "precious\n"
    assert not leftovers(tmp_path, "out.tif")
    run_ok("pca", "--save-model", model, "--overwrite", SAMSON, out, cwd=tmp_path)
    assert model.read_text().startswith("hyprof-pca-model")


def test_output_is_a_folder(tmp_path):
    (tmp_path / "out.tif").mkdir()
    r = run("pca", "--overwrite", SAMSON, tmp_path / "out.tif", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE
    assert "out.tif" in r.stderr
    assert (tmp_path / "out.tif").is_dir() and not any((tmp_path / "out.tif").iterdir())


# ---- bad inputs: exit code, one message line naming the problem, no output --------

def assert_refused(r, folder, out_name, code, *tokens):
    """Refused with `code`, one stderr line containing every token, nothing left."""
    assert r.returncode == code, "exit %d, expected %d; stderr: %s" % (r.returncode, code,
                                                                     r.stderr)
    msg = message_lines(r.stderr)
    assert len(msg) == 1, "expected a one-line message, got %d lines:\n%s" % (len(msg),
                                                                            r.stderr)
    for t in tokens:
        if isinstance(t, re.Pattern):
            assert t.search(msg[0]), "%r not in %r" % (t.pattern, msg[0])
        else:
            assert str(t) in msg[0], "%r not in %r" % (str(t), msg[0])
    assert not leftovers(folder, out_name), leftovers(folder, out_name)
    assert not r.stdout.strip() or "wrote" not in r.stdout, r.stdout


def make_one_band(folder):
    return write_cube(folder / "one_band.tif", read_cube(SAMSON, np.int16)[:1].astype(np.int16),
                      like=SAMSON)


def make_one_pixel(folder):
    return write_cube(folder / "one_pixel.tif",
                      read_cube(SAMSON, np.int16)[:, :1, :1].astype(np.int16), like=SAMSON)


def make_all_nodata(folder):
    return write_cube(folder / "all_nodata.tif", np.full((10, 8, 9), ND, np.int16), nodata=ND,
                      like=SAMSON)


def make_text(folder):
    p = folder / "notes.txt"
    p.write_text("this is not a raster\n" * 20)
    return p


def make_truncated(folder):
    p = folder / "truncated.tif"
    shutil.copyfile(SAMSON, p)
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size // 2)
    return p


BAD_INPUTS = {
    # id: (op, input maker, extra args, expected exit code, tokens that name the problem)
    "missing-file": ("pca", lambda d: d / "missing.tif", [], EXIT_USAGE, ["missing.tif"]),
    "missing-file-dwt": ("dwt", lambda d: d / "missing.tif", [], EXIT_USAGE, ["missing.tif"]),
    "not-a-raster": ("pca", make_text, [], EXIT_USAGE, ["notes.txt"]),
    "truncated-geotiff": ("pca", make_truncated, [], EXIT_USAGE, ["truncated.tif"]),
    "truncated-geotiff-dwt": ("dwt", make_truncated, [], EXIT_USAGE, ["truncated.tif"]),
    "one-band-pca": ("pca", make_one_band, [], EXIT_USAGE, ["band", re.compile(r"\b1\b")]),
    "one-band-dwt": ("dwt", make_one_band, [], EXIT_USAGE, ["band", re.compile(r"\b1\b")]),
    "one-pixel-pca": ("pca", make_one_pixel, [], EXIT_USAGE, ["pixel"]),
    "all-nodata-pca": ("pca", make_all_nodata, [], EXIT_USAGE,
                       [re.compile(r"valid|nodata", re.I)]),
    # The issue lists "all-nodata image" among the bad inputs of every operation:
    # a per-pixel DWT of nothing is an all-nodata file that looks like a result.
    "all-nodata-dwt": ("dwt", make_all_nodata, ["--levels", "1"], EXIT_USAGE,
                       [re.compile(r"valid|nodata", re.I)]),
    "components-0": ("pca", lambda d: SAMSON, ["--components", "0"], EXIT_USAGE,
                     ["components", re.compile(r"\b0\b")]),
    "components-157": ("pca", lambda d: SAMSON, ["--components", "157"], EXIT_USAGE,
                       ["157", "156"]),
    "components-not-a-number": ("pca", lambda d: SAMSON, ["--components", "seven"], EXIT_USAGE,
                                ["seven"]),
    "unknown-option": ("pca", lambda d: SAMSON, ["--bogus"], EXIT_USAGE, ["--bogus"]),
    "unknown-option-dwt": ("dwt", lambda d: SAMSON, ["--bogus", "1"], EXIT_USAGE, ["--bogus"]),
    "bad-backend": ("pca", lambda d: SAMSON, ["--backend", "tpu"], EXIT_USAGE, ["tpu"]),
    "bad-progress": ("dwt", lambda d: SAMSON, ["--progress", "loud"], EXIT_USAGE, ["loud"]),
    "negative-threads": ("dwt", lambda d: SAMSON, ["--threads", "-3"], EXIT_USAGE, ["-3"]),
    "missing-model": ("pca", lambda d: SAMSON, ["--model", "nomodel.pca"], EXIT_USAGE,
                      ["nomodel.pca"]),
    "save-model-missing-folder": ("pca", lambda d: SAMSON, ["--save-model", "nodir/m.pca"],
                                  EXIT_USAGE, ["nodir"]),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input(tmp_path, case):
    op, maker, extra, code, tokens = BAD_INPUTS[case]
    src = maker(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = run(op, *extra, src, tmp_path / "out.tif", cwd=tmp_path)
    assert r.returncode >= 0, "killed by signal %d" % -r.returncode
    assert_refused(r, tmp_path, "out.tif", code, *tokens)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_bad_model_file(tmp_path):
    model = tmp_path / "garbage.pca"
    model.write_text("bands 156\nnonsense\n")
    r = run("pca", "--model", model, SAMSON, tmp_path / "out.tif", cwd=tmp_path)
    assert_refused(r, tmp_path, "out.tif", EXIT_USAGE, "garbage.pca")


def test_missing_output_folder(tmp_path):
    out = tmp_path / "no_such_dir" / "out.tif"
    r = run("pca", SAMSON, out, cwd=tmp_path)
    assert_refused(r, tmp_path, "out.tif", EXIT_USAGE, "no_such_dir")
    assert not (tmp_path / "no_such_dir").exists()


def test_output_folder_is_a_file(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    r = run("dwt", SAMSON, tmp_path / "file.txt" / "out.tif", cwd=tmp_path)
    assert_refused(r, tmp_path, "out.tif", EXIT_USAGE, "file.txt")
    assert (tmp_path / "file.txt").read_text() == "x"


def test_unwritable_output_folder(tmp_path):
    ro = tmp_path / "readonly"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        if is_root() or os.access(ro, os.W_OK):
            pytest.skip("permissions are not enforced for this user (root); "
                        "see test_output_folder_is_a_file and test_output_in_proc")
        r = run("pca", SAMSON, ro / "out.tif", cwd=tmp_path)
        assert_refused(r, ro, "out.tif", EXIT_USAGE, "readonly")
        assert not any(ro.iterdir())
    finally:
        os.chmod(ro, 0o755)


def test_output_in_proc(tmp_path):
    """A folder nobody can create files in, even root: /proc. Known only when the
    file is created, so a runtime failure (1) is as acceptable as a usage error
    (2); the message must still be one line and name the output."""
    name = "hyprof-test-%d.tif" % os.getpid()
    r = run("dwt", SAMSON, "/proc/" + name, cwd=tmp_path)
    assert r.returncode in (EXIT_RUNTIME, EXIT_USAGE), (r.returncode, r.stderr)
    msg = message_lines(r.stderr)
    assert len(msg) == 1, "expected a one-line message, got %d lines:\n%s" % (len(msg),
                                                                            r.stderr)
    assert name in msg[0]
    assert not os.path.exists("/proc/" + name)


# ---- progress --------------------------------------------------------------

@pytest.mark.parametrize("op", OPS)
def test_progress_json(tmp_path, op):
    r = run_ok(op, "--progress", "json", INDIAN_PINES, tmp_path / "out.tif", cwd=tmp_path)
    objs = json_lines(r.stderr)
    assert not message_lines(r.stderr), "non-JSON stderr lines: %s" % message_lines(r.stderr)
    prog = [o for o in objs if "progress" in o]
    assert len(prog) >= 3, objs
    values = [o["progress"] for o in prog]
    assert all(isinstance(v, (int, float)) for v in values)
    assert all(0.0 <= v <= 1.0 for v in values), values
    assert all(b >= a for a, b in zip(values, values[1:])), "progress goes back: %s" % values
    assert values[-1] == 1.0
    assert all(isinstance(o.get("stage"), str) and o["stage"] for o in prog)


def test_progress_none_is_quiet(tmp_path):
    r = run_ok("pca", "--progress", "none", SAMSON, tmp_path / "out.tif", cwd=tmp_path)
    assert r.stderr.strip() == ""


# ---- cancellation -----------------------------------------------------------

@pytest.fixture(scope="module")
def big_cube(tmp_path_factory):
    """Indian Pines tiled 4x4: 580x580x200 UInt16 (~235 MB), so that computing
    takes long enough (a second or more) to be interrupted."""
    folder = tmp_path_factory.mktemp("big")
    x = read_cube(INDIAN_PINES, np.uint16).astype(np.uint16)
    y = np.ascontiguousarray(np.tile(x, (1, 4, 4)))
    path = folder / "big.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(path), y.shape[2], y.shape[1], y.shape[0],
                                              gdal.GDT_UInt16, ["INTERLEAVE=BAND", "TILED=YES"])
    ds.WriteRaster(0, 0, y.shape[2], y.shape[1], y.tobytes())
    ds = None
    del x, y
    yield path
    path.unlink()   # pytest keeps the last temp folders: do not keep 235 MB in them


# (op, signal, options, the stage whose first progress line triggers the signal:
#  None = the first one after "read"). Cancelling while writing, after the model
#  was saved under its temporary name, checks that no side file survives either.
CANCEL_CASES = [("pca", "SIGINT", ["--save-model", "model.pca"], None),
                ("pca", "SIGTERM", [], None),
                ("dwt", "SIGINT", ["--wavelet", "db8"], None),
                ("pca", "SIGINT", ["--components", "200", "--save-model", "model.pca"], "write")]


def signal_at_progress(cmd, cwd, sig, wanted):
    """Runs cmd, sends `sig` at the first JSON progress line whose stage satisfies
    wanted(stage); returns (exit code, stderr, the line it was sent at or None)."""
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    lines, sent_at = [], None
    try:
        for line in p.stderr:
            lines.append(line)
            if sent_at is None and line.startswith("{") and wanted(json.loads(line).get("stage")):
                p.send_signal(sig)
                sent_at = line
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return rc, "".join(lines), sent_at


@pytest.mark.parametrize("op,sig,extra,when", CANCEL_CASES,
                         ids=["%s-%s-%s" % (c[0], c[1], c[3] or "compute") for c in CANCEL_CASES])
def test_cancel(big_cube, tmp_path, op, sig, extra, when):
    cmd = [exe_path(), op, "--progress", "json", "--threads", "1"] + extra + [
        str(big_cube), str(tmp_path / "out.tif")]
    rc, stderr, sent_at = signal_at_progress(
        cmd, tmp_path, getattr(signal, sig),
        lambda stage: stage and stage != "read" and (when is None or stage == when))
    assert sent_at is not None, "no progress line after 'read' was seen:\n" + stderr
    assert rc == EXIT_CANCELLED, "exit %d after %s (sent on %s)\n%s" % (rc, sig, sent_at.strip(),
                                                                      stderr[-2000:])
    json_lines(stderr)   # every JSON-looking line still parses
    msg = message_lines(stderr)
    assert len(msg) == 1 and "cancel" in msg[0].lower(), msg
    assert not leftovers(tmp_path, "out.tif"), leftovers(tmp_path, "out.tif")
    assert not leftovers(tmp_path, "model.pca"), leftovers(tmp_path, "model.pca")
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)


def test_cancel_while_reading(big_cube, tmp_path):
    """A signal during the read, whose bands several readers share: exit 3, one
    message, nothing written."""
    cmd = [exe_path(), "pca", "--progress", "json", "--threads", "2", str(big_cube),
           str(tmp_path / "out.tif")]
    rc, stderr, sent_at = signal_at_progress(cmd, tmp_path, signal.SIGINT,
                                             lambda stage: stage == "read")
    assert sent_at, "no progress line of the read was seen:\n" + stderr
    assert rc == EXIT_CANCELLED, "exit %d\n%s" % (rc, stderr[-2000:])
    msg = message_lines(stderr)
    assert len(msg) == 1 and "cancel" in msg[0].lower(), msg
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)


# ---- backends ---------------------------------------------------------------

def test_env_backend_cpu(tmp_path):
    env = dict(os.environ, HYPROF_BACKEND="cpu")
    out = tmp_path / "out.tif"
    run_ok("pca", SAMSON, out, cwd=tmp_path, env=env)
    assert gdal.Open(str(out)).GetMetadata().get("HYPROF_BACKEND") == "cpu"


def test_explicit_backend_beats_env(tmp_path):
    """HYPROF_BACKEND overrides auto only: --backend cpu wins over HYPROF_BACKEND=cuda."""
    env = dict(os.environ, HYPROF_BACKEND="cuda")
    out = tmp_path / "out.tif"
    run_ok("dwt", "--backend", "cpu", SAMSON, out, cwd=tmp_path, env=env)
    assert gdal.Open(str(out)).GetMetadata().get("HYPROF_BACKEND") == "cpu"


@pytest.mark.parametrize("how", ["option", "env"])
@pytest.mark.parametrize("op", OPS)
def test_cuda_without_gpu_fails_cleanly(tmp_path, how, op):
    if gpu_present():
        pytest.skip("a CUDA device is present")
    env = dict(os.environ)
    env.pop("HYPROF_BACKEND", None)
    args = [op]
    if how == "option":
        args += ["--backend", "cuda"]
    else:
        env["HYPROF_BACKEND"] = "cuda"
    r = run(*args, SAMSON, tmp_path / "out.tif", cwd=tmp_path, env=env)
    assert r.returncode >= 0, "crashed with signal %d" % -r.returncode
    assert_refused(r, tmp_path, "out.tif", EXIT_RUNTIME, "cuda")
    assert os.listdir(tmp_path) == []


def test_auto_backend_runs_without_gpu(tmp_path):
    env = dict(os.environ)
    env.pop("HYPROF_BACKEND", None)
    out = tmp_path / "out.tif"
    run_ok("pca", "--backend", "auto", SAMSON, out, cwd=tmp_path, env=env)
    want = "cuda" if gpu_present() else "cpu"
    assert gdal.Open(str(out)).GetMetadata().get("HYPROF_BACKEND") == want
