/* The files of one run: inputs checked before any work, outputs written to
 * temporaries and committed all together or not at all.
 *
 * Every file argument (the registry's positionals, FILE_IN/RASTER_IN and
 * FILE_OUT parameters, side files named beside OUTPUT) is compared by
 * identity: the device and inode of the file after following links, or, for
 * an output that does not exist yet, those of its folder plus its name. An
 * output that is an input or another output is refused whatever --overwrite
 * says, so no run can destroy what it reads.
 *
 * Outputs go to short hidden names beside their targets
 * (".<n>.hyprof-<pid>.tmp": a valid 255-byte target name always leaves room),
 * so GDAL's .aux.xml sidecar of a temporary is ".<n>.hyprof-<pid>.tmp.aux.xml".
 * The commit checks the cancel flag one last time, links each existing target
 * to a backup name, renames every temporary (and sidecar) onto its target and,
 * if one rename fails, puts every target back as it was. Without --overwrite
 * an output is placed only where nothing is (renameat2's RENAME_NOREPLACE, or
 * link() where that is not supported), so of two runs writing one new output
 * at once, one wins and the other fails as if the file had been there.
 * Temporaries of dead runs (their pid in the name, kill(pid, 0) fails with
 * ESRCH) are removed when their folder receives an output again. */
#define _GNU_SOURCE /* renameat2 */
#include "cli.h"
#include "raster_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    dev_t dev;
    ino_t ino;
    const char *base; /* NULL: dev/ino are the file's; else the folder's + this name */
} file_id_t;

static char *folder_of(const char *path)
{
    char *copy = strdup(path);
    char *d = copy ? strdup(dirname(copy)) : NULL;
    free(copy);
    return d;
}

static const char *base_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The identity of `path`; -1 when neither it nor its folder can be found. */
static int file_id(const char *path, file_id_t *id)
{
    struct stat sb;
    if (stat(path, &sb) == 0) {
        id->dev = sb.st_dev;
        id->ino = sb.st_ino;
        id->base = NULL;
        return 0;
    }
    char *dir = folder_of(path);
    int rc = dir && stat(dir, &sb) == 0 ? 0 : -1;
    free(dir);
    id->dev = sb.st_dev;
    id->ino = sb.st_ino;
    id->base = base_of(path);
    return rc;
}

static int same_id(const file_id_t *a, const file_id_t *b)
{
    if (a->dev != b->dev || a->ino != b->ino || !a->base != !b->base)
        return 0;
    return !a->base || strcmp(a->base, b->base) == 0;
}

/* Every file of the command: role ("--html", "OUTPUT"), path, output or not. */
typedef struct {
    char role[72];
    const char *path;
    int out;
} named_file_t;

static size_t list_files(const cli_command_t *cmd, named_file_t *f, size_t max)
{
    size_t n = 0;
    char kind[32], name[64];
    for (int i = 0; i < cmd->nfiles && n < max; i++, n++) {
        cli_positionals(cmd->op, i, kind, sizeof kind, name, sizeof name);
        snprintf(f[n].role, sizeof f[n].role, "%s", name);
        f[n].path = cmd->files[i];
        f[n].out = strstr(kind, "_out") != NULL;
    }
    for (size_t i = 0; i < cmd->op->nparams && n < max; i++) {
        const hyprof_param_t *p = &cmd->op->params[i];
        const char *v = hyprof_args_str(cmd->args, p->name);
        if (!v || (!hyprof_param_is_input(p) && p->type != HYPROF_PARAM_FILE_OUT))
            continue;
        snprintf(f[n].role, sizeof f[n].role, "--%s", p->name);
        f[n].path = v;
        f[n++].out = p->type == HYPROF_PARAM_FILE_OUT;
    }
    return n;
}

