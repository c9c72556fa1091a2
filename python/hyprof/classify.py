"""Classification on arrays: train a classifier (hyprof_train), apply it
(hyprof_classify), score a class map (hyprof_assess), split a reference map
(hyprof_split). Models are the files of `hyprof train` and `hyprof classify
--model` (hyprof_classifier_save/load): a model trained here classifies on
the command line, in the GDAL plugin and in QGIS, and the other way round.

The parameters of train and split are the registry's (same names, defaults,
ranges and checks as `hyprof train --help`); the files the command line
reads (--labels, --samples, --reference) are arrays here. The HTML report of
`hyprof assess --html` is made by the command line, not the library: assess
returns the numbers."""

import ctypes as C
import math
import re

import numpy as np

from ._cube import CubeView, Result, _Owner, cube_array, cube_mask
from ._errors import ArgumentError, InputError
from ._lib import Assessment as CAssessment
from ._lib import Cube, Legend, TrainParams, lib, text
from ._ops import operations
from ._run import Context

_OPS = operations()
_TRAIN = _OPS["train"]
_SPLIT = _OPS["split"]
# The command line's file parameters of train: arrays here.
_TRAIN_FILES = ("labels", "samples", "class_field", "layer")


def _checked(op, given):
    """The parameters checked by the registry's parser: name -> text value."""
    args = op.make_args({k: v for k, v in given.items() if v is not None}, check=False)
    try:
        return {p.name: text(lib.hyprof_args_str(args, p.cname.encode())) for p in op.params}
    finally:
        lib.hyprof_args_free(C.byref(args))


def _parse_grid(s):
    """'default' -> (None, None); 'C=1,10,gamma=0.5,2' -> the two lists
    (a key starts a list, bare numbers continue it), as the command line."""
    if s == "default":
        return None, None
    lists, cur = {"c": [], "gamma": []}, None
    for item in s.split(","):
        m = re.fullmatch(r"(?i)(c|gamma)=(.*)", item)
        v = item
        if m:
            cur, v = m.group(1).lower(), m.group(2)
        try:
            x = float(v)
        except ValueError:
            x = float("nan")
        if cur is None or not (x > 0) or not math.isfinite(x):
            raise ArgumentError("hyprof.train: parameter 'grid': bad item '%s' in '%s' (expected "
                                "'default' or 'C=1,10,gamma=0.5,2': positive numbers)" % (item, s))
        lists[cur].append(x)
    if not lists["c"] or not lists["gamma"]:
        raise ArgumentError("hyprof.train: parameter 'grid': '%s': give at least one C and one "
                            "gamma" % s)
    return lists["c"], lists["gamma"]


def _grid_text(grid):
    if isinstance(grid, dict):
        c = grid.get("C", grid.get("c"))
        g = grid.get("gamma")
        if c is None or g is None:
            raise ArgumentError("hyprof.train: parameter 'grid': a dict needs 'C' and 'gamma'")
        c = [c] if np.isscalar(c) else list(c)
        g = [g] if np.isscalar(g) else list(g)
        return "C=%s,gamma=%s" % (",".join(repr(float(x)) for x in c),
                                  ",".join(repr(float(x)) for x in g))
    return grid


def _strings(items):
    arr = (C.c_char_p * len(items))(*[None if s is None else str(s).encode() for s in items])
    return arr


def _legend(class_names, colors):
    """A hyprof_class_legend_t (by class value) and the buffers it points to."""
    names = dict(enumerate(class_names, 1)) if isinstance(class_names, (list, tuple)) \
        else dict(class_names or {})
    cols = dict(colors or {})
    n = max([0] + [int(v) + 1 for v in list(names) + list(cols)])
    if n == 0:
        return Legend(), ()
    name_arr = _strings([names.get(v) for v in range(n)])
    rgba = (C.c_uint8 * (4 * n))()
    for v, c in cols.items():
        c = list(c) + [255] * (4 - len(c))
        rgba[4 * int(v):4 * int(v) + 4] = [int(x) for x in c[:4]]
    return Legend(n, name_arr, rgba), (name_arr, rgba)


