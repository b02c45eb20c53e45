/*
 * dk_parallel.h — the CPU kernels' threads: how many, and the parallel loop they run.
 *
 * The count is like torch.set_num_threads, but dkit's own and process-wide: OpenMP's default
 * (nthreads-var) belongs to each calling thread and is shared with every other library on the
 * same libgomp (torch's ops set it), so a count set here is what a CPU kernel uses from any
 * thread, whatever other libraries do with OpenMP.
 *
 * Note [Serial calls]
 * A kernel's parallel loop is a worker function, worker(ctx, tid), that claims iterations from a
 * shared counter (dk_parallel_claim: the same schedule as OpenMP's dynamic, 1) until none are
 * left. dk_parallel_run runs it in an OpenMP region when the call uses several threads, and
 * calls it directly otherwise: entering even a one-thread region cost about 1,100 instructions
 * in libgomp, a quarter of what a tiny roi_align call executes in all. Kernels whose results do
 * not depend on which thread runs an iteration give the same bits either way.
 *
 * Note [Fork safety]
 * A forked child (a DataLoader worker) has only the forking thread, and OpenMP's pool of the
 * parent is not its own: libgomp's threads do not survive fork(), libgomp has no fork handler,
 * and a child that enters a parallel region with more than one thread waits forever for them
 * (whoever entered the region in the parent: dkit, torch, any library on the same libgomp). So
 * after fork() (pthread_atfork, installed when the library loads):
 *   - the child's dkit count is reset to one thread, as torch resets its own for DataLoader
 *     workers: no thread is created unless the child asks for more;
 *   - the child never enters an OpenMP region: when it does ask for more (dk_set_num_threads),
 *     dk_parallel_run creates that many threads of its own for the loop and joins them before
 *     returning (pthread_create costs some 20 us per thread, against the >= 32768 units of work
 *     a call needs to use threads at all: Note [Serial calls]). Workers share the loop's counter
 *     and know only their tid, so the results are those of the OpenMP path.
 * The core's locks are taken around fork() and released on both sides (Note [The registry
 * lock]), so a child forked while another thread registers, profiles or opens a scope finds
 * them free. Tested from Python in tests/python/test_hardening.py (DataLoader workers, a bare
 * fork after a parallel call, a fork while another thread calls in a profile loop).
 */
#ifndef DK_PARALLEL_H
#define DK_PARALLEL_H

#include <stdatomic.h>
#include <stdint.h>

#include "dk_export.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest count dk_set_num_threads accepts: far beyond any real machine, and far below the
 * thousands of threads at which thread creation in libgomp fails or crashes. */
#define DK_MAX_THREADS 1024

/* n in [1, DK_MAX_THREADS]: CPU kernels use up to n threads; 0: back to the default, OpenMP's for
 * the calling thread (OMP_NUM_THREADS, omp_set_num_threads). n < 0 or n > DK_MAX_THREADS:
 * DK_EINVAL, and the count is unchanged. */
DK_API dk_status dk_set_num_threads(int n);
/* The count a CPU kernel called now, from this thread, would use for a large call. */
DK_API int dk_get_num_threads(void);
/* The count for a call with about `work` units of work: 1 below a threshold (Note [Serial
 * calls]: waking the team costs more than such calls do), else dk_get_num_threads(). */
DK_API int dk_parallel_threads_for(int64_t work);

/* The shared iteration counter of one parallel loop. */
typedef struct {
    atomic_llong next;
} dk_parallel_counter;

/* Runs worker(ctx, tid) on `nthreads` threads (tid 0 .. nthreads - 1), inline when 1, after
 * resetting the counter; returns when all are done. */
DK_API void dk_parallel_run(int nthreads, dk_parallel_counter *counter, void (*worker)(void *ctx, int tid), void *ctx);

/* The next unclaimed iteration (0, 1, 2, ...); the loop ends when it reaches the total. */
static inline int64_t dk_parallel_claim(dk_parallel_counter *c)
{
    return (int64_t)atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
}

#ifdef __cplusplus
}
#endif
#endif /* DK_PARALLEL_H */
