/*
 * test_kernel_roi_pool.c — the CPU roi_pool (ops/roi_pool.h) against references written here from
 * the two libraries' definitions, in their own integer and float arithmetic (torchvision's
 * rounded whole-pixel bins, MMCV's continuous ones with floorf / ceilf): values, argmax and the
 * backward's sums, bit for bit, for every float dtype, any strides, boxes inside, across and
 * outside the map, degenerate and reversed boxes, NaN and infinite pixels; MMCV's published
 * vectors; thread counts; and the refusals. ps_roi_pool and ps_roi_align likewise, against
 * torchvision's kernels written out here in their own float or double arithmetic.
 */
#include <float.h>
#include <math.h>

#include "dk_kernel_test.h"
#include "dk_parallel.h"
#include "dk_tunables.h"
#include "roi_pool.h"

/* ---- references ---------------------------------------------------------------------------- */

/* [lo, hi) of bin p along an axis of `size`, as torchvision computes it (in T = float or double). */
static void ref_tv_axis(double c1, double c2, double scale, int p, int pooled, int size, bool f32, int *lo, int *hi)
{
#define T(v) (f32 ? (double)(float)(v) : (v))
    const int start = (int)(f32 ? roundf((float)T(c1 * T(scale))) : round(c1 * scale));
    const int end = (int)(f32 ? roundf((float)T(c2 * T(scale))) : round(c2 * scale));
    const int len = end - start + 1 > 1 ? end - start + 1 : 1;
    const double bin = T((double)len / (double)pooled);
    int a = (int)floor(T(p * bin)) + start, b = (int)ceil(T((p + 1) * bin)) + start;
#undef T
    *lo = a < 0 ? 0 : a > size ? size : a;
    *hi = b < 0 ? 0 : b > size ? size : b;
}

/* The same, as MMCV computes it; false for its box of no width or height. */
static bool ref_mmcv_axis(double c1, double c2, double scale, int p, int pooled, int size, bool f32, int *lo, int *hi)
{
#define T(v) (f32 ? (double)(float)(v) : (v))
    const double s = T(scale), start = T(c1 * s), end = T(T(c2 + 1) * s), len = T(end - start);
    if (len <= 0) return false;
    const double bin = T(len / pooled);
    int a = (int)floorf((float)T(T(p * bin) + start)), b = (int)ceilf((float)T(T((p + 1) * bin) + start));
#undef T
    *lo = a < 0 ? 0 : a > size ? size : a;
    *hi = b < 0 ? 0 : b > size ? size : b;
    return true;
}

typedef struct {
    dkk_tensor *out, *arg;
} ref_result;

static ref_result ref_forward(const dkk_tensor *x, const dkk_tensor *rois, int PH, int PW, double scale, int geometry)
{
    const int64_t K = rois->t.shape[0], C = x->t.shape[1], H = x->t.shape[2], W = x->t.shape[3];
    const dk_dtype dt = dk_tensor_dtype(&x->t);
    const bool f32 = dt != DK_FLOAT64;
    ref_result r = {dkk_new(dt, 4, (int64_t[]){K, C, PH, PW}, NULL, 0),
                    dkk_new(DK_INT64, 4, (int64_t[]){K, C, PH, PW}, NULL, 0)};
    for (int64_t k = 0; k < K; k++) {
        double b[5];
        for (int j = 0; j < 5; j++) b[j] = dkk_get(rois, (int64_t[]){k, j});
        for (int64_t c = 0; c < C; c++)
            for (int ph = 0; ph < PH; ph++)
                for (int pw = 0; pw < PW; pw++) {
                    int h0, h1, w0, w1;
                    bool ok;
                    if (geometry == DK_ROI_POOL_TORCHVISION) {
                        ref_tv_axis(b[2], b[4], scale, ph, PH, (int)H, f32, &h0, &h1);
                        ref_tv_axis(b[1], b[3], scale, pw, PW, (int)W, f32, &w0, &w1);
                        ok = true;
                    } else {
                        ok = ref_mmcv_axis(b[2], b[4], scale, ph, PH, (int)H, f32, &h0, &h1) &&
                             ref_mmcv_axis(b[1], b[3], scale, pw, PW, (int)W, f32, &w0, &w1);
                    }
                    const bool empty = !ok || h1 <= h0 || w1 <= w0;
                    double m = empty ? 0 : (f32 ? (double)-FLT_MAX : -FLT_MAX);
                    int64_t a = -1;
                    for (int h = ok ? h0 : 0; ok && h < h1; h++)
                        for (int w = w0; w < w1; w++) {
                            const double v = dkk_get(x, (int64_t[]){(int64_t)b[0], c, h, w});
                            if (v > m) m = v, a = h * W + w;
                        }
                    dkk_set(r.out, (int64_t[]){k, c, ph, pw}, m);
                    dkk_set(r.arg, (int64_t[]){k, c, ph, pw}, (double)a);
                }
    }
    return r;
}

/* ---- cases ------------------------------------------------------------------------------- */

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};

/* k RoIs over an n-image H x W map: inside, across the edges, outside, reversed, a point. */
static dkk_tensor *make_rois(dk_dtype dt, dkk_rng *r, int64_t k, int64_t n, double span)
{
    dkk_tensor *t = dkk_new(dt, 2, (int64_t[]){k, 5}, NULL, 1);
    for (int64_t i = 0; i < k; i++) {
        double x1 = dkk_uniform(r, -0.2 * span, span), y1 = dkk_uniform(r, -0.2 * span, span);
        double v[5] = {(double)(dkk_u64(r) % (uint64_t)n), x1, y1, x1 + dkk_uniform(r, 0, span),
                       y1 + dkk_uniform(r, 0, span)};
        switch (i % 9) {
        case 3: v[3] = v[1] - 3; break;                                /* reversed */
        case 4: v[3] = v[1], v[4] = v[2]; break;                       /* a point */
        case 5: v[1] += 4 * span, v[3] += 4 * span; break;             /* outside */
        case 6: v[1] = -span, v[3] = 2 * span; break;                  /* across the whole map */
        case 7: v[1] = 2.5, v[3] = 5.5, v[2] = 0.5, v[4] = 3.5; break; /* halves: round() ties */
        default: break;
        }
        for (int j = 0; j < 5; j++) dkk_set(t, (int64_t[]){i, j}, v[j]);
    }
    return t;
}

/* Equal integer values in tensors of two integer dtypes (an int32 argmax against the reference's). */
static void assert_same_indices(const dkk_tensor *a, const dkk_tensor *b, const char *what)
{
    int64_t idx[8] = {0};
    if (dk_tensor_numel(&a->t) == 0) return;
    do {
        if (dkk_get(a, idx) != dkk_get(b, idx))
            fail_msg("%s: index %g, expected %g", what, dkk_get(a, idx), dkk_get(b, idx));
    } while (dkk_next(a, idx));
}

/* Note [RoIPool on a CPU]: every case runs with the forward's two layouts and its cost model (the
 * channels-last one with AVX-512, AVX2 and neither, and with AVX-512 and AVX2 once more with every
 * output streamed: large_output.min_bytes 0, Note [RoIPool tiles]), with an int64 argmax, an int32
 * one, an int16 one (Note [A narrow argmax]) and none; all must give the reference's values and argmax. */
