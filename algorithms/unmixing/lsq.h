/* The per-pixel least-squares solvers of the abundance step, written once for
 * both backends (plain C, compiled as host code by pca-free C files and as
 * device code by kernels/unmixing/unmix_chain.cu).
 *
 * Problem, for one pixel y with endmember matrix M (bands x p):
 *   min_a 1/2 a'Ga - b'a,  G = M'M,  b = M'y
 *   ucls: no constraint; nnls: a >= 0; fcls: a >= 0 and sum a = 1.
 * nnls and fcls use one primal active-set method (Lawson-Hanson; for fcls the
 * sum-to-one equality is kept exactly in every subproblem, with its Lagrange
 * multiplier mu, as in Heinz-Chang's FCLS but without the large-delta
 * approximation). Passive-set subproblems are solved by Cholesky of G_PP;
 * pivots below 1e-13 max(diag G) are clamped there, which regularises
 * duplicated or collinear endmembers instead of failing. */
#ifndef HYPROF_UNMIXING_LSQ_H
#define HYPROF_UNMIXING_LSQ_H

#include <math.h>

#ifdef __CUDACC__
#define HYPROF_HD __host__ __device__
#else
#define HYPROF_HD
#endif

enum { HYPROF__LSQ_FCLS = 0, HYPROF__LSQ_NNLS = 1, HYPROF__LSQ_UCLS = 2 };
/* The most endmembers a solve takes (HYPROF_MAX_ENDMEMBERS), as mask words. */
enum { HYPROF__LSQ_MAXP = 256, HYPROF__LSQ_WORDS = HYPROF__LSQ_MAXP / 64 };

/* The passive-set subproblems, with two savings that change no result
 * against refactorising each one from scratch:
 *   - Cholesky is row by row and row i depends only on rows < i, so the
 *     factor of the passive set is kept (row stride p) and only the rows
 *     from the first index that changed are recomputed: one row when an
 *     index is appended, the rows after a removed one otherwise;
 *   - membership of the passive set is a bit mask instead of a scan.
 * (On the GPU the work arrays live in local memory, where full
 * refactorisations cost most.) */
HYPROF_HD static inline void hyprof__lsq_chol_rows(const double *G, int p, const int *idx,
                                                   int from, int k, double *L, double floor_)
{
    for (int i = from; i < k; i++)
        for (int j = 0; j <= i; j++) {
            double s = G[idx[i] * p + idx[j]];
            for (int t = 0; t < j; t++)
                s -= L[i * p + t] * L[j * p + t];
            if (i == j)
                L[i * p + i] = sqrt(s > floor_ ? s : floor_);
            else
                L[i * p + j] = s / L[j * p + j];
        }
}

HYPROF_HD static inline void hyprof__lsq_chol_solve(const double *L, int p, int k, double *x)
{
    for (int i = 0; i < k; i++) {
        double s = x[i];
        for (int t = 0; t < i; t++)
            s -= L[i * p + t] * x[t];
        x[i] = s / L[i * p + i];
    }
    for (int i = k - 1; i >= 0; i--) {
        double s = x[i];
        for (int t = i + 1; t < k; t++)
            s -= L[t * p + i] * x[t];
        x[i] = s / L[i * p + i];
    }
}

/* x <- (L L')^-1 x and y <- (L L')^-1 y in one pass over L (each the same
 * operations as hyprof__lsq_chol_solve alone). */
HYPROF_HD static inline void hyprof__lsq_chol_solve2(const double *L, int p, int k, double *x,
                                                       double *y)
{
    for (int i = 0; i < k; i++) {
        double s = x[i], r = y[i];
        for (int t = 0; t < i; t++) {
            double l = L[i * p + t];
            s -= l * x[t];
            r -= l * y[t];
        }
        x[i] = s / L[i * p + i];
        y[i] = r / L[i * p + i];
    }
    for (int i = k - 1; i >= 0; i--) {
        double s = x[i], r = y[i];
        for (int t = i + 1; t < k; t++) {
            double l = L[t * p + i];
            s -= l * x[t];
            r -= l * y[t];
        }
        x[i] = s / L[i * p + i];
        y[i] = r / L[i * p + i];
    }
}

/* z (in u, ordered as idx) minimising 1/2 z'G_PP z - b_P'z, with sum z = 1
 * when eq: z = G^-1 b - mu G^-1 1, mu = (1'G^-1 b - 1) / 1'G^-1 1; the
 * factor's rows < from are already in L. */
HYPROF_HD static inline void hyprof__lsq_sub(const double *G, const double *b, int p,
                                                  const int *idx, int from, int k, int eq,
                                                  double *L, double *u, double *v,
                                                  double floor_)
{
    hyprof__lsq_chol_rows(G, p, idx, from, k, L, floor_);
    for (int i = 0; i < k; i++)
        u[i] = b[idx[i]];
    if (!eq) {
        hyprof__lsq_chol_solve(L, p, k, u);
        return;
    }
    double su = 0.0, sv = 0.0;
    for (int i = 0; i < k; i++)
        v[i] = 1.0;
    hyprof__lsq_chol_solve2(L, p, k, u, v);
    for (int i = 0; i < k; i++) {
        su += u[i];
        sv += v[i];
    }
    double mu = (su - 1.0) / sv;
    for (int i = 0; i < k; i++)
        u[i] -= mu * v[i];
}

