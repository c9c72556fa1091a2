/* Per-pixel abundances (FCLS, NNLS, UCLS) of a saved or extracted endmember
 * set: the public hyprof_abundances, its dispatch and the CPU backend. The
 * solver itself is lsq.h, shared with the CUDA kernel. */
#include "unmixing_impl.h"
#include "lsq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(HYPROF_MAX_ENDMEMBERS <= HYPROF__LSQ_MAXP, "lsq.h's passive-set mask is too short");

#define OP "abundances"

double hyprof__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void hyprof__unmix_copy(void *dst, const void *src, size_t bytes, int threads)
{
    const size_t piece = (size_t)1 << 18; /* 256 KiB per task: an 8 MiB chunk keeps 32 threads busy */
    size_t n = (bytes + piece - 1) / piece;
    if (n < 2 || threads < 2) {
        memcpy(dst, src, bytes);
        return;
    }
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) {
        size_t off = i * piece, len = bytes - off < piece ? bytes - off : piece;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

#ifndef HYPROF_HAVE_CUDA
void hyprof__unmix_hold(const float *x, const uint8_t *mask, size_t npix, size_t bands)
{
    (void)x, (void)mask, (void)npix, (void)bands;
}

void hyprof__unmix_release(void) {}

int hyprof__unmix_pca(hyprof_ctx_t *ctx, const float *x, const uint8_t *mask, size_t npix,
                      size_t bands, size_t nvalid, size_t p, double *mean, double *vectors,
                      double *total, hyprof_status_t *st)
{
    (void)ctx, (void)x, (void)mask, (void)npix, (void)bands, (void)nvalid, (void)p;
    (void)mean, (void)vectors, (void)total, (void)st;
    return 0;
}

int hyprof__unmix_gather(const float *x, size_t npix, size_t bands, const size_t *idx, size_t n,
                         float *D)
{
    (void)x, (void)npix, (void)bands, (void)idx, (void)n, (void)D;
    return 0;
}

int hyprof__unmix_device_seconds(char *buf, size_t size)
{
    if (size)
        buf[0] = '\0';
    return 0;
}
#endif

hyprof_status_t hyprof_abundance_method_parse(const char *text, hyprof_abundance_method_t *m)
{
    static const char *names[] = {"fcls", "nnls", "ucls"};
    for (int i = 0; text && i < 3; i++)
        if (strcmp(text, names[i]) == 0) {
            *m = (hyprof_abundance_method_t)i;
            return HYPROF_OK;
        }
    return HYPROF_ERR_ARGUMENT;
}

/* One pixel: gathers y, solves, writes the abundances and the RMSE. */
static void unmix_pixel(const hyprof_abund_args_t *a, size_t px, double *y, double *bvec,
                        double *abund, double *work, int *idx)
{
    size_t B = a->bands, p = a->count;
    for (size_t b = 0; b < B; b++)
        y[b] = (double)a->x[b * a->npix + px];
    for (size_t j = 0; j < p; j++) {
        const double *m = a->M + j * B;
        double s = 0.0;
        for (size_t b = 0; b < B; b++)
            s += m[b] * y[b];
        bvec[j] = s;
    }
    hyprof__lsq_solve((int)p, a->G, bvec, a->method, abund, work, idx);
    double r = 0.0;
    for (size_t b = 0; b < B; b++) {
        double s = 0.0;
        for (size_t j = 0; j < p; j++)
            s += a->M[j * B + b] * abund[j];
        r += (y[b] - s) * (y[b] - s);
    }
    for (size_t j = 0; j < p; j++)
        a->out[j * a->npix + px] = (float)abund[j];
    a->out[p * a->npix + px] = (float)sqrt(r / (double)B);
}

hyprof_status_t hyprof__cpu_abundances(hyprof_ctx_t *ctx, void *args)
{
    hyprof_abund_args_t *a = args;
    size_t p = a->count, B = a->bands, done = 0;
    int stop = 0, nomem = 0;
    #pragma omp parallel num_threads(hyprof__threads(ctx))
    {
        double *buf = malloc((B + 3 * p + p * p + 2 * p) * sizeof *buf);
        int *idx = malloc(p * sizeof *idx);
        if (!buf || !idx) {
            #pragma omp atomic write
            nomem = 1;
        }
        #pragma omp for schedule(dynamic, 256)
        for (size_t px = 0; px < a->npix; px++) {
            int halt;
            #pragma omp atomic read
            halt = stop;
            if (halt || !buf || !idx)
                continue;
            if (a->mask && !a->mask[px]) {
                for (size_t j = 0; j <= p; j++)
                    a->out[j * a->npix + px] = a->nodata;
                continue;
            }
            unmix_pixel(a, px, buf, buf + B, buf + B + p, buf + B + 2 * p, idx);
            size_t now;
            #pragma omp atomic capture
            now = ++done;
            if (now % 8192 == 0 &&
                hyprof__progress_omp(ctx, (double)now / (double)a->npix, OP)) {
                #pragma omp atomic write
                stop = 1;
            }
        }
        free(buf);
        free(idx);
    }
    if (nomem)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "cannot allocate per-thread buffers");
    if (stop)
        return hyprof__error(ctx, HYPROF_ERR_CANCELLED, OP, "cancelled");
    return HYPROF_OK;
}

