/*
 * test_kernel_focal_loss.c — the CPU focal losses (ops/focal_loss.h) against references written
 * here from the two libraries' definitions, in double: torchvision's composite (sigmoid, binary
 * cross-entropy with logits, p_t, alpha_t) with its gradients by central differences in long
 * double, MMCV's kernels (its term_p / term_n, its softmax loss and buff) for class-index targets
 * and the softmax; every float dtype, any strides, weights, both reductions, gamma 2 and others;
 * MMCV's published vectors; the sum's bits for any thread count; and the refusals.
 */
#include <float.h>
#include <math.h>

#include "dk_kernel_test.h"
#include "dk_tunables.h"
#include "dk_parallel.h"
#include "focal_loss.h"

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};

/* ---- references ---------------------------------------------------------------------------- */

/* torchvision's sigmoid_focal_loss of one element, in long double, as its composite reads:
 * p = sigmoid(x), ce = BCE with logits, p_t = p t + (1 - p)(1 - t), loss = alpha_t ce (1 - p_t)^g
 * with alpha_t = ap t + an (1 - t). */
static long double ref_sigmoid(long double x, long double t, double g, double ap, double an)
{
    const long double p = 1.0L / (1.0L + expl(-x));
    const long double ce = fmaxl(x, 0) - x * t + log1pl(expl(-fabsl(x)));
    const long double pt = p * t + (1 - p) * (1 - t);
    return (ap * t + an * (1 - t)) * ce * powl(1 - pt, g);
}

/* MMCV's derivative for a class-index target (its backward kernel's term_p and term_n). */
static double ref_mmcv_sigmoid_grad(double x, bool positive, double g, double alpha)
{
    const double p = 1 / (1 + exp(-x));
    if (positive) return -alpha * pow(1 - p, g) * (1 - p - g * p * log(fmax(p, FLT_MIN)));
    return -(1 - alpha) * pow(p, g) * (g * (1 - p) * log(fmax(1 - p, FLT_MIN)) - p);
}

/* MMCV's softmax focal loss of row n (from its Python softmax and forward kernel) and, through
 * grad, d loss / d x[c] (its two backward kernels), unweighted. */
static double ref_softmax_row(const double *x, int64_t C, int64_t l, double g, double alpha, double *grad)
{
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < C; c++) mx = fmax(mx, x[c]);
    for (int64_t c = 0; c < C; c++) sum += exp(x[c] - mx);
    const double pred = exp(x[l] - mx) / sum;
    const double buff = alpha * (-pow(1 - pred, g) + g * pow(1 - pred, g - 1) * pred * log(fmax(pred, FLT_MIN)));
    for (int64_t c = 0; c < C; c++) grad[c] = buff * ((c == l ? 1 : 0) - exp(x[c] - mx) / sum);
    return -alpha * pow(1 - pred, g) * log(fmax(pred, FLT_MIN));
}

/* Tolerances of a kernel's result in dtype dt against a double reference (16-bit: the kernel
 * computes in float and rounds once). */
static void tolerances(dk_dtype dt, double *atol, double *rtol)
{
    switch (dt) {
    case DK_FLOAT64: *atol = 1e-13, *rtol = 1e-11; break;
    case DK_FLOAT32: *atol = 1e-6, *rtol = 2e-5; break;
    case DK_FLOAT16: *atol = 1e-4, *rtol = 1.5e-3; break;
    default: *atol = 1e-3, *rtol = 1e-2; break;
    }
}

/* ---- sigmoid ------------------------------------------------------------------------------- */

typedef struct {
    dk_dtype dt;
    bool classes, weighted, transposed;
    int reduction;
    double gamma, alpha;
} sig_case;

