/*
 * test_errors.c — statuses, the thread-local message, the dispatcher's error texts, and bad
 * input to the registration API (rejected with a status, never a crash).
 */
#define DKT_DEFINE_PROBE
#include "dk_test.h"

#define EOP_ARGS(X)    \
    X(TENSOR, a)       \
    X(TENSOR, b)       \
    X(OPT_TENSOR, c)   \
    X(TENSOR_OUT, out) \
    X(INT, n)

DK_DECLARE_OP(eop, EOP_ARGS)
DK_DEFINE_OP(eop, EOP_ARGS)
{
    (void)a, (void)b, (void)c, (void)out;
    if (n > 100) return dk_error(DK_EINDEX, "eop: n = %lld is out of range", (long long)n);
    return DK_OK;
}

static int eop_calls;
static dk_status eop_kernel(const dk_tensor *a, const dk_tensor *b, const dk_tensor *c, dk_tensor *out, int64_t n)
{
    (void)a, (void)b, (void)c, (void)out, (void)n;
    eop_calls++;
    return DK_OK;
}

DK_REGISTER_DEVICE_IMPL(eop, CPU, eop_kernel)
DK_REGISTER_DEVICE_IMPL(eop, CUDA, eop_kernel)

static dk_key F1;
static int group_setup(void **state)
{
    dkt_group_capture_warnings(state);
    return dk_functionality_key_register("ErrF1", &F1) ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Statuses and messages                                                                      */

static void status_codes_and_names(void **state)
{
    (void)state;
    assert_int_equal(DK_OK, 0);
    assert_int_equal(DK_EINVAL, 1);
    assert_int_equal(DK_ETYPE, 2);
    assert_int_equal(DK_EINDEX, 3);
    assert_int_equal(DK_ENOTIMPL, 4);
    assert_int_equal(DK_EBUFFER, 5);
    assert_int_equal(DK_ENOMEM, 6);
    assert_int_equal(DK_ENOENT, 7);
    assert_int_equal(DK_EABI, 8);
    assert_int_equal(DK_ERUNTIME, 9);
    assert_string_equal(dk_status_name(DK_OK), "DK_OK");
    assert_string_equal(dk_status_name(DK_ENOTIMPL), "DK_ENOTIMPL");
    assert_string_equal(dk_status_name(DK_ERUNTIME), "DK_ERUNTIME");
    assert_string_equal(dk_status_name(DK_STATUS_COUNT), "DK_UNKNOWN");
    assert_string_equal(dk_status_name((dk_status)-1), "DK_UNKNOWN");
}

static void error_sets_the_thread_message_and_status(void **state)
{
    (void)state;
    dk_clear_error();
    assert_string_equal(dk_last_error(), "");
    assert_int_equal(dk_last_status(), DK_OK);
    assert_int_equal(dk_error(DK_ETYPE, "x=%d %s", 3, "y"), DK_ETYPE);
    assert_string_equal(dk_last_error(), "x=3 y");
    assert_int_equal(dk_last_status(), DK_ETYPE);
    /* the previous message as an argument of the next one */
    dk_error(DK_EINVAL, "outer (%s)", dk_last_error());
    assert_string_equal(dk_last_error(), "outer (x=3 y)");
    dk_clear_error();
    assert_string_equal(dk_last_error(), "");
    assert_int_equal(dk_last_status(), DK_OK);
}

static void long_messages_are_truncated_not_overflowed(void **state)
{
    (void)state;
    char big[4096];
    memset(big, 'm', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    dk_error(DK_EINVAL, "%s", big);
    size_t n = strlen(dk_last_error());
    assert_true(n > 500 && n < sizeof big - 1);
    assert_int_equal(dk_last_error()[0], 'm');
}

static void *error_in_thread(void *arg)
{
    char *out = arg;
    snprintf(out, 64, "[%s]", dk_last_error());
    dk_error(DK_EABI, "thread message");
    return NULL;
}

static void messages_are_per_thread(void **state)
{
    (void)state;
    dk_error(DK_EINDEX, "main message");
    char seen[64] = "";
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, error_in_thread, seen), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_string_equal(seen, "[]");
    assert_string_equal(dk_last_error(), "main message");
    assert_int_equal(dk_last_status(), DK_EINDEX);
}

static void warnings_go_to_the_handler_and_default_to_stderr(void **state)
{
    (void)state;
    dkt_warnings_capture();
    dk_warn("careful: %d", 7);
    assert_int_equal(dkt_warning_count(), 1);
    assert_string_equal(dkt_warning_last(), "careful: 7");
    dk_set_warning_handler(NULL, NULL); /* back to the default */
    dkt_stderr_capture cap;
    dkt_stderr_begin(&cap);
    dk_warn("to stderr");
    char *out = dkt_stderr_end(&cap);
    assert_string_equal(out, "dkit: warning: to stderr\n");
    free(out);
    assert_int_equal(dkt_warning_count(), 1);
    dkt_warnings_capture();
}

/* ------------------------------------------------------------------------------------------ */
/* The dispatcher's errors                                                                    */

#define T(tt, type, id) dkt_on(&tt, type, id)

static void missing_kernel_names_the_op_the_device_and_the_registered_keys(void **state)
{
    (void)state;
    dkt_tensor a, b, o;
    eop_calls = 0;
    assert_error(dk_eop(T(a, kDLROCM, 0), T(b, kDLROCM, 0), NULL, T(o, kDLROCM, 0), 1), DK_ENOTIMPL,
                 "eop: no kernel for device hip (registered: cpu, cuda)");
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(F1));
    assert_error(dk_eop(T(a, kDLCPU, 0), T(b, kDLCPU, 0), NULL, T(o, kDLCPU, 0), 1), DK_ENOTIMPL,
                 "eop: no kernel for key ErrF1 (registered: cpu, cuda)");
    dk_tls_pop(p);
    assert_int_equal(eop_calls, 0);
    assert_ok(dk_eop(T(a, kDLCPU, 0), T(b, kDLCPU, 0), NULL, T(o, kDLCPU, 0), 1));
    assert_int_equal(eop_calls, 1);
}

