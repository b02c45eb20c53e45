/*
 * test_kernel_box_iou.c — box_iou on the CPU against the references' tensor expressions, written
 * out here independently: every operation in double, then rounded as the reference's tensor of
 * that operation is (float32 for float32, 16-bit and integer boxes' float results, 16 bits where
 * torchvision subtracts in the boxes' dtype and everywhere in MMCV's 16-bit kernel, not at all
 * for float64), and integers exactly. Every kind, every dtype, aligned or not, both offsets,
 * strided outputs, NaN, infinite, degenerate and identical boxes, determinism across thread
 * counts, and the checks.
 */
#include "box_iou.h"
#include "dk_kernel_test.h"
#include "dk_parallel.h"
#include "dk_tunables.h"

/* ---- the reference ----------------------------------------------------------------------- */

typedef enum { R_F64, R_F32, R_F16, R_BF16 } rmode;

static double rnd(double v, rmode m)
{
    switch (m) {
    case R_F32: return (float)v;
    case R_F16: return dk_half_to_float(dk_float_to_half((float)v));
    case R_BF16: return dk_bfloat16_to_float(dk_float_to_bfloat16((float)v));
    default: return v;
    }
}

/* torch.maximum / torch.minimum: NaN if either is */
static double tmax(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static double tmin(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }
static double clamp0(double v) { return isnan(v) ? v : v < 0 ? 0 : v; }

/* torchvision's four kinds on float boxes: `c` rounds float results (F32 or F64), `d` the
 * differences torchvision takes in the boxes' dtype (box_iou and generalized only). */
static double ref_tv(const double *a, const double *b, int kind, double eps, rmode c, rmode d)
{
#define R(v) rnd((v), c)
    if (kind >= DK_BOX_DIOU) d = c; /* upcast first */
    const double area1 = R(R(a[2] - a[0]) * R(a[3] - a[1])), area2 = R(R(b[2] - b[0]) * R(b[3] - b[1]));
    const double w = clamp0(rnd(tmin(a[2], b[2]) - tmax(a[0], b[0]), d));
    const double h = clamp0(rnd(tmin(a[3], b[3]) - tmax(a[1], b[1]), d));
    const double inter = R(w * h), uni = R(R(area1 + area2) - inter), iou = R(inter / uni);
    if (kind == DK_BOX_IOU) return iou;
    const double wi = clamp0(rnd(tmax(a[2], b[2]) - tmin(a[0], b[0]), d));
    const double hi = clamp0(rnd(tmax(a[3], b[3]) - tmin(a[1], b[1]), d));
    if (kind == DK_BOX_GIOU) {
        const double areai = R(wi * hi);
        return R(iou - R(R(areai - uni) / areai));
    }
    const double diag = R(R(R(wi * wi) + R(hi * hi)) + R(eps));
    const double dx = R(R(R(a[0] + a[2]) / 2) - R(R(b[0] + b[2]) / 2));
    const double dy = R(R(R(a[1] + a[3]) / 2) - R(R(b[1] + b[3]) / 2));
    const double diou = R(iou - R(R(R(dx * dx) + R(dy * dy)) / diag));
    if (kind == DK_BOX_DIOU) return diou;
    const double t1 = R(atan(R(R(a[2] - a[0]) / R(a[3] - a[1])))), t2 = R(atan(R(R(b[2] - b[0]) / R(b[3] - b[1]))));
    const double at = R(t1 - t2);
    const double v = R(R(4 / (M_PI * M_PI)) * R(at * at));
    const double alpha = R(v / R(R(R(R(1 - iou) + v) + R(eps))));
    return R(diou - R(alpha * v));
#undef R
}

static bool is_int(dk_dtype dt)
{
    return dt == DK_INT8 || dt == DK_UINT8 || dt == DK_INT16 || dt == DK_INT32 || dt == DK_INT64;
}

/* A difference torchvision takes in the boxes' own 8- or 16-bit dtype, before _upcast. */
static int64_t ref_own_dtype(int64_t v, dk_dtype dt)
{
    switch (dt) {
    case DK_INT8: return (int8_t)(uint8_t)(uint64_t)v;
    case DK_UINT8: return (uint8_t)(uint64_t)v;
    case DK_INT16: return (int16_t)(uint16_t)(uint64_t)v;
    default: return v;
    }
}

/* torchvision's kinds on integer boxes: exact integers, float32 from each division on; IoU's and
 * GIoU's rb - lt in the boxes' own dtype (`dt`; distance and complete IoU upcast first). */
static double ref_tv_int(const double *ad, const double *bd, int kind, double eps, dk_dtype dt)
{
    if (kind == DK_BOX_DIOU || kind == DK_BOX_CIOU) dt = DK_INT64;
    int64_t a[4], b[4];
    for (int i = 0; i < 4; i++) a[i] = (int64_t)ad[i], b[i] = (int64_t)bd[i];
#define F(v) ((double)(float)(v))
    const int64_t area1 = (a[2] - a[0]) * (a[3] - a[1]), area2 = (b[2] - b[0]) * (b[3] - b[1]);
    int64_t w = ref_own_dtype((a[2] < b[2] ? a[2] : b[2]) - (a[0] > b[0] ? a[0] : b[0]), dt);
    int64_t h = ref_own_dtype((a[3] < b[3] ? a[3] : b[3]) - (a[1] > b[1] ? a[1] : b[1]), dt);
    w = w < 0 ? 0 : w, h = h < 0 ? 0 : h;
    const int64_t inter = w * h, uni = area1 + area2 - inter;
    const double iou = F(F(inter) / F(uni));
    if (kind == DK_BOX_IOU) return iou;
    int64_t wi = ref_own_dtype((a[2] > b[2] ? a[2] : b[2]) - (a[0] < b[0] ? a[0] : b[0]), dt);
    int64_t hi = ref_own_dtype((a[3] > b[3] ? a[3] : b[3]) - (a[1] < b[1] ? a[1] : b[1]), dt);
    wi = wi < 0 ? 0 : wi, hi = hi < 0 ? 0 : hi;
    if (kind == DK_BOX_GIOU) return F(iou - F(F(wi * hi - uni) / F(wi * hi)));
    const double diag = F(F(wi * wi + hi * hi) + F(eps));
    const double dx = F(F(F(a[0] + a[2]) / 2) - F(F(b[0] + b[2]) / 2));
    const double dy = F(F(F(a[1] + a[3]) / 2) - F(F(b[1] + b[3]) / 2));
    const double diou = F(iou - F(F(F(dx * dx) + F(dy * dy)) / diag));
    if (kind == DK_BOX_DIOU) return diou;
    const double at = F(F(atan(F(F(a[2] - a[0]) / F(a[3] - a[1])))) - F(atan(F(F(b[2] - b[0]) / F(b[3] - b[1])))));
    const double v = F(F(4 / (M_PI * M_PI)) * F(at * at));
    const double alpha = F(v / F(F(F(F(1 - iou) + v) + F(eps))));
    return F(diou - F(alpha * v));
#undef F
}

/* MMCV's CPU bbox_overlaps: every tensor op rounded to the boxes' dtype (`c`). */
static double ref_mmcv(const double *a, const double *b, int kind, double off, rmode c)
{
#define R(v) rnd((v), c)
    double w = R(R(tmin(a[2], b[2]) - tmax(a[0], b[0])) + off), h = R(R(tmin(a[3], b[3]) - tmax(a[1], b[1])) + off);
    w = isnan(w) ? w : w < 0 ? 0 : w > 2147483648.0 ? R(2147483648.0) : w;
    h = isnan(h) ? h : h < 0 ? 0 : h > 2147483648.0 ? R(2147483648.0) : h;
    const double overlap = R(w * h);
    const double area1 = R(R(R(a[2] - a[0]) + off) * R(R(a[3] - a[1]) + off));
    if (kind == DK_BOX_MMCV_IOF) return R(overlap / area1);
    const double area2 = R(R(R(b[2] - b[0]) + off) * R(R(b[3] - b[1]) + off));
    return R(overlap / R(R(area1 + area2) - overlap));
#undef R
}

static double ref_pair(dk_dtype dt, const double *a, const double *b, int kind, double eps, int off)
{
    const rmode box = dt == DK_FLOAT16 ? R_F16 : dt == DK_BFLOAT16 ? R_BF16 : dt == DK_FLOAT64 ? R_F64 : R_F32;
    if (kind >= DK_BOX_MMCV_IOU) return ref_mmcv(a, b, kind, off, box);
    if (is_int(dt)) return ref_tv_int(a, b, kind, eps, dt);
    return ref_tv(a, b, kind, eps, dt == DK_FLOAT64 ? R_F64 : R_F32, box);
}

/* ---- cases ------------------------------------------------------------------------------- */

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16, DK_INT32,
                                  DK_INT64,   DK_INT8,    DK_UINT8,   DK_INT16};

