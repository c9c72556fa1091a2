/* Endmember extraction among candidate pixels: ATGP, VCA and N-FINDR. All
 * deterministic (VCA's random directions come from a fixed-seed generator),
 * so every run and both backends pick the same pixels. The candidates are
 * gathered into a pixel-major float matrix D (n x bands). */
#include "unmixing_impl.h"
#include "hyprof/spectral.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Seconds of the last extraction's steps in this thread (gather, ATGP,
 * N-FINDR's PCA, its sweeps), for the result metadata. */
static _Thread_local double g_steps[4];

/* Candidate pixel i of D is D + i*B. */
static float *gather(const float *x, size_t npix, size_t B, const size_t *idx, size_t n)
{
    float *D = malloc(n * B * sizeof *D);
    if (!D)
        return NULL;
    if (hyprof__unmix_gather(x, npix, B, idx, n, D)) /* from the chain's device copy */
        return D;
    for (size_t b = 0; b < B; b++) {
        const float *xb = x + b * npix;
        for (size_t i = 0; i < n; i++)
            D[i * B + b] = xb[idx[i]];
    }
    return D;
}

/* ---- ATGP -------------------------------------------------------------------- */

/* out[t] = sum_b q[b] D[i+t][b] (q = NULL: D[i+t][b]^2) for t < m <= DOT_ROWS
 * candidates at once: each sum still runs over b in increasing order, as one
 * pixel at a time would, but the DOT_ROWS independent chains keep the FPU busy
 * (one chain is bound by the latency of its additions). */
#define DOT_ROWS 8

static void dot_rows(const double *q, const float *D, size_t B, size_t i, size_t m, double *out)
{
    const float *d0 = D + i * B;
    if (m == DOT_ROWS) {
        double s[DOT_ROWS] = {0.0};
        for (size_t b = 0; b < B; b++)
            for (size_t t = 0; t < DOT_ROWS; t++) {
                double w = q ? q[b] : (double)d0[t * B + b];
                s[t] += w * d0[t * B + b];
            }
        for (size_t t = 0; t < DOT_ROWS; t++)
            out[t] = s[t];
        return;
    }
    for (size_t t = 0; t < m; t++) {
        const float *dt = d0 + t * B;
        double s = 0.0;
        for (size_t b = 0; b < B; b++)
            s += (q ? q[b] : (double)dt[b]) * dt[b];
        out[t] = s;
    }
}

/* Automatic target generation: the largest-norm pixel, then repeatedly the
 * pixel with the largest residual norm after projection onto the orthogonal
 * complement of those chosen. Fails when fewer than p independent
 * directions exist (the residual vanishes). */
/* v minus its projection on the nq orthonormal rows of Q (n values each),
 * twice: classical Gram-Schmidt with one re-orthogonalisation, for accuracy. */
static void project_out(const double *Q, size_t nq, size_t n, double *v)
{
    for (int pass = 0; pass < 2; pass++)
        for (size_t j = 0; j < nq; j++) {
            double d = 0.0;
            for (size_t t = 0; t < n; t++)
                d += Q[j * n + t] * v[t];
            for (size_t t = 0; t < n; t++)
                v[t] -= d * Q[j * n + t];
        }
}

