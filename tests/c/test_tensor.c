/* test_tensor.c — dtypes, sizes, strides, contiguity, channels-last and device names; the CPU
 * kernels' thread count. */
#include "dk_parallel.h"
#include "dk_test.h"

static void dtype_round_trips_through_dlpack(void **state)
{
    (void)state;
    for (int d = 0; d < DK_DTYPE_UNSUPPORTED; d++) {
        DLDataType t = dk_dtype_to_dl((dk_dtype)d);
        assert_int_equal(t.lanes, 1);
        assert_int_equal(dk_dtype_from_dl(t), d);
    }
}

static void dtype_to_dlpack_uses_the_spec_codes(void **state)
{
    (void)state;
    static const struct {
        dk_dtype d;
        uint8_t code, bits;
        const char *name;
        size_t size;
    } table[] = {
        {DK_FLOAT16, kDLFloat, 16, "float16", 2}, {DK_BFLOAT16, kDLBfloat, 16, "bfloat16", 2},
        {DK_FLOAT32, kDLFloat, 32, "float32", 4}, {DK_FLOAT64, kDLFloat, 64, "float64", 8},
        {DK_INT32, kDLInt, 32, "int32", 4},       {DK_INT64, kDLInt, 64, "int64", 8},
        {DK_UINT8, kDLUInt, 8, "uint8", 1},       {DK_BOOL, kDLBool, 8, "bool", 1},
        {DK_INT8, kDLInt, 8, "int8", 1},          {DK_INT16, kDLInt, 16, "int16", 2},
    };
    assert_int_equal(DK_COUNTOF(table), DK_DTYPE_UNSUPPORTED);
    for (size_t i = 0; i < DK_COUNTOF(table); i++) {
        DLDataType t = dk_dtype_to_dl(table[i].d);
        assert_int_equal(t.code, table[i].code);
        assert_int_equal(t.bits, table[i].bits);
        assert_string_equal(dk_dtype_name(table[i].d), table[i].name);
        assert_int_equal(dk_dtype_size(table[i].d), table[i].size);
        DLDataType back = {table[i].code, table[i].bits, 1};
        assert_int_equal(dk_dtype_from_dl(back), table[i].d);
    }
}

static void dtype_from_dlpack_rejects_unknown_types(void **state)
{
    (void)state;
    DLDataType vec = {kDLFloat, 32, 4}; /* float32x4: lanes must be 1 */
    DLDataType cplx = {kDLComplex, 64, 1};
    DLDataType f8 = {kDLFloat8_e4m3fn, 8, 1};
    DLDataType u16 = {kDLUInt, 16, 1};
    DLDataType bf32 = {kDLBfloat, 32, 1};
    assert_int_equal(dk_dtype_from_dl(vec), DK_DTYPE_UNSUPPORTED);
    assert_int_equal(dk_dtype_from_dl(cplx), DK_DTYPE_UNSUPPORTED);
    assert_int_equal(dk_dtype_from_dl(f8), DK_DTYPE_UNSUPPORTED);
    assert_int_equal(dk_dtype_from_dl(u16), DK_DTYPE_UNSUPPORTED);
    assert_int_equal(dk_dtype_from_dl(bf32), DK_DTYPE_UNSUPPORTED);
    assert_string_equal(dk_dtype_name(DK_DTYPE_UNSUPPORTED), "unsupported");
    assert_string_equal(dk_dtype_name((dk_dtype)1234), "unsupported");
    assert_int_equal(dk_dtype_size(DK_DTYPE_UNSUPPORTED), 0);
    DLDataType zero = dk_dtype_to_dl(DK_DTYPE_UNSUPPORTED);
    assert_int_equal(zero.bits, 0);
    assert_int_equal(zero.lanes, 0);
}

static void dl_dtype_str_names_supported_and_describes_others(void **state)
{
    (void)state;
    char buf[64];
    DLDataType f32 = {kDLFloat, 32, 1};
    DLDataType vec = {kDLInt, 16, 2};
    assert_string_equal(dk_dl_dtype_str(f32, buf, sizeof buf), "float32");
    assert_string_equal(dk_dl_dtype_str(vec, buf, sizeof buf), "dtype(code 0, bits 16, lanes 2)");
    /* Dtypes dkit does not compute with are named too: an int8 input is "int8" in a message. */
    const struct {
        DLDataType t;
        const char *name;
    } named[] = {
        {{kDLInt, 8, 1}, "int8"},
        {{kDLUInt, 16, 1}, "uint16"},
        {{kDLComplex, 64, 1}, "complex64"},
        {{kDLFloat8_e4m3fn, 8, 1}, "float8_e4m3fn"},
        {{kDLBfloat, 32, 1}, "bfloat32"},
        {{kDLBool, 16, 1}, "dtype(code 6, bits 16, lanes 1)"},
        {{99, 8, 1}, "dtype(code 99, bits 8, lanes 1)"},
    };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        assert_string_equal(dk_dl_dtype_str(named[i].t, buf, sizeof buf), named[i].name);
    /* Truncates into a small buffer without overflowing it. */
    char small[8];
    memset(small, 'x', sizeof small);
    dk_dl_dtype_str(vec, small, 6);
    assert_string_equal(small, "dtype");
    assert_int_equal(small[6], 'x');
}