/* n boxes, most random, then special ones: degenerate, empty, identical to box 0, NaN, inf. */
static dkk_tensor *make_boxes(dkk_rng *r, dk_dtype dt, int64_t n, bool specials, int64_t gap)
{
    dkk_tensor *t = dkk_new(dt, 2, (int64_t[]){n, 4}, NULL, gap);
    /* 8-bit boxes stay within [10, 110] (uint8 has no room below 0, int8 none above 127); their
     * differences still go negative, which uint8 wraps around */
    const bool narrow = dt == DK_INT8 || dt == DK_UINT8;
    const double span = narrow ? 40 : is_int(dt) ? 200 : 100, base = narrow ? 10 : 0;
    for (int64_t i = 0; i < n; i++) {
        double x = base + dkk_uniform(r, 0, span), y = base + dkk_uniform(r, 0, span);
        double v[4] = {x, y, x + dkk_uniform(r, 0.5, 40), y + dkk_uniform(r, 0.5, 40)};
        if (specials && n > 12) {
            const int64_t k = i % 12;
            if (k == 3) v[2] = v[0] - 5;               /* x2 < x1 */
            if (k == 4) v[3] = v[1];                   /* no height */
            if (k == 5) v[0] = v[2] = v[1] = v[3] = 7; /* a point */
            if (k == 6 && i > 0)                       /* identical to box 0 */
                for (int d = 0; d < 4; d++) v[d] = dkk_get(t, (int64_t[]){0, d});
            if (!is_int(dt)) {
                if (k == 7) v[1] = NAN;
                if (k == 8) v[2] = INFINITY;
                if (k == 9) v[0] = -INFINITY, v[2] = INFINITY;
            }
            if (k == 10 && !narrow) v[0] += 1000, v[2] += 1000; /* far from everything */
        }
        for (int d = 0; d < 4; d++) dkk_set(t, (int64_t[]){i, d}, v[d]);
    }
    return t;
}

