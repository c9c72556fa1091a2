/* The operation registry: every operation and every parameter, declared once.
 * The CLI, `hyprof describe --json`, the GDAL driver and the QGIS provider
 * are generated from this table. */
#include "internal.h"
#include "ops.h"

#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define NOLIMIT 0.0, 0.0

static const hyprof_param_t common_params[] = {
    {"backend", HYPROF_PARAM_CHOICE, "auto", NOLIMIT, "auto|cpu|cuda",
     "Where to compute: auto (the GPU when present, else the CPU), cpu, or cuda "
     "(fails instead of falling back). $HYPROF_BACKEND overrides auto.",
     HYPROF_PARAM_ADVANCED},
    {"device", HYPROF_PARAM_INT, "0", 0, 255, NULL, "CUDA device number.",
     HYPROF_PARAM_ADVANCED},
    {"threads", HYPROF_PARAM_INT, "0", 0, 4096, NULL,
     "CPU threads (0: all cores).", HYPROF_PARAM_ADVANCED},
    {"progress", HYPROF_PARAM_CHOICE, NULL, NOLIMIT, "none|bar|json",
     "Progress on stderr: none, a terminal bar (the default on a terminal) or one "
     "JSON object per line.", HYPROF_PARAM_ADVANCED},
    {"overwrite", HYPROF_PARAM_BOOL, "false", NOLIMIT, NULL,
     "Replace an existing output file.", HYPROF_PARAM_ADVANCED},
};

/* Parameters shared by several operations, each declared once here. */
#define P_COMPONENTS                                                                   \
    {"components", HYPROF_PARAM_INT, "7", 1, 100000, NULL,                             \
     "Number of principal components to keep (at most the band count).", 0}
#define P_LEVELS                                                                       \
    {"levels", HYPROF_PARAM_INT, "4", 1, 30, NULL,                                     \
     "Decomposition levels: the output has ceil(bands / 2^levels) bands.", 0}
#define P_WAVELET                                                                      \
    {"wavelet", HYPROF_PARAM_CHOICE, "haar", NOLIMIT,                                  \
     "haar|db2|db3|db4|db6|db8|sym4|coif2|bior2.2|bior4.4",                            \
     "Wavelet (PyWavelets names; bior4.4 is CDF 9/7). Haar, the default, never mixes "  \
     "the two ends of the spectrum for even lengths; longer filters do, through the "   \
     "periodic extension.", 0}
/* The spectral reduction of profile operations: pca uses components, dwt
 * uses levels and wavelet, none takes the input bands as they are. */
#define P_REDUCTION(def)                                                               \
    {"reduction", HYPROF_PARAM_CHOICE, def, NOLIMIT, "pca|dwt|none",                   \
     "Features the profiles are built on: principal components (--components), "       \
     "wavelet approximation bands (--levels, --wavelet) or the input bands.", 0},       \
        P_COMPONENTS, P_LEVELS, P_WAVELET

static const hyprof_param_t pca_params[] = {
    P_COMPONENTS,
    {"model", HYPROF_PARAM_FILE_IN, NULL, NOLIMIT, "PCA model (*.pca)",
     "Apply this saved PCA model instead of fitting one (the input must have the "
     "band count it was fitted on).", 0},
    {"save-model", HYPROF_PARAM_FILE_OUT, NULL, NOLIMIT, "PCA model (*.pca)",
     "Save the fitted model to this file, to apply it to other scenes.", 0},
};

static const hyprof_param_t dwt_params[] = {
    P_LEVELS,
    P_WAVELET,
};

static const hyprof_param_t eadp_params[] = {
    P_REDUCTION("pca"),
    {"count", HYPROF_PARAM_INT, "8", 1, 10000, NULL,
     "Number of diffusion times C: T_i = step * i, i = 1..C.", 0},
    {"step", HYPROF_PARAM_FLOAT, "65", 1e-6, 1e9, NULL,
     "Diffusion time increment between profile components.", 0},
    {"times", HYPROF_PARAM_FLOAT_LIST, NULL, 1e-6, 1e9, NULL,
     "Explicit increasing diffusion times T1,T2,... (replace --count and --step).", 0},
    {"sigma", HYPROF_PARAM_FLOAT, "1", 1e-3, 1000, NULL,
     "Standard deviation of the Gaussian pre-smoothing before the gradient.", 0},
    {"contrast-percentile", HYPROF_PARAM_FLOAT, "0.7", 1e-6, 0.999999, NULL,
     "Contrast k is this percentile of the gradient magnitude over valid pixels.", 0},
    {"contrast", HYPROF_PARAM_FLOAT, NULL, 1e-300, 1e300, NULL,
     "Contrast k given directly (replaces --contrast-percentile).", 0},
    {"cycles", HYPROF_PARAM_INT, "1", 1, 1000, NULL,
     "FED cycles per time increment: more cycles, closer to the exact diffusion "
     "(measured: 8 is within about 2 % at any time, 1 % over a whole profile).", 0},
    {"diffusivity", HYPROF_PARAM_CHOICE, "g2", NOLIMIT, "g1|g2|g3",
     "g1 = exp(-|grad|^2/k^2), g2 = 1/(1+|grad|^2/k^2) (Perona-Malik), g3 = Weickert.",
     HYPROF_PARAM_ADVANCED},
};