static void check_sigmoid(sig_case k, dkk_rng *r)
{
    char what[200];
    snprintf(what, sizeof what, "sigmoid %s classes %d weight %d transposed %d reduction %d gamma %g alpha %g",
             dk_dtype_name(k.dt), k.classes, k.weighted, k.transposed, k.reduction, k.gamma, k.alpha);
    const int64_t N = 37, C = 9;
    const int *order = k.transposed ? (const int[]){1, 0} : NULL;
    dkk_tensor *x = dkk_new(k.dt, 2, (int64_t[]){N, C}, order, 1);
    dkk_fill_uniform(x, r, -6, 6);
    dkk_tensor *t = k.classes ? dkk_new(DK_INT64, 1, (int64_t[]){N}, NULL, 2)
                              : dkk_new(k.dt, 2, (int64_t[]){N, C}, order, 0);
    dkk_tensor *w = k.weighted ? dkk_new(k.dt, 1, (int64_t[]){C}, NULL, 1) : NULL;
    if (w) dkk_fill_uniform(w, r, 0.1, 2);
    for (int64_t n = 0; n < N; n++) {
        if (k.classes) dkk_set(t, (int64_t[]){n}, n % 5 == 4 ? C : n % 7 == 3 ? -1 : (int64_t)dkk_uniform(r, 0, C));
        else
            for (int64_t c = 0; c < C; c++) /* hard and soft labels */
                dkk_set(t, (int64_t[]){n, c}, (n + c) % 3 ? (double)(dkk_u64(r) % 2) : dkk_uniform(r, 0, 1));
    }
    /* torchvision's alpha rule for probabilities, MMCV's for classes */
    const double ap = k.classes || k.alpha >= 0 ? k.alpha : 1, an = k.classes || k.alpha >= 0 ? 1 - k.alpha : 1;
    const double divisor = k.reduction == DK_FOCAL_SUM ? (k.classes ? (double)N : (double)(N * C)) : 1;
    /* the reference loss, its gradients (seed grad_output g), and their sums */
    dkk_tensor *ref = dkk_new(DK_FLOAT64, 2, (int64_t[]){N, C}, NULL, 0);
    dkk_tensor *rgx = dkk_new(DK_FLOAT64, 2, (int64_t[]){N, C}, NULL, 0),
               *rgt = dkk_new(DK_FLOAT64, 2, (int64_t[]){N, C}, NULL, 0);
    dkk_tensor *go = k.reduction == DK_FOCAL_SUM ? dkk_new(k.dt, 0, NULL, NULL, 0)
                                                 : dkk_new(k.dt, 2, (int64_t[]){N, C}, NULL, 3);
    if (k.reduction == DK_FOCAL_SUM) dkk_set(go, NULL, 0.75);
    else dkk_fill_uniform(go, r, -1, 1);
    long double sum = 0;
    for (int64_t n = 0; n < N; n++) {
        const int64_t l = k.classes ? (int64_t)dkk_get(t, (int64_t[]){n}) : -1;
        const double wv = w && l >= 0 && l < C ? dkk_get(w, (int64_t[]){l}) : 1;
        for (int64_t c = 0; c < C; c++) {
            const int64_t i[2] = {n, c};
            const long double xv = dkk_get(x, i), tv = k.classes ? (l == c) : dkk_get(t, i);
            const long double v = wv * ref_sigmoid(xv, tv, k.gamma, ap, an);
            dkk_set(ref, i, (double)v);
            sum += v;
            const double gr = k.reduction == DK_FOCAL_SUM ? dkk_get(go, NULL) / divisor : dkk_get(go, i);
            const long double h = 1e-6L;
            double dx;
            if (k.classes && k.gamma == 2) dx = wv * ref_mmcv_sigmoid_grad((double)xv, l == c, k.gamma, k.alpha);
            else
                dx = (double)(wv *
                              (ref_sigmoid(xv + h, tv, k.gamma, ap, an) - ref_sigmoid(xv - h, tv, k.gamma, ap, an)) /
                              (2 * h));
            const double dt = (double)((ref_sigmoid(xv, tv + h, k.gamma, ap, an) -
                                        ref_sigmoid(xv, tv - h, k.gamma, ap, an)) /
                                       (2 * h));
            dkk_set(rgx, i, dx * gr);
            dkk_set(rgt, i, dt * gr);
        }
    }
    double atol, rtol;
    tolerances(k.dt, &atol, &rtol);
    /* forward */
    dkk_tensor *out = k.reduction == DK_FOCAL_SUM ? dkk_new(k.dt, 0, NULL, NULL, 0)
                                                  : dkk_new(k.dt, 2, (int64_t[]){N, C}, NULL, 2);
    assert_ok(dk_sigmoid_focal_loss_forward(&x->t, &t->t, w ? &w->t : NULL, &out->t, NULL, k.gamma, ap, an, k.reduction,
                                            divisor));
    if (k.reduction == DK_FOCAL_SUM) {
        const double got = dkk_get(out, NULL), want = (double)(sum / divisor);
        if (!(fabs(got - want) <= atol + rtol * fabs(want))) fail_msg("%s: sum %.9g, expected %.9g", what, got, want);
    } else {
        dkk_assert_close(out, ref, atol, rtol, what);
    }
    /* backward: a gradient from central differences is good to about 1e-9 */
    dkk_tensor *gi = dkk_new(k.dt, 2, (int64_t[]){N, C}, order, 2);
    dkk_tensor *gt = k.classes ? NULL : dkk_new(k.dt, 2, (int64_t[]){N, C}, NULL, 0);
    memset(gi->mem, 0x7f, gi->bytes); /* every element must be written */
    assert_ok(dk_sigmoid_focal_loss_backward(&go->t, &x->t, &t->t, w ? &w->t : NULL, &gi->t, gt ? &gt->t : NULL,
                                             k.gamma, ap, an, k.reduction, divisor));
    const double gatol = k.dt == DK_FLOAT64 ? 1e-8 : atol;
    dkk_assert_close(gi, rgx, gatol, rtol, what);
    if (gt) dkk_assert_close(gt, rgt, gatol, rtol, what);
    if (k.reduction == DK_FOCAL_SUM) {
        /* Note [The backward in the forward]: the same sum, and the backward's bits for grad_output 1 */
        dkk_tensor *fused = dkk_new(k.dt, 2, (int64_t[]){N, C}, order, 1), *out2 = dkk_new(k.dt, 0, NULL, NULL, 0);
        dkk_tensor *one = dkk_new(k.dt, 0, NULL, NULL, 0), *gi1 = dkk_new(k.dt, 2, (int64_t[]){N, C}, NULL, 0);
        dkk_set(one, NULL, 1);
        memset(fused->mem, 0x7f, fused->bytes);
        assert_ok(dk_sigmoid_focal_loss_forward(&x->t, &t->t, w ? &w->t : NULL, &out2->t, &fused->t, k.gamma, ap, an,
                                                k.reduction, divisor));
        dkk_assert_identical(out2, out, what);
        assert_ok(dk_sigmoid_focal_loss_backward(&one->t, &x->t, &t->t, w ? &w->t : NULL, &gi1->t, NULL, k.gamma, ap,
                                                 an, k.reduction, divisor));
        dkk_assert_same_values(fused, gi1, what);
        dkk_free(fused), dkk_free(out2), dkk_free(one), dkk_free(gi1);
    }
    /* the loops as the library is built (focal_loss.isa 0) give the AVX2 ones' bits: the forward
     * (with its fused gradient where reduced) and the backward */
    dkk_tensor *out0 = dkk_new(k.dt, out->t.ndim, out->t.shape, NULL, 0);
    dkk_tensor *gi0 = dkk_new(k.dt, 2, (int64_t[]){N, C}, order, 2);
    dkk_tensor *gt0 = k.classes ? NULL : dkk_new(k.dt, 2, (int64_t[]){N, C}, NULL, 0);
    dkk_tensor *fz[2] = {NULL, NULL};
    for (int isa = 0; isa < 2; isa++) {
        assert_ok(dk_tunable_set("focal_loss.isa", isa, NULL));
        if (k.reduction == DK_FOCAL_SUM) fz[isa] = dkk_new(k.dt, 2, (int64_t[]){N, C}, order, 1);
        assert_ok(dk_sigmoid_focal_loss_forward(&x->t, &t->t, w ? &w->t : NULL, isa ? &out->t : &out0->t,
                                                fz[isa] ? &fz[isa]->t : NULL, k.gamma, ap, an, k.reduction, divisor));
        assert_ok(dk_sigmoid_focal_loss_backward(&go->t, &x->t, &t->t, w ? &w->t : NULL, isa ? &gi->t : &gi0->t,
                                                 gt ? (isa ? &gt->t : &gt0->t) : NULL, k.gamma, ap, an, k.reduction,
                                                 divisor));
    }
    dkk_assert_identical(out0, out, what);
    dkk_assert_identical(gi0, gi, what);
    if (gt) dkk_assert_identical(gt0, gt, what);
    if (fz[0]) dkk_assert_identical(fz[0], fz[1], what);
    dkk_free(out0), dkk_free(gi0), dkk_free(gt0), dkk_free(fz[0]), dkk_free(fz[1]);
    dkk_free(x), dkk_free(t), dkk_free(w), dkk_free(ref), dkk_free(rgx), dkk_free(rgt), dkk_free(go), dkk_free(out);
    dkk_free(gi), dkk_free(gt);
}

