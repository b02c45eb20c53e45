/* test_parallel.c — the CPU kernels' parallel loop (dk_parallel.h): every iteration claimed once,
 * and Note [Threads that come late]: a loop whose caller waited on the scheduler sends the next
 * calls to half its threads for a while, and only for a while. */
#include <string.h>
#include <time.h>

#include "dk_parallel.h"
#include "dk_test.h"
#include "dk_tunables.h"

#define ITERS 4096

typedef struct {
    dk_parallel_counter counter;
    atomic_int claimed[ITERS];
    atomic_int ran[9]; /* which tids the loop called; [8]: any tid out of range */
    int late_tid;      /* this tid sleeps before its share, and tid 0 takes none: the caller waits */
} loop;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void worker(void *p, int tid)
{
    loop *l = p;
    atomic_fetch_add(&l->ran[tid >= 0 && tid < 8 ? tid : 8], 1); /* cmocka asserts on the calling thread only */
    if (l->late_tid) {
        if (tid == l->late_tid) sleep_ms(20); /* longer than making the threads takes, under TSan too */
        else if (tid == 0) return;
    }
    for (int64_t i; (i = dk_parallel_claim(&l->counter)) < ITERS;) atomic_fetch_add(&l->claimed[i], 1);
}

static loop *run(int nthreads, int late_tid)
{
    static loop l;
    memset(&l, 0, sizeof l);
    l.late_tid = late_tid;
    dk_parallel_run(nthreads, &l.counter, worker, &l);
    for (int i = 0; i < ITERS; i++) assert_int_equal(atomic_load(&l.claimed[i]), 1);
    assert_int_equal(atomic_load(&l.ran[8]), 0);
    return &l;
}

static void every_iteration_is_claimed_once_on_any_thread_count(void **state)
{
    (void)state;
    /* 8 threads on a smaller host may well come late: no judgement here, that is the next test's */
    assert_ok(dk_tunable_set("parallel.late_us", 0, NULL));
    for (int n = 1; n <= 8; n *= 2) {
        const loop *l = run(n, 0);
        assert_int_equal(atomic_load(&l->ran[0]), 1); /* the caller always takes part */
        for (int t = 1; t < 8; t++) assert_int_equal(atomic_load(&l->ran[t]), t < n);
    }
    dk_tunables_reset();
}

/* No window from an earlier loop (a thread may really have come late to one): parallel.late_us 0
 * forgets it at the next loop. */
static void forget_lateness(void)
{
    assert_ok(dk_tunable_set("parallel.late_us", 0, NULL));
    assert_int_equal(atomic_load(&run(2, 0)->ran[1]), 1);
    assert_ok(dk_tunable_set("parallel.late_us", 200, NULL));
}

static void a_late_loop_sends_the_next_calls_to_fewer_threads_for_a_while(void **state)
{
    (void)state;
    /* late: the caller took nothing and waited 20 ms for tid 1; alone for the next 2 ms only */
    assert_ok(dk_tunable_set("parallel.solo_ms", 1, NULL));
    forget_lateness();
    assert_int_equal(atomic_load(&run(2, 1)->ran[1]), 1);
    sleep_ms(30);
    assert_int_equal(atomic_load(&run(2, 0)->ran[1]), 1); /* the window has passed: two threads again */

    assert_ok(dk_tunable_set("parallel.solo_ms", 60000, NULL));
    forget_lateness();
    assert_int_equal(atomic_load(&run(2, 1)->ran[1]), 1);
    for (int i = 0; i < 3; i++) {
        const loop *l = run(2, 0); /* alone: tid 0 claims every iteration */
        assert_int_equal(atomic_load(&l->ran[0]), 1);
        assert_int_equal(atomic_load(&l->ran[1]), 0);
    }
    /* parallel.late_us 0 turns the judgement off and forgets the window */
    assert_ok(dk_tunable_set("parallel.late_us", 0, NULL));
    assert_int_equal(atomic_load(&run(2, 0)->ran[1]), 1);
    assert_int_equal(atomic_load(&run(2, 1)->ran[1]), 1);
    assert_int_equal(atomic_load(&run(2, 0)->ran[1]), 1);

    /* many threads are halved, not sent to one: a late loop on 4 makes the next ones 2 at most */
    forget_lateness();
    assert_int_equal(atomic_load(&run(4, 1)->ran[3]), 1);
    for (int i = 0; i < 3; i++) {
        const loop *l = run(4, 0);
        assert_int_equal(atomic_load(&l->ran[2]) + atomic_load(&l->ran[3]), 0);
    }
    dk_tunables_reset(); /* a window of minutes is still set: this process makes no more loops */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_iteration_is_claimed_once_on_any_thread_count),
        cmocka_unit_test(a_late_loop_sends_the_next_calls_to_fewer_threads_for_a_while),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
