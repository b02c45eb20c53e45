/*
 * test_gpu_rotated.c — the rotated-box GPU kernels against their CPU kernels: box_iou_rotated's
 * values (bit for bit, emulated), for every dtype, both modes, aligned or not, both angle
 * conventions, strided tensors, NaN, infinite and degenerate boxes, and more pairs than one
 * grid-stride pass covers; nms_rotated's kept indices, order and count, for every dtype,
 * thresholds that suppress much, little, everything or nothing (NaN), labels of every accepted
 * dtype (NaN and signed-zero labels included) or none, tied and NaN scores, clustered boxes,
 * sizes around the 64-box block, and masks made in one chunk or many. box_iou_quadri and
 * nms_quadri the same way, on quadrilaterals (rotated boxes' corners, any first vertex, either
 * direction, some non-convex, NaN and infinite). Built twice
 * (gpu/dk_gpu_test.h): emulated on the host in `make test-c`, on a real GPU in `make test-gpu`.
 */
#include <math.h>

#include "rotated.h" /* ops/rotated.h */
#include "dk_tunables.h"
#include "gpu/dk_gpu_test.h"

#ifdef DKT_GPU_EMULATED
#include "rotated/box_iou_quadri_gpu.h"
#include "rotated/box_iou_rotated_gpu.h"
#include "rotated/nms_quadri_gpu.h"
#include "rotated/nms_rotated_gpu.h"
#define GPU_BOX_IOU_ROTATED dk_box_iou_rotated_gpu
#define GPU_NMS_ROTATED dk_nms_rotated_gpu
#define GPU_BOX_IOU_QUADRI dk_box_iou_quadri_gpu
#define GPU_NMS_QUADRI dk_nms_quadri_gpu
#else
#define GPU_BOX_IOU_ROTATED dk_box_iou_rotated
#define GPU_NMS_ROTATED dk_nms_rotated
#define GPU_BOX_IOU_QUADRI dk_box_iou_quadri
#define GPU_NMS_QUADRI dk_nms_quadri
#endif

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};
#define PI 3.14159265358979323846
/* On a real GPU: sin and cos of the device's library (gpu/dk_gpu_test.h). */
#define ROTATED_TOL 1e-5

/* n boxes in [0, span)^2, sizes 2 to 40, any angle; every 29th is hostile (NaN, infinite,
 * degenerate, duplicate) when `hostile`. */
static dkk_tensor *random_rboxes(dkk_rng *r, dk_dtype dt, int64_t n, double span, int64_t gap, bool hostile)
{
    dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){n, 5}, NULL, gap);
    for (int64_t i = 0; i < n; i++) {
        double v[5] = {dkk_uniform(r, 0, span), dkk_uniform(r, 0, span), dkk_uniform(r, 2, 40), dkk_uniform(r, 2, 40),
                       dkk_uniform(r, -PI, PI)};
        if (hostile && i % 29 == 7) {
            static const int which[6] = {0, 2, 4, 1, 3, 2};
            const int w = which[(i / 29) % 6];
            v[w] = (i / 29) % 3 == 0 ? NAN : (i / 29) % 3 == 1 ? INFINITY : 0.0;
        }
        if (hostile && i % 29 == 11 && i > 0)
            for (int d = 0; d < 5; d++) v[d] = dkk_get(b, (int64_t[]){i - 1, d}); /* a duplicate */
        for (int d = 0; d < 5; d++) dkk_set(b, (int64_t[]){i, d}, v[d]);
    }
    return b;
}