static void sigmoid_every_dtype(void **state)
{
    (void)state;
    dkk_rng r = {0xF0C1};
    for (size_t d = 0; d < sizeof DTYPES / sizeof *DTYPES; d++)
        for (int classes = 0; classes < 2; classes++)
            for (int weighted = 0; weighted <= classes; weighted++)
                for (int red = 0; red < 2; red++) {
                    const double gammas[] = {2, 1.5, 0, 3}, alphas[] = {0.25, -1, 0.5, 0.8};
                    for (int i = 0; i < 4; i++)
                        check_sigmoid(
                            (sig_case){DTYPES[d], classes, weighted, (i + red) % 2 == 1, red, gammas[i], alphas[i]},
                            &r);
                }
}

/* ---- softmax ------------------------------------------------------------------------------- */

static void check_softmax(dk_dtype dt, bool weighted, bool transposed, int reduction, double gamma, double alpha,
                          dkk_rng *r)
{
    char what[200];
    snprintf(what, sizeof what, "softmax %s weight %d transposed %d reduction %d gamma %g", dk_dtype_name(dt), weighted,
             transposed, reduction, gamma);
    const int64_t N = 29, C = 19; /* two whole groups of Note [A row in lanes]'s 8 lanes and 3 more */
    const int *order = transposed ? (const int[]){1, 0} : NULL;
    dkk_tensor *x = dkk_new(dt, 2, (int64_t[]){N, C}, order, 1);
    dkk_fill_uniform(x, r, -4, 4);
    dkk_tensor *t = dkk_new(DK_INT64, 1, (int64_t[]){N}, NULL, 1);
    for (int64_t n = 0; n < N; n++) dkk_set(t, (int64_t[]){n}, n % 6 == 5 ? -1 : (double)(dkk_u64(r) % C));
    dkk_tensor *w = weighted ? dkk_new(dt, 1, (int64_t[]){C}, NULL, 0) : NULL;
    if (w) dkk_fill_uniform(w, r, 0.1, 2);
    const double divisor = reduction == DK_FOCAL_SUM ? (double)N : 1;
    dkk_tensor *go = reduction == DK_FOCAL_SUM ? dkk_new(dt, 0, NULL, NULL, 0)
                                               : dkk_new(dt, 1, (int64_t[]){N}, NULL, 1);
    if (reduction == DK_FOCAL_SUM) dkk_set(go, NULL, -1.25);
    else dkk_fill_uniform(go, r, -1, 1);
    dkk_tensor *ref = dkk_new(DK_FLOAT64, 1, (int64_t[]){N}, NULL, 0),
               *rg = dkk_new(DK_FLOAT64, 2, (int64_t[]){N, C}, NULL, 0);
    double sum = 0;
    for (int64_t n = 0; n < N; n++) {
        double row[19], grad[19] = {0};
        const int64_t l = (int64_t)dkk_get(t, (int64_t[]){n});
        for (int64_t c = 0; c < C; c++) row[c] = dkk_get(x, (int64_t[]){n, c});
        double v = 0;
        if (l >= 0) {
            const double wv = w ? dkk_get(w, (int64_t[]){l}) : 1;
            v = wv * ref_softmax_row(row, C, l, gamma, alpha, grad);
            for (int64_t c = 0; c < C; c++) grad[c] *= wv;
        }
        dkk_set(ref, (int64_t[]){n}, v);
        sum += v;
        const double gr = reduction == DK_FOCAL_SUM ? dkk_get(go, NULL) / divisor : dkk_get(go, (int64_t[]){n});
        for (int64_t c = 0; c < C; c++) dkk_set(rg, (int64_t[]){n, c}, grad[c] * gr);
    }
    double atol, rtol;
    tolerances(dt, &atol, &rtol);
    dkk_tensor *out = reduction == DK_FOCAL_SUM ? dkk_new(dt, 0, NULL, NULL, 0)
                                                : dkk_new(dt, 1, (int64_t[]){N}, NULL, 2);
    assert_ok(dk_softmax_focal_loss_forward(&x->t, &t->t, w ? &w->t : NULL, &out->t, gamma, alpha, reduction, divisor));
    if (reduction == DK_FOCAL_SUM) {
        const double got = dkk_get(out, NULL), want = sum / divisor;
        if (!(fabs(got - want) <= atol + rtol * fabs(want))) fail_msg("%s: sum %.9g, expected %.9g", what, got, want);
    } else {
        dkk_assert_close(out, ref, atol, rtol, what);
    }
    dkk_tensor *gi = dkk_new(dt, 2, (int64_t[]){N, C}, order, 0);
    memset(gi->mem, 0x7f, gi->bytes);
    assert_ok(dk_softmax_focal_loss_backward(&go->t, &x->t, &t->t, w ? &w->t : NULL, &gi->t, gamma, alpha, reduction,
                                             divisor));
    dkk_assert_close(gi, rg, atol, rtol, what);
    /* the loops as the library is built (focal_loss.isa 0) give the AVX2 ones' bits */
    dkk_tensor *out0 = dkk_new(dt, out->t.ndim, out->t.shape, NULL, 0),
               *gi0 = dkk_new(dt, 2, (int64_t[]){N, C}, order, 0);
    assert_ok(dk_tunable_set("focal_loss.isa", 0, NULL));
    assert_ok(
        dk_softmax_focal_loss_forward(&x->t, &t->t, w ? &w->t : NULL, &out0->t, gamma, alpha, reduction, divisor));
    assert_ok(dk_softmax_focal_loss_backward(&go->t, &x->t, &t->t, w ? &w->t : NULL, &gi0->t, gamma, alpha, reduction,
                                             divisor));
    assert_ok(dk_tunable_set("focal_loss.isa", 1, NULL));
    dkk_assert_identical(out0, out, what);
    dkk_assert_identical(gi0, gi, what);
    dkk_free(x), dkk_free(t), dkk_free(w), dkk_free(go), dkk_free(ref), dkk_free(rg), dkk_free(out), dkk_free(gi);
    dkk_free(out0), dkk_free(gi0);
}

