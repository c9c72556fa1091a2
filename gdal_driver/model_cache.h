/* Fitted models (PCA, classifiers, endmember sets) loaded once per
 * process for the pixel functions: a thread-safe cache keyed by kind, path,
 * device, inode, modification time and size, so an edited or replaced model
 * file is reloaded. */
#ifndef HYPROF_MODEL_CACHE_H
#define HYPROF_MODEL_CACHE_H

#include "hyprof/hyprof.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model kind: how to load and free one (the library's own functions). */
typedef struct {
    const char *name; /* "PCA model" */
    hyprof_status_t (*load)(hyprof_ctx_t *ctx, const char *path, void **model);
    void (*free)(void *model);
} hyprof_model_kind_t;

/* Kinds shared by several pixel functions (hyprof_classify and hyprof_decision
 * hold one loaded classifier between them). */
extern const hyprof_model_kind_t hyprof_model_classifier; /* `hyprof train` output */
extern const hyprof_model_kind_t hyprof_model_endmembers; /* `hyprof unmix` CSV */

/* The model at `path`, loaded on first use; held until hyprof_model_release.
 * NULL after a CPLError naming `who`, the file and the library's reason.
 * Each load says so in a CPLDebug message ("HYPROF"). */
const void *hyprof_model_acquire(const char *who, const hyprof_model_kind_t *kind,
                                 const char *path);
void hyprof_model_release(const void *model);

#ifdef __cplusplus
}
#endif
#endif
