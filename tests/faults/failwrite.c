/* failwrite.so: a disk that fills up, for tests/test_faults.py.
 *
 * Preloaded (LD_PRELOAD) into a process, it counts the bytes written to
 * regular files through write, pwrite, writev and stdio (fwrite, fputs, fputc,
 * putc, fprintf and their variants), and once FAILWRITE_AFTER bytes have been
 * written, fails every further such write with ENOSPC, as a full disk does:
 * write() writes what still fits and returns the short count, then -1; a
 * stdio call writes what fits, sets the stream's error flag and returns its
 * failure value. Writes to pipes, terminals and devices (stderr, stdout) are
 * never counted nor failed, so the program can still report the failure.
 *
 * FAILWRITE_AFTER    byte budget (unset: unlimited, count only)
 * FAILWRITE_TRACE    a file to which one line "OFFSET PATH" is appended each
 *                    time the written file changes (OFFSET: bytes written
 *                    before that write), and "TOTAL N" at exit: the test
 *                    learns from a clean run where each file's bytes start.
 *
 * The variables are read here, by the shim, never by hyprof. glibc's stdio
 * flushes through its internal write, which a preload cannot see: counting
 * happens when the program hands bytes to stdio. Built without sanitizers:
 * in an ASan process libasan is preloaded first and calls through to it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* Some are macros or inline functions in <stdio.h>: here they are functions. */
#undef putc
#undef fwrite_unlocked
#undef fputc
#undef fputs_unlocked
#undef fputc_unlocked
#undef putc_unlocked

/* glibc's stream error flag (_IO_ERR_SEEN in libio.h): what a failed flush
 * sets, so that ferror() and fclose() report the failure. */
#define FAILWRITE_IO_ERR_SEEN 0x20

static atomic_ullong used;
static unsigned long long budget = ULLONG_MAX;
static int trace_fd = -1;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static char trace_last[PATH_MAX];

#define REAL(name) real_##name
#define DECLARE_REAL(ret, name, ...)                                      \
    static ret (*real_##name)(__VA_ARGS__);                               \
    static void load_##name(void)                                         \
    {                                                                     \
        if (!real_##name)                                                 \
            *(void **)&real_##name = dlsym(RTLD_NEXT, #name);             \
    }

DECLARE_REAL(ssize_t, write, int, const void *, size_t)
DECLARE_REAL(ssize_t, pwrite, int, const void *, size_t, off_t)
DECLARE_REAL(ssize_t, pwrite64, int, const void *, size_t, off_t)
DECLARE_REAL(ssize_t, writev, int, const struct iovec *, int)
DECLARE_REAL(size_t, fwrite, const void *, size_t, size_t, FILE *)
DECLARE_REAL(size_t, fwrite_unlocked, const void *, size_t, size_t, FILE *)
DECLARE_REAL(int, fputs, const char *, FILE *)
DECLARE_REAL(int, fputs_unlocked, const char *, FILE *)
DECLARE_REAL(int, fputc, int, FILE *)
DECLARE_REAL(int, putc, int, FILE *)
DECLARE_REAL(int, fputc_unlocked, int, FILE *)
DECLARE_REAL(int, putc_unlocked, int, FILE *)
DECLARE_REAL(int, vfprintf, FILE *, const char *, va_list)
DECLARE_REAL(int, __vfprintf_chk, FILE *, int, const char *, va_list)

__attribute__((constructor)) static void failwrite_init(void)
{
    const char *after = getenv("FAILWRITE_AFTER");
    if (after && *after)
        budget = strtoull(after, NULL, 10);
    const char *trace = getenv("FAILWRITE_TRACE");
    if (trace && *trace)
        trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    load_write();
}

__attribute__((destructor)) static void failwrite_fini(void)
{
    if (trace_fd < 0)
        return;
    char line[64];
    int n = snprintf(line, sizeof line, "TOTAL %llu\n", (unsigned long long)atomic_load(&used));
    REAL(write)(trace_fd, line, (size_t)n);
}

static int is_regular(int fd)
{
    struct stat st;
    return fd >= 0 && fd != trace_fd && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

static void trace(int fd, unsigned long long offset)
{
    if (trace_fd < 0)
        return;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0)
        return;
    path[n] = 0;
    pthread_mutex_lock(&trace_lock);
    if (strcmp(path, trace_last) != 0) {
        strcpy(trace_last, path);
        char line[PATH_MAX + 32];
        int len = snprintf(line, sizeof line, "%llu %s\n", offset, path);
        REAL(write)(trace_fd, line, (size_t)len);
    }
    pthread_mutex_unlock(&trace_lock);
}

/* How many of n bytes to fd may still be written (n when fd is not a
 * regular file). */
static size_t allow(int fd, size_t n)
{
    if (n == 0 || !is_regular(fd))
        return n;
    unsigned long long before = atomic_fetch_add(&used, n);
    trace(fd, before);
    if (before >= budget)
        return 0;
    return budget - before < n ? (size_t)(budget - before) : n;
}

static void stream_failed(FILE *f)
{
    f->_flags |= FAILWRITE_IO_ERR_SEEN;
    errno = ENOSPC;
}

EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    load_write();
    size_t ok = allow(fd, n);
    if (ok == 0 && n > 0) {
        errno = ENOSPC;
        return -1;
    }
    return REAL(write)(fd, buf, ok);
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    load_pwrite();
    size_t ok = allow(fd, n);
    if (ok == 0 && n > 0) {
        errno = ENOSPC;
        return -1;
    }
    return REAL(pwrite)(fd, buf, ok, off);
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    load_pwrite64();
    size_t ok = allow(fd, n);
    if (ok == 0 && n > 0) {
        errno = ENOSPC;
        return -1;
    }
    return REAL(pwrite64)(fd, buf, ok, off);
}

/* All of the vector or nothing: a short gather write is legal but rare. */
EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    load_writev();
    size_t n = 0;
    for (int i = 0; i < cnt; i++)
        n += iov[i].iov_len;
    if (allow(fd, n) < n) {
        errno = ENOSPC;
        return -1;
    }
    return REAL(writev)(fd, iov, cnt);
}