static void softmax_every_dtype(void **state)
{
    (void)state;
    dkk_rng r = {0xF0C2};
    for (size_t d = 0; d < sizeof DTYPES / sizeof *DTYPES; d++)
        for (int red = 0; red < 2; red++)
            for (int weighted = 0; weighted < 2; weighted++) {
                check_softmax(DTYPES[d], weighted, red == weighted, red, 2.0, 0.25, &r);
                check_softmax(DTYPES[d], weighted, red != weighted, red, 1.5, 0.5, &r);
            }
}

/* ---- MMCV's published vectors (tests/test_ops/test_focal_loss.py): gamma 2, alpha 0.25, mean ---- */

static void mmcv_published_vectors(void **state)
{
    (void)state;
    static const double X[3][9] = {
        {1, 0, 0, 1}, {1, 0, -1, 0, 1, 2}, {1e-6, 2e-6, 3e-6, 4e-6, 5e-5, 6e-4, 7e-3, 8e-2, 9e-1}};
    static const int64_t Y[3][3] = {{0, 1}, {2, 1}, {1, 2, 0}};
    static const int64_t NC[3][2] = {{2, 2}, {2, 3}, {3, 3}};
    static const double SIG[3] = {0.13562961, 1.10251057, 0.42287254}, SOFT[3] = {0.00566451, 0.34956908, 0.15754992};
    static const double SIG_G[3][9] = {{-0.00657264, 0.11185755, 0.11185755, -0.00657264},
                                       {0.28808805, 0.11185755, -0.09602935, 0.11185755, -0.00657264, 0.40376765},
                                       {0.07457182, -0.02485716, 0.07457201, 0.07457211, 0.07457669, -0.02483728,
                                        -0.02462499, 0.08277918, 0.18050370}};
    static const double SOFT_G[3][9] = {{-0.00657264, 0.00657264, 0.00657264, -0.00657264},
                                        {0.10165970, 0.03739851, -0.13905823, 0.01227554, -0.10298023, 0.09070466},
                                        {0.02590877, -0.05181759, 0.02590882, 0.02589641, 0.02589760, -0.05179400,
                                         -0.07307514, 0.02234372, 0.05073142}};
    for (int k = 0; k < 3; k++) {
        const int64_t N = NC[k][0], C = NC[k][1];
        dkk_tensor *x = dkk_new(DK_FLOAT32, 2, (int64_t[]){N, C}, NULL, 0), *t = dkk_new(DK_INT64, 1, &N, NULL, 0);
        dkk_tensor *sig_g = dkk_new(DK_FLOAT64, 2, (int64_t[]){N, C}, NULL, 0),
                   *soft_g = dkk_new(DK_FLOAT64, 2, (int64_t[]){N, C}, NULL, 0);
        for (int64_t n = 0; n < N; n++) {
            dkk_set(t, (int64_t[]){n}, (double)Y[k][n]);
            for (int64_t c = 0; c < C; c++) {
                dkk_set(x, (int64_t[]){n, c}, X[k][n * C + c]);
                dkk_set(sig_g, (int64_t[]){n, c}, SIG_G[k][n * C + c]);
                dkk_set(soft_g, (int64_t[]){n, c}, SOFT_G[k][n * C + c]);
            }
        }
        dkk_tensor *out = dkk_new(DK_FLOAT32, 0, NULL, NULL, 0), *one = dkk_new(DK_FLOAT32, 0, NULL, NULL, 0);
        dkk_set(one, NULL, 1);
        dkk_tensor *gi = dkk_new(DK_FLOAT32, 2, (int64_t[]){N, C}, NULL, 0);
        /* published to 8 digits, from MMCV's float32 CUDA kernels */
        assert_ok(
            dk_sigmoid_focal_loss_forward(&x->t, &t->t, NULL, &out->t, NULL, 2, 0.25, 0.75, DK_FOCAL_SUM, (double)N));
        assert_true(fabs(dkk_get(out, NULL) - SIG[k]) <= 1e-6 * SIG[k]);
        assert_ok(dk_sigmoid_focal_loss_backward(&one->t, &x->t, &t->t, NULL, &gi->t, NULL, 2, 0.25, 0.75, DK_FOCAL_SUM,
                                                 (double)N));
        dkk_assert_close(gi, sig_g, 1e-8, 1e-6, "MMCV's sigmoid vectors");
        assert_ok(dk_softmax_focal_loss_forward(&x->t, &t->t, NULL, &out->t, 2, 0.25, DK_FOCAL_SUM, (double)N));
        assert_true(fabs(dkk_get(out, NULL) - SOFT[k]) <= 1e-6 * SOFT[k]);
        assert_ok(
            dk_softmax_focal_loss_backward(&one->t, &x->t, &t->t, NULL, &gi->t, 2, 0.25, DK_FOCAL_SUM, (double)N));
        dkk_assert_close(gi, soft_g, 1e-8, 1e-6, "MMCV's softmax vectors");
        dkk_free(x), dkk_free(t), dkk_free(sig_g), dkk_free(soft_g), dkk_free(out), dkk_free(one), dkk_free(gi);
    }
}