static void numel_and_nbytes(void **state)
{
    (void)state;
    dkt_tensor tt;
    dk_tensor *t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(2, 3, 4));
    assert_int_equal(dk_tensor_numel(t), 24);
    assert_int_equal(dk_tensor_nbytes(t), 96);

    t = dkt_cpu(&tt, NULL, DK_FLOAT16, 0, NULL); /* a scalar */
    assert_int_equal(dk_tensor_numel(t), 1);
    assert_int_equal(dk_tensor_nbytes(t), 2);

    t = dkt_cpu(&tt, NULL, DK_FLOAT64, DKT_DIMS(5, 0, 7));
    assert_int_equal(dk_tensor_numel(t), 0);
    assert_int_equal(dk_tensor_nbytes(t), 0);

    t = dkt_cpu(&tt, NULL, DK_BOOL, DKT_DIMS(3, 5));
    assert_int_equal(dk_tensor_nbytes(t), 15);

    t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(4, -1)); /* nonsense shape: no elements, no UB */
    assert_int_equal(dk_tensor_numel(t), 0);
}

static void numel_and_nbytes_saturate_instead_of_overflowing(void **state)
{
    (void)state;
    dkt_tensor tt;
    int64_t big = (int64_t)1 << 40;
    dk_tensor *t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(big, big));
    assert_int_equal(dk_tensor_numel(t), INT64_MAX);
    assert_int_equal(dk_tensor_nbytes(t), INT64_MAX);

    /* numel fits, nbytes does not. */
    t = dkt_cpu(&tt, NULL, DK_FLOAT64, DKT_DIMS((int64_t)1 << 61, 1));
    assert_int_equal(dk_tensor_numel(t), (int64_t)1 << 61);
    assert_int_equal(dk_tensor_nbytes(t), INT64_MAX);

    /* Exactly INT64_MAX elements is not an overflow. */
    t = dkt_cpu(&tt, NULL, DK_UINT8, DKT_DIMS(INT64_MAX, 1));
    assert_int_equal(dk_tensor_numel(t), INT64_MAX);
    assert_int_equal(dk_tensor_nbytes(t), INT64_MAX);
}

static void stride_honours_null_strides_and_negative_dims(void **state)
{
    (void)state;
    dkt_tensor tt;
    dk_tensor *t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(2, 3, 4));
    assert_int_equal(dk_tensor_stride(t, 0), 12);
    assert_int_equal(dk_tensor_stride(t, 1), 4);
    assert_int_equal(dk_tensor_stride(t, 2), 1);
    assert_int_equal(dk_tensor_stride(t, -1), 1);
    assert_int_equal(dk_tensor_stride(t, -3), 12);
    assert_int_equal(dk_tensor_stride(t, 3), 0);
    assert_int_equal(dk_tensor_stride(t, -4), 0);
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3), DKT_STRIDES(1, 2));
    assert_int_equal(dk_tensor_stride(t, 0), 1);
    assert_int_equal(dk_tensor_stride(t, -1), 2);
}

static void contiguity(void **state)
{
    (void)state;
    dkt_tensor tt;
    /* NULL strides */
    assert_true(dk_tensor_is_contiguous(dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(2, 3, 4))));
    /* explicit compact strides */
    assert_true(dk_tensor_is_contiguous(
        dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3, 4), DKT_STRIDES(12, 4, 1))));
    /* size-1 dims may have any stride */
    assert_true(dk_tensor_is_contiguous(
        dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 1, 4), DKT_STRIDES(4, 99, 1))));
    assert_true(dk_tensor_is_contiguous(
        dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(1, 1, 1), DKT_STRIDES(7, -3, 0))));
    /* transposed */
    assert_false(
        dk_tensor_is_contiguous(dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(3, 2), DKT_STRIDES(1, 3))));
    /* a sliced (padded) row */
    assert_false(
        dk_tensor_is_contiguous(dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3), DKT_STRIDES(4, 1))));
    /* broadcast (stride 0 on a real dimension) */
    assert_false(
        dk_tensor_is_contiguous(dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3), DKT_STRIDES(0, 1))));
    /* 0-d */
    assert_true(dk_tensor_is_contiguous(dkt_cpu(&tt, NULL, DK_FLOAT32, 0, NULL)));
}