/* The index entering the passive set (-1: none, the KKT conditions hold):
 * the largest w = -(g_i + mu), g = G a - b, off the passive set, above a
 * tolerance relative to the solution's size. */
HYPROF_HD static inline int hyprof__lsq_entering(int p, const double *G, const double *b,
                                                 const double *a, const int *idx, int k,
                                                 int eq, const unsigned long long *in,
                                                 double gmax)
{
    double mu = 0.0, asum = 0.0;
    for (int t = 0; t < k; t++)
        asum += fabs(a[idx[t]]);
    /* Only the passive set carries non-zero a: the sums run over it. */
    if (eq) {
        for (int t = 0; t < k; t++) {
            double g = -b[idx[t]];
            for (int u2 = 0; u2 < k; u2++)
                g += G[idx[t] * p + idx[u2]] * a[idx[u2]];
            mu -= g;
        }
        mu /= (double)k;
    }
    double wmax = 1e-11 * gmax * (1.0 + asum);
    int best = -1;
    for (int i = 0; i < p; i++) {
        if (a[i] > 0.0 || ((in[i >> 6] >> (i & 63)) & 1ull))
            continue;
        double g = -b[i];
        for (int t = 0; t < k; t++)
            g += G[i * p + idx[t]] * a[idx[t]];
        double w = -(g + mu);
        if (w > wmax) {
            wmax = w;
            best = i;
        }
    }
    return best;
}

/* The inner loop of Lawson-Hanson after an index entered: solve on the
 * passive set; while some of the solution is not positive, step back to
 * the boundary and drop what reached zero. *k and *rows (the valid rows
 * of L) are updated. */
HYPROF_HD static inline void hyprof__lsq_inner(int p, const double *G, const double *b,
                                               double *a, int *idx, int *k_, int eq,
                                               unsigned long long *in, double *L, double *u,
                                               double *v, int *rows_, double floor_)
{
    int k = *k_, rows = *rows_;
    for (int inner = 0; inner <= p; inner++) {
        hyprof__lsq_sub(G, b, p, idx, rows, k, eq, L, u, v, floor_);
        rows = k;
        double alpha = 2.0;
        int jmin = -1;
        for (int t = 0; t < k; t++)
            if (u[t] <= 0.0) {
                double at = a[idx[t]], r = at / (at - u[t]);
                if (r < alpha) {
                    alpha = r;
                    jmin = t;
                }
            }
        if (jmin < 0) {
            for (int t = 0; t < k; t++)
                a[idx[t]] = u[t];
            break;
        }
        for (int t = 0; t < k; t++)
            a[idx[t]] += alpha * (u[t] - a[idx[t]]);
        a[idx[jmin]] = 0.0;
        int kk = 0;
        for (int t = 0; t < k; t++) {
            if (a[idx[t]] > 0.0) {
                idx[kk++] = idx[t];
            } else {
                a[idx[t]] = 0.0;
                in[idx[t] >> 6] &= ~(1ull << (idx[t] & 63));
                rows = kk < rows ? kk : rows; /* rows from here on change */
            }
        }
        k = kk;
        if (k == 0)
            break;
    }
    *k_ = k;
    *rows_ = rows;
}

/* Solves one pixel: a (p <= HYPROF__LSQ_MAXP) from G (p x p, row-major)
 * and b (p). work holds p*p + 2p doubles, idx p ints. Returns the number of
 * outer iterations. */
HYPROF_HD static inline int hyprof__lsq_solve(int p, const double *G, const double *b,
                                              int method, double *a, double *work, int *idx)
{
    double *L = work, *u = work + p * p, *v = u + p;
    double gmax = 0.0;
    for (int i = 0; i < p; i++)
        gmax = G[i * p + i] > gmax ? G[i * p + i] : gmax;
    double floor_ = 1e-13 * gmax + 1e-300;
    if (method == HYPROF__LSQ_UCLS) {
        for (int i = 0; i < p; i++)
            idx[i] = i;
        hyprof__lsq_sub(G, b, p, idx, 0, p, 0, L, u, v, floor_);
        for (int i = 0; i < p; i++)
            a[i] = u[i];
        return 1;
    }
    int eq = method == HYPROF__LSQ_FCLS, k = 0, it = 0, rows = 0; /* rows: valid rows of L */
    unsigned long long in[HYPROF__LSQ_WORDS] = {0}; /* bit i: i is in idx[0..k) */
    for (int i = 0; i < p; i++)
        a[i] = 0.0;
    if (eq) {
        int j0 = 0;
        for (int j = 1; j < p; j++)
            if (G[j * p + j] - 2.0 * b[j] < G[j0 * p + j0] - 2.0 * b[j0])
                j0 = j;
        idx[k++] = j0;
        in[j0 >> 6] |= 1ull << (j0 & 63);
        a[j0] = 1.0;
    }
    for (; it < 3 * p + 3; it++) {
        int best = hyprof__lsq_entering(p, G, b, a, idx, k, eq, in, gmax);
        if (best < 0)
            break;
        idx[k++] = best;
        in[best >> 6] |= 1ull << (best & 63);
        hyprof__lsq_inner(p, G, b, a, idx, &k, eq, in, L, u, v, &rows, floor_);
    }
    return it;
}

#endif
