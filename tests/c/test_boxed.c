/*
 * test_boxed.c — the boxed convention: stacks, dk_op_call_boxed against the typed entry, boxed
 * kernels against typed ones, tag checking, schemas, and a boxed fallback that serves any op by
 * reading its schema.
 */
#include "dk_test.h"
#include "roi_align.h"

/* y = x * scale + bias over float32 vectors. */
#define AXPB_ARGS(X) \
    X(TENSOR, x)     \
    X(TENSOR_OUT, y) \
    X(FLOAT, scale)  \
    X(INT, bias)

DK_DECLARE_OP(axpb, AXPB_ARGS)
DK_DEFINE_OP(axpb, AXPB_ARGS)
{
    (void)scale;
    (void)bias;
    if (dk_tensor_numel(x) != dk_tensor_numel(y)) return dk_error(DK_EINVAL, "axpb: x and y differ in size");
    if (dk_tensor_dtype(x) != DK_FLOAT32 || dk_tensor_dtype(y) != DK_FLOAT32)
        return dk_error(DK_ETYPE, "axpb: float32 only");
    return DK_OK;
}

/* The schema test's op: one argument of every kind. */
#define SCHEMA_ARGS(X)       \
    X(TENSOR, input)         \
    X(TENSOR_OUT, output)    \
    X(OPT_TENSOR_OUT, extra) \
    X(INT, n)                \
    X(FLOAT, f)              \
    X(BOOL, b)               \
    X(STR, s)                \
    X(INT_LIST, l)

DK_DECLARE_OP(schema_op, SCHEMA_ARGS)
DK_DEFINE_OP(schema_op, SCHEMA_ARGS)
{
    (void)input, (void)output, (void)extra, (void)n, (void)f, (void)b, (void)s, (void)l;
    return DK_OK;
}

/* Optional inputs, a second output and an output that is not first: for the fill fallback. */
#define TWO_OUT_ARGS(X)       \
    X(OPT_TENSOR, maybe_in)   \
    X(TENSOR_OUT, first)      \
    X(TENSOR, in)             \
    X(OPT_TENSOR_OUT, second) \
    X(OPT_TENSOR_OUT, third)  \
    X(INT, k)

DK_DECLARE_OP(two_out, TWO_OUT_ARGS)
DK_DEFINE_OP(two_out, TWO_OUT_ARGS)
{
    (void)maybe_in, (void)first, (void)in, (void)second, (void)third, (void)k;
    return DK_OK;
}

static dk_status axpb_cpu(const dk_tensor *x, dk_tensor *y, double scale, int64_t bias)
{
    const float *xs = dk_tensor_data(x);
    float *ys = dk_tensor_data(y);
    for (int64_t i = 0; i < dk_tensor_numel(x); i++) ys[i] = (float)(xs[i] * scale + (double)bias);
    return DK_OK;
}

/* The same kernel, boxed. */
static int axpb_boxed_calls;
static dk_status axpb_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ks;
    (void)ctx;
    axpb_boxed_calls++;
    dk_value *v = dk_stack_args(stack, op);
    assert_int_equal(op->nargs, 4);
    assert_int_equal(v[0].tag, DK_TYPE_TENSOR);
    assert_int_equal(v[1].tag, DK_TYPE_TENSOR);
    assert_int_equal(v[2].tag, DK_TYPE_FLOAT);
    assert_int_equal(v[3].tag, DK_TYPE_INT);
    return axpb_cpu(v[0].u.t, v[1].u.t, v[2].u.f, v[3].u.i);
}

static dk_handle axpb_typed_handle;
static int group_setup(void **state)
{
    dkt_group_capture_warnings(state);
    return dk_op_register(&dk_axpb_op, DK_KEY_CPU, dk_kernel_unboxed((dk_fnptr)axpb_cpu, "axpb_cpu"),
                          &axpb_typed_handle);
}

