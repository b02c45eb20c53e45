/*
 * test_gpu_focal_loss.c — the focal losses' GPU kernels against their CPU kernels (whose results
 * are the references', test_kernel_focal_loss.c): forward values, the reduced sums (the GPU adds
 * in the CPU's order, Note [A deterministic sum]) and the gradients, for every float dtype, both
 * kinds of targets, weights, both reductions, any strides, NaN logits and targets outside
 * [0, C). Built twice (gpu/dk_gpu_test.h): emulated on the host in `make test-c`, bit for bit;
 * on a real GPU in `make test-gpu`, where what goes through the device's libm (double, pow,
 * the softmax's exp and log) is compared within a tolerance and float's own polynomials exactly.
 */
#include <math.h>
#include <string.h>

#include "focal_loss.h"
#include "gpu/dk_gpu_test.h"

#ifdef DKT_GPU_EMULATED
#include "focal_loss/focal_loss_gpu.h"
#define GPU_SIG_FORWARD dk_sigmoid_focal_loss_forward_gpu
#define GPU_SIG_BACKWARD dk_sigmoid_focal_loss_backward_gpu
#define GPU_SOFT_FORWARD dk_softmax_focal_loss_forward_gpu
#define GPU_SOFT_BACKWARD dk_softmax_focal_loss_backward_gpu
#else
#define GPU_SIG_FORWARD dk_sigmoid_focal_loss_forward
#define GPU_SIG_BACKWARD dk_sigmoid_focal_loss_backward
#define GPU_SOFT_FORWARD dk_softmax_focal_loss_forward
#define GPU_SOFT_BACKWARD dk_softmax_focal_loss_backward
#endif

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};

/* A result's GPU and CPU values: emulated, the same bits (any NaN for a NaN: a NaN's sign and
 * payload are not promised, dkk_assert_same_values); on a GPU exactly so where only +, -, *, /
 * and dkit's float polynomials were used (float storage, gamma 2), else within a tolerance
 * (the Note in gpu/dk_gpu_test.h). */
static void same(const dkk_tensor *gpu, const dkk_tensor *cpu, bool exact, dk_dtype dt, const char *what)
{
#ifdef DKT_GPU_EMULATED
    (void)exact, (void)dt;
    dkk_assert_same_values(gpu, cpu, what);
#else
    dkg_assert_same_values(gpu, cpu, exact ? 0 : dt == DK_FLOAT64 ? 1e-12 : 1e-5, what);
#endif
}

/* A tensor shaped as t, filled with a pattern the kernel must overwrite. */
static dkk_tensor *scratch_like(const dkk_tensor *t)
{
    dkk_tensor *k = dkk_new(dk_tensor_dtype(&t->t), t->t.ndim, t->shape, NULL, 1);
    memset(k->mem, 0x7f, k->bytes); /* every element must be written */
    return k;
}

