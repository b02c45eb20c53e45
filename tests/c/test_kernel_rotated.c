/*
 * test_kernel_rotated.c — rotated boxes: the shared math (kernels/rotated_math.h) against
 * areas computed by hand and against an independent clipper written here (Sutherland-Hodgman on
 * the exact corners, in double); then the CPU box_iou_rotated and nms_rotated kernels against
 * loops over that math (every pair; MMCV's suppression loop), every dtype, any strides, and
 * their refusals. Quadrilaterals (dk_quad_overlap, box_iou_quadri, nms_quadri): MMCV's published
 * case with values by hand, the same clipper on rotated boxes' corners in any vertex order, twins,
 * hostile vertices, the kernels and their refusals.
 */
#include "dk_kernel_test.h"
#include "dk_parallel.h"
#include "dk_tunables.h"
#include "rotated.h" /* ops/rotated.h */
#include "kernels/rotated_math.h"

#define PI 3.14159265358979323846

static double iou64(const double *a, const double *b) { return dk_rbox_overlap_f64(a, b, DK_RBOX_IOU, true); }
static double iof64(const double *a, const double *b) { return dk_rbox_overlap_f64(a, b, DK_RBOX_IOF, true); }
static float iou32(const double *a, const double *b)
{
    float fa[5], fb[5];
    for (int d = 0; d < 5; d++) fa[d] = (float)a[d], fb[d] = (float)b[d];
    return dk_rbox_overlap_f32(fa, fb, DK_RBOX_IOU, true);
}

/* ---- an independent reference: clip one convex polygon by the other ---------------------- */

/* Corners counter-clockwise in a y-up frame (any consistent order works for the clipper) of the
 * box rotated by the standard matrix R(theta): MMCV's clockwise convention in y-down images. */
static void ref_corners(const double *b, bool clockwise, double *x, double *y)
{
    const double t = clockwise ? b[4] : -b[4], c = cos(t), s = sin(t);
    const double u[4] = {-0.5, 0.5, 0.5, -0.5}, v[4] = {-0.5, -0.5, 0.5, 0.5};
    for (int i = 0; i < 4; i++) {
        const double px = u[i] * b[2], py = v[i] * b[3];
        x[i] = b[0] + c * px - s * py;
        y[i] = b[1] + s * px + c * py;
    }
}

static double ref_area(const double *x, const double *y, int n)
{
    double a = 0;
    for (int i = 0; i < n; i++) a += x[i] * y[(i + 1) % n] - x[(i + 1) % n] * y[i];
    return fabs(a) / 2;
}

/* Area of the intersection of quadrilateral (px, py) with the convex counter-clockwise
 * quadrilateral (cx, cy), by Sutherland-Hodgman; px, py hold 16 and are overwritten. */
static double ref_clip(double *px, double *py, const double *cx, const double *cy)
{
    double qx[16], qy[16];
    int n = 4;
    for (int e = 0; e < 4 && n > 0; e++) {
        const double ex = cx[(e + 1) % 4] - cx[e], ey = cy[(e + 1) % 4] - cy[e];
        int m = 0;
        for (int i = 0; i < n; i++) {
            const int j = (i + 1) % n;
            const double si = ex * (py[i] - cy[e]) - ey * (px[i] - cx[e]);
            const double sj = ex * (py[j] - cy[e]) - ey * (px[j] - cx[e]);
            if (si >= 0) qx[m] = px[i], qy[m++] = py[i];
            if ((si >= 0) != (sj >= 0)) {
                const double t = si / (si - sj);
                qx[m] = px[i] + t * (px[j] - px[i]);
                qy[m++] = py[i] + t * (py[j] - py[i]);
            }
        }
        memcpy(px, qx, sizeof qx);
        memcpy(py, qy, sizeof qy);
        n = m;
    }
    return n >= 3 ? ref_area(px, py, n) : 0;
}

/* Area of the intersection of two boxes (w, h > 0). */
static double ref_inter(const double *a, const double *b, bool clockwise)
{
    double px[16], py[16], cx[4], cy[4];
    ref_corners(a, clockwise, px, py);
    ref_corners(b, clockwise, cx, cy);
    return ref_clip(px, py, cx, cy);
}

static double ref_iou(const double *a, const double *b, bool clockwise)
{
    const double i = ref_inter(a, b, clockwise);
    return i / (a[2] * a[3] + b[2] * b[3] - i);
}

/* ---- hand-computed areas ----------------------------------------------------------------- */

static void identical_boxes(void **state)
{
    (void)state;
    const double a[5] = {3, -2, 4, 2, 0.7};
    assert_float_equal(dk_rbox_intersection_f64(a, a, true), 8.0, 1e-12);
    assert_float_equal(iou64(a, a), 1.0, 1e-12);
    assert_float_equal(iou32(a, a), 1.0, 1e-6);
    /* boxes far from the origin keep their precision (MMCV's centre shift) */
    const double far[5] = {12345.5, -9876.25, 4, 2, 0.7};
    assert_float_equal(iou32(far, far), 1.0, 1e-6);
    /* the same rectangle described twice: w x h at 90 degrees is h x w at 0 */
    const double r90[5] = {0, 0, 4, 2, PI / 2}, r0[5] = {0, 0, 2, 4, 0};
    assert_float_equal(iou64(r90, r0), 1.0, 1e-12);
}

/* One rectangle written two ways (Note [Clipping rotated boxes]): angle + pi, angle - pi, or w and
 * h swapped with angle + pi/2. MMCV's hull gave 2.2, 0.25 and 4.33 for the first three; every
 * overlap stays within [0, 1] and comes to 1 to rounding (float32: the twin's angle is rounded,
 * which moves its corners by about 1e-7 of its size). */
