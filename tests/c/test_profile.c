/* test_profile.c — the Profile functionality key: counts, times, rows, reset and the text table. */
#include <time.h>

#include "dk_test.h"

#define POP_ARGS(X)  \
    X(TENSOR, a)     \
    X(OPT_TENSOR, b) \
    X(INT, n)

DK_DECLARE_OP(pop, POP_ARGS)
DK_DEFINE_OP(pop, POP_ARGS)
{
    (void)a, (void)b, (void)n;
    return DK_OK;
}

/* A kernel that takes measurable time (a few microseconds). */
static int pop_calls;
static dk_status pop_kernel(const dk_tensor *a, const dk_tensor *b, int64_t n)
{
    (void)a, (void)b, (void)n;
    pop_calls++;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t1);
    while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 2000);
    dkt_log("pop");
    return DK_OK;
}

static dk_handle h_cpu, h_cuda;
static int group_setup(void **state)
{
    dkt_group_capture_warnings(state);
    if (dk_op_register(&dk_pop_op, DK_KEY_CPU, dk_kernel_unboxed((dk_fnptr)pop_kernel, "pop_cpu"), &h_cpu)) return -1;
    if (dk_op_register(&dk_pop_op, DK_KEY_CUDA, dk_kernel_unboxed((dk_fnptr)pop_kernel, "pop_cuda"), &h_cuda))
        return -1;
    return 0;
}

static uint64_t count_of(const dk_op *op, dk_key k, uint64_t *ns)
{
    uint64_t c = 0, t = 0;
    assert_ok(dk_profile_get(op, k, &c, &t));
    if (ns) *ns = t;
    return c;
}

static void profile_counts_and_times_each_call(void **state)
{
    (void)state;
    enum { N = 50 };
    dk_profile_reset();
    dkt_tensor t;
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    pop_calls = 0;
    for (int i = 0; i < N; i++) assert_ok(dk_pop(dkt_on(&t, kDLCPU, 0), NULL, 0));
    dk_tls_pop(p);
    assert_int_equal(pop_calls, N); /* Profile redispatched to the kernel every time */
    uint64_t ns = 0;
    assert_int_equal(count_of(&dk_pop_op, DK_KEY_CPU, &ns), N);
    assert_true(ns >= (uint64_t)N * 2000); /* at least the kernels' own time */
    assert_int_equal(count_of(&dk_pop_op, DK_KEY_CUDA, NULL), 0);
}

static void profile_counts_nothing_unless_included(void **state)
{
    (void)state;
    dk_profile_reset();
    dkt_tensor t;
    for (int i = 0; i < 5; i++) assert_ok(dk_pop(dkt_on(&t, kDLCPU, 0), NULL, 0));
    assert_int_equal(count_of(&dk_pop_op, DK_KEY_CPU, NULL), 0);
    /* included but excluded: exclusion wins */
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    dk_tls_push_exclude(DK_KEYSET(DK_KEY_PROFILE));
    assert_ok(dk_pop(&t.t, NULL, 0));
    dk_tls_pop(p);
    assert_int_equal(count_of(&dk_pop_op, DK_KEY_CPU, NULL), 0);
}

static void profile_rows_are_attributed_to_the_backend(void **state)
{
    (void)state;
    dk_profile_reset();
    dkt_tensor t;
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    for (int i = 0; i < 3; i++) assert_ok(dk_pop(dkt_on(&t, kDLCPU, 0), NULL, 0));
    for (int i = 0; i < 2; i++) assert_ok(dk_pop(dkt_on(&t, kDLCUDA, 0), NULL, 0));
    dk_tls_pop(p);

    dk_profile_row rows[16];
    int n = dk_profile_rows(rows, 16);
    assert_int_equal(n, 2); /* reset cleared every other op's rows */
    assert_int_equal(dk_profile_rows(NULL, 0), 2);
    int seen = 0;
    for (int i = 0; i < n; i++) {
        assert_ptr_equal(rows[i].op, &dk_pop_op);
        assert_true(rows[i].total_ns > 0);
        if (rows[i].backend == DK_KEY_CPU) {
            assert_int_equal(rows[i].count, 3);
            seen |= 1;
        }
        if (rows[i].backend == DK_KEY_CUDA) {
            assert_int_equal(rows[i].count, 2);
            seen |= 2;
        }
    }
    assert_int_equal(seen, 3);

    /* max smaller than the number of rows: count still returned, nothing written past max */
    memset(rows, 0, sizeof rows);
    assert_int_equal(dk_profile_rows(rows, 1), 2);
    assert_non_null(rows[0].op);
    assert_null(rows[1].op);
}

