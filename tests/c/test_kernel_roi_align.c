/*
 * test_kernel_roi_align.c — roi_align's CPU kernel against a per-sample reference written from the
 * shared math (kernels/roi_align_math.h), through the kernel-test harness (dk_kernel_test.h):
 * every dtype, three layouts, fixed and adaptive sampling, aligned or not, avg and max pooling,
 * forward and backward, with each evaluation path forced in turn (Note [Tunables]: sparse and
 * dense orders, bounded and counted tap tables, the large-output paths on small outputs, several
 * threads on small calls), plus the determinism of backward across thread counts.
 */
#include "dk_kernel_test.h"
#include "dk_parallel.h"
#include "dk_tunables.h"
#include "kernels/roi_align_math.h"
#include "roi_align.h"

enum { N = 2, C = 5, H = 11, W = 13, K = 17, PH = 3, PW = 4 };
static const double SCALE = 0.5;

/* The dtypes of input and argmax, and the tolerance of each against the double reference. */
typedef struct {
    dk_dtype dt;
    double atol;
} dtype_case;
static const dtype_case DTYPES[] = {
    {DK_FLOAT32, 2e-5},
    {DK_FLOAT64, 1e-11},
    {DK_FLOAT16, 4e-3},
    {DK_BFLOAT16, 3e-2},
};

static const int NCHW[4] = {0, 1, 2, 3}, NHWC[4] = {0, 2, 3, 1};

/* The RoIs of these tests (dkk_roi_boxes): some past the borders, a few degenerate. */
static dkk_tensor *make_rois(dk_dtype dt, dkk_rng *r, int64_t k) { return dkk_roi_boxes(dt, r, k, N, H, W, SCALE); }

/* The geometry of RoI k, in double, from the rois as stored. */
static void geometry(const dkk_tensor *rois, int64_t k, int64_t sr, bool aligned, dk_roi_align_axis_f64 *ay,
                     dk_roi_align_axis_f64 *ax)
{
    double v[5];
    for (int j = 0; j < 5; j++) v[j] = dkk_get(rois, (int64_t[]){k, j});
    dk_roi_align_roi_init_f64(v[1], v[2], v[3], v[4], SCALE, PH, PW, sr, aligned, H, W, ay, ax);
}

/* Plane (n, c) of x as a dense double array. */
static void plane_of(const dkk_tensor *x, int64_t n, int64_t c, double *out)
{
    for (int64_t y = 0; y < H; y++)
        for (int64_t xx = 0; xx < W; xx++) out[y * W + xx] = dkk_get(x, (int64_t[]){n, c, y, xx});
}

static void reference_forward_avg(const dkk_tensor *x, const dkk_tensor *rois, int64_t sr, bool aligned,
                                  dkk_tensor *out)
{
    double plane[H * W];
    for (int64_t k = 0; k < rois->shape[0]; k++) {
        dk_roi_align_axis_f64 ay, ax;
        geometry(rois, k, sr, aligned, &ay, &ax);
        const int64_t n = (int64_t)dkk_get(rois, (int64_t[]){k, 0});
        for (int64_t c = 0; c < C; c++) {
            plane_of(x, n, c, plane);
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++)
                    dkk_set(out, (int64_t[]){k, c, ph, pw},
                            dk_roi_align_forward_avg_f64(plane, W, 1, H, W, &ay, &ax, ph, pw));
        }
    }
}

static void reference_backward_avg(const dkk_tensor *g, const dkk_tensor *rois, int64_t sr, bool aligned,
                                   dkk_tensor *gin)
{
    static double acc[N][C][H][W];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < rois->shape[0]; k++) {
        dk_roi_align_axis_f64 ay, ax;
        geometry(rois, k, sr, aligned, &ay, &ax);
        const int64_t n = (int64_t)dkk_get(rois, (int64_t[]){k, 0});
        const double count = dk_roi_align_count_f64(&ay, &ax);
        for (int64_t c = 0; c < C; c++)
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++) {
                    const double gv = dkk_get(g, (int64_t[]){k, c, ph, pw}) / count;
                    for (int64_t iy = 0; iy < ay.grid; iy++)
                        for (int64_t ix = 0; ix < ax.grid; ix++) {
                            dk_roi_align_bilinear_f64 b;
                            if (!dk_roi_align_bilinear_init_f64(dk_roi_align_axis_sample_f64(&ay, ph, iy),
                                                                dk_roi_align_axis_sample_f64(&ax, pw, ix), H, W, &b))
                                continue;
                            acc[n][c][b.y_low][b.x_low] += gv * b.w1;
                            acc[n][c][b.y_low][b.x_high] += gv * b.w2;
                            acc[n][c][b.y_high][b.x_low] += gv * b.w3;
                            acc[n][c][b.y_high][b.x_high] += gv * b.w4;
                        }
                }
    }
    int64_t idx[4] = {0};
    do dkk_set(gin, idx, acc[idx[0]][idx[1]][idx[2]][idx[3]]);
    while (dkk_next(gin, idx));
}

/* Max pooling: the reference runs in the kernel's compute type, whose operations the kernel
 * reproduces exactly (Note in roi_align_eval_tmpl.h), so values and argmax must be equal. */
