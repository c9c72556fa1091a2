"""`hyprof eadp` (extended anisotropic diffusion profiles) on real data, against
the NumPy reference of tests/eadp_reference.py (the contract of
algorithms/diffusion/eadp_impl.h), an exact solution of the same linear
diffusion (scipy.sparse.linalg.expm_multiply), a Gaussian blur for a constant
diffusivity, and the FED schedule of the paper's Eqs. 7-8.

Relative errors, unless said otherwise:
  max rel  = max |out - ref| / max |PC| over one profile (the profile's scale);
  rel RMS  = ||out - ref||_2 / ||ref||_2 over the diffused bands of one profile.

Run: /usr/bin/python3 -m pytest tests/test_eadp.py
"""

import ctypes
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage
from scipy.sparse.linalg import expm_multiply

from conftest import (EXIT_USAGE, INDIAN_PINES, SAMSON, exe_path, gdal, leftovers,
                      message_lines, read_cube, run, run_ok, write_cube)

import eadp_reference as ref  # noqa: E402  (the oracle)

# Output vs the reference on identical float32 input: both compute in float64,
# summing in different orders, and the output is float32 (a rounding of at most
# 2^-24 = 6e-8 of a value), so a correct implementation is ~1e-7 away: measured
# 1.4e-8 .. 1.8e-8 on Indian Pines PCs 1-3 with the FED steps in a rounding-stable
# order (Leja, as now, or kappa-cycle); 4e-6 .. 3.8e-4 with the steps in ascending order, where a
# 1-ulp change of every tau alone moves the result by up to 2e-5 (eadp_reference.FED_ORDER).
REF_REL_TOL = 1e-5
# Mass: the float64 sum is conserved to ~1e-15; storing float32 moves each pixel by
# at most 2^-24 |u_T|, so the band mean moves by at most 6e-8 * mean|u_T| <= 6e-8 *
# mean|PC| (diffusion does not increase the L1 norm). The PCs are centred (mean ~0),
# so the difference is taken relative to mean|PC|: the 1e-6 is 16x that bound.
MASS_TOL = 1e-6
# Range: a float32 rounding of a value inside [min, max] stays inside (min and max are
# float32 themselves); the slack is for float64 rounding only.
RANGE_TOL = 1e-6
# --cycles 8 vs a converged solution (the 2 %), over each profile's diffused
# bands: measured 0.42 %, 1.13 %, 0.79 % on Indian Pines PCs 1-3 (per band T, the worst
# is 1.95 %: PC2 at T = 65, 2.07 % against expm_multiply).
FED8_TOL = 0.02
# Constant diffusivity vs scipy.ndimage.gaussian_filter(sigma = sqrt(2T)), measured on
# Indian Pines PCs 1-3 at T = 8, 32, 128, 512: 3.9e-4 .. 2.6e-3 relative RMS with
# --cycles 64 (5e-3 .. 1.0e-2 with 16 cycles: the FED error); the exact solution of the
# semi-discrete problem (expm_multiply) is itself up to 4e-3 away (T = 8: the 5-point
# Laplacian's kernel against the sampled Gaussian). 1e-2: above that floor, 4x the
# measured error.
GAUSS_TOL = 1e-2
ND = -9999
TIMES3 = [65.0, 130.0, 195.0]
DEFAULT_TIMES = [65.0 * i for i in range(1, 9)]


# ---- helpers --------------------------------------------------------------------

def eadp(*args, **kw):
    return run_ok("eadp", "--backend", "cpu", *args, **kw)


def band_names(path):
    ds = gdal.Open(str(path))
    return [ds.GetRasterBand(i + 1).GetDescription() for i in range(ds.RasterCount)]


NAME_RE = re.compile(r"^(?P<feat>\S+)(?: T=(?P<t>[0-9.eE+-]+))?$")


def parse_names(names, nfeat, ntimes):
    """[(feature, [T_0 = 0, T_1, ...]), ...] from the band names, checking the layout:
    the feature's own band first (named `PC3` or `PC3 T=0`), then increasing T."""
    assert len(names) == nfeat * (ntimes + 1), (len(names), nfeat, ntimes)
    out = []
    for f in range(nfeat):
        block = names[f * (ntimes + 1):(f + 1) * (ntimes + 1)]
        parsed = [NAME_RE.match(n) for n in block]
        assert all(parsed), "band names not like 'PC3 T=130': %r" % block
        feats = {p.group("feat") for p in parsed}
        assert len(feats) == 1, "one profile, several features: %r" % block
        ts = [float(p.group("t") or 0.0) for p in parsed]
        assert ts[0] == 0.0, block
        out.append((feats.pop(), ts))
    return out