static void profile_format_lists_the_op(void **state)
{
    (void)state;
    dk_profile_reset();
    dkt_tensor t;
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    for (int i = 0; i < 7; i++) assert_ok(dk_pop(dkt_on(&t, kDLCPU, 0), NULL, 0));
    dk_tls_pop(p);
    char *text = dk_profile_format();
    assert_non_null(text);
    if (!strstr(text, "op ") || !strstr(text, "calls")) fail_msg("no header in:\n%s", text);
    /* the row: op name, backend, count */
    char *row = strstr(text, "\npop ");
    if (!row) fail_msg("no row for 'pop' in:\n%s", text);
    char name[32], backend[32];
    unsigned long long calls = 0;
    assert_int_equal(sscanf(row + 1, "%31s %31s %llu", name, backend, &calls), 3);
    assert_string_equal(name, "pop");
    assert_string_equal(backend, "cpu");
    assert_int_equal(calls, 7);
    dk_free(text);
}

static void profile_reset_zeroes_every_counter(void **state)
{
    (void)state;
    dkt_tensor t;
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    assert_ok(dk_pop(dkt_on(&t, kDLCPU, 0), NULL, 0));
    dk_tls_pop(p);
    assert_true(count_of(&dk_pop_op, DK_KEY_CPU, NULL) > 0);
    dk_profile_reset();
    uint64_t ns = 1;
    assert_int_equal(count_of(&dk_pop_op, DK_KEY_CPU, &ns), 0);
    assert_int_equal(ns, 0);
    assert_int_equal(dk_profile_rows(NULL, 0), 0);
    char *text = dk_profile_format();
    assert_non_null(text);
    assert_null(strstr(text, "pop"));
    dk_free(text);
}

static void profile_wraps_other_functionality_keys(void **state)
{
    (void)state;
    /* Profile is the highest key: it times everything below, functionality kernels included. */
    dk_key f = dkt_func_key("ProfInner");
    dk_handle h;
    assert_ok(dk_op_register(&dk_pop_op, f, dk_kernel_boxed(dkt_boxed_log_redispatch, "inner", "inner"), &h));
    dk_profile_reset();
    dkt_tensor t;
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE) | DK_KEYSET(f));
    dkt_log_reset();
    assert_ok(dk_pop(dkt_on(&t, kDLCPU, 0), NULL, 0));
    dk_tls_pop(p);
    assert_string_equal(dkt_log_str(), "inner,pop");
    assert_int_equal(count_of(&dk_pop_op, DK_KEY_CPU, NULL), 1);
    assert_ok(dk_unregister(h));
}

static void profile_fallthrough_for_one_op(void **state)
{
    (void)state;
    dk_handle h;
    assert_ok(dk_op_register(&dk_pop_op, DK_KEY_PROFILE, dk_kernel_fallthrough(), &h));
    dk_profile_reset();
    dkt_tensor t;
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    assert_ok(dk_pop(dkt_on(&t, kDLCPU, 0), NULL, 0));
    dk_tls_pop(p);
    assert_int_equal(count_of(&dk_pop_op, DK_KEY_CPU, NULL), 0);
    assert_ok(dk_unregister(h));
}

static void profile_get_rejects_bad_arguments(void **state)
{
    (void)state;
    uint64_t c = 5, ns = 5;
    assert_error(dk_profile_get(NULL, DK_KEY_CPU, &c, &ns), DK_EINVAL, "dk_profile_get: NULL argument");
    assert_error(dk_profile_get(&dk_pop_op, DK_KEY_CPU, NULL, &ns), DK_EINVAL, "dk_profile_get: NULL argument");
    assert_error(dk_profile_get(&dk_pop_op, 64, &c, &ns), DK_EINVAL, "dk_profile_get: key 64 out of range");
    assert_error(dk_profile_get(&dk_pop_op, -1, &c, &ns), DK_EINVAL, "dk_profile_get: key -1 out of range");
    assert_int_equal(c, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(profile_counts_and_times_each_call),
        dkt_test(profile_counts_nothing_unless_included),
        dkt_test(profile_rows_are_attributed_to_the_backend),
        dkt_test(profile_format_lists_the_op),
        dkt_test(profile_reset_zeroes_every_counter),
        dkt_test(profile_wraps_other_functionality_keys),
        dkt_test(profile_fallthrough_for_one_op),
        dkt_test(profile_get_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, group_setup, dkt_group_release_warnings);
}
