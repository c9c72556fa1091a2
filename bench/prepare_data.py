#!/usr/bin/env python3
"""Converts the real cubes the benchmarks mirror into float32 .npy files.

Writes bench/data/indian_pines.npy (200 x 145 x 145) and bench/data/samson.npy
(156 x 95 x 95), each float32 shaped (bands, height, width). bench/data/ is
git-ignored; the files travel to the GPU machine with the working tree
(`carry`), where no GDAL is needed.

Sources, first found wins:
  samson:       samples/samson.tif (GDAL), else ../shared/data/samson/samson_1.img
                (ENVI; GDAL, or a plain reader of its int16 BSQ when GDAL is absent)
  indian_pines: samples/indian_pines.tif (GDAL), else
                tensorly/datasets/data/Indian_pines_corrected.npy read with zipfile
                out of the tensorly wheel (/tmp/tl/tensorly-0.9.0-py3-none-any.whl)

For the classification rows (run_bench.py --ops classify,train), when a built
`hyprof` executable is found (--hyprof, else build*/cli/hyprof): the EADP
features of Indian Pines (`hyprof eadp`, defaults: 63 bands) as
indian_pines_eadp.npy, the Table I training labels as indian_pines_train.npy
(uint16, samples/indian_pines_train.tif) and the SVM trained on them with the
default grid (`hyprof train`, needs LIBSVM) as indian_pines_eadp.model: the GPU
machine has neither GDAL nor LIBSVM.

Run with /usr/bin/python3 (numpy, GDAL) from anywhere:
  /usr/bin/python3 bench/prepare_data.py [--force] [--out-dir DIR] [--hyprof EXE]
"""
import glob
import subprocess
import tempfile
import argparse
import io
import os
import re
import sys
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
TENSORLY_WHEEL = "/tmp/tl/tensorly-0.9.0-py3-none-any.whl"
TENSORLY_MEMBER = "tensorly/datasets/data/Indian_pines_corrected.npy"

EXPECTED = {"samson": (156, 95, 95), "indian_pines": (200, 145, 145)}


def read_gdal(path):
    from osgeo import gdal  # only needed for GeoTIFF / ENVI through GDAL

    gdal.UseExceptions()
    ds = gdal.Open(path)
    arr = ds.ReadAsArray()
    if arr.ndim == 2:
        arr = arr[None]
    nodata = ds.GetRasterBand(1).GetNoDataValue()
    arr = arr.astype(np.float32)
    if nodata is not None and np.any(arr == nodata):
        print(f"  note: {path} has nodata={nodata} pixels; kept as values", file=sys.stderr)
    return arr


def read_envi_plain(img):
    """int16/uint16/float32 BSQ ENVI without GDAL (enough for samson_1.img)."""
    with open(img + ".hdr") as f:
        hdr = f.read()

    def field(name):
        m = re.search(rf"^\s*{name}\s*=\s*(\S+)", hdr, re.M | re.I)
        if not m:
            raise ValueError(f"{img}.hdr: no '{name}'")
        return m.group(1)

    w, h, b = int(field("samples")), int(field("lines")), int(field("bands"))
    dtype = {"2": "<i2", "12": "<u2", "4": "<f4"}[field("data type")]
    if field("interleave").lower() != "bsq" or int(field("header offset")) != 0:
        raise ValueError(f"{img}: only BSQ without header offset is read here")
    if field("byte order") != "0":
        dtype = dtype.replace("<", ">")
    return np.fromfile(img, dtype=dtype).reshape(b, h, w).astype(np.float32)


def load_samson():
    tif = os.path.join(ROOT, "samples", "samson.tif")
    if os.path.exists(tif):
        return read_gdal(tif), tif
    img = os.path.join(SHARED, "data", "samson", "samson_1.img")
    try:
        return read_gdal(img), img + " (GDAL)"
    except ImportError:
        return read_envi_plain(img), img + " (plain ENVI reader)"


def load_indian_pines():
    tif = os.path.join(ROOT, "samples", "indian_pines.tif")
    if os.path.exists(tif):
        return read_gdal(tif), tif
    with zipfile.ZipFile(TENSORLY_WHEEL) as z:
        arr = np.load(io.BytesIO(z.read(TENSORLY_MEMBER)))
    # stored (height, width, bands)
    return np.ascontiguousarray(arr.transpose(2, 0, 1)).astype(np.float32), (
        f"{TENSORLY_WHEEL}:{TENSORLY_MEMBER}")


def find_hyprof(given):
    if given:
        return given
    cands = [c for c in glob.glob(os.path.join(ROOT, "build*", "cli", "hyprof"))
             if os.access(c, os.X_OK)]
    return max(cands, key=os.path.getmtime) if cands else None


def prepare_classification(out_dir, hyprof, force):
    """EADP features, training labels and the SVM model for the classify rows."""
    feats = os.path.join(out_dir, "indian_pines_eadp.npy")
    labels = os.path.join(out_dir, "indian_pines_train.npy")
    model = os.path.join(out_dir, "indian_pines_eadp.model")
    if all(os.path.exists(p) for p in (feats, labels, model)) and not force:
        print(f"classification: {feats}, {labels}, {model} exist (use --force to rewrite)")
        return
    if not hyprof:
        print("classification: no hyprof executable (build the CLI or pass --hyprof): "
              "skipped", file=sys.stderr)
        return
    samples = os.path.join(ROOT, "samples")
    train_tif = os.path.join(samples, "indian_pines_train.tif")
    with tempfile.TemporaryDirectory() as tmp:
        tif = os.path.join(tmp, "eadp.tif")
        subprocess.run([hyprof, "eadp", "--progress", "none",
                        os.path.join(samples, "indian_pines.tif"), tif], check=True)
        subprocess.run([hyprof, "train", "--progress", "none", "--labels", train_tif, tif,
                        model + ".tmp"], check=True)
        os.replace(model + ".tmp", model)
        np.save(feats, read_gdal(tif))
    np.save(labels, read_gdal(train_tif)[0].astype(np.uint16))
    print(f"classification: {feats}, {labels}, {model}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--force", action="store_true", help="rewrite existing files")
    ap.add_argument("--hyprof", help="the hyprof executable (default: newest build*/cli/hyprof)")
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    for name, loader in (("samson", load_samson), ("indian_pines", load_indian_pines)):
        out = os.path.join(args.out_dir, name + ".npy")
        if os.path.exists(out) and not args.force:
            print(f"{name}: {out} exists (use --force to rewrite)")
            continue
        arr, src = loader()
        if arr.shape != EXPECTED[name]:
            print(f"  note: {name} is {arr.shape}, expected {EXPECTED[name]}", file=sys.stderr)
        if not np.all(np.isfinite(arr)):
            sys.exit(f"{name}: {src} has non-finite values")
        tmp = out + ".tmp.npy"
        np.save(tmp, np.ascontiguousarray(arr, dtype=np.float32))
        os.replace(tmp, out)
        print(f"{name}: {src} -> {out} {arr.shape} float32 "
              f"range {arr.min():g}..{arr.max():g}")
    prepare_classification(args.out_dir, find_hyprof(args.hyprof), args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
