/*
 * test_backend.c — loading backends as shared libraries (dk_load_backend), with the fixtures of
 * tests/c/fixtures built by tests/c/rules.mk into $DK_TEST_BUILD/fixtures (the Makefile sets
 * DK_TEST_BUILD to the build directory of the flavour under test).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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
        if (b.name && strcmp(b.name, name) == 0 &&
            ((!path && !b.path) || (path && b.path && strcmp(path, b.path) == 0)))
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
    /* Note [A library loads once]: the same file by a symlink, a hard link (when the temporary
     * folder is on the fixture's file system) and a path with a detour is the same library */
    char dir[] = "/tmp/dkit-backend-XXXXXX", link_path[1200], hard_path[1200], detour[1300];
    assert_non_null(mkdtemp(dir));
    snprintf(link_path, sizeof link_path, "%s/libalias.so", dir);
    snprintf(hard_path, sizeof hard_path, "%s/libhard.so", dir);
    char *target = realpath(path, NULL); /* the fixture's path may be relative to here */
    assert_non_null(target);
    assert_int_equal(symlink(target, link_path), 0);
    free(target);
    const bool hard = link(path, hard_path) == 0;
    const char *slash = strrchr(path, '/');
    assert_non_null(slash);
    snprintf(detour, sizeof detour, "%.*s/./%s", (int)(slash - path), path, slash + 1);
    assert_ok(dk_load_backend(link_path));
    if (hard) assert_ok(dk_load_backend(hard_path));
    assert_ok(dk_load_backend(detour));
    assert_int_equal(dk_backend_count(), n);
    assert_int_equal(dkt_warning_count(), 0);
    unlink(link_path);
    if (hard) unlink(hard_path);
    rmdir(dir);
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

