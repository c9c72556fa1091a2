/* `hyprof info [--json] INPUT`: what hyprof sees in a raster, and for a
 * one-band integer raster with a legend (class map), its classes: value,
 * name, colour and pixel count. */
#include "cli.h"
#include "classmap_io.h"
#include "raster_io.h"

#include <ogr_srs_api.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char crs[256];
    char epsg[32];
    double lo, hi;  /* value range over valid pixels */
    hyprof_legend_t legend;  /* n = 0: no class list */
    size_t *pixels;          /* valid pixels per value, legend.n of them */
} info_t;

/* A value of the class list: named, or present in the raster. */
static int listed(const info_t *in, size_t v)
{
    return v > 0 && ((in->legend.names[v] && *in->legend.names[v]) || in->pixels[v]);
}

/* The legend and pixel counts of a one-band integer raster that has one; an
 * empty legend otherwise. */
static hyprof_status_t class_list(const hyprof_raster_t *r, info_t *in, char *err, size_t n)
{
    memset(&in->legend, 0, sizeof in->legend);
    in->pixels = NULL;
    const hyprof_cube_t *c = &r->cube;
    if (c->bands != 1 || !GDALDataTypeIsInteger(GDALGetDataTypeByName(r->data_type)))
        return HYPROF_OK;
    hyprof_status_t st = hyprof_legend_read(r->path, &in->legend, err, n);
    if (st != HYPROF_OK || in->legend.n == 0)
        return st;
    /* Values beyond the legend are counted too: they are classes without a name. */
    size_t npix = c->width * c->height, top = in->legend.n;
    const float *x = c->data;
    for (size_t i = 0; i < npix; i++)
        if (c->mask[i] && x[i] >= 1 && x[i] < 65536 && (size_t)x[i] >= top)
            top = (size_t)x[i] + 1;
    uint8_t none[4] = {0, 0, 0, 0};
    if (top > in->legend.n && hyprof_legend_set(&in->legend, top - 1, NULL, none) != HYPROF_OK)
        return hyprof_io_error(HYPROF_ERR_NOMEM, err, n, "out of memory");
    if (!(in->pixels = calloc(top, sizeof *in->pixels)))
        return hyprof_io_error(HYPROF_ERR_NOMEM, err, n, "out of memory");
    for (size_t i = 0; i < npix; i++)
        if (c->mask[i] && x[i] >= 0 && x[i] < (float)top && x[i] == floorf(x[i]))
            in->pixels[(size_t)x[i]]++;
    return HYPROF_OK;
}

static void print_classes_text(const info_t *in)
{
    if (!in->pixels)
        return;
    size_t count = 0;
    for (size_t v = 1; v < in->legend.n; v++)
        count += (size_t)listed(in, v);
    printf("classes: %zu\n", count);
    for (size_t v = 1; v < in->legend.n; v++) {
        if (!listed(in, v))
            continue;
        const uint8_t *c = in->legend.rgba + 4 * v;
        const char *name = in->legend.names[v] ? in->legend.names[v] : "";
        printf("class %zu: %s, ", v, *name ? name : "(no name)");
        if (c[3] == 255)
            printf("#%02x%02x%02x", c[0], c[1], c[2]);
        else if (c[3])
            printf("#%02x%02x%02x alpha %u", c[0], c[1], c[2], c[3]);
        else
            printf("no colour");
        printf(", %zu pixels\n", in->pixels[v]);
    }
}

static void print_classes_json(const info_t *in)
{
    fputs(",\"classes\":", stdout);
    if (!in->pixels) {
        fputs("null", stdout);
        return;
    }
    fputc('[', stdout);
    int first = 1;
    for (size_t v = 1; v < in->legend.n; v++) {
        if (!listed(in, v))
            continue;
        const uint8_t *c = in->legend.rgba + 4 * v;
        printf("%s{\"value\":%zu,\"name\":", first ? "" : ",", v);
        cli_json_string(stdout, in->legend.names[v] ? in->legend.names[v] : "");
        printf(",\"rgba\":[%u,%u,%u,%u],\"pixels\":%zu}", c[0], c[1], c[2], c[3],
               in->pixels[v]);
        first = 0;
    }
    fputc(']', stdout);
}

static void crs_names(const hyprof_raster_t *r, info_t *in)
{
    in->crs[0] = in->epsg[0] = '\0';
    if (!r->wkt)
        return;
    OGRSpatialReferenceH srs = OSRNewSpatialReference(r->wkt);
    if (!srs)
        return;
    const char *name = OSRGetName(srs);
    snprintf(in->crs, sizeof in->crs, "%s", name ? name : "unnamed");
    if (OSRAutoIdentifyEPSG(srs) == OGRERR_NONE) {
        const char *auth = OSRGetAuthorityName(srs, NULL), *code = OSRGetAuthorityCode(srs, NULL);
        if (auth && code)
            snprintf(in->epsg, sizeof in->epsg, "%s:%s", auth, code);
    }
    OSRDestroySpatialReference(srs);
}

