"""Independent references of `hyprof emp` and `hyprof wmcd`: scikit-image's
erosion/dilation and reconstruction for the EMP, PyWavelets' wavedec2/waverec2
(mode='periodization') and pywt.threshold for the W-MCD.

    emp_profile(q, radii, se)  -> list of planes in hyprof's order
    wmcd_plane(x, levels, wavelet, mode) -> the three denoised planes
"""

import math

import numpy as np
import pywt
from skimage.morphology import diamond, dilation, disk, erosion, reconstruction, square


def footprint(se, r):
    return {"disk": lambda: disk(r), "square": lambda: square(2 * r + 1),
            "diamond": lambda: diamond(r)}[se]()


def opening_rec(q, r, se="disk"):
    img = np.asarray(q, np.uint8)
    seed = erosion(img, footprint(se, r))
    return reconstruction(seed, img, method="dilation").astype(np.int64)


def closing_rec(q, r, se="disk"):
    img = np.asarray(q, np.uint8)
    seed = dilation(img, footprint(se, r))
    return reconstruction(seed, img, method="erosion").astype(np.int64)


def emp_profile(q, radii, se="disk"):
    """Closings by the largest radius down, the band, openings by the smallest up."""
    q = np.asarray(q, np.int64)
    return ([closing_rec(q, r, se) for r in reversed(radii)] + [q] +
            [opening_rec(q, r, se) for r in radii])


def auto_levels(h, w):
    s = min(h, w)
    l2 = int(math.floor(math.log2(s)))
    return [1, int(math.floor(math.log2(s) / 2)), l2 - 1]


def universal_threshold(x, wavelet="haar"):
    _, (_, _, hh1) = pywt.dwt2(x, wavelet, mode="periodization")
    sigma = np.median(np.abs(hh1)) / 0.6745
    return sigma * math.sqrt(2.0 * math.log(x.size))


def denoise(x, level, lam, wavelet="haar", mode="soft"):
    c = pywt.wavedec2(x, wavelet, mode="periodization", level=level)
    c = [c[0]] + [tuple(pywt.threshold(d, lam, mode=mode) for d in det) for det in c[1:]]
    y = pywt.waverec2(c, wavelet, mode="periodization")
    return y[:x.shape[0], :x.shape[1]]


def wmcd_plane(x, levels, wavelet="haar", mode="soft"):
    x = np.asarray(x, np.float64)
    lam = universal_threshold(x, wavelet)
    return [denoise(x, j, lam, wavelet, mode) for j in levels]
