/*
 * dk_std_sort.c — std::sort's order of equal keys (Note [torch's order of equal scores] in
 * dk_std_sort.h).
 *
 * An item is one uint64_t: its rank in the high 32 bits, its index in the low 31, and bit 31 set
 * when another item has the same rank (a "tied" item). std::sort's comparison (rank alone) is then
 * one shift, and moves are single words. The positions of the tied items are kept up to date as
 * they move, so whether a range holds two tied items of one rank is a look at the tied items
 * (usually a few dozen) rather than at the range; with many tied items, the range is scanned.
 * The helpers are named after the libstdc++ steps they replay, so that the two read side by side.
 */
#include "dk_std_sort.h"

#include <stdbool.h>
#include <string.h>

#define DK__THRESHOLD 16 /* libstdc++'s _S_threshold: ranges this small are left to the insertion sort */

typedef uint64_t dk__item;
#define DK__TIED ((uint64_t)1 << 31)

static inline uint32_t dk__rank(dk__item x) { return (uint32_t)(x >> 32); }
static inline uint32_t dk__index(dk__item x) { return (uint32_t)x & 0x7fffffffu; }
static inline bool dk__less(dk__item a, dk__item b) { return dk__rank(a) < dk__rank(b); }

typedef struct {
    dk__item *base;
    uint32_t *pos;        /* pos[i]: where tied item i is now (in base) */
    const dk__item *tied; /* the tied items, as they were at the start */
    int64_t ntied;
    uint32_t *seen; /* seen[r] == tick: rank r met in the range being looked at */
    uint32_t tick;
    int64_t nranks;
} dk__state;

static inline void dk__swap(dk__state *t, dk__item *a, dk__item *b)
{
    const dk__item x = *a, y = *b;
    *a = y;
    *b = x;
    if ((x | y) & DK__TIED) {
        if (x & DK__TIED) t->pos[dk__index(x)] = (uint32_t)(b - t->base);
        if (y & DK__TIED) t->pos[dk__index(y)] = (uint32_t)(a - t->base);
    }
}

static inline bool dk__seen_before(dk__state *t, uint32_t r)
{
    if (t->seen[r] == t->tick) return true;
    t->seen[r] = t->tick;
    return false;
}

/* Whether [first, last) holds two items of one rank: only then can its partitions change the
 * order of equal items. */
static bool dk__holds_a_tie(dk__state *t, const dk__item *first, const dk__item *last)
{
    if (++t->tick == 0) { /* wrapped: stale marks could read as this look's */
        memset(t->seen, 0, (size_t)t->nranks * sizeof *t->seen);
        t->tick = 1;
    }
    if (t->ntied <= (last - first) / 4) {
        const uint32_t lo = (uint32_t)(first - t->base), hi = (uint32_t)(last - t->base);
        for (int64_t i = 0; i < t->ntied; i++) {
            const uint32_t p = t->pos[dk__index(t->tied[i])];
            if (p >= lo && p < hi && dk__seen_before(t, dk__rank(t->tied[i]))) return true;
        }
        return false;
    }
    for (const dk__item *p = first; p != last; ++p)
        if ((*p & DK__TIED) && dk__seen_before(t, dk__rank(*p))) return true;
    return false;
}

/* __move_median_to_first */
static void dk__median_to_first(dk__state *t, dk__item *result, dk__item *a, dk__item *b, dk__item *c)
{
    if (dk__less(*a, *b)) {
        if (dk__less(*b, *c)) dk__swap(t, result, b);
        else if (dk__less(*a, *c)) dk__swap(t, result, c);
        else dk__swap(t, result, a);
    } else if (dk__less(*a, *c)) dk__swap(t, result, a);
    else if (dk__less(*b, *c)) dk__swap(t, result, c);
    else dk__swap(t, result, b);
}

/*
 * __unguarded_partition of [first, last) around *pivot (which sits just before first), computed
 * without its data-dependent scans (half their branches mispredict on scores). Its left scan
 * stops at the items of rank >= the pivot's, its right scan at those of rank <= it, and step i
 * swaps the i-th stop of each, counted in the range as it was, until the scans meet: libstdc++
 * returns hi (the right stop step i - 1 swapped, where the left scan now stops) once the next
 * left stop lies at or past it, and the left stop once the next right stop lies at or before it.
 * So the stops are found in blocks, branch-free, from each end (as BlockQuicksort does), and the
 * swaps replayed from them; a block reads only positions no swap has written yet (left of the
 * last right stop, right of the current left stop), so every stop is one of the range as it
 * was. The median of three guarantees a left stop; the pivot at first[-1] guards the right scan.
 */
#define DK__BLOCK 64

