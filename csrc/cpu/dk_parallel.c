/* dk_parallel.c — the CPU kernels' thread count and parallel loop (dk_parallel.h). */
#include "dk_parallel.h"

#include <pthread.h>

#include "dk_tunables.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

static atomic_int dk__num_threads; /* 0: OpenMP's default */
static pthread_once_t dk__atfork_once = PTHREAD_ONCE_INIT;

/* Note [Fork safety]: the child starts with one thread. */
static void dk__after_fork_in_child(void) { atomic_store_explicit(&dk__num_threads, 1, memory_order_relaxed); }
static void dk__atfork_install(void) { pthread_atfork(NULL, NULL, dk__after_fork_in_child); }

/* At load, not on first use: a process may fork before its first dkit call, and the child must
 * still start with one thread (the parent's other libraries may have used OpenMP). */
DK__CONSTRUCTOR(dk__parallel_at_load) { pthread_once(&dk__atfork_once, dk__atfork_install); }

dk_status dk_set_num_threads(int n)
{
    if (n < 0)
        return dk_error(DK_EINVAL, "set_num_threads: the thread count must be >= 0 (0: OpenMP's default), got %d",
                        n);
    if (n > DK_MAX_THREADS)
        return dk_error(DK_EINVAL,
                        "set_num_threads: at most %d threads (DK_MAX_THREADS: beyond that OpenMP's thread creation "
                        "fails), got %d",
                        DK_MAX_THREADS, n);
    pthread_once(&dk__atfork_once, dk__atfork_install);
    atomic_store_explicit(&dk__num_threads, n, memory_order_relaxed);
    return DK_OK;
}

int dk_get_num_threads(void)
{
    pthread_once(&dk__atfork_once, dk__atfork_install);
    const int n = atomic_load_explicit(&dk__num_threads, memory_order_relaxed);
    if (n > 0) return n;
#if defined(_OPENMP)
    const int d = omp_get_max_threads();
    return d < 1 ? 1 : d > DK_MAX_THREADS ? DK_MAX_THREADS : d;
#else
    return 1;
#endif
}

DK_TUNABLE(dk__min_parallel_work, "parallel.min_work", 32768, 0, INT64_MAX,
           "calls with less work than this run on one thread (Note [Serial calls]); 0: every call uses the count")

int dk_parallel_threads_for(int64_t work)
{
    return work < dk_tunable(&dk__min_parallel_work) ? 1 : dk_get_num_threads();
}

void dk_parallel_run(int nthreads, dk_parallel_counter *counter, void (*worker)(void *ctx, int tid), void *ctx)
{
    atomic_init(&counter->next, 0);
    if (nthreads <= 1) {
        worker(ctx, 0);
        return;
    }
#if defined(_OPENMP)
#pragma omp parallel num_threads(nthreads)
    worker(ctx, omp_get_thread_num());
#else
    worker(ctx, 0);
#endif
}
