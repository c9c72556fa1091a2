/* 2-D DWT denoising of one plane on the CPU (the W-MCD seed's third stage):
 * multi-level separable Mallat transform with periodic extension (PyWavelets'
 * wavedec2/waverec2, mode='periodization'), universal threshold, soft or hard
 * thresholding of the details, inverse per level. Orthogonal wavelets only:
 * the inverse is the transpose of the analysis.
 *
 * One analysis step on a signal of length n (PyWavelets' convention): an odd
 * signal repeats its last sample (n' = n + 1), then for o < n'/2
 *   a[o] = sum_j lo[j] s[(F/2 + 2o - j) mod n'],  d[o] the same with hi.
 * The synthesis scatters a[o] lo[j] + d[o] hi[j] back to (F/2 + 2o - j) mod n'
 * and keeps the first n samples (waverec2 crops to the next level's size). */
#include "dwt_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int hyprof_dwt2_max_levels(size_t width, size_t height, const hyprof_wavelet_t *w)
{
    size_t n = width < height ? width : height, f1 = w && w->length > 1 ? w->length - 1 : 0;
    if (!f1)
        return 0;
    int l = 0;
    while ((f1 << (l + 1)) <= n)
        l++;
    return l;
}

static inline size_t half_up(size_t n) { return (n + 1) / 2; }

/* Analysis along columns (axis 0): x is h x w, lo/hi are half_up(h) x w. */
static void fwd_axis0(const double *x, size_t h, size_t w, const hyprof_wavelet_t *wv,
                      double *lo, double *hi)
{
    size_t np = h + (h & 1), h2 = np / 2, F = wv->length;
    for (size_t o = 0; o < h2; o++) {
        double *lr = lo + o * w, *hr = hi + o * w;
        memset(lr, 0, w * sizeof *lr);
        memset(hr, 0, w * sizeof *hr);
        for (size_t j = 0; j < F; j++) {
            long k = ((long)(F / 2 + 2 * o) - (long)j) % (long)np;
            size_t row = (size_t)(k < 0 ? k + (long)np : k);
            const double *xr = x + (row < h ? row : h - 1) * w;
            double cl = wv->dec_lo[j], ch = wv->dec_hi[j];
            for (size_t i = 0; i < w; i++) {
                lr[i] += cl * xr[i];
                hr[i] += ch * xr[i];
            }
        }
    }
}

/* Analysis along rows (axis 1): x is h x w, lo/hi are h x half_up(w). */
static void fwd_axis1(const double *x, size_t h, size_t w, const hyprof_wavelet_t *wv,
                      double *lo, double *hi)
{
    size_t np = w + (w & 1), w2 = np / 2, F = wv->length;
    for (size_t y = 0; y < h; y++) {
        const double *xr = x + y * w;
        for (size_t o = 0; o < w2; o++) {
            double sl = 0.0, sh = 0.0;
            for (size_t j = 0; j < F; j++) {
                long k = ((long)(F / 2 + 2 * o) - (long)j) % (long)np;
                size_t c = (size_t)(k < 0 ? k + (long)np : k);
                double v = xr[c < w ? c : w - 1];
                sl += wv->dec_lo[j] * v;
                sh += wv->dec_hi[j] * v;
            }
            lo[y * w2 + o] = sl;
            hi[y * w2 + o] = sh;
        }
    }
}

/* Synthesis along columns: a, d are h2 x w; out is h x w (h <= 2 h2). */
static void inv_axis0(const double *a, const double *d, size_t h2, size_t w,
                      const hyprof_wavelet_t *wv, size_t h, double *out)
{
    size_t np = 2 * h2, F = wv->length;
    memset(out, 0, h * w * sizeof *out);
    for (size_t o = 0; o < h2; o++) {
        const double *ar = a + o * w, *dr = d + o * w;
        for (size_t j = 0; j < F; j++) {
            long k = ((long)(F / 2 + 2 * o) - (long)j) % (long)np;
            size_t row = (size_t)(k < 0 ? k + (long)np : k);
            if (row >= h)
                continue;
            double *yr = out + row * w, cl = wv->dec_lo[j], ch = wv->dec_hi[j];
            for (size_t i = 0; i < w; i++)
                yr[i] += cl * ar[i] + ch * dr[i];
        }
    }
}

/* Synthesis along rows: a, d are h x w2; out is h x w (w <= 2 w2). */
static void inv_axis1(const double *a, const double *d, size_t h, size_t w2,
                      const hyprof_wavelet_t *wv, size_t w, double *out)
{
    size_t np = 2 * w2, F = wv->length;
    memset(out, 0, h * w * sizeof *out);
    for (size_t y = 0; y < h; y++) {
        const double *ar = a + y * w2, *dr = d + y * w2;
        double *yr = out + y * w;
        for (size_t o = 0; o < w2; o++)
            for (size_t j = 0; j < F; j++) {
                long k = ((long)(F / 2 + 2 * o) - (long)j) % (long)np;
                size_t c = (size_t)(k < 0 ? k + (long)np : k);
                if (c < w)
                    yr[c] += wv->dec_lo[j] * ar[o] + wv->dec_hi[j] * dr[o];
            }
    }
}