int cli_check_distinct(const cli_command_t *cmd)
{
    named_file_t f[CLI_MAX_FILES + 16];
    file_id_t id[CLI_MAX_FILES + 16];
    size_t n = list_files(cmd, f, sizeof f / sizeof *f);
    for (size_t i = 0; i < n; i++) {
        if (file_id(f[i].path, &id[i]) != 0) {
            id[i].base = NULL; /* unknown: compared by name below */
            id[i].dev = 0;
            id[i].ino = 0;
        }
        for (size_t j = 0; j < i; j++) {
            int same = (id[i].dev || id[i].ino) ? same_id(&id[i], &id[j])
                                                : strcmp(f[i].path, f[j].path) == 0;
            if (!same || (!f[i].out && !f[j].out))
                continue;
            cli_error(cmd->op->name,
                      "%s '%s' is the same file as %s '%s': an output may not be an input or "
                      "another output",
                      f[i].role, f[i].path, f[j].role, f[j].path);
            return EXIT_USAGE;
        }
    }
    return EXIT_OK;
}

/* ---- temporaries ------------------------------------------------------------------------ */

/* The pid in a temporary's name (".<n>.hyprof-<pid>.tmp...", or the
 * ".<name>.hyprof-<pid>.tmp.tif" and "<name>.hyprof-<pid>.tmp" of earlier
 * versions); 0 when the name is not one of them. */
static long temp_pid(const char *name)
{
    const char *h = strstr(name, ".hyprof-");
    if (!h || !strstr(h, ".tmp"))
        return 0;
    char *end;
    long pid = strtol(h + 8, &end, 10);
    if (end == h + 8 || (*end != '-' && *end != '.'))
        return 0;
    return pid;
}

static void remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = temp_pid(e->d_name);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (p) {
            snprintf(p, len, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        free(p);
    }
    closedir(d);
}

/* The extension of a file name, with its dot ("" when none, or when too
 * long to keep a temporary name short). */
static const char *extension_of(const char *path)
{
    const char *base = base_of(path), *dot = strrchr(base, '.');
    return dot && dot != base && strlen(dot) <= 16 ? dot : "";
}

/* A new hidden name in path's folder, unique in this process, ending in
 * `ext` (drivers may go by the extension, and name sidecars after it). */
static char *temp_name(const char *path, const char *ext)
{
    static unsigned counter;
    char *dir = folder_of(path);
    if (!dir)
        return NULL;
    size_t len = strlen(dir) + 64 + strlen(ext);
    char *t = malloc(len);
    if (t)
        snprintf(t, len, "%s/.%u.hyprof-%ld.tmp%s", dir, counter++, (long)getpid(), ext);
    free(dir);
    return t;
}

static char *with_aux(const char *path)
{
    size_t len = strlen(path) + 9;
    char *a = malloc(len);
    if (a)
        snprintf(a, len, "%s.aux.xml", path);
    return a;
}

const char *cli_outputs_add(cli_outputs_t *o, const char *path, int raster)
{
    if (o->n == CLI_MAX_OUTPUTS)
        return NULL;
    cli_output_t *f = &o->f[o->n];
    char *dir = folder_of(path);
    if (dir)
        remove_stale_temps(dir);
    free(dir);
    f->final = strdup(path);
    f->tmp = temp_name(path, raster ? extension_of(path) : "");
    f->raster = raster;
    if (!f->final || !f->tmp) {
        free(f->final);
        free(f->tmp);
        return NULL;
    }
    o->n++;
    return f->tmp;
}

/* The files a driver wrote beside a raster temporary ("<tmp>.aux.xml", an
 * ENVI header "<stem>.hdr"): every name in its folder that starts with the
 * temporary's stem ".<n>.hyprof-<pid>.tmp" and is not the temporary itself.
 * fn gets each one's path and the name it takes beside the final file:
 * "<final>" + what follows the extension, or "<final without extension>" +
 * what follows the stem. */
