/*
 * test_table.c — introspection: dk_op_table and dk_op_dump show every claimed key of an op with
 * where its kernel came from (kernel, composite, fallback, fallthrough, missing).
 */
#define DKT_DEFINE_PROBE
#include "dk_test.h"

#define TOP_ARGS(X)  \
    X(TENSOR, a)     \
    X(OPT_TENSOR, b) \
    X(INT, n)

DK_DECLARE_OP(top, TOP_ARGS)
DK_DEFINE_OP(top, TOP_ARGS)
{
    (void)a, (void)b, (void)n;
    return DK_OK;
}

DK_DECLARE_OP(bare, TOP_ARGS)
DK_DEFINE_OP(bare, TOP_ARGS)
{
    (void)a, (void)b, (void)n;
    return DK_OK;
}

DKT_PROBE_KERNEL(top_cpu, "cpu")

static dk_key F1, F2, F3, V;

static int group_setup(void **state)
{
    dkt_group_capture_warnings(state);
    if (dk_functionality_key_register("TabF1", &F1) || dk_functionality_key_register("TabF2", &F2) ||
        dk_functionality_key_register("TabF3", &F3) || dk_backend_key_register("tabvendor", 20, &V))
        return -1;
    return 0;
}

static void table_and_dump_label_every_provenance(void **state)
{
    (void)state;
    dk_handle h[6];
    assert_ok(dk_op_register(&dk_top_op, DK_KEY_CPU, dk_kernel_unboxed((dk_fnptr)top_cpu, "top_cpu"), &h[0]));
    assert_ok(dk_op_register(&dk_top_op, DK_KEY_HIP, dk_kernel_boxed(dkt_boxed_log, "hip", "top_hip"), &h[1]));
    assert_ok(
        dk_op_register_composite(&dk_top_op, dk_kernel_boxed(dkt_boxed_log, "composite", "top_composite"), &h[2]));
    assert_ok(dk_op_register(&dk_top_op, F1, dk_kernel_fallthrough(), &h[3]));
    assert_ok(dk_register_fallback(F2, dk_kernel_boxed(dkt_boxed_log, "F2", "fb_f2"), &h[4]));
    assert_ok(dk_register_fallback(F3, dk_kernel_fallthrough(), &h[5]));

    static const struct {
        const char *key;
        dk_provenance prov;
        const char *kernel;
        bool boxed;
    } want[] = {
        {"Profile", DK_PROV_FALLBACK, "dk_profile", true},
        {"TabF3", DK_PROV_FALLTHROUGH, "fallthrough", false},
        {"TabF2", DK_PROV_FALLBACK, "fb_f2", true},
        {"TabF1", DK_PROV_FALLTHROUGH, "fallthrough", false},
        {"tabvendor", DK_PROV_COMPOSITE, "top_composite", true},
        {"hip", DK_PROV_KERNEL, "top_hip", true},
        {"cuda", DK_PROV_COMPOSITE, "top_composite", true},
        {"cpu", DK_PROV_KERNEL, "top_cpu", false},
    };
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_top_op, e, DK_NUM_KEYS);
    assert_int_equal(n, DK_COUNTOF(want));
    for (int i = 0; i < n; i++) {
        assert_string_equal(dk_key_name(e[i].key), want[i].key);
        assert_string_equal(dk_provenance_name(e[i].provenance), dk_provenance_name(want[i].prov));
        assert_string_equal(e[i].kernel_name, want[i].kernel);
        assert_int_equal(e[i].boxed, want[i].boxed);
    }

    char *dump = dk_op_dump(&dk_top_op);
    assert_non_null(dump);
    assert_string_equal(dump, "dkit::top(Tensor a, Tensor? b, int n) -> ()\n"
                              "  key          provenance   kernel\n"
                              "  Profile      fallback     dk_profile (boxed)\n"
                              "  TabF3        fallthrough  -\n"
                              "  TabF2        fallback     fb_f2 (boxed)\n"
                              "  TabF1        fallthrough  -\n"
                              "  tabvendor    composite    top_composite (boxed)\n"
                              "  hip          kernel       top_hip (boxed)\n"
                              "  cuda         composite    top_composite (boxed)\n"
                              "  cpu          kernel       top_cpu\n");
    dk_free(dump);

    for (int i = 5; i >= 0; i--) assert_ok(dk_unregister(h[i]));
}