static void a_file_that_is_not_a_library_is_einval_refused_before_dlopen(void **state)
{
    (void)state;
    const char *path = "tests/c/fixtures/backend_good.c"; /* tests run from the repository root */
    struct stat sb;
    if (stat(path, &sb) != 0) skip();
    char want[512];
    /* Note [Refused before dlopen]: named by dkit, not by the loader (test_backend_elf.c has the
     * other cases). */
    snprintf(want, sizeof want,
             "cannot load backend '%s': not an ELF file (it does not start with the ELF magic number \\177ELF)", path);
    assert_error(dk_load_backend(path), DK_EINVAL, want);
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

/* Note [Schemas are checked at registration]: a kernel compiled against another argument list of
 * its op fails the load, and the key its entry claimed is released. */
static void backend_compiled_against_another_schema_is_eabi_and_leaves_nothing(void **state)
{
    (void)state;
    char path[1100];
    int n = dk_backend_count();
    fixture("backend_oldschema", path, sizeof path);
    dk_clear_error();
    assert_int_equal(dk_load_backend(path), DK_EABI);
    assert_non_null(strstr(dk_last_error(), "roi_align_forward: kernel 'old_roi_align_forward' was compiled against "
                                            "another argument list of the op; rebuild the backend"));
    assert_non_null(strstr(dk_last_error(), "INT pool_mode;; this dkit: "));
    dk_key k;
    assert_int_equal(dk_key_lookup("oldschema", &k), DK_ENOENT);
    assert_int_equal(dk_key_for_device_type(31), DK_KEY_UNDEFINED);
    assert_int_equal(dk_backend_count(), n);
}

/* README "The ABI promise": an op that this dkit lacks is refused by the loader, with its text. */
static void backend_naming_an_op_this_dkit_lacks_is_enoent_and_never_initialised(void **state)
{
    (void)state;
    char path[1100];
    int n = dk_backend_count();
    fixture("backend_removedop", path, sizeof path);
    dk_clear_error();
    assert_int_equal(dk_load_backend(path), DK_ENOENT);
    assert_non_null(strstr(dk_last_error(), "undefined symbol: dk_gone_op"));
    dk_key k;
    assert_int_equal(dk_key_lookup("removedop", &k), DK_ENOENT);
    assert_int_equal(dk_backend_count(), n);
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

static const char *slot_kernel(const dk_op *op, dk_key key, dk_provenance *prov)
{
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(op, e, DK_NUM_KEYS);
    for (int i = 0; i < n && i < DK_NUM_KEYS; i++)
        if (e[i].key == key) {
            *prov = e[i].provenance;
            return e[i].kernel_name;
        }
    *prov = DK_PROV_MISSING;
    return NULL;
}

static void failed_entry_point_leaves_nothing_registered(void **state)
{
    (void)state;
    char path[1100];
    fixture("backend_halfinit", path, sizeof path);
    const int n = dk_backend_count();
    dk_provenance p;
    assert_string_equal(slot_kernel(&dk_roi_align_forward_op, DK_KEY_CPU, &p), "dk_roi_align_forward_cpu");
    for (int round = 0; round < 2; round++) {
        /* an earlier, unrelated error on this thread must not become the backend's reason */
        dk_error(DK_EINDEX, "rois[3] has batch index 7, which is not an integer in [0, 2)");
        dkt_warnings_capture();
        assert_int_equal(dk_load_backend(path), DK_ERUNTIME);
        const char *msg = dk_last_error();
        if (!strstr(msg, "backend 'halfvendor'") ||
            !strstr(msg, "failed to initialise: its entry point returned "
                         "DK_ERUNTIME without a message") ||
            strstr(msg, "batch index") || strstr(msg, "failed to initialise: backend"))
            fail_msg("message: %s", msg);
        /* everything it registered is gone: the key, the device map, the object, the kernels */
        dk_key k;
        assert_int_equal(dk_key_lookup("halfvendor", &k), DK_ENOENT);
        assert_int_equal(dk_key_for_device_type(29), DK_KEY_UNDEFINED);
        assert_null(dk_backend_of_device((DLDevice){29, 0}));
        assert_int_equal(dk_backend_count(), n);
        assert_string_equal(slot_kernel(&dk_roi_align_forward_op, DK_KEY_CPU, &p), "dk_roi_align_forward_cpu");
        assert_int_equal(p, DK_PROV_KERNEL);
    }
    /* and the CPU kernel really serves again */
    float input[16] = {0}, rois[5] = {0, 0, 0, 1, 1}, output[4] = {1, 1, 1, 1};
    dkt_tensor it, rt, ot;
    assert_ok(dk_roi_align_forward(
        dkt_cpu(&it, input, DK_FLOAT32, DKT_DIMS(1, 1, 4, 4)), dkt_cpu(&rt, rois, DK_FLOAT32, DKT_DIMS(1, 5)),
        dkt_cpu(&ot, output, DK_FLOAT32, DKT_DIMS(1, 1, 2, 2)), NULL, NULL, 2, 2, 1.0, 0, DK_POOL_AVG, false));
    for (int i = 0; i < 4; i++) assert_true(output[i] == 0.0f);
}

typedef void (*counters_fn)(int32_t *, int *, int *, int *, int *, void **);

static void backend_object_serves_devices_streams_scratch_and_copies(void **state)
{
    (void)state;
    char path[1100];
    fixture("backend_object", path, sizeof path);
    assert_ok(dk_load_backend(path));
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    counters_fn counters;
    *(void **)&counters = dlsym(h, "objvendor_counters");
    assert_non_null(counters);

    const DLDevice d0 = {(DLDeviceType)28, 0}, d2 = {(DLDeviceType)28, 2}, d5 = {(DLDeviceType)28, 5};
    const dk_backend *b = dk_backend_of_device(d0);
    assert_non_null(b);
    assert_string_equal(b->name, "objvendor");
    dk_key k;
    assert_ok(dk_key_lookup("objvendor", &k));
    assert_ptr_equal(dk_backend_of_key(k), b);
    /* listed once, under its library, with its key and object */
    bool listed = false;
    for (int i = 0; i < dk_backend_count(); i++) {
        dk_backend_info bi = dk_backend_at(i);
        if (bi.backend == b) {
            assert_false(listed);
            listed = true;
            assert_string_equal(bi.path, path);
            assert_int_equal(bi.key, k);
        }
    }
    assert_true(listed);

    assert_ok(dk_device_available(d2));
    assert_error(dk_device_available(d5), DK_EINVAL, "objvendor:5: backend 'objvendor' has 3 device(s)");

    /* the device guard makes device 2 current for its scope */
    int32_t dev;
    int sync, alloc, freed, copy;
    void *stream;
    dk_device_guard g;
    assert_ok(dk_device_guard_enter(&g, d2));
    counters(&dev, &sync, &alloc, &freed, &copy, &stream);
    assert_int_equal(dev, 2);
    dk_device_guard_exit(&g);
    counters(&dev, &sync, &alloc, &freed, &copy, &stream);
    assert_int_equal(dev, 0);

    /* the thread's current stream reaches every service (Note [The current stream]) */
    void *const s1 = (void *)(uintptr_t)0x5100, *const s2 = (void *)(uintptr_t)0x5200;
    void *prev = (void *)1;
    assert_null(dk_current_stream(d2));
    assert_ok(dk_set_current_stream(d2, s1, &prev));
    assert_null(prev);
    assert_ptr_equal(dk_current_stream(d2), s1);
    assert_null(dk_current_stream(d0)); /* per device */
    void *p = NULL;
    assert_ok(dk_device_alloc(d2, 64, &p));
    assert_non_null(p);
    counters(&dev, &sync, &alloc, &freed, &copy, &stream);
    assert_ptr_equal(stream, s1);
    char host[64] = "dkit", back[64] = {0};
    assert_ok(dk_device_copy(d2, p, host, sizeof host, DK_COPY_HOST_TO_DEVICE));
    assert_ok(dk_set_current_stream(d2, s2, &prev));
    assert_ptr_equal(prev, s1);
    assert_ok(dk_device_copy(d2, back, p, sizeof back, DK_COPY_DEVICE_TO_HOST));
    counters(&dev, &sync, &alloc, &freed, &copy, &stream);
    assert_ptr_equal(stream, s2);
    assert_string_equal(back, "dkit");
    assert_ok(dk_device_synchronize(d2));
    dk_device_free(d2, p);
    counters(&dev, &sync, &alloc, &freed, &copy, &stream);
    assert_int_equal(sync, 1);
    assert_int_equal(alloc, 1);
    assert_int_equal(freed, 1);
    assert_int_equal(copy, 2);
    /* NULL goes back to the default stream */
    assert_ok(dk_set_current_stream(d2, NULL, &prev));
    assert_ptr_equal(prev, s2);
    assert_null(dk_current_stream(d2));

    /* unavailable: the reason comes from the backend, lazily */
    setenv("OBJVENDOR_UNAVAILABLE", "1", 1);
    assert_int_equal(dk_device_available(d0), DK_ERUNTIME);
    if (!strstr(dk_last_error(), "objvendor:0: backend 'objvendor' is unavailable: no objvendor driver"))
        fail_msg("message: %s", dk_last_error());
    unsetenv("OBJVENDOR_UNAVAILABLE");
    assert_ok(dk_device_available(d0));
}

static const dk_backend other_objvendor = {.abi = DK_ABI_VERSION, .name = "objvendor", .device_type = 28};
static const dk_backend wrong_abi = {.abi = 999, .name = "wrongabi", .device_type = 27};
static const dk_backend fake_cuda = {.abi = DK_ABI_VERSION, .name = "cuda", .device_type = kDLExtDev};

static void cpu_backend_object_and_registration_errors(void **state)
{
    (void)state;
    const DLDevice cpu = {kDLCPU, 0};
    const dk_backend *b = dk_backend_of_key(DK_KEY_CPU);
    assert_non_null(b);
    assert_string_equal(b->name, "cpu");
    assert_ptr_equal(dk_backend_of_device(cpu), b);
    assert_ptr_equal(dk_backend_at(0).backend, b);
    assert_ok(dk_device_available(cpu));
    assert_error(dk_device_available((DLDevice){kDLCPU, 1}), DK_EINVAL, "cpu:1: backend 'cpu' has 1 device(s)");
    void *p = NULL;
    assert_ok(dk_device_alloc(cpu, 100, &p));
    assert_int_equal((uintptr_t)p % 64, 0);
    int src[4] = {1, 2, 3, 4};
    assert_ok(dk_device_copy(cpu, p, src, sizeof src, DK_COPY_HOST_TO_DEVICE));
    assert_memory_equal(p, src, sizeof src);
    assert_ok(dk_device_synchronize(cpu));
    dk_device_free(cpu, p);
    dk_device_guard g;
    assert_ok(dk_device_guard_enter(&g, cpu)); /* no current device to switch: a no-op */
    dk_device_guard_exit(&g);
    assert_error(dk_set_current_stream(cpu, (void *)1, NULL), DK_EINVAL, "dk_set_current_stream: cpu has no streams");
    assert_error(dk_device_alloc((DLDevice){(DLDeviceType)26, 0}, 8, &p), DK_ENOTIMPL,
                 "dk_device_alloc: no dkit backend object serves device_type_26:0");

    assert_error(dk_backend_register(NULL, NULL), DK_EINVAL, "dk_backend_register: backend is NULL");
    assert_int_equal(dk_backend_register(&wrong_abi, NULL), DK_EABI);
    assert_error(dk_backend_register(&fake_cuda, NULL), DK_EINVAL,
                 "backend 'cuda': DLPack device type 12 is not the one of dkit's 'cuda' key");
    assert_ok(dk_backend_register(b, NULL)); /* the same object again: a no-op */
    /* after the objvendor test: another object for its key is refused */
    if (dk_backend_of_device((DLDevice){(DLDeviceType)28, 0}))
        assert_int_equal(dk_backend_register(&other_objvendor, NULL), DK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(builtin_cpu_backend_is_listed),
        dkt_test(good_backend_loads_and_its_kernels_are_callable),
        dkt_test(loading_the_same_backend_twice_is_a_no_op),
        dkt_test(missing_file_is_enoent_naming_the_path),
        dkt_test(a_file_that_is_not_a_library_is_einval_refused_before_dlopen),
        dkt_test(library_without_the_entry_point_is_einval_naming_the_symbol),
        dkt_test(backend_built_for_another_abi_is_eabi_and_never_initialised),
        dkt_test(failing_entry_point_reports_its_reason),
        dkt_test(backend_naming_an_op_this_dkit_lacks_is_enoent_and_never_initialised),
        dkt_test(backend_compiled_against_another_schema_is_eabi_and_leaves_nothing),
        dkt_test(failed_entry_point_leaves_nothing_registered),
        dkt_test(backend_object_serves_devices_streams_scratch_and_copies),
        dkt_test(cpu_backend_object_and_registration_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, dkt_group_release_warnings);
}
