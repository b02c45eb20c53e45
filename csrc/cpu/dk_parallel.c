/* dk_parallel.c — the CPU kernels' thread count (dk_parallel.h). */
#include "dk_parallel.h"

#include <stdatomic.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

static atomic_int dk__num_threads; /* 0: OpenMP's default */

dk_status dk_set_num_threads(int n)
{
    if (n < 0)
        return dk_error(DK_EINVAL,
                        "set_num_threads: the thread count must be >= 0 (0: OpenMP's default), got %d",
                        n);
    atomic_store_explicit(&dk__num_threads, n, memory_order_relaxed);
    return DK_OK;
}

int dk_get_num_threads(void)
{
    const int n = atomic_load_explicit(&dk__num_threads, memory_order_relaxed);
    if (n > 0) return n;
#if defined(_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
}