static void reference_forward_max(const dkk_tensor *x, const dkk_tensor *rois, int64_t sr, bool aligned,
                                  dkk_tensor *out, dkk_tensor *amy, dkk_tensor *amx)
{
    const bool f64 = dk_tensor_dtype(&x->t) == DK_FLOAT64;
    double pd[H * W];
    float pf[H * W];
    for (int64_t k = 0; k < rois->shape[0]; k++) {
        double v[5];
        for (int j = 0; j < 5; j++) v[j] = dkk_get(rois, (int64_t[]){k, j});
        const int64_t n = (int64_t)v[0];
        for (int64_t c = 0; c < C; c++) {
            plane_of(x, n, c, pd);
            for (int i = 0; i < H * W; i++) pf[i] = (float)pd[i];
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++) {
                    const int64_t at[4] = {k, c, ph, pw};
                    if (f64) {
                        dk_roi_align_axis_f64 ay, ax;
                        dk_roi_align_roi_init_f64(v[1], v[2], v[3], v[4], SCALE, PH, PW, sr, aligned, H, W, &ay, &ax);
                        double my, mx;
                        dkk_set(out, at, dk_roi_align_forward_max_f64(pd, W, 1, H, W, &ay, &ax, ph, pw, &my, &mx));
                        dkk_set(amy, at, my);
                        dkk_set(amx, at, mx);
                    } else {
                        dk_roi_align_axis_f32 ay, ax;
                        dk_roi_align_roi_init_f32((float)v[1], (float)v[2], (float)v[3], (float)v[4], (float)SCALE, PH,
                                                  PW, sr, aligned, H, W, &ay, &ax);
                        float my, mx;
                        dkk_set(out, at, dk_roi_align_forward_max_f32(pf, W, 1, H, W, &ay, &ax, ph, pw, &my, &mx));
                        dkk_set(amy, at, my);
                        dkk_set(amx, at, mx);
                    }
                }
        }
    }
}

static void reference_backward_max(const dkk_tensor *g, const dkk_tensor *rois, const dkk_tensor *amy,
                                   const dkk_tensor *amx, dkk_tensor *gin)
{
    static double acc[N][C][H][W];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < rois->shape[0]; k++) {
        const int64_t n = (int64_t)dkk_get(rois, (int64_t[]){k, 0});
        for (int64_t c = 0; c < C; c++)
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++) {
                    const int64_t at[4] = {k, c, ph, pw};
                    const double y = dkk_get(amy, at), x = dkk_get(amx, at), gv = dkk_get(g, at);
                    dk_roi_align_bilinear_f64 b;
                    if (y == -1 || !dk_roi_align_bilinear_init_f64(y, x, H, W, &b)) continue;
                    acc[n][c][b.y_low][b.x_low] += gv * b.w1;
                    acc[n][c][b.y_low][b.x_high] += gv * b.w2;
                    acc[n][c][b.y_high][b.x_low] += gv * b.w3;
                    acc[n][c][b.y_high][b.x_high] += gv * b.w4;
                }
    }
    int64_t idx[4] = {0};
    do dkk_set(gin, idx, acc[idx[0]][idx[1]][idx[2]][idx[3]]);
    while (dkk_next(gin, idx));
}

/* A tensor of the reference's kind: float64, row-major. */
static dkk_tensor *ref4(int64_t a, int64_t b, int64_t c, int64_t d)
{
    return dkk_new(DK_FLOAT64, 4, (int64_t[]){a, b, c, d}, NULL, 0);
}

static dk_dtype argmax_dtype(dk_dtype dt) { return dt == DK_FLOAT64 ? DK_FLOAT64 : DK_FLOAT32; }