static dk_dtype out_dtype(dk_dtype dt, int kind)
{
    if (kind >= DK_BOX_MMCV_IOU) return dt;
    return dt == DK_FLOAT64 ? DK_FLOAT64 : DK_FLOAT32;
}

static void check_case(dk_dtype dt, int kind, bool aligned, int off, int64_t n, int64_t m, int64_t gap, dkk_rng *r)
{
    char what[160];
    snprintf(what, sizeof what, "%s kind %d aligned %d offset %d %lldx%lld gap %lld", dk_dtype_name(dt), kind,
             (int)aligned, off, (long long)n, (long long)m, (long long)gap);
    dkk_tensor *b1 = make_boxes(r, dt, n, true, gap), *b2 = make_boxes(r, dt, m, true, 0);
    const dk_dtype odt = out_dtype(dt, kind);
    dkk_tensor *out = aligned ? dkk_new(odt, 1, (int64_t[]){n}, NULL, 0)
                              : dkk_new(odt, 2, (int64_t[]){n, m}, NULL, gap);
    dkk_tensor *want = aligned ? dkk_new(DK_FLOAT64, 1, (int64_t[]){n}, NULL, 0)
                               : dkk_new(DK_FLOAT64, 2, (int64_t[]){n, m}, NULL, 0);
    const double eps = kind == DK_BOX_DIOU ? 1e-3 : 1e-7;
    dk_status st = dk_box_iou(&b1->t, &b2->t, &out->t, kind, aligned, eps, off);
    if (st) fail_msg("%s: %s", what, dk_last_error());
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = aligned ? i : 0; j < (aligned ? i + 1 : m); j++) {
            double a[4], b[4];
            for (int d = 0; d < 4; d++) a[d] = dkk_get(b1, (int64_t[]){i, d}), b[d] = dkk_get(b2, (int64_t[]){j, d});
            double v = ref_pair(dt, a, b, kind, eps, off);
            v = rnd(v, odt == DK_FLOAT16 ? R_F16 : odt == DK_BFLOAT16 ? R_BF16 : odt == DK_FLOAT32 ? R_F32 : R_F64);
            dkk_set(want, aligned ? (int64_t[]){i} : (int64_t[]){i, j}, v);
        }
    /* exact but for atan (C library vs the kernel's), whose error complete IoU carries */
    const bool f64 = odt == DK_FLOAT64;
    const double tol = kind == DK_BOX_CIOU ? (f64 ? 1e-13 : 1e-6) : 0;
    dkk_assert_close(out, want, tol, tol, what);
    dkk_free(b1), dkk_free(b2), dkk_free(out), dkk_free(want);
}

