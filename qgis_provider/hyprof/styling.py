"""How outputs look once loaded: class maps as paletted layers with their
class names, profile stacks with their band names (QGIS shows GeoTIFF band
descriptions as "Band 3: PC1 T=130", so those need nothing here)."""

from qgis.core import (
    QgsPalettedRasterRenderer,
    QgsProcessingLayerPostProcessorInterface,
    QgsRaster,
    QgsRasterLayer,
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
    return band.GetCategoryNames() or None, band.GetNoDataValue()


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
    return QgsPalettedRasterRenderer(prov, 1, QgsPalettedRasterRenderer.colorTableToClassData(items))


def style_output(layer):
    """Applies the output style; True when it changed the layer."""
    renderer = class_map_renderer(layer)
    if renderer is None:
        return False
    layer.setRenderer(renderer)
    layer.triggerRepaint()
    return True


class OutputStyler(QgsProcessingLayerPostProcessorInterface):
    """Styles a loaded output (Processing calls it in the main thread)."""

    _alive = []  # Processing keeps a C++ pointer only: Python must hold them

    @classmethod
    def create(cls):
        styler = cls()
        cls._alive.append(styler)
        return styler

    def postProcessLayer(self, layer, context, feedback):  # noqa: N802
        if style_output(layer):
            feedback.pushInfo("%s: styled as a class map" % layer.name())
