"""python3 -m hyprof OP [--scheduler ADDR] [--workers N] [OPTIONS] INPUT... OUTPUT

Runs a hyprof operation on raster files on a Dask cluster, one task per
scene (hyprof.dask.map_files): the scheduler at ADDR (tcp://host:8786), or
a LocalCluster of N worker processes on 127.0.0.1. OPTIONS are the
operation's, as `hyprof OP --help` lists them (classify: --model). With one
INPUT, OUTPUT is the output file; with several, a folder (INPUT-STEM_OP.tif
in it). Exit status: 0 when every scene is written, 1 when one failed (each
failure on stderr, the other scenes written), 2 for bad arguments."""

import argparse
import sys

BOOL = 6


def _parser(op, hp):
    ap = argparse.ArgumentParser(prog="python3 -m hyprof %s" % op,
                                 description="hyprof %s on a Dask cluster, one task per scene."
                                 % op)
    ap.add_argument("--scheduler", help="Scheduler address (default: a LocalCluster on "
                                        "127.0.0.1)")
    ap.add_argument("--workers", type=int, help="Worker processes of the LocalCluster "
                                                "(default: one per core)")
    ap.add_argument("--overwrite", action="store_true", help="Replace existing outputs.")
    ap.add_argument("paths", nargs="+", metavar="INPUT... OUTPUT")
    params = []
    if op == "classify":
        ap.add_argument("--model", required=True, help="The model written by 'hyprof train'.")
    else:
        for p in hp.OPERATIONS[op].params:
            if p.type_name == "file_out":
                continue  # one file for every scene: not from here
            flag = "--" + p.cname
            if p.type == BOOL:
                ap.add_argument(flag, dest=p.name, action="store_true", help=p.help)
            else:
                ap.add_argument(flag, dest=p.name, help=p.help, required=p.required)
            params.append(p)
    return ap, params


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    import hyprof as hp
    ops = [n for n in hp._generated] + ["classify"]
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in ops:
        print(__doc__, file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        if argv and argv[0] not in ("-h", "--help"):
            print("hyprof: unknown operation '%s' (one of %s)" % (argv[0], ", ".join(ops)),
                  file=sys.stderr)
            return 2
        return 0 if argv else 2
    op = argv[0]
    ap, params = _parser(op, hp)
    a = ap.parse_args(argv[1:])  # exits with 2 on a bad option
    if len(a.paths) < 2:
        ap.error("give INPUT and OUTPUT")
    kw = {"model": a.model} if op == "classify" else {}
    for p in params:
        v = getattr(a, p.name)
        if v is None or (p.type == BOOL and not v):
            continue
        try:
            kw[p.name] = True if p.type == BOOL else p._typed(v)
        except ValueError:
            ap.error("argument --%s: bad value '%s'" % (p.cname, v))
    inputs, output = a.paths[:-1], a.paths[-1]
    try:
        import hyprof.dask as hd
    except ImportError as e:
        print("hyprof: running on Dask needs dask.distributed (Debian: python3-dask "
              "python3-distributed): %s" % e, file=sys.stderr)
        return 2
    try:
        if op != "classify":
            hd._check(op, kw)
        c = hd.client(a.scheduler, n_workers=a.workers)
        res = hd.map_files(op, inputs, output if len(inputs) > 1 else [output], client=c,
                           overwrite=a.overwrite, **kw)
    except (ValueError, TypeError) as e:
        print("hyprof: %s" % e, file=sys.stderr)
        return 2
    failed = [r for r in res if not r.ok]
    for r in failed:
        print("hyprof: %s: %s" % (r.input, r.error), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
