"""One Processing algorithm per hyprof operation, built from its entry in
`hyprof describe --json` (see params.py for the mapping)."""

import html
import os

from qgis.core import QgsProcessingAlgorithm, QgsProcessingException

from . import runner
from .engine import EngineError
from .params import (LAYER_OPTION, PROVIDER_OWNED, RASTER_EXTENSIONS, Param, beside_path,
                     label, layer_path, positionals, stdout_output, vector_source)
from .docs import help_url
from .styling import OutputStyler


def group_id(group):
    return group.lower().replace(" ", "_")


class HyprofAlgorithm(QgsProcessingAlgorithm):
    def __init__(self, op, engine):
        super().__init__()
        self._op = op
        self._engine = engine
        params = op.get("params", [])
        # with a vector input the provider names the layer itself (vector_source)
        vector = any(p["type"] == "vector_in" for p in params)
        self._layer_option = vector and any(p["name"] == LAYER_OPTION for p in params)
        self._params = [Param(p) for p in params
                        if not (self._layer_option and p["name"] == LAYER_OPTION)]
        self._params += [Param(p, advanced=True) for p in engine.common
                         if p["name"] not in PROVIDER_OWNED]
        self._files = positionals(op)

    def createInstance(self):  # noqa: N802
        return HyprofAlgorithm(self._op, self._engine)

    # ---- what the toolbox shows --------------------------------------------------
    def name(self):
        return self._op["name"]

    def displayName(self):  # noqa: N802
        return "%s (%s)" % (self._op.get("summary") or self._op["name"], self._op["name"])

    def group(self):
        return self._op.get("group", "")

    def groupId(self):  # noqa: N802
        return group_id(self.group())

    def tags(self):
        return ["hyprof", "hyperspectral", self._op["name"]]

    def shortHelpString(self):  # noqa: N802
        parts = []
        if not self._engine.exe:
            parts.append("<p><b>The hyprof executable was not found</b>: %s.</p>"
                         % html.escape(self._engine.problem or ""))
        parts.append("<p>%s</p>" % html.escape(self._op.get("help", "")))
        result = self._op.get("result") or (self._op.get("output") or {}).get("description")
        if result:
            parts.append("<p><b>Output</b>: %s</p>" % html.escape(result))
        parts.append("<p>Command line: <code>hyprof %s [options] %s</code> "
                     "(<code>hyprof %s --help</code>).</p>"
                     % (self._op["name"], " ".join(f.name for f in self._files),
                        self._op["name"]))
        return "".join(parts)

    def helpUrl(self):  # noqa: N802
        return help_url(self._op["name"], self._engine.exe)

    def helpString(self):  # noqa: N802
        rows = "".join("<li><b>%s</b> (%s, <code>--%s</code>): %s</li>"
                       % (html.escape(label(p.reg)), p.name, p.reg["name"],
                          html.escape(p.reg.get("help", ""))) for p in self._params)
        return self.shortHelpString() + "<ul>%s</ul>" % rows

    # ---- parameters -----------------------------------------------------------------
    def initAlgorithm(self, config=None):  # noqa: N802
        # inputs first, outputs last: the order of the dialog and of qgis_process help
        for f in self._files:
            if not f.is_output:
                self.addParameter(f.definition())
        for p in self._params:
            self.addParameter(p.definition())
        for f in self._files:
            if f.is_output:
                self.addParameter(f.definition())
        report = stdout_output(self._op)
        if report is not None:
            self.addOutput(report)

    def with_current_names(self, parameters):
        """`parameters` with the lower-case names of earlier versions
        (class_field, from saved scripts and qgis_process command lines)
        renamed to the current ones (CLASS_FIELD); a current name wins."""
        out = dict(parameters)
        for p in self._params:
            if p.legacy != p.name and p.legacy in out:
                value = out.pop(p.legacy)
                out.setdefault(p.name, value)
        return out

    def checkParameterValues(self, parameters, context):  # noqa: N802
        parameters = self.with_current_names(parameters)
        ok, msg = super().checkParameterValues(parameters, context)
        if not ok:
            return ok, msg
        for p in self._params:
            if p.type in ("int_list", "float_list") and parameters.get(p.name) is not None:
                problem = p.check_list(self.parameterAsString(parameters, p.name, context))
                if problem:
                    return False, problem
        return True, ""

    # ---- running --------------------------------------------------------------------
    def processAlgorithm(self, parameters, context, feedback):  # noqa: N802
        op = self._op["name"]
        parameters = self.with_current_names(parameters)
        try:
            exe = self._engine.require(op)
        except EngineError as e:
            raise QgsProcessingException(str(e)) from e
        argv, outputs = self._command(exe, parameters, context, feedback)
        res = runner.run(argv, feedback)
        if res.cancelled:
            runner.remove_leftovers([v for v, _ in outputs.values()], res.pid)
            raise QgsProcessingException(
                "hyprof %s: cancelled (exit %d); no output was written" % (op, res.returncode))
        if res.returncode != 0:
            raise QgsProcessingException("hyprof %s failed (exit %d): %s" % (
                op, res.returncode, res.last_error or "no message"))
        for path, raster in outputs.values():
            if raster and context.willLoadLayerOnCompletion(path):
                context.layerToLoadOnCompletionDetails(path).setPostProcessor(
                    OutputStyler.create())
        results = {name: path for name, (path, _) in outputs.items()}
        report = stdout_output(self._op)
        if report is not None:
            results[report.name()] = res.stdout
        return results

    def _command(self, exe, parameters, context, feedback):
        """argv (a list, never a shell string) and {output name: (path, is_raster)}."""
        argv = [exe, self._op["name"], "--progress", "json", "--overwrite"]
        outputs = {}
        for p in self._params:
            if p.type == "vector_in":
                path, layer = vector_source(self, parameters, p.name, context, feedback)
                if path:
                    argv += p.cli(path)
                    if layer and self._layer_option:
                        argv.append("--%s=%s" % (LAYER_OPTION, layer))
                continue
            v = p.value(self, parameters, context)
            if v is not None:
                argv += p.cli(v)
                if p.is_output:
                    outputs[p.name] = (v, p.is_raster_output)
        argv.append("--")  # paths that start with '-' stay paths
        for f in self._files:  # in the order of describe's "files"
            argv.append(self._file_path(f, parameters, context))
            if f.is_output:
                outputs[f.name] = (argv[-1], f.is_raster_output)
        self._beside_outputs(outputs)
        return argv, outputs

    def _beside_outputs(self, outputs):
        """Side files the CLI names after the first raster output when not given."""
        main = next((outputs[f.name][0] for f in self._files if f.is_raster_output), None)
        for p in self._params:
            if p.reg.get("beside_output") and p.name not in outputs:
                path = beside_path(main, p.reg.get("file_filter"))
                if path:
                    outputs[p.name] = (path, False)

    def _file_path(self, f, parameters, context):
        name = f.name
        if not f.is_output:
            layer = self.parameterAsRasterLayer(parameters, name, context)
            if layer is None:
                raise QgsProcessingException("hyprof %s: %s is not a raster layer: %s"
                                             % (self._op["name"], name, parameters.get(name)))
            return layer_path(layer, name)
        if f.is_raster_output:
            path = self.parameterAsOutputLayer(parameters, name, context)
            if os.path.splitext(path)[1].lower().lstrip(".") not in RASTER_EXTENSIONS:
                raise QgsProcessingException(
                    "hyprof %s writes GeoTIFF: name %s with .tif (got '%s')"
                    % (self._op["name"], name, path))
            return path
        path = self.parameterAsFileOutput(parameters, name, context)
        if not path:
            raise QgsProcessingException("hyprof %s: no path for %s" % (self._op["name"], name))
        return path
