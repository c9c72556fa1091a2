/* Extended morphological profiles by reconstruction (the W-MCD seed's
 * second stage): checks, quantisation, the dispatch shared with wmcd.c, and
 * the `emp` operation. The filters are in reconstruct.c (CPU) and
 * kernels/morphology/emp.cu (CUDA). */
#include "emp_internal.h"
#include "../attribute/eap_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "emp"

static const char *const se_names[] = {"disk", "square", "diamond"};

const char *hyprof_se_name(hyprof_se_t se)
{
    return (unsigned)se < 3 ? se_names[se] : NULL;
}

hyprof_status_t hyprof_se_parse(const char *text, hyprof_se_t *se)
{
    for (int i = 0; text && i < 3; i++)
        if (strcmp(text, se_names[i]) == 0) {
            *se = (hyprof_se_t)i;
            return HYPROF_OK;
        }
    return HYPROF_ERR_ARGUMENT;
}

static const int paper_radii[] = {1, 3, 5, 7};

void hyprof_emp_params_default(hyprof_emp_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->radii = paper_radii;
    p->nradii = 4;
    p->se = HYPROF_SE_DISK;
}

hyprof_status_t hyprof__emp_check(hyprof_ctx_t *ctx, const char *op, size_t width,
                                  size_t height, const hyprof_emp_params_t *p)
{
    size_t side = width < height ? width : height;
    if (width < 2 || height < 2)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                             "a %zux%zu image is too small: width and height must be at "
                             "least 2 (3 for radius 1)", width, height);
    if (width > SIZE_MAX / height)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op, "%zux%zu pixels: too large", width,
                             height);
    if (!hyprof_se_name(p->se))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "unknown structuring element %d",
                             (int)p->se);
    if (!p->radii || p->nradii == 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "no radius given");
    if (p->nradii > HYPROF_EMP_MAX_RADII)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "%zu radii: at most %d", p->nradii,
                             HYPROF_EMP_MAX_RADII);
    for (size_t i = 0; i < p->nradii; i++) {
        int r = p->radii[i];
        if (r < 1)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "radius %d must be >= 1", r);
        if (i && r <= p->radii[i - 1])
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                                 "radii must be strictly increasing: %d after %d", r,
                                 p->radii[i - 1]);
        if ((size_t)(2 * (long)r + 1) > side)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                                 "radius %d is too large for a %zux%zu image: the structuring "
                                 "element (%d pixels across) must fit in its smaller side",
                                 r, width, height, 2 * r + 1);
    }
    return HYPROF_OK;
}

hyprof_status_t hyprof__emp_quantise(hyprof_ctx_t *ctx, const hyprof_emp_args_t *a,
                                     const float *feat, uint8_t *q)
{
    size_t n = a->width * a->height;
    hyprof_cube_t f = hyprof_cube_bsq((void *)feat, HYPROF_FLOAT32, a->width, a->height,
                                      a->bands);
    f.mask = (uint8_t *)a->mask;
    f.mask_stride_y = (ptrdiff_t)a->width;
    uint16_t *q16 = malloc(n * a->bands * sizeof *q16);
    if (!q16)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, a->op, "cannot allocate the quantised bands");
    hyprof_status_t st = hyprof__quantise(ctx, a->op, &f, 256, q16, a->range);
    for (size_t i = 0; st == HYPROF_OK && i < n * a->bands; i++)
        q[i] = (uint8_t)q16[i];
    free(q16);
    return st;
}

/* Runs the chain on the backend the context chooses: the features of `in`
 * (its spectral DWT by `spec` to spec_levels levels, or its bands when spec
 * is NULL), quantised to 8 bits, their EMP and, when `wavelet` is set, its
 * W-MCD. Allocates `out`; `range` (optional): 2 per feature. */
hyprof_status_t hyprof__emp_run(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *in,
                                const hyprof_wavelet_t *spec, int spec_levels,
                                const hyprof_emp_params_t *p, const hyprof_wavelet_t *wavelet,
                                const int levels[3], int hard, hyprof_cube_t *out,
                                double *range)
{
    memset(out, 0, sizeof *out);
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    hyprof_status_t st = hyprof__input_f32(ctx, op, in, &tmp, &x);
    if (st != HYPROF_OK)
        return st;
    size_t nfeat = spec ? hyprof_dwt_bands(x->bands, spec_levels) : x->bands;
    size_t planes = hyprof__emp_planes(p->nradii) * (wavelet ? 3 : 1);
    double *rng = range ? range : malloc(2 * nfeat * sizeof *rng);
    if (!rng)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    if (st == HYPROF_OK && (st = hyprof__cube_alloc_out(ctx, out, HYPROF_FLOAT32, x->width,
                                                        x->height, nfeat * planes)) != HYPROF_OK)
        hyprof__error(ctx, st, op, "cannot allocate the %zu-band output", nfeat * planes);
    if (st == HYPROF_OK) {
        out->has_nodata = x->has_nodata;
        out->nodata = x->nodata;
        hyprof_emp_args_t a = {x->data, x->bands, spec ? spec_levels : 0,
                               spec ? spec->dec_lo : NULL, spec ? spec->length : 0, x->mask,
                               x->width, x->height, nfeat, p->radii, p->nradii, p->se,
                               p->devices, p->ndevices, wavelet, {0, 0, 0}, hard,
                               hyprof__nodata_f32(x), out->data, rng, op};
        if (wavelet)
            memcpy(a.levels, levels, sizeof a.levels);
        st = hyprof__dispatch(ctx, op, hyprof__cpu_emp, HYPROF_CUDA_IMPL(hyprof__cuda_emp), &a);
    }
    if (rng != range)
        free(rng);
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK)
        hyprof_cube_free(out);
    return st;
}