static hyprof_status_t atgp(hyprof_ctx_t *ctx, const char *op, const float *D, size_t n,
                            size_t B, size_t p, size_t *chosen)
{
    double *r2 = malloc(n * sizeof *r2), *Q = malloc(p * B * sizeof *Q);
    if (!r2 || !Q) {
        free(r2);
        free(Q);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    }
    double first = 0.0;
    hyprof_status_t st = HYPROF_OK;
    /* Threads from a thousand candidates on (each pixel's sums are the same
     * whatever the split); fewer are cheaper on one thread. */
    int threads = n >= 1024 ? hyprof__threads(ctx) : 1;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i += DOT_ROWS)
        dot_rows(NULL, D, B, i, n - i < DOT_ROWS ? n - i : DOT_ROWS, r2 + i);
    for (size_t k = 0; k < p; k++) {
        /* Each endmember costs a pass over the candidates: a cancellation point. */
        if ((st = hyprof__progress(ctx, 0.0, op)) != HYPROF_OK)
            break;
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (r2[i] > r2[best])
                best = i;
        if (k == 0)
            first = r2[best];
        if (!(r2[best] > 1e-10 * first)) {
            st = hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                               "the candidate spectra span only %zu independent directions; "
                               "%zu endmembers need %zu (constant or duplicated spectra?)",
                               k, p, p);
            break;
        }
        chosen[k] = best;
        /* New orthonormal direction: Gram-Schmidt, twice for accuracy. */
        double *q = Q + k * B;
        for (size_t b = 0; b < B; b++)
            q[b] = D[best * B + b];
        project_out(Q, k, B, q);
        double nq = 0.0;
        for (size_t b = 0; b < B; b++)
            nq += q[b] * q[b];
        nq = sqrt(nq);
        for (size_t b = 0; b < B; b++)
            q[b] /= nq;
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < n; i += DOT_ROWS) {
            size_t m = n - i < DOT_ROWS ? n - i : DOT_ROWS;
            double d[DOT_ROWS];
            dot_rows(q, D, B, i, m, d);
            for (size_t t = 0; t < m; t++)
                r2[i + t] -= d[t] * d[t];
        }
        r2[best] = -1.0; /* never again */
    }
    free(r2);
    free(Q);
    return st;
}

/* ---- VCA --------------------------------------------------------------------- */

/* splitmix64: a fixed-seed generator, the same on every platform. */
static double uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* The top-p eigenvectors (p x B, component-major) of D'D / n. */
static hyprof_status_t top_subspace(hyprof_ctx_t *ctx, const char *op, const float *D, size_t n,
                                    size_t B, size_t p, double *U)
{
    size_t chunk = n < 4096 ? n : 4096;
    double *R = calloc(B * B, sizeof *R), *buf = malloc(chunk * B * sizeof *buf),
           *ev = malloc(B * sizeof *ev);
    hyprof_status_t st = HYPROF_OK;
    if (!R || !buf || !ev)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    for (size_t i0 = 0; st == HYPROF_OK && i0 < n; i0 += chunk) {
        size_t m = n - i0 < chunk ? n - i0 : chunk;
        for (size_t i = 0; i < m * B; i++)
            buf[i] = D[i0 * B + i];
        /* buf is B x m column-major: R += buf buf'. */
        cblas_dsyrk(CblasColMajor, CblasUpper, CblasNoTrans, (int)B, (int)m, 1.0, buf, (int)B,
                    1.0, R, (int)B);
    }
    if (st == HYPROF_OK &&
        LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'U', (lapack_int)B, R, (lapack_int)B, ev) != 0)
        st = hyprof__error(ctx, HYPROF_ERR_NUMERIC, op, "the eigensolver (dsyevd) failed");
    for (size_t k = 0; st == HYPROF_OK && k < p; k++)
        memcpy(U + k * B, R + (B - 1 - k) * B, B * sizeof *U);
    free(R);
    free(buf);
    free(ev);
    return st;
}

/* Vertex component analysis (Nascimento and Bioucas-Dias, 2005), the
 * projective branch (high SNR, the usual case for radiance or reflectance):
 * project on the top-p subspace, scale each pixel so its projection on the
 * mean direction is 1, then p times take a direction orthogonal to the
 * vertices found (the first time: to the last coordinate axis) and keep the
 * pixel with the largest |projection|. */