/* One configuration: every dtype, layout, sampling, alignment and mode against the references. */
static void check_all_cases(const char *config)
{
    char what[256];
    dkk_rng rng = {0x5eed};
    for (size_t di = 0; di < DK_COUNTOF(DTYPES); di++) {
        const dk_dtype dt = DTYPES[di].dt;
        const double atol = DTYPES[di].atol;
        dkk_tensor *rois = make_rois(dt, &rng, K);
        for (int layout = 0; layout < 3; layout++) {
            const int *order = layout == 1 ? NHWC : NCHW;
            const int64_t gap = layout == 2 ? 3 : 0;
            dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, order, gap);
            dkk_fill_uniform(x, &rng, -1, 1);
            dkk_tensor *g = dkk_new(dt, 4, (int64_t[]){K, C, PH, PW}, order, gap);
            dkk_fill_uniform(g, &rng, -1, 1);
            for (int64_t sr = 0; sr <= 2; sr += 2)
                for (int aligned = 0; aligned < 2; aligned++) {
                    snprintf(what, sizeof what, "%s, %s, layout %d, sampling_ratio %lld, aligned %d", config,
                             dk_dtype_name(dt), layout, (long long)sr, aligned);
                    /* average pooling */
                    dkk_tensor *out = dkk_new(dt, 4, (int64_t[]){K, C, PH, PW}, order, gap);
                    dkk_tensor *gin = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, order, gap);
                    dkk_tensor *rout = ref4(K, C, PH, PW), *rgin = ref4(N, C, H, W);
                    assert_ok(dk_roi_align_forward(&x->t, &rois->t, &out->t, NULL, NULL, PH, PW, SCALE, sr, DK_POOL_AVG,
                                                   aligned));
                    reference_forward_avg(x, rois, sr, aligned, rout);
                    dkk_assert_close(out, rout, atol, atol, what);
                    assert_ok(dk_roi_align_backward(&g->t, &rois->t, NULL, NULL, &gin->t, PH, PW, SCALE, sr,
                                                    DK_POOL_AVG, aligned));
                    reference_backward_avg(g, rois, sr, aligned, rgin);
                    dkk_assert_close(gin, rgin, 4 * atol, 4 * atol, what);
                    /* max pooling */
                    dkk_tensor *amy = dkk_new(argmax_dtype(dt), 4, (int64_t[]){K, C, PH, PW}, order, gap);
                    dkk_tensor *amx = dkk_new(argmax_dtype(dt), 4, (int64_t[]){K, C, PH, PW}, order, gap);
                    dkk_tensor *ramy = ref4(K, C, PH, PW), *ramx = ref4(K, C, PH, PW);
                    assert_ok(dk_roi_align_forward(&x->t, &rois->t, &out->t, &amy->t, &amx->t, PH, PW, SCALE, sr,
                                                   DK_POOL_MAX, aligned));
                    reference_forward_max(x, rois, sr, aligned, rout, ramy, ramx);
                    dkk_assert_close(out, rout, 0, 0.004, what); /* storage rounding only */
                    dkk_assert_close(amy, ramy, 0, 0, what);
                    dkk_assert_close(amx, ramx, 0, 0, what);
                    assert_ok(dk_roi_align_backward(&g->t, &rois->t, &amy->t, &amx->t, &gin->t, PH, PW, SCALE, sr,
                                                    DK_POOL_MAX, aligned));
                    reference_backward_max(g, rois, amy, amx, rgin);
                    dkk_assert_close(gin, rgin, 4 * atol, 4 * atol, what);
                    dkk_free(out), dkk_free(gin), dkk_free(rout), dkk_free(rgin);
                    dkk_free(amy), dkk_free(amx), dkk_free(ramy), dkk_free(ramx);
                }
            dkk_free(x), dkk_free(g);
        }
        dkk_free(rois);
    }
}

static void set(const char *name, int64_t v) { assert_ok(dk_tunable_set(name, v, NULL)); }

static int reset(void **state)
{
    (void)state;
    dk_tunables_reset();
    dk_set_num_threads(0);
    return 0;
}

static void cost_model_order(void **state)
{
    (void)state;
    check_all_cases("cost model");
}

static void sparse_order_everywhere(void **state)
{
    (void)state;
    set("roi_align.order", 0);
    check_all_cases("sparse");
}

static void dense_order_everywhere(void **state)
{
    (void)state;
    set("roi_align.order", 1);
    check_all_cases("dense");
}

static void counted_tap_tables(void **state)
{
    (void)state;
    set("roi_align.taps_bound_bytes", 0);
    check_all_cases("counted tap tables");
}

static void three_threads_and_large_output_paths_on_small_calls(void **state)
{
    (void)state;
    set("parallel.min_work", 0);      /* every call uses the thread count */
    set("large_output.min_bytes", 0); /* every output is "large": hints, streaming stores */
    assert_ok(dk_set_num_threads(3));
    check_all_cases("3 threads, large-output paths");
}

/* Backward gives the same bits for any thread count and evaluation order's run (Note
 * [Deterministic backward]); forward too. */
static void results_do_not_depend_on_the_thread_count(void **state)
{
    (void)state;
    set("parallel.min_work", 0);
    dkk_rng rng = {7};
    dkk_tensor *rois = make_rois(DK_FLOAT32, &rng, 40);
    dkk_tensor *x = dkk_new(DK_FLOAT32, 4, (int64_t[]){N, C, H, W}, NULL, 0);
    dkk_tensor *g = dkk_new(DK_FLOAT32, 4, (int64_t[]){40, C, PH, PW}, NULL, 0);
    dkk_fill_uniform(x, &rng, -1, 1);
    dkk_fill_uniform(g, &rng, -1, 1);
    dkk_tensor *o[4], *gi[4];
    for (int t = 0; t < 4; t++) {
        assert_ok(dk_set_num_threads(t + 1));
        o[t] = dkk_new(DK_FLOAT32, 4, (int64_t[]){40, C, PH, PW}, NULL, 0);
        gi[t] = dkk_new(DK_FLOAT32, 4, (int64_t[]){N, C, H, W}, NULL, 0);
        assert_ok(dk_roi_align_forward(&x->t, &rois->t, &o[t]->t, NULL, NULL, PH, PW, SCALE, 0, DK_POOL_AVG, true));
        assert_ok(dk_roi_align_backward(&g->t, &rois->t, NULL, NULL, &gi[t]->t, PH, PW, SCALE, 0, DK_POOL_AVG, true));
    }
    for (int t = 1; t < 4; t++) {
        dkk_assert_identical(o[t], o[0], "forward, threads vs 1 thread");
        dkk_assert_identical(gi[t], gi[0], "backward, threads vs 1 thread");
    }
    for (int t = 0; t < 4; t++) dkk_free(o[t]), dkk_free(gi[t]);
    dkk_free(rois), dkk_free(x), dkk_free(g);
}