hyprof_status_t hyprof_emp(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                           const hyprof_emp_params_t *p, hyprof_cube_t *out, double *range)
{
    memset(out, 0, sizeof *out);
    hyprof_status_t st = hyprof__emp_check(ctx, OP, in->width, in->height, p);
    if (st != HYPROF_OK)
        return st;
    return hyprof__emp_run(ctx, OP, in, NULL, 0, p, NULL, NULL, 0, out, range);
}

/* ---- the operation's arguments, shared with wmcd ------------------------------------ */

#include "../core/ops.h"

hyprof_status_t hyprof__emp_op_params(hyprof_ctx_t *ctx, const char *op,
                                      const hyprof_args_t *args, hyprof__emp_op_t *o)
{
    memset(o, 0, sizeof *o);
    hyprof_emp_params_default(&o->p);
    if (hyprof_se_parse(hyprof_args_str(args, "se"), &o->p.se) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "unknown structuring element '%s'",
                             hyprof_args_str(args, "se"));
    size_t nr = 0;
    const double *r = hyprof_args_list(args, "radii", &nr);
    if (nr == 0 || nr > HYPROF_EMP_MAX_RADII)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "%zu radii given: 1 to %d", nr,
                             HYPROF_EMP_MAX_RADII);
    for (size_t i = 0; i < nr; i++)
        o->radii[i] = (int)r[i];
    o->p.radii = o->radii;
    o->p.nradii = nr;
    const char *dev = hyprof_args_str(args, "devices");
    if (!dev)
        return HYPROF_OK;
    if (strcmp(dev, "all") == 0) {
        int count = hyprof_cuda_device_count();
        for (int i = 0; i < count && i < HYPROF__EMP_MAX_DEVICES; i++)
            o->devices[o->p.ndevices++] = i;
        if (o->p.ndevices)
            o->p.devices = o->devices;
        return HYPROF_OK;
    }
    /* Every element a device number: an empty one ("1,", ",1", "1,,2") is
     * named, not skipped. */
    const char *s = dev;
    for (size_t k = 1;; k++) {
        if (*s == ',' || !*s)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                                 "--devices '%s': element %zu is empty (a comma-separated "
                                 "list of device numbers, or all)", dev, k);
        char *end;
        long d = strtol(s, &end, 10);
        if (end == s || d < 0 || d > 255 || (*end && *end != ','))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                                 "--devices '%s': a comma-separated list of device numbers, "
                                 "or all", dev);
        if (o->p.ndevices == HYPROF__EMP_MAX_DEVICES)
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op, "--devices '%s': at most %d",
                                 dev, HYPROF__EMP_MAX_DEVICES);
        o->devices[o->p.ndevices++] = (int)d;
        if (!*end)
            break;
        s = end + 1;
    }
    o->p.devices = o->devices;
    return HYPROF_OK;
}

hyprof_status_t hyprof__emp_describe(hyprof_result_t *out, const char *prefix, char **names,
                                     size_t nfeat, const double *range, int dwt_levels)
{
    hyprof_status_t st = HYPROF_OK;
    for (size_t b = 0; st == HYPROF_OK && b < nfeat; b++) {
        char key[64];
        snprintf(key, sizeof key, "%s_QUANT_MIN_%s", prefix, names[b]);
        if (st == HYPROF_OK)
            st = hyprof_result_add_meta(out, key, "%.17g", range[2 * b]);
        snprintf(key, sizeof key, "%s_QUANT_MAX_%s", prefix, names[b]);
        if (st == HYPROF_OK)
            st = hyprof_result_add_meta(out, key, "%.17g", range[2 * b + 1]);
    }
    char key[64];
    snprintf(key, sizeof key, "%s_FEATURES", prefix);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(out, key, "%zu", nfeat);
    snprintf(key, sizeof key, "%s_DWT_LEVELS", prefix);
    if (st == HYPROF_OK && dwt_levels > 0)
        st = hyprof_result_add_meta(out, key, "%d", dwt_levels);
    return st;
}

/* Runs `body` on the source of the chain: with --reduction dwt the input
 * itself, the spectral DWT running inside the chain on its backend (on the
 * GPU the features never leave the device); otherwise the reduced features.
 * The frame of both operations' hyprof__run_*. */
