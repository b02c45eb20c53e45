/*
 * test_backend.c — loading backends as shared libraries (dk_load_backend), with the fixtures of
 * tests/c/fixtures built by tests/c/rules.mk into $DK_TEST_BUILD/fixtures (the Makefile sets
 * DK_TEST_BUILD to the build directory of the flavour under test).
 */
#include <sys/stat.h>

#include "dk_test.h"
#include "roi_align.h"

/* The op the good fixture finds by name and serves. */
#define BPROBE_ARGS(X) \
    X(TENSOR, a)       \
    X(OPT_TENSOR, b)   \
    X(INT, n)

DK_DECLARE_OP(bprobe, BPROBE_ARGS)
DK_DEFINE_OP(bprobe, BPROBE_ARGS)
{
    (void)a, (void)b, (void)n;
    return DK_OK;
}

static char fixture_dir[1024];

static const char *fixture(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/lib%s.so", fixture_dir, name);
    return buf;
}

static int group_setup(void **state)
{
    dkt_group_capture_warnings(state);
    const char *build = getenv("DK_TEST_BUILD");
    if (!build || !build[0]) {
        fprintf(stderr, "test_backend: DK_TEST_BUILD is not set; run it through `make test-c` (or set it to the "
                        "build directory holding fixtures/)\n");
        return -1;
    }
    snprintf(fixture_dir, sizeof fixture_dir, "%s/fixtures", build);
    struct stat sb;
    if (stat(fixture_dir, &sb) != 0) {
        fprintf(stderr, "test_backend: no fixtures in %s; they are built by tests/c/rules.mk\n", fixture_dir);
        return -1;
    }
    return 0;
}

static bool backend_listed(const char *name, const char *path)
{
    for (int i = 0; i < dk_backend_count(); i++) {
        dk_backend_info b = dk_backend_at(i);
        if (b.name && strcmp(b.name, name) == 0 && ((!path && !b.path) || (path && b.path && strcmp(path, b.path) == 0)))
            return true;
    }
    return false;
}

static void builtin_cpu_backend_is_listed(void **state)
{
    (void)state;
    assert_true(dk_backend_count() >= 1);
    assert_true(backend_listed("cpu", NULL));
    dk_backend_info none = dk_backend_at(dk_backend_count());
    assert_null(none.name);
    assert_null(none.path);
    none = dk_backend_at(-1);
    assert_null(none.name);
}

static void good_backend_loads_and_its_kernels_are_callable(void **state)
{
    (void)state;
    char path[1100];
    fixture("backend_good", path, sizeof path);
    int before = dk_backend_count();
    dk_key k;
    assert_int_equal(dk_key_lookup("testvendor", &k), DK_ENOENT);

    assert_ok(dk_load_backend(path));
    assert_int_equal(dk_backend_count(), before + 1);
    assert_true(backend_listed("testvendor", path));
    dk_backend_info last = dk_backend_at(before);
    assert_string_equal(last.name, "testvendor");
    assert_string_equal(last.path, path);

    /* its key serves kDLExtDev */
    assert_ok(dk_key_lookup("testvendor", &k));
    assert_true(dk_key_is_backend(k));
    assert_int_equal(dk_key_for_device_type(kDLExtDev), k);

    /* the test's own op, through the typed entry and the registry */
    int64_t data[1] = {0};
    dkt_tensor at;
    dk_tensor *a = dkt_tensor_init(&at, data, kDLExtDev, 0, DK_INT64, DKT_DIMS(1), NULL);
    assert_ok(dk_bprobe(a, NULL, 5));
    assert_int_equal(data[0], 1005);
    assert_ok(DK_DISPATCH_DEVICE_IMPL(bprobe, (const dk_tensor *)a, (const dk_tensor *)NULL, 6));
    assert_int_equal(data[0], 1006);

    /* a core op: roi_align_forward on the vendor's device */
    float input[16] = {0}, rois[5] = {0, 0, 0, 1, 1}, output[4] = {0};
    dkt_tensor it, rt, ot;
    dk_tensor *in = dkt_tensor_init(&it, input, kDLExtDev, 0, DK_FLOAT32, DKT_DIMS(1, 1, 4, 4), NULL);
    dk_tensor *ro = dkt_tensor_init(&rt, rois, kDLExtDev, 0, DK_FLOAT32, DKT_DIMS(1, 5), NULL);
    dk_tensor *out = dkt_tensor_init(&ot, output, kDLExtDev, 0, DK_FLOAT32, DKT_DIMS(1, 1, 2, 2), NULL);
    assert_ok(dk_roi_align_forward(in, ro, out, NULL, NULL, 2, 2, 1.0, 0, DK_POOL_AVG, false));
    for (int i = 0; i < 4; i++) assert_true(output[i] == 22.0f);

    /* the dump names the vendor kernel */
    char *dump = dk_op_dump(&dk_roi_align_forward_op);
    assert_non_null(dump);
    if (!strstr(dump, "  testvendor   kernel       vendor_roi_align_forward\n")) fail_msg("dump:\n%s", dump);
    dk_free(dump);
}

