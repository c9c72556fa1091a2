"""`hyprof emp` (extended morphological profiles by reconstruction): bit-exact
against scikit-image (reconstruction of its erosion/dilation by disk(r),
square(2r+1), diamond(r), 8-connected) on the quantised wavelet features of the
samples and on random images; band order and names, nodata, bad input.

Every comparison is exact (integers): the output holds 8-bit levels as float32.

Run: /usr/bin/python3 -m pytest tests/test_emp.py
"""

import numpy as np
import pytest

from conftest import (EXIT_USAGE, INDIAN_PINES, SAMSON, gdal, leftovers, message_lines,
                      read_cube, run, run_ok, write_cube)

import eap_reference as eref  # quantisation and the --features level choice
import emp_reference as ref   # the oracle

RADII = [1, 3, 5, 7]


def emp(*args, **kw):
    return run_ok("emp", "--backend", "cpu", "--progress", "none", *args, **kw)


def band_names(path):
    ds = gdal.Open(str(path))
    return [ds.GetRasterBand(i + 1).GetDescription() for i in range(ds.RasterCount)]


def metadata(path):
    md = gdal.Open(str(path)).GetMetadata()
    return {k[len("HYPROF_"):] if k.startswith("HYPROF_") else k: v for k, v in md.items()}


def assert_same(got, want, what):
    got = np.asarray(got, np.int64)
    want = np.asarray(want, np.int64)
    bad = got != want
    assert not bad.any(), "%s: %d pixels differ (first at %s: %d != %d)" % (
        what, bad.sum(), np.argwhere(bad)[0], got[bad][0], want[bad][0])


def check_profile(out, q, radii, se, what):
    """out: (nfeat*(2n+1), H, W) float32; q: (nfeat, H, W) levels."""
    planes = 2 * len(radii) + 1
    assert out.shape[0] == q.shape[0] * planes
    assert np.array_equal(out, np.round(out)), "non-integer levels"
    for f in range(q.shape[0]):
        want = ref.emp_profile(q[f], radii, se)
        for k in range(planes):
            assert_same(out[f * planes + k], want[k], "%s feature %d plane %d" % (what, f + 1, k))


@pytest.mark.parametrize("sample", [SAMSON, INDIAN_PINES], ids=["samson", "indian_pines"])
def test_default_path_matches_skimage(sample, tmp_path):
    """`hyprof emp INPUT OUTPUT`: dwt features (--features 4), quantised to 8 bits
    as NumPy does, disk radii 1,3,5,7, each plane = scikit-image, bit for bit."""
    bands = gdal.Open(str(sample)).RasterCount
    levels = eref.dwt_levels(bands, 4)
    dwt = tmp_path / "dwt.tif"
    run_ok("dwt", "--backend", "cpu", "--levels", levels, sample, dwt, cwd=tmp_path)
    x = read_cube(dwt, np.float32)
    q = np.stack([eref.quantise(b)[0] for b in x]).astype(np.int64)
    out = tmp_path / "emp.tif"
    emp(sample, out, cwd=tmp_path)
    md = metadata(out)
    assert int(md["EMP_DWT_LEVELS"]) == levels
    assert int(md["EMP_FEATURES"]) == x.shape[0]
    for i, b in enumerate(x):
        lo, hi = eref.quantise(b)[1]
        assert float(md["EMP_QUANT_MIN_A%d" % (i + 1)]) == lo
        assert float(md["EMP_QUANT_MAX_A%d" % (i + 1)]) == hi
    check_profile(read_cube(out, np.float32), q, RADII, "disk", sample.stem)


@pytest.mark.parametrize("se", ["disk", "square", "diamond"])
def test_structuring_elements_on_samson(se, tmp_path):
    """Two features of Samson with each structuring element and other radii."""
    out = tmp_path / "emp.tif"
    emp("--features", "2", "--se", se, "--radii", "2,4,9", SAMSON, out, cwd=tmp_path)
    dwt = tmp_path / "dwt.tif"
    levels = int(metadata(out)["EMP_DWT_LEVELS"])
    run_ok("dwt", "--backend", "cpu", "--levels", levels, SAMSON, dwt, cwd=tmp_path)
    q = np.stack([eref.quantise(b)[0] for b in read_cube(dwt, np.float32)]).astype(np.int64)
    check_profile(read_cube(out, np.float32), q, [2, 4, 9], se, "samson " + se)


