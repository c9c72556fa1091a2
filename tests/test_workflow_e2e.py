"""The analyst's workflow on the command line, end to end (issue 24's test).

Training polygons digitised in another CRS than the cube's, with the class as a
text field, go through `eadp -> train -> classify -> assess` against a vector
reference in a third CRS. Both vector files are made here from the bundled
Indian Pines split (samples/indian_pines_train.tif, indian_pines_test.tif): one
polygon per connected patch of a class (gdal.Polygonize), reprojected, the class
written as its name. A model trained from a text field numbers the classes in
sorted name order (1 Alfalfa, 2 Buildings-Grass-Trees-Drives, 3 Corn, ...), which
differs from the reference's numbers (2 Corn-notill): only matching by name gives
the right accuracy.

Oracles: the rasters the polygons were made from. The reference polygons cover
exactly the pixels of indian_pines_test.tif (a pixel belongs to the polygon that
contains its centre), so the overall accuracy matched by name is the share of
test pixels whose class-map name equals the test raster's category name,
computed here with NumPy.

Run: /usr/bin/python3 -m pytest -q tests/test_workflow_e2e.py
"""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from osgeo import gdal, ogr, osr

from conftest import INDIAN_PINES, ROOT, SAMPLES, exe_path, run_ok

ogr.UseExceptions()
osr.UseExceptions()

TRAIN = SAMPLES / "indian_pines_train.tif"
TEST = SAMPLES / "indian_pines_test.tif"
FIELD = "landcover"
GRID = "C=8,64,gamma=0.5,2"  # four pairs around the full grid's choice on this profile


def category_names(path):
    """{value: name} of a class raster's band 1, 0 ("no class") left out."""
    ds = gdal.Open(str(path))  # held: a band does not keep its dataset open
    band = ds.GetRasterBand(1)
    band.GetDescription()  # GDAL 3.6's GTiff loads the .aux.xml (the names) only on such a call
    names = band.GetCategoryNames() or []
    return {v: n for v, n in enumerate(names) if v and n}


def polygons(raster, out, epsg):
    """The labelled pixels of `raster` as polygons (one per connected patch of a
    class) in EPSG:`epsg`, the class as its category name in the field FIELD."""
    src = gdal.Open(str(raster))
    band = src.GetRasterBand(1)
    names = category_names(raster)
    mem = ogr.GetDriverByName("Memory").CreateDataSource("")
    src_srs = osr.SpatialReference(wkt=src.GetProjection())
    px = mem.CreateLayer("px", srs=src_srs, geom_type=ogr.wkbPolygon)
    px.CreateField(ogr.FieldDefn("value", ogr.OFTInteger))
    gdal.Polygonize(band, band.GetMaskBand(), px, 0)
    dst_srs = osr.SpatialReference()
    dst_srs.ImportFromEPSG(epsg)
    dst_srs.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    src_srs.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    to_dst = osr.CoordinateTransformation(src_srs, dst_srs)
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(out))
    lyr = ds.CreateLayer("fields", srs=dst_srs, geom_type=ogr.wkbPolygon)
    lyr.CreateField(ogr.FieldDefn(FIELD, ogr.OFTString))
    for f in px:
        g = f.GetGeometryRef().Clone()
        g.Transform(to_dst)
        out_f = ogr.Feature(lyr.GetLayerDefn())
        out_f.SetField(FIELD, names[f.GetField("value")])
        out_f.SetGeometry(g)
        lyr.CreateFeature(out_f)
    ds = None
    return out


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    d = tmp_path_factory.mktemp("workflow")
    fields = polygons(TRAIN, d / "fields.gpkg", 4326)
    reference = polygons(TEST, d / "reference.gpkg", 3857)
    profile, model, classes = d / "profile.tif", d / "crops.model", d / "classes.tif"
    run_ok("eadp", INDIAN_PINES, profile)
    trained = run_ok("train", "--samples", fields, "--class-field", FIELD, "--grid", GRID,
                     profile, model).stdout
    run_ok("classify", "--model", model, profile, classes)
    return {"dir": d, "fields": fields, "reference": reference, "classes": classes,
            "train_stdout": trained}