static void loading_the_same_backend_twice_is_a_no_op(void **state)
{
    (void)state;
    char path[1100];
    fixture("backend_good", path, sizeof path);
    assert_ok(dk_load_backend(path)); /* loaded by the previous test, or now */
    int n = dk_backend_count();
    dkt_warnings_capture();
    assert_ok(dk_load_backend(path));
    assert_int_equal(dk_backend_count(), n);
    assert_int_equal(dkt_warning_count(), 0); /* its entry did not run again (no override warnings) */
    dk_table_entry e[DK_NUM_KEYS];
    int rows = dk_op_table(&dk_bprobe_op, e, DK_NUM_KEYS);
    dk_key k;
    assert_ok(dk_key_lookup("testvendor", &k));
    for (int i = 0; i < rows; i++)
        if (e[i].key == k) assert_string_equal(e[i].kernel_name, "vendor_bprobe");
}

static void missing_file_is_enoent_naming_the_path(void **state)
{
    (void)state;
    char path[1100], want[1300];
    fixture("does_not_exist", path, sizeof path);
    snprintf(want, sizeof want, "cannot load backend '%s': no such file", path);
    assert_error(dk_load_backend(path), DK_ENOENT, want);
}

static void a_file_that_is_not_a_library_is_enoent_with_the_loader_message(void **state)
{
    (void)state;
    const char *path = "tests/c/fixtures/backend_good.c"; /* tests run from the repository root */
    struct stat sb;
    if (stat(path, &sb) != 0) skip();
    char prefix[256];
    snprintf(prefix, sizeof prefix, "cannot load backend '%s': ", path);
    dk_clear_error();
    assert_int_equal(dk_load_backend(path), DK_ENOENT);
    assert_memory_equal(dk_last_error(), prefix, strlen(prefix));
    assert_true(strlen(dk_last_error()) > strlen(prefix)); /* dlerror's reason follows */
}

static void library_without_the_entry_point_is_einval_naming_the_symbol(void **state)
{
    (void)state;
    char path[1100], want[1400];
    int n = dk_backend_count();
    fixture("backend_noinit", path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': not a dkit backend (missing entry point dk_backend_init; define it with "
             "DK_BACKEND_ENTRY)",
             path);
    assert_error(dk_load_backend(path), DK_EINVAL, want);
    fixture("backend_plain", path, sizeof path);
    snprintf(want, sizeof want,
             "cannot load backend '%s': not a dkit backend (missing entry point dk_backend_abi_version; define it "
             "with DK_BACKEND_ENTRY)",
             path);
    assert_error(dk_load_backend(path), DK_EINVAL, want);
    assert_int_equal(dk_backend_count(), n);
}

static void backend_built_for_another_abi_is_eabi_and_never_initialised(void **state)
{
    (void)state;
    char path[1100], want[1400];
    int n = dk_backend_count();
    fixture("backend_badabi", path, sizeof path);
    snprintf(want, sizeof want, "cannot load backend '%s': built for dkit ABI 999, this dkit has ABI %u", path,
             DK_ABI_VERSION);
    assert_error(dk_load_backend(path), DK_EABI, want);
    dk_key k;
    assert_int_equal(dk_key_lookup("badabi", &k), DK_ENOENT); /* its entry did not run */
    assert_int_equal(dk_key_for_device_type(30), DK_KEY_UNDEFINED);
    assert_int_equal(dk_backend_count(), n);
    /* and again: still refused (a refused backend is not remembered as loaded) */
    assert_int_equal(dk_load_backend(path), DK_EABI);
}

static void failing_entry_point_reports_its_reason(void **state)
{
    (void)state;
    char path[1100], want[1400];
    int n = dk_backend_count();
    fixture("backend_failinit", path, sizeof path);
    snprintf(want, sizeof want, "backend 'failinit' (%s) failed to initialise: no failinit device found", path);
    assert_error(dk_load_backend(path), DK_ERUNTIME, want);
    assert_int_equal(dk_backend_count(), n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(builtin_cpu_backend_is_listed),
        dkt_test(good_backend_loads_and_its_kernels_are_callable),
        dkt_test(loading_the_same_backend_twice_is_a_no_op),
        dkt_test(missing_file_is_enoent_naming_the_path),
        dkt_test(a_file_that_is_not_a_library_is_enoent_with_the_loader_message),
        dkt_test(library_without_the_entry_point_is_einval_naming_the_symbol),
        dkt_test(backend_built_for_another_abi_is_eabi_and_never_initialised),
        dkt_test(failing_entry_point_reports_its_reason),
    };
    return cmocka_run_group_tests(tests, group_setup, dkt_group_release_warnings);
}
