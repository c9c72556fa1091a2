"""What the hyprof executable must never do to the user's files, and how it
behaves under signals, memory limits, odd inputs and concurrency (issue 23):

- an output that is an input or another output (same device and inode after
  following links, or same folder and name) is refused, exit 2, with or
  without --overwrite;
- several outputs of one run (side files and .aux.xml sidecars included) are
  committed all or none; a failed run keeps the previous files;
- SIGTERM at any time, from the start of the process to the final rename, is
  a cancellation: exit 3 and no output;
- the memory an input declares is checked before it is allocated (exit 2);
- folders, FIFOs, devices, empty and unrecognised files, complex pixels and
  float class maps are refused up front with a message naming the problem;
- a 240-character output name works; temporaries of dead runs are removed;
- an unknown HYPROF_BACKEND is refused; every message is "hyprof <op>: ...";
- several runs at once on shared cores do not spin against each other.

Run: /usr/bin/python3 -m pytest tests/test_cli_safety.py
"""

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import (EXIT_CANCELLED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, INDIAN_PINES, SAMPLES,
                      SAMSON, exe_path, gdal, message_lines, read_cube, run, run_ok, write_cube)

GT = SAMPLES / "indian_pines_gt.tif"
TEST_MAP = SAMPLES / "indian_pines_test.tif"


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def folder_state(folder):
    """Name -> content digest of every file in `folder` (hidden ones included)."""
    return {p.name: digest(p) for p in sorted(folder.iterdir()) if p.is_file()}


def copy_sample(src, folder, name=None):
    dst = folder / (name or src.name)
    shutil.copy(src, dst)
    aux = src.parent / (src.name + ".aux.xml")
    if aux.exists():
        shutil.copy(aux, folder / (dst.name + ".aux.xml"))
    return dst


def assert_usage(r, *words):
    assert r.returncode == EXIT_USAGE, "exit %d\nstdout: %s\nstderr: %s" % (
        r.returncode, r.stdout, r.stderr)
    lines = message_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ---- an output is never an input or another output --------------------------------

def test_output_same_as_input_is_refused(tmp_path):
    cube = copy_sample(SAMSON, tmp_path)
    before = folder_state(tmp_path)
    for out in (cube.name, "./" + cube.name, str(cube)):
        r = run("eadp", "--overwrite", "--progress", "none", cube.name, out, cwd=tmp_path)
        assert_usage(r, "same file")
    os.symlink(cube.name, tmp_path / "link.tif")
    r = run("pca", "--overwrite", "--progress", "none", cube, tmp_path / "link.tif")
    assert_usage(r, "same file")
    os.link(cube, tmp_path / "hard.tif")
    r = run("pca", "--overwrite", "--progress", "none", tmp_path / "hard.tif", cube)
    assert_usage(r, "same file")
    (tmp_path / "link.tif").unlink()
    (tmp_path / "hard.tif").unlink()
    assert folder_state(tmp_path) == before


def test_assess_html_over_its_class_map_is_refused(tmp_path):
    cmap = copy_sample(TEST_MAP, tmp_path, "C.tif")
    ref = copy_sample(GT, tmp_path, "ref.tif")
    before = folder_state(tmp_path)
    for html, target in ((cmap, "CLASSMAP"), (ref, "--reference")):
        r = run("assess", "--overwrite", "--reference", ref, "--html", html, cmap)
        line = assert_usage(r, "--html", target)
        assert "same file" in line
    assert folder_state(tmp_path) == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_side_file_given_the_output_path_is_refused(tmp_path, overwrite):
    ow = ["--overwrite"] if overwrite else []
    out = tmp_path / "out.tif"
    model = tmp_path / "m.model"
    model.write_text("not read: the command is refused before\n")
    cases = [
        ("pca", "--save-model", out, SAMSON, out),
        ("unmix", "--endmembers-csv", out, SAMSON, out),
        ("classify", "--model", model, "--probabilities", out, SAMSON, out),
        # the endmember CSV named beside OUTPUT is OUTPUT itself
        ("unmix", SAMSON, tmp_path / "out.csv"),
    ]
    for args in cases:
        r = run(args[0], *ow, "--progress", "none", *args[1:])
        assert_usage(r, "same file")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.model"], args


def test_split_outputs_must_differ(tmp_path):
    r = run("split", "--reference", GT, "--per-class", "5", tmp_path / "a.tif",
            str(tmp_path) + "/./a.tif")
    assert_usage(r, "TEST", "TRAIN", "same file")
    assert list(tmp_path.iterdir()) == []


