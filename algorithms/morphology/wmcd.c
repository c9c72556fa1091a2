/* Wavelet-based multi-component denoising of an EMP (the W-MCD seed's third
 * stage): level choice and checks, and the `wmcd` operation. The step runs
 * with the EMP's (emp.c, reconstruct.c, wavelet/dwt2.c; CUDA:
 * kernels/morphology/emp.cu) so the GPU keeps the planes on the device. */
#include "emp_internal.h"
#include "../core/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "wmcd"

void hyprof_wmcd_params_default(hyprof_wmcd_params_t *p)
{
    memset(p, 0, sizeof *p);
    hyprof_emp_params_default(&p->emp);
    p->wavelet = hyprof_wavelet_find("haar");
}

void hyprof_wmcd_auto_levels(size_t width, size_t height, int levels[3])
{
    size_t w = width < height ? width : height;
    int l2 = 0; /* floor(log2(w)) */
    while (w >= 2) {
        w /= 2;
        l2++;
    }
    /* floor(log2(w) / 2) == floor(floor(log2(w)) / 2) */
    levels[0] = 1;
    levels[1] = l2 / 2;
    levels[2] = l2 - 1;
}

static int is_orthogonal(const hyprof_wavelet_t *w)
{
    return strncmp(w->name, "bior", 4) != 0;
}

static hyprof_status_t check_levels(hyprof_ctx_t *ctx, size_t width, size_t height,
                                    const hyprof_wmcd_params_t *p, int levels[3])
{
    if (!p->wavelet)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no wavelet given");
    if (!is_orthogonal(p->wavelet))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "wavelet %s is biorthogonal: the denoising takes orthogonal ones "
                             "(haar, db*, sym*, coif*)", p->wavelet->name);
    size_t side = width < height ? width : height;
    if (side < p->wavelet->length)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "a %zux%zu image is smaller than the %s filter (%zu taps)",
                             width, height, p->wavelet->name, p->wavelet->length);
    int automatic = !p->levels[0] && !p->levels[1] && !p->levels[2];
    if (automatic)
        hyprof_wmcd_auto_levels(width, height, levels);
    else
        memcpy(levels, p->levels, 3 * sizeof *levels);
    int maxl = hyprof_dwt2_max_levels(width, height, p->wavelet);
    for (int k = 0; k < 3; k++)
        if (levels[k] < 1 || levels[k] > maxl)
            return hyprof__error(ctx, automatic ? HYPROF_ERR_INPUT : HYPROF_ERR_ARGUMENT, OP,
                                 "%s level %d is out of range: a %zux%zu image allows 1 to %d "
                                 "levels of %s", automatic ? "automatic" : "denoising",
                                 levels[k], width, height, maxl, p->wavelet->name);
    return HYPROF_OK;
}

hyprof_status_t hyprof_wmcd(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                            const hyprof_wmcd_params_t *p, hyprof_cube_t *out, double *range,
                            int *levels_used)
{
    memset(out, 0, sizeof *out);
    int levels[3];
    hyprof_status_t st = hyprof__emp_check(ctx, OP, in->width, in->height, &p->emp);
    if (st == HYPROF_OK)
        st = check_levels(ctx, in->width, in->height, p, levels);
    if (st != HYPROF_OK)
        return st;
    if (levels_used)
        memcpy(levels_used, levels, sizeof levels);
    return hyprof__emp_run(ctx, OP, in, NULL, 0, &p->emp, p->wavelet, levels, p->hard, out,
                           range);
}

/* ---- the `wmcd` operation ----------------------------------------------------------- */

static hyprof_status_t op_params(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 hyprof__emp_op_t *o, hyprof_wmcd_params_t *p)
{
    hyprof_status_t st = hyprof__emp_op_params(ctx, OP, args, o);
    if (st != HYPROF_OK)
        return st;
    hyprof_wmcd_params_default(p);
    p->emp = o->p;
    const char *wn = hyprof_args_str(args, "denoise-wavelet");
    if (!(p->wavelet = hyprof_wavelet_find(wn)))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "unknown wavelet '%s'", wn);
    p->hard = strcmp(hyprof_args_str(args, "threshold"), "hard") == 0;
    const char *lv = hyprof_args_str(args, "denoise-levels");
    if (!lv || strcmp(lv, "auto") == 0)
        return HYPROF_OK;
    const char *s = lv;
    for (int k = 0; k < 3; k++) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 60 || (k < 2 ? *end != ',' : *end != '\0'))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                 "--denoise-levels '%s': auto, or three levels j1,j2,j3 "
                                 "(each >= 1)", lv);
        p->levels[k] = (int)v;
        s = end + 1;
    }
    return HYPROF_OK;
}

typedef struct {
    const hyprof_wmcd_params_t *p;
    const int *levels;
    const hyprof_cube_t *in;
    hyprof_result_t *out;
} wmcd_body_t;

static hyprof_status_t wmcd_body(hyprof_ctx_t *ctx, const hyprof__emp_src_t *src, char **names,
                                 double *range, void *user)
{
    wmcd_body_t *e = user;
    const int *levels = e->levels;
    hyprof_status_t st = hyprof__emp_run(ctx, OP, src->cube, src->spec, src->spec_levels,
                                         &e->p->emp, e->p->wavelet, levels, e->p->hard,
                                         &e->out->cube, range);
    if (st == HYPROF_OK)
        st = hyprof__result_adopt(e->out, e->in);
    if (st == HYPROF_OK)
        st = hyprof__emp_describe(e->out, "WMCD", names, src->nfeat, range, src->spec_levels);
    if (st == HYPROF_OK)
        st = hyprof_result_add_meta(e->out, "WMCD_LEVELS", "%d,%d,%d", levels[0], levels[1],
                                    levels[2]);
    return st;
}

hyprof_status_t hyprof__run_wmcd(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 const hyprof_cube_t *in, hyprof_result_t *out)
{
    hyprof__emp_op_t o;
    hyprof_wmcd_params_t p;
    int levels[3];
    hyprof_status_t st = op_params(ctx, args, &o, &p);
    /* everything checkable before the reduction's work */
    if (st == HYPROF_OK)
        st = hyprof__emp_check(ctx, OP, in->width, in->height, &p.emp);
    if (st == HYPROF_OK)
        st = check_levels(ctx, in->width, in->height, &p, levels);
    if (st != HYPROF_OK)
        return st;
    wmcd_body_t e = {&p, levels, in, out};
    return hyprof__emp_op_frame(ctx, OP, args, in, wmcd_body, &e);
}

/* Three denoised levels of every EMP band. */
hyprof_status_t hyprof__bands_wmcd(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                   size_t in_bands, size_t *out_bands)
{
    hyprof_status_t st = hyprof__bands_emp(ctx, args, in_bands, out_bands);
    if (st == HYPROF_OK)
        *out_bands *= 3;
    return st;
}

/* The EMP's names, each at the three denoising levels: "A1 closing r=7 j=1". */
HYPROF__NAMES_FN(wmcd)
{
    (void)in_bands;
    hyprof__emp_op_t o;
    hyprof_wmcd_params_t p;
    int levels[3];
    hyprof_status_t st = op_params(ctx, args, &o, &p);
    if (st == HYPROF_OK)
        st = check_levels(ctx, width, height, &p, levels);
    return st == HYPROF_OK ? hyprof__emp_band_names(args, &p.emp, levels, 3, out_bands, names)
                           : st;
}