def _band_names(features, band_names, nbands):
    names = band_names if band_names is not None else getattr(features, "band_names", None)
    if names is None:
        return None, ()
    names = list(names)
    if len(names) != nbands:
        raise ValueError("hyprof.train: %d band names for %d bands" % (len(names), nbands))
    arr = _strings(names)
    return arr, (arr,)


def train(features, labels, *, classifier="svm", grid="default", folds=5, scale="minmax",
          seed=1, neurons=500, elm_c=1024.0, band_names=None, class_names=None, colors=None,
          mask=None, nodata=None, backend="auto", device=0, threads=0, progress=None):
    """Trains a classifier on the labelled pixels of a feature stack.

    features : array (bands, rows, cols); labels : array (rows, cols) of class
    values 1..65535 (0, NaN or masked: unlabelled). class_names (dict value ->
    name, or a list for values 1, 2, ...) and colors (dict value -> (r, g, b[, a]))
    are kept in the model, as a label raster's category names and colour table
    are by `hyprof train --labels`. band_names default to features.band_names.
    The other parameters are those of `hyprof train` (see below). Returns a
    hyprof.Model.
    """
    p = _checked(_TRAIN, {"classifier": classifier, "grid": _grid_text(grid), "folds": folds,
                          "scale": scale, "seed": seed, "neurons": neurons, "elm_c": elm_c})
    c_list, g_list = _parse_grid(p["grid"])
    fv = CubeView(features, mask, nodata)
    lab = np.asarray(labels)
    if lab.ndim == 3 and lab.shape[0] == 1:
        lab = lab[0]
    if lab.shape != fv.array.shape[1:]:
        raise InputError("hyprof.train: labels have shape %s, the features' pixels are %s"
                         % (lab.shape, fv.array.shape[1:]))
    lv = CubeView(lab)
    tp = TrainParams()
    lib.hyprof_train_params_default(C.byref(tp))
    tp.kind = 1 if p["classifier"] == "elm" else 0
    tp.scale = 0 if p["scale"] == "none" else 1
    keep = []
    if c_list:
        ca, ga = (C.c_double * len(c_list))(*c_list), (C.c_double * len(g_list))(*g_list)
        tp.c, tp.gamma, tp.n_c, tp.n_gamma = ca, ga, len(c_list), len(g_list)
        keep += [ca, ga]
    tp.folds, tp.seed = int(p["folds"]), int(p["seed"])
    tp.neurons, tp.elm_c = int(p["neurons"]), float(p["elm_c"])
    names, k1 = _band_names(features, band_names, fv.cube.bands)
    if names is not None:
        tp.band_names = names
    tp.legend, k2 = _legend(class_names, colors)
    keep += [k1, k2]
    model = C.c_void_p()
    with Context("train", backend, device, threads, progress) as ctx:
        ctx.call(lib.hyprof_train, C.byref(fv.cube), C.byref(lv.cube), C.byref(tp),
                 C.byref(model))
    return Model(model)


