#!/usr/bin/env python3
"""The Python package's overhead: hyprof.OP(array) against the library call
it makes (hyprof_op_run on the same cube, arguments and context prepared
once, called through ctypes: the C call and nothing else), per operation and
cube size. The goal of issue 25: under 1 ms or 2 %.

    /usr/bin/python3 bench/python_overhead.py [--backend cpu|cuda|auto]
        [--repeat N] [--sizes 16x16x8,145x145x200] [--ops pca,dwt,eadp] [--out FILE]
        [--breakdown]

With $HYPROF_LIBRARY set, the package is python/ of this checkout over that
library; without, the installed package. NumPy is the only other module
needed. Prints a Markdown section (appended to --out when given), device named, medians of
N timed repetitions after one warm-up. The C call and the Python call
alternate (C first in even repetitions, Python first in odd ones), so that a
drift of the machine (clocks, other load) falls on both alike.

The Python call does work the C call does not: the NaN/infinity scan of the
input (hyprof_cube_all_finite, a pass over every value, which the package
makes so that such pixels are invalid as when the CLI reads a raster), the
argument parsing, a context a call, the hop to the package's helper thread
and the result's wrapping. The 'NaN scan ms' column is that scan and the
mask alone (CubeView.complete on the helper thread, the hop there included);
the last two columns are those of hyprof.OP with the scan skipped (timed in
the same turns): what the package adds besides it. Skipping the scan is a
measurement only; the package always makes it.

--breakdown times each piece of the Python path alone, in turns (one call
of every piece per repetition), with the page faults and CPU time of each,
to tell where a gap between the two calls goes.
"""

import argparse
import ctypes as C
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if os.environ.get("HYPROF_LIBRARY"):  # this checkout's package over that library
    sys.path.insert(0, str(ROOT / "python"))
try:
    import hyprof
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))
    import hyprof
from hyprof import _run  # noqa: E402  (the package's own pieces)
from hyprof._cube import CubeView, as_array, result_from  # noqa: E402
from hyprof._lib import Result, lib  # noqa: E402
from hyprof._run import Context  # noqa: E402

# Small parameters: the point is the fixed cost around the call.
PARAMS = {"pca": {"components": 5}, "dwt": {"levels": 2}, "eadp": {"components": 2, "count": 2},
          "emp": {"features": 2, "radii": [1, 2]}, "eap": {"features": 2}}
BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def device_name(backend):
    if backend != "cpu" and hyprof.cuda_device_count() > 0:
        name = C.create_string_buffer(256)
        tot, free = C.c_size_t(), C.c_size_t()
        f = lib.hyprof_cuda_device_info
        f.argtypes = [C.c_int, C.c_char_p, C.c_size_t, C.POINTER(C.c_size_t),
                      C.POINTER(C.c_size_t)]
        if f(0, name, 256, C.byref(tot), C.byref(free)) == 0:
            return name.value.decode()
    return "%s (%d logical CPUs)" % (cpu_name(), os.cpu_count())


class Sample:
    """Wall seconds, minor page faults, CPU seconds and involuntary context
    switches (the process's threads preempted: more runnable threads than
    cores, e.g. BLAS threads spinning beside an OpenMP team) of one call."""

    def __init__(self, fn):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t = time.perf_counter()
        own = fn()
        if not isinstance(own, Sample):
            own = None  # a result is freed inside the time, as the C call frees its own
        self.wall = time.perf_counter() - t
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        self.faults = r1.ru_minflt - r0.ru_minflt
        self.cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        self.preempted = r1.ru_nivcsw - r0.ru_nivcsw
        if isinstance(own, Sample):  # a piece that times itself (set-up excluded)
            self.wall, self.faults, self.cpu, self.preempted = \
                own.wall, own.faults, own.cpu, own.preempted