# ---- all outputs or none ---------------------------------------------------------

def limit_file_size(nbytes):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return apply


def test_split_keeps_the_previous_split_when_test_cannot_be_written(tmp_path):
    """TRAIN fits under the file-size limit, TEST does not (the disk is 'full'
    for it): the run fails and both previous files stay as they were."""
    tr, te = tmp_path / "train.tif", tmp_path / "test.tif"
    run_ok("split", "--reference", GT, "--per-class", "0.1", "--progress", "none", tr, te)
    before = folder_state(tmp_path)
    args = ["split", "--overwrite", "--reference", GT, "--per-class", "1", "--seed", "7",
            "--progress", "none", tr, te]
    # A fresh split of these arguments: its TRAIN map is smaller than its TEST map.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    run_ok(*args[:-2], fresh / "train.tif", fresh / "test.tif")
    small, large = (fresh / "train.tif").stat().st_size, (fresh / "test.tif").stat().st_size
    assert small + 256 < large, (small, large)
    shutil.rmtree(fresh)
    r = run(*args, preexec_fn=limit_file_size((small + large) // 2))
    assert r.returncode == EXIT_RUNTIME, (r.returncode, r.stderr)
    assert len(message_lines(r.stderr)) == 1, r.stderr
    assert folder_state(tmp_path) == before


def test_split_leaves_only_its_outputs_and_their_legends(tmp_path):
    tr, te = tmp_path / "train.tif", tmp_path / "test.tif"
    run_ok("split", "--reference", GT, "--per-class", "0.1", "--progress", "none", tr, te)
    # The legends (category names) live in GDAL's sidecars: one per map, nothing else.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "test.tif", "test.tif.aux.xml", "train.tif", "train.tif.aux.xml"]


# ---- signals --------------------------------------------------------------------------

def version_time():
    """How long the executable takes to start and stop doing nothing (the
    fastest of a few runs): an operation started that long ago has been
    loaded (signals are blocked from right after the loader until the
    handlers are installed, after the libraries' initialisers)."""
    best = 1e9
    for _ in range(3):
        t = time.monotonic()
        run_ok("--version")
        best = min(best, time.monotonic() - t)
    return best


def test_signal_at_start_up_cancels(tmp_path):
    t0 = version_time()
    for k, factor in enumerate((1.5, 2.0, 2.5, 3.0)):
        out = tmp_path / ("out%d.tif" % k)
        # 1,000 FED cycles a step keep the operation running for seconds (the
        # default finishes in well under a second, before the last signal).
        p = subprocess.Popen([exe_path(), "eadp", "--progress", "none", "--cycles", "1000",
                              str(INDIAN_PINES), str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(t0 * factor)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
        assert p.returncode == EXIT_CANCELLED, (factor, t0, p.returncode, err)
        assert list(tmp_path.iterdir()) == [], (factor, list(tmp_path.iterdir()))


def test_signal_during_the_final_close_cancels(tmp_path):
    """SIGTERM after the last band is handed to GDAL, while the file is being
    finished (its overviews built) and closed: exit 3, no output, nothing left.
    (EADP's bands are written while it computes, so without overviews the
    close is too short to aim a signal at.)"""
    out = tmp_path / "out.tif"
    p = subprocess.Popen([exe_path(), "eadp", "--progress", "json", "--overviews",
                          str(INDIAN_PINES), str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    sent = False
    for line in p.stderr:
        if '"stage":"overviews"' in line:
            p.send_signal(signal.SIGTERM)
            sent = True
            break
    _, err = p.communicate(timeout=120)
    assert sent, err
    assert p.returncode == EXIT_CANCELLED, (p.returncode, err)
    assert list(tmp_path.iterdir()) == []


# ---- memory ---------------------------------------------------------------------------

limits_address_space = pytest.mark.skipif(
    os.environ.get("HYPROF_UNDER_ASAN") == "1",
    reason="AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot apply")


@limits_address_space
def test_declared_size_is_checked_before_reading(tmp_path):
    """A sparse GeoTIFF of a few KB declaring 4096x4096x16 float32 (1 GiB):
    under a 1.5 GiB address-space limit pca is refused before it allocates."""
    path = tmp_path / "sparse.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 4096, 4096, 16, gdal.GDT_Float32,
                                              ["SPARSE_OK=TRUE", "TILED=YES"])
    ds = None
    assert path.stat().st_size < 100_000
    limit = 1536 << 20

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    r = run("pca", "--progress", "none", path, tmp_path / "out.tif", preexec_fn=cap, timeout=120)
    line = assert_usage(r, "hyprof pca:", "sparse.tif", "MiB")
    assert "4096x4096" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sparse.tif"]


AS_LIMIT = 1536 << 20   # an address-space limit below a 1 GiB input and its output


def cap_memory():
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def sparse_cube(path, w=4096, h=4096, bands=16):
    """A float32 GeoTIFF of w x h x bands (1 GiB by default) that holds a few
    patches of random values, one with NaN, and zeros elsewhere (sparse: a
    few MB on disk)."""
    ds = gdal.GetDriverByName("GTiff").Create(str(path), w, h, bands, gdal.GDT_Float32,
                                              ["SPARSE_OK=TRUE", "TILED=YES", "COMPRESS=ZSTD"])
    ds.SetGeoTransform([500000.0, 1.0, 0.0, 4000000.0, 0.0, -1.0])
    rng = np.random.default_rng(7)
    for b in range(bands):
        for x, y in ((0, 0), (1000, 1500), (3800, 4000), (2048, 250)):
            a = (rng.random((96, 200)) * 1000).astype(np.float32)[:h - y, :w - x]
            if b == 3 and x == 1000:
                a[10:20, 5:9] = np.nan
            ds.GetRasterBand(b + 1).WriteArray(a, x, y)
    ds = None
    return path


def big_input_and_model(tmp_path):
    """sparse_cube's 1 GiB input and a 3-component PCA model of 16 bands."""
    small = tmp_path / "small.tif"
    write_cube(small, (np.random.default_rng(3).random((16, 40, 40)) * 1000).astype(np.float32))
    model = tmp_path / "m.pca"
    run_ok("pca", "--progress", "none", "--components", 3, "--save-model", model, small,
           tmp_path / "small_pca.tif")
    return sparse_cube(tmp_path / "big.tif"), model


def same_output(a, b, timings=()):
    """Pixels (NaN where nodata), band names, nodata, metadata (but the
    metadata items named in timings), georeference."""
    da, db = gdal.Open(str(a)), gdal.Open(str(b))
    assert np.array_equal(da.ReadAsArray(), db.ReadAsArray(), equal_nan=True)
    ma, mb = da.GetMetadata(), db.GetMetadata()
    assert set(timings) <= set(ma) and set(timings) <= set(mb), timings
    assert {k: v for k, v in ma.items() if k not in timings} == \
        {k: v for k, v in mb.items() if k not in timings}
    assert da.GetGeoTransform() == db.GetGeoTransform()
    for i in range(1, da.RasterCount + 1):
        ba, bb = da.GetRasterBand(i), db.GetRasterBand(i)
        assert ba.GetDescription() == bb.GetDescription()
        assert str(ba.GetNoDataValue()) == str(bb.GetNoDataValue())


@limits_address_space
def test_pixelwise_operations_run_by_rows_beyond_memory(tmp_path):
    """dwt and pca --model on a 1 GiB input under a 1.5 GiB address-space
    limit run by blocks of rows (they say so at level info) and write what a
    run without the limit writes: the same pixels, NaN where the input has
    NaN, band names, nodata and metadata. A fit (pca without a model) is still
    refused before it reads."""
    big, model = big_input_and_model(tmp_path)
    env = dict(os.environ, HYPROF_LOG="info")
    for op, extra in (("dwt", ["--levels", "1"]), ("pca", ["--model", str(model)])):
        common = [op, "--backend", "cpu", "--progress", "none"] + extra + [big]
        r = run(*common, tmp_path / (op + "_rows.tif"), preexec_fn=cap_memory, env=env,
                timeout=600)
        assert r.returncode == EXIT_OK, r.stderr
        assert "does not fit in memory" in r.stderr and "rows at a time" in r.stderr, r.stderr
        run_ok(*common, tmp_path / (op + "_whole.tif"), timeout=600)
        same_output(tmp_path / (op + "_rows.tif"), tmp_path / (op + "_whole.tif"))
    r = run("pca", "--progress", "none", big, tmp_path / "fit.tif", preexec_fn=cap_memory)
    assert_usage(r, "big.tif", "MiB")
    assert not (tmp_path / "fit.tif").exists()


@limits_address_space
def test_unmix_with_endmembers_runs_by_rows_beyond_memory(tmp_path):
    """unmix --model (abundances of a saved endmember set, pixel by pixel) on
    the 1 GiB input under the address-space limit runs by blocks of rows and
    writes what a whole run writes: the abundances, the metadata but the
    stage timings, and the endmember files beside OUTPUT."""
    big, _ = big_input_and_model(tmp_path)
    run_ok("unmix", "--progress", "none", "--endmembers", 3, tmp_path / "small.tif",
           tmp_path / "em.tif")
    env = dict(os.environ, HYPROF_LOG="info")
    for d, limit in (("rows", cap_memory), ("whole", None)):
        (tmp_path / d).mkdir()
        r = run("unmix", "--backend", "cpu", "--progress", "none", "--model", tmp_path / "em.csv",
                big, "out.tif", cwd=tmp_path / d, preexec_fn=limit, env=env, timeout=600)
        assert r.returncode == EXIT_OK, r.stderr
        assert ("rows at a time" in r.stderr) == (d == "rows"), r.stderr
    rows, whole = tmp_path / "rows", tmp_path / "whole"
    same_output(rows / "out.tif", whole / "out.tif", timings=("HYPROF_UNMIX_SECONDS",))
    for side in ("out.csv", "out.json"):
        assert (rows / side).read_bytes() == (whole / side).read_bytes(), side
    assert sorted(p.name for p in rows.iterdir()) == sorted(p.name for p in whole.iterdir())


@limits_address_space
def test_classify_runs_by_rows_beyond_memory(tmp_path):
    """classify of features (pixel by pixel) on the 1 GiB input under the
    address-space limit runs by blocks of rows and writes the class map a
    whole run writes: classes (0 where the input has NaN), data type, nodata,
    metadata, and the legend in the .aux.xml."""
    big, _ = big_input_and_model(tmp_path)
    rng = np.random.default_rng(5)
    labels = np.repeat(np.arange(1, 4, dtype=np.uint8), 10)[None, :].repeat(30, 0)
    feats = (labels[None].astype(np.float32) * 300 + rng.normal(0, 10, (16, 30, 30)))
    write_cube(tmp_path / "train.tif", feats.astype(np.float32))
    write_cube(tmp_path / "labels.tif", labels[None])
    run_ok("train", "--progress", "none", "--labels", tmp_path / "labels.tif", "--grid",
           "C=10,gamma=0.001", tmp_path / "train.tif", tmp_path / "m.model")
    env = dict(os.environ, HYPROF_LOG="info")
    for d, limit in (("rows", cap_memory), ("whole", None)):
        (tmp_path / d).mkdir()
        r = run("classify", "--backend", "cpu", "--progress", "none", "--model",
                tmp_path / "m.model", big, "map.tif", cwd=tmp_path / d, preexec_fn=limit,
                env=env, timeout=600)
        assert r.returncode == EXIT_OK, r.stderr
        assert ("rows at a time" in r.stderr) == (d == "rows"), r.stderr
    rows, whole = tmp_path / "rows" / "map.tif", tmp_path / "whole" / "map.tif"
    same_output(rows, whole)
    a = gdal.Open(str(rows)).ReadAsArray()
    assert a.dtype == np.uint8 and a[1510, 1005] == 0 and set(np.unique(a)) - {0, 1, 2, 3} == set()
    assert (tmp_path / "rows" / "map.tif.aux.xml").read_bytes() == \
        (tmp_path / "whole" / "map.tif.aux.xml").read_bytes()


@limits_address_space
@pytest.mark.parametrize("event", ["sigterm", "model changed"])
def test_run_by_rows_stops_cleanly(tmp_path, event):
    """A run by blocks of rows cancelled by SIGTERM exits 3, and one whose
    model changes between blocks exits 1 naming it; both leave nothing."""
    big, model = big_input_and_model(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    p = subprocess.Popen([exe_path(), "pca", "--backend", "cpu", "--progress", "json", "--model",
                          str(model), str(big), str(tmp_path / "out.tif")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=cap_memory)
    lines = []
    for line in p.stderr:
        lines.append(line)
        if line.startswith("{") and json.loads(line).get("progress", 0) > 0:
            if event == "sigterm":
                p.send_signal(signal.SIGTERM)
            else:
                os.utime(model, ns=(time.time_ns(), time.time_ns()))
            break
    err = "".join(lines) + p.stderr.read()
    rc = p.wait(timeout=600)
    if event == "sigterm":
        assert rc == EXIT_CANCELLED, (rc, err)
    else:
        assert rc == EXIT_RUNTIME, (rc, err)
        assert "m.pca' changed while the run read it" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# ---- inputs that are not raster files --------------------------------------------------

def test_non_regular_and_unrecognised_inputs(tmp_path):
    fifo = tmp_path / "fifo.tif"
    os.mkfifo(fifo)
    (tmp_path / "empty.tif").write_bytes(b"")
    (tmp_path / "text.tif").write_text("this is not a raster\n" * 20)
    (tmp_path / "dir.tif").mkdir()
    cases = [(fifo, "FIFO"), ("/dev/zero", "device"), (tmp_path / "empty.tif", "empty"),
             (tmp_path / "text.tif", "not a raster format GDAL recognises"),
             (tmp_path / "dir.tif", "folder")]
    for path, what in cases:
        for args in (("pca", path, tmp_path / "out.tif"), ("info", path),
                     ("assess", "--reference", GT, path)):
            r = run(*args, timeout=60)
            line = assert_usage(r, what)
            assert str(path) in line
            assert "GDAL gave no reason" not in line
    r = run("classify", "--model", fifo, SAMSON, tmp_path / "out.tif", timeout=60)
    assert_usage(r, "FIFO")
    assert not (tmp_path / "out.tif").exists()


def test_complex_input_is_refused(tmp_path):
    path = tmp_path / "complex.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 8, 8, 3, gdal.GDT_CFloat32)
    for b in range(3):
        ds.GetRasterBand(b + 1).WriteArray(np.full((8, 8), 1 + 2j, np.complex64))
    ds = None
    r = run("pca", "--components", "2", "--progress", "none", path, tmp_path / "out.tif")
    assert_usage(r, "complex", "CFloat32")
    assert not (tmp_path / "out.tif").exists()


def test_assess_refuses_a_float_class_map(tmp_path):
    cmap = read_cube(TEST_MAP, np.float32)
    f = write_cube(tmp_path / "float.tif", cmap, like=TEST_MAP)
    r = run("assess", "--reference", GT, f)
    assert_usage(r, "float.tif", "integer")
    r = run("assess", "--reference", f, TEST_MAP)
    assert_usage(r, "float.tif", "integer")
    r = run("split", "--reference", f, "--per-class", "2", tmp_path / "a.tif",
            tmp_path / "b.tif")
    assert_usage(r, "float.tif", "integer")


# ---- names, temporaries, environment, messages ---------------------------------------

def test_long_output_name(tmp_path):
    name = "p" * 236 + ".tif"  # 240 bytes: a valid name
    r = run("pca", "--components", "2", "--progress", "none", SAMSON, tmp_path / name)
    assert r.returncode == EXIT_OK, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]
    name = "t" * 236 + ".tif"
    r = run("split", "--reference", GT, "--per-class", "3", "--progress", "none",
            tmp_path / name, tmp_path / ("u" * 236 + ".tif"))
    assert r.returncode == EXIT_OK, r.stderr


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_stale_temporaries_of_dead_runs_are_removed(tmp_path):
    pid = dead_pid()
    stale = [".0.hyprof-%d.tmp" % pid, ".0.hyprof-%d.tmp.aux.xml" % pid,
             ".out.tif.hyprof-%d.tmp.tif" % pid]
    live = ".0.hyprof-%d.tmp" % os.getpid()  # this process is alive: kept
    for n in stale + [live]:
        (tmp_path / n).write_bytes(b"x" * 100)
    run_ok("pca", "--components", "2", "--progress", "none", SAMSON, tmp_path / "out.tif")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live, "out.tif"])


def test_unknown_backend_in_the_environment_is_refused(tmp_path):
    env = dict(os.environ, HYPROF_BACKEND="gpu")
    r = run("pca", "--progress", "none", SAMSON, tmp_path / "out.tif", env=env)
    assert_usage(r, "HYPROF_BACKEND", "gpu")
    assert not (tmp_path / "out.tif").exists()
    env["HYPROF_BACKEND"] = "cpu"
    run_ok("pca", "--components", "2", "--progress", "none", SAMSON, tmp_path / "out.tif",
           env=env)


def test_every_message_names_the_operation(tmp_path):
    """eadp's PCA stage fails: the message is eadp's, the stage may follow."""
    r = run("eadp", "--components", "500", "--progress", "none", SAMSON, tmp_path / "o.tif")
    assert r.returncode != EXIT_OK
    lines = message_lines(r.stderr)
    assert lines, r.stderr
    for l in lines:
        assert l.startswith("hyprof eadp: "), l
    r = run("pca", "--progress", "none", tmp_path / "missing.tif", tmp_path / "o.tif")
    assert message_lines(r.stderr)[0].startswith("hyprof pca: ")


# ---- several runs at once ----------------------------------------------------------------

SPARE = ("_", "OLDPWD", "SHLVL", "LS_COLORS", "PWD", "MAIL", "HISTSIZE", "HISTCONTROL",
         "LESSOPEN", "LESSCLOSE")   # cli/main.c's variables that may be lent


@pytest.mark.parametrize("env_kind", ["shell", "bare", "chosen"])
def test_openmp_threads_wait_passively(tmp_path, env_kind):
    """libgomp's own report (OMP_DISPLAY_ENV=verbose) shows the wait policy it
    runs with: passive (a spin count of 0; libgomp's default also reads
    'PASSIVE' but spins 300,000 times) unless the user chose one, whether the executable lends a
    slot of its start-up environment (a shell's SHLVL here) or, without any
    of the variables it may lend, executes itself again; the user's choice
    stays. Started.so (test_faults) reads its own variable in a library
    initialiser: that one is never lent."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if env_kind == "shell":
        env["SHLVL"] = "1"
    elif env_kind == "bare":
        env = {k: v for k, v in env.items() if k not in SPARE}
    else:
        env["OMP_WAIT_POLICY"] = "ACTIVE"
    env["OMP_DISPLAY_ENV"] = "verbose"
    r = subprocess.run([exe_path(), "pca", "--progress", "none", "--components", "2", str(SAMSON),
                        str(tmp_path / "o.tif")], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == EXIT_OK, r.stderr
    if env_kind == "chosen":
        assert "OMP_WAIT_POLICY = 'ACTIVE'" in r.stderr, r.stderr
    else:
        assert "GOMP_SPINCOUNT = '0'" in r.stderr, r.stderr


def test_cpu_run_loads_no_cuda_math_library(tmp_path):
    """cuBLAS and cuSOLVER cost a process 0.15-0.2 s to load: a run on the CPU
    backend (and any run of a CPU-only build) opens neither (the loader's
    own list of the files it opens, LD_DEBUG=files)."""
    env = dict(os.environ, LD_DEBUG="files")
    r = subprocess.run([exe_path(), "pca", "--backend", "cpu", "--progress", "none",
                        "--components", "2", str(SAMSON), str(tmp_path / "o.tif")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    opened = [l for l in r.stderr.splitlines() if "file=" in l]
    assert any("libhyprof" in l for l in opened), "LD_DEBUG listed nothing:\n" + r.stderr[-3000:]
    assert not [l for l in opened if "libcublas" in l or "libcusolver" in l], opened


def test_concurrent_runs_share_the_cores(tmp_path):
    """Four operations at once, in the default environment, finish within three
    times the time of running them one after another. OpenMP threads that spin
    at barriers while other processes hold the cores take tens of times
    longer. The one-after-another reference runs with OMP_WAIT_POLICY=PASSIVE
    so that it does not depend on how the machine's other load treats a
    spinning default either."""
    default = {k: v for k, v in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    passive = dict(default, OMP_WAIT_POLICY="PASSIVE")

    def cmd(k):
        return [exe_path(), "eadp", "--progress", "none", str(INDIAN_PINES),
                str(tmp_path / ("o%d.tif" % k))]

    t = time.monotonic()
    for k in range(4):
        subprocess.run(cmd(k), check=True, capture_output=True, timeout=600, env=passive)
    sequential = time.monotonic() - t
    for k in range(4):
        (tmp_path / ("o%d.tif" % k)).unlink()
    t = time.monotonic()
    procs = [subprocess.Popen(cmd(k), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=default) for k in range(4)]
    for p in procs:
        assert p.wait(timeout=1200) == EXIT_OK, p.stderr.read()
    concurrent = time.monotonic() - t
    print("four eadp runs: %.2f s one after another, %.2f s at once" % (sequential, concurrent))
    assert concurrent < 3.0 * sequential, (concurrent, sequential)
