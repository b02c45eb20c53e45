/*
 * test_gpu_roi_align.c — roi_align's GPU kernels against its CPU kernel, for every dtype, three
 * layouts, fixed and adaptive sampling, aligned or not, avg and max pooling, forward and both
 * backward modes (atomic; deterministic, whose bits must not change between runs). Built twice
 * (gpu/dk_gpu_test.h): emulated on the host in `make test-c`, on a real GPU in `make test-gpu`.
 */
#include "dk_tunables.h"
#include "gpu/dk_gpu_test.h"
#include "roi_align.h"

#ifdef DKT_GPU_EMULATED
#include "roi_align/roi_align_gpu.h" /* csrc/gpu: the entry points, called directly on host tensors */
#include "roi_align/roi_align_rotated_gpu.h"
#define GPU_FORWARD dk_roi_align_forward_gpu
#define GPU_BACKWARD dk_roi_align_backward_gpu
#define GPU_ROTATED_FORWARD dk_roi_align_rotated_forward_gpu
#define GPU_ROTATED_BACKWARD dk_roi_align_rotated_backward_gpu
#else
#define GPU_FORWARD dk_roi_align_forward /* through the dispatcher, to the loaded backend */
#define GPU_BACKWARD dk_roi_align_backward
#define GPU_ROTATED_FORWARD dk_roi_align_rotated_forward
#define GPU_ROTATED_BACKWARD dk_roi_align_rotated_backward
#endif

enum { N = 2, C = 10, H = 11, W = 13, K = 13, PH = 3, PW = 4 }; /* C: a chunk of 8 channels and a part */
static const double SCALE = 0.5;

typedef struct {
    dk_dtype dt;
    double atol;
} dtype_case;
/* Both kernels evaluate the shared math in the same compute type; they differ in the order of
 * their sums (the CPU's separable tables, the GPU's per-sample loop and atomics). */
static const dtype_case DTYPES[] = {
    {DK_FLOAT32, 1e-5},
    {DK_FLOAT64, 1e-12},
    {DK_FLOAT16, 2e-3},
    {DK_BFLOAT16, 1.6e-2},
};
static const int NCHW[4] = {0, 1, 2, 3}, NHWC[4] = {0, 2, 3, 1};

/* The RoIs of these tests (dkk_roi_boxes): some past the borders, a few degenerate. */
static dkk_tensor *make_rois(dk_dtype dt, dkk_rng *r, int64_t k) { return dkk_roi_boxes(dt, r, k, N, H, W, SCALE); }

static dk_dtype argmax_dtype(dk_dtype dt) { return dt == DK_FLOAT64 ? DK_FLOAT64 : DK_FLOAT32; }
static dkk_tensor *like4(dk_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d, const int *order, int64_t gap)
{
    return dkk_new(dt, 4, (int64_t[]){a, b, c, d}, order, gap);
}

/* Either way of asking for the deterministic backward (Note [Deterministic kernels] in
 * dk_determinism.h): the tunable (process-wide), or the calling thread's request, taken in turn. */
static void set_deterministic(int on)
{
    static int turn;
    if (!on) {
        assert_ok(dk_tunable_set("roi_align.gpu_deterministic", 0, NULL));
        dk_set_deterministic(false);
    } else if (turn++ % 2) {
        assert_ok(dk_tunable_set("roi_align.gpu_deterministic", 1, NULL));
    } else {
        dk_set_deterministic(true);
    }
}

/* GPU backward in one mode into a fresh tensor shaped like `like` (filled with garbage first:
 * backward must overwrite every element). */
static dkk_tensor *gpu_backward(dkg_tensor *g, dkg_tensor *rois, dkg_tensor *amy, dkg_tensor *amx,
                                const dkk_tensor *like, const int *order, int64_t gap, int64_t sr, int mode,
                                bool aligned, int deterministic)
{
    dkk_tensor *gin = like4(dk_tensor_dtype(&like->t), N, C, H, W, order, gap);
    memset(gin->mem, 0x7f, gin->bytes);
    dkg_tensor dgin;
    dkg_up(&dgin, gin);
    set_deterministic(deterministic);
    assert_ok(GPU_BACKWARD(&g->dev, &rois->dev, amy ? &amy->dev : NULL, amx ? &amx->dev : NULL, &dgin.dev, PH, PW,
                           SCALE, sr, mode, aligned));
    set_deterministic(0);
    dkg_down(&dgin);
    dkg_release(&dgin);
    return gin;
}

