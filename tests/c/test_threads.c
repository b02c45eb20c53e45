/*
 * test_threads.c — calls take no lock while registrations change the table (Note [Lock-free
 * table reads]). Run under ThreadSanitizer by `make test-c-tsan`.
 *
 * 8 threads call one op through its typed entry, 100,000 times each, checking every result,
 * while another thread registers and unregisters kernels in a loop until they finish: at the key
 * the callers use (typed and boxed kernels over a base kernel that stays), at a functionality key
 * the callers include (an op kernel, a per-op fallthrough, a boxed fallback over a fallthrough
 * fallback that stays), and at keys the callers never reach (other backends, an unincluded
 * functionality key, a composite, fallbacks). Every call must run one of the kernels that could
 * serve it at some instant — never a torn or empty slot, never a kernel for another key.
 *
 * DK_TEST_THREAD_ITERS overrides the per-thread count (e.g. for a quick run); by default it is
 * 100,000, also under TSan.
 */
#include <sched.h>
#include <stdatomic.h>

#include "dk_test.h"

#define THR_ARGS(X)    \
    X(TENSOR, x)       \
    X(TENSOR_OUT, out) \
    X(INT, caller)

DK_DECLARE_OP(thr, THR_ARGS)
DK_DEFINE_OP(thr, THR_ARGS)
{
    (void)x, (void)out, (void)caller;
    return DK_OK;
}

/* A second op that only the registrant touches: its fallbacks are everyone's. */
DK_DECLARE_OP(thr_other, THR_ARGS)
DK_DEFINE_OP(thr_other, THR_ARGS)
{
    (void)x, (void)out, (void)caller;
    return DK_OK;
}

enum { NTHREADS = 8, DEFAULT_ITERS = 100000 };

/* Kernel ids written to out[0]. Ids >= BAD_ID must never run. */
enum { K_BASE, K_ALT1, K_ALT2, K_BOXED, K_GOOD_COUNT, BAD_ID = 100 };
/* Wrapper marks written to out[1] by what served the functionality key. */
enum { W_NONE, W_OP_KERNEL, W_FALLBACK, W_COUNT };

static inline void put(dk_tensor *out, int slot, int64_t v) { ((int64_t *)dk_tensor_data(out))[slot] = v; }

#define TYPED_KERNEL(fname, id)                                                \
    static dk_status fname(const dk_tensor *x, dk_tensor *out, int64_t caller) \
    {                                                                          \
        (void)x, (void)caller;                                                 \
        put(out, 0, id);                                                       \
        return DK_OK;                                                          \
    }
TYPED_KERNEL(k_base, K_BASE)
TYPED_KERNEL(k_alt1, K_ALT1)
TYPED_KERNEL(k_alt2, K_ALT2)
TYPED_KERNEL(k_bad_cuda, BAD_ID + 1)
TYPED_KERNEL(k_bad_hip, BAD_ID + 2)
TYPED_KERNEL(k_bad_g, BAD_ID + 3)
TYPED_KERNEL(k_bad_composite, BAD_ID + 4)

DK_REGISTER_DEVICE_IMPL(thr, CPU, k_base)

static dk_status k_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ks, (void)ctx;
    dk_value *v = dk_stack_args(stack, op);
    put(v[1].u.t, 0, K_BOXED);
    return DK_OK;
}

/* Boxed kernels that must never run (written to keys no caller reaches). */
static dk_status k_bad_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ks;
    dk_value *v = dk_stack_args(stack, op);
    put(v[1].u.t, 0, (int64_t)(intptr_t)ctx);
    return DK_OK;
}

/* At the included functionality key: mark, then continue below. */
static dk_status k_wrap(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    dk_value *v = dk_stack_args(stack, op);
    put(v[1].u.t, 1, (int64_t)(intptr_t)ctx);
    return dk_op_redispatch_boxed(op, ks, stack);
}

static dk_key F, G;
static atomic_int callers_done;
static atomic_long per_kernel[K_GOOD_COUNT], per_wrap[W_COUNT], failures;
static atomic_long overrides, registrant_cycles;
static char first_failure[256];
static atomic_flag first_failure_taken = ATOMIC_FLAG_INIT;

static void count_warning(const char *msg, void *ctx)
{
    (void)msg, (void)ctx;
    atomic_fetch_add_explicit(&overrides, 1, memory_order_relaxed);
}