static void mixed_devices_name_both_parameters_and_devices(void **state)
{
    (void)state;
    dkt_tensor a, b, c, o;
    eop_calls = 0;
    assert_error(dk_eop(T(a, kDLCUDA, 0), T(b, kDLCUDA, 1), NULL, T(o, kDLCUDA, 0), 1), DK_EINVAL,
                 "eop: parameter 'b' is on cuda:1 but 'a' is on cuda:0");
    assert_error(dk_eop(T(a, kDLCPU, 0), T(b, kDLCPU, 0), T(c, kDLCUDA, 0), T(o, kDLCPU, 0), 1), DK_EINVAL,
                 "eop: parameter 'c' is on cuda:0 but 'a' is on cpu");
    assert_error(dk_eop(T(a, kDLCUDA, 0), T(b, kDLCUDA, 0), NULL, T(o, kDLCPU, 0), 1), DK_EINVAL,
                 "eop: parameter 'out' is on cpu but 'a' is on cuda:0");
    /* a backend's device types may be mixed: pinned host memory is CPU memory */
    assert_ok(dk_eop(T(a, kDLCPU, 0), T(b, kDLCUDAHost, 0), NULL, T(o, kDLCPU, 0), 1));
    assert_ok(dk_eop(T(a, kDLCUDA, 0), T(b, kDLCUDAManaged, 0), NULL, T(o, kDLCUDA, 0), 1));
    /* ... but not two GPUs that way */
    assert_error(dk_eop(T(a, kDLCUDA, 0), T(b, kDLCUDAManaged, 1), NULL, T(o, kDLCUDA, 0), 1), DK_EINVAL,
                 "eop: parameter 'b' is on cuda_managed:1 but 'a' is on cuda:0");
    assert_int_equal(eop_calls, 2);
}