static void a_box_written_two_ways(void **state)
{
    (void)state;
    static const double cases[][2][5] = {
        {{0, 0, 6, 5, 0}, {0, 0, 6, 5, PI}},
        {{25, 25, 20, 10, 0.3 + PI}, {25, 25, 20, 10, 0.3}},
        {{10, 5, 10, 10, PI}, {10, 5, 10, 10, PI / 2}},
    };
    for (size_t c = 0; c < DK_COUNTOF(cases); c++) {
        assert_float_equal(iou64(cases[c][0], cases[c][1]), 1.0, 1e-12);
        assert_float_equal(iou32(cases[c][0], cases[c][1]), 1.0, 1e-6);
    }
    dkk_rng r = {0x7a1};
    for (int i = 0; i < 100000; i++) {
        double a[5] = {dkk_uniform(&r, -50, 50), dkk_uniform(&r, -50, 50), dkk_uniform(&r, 0.01, 40),
                       dkk_uniform(&r, 0.01, 40), dkk_uniform(&r, -4, 4)};
        double b[5] = {a[0], a[1], a[2], a[3], a[4]};
        switch (i % 3) {
        case 0: b[4] += PI; break;
        case 1: b[2] = a[3], b[3] = a[2], b[4] += PI / 2; break;
        default: b[4] -= PI; break;
        }
        const double v64 = iou64(a, b), f64 = iof64(b, a);
        const float v32 = iou32(a, b);
        assert_true(v64 >= 0 && v64 <= 1 && f64 >= 0 && f64 <= 1 && v32 >= 0 && v32 <= 1);
        assert_float_equal(v64, 1.0, 1e-11);
        assert_float_equal(v32, 1.0, 1e-3);
    }
}

static void squares_at_45_degrees(void **state)
{
    (void)state;
    /* side 2 and the same turned by 45 degrees: a regular octagon of area 8 (sqrt 2 - 1) */
    const double a[5] = {0, 0, 2, 2, 0}, b[5] = {0, 0, 2, 2, PI / 4};
    const double oct = 8 * (sqrt(2.0) - 1);
    assert_float_equal(dk_rbox_intersection_f64(a, b, true), oct, 1e-12);
    assert_float_equal(iou64(a, b), oct / (8 - oct), 1e-12);
    assert_float_equal(iou32(a, b), oct / (8 - oct), 1e-6);
    assert_float_equal(dk_rbox_overlap_f64(a, b, DK_RBOX_IOU, false), oct / (8 - oct), 1e-12);
}

static void half_overlap_and_disjoint(void **state)
{
    (void)state;
    const double a[5] = {0, 0, 2, 2, 0}, b[5] = {1, 0, 2, 2, 0};
    assert_float_equal(iou64(a, b), 2.0 / 6.0, 1e-12); /* a 1 x 2 overlap of two 2 x 2 boxes */
    assert_float_equal(iof64(a, b), 0.5, 1e-12);
    const double c[5] = {0, 0, 2, 2, 0.3}, d[5] = {10, 0, 2, 2, 1.0};
    assert_true(iou64(c, d) == 0.0);
    assert_true(iou32(c, d) == 0.0f);
}

static void contained(void **state)
{
    (void)state;
    const double big[5] = {0, 0, 10, 10, 0.2}, small[5] = {0.5, 0.5, 2, 1, 1.1};
    assert_float_equal(dk_rbox_intersection_f64(big, small, true), 2.0, 1e-12);
    assert_float_equal(iou64(big, small), 0.02, 1e-12);
    assert_float_equal(iof64(small, big), 1.0, 1e-12);
    assert_float_equal(iof64(big, small), 0.02, 1e-12);
}

static void touching(void **state)
{
    (void)state;
    const double a[5] = {0, 0, 2, 2, 0}, edge[5] = {2, 0, 2, 2, 0}, corner[5] = {2, 2, 2, 2, 0};
    assert_float_equal(iou64(a, edge), 0.0, 1e-15);
    assert_float_equal(iou64(a, corner), 0.0, 1e-15);
    assert_float_equal(iou32(a, edge), 0.0, 1e-7);
    /* a rotated box touching with one corner */
    const double diamond[5] = {1 + sqrt(2.0), 0, 2, 2, PI / 4};
    assert_float_equal(iou64(a, diamond), 0.0, 1e-12);
}

static void degenerate(void **state)
{
    (void)state;
    const double a[5] = {0, 0, 2, 2, 0}, w0[5] = {0, 0, 0, 2, 0}, h0[5] = {0, 0, 2, 0, 0.4};
    assert_true(iou64(a, w0) == 0.0 && iou64(w0, a) == 0.0 && iou64(h0, a) == 0.0 && iof64(w0, a) == 0.0);
    assert_true(iou64(w0, w0) == 0.0);
    /* NaN and infinite values: a defined result, no crash (Note [Rotated boxes out of range]) */
    const double nanb[5] = {NAN, 0, 2, 2, 0}, nanw[5] = {0, 0, NAN, 2, 0}, infc[5] = {INFINITY, 0, 2, 2, 0};
    const double infw[5] = {0, 0, INFINITY, 2, 0}, nana[5] = {0, 0, 2, 2, NAN};
    assert_true(iou64(a, nanb) == 0.0);
    assert_true(iou64(a, infc) == 0.0);
    assert_true(iou64(a, nana) == 0.0);
    (void)iou64(a, nanw); /* NaN area: NaN or 0, either is MMCV's */
    (void)iou64(a, infw);
    (void)iou32(a, infw);
}

