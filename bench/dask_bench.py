#!/usr/bin/env python3
"""hyprof.dask on 1, 2, 4... workers against the single-process call.

For each cube size and operation: the wall time of hyprof.OP(cube) in this
process, then of hyprof.dask.OP(cube).values (the result brought back to
the client) on a LocalCluster on 127.0.0.1 of N worker processes sharing
the cores (cores / N threads per worker, each library call on one thread:
threads=None), with the speed-up against one
worker; the Dask result is checked against the single call (bit for bit,
or, with PCA features, the largest difference, the fit's sums being added
in another order). Medians of --repeat runs after one warm-up run.

    /usr/bin/python3 bench/dask_bench.py [--workers 1,2,4] [--ops eadp,emp,pca]
        [--sizes 145x145x200,349x1905x144] [--backend cpu|cuda|auto] [--repeat N]
        [--out FILE]

The cubes tile Indian Pines (bench/data/indian_pines.npy, from
bench/prepare_data.py, else samples/indian_pines.tif through GDAL) to
ROWSxCOLSxBANDS (349x1905x144: Houston 2013's size). With --backend cuda or
auto, each worker takes its own GPU where there are several (worker i:
device i mod count). Prints a Markdown table (appended to --out).
"""

import argparse
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
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python")] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    import hyprof
import distributed  # noqa: E402
import hyprof.dask as hd  # noqa: E402

PARAMS = {"eadp": {}, "emp": {}, "eap": {}, "wmcd": {}, "pca": {}, "dwt": {}}


def source_cube():
    npy = ROOT / "bench" / "data" / "indian_pines.npy"
    if npy.is_file():
        return np.load(npy)
    from osgeo import gdal
    return gdal.Open(str(ROOT / "samples" / "indian_pines.tif")).ReadAsArray().astype(np.float32)


def tiled(src, rows, cols, bands):
    b = np.resize(np.arange(src.shape[0]), bands)
    reps = (-(-rows // src.shape[1]), -(-cols // src.shape[2]))
    return np.ascontiguousarray(np.tile(src[b], (1,) + reps)[:, :rows, :cols])


def timed(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def device_name(backend):
    if backend != "cpu" and hyprof.cuda_device_count() > 0:
        try:
            import subprocess
            gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                  capture_output=True, text=True).stdout.split("\n")
            return "%d x %s" % (hyprof.cuda_device_count(), gpus[0].strip())
        except OSError:
            pass
    return "CPU: %d cores (%s)" % (len(os.sched_getaffinity(0)), platform.processor() or
                                   platform.machine())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--ops", default="eadp,emp,pca")
    ap.add_argument("--sizes", default="145x145x200")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    src = source_cube()
    lines = ["", "### hyprof.dask: %s, backend %s, hyprof %s" % (device_name(a.backend), a.backend,
                                                               hyprof.__version__), "",
             "| cube (rows x cols x bands) | op | workers | single process s | Dask s | "
             "speed-up vs 1 worker | equal |", "|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for size in a.sizes.split(","):
        rows, cols, bands = (int(v) for v in size.split("x"))
        cube = tiled(src, rows, cols, bands)
        for op in a.ops.split(","):
            kw = dict(PARAMS.get(op, {}), backend=a.backend)
            t1, single = timed(lambda: getattr(hyprof, op)(cube, **kw), a.repeat)
            base = None
            for n in (int(v) for v in a.workers.split(",")):
                cluster = hd.local_cluster(n_workers=n, threads_per_worker=max(1, cores // n))
                with distributed.Client(cluster) as c:
                    t, got = timed(lambda: getattr(hd, op)(cube, client=c, **kw).values,
                                   a.repeat)
                cluster.close()
                base = base or t
                diff = np.nanmax(np.abs(got - np.asarray(single)))
                eq = "bit for bit" if np.array_equal(got, single, equal_nan=True) else \
                    "max diff %.3g" % diff
                line = "| %s | %s | %d | %.3f | %.3f | %.2f | %s |" % (size, op, n, t1, t, base / t,
                                                                    eq)
                lines.append(line)
                print(line, flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
