/* EADP: extended anisotropic diffusion profiles (the EADP paper's Algorithms
 * 2 and 4, with DESIGN.md's definitions): argument checks, the FED schedule,
 * the dispatch, the CPU backend. The exact per-band semantics are written
 * once, in eadp_impl.h; both backends follow them. */
#include "eadp_impl.h"
#include "../spectral/pca_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "eadp"
#define TAU_MAX 0.25 /* stability limit of the explicit 2-D scheme, grid spacing 1 */
/* The most steps one FED cycle may have. The Leja ordering costs n^2
 * logarithms (about 0.1 s at 2048 steps, the longest the library runs between
 * cancellation points), and the longest step of a cycle amplifies a rounding
 * error up to about 0.72 n^2 times (3e6 at 2048 steps: float32 keeps 7
 * digits). A longer increment takes more cycles (--cycles) instead. */
#define FED_MAX_STEPS 2048
/* Pixel-steps of diffusion between two cancellation checks (a few ms). */
#define FED_POLL_WORK ((size_t)1 << 22)

void hyprof_eadp_params_default(hyprof_eadp_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->sigma = 1.0;
    p->percentile = 0.7;
    p->diffusivity = HYPROF_DIFFUSIVITY_G2;
    p->cycles = 1;
}

/* Leja order of the steps (Reichel's ordering for Richardson iterations): the
 * step j of Eq. 7 damps the eigenvalue lambda_j = 1/tau_j of the operator to 0.
 * The first step is the one whose lambda_j is largest; each next one maximises
 * the product of distances |lambda_j - lambda_i| to those already taken
 * (sum of logs, accumulated in the order taken; ties to the lower index).
 * Every partial product of the cycle's factors (1 - tau lambda) then stays
 * small, both the ones that grow the intermediate values (steps done) and the
 * ones that amplify an early rounding error (steps to come): at most 82 and
 * 1.5 for n = 28 (T = 65), 810 and 1.2 for n = 79 (T = 520). The kappa-cycle
 * order used before (kappa = n/2 as KAZE's fed.cpp) let the intermediate
 * values grow by 7.7e6 at n = 28 and 4.7e58 at n = 190 (T = 3000: NaN even in
 * double); ascending order amplifies an early error by 1e12 at n = 28. */
static int leja_order(const double *sorted, size_t n, double *tau)
{
    double *acc = calloc(n, sizeof *acc);
    unsigned char *used = calloc(n, 1);
    if (!acc || !used) {
        free(acc);
        free(used);
        return 0;
    }
    size_t last = 0; /* sorted ascending: lambda = 1/tau is largest at index 0 */
    for (size_t l = 0; l < n; l++) {
        if (l) {
            double lam = 1.0 / sorted[last];
            size_t best = n;
            for (size_t j = 0; j < n; j++) {
                if (used[j])
                    continue;
                acc[j] += log(fabs(1.0 / sorted[j] - lam));
                if (best == n || acc[j] > acc[best])
                    best = j;
            }
            last = best;
        }
        used[last] = 1;
        tau[l] = sorted[last];
    }
    free(acc);
    free(used);
    return 1;
}

size_t hyprof_fed_steps(double t, double *tau)
{
    if (!(t > 0.0))
        return 0;
    size_t n = (size_t)ceil(-0.5 + 0.5 * sqrt(1.0 + 12.0 * t / TAU_MAX));
    if (!tau)
        return n;
    /* Eq. 7 sums to tau_max (n^2 + n) / 3; scaled so the cycle lasts exactly t. */
    double scale = t / (TAU_MAX * (double)(n * n + n) / 3.0);
    double *sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return 0;
    for (size_t j = 0; j < n; j++) {
        double c = cos(M_PI * (double)(2 * j + 1) / (double)(4 * n + 2));
        sorted[j] = scale * TAU_MAX / (2.0 * c * c);
    }
    int ok = leja_order(sorted, n, tau);
    free(sorted);
    return ok ? n : 0;
}

