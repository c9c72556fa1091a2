"""The QGIS provider with project layers, and how it presents itself.

Training from vector layers (any provider, the selected features only, any
CRS), the class field as a field of that layer, Processing's naming
convention, labels, help URLs, output styling and progress text.

Oracles: the CLI run on a file holding exactly the features the layer
parameter selects (model files compared byte for byte: they record the
classes, their names and the number of training pixels), QGIS' own field
widget, and the installed operations reference.

Run: /usr/bin/python3 -m pytest -q tests/test_qgis_layers.py
"""

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from osgeo import gdal, ogr, osr

from conftest import exe_path, run_ok
# the QgsApplication, the provider and the Indian Pines features are shared
# with the provider's own tests (one QgsApplication per process)
from test_qgis_provider import (  # noqa: F401 (fixtures)
    SMALL_GRID, Feedback, pines, qgis, qgis_name, qgis_process, qgis_process_env, registry,
    sample, sample_copies)
from qgis.core import (  # noqa: E402
    QgsApplication,
    QgsCoordinateReferenceSystem,
    QgsCoordinateTransform,
    QgsFeature,
    QgsGeometry,
    QgsPointXY,
    QgsProcessingContext,
    QgsProcessingFeatureSourceDefinition,
    QgsProject,
    QgsVectorLayer,
)

# Indian Pines: EPSG:32616, origin (499160, 4478820), 20 m pixels, 145 x 145
ORIGIN_X, ORIGIN_Y, PIXEL = 499160.0, 4478820.0, 20.0
ONE_SVM = "C=1,gamma=0.5"  # one C and one gamma: no cross-validation, any sample count
# (column, row, class) of five points, one pixel each; the test selects two
POINTS = [(10, 10, "Corn"), (100, 40, "Woods"), (50, 120, "Grass"), (70, 70, "Corn"),
          (120, 100, "Hay")]
# (first column, first row, columns, rows, class) of polygons, in pixels
# (names of Indian Pines classes: assess matches them by name)
POLYGONS = [(20, 20, 6, 5, "Corn"), (90, 30, 5, 7, "Woods"), (60, 110, 8, 4, "Hay-windrowed")]


def alg(name):
    return QgsApplication.processingRegistry().algorithmById("hyprof:" + name)


def centre(col, row):
    return ORIGIN_X + PIXEL * (col + 0.5), ORIGIN_Y - PIXEL * (row + 0.5)


def polygon_ring(c0, r0, w, h):
    """Pixel corners moved a quarter pixel inwards: the pixels whose centres
    fall inside are exactly columns c0..c0+w-1 and rows r0..r0+h-1, in any CRS
    the polygon is reprojected through."""
    x0, y0 = ORIGIN_X + PIXEL * (c0 + 0.25), ORIGIN_Y - PIXEL * (r0 + 0.25)
    x1, y1 = ORIGIN_X + PIXEL * (c0 + w - 0.25), ORIGIN_Y - PIXEL * (r0 + h - 0.25)
    return [(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)]


def write_gpkg(path, layers, epsg):
    """layers: [(name, 'point'|'polygon', [(geometry coordinates, class)])],
    coordinates in EPSG:32616, written in `epsg`."""
    src, dst = osr.SpatialReference(), osr.SpatialReference()
    src.ImportFromEPSG(32616)
    dst.ImportFromEPSG(epsg)
    for s in (src, dst):
        s.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    tr = osr.CoordinateTransformation(src, dst)
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(path))
    for name, kind, feats in layers:
        lyr = ds.CreateLayer(name, dst, ogr.wkbPoint if kind == "point" else ogr.wkbPolygon)
        lyr.CreateField(ogr.FieldDefn("klass", ogr.OFTString))
        for coords, cls in feats:
            f = ogr.Feature(lyr.GetLayerDefn())
            f.SetField("klass", cls)
            if kind == "point":
                g = ogr.Geometry(ogr.wkbPoint)
                g.AddPoint_2D(*coords)
            else:
                ring = ogr.Geometry(ogr.wkbLinearRing)
                for xy in coords:
                    ring.AddPoint_2D(*xy)
                g = ogr.Geometry(ogr.wkbPolygon)
                g.AddGeometry(ring)
            g.Transform(tr)
            f.SetGeometry(g)
            lyr.CreateFeature(f)
    ds = None