/* Both spans (Note [AVX2 spans] in csrc/cpu/box_iou/box_iou_cpu.h): AVX2 where the CPU has it,
 * then the baseline. */
static void every_kind_and_dtype(void **state)
{
    (void)state;
    for (int isa = 1; isa >= 0; isa--) {
        assert_ok(dk_tunable_set("box_iou.isa", isa, NULL));
        dkk_rng r = {7};
        for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++)
            for (int kind = 0; kind < DK_BOX_NKINDS; kind++) {
                if (is_int(DTYPES[d]) && kind >= DK_BOX_MMCV_IOU) continue;
                for (int off = 0; off <= (kind >= DK_BOX_MMCV_IOU); off++) {
                    check_case(DTYPES[d], kind, false, off, 37, 53, 0, &r);
                    check_case(DTYPES[d], kind, true, off, 29, 29, 0, &r);
                    check_case(DTYPES[d], kind, false, off, 13, 1100, 3, &r); /* strided, two column blocks */
                    check_case(DTYPES[d], kind, false, off, 1, 1, 0, &r);
                }
            }
    }
    assert_ok(dk_tunable_set("box_iou.isa", 1, NULL));
}

static void same_bits_for_any_thread_count(void **state)
{
    (void)state;
    dkk_rng r = {11};
    for (int kind = 0; kind < DK_BOX_NKINDS; kind++) {
        dkk_tensor *b1 = make_boxes(&r, DK_FLOAT32, 300, true, 0), *b2 = make_boxes(&r, DK_FLOAT32, 2100, true, 0);
        dkk_tensor *o1 = dkk_new(DK_FLOAT32, 2, (int64_t[]){300, 2100}, NULL, 0);
        dkk_tensor *o2 = dkk_new(DK_FLOAT32, 2, (int64_t[]){300, 2100}, NULL, 0);
        assert_ok(dk_set_num_threads(1));
        assert_ok(dk_box_iou(&b1->t, &b2->t, &o1->t, kind, false, 1e-7, 0));
        assert_ok(dk_set_num_threads(2));
        assert_ok(dk_box_iou(&b1->t, &b2->t, &o2->t, kind, false, 1e-7, 0));
        dkk_assert_identical(o1, o2, "1 thread vs 2 threads");
        dkk_free(b1), dkk_free(b2), dkk_free(o1), dkk_free(o2);
    }
    assert_ok(dk_set_num_threads(0));
}

/* Note [Streaming rows] in csrc/cpu/box_iou/box_iou_cpu.h: rows that go out through streaming
 * stores (forced here with box_iou.stream = 1: the rule takes them for large fresh outputs
 * only) give the same bits as one thread's plain stores, on 1 to 3 threads, for float32 and
 * float64, with a column block that ends in a partial vector (float64, 1026 columns) and an
 * output whose rows are not 16-byte aligned and cannot stream (1027 columns). */
static void streamed_rows_same_bits(void **state)
{
    (void)state;
    assert_ok(dk_tunable_set("large_output.min_bytes", 0, NULL));
    assert_ok(dk_tunable_set("parallel.min_work", 0, NULL));
    dkk_rng r = {19};
    const dk_dtype dts[2] = {DK_FLOAT32, DK_FLOAT64};
    const int64_t cols[3] = {1036, 1026, 1027};
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 3; c++)
            for (int kind = 0; kind < DK_BOX_NKINDS; kind += 2) {
                const int64_t n = 97, m = cols[c];
                dkk_tensor *b1 = make_boxes(&r, dts[d], n, true, 0), *b2 = make_boxes(&r, dts[d], m, true, 0);
                dkk_tensor *one = dkk_new(dts[d], 2, (int64_t[]){n, m}, NULL, 0);
                assert_ok(dk_tunable_set("box_iou.stream", 0, NULL));
                assert_ok(dk_set_num_threads(1));
                assert_ok(dk_box_iou(&b1->t, &b2->t, &one->t, kind, false, 1e-7, 0));
                assert_ok(dk_tunable_set("box_iou.stream", 1, NULL));
                for (int t = 1; t <= 3; t++) {
                    dkk_tensor *o = dkk_new(dts[d], 2, (int64_t[]){n, m}, NULL, 0);
                    assert_ok(dk_set_num_threads(t));
                    assert_ok(dk_box_iou(&b1->t, &b2->t, &o->t, kind, false, 1e-7, 0));
                    dkk_assert_identical(o, one, "streamed rows vs 1 thread's plain stores");
                    dkk_free(o);
                }
                dkk_free(b1), dkk_free(b2), dkk_free(one);
            }
    assert_ok(dk_set_num_threads(0));
    dk_tunables_reset();
}