static size_t do_fwrite(size_t (*real)(const void *, size_t, size_t, FILE *), const void *p,
                        size_t size, size_t nmemb, FILE *f)
{
    if (size == 0 || nmemb == 0)
        return real(p, size, nmemb, f);
    size_t n = size * nmemb, ok = allow(fileno(f), n);
    if (ok == n)
        return real(p, size, nmemb, f);
    size_t items = ok / size, done = items ? real(p, size, items, f) : 0;
    stream_failed(f);
    return done;
}

EXPORT size_t fwrite(const void *p, size_t size, size_t nmemb, FILE *f)
{
    load_fwrite();
    return do_fwrite(REAL(fwrite), p, size, nmemb, f);
}

EXPORT size_t fwrite_unlocked(const void *p, size_t size, size_t nmemb, FILE *f)
{
    load_fwrite_unlocked();
    return do_fwrite(REAL(fwrite_unlocked), p, size, nmemb, f);
}

/* The character and string calls: all or nothing. */
static int refuse(FILE *f, size_t n)
{
    if (allow(fileno(f), n) == n)
        return 0;
    stream_failed(f);
    return 1;
}

EXPORT int fputs(const char *s, FILE *f)
{
    load_fputs();
    return refuse(f, strlen(s)) ? EOF : REAL(fputs)(s, f);
}

EXPORT int fputs_unlocked(const char *s, FILE *f)
{
    load_fputs_unlocked();
    return refuse(f, strlen(s)) ? EOF : REAL(fputs_unlocked)(s, f);
}

EXPORT int fputc(int c, FILE *f)
{
    load_fputc();
    return refuse(f, 1) ? EOF : REAL(fputc)(c, f);
}

EXPORT int putc(int c, FILE *f)
{
    load_putc();
    return refuse(f, 1) ? EOF : REAL(putc)(c, f);
}

EXPORT int fputc_unlocked(int c, FILE *f)
{
    load_fputc_unlocked();
    return refuse(f, 1) ? EOF : REAL(fputc_unlocked)(c, f);
}

EXPORT int putc_unlocked(int c, FILE *f)
{
    load_putc_unlocked();
    return refuse(f, 1) ? EOF : REAL(putc_unlocked)(c, f);
}

static int formatted_length(const char *fmt, va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    return n;
}

EXPORT int vfprintf(FILE *f, const char *fmt, va_list ap)
{
    load_vfprintf();
    int n = formatted_length(fmt, ap);
    if (n > 0 && refuse(f, (size_t)n))
        return -1;
    return REAL(vfprintf)(f, fmt, ap);
}

EXPORT int fprintf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(f, fmt, ap);
    va_end(ap);
    return r;
}

EXPORT int __vfprintf_chk(FILE *f, int flag, const char *fmt, va_list ap)
{
    load___vfprintf_chk();
    int n = formatted_length(fmt, ap);
    if (n > 0 && refuse(f, (size_t)n))
        return -1;
    return REAL(__vfprintf_chk)(f, flag, fmt, ap);
}

EXPORT int __fprintf_chk(FILE *f, int flag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = __vfprintf_chk(f, flag, fmt, ap);
    va_end(ap);
    return r;
}