static void check_ious(dk_dtype dt, int64_t n, int64_t m, int mode, bool aligned, bool cw, double span, dkk_rng *r)
{
    char what[160];
    snprintf(what, sizeof what, "box_iou_rotated %s, %lld x %lld, mode %d, aligned %d, clockwise %d", dk_dtype_name(dt),
             (long long)n, (long long)m, mode, aligned, cw);
    dkk_tensor *a = random_rboxes(r, dt, n, span, 3, true), *b = random_rboxes(r, dt, m, span, 0, true);
    dkk_tensor *out = aligned ? dkk_new(dt, 1, (int64_t[]){n}, NULL, 2)
                              : dkk_new(dt, 2, (int64_t[]){n, m}, (int[]){1, 0}, 1);
    dkk_tensor *gout = aligned ? dkk_new(dt, 1, (int64_t[]){n}, NULL, 2)
                               : dkk_new(dt, 2, (int64_t[]){n, m}, (int[]){1, 0}, 1);
    memset(gout->mem, 0x7f, gout->bytes); /* every element must be written */
    assert_ok(dk_box_iou_rotated(&a->t, &b->t, &out->t, mode, aligned, cw));
    dkg_tensor da, db, dout;
    dkg_up(&da, a), dkg_up(&db, b), dkg_up(&dout, gout);
    assert_ok(GPU_BOX_IOU_ROTATED(&da.dev, &db.dev, &dout.dev, mode, aligned, cw));
    dkg_down(&dout);
    dkg_assert_same_values(gout, out, ROTATED_TOL, what);
    dkg_release(&da), dkg_release(&db), dkg_release(&dout);
    dkk_free(a), dkk_free(b), dkk_free(out), dkk_free(gout);
}

static void box_iou_rotated_matches_cpu(void **state)
{
    (void)state;
    dkk_rng r = {0x51};
    static const int64_t sizes[][2] = {{0, 5}, {5, 0}, {1, 1}, {37, 23}, {70, 300}};
    for (size_t t = 0; t < DK_COUNTOF(DTYPES); t++)
        for (size_t z = 0; z < DK_COUNTOF(sizes); z++)
            for (int mode = 0; mode < 2; mode++)
                for (int aligned = 0; aligned < 2; aligned++) {
                    const int64_t n = sizes[z][0], m = aligned ? n : sizes[z][1];
                    check_ious(DTYPES[t], n, m, mode, aligned, (t + z + (size_t)mode) % 2, 120, &r);
                }
}

/* More pairs than the grid's threads (DK_GPU_MAX_BLOCKS x 256): every thread loops. */
static void box_iou_rotated_beyond_one_grid(void **state)
{
    (void)state;
    dkk_rng r = {0x52};
    check_ious(DK_FLOAT32, 1100, 1000, 0, false, true, 3000, &r);
}

static void check_nms(dk_dtype dt, const char *what, dkk_tensor *dets, dkk_tensor *scores, dkk_tensor *labels,
                      double thr, bool cw)
{
    char msg[200];
    const int64_t n = dets->shape[0];
    snprintf(msg, sizeof msg, "%s, %s, n %lld, threshold %g, labels %s, clockwise %d", what, dk_dtype_name(dt),
             (long long)n, thr, labels ? dk_dtype_name(dk_tensor_dtype(&labels->t)) : "none", cw);
    dkk_tensor *keep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dkk_tensor *gkeep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 1),
               *gnum = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    ((int64_t *)gnum->mem)[0] = -7; /* must be written */
    assert_ok(dk_nms_rotated(&dets->t, &scores->t, labels ? &labels->t : NULL, &keep->t, &num->t, thr, cw));
    dkg_tensor dd, ds, dl, dk, dn;
    dkg_up(&dd, dets), dkg_up(&ds, scores), dkg_up(&dk, gkeep), dkg_up(&dn, gnum);
    if (labels) dkg_up(&dl, labels);
    assert_ok(GPU_NMS_ROTATED(&dd.dev, &ds.dev, labels ? &dl.dev : NULL, &dk.dev, &dn.dev, thr, cw));
    dkg_down(&dk), dkg_down(&dn);
    dkg_assert_same_keep(keep, num, gkeep, gnum, msg);
    dkg_release(&dd), dkg_release(&ds), dkg_release(&dk), dkg_release(&dn);
    if (labels) dkg_release(&dl);
    dkk_free(keep), dkk_free(num), dkk_free(gkeep), dkk_free(gnum);
}

