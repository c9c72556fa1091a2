"""Output formats of the executable: --of FORMAT, repeated --co NAME=VALUE and
--overviews, for profile stacks and class maps (issue 24, point 7).

Oracles: GDAL's own reading of the files (driver, IMAGE_STRUCTURE metadata,
overview counts), GDAL's COG validator (osgeo_utils), and for overviews the
resampling they must have used, recomputed here from the full-resolution
band (average of each 2x2 block for profiles; one of the block's own values
for class maps)."""

import json
import subprocess

import numpy as np
import pytest
from osgeo import gdal

from conftest import (INDIAN_PINES, SAMPLES, SAMSON, json_lines, leftovers, message_lines, run,
                      run_ok)

gdal.UseExceptions()

EXIT_USAGE = 2
SVM_MODEL = SAMPLES / "indian_pines_svm.model"
GT = SAMPLES / "indian_pines_gt.tif"


def refused(r, folder, out_name, *tokens):
    """Exit 2, one message line holding every token, no output or temporary left."""
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stderr)
    msg = message_lines(r.stderr)
    assert len(msg) == 1, r.stderr
    for t in tokens:
        assert t in msg[0], "%r not in %r" % (t, msg[0])
    assert not leftovers(folder, out_name), leftovers(folder, out_name)
    hidden = [p.name for p in folder.iterdir() if "hyprof-" in p.name]
    assert not hidden, hidden
    return msg[0]


def structure(path):
    ds = gdal.Open(str(path))
    return ds.GetDriver().ShortName, ds.GetMetadata("IMAGE_STRUCTURE")


def cog_problems(path):
    """GDAL's COG validator's errors, or a check of the layout where it is absent."""
    try:
        from osgeo_utils.samples import validate_cloud_optimized_geotiff as v
    except ImportError:
        info = subprocess.run(["gdalinfo", str(path)], capture_output=True, text=True).stdout
        return [] if "LAYOUT=COG" in info else ["no LAYOUT=COG in gdalinfo"]
    _, errors, _ = v.validate(str(path), full_check=True)
    return errors


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """A 15-band EADP profile of Indian Pines: the features the sample SVM takes."""
    out = tmp_path_factory.mktemp("profile") / "ip_eadp.tif"
    run_ok("eadp", "--components", "3", "--count", "4", INDIAN_PINES, out)
    return out


# ---- profile stacks -------------------------------------------------------------------

def test_cog_output_is_valid_and_keeps_the_description(tmp_path):
    out = tmp_path / "pca.tif"
    run_ok("pca", "--of", "COG", SAMSON, out, cwd=tmp_path)
    assert not cog_problems(out), cog_problems(out)
    ds = gdal.Open(str(out))
    assert ds.GetDriver().ShortName == "GTiff"  # COG is a GeoTIFF read by GTiff
    assert ds.GetMetadata("IMAGE_STRUCTURE")["LAYOUT"] == "COG"
    assert ds.RasterCount == 7
    assert ds.GetRasterBand(1).GetDescription().startswith("PC1")
    assert ds.GetMetadataItem("HYPROF_OPERATION") == "pca"
    ref = gdal.Open(str(SAMSON))
    assert ds.GetGeoTransform() == ref.GetGeoTransform()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pca.tif"]


def test_cog_equals_the_geotiff(tmp_path):
    run_ok("pca", SAMSON, tmp_path / "a.tif", cwd=tmp_path)
    run_ok("pca", "--of", "COG", SAMSON, tmp_path / "b.tif", cwd=tmp_path)
    a = gdal.Open(str(tmp_path / "a.tif")).ReadAsArray()
    b = gdal.Open(str(tmp_path / "b.tif")).ReadAsArray()
    assert np.array_equal(a, b, equal_nan=True)


