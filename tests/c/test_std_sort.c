/*
 * test_std_sort.c — dk_std_sort_order (csrc/cpu/dk_std_sort.h): what it must give whatever the
 * order of equal items, and where that order is known without running libstdc++. Its order of
 * equal items is checked against torch.sort itself, on every stack, by test_nms.py
 * (test_torch_sort_ties_is_torch_sort), which is the reference this file cannot call.
 */
#include <stdlib.h>
#include <string.h>

#include "dk_std_sort.h"
#include "dk_test.h"
#include "dk_tunables.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint32_t rnd(uint32_t bound)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % bound);
}

/* perm is a permutation of 0 .. n-1 whose ranks do not decrease. */
static void check_sorted_permutation(const int64_t *perm, const uint32_t *rank, int64_t n)
{
    char *hit = calloc((size_t)n + 1, 1);
    assert_non_null(hit);
    for (int64_t i = 0; i < n; i++) {
        assert_true(perm[i] >= 0 && perm[i] < n);
        assert_false(hit[perm[i]]);
        hit[perm[i]] = 1;
        if (i) assert_true(rank[perm[i - 1]] <= rank[perm[i]]);
    }
    free(hit);
}

/* The order, checked to be the same with the partition's scans eight at a time and one at a time
 * ("std_sort.isa", Note [Stops eight at a time]; on a CPU without AVX2 both are the latter). */
static int64_t *run(const uint32_t *rank, int64_t n)
{
    int64_t *perm = malloc((size_t)(n ? n : 1) * sizeof *perm);
    int64_t *scalar = malloc((size_t)(n ? n : 1) * sizeof *scalar);
    void *scratch = malloc(dk_std_sort_scratch_bytes(n) + 1);
    assert_non_null(perm);
    assert_non_null(scalar);
    assert_non_null(scratch);
    assert_int_equal(dk_tunable_set("std_sort.isa", 0, NULL), DK_OK);
    assert_int_equal(dk_std_sort_order(scalar, rank, n, scratch), DK_OK);
    assert_int_equal(dk_tunable_set("std_sort.isa", 1, NULL), DK_OK);
    assert_int_equal(dk_std_sort_order(perm, rank, n, scratch), DK_OK);
    assert_memory_equal(perm, scalar, (size_t)n * sizeof *perm);
    free(scalar);
    free(scratch);
    return perm;
}

static void every_input_comes_out_sorted_and_whole(void **state)
{
    (void)state;
    for (int trial = 0; trial < 400; trial++) {
        const int64_t n = 1 + rnd(trial % 2 ? 5000 : 64);
        const uint32_t distinct = 1 + rnd((uint32_t)n);
        uint32_t *rank = malloc((size_t)n * sizeof *rank);
        assert_non_null(rank);
        for (int64_t i = 0; i < n; i++) rank[i] = rnd(distinct);
        int64_t *perm = run(rank, n);
        check_sorted_permutation(perm, rank, n);
        free(perm);
        free(rank);
    }
}

/* std::sort leaves 16 items or fewer to its insertion sort alone, which is stable: equal items
 * in index order. Past 16 it is not (the partitions move equal items), which test_nms.py shows
 * against torch. */
static void up_to_sixteen_items_equal_ranks_keep_index_order(void **state)
{
    (void)state;
    for (int trial = 0; trial < 200; trial++) {
        const int64_t n = 1 + rnd(16);
        uint32_t rank[16];
        for (int64_t i = 0; i < n; i++) rank[i] = rnd(n < 3 ? (uint32_t)n : 3); /* ranks < n */
        int64_t *perm = run(rank, n);
        check_sorted_permutation(perm, rank, n);
        for (int64_t i = 1; i < n; i++)
            if (rank[perm[i - 1]] == rank[perm[i]]) assert_true(perm[i - 1] < perm[i]);
        free(perm);
    }
}

/* Distinct ranks have one sorted order: the ranks' inverse. */
static void distinct_ranks_give_the_one_sorted_order(void **state)
{
    (void)state;
    const int64_t n = 3000;
    uint32_t *rank = malloc((size_t)n * sizeof *rank);
    assert_non_null(rank);
    for (int64_t i = 0; i < n; i++) rank[i] = (uint32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        const uint32_t j = rnd((uint32_t)i + 1), t = rank[i];
        rank[i] = rank[j];
        rank[j] = t;
    }
    int64_t *perm = run(rank, n);
    for (int64_t i = 0; i < n; i++) assert_int_equal(rank[perm[i]], i);
    free(perm);
    free(rank);
}

