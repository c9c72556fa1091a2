#!/usr/bin/env python3
"""Benchmark libhyprof (CPU and CUDA) against its peers on cubes of the seeds'
scene sizes, built by mirroring real data.

Each scene is a real cube (bench/data/*.npy, made by prepare_data.py) mirrored
spatially (symmetric extension, edge repeated) and spectrally (mirror-extended, or an
evenly spaced band subset) to the scene's size, written as raw float32 BSQ. Then,
per operation whose scene list holds the scene (make_ops(): one description each):

  1. hyprof_bench --op OP per backend (and per variant: EADP's whole operation on
     CUDA, W-MCD on --wmcd-devices): one warm-up, --repeat timed calls of the public
     API call, host memory in and out;
  2. the peers (bench/peers.py) on the same data, timed the same way with
     time.perf_counter under the same thread limit, the reference first;
  3. every output compared with the reference (NumPy float64 for PCA and EADP,
     PyWavelets for DWT, scikit-image + PyWavelets for EMP/W-MCD, hyprof-cpu for
     EAP): max |out - ref| / max |ref|;
  4. the papers' figures (EADP Table III, EAP, W-MCD) as rows of their own.

Every implementation gets the same thread count (hyprof --threads; OMP/OpenBLAS/
MKL/BLIS variables and threadpoolctl for the peers). --ops classify,train adds
bench/classify_bench.py's rows. Results: a dated section appended to --out-md
(bench/results.md) and the run appended to --out-json (bench/results/<date>-<host>.json,
a list of runs, each {meta, rows, notes}). Needs NumPy; scikit-learn, PyWavelets,
scikit-image, SciPy, higra, threadpoolctl and CuPy are used when present. No GDAL.
"""
import argparse
import datetime as _dt
import functools
import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name: (width, height, bands, source cube in bench/data).
SCENES = {
    "indian_pines": (145, 145, 200, "indian_pines"),
    "samson": (95, 95, 156, "samson"),
    "pavia_u": (610, 340, 103, "samson"),
    "pavia_c": (1096, 715, 102, "samson"),
    "salinas": (512, 217, 204, "indian_pines"),
    "houston": (1905, 349, 144, "samson"),
    "wtc": (614, 512, 224, "indian_pines"),
    "multispectral": (10748, 12288, 8, "indian_pines"),  # 4.2 GB float32: --huge
    "cuprite": (350, 350, 188, "indian_pines"),  # the SSPP paper's AVIRIS Cuprite subset
    "pavia_c_2x2": (2192, 1430, 102, "samson"),  # four Pavia Centres: multi-GPU W-MCD
}
HUGE = {"multispectral"}
DEFAULT_SCENES = [s for s in SCENES if s not in HUGE | {"cuprite", "pavia_c_2x2"}]
SETTLE_S = 1.0        # pause before each hyprof run: the peers' idle BLAS threads stop spinning
PEER_BUDGET_S = 120.0  # a peer slower than this over --repeat calls gets fewer repetitions

EAP_AREA = [36, 144, 324, 576, 900, 1296, 1764]
UNMIX_P = {"wtc": 31, "cuprite": 25}  # the SSPP paper's endmember counts; other scenes 10

np = None      # imported in load_numeric(), after the thread variables are set
peers = None


# ---------------------------------------------------------------- cube making

def mirror_index(n_out, n_in):
    """0..n_in-1 extended symmetrically (edge repeated) to n_out, for any length."""
    i = np.arange(n_out) % (2 * n_in)
    return np.where(i < n_in, i, 2 * n_in - 1 - i)


def band_index(n_out, n_in):
    if n_out <= n_in:  # an evenly spaced subset keeps the spectral range
        return np.round(np.linspace(0, n_in - 1, n_out)).astype(np.intp)
    return mirror_index(n_out, n_in)


def mirror_cube(src, width, height, bands):
    """src (bands, height, width) -> float32 (bands, height, width) of the new size."""
    iy, ix = mirror_index(height, src.shape[1]), mirror_index(width, src.shape[2])
    out = np.empty((bands, height, width), dtype=np.float32)
    for k, b in enumerate(band_index(bands, src.shape[0])):  # no full-size temporary
        out[k] = src[b][np.ix_(iy, ix)]
    return out


def load_source(data_dir, name):
    path = os.path.join(data_dir, name + ".npy")
    if not os.path.exists(path):
        sys.exit(f"run_bench: {path} is missing: run `/usr/bin/python3 bench/prepare_data.py` "
                 "on a machine with GDAL and carry bench/data along")
    arr = np.load(path)
    if arr.ndim != 3:
        sys.exit(f"run_bench: {path} is not a (bands, height, width) cube")
    return arr.astype(np.float32, copy=False)


class Scene:
    """One scene's cube on disk and in memory, and what its peers need."""

    def __init__(self, name, args, sources, tmpdir, notes):
        w, h, b, src = SCENES[name]
        if src not in sources:
            sources[src] = load_source(args.data_dir, src)
        t0 = time.perf_counter()
        self.name, self.args, self.cube = name, args, mirror_cube(sources[src], w, h, b)
        self.path = os.path.join(tmpdir, f"{name}.f32")
        self.tmpdir, self.notes, self.cpu_model = tmpdir, notes, cpu_facts()["model"]
        self.cube.tofile(self.path)
        self.base = {"scene": name, "width": w, "height": h, "bands": b, "source": src}
        self._X, self.op, self.params, self.outs = None, None, None, {}
        print(f"[{name}] {w}x{h}x{b} from {src} ({self.cube.nbytes / 2**20:.0f} MiB, made in "
              f"{time.perf_counter() - t0:.1f} s)", flush=True)

    @property
    def X(self):
        """The cube pixel-major, (pixels, bands)."""
        if self._X is None:
            self._X = np.ascontiguousarray(self.cube.reshape(self.cube.shape[0], -1).T)
        return self._X


