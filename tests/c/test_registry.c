/*
 * test_registry.c — the device registry (DK_REGISTER_DEVICE_IMPL / DK_DISPATCH_DEVICE_IMPL) and
 * registration stacks: newest wins with a warning, release in any order restores, double release
 * is an error. The registry and the dispatcher are one table and must agree.
 */
#include "dk_test.h"

#define ROP_ARGS(X)    \
    X(TENSOR, a)       \
    X(OPT_TENSOR, b)   \
    X(TENSOR_OUT, out) \
    X(INT, n)          \
    X(FLOAT, s)        \
    X(BOOL, flag)

DK_DECLARE_OP(rop, ROP_ARGS)
DK_DEFINE_OP(rop, ROP_ARGS)
{
    (void)a;
    (void)b;
    (void)out;
    (void)s;
    (void)flag;
    if (n < 0) return dk_error(DK_EINVAL, "rop: n must be >= 0, got %lld", (long long)n);
    return DK_OK;
}

/* An op used only for the stacking tests. */
DK_DECLARE_OP(rstack, ROP_ARGS)
DK_DEFINE_OP(rstack, ROP_ARGS)
{
    (void)a, (void)b, (void)out, (void)n, (void)s, (void)flag;
    return DK_OK;
}

/* What the last kernel saw. */
static struct {
    const char *kernel;
    const dk_tensor *a, *b;
    dk_tensor *out;
    int64_t n;
    double s;
    bool flag;
    int calls;
} seen;

#define RK(fname)                                                                                                  \
    static dk_status fname(const dk_tensor *a, const dk_tensor *b, dk_tensor *out, int64_t n, double s, bool flag) \
    {                                                                                                              \
        seen.kernel = #fname;                                                                                      \
        seen.a = a;                                                                                                \
        seen.b = b;                                                                                                \
        seen.out = out;                                                                                            \
        seen.n = n;                                                                                                \
        seen.s = s;                                                                                                \
        seen.flag = flag;                                                                                          \
        seen.calls++;                                                                                              \
        return DK_OK;                                                                                              \
    }
RK(rop_cpu)
RK(rop_cuda)
RK(rop_f1)
RK(rop_vendor)
RK(rop_composite)
RK(k_base)
RK(k_one)
RK(k_two)
RK(k_three)

/* Registered at load time, as a kernel file would. */
DK_REGISTER_DEVICE_IMPL(rop, CPU, rop_cpu)
DK_REGISTER_DEVICE_IMPL(rop, CUDA, rop_cuda)
DK_REGISTER_DEVICE_IMPL(rstack, CPU, k_base)

static void reset_seen(void) { memset(&seen, 0, sizeof seen); }

static dk_key F1;
static int group_setup(void **state)
{
    dkt_group_capture_warnings(state);
    return dk_functionality_key_register("RegF1", &F1) == DK_OK ? 0 : -1;
}

static void register_device_impl_at_load_time_fills_the_dispatcher_table(void **state)
{
    (void)state;
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_rop_op, e, DK_NUM_KEYS);
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].key == DK_KEY_CPU || e[i].key == DK_KEY_CUDA) {
            assert_int_equal(e[i].provenance, DK_PROV_KERNEL);
            assert_false(e[i].boxed);
            assert_string_equal(e[i].kernel_name, e[i].key == DK_KEY_CPU ? "rop_cpu" : "rop_cuda");
            found++;
        }
        if (e[i].key == DK_KEY_HIP) assert_int_equal(e[i].provenance, DK_PROV_MISSING);
    }
    assert_int_equal(found, 2);
    assert_ptr_equal(dk_op_find("rop"), &dk_rop_op);
}

