/*
 * test_gpu_roi_pool.c — roi_pool's GPU kernels against its CPU kernels (whose results are the
 * references', test_kernel_roi_pool.c): forward values and argmax bit for bit; the deterministic
 * backward's sums bit for bit (it adds in the CPU's order, Note [RoIPool on a GPU]), the atomic
 * backward's within its rounding (assert_sum_close), for every float dtype, both geometries, any
 * strides; ps_roi_pool and ps_roi_align likewise (their deterministic backwards gather what the
 * CPU scatters), boxes inside, across and wholly outside the map, reversed (empty) boxes, no
 * RoIs, NaN and infinite pixels, and backwards run twice. Built twice (gpu/dk_gpu_test.h):
 * emulated on the host in `make test-c` (`make test-gpu-emu`: warps of 32 and 64), on a real GPU
 * in `make test-gpu`.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "dk_determinism.h"
#include "dk_tunables.h"
#include "gpu/dk_gpu_test.h"
#include "roi_pool.h"

#ifdef DKT_GPU_EMULATED
#include "roi_pool/roi_pool_gpu.h"
#define GPU_FORWARD dk_roi_pool_forward_gpu
#define GPU_BACKWARD dk_roi_pool_backward_gpu
#define GPU_PS_FORWARD dk_ps_roi_pool_forward_gpu
#define GPU_PS_BACKWARD dk_ps_roi_pool_backward_gpu
#define GPU_PSA_FORWARD dk_ps_roi_align_forward_gpu
#define GPU_PSA_BACKWARD dk_ps_roi_align_backward_gpu
#else
#define GPU_FORWARD dk_roi_pool_forward
#define GPU_BACKWARD dk_roi_pool_backward
#define GPU_PS_FORWARD dk_ps_roi_pool_forward
#define GPU_PS_BACKWARD dk_ps_roi_pool_backward
#define GPU_PSA_FORWARD dk_ps_roi_align_forward
#define GPU_PSA_BACKWARD dk_ps_roi_align_backward
#endif

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};

/* Either way of asking for the deterministic backwards (Note [Deterministic kernels] in
 * dk_determinism.h): the tunable (process-wide), or the calling thread's request, in turn. */
static void set_deterministic(int on)
{
    static int turn;
    if (!on) {
        assert_ok(dk_tunable_set("roi_pool.gpu_deterministic", 0, NULL));
        dk_set_deterministic(false);
    } else if (turn++ % 2) {
        assert_ok(dk_tunable_set("roi_pool.gpu_deterministic", 1, NULL));
    } else {
        dk_set_deterministic(true);
    }
}

/* The storage type's spacing at 1, and its smallest subnormal (float16's is large enough to
 * matter: a tap's share of a small gradient can be that small). */
static double eps_of(dk_dtype dt)
{
    return dt == DK_FLOAT64 ? DBL_EPSILON : dt == DK_FLOAT32 ? FLT_EPSILON : dt == DK_FLOAT16 ? 0x1p-10 : 0x1p-7;
}
static double tiny_of(dk_dtype dt) { return dt == DK_FLOAT16 ? 0x1p-24 : dt == DK_BFLOAT16 ? 0x1p-133 : 0; }

/*
 * The atomic backward against the CPU's: the same terms (the same per-element math), added in
 * another order, and for 16-bit storage in a float accumulator rounded once where the CPU rounds
 * each addition to the storage type. Each sum of n terms is then within n eps sum|terms| of the
 * exact one, both ways: |actual - expected| <= 2 (n + 1) (eps |mag| + tiny), mag the CPU's sum
 * of the terms' magnitudes (its backward of |grad_output|), n the element's count of terms
 * (`count`, when given) or a bound on it for every element (`n`).
 */