static hyprof_status_t check_set(hyprof_ctx_t *ctx, const hyprof_endmembers_t *em,
                                 const hyprof_cube_t *x)
{
    if (!em || !em->spectra || em->count < 1)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "no endmember set");
    if (em->count > HYPROF_MAX_ENDMEMBERS)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "%zu endmembers: at most %d",
                             em->count, HYPROF_MAX_ENDMEMBERS);
    if (x->bands != em->bands)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, OP,
                             "the endmember set has %zu bands but the input has %zu",
                             em->bands, x->bands);
    for (size_t i = 0; i < em->count * em->bands; i++)
        if (!isfinite(em->spectra[i]))
            return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP,
                                 "endmember %zu has a non-finite value in band %zu",
                                 i / em->bands + 1, i % em->bands + 1);
    return HYPROF_OK;
}

void hyprof__endmember_gram(const hyprof_endmembers_t *em, size_t bands, double *G)
{
    size_t p = em->count;
    for (size_t i = 0; i < p; i++)
        for (size_t j = 0; j < p; j++) {
            double s = 0.0;
            for (size_t b = 0; b < bands; b++)
                s += em->spectra[i * bands + b] * em->spectra[j * bands + b];
            G[i * p + j] = s;
        }
}

hyprof_status_t hyprof_abundances(hyprof_ctx_t *ctx, const hyprof_endmembers_t *em,
                                  const hyprof_cube_t *in, hyprof_abundance_method_t method,
                                  hyprof_cube_t *out)
{
    hyprof_cube_t tmp;
    const hyprof_cube_t *x;
    memset(out, 0, sizeof *out);
    if (method > HYPROF_ABUNDANCE_UCLS)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "unknown method %d", (int)method);
    hyprof_status_t st = hyprof__input_f32(ctx, OP, in, &tmp, &x);
    if (st != HYPROF_OK)
        return st;
    size_t p = em ? em->count : 0, B = x->bands, npix = x->width * x->height;
    double *G = NULL;
    if ((st = check_set(ctx, em, x)) != HYPROF_OK)
        goto done;
    if (!(G = malloc(p * p * sizeof *G))) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
        goto done;
    }
    hyprof__endmember_gram(em, B, G);
    if ((st = hyprof_cube_alloc(out, HYPROF_FLOAT32, x->width, x->height, p + 1)) != HYPROF_OK) {
        st = hyprof__error(ctx, st, OP, "cannot allocate the %zu-band output", p + 1);
        goto done;
    }
    hyprof_abund_args_t a = {x->data, x->mask, npix, B, p, em->spectra, G, (int)method,
                             hyprof__nodata_f32(x), out->data};
    st = hyprof__dispatch(ctx, OP, hyprof__cpu_abundances,
                          HYPROF_CUDA_IMPL(hyprof__cuda_abundances), &a);
    if (st == HYPROF_OK && hyprof__cube_copy_mask(out, x) != HYPROF_OK)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory");
done:
    free(G);
    hyprof_cube_free(&tmp);
    if (st != HYPROF_OK)
        hyprof_cube_free(out);
    return st;
}