static void check_case_g(dk_dtype dt, int geometry, double scale, int PH, int PW, bool nhwc, int64_t C, bool packed,
                         dkk_rng *r)
{
    char what[200];
    snprintf(what, sizeof what, "%s geometry %d scale %g %dx%d %s C=%lld", dk_dtype_name(dt), geometry, scale, PH, PW,
             nhwc ? "NHWC" : "NCHW", (long long)C);
    const int64_t N = 2, H = 11, W = 13, K = 27;
    const int64_t gap = packed ? 0 : 1; /* packed: every tensor gapless, the kernels' runs (Note [RoIPool tiles]) */
    dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, nhwc ? (int[]){0, 2, 3, 1} : NULL, gap);
    dkk_fill_uniform(x, r, -5, 5);
    dkk_set(x, (int64_t[]){0, 1, 3, 3}, NAN);
    dkk_set(x, (int64_t[]){1, 0, 5, 5}, INFINITY);
    dkk_set(x, (int64_t[]){1, 2, 0, 0}, -INFINITY);
    dkk_tensor *rois = make_rois(dt, r, K, N, W / scale);
    dkk_tensor *out = dkk_new(dt, 4, (int64_t[]){K, C, PH, PW}, NULL, 2 * gap);
    dkk_tensor *arg = dkk_new(DK_INT64, 4, (int64_t[]){K, C, PH, PW}, (int[]){3, 2, 1, 0}, 0);
    dkk_tensor *arg32 = dkk_new(DK_INT32, 4, (int64_t[]){K, C, PH, PW}, NULL, 0);
    dkk_tensor *arg16 = dkk_new(DK_INT16, 4, (int64_t[]){K, C, PH, PW}, NULL, 0); /* Note [A narrow argmax] */
    ref_result want = ref_forward(x, rois, PH, PW, scale, geometry);
    for (int64_t run = 0; run < 7; run++) { /* layouts -1, 0, 1; then 1 with each ISA, streamed or not */
        static const int64_t isa[7] = {1, 1, 1, 0, 2, 2, 1};
        const int64_t layout = run < 3 ? run - 1 : 1, stream = run >= 5;
        assert_ok(dk_tunable_set("roi_pool.layout", layout, NULL));
        assert_ok(dk_tunable_set("roi_pool.isa", isa[run], NULL));
        assert_ok(dk_tunable_set("large_output.min_bytes", stream ? 0 : (int64_t)8 << 20, NULL));
        char lwhat[240];
        snprintf(lwhat, sizeof lwhat, "%s, layout %lld, ISA %lld%s", what, (long long)layout, (long long)isa[run],
                 stream ? ", streamed" : "");
        dkk_fill_uniform(out, r, 7, 8); /* overwritten */
        assert_ok(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, PH, PW, scale, geometry));
        dkk_assert_identical(out, want.out, lwhat);
        dkk_assert_identical(arg, want.arg, lwhat);
        dkk_fill_uniform(out, r, 7, 8);
        assert_ok(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg32->t, PH, PW, scale, geometry));
        dkk_assert_identical(out, want.out, lwhat);
        assert_same_indices(arg32, want.arg, lwhat);
        dkk_fill_uniform(out, r, 7, 8);
        assert_ok(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg16->t, PH, PW, scale, geometry));
        dkk_assert_identical(out, want.out, lwhat);
        assert_same_indices(arg16, want.arg, lwhat);
        dkk_fill_uniform(out, r, 7, 8);
        assert_ok(dk_roi_pool_forward(&x->t, &rois->t, &out->t, NULL, PH, PW, scale, geometry));
        dkk_assert_identical(out, want.out, lwhat);
    }
    dk_tunables_reset();
    /* backward: the gradient of each bin at its argmax, summed in (k, ph, pw) order */
    dkk_tensor *go = dkk_new(dt, 4, (int64_t[]){K, C, PH, PW}, NULL, 0);
    dkk_fill_uniform(go, r, -1, 1);
    dkk_tensor *gi = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, nhwc ? (int[]){0, 2, 3, 1} : NULL, 3 * gap);
    dkk_fill_uniform(gi, r, 7, 8); /* overwritten */
    assert_ok(dk_roi_pool_backward(&go->t, &rois->t, &arg->t, &gi->t));
    dkk_tensor *gi32 = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 3 * gap);
    assert_ok(dk_roi_pool_backward(&go->t, &rois->t, &arg32->t, &gi32->t));
    dkk_tensor *gi16 = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 3 * gap);
    assert_ok(dk_roi_pool_backward(&go->t, &rois->t, &arg16->t, &gi16->t));
    dkk_tensor *gw = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 0);
    for (int64_t c = 0; c < C; c++)
        for (int64_t k = 0; k < K; k++)
            for (int ph = 0; ph < PH; ph++)
                for (int pw = 0; pw < PW; pw++) {
                    const int64_t a = (int64_t)dkk_get(want.arg, (int64_t[]){k, c, ph, pw});
                    if (a < 0) continue;
                    const int64_t idx[4] = {(int64_t)dkk_get(rois, (int64_t[]){k, 0}), c, a / W, a % W};
                    dkk_set(gw, idx, dkk_get(gw, idx) + dkk_get(go, (int64_t[]){k, c, ph, pw}));
                }
    dkk_assert_identical(gi, gw, what);
    dkk_assert_identical(gi32, gw, what);
    dkk_assert_identical(gi16, gw, what);
    dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(arg), dkk_free(arg32), dkk_free(arg16), dkk_free(want.out),
        dkk_free(want.arg);
    dkk_free(go), dkk_free(gi), dkk_free(gi32), dkk_free(gi16), dkk_free(gw);
}

static void check_case_c(dk_dtype dt, int geometry, double scale, int PH, int PW, bool nhwc, int64_t C, dkk_rng *r)
{
    check_case_g(dt, geometry, scale, PH, PW, nhwc, C, false, r);
}

static void check_case(dk_dtype dt, int geometry, double scale, int PH, int PW, bool nhwc, dkk_rng *r)
{
    check_case_c(dt, geometry, scale, PH, PW, nhwc, 3, r);
}

static void both_geometries_every_dtype(void **state)
{
    (void)state;
    dkk_rng r = {0x9001};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++)
        for (int geo = 0; geo < 2; geo++) {
            check_case(DTYPES[d], geo, 1.0, 2, 2, false, &r);
            check_case(DTYPES[d], geo, 0.5, 3, 5, true, &r);
            check_case(DTYPES[d], geo, 0.25, 7, 7, false, &r);
            check_case(DTYPES[d], geo, 1.7, 1, 4, true, &r);
            /* a whole block of channels and a part of one (DK__RP_BLOCK is 16) */
            check_case_c(DTYPES[d], geo, 0.5, 3, 3, false, 35, &r);
            check_case_c(DTYPES[d], geo, 1.0, 2, 3, true, 16, &r);
        }
}

