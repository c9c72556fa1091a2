#!/usr/bin/env python3
"""The command line end to end: `hyprof OP` on a GeoTIFF against the I/O floor.

Builds an Int16 GeoTIFF of a bench scene's size (tiled, DEFLATE, the real cube
mirrored as run_bench.py mirrors it), then for each operation:

  cli      `hyprof OP --backend B INPUT OUTPUT` with HYPROF_LOG=debug: wall
           time, the CPU time of the process (all threads) and the CLI's own
           stage times (read, compute, write);
  floor    the I/O floor of that run, in this process through GDAL: reading
           the whole input as float32 (GTiff decoding on all cores) plus
           writing the operation's own output pixels (read back from OUTPUT
           first, untimed) with OUTPUT's creation options (tiled 256, band
           interleaved, its codec and predictor; ZSTD at hyprof's level 1);
  ratio    wall / max(floor, compute): the goal is <= 1.2 (an executable
           without the stage trace, an older build, gets wall / floor).

--codecs writes the outputs again with each candidate compression (time,
CPU time, size, read-back time): the table behind the default. --concurrent N
runs each operation N times at once and N times one after another (the goal:
at once within 1.3x of one after another).

classify runs the Indian Pines EADP features mirrored to the scene's size
(float32, 63 bands) with their SVM; unmix runs SSPP + N-FINDR + FCLS with 10
endmembers (run_bench.py's unmix row).

Run with /usr/bin/python3 (GDAL) from anywhere, or with any Python that has
rasterio (bench/gdal_io.py; the GPU machine: docs/internals/device_e2e.md);
bench/data/samson.npy (and for classify indian_pines_eadp.npy and .model)
comes from bench/prepare_data.py:
  /usr/bin/python3 bench/e2e_bench.py [--hyprof EXE] [--scene pavia_c]
      [--ops eadp,eap,emp,wmcd,pca] [--backend cpu] [--codecs] [--concurrent 4]
"""
import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gdal_io as gio  # noqa: E402  (GDAL through osgeo, else rasterio)
import run_bench as rb  # noqa: E402  (scene sizes and the mirroring)

rb.np = np

INPUT_CO = ["TILED=YES", "COMPRESS=DEFLATE", "INTERLEAVE=BAND"]  # the bench inputs
INPUT_GT = [500000.0, 1.3, 0.0, 4000000.0, 0.0, -1.3]
BASE_CO = ["TILED=YES", "BLOCKXSIZE=256", "BLOCKYSIZE=256", "INTERLEAVE=BAND",
           "BIGTIFF=IF_SAFER", "NUM_THREADS=ALL_CPUS"]
CODECS = {
    "ZSTD 1": ["COMPRESS=ZSTD", "ZSTD_LEVEL=1"],
    "ZSTD 3": ["COMPRESS=ZSTD", "ZSTD_LEVEL=3"],
    "ZSTD 1, predictor 3": ["COMPRESS=ZSTD", "ZSTD_LEVEL=1", "PREDICTOR=3"],
    "ZSTD 9, predictor 3": ["COMPRESS=ZSTD", "PREDICTOR=3"],
    "DEFLATE 6, predictor 3": ["COMPRESS=DEFLATE", "PREDICTOR=3"],
    "DEFLATE 1, predictor 3": ["COMPRESS=DEFLATE", "PREDICTOR=3", "ZLEVEL=1"],
    "DEFLATE 1": ["COMPRESS=DEFLATE", "ZLEVEL=1"],
    "LERC_ZSTD lossless": ["COMPRESS=LERC_ZSTD", "MAX_Z_ERROR=0"],
    "LZW, predictor 3": ["COMPRESS=LZW", "PREDICTOR=3"],
    "none": [],
}
STAGES = re.compile(r"run s: read ([\d.]+), compute ([\d.]+), write ([\d.]+)")


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def make_input(scene, data_dir, path):
    w, h, b, src = rb.SCENES[scene]
    cube = rb.mirror_cube(rb.load_source(data_dir, src), w, h, b)
    scale = 10000.0 if cube.max() <= 2.0 else 1.0  # reflectance in [0, 1] -> Int16 counts
    with gio.create(path, w, h, b, np.int16, INPUT_CO, INPUT_GT) as ds:
        for k in range(b):
            ds.write(k + 1, np.round(cube[k] * scale).astype(np.int16))
    return w, h, b


