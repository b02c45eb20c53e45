/*
 * test_host_cache.c — the host output cache (Note [Host output cache] in
 * csrc/cpu/dk_host_cache.h): blocks are whole aligned huge pages (under 2 MiB, whole 64 KiB),
 * reused for requests of about
 * their size and not for others, bounded by host_cache.max_bytes (oldest out first, a block
 * larger than the bound never kept), emptied on request and when a mapping fails, released from
 * other threads. Run under ThreadSanitizer too (make test-c-tsan).
 */
#include <pthread.h>
#include <string.h>

#include "dk_host_cache.h"
#include "dk_test.h"
#include "dk_tunables.h"

#define MiB ((size_t)1 << 20)

static dk_host_cache_stats stats(void)
{
    dk_host_cache_stats st;
    dk_host_cache_get_stats(&st);
    return st;
}

static int reset(void **state)
{
    (void)state;
    dk_host_cache_empty();
    return dk_tunable_set("host_cache.max_bytes", (int64_t)256 << 20, NULL) == DK_OK ? 0 : -1;
}

static void blocks_are_aligned_writable_and_reused_for_their_size(void **state)
{
    (void)state;
    void *a, *b;
    dk_host_block *ba, *bb;
    const dk_host_cache_stats s0 = stats();
    assert_ok(dk_host_cache_alloc(9 * MiB + 1, &a, &ba)); /* 10 MiB: whole 2 MiB pages */
    assert_true(((uintptr_t)a & (2 * MiB - 1)) == 0);
    memset(a, 0x5a, 10 * MiB); /* all of it is there */
    dk_host_cache_stats s = stats();
    assert_true(s.live_bytes == s0.live_bytes + 10 * MiB && s.misses == s0.misses + 1);
    dk_host_cache_release(ba);
    s = stats();
    assert_true(s.cached_bytes == 10 * MiB && s.cached_blocks == 1 && s.live_bytes == s0.live_bytes);
    /* About the same size: the same block, its contents as left (uninitialised memory). */
    assert_ok(dk_host_cache_alloc(10 * MiB, &b, &bb));
    assert_ptr_equal(a, b);
    assert_int_equal(((unsigned char *)b)[10 * MiB - 1], 0x5a);
    s = stats();
    assert_true(s.hits == s0.hits + 1 && s.cached_bytes == 0);
    dk_host_cache_release(bb);
    /* Far smaller (the block would waste more than an eighth) or larger: a new mapping. */
    assert_ok(dk_host_cache_alloc(4 * MiB, &b, &bb));
    assert_ptr_not_equal(a, b);
    dk_host_cache_release(bb);
    assert_ok(dk_host_cache_alloc(12 * MiB, &b, &bb));
    assert_ptr_not_equal(a, b);
    dk_host_cache_release(bb);
    assert_int_equal(stats().cached_blocks, 3);
    dk_host_cache_empty();
    s = stats();
    assert_true(s.cached_bytes == 0 && s.cached_blocks == 0);
}

/* Under 2 MiB (torch outputs from host_cache.min_bytes, 256 KiB): blocks of whole 64 KiB, page
 * aligned, reused within an eighth as the large ones; never rounded up to a huge page. */
static void small_blocks_take_whole_grains_not_huge_pages(void **state)
{
    (void)state;
    const size_t KiB = 1024;
    void *a, *b;
    dk_host_block *ba, *bb;
    const dk_host_cache_stats s0 = stats();
    assert_ok(dk_host_cache_alloc(1000000, &a, &ba)); /* ps_roi_pool's bench output: 1,024 KiB */
    assert_true(((uintptr_t)a & 4095) == 0);
    memset(a, 0x3c, 1024 * KiB);
    assert_true(stats().live_bytes == s0.live_bytes + 1024 * KiB);
    dk_host_cache_release(ba);
    assert_true(stats().cached_bytes == 1024 * KiB);
    assert_ok(dk_host_cache_alloc(1024 * KiB, &b, &bb)); /* the same size: the same block */
    assert_ptr_equal(a, b);
    assert_int_equal(((unsigned char *)b)[1024 * KiB - 1], 0x3c);
    dk_host_cache_release(bb);
    assert_ok(dk_host_cache_alloc(900 * KiB, &b, &bb)); /* 960 KiB: a sixteenth less, still served */
    assert_ptr_equal(a, b);
    dk_host_cache_release(bb);
    assert_ok(dk_host_cache_alloc(256 * KiB, &b, &bb)); /* a quarter: a block of its own */
    assert_ptr_not_equal(a, b);
    assert_true(stats().live_bytes == s0.live_bytes + 256 * KiB);
    dk_host_cache_release(bb);
    assert_ok(dk_host_cache_alloc(2 * MiB - 1, &b, &bb)); /* just under a huge page: 2 MiB of grains */
    assert_true(stats().live_bytes == s0.live_bytes + 2 * MiB);
    dk_host_cache_release(bb);
    assert_true(dk_host_cache_min_bytes() == 256 << 10);
    dk_host_cache_empty();
}