static void value_range(const hyprof_raster_t *r, info_t *in)
{
    const hyprof_cube_t *c = &r->cube;
    size_t npix = c->width * c->height;
    in->lo = INFINITY;
    in->hi = -INFINITY;
    for (size_t b = 0; b < c->bands; b++)
        for (size_t i = 0; i < npix; i++)
            if (c->mask[i]) {
                float v = ((const float *)c->data)[b * npix + i];
                in->lo = v < in->lo ? v : in->lo;
                in->hi = v > in->hi ? v : in->hi;
            }
}

static void print_text(const hyprof_raster_t *r, const info_t *in)
{
    const hyprof_cube_t *c = &r->cube;
    printf("file: %s\ndriver: %s\nsize: %zu x %zu pixels, %zu bands, %s\n", r->path, r->driver,
           c->width, c->height, c->bands, r->data_type);
    printf("crs: %s%s%s%s\n", in->crs[0] ? in->crs : "none", in->epsg[0] ? " (" : "", in->epsg,
           in->epsg[0] ? ")" : "");
    if (r->has_geotransform)
        printf("geotransform: %.10g, %.10g, %.10g, %.10g, %.10g, %.10g\n", r->geotransform[0],
               r->geotransform[1], r->geotransform[2], r->geotransform[3], r->geotransform[4],
               r->geotransform[5]);
    else
        printf("geotransform: none\n");
    if (c->has_nodata)
        printf("nodata: %.10g\n", c->nodata);
    else
        printf("nodata: none\n");
    printf("valid pixels: %zu of %zu\n", r->nvalid, c->width * c->height);
    if (r->nvalid)
        printf("value range: %.10g .. %.10g\n", in->lo, in->hi);
    if (r->wavelengths)
        printf("wavelengths: %.6g .. %.6g %s\n", r->wavelengths[0], r->wavelengths[c->bands - 1],
               r->wavelength_units ? r->wavelength_units : "");
    for (size_t b = 0; b < c->bands; b++)
        printf("band %zu: %s\n", b + 1, r->band_names[b][0] ? r->band_names[b] : "(no name)");
    print_classes_text(in);
}

static void print_json(const hyprof_raster_t *r, const info_t *in)
{
    const hyprof_cube_t *c = &r->cube;
    fputs("{\"file\":", stdout);
    cli_json_string(stdout, r->path);
    fputs(",\"driver\":", stdout);
    cli_json_string(stdout, r->driver);
    printf(",\"width\":%zu,\"height\":%zu,\"bands\":%zu,\"data_type\":\"%s\",\"crs\":", c->width,
           c->height, c->bands, r->data_type);
    cli_json_string(stdout, in->crs);
    fputs(",\"epsg\":", stdout);
    cli_json_string(stdout, in->epsg);
    fputs(",\"geotransform\":", stdout);
    if (r->has_geotransform)
        printf("[%.17g,%.17g,%.17g,%.17g,%.17g,%.17g]", r->geotransform[0], r->geotransform[1],
               r->geotransform[2], r->geotransform[3], r->geotransform[4], r->geotransform[5]);
    else
        fputs("null", stdout);
    if (c->has_nodata && isfinite(c->nodata))
        printf(",\"nodata\":%.17g", c->nodata);
    else
        printf(",\"nodata\":%s", c->has_nodata ? "\"nan\"" : "null");
    printf(",\"valid_pixels\":%zu,\"band_names\":[", r->nvalid);
    for (size_t b = 0; b < c->bands; b++) {
        if (b)
            fputc(',', stdout);
        cli_json_string(stdout, r->band_names[b]);
    }
    fputs("],\"wavelengths\":", stdout);
    if (r->wavelengths) {
        fputc('[', stdout);
        for (size_t b = 0; b < c->bands; b++)
            printf(isfinite(r->wavelengths[b]) ? "%s%.10g" : "%snull", b ? "," : "",
                   r->wavelengths[b]);
        fputc(']', stdout);
    } else {
        fputs("null", stdout);
    }
    print_classes_json(in);
    fputs("}\n", stdout);
}

int cli_info(int argc, char **argv)
{
    int json = 0;
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (argv[i][0] == '-' && argv[i][1] == '-') {
            cli_error("info", "unknown option '%s' (usage: hyprof info [--json] INPUT)", argv[i]);
            return EXIT_USAGE;
        } else if (!path)
            path = argv[i];
        else {
            cli_error("info", "expected one INPUT, got '%s' too", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (!path) {
        cli_error("info", "usage: hyprof info [--json] INPUT");
        return EXIT_USAGE;
    }
    hyprof_raster_t r;
    char err[1024];
    hyprof_status_t st = hyprof_raster_read(NULL, path, NULL, &r, err, sizeof err);
    if (st != HYPROF_OK) {
        cli_error("info", "%s", err);
        return st == HYPROF_ERR_NOMEM ? EXIT_RUNTIME : EXIT_USAGE;
    }
    info_t in;
    crs_names(&r, &in);
    value_range(&r, &in);
    if ((st = class_list(&r, &in, err, sizeof err)) != HYPROF_OK) {
        cli_error("info", "%s", err);
    } else if (json)
        print_json(&r, &in);
    else
        print_text(&r, &in);
    hyprof_legend_free(&in.legend);
    free(in.pixels);
    hyprof_raster_free(&r);
    return st == HYPROF_OK ? EXIT_OK : st == HYPROF_ERR_NOMEM ? EXIT_RUNTIME : EXIT_USAGE;
}
