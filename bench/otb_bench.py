#!/usr/bin/python3
"""Orfeo ToolBox against hyprof, command line against command line, on the same
GeoTIFFs on the same machine.

Each row of ROWS names the OTB application(s) and the hyprof command(s) that do
the same job; both are run --repeat times, alternating, and the medians of their
wall times (process start to exit, reading and writing the files included) are
compared. Where the methods coincide the outputs are compared too: PCA up to the
sign of each component, VCA by the spectral angles between the two endmember
sets, unconstrained abundances on OTB's own endmembers, the SVM class maps
pixel by pixel (same training pixels, C and gamma), and the confusion matrices.

    /usr/bin/python3 bench/otb_bench.py [--scene pavia_c] [--repeat 3] [--threads 2]

Needs GDAL's Python bindings (/usr/bin/python3), NumPy, otb-bin (`apt-get install
otb-bin`) and a built hyprof (build*/cli/hyprof). The hyperspectral scene is
mirrored from bench/data as run_bench.py makes it and written as an Int16 GeoTIFF;
the classification rows use samples/indian_pines*.tif. Appends a section to
bench/results.md (--out-md) with the machine, the load average and the table.
"""
import argparse
import csv
import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from osgeo import gdal, ogr, osr

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run_bench  # noqa: E402

run_bench.np = np
gdal.UseExceptions()


# ------------------------------------------------------------------ the data

def write_tif(path, cube, dtype=gdal.GDT_Int16, nodata=None):
    """A (bands, height, width) array as a tiled GeoTIFF with a UTM CRS."""
    b, h, w = cube.shape
    ds = gdal.GetDriverByName("GTiff").Create(path, w, h, b, dtype,
                                              ["TILED=YES", "INTERLEAVE=BAND"])
    ds.SetGeoTransform([500000.0, 1.3, 0, 4500000.0, 0, -1.3])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32632)
    ds.SetProjection(srs.ExportToWkt())
    for i in range(b):
        band = ds.GetRasterBand(i + 1)
        if nodata is not None:
            band.SetNoDataValue(nodata)
        band.WriteArray(cube[i])
    ds = None


def read(path):
    ds = gdal.Open(path)
    return ds.ReadAsArray().astype(np.float64).reshape(ds.RasterCount, ds.RasterYSize,
                                                       ds.RasterXSize)


def labels_to_points(raster, path, field="class"):
    """Every labelled pixel of a label raster as a point at its centre (GeoPackage)."""
    ds = gdal.Open(raster)
    lab = ds.GetRasterBand(1).ReadAsArray()
    gt = ds.GetGeoTransform()
    drv = ogr.GetDriverByName("GPKG")
    if os.path.exists(path):
        drv.DeleteDataSource(path)
    out = drv.CreateDataSource(path)
    srs = osr.SpatialReference()
    srs.ImportFromWkt(ds.GetProjection())
    lyr = out.CreateLayer("samples", srs, ogr.wkbPoint)
    lyr.CreateField(ogr.FieldDefn(field, ogr.OFTInteger))
    lyr.StartTransaction()
    for y, x in zip(*np.nonzero(lab)):
        f = ogr.Feature(lyr.GetLayerDefn())
        f.SetField(field, int(lab[y, x]))
        pt = ogr.Geometry(ogr.wkbPoint)
        pt.AddPoint_2D(gt[0] + (x + 0.5) * gt[1], gt[3] + (y + 0.5) * gt[5])
        f.SetGeometry(pt)
        lyr.CreateFeature(f)
    lyr.CommitTransaction()
    out = None


def make_data(args, tmp):
    """The files every row reads, and the values the rows' commands use."""
    w, h, b, src = run_bench.SCENES[args.scene]
    cube = run_bench.mirror_cube(run_bench.load_source(args.data_dir, src), w, h, b)
    scale = 10000.0 / max(float(np.abs(cube).max()), 1e-30) if cube.max() <= 1.5 else 1.0
    cube = np.clip(np.rint(cube * scale), -32768, 32767).astype(np.int16)
    d = {"tmp": tmp, "k": str(args.components), "p": str(args.endmembers),
         "cube": os.path.join(tmp, f"{args.scene}.tif"), "band": os.path.join(tmp, "band1.tif"),
         "threads": str(args.threads), "ram": str(args.ram)}
    write_tif(d["cube"], cube)
    write_tif(d["band"], cube[:1])
    samples = os.path.join(ROOT, "samples")
    d["feat"] = os.path.join(samples, "indian_pines.tif")
    d["test"] = os.path.join(samples, "indian_pines_test.tif")
    d["train_vec"] = os.path.join(tmp, "train.gpkg")
    labels_to_points(os.path.join(samples, "indian_pines_train.tif"), d["train_vec"])
    feat = read(d["feat"])
    d["C"] = "100"
    d["gamma"] = "%.6g" % (1.0 / (feat.shape[0] * feat.var()))  # scikit-learn's 'scale'
    d["scene_desc"] = f"{args.scene} {w}x{h}x{b} Int16"
    return d


