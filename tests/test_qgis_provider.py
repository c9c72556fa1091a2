"""The QGIS Processing provider (qgis_provider/hyprof) against the executable.

Driven by `hyprof describe --json`: every operation it lists is checked, so
operations added to the registry are covered without editing this file.
Oracles: the registry itself (parameter definitions) and the CLI run with the
same arguments (outputs identical, array for array and band name for band
name). Skipped where QGIS' Python bindings are missing (CI installs them).

Run: /usr/bin/python3 -m pytest -q tests/test_qgis_provider.py
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from osgeo import gdal

import conftest
from conftest import ROOT, exe_path, run_ok

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
qgis_core = pytest.importorskip("qgis.core", reason="QGIS' Python bindings (python3-qgis)")
from qgis.core import (  # noqa: E402
    QgsApplication,
    QgsPalettedRasterRenderer,
    QgsProcessingContext,
    QgsProcessingException,
    QgsProcessingFeedback,
    QgsProcessingOutputHtml,
    QgsProcessingParameterDefinition,
    QgsProcessingParameterNumber,
    QgsRasterLayer,
    QgsSettings,
)
from qgis.PyQt.QtCore import QCoreApplication, QSettings  # noqa: E402

PLUGIN_ROOT = ROOT / "qgis_provider"
GROUPS = {"Feature extraction", "Profiles", "Unmixing", "Classification"}
PROVIDER_OWNED = {"progress", "overwrite"}


def qgis_name(name):
    """Processing's name of a registry parameter (the oracle: QGIS' convention)."""
    return name.replace("-", "_").upper()
QGIS_PLUGINS = "/usr/share/qgis/python/plugins"  # Processing's own Python


# ---- fixtures ---------------------------------------------------------------------------

# QGIS writes statistics (.aux.xml) beside the rasters it opens as layers, and
# samples/ must stay untouched: the tests read copies.
_COPIES = {}


def sample(name):
    return _COPIES[name]


@pytest.fixture(scope="module", autouse=True)
def sample_copies(tmp_path_factory):
    d = tmp_path_factory.mktemp("samples")
    for src in (conftest.SAMSON, conftest.INDIAN_PINES):
        _COPIES[src.name] = d / src.name
        shutil.copy(src, d / src.name)
    yield
    _COPIES.clear()


@pytest.fixture(scope="module")
def registry():
    r = run_ok("describe", "--json")
    return json.loads(r.stdout)


_QGIS = {}  # one QgsApplication per process, shared with test_qgis_layers.py


@pytest.fixture(scope="module")
def qgis(tmp_path_factory, request):
    """An offscreen QgsApplication with Processing and the plugin loaded the
    way qgis_process loads it (classFactory(None) + initProcessing()).

    Started once per process: QGIS cannot start again after exitQgis(), so
    the modules that use it (this one and test_qgis_layers.py) share it, and
    it stops when pytest ends."""
    if _QGIS:
        yield _QGIS
        return
    home = tmp_path_factory.mktemp("qgis-profile")
    # QgsSettings of this process go to a private file, not the user's profile
    QCoreApplication.setOrganizationName("hyprof-tests")
    QCoreApplication.setApplicationName("QGIS3")
    QSettings.setPath(QSettings.NativeFormat, QSettings.UserScope, str(home))
    os.environ["HYPROF_EXE"] = exe_path()
    app = QgsApplication([], False, str(home))
    app.initQgis()
    for p in (QGIS_PLUGINS, str(PLUGIN_ROOT)):
        if p not in sys.path:
            sys.path.insert(0, p)
    from processing.core.Processing import Processing
    Processing.initialize()
    import hyprof
    plugin = hyprof.classFactory(None)
    plugin.initProcessing()
    import processing
    _QGIS.update(app=app, plugin=plugin, provider=plugin.provider, processing=processing)
    request.config.add_cleanup(_stop_qgis)
    yield _QGIS


def _stop_qgis():
    _QGIS["plugin"].unload()
    _QGIS["app"].exitQgis()  # every QgsRasterLayer of the tests is deleted by now
    _QGIS.clear()
    # exitQgis() destroys GDAL's driver manager: register the drivers again for
    # anything that runs after these in the same process.
    from osgeo import gdal, ogr
    gdal.AllRegister()
    ogr.RegisterAll()


class Feedback(QgsProcessingFeedback):
    """Records what the algorithm reports; cancels at the first progress when asked."""

    def __init__(self, cancel_at_first_progress=False):
        super().__init__()
        self.infos, self.warnings, self.commands, self.debug, self.progress = [], [], [], [], []
        if cancel_at_first_progress:
            self.progressChanged.connect(lambda v: self.cancel())
        self.progressChanged.connect(self.progress.append)

    def pushInfo(self, info):  # noqa: N802
        self.infos.append(info)

    def pushWarning(self, warning):  # noqa: N802
        self.warnings.append(warning)

    def pushCommandInfo(self, info):  # noqa: N802
        self.commands.append(info)

    def pushDebugInfo(self, info):  # noqa: N802
        self.debug.append(info)


def read_tif(path):
    ds = gdal.Open(str(path))
    arr = ds.ReadAsArray()
    names = [ds.GetRasterBand(i + 1).GetDescription() for i in range(ds.RasterCount)]
    geo = (ds.GetGeoTransform(), ds.GetProjection(), ds.GetRasterBand(1).GetNoDataValue())
    ds = None
    return arr, names, geo


def assert_same_raster(a, b):
    arr_a, names_a, geo_a = read_tif(a)
    arr_b, names_b, geo_b = read_tif(b)
    assert names_a == names_b
    assert geo_a == geo_b
    assert arr_a.shape == arr_b.shape
    assert np.array_equal(arr_a, arr_b, equal_nan=True), \
        "max abs difference %g" % np.nanmax(np.abs(arr_a - arr_b))


def files_in(d):
    return sorted(p.name for p in Path(d).iterdir())


# ---- the toolbox ----------------------------------------------------------------------

def test_every_operation_is_an_algorithm(qgis, registry):
    provider = qgis["provider"]
    assert provider.longName().startswith("hyprof %s" % registry["hyprof"])
    ops = registry["operations"]
    assert ops, "describe --json lists no operation"
    assert sorted(a.name() for a in provider.algorithms()) == sorted(o["name"] for o in ops)
    for op in ops:
        alg = QgsApplication.processingRegistry().algorithmById("hyprof:" + op["name"])
        assert alg is not None, op["name"]
        assert op["group"] in GROUPS, "%s: unknown group %r" % (op["name"], op["group"])
        assert alg.group() == op["group"]
        assert op["summary"] in alg.displayName()
        assert op["help"][:60] in alg.shortHelpString().replace("&#x27;", "'")


def _expected_type(p):
    t = p["type"]
    f = p.get("file_filter", "").lower()
    if t in ("int", "float"):
        return "number"
    if t == "file_out":
        return "rasterDestination" if "*.tif" in f else "fileDestination"
    return {"choice": "enum", "bool": "boolean", "file_in": "file",
            "raster_in": "raster", "raster_out": "rasterDestination",
            "vector_in": "source", "field": "field"}.get(t, "string")


def _check_param(alg, p, advanced):
    """Mismatches between one registry parameter and its Processing definition."""
    name = qgis_name(p["name"])
    d = alg.parameterDefinition(name)
    if d is None:
        return ["%s: no parameter %s" % (alg.name(), name)]
    bad = []

    def want(what, got, expected):
        if got != expected:
            bad.append("%s.%s %s: %r, registry %r" % (alg.name(), name, what, got, expected))

    want("type", d.type(), _expected_type(p))
    want("help", d.help(), p.get("help", ""))
    want("advanced", bool(d.flags() & QgsProcessingParameterDefinition.FlagAdvanced),
         advanced or p["advanced"])
    if p["type"] not in ("file_out", "raster_out"):
        want("optional", bool(d.flags() & QgsProcessingParameterDefinition.FlagOptional),
             not p["required"])
    default = p.get("default")
    if p["type"] in ("int", "float"):
        want("data type", d.dataType(), QgsProcessingParameterNumber.Integer
             if p["type"] == "int" else QgsProcessingParameterNumber.Double)
        if "min" in p:
            want("minimum", d.minimum(), p["min"])
            want("maximum", d.maximum(), p["max"])
        want("default", d.defaultValue(), default)
    elif p["type"] == "choice":
        want("options", d.options(), p["choices"])
        want("static strings", d.usesStaticStrings(), True)
        want("default", d.defaultValue(), default)
    elif p["type"] == "bool":
        want("default", d.defaultValue(), bool(default))
    elif p["type"] in ("file_in", "file_out") and "file_filter" in p \
            and d.type() != "rasterDestination":
        want("file filter", d.fileFilter(), p["file_filter"])
    elif p["type"] in ("string", "int_list", "float_list"):
        want("default", d.defaultValue(), default)
    elif p["type"] == "field":
        want("parent", d.parentLayerParameterName(), qgis_name(p["parent"]))
    return bad


_FILE_TYPES = {"raster_in": "raster", "raster_out": "rasterDestination",
               "file_out": "fileDestination"}


def _files(op):
    """(name, registry kind) of the positional file arguments, in CLI order."""
    if "files" in op:
        return [(f["name"], f["type"]) for f in op["files"]]
    assert op["output"]["type"] == "raster", op["name"]
    return [(op["input"]["name"], "raster_in"), (op["output"]["name"], "raster_out")]


def _check_files(alg, op):
    """Mismatches between the positional file arguments and their definitions."""
    bad = []
    for name, kind in _files(op):
        d = alg.parameterDefinition(name)
        if d is None or d.type() != _FILE_TYPES[kind]:
            bad.append("%s.%s: %s, registry %s" % (op["name"], name, d and d.type(), kind))
        elif kind == "file_out" and str(op.get("result", "")).startswith("model"):
            if "*.model" not in d.fileFilter():
                bad.append("%s.%s filter %r" % (op["name"], name, d.fileFilter()))
    outs = {o.name(): o.type() for o in alg.outputDefinitions()}
    want = {name: ("outputRaster" if kind == "raster_out" else "outputFile")
            for name, kind in _files(op) if kind != "raster_in"}
    for p in op["params"]:
        if p["type"] == "file_out":
            want[qgis_name(p["name"])] = (
                "outputRaster" if "*.tif" in p.get("file_filter", "") else
                "outputHtml" if "*.htm" in p.get("file_filter", "") else "outputFile")
    if "on stdout" in op.get("result", ""):
        want[op["result"].split()[0].upper()] = "outputString"
    if outs != want:
        bad.append("%s outputs %s, expected %s" % (op["name"], outs, want))
    return bad


def test_parameters_match_the_registry(qgis, registry):
    bad = []
    for op in registry["operations"]:
        alg = QgsApplication.processingRegistry().algorithmById("hyprof:" + op["name"])
        # with a vector input, the provider names the layer itself (no "layer")
        vector = any(p["type"] == "vector_in" for p in op["params"])
        params = [p for p in op["params"] if not (vector and p["name"] == "layer")]
        for p in params:
            bad += _check_param(alg, p, False)
        for p in registry["common"]:
            if p["name"] in PROVIDER_OWNED:
                assert alg.parameterDefinition(qgis_name(p["name"])) is None
            else:
                bad += _check_param(alg, p, True)
        bad += _check_files(alg, op)
        files = {name for name, _ in _files(op)}
        names = {qgis_name(p["name"]) for p in params + registry["common"]}
        extra = {d.name() for d in alg.parameterDefinitions()} - names - files
        assert extra == set(), "%s has parameters the registry lacks: %s" % (op["name"], extra)
    assert not bad, "\n".join(bad)


def test_the_classification_operations_are_mapped(qgis, registry):
    """The kinds of file arguments the classification operations brought, as
    a user sees them (the generic check above covers every operation)."""
    ops = {o["name"] for o in registry["operations"]}
    if not {"train", "classify", "assess", "split"} <= ops:
        pytest.skip("the classification operations are not in describe --json")

    def alg(name):
        return QgsApplication.processingRegistry().algorithmById("hyprof:" + name)

    def types(name):
        return {d.name(): d.type() for d in alg(name).parameterDefinitions()
                if d.name() in ("FEATURES", "MODEL", "OUTPUT", "CLASSMAP", "TRAIN", "TEST",
                                "INPUT", "REFERENCE", "LABELS", "MODEL", "HTML")}

    assert types("train") == {"FEATURES": "raster", "MODEL": "fileDestination",
                              "LABELS": "raster"}
    assert types("classify") == {"FEATURES": "raster", "OUTPUT": "rasterDestination",
                                 "MODEL": "file"}
    assert types("assess") == {"CLASSMAP": "raster", "REFERENCE": "raster",
                               "HTML": "fileDestination"}
    assert types("split") == {"TRAIN": "rasterDestination", "TEST": "rasterDestination",
                              "REFERENCE": "raster"}
    outs = {o.name(): o for o in alg("assess").outputDefinitions()}
    assert isinstance(outs["HTML"], QgsProcessingOutputHtml)
    assert outs["REPORT"].type() == "outputString"
    assert alg("train").outputDefinition("MODEL").type() == "outputFile"
    for name in ("train", "classify", "assess", "split"):
        assert "INPUT" not in types(name)


def test_mapping_of_outputs_other_than_a_raster(qgis, registry):
    """Operations on other branches (train, assess...) write model files, HTML
    reports and second rasters: a description with such entries maps onto
    file destinations, an HTML output and raster destinations."""
    from hyprof.algorithm import HyprofAlgorithm
    from hyprof.engine import Engine
    op = {
        "name": "assessx", "group": "Classification", "summary": "s", "help": "h",
        "input": {"name": "INPUT", "type": "raster"},
        "output": {"name": "OUTPUT", "type": "raster", "format": "GTiff",
                   "description": "html: the accuracy report"},
        "params": [
            {"name": "reference", "type": "raster_in", "default": None, "help": "r",
             "required": True, "advanced": False},
            {"name": "model", "type": "file_in", "default": None, "file_filter":
             "SVM model (*.svm)", "help": "m", "required": True, "advanced": False},
            {"name": "report", "type": "file_out", "default": None, "file_filter":
             "HTML report (*.html)", "help": "h", "required": False, "advanced": False},
            {"name": "confusion", "type": "file_out", "default": None, "file_filter":
             "GeoTIFF (*.tif)", "help": "c", "required": False, "advanced": False},
            {"name": "novel", "type": "vector_in", "default": None, "help": "n",
             "required": False, "advanced": True}]}
    engine = Engine(None, "not needed here", {"operations": [op], "common": []})
    alg = HyprofAlgorithm(op, engine).create()
    types = {d.name(): d.type() for d in alg.parameterDefinitions()}
    assert types == {"INPUT": "raster", "REFERENCE": "raster", "MODEL": "file",
                     "REPORT": "fileDestination", "CONFUSION": "rasterDestination",
                     "NOVEL": "source", "OUTPUT": "fileDestination"}
    outs = {o.name(): o for o in alg.outputDefinitions()}
    assert isinstance(outs["OUTPUT"], QgsProcessingOutputHtml)
    assert isinstance(outs["REPORT"], QgsProcessingOutputHtml)
    assert outs["CONFUSION"].type() == "outputRaster"
    assert alg.parameterDefinition("MODEL").fileFilter() == "SVM model (*.svm)"
    model = dict(op, output={"name": "OUTPUT", "type": "raster",
                             "description": "model: the trained SVM"})
    alg = HyprofAlgorithm(model, engine).create()
    assert alg.outputDefinition("OUTPUT").type() == "outputFile"
    nothing = dict(op, output=None, params=[])
    alg = HyprofAlgorithm(nothing, engine).create()  # kept: it owns the definitions
    assert [d.name() for d in alg.parameterDefinitions()] == ["INPUT"]


# ---- running ---------------------------------------------------------------------------

RUNS = [
    # (op, Processing parameters, the same as CLI options)
    ("eadp", {"COUNT": 2, "COMPONENTS": 3, "STEP": 30.5, "DIFFUSIVITY": "g1"},
     ["--count", "2", "--components", "3", "--step", "30.5", "--diffusivity", "g1"]),
    ("eadp", {"REDUCTION": "dwt", "WAVELET": "db2", "LEVELS": 3, "TIMES": "10,25.5",
              "BACKEND": "cpu"},
     ["--reduction", "dwt", "--wavelet", "db2", "--levels", "3", "--times", "10,25.5",
      "--backend", "cpu"]),
    ("pca", {"COMPONENTS": 4}, ["--components", "4"]),
    ("eap", {"AREA_THRESHOLDS": "10,50", "CONNECTIVITY": "8"},
     ["--area-thresholds", "10,50", "--connectivity", "8"]),
]


@pytest.mark.parametrize("op,params,cli", RUNS, ids=[r[0] + str(i) for i, r in enumerate(RUNS)])
def test_processing_run_equals_the_cli(qgis, tmp_path, op, params, cli):
    fb = Feedback()
    ours = tmp_path / "processing.tif"
    res = qgis["processing"].run("hyprof:" + op, dict(params, INPUT=str(sample("samson.tif")),
                                                      OUTPUT=str(ours)), feedback=fb)
    assert res["OUTPUT"] == str(ours)
    theirs = tmp_path / "cli.tif"
    run_ok(op, *cli, sample("samson.tif"), theirs)
    assert_same_raster(ours, theirs)
    assert fb.progress and max(fb.progress) == pytest.approx(100.0)
    assert any("wrote" in i for i in fb.infos), fb.infos  # the CLI's stdout, as info


def test_model_file_output_equals_the_cli(qgis, tmp_path):
    res = qgis["processing"].run("hyprof:pca", {
        "INPUT": str(sample("samson.tif")), "COMPONENTS": 3, "SAVE_MODEL": str(tmp_path / "q.pca"),
        "OUTPUT": str(tmp_path / "q.tif")}, feedback=Feedback())
    assert res["SAVE_MODEL"] == str(tmp_path / "q.pca")
    run_ok("pca", "--components", "3", "--save-model", tmp_path / "c.pca", sample("samson.tif"),
           tmp_path / "c.tif")
    assert (tmp_path / "q.pca").read_bytes() == (tmp_path / "c.pca").read_bytes()
    # and the model applies through the file_in parameter
    qgis["processing"].run("hyprof:pca", {"INPUT": str(sample("samson.tif")), "MODEL": str(tmp_path / "q.pca"),
                                          "OUTPUT": str(tmp_path / "applied.tif")})
    assert_same_raster(tmp_path / "applied.tif", tmp_path / "c.tif")


# ---- the classification chain and the unmixing side files ---------------------------------

CLASSIFICATION = ("train", "classify", "assess", "split")
SMALL_GRID = "C=1,10,gamma=0.5,2"  # a 2x2 cross-validation: seconds, not minutes


@pytest.fixture(scope="module")
def pines(qgis, registry, tmp_path_factory):
    """Indian Pines as 5 principal components, with its training and test maps."""
    if not set(CLASSIFICATION) <= {o["name"] for o in registry["operations"]}:
        pytest.skip("the classification operations are not in describe --json")
    d = tmp_path_factory.mktemp("pines")
    for n in ("indian_pines_train.tif", "indian_pines_test.tif", "indian_pines_gt.tif"):
        for f in (n, n + ".aux.xml"):  # the class names are in the .aux.xml
            shutil.copy(ROOT / "samples" / f, d / f)
    run_ok("pca", "--components", "5", sample("indian_pines.tif"), d / "pc.tif")
    return d


def test_train_and_classify_equal_the_cli(qgis, pines, tmp_path):
    run = qgis["processing"].run
    res = run("hyprof:train", {"FEATURES": str(pines / "pc.tif"),
                               "LABELS": str(pines / "indian_pines_train.tif"),
                               "GRID": SMALL_GRID, "MODEL": str(tmp_path / "q.model")},
              feedback=Feedback())
    assert res["MODEL"] == str(tmp_path / "q.model")
    run_ok("train", "--labels", pines / "indian_pines_train.tif", "--grid", SMALL_GRID,
           pines / "pc.tif", tmp_path / "c.model")
    assert (tmp_path / "q.model").read_bytes() == (tmp_path / "c.model").read_bytes()
    res = run("hyprof:classify", {"FEATURES": str(pines / "pc.tif"),
                                  "MODEL": str(tmp_path / "q.model"),
                                  "OUTPUT": str(tmp_path / "q.tif")}, feedback=Feedback())
    assert res["OUTPUT"] == str(tmp_path / "q.tif")
    run_ok("classify", "--model", tmp_path / "c.model", pines / "pc.tif", tmp_path / "c.tif")
    assert_same_raster(tmp_path / "q.tif", tmp_path / "c.tif")
    classes, _, _ = read_tif(tmp_path / "q.tif")
    assert len(np.unique(classes[classes > 0])) == 16


def test_assess_report_equals_the_cli(qgis, pines, tmp_path):
    """REPORT holds the CLI's stdout (text, or JSON with --json); the HTML
    output is the file --html writes."""
    run_ok("train", "--labels", pines / "indian_pines_train.tif", "--grid", SMALL_GRID,
           pines / "pc.tif", tmp_path / "m.model")
    classes = tmp_path / "classes.tif"
    run_ok("classify", "--model", tmp_path / "m.model", pines / "pc.tif", classes)
    ref, report = pines / "indian_pines_test.tif", tmp_path / "report.html"
    # one HTML path for both: the text report names it
    cli = run_ok("assess", "--reference", ref, "--html", report, classes)
    cli_html = report.read_bytes()
    report.unlink()
    res = qgis["processing"].run("hyprof:assess", {
        "CLASSMAP": str(classes), "REFERENCE": str(ref), "HTML": str(report)},
        feedback=Feedback())
    assert res["REPORT"] == cli.stdout and "kappa" in cli.stdout
    assert res["HTML"] == str(report)
    assert report.read_bytes() == cli_html
    res = qgis["processing"].run("hyprof:assess", {
        "CLASSMAP": str(classes), "REFERENCE": str(ref), "JSON": True}, feedback=Feedback())
    cli = run_ok("assess", "--reference", ref, "--json", classes)
    assert json.loads(res["REPORT"]) == json.loads(cli.stdout)
    assert json.loads(res["REPORT"])["pixels"] == 9554


def test_split_writes_both_rasters_like_the_cli(qgis, pines, tmp_path):
    res = qgis["processing"].run("hyprof:split", {
        "REFERENCE": str(pines / "indian_pines_gt.tif"), "PER_CLASS": 10, "SEED": 7,
        "TRAIN": str(tmp_path / "q_train.tif"), "TEST": str(tmp_path / "q_test.tif")},
        feedback=Feedback())
    assert (res["TRAIN"], res["TEST"]) == (str(tmp_path / "q_train.tif"),
                                           str(tmp_path / "q_test.tif"))
    run_ok("split", "--reference", pines / "indian_pines_gt.tif", "--per-class", "10",
           "--seed", "7", tmp_path / "c_train.tif", tmp_path / "c_test.tif")
    assert_same_raster(tmp_path / "q_train.tif", tmp_path / "c_train.tif")
    assert_same_raster(tmp_path / "q_test.tif", tmp_path / "c_test.tif")
    train, _, _ = read_tif(tmp_path / "q_train.tif")
    assert 0 < np.count_nonzero(train) <= 16 * 10  # TRAIN first: the order of "files"


def test_class_map_output_loads_as_a_paletted_layer(qgis, pines, tmp_path):
    from qgis.core import QgsProcessingOutputLayerDefinition, QgsProject
    run_ok("train", "--labels", pines / "indian_pines_train.tif", "--grid", SMALL_GRID,
           pines / "pc.tif", tmp_path / "m.model")
    out = str(tmp_path / "loaded.tif")
    context = QgsProcessingContext()
    context.setProject(QgsProject.instance())
    qgis["processing"].run("hyprof:classify", {
        "FEATURES": str(pines / "pc.tif"), "MODEL": str(tmp_path / "m.model"),
        "OUTPUT": QgsProcessingOutputLayerDefinition(out, QgsProject.instance())},
        context=context, feedback=Feedback())
    assert context.willLoadLayerOnCompletion(out)
    styler = context.layerToLoadOnCompletionDetails(out).postProcessor()
    layer = QgsRasterLayer(out, "classes", "gdal")
    fb = Feedback()
    styler.postProcessLayer(layer, context, fb)
    r = layer.renderer()
    assert isinstance(r, QgsPalettedRasterRenderer)
    labels = [(int(c.value), c.label) for c in r.classes()]
    del layer, r
    # the training map's class names, from its .aux.xml (GDAL inside a QGIS
    # application does not read PAM files)
    import xml.etree.ElementTree as ET
    names = [c.text for c in ET.parse(pines / "indian_pines_train.tif.aux.xml").iter("Category")]
    assert labels == [(v, n) for v, n in enumerate(names) if v and n]
    assert labels[0] == (1, "Alfalfa") and len(labels) == 16
    assert any("styled as a class map" in i for i in fb.infos)


def test_unmix_side_files_are_outputs(qgis, registry, tmp_path):
    """Side files (beside_output) left empty are where the CLI writes them,
    returned as outputs; named ones go where they are named."""
    if "unmix" not in {o["name"] for o in registry["operations"]}:
        pytest.skip("unmix is not in describe --json")
    params = {"INPUT": str(sample("samson.tif")), "ENDMEMBERS": "3", "EXTRACT": "vca"}
    res = qgis["processing"].run("hyprof:unmix", dict(params, OUTPUT=str(tmp_path / "q.tif")),
                                 feedback=Feedback())
    assert res["ENDMEMBERS_CSV"] == str(tmp_path / "q.csv")
    assert res["ENDMEMBERS_JSON"] == str(tmp_path / "q.json")
    run_ok("unmix", "--endmembers", "3", "--extract", "vca", sample("samson.tif"),
           tmp_path / "c.tif")
    assert_same_raster(tmp_path / "q.tif", tmp_path / "c.tif")
    assert (tmp_path / "q.csv").read_bytes() == (tmp_path / "c.csv").read_bytes()
    res = qgis["processing"].run("hyprof:unmix", dict(
        params, OUTPUT=str(tmp_path / "n.tif"), ENDMEMBERS_CSV=str(tmp_path / "named.csv")),
        feedback=Feedback())
    assert res["ENDMEMBERS_CSV"] == str(tmp_path / "named.csv")
    assert (tmp_path / "named.csv").read_bytes() == (tmp_path / "c.csv").read_bytes()


def test_profile_stack_keeps_band_names(qgis, tmp_path):
    out = tmp_path / "p.tif"
    qgis["processing"].run("hyprof:eadp", {"INPUT": str(sample("samson.tif")), "COUNT": 1, "COMPONENTS": 2,
                                           "OUTPUT": str(out)})
    _, names, _ = read_tif(out)
    layer = QgsRasterLayer(str(out), "p", "gdal")
    shown = [layer.bandName(i + 1) for i in range(layer.bandCount())]
    del layer
    assert names == ["PC1", "PC1 T=65", "PC2", "PC2 T=65"]
    assert [s.split(": ", 1)[1] for s in shown] == names


def test_class_map_is_styled_with_its_classes(qgis, tmp_path):
    from hyprof.styling import style_output
    path = str(tmp_path / "classes.tif")
    ds = gdal.GetDriverByName("GTiff").Create(path, 6, 5, 1, gdal.GDT_Byte)
    ds.SetGeoTransform((0, 1, 0, 5, 0, -1))
    band = ds.GetRasterBand(1)
    band.WriteArray(np.arange(30, dtype=np.uint8).reshape(5, 6) % 3)
    band.SetNoDataValue(0)
    ct = gdal.ColorTable()
    for v, rgba in enumerate([(0, 0, 0, 0), (255, 0, 0, 255), (0, 128, 0, 255)]):
        ct.SetColorEntry(v, rgba)
    band.SetColorTable(ct)
    band.SetCategoryNames(["", "Corn", "Woods"])
    ds = band = None
    layer = QgsRasterLayer(path, "classes", "gdal")
    assert style_output(layer)
    r = layer.renderer()
    assert isinstance(r, QgsPalettedRasterRenderer)
    classes = [(c.value, c.label, c.color.name()) for c in r.classes()]
    del layer, r
    assert classes == [(1.0, "Corn", "#ff0000"), (2.0, "Woods", "#008000")]


def test_outputs_loaded_into_a_project_get_the_styler(qgis, tmp_path):
    """Raster outputs that Processing will load carry the post-processor: a
    stack of features is shown as one grey band stretched to its range
    (QGIS' default would be a false-colour RGB of bands 1-3)."""
    from qgis.core import QgsProcessingOutputLayerDefinition, QgsProject
    from hyprof.styling import OutputStyler
    out = str(tmp_path / "loaded.tif")
    context = QgsProcessingContext()
    context.setProject(QgsProject.instance())
    qgis["processing"].run("hyprof:pca", {
        "INPUT": str(sample("samson.tif")), "COMPONENTS": 3,
        "OUTPUT": QgsProcessingOutputLayerDefinition(out, QgsProject.instance())},
        context=context, feedback=Feedback())
    assert context.willLoadLayerOnCompletion(out)
    styler = context.layerToLoadOnCompletionDetails(out).postProcessor()
    assert isinstance(styler, OutputStyler)
    layer = QgsRasterLayer(out, "loaded", "gdal")
    before = type(layer.renderer()).__name__
    fb = Feedback()
    styler.postProcessLayer(layer, context, fb)
    r = layer.renderer()
    after = type(r).__name__
    ce = r.contrastEnhancement()
    shown = (r.grayBand(), ce.minimumValue(), ce.maximumValue())
    del layer, r, ce
    assert before == "QgsMultiBandColorRenderer"
    assert after == "QgsSingleBandGrayRenderer"
    pc1 = read_tif(out)[0][0]
    assert shown == (1, pytest.approx(float(np.nanmin(pc1)), rel=1e-6),
                     pytest.approx(float(np.nanmax(pc1)), rel=1e-6))
    assert any("band 1 of 3 shown in grey" in i for i in fb.infos), fb.infos


def test_cancel_stops_the_executable_and_leaves_no_output(qgis, tmp_path):
    fb = Feedback(cancel_at_first_progress=True)
    out = tmp_path / "cancelled.tif"
    with pytest.raises(QgsProcessingException) as e:
        # a long run: many FED cycles on the larger sample, one thread
        qgis["processing"].run("hyprof:eadp", {
            "INPUT": str(sample("indian_pines.tif")), "CYCLES": 200, "COUNT": 16, "THREADS": 1,
            "OUTPUT": str(out)}, feedback=fb)
    assert fb.isCanceled()
    messages = " ".join(fb.warnings + fb.infos + [str(e.value)])
    assert "cancelled (exit 3)" in messages, messages  # SIGTERM reached it: exit 3
    assert files_in(tmp_path) == []
    pid = int(next(d for d in fb.debug if d.startswith("hyprof pid")).split()[-1])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped


def test_a_bad_list_value_is_refused_before_running(qgis, tmp_path):
    fb = Feedback()
    with pytest.raises(QgsProcessingException):
        qgis["processing"].run("hyprof:eadp", {"INPUT": str(sample("samson.tif")), "TIMES": "10,abc",
                                               "OUTPUT": str(tmp_path / "x.tif")}, feedback=fb)
    assert not fb.commands, "the executable ran"
    assert files_in(tmp_path) == []
    alg = QgsApplication.processingRegistry().algorithmById("hyprof:eadp")
    ok, msg = alg.checkParameterValues({"INPUT": str(sample("samson.tif")), "TIMES": "10,abc",
                                        "OUTPUT": str(tmp_path / "x.tif")},
                                       QgsProcessingContext())
    assert not ok and "TIMES" in msg and "abc" in msg


def test_cli_errors_reach_the_log(qgis, tmp_path):
    fb = Feedback()
    with pytest.raises(QgsProcessingException):
        qgis["processing"].run("hyprof:pca", {"INPUT": str(sample("samson.tif")), "COMPONENTS": 100000,
                                              "OUTPUT": str(tmp_path / "x.tif")}, feedback=fb)
    assert any("components" in w for w in fb.warnings), fb.warnings
    assert files_in(tmp_path) == []


# ---- finding the executable -------------------------------------------------------------

@pytest.fixture
def reload_provider(qgis, monkeypatch):
    """Reloads the provider after the test changed where the executable is."""
    yield qgis["provider"]
    monkeypatch.undo()
    QgsSettings().remove("Processing/Configuration/HYPROF_EXECUTABLE")
    qgis["provider"].refreshAlgorithms()
    assert qgis["provider"].engine.exe


def test_missing_executable_is_said_and_raises(qgis, registry, tmp_path, reload_provider):
    from hyprof.algorithm import HyprofAlgorithm
    from hyprof.engine import Engine, find_executable
    missing = str(tmp_path / "nowhere" / "hyprof")
    QgsSettings().setValue("Processing/Configuration/HYPROF_EXECUTABLE", missing)
    provider = reload_provider
    provider.refreshAlgorithms()
    assert "executable not found" in provider.longName() and missing in provider.longName()
    exe, problem = find_executable()
    assert exe is None and missing in problem
    # algorithms known from an installed describe.json say so and refuse to run
    engine = Engine(None, problem, registry)
    alg = HyprofAlgorithm(registry["operations"][0], engine).create()
    assert "executable was not found" in alg.shortHelpString()
    with pytest.raises(QgsProcessingException, match="cannot run: the Processing setting"):
        alg.processAlgorithm({"INPUT": str(sample("samson.tif")), "OUTPUT": str(tmp_path / "x.tif")},
                             QgsProcessingContext(), Feedback())
    assert not (tmp_path / "x.tif").exists()


def test_executable_found_beside_the_plugin_or_on_path(qgis, tmp_path, monkeypatch,
                                                       reload_provider):
    from hyprof import engine
    monkeypatch.delenv("HYPROF_EXE")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(engine, "PLUGIN_DIR", str(tmp_path))
    exe, problem = engine.find_executable()
    assert exe is None and "no hyprof executable found" in problem and "PATH" in problem
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "hyprof").symlink_to(exe_path())
    assert engine.find_executable() == (str(tmp_path / "bin" / "hyprof"), None)
    (tmp_path / "bin" / "hyprof").unlink()
    (tmp_path / "executable.txt").write_text(exe_path() + "\n")  # cmake --install's record
    assert engine.find_executable() == (exe_path(), None)
    (tmp_path / "executable.txt").unlink()
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % Path(exe_path()).parent)
    assert engine.find_executable() == (str(Path(exe_path())), None)