class Model:
    """A trained classifier (SVM or ELM): the classes, the bands it was trained
    on, the training report; predict() applies it, save()/load() use the
    files of the command line."""

    def __init__(self, ptr):
        self._ptr = ptr

    def __del__(self):
        if getattr(self, "_ptr", None):
            lib.hyprof_classifier_free(C.byref(self._ptr))

    @classmethod
    def load(cls, path):
        """Loads a model file written by `hyprof train` or Model.save."""
        ptr = C.c_void_p()
        with Context("load_model") as ctx:
            ctx.call(lib.hyprof_classifier_load, str(path).encode(), C.byref(ptr))
        return cls(ptr)

    def save(self, path):
        """Writes the model file (the format of `hyprof train`)."""
        with Context("save_model") as ctx:
            ctx.call(lib.hyprof_classifier_save, self._ptr, str(path).encode())

    @property
    def kind(self):
        return "elm" if lib.hyprof_classifier_kind(self._ptr) == 1 else "svm"

    @property
    def band_names(self):
        return [text(lib.hyprof_classifier_band_name(self._ptr, b))
                for b in range(lib.hyprof_classifier_bands(self._ptr))]

    @property
    def classes(self):
        """The class values, in the model's order (also the order of scores)."""
        return [lib.hyprof_classifier_class_value(self._ptr, k)
                for k in range(lib.hyprof_classifier_classes(self._ptr))]

    @property
    def class_names(self):
        return [text(lib.hyprof_classifier_class_name(self._ptr, k))
                for k in range(lib.hyprof_classifier_classes(self._ptr))]

    @property
    def colors(self):
        """(r, g, b, a) of every class, in the order of `classes`."""
        out = []
        for k in range(lib.hyprof_classifier_classes(self._ptr)):
            c = lib.hyprof_classifier_class_rgba(self._ptr, k)
            out.append(tuple(c[i] for i in range(4)) if c else None)
        return out

    @property
    def report(self):
        """Training report: C, gamma, cross-validation accuracy (NaN without a
        grid search), training pixels, support vectors (SVM) or neurons."""
        m = self._ptr
        return {"classifier": self.kind, "C": lib.hyprof_classifier_c(m),
                "gamma": lib.hyprof_classifier_gamma(m),
                "cv_accuracy": lib.hyprof_classifier_cv_accuracy(m),
                "train_pixels": lib.hyprof_classifier_train_pixels(m),
                "size": lib.hyprof_classifier_size(m)}

    def __repr__(self):
        return "<hyprof.Model %s, %d classes, %d bands>" % (self.kind, len(self.classes),
                                                            len(self.band_names))

    def predict(self, features, *, scores=False, mask=None, nodata=None, backend="auto",
                device=0, threads=0, progress=None):
        """The class map (uint16 (rows, cols), 0 where the input is nodata) of
        every pixel of `features` (bands, rows, cols), as `hyprof classify`.
        With scores=True, also a hyprof.Result with one band per class (named
        after the class): the fraction of one-vs-one votes won (SVM) or the
        softmax of the output layer (ELM); returns (class_map, scores)."""
        fv = CubeView(features, mask, nodata)
        cmap, cscores = Cube(), Cube()
        with Context("classify", backend, device, threads, progress) as ctx:
            ctx.call(lib.hyprof_classify, self._ptr, C.byref(fv.cube), C.byref(cmap),
                     C.byref(cscores) if scores else None)
            used = ctx.used_backend()
        out = cube_array(cmap, _Owner(cmap, lib.hyprof_cube_free), np.uint16)[0]
        if not scores:
            return out
        s = cube_array(cscores, _Owner(cscores, lib.hyprof_cube_free)).view(Result)
        s.band_names, s.mask, s.backend = self.class_names, cube_mask(cscores), used
        s.metadata = {"scores": "fraction of one-vs-one votes won by the class"
                      if self.kind == "svm" else "softmax of the ELM output layer"}
        return out, s


def load_model(path):
    """hyprof.Model.load(path)."""
    return Model.load(path)