static const hyprof_param_t eap_params[] = {
    P_REDUCTION("dwt"),
    {"features", HYPROF_PARAM_INT, "8", 1, 100000, NULL,
     "With --reduction dwt: the number of wavelet features wanted. The level count L "
     "whose approximation band count ceil(bands / 2^L) is closest to it is used (ties: "
     "more bands), so the whole spectrum is kept; --levels sets L instead.", 0},
    {"attribute", HYPROF_PARAM_STRING, "area", NOLIMIT, NULL,
     "area, std, diagonal or inertia; several, comma-separated (area,std), concatenate "
     "their profiles (an extended multi-attribute profile, the band appearing once).", 0},
    {"thresholds", HYPROF_PARAM_FLOAT_LIST, NULL, 0, 1e12, NULL,
     "Increasing thresholds of the attribute when only one is chosen (replace its "
     "--*-thresholds default). A component is kept when its attribute is >= the "
     "threshold; 0 keeps everything.", 0},
    {"area-thresholds", HYPROF_PARAM_FLOAT_LIST, "36,144,324,576,900,1296,1764", 0, 1e12, NULL,
     "Area thresholds in pixels (the seed paper's: squares of side 6, 12, ..., 42).", 0},
    {"std-thresholds", HYPROF_PARAM_FLOAT_LIST, "2,4,6,8,10,12,14", 0, 1e12, NULL,
     "Standard deviation thresholds, in 8-bit levels whatever --quantisation (scaled by "
     "257 at 16 bits). Min rule: a component is kept only if it and every component "
     "containing it pass.", 0},
    {"diagonal-thresholds", HYPROF_PARAM_FLOAT_LIST, "10,25,50,100", 0, 1e12, NULL,
     "Bounding-box diagonal thresholds in pixels.", 0},
    {"inertia-thresholds", HYPROF_PARAM_FLOAT_LIST, "0.2,0.3,0.4,0.5", 0, 1e12, NULL,
     "Moment of inertia thresholds (normalised by the squared area: 1/6 for one pixel, "
     "about 0.16 for a disk, more for elongated shapes). Min rule.", 0},
    {"connectivity", HYPROF_PARAM_CHOICE, "4", NOLIMIT, "4|8",
     "Pixel connectivity of the components: 4 (edges) or 8 (edges and corners).", 0},
    {"quantisation", HYPROF_PARAM_CHOICE, "8", NOLIMIT, "8|16",
     "Bits of the levels each feature is linearly scaled to from its valid min and max "
     "(8: 0..255, as in the seeds; 16: 0..65535).", 0},
};

/* SSPP (sspp, unmix): the endmember count and the preprocessing. */
#define P_ENDMEMBERS                                                                   \
    {"endmembers", HYPROF_PARAM_STRING, "auto", NOLIMIT, NULL,                         \
     "Number of endmembers p (2 up to the band count), or auto: estimated by HySime "   \
     "(the signal subspace dimension, noise from band-on-band regression).", 0}
#define P_SSPP                                                                         \
    {"sigma", HYPROF_PARAM_FLOAT, "1.2", 1e-3, 100, NULL,                              \
     "Standard deviation (pixels) of the Gaussian filter of the spatial homogeneity "   \
     "(truncated at 3 sigma, reflecting borders).", 0},                                 \
    {"theta", HYPROF_PARAM_FLOAT, "0.7", 0, 1, NULL,                                   \
     "Purity weights below this are set to 0 (a weight is 1 at a principal "            \
     "component's extreme projections and 0 at their midpoint).", 0},                   \
    {"candidates-per-cluster", HYPROF_PARAM_INT, "100", 1, 100000000, NULL,            \
     "Candidate pixels kept in each K-means cluster: those with the best sum of their " \
     "homogeneity rank (lowest RMSE first) and purity rank (highest first).", 0},       \
    {"kmeans-iterations", HYPROF_PARAM_INT, "50", 1, 100000, NULL,                     \
     "Most Lloyd iterations of the K-means clustering (it stops earlier when no "       \
     "label changes).", HYPROF_PARAM_ADVANCED}

