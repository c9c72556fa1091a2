#!/usr/bin/env python3
"""Benchmark libhyprof (CPU and CUDA) against its peers on cubes of the seeds'
scene sizes, built by mirroring real data.

For each scene: a real cube (bench/data/*.npy, made by prepare_data.py) is
mirrored spatially (symmetric extension, as numpy.pad mode='symmetric', repeated
as often as needed) to the scene's width and height, and spectrally to its band
count (mirror-extended when more bands are needed, an evenly spaced band subset
when fewer). The cube is written as raw float32 BSQ, then in the same run:

  pca  hyprof_bench --op pca (fit + apply, per backend), scikit-learn
       PCA(n_components).fit_transform (svd_solver 'full' and, where the installed
       version has it, 'covariance_eigh'), NumPy covariance + eigh + projection
       (float64 and float32), and CuPy's (covariance + eigh + projection, host
       arrays in and out) where CuPy sees a GPU;
  dwt  hyprof_bench --op dwt (per backend), PyWavelets
       wavedec(mode='periodization', axis=-1)[0] on the pixel-major array and
       wavedec(axis=0)[0] on the band-sequential one;
  eadp hyprof_bench --op eadp (PCA to 7 components, then the diffusion profiles
       at T = 65..520: 63 bands; stages pca and eadp), and `numpy-eadp`:
       NumPy float64 PCA, then tests/eadp_reference.py (the tests' oracle) on the
       same 7 PCs, its diffusion timed per core (NumPy's element-wise work runs
       on one thread); next to them the EADP paper's Table III figures
       (GTX 1060 and 6 CPU cores) and our ratio to them. Only on --eadp-scenes.
  emp, wmcd
       hyprof_bench --op emp / --op wmcd (haar spectral DWT to the level count
       closest to 4 features, 8-bit quantisation, EMP by reconstruction with
       disk radii 1,3,5,7, and for wmcd the 2-D haar denoising at the automatic
       levels; stages spectral, quantise, emp, denoise, download: the slowest
       device's, from the library's stage trace, and every device's stages in
       device_stages), per backend and, with --wmcd-devices 0,1, on several
       GPUs (also on pavia_c_2x2, four Pavia Centre-size scenes mirrored, where
       the scaling shows); the peer `skimage+pywt` runs the
       same chain on the same data: PyWavelets wavedec (features),
       tests/eap_reference.py's quantisation, scikit-image erosion/dilation +
       reconstruction (tests/emp_reference.py) and PyWavelets wavedec2/waverec2
       (periodization) per EMP band; its output is the reference. Next to them
       the W-MCD paper's Pavia City figures (K80). Only on --wmcd-scenes.
  classify, train
       see bench/classify_bench.py: prediction with a saved SVM over a Pavia
       Centre-size stack (1096 x 715 x 63 EADP features) per backend, next to
       scikit-learn's SVC.predict; training (grid search, ELM) next to
       GridSearchCV(SVC). Not in the default --ops.
  sspp hyprof_bench --op sspp (per backend; stages homogeneity, purity, kmeans,
       fusion) with p endmembers (the seed paper's: 31 for WTC, 25 for the Cuprite
       subset); peers per stage: scipy.ndimage.gaussian_filter of every band + RMSE,
       scikit-learn PCA(p).fit_transform, scikit-learn KMeans(p, k-means++, n_init=1,
       max_iter=50, lloyd). Only on --unmix-scenes.
  unmix the whole chain, hyprof_bench --op unmix (SSPP + N-FINDR + FCLS; stages as
       sspp plus extraction and abundances), the same peers plus SciPy's nnls per
       pixel for FCLS (the augmented-row form, delta 1e3), timed on --nnls-pixels
       pixels and scaled to the scene's pixel count (the row says so). Only on
       --unmix-scenes.
  eap  hyprof_bench --op eap (PCA to --eap-features components, or the bands as
       they are when there are no more than that; then the area profile with the
       paper's 7 thresholds, 4-connectivity, 8 bits: stages reduction and profile,
       and the CUDA device stages), next to scikit-image's area_closing /
       area_opening (one call per threshold, as its API goes) and higra's max-tree
       + area + reconstruct_leaf_data (one tree per band and polarity, like ours)
       on the same quantised features (the band planes of hyprof's output), and the
       EAP paper's figures (GTX 1070). Every output is compared with hyprof-cpu's
       (max rel diff 0 = identical). Only on --eap-scenes (pavia_c, and the
       multispectral scene with --huge, where no peer runs and the backends are
       compared by checksum).

hyprof is timed by hyprof_bench (one warm-up, --repeat timed calls of the whole
public API call, host memory in and out). Peers are timed the same way with
time.perf_counter. Every implementation gets the same thread count (hyprof
--threads; OMP/OpenBLAS/MKL/BLIS variables and threadpoolctl for the peers).
hyprof's output is compared with a reference (NumPy float64 eigh for PCA, sign
fixed as hyprof fixes it; PyWavelets for DWT) and the max relative difference is
reported.

Results: a new dated section appended to bench/results.md (earlier sections are
never touched) and the same rows in bench/results/<date>-<host>.json (a list of
runs, appended to).

Needs python3 with numpy; scikit-learn, PyWavelets, threadpoolctl and CuPy are
used when present. No GDAL.
"""
import argparse
import datetime as _dt
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name: (width, height, bands, default source). Sizes as DESIGN.md lists them;
# the first two numbers are taken as width x height (only the pixel count
# matters for these spectral operations).
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
    # four Pavia Centre-size scenes (2 x 2, 1.3 GB float32): the multi-GPU W-MCD rows
    "pavia_c_2x2": (2192, 1430, 102, "samson"),
}
HUGE = {"multispectral"}
UNMIX_ONLY = {"cuprite"}  # gets only sspp/unmix rows unless named in --scenes
WMCD_ONLY = {"pavia_c_2x2"}  # gets only emp/wmcd rows unless named in --scenes
DEFAULT_SCENES = [s for s in SCENES if s not in HUGE | UNMIX_ONLY | WMCD_ONLY]
DEFAULT_UNMIX_SCENES = ["wtc", "cuprite"]
# The SSPP paper's endmember counts (Section IV-B); other scenes: --endmembers.
UNMIX_P = {"wtc": 31, "cuprite": 25}
# EADP on these scenes only (the NumPy peer takes ~5 s per call on Houston).
DEFAULT_EADP_SCENES = ["indian_pines", "samson", "pavia_u", "salinas", "houston"]
# EAP (area profile) on these scenes; the multispectral one joins with --huge.
DEFAULT_EAP_SCENES = ["pavia_c"]
EAP_AREA = [36, 144, 324, 576, 900, 1296, 1764]
# The EAP paper's GPU figures (GTX 1070), seconds: the profile and the reduction.
PAPER_EAP = {
    "pavia_c": {"profile_s": 1.41, "reduction_s": 0.92},
    "multispectral": {"profile_s": 185.0, "reduction_s": None},
}
PAPER_EAP_GPU = "NVIDIA GeForce GTX 1070 (EAP paper)"
# The EADP paper's Table III, "Total" (the diffusion stages, PCA not included; 7 PCs,
# 63 components), seconds: GTX 1060 (CUDA) and Intel Core i5-8400 (OpenMP, 6 cores).
PAPER_EADP = {
    "houston": {"gpu": 17.99e-3, "cpu": 208.69e-3},
    "indian_pines": {"gpu": 0.91e-3, "cpu": 10.02e-3},
    "pavia_u": {"gpu": 6.01e-3, "cpu": 49.24e-3},
}
PAPER_GPU = "NVIDIA GeForce GTX 1060 6 GB (EADP paper, Table III)"
PAPER_CPU = "Intel Core i5-8400, 6 cores (EADP paper, Table III)"
PAPER_CPU_THREADS = 6
# W-MCD on these scenes only (the scikit-image peer takes seconds per call).
DEFAULT_WMCD_SCENES = ["pavia_c", "salinas", "pavia_c_2x2"]
# The W-MCD paper (Quesada-Barriuso et al.), whole W-MCD on Pavia City, seconds.
PAPER_WMCD = {"pavia_c": {"one K80 GPU": 0.957, "two K80 GPUs": 0.623,
                          "4 CPU threads (Xeon E5-2680 v3)": 5.477}}

np = None  # imported in load_numeric(), after the thread variables are set


# ---------------------------------------------------------------- cube making

def mirror_index(n_out, n_in):
    """Indices 0..n_in-1 extended symmetrically (edge repeated) to n_out:
    what numpy.pad(mode='symmetric') does on the right, for any length."""
    i = np.arange(n_out) % (2 * n_in)
    return np.where(i < n_in, i, 2 * n_in - 1 - i)


def band_index(n_out, n_in):
    if n_out <= n_in:  # an evenly spaced subset keeps the spectral range
        return np.round(np.linspace(0, n_in - 1, n_out)).astype(np.intp)
    return mirror_index(n_out, n_in)


def mirror_cube(src, width, height, bands):
    """src (bands, height, width) -> float32 (bands, height, width) of the new size."""
    b0, h0, w0 = src.shape
    ib = band_index(bands, b0)
    iy = mirror_index(height, h0)
    ix = mirror_index(width, w0)
    out = np.empty((bands, height, width), dtype=np.float32)
    for k, b in enumerate(ib):  # band by band: no temporary of the full size
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


# ------------------------------------------------------------------- timing

