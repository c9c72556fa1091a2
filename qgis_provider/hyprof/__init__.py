"""hyprof: a QGIS plugin whose Processing provider runs the hyprof executable."""


def classFactory(iface):  # noqa: N802 (QGIS' name)
    from .plugin import HyprofPlugin
    return HyprofPlugin(iface)
