/* HySime (Bioucas-Dias and Nascimento, 2008): the number of endmembers as the
 * dimension of the signal subspace that minimises the mean squared error
 * between the projected data and the signal, with the noise estimated by
 * regressing every band on all the others.
 *
 * With R = Y Y' over the N valid pixels (uncentred, as hysime.m), the
 * regression residuals are W = diag(R^-1)^-1 R^-1 Y, so everything needed
 * is B x B: noise correlation Rn = diag(1 / (N (R^-1)_ii)), signal
 * correlation Rx = (R - 2 D^-1 + D^-1 R^-1 D^-1) / N with D = diag(R^-1).
 * For the eigenvectors e_i of Rx, the cost of keeping direction i is
 * -e_i' (R/N) e_i + 2 e_i' Rn e_i; p is the number of negative costs. */
#include "unmixing_impl.h"

#include <cblas.h>
#include <lapacke.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 16384

/* R = Y Y', a chunk of pixels at a time; cancellable between chunks. */
static hyprof_status_t correlation(hyprof_ctx_t *ctx, const float *x, const uint8_t *mask,
                                   size_t npix, size_t B, double *R, double *buf)
{
    for (size_t p0 = 0; p0 < npix; p0 += CHUNK) {
        hyprof_status_t st = hyprof__progress(ctx, 0.0, "HySime");
        if (st != HYPROF_OK)
            return st;
        size_t n = npix - p0 < CHUNK ? npix - p0 : CHUNK;
        for (size_t b = 0; b < B; b++)
            for (size_t i = 0; i < n; i++)
                buf[b * n + i] = (!mask || mask[p0 + i]) ? (double)x[b * npix + p0 + i] : 0.0;
        cblas_dsyrk(CblasColMajor, CblasUpper, CblasTrans, (int)B, (int)n, 1.0, buf, (int)n,
                    1.0, R, (int)B);
    }
    for (size_t j = 0; j < B; j++)
        for (size_t i = j + 1; i < B; i++)
            R[i + j * B] = R[j + i * B];
    return HYPROF_OK;
}

hyprof_status_t hyprof__hysime(hyprof_ctx_t *ctx, const char *op, const float *x,
                               const uint8_t *mask, size_t npix, size_t bands, size_t pmax,
                               size_t *p)
{
    size_t B = bands, N = 0, chunk = npix < CHUNK ? npix : CHUNK;
    for (size_t i = 0; i < npix; i++)
        N += !mask || mask[i];
    double *R = calloc(B * B, sizeof *R), *Ri = malloc(B * B * sizeof *Ri),
           *Rx = malloc(B * B * sizeof *Rx), *ev = malloc(B * sizeof *ev),
           *buf = malloc(chunk * B * sizeof *buf);
    hyprof_status_t st = HYPROF_OK;
    if (!R || !Ri || !Rx || !ev || !buf) {
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
        goto done;
    }
    if ((st = correlation(ctx, x, mask, npix, B, R, buf)) != HYPROF_OK)
        goto done;
    double tr = 0.0;
    for (size_t i = 0; i < B; i++)
        tr += R[i * B + i];
    memcpy(Ri, R, B * B * sizeof *Ri);
    for (size_t i = 0; i < B; i++) /* a whisker of ridge: duplicated bands stay invertible */
        Ri[i * B + i] += 1e-10 * tr / (double)B;
    if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)B, Ri, (lapack_int)B) ||
        LAPACKE_dpotri(LAPACK_COL_MAJOR, 'U', (lapack_int)B, Ri, (lapack_int)B)) {
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                           "HySime: the band correlation matrix is singular (constant input?)");
        goto done;
    }
    for (size_t j = 0; j < B; j++)
        for (size_t i = j + 1; i < B; i++)
            Ri[i + j * B] = Ri[j + i * B];
    for (size_t j = 0; j < B; j++)
        for (size_t i = 0; i < B; i++) {
            double di = 1.0 / Ri[i * B + i], dj = 1.0 / Ri[j * B + j];
            Rx[i + j * B] = (R[i + j * B] - (i == j ? 2.0 * di : 0.0) + di * Ri[i + j * B] * dj) /
                            (double)N;
        }
    if (LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'U', (lapack_int)B, Rx, (lapack_int)B, ev)) {
        st = hyprof__error(ctx, HYPROF_ERR_NUMERIC, op, "HySime: the eigensolver failed");
        goto done;
    }
    size_t k = 0;
    for (size_t c = 0; c < B; c++) {
        if (c % 64 == 63 && (st = hyprof__progress(ctx, 0.0, "HySime")) != HYPROF_OK)
            goto done;
        const double *e = Rx + c * B;
        double py = 0.0, pn = 0.0;
        for (size_t i = 0; i < B; i++) {
            double s = 0.0;
            for (size_t j = 0; j < B; j++)
                s += R[i + j * B] * e[j];
            py += e[i] * s / (double)N;
            pn += e[i] * e[i] / ((double)N * Ri[i * B + i]);
        }
        k += -py + 2.0 * pn < 0.0;
    }
    *p = k < 2 ? 2 : k > pmax ? pmax : k;
done:
    free(R);
    free(Ri);
    free(Rx);
    free(ev);
    free(buf);
    return st;
}