/* A fresh output of several huge pages, written by 3 threads while thread 0 faults it in and the
 * others stage (Note [Faulting in the shadow]): the same bits as one thread writing it. */
static void staged_writes_of_a_fresh_large_output(void **state)
{
    (void)state;
    set("parallel.min_work", 0);
    set("large_output.min_bytes", 0);
    set("large_output.stage_bytes", 64 << 10); /* stages fill and flush often */
    enum { KK = 64, CC = 64, P = 16 };         /* output: 4 MiB, two huge pages at least */
    dkk_rng rng = {11};
    dkk_tensor *rois = make_rois(DK_FLOAT32, &rng, KK);
    dkk_tensor *x = dkk_new(DK_FLOAT32, 4, (int64_t[]){N, CC, H, W}, NULL, 0);
    dkk_fill_uniform(x, &rng, -1, 1);
    dkk_tensor *one = dkk_new(DK_FLOAT32, 4, (int64_t[]){KK, CC, P, P}, NULL, 0);
    assert_ok(dk_set_num_threads(1));
    assert_ok(dk_roi_align_forward(&x->t, &rois->t, &one->t, NULL, NULL, P, P, SCALE, 2, DK_POOL_AVG, true));
    assert_ok(dk_set_num_threads(3));
    for (int rep = 0; rep < 3; rep++) {
        dkk_tensor *fresh = dkk_new(DK_FLOAT32, 4, (int64_t[]){KK, CC, P, P}, NULL, 0); /* calloc: not faulted in */
        assert_ok(dk_roi_align_forward(&x->t, &rois->t, &fresh->t, NULL, NULL, P, P, SCALE, 2, DK_POOL_AVG, true));
        dkk_assert_identical(fresh, one, "3 threads staging vs 1 thread");
        dkk_free(fresh);
    }
    dkk_free(one), dkk_free(rois), dkk_free(x);
}

/* Regression: the stage of Note [Faulting in the shadow] holds whole iterations, 2 * PH * PW
 * values per RoI of the busiest image; with 61 RoIs at 7x7 that is no multiple of 8, and the
 * next thread's scratch started 8 bytes off V4 alignment: SIGSEGV on an aligned vector store in
 * thread 1 (every 2-thread call of this shape into a fresh output of a few MB). */
static void staged_writes_with_an_odd_stage(void **state)
{
    (void)state;
    set("parallel.min_work", 0);
    set("large_output.min_bytes", 0);
    set("large_output.stage_bytes", 1 << 20);
    enum { KK = 61, CC = 512, P = 7 }; /* output: 6 MiB, two huge pages at least */
    dkk_rng rng = {13};
    dkk_tensor *rois = make_rois(DK_FLOAT32, &rng, KK);
    for (int64_t i = 0; i < KK; i++) dkk_set(rois, (int64_t[]){i, 0}, 0.0); /* one image: 61 RoIs */
    dkk_tensor *x = dkk_new(DK_FLOAT32, 4, (int64_t[]){N, CC, H, W}, NULL, 0);
    dkk_fill_uniform(x, &rng, -1, 1);
    dkk_tensor *one = dkk_new(DK_FLOAT32, 4, (int64_t[]){KK, CC, P, P}, NULL, 0);
    assert_ok(dk_set_num_threads(1));
    assert_ok(dk_roi_align_forward(&x->t, &rois->t, &one->t, NULL, NULL, P, P, SCALE, 2, DK_POOL_AVG, true));
    for (int t = 2; t <= 4; t++) {
        assert_ok(dk_set_num_threads(t));
        dkk_tensor *fresh = dkk_new(DK_FLOAT32, 4, (int64_t[]){KK, CC, P, P}, NULL, 0);
        assert_ok(dk_roi_align_forward(&x->t, &rois->t, &fresh->t, NULL, NULL, P, P, SCALE, 2, DK_POOL_AVG, true));
        dkk_assert_identical(fresh, one, "threads staging an odd stage vs 1 thread");
        dkk_free(fresh);
    }
    dkk_free(one), dkk_free(rois), dkk_free(x);
}

/* Regression (fuzz_roi_align, tests/fuzz/regressions/fuzz_roi_align/): an input without elements
 * (H or W is 0) may have no memory at all (data NULL, Note [Untrusted tensors]). Forward with
 * boxes still has work, and its plane loops formed each plane's address as NULL + offset,
 * undefined in C (UBSan under clang). Every sample then lies outside the image: the output is 0,
 * in both modes and every dtype; backward into a grad_input without memory succeeds too. */