static void empty_inputs(void **state)
{
    (void)state;
    dkk_rng r = {3};
    dkk_tensor *b0 = make_boxes(&r, DK_FLOAT32, 0, false, 0), *b5 = make_boxes(&r, DK_FLOAT32, 5, false, 0);
    dkk_tensor *o05 = dkk_new(DK_FLOAT32, 2, (int64_t[]){0, 5}, NULL, 0),
               *o50 = dkk_new(DK_FLOAT32, 2, (int64_t[]){5, 0}, NULL, 0);
    dkk_tensor *o0 = dkk_new(DK_FLOAT32, 1, (int64_t[]){0}, NULL, 0);
    assert_ok(dk_box_iou(&b0->t, &b5->t, &o05->t, DK_BOX_IOU, false, 1e-7, 0));
    assert_ok(dk_box_iou(&b5->t, &b0->t, &o50->t, DK_BOX_GIOU, false, 1e-7, 0));
    assert_ok(dk_box_iou(&b0->t, &b0->t, &o0->t, DK_BOX_MMCV_IOU, true, 0, 1));
    dkk_free(b0), dkk_free(b5), dkk_free(o05), dkk_free(o50), dkk_free(o0);
}

static void bad_input(void **state)
{
    (void)state;
    dkk_rng r = {5};
    dkk_tensor *b3 = make_boxes(&r, DK_FLOAT32, 3, false, 0), *b2 = make_boxes(&r, DK_FLOAT32, 2, false, 0);
    dkk_tensor *o32 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 2}, NULL, 0),
               *o3 = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 0);
    dkk_tensor *v4 = dkk_new(DK_FLOAT32, 1, (int64_t[]){4}, NULL, 0),
               *w5 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 5}, NULL, 0);
    dkk_tensor *d2 = make_boxes(&r, DK_FLOAT64, 2, false, 0), *i3 = make_boxes(&r, DK_INT32, 3, false, 0);
    dkk_tensor *u3 = dkk_new(DK_BOOL, 2, (int64_t[]){3, 4}, NULL, 0),
               *o32d = dkk_new(DK_FLOAT64, 2, (int64_t[]){3, 2}, NULL, 0);
    assert_error(dk_box_iou(&v4->t, &b2->t, &o32->t, DK_BOX_IOU, false, 1e-7, 0), DK_EINVAL,
                 "box_iou: 'boxes1' must have shape [N, 4] (x1, y1, x2, y2), got 1 dimensions");
    assert_error(dk_box_iou(&b3->t, &w5->t, &o32->t, DK_BOX_IOU, false, 1e-7, 0), DK_EINVAL,
                 "box_iou: 'boxes2' must have shape [N, 4] (x1, y1, x2, y2), got [3, 5]");
    assert_error(dk_box_iou(&b3->t, &d2->t, &o32->t, DK_BOX_IOU, false, 1e-7, 0), DK_ETYPE,
                 "box_iou: 'boxes2' must have the dtype of 'boxes1' (float32), got float64");
    assert_error(dk_box_iou(&b3->t, &b2->t, &o32->t, 6, false, 1e-7, 0), DK_EINVAL,
                 "box_iou: kind must be in [0, 6) (dk_box_kind), got 6");
    assert_error(dk_box_iou(&b3->t, &b2->t, &o32->t, DK_BOX_IOU, false, 1e-7, 1), DK_EINVAL,
                 "box_iou: offset must be 0, got 1 (kind box_iou)");
    assert_error(dk_box_iou(&b3->t, &b2->t, &o32->t, DK_BOX_MMCV_IOF, false, 0, 2), DK_EINVAL,
                 "box_iou: offset must be 0 or 1, got 2 (kind bbox_overlaps 'iof')");
    assert_error(dk_box_iou(&b3->t, &b2->t, &o3->t, DK_BOX_MMCV_IOU, true, 0, 0), DK_EINVAL,
                 "box_iou: aligned pairs need as many boxes in 'boxes2' as in 'boxes1', got 2 and 3");
    assert_error(dk_box_iou(&b3->t, &b2->t, &o3->t, DK_BOX_IOU, false, 0, 0), DK_EINVAL,
                 "box_iou: 'out' must be 2-d [N, M], got 1 dimensions");
    assert_error(dk_box_iou(&b3->t, &b2->t, &o32d->t, DK_BOX_IOU, false, 0, 0), DK_ETYPE,
                 "box_iou: 'out' must be float32, got float64");
    assert_error(dk_box_iou(&i3->t, &i3->t, &o3->t, DK_BOX_MMCV_IOU, true, 0, 0), DK_ETYPE,
                 "box_iou: 'boxes1' must be float16, bfloat16, float32 or float64 for bbox_overlaps 'iou', got int32");
    assert_error(dk_box_iou(&u3->t, &u3->t, &o32->t, DK_BOX_IOU, false, 0, 0), DK_ETYPE,
                 "box_iou: 'boxes1' must be float16, bfloat16, float32, float64, int8, uint8, int16, int32 or int64 "
                 "for box_iou, got bool");
    /* 2^31 boxes, expanded from one (stride 0): refused before anything is read */
    dkk_tensor *big = dkk_new(DK_FLOAT32, 2, (int64_t[]){1, 4}, NULL, 0);
    big->shape[0] = (int64_t)1 << 31;
    big->strides[0] = 0;
    dkk_tensor *obig = dkk_new(DK_FLOAT32, 1, (int64_t[]){1}, NULL, 0);
    assert_error(dk_box_iou(&big->t, &big->t, &obig->t, DK_BOX_IOU, true, 0, 0), DK_EINVAL,
                 "box_iou: at most 2^31 - 1 boxes in 'boxes1', got 2147483648");
    dkk_free(b3), dkk_free(b2), dkk_free(o32), dkk_free(o3), dkk_free(v4), dkk_free(w5), dkk_free(d2), dkk_free(i3);
    dkk_free(u3), dkk_free(o32d), dkk_free(big), dkk_free(obig);
}