/* Note [RoIPool tiles]: gapless tensors take the runs (the transposed tile stores, the AVX2 copy
 * and stores for float32, the backward's runs); 9 x 8 bins are two tiles (64 + 8), 35 channels
 * two whole blocks and part of one, 7 x 7 one tile with a tail past its 8-bin groups (and past the
 * int16 indices' groups of 16 bins, dk__rp_tile_transpose16_avx2), 8 x 8 and 4 x 4 whole groups of
 * 16 with no tail, 2 x 3 a tail alone. */
static void packed_tensors_take_the_runs(void **state)
{
    (void)state;
    dkk_rng r = {0x9003};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++)
        for (int geo = 0; geo < 2; geo++) {
            check_case_g(DTYPES[d], geo, 0.5, 9, 8, false, 35, true, &r);
            check_case_g(DTYPES[d], geo, 0.25, 7, 7, false, 32, true, &r);
            check_case_g(DTYPES[d], geo, 1.0, 2, 3, true, 16, true, &r);
            check_case_g(DTYPES[d], geo, 0.5, 8, 8, false, 16, true, &r);
            check_case_g(DTYPES[d], geo, 0.5, 4, 4, false, 32, true, &r);
        }
}

static void same_bits_for_any_thread_count(void **state)
{
    (void)state;
    for (int t = 1; t <= 4; t++) {
        assert_ok(dk_set_num_threads(t));
        dkk_rng r = {0x9002};
        check_case(DK_FLOAT32, DK_ROI_POOL_TORCHVISION, 0.5, 7, 7, false, &r);
        /* whole blocks and gapless tensors: the AVX-512 tiles and the streamed runs too */
        check_case_g(DK_FLOAT32, DK_ROI_POOL_TORCHVISION, 0.25, 7, 7, false, 48, true, &r);
    }
    assert_ok(dk_set_num_threads(0));
}

/* mmcv tests/test_ops/test_roi_pool.py: output and the gradient of a sum, 2 x 2 bins. */
static void mmcv_published_vectors(void **state)
{
    (void)state;
    dkk_tensor *x = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 4, 4}, NULL, 0);
    for (int i = 0; i < 16; i++) {
        static const double v[16] = {1, 2, 5, 6, 3, 4, 7, 8, 9, 10, 13, 14, 11, 12, 15, 16};
        dkk_set(x, (int64_t[]){0, 0, i / 4, i % 4}, v[i]);
    }
    dkk_tensor *rois = dkk_new(DK_FLOAT32, 2, (int64_t[]){1, 5}, NULL, 0);
    dkk_set(rois, (int64_t[]){0, 3}, 3), dkk_set(rois, (int64_t[]){0, 4}, 3);
    dkk_tensor *out = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 2, 2}, NULL, 0);
    dkk_tensor *arg = dkk_new(DK_INT64, 4, (int64_t[]){1, 1, 2, 2}, NULL, 0);
    assert_ok(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, 2, 2, 1.0, DK_ROI_POOL_MMCV));
    static const double want[4] = {4, 8, 12, 16}, grad[16] = {0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1};
    for (int i = 0; i < 4; i++) assert_true(dkk_get(out, (int64_t[]){0, 0, i / 2, i % 2}) == want[i]);
    dkk_tensor *go = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 2, 2}, NULL, 0),
               *gi = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 4, 4}, NULL, 0);
    for (int i = 0; i < 4; i++) dkk_set(go, (int64_t[]){0, 0, i / 2, i % 2}, 1);
    assert_ok(dk_roi_pool_backward(&go->t, &rois->t, &arg->t, &gi->t));
    for (int i = 0; i < 16; i++) assert_true(dkk_get(gi, (int64_t[]){0, 0, i / 4, i % 4}) == grad[i]);
    dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(arg), dkk_free(go), dkk_free(gi);
}

/* ---- ps_roi_pool --------------------------------------------------------------------------- */

/* torchvision's ps_roi_pool bins along one axis: len = max(end - start, 1), clamped to size - 1. */
static void ref_ps_axis(double c1, double c2, double scale, int p, int pooled, int size, bool f32, int *lo, int *hi)
{
#define T(v) (f32 ? (double)(float)(v) : (v))
    const int start = (int)(f32 ? roundf((float)T(c1 * T(scale))) : round(c1 * scale));
    const int end = (int)(f32 ? roundf((float)T(c2 * T(scale))) : round(c2 * scale));
    const int len = end - start > 1 ? end - start : 1;
    const double bin = T((double)len / (double)pooled);
    int a = (int)floor(T(p * bin)) + start, b = (int)ceil(T((p + 1) * bin)) + start;
#undef T
    *lo = a < 0 ? 0 : a > size - 1 ? size - 1 : a;
    *hi = b < 0 ? 0 : b > size - 1 ? size - 1 : b;
}

static void check_ps_case_hw(dk_dtype dt, double scale, int PH, int PW, bool nhwc, int64_t K, int64_t CO, int64_t H,
                             int64_t W, dkk_rng *r)
{
    char what[200];
    int64_t layout = 0;
    assert_ok(dk_tunable_get("ps_roi_pool.layout", &layout));
    snprintf(what, sizeof what, "ps_roi_pool %s scale %g %dx%d %s %lld RoIs, %lld channels, layout %lld",
             dk_dtype_name(dt), scale, PH, PW, nhwc ? "NHWC" : "NCHW", (long long)K, (long long)CO, (long long)layout);
    const int64_t N = 2, C = CO * PH * PW;
    const bool f32 = dt != DK_FLOAT64;
    dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, nhwc ? (int[]){0, 2, 3, 1} : NULL, 1);
    dkk_fill_uniform(x, r, -5, 5);
    dkk_tensor *rois = make_rois(dt, r, K, N, W / scale);
    /* a dense output for an odd K (the staged outputs moved in AVX2 tiles, Note [Staged outputs]),
     * rows with a gap for an even one (moved element by element) */
    dkk_tensor *out = dkk_new(dt, 4, (int64_t[]){K, CO, PH, PW}, NULL, K % 2 ? 0 : 2);
    assert_ok(dk_ps_roi_pool_forward(&x->t, &rois->t, &out->t, scale));
    /* with the map channels-last, the gradients too: their bins then lie CO apart (the AVX2
     * additions' gathered shares) */
    dkk_tensor *go = dkk_new(dt, 4, (int64_t[]){K, CO, PH, PW}, nhwc ? (int[]){0, 2, 3, 1} : NULL, 0);
    dkk_fill_uniform(go, r, -1, 1);
    /* dense NCHW planes (the buffered backward's planes written as one run, streamed where
     * large), or rows with a gap (written element by element) for one output channel and NHWC */
    dkk_tensor *gi = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, nhwc ? (int[]){0, 2, 3, 1} : NULL,
                             nhwc || CO == 1 ? 3 : 0);
    dkk_fill_uniform(gi, r, 7, 8); /* overwritten */
    assert_ok(dk_ps_roi_pool_backward(&go->t, &rois->t, &gi->t, scale));
    dkk_tensor *gw = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 0);