def contrasts(path, features):
    """The k of every feature from the metadata (EADP_CONTRAST_<feature>)."""
    md = gdal.Open(str(path)).GetMetadata()
    ks = []
    for f in features:
        keys = [k for k in md if re.fullmatch(r"(HYPROF_)?EADP_CONTRAST_%s" % re.escape(f), k)]
        assert len(keys) == 1, "no EADP_CONTRAST_%s in the metadata: %s" % (f, sorted(md))
        ks.append(float(md[keys[0]]))
    return np.array(ks)


def profiles(path, nfeat, ntimes):
    """(nfeat, ntimes+1, H, W) float64 of the output's float32 values."""
    a = read_cube(path, np.float32).astype(np.float64)
    return a.reshape(nfeat, ntimes + 1, *a.shape[1:])


def max_rel(out, want, valid=None):
    """max |out - want| / max |want[0]| over the valid pixels of one profile."""
    sel = (slice(None),) + ((valid,) if valid is not None else (slice(None), slice(None)))
    o, w = out[sel], want[sel]
    return float(np.max(np.abs(o - w)) / np.max(np.abs(w[0])))


def rel_rms(out, want):
    return float(np.linalg.norm(out - want) / np.linalg.norm(want))


def exact(u, g, m, times):
    """The exact solution of du/dt = A u (the semi-discrete problem FED solves)."""
    A = ref.conductance_matrix(g, m)
    return [expm_multiply(A * T, np.where(m, u, 0.0).ravel()).reshape(u.shape) for T in times]


def diffusivity_of(u, m, sigma=1.0, percentile=0.7, contrast=0.0, kind="g2"):
    G = ref.gradient_squared(u, m, sigma)
    k = contrast if contrast > 0 else ref.contrast_from(G, m, percentile)
    return ref.diffusivity_from(G, k, kind), k


# ---- shared runs ------------------------------------------------------------------

class Quick:
    """`hyprof pca --components 3` and `hyprof eadp --components 3 --count 3` on a sample."""

    def __init__(self, folder, sample):
        self.pca = folder / "pca.tif"
        self.out = folder / "eadp.tif"
        run_ok("pca", "--backend", "cpu", "--components", 3, sample, self.pca, cwd=folder)
        eadp("--components", 3, "--count", 3, sample, self.out, cwd=folder)
        self.pcs = read_cube(self.pca, np.float32).astype(np.float64)
        self.prof = profiles(self.out, 3, 3)


@pytest.fixture(scope="module", params=["samson", "indian_pines"])
def quick(request, tmp_path_factory):
    sample = {"samson": SAMSON, "indian_pines": INDIAN_PINES}[request.param]
    return Quick(tmp_path_factory.mktemp("eadp_" + request.param), sample)


@pytest.fixture(scope="module")
def pc_file(tmp_path_factory):
    """Indian Pines PCs 1-3 as a float32 GeoTIFF: the input of --reduction none, so
    the library and the reference diffuse the very same values."""
    folder = tmp_path_factory.mktemp("eadp_pcs")
    pca = folder / "pca.tif"
    run_ok("pca", "--backend", "cpu", "--components", 3, INDIAN_PINES, pca, cwd=folder)
    pcs = read_cube(pca, np.float32).astype(np.float32)
    return write_cube(folder / "pcs.tif", pcs, like=INDIAN_PINES), pcs.astype(np.float64)


# ---- properties on real data --------------------------------------------------------

def test_precision_leaves_the_cpu_result(pc_file, tmp_path):
    """--precision picks the arithmetic of the CUDA backend's FED steps; the CPU
    backend computes in double either way, so both values give the same bits."""
    path, _ = pc_file
    outs = []
    for prec in ("float", "double"):
        out = tmp_path / ("%s.tif" % prec)
        eadp("--reduction", "none", "--count", 2, "--precision", prec, path, out, cwd=tmp_path)
        outs.append(read_cube(out, np.float32))
    assert outs[0].shape == outs[1].shape
    assert np.array_equal(outs[0], outs[1], equal_nan=True)


