/* started.so: tells a test when a process it started can first run code of
 * its own. Preloaded (LD_PRELOAD), its constructor writes one byte to the file
 * descriptor $FAULTS_STARTED_FD and closes it. The dynamic loader has then
 * mapped and relocated every library and run the executable's .preinit_array,
 * and the constructors of most libraries and main() are still to come: a
 * signal sent after the byte arrives reaches a program that could have
 * installed its handlers, while one sent before may find the process still
 * inside the loader, where no program can catch it (tests/test_faults.py). */
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void started(void)
{
    const char *s = getenv("FAULTS_STARTED_FD");
    if (!s || !*s)
        return;
    int fd = atoi(s);
    ssize_t n = write(fd, "s", 1);
    (void)n;
    close(fd);
}
