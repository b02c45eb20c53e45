/*
 * dk_host_cache.h — host memory for large outputs, kept mapped between the calls that use it.
 *
 * Note [Host output cache]
 * A large output that torch allocates for every call (roi_align's 51 MB forward output, its
 * 111 MB grad_input, box_iou's 64 MB matrix) is a fresh mapping every time: glibc serves blocks
 * over 32 MB with mmap and unmaps them on free. Each call then faults its output in and the
 * kernel clears every page before dkit writes it; on this VM the host also takes back freed
 * memory within seconds (bench/README.md), so the guest's faults become host faults. Measured
 * here on one thread: roi_align's forward took 53.7 ms end to end against 43.7 ms into an
 * output allocated once, and box_iou 4,000 x 4,000 took 15 ms on one thread and no less on
 * two: the page clearing, which no thread count speeds up, was most of its time.
 *
 * So large CPU outputs of calls on torch tensors (at least host_cache.min_bytes, 256 KiB; NumPy
 * arrays keep np.empty: NumPy 1.24 makes arrays it takes through DLPack read-only) come from here:
 * blocks of whole 2 MiB huge pages, hinted for huge pages (under 2 MiB, whole 64 KiB of plain
 * pages), that go back to a free list when their tensor dies and are handed out again for an
 * output of about the same size (a block is reused for a request it exceeds by at most an eighth).
 * A training loop, which asks for the same sizes at every step, then faults its outputs in once.
 * This is the CPU counterpart of PyTorch's CUDA caching allocator, and bounded the same way as one
 * would bound it: free blocks are kept up to host_cache.max_bytes (a tunable, default 256 MiB; 0
 * turns the cache off), the oldest unmapped first beyond it, and dkit.empty_cache() unmaps them
 * all. Blocks in use are not counted: they are the caller's tensors. A request the system cannot
 * map empties the cache and tries again before it fails.
 * The threshold was 8 MiB (large_output.min_bytes, the streaming stores' bound) until 2026-11-28:
 * then ps_roi_pool's 1 MB forward output, which glibc maps afresh after a training step's other
 * allocations, took 210 page faults a call on this VM (about 3 us each), 0.6 ms of a 2.9 ms
 * forward; from the cache it takes none. Under 2 MiB a block is rounded to 64 KiB, not to a huge
 * page, so that it holds at most a quarter more than its tensor (256 KiB and up).
 *
 * A block is released from whatever thread drops its last reference (torch's autograd
 * threads included), without the GIL: one leaf mutex, taken around fork() (pthread_atfork) so
 * that a child starts with a consistent, unlocked cache.
 */
#ifndef DK_HOST_CACHE_H
#define DK_HOST_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "dk_export.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dk_host_block dk_host_block;

/* A block of at least `bytes` bytes (> 0), page-aligned (2 MiB-aligned from 2 MiB): *data is its memory (uninitialised:
 * whatever its last user left), *blk what to release it with. DK_EINVAL for 0 or a size that
 * cannot be mapped, DK_ENOMEM when the system has no memory for it. */
DK_API dk_status dk_host_cache_alloc(size_t bytes, void **data, dk_host_block **blk);
/* Gives a block back (from any thread; NULL is ignored): cached, or unmapped when the cache
 * would exceed host_cache.max_bytes. */
DK_API void dk_host_cache_release(dk_host_block *blk);
/* The size from which torch outputs come from the cache: the tunable host_cache.min_bytes. */
DK_API int64_t dk_host_cache_min_bytes(void);
/* Unmaps every cached (free) block. */
DK_API void dk_host_cache_empty(void);

typedef struct {
    uint64_t cached_bytes, cached_blocks; /* free, kept mapped */
    uint64_t live_bytes, live_blocks;     /* handed out, not yet released */
    uint64_t hits, misses;                /* requests served from the cache / by a new mapping */
} dk_host_cache_stats;
DK_API void dk_host_cache_get_stats(dk_host_cache_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* DK_HOST_CACHE_H */
