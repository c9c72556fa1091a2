// The HYPROF driver's C++ side: only what GDAL 3.6's C API cannot do (an
// open callback, dataset and band classes). Parsing, opening and the cache
// are C (driver_source.c, driver_cache.c).
//
// Opening reads only the input's header; the band count and names come from
// the parameters (the library's hyprof_op_band_names), so listing a dataset
// computes nothing. Pixels and (when the input does not settle it) nodata
// come from the computed result: the first access to either computes it. The
// result's own metadata (HYPROF_BACKEND, what only the data tells) joins the
// dataset's once this dataset has its result: after a read, or when such an
// item is asked for by name.
#include "driver.h"
#include "raster_io.h"

#include <gdal_priv.h>
#include <ogr_spatialref.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace {

constexpr int kBlock = 256;

class HyprofDataset final : public GDALDataset
{
  public:
    explicit HyprofDataset(hyprof_gdal_source_t *src);
    ~HyprofDataset() override { hyprof_gdal_source_free(m_src); }

    static int Identify(GDALOpenInfo *info);
    static GDALDataset *Open(GDALOpenInfo *info);

    CPLErr GetGeoTransform(double *gt) override;
    const OGRSpatialReference *GetSpatialRef() const override;
    const char *GetMetadataItem(const char *name, const char *domain) override;

    // The result's metadata, backend and nodata, once (computes the result).
    bool Describe();
    const hyprof_gdal_source_t *Source() const { return m_src; }
    bool NodataOf(double *value);

  private:
    hyprof_gdal_source_t *m_src;
    OGRSpatialReference m_srs;
    std::mutex m_lock;
    bool m_described = false;
    bool m_has_nodata = false;
    double m_nodata = 0.0;
    CPLString m_item;
};

class HyprofBand final : public GDALRasterBand
{
  public:
    HyprofBand(HyprofDataset *ds, int band)
    {
        poDS = ds;
        nBand = band;
        eDataType = GDT_Float32;
        nBlockXSize = std::min(kBlock, ds->GetRasterXSize());
        nBlockYSize = std::min(kBlock, ds->GetRasterYSize());
    }

    CPLErr IReadBlock(int bx, int by, void *image) override;
    double GetNoDataValue(int *success) override
    {
        double v = 0.0;
        bool has = static_cast<HyprofDataset *>(poDS)->NodataOf(&v);
        if (success)
            *success = has;
        return v;
    }
};

HyprofDataset::HyprofDataset(hyprof_gdal_source_t *src) : m_src(src)
{
    nRasterXSize = src->width;
    nRasterYSize = src->height;
    m_srs.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
    if (src->wkt)
        m_srs.importFromWkt(src->wkt);
    for (int b = 1; b <= src->bands; b++)
    {
        auto *band = new HyprofBand(this, b);
        if (src->band_names && src->band_names[b - 1])
            band->SetDescription(src->band_names[b - 1]);
        SetBand(b, band);
    }
    hyprof_set_args_metadata(this, src->args);
    GDALDataset::SetMetadataItem("HYPROF_INPUT", src->input);
}

int HyprofDataset::Identify(GDALOpenInfo *info)
{
    return hyprof_gdal_identify(info->pszFilename,
                                reinterpret_cast<const char *>(info->pabyHeader),
                                info->nHeaderBytes);
}

GDALDataset *HyprofDataset::Open(GDALOpenInfo *info)
{
    if (!Identify(info))
        return nullptr;
    if (info->eAccess == GA_Update)
    {
        CPLError(CE_Failure, CPLE_NotSupported, "HYPROF: datasets are read-only");
        return nullptr;
    }
    hyprof_gdal_source_t *src = hyprof_gdal_source_open(info->pszFilename);
    if (!src)
        return nullptr;
    auto *ds = new HyprofDataset(src);
    ds->SetDescription(info->pszFilename);
    return ds;
}

CPLErr HyprofDataset::GetGeoTransform(double *gt)
{
    if (!m_src->has_geotransform)
        return GDALDataset::GetGeoTransform(gt);
    std::memcpy(gt, m_src->geotransform, 6 * sizeof(double));
    return CE_None;
}

const OGRSpatialReference *HyprofDataset::GetSpatialRef() const
{
    return m_src->wkt ? &m_srs : nullptr;
}

