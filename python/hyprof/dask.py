"""The hyprof operations on a Dask cluster, with the single-machine results.

hyprof.dask.eadp(cube, client=..., **params) and the other registry
operations take a cube (a NumPy array, a Dask array or an xarray.DataArray
(band, y, x), Dask-backed or not) and run it on a dask.distributed cluster:
the Client given, else the current one, else a LocalCluster on 127.0.0.1
started on first use (hyprof.dask.client()). They return an
xarray.DataArray (band, y, x) whose data is a Dask array held by the
workers (.compute() or .values brings it back), with the band names,
coordinates, attributes and CRS of hyprof.xarray's result.

The work is cut as in the seeds' W-MCD paper (Fig. 5), so that every result
is the single-machine one:
- spectral stages by blocks of rows: PCA projection, DWT, classification,
  abundances: each pixel's result depends on its own spectrum only;
- global statistics first, as distributed reductions, then broadcast: the
  PCA mean (sums and counts per block), then its covariance (sums of
  centred cross-products per block), decomposed on the client with LAPACK's
  dsyevd as the library does; a classifier's scaling and an endmember set
  travel with the model file;
- spatial stages by feature band: every EADP/EAP/EMP/W-MCD feature band goes
  whole to one worker, which computes that band's own statistics (EADP
  contrast percentile, quantisation min and max) exactly as the
  single-machine call does, then its profile.
Profiles and class maps equal the single-machine call bit for bit given the
same fitted statistics (the PCA model: hyprof.pca(cube, model=...) with the
model this module fitted, `result.attrs['hyprof_pca_model']`); the PCA fit
equals the library's within rounding (1e-10 relative: the sums are added
in another order). Endmember extraction (unmix without `model`) and sspp
need every pixel at once: they run whole on one worker.

map_files(op, inputs, outputs, ...) runs one task per scene (GeoTIFF in,
GeoTIFF out through rioxarray, written to a temporary name then renamed).
"""

import atexit
import hashlib
import operator
import os
import shutil
import tempfile

import dask
import dask.array as da
import distributed
import numpy as np
import xarray as xr

import hyprof as _hp
from . import xarray as _hx

#: Operations whose features are profiled band by band (spatial stages).
SPATIAL = ("eadp", "eap", "emp", "wmcd")
#: Operations computed by blocks of rows (per-pixel spectral stages).
ROWWISE = ("pca", "dwt", "unmix")
#: Operations that need every pixel at once: whole on one worker.
WHOLE = ("sspp",)
_REDUCTION_KEYS = ("reduction", "components", "levels", "wavelet", "features")
_TARGET_BLOCK_BYTES = 64 << 20

# ---- the cluster --------------------------------------------------------------------

_local = None


