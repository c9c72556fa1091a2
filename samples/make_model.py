#!/usr/bin/python3
"""Writes the sample graphical model samples/hyprof_workflow.model3:

    cube -> hyprof:eadp -> hyprof:classify (a saved SVM model) -> hyprof:assess

Inputs `cube` (raster), `svm_model` (the file `hyprof train` wrote) and
`reference` (a reference class map); outputs the class map and the accuracy
report. The child algorithms' parameters are found by their registry types
(`hyprof describe --json`), not by name: the positional files (FEATURES,
OUTPUT, CLASSMAP) by their kinds in "files", classify's model is its file_in
parameter, assess's reference its raster_in parameter, the report its HTML
output.

    QT_QPA_PLATFORM=offscreen QGIS_PLUGINPATH=$PWD/qgis_provider \\
    HYPROF_EXE=$PWD/build/cli/hyprof /usr/bin/python3 samples/make_model.py [OUT.model3]

Then, headless (a model's outputs are named CHILD:OUTPUT):

    qgis_process.bin run samples/hyprof_workflow.model3 --cube=samples/indian_pines.tif \\
        --svm_model=ip_eadp.model --reference=samples/indian_pines_test.tif \\
        --classify:class_map=classes.tif --assess:report=report.html

where ip_eadp.model is an SVM trained on the same EADP profile (defaults):

    hyprof eadp samples/indian_pines.tif ip_eadp.tif
    hyprof train --labels samples/indian_pines_train.tif ip_eadp.tif ip_eadp.model

The model file is an input of the workflow, not a sample (about 600 KB of
support vectors for the Indian Pines profile).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "samples" / "hyprof_workflow.model3"
STEPS = ("eadp", "classify", "assess")


def registry(exe):
    return json.loads(subprocess.run([exe, "describe", "--json"], check=True,
                                     capture_output=True, text=True).stdout)


def ops_by_name(reg):
    ops = {o["name"]: o for o in reg["operations"]}
    missing = [s for s in STEPS + ("train",) if s not in ops]
    if missing:
        sys.exit("make_model.py: hyprof describe --json has no %s yet" % ", ".join(missing))
    return ops


def first_option(op, *types, html=False):
    """The registry name of op's first parameter of one of `types`."""
    for p in op["params"]:
        if p["type"] in types and (not html or "*.htm" in p.get("file_filter", "").lower()):
            return p["name"]
    return None


def first_param(op, *types, html=False):
    """The Processing name of op's first parameter of one of `types`."""
    sys.path.insert(0, str(ROOT / "qgis_provider"))
    from hyprof.params import qgis_name
    name = first_option(op, *types, html=html)
    return qgis_name(name) if name else None


def first_file(op, kind):
    """The name of op's first positional file argument of `kind` (raster_in,
    raster_out, file_out), as the provider maps it."""
    sys.path.insert(0, str(ROOT / "qgis_provider"))
    from hyprof.params import positionals
    return next((f.name for f in positionals(op) if f.kind == kind), None)


def html_output(op):
    """The output of assess that holds the HTML report: its HTML positional
    output when it has one, else its HTML file_out parameter."""
    sys.path.insert(0, str(ROOT / "qgis_provider"))
    from hyprof.params import positionals
    html = [f.name for f in positionals(op) if f.output_kind == "html"]
    return html[0] if html else first_param(op, "file_out", html=True)


def html_option(op):
    """The CLI option of assess's HTML report."""
    return "--" + first_option(op, "file_out", html=True)


