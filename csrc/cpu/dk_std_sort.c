/*
 * dk_std_sort.c — std::sort's order of equal keys (Note [torch's order of equal scores] in
 * dk_std_sort.h).
 *
 * An item is one uint32_t: its rank shifted left by one, and bit 0 set when another item has the
 * same rank (a "tied" item). std::sort's comparison (rank alone) is then one shift, moves are
 * single words, and a scan compares eight items per AVX2 vector. Only tied items need an
 * identity (an untied item's place follows from its rank): which tied item sits at a position is
 * kept beside the items (who), and where each tied item is (pos), both updated only when a tied
 * item moves, so whether a range holds two tied items of one rank is a look at the tied items
 * (usually a few dozen) rather than at the range; with many tied items, the range is scanned.
 * The replay with these items took 0.7x the instructions of one with 64-bit items (rank and
 * index), 0.77M against 1.10M on 19,721 kept scores with 10 ties, in half the memory: the scans
 * read eight items per vector instead of four.
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
           "dk_std_sort_order's partition scans: 1 AVX2 where the CPU has it, 0 the baseline (Note [Stops eight at a "
           "time])")

#define DK__THRESHOLD 16 /* libstdc++'s _S_threshold: ranges this small are left to the insertion sort */

typedef uint32_t dk__item;
#define DK__TIED 1u

static inline uint32_t dk__rank(dk__item x) { return x >> 1; }
static inline bool dk__less(dk__item a, dk__item b) { return dk__rank(a) < dk__rank(b); }

typedef struct {
    dk__item *base;
    uint32_t *who;        /* who[q]: the number j of the tied item at position q (read only where tied) */
    uint32_t *pos;        /* pos[j]: where tied item j is now */
    const uint32_t *rank; /* the callers' ranks; tied item j's is rank[tied[j]] */
    const uint32_t *tied; /* the tied items' indices */
    int64_t ntied;
    uint32_t *seen; /* seen[r] == tick: rank r met in the range being looked at */
    uint32_t tick;
    int64_t nranks;
    bool avx2; /* dk__partition finds its stops eight at a time (Note [Stops eight at a time]) */
} dk__state;

/* A tied item moved to position q: where it is, and who is there, follow. */
static inline void dk__moved(dk__state *t, int64_t q, uint32_t j)
{
    t->who[q] = j;
    t->pos[j] = (uint32_t)q;
}

static inline void dk__swap(dk__state *t, dk__item *a, dk__item *b)
{
    const dk__item x = *a, y = *b;
    *a = y;
    *b = x;
    if ((x | y) & DK__TIED) {
        const int64_t qa = a - t->base, qb = b - t->base;
        const uint32_t wa = x & DK__TIED ? t->who[qa] : 0, wb = y & DK__TIED ? t->who[qb] : 0;
        if (x & DK__TIED) dk__moved(t, qb, wa);
        if (y & DK__TIED) dk__moved(t, qa, wb);
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
        for (int64_t j = 0; j < t->ntied; j++) {
            const uint32_t p = t->pos[j];
            if (p >= lo && p < hi && dk__seen_before(t, t->rank[t->tied[j]])) return true;
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

#define DK__BLOCK 256 /* positions a scan reads at a time: 256 took 7% fewer instructions than 64 (fewer refills) */

/* The left scan's stops among the positions [from, end) of first: those of rank >= p, in
 * increasing order, into buf (DK__BLOCK + 8 slots); returns how many. */
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
 * Note [Stops eight at a time]
 * With AVX2 the scans compare eight items at once: rank >= p is item >= p << 1 and rank <= p is
 * item <= p << 1 | 1, unsigned (max and min against the bound, then equality). The comparison's
 * 8-bit mask indexes dk__lanes, which packs the mask's set lanes in increasing order, one byte
 * each; widened and added to the first position (or, for the right scan, which reads its eight
 * reversed, taken from the last), they are the stops in order. All eight are stored (hence buf's
 * 8 spare slots) and the count advances by the mask's population. The same stops in the same
 * order as the scalar scans, so the same partitions: the tests run both (std_sort.isa).
 */
#if DK__STOPS_AVX2
/* the set lanes of mask m, packed from the low byte up: a constant table (2 KB), no instruction */
#define DK__PC8(m)                                                                                                   \
    (((m)&1) + ((m) >> 1 & 1) + ((m) >> 2 & 1) + ((m) >> 3 & 1) + ((m) >> 4 & 1) + ((m) >> 5 & 1) + ((m) >> 6 & 1) + \
     ((m) >> 7 & 1))
#define DK__LANE(m, l) ((m) >> (l)&1 ? (uint64_t)(l) << (8 * DK__PC8((m) & ((1u << (l)) - 1))) : 0)
#define DK__LANES(m)                                                                                       \
    (DK__LANE(m, 0) | DK__LANE(m, 1) | DK__LANE(m, 2) | DK__LANE(m, 3) | DK__LANE(m, 4) | DK__LANE(m, 5) | \
     DK__LANE(m, 6) | DK__LANE(m, 7))
#define DK__LANES4(m) DK__LANES(m), DK__LANES((m) + 1u), DK__LANES((m) + 2u), DK__LANES((m) + 3u)
#define DK__LANES16(m) DK__LANES4(m), DK__LANES4((m) + 4u), DK__LANES4((m) + 8u), DK__LANES4((m) + 12u)
#define DK__LANES64(m) DK__LANES16(m), DK__LANES16((m) + 16u), DK__LANES16((m) + 32u), DK__LANES16((m) + 48u)
static const uint64_t dk__lanes[256] = {DK__LANES64(0u), DK__LANES64(64u), DK__LANES64(128u), DK__LANES64(192u)};

__attribute__((target("avx2,popcnt"))) static inline __m256i dk__lanes_of(int m)
{
    return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)dk__lanes[m]));
}

