"""Independent references for the unmixing tests: exact FCLS/NNLS/UCLS by
SciPy, the SSPP homogeneity and purity by SciPy/NumPy, the fusion rule, the
Samson reference, a synthetic scene from the USGS library, and spectral-angle
matching (Hungarian)."""

from pathlib import Path

import numpy as np
import scipy.io
from scipy.ndimage import gaussian_filter
from scipy.optimize import linear_sum_assignment, lsq_linear, nnls

DATA = Path("/work/shared/data")
END3 = DATA / "samson" / "end3.mat"
USGS = DATA / "usgs" / "s06av95a_envi.sli"


# ---- least squares --------------------------------------------------------------

def ref_nnls(M, y):
    return nnls(M, y, maxiter=50 * M.shape[1])[0]


def ref_fcls(M, y):
    """FCLS exactly: eliminate the equality (a = a0 + N z), then the bounds by a
    bounded least-squares solver; checked by the KKT conditions in the tests."""
    p = M.shape[1]
    # Augmented-row NNLS with a large weight gives a warm, nearly exact answer,
    # then the KKT-polished active-set solve on its support.
    d = 1e4 * max(1.0, np.abs(M).max())
    a = nnls(np.vstack([M, d * np.ones(p)]), np.concatenate([y, [d]]), maxiter=50 * p)[0]
    S = a > 0
    # exact equality-constrained LS on the support
    Ms = M[:, S]
    k = Ms.shape[1]
    K = np.block([[Ms.T @ Ms, np.ones((k, 1))], [np.ones((1, k)), np.zeros((1, 1))]])
    sol = np.linalg.solve(K, np.concatenate([Ms.T @ y, [1.0]]))
    out = np.zeros(p)
    out[S] = sol[:k]
    return out


def fcls_kkt(M, y, a, tol):
    """Largest violation of FCLS's KKT conditions at a."""
    g = M.T @ (M @ a - y)
    S = a > 1e-9
    mu = -g[S].mean()
    viol = [abs(a.sum() - 1), max(0.0, -a.min())]
    viol.append(np.abs(g[S] + mu).max() if S.any() else 0.0)       # stationarity
    viol.append(max(0.0, -(g[~S] + mu).min()) if (~S).any() else 0.0)  # dual feasibility
    return max(viol) / tol


def ref_ucls(M, y):
    return np.linalg.lstsq(M, y, rcond=None)[0]


# ---- HySime ------------------------------------------------------------------------

def hysime(cube):
    """The endmember count of HySime as hysime.m/estNoise.m compute it: every
    band regressed explicitly on the others (the additive-noise model, small =
    1e-6), diagonal noise correlation, eigenvectors of the signal correlation."""
    y = cube.reshape(cube.shape[0], -1).astype(np.float64)
    L, N = y.shape
    RR = y @ y.T
    RRi = np.linalg.inv(RR + 1e-6 * np.eye(L))
    w = np.empty_like(y)
    for i in range(L):
        XX = RRi - np.outer(RRi[:, i], RRi[i, :]) / RRi[i, i]
        RRa = RR[:, i].copy()
        RRa[i] = 0
        beta = XX @ RRa
        beta[i] = 0
        w[i] = y[i] - beta @ y
    Rn = np.diag(np.diag(w @ w.T / N))
    x = y - w
    E = np.linalg.svd(x @ x.T / N)[0]
    Py = np.einsum("ji,jk,ki->i", E, y @ y.T / N, E)
    Pn = np.einsum("ji,jk,ki->i", E, Rn, E)
    return int((-Py + 2 * Pn < 0).sum())


# ---- SSPP pieces ------------------------------------------------------------------

def homogeneity(cube, sigma):
    """cube (B, H, W) float32 -> RMSE between every pixel and its Gaussian-filtered
    spectrum (reflecting borders, truncated at 3 sigma)."""
    x = cube.astype(np.float64)
    s = np.stack([gaussian_filter(b, sigma, mode="reflect", truncate=3.0) for b in x])
    return np.sqrt(((x - s) ** 2).mean(axis=0))


