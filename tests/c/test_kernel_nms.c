/*
 * test_kernel_nms.c — nms and batched_nms on the CPU against the references' algorithm, written
 * out here independently: a stable descending sort of the scores (NaN first), then every later
 * box against every kept one, with torchvision's arithmetic (MMCV's with offset 1). The kernel
 * takes shortcuts (Note [What can suppress what] in csrc/cpu/nms/nms_run_tmpl.h); its kept set
 * and order must be the references' exactly, on random and clustered boxes, boxes built to sit
 * at the threshold, ties, NaN and infinite values, degenerate boxes, huge coordinates, every
 * dtype, both offsets, categories, and thresholds below zero or NaN. soft_nms against MMCV's
 * published vectors. nms_match against MMCV's loop (nms_match_cpu) written out here, and its
 * published vectors.
 */
#include "dk_kernel_test.h"
#include "nms.h"

/* ---- the reference ----------------------------------------------------------------------- */

static bool before_desc(double a, int64_t ia, double b, int64_t ib)
{
    const bool na = a != a, nb = b != b;
    if (na || nb) return na && (!nb || ia < ib); /* NaN first, ties by index */
    if (a == b) return ia < ib;
    return a > b;
}

/* The boxes' indices by decreasing score (stable, NaN first): torch.sort(descending=True). */
static int64_t *ref_order(const dkk_tensor *scores, int64_t n)
{
    const size_t cnt = n > 0 ? (size_t)n : 1;
    int64_t *ord = malloc(cnt * sizeof *ord);
    double *s = malloc(cnt * sizeof *s);
    for (int64_t i = 0; i < n; i++) {
        ord[i] = i;
        s[i] = dkk_get(scores, (int64_t[]){i});
    }
    for (int64_t i = 1; i < n; i++) { /* insertion sort: stable */
        const int64_t v = ord[i];
        int64_t j = i;
        for (; j > 0 && before_desc(s[v], v, s[ord[j - 1]], ord[j - 1]); j--) ord[j] = ord[j - 1];
        ord[j] = v;
    }
    free(s);
    return ord;
}

/* The references' overlap of kept box i with candidate j: in double for float64 boxes, else in
 * float (the value, exactly, as a double). */
static double ref_overlap(const dkk_tensor *boxes, int64_t i, int64_t j, int off)
{
    double c[2][4];
    for (int d = 0; d < 4; d++) {
        c[0][d] = dkk_get(boxes, (int64_t[]){i, d});
        c[1][d] = dkk_get(boxes, (int64_t[]){j, d});
    }
    if (dk_tensor_dtype(&boxes->t) == DK_FLOAT64) {
        const double ia = (c[0][2] - c[0][0] + off) * (c[0][3] - c[0][1] + off);
        const double ja = (c[1][2] - c[1][0] + off) * (c[1][3] - c[1][1] + off);
        const double xx1 = c[0][0] < c[1][0] ? c[1][0] : c[0][0], yy1 = c[0][1] < c[1][1] ? c[1][1] : c[0][1];
        const double xx2 = c[1][2] < c[0][2] ? c[1][2] : c[0][2], yy2 = c[1][3] < c[0][3] ? c[1][3] : c[0][3];
        const double w0 = xx2 - xx1 + off, h0 = yy2 - yy1 + off;
        const double w = 0 < w0 ? w0 : 0, h = 0 < h0 ? h0 : 0;
        return w * h / (ia + ja - w * h);
    }
    float f[2][4];
    for (int d = 0; d < 4; d++) f[0][d] = (float)c[0][d], f[1][d] = (float)c[1][d];
    const float o = (float)off;
    const float ia = (f[0][2] - f[0][0] + o) * (f[0][3] - f[0][1] + o);
    const float ja = (f[1][2] - f[1][0] + o) * (f[1][3] - f[1][1] + o);
    const float xx1 = f[0][0] < f[1][0] ? f[1][0] : f[0][0], yy1 = f[0][1] < f[1][1] ? f[1][1] : f[0][1];
    const float xx2 = f[1][2] < f[0][2] ? f[1][2] : f[0][2], yy2 = f[1][3] < f[0][3] ? f[1][3] : f[0][3];
    const float w0 = xx2 - xx1 + o, h0 = yy2 - yy1 + o;
    const float w = 0 < w0 ? w0 : 0, h = 0 < h0 ? h0 : 0;
    const float inter = w * h;
    return inter / (ia + ja - inter);
}

