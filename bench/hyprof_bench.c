/* hyprof_bench: times one feature-extraction operation of libhyprof on a raw
 * float32 BSQ cube and prints one JSON line.
 *
 * Each repetition times the whole public call, host memory in and host memory
 * out, so a CUDA run includes its host<->device transfers: that is what a
 * caller of the library pays. One untimed warm-up comes first (CUDA context
 * creation, cuBLAS/cuSOLVER handles, OpenMP thread pool).
 *
 * --op eadp is the EADP paper's pipeline: PCA to --components (fit-transform),
 * then hyprof_eadp with T_i = step * i, i = 1..count (default 7 PCs, 65..520:
 * 63 bands); the stages are timed separately (pca, eadp), and the eadp stage
 * alone is what the paper's Table III times. --pipeline op runs the eadp
 * operation instead (hyprof_op_run, as the CLI: on CUDA the PCs stay on the
 * device between the PCA and the diffusion); only its total is timed. With
 * CUDA the JSON has device_ms: the library's CUDA event times per stage
 * (pca_*, eadp_*) and the FED kernel's bandwidth (eadp_fed_gbs), medians.
 *
 * --op pca times hyprof_pca_fit and hyprof_pca_apply as two calls (stages fit
 * and apply); --pipeline op runs the pca operation as the CLI does
 * (hyprof_pca_fit_transform: one pass of the cube to the device on CUDA), and
 * times only its total.
 *
 * --op emp and --op wmcd are the W-MCD paper's chain as the operations run
 * it (hyprof_op_run, --reduction dwt): the spectral DWT (haar unless
 * --wavelet, the level count whose band count is closest to --features 4, or
 * --levels), the EMP (disk, radii 1,3,5,7) and, for wmcd, the 2-D haar
 * denoising (automatic levels, soft). The library's stage trace
 * (HYPROF_LOG=debug, one line per device share) gives the stages: spectral
 * (upload and DWT), quantise (with several devices: and the exchange of the
 * feature rows), emp, denoise (or the float conversion), download (the tail
 * after the last computation), device and wall, each the slowest share's,
 * and "device_stages": every share's own line as a JSON object (median over
 * the repetitions of each number). --devices 0,1 runs the chain on several
 * GPUs (the seed's Fig. 5: rows for the DWT, bands for the profiles).
 * --op classify applies a saved model (--model, from `hyprof train`) to the
 * cube: the class map's labels; --output writes them as raw uint16.
 * --op train trains on the cube's pixels labelled by --labels (raw float32,
 * width x height, 0 = unlabelled) with --classifier svm|elm and --grid
 * (default: the DESIGN.md grid, 5-fold cross-validation).
 * --op sspp and --op unmix run the registry operations (hyprof_op_run) with
 * --endmembers p (unmix: --sspp 1|0, --extract nfindr|vca|atgp, FCLS
 * abundances); their stages (homogeneity, purity, kmeans, fusion, extraction,
 * abundances) come from the result's SSPP_SECONDS / UNMIX_SECONDS metadata.
 * --op eap is the EAP paper's pipeline: the spectral reduction (--reduction
 * dwt with --levels, pca with --components, or none), then hyprof_eap with
 * one attribute (--attribute, its default thresholds or --thresholds) at
 * --connectivity and --quantisation; stages reduction and profile. With
 * CUDA the profile's device stages (tree, attributes, filters, transfers)
 * come from the library's debug log and go into the JSON as they are.
 *
 * Uses the public API only. */
#define _POSIX_C_SOURCE 200809L

#include "hyprof/hyprof.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

typedef struct {
    const char *op;      /* "pca" | "dwt" | "eadp" | "eap" | "emp" | "wmcd" | "classify" | "train" |
                            "sspp" | "unmix" */
    const char *backend; /* "cpu" | "cuda" | "auto" */
    const char *input;
    const char *output;  /* optional: the last repetition's output, raw float32 BSQ */
    const char *wavelet;
    size_t width, height, bands;
    long components, levels, repeat, threads, device;
    long count, cycles;  /* eadp */
    double step;         /* eadp */
    const char *pipeline; /* eadp: "api" (two calls) or "op" (the eadp operation) */
    long features;       /* emp, wmcd */
    int wavelet_given, levels_given;
    int devices[16];     /* emp, wmcd: --devices */
    size_t ndevices;
    const char *devices_text;
    const char *model;   /* classify */
    const char *labels, *classifier, *grid; /* train */
    long neurons;
    long endmembers, sspp; /* sspp, unmix */
    const char *extract;   /* unmix */
    const char *reduction, *attribute, *thresholds; /* eap */
    long connectivity, quantisation;                /* eap */
    long per_band;                                  /* eap: -1 auto, 0, 1 */
    long pinned;                                    /* --pinned: page-locked host memory */
} options_t;

/* What one repetition measured: the total, and the stages when there are several
 * (pca: fit, apply; eadp: fit = the PCA, apply = the diffusion; eap: fit = the
 * reduction, apply = the profile; emp/wmcd: fit = the reduction, apply = the
 * EMP, denoise; sspp/unmix: named stages). */
#define MAX_STAGES 12

typedef struct {
    double total, fit, apply, denoise;
    size_t nstages;                 /* sspp, unmix: named stages */
    char stage_name[MAX_STAGES][24];
    double stage[MAX_STAGES];
    size_t ndev;                    /* sspp, unmix with CUDA: device times of stages */
    char dev_name[MAX_STAGES][24];
    double dev[MAX_STAGES];
} timing_t;