def memory_points():
    layer = QgsVectorLayer("Point?crs=EPSG:32616&field=klass:string(20)", "digitised", "memory")
    feats = []
    for col, row, cls in POINTS:
        f = QgsFeature(layer.fields())
        f.setAttribute("klass", cls)
        f.setGeometry(QgsGeometry.fromPointXY(QgsPointXY(*centre(col, row))))
        feats.append(f)
    assert layer.dataProvider().addFeatures(feats)[0]
    return layer


def project_context():
    context = QgsProcessingContext()
    context.setProject(QgsProject.instance())
    return context


def train_cli(pines, samples, out, *extra):
    return run_ok("train", "--samples", samples, "--class-field", "klass", "--grid", ONE_SVM,
                  *extra, pines / "pc.tif", out)


def model_line(path, key):
    return next(l for l in Path(path).read_text(errors="replace").splitlines()
                if l.startswith(key + " "))


# ---- training from layers --------------------------------------------------------------

def test_train_uses_only_the_selected_features_of_a_memory_layer(qgis, pines, tmp_path):
    layer = memory_points()
    QgsProject.instance().addMapLayer(layer)
    try:
        ids = sorted(f.id() for f in layer.getFeatures())
        layer.selectByIds([ids[0], ids[1]])  # Corn and Woods
        fb = Feedback()
        res = qgis["processing"].run("hyprof:train", {
            "FEATURES": str(pines / "pc.tif"),
            "SAMPLES": QgsProcessingFeatureSourceDefinition(layer.id(), True),
            "CLASS_FIELD": "klass", "GRID": ONE_SVM, "MODEL": str(tmp_path / "q.model")},
            context=project_context(), feedback=fb)
    finally:
        QgsProject.instance().removeMapLayer(layer.id())
    assert res["MODEL"] == str(tmp_path / "q.model")
    # the CLI on a file holding the two selected points alone
    two = [(centre(c, r), k) for c, r, k in POINTS[:2]]
    write_gpkg(tmp_path / "two.gpkg", [("two", "point", two)], 32616)
    train_cli(pines, tmp_path / "two.gpkg", tmp_path / "c.model")
    assert (tmp_path / "q.model").read_bytes() == (tmp_path / "c.model").read_bytes()
    assert model_line(tmp_path / "q.model", "train_pixels") == "train_pixels 2"
    # the provider wrote the selection to a temporary GeoPackage for the CLI
    assert re.search(r"--samples=\S+\.gpkg", fb.commands[0]), fb.commands
    # all five points give another model: the selection is what made it equal
    all5 = [(centre(c, r), k) for c, r, k in POINTS]
    write_gpkg(tmp_path / "all.gpkg", [("all", "point", all5)], 32616)
    train_cli(pines, tmp_path / "all.gpkg", tmp_path / "all.model")
    assert model_line(tmp_path / "all.model", "train_pixels") == "train_pixels 5"


def test_train_from_a_geopackage_layer_in_another_crs(qgis, pines, tmp_path):
    """Polygons in EPSG:4326, in the second layer of a GeoPackage whose first
    layer holds other classes: the provider passes the file and the layer
    name, the CLI reprojects, and the model equals the one trained from the
    same polygons in the raster's CRS."""
    polys = [(polygon_ring(c, r, w, h), k) for c, r, w, h, k in POLYGONS]
    decoy = [(polygon_ring(1, 1, 3, 3), "Decoy"), (polygon_ring(5, 5, 3, 3), "Other")]
    gpkg = tmp_path / "fields.gpkg"
    write_gpkg(gpkg, [("decoy", "polygon", decoy), ("fields", "polygon", polys)], 4326)
    layer = QgsVectorLayer("%s|layername=fields" % gpkg, "fields", "ogr")
    assert layer.isValid() and layer.crs().authid() == "EPSG:4326"
    fb = Feedback()
    qgis["processing"].run("hyprof:train", {
        "FEATURES": str(pines / "pc.tif"), "SAMPLES": layer, "CLASS_FIELD": "klass",
        "GRID": ONE_SVM, "MODEL": str(tmp_path / "q.model")}, feedback=fb)
    del layer
    assert "--samples=%s" % gpkg in fb.commands[0] and "--layer=fields" in fb.commands[0]
    write_gpkg(tmp_path / "utm.gpkg", [("fields", "polygon", polys)], 32616)
    train_cli(pines, tmp_path / "utm.gpkg", tmp_path / "c.model")
    assert (tmp_path / "q.model").read_bytes() == (tmp_path / "c.model").read_bytes()
    pixels = sum(w * h for _, _, w, h, _ in POLYGONS)
    assert model_line(tmp_path / "q.model", "train_pixels") == "train_pixels %d" % pixels