static int64_t ref_nms(const dkk_tensor *boxes, const dkk_tensor *scores, const int64_t *cls, double thr, int off,
                       int64_t *keep)
{
    const int64_t n = boxes->shape[0];
    int64_t *ord = ref_order(scores, n);
    unsigned char *sup = calloc(n > 0 ? (size_t)n : 1, 1);
    int64_t k = 0;
    for (int64_t a = 0; a < n; a++) {
        const int64_t i = ord[a];
        if (sup[i]) continue;
        keep[k++] = i;
        for (int64_t b = a + 1; b < n; b++) {
            const int64_t j = ord[b];
            if (sup[j] || (cls && cls[i] != cls[j])) continue;
            if (ref_overlap(boxes, i, j, off) > thr) sup[j] = 1;
        }
    }
    free(ord), free(sup);
    return k;
}

/* MMCV's nms_match_cpu, as its loop is written: each kept box's group is itself and every later
 * box not yet suppressed whose overlap (offset 0) is >= the threshold (rounded to float for
 * float boxes: MMCV's C float). Returns the number of groups. */
static int64_t ref_nms_match(const dkk_tensor *boxes, const dkk_tensor *scores, double thr, int64_t *members,
                             int64_t *starts)
{
    const int64_t n = boxes->shape[0];
    const double t = dk_tensor_dtype(&boxes->t) == DK_FLOAT64 ? thr : (double)(float)thr;
    int64_t *ord = ref_order(scores, n);
    unsigned char *sup = calloc(n > 0 ? (size_t)n : 1, 1);
    int64_t out = 0, g = 0;
    for (int64_t a = 0; a < n; a++) {
        const int64_t i = ord[a];
        if (sup[i]) continue;
        starts[g++] = out;
        members[out++] = i;
        for (int64_t b = a + 1; b < n; b++) {
            const int64_t j = ord[b];
            if (!sup[j] && ref_overlap(boxes, i, j, 0) >= t) {
                sup[j] = 1;
                members[out++] = j;
            }
        }
    }
    assert_int_equal(out, n); /* every box in one group */
    free(ord), free(sup);
    return g;
}

/* ---- cases ------------------------------------------------------------------------------- */

static void check(const char *what, dkk_tensor *boxes, dkk_tensor *scores, const int64_t *cls, double thr, int off)
{
    const int64_t n = boxes->shape[0];
    int64_t *want = malloc((n > 0 ? (size_t)n : 1) * sizeof *want);
    const int64_t nwant = ref_nms(boxes, scores, cls, thr, off, want);
    dkk_tensor *keep = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dkk_tensor *idxs = NULL;
    if (cls) {
        idxs = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0);
        memcpy(idxs->mem, cls, (size_t)n * sizeof *cls);
    }
    dk_status st = dk_nms(&boxes->t, &scores->t, idxs ? &idxs->t : NULL, &keep->t, &num->t, thr, off);
    if (st) fail_msg("%s: %s", what, dk_last_error());
    const int64_t got = ((int64_t *)num->mem)[0];
    if (got != nwant) fail_msg("%s: kept %lld boxes, the reference %lld", what, (long long)got, (long long)nwant);
    for (int64_t i = 0; i < got; i++)
        if (((int64_t *)keep->mem)[i] != want[i])
            fail_msg("%s: keep[%lld] = %lld, the reference %lld", what, (long long)i,
                     (long long)((int64_t *)keep->mem)[i], (long long)want[i]);
    if (cls) { /* batched_nms: the same, through its composite */
        ((int64_t *)num->mem)[0] = -1;
        if ((st = dk_batched_nms(&boxes->t, &scores->t, &idxs->t, &keep->t, &num->t, thr)) != DK_OK || off)
            assert_true(off || st == DK_OK);
        if (!off) {
            assert_int_equal(((int64_t *)num->mem)[0], nwant);
            assert_memory_equal(keep->mem, want, (size_t)nwant * sizeof *want);
        }
    }
    dkk_free(keep), dkk_free(num), dkk_free(idxs);
    free(want);
}