/* ---- median and threshold ---------------------------------------------------------- */

/* The k-th smallest of v[0..n) (Hoare quickselect; v is reordered so that
 * v[0..k) <= v[k]). */
static double select_kth(double *v, size_t n, size_t k)
{
    long lo = 0, hi = (long)n - 1, kk = (long)k;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                double t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (kk <= j)
            hi = j;
        else if (kk >= i)
            lo = i;
        else
            break;
    }
    return v[k];
}

double hyprof__universal_threshold(double *v, size_t n1, size_t npix)
{
    double med = select_kth(v, n1, n1 / 2);
    if (!(n1 & 1)) {
        /* the lower middle: the largest of the values before position n1/2 */
        double below = v[0];
        for (size_t i = 1; i < n1 / 2; i++)
            below = v[i] > below ? v[i] : below;
        med = (below + med) / 2.0;
    }
    return med / 0.6745 * sqrt(2.0 * log((double)npix));
}

static void threshold(double *d, size_t n, double lambda, int hard)
{
    for (size_t i = 0; i < n; i++) {
        double a = fabs(d[i]);
        if (hard)
            d[i] = a >= lambda ? d[i] : 0.0;
        else
            d[i] = a > lambda ? copysign(a - lambda, d[i]) : 0.0;
    }
}

/* ---- one plane ----------------------------------------------------------------------- */

int hyprof__wmcd_plane(const double *x, size_t width, size_t height,
                       const hyprof_wavelet_t *wv, const int levels[3], int hard, double *out)
{
    int J = levels[0];
    for (int k = 1; k < 3; k++)
        J = levels[k] > J ? levels[k] : J;
    size_t hs[64], ws[64], off[64], total = 0;
    hs[0] = height;
    ws[0] = width;
    for (int l = 1; l <= J; l++) {
        hs[l] = half_up(hs[l - 1]);
        ws[l] = half_up(ws[l - 1]);
    }
    /* per level l >= 1: approximation, then the details aa|ad, da|dd of size
     * hs[l] x ws[l]: [A, AD, DA, DD] */
    for (int l = 1; l <= J; l++) {
        off[l] = total;
        total += 4 * hs[l] * ws[l];
    }
    size_t n = width * height;
    double *c = malloc(total * sizeof *c);
    double *t0 = malloc(2 * (hs[1] * width + height * ws[1] + 2) * sizeof *t0);
    double *t1 = malloc(n * sizeof *t1), *t2 = malloc(n * sizeof *t2);
    int rc = -1;
    if (!c || !t0 || !t1 || !t2)
        goto done;
    const double *prev = x;
    for (int l = 1; l <= J; l++) {
        size_t h = hs[l - 1], w = ws[l - 1], m = hs[l] * ws[l];
        double *L = t0, *H = t0 + hs[l] * w, *A = c + off[l];
        fwd_axis0(prev, h, w, wv, L, H);
        fwd_axis1(L, hs[l], w, wv, A, A + m);         /* aa, ad */
        fwd_axis1(H, hs[l], w, wv, A + 2 * m, A + 3 * m); /* da, dd */
        prev = A;
    }
    size_t m1 = hs[1] * ws[1];
    memcpy(t1, c + off[1] + 3 * m1, m1 * sizeof *t1);
    for (size_t i = 0; i < m1; i++)
        t1[i] = fabs(t1[i]);
    double lambda = hyprof__universal_threshold(t1, m1, n);
    for (int l = 1; l <= J; l++)
        threshold(c + off[l] + hs[l] * ws[l], 3 * hs[l] * ws[l], lambda, hard);
    for (int k = 0; k < 3; k++) {
        int j = levels[k];
        const double *a = c + off[j];
        for (int l = j; l >= 1; l--) {
            size_t h = hs[l - 1], w = ws[l - 1], m = hs[l] * ws[l];
            const double *D = c + off[l] + m;
            double *L = t0, *H = t0 + hs[l] * w;
            inv_axis1(a, D, hs[l], ws[l], wv, w, L);              /* aa, ad -> L */
            inv_axis1(D + m, D + 2 * m, hs[l], ws[l], wv, w, H);  /* da, dd -> H */
            double *dst = l == 1 ? out + (size_t)k * n : (a == t1 ? t2 : t1);
            inv_axis0(L, H, hs[l], w, wv, h, dst);
            a = dst;
        }
    }
    rc = 0;
done:
    free(c);
    free(t0);
    free(t1);
    free(t2);
    return rc;
}