def field_names(gpkg):
    ds = ogr.Open(str(gpkg))
    return {f.GetField(FIELD) for f in ds.GetLayer(0)}


def band1(path):
    """(dataset, band 1): the dataset must stay referenced while the band is used."""
    ds = gdal.Open(str(path))
    return ds, ds.GetRasterBand(1)


def read_band(path):
    ds, band = band1(path)
    return band.ReadAsArray().astype(np.int64)


def oa_by_name(classes):
    """Overall accuracy of the class map against indian_pines_test.tif, matched by
    name: the oracle of the assessment."""
    got, ref = read_band(classes), read_band(TEST)
    got_names, ref_names = category_names(classes), category_names(TEST)
    labelled = ref > 0
    hit = [got_names.get(g) == ref_names[r] for g, r in zip(got[labelled], ref[labelled])]
    return float(np.mean(hit)), int(labelled.sum())


def used_classes(classes):
    return sorted(int(v) for v in np.unique(read_band(classes)) if v)


def test_polygons_in_another_crs_give_exactly_the_training_pixels(workflow):
    ds = ogr.Open(str(workflow["fields"]))
    assert ds.GetLayer(0).GetSpatialRef().GetAuthorityCode(None) == "4326"
    count = int((read_band(TRAIN) > 0).sum())
    assert " %d training pixels" % count in workflow["train_stdout"], workflow["train_stdout"]


def test_class_names_match_the_training_field(workflow):
    classes = workflow["classes"]
    names = category_names(classes)
    used = used_classes(classes)
    assert {names.get(v) for v in used} == field_names(workflow["fields"])
    # the names sit on the right numbers: at the training pixels the class map
    # gives the training polygons' class (the SVM fits its training set)
    got, train = read_band(classes), read_band(TRAIN)
    train_names = category_names(TRAIN)
    at = train > 0
    agree = np.mean([names.get(g) == train_names[t] for g, t in zip(got[at], train[at])])
    assert agree >= 0.95, "class-map names agree with the training names at %.3f of training pixels" % agree


def test_class_colours_are_distinct_and_not_black(workflow):
    ds, band = band1(workflow["classes"])
    ct = band.GetColorTable()
    assert ct is not None
    colours = [ct.GetColorEntry(v)[:3] for v in used_classes(workflow["classes"])]
    assert (0, 0, 0) not in colours, colours
    assert len(set(colours)) == len(colours), colours


def test_colour_table_covers_exactly_the_classes(workflow):
    ds, band = band1(workflow["classes"])
    ct = band.GetColorTable()
    assert ct.GetCount() == max(used_classes(workflow["classes"])) + 1


def test_attribute_table_lists_the_classes_with_names_and_colours(workflow):
    ds, band = band1(workflow["classes"])
    rat = band.GetDefaultRAT()
    assert rat is not None and rat.GetRowCount() > 0
    cols = {rat.GetUsageOfCol(i): i for i in range(rat.GetColumnCount())}
    value_col = cols.get(gdal.GFU_MinMax, cols.get(gdal.GFU_Min))
    rows = {rat.GetValueAsInt(r, value_col): (rat.GetValueAsString(r, cols[gdal.GFU_Name]),
                                               tuple(rat.GetValueAsInt(r, cols[u]) for u in
                                                     (gdal.GFU_Red, gdal.GFU_Green, gdal.GFU_Blue)))
            for r in range(rat.GetRowCount())}
    rows.pop(0, None)  # "no class", when listed
    used = used_classes(workflow["classes"])
    names, ct = category_names(workflow["classes"]), band.GetColorTable()
    assert sorted(rows) == used
    for v in used:
        assert rows[v] == (names[v], ct.GetColorEntry(v)[:3])