/* ---- CPU backend ------------------------------------------------------------ */

static size_t reflect(long i, size_t n)
{
    while (i < 0 || i >= (long)n)
        i = i < 0 ? -i - 1 : 2 * (long)n - i - 1;
    return (size_t)i;
}

/* One separable pass of the normalised Gaussian along x (dx = 1) or y. A
 * wide kernel (sigma up to 1000: 6001 weights) on a large image takes
 * seconds: rows left once the context is cancelled are skipped (the caller
 * then reports the cancellation). */
static void gauss_pass(hyprof_ctx_t *ctx, const double *num, const double *den, double *onum,
                       double *oden, size_t w, size_t h, const double *k, long r, int along_x,
                       int threads)
{
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t y = 0; y < h; y++) {
        if (hyprof_ctx_cancelled(ctx))
            continue;
        for (size_t x = 0; x < w; x++) {
            double sn = 0.0, sd = 0.0;
            for (long j = -r; j <= r; j++) {
                size_t q = along_x ? y * w + reflect((long)x + j, w)
                                   : reflect((long)y + j, h) * w + x;
                sn += k[j + r] * num[q];
                sd += k[j + r] * den[q];
            }
            onum[y * w + x] = sn;
            oden[y * w + x] = sd;
        }
    }
}

/* Smoothed band s (step 1) and squared gradient G (step 2). */
static void smooth_and_gradient(hyprof_ctx_t *ctx, const hyprof_eadp_args_t *a, const double *u,
                                double *s, double *G, double *t1, double *t2, double *t3,
                                int threads)
{
    size_t w = a->width, h = a->height, n = w * h;
    long r = (long)ceil(3.0 * a->sigma);
    double k[2 * r + 1];
    for (long j = -r; j <= r; j++)
        k[j + r] = exp(-(double)(j * j) / (2.0 * a->sigma * a->sigma));
    for (size_t p = 0; p < n; p++) {
        int m = !a->mask || a->mask[p];
        t1[p] = m ? u[p] : 0.0; /* not m * u: a NaN under the mask would spread */
        t2[p] = m ? 1.0 : 0.0;
    }
    gauss_pass(ctx, t1, t2, t3, s, w, h, k, r, 1, threads);  /* t3: num, s: den */
    gauss_pass(ctx, t3, s, t1, t2, w, h, k, r, 0, threads);  /* t1: num, t2: den */
    for (size_t p = 0; p < n; p++)
        s[p] = t2[p] > 0.0 ? t1[p] / t2[p] : 0.0;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t y = 0; y < h; y++) {
        size_t ym = reflect((long)y - 1, h), yp = reflect((long)y + 1, h);
        for (size_t x = 0; x < w; x++) {
            size_t xm = reflect((long)x - 1, w), xp = reflect((long)x + 1, w);
            double gx = (3.0 * (s[ym * w + xp] - s[ym * w + xm]) +
                         10.0 * (s[y * w + xp] - s[y * w + xm]) +
                         3.0 * (s[yp * w + xp] - s[yp * w + xm])) / 32.0;
            double gy = (3.0 * (s[yp * w + xm] - s[ym * w + xm]) +
                         10.0 * (s[yp * w + x] - s[ym * w + x]) +
                         3.0 * (s[yp * w + xp] - s[ym * w + xp])) / 32.0;
            G[y * w + x] = gx * gx + gy * gy;
        }
    }
}

/* k-th smallest of v[0..n) (quickselect; v is reordered). */
static double select_kth(double *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return v[k];
    }
    return v[k];
}

/* NumPy's linear percentile of v[0..n) (n >= 1; v is reordered). */
static double percentile(double *v, size_t n, double q)
{
    double pos = q * (double)(n - 1);
    size_t i = (size_t)floor(pos);
    double lo = select_kth(v, n, i);
    if (i + 1 >= n || pos == (double)i)
        return lo;
    double hi = v[i + 1];
    for (size_t j = i + 2; j < n; j++) /* after selection, v[i+1..] are >= lo */
        hi = v[j] < hi ? v[j] : hi;
    return lo + (pos - (double)i) * (hi - lo);
}