static void the_bound_evicts_the_oldest_and_never_keeps_a_larger_block(void **state)
{
    (void)state;
    assert_ok(dk_tunable_set("host_cache.max_bytes", (int64_t)(20 * MiB), NULL));
    void *p[3];
    dk_host_block *b[3];
    for (int i = 0; i < 3; i++) assert_ok(dk_host_cache_alloc(8 * MiB, &p[i], &b[i]));
    for (int i = 0; i < 3; i++) dk_host_cache_release(b[i]); /* 24 MiB freed, 20 may stay */
    dk_host_cache_stats s = stats();
    assert_true(s.cached_bytes == 16 * MiB && s.cached_blocks == 2);
    /* The newest two stay: the next requests get blocks 2 and 1 (newest first), not 0. */
    void *q;
    dk_host_block *bq, *br;
    assert_ok(dk_host_cache_alloc(8 * MiB, &q, &bq));
    assert_true(q == p[2] || q == p[1]);
    void *r;
    assert_ok(dk_host_cache_alloc(8 * MiB, &r, &br));
    assert_true((r == p[2] || r == p[1]) && r != q);
    dk_host_cache_release(bq);
    dk_host_cache_release(br);
    /* A block larger than the whole bound is unmapped at once. */
    assert_ok(dk_host_cache_alloc(32 * MiB, &q, &bq));
    dk_host_cache_release(bq);
    assert_true(stats().cached_bytes == 16 * MiB);
    /* 0 turns the cache off: nothing is kept. */
    assert_ok(dk_tunable_set("host_cache.max_bytes", 0, NULL));
    assert_ok(dk_host_cache_alloc(8 * MiB, &q, &bq));
    dk_host_cache_release(bq);
    assert_true(stats().cached_bytes <= 16 * MiB);
    dk_host_cache_empty();
    assert_ok(dk_host_cache_alloc(8 * MiB, &q, &bq));
    dk_host_cache_release(bq);
    assert_int_equal(stats().cached_bytes, 0);
}

static void bad_sizes_are_errors(void **state)
{
    (void)state;
    void *p = (void *)1;
    dk_host_block *b = (dk_host_block *)1;
    assert_error(dk_host_cache_alloc(0, &p, &b), DK_EINVAL, "host cache: cannot map 0 bytes");
    assert_null(p);
    assert_null(b);
    assert_int_equal(dk_host_cache_alloc(SIZE_MAX, &p, &b), DK_EINVAL);
    /* More than the address space can map: an error, not a crash. */
    assert_int_equal(dk_host_cache_alloc((size_t)1 << 62, &p, &b), DK_ENOMEM);
    assert_null(p);
    dk_host_cache_release(NULL); /* ignored */
}

/* Blocks released by threads that did not allocate them (torch frees a tensor wherever its
 * last reference goes), while others allocate. */
static void *churn(void *arg)
{
    dk_host_block **mine = arg;
    for (int i = 0; i < 200; i++) {
        void *p;
        dk_host_block *b;
        if (dk_host_cache_alloc((size_t)(8 + i % 3) * MiB, &p, &b) != DK_OK) return (void *)1;
        ((char *)p)[0] = (char)i;
        dk_host_cache_release(*mine); /* the other thread's block, handed over */
        *mine = b;
    }
    return NULL;
}

static void threads_allocate_and_release_each_others_blocks(void **state)
{
    (void)state;
    dk_host_block *held[4] = {NULL, NULL, NULL, NULL};
    pthread_t t[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, churn, &held[i]), 0);
    for (int i = 0; i < 4; i++) {
        void *rc;
        assert_int_equal(pthread_join(t[i], &rc), 0);
        assert_null(rc);
    }
    dk_host_cache_stats s = stats();
    assert_int_equal(s.live_blocks, 4);
    for (int i = 0; i < 4; i++) dk_host_cache_release(held[i]);
    s = stats();
    assert_int_equal(s.live_blocks, 0);
    assert_int_equal(s.live_bytes, 0);
    assert_true(s.cached_bytes <= (256 << 20));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(blocks_are_aligned_writable_and_reused_for_their_size, reset),
        cmocka_unit_test_setup(small_blocks_take_whole_grains_not_huge_pages, reset),
        cmocka_unit_test_setup(the_bound_evicts_the_oldest_and_never_keeps_a_larger_block, reset),
        cmocka_unit_test_setup(bad_sizes_are_errors, reset),
        cmocka_unit_test_setup(threads_allocate_and_release_each_others_blocks, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