/* ---- extremes: where the references lose digits, dkit keeps them -------------------------- */

static void extreme_logits(void **state)
{
    (void)state;
    /* float32 x = +-20, +-60, +-100, NaN; hard targets both ways: the exact loss (long double) */
    const double xs[] = {20, -20, 60, -60, 100, -100, 0, NAN};
    const int64_t N = 8, C = 2;
    dkk_tensor *x = dkk_new(DK_FLOAT32, 2, (int64_t[]){N, C}, NULL, 0),
               *t = dkk_new(DK_FLOAT32, 2, (int64_t[]){N, C}, NULL, 0);
    dkk_tensor *ref = dkk_new(DK_FLOAT64, 2, (int64_t[]){N, C}, NULL, 0),
               *out = dkk_new(DK_FLOAT32, 2, (int64_t[]){N, C}, NULL, 0);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            dkk_set(x, (int64_t[]){n, c}, xs[n]);
            dkk_set(t, (int64_t[]){n, c}, (double)c);
            dkk_set(ref, (int64_t[]){n, c}, (double)ref_sigmoid(xs[n], c, 2, 0.25, 0.75));
        }
    assert_ok(dk_sigmoid_focal_loss_forward(&x->t, &t->t, NULL, &out->t, NULL, 2, 0.25, 0.75, DK_FOCAL_NONE, 1));
    /* relative 1e-5 down to 1e-38 (the losses at x = 60 and 100 of the right class are below
     * float's range: 0) */
    dkk_assert_close(out, ref, 1e-38, 1e-5, "extreme logits");
    /* MMCV's float32 kernel gives 65.5 for a negative class at x = 20 (its 1 - p is 0); dkit 15 */
    assert_true(fabs(dkk_get(out, (int64_t[]){0, 0}) - 15.0) < 1e-5);
    dkk_free(x), dkk_free(t), dkk_free(ref), dkk_free(out);
}