def test_band_count_and_names(quick):
    names = band_names(quick.out)
    parsed = parse_names(names, 3, 3)
    for i, (feat, ts) in enumerate(parsed):
        assert feat == "PC%d" % (i + 1), names
        assert ts == [0.0] + TIMES3, names


def test_first_band_is_the_pc(quick):
    assert quick.prof.shape[2:] == quick.pcs.shape[1:]
    for i in range(3):
        assert np.array_equal(quick.prof[i, 0], quick.pcs[i]), \
            "PC%d: the profile's first band differs from `hyprof pca`" % (i + 1)


def test_mass_conserved(quick):
    for i in range(3):
        pc = quick.pcs[i]
        scale = np.mean(np.abs(pc))
        for j, T in enumerate(TIMES3, 1):
            d = abs(np.mean(quick.prof[i, j]) - np.mean(pc)) / scale
            assert d < MASS_TOL, "PC%d T=%g: mean moved by %.3g of mean|PC|" % (i + 1, T, d)


def test_range_within_pc(quick):
    for i in range(3):
        pc = quick.pcs[i]
        lo, hi = pc.min(), pc.max()
        slack = RANGE_TOL * (hi - lo)
        for j, T in enumerate(TIMES3, 1):
            b = quick.prof[i, j]
            assert b.min() >= lo - slack and b.max() <= hi + slack, \
                "PC%d T=%g: [%g, %g] outside the PC's [%g, %g]" % (i + 1, T, b.min(), b.max(),
                                                                    lo, hi)


def test_total_variation_decreases(quick):
    for i in range(3):
        tv = [ref.total_variation(b) for b in quick.prof[i]]
        assert all(b < a for a, b in zip(tv, tv[1:])), "PC%d: TV %s" % (i + 1, tv)


def test_defaults_on_samson(tmp_path):
    """The paper's defaults (7 PCs, T = 65..520): 63 bands, and every profile equals
    the reference run on its own first band (the PC, exactly as the library saw it)."""
    out = tmp_path / "eadp.tif"
    eadp(SAMSON, out, cwd=tmp_path)
    ds = gdal.Open(str(out))
    assert ds.RasterCount == 63
    assert ds.GetRasterBand(1).DataType == gdal.GDT_Float32
    ds = None
    parsed = parse_names(band_names(out), 7, 8)
    assert [f for f, _ in parsed] == ["PC%d" % i for i in range(1, 8)]
    assert all(ts == [0.0] + DEFAULT_TIMES for _, ts in parsed)
    ks = contrasts(out, [f for f, _ in parsed])
    prof = profiles(out, 7, 8)
    for i in range(7):
        want, k = ref.eadp_profile(prof[i, 0], times=DEFAULT_TIMES)
        assert k == pytest.approx(ks[i], rel=1e-9), "PC%d contrast" % (i + 1)
        e = max_rel(prof[i], want)
        assert e < REF_REL_TOL, "PC%d: max rel error %.3g against the reference" % (i + 1, e)


# ---- the reference, exactly ---------------------------------------------------------

REF_CASES = {
    # id: (CLI options, reference keywords)
    "defaults": ([], {}),
    "g1-sigma2.5-p0.5-times": (["--diffusivity", "g1", "--sigma", "2.5",
                                "--contrast-percentile", "0.5", "--times", "10,20.5,100"],
                               dict(diffusivity="g1", sigma=2.5, percentile=0.5,
                                    times=[10.0, 20.5, 100.0])),
    "g3-cycles3": (["--diffusivity", "g3", "--cycles", "3", "--count", "4", "--step", "30"],
                   dict(diffusivity="g3", cycles=3, times=[30.0, 60.0, 90.0, 120.0])),
    "contrast-given": (["--contrast", "500", "--count", "2", "--sigma", "0.6"],
                       dict(contrast=500.0, sigma=0.6, times=[65.0, 130.0])),
}