static void assert_sum_close(const dkk_tensor *actual, const dkk_tensor *expected, const dkk_tensor *mag,
                             const dkk_tensor *count, double n, dk_dtype dt, const char *what)
{
    if (dk_tensor_numel(&actual->t) == 0) return;
    const double eps = eps_of(dt), tiny = tiny_of(dt);
    int64_t idx[8] = {0};
    do {
        const double a = dkk_get(actual, idx), e = dkk_get(expected, idx), m = fabs(dkk_get(mag, idx));
        const double terms = count ? dkk_get(count, idx) : n;
        const double tol = 2 * (terms + 1) * (eps * m + tiny);
        if (!(fabs(a - e) <= tol))
            fail_msg("%s: element [%lld, %lld, %lld, %lld] is %.9g, expected %.9g (tolerance %g)", what,
                     (long long)idx[0], (long long)idx[1], (long long)idx[2], (long long)idx[3], a, e, tol);
    } while (dkk_next(actual, idx));
}

/* |t|, elementwise, into a new tensor like t. */
static dkk_tensor *abs_of(const dkk_tensor *t, dk_dtype dt)
{
    dkk_tensor *m = dkk_new(dt, t->t.ndim, t->shape, NULL, 0);
    int64_t idx[8] = {0};
    if (dk_tensor_numel(&t->t) > 0) do
            dkk_set(m, idx, fabs(dkk_get(t, idx)));
        while (dkk_next(t, idx));
    return m;
}

/* K RoIs over N images of a map `span` wide in box coordinates: inside, across the edges, wholly
 * outside (every fifth, past the far edge), and reversed. */
static dkk_tensor *make_rois(dk_dtype dt, int64_t K, int64_t N, double span, dkk_rng *r)
{
    dkk_tensor *rois = dkk_new(dt, 2, (int64_t[]){K, 5}, NULL, 0);
    for (int64_t k = 0; k < K; k++) {
        const double x1 = dkk_uniform(r, -0.3 * span, span), y1 = dkk_uniform(r, -0.3 * span, span);
        double v[5] = {(double)(k % N), x1, y1, x1 + dkk_uniform(r, -2, span), y1 + dkk_uniform(r, -2, span)};
        if (k % 5 == 4) v[1] += 2 * span, v[3] += 2 * span; /* wholly outside */
        for (int j = 0; j < 5; j++) dkk_set(rois, (int64_t[]){k, j}, v[j]);
    }
    return rois;
}

/* The forward with an argmax of type adt on the CPU (into *arg) and on the GPU (*garg, through
 * *darg, kept for the backward): the same values as `out` and the same indices. */
static void check_narrow_argmax(dk_dtype adt, const dkk_tensor *x, const dkk_tensor *rois, dkk_tensor *out,
                                dkk_tensor *gout, dkg_tensor *dx, dkg_tensor *dr, int64_t PH, int64_t PW, double scale,
                                int geometry, const char *what, dkk_tensor **arg, dkk_tensor **garg, dkg_tensor *darg)
{
    *arg = dkk_new(adt, 4, out->t.shape, NULL, 0), *garg = dkk_new(adt, 4, out->t.shape, NULL, 0);
    assert_ok(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &(*arg)->t, PH, PW, scale, geometry));
    dkg_up(darg, *garg);
    memset(gout->mem, 0x7f, gout->bytes);
    dkg_tensor dout;
    dkg_up(&dout, gout);
    assert_ok(GPU_FORWARD(&dx->dev, &dr->dev, &dout.dev, &darg->dev, PH, PW, scale, geometry));
    dkg_down(&dout), dkg_down(darg);
    dkk_assert_identical(gout, out, what);
    dkk_assert_identical(*garg, *arg, what);
    dkg_release(&dout);
}