static long iterations(void)
{
    const char *v = getenv("DK_TEST_THREAD_ITERS");
    long n = v ? strtol(v, NULL, 10) : 0;
    return n > 0 ? n : DEFAULT_ITERS;
}

static void note_failure(const char *fmt, long a, long b, long c)
{
    atomic_fetch_add(&failures, 1);
    if (!atomic_flag_test_and_set(&first_failure_taken)) snprintf(first_failure, sizeof first_failure, fmt, a, b, c);
}

typedef struct {
    int id;
    long iters;
} caller_arg;

static void *caller(void *p)
{
    const caller_arg *arg = p;
    long local[K_GOOD_COUNT] = {0}, wraps[W_COUNT] = {0};
    int64_t buf[2];
    dkt_tensor xt, ot;
    const dk_tensor *x = dkt_on(&xt, kDLCPU, 0);
    dk_tensor *out = dkt_cpu(&ot, buf, DK_INT64, DKT_DIMS(2));
    dk_tls_push_include(DK_KEYSET(F));
    /* Start together with the registrant already cycling, and yield now and then: on a small
     * machine the callers could otherwise all finish inside one of the registrant's time slices
     * and see a single state of the table. */
    while (atomic_load(&registrant_cycles) < 2) sched_yield();
    for (long i = 0; i < arg->iters; i++) {
        if ((i & 255) == 255) sched_yield();
        buf[0] = -1;
        buf[1] = -1;
        dk_status st = dk_thr(x, out, arg->id);
        if (st != DK_OK) {
            note_failure("call %ld of thread %ld failed with status %ld", i, arg->id, st);
            continue;
        }
        /* The functionality key was served by a wrapper (which wrote out[1]) or fell through
         * (out[1] untouched); the backend kernel is one of the CPU kernels. */
        bool good_kernel = buf[0] >= 0 && buf[0] < K_GOOD_COUNT;
        bool good_mark = buf[1] == -1 || buf[1] == W_OP_KERNEL || buf[1] == W_FALLBACK;
        if (!good_kernel || !good_mark) {
            note_failure("call %ld: kernel id %ld, wrapper mark %ld", i, (long)buf[0], (long)buf[1]);
            continue;
        }
        int64_t w = buf[1] == -1 ? W_NONE : buf[1];
        local[buf[0]]++;
        wraps[w]++;
    }
    for (int k = 0; k < K_GOOD_COUNT; k++) atomic_fetch_add(&per_kernel[k], local[k]);
    for (int k = 0; k < W_COUNT; k++) atomic_fetch_add(&per_wrap[k], wraps[k]);
    return NULL;
}

static void *registrant(void *p)
{
    (void)p;
    /* Keep going until every caller is done, and at least 200 cycles. */
    for (long i = 0; !atomic_load(&callers_done) || i < 200; i++) {
        dk_handle h[12];
        int n = 0;
        bool ok = true;
#define PUSH(expr) ok &= (expr) == DK_OK, n++
        /* at the callers' backend key */
        PUSH(dk_op_register(&dk_thr_op, DK_KEY_CPU, dk_kernel_unboxed((dk_fnptr)k_alt1, "alt1"), &h[n]));
        PUSH(dk_op_register(&dk_thr_op, DK_KEY_CPU, dk_kernel_boxed(k_boxed, NULL, "boxed"), &h[n]));
        PUSH(dk_register_device_impl(&dk_thr_op, DK_KEY_CPU, (dk_fnptr)k_alt2, "alt2", &h[n]));
        /* at the included functionality key */
        PUSH(dk_op_register(&dk_thr_op, F, dk_kernel_boxed(k_wrap, (void *)(intptr_t)W_OP_KERNEL, "wrap"), &h[n]));
        PUSH(dk_register_fallback(F, dk_kernel_boxed(k_wrap, (void *)(intptr_t)W_FALLBACK, "wrap_fb"), &h[n]));
        PUSH(dk_op_register(&dk_thr_op, F, dk_kernel_fallthrough(), &h[n]));
        /* where no caller goes */
        PUSH(dk_register_device_impl(&dk_thr_op, DK_KEY_CUDA, (dk_fnptr)k_bad_cuda, "bad_cuda", &h[n]));
        PUSH(dk_op_register(&dk_thr_op, DK_KEY_HIP, dk_kernel_unboxed((dk_fnptr)k_bad_hip, "bad_hip"), &h[n]));
        PUSH(dk_op_register(&dk_thr_op, G, dk_kernel_unboxed((dk_fnptr)k_bad_g, "bad_g"), &h[n]));
        PUSH(dk_op_register_composite(&dk_thr_op, dk_kernel_unboxed((dk_fnptr)k_bad_composite, "bad_comp"), &h[n]));
        PUSH(dk_register_fallback(DK_KEY_CUDA, dk_kernel_boxed(k_bad_boxed, (void *)(intptr_t)(BAD_ID + 5), "bad_fb"),
                                  &h[n]));
        PUSH(dk_op_register(&dk_thr_other_op, DK_KEY_CPU, dk_kernel_unboxed((dk_fnptr)k_alt1, "other"), &h[n]));
#undef PUSH
        if (!ok) note_failure("registrant: registration failed in cycle %ld (%ld %ld)", i, 0, 0);
        /* Release in an order that changes every cycle, so every stack sees middle releases. */
        for (int j = 0; j < n; j++) {
            int r = (int)((j * 5 + i) % n); /* 5 is coprime with 12: a permutation */
            if (dk_unregister(h[r]) != DK_OK)
                note_failure("registrant: unregister failed in cycle %ld (%ld %ld)", i, 0, 0);
        }
        atomic_store(&registrant_cycles, i + 1);
    }
    return NULL;
}