static void dump_shows_missing_keys(void **state)
{
    (void)state;
    char *dump = dk_op_dump(&dk_bare_op);
    assert_non_null(dump);
    assert_string_equal(dump, "dkit::bare(Tensor a, Tensor? b, int n) -> ()\n"
                              "  key          provenance   kernel\n"
                              "  Profile      fallback     dk_profile (boxed)\n"
                              "  TabF3        missing      -\n"
                              "  TabF2        missing      -\n"
                              "  TabF1        missing      -\n"
                              "  tabvendor    missing      -\n"
                              "  hip          missing      -\n"
                              "  cuda         missing      -\n"
                              "  cpu          missing      -\n");
    dk_free(dump);
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_bare_op, e, DK_NUM_KEYS);
    assert_int_equal(n, 8);
    assert_int_equal(e[7].key, DK_KEY_CPU);
    assert_int_equal(e[7].provenance, DK_PROV_MISSING);
    assert_null(e[7].kernel_name);
    assert_false(e[7].boxed);
}

static void unclaimed_key_with_a_kernel_is_shown(void **state)
{
    (void)state;
    /* Key 45 is unclaimed but this op has a kernel there: shown under its slot name. */
    dk_handle h;
    assert_ok(dk_op_register(&dk_bare_op, 45, dk_kernel_boxed(dkt_boxed_log, "k45", "k45"), &h));
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_bare_op, e, DK_NUM_KEYS);
    assert_int_equal(n, 9);
    assert_int_equal(e[1].key, 45);
    assert_string_equal(dk_key_name(e[1].key), "key45");
    assert_int_equal(e[1].provenance, DK_PROV_KERNEL);
    assert_ok(dk_unregister(h));
    assert_int_equal(dk_op_table(&dk_bare_op, e, DK_NUM_KEYS), 8);
}

static void table_writes_at_most_max_entries(void **state)
{
    (void)state;
    dk_table_entry e[4];
    memset(e, 0xab, sizeof e);
    int n = dk_op_table(&dk_bare_op, e, 2);
    assert_int_equal(n, 8); /* the full count */
    assert_int_equal(e[0].key, DK_KEY_PROFILE);
    assert_int_equal(e[1].key, F3);
    unsigned char canary[sizeof e[2]];
    memset(canary, 0xab, sizeof canary);
    assert_memory_equal(&e[2], canary, sizeof canary);
    assert_int_equal(dk_op_table(&dk_bare_op, NULL, 0), 8);
}

static void provenance_names(void **state)
{
    (void)state;
    assert_string_equal(dk_provenance_name(DK_PROV_MISSING), "missing");
    assert_string_equal(dk_provenance_name(DK_PROV_KERNEL), "kernel");
    assert_string_equal(dk_provenance_name(DK_PROV_COMPOSITE), "composite");
    assert_string_equal(dk_provenance_name(DK_PROV_FALLBACK), "fallback");
    assert_string_equal(dk_provenance_name(DK_PROV_FALLTHROUGH), "fallthrough");
    assert_string_equal(dk_provenance_name((dk_provenance)77), "?");
}

static void table_matches_what_dispatch_does(void **state)
{
    (void)state;
    /* The probe op (dk_test.h): whatever the table says serves cpu is what a call runs. */
    dk_handle h1, h2;
    assert_ok(dk_op_register(&dk_probe_op, DK_KEY_CPU, dk_kernel_boxed(dkt_boxed_log, "first", "first"), &h1));
    assert_ok(dk_op_register(&dk_probe_op, DK_KEY_CPU, dk_kernel_boxed(dkt_boxed_log, "second", "second"), &h2));
    dkt_tensor t;
    dk_status st;
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_probe_op, e, DK_NUM_KEYS);
    assert_string_equal(e[n - 1].kernel_name, "second");
    assert_string_equal(dkt_probe_run(dkt_on(&t, kDLCPU, 0), NULL, &st), "second");
    assert_ok(dk_unregister(h2));
    n = dk_op_table(&dk_probe_op, e, DK_NUM_KEYS);
    assert_string_equal(e[n - 1].kernel_name, "first");
    assert_string_equal(dkt_probe_run(&t.t, NULL, &st), "first");
    assert_ok(dk_unregister(h1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(table_and_dump_label_every_provenance),
        dkt_test(dump_shows_missing_keys),
        dkt_test(unclaimed_key_with_a_kernel_is_shown),
        dkt_test(table_writes_at_most_max_entries),
        dkt_test(provenance_names),
        dkt_test(table_matches_what_dispatch_does),
    };
    return cmocka_run_group_tests(tests, group_setup, dkt_group_release_warnings);
}