@pytest.mark.parametrize("case", sorted(REF_CASES))
def test_matches_reference(pc_file, tmp_path, case):
    src, pcs = pc_file
    opts, kw = REF_CASES[case]
    kw = dict(kw)
    times = kw.setdefault("times", DEFAULT_TIMES)
    out = tmp_path / "eadp.tif"
    eadp("--reduction", "none", *opts, src, out, cwd=tmp_path)
    parsed = parse_names(band_names(out), 3, len(times))
    assert [f for f, _ in parsed] == ["B1", "B2", "B3"]
    for _, ts in parsed:
        assert ts == [0.0] + list(times)
    ks = contrasts(out, ["B1", "B2", "B3"])
    prof = profiles(out, 3, len(times))
    errs = []
    for i in range(3):
        want, k = ref.eadp_profile(pcs[i], **kw)
        assert k == pytest.approx(ks[i], rel=1e-9), "band %d: k %r, reference %r" % (
            i + 1, ks[i], k)
        assert np.array_equal(prof[i, 0], pcs[i])
        errs.append(max_rel(prof[i], want))
    assert max(errs) < REF_REL_TOL, "max rel error per band against the reference: %s" % errs


def test_contrast_is_numpy_percentile(pc_file, tmp_path):
    """k = np.percentile(|grad|, 70) of the smoothed band's Scharr gradient."""
    src, pcs = pc_file
    out = tmp_path / "eadp.tif"
    eadp("--reduction", "none", "--count", 1, src, out, cwd=tmp_path)
    ks = contrasts(out, ["B1", "B2", "B3"])
    m = np.ones(pcs.shape[1:], bool)
    for i in range(3):
        G = ref.gradient_squared(pcs[i], m, 1.0)
        want = np.percentile(np.sqrt(G)[m], 70)
        assert ks[i] == pytest.approx(want, rel=1e-9), (i + 1, ks[i], want)
    out2 = tmp_path / "eadp_k.tif"
    eadp("--reduction", "none", "--count", 1, "--contrast", "123.25", src, out2, cwd=tmp_path)
    assert np.all(contrasts(out2, ["B1", "B2", "B3"]) == 123.25)


# ---- the FED solver against converged solutions ----------------------------------------

def test_reference_converges_to_exact_solution(pc_file):
    """The oracle of the next test, checked: with many short steps the reference
    approaches expm(T A) u (the hardest band of the three: PC2)."""
    _, pcs = pc_file
    u, m = pcs[1], np.ones(pcs.shape[1:], bool)
    g, _ = diffusivity_of(u, m)
    cond = ref.Conductances(g, m)
    times = [65.0, 260.0, 520.0]
    ex = exact(u, g, m, times)
    for name, sol in (("explicit tau 0.2", ref.explicit(u, cond, times, 0.2)),
                      ("FED 64 cycles", ref.diffuse(u, cond, times, 64))):
        errs = [rel_rms(a, b) for a, b in zip(sol, ex)]
        assert max(errs) < 5e-3, "%s: rel RMS %s against expm_multiply" % (name, errs)


def test_fed_cycles8_accuracy(pc_file, tmp_path):
    """--cycles 8 within 2 % of the converged diffusion (explicit steps of 0.2), and
    much closer than --cycles 1."""
    src, pcs = pc_file
    out1, out8 = tmp_path / "c1.tif", tmp_path / "c8.tif"
    eadp("--reduction", "none", src, out1, cwd=tmp_path)
    eadp("--reduction", "none", "--cycles", 8, src, out8, cwd=tmp_path)
    p1, p8 = profiles(out1, 3, 8), profiles(out8, 3, 8)
    m = np.ones(pcs.shape[1:], bool)
    report = []
    for i in range(3):
        g, _ = diffusivity_of(pcs[i], m)
        conv = np.stack(ref.explicit(pcs[i], ref.Conductances(g, m), DEFAULT_TIMES, 0.2))
        e8, e1 = rel_rms(p8[i, 1:], conv), rel_rms(p1[i, 1:], conv)
        per_t = [rel_rms(a, b) for a, b in zip(p8[i, 1:], conv)]
        report.append("PC%d: cycles 8 %.4f (per T max %.4f), cycles 1 %.4f" % (
            i + 1, e8, max(per_t), e1))
        assert e8 < FED8_TOL, "; ".join(report)
        assert e8 < e1 / 4, "; ".join(report)


