/*
 * test_aliasing.c — the core's aliasing check (Note [Aliasing] in dk_check.h), which every op's
 * entry runs before the op's own check: outputs must not overlap themselves or any other
 * tensor argument.
 */
#include "dk_test.h"
#include "roi_align.h"

#define ALIAS_OP_ARGS(X)    \
    X(TENSOR, a)            \
    X(OPT_TENSOR, b)        \
    X(TENSOR_OUT, out)      \
    X(OPT_TENSOR_OUT, out2) \
    X(INT, n)

DK_DECLARE_OP(alias_op, ALIAS_OP_ARGS)
DK_DEFINE_OP(alias_op, ALIAS_OP_ARGS)
{
    (void)a, (void)b, (void)out, (void)out2, (void)n;
    return DK_OK;
}

static int calls;
static dk_status alias_op_cpu(const dk_tensor *a, const dk_tensor *b, dk_tensor *out, dk_tensor *out2, int64_t n)
{
    (void)a, (void)b, (void)out, (void)out2, (void)n;
    calls++;
    return DK_OK;
}
DK_REGISTER_DEVICE_IMPL(alias_op, CPU, alias_op_cpu)

static float buf[4096];

/* A float32 CPU tensor at buf + offset with the given shape and strides (NULL: row-major). */
static dk_tensor *view(dkt_tensor *tt, int64_t offset, int ndim, const int64_t *shape, const int64_t *strides)
{
    return dkt_tensor_init(tt, buf + offset, kDLCPU, 0, DK_FLOAT32, ndim, shape, strides);
}

static void separate_tensors_pass(void **state)
{
    (void)state;
    dkt_tensor at, ot, o2t, bt;
    calls = 0;
    /* adjacent, not overlapping: [0, 16) and [16, 32) floats */
    assert_ok(dk_alias_op(view(&at, 0, DKT_DIMS(4, 4), NULL), NULL, view(&ot, 16, DKT_DIMS(4, 4), NULL), NULL, 0));
    /* two inputs may share memory: only outputs are checked against others */
    assert_ok(dk_alias_op(view(&at, 0, DKT_DIMS(16), NULL), view(&bt, 0, DKT_DIMS(16), NULL),
                          view(&ot, 16, DKT_DIMS(16), NULL), view(&o2t, 32, DKT_DIMS(16), NULL), 0));
    /* a nested, non-contiguous output (every other column; a transposed view) */
    assert_ok(
        dk_alias_op(view(&at, 0, DKT_DIMS(8), NULL), NULL, view(&ot, 64, DKT_DIMS(4, 4), DKT_STRIDES(8, 2)), NULL, 0));
    assert_ok(
        dk_alias_op(view(&at, 0, DKT_DIMS(8), NULL), NULL, view(&ot, 64, DKT_DIMS(4, 4), DKT_STRIDES(1, 4)), NULL, 0));
    /* negative strides: the range runs below the data pointer */
    assert_ok(
        dk_alias_op(view(&at, 0, DKT_DIMS(8), NULL), NULL, view(&ot, 100, DKT_DIMS(8), DKT_STRIDES(-1)), NULL, 0));
    assert_int_equal(calls, 5);
}

static void output_overlapping_an_input_is_refused(void **state)
{
    (void)state;
    dkt_tensor at, ot, bt;
    calls = 0;
    /* partial: [0, 16) and [8, 24) */
    assert_error(dk_alias_op(view(&at, 0, DKT_DIMS(16), NULL), NULL, view(&ot, 8, DKT_DIMS(16), NULL), NULL, 0),
                 DK_EINVAL,
                 "alias_op: output 'out' overlaps argument 'a' in memory; an op's outputs must not share memory with "
                 "its other arguments (pass a separate tensor)");
    /* full: the very same memory */
    assert_int_equal(dk_alias_op(view(&at, 0, DKT_DIMS(16), NULL), NULL, view(&ot, 0, DKT_DIMS(4, 4), NULL), NULL, 0),
                     DK_EINVAL);
    /* the optional input too */
    assert_int_equal(dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), view(&bt, 200, DKT_DIMS(4), NULL),
                                 view(&ot, 202, DKT_DIMS(4), NULL), NULL, 0),
                     DK_EINVAL);
    assert_true(strstr(dk_last_error(), "overlaps argument 'b'") != NULL);
    /* two interleaved views of one buffer: ranges are compared, as PyTorch does, so refused */
    assert_int_equal(dk_alias_op(view(&at, 0, DKT_DIMS(8), DKT_STRIDES(2)), NULL,
                                 view(&ot, 1, DKT_DIMS(8), DKT_STRIDES(2)), NULL, 0),
                     DK_EINVAL);
    assert_int_equal(calls, 0);
}

static void outputs_overlapping_each_other_are_refused(void **state)
{
    (void)state;
    dkt_tensor at, ot, o2t;
    assert_error(dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), NULL, view(&ot, 100, DKT_DIMS(8), NULL),
                             view(&o2t, 104, DKT_DIMS(8), NULL), 0),
                 DK_EINVAL,
                 "alias_op: output 'out' overlaps output 'out2' in memory; an op's outputs must not share memory with "
                 "its other arguments (pass a separate tensor)");
}

