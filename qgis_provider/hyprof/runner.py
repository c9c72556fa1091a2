"""Running the executable with `--progress json` under a Processing feedback.

Two reader threads feed one queue; the calling thread polls it and the
feedback's cancel flag every POLL_S seconds, so progress reaches the dialog
and qgis_process as it happens and a cancel stops the run at once (the CLI
turns SIGTERM into a clean cancellation: exit 3, no output left)."""

import json
import os
import queue
import signal
import subprocess
import threading

POLL_S = 0.1
TERM_GRACE_S = 5.0  # then SIGKILL
EXIT_CANCELLED = 3


class RunResult:
    def __init__(self, pid, returncode, cancelled, last_error, stdout=""):
        self.pid = pid
        self.stdout = stdout  # everything the CLI printed on stdout (assess's report)
        self.returncode = returncode
        self.cancelled = cancelled
        self.last_error = last_error  # the last non-JSON stderr line (the CLI's message)


def _reader(stream, tag, q):
    for line in iter(stream.readline, ""):
        q.put((tag, line.rstrip("\n")))
    stream.close()
    q.put((tag, None))


class _Reporter:
    """Turns the CLI's lines into feedback calls."""

    def __init__(self, feedback):
        self.feedback = feedback
        self.stage = None
        self.last_error = ""
        self.out_lines = []

    def stdout(self, line):
        self.out_lines.append(line)
        if line:
            self.feedback.pushInfo(line)

    def stderr(self, line):
        msg = _json_object(line)
        if msg is None:
            if line.strip():
                self.last_error = line.strip()
                self.feedback.pushWarning(line)
            return
        if "progress" in msg:
            self.feedback.setProgress(100.0 * float(msg["progress"]))
            stage = msg.get("stage")
            if stage and stage != self.stage:
                self.stage = stage
                self.feedback.setProgressText(stage)
        elif "log" in msg:
            text = str(msg.get("message", ""))
            if msg["log"] == "info":
                self.feedback.pushInfo(text)
            else:
                self.feedback.pushWarning(text)
        else:
            self.feedback.pushWarning(line)


def _json_object(line):
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _stop(proc):
    """SIGTERM (the CLI cleans up and exits 3), SIGKILL if it does not."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _environment():
    """The executable's environment: QGIS's, with OpenMP threads that sleep at
    barriers unless the user chose otherwise (batch mode runs several at once
    on shared cores; the executable would otherwise set it and start again)."""
    env = dict(os.environ)
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


def run(argv, feedback):
    """Runs argv (a list: no shell) and reports through `feedback`."""
    feedback.pushCommandInfo(" ".join(argv))
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1, env=_environment())
    # same process group: a Ctrl+C on qgis_process also cancels the executable
    feedback.pushDebugInfo("hyprof pid %d" % proc.pid)
    q = queue.Queue()
    threads = [threading.Thread(target=_reader, args=(s, t, q), daemon=True)
               for s, t in ((proc.stdout, "out"), (proc.stderr, "err"))]
    for t in threads:
        t.start()
    rep = _Reporter(feedback)
    cancelled, open_streams = False, 2
    while open_streams:
        if not cancelled and feedback.isCanceled():
            cancelled = True
            _stop(proc)
        try:
            tag, line = q.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if line is None:
            open_streams -= 1
        elif tag == "out":
            rep.stdout(line)
        else:
            rep.stderr(line)
    rc = proc.wait()
    for t in threads:
        t.join()
    if cancelled and rc == 0:  # it finished before the signal: the outputs are complete
        feedback.pushInfo("hyprof finished before the cancel took effect")
    return RunResult(proc.pid, rc, rc == EXIT_CANCELLED or (cancelled and rc != 0),
                     rep.last_error, "".join(l + "\n" for l in rep.out_lines))


def remove_leftovers(paths, pid):
    """After a SIGKILL the CLI could not remove its temporary outputs
    (".NAME.hyprof-PID.tmp.tif" beside OUTPUT, "NAME.hyprof-PID.tmp" for
    model files): remove them so a cancelled run leaves nothing."""
    for p in paths:
        d, base = os.path.split(os.path.abspath(p))
        for tmp in (os.path.join(d, ".%s.hyprof-%d.tmp.tif" % (base, pid)),
                    "%s.hyprof-%d.tmp" % (p, pid)):
            if os.path.exists(tmp):
                os.remove(tmp)