def test_constant_diffusivity_is_gaussian_blur(pc_file, tmp_path):
    """g == 1 (g2 with a huge k): linear diffusion, i.e. a Gaussian of variance 2T
    with reflecting borders (scipy's mode='reflect' is the half-sample mirror)."""
    src, pcs = pc_file
    times = [8.0, 32.0, 128.0, 512.0]
    out = tmp_path / "heat.tif"
    eadp("--reduction", "none", "--diffusivity", "g2", "--contrast", "1e12", "--cycles", 64,
         "--times", ",".join("%g" % t for t in times), src, out, cwd=tmp_path)
    prof = profiles(out, 3, len(times))
    errs = []
    for i in range(3):
        for j, T in enumerate(times, 1):
            blur = ndimage.gaussian_filter(pcs[i], math.sqrt(2 * T), mode="reflect")
            errs.append(rel_rms(prof[i, j], blur))
    assert max(errs) < GAUSS_TOL, "rel RMS against gaussian_filter: %s" % np.round(errs, 5)


@pytest.mark.parametrize("T", [520.0, 3000.0])
def test_long_cycle_is_stable(pc_file, tmp_path, T):
    """One FED cycle of T = 520 (n = 79 steps, as the paper runs each T_i from the
    band) or 3000 (n = 190): the maximum principle holds and the result is the
    reference's. With the steps in ascending order, rounding errors are amplified by up
    to ~1e37 at T = 520; in the kappa-cycle order the intermediate values grow by 5e58
    at T = 3000 (the result was NaN, even in float64)."""
    src, pcs = pc_file
    out = tmp_path / "long.tif"
    eadp("--reduction", "none", "--times", "%g" % T, src, out, cwd=tmp_path)
    prof = profiles(out, 3, 1)
    for i in range(3):
        lo, hi = pcs[i].min(), pcs[i].max()
        b = prof[i, 1]
        assert np.all(np.isfinite(b)) and b.min() >= lo and b.max() <= hi, \
            "band %d, T=%g in one cycle: [%g, %g] outside [%g, %g]" % (
                i + 1, T, b.min(), b.max(), lo, hi)
        want, _ = ref.eadp_profile(pcs[i], times=[T])
        e = max_rel(prof[i], want)
        assert e < REF_REL_TOL, "band %d: max rel error %.3g against the reference" % (i + 1, e)


# ---- the FED schedule (Eqs. 7 and 8) -----------------------------------------------------

@pytest.mark.parametrize("t, n", [(65, 28), (0.5, 2), (1, 3), (130, 39), (520, 79), (1e-6, 1)])
def test_fed_schedule(t, n):
    """Eq. 8 by hand: T = 65 -> ceil(-1/2 + sqrt(1 + 12*65/0.25)/2) = ceil(27.43) = 28;
    T = 1 -> sqrt(49) = 7 -> exactly 3; T = 0.5 -> sqrt(25) -> exactly 2."""
    got, tau = ref.fed_steps(t)
    assert got == n
    assert len(tau) == n and np.all(tau > 0)
    assert math.isclose(tau.sum(), t, rel_tol=1e-12)
    # Eq. 7 before scaling: tau_max / (2 cos^2(pi (2j+1) / (4n+2))), summing to
    # tau_max (n^2 + n) / 3 >= t; the schedule is that set, scaled to sum to t.
    eq7 = np.sort(0.25 / (2 * np.cos(np.pi * (2 * np.arange(n) + 1) / (4 * n + 2)) ** 2))
    assert math.isclose(eq7.sum(), 0.25 * (n * n + n) / 3, rel_tol=1e-12)
    assert 0.25 * (n * n + n) / 3 >= t
    assert np.allclose(np.sort(tau), eq7 * t / eq7.sum(), rtol=1e-13, atol=0)


def test_paper_step_count():
    """The paper's 3178 step launches for 7 PCs = 7 * sum_i n(65 i) (DESIGN.md); the
    default continues from the previous T: 8 increments of 65, 28 steps each."""
    assert 7 * sum(ref.fed_steps(65 * i)[0] for i in range(1, 9)) == 3178
    assert ref.fed_steps(65)[0] * 8 == 224