/* The comparison test_gpu_box_iou makes on a real GPU (dkk_assert_same_values): a NaN of any sign
 * and payload is that NaN, in every float dtype; everything else is compared by its bits. */
static void nan_bits_are_the_hardwares(void **state)
{
    (void)state;
    const uint64_t f64[] = {0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff0000000000001ull};
    const uint32_t f32[] = {0x7fc00000u, 0xffc00000u, 0x7fffffffu};
    const uint16_t f16[] = {0x7e00u, 0xfe00u, 0x7c01u}, bf16[] = {0x7fc0u, 0xffc0u, 0x7f81u};
    for (int i = 0; i < 3; i++) {
        assert_true(dkk_is_nan_at(&f64[i], DK_FLOAT64) && dkk_is_nan_at(&f32[i], DK_FLOAT32));
        assert_true(dkk_is_nan_at(&f16[i], DK_FLOAT16) && dkk_is_nan_at(&bf16[i], DK_BFLOAT16));
    }
    const uint32_t inf = 0x7f800000u, one = 0x3f800000u;
    const uint16_t inf16 = 0x7c00u, binf = 0x7f80u;
    assert_false(dkk_is_nan_at(&inf, DK_FLOAT32) || dkk_is_nan_at(&one, DK_FLOAT32));
    assert_false(dkk_is_nan_at(&inf16, DK_FLOAT16) || dkk_is_nan_at(&binf, DK_BFLOAT16));
    dkk_tensor *a = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 0),
               *b = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 1);
    const uint32_t va[] = {0x7fc00000u, 0x80000000u, 0x3f800000u}, vb[] = {0xffc00001u, 0x80000000u, 0x3f800000u};
    for (int i = 0; i < 3; i++) {
        memcpy((char *)a->mem + 4 * (size_t)dkk_offset(a, (int64_t[]){i}), &va[i], 4);
        memcpy((char *)b->mem + 4 * (size_t)dkk_offset(b, (int64_t[]){i}), &vb[i], 4);
    }
    dkk_assert_same_values(a, b, "NaNs of other bits, -0 and 1"); /* passes: NaN is NaN */
    dkk_free(a), dkk_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kind_and_dtype),
        cmocka_unit_test(same_bits_for_any_thread_count),
        cmocka_unit_test(streamed_rows_same_bits),
        cmocka_unit_test(empty_inputs),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(nan_bits_are_the_hardwares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
