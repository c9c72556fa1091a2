"""`hyprof wmcd` (EMP + 2-D wavelet denoising of every component): against a
reference built from scikit-image (the EMP, exact) and PyWavelets (wavedec2 /
waverec2 with mode='periodization', pywt.threshold, the universal threshold from
the one-level diagonal details), relative error below 1e-5; the automatic
levels; a PSNR gain on a synthetic noisy image; bad input.

Run: /usr/bin/python3 -m pytest tests/test_wmcd.py
"""

import numpy as np
import pytest

from conftest import (EXIT_USAGE, SAMSON, gdal, leftovers, message_lines, read_cube, run,
                      run_ok, write_cube)

import emp_reference as ref

TOL = 1e-5


def wmcd(*args, **kw):
    return run_ok("wmcd", "--backend", "cpu", "--progress", "none", *args, **kw)


def band_names(path):
    ds = gdal.Open(str(path))
    return [ds.GetRasterBand(i + 1).GetDescription() for i in range(ds.RasterCount)]


def rel_err(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-300))


def byte_image(rng, h, w):
    y, x = np.mgrid[:h, :w]
    img = 127 + 90 * np.sin(x / 6.0) * np.cos(y / 4.0) + rng.normal(0, 25, (h, w))
    img = np.clip(np.round(img), 0, 255).astype(np.uint8)
    img.flat[0], img.flat[1] = 0, 255  # identity quantisation
    return img


def check(out, img, radii, levels, wavelet="haar", mode="soft", se="disk"):
    planes = ref.emp_profile(img.astype(np.int64), radii, se)
    assert out.shape[0] == 3 * len(planes)
    worst = 0.0
    for i, p in enumerate(planes):
        want = ref.wmcd_plane(p.astype(np.float64), levels, wavelet, mode)
        for k in range(3):
            e = rel_err(out[3 * i + k].astype(np.float64), want[k])
            assert e < TOL, "plane %d level %d: relative error %.3g" % (i, levels[k], e)
            worst = max(worst, e)
    return worst


@pytest.mark.parametrize("shape,wavelet,mode", [((64, 64), "haar", "soft"),
                                                ((45, 70), "haar", "hard"),
                                                ((57, 39), "db2", "soft"),
                                                ((80, 96), "sym4", "soft")])
