/*
 * test_tls.c — the thread-local key sets (dk_tls.h): push/pop restores in order; scopes add keys
 * until they end, in any order and from any thread (Note [Scopes that end out of order]), and
 * Profile's counters survive formatting, resetting and profiled calls racing each other. Run
 * under ThreadSanitizer too (make test-c-tsan).
 */
#include <stdatomic.h>

#include "dk_test.h"

#define TLSOP_ARGS(X) \
    X(TENSOR, x)      \
    X(TENSOR_OUT, out)

DK_DECLARE_OP(tlsop, TLSOP_ARGS)
DK_DEFINE_OP(tlsop, TLSOP_ARGS)
{
    (void)x, (void)out;
    return DK_OK;
}

static dk_status tlsop_cpu(const dk_tensor *x, dk_tensor *out)
{
    (void)x;
    ((int64_t *)dk_tensor_data(out))[0] += 1;
    return DK_OK;
}
DK_REGISTER_DEVICE_IMPL(tlsop, CPU, tlsop_cpu)

static const dk_keyset P = DK_KEYSET(DK_KEY_PROFILE);

static void scopes_that_end_out_of_order_leave_nothing_behind(void **state)
{
    (void)state;
    dk_tls_scope a, b;
    assert_ok(dk_tls_scope_enter(P, 0, &a));
    assert_ok(dk_tls_scope_enter(P, 0, &b));
    assert_true(dk_tls_get().included == P);
    assert_ok(dk_tls_scope_exit(a)); /* the outer first: the inner still includes P */
    assert_true(dk_tls_get().included == P);
    assert_ok(dk_tls_scope_exit(b));
    assert_true(dk_tls_get().included == 0);
    assert_error(dk_tls_scope_exit(b), DK_EINVAL,
                 "dk_tls_scope_exit: scope 2 is unknown, already ended, or its thread has exited");
    assert_int_equal(dk_tls_scope_exit(12345678), DK_EINVAL);
}

static void scopes_and_push_pop_compose(void **state)
{
    (void)state;
    const dk_keyset F = DK_KEYSET(40), C = DK_KEYSET(DK_KEY_CPU);
    dk_tls_scope s;
    assert_ok(dk_tls_scope_enter(F, 0, &s));
    dk_tls_state saved = dk_tls_push_exclude(C);
    assert_true(dk_tls_get().included == F && dk_tls_get().excluded == C);
    dk_tls_pop(saved); /* restores the push/pop layer only: the scope's key stays */
    assert_true(dk_tls_get().included == F && dk_tls_get().excluded == 0);
    saved = dk_tls_push_include(P);
    assert_ok(dk_tls_scope_exit(s)); /* ended inside a push: the pushed key stays */
    assert_true(dk_tls_get().included == P);
    dk_tls_pop(saved);
    assert_true(dk_tls_get().included == 0 && dk_tls_get().excluded == 0);
}

typedef struct {
    dk_tls_scope scope;
    atomic_int stage;
    dk_keyset seen_inside, seen_after;
} cross;

static void *enters_and_waits(void *p)
{
    cross *c = (cross *)p;
    dk_tls_scope_enter(P, 0, &c->scope);
    c->seen_inside = dk_tls_get().included;
    atomic_store(&c->stage, 1);
    while (atomic_load(&c->stage) != 2) sched_yield(); /* the main thread ends our scope */
    c->seen_after = dk_tls_get().included;
    return NULL;
}

static void a_scope_ended_on_another_thread_leaves_its_own_thread(void **state)
{
    (void)state;
    cross c = {0, 0, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, enters_and_waits, &c), 0);
    while (atomic_load(&c.stage) != 1) sched_yield();
    assert_ok(dk_tls_scope_exit(c.scope));
    assert_true(dk_tls_get().included == 0); /* this thread never had it */
    atomic_store(&c.stage, 2);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(c.seen_inside == P);
    assert_true(c.seen_after == 0);
}

static void *enters_and_exits_thread(void *p)
{
    dk_tls_scope_enter(P, 0, (dk_tls_scope *)p);
    return NULL;
}

static void a_dead_threads_scope_is_an_error_not_a_crash(void **state)
{
    (void)state;
    dk_tls_scope s = 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, enters_and_exits_thread, &s), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(s != 0);
    assert_int_equal(dk_tls_scope_exit(s), DK_EINVAL);
}

/* Profile: one thread formats the table, one resets it, two call profiled ops, concurrently
 * (the review's crash: the format read a row count and then the rows). */
enum { RACE_ITERS = 3000 };
static atomic_int race_done;

static void *formats(void *p)
{
    (void)p;
    while (!atomic_load(&race_done)) {
        char *s = dk_profile_format();
        if (s) dk_free(s);
        dk_profile_row rows[4];
        (void)dk_profile_rows(rows, 4);
    }
    return NULL;
}

static void *resets(void *p)
{
    (void)p;
    while (!atomic_load(&race_done)) dk_profile_reset();
    return NULL;
}

static void *profiled_calls(void *p)
{
    (void)p;
    int64_t x = 0, out = 0;
    dkt_tensor xt, ot;
    dk_tensor *xx = dkt_cpu(&xt, &x, DK_INT64, DKT_DIMS(1)), *oo = dkt_cpu(&ot, &out, DK_INT64, DKT_DIMS(1));
    dk_tls_scope s;
    dk_tls_scope_enter(P, 0, &s);
    for (int i = 0; i < RACE_ITERS; i++)
        if (dk_tlsop(xx, oo) != DK_OK) return (void *)1;
    dk_tls_scope_exit(s);
    return out == RACE_ITERS ? NULL : (void *)1;
}

static void profile_formats_resets_and_calls_race_safely(void **state)
{
    (void)state;
    atomic_store(&race_done, 0);
    pthread_t f, r, c1, c2;
    assert_int_equal(pthread_create(&f, NULL, formats, NULL), 0);
    assert_int_equal(pthread_create(&r, NULL, resets, NULL), 0);
    assert_int_equal(pthread_create(&c1, NULL, profiled_calls, NULL), 0);
    assert_int_equal(pthread_create(&c2, NULL, profiled_calls, NULL), 0);
    void *bad1, *bad2;
    assert_int_equal(pthread_join(c1, &bad1), 0);
    assert_int_equal(pthread_join(c2, &bad2), 0);
    atomic_store(&race_done, 1);
    assert_int_equal(pthread_join(f, NULL), 0);
    assert_int_equal(pthread_join(r, NULL), 0);
    assert_null(bad1);
    assert_null(bad2);
    /* and the counters still count: */
    dk_profile_reset();
    profiled_calls(NULL);
    uint64_t count, ns;
    assert_ok(dk_profile_get(&dk_tlsop_op, DK_KEY_CPU, &count, &ns));
    assert_int_equal(count, RACE_ITERS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(scopes_that_end_out_of_order_leave_nothing_behind),
        dkt_test(scopes_and_push_pop_compose),
        dkt_test(a_scope_ended_on_another_thread_leaves_its_own_thread),
        dkt_test(a_dead_threads_scope_is_an_error_not_a_crash),
        dkt_test(profile_formats_resets_and_calls_race_safely),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
