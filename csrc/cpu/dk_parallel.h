/*
 * dk_parallel.h — how many threads dkit's CPU kernels use.
 *
 * Like torch.set_num_threads, but dkit's own and process-wide: OpenMP's default (nthreads-var)
 * belongs to each calling thread and is shared with every other library on the same libgomp
 * (torch's ops set it), so a count set here is what a CPU kernel uses from any thread, whatever
 * other libraries do with OpenMP. Kernels still run small calls on one thread.
 */
#ifndef DK_PARALLEL_H
#define DK_PARALLEL_H

#include "dk_export.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* n >= 1: CPU kernels use up to n threads; 0: back to the default, OpenMP's for the calling
 * thread (OMP_NUM_THREADS, omp_set_num_threads). n < 0: DK_EINVAL. */
DK_API dk_status dk_set_num_threads(int n);
/* The count a CPU kernel called now, from this thread, would use for a large call. */
DK_API int dk_get_num_threads(void);

#ifdef __cplusplus
}
#endif

#endif /* DK_PARALLEL_H */