/* Labels of dtype ldt: three categories, and for float labels also NaN (one category) and
 * -0 beside +0 (one category). */
static dkk_tensor *make_labels(dk_dtype ldt, int64_t n, dkk_rng *r)
{
    dkk_tensor *l = dkk_new(ldt, 1, (int64_t[]){n}, NULL, 2);
    const bool fl = ldt != DK_INT32 && ldt != DK_INT64;
    for (int64_t i = 0; i < n; i++) {
        double v = (double)(dkk_u64(r) % 3);
        if (fl && i % 5 == 1) v = i % 2 ? NAN : -0.0;
        dkk_set(l, (int64_t[]){i}, v);
    }
    return l;
}

static void nms_case(dk_dtype dt, int64_t n, double thr, dk_dtype ldt, bool clustered, dkk_rng *r)
{
    dkk_tensor *dets = random_rboxes(r, dt, n, 150, 2, true);
    dkk_tensor *scores = dkk_new(dt, 1, (int64_t[]){n}, NULL, 1);
    for (int64_t i = 0; i < n; i++) {
        double s = (double)(dkk_u64(r) % 40) / 40.0; /* ties */
        if (i % 53 == 5) s = NAN;
        dkk_set(scores, (int64_t[]){i}, s);
    }
    if (clustered) /* many near-duplicates of a few boxes */
        for (int64_t i = 0; i < n; i++)
            for (int d = 0; d < 5; d++)
                dkk_set(dets, (int64_t[]){i, d},
                        dkk_get(dets, (int64_t[]){i % 7, d}) + dkk_uniform(r, -1, 1) * (d == 4 ? 0.2 : 3));
    if (ldt != DK_DTYPE_UNSUPPORTED && ldt != DK_INT32 && ldt != DK_INT64)
        ldt = dt; /* float labels: the boxes' dtype */
    dkk_tensor *labels = ldt == DK_DTYPE_UNSUPPORTED ? NULL : make_labels(ldt, n, r);
    check_nms(dt, clustered ? "nms_rotated clustered" : "nms_rotated", dets, scores, labels, thr,
              (n + (int64_t)clustered) % 2);
    dkk_free(dets), dkk_free(scores), dkk_free(labels);
}

static void run_nms_all(void)
{
    static const int64_t sizes[] = {0, 1, 63, 64, 65, 300};
    static const double thrs[] = {0.5, 0.1, 0.0, -1.0, NAN};
    /* none, integers, the boxes' own dtype (nms_case) */
    static const dk_dtype ldts[] = {DK_DTYPE_UNSUPPORTED, DK_INT32, DK_INT64, DK_FLOAT32};
    dkk_rng r = {0x9f1};
    for (size_t t = 0; t < DK_COUNTOF(DTYPES); t++)
        for (size_t z = 0; z < DK_COUNTOF(sizes); z++)
            for (size_t k = 0; k < DK_COUNTOF(thrs); k++)
                for (size_t l = 0; l < DK_COUNTOF(ldts); l++)
                    for (int c = 0; c < 2; c++) {
                        if ((l || c) && (k > 1 || (z != 5 && z != 2))) continue; /* keep it quick */
                        nms_case(DTYPES[t], sizes[z], thrs[k], ldts[l], c, &r);
                    }
}

static void nms_rotated_matches_cpu_in_one_chunk(void **state)
{
    (void)state;
    run_nms_all();
}

static void nms_rotated_matches_cpu_one_block_per_chunk(void **state)
{
    (void)state;
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", 8, NULL)); /* every 64 rows a chunk */
    run_nms_all();
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", (int64_t)64 << 20, NULL));
}

/* 2,000 boxes: 32 mask words per row, several chunks of several blocks. */
static void nms_rotated_many_boxes_in_several_chunks(void **state)
{
    (void)state;
    dkk_rng r = {0x9f2};
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", 64 * 32 * 8 * 3, NULL));
    nms_case(DK_FLOAT32, 2000, 0.5, DK_DTYPE_UNSUPPORTED, false, &r);
    nms_case(DK_FLOAT32, 2000, 0.2, DK_INT64, true, &r);
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", (int64_t)64 << 20, NULL));
}

