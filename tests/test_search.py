"""`hyprof train --search`: the profile chosen by spatially honest cross-validation.

The scene is built here from USGS library spectra (../shared/data/usgs): ten similar
materials (a random spectrum and its nearest neighbours by spectral angle) fill Voronoi
regions, mixed with background materials through a smooth random field, under a
fine-scale brightness texture and Gaussian noise. 20 random training pixels a class.

Checked:
- the search beats Gaussian-smoothed principal components + SVM, implemented here with
  SciPy and scikit-learn (the best of two smoothing widths, scored on the test pixels:
  a baseline favoured over the search, which sees only the training pixels);
- the folds never split a group of 8-connected training pixels of one class (from the
  fold map, against scipy.ndimage.label), and cover every training pixel;
- the model round trip: version 2 with the recipe, read back by classify; a model of an
  unknown version refused with a message naming it; train without --search still
  writes version 1;
- classify of the raw cube equals classify of the profile computed by the profile
  commands (`hyprof eadp`, `hyprof pca`) and stacked, and the GDAL driver's classify of
  the raw cube equals both;
- a fused model (version 3: members of version 2, a majority window) classifies as the
  rules say, implemented here pixel by pixel in Python on the members' own maps: the
  plurality vote (ties: the earliest member), then the 3x3 majority (window clipped at
  the edges, ties: the centre, then the first in row order); its probabilities are the
  members' shares; the GDAL driver gives the same map;
- the search's fusion report: the greedy order starts with the best candidate and holds
  every completed one, the chosen fusion is the most accurate (ties: fewer members, then
  no filter), and the model is that fusion; --fusion none keeps the best alone.
"""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from osgeo import gdal
from scipy import ndimage
from sklearn.decomposition import PCA
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC

from conftest import EXIT_USAGE, gdal_env, load_gdal_plugin, read_cube, run, run_ok, write_cube

# The library lies in ../shared/data beside the checkout (the project's layout), or in
# /work/shared/data for a worktree deeper down.
USGS = next((p / "usgs" / "s06av95a_envi.sli" for p in
             (Path(__file__).resolve().parents[2] / "shared" / "data", Path("/work/shared/data"))
             if (p / "usgs" / "s06av95a_envi.sli").is_file()), None)
# A small grid keeps the test short; the search and the baseline use the same one.
C = [1.0, 16.0, 256.0, 4096.0]
GAMMA = [2.0 ** -7, 2.0 ** -5, 2.0 ** -3, 2.0 ** -1, 2.0]
GRID = "C=%s,gamma=%s" % (",".join("%g" % c for c in C), ",".join("%g" % g for g in GAMMA))
RECIPES = ("eadp step=5 count=8;eadp step=20 count=8 + pca components=10;emp radii=1,2,3;"
           "eap attribute=area thresholds=4,9,16,36,64")
WINNER_PARTS = (["eadp", "--step", "20", "--count", "8"], ["pca", "--components", "10"])


def library():
    if USGS is None:
        pytest.skip("the USGS library (../shared/data/usgs) is not on this machine")
    lib = np.fromfile(USGS, "<f8").reshape(1365, 224)
    return lib[np.all((lib > 0) & (lib < 1.5), axis=1)]


def make_scene(size=96, nclass=10, regions=30, seed=0, noise=0.08):
    """(bands, rows, cols) float32 cube and the class map (1..nclass)."""
    rng = np.random.default_rng(seed)
    lib = library()
    unit = lib / np.linalg.norm(lib, axis=1, keepdims=True)
    first = rng.integers(len(lib))
    taken = [first]
    for i in np.argsort(-unit @ unit[first]):
        if len(taken) == nclass:
            break
        if all(unit[i] @ unit[j] < 0.99995 for j in taken):
            taken.append(i)
    spec = lib[taken]
    extra = lib[rng.choice(len(lib), 3, replace=False)]
    pts = rng.uniform(0, size, (regions, 2))
    yy, xx = np.mgrid[0:size, 0:size]
    d = (yy[..., None] - pts[:, 0]) ** 2 + (xx[..., None] - pts[:, 1]) ** 2
    gt = (np.arange(regions) % nclass)[np.argmin(d, axis=2)] + 1
    mix = ndimage.gaussian_filter(rng.standard_normal((size, size)), 3)
    mix = 0.35 * (mix - mix.min()) / np.ptp(mix)
    bright = 1 + 0.15 * ndimage.gaussian_filter(rng.standard_normal((size, size)), 1.0) / 0.28
    other = extra[rng.integers(0, len(extra), (size, size))]
    cube = (1 - mix[..., None]) * spec[gt - 1] + mix[..., None] * other
    cube *= bright[..., None]
    cube += noise * rng.standard_normal(cube.shape)
    return np.moveaxis(cube, 2, 0).astype(np.float32), gt.astype(np.uint16)


