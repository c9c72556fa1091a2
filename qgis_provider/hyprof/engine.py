"""Finding the hyprof executable and reading its registry (`describe --json`).

Nothing here imports QGIS' GUI: qgis_process and the tests use it headless."""

import json
import os
import shutil
import subprocess

from qgis.core import QgsSettings

PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))
# The Processing setting (Settings > Options > Processing > Providers > hyprof);
# ProcessingConfig stores its settings under this QgsSettings prefix, so the
# provider reads it even where the Processing plugin's Python is not loaded.
SETTING = "HYPROF_EXECUTABLE"
SETTING_KEY = "Processing/Configuration/" + SETTING
ENV = "HYPROF_EXE"
# Files `cmake --install` writes into the plugin (qgis_provider/CMakeLists.txt):
# where the executable of the same install went, for prefixes not on PATH, and
# the registry of that executable, so that the toolbox lists the algorithms
# (saying the executable is missing) even without it.
INSTALLED_PATH_FILE = "executable.txt"
INSTALLED_DESCRIBE = "describe.json"
DESCRIBE_TIMEOUT_S = 30


class EngineError(Exception):
    pass


def _is_executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def _installed_path():
    try:
        with open(os.path.join(PLUGIN_DIR, INSTALLED_PATH_FILE), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def find_executable():
    """Returns (path, None) or (None, a sentence saying where it looked).

    An explicit choice (the setting, then $HYPROF_EXE) that is wrong is an
    error, not a reason to silently run another copy."""
    setting = str(QgsSettings().value(SETTING_KEY, "") or "").strip()
    if setting:
        if _is_executable(setting):
            return setting, None
        return None, ("the Processing setting %s points at '%s', which is not an "
                      "executable file" % (SETTING, setting))
    env = os.environ.get(ENV, "").strip()
    if env:
        if _is_executable(env):
            return env, None
        return None, "$%s is '%s', which is not an executable file" % (ENV, env)
    places = [os.path.join(PLUGIN_DIR, "bin", "hyprof"), _installed_path()]
    for p in places:
        if _is_executable(p):
            return p, None
    on_path = shutil.which("hyprof")
    if on_path:
        return on_path, None
    tried = [p for p in places if p] + ["PATH"]
    return None, ("no hyprof executable found (looked in %s); install hyprof, or set "
                  "Settings > Options > Processing > Providers > hyprof > %s, or $%s"
                  % (", ".join(tried), SETTING, ENV))


def describe(exe):
    """The executable's registry as a dict; EngineError says why not."""
    try:
        r = subprocess.run([exe, "describe", "--json"], capture_output=True, text=True,
                           timeout=DESCRIBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        raise EngineError("cannot run '%s describe --json': %s" % (exe, e)) from e
    if r.returncode != 0:
        raise EngineError("'%s describe --json' failed (exit %d): %s"
                          % (exe, r.returncode, r.stderr.strip()))
    try:
        return json.loads(r.stdout)
    except ValueError as e:
        raise EngineError("'%s describe --json' printed no valid JSON: %s" % (exe, e)) from e


def installed_describe():
    """The registry saved at install time, or None."""
    try:
        with open(os.path.join(PLUGIN_DIR, INSTALLED_DESCRIBE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Engine:
    """What one provider load found: the executable (or why there is none)
    and the registry its algorithms are built from."""

    def __init__(self, exe=None, problem=None, registry=None):
        self.exe = exe
        self.problem = problem
        self.registry = registry or {"operations": [], "common": []}

    @classmethod
    def load(cls):
        exe, problem = find_executable()
        registry = None
        if exe:
            try:
                registry = describe(exe)
            except EngineError as e:
                exe, problem = None, str(e)
        if registry is None:
            registry = installed_describe()
        return cls(exe, problem, registry)

    @property
    def operations(self):
        return self.registry.get("operations", [])

    @property
    def common(self):
        return self.registry.get("common", [])

    @property
    def version(self):
        return self.registry.get("hyprof", "")

    def require(self, op):
        """The executable's path, or the QgsProcessingException text."""
        if self.exe and _is_executable(self.exe):
            return self.exe
        problem = self.problem or "the hyprof executable '%s' is gone" % self.exe
        raise EngineError("hyprof %s cannot run: %s." % (op, problem))