def purity_weights(cube, p):
    """(p, H, W) weights |v - mid| / half of the first p principal components."""
    B = cube.shape[0]
    X = cube.reshape(B, -1).T.astype(np.float64)
    Xc = X - X.mean(axis=0)
    w, V = np.linalg.eigh(np.cov(Xc, rowvar=False))
    V = V[:, ::-1][:, :p]
    P = Xc @ V
    lo, hi = P.min(axis=0), P.max(axis=0)
    W = np.abs(P - (lo + hi) / 2) / ((hi - lo) / 2)
    return W.T.reshape(p, *cube.shape[1:])


def fusion(rmse, purity, labels, p, per_cluster):
    """The candidate mask of the fusion rule, from the output's own bands."""
    rmse, purity, labels = rmse.ravel(), purity.ravel(), labels.ravel()
    cand = np.zeros(rmse.size, bool)
    for c in range(p):
        idx = np.flatnonzero(labels == c)
        if idx.size == 0:
            continue
        by_r = idx[np.lexsort((idx, rmse[idx]))]
        by_p = idx[np.lexsort((idx, -purity[idx]))]
        rank_r = np.empty(rmse.size, np.int64)
        rank_r[by_r] = np.arange(idx.size)
        score = np.arange(idx.size) + rank_r[by_p]
        order = by_p[np.lexsort((by_p, score))]
        cand[order[:per_cluster]] = True
    return cand


# ---- matching and data --------------------------------------------------------------

def angles(E, R):
    """Spectral angles (radians) between the columns of E and of R."""
    En = E / np.linalg.norm(E, axis=0)
    Rn = R / np.linalg.norm(R, axis=0)
    return np.arccos(np.clip(En.T @ Rn, -1, 1))


def match(E, R):
    """Hungarian matching on the spectral angle: (rows, cols, angles)."""
    C = angles(E, R)
    r, c = linear_sum_assignment(C)
    return r, c, C[r, c]


def samson_reference():
    """M (156, 3) and A (3, 95, 95) of end3.mat (A stored column-major)."""
    m = scipy.io.loadmat(END3)
    return m["M"], m["A"].reshape(3, 95, 95).transpose(0, 2, 1)


def usgs_library():
    """(spectra (n, 224), wavelengths (224,) in micrometres) of the fully valid
    spectra of the USGS library."""
    d = np.fromfile(USGS, "<f8").reshape(-1, 224)
    hdr = (USGS.with_suffix(".hdr").parent / "s06av95a_envi.hdr").read_text()
    wl = hdr.split("wavelength = {")[1].split("}")[0]
    wl = np.array([float(v) for v in wl.replace("\n", " ").split(",") if v.strip()])
    return d[(d >= 0).all(axis=1)], wl


def synthetic_scene(p=5, size=64, snr_db=40.0, min_angle_deg=10.0, seed=7):
    """A scene of p USGS spectra (pairwise angle >= min_angle) with smooth simplex
    abundances (softmax of Gaussian-filtered noise, sharp enough to leave near-pure
    regions) and white noise at snr_db. Returns cube (224, size, size) float32,
    M (224, p), A (p, size, size)."""
    lib, _ = usgs_library()
    rng = np.random.default_rng(seed)
    chosen = []
    for i in rng.permutation(len(lib)):
        s = lib[i]
        if np.linalg.norm(s) < 1e-3:
            continue
        if all(np.degrees(angles(s[:, None], lib[j][:, None])[0, 0]) >= min_angle_deg
               for j in chosen):
            chosen.append(i)
        if len(chosen) == p:
            break
    M = lib[chosen].T
    g = np.stack([gaussian_filter(rng.standard_normal((size, size)), 5.0) for _ in range(p)])
    g = g / g.std()
    e = np.exp(4.0 * g)
    A = e / e.sum(axis=0)
    Y = np.einsum("bp,phw->bhw", M, A)
    noise_std = np.sqrt((Y ** 2).mean() / 10 ** (snr_db / 10))
    Y = Y + rng.normal(0, noise_std, Y.shape)
    return Y.astype(np.float32), M, A