def in_turns(fns, repeat):
    """{name: [Sample]}: one warm-up call of each, then `repeat` rounds calling
    each once, in order in even rounds and in reverse order in odd ones."""
    names = list(fns)
    for n in names:
        fns[n]()
    out = {n: [] for n in names}
    for r in range(repeat):
        for n in (names if r % 2 == 0 else names[::-1]):
            out[n].append(Sample(fns[n]))
    return out


def med(samples, attr="wall"):
    return statistics.median(getattr(s, attr) for s in samples)


def c_call(opname, cube, params, backend):
    """A function running hyprof_op_run on prepared inputs (freeing its result)."""
    op = hyprof.OPERATIONS[opname]
    args = op.make_args(params)
    view = CubeView(cube)
    ctx = C.c_void_p(lib.hyprof_ctx_new())
    lib.hyprof_ctx_set_backend(ctx, BACKENDS[backend])

    def run():
        res = Result()
        st = lib.hyprof_op_run(ctx, op.ptr, args, C.byref(view.cube), C.byref(res))
        if st:
            raise RuntimeError(lib.hyprof_ctx_last_error(ctx).decode())
        lib.hyprof_result_free(C.byref(res))

    run.keep = (args, view, ctx)
    return run


def py_call(opname, cube, params, backend):
    fn = getattr(hyprof, opname)
    return lambda: fn(cube, backend=backend, **params)


def scan_call(cube):
    """The package's NaN/infinity scan and mask alone (CubeView.complete), on
    its helper thread as hyprof.OP runs it (with the hop there)."""
    view = CubeView(cube, defer=True)
    return lambda: _run.on_library_thread(view.complete)


class Patched:
    """hyprof.OP with a piece of the package replaced while it runs."""

    def __init__(self, call, **swap):
        self.call, self.swap = call, swap

    def __call__(self):
        saved = []
        for key, new in self.swap.items():
            mod, name = {"scan": (lib, "hyprof_cube_all_finite"), "hop": (_run, "_run")}[key]
            saved.append((mod, name, getattr(mod, name)))
            setattr(mod, name, new)
        try:
            self.call()
        finally:
            for mod, name, old in saved:
                setattr(mod, name, old)


def pieces(opname, cube, params, backend):
    """Each piece of hyprof.OP(cube) as a function to time alone."""
    op = hyprof.OPERATIONS[opname]
    c = c_call(opname, cube, params, backend)
    args, view, ctx = c.keep
    ex = _run._main_executor()

    def fresh_ctx():  # the C call in a context made as the package makes one
        with Context(opname, backend) as cx:
            res = Result()
            if lib.hyprof_op_run(cx.ptr, op.ptr, args, C.byref(view.cube), C.byref(res)):
                raise RuntimeError(lib.hyprof_ctx_last_error(cx.ptr).decode())
            lib.hyprof_result_free(C.byref(res))

    def result(wrap):  # the C call not counted: result_from, or dropping the array
        res = Result()
        if lib.hyprof_op_run(ctx, op.ptr, args, C.byref(view.cube), C.byref(res)):
            raise RuntimeError(lib.hyprof_ctx_last_error(ctx).decode())
        if wrap:
            return Sample(lambda: [result_from(res, backend)].clear())
        held = [result_from(res, backend)]
        return Sample(held.clear)

    def make_free_args():
        a = op.make_args(params)
        lib.hyprof_args_free(C.byref(a))

    def context():
        Context(opname, backend).close()

    py = py_call(opname, cube, params, backend)
    direct = lambda ctx_, fn, *a: fn(ctx_.ptr, *a)  # noqa: E731
    return {
        "C call, main thread (the table's)": c,
        "C call, helper thread": lambda: ex.submit(c).result(),
        "C call, helper thread, a context a call": lambda: ex.submit(fresh_ctx).result(),
        "hyprof.%s" % opname: py,
        "hyprof.%s without the NaN scan" % opname: Patched(py, scan=lambda c_, t_: 1),
        "hyprof.%s without the hop" % opname: Patched(py, hop=direct),
        "hop to the helper thread (empty)": lambda: ex.submit(lambda: None).result(),
        "arguments (make_args, free)": make_free_args,
        "as_array": lambda: as_array(cube),
        "CubeView(defer=True) (as_array, the mask argument)": lambda: CubeView(cube, defer=True),
        "hop with the NaN scan and mask (CubeView.complete)": scan_call(cube),
        "Context (new, set, free)": context,
        "result wrap and free (result_from, the array dropped)": lambda: result(True),
        "result free (the array dropped; the C call frees too)": lambda: result(False),
    }


