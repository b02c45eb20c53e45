/*
 * test_dispatch.c — the dispatcher: key priority, fallthrough (per op and per key), redispatch,
 * thread-local include/exclude, composite and fallback precedence, vendor backend keys, and
 * DKIT_DISPATCH_TRACE.
 *
 * Every test uses its own op (same argument list as the probe op) so that a failing test leaves
 * nothing registered that another test could trip over; fallbacks are process-wide and are
 * released at the end of the test that registers them.
 */
#include "dk_test.h"

#define DOP_ARGS(X)  \
    X(TENSOR, a)     \
    X(OPT_TENSOR, b) \
    X(INT, n)

#define DOP(name)                                                        \
    DK_DECLARE_OP(name, DOP_ARGS)                                        \
    DK_DEFINE_OP(name, DOP_ARGS)                                         \
    {                                                                    \
        (void)a;                                                         \
        (void)b;                                                         \
        if (n < 0) return dk_error(DK_EINVAL, #name ": n must be >= 0"); \
        return DK_OK;                                                    \
    }

DOP(dprio)
DOP(dft_op)
DOP(dft_key)
DOP(dft_key_other)
DOP(dred)
DOP(dtls)
DOP(dcomp)
DOP(dfb)
DOP(dtrace)
DOP(dvendor)
DOP(dnokey)

/* Typed kernels that log a label; they fit every op above (same argument list). */
#define LOGK(fname, label)                                                    \
    static dk_status fname(const dk_tensor *a, const dk_tensor *b, int64_t n) \
    {                                                                         \
        (void)a;                                                              \
        (void)b;                                                              \
        (void)n;                                                              \
        dkt_log(label);                                                       \
        return DK_OK;                                                         \
    }
LOGK(k_cpu, "cpu")
LOGK(k_cuda, "cuda")
LOGK(k_hip, "hip")
LOGK(k_f1, "F1")
LOGK(k_f2, "F2")
LOGK(k_f3, "F3")
LOGK(k_prof, "Profile")
LOGK(k_comp, "composite")
LOGK(k_vendor, "vendor")

static dk_key F1, F2, F3;

static int group_setup(void **state)
{
    dkt_group_capture_warnings(state);
    /* Claimed in this order, so F1 < F2 < F3 in priority. */
    if (dk_functionality_key_register("DispF1", &F1) || dk_functionality_key_register("DispF2", &F2) ||
        dk_functionality_key_register("DispF3", &F3))
        return -1;
    return F1 < F2 && F2 < F3 ? 0 : -1;
}

static dk_handle reg(dk_op *op, dk_key key, dk_kernel k)
{
    dk_handle h = NULL;
    assert_ok(dk_op_register(op, key, k, &h));
    assert_non_null(h);
    return h;
}
#define REG_UNBOXED(op, key, fn, name) reg(&dk_##op##_op, key, dk_kernel_unboxed((dk_fnptr)(fn), name))

/* Runs op(a, NULL, 0) and returns its log; the status goes to *st. */
#define RUN(op, a, st) (dkt_log_reset(), dk_clear_error(), *(st) = dk_##op((a), NULL, 0), dkt_log_str())

static dkt_tensor cpu_tt, cuda_tt, hip_tt;
#define CPU dkt_on(&cpu_tt, kDLCPU, 0)
#define CUDA dkt_on(&cuda_tt, kDLCUDA, 0)
#define HIP dkt_on(&hip_tt, kDLROCM, 0)

/* ------------------------------------------------------------------------------------------ */
/* Priority                                                                                   */

static void functionality_kernel_beats_backend_kernel(void **state)
{
    (void)state;
    dk_status st;
    dk_handle hc = REG_UNBOXED(dprio, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_handle hf = REG_UNBOXED(dprio, F1, k_f1, "k_f1");
    /* A functionality key takes part only when the thread includes it. */
    assert_string_equal(RUN(dprio, CPU, &st), "cpu");
    assert_int_equal(st, DK_OK);
    dk_tls_state prev = dk_tls_push_include(DK_KEYSET(F1));
    assert_string_equal(RUN(dprio, CPU, &st), "F1");
    assert_int_equal(st, DK_OK);
    dk_tls_pop(prev);
    assert_string_equal(RUN(dprio, CPU, &st), "cpu");
    assert_ok(dk_unregister(hf));
    assert_ok(dk_unregister(hc));
}

static void higher_functionality_key_beats_lower(void **state)
{
    (void)state;
    dk_status st;
    dk_handle h[4] = {
        REG_UNBOXED(dprio, DK_KEY_CPU, k_cpu, "k_cpu"),
        REG_UNBOXED(dprio, F1, k_f1, "k_f1"),
        REG_UNBOXED(dprio, F2, k_f2, "k_f2"),
        REG_UNBOXED(dprio, DK_KEY_PROFILE, k_prof, "k_prof"),
    };
    dk_tls_state prev = dk_tls_push_include(DK_KEYSET(F1) | DK_KEYSET(F2));
    assert_string_equal(RUN(dprio, CPU, &st), "F2");
    dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    assert_string_equal(RUN(dprio, CPU, &st), "Profile");
    dk_tls_pop(prev);
    prev = dk_tls_push_include(DK_KEYSET(F1));
    assert_string_equal(RUN(dprio, CPU, &st), "F1");
    dk_tls_pop(prev);
    for (int i = 0; i < 4; i++) assert_ok(dk_unregister(h[i]));
}

static void backend_keys_rank_hip_over_cuda_over_cpu(void **state)
{
    (void)state;
    /* One call never mixes backends, but the order of the bits is still the priority: seen by
     * redispatching with an explicit key set. */
    dk_handle h[3] = {
        REG_UNBOXED(dprio, DK_KEY_CPU, k_cpu, "k_cpu"),
        REG_UNBOXED(dprio, DK_KEY_CUDA, k_cuda, "k_cuda"),
        REG_UNBOXED(dprio, DK_KEY_HIP, k_hip, "k_hip"),
    };
    dk_keyset all = DK_KEYSET(F3) | DK_KEYSET(DK_KEY_HIP) | DK_KEYSET(DK_KEY_CUDA) | DK_KEYSET(DK_KEY_CPU);
    dkt_log_reset();
    assert_ok(dk_dprio_redispatch(all, CPU, NULL, 0));
    assert_ok(dk_dprio_redispatch(all & ~DK_KEYSET(DK_KEY_HIP), CPU, NULL, 0));
    assert_ok(dk_dprio_redispatch(DK_KEYSET(F3) | DK_KEYSET(DK_KEY_CPU), CPU, NULL, 0));
    assert_string_equal(dkt_log_str(), "hip,cuda,cpu");
    for (int i = 0; i < 3; i++) assert_ok(dk_unregister(h[i]));
}

/* ------------------------------------------------------------------------------------------ */
/* Fallthrough                                                                                */

static void fallthrough_per_op_goes_to_the_next_key(void **state)
{
    (void)state;
    dk_status st;
    dk_handle hc = REG_UNBOXED(dft_op, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_handle hf2 = reg(&dk_dft_op_op, F2, dk_kernel_boxed(dkt_boxed_log_redispatch, "F2", "f2_boxed"));
    assert_true(dk_dft_op_op.mask & DK_KEYSET(F1)); /* missing, not fallthrough: still in the mask */
    dk_handle ft = reg(&dk_dft_op_op, F1, dk_kernel_fallthrough());
    assert_false(dk_dft_op_op.mask & DK_KEYSET(F1));
    assert_true(dk_dft_op_op.mask & DK_KEYSET(F2));
    assert_true(dk_dft_op_op.mask & DK_KEYSET(DK_KEY_CPU));

    dk_tls_state prev = dk_tls_push_include(DK_KEYSET(F1));
    assert_string_equal(RUN(dft_op, CPU, &st), "cpu");
    assert_int_equal(st, DK_OK);
    dk_tls_push_include(DK_KEYSET(F2)); /* F2 redispatches below itself: F1 is skipped */
    assert_string_equal(RUN(dft_op, CPU, &st), "F2,cpu");
    assert_int_equal(st, DK_OK);
    dk_tls_pop(prev);

    char *dump = dk_op_dump(&dk_dft_op_op);
    assert_non_null(dump);
    char line[128];
    snprintf(line, sizeof line, "  %-12s %-12s %s\n", "DispF1", "fallthrough", "-");
    if (!strstr(dump, line)) fail_msg("no fallthrough line in:\n%s", dump);
    dk_free(dump);

    /* Without the fallthrough, the included key has nothing to run. */
    assert_ok(dk_unregister(ft));
    assert_true(dk_dft_op_op.mask & DK_KEYSET(F1));
    prev = dk_tls_push_include(DK_KEYSET(F1));
    assert_string_equal(RUN(dft_op, CPU, &st), "");
    assert_int_equal(st, DK_ENOTIMPL);
    assert_string_equal(dk_last_error(), "dft_op: no kernel for key DispF1 (registered: cpu, DispF2)");
    dk_tls_pop(prev);
    assert_ok(dk_unregister(hf2));
    assert_ok(dk_unregister(hc));
}

static void fallthrough_as_a_key_fallback_serves_every_op_without_a_kernel(void **state)
{
    (void)state;
    dk_status st;
    dk_handle h1 = REG_UNBOXED(dft_key, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_handle h2 = REG_UNBOXED(dft_key_other, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_handle h3 = REG_UNBOXED(dft_key_other, F3, k_f3, "k_f3");
    dk_handle fb = NULL;
    assert_ok(dk_register_fallback(F3, dk_kernel_fallthrough(), &fb));
    assert_false(dk_dft_key_op.mask & DK_KEYSET(F3));
    assert_true(dk_dft_key_other_op.mask & DK_KEYSET(F3)); /* its own kernel comes first */

    dk_tls_state prev = dk_tls_push_include(DK_KEYSET(F3));
    assert_string_equal(RUN(dft_key, CPU, &st), "cpu");
    assert_int_equal(st, DK_OK);
    assert_string_equal(RUN(dft_key_other, CPU, &st), "F3");
    assert_int_equal(st, DK_OK);

    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_dft_key_op, e, DK_NUM_KEYS);
    bool seen = false;
    for (int i = 0; i < n; i++)
        if (e[i].key == F3) {
            seen = true;
            assert_int_equal(e[i].provenance, DK_PROV_FALLTHROUGH);
        }
    assert_true(seen);

    /* Releasing the fallback brings the key back into every op's mask. */
    assert_ok(dk_unregister(fb));
    assert_true(dk_dft_key_op.mask & DK_KEYSET(F3));
    assert_string_equal(RUN(dft_key, CPU, &st), "");
    assert_int_equal(st, DK_ENOTIMPL);
    dk_tls_pop(prev);
    assert_ok(dk_unregister(h3));
    assert_ok(dk_unregister(h2));
    assert_ok(dk_unregister(h1));
}

/* ------------------------------------------------------------------------------------------ */
/* Redispatch                                                                                 */

static dk_keyset seen_ks_f1, seen_ks_f2;
static int64_t seen_n_f1;

/* F2: boxed, redispatches boxed. */
static dk_status red_f2(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ctx;
    seen_ks_f2 = ks;
    dkt_log("F2");
    return dk_op_redispatch_boxed(op, ks, stack);
}

/* F1: boxed, redispatches through the typed entry dk_dred_redispatch. */
static dk_status red_f1(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ctx;
    seen_ks_f1 = ks;
    dkt_log("F1");
    dk_value *v = dk_stack_args(stack, op);
    assert_int_equal(v[0].tag, DK_TYPE_TENSOR);
    assert_int_equal(v[1].tag, DK_TYPE_NONE);
    assert_int_equal(v[2].tag, DK_TYPE_INT);
    seen_n_f1 = v[2].u.i;
    return dk_dred_redispatch(ks, v[0].u.t, NULL, v[2].u.i);
}

static void two_functionality_kernels_redispatch_in_order_to_the_backend(void **state)
{
    (void)state;
    dk_handle hc = REG_UNBOXED(dred, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_handle h1 = reg(&dk_dred_op, F1, dk_kernel_boxed(red_f1, NULL, "red_f1"));
    dk_handle h2 = reg(&dk_dred_op, F2, dk_kernel_boxed(red_f2, NULL, "red_f2"));
    dk_tls_state prev = dk_tls_push_include(DK_KEYSET(F1) | DK_KEYSET(F2));
    dkt_log_reset();
    assert_ok(dk_dred(CPU, NULL, 7));
    assert_string_equal(dkt_log_str(), "F2,F1,cpu");
    assert_int_equal(seen_ks_f2, DK_KEYSET(F2) | DK_KEYSET(F1) | DK_KEYSET(DK_KEY_CPU));
    assert_int_equal(seen_ks_f1, DK_KEYSET(F1) | DK_KEYSET(DK_KEY_CPU));
    assert_int_equal(seen_n_f1, 7);

    /* Through the boxed entry too. */
    dk_stack s;
    dk_stack_init(&s);
    assert_ok(dk_stack_push(&s, dk_value_tensor(CPU)));
    assert_ok(dk_stack_push(&s, dk_value_none()));
    assert_ok(dk_stack_push(&s, dk_value_int(9)));
    dkt_log_reset();
    assert_ok(dk_op_call_boxed(&dk_dred_op, &s));
    assert_string_equal(dkt_log_str(), "F2,F1,cpu");
    assert_int_equal(seen_n_f1, 9);
    assert_int_equal(s.size, 0);

    /* Redispatch below the last backend kernel finds nothing: an error, not a crash. */
    dkt_log_reset();
    dk_clear_error();
    assert_int_equal(dk_dred(CUDA, NULL, 1), DK_ENOTIMPL);
    assert_string_equal(dkt_log_str(), "F2,F1");
    assert_string_equal(dk_last_error(), "dred: no kernel for device cuda (registered: cpu, DispF1, DispF2)");
    dk_tls_pop(prev);
    assert_ok(dk_unregister(h2));
    assert_ok(dk_unregister(h1));
    assert_ok(dk_unregister(hc));
}

/* ------------------------------------------------------------------------------------------ */
/* Thread-local include / exclude                                                             */

static void tls_include_and_exclude_steer_dispatch(void **state)
{
    (void)state;
    dk_status st;
    dk_handle h[3] = {
        REG_UNBOXED(dtls, DK_KEY_CPU, k_cpu, "k_cpu"),
        REG_UNBOXED(dtls, F1, k_f1, "k_f1"),
        REG_UNBOXED(dtls, F2, k_f2, "k_f2"),
    };
    dk_tls_state p0 = dk_tls_push_include(DK_KEYSET(F1));
    assert_string_equal(RUN(dtls, CPU, &st), "F1");
    dk_tls_state p1 = dk_tls_push_exclude(DK_KEYSET(F1)); /* exclusion wins */
    assert_string_equal(RUN(dtls, CPU, &st), "cpu");
    dk_tls_state p2 = dk_tls_push_include(DK_KEYSET(F1) | DK_KEYSET(F2)); /* still excluded */
    assert_string_equal(RUN(dtls, CPU, &st), "F2");
    dk_tls_push_exclude(DK_KEYSET(F2));
    assert_string_equal(RUN(dtls, CPU, &st), "cpu");
    dk_tls_pop(p2); /* nesting restores */
    assert_string_equal(RUN(dtls, CPU, &st), "cpu");
    dk_tls_pop(p1);
    assert_string_equal(RUN(dtls, CPU, &st), "F1");
    dk_tls_pop(p0);
    assert_string_equal(RUN(dtls, CPU, &st), "cpu");
    for (int i = 0; i < 3; i++) assert_ok(dk_unregister(h[i]));
}

static void excluding_the_backend_leaves_no_key(void **state)
{
    (void)state;
    dk_status st;
    dk_handle h = REG_UNBOXED(dnokey, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_tls_state p = dk_tls_push_exclude(DK_KEYSET(DK_KEY_CPU));
    assert_string_equal(RUN(dnokey, CPU, &st), "");
    assert_int_equal(st, DK_ENOTIMPL);
    assert_string_equal(dk_last_error(), "dnokey: no dispatch key left for this call (keys {}; registered: cpu)");
    dk_tls_pop(p);
    assert_string_equal(RUN(dnokey, CPU, &st), "cpu");
    assert_ok(dk_unregister(h));
}

typedef struct {
    char log[sizeof dkt__log];
    dk_status st;
    dk_tls_state tls;
} thread_seen;

static void *call_dtls_in_thread(void *arg)
{
    thread_seen *r = arg;
    r->tls = dk_tls_get();
    dkt_log_reset();
    r->st = dk_dtls(dkt_on(&(dkt_tensor){0}, kDLCPU, 0), NULL, 0);
    snprintf(r->log, sizeof r->log, "%s", dkt_log_str());
    return NULL;
}

static void tls_include_is_invisible_to_other_threads(void **state)
{
    (void)state;
    dk_status st;
    dk_handle h[2] = {
        REG_UNBOXED(dtls, DK_KEY_CPU, k_cpu, "k_cpu"),
        REG_UNBOXED(dtls, F1, k_f1, "k_f1"),
    };
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(F1));
    thread_seen r;
    memset(&r, 0, sizeof r);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, call_dtls_in_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(r.st, DK_OK);
    assert_int_equal(r.tls.included, 0);
    assert_string_equal(r.log, "cpu");
    assert_string_equal(RUN(dtls, CPU, &st), "F1"); /* still included here */
    dk_tls_pop(p);
    for (int i = 0; i < 2; i++) assert_ok(dk_unregister(h[i]));
}

/* ------------------------------------------------------------------------------------------ */
/* Composite and fallback                                                                      */

static void composite_serves_backends_without_a_kernel_only(void **state)
{
    (void)state;
    dk_status st;
    dk_handle hc = REG_UNBOXED(dcomp, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_handle comp = NULL;
    assert_ok(dk_op_register_composite(&dk_dcomp_op, dk_kernel_unboxed((dk_fnptr)k_comp, "k_comp"), &comp));
    assert_string_equal(RUN(dcomp, CPU, &st), "cpu");        /* kernel first */
    assert_string_equal(RUN(dcomp, CUDA, &st), "composite"); /* no kernel: composite */
    assert_string_equal(RUN(dcomp, HIP, &st), "composite");
    assert_int_equal(st, DK_OK);

    /* Never for a functionality key: an included key without kernel or fallback has nothing. */
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(F1));
    assert_string_equal(RUN(dcomp, CUDA, &st), "");
    assert_int_equal(st, DK_ENOTIMPL);
    assert_string_equal(dk_last_error(), "dcomp: no kernel for key DispF1 (registered: cpu, cuda, hip)");
    dk_tls_pop(p);

    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_dcomp_op, e, DK_NUM_KEYS);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        dk_provenance want = e[i].key == F1            ? DK_PROV_MISSING
                             : e[i].key == DK_KEY_CUDA ? DK_PROV_COMPOSITE
                             : e[i].key == DK_KEY_CPU  ? DK_PROV_KERNEL
                                                       : (dk_provenance)-1;
        if (want == (dk_provenance)-1) continue;
        assert_string_equal(dk_provenance_name(e[i].provenance), dk_provenance_name(want));
        checked++;
    }
    assert_int_equal(checked, 3);

    assert_ok(dk_unregister(comp));
    assert_string_equal(RUN(dcomp, CUDA, &st), "");
    assert_int_equal(st, DK_ENOTIMPL);
    assert_string_equal(dk_last_error(), "dcomp: no kernel for device cuda (registered: cpu)");
    assert_ok(dk_unregister(hc));
}

static void fallback_serves_only_where_there_is_neither_kernel_nor_composite(void **state)
{
    (void)state;
    dk_status st;
    dk_handle hc = REG_UNBOXED(dfb, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_handle comp = NULL, fb_cpu = NULL, fb_hip = NULL, fb_f1 = NULL;
    assert_ok(dk_op_register_composite(&dk_dfb_op, dk_kernel_unboxed((dk_fnptr)k_comp, "k_comp"), &comp));
    assert_ok(dk_register_fallback(DK_KEY_CPU, dk_kernel_boxed(dkt_boxed_log, "cpu-fallback", "fb_cpu"), &fb_cpu));
    assert_ok(dk_register_fallback(DK_KEY_HIP, dk_kernel_boxed(dkt_boxed_log, "hip-fallback", "fb_hip"), &fb_hip));
    assert_ok(dk_register_fallback(F1, dk_kernel_boxed(dkt_boxed_log, "F1-fallback", "fb_f1"), &fb_f1));

    assert_string_equal(RUN(dfb, CPU, &st), "cpu");       /* kernel beats fallback */
    assert_string_equal(RUN(dfb, HIP, &st), "composite"); /* composite beats fallback */
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(F1));
    assert_string_equal(RUN(dfb, HIP, &st), "F1-fallback"); /* fallbacks do serve functionality keys */
    dk_tls_pop(p);

    assert_ok(dk_unregister(comp));
    assert_string_equal(RUN(dfb, HIP, &st), "hip-fallback"); /* neither kernel nor composite */
    assert_int_equal(st, DK_OK);
    assert_string_equal(RUN(dfb, CUDA, &st), ""); /* nothing at all */
    assert_int_equal(st, DK_ENOTIMPL);
    assert_ok(dk_unregister(hc));
    assert_string_equal(RUN(dfb, CPU, &st), "cpu-fallback");

    assert_ok(dk_unregister(fb_f1));
    assert_ok(dk_unregister(fb_hip));
    assert_ok(dk_unregister(fb_cpu));
    assert_string_equal(RUN(dfb, CPU, &st), "");
    assert_int_equal(st, DK_ENOTIMPL);
    assert_string_equal(dk_last_error(), "dfb: no kernel for device cpu (registered: none)");
}

/* ------------------------------------------------------------------------------------------ */
/* Vendor backend keys                                                                         */

static void vendor_device_type_dispatches_to_the_vendor_key(void **state)
{
    (void)state;
    dk_status st;
    dk_key v = DK_KEY_UNDEFINED, again = DK_KEY_UNDEFINED;
    assert_ok(dk_backend_key_register("dispvendor", kDLExtDev, &v));
    assert_true(dk_key_is_backend(v));
    assert_true(v >= DK_KEY_VENDOR_FIRST);
    assert_ok(dk_backend_key_register("dispvendor", kDLExtDev, &again));
    assert_int_equal(again, v);
    assert_error(dk_backend_key_register("dispvendor2", kDLCUDA, &again), DK_EINVAL,
                 "backend 'dispvendor2': DLPack device type 2 is already served by 'cuda'");

    dk_handle hv = NULL;
    assert_ok(dk_register_device_impl(&dk_dvendor_op, v, (dk_fnptr)k_vendor, "k_vendor", &hv));
    dk_handle hc = REG_UNBOXED(dvendor, DK_KEY_CPU, k_cpu, "k_cpu");
    dkt_tensor vt, vt1, ct;
    assert_string_equal(RUN(dvendor, dkt_on(&vt, kDLExtDev, 0), &st), "vendor");
    assert_int_equal(st, DK_OK);
    assert_string_equal(RUN(dvendor, dkt_on(&ct, kDLCPU, 0), &st), "cpu");

    /* Mixed with the CPU, or two of the vendor's devices: named errors. */
    dkt_log_reset();
    dk_clear_error();
    assert_int_equal(dk_dvendor(dkt_on(&vt, kDLExtDev, 0), dkt_on(&ct, kDLCPU, 0), 0), DK_EINVAL);
    assert_string_equal(dk_last_error(), "dvendor: parameter 'b' is on cpu but 'a' is on dispvendor:0");
    assert_int_equal(dk_dvendor(dkt_on(&vt, kDLExtDev, 0), dkt_on(&vt1, kDLExtDev, 1), 0), DK_EINVAL);
    assert_string_equal(dk_last_error(), "dvendor: parameter 'b' is on dispvendor:1 but 'a' is on dispvendor:0");
    assert_string_equal(dkt_log_str(), "");

    /* Unregistered vendor kernel: the error names the vendor key. */
    assert_ok(dk_unregister(hv));
    assert_string_equal(RUN(dvendor, dkt_on(&vt, kDLExtDev, 0), &st), "");
    assert_int_equal(st, DK_ENOTIMPL);
    assert_string_equal(dk_last_error(), "dvendor: no kernel for device dispvendor (registered: cpu)");
    assert_ok(dk_unregister(hc));
}

/* ------------------------------------------------------------------------------------------ */
/* Tracing                                                                                    */

static void trace_prints_one_line_per_dispatch_step(void **state)
{
    (void)state;
    dk_handle hc = REG_UNBOXED(dtrace, DK_KEY_CPU, k_cpu, "k_cpu");
    dk_handle hf = reg(&dk_dtrace_op, F1, dk_kernel_boxed(dkt_boxed_log_redispatch, "F1", "trace_f1"));
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(F1));

    dkt_stderr_capture cap;
    dkt_stderr_begin(&cap);
    dk_dispatch_set_trace(true);
    dkt_log_reset();
    dk_status st = dk_dtrace(CPU, NULL, 0);
    dk_dispatch_set_trace(false);
    dk_status st2 = dk_dtrace(CPU, NULL, 0); /* not traced */
    char *out = dkt_stderr_end(&cap);
    dk_tls_pop(p);

    assert_int_equal(st, DK_OK);
    assert_int_equal(st2, DK_OK);
    assert_string_equal(dkt_log_str(), "F1,cpu,F1,cpu");
    assert_string_equal(out, "[dkit dispatch] dtrace keys={DispF1, cpu} -> DispF1 (kernel trace_f1)\n"
                             "[dkit dispatch] dtrace keys={cpu} -> cpu (kernel k_cpu)\n");
    free(out);
    assert_ok(dk_unregister(hf));
    assert_ok(dk_unregister(hc));
}

static void trace_reports_a_missing_kernel(void **state)
{
    (void)state;
    dkt_stderr_capture cap;
    dkt_stderr_begin(&cap);
    dk_dispatch_set_trace(true);
    dk_status st = dk_dtrace(HIP, NULL, 0);
    dk_dispatch_set_trace(false);
    char *out = dkt_stderr_end(&cap);
    assert_int_equal(st, DK_ENOTIMPL);
    assert_string_equal(out, "[dkit dispatch] dtrace keys={hip} -> hip (missing -)\n");
    free(out);
}

/* DKIT_DISPATCH_TRACE is read when libdkit loads, so it takes a fresh process: this executable
 * again, with --trace-child, which makes one call and exits. */
static int trace_child(void)
{
    dkt_tensor t;
    if (dk_op_register(&dk_dtrace_op, DK_KEY_CPU, dk_kernel_unboxed((dk_fnptr)k_cpu, "k_cpu"), NULL)) return 2;
    return dk_dtrace(dkt_on(&t, kDLCPU, 0), NULL, 0) == DK_OK ? 0 : 3;
}

static char *run_trace_child(const char *env_value)
{
    char exe[1024], cmd[1200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    snprintf(cmd, sizeof cmd, "DKIT_DISPATCH_TRACE=%s '%s' --trace-child 2>&1", env_value, exe);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *out = calloc(1, 4096);
    assert_non_null(out);
    size_t got = fread(out, 1, 4095, p);
    out[got] = '\0';
    assert_int_equal(pclose(p), 0);
    return out;
}

static void trace_env_variable_turns_tracing_on_at_load(void **state)
{
    (void)state;
    char *out = run_trace_child("1");
    assert_string_equal(out, "[dkit dispatch] dtrace keys={cpu} -> cpu (kernel k_cpu)\n");
    free(out);
    out = run_trace_child("0");
    assert_string_equal(out, "");
    free(out);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--trace-child") == 0) return trace_child();
    const struct CMUnitTest tests[] = {
        dkt_test(functionality_kernel_beats_backend_kernel),
        dkt_test(higher_functionality_key_beats_lower),
        dkt_test(backend_keys_rank_hip_over_cuda_over_cpu),
        dkt_test(fallthrough_per_op_goes_to_the_next_key),
        dkt_test(fallthrough_as_a_key_fallback_serves_every_op_without_a_kernel),
        dkt_test(two_functionality_kernels_redispatch_in_order_to_the_backend),
        dkt_test(tls_include_and_exclude_steer_dispatch),
        dkt_test(excluding_the_backend_leaves_no_key),
        dkt_test(tls_include_is_invisible_to_other_threads),
        dkt_test(composite_serves_backends_without_a_kernel_only),
        dkt_test(fallback_serves_only_where_there_is_neither_kernel_nor_composite),
        dkt_test(vendor_device_type_dispatches_to_the_vendor_key),
        dkt_test(trace_prints_one_line_per_dispatch_step),
        dkt_test(trace_reports_a_missing_kernel),
        dkt_test(trace_env_variable_turns_tracing_on_at_load),
    };
    return cmocka_run_group_tests(tests, group_setup, dkt_group_release_warnings);
}
