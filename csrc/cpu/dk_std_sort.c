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

#include "dk_tunables.h"

#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DK__STOPS_AVX2 1
#else
#define DK__STOPS_AVX2 0
#endif

DK_TUNABLE(dk__std_sort_isa, "std_sort.isa", 1, 0, 1,
           "dk_std_sort_order's partition scans: 1 AVX2 where the CPU has it, 0 the baseline (Note [Stops four at a "
           "time])")

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
    bool avx2;      /* dk__partition finds its stops four at a time (Note [Stops four at a time]) */
    bool heap_sort; /* a range ran out of depth: pos is stale for the items it heap-sorted */
    /* for the AVX2 scans: the lanes set in a 4-bit mask, in increasing (up) and decreasing (down)
     * order, as offsets from the first (up) and the last (down) of the four positions */
    int32_t up[16][4], down[16][4];
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
#define DK__BLOCK 256 /* positions a scan reads at a time: 256 took 7% fewer instructions than 64 (fewer refills) */

/* The left scan's stops among the positions [from, end) of first: those of rank >= p, in
 * increasing order, into buf (DK__BLOCK + 4 slots); returns how many. */
static int dk__left_stops(const dk__item *first, int64_t from, int64_t end, uint32_t p, int32_t *buf)
{
    int n = 0;
    for (int64_t q = from; q < end; q++) {
        buf[n] = (int32_t)q;
        n += dk__rank(first[q]) >= p;
    }
    return n;
}

/* The right scan's stops among the positions (end, from] of first: those of rank <= p, in
 * decreasing order. */
static int dk__right_stops(const dk__item *first, int64_t from, int64_t end, uint32_t p, int32_t *buf)
{
    int n = 0;
    for (int64_t q = from; q > end; q--) {
        buf[n] = (int32_t)q;
        n += dk__rank(first[q]) <= p;
    }
    return n;
}

/*
 * Note [Stops four at a time]
 * With AVX2 the scans compare four items at once: rank >= p is item >= p << 32 and rank <= p is
 * item < (p + 1) << 32, one 64-bit comparison each (items are below 2^63: ranks below 2^31), whose
 * 4-bit mask selects a row of offsets (dk__state's up and down) that, added to the first
 * position, are the stops in order; the row is stored whole (four slots, hence buf's 4 spare
 * ones) and the count advances by the mask's population. The same stops in the same order as
 * the scalar scans, so the same partitions: the tests run both (dk_std_sort_order_isa).
 */
#if DK__STOPS_AVX2
__attribute__((target("avx2,popcnt"))) static int
dk__left_stops_avx2(const dk__state *t, const dk__item *first, int64_t from, int64_t end, uint32_t p, int32_t *buf)
{
    const __m256i below = _mm256_set1_epi64x((int64_t)((uint64_t)p << 32) - 1);
    int n = 0;
    int64_t q = from;
    for (; q + 4 <= end; q += 4) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(first + q));
        const int m = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(v, below)));
        const __m128i at = _mm_add_epi32(_mm_loadu_si128((const __m128i *)(const void *)t->up[m]),
                                         _mm_set1_epi32((int32_t)q));
        _mm_storeu_si128((__m128i *)(void *)(buf + n), at);
        n += __builtin_popcount((unsigned)m);
    }
    return n + dk__left_stops(first, q, end, p, buf + n);
}

__attribute__((target("avx2,popcnt"))) static int
dk__right_stops_avx2(const dk__state *t, const dk__item *first, int64_t from, int64_t end, uint32_t p, int32_t *buf)
{
    const __m256i above = _mm256_set1_epi64x((int64_t)((uint64_t)(p + 1) << 32) - 1);
    int n = 0;
    int64_t q = from;
    for (; q - 3 > end; q -= 4) { /* positions q - 3 .. q */
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(first + q - 3));
        const int m = ~_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(v, above))) & 15;
        const __m128i at = _mm_add_epi32(_mm_loadu_si128((const __m128i *)(const void *)t->down[m]),
                                         _mm_set1_epi32((int32_t)q));
        _mm_storeu_si128((__m128i *)(void *)(buf + n), at);
        n += __builtin_popcount((unsigned)m);
    }
    return n + dk__right_stops(first, q, end, p, buf + n);
}
#endif

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
/* Whether swap step j of a block still runs (dk__partition): the scans have not met. */
static inline bool dk__steps_before(const int32_t *ls, const int32_t *rs, int64_t hi, int j)
{
    return ls[j] < (j > 0 ? rs[j - 1] : hi) && rs[j] > ls[j];
}