static void device_no_backend_serves_is_named(void **state)
{
    (void)state;
    dkt_tensor a, b, o;
    eop_calls = 0;
    assert_error(dk_eop(T(a, kDLVulkan, 0), T(b, kDLVulkan, 0), NULL, T(o, kDLVulkan, 0), 1), DK_EINVAL,
                 "eop: parameter 'a' is on vulkan:0, which no loaded dkit backend serves");
    assert_error(dk_eop(T(a, kDLCPU, 0), T(b, kDLMetal, 1), NULL, T(o, kDLCPU, 0), 1), DK_EINVAL,
                 "eop: parameter 'b' is on metal:1, which no loaded dkit backend serves");
    assert_error(dk_eop(T(a, kDLCPU, 0), T(b, kDLCPU, 0), NULL, T(o, (DLDeviceType)31, 2), 1), DK_EINVAL,
                 "eop: parameter 'out' is on device_type_31:2, which no loaded dkit backend serves");
    assert_int_equal(eop_calls, 0);
}

static void null_required_tensor_is_a_type_error(void **state)
{
    (void)state;
    dkt_tensor a, b, o;
    eop_calls = 0;
    assert_error(dk_eop(NULL, T(b, kDLCPU, 0), NULL, T(o, kDLCPU, 0), 1), DK_ETYPE,
                 "eop: parameter 'a' is a required tensor but got none");
    assert_error(dk_eop(T(a, kDLCPU, 0), T(b, kDLCPU, 0), NULL, NULL, 1), DK_ETYPE,
                 "eop: parameter 'out' is a required tensor but got none");
    /* on the slow path too (mixed devices before the NULL) */
    assert_error(dk_eop(T(a, kDLCPU, 0), T(b, kDLCUDA, 0), NULL, NULL, 1), DK_ETYPE,
                 "eop: parameter 'out' is a required tensor but got none");
    assert_int_equal(eop_calls, 0);
}

static void check_body_errors_are_returned_and_stop_the_call(void **state)
{
    (void)state;
    dkt_tensor a, b, o;
    eop_calls = 0;
    assert_error(dk_eop(T(a, kDLCPU, 0), T(b, kDLCPU, 0), NULL, T(o, kDLCPU, 0), 101), DK_EINDEX,
                 "eop: n = 101 is out of range");
    assert_int_equal(eop_calls, 0);
}

static void probe_op_from_the_shared_header_reports_the_same_way(void **state)
{
    (void)state;
    dkt_tensor a;
    dk_status st;
    dkt_probe_run(dkt_on(&a, kDLCPU, 0), NULL, &st);
    assert_int_equal(st, DK_ENOTIMPL);
    assert_string_equal(dk_last_error(), "probe: no kernel for device cpu (registered: none)");
    assert_error(dk_probe(&a.t, NULL, -1), DK_EINVAL, "probe: n must be >= 0, got -1");
}

/* ------------------------------------------------------------------------------------------ */
/* Bad input to registration                                                                  */

static dk_status boxed_noop(const dk_op *op, dk_keyset ks, dk_stack *s, void *ctx)
{
    (void)op, (void)ks, (void)s, (void)ctx;
    return DK_OK;
}