static void empty_input_without_memory(void **state)
{
    (void)state;
    const int64_t sizes[2][4] = {{N, C, 0, W}, {N, C, H, 0}};
    for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
        const dk_dtype dt = DTYPES[d].dt;
        const bool half = dt == DK_FLOAT16 || dt == DK_BFLOAT16;
        for (int e = 0; e < 2; e++) {
            for (int mode = DK_POOL_MAX; mode <= DK_POOL_AVG; mode++) {
                dkk_rng rng = {5};
                dkk_tensor *x = dkk_new(dt, 4, sizes[e], NULL, 0);
                x->t.data = NULL; /* no elements, no memory */
                dkk_tensor *rois = make_rois(dt, &rng, K);
                dkk_tensor *out = dkk_new(dt, 4, (int64_t[]){K, C, PH, PW}, NULL, 0);
                dkk_tensor *ay = NULL, *ax = NULL;
                if (mode == DK_POOL_MAX) {
                    ay = dkk_new(half ? DK_FLOAT32 : dt, 4, (int64_t[]){K, C, PH, PW}, NULL, 0);
                    ax = dkk_new(half ? DK_FLOAT32 : dt, 4, (int64_t[]){K, C, PH, PW}, NULL, 0);
                }
                dkk_fill_uniform(out, &rng, 1, 2); /* stale values: every element is written */
                assert_ok(dk_roi_align_forward(&x->t, &rois->t, &out->t, ay ? &ay->t : NULL, ax ? &ax->t : NULL, PH, PW,
                                               SCALE, 2, mode, e == 0));
                int64_t idx[4] = {0};
                do assert_true(dkk_get(out, idx) == 0.0);
                while (dkk_next(out, idx));
                dkk_tensor *gin = dkk_new(dt, 4, sizes[e], NULL, 0);
                gin->t.data = NULL;
                assert_ok(dk_roi_align_backward(&out->t, &rois->t, ay ? &ay->t : NULL, ax ? &ax->t : NULL, &gin->t, PH,
                                                PW, SCALE, 2, mode, e == 0));
                dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(ay), dkk_free(ax), dkk_free(gin);
            }
        }
    }
}

static void tunables_are_named_and_bounded(void **state)
{
    (void)state;
    int64_t v, prev;
    assert_ok(dk_tunable_get("roi_align.order", &v));
    assert_int_equal(v, -1);
    assert_ok(dk_tunable_set("roi_align.order", 1, &prev));
    assert_int_equal(prev, -1);
    assert_error(dk_tunable_set("roi_align.order", 2, NULL), DK_EINVAL,
                 "tunable 'roi_align.order' must be in [-1, 1], got 2");
    assert_error(dk_tunable_set("no.such", 0, NULL), DK_ENOENT, "no tunable named 'no.such'");
    dk_tunables_reset();
    assert_ok(dk_tunable_get("roi_align.order", &v));
    assert_int_equal(v, -1);
}

/* ---- roi_align_rotated ----------------------------------------------------------------- */

/* Rotated RoIs (batch_index, cx, cy, w, h, angle) in image coordinates: inside, across the edges,
 * outside, smaller than a pixel, of negative width, any angle. */
static dkk_tensor *make_rotated_rois(dk_dtype dt, dkk_rng *r, int64_t k)
{
    dkk_tensor *t = dkk_new(dt, 2, (int64_t[]){k, 6}, NULL, 0);
    const double ih = H / SCALE, iw = W / SCALE;
    for (int64_t i = 0; i < k; i++) {
        double v[6] = {(double)(i % N),
                       dkk_uniform(r, -0.2 * iw, 1.2 * iw),
                       dkk_uniform(r, -0.2 * ih, 1.2 * ih),
                       dkk_uniform(r, 0, iw),
                       dkk_uniform(r, 0, ih),
                       dkk_uniform(r, -7, 7)};
        if (i % 6 == 3) v[3] = 0.3, v[4] = 0.2;
        if (i % 6 == 4) v[4] = -2;
        if (i % 6 == 5) v[2] -= 3 * ih;
        for (int j = 0; j < 6; j++) dkk_set(t, (int64_t[]){i, j}, v[j]);
    }
    return t;
}

/* MMCV's bilinear read of (y, x) on an h x w plane, from its definition: the four (row, column,
 * weight) taps, or none (returns 0) outside [-1, h] x [-1, w]. */
static int rotated_ref_taps(double y, double x, int64_t h, int64_t w, int64_t rc[4][2], double wt[4])
{
    if (y < -1.0 || y > (double)h || x < -1.0 || x > (double)w) return 0;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1, x1;
    if (y0 >= h - 1) y1 = y0 = h - 1, y = (double)y0;
    else y1 = y0 + 1;
    if (x0 >= w - 1) x1 = x0 = w - 1, x = (double)x0;
    else x1 = x0 + 1;
    const double ly = y - (double)y0, lx = x - (double)x0, hy = 1 - ly, hx = 1 - lx;
    const int64_t r[4][2] = {{y0, x0}, {y0, x1}, {y1, x0}, {y1, x1}};
    const double v[4] = {hy * hx, hy * lx, ly * hx, ly * lx};
    memcpy(rc, r, sizeof r), memcpy(wt, v, sizeof v);
    return 4;
}

/* MMCV's roi_align_rotated in double, sample by sample: the output (g NULL) or, for grad_output
 * g, grad_input. */