static void clockwise_and_counter_clockwise(void **state)
{
    (void)state;
    /* The corners: R(theta) applied to (+-w/2, +-h/2) for clockwise, R(-theta) otherwise. */
    const double b[5] = {1, 2, 4, 2, 0.5};
    for (int cw = 0; cw < 2; cw++) {
        double px[4], py[4], rx[4], ry[4];
        dk_rbox_corners_f64(b[0], b[1], b[2], b[3], b[4], cw, px, py);
        ref_corners(b, cw, rx, ry);
        for (int i = 0; i < 4; i++) { /* the same set of points */
            bool found = false;
            for (int j = 0; j < 4; j++) found |= fabs(px[i] - rx[j]) < 1e-12 && fabs(py[i] - ry[j]) < 1e-12;
            assert_true(found);
        }
    }
    /* A short bar above-right of a strip: it reaches into the strip only when turned one way. */
    const double strip[5] = {0, 0, 10, 2, 0}, bar[5] = {4, 2, 4, 0.5, PI / 4};
    const double cw = dk_rbox_overlap_f64(strip, bar, DK_RBOX_IOU, true);
    const double ccw = dk_rbox_overlap_f64(strip, bar, DK_RBOX_IOU, false);
    assert_float_equal(cw, ref_iou(strip, bar, true), 1e-12);
    assert_float_equal(ccw, ref_iou(strip, bar, false), 1e-12);
    assert_true(cw > 0.01 && ccw < cw / 4);
    /* counter-clockwise is clockwise with the angles negated, to the bit */
    const double nstrip[5] = {0, 0, 10, 2, -0.0}, nbar[5] = {4, 2, 4, 0.5, -PI / 4};
    assert_true(ccw == dk_rbox_overlap_f64(nstrip, nbar, DK_RBOX_IOU, true));
}

static void random_pairs_against_the_clipper(void **state)
{
    (void)state;
    dkk_rng r = {11};
    double worst64 = 0, worst32 = 0;
    for (int it = 0; it < 20000; it++) {
        double a[5], b[5];
        const double span = it % 3 == 0 ? 3 : 20, off = it % 5 == 0 ? 5000 : 0;
        for (int k = 0; k < 2; k++) {
            double *x = k ? b : a;
            x[0] = off + dkk_uniform(&r, -span, span);
            x[1] = -off + dkk_uniform(&r, -span, span);
            x[2] = dkk_uniform(&r, 0.5, 30);
            x[3] = dkk_uniform(&r, 0.5, 30);
            x[4] = dkk_uniform(&r, -2 * PI, 2 * PI);
        }
        const bool cw = it % 2;
        const double want = ref_iou(a, b, cw);
        const double got = dk_rbox_overlap_f64(a, b, DK_RBOX_IOU, cw);
        float fa[5], fb[5];
        for (int d = 0; d < 5; d++) fa[d] = (float)a[d], fb[d] = (float)b[d];
        double fa64[5], fb64[5];
        for (int d = 0; d < 5; d++) fa64[d] = fa[d], fb64[d] = fb[d];
        const double got32 = dk_rbox_overlap_f32(fa, fb, DK_RBOX_IOU, cw), want32 = ref_iou(fa64, fb64, cw);
        worst64 = fmax(worst64, fabs(got - want));
        worst32 = fmax(worst32, fabs(got32 - want32));
    }
    if (worst64 > 1e-9 || worst32 > 2e-4)
        fail_msg("worst |iou - reference|: %g (float64), %g (float32)", worst64, worst32);
}

/* Note [Bounding circles]: pairs built to provoke rounding (equal and perpendicular angles, edges
 * collinear along a shared axis, gaps just past the margin) that dk_rbox_apart calls apart must
 * get exactly 0 from the full computation, in both precisions. */
static void apart_means_zero(void **state)
{
    (void)state;
    dkk_rng r = {17};
    int64_t apart = 0;
    for (int it = 0; it < 200000; it++) {
        double a[5], b[5];
        a[0] = dkk_uniform(&r, 0, 1000), a[1] = dkk_uniform(&r, 0, 1000);
        a[2] = dkk_uniform(&r, 1, 200), a[3] = dkk_uniform(&r, 0.5, 200), a[4] = dkk_uniform(&r, -3.2, 3.2);
        const int kind = it % 3; /* equal angles, perpendicular, equal to within 1e-6 */
        b[4] = kind == 0 ? a[4] : kind == 1 ? a[4] + PI / 2 : a[4] + dkk_uniform(&r, -1e-6, 1e-6);
        b[2] = dkk_uniform(&r, 1, 200);
        b[3] = it % 4 < 2 ? a[3] : dkk_uniform(&r, 0.5, 200); /* equal heights: collinear edges */
        if (kind == 1 && it % 4 < 2) b[2] = a[3];
        const double ra = 0.5 * hypot(a[2], a[3]), rb = 0.5 * hypot(b[2], b[3]);
        const double d = (ra + rb) * (1 + dkk_uniform(&r, 1.0 / 1024, 0.01));
        const double dir = it % 2 ? a[4] + (double)(dkk_u64(&r) % 4) * PI / 2 : dkk_uniform(&r, 0, 2 * PI);
        b[0] = a[0] + d * cos(dir), b[1] = a[1] + d * sin(dir);
        float fa[5], fb[5];
        for (int k = 0; k < 5; k++) fa[k] = (float)a[k], fb[k] = (float)b[k];
        if (dk_rbox_apart_f32(fa, dk_rbox_radius_f32(fa), fb, dk_rbox_radius_f32(fb))) {
            apart++;
            if (dk_rbox_overlap_f32(fa, fb, DK_RBOX_IOU, it % 5 != 0) != 0.0f) fail_msg("float32 pair %d overlaps", it);
        }
        if (dk_rbox_apart_f64(a, dk_rbox_radius_f64(a), b, dk_rbox_radius_f64(b)) &&
            dk_rbox_overlap_f64(a, b, DK_RBOX_IOU, it % 5 != 0) != 0.0)
            fail_msg("float64 pair %d overlaps", it);
    }
    assert_true(apart > 190000);
}

