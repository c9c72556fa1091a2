/* Unmixing steps shared by the CPU (algorithms/unmixing/) and CUDA
 * (kernels/unmixing/) backends, and the pieces the sspp and unmix
 * operations share. Data is float32 BSQ: pixel p of band b is x[b*npix + p]. */
#ifndef HYPROF_UNMIXING_IMPL_H
#define HYPROF_UNMIXING_IMPL_H

#include "../core/internal.h"
#include "hyprof/registry.h"
#include "hyprof/unmixing.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most endmembers any step accepts (registry range of --endmembers). */
#define HYPROF_MAX_ENDMEMBERS 256
/* The most the CUDA abundance kernel holds per thread. */
#define HYPROF_CUDA_MAX_ENDMEMBERS 32

/* Abundances: for every valid pixel, a = lsq_solve(G, M'y) (lsq.h), then
 * out band k = a_k (k < count), out band count = sqrt(mean_b (y_b - (M a)_b)^2);
 * M'y and the residual accumulate in double over bands in increasing order.
 * Masked pixels get nodata in every band. */
typedef struct {
    const float *x;
    const uint8_t *mask;
    size_t npix, bands, count;
    const double *M;   /* count x bands (endmember-major) */
    const double *G;   /* count x count: M M' */
    int method;        /* HYPROF__LSQ_* */
    float nodata;
    float *out;        /* npix * (count + 1), BSQ */
} hyprof_abund_args_t;

/* G = M M' (count x count) of an endmember set of `bands` values each, the
 * sums over bands in increasing order (fcls.c). */
void hyprof__endmember_gram(const hyprof_endmembers_t *em, size_t bands, double *G);

/* Spatial homogeneity: every band smoothed by the normalised Gaussian
 *   s = Gy*(Gx*(m x)) / Gy*(Gx*m)
 * (weights exp(-j^2/(2 sigma^2)), j = -r..r, r = floor(3 sigma + 0.5) as
 * scipy.ndimage's truncate=3, half-sample reflection at the borders), then
 * rmse(p) = sqrt(mean_b (x_b(p) - s_b(p))^2), accumulated in double over b in
 * increasing order; every sum in a fixed order without fused multiply-adds,
 * so both backends agree bit for bit.
 * Masked pixels: nodata. */
typedef struct {
    const float *x;
    const uint8_t *mask;
    size_t width, height, bands;
    double sigma;
    float nodata;
    float *rmse;       /* width*height */
} hyprof_homog_args_t;

/* Spectral purity from a fitted PCA (its first p components as skewers):
 * v_k(q) = (float) sum_b vectors[k][b] (x_b(q) - mean_b), in double over b in
 * increasing order; over the valid pixels lo_k = min v_k, hi_k = max v_k;
 * w = |v_k - mid_k| / half_k (mid = (lo+hi)/2, half = (hi-lo)/2, in double;
 * no weight when half = 0); purity = float sum over k in order of (float) w
 * for w >= theta, then rounded to a multiple of 1e-5 (the projections differ
 * between backends in their last bits; on that grid the fusion's purity ranks
 * come out the same). Masked pixels: 0. */
typedef struct {
    const float *x;
    const uint8_t *mask;
    size_t npix, bands, p;
    const double *mean;    /* bands */
    const double *vectors; /* p x bands, component-major */
    double theta;
    float *out;            /* npix */
} hyprof_purity_args_t;

/* K-means: the farthest-point initialisation (hyprof__kmeans_init), then
 * Lloyd's iterations: assignment to the nearest centre by squared Euclidean
 * distance in double (first centre on ties), centres as the double mean of
 * their pixels (an empty cluster keeps its centre), until no label changes or
 * `max_iter` iterations. Masked pixels get label -1. Distances accumulate
 * (x_b - c_b)^2 over b in increasing order without fused multiply-adds;
 * centre sums follow the fixed order of kmeans.c's update(). Both backends
 * therefore give identical labels. */