static void dispatch_device_impl_passes_every_argument_and_skips_non_tensors(void **state)
{
    (void)state;
    dkt_tensor at, bt, ot;
    const dk_tensor *a = dkt_on(&at, kDLCPU, 0);
    const dk_tensor *b = dkt_on(&bt, kDLCPU, 0);
    dk_tensor *out = dkt_on(&ot, kDLCPU, 0);
    int64_t n = 42;
    double s = 0.25;
    bool flag = true;
    reset_seen();
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, a, b, out, n, s, flag));
    assert_string_equal(seen.kernel, "rop_cpu");
    assert_ptr_equal(seen.a, a);
    assert_ptr_equal(seen.b, b);
    assert_ptr_equal(seen.out, out);
    assert_int_equal(seen.n, 42);
    assert_true(seen.s == 0.25);
    assert_true(seen.flag);

    /* Literals of every kind, and an optional NULL tensor. */
    reset_seen();
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, a, (const dk_tensor *)NULL, out, 3, 1.5, false));
    assert_string_equal(seen.kernel, "rop_cpu");
    assert_null(seen.b);
    assert_int_equal(seen.n, 3);
    assert_true(seen.s == 1.5);
    assert_false(seen.flag);

    /* The same call on CUDA goes to the CUDA kernel. */
    dkt_tensor ca, co;
    reset_seen();
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, dkt_on(&ca, kDLCUDA, 1), (const dk_tensor *)NULL, dkt_on(&co, kDLCUDA, 1), 5,
                                      2.0, true));
    assert_string_equal(seen.kernel, "rop_cuda");
    assert_int_equal(seen.n, 5);
}

static void registry_and_dispatcher_agree(void **state)
{
    (void)state;
    dkt_tensor at, ot;
    dk_tensor *a = dkt_on(&at, kDLCPU, 0), *out = dkt_on(&ot, kDLCPU, 0);
    const char *via_registry, *via_dispatcher;

    reset_seen();
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, a, (const dk_tensor *)NULL, out, 1, 1.0, false));
    via_registry = seen.kernel;
    assert_ok(dk_rop(a, NULL, out, 1, 1.0, false));
    via_dispatcher = seen.kernel;
    assert_string_equal(via_registry, "rop_cpu");
    assert_string_equal(via_dispatcher, "rop_cpu");

    /* A newer registration through either API is seen by both. */
    dk_handle h = NULL;
    assert_ok(dk_register_device_impl(&dk_rop_op, DK_KEY_CPU, (dk_fnptr)k_one, "k_one", &h));
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, a, (const dk_tensor *)NULL, out, 1, 1.0, false));
    assert_string_equal(seen.kernel, "k_one");
    assert_ok(dk_rop(a, NULL, out, 1, 1.0, false));
    assert_string_equal(seen.kernel, "k_one");
    assert_ok(dk_unregister(h));
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, a, (const dk_tensor *)NULL, out, 1, 1.0, false));
    assert_string_equal(seen.kernel, "rop_cpu");

    /* A composite serves the registry path too (it is the table's slot). */
    dkt_tensor ht, hot;
    assert_ok(dk_op_register_composite(&dk_rop_op, dk_kernel_unboxed((dk_fnptr)rop_composite, "rop_composite"), &h));
    reset_seen();
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, dkt_on(&ht, kDLROCM, 0), (const dk_tensor *)NULL, dkt_on(&hot, kDLROCM, 0),
                                      1, 1.0, false));
    assert_string_equal(seen.kernel, "rop_composite");
    assert_ok(dk_rop(&ht.t, NULL, &hot.t, 1, 1.0, false));
    assert_string_equal(seen.kernel, "rop_composite");
    assert_int_equal(seen.calls, 2);
    assert_ok(dk_unregister(h));
}