static dkk_tensor *random_boxes(dkk_rng *r, dk_dtype dt, int64_t n, double span, double lo, double hi)
{
    dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){n, 4}, NULL, 0);
    for (int64_t i = 0; i < n; i++) {
        const double x = dkk_uniform(r, 0, span), y = dkk_uniform(r, 0, span);
        const double w = dkk_uniform(r, lo, hi), h = dkk_uniform(r, lo, hi);
        const double v[4] = {x, y, x + w, y + h};
        for (int d = 0; d < 4; d++) dkk_set(b, (int64_t[]){i, d}, v[d]);
    }
    return b;
}

static dkk_tensor *random_scores(dkk_rng *r, dk_dtype dt, int64_t n, int levels)
{
    dkk_tensor *s = dkk_new(dt, 1, (int64_t[]){n}, NULL, 0);
    for (int64_t i = 0; i < n; i++)
        dkk_set(s, (int64_t[]){i}, levels ? floor(dkk_uniform(r, 0, levels)) : dkk_uniform(r, 0, 1));
    return s;
}

static const dk_dtype FLOATS[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};

static void random_boxes_at_several_thresholds(void **state)
{
    (void)state;
    dkk_rng r = {1};
    char what[128];
    for (size_t d = 0; d < DK_COUNTOF(FLOATS); d++)
        for (int rep = 0; rep < 3; rep++) {
            const int64_t n = rep == 0 ? 1000 : rep == 1 ? 300 : 37;
            dkk_tensor *b = random_boxes(&r, FLOATS[d], n, 1000, 1, 101);
            dkk_tensor *s = random_scores(&r, FLOATS[d], n, rep == 2 ? 3 : 0); /* ties in the last */
            for (int off = 0; off <= 1; off++)
                for (int t = 0; t < 3; t++) {
                    const double thr = t == 0 ? 0.2 : t == 1 ? 0.5 : 0.8;
                    snprintf(what, sizeof what, "random %s n=%lld thr=%g offset=%d", dk_dtype_name(FLOATS[d]),
                             (long long)n, thr, off);
                    check(what, b, s, NULL, thr, off);
                }
            dkk_free(b), dkk_free(s);
        }
}

/* Many overlapping proposals around a few objects, as a detector's RPN produces. */
static void clustered_proposals(void **state)
{
    (void)state;
    dkk_rng r = {2};
    const int64_t n = 3000, objects = 50;
    dkk_tensor *b = dkk_new(DK_FLOAT32, 2, (int64_t[]){n, 4}, NULL, 0);
    for (int64_t i = 0; i < n; i++) {
        dkk_rng o = {(uint64_t)(i % objects) + 1000};
        const double cx = dkk_uniform(&o, 0, 1000), cy = dkk_uniform(&o, 0, 1000), w = dkk_uniform(&o, 20, 200),
                     h = dkk_uniform(&o, 20, 200);
        const double jx = dkk_uniform(&r, -0.2, 0.2) * w, jy = dkk_uniform(&r, -0.2, 0.2) * h;
        const double sw = w * dkk_uniform(&r, 0.7, 1.3), sh = h * dkk_uniform(&r, 0.7, 1.3);
        const double v[4] = {cx + jx - sw / 2, cy + jy - sh / 2, cx + jx + sw / 2, cy + jy + sh / 2};
        for (int d = 0; d < 4; d++) dkk_set(b, (int64_t[]){i, d}, v[d]);
    }
    dkk_tensor *s = random_scores(&r, DK_FLOAT32, n, 0);
    check("clustered thr=0.7", b, s, NULL, 0.7, 0);
    check("clustered thr=0.3", b, s, NULL, 0.3, 0);
    dkk_free(b), dkk_free(s);
}