static void registration_rejects_bad_input(void **state)
{
    (void)state;
    dk_handle h = (dk_handle)(uintptr_t)0x1234;
    dk_kernel good = dk_kernel_unboxed((dk_fnptr)eop_kernel, "good");
    dk_kernel empty = {NULL, NULL, NULL, "empty", 0};

    assert_error(dk_op_register(NULL, DK_KEY_CPU, good, &h), DK_EINVAL, "dk_op_register: op is NULL");
    assert_error(dk_op_register_composite(NULL, good, &h), DK_EINVAL, "dk_op_register_composite: op is NULL");
    assert_error(dk_op_register(&dk_eop_op, DK_KEY_UNDEFINED, good, &h), DK_EINVAL,
                 "eop: dispatch key 0 is out of range [1, 64)");
    assert_error(dk_op_register(&dk_eop_op, -3, good, &h), DK_EINVAL, "eop: dispatch key -3 is out of range [1, 64)");
    assert_error(dk_op_register(&dk_eop_op, DK_NUM_KEYS, good, &h), DK_EINVAL,
                 "eop: dispatch key 64 is out of range [1, 64)");
    assert_error(dk_op_register(&dk_eop_op, DK_KEY_CPU, empty, &h), DK_EINVAL,
                 "eop: a kernel needs a typed or a boxed function");
    assert_error(dk_op_register_composite(&dk_eop_op, empty, &h), DK_EINVAL,
                 "eop: a kernel needs a typed or a boxed function");
    assert_error(dk_op_register_composite(&dk_eop_op, dk_kernel_fallthrough(), &h), DK_EINVAL,
                 "eop: a composite cannot be a fallthrough");
    assert_error(dk_register_fallback(DK_KEY_CPU, good, &h), DK_EINVAL,
                 "fallback at cpu: fallbacks serve every op and must be boxed");
    assert_error(dk_register_fallback(DK_KEY_CPU, empty, &h), DK_EINVAL,
                 "dk_register_fallback: a kernel needs a typed or a boxed function");
    assert_error(dk_register_fallback(0, dk_kernel_boxed(boxed_noop, NULL, "b"), &h), DK_EINVAL,
                 "dk_register_fallback: dispatch key 0 is out of range [1, 64)");
    assert_error(dk_register_fallback(1000, dk_kernel_boxed(boxed_noop, NULL, "b"), &h), DK_EINVAL,
                 "dk_register_fallback: dispatch key 1000 is out of range [1, 64)");
    assert_ptr_equal(h, (dk_handle)(uintptr_t)0x1234); /* never written on failure */

    /* none of that changed the op */
    dkt_tensor a, b, o;
    eop_calls = 0;
    assert_ok(dk_eop(T(a, kDLCPU, 0), T(b, kDLCPU, 0), NULL, T(o, kDLCPU, 0), 1));
    assert_int_equal(eop_calls, 1);
    assert_error(dk_eop(T(a, kDLROCM, 0), T(b, kDLROCM, 0), NULL, T(o, kDLROCM, 0), 1), DK_ENOTIMPL,
                 "eop: no kernel for device hip (registered: cpu, cuda)");
}

static void registration_accepts_odd_but_valid_input(void **state)
{
    (void)state;
    /* No name, no handle wanted: fine. The slot is labelled "(unnamed)". */
    assert_ok(dk_op_register(&dk_eop_op, DK_KEY_HIP, dk_kernel_boxed(boxed_noop, NULL, NULL), NULL));
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_eop_op, e, DK_NUM_KEYS);
    bool seen = false;
    for (int i = 0; i < n; i++)
        if (e[i].key == DK_KEY_HIP) {
            assert_string_equal(e[i].kernel_name, "(unnamed)");
            seen = true;
        }
    assert_true(seen);
    /* The kernel's name is copied: the caller's buffer may go away. */
    char name[16] = "transient";
    dk_handle h;
    assert_ok(dk_op_register(&dk_eop_op, 50, dk_kernel_boxed(boxed_noop, NULL, name), &h));
    memset(name, 'X', sizeof name - 1);
    n = dk_op_table(&dk_eop_op, e, DK_NUM_KEYS);
    for (int i = 0; i < n; i++)
        if (e[i].key == 50) assert_string_equal(e[i].kernel_name, "transient");
    assert_ok(dk_unregister(h));
}

static void backend_loading_rejects_empty_paths(void **state)
{
    (void)state;
    assert_error(dk_load_backend(NULL), DK_EINVAL, "dk_load_backend: empty path");
    assert_error(dk_load_backend(""), DK_EINVAL, "dk_load_backend: empty path");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(status_codes_and_names),
        dkt_test(error_sets_the_thread_message_and_status),
        dkt_test(long_messages_are_truncated_not_overflowed),
        dkt_test(messages_are_per_thread),
        dkt_test(warnings_go_to_the_handler_and_default_to_stderr),
        dkt_test(missing_kernel_names_the_op_the_device_and_the_registered_keys),
        dkt_test(mixed_devices_name_both_parameters_and_devices),
        dkt_test(device_no_backend_serves_is_named),
        dkt_test(null_required_tensor_is_a_type_error),
        dkt_test(check_body_errors_are_returned_and_stop_the_call),
        dkt_test(probe_op_from_the_shared_header_reports_the_same_way),
        dkt_test(registration_rejects_bad_input),
        dkt_test(registration_accepts_odd_but_valid_input),
        dkt_test(backend_loading_rejects_empty_paths),
    };
    return cmocka_run_group_tests(tests, group_setup, dkt_group_release_warnings);
}