static void check_case(dk_dtype dt, double atol, dkk_rng *rng, int layout, int64_t sr, bool aligned, int mode)
{
    char what[256];
    snprintf(what, sizeof what, "%s, layout %d, sampling_ratio %lld, aligned %d, %s", dk_dtype_name(dt), layout,
             (long long)sr, aligned, mode == DK_POOL_MAX ? "max" : "avg");
    const int *order = layout == 1 ? NHWC : NCHW;
    const int64_t gap = layout == 2 ? 3 : 0;
    const bool max = mode == DK_POOL_MAX;
    dkk_tensor *rois = make_rois(dt, rng, K);
    dkk_tensor *x = like4(dt, N, C, H, W, order, gap), *g = like4(dt, K, C, PH, PW, order, gap);
    dkk_fill_uniform(x, rng, -1, 1);
    dkk_fill_uniform(g, rng, -1, 1);
    dkk_tensor *out = like4(dt, K, C, PH, PW, order, gap), *gout = like4(dt, K, C, PH, PW, order, gap);
    dkk_tensor *amy = max ? like4(argmax_dtype(dt), K, C, PH, PW, order, gap) : NULL;
    dkk_tensor *amx = max ? like4(argmax_dtype(dt), K, C, PH, PW, order, gap) : NULL;
    dkk_tensor *gamy = max ? like4(argmax_dtype(dt), K, C, PH, PW, order, gap) : NULL;
    dkk_tensor *gamx = max ? like4(argmax_dtype(dt), K, C, PH, PW, order, gap) : NULL;
    dkk_tensor *cgin = like4(dt, N, C, H, W, order, gap);

    /* the CPU kernel, through the dispatcher */
    assert_ok(dk_roi_align_forward(&x->t, &rois->t, &out->t, max ? &amy->t : NULL, max ? &amx->t : NULL, PH, PW, SCALE,
                                   sr, mode, aligned));
    assert_ok(dk_roi_align_backward(&g->t, &rois->t, max ? &amy->t : NULL, max ? &amx->t : NULL, &cgin->t, PH, PW,
                                    SCALE, sr, mode, aligned));

    /* the GPU kernels */
    dkg_tensor dx, drois, dg, dout, damy, damx;
    dkg_up(&dx, x), dkg_up(&drois, rois), dkg_up(&dg, g), dkg_up(&dout, gout);
    if (max) dkg_up(&damy, gamy), dkg_up(&damx, gamx);
    assert_ok(GPU_FORWARD(&dx.dev, &drois.dev, &dout.dev, max ? &damy.dev : NULL, max ? &damx.dev : NULL, PH, PW, SCALE,
                          sr, mode, aligned));
    dkg_down(&dout);
    if (max) {
        dkg_down(&damy), dkg_down(&damx);
        dkk_assert_close(gout, out, 0, 0, what); /* the same samples, compared in the same order */
        dkk_assert_close(gamy, amy, 0, 0, what);
        dkk_assert_close(gamx, amx, 0, 0, what);
    } else {
        dkk_assert_close(gout, out, atol, atol, what);
    }
    /* backward from the CPU's argmax (equal to the GPU's, checked above) */
    dkg_tensor *pamy = max ? &damy : NULL, *pamx = max ? &damx : NULL;
    dkk_tensor *atomic = gpu_backward(&dg, &drois, pamy, pamx, cgin, order, gap, sr, mode, aligned, 0);
    dkk_tensor *det1 = gpu_backward(&dg, &drois, pamy, pamx, cgin, order, gap, sr, mode, aligned, 1);
    dkk_tensor *det2 = gpu_backward(&dg, &drois, pamy, pamx, cgin, order, gap, sr, mode, aligned, 1);
    char sub[400];
    snprintf(sub, sizeof sub, "%s, backward (atomic)", what);
    dkk_assert_close(atomic, cgin, 4 * atol, 4 * atol, sub);
    assert_ok(dk_tunable_set("roi_align.gpu_backward_order", 0, NULL)); /* RoI-major atomics */
    dkk_tensor *atomic_rm = gpu_backward(&dg, &drois, pamy, pamx, cgin, order, gap, sr, mode, aligned, 0);
    assert_ok(dk_tunable_set("roi_align.gpu_backward_order", 1, NULL));
    snprintf(sub, sizeof sub, "%s, backward (atomic, RoI-major)", what);
    dkk_assert_close(atomic_rm, cgin, 4 * atol, 4 * atol, sub);
    dkk_free(atomic_rm);
    snprintf(sub, sizeof sub, "%s, backward (deterministic)", what);
    dkk_assert_close(det1, cgin, 4 * atol, 4 * atol, sub);
    dkk_assert_identical(det1, det2, sub);
    /* Note [Deterministic backward on a GPU]: tilings (a tile per pixel, tiles that do not divide
     * the image, one tile) and the plain visit of every sample give the same bits */
    static const int64_t TILES[] = {1, 4, 5, 64};
    for (size_t ti = 0; ti < DK_COUNTOF(TILES); ti++)
        for (int window = 0; window < 2; window++) {
            assert_ok(dk_tunable_set("roi_align.gpu_det_tile", TILES[ti], NULL));
            assert_ok(dk_tunable_set("roi_align.gpu_det_window", window, NULL));
            dkk_tensor *det = gpu_backward(&dg, &drois, pamy, pamx, cgin, order, gap, sr, mode, aligned, 1);
            snprintf(sub, sizeof sub, "%s, backward (deterministic, tile %lld, window %d)", what, (long long)TILES[ti],
                     window);
            dkk_assert_identical(det, det1, sub);
            dkk_free(det);
        }
    assert_ok(dk_tunable_set("roi_align.gpu_det_tile", 0, NULL));
    assert_ok(dk_tunable_set("roi_align.gpu_det_window", 1, NULL));
    /* Note [The GPU order of roi_align's bins]: RoI-major gives the forward's bits too */
    dkk_tensor *again = like4(dt, K, C, PH, PW, order, gap);
    memcpy(again->mem, gout->mem, gout->bytes); /* before: the emulation writes gout itself */
    for (int wide = 0; wide < 2; wide++) {      /* and 64-bit index decoding, either order */
        assert_ok(dk_tunable_set("roi_align.gpu_order", wide, NULL));
        assert_ok(dk_tunable_set("roi_align.gpu_wide_index", !wide, NULL));
        assert_ok(GPU_FORWARD(&dx.dev, &drois.dev, &dout.dev, max ? &damy.dev : NULL, max ? &damx.dev : NULL, PH, PW,
                              SCALE, sr, mode, aligned));
        dkg_down(&dout);
        snprintf(sub, sizeof sub, "%s, forward (%s order, %d-bit indices)", what, wide ? "channel-major" : "RoI-major",
                 wide ? 64 : 32);
        dkk_assert_identical(gout, again, sub);
    }
    assert_ok(dk_tunable_set("roi_align.gpu_order", -1, NULL)); /* the default */
    assert_ok(dk_tunable_set("roi_align.gpu_wide_index", 0, NULL));
    dkk_free(again);

    dkg_release(&dx), dkg_release(&drois), dkg_release(&dg), dkg_release(&dout);
    if (max) dkg_release(&damy), dkg_release(&damx);
    dkk_free(atomic), dkk_free(det1), dkk_free(det2);
    dkk_free(rois), dkk_free(x), dkk_free(g), dkk_free(out), dkk_free(gout), dkk_free(cgin);
    dkk_free(amy), dkk_free(amx), dkk_free(gamy), dkk_free(gamx);
}