/* Step 3: the contrast k, with the fallbacks of eadp_impl.h. */
static double contrast_of(const hyprof_eadp_args_t *a, const double *G, double *scratch)
{
    if (a->contrast > 0.0)
        return a->contrast;
    size_t n = a->width * a->height, nv = 0, nz = 0;
    for (size_t p = 0; p < n; p++)
        if (!a->mask || a->mask[p])
            scratch[nv++] = sqrt(G[p]);
    double k = nv ? percentile(scratch, nv, a->percentile) : 0.0;
    if (k > 0.0 && isfinite(k))
        return k;
    for (size_t p = 0; p < n; p++)
        if ((!a->mask || a->mask[p]) && G[p] > 0.0)
            scratch[nz++] = sqrt(G[p]);
    k = nz ? percentile(scratch, nz, a->percentile) : 1.0;
    return k > 0.0 && isfinite(k) ? k : 1.0;
}

static double diffusivity(hyprof_diffusivity_t d, double r)
{
    switch (d) {
    case HYPROF_DIFFUSIVITY_G1: return exp(-r);
    case HYPROF_DIFFUSIVITY_G3: return r > 0.0 ? 1.0 - exp(-3.315 / (r * r * r * r)) : 1.0;
    default: return 1.0 / (1.0 + r);
    }
}

/* Step 4: edge conductances, east (x, x+1) and south (y, y+1); 0 across the
 * image border and to or from masked pixels (zero flux). */
static void conductances(const hyprof_eadp_args_t *a, const double *G, double k, double *ce,
                         double *cs, double *g)
{
    size_t w = a->width, h = a->height, n = w * h;
    for (size_t p = 0; p < n; p++)
        g[p] = diffusivity(a->diffusivity, G[p] / (k * k));
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++) {
            size_t p = y * w + x;
            int mp = !a->mask || a->mask[p];
            ce[p] = (x + 1 < w && mp && (!a->mask || a->mask[p + 1])) ? 0.5 * (g[p] + g[p + 1]) : 0.0;
            cs[p] = (y + 1 < h && mp && (!a->mask || a->mask[p + w])) ? 0.5 * (g[p] + g[p + w]) : 0.0;
        }
}

/* Step 5: one Jacobi FED step u -> v. */
static void fed_step(const double *u, double *v, const double *ce, const double *cs, size_t w,
                     size_t h, double tau, int threads)
{
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++) {
            size_t p = y * w + x;
            double up = u[p], flux = 0.0;
            if (x + 1 < w)
                flux += ce[p] * (u[p + 1] - up);
            if (x > 0)
                flux += ce[p - 1] * (u[p - 1] - up);
            if (y + 1 < h)
                flux += cs[p] * (u[p + w] - up);
            if (y > 0)
                flux += cs[p - w] * (u[p - w] - up);
            v[p] = up + tau * flux;
        }
}

static void write_band(const hyprof_eadp_args_t *a, const double *u, size_t band)
{
    size_t n = a->width * a->height;
    float *o = a->out + band * n;
    for (size_t p = 0; p < n; p++)
        o[p] = (!a->mask || a->mask[p]) ? (float)u[p] : a->nodata;
}

