/* Extreme learning machine (Huang et al.): a sigmoid hidden layer with
 * random input weights fixed by the seed, and output weights by regularised
 * least squares, beta = (H'H + I/C)^-1 H'T with T = +1 for the pixel's class
 * and -1 elsewhere (CBLAS and LAPACKE's Cholesky solver on the host; cuBLAS
 * and cuSOLVER in kernels/classify/elm.cu). The seeded weights are drawn here,
 * once, for both backends. */
#include "elm_impl.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "train"

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* Uniform in [-1, 1) from the stream. */
static double uniform(uint64_t *state)
{
    return (double)(hyprof__splitmix(state) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static void hidden_layer(const hyprof__elm_t *e, size_t bands, const double *x, double *h)
{
    for (size_t k = 0; k < e->neurons; k++) {
        const double *w = e->w + k * bands;
        double v = e->bias[k];
        for (size_t b = 0; b < bands; b++)
            v += w[b] * x[b];
        h[k] = sigmoid(v);
    }
}

size_t hyprof__elm_outputs(const hyprof__elm_t *e, size_t bands, size_t nclasses,
                           const double *x, double *hidden, double *out)
{
    hidden_layer(e, bands, x, hidden);
    size_t best = 0;
    for (size_t c = 0; c < nclasses; c++) {
        double v = 0.0;
        for (size_t k = 0; k < e->neurons; k++)
            v += hidden[k] * e->beta[k * nclasses + c];
        out[c] = v;
        if (v > out[best])
            best = c;
    }
    return best;
}

hyprof_status_t hyprof__elm_not_positive_definite(hyprof_ctx_t *ctx, int info)
{
    return hyprof__error(ctx, HYPROF_ERR_NUMERIC, OP,
                         "ELM output weights: the regularised system is not positive "
                         "definite (Cholesky factorisation failed at order %d); lower --elm-c",
                         info);
}

static hyprof_status_t solve_beta(hyprof_ctx_t *ctx, hyprof__elm_t *e, const double *H,
                                  const int *y, size_t n, size_t K)
{
    size_t L = e->neurons;
    double *A = malloc(L * L * sizeof *A), *T = malloc(n * K * sizeof *T);
    if (!A || !T) {
        free(A), free(T);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu neurons)", L);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < K; c++)
            T[i * K + c] = (size_t)y[i] == c ? 1.0 : -1.0;
    /* A = H'H + I/C, beta = H'T, then A beta = H'T. */
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)L, (int)n, 1.0, H, (int)L, 0.0, A,
                (int)L);
    for (size_t k = 0; k < L; k++)
        A[k * L + k] += 1.0 / e->c;
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)L, (int)K, (int)n, 1.0, H, (int)L,
                T, (int)K, 0.0, e->beta, (int)K);
    lapack_int info = LAPACKE_dposv(LAPACK_ROW_MAJOR, 'U', (lapack_int)L, (lapack_int)K, A,
                                    (lapack_int)L, e->beta, (lapack_int)K);
    free(A);
    free(T);
    if (info > 0)
        return hyprof__elm_not_positive_definite(ctx, (int)info);
    if (info < 0)
        return hyprof__error(ctx, HYPROF_ERR_INTERNAL, OP, "LAPACKE_dposv: argument %d invalid",
                             (int)-info);
    return HYPROF_OK;
}

/* H (n x L) and H'H (L x L) must fit: --neurons sets both. */
static hyprof_status_t check_memory(hyprof_ctx_t *ctx, size_t n, size_t L, size_t K)
{
    double need = ((double)n * (double)L + (double)L * (double)L + (double)n * (double)K) *
                  sizeof(double);
    char why[256];
    if (need < (double)SIZE_MAX &&
        hyprof_host_memory_check((size_t)need, "the ELM's hidden layer and H'H", why,
                                 sizeof why) == HYPROF_OK)
        return HYPROF_OK;
    return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, OP, "--neurons %zu with %zu training pixels: %s",
                         L, n, need < (double)SIZE_MAX ? why : "more memory than addressable");
}

hyprof_status_t hyprof__cpu_elm_solve(hyprof_ctx_t *ctx, void *args)
{
    hyprof__elm_solve_args_t *a = args;
    hyprof__elm_t *e = a->elm;
    size_t L = e->neurons;
    hyprof_status_t st = check_memory(ctx, a->n, L, a->nclasses);
    if (st != HYPROF_OK)
        return st;
    double *H = malloc(a->n * L * sizeof *H);
    if (!H)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu neurons)", L);
    int stop = 0;
    /* Rows in blocks of 256, each row alone (the result does not depend on
     * the blocks or the threads); cancellable between blocks. */
    size_t nblocks = (a->n + 255) / 256;
#pragma omp parallel for schedule(static) num_threads(hyprof__threads(ctx))
    for (size_t blk = 0; blk < nblocks; blk++) {
        int halt;
#pragma omp atomic read
        halt = stop;
        if (halt)
            continue;
        size_t end = (blk + 1) * 256 < a->n ? (blk + 1) * 256 : a->n;
        for (size_t i = blk * 256; i < end; i++)
            hidden_layer(e, a->bands, a->x + i * a->bands, H + i * L);
        if (hyprof__progress_omp(ctx, 0.5 * (double)end / (double)a->n, "ELM hidden layer")) {
#pragma omp atomic write
            stop = 1;
        }
    }
    if (stop)
        st = hyprof__progress(ctx, 0.5, "ELM hidden layer");
    if (st == HYPROF_OK)
        st = solve_beta(ctx, e, H, a->y, a->n, a->nclasses);
    free(H);
    return st;
}

hyprof_status_t hyprof__elm_train(hyprof_ctx_t *ctx, hyprof_classifier_t *m, const double *x,
                                  const int *y, size_t n)
{
    hyprof__elm_t *e = &m->elm;
    size_t B = m->bands, L = e->neurons, K = m->nclasses;
    e->w = malloc(L * B * sizeof *e->w);
    e->bias = malloc(L * sizeof *e->bias);
    e->beta = malloc(L * K * sizeof *e->beta);
    if (!e->w || !e->bias || !e->beta)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, OP, "out of memory (%zu neurons)", L);
    uint64_t rng = e->seed;
    for (size_t i = 0; i < L * B; i++)
        e->w[i] = uniform(&rng);
    for (size_t k = 0; k < L; k++)
        e->bias[k] = uniform(&rng);
    hyprof__elm_solve_args_t a = {e, B, K, x, y, n};
    return hyprof__dispatch(ctx, OP, hyprof__cpu_elm_solve,
                            HYPROF_CUDA_IMPL(hyprof__cuda_elm_solve), &a);
}
