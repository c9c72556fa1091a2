"""A straightforward NumPy implementation of the EADP diffusion of hyprof.

It follows, step by step, the contract written at the top of
algorithms/diffusion/eadp_impl.h (the C and CUDA backends implement the same),
in float64, vectorised over pixels (the only Python loops run over filter taps,
FED steps and process times). It is the oracle of tests/test_eadp.py and the
CPU peer `numpy-eadp` of bench/run_bench.py, so it needs NumPy only (no SciPy,
no GDAL).

    stack, k = eadp_profile(band2d, mask2d, sigma=1.0, percentile=0.7, contrast=0.0,
                            diffusivity="g2", times=[65, 130, ...], cycles=1)
    n, tau = fed_steps(t)

Per band u (values of masked pixels are ignored), with m the validity mask:

1. s = Gy*(Gx*(m u)) / Gy*(Gx*m): a normalised separable Gaussian, weights
   exp(-j^2 / (2 sigma^2)) for j = -r..r, r = ceil(3 sigma), half-sample
   reflection at the borders (-1 -> 0, -2 -> 1, n -> n-1, n+1 -> n-2, repeated
   for images smaller than r); s = 0 where the denominator is 0.
2. Scharr derivatives of s (same reflection), G = gx^2 + gy^2.
3. k: `contrast` when > 0, else the `percentile` of sqrt(G) over the valid
   pixels (NumPy's linear interpolation); when that is not > 0, the same
   percentile over the valid pixels with G > 0; with none of those, k = 1.
4. g from r = G / k^2: g1 = exp(-r), g2 = 1/(1+r), g3 = 1 - exp(-3.315/r^4)
   (1 where r = 0); fixed for the whole profile.
5. For each increment T_i - T_(i-1) (T_0 = 0): `cycles` FED cycles of length
   (T_i - T_(i-1)) / cycles, each the steps of fed_steps() (in FED_ORDER), each a
   Jacobi step u += tau * sum over the 4-neighbours q (inside the image, p and
   q valid) of (g(p)+g(q))/2 * (u(q) - u(p)); the profile continues from the
   previous T.
"""

import math

import numpy as np

TAU_MAX = 0.25          # the explicit scheme's stability limit in 2-D (h = 1)
G3_CONSTANT = 3.315     # Weickert's C_m for m = 4


# ---- FED schedule (Eqs. 7 and 8 of the EADP paper) ---------------------------

# The order of the steps inside a cycle. Mathematically the order does not matter (the
# diffusivity is fixed, so the steps commute), but the partial products of the factors
# (1 - tau_j lambda) do: those of the steps already done grow the intermediate values
# (and with them the absolute rounding errors), those of the steps still to come multiply
# an error made mid-cycle. "ascending" puts every long step last: an early error grows by
# ~1e12 for n = 28 steps (t = 65), 3e37 for n = 79 (t = 520). "kappa" is the kappa-cycle
# permutation (kappa = n // 2, modulo the next prime above n) of the KAZE/AKAZE FED code
# (fed.cpp, fed_tau_internal), which the paper's `fed_tau_by_process_time` comes from: it
# keeps the later products near 1 but lets the intermediate values grow by 7.7e6 for
# n = 28 and 5e58 for n = 190 (t = 3000: NaN even in float64). "leja" (the default, what
# eadp.c's hyprof_fed_steps does) is the Leja ordering of the roots lambda_j = 1/tau_j
# (Reichel 1991, for Richardson iterations): both kinds of products stay below ~1e3 up to
# n = 190 (amplification() and growth() below), and float32 arithmetic stays within 1e-5
# of float64 on Indian Pines and Samson (test_eadp.py::test_fed_order_float32).
FED_ORDER = "leja"


def leja_order(lam):
    """Leja ordering of the values lam: the largest first, then each next one maximises
    the product of its distances to those taken (a sum of logs, accumulated in the
    order taken, ties to the lower index: as eadp.c)."""
    n = len(lam)
    acc = np.zeros(n)
    used = np.zeros(n, bool)
    last = int(np.argmax(lam))
    idx = [last]
    used[last] = True
    for _ in range(1, n):
        best = -1
        for j in range(n):  # a plain loop: the same additions in the same order as eadp.c
            if used[j]:
                continue
            acc[j] += math.log(abs(lam[j] - lam[last]))
            if best < 0 or acc[j] > acc[best]:
                best = j
        last = best
        used[last] = True
        idx.append(last)
    return np.array(idx, dtype=np.intp)