def op_input(op, scene, data_dir, inp, tmp):
    """The input and extra options of `op`: classify gets the Indian Pines EADP
    features mirrored to the scene's size (float32) and their SVM model."""
    if op == "unmix":
        return inp, ["--endmembers", "10", "--sspp", "--extract", "nfindr"]
    if op != "classify":
        return inp, []
    path, model = (os.path.join(tmp, scene + "_features.tif"),
                   os.path.join(data_dir, "indian_pines_eadp.model"))
    if not os.path.exists(path):
        w, h = rb.SCENES[scene][:2]
        feats = np.load(os.path.join(data_dir, "indian_pines_eadp.npy")).astype(np.float32)
        with gio.create(path, w, h, feats.shape[0], np.float32, INPUT_CO, INPUT_GT) as ds:
            for k, band in enumerate(rb.mirror_cube(feats, w, h, feats.shape[0])):
                ds.write(k + 1, band)
    return path, ["--model", model]


def run_cli(exe, op, backend, inp, out, extra=()):
    env = dict(os.environ, HYPROF_LOG="debug")
    cmd = [exe, op, "--backend", backend, "--overwrite", "--progress", "none", *extra, inp, out]
    c0, t0 = cpu_children(), time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, cpu_children() - c0
    if p.returncode != 0:
        sys.exit(f"e2e_bench: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    m = STAGES.search(p.stderr)
    read, compute, write = (float(m.group(i)) for i in (1, 2, 3)) if m else (None,) * 3
    used = re.search(r"backend (\w+)\)", p.stdout)  # "wrote ... (WxH, N bands, backend cpu)"
    return {"wall_s": wall, "cpu_s": cpu, "read_s": read, "compute_s": compute, "write_s": write,
            "used": used.group(1) if used else backend}


def write_raster(path, w, h, arr, options):
    """Writes arr (bands, h, w) in its type with options: wall and CPU seconds."""
    t0, c0 = time.perf_counter(), cpu_self()
    with gio.create(path, w, h, arr.shape[0], arr.dtype, options) as ds:
        for k in range(arr.shape[0]):
            ds.write(k + 1, arr[k])
    return time.perf_counter() - t0, cpu_self() - c0


def read_floor(inp):
    t0 = time.perf_counter()
    gio.read(inp, np.float32, ["NUM_THREADS=ALL_CPUS"])
    return time.perf_counter() - t0


def output_co(path):
    """The creation options of a hyprof output as its structure shows them
    (ZSTD at hyprof's level 1; other codecs at GDAL's default level)."""
    st = gio.structure(path)
    co = list(BASE_CO)
    if st.get("COMPRESSION"):
        co.append("COMPRESS=" + st["COMPRESSION"])
    if st.get("PREDICTOR"):
        co.append("PREDICTOR=" + st["PREDICTOR"])
    if st.get("COMPRESSION") == "ZSTD":
        co.append("ZSTD_LEVEL=1")
    return co


def io_floor(inp, out, tmp):
    arr, co = gio.read(out), output_co(out)
    read = read_floor(inp)
    write, _ = write_raster(os.path.join(tmp, "floor.tif"), arr.shape[2], arr.shape[1], arr, co)
    os.unlink(os.path.join(tmp, "floor.tif"))
    return read, write, arr


def codec_rows(op, arr, tmp):
    rows = []
    for name, co in CODECS.items():
        path = os.path.join(tmp, "codec.tif")
        wall, cpu = write_raster(path, arr.shape[2], arr.shape[1], arr, BASE_CO + co)
        t0 = time.perf_counter()
        gio.read(path)
        rows.append({"op": op, "codec": name, "write_s": wall, "write_cpu_s": cpu,
                     "read_s": time.perf_counter() - t0,
                     "mib": os.path.getsize(path) / 2**20, "raw_mib": arr.nbytes / 2**20})
        os.unlink(path)
    return rows


def concurrent(exe, op, backend, inp, tmp, n, extra=()):
    outs = [os.path.join(tmp, f"conc{i}.tif") for i in range(n)]
    t0 = time.perf_counter()
    for o in outs:
        run_cli(exe, op, backend, inp, o, extra)
    seq = time.perf_counter() - t0
    cmd = lambda o: [exe, op, "--backend", backend, "--overwrite", "--progress", "none", *extra,
                     inp, o]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd(o), stdout=subprocess.DEVNULL) for o in outs]
    rcs = [p.wait() for p in procs]
    par = time.perf_counter() - t0
    if any(rcs):
        sys.exit(f"e2e_bench: a concurrent {op} run failed: {rcs}")
    return {"op": op, "runs": n, "sequential_s": seq, "concurrent_s": par, "ratio": par / seq}


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.node()}: {model}, {os.cpu_count()} cores, {gio.version()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hyprof", default=None)
    ap.add_argument("--scene", default="pavia_c", choices=sorted(rb.SCENES))
    ap.add_argument("--ops", default="eadp,eap,emp,wmcd,pca")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--codecs", action="store_true")
    ap.add_argument("--concurrent", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the rows here")
    a = ap.parse_args()
    exe = a.hyprof or next((p for p in (os.path.join(ROOT, d, "cli", "hyprof")
                                        for d in ("build", "build-release"))
                            if os.path.exists(p)), None)
    if not exe:
        sys.exit("e2e_bench: no hyprof executable; build it or pass --hyprof")
    rows, codecs, conc = [], [], []
    with tempfile.TemporaryDirectory(prefix="hyprof-e2e-") as tmp:
        inp = os.path.join(tmp, a.scene + ".tif")
        w, h, b = make_input(a.scene, a.data_dir, inp)
        print(f"# {machine()}; load {os.getloadavg()[0]:.1f}; {a.scene} {w}x{h}x{b} Int16")
        print("| op | backend | out bands | wall s | CPU s | read | compute | write | "
              "floor s (read + write) | wall / max(floor, compute) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for op in a.ops.split(","):
            out = os.path.join(tmp, op + ".tif")
            op_inp, extra = op_input(op, a.scene, a.data_dir, inp, tmp)
            r = run_cli(exe, op, a.backend, op_inp, out, extra)
            fr, fw, arr = io_floor(op_inp, out, tmp)
            floor = fr + fw
            r.update(op=op, backend=a.backend, bands=arr.shape[0], floor_read_s=fr,
                     floor_write_s=fw, ratio=r["wall_s"] / max(floor, r["compute_s"] or 0))
            rows.append(r)
            f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731 (no stage trace)
            shown = a.backend if r["used"] == a.backend else f"{a.backend}: {r['used']}"
            print(f"| {op} | {shown} | {arr.shape[0]} | {f(r['wall_s'])} | {f(r['cpu_s'])} |"
                  f" {f(r['read_s'])} | {f(r['compute_s'])} | {f(r['write_s'])} |"
                  f" {floor:.2f} ({fr:.2f} + {fw:.2f}) | {r['ratio']:.2f} |", flush=True)
            if a.codecs:  # float32, as the profiles are (predictor 3 needs floats)
                codecs += codec_rows(op, arr.astype(np.float32, copy=False), tmp)
            if a.concurrent:
                conc.append(concurrent(exe, op, a.backend, op_inp, tmp, a.concurrent, extra))
            os.unlink(out)
        if codecs:
            print("\n| op | compression | write s | write CPU s | read s | MiB (raw) |")
            print("|---|---|---|---|---|---|")
            for c in codecs:
                print(f"| {c['op']} | {c['codec']} | {c['write_s']:.2f} | {c['write_cpu_s']:.2f}"
                      f" | {c['read_s']:.2f} | {c['mib']:.1f} ({c['raw_mib']:.0f}) |")
        if conc:
            print("\n| op | runs | one after another s | at once s | ratio |")
            print("|---|---|---|---|---|")
            for c in conc:
                print(f"| {c['op']} | {c['runs']} | {c['sequential_s']:.2f} |"
                      f" {c['concurrent_s']:.2f} | {c['ratio']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), "scene": a.scene, "rows": rows, "codecs": codecs,
                       "concurrent": conc}, f, indent=1)


if __name__ == "__main__":
    main()