/* ---- quadrilaterals ------------------------------------------------------------------------ */

/* n quadrilaterals: the corners of random rotated boxes (in [0, span)^2), from a random first
 * vertex, clockwise or not; every 13th has a vertex moved inwards (non-convex), every 29th a NaN,
 * infinite or repeated vertex when `hostile`. */
static dkk_tensor *random_quads(dkk_rng *r, dk_dtype dt, int64_t n, double span, int64_t gap, bool hostile)
{
    dkk_tensor *q = dkk_new(dt, 2, (int64_t[]){n, 8}, NULL, gap);
    for (int64_t i = 0; i < n; i++) {
        const double cx = dkk_uniform(r, 0, span), cy = dkk_uniform(r, 0, span), w = dkk_uniform(r, 2, 40),
                     h = dkk_uniform(r, 2, 40), a = dkk_uniform(r, -PI, PI);
        const double ux[4] = {-w / 2, w / 2, w / 2, -w / 2}, uy[4] = {-h / 2, -h / 2, h / 2, h / 2};
        const int first = (int)(dkk_u64(r) % 4), dir = dkk_u64(r) % 2 ? 1 : 3;
        double v[8];
        for (int k = 0; k < 4; k++) {
            const int c = (first + dir * k) % 4;
            v[2 * k] = cx + cos(a) * ux[c] - sin(a) * uy[c];
            v[2 * k + 1] = cy + sin(a) * ux[c] + cos(a) * uy[c];
        }
        if (i % 13 == 4) v[0] = 0.8 * cx + 0.2 * v[0], v[1] = 0.8 * cy + 0.2 * v[1]; /* a reflex vertex */
        if (hostile && i % 29 == 7) v[(i / 29) % 8] = (i / 29) % 3 == 0 ? NAN : (i / 29) % 3 == 1 ? INFINITY : v[2];
        for (int d = 0; d < 8; d++) dkk_set(q, (int64_t[]){i, d}, v[d]);
    }
    return q;
}

static void check_quad_ious(dk_dtype dt, int64_t n, int64_t m, int mode, bool aligned, dkk_rng *r)
{
    char what[160];
    snprintf(what, sizeof what, "box_iou_quadri %s, %lld x %lld, mode %d, aligned %d", dk_dtype_name(dt), (long long)n,
             (long long)m, mode, aligned);
    dkk_tensor *a = random_quads(r, dt, n, 120, 3, true), *b = random_quads(r, dt, m, 120, 0, true);
    dkk_tensor *out = aligned ? dkk_new(dt, 1, (int64_t[]){n}, NULL, 2) : dkk_new(dt, 2, (int64_t[]){n, m}, NULL, 1);
    dkk_tensor *gout = aligned ? dkk_new(dt, 1, (int64_t[]){n}, NULL, 2) : dkk_new(dt, 2, (int64_t[]){n, m}, NULL, 1);
    memset(gout->mem, 0x7f, gout->bytes); /* every element must be written */
    assert_ok(dk_box_iou_quadri(&a->t, &b->t, &out->t, mode, aligned));
    dkg_tensor da, db, dout;
    dkg_up(&da, a), dkg_up(&db, b), dkg_up(&dout, gout);
    assert_ok(GPU_BOX_IOU_QUADRI(&da.dev, &db.dev, &dout.dev, mode, aligned));
    dkg_down(&dout);
    dkg_assert_same_values(gout, out, ROTATED_TOL, what);
    dkg_release(&da), dkg_release(&db), dkg_release(&dout);
    dkk_free(a), dkk_free(b), dkk_free(out), dkk_free(gout);
}

