"""The registry's parameter types, mapped onto Processing parameters.

One mapping for every operation, driven by `hyprof describe --json` alone (no
per-operation code), so operations added to the registry appear in the toolbox
as they are:

registry type        Processing parameter                    CLI argument
int, float           Number (Integer/Double; min, max, def)  --name=N
choice               Enum with static strings                --name=VALUE
bool                 Boolean                                 --name=true|false
string               String                                  --name=TEXT
int_list, float_list String, each element checked           --name=A,B,...
file_in              File (the registry's file filter)       --name=PATH
vector_in            Feature source (points, polygons; any   --name=PATH (+ --layer=NAME)
                     provider, "selected features only")
field                Field of the vector_in parameter named  --name=FIELD
                     in the registry's "parent"
file_out             File destination (filter); an HTML      --name=PATH
                     filter gives an HTML output, a raster
                     filter (*.tif) a raster destination
raster_in            Raster layer (GDAL layers)              --name=PATH
raster_out           Raster destination (GeoTIFF)            --name=PATH
anything else        String, passed as it is                 --name=TEXT

Positional file arguments. An operation with a "files" entry (train,
classify, assess, split) lists them in command-line order; each becomes a
parameter of that name, passed in that order after "--":

files type   Processing parameter                    on the command line
raster_in    Raster layer (GDAL layers)              the layer's file
raster_out   Raster destination (GeoTIFF)            the path
file_out     File destination, filter from the        the path
             "result" entry's first word ("model
             file ..." -> *.model, json, csv, html)

Its "result" entry says what else it produces: "<word> on stdout ..." (assess's
report) becomes a string output <WORD> (e.g. REPORT) holding the CLI's stdout,
text or JSON as the options ask. A file_out parameter flagged "beside_output"
(unmix's endmember spectra) that is left empty is still an output: the CLI
writes it beside the first raster output with the filter's extension, and the
provider returns that path.

Operations without "files" take INPUT OUTPUT. The positional INPUT is a raster layer. The positional OUTPUT follows the
operation's "output" entry: its "type", refined by the first word of its
description ("raster: ...", "model: ...", "html: ...", "json: ..."):
raster -> GeoTIFF raster destination; html/report -> HTML file destination
(shown in the results viewer); model/file/json/csv/text -> file destination
with the entry's "file_filter" (or one made from "format"); "none" or no
entry -> no OUTPUT.

A feature source that is not a file GDAL reads as it is (a memory or PostGIS
layer, the selected features only, a subset) is written to a temporary
GeoPackage first (the CLI reprojects it to the raster's grid); the layer name
inside a multi-layer file goes to the operation's `layer` option, which the
provider therefore sets itself instead of showing it.

Names: Processing's convention, UPPER_CASE with underscores (--class-field ->
CLASS_FIELD); the lower-case names of earlier versions (class_field) are still
accepted from scripts and qgis_process (HyprofAlgorithm.with_current_names). Labels are written
for people from the registry name (acronyms upper-case; a float parameter whose
range lies within 0..1 says it is a fraction).

Values equal to the registry's default are not passed: the CLI then applies
its own default rules (e.g. eap's --features is used unless --levels is
given), exactly as on the command line without the option.
"""

import math
import os
import re

from qgis.core import (
    QgsProcessingException,
    QgsProcessingParameterBoolean,
    QgsProcessingParameterDefinition,
    QgsProcessingParameterEnum,
    QgsProcessingParameterFeatureSource,
    QgsProcessingParameterField,
    QgsProcessingParameterFile,
    QgsProcessingParameterFileDestination,
    QgsProcessingParameterNumber,
    QgsProcessingParameterRasterDestination,
    QgsProcessingParameterRasterLayer,
    QgsProcessingParameterString,
    QgsProcessingOutputString,
    QgsProcessing,
)

# Common options the provider sets itself: progress is always JSON lines, and
# the user already agreed to replace a chosen output in the file dialog.
PROVIDER_OWNED = {"progress", "overwrite"}
RASTER_EXTENSIONS = ("tif", "tiff")
HTML_FILTER = "HTML files (*.html *.htm)"


# Vector formats the CLI reads through GDAL as they are; a layer of any other
# kind (or a selection, a subset) is written to a temporary GeoPackage first.
VECTOR_FORMATS = ["gpkg", "shp", "geojson", "json", "kml", "gml", "fgb", "sqlite"]
# The option naming the layer of a multi-layer vector file (train, assess).
LAYER_OPTION = "layer"


