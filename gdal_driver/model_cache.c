/* The pixel functions' model cache: a short list under one mutex. Models are
 * loaded under the lock: they are small files, and so each is loaded exactly
 * once however many threads ask for it at the same time. */
#include "model_cache.h"

#include <cpl_error.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct entry {
    const hyprof_model_kind_t *kind;
    char *path;
    dev_t dev; /* the file's identity and state when loaded */
    ino_t ino;
    struct timespec mtime;
    off_t size;
    void *model;
    unsigned users;
    int stale; /* the file changed: freed when its last user releases it */
    struct entry *next;
} entry_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t *entries;

static int same_file(const entry_t *e, const hyprof_model_kind_t *kind, const char *path,
                     const struct stat *sb)
{
    return e->kind == kind && strcmp(e->path, path) == 0 && e->dev == sb->st_dev &&
           e->ino == sb->st_ino && e->mtime.tv_sec == sb->st_mtim.tv_sec && e->mtime.tv_nsec == sb->st_mtim.tv_nsec &&
           e->size == sb->st_size;
}

/* Under the lock: the current entry for the file, marking older ones stale. */
static entry_t *find(const hyprof_model_kind_t *kind, const char *path, const struct stat *sb)
{
    entry_t *hit = NULL;
    for (entry_t *e = entries; e; e = e->next) {
        if (e->stale || e->kind != kind || strcmp(e->path, path) != 0)
            continue;
        if (same_file(e, kind, path, sb))
            hit = e;
        else
            e->stale = 1;
    }
    return hit;
}

static void free_entry(entry_t *e)
{
    e->kind->free(e->model);
    free(e->path);
    free(e);
}

/* Under the lock: frees stale entries nobody holds. */
static void sweep(void)
{
    for (entry_t **p = &entries; *p;) {
        entry_t *e = *p;
        if (e->stale && e->users == 0) {
            *p = e->next;
            free_entry(e);
        } else {
            p = &e->next;
        }
    }
}

static void *load(const char *who, const hyprof_model_kind_t *kind, const char *path)
{
    hyprof_ctx_t *ctx = hyprof_ctx_new();
    void *model = NULL;
    if (!ctx) {
        CPLError(CE_Failure, CPLE_OutOfMemory, "%s: out of memory", who);
        return NULL;
    }
    if (kind->load(ctx, path, &model) != HYPROF_OK) {
        CPLError(CE_Failure, CPLE_OpenFailed, "%s: cannot load %s '%s': %s", who, kind->name,
                 path, hyprof_ctx_last_error(ctx));
        model = NULL;
    }
    hyprof_ctx_free(&ctx);
    if (model)
        CPLDebug("HYPROF", "%s: loaded %s '%s'", who, kind->name, path);
    return model;
}

const void *hyprof_model_acquire(const char *who, const hyprof_model_kind_t *kind,
                                 const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        CPLError(CE_Failure, CPLE_OpenFailed, "%s: %s '%s' does not exist", who, kind->name,
                 path);
        return NULL;
    }
    pthread_mutex_lock(&lock);
    entry_t *e = find(kind, path, &sb);
    if (!e) {
        void *model = load(who, kind, path);
        e = model ? calloc(1, sizeof *e) : NULL;
        char *copy = e ? strdup(path) : NULL;
        if (copy) {
            *e = (entry_t){kind, copy, sb.st_dev, sb.st_ino, sb.st_mtim, sb.st_size, model, 0, 0,
                           entries};
            entries = e;
        } else {
            if (model) {
                kind->free(model);
                CPLError(CE_Failure, CPLE_OutOfMemory, "%s: out of memory", who);
            }
            free(e);
            e = NULL;
        }
        sweep();
    }
    if (e)
        e->users++;
    pthread_mutex_unlock(&lock);
    return e ? e->model : NULL;
}

void hyprof_model_release(const void *model)
{
    if (!model)
        return;
    pthread_mutex_lock(&lock);
    for (entry_t *e = entries; e; e = e->next)
        if (e->model == model && e->users > 0) {
            e->users--;
            break;
        }
    sweep();
    pthread_mutex_unlock(&lock);
}

static hyprof_status_t load_classifier(hyprof_ctx_t *ctx, const char *path, void **model)
{
    return hyprof_classifier_load(ctx, path, (hyprof_classifier_t **)model);
}

static void free_classifier(void *model)
{
    hyprof_classifier_t *m = model;
    hyprof_classifier_free(&m);
}

const hyprof_model_kind_t hyprof_model_classifier = {"classifier model", load_classifier,
                                                     free_classifier};

static hyprof_status_t load_endmembers(hyprof_ctx_t *ctx, const char *path, void **model)
{
    return hyprof_endmembers_load_csv(ctx, path, (hyprof_endmembers_t **)model);
}

static void free_endmembers(void *model)
{
    hyprof_endmembers_t *em = model;
    hyprof_endmembers_free(&em);
}

const hyprof_model_kind_t hyprof_model_endmembers = {"endmember set", load_endmembers,
                                                     free_endmembers};
