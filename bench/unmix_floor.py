#!/usr/bin/env python3
"""Samson: how close hyprof's unmixing chain comes to the floor of linear
unmixing (issue 27, part 2).

The floor: FCLS abundances with the reference endmembers
(samples/samson_endmembers.csv). Those spectra are shapes scaled to a peak of
1, so each is first scaled to the mean brightness (Euclidean norm) of the
pixels whose reference abundance of it exceeds 0.95; FCLS is solved per pixel
by SciPy's NNLS with the sum-to-one row weighted by 1e3 times the largest
endmember value (a weight of 1e3 alone is weak against radiances in the
thousands: the sums then stray up to 0.57 from one). The chain: `hyprof.unmix`
with p = 3 and each extraction, with and without SSPP candidates, with and
without `--refine mean` (--refine-purity 0.9, the default, then 0.8 and 0.95),
FCLS abundances; its endmembers are paired with the reference ones by the
assignment of least total spectral angle
(scipy.optimize.linear_sum_assignment). Prints the mean spectral angle (rad)
and the abundance RMSE of each, and the floor's RMSE.

    /usr/bin/python3 bench/unmix_floor.py [--backend cpu|cuda|auto]

Needs NumPy, SciPy, GDAL's Python bindings and the hyprof package (installed,
or python/ of this checkout with $HYPROF_LIBRARY).
"""

import argparse
import itertools
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from osgeo import gdal
from scipy.optimize import linear_sum_assignment, nnls

ROOT = Path(__file__).resolve().parent.parent
try:
    import hyprof
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))
    import hyprof

S = ROOT / "samples"


def angle(a, b):
    return float(np.arccos(np.clip(a @ b / np.linalg.norm(a) / np.linalg.norm(b), -1, 1)))


def fcls(E, X):
    delta = 1e3 * np.abs(E).max()
    M = np.vstack([E, delta * np.ones((1, E.shape[1]))])
    return np.stack([nnls(M, np.append(x, delta), maxiter=500)[0] for x in X.T], 1)


def paired(E_ref, E):
    """Column order of E matching E_ref (least total angle) and the angles."""
    cost = np.array([[angle(E_ref[:, i], E[:, j]) for j in range(E.shape[1])]
                     for i in range(E_ref.shape[1])])
    rows, cols = linear_sum_assignment(cost)
    return cols, cost[rows, cols]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    a = ap.parse_args()
    cube = gdal.Open(str(S / "samson.tif")).ReadAsArray().astype(np.float32)
    A = gdal.Open(str(S / "samson_abundances.tif")).ReadAsArray().astype(float).reshape(3, -1)
    E_ref = np.loadtxt(S / "samson_endmembers.csv", delimiter=",", skiprows=1)[:, 2:]
    X = cube.reshape(cube.shape[0], -1).astype(float)
    scale = [np.linalg.norm(X[:, A[k] > 0.95].mean(1)) / np.linalg.norm(E_ref[:, k])
             for k in range(3)]
    floor = np.sqrt(((fcls(E_ref * scale, X) - A) ** 2).mean())
    print("| chain | mean angle rad | angles (rock, tree, water) | abundance RMSE | "
          "RMSE / floor |")
    print("|---|---:|---|---:|---:|")
    print("| floor: FCLS, reference endmembers | 0 | - | %.4f | 1.00 |" % floor)
    with tempfile.TemporaryDirectory() as tmp:
        for extract, sspp, refine in itertools.product(("nfindr", "vca", "atgp"),
                                                   (False, True), (None, "0.9", "0.8", "0.95")):
            csv = os.path.join(tmp, "%s_%d_%s.csv" % (extract, sspp, refine))
            opt = {"refine": "mean", "refine_purity": float(refine)} if refine else {}
            res = hyprof.unmix(cube, endmembers="3", extract=extract, sspp=sspp,
                               abundances="fcls", endmembers_csv=csv, backend=a.backend,
                               **opt)
            E = np.genfromtxt(csv, delimiter=",", skip_header=1)[:, 2:]  # no wavelengths: empty
            cols, ang = paired(E_ref, E)
            Ah = np.asarray(res)[:3].reshape(3, -1)[cols]
            rmse = np.sqrt(((Ah - A) ** 2).mean())
            print("| %s%s%s | %.4f | %s | %.4f | %.2f |" % (
                extract, " + SSPP" if sspp else "",
                " + refine mean, purity %s" % refine if refine else "", ang.mean(),
                ", ".join("%.4f" % v for v in ang), rmse, rmse / floor))


if __name__ == "__main__":
    main()