def test_the_class_field_lists_the_layer_fields(qgis):
    """The field parameter depends on the samples parameter: QGIS' own field
    widget, given that layer, offers exactly the layer's fields."""
    from qgis.gui import (QgsGui, QgsProcessingContextGenerator, QgsProcessingGui,
                          QgsProcessingParameterWidgetContext)
    train = alg("train")
    field = train.parameterDefinition("CLASS_FIELD")
    assert field.type() == "field" and field.parentLayerParameterName() == "SAMPLES"
    assert field.dependsOnOtherParameters() == ["SAMPLES"]
    assert train.parameterDefinition("SAMPLES").type() == "source"
    layer = QgsVectorLayer("Polygon?crs=EPSG:4326&field=landcover:string&field=code:integer"
                           "&field=area_m2:double", "digitised", "memory")
    QgsProject.instance().addMapLayer(layer)
    context = project_context()

    class Context(QgsProcessingContextGenerator):
        def processingContext(self):  # noqa: N802
            return context

    gen, widget_context = Context(), QgsProcessingParameterWidgetContext()
    widget_context.setProject(QgsProject.instance())
    gui = QgsGui.processingGuiRegistry()
    wrappers = [gui.createParameterWidgetWrapper(train.parameterDefinition(n),
                                                 QgsProcessingGui.Standard)
                for n in ("SAMPLES", "CLASS_FIELD")]
    widgets = []  # Python owns the widgets: kept alive while the wrappers use them
    for w in wrappers:
        w.setWidgetContext(widget_context)
        w.registerProcessingContextGenerator(gen)
        widgets.append(w.createWrappedWidget(context))
    try:
        wrappers[0].setParameterValue(layer.id(), context)
        wrappers[1].setParentLayerWrapperValue(wrappers[0])
        combo = wrappers[1].wrappedWidget()
        offered = [combo.itemText(i) for i in range(combo.count()) if combo.itemText(i)]
    finally:
        del wrappers, widgets
        QgsProject.instance().removeMapLayer(layer.id())
    assert offered == ["landcover", "code", "area_m2"]


def test_qgis_process_trains_with_a_layer_parameter(pines, tmp_path):
    polys = [(polygon_ring(c, r, w, h), k) for c, r, w, h, k in POLYGONS]
    gpkg = tmp_path / "fields.gpkg"
    write_gpkg(gpkg, [("decoy", "polygon", [(polygon_ring(1, 1, 3, 3), "Decoy")]),
                      ("fields", "polygon", polys)], 3857)
    env = qgis_process_env(tmp_path)
    qgis_process(env, "plugins", "enable", "hyprof")
    r = qgis_process(env, "run", "hyprof:train", "--json", "--FEATURES=%s" % (pines / "pc.tif"),
                     "--SAMPLES=%s|layername=fields" % gpkg, "--CLASS_FIELD=klass",
                     "--GRID=%s" % ONE_SVM, "--MODEL=%s" % (tmp_path / "q.model"))
    results = json.loads(r.stdout[r.stdout.index("{"):])["results"]
    assert results["MODEL"] == str(tmp_path / "q.model")
    write_gpkg(tmp_path / "utm.gpkg", [("fields", "polygon", polys)], 32616)
    train_cli(pines, tmp_path / "utm.gpkg", tmp_path / "c.model")
    assert (tmp_path / "q.model").read_bytes() == (tmp_path / "c.model").read_bytes()


def _vector_reference(op):
    """(vector_in name, field name) of assess, or None when it has none."""
    vec = next((p["name"] for p in op["params"] if p["type"] == "vector_in"), None)
    fld = next((p["name"] for p in op["params"] if p["type"] == "field"
                and p.get("parent") == vec), None)
    return (vec, fld) if vec and fld else None


def _without_paths(report):
    """The report less the reference's file name (the provider's is a temporary copy)."""
    return {k: v for k, v in report.items() if not (isinstance(v, str) and ".gpkg" in v)}


