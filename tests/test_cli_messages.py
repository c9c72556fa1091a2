"""Messages as analysts read them (issue 24, point 9, and two remainders of
issue 23): the input is checked before the output, range errors name the
option as typed with integers printed whole, a mistyped option or operation
gets the closest one suggested, `hyprof help OP` is `hyprof OP --help`,
`hyprof info` opens HYPROF: names and .hyprof descriptors, auto says once
why it runs on the CPU, long messages are not cut, and emp --devices names
an empty element."""

import os
import re

import pytest

from conftest import SAMPLES, SAMSON, message_lines, run, run_ok

EXIT_USAGE = 2


def one_line(r, code=EXIT_USAGE):
    assert r.returncode == code, (r.returncode, r.stderr)
    msg = message_lines(r.stderr)
    assert len(msg) == 1, r.stderr
    return msg[0]


# ---- input before output ----------------------------------------------------------------

def test_missing_input_is_named_before_an_existing_output(tmp_path):
    (tmp_path / "x.tif").write_bytes(b"old")
    line = one_line(run("pca", "nonexist.tif", "x.tif", cwd=tmp_path))
    assert "nonexist.tif" in line and "exists" not in line, line
    line = one_line(run("classify", "--model", SAMPLES / "indian_pines_svm.model",
                        "nonexist.tif", "x.tif", cwd=tmp_path))
    assert "nonexist.tif" in line and "exists" not in line, line
    assert (tmp_path / "x.tif").read_bytes() == b"old"


def test_missing_parameter_input_is_named_before_an_existing_output(tmp_path):
    (tmp_path / "x.tif").write_bytes(b"old")
    line = one_line(run("pca", "--model", "nomodel.pca", SAMSON, "x.tif", cwd=tmp_path))
    assert "nomodel.pca" in line and "exists" not in line, line


# ---- ranges, named as typed ---------------------------------------------------------------

@pytest.mark.parametrize("op,args,expect", [
    ("pca", ["--components", "0"], r"hyprof pca: --components 0: must be between 1 and \d+$"),
    ("pca", ["--components=0"], r"--components 0: must be between 1 and \d+$"),
    ("pca", ["--threads", "5000"], r"--threads 5000: must be between 0 and 4096$"),
    ("split", ["--seed", "4294967296"], r"--seed 4294967296: must be between 0 and 4294967295$"),
    ("split", ["--seed", "-1"], r"--seed -1: negative; must be between 0 and 4294967295$"),
    ("emp", ["--radii", "1,0,3"],
     r"--radii 0: must be between 1 and \d+ \(element 2 of 3\)$"),
    ("pca", ["--components", "seven"], r"--components: 'seven' is not an integer$"),
    ("pca", ["--backend", "tpu"], r"--backend: 'tpu' is not one of auto\|cpu\|cuda$"),
])
def test_range_errors_name_the_option_as_typed(tmp_path, op, args, expect):
    files = ["a.tif", "b.tif", "c.tif"] if op == "split" else [SAMSON, "out.tif"]
    line = one_line(run(op, *args, *files, cwd=tmp_path))
    assert re.search(expect, line), line
    assert "parameter '" not in line and "e+" not in line, line


def test_help_prints_integer_ranges_whole():
    out = run_ok("split", "--help").stdout
    assert "[range: 0..4294967295]" in out, out
    assert "e+" not in re.sub(r"[A-Za-z]e\+", "", out)


def test_long_messages_are_not_cut(tmp_path):
    value = "w" * 3000
    line = one_line(run("dwt", "--wavelet", value, SAMSON, "out.tif", cwd=tmp_path))
    assert value in line and line.rstrip().endswith("bior4.4"), line[-200:]


# ---- suggestions ------------------------------------------------------------------------

@pytest.mark.parametrize("op,typed,meant", [
    ("pca", "--componets", "--components"),
    ("eadp", "--sigam", "--sigma"),
    ("pca", "--overwirte", "--overwrite"),
    ("pca", "--threds", "--threads"),
    ("pca", "-components", "--components"),
])
def test_a_mistyped_option_suggests_the_closest(tmp_path, op, typed, meant):
    line = one_line(run(op, typed, "3", SAMSON, "out.tif", cwd=tmp_path))
    assert "'%s'" % typed in line and line.endswith("did you mean %s?" % meant), line


def test_no_suggestion_for_something_unlike_any_option(tmp_path):
    line = one_line(run("pca", "--zzzzzzzzzzzz", SAMSON, "out.tif", cwd=tmp_path))
    assert "did you mean" not in line and "--zzzzzzzzzzzz" in line, line


def test_a_mistyped_operation_suggests_the_closest(tmp_path):
    line = one_line(run("eadq", SAMSON, "out.tif", cwd=tmp_path))
    assert "did you mean 'eadp'?" in line, line
    line = one_line(run("help", "clasify"))
    assert "did you mean 'classify'?" in line, line


# ---- help ------------------------------------------------------------------------------

def test_help_op_equals_op_help(registry):
    for op in (o["name"] for o in registry["operations"]):
        a, b = run_ok("help", op), run_ok(op, "--help")
        assert a.stdout == b.stdout and a.stdout.startswith("usage: hyprof %s" % op), op


@pytest.fixture(scope="module")
def registry():
    import json
    return json.loads(run_ok("describe", "--json").stdout)


# ---- info on HYPROF: names ---------------------------------------------------------------