/* ---- the CPU kernels ----------------------------------------------------------------------- */

static dkk_tensor *random_rboxes(dkk_rng *r, dk_dtype dt, int64_t n, double span, int64_t gap)
{
    dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){n, 5}, NULL, gap);
    for (int64_t i = 0; i < n; i++) {
        dkk_set(b, (int64_t[]){i, 0}, dkk_uniform(r, 0, span));
        dkk_set(b, (int64_t[]){i, 1}, dkk_uniform(r, 0, span));
        dkk_set(b, (int64_t[]){i, 2}, dkk_uniform(r, 2, 40));
        dkk_set(b, (int64_t[]){i, 3}, dkk_uniform(r, 2, 40));
        dkk_set(b, (int64_t[]){i, 4}, dkk_uniform(r, -PI, PI));
    }
    return b;
}

/* One pair from the tensors, in the compute type of dt, through the shared math. */
static double pair_overlap(const dkk_tensor *a, int64_t i, const dkk_tensor *b, int64_t j, int mode, bool cw)
{
    double x[5], y[5];
    for (int d = 0; d < 5; d++) x[d] = dkk_get(a, (int64_t[]){i, d}), y[d] = dkk_get(b, (int64_t[]){j, d});
    if (dk_tensor_dtype(&a->t) == DK_FLOAT64) return dk_rbox_overlap_f64(x, y, mode, cw);
    float fx[5], fy[5];
    for (int d = 0; d < 5; d++) fx[d] = (float)x[d], fy[d] = (float)y[d];
    return dk_rbox_overlap_f32(fx, fy, mode, cw);
}

static void box_iou_rotated_kernel(void **state)
{
    (void)state;
    const dk_dtype dts[4] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};
    dkk_rng r = {5};
    for (int t = 0; t < 4; t++)
        for (int aligned = 0; aligned < 2; aligned++)
            for (int mode = 0; mode < 2; mode++) {
                const int64_t n = 37, m = aligned ? 37 : 23;
                dkk_tensor *a = random_rboxes(&r, dts[t], n, 60, 3), *b = random_rboxes(&r, dts[t], m, 60, 0);
                dkk_tensor *out = aligned ? dkk_new(dts[t], 1, (int64_t[]){n}, NULL, 0)
                                          : dkk_new(dts[t], 2, (int64_t[]){n, m}, (int[]){1, 0}, 1);
                dkk_tensor *want = dkk_new(DK_FLOAT64, out->t.ndim, out->shape, NULL, 0);
                const bool cw = (t + mode) % 2;
                for (int64_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < (aligned ? 1 : m); j++) {
                        const double v = pair_overlap(a, i, b, aligned ? i : j, mode, cw);
                        dkk_set(want, aligned ? (int64_t[]){i} : (int64_t[]){i, j}, v);
                    }
                assert_ok(dk_box_iou_rotated(&a->t, &b->t, &out->t, mode, aligned, cw));
                /* the kernel rounds once, to the output dtype */
                const double tol = dts[t] == DK_FLOAT16 ? 1e-3 : dts[t] == DK_BFLOAT16 ? 4e-3 : 0;
                dkk_assert_close(out, want, tol, tol, "box_iou_rotated");
                dkk_free(a), dkk_free(b), dkk_free(out), dkk_free(want);
            }
}

/* MMCV's CPU loop, written out: every kept box against every later one, IoU >= (float)thr. */
static int64_t ref_nms(const dkk_tensor *dets, const dkk_tensor *scores, const int64_t *lab, double thr, bool cw,
                       int64_t *keep)
{
    const int64_t n = dets->shape[0];
    int64_t *ord = malloc((size_t)(n ? n : 1) * sizeof *ord);
    unsigned char *sup = calloc((size_t)(n ? n : 1), 1);
    for (int64_t i = 0; i < n; i++) ord[i] = i;
    for (int64_t i = 1; i < n; i++) { /* stable insertion sort, NaN first */
        const int64_t v = ord[i];
        const double sv = dkk_get(scores, (int64_t[]){v});
        int64_t j = i;
        for (; j > 0; j--) {
            const double su = dkk_get(scores, (int64_t[]){ord[j - 1]});
            const bool before = (sv != sv) ? (su == su) : (su == su && sv > su);
            if (!before) break;
            ord[j] = ord[j - 1];
        }
        ord[j] = v;
    }
    const double fthr = (double)(float)thr;
    int64_t k = 0;
    for (int64_t a = 0; a < n; a++) {
        const int64_t i = ord[a];
        if (sup[i]) continue;
        keep[k++] = i;
        for (int64_t b = a + 1; b < n; b++) {
            const int64_t j = ord[b];
            if (sup[j] || (lab && lab[i] != lab[j])) continue;
            if (pair_overlap(dets, i, dets, j, DK_RBOX_IOU, cw) >= fthr) sup[j] = 1;
        }
    }
    free(ord), free(sup);
    return k;
}

/* How the suppression runs (Note [Rotated suppression in blocks]): one block on one thread (the
 * serial walk), the default blocks, and small blocks on three and two threads with every block's
 * parallel pass on threads (parallel.min_work 0); each must give the reference's keep. */
static const struct {
    const char *name;
    int64_t block, min_work;
    int threads;
} nms_configs[] = {
    {"one block, one thread", INT64_MAX, 32768, 1},
    {"default blocks, two threads", 64, 0, 2},
    {"blocks of 7, three threads", 7, 0, 3},
    {"blocks of 1, two threads", 1, 0, 2},
};
#define NMS_CONFIGS ((int)(sizeof nms_configs / sizeof nms_configs[0]))