static void check_sigmoid(dk_dtype dt, bool classes, bool weighted, int reduction, double gamma, bool transposed,
                          dkk_rng *r)
{
    char what[160];
    snprintf(what, sizeof what, "sigmoid %s classes %d weight %d reduction %d gamma %g", dk_dtype_name(dt), classes,
             weighted, reduction, gamma);
    const int64_t N = 1500, C = 7; /* three chunks of the sum */
    const int *order = transposed ? (const int[]){1, 0} : NULL;
    dkk_tensor *x = dkk_new(dt, 2, (int64_t[]){N, C}, order, 1);
    dkk_fill_uniform(x, r, -9, 9);
    /* a NaN logit where each element stands alone; a reduced loss with one would be NaN, and
     * then its sum's bits (Note [A deterministic sum]) would go untested */
    if (reduction != DK_FOCAL_SUM) dkk_set(x, (int64_t[]){3, 2}, NAN);
    dkk_tensor *t = classes ? dkk_new(DK_INT64, 1, &N, NULL, 1) : dkk_new(dt, 2, (int64_t[]){N, C}, NULL, 0);
    if (classes)
        for (int64_t n = 0; n < N; n++) dkk_set(t, (int64_t[]){n}, (double)((int64_t)(dkk_u64(r) % (C + 3)) - 1));
    else dkk_fill_uniform(t, r, 0, 1);
    dkk_tensor *w = weighted ? dkk_new(dt, 1, &C, NULL, 0) : NULL;
    if (w) dkk_fill_uniform(w, r, 0, 2);
    const double divisor = reduction == DK_FOCAL_SUM ? 3.0 : 1.0;
    const bool exact = dt != DK_FLOAT64 && gamma == 2;
    dkk_tensor *out = reduction == DK_FOCAL_SUM ? dkk_new(dt, 0, NULL, NULL, 0)
                                                : dkk_new(dt, 2, (int64_t[]){N, C}, NULL, 0);
    assert_ok(dk_sigmoid_focal_loss_forward(&x->t, &t->t, w ? &w->t : NULL, &out->t, NULL, gamma, 0.25, 0.75, reduction,
                                            divisor));
    dkk_tensor *gout = scratch_like(out);
    dkg_tensor dx, dt_, dw, dout;
    dkg_up(&dx, x), dkg_up(&dt_, t), dkg_up(&dout, gout);
    if (w) dkg_up(&dw, w);
    assert_ok(
        GPU_SIG_FORWARD(&dx.dev, &dt_.dev, w ? &dw.dev : NULL, &dout.dev, NULL, gamma, 0.25, 0.75, reduction, divisor));
    dkg_down(&dout);
    same(gout, out, exact, dt, what);
    if (reduction == DK_FOCAL_SUM) { /* Note [The backward in the forward] in ops/focal_loss.h */
        dkk_tensor *fused = dkk_new(dt, 2, (int64_t[]){N, C}, NULL, 0),
                   *gfused = dkk_new(dt, 2, (int64_t[]){N, C}, order, 1);
        memset(gfused->mem, 0x7f, gfused->bytes);
        assert_ok(dk_sigmoid_focal_loss_forward(&x->t, &t->t, w ? &w->t : NULL, &out->t, &fused->t, gamma, 0.25, 0.75,
                                                reduction, divisor));
        dkg_tensor dfused;
        dkg_up(&dfused, gfused);
        assert_ok(GPU_SIG_FORWARD(&dx.dev, &dt_.dev, w ? &dw.dev : NULL, &dout.dev, &dfused.dev, gamma, 0.25, 0.75,
                                  reduction, divisor));
        dkg_down(&dout), dkg_down(&dfused);
        same(gout, out, exact, dt, what);
        same(gfused, fused, exact, dt, what);
        dkg_release(&dfused);
        dkk_free(fused), dkk_free(gfused);
    }
    /* backward, twice: the same bits every run */
    dkk_tensor *go = reduction == DK_FOCAL_SUM ? dkk_new(dt, 0, NULL, NULL, 0)
                                               : dkk_new(dt, 2, (int64_t[]){N, C}, NULL, 2);
    dkk_fill_uniform(go, r, -1, 1);
    dkk_tensor *gi = dkk_new(dt, 2, (int64_t[]){N, C}, NULL, 0),
               *gt = classes ? NULL : dkk_new(dt, 2, (int64_t[]){N, C}, NULL, 0);
    assert_ok(dk_sigmoid_focal_loss_backward(&go->t, &x->t, &t->t, w ? &w->t : NULL, &gi->t, gt ? &gt->t : NULL, gamma,
                                             0.25, 0.75, reduction, divisor));
    dkg_tensor dgo;
    dkg_up(&dgo, go);
    for (int run = 0; run < 2; run++) {
        dkk_tensor *ggi = dkk_new(dt, 2, (int64_t[]){N, C}, order, 3), *ggt = gt ? scratch_like(gt) : NULL;
        memset(ggi->mem, 0x7f, ggi->bytes);
        dkg_tensor dgi, dgt;
        dkg_up(&dgi, ggi);
        if (ggt) dkg_up(&dgt, ggt);
        assert_ok(GPU_SIG_BACKWARD(&dgo.dev, &dx.dev, &dt_.dev, w ? &dw.dev : NULL, &dgi.dev, ggt ? &dgt.dev : NULL,
                                   gamma, 0.25, 0.75, reduction, divisor));
        dkg_down(&dgi);
        same(ggi, gi, exact, dt, what);
        if (ggt) {
            dkg_down(&dgt);
            same(ggt, gt, exact, dt, what);
            dkg_release(&dgt);
        }
        dkg_release(&dgi);
        dkk_free(ggi), dkk_free(ggt);
    }
    dkg_release(&dx), dkg_release(&dt_), dkg_release(&dout), dkg_release(&dgo);
    if (w) dkg_release(&dw);
    dkk_free(x), dkk_free(t), dkk_free(w), dkk_free(out), dkk_free(gout), dkk_free(go), dkk_free(gi), dkk_free(gt);
}

/* C: 21 (Note [A row in lanes]: two groups of 8 and 5), or wider than the CPU's block of columns
 * (300: Note [The softmax's backward], whose CPU backward then takes the exps again). */