def qgis_name(name):
    """Processing's name for a registry name: UPPER_CASE, dashes to
    underscores (class-field -> CLASS_FIELD; also usable as @CLASS_FIELD)."""
    return name.replace("-", "_").upper()


def legacy_name(name):
    """The name earlier versions of the provider used (class_field)."""
    return name.replace("-", "_").lower()


# Words written as people write them (acronyms, names, words joined in
# positional names); every other word is kept in lower case.
_WORDS = {"pca": "PCA", "dwt": "DWT", "elm": "ELM", "svm": "SVM", "crs": "CRS",
          "hysime": "HySime", "rmse": "RMSE", "fcls": "FCLS", "nnls": "NNLS", "vca": "VCA",
          "sspp": "SSPP", "emp": "EMP", "eap": "EAP", "eadp": "EADP", "cuda": "CUDA",
          "gpu": "GPU", "cpu": "CPU", "csv": "CSV", "json": "JSON", "html": "HTML",
          "rgb": "RGB", "id": "ID", "kmeans": "k-means", "classmap": "class map",
          "se": "structuring element", "std": "standard deviation", "c": "C"}


def _is_fraction(reg):
    """A float whose whole range lies within 0..1 (contrast-percentile 1e-6..0.999999)."""
    return (reg.get("type") == "float" and _has_range(reg)
            and 0 <= reg["min"] and reg["max"] <= 1)


def label(reg_or_name):
    """The label shown for a registry parameter (a dict) or a positional name:
    "elm-c" -> "ELM C", "contrast-percentile" -> "Contrast percentile (fraction 0-1)"."""
    reg = reg_or_name if isinstance(reg_or_name, dict) else {"name": reg_or_name}
    words = [_WORDS.get(w, w) for w in re.split(r"[-_ ]+", reg["name"].lower()) if w]
    text = " ".join(words)
    text = text[:1].upper() + text[1:]
    if _is_fraction(reg):
        text += " (fraction %s-%s)" % (_num(math.floor(reg["min"])), _num(math.ceil(reg["max"])))
    return text


def _num(v):
    return "%g" % v


def _is_raster_filter(file_filter):
    f = (file_filter or "").lower()
    return any("*." + e in f for e in RASTER_EXTENSIONS)


def _is_html_filter(file_filter):
    return "*.htm" in (file_filter or "").lower()


def _has_range(p):
    return "min" in p and "max" in p


