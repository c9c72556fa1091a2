/* The `unmix` operation: optional SSPP candidates, endmember extraction
 * (N-FINDR, VCA or ATGP) or a saved endmember set, abundances of every pixel
 * (FCLS, NNLS or UCLS) and the reconstruction RMSE; the endmember set is
 * saved as CSV and JSON when the arguments name files (the CLI names them
 * after OUTPUT). Also the SSPP arguments shared with `sspp`. */
#include "unmixing_impl.h"
#include "../core/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "unmix"

/* --endmembers: a number, or auto (HySime). */
static hyprof_status_t endmember_count(hyprof_ctx_t *ctx, const char *op,
                                       const hyprof_args_t *args, const hyprof_cube_t *x,
                                       size_t *p)
{
    const char *s = hyprof_args_str(args, "endmembers");
    size_t nvalid = hyprof_cube_count_valid(x), pmax = x->bands < nvalid ? x->bands : nvalid;
    if (pmax > HYPROF_MAX_ENDMEMBERS)
        pmax = HYPROF_MAX_ENDMEMBERS;
    if (!s || strcmp(s, "auto") == 0) {
        if (pmax < 2)
            return hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                                 "%zu bands and %zu valid pixels: unmixing needs at least 2 "
                                 "of each", x->bands, nvalid);
        return hyprof__hysime(ctx, op, x->data, x->mask, x->width * x->height, x->bands, pmax, p);
    }
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0')
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "--endmembers '%s' is neither a number nor 'auto'", s);
    if (v < 2 || (size_t)v > pmax)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "--endmembers %ld is out of range: need 2 <= p <= %zu (the input "
                             "has %zu bands and %zu valid pixels)", v, pmax, x->bands, nvalid);
    *p = (size_t)v;
    return HYPROF_OK;
}

static void sspp_fixed(const hyprof_args_t *args, hyprof_sspp_params_t *prm)
{
    memset(prm, 0, sizeof *prm);
    prm->sigma = hyprof_args_float(args, "sigma");
    prm->theta = hyprof_args_float(args, "theta");
    prm->per_cluster = (size_t)hyprof_args_int(args, "candidates-per-cluster");
    prm->kmeans_iter = (int)hyprof_args_int(args, "kmeans-iterations");
}

hyprof_status_t hyprof__sspp_params(hyprof_ctx_t *ctx, const char *op, const hyprof_args_t *args,
                                    const hyprof_cube_t *x, hyprof_sspp_params_t *prm)
{
    sspp_fixed(args, prm);
    return endmember_count(ctx, op, args, x, &prm->p);
}

/* The pixels extraction looks at: SSPP's candidates, or every valid pixel. */
static hyprof_status_t candidates(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                  const hyprof_cube_t *x, size_t p, size_t **idx, size_t *n,
                                  double *seconds)
{
    size_t npix = x->width * x->height;
    hyprof_sspp_out_t o;
    memset(&o, 0, sizeof o);
    const uint8_t *keep = x->mask;
    hyprof_status_t st = HYPROF_OK;
    if (hyprof_args_bool(args, "sspp")) {
        hyprof_sspp_params_t prm;
        sspp_fixed(args, &prm);
        prm.p = p;
        double saved[2];
        hyprof__progress_push(ctx, 0.0, 0.4, saved);
        st = hyprof__sspp(ctx, OP, x, &prm, &o);
        hyprof__progress_pop(ctx, saved);
        if (st != HYPROF_OK)
            return st;
        keep = o.candidate;
        memcpy(seconds, o.seconds, sizeof o.seconds);
    }
    *idx = malloc(npix * sizeof **idx);
    *n = 0;
    for (size_t px = 0; *idx && px < npix; px++)
        if (!keep || keep[px])
            (*idx)[(*n)++] = px;
    hyprof__sspp_out_free(&o);
    return *idx ? HYPROF_OK : hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
}

/* Wavelengths given (the CLI passes the input's; hyprof__run_unmix checks
 * there is one a band). */
static void set_wavelengths(const hyprof_args_t *args, hyprof_endmembers_t *em)
{
    size_t n = 0;
    const double *wl = hyprof_args_list(args, "wavelengths", &n);
    const char *units = hyprof_args_str(args, "wavelength-units");
    if (wl && n == em->bands && (em->wavelengths = malloc(n * sizeof *wl)))
        memcpy(em->wavelengths, wl, n * sizeof *wl);
    if (units && *units)
        em->wavelength_units = strdup(units);
}

/* The extracted set; with --refine mean each spectrum is then the mean of
 * the pixels pure in it (refine.c), nrefine[k] of them. */