static void for_each_sidecar(const cli_output_t *f,
                             void (*fn)(const char *src, const char *dst, void *user),
                             void *user)
{
    char *dir = folder_of(f->tmp);
    DIR *d = dir ? opendir(dir) : NULL;
    const char *tbase = base_of(f->tmp), *tag = strstr(tbase, ".hyprof-");
    size_t stem = (size_t)(strstr(tag, ".tmp") + 4 - tbase);
    const char *ext = tbase + stem; /* the final's extension, or "" */
    size_t elen = strlen(ext);
    size_t fstem = strlen(f->final) - strlen(extension_of(f->final));
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *rest = e->d_name + stem;
        if (strncmp(e->d_name, tbase, stem) != 0 || rest[0] != '.' || strcmp(e->d_name, tbase) == 0)
            continue;
        int after_ext = elen && strncmp(rest, ext, elen) == 0 && rest[elen] == '.';
        size_t len = strlen(dir) + strlen(e->d_name) + strlen(f->final) + 2;
        char *src = malloc(len), *dst = malloc(len);
        if (src && dst) {
            snprintf(src, len, "%s/%s", dir, e->d_name);
            if (after_ext)
                snprintf(dst, len, "%s%s", f->final, rest + elen);
            else
                snprintf(dst, len, "%.*s%s", (int)fstem, f->final, rest);
            fn(src, dst, user);
        }
        free(src);
        free(dst);
    }
    if (d)
        closedir(d);
    free(dir);
}

static void unlink_sidecar(const char *src, const char *dst, void *user)
{
    (void)dst;
    (void)user;
    unlink(src);
}

void cli_outputs_discard(cli_outputs_t *o)
{
    for (size_t i = 0; i < o->n; i++) {
        if (o->f[i].raster)
            for_each_sidecar(&o->f[i], unlink_sidecar, NULL);
        unlink(o->f[i].tmp);
        free(o->f[i].tmp);
        free(o->f[i].final);
    }
    o->n = 0;
}

/* ---- commit ------------------------------------------------------------------------------ */

/* One file move of the commit: src onto dst (src NULL: dst is removed);
 * exclusive: dst must not exist (an output without --overwrite). */
typedef struct {
    char *src, *dst, *backup;
    int exclusive, linked, done;
} move_t;

typedef struct {
    move_t *m;
    size_t n, cap;
    int ok;
} move_list_t;

static void add_move(move_list_t *l, const char *src, const char *dst, int exclusive)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        move_t *m = realloc(l->m, cap * sizeof *m);
        if (!m) {
            l->ok = 0;
            return;
        }
        l->m = m;
        l->cap = cap;
    }
    move_t *m = &l->m[l->n++];
    *m = (move_t){src ? strdup(src) : NULL, strdup(dst), NULL, exclusive, 0, 0};
    l->ok &= (!src || m->src) && m->dst;
}

static void move_sidecar(const char *src, const char *dst, void *user)
{
    add_move(user, src, dst, 0);
}

/* The moves of a commit: each temporary and its sidecars onto their
 * targets; a target's old .aux.xml goes when the new file has none (it
 * would relabel it). A file comes before its sidecars, so a run that finds
 * its output taken has moved nothing of it. */
static void plan_moves(const cli_outputs_t *o, int overwrite, move_list_t *l)
{
    for (size_t i = 0; i < o->n; i++) {
        const cli_output_t *f = &o->f[i];
        add_move(l, f->tmp, f->final, !overwrite);
        if (!f->raster)
            continue;
        size_t before = l->n;
        for_each_sidecar(f, move_sidecar, l);
        char *aux = with_aux(f->final);
        int has_aux = 0;
        for (size_t k = before; aux && k < l->n; k++)
            has_aux |= strcmp(l->m[k].dst, aux) == 0;
        if (aux && !has_aux && access(aux, F_OK) == 0)
            add_move(l, NULL, aux, 0);
        l->ok &= aux != NULL;
        free(aux);
    }
}

/* Keeps the current target under a backup name (a hard link, or the file
 * itself moved aside where links are not supported); an exclusive move has
 * no target to keep. */