static void gpu_matches_cpu(void **state)
{
    (void)state;
    dkk_rng rng = {0x6a0};
    for (size_t di = 0; di < DK_COUNTOF(DTYPES); di++)
        for (int layout = 0; layout < 3; layout++)
            for (int64_t sr = 0; sr <= 2; sr += 2)
                for (int aligned = 0; aligned < 2; aligned++)
                    for (int mode = 0; mode < 2; mode++)
                        check_case(DTYPES[di].dt, DTYPES[di].atol, &rng, layout, sr, aligned, mode);
}

#ifdef DKT_GPU_EMULATED
/* Note [RoIs the GPU cannot check]: a batch index outside [0, N) (which the op's check refuses
 * where the host can read the RoIs) is an absent RoI on a GPU: zeros, no gradient. */
static void a_bad_batch_index_is_an_absent_roi(void **state)
{
    (void)state;
    dkk_rng rng = {3};
    dkk_tensor *rois = make_rois(DK_FLOAT32, &rng, 2);
    dkk_set(rois, (int64_t[]){0, 0}, 5.0);  /* >= N */
    dkk_set(rois, (int64_t[]){1, 0}, -1.0); /* < 0 */
    dkk_tensor *x = like4(DK_FLOAT32, N, C, H, W, NULL, 0), *out = like4(DK_FLOAT32, 2, C, PH, PW, NULL, 0);
    dkk_fill_uniform(x, &rng, 1, 2);
    dkk_fill_uniform(out, &rng, 1, 2);
    assert_ok(dk_roi_align_forward_gpu(&x->t, &rois->t, &out->t, NULL, NULL, PH, PW, SCALE, 2, DK_POOL_AVG, true));
    dkk_tensor *zero = like4(DK_FLOAT64, 2, C, PH, PW, NULL, 0);
    dkk_assert_close(out, zero, 0, 0, "absent RoIs pool to 0");
    for (int det = 0; det < 2; det++) {
        set_deterministic(det);
        dkk_fill_uniform(x, &rng, 1, 2); /* as grad_input: must become all zeros */
        assert_ok(dk_roi_align_backward_gpu(&out->t, &rois->t, NULL, NULL, &x->t, PH, PW, SCALE, 2, DK_POOL_AVG, true));
        dkk_tensor *z = like4(DK_FLOAT64, N, C, H, W, NULL, 0);
        dkk_assert_close(x, z, 0, 0, "absent RoIs add no gradient");
        dkk_free(z);
    }
    set_deterministic(0);
    dkk_free(rois), dkk_free(x), dkk_free(out), dkk_free(zero);
}
#endif