def time_call(fn, repeat, budget_s):
    """One warm-up, then `repeat` timed calls (fewer if a call is so slow that
    repeat calls would pass budget_s). Returns (times, last output)."""
    t0 = time.perf_counter()
    out = fn()
    warm = time.perf_counter() - t0
    n = repeat
    if warm * repeat > budget_s:
        n = max(1, int(budget_s // max(warm, 1e-9)))
    times = []
    for _ in range(n):
        del out
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


# -------------------------------------------------------------------- peers

def fix_signs(vectors):
    """Columns of `vectors` signed as hyprof signs components: the
    largest-magnitude loading positive."""
    idx = np.argmax(np.abs(vectors), axis=0)
    s = np.sign(vectors[idx, np.arange(vectors.shape[1])])
    s[s == 0] = 1
    return vectors * s


def numpy_pca_f64(X, k):
    Xd = X.astype(np.float64)
    mu = Xd.mean(axis=0)
    Xd -= mu
    C = (Xd.T @ Xd) / (Xd.shape[0] - 1)
    _, V = np.linalg.eigh(C)
    V = fix_signs(V[:, ::-1][:, :k])
    return (Xd @ V).astype(np.float32)


def numpy_pca_f32(X, k):
    mu = X.mean(axis=0, dtype=np.float64).astype(np.float32)
    Xc = X - mu
    C = (Xc.T @ Xc) / np.float32(Xc.shape[0] - 1)
    _, V = np.linalg.eigh(C.astype(np.float64))
    V = fix_signs(V[:, ::-1][:, :k]).astype(np.float32)
    return Xc @ V


def make_cupy_pca():
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy sees no GPU"
    except Exception as e:  # not installed, or no driver
        return None, f"CuPy unavailable ({type(e).__name__})"

    def cupy_pca(X, k):
        Xd = cp.asarray(X).astype(cp.float64)
        Xd -= Xd.mean(axis=0)
        C = (Xd.T @ Xd) / (Xd.shape[0] - 1)
        _, V = cp.linalg.eigh(C)
        Y = (Xd @ V[:, ::-1][:, :k]).astype(cp.float32)
        return cp.asnumpy(Y)  # synchronises

    return cupy_pca, None


def sklearn_solvers():
    """The svd_solver values to time, and notes on those that are missing."""
    try:
        import sklearn
        from sklearn.decomposition import PCA
    except ImportError:
        return [], ["scikit-learn missing: no sklearn PCA rows"]
    solvers, notes = ["full"], []
    try:
        PCA(n_components=1, svd_solver="covariance_eigh").fit(np.eye(4, 3))
        solvers.append("covariance_eigh")
    except Exception:
        notes.append(f"scikit-learn {sklearn.__version__} has no svd_solver='covariance_eigh' "
                     "(added in 1.5)")
    return solvers, notes


def pca_peers(X, k, use_gpu_peers):
    peers, notes = [], []
    solvers, n = sklearn_solvers()
    notes += n
    for solver in solvers:
        from sklearn.decomposition import PCA

        peers.append((f"sklearn-{solver}",
                      lambda s=solver: PCA(n_components=k, svd_solver=s).fit_transform(X)))
    peers.append(("numpy-eigh-f64", lambda: numpy_pca_f64(X, k)))
    peers.append(("numpy-eigh-f32", lambda: numpy_pca_f32(X, k)))
    if use_gpu_peers:
        fn, why = make_cupy_pca()
        if fn:
            peers.append(("cupy-eigh-f64 (GPU)", lambda: fn(X, k)))
        elif why:
            notes.append(f"no GPU peer: {why}")
    return peers, notes


def dwt_peers(X, cube2d, wavelet, levels):
    try:
        import pywt
    except ImportError:
        return [], ["PyWavelets missing: no DWT peer (see bench/README.md for the wheel)"]

    def wavedec(a, axis):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "level value too high" for few bands
            return pywt.wavedec(a, wavelet, mode="periodization", level=levels, axis=axis)[0]

    return [("pywt (pixel-major, axis=-1)", lambda: wavedec(X, -1)),
            ("pywt (band-sequential, axis=0)", lambda: wavedec(cube2d, 0))], []


def eadp_times(args):
    return [args.eadp_step * (i + 1) for i in range(args.eadp_count)]


def load_eadp_reference():
    """tests/eadp_reference.py (NumPy only): the peer and the correctness reference."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        import eadp_reference
    finally:
        sys.path.pop(0)
    return eadp_reference


def numpy_eadp(pcs, args):
    """The NumPy reference on (k, h, w) float32 PCs: (k*(C+1), h*w) float32, the
    bands in hyprof's order."""
    out, _ = load_eadp_reference().eadp_cube(pcs, times=eadp_times(args),
                                             cycles=args.eadp_cycles)
    return out.reshape(out.shape[0], -1)


def rel_diff(a, ref):
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if a.shape != ref.shape:
        return None
    scale = np.max(np.abs(ref))
    return float(np.max(np.abs(a - ref)) / scale) if scale > 0 else float(np.max(np.abs(a)))


# ------------------------------------------------------------ hyprof_bench

def find_bench_exe(given):
    if given:
        return given
    cands = []
    for d in sorted(os.listdir(ROOT)):
        if d.startswith("build"):
            cands.append(os.path.join(ROOT, d, "bench", "hyprof_bench"))
    cands = [c for c in cands if os.access(c, os.X_OK)]
    if not cands:
        sys.exit("run_bench: no hyprof_bench found under build*/bench/: pass --bench-exe")
    return max(cands, key=os.path.getmtime)


def run_bench_exe(exe, op, backend, cube_path, shape, args, extra, out_path=None, repeat=None):
    """One hyprof_bench run with the op's own options `extra`: its JSON record,
    or {"error": ..., "cmd": ...}."""
    b, h, w = shape
    cmd = [exe, "--op", op, "--backend", backend, "--input", cube_path, "--width", str(w),
           "--height", str(h), "--bands", str(b), "--repeat", str(repeat or args.repeat),
           "--threads", str(args.threads), "--device", str(args.device)] + extra
    if out_path:
        cmd += ["--output", out_path]
    env = dict(os.environ)
    env.pop("HYPROF_BACKEND", None)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or [f"exit {p.returncode}, no output"])[-1]
        return {"error": err, "cmd": " ".join(cmd)}
    rec = json.loads(lines[-1])
    rec["cmd"] = " ".join(cmd)
    return rec


def run_hyprof(exe, op, backend, cube_path, shape, args, params, out_path):
    extra = []  # the op's own options
    if op == "pca":
        extra += ["--components", str(params["components"])]
    elif op in ("sspp", "unmix"):
        extra += ["--endmembers", str(params["endmembers"])]
        if op == "unmix":
            extra += ["--sspp", "1", "--extract", params["extract"]]
    elif op == "eadp":
        extra += ["--components", str(params["components"]), "--count", str(params["count"]),
                "--step", repr(float(params["step"])), "--cycles", str(params["cycles"])]
        if params.get("pipeline"):
            extra += ["--pipeline", params["pipeline"]]
    elif op in ("emp", "wmcd"):
        extra += ["--features", str(params["features"])]
        if params.get("devices"):
            extra += ["--devices", params["devices"]]
    elif op == "eap":
        extra += ["--reduction", params["reduction"], "--attribute", params["attribute"],
                "--thresholds", ",".join("%g" % t for t in params["thresholds"]),
                "--connectivity", str(params["connectivity"]),
                "--quantisation", str(params["quantisation"])]
        if params["reduction"] == "pca":
            extra += ["--components", str(params["components"])]
    else:
        extra += ["--wavelet", params["wavelet"], "--levels", str(params["levels"])]
    if params.get("pinned"):
        extra += ["--pinned", "1"]
    return run_bench_exe(exe, op, backend, cube_path, shape, args, extra, out_path)


# ---------------------------------------------------------- machine facts

def cpu_facts():
    model, phys = platform.processor() or "unknown", set()
    try:
        cur = {}
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" not in line:
                    if cur:
                        phys.add((cur.get("physical id"), cur.get("core id")))
                        cur = {}
                    continue
                k, v = (s.strip() for s in line.split(":", 1))
                cur[k] = v
                if k == "model name":
                    model = v
        if cur:
            phys.add((cur.get("physical id"), cur.get("core id")))
    except OSError:
        pass
    physical = len(phys) if phys and None not in next(iter(phys)) else None
    return {"model": model, "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)), "physical_cores": physical}


def gpu_facts():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        p = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in p.stdout.splitlines() if ln.strip()] if p.returncode == 0 else []


def loadavg():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def host_label(gpus):
    """hostname plus the accelerator ('vm-h200') or '-cpu': device machines and
    development machines may share a hostname."""
    name = socket.gethostname().split(".")[0] or "host"
    if not gpus:
        return f"{name}-cpu"
    words = [w for w in gpus[0].split(",")[0].split() if w.upper() not in ("NVIDIA", "TESLA")]
    tag = "".join(c for c in (words[0] if words else "gpu").lower() if c.isalnum())
    return f"{name}-{tag or 'gpu'}"


def git_facts():
    """The tree's commit; $HYPROF_BENCH_COMMIT when the tree is a copy whose git metadata
    is not its own (a device machine's copy of a working tree)."""
    if os.environ.get("HYPROF_BENCH_COMMIT"):
        return os.environ["HYPROF_BENCH_COMMIT"]
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return (rev or "no commit") + (" (uncommitted changes)" if dirty else "")
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
            + f" ({i.get('num_threads')} threads)"
            for i in threadpool_info()) or "none found"
    except ImportError:
        facts["blas"] = "threadpoolctl missing"
    return facts


