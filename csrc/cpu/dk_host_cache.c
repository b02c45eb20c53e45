/* dk_host_cache.c — host memory for large outputs (Note [Host output cache] in dk_host_cache.h). */
#include "dk_host_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "dk_tunables.h"

DK_TUNABLE(dk__hc_max, "host_cache.max_bytes", (int64_t)256 << 20, 0, INT64_MAX,
           "free blocks of large outputs kept mapped for the next call (0: none)")

DK_TUNABLE(dk__hc_min, "host_cache.min_bytes", (int64_t)256 << 10, 0, INT64_MAX,
           "CPU outputs of torch calls at least this large come from the host cache (Note [Host output cache])")

#define DK__HC_PAGE ((size_t)2 << 20)   /* a huge page on x86-64 and 4 KiB-page arm64 */
#define DK__HC_GRAIN ((size_t)64 << 10) /* the size step of blocks under DK__HC_PAGE */

int64_t dk_host_cache_min_bytes(void) { return dk_tunable(&dk__hc_min); }

struct dk_host_block {
    void *data;
    size_t bytes;               /* a multiple of DK__HC_PAGE, or under one of DK__HC_GRAIN */
    struct dk_host_block *next; /* in the free list, newest first */
};

static pthread_mutex_t dk__hc_mu = PTHREAD_MUTEX_INITIALIZER;
static dk_host_block *dk__hc_free; /* newest first */
static dk_host_cache_stats dk__hc_st;

static void dk__hc_lock(void) { pthread_mutex_lock(&dk__hc_mu); }
static void dk__hc_unlock(void) { pthread_mutex_unlock(&dk__hc_mu); }
DK__CONSTRUCTOR(dk__hc_atfork) { pthread_atfork(dk__hc_lock, dk__hc_unlock, dk__hc_unlock); }

/* A fresh mapping of `bytes`: for a multiple of DK__HC_PAGE, aligned to DK__HC_PAGE so that every
 * 2 MiB of it can be one huge page (the slack of a larger mapping is unmapped) and hinted for huge
 * pages; a smaller block is plain pages (a huge page would more than double it). NULL on
 * failure. */
static void *dk__hc_map(size_t bytes)
{
    if (bytes < DK__HC_PAGE) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    const size_t span = bytes + DK__HC_PAGE;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    const size_t head = (DK__HC_PAGE - ((uintptr_t)p & (DK__HC_PAGE - 1))) & (DK__HC_PAGE - 1);
    if (head) munmap(p, head);
    if (span - head > bytes) munmap(p + head + bytes, span - head - bytes);
    p += head;
#if defined(MADV_HUGEPAGE)
    madvise(p, bytes, MADV_HUGEPAGE); /* a hint: without THP the block is plain pages */
#endif
    return p;
}

/* Unlinks and returns the free list (the caller unmaps it, outside the lock). */
static dk_host_block *dk__hc_take_all(void)
{
    dk_host_block *all = dk__hc_free;
    dk__hc_free = NULL;
    dk__hc_st.cached_bytes = 0;
    dk__hc_st.cached_blocks = 0;
    return all;
}

static void dk__hc_unmap_list(dk_host_block *b)
{
    while (b) {
        dk_host_block *next = b->next;
        munmap(b->data, b->bytes);
        free(b);
        b = next;
    }
}

dk_status dk_host_cache_alloc(size_t bytes, void **data, dk_host_block **blk)
{
    *data = NULL;
    *blk = NULL;
    if (bytes == 0 || bytes > SIZE_MAX / 2) return dk_error(DK_EINVAL, "host cache: cannot map %zu bytes", bytes);
    /* whole huge pages, or under one, whole grains: a block's size is what reuse compares */
    const size_t step = bytes < DK__HC_PAGE ? DK__HC_GRAIN : DK__HC_PAGE;
    const size_t need = (bytes + step - 1) / step * step;
    /* The smallest free block that fits and exceeds the request by at most an eighth. */
    dk__hc_lock();
    dk_host_block **best = NULL;
    for (dk_host_block **at = &dk__hc_free; *at; at = &(*at)->next) {
        const size_t have = (*at)->bytes;
        if (have >= need && have - need <= need / 8 && (!best || have < (*best)->bytes)) best = at;
    }
    dk_host_block *b = NULL;
    if (best) {
        b = *best;
        *best = b->next;
        dk__hc_st.cached_bytes -= b->bytes;
        dk__hc_st.cached_blocks--;
        dk__hc_st.hits++;
        dk__hc_st.live_bytes += b->bytes;
        dk__hc_st.live_blocks++;
    }
    dk__hc_unlock();
    if (!b) {
        b = malloc(sizeof *b);
        if (!b) return dk_error(DK_ENOMEM, "host cache: out of memory");
        b->bytes = need;
        b->data = dk__hc_map(need);
        if (!b->data) { /* what the cache holds may be what the system lacks */
            dk__hc_lock();
            dk_host_block *all = dk__hc_take_all();
            dk__hc_unlock();
            dk__hc_unmap_list(all);
            b->data = dk__hc_map(need);
        }
        if (!b->data) {
            free(b);
            return dk_error(DK_ENOMEM, "host cache: cannot map %zu bytes", need);
        }
        dk__hc_lock();
        dk__hc_st.misses++;
        dk__hc_st.live_bytes += b->bytes;
        dk__hc_st.live_blocks++;
        dk__hc_unlock();
    }
    b->next = NULL;
    *data = b->data;
    *blk = b;
    return DK_OK;
}

void dk_host_cache_release(dk_host_block *b)
{
    if (!b) return;
    const uint64_t max = (uint64_t)dk_tunable(&dk__hc_max);
    dk_host_block *evicted = NULL;
    dk__hc_lock();
    dk__hc_st.live_bytes -= b->bytes;
    dk__hc_st.live_blocks--;
    if (b->bytes <= max) {
        b->next = dk__hc_free;
        dk__hc_free = b;
        dk__hc_st.cached_bytes += b->bytes;
        dk__hc_st.cached_blocks++;
        /* Over the bound: the oldest blocks go (the list's tail), never the one just cached. */
        while (dk__hc_st.cached_bytes > max) {
            dk_host_block **at = &dk__hc_free->next, **last = NULL;
            for (; *at; at = &(*at)->next) last = at;
            dk_host_block *old = *last;
            *last = NULL;
            dk__hc_st.cached_bytes -= old->bytes;
            dk__hc_st.cached_blocks--;
            old->next = evicted;
            evicted = old;
        }
        b = NULL;
    }
    dk__hc_unlock();
    if (b) { /* larger than the whole cache may hold */
        b->next = evicted;
        evicted = b;
    }
    dk__hc_unmap_list(evicted);
}

void dk_host_cache_empty(void)
{
    dk__hc_lock();
    dk_host_block *all = dk__hc_take_all();
    dk__hc_unlock();
    dk__hc_unmap_list(all);
}

void dk_host_cache_get_stats(dk_host_cache_stats *st)
{
    dk__hc_lock();
    *st = dk__hc_st;
    dk__hc_unlock();
}
