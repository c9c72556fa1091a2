"""Classification rows of run_bench.py (--ops classify,train).

Data (bench/data, made by prepare_data.py on a machine with GDAL, LIBSVM and the
hyprof CLI): the EADP features of Indian Pines (63 bands), the EADP paper's
Table I training labels, and the SVM trained on them with the DESIGN.md grid.

  classify  the features mirrored to a Pavia Centre-size stack (1096 x 715 x 63);
            hyprof_bench --op classify with that model, per backend; labels of
            every backend compared with the CPU's (LIBSVM's). Peer: scikit-learn
            SVC (libsvm inside) fitted on the same scaled training pixels with the
            model's C and gamma, predict() timed on the same stack, its label
            agreement with hyprof's reported.
  train     hyprof_bench --op train on the 145 x 145 x 63 features: the SVM with
            the default grid (5-fold cross-validation, 110 grid points; needs
            LIBSVM, so CPU builds with it only) and the ELM (500 neurons). Peer:
            scikit-learn GridSearchCV(SVC(kernel='rbf'), the same grid,
            StratifiedKFold(5), n_jobs = threads) on the same scaled pixels.
"""
import os
import time

import numpy as np

GRID_C = [2.0 ** k for k in range(-5, 16, 2)]
GRID_GAMMA = [2.0 ** k for k in range(-15, 4, 2)]
CLASSIFY_SCENE = ("pavia_c", 1096, 715)


def _model_facts(path):
    """Scaling, C (not stored: the report line) and gamma of a hyprof model."""
    lines = open(path).read().split("\n")
    get = lambda k: next(l for l in lines if l.startswith(k + " ")).split()[1:]
    lo, hi = np.array(get("min"), float), np.array(get("max"), float)
    gamma = float(get("gamma")[0])
    return lo, hi, gamma


def _scale(x, lo, hi):
    rng = hi - lo
    return np.where(rng > 0, -1.0 + 2.0 * (x - lo) / np.where(rng > 0, rng, 1.0), 0.0)


def _load(data_dir):
    paths = [os.path.join(data_dir, n) for n in
             ("indian_pines_eadp.npy", "indian_pines_train.npy", "indian_pines_eadp.model")]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        return None, f"classification rows skipped: {missing} missing (run prepare_data.py " \
                     "with a built hyprof CLI and LIBSVM, and carry bench/data)"
    return (np.load(paths[0]).astype(np.float32), np.load(paths[1]), paths[2]), None


def _sklearn():
    try:
        from sklearn.model_selection import GridSearchCV, StratifiedKFold
        from sklearn.svm import SVC
        return SVC, GridSearchCV, StratifiedKFold
    except ImportError:
        return None


def _training_pixels(feats, labels, lo, hi):
    b = feats.shape[0]
    idx = np.flatnonzero(labels.ravel() > 0)
    x = feats.reshape(b, -1).T[idx].astype(np.float64)
    return _scale(x, lo, hi), labels.ravel()[idx].astype(np.int64)


def bench_classify(args, exe, tmpdir, rows, notes, hyprof_row, mirror_cube, time_call, median,
                   _run):
    data, why = _load(args.data_dir)
    if data is None:
        notes.append(why)
        return
    feats, labels, model = data
    name, w, h = CLASSIFY_SCENE
    b = feats.shape[0]
    cube = mirror_cube(feats, w, h, b)
    cube_path = os.path.join(tmpdir, "classify.f32")
    cube.tofile(cube_path)
    base = {"scene": name, "width": w, "height": h, "bands": b, "source": "indian_pines EADP"}
    params = {"model": os.path.basename(model)}
    print(f"[classify] {w}x{h}x{b} EADP features mirrored from Indian Pines, model {model}",
          flush=True)
    outs = {}
    for backend in args.backend_list:
        time.sleep(args.settle_s)
        out = os.path.join(tmpdir, f"classify.{backend}.u16")
        rec = _run(exe, "classify", backend, cube_path, cube.shape, args, ["--model", model], out)
        row = hyprof_row(base, "classify", params, backend, rec, args, notes)
        for k in ("classes", "model_size"):
            row[k] = rec.get(k)
        if os.path.exists(out):
            outs[backend] = np.fromfile(out, dtype=np.uint16)
            os.remove(out)
        rows.append(row)
        if row.get("median_s") is not None:
            print(f"  classify {row['impl']}: median {row['median_s']:.4g} s", flush=True)
    if "cpu" in outs:
        for backend, lab in outs.items():
            diff = int((lab != outs["cpu"]).sum())
            for r in rows:
                if r.get("op") == "classify" and r.get("impl") == f"hyprof-{backend}":
                    r["labels_differing_from_cpu"] = diff
            if backend != "cpu":
                notes.append(f"classify hyprof-{backend}: {diff} label(s) differ from the "
                             "CPU's (LIBSVM's)")
    if not args.no_peers:
        _sklearn_predict(cube, feats, labels, model, base, params, args, rows, notes, outs,
                         time_call, median)
    os.remove(cube_path)