def split(gt, per_class=20, seed=0):
    rng = np.random.default_rng(seed + 100)
    train = np.zeros_like(gt)
    for c in np.unique(gt):
        train.flat[rng.choice(np.flatnonzero(gt == c), per_class, replace=False)] = c
    return train, np.where(train > 0, 0, gt).astype(np.uint16)


def smoothed_pcs_oa(cube, train, test, sigma, ncomp=10):
    """The baseline: PCA, a Gaussian filter on every PC, [-1, 1] scaling, RBF SVM by
    GridSearchCV (same grid, 5 stratified folds)."""
    B, H, W = cube.shape
    pcs = PCA(ncomp).fit_transform(cube.reshape(B, -1).T).T.reshape(ncomp, H, W)
    x = np.stack([ndimage.gaussian_filter(p, sigma) for p in pcs]).reshape(ncomp, -1).T
    tr, te = train.ravel() > 0, test.ravel() > 0
    x = MinMaxScaler((-1, 1)).fit(x[tr]).transform(x)
    g = GridSearchCV(SVC(kernel="rbf"), {"C": C, "gamma": GAMMA},
                     cv=StratifiedKFold(5, shuffle=True, random_state=0))
    g.fit(x[tr], train.ravel()[tr])
    return float((g.predict(x[te]) == test.ravel()[te]).mean())


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    d = tmp_path_factory.mktemp("search")
    cube, gt = make_scene()
    train, test = split(gt)
    write_cube(d / "cube.tif", cube)
    write_cube(d / "train.tif", train[None], gdal.GDT_UInt16)
    r = run_ok("train", "--backend", "cpu", "--labels", d / "train.tif", "--search", RECIPES,
               "--fusion", "none", "--grid", GRID, "--search-report", d / "report.json",
               "--fold-map", d / "folds.tif", d / "cube.tif", d / "search.model")
    auto = run_ok("train", "--backend", "cpu", "--labels", d / "train.tif", "--search", RECIPES,
                  "--grid", GRID, "--search-report", d / "auto.json", d / "cube.tif",
                  d / "auto.model")
    return {"dir": d, "cube": cube, "gt": gt, "train": train, "test": test, "stdout": r.stdout,
            "auto_stdout": auto.stdout}


@pytest.mark.parametrize("model", ["search.model", "auto.model"])
def test_search_beats_smoothed_pcs(scene, model):
    """The best profile alone (--fusion none) and the search's own choice (--fusion auto)."""
    d = scene["dir"]
    out = d / ("map_" + model.replace(".model", ".tif"))
    run_ok("classify", "--backend", "cpu", "--model", d / model, d / "cube.tif", out)
    m = read_cube(out)[0]
    te = scene["test"] > 0
    oa = float((m[te] == scene["test"][te]).mean())
    base = max(smoothed_pcs_oa(scene["cube"], scene["train"], scene["test"], s) for s in (1, 2))
    out = scene["stdout"] if model == "search.model" else scene["auto_stdout"]
    assert oa > base, "search OA %.4f, smoothed PCs + SVM %.4f\n%s" % (oa, base, out)


def test_report_lists_candidates(scene):
    rep = json.loads((scene["dir"] / "report.json").read_text())
    assert rep["folds"] == 5 and rep["training_pixels"] == 200
    assert "8-connected" in rep["fold_method"]
    assert [c["recipe"] for c in rep["candidates"]] == RECIPES.split(";")
    done = [c for c in rep["candidates"] if not c["stopped_early"]]
    best = max(done, key=lambda c: c["accuracy"])
    assert rep["best"] == best["recipe"] == "eadp step=20 count=8 + pca components=10"
    for c in rep["candidates"]:
        assert not c["skipped"]
        assert (c["accuracy"] is None) == c["stopped_early"]
        assert c["stopped_early"] == (c["folds_run"] < 5)
    assert "search over 4 candidates" in scene["stdout"]


