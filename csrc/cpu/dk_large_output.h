/*
 * dk_large_output.h — writing an output of many megabytes that the caller has just allocated.
 *
 * Note [Huge pages for large outputs]
 * A caller that allocates its outputs per call (torch.empty, as torchvision does) hands over
 * fresh pages, and the first write to each 4 KiB page is a page fault: ~12,000 faults for a
 * 51 MB output, ~27,000 for a 111 MB one, 20 to 40 ms per call on the machine this was tuned on,
 * as much as the computation itself. With transparent huge pages in "madvise" mode (Debian's
 * default) a range marked MADV_HUGEPAGE faults in 2 MiB at a time instead (51 MB: 20 ms of
 * faults down to 3 ms). So before writing a large output a kernel marks the 2 MiB aligned part
 * of its byte range; PyTorch's allocator does the same for its own blocks under
 * THP_MEM_ALLOC_ENABLE. It is only a hint: pages already touched stay as they are, memory that
 * is not anonymous (a file mapping) makes it fail, and either way it is ignored. Small outputs
 * are left alone: their faults are few and the system call would cost more than it saves. The
 * order of the writes then matters little: 51 MB are 25 huge pages, so scattered blocks cost no
 * more TLB misses or faults than a sweep; what remains is the kernel clearing the pages.
 *
 * Note [Faulting in the shadow]
 * A fresh output is faulted in on first touch, and the OS clears each page: for 51 MB, 3 ms on
 * one thread and, with two, 4 ms, when both threads start by faulting the same pages at the same
 * time. Instead, with several threads, thread 0 first faults the whole output in at once
 * (dk_large_output_populate: MADV_POPULATE_WRITE, which changes no byte) while the others stage
 * their first results in a per-thread buffer and write them out once the pages are there
 * (dk_large_output_filled) or the stage is full. The clearing then overlaps computation: with two
 * threads the cost of a fresh output went from 3.7-4.7 ms to 1.5-2.7 ms a call. An output already
 * faulted in (8 sample pages resident) is left alone; on kernels without MADV_POPULATE_WRITE the
 * madvise fails, the stage is written out at once, and the output faults in as before.
 *
 * Note [Streaming stores]
 * An output written whole, once, and far larger than the caches will not be read again before
 * it has left them. Plain stores first read every line they write (for a 111 MB grad_input, 111
 * MB of useless reads); non-temporal stores (dk_vec.h) write the lines straight to memory: 2 ms
 * less on one thread for roi_align's backward. A kernel that streams ends each thread's stores
 * with dk_sfence(), so that whoever joins it sees them.
 */
#ifndef DK_LARGE_OUTPUT_H
#define DK_LARGE_OUTPUT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dk_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What dk_large_output_prepare found out about one output. */
typedef struct {
    bool large;        /* at least dk_large_output_min_bytes (a tunable): hinted, worth streaming */
    char *fill;        /* whole huge pages not yet faulted in (Note [Faulting in the shadow]), */
    size_t fill_bytes; /* or NULL / 0 */
    atomic_int filled; /* set by dk_large_output_populate when they are */
} dk_large_output;

/*
 * An output of `ndim` dimensions (shape n, element strides s, elements of `elem` bytes) at data,
 * about to be written: hints huge pages when it is large, and records its huge pages in
 * lo->fill when they are not faulted in yet and `track_fill` asks for it. Returns lo->large.
 */
DK_API bool dk_large_output_prepare(dk_large_output *lo, void *data, int ndim, const int64_t *n, const int64_t *s,
                                    size_t elem, bool track_fill);
/* Faults lo->fill in (no byte changes), then sets lo->filled. */
DK_API void dk_large_output_populate(dk_large_output *lo);

static inline bool dk_large_output_filled(dk_large_output *lo)
{
    return atomic_load_explicit(&lo->filled, memory_order_acquire) != 0;
}

/* The thresholds, as tunables (dk_tunables.h): "large_output.min_bytes" (default 8 MiB) and
 * "large_output.stage_bytes" (per thread, default 8 MiB). */
DK_API int64_t dk_large_output_min_bytes(void);
DK_API int64_t dk_large_output_stage_bytes(void);

#ifdef __cplusplus
}
#endif
#endif /* DK_LARGE_OUTPUT_H */