def breakdown(size, opname, cube, params, backend, repeat):
    res = in_turns(pieces(opname, cube, params, backend), repeat)
    lines = ["", "### %s %s (%s; medians of %d, in turns)" % (opname, size, backend, repeat), "",
             "| piece | ms | min ms | page faults | CPU ms | preempted |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, s in res.items():
        lines.append("| %s | %.3f | %.3f | %d | %.1f | %d |" % (
            name, med(s) * 1e3, min(x.wall for x in s) * 1e3, med(s, "faults"),
            med(s, "cpu") * 1e3, med(s, "preempted")))
    lines.append("\nThreads in the process after it: %d." % thread_count())
    return lines


def thread_count():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def table_row(size, opname, cube, params, backend, repeat):
    py = py_call(opname, cube, params, backend)
    res = in_turns({"c": c_call(opname, cube, params, backend), "py": py,
                    "py_noscan": Patched(py, scan=lambda c_, t_: 1),
                    "scan": scan_call(cube)}, repeat)
    t_c, t_py, t_scan = med(res["c"]), med(res["py"]), med(res["scan"])
    over, rest = t_py - t_c, med(res["py_noscan"]) - t_c
    return "| %s | %s | %.4g | %.4g | %.3f | %.1f %% | %.3f | %.3f | %.1f %% |" % (
        size, opname, t_c * 1e3, t_py * 1e3, over * 1e3, 100 * over / t_c, t_scan * 1e3,
        rest * 1e3, 100 * rest / t_c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=list(BACKENDS))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--sizes", default="16x16x8,145x145x200")
    ap.add_argument("--ops", default="pca,dwt,eadp")
    ap.add_argument("--breakdown", action="store_true",
                    help="time each piece of the Python path alone")
    ap.add_argument("--out")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    rows, parts = [], []
    for size in a.sizes.split(","):
        w, h, b = (int(x) for x in size.split("x"))
        cube = rng.random((b, h, w), dtype=np.float32) * 1000
        for opname in a.ops.split(","):
            params = PARAMS.get(opname, {})
            rows.append(table_row(size, opname, cube, params, a.backend, a.repeat))
            if a.breakdown:
                parts += breakdown(size, opname, cube, params, a.backend, a.repeat)
            print(rows[-1], file=sys.stderr, flush=True)
        del cube
    text = "\n".join([
        "", "## Python overhead, %s UTC — %s" % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                                                 device_name(a.backend)), "",
        "- hyprof %s (%s), Python %s, NumPy %s, backend %s, median of %d after one warm-up, "
        "C and Python calls alternating, OMP_WAIT_POLICY %s" % (
            hyprof.__version__, hyprof.build_info, platform.python_version(), np.__version__,
            a.backend, a.repeat, os.environ.get("OMP_WAIT_POLICY", "unset")),
        "- C call: hyprof_op_run through ctypes on prepared inputs (main thread); Python: "
        "hyprof.OP(array) (argument checks, cube view with the NaN/infinity scan, context, "
        "helper-thread call, result array); NaN scan: the package's scan and mask alone "
        "(hyprof_cube_all_finite on the helper thread, hop included), part of the Python "
        "call's work; without the scan: hyprof.OP with the scan skipped (a measurement only)",
        "",
        "| size (WxHxB) | op | C call ms | Python ms | overhead ms | overhead | NaN scan ms "
        "| overhead without the scan ms | overhead without the scan |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|"] + rows + parts) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