/* The profile of band b; buffers: 8 arrays of width*height doubles. */
static hyprof_status_t profile_band(hyprof_ctx_t *ctx, const hyprof_eadp_args_t *a, size_t b,
                                    double *buf, int threads)
{
    size_t n = a->width * a->height, C = a->ntimes;
    double *u = buf, *v = buf + n, *s = buf + 2 * n, *G = buf + 3 * n, *ce = buf + 4 * n,
           *cs = buf + 5 * n, *t1 = buf + 6 * n, *t2 = buf + 7 * n;
    const float *x = a->x + b * n;
    for (size_t p = 0; p < n; p++)
        u[p] = (!a->mask || a->mask[p]) ? x[p] : 0.0;
    smooth_and_gradient(ctx, a, u, s, G, t1, t2, v, threads);
    hyprof_status_t cst = hyprof__progress(ctx, (double)b / (double)a->bands, OP);
    if (cst != HYPROF_OK)
        return cst;
    double k = contrast_of(a, G, t1);
    if (a->contrast_out)
        a->contrast_out[b] = k;
    conductances(a, G, k, ce, cs, t1);
    write_band(a, u, b * (C + 1));
    hyprof__band_done(ctx, b * (C + 1), a->out + b * (C + 1) * n);
    size_t work = 0;
    for (size_t i = 0; i < C; i++) {
        double done = ((double)b + (double)i / (double)C) / (double)a->bands;
        for (int c = 0; c < a->cycles; c++)
            for (size_t j = 0; j < a->nsteps[i]; j++) {
                fed_step(u, v, ce, cs, a->width, a->height, a->tau[i][j], threads);
                double *t = u;
                u = v;
                v = t;
                if ((work += n) >= FED_POLL_WORK) { /* a long increment stays cancellable */
                    work = 0;
                    hyprof_status_t st = hyprof__progress(ctx, done, OP);
                    if (st != HYPROF_OK)
                        return st;
                }
            }
        write_band(a, u, b * (C + 1) + i + 1);
        hyprof__band_done(ctx, b * (C + 1) + i + 1, a->out + (b * (C + 1) + i + 1) * n);
        hyprof_status_t st = hyprof__progress(
            ctx, ((double)b + (double)(i + 1) / (double)C) / (double)a->bands, OP);
        if (st != HYPROF_OK)
            return st;
    }
    return HYPROF_OK;
}

hyprof_status_t hyprof__cpu_eadp(hyprof_ctx_t *ctx, void *args)
{
    hyprof_eadp_args_t *a = args;
    size_t n = a->width * a->height;
    double *buf = malloc(8 * n * sizeof *buf);
    if (!buf)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP,
                             "cannot allocate the diffusion buffers (%zux%zu)", a->width,
                             a->height);
    hyprof_status_t st = HYPROF_OK;
    /* Every pixel's value is computed alone, so the thread count leaves the
     * result unchanged; a small image is not worth a parallel region a step. */
    int threads = n >= 16384 ? hyprof__threads(ctx) : 1;
    for (size_t b = 0; b < a->bands && st == HYPROF_OK; b++)
        st = profile_band(ctx, a, b, buf, threads);
    free(buf);
    return st;
}

/* ---- the public API ------------------------------------------------------- */

/* The fewest cycles (up to 1000, the registry's bound, then 0) that split an
 * increment dt into cycles of at most FED_MAX_STEPS steps. */
static int cycles_needed(double dt)
{
    for (int c = 1; c <= 1000; c++)
        if (hyprof_fed_steps(dt / c, NULL) <= FED_MAX_STEPS)
            return c;
    return 0;
}

/* Every increment's cycle within FED_MAX_STEPS steps; `name` is the
 * parameter the times came from, for the message. */
static hyprof_status_t check_cycle_lengths(hyprof_ctx_t *ctx, const hyprof_eadp_params_t *p,
                                           const char *name)
{
    for (size_t i = 0; i < p->ntimes; i++) {
        double dt = p->times[i] - (i ? p->times[i - 1] : 0.0);
        size_t n = hyprof_fed_steps(dt / p->cycles, NULL);
        if (n <= FED_MAX_STEPS)
            continue;
        int need = cycles_needed(dt);
        char hint[96];
        if (need)
            snprintf(hint, sizeof hint, "--cycles %d or more", need);
        else
            snprintf(hint, sizeof hint, "smaller increments: even 1000 cycles are too few");
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "--%s %g: the time increment %g in %d cycle(s) needs %zu FED steps "
                             "a cycle, more than %d; use %s", name,
                             strcmp(name, "times") == 0 ? p->times[i] : dt, dt, p->cycles, n,
                             FED_MAX_STEPS, hint);
    }
    return HYPROF_OK;
}