hyprof_status_t hyprof__emp_op_frame(hyprof_ctx_t *ctx, const char *op,
                                     const hyprof_args_t *args, const hyprof_cube_t *in,
                                     hyprof__emp_body_fn body, void *user)
{
    hyprof_cube_t feat;
    memset(&feat, 0, sizeof feat);
    char **names = NULL;
    double saved[2], *range = NULL;
    hyprof__emp_src_t src = {in, NULL, 0, 0};
    hyprof_status_t st;
    if (strcmp(hyprof_args_str(args, "reduction"), "dwt") == 0) {
        st = hyprof__reduce_dwt_plan(ctx, op, args, in->bands, &src.spec, &src.spec_levels,
                                     &names);
        src.nfeat = hyprof_dwt_bands(in->bands, (int)src.spec_levels);
    } else {
        int levels = 0;
        hyprof__progress_push(ctx, 0.0, 0.2, saved);
        st = hyprof__reduce_features(ctx, op, args, in, &feat, &names, &levels);
        hyprof__progress_pop(ctx, saved);
        src.cube = &feat;
        src.nfeat = feat.bands;
    }
    if (st == HYPROF_OK && !(range = calloc(2 * src.nfeat, sizeof *range)))
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    if (st == HYPROF_OK) {
        hyprof__progress_push(ctx, src.spec ? 0.0 : 0.2, 1.0, saved);
        st = body(ctx, &src, names, range, user);
        hyprof__progress_pop(ctx, saved);
    }
    if (names)
        hyprof__free_names(names, src.nfeat);
    hyprof_cube_free(&feat);
    free(range);
    return st;
}

typedef struct {
    const hyprof__emp_op_t *o;
    const hyprof_cube_t *in;
    hyprof_result_t *out;
} emp_body_t;

static hyprof_status_t emp_body(hyprof_ctx_t *ctx, const hyprof__emp_src_t *src, char **names,
                                double *range, void *user)
{
    emp_body_t *e = user;
    hyprof_status_t st = hyprof__emp_run(ctx, OP, src->cube, src->spec, src->spec_levels,
                                         &e->o->p, NULL, NULL, 0, &e->out->cube, range);
    if (st == HYPROF_OK)
        st = hyprof__result_adopt(e->out, e->in);
    if (st == HYPROF_OK)
        st = hyprof__emp_describe(e->out, "EMP", names, src->nfeat, range, src->spec_levels);
    return st;
}

hyprof_status_t hyprof__run_emp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                const hyprof_cube_t *in, hyprof_result_t *out)
{
    hyprof__emp_op_t o;
    hyprof_status_t st = hyprof__emp_op_params(ctx, OP, args, &o);
    /* everything checkable before the reduction's work */
    if (st == HYPROF_OK)
        st = hyprof__emp_check(ctx, OP, in->width, in->height, &o.p);
    if (st != HYPROF_OK)
        return st;
    emp_body_t e = {&o, in, out};
    return hyprof__emp_op_frame(ctx, OP, args, in, emp_body, &e);
}

/* Features times the planes (the band, a closing and an opening per radius):
 * the count without running, for the GDAL driver. */
hyprof_status_t hyprof__bands_emp(hyprof_ctx_t *ctx, const hyprof_args_t *args, size_t in_bands,
                                  size_t *out_bands)
{
    hyprof__emp_op_t o;
    size_t nfeat = 0;
    hyprof_status_t st = hyprof__emp_op_params(ctx, OP, args, &o);
    if (st == HYPROF_OK)
        st = hyprof__reduce_bands(ctx, OP, args, in_bands, &nfeat);
    if (st == HYPROF_OK)
        *out_bands = nfeat * hyprof__emp_planes(o.p.nradii);
    return st;
}

hyprof_status_t hyprof__emp_band_names(const hyprof_args_t *args, const hyprof_emp_params_t *p,
                                       const int *levels, size_t per, size_t out_bands,
                                       char **names)
{
    const char *prefix = hyprof__reduce_prefix(args);
    size_t planes = hyprof__emp_planes(p->nradii), k = 0;
    hyprof_status_t st = HYPROF_OK;
    for (size_t b = 0; st == HYPROF_OK && b < out_bands / (planes * per); b++)
        for (size_t i = 0; st == HYPROF_OK && i < planes; i++) {
            char base[96];
            if (i < p->nradii)
                snprintf(base, sizeof base, "%s%zu closing r=%d", prefix, b + 1,
                         p->radii[p->nradii - 1 - i]);
            else if (i == p->nradii)
                snprintf(base, sizeof base, "%s%zu", prefix, b + 1);
            else
                snprintf(base, sizeof base, "%s%zu opening r=%d", prefix, b + 1,
                         p->radii[i - p->nradii - 1]);
            for (size_t j = 0; st == HYPROF_OK && j < per; j++)
                st = levels ? hyprof__name(names, k++, "%s j=%d", base, levels[j])
                            : hyprof__name(names, k++, "%s", base);
        }
    return st;
}

HYPROF__NAMES_FN(emp)
{
    (void)width, (void)height, (void)in_bands;
    hyprof__emp_op_t o;
    hyprof_status_t st = hyprof__emp_op_params(ctx, OP, args, &o);
    return st == HYPROF_OK ? hyprof__emp_band_names(args, &o.p, NULL, 1, out_bands, names) : st;
}