# ------------------------------------------------------ comparing the outputs

def cmp_pca(d):
    """Largest difference of the components up to sign, over the largest |value|
    of hyprof's (each OTB component centred first: it may keep an offset)."""
    a, o = read(f"{d['tmp']}/hy_pca.tif"), read(f"{d['tmp']}/otb_pca.tif")
    worst = 0.0
    for k in range(a.shape[0]):
        x, y = a[k].ravel(), o[k].ravel() - o[k].mean()
        s = 1.0 if np.dot(x - x.mean(), y) >= 0 else -1.0
        worst = max(worst, float(np.max(np.abs(x - x.mean() - s * y)) / np.max(np.abs(x))))
    return f"PCs equal up to sign: max diff {worst:.1e} of max |PC|"


def otb_endmembers(path):
    """OTB's endmember image (p pixels of B bands) as a B x p array."""
    e = read(path)
    return e.reshape(e.shape[0], -1)


def cmp_vca(d):
    """Spectral angles from each OTB endmember to the nearest of hyprof's; then
    hyprof's ucls abundances on OTB's endmembers against OTB's abundances."""
    E = otb_endmembers(f"{d['tmp']}/otb_endm.tif")
    with open(f"{d['tmp']}/hy_unmix.csv") as f:
        H = np.array([r[2:] for r in list(csv.reader(f))[1:]], dtype=np.float64)
    cos = (E / np.linalg.norm(E, axis=0)).T @ (H / np.linalg.norm(H, axis=0))
    ang = np.degrees(np.arccos(np.clip(cos.max(axis=1), -1, 1)))
    csv_path = f"{d['tmp']}/otb_endm.csv"
    with open(csv_path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["band", "wavelength_nm"] + [f"E{i + 1}" for i in range(E.shape[1])])
        for b in range(E.shape[0]):
            wr.writerow([b + 1, float(b + 1)] + ["%.17g" % v for v in E[b]])
    out = f"{d['tmp']}/hy_on_otb.tif"
    run([d["hyprof"], "unmix", "--backend", "cpu", "--overwrite", "--model", csv_path,
         "--abundances", "ucls", d["cube"], out])
    a, o = read(out)[:E.shape[1]], read(f"{d['tmp']}/otb_abund.tif")
    rel = float(np.max(np.abs(a - o)) / np.max(np.abs(o)))
    return (f"VCA: angle to the nearest hyprof endmember median {np.median(ang):.1f}, "
            f"max {ang.max():.1f} deg (random starts differ); ucls on OTB's endmembers: "
            f"max diff {rel:.1e} of max |abundance|")


def cmp_maps(d):
    a, o = read(f"{d['tmp']}/hy_map.tif")[0], read(f"{d['tmp']}/otb_map.tif")[0]
    return f"class maps agree on {100.0 * np.mean(a == o):.2f} % of pixels"


def cmp_confusion(d):
    rep = json.loads(d["assess_json"])
    m = np.array(rep["confusion"])
    rows = [r for r in csv.reader(open(f"{d['tmp']}/otb_cm.csv")) if r and not r[0].startswith("#")]
    o = np.array(rows, dtype=np.int64)
    same = m.shape == o.shape and bool(np.all(m == o))
    return f"confusion matrices {'identical' if same else 'differ'} ({m.shape[0]} classes)"


# ------------------------------------------------------------------- the rows

OTB_PCA = ["otbcli_DimensionalityReduction", "-in", "{cube}", "-out", "{tmp}/otb_pca.tif",
           "float", "-method", "pca", "-nbcomp", "{k}", "-method.pca.whiten", "false",
           "-ram", "{ram}"]
OTB_MP = ["otbcli_MorphologicalProfilesAnalysis", "-in", "{band}", "-channel", "1",
          "-structype", "ball", "-size", "4", "-radius", "1", "-step", "2", "-ram", "{ram}"]
HY = ["{hyprof}", "{op}", "--backend", "cpu", "--threads", "{threads}", "--overwrite"]

