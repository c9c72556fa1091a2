"""Independent references for `hyprof eap` (the contract of
algorithms/attribute/eap_impl.h and include/hyprof/attribute.h), in NumPy/SciPy
and scikit-image, written from the definitions and sharing no code with the
library:

- quantise(): the linear 8/16-bit quantisation of a feature band;
- dwt_levels(): the DWT level count --features picks;
- maxtree_profile(): attribute openings/closings built on
  skimage.morphology.max_tree (attributes accumulated up the tree with exact
  integers, the min rule applied from the root down);
- levelset_profile(): the same by threshold decomposition, straight from the
  definition: for every level k, the connected components of {f >= k}
  (scipy.ndimage.label), their attributes, and the pixel's output the highest k
  whose component passes together with every component containing it. It
  takes a validity mask (the max-tree of scikit-image cannot), so it is the
  oracle for nodata.

Both return (closings, openings): lists over the thresholds in increasing
order, each an array of the image's shape. Attribute values are computed with
the same correctly rounded double operations as the library, so the outputs
must agree bit for bit.

Attributes (a component C of n pixels passes threshold t when attr >= t):
  area      n
  std       sqrt(n S2 - S1^2) / n            (S1, S2: sums of levels, squares)
  diagonal  sqrt((xmax-xmin+1)^2 + (ymax-ymin+1)^2)
  inertia   (6 (n Sxx - Sx^2 + n Syy - Sy^2) + n^2) / (6 n^3)
Increasing (area, diagonal): the nearest passing ancestor; std and inertia:
min rule. A failing root gives the lattice bottom (0; levels-1 for closings),
as scikit-image does.
"""

import math

import numpy as np
from scipy import ndimage
from skimage.morphology import max_tree

ATTRIBUTES = ("area", "std", "diagonal", "inertia")
INCREASING = {"area": True, "std": False, "diagonal": True, "inertia": False}


def quantise(band, valid=None, levels=256):
    """(levels uint16 array, (min, max)) of one float band: floor((x - min) *
    (levels - 1) / (max - min) + 0.5) over the valid pixels (0 elsewhere and for
    a constant band), in float64 from the float32 values."""
    x = np.asarray(band, dtype=np.float32).astype(np.float64)
    valid = np.ones(x.shape, bool) if valid is None else np.asarray(valid, bool)
    if not valid.any():
        return np.zeros(x.shape, np.uint16), (math.nan, math.nan)
    lo, hi = float(x[valid].min()), float(x[valid].max())
    q = np.zeros(x.shape, np.uint16)
    if hi > lo:
        s = np.floor((x - lo) * float(levels - 1) / (hi - lo) + 0.5)
        q = np.where(valid, np.clip(s, 0, levels - 1), 0).astype(np.uint16)
    return q, (lo, hi)