def test_co_compress_zstd_takes_effect(tmp_path):
    for fmt, level in (("GTiff", "ZSTD_LEVEL=3"), ("COG", "LEVEL=3")):
        out = tmp_path / ("%s.tif" % fmt)
        run_ok("pca", "--of", fmt, "--co", "COMPRESS=ZSTD", "--co", level, SAMSON, out,
               cwd=tmp_path)
        assert structure(out)[1]["COMPRESSION"] == "ZSTD", (fmt, structure(out))
    default = tmp_path / "default.tif"
    run_ok("pca", SAMSON, default, cwd=tmp_path)
    assert structure(default)[1]["COMPRESSION"] == "ZSTD"


def even_crop(src, dst):
    """src cut to an even number of rows and columns: each overview pixel of
    factor 2 then covers exactly one 2x2 block."""
    ds = gdal.Open(str(src))
    w, h = ds.RasterXSize // 2 * 2, ds.RasterYSize // 2 * 2
    gdal.Translate(str(dst), ds, srcWin=[0, 0, w, h])
    return dst


def blocks_2x2(a):
    h, w = a.shape[0] // 2, a.shape[1] // 2
    return a.reshape(h, 2, w, 2).transpose(0, 2, 1, 3).reshape(h, w, 4)


def test_overviews_of_a_profile_average_2x2_blocks(tmp_path):
    out = tmp_path / "ov.tif"
    src = even_crop(SAMSON, tmp_path / "even.tif")
    run_ok("pca", "--overviews", src, out, cwd=tmp_path)
    ds = gdal.Open(str(out))  # the band lives as long as its dataset
    band = ds.GetRasterBand(1)
    assert band.GetOverviewCount() >= 1
    full = band.ReadAsArray().astype(np.float64)
    ov = band.GetOverview(0).ReadAsArray().astype(np.float64)
    mean = blocks_2x2(full).mean(axis=2)
    assert ov.shape == mean.shape
    assert np.allclose(ov, mean, rtol=1e-5, atol=1e-4 * np.abs(full).max())
    plain = tmp_path / "plain.tif"
    run_ok("pca", src, plain, cwd=tmp_path)
    ds = gdal.Open(str(plain))
    assert ds.GetRasterBand(1).GetOverviewCount() == 0


def test_cog_with_overviews_validates(tmp_path):
    out = tmp_path / "ov_cog.tif"
    run_ok("pca", "--of", "COG", "--overviews", SAMSON, out, cwd=tmp_path)
    ds = gdal.Open(str(out))
    assert ds.GetRasterBand(1).GetOverviewCount() >= 1
    assert not cog_problems(out), cog_problems(out)


def test_other_drivers_and_their_sidecars(tmp_path):
    """A driver writing several files (ENVI: data + header) commits them all."""
    out = tmp_path / "pca.envi"
    run_ok("pca", "--of", "ENVI", "--components", "3", SAMSON, out, cwd=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "pca.hdr" in names and "pca.envi" in names, names
    assert not [n for n in names if "hyprof-" in n], names
    ds = gdal.Open(str(out))
    assert ds.GetDriver().ShortName == "ENVI" and ds.RasterCount == 3
    ref = gdal.Open(str(tmp_path / "pca.envi")).ReadAsArray()
    run_ok("pca", "--components", "3", SAMSON, tmp_path / "pca.tif", cwd=tmp_path)
    assert np.array_equal(ref, gdal.Open(str(tmp_path / "pca.tif")).ReadAsArray(),
                          equal_nan=True)


def test_a_driver_that_cannot_write_in_memory(tmp_path):
    """netCDF cannot create in /vsimem/: its format check uses a hidden file
    beside the output, which does not stay."""
    if gdal.GetDriverByName("netCDF") is None:
        pytest.skip("GDAL has no netCDF driver here")
    out = tmp_path / "pca.nc"
    run_ok("pca", "--components", "3", SAMSON, out, cwd=tmp_path)
    assert structure(out)[0] == "netCDF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pca.nc"]


def test_no_extension_is_geotiff(tmp_path):
    out = tmp_path / "noext"
    run_ok("pca", SAMSON, out, cwd=tmp_path)
    assert structure(out)[0] == "GTiff"


