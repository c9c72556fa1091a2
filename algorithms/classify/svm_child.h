/* A LIBSVM training run in a child process, so that cancelling stops it
 * (svm_child.c). */
#ifndef HYPROF_CLASSIFY_SVM_CHILD_H
#define HYPROF_CLASSIFY_SVM_CHILD_H

#include "../core/internal.h"

#include <stddef.h>

/* The work: an answer in a malloc'ed buffer (*out, *len bytes); 0 on
 * success, non-zero when out of memory. */
typedef int (*hyprof__child_fn)(void *arg, void **out, size_t *len);

/* A training on at most this many rows runs in this process: it ends within
 * a few tenths of a second, so cancelling between trainings is prompt
 * enough, and a fork costs more than such a training once the process holds
 * a CUDA context (bench/NOTES.md). */
#define HYPROF_SVM_CHILD_MIN_ROWS 1000

/* Runs fn(arg), a training on `rows` rows, in a forked child (in this
 * process for HYPROF_SVM_CHILD_MIN_ROWS rows or fewer) and hands its answer
 * back in *out (malloc'ed, *len bytes; free it). HYPROF_ERR_CANCELLED as
 * soon as `ctx` is cancelled (the child killed and reaped); HYPROF_ERR_NOMEM
 * when fn failed or the answer cannot be held; HYPROF_ERR_INTERNAL when the
 * child died, `why` (when not NULL, 96 bytes) telling how. Records no error
 * in `ctx`: it may run on several OpenMP threads at once. Where no child can
 * be started (fork fails), fn runs in this process. */
hyprof_status_t hyprof__run_in_child(hyprof_ctx_t *ctx, hyprof__child_fn fn, void *arg,
                                     size_t rows, void **out, size_t *len, char *why);

#endif
