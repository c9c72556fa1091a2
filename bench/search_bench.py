"""`hyprof train --search` on Indian Pines, the EADP paper's Table I protocol.

For each split seed: `hyprof split --preset eadp-table1 --seed S` of the reference map
(Table I's per-class training counts, the rest is the test set), `hyprof train --search`
on the raw cube (samples/indian_pines.tif, 145 x 145 x 200) with the training pixels,
`hyprof classify` of the raw cube with the model (the chosen profile, or the fusion's profiles, computed from the
cube), and the overall accuracy on the test pixels. Prints one line per split (the
model, its cross-validated accuracy, the best candidate alone, OA, seconds of the search
and of classify) and the mean OA; --json writes the rows.

Run with the interpreter that has GDAL:
  /usr/bin/python3 bench/search_bench.py [--exe build/cli/hyprof] [--seeds 1,2,3,4,5]
      [--backend auto|cpu|cuda] [--search default|"RECIPE;RECIPE"] [--fusion auto|none]
      [--grid default] [--keep DIR] [--json FILE]
"""
import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from osgeo import gdal

ROOT = Path(__file__).resolve().parent.parent


def run(exe, *args):
    t = time.perf_counter()
    r = subprocess.run([exe, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("%s failed (%d): %s" % (" ".join(map(str, args[:2])), r.returncode,
                                                 r.stderr.strip()))
    return r.stdout, time.perf_counter() - t


def one_split(a, seed, d):
    train, test = d / ("train%d.tif" % seed), d / ("test%d.tif" % seed)
    run(a.exe, "split", "--progress", "none", "--overwrite", "--preset", "eadp-table1", "--seed",
        seed, "--reference", a.reference, train, test)
    model, report = d / ("m%d.model" % seed), d / ("r%d.json" % seed)
    _, t_search = run(a.exe, "train", "--backend", a.backend, "--progress", "none", "--overwrite",
                      "--labels", train, "--search", a.search, "--grid", a.grid, "--folds",
                      a.folds, "--seed", seed, "--fusion", a.fusion, "--search-report", report,
                      a.cube, model)
    out = d / ("map%d.tif" % seed)
    _, t_classify = run(a.exe, "classify", "--backend", a.backend, "--progress", "none",
                        "--overwrite", "--model", model, a.cube, out)
    ds = gdal.Open(str(out))
    m, model_text = ds.ReadAsArray(), ds.GetMetadataItem("HYPROF_PROFILE")
    t = gdal.Open(str(test)).ReadAsArray()
    oa = float((m[t > 0] == t[t > 0]).mean())
    rep = json.loads(report.read_text())
    best = next(c for c in rep["candidates"] if c["recipe"] == rep["best"])
    stopped = sum(c["stopped_early"] for c in rep["candidates"])
    fusion = next(f for f in rep["fusions"] if f["chosen"])
    return {"seed": seed, "winner": rep["best"], "cv_accuracy": best["accuracy"], "oa": oa,
            "model": model_text, "members": fusion["members"], "majority": fusion["majority"],
            "model_cv_accuracy": fusion["accuracy"],
            "search_s": t_search, "classify_s": t_classify, "candidates": len(rep["candidates"]),
            "stopped_early": stopped, "training_pixels": rep["training_pixels"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exe", default=str(ROOT / "build" / "cli" / "hyprof"))
    p.add_argument("--cube", default=str(ROOT / "samples" / "indian_pines.tif"))
    p.add_argument("--reference", default=str(ROOT / "samples" / "indian_pines_gt.tif"))
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--backend", default="auto")
    p.add_argument("--search", default="default")
    p.add_argument("--fusion", default="auto")
    p.add_argument("--grid", default="default")
    p.add_argument("--folds", default=5, type=int)
    p.add_argument("--json")
    p.add_argument("--keep", help="folder for the splits, models, reports and maps (default: "
                                   "a temporary one, removed)")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for seed in [int(s) for s in a.seeds.split(",")]:
            r = one_split(a, seed, work)
            rows.append(r)
            print("seed %d: OA %.4f, model '%s' (CV %.4f; best alone '%s', CV %.4f), search "
                  "%.1f s (%d candidates, %d stopped early), classify %.1f s"
                  % (r["seed"], r["oa"], r["model"], r["model_cv_accuracy"], r["winner"],
                     r["cv_accuracy"], r["search_s"], r["candidates"], r["stopped_early"],
                     r["classify_s"]), flush=True)
    mean = float(np.mean([r["oa"] for r in rows]))
    print("mean OA over %d splits: %.4f; search %.1f s a split on average (%s, %d CPUs, "
          "backend %s)" % (len(rows), mean, np.mean([r["search_s"] for r in rows]),
                           platform.node(), os.cpu_count(), a.backend))
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "mean_oa": mean,
                                            "host": platform.node(),
                                            "cpus": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