def test_progress_never_goes_back_through_the_copy(tmp_path):
    r = run_ok("pca", "--of", "COG", "--progress", "json", SAMSON, tmp_path / "p.tif",
               cwd=tmp_path)
    values = [o["progress"] for o in json_lines(r.stderr) if "progress" in o]
    assert values and values == sorted(values), values
    assert values[-1] >= 0.99


# ---- refused before any work ---------------------------------------------------------

def test_png_without_of_is_refused(tmp_path):
    r = run("pca", SAMSON, tmp_path / "x.png", cwd=tmp_path)
    refused(r, tmp_path, "x.png", "x.png", "PNG")


def test_png_cannot_hold_float_bands_even_when_asked(tmp_path):
    r = run("pca", "--of", "PNG", "--components", "3", SAMSON, tmp_path / "x.png", cwd=tmp_path)
    refused(r, tmp_path, "x.png", "PNG", "Float32")


def test_extension_and_format_disagree(tmp_path):
    r = run("pca", "--of", "COG", SAMSON, tmp_path / "x.png", cwd=tmp_path)
    refused(r, tmp_path, "x.png", ".png", "COG", ".tif")
    r = run("pca", "--of", "PNG", SAMSON, tmp_path / "x.tif", cwd=tmp_path)
    refused(r, tmp_path, "x.tif", ".tif", "PNG")


@pytest.mark.parametrize("args,tokens", [
    (["--of", "NoSuchFormat"], ["NoSuchFormat"]),
    (["--of", "VRT"], ["VRT"]),
    (["--co", "NO_SUCH_OPTION=1"], ["NO_SUCH_OPTION"]),
    (["--co", "COMPRESS=NOPE"], ["NOPE", "COMPRESS"]),
    (["--co", "COMPRESS"], ["COMPRESS", "NAME=VALUE"]),
    (["--of", "PNG", "--co", "COMPRESS=ZSTD"], ["COMPRESS"]),
    (["--of", "ENVI", "--overviews"], ["--overviews", "ENVI"]),
])
def test_bad_format_options(tmp_path, args, tokens):
    out = "x.png" if "PNG" in args else ("x.envi" if "ENVI" in args else "x.tif")
    if "VRT" in args:
        out = "x.vrt"
    r = run("pca", "--components", "3", *args, SAMSON, tmp_path / out, cwd=tmp_path)
    refused(r, tmp_path, out, *tokens)


def test_ambiguous_and_unknown_extensions(tmp_path):
    msg = refused(run("pca", SAMSON, tmp_path / "x.grd", cwd=tmp_path), tmp_path, "x.grd",
                  ".grd", "--of")
    assert "GSAG" in msg and "GS7BG" in msg
    refused(run("pca", SAMSON, tmp_path / "x.qqq", cwd=tmp_path), tmp_path, "x.qqq", ".qqq",
            "--of")


