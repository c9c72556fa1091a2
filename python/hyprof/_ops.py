"""One Python function per registry operation that maps a cube to a cube,
generated at import from the library's registry (hyprof_op_at,
hyprof_param_t): the same parameter names ('-' becomes '_'), defaults,
ranges, choices and help text as `hyprof describe --json`. Values are
checked by the library's own parser (hyprof_args_set), so a bad value fails
exactly as on the command line, with a ValueError naming the parameter."""

import ctypes as C
import inspect
import numbers
import os
import textwrap

from ._cube import CubeView, result_from
from ._errors import ArgumentError
from ._lib import Result as CResult
from ._lib import lib, text
from ._run import Context

# hyprof_param_type_t
INT, FLOAT, CHOICE, STRING, INT_LIST, FLOAT_LIST, BOOL, FILE_IN, FILE_OUT, RASTER_IN, \
    VECTOR_IN, FIELD = range(12)
REQUIRED = 1

COMMON_DOC = """\
mask : array of bool (rows, cols), optional
    True where the pixel is valid. A numpy.ma.MaskedArray cube brings its own.
nodata : float, optional
    Pixels where any band equals it are nodata (NaN and infinite values always are).
backend : {'auto', 'cpu', 'cuda'}, default 'auto'
    Where to compute: auto (the GPU when present, else the CPU; the spectral DWT,
    bound by the copies to the GPU, on 8 or more CPU threads), cpu, or cuda (fails
    instead of falling back). $HYPROF_BACKEND overrides auto.
device : int, default 0
    CUDA device number.
threads : int, default 0
    CPU threads (0: all cores).
progress : callable(fraction, stage) -> bool, True or 'tqdm', optional
    Called as the operation advances; returning True cancels it
    (hyprof.Cancelled is raised). True or 'tqdm' shows a tqdm bar."""


class ParamInfo:
    """One registry parameter as the Python API sees it."""

    def __init__(self, p):
        self.cname = text(p.name)
        self.name = self.cname.replace("-", "_")
        self.type = p.type
        self.type_name = text(lib.hyprof_param_type_name(p.type))
        self.min, self.max = p.min, p.max
        self.choices = text(p.choices)
        self.help = text(p.help) or ""
        self.required = bool(p.flags & REQUIRED)
        self.default_text = text(p.default)
        self.default = self._typed(self.default_text)

    def _typed(self, s):
        if s is None:
            return None
        if self.type == INT:
            return int(float(s)) if s.lstrip("-").replace(".", "", 1).isdigit() else s
        if self.type == FLOAT:
            return float(s)
        if self.type == BOOL:
            return s == "true"
        if self.type in (INT_LIST, FLOAT_LIST):
            conv = int if self.type == INT_LIST else float
            return [conv(v) for v in s.split(",")]
        return s

    def to_text(self, op, v):
        """The value as the library's parser reads it; TypeError for a wrong type."""
        def bad(what):
            return TypeError("hyprof.%s: parameter '%s' must be %s, not %s"
                             % (op, self.name, what, type(v).__name__))
        number = isinstance(v, numbers.Number) and not isinstance(v, bool)
        if self.type == INT:
            if not isinstance(v, numbers.Integral) or isinstance(v, bool):
                raise bad("an integer")
            return str(int(v))
        if self.type == FLOAT:
            if not isinstance(v, numbers.Real) or isinstance(v, bool):
                raise bad("a real number")
            return repr(float(v))
        if self.type == BOOL:
            if not isinstance(v, (bool, numbers.Integral)):
                raise bad("True or False")
            return "true" if v else "false"
        if self.type in (INT_LIST, FLOAT_LIST):
            return self._list_text(op, v, bad)
        if self.type in (FILE_IN, FILE_OUT, RASTER_IN, VECTOR_IN):
            if not isinstance(v, (str, os.PathLike)):
                raise bad("a path")
            return os.fspath(v)
        if isinstance(v, str):
            return v
        if number and isinstance(v, numbers.Integral):
            return str(int(v))
        if self.type == STRING and isinstance(v, (list, tuple)):
            return ",".join(str(x) for x in v)
        if self.type == CHOICE:
            raise bad("one of " + self.choices.replace("|", ", "))
        raise bad("a string")

    def _list_text(self, op, v, bad):
        if isinstance(v, str):
            return v
        items = [v] if isinstance(v, numbers.Number) else v
        try:
            items = list(items)
        except TypeError:
            raise bad("a list of numbers") from None
        out = []
        for x in items:
            if isinstance(x, bool) or not isinstance(x, numbers.Real):
                raise bad("a list of numbers")
            if self.type == INT_LIST:
                if not isinstance(x, numbers.Integral) and float(x) != int(x):
                    raise bad("a list of integers")
                out.append(str(int(x)))
            else:
                out.append(repr(float(x)))
        return ",".join(out)

    def doc(self):
        kind = {INT: "int", FLOAT: "float", CHOICE: "str", STRING: "str", INT_LIST: "list of int",
                FLOAT_LIST: "list of float", BOOL: "bool"}.get(self.type, "path")
        if self.type == CHOICE:
            kind = "{%s}" % ", ".join(repr(c) for c in self.choices.split("|"))
        tail = "required" if self.required else (
            "optional" if self.default is None else "default %r" % (self.default,))
        rng = ""
        if (self.min or self.max) and self.type in (INT, FLOAT, INT_LIST, FLOAT_LIST):
            rng = " Range [%.15g, %.15g]." % (self.min, self.max)
        body = textwrap.fill(self.help + rng, 76, initial_indent="    ", subsequent_indent="    ")
        return "%s : %s, %s\n%s" % (self.name, kind, tail, body)