static void push_axpb(dk_stack *s, dk_tensor *x, dk_tensor *y, dk_value scale, dk_value bias)
{
    assert_ok(dk_stack_push(s, dk_value_tensor(x)));
    assert_ok(dk_stack_push(s, dk_value_tensor(y)));
    assert_ok(dk_stack_push(s, scale));
    assert_ok(dk_stack_push(s, bias));
}

/* ------------------------------------------------------------------------------------------ */

static void stack_push_stops_at_capacity(void **state)
{
    (void)state;
    dk_stack s;
    dk_stack_init(&s);
    for (int i = 0; i < DK_STACK_MAX; i++) assert_ok(dk_stack_push(&s, dk_value_int(i)));
    assert_error(dk_stack_push(&s, dk_value_int(99)), DK_EINVAL, "dkit stack overflow (32 values)");
    assert_int_equal(s.size, DK_STACK_MAX);
    assert_int_equal(s.v[DK_STACK_MAX - 1].u.i, DK_STACK_MAX - 1);
}

static void value_constructors_set_tags(void **state)
{
    (void)state;
    dkt_tensor tt;
    dk_tensor *t = dkt_on(&tt, kDLCPU, 0);
    int64_t items[2] = {3, 4};
    dk_int_list l = {items, 2};
    assert_int_equal(dk_value_tensor(t).tag, DK_TYPE_TENSOR);
    assert_ptr_equal(dk_value_tensor(t).u.t, t);
    assert_int_equal(dk_value_tensor(NULL).tag, DK_TYPE_NONE); /* a NULL tensor is None */
    assert_int_equal(dk_value_int(-5).u.i, -5);
    assert_true(dk_value_float(0.5).u.f == 0.5);
    assert_int_equal(dk_value_bool(true).tag, DK_TYPE_BOOL);
    assert_string_equal(dk_value_str("hi").u.s, "hi");
    assert_int_equal(dk_value_int_list(l).u.il.size, 2);
    assert_int_equal(dk_value_none().tag, DK_TYPE_NONE);
}

static void boxed_call_matches_the_typed_entry(void **state)
{
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6}, y_typed[6] = {0}, y_boxed[6] = {0};
    dkt_tensor xt, yt, zt;
    dk_tensor *xs = dkt_cpu(&xt, x, DK_FLOAT32, DKT_DIMS(2, 3));
    assert_ok(dk_axpb(xs, dkt_cpu(&yt, y_typed, DK_FLOAT32, DKT_DIMS(2, 3)), 0.5, 3));

    dk_stack s;
    dk_stack_init(&s);
    assert_ok(dk_stack_push(&s, dk_value_str("below the arguments"))); /* must survive the call */
    push_axpb(&s, xs, dkt_cpu(&zt, y_boxed, DK_FLOAT32, DKT_DIMS(2, 3)), dk_value_float(0.5), dk_value_int(3));
    assert_ok(dk_op_call_boxed(&dk_axpb_op, &s));
    assert_int_equal(s.size, 1); /* the arguments were popped */
    assert_string_equal(s.v[0].u.s, "below the arguments");
    assert_memory_equal(y_typed, y_boxed, sizeof y_typed);
    assert_true(y_boxed[5] == 6 * 0.5f + 3);

    /* The boxed entry runs the op's check too. */
    dk_stack_init(&s);
    push_axpb(&s, xs, dkt_cpu(&zt, y_boxed, DK_FLOAT32, DKT_DIMS(5)), dk_value_float(1), dk_value_int(0));
    assert_error(dk_op_call_boxed(&dk_axpb_op, &s), DK_EINVAL, "axpb: x and y differ in size");
    assert_int_equal(s.size, 0);
}

