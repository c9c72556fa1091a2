"""Running one library call: the context (backend, device, threads), the
progress callback, errors, and Ctrl-C.

A call made from the main thread runs in a helper thread while the main
thread waits: Python handles SIGINT only in the main thread and only between
bytecodes, so the main thread waits in slices of _POLL_S seconds and receives
KeyboardInterrupt within one, also when the kernel hands the signal to one of
the library's threads (then nothing wakes the main thread's wait). It then
asks the library to stop (hyprof_ctx_cancel: the operation returns at its
next progress point), waits for it and re-raises KeyboardInterrupt. The
helper thread is kept for the next call, so OpenMP's thread team and the
CUDA context are made once. Calls from other threads run directly."""

import ctypes as C
import logging
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as _FutureTimeout

from ._errors import ArgumentError, Cancelled, error_for
from ._lib import LOG_FN, PROGRESS_FN, lib, text

log = logging.getLogger("hyprof")
_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING}


@LOG_FN
def _log_fn(user, level, message):
    log.log(_LEVELS.get(level, logging.WARNING), "%s", text(message))


_BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}
_POLL_S = 0.1  # the main thread's wait for a call, between looks at signals
_executor = None
_executor_lock = threading.Lock()


def _main_executor():
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hyprof")
        return _executor


class _Tqdm:
    """progress=True or 'tqdm': a tqdm bar per call."""

    def __init__(self, desc):
        try:
            from tqdm.auto import tqdm
        except ImportError:
            warnings.warn("hyprof: progress='tqdm' needs the tqdm package (Debian: python3-tqdm); "
                          "running without a progress bar", stacklevel=4)
            self.bar = None
            return
        self.bar = tqdm(total=1000, desc=desc, unit="", bar_format="{l_bar}{bar}| {elapsed}")

    def __call__(self, fraction, stage):
        if self.bar is not None:
            self.bar.set_postfix_str(stage, refresh=False)
            self.bar.update(max(0, int(fraction * 1000) - self.bar.n))
        return False

    def close(self):
        if self.bar is not None:
            self.bar.update(1000 - self.bar.n)
            self.bar.close()


def check_common(name, backend, device, threads):
    if not isinstance(backend, str) or backend not in _BACKENDS:
        raise ArgumentError("hyprof.%s: parameter 'backend': %r is not one of auto, cpu, cuda"
                            % (name, backend))
    for pname, v, hi in (("device", device, 255), ("threads", threads, 4096)):
        if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
            raise TypeError("hyprof.%s: parameter '%s' must be an integer, not %s"
                            % (name, pname, type(v).__name__))
        if not 0 <= int(v) <= hi:
            raise ArgumentError("hyprof.%s: parameter '%s': %d is out of range [0, %d]"
                                % (name, pname, int(v), hi))


class Context:
    """A hyprof_ctx_t for one call, with its progress callback."""

    def __init__(self, name, backend="auto", device=0, threads=0, progress=None):
        check_common(name, backend, device, threads)
        self.name = name
        self.ptr = C.c_void_p(lib.hyprof_ctx_new())
        if not self.ptr:
            raise MemoryError("hyprof.%s: out of memory creating a context" % name)
        lib.hyprof_ctx_set_backend(self.ptr, _BACKENDS[backend])
        lib.hyprof_ctx_set_device(self.ptr, int(device))
        lib.hyprof_ctx_set_threads(self.ptr, int(threads))
        lib.hyprof_ctx_set_log(self.ptr, _log_fn, None)
        self.exc = None
        self.bar = None
        if progress is True or progress == "tqdm":
            self.bar = _Tqdm(name)
            progress = self.bar
        elif progress is not None and not callable(progress):
            raise TypeError("hyprof.%s: progress must be a callable(fraction, stage), True or "
                            "'tqdm', not %r" % (name, progress))
        self.user = progress
        self._cb = PROGRESS_FN(self._progress) if progress is not None else None
        if self._cb is not None:
            lib.hyprof_ctx_set_progress(self.ptr, self._cb, None)

    def _progress(self, user, fraction, stage):
        try:
            return 1 if self.user(fraction, text(stage)) else 0
        except BaseException as e:  # stop the operation, re-raise after it returns
            self.exc = e
            return 1

    def used_backend(self):
        return text(lib.hyprof_backend_name(lib.hyprof_ctx_used_backend(self.ptr)))

    def call(self, fn, *args):
        """fn(ctx, *args) -> status; raises the matching hyprof.Error."""
        try:
            st = _run(self, fn, *args)
        finally:
            if self.bar is not None:
                self.bar.close()
        if self.exc is not None:
            raise self.exc
        if st != 0:
            msg = text(lib.hyprof_ctx_last_error(self.ptr)) or text(lib.hyprof_status_text(st))
            raise error_for(st, msg)

    def close(self):
        if self.ptr:
            lib.hyprof_ctx_free(C.byref(self.ptr))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Job:
    """One call handed to the library's thread. The main thread can take
    KeyboardInterrupt at any bytecode, also inside submit() after the work was
    queued: abandon() then either stops the job before it starts or waits for
    it to return, so the context and the arrays are never freed under it."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args
        self.lock = threading.Lock()
        self.started = self.skip = False
        self.done = threading.Event()

    def run(self):
        with self.lock:
            if self.skip:
                return None
            self.started = True
        try:
            return self.fn(*self.args)
        finally:
            self.done.set()

    def abandon(self, ctx=None):
        if ctx is not None:
            lib.hyprof_ctx_cancel(ctx.ptr)
        with self.lock:
            if not self.started:
                self.skip = True
                return
        _wait_uninterrupted(self.done)


def _run(ctx, fn, *args):
    if threading.current_thread() is not threading.main_thread():
        return fn(ctx.ptr, *args)
    return _on_thread(_Job(fn, (ctx.ptr,) + args), ctx)


def on_library_thread(fn, *args):
    """fn(*args) on the thread that runs the library's operations (when called
    from the main thread): the library's OpenMP work then always uses that
    thread's team, instead of a second team on the main thread whose idle
    threads spin while the operation runs (GOMP's default wait policy)."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    return _on_thread(_Job(fn, args))


def _on_thread(job, ctx=None):
    try:
        future = _main_executor().submit(job.run)
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except _FutureTimeout:
                pass
    except BaseException:
        job.abandon(ctx)
        raise


def _wait_uninterrupted(done):
    """Waits for a cancelled call to return; a second Ctrl-C does not leave it
    running on memory the caller is about to free."""
    while True:
        try:
            done.wait()
            return
        except KeyboardInterrupt:
            print("hyprof: stopping the operation...", file=sys.stderr)


__all__ = ["Context", "Cancelled", "check_common", "on_library_thread"]