def assess_text(workflow, *args):
    """stdout and stderr of `hyprof assess ARGS CLASSMAP` (text report)."""
    r = run_ok("assess", *args, workflow["classes"], cwd=workflow["dir"])
    return r.stdout + r.stderr


def assess_json(workflow, *reference):
    r = run_ok("assess", *reference, "--json", workflow["classes"], cwd=workflow["dir"])
    return json.loads(r.stdout[r.stdout.index("{"):]), r


def test_assess_matches_a_raster_reference_by_name(workflow):
    oa, pixels = oa_by_name(workflow["classes"])
    assert oa > 0.9  # the oracle itself: a sane map
    report, _ = assess_json(workflow, "--reference", TEST)
    assert report["pixels"] == pixels
    assert report["oa"] == pytest.approx(oa, abs=1e-12)


def test_assess_against_a_vector_reference_in_another_crs(workflow):
    oa, pixels = oa_by_name(workflow["classes"])
    report, r = assess_json(workflow, "--reference-vector", workflow["reference"],
                            "--class-field", FIELD)
    assert report["pixels"] == pixels
    assert report["oa"] == pytest.approx(oa, abs=1e-12)
    names = category_names(workflow["classes"])
    assert {c["name"] for c in report["classes"]} == {names[v] for v in used_classes(workflow["classes"])}
    said = assess_text(workflow, "--reference-vector", workflow["reference"], "--class-field", FIELD)
    assert re.search(r"by names?\b|match(ed|ing)?\W+names\b", said, re.I), said  # says how it matched