/* roi_align_rotated: the GPU's forward and its gathered backward against the CPU kernel, bit for
 * bit (Note [Deterministic rotated backward on a GPU]), for every dtype, both layouts, fixed and
 * adaptive sampling, aligned or not, either direction of the angle, RoIs inside, across and
 * outside the map, smaller than a pixel and of negative width, and the backward run twice. */
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
        if (i % 5 == 3) v[3] = 0.3, v[4] = 0.4; /* smaller than a pixel */
        if (i % 5 == 4) v[3] = -3;              /* negative width: no samples when aligned */
        if (i % 7 == 6) v[1] += 3 * iw;         /* outside */
        for (int j = 0; j < 6; j++) dkk_set(t, (int64_t[]){i, j}, v[j]);
    }
    return t;
}

static void check_rotated(dk_dtype dt, const int *order, int64_t sampling_ratio, bool aligned, bool clockwise,
                          dkk_rng *r)
{
    char what[160];
    snprintf(what, sizeof what, "roi_align_rotated %s sr %lld aligned %d clockwise %d", dk_dtype_name(dt),
             (long long)sampling_ratio, aligned, clockwise);
    const int64_t shape[4] = {K, C, PH, PW}, img[4] = {N, C, H, W};
    dkk_tensor *x = dkk_new(dt, 4, img, order, 1);
    dkk_fill_uniform(x, r, -2, 2);
    dkk_tensor *rois = make_rotated_rois(dt, r, K);
    dkk_tensor *out = dkk_new(dt, 4, shape, NULL, 0), *gout = dkk_new(dt, 4, shape, order, 2);
    memset(gout->mem, 0x7f, gout->bytes); /* every element must be written */
    assert_ok(
        dk_roi_align_rotated_forward(&x->t, &rois->t, &out->t, PH, PW, SCALE, sampling_ratio, aligned, clockwise));
    dkg_tensor dx, dr, dout;
    dkg_up(&dx, x), dkg_up(&dr, rois), dkg_up(&dout, gout);
    assert_ok(GPU_ROTATED_FORWARD(&dx.dev, &dr.dev, &dout.dev, PH, PW, SCALE, sampling_ratio, aligned, clockwise));
    dkg_down(&dout);
    dkk_assert_identical(gout, out, what);
    dkk_tensor *g = dkk_new(dt, 4, shape, NULL, 0);
    dkk_fill_uniform(g, r, -1, 1);
    dkk_tensor *gi = dkk_new(dt, 4, img, NULL, 0);
    assert_ok(dk_roi_align_rotated_backward(&g->t, &rois->t, &gi->t, SCALE, sampling_ratio, aligned, clockwise));
    dkg_tensor dg;
    dkg_up(&dg, g);
    for (int run = 0; run < 2; run++) {
        dkk_tensor *ggi = dkk_new(dt, 4, img, order, 3);
        memset(ggi->mem, 0x7f, ggi->bytes);
        dkg_tensor dgi;
        dkg_up(&dgi, ggi);
        assert_ok(GPU_ROTATED_BACKWARD(&dg.dev, &dr.dev, &dgi.dev, SCALE, sampling_ratio, aligned, clockwise));
        dkg_down(&dgi);
        dkk_assert_identical(ggi, gi, what);
        dkg_release(&dgi);
        dkk_free(ggi);
    }
    dkg_release(&dx), dkg_release(&dr), dkg_release(&dout), dkg_release(&dg);
    dkk_free(x), dkk_free(rois), dkk_free(out), dkk_free(gout), dkk_free(g), dkk_free(gi);
}

static void rotated_gpu_matches_cpu(void **state)
{
    (void)state;
    dkk_rng r = {0x7a11};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++)
        for (int a = 0; a < 2; a++) {
            check_rotated(DTYPES[d].dt, NCHW, 0, a, a == 0, &r);
            check_rotated(DTYPES[d].dt, NHWC, 2, a, a == 1, &r);
        }
}

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_matches_cpu),
        cmocka_unit_test(rotated_gpu_matches_cpu),
#ifdef DKT_GPU_EMULATED
        cmocka_unit_test(a_bad_batch_index_is_an_absent_roi),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