static void dispatch_device_impl_skips_functionality_keys_tls_and_the_check(void **state)
{
    (void)state;
    dkt_tensor at, ot;
    dk_tensor *a = dkt_on(&at, kDLCPU, 0), *out = dkt_on(&ot, kDLCPU, 0);
    dk_handle h = NULL;
    assert_ok(dk_op_register(&dk_rop_op, F1, dk_kernel_unboxed((dk_fnptr)rop_f1, "rop_f1"), &h));
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(F1));
    assert_ok(dk_rop(a, NULL, out, 1, 1.0, false));
    assert_string_equal(seen.kernel, "rop_f1");
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, a, (const dk_tensor *)NULL, out, 1, 1.0, false));
    assert_string_equal(seen.kernel, "rop_cpu");
    dk_tls_push_exclude(DK_KEYSET(DK_KEY_CPU));
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, a, (const dk_tensor *)NULL, out, 1, 1.0, false));
    assert_string_equal(seen.kernel, "rop_cpu");
    dk_tls_pop(p);
    assert_ok(dk_unregister(h));

    /* The op's check rejects n < 0; the registry path does not run it (callers validated). */
    reset_seen();
    assert_error(dk_rop(a, NULL, out, -1, 1.0, false), DK_EINVAL, "rop: n must be >= 0, got -1");
    assert_int_equal(seen.calls, 0);
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rop, a, (const dk_tensor *)NULL, out, -1, 1.0, false));
    assert_int_equal(seen.calls, 1);
}

static void dispatch_device_impl_errors(void **state)
{
    (void)state;
    dkt_tensor t0, t1, t2;
    const dk_tensor *none = NULL;
    dk_tensor *none_out = NULL;
    reset_seen();
    assert_error(DK_DISPATCH_DEVICE_IMPL(rop, none, none, none_out, 1, 1.0, false), DK_EINVAL,
                 "rop: DK_DISPATCH_DEVICE_IMPL needs at least one tensor argument");
    assert_error(DK_DISPATCH_DEVICE_IMPL(rop, dkt_on(&t0, kDLCUDA, 0), dkt_on(&t1, kDLCUDA, 1), dkt_on(&t2, kDLCUDA, 0),
                                         1, 1.0, false),
                 DK_EINVAL,
                 "rop: parameter 'dkt_on(&t1, kDLCUDA, 1)' is on cuda:1 but 'dkt_on(&t0, kDLCUDA, 0)' is on cuda:0");
    {
        const dk_tensor *a = dkt_on(&t0, kDLCPU, 0), *b = dkt_on(&t1, kDLCUDA, 0);
        dk_tensor *out = dkt_on(&t2, kDLCPU, 0);
        assert_error(DK_DISPATCH_DEVICE_IMPL(rop, a, b, out, 1, 1.0, false), DK_EINVAL,
                     "rop: parameter 'b' is on cuda:0 but 'a' is on cpu");
        b = dkt_on(&t1, kDLVulkan, 0); /* an unserved device after a served one */
        assert_error(DK_DISPATCH_DEVICE_IMPL(rop, a, b, out, 1, 1.0, false), DK_EINVAL,
                     "rop: parameter 'b' is on vulkan:0, which no loaded dkit backend serves");
        a = dkt_on(&t0, kDLROCM, 0);
        out = dkt_on(&t2, kDLROCM, 0);
        assert_error(DK_DISPATCH_DEVICE_IMPL(rop, a, none, out, 1, 1.0, false), DK_ENOTIMPL,
                     "rop: no kernel for device hip (registered: cpu, cuda)");
        a = dkt_on(&t0, kDLVulkan, 0);
        out = dkt_on(&t2, kDLVulkan, 0);
        assert_error(DK_DISPATCH_DEVICE_IMPL(rop, a, none, out, 1, 1.0, false), DK_ENOTIMPL,
                     "rop: no kernel for device vulkan:0, which no loaded dkit backend serves (registered: cpu, cuda)");
    }
    assert_int_equal(seen.calls, 0);
}

static void register_device_impl_validates_its_arguments(void **state)
{
    (void)state;
    dk_handle h = (dk_handle)(uintptr_t)1;
    assert_error(dk_register_device_impl(NULL, DK_KEY_CPU, (dk_fnptr)k_one, "k_one", &h), DK_EINVAL,
                 "dk_register_device_impl: op is NULL");
    assert_error(dk_register_device_impl(&dk_rop_op, F1, (dk_fnptr)k_one, "k_one", &h), DK_EINVAL,
                 "rop: device kernels go to backend keys; RegF1 is not one");
    assert_error(dk_register_device_impl(&dk_rop_op, DK_KEY_UNDEFINED, (dk_fnptr)k_one, "k_one", &h), DK_EINVAL,
                 "rop: device kernels go to backend keys; key0 is not one");
    assert_error(dk_register_device_impl(&dk_rop_op, 99, (dk_fnptr)k_one, "k_one", &h), DK_EINVAL,
                 "rop: device kernels go to backend keys; key? is not one");
    assert_error(dk_register_device_impl(&dk_rop_op, DK_KEY_CPU, NULL, "k_one", &h), DK_EINVAL,
                 "rop: kernel for cpu is NULL");
    assert_ptr_equal(h, (dk_handle)(uintptr_t)1); /* untouched on failure */
}