static void box_iou_quadri_matches_cpu(void **state)
{
    (void)state;
    dkk_rng r = {0x71};
    static const int64_t sizes[][2] = {{0, 5}, {5, 0}, {1, 1}, {37, 23}, {70, 300}};
    for (size_t t = 0; t < DK_COUNTOF(DTYPES); t++)
        for (size_t z = 0; z < DK_COUNTOF(sizes); z++)
            for (int mode = 0; mode < 2; mode++)
                for (int aligned = 0; aligned < 2; aligned++)
                    check_quad_ious(DTYPES[t], sizes[z][0], aligned ? sizes[z][0] : sizes[z][1], mode, aligned, &r);
}

static void quad_nms_case(dk_dtype dt, int64_t n, double thr, bool labelled, dkk_rng *r)
{
    char msg[160];
    snprintf(msg, sizeof msg, "nms_quadri %s, n %lld, threshold %g, labels %d", dk_dtype_name(dt), (long long)n, thr,
             labelled);
    dkk_tensor *dets = random_quads(r, dt, n, 150, 2, true);
    for (int64_t i = 7; i < n; i++) /* near-duplicates of a few boxes */
        for (int d = 0; d < 8 && i % 3 == 0; d++)
            dkk_set(dets, (int64_t[]){i, d}, dkk_get(dets, (int64_t[]){i % 7, d}) + dkk_uniform(r, -2, 2));
    dkk_tensor *scores = dkk_new(dt, 1, (int64_t[]){n}, NULL, 1);
    for (int64_t i = 0; i < n; i++) dkk_set(scores, (int64_t[]){i}, i % 53 == 5 ? NAN : (double)(dkk_u64(r) % 40) / 40);
    dkk_tensor *labels = labelled ? make_labels(DK_INT64, n, r) : NULL;
    dkk_tensor *keep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dkk_tensor *gkeep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 1),
               *gnum = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    assert_ok(dk_nms_quadri(&dets->t, &scores->t, labels ? &labels->t : NULL, &keep->t, &num->t, thr));
    dkg_tensor dd, ds, dl, dk, dn;
    dkg_up(&dd, dets), dkg_up(&ds, scores), dkg_up(&dk, gkeep), dkg_up(&dn, gnum);
    if (labels) dkg_up(&dl, labels);
    assert_ok(GPU_NMS_QUADRI(&dd.dev, &ds.dev, labels ? &dl.dev : NULL, &dk.dev, &dn.dev, thr));
    dkg_down(&dk), dkg_down(&dn);
    dkg_assert_same_keep(keep, num, gkeep, gnum, msg);
    dkg_release(&dd), dkg_release(&ds), dkg_release(&dk), dkg_release(&dn);
    if (labels) dkg_release(&dl);
    dkk_free(dets), dkk_free(scores), dkk_free(labels), dkk_free(keep), dkk_free(num), dkk_free(gkeep), dkk_free(gnum);
}

static void nms_quadri_matches_cpu(void **state)
{
    (void)state;
    static const int64_t sizes[] = {0, 1, 63, 65, 300};
    static const double thrs[] = {0.5, 0.1, 0.0, NAN};
    dkk_rng r = {0x72};
    for (size_t t = 0; t < DK_COUNTOF(DTYPES); t++)
        for (size_t z = 0; z < DK_COUNTOF(sizes); z++)
            for (size_t k = 0; k < DK_COUNTOF(thrs); k++) quad_nms_case(DTYPES[t], sizes[z], thrs[k], k == 1, &r);
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", 8, NULL)); /* every 64 rows a chunk */
    quad_nms_case(DK_FLOAT32, 300, 0.3, true, &r);
    assert_ok(dk_tunable_set("nms.gpu_chunk_bytes", (int64_t)64 << 20, NULL));
}

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(box_iou_rotated_matches_cpu),
        cmocka_unit_test(box_iou_rotated_beyond_one_grid),
        cmocka_unit_test(nms_rotated_matches_cpu_in_one_chunk),
        cmocka_unit_test(nms_rotated_matches_cpu_one_block_per_chunk),
        cmocka_unit_test(nms_rotated_many_boxes_in_several_chunks),
        cmocka_unit_test(box_iou_quadri_matches_cpu),
        cmocka_unit_test(nms_quadri_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