static hyprof_status_t check_params(hyprof_ctx_t *ctx, const hyprof_eadp_params_t *p)
{
    /* The bound keeps the Gaussian kernel (2 ceil(3 sigma) + 1 weights, on the
     * stack) small; wider smoothing is meaningless before a gradient anyway. */
    if (!(p->sigma > 0.0 && p->sigma <= 1000.0))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "sigma %g must be in (0, 1000]",
                             p->sigma);
    if (p->contrast <= 0.0 && !(p->percentile > 0.0 && p->percentile < 1.0))
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                             "contrast percentile %g must be inside (0, 1)", p->percentile);
    if (!isfinite(p->contrast) || p->contrast < 0.0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "contrast %g must be > 0",
                             p->contrast);
    if (p->diffusivity < HYPROF_DIFFUSIVITY_G1 || p->diffusivity > HYPROF_DIFFUSIVITY_G3)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "unknown diffusivity %d",
                             (int)p->diffusivity);
    if (p->cycles < 1)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "cycles %d must be >= 1", p->cycles);
    if (p->precision != HYPROF_EADP_FLOAT && p->precision != HYPROF_EADP_DOUBLE)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "unknown precision %d",
                             (int)p->precision);
    if (!p->times || p->ntimes == 0)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no diffusion times given");
    for (size_t i = 0; i < p->ntimes; i++) {
        double prev = i ? p->times[i - 1] : 0.0;
        if (!isfinite(p->times[i]) || !(p->times[i] > prev))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                 "times must be positive and increasing: T%zu = %g after %g",
                                 i + 1, p->times[i], prev);
    }
    return check_cycle_lengths(ctx, p, "times");
}

/* The FED schedule of every increment, one allocation. */
static hyprof_status_t make_schedule(hyprof_ctx_t *ctx, const hyprof_eadp_params_t *p,
                                     size_t **nsteps, double ***tau)
{
    size_t total = 0;
    *nsteps = calloc(p->ntimes, sizeof **nsteps);
    *tau = calloc(p->ntimes, sizeof **tau);
    for (size_t i = 0; *nsteps && i < p->ntimes; i++) {
        double dt = (p->times[i] - (i ? p->times[i - 1] : 0.0)) / p->cycles;
        total += (*nsteps)[i] = hyprof_fed_steps(dt, NULL);
    }
    double *all = *nsteps && *tau ? malloc((total ? total : 1) * sizeof *all) : NULL;
    if (!all) {
        free(*nsteps);
        free(*tau);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate the FED schedule");
    }
    hyprof_status_t st = HYPROF_OK;
    double last = NAN;
    for (size_t i = 0; i < p->ntimes; i++) {
        (*tau)[i] = all;
        double dt = (p->times[i] - (i ? p->times[i - 1] : 0.0)) / p->cycles;
        size_t n = (*nsteps)[i];
        if (dt == last) /* the same increment (--step): the same schedule */
            memcpy(all, (*tau)[i - 1], n * sizeof *all);
        else
            n = hyprof_fed_steps(dt, all);
        last = dt;
        if (n == (*nsteps)[i])
            st = hyprof__progress(ctx, 0.0, OP);
        if (n != (*nsteps)[i] || st != HYPROF_OK) {
            free((*tau)[0]);
            free(*tau);
            free(*nsteps);
            *tau = NULL;
            *nsteps = NULL;
            return st != HYPROF_OK ? st
                                   : hyprof__error(ctx, HYPROF_ERR_NOMEM, OP,
                                                   "cannot allocate the FED schedule");
        }
        all += n;
    }
    return HYPROF_OK;
}