static int back_up(move_t *m)
{
    if (m->exclusive || access(m->dst, F_OK) != 0)
        return 0;
    m->backup = temp_name(m->dst, "");
    if (!m->backup)
        return -1;
    m->linked = link(m->dst, m->backup) == 0;
    if (m->linked || rename(m->dst, m->backup) == 0)
        return 0;
    free(m->backup);
    m->backup = NULL;
    return -1;
}

/* Puts back what the commit changed. A target not yet replaced keeps what
 * is there now (another run may have written it): its backup link goes. */
static void roll_back(move_t *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (m[i].backup && !m[i].done && m[i].linked)
            unlink(m[i].backup);
        else if (m[i].backup)
            rename(m[i].backup, m[i].dst);
        else if (m[i].done)
            unlink(m[i].dst);
    }
}

/* Renames src onto dst only if dst does not exist; EEXIST if it does. */
static int rename_new(const char *src, const char *dst)
{
    if (renameat2(AT_FDCWD, src, AT_FDCWD, dst, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return -1;
    if (link(src, dst) == 0)   /* the filesystem lacks RENAME_NOREPLACE */
        return unlink(src), 0;
    if (errno != EPERM && errno != ENOTSUP)
        return -1;
    if (access(dst, F_OK) == 0) /* nor links: the best left is check, then rename */
        return errno = EEXIST, -1;
    return rename(src, dst);
}

static int apply_moves(move_t *m, size_t n, char *err, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (back_up(&m[i]) != 0) {
            snprintf(err, len, "cannot keep a copy of '%s' while replacing it: %s", m[i].dst,
                     strerror(errno));
            roll_back(m, i);
            return EXIT_RUNTIME;
        }
    for (size_t i = 0; i < n; i++) {
        int rc = !m[i].src         ? unlink(m[i].dst)
                 : m[i].exclusive ? rename_new(m[i].src, m[i].dst)
                                  : rename(m[i].src, m[i].dst);
        if (rc != 0 && errno == EEXIST && m[i].exclusive) {
            snprintf(err, len, "output '%s' exists; use --overwrite to replace it", m[i].dst);
            roll_back(m, n);
            return EXIT_USAGE;
        }
        if (rc != 0 && !(errno == ENOENT && !m[i].src)) {
            snprintf(err, len, "cannot rename '%s' to '%s': %s", m[i].src ? m[i].src : "",
                     m[i].dst, strerror(errno));
            roll_back(m, n);
            return EXIT_RUNTIME;
        }
        m[i].done = 1;
    }
    for (size_t i = 0; i < n; i++)
        if (m[i].backup)
            unlink(m[i].backup);
    return EXIT_OK;
}

int cli_outputs_commit(cli_outputs_t *o, const char *op, int overwrite)
{
    char err[CLI_MESSAGE_MAX];
    /* The last point where a cancellation takes effect: nothing is replaced yet. */
    if (cli_interrupted()) {
        cli_outputs_discard(o);
        cli_error(op, "cancelled; no output written");
        return EXIT_CANCELLED;
    }
    for (size_t i = 0; i < o->n; i++)
        if (hyprof_output_check(o->f[i].final, overwrite, err, sizeof err) != HYPROF_OK) {
            cli_outputs_discard(o);
            cli_error(op, "%s", err);
            return EXIT_USAGE;
        }
    move_list_t l = {NULL, 0, 0, 1};
    plan_moves(o, overwrite, &l);
    int rc = EXIT_OK;
    if (!l.ok) {
        snprintf(err, sizeof err, "out of memory");
        rc = EXIT_RUNTIME;
    }
    else
        rc = apply_moves(l.m, l.n, err, sizeof err);
    for (size_t i = 0; i < l.n; i++) {
        free(l.m[i].src);
        free(l.m[i].dst);
        free(l.m[i].backup);
    }
    free(l.m);
    cli_outputs_discard(o);
    if (rc != EXIT_OK)
        cli_error(op, "%s", err);
    return rc;
}