/* dk_std_sort_ties finds a tied item's place among its equals two ways: from the positions it
 * keeps of its few tied items, or with a pass over all n when they are many (or a heap sort
 * moved them). Listing every item as tied (an item alone on its rank is then tied to none)
 * forces the pass and must change nothing: the same places for the items that do share a rank,
 * each rank's places 0 .. count - 1. */
static void few_and_many_tied_items_give_the_same_places(void **state)
{
    (void)state;
    for (int trial = 0; trial < 200; trial++) {
        const int64_t n = 17 + rnd(trial % 2 ? 6000 : 200);
        uint32_t *rank = malloc((size_t)n * sizeof *rank), *tied = malloc((size_t)n * sizeof *tied);
        uint32_t *all = malloc((size_t)n * sizeof *all), *within = malloc((size_t)n * sizeof *within);
        uint32_t *within_all = malloc((size_t)n * sizeof *within_all), *seen = calloc((size_t)n, sizeof *seen);
        void *scratch = malloc(dk_std_sort_ties_scratch_bytes(n));
        assert_true(rank && tied && all && within && within_all && seen && scratch);
        for (int64_t i = 0; i < n; i++) rank[i] = (uint32_t)i; /* distinct, then shuffled */
        for (int64_t i = n - 1; i > 0; i--) {
            const uint32_t j = rnd((uint32_t)i + 1), t = rank[i];
            rank[i] = rank[j];
            rank[j] = t;
        }
        const int pairs = 1 + (int)rnd(8); /* a few items take another's rank */
        for (int q = 0; q < pairs; q++) rank[rnd((uint32_t)n)] = rank[rnd((uint32_t)n)];
        uint32_t *count = calloc((size_t)n, sizeof *count);
        assert_non_null(count);
        for (int64_t i = 0; i < n; i++) count[rank[i]]++;
        int64_t ntied = 0;
        for (int64_t i = 0; i < n; i++) {
            all[i] = (uint32_t)i;
            if (count[rank[i]] > 1) tied[ntied++] = (uint32_t)i;
        }
        assert_int_equal(dk_std_sort_ties(within, rank, n, tied, ntied, scratch), DK_OK);
        assert_int_equal(dk_std_sort_ties(within_all, rank, n, all, n, scratch), DK_OK);
        for (int64_t j = 0; j < ntied; j++) {
            assert_int_equal(within[j], within_all[tied[j]]);
            assert_true(within[j] < count[rank[tied[j]]]);
            assert_false(seen[rank[tied[j]]] >> within[j] & 1); /* no two share a place (counts < 32 here) */
            seen[rank[tied[j]]] |= 1u << within[j];
        }
        free(count);
        free(rank), free(tied), free(all), free(within), free(within_all), free(seen), free(scratch);
    }
}

static void bad_ranks_and_sizes_are_refused(void **state)
{
    (void)state;
    int64_t perm[4];
    char scratch[256];
    const uint32_t out_of_range[4] = {0, 1, 4, 2};
    assert_int_equal(dk_std_sort_order(perm, out_of_range, 4, scratch), DK_EINVAL);
    assert_int_equal(dk_std_sort_order(perm, out_of_range, -1, scratch), DK_EINVAL);
    assert_int_equal(dk_std_sort_order(perm, out_of_range, (int64_t)1 << 31, scratch), DK_EINVAL);
    assert_int_equal(dk_std_sort_order(NULL, NULL, 0, NULL), DK_OK); /* nothing to read or write */
    assert_true(dk_std_sort_scratch_bytes(0) < 64);
    assert_true(dk_std_sort_scratch_bytes(1000) >= 1000 * 32);
    assert_true(dk_std_sort_ties_scratch_bytes(1000) >= 1000 * 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(every_input_comes_out_sorted_and_whole),   dkt_test(up_to_sixteen_items_equal_ranks_keep_index_order),
        dkt_test(distinct_ranks_give_the_one_sorted_order), dkt_test(few_and_many_tied_items_give_the_same_places),
        dkt_test(bad_ranks_and_sizes_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