# ------------------------------------------------------------ hyprof_bench

def find_bench_exe(given):
    if given:
        return given
    cands = [os.path.join(ROOT, d, "bench", "hyprof_bench") for d in sorted(os.listdir(ROOT))
             if d.startswith("build")]
    cands = [c for c in cands if os.access(c, os.X_OK)]
    if not cands:
        sys.exit("run_bench: no hyprof_bench found under build*/bench/: pass --bench-exe")
    return max(cands, key=os.path.getmtime)


def run_bench_exe(exe, op, backend, cube_path, shape, args, extra, out_path=None, repeat=None):
    """One hyprof_bench run with the op's own options `extra`: its JSON record, or
    {"error": ..., "cmd": ...}."""
    b, h, w = shape
    cmd = [exe, "--op", op, "--backend", backend, "--input", cube_path, "--width", str(w),
           "--height", str(h), "--bands", str(b), "--repeat", str(repeat or args.repeat),
           "--threads", str(args.threads), "--device", str(args.device)] + extra
    cmd += ["--output", out_path] if out_path else []
    env = {k: v for k, v in os.environ.items() if k != "HYPROF_BACKEND"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or [f"exit {p.returncode}, no output"])[-1]
        return {"error": err, "cmd": " ".join(cmd)}
    return dict(json.loads(lines[-1]), cmd=" ".join(cmd))


HYPROF_FIELDS = ("device", "median_s", "min_s", "times_s", "repeat", "stages", "device_stages",
                 "device_ms", "out_bands", "checksum", "checksum_abs", "hyprof_version",
                 "hyprof_build", "threads", "extraction_steps")


def hyprof_row(base, op, params, backend, rec, args, notes):
    """A result row from hyprof_bench's JSON line (or its failure)."""
    row = dict(base, op=op, **params, impl=f"hyprof-{backend}", kind="hyprof",
               threads=args.threads)
    if "error" in rec:
        row.update(median_s=None, error=rec["error"], cmd=rec["cmd"])
        notes.append(f"{base['scene']} {op} hyprof-{backend} FAILED: {rec['error']}")
    elif "skipped" in rec:
        row.update(median_s=None, skipped=rec["skipped"])
        if f"hyprof-{backend} skipped: {rec['skipped']}" not in notes:
            notes.append(f"hyprof-{backend} skipped: {rec['skipped']}")
    else:
        row.update({k: rec.get(k) for k in HYPROF_FIELDS}, impl=f"hyprof-{rec['backend']}")
        row.update({k: rec[k] for k in ("per_band", "device_ms_all_bands") if k in rec})
    return row


# ------------------------------------------------------- the operations

def op_argv(op, params):
    """hyprof_bench's options from the row's settings named in op.flags."""
    fmt = lambda v: ",".join("%g" % t for t in v) if isinstance(v, list) else str(v)
    return [a for k in op.flags if k in params for a in (f"--{k}", fmt(params[k]))]


def backends(args):
    return [(b, [], "") for b in args.backend_list]


@dataclass
class Table:
    """An extra markdown table over the rows that `select` takes: a title from the
    first of them, and columns (header, align "l" or "r", cell from the row)."""
    select: Callable
    title: Callable
    columns: list


@dataclass
class Op:
    """One operation: its hyprof_bench settings and scenes, its peers and reference, the
    variants of hyprof it runs, and what its rows add to the report. Without a layout,
    hyprof's output is neither written nor compared (sspp, unmix)."""
    name: str
    scenes: str             # the args attribute listing its scenes
    params: Callable        # (scene name, bands) -> the row's settings
    flags: List[str]        # the settings passed to hyprof_bench as --name value
    peers: Optional[Callable] = None     # (scene) -> ([Peer], notes), the reference first
    reference: Optional[str] = None      # the implementation whose output is the reference
    layout: Optional[Callable] = None    # hyprof's output (planes, pixels) -> the reference's
    peer_check: Callable = lambda out, ref: out  # a peer's output -> the reference's layout
    runs: Callable = backends            # (args) -> [(backend, more options, impl suffix)]
    size: Callable = lambda r: ""        # more of the size column
    paper: Callable = lambda scene, base: []
    speedup_stage: Optional[str] = None  # compare this stage, not the whole call
    big_output: bool = False             # no output file and no peers on HUGE scenes
    setting: Callable = lambda args: ""  # its part of the section's settings line
    tables: list = field(default_factory=list)
    finish: Callable = lambda rows: None


def levels_for(b, asked=4):
    return min(asked, max(1, int(math.floor(math.log2(b))) - 1))


def wmcd_levels(b):
    """The haar level count whose feature count is closest to 4."""
    return min(range(1, max(1, int(math.floor(math.log2(b)))) + 1),
               key=lambda lv: (abs(math.ceil(b / 2 ** lv) - 4), -math.ceil(b / 2 ** lv)))


def eadp_runs(args):
    """Per backend, and on CUDA also the eadp operation itself (its PCs stay on the device)."""
    return backends(args) + ([("cuda", ["--pipeline", "op"], " (operation)")]
                             if "cuda" in args.backend_list else [])