static void rotated_reference(const dkk_tensor *x, const dkk_tensor *rois, const dkk_tensor *g, int64_t ph_n,
                              int64_t pw_n, int64_t sr, bool aligned, bool clockwise, dkk_tensor *out)
{
    const int64_t k_n = rois->shape[0], c_n = out->shape[1];
    for (int64_t i = 0; i < dk_tensor_numel(&out->t); i++) ((double *)out->mem)[i] = 0;
    for (int64_t k = 0; k < k_n; k++) {
        double v[6];
        for (int j = 0; j < 6; j++) v[j] = dkk_get(rois, (int64_t[]){k, j});
        const int64_t n = (int64_t)v[0];
        const double off = aligned ? 0.5 : 0.0, cx = v[1] * SCALE - off, cy = v[2] * SCALE - off;
        double w = v[3] * SCALE, h = v[4] * SCALE, theta = clockwise ? -v[5] : v[5];
        if (!aligned) w = w < 1 ? 1 : w, h = h < 1 ? 1 : h;
        const int64_t gh = sr > 0 ? sr : (int64_t)ceil(h / (double)ph_n),
                      gw = sr > 0 ? sr : (int64_t)ceil(w / (double)pw_n);
        const double count = gh * gw > 1 ? (double)(gh * gw) : 1.0;
        for (int64_t ph = 0; ph < ph_n; ph++)
            for (int64_t pw = 0; pw < pw_n; pw++)
                for (int64_t iy = 0; iy < gh; iy++)
                    for (int64_t ix = 0; ix < gw; ix++) {
                        const double yy = -h / 2 + (double)ph * h / (double)ph_n + (iy + 0.5) * h / (double)(ph_n * gh);
                        const double xx = -w / 2 + (double)pw * w / (double)pw_n + (ix + 0.5) * w / (double)(pw_n * gw);
                        const double y = yy * cos(theta) - xx * sin(theta) + cy;
                        const double xs = yy * sin(theta) + xx * cos(theta) + cx;
                        int64_t rc[4][2];
                        double wt[4];
                        const int m = rotated_ref_taps(y, xs, H, W, rc, wt);
                        for (int t = 0; t < m; t++)
                            for (int64_t c = 0; c < c_n; c++) {
                                if (!g) {
                                    const int64_t o = dkk_offset(out, (int64_t[]){k, c, ph, pw});
                                    ((double *)out->mem)[o] += wt[t] *
                                                               dkk_get(x, (int64_t[]){n, c, rc[t][0], rc[t][1]}) /
                                                               count;
                                } else {
                                    const int64_t o = dkk_offset(out, (int64_t[]){n, c, rc[t][0], rc[t][1]});
                                    ((double *)out->mem)[o] += dkk_get(g, (int64_t[]){k, c, ph, pw}) * wt[t] / count;
                                }
                            }
                    }
    }
}

static void rotated_against_the_reference(void **state)
{
    (void)state;
    char what[256];
    dkk_rng rng = {0x707a};
    for (size_t di = 0; di < DK_COUNTOF(DTYPES); di++) {
        const dk_dtype dt = DTYPES[di].dt;
        const double atol = DTYPES[di].atol;
        dkk_tensor *rois = make_rotated_rois(dt, &rng, K);
        for (int layout = 0; layout < 3; layout++) {
            const int *order = layout == 1 ? NHWC : NCHW;
            const int64_t gap = layout == 2 ? 3 : 0;
            dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, order, gap);
            dkk_fill_uniform(x, &rng, -1, 1);
            dkk_tensor *g = dkk_new(dt, 4, (int64_t[]){K, C, PH, PW}, order, gap);
            dkk_fill_uniform(g, &rng, -1, 1);
            for (int64_t sr = 0; sr <= 2; sr += 2)
                for (int mode = 0; mode < 4; mode++) {
                    const bool aligned = mode & 1, clockwise = mode & 2;
                    snprintf(what, sizeof what,
                             "roi_align_rotated %s, layout %d, sampling_ratio %lld, aligned %d, "
                             "clockwise %d",
                             dk_dtype_name(dt), layout, (long long)sr, aligned, clockwise);
                    dkk_tensor *out = dkk_new(dt, 4, (int64_t[]){K, C, PH, PW}, order, gap);
                    dkk_tensor *gin = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, order, gap);
                    dkk_tensor *rout = ref4(K, C, PH, PW), *rgin = ref4(N, C, H, W);
                    assert_ok(
                        dk_roi_align_rotated_forward(&x->t, &rois->t, &out->t, PH, PW, SCALE, sr, aligned, clockwise));
                    rotated_reference(x, rois, NULL, PH, PW, sr, aligned, clockwise, rout);
                    dkk_assert_close(out, rout, atol, atol, what);
                    assert_ok(dk_roi_align_rotated_backward(&g->t, &rois->t, &gin->t, SCALE, sr, aligned, clockwise));
                    rotated_reference(x, rois, g, PH, PW, sr, aligned, clockwise, rgin);
                    dkk_assert_close(gin, rgin, 4 * atol, 4 * atol, what);
                    dkk_free(out), dkk_free(gin), dkk_free(rout), dkk_free(rgin);
                }
            dkk_free(x), dkk_free(g);
        }
        dkk_free(rois);
    }
}

/* Bins with more samples than the kernel's table (4096): the per-element path, forward and
 * backward; and the bits of 1 and 3 threads, which must agree (Note [Rotated RoIAlign on a CPU]). */
