/*
 * test_cpu_fallback.c — the CPU fallback (Note [The CPU fallback] in dk_cpu_fallback.h) for a
 * device whose memory the CPU cannot read: its "device pointers" are host addresses moved by
 * DEV_OFF, so a kernel that touched one directly would crash, and only the backend's copies
 * (which count what they move) reach the data. Each op's result through the fallback must equal
 * the CPU kernel's on the same values.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "box_iou.h"
#include "dk_cpu_fallback.h"
#include "dk_test.h"
#include "nms.h"
#include "roi_align.h"

#define DEV_OFF ((uintptr_t)1 << 46)
#define DEV_TYPE 20 /* an unused DLPack device type: this test's accelerator */

static void *dev(void *host) { return (void *)((uintptr_t)host + DEV_OFF); }
static void *real(const void *device) { return (void *)((uintptr_t)device - DEV_OFF); }

static size_t copied[3], syncs;

static dk_status fb_copy(void *ctx, int32_t device, void *dst, const void *src, size_t bytes, dk_copy_kind kind,
                         void *stream)
{
    (void)ctx, (void)device, (void)stream;
    assert_true(kind == DK_COPY_DEVICE_TO_HOST || kind == DK_COPY_HOST_TO_DEVICE);
    memcpy(kind == DK_COPY_HOST_TO_DEVICE ? real(dst) : dst, kind == DK_COPY_DEVICE_TO_HOST ? real(src) : src, bytes);
    copied[kind] += bytes;
    return DK_OK;
}

static dk_status fb_sync(void *ctx, int32_t device, void *stream)
{
    (void)ctx, (void)device, (void)stream;
    syncs++;
    return DK_OK;
}

static const dk_backend fbdev = {
    .abi = DK_ABI_VERSION, .name = "fbdev", .device_type = DEV_TYPE, .copy = fb_copy, .synchronize = fb_sync};
static dk_key fb_key;
static dk_handle fb_handle;

static int setup(void **state)
{
    (void)state;
    if (dk_backend_register(&fbdev, &fb_key) != DK_OK) return -1;
    return dk_register_cpu_fallback(fb_key, &fb_handle) == DK_OK ? 0 : -1;
}

static void reset_counts(void) { copied[0] = copied[1] = copied[2] = syncs = 0; }

static void roi_align_runs_on_the_cpu_through_copies(void **state)
{
    (void)state;
    float input[2 * 3 * 6 * 6], rois[3 * 5] = {0, 0, 0, 4, 4, 1, 1, 0.5f, 5, 3, 0, 2, 2, 2.5f, 5.5f};
    for (size_t i = 0; i < sizeof input / sizeof *input; i++) input[i] = (float)((i * 37) % 101) / 7.0f;
    float want[3 * 3 * 2 * 2], got[3 * 3 * 2 * 2];
    dkt_tensor a, b, c;
    assert_ok(dk_roi_align_forward(
        dkt_cpu(&a, input, DK_FLOAT32, DKT_DIMS(2, 3, 6, 6)), dkt_cpu(&b, rois, DK_FLOAT32, DKT_DIMS(3, 5)),
        dkt_cpu(&c, want, DK_FLOAT32, DKT_DIMS(3, 3, 2, 2)), NULL, NULL, 2, 2, 1.0, 2, DK_POOL_AVG, true));
    memset(got, 0, sizeof got);
    reset_counts();
    dkt_warnings_capture();
    dk_tensor *in = dkt_tensor_init(&a, dev(input), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(2, 3, 6, 6), NULL);
    dk_tensor *ro = dkt_tensor_init(&b, dev(rois), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(3, 5), NULL);
    dk_tensor *out = dkt_tensor_init(&c, dev(got), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(3, 3, 2, 2), NULL);
    assert_ok(dk_roi_align_forward(in, ro, out, NULL, NULL, 2, 2, 1.0, 2, DK_POOL_AVG, true));
    assert_memory_equal(got, want, sizeof want);
    /* every argument copied in once, the output (and only it) copied back */
    assert_int_equal(copied[DK_COPY_DEVICE_TO_HOST], sizeof input + sizeof rois + sizeof got);
    assert_int_equal(copied[DK_COPY_HOST_TO_DEVICE], sizeof got);
    assert_int_equal(syncs, 2);
    assert_int_equal(dkt_warning_count(), 1); /* once per op */
    if (!strstr(dkt_warning_last(), "roi_align_forward has no kernel for fbdev:0: it runs on the CPU through copies"))
        fail_msg("warning: %s", dkt_warning_last());
    assert_ok(dk_roi_align_forward(in, ro, out, NULL, NULL, 2, 2, 1.0, 2, DK_POOL_AVG, true));
    assert_int_equal(dkt_warning_count(), 1);

    /* the op's checks run on the host copy and read values: a RoI's batch index out of range is
     * refused, and nothing is copied back */
    rois[5] = 7;
    reset_counts();
    assert_int_equal(dk_roi_align_forward(in, ro, out, NULL, NULL, 2, 2, 1.0, 2, DK_POOL_AVG, true), DK_EINDEX);
    assert_int_equal(copied[DK_COPY_HOST_TO_DEVICE], 0);
    dkt_warnings_release();
}