#define T(v) (f32 ? (double)(float)(v) : (v))
    for (int64_t k = 0; k < K; k++) {
        double b[5];
        for (int j = 0; j < 5; j++) b[j] = dkk_get(rois, (int64_t[]){k, j});
        for (int64_t c = 0; c < CO; c++)
            for (int ph = 0; ph < PH; ph++)
                for (int pw = 0; pw < PW; pw++) {
                    int h0, h1, w0, w1;
                    ref_ps_axis(b[2], b[4], scale, ph, PH, (int)H, f32, &h0, &h1);
                    ref_ps_axis(b[1], b[3], scale, pw, PW, (int)W, f32, &w0, &w1);
                    const int64_t cin = (c * PH + ph) * PW + pw;
                    double sum = 0, want = 0;
                    const bool empty = h1 <= h0 || w1 <= w0;
                    for (int h = h0; !empty && h < h1; h++)
                        for (int w = w0; w < w1; w++) sum = T(sum + dkk_get(x, (int64_t[]){(int64_t)b[0], cin, h, w}));
                    if (!empty) want = T(sum / (double)((h1 - h0) * (w1 - w0)));
                    const double got = dkk_get(out, (int64_t[]){k, c, ph, pw});
                    /* the stored value: want rounded to the storage dtype */
                    dkk_tensor *one = dkk_new(dt, 1, (int64_t[]){1}, NULL, 0);
                    dkk_set(one, (int64_t[]){0}, want);
                    if (got != dkk_get(one, (int64_t[]){0}))
                        fail_msg("%s: output (%lld, %lld, %d, %d) %.17g, want %.17g", what, (long long)k, (long long)c,
                                 ph, pw, got, want);
                    dkk_free(one);
                    if (empty) continue;
                    const double d = T(dkk_get(go, (int64_t[]){k, c, ph, pw}) / (double)((h1 - h0) * (w1 - w0)));
                    for (int h = h0; h < h1; h++)
                        for (int w = w0; w < w1; w++) {
                            const int64_t idx[4] = {(int64_t)b[0], cin, h, w};
                            dkk_set(gw, idx, dkk_get(gw, idx) + d);
                        }
                }
    }
#undef T
    dkk_assert_identical(gi, gw, what);
    dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(go), dkk_free(gi), dkk_free(gw);
}

static void check_ps_case_co(dk_dtype dt, double scale, int PH, int PW, bool nhwc, int64_t K, int64_t CO, dkk_rng *r)
{
    check_ps_case_hw(dt, scale, PH, PW, nhwc, K, CO, 11, 13, r);
}

static void check_ps_case_k(dk_dtype dt, double scale, int PH, int PW, bool nhwc, int64_t K, dkk_rng *r)
{
    check_ps_case_co(dt, scale, PH, PW, nhwc, K, 2, r);
}

static void check_ps_case(dk_dtype dt, double scale, int PH, int PW, bool nhwc, dkk_rng *r)
{
    check_ps_case_k(dt, scale, PH, PW, nhwc, 19, r);
}

static void ps_roi_pool_every_dtype(void **state)
{
    (void)state;
    dkk_rng r = {0x9003};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++) {
        check_ps_case(DTYPES[d], 1.0, 2, 2, false, &r);
        check_ps_case(DTYPES[d], 0.5, 3, 2, true, &r);
        check_ps_case(DTYPES[d], 0.6, 1, 4, false, &r);
    }
}

/* The forward's RoIs come in blocks of up to DK__PSP_ROIS (1024) per task, smaller on several
 * threads: 1100 RoIs are whole blocks and a part of one. Every element of the backward gets its additions in RoI order on any number
 * of threads (Note [Position-sensitive RoIPool on a CPU]): the reference's bits each time. */
static void ps_roi_pool_same_bits_for_any_thread_count(void **state)
{
    (void)state;
    for (int t = 1; t <= 3; t++) {
        assert_ok(dk_set_num_threads(t));
        dkk_rng r = {0x9005};
        check_ps_case_k(DK_FLOAT32, 0.5, 3, 3, false, 1100, &r);
        check_ps_case_k(DK_FLOAT16, 1.0, 2, 3, true, 1030, &r);
        check_ps_case_k(DK_FLOAT64, 0.7, 7, 7, false, 40, &r);
    }
    assert_ok(dk_set_num_threads(0));
}

/* Note [Position-sensitive RoIPool on a CPU]: channel planes and channels-last blocks (the
 * forward's, and the backward's for float32 and float64), forced and by the cost model, on one and
 * two threads, to the reference's bits: output channels 5 (one block, lanes past them computed and
 * dropped), 17 (a block of 16 and a tail of 1), 10 (12 lanes, as in bench_roi_pool.py) and 1, dense
 * and channels-last maps (whose columns are not unit-stride), every dtype; the blocks' copy with
 * AVX2 and without (ps_roi_pool.isa), rows of 13 pixels: one 8-pixel AVX2 span, one of 4, one left;
 * the buffered backward's float32 additions with AVX2 (isa 1: dk__psp_grad_image_avx2, its bins up
 * to 8 pixels wide, wider ones pixel by pixel, and PW > 8 on the scalar walk; PW 1, 2, 3, 5, 7 and
 * 8 each compiled on its own) and without; grad_input's dense planes streamed (every output
 * "large": large_output.min_bytes 0) and not; the forward's outputs staged and stored in place
 * (ps_roi_pool.stage, Note [Staged outputs]). */
static void ps_roi_pool_every_path(void **state)
{
    (void)state;
    int64_t min_bytes = 0, isa = 0;
    assert_ok(dk_tunable_get("large_output.min_bytes", &min_bytes));
    assert_ok(dk_tunable_get("ps_roi_pool.isa", &isa));
    for (int64_t layout = -1; layout <= 1; layout++)
        for (int t = 1; t <= 4; t++) {
            assert_ok(dk_tunable_set("large_output.min_bytes", t <= 2 ? min_bytes : 0, NULL));
            assert_ok(dk_tunable_set("ps_roi_pool.layout", layout, NULL));
            assert_ok(dk_tunable_set("ps_roi_pool.isa", t % 2 == 1, NULL)); /* both, on one thread and on two */
            assert_ok(dk_tunable_set("ps_roi_pool.stage", t != 3, NULL));
            assert_ok(dk_set_num_threads(2 - t % 2));
            dkk_rng r = {0x9007};
            for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++) {
                check_ps_case_co(DTYPES[d], 0.5, 3, 2, false, 23, 5, &r);
                check_ps_case_co(DTYPES[d], 0.7, 2, 3, true, 31, 17, &r);
                check_ps_case_co(DTYPES[d], 1.0, 7, 7, false, 9, 1, &r);
                check_ps_case_co(DTYPES[d], 0.6, 2, 2, false, 19, 10, &r); /* 12 lanes */
                check_ps_case_co(DTYPES[d], 1.0, 2, 1, false, 17, 3, &r);  /* bins up to 13 wide */
                check_ps_case_co(DTYPES[d], 1.0, 1, 9, false, 13, 2, &r);  /* PW > 8 */
                check_ps_case_co(DTYPES[d], 0.8, 2, 8, false, 15, 2, &r);
                check_ps_case_co(DTYPES[d], 0.6, 3, 5, false, 12, 3, &r);
            }
        }
    assert_ok(dk_tunable_set("ps_roi_pool.layout", -1, NULL));
    assert_ok(dk_tunable_set("ps_roi_pool.isa", isa, NULL));
    assert_ok(dk_tunable_set("ps_roi_pool.stage", 1, NULL));
    assert_ok(dk_tunable_set("large_output.min_bytes", min_bytes, NULL));
    assert_ok(dk_set_num_threads(0));
}

