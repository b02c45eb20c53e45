/* test_keys.c — key names, key sets, run-time key slots and the thread-local include/exclude sets. */
#include "dk_test.h"

static void builtin_key_names_and_lookup(void **state)
{
    (void)state;
    assert_string_equal(dk_key_name(DK_KEY_CPU), "cpu");
    assert_string_equal(dk_key_name(DK_KEY_CUDA), "cuda");
    assert_string_equal(dk_key_name(DK_KEY_HIP), "hip");
    assert_string_equal(dk_key_name(DK_KEY_PROFILE), "Profile");
    assert_string_equal(dk_key_name(DK_KEY_VENDOR_LAST), "key19");
    assert_string_equal(dk_key_name(DK_KEY_FUNC_LAST), "key55");
    assert_string_equal(dk_key_name(DK_KEY_UNDEFINED), "key0");
    assert_string_equal(dk_key_name(-1), "key?");
    assert_string_equal(dk_key_name(DK_NUM_KEYS), "key?");

    dk_key k = -1;
    assert_ok(dk_key_lookup("cuda", &k));
    assert_int_equal(k, DK_KEY_CUDA);
    assert_ok(dk_key_lookup("Profile", &k));
    assert_int_equal(k, DK_KEY_PROFILE);
    k = -1;
    assert_error(dk_key_lookup("nope", &k), DK_ENOENT, "no dispatch key named 'nope'");
    assert_int_equal(k, -1);
    /* Unclaimed slots' display names are not lookup names. */
    assert_error(dk_key_lookup("key40", &k), DK_ENOENT, "no dispatch key named 'key40'");
}

static void keyset_priority_helpers(void **state)
{
    (void)state;
    dk_keyset ks = DK_KEYSET(DK_KEY_CPU) | DK_KEYSET(DK_KEY_CUDA) | DK_KEYSET(40);
    assert_int_equal(dk_keyset_highest(ks), 40);
    assert_int_equal(dk_keyset_highest(0), DK_KEY_UNDEFINED);
    assert_int_equal(dk_keyset_highest(DK_KEYSET(63)), 63);
    assert_true(dk_keyset_has(ks, DK_KEY_CUDA));
    assert_false(dk_keyset_has(ks, DK_KEY_HIP));
    assert_int_equal(dk_keyset_below(ks, 40), DK_KEYSET(DK_KEY_CPU) | DK_KEYSET(DK_KEY_CUDA));
    assert_int_equal(dk_keyset_below(ks, DK_KEY_CUDA), DK_KEYSET(DK_KEY_CPU));
    assert_int_equal(dk_keyset_below(ks, DK_KEY_CPU), 0);
    /* Every backend key, and nothing else. */
    for (dk_key k = 0; k < DK_NUM_KEYS; k++) {
        assert_int_equal(dk_keyset_has(DK_BACKEND_KEYS, k), k >= DK_KEY_CPU && k <= DK_KEY_BACKEND_LAST);
        assert_int_equal(dk_key_is_backend(k), k >= DK_KEY_CPU && k <= DK_KEY_BACKEND_LAST);
    }
    /* Layout invariants the dispatcher relies on. */
    assert_true(DK_KEY_FUNC_FIRST > DK_KEY_BACKEND_LAST);
    assert_true(DK_KEY_PROFILE > DK_KEY_FUNC_LAST);
    assert_true(DK_KEY_PROFILE < DK_NUM_KEYS);
}

static void keyset_str_lists_highest_first_and_truncates_safely(void **state)
{
    (void)state;
    char buf[64];
    assert_string_equal(dk_keyset_str(DK_KEYSET(DK_KEY_PROFILE) | DK_KEYSET(DK_KEY_CPU), buf, sizeof buf),
                        "{Profile, cpu}");
    assert_string_equal(dk_keyset_str(0, buf, sizeof buf), "{}");
    assert_string_equal(dk_keyset_str(DK_KEYSET(DK_KEY_CUDA) | DK_KEYSET(45), buf, sizeof buf), "{key45, cuda}");
    char small[16];
    memset(small, 'x', sizeof small);
    dk_keyset_str(DK_KEYSET(DK_KEY_PROFILE) | DK_KEYSET(DK_KEY_CPU), small, 6);
    assert_int_equal(strlen(small), 5);
    assert_memory_equal(small, "{Prof", 5);
    assert_int_equal(small[6], 'x');
    /* n == 0 writes nothing */
    dk_keyset_str(DK_KEYSET(DK_KEY_CPU), small, 0);
    assert_int_equal(small[0], '{');
}

static void functionality_keys_are_claimed_in_increasing_priority(void **state)
{
    (void)state;
    dk_key a = dkt_func_key("KeysTestA");
    dk_key b = dkt_func_key("KeysTestB");
    assert_true(b > a);
    assert_true(a > DK_KEY_BACKEND_LAST);
    assert_true(b < DK_KEY_PROFILE);
    /* same name, same key */
    assert_int_equal(dkt_func_key("KeysTestA"), a);
    assert_string_equal(dk_key_name(b), "KeysTestB");
    dk_key found;
    assert_ok(dk_key_lookup("KeysTestB", &found));
    assert_int_equal(found, b);
    /* Profile is a functionality key too: claiming its name returns it */
    dk_key p;
    assert_ok(dk_functionality_key_register("Profile", &p));
    assert_int_equal(p, DK_KEY_PROFILE);
}

