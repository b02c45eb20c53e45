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
 *
 * Note [Threads that come late]
 * An OpenMP region ends at a barrier that waits for every thread of the team to arrive, including
 * one the host has not scheduled yet: on a loaded host (DataLoader workers, another process on the
 * core) the caller claims every iteration itself and then waits, a time slice or more, for a thread
 * that finds nothing left. Two threads then ran slower than one: with one busy process beside it on
 * this 2-core VM (2026-11-27, medians of 30 calls, bench_roi_pool.py's tensors), ps_roi_pool's
 * forward took 4.9-5.2 ms on two threads against 2.3-2.6 ms on one, a 64-RoI roi_align 4.5 ms
 * against 3.4 ms. So every loop is judged as it ends (dk_parallel_run): the caller notes when its own
 * share began and ended (no iteration left) and each other thread when it came in. If the caller
 * then waited more than parallel.late_us (200 us: well past a wake-up of a thread that was spinning
 * or had just gone to sleep, about 90 us on this VM) and
 * either a thread came in after the work was gone or the wait was longer than the caller's own share
 * (a thread descheduled in the middle of its iteration), the loop was late: the next calls use at
 * most half its threads (two: the caller alone) for parallel.solo_ms (10 ms) times 2^(score / 2),
 * where the lateness score rises by 2 at each late loop and falls by 1 at each loop on time (capped
 * at 64 times: under a steady load most probes are late and the window grows; once the load is gone
 * a few probes on time bring it back). Half, not one: on a host of many cores one late thread of 64
 * must not cost the other 62. A loop of fewer iterations than threads whose other threads took
 * them all before the caller came to claim one is judged late too (the caller waited longer than
 * it worked); it then runs on fewer threads, which costs it at most a round of its iterations. The same loop's figures with the judgement (five runs): 2.3-3.1 ms on
 * two threads, a 64-RoI roi_align 2.3-3.3 ms (parallel.late_us 0 turns it off, and forgets the
 * window: 4.5-4.9 and 4.5-4.6 ms again, in runs between them); on a quiet host no loop is judged late and two threads are
 * as fast as before (bench_roi_pool.py --threads 2, alternating builds). A team that sat idle
 * for long is judged late as well, and rightly: after a pause of 30-100 ms libgomp's thread, which
 * spins before it sleeps, came in 1.8-3.8 ms after the region began on the AMD VM (2026-11-28;
 * bench/_scaling.py, Note [Warm calls]), so a call of a few milliseconds is not faster on two
 * threads then. Fewer threads than asked
 * only means fewer tids run: kernels allocate per-thread buffers for nthreads and never rely on
 * every tid running (each worker claims until the counter runs out; tid 0, the caller, always
 * runs).
 * A pool of dkit's own threads with a join that waits only for the threads that came in was built
 * and measured first, and dropped: under the same load it was as good (2.8 ms), but in a torch
 * process it is a second team: after torch's own parallel ops libgomp's threads spin for some
 * milliseconds, and the pool's thread competes with them for the second core (bench_roi_pool.py's
 * interleaved forward on two threads, 5.5-6.0 ms against 3.4-4.2 ms on OpenMP's team; ps_roi_align's
 * 4.0-4.8 against 2.8-3.0). A pool thread that slept was also slow to come: after a 5 ms pause it
 * came in after the caller had done everything in 62-76 calls of 200, unless it spun for longer than
 * the pause, as libgomp's threads do. Sharing torch's OpenMP team and judging its joins keeps both.
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

/* Runs worker(ctx, tid) on `nthreads` threads (tid 0 .. nthreads - 1), inline when 1; on fewer
 * (down to the caller alone) while late loops say so (Note [Threads that come late]); after
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