static void rotated_large_bins_and_threads(void **state)
{
    (void)state;
    dkk_rng rng = {0x707b};
    dkk_tensor *rois = make_rotated_rois(DK_FLOAT64, &rng, K);
    dkk_tensor *x = dkk_new(DK_FLOAT64, 4, (int64_t[]){N, C, H, W}, NULL, 0);
    dkk_fill_uniform(x, &rng, -1, 1);
    dkk_tensor *g = dkk_new(DK_FLOAT64, 4, (int64_t[]){K, C, 1, 2}, NULL, 0);
    dkk_fill_uniform(g, &rng, -1, 1);
    dkk_tensor *out = dkk_new(DK_FLOAT64, 4, (int64_t[]){K, C, 1, 2}, NULL, 0), *rout = ref4(K, C, 1, 2);
    dkk_tensor *gin = dkk_new(DK_FLOAT64, 4, (int64_t[]){N, C, H, W}, NULL, 0), *rgin = ref4(N, C, H, W);
    assert_ok(dk_roi_align_rotated_forward(&x->t, &rois->t, &out->t, 1, 2, SCALE, 70, true, false));
    rotated_reference(x, rois, NULL, 1, 2, 70, true, false, rout);
    dkk_assert_close(out, rout, 1e-11, 1e-11, "roi_align_rotated, 4900 samples per bin");
    assert_ok(dk_roi_align_rotated_backward(&g->t, &rois->t, &gin->t, SCALE, 70, true, false));
    rotated_reference(x, rois, g, 1, 2, 70, true, false, rgin);
    dkk_assert_close(gin, rgin, 1e-10, 1e-10, "roi_align_rotated backward, 4900 samples per bin");
    dkk_free(out), dkk_free(rout), dkk_free(gin), dkk_free(rgin), dkk_free(g), dkk_free(rois), dkk_free(x);

    dkk_tensor *r32 = make_rotated_rois(DK_FLOAT32, &rng, 40);
    dkk_tensor *x32 = dkk_new(DK_FLOAT32, 4, (int64_t[]){N, 37, H, W}, NULL, 0);
    dkk_fill_uniform(x32, &rng, -1, 1);
    dkk_tensor *g32 = dkk_new(DK_FLOAT32, 4, (int64_t[]){40, 37, 7, 7}, NULL, 0);
    dkk_fill_uniform(g32, &rng, -1, 1);
    dkk_tensor *o[2], *gi[2];
    for (int t = 0; t < 2; t++) {
        assert_ok(dk_set_num_threads(t ? 3 : 1));
        o[t] = dkk_new(DK_FLOAT32, 4, (int64_t[]){40, 37, 7, 7}, NULL, 0);
        gi[t] = dkk_new(DK_FLOAT32, 4, (int64_t[]){N, 37, H, W}, NULL, 0);
        assert_ok(dk_roi_align_rotated_forward(&x32->t, &r32->t, &o[t]->t, 7, 7, SCALE, 0, true, true));
        assert_ok(dk_roi_align_rotated_backward(&g32->t, &r32->t, &gi[t]->t, SCALE, 0, true, true));
    }
    dkk_assert_identical(o[1], o[0], "roi_align_rotated forward, 3 threads against 1");
    dkk_assert_identical(gi[1], gi[0], "roi_align_rotated backward, 3 threads against 1");
    for (int t = 0; t < 2; t++) dkk_free(o[t]), dkk_free(gi[t]);
    dkk_free(r32), dkk_free(x32), dkk_free(g32);
}

/* The channel rows' paths (Note [Rotated RoIAlign's channel rows]): the baseline and the AVX2
 * runs (roi_align_rotated.isa), channel blocks of whole chunks and a partial one (150 channels:
 * on one thread blocks of 75 = 2 x 32 + 11, on three blocks of 25 = 16 + 9), of a partial chunk
 * only (37 on three threads: blocks of 6; 3 channels), more bins than one run of the table (9 x 8 = 72 >
 * 64), each dtype's compute type: the reference's values, and the same bits on every path.
 * With AVX2, float32 moves between planes and rows in 8 x 8 tiles (Note [Channels-last copies]):
 * a whole plane of 11 x 13 pixels (17 tiles and 7 pixels), rows of 13 pixels where the map's
 * rows are 3 apart (layout 1), outputs and gradients of 9 x 8 bins in runs of 64 and 8 (and
 * where rows are apart, element by element), of 1 x 20 bins (one row: 2 tiles and 4 bins even
 * where rows are apart); the channels past the last group of 8 one by one. */