static hyprof_status_t vca(hyprof_ctx_t *ctx, const char *op, const float *D, size_t n, size_t B,
                           size_t p, size_t *chosen)
{
    double *U = malloc(p * B * sizeof *U), *X = malloc(n * p * sizeof *X),
           *u = calloc(p, sizeof *u), *Q = malloc(p * p * sizeof *Q), *f = malloc(p * sizeof *f);
    hyprof_status_t st = HYPROF_OK;
    if (!U || !X || !u || !Q || !f)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    if (st == HYPROF_OK)
        st = top_subspace(ctx, op, D, n, B, p, U);
    if (st == HYPROF_OK) {
        #pragma omp parallel for num_threads(n > 65536 ? hyprof__threads(ctx) : 1) schedule(static)
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < p; k++) {
                double s = 0.0;
                for (size_t b = 0; b < B; b++)
                    s += U[k * B + b] * D[i * B + b];
                X[i * p + k] = s;
            }
        for (size_t i = 0; i < n; i++) /* the mean in pixel order: deterministic */
            for (size_t k = 0; k < p; k++)
                u[k] += X[i * p + k] / (double)n;
    }
    for (size_t i = 0; st == HYPROF_OK && i < n; i++) {
        double s = 0.0;
        for (size_t k = 0; k < p; k++)
            s += u[k] * X[i * p + k];
        s = fabs(s) > 1e-300 ? s : 1e-300;
        for (size_t k = 0; k < p; k++)
            X[i * p + k] /= s;
    }
    uint64_t seed = 20150101u;
    size_t nq = 1;
    if (st == HYPROF_OK) {
        memset(Q, 0, p * sizeof *Q);
        Q[p - 1] = 1.0;
    }
    for (size_t k = 0; st == HYPROF_OK && k < p; k++) {
        if ((st = hyprof__progress(ctx, 0.0, op)) != HYPROF_OK)
            break;
        double nf = 0.0;
        for (size_t j = 0; j < p; j++)
            f[j] = uniform(&seed);
        project_out(Q, nq, p, f);
        for (size_t j = 0; j < p; j++)
            nf += f[j] * f[j];
        nf = sqrt(nf);
        size_t best = 0;
        double vbest = -1.0;
        for (size_t i = 0; i < n; i++) {
            double v = 0.0;
            for (size_t j = 0; j < p; j++)
                v += f[j] * X[i * p + j];
            v = fabs(v) / nf;
            if (v > vbest) {
                vbest = v;
                best = i;
            }
        }
        chosen[k] = best;
        /* The basis becomes the vertices found so far, orthonormalised. */
        if (k == 0)
            nq = 0;
        double *q = Q + nq * p, nrm = 0.0;
        memcpy(q, X + best * p, p * sizeof *q);
        project_out(Q, nq, p, q);
        for (size_t t = 0; t < p; t++)
            nrm += q[t] * q[t];
        if (!(sqrt(nrm) > 1e-9 * (1.0 + vbest))) {
            st = hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                               "the candidate spectra span only %zu independent directions; "
                               "%zu endmembers need %zu (constant or duplicated spectra?)",
                               k, p, p);
            break;
        }
        for (size_t t = 0; t < p; t++)
            q[t] /= sqrt(nrm);
        nq++;
    }
    free(U);
    free(X);
    free(u);
    free(Q);
    free(f);
    return st;
}

/* ---- N-FINDR ------------------------------------------------------------------ */

static int invert(const double *A, size_t p, double *inv, lapack_int *ipiv)
{
    memcpy(inv, A, p * p * sizeof *inv);
    if (LAPACKE_dgetrf(LAPACK_COL_MAJOR, (lapack_int)p, (lapack_int)p, inv, (lapack_int)p, ipiv))
        return -1;
    return LAPACKE_dgetri(LAPACK_COL_MAJOR, (lapack_int)p, inv, (lapack_int)p, ipiv) ? -1 : 0;
}

/* Candidate sets up to this size get their PCA here, on the CPU. */
#define SMALL_PCA 65536

/* The candidates' band means, each a sequential double sum in candidate
 * order (the same bits on any thread count); threads take groups of bands. */
static void candidate_mean(const float *D, size_t n, size_t B, int threads, double *mean)
{
    size_t groups = (B + 7) / 8;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t g = 0; g < groups; g++) {
        size_t b0 = 8 * g, nb = B - b0 < 8 ? B - b0 : 8;
        double s[8] = {0.0};
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < nb; j++)
                s[j] += D[i * B + b0 + j];
        for (size_t j = 0; j < nb; j++)
            mean[b0 + j] = s[j] / (double)n;
    }
}

/* cov (lower) = Xp Xp', Xp being B x n column-major (a centred candidate a
 * column): chunks of CAND_CHUNK candidates, each added by a single-threaded
 * dsyrk into its group's partial matrix; threads take groups, and the
 * partials are added in group order. Chunks and groups come from n alone,
 * never from the thread count, so the endmembers do not depend on it (as
 * the library's PCA covariance, algorithms/spectral/pca.c). The caller holds
 * OpenBLAS at one thread. Returns -1 when out of memory. */
#define CAND_CHUNK 2048
#define CAND_GROUPS 16