static void nms_config(int c)
{
    assert_ok(dk_tunable_set("nms_rotated.block", nms_configs[c].block, NULL));
    assert_ok(dk_tunable_set("parallel.min_work", nms_configs[c].min_work, NULL));
    assert_ok(dk_set_num_threads(nms_configs[c].threads));
}

static void nms_defaults(void)
{
    dk_tunables_reset();
    assert_ok(dk_set_num_threads(0));
}

static void check_nms(const char *what, dkk_tensor *dets, dkk_tensor *scores, const int64_t *lab, double thr, bool cw)
{
    const int64_t n = dets->shape[0];
    int64_t *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    const int64_t nwant = ref_nms(dets, scores, lab, thr, cw, want);
    dkk_tensor *keep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dkk_tensor *labels = NULL;
    if (lab) {
        labels = dkk_new(DK_INT32, 1, (int64_t[]){n}, NULL, 1);
        for (int64_t i = 0; i < n; i++) dkk_set(labels, (int64_t[]){i}, (double)lab[i]);
    }
    for (int c = 0; c < NMS_CONFIGS; c++) {
        nms_config(c);
        assert_ok(dk_nms_rotated(&dets->t, &scores->t, labels ? &labels->t : NULL, &keep->t, &num->t, thr, cw));
        const int64_t got = ((int64_t *)num->mem)[0];
        if (got != nwant)
            fail_msg("%s (%s): kept %lld, the reference %lld", what, nms_configs[c].name, (long long)got,
                     (long long)nwant);
        for (int64_t i = 0; i < got; i++)
            if (((int64_t *)keep->mem)[i] != want[i])
                fail_msg("%s (%s): keep[%lld] = %lld, the reference %lld", what, nms_configs[c].name, (long long)i,
                         (long long)((int64_t *)keep->mem)[i], (long long)want[i]);
    }
    nms_defaults();
    dkk_free(keep), dkk_free(num), dkk_free(labels);
    free(want);
}

static void nms_rotated_kernel(void **state)
{
    (void)state;
    const dk_dtype dts[4] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};
    const double thrs[6] = {0.5, 0.1, 0.7, 0.0, -1.0, NAN};
    dkk_rng r = {9};
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 6; k++) {
            const int64_t n = 300;
            dkk_tensor *dets = random_rboxes(&r, dts[t], n, 150, 2);
            dkk_tensor *scores = dkk_new(dts[t], 1, (int64_t[]){n}, NULL, 0);
            dkk_fill_uniform(scores, &r, 0, 1);
            for (int64_t i = 0; i < n; i += 17) dkk_set(scores, (int64_t[]){i}, 0.25); /* ties */
            dkk_set(scores, (int64_t[]){5}, NAN);
            check_nms("nms_rotated", dets, scores, NULL, thrs[k], k % 2);
            int64_t lab[300];
            for (int64_t i = 0; i < n; i++) lab[i] = (int64_t)(dkk_u64(&r) % 3);
            check_nms("nms_rotated with labels", dets, scores, lab, thrs[k], true);
            /* clustered: many near-duplicates of a few boxes */
            for (int64_t i = 0; i < n; i++)
                for (int d = 0; d < 5; d++)
                    dkk_set(dets, (int64_t[]){i, d},
                            dkk_get(dets, (int64_t[]){i % 7, d}) + dkk_uniform(&r, -1, 1) * (d == 4 ? 0.2 : 3));
            check_nms("nms_rotated clustered", dets, scores, NULL, thrs[k], true);
            dkk_free(dets), dkk_free(scores);
        }
    /* hostile values: NaN, infinite, degenerate boxes, duplicates */
    dkk_tensor *dets = dkk_new(DK_FLOAT32, 2, (int64_t[]){8, 5}, NULL, 0),
               *scores = dkk_new(DK_FLOAT32, 1, (int64_t[]){8}, NULL, 0);
    const double v[8][5] = {{0, 0, 4, 4, 0},        {0, 0, 4, 4, 0}, {NAN, 0, 4, 4, 0}, {0, 0, INFINITY, 4, 0},
                            {INFINITY, 0, 4, 4, 0}, {0, 0, 0, 4, 0}, {1, 1, 4, 4, NAN}, {0.5, 0, 4, 4, 0.1}};
    for (int64_t i = 0; i < 8; i++) {
        for (int d = 0; d < 5; d++) dkk_set(dets, (int64_t[]){i, d}, v[i][d]);
        dkk_set(scores, (int64_t[]){i}, 1.0 - 0.1 * (double)i);
    }
    check_nms("nms_rotated hostile", dets, scores, NULL, 0.3, true);
    check_nms("nms_rotated hostile, threshold 0", dets, scores, NULL, 0.0, true);
    dkk_free(dets), dkk_free(scores);
}