/* Pairs whose IoU is exactly the threshold (not suppressed: the test is strict) or just above. */
static void boxes_exactly_at_the_threshold(void **state)
{
    (void)state;
    /* [0,0,10,10] and [0,0,10,5]: IoU 0.5 exactly; [0,0,10,10] and [0,0,10,4]: 0.4 */
    const double v[][4] = {{0, 0, 10, 10},   {0, 0, 10, 5},     {100, 0, 110, 10},
                           {100, 0, 110, 4}, {200, 0, 210, 10}, {200, 0, 210, 5.0001}};
    const int64_t n = 6;
    for (size_t d = 0; d < DK_COUNTOF(FLOATS); d++) {
        dkk_tensor *b = dkk_new(FLOATS[d], 2, (int64_t[]){n, 4}, NULL, 0);
        dkk_tensor *s = dkk_new(FLOATS[d], 1, (int64_t[]){n}, NULL, 0);
        for (int64_t i = 0; i < n; i++) {
            for (int k = 0; k < 4; k++) dkk_set(b, (int64_t[]){i, k}, v[i][k]);
            dkk_set(s, (int64_t[]){i}, (double)(n - i));
        }
        check("at the threshold 0.5", b, s, NULL, 0.5, 0);
        check("at the threshold 0.4", b, s, NULL, 0.4, 0);
        dkk_free(b), dkk_free(s);
    }
}

/* NaN and infinite scores and coordinates, degenerate and empty boxes, huge coordinates, one
 * box covering everything: the reference's decisions, whatever they are. */
static void hostile_values(void **state)
{
    (void)state;
    dkk_rng r = {3};
    char what[64];
    for (size_t d = 0; d < DK_COUNTOF(FLOATS); d++)
        for (int rep = 0; rep < 20; rep++) {
            const int64_t n = 60;
            dkk_tensor *b = random_boxes(&r, FLOATS[d], n, 100, -20, 40); /* many degenerate */
            dkk_tensor *s = random_scores(&r, FLOATS[d], n, rep % 2 ? 4 : 0);
            for (int k = 0; k < 12; k++) {
                const int64_t i = (int64_t)dkk_uniform(&r, 0, n), c = (int64_t)dkk_uniform(&r, 0, 4);
                const double pick = dkk_uniform(&r, 0, 6);
                const double val = pick < 1   ? NAN
                                   : pick < 2 ? INFINITY
                                   : pick < 3 ? -INFINITY
                                   : pick < 4 ? 1e30
                                   : pick < 5 ? -0.0
                                              : 1e12;
                if (k % 3 == 0) dkk_set(s, (int64_t[]){i}, val);
                else dkk_set(b, (int64_t[]){i, c}, val);
            }
            if (rep % 5 == 0) { /* a box covering everything */
                const double big[4] = {-1e6, -1e6, 1e6, 1e6};
                for (int c = 0; c < 4; c++) dkk_set(b, (int64_t[]){rep % n, c}, big[c]);
            }
            for (int off = 0; off <= 1; off++) {
                snprintf(what, sizeof what, "hostile %s rep %d offset %d", dk_dtype_name(FLOATS[d]), rep, off);
                check(what, b, s, NULL, 0.3, off);
                check(what, b, s, NULL, 0.0, off);
                check(what, b, s, NULL, -0.5, off);
                check(what, b, s, NULL, NAN, off);
            }
            dkk_free(b), dkk_free(s);
        }
}

static void categories(void **state)
{
    (void)state;
    dkk_rng r = {4};
    const int64_t n = 2000;
    dkk_tensor *b = random_boxes(&r, DK_FLOAT32, n, 300, 5, 60);
    dkk_tensor *s = random_scores(&r, DK_FLOAT32, n, 0);
    int64_t *cls = malloc((size_t)n * sizeof *cls);
    for (int64_t i = 0; i < n; i++) cls[i] = (int64_t)dkk_uniform(&r, 0, 80) * 7 - 100; /* sparse, negative too */
    check("80 categories thr=0.5", b, s, cls, 0.5, 0);
    check("80 categories thr=0.5 offset=1", b, s, cls, 0.5, 1);
    for (int64_t i = 0; i < n; i++) cls[i] = INT64_MIN + (i % 3); /* extreme values */
    check("3 extreme categories", b, s, cls, 0.4, 0);
    free(cls);
    dkk_free(b), dkk_free(s);
}