def test_assess_against_selected_reference_polygons(qgis, registry, pines, tmp_path):
    assess = next(o for o in registry["operations"] if o["name"] == "assess")
    names = _vector_reference(assess)
    if names is None:
        pytest.skip("hyprof describe --json: assess has no vector reference parameter "
                    "(--reference-vector with a class field) yet")
    vec, fld = names
    run_ok("train", "--labels", pines / "indian_pines_train.tif", "--grid", SMALL_GRID,
           pines / "pc.tif", tmp_path / "m.model")
    classes = tmp_path / "classes.tif"
    run_ok("classify", "--model", tmp_path / "m.model", pines / "pc.tif", classes)
    layer = QgsVectorLayer("Polygon?crs=EPSG:4326&field=klass:string(20)", "ref", "memory")
    to4326 = QgsCoordinateTransform(QgsCoordinateReferenceSystem("EPSG:32616"),
                                    QgsCoordinateReferenceSystem("EPSG:4326"),
                                    QgsProject.instance())
    feats = []
    for (c, r, w, h, k) in POLYGONS + [(5, 60, 4, 4, "Woods")]:
        f = QgsFeature(layer.fields())
        f.setAttribute("klass", k)
        g = QgsGeometry.fromPolygonXY([[QgsPointXY(*xy) for xy in polygon_ring(c, r, w, h)]])
        g.transform(to4326)
        f.setGeometry(g)
        feats.append(f)
    assert layer.dataProvider().addFeatures(feats)[0]
    QgsProject.instance().addMapLayer(layer)
    try:
        layer.selectByIds(sorted(f.id() for f in layer.getFeatures())[:3])
        res = qgis["processing"].run("hyprof:assess", {
            "CLASSMAP": str(classes), qgis_name(vec): QgsProcessingFeatureSourceDefinition(
                layer.id(), True), qgis_name(fld): "klass", "JSON": True},
            context=project_context(), feedback=Feedback())
    finally:
        QgsProject.instance().removeMapLayer(layer.id())
    polys = [(polygon_ring(c, r, w, h), k) for c, r, w, h, k in POLYGONS]
    write_gpkg(tmp_path / "ref.gpkg", [("ref", "polygon", polys)], 32616)
    cli = run_ok("assess", "--" + vec, tmp_path / "ref.gpkg", "--" + fld, "klass", "--json",
                 classes)
    ours, theirs = (_without_paths(json.loads(t)) for t in (res["REPORT"], cli.stdout))
    assert ours == theirs
    assert ours["pixels"] == sum(w * h for _, _, w, h, _ in POLYGONS)


# ---- names, labels, help -----------------------------------------------------------------

def test_parameter_and_output_names_are_upper_case(qgis):
    bad = []
    for a in qgis["provider"].algorithms():
        names = [d.name() for d in a.parameterDefinitions()]
        names += [o.name() for o in a.outputDefinitions()]
        bad += ["%s.%s" % (a.name(), n) for n in names if not re.fullmatch(r"[A-Z][A-Z0-9_]*", n)]
    assert not bad


ACRONYMS = ("ELM", "SVM", "PCA", "DWT", "HySime", "CRS", "RMSE", "JSON", "HTML", "CSV")


def test_labels_are_written_for_people(qgis):
    bad = []
    for a in qgis["provider"].algorithms():
        for d in a.parameterDefinitions():
            text = d.description()
            for word in re.findall(r"[A-Za-z]+", text):
                acronym = next((x for x in ACRONYMS if x.lower() == word.lower()), None)
                if acronym and word != acronym:
                    bad.append("%s.%s: %r" % (a.name(), d.name(), text))
            if "_" in text or re.search(r"[a-z]-[a-z]", text) or text[:1].islower():
                bad.append("%s.%s: %r" % (a.name(), d.name(), text))
    assert not bad, bad
    assert alg("eadp").parameterDefinition("CONTRAST_PERCENTILE").description() == \
        "Contrast percentile (fraction 0-1)"
    if alg("train").parameterDefinition("ELM_C") is not None:
        assert alg("train").parameterDefinition("ELM_C").description() == "ELM C"
    assert alg("eadp").parameterDefinition("COMPONENTS").description() == "Components"


def test_legacy_lower_case_names_still_work(qgis, tmp_path):
    """Scripts and command lines written for the lower-case names run as before."""
    params = {"INPUT": str(sample("samson.tif")), "components": 2, "save_model":
              str(tmp_path / "old.pca"), "OUTPUT": str(tmp_path / "old.tif")}
    res = qgis["processing"].run("hyprof:pca", params, feedback=Feedback())
    assert res["SAVE_MODEL"] == str(tmp_path / "old.pca")
    run_ok("pca", "--components", "2", sample("samson.tif"), tmp_path / "c.tif")
    assert gdal.Open(str(tmp_path / "old.tif")).RasterCount == 2
    assert np.array_equal(gdal.Open(str(tmp_path / "old.tif")).ReadAsArray(),
                          gdal.Open(str(tmp_path / "c.tif")).ReadAsArray())