static const hyprof_param_t sspp_params[] = {
    P_ENDMEMBERS,
    P_SSPP,
};

static const hyprof_param_t unmix_params[] = {
    P_ENDMEMBERS,
    {"sspp", HYPROF_PARAM_BOOL, "false", NOLIMIT, NULL,
     "Extract the endmembers among SSPP's candidate pixels only (--sigma, --theta, "
     "--candidates-per-cluster) instead of among all pixels.", 0},
    P_SSPP,
    {"extract", HYPROF_PARAM_CHOICE, "nfindr", NOLIMIT, "nfindr|vca|atgp",
     "Endmember extraction: N-FINDR (largest simplex volume, started from ATGP), VCA "
     "(vertex component analysis, fixed seed) or ATGP (orthogonal projections).", 0},
    {"abundances", HYPROF_PARAM_CHOICE, "fcls", NOLIMIT, "fcls|nnls|ucls",
     "Abundance estimation per pixel: fully constrained (non-negative, sum to one), "
     "non-negative or unconstrained least squares.", 0},
    {"model", HYPROF_PARAM_FILE_IN, NULL, NOLIMIT, "Endmember spectra (*.csv)",
     "Apply this saved endmember set (the CSV an earlier unmix wrote) instead of "
     "extracting one; the input must have its bands.", 0},
    {"endmembers-csv", HYPROF_PARAM_FILE_OUT, NULL, NOLIMIT, "Endmember spectra (*.csv)",
     "Where to save the endmember spectra as CSV (band, wavelength, E1..Ep); the CLI "
     "writes OUTPUT with the .csv extension when not given.", HYPROF_PARAM_BESIDE_OUTPUT},
    {"endmembers-json", HYPROF_PARAM_FILE_OUT, NULL, NOLIMIT, "Endmember spectra (*.json)",
     "Where to save the endmember spectra as JSON, with wavelengths and pixel "
     "positions; the CLI writes OUTPUT with the .json extension when not given.",
     HYPROF_PARAM_BESIDE_OUTPUT},
    {"wavelengths", HYPROF_PARAM_FLOAT_LIST, NULL, 0, 1e12, NULL,
     "Band wavelengths recorded in the endmember files (the CLI passes the input's "
     "band metadata when it has one per band).", HYPROF_PARAM_ADVANCED},
    {"wavelength-units", HYPROF_PARAM_STRING, NULL, NOLIMIT, NULL,
     "Units of --wavelengths (the CLI passes the input's).", HYPROF_PARAM_ADVANCED},
};

