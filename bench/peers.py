"""The peers of run_bench.py: for each operation, the other implementations timed
on the same cube as hyprof, how one is timed and checked, and the papers' figures.

Each <op>_peers(sc) takes run_bench's scene (cube (bands, height, width) float32,
X the same pixel-major, params the operation's settings, outs hyprof's outputs by
implementation) and returns (peers, notes): a Peer per implementation, the
reference first, and one line per peer that could not be made (a missing package).
A peer's output has the layout of the operation's reference (or peer_check makes
it so). run_peer times one under the run's thread limit: one warm-up, then the
repetitions, fewer when they would pass the budget. Imported by run_bench.py after
its thread variables are set.
"""
import contextlib
import importlib.util
import os
import sys
import time
import warnings
from typing import Callable, NamedTuple, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Peer(NamedTuple):
    name: str
    fn: Callable            # () -> output; staged: () -> ({stage: seconds}, output)
    staged: bool = False
    stage: Optional[str] = None   # the one stage of the chain this peer times
    scale: float = 1.0      # its times are multiplied by this (timed on part of the scene)
    kind: str = "peer"      # "peer-stage": timed next to one stage, no speed-up
    repeat_cap: Optional[int] = None
    extra: dict = {}        # more fields of its row


def test_module(name):
    """A reference module of tests/ (NumPy, scikit-image, PyWavelets only)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


# ------------------------------------------------- timing and checking a peer

def time_call(fn, repeat, budget_s):
    """One warm-up, then `repeat` timed calls (fewer when repeat calls would pass
    budget_s). Returns (times, last output)."""
    t0 = time.perf_counter()
    out = fn()
    warm = time.perf_counter() - t0
    n = max(1, int(budget_s // max(warm, 1e-9))) if warm * repeat > budget_s else repeat
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


def rel_diff(a, ref):
    a, ref = np.asarray(a, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if a.shape != ref.shape:
        return None
    scale = np.max(np.abs(ref))
    return float(np.max(np.abs(a - ref)) / scale) if scale > 0 else float(np.max(np.abs(a)))


def thread_limit(n):
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(limits=n)
    except ImportError:
        return contextlib.nullcontext()


def run_peer(op, sc, peer, ref, budget_s):
    """One peer timed under the thread limit: its row and output (None if it failed)."""
    stages = []

    def call():
        out = peer.fn()
        if peer.staged:
            stages.append(out[0])
            out = out[1]
        return out
    n = min(sc.args.repeat, peer.repeat_cap or sc.args.repeat)
    with thread_limit(sc.args.threads):
        try:
            times, out = time_call(call, n, budget_s)
        except Exception as e:  # a peer failing is reported, not fatal
            sc.notes.append(f"{sc.name} {op.name} {peer.name} failed: {type(e).__name__}: {e}")
            return None, None
    if len(times) < n:
        sc.notes.append(f"{sc.name} {op.name} {peer.name}: {len(times)} repetition(s) only")
    times = [t * peer.scale for t in times]
    row = dict(sc.base, op=op.name, **sc.params, impl=peer.name, kind=peer.kind,
               threads=sc.args.threads, device=sc.cpu_model, median_s=median(times),
               min_s=min(times), times_s=times, repeat=len(times))
    if peer.staged:
        row["stages"] = {f"{k}_median_s": median([s[k] for s in stages[1:]]) for k in stages[0]}
    elif peer.stage:
        row.update(stage=peer.stage, stages={f"{peer.stage}_median_s": row["median_s"]},
                   extrapolated=peer.scale if peer.scale != 1.0 else None)
    row.update(peer.extra)
    if peer.name == op.reference:
        row["check_rel_diff"] = "ref"
    elif ref is not None and out is not None:
        row["check_rel_diff"] = rel_diff(op.peer_check(out, ref), ref)
    return row, out


# ------------------------------------------------------------------------- pca

def fix_signs(vectors):
    """Columns signed as hyprof signs components: the largest-magnitude loading positive."""
    idx = np.argmax(np.abs(vectors), axis=0)
    s = np.sign(vectors[idx, np.arange(vectors.shape[1])])
    s[s == 0] = 1
    return vectors * s


def numpy_pca_f64(X, k):
    Xd = X.astype(np.float64)
    Xd -= Xd.mean(axis=0)
    _, V = np.linalg.eigh((Xd.T @ Xd) / (Xd.shape[0] - 1))
    return (Xd @ fix_signs(V[:, ::-1][:, :k])).astype(np.float32)


def numpy_pca_f32(X, k):
    Xc = X - X.mean(axis=0, dtype=np.float64).astype(np.float32)
    C = (Xc.T @ Xc) / np.float32(Xc.shape[0] - 1)
    _, V = np.linalg.eigh(C.astype(np.float64))
    return Xc @ fix_signs(V[:, ::-1][:, :k]).astype(np.float32)


def cupy_pca():
    """CuPy's covariance + eigh + projection, host arrays in and out; None and why
    without CuPy or a GPU."""
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy sees no GPU"
    except Exception as e:  # not installed, or no driver
        return None, f"CuPy unavailable ({type(e).__name__})"

    def run(X, k):
        Xd = cp.asarray(X).astype(cp.float64)
        Xd -= Xd.mean(axis=0)
        _, V = cp.linalg.eigh((Xd.T @ Xd) / (Xd.shape[0] - 1))
        return cp.asnumpy((Xd @ V[:, ::-1][:, :k]).astype(cp.float32))  # synchronises
    return run, None


def pca_peers(sc):
    X, k = sc.X, sc.params["components"]
    peers = [Peer("numpy-eigh-f64", lambda: numpy_pca_f64(X, k))]
    notes = []
    try:
        import sklearn
        from sklearn.decomposition import PCA
        peers.append(Peer("sklearn-full",
                          lambda: PCA(n_components=k, svd_solver="full").fit_transform(X)))
        try:
            PCA(n_components=1, svd_solver="covariance_eigh").fit(np.eye(4, 3))
            peers.append(Peer("sklearn-covariance_eigh", lambda: PCA(
                n_components=k, svd_solver="covariance_eigh").fit_transform(X)))
        except Exception:
            notes.append(f"scikit-learn {sklearn.__version__} has no "
                         "svd_solver='covariance_eigh' (added in 1.5)")
    except ImportError:
        notes.append("scikit-learn missing: no sklearn PCA rows")
    peers.append(Peer("numpy-eigh-f32", lambda: numpy_pca_f32(X, k)))
    if not sc.args.no_gpu_peers:
        fn, why = cupy_pca()
        if fn:
            peers.append(Peer("cupy-eigh-f64 (GPU)", lambda: fn(X, k), extra={"device": "GPU"}))
        else:
            notes.append(f"no GPU peer: {why}")
    return peers, notes


def pca_check(out, ref):
    """Peers sign their components their own way: aligned with the reference first."""
    o = np.asarray(out, dtype=np.float64)
    s = np.sign(np.sum(o * ref, axis=0))
    s[s == 0] = 1
    return o * s


# ------------------------------------------------------------------------- dwt

def dwt_peers(sc):
    try:
        import pywt
    except ImportError:
        return [], ["PyWavelets missing: no DWT peer and no DWT check"]
    p, b = sc.params, sc.cube.shape[0]

    def wavedec(a, axis):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "level value too high" for few bands
            return pywt.wavedec(a, p["wavelet"], mode="periodization", level=p["levels"],
                                axis=axis)[0]
    return [Peer("pywt (pixel-major, axis=-1)", lambda: wavedec(sc.X, -1)),
            Peer("pywt (band-sequential, axis=0)",
                 lambda: wavedec(sc.cube.reshape(b, -1), 0))], []


def dwt_check(out, ref):
    return out.T if out.shape != ref.shape else out


# ------------------------------------------------------------------------ eadp

def eadp_peers(sc):
    """tests/eadp_reference.py (the tests' oracle) on the NumPy float64 PCs, cast to
    float32 as hyprof's are; its element-wise work runs on one thread."""
    ref, p = test_module("eadp_reference"), sc.params
    k, (_, h, w) = p["components"], sc.cube.shape
    times = [p["step"] * (i + 1) for i in range(p["count"])]

    def run():
        t0 = time.perf_counter()
        pcs = np.ascontiguousarray(numpy_pca_f64(sc.X, k).T.reshape(k, h, w))
        t1 = time.perf_counter()
        out, _ = ref.eadp_cube(pcs, times=times, cycles=p["cycles"])
        return {"pca": t1 - t0, "eadp": time.perf_counter() - t1}, out.reshape(out.shape[0], -1)
    return [Peer("numpy-eadp", run, staged=True, extra={"threads_used": 1})], []


# ------------------------------------------------------------------- emp, wmcd

def emp_chain(cube, levels, op):
    """The chain with the peers: PyWavelets wavedec (features), the tests'
    quantisation, scikit-image reconstruction (EMP) and, for W-MCD, PyWavelets
    wavedec2/waverec2 per EMP band. ({stage: seconds}, (planes, h*w) float32)."""
    import pywt
    eref, mref = test_module("eap_reference"), test_module("emp_reference")
    _, h, w = cube.shape
    t0 = time.perf_counter()
    feat = pywt.wavedec(cube, "haar", mode="periodization", level=levels, axis=0)[0]
    feat = feat.astype(np.float32)
    t1 = time.perf_counter()
    q = [eref.quantise(f)[0].astype(np.int64) for f in feat]
    tq = time.perf_counter()
    planes = [pl for qi in q for pl in mref.emp_profile(qi, [1, 3, 5, 7])]
    t2 = time.perf_counter()
    st = {"spectral": t1 - t0, "quantise": tq - t1, "emp": t2 - tq}
    if op == "emp":
        return st, np.stack(planes).astype(np.float32).reshape(len(planes), -1)
    lv = mref.auto_levels(h, w)
    out = np.stack([d for pl in planes for d in mref.wmcd_plane(pl.astype(np.float64), lv)])
    st["denoise"] = time.perf_counter() - t2
    return st, out.astype(np.float32).reshape(out.shape[0], -1)


def emp_peers(sc):
    missing = [m for m in ("pywt", "skimage") if importlib.util.find_spec(m) is None]
    if missing:
        return [], [f"no scikit-image/PyWavelets peer ({', '.join(missing)} missing)"]
    return [Peer("skimage+pywt", lambda: emp_chain(sc.cube, sc.params["levels"], sc.op),
                 staged=True, repeat_cap=3, extra={"threads": 1})], []


# ----------------------------------------------------------------- sspp, unmix

def farthest_point_init(X, k):
    """hyprof's K-means start (kmeans.c): the pixel farthest from the mean
    spectrum, then the pixel farthest from it, then each time the pixel whose
    nearest chosen centre is farthest (the first on ties), in float64."""
    Xd = X.astype(np.float64)
    d = ((Xd - Xd.mean(axis=0)) ** 2).sum(axis=1)
    idx = [int(np.argmax(d))]
    mind = None
    for _ in range(1, k):
        d = ((Xd - Xd[idx[-1]]) ** 2).sum(axis=1)
        mind = d if mind is None else np.minimum(mind, d)
        idx.append(int(np.argmax(mind)))
    return X[idx].copy()


def unmix_peers(sc):
    """The SciPy / scikit-learn peer of each stage of the SSPP chain; FCLS (SciPy
    nnls, the augmented-row form, delta 1e3) timed on nnls_pixels and scaled."""
    cube, X, p = sc.cube, sc.X, sc.params["endmembers"]
    peers, notes = [], []
    try:
        from scipy.ndimage import gaussian_filter

        def homogeneity():
            d = np.zeros(cube.shape[1:], np.float64)
            for band in cube:
                s = gaussian_filter(band.astype(np.float64), 1.2, mode="reflect", truncate=3.0)
                d += (band - s) ** 2
            return np.sqrt(d / cube.shape[0])
        peers.append(Peer("scipy gaussian_filter + RMSE", homogeneity, stage="homogeneity",
                          kind="peer-stage"))
    except ImportError:
        notes.append("SciPy missing: no homogeneity or FCLS peer")
    try:
        from sklearn.cluster import KMeans
        from sklearn.decomposition import PCA
        peers.append(Peer(f"sklearn PCA({p}).fit_transform", lambda: PCA(
            n_components=p, svd_solver="full").fit_transform(X), stage="purity",
            kind="peer-stage"))
        init = farthest_point_init(X, p)
        peers.append(Peer(f"sklearn KMeans({p}, hyprof's farthest-point init, lloyd, "
                          "max_iter=50, tol=0)",
                          lambda: KMeans(n_clusters=p, init=init, n_init=1, max_iter=50, tol=0.0,
                                         algorithm="lloyd").fit(X).inertia_,
                          stage="kmeans", kind="peer-stage"))
    except ImportError:
        notes.append("scikit-learn missing: no purity or k-means peer")
    if sc.op == "unmix" and peers and peers[0].stage == "homogeneity":
        from scipy.optimize import nnls
        M = X[np.random.default_rng(0).choice(X.shape[0], p, replace=False)].T.astype(np.float64)
        d, npx = 1e3, min(sc.params["nnls_pixels"], X.shape[0])
        Ma = np.vstack([M / np.abs(M).max(), d * np.ones(p)])
        sub = X[:npx].astype(np.float64) / np.abs(M).max()
        peers.append(Peer(f"scipy nnls FCLS per pixel (x{X.shape[0] / npx:.0f} from {npx} "
                          "pixels)", lambda: [nnls(Ma, np.concatenate([y, [d]]))[0] for y in sub],
                          stage="abundances", kind="peer-stage", scale=X.shape[0] / npx))
    return peers, notes


# ------------------------------------------------------------------------- eap

def skimage_eap(feats, thresholds, connectivity):
    """scikit-image: one area_closing / area_opening call per threshold and band."""
    from skimage.morphology import area_closing, area_opening
    c = 1 if connectivity == 4 else 2
    out = []
    for q in feats:
        out += [area_closing(q, t, connectivity=c) for t in reversed(thresholds)] + [q]
        out += [area_opening(q, t, connectivity=c) for t in thresholds]
    return np.stack(out)


def higra_eap(feats, thresholds, connectivity):
    """higra: a max-tree and a min-tree per band, the area once, then every threshold
    (reconstruct_leaf_data: each pixel takes the level of its deepest kept ancestor)."""
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


def eap_peers(sc):
    """The profile only, on hyprof's quantised features (the middle plane of each
    feature's planes in hyprof-cpu's output, else the first output there is)."""
    p, (_, h, w) = sc.params, sc.cube.shape
    base = sc.outs.get("hyprof-cpu", next(iter(sc.outs.values()), None))
    if base is None:
        return [], ["no hyprof output to take the features from: no peers"]
    nt = len(p["thresholds"])
    feats = np.ascontiguousarray(base.reshape(-1, 2 * nt + 1, h, w)[:, nt]).astype(np.uint8)
    peers, notes = [], []
    for mod, label, fn in (("skimage", "skimage area_opening/closing", skimage_eap),
                           ("higra", "higra max-tree", higra_eap)):
        try:
            from importlib.metadata import version
            v = getattr(__import__(mod), "__version__", None) or version(mod)
        except Exception as e:
            notes.append(f"no EAP peer {mod}: {type(e).__name__}: {e}")
            continue
        peers.append(Peer(f"{label} {v}", lambda fn=fn: fn(feats, p["thresholds"],
                                                           p["connectivity"]), stage="profile"))
    return peers, notes


def eap_check(out, ref):
    return out.reshape(ref.shape)


# ---------------------------------------------------------- the papers' figures

# The papers' figures, seconds. EADP Table III "Total" (diffusion, PCA not included).
PAPER_EADP = {"houston": {"gpu": 17.99e-3, "cpu": 208.69e-3},
              "indian_pines": {"gpu": 0.91e-3, "cpu": 10.02e-3},
              "pavia_u": {"gpu": 6.01e-3, "cpu": 49.24e-3}}
PAPER_EADP_DEV = {"gpu": ("NVIDIA GeForce GTX 1060 6 GB (EADP paper, Table III)", None),
                  "cpu": ("Intel Core i5-8400, 6 cores (EADP paper, Table III)", 6)}
PAPER_EAP = {"pavia_c": (0.92, 1.41), "multispectral": (None, 185.0)}  # reduction, profile
PAPER_EAP_GPU = "NVIDIA GeForce GTX 1070 (EAP paper)"
PAPER_WMCD = {"pavia_c": {"one K80 GPU": 0.957, "two K80 GPUs": 0.623,
                          "4 CPU threads (Xeon E5-2680 v3)": 5.477}}


def eadp_paper(scene, base):
    return [dict(base, impl=f"paper-{side}", kind="paper", device=dev, threads=thr,
                 threads_used=thr, median_s=None, stages={"eadp_median_s": s},
                 eadp_core_s=s * thr if thr else None)
            for side, s in PAPER_EADP.get(scene, {}).items()
            for dev, thr in [PAPER_EADP_DEV[side]]]


def eap_paper(scene, base):
    if scene not in PAPER_EAP:
        return []
    red, prof = PAPER_EAP[scene]
    return [dict(base, impl="paper-gpu", kind="paper", device=PAPER_EAP_GPU, median_s=None,
                 stages={"reduction_median_s": red, "profile_median_s": prof},
                 paper_total_s=prof + (red or 0.0))]


def wmcd_paper(scene, base):
    return [dict(base, impl=f"paper ({dev})", kind="paper", median_s=s, min_s=None)
            for dev, s in PAPER_WMCD.get(scene, {}).items()] if base["op"] == "wmcd" else []


# ---------------------------------------------------------------- the device

def device_copy_gbs():
    """The GPU's device-to-device copy bandwidth (bytes read + written, 1 GiB, median
    of 20, CUDA events) with CuPy: the memory bandwidth a kernel can reach there,
    measured in the same run as the FED's. None without CuPy or a GPU."""
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
        return 2 * 4 * n / sorted(ts)[len(ts) // 2] / 1e9
    except Exception:
        return None