def _anchor_in(path, op):
    return ('<a id="op-%s"></a>' % op) in Path(path).read_text(encoding="utf-8")


def test_help_url_points_at_the_operation(qgis):
    from qgis.PyQt.QtCore import QUrl
    for a in qgis["provider"].algorithms():
        url = QUrl(a.helpUrl())
        assert url.scheme() == "file", a.helpUrl()
        assert url.fragment() == "op-" + a.name()
        path = url.toLocalFile()
        assert Path(path).name == "operations.md" and Path(path).is_file()
        assert _anchor_in(path, a.name()), "%s has no anchor op-%s" % (path, a.name())


def test_installed_plugin_points_at_the_installed_reference(registry, tmp_path):
    """`cmake --install` (components qgis and doc) installs the reference
    under share/doc/hyprof, and the plugin records where."""
    build = Path(exe_path()).resolve().parents[1]
    if not (build / "cmake_install.cmake").is_file():
        pytest.skip("%s is not a CMake build folder" % build)
    dest, prefix = tmp_path / "destdir", tmp_path / "prefix"
    for comp in ("qgis", "doc"):
        r = subprocess.run(["cmake", "--install", str(build), "--component", comp, "--prefix",
                            str(prefix)], env=dict(os.environ, DESTDIR=str(dest)),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    plugin = next(dest.rglob("hyprof/metadata.txt")).parent
    recorded = (plugin / "documentation.txt").read_text().strip()
    assert recorded == str(prefix / "share" / "doc" / "hyprof" / "operations.md")
    installed = Path(str(dest) + recorded)
    for op in registry["operations"]:
        assert _anchor_in(installed, op["name"])


# ---- styling and progress -------------------------------------------------------------------

def test_class_map_names_from_the_attribute_table(qgis, tmp_path):
    """A class map whose names are in a raster attribute table only."""
    from hyprof.styling import style_output
    from qgis.core import QgsPalettedRasterRenderer, QgsRasterLayer
    path = str(tmp_path / "rat.tif")
    ds = gdal.GetDriverByName("GTiff").Create(path, 4, 4, 1, gdal.GDT_Byte)
    ds.SetGeoTransform((0, 1, 0, 4, 0, -1))
    band = ds.GetRasterBand(1)
    band.WriteArray((np.arange(16, dtype=np.uint8).reshape(4, 4) % 3) * 2)  # 0, 2, 4
    band.SetNoDataValue(0)
    ct = gdal.ColorTable()
    for v, rgba in {2: (230, 159, 0, 255), 4: (86, 180, 233, 255)}.items():
        ct.SetColorEntry(v, rgba)
    band.SetColorTable(ct)
    rat = gdal.RasterAttributeTable()
    rat.CreateColumn("value", gdal.GFT_Integer, gdal.GFU_MinMax)
    rat.CreateColumn("class", gdal.GFT_String, gdal.GFU_Name)
    for row, (v, n) in enumerate([(2, "Corn-notill"), (4, "Woods")]):
        rat.SetValueAsInt(row, 0, v)
        rat.SetValueAsString(row, 1, n)
    band.SetDefaultRAT(rat)
    ds = band = None
    layer = QgsRasterLayer(path, "classes", "gdal")
    assert style_output(layer) == "class map"
    r = layer.renderer()
    assert isinstance(r, QgsPalettedRasterRenderer)
    classes = [(c.value, c.label, c.color.name()) for c in r.classes()]
    del layer, r
    assert classes == [(2.0, "Corn-notill", "#e69f00"), (4.0, "Woods", "#56b4e9")]


class StageFeedback(Feedback):
    def __init__(self):
        super().__init__()
        self.texts = []

    def setProgressText(self, text):  # noqa: N802
        self.texts.append(text)


def test_progress_text_names_each_stage(qgis, tmp_path):
    fb = StageFeedback()
    qgis["processing"].run("hyprof:eadp", {"INPUT": str(sample("samson.tif")), "COUNT": 1,
                                           "COMPONENTS": 2, "OUTPUT": str(tmp_path / "p.tif")},
                           feedback=fb)
    # the stages the CLI reports in its JSON progress lines, each shown once as it starts
    r = run_ok("eadp", "--count", "1", "--components", "2", "--progress", "json",
               sample("samson.tif"), tmp_path / "c.tif")
    stages = []
    for line in r.stderr.splitlines():
        if line.startswith("{") and "stage" in line:
            s = json.loads(line)["stage"]
            if not stages or stages[-1] != s:
                stages.append(s)
    assert len(stages) >= 2 and fb.texts == stages