static void register_device_impl_with_another_abi_is_refused_with_a_warning(void **state)
{
    (void)state;
    dkt_warnings_capture();
    dk__register_device_impl(DK_ABI_VERSION + 998, &dk_rstack_op, DK_KEY_CUDA, (dk_fnptr)k_one, "k_one", "file.c", 12);
    assert_int_equal(dkt_warning_count(), 1);
    char want[256];
    snprintf(want, sizeof want,
             "rstack: kernel 'k_one' (file.c:12) was built for dkit ABI %u, this dkit has ABI %u; not registered",
             DK_ABI_VERSION + 998, DK_ABI_VERSION);
    assert_string_equal(dkt_warning_last(), want);
    dkt_tensor t, o;
    assert_int_equal(dk_rstack(dkt_on(&t, kDLCUDA, 0), NULL, dkt_on(&o, kDLCUDA, 0), 0, 0, false), DK_ENOTIMPL);
    /* and a bad key from a constructor is a warning too, never a crash */
    dk__register_device_impl(DK_ABI_VERSION, &dk_rstack_op, 77, (dk_fnptr)k_one, "k_one", "file.c", 13);
    assert_int_equal(dkt_warning_count(), 2);
    assert_string_equal(dkt_warning_last(), "rstack: dispatch key 77 is out of range [1, 64) (file.c:13)");
}

/* ------------------------------------------------------------------------------------------ */
/* Registration stacks                                                                        */

static const char *rstack_kernel(void)
{
    dkt_tensor t, o;
    seen.kernel = NULL;
    assert_ok(dk_rstack(dkt_on(&t, kDLCPU, 0), NULL, dkt_on(&o, kDLCPU, 0), 0, 0, false));
    const char *via_dispatcher = seen.kernel;
    seen.kernel = NULL;
    assert_ok(DK_DISPATCH_DEVICE_IMPL(rstack, &t.t, (const dk_tensor *)NULL, &o.t, 0, 0.0, false));
    assert_string_equal(seen.kernel, via_dispatcher);
    return via_dispatcher;
}

static void newest_registration_wins_with_a_warning(void **state)
{
    (void)state;
    dkt_warnings_capture();
    assert_string_equal(rstack_kernel(), "k_base");
    dk_handle h1 = NULL;
    assert_ok(dk_register_device_impl(&dk_rstack_op, DK_KEY_CPU, (dk_fnptr)k_one, "k_one", &h1));
    assert_int_equal(dkt_warning_count(), 1);
    assert_string_equal(dkt_warning_last(), "rstack: kernel 'k_one' at cpu overrides 'k_base'");
    assert_string_equal(rstack_kernel(), "k_one");

    dk_handle h2 = NULL;
    assert_ok(dk_op_register(&dk_rstack_op, DK_KEY_CPU, dk_kernel_unboxed((dk_fnptr)k_two, "k_two"), &h2));
    assert_int_equal(dkt_warning_count(), 2);
    assert_string_equal(dkt_warning_last(), "rstack: kernel 'k_two' at cpu overrides 'k_one'");
    assert_string_equal(rstack_kernel(), "k_two");

    /* Composite and fallback overrides are announced the same way. */
    dk_handle c1, c2, f1, f2;
    assert_ok(dk_op_register_composite(&dk_rstack_op, dk_kernel_unboxed((dk_fnptr)k_one, "comp_one"), &c1));
    assert_int_equal(dkt_warning_count(), 2);
    assert_ok(dk_op_register_composite(&dk_rstack_op, dk_kernel_unboxed((dk_fnptr)k_two, "comp_two"), &c2));
    assert_string_equal(dkt_warning_last(), "rstack: composite 'comp_two' at all backends overrides 'comp_one'");
    assert_ok(dk_register_fallback(F1, dk_kernel_boxed(dkt_boxed_log, "x", "fb_one"), &f1));
    assert_ok(dk_register_fallback(F1, dk_kernel_boxed(dkt_boxed_log, "x", "fb_two"), &f2));
    assert_string_equal(dkt_warning_last(), "fallback 'fb_two' at RegF1 overrides 'fb_one'");
    assert_int_equal(dkt_warning_count(), 4);

    assert_ok(dk_unregister(f1));
    assert_ok(dk_unregister(f2));
    assert_ok(dk_unregister(c2));
    assert_ok(dk_unregister(c1));
    assert_ok(dk_unregister(h2));
    assert_string_equal(rstack_kernel(), "k_one");
    assert_ok(dk_unregister(h1));
    assert_string_equal(rstack_kernel(), "k_base");
    assert_int_equal(dkt_warning_count(), 4); /* releasing warns about nothing */
}

