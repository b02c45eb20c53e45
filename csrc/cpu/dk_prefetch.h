/*
 * dk_prefetch.h — asking for memory before a kernel needs it.
 *
 * Note [Read-ahead]
 * A kernel that copies a band of its input into a per-thread buffer and then computes from that
 * buffer (roi_align's channel pairs) waits on the copy, and on a machine where one core already
 * draws most of the memory bandwidth there is, a thread waiting on its copy waits on the bus like
 * every other thread. So it claims its next iteration one step ahead and, while it computes the
 * current one from cache, spreads prefetches of the next band over its compute steps
 * (dk_readahead): the reads overlap computation instead of queueing behind the other threads',
 * and the copy finds its lines in cache.
 */
#ifndef DK_PREFETCH_H
#define DK_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

/* Every line of [p, p + bytes), for reading or for writing. */
static inline void dk_prefetch_read(const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, 3);
}

static inline void dk_prefetch_write(const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 1, 3);
}

/* Two ranges (a and b, b may be NULL) of `bytes` each, prefetched a slice per step. */
typedef struct {
    const char *a, *b;
    size_t bytes; /* bytes per range */
    size_t done;  /* bytes prefetched so far, per range */
    size_t step;  /* bytes per dk_readahead_step */
} dk_readahead;

static inline void dk_readahead_none(dk_readahead *ra) { ra->a = ra->b = NULL, ra->bytes = ra->done = ra->step = 0; }

/* Spreads ranges a and b over `steps` calls of dk_readahead_step, finishing a little early: the
 * last steps' results still have to be stored. */
static inline void dk_readahead_init(dk_readahead *ra, const void *a, const void *b, size_t bytes, int64_t steps)
{
    ra->a = (const char *)a;
    ra->b = (const char *)b;
    ra->bytes = bytes;
    ra->done = 0;
    const size_t per = bytes / (size_t)(steps > 1 ? steps - steps / 8 : 1) + 64;
    ra->step = (per + 63) & ~(size_t)63; /* whole lines */
}

static inline void dk_readahead_step(dk_readahead *ra)
{
    if (ra->done >= ra->bytes) return;
    const size_t end = ra->done + ra->step < ra->bytes ? ra->done + ra->step : ra->bytes;
    for (size_t o = ra->done; o < end; o += 64) {
        __builtin_prefetch(ra->a + o, 0, 2);
        if (ra->b) __builtin_prefetch(ra->b + o, 0, 2);
    }
    ra->done = end;
}

#endif /* DK_PREFETCH_H */