static void free_schedule(size_t *nsteps, double **tau)
{
    if (tau)
        free(tau[0]);
    free(tau);
    free(nsteps);
}

/* The schedule and the output cube (nodata as `x`'s) of the profile of x's
 * bands; nothing to free on failure. */
static hyprof_status_t setup(hyprof_ctx_t *ctx, const hyprof_eadp_params_t *params,
                             const hyprof_cube_t *x, size_t **nsteps, double ***tau,
                             hyprof_cube_t *out)
{
    size_t nb = x->bands * (params->ntimes + 1);
    hyprof_status_t st = make_schedule(ctx, params, nsteps, tau);
    if (st != HYPROF_OK)
        return st;
    if ((st = hyprof__cube_alloc_out(ctx, out, HYPROF_FLOAT32, x->width, x->height, nb)) !=
        HYPROF_OK) {
        free_schedule(*nsteps, *tau);
        return hyprof__error(ctx, st, OP, "cannot allocate the %zu-band output", nb);
    }
    out->has_nodata = x->has_nodata;
    out->nodata = x->nodata;
    return HYPROF_OK;
}

static hyprof_eadp_args_t make_args(const hyprof_cube_t *x, const uint8_t *mask, float nodata,
                                    const hyprof_eadp_params_t *params, const size_t *nsteps,
                                    double **tau, hyprof_cube_t *out, double *contrast_out)
{
    hyprof_eadp_args_t a = {x->data, mask, x->width, x->height, x->bands, params->sigma,
                            params->percentile, params->contrast, params->diffusivity,
                            params->ntimes, params->cycles, nsteps,
                            (const double *const *)tau, nodata, out->data, contrast_out,
                            params->precision};
    return a;
}

hyprof_status_t hyprof_eadp(hyprof_ctx_t *ctx, const hyprof_cube_t *in,
                            const hyprof_eadp_params_t *params, hyprof_cube_t *out,
                            double *contrast_out)
{
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    memset(out, 0, sizeof *out);
    hyprof_status_t st = check_params(ctx, params);
    if (st != HYPROF_OK)
        return st;
    if ((st = hyprof__input_f32(ctx, OP, in, &tmp, &x)) != HYPROF_OK)
        return st;
    size_t *nsteps = NULL;
    double **tau = NULL;
    if ((st = setup(ctx, params, x, &nsteps, &tau, out)) == HYPROF_OK) {
        hyprof_eadp_args_t a = make_args(x, x->mask, hyprof__nodata_f32(x), params, nsteps, tau,
                                         out, contrast_out);
        st = hyprof__dispatch(ctx, OP, hyprof__cpu_eadp, HYPROF_CUDA_IMPL(hyprof__cuda_eadp),
                              &a);
        free_schedule(nsteps, tau);
    }
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK)
        hyprof_cube_free(out);
    return st;
}

/* ---- the `eadp` operation --------------------------------------------------- */

#include "../core/ops.h"

/* Times from --times, or step * i for i = 1..count. */
static double *op_times(const hyprof_args_t *args, size_t *n)
{
    const double *given = hyprof_args_list(args, "times", n);
    if (!given)
        *n = (size_t)hyprof_args_int(args, "count");
    double *t = malloc(*n * sizeof *t);
    for (size_t i = 0; t && i < *n; i++)
        t[i] = given ? given[i] : hyprof_args_float(args, "step") * (double)(i + 1);
    return t;
}

