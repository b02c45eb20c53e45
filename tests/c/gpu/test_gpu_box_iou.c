/*
 * test_gpu_box_iou.c — box_iou's GPU kernels against its CPU kernel (whose values are the
 * references', test_kernel_box_iou.c), bit for bit: every kind (torchvision's four, MMCV's iou
 * and iof), every dtype (16-bit boxes computed in float32 and rounded where the references round;
 * integer boxes with their wrap-around), aligned or not, both offsets for MMCV's kinds, strided
 * inputs and outputs, degenerate, identical, NaN and infinite boxes, empty inputs, and more pairs
 * than one grid-stride pass covers. Built twice (gpu/dk_gpu_test.h): emulated on the host in
 * `make test-c`, on a real GPU in `make test-gpu`.
 */
#include <math.h>

#include "box_iou.h"
#include "gpu/dk_gpu_test.h"

#ifdef DKT_GPU_EMULATED
#include "box_iou/box_iou_gpu.h"
#define GPU_BOX_IOU dk_box_iou_gpu
#else
#define GPU_BOX_IOU dk_box_iou
#endif

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16, DK_INT32,
                                  DK_INT64,   DK_INT8,    DK_UINT8,   DK_INT16};
static bool is_int(dk_dtype dt)
{
    return dt == DK_INT8 || dt == DK_UINT8 || dt == DK_INT16 || dt == DK_INT32 || dt == DK_INT64;
}

/* n boxes, most random, every 11th special: reversed, flat, a point, a copy of box 0, NaN,
 * infinite (float), huge (integers: products that wrap around in int32 and int64, differences
 * that wrap around in int8, uint8 and int16). 8-bit boxes stay within their dtype. */
static dkk_tensor *make_boxes(dkk_rng *r, dk_dtype dt, int64_t n, int64_t gap)
{
    dkk_tensor *t = dkk_new(dt, 2, (int64_t[]){n, 4}, NULL, gap);
    for (int64_t i = 0; i < n; i++) {
        const double span = dt == DK_INT8 || dt == DK_UINT8 ? 40 : 150, base = span == 40 ? 10 : 0;
        const double x = base + dkk_uniform(r, 0, span), y = base + dkk_uniform(r, 0, span);
        double v[4] = {x, y, x + dkk_uniform(r, 0.5, 40), y + dkk_uniform(r, 0.5, 40)};
        switch (i % 11) {
        case 3: v[2] = v[0] - 5; break;
        case 4: v[3] = v[1]; break;
        case 5: v[0] = v[2] = v[1] = v[3] = 7; break;
        case 6:
            if (i > 0)
                for (int d = 0; d < 4; d++) v[d] = dkk_get(t, (int64_t[]){0, d});
            break;
        case 7:
            if (dt == DK_INT8) v[0] = -128, v[2] = 127; /* rb - lt wraps around at 8 bits */
            else if (dt == DK_UINT8) v[0] = 0, v[2] = 255;
            else if (dt == DK_INT16) v[1] = -32768, v[3] = 32767;               /* and at 16 */
            else if (is_int(dt)) v[2] = v[3] = dt == DK_INT32 ? 70000.0 : 6e12; /* areas wrap around */
            else v[1] = NAN;
            break;
        case 8:
            if (!is_int(dt)) v[2] = INFINITY;
            break;
        default: break;
        }
        for (int d = 0; d < 4; d++) dkk_set(t, (int64_t[]){i, d}, v[d]);
    }
    return t;
}

static void check(dk_dtype dt, int kind, bool aligned, int off, int64_t n, int64_t m, dkk_rng *r)
{
    const dk_dtype odt = dk_box_iou_out_dtype(kind, dt);
    if (odt == DK_DTYPE_UNSUPPORTED) return; /* MMCV's kinds take no integer boxes */
    char what[160];
    snprintf(what, sizeof what, "box_iou %s, kind %d, aligned %d, offset %d, %lld x %lld", dk_dtype_name(dt), kind,
             aligned, off, (long long)n, (long long)m);
    dkk_tensor *a = make_boxes(r, dt, n, 2), *b = make_boxes(r, dt, m, 0);
    dkk_tensor *out = aligned ? dkk_new(odt, 1, (int64_t[]){n}, NULL, 1) : dkk_new(odt, 2, (int64_t[]){n, m}, NULL, 3);
    dkk_tensor *gout = aligned ? dkk_new(odt, 1, (int64_t[]){n}, NULL, 1)
                               : dkk_new(odt, 2, (int64_t[]){n, m}, (int[]){1, 0}, 0);
    memset(gout->mem, 0x7f, gout->bytes); /* every element must be written */
    const double eps = 1e-7;
    assert_ok(dk_box_iou(&a->t, &b->t, &out->t, kind, aligned, eps, off));
    dkg_tensor da, db, dout;
    dkg_up(&da, a), dkg_up(&db, b), dkg_up(&dout, gout);
    assert_ok(GPU_BOX_IOU(&da.dev, &db.dev, &dout.dev, kind, aligned, eps, off));
    dkg_down(&dout);
    /* on a real GPU, complete IoU's atan is the device library's (gpu/dk_gpu_test.h) */
    dkg_assert_same_values(gout, out, kind == DK_BOX_CIOU ? 1e-6 : 0, what);
    dkg_release(&da), dkg_release(&db), dkg_release(&dout);
    dkk_free(a), dkk_free(b), dkk_free(out), dkk_free(gout);
}

static void every_kind_and_dtype(void **state)
{
    (void)state;
    dkk_rng r = {0xb01};
    static const int64_t sizes[][2] = {{0, 4}, {4, 0}, {0, 0}, {1, 1}, {45, 33}, {300, 7}};
    for (size_t t = 0; t < DK_COUNTOF(DTYPES); t++)
        for (int kind = 0; kind < DK_BOX_NKINDS; kind++)
            for (size_t z = 0; z < DK_COUNTOF(sizes); z++)
                for (int aligned = 0; aligned < 2; aligned++)
                    for (int off = 0; off < 2; off++) {
                        if (off && kind != DK_BOX_MMCV_IOU && kind != DK_BOX_MMCV_IOF) continue;
                        const int64_t n = sizes[z][0], m = aligned ? n : sizes[z][1];
                        check(DTYPES[t], kind, aligned, off, n, m, &r);
                    }
}

/* More pairs than the grid's threads (DK_GPU_MAX_BLOCKS x 256): every thread loops. */
static void beyond_one_grid(void **state)
{
    (void)state;
    dkk_rng r = {0xb02};
    check(DK_FLOAT32, DK_BOX_GIOU, false, 0, 1200, 1000, &r);
    check(DK_FLOAT16, DK_BOX_MMCV_IOU, false, 1, 1100, 1000, &r);
}

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kind_and_dtype),
        cmocka_unit_test(beyond_one_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