/* Note [Position-sensitive RoIPool on a CPU]: the buffered backward's AVX2 additions take two output
 * channels a task where their 2 PW planes fit in DK__PSP_PLANES_MAX_BYTES (1 MB), else one: with
 * PW = 8, a 130 x 130 map (two channels' planes 1.08 MB) takes one channel a task and 100 x 100
 * (0.64 MB) two, with a last task of one for the third channel; RoIs across the whole map, so bins
 * up to 8 pixels wide and wider. One thread and two. */
static void ps_roi_pool_backward_channels_a_task(void **state)
{
    (void)state;
    dkk_rng r = {0x900b};
    for (int t = 1; t <= 2; t++) {
        assert_ok(dk_set_num_threads(t));
        check_ps_case_hw(DK_FLOAT32, 1.0, 1, 8, false, 13, 3, 130, 130, &r);
        check_ps_case_hw(DK_FLOAT32, 1.0, 1, 8, false, 13, 3, 100, 100, &r);
    }
    assert_ok(dk_set_num_threads(0));
}

/* Note [Position-sensitive RoIPool on a CPU]: the plane-major forward (ps_roi_pool.layout 2, and the
 * cost model's choice for float32 with AVX-512 where ps_roi_pool.isa is 2), its bins gathered 16 RoIs at a time (ps_roi_pool.isa
 * 2: whole groups and a tail, windows up to the whole 11 x 13 map, empty bins, RoIs off the map, maps
 * whose columns are not unit-stride) or pooled one RoI at a time (isa 0), and the backward on planes
 * built in a buffer (every layout but 0) against the in-place one (0), on one and two threads, to the
 * reference's bits: every dtype, output channels 1, 3, 5 and 17 (a block of 16 and a tail of 1). */
static void ps_roi_pool_plane_major(void **state)
{
    (void)state;
    int64_t prev_isa = 0;
    assert_ok(dk_tunable_get("ps_roi_pool.isa", &prev_isa));
    const int64_t layouts[] = {2, -1, 0};
    for (size_t l = 0; l < DK_COUNTOF(layouts); l++)
        for (int64_t isa = 0; isa <= 2; isa += 2)
            for (int t = 1; t <= 2; t++) {
                assert_ok(dk_tunable_set("ps_roi_pool.layout", layouts[l], NULL));
                assert_ok(dk_tunable_set("ps_roi_pool.isa", isa, NULL));
                assert_ok(dk_set_num_threads(t));
                dkk_rng r = {0x9011};
                for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++) {
                    check_ps_case_co(DTYPES[d], 0.5, 3, 2, false, 41, 5, &r);
                    check_ps_case_co(DTYPES[d], 0.7, 2, 3, true, 37, 17, &r);
                    check_ps_case_co(DTYPES[d], 1.0, 7, 7, false, 16, 1, &r);
                    check_ps_case_co(DTYPES[d], 0.9, 1, 4, false, 53, 3, &r);
                }
            }
    assert_ok(dk_tunable_set("ps_roi_pool.layout", -1, NULL));
    assert_ok(dk_tunable_set("ps_roi_pool.isa", prev_isa, NULL));
    assert_ok(dk_set_num_threads(0));
}

/* ---- ps_roi_align -------------------------------------------------------------------------- */

/*
 * torchvision's ps_roi_align written out in T (float for every dtype but float64), over dense
 * copies of the tensors: forward outputs and the backward's scatter, RoIs, bins and samples in
 * its order. Its one difference from torchvision is dkit's documented one (ops/roi_pool.h): a bin
 * with no samples is 0, not 0 / 0. The boxes stay below the adaptive grid's cap
 * (kernels/roi_align_math.h), which the reference does not have.
 */
#define DEFINE_REF_PSA(T, NAME)                                                                                      \
    static T NAME##_interp(const T *plane, int H, int W, T y, T x, int *yl, int *yh, int *xl, int *xh, T w[4])       \
    {                                                                                                                \
        if (!(y >= -1 && y <= (T)H && x >= -1 && x <= (T)W)) return *yl = -1, (T)0;                                  \
        if (y <= 0) y = 0;                                                                                           \
        if (x <= 0) x = 0;                                                                                           \
        *yl = (int)y, *xl = (int)x;                                                                                  \
        if (*yl >= H - 1) *yh = *yl = H - 1, y = (T)*yl;                                                             \
        else *yh = *yl + 1;                                                                                          \
        if (*xl >= W - 1) *xh = *xl = W - 1, x = (T)*xl;                                                             \
        else *xh = *xl + 1;                                                                                          \
        const T ly = y - (T)*yl, lx = x - (T)*xl, hy = (T)1 - ly, hx = (T)1 - lx;                                    \
        w[0] = hy * hx, w[1] = hy * lx, w[2] = ly * hx, w[3] = ly * lx;                                              \
        return w[0] * plane[*yl * W + *xl] + w[1] * plane[*yl * W + *xh] + w[2] * plane[*yh * W + *xl] +             \
               w[3] * plane[*yh * W + *xh];                                                                          \
    }                                                                                                                \
    static void NAME(const T *x, int C, int H, int W, const T *rois, int K, int PH, int PW, T scale, int sr, T *out, \
                     const T *gout, T *gin)                                                                          \
    {                                                                                                                \
        const int CO = C / (PH * PW);                                                                                \
        for (int k = 0; k < K; k++) {                                                                                \
            const T *r = rois + 5 * k;                                                                               \
            const int b = (int)r[0];                                                                                 \
            const T sw = r[1] * scale - (T)0.5, sh = r[2] * scale - (T)0.5;                                          \
            const T rw = (r[3] * scale - (T)0.5) - sw, rh = (r[4] * scale - (T)0.5) - sh;                            \
            const T bh = rh / (T)PH, bw = rw / (T)PW;                                                                \
            const int gh = sr > 0 ? sr : (int)ceil(rh / (T)PH), gw = sr > 0 ? sr : (int)ceil(rw / (T)PW);            \
            const T count = (T)(gh * gw);                                                                            \
            for (int c = 0; c < CO; c++)                                                                             \
                for (int ph = 0; ph < PH; ph++)                                                                      \
                    for (int pw = 0; pw < PW; pw++) {                                                                \
                        const int cin = (c * PH + ph) * PW + pw, o = ((k * CO + c) * PH + ph) * PW + pw;             \
                        const T *plane = x + ((int64_t)b * C + cin) * H * W;                                         \
                        T *gplane = gin + ((int64_t)b * C + cin) * H * W;                                            \
                        const T hs = (T)ph * bh + sh, ws = (T)pw * bw + sw;                                          \
                        T sum = 0;                                                                                   \
                        for (int iy = 0; iy < gh; iy++) {                                                            \
                            const T y = hs + (T)(iy + .5f) * bh / (T)gh;                                             \
                            for (int ix = 0; ix < gw; ix++) {                                                        \
                                const T xx = ws + (T)(ix + .5f) * bw / (T)gw;                                        \
                                int yl, yh, xl, xh;                                                                  \
                                T w[4];                                                                              \
                                sum += NAME##_interp(plane, H, W, y, xx, &yl, &yh, &xl, &xh, w);                     \
                                if (yl < 0) continue;                                                                \
                                const T g = gout[o];                                                                 \
                                gplane[yl * W + xl] += g * w[0] / count;                                             \
                                gplane[yl * W + xh] += g * w[1] / count;                                             \
                                gplane[yh * W + xl] += g * w[2] / count;                                             \
                                gplane[yh * W + xh] += g * w[3] / count;                                             \
                            }                                                                                        \
                        }                                                                                            \
                        out[o] = gh <= 0 || gw <= 0 ? (T)0 : sum / count; /* dkit: no samples, 0 */                  \
                    }                                                                                                \
        }                                                                                                            \
    }
