"""SSPP's K-means (CPU backend) gives exactly the labels, initial pixels and
inertia of the full double computation, on cubes built to be full of near and
exact ties: the float pre-pass of the assignment must leave every undecided
centre to the exact distances, and both ways of updating the centres (the
fixed-order block sums, and the moves of the changed pixels between exact
totals on integer-valued cubes) must give the fixed order's bits.

The oracle is an independent NumPy transcription of the documented arithmetic
(algorithms/unmixing/unmixing_impl.h): squared distances accumulated band by
band in double without fused multiply-adds, the first nearest centre on ties,
centre sums in pixel order within blocks of 1024 pixels and then block by
block, the farthest-point start, the inertia summed in pixel order.

Run: /usr/bin/python3 -m pytest tests/test_kmeans_exact.py
"""

import os

import numpy as np
import pytest

from conftest import gdal, read_cube, run_ok, write_cube

BLOCK = 1024  # HYPROF_KMEANS_BLOCK


def dist(X, c):
    d = np.zeros(X.shape[0])
    for b in range(X.shape[1]):
        t = X[:, b] - c[..., b]  # one centre, or one a pixel
        d += t * t
    return d


def ordered_sums(X, labels, k):
    S = np.zeros((k, X.shape[1]))
    for p0 in range(0, X.shape[0], BLOCK):
        lab, xb = labels[p0:p0 + BLOCK], X[p0:p0 + BLOCK]
        for c in range(k):
            if (lab == c).any():
                S[c] = S[c] + np.cumsum(xb[lab == c], axis=0)[-1]
    return S, np.bincount(labels[labels >= 0], minlength=k)


def exact_kmeans(cube, k, iters):
    """(labels with -1 where masked, initial pixels, inertia, iterations)."""
    X = cube.reshape(cube.shape[0], -1).T.astype(np.float64)
    valid = ~np.isnan(X).any(axis=1)
    S, n = ordered_sums(X, np.where(valid, 0, -1), 1)
    ref, mind, init = S[0] / n[0], None, []
    for j in range(k):
        d = dist(X, ref)
        mind = d if j <= 1 else np.where(d < mind, d, mind)
        mind = np.where(valid, mind, -1.0)
        init.append(int(np.argmax(mind)))
        ref = X[init[-1]]
    C, labels, done = X[init].copy(), np.full(X.shape[0], -2), 0
    for _ in range(iters):
        new = np.argmin(np.stack([dist(X, C[c]) for c in range(k)]), axis=0)
        new = np.where(valid, new, -1)
        changed, labels = (new != labels).sum(), new
        if changed == 0:
            break
        S, n = ordered_sums(X, labels, k)
        C[n > 0] = S[n > 0] / n[n > 0, None]
        done += 1
    own = np.where(valid, dist(X, C[np.maximum(labels, 0)]), 0.0)
    return labels, init, np.cumsum(own)[-1], done


def run_sspp(tmp_path, cube, k, iters=50):
    write_cube(tmp_path / "in.tif", cube.astype(np.float32))
    out = tmp_path / "out.tif"
    env = dict(os.environ, HYPROF_LOG="debug")
    r = run_ok("sspp", "--backend", "cpu", "--progress", "none", "--endmembers", k,
               "--kmeans-iterations", iters, tmp_path / "in.tif", out, env=env)
    md = gdal.Open(str(out)).GetMetadata()
    labels = read_cube(out)[3].ravel()
    labels = np.where(np.isnan(labels), 0, labels).astype(int) - 1
    init = [int(v) for v in md["HYPROF_KMEANS_INIT_PIXELS"].split(",")]
    return (labels, init, float(md["HYPROF_KMEANS_INERTIA"]),
            int(md["HYPROF_KMEANS_ITERATIONS"]), r.stderr)


def check(tmp_path, cube, k, sums):
    cube = cube.astype(np.float32)
    labels, init, inertia, iters, log = run_sspp(tmp_path, cube, k)
    want = exact_kmeans(cube, k, 50)
    assert f"sums={sums}" in log, log
    assert init == want[1]
    assert iters == want[3] and iters >= 4, (iters, want[3])  # the updates matter
    assert np.array_equal(labels, want[0]), (labels != want[0]).sum()
    assert inertia == want[2], (inertia, want[2])


def near_tie_cube(rng, bands, rows, cols, k):
    """A high level with a small spread (the float pre-pass's bound is then
    wide), pixels near cluster prototypes, and pixels at the exact midpoints
    of two prototypes."""
    protos = 1000.0 + 0.05 * rng.standard_normal((k, bands))
    which = rng.integers(0, k, rows * cols)
    X = protos[which] + 0.06 * rng.standard_normal((rows * cols, bands))
    mid = rng.random(rows * cols) < 0.3
    a, b = rng.integers(0, k, (2, rows * cols))
    X[mid] = ((protos[a] + protos[b]) / 2)[mid]
    return X.T.reshape(bands, rows, cols)


def test_near_ties_float_cube(tmp_path):
    rng = np.random.default_rng(26)
    cube = near_tie_cube(rng, 12, 48, 40, 5)
    cube[3, :4] = 1e-6 * rng.random(cube.shape[2])  # a wide exponent range: ordered sums
    cube[:, 7:9, 5:30] = np.nan
    check(tmp_path, cube, 5, "ordered")


def test_exact_ties_integer_cube(tmp_path):
    rng = np.random.default_rng(7)
    cube = rng.integers(0, 4, (6, 50, 45)).astype(np.float64)
    cube[:, 10:12, :] = np.nan
    check(tmp_path, cube, 4, "exact")


def test_near_ties_integer_level(tmp_path):
    """Integer values at a high level: exact sums, a wide pre-pass bound."""
    rng = np.random.default_rng(11)
    cube = np.round(4.0 * (near_tie_cube(rng, 9, 40, 60, 6) - 1000.0) * 100.0) + 20000.0
    check(tmp_path, cube, 6, "exact")