def pca_runs(args):
    """Per backend as fit + apply, and each also as the pca operation (fit-transform, as the
    command line runs it: one pass of the cube to the device on CUDA)."""
    return backends(args) + [(b, ["--pipeline", "op"], " (operation)") for b in args.backend_list]


def wmcd_runs(args):
    more = args.wmcd_devices and "cuda" in args.backend_list
    return backends(args) + ([("cuda", ["--devices", args.wmcd_devices],
                               f" (devices {args.wmcd_devices})")] if more else [])


def eap_params(scene, b, k=8):
    return dict({"attribute": "area", "thresholds": EAP_AREA, "connectivity": 4,
                 "quantisation": 8, "reduction": "pca" if b > k else "none",
                 "features": min(b, k)}, **({"components": k} if b > k else {}))


def stage_ms(r):
    return "; " + ", ".join(f"{k[:-9]} {v * 1e3:.1f} ms" for k, v in r["stages"].items()
                            if v is not None and k.endswith("_median_s")) if r.get("stages") else ""


def eadp_facts(rows):
    """Core-seconds of the diffusion stage (what Table III times), the per-core ratio to
    the NumPy peer and the ratio to the paper."""
    by_scene = {}
    for r in rows:
        if r["op"] == "eadp" and (r.get("stages") or {}).get("eadp_median_s") is not None:
            by_scene.setdefault(r["scene"], []).append(r)
    for grp in by_scene.values():
        for r in grp:
            if r["impl"] == "hyprof-cpu":
                r["threads_used"] = r.get("threads")
            if r["kind"] != "paper" and r.get("threads_used"):
                r["eadp_core_s"] = r["stages"]["eadp_median_s"] * r["threads_used"]
        ref = next((r.get("eadp_core_s") for r in grp if r["impl"] == "numpy-eadp"), None)
        paper = peers.PAPER_EADP.get(grp[0]["scene"], {})
        for r in grp:
            e, side = r["stages"]["eadp_median_s"], {"hyprof-cuda": "gpu",
                                                     "hyprof-cpu": "cpu"}.get(r["impl"])
            if ref and r.get("eadp_core_s") and r["kind"] != "paper":
                r["per_core_speedup_vs_numpy"] = ref / r["eadp_core_s"]
            if side in paper:
                r["paper_eadp_s"], r["paper_over_this"] = paper[side], paper[side] / e
                if side == "cpu" and r.get("eadp_core_s"):
                    r["paper_core_s_over_this"] = (paper[side] * peers.PAPER_EADP_DEV["cpu"][1]
                                                   / r["eadp_core_s"])


def num(spec, scale=1.0, unit=""):
    """A cell formatter: None as a dash, else v * scale in `spec`, then `unit`."""
    return lambda v: "—" if v is None else format(v * scale, spec) + unit


fmt_x, fmt_ms, fmt_gbs, f3 = num(".2f", unit="x"), num(".4g", 1e3), num(".0f"), num(".3f")


def fmt_s(v):
    return "—" if v is None else (f"{v:.4g}" if v >= 0.001 else f"{v:.3g}")


def fmt_err(v):
    return (v or "") if v is None or isinstance(v, str) else f"{v:.1e}"


def fmt_ms_wide(v):
    return "—" if v is None else (f"{1e3 * v:.0f}" if v >= 1.0 else f"{1e3 * v:.4g}")


def st(key, fmt=fmt_ms):
    return lambda r: fmt((r.get("stages") or {}).get(f"{key}_median_s"))


def get(key, fmt=lambda v: "—" if v is None else str(v)):
    return lambda r: fmt(r.get(key))


def paper_ratio(r):
    if r.get("paper_over_this") is not None and r.get("paper_core_s_over_this") is not None:
        return f"{r['paper_over_this']:.2f}x ({r['paper_core_s_over_this']:.2f}x per core)"
    return fmt_x(r.get("paper_over_this"))


def eadp_split(r):
    """Device ms of the CUDA EADP pipeline by kind, from the library's CUDA event times."""
    dm = r["device_ms"]
    tot = lambda *ks: sum(dm[k] for k in ks) if all(dm.get(k) is not None for k in ks) else None
    return {"pca": tot("pca_covariance", "pca_eigh", "pca_projection"),
            "diffusion": tot("eadp_prepare", "eadp_fed", "eadp_output"),
            "kernels": tot("pca_covariance", "pca_eigh", "pca_projection", "eadp_prepare",
                           "eadp_fed", "eadp_output"),
            "fed": dm.get("eadp_fed"),
            "transfers": tot("pca_upload", "pca_download", "eadp_upload", "eadp_download")}


def fed_gbs(r):
    gbs, peak, cg = (r["device_ms"].get("eadp_fed_gbs"), r["device_ms"].get("eadp_fed_peak_gbs"),
                     r.get("device_copy_gbs"))
    of = ([f"{100 * gbs / peak:.0f}% of {peak:.0f}"] if gbs and peak else []) + \
         ([f"{100 * gbs / cg:.0f}% of {cg:.0f} copy"] if gbs and cg else [])
    return f"{gbs:.0f}" + (f" ({'; '.join(of)})" if of else "") if gbs else "—"


def has_stage(op, stage):
    return lambda r: r["op"] in op and (r.get("stages") or {}).get(f"{stage}_median_s")