DEFINE_REF_PSA(float, ref_psa_f)
DEFINE_REF_PSA(double, ref_psa_d)

/* A dense copy of t's elements in index order. */
static double *dense(const dkk_tensor *t)
{
    const int64_t n = dk_tensor_numel(&t->t);
    double *d = malloc((size_t)n * sizeof *d);
    int64_t idx[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i;
        for (int j = t->t.ndim - 1; j >= 0; j--) idx[j] = rem % t->t.shape[j], rem /= t->t.shape[j];
        d[i] = dkk_get(t, idx);
    }
    return d;
}

/* A tensor of dtype dt and like's shape holding the dense values v (each rounded to dt). */
static dkk_tensor *from_dense(dk_dtype dt, const dkk_tensor *like, const double *v)
{
    dkk_tensor *t = dkk_new(dt, like->t.ndim, like->t.shape, NULL, 0);
    int64_t idx[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < dk_tensor_numel(&t->t); i++) {
        int64_t rem = i;
        for (int j = t->t.ndim - 1; j >= 0; j--) idx[j] = rem % t->t.shape[j], rem /= t->t.shape[j];
        dkk_set(t, idx, v[i]);
    }
    return t;
}

/* One case with CO output channels against the reference, forward and backward, to the bit;
 * grad_input's rows gi_gap elements longer than W (0: dense planes). */
static void check_psa_case_gap(dk_dtype dt, double scale, int PH, int PW, int sr, bool nhwc, int CO, int64_t gi_gap,
                               dkk_rng *r)
{
    char what[200];
    int64_t layout = 0, tables = 0, planes = 0;
    assert_ok(dk_tunable_get("ps_roi_align.layout", &layout));
    assert_ok(dk_tunable_get("ps_roi_align.tap_tables", &tables));
    assert_ok(dk_tunable_get("ps_roi_align.grad_planes", &planes));
    snprintf(what, sizeof what,
             "ps_roi_align %s scale %g %dx%d sr %d %s, %d channels, layout %lld, tap tables %lld, grad planes %lld",
             dk_dtype_name(dt), scale, PH, PW, sr, nhwc ? "NHWC" : "NCHW", CO, (long long)layout, (long long)tables,
             (long long)planes);
    const int N = 2, C = CO * PH * PW, H = 11, W = 13, K = 19;
    dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, nhwc ? (int[]){0, 2, 3, 1} : NULL, 1);
    dkk_fill_uniform(x, r, -5, 5);
    dkk_tensor *rois = make_rois(dt, r, K, N, W / scale);
    /* dense for an odd CO (the staged outputs moved in AVX2 tiles, Note [Staged outputs]), rows with
     * a gap for an even one */
    dkk_tensor *out = dkk_new(dt, 4, (int64_t[]){K, CO, PH, PW}, NULL, CO % 2 ? 0 : 2);
    dkk_fill_uniform(out, r, 7, 8); /* overwritten */
    assert_ok(dk_ps_roi_align_forward(&x->t, &rois->t, &out->t, scale, sr));
    dkk_tensor *go = dkk_new(dt, 4, (int64_t[]){K, CO, PH, PW}, NULL, 0);
    dkk_fill_uniform(go, r, -1, 1);
    dkk_tensor *gi = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, nhwc ? (int[]){0, 2, 3, 1} : NULL, gi_gap);
    dkk_fill_uniform(gi, r, 7, 8); /* overwritten */
    assert_ok(dk_ps_roi_align_backward(&go->t, &rois->t, &gi->t, scale, sr));
    double *xd = dense(x), *rd = dense(rois), *gd = dense(go);
    const size_t nx = (size_t)N * C * H * W, no = (size_t)K * CO * PH * PW;
    double *od = malloc(no * sizeof *od), *gid = calloc(nx, sizeof *gid);
    if (dt == DK_FLOAT64) {
        ref_psa_d(xd, C, H, W, rd, K, PH, PW, scale, sr, od, gd, gid);
    } else { /* 16-bit values are exact in float, the compute type */
        float *xf = malloc(nx * sizeof *xf), *rf = malloc((size_t)K * 5 * sizeof *rf), *of = malloc(no * sizeof *of);
        float *gf = malloc(no * sizeof *gf), *gif = calloc(nx, sizeof *gif);
        for (size_t i = 0; i < nx; i++) xf[i] = (float)xd[i];
        for (size_t i = 0; i < (size_t)K * 5; i++) rf[i] = (float)rd[i];
        for (size_t i = 0; i < no; i++) gf[i] = (float)gd[i];
        ref_psa_f(xf, C, H, W, rf, K, PH, PW, (float)scale, sr, of, gf, gif);
        for (size_t i = 0; i < no; i++) od[i] = of[i];
        for (size_t i = 0; i < nx; i++) gid[i] = gif[i];
        free(xf), free(rf), free(of), free(gf), free(gif);
    }
    dkk_tensor *want = from_dense(dt, out, od), *gwant = from_dense(dt, gi, gid);
    dkk_assert_identical(out, want, what);
    dkk_assert_identical(gi, gwant, what);
    free(xd), free(rd), free(gd), free(od), free(gid);
    dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(go), dkk_free(gi), dkk_free(want), dkk_free(gwant);
}

static void check_psa_case_co(dk_dtype dt, double scale, int PH, int PW, int sr, bool nhwc, int CO, dkk_rng *r)
{
    check_psa_case_gap(dt, scale, PH, PW, sr, nhwc, CO, 3, r);
}

static void check_psa_case(dk_dtype dt, double scale, int PH, int PW, int sr, bool nhwc, dkk_rng *r)
{
    check_psa_case_co(dt, scale, PH, PW, sr, nhwc, 2, r);
}

