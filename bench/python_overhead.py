#!/usr/bin/env python3
"""The Python package's overhead: hyprof.OP(array) against the library call
it makes (hyprof_op_run on the same cube, arguments and context prepared
once, called through ctypes: the C call and nothing else), per operation and
cube size. The goal of issue 25: under 1 ms or 2 %.

    /usr/bin/python3 bench/python_overhead.py [--backend cpu|cuda|auto]
        [--repeat N] [--sizes 16x16x8,145x145x200] [--ops pca,dwt,eadp] [--out FILE]

The library is the installed package's, or $HYPROF_LIBRARY with the package
from python/ of this checkout. Prints a Markdown section (appended to --out
when given), device named, medians of N timed repetitions after one warm-up.
"""

import argparse
import ctypes as C
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
try:
    import hyprof
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))
    import hyprof
from hyprof._cube import CubeView  # noqa: E402  (the package's own conversion)
from hyprof._lib import Result, lib  # noqa: E402

# Small parameters: the point is the fixed cost around the call.
PARAMS = {"pca": {"components": 5}, "dwt": {"levels": 2}, "eadp": {"components": 2, "count": 2},
          "emp": {"features": 2, "radii": [1, 2]}, "eap": {"features": 2}}


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


def median_time(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def c_call(opname, cube, params, backend):
    """A function running hyprof_op_run on prepared inputs (freeing its result)."""
    op = hyprof.OPERATIONS[opname]
    args = op.make_args(params)
    view = CubeView(cube)
    ctx = C.c_void_p(lib.hyprof_ctx_new())
    lib.hyprof_ctx_set_backend(ctx, {"auto": 0, "cpu": 1, "cuda": 2}[backend])

    def run():
        res = Result()
        st = lib.hyprof_op_run(ctx, op.ptr, args, C.byref(view.cube), C.byref(res))
        if st:
            raise RuntimeError(lib.hyprof_ctx_last_error(ctx).decode())
        lib.hyprof_result_free(C.byref(res))

    run.keep = (args, view, ctx)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--sizes", default="16x16x8,145x145x200")
    ap.add_argument("--ops", default="pca,dwt,eadp")
    ap.add_argument("--out")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for size in a.sizes.split(","):
        w, h, b = (int(x) for x in size.split("x"))
        cube = rng.random((b, h, w), dtype=np.float32) * 1000
        for opname in a.ops.split(","):
            params = PARAMS.get(opname, {})
            t_c = median_time(c_call(opname, cube, params, a.backend), a.repeat)
            t_py = median_time(lambda: getattr(hyprof, opname)(cube, backend=a.backend,
                                                               **params), a.repeat)
            over = t_py - t_c
            rows.append("| %s | %s | %.4g | %.4g | %.3f | %.1f %% |" % (
                size, opname, t_c * 1e3, t_py * 1e3, over * 1e3, 100 * over / t_c))
    text = "\n".join([
        "", "## Python overhead, %s UTC — %s" % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                                                 device_name(a.backend)), "",
        "- hyprof %s (%s), Python %s, NumPy %s, backend %s, median of %d after one warm-up" % (
            hyprof.__version__, hyprof.build_info, platform.python_version(), np.__version__,
            a.backend, a.repeat),
        "- C call: hyprof_op_run through ctypes on prepared inputs; Python: hyprof.OP(array) "
        "(argument checks, cube view, context, helper-thread call, result array)", "",
        "| size (WxHxB) | op | C call ms | Python ms | overhead ms | overhead |",
        "|---|---|---:|---:|---:|---:|"] + rows) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