static void boxed_kernel_matches_the_typed_kernel(void **state)
{
    (void)state;
    float x[4] = {1, -2, 3.5f, 8}, y_typed[4], y_boxed[4], y_boxed_entry[4];
    dkt_tensor xt, yt;
    dk_tensor *xs = dkt_cpu(&xt, x, DK_FLOAT32, DKT_DIMS(4));
    assert_ok(dk_axpb(xs, dkt_cpu(&yt, y_typed, DK_FLOAT32, DKT_DIMS(4)), -1.25, 7));

    dk_handle h = NULL;
    assert_ok(dk_op_register(&dk_axpb_op, DK_KEY_CPU, dk_kernel_boxed(axpb_boxed, NULL, "axpb_boxed"), &h));
    axpb_boxed_calls = 0;
    /* typed entry -> boxed kernel (the generated code boxes the arguments) */
    assert_ok(dk_axpb(xs, dkt_cpu(&yt, y_boxed, DK_FLOAT32, DKT_DIMS(4)), -1.25, 7));
    /* boxed entry -> boxed kernel */
    dk_stack s;
    dk_stack_init(&s);
    push_axpb(&s, xs, dkt_cpu(&yt, y_boxed_entry, DK_FLOAT32, DKT_DIMS(4)), dk_value_float(-1.25), dk_value_int(7));
    assert_ok(dk_op_call_boxed(&dk_axpb_op, &s));
    assert_int_equal(axpb_boxed_calls, 2);
    assert_ok(dk_unregister(h));
    assert_memory_equal(y_typed, y_boxed, sizeof y_typed);
    assert_memory_equal(y_typed, y_boxed_entry, sizeof y_typed);

    /* A kernel with both conventions is called typed. */
    dk_kernel both = {(dk_fnptr)axpb_cpu, axpb_boxed, NULL, "both", 0};
    assert_ok(dk_op_register(&dk_axpb_op, DK_KEY_CPU, both, &h));
    axpb_boxed_calls = 0;
    assert_ok(dk_axpb(xs, dkt_cpu(&yt, y_boxed, DK_FLOAT32, DKT_DIMS(4)), 1, 1));
    assert_int_equal(axpb_boxed_calls, 0);
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(&dk_axpb_op, e, DK_NUM_KEYS);
    for (int i = 0; i < n; i++)
        if (e[i].key == DK_KEY_CPU) assert_false(e[i].boxed);
    assert_ok(dk_unregister(h));
}

/* A boxed kernel that removes itself and hands the call it already received back to the table
 * (dk_op_dispatch_boxed), as a Python kernel does when it was removed while a call was on its
 * way to it: the kernel the table now has at the same key serves it, once. */
static dk_handle handback_handle;
static int handback_calls;
static dk_status handback(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ctx;
    handback_calls++;
    assert_int_equal(dk_keyset_highest(ks), DK_KEY_CPU);
    assert_ok(dk_unregister(handback_handle));
    return dk_op_dispatch_boxed(op, ks, stack);
}

static void a_boxed_kernel_hands_its_call_back_to_the_table(void **state)
{
    (void)state;
    float x[3] = {1, 2, 3}, y[3] = {0};
    dkt_tensor xt, yt;
    dk_tensor *xs = dkt_cpu(&xt, x, DK_FLOAT32, DKT_DIMS(3)), *ys = dkt_cpu(&yt, y, DK_FLOAT32, DKT_DIMS(3));
    handback_calls = 0;
    assert_ok(dk_op_register(&dk_axpb_op, DK_KEY_CPU, dk_kernel_boxed(handback, NULL, "handback"), &handback_handle));
    assert_ok(dk_axpb(xs, ys, 2, 1)); /* typed entry: the kernel below (axpb_cpu) computed it */
    assert_int_equal(handback_calls, 1);
    assert_true(y[0] == 3 && y[2] == 7);
    assert_ok(dk_op_register(&dk_axpb_op, DK_KEY_CPU, dk_kernel_boxed(handback, NULL, "handback"), &handback_handle));
    dk_stack s;
    dk_stack_init(&s);
    push_axpb(&s, xs, ys, dk_value_float(-1), dk_value_int(0));
    assert_ok(dk_op_call_boxed(&dk_axpb_op, &s)); /* boxed entry, the same */
    assert_int_equal(handback_calls, 2);
    assert_true(y[0] == -1 && y[2] == -3);
    /* Keys that nothing serves: the missing-kernel error, as a call would get it. */
    dk_stack_init(&s);
    push_axpb(&s, xs, ys, dk_value_float(1), dk_value_int(0));
    assert_int_equal(dk_op_dispatch_boxed(&dk_axpb_op, DK_KEYSET(DK_KEY_HIP), &s), DK_ENOTIMPL);
    assert_non_null(strstr(dk_last_error(), "axpb"));
}