static void empty_and_bad_input(void **state)
{
    (void)state;
    dkk_tensor *b0 = dkk_new(DK_FLOAT32, 2, (int64_t[]){0, 5}, NULL, 0),
               *s0 = dkk_new(DK_FLOAT32, 1, (int64_t[]){0}, NULL, 0);
    dkk_tensor *k0 = dkk_new(DK_INT64, 1, (int64_t[]){0}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    ((int64_t *)num->mem)[0] = 7;
    assert_ok(dk_nms_rotated(&b0->t, &s0->t, NULL, &k0->t, &num->t, 0.5, true));
    assert_int_equal(((int64_t *)num->mem)[0], 0);
    dkk_tensor *b3 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 5}, NULL, 0),
               *b4 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 4}, NULL, 0);
    dkk_tensor *s3 = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 0),
               *k3 = dkk_new(DK_INT64, 1, (int64_t[]){3}, NULL, 0);
    dkk_tensor *s64 = dkk_new(DK_FLOAT64, 1, (int64_t[]){3}, NULL, 0),
               *o33 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 0}, NULL, 0);
    dkk_tensor *l3 = dkk_new(DK_UINT8, 1, (int64_t[]){3}, NULL, 0),
               *o30 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 3}, NULL, 0);
    assert_ok(dk_box_iou_rotated(&b3->t, &b0->t, &o33->t, 0, false, true)); /* [3, 0]: nothing to do */
    assert_error(dk_nms_rotated(&b4->t, &s3->t, NULL, &k3->t, &num->t, 0.5, true), DK_EINVAL,
                 "nms_rotated: 'dets' must have shape [N, 5] (cx, cy, w, h, angle), got 2-d with a different width");
    assert_error(dk_nms_rotated(&b3->t, &s64->t, NULL, &k3->t, &num->t, 0.5, true), DK_ETYPE,
                 "nms_rotated: 'scores' must have the dtype of 'dets' (float32), got float64");
    assert_error(dk_nms_rotated(&b3->t, &s3->t, &l3->t, &k3->t, &num->t, 0.5, true), DK_ETYPE,
                 "nms_rotated: 'labels' must be int64, int32 or the dtype of 'dets', got uint8");
    assert_error(
        dk_box_iou_rotated(&b3->t, &b4->t, &o30->t, 0, false, true), DK_EINVAL,
        "box_iou_rotated: 'boxes2' must have shape [K, 5] (cx, cy, w, h, angle), got 2-d with a different width");
    assert_error(dk_box_iou_rotated(&b3->t, &b3->t, &o30->t, 2, false, true), DK_EINVAL,
                 "box_iou_rotated: mode must be 0 (iou) or 1 (iof), got 2");
    assert_error(dk_box_iou_rotated(&b3->t, &b0->t, &s3->t, 0, true, true), DK_EINVAL,
                 "box_iou_rotated: aligned needs as many boxes in 'boxes2' as in 'boxes1', got 0 and 3");
    dkk_tensor *b3d = dkk_new(DK_FLOAT64, 2, (int64_t[]){3, 5}, NULL, 0);
    assert_error(dk_box_iou_rotated(&b3->t, &b3d->t, &o30->t, 0, false, true), DK_ETYPE,
                 "box_iou_rotated: 'boxes2' must have the dtype of 'boxes1' (float32), got float64");
    /* 2^31 boxes are refused before anything is read or allocated (a zero stride: one row) */
    dk_tensor huge = b3->t;
    int64_t hshape[2] = {(int64_t)1 << 31, 5}, hstr[2] = {0, 1};
    huge.shape = hshape;
    huge.strides = hstr;
    assert_error(dk_box_iou_rotated(&huge, &b0->t, &o33->t, 0, false, true), DK_EINVAL,
                 "box_iou_rotated: 'boxes1' may hold at most 2^31 - 1 boxes, got 2147483648");
    assert_error(dk_nms_rotated(&huge, &s3->t, NULL, &k3->t, &num->t, 0.5, true), DK_EINVAL,
                 "nms_rotated: at most 2^31 - 1 boxes, got 2147483648");
    dkk_free(b0), dkk_free(s0), dkk_free(k0), dkk_free(num), dkk_free(b3), dkk_free(b4), dkk_free(s3), dkk_free(k3);
    dkk_free(s64), dkk_free(o33), dkk_free(l3), dkk_free(o30), dkk_free(b3d);
}

/* ---- quadrilaterals (Note [Quadrilaterals]) ------------------------------------------------ */

static double quad64(const double *a, const double *b, int mode) { return dk_quad_overlap_f64(a, b, mode); }

/* The reference for convex quadrilaterals in either direction: ref_clip against b made
 * counter-clockwise. */
static double ref_quad(const double *a, const double *b, int mode)
{
    double px[16], py[16], cx[4], cy[4];
    for (int k = 0; k < 4; k++) px[k] = a[2 * k], py[k] = a[2 * k + 1], cx[k] = b[2 * k], cy[k] = b[2 * k + 1];
    const double aa = ref_area(px, py, 4), ab = ref_area(cx, cy, 4);
    double signed2 = 0;
    for (int k = 0; k < 4; k++) signed2 += cx[k] * cy[(k + 1) % 4] - cx[(k + 1) % 4] * cy[k];
    if (signed2 < 0)
        for (int k = 0; k < 2; k++) {
            double t = cx[k];
            cx[k] = cx[3 - k], cx[3 - k] = t;
            t = cy[k], cy[k] = cy[3 - k], cy[3 - k] = t;
        }
    const double i = ref_clip(px, py, cx, cy);
    return i / (mode == DK_RBOX_IOF ? aa : aa + ab - i);
}

/* A random rotated box's corners as a quadrilateral, from vertex `first`, clockwise or not. */
static void quad_of(const double *box, int first, bool reverse, double *q)
{
    double x[4], y[4];
    ref_corners(box, true, x, y);
    for (int k = 0; k < 4; k++) {
        const int c = (first + (reverse ? 3 * k : k)) % 4;
        q[2 * k] = x[c], q[2 * k + 1] = y[c];
    }
}

