"""Faults injected into the `hyprof` executable: the disk fills up, a signal
arrives at any moment, two runs write the same output, a model file changes
while a run reads it. Whatever happens, nothing is lost and nothing that looks
complete is half-written.

- Disk full: tests/faults/failwrite.so (LD_PRELOAD) fails every write to a
  regular file with ENOSPC once FAILWRITE_AFTER bytes are written. A clean run
  with the shim's trace tells where each file's bytes start; every operation
  then runs with the disk filling up before anything is written, at the first
  byte of each of its files (side files and .aux.xml included), inside the
  largest one and at the last byte: exit 1, one message, no output and no
  temporary left; an existing output (--overwrite) stays as it was.
- Cancellation: SIGTERM at random delays from start-up to the final close:
  exit 3 with nothing left, or exit 0 with complete outputs (equal to a clean
  run's) -- never a death by the signal.
- Two processes writing the same output: each wins or fails cleanly, the file
  is one run's complete output; without --overwrite exactly one wins, also on
  a filesystem without RENAME_NOREPLACE (tests/faults/norename.so), and
  without hard links a run alone still commits as it should.
- A model rewritten in place while `classify` / `pca --model` read it: the
  result is the old model's or the new one's, or the run fails cleanly.

The shim is $HYPROF_FAILWRITE when set, else tests/faults/failwrite.so of the
executable's build tree. When the executable is built with AddressSanitizer,
the process running these tests preloads libasan (scripts/test.sh): the shim is
appended to the inherited LD_PRELOAD, after it.

Run: /usr/bin/python3 -m pytest tests/test_faults.py
"""

import hashlib
import json
import os
import random
import select
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import (EXIT_CANCELLED, EXIT_OK, EXIT_RUNTIME, INDIAN_PINES, SAMPLES, SAMSON,
                      exe_path, gdal, message_lines, read_cube, run, run_ok, write_cube)