static void boxed_call_accepts_an_int_for_a_float(void **state)
{
    (void)state;
    float x[3] = {1, 2, 3}, y_int[3], y_float[3];
    dkt_tensor xt, yt;
    dk_tensor *xs = dkt_cpu(&xt, x, DK_FLOAT32, DKT_DIMS(3));
    dk_stack s;
    dk_stack_init(&s);
    push_axpb(&s, xs, dkt_cpu(&yt, y_int, DK_FLOAT32, DKT_DIMS(3)), dk_value_int(2), dk_value_int(1));
    assert_ok(dk_op_call_boxed(&dk_axpb_op, &s));
    assert_ok(dk_axpb(xs, dkt_cpu(&yt, y_float, DK_FLOAT32, DKT_DIMS(3)), 2.0, 1));
    assert_memory_equal(y_int, y_float, sizeof y_int);
    assert_true(y_int[2] == 7.0f);
}

static void boxed_call_rejects_wrong_tags_naming_the_argument(void **state)
{
    (void)state;
    float x[2] = {1, 2}, y[2] = {-1, -1};
    dkt_tensor xt, yt;
    dk_tensor *xs = dkt_cpu(&xt, x, DK_FLOAT32, DKT_DIMS(2)), *ys = dkt_cpu(&yt, y, DK_FLOAT32, DKT_DIMS(2));
    dk_stack s;

    dk_stack_init(&s);
    push_axpb(&s, xs, ys, dk_value_float(1), dk_value_float(2)); /* float for an int: no narrowing */
    assert_error(dk_op_call_boxed(&dk_axpb_op, &s), DK_ETYPE, "axpb: argument 'bias' expects int, got float");
    assert_int_equal(s.size, 0);

    dk_stack_init(&s);
    push_axpb(&s, xs, ys, dk_value_bool(true), dk_value_int(2));
    assert_error(dk_op_call_boxed(&dk_axpb_op, &s), DK_ETYPE, "axpb: argument 'scale' expects float, got bool");

    dk_stack_init(&s);
    push_axpb(&s, NULL, ys, dk_value_float(1), dk_value_int(2)); /* None for a required tensor */
    assert_error(dk_op_call_boxed(&dk_axpb_op, &s), DK_ETYPE, "axpb: argument 'x' expects Tensor, got None");

    dk_stack_init(&s);
    assert_ok(dk_stack_push(&s, dk_value_tensor(xs)));
    assert_ok(dk_stack_push(&s, dk_value_str("y")));
    assert_ok(dk_stack_push(&s, dk_value_float(1)));
    assert_ok(dk_stack_push(&s, dk_value_int(1)));
    assert_error(dk_op_call_boxed(&dk_axpb_op, &s), DK_ETYPE, "axpb: argument 'y' expects Tensor, got str");

    /* A TENSOR tag holding NULL is not a tensor either. */
    dk_stack_init(&s);
    push_axpb(&s, xs, ys, dk_value_float(1), dk_value_int(2));
    s.v[0].u.t = NULL;
    assert_error(dk_op_call_boxed(&dk_axpb_op, &s), DK_ETYPE, "axpb: argument 'x' expects Tensor, got None");

    assert_true(y[0] == -1 && y[1] == -1); /* nothing ran */
}