bool HyprofDataset::Describe()
{
    std::lock_guard<std::mutex> guard(m_lock);
    if (m_described)
        return true;
    const hyprof_gdal_result_t *res = hyprof_gdal_result_acquire(m_src);
    if (!res)
        return false;
    const hyprof_result_t *r = &res->result;
    GDALDataset::SetMetadataItem("HYPROF_BACKEND", res->backend);
    hyprof_set_result_metadata(this, r);
    m_has_nodata = r->cube.has_nodata;
    m_nodata = r->cube.nodata;
    hyprof_gdal_result_release(res);
    m_described = true;
    return true;
}

bool HyprofDataset::NodataOf(double *value)
{
    if (m_src->nodata_known)
    {
        *value = m_src->nodata;
        return m_src->has_nodata;
    }
    if (!Describe())
        return false;
    *value = m_nodata;
    return m_has_nodata;
}

// HYPROF_CACHE domain: the process-wide cache's state (COMPUTATIONS,
// ENTRIES, BYTES, LIMIT), for tests and curious users.
const char *HyprofDataset::GetMetadataItem(const char *name, const char *domain)
{
    if (domain && EQUAL(domain, "HYPROF_CACHE") && name)
    {
        unsigned long computations;
        size_t entries, bytes, limit;
        hyprof_gdal_cache_stats(&computations, &entries, &bytes, &limit);
        if (EQUAL(name, "COMPUTATIONS"))
            m_item.Printf("%lu", computations);
        else if (EQUAL(name, "ENTRIES"))
            m_item.Printf("%zu", entries);
        else if (EQUAL(name, "BYTES"))
            m_item.Printf("%zu", bytes);
        else if (EQUAL(name, "LIMIT"))
            m_item.Printf("%zu", limit);
        else
            return nullptr;
        return m_item.c_str();
    }
    const char *item = GDALDataset::GetMetadataItem(name, domain);
    if (!item && (!domain || !*domain) && name && STARTS_WITH_CI(name, "HYPROF_") && Describe())
        item = GDALDataset::GetMetadataItem(name, domain);
    return item;
}

CPLErr HyprofBand::IReadBlock(int bx, int by, void *image)
{
    auto *ds = static_cast<HyprofDataset *>(poDS);
    if (!ds->Describe())
        return CE_Failure;
    const hyprof_gdal_result_t *res = hyprof_gdal_result_acquire(ds->Source());
    if (!res)
        return CE_Failure;
    const hyprof_cube_t *c = &res->result.cube;
    const size_t W = c->width, H = c->height;
    const size_t x0 = static_cast<size_t>(bx) * nBlockXSize;
    const size_t y0 = static_cast<size_t>(by) * nBlockYSize;
    const size_t w = std::min<size_t>(nBlockXSize, W - x0);
    const size_t h = std::min<size_t>(nBlockYSize, H - y0);
    const float *band = static_cast<const float *>(c->data) + static_cast<size_t>(nBand - 1) * W * H;
    float *out = static_cast<float *>(image);
    if (w < static_cast<size_t>(nBlockXSize) || h < static_cast<size_t>(nBlockYSize))
        std::memset(out, 0, sizeof(float) * nBlockXSize * nBlockYSize);
    for (size_t y = 0; y < h; y++)
        std::memcpy(out + y * nBlockXSize, band + (y0 + y) * W + x0, w * sizeof(float));
    hyprof_gdal_result_release(res);
    return CE_None;
}

}  // namespace

extern "C" void hyprof_gdal_register_driver(void)
{
    if (GDALGetDriverByName("HYPROF") != nullptr)
        return;
    auto *drv = new GDALDriver();
    drv->SetDescription("HYPROF");
    drv->SetMetadataItem(GDAL_DCAP_RASTER, "YES");
    drv->SetMetadataItem(GDAL_DMD_LONGNAME,
                         "hyprof operations computed on read (profiles, features)");
    drv->SetMetadataItem(GDAL_DMD_EXTENSION, "hyprof");
    drv->SetMetadataItem(GDAL_DMD_CONNECTION_PREFIX, HYPROF_DRIVER_PREFIX);
    drv->SetMetadataItem(GDAL_DCAP_VIRTUALIO, "YES");
    drv->pfnIdentify = HyprofDataset::Identify;
    drv->pfnOpen = HyprofDataset::Open;
    GetGDALDriverManager()->RegisterDriver(drv);
}
