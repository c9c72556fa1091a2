#!/usr/bin/env python3
"""Compares two builds of hyprof on the same machine in one run: are their outputs
bit-identical, and is the new one slower?

Runs every operation of hyprof_bench on the bench scenes (cubes mirrored from
bench/data/*.npy as run_bench.py makes them) with both executables, alternating
old and new over --rounds rounds, keeps each build's output of the last round
(raw float32) and compares them byte for byte. Prints one line per case and
writes a JSON file: bit-identical or not, the median seconds of each build (host
memory in and out; EADP also the device kernels' milliseconds), and new/old.

    python3 bench/compare_builds.py --old OLD/bench/hyprof_bench --new NEW/bench/hyprof_bench \
        [--backends cuda] [--repeat 7] [--rounds 2] [--out compare.json]

Needs NumPy only. Exit status 1 when an output differs or a run fails.
"""
import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_bench  # noqa: E402
from run_bench import SCENES, load_source, mirror_cube  # noqa: E402

run_bench.np = np  # run_bench imports NumPy late, after its thread settings

# (op, scenes, hyprof_bench options): the paper defaults the benchmarks use.
CASES = [
    ("pca", ["indian_pines", "pavia_u", "pavia_c", "houston", "wtc"], ["--components", "7"]),
    ("dwt", ["indian_pines", "pavia_c", "houston"], ["--wavelet", "db4", "--levels", "4"]),
    ("eadp", ["indian_pines", "pavia_u", "houston"],
     ["--components", "7", "--count", "8", "--step", "65", "--cycles", "1"]),
    ("eadp", ["houston"], ["--components", "7", "--count", "8", "--step", "65", "--cycles", "1",
                          "--pipeline", "op"]),
    ("eap", ["indian_pines", "pavia_c"], ["--reduction", "pca", "--components", "8",
                                          "--attribute", "area"]),
    ("eap", ["pavia_u"], ["--reduction", "pca", "--components", "8", "--attribute", "std",
                          "--thresholds", "5,10,20"]),
    ("emp", ["indian_pines", "pavia_c"], ["--features", "4"]),
    ("wmcd", ["indian_pines", "pavia_c", "salinas"], ["--features", "4"]),
    ("sspp", ["indian_pines"], ["--endmembers", "16"]),
    ("unmix", ["indian_pines", "wtc"], ["--endmembers", "31", "--sspp", "1", "--extract", "nfindr"]),
]


def make_cube(name, data_dir, tmp):
    w, h, b, src = SCENES[name]
    path = os.path.join(tmp, f"{name}.f32")
    if not os.path.exists(path):
        mirror_cube(load_source(data_dir, src), w, h, b).tofile(path)
    return path, (w, h, b)


def run_once(exe, op, backend, cube, shape, opts, repeat, out):
    w, h, b = shape
    cmd = [exe, "--op", op, "--backend", backend, "--input", cube, "--width", str(w),
           "--height", str(h), "--bands", str(b), "--repeat", str(repeat), "--output", out] + opts
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1],
                "cmd": " ".join(cmd)}
    return json.loads(lines[-1])


def kernels_ms(rec):
    dm = rec.get("device_ms") or {}
    keys = ("pca_covariance", "pca_eigh", "pca_projection", "eadp_prepare", "eadp_fed",
            "eadp_output")
    vals = [dm[k] for k in keys if isinstance(dm.get(k), (int, float))]
    return sum(vals) if vals else None


def compare_case(args, op, scene, opts, backend, tmp):
    cube, shape = make_cube(scene, args.data_dir, tmp)
    outs = {k: os.path.join(tmp, f"out_{k}.f32") for k in ("old", "new")}
    med = {"old": [], "new": []}
    kern = {"old": [], "new": []}
    for _ in range(args.rounds):
        for k in ("old", "new"):
            rec = run_once(getattr(args, k), op, backend, cube, shape, opts, args.repeat, outs[k])
            if "error" in rec or rec.get("skipped"):
                return {"op": op, "scene": scene, "opts": opts, "backend": backend,
                        "error": f"{k}: {rec.get('error') or rec.get('skipped')}"}
            med[k].append(rec["median_s"])
            if kernels_ms(rec) is not None:
                kern[k].append(kernels_ms(rec))
    same = filecmp.cmp(outs["old"], outs["new"], shallow=False)
    r = {"op": op, "scene": scene, "opts": opts, "backend": backend, "identical": same,
         "old_s": statistics.median(med["old"]), "new_s": statistics.median(med["new"])}
    r["ratio"] = r["new_s"] / r["old_s"]
    if kern["old"] and kern["new"]:
        r["old_kernels_ms"] = statistics.median(kern["old"])
        r["new_kernels_ms"] = statistics.median(kern["new"])
        r["kernels_ratio"] = r["new_kernels_ms"] / r["old_kernels_ms"]
    if not same:
        a = np.fromfile(outs["old"], np.float32)
        b = np.fromfile(outs["new"], np.float32)
        r["max_abs_diff"] = float(np.nanmax(np.abs(a - b))) if a.shape == b.shape else None
    for f in outs.values():
        os.remove(f)
    return r


def line(r):
    name = f"{r['op']:5s} {r['scene']:13s} {r['backend']:4s} {' '.join(r['opts'][-2:]):22s}"
    if "error" in r:
        return f"{name} ERROR {r['error']}"
    s = (f"{name} {'identical' if r['identical'] else 'DIFFERENT'}  old {r['old_s']*1e3:9.2f} ms"
         f"  new {r['new_s']*1e3:9.2f} ms  new/old {r['ratio']:.3f}")
    if "kernels_ratio" in r:
        s += (f"  kernels {r['old_kernels_ms']:.3f} -> {r['new_kernels_ms']:.3f} ms"
              f" ({r['kernels_ratio']:.3f})")
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--backends", default="cuda")
    ap.add_argument("--ops", default="", help="comma-separated subset of the operations")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default="compare.json")
    args = ap.parse_args()
    ops = set(filter(None, args.ops.split(",")))
    results, bad = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for op, scenes, opts in CASES:
                if ops and op not in ops:
                    continue
                for scene in scenes:
                    r = compare_case(args, op, scene, opts, backend, tmp)
                    print(line(r), flush=True)
                    bad += "error" in r or not r.get("identical", False)
                    results.append(r)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"{len(results) - bad} identical, {bad} different or failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