static hyprof_status_t extract_set(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                   const hyprof_cube_t *x, hyprof_endmembers_t **em,
                                   size_t *ncand, size_t **nrefine, double *seconds)
{
    size_t p = 0, n = 0, *idx = NULL, *chosen = NULL;
    const char *how = hyprof_args_str(args, "extract");
    hyprof__extract_t method = strcmp(how, "vca") == 0    ? HYPROF__EXTRACT_VCA
                               : strcmp(how, "atgp") == 0 ? HYPROF__EXTRACT_ATGP
                                                          : HYPROF__EXTRACT_NFINDR;
    double t0 = hyprof__now();
    hyprof_status_t st = endmember_count(ctx, OP, args, x, &p);
    double t1 = hyprof__now();
    seconds[0] = t1 - t0;
    if (st == HYPROF_OK)
        st = candidates(ctx, args, x, p, &idx, &n, seconds + 1);
    double t2 = hyprof__now();
    if (st == HYPROF_OK && !(chosen = malloc(p * sizeof *chosen)))
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    int refine = strcmp(hyprof_args_str(args, "refine"), "mean") == 0;
    double saved[2];
    hyprof__progress_push(ctx, 0.4, refine ? 0.55 : 0.6, saved);
    if (st == HYPROF_OK)
        st = hyprof__extract(ctx, OP, x->data, x->width * x->height, x->bands, idx, n, p, method,
                             chosen);
    hyprof__progress_pop(ctx, saved);
    *ncand = n;
    if (st == HYPROF_OK && hyprof_endmembers_new(x->bands, p, em) != HYPROF_OK)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    size_t npix = x->width * x->height;
    for (size_t k = 0; st == HYPROF_OK && k < p; k++) {
        for (size_t b = 0; b < x->bands; b++)
            (*em)->spectra[k * x->bands + b] = ((const float *)x->data)[b * npix + chosen[k]];
        (*em)->pixel_x[k] = (long)(chosen[k] % x->width);
        (*em)->pixel_y[k] = (long)(chosen[k] / x->width);
    }
    hyprof__progress_push(ctx, 0.55, 0.6, saved);
    if (st == HYPROF_OK && refine && !(*nrefine = calloc(p, sizeof **nrefine)))
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    if (st == HYPROF_OK && refine)
        st = hyprof__refine_mean(ctx, OP, x->data, x->mask, npix, x->bands, chosen,
                                 hyprof_args_float(args, "refine-purity"), *em, *nrefine);
    hyprof__progress_pop(ctx, saved);
    seconds[5] = hyprof__now() - t2;
    if (st == HYPROF_OK)
        set_wavelengths(args, *em);
    free(idx);
    free(chosen);
    return st;
}

static hyprof_status_t load_set(hyprof_ctx_t *ctx, const char *path, const hyprof_cube_t *x,
                                hyprof_endmembers_t **em)
{
    hyprof_status_t st = hyprof_endmembers_load_csv(ctx, path, em);
    if (st == HYPROF_OK && (*em)->bands != x->bands) {
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                           "the endmember set '%s' has %zu bands but the input has %zu", path,
                           (*em)->bands, x->bands);
        hyprof_endmembers_free(em);
    }
    return st;
}

static hyprof_status_t describe(hyprof_result_t *out, const hyprof_endmembers_t *em,
                                size_t ncand, const size_t *nrefine, const double *sec,
                                const char *devsec)
{
    size_t p = em->count;
    /* The endmembers' pixels are data: UNMIX_ENDMEMBER_PIXELS, not the band
     * names (hyprof__names_unmix). */
    hyprof_status_t st = hyprof_result_add_meta(out, "UNMIX_ENDMEMBERS", "%zu", p);
    char buf[8192];
    size_t len = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < p && len + 48 < sizeof buf; k++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%ld,%ld", k ? ";" : "",
                                em->pixel_x[k], em->pixel_y[k]);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "UNMIX_ENDMEMBER_PIXELS", "%s", buf);
    if (st == HYPROF_OK && ncand)
        st = hyprof_result_add_meta(out, "UNMIX_CANDIDATES", "%zu", ncand);
    /* --refine mean: how many pixels each endmember spectrum averages. */
    len = 0;
    buf[0] = '\0';
    for (size_t k = 0; nrefine && k < p && len + 24 < sizeof buf; k++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%zu", k ? "," : "", nrefine[k]);
    if (st == HYPROF_OK && nrefine)
        st = hyprof_result_add_meta(out, "UNMIX_REFINE_PIXELS", "%s", buf);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, "UNMIX_SECONDS",
                                    "count=%.4f homogeneity=%.4f purity=%.4f kmeans=%.4f "
                                    "fusion=%.4f extraction=%.4f abundances=%.4f", sec[0],
                                    sec[1], sec[2], sec[3], sec[4], sec[5], sec[6]);
    /* What the CUDA stages took on the device (events), next to the host times. */
    if (st == HYPROF_OK && devsec[0])
        st = hyprof_result_add_meta(out, "UNMIX_DEVICE_SECONDS", "%s", devsec);
    if (st == HYPROF_OK && ncand) { /* the extraction's steps */
        double ex[4];
        hyprof__extract_seconds(ex);
        st = hyprof_result_add_meta(out, "UNMIX_EXTRACT_SECONDS",
                                    "gather=%.4f atgp=%.4f pca=%.4f sweeps=%.4f", ex[0], ex[1],
                                    ex[2], ex[3]);
    }
    return st;
}