static void rotated_lanes_runs_and_isas(void **state)
{
    (void)state;
    char what[256];
    dkk_rng rng = {0x707c};
    const int64_t bins[2][2] = {{9, 8}, {1, 20}}, channels[3] = {150, 37, 3};
    for (size_t di = 0; di < DK_COUNTOF(DTYPES); di++)
        for (int ci = 0; ci < 3; ci++)
            for (int layout = 0; layout < 4; layout++) {
                const dk_dtype dt = DTYPES[di].dt;
                const double atol = DTYPES[di].atol;
                const int64_t cc = channels[ci], ph = bins[layout >> 1][0], pw = bins[layout >> 1][1],
                              gap = (layout & 1) * 3;
                dkk_tensor *rois = make_rotated_rois(dt, &rng, K);
                dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){N, cc, H, W}, NULL, gap);
                dkk_fill_uniform(x, &rng, -1, 1);
                dkk_tensor *g = dkk_new(dt, 4, (int64_t[]){K, cc, ph, pw}, NULL, gap);
                dkk_fill_uniform(g, &rng, -1, 1);
                dkk_tensor *rout = ref4(K, cc, ph, pw), *rgin = ref4(N, cc, H, W);
                rotated_reference(x, rois, NULL, ph, pw, 0, true, true, rout);
                rotated_reference(x, rois, g, ph, pw, 0, true, true, rgin);
                dkk_tensor *out[4], *gin[4];
                for (int run = 0; run < 4; run++) {
                    assert_ok(dk_tunable_set("roi_align_rotated.isa", run & 1, NULL));
                    assert_ok(dk_set_num_threads(run & 2 ? 3 : 1));
                    out[run] = dkk_new(dt, 4, (int64_t[]){K, cc, ph, pw}, NULL, gap);
                    gin[run] = dkk_new(dt, 4, (int64_t[]){N, cc, H, W}, NULL, gap);
                    assert_ok(
                        dk_roi_align_rotated_forward(&x->t, &rois->t, &out[run]->t, ph, pw, SCALE, 0, true, true));
                    assert_ok(dk_roi_align_rotated_backward(&g->t, &rois->t, &gin[run]->t, SCALE, 0, true, true));
                    snprintf(what, sizeof what,
                             "roi_align_rotated %s, %lld channels, %lld x %lld bins, layout %d, isa %d, %d threads",
                             dk_dtype_name(dt), (long long)cc, (long long)ph, (long long)pw, layout & 1, run & 1,
                             run & 2 ? 3 : 1);
                    if (run == 0) {
                        dkk_assert_close(out[0], rout, atol, atol, what);
                        dkk_assert_close(gin[0], rgin, 4 * atol, 4 * atol, what);
                    } else {
                        dkk_assert_identical(out[run], out[0], what);
                        dkk_assert_identical(gin[run], gin[0], what);
                    }
                }
                for (int run = 0; run < 4; run++) dkk_free(out[run]), dkk_free(gin[run]);
                dkk_free(rout), dkk_free(rgin), dkk_free(x), dkk_free(g), dkk_free(rois);
            }
}

/* Note [One sine for every backend]: dk_sincos against the C library's, to 2 ulps of double over
 * box angles, and rounded to float the correctly rounded value; the edges (signed zero, NaN,
 * infinities, magnitudes past the reduction) give what its comment says. */
static void one_sine_for_every_backend(void **state)
{
    (void)state;
    dkk_rng rng = {7};
    for (int i = 0; i < 200000; i++) {
        const double range = i % 3 == 0 ? 7.0 : i % 3 == 1 ? 100.0 : 4000.0;
        const double x = dkk_uniform(&rng, -range, range);
        double s, c;
        dk_sincos(x, &s, &c);
        const double es = fabs(s - sin(x)), ec = fabs(c - cos(x));
        if (es > 2.0 * DBL_EPSILON * fmax(fabs(sin(x)), 1e-3) || ec > 2.0 * DBL_EPSILON * fmax(fabs(cos(x)), 1e-3))
            fail_msg("dk_sincos(%.17g) = (%.17g, %.17g), libm (%.17g, %.17g)", x, s, c, sin(x), cos(x));
        const float xf = (float)x;
        dk_sincos((double)xf, &s, &c);
        if ((float)s != (float)sin((double)xf) || (float)c != (float)cos((double)xf))
            fail_msg("dk_sincos(%.9g) rounded to float is not the correctly rounded value", (double)xf);
    }
    double s, c;
    dk_sincos(-0.0, &s, &c);
    assert_true(s == 0.0 && signbit(s) && c == 1.0);
    const double odd[] = {NAN, INFINITY, -INFINITY, 1e15, -1e300};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        dk_sincos(odd[i], &s, &c);
        assert_true(isnan(s) && isnan(c));
    }
    dk_sincos(1e14, &s, &c); /* past the exact reduction: digits lost, but still a sine and cosine */
    assert_true(fabs(s) <= 1.0 + 1e-12 && fabs(c) <= 1.0 + 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_sine_for_every_backend),
        cmocka_unit_test_setup_teardown(cost_model_order, reset, reset),
        cmocka_unit_test_setup_teardown(sparse_order_everywhere, reset, reset),
        cmocka_unit_test_setup_teardown(dense_order_everywhere, reset, reset),
        cmocka_unit_test_setup_teardown(counted_tap_tables, reset, reset),
        cmocka_unit_test_setup_teardown(three_threads_and_large_output_paths_on_small_calls, reset, reset),
        cmocka_unit_test_setup_teardown(results_do_not_depend_on_the_thread_count, reset, reset),
        cmocka_unit_test_setup_teardown(staged_writes_of_a_fresh_large_output, reset, reset),
        cmocka_unit_test_setup_teardown(staged_writes_with_an_odd_stage, reset, reset),
        cmocka_unit_test_setup_teardown(empty_input_without_memory, reset, reset),
        cmocka_unit_test_setup_teardown(tunables_are_named_and_bounded, reset, reset),
        cmocka_unit_test_setup_teardown(rotated_against_the_reference, reset, reset),
        cmocka_unit_test_setup_teardown(rotated_large_bins_and_threads, reset, reset),
        cmocka_unit_test_setup_teardown(rotated_lanes_runs_and_isas, reset, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