class Assessment:
    """Accuracy of a class map: oa, aa, kappa, pixels (scored), values (the
    reference's classes), producer and user accuracy per class, confusion
    (rows: reference class, columns: predicted class, in `values` order) and
    unclassified (per reference class: pixels predicted as no reference class)."""

    def __init__(self, a, names=None):
        k = a.nclasses
        self.values = [a.values[i] for i in range(k)]
        full = np.ctypeslib.as_array(a.confusion, shape=(k, k + 1)).copy() if k else \
            np.zeros((0, 1), np.uint64)
        self.confusion, self.unclassified = full[:, :k], full[:, k]
        self.pixels = int(a.total)
        self.oa, self.aa, self.kappa = a.oa, a.aa, a.kappa
        self.producer = [a.producer[i] for i in range(k)]
        self.user = [a.user[i] for i in range(k)]
        names = dict(enumerate(names, 1)) if isinstance(names, (list, tuple)) else (names or {})
        self.names = [names.get(v, "class %d" % v) for v in self.values]

    def to_dict(self):
        """The numbers of `hyprof assess --json` (without the file names)."""
        return {"pixels": self.pixels, "oa": self.oa, "aa": self.aa, "kappa": self.kappa,
                "classes": [{"value": v, "name": n, "producer": p, "user": u} for v, n, p, u in
                            zip(self.values, self.names, self.producer, self.user)],
                "confusion": self.confusion.tolist(), "unclassified": self.unclassified.tolist()}

    def __repr__(self):
        return "<hyprof.Assessment OA %.4f AA %.4f kappa %.4f over %d pixels>" % (
            self.oa, self.aa, self.kappa, self.pixels)


def assess(class_map, reference, *, class_names=None, backend="auto", threads=0):
    """Scores a class map against a reference map of the same shape over the
    reference's labelled pixels (values > 0), as `hyprof assess`; returns a
    hyprof.Assessment. class_names: dict value -> name (or a list for 1, 2, ...)."""
    m, r = np.asarray(class_map), np.asarray(reference)
    m2, r2 = (m[0] if m.ndim == 3 and m.shape[0] == 1 else m), \
        (r[0] if r.ndim == 3 and r.shape[0] == 1 else r)
    if m2.shape != r2.shape:
        raise InputError("hyprof.assess: the class map has shape %s, the reference %s"
                         % (m2.shape, r2.shape))
    mv, rv = CubeView(class_map), CubeView(reference)
    a = CAssessment()
    with Context("assess", backend, 0, threads) as ctx:
        ctx.call(lib.hyprof_assess, C.byref(mv.cube), C.byref(rv.cube), C.byref(a))
    try:
        return Assessment(a, class_names)
    finally:
        lib.hyprof_assessment_free(C.byref(a))


def split(reference, *, per_class=None, preset="none", seed=1, counts=None):
    """Splits a reference class map (rows, cols) into training and test maps
    (two uint16 arrays, class values or 0), as `hyprof split`: per class,
    per_class pixels (>= 1) or that fraction (< 1), the preset's counts
    ('eadp-table1') or counts[v] for class v, drawn as NumPy's
    default_rng(seed) would."""
    p = _checked(_SPLIT, {"per_class": per_class, "preset": preset, "seed": seed})
    chosen = (per_class is not None) + (p["preset"] != "none") + (counts is not None)
    if chosen != 1:
        raise ArgumentError("hyprof.split: give one of per_class, preset or counts")
    rv = CubeView(reference)
    if rv.cube.bands != 1:
        raise InputError("hyprof.split: the reference has %d bands; one is needed"
                         % rv.cube.bands)
    h, w = rv.array.shape[1:]
    cnt, ncnt = None, 0
    if p["preset"] == "eadp-table1":
        n = C.c_size_t()
        cnt = lib.hyprof_split_preset_eadp_table1(C.byref(n))
        ncnt = n.value
    elif counts is not None:
        counts = list(counts)
        cnt, ncnt = (C.c_size_t * len(counts))(*[int(c) for c in counts]), len(counts)
    tr, te = np.zeros((h, w), np.uint16), np.zeros((h, w), np.uint16)
    pc = float(p["per_class"]) if per_class is not None else 0.0
    with Context("split") as ctx:
        ctx.call(lib.hyprof_split, C.byref(rv.cube), pc, cnt, ncnt, int(p["seed"]),
                 tr.ctypes.data_as(C.POINTER(C.c_uint16)), te.ctypes.data_as(C.POINTER(C.c_uint16)))
    return tr, te