static hyprof_status_t op_params(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 hyprof_eadp_params_t *p)
{
    hyprof_eadp_params_default(p);
    p->sigma = hyprof_args_float(args, "sigma");
    p->percentile = hyprof_args_float(args, "contrast-percentile");
    if (hyprof_args_is_set(args, "contrast"))
        p->contrast = hyprof_args_float(args, "contrast");
    p->cycles = (int)hyprof_args_int(args, "cycles");
    p->diffusivity = (hyprof_diffusivity_t)(hyprof_args_str(args, "diffusivity")[1] - '0');
    p->precision = strcmp(hyprof_args_str(args, "precision"), "double") == 0 ? HYPROF_EADP_DOUBLE
                                                                             : HYPROF_EADP_FLOAT;
    p->times = op_times(args, &p->ntimes);
    if (!p->times)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    /* Checked here, before the reduction, and named as given. */
    hyprof_status_t st = check_cycle_lengths(ctx, p, hyprof_args_given(args, "times") ? "times"
                                                                                       : "step");
    if (st != HYPROF_OK) {
        free((double *)p->times);
        p->times = NULL;
    }
    return st;
}

/* The contrast of each feature (the band names: hyprof__names_eadp). */
static hyprof_status_t describe_profile(hyprof_result_t *out, char **names, size_t nfeat,
                                        const double *k)
{
    hyprof_status_t st = HYPROF_OK;
    for (size_t f = 0; st == HYPROF_OK && f < nfeat; f++) {
        char key[48];
        snprintf(key, sizeof key, "EADP_CONTRAST_%s", names[f]);
        if (st == HYPROF_OK)
            st = hyprof_result_add_meta(out, key, "%.17g", k[f]);
    }
    return st;
}

/* --reduction pca on CUDA: the PCA's projection hands its components over
 * on the device and the diffusion starts from them there (no download of the
 * PCs and upload again). Everything else is as hyprof_eadp on the features
 * reduce.c returns (same mask, nodata and arguments), so the result is the
 * same bit for bit. */
typedef struct {
    hyprof_ctx_t *ctx;
    const hyprof_cube_t *in;
    const hyprof_eadp_params_t *p;
    hyprof_cube_t *out;
    double *k;     /* the contrasts, allocated here */
    double lo, hi; /* the diffusion's share of the operation's progress */
    int done;
} on_device_t;

#ifdef HYPROF_HAVE_CUDA
static hyprof_status_t diffuse_on_device(void *user, const float *d_pcs,
                                         const hyprof_pca_apply_args_t *ap, int *consumed)
{
    on_device_t *d = user;
    hyprof_ctx_t *ctx = d->ctx;
    hyprof_status_t st = check_params(ctx, d->p);
    if (st != HYPROF_OK)
        return st;
    /* The features' shape and nodata (hyprof__cube_copy_mask of the input). */
    hyprof_cube_t like;
    memset(&like, 0, sizeof like);
    like.width = d->in->width;
    like.height = d->in->height;
    like.bands = ap->components;
    like.has_nodata = d->in->has_nodata;
    like.nodata = d->in->nodata;
    if (!like.has_nodata && ap->mask && hyprof_cube_count_valid(d->in) < ap->npix) {
        like.has_nodata = 1;
        like.nodata = NAN;
    }
    if (!(d->k = calloc(ap->components, sizeof *d->k)))
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    size_t *nsteps = NULL;
    double **tau = NULL;
    if ((st = setup(ctx, d->p, &like, &nsteps, &tau, d->out)) != HYPROF_OK)
        return st;
    hyprof_eadp_args_t a = make_args(&like, ap->mask, ap->nodata, d->p, nsteps, tau, d->out,
                                     d->k);
    a.x = NULL; /* on the device */
    double lo = ctx->progress_lo, hi = ctx->progress_hi;
    ctx->progress_lo = d->lo;
    ctx->progress_hi = d->hi;
    hyprof__log(ctx, HYPROF_LOG_DEBUG, "eadp: diffusing the %zu PCs where the PCA left them, "
                "on the device", ap->components);
    st = hyprof__cuda_eadp_from_device(ctx, &a, d_pcs);
    ctx->progress_lo = lo;
    ctx->progress_hi = hi;
    free_schedule(nsteps, tau);
    if (st != HYPROF_OK) {
        hyprof_cube_free(d->out);
        return st;
    }
    d->done = *consumed = 1;
    return HYPROF_OK;
}
#endif