def _sklearn_predict(cube, feats, labels, model, base, params, args, rows, notes, outs,
                     time_call, median):
    sk = _sklearn()
    if sk is None:
        notes.append("classify: scikit-learn missing, no SVC peer")
        return
    SVC = sk[0]
    lo, hi, gamma = _model_facts(model)
    c = _model_c(model)
    x, y = _training_pixels(feats, labels, lo, hi)
    svc = SVC(C=c, gamma=gamma, kernel="rbf", tol=1e-3, cache_size=100, shrinking=True)
    t = time.perf_counter()
    svc.fit(x, y)
    fit_s = time.perf_counter() - t
    b = cube.shape[0]
    X = _scale(cube.reshape(b, -1).T.astype(np.float64), lo, hi)
    times, pred = time_call(lambda: svc.predict(X), min(args.repeat, 2), args.peer_budget_s)
    row = dict(base, op="classify", **params, impl="sklearn SVC.predict (libsvm, 1 thread)",
               kind="peer", threads=1, median_s=median(times), min_s=min(times),
               times_s=times, repeat=len(times), fit_s=fit_s)
    if "cpu" in outs:
        row["labels_differing_from_cpu"] = int((pred.astype(np.uint16) != outs["cpu"]).sum())
        notes.append(f"classify sklearn SVC: {row['labels_differing_from_cpu']} label(s) differ "
                     "from hyprof-cpu's (same data, C and gamma; sklearn orders the classes and "
                     "solves its own dual, so a few may differ)")
    rows.append(row)
    print(f"  classify sklearn SVC: median {row['median_s']:.4g} s", flush=True)


def _model_c(model):
    """C is not part of LIBSVM's model file: hyprof's model keeps it (svm_c)."""
    for line in open(model):
        if line.startswith("svm_c "):
            return float(line.split()[1])
    return float("nan")


def bench_train(args, exe, tmpdir, rows, notes, hyprof_row, time_call, median, _run):
    data, why = _load(args.data_dir)
    if data is None:
        if why not in notes:
            notes.append(why)
        return
    feats, labels, model = data
    b, h, w = feats.shape
    cube_path = os.path.join(tmpdir, "train.f32")
    lab_path = os.path.join(tmpdir, "train_labels.f32")
    feats.tofile(cube_path)
    labels.astype(np.float32).tofile(lab_path)
    base = {"scene": "indian_pines", "width": w, "height": h, "bands": b,
            "source": "indian_pines EADP"}
    print(f"[train] {w}x{h}x{b} EADP features, {(labels > 0).sum()} training pixels", flush=True)
    for clf in ("svm", "elm"):
        params = {"classifier": clf, "grid": "default" if clf == "svm" else "-"}
        time.sleep(args.settle_s)
        rec = _run(exe, "train", "cpu", cube_path, feats.shape, args,
                   ["--labels", lab_path, "--classifier", clf], repeat=1 if clf == "svm" else 3)
        # The ELM is its own op: no peer trains one, and the SVM peer is no yardstick for it.
        op = "train" if clf == "svm" else "train-elm"
        row = hyprof_row(base, op, params, "cpu", rec, args, notes)
        for k in ("cv_accuracy", "best_c", "best_gamma", "model_size"):
            row[k] = rec.get(k)
        rows.append(row)
        if row.get("median_s") is not None:
            print(f"  train {clf} {row['impl']}: {row['median_s']:.4g} s "
                  f"(C {rec.get('best_c')}, gamma {rec.get('best_gamma')}, "
                  f"CV accuracy {rec.get('cv_accuracy')})", flush=True)
    os.remove(cube_path)
    os.remove(lab_path)
    if args.no_peers:
        return
    sk = _sklearn()
    if sk is None:
        notes.append("train: scikit-learn missing, no GridSearchCV peer")
        return
    SVC, GridSearchCV, StratifiedKFold = sk
    lo, hi, _ = _model_facts(model)
    x, y = _training_pixels(feats, labels, lo, hi)
    gs = GridSearchCV(SVC(kernel="rbf"), {"C": GRID_C, "gamma": GRID_GAMMA},
                      cv=StratifiedKFold(5, shuffle=True, random_state=1), n_jobs=args.threads)
    t = time.perf_counter()
    gs.fit(x, y)
    s = time.perf_counter() - t
    rows.append(dict(base, op="train", classifier="svm", grid="default",
                     impl="sklearn GridSearchCV(SVC)", kind="peer", threads=args.threads,
                     median_s=s, min_s=s, times_s=[s], repeat=1,
                     cv_accuracy=float(gs.best_score_), best_c=gs.best_params_["C"],
                     best_gamma=gs.best_params_["gamma"]))
    print(f"  train sklearn GridSearchCV: {s:.4g} s (C {gs.best_params_['C']}, gamma "
          f"{gs.best_params_['gamma']}, CV accuracy {gs.best_score_:.4f})", flush=True)