static int candidate_cov(const double *Xp, size_t n, size_t B, int threads, double *cov)
{
    size_t nchunks = (n + CAND_CHUNK - 1) / CAND_CHUNK;
    size_t G = nchunks < CAND_GROUPS ? nchunks : CAND_GROUPS;
    double *part = G > 1 ? calloc(G * B * B, sizeof *part) : NULL;
    if (G > 1 && !part)
        return -1;
    memset(cov, 0, B * B * sizeof *cov);
    #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (G > 1)
    for (size_t g = 0; g < G; g++) {
        double *out = G > 1 ? part + g * B * B : cov;
        for (size_t c = g * nchunks / G; c < (g + 1) * nchunks / G; c++) {
            size_t i0 = c * CAND_CHUNK, m = n - i0 < CAND_CHUNK ? n - i0 : CAND_CHUNK;
            cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, (int)B, (int)m, 1.0,
                        Xp + i0 * B, (int)B, 1.0, out, (int)B);
        }
    }
    for (size_t g = 0; G > 1 && g < G; g++)
        for (size_t j = 0; j < B; j++)
            for (size_t i = j; i < B; i++)
                cov[i + j * B] += part[g * B * B + i + j * B];
    free(part);
    return 0;
}

/* Z (n x p): [1, first p-1 principal components] of the candidates. A few
 * thousand of them (SSPP's): their own PCA here, about twice as fast as the
 * library's fit and apply (mean and covariance in double, the covariance by
 * candidate_cov, only the p-1 leading eigenvectors by dsyevr, each with its
 * largest-magnitude loading positive as hyprof_pca_fit signs them, the
 * projections by dgemm, rounded to float as hyprof_pca_apply gives them):
 * the same on both backends and any thread count. OpenBLAS runs on one thread
 * meanwhile (hyprof__blas_threads_set), so that no BLAS threads are left
 * spinning against the OpenMP regions that follow. More candidates (no SSPP,
 * the whole image): the library's PCA, where the context says. */
static hyprof_status_t reduce_small(hyprof_ctx_t *ctx, const char *op, const float *D, size_t n,
                                    size_t B, size_t p, double *Z)
{
    size_t q = p - 1;
    double *mean = calloc(B, sizeof *mean), *X = malloc((q ? q : 1) * n * sizeof *X),
           *Xp = malloc(B * n * sizeof *Xp),
           *cov = malloc(B * B * sizeof *cov), *w = malloc(B * sizeof *w),
           *V = malloc(B * (q ? q : 1) * sizeof *V);
    lapack_int *supp = malloc(2 * (q ? q : 1) * sizeof *supp), m = 0;
    hyprof_status_t st = HYPROF_OK;
    if (!mean || !X || !Xp || !cov || !w || !V || !supp)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    if (st == HYPROF_OK) {
        int threads = n >= 1024 ? hyprof__threads(ctx) : 1;
        candidate_mean(D, n, B, threads, mean);
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < n; i++) /* centred, pixel-major */
            for (size_t b = 0; b < B; b++)
                Xp[i * B + b] = (double)D[i * B + b] - mean[b];
        int blas_threads = hyprof__blas_threads_set(1);
        if (candidate_cov(Xp, n, B, threads, cov) != 0)
            st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
        if (st == HYPROF_OK && q &&
            LAPACKE_dsyevr(LAPACK_COL_MAJOR, 'V', 'I', 'L', (lapack_int)B, cov, (lapack_int)B,
                           0.0, 0.0, (lapack_int)(B - q + 1), (lapack_int)B, 0.0, &m, w, V,
                           (lapack_int)B, supp) != 0)
            st = hyprof__error(ctx, HYPROF_ERR_NUMERIC, op,
                               "the candidates' eigensolver (dsyevr) failed");
        hyprof__blas_threads_restore(blas_threads);
        if (st == HYPROF_OK && (size_t)m != q)
            st = hyprof__error(ctx, HYPROF_ERR_NUMERIC, op,
                               "the candidates' eigensolver found %d of %zu components", (int)m, q);
    }
    for (size_t k = 0; st == HYPROF_OK && k < q / 2; k++) /* ascending -> descending */
        for (size_t b = 0; b < B; b++) {
            double t = V[k * B + b];
            V[k * B + b] = V[(q - 1 - k) * B + b];
            V[(q - 1 - k) * B + b] = t;
        }
    for (size_t k = 0; st == HYPROF_OK && k < q; k++) {
        double *v = V + k * B;
        size_t imax = 0;
        for (size_t b = 1; b < B; b++)
            if (fabs(v[b]) > fabs(v[imax]))
                imax = b;
        if (v[imax] < 0.0)
            for (size_t b = 0; b < B; b++)
                v[b] = -v[b];
    }
    if (st == HYPROF_OK) { /* P (q x n) = V' Xp, on one BLAS thread */
        int blas_threads = hyprof__blas_threads_set(1);
        cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, (int)q, (int)n, (int)B, 1.0, V,
                    (int)B, Xp, (int)B, 0.0, X, (int)q);
        hyprof__blas_threads_restore(blas_threads);
        for (size_t i = 0; i < n; i++) {
            Z[i * p] = 1.0;
            for (size_t k = 0; k < q; k++)
                Z[i * p + k + 1] = (float)X[i * q + k];
        }
    }
    free(mean);
    free(X);
    free(Xp);
    free(cov);
    free(w);
    free(V);
    free(supp);
    return st;
}

