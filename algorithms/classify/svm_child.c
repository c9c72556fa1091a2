/* LIBSVM trainings in child processes, so that cancelling stops them.
 *
 * svm_train has no cancellation point and one call can run for minutes. Each
 * training of more than HYPROF_SVM_CHILD_MIN_ROWS rows runs in a forked
 * child, which writes its answer to a pipe (a length, then the bytes) and
 * ends with _exit. The parent reads the pipe, looking at the context's
 * cancel flag at least every 50 ms; on cancellation it kills the child
 * (SIGKILL) and reaps it. The child's memory goes with the
 * child, so a cancelled training leaks nothing, and LIBSVM is used as it is.
 * A thread could not be stopped so: LIBSVM has no cancellation point, and a
 * killed thread would leave behind what it holds (memory, locks).
 *
 * The child runs LIBSVM alone (no threads, GDAL or CUDA of its own) and
 * allocates with malloc, which glibc keeps usable in the child of a
 * multi-threaded process. The parent does not wait for end of file: children
 * forked at the same time by other threads hold copies of the pipe's write
 * end until they end, so the answer is complete when its length is read, and
 * a child that died is seen by waitpid. A short training, or one whose fork
 * fails (not enough memory to duplicate the process under strict
 * overcommit), runs in this process, cancellable only between trainings. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2 */
#endif
#include "svm_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* In the child: the answer, then _exit (no atexit handler of the parent's
 * runs twice). Exit 1: fn ran out of memory; 2: the pipe failed. The write
 * end blocks: the parent reads as it comes. */
static void child(int fd, hyprof__child_fn fn, void *arg)
{
    fcntl(fd, F_SETFL, 0);
    void *out = NULL;
    size_t len = 0;
    if (fn(arg, &out, &len) != 0)
        _exit(1);
    uint64_t n = len;
    if (write_all(fd, &n, sizeof n) != 0 || write_all(fd, out, len) != 0)
        _exit(2);
    _exit(0);
}

typedef struct {
    unsigned char head[8];
    size_t got;     /* bytes of head, then of body */
    uint64_t want;  /* body length, once head is complete */
    unsigned char *body;
} answer_t;

/* Reads what the (non-blocking) pipe holds: 1 when the answer is complete,
 * 0 when more is to come, -1 at end of file or on an error (the child ended
 * without it). */
static int drain(int fd, answer_t *a)
{
    for (;;) {
        int in_head = a->got < sizeof a->head;
        size_t room = in_head ? sizeof a->head - a->got
                              : (size_t)a->want - (a->got - sizeof a->head);
        if (!in_head && room == 0)
            return 1;
        unsigned char *dst = in_head ? a->head + a->got : a->body + (a->got - sizeof a->head);
        ssize_t r = read(fd, dst, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (r <= 0)
            return -1;
        a->got += (size_t)r;
        if (in_head && a->got == sizeof a->head) {
            memcpy(&a->want, a->head, sizeof a->want);
            if (a->want > SIZE_MAX / 2 || !(a->body = malloc(a->want ? a->want : 1)))
                return -1;
        }
    }
}

/* How the child ended, for messages; its status as a hyprof status. */
static hyprof_status_t failed(int status, char *why)
{
    int nomem = WIFEXITED(status) && WEXITSTATUS(status) == 1;
    if (why && WIFSIGNALED(status))
        snprintf(why, 96, "the training process was killed by signal %d", WTERMSIG(status));
    else if (why && nomem)
        snprintf(why, 96, "the training process ran out of memory");
    else if (why)
        snprintf(why, 96, "the training process ended (status %d) without its answer",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return nomem ? HYPROF_ERR_NOMEM : HYPROF_ERR_INTERNAL;
}

static void reap(pid_t pid, int *status)
{
    while (waitpid(pid, status, 0) < 0 && errno == EINTR)
        ;
}

/* The parent's side: the answer, or the child killed on cancellation. */
static hyprof_status_t await(hyprof_ctx_t *ctx, pid_t pid, int fd, void **out, size_t *len,
                             char *why)
{
    answer_t a = {{0}, 0, 0, NULL};
    int status = 0, r = 0, ended = 0;
    while (!hyprof_ctx_cancelled(ctx)) {
        struct pollfd p = {fd, POLLIN, 0};
        (void)poll(&p, 1, 50);
        if ((r = drain(fd, &a)) != 0)
            break;
        /* A child that ended has put all it wrote in the pipe. */
        if (waitpid(pid, &status, WNOHANG) == pid) {
            ended = 1;
            r = drain(fd, &a) == 1 ? 1 : -1;
            break;
        }
    }
    if (r == 0) /* cancelled */
        kill(pid, SIGKILL);
    if (!ended)
        reap(pid, &status);
    if (r == 1) {
        *out = a.body;
        *len = (size_t)a.want;
        return HYPROF_OK;
    }
    free(a.body);
    return r == 0 ? HYPROF_ERR_CANCELLED : failed(status, why);
}

hyprof_status_t hyprof__run_in_child(hyprof_ctx_t *ctx, hyprof__child_fn fn, void *arg,
                                     size_t rows, void **out, size_t *len, char *why)
{
    *out = NULL;
    *len = 0;
    if (why)
        why[0] = '\0';
    if (hyprof_ctx_cancelled(ctx))
        return HYPROF_ERR_CANCELLED;
    int fds[2];
    pid_t pid = -1;
    if (rows > HYPROF_SVM_CHILD_MIN_ROWS && pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0 &&
        (pid = fork()) < 0) {
        close(fds[0]);
        close(fds[1]);
    }
    if (pid < 0) /* a short training, or no child: here, to the end */
        return fn(arg, out, len) == 0 ? HYPROF_OK : HYPROF_ERR_NOMEM;
    if (pid == 0) {
        close(fds[0]);
        child(fds[1], fn, arg);
    }
    close(fds[1]);
    hyprof_status_t st = await(ctx, pid, fds[0], out, len, why);
    close(fds[0]);
    return st;
}