def set_thread_env(n):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        os.environ[var] = str(n)


def load_numeric():
    global np
    import numpy

    np = numpy


def thread_limit(n):
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=n)
    except ImportError:
        import contextlib

        return contextlib.nullcontext()


# ---------------------------------------------------------------- reporting

def fmt_s(v):
    if v is None:
        return "—"
    return f"{v:.4g}" if v >= 0.001 else f"{v:.3g}"


def fmt_x(v):
    return "—" if v is None else f"{v:.2f}x"


def fmt_err(v):
    if v is None or isinstance(v, str):
        return v or ""
    return f"{v:.1e}"


def compared_s(r):
    """What the speed-up compares: the whole call, but for EAP the profile stage
    (the peers get hyprof's quantised features and do the profile only)."""
    if r["op"] == "eap":
        return (r.get("stages") or {}).get("profile_median_s")
    return r["median_s"]


def add_speedups(rows):
    groups = {}
    for r in rows:
        if r.get("median_s") is not None:
            groups.setdefault((r["scene"], r["op"]), []).append(r)
    for grp in groups.values():
        peers = [compared_s(r) for r in grp if r["kind"] == "peer" and compared_s(r)]
        best = min(peers) if peers else None
        for r in grp:
            t = compared_s(r)
            r["fastest_peer_s"] = best
            r["speedup_vs_fastest_peer"] = best / t if best and t else None


def write_markdown(path, meta, rows, notes):
    new = not os.path.exists(path)
    lines = []
    if new:
        lines += ["# hyprof benchmark results", "",
                  "Each section is one run of `bench/run_bench.py` (see bench/README.md); "
                  "sections are appended, never rewritten. Times are medians of the timed "
                  "repetitions after one warm-up; hyprof's include the host<->device "
                  "transfers (the API takes host memory). Speed-up = fastest peer's median / "
                  "this row's median (above 1: faster than every peer). `max rel diff` is "
                  "max|hyprof - reference| / max|reference| (reference: NumPy float64 eigh "
                  "for PCA, PyWavelets for DWT, tests/eadp_reference.py on the NumPy PCs "
                  "for EADP).", ""]
    cpu = meta["cpu"]
    cores = f"{cpu['usable_cpus']} usable logical CPUs"
    if cpu.get("physical_cores"):
        cores += f", {cpu['physical_cores']} physical cores"
    gpus = "; ".join(meta["gpus"]) if meta["gpus"] else "none"
    libs = meta["libraries"]
    lines += [f"## {meta['date']} — {meta['host']}", "",
              f"- CPU: {cpu['model']} ({cores})",
              f"- GPU: {gpus}",
              f"- threads: {meta['threads']} for every implementation (hyprof --threads, "
              "OMP/OpenBLAS/MKL variables, threadpoolctl); PyWavelets is single-threaded; "
              f"1-min load average before the run {meta.get('loadavg_before')}, after "
              f"{meta.get('loadavg_after')}",
              f"- hyprof {meta.get('hyprof_version') or '?'} ({meta.get('hyprof_build') or '?'}), "
              f"commit {meta['git']}; Python {libs['python']}, NumPy {libs['numpy']} "
              f"(BLAS: {libs.get('blas')}), scikit-learn {libs.get('sklearn') or '—'}, "
              f"PyWavelets {libs.get('pywt') or '—'}, CuPy {libs.get('cupy') or '—'}",
              f"- {meta['repeat']} timed repetitions after one warm-up"
              + "".join(part for op, part in (
                  ("pca", f"; PCA: {meta['components']} components (hyprof: fit + apply)"),
                  ("dwt", f"; DWT: {meta['wavelet']}, periodization, levels in the size column"),
                  ("eadp", (f"; EADP: T = {', '.join('%g' % t for t in meta['eadp']['times'])}, "
                            f"{meta['eadp']['cycles']} FED cycle(s) per increment, on "
                            f"{', '.join(meta['eadp']['scenes'])}" if meta.get("eadp") else "")),
                  ("eap", (f"; EAP: area, on {', '.join(meta['eap_scenes'])}"
                           if meta.get("eap_scenes") else "")))
                  if op in meta.get("ops", ("pca", "dwt", "eadp"))),
              "- cubes mirrored from real data: " + ", ".join(
                  f"{s} from {src}" for s, src in meta["sources"].items()),
              "",
              "| scene | size (WxHxB) | op | implementation | median s | min s | "
              "speed-up vs fastest peer (EAP: profile stage) | max rel diff |",
              "|---|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("median_s") is None:
            continue
        size = f"{r['width']}x{r['height']}x{r['bands']}"
        if r["op"] == "dwt":
            size += f", L={r['levels']}"
        elif r["op"] in ("emp", "wmcd"):
            size += f", L={r['levels']}, 4 features, disk 1,3,5,7" + (
                "; " + ", ".join(f"{k[:-9]} {v * 1e3:.1f} ms"
                                 for k, v in (r.get("stages") or {}).items()) if r.get("stages")
                else "")
        elif r["op"] == "eadp":
            size += f", {r['components']} PCs x {r['count'] + 1}"
        elif r["op"] == "classify" and r.get("model_size"):
            size += f", {r['model_size']} SVs, {r.get('classes')} classes"
        elif r["op"].startswith("train"):
            size += f", {r.get('classifier')}" + (", grid 11x10, 5 folds"
                                                  if r.get("classifier") == "svm" else "")
        elif r["op"] == "eap":
            size += (f", {r.get('features')} features x {2 * len(r['thresholds']) + 1}")
        lines.append(f"| {r['scene']} | {size} | {r['op']} | {r['impl']} | "
                     f"{fmt_s(r['median_s'])} | {fmt_s(r['min_s'])} | "
                     f"{fmt_x(r.get('speedup_vs_fastest_peer'))} | {fmt_err(r.get('check_rel_diff'))} |")
    lines += eadp_markdown(rows)
    lines += unmix_markdown(rows)
    lines += eap_markdown(rows)
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in notes]
    lines.append("")
    with open(path, "a") as f:
        if not new:
            f.write("\n")
        f.write("\n".join(lines))


def fmt_ms(v):
    return "—" if v is None else f"{1e3 * v:.4g}"


def add_eadp_facts(rows):
    """Per-core figures and the ratios to the NumPy peer and to the paper, on the
    eadp rows (the diffusion stage: what the paper's Table III times)."""
    by_scene = {}
    for r in rows:
        if r["op"] == "eadp":
            by_scene.setdefault(r["scene"], []).append(r)
    for grp in by_scene.values():
        for r in grp:  # core-seconds first: the NumPy row's is the per-core yardstick
            e = (r.get("stages") or {}).get("eadp_median_s")
            if e is None or r["kind"] == "paper":
                continue
            if r["impl"] == "hyprof-cpu":
                r["threads_used"] = r.get("threads")
            if r.get("threads_used"):
                r["eadp_core_s"] = e * r["threads_used"]
        numpy_core = next((r["eadp_core_s"] for r in grp
                           if r["impl"] == "numpy-eadp" and r.get("eadp_core_s")), None)
        paper = PAPER_EADP.get(grp[0]["scene"], {})
        for r in grp:
            e = (r.get("stages") or {}).get("eadp_median_s")
            if e is None or r["kind"] == "paper":
                continue
            if numpy_core and r.get("eadp_core_s"):
                r["per_core_speedup_vs_numpy"] = numpy_core / r["eadp_core_s"]
            side = {"hyprof-cuda": "gpu", "hyprof-cpu": "cpu"}.get(r["impl"])
            if side and side in paper:
                r["paper_eadp_s"] = paper[side]
                r["paper_over_this"] = paper[side] / e
                if side == "cpu" and r.get("eadp_core_s"):
                    r["paper_core_s_over_this"] = paper[side] * PAPER_CPU_THREADS / r["eadp_core_s"]