/* Z (n x p) of the whole image: the library's PCA on a band-sequential copy. */
static hyprof_status_t reduce(hyprof_ctx_t *ctx, const char *op, float *D, size_t n, size_t B,
                              size_t p, double *Z)
{
    if (n <= SMALL_PCA)
        return reduce_small(ctx, op, D, n, B, p, Z);
    float *T = malloc(n * B * sizeof *T);
    if (!T)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < B; b++)
            T[b * n + i] = D[i * B + b];
    hyprof_cube_t v = hyprof_cube_bsq(T, HYPROF_FLOAT32, n, 1, B), pcs;
    hyprof_pca_model_t *m = NULL;
    memset(&pcs, 0, sizeof pcs);
    hyprof_status_t st = hyprof_pca_fit(ctx, &v, p - 1, &m);
    if (st == HYPROF_OK)
        st = hyprof_pca_apply(ctx, m, &v, &pcs);
    hyprof_pca_model_free(&m);
    free(T);
    if (st != HYPROF_OK)
        return st;
    const float *pc = pcs.data;
    for (size_t i = 0; i < n; i++) {
        Z[i * p] = 1.0;
        for (size_t k = 0; k + 1 < p; k++)
            Z[i * p + k + 1] = pc[k * n + i];
    }
    hyprof_cube_free(&pcs);
    return HYPROF_OK;
}

/* The largest |(A^-1 [1; z])_j| and its j (the first on ties). Ai is
 * column-major, so the p sums advance together one column at a time (each
 * still over t in increasing order, as a row-by-row dot product would): p
 * independent chains the compiler vectorises, instead of one chain a row. */
static double best_swap(const double *Ai, const double *z, size_t p, size_t *jbest, double *s)
{
    double gain = 0.0;
    *jbest = 0;
    for (size_t j = 0; j < p; j++)
        s[j] = 0.0;
    for (size_t t = 0; t < p; t++) {
        const double *col = Ai + t * p, zt = z[t];
        for (size_t j = 0; j < p; j++)
            s[j] += col[j] * zt;
    }
    for (size_t j = 0; j < p; j++)
        if (fabs(s[j]) > gain) {
            gain = fabs(s[j]);
            *jbest = j;
        }
    return gain;
}

/* Pixels whose factors are computed before looking for the first swap: the
 * factors after a swap are thrown away, so a short chunk wastes little (the
 * first swap, hence the result, does not depend on it). */
#define NFINDR_CHUNK 16

/* N-FINDR (Winter), started from ATGP's pixels: the simplex volume is
 * |det A| with A's columns [1; z_e]. Replacing column j by pixel i scales it
 * by (A^-1 [1; z_i])_j, so one matrix-vector product per pixel tries every
 * replacement; pixels are visited in order and a pixel replaces the column
 * that grows the volume most while that factor exceeds 1 + 1e-9. Sweeps
 * until nothing changes. Serial on purpose: a sweep is thousands of short
 * steps, too short for a parallel region each, and a few thousand SSPP
 * candidates take milliseconds. */