def test_info_opens_hyprof_names_without_gdal_driver_path(tmp_path):
    """The executable registers its own driver where GDAL's plugin search
    (GDAL_DRIVER_PATH, GDAL's plugin folder) does not find it."""
    env = {k: v for k, v in os.environ.items() if k != "GDAL_DRIVER_PATH"}
    r = run_ok("info", "HYPROF:pca:components=3:%s" % SAMSON, env=env, cwd=tmp_path)
    assert "driver: HYPROF" in r.stdout and "3 bands" in r.stdout, r.stdout
    r = run_ok("info", SAMPLES / "indian_pines_eadp.hyprof", env=env, cwd=tmp_path)
    assert "driver: HYPROF" in r.stdout and "15 bands" in r.stdout, r.stdout
    r = run_ok("info", "--json", "HYPROF:eadp:components=2,count=1:%s" % SAMSON, env=env,
               cwd=tmp_path)
    assert '"bands":4' in r.stdout, r.stdout


# ---- emp --devices -----------------------------------------------------------------------

@pytest.mark.parametrize("devices,element", [("1,", 2), (",1", 1), ("0,,1", 2)])
def test_emp_devices_empty_element(tmp_path, devices, element):
    line = one_line(run("emp", "--backend", "cpu", "--devices", devices, SAMSON, "out.tif",
                        cwd=tmp_path))
    assert "--devices '%s': element %d is empty" % (devices, element) in line, line
    assert not (tmp_path / "out.tif").exists()


# ---- auto's fallback ---------------------------------------------------------------------

def cuda_build():
    return "CUDA" in run_ok("--version").stdout


# Samson's eadp at 16 times on one thread: about 0.43 s of CPU work by the
# registry's declared cost, more than the GPU's start-up, so auto tries the
# device (a smaller run goes to the CPU without trying: see below).
BIG_EADP = ("--count", "16", "--threads", "1")


@pytest.mark.skipif(not cuda_build(), reason="a CPU-only build has nothing to choose")
def test_auto_runs_a_job_quicker_than_the_gpu_start_on_the_cpu(tmp_path):
    """A command line is a new process, which pays the GPU's start-up: auto
    runs on the CPU what the CPU finishes sooner, and says so at
    HYPROF_LOG=info; the estimate divides by the threads."""
    env = dict(os.environ, HYPROF_LOG="info")
    env.pop("HYPROF_BACKEND", None)
    for args, quicker in ((("pca",), True), (("eadp", *BIG_EADP), False),
                          (("eadp", "--count", "16", "--threads", "2"), True),
                          (("pca", "--backend", "cpu"), False)):
        r = run_ok(*args, "--overwrite", SAMSON, "out.tif", env=env, cwd=tmp_path)
        said = [l for l in message_lines(r.stderr) if "auto runs on the CPU" in l]
        assert len(said) == int(quicker), (args, r.stderr)
        if quicker:
            assert "backend cpu" in r.stdout and "0.3 s start-up" in said[0], said
            assert not [l for l in message_lines(r.stderr) if "falling back" in l], r.stderr


@pytest.mark.skipif(not cuda_build(), reason="a CPU-only build never falls back")
def test_auto_says_once_why_it_runs_on_the_cpu(tmp_path):
    """No visible device (CUDA_VISIBLE_DEVICES empty): every stage of eadp
    runs on the CPU, as auto means without a GPU: silent by default, the
    reason said once at HYPROF_LOG=info."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.pop("HYPROF_BACKEND", None)
    env.pop("HYPROF_LOG", None)
    r = run_ok("eadp", *BIG_EADP, SAMSON, "out.tif", env=env, cwd=tmp_path)
    assert not [l for l in message_lines(r.stderr) if "CPU" in l], r.stderr
    env["HYPROF_LOG"] = "info"
    r = run_ok("eadp", *BIG_EADP, "--overwrite", SAMSON, "out.tif", env=env, cwd=tmp_path)
    said = [l for l in message_lines(r.stderr) if "falling back to the CPU" in l]
    assert len(said) == 1 and "no CUDA device" in said[0], r.stderr
    assert said[0].startswith("hyprof eadp: info: "), said


@pytest.mark.skipif(not cuda_build(), reason="a CPU-only build never falls back")
def test_auto_warns_once_about_a_missing_device(tmp_path):
    """--device 7 where fewer devices exist: a warning, once."""
    env = dict(os.environ)
    env.pop("HYPROF_BACKEND", None)
    env.pop("HYPROF_LOG", None)
    if not has_device():
        pytest.skip("no CUDA device here")
    r = run_ok("eadp", *BIG_EADP, "--device", "200", SAMSON, "out.tif", env=env,
               cwd=tmp_path)
    said = [l for l in message_lines(r.stderr) if "falling back to the CPU" in l]
    assert len(said) == 1 and "device 200 does not exist" in said[0], r.stderr
    assert said[0].startswith("hyprof eadp: warning: "), said


def has_device():
    return "device 0" in run_ok("--version").stdout


@pytest.mark.skipif(not cuda_build(), reason="a CPU-only build never falls back")
def test_auto_says_once_when_device_memory_is_short(tmp_path):
    """A device capped at one byte (HYPROF_DEVICE_MEMORY, the tests' budget):
    a run that ends on the CPU warns once, whatever number of stages fell back."""
    if not has_device():
        pytest.skip("no CUDA device here")
    env = dict(os.environ, HYPROF_DEVICE_MEMORY="1")
    env.pop("HYPROF_BACKEND", None)
    env.pop("HYPROF_LOG", None)
    r = run_ok("eadp", *BIG_EADP, SAMSON, "out.tif", env=env, cwd=tmp_path)
    said = [l for l in message_lines(r.stderr) if "falling back to the CPU" in l]
    if "backend cpu" in r.stdout:
        assert len(said) == 1, r.stderr
    else:
        assert not said, r.stderr