# One seed for the random delays, printed on failure: a failure can be replayed.
SEED = int(os.environ.get("HYPROF_FAULTS_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)


def shim_path(name="failwrite"):
    """tests/faults/NAME.so of the executable's build tree ($HYPROF_FAILWRITE
    for failwrite.so when set)."""
    env = os.environ.get("HYPROF_FAILWRITE") if name == "failwrite" else None
    path = Path(env) if env else (Path(exe_path()).resolve().parent.parent / "tests" / "faults"
                                  / (name + ".so"))
    if not path.is_file():
        pytest.fail("%s not found: build the target %s" % (path, name), pytrace=False)
    return str(path)


def shim_env(shim="failwrite", **extra):
    """The environment of a run under a shim (after an inherited preload)."""
    pre = os.environ.get("LD_PRELOAD", "")
    env = dict(os.environ, LD_PRELOAD=(pre + ":" if pre else "") + shim_path(shim))
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Started:
    """A run of the executable that tells when it can first run code of its own
    (tests/faults/started.so writes a byte to a pipe once the dynamic loader is
    done). A signal sent before that may find the process still in the loader,
    where nothing can catch it; after it, the program is responsible."""

    def __init__(self, args, **kw):
        self.r, w = os.pipe()
        env = shim_env("started", FAULTS_STARTED_FD=w)
        try:
            self.p = subprocess.Popen([exe_path()] + [str(a) for a in args], env=env,
                                      pass_fds=(w,), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, **kw)
        finally:
            os.close(w)
        self.seen = False

    def started(self, timeout=0.0):
        """True once the loader is done (waits up to timeout seconds for it)."""
        if not self.seen:
            ready, _, _ = select.select([self.r], [], [], timeout)
            self.seen = bool(ready)
        return self.seen

    def close(self):
        os.close(self.r)


# ---- inputs and the operations ------------------------------------------------

@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A 40x40 crop of samson.tif, a 3-class label raster on its grid (brightness
    terciles; every third pixel labelled for training, all for reference), five
    principal components, an SVM trained on them and its class map."""
    d = tmp_path_factory.mktemp("inputs")
    cube = read_cube(SAMSON, np.float32)[:, :40, :40]
    write_cube(d / "cube.tif", cube)
    bright = cube.mean(axis=0)
    ref = (np.digitize(bright, np.quantile(bright, [1 / 3, 2 / 3])) + 1).astype(np.uint8)
    write_cube(d / "ref.tif", ref)
    train = np.where(np.arange(ref.size).reshape(ref.shape) % 3 == 0, ref, 0).astype(np.uint8)
    write_cube(d / "labels.tif", train)
    run_ok("pca", "--components", "5", "--progress", "none", d / "cube.tif", d / "feats.tif")
    run_ok("train", "--labels", d / "labels.tif", "--grid", "C=32,gamma=2", "--progress", "none",
           d / "feats.tif", d / "svm.model")
    run_ok("classify", "--model", d / "svm.model", "--progress", "none", d / "feats.tif",
           d / "map.tif")
    return d


# name -> (arguments given the inputs folder and the output folder, the files
# that make up the output). Every operation, every side file.
OPS = {
    "pca": (lambda i, o: ["pca", "--save-model", o / "m.pca", i / "cube.tif", o / "o.tif"],
            ["o.tif", "m.pca"]),
    "dwt": (lambda i, o: ["dwt", "--levels", "3", i / "cube.tif", o / "o.tif"], ["o.tif"]),
    "eadp": (lambda i, o: ["eadp", "--components", "3", "--count", "2", i / "cube.tif", o / "o.tif"],
             ["o.tif"]),
    "eap": (lambda i, o: ["eap", i / "cube.tif", o / "o.tif"], ["o.tif"]),
    "emp": (lambda i, o: ["emp", i / "cube.tif", o / "o.tif"], ["o.tif"]),
    "wmcd": (lambda i, o: ["wmcd", i / "cube.tif", o / "o.tif"], ["o.tif"]),
    "sspp": (lambda i, o: ["sspp", "--endmembers", "3", i / "cube.tif", o / "o.tif"], ["o.tif"]),
    "unmix": (lambda i, o: ["unmix", "--endmembers", "3", i / "cube.tif", o / "o.tif"],
              ["o.tif", "o.csv", "o.json"]),
    "train": (lambda i, o: ["train", "--labels", i / "labels.tif", "--grid", "C=32,gamma=2",
                            i / "feats.tif", o / "m.model"], ["m.model"]),
    "classify": (lambda i, o: ["classify", "--model", i / "svm.model", "--probabilities",
                               o / "p.tif", i / "feats.tif", o / "c.tif"], ["c.tif", "p.tif"]),
    "assess": (lambda i, o: ["assess", "--reference", i / "ref.tif", "--html", o / "r.html",
                             i / "map.tif"], ["r.html"]),
    "split": (lambda i, o: ["split", "--reference", i / "ref.tif", "--per-class", "5",
                            o / "train.tif", o / "test.tif"], ["train.tif", "test.tif"]),
}


def op_args(name, inputs, out, *extra):
    args = OPS[name][0](inputs, out)
    return [args[0], "--progress", "none", "--threads", "1", *extra] + [str(a) for a in args[1:]]


def snapshot(folder):
    """name -> (inode, size, mtime, sha256) of every file in folder."""
    out = {}
    for p in sorted(Path(folder).iterdir()):
        st = p.stat()
        out[p.name] = (st.st_ino, st.st_size, st.st_mtime_ns,
                       hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def describe(r):
    return "exit %d\nstderr: %s" % (r.returncode, r.stderr[-3000:])


# ---- disk full ------------------------------------------------------------------

def trace_run(name, inputs, out):
    """A clean run under the shim, counting: [(offset, file name)] where each
    file's bytes start, and the total."""
    trace = out.parent / (out.name + ".trace")
    r = run(*op_args(name, inputs, out), env=shim_env(FAILWRITE_TRACE=trace))
    assert r.returncode == EXIT_OK, describe(r)
    starts, total, seen = [], None, set()
    for line in trace.read_text().splitlines():
        offset, path = line.split(" ", 1)
        if offset == "TOTAL":
            total = int(path)
        elif path not in seen:
            seen.add(path)
            starts.append((int(offset), Path(path).name))
    trace.unlink()
    assert total and starts, "the shim saw no write: is it preloaded?"
    return starts, total


def budgets(starts, total):
    """Byte budgets: nothing written, the first byte of each file, the middle
    of the largest stretch, the last byte."""
    ends = [s for s, _ in starts[1:]] + [total]
    widest = max(range(len(starts)), key=lambda k: ends[k] - starts[k][0])
    ns = {0, total - 1, (starts[widest][0] + ends[widest]) // 2}
    ns.update(s for s, _ in starts)
    return sorted(n for n in ns if 0 <= n < total)


@pytest.mark.parametrize("name", sorted(OPS))
def test_disk_full(inputs, tmp_path, name):
    """The disk fills up at every file an operation writes: exit 1 with one
    message, nothing left; with --overwrite, the existing outputs untouched."""
    clean = tmp_path / "clean"
    clean.mkdir()
    starts, total = trace_run(name, inputs, clean)
    expected = set(OPS[name][1])
    assert expected <= set(os.listdir(clean)), sorted(os.listdir(clean))
    for n in budgets(starts, total):
        out = tmp_path / ("full-%d" % n)
        out.mkdir()
        r = run(*op_args(name, inputs, out), env=shim_env(FAILWRITE_AFTER=n))
        where = "disk full after %d of %d bytes (files start at %s)" % (n, total, starts)
        assert r.returncode == EXIT_RUNTIME, where + "\n" + describe(r)
        assert len(message_lines(r.stderr)) == 1, where + "\n" + r.stderr
        assert sorted(os.listdir(out)) == [], where + ": left %s" % sorted(os.listdir(out))
        # The same over the outputs of a previous run: nothing of them changes.
        before = snapshot(clean)
        r = run(*op_args(name, inputs, clean, "--overwrite"), env=shim_env(FAILWRITE_AFTER=n))
        assert r.returncode == EXIT_RUNTIME, where + " (--overwrite)\n" + describe(r)
        assert snapshot(clean) == before, where + " (--overwrite): the existing outputs changed"


def test_shim_fails_writes():
    """The shim itself: a write past the budget fails with ENOSPC, stderr does not count."""
    code = ("import os,sys\n"
            "fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT)\n"
            "print(os.write(fd,b'x'*10))\n"
            "try:\n os.write(fd,b'y'); print('wrote')\n"
            "except OSError as e: print(e.errno)\n"
            "os.write(2,b'still speaks\\n')\n")
    import errno
    import sys
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", code, os.path.join(d, "f")], capture_output=True,
                           text=True, env=shim_env(FAILWRITE_AFTER=10))
    assert r.stdout.split() == ["10", str(errno.ENOSPC)], r.stdout + r.stderr
    assert "still speaks" in r.stderr


# ---- cancellation at random times ----------------------------------------------------

CANCEL_OPS = ["pca", "unmix", "split", "classify", "eadp"]


def outputs_equal(a, b, names):
    """The files `names` of folder a equal those of b: rasters pixel for pixel
    (with their band count), other files byte for byte."""
    for n in names:
        pa, pb = Path(a) / n, Path(b) / n
        if n.endswith(".tif"):
            xa, xb = read_cube(pa), read_cube(pb)
            if xa.shape != xb.shape or not np.array_equal(xa, xb, equal_nan=True):
                return False
        elif pa.read_bytes() != pb.read_bytes():
            return False
    return True


def cancel_once(name, inputs, out, clean, delay, after_start, where):
    """Starts `name`, sends SIGTERM `delay` s after it started (after the loader
    is done when after_start), and checks the outcome; returns the exit code."""
    run = Started(op_args(name, inputs, out))
    try:
        if after_start:
            assert run.started(timeout=60), where + ": the process never started"
        time.sleep(delay)
        strict = run.started()
        run.p.send_signal(signal.SIGTERM)
        stdout, stderr = run.p.communicate(timeout=120)
    finally:
        if run.p.poll() is None:
            run.p.kill()
            run.p.wait()
        run.close()
    rc = run.p.returncode
    where += " (%s the dynamic loader was done)" % ("after" if strict else "maybe before")
    allowed = (EXIT_OK, EXIT_CANCELLED) + (() if strict else (-signal.SIGTERM,))
    assert rc in allowed, "%s: exit %d (negative: killed by signal %d)\n%s" % (
        where, rc, -rc, stderr[-2000:])
    names = OPS[name][1]
    if rc == EXIT_OK:
        assert set(names) <= set(os.listdir(out)), where + ": exit 0 but %s" % os.listdir(out)
        assert outputs_equal(out, clean, names), where + ": exit 0 with different outputs"
    else:
        assert sorted(os.listdir(out)) == [], where + ": left %s" % os.listdir(out)
    if rc == EXIT_CANCELLED:
        msg = message_lines(stderr)
        assert len(msg) == 1 and "cancel" in msg[0].lower(), where + ": " + stderr
    return rc


@pytest.mark.parametrize("name", CANCEL_OPS)
def test_cancel_at_random_times(inputs, tmp_path, name):
    """SIGTERM at random delays from the start to past the end of a clean run
    (start-up, the computation, the final close and rename): exit 3 with nothing
    left, or exit 0 with outputs equal to the clean run's. Never killed by the
    signal once the process can run code of its own (a signal that may have
    arrived inside the dynamic loader may kill it, leaving nothing)."""
    rng = random.Random(SEED)
    clean = tmp_path / "clean"
    clean.mkdir()
    t0 = time.monotonic()
    run_ok(*op_args(name, inputs, clean))
    took = time.monotonic() - t0
    # (delay, counted from the end of the dynamic loader?)
    trials = [(d, True) for d in (0.0, 0.0, 0.0005, 0.001, 0.003, 0.01, 0.03)]
    trials += [(d, False) for d in (0.0, 0.002, 0.01)]
    trials += [(rng.uniform(0, 1.1 * took), False) for _ in range(10)]
    trials += [(rng.uniform(0.8 * took, 1.05 * took), False) for _ in range(4)]
    outcomes = []
    for k, (delay, after_start) in enumerate(trials):
        out = tmp_path / ("run-%d" % k)
        out.mkdir()
        where = "SIGTERM %.4f s after %s (clean run %.3f s, seed %d)" % (
            delay, "start-up" if after_start else "exec", took, SEED)
        outcomes.append(cancel_once(name, inputs, out, clean, delay, after_start, where))
    assert EXIT_CANCELLED in outcomes, "no run was cancelled: %s" % outcomes


def test_cancel_during_final_close(inputs, tmp_path):
    """SIGTERM right after the last progress line (the output being closed,
    compressed and renamed): exit 3 with nothing left, or exit 0 with the
    complete output."""
    rng = random.Random(SEED + 1)
    clean = tmp_path / "clean"
    clean.mkdir()
    run_ok(*op_args("pca", inputs, clean))
    for k in range(8):
        out = tmp_path / ("run-%d" % k)
        out.mkdir()
        args = op_args("pca", inputs, out)
        args[args.index("--progress") + 1] = "json"
        p = subprocess.Popen([exe_path()] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        lines = []
        delay = rng.uniform(0, 0.02)
        for line in p.stderr:
            lines.append(line)
            if line.startswith("{") and json.loads(line).get("progress", 0) >= 1.0:
                time.sleep(delay)
                p.send_signal(signal.SIGTERM)
                break
        stderr = "".join(lines) + p.stderr.read()
        rc = p.wait(timeout=120)
        where = "SIGTERM %.4f s after the last progress line (seed %d)" % (delay, SEED)
        assert rc in (EXIT_OK, EXIT_CANCELLED), "%s: exit %d\n%s" % (where, rc, stderr[-2000:])
        if rc == EXIT_CANCELLED:
            assert sorted(os.listdir(out)) == [], where + ": left %s" % os.listdir(out)
        else:
            assert outputs_equal(out, clean, OPS["pca"][1]), where + ": incomplete output"


# ---- two processes, one output -------------------------------------------------------

@pytest.mark.parametrize("overwrite", [False, True], ids=["fresh", "overwrite"])
def test_two_writers_one_output(inputs, tmp_path, overwrite):
    """Two `pca` runs (3 and 5 components) write the same output and model at
    once: each exits 0 or fails cleanly; the file there is one run's complete
    output; without --overwrite at most one of them replaces nothing."""
    ref = {}
    for k in (3, 5):
        ref[k] = tmp_path / ("ref%d" % k)
        ref[k].mkdir()
        run_ok(*op_args("pca", inputs, ref[k], "--components", str(k)))
    for trial in range(4):
        out = tmp_path / ("race-%d" % trial)
        out.mkdir()
        extra = ["--overwrite"] if overwrite else []
        if overwrite:   # something to replace
            for f in OPS["pca"][1]:
                (out / f).write_bytes((ref[3] / f).read_bytes())
        procs = {k: subprocess.Popen([exe_path()] + op_args("pca", inputs, out, "--components",
                                                              str(k), *extra),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for k in (3, 5)}
        rcs = {k: p.wait(timeout=300) for k, p in procs.items()}
        errs = {k: p.stderr.read() for k, p in procs.items()}
        where = "trial %d: exits %s\n%s" % (trial, rcs, errs)
        assert all(rc >= 0 for rc in rcs.values()), where
        left = sorted(os.listdir(out))
        if left == [] and not any(rc == EXIT_OK for rc in rcs.values()):
            continue   # both failed cleanly
        assert left == sorted(OPS["pca"][1]), where + "\nleft: %s" % left
        assert any(outputs_equal(out, ref[k], ["o.tif"]) for k in (3, 5)), \
            where + "\nthe output is no run's: %s" % (read_cube(out / "o.tif").shape,)
        for k in (3, 5):
            if rcs[k] != EXIT_OK:
                assert len(message_lines(errs[k])) == 1, where
        if not overwrite:
            assert list(rcs.values()).count(EXIT_OK) <= 1, \
                where + "\nboth wrote the same new output without --overwrite"


@pytest.mark.parametrize("fs", ["no-noreplace", "no-links"])
def test_commit_without_noreplace(inputs, tmp_path, fs):
    """On a filesystem without RENAME_NOREPLACE (tests/faults/norename.so) a new
    output is placed by a hard link, so of two runs at once exactly one wins;
    without hard links either (NORENAME_NOLINK=1) a run alone still writes,
    refuses to replace without --overwrite and replaces with it, leaving no
    backup or temporary behind."""
    nolink = "1" if fs == "no-links" else "0"
    env = shim_env("norename", NORENAME_NOLINK=nolink)
    ref = {}
    for k in (3, 5):
        ref[k] = tmp_path / ("ref%d" % k)
        ref[k].mkdir()
        run_ok(*op_args("pca", inputs, ref[k], "--components", str(k)))

    def start(out, k, *extra):
        return subprocess.Popen([exe_path()] + op_args("pca", inputs, out, "--components", str(k),
                                                       *extra),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    for trial in range(4 if nolink == "0" else 0):
        out = tmp_path / ("race-%d" % trial)
        out.mkdir()
        procs = {k: start(out, k) for k in (3, 5)}
        rcs = {k: p.wait(timeout=300) for k, p in procs.items()}
        errs = {k: p.stderr.read() for k, p in procs.items()}
        where = "trial %d: exits %s\n%s" % (trial, rcs, errs)
        assert list(rcs.values()).count(EXIT_OK) == 1, where
        assert sorted(os.listdir(out)) == sorted(OPS["pca"][1]), where
        winner = [k for k in rcs if rcs[k] == EXIT_OK][0]
        assert outputs_equal(out, ref[winner], OPS["pca"][1]), where
    out = tmp_path / "alone"
    out.mkdir()
    for k, extra, want in ((3, [], EXIT_OK), (5, [], None), (5, ["--overwrite"], EXIT_OK)):
        p = start(out, k, *extra)
        rc = p.wait(timeout=300)
        err = p.stderr.read()
        if want is None:
            assert rc != EXIT_OK and len(message_lines(err)) == 1 and "exists" in err, (rc, err)
        else:
            assert rc == want, err
            assert outputs_equal(out, ref[k], OPS["pca"][1]), (k, extra)
        assert sorted(os.listdir(out)) == sorted(OPS["pca"][1]), os.listdir(out)


# ---- a model changing under a run -------------------------------------------------------

def rewrite_in_place(path, versions, stop, rng):
    """Rewrites `path` in place (truncate, then write in a few pieces, as an
    editor saving without a temporary file does), alternating between versions."""
    k = 0
    while not stop.is_set():
        data = versions[k % len(versions)]
        with open(path, "r+b") as f:
            f.truncate(0)
            step = max(1, len(data) // 4)
            for i in range(0, len(data), step):
                f.write(data[i:i + step])
                f.flush()
                time.sleep(rng.uniform(0, 0.003))
        k += 1


@pytest.mark.parametrize("kind", ["svm", "pca"])
def test_model_changed_while_read(inputs, tmp_path, kind):
    """A model rewritten in place, over and over, while runs read it: each run
    gives the result of one of the complete models or fails cleanly (exit 1 or
    2, one message, no output)."""
    rng = random.Random(SEED + 2)
    if kind == "svm":
        a = inputs / "svm.model"
        b = tmp_path / "b.model"
        run_ok("train", "--labels", inputs / "labels.tif", "--grid", "C=2,gamma=0.5",
               "--progress", "none", inputs / "feats.tif", b)
        cmd = lambda m, o: ["classify", "--progress", "none", "--model", str(m),
                            str(inputs / "feats.tif"), str(o)]
    else:
        a, b = tmp_path / "a.pca", tmp_path / "b.pca"
        run_ok("pca", "--components", "4", "--save-model", a, "--progress", "none",
               inputs / "cube.tif", tmp_path / "fa.tif")
        run_ok("pca", "--components", "4", "--save-model", b, "--progress", "none",
               SAMSON, tmp_path / "fb.tif")
        cmd = lambda m, o: ["pca", "--progress", "none", "--model", str(m),
                            str(inputs / "cube.tif"), str(o)]
    refs = []
    for k, m in enumerate((a, b)):
        refs.append(tmp_path / ("ref%d.tif" % k))
        run_ok(*cmd(m, refs[-1]))
    assert not np.array_equal(read_cube(refs[0]), read_cube(refs[1])), "the two models agree"
    model = tmp_path / ("live." + ("model" if kind == "svm" else "pca"))
    model.write_bytes(a.read_bytes())
    stop = threading.Event()
    writer = threading.Thread(target=rewrite_in_place,
                              args=(model, [a.read_bytes(), b.read_bytes()], stop, rng))
    writer.start()
    try:
        outcomes = []
        for k in range(12):
            out = tmp_path / ("run-%d" % k)
            out.mkdir()
            r = run(*cmd(model, out / "o.tif"))
            outcomes.append(r.returncode)
            where = "run %d (seed %d): %s" % (k, SEED, describe(r))
            if r.returncode == EXIT_OK:
                got = read_cube(out / "o.tif")
                assert any(got.shape == read_cube(ref).shape and np.array_equal(
                    got, read_cube(ref), equal_nan=True) for ref in refs), \
                    where + "\nthe result is neither model's"
            else:
                assert r.returncode in (1, 2), where
                assert len(message_lines(r.stderr)) == 1, where
                assert os.listdir(out) == [], where
    finally:
        stop.set()
        writer.join()


# ---- cancelling LIBSVM's training -----------------------------------------------------

def training_processes(marker):
    """Processes whose command line holds `marker` (the run's output folder)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(d.name))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("grid", ["C=32768,gamma=8", "C=32768,131072,gamma=8,32"],
                         ids=["final", "cross-validation"])
def test_cancel_inside_libsvm_training(tmp_path, grid):
    """SIGINT while LIBSVM trains: the final svm_train on every labelled pixel of
    Indian Pines (one grid point: no cross-validation), and a grid whose folds
    each train for long. Uncancelled, either runs for minutes; cancelled, the run
    ends within seconds with exit 3, one message, no model file and no training
    process left."""
    out = tmp_path / "out"
    out.mkdir()
    args = ["train", "--progress", "json", "--labels", SAMPLES / "indian_pines_gt.tif",
            "--grid", grid, "--folds", "2", INDIAN_PINES, out / "m.model"]
    p = subprocess.Popen([exe_path()] + [str(a) for a in args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in p.stderr:  # reading done (0.15): the training starts
            lines.append(line)
            if line.startswith("{") and json.loads(line)["progress"] >= 0.15:
                break
        time.sleep(1.5)
        assert p.poll() is None, "the training ended before the signal: %s" % "".join(lines)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    stderr = "".join(lines) + p.stderr.read()
    assert rc == EXIT_CANCELLED, "exit %d\n%s" % (rc, stderr[-2000:])
    assert took < 10, "exit %.1f s after SIGINT" % took
    msg = message_lines(stderr)
    assert len(msg) == 1 and "cancel" in msg[0].lower(), stderr[-2000:]
    assert os.listdir(out) == [], os.listdir(out)
    time.sleep(0.2)
    assert training_processes(str(out)) == [], "training processes left behind"