/* nms with boxes and scores viewing one dets buffer [N, 5]: one host copy of the shared memory,
 * and its data-dependent outputs (keep sized to N, num) come back. */
static void nms_on_views_of_one_buffer_and_its_counted_output(void **state)
{
    (void)state;
    enum { N = 40 };
    float dets[N * 5];
    for (int i = 0; i < N; i++) {
        const float x = (float)((i * 13) % 17), y = (float)((i * 7) % 11);
        dets[i * 5 + 0] = x, dets[i * 5 + 1] = y, dets[i * 5 + 2] = x + 4, dets[i * 5 + 3] = y + 3;
        dets[i * 5 + 4] = (float)((i * 29) % 23) / 23.0f;
    }
    int64_t keep_cpu[N], num_cpu, keep_dev[N], num_dev = -1;
    dkt_tensor bx, sc, kp, nm;
    assert_ok(dk_nms(dkt_tensor_init(&bx, dets, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(N, 4), DKT_STRIDES(5, 1)),
                     dkt_tensor_init(&sc, dets + 4, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(N), DKT_STRIDES(5)), NULL,
                     dkt_cpu(&kp, keep_cpu, DK_INT64, DKT_DIMS(N)), dkt_cpu(&nm, &num_cpu, DK_INT64, DKT_DIMS(1)), 0.3,
                     0));
    reset_counts();
    memset(keep_dev, 0xff, sizeof keep_dev);
    dkt_warnings_capture();
    assert_ok(dk_nms(dkt_tensor_init(&bx, dev(dets), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(N, 4), DKT_STRIDES(5, 1)),
                     dkt_tensor_init(&sc, dev(dets + 4), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(N), DKT_STRIDES(5)), NULL,
                     dkt_tensor_init(&kp, dev(keep_dev), DEV_TYPE, 0, DK_INT64, DKT_DIMS(N), NULL),
                     dkt_tensor_init(&nm, dev(&num_dev), DEV_TYPE, 0, DK_INT64, DKT_DIMS(1), NULL), 0.3, 0));
    dkt_warnings_release();
    assert_true(num_cpu > 0 && num_cpu < N);
    assert_int_equal(num_dev, num_cpu);
    assert_memory_equal(keep_dev, keep_cpu, (size_t)num_cpu * sizeof *keep_cpu);
    /* boxes span dets[0 .. N*5-1), scores dets[4 .. N*5): one region of N*5 floats */
    assert_int_equal(copied[DK_COPY_DEVICE_TO_HOST], sizeof dets + sizeof keep_dev + sizeof num_dev);
    assert_int_equal(copied[DK_COPY_HOST_TO_DEVICE], sizeof keep_dev + sizeof num_dev);
}

