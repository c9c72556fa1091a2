/* norename.so: a filesystem without renameat2's RENAME_NOREPLACE (NFS, some
 * FUSE filesystems), for tests/test_faults.py. Preloaded (LD_PRELOAD), every
 * renameat2 call fails with EINVAL; with NORENAME_NOLINK=1, every link call
 * also fails with EPERM (vfat, exFAT), so the program must do without both.
 * The variable is read here, by the shim, never by hyprof. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                     unsigned int flags)
{
    (void)olddirfd, (void)oldpath, (void)newdirfd, (void)newpath, (void)flags;
    errno = EINVAL;
    return -1;
}

EXPORT int link(const char *oldpath, const char *newpath)
{
    const char *no = getenv("NORENAME_NOLINK");
    if (no && *no == '1') {
        errno = EPERM;
        return -1;
    }
    return linkat(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}