static void output_overlapping_itself_is_refused(void **state)
{
    (void)state;
    dkt_tensor at, ot;
    /* stride 0 over a dimension of size > 1: an expanded view */
    assert_error(
        dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), NULL, view(&ot, 100, DKT_DIMS(3, 4), DKT_STRIDES(0, 1)), NULL, 0),
        DK_EINVAL,
        "alias_op: 'out' repeats its elements (dimension 0 has stride 0, e.g. an expanded view), so results "
        "written to it would overwrite each other; pass a tensor with distinct elements");
    /* strides (1, 1, 1, 1): distinct indices, the same elements */
    assert_int_equal(dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), NULL,
                                 view(&ot, 100, DKT_DIMS(2, 2, 2, 2), DKT_STRIDES(1, 1, 1, 1)), NULL, 0),
                     DK_EINVAL);
    assert_true(strstr(dk_last_error(), "'out' has strides under which its elements may overlap") != NULL);
    /* not nested, though without overlap (0 2 4 3 5 7): refused, the conservative answer */
    assert_int_equal(
        dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), NULL, view(&ot, 100, DKT_DIMS(2, 3), DKT_STRIDES(3, 2)), NULL, 0),
        DK_EINVAL);
    /* size-1 dimensions with stride 0 repeat nothing */
    assert_ok(
        dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), NULL, view(&ot, 100, DKT_DIMS(1, 4), DKT_STRIDES(0, 1)), NULL, 0));
}

static void empty_tensors_and_other_devices_never_overlap(void **state)
{
    (void)state;
    dkt_tensor at, ot;
    /* an output without elements, pointing into the input */
    assert_ok(dk_alias_op(view(&at, 0, DKT_DIMS(16), NULL), NULL, view(&ot, 4, DKT_DIMS(0, 4), NULL), NULL, 0));
    /* the same address on two devices is two memories (a fake device: the kernel is never run) */
    dkt_tensor ct, dt;
    dk_tensor *a = dkt_tensor_init(&ct, DKT_FAKE_DATA, kDLCUDA, 0, DK_FLOAT32, DKT_DIMS(4), NULL);
    dk_tensor *o = dkt_tensor_init(&dt, DKT_FAKE_DATA, kDLCUDA, 1, DK_FLOAT32, DKT_DIMS(4), NULL);
    /* mixed devices are refused by the device check, which comes first */
    assert_int_equal(dk_alias_op(a, NULL, o, NULL, 0), DK_EINVAL);
    assert_true(strstr(dk_last_error(), "is on cuda:1 but 'a' is on cuda:0") != NULL);
}

static void huge_shapes_and_strides_are_refused_not_overflowed(void **state)
{
    (void)state;
    dkt_tensor at, ot;
    /* 2^40 x 2^40 elements: the byte range does not fit 64 bits */
    assert_error(
        dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), NULL,
                    view(&ot, 100, DKT_DIMS(INT64_C(1) << 40, INT64_C(1) << 40), DKT_STRIDES(INT64_C(1) << 40, 1)),
                    NULL, 0),
        DK_EINVAL, "alias_op: parameter 'out' has a shape and strides that overflow 64-bit offsets");
    assert_int_equal(dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), NULL,
                                 view(&ot, 100, DKT_DIMS(3), DKT_STRIDES(INT64_MAX / 2)), NULL, 0),
                     DK_EINVAL);
    /* large but representable: exact (slow path), accepted when separate */
    assert_ok(dk_alias_op(view(&at, 0, DKT_DIMS(4), NULL), NULL,
                          view(&ot, 100, DKT_DIMS(1, 1), DKT_STRIDES(INT64_C(1) << 40, INT64_C(1) << 30)), NULL, 0));
}

static void roi_align_refuses_an_output_inside_its_input(void **state)
{
    (void)state;
    /* the review's case: output = x.view(-1)[:8].view(1, 2, 2, 2) */
    float x[2 * 2 * 4 * 4] = {0}, rois[5] = {0, 0, 0, 1, 1};
    dkt_tensor xt, rt, ot;
    dk_tensor *in = dkt_cpu(&xt, x, DK_FLOAT32, DKT_DIMS(1, 2, 4, 4));
    dk_tensor *r = dkt_cpu(&rt, rois, DK_FLOAT32, DKT_DIMS(1, 5));
    dk_tensor *out = dkt_cpu(&ot, x, DK_FLOAT32, DKT_DIMS(1, 2, 2, 2));
    assert_error(dk_roi_align_forward(in, r, out, NULL, NULL, 2, 2, 1.0, 0, DK_POOL_AVG, true), DK_EINVAL,
                 "roi_align_forward: output 'output' overlaps argument 'input' in memory; an op's outputs must not "
                 "share memory with its other arguments (pass a separate tensor)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(separate_tensors_pass),
        dkt_test(output_overlapping_an_input_is_refused),
        dkt_test(outputs_overlapping_each_other_are_refused),
        dkt_test(output_overlapping_itself_is_refused),
        dkt_test(empty_tensors_and_other_devices_never_overlap),
        dkt_test(huge_shapes_and_strides_are_refused_not_overflowed),
        dkt_test(roi_align_refuses_an_output_inside_its_input),
    };
    return cmocka_run_group_tests(tests, dkt_group_capture_warnings, dkt_group_release_warnings);
}