/* A kernel of the device's own, which writes through the device's addressing. */
static dk_status own_box_iou(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *out, int64_t kind,
                             bool aligned, double eps, int64_t offset)
{
    (void)boxes1, (void)boxes2, (void)kind, (void)aligned, (void)eps, (void)offset;
    float *o = real(dk_tensor_data(out));
    for (int64_t i = 0; i < dk_tensor_numel(out); i++) o[i] = 42.0f;
    return DK_OK;
}

/* Arguments in separate buffers of sizes that are no multiple of 8 (12 bytes of scores before
 * the int64 outputs): each host copy keeps its tensor's alignment (UBSan's check in make
 * test-c-asan; the Python suite found it misaligned once). */
static void host_copies_keep_each_tensors_alignment(void **state)
{
    (void)state;
    float boxes[3 * 4] = {0, 0, 10, 10, 1, 1, 11, 11, 20, 20, 30, 30}, scores[3] = {0.9f, 0.8f, 0.7f};
    int64_t keep[3] = {-1, -1, -1}, num = 0;
    dkt_tensor bx, sc, kp, nm;
    dkt_warnings_capture();
    assert_ok(dk_nms(dkt_tensor_init(&bx, dev(boxes), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(3, 4), NULL),
                     dkt_tensor_init(&sc, dev(scores), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(3), NULL), NULL,
                     dkt_tensor_init(&kp, dev(keep), DEV_TYPE, 0, DK_INT64, DKT_DIMS(3), NULL),
                     dkt_tensor_init(&nm, dev(&num), DEV_TYPE, 0, DK_INT64, DKT_DIMS(1), NULL), 0.5, 0));
    dkt_warnings_release();
    assert_int_equal(num, 2);
    assert_int_equal(keep[0], 0);
    assert_int_equal(keep[1], 2);
}

static void the_table_shows_it_and_a_kernel_of_the_backends_own_wins(void **state)
{
    (void)state;
    dk_table_entry e[DK_NUM_KEYS];
    const int rows = dk_op_table(&dk_box_iou_op, e, DK_NUM_KEYS);
    bool seen = false;
    for (int i = 0; i < rows; i++)
        if (e[i].key == fb_key) {
            assert_int_equal(e[i].provenance, DK_PROV_CPU_COPY);
            assert_string_equal(e[i].kernel_name, "dk_cpu_fallback");
            seen = true;
        }
    assert_true(seen);
    assert_string_equal(dk_provenance_name(DK_PROV_CPU_COPY), "fallback (cpu copy)");
    char *dump = dk_op_dump(&dk_box_iou_op);
    assert_non_null(dump);
    if (!strstr(dump, "fbdev") || !strstr(dump, "fallback (cpu copy)")) fail_msg("dump:\n%s", dump);
    dk_free(dump);

    /* box_iou through the fallback, then the backend's own kernel shadows it */
    float b1[2 * 4] = {0, 0, 2, 2, 1, 1, 3, 3}, b2[1 * 4] = {0, 0, 2, 2}, iou[2] = {-1, -1};
    dkt_tensor t1, t2, t3;
    dk_tensor *x = dkt_tensor_init(&t1, dev(b1), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(2, 4), NULL);
    dk_tensor *y = dkt_tensor_init(&t2, dev(b2), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(1, 4), NULL);
    dk_tensor *o = dkt_tensor_init(&t3, dev(iou), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(2, 1), NULL);
    dkt_warnings_capture();
    assert_ok(dk_box_iou(x, y, o, 0, false, 1e-7, 0));
    dkt_warnings_release();
    assert_true(iou[0] == 1.0f && fabsf(iou[1] - 1.0f / 7.0f) < 1e-7f);

    dk_handle own;
    dk_box_iou_fn typed = own_box_iou;
    assert_ok(dk_register_device_impl(&dk_box_iou_op, fb_key, (dk_fnptr)typed, "own_box_iou", &own));
    reset_counts();
    assert_ok(dk_box_iou(x, y, o, 0, false, 1e-7, 0));
    assert_true(iou[0] == 42.0f && iou[1] == 42.0f);
    assert_int_equal(copied[DK_COPY_DEVICE_TO_HOST], 0); /* no copies: the backend's kernel ran */
    assert_ok(dk_unregister(own));
    assert_ok(dk_box_iou(x, y, o, 0, false, 1e-7, 0));
    assert_true(iou[0] == 1.0f);
}

