#!/usr/bin/env python3
"""Builds the fixture of tests/test_gpu_classify.c (the GPU machine has no LIBSVM):

  classify_features.f32   6 principal components of samples/indian_pines.tif
                          (145 x 145, float32 band-sequential) followed by 2000
                          pixels between pairs of training pixels of different
                          classes (borderline on purpose), as a 145 x 159 cube
  classify_svm.model      `hyprof train` on samples/indian_pines_train.tif
                          (C = 32, gamma = 2, scaled to [-1, 1])
  classify_labels.u16     LIBSVM's own labels (python3-libsvm svm_predict on the
                          LIBSVM part of the model, features scaled as hyprof
                          does: -1 + 2 (x - min) / (max - min) in double)

Run from the repository root after building the CLI:
  /usr/bin/python3 tests/data/make_classify_fixture.py build/cli/hyprof
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from osgeo import gdal

import svmutil  # Debian's python3-libsvm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
W, H0, EXTRA_ROWS = 145, 145, 14  # 14 rows of 145 = 2030 >= 2000 extra pixels
C, GAMMA, COMPONENTS, SEED = 32, 2, 6, 7


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def read_model_scaling(path):
    with open(path) as f:
        lines = f.read().split("\n")
    get = lambda key: next(l for l in lines if l.startswith(key + " "))
    lo = np.array(get("min").split()[1:], dtype=np.float64)
    hi = np.array(get("max").split()[1:], dtype=np.float64)
    libsvm = lines[lines.index("libsvm_model") + 1:]
    return lo, hi, "\n".join(libsvm)


def scale(x, lo, hi):
    rng = hi - lo
    return np.where(rng > 0, -1.0 + 2.0 * (x - lo) / np.where(rng > 0, rng, 1.0), 0.0)


def main():
    hyprof = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/cli/hyprof")
    samples = os.path.join(ROOT, "samples")
    with tempfile.TemporaryDirectory() as tmp:
        pcs = os.path.join(tmp, "pcs.tif")
        model = os.path.join(tmp, "m.model")
        run(hyprof, "pca", "--components", str(COMPONENTS), "--progress", "none",
            os.path.join(samples, "indian_pines.tif"), pcs)
        run(hyprof, "train", "--labels", os.path.join(samples, "indian_pines_train.tif"),
            "--grid", f"C={C},gamma={GAMMA}", "--progress", "none", pcs, model)
        cube = gdal.Open(pcs).ReadAsArray().astype(np.float32)  # bands, rows, cols
        train = gdal.Open(os.path.join(samples, "indian_pines_train.tif")).ReadAsArray()
        # Borderline pixels: points on segments between training pixels of two classes.
        rng = np.random.default_rng(SEED)
        px = cube.reshape(COMPONENTS, -1).T
        idx = np.flatnonzero(train.ravel() > 0)
        lab = train.ravel()[idx]
        extra = np.zeros((EXTRA_ROWS * W, COMPONENTS), np.float32)
        for k in range(EXTRA_ROWS * W):
            a, b = rng.choice(idx.size, 2, replace=False)
            while lab[a] == lab[b]:
                b = rng.integers(idx.size)
            t = rng.random()
            extra[k] = (1 - t) * px[idx[a]] + t * px[idx[b]]
        allpx = np.vstack([px, extra])  # pixels x bands, row-major pixel order
        lo, hi, libsvm_text = read_model_scaling(model)
        lib_path = os.path.join(tmp, "libsvm.model")
        with open(lib_path, "w") as f:
            f.write(libsvm_text)
        m = svmutil.svm_load_model(lib_path)
        xs = scale(allpx.astype(np.float64), lo, hi)
        xs_list = [{j + 1: float(v) for j, v in enumerate(row)} for row in xs]
        labels, _, _ = svmutil.svm_predict([0] * len(xs_list), xs_list, m, "-q")
        labels = np.array(labels, dtype=np.uint16)
        bsq = np.ascontiguousarray(allpx.T).astype("<f4")  # bands x pixels
        bsq.tofile(os.path.join(HERE, "classify_features.f32"))
        labels.astype("<u2").tofile(os.path.join(HERE, "classify_labels.u16"))
        with open(model) as src, open(os.path.join(HERE, "classify_svm.model"), "w") as dst:
            dst.write(src.read())
        print(f"{W}x{H0 + EXTRA_ROWS}x{COMPONENTS}: {m.get_nr_sv()} support vectors, "
              f"{len(set(labels.tolist()))} classes in the labels")


if __name__ == "__main__":
    main()