CHECK_COLUMN = ("max rel diff", "r", get("check_rel_diff", fmt_err))
EADP_TABLES = [
    Table(has_stage(("eadp",), "eadp"), lambda r: (
        f"EADP by stage ({r['components']} PCs, T = {r['step']:g}...{r['step'] * r['count']:g}, "
        f"{r['cycles']} FED cycle(s) per increment; diffusion = `hyprof_eadp` on the PCs, what "
        "the paper's Table III totals; core·s = diffusion time x threads doing it, NumPy's "
        "element-wise work counted as one thread; paper / this: the paper's diffusion time over "
        "ours, GPU against its GTX 1060, CPU against its 6 cores):"),
        [("scene", "l", get("scene")), ("implementation", "l", get("impl")),
         ("device", "l", get("device")), ("threads", "r", get("threads_used")),
         ("PCA ms", "r", st("pca")), ("diffusion ms", "r", st("eadp")),
         ("total ms", "r", get("median_s", fmt_ms)), ("diffusion core·s", "r",
                                                      get("eadp_core_s", fmt_s)),
         ("per-core speed-up vs numpy-eadp", "r", get("per_core_speedup_vs_numpy", fmt_x)),
         ("paper / this", "r", paper_ratio), CHECK_COLUMN]),
    Table(lambda r: r["op"] == "eadp" and r.get("device_ms"), lambda r: (
        "EADP device time by stage (hyprof-cuda; CUDA event times the library logs, medians "
        "over the timed runs; PCA = covariance + eigh + projection, its pass 1 (upload of the "
        "cube overlapped with the band sums) counted as a transfer; diffusion = smoothing, "
        "gradient, contrast, diffusivity + FED + float outputs; transfers = the cube's upload, "
        "the PCs' download, their upload and the profile's download; FED GB/s = the bytes the "
        "FED kernels read and write / FED time, as the library's debug log gives them, next to "
        "the device's theoretical peak and, where CuPy measured it in this run, its "
        "device-to-device copy bandwidth (read + write)):"),
        [("scene", "l", get("scene")), ("implementation", "l", get("impl")),
         ("device", "l", get("device"))]
        + [(head, "r", lambda r, k=k: f3(eadp_split(r)[k])) for head, k in (
            ("PCA dev ms", "pca"), ("diffusion dev ms", "diffusion"), ("of which FED ms", "fed"),
            ("kernels ms (PCA + diffusion)", "kernels"), ("transfers ms", "transfers"))]
        + [("FED GB/s (% of peak; of copy)", "r", fed_gbs),
         ("FED unfused-equivalent GB/s", "r", lambda r: fmt_gbs(
             r["device_ms"].get("eadp_fed_unfused_gbs")))])]

EAP_TABLES = [Table(has_stage(("eap",), "profile"), lambda r: (
    f"EAP by stage (area, thresholds {', '.join('%g' % t for t in r['thresholds'])}, "
    f"{r['connectivity']}-connectivity, {r['quantisation']}-bit levels; profile = `hyprof_eap` "
    "on the features, host memory in and out; the peers' profile is the same 2 x 7 filters per "
    "feature on hyprof's quantised features; device = the CUDA path's own event times, summed "
    "over its band batches):"),
    [("scene", "l", get("scene")), ("implementation", "l", get("impl")),
     ("device", "l", get("device")), ("reduction ms", "r", st("reduction", fmt_ms_wide)),
     ("profile ms", "r", st("profile", fmt_ms_wide)),
     ("total ms", "r", get("median_s", fmt_ms_wide)),
     ("CUDA device stages", "l", lambda r: str(r.get("device_stages") or "").split(
         "device ms:", 1)[-1].strip()), CHECK_COLUMN])]

UNMIX_STAGES = ["homogeneity", "purity", "kmeans", "fusion", "extraction", "abundances"]
UNMIX_TABLES = [Table(lambda r: r["op"] in ("sspp", "unmix") and r.get("median_s") is not None,
                      lambda r: "Unmixing (SSPP paper chain: p endmembers; stage times in ms, "
                      "medians, host clock; peers time one stage each, on the same cube; CUDA rows "
                      "also give the device time of each CUDA stage, CUDA events):",
                      [("scene", "l", get("scene")), ("op", "l", get("op")),
                       ("p", "r", get("endmembers")), ("implementation", "l", get("impl")),
                       ("total ms", "r", lambda r: fmt_ms(r["median_s"]) if r["kind"] == "hyprof"
                        else "—")]
                      + [(s, "r", st(s)) for s in UNMIX_STAGES]
                      + [("CUDA device ms", "l", lambda r: ", ".join(
                          f"{k[:-9]} {fmt_ms(v)}" for k, v in (
                              r.get("device_stages") if isinstance(r.get("device_stages"), dict)
                              else {}).items()))])]