def _is_prime(p):
    return p > 1 and all(p % d for d in range(2, int(math.isqrt(p)) + 1))


def kappa_order(n):
    """AKAZE's fed_tau_internal permutation: position l gets step index
    ((k+1) * kappa) % prime - 1 for k = 0, 1, ..., skipping indices >= n."""
    kappa, prime = max(n // 2, 1), n + 1   # n = 1: AKAZE's kappa 0 would index tau[-1]
    while not _is_prime(prime):
        prime += 1
    idx, k = [], 0
    while len(idx) < n:
        i = ((k + 1) * kappa) % prime - 1
        k += 1
        if 0 <= i < n:
            idx.append(i)
    return np.array(idx, dtype=np.intp)


def fed_steps(t, tau_max=TAU_MAX, order=None):
    """(n, tau) of one FED cycle of length t: n = ceil(-1/2 + sqrt(1 + 12 t / tau_max) / 2)
    steps (Eq. 8 with M = 1: t is one cycle's time), tau_j = tau_max / (2 cos^2(pi (2j+1)
    / (4n+2))) for j = 0..n-1 (Eq. 7, ascending), scaled so that they sum to t exactly
    (unscaled they sum to tau_max (n^2+n)/3 >= t). order: "ascending", "kappa" or "leja"
    (default: FED_ORDER, see there)."""
    if not t > 0:
        raise ValueError("FED cycle time must be > 0, got %r" % (t,))
    n = int(math.ceil(-0.5 + 0.5 * math.sqrt(1.0 + 12.0 * t / tau_max)))
    j = np.arange(n, dtype=np.float64)
    c = np.cos(np.pi * (2.0 * j + 1.0) / (4.0 * n + 2.0))
    tau = tau_max / (2.0 * c * c)
    tau *= t / tau.sum()
    order = order or FED_ORDER
    if order == "kappa":
        tau = tau[kappa_order(n)]
    elif order == "leja":
        tau = tau[leja_order(1.0 / tau)]
    elif order != "ascending":
        raise ValueError("order must be ascending, kappa or leja, got %r" % (order,))
    return n, tau


def _partial_products(tau, lam_max, samples):
    lam = np.linspace(0.0, lam_max, samples)
    p, worst = np.ones_like(lam), 0.0
    for t in tau:
        p *= 1.0 - t * lam
        worst = max(worst, float(np.abs(p).max()))
    return worst


def amplification(tau, lam_max=8.0, samples=20001):
    """Worst-case growth of a rounding error made before step J of the cycle:
    max over J and lambda in [0, lam_max] of |prod_(j >= J) (1 - tau_j lambda)|
    (lam_max = 8: the largest eigenvalue magnitude of the 2-D operator with g <= 1)."""
    return _partial_products(np.asarray(tau)[::-1], lam_max, samples)


def growth(tau, lam_max=8.0, samples=20001):
    """Worst-case growth of the intermediate values inside the cycle (and of their
    absolute rounding errors): max over J and lambda of |prod_(j < J) (1 - tau_j lambda)|."""
    return _partial_products(tau, lam_max, samples)


# ---- borders, smoothing, derivatives -----------------------------------------

def reflect_index(i, n):
    """Half-sample reflection of integer indices into 0..n-1: -1 -> 0, -2 -> 1,
    n -> n-1, n+1 -> n-2, repeated until inside (period 2n)."""
    i = np.mod(np.asarray(i), 2 * n)
    return np.where(i < n, i, 2 * n - 1 - i)


def _correlate_axis(a, w, axis):
    """sum_j w[j] * a[..., reflect(x + j - r), ...] along `axis` (w has 2r+1 taps)."""
    r = (len(w) - 1) // 2
    n = a.shape[axis]
    x = np.arange(n)
    out = np.zeros_like(a)
    for j, wj in enumerate(w):
        out += wj * np.take(a, reflect_index(x + j - r, n), axis=axis)
    return out


def gaussian_weights(sigma):
    r = int(math.ceil(3.0 * sigma))
    j = np.arange(-r, r + 1, dtype=np.float64)
    return np.exp(-j * j / (2.0 * sigma * sigma))


def smooth(u, m, sigma):
    """The normalised (masked) separable Gaussian of step 1."""
    w = gaussian_weights(sigma)
    mf = m.astype(np.float64)
    num = _correlate_axis(_correlate_axis(np.where(m, u, 0.0), w, 1), w, 0)
    den = _correlate_axis(_correlate_axis(mf, w, 1), w, 0)
    s = np.zeros_like(num)
    np.divide(num, den, out=s, where=den != 0)
    return s


def scharr(s):
    """(gx, gy): Scharr derivatives /32 with half-sample reflection (step 2)."""
    h, w = s.shape
    ym, yp = reflect_index(np.arange(h) - 1, h), reflect_index(np.arange(h) + 1, h)
    xm, xp = reflect_index(np.arange(w) - 1, w), reflect_index(np.arange(w) + 1, w)
    dx = s[:, xp] - s[:, xm]              # central difference along x, every row
    dy = s[yp, :] - s[ym, :]
    gx = (3.0 * dx[ym, :] + 10.0 * dx + 3.0 * dx[yp, :]) / 32.0
    gy = (3.0 * dy[:, xm] + 10.0 * dy + 3.0 * dy[:, xp]) / 32.0
    return gx, gy


def gradient_squared(u, m, sigma):
    """G = gx^2 + gy^2 of the smoothed band (steps 1-2)."""
    gx, gy = scharr(smooth(u, m, sigma))
    return gx * gx + gy * gy


def contrast_from(G, m, percentile):
    """Step 3: the percentile of sqrt(G) over valid pixels, with the fallbacks."""
    mag = np.sqrt(G[m])
    if mag.size == 0:
        return 1.0
    k = float(np.percentile(mag, 100.0 * percentile))
    if k > 0:
        return k
    pos = mag[mag > 0]
    if pos.size == 0:
        return 1.0  # constant band: g = 1 for any k
    return float(np.percentile(pos, 100.0 * percentile))


def diffusivity_from(G, k, kind="g2"):
    """Step 4: g1, g2 or g3 of r = G / k^2."""
    r = G / (k * k)
    if kind == "g1":
        return np.exp(-r)
    if kind == "g2":
        return 1.0 / (1.0 + r)
    if kind == "g3":
        g = np.ones_like(r)
        pos = r > 0
        with np.errstate(over="ignore", divide="ignore", under="ignore"):
            g[pos] = 1.0 - np.exp(-G3_CONSTANT / r[pos] ** 4)
        return g
    raise ValueError("diffusivity must be g1, g2 or g3, got %r" % (kind,))


# ---- the explicit steps --------------------------------------------------------

class Conductances:
    """Edge conductances (g(p)+g(q))/2 between 4-neighbours, zero across the
    image border (not stored) and wherever p or q is masked."""

    def __init__(self, g, m):
        self.cx = 0.5 * (g[:, 1:] + g[:, :-1]) * (m[:, 1:] & m[:, :-1])   # (p, p + x)
        self.cy = 0.5 * (g[1:, :] + g[:-1, :]) * (m[1:, :] & m[:-1, :])   # (p, p + y)

    def flux(self, u):
        """sum over neighbours q of c(p,q) (u(q) - u(p)) for every pixel p."""
        fx = self.cx * (u[:, 1:] - u[:, :-1])
        fy = self.cy * (u[1:, :] - u[:-1, :])
        d = np.zeros_like(u)
        d[:, :-1] += fx
        d[:, 1:] -= fx
        d[:-1, :] += fy
        d[1:, :] -= fy
        return d


def fed_cycle(u, cond, tau):
    """One FED cycle: the explicit steps u <- u + tau_j A u, in the order given."""
    for t in tau:
        u = u + t * cond.flux(u)
    return u


def diffuse(u0, cond, times, cycles=1, order=None):
    """[u(T_1), ..., u(T_C)] by `cycles` FED cycles per increment, continuing
    from the previous time."""
    out, u, prev = [], u0, 0.0
    for T in times:
        _, tau = fed_steps((T - prev) / cycles, order=order)
        for _ in range(cycles):
            u = fed_cycle(u, cond, tau)
        out.append(u)
        prev = T
    return out


def explicit(u0, cond, times, tau=0.2):
    """The same diffusion by plain explicit Euler steps of at most `tau` (a slow,
    simple solution to compare FED with; stable for tau <= 0.25)."""
    out, u, prev = [], u0, 0.0
    for T in times:
        n = int(math.ceil((T - prev) / tau - 1e-9))
        for _ in range(n):
            u = u + ((T - prev) / n) * cond.flux(u)
        out.append(u)
        prev = T
    return out


# ---- the profile ------------------------------------------------------------

def check_times(times):
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 1 or t.size == 0 or not np.all(t > 0) or not np.all(np.diff(t) > 0):
        raise ValueError("times must be increasing and > 0, got %r" % (list(times),))
    return t


def eadp_profile(band2d, mask2d=None, sigma=1.0, percentile=0.7, contrast=0.0,
                 diffusivity="g2", times=(65, 130, 195, 260, 325, 390, 455, 520), cycles=1,
                 order=None):
    """The anisotropic diffusion profile of one band.

    band2d: (H, W) values (float32 from the CLI; used as float64). mask2d: (H, W)
    bool, True = valid (None: all valid; NaN pixels are NOT masked implicitly).
    Returns (stack, k): stack (C+1, H, W) float64 = [u, u(T_1), ..., u(T_C)] with
    masked pixels set to NaN, and the contrast k used. The float64 values are what
    the C code computes before its float32 store. order: see FED_ORDER."""
    if not sigma > 0:
        raise ValueError("sigma must be > 0")
    if not (contrast > 0 or 0 < percentile < 1):
        raise ValueError("percentile must be in (0, 1)")
    if int(cycles) < 1:
        raise ValueError("cycles must be >= 1")
    t = check_times(times)
    u = np.asarray(band2d, dtype=np.float64)
    m = np.ones(u.shape, bool) if mask2d is None else np.asarray(mask2d, bool)
    u = np.where(m, u, 0.0)
    G = gradient_squared(u, m, sigma)
    k = float(contrast) if contrast > 0 else contrast_from(G, m, percentile)
    cond = Conductances(diffusivity_from(G, k, diffusivity), m)
    stack = np.stack([u] + diffuse(u, cond, t, int(cycles), order))
    stack[:, ~m] = np.nan
    return stack, k


def eadp_cube(cube, mask2d=None, **params):
    """eadp_profile on every band of a (N, H, W) cube: ((N*(C+1), H, W) float32
    in hyprof's band order, [k_1..k_N]). The benchmark's `numpy-eadp` peer."""
    stacks, ks = [], []
    for band in cube:
        s, k = eadp_profile(band, mask2d, **params)
        stacks.append(s.astype(np.float32))
        ks.append(k)
    return np.concatenate(stacks), ks


# ---- helpers for the tests --------------------------------------------------------

def conductance_matrix(g, m):
    """The sparse matrix A of the semi-discrete problem du/dt = A u (row-major
    pixels), for an exact solution with scipy.sparse.linalg.expm_multiply."""
    import scipy.sparse as sp

    h, w = g.shape
    c = Conductances(g, m)
    idx = np.arange(h * w).reshape(h, w)
    rows, cols, vals = [], [], []
    for cnd, a, b in ((c.cx, idx[:, :-1], idx[:, 1:]), (c.cy, idx[:-1, :], idx[1:, :])):
        rows += [a.ravel(), b.ravel()]
        cols += [b.ravel(), a.ravel()]
        vals += [cnd.ravel(), cnd.ravel()]
    r, cc, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    A = sp.coo_matrix((v, (r, cc)), shape=(h * w, h * w)).tocsr()
    A = A - sp.diags(np.asarray(A.sum(axis=1)).ravel())
    return A.tocsr()


def total_variation(u, m=None):
    """Anisotropic total variation: sum of |u(q) - u(p)| over valid neighbour pairs."""
    u = np.asarray(u, dtype=np.float64)
    m = np.ones(u.shape, bool) if m is None else m
    tx = np.abs(u[:, 1:] - u[:, :-1])[m[:, 1:] & m[:, :-1]].sum()
    ty = np.abs(u[1:, :] - u[:-1, :])[m[1:, :] & m[:-1, :]].sum()
    return float(tx + ty)