def test_refused_before_any_work(tmp_path):
    """The format is checked before the computation: no progress is reported."""
    r = run("eadp", "--progress", "json", INDIAN_PINES, tmp_path / "x.png", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE
    assert not [o for o in json_lines(r.stderr) if "progress" in o], r.stderr


# ---- class maps -----------------------------------------------------------------------

def test_class_map_as_png_keeps_its_palette(tmp_path, profile):
    out = tmp_path / "map.png"
    run_ok("classify", "--model", SVM_MODEL, profile, out, cwd=tmp_path)
    ref = tmp_path / "map.tif"
    run_ok("classify", "--model", SVM_MODEL, profile, ref, cwd=tmp_path)
    png, tif = gdal.Open(str(out)), gdal.Open(str(ref))
    assert png.GetDriver().ShortName == "PNG"
    assert np.array_equal(png.ReadAsArray(), tif.ReadAsArray())
    pb, tb = png.GetRasterBand(1), tif.GetRasterBand(1)
    assert pb.GetColorInterpretation() == gdal.GCI_PaletteIndex
    used = np.unique(tif.ReadAsArray())
    for v in used[used > 0]:
        assert pb.GetColorTable().GetColorEntry(int(v)) == \
            tb.GetColorTable().GetColorEntry(int(v)), v
    names = tb.GetCategoryNames()
    assert pb.GetCategoryNames()[:len(names)] == names
    assert not [p.name for p in tmp_path.iterdir() if "hyprof-" in p.name]


def test_class_map_overviews_use_class_values(tmp_path, profile):
    features = even_crop(profile, tmp_path / "even.tif")
    for fmt in ("GTiff", "COG"):
        out = tmp_path / ("map_%s.tif" % fmt)
        run_ok("classify", "--model", SVM_MODEL, "--of", fmt, "--overviews", features, out,
               cwd=tmp_path)
        ds = gdal.Open(str(out))
        band = ds.GetRasterBand(1)
        assert band.GetOverviewCount() >= 1, fmt
        full = band.ReadAsArray()
        ov = band.GetOverview(0).ReadAsArray()
        blocks = blocks_2x2(full)
        assert ov.shape == blocks.shape[:2]
        inside = (blocks == ov[:, :, None]).any(axis=2)
        assert inside.all(), "%s: %d overview pixels hold a value of none of their 4 " \
            "pixels (not nearest)" % (fmt, (~inside).sum())
        if fmt == "COG":
            assert not cog_problems(out), cog_problems(out)


def test_split_writes_cog_class_maps(tmp_path):
    tr, te = tmp_path / "train.tif", tmp_path / "test.tif"
    run_ok("split", "--reference", GT, "--per-class", "10", "--of", "COG", tr, te, cwd=tmp_path)
    for p in (tr, te):
        assert structure(p)[1]["LAYOUT"] == "COG"
        ds = gdal.Open(str(p))
        assert ds.GetRasterBand(1).GetColorTable() is not None


def test_class_map_format_refused_before_work(tmp_path, profile):
    r = run("classify", "--model", SVM_MODEL, profile, tmp_path / "map.jpg", cwd=tmp_path)
    refused(r, tmp_path, "map.jpg", "map.jpg", "JPEG")


def test_describe_lists_the_format_options():
    reg = json.loads(run_ok("describe", "--json").stdout)
    common = {p["name"]: p for p in reg["common"]}
    assert {"of", "co", "overviews"} <= set(common)
    assert common["overviews"]["type"] == "bool"


def test_format_options_are_refused_for_vector_split_outputs(tmp_path):
    """split --samples writes vector files: --of, --co and --overviews, which
    choose raster formats, are refused before any work, naming the options."""
    from osgeo import ogr, osr
    gpkg = tmp_path / "s.gpkg"
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(gpkg))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    layer = ds.CreateLayer("s", srs, ogr.wkbPoint)
    layer.CreateField(ogr.FieldDefn("cls", ogr.OFTInteger))
    for k in range(6):
        f = ogr.Feature(layer.GetLayerDefn())
        f.SetField("cls", 1 + k % 2)
        f.SetGeometry(ogr.CreateGeometryFromWkt("POINT (%d 0)" % k))
        layer.CreateFeature(f)
    ds = None
    for extra in (["--of", "GPKG"], ["--co", "COMPRESS=ZSTD"], ["--overviews"]):
        r = run("split", "--samples", gpkg, "--class-field", "cls", "--per-class", "1",
                *extra, tmp_path / "a.gpkg", tmp_path / "b.gpkg")
        assert r.returncode == 2, (extra, r.stderr)
        assert "--of, --co and --overviews apply to raster outputs" in r.stderr
        assert not (tmp_path / "a.gpkg").exists() and not (tmp_path / "b.gpkg").exists()
    r = run("split", "--samples", gpkg, "--class-field", "cls", "--per-class", "1",
            tmp_path / "a.gpkg", tmp_path / "b.gpkg")
    assert r.returncode == 0, r.stderr