/* Regression (fuzz_boxed, tests/fuzz/regressions/fuzz_boxed/): a boxed stack comes from outside,
 * and its tensors were read (by the aliasing check, then the op's check) before anything looked
 * at them: a rank past DK_MAX_NDIM over a shorter shape array read past it. Now each is validated
 * first (Note [Untrusted tensors]); the call fails, pops its arguments and writes nothing. */
static void boxed_call_validates_its_tensors_first(void **state)
{
    (void)state;
    float x[2] = {1, 2}, y[2] = {-1, -1};
    dkt_tensor xt, yt;
    dk_stack s;
    int64_t *two = malloc(2 * sizeof *two); /* exactly two entries: ASan sees any read past them */
    assert_non_null(two);
    two[0] = 1, two[1] = 2;
    const struct {
        int what;
        const char *message;
    } cases[] = {
        {0, "axpb: parameter 'x' has 65 dimensions (0 to 64 are supported)"},
        {1, "axpb: parameter 'y' is a malformed DLTensor (ndim 1, shape NULL)"},
        {2, "axpb: parameter 'x' has a malformed dtype (code 2, bits 32, lanes 0)"},
        {3, "axpb: parameter 'y' has elements but no memory"},
        {4, "axpb: parameter 'x' has a byte offset beyond 2^63"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dk_tensor *xs = dkt_cpu(&xt, x, DK_FLOAT32, DKT_DIMS(2)), *ys = dkt_cpu(&yt, y, DK_FLOAT32, DKT_DIMS(2));
        switch (cases[i].what) {
        case 0: xs->ndim = 65, xs->shape = two; break;
        case 1: ys->shape = NULL; break;
        case 2: xs->dtype.lanes = 0; break;
        case 3: ys->data = NULL; break;
        default: xs->byte_offset = (uint64_t)1 << 63; break;
        }
        dk_stack_init(&s);
        push_axpb(&s, xs, ys, dk_value_float(1), dk_value_int(2));
        assert_int_equal(dk_op_call_boxed(&dk_axpb_op, &s), DK_EBUFFER);
        assert_non_null(strstr(dk_last_error(), cases[i].message));
        assert_int_equal(s.size, 0);
    }
    assert_true(y[0] == -1 && y[1] == -1); /* nothing ran */
    free(two);
}

static void boxed_call_with_too_few_values_is_an_error(void **state)
{
    (void)state;
    dkt_tensor xt;
    dk_stack s;
    dk_stack_init(&s);
    assert_ok(dk_stack_push(&s, dk_value_tensor(dkt_on(&xt, kDLCPU, 0))));
    assert_ok(dk_stack_push(&s, dk_value_int(1)));
    assert_error(dk_op_call_boxed(&dk_axpb_op, &s), DK_ETYPE, "axpb: expects 4 arguments, the stack holds 2");
    assert_int_equal(s.size, 2); /* nothing popped */
    dk_stack_init(&s);
    assert_error(dk_op_call_boxed(&dk_axpb_op, &s), DK_ETYPE, "axpb: expects 4 arguments, the stack holds 0");
}

/* ------------------------------------------------------------------------------------------ */
/* Every kind, both ways                                                                      */

static struct {
    int calls;
    const dk_tensor *input;
    dk_tensor *output, *extra;
    int64_t n;
    double f;
    bool b;
    const char *s;
    dk_int_list l;
} schema_seen;

static dk_status schema_op_typed(const dk_tensor *input, dk_tensor *output, dk_tensor *extra, int64_t n, double f,
                                 bool b, const char *s, dk_int_list l)
{
    schema_seen.calls++;
    schema_seen.input = input, schema_seen.output = output, schema_seen.extra = extra;
    schema_seen.n = n, schema_seen.f = f, schema_seen.b = b, schema_seen.s = s, schema_seen.l = l;
    return DK_OK;
}

static dk_status schema_op_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ks;
    (void)ctx;
    dk_value *v = dk_stack_args(stack, op);
    return op->unbox((dk_fnptr)schema_op_typed, v);
}