def dwt_levels(bands, features):
    """The level count whose ceil(bands / 2^L) is closest to `features` (ties:
    more bands), L from 1 to max(1, floor(log2(bands)))."""
    maxl = max(1, int(math.floor(math.log2(bands)))) if bands > 1 else 1
    best = None
    for l in range(1, maxl + 1):
        d = abs(-(-bands // 2 ** l) - features)
        if best is None or d < best[0]:
            best = (d, l)
    return best[1]


# ---- attributes from exact integer sums -----------------------------------------------

def attribute_value(attribute, n, s1=0, s2=0, box=None, sx=0, sy=0, sxx=0, syy=0):
    """One component's attribute, with the library's rounding (Python ints are exact;
    float() of an int, sqrt and / are correctly rounded, as in C)."""
    if attribute == "area":
        return float(n)
    if attribute == "std":
        return math.sqrt(float(n * s2 - s1 * s1)) / float(n)
    if attribute == "diagonal":
        x0, x1, y0, y1 = box
        dx, dy = x1 - x0 + 1, y1 - y0 + 1
        return math.sqrt(float(dx * dx + dy * dy))
    if attribute == "inertia":
        num = 6 * (n * sxx - sx * sx + n * syy - sy * sy) + n * n
        return float(num) / (6.0 * float(n) * float(n) * float(n))
    raise ValueError(attribute)


def npass(value, thresholds):
    """How many of the increasing thresholds the value passes (value >= t)."""
    k = 0
    while k < len(thresholds) and thresholds[k] <= value:
        k += 1
    return k


# ---- on skimage's max-tree ---------------------------------------------------------------

def _openings_maxtree(img, attribute, thresholds, connectivity):
    """Openings of a non-negative integer image (no mask), one per threshold.

    scikit-image 0.19's max_tree silently returns a broken tree when an axis is
    shorter than 3 (1xN, 2xN, 3x2 at 8-connectivity): the image is therefore
    framed by one pixel below every level (levels shifted up by one). The frame
    adds a single root node under the image's own root and changes no other
    node (components of {f >= k} never contain frame pixels for k above it);
    the image's root is then the node whose parent is the frame."""
    h, w = img.shape
    W = w + 2
    framed = np.zeros((h + 2, W), np.int64)
    framed[1:-1, 1:-1] = img + 1
    parent, order = max_tree(framed, connectivity=1 if connectivity == 4 else 2)
    parent = [int(q) for q in parent.ravel()]
    order = [int(p) for p in order if framed.flat[p] > 0]  # the image's pixels only
    f = {p: int(framed.flat[p]) - 1 for p in order}
    xs = {p: p % W for p in order}  # framed coordinates: moments and boxes
    ys = {p: p // W for p in order}  # do not depend on the origin
    cnt = {p: 1 for p in order}
    s1 = dict(f)
    s2 = {p: v * v for p, v in f.items()}
    x0, x1, y0, y1 = dict(xs), dict(xs), dict(ys), dict(ys)
    sx, sy = dict(xs), dict(ys)
    sxx = {p: x * x for p, x in xs.items()}
    syy = {p: y * y for p, y in ys.items()}

    def is_root(p):
        return framed.flat[parent[p]] == 0

    for p in reversed(order):  # leaves first: children before parents
        if is_root(p):
            continue
        q = parent[p]
        cnt[q] += cnt[p]
        s1[q] += s1[p]
        s2[q] += s2[p]
        x0[q], x1[q] = min(x0[q], x0[p]), max(x1[q], x1[p])
        y0[q], y1[q] = min(y0[q], y0[p]), max(y1[q], y1[p])
        sx[q] += sx[p]
        sy[q] += sy[p]
        sxx[q] += sxx[p]
        syy[q] += syy[p]
    nt = len(thresholds)
    kept, out = {}, {}
    for p in order:  # root first: parents before children
        root = is_root(p)
        q = parent[p]
        if not root and f[q] == f[p]:
            out[p] = out[q]  # same node as its canonical parent element
            continue
        v = attribute_value(attribute, cnt[p], s1[p], s2[p], (x0[p], x1[p], y0[p], y1[p]),
                            sx[p], sy[p], sxx[p], syy[p])
        k = npass(v, thresholds)
        if not root:
            k = min(k, kept[q])  # the min rule (a no-op for increasing attributes)
        kept[p] = k
        below = [0] * nt if root else out[q]
        out[p] = [f[p] if j < k else below[j] for j in range(nt)]
    res = np.zeros((nt, h, w), np.int64)
    for p in order:
        res[:, p // W - 1, p % W - 1] = out[p]
    return [res[j] for j in range(nt)]


def maxtree_profile(img, attribute, thresholds, connectivity=4, levels=256):
    """(closings, openings) of a 2-D integer image on skimage's max-tree."""
    img = np.asarray(img).astype(np.int64)
    top = levels - 1
    openings = _openings_maxtree(img, attribute, list(thresholds), connectivity)
    closings = [top - o for o in _openings_maxtree(top - img, attribute, list(thresholds),
                                                   connectivity)]
    return closings, openings


# ---- by threshold decomposition ------------------------------------------------------------

def _component_attributes(labels, nlab, img, attribute):
    """Attribute of labels 1..nlab (index 0 unused), float64, library rounding."""
    idx = labels.ravel()
    h, w = labels.shape
    ys, xs = np.indices((h, w))
    xs, ys, v = xs.ravel().astype(np.int64), ys.ravel().astype(np.int64), img.ravel()

    def sums(weights):
        s = np.zeros(nlab + 1, np.int64)
        np.add.at(s, idx, weights)
        return s
    n = sums(np.ones_like(idx, dtype=np.int64))
    ns = np.maximum(n, 1)
    if attribute == "area":
        return n.astype(np.float64)
    if attribute == "std":
        s1, s2 = sums(v), sums(v * v)
        return np.sqrt((ns * s2 - s1 * s1).astype(np.float64)) / ns.astype(np.float64)
    if attribute == "diagonal":
        big = np.iinfo(np.int64).max
        x0 = np.full(nlab + 1, big)
        y0 = np.full(nlab + 1, big)
        x1 = np.full(nlab + 1, -1)
        y1 = np.full(nlab + 1, -1)
        np.minimum.at(x0, idx, xs)
        np.minimum.at(y0, idx, ys)
        np.maximum.at(x1, idx, xs)
        np.maximum.at(y1, idx, ys)
        dx, dy = x1 - x0 + 1, y1 - y0 + 1
        return np.sqrt((dx * dx + dy * dy).astype(np.float64))
    if attribute == "inertia":
        sx, sy, sxx, syy = sums(xs), sums(ys), sums(xs * xs), sums(ys * ys)
        num = 6 * (ns * sxx - sx * sx + ns * syy - sy * sy) + ns * ns
        nf = ns.astype(np.float64)
        return num.astype(np.float64) / (6.0 * nf * nf * nf)
    raise ValueError(attribute)


def _openings_levelsets(img, valid, attribute, thresholds, connectivity):
    structure = ndimage.generate_binary_structure(2, 1 if connectivity == 4 else 2)
    nt = len(thresholds)
    t = np.asarray(thresholds, np.float64)
    out = np.zeros((nt,) + img.shape, np.int64)
    alive = np.ones((nt,) + img.shape, bool)  # every component containing p passed
    # X_k only changes at the image's levels (and X_0 = X_min = every valid pixel)
    for k in sorted({0} | {int(v) for v in np.unique(img[valid])}):
        X = valid & (img >= k)
        labels, nlab = ndimage.label(X, structure=structure)
        attr = _component_attributes(labels, nlab, img, attribute)
        passes = attr[labels][None] >= t[:, None, None]  # (nt, h, w)
        alive &= passes | ~X[None]
        ok = alive & X[None]
        out[ok] = k
    return [np.where(valid, out[j], 0) for j in range(nt)]


def levelset_profile(img, attribute, thresholds, connectivity=4, levels=256, valid=None):
    """(closings, openings) by threshold decomposition; masked pixels (valid False)
    take no part and come out as 0."""
    img = np.asarray(img).astype(np.int64)
    valid = np.ones(img.shape, bool) if valid is None else np.asarray(valid, bool)
    top = levels - 1
    openings = _openings_levelsets(img, valid, attribute, list(thresholds), connectivity)
    comp = np.where(valid, top - img, 0)
    closings = [np.where(valid, top - o, 0)
                for o in _openings_levelsets(comp, valid, attribute, list(thresholds),
                                             connectivity)]
    return closings, openings