static hyprof_status_t save_set(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_endmembers_t *em)
{
    const char *csv = hyprof_args_str(args, "endmembers-csv"),
               *json = hyprof_args_str(args, "endmembers-json");
    hyprof_status_t st = HYPROF_OK;
    if (csv)
        st = hyprof_endmembers_save_csv(ctx, em, csv);
    if (st == HYPROF_OK && json)
        st = hyprof_endmembers_save_json(ctx, em, json);
    return st;
}

hyprof_status_t hyprof__run_unmix(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                  const hyprof_cube_t *in, hyprof_result_t *out)
{
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    hyprof_endmembers_t *em = NULL;
    hyprof_abundance_method_t method = HYPROF_ABUNDANCE_FCLS;
    double sec[7] = {0};
    size_t ncand = 0, *nrefine = NULL;
    size_t nwl = 0;
    if (hyprof_args_list(args, "wavelengths", &nwl) && nwl != in->bands)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "--wavelengths has %zu values but the input has %zu bands", nwl,
                             in->bands);
    hyprof_status_t st = hyprof__input_f32(ctx, OP, in, &tmp, &x);
    if (st != HYPROF_OK)
        return st;
    hyprof__unmix_hold(x->data, x->mask, x->width * x->height, x->bands);
    hyprof_abundance_method_parse(hyprof_args_str(args, "abundances"), &method);
    const char *model = hyprof_args_str(args, "model");
    st = model ? load_set(ctx, model, x, &em)
               : extract_set(ctx, args, x, &em, &ncand, &nrefine, sec);
    double t0 = hyprof__now(), saved[2];
    hyprof__progress_push(ctx, model ? 0.0 : 0.6, 1.0, saved);
    if (st == HYPROF_OK)
        st = hyprof_abundances(ctx, em, x, method, &out->cube);
    hyprof__progress_pop(ctx, saved);
    sec[6] = hyprof__now() - t0;
    char devsec[256];
    hyprof__unmix_device_seconds(devsec, sizeof devsec);
    if (st == HYPROF_OK && (st = hyprof__result_adopt(out, in)) != HYPROF_OK)
        hyprof__error(ctx, st, OP, "out of memory");
    if (st == HYPROF_OK && (st = describe(out, em, ncand, nrefine, sec, devsec)) != HYPROF_OK)
        hyprof__error(ctx, st, OP, "cannot describe the output");
    if (st == HYPROF_OK)
        st = save_set(ctx, args, em);
    hyprof_endmembers_free(&em);
    free(nrefine);
    hyprof__unmix_release();
    hyprof_cube_free(&tmp);
    return st;
}

/* With --model the run is the abundances alone, pixel by pixel (the
 * endmember files it writes copy the model, the same for every block). */
int hyprof__pixelwise_unmix(const hyprof_args_t *args)
{
    return hyprof_args_str(args, "model") != NULL;
}

/* p abundance bands and the RMSE band, without running (for the GDAL driver):
 * p from --model or a numeric --endmembers; with auto it is HySime's answer,
 * known only after running (0). */
hyprof_status_t hyprof__bands_unmix(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                    size_t *out_bands)
{
    const char *model = hyprof_args_str(args, "model"), *s = hyprof_args_str(args, "endmembers");
    *out_bands = 0;
    if (model) {
        hyprof_endmembers_t *em = NULL;
        hyprof_status_t st = hyprof_endmembers_load_csv(ctx, model, &em);
        if (st == HYPROF_OK && em->bands != in_bands)
            st = hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                               "the endmember set '%s' has %zu bands but the input has %zu",
                               model, em->bands, in_bands);
        if (st == HYPROF_OK)
            *out_bands = em->count + 1;
        hyprof_endmembers_free(&em);
        return st;
    }
    if (!s || strcmp(s, "auto") == 0)
        return HYPROF_OK;
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 2 || (size_t)v > in_bands)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "--endmembers '%s' must be auto or a number from 2 to the band "
                             "count (%zu)", s, in_bands);
    *out_bands = (size_t)v + 1;
    return HYPROF_OK;
}

/* "E1 abundance", ..., then "RMSE". */
HYPROF__NAMES_FN(unmix)
{
    (void)ctx, (void)args, (void)width, (void)height, (void)in_bands;
    hyprof_status_t st = HYPROF_OK;
    for (size_t k = 0; st == HYPROF_OK && k + 1 < out_bands; k++)
        st = hyprof__name(names, k, "E%zu abundance", k + 1);
    return st == HYPROF_OK ? hyprof__name(names, out_bands - 1, "RMSE") : st;
}