static void every_argument_kind_survives_boxing_and_unboxing(void **state)
{
    (void)state;
    int64_t items[3] = {7, 8, 9};
    dk_int_list l = {items, 3};
    dkt_tensor it, ot, et;
    dk_tensor *in = dkt_on(&it, kDLCPU, 0), *out = dkt_on(&ot, kDLCPU, 0);
    /* its own tensor: an output may not share memory with another argument (Note [Aliasing]) */
    dk_tensor *ext = dkt_on(&et, kDLCPU, 0);

    for (int pass = 0; pass < 2; pass++) {
        dk_handle h = NULL;
        dk_kernel k = pass == 0 ? dk_kernel_unboxed((dk_fnptr)schema_op_typed, "typed")
                                : dk_kernel_boxed(schema_op_boxed, NULL, "boxed");
        assert_ok(dk_op_register(&dk_schema_op_op, DK_KEY_CPU, k, &h));
        memset(&schema_seen, 0, sizeof schema_seen);
        assert_ok(dk_schema_op(in, out, NULL, -3, 2.5, true, "mode", l));
        assert_int_equal(schema_seen.calls, 1);
        assert_ptr_equal(schema_seen.input, in);
        assert_ptr_equal(schema_seen.output, out);
        assert_null(schema_seen.extra);
        assert_int_equal(schema_seen.n, -3);
        assert_true(schema_seen.f == 2.5);
        assert_true(schema_seen.b);
        assert_string_equal(schema_seen.s, "mode");
        assert_ptr_equal(schema_seen.l.data, items);
        assert_int_equal(schema_seen.l.size, 3);

        dk_stack s;
        dk_stack_init(&s);
        assert_ok(dk_stack_push(&s, dk_value_tensor(in)));
        assert_ok(dk_stack_push(&s, dk_value_tensor(out)));
        assert_ok(dk_stack_push(&s, dk_value_tensor(ext))); /* extra given this time */
        assert_ok(dk_stack_push(&s, dk_value_int(11)));
        assert_ok(dk_stack_push(&s, dk_value_int(4))); /* int for float */
        assert_ok(dk_stack_push(&s, dk_value_bool(false)));
        assert_ok(dk_stack_push(&s, dk_value_str("other")));
        assert_ok(dk_stack_push(&s, dk_value_int_list(l)));
        assert_ok(dk_op_call_boxed(&dk_schema_op_op, &s));
        assert_int_equal(schema_seen.calls, 2);
        assert_ptr_equal(schema_seen.extra, ext);
        assert_int_equal(schema_seen.n, 11);
        assert_true(schema_seen.f == 4.0);
        assert_false(schema_seen.b);
        assert_string_equal(schema_seen.s, "other");
        assert_int_equal(schema_seen.l.data[2], 9);

        /* a NULL string is refused */
        dk_stack_init(&s);
        assert_ok(dk_stack_push(&s, dk_value_tensor(in)));
        assert_ok(dk_stack_push(&s, dk_value_tensor(out)));
        assert_ok(dk_stack_push(&s, dk_value_none()));
        assert_ok(dk_stack_push(&s, dk_value_int(11)));
        assert_ok(dk_stack_push(&s, dk_value_float(4)));
        assert_ok(dk_stack_push(&s, dk_value_bool(false)));
        assert_ok(dk_stack_push(&s, dk_value_str(NULL)));
        assert_ok(dk_stack_push(&s, dk_value_int_list(l)));
        assert_error(dk_op_call_boxed(&dk_schema_op_op, &s), DK_ETYPE, "schema_op: argument 's' expects str, got None");
        assert_int_equal(schema_seen.calls, 2);
        assert_ok(dk_unregister(h));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Schemas                                                                                    */

static void schema_string_of_every_kind(void **state)
{
    (void)state;
    assert_string_equal(dk_op_schema(&dk_schema_op_op),
                        "dkit::schema_op(Tensor input, Tensor(a!) output, Tensor(b!)? extra, int n, float f, bool b, "
                        "str s, int[] l) -> ()");
    assert_string_equal(dk_op_schema(&dk_two_out_op),
                        "dkit::two_out(Tensor? maybe_in, Tensor(a!) first, Tensor in, Tensor(b!)? second, "
                        "Tensor(c!)? third, int k) -> ()");
    assert_string_equal(dk_op_schema(&dk_axpb_op), "dkit::axpb(Tensor x, Tensor(a!) y, float scale, int bias) -> ()");
    /* stable: the same pointer every time */
    assert_ptr_equal(dk_op_schema(&dk_axpb_op), dk_op_schema(&dk_axpb_op));

    assert_int_equal(dk_schema_op_op.nargs, 8);
    assert_string_equal(dk_schema_op_op.args[2].name, "extra");
    assert_int_equal(dk_schema_op_op.args[2].kind, DK_ARG_OPT_TENSOR);
    assert_true(dk_schema_op_op.args[2].out);
    assert_int_equal(dk_schema_op_op.args[7].kind, DK_ARG_INT_LIST);
    assert_false(dk_schema_op_op.args[0].out);
}

static void schema_of_roi_align(void **state)
{
    (void)state;
    assert_string_equal(dk_op_schema(&dk_roi_align_forward_op),
                        "dkit::roi_align_forward(Tensor input, Tensor rois, Tensor(a!) output, Tensor(b!)? argmax_y, "
                        "Tensor(c!)? argmax_x, int aligned_height, int aligned_width, float spatial_scale, "
                        "int sampling_ratio, int pool_mode, bool aligned) -> ()");
    assert_string_equal(dk_op_schema(&dk_roi_align_backward_op),
                        "dkit::roi_align_backward(Tensor grad_output, Tensor rois, Tensor? argmax_y, Tensor? argmax_x, "
                        "Tensor(a!) grad_input, int aligned_height, int aligned_width, float spatial_scale, "
                        "int sampling_ratio, int pool_mode, bool aligned) -> ()");
    assert_ptr_equal(dk_op_find("roi_align_forward"), &dk_roi_align_forward_op);
    assert_ptr_equal(dk_op_find("roi_align_backward"), &dk_roi_align_backward_op);
}

static void ops_are_listed_and_found_by_name(void **state)
{
    (void)state;
    int n = dk_op_count();
    bool found_axpb = false, found_two = false;
    for (int i = 0; i < n; i++) {
        dk_op *op = dk_op_at(i);
        assert_non_null(op);
        if (op == &dk_axpb_op) found_axpb = true;
        if (op == &dk_two_out_op) found_two = true;
    }
    assert_true(found_axpb && found_two);
    assert_null(dk_op_at(n));
    assert_null(dk_op_at(-1));
    assert_ptr_equal(dk_op_find("axpb"), &dk_axpb_op);
    assert_null(dk_op_find("no_such_op"));
}

/* ------------------------------------------------------------------------------------------ */
/* A boxed fallback for every op                                                              */

/* Fills every float32 tensor the op writes with *(float *)ctx, whatever the op: it knows the
 * arguments only through op->args. */
static int fill_calls;
static dk_status fill_outputs(const dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx)
{
    (void)ks;
    fill_calls++;
    float value = *(const float *)ctx;
    dk_value *v = dk_stack_args(stack, op);
    for (int i = 0; i < op->nargs; i++) {
        if (!op->args[i].out || v[i].tag != DK_TYPE_TENSOR) continue;
        dk_tensor *t = v[i].u.t;
        if (dk_tensor_dtype(t) != DK_FLOAT32)
            return dk_error(DK_ETYPE, "%s: fill: '%s' is not float32", op->name, op->args[i].name);
        float *p = dk_tensor_data(t);
        for (int64_t j = 0; j < dk_tensor_numel(t); j++) p[j] = value;
    }
    return DK_OK;
}

static void boxed_fallback_serves_any_op_through_its_schema(void **state)
{
    (void)state;
    dk_key fill = dkt_func_key("Fill");
    static float value = 42.0f;
    dk_handle fb = NULL;
    assert_ok(dk_register_fallback(fill, dk_kernel_boxed(fill_outputs, &value, "fill_outputs"), &fb));
    dk_tls_state p = dk_tls_push_include(DK_KEYSET(fill));
    fill_calls = 0;

    /* op 1: axpb writes y */
    float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
    dkt_tensor xt, yt;
    assert_ok(dk_axpb(dkt_cpu(&xt, x, DK_FLOAT32, DKT_DIMS(3)), dkt_cpu(&yt, y, DK_FLOAT32, DKT_DIMS(3)), 2, 2));
    assert_true(y[0] == 42 && y[1] == 42 && y[2] == 42);
    assert_true(x[0] == 1 && x[2] == 3); /* inputs untouched */

    /* op 2: two_out writes first and third; second is None; maybe_in is an input */
    float in[2] = {5, 5}, first[4] = {0}, third[2] = {0}, maybe[1] = {9};
    dkt_tensor it, ft, tt, mt;
    assert_ok(dk_two_out(dkt_cpu(&mt, maybe, DK_FLOAT32, DKT_DIMS(1)), dkt_cpu(&ft, first, DK_FLOAT32, DKT_DIMS(2, 2)),
                         dkt_cpu(&it, in, DK_FLOAT32, DKT_DIMS(2)), NULL, dkt_cpu(&tt, third, DK_FLOAT32, DKT_DIMS(2)),
                         0));
    for (int i = 0; i < 4; i++) assert_true(first[i] == 42);
    assert_true(third[0] == 42 && third[1] == 42);
    assert_true(in[0] == 5 && maybe[0] == 9);

    /* and through the boxed entry */
    value = -1;
    dk_stack s;
    dk_stack_init(&s);
    assert_ok(dk_stack_push(&s, dk_value_none()));
    assert_ok(dk_stack_push(&s, dk_value_tensor(&ft.t)));
    assert_ok(dk_stack_push(&s, dk_value_tensor(&it.t)));
    assert_ok(dk_stack_push(&s, dk_value_tensor(&tt.t)));
    assert_ok(dk_stack_push(&s, dk_value_none()));
    assert_ok(dk_stack_push(&s, dk_value_int(1)));
    assert_ok(dk_op_call_boxed(&dk_two_out_op, &s));
    assert_true(first[3] == -1 && third[1] == -1);
    assert_int_equal(fill_calls, 3);

    dk_tls_pop(p);
    /* Not included: axpb's own kernel runs again. */
    assert_ok(dk_axpb(&xt.t, &yt.t, 2, 2));
    assert_true(y[2] == 8);
    assert_int_equal(fill_calls, 3);
    assert_ok(dk_unregister(fb));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        dkt_test(stack_push_stops_at_capacity),
        dkt_test(value_constructors_set_tags),
        dkt_test(boxed_call_matches_the_typed_entry),
        dkt_test(boxed_kernel_matches_the_typed_kernel),
        dkt_test(a_boxed_kernel_hands_its_call_back_to_the_table),
        dkt_test(boxed_call_accepts_an_int_for_a_float),
        dkt_test(boxed_call_rejects_wrong_tags_naming_the_argument),
        dkt_test(boxed_call_with_too_few_values_is_an_error),
        dkt_test(boxed_call_validates_its_tensors_first),
        dkt_test(every_argument_kind_survives_boxing_and_unboxing),
        dkt_test(schema_string_of_every_kind),
        dkt_test(schema_of_roi_align),
        dkt_test(ops_are_listed_and_found_by_name),
        dkt_test(boxed_fallback_serves_any_op_through_its_schema),
    };
    return cmocka_run_group_tests(tests, group_setup, dkt_group_release_warnings);
}