class Operation:
    """A registry operation: its parameters and the C table entry."""

    def __init__(self, ptr):
        op = ptr.contents
        self.ptr = ptr
        self.name = text(op.name)
        self.group = text(op.group)
        self.summary = text(op.summary)
        self.help = text(op.help)
        self.output = text(op.output)
        self.runnable = bool(op.run)
        self.params = [ParamInfo(op.params[i]) for i in range(op.nparams)]
        self.by_name = {p.name: p for p in self.params}

    def make_args(self, given, check=True):
        """A hyprof_args_t with the given values (python name -> value) set;
        check: fail when a required one is missing."""
        args = C.c_void_p(lib.hyprof_args_new(self.ptr))
        if not args:
            raise MemoryError("hyprof.%s: out of memory" % self.name)
        try:
            for name, v in given.items():
                p = self.by_name[name]
                if v is None:
                    continue
                if lib.hyprof_args_set(args, p.cname.encode(), p.to_text(self.name, v).encode()):
                    raise ArgumentError(self._py_message(text(lib.hyprof_args_error(args))))
            if check and lib.hyprof_args_check(args):
                raise ArgumentError(self._py_message(text(lib.hyprof_args_error(args))))
        except BaseException:
            lib.hyprof_args_free(C.byref(args))
            raise
        return args

    def _py_message(self, msg):
        """The library's message with the parameter named as in Python: it
        starts with the name ("contrast-percentile 1.5: must be ...") or
        quotes it."""
        for p in self.params:
            if msg.startswith(p.cname + " ") or msg.startswith(p.cname + ":"):
                msg = "'%s'%s" % (p.name, msg[len(p.cname):])
            elif p.cname != p.name:
                msg = msg.replace("'%s'" % p.cname, "'%s'" % p.name)
        return "hyprof.%s: %s" % (self.name, msg)

    def signature(self, first="cube"):
        P = inspect.Parameter
        ps = [P(first, P.POSITIONAL_ONLY)]
        ps += [P(p.name, P.KEYWORD_ONLY, default=None if p.required else p.default)
               for p in self.params]
        ps += [P("mask", P.KEYWORD_ONLY, default=None), P("nodata", P.KEYWORD_ONLY, default=None),
               P("backend", P.KEYWORD_ONLY, default="auto"),
               P("device", P.KEYWORD_ONLY, default=0), P("threads", P.KEYWORD_ONLY, default=0),
               P("progress", P.KEYWORD_ONLY, default=None)]
        return inspect.Signature(ps)

    def docstring(self):
        params = "\n".join(p.doc() for p in self.params)
        return ("%s.\n\n%s\n\nParameters\n----------\ncube : array (bands, rows, cols) of real "
                "numbers\n    The input cube (a 2-D array is one band).\n%s\n%s\n\nReturns\n"
                "-------\nhyprof.Result\n    %s\n" % (
                    self.summary, textwrap.fill(self.help, 79), params, COMMON_DOC,
                    "A float32 array (bands, rows, cols) with band_names, mask and metadata: "
                    + self.output))

    def run(self, cube, given, mask=None, nodata=None, backend="auto", device=0, threads=0,
            progress=None):
        """Runs the operation on an array; returns a hyprof.Result."""
        args = self.make_args(given)
        try:
            view = CubeView(cube, mask, nodata, threads, defer=True)
            res = CResult()

            def work(ctx_ptr):  # on the library's thread: the input scan, then the call
                view.complete()
                return lib.hyprof_op_run(ctx_ptr, self.ptr, args, C.byref(view.cube),
                                         C.byref(res))

            with Context(self.name, backend, device, threads, progress) as ctx:
                ctx.call(work)
                backend_used = ctx.used_backend()
            del view
            return result_from(res, backend_used)
        finally:
            lib.hyprof_args_free(C.byref(args))


def operations():
    """Every registry operation, by name."""
    return {o.name: o for o in (Operation(lib.hyprof_op_at(i))
                                for i in range(lib.hyprof_op_count()))}


_COMMON = ("mask", "nodata", "backend", "device", "threads", "progress")


def make_function(op):
    """The generated function of a runnable operation."""
    sig = op.signature()
    keywords = frozenset(sig.parameters) - {"cube"}

    def fn(*a, **kw):
        # One positional argument and known keywords (every parameter has a
        # default) bind as they are; anything else gets Signature.bind's
        # message, which is slower to reach.
        if len(a) != 1 or not keywords.issuperset(kw):
            try:
                sig.bind(*a, **kw)
            except TypeError as e:
                raise TypeError("hyprof.%s(): %s" % (op.name, e)) from None
        given = {p.name: kw[p.name] for p in op.params if p.name in kw}  # registry order
        common = {k: kw[k] for k in _COMMON if k in kw}
        return op.run(a[0], given, **common)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__module__ = "hyprof"
    fn.__signature__ = sig
    fn.__doc__ = op.docstring()
    fn.operation = op
    return fn