static void usage(FILE *f)
{
    fputs("usage: hyprof_bench --op pca|dwt|eadp|eap|emp|wmcd|classify|train|sspp|unmix\n"
          "                    --backend cpu|cuda|auto --input CUBE.f32\n"
          "                    --width W --height H --bands B\n"
          "                    [--components 7] [--wavelet db4] [--levels 4]\n"
          "                    [--count 8] [--step 65] [--cycles 1]   (eadp: PCA, then\n"
          "                    diffusion at T = step*1 .. step*count)\n"
          "                    [--pipeline api|op]   (eadp, pca: two API calls, or the\n"
          "                    operation: eadp keeps the PCs on the device, pca is\n"
          "                    hyprof_pca_fit_transform)\n"
          "                    [--features 4] [--devices 0,1]   (emp, wmcd: haar DWT\n"
          "                    features, EMP disk 1,3,5,7, W-MCD haar auto soft)\n"
          "                    [--model M.model]   (classify)\n"
          "                    [--labels L.f32] [--classifier svm|elm]\n"
          "                    [--grid default|C=..,gamma=..]\n"
          "                    [--neurons 500]   (train)\n"
          "                    [--endmembers 31] [--sspp 1] [--extract nfindr]  (sspp, unmix)\n"
          "                    [--reduction dwt|pca|none] [--attribute area]\n"
          "                    [--thresholds 36,144,...] [--connectivity 4]\n"
          "                    [--quantisation 8|16]   (eap: reduction, then the profile)\n"
          "                    [--per-band auto|0|1|2]   (eap: the profile band by band into\n"
          "                    one reused 16-bit buffer, 1: in one call\n"
          "                    (hyprof_attribute_profiles_bands), 2: a call per band;\n"
          "                    auto: 1 when the float32 output would take more than a\n"
          "                    quarter of the host memory)\n"
          "                    [--pinned 0|1]   (1: the input cube page-locked\n"
          "                    (hyprof_cube_alloc_pinned) and the outputs from the\n"
          "                    page-locked cache (hyprof_pinned_cache_set); first_s then\n"
          "                    includes the locking of the output)\n"
          "                    [--repeat 5] [--threads 0] [--device 0] [--output OUT.f32]\n"
          "CUBE.f32 is raw float32 band-sequential (B planes of H rows of W), native\n"
          "byte order. Prints one JSON line on stdout. --threads 0 = all cores.\n",
          f);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int parse_long(const char *name, const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "hyprof_bench: bad --%s '%s' (an integer in %ld..%ld)\n", name,
                text, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_double(const char *name, const char *text, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !(v >= lo && v <= hi)) {
        fprintf(stderr, "hyprof_bench: bad --%s '%s' (a number in %g..%g)\n", name, text, lo,
                hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_devices(const char *text, options_t *o)
{
    const char *s = text;
    o->ndevices = 0;
    while (*s) {
        char *end = NULL;
        long d = strtol(s, &end, 10);
        if (end == s || d < 0 || d > 1024 || (*end && *end != ',') || o->ndevices == 16) {
            fprintf(stderr, "hyprof_bench: bad --devices '%s' (e.g. 0,1)\n", text);
            return -1;
        }
        o->devices[o->ndevices++] = (int)d;
        s = *end ? end + 1 : end;
    }
    return 0;
}

static int parse_args(int argc, char **argv, options_t *o)
{
    long w = 0, h = 0, b = 0;
    *o = (options_t){.backend = "cpu", .wavelet = "db4", .components = 7, .levels = 4,
                     .repeat = 5, .threads = 0, .device = 0, .count = 8, .cycles = 1,
                     .step = 65.0, .features = 4, .classifier = "svm", .grid = "default",
                     .neurons = 500, .endmembers = 31, .sspp = 1, .extract = "nfindr",
                     .reduction = "dwt", .attribute = "area", .connectivity = 4,
                     .quantisation = 8, .pipeline = "api", .per_band = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0 || i + 1 >= argc) {
            fprintf(stderr, "hyprof_bench: unexpected or incomplete argument '%s'\n", a);
            return -1;
        }
        const char *name = a + 2, *v = argv[++i];
        int rc = 0;
        if (!strcmp(name, "op")) o->op = v;
        else if (!strcmp(name, "backend")) o->backend = v;
        else if (!strcmp(name, "input")) o->input = v;
        else if (!strcmp(name, "output")) o->output = v;
        else if (!strcmp(name, "wavelet")) {
            o->wavelet = v;
            o->wavelet_given = 1;
        }
        else if (!strcmp(name, "features")) rc = parse_long(name, v, 1, 100000, &o->features);
        else if (!strcmp(name, "devices")) {
            rc = parse_devices(v, o);
            o->devices_text = v;
        }
        else if (!strcmp(name, "width")) rc = parse_long(name, v, 1, LONG_MAX, &w);
        else if (!strcmp(name, "height")) rc = parse_long(name, v, 1, LONG_MAX, &h);
        else if (!strcmp(name, "bands")) rc = parse_long(name, v, 1, 1000000, &b);
        else if (!strcmp(name, "components")) rc = parse_long(name, v, 1, 1000000, &o->components);
        else if (!strcmp(name, "levels")) {
            rc = parse_long(name, v, 1, 64, &o->levels);
            o->levels_given = 1;
        }
        else if (!strcmp(name, "repeat")) rc = parse_long(name, v, 1, 100000, &o->repeat);
        else if (!strcmp(name, "threads")) rc = parse_long(name, v, 0, 65536, &o->threads);
        else if (!strcmp(name, "device")) rc = parse_long(name, v, 0, 1024, &o->device);
        else if (!strcmp(name, "count")) rc = parse_long(name, v, 1, 10000, &o->count);
        else if (!strcmp(name, "cycles")) rc = parse_long(name, v, 1, 1000, &o->cycles);
        else if (!strcmp(name, "step")) rc = parse_double(name, v, 1e-6, 1e9, &o->step);
        else if (!strcmp(name, "pipeline")) {
            o->pipeline = v;
            rc = strcmp(v, "api") && strcmp(v, "op") ? -1 : 0;
            if (rc)
                fprintf(stderr, "hyprof_bench: --pipeline must be api or op (got '%s')\n", v);
        }
        else if (!strcmp(name, "model")) o->model = v;
        else if (!strcmp(name, "labels")) o->labels = v;
        else if (!strcmp(name, "classifier")) o->classifier = v;
        else if (!strcmp(name, "grid")) o->grid = v;
        else if (!strcmp(name, "neurons")) rc = parse_long(name, v, 1, 100000, &o->neurons);
        else if (!strcmp(name, "endmembers")) rc = parse_long(name, v, 2, 256, &o->endmembers);
        else if (!strcmp(name, "sspp")) rc = parse_long(name, v, 0, 1, &o->sspp);
        else if (!strcmp(name, "extract")) o->extract = v;
        else if (!strcmp(name, "reduction")) o->reduction = v;
        else if (!strcmp(name, "attribute")) o->attribute = v;
        else if (!strcmp(name, "thresholds")) o->thresholds = v;
        else if (!strcmp(name, "connectivity")) rc = parse_long(name, v, 4, 8, &o->connectivity);
        else if (!strcmp(name, "quantisation")) rc = parse_long(name, v, 8, 16, &o->quantisation);
        else if (!strcmp(name, "pinned"))
            rc = parse_long(name, v, 0, 1, &o->pinned);
        else if (!strcmp(name, "per-band")) {
            if (!strcmp(v, "auto"))
                o->per_band = -1;
            else
                rc = parse_long(name, v, 0, 2, &o->per_band);
        }
        else {
            fprintf(stderr, "hyprof_bench: unknown option '%s'\n", a);
            return -1;
        }
        if (rc)
            return -1;
    }
    if (!o->op || (strcmp(o->op, "pca") && strcmp(o->op, "dwt") && strcmp(o->op, "eadp") &&
                   strcmp(o->op, "emp") && strcmp(o->op, "wmcd") && strcmp(o->op, "classify") &&
                   strcmp(o->op, "train") && strcmp(o->op, "sspp") && strcmp(o->op, "unmix") &&
                   strcmp(o->op, "eap"))) {
        fprintf(stderr, "hyprof_bench: --op must be pca, dwt, eadp, eap, emp, wmcd, classify, "
                        "train, sspp or unmix (got '%s')\n",
                o->op ? o->op : "nothing");
        return -1;
    }
    if (!strcmp(o->op, "classify") && !o->model) {
        fprintf(stderr, "hyprof_bench: --op classify needs --model\n");
        return -1;
    }
    if (!strcmp(o->op, "train") && (!o->labels || (strcmp(o->classifier, "svm") &&
                                                   strcmp(o->classifier, "elm")))) {
        fprintf(stderr, "hyprof_bench: --op train needs --labels and --classifier svm|elm\n");
        return -1;
    }
    if (strcmp(o->reduction, "dwt") && strcmp(o->reduction, "pca") &&
        strcmp(o->reduction, "none")) {
        fprintf(stderr, "hyprof_bench: --reduction must be dwt, pca or none (got '%s')\n",
                o->reduction);
        return -1;
    }
    if ((o->connectivity != 4 && o->connectivity != 8) ||
        (o->quantisation != 8 && o->quantisation != 16)) {
        fprintf(stderr, "hyprof_bench: --connectivity takes 4 or 8, --quantisation 8 or 16\n");
        return -1;
    }
    if (!o->input || !w || !h || !b) {
        fprintf(stderr, "hyprof_bench: --input, --width, --height and --bands are required\n");
        return -1;
    }
    o->width = (size_t)w;
    o->height = (size_t)h;
    o->bands = (size_t)b;
    return 0;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n-1]; sorts `scratch` (n slots), leaves v in run order. */
static double median(const double *v, double *scratch, size_t n)
{
    memcpy(scratch, v, n * sizeof *v);
    qsort(scratch, n, sizeof *scratch, cmp_double);
    return n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

static float *read_cube(const char *path, size_t count)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "hyprof_bench: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    float *data = malloc(count * sizeof *data);
    if (!data) {
        fprintf(stderr, "hyprof_bench: out of memory for %zu floats\n", count);
        fclose(f);
        return NULL;
    }
    size_t got = fread(data, sizeof *data, count, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != count || extra) {
        fprintf(stderr,
                "hyprof_bench: '%s' is not %zu float32 values (width*height*bands)\n",
                path, count);
        free(data);
        return NULL;
    }
    return data;
}

static int write_cube(const char *path, const hyprof_cube_t *cube)
{
    size_t n = cube->width * cube->height * cube->bands;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(cube->data, hyprof_dtype_size(cube->dtype), n, f) != n) {
        fprintf(stderr, "hyprof_bench: cannot write '%s'\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f) ? -1 : 0;
}

/* The CPU's model name from /proc/cpuinfo (Linux), for the JSON line. */
static void cpu_name(char *name, size_t len)
{
    snprintf(name, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ' || *p == '\t')
                    p++;
                p[strcspn(p, "\n")] = '\0';
                snprintf(name, len, "%s", p);
            }
            break;
        }
    }
    fclose(f);
}

/* The EADP paper's pipeline: PCA (fit-transform, as the eadp operation runs
 * it: one upload of the cube on CUDA), then the diffusion profiles. */
/* hyprof_op_run with the arguments set so far (st: how setting them went),
 * the whole call timed on the host as the CLI pays it. `meta`, when given,
 * reads the result's metadata; the result's cube then moves to *out (its band
 * names stay with the result, which frees them). Frees args. */
static hyprof_status_t run_op_timed(hyprof_ctx_t *ctx, const hyprof_op_t *op,
                                    hyprof_args_t *args, hyprof_status_t st,
                                    const hyprof_cube_t *in, hyprof_cube_t *out, timing_t *t,
                                    void (*meta)(const hyprof_result_t *, timing_t *))
{
    if (st != HYPROF_OK) {
        fprintf(stderr, "hyprof_bench: %s\n", hyprof_args_error(args));
        hyprof_args_free(&args);
        return st;
    }
    hyprof_result_t res;
    hyprof_result_init(&res);
    double t0 = now_seconds();
    st = hyprof_op_run(ctx, op, args, in, &res);
    t->total = now_seconds() - t0;
    t->fit = t->apply = NAN;
    if (st == HYPROF_OK && meta)
        meta(&res, t);
    if (st == HYPROF_OK) {
        *out = res.cube; /* the cube moves to the caller */
        memset(&res.cube, 0, sizeof res.cube);
        res.cube.bands = out->bands; /* hyprof_result_free frees one name per band */
    }
    hyprof_result_free(&res);
    hyprof_args_free(&args);
    return st;
}

/* --pipeline op: the eadp operation as the CLI runs it (hyprof_op_run), whose
 * CUDA path keeps the PCs on the device between the PCA and the diffusion;
 * only the total is timed on the host (the stages: device_ms). */
static hyprof_status_t run_eadp_op(hyprof_ctx_t *ctx, const options_t *o, const hyprof_cube_t *in,
                                   hyprof_cube_t *out, timing_t *t)
{
    const hyprof_op_t *op = hyprof_op_find("eadp");
    hyprof_args_t *args = op ? hyprof_args_new(op) : NULL;
    if (!args)
        return HYPROF_ERR_NOMEM;
    char v[4][32];
    snprintf(v[0], sizeof v[0], "%ld", o->components);
    snprintf(v[1], sizeof v[1], "%ld", o->count);
    snprintf(v[2], sizeof v[2], "%.17g", o->step);
    snprintf(v[3], sizeof v[3], "%ld", o->cycles);
    hyprof_status_t st = hyprof_args_set(args, "components", v[0]);
    if (st == HYPROF_OK)
        st = hyprof_args_set(args, "count", v[1]);
    if (st == HYPROF_OK)
        st = hyprof_args_set(args, "step", v[2]);
    if (st == HYPROF_OK)
        st = hyprof_args_set(args, "cycles", v[3]);
    return run_op_timed(ctx, op, args, st, in, out, t, NULL);
}

static hyprof_status_t run_eadp(hyprof_ctx_t *ctx, const options_t *o, const hyprof_cube_t *in,
                                const hyprof_eadp_params_t *ep, hyprof_cube_t *out, timing_t *t)
{
    if (!strcmp(o->pipeline, "op"))
        return run_eadp_op(ctx, o, in, out, t);
    hyprof_pca_model_t *model = NULL;
    hyprof_cube_t pcs;
    memset(&pcs, 0, sizeof pcs);
    double t0 = now_seconds();
    hyprof_status_t st = hyprof_pca_fit_transform(ctx, in, (size_t)o->components, &model, &pcs);
    double t1 = now_seconds();
    hyprof_pca_model_free(&model);
    if (st == HYPROF_OK)
        st = hyprof_eadp(ctx, &pcs, ep, out, NULL);
    double t2 = now_seconds();
    hyprof_cube_free(&pcs);
    t->fit = t1 - t0;   /* the PCA */
    t->apply = t2 - t1; /* the diffusion */
    t->total = t2 - t0;
    return st;
}

static int is_profile_op(const options_t *o)
{
    return !strcmp(o->op, "emp") || !strcmp(o->op, "wmcd");
}

/* The level count whose band count is closest to --features (ties: more bands),
 * as the emp operation chooses it; --levels when given. */
static int feature_levels(const options_t *o)
{
    return o->levels_given ? (int)o->levels
                           : hyprof_dwt_levels_for_features(o->bands, o->features);
}

/* The chain's stage trace: one "OP stages: key=value ..." line per device
 * share (from the device threads, hence the atomic slot). */
#define MAX_SHARES 16
static char g_share_line[MAX_SHARES][1024];
static atomic_size_t g_nshare;

static void keep_share_stages(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    if (!strstr(message, " stages: share="))
        return;
    size_t i = atomic_fetch_add(&g_nshare, 1);
    if (i < MAX_SHARES)
        snprintf(g_share_line[i], sizeof g_share_line[i], "%s", message);
}

static size_t share_count(void)
{
    size_t n = atomic_load(&g_nshare);
    return n < MAX_SHARES ? n : MAX_SHARES;
}

/* The number after " key=" in a trace line, or NAN. */
static double trace_value(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* The summary stages: the sum of the keys present, the slowest share. */
static const struct {
    const char *name;
    const char *keys[4];
} g_chain_stages[] = {
    {"spectral", {"spectral_ms"}},
    {"quantise", {"exchange_ms", "quantise_ms"}},
    {"emp", {"markers_ms", "reconstruction_ms", "finish_ms", "emp_ms"}},
    {"denoise", {"denoise_ms", "to_float_ms"}},
    {"download", {"download_tail_ms"}},
    {"device", {"device_ms"}},
    {"wall", {"wall_ms"}},
    /* device time apart: the kernels, the host-device copies (traced spans) */
    {"kernels", {"kernels_ms"}},
    {"h2d", {"h2d_ms"}},
    {"d2h", {"d2h_ms"}},
};

static void chain_stages(timing_t *t)
{
    t->nstages = 0;
    for (size_t k = 0; k < sizeof g_chain_stages / sizeof g_chain_stages[0]; k++) {
        double worst = NAN;
        for (size_t i = 0; i < share_count(); i++) {
            double sum = 0.0;
            int any = 0;
            for (size_t j = 0; j < 4 && g_chain_stages[k].keys[j]; j++) {
                double v = trace_value(g_share_line[i], g_chain_stages[k].keys[j]);
                if (!isnan(v)) {
                    sum += v;
                    any = 1;
                }
            }
            if (any && !(sum <= worst))
                worst = sum;
        }
        if (!isnan(worst) && t->nstages < MAX_STAGES) {
            snprintf(t->stage_name[t->nstages], sizeof t->stage_name[0], "%s",
                     g_chain_stages[k].name);
            t->stage[t->nstages++] = worst / 1e3;
        }
    }
}

/* The W-MCD paper's chain, as the emp / wmcd operations run it. */
static hyprof_status_t run_profile(hyprof_ctx_t *ctx, const options_t *o,
                                   const hyprof_cube_t *in, hyprof_cube_t *out, timing_t *t)
{
    const hyprof_op_t *op = hyprof_op_find(o->op);
    hyprof_args_t *args = op ? hyprof_args_new(op) : NULL;
    if (!args)
        return HYPROF_ERR_NOMEM;
    char v[32];
    hyprof_status_t st;
    if (o->levels_given) {
        snprintf(v, sizeof v, "%ld", o->levels);
        st = hyprof_args_set(args, "levels", v);
    } else {
        snprintf(v, sizeof v, "%ld", o->features);
        st = hyprof_args_set(args, "features", v);
    }
    if (st == HYPROF_OK)
        st = hyprof_args_set(args, "wavelet", o->wavelet);
    if (st == HYPROF_OK && o->devices_text)
        st = hyprof_args_set(args, "devices", o->devices_text);
    atomic_store(&g_nshare, 0);
    st = run_op_timed(ctx, op, args, st, in, out, t, NULL);
    chain_stages(t);
    return st;
}

/* Every share's trace line as a JSON object, each number the median over
 * the repetitions (lines[r][i]: repetition r, share i). */
static void print_share_stages(char (*lines)[MAX_SHARES][1024], size_t nrep, size_t nshare,
                               double *scratch)
{
    double *v = malloc(nrep * sizeof *v);
    if (!v)
        return;
    printf(",\"device_stages\":[");
    for (size_t i = 0; i < nshare; i++) {
        const char *line = strstr(lines[nrep - 1][i], " stages: ");
        printf("%s{", i ? "," : "");
        int first = 1;
        for (const char *p = line ? line + 9 : ""; *p;) {
            const char *eq = strchr(p, '='), *sp = strchr(p, ' ');
            if (!eq)
                break;
            if (!sp)
                sp = p + strlen(p);
            char key[64], val[128];
            snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
            snprintf(val, sizeof val, "%.*s", (int)(sp - eq - 1), eq + 1);
            char *end;
            strtod(val, &end);
            printf("%s\"%s\":", first ? "" : ",", key);
            first = 0;
            if (*val && !*end && strchr(val, '.')) {
                for (size_t r = 0; r < nrep; r++)
                    v[r] = trace_value(lines[r][i], key);
                printf("%.6g", median(v, scratch, nrep));
            } else if (*val && !*end) {
                printf("%s", val);
            } else {
                json_string(stdout, val);
            }
            p = *sp ? sp + 1 : sp;
        }
        printf("}");
    }
    printf("]");
    free(v);
}

/* ---- classification ------------------------------------------------------------------- */

/* The model (classify) or the labels and parameters (train), loaded once. */
static struct {
    hyprof_classifier_t *model;
    float *labels;
    hyprof_train_params_t tp;
    double c[64], gamma[64];
    /* what the last training produced */
    double cv_accuracy, best_c, best_gamma;
    size_t size;
} g_cls;

/* "C=1,10,gamma=0.5": a key starts a list, bare numbers continue it. */
static int parse_grid(const char *text, hyprof_train_params_t *tp)
{
    if (!strcmp(text, "default"))
        return 0;
    double *list = NULL;
    size_t *count = NULL, nc = 0, ng = 0;
    for (const char *s = text; *s;) {
        size_t tl = strcspn(s, ",");
        const char *v = s;
        if (!strncmp(s, "C=", 2))
            list = g_cls.c, count = &nc, v = s + 2;
        else if (!strncmp(s, "gamma=", 6))
            list = g_cls.gamma, count = &ng, v = s + 6;
        char *end;
        double x = strtod(v, &end);
        if (!list || end != s + tl || !(x > 0) || *count >= 64) {
            fprintf(stderr, "hyprof_bench: bad --grid '%s'\n", text);
            return -1;
        }
        list[(*count)++] = x;
        s += tl + (s[tl] == ',');
    }
    if (!nc || !ng) {
        fprintf(stderr, "hyprof_bench: --grid '%s' needs C= and gamma=\n", text);
        return -1;
    }
    tp->c = g_cls.c, tp->n_c = nc, tp->gamma = g_cls.gamma, tp->n_gamma = ng;
    return 0;
}

static hyprof_status_t load_classification(hyprof_ctx_t *ctx, const options_t *o)
{
    if (!strcmp(o->op, "classify"))
        return hyprof_classifier_load(ctx, o->model, &g_cls.model);
    hyprof_train_params_default(&g_cls.tp);
    g_cls.tp.kind = strcmp(o->classifier, "elm") ? HYPROF_CLASSIFIER_SVM : HYPROF_CLASSIFIER_ELM;
    g_cls.tp.neurons = (size_t)o->neurons;
    if (parse_grid(o->grid, &g_cls.tp))
        return HYPROF_ERR_ARGUMENT;
    g_cls.labels = read_cube(o->labels, o->width * o->height);
    return g_cls.labels ? HYPROF_OK : HYPROF_ERR_IO;
}

static hyprof_status_t run_train(hyprof_ctx_t *ctx, const options_t *o, const hyprof_cube_t *in,
                                 hyprof_cube_t *out)
{
    hyprof_cube_t labels = hyprof_cube_bsq(g_cls.labels, HYPROF_FLOAT32, o->width, o->height, 1);
    hyprof_classifier_t *m = NULL;
    hyprof_status_t st = hyprof_train(ctx, in, &labels, &g_cls.tp, &m);
    if (st != HYPROF_OK)
        return st;
    g_cls.cv_accuracy = hyprof_classifier_cv_accuracy(m);
    g_cls.best_c = hyprof_classifier_c(m);
    g_cls.best_gamma = hyprof_classifier_gamma(m);
    g_cls.size = hyprof_classifier_size(m);
    hyprof_classifier_free(&m);
    /* No cube comes out of training: an empty 1x1 one keeps the rest uniform. */
    return hyprof_cube_alloc(out, HYPROF_FLOAT32, 1, 1, 1);
}

/* "name=seconds name=seconds ..." of a result's metadata item into names and
 * values (at most MAX_STAGES). */
static void parse_stages(const char *text, char (*names)[24], double *values, size_t *count)
{
    *count = 0;
    while (text && *text && *count < MAX_STAGES) {
        const char *eq = strchr(text, '=');
        if (!eq)
            break;
        size_t len = (size_t)(eq - text);
        if (len >= sizeof names[0])
            len = sizeof names[0] - 1;
        memcpy(names[*count], text, len);
        names[*count][len] = '\0';
        char *end;
        values[(*count)++] = strtod(eq + 1, &end);
        text = end;
        while (*text == ' ')
            text++;
    }
}

/* The extraction's steps of the last unmix run (UNMIX_EXTRACT_SECONDS). */
static char g_extract_steps[256];

/* The stage times an unmixing result carries: host seconds (`key`), the
 * CUDA stages' event times (`dkey`, CUDA only) and the extraction's steps. */
static void unmixing_stages(const hyprof_result_t *res, timing_t *t, const char *key,
                            const char *dkey)
{
    t->ndev = 0;
    for (size_t i = 0; i < res->nmeta; i++) {
        if (!strcmp(res->meta_keys[i], key))
            parse_stages(res->meta_values[i], t->stage_name, t->stage, &t->nstages);
        if (!strcmp(res->meta_keys[i], dkey))
            parse_stages(res->meta_values[i], t->dev_name, t->dev, &t->ndev);
        if (!strcmp(res->meta_keys[i], "UNMIX_EXTRACT_SECONDS")) /* the last run's, as is */
            snprintf(g_extract_steps, sizeof g_extract_steps, "%s", res->meta_values[i]);
    }
}

static void sspp_stages(const hyprof_result_t *res, timing_t *t)
{
    unmixing_stages(res, t, "SSPP_SECONDS", "SSPP_DEVICE_SECONDS");
}

static void unmix_stages(const hyprof_result_t *res, timing_t *t)
{
    unmixing_stages(res, t, "UNMIX_SECONDS", "UNMIX_DEVICE_SECONDS");
}

/* sspp / unmix through the registry, as the CLI runs them. */
static hyprof_status_t run_registry(hyprof_ctx_t *ctx, const options_t *o,
                                    const hyprof_cube_t *in, hyprof_cube_t *out, timing_t *t)
{
    const hyprof_op_t *op = hyprof_op_find(o->op);
    hyprof_args_t *args = op ? hyprof_args_new(op) : NULL;
    if (!args)
        return HYPROF_ERR_NOMEM;
    char p[32];
    snprintf(p, sizeof p, "%ld", o->endmembers);
    hyprof_status_t st = hyprof_args_set(args, "endmembers", p);
    if (st == HYPROF_OK && !strcmp(o->op, "unmix")) {
        st = hyprof_args_set(args, "extract", o->extract);
        if (st == HYPROF_OK)
            st = hyprof_args_set(args, "sspp", o->sspp ? "true" : "false");
    }
    return run_op_timed(ctx, op, args, st, in, out, t,
                        !strcmp(o->op, "sspp") ? sspp_stages : unmix_stages);
}

/* The `eap` operation's default thresholds per attribute (README), std in
 * 8-bit units (scaled by 257 at 16 bits, as the operation does). */
static const double eap_area[] = {36, 144, 324, 576, 900, 1296, 1764};
static const double eap_std[] = {2, 4, 6, 8, 10, 12, 14};
static const double eap_diagonal[] = {10, 25, 50, 100};
static const double eap_inertia[] = {0.2, 0.3, 0.4, 0.5};

/* The EAP parameters from the options: `thr` receives the thresholds (at most
 * 255). -1 on a bad attribute or threshold list. */
static int eap_params(const options_t *o, hyprof_eap_params_t *p, hyprof_attribute_filter_t *f,
                      double *thr)
{
    hyprof_eap_params_default(p);
    if (hyprof_attribute_parse(o->attribute, &f->attribute) != HYPROF_OK) {
        fprintf(stderr, "hyprof_bench: unknown --attribute '%s'\n", o->attribute);
        return -1;
    }
    size_t n = 0;
    if (o->thresholds) {
        const char *s = o->thresholds;
        while (*s && n < HYPROF_ATTRIBUTE_MAX_THRESHOLDS) {
            char *end = NULL;
            thr[n++] = strtod(s, &end);
            if (end == s || (*end && *end != ',')) {
                fprintf(stderr, "hyprof_bench: bad --thresholds '%s'\n", o->thresholds);
                return -1;
            }
            s = *end ? end + 1 : end;
        }
    } else {
        static const double *const lists[] = {eap_area, eap_std, eap_diagonal, eap_inertia};
        static const size_t counts[] = {7, 7, 4, 4};
        n = counts[f->attribute];
        for (size_t i = 0; i < n; i++)
            thr[i] = lists[f->attribute][i] *
                     (f->attribute == HYPROF_ATTRIBUTE_STD && o->quantisation == 16 ? 257.0 : 1.0);
    }
    f->thresholds = thr;
    f->nthresholds = n;
    p->filters = f;
    p->nfilters = 1;
    p->connectivity = (int)o->connectivity;
    p->levels = o->quantisation == 16 ? 65536u : 256u;
    return 0;
}

/* --per-band: the profile of each feature band in turn, into one reused
 * buffer of one band's planes as 16-bit levels, for scenes whose float32
 * output would not fit the host comfortably (auto: over a quarter of its
 * memory; the 10748 x 12288 x 8 scene's is 63 GB): 1, one call
 * (hyprof_attribute_profiles_bands, which hands each band's planes to a
 * function: the CUDA path overlaps a band's download with the next band's
 * trees); 2, a call per band (hyprof_attribute_profiles). Timed: the
 * quantisation and the call(s), with 1 a band function that does nothing;
 * the checksum (the sum of every band's levels, exact in a double, so equal
 * to the float32 output's) is taken outside the timing, in the last
 * repetition only (with 1 by one more, untimed, call). */
static struct {
    int active, last_rep, calls;  /* calls: a call per band (--per-band 2) */
    uint16_t *q, *buf;   /* the quantised features; one band's planes */
    size_t bands, planes, n;
    double sum, abs_sum;
    double dev_ms[5];    /* the CUDA path's device stages, summed over the bands */
} g_pb;

/* Captures the CUDA path's stage message (debug log) for the JSON line. */
static char g_eap_device_stages[512];
static void keep_device_stages(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    if (getenv("HYPROF_BENCH_TRACE")) /* with HYPROF_LOG=debug: the kernels' times too */
        fprintf(stderr, "%s\n", message);
    const char *d = strstr(message, "device ms: ");
    if (!d)
        return;
    snprintf(g_eap_device_stages, sizeof g_eap_device_stages, "%s", message);
    double v[5];
    if (g_pb.active && sscanf(d, "device ms: upload %lf, tree %lf, attributes %lf, filters %lf, "
                                 "download %lf", &v[0], &v[1], &v[2], &v[3], &v[4]) == 5)
        for (int i = 0; i < 5; i++)
            g_pb.dev_ms[i] += v[i];
}


static int eap_per_band(const options_t *o, const hyprof_cube_t *x,
                        const hyprof_eap_params_t *p)
{
    if (o->per_band >= 0)
        return (int)o->per_band;
    double out_bytes = (double)x->width * (double)x->height * (double)x->bands *
                       (double)hyprof_attribute_planes(p->filters, p->nfilters) * 4.0;
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    return ram > 0 && out_bytes > ram / 4;
}

/* Exact sum of 16-bit values: 32-bit partial sums of 65536 values at most
 * (they cannot overflow), which the compiler vectorises. */
static uint64_t sum_u16(const uint16_t *v, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += 65536) {
        size_t e = n - i < 65536 ? n : i + 65536;
        uint32_t part = 0;
        for (size_t j = i; j < e; j++)
            part += v[j];
        sum += part;
    }
    return sum;
}

/* hyprof_attribute_profiles_bands' functions: nothing (the timed calls:
 * the library's own pace, its next band's work overlapping the function),
 * and the checksum (an extra, untimed call in the last repetition). */
static int eap_band_none(void *user, size_t band, const uint16_t *planes)
{
    (void)user;
    (void)band;
    (void)planes;
    return 0;
}
static int eap_band_sum(void *user, size_t band, const uint16_t *planes)
{
    (void)band;
    *(uint64_t *)user += sum_u16(planes, g_pb.n * g_pb.planes);
    return 0;
}

static hyprof_status_t run_eap_per_band(hyprof_ctx_t *ctx, const hyprof_cube_t *x,
                                        const hyprof_eap_params_t *p, hyprof_cube_t *out,
                                        double *profile_s)
{
    size_t n = x->width * x->height, planes = hyprof_attribute_planes(p->filters, p->nfilters);
    if (!g_pb.q) {
        g_pb.q = malloc(n * x->bands * sizeof *g_pb.q);
        g_pb.buf = malloc(n * planes * sizeof *g_pb.buf);
        if (!g_pb.q || !g_pb.buf) {
            fprintf(stderr, "hyprof_bench: out of memory for the per-band buffers\n");
            return HYPROF_ERR_NOMEM;
        }
    }
    g_pb.active = 1;
    g_pb.bands = x->bands;
    g_pb.planes = planes;
    g_pb.n = n;
    double t0 = now_seconds();
    hyprof_status_t st = hyprof_quantise(ctx, x, p->levels, g_pb.q, NULL);
    double timed = now_seconds() - t0;
    uint64_t sum = 0;
    memset(g_pb.dev_ms, 0, sizeof g_pb.dev_ms);
    if (st == HYPROF_OK && !g_pb.calls) {
        t0 = now_seconds();
        st = hyprof_attribute_profiles_bands(ctx, g_pb.q, x->bands, x->mask, x->width,
                                             x->height, p->levels, p->connectivity, p->filters,
                                             p->nfilters, 0, g_pb.buf, eap_band_none, NULL);
        timed += now_seconds() - t0;
        double saved[5];
        char saved_stages[sizeof g_eap_device_stages];
        memcpy(saved, g_pb.dev_ms, sizeof saved); /* the timed call's stages */
        memcpy(saved_stages, g_eap_device_stages, sizeof saved_stages);
        if (st == HYPROF_OK && g_pb.last_rep)
            st = hyprof_attribute_profiles_bands(ctx, g_pb.q, x->bands, x->mask, x->width,
                                                 x->height, p->levels, p->connectivity,
                                                 p->filters, p->nfilters, 0, g_pb.buf,
                                                 eap_band_sum, &sum);
        memcpy(g_pb.dev_ms, saved, sizeof saved);
        memcpy(g_eap_device_stages, saved_stages, sizeof saved_stages);
    }
    for (size_t b = 0; st == HYPROF_OK && g_pb.calls && b < x->bands; b++) {
        t0 = now_seconds();
        st = hyprof_attribute_profiles(ctx, g_pb.q + b * n, x->mask, x->width, x->height,
                                       p->levels, p->connectivity, p->filters, p->nfilters, 0,
                                       g_pb.buf);
        timed += now_seconds() - t0;
        if (st == HYPROF_OK && g_pb.last_rep)
            sum += sum_u16(g_pb.buf, n * planes);
    }
    g_pb.sum = g_pb.abs_sum = (double)sum;
    *profile_s = timed;
    *out = hyprof_cube_bsq(g_pb.buf, HYPROF_UINT16, x->width, x->height, planes);
    return st;
}

/* --op eadp with CUDA: the device stage times and FED figures the library
 * logs at debug level ("pca: cuda device ms: upload 1.2, covariance 0.9, ...",
 * "eadp: cuda device ms: ...", "eadp: cuda FED bandwidth: X GB/s (P% of the
 * Y GB/s peak; ...); Z GB/s unfused-equivalent ..."), as named values of the
 * current repetition: pca_upload, eadp_fed, eadp_fed_gbs, ... */
#define MAX_DEV_STAGES 24
static struct {
    size_t n;
    char name[MAX_DEV_STAGES][32];
    double now[MAX_DEV_STAGES];
} g_dev;

static void dev_set(const char *prefix, const char *name, size_t len, double v)
{
    char key[32];
    snprintf(key, sizeof key, "%s_%.*s", prefix, (int)len, name);
    size_t k = 0;
    while (k < g_dev.n && strcmp(g_dev.name[k], key))
        k++;
    if (k == g_dev.n) {
        if (g_dev.n == MAX_DEV_STAGES)
            return;
        snprintf(g_dev.name[g_dev.n++], sizeof g_dev.name[0], "%s", key);
    }
    g_dev.now[k] = v;
}

/* The figure after `key` in `text`, NAN when absent. */
static double number_after(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static void keep_eadp_device(void *user, hyprof_log_level_t level, const char *message)
{
    (void)user;
    (void)level;
    if (getenv("HYPROF_BENCH_TRACE")) /* the library's debug lines (which covariance ran...) */
        fprintf(stderr, "%s\n", message);
    const char *colon = strchr(message, ':'), *p = strstr(message, "device ms:");
    if (!colon || colon - message > 8)
        return;
    char prefix[9];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(colon - message), message);
    if (p) { /* "name value, name value, ..." */
        p += strlen("device ms:");
        while (*p) {
            while (*p == ' ' || *p == ',')
                p++;
            const char *w = p;
            while ((*p >= 'a' && *p <= 'z') || *p == '_')
                p++;
            if (p == w || *p != ' ')
                break;
            char *end;
            double v = strtod(p, &end);
            if (end == p)
                break;
            dev_set(prefix, w, (size_t)(p - w), v);
            p = end;
        }
    } else if (strstr(message, "host eigh")) { /* host time, not device */
        dev_set(prefix, "host_eigh", 9, number_after(message, "): "));
    } else if (strstr(message, "FED bandwidth:")) {
        dev_set(prefix, "fed_gbs", 7, number_after(message, "bandwidth: "));
        dev_set(prefix, "fed_peak_gbs", 12, number_after(message, "% of the "));
        dev_set(prefix, "fed_unfused_gbs", 15, number_after(message, "); "));
    }
}

/* The EAP paper's pipeline: the spectral reduction, then the profile. */
static hyprof_status_t run_eap(hyprof_ctx_t *ctx, const options_t *o, const hyprof_cube_t *in,
                               const hyprof_eap_params_t *p, hyprof_cube_t *out, timing_t *t)
{
    hyprof_cube_t feat;
    memset(&feat, 0, sizeof feat);
    hyprof_status_t st = HYPROF_OK;
    double t0 = now_seconds();
    if (!strcmp(o->reduction, "pca")) {
        hyprof_pca_model_t *model = NULL;
        st = hyprof_pca_fit_transform(ctx, in, (size_t)o->components, &model, &feat);
        hyprof_pca_model_free(&model);
    } else if (!strcmp(o->reduction, "dwt")) {
        st = hyprof_dwt_spectral(ctx, in, hyprof_wavelet_find(o->wavelet), (int)o->levels,
                                 &feat);
    }
    double t1 = now_seconds(), profile_s = 0.0;
    const hyprof_cube_t *x = strcmp(o->reduction, "none") ? &feat : in;
    int per_band = st == HYPROF_OK ? eap_per_band(o, x, p) : 0;
    g_pb.calls = per_band == 2;
    if (per_band)
        st = run_eap_per_band(ctx, x, p, out, &profile_s);
    else if (st == HYPROF_OK) {
        st = hyprof_eap(ctx, x, p, out, NULL);
        profile_s = now_seconds() - t1;
    }
    hyprof_cube_free(&feat);
    t->fit = t1 - t0;        /* the reduction */
    t->apply = profile_s;    /* the profile */
    t->total = t->fit + profile_s;
    return st;
}

/* --pipeline op for pca: the pca operation as the CLI runs it (fit-transform);
 * only the total is timed. */
static hyprof_status_t run_pca_op(hyprof_ctx_t *ctx, const options_t *o, const hyprof_cube_t *in,
                                  hyprof_cube_t *out, timing_t *t)
{
    const hyprof_op_t *op = hyprof_op_find("pca");
    hyprof_args_t *args = op ? hyprof_args_new(op) : NULL;
    if (!args)
        return HYPROF_ERR_NOMEM;
    char v[32];
    snprintf(v, sizeof v, "%ld", o->components);
    return run_op_timed(ctx, op, args, hyprof_args_set(args, "components", v), in, out, t, NULL);
}

/* One run of the operation; `out` receives the owned result cube. */
static hyprof_status_t run_once(hyprof_ctx_t *ctx, const options_t *o,
                                const hyprof_cube_t *in, const hyprof_wavelet_t *wav,
                                const hyprof_eadp_params_t *ep, const hyprof_eap_params_t *pp,
                                hyprof_cube_t *out, timing_t *t)
{
    hyprof_status_t st;
    memset(out, 0, sizeof *out);
    t->denoise = NAN;
    t->nstages = t->ndev = 0; /* only sspp and unmix name their stages */
    if (!strcmp(o->op, "eadp"))
        return run_eadp(ctx, o, in, ep, out, t);
    if (is_profile_op(o))
        return run_profile(ctx, o, in, out, t);
    if (!strcmp(o->op, "sspp") || !strcmp(o->op, "unmix"))
        return run_registry(ctx, o, in, out, t);
    if (!strcmp(o->op, "eap"))
        return run_eap(ctx, o, in, pp, out, t);
    double t0 = now_seconds();
    if (!strcmp(o->op, "classify") || !strcmp(o->op, "train")) {
        st = !strcmp(o->op, "train") ? run_train(ctx, o, in, out)
                                     : hyprof_classify(ctx, g_cls.model, in, out, NULL);
        t->total = now_seconds() - t0;
        t->fit = t->apply = NAN;
    } else if (!strcmp(o->op, "pca") && !strcmp(o->pipeline, "op")) {
        return run_pca_op(ctx, o, in, out, t);
    } else if (!strcmp(o->op, "pca")) {
        hyprof_pca_model_t *model = NULL;
        st = hyprof_pca_fit(ctx, in, (size_t)o->components, &model);
        double t1 = now_seconds();
        if (st == HYPROF_OK)
            st = hyprof_pca_apply(ctx, model, in, out);
        double t2 = now_seconds();
        hyprof_pca_model_free(&model);
        t->fit = t1 - t0;
        t->apply = t2 - t1;
        t->total = t2 - t0;
    } else {
        st = hyprof_dwt_spectral(ctx, in, wav, (int)o->levels, out);
        t->total = now_seconds() - t0;
        t->fit = t->apply = NAN;
    }
    return st;
}

static double min_of(const double *v, size_t n)
{
    double m = v[0];
    for (size_t i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static void checksum(const hyprof_cube_t *out, double *sum, double *abs_sum)
{
    const float *p = out->data;
    size_t n = out->width * out->height * out->bands;
    double s = 0.0, a = 0.0;
    if (out->dtype == HYPROF_UINT16) { /* a class map */
        const uint16_t *q = out->data;
        for (size_t i = 0; i < n; i++)
            s += q[i];
        *sum = *abs_sum = s;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (isnan(p[i]))
            continue;
        s += p[i];
        a += fabs(p[i]);
    }
    *sum = s;
    *abs_sum = a;
}

static void print_classification(const options_t *o)
{
    if (!strcmp(o->op, "classify")) {
        const hyprof_classifier_t *m = g_cls.model;
        printf(",\"classifier\":\"%s\",\"classes\":%zu,\"model_size\":%zu",
               m && hyprof_classifier_kind(m) == HYPROF_CLASSIFIER_ELM ? "elm" : "svm",
               m ? hyprof_classifier_classes(m) : 0, m ? hyprof_classifier_size(m) : 0);
        return;
    }
    printf(",\"classifier\":");
    json_string(stdout, o->classifier);
    printf(",\"grid\":");
    json_string(stdout, o->grid);
    if (g_cls.size)
        printf(",\"model_size\":%zu,\"best_c\":%.17g,\"best_gamma\":%.17g,\"cv_accuracy\":%.17g",
               g_cls.size, g_cls.best_c, isnan(g_cls.best_gamma) ? -1.0 : g_cls.best_gamma,
               isnan(g_cls.cv_accuracy) ? -1.0 : g_cls.cv_accuracy);
}

static void print_head(const options_t *o, const char *backend, const char *device)
{
    printf("{\"op\":");
    json_string(stdout, o->op);
    printf(",\"backend\":");
    json_string(stdout, backend);
    printf(",\"device\":");
    json_string(stdout, device);
    printf(",\"width\":%zu,\"height\":%zu,\"bands\":%zu", o->width, o->height, o->bands);
    if (!strcmp(o->op, "pca"))
        printf(",\"components\":%ld", o->components);
    else if (!strcmp(o->op, "eadp"))
        printf(",\"components\":%ld,\"count\":%ld,\"step\":%.17g,\"cycles\":%ld,"
               "\"pipeline\":\"%s\"",
               o->components, o->count, o->step, o->cycles, o->pipeline);
    else if (is_profile_op(o)) {
        printf(",\"wavelet\":");
        json_string(stdout, o->wavelet);
        printf(",\"levels\":%d,\"features\":%ld,\"radii\":\"1,3,5,7\",\"devices\":%zu",
               feature_levels(o), o->features, o->ndevices ? o->ndevices : 1);
    }
    else if (!strcmp(o->op, "classify") || !strcmp(o->op, "train"))
        print_classification(o);
    else if (!strcmp(o->op, "sspp"))
        printf(",\"endmembers\":%ld", o->endmembers);
    else if (!strcmp(o->op, "unmix"))
        printf(",\"endmembers\":%ld,\"sspp\":%s,\"extract\":\"%s\",\"abundances\":\"fcls\"",
               o->endmembers, o->sspp ? "true" : "false", o->extract);
    else if (!strcmp(o->op, "eap")) {
        printf(",\"reduction\":");
        json_string(stdout, o->reduction);
        if (!strcmp(o->reduction, "pca"))
            printf(",\"components\":%ld", o->components);
        else if (!strcmp(o->reduction, "dwt")) {
            printf(",\"wavelet\":");
            json_string(stdout, o->wavelet);
            printf(",\"levels\":%ld", o->levels);
        }
        printf(",\"attribute\":");
        json_string(stdout, o->attribute);
        printf(",\"connectivity\":%ld,\"quantisation\":%ld", o->connectivity,
               o->quantisation);
    }
    else {
        printf(",\"wavelet\":");
        json_string(stdout, o->wavelet);
        printf(",\"levels\":%ld", o->levels);
    }
    printf(",\"hyprof_version\":");
    json_string(stdout, hyprof_version());
    printf(",\"hyprof_build\":");
    json_string(stdout, hyprof_build_info());
}

static int fail(hyprof_ctx_t *ctx, const char *what, hyprof_status_t st)
{
    const char *msg = ctx ? hyprof_ctx_last_error(ctx) : NULL;
    fprintf(stderr, "hyprof_bench: %s failed: %s%s%s\n", what, hyprof_status_text(st),
            msg && *msg ? ": " : "", msg && *msg ? msg : "");
    return EXIT_RUNTIME;
}

int main(int argc, char **argv)
{
    options_t o;
    if (parse_args(argc, argv, &o)) {
        usage(stderr);
        return EXIT_USAGE;
    }
    hyprof_backend_t backend;
    if (hyprof_backend_parse(o.backend, &backend) != HYPROF_OK) {
        fprintf(stderr, "hyprof_bench: bad --backend '%s' (auto, cpu or cuda)\n", o.backend);
        return EXIT_USAGE;
    }
    const hyprof_wavelet_t *wav = NULL;
    if (is_profile_op(&o) && !o.wavelet_given)
        o.wavelet = "haar";
    if ((!strcmp(o.op, "dwt") || is_profile_op(&o) ||
         (!strcmp(o.op, "eap") && !strcmp(o.reduction, "dwt"))) &&
        !(wav = hyprof_wavelet_find(o.wavelet))) {
        fprintf(stderr, "hyprof_bench: unknown --wavelet '%s'\n", o.wavelet);
        return EXIT_USAGE;
    }

    char device[256];
    if (backend == HYPROF_BACKEND_CUDA) {
        if (hyprof_cuda_device_count() <= (int)o.device) {
            print_head(&o, "cuda", "none");
            printf(",\"skipped\":\"no CUDA device %ld (library built %s, %d device(s))\"}\n",
                   o.device, hyprof_build_info(), hyprof_cuda_device_count());
            return 0;
        }
        size_t total = 0, free_b = 0;
        hyprof_status_t st = hyprof_cuda_device_info((int)o.device, device, sizeof device,
                                                     &total, &free_b);
        if (st != HYPROF_OK)
            return fail(NULL, "hyprof_cuda_device_info", st);
    } else {
        cpu_name(device, sizeof device);
    }

    size_t count = o.width * o.height * o.bands;
    if (count / o.width / o.height != o.bands) {
        fprintf(stderr, "hyprof_bench: cube size overflows\n");
        return EXIT_USAGE;
    }
    float *data = read_cube(o.input, count);
    if (!data)
        return EXIT_USAGE;
    hyprof_cube_t pinned_in = {0};
    if (o.pinned) { /* the input page-locked, the outputs from the cache */
        if (hyprof_cube_alloc_pinned(&pinned_in, HYPROF_FLOAT32, o.width, o.height, o.bands) !=
            HYPROF_OK) {
            fprintf(stderr, "hyprof_bench: cannot allocate the page-locked input\n");
            free(data);
            return EXIT_RUNTIME;
        }
        memcpy(pinned_in.data, data, count * sizeof *data);
        free(data);
        data = pinned_in.data;
        hyprof_pinned_cache_set((size_t)64 << 30);
    }
#define FREE_INPUT() (pinned_in.data ? hyprof_cube_free(&pinned_in) : free(data))

    hyprof_ctx_t *ctx = hyprof_ctx_new();
    if (!ctx) {
        FREE_INPUT();
        fprintf(stderr, "hyprof_bench: hyprof_ctx_new failed\n");
        return EXIT_RUNTIME;
    }
    hyprof_status_t st = hyprof_ctx_set_backend(ctx, backend);
    if (st == HYPROF_OK)
        st = hyprof_ctx_set_device(ctx, (int)o.device);
    if (st == HYPROF_OK)
        st = hyprof_ctx_set_threads(ctx, (int)o.threads);
    if (st != HYPROF_OK) {
        int rc = fail(ctx, "context setup", st);
        hyprof_ctx_free(&ctx);
        FREE_INPUT();
        return rc;
    }
    hyprof_cube_t in = hyprof_cube_bsq(data, HYPROF_FLOAT32, o.width, o.height, o.bands);
    hyprof_eadp_params_t ep;
    double *times = NULL;
    hyprof_eadp_params_default(&ep);
    hyprof_eap_params_t pp;
    hyprof_attribute_filter_t pf;
    double pthr[HYPROF_ATTRIBUTE_MAX_THRESHOLDS];
    if (!strcmp(o.op, "eap")) {
        if (eap_params(&o, &pp, &pf, pthr)) {
            hyprof_ctx_free(&ctx);
            FREE_INPUT();
            return EXIT_USAGE;
        }
        hyprof_ctx_set_log(ctx, keep_device_stages, NULL);
    }
    if (is_profile_op(&o)) {
        setenv("HYPROF_LOG", "debug", 1); /* the stage lines */
        hyprof_ctx_set_log(ctx, keep_share_stages, NULL);
    }
    if (!strcmp(o.op, "eadp")) {
        hyprof_ctx_set_log(ctx, keep_eadp_device, NULL);
        if (!(times = malloc((size_t)o.count * sizeof *times))) {
            fprintf(stderr, "hyprof_bench: out of memory\n");
            hyprof_ctx_free(&ctx);
            FREE_INPUT();
            return EXIT_RUNTIME;
        }
        for (long i = 0; i < o.count; i++)
            times[i] = o.step * (double)(i + 1);
        ep.times = times;
        ep.ntimes = (size_t)o.count;
        ep.cycles = (int)o.cycles;
    }

    size_t n = (size_t)o.repeat;
    double *tot = calloc(n, sizeof *tot), *fit = calloc(n, sizeof *fit),
           *app = calloc(n, sizeof *app), *den = calloc(n, sizeof *den),
           *scratch = calloc(n, sizeof *scratch), *stg = calloc(n * MAX_STAGES, sizeof *stg),
           *dev = calloc(n * MAX_DEV_STAGES, sizeof *dev),
           *dstg = calloc(n * MAX_STAGES, sizeof *dstg);
    char(*share_lines)[MAX_SHARES][1024] = calloc(n, sizeof *share_lines);
    size_t nshare = MAX_SHARES;
    hyprof_cube_t out;
    timing_t t;
    int rc = 0;
    if (!tot || !fit || !app || !den || !scratch || !stg || !dev || !dstg || !share_lines) {
        fprintf(stderr, "hyprof_bench: out of memory\n");
        rc = EXIT_RUNTIME;
        goto done;
    }
    if ((!strcmp(o.op, "classify") || !strcmp(o.op, "train")) &&
        (st = load_classification(ctx, &o)) != HYPROF_OK) {
        rc = fail(ctx, o.op, st);
        goto done;
    }
    /* Warm-up, untimed (training has nothing to warm up and is long). */
    st = strcmp(o.op, "train") ? run_once(ctx, &o, &in, wav, &ep, &pp, &out, &t) : HYPROF_OK;
    if (st != HYPROF_OK) {
        rc = fail(ctx, o.op, st);
        goto done;
    }
    const double first_s = t.total;
    if (strcmp(o.op, "train"))
        hyprof_cube_free(&out);
    for (size_t r = 0; r < n; r++) {
        for (size_t k = 0; k < MAX_DEV_STAGES; k++)
            g_dev.now[k] = NAN;
        g_pb.last_rep = r + 1 == n;
        st = run_once(ctx, &o, &in, wav, &ep, &pp, &out, &t);
        if (st != HYPROF_OK) {
            rc = fail(ctx, o.op, st);
            goto done;
        }
        for (size_t k = 0; k < g_dev.n; k++)
            dev[k * n + r] = g_dev.now[k];
        tot[r] = t.total;
        fit[r] = t.fit;
        app[r] = t.apply;
        den[r] = t.denoise;
        for (size_t k = 0; k < t.nstages; k++)
            stg[k * n + r] = t.stage[k];
        memcpy(share_lines[r], g_share_line, sizeof g_share_line);
        nshare = share_count() < nshare ? share_count() : nshare;
        for (size_t k = 0; k < t.ndev; k++)
            dstg[k * n + r] = t.dev[k];
        if (r + 1 < n)
            hyprof_cube_free(&out);
    }
    /* `out` now holds the last repetition's result. */
    double sum, abs_sum;
    checksum(&out, &sum, &abs_sum);
    size_t out_bands = out.bands;
    if (g_pb.active) { /* out is the last band's planes only */
        sum = g_pb.sum;
        abs_sum = g_pb.abs_sum;
        out_bands = g_pb.bands * g_pb.planes;
        if (o.output) {
            fprintf(stderr, "hyprof_bench: --output is not written in per-band mode\n");
            hyprof_cube_free(&out);
            rc = EXIT_USAGE;
            goto done;
        }
    }
    if (o.output && write_cube(o.output, &out)) {
        hyprof_cube_free(&out);
        rc = EXIT_RUNTIME;
        goto done;
    }
    hyprof_backend_t used = hyprof_ctx_used_backend(ctx);
    if (backend != HYPROF_BACKEND_AUTO && used != backend) {
        fprintf(stderr, "hyprof_bench: asked for %s but the library ran on %s\n",
                hyprof_backend_name(backend), hyprof_backend_name(used));
        hyprof_cube_free(&out);
        rc = EXIT_RUNTIME;
        goto done;
    }
    if (used != HYPROF_BACKEND_CUDA)
        cpu_name(device, sizeof device);

    int threads = hyprof_ctx_threads(ctx);
    if (threads <= 0)
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    double min_total = tot[0];
    for (size_t r = 1; r < n; r++)
        if (tot[r] < min_total)
            min_total = tot[r];

    print_head(&o, hyprof_backend_name(used), device);
    printf(",\"threads\":%d,\"repeat\":%zu,\"out_bands\":%zu", threads, n, out_bands);
    printf(",\"median_s\":%.9g,\"min_s\":%.9g", median(tot, scratch, n), min_total);
    printf(",\"host_memory\":\"%s\"", o.pinned ? "pinned" : "pageable");
    if (strcmp(o.op, "train"))
        printf(",\"first_s\":%.9g", first_s);
    if (!strcmp(o.op, "pca") && !strcmp(o.pipeline, "api"))
        printf(",\"stages\":{\"fit_median_s\":%.9g,\"apply_median_s\":%.9g}",
               median(fit, scratch, n), median(app, scratch, n));
    else if (!strcmp(o.op, "eadp")) {
        if (!strcmp(o.pipeline, "api")) /* the op pipeline times only its total */
            printf(",\"stages\":{\"pca_median_s\":%.9g,\"eadp_median_s\":%.9g,"
                   "\"eadp_min_s\":%.9g}",
                   median(fit, scratch, n), median(app, scratch, n), min_of(app, n));
        if (used == HYPROF_BACKEND_CUDA && g_dev.n) { /* medians; null if not logged */
            printf(",\"device_ms\":{");
            for (size_t k = 0; k < g_dev.n; k++) {
                double v = median(dev + k * n, scratch, n);
                printf(isfinite(v) ? "%s\"%s\":%.6g" : "%s\"%s\":null", k ? "," : "",
                       g_dev.name[k], v);
            }
            printf("}");
        }
    }
    else if (t.nstages) {
        printf(",\"stages\":{");
        for (size_t k = 0; k < t.nstages; k++)
            printf("%s\"%s_median_s\":%.9g", k ? "," : "", t.stage_name[k],
                   median(stg + k * n, scratch, n));
        printf("}");
        if (g_extract_steps[0]) {
            printf(",\"extraction_steps\":");
            json_string(stdout, g_extract_steps);
        }
        if (t.ndev) { /* device (CUDA event) times of the CUDA stages */
            printf(",\"device_stages\":{");
            for (size_t k = 0; k < t.ndev; k++)
                printf("%s\"%s_median_s\":%.9g", k ? "," : "", t.dev_name[k],
                       median(dstg + k * n, scratch, n));
            printf("}");
        }
    }
    else if (!strcmp(o.op, "eap")) {
        printf(",\"stages\":{\"reduction_median_s\":%.9g,\"profile_median_s\":%.9g,"
               "\"profile_min_s\":%.9g}",
               median(fit, scratch, n), median(app, scratch, n), min_of(app, n));
        if (g_pb.active)
            printf(",\"per_band\":\"the profile band by band (%s), 16-bit levels into one "
                   "reused buffer of one band's planes; timed: the quantisation and the "
                   "call%s\"",
                   g_pb.calls ? "hyprof_attribute_profiles, a call per band"
                              : "hyprof_attribute_profiles_bands, one call",
                   g_pb.calls ? "s" : " (its band function doing nothing; the checksum from "
                                      "another, untimed, call)");
        if (g_pb.active && used == HYPROF_BACKEND_CUDA)
            printf(",\"device_ms_all_bands\":{\"upload\":%.3f,\"tree\":%.3f,"
                   "\"attributes\":%.3f,\"filters\":%.3f,\"download\":%.3f}",
                   g_pb.dev_ms[0], g_pb.dev_ms[1], g_pb.dev_ms[2], g_pb.dev_ms[3],
                   g_pb.dev_ms[4]);
        if (used == HYPROF_BACKEND_CUDA && g_eap_device_stages[0]) {
            printf(",\"device_stages\":");
            json_string(stdout, g_eap_device_stages);
        }
    }
    if (is_profile_op(&o) && nshare)
        print_share_stages(share_lines, n, nshare, scratch);
    printf(",\"times_s\":[");
    for (size_t r = 0; r < n; r++) /* in run order */
        printf("%s%.9g", r ? "," : "", tot[r]);
    printf("],\"checksum\":%.17g,\"checksum_abs\":%.17g}\n", sum, abs_sum);
    hyprof_cube_free(&out);

done:
    hyprof_classifier_free(&g_cls.model);
    free(g_pb.q);
    free(g_pb.buf);
    free(g_cls.labels);
    free(times);
    free(tot);
    free(fit);
    free(app);
    free(den);
    free(scratch);
    free(stg);
    free(share_lines);
    free(dev);
    free(dstg);
    hyprof_ctx_free(&ctx);
    FREE_INPUT();
    return rc;
}