__attribute__((target("avx2,popcnt"))) static int dk__left_stops_avx2(const dk__item *first, int64_t from, int64_t end,
                                                                      uint32_t p, int32_t *buf)
{
    const __m256i bound = _mm256_set1_epi32((int32_t)(p << 1));
    int n = 0;
    int64_t q = from;
    for (; q + 8 <= end; q += 8) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(first + q));
        const int m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(v, bound), v)));
        _mm256_storeu_si256((__m256i *)(void *)(buf + n),
                            _mm256_add_epi32(dk__lanes_of(m), _mm256_set1_epi32((int32_t)q)));
        n += __builtin_popcount((unsigned)m);
    }
    return n + dk__left_stops(first, q, end, p, buf + n);
}

__attribute__((target("avx2,popcnt"))) static int dk__right_stops_avx2(const dk__item *first, int64_t from, int64_t end,
                                                                       uint32_t p, int32_t *buf)
{
    const __m256i bound = _mm256_set1_epi32((int32_t)(p << 1 | 1));
    const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    int n = 0;
    int64_t q = from;
    for (; q - 7 > end; q -= 8) { /* positions q - 7 .. q, lane l holding q - l */
        const __m256i v = _mm256_permutevar8x32_epi32(
            _mm256_loadu_si256((const __m256i *)(const void *)(first + q - 7)), reverse);
        const int m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_min_epu32(v, bound), v)));
        _mm256_storeu_si256((__m256i *)(void *)(buf + n),
                            _mm256_sub_epi32(_mm256_set1_epi32((int32_t)q), dk__lanes_of(m)));
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
    int32_t lbuf[DK__BLOCK + 8], rbuf[DK__BLOCK + 8];
    int nl = 0, il = 0, nr = 0, ir = 0;
    int64_t lscan = 0, rscan = (last - first) - 1; /* next positions each side reads */
    int64_t hi = last - first;                     /* the last right stop swapped: written from here on */
    for (;;) {
        if (il == nl) { /* the next left stops, below hi */
            const int64_t end = lscan + DK__BLOCK < hi ? lscan + DK__BLOCK : hi;
            if (lscan >= end) return first + hi;
#if DK__STOPS_AVX2
            nl = t->avx2 ? dk__left_stops_avx2(first, lscan, end, p, lbuf) : dk__left_stops(first, lscan, end, p, lbuf);
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
            nr = t->avx2 ? dk__right_stops_avx2(first, rscan, end, p, rbuf)
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

/* An item put at first[dst] by the heap sort: a tied one carries who it is (w) along. */
static inline void dk__heap_put(dk__state *t, dk__item *first, int64_t dst, dk__item v, uint32_t w)
{
    first[dst] = v;
    if (v & DK__TIED) dk__moved(t, first + dst - t->base, w);
}
static inline uint32_t dk__who_at(const dk__state *t, const dk__item *first, int64_t q)
{
    return first[q] & DK__TIED ? t->who[first + q - t->base] : 0;
}

/* __adjust_heap followed by __push_heap, on the heap first[0 .. len); value, tied item w if tied. */
static void dk__adjust_heap(dk__state *t, dk__item *first, int64_t hole, int64_t len, dk__item value, uint32_t w)
{
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (dk__less(first[child], first[child - 1])) child--;
        dk__heap_put(t, first, hole, first[child], dk__who_at(t, first, child));
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        dk__heap_put(t, first, hole, first[child - 1], dk__who_at(t, first, child - 1));
        hole = child - 1;
    }
    int64_t parent = (hole - 1) / 2;
    while (hole > top && dk__less(first[parent], value)) {
        dk__heap_put(t, first, hole, first[parent], dk__who_at(t, first, parent));
        hole = parent;
        parent = (hole - 1) / 2;
    }
    dk__heap_put(t, first, hole, value, w);
}

/* __partial_sort(first, last, last): __make_heap, then __sort_heap. Rare (a range out of depth),
 * so its moves keep who and pos the simple way, one test per move. */
static void dk__heap_sort(dk__state *t, dk__item *first, dk__item *last)
{
    const int64_t len = last - first;
    if (len >= 2)
        for (int64_t parent = (len - 2) / 2;; parent--) {
            dk__adjust_heap(t, first, parent, len, first[parent], dk__who_at(t, first, parent));
            if (parent == 0) break;
        }
    while (last - first > 1) {
        --last;
        const dk__item value = *last;
        const uint32_t w = dk__who_at(t, first, last - first);
        dk__heap_put(t, first, last - first, *first, dk__who_at(t, first, 0));
        dk__adjust_heap(t, first, 0, last - first, value, w);
    }
}

/* __introsort_loop, skipping the ranges whose partitions cannot reorder equal items */
static void dk__introsort(dk__state *t, dk__item *first, dk__item *last, int depth)
{
    while (last - first > DK__THRESHOLD) {
        if (!dk__holds_a_tie(t, first, last)) return;
        if (depth == 0) {
            dk__heap_sort(t, first, last);
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
    return 5 * m * sizeof(uint32_t); /* items, who, pos, seen, count */
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

    dk__item *items = scratch;
    uint32_t *who = items + n, *pos = who + n, *seen = pos + n, *count = seen + n;
    /* one branch-free pass (the compiler's vectors), the ranks checked once at its end */
    uint32_t top = 0;
    for (int64_t i = 0; i < n; i++) {
        top = rank[i] > top ? rank[i] : top;
        items[i] = rank[i] << 1;
    }
    if (top >= (uint64_t)n) return DK_EINVAL;
    for (int64_t j = 0; j < ntied; j++) {
        const uint32_t i = tied[j];
        if (i >= (uint64_t)n || (j > 0 && i <= tied[j - 1])) return DK_EINVAL;
        items[i] |= DK__TIED;
        who[i] = (uint32_t)j;
        pos[j] = i;
        seen[rank[i]] = 0; /* the tie test marks only tied items' ranks (dk__holds_a_tie) */
        count[rank[i]] = 0;
    }

    dk__state t = {
        .base = items, .who = who, .pos = pos, .rank = rank, .tied = tied, .ntied = ntied, .seen = seen, .nranks = n};
#if DK__STOPS_AVX2
    t.avx2 = dk_tunable(&dk__std_sort_isa) == 1 && __builtin_cpu_supports("avx2");
#endif
    dk__introsort(&t, items, items + n, 2 * dk__floor_log2((uint64_t)n));
    /* The final insertion sort moves no item past an equal one: each rank's items keep the order
     * they now have, so a tied item's place among its equals is how many of them lie before it.
     * pos holds where every tied item now is: with few tied items they are compared among
     * themselves, and when pairs of tied items outnumber the items one pass over all n counts. */
    if (ntied * ntied <= n) {
        for (int64_t j = 0; j < ntied; j++) {
            const uint32_t r = rank[tied[j]], p = pos[j];
            uint32_t before = 0;
            for (int64_t i = 0; i < ntied; i++) before += rank[tied[i]] == r && pos[i] < p;
            within[j] = before;
        }
        return DK_OK;
    }
    for (int64_t q = 0; q < n; q++)
        if (items[q] & DK__TIED) within[who[q]] = count[dk__rank(items[q])]++;
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
