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

import contextlib
import ctypes as C
import math
import os
import re
import tempfile
import warnings

import numpy as np

from ._cube import CubeView, Result, _Owner, cube_array, cube_mask
from ._errors import ArgumentError, FileError, InputError
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


# hyprof_class_match_t, hyprof_class_assessment_t (include/hyprof/classify.h)
class _Pair(C.Structure):
    _fields_ = [("map", C.c_int), ("ref", C.c_int), ("map_name", C.c_char_p),
                ("ref_name", C.c_char_p)]


class _Match(C.Structure):
    _fields_ = [("by_names", C.c_int), ("fallback", C.c_int), ("how", C.c_char * 320),
                ("notes", C.POINTER(C.c_char_p)), ("nnotes", C.c_size_t),
                ("pairs", C.POINTER(_Pair)), ("npairs", C.c_size_t),
                ("map_to_ref", C.POINTER(C.c_uint16))]


class _ClassAssessment(C.Structure):
    _fields_ = [("scores", CAssessment), ("match", _Match), ("legend", Legend),
                ("picture", Legend), ("map", C.POINTER(C.c_uint16)), ("width", C.c_size_t),
                ("height", C.c_size_t), ("labelled", C.c_size_t)]


def _declare():
    P = C.POINTER
    for name, res, args in (
            ("hyprof_assess_classes", C.c_int,
             [C.c_void_p, P(Cube), P(Cube), P(Legend), P(Legend), C.c_int, C.c_char_p,
              C.c_char_p, P(_ClassAssessment)]),
            ("hyprof_class_assessment_free", None, [P(_ClassAssessment)]),
            ("hyprof_assess_html", C.c_int,
             [C.c_void_p, P(_ClassAssessment), C.c_char_p, C.c_char_p, C.c_char_p,
              P(C.c_void_p), P(C.c_size_t)])):
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    libc = C.CDLL(None)  # the C library the process (and libhyprof) allocates with
    libc.free.restype, libc.free.argtypes = None, [C.c_void_p]
    return libc.free


_free = _declare()
_MATCH = {"auto": 0, "names": 1, "numbers": 2}


class Assessment:
    """Accuracy of a class map: oa, aa, kappa, pixels (scored), values (the
    reference's classes), names (their names in the report), producer and user
    accuracy per class, confusion (rows: reference class, columns: predicted
    class, in `values` order) and unclassified (per reference class: pixels
    predicted as no reference class). How the classes were paired: match
    ('names' or 'numbers'), match_how (the sentence of the report),
    match_notes (classes without partner, names that disagree), pairs (by
    name: dicts classmap_value, classmap_name, reference_value,
    reference_name) and classmap_values (by name: the class-map value paired
    with each reference class, None when none). html: the HTML report when
    asked for (the page `hyprof assess --html` writes), else None."""

    def __init__(self, r):
        a, m = r.scores, r.match
        k = a.nclasses
        self.values = [a.values[i] for i in range(k)]
        full = np.ctypeslib.as_array(a.confusion, shape=(k, k + 1)).copy() if k else \
            np.zeros((0, 1), np.uint64)
        self.confusion, self.unclassified = full[:, :k], full[:, k]
        self.pixels = int(a.total)
        self.oa, self.aa, self.kappa = a.oa, a.aa, a.kappa
        self.producer = [a.producer[i] for i in range(k)]
        self.user = [a.user[i] for i in range(k)]
        lg = r.legend
        self.names = [(text(lg.names[v]) if v < lg.n and lg.names and lg.names[v] else None)
                      or "class %d" % v for v in self.values]
        self.match = "names" if m.by_names else "numbers"
        self.match_how = text(m.how)
        self._fallback = bool(m.fallback)  # auto took numbers although one side names classes
        self.match_notes = [text(m.notes[i]) for i in range(m.nnotes)]
        self.pairs = [{"classmap_value": p.map, "classmap_name": text(p.map_name),
                       "reference_value": p.ref, "reference_name": text(p.ref_name)}
                      for p in (m.pairs[i] for i in range(m.npairs))]
        by_ref = {p["reference_value"]: p["classmap_value"] for p in self.pairs}
        self.classmap_values = [by_ref.get(v) for v in self.values] if m.by_names else None
        self.html = None

    def to_dict(self):
        """The numbers of `hyprof assess --json` (without the file names)."""
        classes = []
        for i, (v, n, p, u) in enumerate(zip(self.values, self.names, self.producer,
                                             self.user)):
            c = {"value": v, "name": n}
            if self.classmap_values is not None:
                c["classmap_value"] = self.classmap_values[i]
            c.update({"producer": p, "user": u})
            classes.append(c)
        return {"pixels": self.pixels, "oa": self.oa, "aa": self.aa, "kappa": self.kappa,
                "match": {"by": self.match, "how": self.match_how, "notes": self.match_notes,
                          "pairs": self.pairs},
                "classes": classes, "confusion": self.confusion.tolist(),
                "unclassified": self.unclassified.tolist()}

    def __repr__(self):
        return "<hyprof.Assessment OA %.4f AA %.4f kappa %.4f over %d pixels, by %s>" % (
            self.oa, self.aa, self.kappa, self.pixels, self.match)