/* ---- the sum's bits do not depend on the thread count ------------------------------------- */

static void same_bits_for_any_thread_count(void **state)
{
    (void)state;
    dkk_rng r = {0xF0C3};
    const int64_t N = 3001, C = 7; /* six chunks, the last one short */
    dkk_tensor *x = dkk_new(DK_FLOAT32, 2, (int64_t[]){N, C}, NULL, 0), *t = dkk_new(DK_INT64, 1, &N, NULL, 0);
    dkk_tensor *ts = dkk_new(DK_INT64, 1, &N, NULL, 0);
    dkk_fill_uniform(x, &r, -5, 5);
    for (int64_t n = 0; n < N; n++) {
        dkk_set(t, (int64_t[]){n}, (double)(dkk_u64(&r) % (C + 1))); /* C: background */
        dkk_set(ts, (int64_t[]){n}, (double)(n % C));
    }
    dkk_tensor *first[2] = {NULL, NULL};
    for (int threads = 1; threads <= 3; threads++) {
        assert_ok(dk_set_num_threads(threads));
        for (int soft = 0; soft < 2; soft++) {
            dkk_tensor *out = dkk_new(DK_FLOAT32, 0, NULL, NULL, 0);
            if (soft) assert_ok(dk_softmax_focal_loss_forward(&x->t, &ts->t, NULL, &out->t, 2, 0.25, DK_FOCAL_SUM, 1));
            else
                assert_ok(
                    dk_sigmoid_focal_loss_forward(&x->t, &t->t, NULL, &out->t, NULL, 2, 0.25, 0.75, DK_FOCAL_SUM, 1));
            if (!first[soft]) first[soft] = out;
            else {
                dkk_assert_identical(out, first[soft], "the sum with more threads");
                dkk_free(out);
            }
        }
    }
    assert_ok(dk_set_num_threads(0));
    dkk_free(x), dkk_free(t), dkk_free(ts), dkk_free(first[0]), dkk_free(first[1]);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static void bad_input(void **state)
{
    (void)state;
    dkk_tensor *x = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 4}, NULL, 0),
               *x3 = dkk_new(DK_FLOAT32, 3, (int64_t[]){3, 4, 1}, NULL, 0);
    dkk_tensor *tf = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 4}, NULL, 0),
               *td = dkk_new(DK_FLOAT64, 2, (int64_t[]){3, 4}, NULL, 0);
    dkk_tensor *tl = dkk_new(DK_INT64, 1, (int64_t[]){3}, NULL, 0), *ti = dkk_new(DK_INT32, 1, (int64_t[]){3}, NULL, 0);
    dkk_tensor *tl2 = dkk_new(DK_INT64, 1, (int64_t[]){2}, NULL, 0),
               *w = dkk_new(DK_FLOAT32, 1, (int64_t[]){4}, NULL, 0);
    dkk_tensor *w5 = dkk_new(DK_FLOAT32, 1, (int64_t[]){5}, NULL, 0),
               *o = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 4}, NULL, 0);
    dkk_tensor *s = dkk_new(DK_FLOAT32, 0, NULL, NULL, 0), *o1 = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 0);
    dkk_tensor *gi = dkk_new(DK_FLOAT32, 2, (int64_t[]){3, 4}, NULL, 0);
    assert_error(dk_sigmoid_focal_loss_forward(&x3->t, &tf->t, NULL, &o->t, NULL, 2, 0.25, 0.75, 0, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: 'input' must be 2-d [N, C], got 3 dimensions");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &td->t, NULL, &o->t, NULL, 2, 0.25, 0.75, 0, 1), DK_ETYPE,
                 "sigmoid_focal_loss_forward: 'targets' must be probabilities of the input's dtype (float32) or int64 "
                 "class indices, got float64");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &ti->t, NULL, &o->t, NULL, 2, 0.25, 0.75, 0, 1), DK_ETYPE,
                 "sigmoid_focal_loss_forward: 'targets' must be probabilities of the input's dtype (float32) or int64 "
                 "class indices, got int32");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl2->t, NULL, &o->t, NULL, 2, 0.25, 0.75, 0, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: 'targets' must have shape [3], got [2]");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tf->t, &w->t, &o->t, NULL, 2, 0.25, 0.75, 0, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: 'weight' (per class) needs class-index targets, not probabilities");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, &w5->t, &o->t, NULL, 2, 0.25, 0.75, 0, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: 'weight' must have shape [4], got [5]");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, NULL, &o->t, NULL, NAN, 0.25, 0.75, 0, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: gamma must be finite, got nan");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, NULL, &o->t, NULL, 2, INFINITY, 0.75, 0, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: alpha must be finite, got inf and 0.75");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, NULL, &o->t, NULL, 2, 0.25, 0.75, 2, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: reduction must be 0 (none) or 1 (sum / divisor), got 2");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, NULL, &s->t, NULL, 2, 0.25, 0.75, 1, -1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: divisor must be a finite number >= 0, got -1");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, NULL, &o->t, &gi->t, 2, 0.25, 0.75, 0, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: 'grad_input' is for a reduced loss (reduction 1), got reduction 0");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, NULL, &s->t, &o1->t, 2, 0.25, 0.75, 1, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: 'grad_input' must have shape [3, 4], got [3]");
    assert_error(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, NULL, &o->t, NULL, 2, 0.25, 0.75, 1, 1), DK_EINVAL,
                 "sigmoid_focal_loss_forward: 'output' must have shape [], got [3, 4]");
    assert_error(dk_sigmoid_focal_loss_backward(&o->t, &x->t, &tl->t, NULL, &gi->t, &tf->t, 2, 0.25, 0.75, 0, 1),
                 DK_EINVAL,
                 "sigmoid_focal_loss_backward: class-index targets have no gradient ('grad_targets' must be "
                 "None)");
    /* the softmax: a target of C or more would read another row; negative ones are ignored */
    dkk_set(tl, (int64_t[]){1}, -3);
    assert_ok(dk_softmax_focal_loss_forward(&x->t, &tl->t, NULL, &o1->t, 2, 0.25, 0, 1));
    assert_true(dkk_get(o1, (int64_t[]){1}) == 0);
    dkk_set(tl, (int64_t[]){2}, 4);
    assert_error(dk_softmax_focal_loss_forward(&x->t, &tl->t, NULL, &o1->t, 2, 0.25, 0, 1), DK_EINDEX,
                 "softmax_focal_loss_forward: targets[2] is 4, not a class index in [0, 4) (negative targets are "
                 "ignored)");
    assert_error(dk_softmax_focal_loss_backward(&o1->t, &x->t, &tl->t, NULL, &o->t, 2, 0.25, 0, 1), DK_EINDEX,
                 "softmax_focal_loss_backward: targets[2] is 4, not a class index in [0, 4) (negative targets are "
                 "ignored)");
    assert_error(dk_softmax_focal_loss_forward(&x->t, &tf->t, NULL, &o1->t, 2, 0.25, 0, 1), DK_ETYPE,
                 "softmax_focal_loss_forward: 'targets' must be int64, got float32");
    /* the sigmoid takes any class index: outside [0, C) the row is all negative, weight 1 */
    dkk_set(tl, (int64_t[]){2}, 1000);
    assert_ok(dk_sigmoid_focal_loss_forward(&x->t, &tl->t, &w->t, &o->t, NULL, 2, 0.25, 0.75, 0, 1));
    dkk_free(x), dkk_free(x3), dkk_free(tf), dkk_free(td), dkk_free(tl), dkk_free(ti), dkk_free(tl2), dkk_free(w);
    dkk_free(w5), dkk_free(o), dkk_free(s), dkk_free(o1), dkk_free(gi);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sigmoid_every_dtype),
        cmocka_unit_test(softmax_every_dtype),
        cmocka_unit_test(mmcv_published_vectors),
        cmocka_unit_test(extreme_logits),
        cmocka_unit_test(same_bits_for_any_thread_count),
        cmocka_unit_test(bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