static void check_softmax(dk_dtype dt, bool weighted, int reduction, bool transposed, int64_t C, dkk_rng *r)
{
    char what[160];
    snprintf(what, sizeof what, "softmax %s weight %d reduction %d C %lld", dk_dtype_name(dt), weighted, reduction,
             (long long)C);
    const int64_t N = 200; /* four chunks of rows */
    const int *order = transposed ? (const int[]){1, 0} : NULL;
    dkk_tensor *x = dkk_new(dt, 2, (int64_t[]){N, C}, order, 0);
    dkk_fill_uniform(x, r, -6, 6);
    dkk_tensor *t = dkk_new(DK_INT64, 1, &N, NULL, 0);
    for (int64_t n = 0; n < N; n++) dkk_set(t, (int64_t[]){n}, (double)((int64_t)(dkk_u64(r) % (C + 1)) - 1));
    dkk_tensor *w = weighted ? dkk_new(dt, 1, &C, NULL, 1) : NULL;
    if (w) dkk_fill_uniform(w, r, 0, 2);
    const double divisor = reduction == DK_FOCAL_SUM ? (double)N : 1.0;
    dkk_tensor *out = reduction == DK_FOCAL_SUM ? dkk_new(dt, 0, NULL, NULL, 0) : dkk_new(dt, 1, &N, NULL, 0);
    assert_ok(dk_softmax_focal_loss_forward(&x->t, &t->t, w ? &w->t : NULL, &out->t, 2, 0.25, reduction, divisor));
    dkk_tensor *gout = scratch_like(out);
    dkg_tensor dx, dt_, dw, dout;
    dkg_up(&dx, x), dkg_up(&dt_, t), dkg_up(&dout, gout);
    if (w) dkg_up(&dw, w);
    assert_ok(GPU_SOFT_FORWARD(&dx.dev, &dt_.dev, w ? &dw.dev : NULL, &dout.dev, 2, 0.25, reduction, divisor));
    dkg_down(&dout);
    same(gout, out, false, dt, what);
    dkk_tensor *go = reduction == DK_FOCAL_SUM ? dkk_new(dt, 0, NULL, NULL, 0) : dkk_new(dt, 1, &N, NULL, 1);
    dkk_fill_uniform(go, r, -1, 1);
    dkk_tensor *gi = dkk_new(dt, 2, (int64_t[]){N, C}, NULL, 0), *ggi = dkk_new(dt, 2, (int64_t[]){N, C}, order, 2);
    memset(ggi->mem, 0x7f, ggi->bytes);
    assert_ok(
        dk_softmax_focal_loss_backward(&go->t, &x->t, &t->t, w ? &w->t : NULL, &gi->t, 2, 0.25, reduction, divisor));
    dkg_tensor dgo, dgi;
    dkg_up(&dgo, go), dkg_up(&dgi, ggi);
    assert_ok(
        GPU_SOFT_BACKWARD(&dgo.dev, &dx.dev, &dt_.dev, w ? &dw.dev : NULL, &dgi.dev, 2, 0.25, reduction, divisor));
    dkg_down(&dgi);
    same(ggi, gi, false, dt, what);
    dkg_release(&dx), dkg_release(&dt_), dkg_release(&dout), dkg_release(&dgo), dkg_release(&dgi);
    if (w) dkg_release(&dw);
    dkk_free(x), dkk_free(t), dkk_free(w), dkk_free(out), dkk_free(gout), dkk_free(go), dkk_free(gi), dkk_free(ggi);
}

static void gpu_matches_cpu(void **state)
{
    (void)state;
    dkk_rng r = {0xF0C9};
    for (size_t d = 0; d < sizeof DTYPES / sizeof *DTYPES; d++)
        for (int red = 0; red < 2; red++) {
            check_sigmoid(DTYPES[d], false, false, red, 2.0, red == 1, &r);
            check_sigmoid(DTYPES[d], true, red == 0, red, 2.0, red == 0, &r);
            check_sigmoid(DTYPES[d], true, true, red, 1.5, false, &r);
            check_sigmoid(DTYPES[d], false, false, red, 0.0, false, &r);
            check_softmax(DTYPES[d], red == 1, red, red == 0, 21, &r);
            check_softmax(DTYPES[d], red == 0, red, false, 21, &r);
            check_softmax(DTYPES[d], red == 1, red, red == 1, 300, &r);
        }
}

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {cmocka_unit_test(gpu_matches_cpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