def _class_value(param, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError("hyprof.assess: parameter '%s': class values are integers, not %r"
                        % (param, v))
    if not 0 <= v <= 65535:
        raise ArgumentError("hyprof.assess: parameter '%s': class value %d is out of range "
                            "[0, 65535]" % (param, v))
    return int(v)


def _names_arg(param, names):
    """dict value -> name, or a list for values 1, 2, ...; checked."""
    if names is None:
        return None
    if isinstance(names, dict):
        items = names.items()
    elif isinstance(names, (list, tuple)):
        items = enumerate(names, 1)
    else:
        raise TypeError("hyprof.assess: parameter '%s' must be a dict (class value -> name) or "
                        "a list (names of classes 1, 2, ...), not %s"
                        % (param, type(names).__name__))
    out = {}
    for v, n in items:
        v = _class_value(param, v)
        if n is not None and not isinstance(n, str):
            raise TypeError("hyprof.assess: parameter '%s': the name of class %d must be a "
                            "string, not %s" % (param, v, type(n).__name__))
        out[v] = n
    return out


def _colors_arg(param, colors):
    """dict value -> (r, g, b[, a]) of 0..255; checked."""
    if colors is None:
        return None
    if not isinstance(colors, dict):
        raise TypeError("hyprof.assess: parameter '%s' must be a dict (class value -> (r, g, b"
                        "[, a])), not %s" % (param, type(colors).__name__))
    out = {}
    for v, c in colors.items():
        v = _class_value(param, v)
        c = list(c) if isinstance(c, (list, tuple, np.ndarray)) else None
        if c is None or len(c) not in (3, 4) or \
                not all(isinstance(x, (int, np.integer)) and 0 <= x <= 255 for x in c):
            raise ArgumentError("hyprof.assess: parameter '%s': the colour of class %d must be "
                                "(r, g, b[, a]) of integers 0..255" % (param, v))
        out[v] = c
    return out


def _label_arg(param, label):
    if label is not None and not isinstance(label, (str, os.PathLike)):
        raise TypeError("hyprof.assess: parameter '%s' must be a string, not %s"
                        % (param, type(label).__name__))
    return None if label is None else os.fsencode(label)


def _html_arg(html):
    if html is None or isinstance(html, bool) or isinstance(html, (str, os.PathLike)):
        return html
    raise TypeError("hyprof.assess: parameter 'html' must be True, False or a path, not %s"
                    % type(html).__name__)


def _write_atomic(path, data):
    """Writes `data` to a temporary file beside `path`, then renames it onto
    `path`: a failed write never leaves a file that looks complete."""
    path = os.fspath(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        raise FileError("hyprof.assess: parameter 'html': cannot write '%s': %s"
                        % (path, e.strerror)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise FileError("hyprof.assess: parameter 'html': cannot write '%s': %s"
                            % (path, e.strerror)) from None
        raise


def _html(ctx, r, labels):
    page, n = C.c_void_p(), C.c_size_t()
    ctx.call(lib.hyprof_assess_html, C.byref(r), *labels, C.byref(page), C.byref(n))
    try:
        return C.string_at(page, n.value)
    finally:
        _free(page)


def _old_names(class_names, map_names, reference_names, match):
    """class_names= (before map_names/reference_names): the same names on both
    sides, classes paired by number unless `match` says otherwise."""
    if map_names is not None or reference_names is not None:
        raise TypeError("hyprof.assess: give class_names or map_names/reference_names, not both")
    warnings.warn("hyprof.assess: class_names= is deprecated; give map_names= and "
                  "reference_names= (classes are then paired by name, as `hyprof assess`)",
                  DeprecationWarning, stacklevel=3)
    return class_names, class_names, "numbers" if match == "auto" else match


def assess(class_map, reference, *, map_names=None, reference_names=None, match="auto",
           html=None, map_colors=None, reference_colors=None, map_label=None,
           reference_label=None, reference_field=None, class_names=None, backend="auto",
           threads=0):
    """Scores a class map against a reference map of the same shape over the
    reference's labelled pixels (values > 0), as `hyprof assess`; returns a
    hyprof.Assessment.

    map_names, reference_names: each side's class names (dict value -> name,
    or a list for values 1, 2, ...), as a class map's and a reference raster's
    category names. match: 'auto' (by name when both sides name their
    classes, else by number), 'names' or 'numbers', as `--match`; by name,
    the class map is renumbered into the reference's values (case and
    whitespace ignored). html: True puts the HTML report on the result's
    .html; a path writes it there (atomically: a temporary file renamed).
    It is the page `hyprof assess --html` writes for the same inputs, with
    map_colors/reference_colors (dict value -> (r, g, b[, a])) as the
    rasters' colour tables, map_label/reference_label as the file names the
    page shows and reference_field the class field of a vector reference.
    class_names (deprecated): the same names for both sides, paired by number.
    """
    if class_names is not None:
        map_names, reference_names, match = _old_names(class_names, map_names,
                                                       reference_names, match)
    if not isinstance(match, str):
        raise TypeError("hyprof.assess: parameter 'match' must be a string, not %s"
                        % type(match).__name__)
    if match not in _MATCH:
        raise ArgumentError("hyprof.assess: parameter 'match': %r is not one of auto, names, "
                            "numbers" % match)
    mn, rn = _names_arg("map_names", map_names), _names_arg("reference_names", reference_names)
    mc = _colors_arg("map_colors", map_colors)
    rc = _colors_arg("reference_colors", reference_colors)
    labels = (_label_arg("map_label", map_label), _label_arg("reference_label", reference_label),
              _label_arg("reference_field", reference_field))
    html = _html_arg(html)
    m, r = np.asarray(class_map), np.asarray(reference)
    m2, r2 = (m[0] if m.ndim == 3 and m.shape[0] == 1 else m), \
        (r[0] if r.ndim == 3 and r.shape[0] == 1 else r)
    if m2.shape != r2.shape:
        raise InputError("hyprof.assess: the class map has shape %s, the reference %s"
                         % (m2.shape, r2.shape))
    mv, rv = CubeView(class_map), CubeView(reference)
    (ml, k1), (rl, k2) = _legend(mn, mc), _legend(rn, rc)
    res = _ClassAssessment()
    with Context("assess", backend, 0, threads) as ctx:
        try:
            ctx.call(lib.hyprof_assess_classes, C.byref(mv.cube), C.byref(rv.cube),
                     C.byref(ml), C.byref(rl), _MATCH[match], labels[0], labels[1],
                     C.byref(res))
        except ArgumentError as e:
            raise ArgumentError("hyprof.assess: parameter 'match': %r: %s"
                                % (match, re.sub(r"^assess: ", "", str(e))), e.status) from None
        try:
            out = Assessment(res)
            page = _html(ctx, res, labels) if html not in (None, False) else None
        finally:
            lib.hyprof_class_assessment_free(C.byref(res))
    for note in ([out.match_how] if out._fallback else []) + out.match_notes:
        warnings.warn("hyprof.assess: " + note, stacklevel=2)
    if page is not None:
        out.html = page.decode("utf-8", "replace")
        if html is not True:
            _write_atomic(html, page)
    return out


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