def build(ops):
    from qgis.core import (
        QgsProcessingModelAlgorithm,
        QgsProcessingModelChildAlgorithm,
        QgsProcessingModelChildParameterSource as Source,
        QgsProcessingModelOutput,
        QgsProcessingModelParameter,
        QgsProcessingParameterFile,
        QgsProcessingParameterRasterLayer,
    )
    from qgis.PyQt.QtCore import QPointF

    model = QgsProcessingModelAlgorithm("EADP classification workflow", "hyprof", "hyprof")
    classify_model = first_param(ops["classify"], "file_in")
    reference = first_param(ops["assess"], "raster_in")
    features, class_map = first_file(ops["classify"], "raster_in"), first_file(
        ops["classify"], "raster_out")
    eadp_in, eadp_out = first_file(ops["eadp"], "raster_in"), first_file(ops["eadp"],
                                                                         "raster_out")
    scored, report = first_file(ops["assess"], "raster_in"), html_output(ops["assess"])
    if not all((classify_model, reference, features, class_map, eadp_in, eadp_out, scored,
                report)):
        sys.exit("make_model.py: classify needs a raster input and output and a file_in "
                 "(model) parameter, assess a raster input, a raster_in (reference) "
                 "parameter and an HTML output")
    inputs = [
        QgsProcessingParameterRasterLayer("cube", "Hyperspectral cube"),
        QgsProcessingParameterFile("svm_model", "SVM model (from hyprof train)",
                                   fileFilter="All files (*)"),
        QgsProcessingParameterRasterLayer("reference", "Reference class map"),
    ]
    for i, definition in enumerate(inputs):
        param = QgsProcessingModelParameter(definition.name())
        param.setPosition(QPointF(120, 80 + 120 * i))
        model.addModelParameter(definition, param)

    def child(step, x, sources, outputs):
        c = QgsProcessingModelChildAlgorithm("hyprof:" + step)
        c.setChildId(step)
        c.setDescription(ops[step]["summary"])
        c.setPosition(QPointF(x, 200))
        for name, source in sources.items():
            c.addParameterSources(name, [source])
        outs = {}
        for out_name, child_output in outputs.items():
            o = QgsProcessingModelOutput(out_name)
            o.setChildId(step)
            o.setChildOutputName(child_output)
            outs[out_name] = o
        c.setModelOutputs(outs)
        model.addChildAlgorithm(c)

    child("eadp", 400, {eadp_in: Source.fromModelParameter("cube")}, {})
    child("classify", 650, {features: Source.fromChildOutput("eadp", eadp_out),
                            classify_model: Source.fromModelParameter("svm_model")},
          {"class_map": class_map})
    child("assess", 900, {scored: Source.fromChildOutput("classify", class_map),
                          reference: Source.fromModelParameter("reference")},
          {"report": report})
    return model


def main(out):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from qgis.core import QgsApplication
    app = QgsApplication([], False)
    app.initQgis()
    sys.path.insert(0, "/usr/share/qgis/python/plugins")
    sys.path.insert(0, str(ROOT / "qgis_provider"))
    from processing.core.Processing import Processing
    Processing.initialize()
    import hyprof
    plugin = hyprof.classFactory(None)
    plugin.initProcessing()
    if not plugin.provider.engine.exe:
        sys.exit("make_model.py: %s" % plugin.provider.engine.problem)
    model = build(ops_by_name(plugin.provider.engine.registry))
    ok, errors = model.validate()
    if not ok:
        sys.exit("make_model.py: the model is not valid: %s" % "; ".join(errors))
    if not model.toFile(str(out)):
        sys.exit("make_model.py: cannot write %s" % out)
    print("make_model.py: wrote %s" % out)
    plugin.unload()
    app.exitQgis()


def check_runs(model, work, env, exe):
    """Trains with the CLI, runs the model in qgis_process, and checks its class
    map against `hyprof classify` on the CLI's own EADP stack and its HTML
    report against `hyprof assess --html` on that class map (tests call this)."""
    ops = ops_by_name(registry(exe))
    # copies: QGIS writes statistics (.aux.xml) beside the rasters it opens
    cube, train, test = (work / n for n in ("indian_pines.tif", "indian_pines_train.tif",
                                            "indian_pines_test.tif"))
    for p in (cube, train, test):
        shutil.copy(ROOT / "samples" / p.name, p)

    def cli(*args):
        subprocess.run([exe] + [str(a) for a in args], check=True, capture_output=True)

    def opt(op, kind):
        return "--" + first_option(ops[op], kind)

    eadp, svm = work / "eadp.tif", work / "ip_eadp.model"
    cli("eadp", cube, eadp)
    cli("train", opt("train", "raster_in"), train, eadp, svm)
    classes, report = work / "model_classes.tif", work / "model_report.html"
    subprocess.run(["qgis_process.bin", "plugins", "enable", "hyprof"], env=env, check=True,
                   capture_output=True, timeout=300)
    qp = subprocess.run(["qgis_process.bin", "run", str(model), "--cube=%s" % cube,
                         "--svm_model=%s" % svm, "--reference=%s" % test,
                         "--classify:class_map=%s" % classes, "--assess:report=%s" % report],
                        env=env, capture_output=True, text=True, timeout=900)
    assert qp.returncode == 0, qp.stdout + qp.stderr
    theirs = work / "cli_classes.tif"
    cli("classify", opt("classify", "file_in"), svm, eadp, theirs)
    from osgeo import gdal
    import numpy as np
    a, b = (gdal.Open(str(p)).ReadAsArray() for p in (classes, theirs))
    assert np.array_equal(a, b), "the model's class map differs from the CLI's"
    assert a.max() > 0
    # the same class map file scored by the CLI: the report names it, so the same path
    cli_report = work / "cli_report.html"
    cli("assess", opt("assess", "raster_in"), test, html_option(ops["assess"]), cli_report,
        classes)
    assert report.read_bytes() == cli_report.read_bytes(), "the model's report differs"


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