# ---- qgis_process -------------------------------------------------------------------------

def qgis_process_env(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", QGIS_PLUGINPATH=str(PLUGIN_ROOT),
               QGIS_CUSTOM_CONFIG_PATH=str(tmp_path / "profile"), HYPROF_EXE=exe_path())
    return env


def qgis_process(env, *args):
    exe = shutil.which("qgis_process.bin") or pytest.skip("qgis_process.bin is not installed")
    r = subprocess.run([exe] + [str(a) for a in args], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, "qgis_process %s -> %d\n%s\n%s" % (
        " ".join(map(str, args)), r.returncode, r.stdout, r.stderr)
    return r


def test_qgis_process_run_equals_the_cli(tmp_path):
    env = qgis_process_env(tmp_path)
    qgis_process(env, "plugins", "enable", "hyprof")
    listing = qgis_process(env, "list").stdout
    assert "hyprof:eadp" in listing
    ours = tmp_path / "qp.tif"
    r = qgis_process(env, "run", "hyprof:eadp", "--json", "--INPUT=%s" % sample("samson.tif"), "--count=2",
                     "--components=3", "--diffusivity=g1", "--OUTPUT=%s" % ours)
    results = json.loads(r.stdout[r.stdout.index("{"):])["results"]
    assert results["OUTPUT"] == str(ours)
    theirs = tmp_path / "cli.tif"
    run_ok("eadp", "--count", "2", "--components", "3", "--diffusivity", "g1",
           sample("samson.tif"), theirs)
    assert_same_raster(ours, theirs)


def test_cmake_install_gives_a_plugin_that_says_what_is_missing(registry, tmp_path):
    """`cmake --install --component qgis` (under DESTDIR) installs the plugin
    with the registry and the executable's install path; with no executable
    there, the toolbox still lists every operation and running one fails with
    the reason."""
    build = Path(exe_path()).resolve().parents[1]
    if not (build / "cmake_install.cmake").is_file():
        pytest.skip("%s is not a CMake build folder" % build)
    dest, prefix = tmp_path / "destdir", tmp_path / "prefix"
    r = subprocess.run(["cmake", "--install", str(build), "--component", "qgis", "--prefix",
                        str(prefix)], env=dict(os.environ, DESTDIR=str(dest)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    plugin = next(dest.rglob("hyprof/metadata.txt")).parent
    assert "hasProcessingProvider=yes" in (plugin / "metadata.txt").read_text()
    assert json.loads((plugin / "describe.json").read_text()) == registry
    assert (plugin / "executable.txt").read_text().strip() == str(prefix / "bin" / "hyprof")
    env = qgis_process_env(tmp_path)
    del env["HYPROF_EXE"]
    env.update(QGIS_PLUGINPATH=str(plugin.parent), PATH="/usr/bin:/bin")
    if shutil.which("hyprof", path=env["PATH"]):
        pytest.skip("a hyprof executable is installed in /usr/bin")
    qgis_process(env, "plugins", "enable", "hyprof")
    listing = qgis_process(env, "list").stdout
    for op in registry["operations"]:
        assert "hyprof:%s" % op["name"] in listing
    exe = shutil.which("qgis_process.bin")
    r = subprocess.run([exe, "run", "hyprof:pca", "--INPUT=%s" % sample("samson.tif"),
                        "--OUTPUT=%s" % (tmp_path / "x.tif")], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0
    assert "hyprof pca cannot run: no hyprof executable found" in r.stdout + r.stderr
    assert not (tmp_path / "x.tif").exists()


# ---- the sample graphical model ---------------------------------------------------------------

def test_sample_model_runs_in_qgis_process(registry, tmp_path):
    ops = {o["name"] for o in registry["operations"]}
    needed = {"train", "classify", "assess"}
    if not needed <= ops:
        pytest.skip("the sample model needs %s (not in describe --json yet)"
                    % ", ".join(sorted(needed - ops)))
    sys.path.insert(0, str(ROOT / "samples"))
    import make_model
    # make_model.py still builds a valid model from today's registry (it refuses
    # to write an invalid one)...
    model = tmp_path / "workflow.model3"
    subprocess.run([sys.executable, str(ROOT / "samples" / "make_model.py"), str(model)],
                   env=qgis_process_env(tmp_path), check=True, timeout=300)
    assert model.stat().st_size > 0
    # ...and the committed one (Qt orders XML attributes at random: not compared
    # as text) runs in qgis_process like the CLI
    committed = ROOT / "samples" / "hyprof_workflow.model3"
    assert committed.is_file(), "run samples/make_model.py"
    make_model.check_runs(committed, tmp_path, qgis_process_env(tmp_path), exe_path())