def local_cluster(n_workers=None, threads_per_worker=1):
    """A LocalCluster of `n_workers` processes (default: one per core) of
    `threads_per_worker` threads, every server of it (scheduler, workers, and
    their HTTP servers, which distributed otherwise opens on every
    interface) listening on 127.0.0.1 only."""
    n = n_workers or max(1, len(os.sched_getaffinity(0)) // threads_per_worker)
    return distributed.LocalCluster(host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                    worker_dashboard_address="127.0.0.1:0", n_workers=n,
                                    threads_per_worker=threads_per_worker, processes=True)


def client(address=None, n_workers=None, threads_per_worker=1):
    """The Client operations run on: `address` when it is a Client or a
    scheduler address ('tcp://host:8786'), else the current Client, else a
    local_cluster(n_workers, threads_per_worker) started once and closed at
    exit."""
    global _local
    if isinstance(address, distributed.Client):
        return address
    if address is not None:
        return distributed.Client(address)
    try:
        return distributed.get_client()
    except ValueError:
        pass
    if _local is None:
        _local = distributed.Client(local_cluster(n_workers, threads_per_worker))
        atexit.register(_close_local)
    return _local


_get_client = client


def _close_local():
    global _local
    if _local is not None:
        cluster = _local.cluster
        _local.close()
        cluster.close()
        _local = None


def _task_common(common):
    """The backend, device and threads of one library call on a worker:
    device None picks the worker's own device (workers named 0, 1, ... as a
    LocalCluster names them, or `dask worker --name 3`, take device name mod
    the device count); threads None
    shares the host's cores among the worker threads on it."""
    out = dict(common)
    host_threads = out.pop("host_threads", None)
    if out.get("device") is None:
        out["device"] = 0
        if out.get("backend", "auto") != "cpu":
            try:
                name = str(distributed.get_worker().name)
                ndev = _hp.cuda_device_count()
                if ndev > 0 and name.isdigit():
                    out["device"] = int(name) % ndev
            except ValueError:
                pass
    if out.get("threads") is None:
        cores = len(os.sched_getaffinity(0))
        out["threads"] = max(1, cores // host_threads) if host_threads else 0
    return out


def _host_threads(c):
    """Worker threads per host, by worker address (to share the cores)."""
    info = c.scheduler_info()["workers"]
    per_host = {}
    for w in info.values():
        per_host[w["host"]] = per_host.get(w["host"], 0) + w["nthreads"]
    return max(per_host.values()) if per_host else None


# ---- tasks (run on the workers) -----------------------------------------------------

def _with_files(files, fn):
    """fn(paths): `files` (parameter -> (suffix, bytes)) written to a
    temporary folder of the worker for the call (workers need not share a
    filesystem with the client)."""
    if not files:
        return fn({})
    d = tempfile.mkdtemp(prefix="hyprof-dask-")
    try:
        paths = {}
        for k, (suffix, data) in files.items():
            paths[k] = os.path.join(d, k + suffix)
            with open(paths[k], "wb") as f:
                f.write(data)
        return fn(paths)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _aligned(block):
    """The block with its data aligned for its dtype: an array Dask
    deserialises may lie at any offset of the message, and the library
    reads whole floats."""
    block = np.asarray(block)
    return block if block.flags.aligned else block.copy()


def _plain(res):
    return np.array(res, dtype=np.float32, copy=True).view(np.ndarray)


def _run_op(block, op, params, files, common):
    """One library call on a block: (float32 array, band names, metadata)."""
    fn = getattr(_hp, op)
    kw = _task_common(common)

    def call(paths):
        res = fn(_aligned(block), **params, **paths, **kw)
        return _plain(res), list(res.band_names), dict(res.metadata)
    return _with_files(files, call)


_models = {}


def _predict(block, model_bytes, key, common):
    """A block of rows classified by the model (loaded once per worker)."""
    model = _models.get(key)
    if model is None:
        model = _with_files({"model": (".model", model_bytes)},
                            lambda p: _hp.load_model(p["model"]))
        _models[key] = model
    kw = _task_common(common)
    return np.asarray(model.predict(_aligned(block), **kw))


def _valid(block, nodata):
    """Valid pixels (rows*cols bool) as the library reads the cube: no band
    NaN, infinite or equal to nodata."""
    v = np.isfinite(block).all(axis=0)
    if nodata is not None:
        v &= ~(block == block.dtype.type(nodata)).any(axis=0)
    return v.ravel()


def _as_f32(block):
    # the library computes the PCA on the cube converted to float32
    return np.asarray(block, dtype=np.float32).astype(np.float64)


def _block_sums(block, nodata):
    x = _as_f32(block)
    v = _valid(x, nodata)
    return x.reshape(x.shape[0], -1)[:, v].sum(axis=1), int(v.sum())


def _block_cross(block, nodata, mean):
    x = _as_f32(block)
    v = _valid(x, nodata)
    c = x.reshape(x.shape[0], -1)[:, v] - mean[:, None]
    return c @ c.T


# ---- inputs and outputs ---------------------------------------------------------------

def _as_dataarray(cube):
    if isinstance(cube, xr.DataArray):
        return _hx._ordered(cube)
    if isinstance(cube, (np.ndarray, da.Array)):
        if cube.ndim == 2:
            cube = cube[None]
        if cube.ndim != 3:
            raise ValueError("hyprof.dask: the cube must be (bands, rows, cols), not of shape %s"
                             % (cube.shape,))
        return xr.DataArray(cube, dims=("band", "y", "x"))
    raise TypeError("hyprof.dask: the cube must be a NumPy or Dask array or an "
                    "xarray.DataArray, not %s" % type(cube).__name__)


def _row_blocks(c, data, row_block, several_passes=False):
    """The cube as a Dask array cut in blocks of whole rows (all bands),
    held by the workers when it comes from the client's memory (else every
    graph would carry it) or when several passes read it (the PCA fit)."""
    b, h, w = data.shape
    if row_block is None:
        nworkers = len(c.scheduler_info()["workers"])
        by_size = max(1, _TARGET_BLOCK_BYTES // max(1, b * w * data.dtype.itemsize))
        row_block = max(1, min(by_size, -(-h // (2 * max(1, nworkers)))))
    if isinstance(data, da.Array):
        x = data.rechunk((b, int(row_block), w))
        return c.persist(x) if several_passes else x
    return c.persist(da.from_array(data, chunks=(b, int(row_block), w)))


def _from_futures(c, futs, shapes):
    """Concatenates along rows the arrays of `futs` ((array, ...) tuples)."""
    parts = [da.from_delayed(c.submit(operator.getitem, f, 0), shape=s, dtype=np.float32)
             for f, s in zip(futs, shapes)]
    return da.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def _result(d, data, names, meta, op):
    attrs = _hx._kept_attrs(d)
    attrs.update({"long_name": tuple(names), "_FillValue": np.float32(np.nan),
                  "hyprof_operation": op})
    attrs.update({"hyprof_" + k: v for k, v in meta.items()})
    return _hx._spatial(d, data, list(names), "band", attrs)


# ---- the stages -------------------------------------------------------------------------

def _rowwise(c, x, op, params, files, common):
    """op on every block of rows: (Dask array, names, metadata)."""
    blocks = x.to_delayed().ravel()
    futs = c.compute([dask.delayed(_run_op)(b, op, params, files, common) for b in blocks])
    heads = c.gather([c.submit(lambda r: (r[0].shape, r[1], r[2]), f) for f in futs])
    shapes = [h[0] for h in heads]
    return _from_futures(c, futs, shapes), heads[0][1], heads[0][2]


def pca_fit(cube, components, client=None, nodata=None, row_block=None):
    """The PCA model of the cube's valid pixels, fitted from sums gathered
    by blocks of rows (mean first, then the covariance): the text of a
    hyprof PCA model file (what `hyprof pca --save-model` writes)."""
    c = _get_client(client)
    d = _as_dataarray(cube)
    if nodata is None:
        nodata = _hx._nodata(d)
    x = _row_blocks(c, d.data, row_block, True)
    return _pca_fit(c, x, int(components), nodata)


def _pca_fit(c, x, k, nodata):
    bands = x.shape[0]
    if not 1 <= k <= bands:
        raise _hp.ArgumentError("hyprof.dask.pca: components %d is out of range: the input has "
                                "%d bands" % (k, bands))
    blocks = x.to_delayed().ravel()
    sums = c.gather(c.compute([dask.delayed(_block_sums)(b, nodata) for b in blocks]))
    n = sum(s[1] for s in sums)
    if n < 2:
        raise _hp.InputError("hyprof.dask.pca: %d valid pixel(s); PCA needs at least 2" % n)
    mean = np.sum([s[0] for s in sums], axis=0) / n
    cross = c.gather(c.compute([dask.delayed(_block_cross)(b, nodata, mean) for b in blocks]))
    cov = np.sum(cross, axis=0) / (n - 1)
    w, v = np.linalg.eigh(cov)  # LAPACK dsyevd, ascending, as the library's fit
    lines = ["hyprof-pca-model 1", "bands %d" % bands, "components %d" % k, "samples %d" % n,
             "total_variance %r" % float(np.sum(w))]

    def row(key, vals):
        return key + "".join(" %r" % float(t) for t in vals)
    vecs = []
    for j in range(k):  # descending; the largest-magnitude loading positive
        col = v[:, bands - 1 - j]
        vecs.append(col if col[np.argmax(np.abs(col))] >= 0 else -col)
    lines.append(row("eigenvalues", [w[bands - 1 - j] for j in range(k)]))
    lines.append(row("mean", mean))
    lines += [row("component %d" % (j + 1), vecs[j]) for j in range(k)]
    return "\n".join(lines) + "\n"


def _features(c, x, op, params, common):
    """The spectral reduction of a profile operation by blocks of rows:
    (features, their names, the fitted PCA model text or None, dwt levels)."""
    o = _hp.OPERATIONS[op]
    red = params.get("reduction", o.by_name["reduction"].default)
    nodata = common.get("nodata")
    if red == "pca":
        k = params.get("components", o.by_name["components"].default)
        model = _pca_fit(c, x, int(k), nodata)
        files = {"model": (".pca", model.encode())}
        f, names, _ = _rowwise(c, x, "pca", {}, files, common)
        return f, _short(names), model, None
    if red == "dwt":
        levels = params.get("levels")
        if levels is None and "features" in o.by_name:
            levels = int(_hp._lib.hyprof_dwt_levels_for_features(
                x.shape[0], int(params.get("features", o.by_name["features"].default))))
        kw = {"wavelet": params.get("wavelet", o.by_name["wavelet"].default)}
        if levels is not None:
            kw["levels"] = int(levels)
        f, names, _ = _rowwise(c, x, "dwt", kw, {}, common)
        return f, _short(names), None, kw.get("levels", o.by_name["levels"].default)
    return x, ["B%d" % (i + 1) for i in range(x.shape[0])], None, None


def _short(names):
    """'PC1 (68.98% of variance)' -> 'PC1', 'A1 haar L6 (bands 1-64)' -> 'A1':
    features as the profiles name them."""
    return [n.split(" ")[0] for n in names]


def _renamed(names, meta, feat, nfeat, op, levels):
    """Names and metadata of a one-band call ('B1 ...') for feature `feat`."""
    names = [feat + n[2:] if n.startswith("B1") else n for n in names]
    out = {}
    for k, v in meta.items():
        out[k[:-3] + "_" + feat if k.endswith("_B1") else k] = v
    key = op.upper() + "_FEATURES"
    if key in out:
        out[key] = str(nfeat)
    if levels is not None and op != "eadp":
        out[op.upper() + "_DWT_LEVELS"] = str(levels)
    return names, out


def _by_band(c, feats, fnames, op, params, common, levels):
    """op on every feature band, each band whole on one worker."""
    band_params = {k: v for k, v in params.items() if k not in _REDUCTION_KEYS}
    band_params["reduction"] = "none"
    _check_band_fits(c, op, band_params, feats.shape[1:])
    bands = feats.rechunk((1,) + feats.shape[1:]).to_delayed().ravel()
    futs = c.compute([dask.delayed(_run_op)(b, op, band_params, {}, common) for b in bands])
    heads = c.gather([c.submit(lambda r: (r[0].shape, r[1], r[2]), f) for f in futs])
    names, meta = [], {}
    for i, (shape, n, m) in enumerate(heads):
        n, m = _renamed(n, m, fnames[i], len(fnames), op, levels)
        names += n
        meta.update(m)
    parts = [da.from_delayed(c.submit(operator.getitem, f, 0), shape=h[0], dtype=np.float32)
             for f, h in zip(futs, heads)]
    return da.concatenate(parts, axis=0), names, meta


def _check_band_fits(c, op, band_params, shape):
    """MemoryError, before any band is sent, when a feature band and its
    profile (planes counted on a small probe band) exceed the smallest
    worker memory limit: each band must be whole on one worker."""
    limits = [w.get("memory_limit") or 0 for w in c.scheduler_info()["workers"].values()]
    limit = min([m for m in limits if m > 0], default=0)
    if not limit:
        return
    side = min(64, *shape)
    probe = np.random.default_rng(0).random((1, side, side), dtype=np.float32)
    try:
        planes = getattr(_hp, op)(probe, threads=1, backend="cpu", **band_params).shape[0]
    except _hp.Error:
        return  # the band's own call reports what is wrong with it
    need = shape[0] * shape[1] * 4 * (planes + 2)
    if need > limit:
        raise MemoryError(
            "hyprof.dask.%s: a feature band of %dx%d pixels and its %d planes need about %.0f MB "
            "on one worker, over the workers' memory limit of %.0f MB: every feature band is "
            "profiled whole on one worker; use workers with more memory"
            % (op, shape[1], shape[0], planes, need / 1e6, limit / 1e6))


def _check(op, params):
    """Checks the parameters with the registry's parser now, on the client."""
    for name in params:
        if name not in _hp.OPERATIONS[op].by_name:
            raise TypeError("hyprof.dask.%s: unknown parameter '%s'%s" % (
                op, name, " (mark invalid pixels with nodata= or NaN)" if name == "mask" else ""))
    args = _hp.OPERATIONS[op].make_args(params)
    _hp._lib.hyprof_args_free(_hp._ops.C.byref(args))


def _setup(client, cube, nodata, backend, device, threads):
    """The Client, the cube as a DataArray, and the arguments every task takes."""
    c = _get_client(client)
    d = _as_dataarray(cube)
    if nodata is None:
        nodata = _hx._nodata(d)
    return c, d, {"nodata": nodata, "backend": backend, "device": device, "threads": threads,
                  "host_threads": _host_threads(c)}


def run(op, cube, client=None, row_block=None, nodata=None, backend="auto", device=None,
        threads=None, **params):
    """Runs registry operation `op` on the cluster (see the module's help)."""
    if op not in _hp.OPERATIONS or not _hp.OPERATIONS[op].runnable or op == "classify":
        raise ValueError("hyprof.dask: '%s' is not an operation on a cube (one of %s)"
                         % (op, ", ".join(_hp._generated)))
    _check(op, params)
    if params.get("endmembers_json") is not None:
        raise ValueError("hyprof.dask.unmix: endmembers_json is not written on a cluster; "
                         "endmembers_csv is (the set unmix's model= reads)")
    c, d, common = _setup(client, cube, nodata, backend, device, threads)
    o = _hp.OPERATIONS[op]
    pca = op == "pca" or (op in SPATIAL and params.get("reduction", o.by_name["reduction"].default)
                          == "pca")
    x = _row_blocks(c, d.data, row_block, pca and params.get("model") is None)
    extra = {}
    if op in SPATIAL:
        feats, fnames, model, levels = _features(c, x, op, params, common)
        data, names, meta = _by_band(c, feats, fnames, op, params, common, levels)
        if model is not None:
            extra["hyprof_pca_model"] = model
    elif op == "pca" and params.get("model") is None:
        model = _pca_fit(c, x, int(params.get("components", o.by_name["components"].default)),
                         nodata)
        files = {"model": (".pca", model.encode())}
        if params.get("save_model"):
            _write_atomic(params["save_model"], model.encode())
        p = {k: v for k, v in params.items() if k not in ("components", "save_model")}
        data, names, meta = _rowwise(c, x, "pca", p, files, common)
        extra["hyprof_pca_model"] = model
    elif op == "unmix" and params.get("model") is None:
        data, names, meta = _unmix(c, x, params, common)
    elif op in ROWWISE:
        data, names, meta = _rowwise(c, x, op, params, _file_params(op, params), common)
    else:  # whole on one worker
        data, names, meta = _rowwise(c, x.rechunk(x.shape), op, params, {}, common)
    out = _result(d, data, names, meta, op)
    out.attrs.update(extra)
    return out


def _file_params(op, params):
    """Input files the library reads (a saved model): sent with the task."""
    files = {}
    for name in ("model",):
        if params.get(name) is not None:
            with open(params[name], "rb") as f:
                files[name] = (os.path.splitext(str(params[name]))[1], f.read())
            del params[name]
    return files


def _extract_endmembers(cube, params, common):
    """unmix on the whole cube (on one worker): the endmembers' CSV, the band
    names and the metadata."""
    d = tempfile.mkdtemp(prefix="hyprof-dask-")
    try:
        csv = os.path.join(d, "em.csv")
        res = _hp.unmix(_aligned(cube), endmembers_csv=csv, **params, **_task_common(common))
        with open(csv, "rb") as f:
            return f.read(), list(res.band_names), dict(res.metadata)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _unmix(c, x, params, common):
    """Endmembers from the whole cube on one worker (extraction is global),
    then the abundances by blocks of rows with that set."""
    whole = x.rechunk(x.shape).to_delayed().ravel()[0]
    p = {k: v for k, v in params.items() if k not in ("endmembers_csv", "endmembers_json")}
    csv, names, meta = c.compute(dask.delayed(_extract_endmembers)(whole, p, common)).result()
    if params.get("endmembers_csv"):
        _write_atomic(params["endmembers_csv"], csv)
    rp = {k: params[k] for k in ("abundances",) if k in params}
    # the extraction's names: they carry the endmembers' pixels
    data, _, _ = _rowwise(c, x, "unmix", rp, {"model": (".csv", csv)}, common)
    return data, names, meta


def _write_atomic(path, data):
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def classify(features, model, client=None, row_block=None, nodata=None, backend="auto",
             device=None, threads=None):
    """The class map (y, x) uint16 of `features` by `model` (a hyprof.Model or
    the path of a model file), by blocks of rows: equal to model.predict."""
    if isinstance(model, _hp.Model):
        d = tempfile.mkdtemp(prefix="hyprof-dask-")
        try:
            model.save(os.path.join(d, "m.model"))
            with open(os.path.join(d, "m.model"), "rb") as f:
                data = f.read()
        finally:
            shutil.rmtree(d, ignore_errors=True)
    else:
        with open(model, "rb") as f:
            data = f.read()
        model = _hp.load_model(model)
    c, d, common = _setup(client, features, nodata, backend, device, threads)
    x = _row_blocks(c, d.data, row_block)
    key = hashlib.sha1(data).hexdigest()
    # a key of its own: a content-hashed one may be released by an earlier
    # call for the same model while this one needs it
    blob = c.scatter(data, broadcast=True, hash=False)
    blocks = x.to_delayed().ravel()
    futs = c.compute([dask.delayed(_predict)(b, blob, key, common) for b in blocks])
    parts = [da.from_delayed(f, shape=(h, x.shape[2]), dtype=np.uint16)
             for f, h in zip(futs, x.chunks[1])]
    attrs = _hx._kept_attrs(d)
    attrs.update({"class_values": list(model.classes), "class_names": list(model.class_names),
                  "_FillValue": 0, "hyprof_operation": "classify"})
    return _hx._spatial(d, da.concatenate(parts, axis=0), attrs=attrs)


def _make(op):
    def fn(cube, client=None, row_block=None, **params):
        return run(op, cube, client=client, row_block=row_block, **params)
    fn.__name__ = fn.__qualname__ = op
    fn.__module__ = __name__
    fn.__doc__ = ("hyprof.%s on a Dask cluster: the cube (NumPy, Dask or xarray) cut as the "
                  "module's help says; returns a Dask-backed xarray.DataArray (band, y, x). "
                  "client: a Client or scheduler address (default: the current one or a "
                  "LocalCluster); row_block: rows per block; device None: each worker's own; "
                  "threads None: the host's cores shared among its worker threads.\n\n"
                  % op) + (getattr(_hp, op).__doc__ or "")
    return fn


for _name in _hp._generated:
    globals()[_name] = _make(_name)

from .dask_files import map_files  # noqa: E402  (uses run and client above)

__all__ = sorted(_hp._generated) + ["run", "classify", "pca_fit", "client", "local_cluster",
                                    "map_files",
                                    "SPATIAL", "ROWWISE", "WHOLE"]