def qgis_process(env, *args):
    """qgis_process.bin ARGS --json: its results (exit 0 asserted)."""
    exe = shutil.which("qgis_process.bin") or pytest.skip("qgis_process.bin is not installed")
    r = subprocess.run([exe, "run", *map(str, args), "--json"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, "qgis_process %s -> %d\n%s\n%s" % (
        " ".join(map(str, args)), r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout[r.stdout.index("{"):])["results"]


def test_the_same_path_through_qgis_process_with_layer_parameters(workflow, tmp_path):
    """The analyst's path headless in QGIS: the polygons and the reference go in as
    layer parameters (a GeoPackage layer each, in their own CRS) and the class
    field as a field parameter; the model, the class map and the assessment equal
    the command line's."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen",
               QGIS_PLUGINPATH=str(ROOT / "qgis_provider"),
               QGIS_CUSTOM_CONFIG_PATH=str(tmp_path / "profile"), HYPROF_EXE=str(exe_path()))
    exe = shutil.which("qgis_process.bin") or pytest.skip("qgis_process.bin is not installed")
    subprocess.run([exe, "plugins", "enable", "hyprof"], env=env, capture_output=True,
                   check=True, timeout=300)
    d = workflow["dir"]
    profile, model, classes = tmp_path / "p.tif", tmp_path / "q.model", tmp_path / "q.tif"
    cube = tmp_path / "cube.tif"  # QGIS may write statistics beside the layers it opens
    shutil.copy(INDIAN_PINES, cube)
    qgis_process(env, "hyprof:eadp", "--INPUT=%s" % cube, "--OUTPUT=%s" % profile)
    qgis_process(env, "hyprof:train", "--FEATURES=%s" % profile,
                 "--SAMPLES=%s|layername=fields" % workflow["fields"], "--CLASS_FIELD=%s" % FIELD,
                 "--GRID=%s" % GRID, "--MODEL=%s" % model)
    assert model.read_bytes() == (d / "crops.model").read_bytes()
    qgis_process(env, "hyprof:classify", "--FEATURES=%s" % profile, "--MODEL=%s" % model,
                 "--OUTPUT=%s" % classes)
    assert np.array_equal(read_band(classes), read_band(workflow["classes"]))
    assert category_names(classes) == category_names(workflow["classes"])
    report = tmp_path / "q.html"
    qgis_process(env, "hyprof:assess", "--CLASSMAP=%s" % classes,
                 "--REFERENCE_VECTOR=%s|layername=fields" % workflow["reference"],
                 "--CLASS_FIELD=%s" % FIELD, "--HTML=%s" % report)
    oa, _ = oa_by_name(workflow["classes"])
    html = report.read_text()
    assert re.search(r"by name", html, re.I), "the report says classes were matched by name"
    assert ("%.2f" % (100 * oa)) in html or ("%.4f" % oa) in html, "the report shows OA %.4f" % oa


def test_python_trains_from_the_same_polygons_as_the_cli(workflow, tmp_path):
    """hyprof.xarray.train(profile, samples=, class_field=) rasterises the
    polygons (EPSG:4326, text classes) on the profile's grid as `hyprof train
    --samples` does: the saved model is byte for byte the CLI's. Runs in a
    child Python (the QGIS plugin's package is also called hyprof)."""
    model = tmp_path / "py.model"
    lib = os.environ.get("HYPROF_LIBRARY") or str(
        __import__("pathlib").Path(exe_path()).resolve().parents[1] / "libhyprof.so")
    code = (
        "import sys, rioxarray, hyprof.xarray as hx\n"
        "p = rioxarray.open_rasterio(sys.argv[1])\n"
        "m = hx.train(p, samples=sys.argv[2], class_field=sys.argv[3], grid=sys.argv[4])\n"
        "m.save(sys.argv[5])\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), HYPROF_LIBRARY=lib)
    if os.environ.get("HYPROF_UNDER_ASAN"):
        # a Python process: its leaks are not checked (scripts/test.sh says why);
        # GDAL's stacks there are cut short, so the python3 suppression cannot match
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    r = subprocess.run(["/usr/bin/python3", "-c", code, str(workflow["dir"] / "profile.tif"),
                        str(workflow["fields"]), FIELD, GRID, str(model)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert model.read_bytes() == (workflow["dir"] / "crops.model").read_bytes()
    # discs not aligned with the pixels, integer classes, EPSG:3857: only the
    # pixels whose centre a disc covers are labelled, as on the command line
    discs = tmp_path / "discs.gpkg"
    src = gdal.Open(str(TRAIN))
    gt, lab = src.GetGeoTransform(), src.GetRasterBand(1).ReadAsArray()
    src_srs = osr.SpatialReference(wkt=src.GetProjection())
    dst_srs = osr.SpatialReference()
    dst_srs.ImportFromEPSG(3857)
    for s_ in (src_srs, dst_srs):
        s_.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    ct = osr.CoordinateTransformation(src_srs, dst_srs)
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(discs))
    lyr = ds.CreateLayer("discs", srs=dst_srs, geom_type=ogr.wkbPolygon)
    lyr.CreateField(ogr.FieldDefn("cls", ogr.OFTInteger))
    ys, xs = np.nonzero(lab)
    for i in range(0, len(ys), 9):
        pt = ogr.Geometry(ogr.wkbPoint)
        pt.AddPoint_2D(gt[0] + (xs[i] + 0.3) * gt[1], gt[3] + (ys[i] + 0.6) * gt[5])
        g = pt.Buffer(1.7 * abs(gt[1]), 12)
        g.Transform(ct)
        f = ogr.Feature(lyr.GetLayerDefn())
        f.SetField("cls", int(lab[ys[i], xs[i]]))
        f.SetGeometry(g)
        lyr.CreateFeature(f)
    ds = None
    cli_model, py_model = tmp_path / "discs_cli.model", tmp_path / "discs_py.model"
    run_ok("train", "--samples", discs, "--class-field", "cls", "--grid", GRID,
           workflow["dir"] / "profile.tif", cli_model)
    r = subprocess.run(["/usr/bin/python3", "-c", code, str(workflow["dir"] / "profile.tif"),
                        str(discs), "cls", GRID, str(py_model)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert py_model.read_bytes() == cli_model.read_bytes()
