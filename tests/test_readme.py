"""Every command example of README.md runs, in order, on the bundled samples.

Which blocks run: the fenced ```sh, ```bash and ```console blocks (in a console
block, the lines starting with "$ " are commands and the other lines their
output), and each ```python block as one command (/usr/bin/python3 running the
block saved as readme_LINE.py, with matplotlib's non-interactive backend and,
under ASan, without leak checks, as every Python process). Other fences (```c,
```json, a bare ``` synopsis) are not commands.
A command is one line, or several joined by a backslash at the end of each but
the last; a line starting with # is a comment.
A block whose fence line comes right after a line

    <!-- not run: REASON -->

is not run. The marker is for what cannot run in a test, and only that:
installing packages (apt-get, cmake --install), the whole test suite, a GPU, the
QGIS GUI. A marker that does not stand right above a command block fails.

How they run: one bash process (so `export` and `cd` carry over from command to
command, as in a terminal) in a temporary folder laid out like a build tree:
samples/ is a copy of the bundled samples (commands may write beside them),
build/cli/hyprof and build/gdal_driver/ are links to the executable and plugin
under test, qgis_provider/ and scripts/ are links to the checkout's, HOME is a
folder of its own (nothing touches the user's profile), `hyprof` is on PATH and
GDAL_DRIVER_PATH names the plugin's folder. Each command is checked as it
finishes: the first one that exits non-zero stops the run, and the test fails
naming its README line, its exit status and the tail of its output.

Run: /usr/bin/python3 -m pytest -q tests/test_readme.py
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLES, exe_path

README = ROOT / "README.md"
RUN_LANGS = {"sh", "bash", "console"}
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_+-]*)\s*$")


def blocks(text):
    """Fenced blocks of a Markdown text: (lang, first content line number
    (1-based), content lines, not-run reason or None)."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group("lang"), i + 1
        end = start
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError("README line %d: the fence is never closed" % (i + 1))
        prev = NOT_RUN.match(lines[i - 1]) if i > 0 else None
        out.append((lang, start + 1, lines[start:end], prev.group("reason") if prev else None))
        i = end + 1
    return out


def commands(lang, first_line, body):
    """(README line, command text) of one runnable block; a line ending with a
    backslash continues on the next."""
    cmds, cur, cur_line = [], [], None
    for n, line in enumerate(body, first_line):
        if not cur:
            if lang == "console":
                if not line.startswith("$ "):
                    continue  # the output shown after a command
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            cur_line = n
        cur.append(line)
        if not line.endswith("\\"):
            cmds.append((cur_line, "\n".join(cur)))
            cur = []
    if cur:
        raise ValueError("README line %d: the command continues past its block" % cur_line)
    return cmds


def python_command(first_line, body):
    """(README line, command) running a ```python block as one script, from a
    file (readme_LINE.py): worker processes that multiprocessing spawns, as
    Dask's do, import the main script from its path."""
    end = "__HYPROF_README_PY__"
    if any(line.strip() == end for line in body):
        raise ValueError("README line %d: the block contains %s" % (first_line, end))
    name = "readme_%d.py" % first_line
    return first_line, ("cat > %s <<'%s'\n%s\n%s\n"
                        "env MPLBACKEND=Agg $HYPROF_README_PY_ENV /usr/bin/python3 %s") % (
        name, end, "\n".join(body), end, name)


def runnable_commands(text):
    out = []
    for lang, first, body, reason in blocks(text):
        if reason is not None:
            continue
        if lang in RUN_LANGS:
            out.extend(commands(lang, first, body))
        elif lang == "python":
            out.append(python_command(first, body))
    return out


def script(cmds, status, name="README.md"):
    """A bash script running `cmds` in order that stops at the first failure and
    writes 'NAME:LINE: exit STATUS' (or 'ok' at the end) into the file `status`."""
    st = shlex.quote(str(status))
    parts = ["exec </dev/null", "set -o pipefail"]
    for line, cmd in cmds:
        where = "%s:%d" % (name, line)
        parts.append("printf '\\n==> %%s (%%s s)\\n' %s \"$SECONDS\"" % shlex.quote(where))
        parts.append(cmd)
        parts.append("__rc=$?; if [ $__rc -ne 0 ]; then printf '%s: exit %%d\\n' $__rc >%s; "
                     "exit 1; fi" % (where, st))
    parts.append("printf 'ok\\n' >%s" % st)
    return "\n".join(parts) + "\n"


def workspace(tmp):
    """The temporary folder the commands run in (see the module's comment)."""
    exe = Path(exe_path()).resolve()
    given = os.environ.get("GDAL_DRIVER_PATH", "").split(os.pathsep)[0]
    plugin_dir = Path(given) if given else exe.parents[1] / "gdal_driver"
    shutil.copytree(SAMPLES, tmp / "samples")
    (tmp / "build" / "cli").mkdir(parents=True)
    (tmp / "build" / "cli" / "hyprof").symlink_to(exe)
    (tmp / "build" / "gdal_driver").symlink_to(plugin_dir.resolve())
    for name in ("qgis_provider", "scripts"):
        (tmp / name).symlink_to(ROOT / name)
    (tmp / "home").mkdir()
    env = dict(os.environ, HOME=str(tmp / "home"), GDAL_DRIVER_PATH=str(tmp / "build" / "gdal_driver"),
               PATH="%s:%s" % (tmp / "build" / "cli", os.environ.get("PATH", "/usr/bin:/bin")),
               QT_QPA_PLATFORM="offscreen")
    env.pop("HYPROF_EXE", None)  # the README says how to set it where it needs it
    # the Python package of this checkout over the library under test (the
    # set-up installs both into the user's site-packages; HOME is not the user's)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] +
                                        [p for p in [os.environ.get("PYTHONPATH")] if p])
    env.setdefault("HYPROF_LIBRARY", str(exe.parents[1] / "libhyprof.so"))
    # python blocks are Python processes: no leak checks under ASan (scripts/test.sh)
    env["HYPROF_README_PY_ENV"] = ("ASAN_OPTIONS=%s:detect_leaks=0" % env.get("ASAN_OPTIONS", "")
                                   if env.get("HYPROF_UNDER_ASAN") else "")
    return env