static void check_case(dk_dtype dt, int geometry, double scale, int64_t PH, int64_t PW, bool nhwc, int64_t K,
                       dkk_rng *r)
{
    char what[160];
    snprintf(what, sizeof what, "roi_pool %s geometry %d scale %g %lldx%lld K %lld", dk_dtype_name(dt), geometry, scale,
             (long long)PH, (long long)PW, (long long)K);
    const int64_t N = 2, C = 5, H = 13, W = 11;
    const int *order = nhwc ? (const int[]){0, 2, 3, 1} : NULL;
    dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, order, 1);
    dkk_fill_uniform(x, r, -3, 3);
    dkk_set(x, (int64_t[]){0, 2, 4, 4}, NAN);
    dkk_set(x, (int64_t[]){1, 1, 6, 2}, INFINITY);
    dkk_tensor *rois = make_rois(dt, K, N, (double)W / scale, r);
    const int64_t shape[4] = {K, C, PH, PW};
    dkk_tensor *out = dkk_new(dt, 4, shape, NULL, 0), *arg = dkk_new(DK_INT64, 4, shape, NULL, 0);
    dkk_tensor *gout = dkk_new(dt, 4, shape, NULL, 2), *garg = dkk_new(DK_INT64, 4, shape, (int[]){1, 0, 2, 3}, 0);
    memset(gout->mem, 0x7f, gout->bytes); /* every element must be written */
    assert_ok(dk_roi_pool_forward(&x->t, &rois->t, &out->t, &arg->t, PH, PW, scale, geometry));
    dkg_tensor dx, dr, dout, darg;
    dkg_up(&dx, x), dkg_up(&dr, rois), dkg_up(&dout, gout), dkg_up(&darg, garg);
    assert_ok(GPU_FORWARD(&dx.dev, &dr.dev, &dout.dev, &darg.dev, PH, PW, scale, geometry));
    dkg_down(&dout), dkg_down(&darg);
    dkk_assert_identical(gout, out, what);
    dkk_assert_identical(garg, arg, what);
    /* an int32 argmax (torchvision's), an int16 one (Note [A narrow argmax] in roi_pool_cpu.h: the
     * 13 x 11 maps here allow it), and none (inference): the same values and indices */
    dkk_tensor *arg32, *garg32, *arg16, *garg16;
    dkg_tensor darg32, darg16;
    check_narrow_argmax(DK_INT32, x, rois, out, gout, &dx, &dr, PH, PW, scale, geometry, what, &arg32, &garg32,
                        &darg32);
    check_narrow_argmax(DK_INT16, x, rois, out, gout, &dx, &dr, PH, PW, scale, geometry, what, &arg16, &garg16,
                        &darg16);
    dkg_release(&dout);
    memset(gout->mem, 0x7f, gout->bytes);
    dkg_up(&dout, gout);
    assert_ok(GPU_FORWARD(&dx.dev, &dr.dev, &dout.dev, NULL, PH, PW, scale, geometry));
    dkg_down(&dout);
    dkk_assert_identical(gout, out, what);
    /* Note [RoIPool on a GPU]: the RoI-major order and 64-bit index decoding, in either
     * combination, give the same values and indices */
    for (int v = 0; v < 2; v++) {
        assert_ok(dk_tunable_set("roi_pool.gpu_order", v, NULL));
        assert_ok(dk_tunable_set("roi_pool.gpu_wide_index", !v, NULL));
        dkg_release(&dout);
        memset(gout->mem, 0x7f, gout->bytes);
        dkg_up(&dout, gout);
        assert_ok(GPU_FORWARD(&dx.dev, &dr.dev, &dout.dev, &darg32.dev, PH, PW, scale, geometry));
        dkg_down(&dout), dkg_down(&darg32);
        char sub[200];
        snprintf(sub, sizeof sub, "%s, forward (order %d, %d-bit indices)", what, v, v ? 32 : 64);
        dkk_assert_identical(gout, out, sub);
        dkk_assert_identical(garg32, arg32, sub);
    }
    assert_ok(dk_tunable_set("roi_pool.gpu_order", 1, NULL)); /* the defaults */
    assert_ok(dk_tunable_set("roi_pool.gpu_wide_index", 0, NULL));
    /* backward, from the same argmax */
    dkk_tensor *g = dkk_new(dt, 4, shape, NULL, 0);
    dkk_fill_uniform(g, r, -1, 1);
    dkk_tensor *gi = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 0);
    assert_ok(dk_roi_pool_backward(&g->t, &rois->t, &arg->t, &gi->t));
    dkg_tensor dg;
    dkg_up(&dg, g);
    /* the atomic backward's tolerance: each element's count of terms (the CPU's backward of ones,
     * exact integers), and the sum of their magnitudes */
    dkk_tensor *ones = dkk_new(dt, 4, shape, NULL, 0), *gabs = abs_of(g, dt);
    dkk_tensor *cnt = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 0);
    dkk_tensor *mag = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 0);
    if (K > 0) dkk_fill_uniform(ones, r, 1, 1);
    assert_ok(dk_roi_pool_backward(&ones->t, &rois->t, &arg->t, &cnt->t));
    assert_ok(dk_roi_pool_backward(&gabs->t, &rois->t, &arg->t, &mag->t));
    for (int run = 0; run < 6; run++) { /* deterministic three times, then atomic; every width */
        dkk_tensor *ggi = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, order, 3);
        memset(ggi->mem, 0x7f, ggi->bytes);
        dkg_tensor dgi;
        dkg_up(&dgi, ggi);
        set_deterministic(run < 3);
        const dk_tensor *da = run % 3 == 0 ? &darg.dev : run % 3 == 1 ? &darg32.dev : &darg16.dev;
        assert_ok(GPU_BACKWARD(&dg.dev, &dr.dev, da, &dgi.dev));
        set_deterministic(0);
        dkg_down(&dgi);
        char sub[200];
        snprintf(sub, sizeof sub, "%s, backward (%s)", what, run < 3 ? "deterministic" : "atomic");
        if (run < 3) dkk_assert_identical(ggi, gi, sub);
        else assert_sum_close(ggi, gi, mag, cnt, 0, dt, sub);
        dkg_release(&dgi);
        dkk_free(ggi);
    }
    dkk_free(ones), dkk_free(gabs), dkk_free(cnt), dkk_free(mag);
    dkg_release(&dx), dkg_release(&dr), dkg_release(&dout), dkg_release(&darg), dkg_release(&dg);
    dkg_release(&darg32), dkg_release(&darg16);
    dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(arg), dkk_free(gout), dkk_free(garg), dkk_free(g);
    dkk_free(arg32), dkk_free(garg32), dkk_free(arg16), dkk_free(garg16);
    dkk_free(gi);
}

