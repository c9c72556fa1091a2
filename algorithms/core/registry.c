/* The operation registry: every operation and every parameter, declared once.
 * The CLI, `hyprof describe --json`, the GDAL driver and the QGIS provider
 * are generated from this table. */
#include "internal.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* An operation that leaves out the last fields of hyprof_op_t (positionals)
 * takes them as NULL: the usual INPUT OUTPUT. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define NOLIMIT 0.0, 0.0

static const hyprof_param_t common_params[] = {
    {"backend", HYPROF_PARAM_CHOICE, "auto", NOLIMIT, "auto|cpu|cuda",
     "Where to compute: auto (the GPU when present, else the CPU; the spectral DWT, "
     "bound by the copies to the GPU, on 8 or more CPU threads; on the command line, a "
     "run the CPU ends before the GPU would have started), cpu, or cuda (fails instead "
     "of falling back). $HYPROF_BACKEND overrides auto.",
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
    {"of", HYPROF_PARAM_STRING, NULL, NOLIMIT, NULL,
     "Format of the raster outputs, a GDAL driver's short name (GTiff, COG, PNG, ENVI...). "
     "Default: the one the output's extension names, as gdal_translate chooses it (GTiff "
     "for .tif or no extension).", HYPROF_PARAM_ADVANCED},
    {"co", HYPROF_PARAM_STRING, NULL, NOLIMIT, NULL,
     "Creation option NAME=VALUE of the output format's driver (e.g. COMPRESS=ZSTD); "
     "repeat it for several.", HYPROF_PARAM_ADVANCED},
    {"overviews", HYPROF_PARAM_BOOL, "false", NOLIMIT, NULL,
     "Build internal overviews in GTiff outputs (nearest for class maps, average for "
     "profiles); COG outputs always have them.", HYPROF_PARAM_ADVANCED},
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

/* The wavelet feature count of profile operations with --reduction dwt
 * (hyprof__reduce_features). */
#define P_FEATURES(def)                                                                \
    {"features", HYPROF_PARAM_INT, def, 1, 100000, NULL,                               \
     "With --reduction dwt: the number of wavelet features wanted. The level count L "  \
     "whose approximation band count ceil(bands / 2^L) is closest to it is used (ties: " \
     "more bands), so the whole spectrum is kept; --levels sets L instead.", 0}

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
    {"precision", HYPROF_PARAM_CHOICE, "float", NOLIMIT, "float|double",
     "Arithmetic of the diffusion steps on CUDA: float (faster; within 1e-4 of double, "
     "relative to the band's largest value) or double (the CPU backend's result, to the "
     "last bit with g2). The CPU backend computes in double either way.",
     HYPROF_PARAM_ADVANCED},
};

static const hyprof_param_t eap_params[] = {
    P_REDUCTION("dwt"),
    P_FEATURES("8"),
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

/* EMP and W-MCD (morphology/emp.c, morphology/wmcd.c). The spectral
 * reduction already owns --levels and --wavelet, so the 2-D denoising has
 * its own --denoise-levels and --denoise-wavelet. */
#define P_EMP                                                                          \
    P_REDUCTION("dwt"), P_FEATURES("4"),                                               \
    {"radii", HYPROF_PARAM_INT_LIST, "1,3,5,7", 1, 10000, NULL,                        \
     "Strictly increasing radii of the structuring elements (2r+1 at most the "         \
     "image's smaller side).", 0},                                                      \
    {"se", HYPROF_PARAM_CHOICE, "disk", NOLIMIT, "disk|square|diamond",                \
     "Structuring element of radius r: disk (x^2 + y^2 <= r^2, scikit-image's "         \
     "disk(r)), square (side 2r+1) or diamond (|x| + |y| <= r).", 0},                   \
    {"devices", HYPROF_PARAM_STRING, NULL, NOLIMIT, NULL,                              \
     "CUDA devices sharing the work: a list like 0,1, or all (default: --device "       \
     "only). Each takes a block of rows for the spectral DWT, then a share of the "     \
     "feature bands for the profiles. The output does not depend on it.",              \
     HYPROF_PARAM_ADVANCED}

static const hyprof_param_t emp_params[] = {
    P_EMP,
};

static const hyprof_param_t wmcd_params[] = {
    P_EMP,
    {"denoise-wavelet", HYPROF_PARAM_CHOICE, "haar", NOLIMIT,
     "haar|db2|db3|db4|db6|db8|sym4|coif2",
     "Orthogonal wavelet of the 2-D denoising (PyWavelets names).", 0},
    {"denoise-levels", HYPROF_PARAM_STRING, "auto", NOLIMIT, NULL,
     "Three 2-D decomposition levels j1,j2,j3, or auto: 1, floor(log2(w)/2) and "
     "floor(log2(w))-1 with w the image's smaller side (the seed's). Each level j "
     "gives one denoised band per EMP band.", 0},
    {"threshold", HYPROF_PARAM_CHOICE, "soft", NOLIMIT, "soft|hard",
     "Thresholding of the detail coefficients by the universal threshold "
     "sigma sqrt(2 ln n), sigma = median(|HH1|) / 0.6745: soft shrinks them by it, "
     "hard zeroes those below it.", 0},
};

/* Classification (train, classify, assess, split). */
static const hyprof_param_t train_params[] = {
    {"labels", HYPROF_PARAM_RASTER_IN, NULL, NOLIMIT, "Label raster (*.tif)",
     "Training labels on the features' grid: class values 1..65535, 0 or nodata = "
     "unlabelled. Its colour table and category names become the classes' colours and "
     "names. Give --labels or --samples.", 0},
    {"samples", HYPROF_PARAM_VECTOR_IN, NULL, NOLIMIT,
     "Vector layer (*.gpkg *.shp *.geojson *.kml)",
     "Training samples as points or polygons in any CRS: reprojected and rasterised on the "
     "features' grid (a polygon takes the pixels whose centre it contains; a point, its "
     "pixel).", 0},
    {"class-field", HYPROF_PARAM_FIELD, NULL, NOLIMIT, "samples",
     "With --samples: the attribute holding the class, integers 1..65535 or names "
     "(numbered 1, 2, ... in sorted order and kept as the class names).", 0},
    {"layer", HYPROF_PARAM_STRING, NULL, NOLIMIT, NULL,
     "With --samples: the layer to read (default: the first).", HYPROF_PARAM_ADVANCED},
    {"classifier", HYPROF_PARAM_CHOICE, "svm", NOLIMIT, "svm|elm",
     "svm: RBF C-SVC by LIBSVM with C and gamma chosen by cross-validation; elm: extreme "
     "learning machine (sigmoid hidden layer, ridge output weights).", 0},
    {"grid", HYPROF_PARAM_STRING, "default", NOLIMIT, NULL,
     "SVM C and gamma: 'default' (log2 C = -5..15, log2 gamma = -15..3, step 2, chosen by "
     "cross-validated accuracy) or lists 'C=1,10,100,gamma=0.5,2' (one of each: no "
     "cross-validation).", 0},
    {"folds", HYPROF_PARAM_INT, "5", 2, 100, NULL,
     "Cross-validation folds (stratified by class).", 0},
    {"scale", HYPROF_PARAM_CHOICE, "minmax", NOLIMIT, "minmax|none",
     "Feature scaling: every band to [-1, 1] from the training pixels' min and max, or none.",
     0},
    {"seed", HYPROF_PARAM_INT, "1", 0, 4294967295.0, NULL,
     "Seed of the cross-validation folds and the ELM's input weights.", 0},
    {"neurons", HYPROF_PARAM_INT, "500", 1, 100000, NULL,
     "ELM hidden neurons (the W-MCD paper uses 300 to 800).", 0},
    {"elm-c", HYPROF_PARAM_FLOAT, "1024", 1e-12, 1e15, NULL,
     "ELM regularisation C: output weights (H'H + I/C)^-1 H'T.", HYPROF_PARAM_ADVANCED},
    {"search", HYPROF_PARAM_STRING, NULL, NOLIMIT, NULL,
     "Choose the features by cross-validation: FEATURES is then the raw cube, and the "
     "candidates are 'default' (EADP, EAP area/std, EMP and W-MCD at several scales, alone "
     "and stacked with 10 principal components; see docs/search.md) or recipes separated "
     "by ';', each 'OP NAME=VALUE ...' joined by '+' (e.g. 'eadp step=20 + pca "
     "components=7;emp radii=1,2,3'). Folds (--folds, --seed) never split a group of "
     "touching training pixels of one class; the model records the winning recipe (or the "
     "recipes of the fusion --fusion chose), so classify computes it from the raw cube.", 0},
    {"fusion", HYPROF_PARAM_CHOICE, "auto", NOLIMIT, "auto|none",
     "With --search: auto also scores, on the same folds, decision fusions of the "
     "candidates (a plurality vote of several profiles' classifiers, with or without a 3x3 "
     "majority filter of the map) and keeps the most accurate, which may be the best "
     "candidate alone; none keeps the best candidate alone (a smaller model, one profile to "
     "compute when classifying).", 0},
    {"search-report", HYPROF_PARAM_FILE_OUT, NULL, NOLIMIT, "Search report (*.json *.html)",
     "With --search: the candidates tried, their cross-validated accuracy, C, gamma and "
     "time, how the folds were formed, and the fusions scored, as JSON (or HTML for a .html "
     "name).", 0},
    {"fold-map", HYPROF_PARAM_FILE_OUT, NULL, NOLIMIT, "GeoTIFF (*.tif)",
     "With --search: a class map of the cross-validation fold (1..folds) of every training "
     "pixel.", HYPROF_PARAM_ADVANCED},
};

static const hyprof_param_t classify_params[] = {
    {"model", HYPROF_PARAM_FILE_IN, NULL, NOLIMIT, "Classifier model (*.model)",
     "The model written by 'hyprof train' (the input must have its band count).",
     HYPROF_PARAM_REQUIRED},
    {"probabilities", HYPROF_PARAM_FILE_OUT, NULL, NOLIMIT, "GeoTIFF (*.tif)",
     "Also write one float32 band per class: the fraction of the one-vs-one votes the class "
     "won (SVM) or the softmax of the output layer (ELM).", 0},
};

static const hyprof_param_t assess_params[] = {
    {"reference", HYPROF_PARAM_RASTER_IN, NULL, NOLIMIT, "Reference raster (*.tif)",
     "Reference class map on the same grid (class values > 0; 0 or nodata are not scored). "
     "Give --reference or --reference-vector.", 0},
    {"reference-vector", HYPROF_PARAM_VECTOR_IN, NULL, NOLIMIT,
     "Vector layer (*.gpkg *.shp *.geojson *.kml)",
     "Reference as points or polygons in any CRS: reprojected and rasterised on the class "
     "map's grid (a polygon takes the pixels whose centre it contains; a point, its pixel).",
     0},
    {"class-field", HYPROF_PARAM_FIELD, NULL, NOLIMIT, "reference-vector",
     "With --reference-vector: the attribute holding the class, integers 1..65535 or names "
     "(then matched by name).", 0},
    {"layer", HYPROF_PARAM_STRING, NULL, NOLIMIT, NULL,
     "With --reference-vector: the layer to read (default: the first).",
     HYPROF_PARAM_ADVANCED},
    {"match", HYPROF_PARAM_CHOICE, "auto", NOLIMIT, "auto|names|numbers",
     "How classes of the class map and the reference are paired: names (equal names, case "
     "and whitespace ignored), numbers (equal class values), or auto: names when both "
     "carry class names, else numbers. The report says which, and names the classes "
     "without a partner.", 0},
    {"json", HYPROF_PARAM_BOOL, "false", NOLIMIT, NULL,
     "Print the report as JSON on stdout instead of text.", 0},
    {"html", HYPROF_PARAM_FILE_OUT, NULL, NOLIMIT, "HTML report (*.html)",
     "Write an HTML report: accuracies, the confusion matrix as a picture and a thumbnail "
     "of the class map.", 0},
};

static const hyprof_param_t split_params[] = {
    {"reference", HYPROF_PARAM_RASTER_IN, NULL, NOLIMIT, "Reference raster (*.tif)",
     "Reference class map to split (class values > 0). Give --reference or --samples.", 0},
    {"samples", HYPROF_PARAM_VECTOR_IN, NULL, NOLIMIT,
     "Vector layer (*.gpkg *.shp *.geojson *.kml)",
     "Samples as points or polygons to split by feature: TRAIN and TEST are then vector "
     "files (GeoPackage, GeoJSON or FlatGeobuf by their extension) holding whole features, "
     "so no polygon is on both sides.", 0},
    {"class-field", HYPROF_PARAM_FIELD, NULL, NOLIMIT, "samples",
     "With --samples: the attribute holding the class, integers 1..65535 or names (classes "
     "in sorted order).", 0},
    {"layer", HYPROF_PARAM_STRING, NULL, NOLIMIT, NULL,
     "With --samples: the layer to read (default: the first).", HYPROF_PARAM_ADVANCED},
    {"per-class", HYPROF_PARAM_FLOAT, NULL, 1e-9, 1e9, NULL,
     "Training pixels (with --samples: features) per class: a count (>= 1) or a fraction "
     "of the class (< 1).", 0},
    {"preset", HYPROF_PARAM_CHOICE, "none", NOLIMIT, "none|eadp-table1",
     "eadp-table1: the EADP paper's Indian Pines training counts (Table I: 15 for classes "
     "1, 7 and 9, 50 for the others); with --seed 1992 it gives "
     "samples/indian_pines_train.tif.", 0},
    {"seed", HYPROF_PARAM_INT, "1", 0, 4294967295.0, NULL,
     "Seed of numpy.random.default_rng: the same seed gives the same split as NumPy.", 0},
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
    {"refine", HYPROF_PARAM_CHOICE, "none", NOLIMIT, "none|mean",
     "After extraction: none keeps each endmember as the pixel found (the papers' "
     "method); mean replaces it by the mean spectrum of the valid pixels pure in it "
     "(--refine-purity), which averages out the noise and variability of the single "
     "extreme pixel (dark, low-SNR materials gain most). The pixel positions recorded "
     "stay those of the pixels found.", 0},
    {"refine-purity", HYPROF_PARAM_FLOAT, "0.9", 0.5, 1, NULL,
     "With --refine mean, a pixel is pure in an endmember when at least this share of "
     "its signal comes from it (non-negative least squares on the extracted spectra, "
     "each abundance weighted by its spectrum's norm); lower values average more "
     "pixels, and more mixed ones.", 0},
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

/* cpu_ns (the last field of pca, dwt, eadp, eap, emp, wmcd and unmix): the
 * CPU backend's compute stage at default parameters times its 16 threads, per
 * voxel, at the Houston and Pavia Centre sizes on the Xeon of the NVIDIA H200
 * machine: bench/e2e_bench.py's compute stage (dwt: hyprof_bench), in
 * bench/results.md's section on auto's size rule. */
static const hyprof_op_t ops[] = {
    {"pca", "Feature extraction", "Principal component analysis of the spectra",
     "Centres each band on its mean over valid pixels, takes the eigenvectors of the "
     "covariance matrix (by decreasing eigenvalue, each signed so that its "
     "largest-magnitude loading is positive) and projects every pixel on the first "
     "N of them. Nodata pixels are left out of the statistics and stay nodata. The "
     "fitted model can be saved and applied to other scenes with the same bands; "
     "applying one works pixel by pixel, so an input larger than the memory is read, "
     "projected and written by blocks of rows.",
     pca_params, N(pca_params), hyprof__run_pca,
     "raster: one float32 band per component (PC1, PC2, ...)",
     hyprof__bands_pca, NULL, hyprof__names_pca, hyprof__pixelwise_pca, {20, 0}},
    {"dwt", "Feature extraction", "Spectral wavelet feature extraction",
     "Decomposes every pixel's spectrum with a 1-D discrete wavelet transform "
     "(Mallat filter bank, periodic extension, as PyWavelets' "
     "mode='periodization') and keeps the approximation coefficients after L "
     "levels: a smooth, shorter spectrum. Pixel by pixel: an input larger than the "
     "memory is read, transformed and written by blocks of rows.",
     dwt_params, N(dwt_params), hyprof__run_dwt,
     "raster: ceil(bands / 2^levels) float32 bands (A1, A2, ...)",
     hyprof__bands_dwt, NULL, hyprof__names_dwt, hyprof__pixelwise_dwt, {6, 0}},
    {"eadp", "Profiles", "Extended anisotropic diffusion profile",
     "For each feature band (principal components by default) the anisotropic "
     "diffusion profile {X, Diff(X, T1), ..., Diff(X, TC)}: Perona-Malik diffusion "
     "with the diffusivity computed once from the Gaussian-smoothed band (Scharr "
     "gradient, contrast k from a percentile), solved by Fast Explicit Diffusion "
     "with reflecting borders; each time continues from the previous one. Mass is "
     "conserved and the range never grows. After Lopez-Fandino et al., EADP.",
     eadp_params, N(eadp_params), hyprof__run_eadp,
     "raster: features x (count + 1) float32 bands (PC1, PC1 T=65, ...)",
     hyprof__bands_eadp, NULL, hyprof__names_eadp, NULL, {20, 370}},
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
     "1764, ..., A1, A1 area opening 36, ...)", hyprof__bands_eap, NULL, hyprof__names_eap, NULL, {0, 34}},
    {"emp", "Profiles", "Extended morphological profile by reconstruction",
     "For each feature band (wavelet approximation bands by default), quantised to "
     "8 bits from its valid min and max, the closings by reconstruction (largest "
     "radius first), the band and the openings by reconstruction (smallest radius "
     "first). Opening: grey erosion by the structuring element, then reconstruction "
     "by dilation (8-connected) under the band; closing: the dual. Equal to "
     "scikit-image's reconstruction of its erosion/dilation. After Quesada-Barriuso "
     "et al., W-MCD.",
     emp_params, N(emp_params), hyprof__run_emp,
     "raster: features x (1 + 2 x radii) float32 bands of levels (A1 closing r=7, ..., "
     "A1, A1 opening r=1, ...)", hyprof__bands_emp, NULL, hyprof__names_emp, NULL, {0, 106}},
    {"wmcd", "Profiles", "Wavelet-based multi-component denoising of an EMP",
     "The EMP, then every EMP band denoised at three 2-D wavelet decomposition "
     "levels: forward 2-D DWT (Mallat, periodic extension as PyWavelets' "
     "mode='periodization'), universal threshold sigma sqrt(2 ln n) with sigma = "
     "median(|HH1|) / 0.6745 from the one-level diagonal details, soft (or hard) "
     "thresholding of every detail coefficient, inverse transform. After "
     "Quesada-Barriuso et al., W-MCD.",
     wmcd_params, N(wmcd_params), hyprof__run_wmcd,
     "raster: 3 x EMP bands float32 (A1 closing r=7 j=1, A1 closing r=7 j=4, ...)",
     hyprof__bands_wmcd, NULL, hyprof__names_wmcd, NULL, {0, 50}},
    {"train", "Classification", "Train a classifier on labelled pixels",
     "Trains an RBF support vector machine (LIBSVM C-SVC) or an extreme learning machine "
     "on the pixels of FEATURES labelled by --labels or --samples. Features are scaled to "
     "[-1, 1] from the training pixels' min and max. For the SVM, C and gamma are chosen by "
     "stratified k-fold cross-validation over a grid (grid points and folds in parallel). "
     "MODEL keeps the scaling, the classes' names and colours, the band count and names, "
     "and the LIBSVM model (or the ELM weights).",
     train_params, N(train_params), NULL, "model file (text)", NULL,
     "raster_in:FEATURES file_out:MODEL"},
    {"classify", "Classification", "Apply a trained classifier",
     "Classifies every valid pixel of FEATURES with --model: a one-band class map "
     "(uint8, or uint16 beyond 255) with the model's colour table and class names, 0 = "
     "nodata where the input is nodata. SVM labels are LIBSVM's (CPU: svm_predict_values; "
     "CUDA: batched kernel evaluation by gemm, borderline pixels recomputed exactly). "
     "Pixel by pixel on features (not on a raw cube whose profile the model computes, "
     "nor with --probabilities): a GeoTIFF or COG map of an input larger than the memory "
     "is read, classified and written by blocks of rows.",
     classify_params, N(classify_params), NULL,
     "raster: 1 band of class values with a colour table", NULL,
     "raster_in:FEATURES raster_out:OUTPUT"},
    {"assess", "Classification", "Accuracy of a class map",
     "Scores CLASSMAP against --reference (a raster) or --reference-vector (points or "
     "polygons, rasterised on CLASSMAP's grid) over the reference's labelled pixels: overall "
     "accuracy, average accuracy (mean producer's accuracy), Cohen's kappa, per-class "
     "producer's and user's accuracy and the confusion matrix (rows: reference, columns: "
     "class map). Classes are paired by name or by number (--match); the report says which "
     "and names the classes without a partner. Text or --json on stdout, optionally an HTML "
     "report.",
     assess_params, N(assess_params), NULL, "report on stdout (text or JSON)", NULL,
     "raster_in:CLASSMAP"},
    {"split", "Classification", "Split a reference map into training and test pixels",
     "Draws, per class, --per-class training pixels (or the --preset counts) at random "
     "with --seed; the rest of the class's pixels are the test set. Reproducible: "
     "NumPy's default_rng(seed) stream, as samples/make_samples.py. With --samples, the "
     "same draw picks whole features (in layer order) instead of pixels, and TRAIN and TEST "
     "are vector files.",
     split_params, N(split_params), NULL,
     "two rasters (or, with --samples, two vector files): training and test", NULL,
     "raster_out:TRAIN raster_out:TEST"},
    {"sspp", "Unmixing", "Spatial-spectral preprocessing: endmember candidates",
     "SSPP (Martin and Plaza; Bernabe et al. on GPU): the spatial homogeneity of every "
     "pixel (RMSE between its spectrum and the Gaussian-filtered one, lower is more "
     "homogeneous), its spectral purity (sum over the first p principal components of "
     "a weight that is 1 at the extreme projections, 0 at their midpoint and cut below "
     "theta), K-means into p clusters (farthest-point initialisation) and, in each "
     "cluster, the candidates: the pixels with the best sum of homogeneity and purity "
     "ranks. Deterministic.",
     sspp_params, N(sspp_params), hyprof__run_sspp,
     "raster: 4 float32 bands: candidate (1/0), homogeneity RMSE, purity, cluster (1..p)",
     hyprof__bands_sspp, NULL, hyprof__names_sspp},
    {"unmix", "Unmixing", "Endmembers and abundance maps",
     "Linear spectral unmixing: the number of endmembers (given or by HySime), "
     "optionally SSPP candidates, endmember extraction (N-FINDR, VCA or ATGP) or a "
     "saved endmember set, then the abundances of every pixel by fully constrained "
     "(default), non-negative or unconstrained least squares (exact active-set "
     "solvers), and the reconstruction RMSE. The endmember spectra are saved beside "
     "OUTPUT as CSV and JSON, with the band wavelengths. With a saved set (--model) it "
     "works pixel by pixel: an input larger than the memory is read, unmixed and "
     "written by blocks of rows.",
     unmix_params, N(unmix_params), hyprof__run_unmix,
     "raster: p float32 abundance bands (E1 abundance, ...) and RMSE; plus the endmember "
     "spectra in OUTPUT.csv and OUTPUT.json (OUTPUT's extension replaced; "
     "--endmembers-csv/--endmembers-json name them)",
     hyprof__bands_unmix, NULL, hyprof__names_unmix, hyprof__pixelwise_unmix, {230, 0}},
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
    case HYPROF_PARAM_VECTOR_IN: return "vector_in";
    case HYPROF_PARAM_FIELD: return "field";
    }
    return "unknown";
}

int hyprof_param_is_input(const hyprof_param_t *p)
{
    return p && (p->type == HYPROF_PARAM_FILE_IN || p->type == HYPROF_PARAM_RASTER_IN ||
                 p->type == HYPROF_PARAM_VECTOR_IN);
}

hyprof_status_t hyprof_op_output_bands(hyprof_ctx_t *ctx, const hyprof_op_t *op,
                                       const hyprof_args_t *args, size_t in_bands,
                                       size_t *out_bands)
{
    *out_bands = 0;
    if (!op || !args || hyprof_args_op(args) != op)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op ? op->name : "bands",
                             "arguments do not belong to this operation");
    if (hyprof_args_check((hyprof_args_t *)args) != HYPROF_OK)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op->name, "%s",
                             hyprof_args_error(args));
    if (in_bands == 0)
        return hyprof__error(ctx, HYPROF_ERR_INPUT, op->name, "the input has no band");
    return op->bands ? op->bands(ctx, args, in_bands, out_bands) : HYPROF_OK;
}

