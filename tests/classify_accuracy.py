#!/usr/bin/env python3
"""Indian Pines accuracy with the EADP paper's Table I protocol, through the CLI.

Protocol: for each split seed, `hyprof split --preset eadp-table1 --seed S` (15
training pixels for classes 1, 7 and 9, 50 for the others, the rest of the
labelled pixels for testing; seed 1992 gives samples/indian_pines_train.tif),
`hyprof train` on the features (scaled to [-1, 1], RBF SVM, C and gamma by
5-fold cross-validation over --grid), `hyprof classify`, `hyprof assess
--reference TEST`. Features (unsupervised, computed once on the whole scene):
raw = the 200 bands, pca = `hyprof pca` (7 components), eadp = `hyprof eadp`
(defaults: 7 PCs x 9), eap = `hyprof eap` (defaults: area, 8 wavelet features),
emp = `hyprof emp` and wmcd = `hyprof wmcd` (defaults: 4 wavelet features, disk
radii 1,3,5,7; W-MCD at the automatic 2-D levels).

Used by tests/test_classify_accuracy.py (reduced grid) and, as a script, for the
README's table (the full DESIGN.md grid):
  HYPROF_EXE=build/cli/hyprof /usr/bin/python3 tests/classify_accuracy.py \\
      --seeds 1992,1,2,3,4 --grid default
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
FEATURES = {
    "raw": None,
    "pca": ["pca", "--components", "7"],
    "eadp": ["eadp"],
    "eap": ["eap"],
    "emp": ["emp"],
    "wmcd": ["wmcd"],
}
REDUCED_GRID = "C=2,32,512,8192,gamma=0.0078125,0.03125,0.125,0.5,2"


def hyprof(exe, *args):
    r = subprocess.run([exe, *map(str, args), "--progress", "none"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("hyprof %s failed (%d): %s" % (" ".join(map(str, args)), r.returncode,
                                                          r.stderr))
    return r.stdout


def features(exe, folder, names):
    out = {}
    for name in names:
        if FEATURES[name] is None:
            out[name] = SAMPLES / "indian_pines.tif"
        else:
            out[name] = Path(folder) / (name + ".tif")
            hyprof(exe, *FEATURES[name], SAMPLES / "indian_pines.tif", out[name])
    return out


def evaluate(exe, feature, seed, grid, folder, classifier="svm"):
    """OA, AA, kappa (and the training report) of one feature stack and split."""
    folder = Path(folder)
    tr, te = folder / ("train-%d.tif" % seed), folder / ("test-%d.tif" % seed)
    if not tr.exists():
        hyprof(exe, "split", "--reference", SAMPLES / "indian_pines_gt.tif", "--preset",
               "eadp-table1", "--seed", seed, tr, te)
    tag = "%s-%s-%d" % (Path(feature).stem, classifier, seed)
    model, cmap = folder / (tag + ".model"), folder / (tag + ".tif")
    extra = ["--grid", grid] if classifier == "svm" else ["--classifier", "elm"]
    report = hyprof(exe, "train", "--labels", tr, *extra, feature, model).strip()
    hyprof(exe, "classify", "--model", model, feature, cmap)
    r = json.loads(hyprof(exe, "assess", "--json", "--reference", te, cmap))
    return {"oa": r["oa"], "aa": r["aa"], "kappa": r["kappa"], "train": report}


def table(exe, names, seeds, grid, classifier="svm", log=None):
    """{name: [per-seed results]} over all seeds."""
    out = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        feats = features(exe, tmp, names)
        for seed in seeds:
            for n in names:
                t = time.time()
                r = evaluate(exe, feats[n], seed, grid, tmp, classifier)
                r["seconds"] = time.time() - t
                out[n].append(r)
                if log:
                    log("%s seed %d: OA %.4f AA %.4f kappa %.4f (%.0f s) %s" % (
                        n, seed, r["oa"], r["aa"], r["kappa"], r["seconds"], r["train"]))
    return out


def mean_std(values):
    m = sum(values) / len(values)
    s = (sum((v - m) ** 2 for v in values) / max(1, len(values) - 1)) ** 0.5
    return m, s


def markdown(results):
    lines = ["| features | OA (%) | AA (%) | kappa (%) |", "|---|---:|---:|---:|"]
    for n, rs in results.items():
        cells = []
        for k in ("oa", "aa", "kappa"):
            m, s = mean_std([r[k] for r in rs])
            cells.append("%.2f ± %.2f" % (100 * m, 100 * s))
        lines.append("| %s | %s |" % (n, " | ".join(cells)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1992,1,2,3,4")
    ap.add_argument("--grid", default="default")
    ap.add_argument("--features", default="raw,pca,eadp,eap")
    ap.add_argument("--classifier", default="svm", choices=["svm", "elm"])
    ap.add_argument("--json", help="also write the per-split results here")
    a = ap.parse_args()
    exe = os.environ.get("HYPROF_EXE", str(ROOT / "build" / "cli" / "hyprof"))
    seeds = [int(s) for s in a.seeds.split(",")]
    res = table(exe, a.features.split(","), seeds, a.grid, a.classifier,
                log=lambda s: print(s, file=sys.stderr, flush=True))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    print(markdown(res))


if __name__ == "__main__":
    main()