/* ps_roi_pool, or ps_roi_align with sampling_ratio sr when `align`: forward values and the
 * backward's gathered sums against the CPU's. */
static void check_ps_case(dk_dtype dt, double scale, int64_t PH, int64_t PW, bool nhwc, int64_t K, dkk_rng *r,
                          bool align, int64_t sr)
{
    char what[160];
    snprintf(what, sizeof what, "%s %s scale %g %lldx%lld K %lld sr %lld", align ? "ps_roi_align" : "ps_roi_pool",
             dk_dtype_name(dt), scale, (long long)PH, (long long)PW, (long long)K, (long long)sr);
    const int64_t N = 2, CO = 3, C = CO * PH * PW, H = 12, W = 10;
    const int *order = nhwc ? (const int[]){0, 2, 3, 1} : NULL;
    dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, order, 1);
    dkk_fill_uniform(x, r, -3, 3);
    dkk_tensor *rois = make_rois(dt, K, N, (double)W / scale, r);
    const int64_t shape[4] = {K, CO, PH, PW};
    dkk_tensor *out = dkk_new(dt, 4, shape, NULL, 0), *gout = dkk_new(dt, 4, shape, NULL, 2);
    memset(gout->mem, 0x7f, gout->bytes);
    assert_ok(align ? dk_ps_roi_align_forward(&x->t, &rois->t, &out->t, scale, sr)
                    : dk_ps_roi_pool_forward(&x->t, &rois->t, &out->t, scale));
    dkg_tensor dx, dr, dout;
    dkg_up(&dx, x), dkg_up(&dr, rois), dkg_up(&dout, gout);
    assert_ok(align ? GPU_PSA_FORWARD(&dx.dev, &dr.dev, &dout.dev, scale, sr)
                    : GPU_PS_FORWARD(&dx.dev, &dr.dev, &dout.dev, scale));
    dkg_down(&dout);
    dkk_assert_identical(gout, out, what);
    dkk_tensor *g = dkk_new(dt, 4, shape, NULL, 0);
    dkk_fill_uniform(g, r, -1, 1);
    dkk_tensor *gi = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 0);
    assert_ok(align ? dk_ps_roi_align_backward(&g->t, &rois->t, &gi->t, scale, sr)
                    : dk_ps_roi_pool_backward(&g->t, &rois->t, &gi->t, scale));
    /* the atomic backward's tolerance: the sum of the terms' magnitudes, and a bound on their
     * count: a RoI adds one term to a pixel (ps_roi_pool), or at most four per sample of its bin
     * (ps_roi_align: G x G samples, G the fixed or the largest adaptive grid) */
    dkk_tensor *gabs = abs_of(g, dt), *mag = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, NULL, 0);
    assert_ok(align ? dk_ps_roi_align_backward(&gabs->t, &rois->t, &mag->t, scale, sr)
                    : dk_ps_roi_pool_backward(&gabs->t, &rois->t, &mag->t, scale));
    double G = sr > 0 ? (double)sr : 1;
    for (int64_t k = 0; align && sr <= 0 && k < K; k++) {
        const double eh = fabs(dkk_get(rois, (int64_t[]){k, 4}) - dkk_get(rois, (int64_t[]){k, 2})) * scale;
        const double ew = fabs(dkk_get(rois, (int64_t[]){k, 3}) - dkk_get(rois, (int64_t[]){k, 1})) * scale;
        G = fmax(G, fmax(ceil(eh / (double)PH), ceil(ew / (double)PW)) + 1);
    }
    const double n = (double)K * (align ? 4 * G * G : 1);
    dkg_tensor dg;
    dkg_up(&dg, g);
    /* deterministic with the chosen tiles, then tiles of a pixel, tiles that do not divide the
     * map, one tile (the lists' tiling must not change a bit); then atomic twice */
    static const int64_t TILES[] = {0, 1, 5, 64, 0, 0};
    for (int run = 0; run < 6; run++) {
        dkk_tensor *ggi = dkk_new(dt, 4, (int64_t[]){N, C, H, W}, order, 3);
        memset(ggi->mem, 0x7f, ggi->bytes);
        dkg_tensor dgi;
        dkg_up(&dgi, ggi);
        assert_ok(dk_tunable_set("roi_pool.gpu_det_tile", TILES[run], NULL));
        set_deterministic(run < 4);
        assert_ok(align ? GPU_PSA_BACKWARD(&dg.dev, &dr.dev, &dgi.dev, scale, sr)
                        : GPU_PS_BACKWARD(&dg.dev, &dr.dev, &dgi.dev, scale));
        set_deterministic(0);
        dkg_down(&dgi);
        char sub[200];
        snprintf(sub, sizeof sub, "%s, backward (%s, tile %lld)", what, run < 4 ? "deterministic" : "atomic",
                 (long long)TILES[run]);
        if (run < 4) dkk_assert_identical(ggi, gi, sub);
        else assert_sum_close(ggi, gi, mag, NULL, n, dt, sub);
        dkg_release(&dgi);
        dkk_free(ggi);
    }
    dkg_release(&dx), dkg_release(&dr), dkg_release(&dout), dkg_release(&dg);
    dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(gout), dkk_free(g), dkk_free(gi), dkk_free(gabs);
    dkk_free(mag);
}