def run_script(tmp, cmds, name="README.md", timeout=1500):
    """Runs the commands in `tmp` (prepared by workspace()); returns
    (status line, output) where the status is 'ok' or 'NAME:LINE: exit N'."""
    env = workspace(tmp)
    status = tmp / "readme.status"
    (tmp / "readme.sh").write_text(script(cmds, status, name))
    p = subprocess.Popen(["bash", "readme.sh"], cwd=tmp, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # bash and whatever command it was running
        out, _ = p.communicate()
        last = re.findall(r"^==> (\S+)", out, re.M)
        return "%s: timed out after %d s" % (last[-1] if last else name, timeout), out
    done = status.read_text().strip() if status.is_file() else ""
    return done or "%s: the script stopped (exit %d)" % (name, p.returncode), out


# ---- the runner itself --------------------------------------------------------------------

SAMPLE_MD = """\
Intro.

```sh
hyprof --version                      # a comment
```

<!-- not run: needs the QGIS GUI -->
```sh
false
```

```c
false;
```

```console
$ X=12 \\
    Y=3
$ echo "$X$Y" > xy.txt
output line
$ grep -q 123 xy.txt && test -s xy.txt
```

```python
import os
open("py.txt", "w").write(os.environ["MPLBACKEND"] + "\\n")
```

```bash
cat missing-file.txt
echo never
```
"""


def test_blocks_and_markers_are_read_as_documented():
    cmds = runnable_commands(SAMPLE_MD)
    assert [line for line, _ in cmds] == [4, 17, 19, 21, 25, 30, 31]
    assert cmds[1][1] == "X=12 \\\n    Y=3"
    assert cmds[4][1].startswith("cat > readme_25.py <<") and \
        cmds[4][1].endswith("env MPLBACKEND=Agg $HYPROF_README_PY_ENV /usr/bin/python3 readme_25.py")
    assert [b[3] for b in blocks(SAMPLE_MD)] == [None, "needs the QGIS GUI", None, None, None,
                                                 None]


def test_a_failing_command_is_named_by_its_line(tmp_path):
    status, out = run_script(tmp_path, runnable_commands(SAMPLE_MD), "sample.md", timeout=120)
    assert status == "sample.md:30: exit 1", out
    assert (tmp_path / "xy.txt").read_text() == "123\n"  # the commands before it ran, in order
    assert (tmp_path / "py.txt").read_text() == "Agg\n"  # the python block too
    assert "never" not in out


# ---- README.md ----------------------------------------------------------------------------

def test_not_run_markers_stand_above_command_blocks():
    lines = README.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, 1):
        if "not run" in line and line.lstrip().startswith("<!--"):
            m = NOT_RUN.match(line)
            assert m and m.group("reason"), "README line %d: write <!-- not run: REASON -->" % n
            nxt = FENCE.match(lines[n]) if n < len(lines) else None
            assert nxt and nxt.group("lang") in RUN_LANGS, \
                "README line %d: the not-run marker must stand right above a sh/bash/console block" % n


def test_skipped_blocks_hold_no_hyprof_commands():
    """The marker cannot hide an example of hyprof itself from the test (one that
    needs a GPU excepted: none runs here)."""
    for lang, first, body, reason in blocks(README.read_text(encoding="utf-8")):
        if lang in RUN_LANGS and reason is not None and "GPU" not in reason:
            for line, cmd in commands(lang, first, body):
                assert not re.search(r"(^|[\s;&|(])(hyprof|qgis_process(\.bin)?|gdal\w*|ogr\w*)\s", cmd), \
                    "README line %d: '%s' is in a block that is not run (%s)" % (line, cmd, reason)


def test_quick_start_is_self_contained_on_the_samples():
    """The quick start, in the first 100 lines, makes its training polygons from
    the samples and goes from them to the assessment on the command line and in
    qgis_process."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next(n for n, l in enumerate(lines) if l.startswith("## Quick start"))
    end = next(n for n, l in enumerate(lines) if n > start and l.startswith("## "))
    assert end <= 100, "the quick start ends at line %d (the first 100 lines hold it)" % end
    quick = [c for _, c in runnable_commands("\n".join(lines[start:end]))]
    order = ["gdal_polygonize.py ", "ogr2ogr -t_srs ", "hyprof eadp ", "hyprof train --samples ",
             "hyprof classify ", "hyprof assess ", "qgis_process.bin run hyprof:train ",
             "qgis_process.bin run samples/hyprof_workflow.model3 "]
    at = [next((i for i, c in enumerate(quick) if c.startswith(o)), None) for o in order]
    assert None not in at and at == sorted(at), \
        "the quick start's commands, in order, should start with %s; found %s" % (order, quick)


def test_every_readme_command_runs(tmp_path):
    text = README.read_text(encoding="utf-8")
    cmds = runnable_commands(text)
    assert len(cmds) >= 30, "only %d commands found in README.md" % len(cmds)
    status, out = run_script(tmp_path, cmds)
    assert status == "ok", "%s (the first README command that fails)\n...%s" % (status, out[-4000:])