def eadp_markdown(rows):
    er = [r for r in rows if r["op"] == "eadp" and (r.get("stages") or {}).get("eadp_median_s")]
    if not er:
        return []
    r0 = er[0]
    lines = ["", f"EADP by stage ({r0['components']} PCs, T = {r0['step']:g}..."
             f"{r0['step'] * r0['count']:g}, {r0['cycles']} FED cycle(s) per increment; "
             "diffusion = `hyprof_eadp` on the PCs, what the paper's Table III totals; "
             "core·s = diffusion time x threads doing it, NumPy's element-wise work counted "
             "as one thread; paper / this: the paper's diffusion time over ours, GPU against "
             "its GTX 1060, CPU against its 6 cores):", "",
             "| scene | implementation | device | threads | PCA ms | diffusion ms | total ms | "
             "diffusion core·s | per-core speed-up vs numpy-eadp | paper / this | max rel diff |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    dev_lines = eadp_device_markdown(er)
    for r in er:
        st = r["stages"]
        ratio = r.get("paper_over_this")
        if ratio is not None and r.get("paper_core_s_over_this") is not None:
            ratio_s = f"{ratio:.2f}x ({r['paper_core_s_over_this']:.2f}x per core)"
        else:
            ratio_s = fmt_x(ratio)
        lines.append(
            f"| {r['scene']} | {r['impl']} | {r.get('device') or '—'} | "
            f"{r.get('threads_used') or '—'} | {fmt_ms(st.get('pca_median_s'))} | "
            f"{fmt_ms(st.get('eadp_median_s'))} | {fmt_ms(r.get('median_s'))} | "
            f"{fmt_s(r.get('eadp_core_s'))} | {fmt_x(r.get('per_core_speedup_vs_numpy'))} | "
            f"{ratio_s} | {fmt_err(r.get('check_rel_diff'))} |")
    return lines + dev_lines


def device_copy_gbs():
    """The GPU's device-to-device copy bandwidth (bytes read + written, 1 GiB, median of
    20, CUDA events) with CuPy: the memory bandwidth a kernel can reach there, measured in
    the same run as the FED's. None without CuPy or a GPU."""
    try:
        import cupy as cp

        n = 1 << 28
        x = cp.zeros(n, dtype=cp.float32)
        y = cp.empty_like(x)
        for _ in range(3):
            cp.copyto(y, x)
        ts = []
        for _ in range(20):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            cp.copyto(y, x)
            b.record()
            b.synchronize()
            ts.append(cp.cuda.get_elapsed_time(a, b) * 1e-3)
        del x, y
        return 2 * 4 * n / sorted(ts)[len(ts) // 2] / 1e9
    except Exception:
        return None


def eadp_device_split(dm):
    """Device ms of the CUDA EADP pipeline by kind, from hyprof_bench's device_ms
    (the library's CUDA event times): PCA kernels, diffusion kernels, transfers."""
    def tot(*keys):
        v = [dm.get(k) for k in keys]
        return sum(v) if all(x is not None for x in v) else None
    return {"pca": tot("pca_covariance", "pca_eigh", "pca_projection"),
            "diffusion": tot("eadp_prepare", "eadp_fed", "eadp_output"),
            "fed": dm.get("eadp_fed"),
            "transfers": tot("pca_upload", "pca_download", "eadp_upload", "eadp_download")}


def eadp_device_markdown(er):
    cr = [r for r in er if r.get("device_ms")]
    if not cr:
        return []
    lines = ["", "EADP device time by stage (hyprof-cuda; CUDA event times the library logs, "
             "medians over the timed runs; PCA = covariance + eigh + projection, its pass 1 "
             "(upload of the cube overlapped with the band sums) counted as a transfer; "
             "diffusion = smoothing, gradient, contrast, diffusivity + FED + float outputs; "
             "transfers = the cube's upload, the PCs' download, their upload and the profile's "
             "download; FED GB/s = (u, g read + u written, 4 B each in float (the CUDA default; "
             "16 B in all when its kernel reads the precomputed edge conductances instead of g), "
             "8 B each in double, per pixel and band and "
             "per launch) / FED time, next to the device's theoretical peak and, where CuPy "
             "measured it in this run, its device-to-device copy bandwidth (read + write)):", "",
             "| scene | device | PCA dev ms | diffusion dev ms | of which FED ms | "
             "kernels ms (PCA + diffusion) | transfers ms | FED GB/s (% of peak; of copy) | "
             "FED unfused-equivalent GB/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in cr:
        dm, sp = r["device_ms"], eadp_device_split(r["device_ms"])
        k = (sp["pca"] + sp["diffusion"]
             if sp["pca"] is not None and sp["diffusion"] is not None else None)
        gbs, peak = dm.get("eadp_fed_gbs"), dm.get("eadp_fed_peak_gbs")
        cg = r.get("device_copy_gbs")
        of = ([f"{100 * gbs / peak:.0f}% of {peak:.0f}"] if gbs and peak else []) + \
             ([f"{100 * gbs / cg:.0f}% of {cg:.0f} copy"] if gbs and cg else [])
        g = f"{gbs:.0f}" + (f" ({'; '.join(of)})" if of else "") if gbs else "—"
        f = lambda v: "—" if v is None else f"{v:.3f}"
        un = dm.get("eadp_fed_unfused_gbs")
        lines.append(f"| {r['scene']} | {r.get('device') or '—'} | {f(sp['pca'])} | "
                     f"{f(sp['diffusion'])} | {f(sp['fed'])} | {f(k)} | {f(sp['transfers'])} | "
                     f"{g} | {'—' if un is None else f'{un:.0f}'} |")
    return lines


def fmt_ms_wide(v):
    if v is None:
        return "—"
    return f"{1e3 * v:.0f}" if v >= 1.0 else f"{1e3 * v:.4g}"


def eap_markdown(rows):
    er = [r for r in rows if r["op"] == "eap" and (r.get("stages") or {}).get("profile_median_s")]
    if not er:
        return []
    r0 = er[0]
    lines = ["", f"EAP by stage (area, thresholds {', '.join('%g' % t for t in r0['thresholds'])}, "
             f"{r0['connectivity']}-connectivity, {r0['quantisation']}-bit levels; profile = "
             "`hyprof_eap` on the features, host memory in and out; the peers' profile is the "
             "same 2 x 7 filters per feature on hyprof's quantised features; device = the CUDA "
             "path's own event times, summed over its band batches):", "",
             "| scene | implementation | device | reduction ms | profile ms | total ms | "
             "CUDA device stages | max rel diff |",
             "|---|---|---|---:|---:|---:|---|---:|"]
    for r in er:
        st = r["stages"]
        dev = r.get("device_stages") or ""
        if "device ms:" in dev:
            dev = dev.split("device ms:", 1)[1].strip()
        lines.append(
            f"| {r['scene']} | {r['impl']} | {r.get('device') or '—'} | "
            f"{fmt_ms_wide(st.get('reduction_median_s'))} | "
            f"{fmt_ms_wide(st.get('profile_median_s'))} | "
            f"{fmt_ms_wide(r.get('median_s'))} | {dev} | {fmt_err(r.get('check_rel_diff'))} |")
    return lines


def write_json(path, meta, rows, notes):
    runs = []
    if os.path.exists(path):
        with open(path) as f:
            runs = json.load(f)
    runs.append({"meta": meta, "rows": rows, "notes": notes})
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(runs, f, indent=1)
    os.replace(tmp, path)


# --------------------------------------------------------------------- main

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenes", default=",".join(DEFAULT_SCENES),
                    help=f"comma-separated subset of {','.join(SCENES)} "
                         f"(default: all but {','.join(HUGE)})")
    ap.add_argument("--huge", action="store_true",
                    help="also run the 10748x12288x8 multispectral scene (4.2 GB float32; "
                         "needs ~30 GB of RAM with the peers)")
    ap.add_argument("--ops", default="pca,dwt,eadp,eap,emp,wmcd,sspp,unmix")
    ap.add_argument("--wmcd-scenes", default=",".join(DEFAULT_WMCD_SCENES),
                    help="the scenes that get emp and wmcd rows (default: %(default)s)")
    ap.add_argument("--pinned", action="store_true",
                    help="also run hyprof-cuda emp/wmcd/eap with the caller's memory page-locked "
                         "(hyprof_bench --pinned 1: hyprof_cube_alloc_pinned input, outputs from "
                         "hyprof_pinned_cache_set's cache; the row's first_s includes the "
                         "page-locking of the first output)")
    ap.add_argument("--wmcd-devices", default="",
                    help="also run hyprof-cuda emp/wmcd on these devices together (e.g. 0,1)")
    ap.add_argument("--unmix-scenes", default=",".join(DEFAULT_UNMIX_SCENES),
                    help="the scenes that get sspp/unmix rows (default: %(default)s)")
    ap.add_argument("--endmembers", type=int, default=0,
                    help="sspp/unmix: p (default: 31 on wtc, 25 on cuprite, else 10)")
    ap.add_argument("--extract", default="nfindr", choices=["nfindr", "vca", "atgp"])
    ap.add_argument("--nnls-pixels", type=int, default=5000,
                    help="unmix: pixels the SciPy nnls peer is timed on (then scaled)")
    ap.add_argument("--eadp-scenes", default=",".join(DEFAULT_EADP_SCENES),
                    help="the scenes that get eadp rows (default: %(default)s)")
    ap.add_argument("--eadp-count", type=int, default=8, help="EADP: C process times")
    ap.add_argument("--eadp-step", type=float, default=65.0, help="EADP: T_i = step * i")
    ap.add_argument("--eadp-cycles", type=int, default=1,
                    help="EADP: FED cycles per increment")
    ap.add_argument("--eap-scenes", default=",".join(DEFAULT_EAP_SCENES),
                    help="the scenes that get eap rows (default: %(default)s; --huge adds "
                         "multispectral)")
    ap.add_argument("--eap-features", type=int, default=8,
                    help="EAP: PCA components (bands as they are when there are no more)")
    ap.add_argument("--eap-connectivity", type=int, choices=(4, 8), default=4)
    ap.add_argument("--eap-peers", default="skimage,higra",
                    help="EAP peers to run (scikit-image, higra), when importable")
    ap.add_argument("--backends", default="cpu,cuda",
                    help="hyprof backends; cuda rows are skipped when there is no device")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for everything (default: the usable CPUs)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device for hyprof")
    ap.add_argument("--components", type=int, default=7)
    ap.add_argument("--wavelet", default="db4")
    ap.add_argument("--levels", type=int, default=4,
                    help="DWT levels, lowered to floor(log2(bands))-1 for few bands")
    ap.add_argument("--source", choices=["indian_pines", "samson"],
                    help="mirror every scene from this cube (default: per scene)")
    ap.add_argument("--bench-exe", help="hyprof_bench (default: newest build*/bench/hyprof_bench)")
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--tmp-dir", help="where the raw cubes go (default: a new temp folder)")
    ap.add_argument("--out-md", default=os.path.join(HERE, "results.md"))
    ap.add_argument("--out-json", help="default: bench/results/<date>-<host>.json")
    ap.add_argument("--note", action="append", default=[],
                    help="a line added to the section's notes (repeatable)")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-gpu-peers", action="store_true", help="skip the CuPy peer")
    ap.add_argument("--no-check", action="store_true",
                    help="do not compare hyprof's output with the reference")
    ap.add_argument("--settle-s", type=float, default=1.0,
                    help="pause before each hyprof run, so the peers' idle threads stop spinning")
    ap.add_argument("--peer-budget-s", type=float, default=120.0,
                    help="a peer slower than this over --repeat calls gets fewer repetitions")
    args = ap.parse_args(argv)
    scenes = [s.strip() for s in args.scenes.split(",") if s.strip()]
    if args.huge and "multispectral" not in scenes:
        scenes.append("multispectral")
    bad = [s for s in scenes if s not in SCENES]
    if bad:
        ap.error(f"unknown scene(s) {bad}; known: {list(SCENES)}")
    args.scene_list = scenes
    args.op_list = [o for o in args.ops.split(",") if o]
    if set(args.op_list) - {"pca", "dwt", "eadp", "eap", "emp", "wmcd", "classify", "train",
                            "sspp", "unmix"}:
        ap.error("--ops takes pca, dwt, eadp, eap, emp, wmcd, classify, train, sspp and/or unmix")
    args.wmcd_scene_list = [s.strip() for s in args.wmcd_scenes.split(",") if s.strip()]
    bad = [s for s in args.wmcd_scene_list if s not in SCENES]
    if bad:
        ap.error(f"unknown --wmcd-scenes {bad}; known: {list(SCENES)}")
    args.unmix_scene_list = [s.strip() for s in args.unmix_scenes.split(",") if s.strip()]
    bad = [s for s in args.unmix_scene_list if s not in SCENES]
    if bad:
        ap.error(f"unknown --unmix-scenes {bad}; known: {list(SCENES)}")
    args.eap_scene_list = [s.strip() for s in args.eap_scenes.split(",") if s.strip()]
    if args.huge and "multispectral" not in args.eap_scene_list:
        args.eap_scene_list.append("multispectral")
    bad = [s for s in args.eap_scene_list if s not in SCENES]
    if bad:
        ap.error(f"unknown --eap-scenes {bad}; known: {list(SCENES)}")
    args.eadp_scene_list = [s.strip() for s in args.eadp_scenes.split(",") if s.strip()]
    bad = [s for s in args.eadp_scene_list if s not in SCENES]
    if bad:
        ap.error(f"unknown --eadp-scenes {bad}; known: {list(SCENES)}")
    if args.eadp_count < 1 or not args.eadp_step > 0 or args.eadp_cycles < 1:
        ap.error("--eadp-count and --eadp-cycles must be >= 1, --eadp-step > 0")
    args.backend_list = [b for b in args.backends.split(",") if b]
    if set(args.backend_list) - {"cpu", "cuda"}:
        ap.error("--backends takes cpu and/or cuda")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.threads <= 0:
        args.threads = len(os.sched_getaffinity(0))
    return args


def hyprof_row(base, op, params, backend, rec, args, notes):
    """A result row from hyprof_bench's JSON line (or its failure)."""
    row = dict(base, op=op, **params, impl=f"hyprof-{backend}", kind="hyprof",
               threads=args.threads)
    if "error" in rec:
        row.update(median_s=None, error=rec["error"], cmd=rec["cmd"])
        notes.append(f"{base['scene']} {op} hyprof-{backend} FAILED: {rec['error']}")
        print(f"  {op} hyprof-{backend}: FAILED: {rec['error']}", flush=True)
    elif "skipped" in rec:
        row.update(median_s=None, skipped=rec["skipped"])
        msg = f"hyprof-{backend} skipped: {rec['skipped']}"
        if msg not in notes:
            notes.append(msg)
        print(f"  {op} hyprof-{backend}: skipped ({rec['skipped']})", flush=True)
    else:
        row.update(impl=f"hyprof-{rec['backend']}", device=rec.get("device"),
                   median_s=rec["median_s"], min_s=rec["min_s"], times_s=rec.get("times_s"),
                   repeat=rec.get("repeat"), stages=rec.get("stages"),
                   device_stages=rec.get("device_stages"), device_ms=rec.get("device_ms"),
                   out_bands=rec.get("out_bands"), checksum=rec.get("checksum"),
                   checksum_abs=rec.get("checksum_abs"),
                   hyprof_version=rec.get("hyprof_version"),
                   hyprof_build=rec.get("hyprof_build"), threads=rec.get("threads"))
        if params.get("pinned"):
            row["impl"] += " (page-locked caller memory)"
            row["first_s"] = rec.get("first_s")
        for key in ("per_band", "device_ms_all_bands"):  # eap timed band by band
            if key in rec:
                row[key] = rec[key]
    return row


def reference(op, cube, X, args, levels, notes):
    """What every output is compared with: NumPy float64 PCA, PyWavelets DWT."""
    if args.no_check:
        return None
    b = cube.shape[0]
    with thread_limit(args.threads):
        if op == "pca":
            return numpy_pca_f64(X if X is not None else
                                 np.ascontiguousarray(cube.reshape(b, -1).T), args.components)
        ref = dwt_reference(cube, args.wavelet, levels)
    if ref is None:
        msg = "DWT not checked: PyWavelets missing"
        if msg not in notes:
            notes.append(msg)
    return ref


def peer_check(op, impl, out, ref):
    if ref is None:
        return None
    if (op, impl) in (("pca", "numpy-eigh-f64"), ("dwt", "pywt (pixel-major, axis=-1)")):
        return "ref"  # the reference's own computation
    o = np.asarray(out, dtype=np.float64)
    if op == "dwt":
        return rel_diff(o.T if o.shape != ref.shape else o, ref)
    # peers sign their components their own way: align before comparing
    s = np.sign(np.sum(o * ref, axis=0))
    s[s == 0] = 1
    return rel_diff(o * s, ref)


def bench_scene(name, args, exe, sources, tmpdir, rows, notes):
    w, h, b, default_src = SCENES[name]
    src_name = args.source or default_src
    if src_name not in sources:
        sources[src_name] = load_source(args.data_dir, src_name)
    src = sources[src_name]
    t0 = time.perf_counter()
    cube = mirror_cube(src, w, h, b)
    cube_path = os.path.join(tmpdir, f"{name}.f32")
    cube.tofile(cube_path)
    print(f"[{name}] {w}x{h}x{b} from {src_name} {src.shape[::-1]} "
          f"({cube.nbytes / 2**20:.0f} MiB, made in {time.perf_counter() - t0:.1f} s)", flush=True)
    spectral = [o for o in args.op_list if o in ("pca", "dwt", "eadp")]
    X = None if args.no_peers or not spectral else np.ascontiguousarray(cube.reshape(b, h * w).T)
    base = {"scene": name, "width": w, "height": h, "bands": b, "source": src_name}

    for op in args.op_list:
        if op in ("classify", "train"):
            continue  # bench_classification(), once per run
        if op in ("sspp", "unmix"):
            if name in args.unmix_scene_list:
                bench_unmix(op, base, cube, X, cube_path, args, exe, rows, notes)
            continue
        if op in ("emp", "wmcd"):
            if name in args.wmcd_scene_list:
                bench_wmcd(op, base, cube, cube_path, args, exe, tmpdir, rows, notes)
            continue
        if name not in args.scene_list:
            continue
        if op == "eadp":
            if name in args.eadp_scene_list:
                bench_eadp(base, cube, X, cube_path, args, exe, tmpdir, rows, notes)
            continue
        if op == "eap":
            if name in args.eap_scene_list:
                bench_eap(base, cube.shape, cube_path, args, exe, tmpdir, rows, notes)
            continue
        levels = min(args.levels, max(1, int(math.floor(math.log2(b))) - 1))
        params = ({"components": args.components} if op == "pca"
                  else {"wavelet": args.wavelet, "levels": levels})
        # hyprof first, each run after a pause: BLAS threads of the peers (in this
        # process) spin for a while after their last call and would steal cores.
        hy = []
        for backend in args.backend_list:
            time.sleep(args.settle_s)
            out_path = None if args.no_check else os.path.join(tmpdir, f"{name}.{op}.{backend}.out")
            rec = run_hyprof(exe, op, backend, cube_path, cube.shape, args, params, out_path)
            hy.append((hyprof_row(base, op, params, backend, rec, args, notes), out_path))

        ref = reference(op, cube, X, args, levels, notes)
        for row, out_path in hy:
            if out_path and os.path.exists(out_path):
                if row.get("median_s") is not None and ref is not None:
                    out = np.fromfile(out_path, dtype=np.float32).reshape(row["out_bands"], h * w).T
                    row["check_rel_diff"] = rel_diff(out, ref)
                os.remove(out_path)
            rows.append(row)
            if row.get("median_s") is not None:
                print(f"  {op} {row['impl']}: median {row['median_s']:.4g} s"
                      + (f", max rel diff {row['check_rel_diff']:.1e}"
                         if row.get("check_rel_diff") is not None else ""), flush=True)

        if args.no_peers:
            continue
        if op == "pca":
            peers, pnotes = pca_peers(X, args.components, not args.no_gpu_peers)
        else:
            peers, pnotes = dwt_peers(X, cube.reshape(b, h * w), args.wavelet, levels)
        for n in pnotes:
            if n not in notes:
                notes.append(n)
        for impl, fn in peers:
            with thread_limit(args.threads):
                try:
                    times, out = time_call(fn, args.repeat, args.peer_budget_s)
                except Exception as e:  # a peer failing is reported, not fatal
                    notes.append(f"{name} {op} {impl} failed: {type(e).__name__}: {e}")
                    continue
            row = dict(base, op=op, **params, impl=impl, kind="peer", threads=args.threads,
                       median_s=median(times), min_s=min(times), times_s=times,
                       repeat=len(times), check_rel_diff=peer_check(op, impl, out, ref))
            if len(times) < args.repeat:
                notes.append(f"{name} {op} {impl}: {len(times)} repetition(s) only "
                             f"(--peer-budget-s {args.peer_budget_s:g})")
            del out
            rows.append(row)
            print(f"  {op} {impl}: median {row['median_s']:.4g} s", flush=True)
        del ref
    os.remove(cube_path)


def bench_eadp(base, cube, X, cube_path, args, exe, tmpdir, rows, notes):
    """hyprof (PCA + diffusion, per backend), then the NumPy peer on the same 7 PCs
    (float64 PCA, cast to float32 as hyprof's are), whose output is the reference;
    then the paper's figures for the scene."""
    name = base["scene"]
    b, h, w = cube.shape
    params = {"components": args.components, "count": args.eadp_count,
              "step": args.eadp_step, "cycles": args.eadp_cycles}
    hy = []
    # On CUDA also the eadp operation itself (--pipeline op): its PCs stay on the device
    # between the PCA and the diffusion; only its total and device stages are timed.
    runs = [(b_, None) for b_ in args.backend_list]
    runs += [("cuda", "op")] if "cuda" in args.backend_list else []
    for backend, pipeline in runs:
        time.sleep(args.settle_s)
        p_ = dict(params, pipeline=pipeline) if pipeline else params
        tag = f"{backend}.{pipeline}" if pipeline else backend
        out_path = None if args.no_check else os.path.join(tmpdir, f"{name}.eadp.{tag}.out")
        rec = run_hyprof(exe, "eadp", backend, cube_path, cube.shape, args, p_, out_path)
        row = hyprof_row(base, "eadp", p_, backend, rec, args, notes)
        if pipeline and row.get("impl"):
            row["impl"] += " (operation)"
        if row["impl"].startswith("hyprof-cuda"):
            row["threads_used"] = None  # GPU work: no core-seconds
        hy.append((row, out_path))
        if row.get("median_s") is not None:
            st = row.get("stages") or {}
            print(f"  eadp {row['impl']}: median {row['median_s']:.4g} s (pca "
                  f"{st.get('pca_median_s', float('nan')):.4g} s, diffusion "
                  f"{st.get('eadp_median_s', float('nan')):.4g} s)", flush=True)

    ref = None
    if not (args.no_peers and args.no_check):
        if X is None:
            X = np.ascontiguousarray(cube.reshape(b, h * w).T)
        k = args.components
        with thread_limit(args.threads):
            if args.no_peers:
                pcs = numpy_pca_f64(X, k)
            else:
                tp, pcs = time_call(lambda: numpy_pca_f64(X, k), args.repeat, args.peer_budget_s)
        pcs = np.ascontiguousarray(pcs.T.reshape(k, h, w))
        with thread_limit(args.threads):
            if args.no_peers:
                ref = numpy_eadp(pcs, args)
            else:
                te, ref = time_call(lambda: numpy_eadp(pcs, args), args.repeat,
                                    args.peer_budget_s)
        if not args.no_peers:
            stages = {"pca_median_s": median(tp), "eadp_median_s": median(te),
                      "eadp_min_s": min(te)}
            row = dict(base, op="eadp", **params, impl="numpy-eadp", kind="peer",
                       threads=args.threads, threads_used=1, device=cpu_facts()["model"],
                       median_s=median(tp) + median(te), min_s=min(tp) + min(te),
                       times_s=te, repeat=len(te), stages=stages,
                       check_rel_diff=None if args.no_check else "ref")
            if len(te) < args.repeat:
                notes.append(f"{name} eadp numpy-eadp: {len(te)} repetition(s) only "
                             f"(--peer-budget-s {args.peer_budget_s:g})")
            print(f"  eadp numpy-eadp: pca {median(tp):.4g} s, diffusion {median(te):.4g} s "
                  "(one thread)", flush=True)
            hy.append((row, None))
        if args.no_check:
            ref = None

    for row, out_path in hy:
        if out_path and os.path.exists(out_path):
            if row.get("median_s") is not None and ref is not None:
                out = np.fromfile(out_path, dtype=np.float32).reshape(row["out_bands"], h * w)
                row["check_rel_diff"] = rel_diff(out, ref)
                print(f"  eadp {row['impl']}: max rel diff {row['check_rel_diff']:.1e} against "
                      "numpy-eadp", flush=True)
                del out
            os.remove(out_path)
        rows.append(row)
    del ref

    paper = PAPER_EADP.get(name)
    if paper:
        for side, dev, thr in (("gpu", PAPER_GPU, None), ("cpu", PAPER_CPU, PAPER_CPU_THREADS)):
            rows.append(dict(base, op="eadp", **params, impl=f"paper-{side}", kind="paper",
                             device=dev, threads=thr, threads_used=thr, median_s=None,
                             stages={"eadp_median_s": paper[side]},
                             eadp_core_s=paper[side] * thr if thr else None))


def load_test_module(name):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def wmcd_peer(cube, levels, op):
    """The chain with the peers: (stage times, output (planes, h*w) float32)."""
    import pywt
    eref, mref = load_test_module("eap_reference"), load_test_module("emp_reference")
    b, h, w = cube.shape
    t0 = time.perf_counter()
    feat = pywt.wavedec(cube, "haar", mode="periodization", level=levels, axis=0)[0]
    feat = feat.astype(np.float32)
    t1 = time.perf_counter()
    q = [eref.quantise(f)[0].astype(np.int64) for f in feat]
    tq = time.perf_counter()
    planes = [p for qi in q for p in mref.emp_profile(qi, [1, 3, 5, 7])]
    t2 = time.perf_counter()
    # the stage names of hyprof_bench's emp/wmcd records
    st = {"spectral_median_s": t1 - t0, "quantise_median_s": tq - t1, "emp_median_s": t2 - tq}
    if op == "emp":
        out = np.stack(planes).astype(np.float32)
        return st, out.reshape(len(planes), -1)
    lv = mref.auto_levels(h, w)
    out = np.stack([d for p in planes for d in mref.wmcd_plane(p.astype(np.float64), lv)])
    st["denoise_median_s"] = time.perf_counter() - t2
    return st, out.astype(np.float32).reshape(out.shape[0], -1)


def bench_wmcd(op, base, cube, cube_path, args, exe, tmpdir, rows, notes):
    """hyprof emp/wmcd per backend (and on --wmcd-devices), then the
    scikit-image + PyWavelets chain on the same cube, whose output is the
    reference; then the paper's figures for the scene."""
    name = base["scene"]
    b, h, w = cube.shape
    levels = min(range(1, max(1, int(math.floor(math.log2(b)))) + 1),
                 key=lambda l: (abs(math.ceil(b / 2 ** l) - 4), -math.ceil(b / 2 ** l)))
    runs = [(bk, "", 0) for bk in args.backend_list]
    if args.wmcd_devices and "cuda" in args.backend_list:
        runs.append(("cuda", args.wmcd_devices, 0))
    if args.pinned and "cuda" in args.backend_list:
        runs += [("cuda", "", 1)] + ([("cuda", args.wmcd_devices, 1)] if args.wmcd_devices else [])
    hy = []
    for backend, devices, pinned in runs:
        params = {"features": 4, "levels": levels, "devices": devices}
        if pinned:
            params["pinned"] = 1
        time.sleep(args.settle_s)
        out_path = None if args.no_check else os.path.join(
            tmpdir, f"{name}.{op}.{backend}.{devices or 'one'}.{pinned}.out")
        rec = run_hyprof(exe, op, backend, cube_path, cube.shape, args, params, out_path)
        row = hyprof_row(base, op, params, backend, rec, args, notes)
        if devices and row.get("median_s") is not None:
            row["impl"] += f" (devices {devices})"
        hy.append((row, out_path))
        if row.get("median_s") is not None:
            st = row.get("stages") or {}
            print(f"  {op} {row['impl']}: median {row['median_s']:.4g} s ("
                  + ", ".join(f"{k[:-9]} {v:.4g} s" for k, v in st.items()) + ")", flush=True)
    ref = None
    if not (args.no_peers and args.no_check):
        try:
            with thread_limit(args.threads):
                runs_t, out = [], None
                for i in range(max(1, min(args.repeat, 3)) if not args.no_peers else 1):
                    st, out = wmcd_peer(cube, levels, op)
                    runs_t.append(st)
            ref = None if args.no_check else out
            if not args.no_peers:
                stages = {k: median([r[k] for r in runs_t]) for k in runs_t[0]}
                tot = [sum(r.values()) for r in runs_t]
                hy.append((dict(base, op=op, features=4, levels=levels, impl="skimage+pywt",
                                kind="peer", threads=1, median_s=median(tot), min_s=min(tot),
                                times_s=tot, repeat=len(tot), stages=stages,
                                check_rel_diff=None if args.no_check else "ref"), None))
                print(f"  {op} skimage+pywt: median {median(tot):.4g} s (" + ", ".join(
                    f"{k[:-9]} {v:.4g} s" for k, v in stages.items()) + ")", flush=True)
        except ImportError as e:
            notes.append(f"{name} {op}: no scikit-image/PyWavelets peer ({e})")
    for row, out_path in hy:
        if out_path and os.path.exists(out_path):
            if row.get("median_s") is not None and ref is not None:
                got = np.fromfile(out_path, dtype=np.float32).reshape(row["out_bands"], h * w)
                row["check_rel_diff"] = rel_diff(got, ref)
                print(f"  {op} {row['impl']}: max rel diff {row['check_rel_diff']:.1e} against "
                      "skimage+pywt", flush=True)
            os.remove(out_path)
        rows.append(row)
    for dev, secs in (PAPER_WMCD.get(name, {}).items() if op == "wmcd" else ()):
        rows.append(dict(base, op=op, features=4, levels=levels, impl=f"paper ({dev})",
                         kind="paper", median_s=secs, min_s=None))


def bench_classification(args, exe, tmpdir, rows, notes):
    if not set(args.op_list) & {"classify", "train"}:
        return
    sys.path.insert(0, HERE)
    import classify_bench as cb
    if "classify" in args.op_list:
        cb.bench_classify(args, exe, tmpdir, rows, notes, hyprof_row, mirror_cube, time_call,
                          median, run_bench_exe)
    if "train" in args.op_list:
        cb.bench_train(args, exe, tmpdir, rows, notes, hyprof_row, time_call, median,
                       run_bench_exe)


UNMIX_STAGES = ["homogeneity", "purity", "kmeans", "fusion", "extraction", "abundances"]


def unmix_peers(op, cube, X, p, args):
    """(stage, impl, fn, scale) of the SciPy / scikit-learn peers of each stage."""
    peers = []
    try:
        from scipy.ndimage import gaussian_filter

        def homogeneity():
            d = np.empty(cube.shape[1:], np.float64)
            d[:] = 0
            for band in cube:
                s = gaussian_filter(band.astype(np.float64), 1.2, mode="reflect", truncate=3.0)
                d += (band - s) ** 2
            return np.sqrt(d / cube.shape[0])
        peers.append(("homogeneity", "scipy gaussian_filter + RMSE", homogeneity, 1.0))
    except ImportError:
        pass
    try:
        from sklearn.cluster import KMeans
        from sklearn.decomposition import PCA
        peers.append(("purity", f"sklearn PCA({p}).fit_transform",
                      lambda: PCA(n_components=p, svd_solver="full").fit_transform(X), 1.0))
        peers.append(("kmeans", f"sklearn KMeans({p}, k-means++, n_init=1, max_iter=50)",
                      lambda: KMeans(n_clusters=p, n_init=1, max_iter=50, random_state=0,
                                     algorithm="lloyd").fit(X).inertia_, 1.0))
    except ImportError:
        pass
    if op == "unmix":
        try:
            from scipy.optimize import nnls
            rng = np.random.default_rng(0)
            M = X[rng.choice(X.shape[0], p, replace=False)].T.astype(np.float64)
            d = 1e3
            Ma = np.vstack([M / np.abs(M).max(), d * np.ones(p)])
            npx = min(args.nnls_pixels, X.shape[0])
            sub = X[:npx].astype(np.float64) / np.abs(M).max()

            def fcls():
                return [nnls(Ma, np.concatenate([y, [d]]))[0] for y in sub]
            peers.append(("abundances", f"scipy nnls FCLS per pixel (x{X.shape[0] / npx:.0f} "
                          f"from {npx} pixels)", fcls, X.shape[0] / npx))
        except ImportError:
            pass
    return peers


def bench_unmix(op, base, cube, X, cube_path, args, exe, rows, notes):
    """hyprof's sspp or whole unmixing chain per backend, with per-stage times,
    then the peers of each stage on the same cube."""
    name = base["scene"]
    b, h, w = cube.shape
    p = args.endmembers or UNMIX_P.get(name, 10)
    params = {"endmembers": p, "extract": args.extract}
    for backend in args.backend_list:
        time.sleep(args.settle_s)
        rec = run_hyprof(exe, op, backend, cube_path, cube.shape, args, params, None)
        row = hyprof_row(base, op, params, backend, rec, args, notes)
        rows.append(row)
        if row.get("median_s") is not None:
            st = row.get("stages") or {}
            dev = device_ms(row.get("device_stages"))
            print(f"  {op} {row['impl']}: median {row['median_s']:.4g} s ("
                  + ", ".join(f"{k[:-len('_median_s')]} {v:.4g}" for k, v in st.items()) + ")"
                  + (f"; device ms: {dev}" if dev else ""), flush=True)
    if args.no_peers:
        return
    if X is None:
        X = np.ascontiguousarray(cube.reshape(b, h * w).T)
    for stage, impl, fn, scale in unmix_peers(op, cube, X, p, args):
        with thread_limit(args.threads):
            try:
                times, out = time_call(fn, args.repeat, args.peer_budget_s)
            except Exception as e:
                notes.append(f"{name} {op} {impl} failed: {type(e).__name__}: {e}")
                continue
        del out
        times = [t * scale for t in times]
        rows.append(dict(base, op=op, **params, impl=impl, kind="peer-stage", stage=stage,
                         threads=args.threads, median_s=median(times), min_s=min(times),
                         times_s=times, repeat=len(times),
                         stages={f"{stage}_median_s": median(times)},
                         extrapolated=scale if scale != 1.0 else None))
        print(f"  {op} {stage} {impl}: median {median(times):.4g} s", flush=True)


def unmix_markdown(rows):
    ur = [r for r in rows if r["op"] in ("sspp", "unmix") and r.get("median_s") is not None]
    if not ur:
        return []
    lines = ["", "Unmixing (SSPP paper chain: p endmembers; stage times in ms, medians, host "
             "clock; peers time one stage each, on the same cube; CUDA rows also give the "
             "device time of each CUDA stage, CUDA events):", "",
             "| scene | op | p | implementation | total ms | "
             + " | ".join(UNMIX_STAGES) + " | CUDA device ms |",
             "|---|---|---:|---|---:|" + "---:|" * len(UNMIX_STAGES) + "---|"]
    for r in ur:
        st = r.get("stages") or {}
        total = fmt_ms(r["median_s"]) if r["kind"] == "hyprof" else "—"
        lines.append(f"| {r['scene']} | {r['op']} | {r['endmembers']} | {r['impl']} | {total} | "
                     + " | ".join(fmt_ms(st.get(f"{s}_median_s")) for s in UNMIX_STAGES)
                     + f" | {device_ms(r.get('device_stages'))} |")
    return lines


def device_ms(dev):
    """The CUDA stages' device times of an sspp/unmix row, "upload 11.2, ..." (ms)."""
    if not isinstance(dev, dict) or not dev:
        return ""
    return ", ".join(f"{k[:-len('_median_s')]} {fmt_ms(v)}" for k, v in dev.items())


def eap_params(b, args):
    k = args.eap_features
    p = {"attribute": "area", "thresholds": EAP_AREA, "connectivity": args.eap_connectivity,
         "quantisation": 8, "reduction": "pca" if b > k else "none", "features": min(b, k)}
    if b > k:
        p["components"] = k
    return p


def skimage_eap(feats, thresholds, connectivity):
    """scikit-image: one area_closing / area_opening call per threshold and band."""
    from skimage.morphology import area_closing, area_opening

    c = 1 if connectivity == 4 else 2
    out = []
    for q in feats:
        out += [area_closing(q, t, connectivity=c) for t in reversed(thresholds)]
        out.append(q)
        out += [area_opening(q, t, connectivity=c) for t in thresholds]
    return np.stack(out)


def higra_eap(feats, thresholds, connectivity):
    """higra: a max-tree and a min-tree per band, the area once, then every
    threshold from them (reconstruct_leaf_data: each pixel takes the level of its
    deepest ancestor that is kept)."""
    import higra as hg

    h, w = feats.shape[1:]
    graph = (hg.get_4_adjacency_graph((h, w)) if connectivity == 4
             else hg.get_8_adjacency_graph((h, w)))
    out = []
    for q in feats:
        tree, alt = hg.component_tree_max_tree(graph, q)
        area = hg.attribute_area(tree)
        opened = [hg.reconstruct_leaf_data(tree, alt, area < t) for t in thresholds]
        tree, alt = hg.component_tree_min_tree(graph, q)
        area = hg.attribute_area(tree)
        closed = [hg.reconstruct_leaf_data(tree, alt, area < t) for t in reversed(thresholds)]
        out += [c.reshape(h, w) for c in closed] + [q] + [o.reshape(h, w) for o in opened]
    return np.stack(out)


def eap_peers(args, notes):
    peers = []
    for name in [p.strip() for p in args.eap_peers.split(",") if p.strip()]:
        mod, fn = {"skimage": ("skimage", skimage_eap), "higra": ("higra", higra_eap)}.get(
            name, (None, None))
        if not mod:
            notes.append(f"unknown EAP peer '{name}'")
            continue
        try:
            v = getattr(__import__(mod), "__version__", None)
            if v is None:
                from importlib.metadata import version
                v = version(mod)
        except Exception as e:
            msg = f"no EAP peer {name}: {type(e).__name__}: {e}"
            if msg not in notes:
                notes.append(msg)
            continue
        label = {"skimage": "skimage area_opening/closing", "higra": "higra max-tree"}[name]
        peers.append((f"{label} {v}", fn))
    return peers


def bench_eap(base, shape, cube_path, args, exe, tmpdir, rows, notes):
    """hyprof (reduction + profile, per backend), then the peers on the band planes
    of hyprof-cpu's output (the quantised features), then the paper's figures."""
    name = base["scene"]
    b, h, w = shape
    params = eap_params(b, args)
    nt = len(params["thresholds"])
    planes = 2 * nt + 1
    huge = name in HUGE
    outs = {}
    hy = []
    runs = [(bk, 0) for bk in args.backend_list]
    if args.pinned and "cuda" in args.backend_list and not huge:
        runs.append(("cuda", 1))
    for backend, pinned in runs:
        time.sleep(args.settle_s)
        out_path = (None if args.no_check or huge
                    else os.path.join(tmpdir, f"{name}.eap.{backend}{'.pinned' * pinned}.out"))
        rp = dict(params, pinned=1) if pinned else params
        rec = run_hyprof(exe, "eap", backend, cube_path, shape, args, rp, out_path)
        row = hyprof_row(base, "eap", rp, backend, rec, args, notes)
        hy.append(row)
        if row.get("median_s") is not None:
            st = row.get("stages") or {}
            print(f"  eap {row['impl']}: median {row['median_s']:.4g} s (reduction "
                  f"{st.get('reduction_median_s', float('nan')):.4g} s, profile "
                  f"{st.get('profile_median_s', float('nan')):.4g} s) "
                  f"{row.get('device_stages') or ''}", flush=True)
            if out_path and os.path.exists(out_path):
                outs[row["impl"]] = np.fromfile(out_path, dtype=np.float32).reshape(
                    -1, planes, h, w)
        if out_path and os.path.exists(out_path):
            os.remove(out_path)
    ref = outs.get("hyprof-cpu")
    for row in hy:
        if ref is not None and row["impl"] in outs:
            row["check_rel_diff"] = ("ref" if row["impl"] == "hyprof-cpu"
                                     else rel_diff(outs[row["impl"]], ref))
        rows.append(row)
    done = [r for r in hy if r.get("median_s") is not None]
    if huge and len(done) == 2:
        same = (done[0].get("checksum"), done[0].get("checksum_abs")) == \
               (done[1].get("checksum"), done[1].get("checksum_abs"))
        notes.append(f"{name} eap: {done[0]['impl']} and {done[1]['impl']} checksums "
                     f"{'identical' if same else 'DIFFER'} (outputs not compared value by "
                     "value at this size)")
    if huge:
        notes.append(f"{name} eap: no peers at this size (its 63 GB of planes are not written "
                     "out; scikit-image would take hours)")
        if any(r.get("per_band") for r in done):
            notes.append(f"{name} eap: hyprof timed band by band (one call of "
                         "hyprof_attribute_profiles_bands, each band's planes into one reused "
                         "16-bit buffer: hyprof_bench --per-band 1)")
    elif ref is None and not outs:
        if not args.no_peers:
            notes.append(f"{name} eap: no hyprof output to take the features from: no peers")
    elif not args.no_peers:
        base_out = ref if ref is not None else next(iter(outs.values()))
        feats = np.ascontiguousarray(base_out[:, nt]).astype(np.uint8)
        for impl, fn in eap_peers(args, notes):
            with thread_limit(args.threads):
                try:
                    times, out = time_call(lambda: fn(feats, params["thresholds"],
                                                      params["connectivity"]),
                                           args.repeat, args.peer_budget_s)
                except Exception as e:
                    notes.append(f"{name} eap {impl} failed: {type(e).__name__}: {e}")
                    continue
            diff = rel_diff(out.reshape(base_out.shape), base_out) if ref is not None else None
            row = dict(base, op="eap", **params, impl=impl, kind="peer", threads=args.threads,
                       device=cpu_facts()["model"], median_s=median(times), min_s=min(times),
                       times_s=times, repeat=len(times),
                       stages={"reduction_median_s": None, "profile_median_s": median(times)},
                       check_rel_diff=diff)
            if len(times) < args.repeat:
                notes.append(f"{name} eap {impl}: {len(times)} repetition(s) only "
                             f"(--peer-budget-s {args.peer_budget_s:g})")
            del out
            rows.append(row)
            print(f"  eap {impl}: median {row['median_s']:.4g} s"
                  + (f", max rel diff {diff:.1e} against hyprof-cpu" if diff is not None else ""),
                  flush=True)
    paper = PAPER_EAP.get(name)
    if paper:
        tot = paper["profile_s"] + (paper["reduction_s"] or 0.0)
        rows.append(dict(base, op="eap", **params, impl="paper-gpu", kind="paper",
                         device=PAPER_EAP_GPU, median_s=None,
                         stages={"reduction_median_s": paper["reduction_s"],
                                 "profile_median_s": paper["profile_s"]},
                         paper_total_s=tot))


def dwt_reference(cube, wavelet, levels):
    try:
        import pywt
    except ImportError:
        return None
    b = cube.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pywt.wavedec(np.ascontiguousarray(cube.reshape(b, -1).T), wavelet,
                            mode="periodization", level=levels, axis=-1)[0]


def main(argv=None):
    args = parse_args(argv)
    set_thread_env(args.threads)
    load_numeric()
    exe = find_bench_exe(args.bench_exe)
    now = _dt.datetime.now(_dt.timezone.utc)
    host = host_label(gpu_facts())
    meta = {"date": now.strftime("%Y-%m-%d %H:%M UTC"), "host": host, "cpu": cpu_facts(),
            "gpus": gpu_facts(), "threads": args.threads, "repeat": args.repeat,
            "loadavg_before": loadavg(),
            "components": args.components, "wavelet": args.wavelet, "ops": args.op_list,
            "eap_scenes": [s for s in args.eap_scene_list if s in args.scene_list],
            "eadp": {"scenes": args.eadp_scene_list, "times": eadp_times(args),
                     "cycles": args.eadp_cycles},
            "git": git_facts(), "bench_exe": os.path.abspath(exe), "libraries": None,
            "sources": {}}
    with thread_limit(args.threads):
        meta["libraries"] = library_facts()
    print(f"run_bench: {meta['cpu']['model']}, {args.threads} threads, GPU: "
          f"{'; '.join(meta['gpus']) or 'none'}, bench {exe}", flush=True)

    rows, notes, sources = [], list(args.note), {}
    tmpdir = args.tmp_dir or tempfile.mkdtemp(prefix="hyprof_bench_")
    os.makedirs(tmpdir, exist_ok=True)
    try:
        todo = []
        if set(args.op_list) - {"classify", "train"}:
            todo = list(args.scene_list)
            if {"sspp", "unmix"} & set(args.op_list):
                todo += [s for s in args.unmix_scene_list if s not in todo]
            if {"emp", "wmcd"} & set(args.op_list):
                todo += [s for s in args.wmcd_scene_list if s not in todo]
        for name in todo:
            bench_scene(name, args, exe, sources, tmpdir, rows, notes)
            meta["sources"][name] = args.source or SCENES[name][3]
        bench_classification(args, exe, tmpdir, rows, notes)
    finally:
        if not args.tmp_dir:
            shutil.rmtree(tmpdir, ignore_errors=True)

    for r in rows:
        if r.get("hyprof_version"):
            meta["hyprof_version"], meta["hyprof_build"] = r["hyprof_version"], r["hyprof_build"]
        if r.get("impl") == "hyprof-cuda" and r.get("device") and not meta["gpus"]:
            meta["gpus"] = [r["device"]]
    if any(r.get("device_ms") for r in rows):
        cg = device_copy_gbs()
        meta["device_copy_gbs"] = cg
        for r in rows:
            if r.get("device_ms") and cg:
                r["device_copy_gbs"] = cg
    meta["loadavg_after"] = loadavg()
    add_speedups(rows)
    add_eadp_facts(rows)
    write_markdown(args.out_md, meta, rows, notes)
    out_json = args.out_json or os.path.join(HERE, "results",
                                             f"{now.strftime('%Y-%m-%d')}-{host}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
    write_json(out_json, meta, rows, notes)
    print(f"run_bench: appended to {args.out_md}, wrote {out_json}")
    print_table(rows)
    failed = [r for r in rows if r.get("error")]
    return 1 if failed else 0


def print_table(rows):
    for r in rows:
        if r.get("median_s") is None:
            continue
        print(f"{r['scene']:<13} {r['op']:<4} {r['impl']:<32} {fmt_s(r['median_s']):>9} s  "
              f"{fmt_x(r.get('speedup_vs_fastest_peer')):>8}  {fmt_err(r.get('check_rel_diff'))}")


if __name__ == "__main__":
    sys.exit(main())
