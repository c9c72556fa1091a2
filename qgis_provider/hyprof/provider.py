"""The `hyprof` Processing provider: one algorithm per operation the
executable lists. The registry is read once per provider load (QGIS start,
or Processing's settings dialog being closed, which reloads providers)."""

from qgis.core import QgsProcessingProvider

from .algorithm import HyprofAlgorithm
from .engine import SETTING, Engine

try:  # the Processing plugin's settings page (absent in bare PyQGIS scripts)
    from processing.core.ProcessingConfig import ProcessingConfig, Setting
except ImportError:
    ProcessingConfig = Setting = None


class HyprofProvider(QgsProcessingProvider):
    def __init__(self):
        super().__init__()
        self.engine = Engine()

    def id(self):
        return "hyprof"

    def name(self):
        return "hyprof"

    def longName(self):  # noqa: N802
        if self.engine.exe:
            return "hyprof %s (%s)" % (self.engine.version, self.engine.exe)
        return "hyprof: executable not found (%s)" % self.engine.problem

    def versionInfo(self):  # noqa: N802
        return self.engine.version

    # hyprof writes GeoTIFF only; raster destinations then offer and default to it
    def supportedOutputRasterLayerExtensions(self):  # noqa: N802
        return ["tif"]

    def supportsNonFileBasedOutput(self):  # noqa: N802
        return False

    def load(self):
        if ProcessingConfig is not None:
            ProcessingConfig.settingIcons[self.name()] = self.icon()
            ProcessingConfig.addSetting(Setting(
                self.name(), SETTING, "hyprof executable (empty: beside the plugin, "
                "then $HYPROF_EXE, then PATH)", "", valuetype=Setting.FILE))
            ProcessingConfig.readSettings()
        self.refreshAlgorithms()
        return True

    def unload(self):
        if ProcessingConfig is not None and SETTING in ProcessingConfig.settings:
            ProcessingConfig.removeSetting(SETTING)

    def loadAlgorithms(self):  # noqa: N802
        self.engine = Engine.load()
        for op in self.engine.operations:
            self.addAlgorithm(HyprofAlgorithm(op, self.engine))