static void empty_and_bad_input(void **state)
{
    (void)state;
    dkk_tensor *b = dkk_new(DK_FLOAT32, 2, (int64_t[]){0, 4}, NULL, 0),
               *s = dkk_new(DK_FLOAT32, 1, (int64_t[]){0}, NULL, 0);
    dkk_tensor *keep = dkk_new(DK_INT64, 1, (int64_t[]){0}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    ((int64_t *)num->mem)[0] = 7;
    assert_ok(dk_nms(&b->t, &s->t, NULL, &keep->t, &num->t, 0.5, 0));
    assert_int_equal(((int64_t *)num->mem)[0], 0);
    dkk_tensor *b3 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 5}, NULL, 0),
               *s3 = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 0);
    dkk_tensor *k3 = dkk_new(DK_INT64, 1, (int64_t[]){3}, NULL, 0);
    assert_error(dk_nms(&b3->t, &s3->t, NULL, &k3->t, &num->t, 0.5, 0), DK_EINVAL,
                 "nms: 'boxes' must have shape [*, 4], got [3, 5]");
    dkk_tensor *b4 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 4}, NULL, 0),
               *s2 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 2}, NULL, 0);
    assert_error(dk_nms(&b4->t, &s2->t, NULL, &k3->t, &num->t, 0.5, 0), DK_EINVAL,
                 "nms: 'scores' must have shape [3], got [3, 2]");
    dkk_tensor *s4 = dkk_new(DK_FLOAT32, 1, (int64_t[]){4}, NULL, 0);
    assert_error(dk_nms(&b4->t, &s4->t, NULL, &k3->t, &num->t, 0.5, 0), DK_EINVAL,
                 "nms: 'scores' must have shape [3], got [4]");
    dkk_tensor *s64 = dkk_new(DK_FLOAT64, 1, (int64_t[]){3}, NULL, 0);
    assert_error(dk_nms(&b4->t, &s64->t, NULL, &k3->t, &num->t, 0.5, 0), DK_ETYPE,
                 "nms: 'scores' must be float32, got float64");
    assert_error(dk_nms(&b4->t, &s3->t, NULL, &k3->t, &num->t, 0.5, 2), DK_EINVAL, "nms: offset must be 0 or 1, got 2");
    dkk_free(b), dkk_free(s), dkk_free(keep), dkk_free(num), dkk_free(b3), dkk_free(s3), dkk_free(k3), dkk_free(b4);
    dkk_free(s2), dkk_free(s4), dkk_free(s64);
}

/* MMCV's published soft_nms vectors (tests/test_ops/test_nms.py), every method, through boxes
 * and outputs with strides, and the same in float64. */