/* Every dtype; grids adaptive (-1, 0, -7: every value <= 0), one sample, several per pixel. */
static void ps_roi_align_every_dtype(void **state)
{
    (void)state;
    dkk_rng r = {0x9004};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++) {
        check_psa_case(DTYPES[d], 1.0, 2, 2, -1, false, &r);
        check_psa_case(DTYPES[d], 0.5, 3, 2, 0, true, &r);
        check_psa_case(DTYPES[d], 0.6, 1, 4, 2, false, &r);
        check_psa_case(DTYPES[d], 1.7, 7, 7, 1, true, &r);
        check_psa_case(DTYPES[d], 0.25, 2, 3, -7, false, &r);
        check_psa_case(DTYPES[d], 2.0, 2, 2, 5, false, &r);
    }
}

/* Every way the kernel can walk the same work (Note [RoIAlign's position-sensitive form on a
 * CPU]): channel planes or channels-last blocks, taps tabled per call or found per task; blocks
 * of 1 to 4 vectors and a tail block (18 output channels: 16 + 2), sample grids past a chunk of
 * DK__PSA_SAMPLES (70 x 1), strided maps, every dtype; the forward's outputs staged and stored in
 * place (ps_roi_pool.stage, with the tables and without). */
static void ps_roi_align_every_path(void **state)
{
    (void)state;
    for (int64_t layout = -1; layout <= 1; layout++)
        for (int64_t tables = 0; tables <= 1; tables++) {
            assert_ok(dk_tunable_set("ps_roi_align.layout", layout, NULL));
            assert_ok(dk_tunable_set("ps_roi_align.tap_tables", tables, NULL));
            assert_ok(dk_tunable_set("ps_roi_pool.stage", tables, NULL));
            dkk_rng r = {0x9007};
            for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
                check_psa_case_co(DTYPES[d], 0.8, 2, 2, -1, d % 2 == 1, 18, &r);
                check_psa_case_co(DTYPES[d], 1.3, 3, 2, 2, d % 2 == 0, 7, &r);
            }
            check_psa_case_co(DK_FLOAT32, 1.0, 1, 1, 70, false, 5, &r);
            check_psa_case_co(DK_FLOAT64, 0.5, 2, 1, 67, true, 3, &r);
        }
    assert_ok(dk_tunable_set("ps_roi_align.layout", -1, NULL));
    assert_ok(dk_tunable_set("ps_roi_align.tap_tables", 1, NULL));
    assert_ok(dk_tunable_set("ps_roi_pool.stage", 1, NULL));
}

/* The backward on channels-last blocks stored through whole planes (ps_roi_align.grad_planes 1:
 * dk__psa_grad_store, for dense planes) or a row of four planes at a time (0, and every
 * channels-last map), streamed (large_output.min_bytes 0: planes of 11 x 13, so runs that start
 * and end anywhere in a 16-byte group) or not, on one and two threads, to the reference's bits:
 * every dtype, output channels 1, 3, 5, 7, 9 and 18 (lane tails, a block of 16 and a tail of 2),
 * RoIs off the map and across it (make_rois); grad_input with dense planes (the whole planes' way)
 * and with padded rows or channels last (the rows' way, whatever the tunable). */
static void ps_roi_align_grad_planes(void **state)
{
    (void)state;
    assert_ok(dk_tunable_set("ps_roi_align.layout", 1, NULL));
    for (int64_t planes = 0; planes <= 1; planes++)
        for (int stream = 0; stream <= 1; stream++)
            for (int t = 1; t <= 2; t++) {
                assert_ok(dk_tunable_set("ps_roi_align.grad_planes", planes, NULL));
                assert_ok(dk_tunable_set("large_output.min_bytes", stream ? 0 : (int64_t)8 << 20, NULL));
                assert_ok(dk_set_num_threads(t));
                dkk_rng r = {0x9013};
                for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++) {
                    check_psa_case_gap(DTYPES[d], 0.8, 2, 2, -1, false, 18, 0, &r);
                    check_psa_case_gap(DTYPES[d], 1.3, 3, 2, 2, false, 7, 0, &r);
                    check_psa_case_gap(DTYPES[d], 0.6, 1, 3, -1, false, 5, 0, &r);
                    check_psa_case_gap(DTYPES[d], 0.7, 3, 3, 1, false, 1, 0, &r);
                    check_psa_case_gap(DTYPES[d], 0.9, 2, 2, -1, false, 9, 1, &r); /* rows not dense */
                    check_psa_case_gap(DTYPES[d], 1.1, 2, 1, 3, true, 3, 0, &r);   /* channels-last */
                }
            }
    assert_ok(dk_tunable_set("ps_roi_align.layout", -1, NULL));
    assert_ok(dk_tunable_set("ps_roi_align.grad_planes", 1, NULL));
    assert_ok(dk_tunable_set("large_output.min_bytes", (int64_t)8 << 20, NULL));
    assert_ok(dk_set_num_threads(0));
}

/* The backward's order is fixed per plane, whatever the number of threads; so is the forward. */
static void ps_roi_align_same_bits_for_any_thread_count(void **state)
{
    (void)state;
    for (int t = 1; t <= 4; t++) {
        assert_ok(dk_set_num_threads(t));
        dkk_rng r = {0x9005};
        check_psa_case(DK_FLOAT32, 0.5, 3, 3, -1, false, &r);
        check_psa_case(DK_FLOAT16, 0.5, 3, 3, 2, true, &r);
    }
    assert_ok(dk_set_num_threads(0));
}

/* A sampling_ratio whose grid passes DK__PSA_SAMPLES (64) samples a bin: a bin found in several chunks. */
static void ps_roi_align_beyond_the_tap_table(void **state)
{
    (void)state;
    dkk_rng r = {0x9006};
    check_psa_case(DK_FLOAT32, 1.0, 1, 1, 70, false, &r);
    check_psa_case(DK_FLOAT64, 0.5, 2, 1, 67, true, &r);
}