static void eight_callers_race_a_registrant_and_always_hit_a_valid_kernel(void **state)
{
    (void)state;
    dk_set_warning_handler(count_warning, NULL);
    assert_ok(dk_functionality_key_register("ThrF", &F));
    assert_ok(dk_functionality_key_register("ThrG", &G));
    dk_handle ft;
    assert_ok(dk_register_fallback(F, dk_kernel_fallthrough(), &ft));

    long iters = iterations();
    pthread_t callers[NTHREADS], reg;
    caller_arg args[NTHREADS];
    assert_int_equal(pthread_create(&reg, NULL, registrant, NULL), 0);
    for (int i = 0; i < NTHREADS; i++) {
        args[i].id = i;
        args[i].iters = iters;
        assert_int_equal(pthread_create(&callers[i], NULL, caller, &args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_join(callers[i], NULL), 0);
    atomic_store(&callers_done, 1);
    assert_int_equal(pthread_join(reg, NULL), 0);
    dk_set_warning_handler(NULL, NULL);
    long cycles = atomic_load(&registrant_cycles);

    long total = 0;
    for (int k = 0; k < K_GOOD_COUNT; k++) total += atomic_load(&per_kernel[k]);
    long wrapped = 0;
    for (int k = 0; k < W_COUNT; k++) wrapped += atomic_load(&per_wrap[k]);
    print_message("    %d threads x %ld calls; registrant: %ld cycles, %ld override warnings\n", NTHREADS, iters,
                  cycles, atomic_load(&overrides));
    print_message("    backend kernel: base %ld, alt1 %ld, alt2 %ld, boxed %ld\n", atomic_load(&per_kernel[K_BASE]),
                  atomic_load(&per_kernel[K_ALT1]), atomic_load(&per_kernel[K_ALT2]),
                  atomic_load(&per_kernel[K_BOXED]));
    print_message("    functionality key: fell through %ld, op kernel %ld, fallback %ld\n",
                  atomic_load(&per_wrap[W_NONE]), atomic_load(&per_wrap[W_OP_KERNEL]),
                  atomic_load(&per_wrap[W_FALLBACK]));
    if (atomic_load(&failures)) fail_msg("%ld failures; first: %s", atomic_load(&failures), first_failure);
    assert_int_equal(total, (long)NTHREADS * iters);
    assert_int_equal(wrapped, (long)NTHREADS * iters);
    assert_true(cycles >= 200);
    /* The race really happened: the callers saw the table in more than one state. */
    int kernels_seen = 0, marks_seen = 0;
    for (int k = 0; k < K_GOOD_COUNT; k++) kernels_seen += atomic_load(&per_kernel[k]) > 0;
    for (int k = 0; k < W_COUNT; k++) marks_seen += atomic_load(&per_wrap[k]) > 0;
    assert_true(kernels_seen >= 2);
    assert_true(marks_seen >= 2);
    assert_true(atomic_load(&overrides) >= cycles); /* the registrant really did override */

    /* Afterwards the table is back to what the test started with. */
    int64_t buf[2] = {-1, -1};
    dkt_tensor xt, ot;
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(F));
    assert_ok(dk_thr(dkt_on(&xt, kDLCPU, 0), dkt_cpu(&ot, buf, DK_INT64, DKT_DIMS(2)), 0));
    dk_tls_pop(p);
    assert_int_equal(buf[0], K_BASE);
    assert_int_equal(buf[1], -1);
    assert_ok(dk_unregister(ft));
}

/* Tracing switched on and off while other threads call: the flag is read on every call. */
static atomic_int trace_stop;
static void *trace_caller(void *p)
{
    (void)p;
    int64_t buf[2];
    dkt_tensor xt, ot;
    const dk_tensor *x = dkt_on(&xt, kDLCPU, 0);
    dk_tensor *out = dkt_cpu(&ot, buf, DK_INT64, DKT_DIMS(2));
    while (!atomic_load(&trace_stop)) {
        buf[0] = -1;
        if (dk_thr(x, out, 0) != DK_OK || buf[0] != K_BASE)
            note_failure("trace caller: bad call (%ld %ld %ld)", 0, 0, 0);
    }
    return NULL;
}

static void tracing_can_be_toggled_while_other_threads_call(void **state)
{
    (void)state;
    /* The trace lines go to the stdio stream `stderr`; swap that stream (not fd 2, where a
     * sanitizer report must still be seen) before the threads start, restore after they end. */
    FILE *devnull = fopen("/dev/null", "w");
    assert_non_null(devnull);
    FILE *saved = stderr;
    stderr = devnull;
    atomic_store(&failures, 0);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, trace_caller, NULL), 0);
    for (int i = 0; i < 200; i++) {
        dk_dispatch_set_trace(i % 2 == 0);
        usleep(100);
    }
    dk_dispatch_set_trace(false);
    atomic_store(&trace_stop, 1);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    stderr = saved;
    fclose(devnull);
    if (atomic_load(&failures)) fail_msg("%ld failures; first: %s", atomic_load(&failures), first_failure);
}

