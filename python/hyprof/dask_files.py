"""hyprof.dask.map_files: one operation on many scenes, one task per scene.

Each task opens its GeoTIFF (or any raster GDAL reads) with rioxarray on
the worker, runs the single-machine hyprof.xarray operation there and writes
the result with rioxarray: georeference, band descriptions and the
operation's metadata kept, written under a temporary name in the output's
folder and renamed into place, so a scene whose task fails (or whose worker
dies: Dask then runs the task again elsewhere) leaves no output. Without
overwrite=True an output is placed only where nothing is (a hard link, which
fails if the file exists), so another program writing the same file at the
same moment is never silently replaced. Inputs and
outputs are paths every worker can reach (a shared filesystem on a real
cluster)."""

import errno
import os
from dataclasses import dataclass
from pathlib import Path

import hyprof as _hp


@dataclass
class FileResult:
    """What became of one scene: `output` written, or `error` (the message)."""
    input: str
    output: str
    error: str = None

    @property
    def ok(self):
        return self.error is None


def _outputs(inputs, outputs, op):
    if isinstance(outputs, (str, os.PathLike)):
        d = Path(outputs)
        d.mkdir(parents=True, exist_ok=True)
        outs = [str(d / (Path(i).stem + "_" + op + ".tif")) for i in inputs]
    else:
        outs = [os.fspath(o) for o in outputs]
    if len(outs) != len(inputs):
        raise ValueError("hyprof.dask.map_files: %d inputs but %d outputs"
                         % (len(inputs), len(outs)))
    if len(set(outs)) != len(outs):
        raise ValueError("hyprof.dask.map_files: two scenes would write the same output")
    return outs


def _exists(dst):
    """The early check: saves the work when the output is already there."""
    return os.path.exists(dst)


def _place_new(tmp, dst):
    """Moves tmp onto dst only if dst does not exist: os.link fails if it
    does; on a filesystem without hard links, checking first is what is left."""
    try:
        os.link(tmp, dst)
    except FileExistsError:
        raise FileExistsError("'%s' exists (overwrite=True replaces it)" % dst) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        if os.path.exists(dst):
            raise FileExistsError("'%s' exists (overwrite=True replaces it)" % dst) from None
        os.replace(tmp, dst)
        return
    os.unlink(tmp)


def _scene(op, src, dst, params, overwrite):
    """One scene on a worker: a FileResult, the error caught and reported."""
    tmp = None
    try:
        import rioxarray
        import hyprof.xarray as hx
        if not overwrite and _exists(dst):
            raise FileExistsError("'%s' exists (overwrite=True replaces it)" % dst)
        cube = rioxarray.open_rasterio(src)
        if op == "classify":
            p = dict(params)
            out = hx.predict(_hp.load_model(p.pop("model")), cube, **p)
        else:
            out = getattr(hx, op)(cube, **params)
        tmp = os.path.join(os.path.dirname(os.path.abspath(dst)),
                           ".%s.tmp%d.tif" % (os.path.basename(dst), os.getpid()))
        out.attrs = {k: v if k == "long_name" or not isinstance(v, (list, tuple))
                     else ",".join(map(str, v)) for k, v in out.attrs.items()}
        out.rio.to_raster(tmp)
        if overwrite:
            os.replace(tmp, dst)
        else:
            _place_new(tmp, dst)
        tmp = None
        return FileResult(str(src), str(dst))
    except Exception as e:  # reported per scene; the other scenes go on
        return FileResult(str(src), str(dst), "%s: %s" % (type(e).__name__, e))
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def map_files(op, inputs, outputs, client=None, overwrite=False, **params):
    """Runs `op` (a registry operation, or 'classify' with model=PATH) on
    every input raster, one task per scene, on the cluster (client: a
    Client, a scheduler address, or None for the current Client or a
    LocalCluster). `outputs`: one path per input, or a folder (then
    INPUT-STEM_OP.tif in it). Returns one FileResult per input, in order;
    a scene that fails has its error there, and the others complete."""
    from . import dask as hd
    if op != "classify" and (op not in _hp.OPERATIONS or not _hp.OPERATIONS[op].runnable):
        raise ValueError("hyprof.dask.map_files: '%s' is not an operation on a raster" % op)
    if op == "classify" and not params.get("model"):
        raise ValueError("hyprof.dask.map_files: classify needs model=PATH")
    if op != "classify":
        hd._check(op, params)
        for p in _hp.OPERATIONS[op].params:
            if p.type_name == "file_out" and params.get(p.name) is not None and len(inputs) > 1:
                raise ValueError("hyprof.dask.map_files: '%s' names one file; every scene "
                                 "would write it" % p.name)
    inputs = [os.fspath(i) for i in inputs]
    outs = _outputs(inputs, outputs, op)
    c = hd._get_client(client)
    futs = [c.submit(_scene, op, i, o, params, overwrite, pure=False)
            for i, o in zip(inputs, outs)]
    return c.gather(futs)