def check_folds(folds, labels, k):
    """Every labelled pixel has a fold 1..k, unlabelled pixels none, and each
    8-connected group of one class lies in one fold."""
    assert np.all((folds > 0) == (labels > 0))
    assert folds.max() <= k
    for c in np.unique(labels[labels > 0]):
        comp, n = ndimage.label(labels == c, structure=np.ones((3, 3)))
        for g in range(1, n + 1):
            assert len(np.unique(folds[comp == g])) == 1, (c, g)


def test_folds_random_pixels(scene):
    folds = read_cube(scene["dir"] / "folds.tif")[0].astype(int)
    check_folds(folds, scene["train"], 5)
    # single pixels (mostly): stratified, 4 a class a fold
    for c in range(1, 11):
        counts = np.bincount(folds[scene["train"] == c], minlength=6)[1:]
        assert counts.max() - counts.min() <= 3


def test_folds_never_split_polygons(scene, tmp_path):
    """Training squares of 3x3 pixels, some touching: no group on both sides."""
    gt = scene["gt"]
    rng = np.random.default_rng(5)
    labels = np.zeros_like(gt)
    for y, x in rng.integers(1, 93, (120, 2)):
        labels[y - 1:y + 2, x - 1:x + 2] = gt[y, x]
    labels[gt != labels] = 0  # only pixels of the square's class stay
    write_cube(tmp_path / "blocks.tif", labels[None], gdal.GDT_UInt16)
    r = run_ok("train", "--backend", "cpu", "--labels", tmp_path / "blocks.tif", "--search",
               "pca components=5", "--grid", "C=16,gamma=0.5", "--fold-map",
               tmp_path / "folds.tif", "--search-report", tmp_path / "r.json",
               scene["dir"] / "cube.tif", tmp_path / "m.model")
    folds = read_cube(tmp_path / "folds.tif")[0].astype(int)
    check_folds(folds, labels, 5)
    rep = json.loads((tmp_path / "r.json").read_text())
    ngroups = sum(ndimage.label(labels == c, structure=np.ones((3, 3)))[1]
                  for c in np.unique(labels[labels > 0]))
    assert rep["groups"] == ngroups and rep["largest_group"] > 1, r.stdout


def test_model_round_trip(scene, tmp_path):
    d = scene["dir"]
    text = (d / "search.model").read_text().splitlines()
    assert text[0] == "hyprof-classifier 2"
    assert "input_bands 224" in text
    assert "profile eadp step=20 count=8 + pca components=10" in text
    # An unknown version is refused, naming it.
    bad = tmp_path / "v4.model"
    bad.write_text("\n".join(["hyprof-classifier 4"] + text[1:]) + "\n")
    r = run("classify", "--model", bad, d / "cube.tif", tmp_path / "x.tif")
    assert r.returncode == EXIT_USAGE and "version '4'" in r.stderr
    # Without --search the model stays version 1 (older readers keep reading it).
    run_ok("train", "--labels", d / "train.tif", "--grid", "C=16,gamma=0.5", d / "cube.tif",
           tmp_path / "plain.model")
    assert (tmp_path / "plain.model").read_text().startswith("hyprof-classifier 1\n")
    # --search-report without --search is a usage error.
    r = run("train", "--labels", d / "train.tif", "--search-report", tmp_path / "r.json",
            d / "cube.tif", tmp_path / "m2.model")
    assert r.returncode == EXIT_USAGE and "--search-report needs --search" in r.stderr


def test_classify_raw_equals_profile_then_classify(scene, tmp_path):
    d = scene["dir"]
    parts = []
    for i, args in enumerate(WINNER_PARTS):
        run_ok(args[0], "--backend", "cpu", *args[1:], d / "cube.tif", tmp_path / ("p%d.tif" % i))
        parts.append(read_cube(tmp_path / ("p%d.tif" % i), np.float32))
    write_cube(tmp_path / "profile.tif", np.concatenate(parts), gdal.GDT_Float32)
    run_ok("classify", "--backend", "cpu", "--model", d / "search.model", tmp_path / "profile.tif",
           tmp_path / "from_profile.tif")
    run_ok("classify", "--backend", "cpu", "--model", d / "search.model", d / "cube.tif",
           tmp_path / "from_raw.tif")
    a = read_cube(tmp_path / "from_profile.tif")[0]
    b = read_cube(tmp_path / "from_raw.tif")[0]
    assert np.array_equal(a, b)
    ds = gdal.Open(str(tmp_path / "from_raw.tif"))
    assert ds.GetMetadataItem("HYPROF_PROFILE") == "eadp step=20 count=8 + pca components=10"
    # The GDAL driver's classify of the raw cube.
    load_gdal_plugin()
    desc = tmp_path / "map.hyprof"
    desc.write_text(json.dumps({"operation": "classify",
                                "parameters": {"model": str(d / "search.model")},
                                "input": str(d / "cube.tif")}))
    drv = gdal.Open(str(desc)).ReadAsArray()
    assert np.array_equal(drv, b)