static void release_in_any_order_restores_the_previous_registration(void **state)
{
    (void)state;
    static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    static const char *const names[3] = {"k_one", "k_two", "k_three"};
    dk_fnptr fns[3] = {(dk_fnptr)k_one, (dk_fnptr)k_two, (dk_fnptr)k_three};
    for (int o = 0; o < 6; o++) {
        dk_handle h[3];
        bool live[3] = {true, true, true};
        for (int i = 0; i < 3; i++)
            assert_ok(dk_op_register(&dk_rstack_op, DK_KEY_CPU, dk_kernel_unboxed(fns[i], names[i]), &h[i]));
        assert_string_equal(rstack_kernel(), "k_three");
        for (int j = 0; j < 3; j++) {
            int r = orders[o][j];
            assert_ok(dk_unregister(h[r]));
            live[r] = false;
            /* The newest live registration serves; with none left, the load-time kernel. */
            const char *want = "k_base";
            for (int i = 0; i < 3; i++)
                if (live[i]) want = names[i];
            assert_string_equal(rstack_kernel(), want);
        }
    }
}

static void double_release_is_an_error_not_a_crash(void **state)
{
    (void)state;
    dk_handle h = NULL;
    assert_ok(dk_op_register(&dk_rstack_op, DK_KEY_CUDA, dk_kernel_unboxed((dk_fnptr)k_one, "k_one"), &h));
    assert_ok(dk_unregister(h));
    assert_error(dk_unregister(h), DK_EINVAL, "dk_unregister: unknown or already released handle");
    assert_error(dk_unregister(NULL), DK_EINVAL, "dk_unregister: unknown or already released handle");
    int not_a_handle;
    assert_error(dk_unregister((dk_handle)&not_a_handle), DK_EINVAL,
                 "dk_unregister: unknown or already released handle");
    assert_string_equal(rstack_kernel(), "k_base");
}

static void vendor_key_kernel_via_the_registry(void **state)
{
    (void)state;
    dk_key v;
    assert_ok(dk_backend_key_register("regvendor", 25, &v));
    dk_handle h = NULL;
    assert_ok(dk_register_device_impl(&dk_rop_op, v, (dk_fnptr)rop_vendor, "rop_vendor", &h));
    dkt_tensor t, o;
    reset_seen();
    assert_ok(
        DK_DISPATCH_DEVICE_IMPL(rop, dkt_on(&t, 25, 3), (const dk_tensor *)NULL, dkt_on(&o, 25, 3), 1, 1.0, false));
    assert_string_equal(seen.kernel, "rop_vendor");
    assert_ok(dk_rop(&t.t, NULL, &o.t, 1, 1.0, false));
    assert_int_equal(seen.calls, 2);
    assert_ok(dk_unregister(h));
    assert_error(DK_DISPATCH_DEVICE_IMPL(rop, &t.t, (const dk_tensor *)NULL, &o.t, 1, 1.0, false), DK_ENOTIMPL,
                 "rop: no kernel for device regvendor (registered: cpu, cuda)");
}

