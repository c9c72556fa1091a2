"""Where each algorithm's help button points: the operation's section of the
operations reference (docs/operations.md, an anchor per operation), as a
file:// URL.

The reference is looked for where this install put it (documentation.txt,
written by `cmake --install` beside executable.txt), then in the share/doc
folder of the executable's prefix, then in the source tree the plugin is run
from (qgis_provider/hyprof -> docs/operations.md)."""

import os

from qgis.PyQt.QtCore import QUrl

PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))
INSTALLED_DOCS_FILE = "documentation.txt"
REFERENCE = "operations.md"


def _recorded():
    try:
        with open(os.path.join(PLUGIN_DIR, INSTALLED_DOCS_FILE), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def reference_path(exe=None):
    """The operations reference this plugin documents, or None."""
    places = [_recorded()]
    if exe:
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
        places.append(os.path.join(prefix, "share", "doc", "hyprof", REFERENCE))
    places.append(os.path.join(os.path.dirname(os.path.dirname(PLUGIN_DIR)), "docs", REFERENCE))
    return next((p for p in places if p and os.path.isfile(p)), None)


def anchor(op_name):
    """The anchor of an operation's section (scripts/gen_operations_doc.py
    writes <a id="op-NAME"></a> before each section)."""
    return "op-" + op_name


def help_url(op_name, exe=None):
    """file:///.../operations.md#op-NAME, or "" (no help button) when the
    reference is not installed."""
    path = reference_path(exe)
    if not path:
        return ""
    url = QUrl.fromLocalFile(path)
    url.setFragment(anchor(op_name))
    return url.toString()