static dk__item *dk__partition(dk__state *t, dk__item *first, dk__item *last, const dk__item *pivot)
{
    const uint32_t p = dk__rank(*pivot);
    int64_t lbuf[DK__BLOCK], rbuf[DK__BLOCK];
    int nl = 0, il = 0, nr = 0, ir = 0;
    int64_t lscan = 0, rscan = (last - first) - 1; /* next positions each side reads */
    int64_t hi = last - first;                     /* the last right stop swapped: written from here on */
    for (;;) {
        if (il == nl) { /* the next left stops, below hi */
            const int64_t end = lscan + DK__BLOCK < hi ? lscan + DK__BLOCK : hi;
            if (lscan >= end) return first + hi;
            for (nl = il = 0; lscan < end; lscan++) {
                lbuf[nl] = lscan;
                nl += dk__rank(first[lscan]) >= p;
            }
            continue;
        }
        const int64_t l = lbuf[il];
        if (l >= hi) return first + hi;
        if (ir == nr) { /* the next right stops, above l */
            const int64_t end = rscan - DK__BLOCK > l ? rscan - DK__BLOCK : l;
            if (rscan <= end) return first + l;
            for (nr = ir = 0; rscan > end; rscan--) {
                rbuf[nr] = rscan;
                nr += dk__rank(first[rscan]) <= p;
            }
            continue;
        }
        const int64_t h = rbuf[ir];
        if (h <= l) return first + l;
        dk__swap(t, first + l, first + h);
        il++;
        ir++;
        hi = h;
    }
}

/* __adjust_heap followed by __push_heap, on the heap first[0 .. len). Positions of tied items
 * are not kept from here on: a heap-sorted range is never looked at again, and no item leaves it. */
static void dk__adjust_heap(dk__item *first, int64_t hole, int64_t len, dk__item value)
{
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (dk__less(first[child], first[child - 1])) child--;
        first[hole] = first[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        first[hole] = first[child - 1];
        hole = child - 1;
    }
    int64_t parent = (hole - 1) / 2;
    while (hole > top && dk__less(first[parent], value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

/* __partial_sort(first, last, last): __make_heap, then __sort_heap */
static void dk__heap_sort(dk__item *first, dk__item *last)
{
    const int64_t len = last - first;
    if (len >= 2)
        for (int64_t parent = (len - 2) / 2;; parent--) {
            dk__adjust_heap(first, parent, len, first[parent]);
            if (parent == 0) break;
        }
    while (last - first > 1) {
        --last;
        const dk__item value = *last;
        *last = *first;
        dk__adjust_heap(first, 0, last - first, value);
    }
}

/* __introsort_loop, skipping the ranges whose partitions cannot reorder equal items */
static void dk__introsort(dk__state *t, dk__item *first, dk__item *last, int depth)
{
    while (last - first > DK__THRESHOLD) {
        if (!dk__holds_a_tie(t, first, last)) return;
        if (depth == 0) {
            dk__heap_sort(first, last);
            return;
        }
        --depth;
        dk__median_to_first(t, first, first + 1, first + (last - first) / 2, last - 1);
        dk__item *cut = dk__partition(t, first + 1, last, first);
        dk__introsort(t, cut, last, depth);
        last = cut;
    }
}

static int dk__floor_log2(uint64_t n)
{
    int k = 0;
    while (n >>= 1) k++;
    return k;
}

size_t dk_std_sort_scratch_bytes(int64_t n)
{
    const size_t m = n > 0 ? (size_t)n : 0;
    /* items and tied, then slot (m + 1), pos and seen */
    return 2 * m * sizeof(dk__item) + (3 * m + 1) * sizeof(uint32_t);
}

dk_status dk_std_sort_order(int64_t *perm, const uint32_t *rank, int64_t n, void *scratch)
{
    if (n < 0 || (uint64_t)n >= ((uint64_t)1 << 31)) return DK_EINVAL;
    if (n == 0) return DK_OK;

    dk__item *items = scratch, *tied = items + n;
    uint32_t *slot = (uint32_t *)(tied + n); /* counts, then each rank's next place */
    uint32_t *pos = slot + n + 1, *seen = pos + n;
    memset(slot, 0, (size_t)(n + 1) * sizeof *slot);
    memset(seen, 0, (size_t)n * sizeof *seen);

    for (int64_t i = 0; i < n; i++) {
        if (rank[i] >= (uint64_t)n) return DK_EINVAL;
        slot[rank[i] + 1]++;
    }
    int64_t ntied = 0;
    for (int64_t i = 0; i < n; i++) {
        const int shared = slot[rank[i] + 1] > 1;
        items[i] = (dk__item)rank[i] << 32 | (shared ? DK__TIED : 0) | (uint64_t)i;
        if (shared) {
            tied[ntied++] = items[i];
            pos[i] = (uint32_t)i;
        }
    }
    for (int64_t r = 0; r < n; r++) slot[r + 1] += slot[r];

    dk__state t = {items, pos, tied, ntied, seen, 0, n};
    if (ntied) dk__introsort(&t, items, items + n, 2 * dk__floor_log2((uint64_t)n));
    /* The final insertion sort moves no item past an equal one: each rank's items keep the
     * order they now have, and each goes to its rank's next place. */
    for (int64_t i = 0; i < n; i++) perm[slot[dk__rank(items[i])]++] = (int64_t)dk__index(items[i]);
    return DK_OK;
}