#define assert_status(expr, status) assert_string_equal(dk_status_name(expr), dk_status_name(status))

/* Note [Schemas are checked at registration]: the compiled-in argument list travels with the
 * kernel and is compared with the running op's. */
static void registration_checks_the_schema_the_kernel_was_compiled_against(void **state)
{
    (void)state;
    assert_string_equal(dk_rop_signature(), "TENSOR a;OPT_TENSOR b;TENSOR_OUT out;INT n;FLOAT s;BOOL flag;");
    dk_key v;
    assert_ok(dk_backend_key_register("sigvendor", 26, &v));
    dk_handle h = NULL;
    assert_ok(DK_REGISTER_DEVICE_IMPL_AT(rop, v, rop_vendor, &h));
    dkt_tensor t, o;
    reset_seen();
    assert_ok(dk_rop(dkt_on(&t, 26, 3), NULL, dkt_on(&o, 26, 3), 1, 1.0, false));
    assert_string_equal(seen.kernel, "rop_vendor");
    assert_ok(dk_unregister(h));

    /* A backend built when rop had no `flag`, and one where `n` was a float: refused, nothing
     * registered. */
    h = NULL;
    assert_error(dk__register_device_impl_at(DK_ABI_VERSION, &dk_rop_op,
                                             "TENSOR a;OPT_TENSOR b;TENSOR_OUT out;INT n;FLOAT s;", v,
                                             (dk_fnptr)rop_vendor, "old_rop", &h),
                 DK_EABI,
                 "rop: kernel 'old_rop' was compiled against another argument list of the op; rebuild the backend "
                 "against this dkit's headers (built: TENSOR a;OPT_TENSOR b;TENSOR_OUT out;INT n;FLOAT s;; this "
                 "dkit: TENSOR a;OPT_TENSOR b;TENSOR_OUT out;INT n;FLOAT s;BOOL flag;)");
    assert_null(h);
    assert_status(dk__register_device_impl_at(DK_ABI_VERSION, &dk_rop_op,
                                              "TENSOR a;OPT_TENSOR b;TENSOR_OUT out;FLOAT n;FLOAT s;BOOL flag;", v,
                                              (dk_fnptr)rop_vendor, "other_rop", &h),
                  DK_EABI);
    assert_status(dk__register_device_impl_at(DK_ABI_VERSION, &dk_rop_op, NULL, v, (dk_fnptr)rop_vendor, "no_sig", &h),
                  DK_EABI);
    assert_error(dk__register_device_impl_at(DK_ABI_VERSION + 1, &dk_rop_op, dk_rop_signature(), v,
                                             (dk_fnptr)rop_vendor, "future_rop", &h),
                 DK_EABI, "rop: kernel 'future_rop' was built for dkit ABI 3, this dkit has ABI 2");
    assert_null(h);
    assert_status(dk_rop(&t.t, NULL, &o.t, 1, 1.0, false), DK_ENOTIMPL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(register_device_impl_at_load_time_fills_the_dispatcher_table),
        dkt_test(dispatch_device_impl_passes_every_argument_and_skips_non_tensors),
        dkt_test(registry_and_dispatcher_agree),
        dkt_test(dispatch_device_impl_skips_functionality_keys_tls_and_the_check),
        dkt_test(dispatch_device_impl_errors),
        dkt_test(register_device_impl_validates_its_arguments),
        dkt_test(register_device_impl_with_another_abi_is_refused_with_a_warning),
        dkt_test(newest_registration_wins_with_a_warning),
        dkt_test(release_in_any_order_restores_the_previous_registration),
        dkt_test(double_release_is_an_error_not_a_crash),
        dkt_test(vendor_key_kernel_via_the_registry),
        dkt_test(registration_checks_the_schema_the_kernel_was_compiled_against),
    };
    return cmocka_run_group_tests(tests, group_setup, dkt_group_release_warnings);
}
