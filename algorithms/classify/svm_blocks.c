/* RBF SVM prediction by tiles of pixels as two gemms, with LIBSVM's labels.
 *
 * For a tile X of scaled pixels (n x bands):
 *   G = X S            (S: bands x nsv, the support vectors; dgemm)
 *   G = exp(-gamma (|x|^2 + |sv|^2 - 2 G))
 *   D = G A            (A: nsv x pairs, each pair's one-vs-one coefficients
 *                       on its two classes' support vectors, 0 elsewhere)
 *   d = D - rho, LIBSVM's votes and its first-maximum rule.
 * A pixel whose labels this rounding could change (a decision value within
 * the bound below of 0, or a tie of votes) is flagged; the caller computes it
 * again with LIBSVM's exact formula, so every label is LIBSVM's. The CUDA
 * backend runs the same method on the device with this file's model
 * preparation (hyprof__svm_prep).
 *
 * The bound: |x|^2 + |sv|^2 - 2 x.sv loses at most about (bands + 2) u (|x|^2 +
 * |sv|^2) to cancellation (u = 2^-52), which moves each kernel value by at
 * most gamma times that; the second gemm and exp add about (nsv + 4) u
 * relative to sum |a k|. A decision value is trusted when it is further from 0
 * than 8 times the sum of these over its pair's |coefficients|. */
#include "classify_impl.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ULP 2.220446049250313e-16

void hyprof__svm_prep_free(hyprof__svm_prep_t *p)
{
    free(p->svn);
    free(p->A);
    free(p->sumabs);
    free(p->model_index);
    memset(p, 0, sizeof *p);
}

/* A and the sum of |coefficients| of each pair, from LIBSVM's layout. */
static void pair_matrix(const hyprof__svm_t *s, double *A, double *sumabs)
{
    const size_t nc = s->nr_class, nsv = s->nsv;
    size_t start = 0, q = 0;
    for (size_t i = 0; i < nc; start += (size_t)s->nsv_class[i++]) {
        size_t start_j = start + (size_t)s->nsv_class[i];
        for (size_t j = i + 1; j < nc; start_j += (size_t)s->nsv_class[j++], q++) {
            const double *coef1 = s->coef + (j - 1) * nsv, *coef2 = s->coef + i * nsv;
            double *a = A + q * nsv;
            for (size_t k = start; k < start + (size_t)s->nsv_class[i]; k++)
                a[k] = coef1[k];
            for (size_t k = start_j; k < start_j + (size_t)s->nsv_class[j]; k++)
                a[k] = coef2[k];
            sumabs[q] = 0.0;
            for (size_t k = 0; k < nsv; k++)
                sumabs[q] += fabs(a[k]);
        }
    }
}

int hyprof__svm_prep(const hyprof_classifier_t *m, hyprof__svm_prep_t *p)
{
    const hyprof__svm_t *s = &m->svm;
    const size_t B = m->bands, nsv = s->nsv, nc = s->nr_class;
    memset(p, 0, sizeof *p);
    p->npairs = nc * (nc - 1) / 2;
    p->svn = malloc((nsv ? nsv : 1) * sizeof *p->svn);
    p->A = calloc(nsv * p->npairs + 1, sizeof *p->A);
    p->sumabs = malloc((p->npairs + 1) * sizeof *p->sumabs);
    p->model_index = malloc(nc * sizeof *p->model_index);
    if (!p->svn || !p->A || !p->sumabs || !p->model_index) {
        hyprof__svm_prep_free(p);
        return 0;
    }
    double svn_max = 0.0;
    for (size_t i = 0; i < nsv; i++) {
        double t = 0.0;
        for (size_t b = 0; b < B; b++)
            t += s->sv[i * B + b] * s->sv[i * B + b];
        p->svn[i] = t;
        svn_max = t > svn_max ? t : svn_max;
    }
    pair_matrix(s, p->A, p->sumabs);
    for (size_t i = 0; i < nc; i++)
        p->model_index[i] = hyprof__class_index(m, s->label[i]);
    p->tol_a = 8.0 * ULP * s->gamma * (double)(B + 2);
    p->tol_b = p->tol_a * svn_max + 8.0 * ULP * (double)(nsv + 4);
    return 1;
}

size_t hyprof__svm_tile_doubles(const hyprof_classifier_t *m, size_t n)
{
    size_t nc = m->svm.nr_class;
    return n * (m->bands + 1 + m->svm.nsv + nc * (nc - 1) / 2);
}

/* Votes of tile pixel i from its decision values; 1 when the rounding could
 * change them (a value within the bound of 0, or a tie for the most). */
static int vote(const hyprof__svm_prep_t *p, const hyprof__svm_t *s, const double *D, size_t n,
                size_t i, double xn, int *votes, size_t *best)
{
    const size_t nc = s->nr_class;
    const double tol = p->tol_a * xn + p->tol_b;
    int flag = 0;
    memset(votes, 0, nc * sizeof *votes);
    for (size_t a = 0, q = 0; a < nc; a++)
        for (size_t b = a + 1; b < nc; b++, q++) {
            double d = D[i + q * n] - s->rho[q];
            flag |= !(fabs(d) > p->sumabs[q] * tol);
            ++votes[d > 0 ? a : b];
        }
    *best = 0;
    for (size_t k = 1; k < nc; k++)
        if (votes[k] > votes[*best])
            *best = k;
    for (size_t k = 0; k < nc; k++)
        flag |= k != *best && votes[k] == votes[*best];
    return flag;
}

void hyprof__svm_tile(const hyprof__svm_prep_t *p, const hyprof__classify_args_t *a,
                      const size_t *px, size_t n, double *work, int *votes, uint8_t *flag)
{
    const hyprof_classifier_t *m = a->model;
    const hyprof__svm_t *s = &m->svm;
    const size_t B = m->bands, nsv = s->nsv, npix = a->in->width * a->in->height;
    const float *in = a->in->data;
    double *X = work, *xn = X + n * B, *G = xn + n, *D = G + n * nsv;
    for (size_t i = 0; i < n; i++)
        xn[i] = 0.0;
    for (size_t b = 0; b < B; b++)
        for (size_t i = 0; i < n; i++) {
            double v = hyprof__scale(m, b, (double)in[b * npix + px[i]]);
            X[i + b * n] = v;
            xn[i] += v * v;
        }
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)nsv, (int)B, 1.0, X,
                (int)n, s->sv, (int)B, 0.0, G, (int)n);
    for (size_t k = 0; k < nsv; k++)
        for (size_t i = 0; i < n; i++) {
            double d = xn[i] + p->svn[k] - 2.0 * G[i + k * n];
            G[i + k * n] = exp(-s->gamma * (d > 0.0 ? d : 0.0));
        }
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)p->npairs, (int)nsv, 1.0,
                G, (int)n, p->A, (int)nsv, 0.0, D, (int)n);
    for (size_t i = 0; i < n; i++) {
        size_t best;
        flag[i] = (uint8_t)vote(p, s, D, n, i, xn[i], votes, &best);
        if (flag[i])
            continue;
        a->map[px[i]] = (uint16_t)s->label[best];
        if (a->scores)
            hyprof__svm_vote_scores(m, votes, a->scores, npix, px[i]);
    }
}