static void soft_nms_mmcv_vectors(void **state)
{
    (void)state;
    static const double boxes_v[4][4] = {{6, 3, 8, 7}, {3, 6, 9, 11}, {3, 7, 10, 12}, {1, 4, 13, 7}};
    static const double scores_v[4] = {0.6, 0.9, 0.7, 0.2};
    static const struct {
        int method;
        int64_t n, inds[4];
        double score[4];
    } want[] = {
        {DK_SOFT_NMS_LINEAR, 4, {1, 0, 2, 3}, {0.9, 0.6, 0.29024392, 0.2}},
        {DK_SOFT_NMS_GAUSSIAN, 4, {1, 0, 2, 3}, {0.9, 0.59630775, 0.35275510, 0.18650459}},
        {DK_SOFT_NMS_NAIVE, 3, {1, 0, 3, 0}, {0.9, 0.6, 0.2, 0}},
    };
    for (int f = 0; f < 2; f++) {
        const dk_dtype dt = f ? DK_FLOAT64 : DK_FLOAT32;
        dkk_tensor *b = dkk_new(dt, 2, (int64_t[]){4, 4}, (int[]){1, 0}, 3); /* column-major, padded */
        dkk_tensor *s = dkk_new(dt, 1, (int64_t[]){4}, NULL, 2);
        for (int i = 0; i < 4; i++) {
            for (int d = 0; d < 4; d++) dkk_set(b, (int64_t[]){i, d}, boxes_v[i][d]);
            dkk_set(s, (int64_t[]){i}, scores_v[i]);
        }
        for (size_t m = 0; m < sizeof want / sizeof *want; m++) {
            dkk_tensor *dets = dkk_new(dt, 2, (int64_t[]){4, 5}, NULL, 1),
                       *inds = dkk_new(DK_INT64, 1, (int64_t[]){4}, NULL, 1);
            dkk_tensor *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
            assert_ok(dk_soft_nms(&b->t, &s->t, &dets->t, &inds->t, &num->t, 0.3, 0.5, 0.01, want[m].method, 0));
            assert_int_equal(((int64_t *)num->mem)[0], want[m].n);
            for (int64_t k = 0; k < want[m].n; k++) {
                const int64_t i = want[m].inds[k];
                assert_int_equal((int64_t)dkk_get(inds, (int64_t[]){k}), i);
                for (int d = 0; d < 4; d++) assert_true(dkk_get(dets, (int64_t[]){k, d}) == boxes_v[i][d]);
                const double sc = dkk_get(dets, (int64_t[]){k, 4});
                if (fabs(sc - want[m].score[k]) > 1e-6)
                    fail_msg("%s method %d: score %lld = %.9g, MMCV %.9g", dk_dtype_name(dt), want[m].method,
                             (long long)k, sc, want[m].score[k]);
            }
            dkk_free(dets), dkk_free(inds), dkk_free(num);
        }
        dkk_free(b), dkk_free(s);
    }
    /* bad parameters */
    dkk_tensor *b = dkk_new(DK_FLOAT32, 2, (int64_t[]){2, 4}, NULL, 0),
               *s = dkk_new(DK_FLOAT32, 1, (int64_t[]){2}, NULL, 0);
    dkk_tensor *dets = dkk_new(DK_FLOAT32, 2, (int64_t[]){2, 5}, NULL, 0),
               *inds = dkk_new(DK_INT64, 1, (int64_t[]){2}, NULL, 0);
    dkk_tensor *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0),
               *d64 = dkk_new(DK_FLOAT64, 2, (int64_t[]){2, 5}, NULL, 0);
    assert_error(dk_soft_nms(&b->t, &s->t, &dets->t, &inds->t, &num->t, 0.3, 0.5, 0.01, 3, 0), DK_EINVAL,
                 "soft_nms: method must be 0 (naive), 1 (linear) or 2 (gaussian), got 3");
    assert_error(dk_soft_nms(&b->t, &s->t, &dets->t, &inds->t, &num->t, 0.3, 0.0, 0.01, 2, 0), DK_EINVAL,
                 "soft_nms: sigma must be positive for the gaussian method, got 0");
    assert_error(dk_soft_nms(&b->t, &s->t, &d64->t, &inds->t, &num->t, 0.3, 0.5, 0.01, 1, 0), DK_ETYPE,
                 "soft_nms: 'dets' must be float32, got float64");
    assert_true(dk_soft_nms(&b->t, &s->t, &dets->t, &dets->t, &num->t, 0.3, 0.5, 0.01, 1, 0) != DK_OK); /* aliased */
    dkk_free(b), dkk_free(s), dkk_free(dets), dkk_free(inds), dkk_free(num), dkk_free(d64);
}

/* ---- nms_match ---------------------------------------------------------------------------- */

static void check_match(const char *what, dkk_tensor *boxes, dkk_tensor *scores, double thr)
{
    const int64_t n = boxes->shape[0];
    const size_t cnt = n > 0 ? (size_t)n : 1;
    int64_t *wm = malloc(cnt * sizeof *wm), *ws = malloc(cnt * sizeof *ws);
    const int64_t ng = ref_nms_match(boxes, scores, thr, wm, ws);
    dkk_tensor *members = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0),
               *starts = dkk_new(DK_INT64, 1, (int64_t[]){n}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    dk_status st = dk_nms_match(&boxes->t, &scores->t, &members->t, &starts->t, &num->t, thr);
    if (st) fail_msg("%s: %s", what, dk_last_error());
    const int64_t got = ((int64_t *)num->mem)[0];
    if (got != ng) fail_msg("%s: %lld groups, the reference %lld", what, (long long)got, (long long)ng);
    for (int64_t i = 0; i < n; i++)
        if ((int64_t)dkk_get(members, (int64_t[]){i}) != wm[i])
            fail_msg("%s: members[%lld] = %lld, the reference %lld", what, (long long)i,
                     (long long)dkk_get(members, (int64_t[]){i}), (long long)wm[i]);
    for (int64_t g = 0; g < ng; g++)
        if ((int64_t)dkk_get(starts, (int64_t[]){g}) != ws[g])
            fail_msg("%s: starts[%lld] = %lld, the reference %lld", what, (long long)g,
                     (long long)dkk_get(starts, (int64_t[]){g}), (long long)ws[g]);
    dkk_free(members), dkk_free(starts), dkk_free(num);
    free(wm), free(ws);
}