static dk__item *dk__partition(dk__state *t, dk__item *first, dk__item *last, const dk__item *pivot)
{
    const uint32_t p = dk__rank(*pivot);
    int32_t lbuf[DK__BLOCK + 4], rbuf[DK__BLOCK + 4];
    int nl = 0, il = 0, nr = 0, ir = 0;
    int64_t lscan = 0, rscan = (last - first) - 1; /* next positions each side reads */
    int64_t hi = last - first;                     /* the last right stop swapped: written from here on */
    for (;;) {
        if (il == nl) { /* the next left stops, below hi */
            const int64_t end = lscan + DK__BLOCK < hi ? lscan + DK__BLOCK : hi;
            if (lscan >= end) return first + hi;
#if DK__STOPS_AVX2
            nl = t->avx2 ? dk__left_stops_avx2(t, first, lscan, end, p, lbuf)
                         : dk__left_stops(first, lscan, end, p, lbuf);
#else
            nl = dk__left_stops(first, lscan, end, p, lbuf);
#endif
            il = 0;
            lscan = end;
            continue;
        }
        const int64_t l = lbuf[il];
        if (l >= hi) return first + hi;
        if (ir == nr) { /* the next right stops, above l */
            const int64_t end = rscan - DK__BLOCK > l ? rscan - DK__BLOCK : l;
            if (rscan <= end) return first + l;
#if DK__STOPS_AVX2
            nr = t->avx2 ? dk__right_stops_avx2(t, first, rscan, end, p, rbuf)
                         : dk__right_stops(first, rscan, end, p, rbuf);
#else
            nr = dk__right_stops(first, rscan, end, p, rbuf);
#endif
            ir = 0;
            rscan = end;
            continue;
        }
        /* swaps while both blocks last: stops pair up in order. Step j runs while the scans
         * have not met, ls[j] < (the right stop before, or hi) and rs[j] > ls[j]; ls increases
         * and rs decreases, so once a step fails every later one does: the steps that run are a
         * prefix, found before any swap (usually the whole block, one test), and swapped
         * without tests. */
        const int m = nl - il < nr - ir ? nl - il : nr - ir;
        const int32_t *ls = lbuf + il, *rs = rbuf + ir;
        int run = m;
        if (!dk__steps_before(ls, rs, hi, m - 1)) {
            int a = 0, b = m - 1; /* the first step that does not run is in [a, b] */
            while (a < b) {
                const int c = (a + b) / 2;
                if (dk__steps_before(ls, rs, hi, c)) a = c + 1;
                else b = c;
            }
            run = a;
        }
        for (int j = 0; j < run; j++) dk__swap(t, first + ls[j], first + rs[j]);
        if (run > 0) hi = rs[run - 1];
        if (run < m) return first + (ls[run] >= hi ? hi : ls[run]);
        il += m;
        ir += m;
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
            t->heap_sort = true;
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

size_t dk_std_sort_ties_scratch_bytes(int64_t n)
{
    const size_t m = n > 0 ? (size_t)n : 0;
    return 2 * m * sizeof(dk__item) + 3 * m * sizeof(uint32_t); /* items, the tied items; pos, seen, count */
}

size_t dk_std_sort_scratch_bytes(int64_t n)
{
    const size_t m = n > 0 ? (size_t)n : 0;
    return dk_std_sort_ties_scratch_bytes(n) + (3 * m + 1) * sizeof(uint32_t); /* slot (m + 1), tied, within */
}

dk_status dk_std_sort_ties(uint32_t *within, const uint32_t *rank, int64_t n, const uint32_t *tied, int64_t ntied,
                           void *scratch)
{
    if (n < 0 || (uint64_t)n >= ((uint64_t)1 << 31) || ntied < 0 || ntied > n) return DK_EINVAL;
    if (ntied == 0) return DK_OK;

    dk__item *items = scratch, *tied_items = items + n;
    uint32_t *pos = (uint32_t *)(tied_items + n), *seen = pos + n, *count = seen + n;
    /* one branch-free pass (the compiler's vectors), the ranks checked once at its end */
    uint32_t top = 0;
    for (int64_t i = 0; i < n; i++) {
        top = rank[i] > top ? rank[i] : top;
        items[i] = (dk__item)rank[i] << 32 | (uint64_t)i;
    }
    if (top >= (uint64_t)n) return DK_EINVAL;
    for (int64_t j = 0; j < ntied; j++) {
        const uint32_t i = tied[j];
        if (i >= (uint64_t)n || (j > 0 && i <= tied[j - 1])) return DK_EINVAL;
        items[i] |= DK__TIED;
        tied_items[j] = items[i];
        pos[i] = i;
        seen[rank[i]] = 0; /* the tie test marks only tied items' ranks (dk__holds_a_tie) */
        count[rank[i]] = 0;
    }

    dk__state t = {.base = items, .pos = pos, .tied = tied_items, .ntied = ntied, .seen = seen, .nranks = n};
#if DK__STOPS_AVX2
    t.avx2 = dk_tunable(&dk__std_sort_isa) == 1 && __builtin_cpu_supports("avx2");
    for (int m = 0; t.avx2 && m < 16; m++)
        for (int lane = 0, u = 0, d = 0; lane < 4; lane++) {
            t.up[m][lane] = t.down[m][lane] = 0; /* past the count: stored, then written over or not read */
            if (m >> lane & 1) t.up[m][u++] = lane;
            if (m >> (3 - lane) & 1) t.down[m][d++] = -lane;
        }
#endif
    dk__introsort(&t, items, items + n, 2 * dk__floor_log2((uint64_t)n));
    /* The final insertion sort moves no item past an equal one: each rank's items keep the order
     * they now have, so a tied item's place among its equals is how many of them lie before it.
     * pos holds where every tied item now is unless a heap sort moved some (it does not keep
     * pos); then, or when pairs of tied items outnumber the items, one pass over all n counts. */
    if (!t.heap_sort && ntied * ntied <= n) {
        for (int64_t j = 0; j < ntied; j++) {
            const uint32_t r = dk__rank(tied_items[j]), p = pos[tied[j]];
            uint32_t before = 0;
            for (int64_t i = 0; i < ntied; i++) before += dk__rank(tied_items[i]) == r && pos[tied[i]] < p;
            within[j] = before;
        }
        return DK_OK;
    }
    for (int64_t q = 0; q < n; q++)
        if (items[q] & DK__TIED) pos[dk__index(items[q])] = count[dk__rank(items[q])]++;
    for (int64_t j = 0; j < ntied; j++) within[j] = pos[tied[j]];
    return DK_OK;
}

dk_status dk_std_sort_order(int64_t *perm, const uint32_t *rank, int64_t n, void *scratch)
{
    if (n < 0 || (uint64_t)n >= ((uint64_t)1 << 31)) return DK_EINVAL;
    if (n == 0) return DK_OK;
    /* after dk_std_sort_ties' part of scratch: slot (each rank's count, then its first place),
     * the tied items and their places among their equals */
    uint32_t *slot = (uint32_t *)((char *)scratch + dk_std_sort_ties_scratch_bytes(n));
    uint32_t *tied = slot + n + 1, *within = tied + n;
    memset(slot, 0, (size_t)(n + 1) * sizeof *slot);
    for (int64_t i = 0; i < n; i++) {
        if (rank[i] >= (uint64_t)n) return DK_EINVAL;
        slot[rank[i] + 1]++;
    }
    int64_t ntied = 0;
    for (int64_t i = 0; i < n; i++)
        if (slot[rank[i] + 1] > 1) tied[ntied++] = (uint32_t)i;
    for (int64_t r = 0; r < n; r++) slot[r + 1] += slot[r];
    const dk_status st = dk_std_sort_ties(within, rank, n, tied, ntied, scratch);
    if (st != DK_OK) return st;
    for (int64_t i = 0; i < n; i++) perm[slot[rank[i]]] = i; /* a tied item's is written over below */
    for (int64_t j = 0; j < ntied; j++) perm[slot[rank[tied[j]]] + within[j]] = tied[j];
    return DK_OK;
}