class Param:
    """One registry parameter: its Processing definition and its CLI text."""

    def __init__(self, reg, advanced=False):
        self.reg = reg
        self.name = qgis_name(reg["name"])
        self.legacy = legacy_name(reg["name"])
        self.type = reg["type"]
        self.default = reg.get("default")
        self.required = bool(reg.get("required"))
        self.advanced = advanced or bool(reg.get("advanced"))
        self.is_output = self.type in ("file_out", "raster_out")
        self.is_raster_output = self.type == "raster_out" or (
            self.is_output and _is_raster_filter(reg.get("file_filter")))

    # ---- the definition ---------------------------------------------------------
    def definition(self):
        d = self._make()
        d.setHelp(self.reg.get("help", ""))
        if self.advanced:
            d.setFlags(d.flags() | QgsProcessingParameterDefinition.FlagAdvanced)
        return d

    def _make(self):
        t, n, lab, opt = self.type, self.name, label(self.reg), not self.required
        if t in ("int", "float"):
            kind = (QgsProcessingParameterNumber.Integer if t == "int"
                    else QgsProcessingParameterNumber.Double)
            lo, hi = ((self.reg["min"], self.reg["max"]) if _has_range(self.reg)
                      else (-math.inf, math.inf))
            lo = int(lo) if t == "int" and math.isfinite(lo) else lo
            hi = int(hi) if t == "int" and math.isfinite(hi) else hi
            return QgsProcessingParameterNumber(
                n, lab, kind, self.default, opt,
                lo if math.isfinite(lo) else -1.7976931348623157e308,
                hi if math.isfinite(hi) else 1.7976931348623157e308)
        if t == "choice":
            return QgsProcessingParameterEnum(n, lab, list(self.reg.get("choices", [])), False,
                                              self.default, opt, True)
        if t == "bool":
            return QgsProcessingParameterBoolean(n, lab, bool(self.default), opt)
        if t == "file_in":
            return QgsProcessingParameterFile(
                n, lab, QgsProcessingParameterFile.File, "", self.default, opt,
                self.reg.get("file_filter", ""))
        if self.is_output:
            flt = self.reg.get("file_filter", "")
            if self.is_raster_output:
                return QgsProcessingParameterRasterDestination(n, lab, self.default, opt,
                                                               not opt)
            return QgsProcessingParameterFileDestination(n, lab, flt, self.default, opt,
                                                         not opt)
        if t == "raster_in":
            return QgsProcessingParameterRasterLayer(n, lab, self.default, opt)
        if t == "vector_in":
            return QgsProcessingParameterFeatureSource(
                n, lab, [QgsProcessing.TypeVectorPoint, QgsProcessing.TypeVectorPolygon],
                self.default, opt)
        if t == "field":
            return QgsProcessingParameterField(
                n, lab, self.default, qgis_name(self.reg.get("parent", "")),
                QgsProcessingParameterField.Any, False, opt)
        # string, the lists, and types this provider does not know yet
        return QgsProcessingParameterString(n, lab, self.default, False,
                                            opt)

    # ---- checking ----------------------------------------------------------------
    def check_list(self, text):
        """None if `text` is a valid list for this parameter, else a message."""
        if self.type not in ("int_list", "float_list") or text in (None, ""):
            return None
        conv = int if self.type == "int_list" else float
        for item in str(text).split(","):
            item = item.strip()
            try:
                v = conv(item)
            except ValueError:
                return "%s: '%s' is not %s" % (self.name, item, "an integer" if conv is int
                                               else "a number")
            if _has_range(self.reg) and not self.reg["min"] <= v <= self.reg["max"]:
                return "%s: %s is outside %g..%g" % (self.name, item, self.reg["min"],
                                                     self.reg["max"])
        return None

    # ---- the command line ------------------------------------------------------------
    def value(self, alg, parameters, context):
        """The value as the CLI wants it (text), or None to leave it out."""
        t, n = self.type, self.name
        if n not in parameters or parameters[n] is None:
            return None
        if t == "int":
            v = alg.parameterAsInt(parameters, n, context)
        elif t == "float":
            v = alg.parameterAsDouble(parameters, n, context)
        elif t == "choice":
            v = alg.parameterAsEnumString(parameters, n, context)
        elif t == "bool":
            v = alg.parameterAsBool(parameters, n, context)
            return None if v == bool(self.default) else ("true" if v else "false")
        elif t == "file_in":
            v = alg.parameterAsFile(parameters, n, context)
        elif self.is_raster_output:
            v = alg.parameterAsOutputLayer(parameters, n, context)
        elif self.is_output:
            v = alg.parameterAsFileOutput(parameters, n, context)
        elif t == "raster_in":
            v = layer_path(alg.parameterAsRasterLayer(parameters, n, context), n)
        elif t == "field":
            fields = alg.parameterAsFields(parameters, n, context)
            v = fields[0] if fields else None
        elif t == "vector_in":
            raise AssertionError("vector_in values come from vector_source()")
        else:
            v = alg.parameterAsString(parameters, n, context)
        if v is None or v == "":
            return None
        if self.default is not None and not self.is_output and _same(v, self.default):
            return None
        return _text(v)

    def cli(self, value):
        # one argument: a value starting with '-' can never be read as an option
        return ["--%s=%s" % (self.reg["name"], value)]


def _same(v, default):
    if isinstance(v, float) or isinstance(default, float):
        try:
            return float(v) == float(default)
        except (TypeError, ValueError):
            return False
    return str(v) == str(default)


def _text(v):
    if isinstance(v, float):
        return repr(v)  # shortest text that parses back to the same double
    return str(v)


def layer_path(layer, name):
    """The file GDAL opens for a raster layer; other providers cannot be read."""
    if layer is None:
        return None
    if layer.providerType() != "gdal":
        raise QgsProcessingException(
            "%s: layer '%s' comes from the '%s' provider; hyprof reads files through "
            "GDAL: save it as a GeoTIFF first" % (name, layer.name(), layer.providerType()))
    return layer.source()


