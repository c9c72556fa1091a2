"""How outputs look once loaded: class maps as paletted layers with their
class names (category names, else the raster attribute table's name column),
profile stacks and abundances as grey images of one band at a time (QGIS
would otherwise show bands 1-3 as a false-colour RGB mixing unrelated
features) stretched to the band's minimum and maximum. QGIS shows GeoTIFF band
descriptions as "Band 3: PC1 T=130", so band names need nothing here."""

from qgis.core import (
    QgsContrastEnhancement,
    QgsPalettedRasterRenderer,
    QgsProcessingLayerPostProcessorInterface,
    QgsRaster,
    QgsRasterBandStats,
    QgsRasterLayer,
    QgsSingleBandGrayRenderer,
)

try:
    from osgeo import gdal
except ImportError:  # QGIS without GDAL's Python bindings: labels from QGIS only
    gdal = None


def _category_names(path):
    if gdal is None:
        return None
    ds = gdal.OpenEx(path, gdal.OF_RASTER)
    if ds is None:
        return None
    band = ds.GetRasterBand(1)
    return band.GetCategoryNames() or _rat_names(band), band.GetNoDataValue()


def _rat_names(band):
    """Category names (a list indexed by class value) from the band's raster
    attribute table: its name column, rows keyed by its value column."""
    rat = band.GetDefaultRAT()
    if rat is None or rat.GetRowCount() == 0:
        return None
    name_col = rat.GetColOfUsage(gdal.GFU_Name)
    value_col = next((c for c in (rat.GetColOfUsage(gdal.GFU_MinMax),
                                  rat.GetColOfUsage(gdal.GFU_Min)) if c >= 0), -1)
    if name_col < 0:
        return None
    named = {}
    for row in range(rat.GetRowCount()):
        value = rat.GetValueAsInt(row, value_col) if value_col >= 0 else row
        if 0 <= value < 65536:
            named[value] = rat.GetValueAsString(row, name_col)
    if not named:
        return None
    return [named.get(v, "") for v in range(max(named) + 1)]


def _present_values(path):
    """Byte class maps: the values that occur (GDAL's exact histogram)."""
    ds = gdal.OpenEx(path, gdal.OF_RASTER) if gdal else None
    if ds is None:
        return None
    hist = ds.GetRasterBand(1).GetHistogram(-0.5, 255.5, 256, False, False)
    return {v for v, n in enumerate(hist) if n}


def class_map_renderer(layer):
    """A paletted renderer listing the map's classes (by colour table and
    category names), or None when `layer` is not a class map.

    GeoTIFF pads colour tables to 256 entries; QGIS' default paletted style
    lists all of them, so only named (or, unnamed, present) classes are kept."""
    if not isinstance(layer, QgsRasterLayer) or layer.bandCount() != 1:
        return None
    prov = layer.dataProvider()
    if prov.colorInterpretation(1) != QgsRaster.PaletteIndex:
        return None
    table = prov.colorTable(1)
    if not table:
        return None
    info = _category_names(layer.source())
    names, nodata = info if info else (None, None)
    if nodata is None and prov.sourceHasNoDataValue(1):
        nodata = prov.sourceNoDataValue(1)
    if names:
        keep = {v for v, n in enumerate(names) if n}
    else:
        keep = _present_values(layer.source()) or {int(i.value) for i in table}
    items = [i for i in table if int(i.value) in keep and i.value != nodata]
    classes = QgsPalettedRasterRenderer.colorTableToClassData(items)
    for c in classes:  # QGIS labels entries with category names only, not the RAT's
        v = int(c.value)
        if names and v < len(names) and names[v]:
            c.label = names[v]
    return QgsPalettedRasterRenderer(prov, 1, classes)


def grey_renderer(layer):
    """A grey renderer of band 1 stretched to its minimum and maximum, for a
    stack of several float bands (profiles, abundances), or None."""
    if not isinstance(layer, QgsRasterLayer) or layer.bandCount() < 2:
        return None
    prov = layer.dataProvider()
    if prov.colorInterpretation(1) == QgsRaster.PaletteIndex:
        return None
    renderer = QgsSingleBandGrayRenderer(prov, 1)
    stats = prov.bandStatistics(1, QgsRasterBandStats.Min | QgsRasterBandStats.Max)
    ce = QgsContrastEnhancement(prov.dataType(1))
    ce.setContrastEnhancementAlgorithm(QgsContrastEnhancement.StretchToMinimumMaximum)
    ce.setMinimumValue(stats.minimumValue)
    ce.setMaximumValue(stats.maximumValue)
    renderer.setContrastEnhancement(ce)
    return renderer


def style_output(layer):
    """Applies the output style; 'class map', 'grey' or None (left as it is)."""
    renderer, kind = class_map_renderer(layer), "class map"
    if renderer is None:
        renderer, kind = grey_renderer(layer), "grey"
    if renderer is None:
        return None
    layer.setRenderer(renderer)
    layer.triggerRepaint()
    return kind


class OutputStyler(QgsProcessingLayerPostProcessorInterface):
    """Styles a loaded output (Processing calls it in the main thread)."""

    _alive = []  # Processing keeps a C++ pointer only: Python must hold them

    @classmethod
    def create(cls):
        styler = cls()
        cls._alive.append(styler)
        return styler

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        kind = style_output(layer)
        if kind == "class map":
            feedback.pushInfo("%s: styled as a class map" % layer.name())
        elif kind == "grey":
            feedback.pushInfo("%s: band 1 of %d shown in grey (choose the band in the "
                              "layer's symbology)" % (layer.name(), layer.bandCount()))