/* MMCV's published case (tests/test_ops/test_box_iou_quadri.py), values by hand: the
 * trapezoid (1,1),(3,4),(4,4),(4,1) meets the square [0,2]^2 in 2/3 (IoU 1/14, IoF 1/9) and the
 * rectangle [2,4]x[1,4] in 21/4 (IoU 7/9, IoF 7/8: MMCV's 1.0 and 1.0 are its rectangle-only
 * "inside" test); the kite (2,2),(3,4),(4,2),(3,1) of area 3 and the 45-degree square of area 2
 * lie inside rectangles of areas 6 and 4 (IoU 1/2, IoF 1). nms_quadri at 0.3 keeps 3, 1, 2. */
static void quadri_mmcv_vectors_and_twins(void **state)
{
    (void)state;
    static const double b1[3][8] = {{1, 1, 3, 4, 4, 4, 4, 1}, {2, 2, 3, 4, 4, 2, 3, 1}, {7, 7, 8, 8, 9, 7, 8, 6}};
    static const double b2[3][8] = {{0, 0, 0, 2, 2, 2, 2, 0}, {2, 1, 2, 4, 4, 4, 4, 1}, {7, 6, 7, 8, 9, 8, 9, 6}};
    static const double iou[3][3] = {{1.0 / 14, 7.0 / 9, 0}, {0, 0.5, 0}, {0, 0, 0.5}};
    static const double iof[3][3] = {{1.0 / 9, 7.0 / 8, 0}, {0, 1, 0}, {0, 0, 1}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            assert_true(fabs(quad64(b1[i], b2[j], DK_RBOX_IOU) - iou[i][j]) < 1e-12);
            assert_true(fabs(quad64(b1[i], b2[j], DK_RBOX_IOF) - iof[i][j]) < 1e-12);
        }
    /* a rotated box as its corners: box_iou_rotated's value; twins in every vertex order: 1 */
    dkk_rng r = {0x41};
    for (int t = 0; t < 2000; t++) {
        const double a[5] = {dkk_uniform(&r, 0, 50), dkk_uniform(&r, 0, 50), dkk_uniform(&r, 1, 30),
                             dkk_uniform(&r, 1, 30), dkk_uniform(&r, -PI, PI)};
        const double b[5] = {dkk_uniform(&r, 0, 50), dkk_uniform(&r, 0, 50), dkk_uniform(&r, 1, 30),
                             dkk_uniform(&r, 1, 30), dkk_uniform(&r, -PI, PI)};
        double qa[8], qb[8], qt[8];
        quad_of(a, t % 4, t % 3 == 0, qa);
        quad_of(b, (t / 4) % 4, t % 5 == 0, qb);
        quad_of(a, (t + 1) % 4, t % 3 != 0, qt);
        const double v = quad64(qa, qb, DK_RBOX_IOU);
        if (fabs(v - ref_quad(qa, qb, DK_RBOX_IOU)) > 1e-9 || fabs(v - iou64(a, b)) > 1e-9)
            fail_msg("pair %d: quadri %.17g, reference %.17g, rotated %.17g", t, v, ref_quad(qa, qb, DK_RBOX_IOU),
                     iou64(a, b));
        assert_true(fabs(quad64(qa, qb, DK_RBOX_IOF) - ref_quad(qa, qb, DK_RBOX_IOF)) < 1e-9);
        assert_true(fabs(quad64(qa, qt, DK_RBOX_IOU) - 1) < 1e-12 && quad64(qa, qt, DK_RBOX_IOU) <= 1);
        float fa[8], ft[8];
        for (int d = 0; d < 8; d++) fa[d] = (float)qa[d], ft[d] = (float)qt[d];
        const float f = dk_quad_overlap_f32(fa, ft, DK_RBOX_IOU);
        assert_true(f <= 1 && f > 1 - 1e-5f);
    }
    /* NaN, infinite and degenerate vertices: 0 or NaN, never outside [0, 1] */
    double q[8] = {0, 0, 4, 0, 4, 4, 0, 4};
    const double sq[8] = {1, 1, 5, 1, 5, 5, 1, 5};
    for (int d = 0; d < 8; d++) {
        const double keep = q[d];
        for (int k = 0; k < 3; k++) {
            q[d] = k == 0 ? NAN : k == 1 ? INFINITY : q[(d + 2) % 8];
            const double v = quad64(q, sq, DK_RBOX_IOU), w = quad64(sq, q, DK_RBOX_IOF);
            assert_true((v >= 0 && v <= 1) || v != v);
            assert_true((w >= 0 && w <= 1) || w != w);
        }
        q[d] = keep;
    }
}

