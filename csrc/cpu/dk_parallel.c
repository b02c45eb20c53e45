/* dk_parallel.c — the CPU kernels' thread count and parallel loop (dk_parallel.h). */
#include "dk_parallel.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "dk_tunables.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

static atomic_int dk__num_threads; /* 0: OpenMP's default */
static atomic_bool dk__forked;     /* this process is a fork()ed child: no OpenMP (Note [Fork safety]) */
static pthread_once_t dk__atfork_once = PTHREAD_ONCE_INIT;

/* Note [Fork safety]: the child starts with one thread, and its parallel loops use threads of
 * their own instead of OpenMP's (its pool is the parent's). */
static void dk__after_fork_in_child(void)
{
    atomic_store_explicit(&dk__num_threads, 1, memory_order_relaxed);
    atomic_store_explicit(&dk__forked, true, memory_order_relaxed);
}
static void dk__atfork_install(void) { pthread_atfork(NULL, NULL, dk__after_fork_in_child); }

/* At load, not on first use: a process may fork before its first dkit call, and the child must
 * still start with one thread (the parent's other libraries may have used OpenMP). */
DK__CONSTRUCTOR(dk__parallel_at_load) { pthread_once(&dk__atfork_once, dk__atfork_install); }

dk_status dk_set_num_threads(int n)
{
    if (n < 0)
        return dk_error(DK_EINVAL, "set_num_threads: the thread count must be >= 0 (0: OpenMP's default), got %d", n);
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

/* One thread of a forked child's loop (Note [Fork safety]). */
typedef struct {
    void (*worker)(void *ctx, int tid);
    void *ctx;
    int tid;
    bool started;
    pthread_t th;
} dk__pthread_job;

static void *dk__pthread_main(void *p)
{
    const dk__pthread_job *j = p;
    j->worker(j->ctx, j->tid);
    return NULL;
}

/* Threads 1 .. n - 1 created for this loop, thread 0 the caller; joined before returning. A
 * thread that cannot be created (or a table that cannot be allocated) is simply not there: the
 * others claim its iterations (workers share the counter), so the loop completes on fewer
 * threads, down to the caller alone. */
static void dk__run_on_pthreads(int nthreads, void (*worker)(void *ctx, int tid), void *ctx)
{
    dk__pthread_job *jobs = calloc((size_t)nthreads, sizeof *jobs);
    for (int t = 1; jobs && t < nthreads; t++) {
        jobs[t] = (dk__pthread_job){worker, ctx, t, false, 0};
        jobs[t].started = pthread_create(&jobs[t].th, NULL, dk__pthread_main, &jobs[t]) == 0;
    }
    worker(ctx, 0);
    for (int t = 1; jobs && t < nthreads; t++)
        if (jobs[t].started) pthread_join(jobs[t].th, NULL);
    free(jobs);
}

void dk_parallel_run(int nthreads, dk_parallel_counter *counter, void (*worker)(void *ctx, int tid), void *ctx)
{
    atomic_init(&counter->next, 0);
    if (nthreads <= 1) {
        worker(ctx, 0);
        return;
    }
    if (nthreads > DK_MAX_THREADS) nthreads = DK_MAX_THREADS; /* callers pass dk_get_num_threads() */
    if (atomic_load_explicit(&dk__forked, memory_order_relaxed)) {
        dk__run_on_pthreads(nthreads, worker, ctx);
        return;
    }
#if defined(_OPENMP) && !defined(DK_PARALLEL_PTHREADS)
#pragma omp parallel num_threads(nthreads)
    worker(ctx, omp_get_thread_num());
#else
    /* Builds without OpenMP, and the ThreadSanitizer builds (-DDK_PARALLEL_PTHREADS): libgomp is
     * not instrumented, so TSan cannot see its barriers and would report every loop; on threads
     * of its own, the loop's sharing is checked like any other code's. */
    dk__run_on_pthreads(nthreads, worker, ctx);
#endif
}