def random_image(rng, h, w, kind):
    if kind == "noise":
        return rng.integers(0, 256, size=(h, w))
    if kind == "plateaus":  # few levels, blocks: long reconstructions
        small = rng.integers(0, 5, size=((h + 3) // 4, (w + 3) // 4)) * 60
        img = np.kron(small, np.ones((4, 4), np.int64))[:h, :w]
        return np.where(rng.random((h, w)) < 0.1, rng.integers(0, 256, (h, w)), img)
    # smooth: blurred noise with a spiral-free but long ridge structure
    y, x = np.mgrid[:h, :w]
    return np.clip(127 + 100 * np.sin(x / 5.0) * np.cos(y / 7.0)
                   + rng.normal(0, 20, (h, w)), 0, 255).astype(np.int64)


@pytest.mark.parametrize("shape,kind,se", [((40, 57), "noise", "disk"),
                                           ((61, 33), "plateaus", "square"),
                                           ((50, 50), "smooth", "diamond"),
                                           ((15, 200), "plateaus", "disk"),
                                           ((7, 7), "noise", "disk")])
def test_random_images(shape, kind, se, tmp_path):
    """Byte images (already 0..255, min 0 and max 255 so that the quantisation is the
    identity) with --reduction none."""
    rng = np.random.default_rng(hash((shape, kind, se)) % 2**32)
    img = random_image(rng, *shape, kind)
    img.flat[0], img.flat[1] = 0, 255
    src = write_cube(tmp_path / "img.tif", img.astype(np.uint8))
    radii = [1, 2, 3] if min(shape) >= 7 else [1]
    radii = [r for r in radii if 2 * r + 1 <= min(shape)]
    out = tmp_path / "emp.tif"
    emp("--reduction", "none", "--se", se, "--radii", ",".join(map(str, radii)), src, out,
        cwd=tmp_path)
    check_profile(read_cube(out, np.float32), img[None], radii, se, "random %s" % kind)


def test_band_names_and_order(tmp_path):
    img = random_image(np.random.default_rng(3), 20, 20, "noise").astype(np.uint8)
    src = write_cube(tmp_path / "img.tif", np.stack([img, 255 - img]))
    out = tmp_path / "emp.tif"
    emp("--reduction", "none", "--radii", "1,4", src, out, cwd=tmp_path)
    assert band_names(out) == [
        "B1 closing r=4", "B1 closing r=1", "B1", "B1 opening r=1", "B1 opening r=4",
        "B2 closing r=4", "B2 closing r=1", "B2", "B2 opening r=1", "B2 opening r=4"]
    a = read_cube(out, np.float32)
    # closings >= band >= openings, and both get coarser with the radius
    for b in (0, 5):
        assert (a[b] >= a[b + 1]).all() and (a[b + 1] >= a[b + 2]).all()
        assert (a[b + 2] >= a[b + 3]).all() and (a[b + 3] >= a[b + 4]).all()


def test_nodata_pixels_stay_nodata_and_connect_nothing(tmp_path):
    """Masked columns split the image: erosions ignore masked pixels and the
    reconstruction cannot cross them, so with a gap wider than the largest structuring
    element each side equals scikit-image's result on that side alone."""
    rng = np.random.default_rng(5)
    img = random_image(rng, 30, 41, "plateaus").astype(np.float32)
    img[:, 17:24] = -9999
    img[0, 0], img[0, 1] = 0, 255
    img[0, 24], img[0, 25] = 0, 255
    src = write_cube(tmp_path / "img.tif", img, nodata=-9999)
    out = tmp_path / "emp.tif"
    emp("--reduction", "none", "--radii", "1,3", src, out, cwd=tmp_path)
    a = read_cube(out, np.float32)
    assert np.isnan(a[:, :, 17:24]).all()
    for sl in (slice(0, 17), slice(24, 41)):
        want = ref.emp_profile(img[:, sl].astype(np.int64), [1, 3])
        for k in range(5):
            assert_same(a[k][:, sl], want[k], "plane %d side %s" % (k, sl))


BAD = {
    "radii not increasing": (["--radii", "3,3"], "increasing"),
    "radii decreasing": (["--radii", "5,2"], "increasing"),
    "radius too large": (["--radii", "1,48"], "48"),
    "radius 0": (["--radii", "0,1"], "0"),
    "unknown se": (["--se", "hexagon"], "hexagon"),
    "bad devices": (["--devices", "0,x"], "devices"),
    "features and levels": (["--features", "4", "--levels", "2"], "levels"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_arguments(tmp_path, case):
    args, named = BAD[case]
    r = run("emp", "--backend", "cpu", *args, SAMSON, tmp_path / "out.tif", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, "exit %d; stderr: %s" % (r.returncode, r.stderr)
    msg = " ".join(message_lines(r.stderr))
    assert named in msg, "the message does not name %r: %s" % (named, msg)
    assert leftovers(tmp_path, "out.tif") == []


@pytest.mark.parametrize("shape", [(1, 30), (30, 1), (2, 2)])
def test_images_too_small(tmp_path, shape):
    src = write_cube(tmp_path / "img.tif", np.arange(np.prod(shape), dtype=np.float32)
                     .reshape(shape))
    r = run("emp", "--backend", "cpu", "--reduction", "none", "--radii", "1", src,
            tmp_path / "out.tif", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, "exit %d; stderr: %s" % (r.returncode, r.stderr)
    msg = " ".join(message_lines(r.stderr))
    assert "%dx%d" % (shape[1], shape[0]) in msg, msg
    assert leftovers(tmp_path, "out.tif") == []


def test_devices_do_not_change_the_cpu_result(tmp_path):
    """--devices names GPUs; on the CPU backend it is accepted and changes nothing."""
    img = random_image(np.random.default_rng(4), 25, 31, "plateaus").astype(np.uint8)
    src = write_cube(tmp_path / "img.tif", img)
    outs = []
    for i, dev in enumerate([None, "all", "0,1"]):
        out = tmp_path / ("e%d.tif" % i)
        emp("--reduction", "none", "--radii", "1,2", *(["--devices", dev] if dev else []), src,
            out, cwd=tmp_path)
        outs.append(read_cube(out, np.float32))
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
