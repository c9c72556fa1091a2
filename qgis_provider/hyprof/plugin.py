"""The plugin object QGIS creates: it only adds the Processing provider.

qgis_process calls classFactory(None) and initProcessing() alone; the desktop
calls initGui(), which does the same."""

from qgis.core import QgsApplication

from .provider import HyprofProvider


class HyprofPlugin:
    def __init__(self, iface):
        self.iface = iface
        self.provider = None  # kept here: the registry does not own Python objects

    def initProcessing(self):  # noqa: N802
        if self.provider is None:
            self.provider = HyprofProvider()
            QgsApplication.processingRegistry().addProvider(self.provider)

    def initGui(self):  # noqa: N802
        self.initProcessing()

    def unload(self):
        if self.provider is not None:
            QgsApplication.processingRegistry().removeProvider(self.provider)
            self.provider = None