static void nms_match_random_and_hostile(void **state)
{
    (void)state;
    dkk_rng r = {11};
    char what[128];
    static const double thrs[] = {0.6, 0.2, 0.9, 0.0, -0.5, NAN};
    for (size_t d = 0; d < DK_COUNTOF(FLOATS); d++)
        for (int rep = 0; rep < 6; rep++) {
            const int64_t n = rep == 0 ? 700 : rep == 1 ? 200 : 41;
            dkk_tensor *b = random_boxes(&r, FLOATS[d], n, rep == 0 ? 600 : 150, rep < 3 ? 1 : -20, 80);
            dkk_tensor *s = random_scores(&r, FLOATS[d], n, rep % 2 ? 4 : 0); /* ties in odd reps */
            for (int k = 0; rep >= 3 && k < 10; k++) {                        /* NaN, infinite and huge values */
                const int64_t i = (int64_t)dkk_uniform(&r, 0, n), c = (int64_t)dkk_uniform(&r, 0, 4);
                const double pick = dkk_uniform(&r, 0, 4);
                const double val = pick < 1 ? NAN : pick < 2 ? INFINITY : pick < 3 ? -INFINITY : 1e30;
                if (k % 3 == 0) dkk_set(s, (int64_t[]){i}, val);
                else dkk_set(b, (int64_t[]){i, c}, val);
            }
            for (size_t t = 0; t < DK_COUNTOF(thrs); t++) {
                snprintf(what, sizeof what, "nms_match %s n=%lld rep %d thr=%g", dk_dtype_name(FLOATS[d]), (long long)n,
                         rep, thrs[t]);
                check_match(what, b, s, thrs[t]);
            }
            dkk_free(b), dkk_free(s);
        }
}

/* MMCV's published case (tests/test_ops/test_nms.py, test_nms_match): two groups, [0, 1] and
 * [2, 3] (IoUs 0.613 and 0.632 against 0.6; boxes 0 and 1 tie at 0.9: index order). And the
 * rule that differs from nms: an overlap exactly at the threshold suppresses. */