void hyprof_band_names_free(char **names, size_t count)
{
    hyprof__free_names(names, count);
}

hyprof_status_t hyprof_op_band_names(hyprof_ctx_t *ctx, const hyprof_op_t *op,
                                     const hyprof_args_t *args, size_t width, size_t height,
                                     size_t in_bands, size_t out_bands, char ***names)
{
    *names = NULL;
    if (!op || !args || hyprof_args_op(args) != op)
        return hyprof__error(ctx, HYPROF_ERR_ARGUMENT, op ? op->name : "names",
                             "arguments do not belong to this operation");
    if (!op->names || out_bands == 0)
        return HYPROF_OK;
    char **n = calloc(out_bands, sizeof *n);
    if (!n)
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op->name, "out of memory");
    hyprof_status_t st = op->names(ctx, args, width, height, in_bands, out_bands, n);
    for (size_t b = 0; st == HYPROF_OK && b < out_bands; b++)
        if (!n[b])
            st = hyprof__error(ctx, HYPROF_ERR_NOMEM, op->name, "out of memory");
    if (st != HYPROF_OK) {
        hyprof__free_names(n, out_bands);
        return st;
    }
    *names = n;
    return HYPROF_OK;
}

/* The result's bands named by the operation's names function (the names
 * the GDAL driver announces before computing). */
static hyprof_status_t name_result(hyprof_ctx_t *ctx, const hyprof_op_t *op,
                                   const hyprof_args_t *args, const hyprof_cube_t *in,
                                   hyprof_result_t *out)
{
    char **names = NULL;
    size_t n = out->cube.bands;
    hyprof_status_t st = hyprof_op_band_names(ctx, op, args, in->width, in->height, in->bands,
                                              n, &names);
    if (st != HYPROF_OK || !names)
        return st;
    if (!out->band_names && !(out->band_names = calloc(n, sizeof *out->band_names))) {
        hyprof__free_names(names, n);
        return hyprof__error(ctx, HYPROF_ERR_NOMEM, op->name, "out of memory");
    }
    for (size_t b = 0; b < n; b++) {
        free(out->band_names[b]);
        out->band_names[b] = names[b];
    }
    free(names);
    return HYPROF_OK;
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
    if (st == HYPROF_OK)
        st = name_result(ctx, op, args, in, out);
    if (st != HYPROF_OK) {
        hyprof__bands_revoke(ctx);
        hyprof_result_free(out);
    }
    return st;
}
