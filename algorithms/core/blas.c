/* OpenBLAS's own thread count, set around the library's gemms: one thread
 * where OpenMP threads each call BLAS, so that no BLAS threads spin against
 * the OpenMP team and a result does not depend on BLAS's threading. Weak
 * symbols: with another CBLAS these do nothing. */
#include "internal.h"

extern void openblas_set_num_threads(int) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));

int hyprof__blas_threads_set(int threads)
{
    int before = openblas_get_num_threads ? openblas_get_num_threads() : 0;
    if (openblas_set_num_threads)
        openblas_set_num_threads(threads);
    return before;
}

void hyprof__blas_threads_restore(int before)
{
    if (openblas_set_num_threads && before > 0)
        openblas_set_num_threads(before);
}