static void nms_match_mmcv_vectors(void **state)
{
    (void)state;
    static const double dets[4][5] = {{49.1, 32.4, 51.0, 35.9, 0.9},
                                      {49.3, 32.9, 51.0, 35.3, 0.9},
                                      {35.3, 11.5, 39.9, 14.5, 0.4},
                                      {35.2, 11.7, 39.7, 15.7, 0.3}};
    for (int f64 = 0; f64 < 2; f64++) {
        dkk_tensor *b = dkk_new(f64 ? DK_FLOAT64 : DK_FLOAT32, 2, (int64_t[]){4, 4}, NULL, 0),
                   *s = dkk_new(f64 ? DK_FLOAT64 : DK_FLOAT32, 1, (int64_t[]){4}, NULL, 0);
        for (int64_t i = 0; i < 4; i++) {
            for (int d = 0; d < 4; d++) dkk_set(b, (int64_t[]){i, d}, dets[i][d]);
            dkk_set(s, (int64_t[]){i}, dets[i][4]);
        }
        dkk_tensor *m = dkk_new(DK_INT64, 1, (int64_t[]){4}, NULL, 0),
                   *st = dkk_new(DK_INT64, 1, (int64_t[]){4}, NULL, 0),
                   *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
        assert_ok(dk_nms_match(&b->t, &s->t, &m->t, &st->t, &num->t, 0.6));
        assert_int_equal(((int64_t *)num->mem)[0], 2);
        const int64_t want_m[4] = {0, 1, 2, 3}, want_s[2] = {0, 2};
        assert_memory_equal(m->mem, want_m, sizeof want_m);
        assert_memory_equal(st->mem, want_s, sizeof want_s);
        check_match("MMCV's vectors", b, s, 0.6);
        dkk_free(b), dkk_free(s), dkk_free(m), dkk_free(st), dkk_free(num);
    }
    /* [0,0,10,10] against [0,0,10,5]: IoU 0.5 exactly; nms_match groups them at 0.5, nms does not */
    dkk_tensor *b = dkk_new(DK_FLOAT32, 2, (int64_t[]){2, 4}, NULL, 0),
               *s = dkk_new(DK_FLOAT32, 1, (int64_t[]){2}, NULL, 0);
    const double v[2][4] = {{0, 0, 10, 10}, {0, 0, 10, 5}};
    for (int64_t i = 0; i < 2; i++) {
        for (int d = 0; d < 4; d++) dkk_set(b, (int64_t[]){i, d}, v[i][d]);
        dkk_set(s, (int64_t[]){i}, 1.0 - (double)i);
    }
    dkk_tensor *m = dkk_new(DK_INT64, 1, (int64_t[]){2}, NULL, 0), *st = dkk_new(DK_INT64, 1, (int64_t[]){2}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    assert_ok(dk_nms_match(&b->t, &s->t, &m->t, &st->t, &num->t, 0.5));
    assert_int_equal(((int64_t *)num->mem)[0], 1);
    assert_ok(dk_nms_match(&b->t, &s->t, &m->t, &st->t, &num->t, 0.50001));
    assert_int_equal(((int64_t *)num->mem)[0], 2);
    assert_ok(dk_nms(&b->t, &s->t, NULL, &m->t, &num->t, 0.5, 0));
    assert_int_equal(((int64_t *)num->mem)[0], 2);
    dkk_free(b), dkk_free(s), dkk_free(m), dkk_free(st), dkk_free(num);
}

static void nms_match_empty_and_bad_input(void **state)
{
    (void)state;
    dkk_tensor *b0 = dkk_new(DK_FLOAT32, 2, (int64_t[]){0, 4}, NULL, 0),
               *s0 = dkk_new(DK_FLOAT32, 1, (int64_t[]){0}, NULL, 0),
               *e0 = dkk_new(DK_INT64, 1, (int64_t[]){0}, NULL, 0), *f0 = dkk_new(DK_INT64, 1, (int64_t[]){0}, NULL, 0),
               *num = dkk_new(DK_INT64, 1, (int64_t[]){1}, NULL, 0);
    ((int64_t *)num->mem)[0] = 7;
    assert_ok(dk_nms_match(&b0->t, &s0->t, &e0->t, &f0->t, &num->t, 0.5));
    assert_int_equal(((int64_t *)num->mem)[0], 0);
    dkk_tensor *b = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 5}, NULL, 0),
               *s = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 0), *m = dkk_new(DK_INT64, 1, (int64_t[]){3}, NULL, 0),
               *st = dkk_new(DK_INT64, 1, (int64_t[]){3}, NULL, 0),
               *st2 = dkk_new(DK_INT64, 1, (int64_t[]){2}, NULL, 0),
               *st32 = dkk_new(DK_INT32, 1, (int64_t[]){3}, NULL, 0),
               *b4 = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 4}, NULL, 0);
    assert_error(dk_nms_match(&b->t, &s->t, &m->t, &st->t, &num->t, 0.5), DK_EINVAL,
                 "nms_match: 'boxes' must have shape [*, 4], got [3, 5]");
    assert_error(dk_nms_match(&b4->t, &s->t, &m->t, &st2->t, &num->t, 0.5), DK_EINVAL,
                 "nms_match: 'starts' must have shape [3], got [2]");
    assert_error(dk_nms_match(&b4->t, &s->t, &m->t, &st32->t, &num->t, 0.5), DK_ETYPE,
                 "nms_match: 'starts' must be int64, got int32");
    assert_true(dk_nms_match(&b4->t, &s->t, &m->t, &m->t, &num->t, 0.5) != DK_OK); /* aliased */
    dkk_free(b0), dkk_free(s0), dkk_free(e0), dkk_free(f0), dkk_free(num), dkk_free(b), dkk_free(s), dkk_free(m);
    dkk_free(st), dkk_free(st2), dkk_free(st32), dkk_free(b4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_boxes_at_several_thresholds),
        cmocka_unit_test(clustered_proposals),
        cmocka_unit_test(boxes_exactly_at_the_threshold),
        cmocka_unit_test(hostile_values),
        cmocka_unit_test(categories),
        cmocka_unit_test(empty_and_bad_input),
        cmocka_unit_test(soft_nms_mmcv_vectors),
        cmocka_unit_test(nms_match_random_and_hostile),
        cmocka_unit_test(nms_match_mmcv_vectors),
        cmocka_unit_test(nms_match_empty_and_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