def make_ops():
    """One description per operation, in the order they run on a scene."""
    emp = dict(scenes="wmcd_scene_list", flags=["features"],
               params=lambda s, b: {"features": 4, "levels": wmcd_levels(b)},
               peers=peers.emp_peers, reference="skimage+pywt", runs=wmcd_runs,
               paper=peers.wmcd_paper, size=lambda r: f", L={r['levels']}, 4 features, disk 1,3,5,7"
               + stage_ms(r))
    unmix = dict(scenes="unmix_scene_list", flags=["endmembers", "sspp", "extract"],
                 peers=peers.unmix_peers)
    ops = [
        Op("pca", "scene_list", lambda s, b: {"components": 7}, ["components"],
           peers=peers.pca_peers, reference="numpy-eigh-f64", layout=lambda o: o.T,
           peer_check=peers.pca_check, runs=pca_runs,
           setting=lambda a: "PCA: 7 components (hyprof: fit + apply, and the operation's "
           "fit-transform)"),
        Op("dwt", "scene_list", lambda s, b: {"wavelet": "db4", "levels": levels_for(b)},
           ["wavelet", "levels"], peers=peers.dwt_peers, reference="pywt (pixel-major, axis=-1)",
           layout=lambda o: o.T, peer_check=peers.dwt_check, size=lambda r: f", L={r['levels']}",
           setting=lambda a: "DWT: db4, periodization, levels in the size column"),
        Op("eadp", "eadp_scene_list",
           lambda s, b: {"components": 7, "count": 8, "step": 65.0, "cycles": 1},
           ["components", "count", "step", "cycles"], peers=peers.eadp_peers,
           reference="numpy-eadp", layout=lambda o: o, runs=eadp_runs, paper=peers.eadp_paper,
           size=lambda r: f", {r['components']} PCs x {r['count'] + 1}", tables=EADP_TABLES,
           finish=eadp_facts, setting=lambda a: (
               "EADP: T = 65, 130, 195, 260, 325, 390, 455, 520, 1 FED cycle(s) per increment, "
               f"on {', '.join(s for s in a.eadp_scene_list if s in a.scene_list)}")),
        Op("eap", "eap_scene_list", eap_params, ["reduction", "attribute", "thresholds",
                                                 "connectivity", "quantisation", "components"],
           peers=peers.eap_peers, reference="hyprof-cpu", layout=lambda o: o,
           peer_check=peers.eap_check, paper=peers.eap_paper, speedup_stage="profile",
           big_output=True, tables=EAP_TABLES,
           size=lambda r: f", {r['features']} features x {2 * len(r['thresholds']) + 1}",
           setting=lambda a: "EAP: area, on " + ", ".join(
               s for s in a.eap_scene_list if s in a.scene_list)),
        Op("emp", **emp, layout=lambda o: o),
        Op("wmcd", **emp, layout=lambda o: o),
        Op("sspp", **unmix, params=lambda s, b: {"endmembers": UNMIX_P.get(s, 10)}),
        Op("unmix", **unmix, tables=UNMIX_TABLES, params=lambda s, b: {
            "endmembers": UNMIX_P.get(s, 10), "sspp": 1, "extract": "nfindr",
            "nnls_pixels": 5000}),
    ]
    return {op.name: op for op in ops}


# ---------------------------------------------------------- the generic loop

def report(row, what=""):
    if row.get("median_s") is None:
        print(f"  {row['op']} {row['impl']}: {row.get('error') or row.get('skipped')}", flush=True)
        return
    s = ", ".join(f"{k[:-9]} {v:.4g} s" for k, v in (row.get("stages") or {}).items()
                  if v is not None and k.endswith("_median_s"))
    steps = f"; extraction steps {row['extraction_steps']}" if row.get("extraction_steps") else ""
    print(f"  {row['op']} {row['impl']}: median {row['median_s']:.4g} s"
          + (f" ({s})" if s else "") + steps + what, flush=True)


def run_hyprof(op, sc, exe, params, write):
    """hyprof per backend and variant: its rows and outputs, by implementation."""
    rows, outs, (_, h, w) = [], {}, sc.cube.shape
    for backend, extra, suffix in op.runs(sc.args):
        time.sleep(SETTLE_S)
        out_path = os.path.join(sc.tmpdir, f"{op.name}.out") if write else None
        rec = run_bench_exe(exe, op.name, backend, sc.path, sc.cube.shape, sc.args,
                            op_argv(op, params) + extra, out_path)
        row = hyprof_row(sc.base, op.name, params, backend, rec, sc.args, sc.notes)
        if row.get("median_s") is not None:
            row["impl"] += suffix
            if out_path and os.path.exists(out_path):
                outs[row["impl"]] = op.layout(np.fromfile(out_path, np.float32).reshape(-1, h * w))
        if out_path and os.path.exists(out_path):
            os.remove(out_path)
        rows.append(row)
        report(row)
    return rows, outs


def reference_only(op, sc, peer):
    """The reference peer's output without timing it (--no-peers), None if it fails."""
    with peers.thread_limit(sc.args.threads):
        try:
            out = peer.fn()
        except Exception as e:
            sc.notes.append(f"{sc.name} {op.name} {peer.name} failed: {type(e).__name__}: {e}")
            return None
    return out[1] if peer.staged else out


def bench_op(op, sc, exe, rows):
    """hyprof per backend, the peers, the checks against the reference, the papers."""
    args, huge = sc.args, sc.name in HUGE and op.big_output
    sc.op, sc.params = op.name, op.params(sc.name, sc.cube.shape[0])
    hy, sc.outs = run_hyprof(op, sc, exe, sc.params, op.layout is not None and not huge)
    ref = sc.outs.get(op.reference)
    new = []
    if huge:
        sc.notes.append(f"{sc.name} {op.name}: no peers and no output at this size")
    elif op.peers and not (args.no_peers and ref is not None):
        plist, pnotes = op.peers(sc)
        sc.notes.extend(n for n in dict.fromkeys(f"{op.name}: {n}" for n in pnotes)
                        if n not in sc.notes and not args.no_peers)
        for peer in plist:
            if args.no_peers:  # the reference only, once, untimed
                if peer.name == op.reference:
                    ref = reference_only(op, sc, peer)
                continue
            row, out = peers.run_peer(op, sc, peer, ref, PEER_BUDGET_S)
            if row:
                new.append(row)
                report(row, f", max rel diff {row['check_rel_diff']:.1e} against {op.reference}"
                       if isinstance(row.get("check_rel_diff"), float) else "")
            if peer.name == op.reference:
                ref = out
            del out
    for row in hy:
        if row["impl"] == op.reference and ref is not None:
            row["check_rel_diff"] = "ref"
        elif ref is not None and row["impl"] in sc.outs:
            row["check_rel_diff"] = peers.rel_diff(sc.outs[row["impl"]], ref)
    done = [r for r in hy if r.get("median_s") is not None]
    if op.layout is not None and not sc.outs and len(done) > 1:
        same = len({(r.get("checksum"), r.get("checksum_abs")) for r in done}) == 1
        sc.notes.append(f"{sc.name} {op.name}: {', '.join(r['impl'] for r in done)} checksums "
                        f"{'identical' if same else 'DIFFER'} (outputs not compared value by "
                        "value)")
    rows += hy + new + op.paper(sc.name, dict(sc.base, op=op.name, **sc.params))
    sc.outs = {}