def libhyprof():
    """The libhyprof the executable under test loads (from `ldd`), or None."""
    try:
        r = subprocess.run(["ldd", exe_path()], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    m = re.search(r"libhyprof\.so\S*\s+=>\s+(\S+)", r.stdout)
    return ctypes.CDLL(m.group(1)) if m and Path(m.group(1)).is_file() else None


@pytest.mark.parametrize("t", [1e-6, 0.5, 1, 65, 130, 520, 4000])
def test_library_fed_steps_match_reference(t):
    """hyprof_fed_steps(t, tau) of the library (not reachable from the CLI), through
    ctypes: the same count and the same steps, in the same order, as the reference."""
    lib = libhyprof()
    if lib is None:
        pytest.skip("libhyprof.so not found through ldd of the executable (static build?)")
    f = lib.hyprof_fed_steps
    f.restype, f.argtypes = ctypes.c_size_t, [ctypes.c_double, ctypes.POINTER(ctypes.c_double)]
    n = f(t, None)
    buf = (ctypes.c_double * n)()
    assert f(t, buf) == n
    want_n, want = ref.fed_steps(t)
    assert n == want_n, "T=%g: library %d steps, Eq. 8 %d" % (t, n, want_n)
    got = np.array(buf[:])
    assert np.allclose(got, want, rtol=1e-13, atol=0), \
        "T=%g: steps differ (order %r)\nlibrary   %s\nreference %s" % (
            t, ref.FED_ORDER, got[:6], want[:6])
    assert f(0.0, None) == 0 and f(-1.0, None) == 0


@pytest.mark.parametrize("t", [65, 130, 520, 3000])
def test_fed_order_is_rounding_stable(t):
    """The step order must not blow up rounding errors: a cycle's worst-case
    amplification of an error made mid-cycle and the worst-case growth of the
    intermediate values both stay modest (the Leja order: 1.5 and 82 for T=65, 32 and
    164 for 130, 1.2 and 805 for 520, 3.5 and 3.7e3 for 3000; ascending order: an
    error grows by 1e12, 6e17, 3e37; the kappa-cycle order: the values grow by 7.7e6,
    4.3e3, 2.1e5, 5e58)."""
    _, tau = ref.fed_steps(t)
    a, g = ref.amplification(tau), ref.growth(tau)
    assert a < 1e3, "FED order %r amplifies rounding by %.3g for T=%g" % (ref.FED_ORDER, a, t)
    assert g < 1e4, "FED order %r grows the values by %.3g for T=%g" % (ref.FED_ORDER, g, t)


# DESIGN.md's bound for a float32 path: max |float32 - float64| / max |float64|.
FLOAT_REL_TOL = 1e-4


@pytest.mark.parametrize("times, cycles", [(DEFAULT_TIMES, 1), (DEFAULT_TIMES, 8),
                                           ([520.0, 1040.0, 2080.0], 1), ([1000.0, 4000.0], 1)])
def test_fed_order_float32(pc_file, times, cycles):
    """With the steps in the library's order, FED with float32 values and float32
    arithmetic (what a float GPU path does) stays within DESIGN.md's 1e-4 of the
    float64 result. Measured on Indian Pines PCs 1-3 (and Samson, 7 PCs): at most
    1.1e-6 with the defaults, 1.6e-7 with --cycles 8, 1e-5 for T = 1000, 4000 in one
    cycle each; in the kappa-cycle order 3.1e-3 with the defaults, in ascending order
    1.6e4 (inf and NaN appear)."""
    _, pcs = pc_file
    m = np.ones(pcs.shape[1:], bool)
    errs = []
    for i in range(3):
        g, _ = diffusivity_of(pcs[i], m)
        c64 = ref.Conductances(g, m)
        c32 = ref.Conductances(g.astype(np.float32), m)
        c32.cx, c32.cy = c32.cx.astype(np.float32), c32.cy.astype(np.float32)
        want = ref.diffuse(pcs[i], c64, times, cycles)
        got, u, prev = [], pcs[i].astype(np.float32), 0.0
        for T in times:
            _, tau = ref.fed_steps((T - prev) / cycles)
            for _ in range(cycles):
                for t in tau.astype(np.float32):
                    u = u + t * c32.flux(u)
                    assert u.dtype == np.float32
            got.append(u.astype(np.float64))
            prev = T
        errs.append(max(np.abs(a - b).max() for a, b in zip(got, want)) /
                    max(np.abs(b).max() for b in want))
    assert max(errs) < FLOAT_REL_TOL, "float32 FED, rel error per band: %s" % errs


# ---- bad input -------------------------------------------------------------------------

BAD = {
    # id: (options, tokens that must be in the one-line message)
    "step-0": (["--step", "0"], ["step", re.compile(r"\b0\b")]),
    "step-negative": (["--step", "-5"], ["-5"]),
    "sigma-0": (["--sigma", "0"], ["sigma", re.compile(r"\b0\b")]),
    "sigma-negative": (["--sigma", "-1"], ["-1"]),
    "percentile-0": (["--contrast-percentile", "0"], ["percentile", re.compile(r"\b0\b")]),
    "percentile-1.5": (["--contrast-percentile", "1.5"], ["1.5"]),
    "percentile-1": (["--contrast-percentile", "1"], ["percentile", re.compile(r"\b1\b")]),
    "components-999": (["--components", "999"], ["999"]),
    "times-decreasing": (["--times", "5,3"], [re.compile(r"\b3\b")]),
    "times-repeated": (["--times", "5,5"], [re.compile(r"\b5\b")]),
    "times-negative": (["--times", "-2,4"], ["-2"]),
    "cycles-0": (["--cycles", "0"], ["cycles", re.compile(r"\b0\b")]),
    "count-0": (["--count", "0"], ["count", re.compile(r"\b0\b")]),
    "contrast-0": (["--contrast", "0"], ["contrast", re.compile(r"\b0\b")]),
    "diffusivity-g4": (["--diffusivity", "g4"], ["g4"]),
    "precision-half": (["--precision", "half"], ["half"]),
    "reduction-bogus": (["--reduction", "ica"], ["ica"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(tmp_path, case):
    opts, tokens = BAD[case]
    r = run("eadp", "--backend", "cpu", *opts, SAMSON, tmp_path / "out.tif", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, "exit %d; stderr: %s" % (r.returncode, r.stderr)
    msg = message_lines(r.stderr)
    assert len(msg) == 1, r.stderr
    for t in tokens:
        if isinstance(t, re.Pattern):
            assert t.search(msg[0]), "%r not in %r" % (t.pattern, msg[0])
        else:
            assert t in msg[0], "%r not in %r" % (t, msg[0])
    assert not leftovers(tmp_path, "out.tif")


def test_constant_image(tmp_path):
    """Gradient zero everywhere: k falls back to 1 (not 0 or NaN), nothing moves."""
    cube = np.empty((3, 40, 50), np.float32)
    cube[0], cube[1], cube[2] = 5.0, -300.25, 0.0
    src = write_cube(tmp_path / "flat.tif", cube, like=SAMSON)
    out = tmp_path / "eadp.tif"
    eadp("--reduction", "none", "--count", 3, src, out, cwd=tmp_path)
    ks = contrasts(out, ["B1", "B2", "B3"])
    assert np.all(np.isfinite(ks) & (ks > 0)), ks
    prof = profiles(out, 3, 3)
    for i in range(3):
        assert np.all(prof[i] == cube[i]), "band %d changed" % (i + 1)
    for i in range(3):
        _, k = ref.eadp_profile(cube[i], times=TIMES3)
        assert k == 1.0 and ks[i] == k


def test_constant_image_with_pca(tmp_path):
    """The default reduction on a constant cube: either refused with a message or
    a profile that does not move (no NaN, k > 0)."""
    cube = np.full((6, 30, 30), 7, np.int16)
    src = write_cube(tmp_path / "flat.tif", cube, like=SAMSON)
    out = tmp_path / "eadp.tif"
    r = run("eadp", "--backend", "cpu", "--components", 2, "--count", 2, src, out, cwd=tmp_path)
    if r.returncode == EXIT_USAGE:
        assert len(message_lines(r.stderr)) == 1, r.stderr
        assert not leftovers(tmp_path, "eadp.tif")
        return
    assert r.returncode == 0, r.stderr
    prof = profiles(out, 2, 2)
    assert np.all(np.isfinite(prof))
    for i in range(2):
        assert np.all(prof[i] == prof[i, 0])
    ks = contrasts(out, ["PC1", "PC2"])
    assert np.all(np.isfinite(ks) & (ks > 0)), ks


def check_masked(out, src_pcs, valid, nfeat, times, features):
    """Masked pixels stay missing; valid pixels equal the masked reference; k and
    the means use the valid pixels only."""
    ds = gdal.Open(str(out))
    nd = ds.GetRasterBand(1).GetNoDataValue()
    ds = None
    prof = profiles(out, nfeat, len(times))
    bad = prof[:, :, ~valid]
    assert np.all(np.isnan(bad)) or (nd is not None and np.all(bad == nd)), \
        "masked pixels must come out as nodata (nodata %r)" % (nd,)
    good = prof[:, :, valid]
    assert np.all(np.isfinite(good)), "NaN/inf at valid pixels: %s per band" % (
        np.sum(~np.isfinite(good), axis=-1).tolist(),)
    ks = contrasts(out, features)
    for i in range(nfeat):
        u = src_pcs[i]
        want, k = ref.eadp_profile(u, valid, times=times)
        assert k == pytest.approx(ks[i], rel=1e-9), (features[i], ks[i], k)
        e = max_rel(prof[i], want, valid)
        assert e < REF_REL_TOL, "%s: max rel error %.3g on valid pixels" % (features[i], e)
        scale = np.mean(np.abs(u[valid]))
        for j in range(1, len(times) + 1):
            d = abs(prof[i, j][valid].mean() - u[valid].mean()) / scale
            assert d < MASS_TOL, "%s T=%g: mean over valid pixels moved by %.3g" % (
                features[i], times[j - 1], d)


@pytest.mark.parametrize("how", ["nan", "nodata"])
def test_masked_pixels_none(pc_file, tmp_path, how):
    """NaN in any band (float input, no nodata value) or the nodata value masks the
    pixel (as for pca): out of the statistics (k; zero flux to and from it) and
    NaN/nodata in every output band."""
    _, pcs = pc_file
    cube = pcs.astype(np.float32).copy()
    bad = np.nan if how == "nan" else ND
    cube[:, 40:60, 30:70] = bad
    cube[1, 100, 100] = bad
    cube[2, 0, 144] = bad
    valid = np.all(np.isfinite(cube) & (cube != ND), axis=0)
    src = write_cube(tmp_path / "pcs_masked.tif", cube, like=INDIAN_PINES,
                     nodata=None if how == "nan" else ND)
    out = tmp_path / "eadp.tif"
    eadp("--reduction", "none", "--count", 3, src, out, cwd=tmp_path)
    check_masked(out, np.where(valid, cube, 0).astype(np.float64), valid, 3, TIMES3,
                 ["B1", "B2", "B3"])


def test_nodata_pixels(tmp_path):
    """Samson with a nodata block, through the whole pipeline (PCA on the valid
    pixels, then diffusion): the profile starts from `hyprof pca`'s bands."""
    cube = read_cube(SAMSON, np.int16).astype(np.int16)
    cube[:, 10:30, 20:50] = ND
    cube[77, 60, 3] = ND
    src = write_cube(tmp_path / "samson_nd.tif", cube, nodata=ND, like=SAMSON)
    valid = np.all(cube != ND, axis=0)
    pca, out = tmp_path / "pca.tif", tmp_path / "eadp.tif"
    run_ok("pca", "--backend", "cpu", "--components", 3, src, pca, cwd=tmp_path)
    eadp("--components", 3, "--count", 3, src, out, cwd=tmp_path)
    pcs = read_cube(pca, np.float32).astype(np.float64)
    prof = profiles(out, 3, 3)
    for i in range(3):
        assert np.array_equal(prof[i, 0][valid], pcs[i][valid])
    ds = gdal.Open(str(out))
    assert math.isnan(ds.GetRasterBand(1).GetNoDataValue()), "float outputs use NaN as nodata"
    ds = None
    check_masked(out, np.where(valid, pcs, 0), valid, 3, TIMES3, ["PC1", "PC2", "PC3"])


def test_dwt_reduction(tmp_path):
    """--reduction dwt: the profile of each approximation band, which is exactly
    `hyprof dwt`'s band."""
    dwt, out = tmp_path / "dwt.tif", tmp_path / "eadp.tif"
    run_ok("dwt", "--backend", "cpu", "--wavelet", "haar", "--levels", 4, SAMSON, dwt,
           cwd=tmp_path)
    eadp("--reduction", "dwt", "--wavelet", "haar", "--levels", 4, "--count", 2, SAMSON, out,
         cwd=tmp_path)
    feats = read_cube(dwt, np.float32).astype(np.float64)
    n = feats.shape[0]
    assert n == math.ceil(156 / 16)
    parsed = parse_names(band_names(out), n, 2)
    assert [f for f, _ in parsed] == ["A%d" % (i + 1) for i in range(n)]
    prof = profiles(out, n, 2)
    for i in range(n):
        assert np.array_equal(prof[i, 0], feats[i])
    want, _ = ref.eadp_profile(feats[0], times=[65.0, 130.0])
    assert max_rel(prof[0], want) < REF_REL_TOL