static void channels_last_detection(void **state)
{
    (void)state;
    dkt_tensor tt;
    dk_tensor *t;
    /* N=2 C=3 H=4 W=5 stored NHWC */
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3, 4, 5), DKT_STRIDES(60, 1, 15, 3));
    assert_true(dk_tensor_is_channels_last(t));
    assert_false(dk_tensor_is_contiguous(t));
    /* NCHW, NULL and explicit strides */
    t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(2, 3, 4, 5));
    assert_false(dk_tensor_is_channels_last(t));
    assert_true(dk_tensor_is_contiguous(t));
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3, 4, 5), DKT_STRIDES(60, 20, 5, 1));
    assert_false(dk_tensor_is_channels_last(t));
    /* C == 1: the same memory is both */
    t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(2, 1, 4, 5));
    assert_true(dk_tensor_is_channels_last(t));
    assert_true(dk_tensor_is_contiguous(t));
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 1, 4, 5), DKT_STRIDES(20, 1, 5, 1));
    assert_true(dk_tensor_is_channels_last(t));
    assert_true(dk_tensor_is_contiguous(t));
    /* H == W == 1 with NULL strides: also both */
    t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(2, 3, 1, 1));
    assert_true(dk_tensor_is_channels_last(t));
    /* NHWC with a padded channel stride is neither */
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3, 4, 5), DKT_STRIDES(80, 1, 20, 4));
    assert_false(dk_tensor_is_channels_last(t));
    assert_false(dk_tensor_is_contiguous(t));
    /* NHWC-like strides in 3-d and 5-d tensors are not channels-last */
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(3, 4, 5), DKT_STRIDES(1, 15, 3));
    assert_false(dk_tensor_is_channels_last(t));
    t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(1, 1, 1, 1, 1));
    assert_false(dk_tensor_is_channels_last(t));
}

static void repeated_dim_finds_expanded_dimensions(void **state)
{
    (void)state;
    dkt_tensor tt;
    dk_tensor *t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(2, 3, 4)); /* NULL strides: compact */
    assert_int_equal(dk_tensor_repeated_dim(t), -1);
    /* stride 0 on a size-1 dimension repeats nothing */
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(1, 3, 4), DKT_STRIDES(0, 4, 1));
    assert_int_equal(dk_tensor_repeated_dim(t), -1);
    /* an expanded view: the first dimension of stride 0 and size > 1 */
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3, 4), DKT_STRIDES(12, 0, 0));
    assert_int_equal(dk_tensor_repeated_dim(t), 1);
    /* negative and padded strides repeat nothing either */
    t = dkt_tensor_init(&tt, NULL, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(2, 3, 4), DKT_STRIDES(-20, 5, 1));
    assert_int_equal(dk_tensor_repeated_dim(t), -1);
    /* 0-d */
    t = dkt_cpu(&tt, NULL, DK_FLOAT32, 0, NULL);
    assert_int_equal(dk_tensor_repeated_dim(t), -1);
}

static void tensor_data_adds_the_byte_offset(void **state)
{
    (void)state;
    float buf[8];
    dkt_tensor tt;
    dk_tensor *t = dkt_cpu(&tt, buf, DK_FLOAT32, DKT_DIMS(4));
    t->byte_offset = 3 * sizeof(float);
    assert_ptr_equal(dk_tensor_data(t), &buf[3]);
    assert_int_equal(dk_tensor_dtype(t), DK_FLOAT32);
}

static void device_strings(void **state)
{
    (void)state;
    char buf[64];
    DLDevice cpu = {kDLCPU, 0}, cuda1 = {kDLCUDA, 1}, hip0 = {kDLROCM, 0}, pinned = {kDLCUDAHost, 0},
             vulkan = {kDLVulkan, 2}, odd = {(DLDeviceType)30, 3};
    assert_string_equal(dk_device_str(cpu, buf, sizeof buf), "cpu");
    assert_string_equal(dk_device_str(cuda1, buf, sizeof buf), "cuda:1");
    assert_string_equal(dk_device_str(hip0, buf, sizeof buf), "hip:0");
    assert_string_equal(dk_device_str(pinned, buf, sizeof buf), "cuda_host:0");
    assert_string_equal(dk_device_str(vulkan, buf, sizeof buf), "vulkan:2");
    assert_string_equal(dk_device_str(odd, buf, sizeof buf), "device_type_30:3");
    /* A vendor backend's device type is named after the backend. */
    dk_key k;
    assert_ok(dk_backend_key_register("tensorvendor", 29, &k));
    DLDevice v = {(DLDeviceType)29, 5};
    assert_string_equal(dk_device_str(v, buf, sizeof buf), "tensorvendor:5");
}