static const hyprof_op_t ops[] = {
    {"pca", "Feature extraction", "Principal component analysis of the spectra",
     "Centres each band on its mean over valid pixels, takes the eigenvectors of the "
     "covariance matrix (by decreasing eigenvalue, each signed so that its "
     "largest-magnitude loading is positive) and projects every pixel on the first "
     "N of them. Nodata pixels are left out of the statistics and stay nodata. The "
     "fitted model can be saved and applied to other scenes with the same bands.",
     pca_params, N(pca_params), hyprof__run_pca,
     "raster: one float32 band per component (PC1, PC2, ...)"},
    {"dwt", "Feature extraction", "Spectral wavelet feature extraction",
     "Decomposes every pixel's spectrum with a 1-D discrete wavelet transform "
     "(Mallat filter bank, periodic extension, as PyWavelets' "
     "mode='periodization') and keeps the approximation coefficients after L "
     "levels: a smooth, shorter spectrum.",
     dwt_params, N(dwt_params), hyprof__run_dwt,
     "raster: ceil(bands / 2^levels) float32 bands (A1, A2, ...)"},
    {"eadp", "Profiles", "Extended anisotropic diffusion profile",
     "For each feature band (principal components by default) the anisotropic "
     "diffusion profile {X, Diff(X, T1), ..., Diff(X, TC)}: Perona-Malik diffusion "
     "with the diffusivity computed once from the Gaussian-smoothed band (Scharr "
     "gradient, contrast k from a percentile), solved by Fast Explicit Diffusion "
     "with reflecting borders; each time continues from the previous one. Mass is "
     "conserved and the range never grows. After Lopez-Fandino et al., EADP.",
     eadp_params, N(eadp_params), hyprof__run_eadp,
     "raster: features x (count + 1) float32 bands (PC1, PC1 T=65, ...)"},
    {"eap", "Profiles", "Extended attribute profile",
     "For each feature band (wavelet approximation bands by default), quantised to "
     "8 bits from its valid min and max, the attribute closings (largest threshold "
     "first), the band and the attribute openings (smallest first): connected "
     "components of the threshold sets whose attribute (area, standard deviation, "
     "bounding-box diagonal, moment of inertia) is below a threshold are removed, "
     "merging into their parent (increasing attributes) or by the min rule (std, "
     "inertia). One max-tree per band and polarity gives every threshold; area "
     "filters equal scikit-image's area_opening/area_closing. After Bascoy et al., "
     "EAP on GPU.",
     eap_params, N(eap_params), hyprof__run_eap,
     "raster: features x (1 + 2 x thresholds) float32 bands of levels (A1 area closing "
     "1764, ..., A1, A1 area opening 36, ...)"},
    {"sspp", "Unmixing", "Spatial-spectral preprocessing: endmember candidates",
     "SSPP (Martin and Plaza; Bernabe et al. on GPU): the spatial homogeneity of every "
     "pixel (RMSE between its spectrum and the Gaussian-filtered one, lower is more "
     "homogeneous), its spectral purity (sum over the first p principal components of "
     "a weight that is 1 at the extreme projections, 0 at their midpoint and cut below "
     "theta), K-means into p clusters (farthest-point initialisation) and, in each "
     "cluster, the candidates: the pixels with the best sum of homogeneity and purity "
     "ranks. Deterministic.",
     sspp_params, N(sspp_params), hyprof__run_sspp,
     "raster: 4 float32 bands: candidate (1/0), homogeneity RMSE, purity, cluster (1..p)"},
    {"unmix", "Unmixing", "Endmembers and abundance maps",
     "Linear spectral unmixing: the number of endmembers (given or by HySime), "
     "optionally SSPP candidates, endmember extraction (N-FINDR, VCA or ATGP) or a "
     "saved endmember set, then the abundances of every pixel by fully constrained "
     "(default), non-negative or unconstrained least squares (exact active-set "
     "solvers), and the reconstruction RMSE. The endmember spectra are saved beside "
     "OUTPUT as CSV and JSON, with the band wavelengths.",
     unmix_params, N(unmix_params), hyprof__run_unmix,
     "raster: p float32 abundance bands (E1 abundance, ...) and RMSE; plus the endmember "
     "spectra in OUTPUT.csv and OUTPUT.json (OUTPUT's extension replaced; "
     "--endmembers-csv/--endmembers-json name them)"},
};

size_t hyprof_op_count(void) { return N(ops); }

const hyprof_op_t *hyprof_op_at(size_t index) { return index < N(ops) ? &ops[index] : NULL; }

const hyprof_op_t *hyprof_op_find(const char *name)
{
    for (size_t i = 0; name && i < N(ops); i++)
        if (strcmp(ops[i].name, name) == 0)
            return &ops[i];
    return NULL;
}

const hyprof_param_t *hyprof_op_param(const hyprof_op_t *op, const char *name)
{
    for (size_t i = 0; op && name && i < op->nparams; i++)
        if (strcmp(op->params[i].name, name) == 0)
            return &op->params[i];
    return NULL;
}

const hyprof_param_t *hyprof_common_params(size_t *count)
{
    if (count)
        *count = N(common_params);
    return common_params;
}

const char *hyprof_param_type_name(hyprof_param_type_t type)
{
    switch (type) {
    case HYPROF_PARAM_INT: return "int";
    case HYPROF_PARAM_FLOAT: return "float";
    case HYPROF_PARAM_CHOICE: return "choice";
    case HYPROF_PARAM_STRING: return "string";
    case HYPROF_PARAM_INT_LIST: return "int_list";
    case HYPROF_PARAM_FLOAT_LIST: return "float_list";
    case HYPROF_PARAM_BOOL: return "bool";
    case HYPROF_PARAM_FILE_IN: return "file_in";
    case HYPROF_PARAM_FILE_OUT: return "file_out";
    case HYPROF_PARAM_RASTER_IN: return "raster_in";
    }
    return "unknown";
}

hyprof_status_t hyprof_op_run(hyprof_ctx_t *ctx, const hyprof_op_t *op,
                              const hyprof_args_t *args, const hyprof_cube_t *in,
                              hyprof_result_t *out)
{
    if (!op || !args || hyprof_args_op(args) != op)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op ? op->name : "run",
                             "arguments do not belong to this operation");
    if (!op->run)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op->name,
                             "this operation does not map a raster to a raster");
    if (hyprof_args_check((hyprof_args_t *)args) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op->name, "%s",
                             hyprof_args_error(args));
    hyprof_status_t st = op->run(ctx, args, in, out);
    if (st != HYPROF_OK)
        hyprof_result_free(out);
    return st;
}
