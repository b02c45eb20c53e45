/* dk_parallel.c — the CPU kernels' thread count and parallel loop (dk_parallel.h). */
#include "dk_parallel.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

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

DK_TUNABLE(dk__late_us, "parallel.late_us", 200, 0, INT64_MAX,
           "a loop whose caller waited this long for a thread that came after the work was gone, or longer than it "
           "worked itself, sends the next calls to half its threads for a while (Note [Threads that come late]); 0: "
           "never")
DK_TUNABLE(dk__solo_ms, "parallel.solo_ms", 10, 1, 60000,
           "the shortest time a late loop sends calls to half its threads; more late loops double it, up to 64 times "
           "(Note [Threads that come late])")

/* Note [Threads that come late]: until dk__calm_ns, calls use at most dk__late_cap threads. */
static atomic_llong dk__calm_ns;
static atomic_int dk__late_cap;
static atomic_int dk__lateness;
#define DK__LATENESS_MAX 12 /* the longest window: solo_ms 2^6 */

static int64_t dk__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One loop, as its threads see it: the kernel's worker, and when the other threads came. */
typedef struct {
    void (*worker)(void *ctx, int tid);
    void *ctx;
    atomic_llong latest_entry;      /* the latest time a thread other than the caller entered */
    int64_t caller_in, caller_done; /* the caller's own share: when it began, and when it ended (no
                                       iteration was left) */
} dk__loop;

static void dk__loop_enter(dk__loop *l, int tid)
{
    if (tid != 0) {
        const int64_t t = dk__now_ns();
        long long seen = atomic_load_explicit(&l->latest_entry, memory_order_relaxed);
        while (seen < t && !atomic_compare_exchange_weak_explicit(&l->latest_entry, &seen, t, memory_order_relaxed,
                                                                  memory_order_relaxed)) {
        }
        l->worker(l->ctx, tid);
    } else {
        l->caller_in = dk__now_ns(); /* after the threads are made, where the loop makes them */
        l->worker(l->ctx, 0);
        l->caller_done = dk__now_ns();
    }
}

/* One thread of a forked child's loop (Note [Fork safety]). */
typedef struct {
    dk__loop *loop;
    int tid;
    bool started;
    pthread_t th;
} dk__pthread_job;

static void *dk__pthread_main(void *p)
{
    const dk__pthread_job *j = p;
    dk__loop_enter(j->loop, j->tid);
    return NULL;
}

/* Threads 1 .. n - 1 created for this loop, thread 0 the caller; joined before returning. A
 * thread that cannot be created (or a table that cannot be allocated) is simply not there: the
 * others claim its iterations (workers share the counter), so the loop completes on fewer
 * threads, down to the caller alone. */
static void dk__run_on_pthreads(int nthreads, dk__loop *l)
{
    dk__pthread_job *jobs = calloc((size_t)nthreads, sizeof *jobs);
    for (int t = 1; jobs && t < nthreads; t++) {
        jobs[t] = (dk__pthread_job){l, t, false, 0};
        jobs[t].started = pthread_create(&jobs[t].th, NULL, dk__pthread_main, &jobs[t]) == 0;
    }
    dk__loop_enter(l, 0);
    for (int t = 1; jobs && t < nthreads; t++)
        if (jobs[t].started) pthread_join(jobs[t].th, NULL);
    free(jobs);
}

/* Note [Threads that come late]: was this loop's join, on nthreads threads, a wait for the host's
 * scheduler rather than for work? The lateness score goes up by 2 at a late loop and down by 1 at one
 * on time; a late loop sends the next calls to half its threads for parallel.solo_ms times
 * 2^(score / 2). */
static void dk__judge_join(const dk__loop *l, int nthreads, int64_t end)
{
    const int64_t late = dk_tunable(&dk__late_us) * 1000;
    if (late <= 0) return;
    const int64_t waited = end - l->caller_done, worked = l->caller_done - l->caller_in;
    const bool came_after = atomic_load_explicit(&l->latest_entry, memory_order_relaxed) > l->caller_done;
    const int score = atomic_load_explicit(&dk__lateness, memory_order_relaxed);
    if (waited > late && (came_after || waited > worked)) {
        const int now = score + 2 < DK__LATENESS_MAX ? score + 2 : DK__LATENESS_MAX;
        atomic_store_explicit(&dk__lateness, now, memory_order_relaxed);
        atomic_store_explicit(&dk__late_cap, nthreads / 2, memory_order_relaxed);
        atomic_store_explicit(&dk__calm_ns, end + dk_tunable(&dk__solo_ms) * 1000000 * ((int64_t)1 << now / 2),
                              memory_order_relaxed);
    } else if (score > 0) atomic_store_explicit(&dk__lateness, score - 1, memory_order_relaxed);
}

void dk_parallel_run(int nthreads, dk_parallel_counter *counter, void (*worker)(void *ctx, int tid), void *ctx)
{
    atomic_init(&counter->next, 0);
    if (nthreads <= 1) {
        worker(ctx, 0);
        return;
    }
    const int64_t start = dk__now_ns();
    if (dk_tunable(&dk__late_us) <= 0) { /* judgement off: and forgotten */
        if (atomic_load_explicit(&dk__calm_ns, memory_order_relaxed) != 0) {
            atomic_store_explicit(&dk__calm_ns, 0, memory_order_relaxed);
            atomic_store_explicit(&dk__lateness, 0, memory_order_relaxed);
        }
    } else if (start < atomic_load_explicit(&dk__calm_ns, memory_order_relaxed)) {
        const int cap = atomic_load_explicit(&dk__late_cap, memory_order_relaxed); /* Note [Threads that come late] */
        if (nthreads > cap) nthreads = cap;
        if (nthreads <= 1) {
            worker(ctx, 0); /* tid 0 alone claims every iteration */
            return;
        }
    }
    if (nthreads > DK_MAX_THREADS) nthreads = DK_MAX_THREADS; /* callers pass dk_get_num_threads() */
    dk__loop l = {worker, ctx, 0, start, start};
    if (atomic_load_explicit(&dk__forked, memory_order_relaxed)) {
        dk__run_on_pthreads(nthreads, &l);
    } else {
#if defined(_OPENMP) && !defined(DK_PARALLEL_PTHREADS)
#pragma omp parallel num_threads(nthreads)
        dk__loop_enter(&l, omp_get_thread_num());
#else
        /* Builds without OpenMP, and the ThreadSanitizer builds (-DDK_PARALLEL_PTHREADS): libgomp is
         * not instrumented, so TSan cannot see its barriers and would report every loop; on threads
         * of its own, the loop's sharing is checked like any other code's. */
        dk__run_on_pthreads(nthreads, &l);
#endif
    }
    dk__judge_join(&l, nthreads, dk__now_ns());
}