static void *num_threads_of_another_thread(void *seen)
{
    *(int *)seen = dk_get_num_threads();
    return NULL;
}

static void num_threads_is_process_wide_and_zero_restores_openmps(void **state)
{
    (void)state;
    const int dflt = dk_get_num_threads();
    assert_true(dflt >= 1);
    assert_ok(dk_set_num_threads(3));
    assert_int_equal(dk_get_num_threads(), 3);
    int seen = 0;
    pthread_t th; /* another thread sees it too, unlike omp_set_num_threads */
    assert_int_equal(pthread_create(&th, NULL, num_threads_of_another_thread, &seen), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(seen, 3);
    assert_error(dk_set_num_threads(-1), DK_EINVAL,
                 "set_num_threads: the thread count must be >= 0 (0: OpenMP's default), got -1");
    assert_int_equal(dk_get_num_threads(), 3); /* a refused call changes nothing */
    assert_ok(dk_set_num_threads(0));
    assert_int_equal(dk_get_num_threads(), dflt);
}

/* Note [Untrusted tensors] (dk_check.h). */
static void untrusted_tensors_are_validated_before_use(void **state)
{
    (void)state;
    float buf[64];
    dkt_tensor tt;
    dk_tensor *t = dkt_cpu(&tt, buf, DK_FLOAT32, DKT_DIMS(4, 4));
    assert_ok(dk_tensor_validate(t, "op", "x"));
    t->ndim = 65;
    assert_error(dk_tensor_validate(t, "op", "x"), DK_EBUFFER,
                 "op: parameter 'x' has 65 dimensions (0 to 64 are supported)");
    t->ndim = -1;
    assert_int_equal(dk_tensor_validate(t, "op", "x"), DK_EBUFFER);
    t->ndim = 2;
    t->shape = NULL;
    assert_error(dk_tensor_validate(t, "op", "x"), DK_EBUFFER,
                 "op: parameter 'x' is a malformed DLTensor (ndim 2, shape NULL)");
    t = dkt_cpu(&tt, buf, DK_FLOAT32, DKT_DIMS(4, 4));
    t->dtype.lanes = 0;
    assert_error(dk_tensor_validate(t, "op", "x"), DK_EBUFFER,
                 "op: parameter 'x' has a malformed dtype (code 2, bits 32, lanes 0)");
    t->dtype.lanes = 1;
    t->dtype.bits = 12;
    assert_int_equal(dk_tensor_validate(t, "op", "x"), DK_EBUFFER);
    t->dtype.bits = 32;
    t->data = NULL;
    assert_int_equal(dk_tensor_validate(t, "op", "x"), DK_EBUFFER);
    assert_true(strstr(dk_last_error(), "has elements but no memory") != NULL);
    /* no elements: a NULL pointer is fine */
    t = dkt_cpu(&tt, NULL, DK_FLOAT32, DKT_DIMS(0, 4));
    assert_ok(dk_tensor_validate(t, "op", "x"));
    /* byte offsets past 64 bits */
    t = dkt_tensor_init(&tt, buf, kDLCPU, 0, DK_FLOAT32, DKT_DIMS(INT64_C(1) << 40, INT64_C(1) << 40),
                        DKT_STRIDES(INT64_C(1) << 40, 1));
    assert_error(dk_tensor_validate(t, "op", "x"), DK_EBUFFER,
                 "op: parameter 'x' has a shape and strides that overflow 64-bit offsets");
    t = dkt_cpu(&tt, buf, DK_FLOAT32, DKT_DIMS(4, 4));
    t->byte_offset = UINT64_MAX;
    assert_int_equal(dk_tensor_validate(t, "op", "x"), DK_EBUFFER);
    assert_int_equal(dk_tensor_validate(NULL, "op", "x"), DK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(untrusted_tensors_are_validated_before_use),
        cmocka_unit_test(dtype_round_trips_through_dlpack),
        cmocka_unit_test(dtype_to_dlpack_uses_the_spec_codes),
        cmocka_unit_test(dtype_from_dlpack_rejects_unknown_types),
        cmocka_unit_test(dl_dtype_str_names_supported_and_describes_others),
        cmocka_unit_test(numel_and_nbytes),
        cmocka_unit_test(numel_and_nbytes_saturate_instead_of_overflowing),
        cmocka_unit_test(stride_honours_null_strides_and_negative_dims),
        cmocka_unit_test(contiguity),
        cmocka_unit_test(channels_last_detection),
        cmocka_unit_test(repeated_dim_finds_expanded_dimensions),
        cmocka_unit_test(tensor_data_adds_the_byte_offset),
        cmocka_unit_test(device_strings),
        cmocka_unit_test(num_threads_is_process_wide_and_zero_restores_openmps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