ROWS = [
    ("PCA ({k} components)",
     [OTB_PCA],
     [HY + ["--components", "{k}", "{cube}", "{tmp}/hy_pca.tif"]], "pca", cmp_pca),
    ("morphological profiles of one band (disk radii 1,3,5,7, opening and closing)",
     [OTB_MP + ["-out", "{tmp}/otb_mp_open.tif", "float", "-profile", "opening"],
      OTB_MP + ["-out", "{tmp}/otb_mp_close.tif", "float", "-profile", "closing"]],
     [HY + ["--reduction", "none", "--radii", "1,3,5,7", "{band}", "{tmp}/hy_emp.tif"]], "emp",
     lambda d: "not compared: OTB's geodesic profiles on float values, hyprof's "
               "reconstruction profiles on 8-bit levels"),
    ("VCA ({p} endmembers) + unconstrained abundances",
     [["otbcli_VertexComponentAnalysis", "-in", "{cube}", "-ne", "{p}", "-outendm",
       "{tmp}/otb_endm.tif", "double", "-rand", "1"],
      ["otbcli_HyperspectralUnmixing", "-in", "{cube}", "-ie", "{tmp}/otb_endm.tif", "-out",
       "{tmp}/otb_abund.tif", "float", "-ua", "ucls"]],
     [HY + ["--endmembers", "{p}", "--extract", "vca", "--abundances", "ucls", "{cube}",
            "{tmp}/hy_unmix.tif"]], "unmix", cmp_vca),
    ("SVM training (LIBSVM RBF, fixed C and gamma, Indian Pines training pixels)",
     [["otbcli_TrainImagesClassifier", "-io.il", "{feat}", "-io.vd", "{train_vec}",
       "-io.out", "{tmp}/otb.model", "-sample.vfn", "class", "-sample.mt", "-1",
       "-sample.mv", "0", "-sample.bm", "0", "-sample.vtr", "0", "-classifier", "libsvm",
       "-classifier.libsvm.k", "rbf", "-classifier.libsvm.c", "{C}",
       "-classifier.libsvm.gamma", "{gamma}", "-rand", "1", "-ram", "{ram}"]],
     [HY + ["--samples", "{train_vec}", "--class-field", "class", "--scale", "none",
            "--grid", "C={C},gamma={gamma}", "{feat}", "{tmp}/hy.model"]], "train",
     lambda d: "same pixels, C and gamma, no feature scaling on either side"),
    ("SVM prediction (Indian Pines, 145x145x200)",
     [["otbcli_ImageClassifier", "-in", "{feat}", "-model", "{tmp}/otb.model", "-out",
       "{tmp}/otb_map.tif", "uint8", "-ram", "{ram}"]],
     [HY + ["--model", "{tmp}/hy.model", "{feat}", "{tmp}/hy_map.tif"]], "classify", cmp_maps),
    ("confusion matrix (hyprof's class map against the test pixels)",
     [["otbcli_ComputeConfusionMatrix", "-in", "{tmp}/hy_map.tif", "-out", "{tmp}/otb_cm.csv",
       "-ref", "raster", "-ref.raster.in", "{test}", "-ref.raster.nodata", "0",
       "-nodatalabel", "0"]],
     [["{hyprof}", "assess", "--json", "--reference", "{test}", "{tmp}/hy_map.tif"]], "assess",
     cmp_confusion),
]


# ------------------------------------------------------------------- running