def scene_ops(args, ops):
    """(scene, [ops]) in run order. pca, dwt, eadp and eap run on the scenes of their own
    list that --scenes holds too; emp, wmcd, sspp and unmix on all of their own list."""
    todo = {}
    for name in args.op_list:
        if name in ops:
            op = ops[name]
            for s in getattr(args, op.scenes):
                if op.scenes in ("wmcd_scene_list", "unmix_scene_list") or s in args.scene_list:
                    todo.setdefault(s, []).append(op)
    order = args.scene_list + args.unmix_scene_list + args.wmcd_scene_list
    return sorted(todo.items(), key=lambda kv: order.index(kv[0]))


def bench_classification(args, exe, tmpdir, rows, notes):
    sys.path.insert(0, HERE)
    import classify_bench as cb
    if "classify" in args.op_list:
        cb.bench_classify(args, exe, tmpdir, rows, notes, hyprof_row, mirror_cube,
                          peers.time_call, peers.median, run_bench_exe)
    if "train" in args.op_list:
        cb.bench_train(args, exe, tmpdir, rows, notes, hyprof_row, peers.time_call,
                       peers.median, run_bench_exe)


# ---------------------------------------------------------- machine facts

@functools.lru_cache(maxsize=None)
def cpu_facts():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        info = ""
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    cores = set(re.findall(r"^physical id\s*:\s*(\d+)$.*?^core id\s*:\s*(\d+)$", info,
                           re.M | re.S))
    return {"model": model.group(1) if model else platform.processor() or "unknown",
            "logical_cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)),
            "physical_cores": len(cores) or None}


def gpu_facts():
    smi = shutil.which("nvidia-smi")
    try:
        p = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, TypeError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in p.stdout.splitlines() if ln.strip()] if p.returncode == 0 else []


def loadavg():
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def host_label(gpus):
    """hostname plus the accelerator ('vm-h200') or '-cpu'."""
    name = socket.gethostname().split(".")[0] or "host"
    if not gpus:
        return f"{name}-cpu"
    words = [w for w in gpus[0].split(",")[0].split() if w.upper() not in ("NVIDIA", "TESLA")]
    tag = "".join(c for c in (words[0] if words else "gpu").lower() if c.isalnum())
    return f"{name}-{tag or 'gpu'}"