static void ps_roi_pool_gpu_matches_cpu(void **state)
{
    (void)state;
    dkk_rng r = {0x9103};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++) {
        check_ps_case(DTYPES[d], 1.0, 2, 2, false, 7, &r, false, 0);
        check_ps_case(DTYPES[d], 0.5, 3, 3, true, 13, &r, false, 0);
        check_ps_case(DTYPES[d], 0.7, 1, 2, false, 0, &r, false, 0);
    }
}

/* ps_roi_align: adaptive and explicit grids (1 keeps samples apart, 5 puts several in a pixel),
 * boxes reversed and across the edges (make_rois), both layouts. */
static void ps_roi_align_gpu_matches_cpu(void **state)
{
    (void)state;
    dkk_rng r = {0x9104};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++) {
        check_ps_case(DTYPES[d], 1.0, 2, 2, false, 7, &r, true, -1);
        check_ps_case(DTYPES[d], 0.5, 3, 3, true, 13, &r, true, 0);
        check_ps_case(DTYPES[d], 0.7, 1, 2, false, 9, &r, true, 5);
        check_ps_case(DTYPES[d], 2.0, 3, 2, true, 11, &r, true, 1);
        check_ps_case(DTYPES[d], 0.7, 2, 1, false, 0, &r, true, 2);
    }
}