/* Profile counts the calls the fallback served apart from those a kernel served. */
static void profile_counts_fallback_calls_apart(void **state)
{
    (void)state;
    float b1[4] = {0, 0, 2, 2}, iou[1];
    dkt_tensor t1, t2, t3;
    dk_tensor *x = dkt_tensor_init(&t1, dev(b1), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(1, 4), NULL);
    dk_tensor *y = dkt_tensor_init(&t2, dev(b1), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(1, 4), NULL);
    dk_tensor *o = dkt_tensor_init(&t3, dev(iou), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(1, 1), NULL);
    dk_profile_reset();
    dk_tls_state saved = dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE));
    dkt_warnings_capture();
    for (int i = 0; i < 3; i++) assert_ok(dk_box_iou(x, y, o, 0, false, 1e-7, 0));
    dk_handle own;
    dk_box_iou_fn typed = own_box_iou;
    assert_ok(dk_register_device_impl(&dk_box_iou_op, fb_key, (dk_fnptr)typed, "own_box_iou", &own));
    assert_ok(dk_box_iou(x, y, o, 0, false, 1e-7, 0));
    assert_ok(dk_unregister(own));
    dkt_warnings_release();
    dk_tls_pop(saved);
    uint64_t c, ns, fc, fns;
    assert_ok(dk_profile_get(&dk_box_iou_op, fb_key, &c, &ns));
    assert_ok(dk_profile_get_fallback(&dk_box_iou_op, fb_key, &fc, &fns));
    assert_int_equal(c, 4);
    assert_int_equal(fc, 3);
    assert_true(fns <= ns);
    char *text = dk_profile_format();
    assert_non_null(text);
    if (!strstr(text, "fbdev (cpu copy)          3") || !strstr(text, "fbdev               1"))
        fail_msg("profile:\n%s", text);
    dk_free(text);
    assert_error(dk_profile_get_fallback(NULL, fb_key, &c, &ns), DK_EINVAL, "dk_profile_get_fallback: NULL argument");
}

static void refusals(void **state)
{
    (void)state;
    assert_error(dk_register_cpu_fallback(DK_KEY_CPU, NULL), DK_EINVAL,
                 "dk_register_cpu_fallback: key 1 (cpu) is not a backend key other than the CPU's");
    char want[160];
    snprintf(want, sizeof want, "dk_register_cpu_fallback: key %d (Profile) is not a backend key other than the CPU's",
             (int)DK_KEY_PROFILE);
    assert_error(dk_register_cpu_fallback(DK_KEY_PROFILE, NULL), DK_EINVAL, want);
    /* without the fallback the slot is missing again */
    assert_ok(dk_unregister(fb_handle));
    float b[4] = {0, 0, 1, 1}, out[1];
    dkt_tensor t1, t2, t3;
    dk_tensor *x = dkt_tensor_init(&t1, dev(b), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(1, 4), NULL);
    dk_tensor *y = dkt_tensor_init(&t2, dev(b), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(1, 4), NULL);
    dk_tensor *o = dkt_tensor_init(&t3, dev(out), DEV_TYPE, 0, DK_FLOAT32, DKT_DIMS(1, 1), NULL);
    assert_int_equal(dk_box_iou(x, y, o, 0, false, 1e-7, 0), DK_ENOTIMPL);
    assert_ok(dk_register_cpu_fallback(fb_key, &fb_handle));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(roi_align_runs_on_the_cpu_through_copies),
        dkt_test(nms_on_views_of_one_buffer_and_its_counted_output),
        dkt_test(host_copies_keep_each_tensors_alignment),
        dkt_test(the_table_shows_it_and_a_kernel_of_the_backends_own_wins),
        dkt_test(profile_counts_fallback_calls_apart),
        dkt_test(refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