static void key_names_are_validated(void **state)
{
    (void)state;
    dk_key k = -7;
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = '\0';
    assert_error(dk_functionality_key_register(NULL, &k), DK_EINVAL, "key name must be 1..63 characters");
    assert_error(dk_functionality_key_register("", &k), DK_EINVAL, "key name must be 1..63 characters");
    assert_error(dk_functionality_key_register(longname, &k), DK_EINVAL, "key name must be 1..63 characters");
    assert_error(dk_backend_key_register(NULL, 20, &k), DK_EINVAL, "backend name must be 1..63 characters");
    assert_error(dk_backend_key_register(longname, 20, &k), DK_EINVAL, "backend name must be 1..63 characters");
    assert_int_equal(k, -7);
    longname[63] = '\0'; /* 63 characters is fine */
    assert_ok(dk_functionality_key_register(longname, &k));
    assert_string_equal(dk_key_name(k), longname);
}

static void backend_keys_map_device_types(void **state)
{
    (void)state;
    assert_int_equal(dk_key_for_device_type(kDLCPU), DK_KEY_CPU);
    assert_int_equal(dk_key_for_device_type(kDLCUDAHost), DK_KEY_CPU);
    assert_int_equal(dk_key_for_device_type(kDLROCMHost), DK_KEY_CPU);
    assert_int_equal(dk_key_for_device_type(kDLCUDA), DK_KEY_CUDA);
    assert_int_equal(dk_key_for_device_type(kDLCUDAManaged), DK_KEY_CUDA);
    assert_int_equal(dk_key_for_device_type(kDLROCM), DK_KEY_HIP);
    assert_int_equal(dk_key_for_device_type(kDLVulkan), DK_KEY_UNDEFINED);
    assert_int_equal(dk_key_for_device_type(-1), DK_KEY_UNDEFINED);
    assert_int_equal(dk_key_for_device_type(32), DK_KEY_UNDEFINED);
    assert_int_equal(dk_key_for_device_type(INT32_MAX), DK_KEY_UNDEFINED);

    dk_key k1 = -1, k2 = -2;
    assert_ok(dk_backend_key_register("keysvendor", 21, &k1));
    assert_true(k1 >= DK_KEY_VENDOR_FIRST && k1 <= DK_KEY_VENDOR_LAST);
    assert_ok(dk_backend_key_register("keysvendor", 21, &k2)); /* loaded twice */
    assert_int_equal(k1, k2);
    assert_int_equal(dk_key_for_device_type(21), k1);
    assert_string_equal(dk_key_name(k1), "keysvendor");
    assert_ok(dk_key_lookup("keysvendor", &k2));
    assert_int_equal(k2, k1);
}

static void backend_key_register_refuses_taken_or_invalid_device_types(void **state)
{
    (void)state;
    dk_key k = -5;
    assert_error(dk_backend_key_register("thief", kDLCPU, &k), DK_EINVAL,
                 "backend 'thief': DLPack device type 1 is already served by 'cpu'");
    assert_error(dk_backend_key_register("thief", kDLCUDAManaged, &k), DK_EINVAL,
                 "backend 'thief': DLPack device type 13 is already served by 'cuda'");
    assert_error(dk_backend_key_register("thief", 32, &k), DK_EINVAL,
                 "backend 'thief': DLPack device type 32 is outside [0, 32)");
    assert_error(dk_backend_key_register("thief", -1, &k), DK_EINVAL,
                 "backend 'thief': DLPack device type -1 is outside [0, 32)");
    assert_int_equal(k, -5);
    assert_error(dk_key_lookup("thief", &k), DK_ENOENT, "no dispatch key named 'thief'");

    dk_key v;
    assert_ok(dk_backend_key_register("keysvendor2", 22, &v));
    assert_error(dk_backend_key_register("keysvendor2", 23, &k), DK_EINVAL,
                 "backend 'keysvendor2' is already registered for another device type");
    assert_error(dk_backend_key_register("other", 22, &k), DK_EINVAL,
                 "backend 'other': DLPack device type 22 is already served by 'keysvendor2'");
    assert_int_equal(dk_key_for_device_type(23), DK_KEY_UNDEFINED);
    /* A built-in backend's name with its own device type is the built-in key. */
    assert_ok(dk_backend_key_register("cuda", kDLCUDA, &k));
    assert_int_equal(k, DK_KEY_CUDA);
}