static hyprof_status_t nfindr(hyprof_ctx_t *ctx, const char *op, float *D, size_t n, size_t B,
                              size_t p, size_t *chosen)
{
    double t0 = hyprof__now();
    hyprof_status_t st = atgp(ctx, op, D, n, B, p, chosen);
    g_steps[1] = hyprof__now() - t0;
    if (st != HYPROF_OK)
        return st;
    double *Z = malloc(n * p * sizeof *Z), *A = malloc(p * p * sizeof *A),
           *Ai = malloc(p * p * sizeof *Ai), *sums = malloc(p * sizeof *sums),
           *gain = malloc(NFINDR_CHUNK * sizeof *gain);
    size_t *jb = malloc(NFINDR_CHUNK * sizeof *jb);
    lapack_int *ipiv = malloc(p * sizeof *ipiv);
    if (!Z || !A || !Ai || !sums || !gain || !jb || !ipiv)
        st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "out of memory");
    t0 = hyprof__now();
    if (st == HYPROF_OK)
        st = reduce(ctx, op, D, n, B, p, Z);
    g_steps[2] = hyprof__now() - t0;
    t0 = hyprof__now();
    for (size_t j = 0; st == HYPROF_OK && j < p; j++)
        memcpy(A + j * p, Z + chosen[j] * p, p * sizeof *A);
    if (st == HYPROF_OK && invert(A, p, Ai, ipiv))
        st = hyprof__error(ctx, HYPROF_ERR_INPUT, op,
                           "the candidates do not span a %zu-vertex simplex (constant or "
                           "duplicated spectra?)", p);
    int changed = 1;
    for (int sweep = 0; st == HYPROF_OK && changed && sweep < 50; sweep++) {
        changed = 0;
        for (size_t i = 0; st == HYPROF_OK && i < n;) {
            size_t m = n - i < NFINDR_CHUNK ? n - i : NFINDR_CHUNK, hit = m;
            for (size_t q = 0; q < m; q++)
                gain[q] = best_swap(Ai, Z + (i + q) * p, p, &jb[q], sums);
            for (size_t q = 0; q < m && hit == m; q++)
                if (gain[q] > 1.0 + 1e-9)
                    hit = q;
            if (hit == m) {
                i += m;
                continue;
            }
            memcpy(A + jb[hit] * p, Z + (i + hit) * p, p * sizeof *A);
            if (invert(A, p, Ai, ipiv)) { /* cannot happen for a larger volume */
                st = hyprof__error(ctx, HYPROF_ERR_NUMERIC, op, "N-FINDR: singular simplex");
                break;
            }
            chosen[jb[hit]] = i + hit;
            changed = 1;
            i += hit + 1;
        }
        if (st == HYPROF_OK)
            st = hyprof__progress(ctx, (sweep + 1) / 50.0, op);
    }
    g_steps[3] = hyprof__now() - t0;
    free(Z);
    free(A);
    free(Ai);
    free(sums);
    free(gain);
    free(jb);
    free(ipiv);
    return st;
}

void hyprof__extract_seconds(double sec[4])
{
    memcpy(sec, g_steps, sizeof g_steps);
}

hyprof_status_t hyprof__extract(hyprof_ctx_t *ctx, const char *op, const float *x, size_t npix,
                                size_t bands, const size_t *idx, size_t n, size_t p,
                                hyprof__extract_t method, size_t *chosen)
{
    if (p < 2 || p > bands || p > n)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op,
                             "endmembers %zu is out of range: need 2 <= p <= bands (%zu) and "
                             "p <= candidate pixels (%zu)", p, bands, n);
    double t0 = hyprof__now();
    memset(g_steps, 0, sizeof g_steps);
    float *D = gather(x, npix, bands, idx, n);
    g_steps[0] = hyprof__now() - t0;
    if (!D)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op, "cannot gather %zu candidates", n);
    hyprof_status_t st;
    if (method == HYPROF__EXTRACT_NFINDR) {
        st = nfindr(ctx, op, D, n, bands, p, chosen); /* times its own steps */
    } else {
        t0 = hyprof__now();
        st = method == HYPROF__EXTRACT_ATGP ? atgp(ctx, op, D, n, bands, p, chosen)
                                            : vca(ctx, op, D, n, bands, p, chosen);
        g_steps[1] = hyprof__now() - t0; /* ATGP, or all of VCA */
    }
    for (size_t k = 0; st == HYPROF_OK && k < p; k++)
        chosen[k] = idx[chosen[k]];
    free(D);
    return st;
}