/* The features (--reduction), and the profile when the PCA's CUDA backend
 * already computed it from its device output (d->done). */
static hyprof_status_t reduce(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                              const hyprof_cube_t *in, hyprof_cube_t *feat, char ***names,
                              on_device_t *d)
{
    double saved[2];
    hyprof__progress_push(ctx, 0.0, 0.15, saved);
    d->lo = saved[0] + 0.15 * (saved[1] - saved[0]);
    d->hi = saved[1];
    hyprof_pca_device_fn fn = NULL;
#ifdef HYPROF_HAVE_CUDA
    fn = diffuse_on_device;
#endif
    hyprof_status_t st = hyprof__reduce_device(ctx, OP, args, in, feat, names, fn, d);
    hyprof__progress_pop(ctx, saved);
    if (st != HYPROF_OK && d->done) {
        hyprof_cube_free(d->out);
        d->done = 0;
    }
    return st;
}

hyprof_status_t hyprof__run_eadp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                 const hyprof_cube_t *in, hyprof_result_t *out)
{
    hyprof_eadp_params_t p;
    hyprof_status_t st = op_params(ctx, args, &p);
    if (st != HYPROF_OK)
        return st;
    hyprof_cube_t feat;
    char **names = NULL;
    double saved[2], *k = NULL;
    on_device_t d = {ctx, in, &p, &out->cube, NULL, 0.0, 1.0, 0};
    st = reduce(ctx, args, in, &feat, &names, &d);
    k = d.k;
    if (st == HYPROF_OK && !d.done) {
        free(k);
        if (!(k = calloc(feat.bands, sizeof *k)))
            st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
    }
    if (st == HYPROF_OK && !d.done) {
        hyprof__progress_push(ctx, 0.15, 1.0, saved);
        st = hyprof_eadp(ctx, &feat, &p, &out->cube, k);
        hyprof__progress_pop(ctx, saved);
    }
    if (st == HYPROF_OK)
        st = hyprof__result_adopt(out, in);
    if (st == HYPROF_OK)
        st = describe_profile(out, names, feat.bands, k);
    hyprof__free_names(names, feat.bands);
    hyprof_cube_free(&feat);
    free(k);
    free((double *)p.times);
    return st;
}

hyprof_status_t hyprof__bands_eadp(hyprof_ctx_t *ctx, const hyprof_args_t *args,
                                   size_t in_bands, size_t *out_bands)
{
    size_t nfeat = 0, ntimes = 0;
    hyprof_eadp_params_t p;
    hyprof_status_t st = op_params(ctx, args, &p); /* the FED bound, before any work */
    if (st != HYPROF_OK)
        return st;
    free((double *)p.times);
    if ((st = hyprof__reduce_bands(ctx, OP, args, in_bands, &nfeat)) != HYPROF_OK)
        return st;
    if (!hyprof_args_list(args, "times", &ntimes))
        ntimes = (size_t)hyprof_args_int(args, "count");
    *out_bands = nfeat * (ntimes + 1);
    return HYPROF_OK;
}

/* Each feature (PC1, A1 or B1...), then the feature at each time: "PC1 T=65". */
HYPROF__NAMES_FN(eadp)
{
    (void)width, (void)height, (void)in_bands;
    hyprof_eadp_params_t p;
    hyprof_status_t st = op_params(ctx, args, &p);
    if (st != HYPROF_OK)
        return st;
    const char *prefix = hyprof__reduce_prefix(args);
    size_t per = p.ntimes + 1;
    for (size_t b = 0; st == HYPROF_OK && b < out_bands; b++) {
        size_t f = b / per, i = b % per;
        st = i ? hyprof__name(names, b, "%s%zu T=%g", prefix, f + 1, p.times[i - 1])
               : hyprof__name(names, b, "%s%zu", prefix, f + 1);
    }
    free((double *)p.times);
    return st;
}