def git_facts():
    """The tree's commit; $HYPROF_BENCH_COMMIT when the tree is a copy whose git
    metadata is not its own (a device machine's copy of a working tree)."""
    if os.environ.get("HYPROF_BENCH_COMMIT"):
        return os.environ["HYPROF_BENCH_COMMIT"]
    git = lambda *a: subprocess.run(["git", "-C", ROOT] + list(a), capture_output=True,
                                    text=True).stdout.strip()
    try:
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return (git("rev-parse", "--short", "HEAD") or "no commit") + (
            " (uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def library_facts():
    facts = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("sklearn", "pywt", "scipy", "cupy"):
        try:
            facts[mod] = __import__(mod).__version__
        except Exception:
            facts[mod] = None
    try:
        from threadpoolctl import threadpool_info
        facts["blas"] = ", ".join(
            " ".join(str(x) for x in (i.get("internal_api"), i.get("version")) if x)
            + f" ({i.get('num_threads')} threads)" for i in threadpool_info()) or "none found"
    except ImportError:
        facts["blas"] = "threadpoolctl missing"
    return facts


def load_numeric(threads):
    global np, peers
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        os.environ[var] = str(threads)
    import numpy
    np = numpy
    sys.path.insert(0, HERE)
    import peers as p
    peers = p


# ---------------------------------------------------------------- reporting

def compared_s(r, ops):
    op = ops.get(r["op"])
    if op and op.speedup_stage:
        return (r.get("stages") or {}).get(f"{op.speedup_stage}_median_s")
    return r["median_s"]


def add_speedups(rows, ops):
    groups = {}
    for r in rows:
        if r.get("median_s") is not None:
            groups.setdefault((r["scene"], r["op"]), []).append(r)
    for grp in groups.values():
        best = min((compared_s(r, ops) for r in grp if r["kind"] == "peer"
                    and compared_s(r, ops)), default=None)
        for r in grp:
            t = compared_s(r, ops)
            r["fastest_peer_s"] = best
            r["speedup_vs_fastest_peer"] = best / t if best and t else None


def size_cell(r, ops):
    s = f"{r['width']}x{r['height']}x{r['bands']}"
    if r["op"] in ops:
        return s + ops[r["op"]].size(r)
    if r["op"] == "classify" and r.get("model_size"):
        return s + f", {r['model_size']} SVs, {r.get('classes')} classes"
    if r["op"].startswith("train"):
        return s + f", {r.get('classifier')}" + (", grid 11x10, 5 folds"
                                                 if r.get("classifier") == "svm" else "")
    return s


def table_lines(header, aligns, cells):
    return ["| " + " | ".join(header) + " |",
            "|" + "".join("---|" if a == "l" else "---:|" for a in aligns)] + \
           ["| " + " | ".join(c) + " |" for c in cells]


MD_INTRO = ("Each section is one run of `bench/run_bench.py` (see bench/README.md); sections "
            "are appended, never rewritten. Times are medians of the timed repetitions after one "
            "warm-up; hyprof's include the host<->device transfers (the API takes host memory). "
            "Speed-up = fastest peer's median / this row's median (above 1: faster than every "
            "peer). `max rel diff` is max|hyprof - reference| / max|reference| (reference: NumPy "
            "float64 eigh for PCA, PyWavelets for DWT, tests/eadp_reference.py on the NumPy PCs "
            "for EADP).")


def header_lines(meta):
    cpu, libs = meta["cpu"], meta["libraries"]
    cores = f"{cpu['usable_cpus']} usable logical CPUs" + (
        f", {cpu['physical_cores']} physical cores" if cpu.get("physical_cores") else "")
    return [f"## {meta['date']} — {meta['host']}", "",
            f"- CPU: {cpu['model']} ({cores})",
            f"- GPU: {'; '.join(meta['gpus']) if meta['gpus'] else 'none'}",
            f"- threads: {meta['threads']} for every implementation (hyprof --threads, "
            "OMP/OpenBLAS/MKL variables, threadpoolctl); PyWavelets is single-threaded; "
            f"1-min load average before the run {meta.get('loadavg_before')}, after "
            f"{meta.get('loadavg_after')}",
            f"- hyprof {meta.get('hyprof_version') or '?'} ({meta.get('hyprof_build') or '?'}), "
            f"commit {meta['git']}; Python {libs['python']}, NumPy {libs['numpy']} "
            f"(BLAS: {libs.get('blas')}), scikit-learn {libs.get('sklearn') or '—'}, "
            f"PyWavelets {libs.get('pywt') or '—'}, CuPy {libs.get('cupy') or '—'}",
            f"- {meta['repeat']} timed repetitions after one warm-up"
            + "".join(f"; {s}" for s in meta["settings"] if s),
            "- cubes mirrored from real data: " + ", ".join(
                f"{s} from {src}" for s, src in meta["sources"].items()), ""]


def write_markdown(path, meta, rows, notes, ops):
    new = not os.path.exists(path)
    lines = ["# hyprof benchmark results", "", MD_INTRO, ""] if new else []
    lines += header_lines(meta)
    main_rows = [r for r in rows if r.get("median_s") is not None]
    lines += table_lines(
        ["scene", "size (WxHxB)", "op", "implementation", "median s", "min s",
         "speed-up vs fastest peer (EAP: profile stage)", "max rel diff"], "llllrrrr",
        [[r["scene"], size_cell(r, ops), r["op"], r["impl"], fmt_s(r["median_s"]),
          fmt_s(r.get("min_s")), fmt_x(r.get("speedup_vs_fastest_peer")),
          fmt_err(r.get("check_rel_diff"))] for r in main_rows])
    for op in ops.values():
        for t in op.tables:
            sel = [r for r in rows if t.select(r)]
            if sel:
                lines += ["", t.title(sel[0]), ""] + table_lines(
                    [c[0] for c in t.columns], [c[1] for c in t.columns],
                    [[c[2](r) for c in t.columns] for r in sel])
    lines += (["", "Notes:"] + [f"- {n}" for n in notes] if notes else []) + [""]
    with open(path, "a") as f:
        f.write(("" if new else "\n") + "\n".join(lines))


def write_json(path, meta, rows, notes):
    runs = []
    if os.path.exists(path):
        with open(path) as f:
            runs = json.load(f)
    runs.append({"meta": meta, "rows": rows, "notes": notes})
    with open(path + ".tmp", "w") as f:
        json.dump(runs, f, indent=1)
    os.replace(path + ".tmp", path)


def print_table(rows):
    for r in rows:
        if r.get("median_s") is not None:
            print(f"{r['scene']:<13} {r['op']:<5} {r['impl']:<32} {fmt_s(r['median_s']):>9} s  "
                  f"{fmt_x(r.get('speedup_vs_fastest_peer')):>8}  "
                  f"{fmt_err(r.get('check_rel_diff'))}")


# --------------------------------------------------------------------- main

SCENE_OPTIONS = {  # option: (its default, which operations it picks scenes for)
    "scenes": (",".join(DEFAULT_SCENES), "pca and dwt, and the scenes eadp and eap may use"),
    "eadp_scenes": ("indian_pines,samson,pavia_u,salinas,houston", "eadp"),
    "eap_scenes": ("pavia_c", "eap (--huge adds multispectral)"),
    "wmcd_scenes": ("pavia_c,salinas,pavia_c_2x2", "emp and wmcd"),
    "unmix_scenes": ("wtc,cuprite", "sspp and unmix"),
}
ALL_OPS = ["pca", "dwt", "eadp", "eap", "emp", "wmcd", "sspp", "unmix", "classify", "train"]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="pca,dwt,eadp,eap,emp,wmcd,sspp,unmix",
                    help=f"comma-separated subset of {','.join(ALL_OPS)} (default: %(default)s)")
    for opt, (default, what) in SCENE_OPTIONS.items():
        ap.add_argument("--" + opt.replace("_", "-"), default=default,
                        help=f"the scenes of {what} (default: %(default)s)")
    ap.add_argument("--huge", action="store_true",
                    help="also the 10748x12288x8 multispectral scene (~30 GB of RAM with peers)")
    ap.add_argument("--backends", default="cpu,cuda",
                    help="hyprof backends; cuda rows are skipped when there is no device")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for every implementation (default: the usable CPUs)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device for hyprof")
    ap.add_argument("--wmcd-devices", default="",
                    help="also hyprof-cuda emp/wmcd on these devices together (e.g. 0,1)")
    ap.add_argument("--no-peers", action="store_true", help="hyprof only (still checked)")
    ap.add_argument("--no-gpu-peers", action="store_true", help="skip the CuPy peer")
    ap.add_argument("--bench-exe", help="hyprof_bench (default: newest build*/bench/hyprof_bench)")
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--out-md", default=os.path.join(HERE, "results.md"))
    ap.add_argument("--out-json", help="default: bench/results/<date>-<host>.json")
    ap.add_argument("--note", action="append", default=[],
                    help="a line added to the section's notes (repeatable)")
    args = ap.parse_args(argv)
    for opt in SCENE_OPTIONS:
        lst = [s.strip() for s in getattr(args, opt).split(",") if s.strip()]
        if args.huge and opt in ("scenes", "eap_scenes") and "multispectral" not in lst:
            lst.append("multispectral")
        bad = [s for s in lst if s not in SCENES]
        if bad:
            ap.error(f"unknown --{opt.replace('_', '-')} {bad}; known: {list(SCENES)}")
        setattr(args, opt.rstrip("s") + "_list", lst)
    args.op_list = [o for o in args.ops.split(",") if o]
    if set(args.op_list) - set(ALL_OPS):
        ap.error(f"--ops takes {', '.join(ALL_OPS)}")
    args.backend_list = [b for b in args.backends.split(",") if b]
    if set(args.backend_list) - {"cpu", "cuda"}:
        ap.error("--backends takes cpu and/or cuda")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    args.threads = args.threads if args.threads > 0 else len(os.sched_getaffinity(0))
    args.settle_s, args.peer_budget_s = SETTLE_S, PEER_BUDGET_S  # classify_bench reads them
    return args