#define HYPROF_KMEANS_BLOCK 1024 /* pixels per partial sum of the centre update */

typedef struct {
    const float *x;
    const uint8_t *mask;
    size_t npix, bands, k;
    int max_iter;
    double *centres;   /* out: k x bands */
    int32_t *labels;   /* out: npix */
    double *dist;      /* out: npix, squared distance to the own centre (0 if masked) */
    size_t *init;      /* out: k initial pixels */
    int iterations;    /* out */
} hyprof_kmeans_args_t;

/* The initialisation over a backend's step (kmeans.c): the first centre is
 * the valid pixel farthest from `mean`, each next one the pixel farthest from
 * its nearest chosen centre (lowest index on ties). step(ctx, impl, ref, j,
 * &best) computes every valid pixel's squared distance d to ref, sets
 * mind = d when j <= 1 (j = 0: ref is the mean, j = 1: the first centre),
 * else mind = min(mind, d), and returns the first pixel of largest mind. */
typedef hyprof_status_t (*hyprof__kmeans_step_fn)(hyprof_ctx_t *ctx, void *impl,
                                                  const double *ref, size_t j, size_t *best);
hyprof_status_t hyprof__kmeans_init(hyprof_ctx_t *ctx, hyprof_kmeans_args_t *a,
                                    hyprof__kmeans_step_fn step, void *impl, const double *mean);