static void quadri_kernels(void **state)
{
    (void)state;
    static const double dets[4][9] = {{1, 1, 3, 4, 4, 4, 4, 1, 0.7},
                                      {2, 2, 3, 4, 4, 2, 3, 1, 0.8},
                                      {7, 7, 8, 8, 9, 7, 8, 6, 0.5},
                                      {0, 0, 0, 2, 2, 2, 2, 0, 0.9}};
    for (size_t t = 0; t < 4; t++) {
        const dk_dtype dt = t == 0 ? DK_FLOAT32 : t == 1 ? DK_FLOAT64 : t == 2 ? DK_FLOAT16 : DK_BFLOAT16;
        dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){4, 8}, NULL, 1), *s = dkk_new(dt, 1, (int64_t[]){4}, NULL, 0);
        for (int64_t i = 0; i < 4; i++) {
            for (int d = 0; d < 8; d++) dkk_set(b, (int64_t[]){i, d}, dets[i][d]);
            dkk_set(s, (int64_t[]){i}, dets[i][8]);
        }
        dkk_tensor *keep = dkk_new(DK_INT64, 1, (int64_t[]){4}, NULL, 0),
                   *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
        assert_ok(dk_nms_quadri(&b->t, &s->t, NULL, &keep->t, &num->t, 0.3));
        const int64_t want[3] = {3, 1, 2};
        assert_int_equal(((int64_t *)num->mem)[0], 3);
        assert_memory_equal(keep->mem, want, sizeof want);
        /* every pair, through the kernel: the math's value, in the dtype */
        dkk_tensor *out = dkk_new(dt, 2, (int64_t[]){4, 4}, (int[]){1, 0}, 0);
        assert_ok(dk_box_iou_quadri(&b->t, &b->t, &out->t, DK_RBOX_IOU, false));
        for (int64_t i = 0; i < 4; i++)
            for (int64_t j = 0; j < 4; j++) {
                double qi[8], qj[8];
                for (int d = 0; d < 8; d++)
                    qi[d] = dkk_get(b, (int64_t[]){i, d}), qj[d] = dkk_get(b, (int64_t[]){j, d});
                const double want_ij = dt == DK_FLOAT64 ? quad64(qi, qj, DK_RBOX_IOU) : 0;
                const double got = dkk_get(out, (int64_t[]){i, j});
                if (dt == DK_FLOAT64) assert_true(got == want_ij);
                assert_true(i == j ? fabs(got - 1) < 1e-2 : got >= 0 && got <= 1);
            }
        dkk_free(b), dkk_free(s), dkk_free(keep), dkk_free(num), dkk_free(out);
    }
    /* random quadrilaterals (rotated boxes' corners from any vertex, either way round; clustered
     * near-duplicates too): every configuration of nms_configs keeps what the serial walk keeps */
    dkk_rng r = {21};
    const int64_t nq = 400;
    dkk_tensor *rb = random_rboxes(&r, DK_FLOAT64, nq, 150, 2);
    dkk_tensor *qb = dkk_new(DK_FLOAT32, 2, (int64_t[]){nq, 8}, NULL, 0),
               *qs = dkk_new(DK_FLOAT32, 1, (int64_t[]){nq}, NULL, 0);
    dkk_fill_uniform(qs, &r, 0, 1);
    for (int64_t i = 0; i < nq; i++) {
        double box[5], q[8];
        for (int d = 0; d < 5; d++) box[d] = dkk_get(rb, (int64_t[]){i % 5 == 0 ? i / 5 : i, d});
        if (i % 5 == 0) box[0] += dkk_uniform(&r, -2, 2); /* near-duplicates of earlier boxes */
        quad_of(box, (int)(i % 4), i % 3 == 0, q);
        for (int d = 0; d < 8; d++) dkk_set(qb, (int64_t[]){i, d}, q[d]);
    }
    dkk_tensor *kq = dkk_new(DK_INT64, 1, (int64_t[]){nq}, NULL, 0),
               *nq0 = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    int64_t *serial = malloc((size_t)nq * sizeof *serial), nserial = 0;
    for (int c = 0; c < NMS_CONFIGS; c++) {
        nms_config(c);
        assert_ok(dk_nms_quadri(&qb->t, &qs->t, NULL, &kq->t, &nq0->t, 0.3));
        const int64_t got = ((int64_t *)nq0->mem)[0];
        if (c == 0) {
            nserial = got;
            memcpy(serial, kq->mem, (size_t)got * sizeof *serial);
            assert_true(got > 20 && got < nq - 20); /* some kept, some suppressed */
        } else {
            assert_int_equal(got, nserial);
            assert_memory_equal(kq->mem, serial, (size_t)got * sizeof *serial);
        }
    }
    nms_defaults();
    free(serial);
    dkk_free(rb), dkk_free(qb), dkk_free(qs), dkk_free(kq), dkk_free(nq0);
    /* refusals */
    dkk_tensor *b5 = dkk_new(DK_FLOAT32, 2, (int64_t[]){2, 5}, NULL, 0),
               *b8 = dkk_new(DK_FLOAT32, 2, (int64_t[]){2, 8}, NULL, 0),
               *o = dkk_new(DK_FLOAT32, 2, (int64_t[]){2, 2}, NULL, 0),
               *s = dkk_new(DK_FLOAT32, 1, (int64_t[]){2}, NULL, 0), *k = dkk_new(DK_INT64, 1, (int64_t[]){2}, NULL, 0),
               *n = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    assert_error(
        dk_box_iou_quadri(&b5->t, &b8->t, &o->t, 0, false), DK_EINVAL,
        "box_iou_quadri: 'boxes1' must have shape [K, 8] (x1, y1, ..., x4, y4), got 2-d with a different width");
    assert_error(dk_box_iou_quadri(&b8->t, &b8->t, &o->t, 2, false), DK_EINVAL,
                 "box_iou_quadri: mode must be 0 (iou) or 1 (iof), got 2");
    assert_error(dk_nms_quadri(&b5->t, &s->t, NULL, &k->t, &n->t, 0.5), DK_EINVAL,
                 "nms_quadri: 'dets' must have shape [N, 8] (x1, y1, ..., x4, y4), got 2-d with a different width");
    dkk_free(b5), dkk_free(b8), dkk_free(o), dkk_free(s), dkk_free(k), dkk_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(identical_boxes),
        cmocka_unit_test(a_box_written_two_ways),
        cmocka_unit_test(squares_at_45_degrees),
        cmocka_unit_test(half_overlap_and_disjoint),
        cmocka_unit_test(contained),
        cmocka_unit_test(touching),
        cmocka_unit_test(degenerate),
        cmocka_unit_test(clockwise_and_counter_clockwise),
        cmocka_unit_test(random_pairs_against_the_clipper),
        cmocka_unit_test(apart_means_zero),
        cmocka_unit_test(box_iou_rotated_kernel),
        cmocka_unit_test(nms_rotated_kernel),
        cmocka_unit_test(empty_and_bad_input),
        cmocka_unit_test(quadri_mmcv_vectors_and_twins),
        cmocka_unit_test(quadri_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