def vector_source(alg, parameters, name, context, feedback):
    """(path, layer name) of a feature source parameter as a file GDAL reads:
    the layer's own file when it is one (and no selection or subset applies),
    else a temporary GeoPackage holding the features the parameter selects."""
    if parameters.get(name) is None:
        return None, None
    source = alg.parameterAsSource(parameters, name, context)
    if source is None:
        raise QgsProcessingException("%s: '%s' is not a vector layer"
                                     % (name, parameters.get(name)))
    path, layer = alg.parameterAsCompatibleSourceLayerPathAndLayerName(
        parameters, name, context, VECTOR_FORMATS, "gpkg", feedback)
    if not path:
        raise QgsProcessingException("%s: cannot write '%s' to a file hyprof reads"
                                     % (name, parameters.get(name)))
    return path, layer or None


# ---- the operation's positional OUTPUT ------------------------------------------------
_OUTPUT_KINDS = {"raster": "raster", "html": "html", "report": "html", "model": "file",
                 "file": "file", "json": "file", "csv": "file", "text": "file",
                 "none": None}
_FORMAT_FILTERS = {"json": "JSON files (*.json)", "csv": "CSV files (*.csv)",
                   "html": HTML_FILTER, "gtiff": "GeoTIFF (*.tif *.tiff)"}


def output_kind(out):
    """'raster', 'html', 'file' or None, from describe's "output" entry."""
    if not out:
        return None
    kind = _OUTPUT_KINDS.get(str(out.get("type", "raster")).lower(), "file")
    head = str(out.get("description", "")).split(":", 1)
    if len(head) == 2 and head[0].strip().lower() in _OUTPUT_KINDS:
        kind = _OUTPUT_KINDS[head[0].strip().lower()]
    return kind


# ---- the positional file arguments -------------------------------------------------------
_RESULT_FILTERS = dict(_FORMAT_FILTERS, model="hyprof model (*.model)")


def _result_head(op):
    return str(op.get("result", "")).split(" ", 1)[0].split(":", 1)[0].strip().lower()


class Positional:
    """One positional file argument: INPUT/OUTPUT of the raster -> raster
    operations, or one entry of describe's "files"."""

    def __init__(self, name, kind, help_text="", file_filter="", output_kind=None):
        self.name = name
        self.kind = kind  # raster_in, raster_out or file_out
        self.help = help_text
        self.file_filter = file_filter
        self.output_kind = output_kind  # legacy OUTPUT: 'raster', 'html' or 'file'
        self.is_output = kind in ("raster_out", "file_out")
        self.is_raster_output = kind == "raster_out"

    def definition(self):
        lab = label(self.name)
        if self.kind == "raster_in":
            d = QgsProcessingParameterRasterLayer(self.name, lab)
        elif self.kind == "raster_out":
            d = QgsProcessingParameterRasterDestination(self.name, lab)
        else:
            d = QgsProcessingParameterFileDestination(self.name, lab, self.file_filter)
        d.setHelp(self.help)
        return d


def positionals(op):
    """The operation's file arguments in command-line order."""
    if "files" in op:
        head = _result_head(op)
        out = []
        for f in op["files"]:
            kind = f.get("type", "raster_in")
            if kind not in ("raster_in", "raster_out", "file_out"):
                kind = "raster_in" if kind.endswith("_in") else "file_out"
            help_text = op.get("result", "") if kind != "raster_in" else ""
            out.append(Positional(f["name"], kind, help_text,
                                  _RESULT_FILTERS.get(head, "") if kind == "file_out" else ""))
        return out
    out = []
    if op.get("input"):
        out.append(Positional(op["input"].get("name", "INPUT"), "raster_in"))
    kind = output_kind(op.get("output"))
    if kind is not None:
        o = op["output"]
        desc = str(o.get("description", "")).split(":", 1)[-1].strip() or "Output"
        flt = HTML_FILTER if kind == "html" else (
            o.get("file_filter") or _FORMAT_FILTERS.get(str(o.get("format", "")).lower(), ""))
        out.append(Positional(o.get("name", "OUTPUT"),
                              "raster_out" if kind == "raster" else "file_out", desc, flt, kind))
    return out


def stdout_output(op):
    """The string output that holds the CLI's stdout, or None: from a "result"
    such as "report on stdout (text or JSON)"."""
    m = re.match(r"\s*(\w+)\s+on\s+stdout", str(op.get("result", "")))
    if not m:
        return None
    return QgsProcessingOutputString(m.group(1).upper(), op["result"])


def beside_path(main_output, file_filter):
    """Where the CLI writes a beside_output file it was not given: the main
    output with its extension replaced by the filter's first one."""
    m = re.search(r"\*\.(\w+)", file_filter or "")
    if not main_output or not m:
        return None
    return os.path.splitext(main_output)[0] + "." + m.group(1)