static void bad_input(void **state)
{
    (void)state;
    dkk_tensor *x = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 2, 4, 4}, NULL, 0);
    dkk_tensor *rois = dkk_new(DK_FLOAT32, 2, (int64_t[]){1, 5}, NULL, 0);
    dkk_tensor *out = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 2, 2, 2}, NULL, 0);
    dkk_tensor *arg = dkk_new(DK_INT64, 4, (int64_t[]){1, 2, 2, 2}, NULL, 0);
    dkk_tensor *arg32 = dkk_new(DK_INT32, 4, (int64_t[]){1, 2, 2, 2}, NULL, 0);
    dkk_tensor *r4 = dkk_new(DK_FLOAT32, 2, (int64_t[]){1, 4}, NULL, 0);
    assert_error(dk_roi_pool_forward(&x->t, &r4->t, &out->t, &arg->t, 2, 2, 1.0, 0), DK_EINVAL,
                 "roi_pool_forward: 'rois' must have shape [K, 5] (batch_index, x1, y1, x2, y2), got 2-d with a "
                 "different width");
    assert_error(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, 0, 2, 1.0, 0), DK_EINVAL,
                 "roi_pool_forward: output size must be positive and below 2^31, got (0, 2)");
    assert_error(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, 2, 2, -1.0, 0), DK_EINVAL,
                 "roi_pool_forward: spatial_scale must be a positive finite number, got -1");
    assert_error(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, 2, 2, 1.0, 2), DK_EINVAL,
                 "roi_pool_forward: geometry must be 0 (torchvision) or 1 (mmcv), got 2");
    dkk_tensor *argf = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 2, 2, 2}, NULL, 0);
    assert_error(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &argf->t, 2, 2, 1.0, 0), DK_ETYPE,
                 "roi_pool_forward: 'argmax' must be int16, int32 or int64, got float32");
    assert_error(dk_roi_pool_backward(&out->t, &rois->t, &argf->t, &x->t), DK_ETYPE,
                 "roi_pool_backward: 'argmax' must be int16, int32 or int64, got float32");
    dkk_free(argf);
    /* an int32 argmax cannot index a plane of 2^31 pixels or more (no data is read: the shape is
     * refused first) */
    dk_tensor big = x->t;
    int64_t big_shape[4] = {1, 2, 65536, 32768}, big_strides[4] = {0, 0, 0, 0};
    big.shape = big_shape, big.strides = big_strides;
    assert_error(dk_roi_pool_forward(&big, &rois->t, &out->t, &arg32->t, 2, 2, 1.0, 0), DK_EINVAL,
                 "roi_pool_forward: an int32 'argmax' cannot index a plane of 65536 x 32768 pixels; use int64");
    /* and an int16 one (Note [A narrow argmax]) one of 2^15 pixels or more: 128 x 256 is 32768 */
    dkk_tensor *arg16 = dkk_new(DK_INT16, 4, (int64_t[]){1, 2, 2, 2}, NULL, 0);
    big_shape[2] = 128, big_shape[3] = 256;
    assert_error(dk_roi_pool_forward(&big, &rois->t, &out->t, &arg16->t, 2, 2, 1.0, 0), DK_EINVAL,
                 "roi_pool_forward: an int16 'argmax' cannot index a plane of 128 x 256 pixels; use int32");
    big_shape[3] = 255; /* 32640 pixels: every index fits */
    assert_ok(dk_roi_pool_forward(&big, &rois->t, &out->t, &arg16->t, 2, 2, 1.0, 0));
    dkk_free(arg16);
    dkk_set(rois, (int64_t[]){0, 0}, 1);
    assert_error(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, 2, 2, 1.0, 0), DK_EINDEX,
                 "roi_pool_forward: rois[0] has batch index 1, which is not an integer in [0, 1)");
    dkk_set(rois, (int64_t[]){0, 0}, 0);
    dkk_set(rois, (int64_t[]){0, 3}, NAN);
    assert_error(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, 2, 2, 1.0, 0), DK_EINVAL,
                 "roi_pool_forward: rois[0] has a non-finite coordinate (nan)");
    dkk_set(rois, (int64_t[]){0, 3}, 2);
    /* a made-up argmax outside the plane adds nothing (and reads nothing out of bounds) */
    assert_ok(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, 2, 2, 1.0, 0));
    dkk_set(arg, (int64_t[]){0, 0, 0, 0}, 1000);
    dkk_set(arg, (int64_t[]){0, 1, 0, 0}, -7);
    dkk_tensor *gi = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 2, 4, 4}, NULL, 0);
    assert_ok(dk_roi_pool_backward(&out->t, &rois->t, &arg->t, &gi->t));
    dkk_tensor *gbad = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 3, 2, 2}, NULL, 0);
    assert_error(dk_roi_pool_backward(&gbad->t, &rois->t, &arg->t, &gi->t), DK_EINVAL,
                 "roi_pool_backward: 'grad_output' must have shape [1, 2, 2, 2], got [1, 3, 2, 2]");
    /* ps_roi_pool: channels a multiple of the bins */
    dkk_tensor *ps = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 2, 2}, NULL, 0);
    assert_error(dk_ps_roi_pool_forward(&x->t, &rois->t, &ps->t, 1.0), DK_EINVAL,
                 "ps_roi_pool_forward: input channels must be a multiple of pooling height * pooling width, got 2 "
                 "channels for 2 x 2 bins");
    /* ps_roi_align: channels a multiple of the bins, a 32-bit sampling_ratio, a positive scale */
    assert_error(dk_ps_roi_align_forward(&x->t, &rois->t, &ps->t, 1.0, -1), DK_EINVAL,
                 "ps_roi_align_forward: input channels must be a multiple of pooling height * pooling width, got 2 "
                 "channels for 2 x 2 bins");
    dkk_tensor *psa = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 2, 1, 1}, NULL, 0);
    assert_ok(dk_ps_roi_align_forward(&x->t, &rois->t, &psa->t, 1.0, -5));
    assert_error(dk_ps_roi_align_forward(&x->t, &rois->t, &psa->t, 1.0, (int64_t)1 << 31), DK_EINVAL,
                 "ps_roi_align_forward: sampling_ratio must fit a 32-bit int (<= 0 is adaptive), got 2147483648");
    assert_error(dk_ps_roi_align_backward(&psa->t, &rois->t, &x->t, 1.0, -((int64_t)1 << 32)), DK_EINVAL,
                 "ps_roi_align_backward: sampling_ratio must fit a 32-bit int (<= 0 is adaptive), got -4294967296");
    assert_error(dk_ps_roi_align_forward(&x->t, &rois->t, &psa->t, 0.0, 2), DK_EINVAL,
                 "ps_roi_align_forward: spatial_scale must be a positive finite number, got 0");
    assert_error(dk_ps_roi_align_forward(&x->t, &r4->t, &psa->t, 1.0, 2), DK_EINVAL,
                 "ps_roi_align_forward: 'rois' must have shape [K, 5] (batch_index, x1, y1, x2, y2), got 2-d with a "
                 "different width");
    dkk_tensor *psa3 = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 3, 1, 1}, NULL, 0);
    assert_error(dk_ps_roi_align_backward(&psa3->t, &rois->t, &x->t, 1.0, 2), DK_EINVAL,
                 "ps_roi_align_backward: 'grad_output' must have shape [1, 2, 1, 1], got [1, 3, 1, 1]");
    dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(arg), dkk_free(arg32), dkk_free(r4), dkk_free(gi),
        dkk_free(gbad);
    dkk_free(ps), dkk_free(psa), dkk_free(psa3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(both_geometries_every_dtype),
        cmocka_unit_test(packed_tensors_take_the_runs),
        cmocka_unit_test(same_bits_for_any_thread_count),
        cmocka_unit_test(mmcv_published_vectors),
        cmocka_unit_test(ps_roi_pool_backward_channels_a_task),
        cmocka_unit_test(ps_roi_pool_every_dtype),
        cmocka_unit_test(ps_roi_pool_same_bits_for_any_thread_count),
        cmocka_unit_test(ps_roi_pool_every_path),
        cmocka_unit_test(ps_roi_pool_plane_major),
        cmocka_unit_test(ps_roi_align_every_dtype),
        cmocka_unit_test(ps_roi_align_same_bits_for_any_thread_count),
        cmocka_unit_test(ps_roi_align_grad_planes),
        cmocka_unit_test(ps_roi_align_beyond_the_tap_table),
        cmocka_unit_test(ps_roi_align_every_path),
        cmocka_unit_test(bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