def test_cancel_during_search(scene, tmp_path):
    """SIGINT once the search reports progress: exit 3, no model, no report."""
    import signal
    import subprocess
    from conftest import EXIT_CANCELLED, exe_path
    d = scene["dir"]
    cmd = [exe_path(), "train", "--backend", "cpu", "--progress", "json", "--threads", "1",
           "--labels", str(d / "train.tif"), "--search", RECIPES, "--search-report",
           str(tmp_path / "r.json"), str(d / "cube.tif"), str(tmp_path / "m.model")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent = False
    try:
        for line in p.stderr:
            if not sent and '"progress"' in line and json.loads(line)["progress"] > 0.2:
                p.send_signal(signal.SIGINT)
                sent = True
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert sent and rc == EXIT_CANCELLED
    assert sorted(x.name for x in tmp_path.iterdir()) == []


def vote_oracle(maps):
    """The plurality of the members' labels, pixel by pixel (ties: the class of the
    earliest member among the tied; 0 where no member has a class)."""
    out = np.zeros_like(maps[0])
    for p in np.ndindex(out.shape):
        labels = [int(m[p]) for m in maps if m[p] > 0]
        if labels:
            count = Counter(labels)
            top = max(count.values())
            out[p] = next(v for v in labels if count[v] == top)
    return out


def majority_oracle(m):
    """The 3x3 majority of every labelled pixel, the window clipped at the edges (ties:
    the centre's class, then the first in row order)."""
    H, W = m.shape
    out = m.copy()
    for y in range(H):
        for x in range(W):
            if m[y, x] == 0:
                continue
            win = [int(v) for v in m[max(y - 1, 0):y + 2, max(x - 1, 0):x + 2].ravel() if v]
            count = Counter(win)
            top = max(count.values())
            out[y, x] = m[y, x] if count[int(m[y, x])] == top else next(
                v for v in win if count[v] == top)
    return out


def fused_text(members, majority):
    """A version 3 model over version 2 member files (docs/search.md's layout)."""
    texts = [Path(p).read_text().splitlines() for p in members]
    first = texts[0]
    nclasses = int(next(l for l in first if l.startswith("classes ")).split()[1])
    at = first.index("classes %d" % nclasses)
    head = first[at:at + nclasses + 3]  # classes, class lines, train_pixels, cv_accuracy
    bands = next(l for l in first if l.startswith("input_bands "))
    lines = ["hyprof-classifier 3", "fusion vote", "members %d" % len(members),
             "majority %d" % majority] + head + [bands]
    for j, t in enumerate(texts):
        lines += ["member %d" % (j + 1)] + t
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def members(scene):
    """Three single-profile models (version 2) of the scene, and their maps."""
    d = scene["dir"]
    out = []
    for j, recipe in enumerate(RECIPES.split(";")[:3]):
        model = d / ("member%d.model" % j)
        run_ok("train", "--backend", "cpu", "--labels", d / "train.tif", "--search", recipe,
               "--fusion", "none", "--grid", GRID, d / "cube.tif", model)
        run_ok("classify", "--backend", "cpu", "--model", model, d / "cube.tif",
               d / ("member%d.tif" % j))
        out.append((model, read_cube(d / ("member%d.tif" % j))[0].astype(np.int64)))
    return out


def test_fused_model_classifies_by_its_rules(scene, members, tmp_path):
    d = scene["dir"]
    maps = [m for _, m in members]
    assert np.any((maps[0] != maps[1]) & (maps[1] == maps[2])), "the vote must matter here"
    fused = tmp_path / "fused.model"
    fused.write_text(fused_text([p for p, _ in members], 3))
    run_ok("classify", "--backend", "cpu", "--model", fused, "--probabilities",
           tmp_path / "p.tif", d / "cube.tif", tmp_path / "fused.tif")
    voted = vote_oracle(maps)
    want = majority_oracle(voted)
    got = read_cube(tmp_path / "fused.tif")[0]
    assert np.array_equal(got, want)
    assert np.any(want != voted), "the majority filter must matter here"
    prob = read_cube(tmp_path / "p.tif", np.float32)
    for k in range(prob.shape[0]):
        share = sum((m == k + 1) for m in maps).astype(np.float32) / np.float32(3)
        assert np.array_equal(prob[k], share)
    ds = gdal.Open(str(tmp_path / "fused.tif"))
    assert ds.GetMetadataItem("HYPROF_PROFILE").startswith("vote of 3: eadp step=5 count=8; ")
    # Without the filter: the vote alone. Read back and written again: the same text.
    plain = tmp_path / "vote.model"
    plain.write_text(fused_text([p for p, _ in members], 0))
    run_ok("classify", "--backend", "cpu", "--model", plain, d / "cube.tif", tmp_path / "v.tif")
    assert np.array_equal(read_cube(tmp_path / "v.tif")[0], voted)
    # The GDAL driver's classify of the raw cube.
    load_gdal_plugin()
    desc = tmp_path / "map.hyprof"
    desc.write_text(json.dumps({"operation": "classify", "parameters": {"model": str(fused)},
                                "input": str(d / "cube.tif")}))
    assert np.array_equal(gdal.Open(str(desc)).ReadAsArray(), want)
    # Features instead of the raw cube: refused, naming the band counts.
    r = run("classify", "--model", fused, d / "member0.tif", tmp_path / "x.tif")
    assert r.returncode != 0 and "fuses 3 profiles of 224-band cubes" in r.stderr
    assert not (tmp_path / "x.tif").exists()


def test_fused_model_file_errors(scene, members, tmp_path):
    """A member of another version, an even window, a missing member: refused."""
    good = fused_text([p for p, _ in members], 3)
    for what, text in [
            ("version 2", good.replace("member 2\nhyprof-classifier 2", "member 2\nhyprof-classifier 1")),
            ("odd", good.replace("majority 3", "majority 4")),
            ("member", good.replace("members 3", "members 4"))]:
        bad = tmp_path / "bad.model"
        bad.write_text(text)
        r = run("classify", "--model", bad, scene["dir"] / "cube.tif", tmp_path / "x.tif")
        assert r.returncode == EXIT_USAGE and what in r.stderr, (what, r.stderr)
        assert not (tmp_path / "x.tif").exists()


def test_search_fusion_report(scene, tmp_path):
    d = scene["dir"]
    rep = json.loads((d / "auto.json").read_text())
    done = [c["recipe"] for c in rep["candidates"] if c["accuracy"] is not None]
    order = rep["selection_order"]
    assert order[0] == rep["best"] and sorted(order) == sorted(done)
    fus = rep["fusions"]
    assert [(f["members"], f["majority"]) for f in fus] == [
        (m, s) for m in range(1, len(order) + 1) for s in (0, 3)]
    chosen = [f for f in fus if f["chosen"]]
    assert len(chosen) == 1
    top = max(f["accuracy"] for f in fus)
    assert chosen[0] is next(f for f in fus if f["accuracy"] == top)
    text = (d / "auto.model").read_text().splitlines()
    if chosen[0]["members"] == 1 and chosen[0]["majority"] == 0:
        assert text[0] == "hyprof-classifier 2" and "profile " + order[0] in text
    else:
        assert text[0] == "hyprof-classifier 3"
        assert "members %d" % chosen[0]["members"] in text
        assert "majority %d" % chosen[0]["majority"] in text
        assert [l[len("profile "):] for l in text if l.startswith("profile ")] == \
            order[:chosen[0]["members"]]
    assert "decision fusion" in scene["auto_stdout"]
    # --fusion none: the best alone, whatever the fusions scored.
    run_ok("train", "--backend", "cpu", "--labels", d / "train.tif", "--search", RECIPES,
           "--fusion", "none", "--grid", GRID, d / "cube.tif", tmp_path / "n.model")
    assert (tmp_path / "n.model").read_text() == (d / "search.model").read_text()