static void tls_include_exclude_push_and_pop(void **state)
{
    (void)state;
    const dk_keyset F1 = DK_KEYSET(40), F2 = DK_KEYSET(41), CPU = DK_KEYSET(DK_KEY_CPU);
    dk_tls_state s0 = dk_tls_get();
    assert_int_equal(s0.included, 0);
    assert_int_equal(s0.excluded, 0);
    assert_int_equal(dk_tls_apply(CPU), CPU);

    dk_tls_state p1 = dk_tls_push_include(F1);
    assert_int_equal(p1.included, 0);
    assert_int_equal(dk_tls_get().included, F1);
    assert_int_equal(dk_tls_apply(CPU), CPU | F1);

    dk_tls_state p2 = dk_tls_push_include(F2); /* nesting adds */
    assert_int_equal(p2.included, F1);
    assert_int_equal(dk_tls_apply(CPU), CPU | F1 | F2);

    dk_tls_state p3 = dk_tls_push_exclude(F1); /* exclusion wins over inclusion */
    assert_int_equal(dk_tls_apply(CPU), CPU | F2);
    dk_tls_state p4 = dk_tls_push_include(F1); /* ... even when included again later */
    assert_int_equal(dk_tls_apply(CPU), CPU | F2);
    dk_tls_state p5 = dk_tls_push_exclude(CPU); /* backend keys can be excluded too */
    assert_int_equal(dk_tls_apply(CPU), F2);

    dk_tls_pop(p5);
    dk_tls_pop(p4);
    dk_tls_pop(p3);
    assert_int_equal(dk_tls_apply(CPU), CPU | F1 | F2);
    dk_tls_pop(p2);
    assert_int_equal(dk_tls_apply(CPU), CPU | F1);
    dk_tls_pop(p1);
    assert_int_equal(dk_tls_apply(CPU), CPU);
    assert_int_equal(dk_tls_get().included, 0);
    assert_int_equal(dk_tls_get().excluded, 0);
}

typedef struct {
    dk_tls_state seen_at_start;
    dk_tls_state seen_after_push;
} tls_thread_result;

static void *tls_thread(void *arg)
{
    tls_thread_result *r = arg;
    r->seen_at_start = dk_tls_get();
    dk_tls_push_exclude(DK_KEYSET(42));
    r->seen_after_push = dk_tls_get();
    return NULL;
}

static void tls_is_per_thread(void **state)
{
    (void)state;
    dk_tls_state prev = dk_tls_push_include(DK_KEYSET(40));
    tls_thread_result r;
    memset(&r, 0xff, sizeof r);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, tls_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(r.seen_at_start.included, 0);
    assert_int_equal(r.seen_at_start.excluded, 0);
    assert_int_equal(r.seen_after_push.excluded, DK_KEYSET(42));
    /* the other thread's exclude did not leak here */
    assert_int_equal(dk_tls_get().included, DK_KEYSET(40));
    assert_int_equal(dk_tls_get().excluded, 0);
    dk_tls_pop(prev);
}

/* Last: it uses up every slot of this process. */
static void slots_run_out_with_enomem(void **state)
{
    (void)state;
    char name[32];
    dk_key k, last = -1;
    dk_status st = DK_OK;
    int i;
    for (i = 0; i < 100 && st == DK_OK; i++) {
        snprintf(name, sizeof name, "fill%d", i);
        st = dk_functionality_key_register(name, &k);
        if (st == DK_OK) last = k;
    }
    assert_int_equal(st, DK_ENOMEM);
    assert_int_equal(last, DK_KEY_FUNC_LAST);
    snprintf(name, sizeof name, "fill%d", i - 1);
    char want[128];
    snprintf(want, sizeof want, "key '%s': all functionality slots are taken", name);
    assert_string_equal(dk_last_error(), want);
    /* an existing name still resolves */
    assert_ok(dk_functionality_key_register("KeysTestA", &k));

    /* Device types nobody serves yet (21 and 22 were claimed above). */
    static const int32_t types[] = {24, 25, 26, 27, 28, 29, 30, 31, 0, 4, 5, 6, 7, 8, 9, 12, 14, 15, 16, 17, 18};
    st = DK_OK;
    int32_t t = -1;
    for (size_t j = 0; j < DK_COUNTOF(types) && st == DK_OK; j++) {
        t = types[j];
        snprintf(name, sizeof name, "vend%d", (int)t);
        st = dk_backend_key_register(name, t, &k);
    }
    assert_int_equal(st, DK_ENOMEM);
    snprintf(want, sizeof want, "backend '%s': all 16 vendor backend slots are taken", name);
    assert_string_equal(dk_last_error(), want);
    assert_int_equal(dk_key_for_device_type(t), DK_KEY_UNDEFINED);
    assert_int_equal(dk_key_for_device_type(24), DK_KEY_VENDOR_FIRST + 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(builtin_key_names_and_lookup),
        cmocka_unit_test(keyset_priority_helpers),
        cmocka_unit_test(keyset_str_lists_highest_first_and_truncates_safely),
        cmocka_unit_test(functionality_keys_are_claimed_in_increasing_priority),
        cmocka_unit_test(key_names_are_validated),
        cmocka_unit_test(backend_keys_map_device_types),
        cmocka_unit_test(backend_key_register_refuses_taken_or_invalid_device_types),
        cmocka_unit_test(tls_include_exclude_push_and_pop),
        cmocka_unit_test(tls_is_per_thread),
        cmocka_unit_test(slots_run_out_with_enomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