def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, env=None):
    """Runs a command: (wall seconds, CPU seconds (user + system), stdout)."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt, dc = time.perf_counter() - t0, cpu_seconds() - c0
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {' | '.join(tail)}")
    return dt, dc, p.stdout


def fill(cmd, d, op):
    return [a.format(op=op, **d) for a in cmd]


def time_list(cmds, d, op, env):
    """Wall and CPU seconds of a command list run in order, and the last stdout."""
    wall = cpu = 0.0
    out = ""
    for c in cmds:
        dt, dc, out = run(fill(c, d, op), env)
        wall, cpu = wall + dt, cpu + dc
    return wall, cpu, out


def time_row(row, d, args, env):
    """Medians (wall, CPU) of the OTB and of the hyprof command lists, run alternately."""
    _, otb, hy, op, _ = row
    t = {"otb": [], "hy": []}
    for _ in range(args.repeat):
        for side, cmds in (("otb", otb), ("hy", hy)):
            wall, cpu, out = time_list(cmds, d, op, env)
            t[side].append((wall, cpu))
            if side == "hy" and op == "assess":
                d["assess_json"] = out
    med = lambda v, i: float(np.median([x[i] for x in v]))
    return dict(otb_s=med(t["otb"], 0), otb_cpu_s=med(t["otb"], 1), hyprof_s=med(t["hy"], 0),
                hyprof_cpu_s=med(t["hy"], 1))


def hyprof_exe(given):
    if given:
        return given
    cands = [os.path.join(ROOT, b, "cli", "hyprof") for b in sorted(os.listdir(ROOT))
             if b.startswith("build")]
    cands = [c for c in cands if os.access(c, os.X_OK)]
    if not cands:
        sys.exit("otb_bench: no build*/cli/hyprof: build the hyprof_cli target or pass --hyprof")
    return max(cands, key=os.path.getmtime)


def otb_version():
    p = subprocess.run(["otbcli_DimensionalityReduction", "-help"], capture_output=True,
                       text=True)
    for line in (p.stdout + p.stderr).splitlines():
        if "version" in line:
            return line.rsplit("version", 1)[-1].strip(" ,")
    return "?"


def git_commit():
    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    return p.stdout.strip() or "?"


def markdown(results, d, args, loads):
    cpu = run_bench.cpu_facts()["model"]
    lines = [f"\n## OTB against hyprof, command line, {datetime.datetime.now():%Y-%m-%d %H:%M}"
             f" — {platform.node()}, {cpu}, {args.threads} threads\n",
             f"Commit {git_commit()}, OTB {otb_version()}, hyprof `--backend cpu --threads "
             f"{args.threads}`, OTB `ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS={args.threads}` "
             f"`-ram {args.ram}`. Scene {d['scene_desc']} GeoTIFF (mirrored as run_bench.py "
             f"makes it); classification rows on samples/indian_pines*.tif. Wall times of "
             f"whole commands (start to exit, files read and written) and their CPU "
             f"seconds (user + system), medians of {args.repeat} alternating runs. Load average before {loads[0]}, after "
             f"{loads[1]} (the machine is shared).\n",
             "| row | OTB s | hyprof s | OTB / hyprof | goal 3x | CPU s OTB / hyprof | outputs |",
             "|---|---:|---:|---:|---|---:|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['name']} | — | — | — | — | — | failed: {r['error']} |")
            continue
        ratio = r["otb_s"] / r["hyprof_s"]
        goal = "met" if ratio >= 3.0 else f"misses ({ratio / 3.0:.0%} of it)"
        lines.append(f"| {r['name']} | {r['otb_s']:.2f} | {r['hyprof_s']:.2f} | {ratio:.1f}x "
                     f"| {goal} | {r['otb_cpu_s']:.2f} / {r['hyprof_cpu_s']:.2f} "
                     f"| {r['check']} |")
    return "\n".join(lines) + "\n"


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scene", default="pavia_c", choices=list(run_bench.SCENES))
    ap.add_argument("--components", type=int, default=7)
    ap.add_argument("--endmembers", type=int, default=9)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--ram", type=int, default=4096, help="OTB's -ram (MB)")
    ap.add_argument("--rows", default="",
                    help="comma-separated row numbers (1-based; 5 needs 4, 6 needs 5)")
    ap.add_argument("--hyprof", help="the hyprof executable (default: newest build*/cli/hyprof)")
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--out-md", default=os.path.join(HERE, "results.md"))
    args = ap.parse_args()
    if not shutil.which("otbcli_DimensionalityReduction"):
        sys.exit("otb_bench: otb-bin is not installed (apt-get install otb-bin)")
    tmp = tempfile.mkdtemp(prefix="otb_bench_")
    env = dict(os.environ, ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS=str(args.threads),
               OMP_NUM_THREADS=str(args.threads))
    env.pop("HYPROF_BACKEND", None)
    try:
        d = make_data(args, tmp)
        d["hyprof"] = hyprof_exe(args.hyprof)
        pick = {int(s) for s in args.rows.split(",") if s.strip()}
        loads, results = [loadavg()], []
        for i, row in enumerate(ROWS, 1):
            if pick and i not in pick:
                continue
            name = row[0].format(**d)
            try:
                r = dict(name=name, **time_row(row, d, args, env))
                r["check"] = row[4](d)
            except (RuntimeError, OSError, ValueError, KeyError) as e:
                r = dict(name=name, error=str(e)[:300])
            print(json.dumps(r), flush=True)
            results.append(r)
        loads.append(loadavg())
        md = markdown(results, d, args, loads)
        print(md)
        with open(args.out_md, "a") as f:
            f.write(md)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