def run_all(args, exe, ops, meta):
    rows, notes, sources = [], list(args.note), {}
    tmpdir = tempfile.mkdtemp(prefix="hyprof_bench_")
    try:
        for name, scene_ops_ in scene_ops(args, ops):
            sc = Scene(name, args, sources, tmpdir, notes)
            for op in scene_ops_:
                bench_op(op, sc, exe, rows)
            os.remove(sc.path)
            meta["sources"][name] = SCENES[name][3]
        if {"classify", "train"} & set(args.op_list):
            bench_classification(args, exe, tmpdir, rows, notes)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return rows, notes


def main(argv=None):
    args = parse_args(argv)
    load_numeric(args.threads)
    exe = find_bench_exe(args.bench_exe)
    ops = make_ops()
    now = _dt.datetime.now(_dt.timezone.utc)
    gpus = gpu_facts()
    meta = {"date": now.strftime("%Y-%m-%d %H:%M UTC"), "host": host_label(gpus),
            "cpu": cpu_facts(), "gpus": gpus, "threads": args.threads, "repeat": args.repeat,
            "loadavg_before": loadavg(), "ops": args.op_list, "components": 7, "wavelet": "db4",
            "eap_scenes": [s for s in args.eap_scene_list if s in args.scene_list],
            "eadp": {"scenes": args.eadp_scene_list, "times": [65.0 * i for i in range(1, 9)],
                     "cycles": 1},
            "settings": [op.setting(args) for n, op in ops.items() if n in args.op_list],
            "git": git_facts(), "bench_exe": os.path.abspath(exe), "sources": {}}
    with peers.thread_limit(args.threads):
        meta["libraries"] = library_facts()
    print(f"run_bench: {meta['cpu']['model']}, {args.threads} threads, GPU: "
          f"{'; '.join(gpus) or 'none'}, bench {exe}", flush=True)
    rows, notes = run_all(args, exe, ops, meta)
    for r in rows:
        if r.get("hyprof_version"):
            meta["hyprof_version"], meta["hyprof_build"] = r["hyprof_version"], r["hyprof_build"]
        if r.get("impl") == "hyprof-cuda" and r.get("device") and not meta["gpus"]:
            meta["gpus"] = [r["device"]]
    if any(r.get("device_ms") for r in rows):
        meta["device_copy_gbs"] = peers.device_copy_gbs()
        for r in rows:
            if r.get("device_ms") and meta["device_copy_gbs"]:
                r["device_copy_gbs"] = meta["device_copy_gbs"]
    meta["loadavg_after"] = loadavg()
    add_speedups(rows, ops)
    for op in ops.values():
        op.finish(rows)
    write_markdown(args.out_md, meta, rows, notes, ops)
    out_json = args.out_json or os.path.join(HERE, "results",
                                             f"{now.strftime('%Y-%m-%d')}-{meta['host']}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
    write_json(out_json, meta, rows, notes)
    print(f"run_bench: appended to {args.out_md}, wrote {out_json}")
    print_table(rows)
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