static void gpu_matches_cpu(void **state)
{
    (void)state;
    dkk_rng r = {0x9101};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++)
        for (int geo = 0; geo < 2; geo++) {
            check_case(DTYPES[d], geo, 1.0, 2, 2, false, 9, &r);
            check_case(DTYPES[d], geo, 0.5, 7, 7, true, 17, &r);
            check_case(DTYPES[d], geo, 0.3, 3, 1, false, 0, &r);
        }
}

/* More bins than one grid-stride pass covers (DK_GPU_MAX_BLOCKS x 256): every thread loops. */
static void beyond_one_grid(void **state)
{
    (void)state;
    dkk_rng r = {0x9102};
    check_case(DK_FLOAT32, 0, 0.5, 64, 64, false, 130, &r);
}

#ifdef DKT_GPU_EMULATED
/* A batch index outside [0, N) (which the ops' checks refuse where the host can read the RoIs) is
 * an absent RoI on a GPU: no gradient, in either backward mode, for the three ops. */
static void a_bad_batch_index_adds_no_gradient(void **state)
{
    (void)state;
    dkk_rng r = {0x9105};
    const int64_t N = 2, PH = 2, PW = 2, C = 2 * PH * PW, H = 6, W = 7, K = 2, shape[4] = {K, C, PH, PW};
    const int64_t ps_shape[4] = {K, C / (PH * PW), PH, PW}, img[4] = {N, C, H, W};
    dkk_tensor *rois = dkk_new(DK_FLOAT32, 2, (int64_t[]){K, 5}, NULL, 0);
    const double boxes[2][5] = {{5, 0, 0, 6, 5}, {-1, 1, 1, 5, 4}}; /* >= N, < 0 */
    for (int64_t k = 0; k < K; k++)
        for (int j = 0; j < 5; j++) dkk_set(rois, (int64_t[]){k, j}, boxes[k][j]);
    dkk_tensor *g = dkk_new(DK_FLOAT32, 4, shape, NULL, 0), *gps = dkk_new(DK_FLOAT32, 4, ps_shape, NULL, 0);
    dkk_tensor *arg = dkk_new(DK_INT64, 4, shape, NULL, 0), *zero = dkk_new(DK_FLOAT64, 4, img, NULL, 0);
    dkk_fill_uniform(g, &r, 1, 2), dkk_fill_uniform(gps, &r, 1, 2), dkk_fill_uniform(arg, &r, 0, 5);
    dkk_tensor *gi = dkk_new(DK_FLOAT32, 4, img, NULL, 0);
    for (int det = 0; det < 2; det++)
        for (int op = 0; op < 3; op++) {
            dkk_fill_uniform(gi, &r, 1, 2); /* must become all zeros */
            set_deterministic(det);
            if (op == 0) assert_ok(dk_roi_pool_backward_gpu(&g->t, &rois->t, &arg->t, &gi->t));
            if (op == 1) assert_ok(dk_ps_roi_pool_backward_gpu(&gps->t, &rois->t, &gi->t, 1.0));
            if (op == 2) assert_ok(dk_ps_roi_align_backward_gpu(&gps->t, &rois->t, &gi->t, 1.0, 2));
            set_deterministic(0);
            dkk_assert_close(gi, zero, 0, 0, op == 0 ? "roi_pool" : op == 1 ? "ps_roi_pool" : "ps_roi_align");
        }
    dkk_free(rois), dkk_free(g), dkk_free(gps), dkk_free(arg), dkk_free(zero), dkk_free(gi);
}
#endif

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_matches_cpu),
        cmocka_unit_test(beyond_one_grid),
        cmocka_unit_test(ps_roi_pool_gpu_matches_cpu),
        cmocka_unit_test(ps_roi_align_gpu_matches_cpu),
#ifdef DKT_GPU_EMULATED
        cmocka_unit_test(a_bad_batch_index_adds_no_gradient),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