def test_matches_pywavelets(shape, wavelet, mode, tmp_path):
    """Even and odd sizes (pywt pads odd lengths by repeating the last sample and
    waverec2 crops), soft and hard, several orthogonal wavelets; explicit levels
    within pywt.dwt_max_level."""
    img = byte_image(np.random.default_rng(sum(shape)), *shape)
    src = write_cube(tmp_path / "img.tif", img)
    out = tmp_path / "w.tif"
    maxl = gdal_free_max_level(min(shape), wavelet)
    levels = sorted({1, max(1, maxl // 2), maxl}) + [maxl] * 3
    levels = levels[:3]
    wmcd("--reduction", "none", "--radii", "1,3", "--denoise-wavelet", wavelet,
         "--threshold", mode, "--denoise-levels", ",".join(map(str, levels)), src, out,
         cwd=tmp_path)
    check(read_cube(out, np.float32), img, [1, 3], levels, wavelet, mode)


def gdal_free_max_level(n, wavelet):
    import pywt
    return pywt.dwt_max_level(n, pywt.Wavelet(wavelet).dec_len)


def test_default_levels_and_names_on_samson(tmp_path):
    """The default chain on Samson (95x95): levels 1, floor(log2(95)/2) = 3,
    floor(log2(95)) - 1 = 5; each EMP band of `hyprof emp` denoised as PyWavelets does."""
    out, e = tmp_path / "w.tif", tmp_path / "e.tif"
    wmcd(SAMSON, out, cwd=tmp_path)
    run_ok("emp", "--backend", "cpu", SAMSON, e, cwd=tmp_path)
    md = gdal.Open(str(out)).GetMetadata()
    assert md["HYPROF_WMCD_LEVELS"] == "1,3,5"
    assert ref.auto_levels(95, 95) == [1, 3, 5]
    w, p = read_cube(out, np.float32), read_cube(e, np.float64)
    assert w.shape[0] == 3 * p.shape[0]
    names, enames = band_names(out), band_names(e)
    for i in range(p.shape[0]):
        assert names[3 * i:3 * i + 3] == ["%s j=%d" % (enames[i], j) for j in (1, 3, 5)]
        want = ref.wmcd_plane(p[i], [1, 3, 5])
        for k in range(3):
            assert rel_err(w[3 * i + k].astype(np.float64), want[k]) < TOL


def test_denoising_raises_psnr(tmp_path):
    """A piecewise-constant image plus Gaussian noise: every denoised version of the
    band itself (--radii 1, plane 'B1') is closer to the clean image than the noisy
    band is."""
    rng = np.random.default_rng(7)
    clean = np.zeros((128, 128))
    clean[20:70, 30:100] = 160
    clean[80:120, 10:60] = 90
    clean[90:110, 80:120] = 230
    noisy = np.clip(clean + rng.normal(0, 20, clean.shape), 0, 255)
    noisy.flat[0], noisy.flat[1] = 0, 255
    clean.flat[0], clean.flat[1] = 0, 255
    src = write_cube(tmp_path / "img.tif", np.round(noisy).astype(np.uint8))
    out = tmp_path / "w.tif"
    wmcd("--reduction", "none", "--radii", "1", src, out, cwd=tmp_path)
    w = read_cube(out, np.float64)
    band = w[3:6]  # plane 1 of 3 (closing, band, opening): the band's three levels

    def psnr(x):
        return 10 * np.log10(255.0 ** 2 / np.mean((x - clean) ** 2))

    base = psnr(np.round(noisy))
    gains = [psnr(b) - base for b in band]
    assert all(g > 1.0 for g in gains), "PSNR gains %s dB over %.2f dB" % (gains, base)


BAD = {
    "levels beyond size": (["--denoise-levels", "1,2,9"], (64, 64), "9"),
    "levels not three": (["--denoise-levels", "1,2"], (64, 64), "denoise-levels"),
    "level 0": (["--denoise-levels", "0,1,2"], (64, 64), "denoise-levels"),
    "image smaller than filter": (["--denoise-wavelet", "db8", "--radii", "1"], (12, 40),
                                  "db8"),
    "auto levels on a tiny image": (["--radii", "1"], (3, 40), "level"),
    "biorthogonal": (["--denoise-wavelet", "bior2.2"], (64, 64), "bior2.2"),
    "radii not increasing": (["--radii", "3,1"], (64, 64), "increasing"),
    "width 1": (["--radii", "1"], (30, 1), "1x30"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(tmp_path, case):
    args, shape, named = BAD[case]
    img = byte_image(np.random.default_rng(1), *shape) if min(shape) > 1 else \
        np.arange(np.prod(shape), dtype=np.uint8).reshape(shape)
    src = write_cube(tmp_path / "img.tif", img)
    r = run("wmcd", "--backend", "cpu", "--reduction", "none", *args, src,
            tmp_path / "out.tif", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, "exit %d; stderr: %s" % (r.returncode, r.stderr)
    msg = " ".join(message_lines(r.stderr))
    assert named in msg, "the message does not name %r: %s" % (named, msg)
    assert leftovers(tmp_path, "out.tif") == []


def test_nodata_enters_at_level_0_and_stays_nodata(tmp_path):
    """Masked pixels come out as nodata in every band; the other pixels are the
    denoising of the EMP planes with the masked pixels at level 0."""
    img = byte_image(np.random.default_rng(9), 40, 52).astype(np.float32)
    img[10:16, 20:30] = -9999
    src = write_cube(tmp_path / "img.tif", img, nodata=-9999)
    out, e = tmp_path / "w.tif", tmp_path / "e.tif"
    wmcd("--reduction", "none", "--radii", "1,2", src, out, cwd=tmp_path)
    run_ok("emp", "--backend", "cpu", "--reduction", "none", "--radii", "1,2", src, e,
           cwd=tmp_path)
    w, p = read_cube(out, np.float64), read_cube(e, np.float64)
    masked = img == -9999
    assert np.isnan(w[:, masked]).all()
    levels = ref.auto_levels(40, 52)
    for i in range(p.shape[0]):
        want = ref.wmcd_plane(np.where(masked, 0.0, p[i]), levels)
        for k in range(3):
            got = w[3 * i + k]
            e_ = np.abs(got - want[k])[~masked].max() / np.abs(want[k]).max()
            assert e_ < TOL, "plane %d level %d: %.3g" % (i, levels[k], e_)
