"""One Processing algorithm per hyprof operation, built from its entry in
`hyprof describe --json` (see params.py for the mapping)."""

import html
import os

from qgis.core import (
    QgsProcessingAlgorithm,
    QgsProcessingException,
    QgsProcessingParameterRasterLayer,
)

from . import runner
from .engine import EngineError
from .params import PROVIDER_OWNED, RASTER_EXTENSIONS, Param, layer_path, output_definition
from .styling import OutputStyler


def group_id(group):
    return group.lower().replace(" ", "_")


class HyprofAlgorithm(QgsProcessingAlgorithm):
    def __init__(self, op, engine):
        super().__init__()
        self._op = op
        self._engine = engine
        self._params = [Param(p) for p in op.get("params", [])]
        self._params += [Param(p, advanced=True) for p in engine.common
                         if p["name"] not in PROVIDER_OWNED]
        self._input = op.get("input")
        self._output = op.get("output")

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
        if self._output:
            parts.append("<p><b>Output</b>: %s</p>"
                         % html.escape(self._output.get("description", "")))
        parts.append("<p>Command line: <code>hyprof %s [options] INPUT OUTPUT</code> "
                     "(<code>hyprof %s --help</code>).</p>"
                     % (self._op["name"], self._op["name"]))
        return "".join(parts)

    def helpString(self):  # noqa: N802
        rows = "".join("<li><b>%s</b>: %s</li>" % (p.name, html.escape(p.reg.get("help", "")))
                       for p in self._params)
        return self.shortHelpString() + "<ul>%s</ul>" % rows

    # ---- parameters -----------------------------------------------------------------
    def initAlgorithm(self, config=None):  # noqa: N802
        if self._input:
            self.addParameter(QgsProcessingParameterRasterLayer(
                self._input.get("name", "INPUT"), "Input raster"))
        for p in self._params:
            self.addParameter(p.definition())
        if self._output:
            out, _ = output_definition(self._output)
            if out is not None:
                self.addParameter(out)

    def checkParameterValues(self, parameters, context):  # noqa: N802
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
        try:
            exe = self._engine.require(op)
        except EngineError as e:
            raise QgsProcessingException(str(e)) from e
        argv, outputs = self._command(exe, parameters, context)
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
        return {name: path for name, (path, _) in outputs.items()}

    def _command(self, exe, parameters, context):
        """argv (a list, never a shell string) and {output name: (path, is_raster)}."""
        argv = [exe, self._op["name"], "--progress", "json", "--overwrite"]
        outputs = {}
        for p in self._params:
            v = p.value(self, parameters, context)
            if v is not None:
                argv += p.cli(v)
                if p.is_output:
                    outputs[p.name] = (v, p.is_raster_output)
        argv.append("--")  # paths that start with '-' stay paths
        if self._input:
            name = self._input.get("name", "INPUT")
            layer = self.parameterAsRasterLayer(parameters, name, context)
            if layer is None:
                raise QgsProcessingException("hyprof %s: %s is not a raster layer: %s"
                                             % (self._op["name"], name, parameters.get(name)))
            argv.append(layer_path(layer, name))
        if self._output:
            out_def, kind = output_definition(self._output)
            if out_def is not None:
                argv.append(self._output_path(out_def, kind, parameters, context))
                outputs[out_def.name()] = (argv[-1], kind == "raster")
        return argv, outputs

    def _output_path(self, definition, kind, parameters, context):
        name = definition.name()
        if kind == "raster":
            path = self.parameterAsOutputLayer(parameters, name, context)
            if os.path.splitext(path)[1].lower().lstrip(".") not in RASTER_EXTENSIONS:
                raise QgsProcessingException(
                    "hyprof %s writes GeoTIFF: name %s with .tif (got '%s')"
                    % (self._op["name"], name, path))
            return path
        return self.parameterAsFileOutput(parameters, name, context)