/* Tracing while kernels come and go: a trace line names the kernel of the slot it took, and
 * that registration may be released by another thread at the same moment. */
static atomic_int churn_stop;
static void *churn(void *p)
{
    (void)p;
    while (!atomic_load(&churn_stop)) {
        dk_handle h;
        if (dk_op_register(&dk_thr_op, DK_KEY_CPU, dk_kernel_unboxed((dk_fnptr)k_alt1, "churn_alt1"), &h) != DK_OK ||
            dk_unregister(h) != DK_OK)
            note_failure("churn: registration failed (%ld %ld %ld)", 0, 0, 0);
    }
    return NULL;
}

static void *trace_caller_any(void *p)
{
    long n = *(const long *)p;
    int64_t buf[2];
    dkt_tensor xt, ot;
    const dk_tensor *x = dkt_on(&xt, kDLCPU, 0);
    dk_tensor *out = dkt_cpu(&ot, buf, DK_INT64, DKT_DIMS(2));
    for (long i = 0; i < n; i++) {
        buf[0] = -1;
        if (dk_thr(x, out, 0) != DK_OK || (buf[0] != K_BASE && buf[0] != K_ALT1))
            note_failure("traced call %ld: kernel id %ld (%ld)", i, (long)buf[0], 0);
    }
    return NULL;
}

static void tracing_while_kernels_are_registered_and_released(void **state)
{
    (void)state;
    dk_set_warning_handler(count_warning, NULL);
    FILE *devnull = fopen("/dev/null", "w");
    assert_non_null(devnull);
    FILE *saved = stderr;
    stderr = devnull;
    atomic_store(&failures, 0);
    dk_dispatch_set_trace(true);
    long n = iterations() / 20;
    pthread_t reg, th[2];
    assert_int_equal(pthread_create(&reg, NULL, churn, NULL), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, trace_caller_any, &n), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    atomic_store(&churn_stop, 1);
    assert_int_equal(pthread_join(reg, NULL), 0);
    dk_dispatch_set_trace(false);
    stderr = saved;
    fclose(devnull);
    dk_set_warning_handler(NULL, NULL);
    if (atomic_load(&failures)) fail_msg("%ld failures; first: %s", atomic_load(&failures), first_failure);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(eight_callers_race_a_registrant_and_always_hit_a_valid_kernel),
        dkt_test(tracing_can_be_toggled_while_other_threads_call),
        dkt_test(tracing_while_kernels_are_registered_and_released),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