hyprof_status_t hyprof__cpu_abundances(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_abundances(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cpu_homogeneity(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_homogeneity(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cpu_kmeans(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cpu_purity(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_purity(hyprof_ctx_t *ctx, void *args);
hyprof_status_t hyprof__cuda_kmeans(hyprof_ctx_t *ctx, void *args);

/* ---- host-side pieces shared by sspp.c and unmix.c ---------------------------- */

/* K-means with the farthest-point initialisation: the first centre is the
 * valid pixel farthest from the mean spectrum, each next one the pixel
 * farthest from its nearest chosen centre (lowest index on ties). init gets
 * the k pixel indices, inertia the sum of squared distances. */
hyprof_status_t hyprof__kmeans(hyprof_ctx_t *ctx, const char *op, const float *x,
                               const uint8_t *mask, size_t npix, size_t bands, size_t k,
                               int max_iter, int32_t *labels, size_t *init, double *inertia,
                               int *iterations);

/* SSPP parameters and results (sspp.c). */
typedef struct {
    size_t p;                 /* endmembers: clusters and PCA components */
    double sigma, theta;
    size_t per_cluster;       /* candidates kept in each cluster */
    int kmeans_iter;
} hyprof_sspp_params_t;

typedef struct {
    float *rmse, *purity;     /* npix each */
    int32_t *labels;          /* npix, -1 masked */
    uint8_t *candidate;       /* npix */
    size_t ncandidates;
    size_t *init;             /* p: K-means initial pixels */
    double inertia;
    int iterations;
    double seconds[4];        /* homogeneity, purity, kmeans, fusion */
} hyprof_sspp_out_t;

/* Reads the SSPP arguments (--endmembers, --sigma, --theta, ...) of sspp or
 * unmix; --endmembers auto runs HySime on x. */
hyprof_status_t hyprof__sspp_params(hyprof_ctx_t *ctx, const char *op, const hyprof_args_t *args,
                                    const hyprof_cube_t *x, hyprof_sspp_params_t *prm);
hyprof_status_t hyprof__sspp(hyprof_ctx_t *ctx, const char *op, const hyprof_cube_t *bsq,
                             const hyprof_sspp_params_t *prm, hyprof_sspp_out_t *out);
void hyprof__sspp_out_free(hyprof_sspp_out_t *out);

/* Endmember extraction (extract.c) among the pixels idx[0..n) of a float32
 * BSQ cube: the p chosen pixel indices, in the order found. */
typedef enum { HYPROF__EXTRACT_NFINDR = 0, HYPROF__EXTRACT_VCA, HYPROF__EXTRACT_ATGP } hyprof__extract_t;
hyprof_status_t hyprof__extract(hyprof_ctx_t *ctx, const char *op, const float *x, size_t npix,
                                size_t bands, const size_t *idx, size_t n, size_t p,
                                hyprof__extract_t method, size_t *chosen);

/* Endmember refinement (refine.c, `--refine mean`): endmember e of em (the
 * spectra of the pixels chosen[e]) becomes the mean spectrum of the valid
 * pixels whose share of signal from it, by non-negative least squares on the
 * extracted spectra, is at least tau, chosen[e] always included; count[e]
 * gets their number. Host-side, deterministic: the same for both backends. */
hyprof_status_t hyprof__refine_mean(hyprof_ctx_t *ctx, const char *op, const float *x,
                                    const uint8_t *mask, size_t npix, size_t bands,
                                    const size_t *chosen, double tau, hyprof_endmembers_t *em,
                                    size_t *count);

/* The last hyprof__extract's step times in this thread: gather, ATGP (N-FINDR's
 * start; all of VCA with vca), N-FINDR's PCA, N-FINDR's sweeps (0 if not run). */
void hyprof__extract_seconds(double sec[4]);

/* HySime (hysime.c): the signal subspace dimension of the valid pixels,
 * between 2 and pmax. */
hyprof_status_t hyprof__hysime(hyprof_ctx_t *ctx, const char *op, const float *x,
                               const uint8_t *mask, size_t npix, size_t bands, size_t pmax,
                               size_t *p);

/* The unmixing chain reads the same cube in several CUDA steps (homogeneity,
 * K-means, abundances): between hold and release, the first of them leaves
 * its upload on the device for the others (per thread; only for that exact
 * host array; when it fits in the device-memory budget). No-ops without CUDA. */
void hyprof__unmix_hold(const float *x, const uint8_t *mask, size_t npix, size_t bands);
void hyprof__unmix_release(void);

/* The purity step's PCA from the chain's device copy of x (CUDA): the masked
 * mean, the covariance over the nvalid valid pixels (divided by nvalid - 1)
 * and its eigen-decomposition on the device; out: mean (bands), the first p
 * components (p x bands, by decreasing eigenvalue, each with its
 * largest-magnitude loading positive, as hyprof_pca_fit orders and signs
 * them) and the total variance. Returns 0, doing nothing, when x is not on
 * the device (then the caller fits with hyprof_pca_fit); else 1 with the
 * step's status in *st. Always 0 without CUDA. */
int hyprof__unmix_pca(hyprof_ctx_t *ctx, const float *x, const uint8_t *mask, size_t npix,
                      size_t bands, size_t nvalid, size_t p, double *mean, double *vectors,
                      double *total, hyprof_status_t *st);

/* Device times of the chain's CUDA stages (CUDA events), in seconds, for the
 * result metadata: "upload=.. homogeneity=.. ..." for the stages that ran on
 * the device since hyprof__unmix_hold, into buf; 0 (buf empty) when none did. */
int hyprof__unmix_device_seconds(char *buf, size_t size);

/* D[i*bands + b] = x[b*npix + idx[i]] (the candidates, pixel-major) from the
 * chain's device copy of x: 1 when done, 0 when x is not on the device (the
 * caller reads the host cube; the values are the same). Always 0 without CUDA. */
int hyprof__unmix_gather(const float *x, size_t npix, size_t bands, const size_t *idx, size_t n,
                         float *D);

/* memcpy by `threads` OpenMP threads (the CUDA upload's copies into
 * page-locked staging: one thread does not keep up with the DMA). */
void hyprof__unmix_copy(void *dst, const void *src, size_t bytes, int threads);

/* Seconds since an arbitrary origin (stage timings in the result metadata). */
double hyprof__now(void);

#ifdef __cplusplus
}
#endif
#endif
