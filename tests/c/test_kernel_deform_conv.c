/*
 * test_kernel_deform_conv.c — the CPU deform_conv2d (ops/deform_conv.h) against a reference
 * written here from the definition (torchvision's deform_conv2d, MMCV's DCN): a direct sum per
 * output element in double, no columns, no GEMM, and its five gradients by the chain rule, each
 * sample's corners found with floor and the map's bounds. Every float dtype, any strides,
 * groups and offset groups, stride, padding and dilation, with and without mask and bias,
 * offsets that take samples off the map and exactly onto its -1 edge (where torchvision's and
 * MMCV's offset gradients differ), images whose columns exceed one block, the same bits for a
 * every thread count on every run; MMCV's published
 * vectors; and the refusals.
 */
#include <math.h>

#include "deform_conv.h"
#include "dk_kernel_test.h"
#include "dk_parallel.h"
#include "kernels/deform_conv_math.h"

/* ---- reference --------------------------------------------------------------------------- */

typedef struct {
    int64_t sh, sw, ph, pw, dh, dw, groups, og;
    int geometry;
} params;

/* Corner values and weights of a sample (the definition: zero outside the map, and no value
 * unless -1 < py < H and -1 < px < W). */
static double ref_sample(const dkk_tensor *x, int64_t n, int64_t c, double py, double px, double *w, int64_t *cy,
                         int64_t *cx, bool *in)
{
    const int64_t H = x->t.shape[2], W = x->t.shape[3];
    const double fy = floor(py), fx = floor(px), ly = py - fy, lx = px - fx;
    const double ws[4] = {(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx};
    const bool live = py > -1 && py < H && px > -1 && px < W;
    double v = 0;
    for (int k = 0; k < 4; k++) {
        cy[k] = (int64_t)fy + k / 2;
        cx[k] = (int64_t)fx + k % 2;
        in[k] = isfinite(py) && isfinite(px) && cy[k] >= 0 && cy[k] < H && cx[k] >= 0 && cx[k] < W;
        w[k] = live && in[k] ? ws[k] : 0;
        if (w[k] != 0) v += w[k] * dkk_get(x, (int64_t[]){n, c, cy[k], cx[k]});
    }
    return v;
}

typedef struct {
    dkk_tensor *out, *gx, *gw, *goff, *gm, *gb;
} ref_result;

static ref_result ref_run(const dkk_tensor *x, const dkk_tensor *w, const dkk_tensor *off, const dkk_tensor *m,
                          const dkk_tensor *b, const dkk_tensor *go, const params *p)
{
    const int64_t N = x->t.shape[0], Cin = x->t.shape[1], H = x->t.shape[2], W = x->t.shape[3];
    const int64_t Cout = w->t.shape[0], kh = w->t.shape[2], kw = w->t.shape[3];
    const int64_t Ho = off->t.shape[2], Wo = off->t.shape[3], cpg = Cin / p->groups, opg = Cout / p->groups;
    const int64_t cpog = Cin / p->og;
    ref_result r = {dkk_new(DK_FLOAT64, 4, (int64_t[]){N, Cout, Ho, Wo}, NULL, 0),
                    dkk_new(DK_FLOAT64, 4, x->t.shape, NULL, 0),
                    dkk_new(DK_FLOAT64, 4, w->t.shape, NULL, 0),
                    dkk_new(DK_FLOAT64, 4, off->t.shape, NULL, 0),
                    m ? dkk_new(DK_FLOAT64, 4, m->t.shape, NULL, 0) : NULL,
                    dkk_new(DK_FLOAT64, 1, (int64_t[]){Cout}, NULL, 0)};
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < Cout; o++)
            for (int64_t y = 0; y < Ho; y++)
                for (int64_t xo = 0; xo < Wo; xo++) {
                    const double g = dkk_get(go, (int64_t[]){n, o, y, xo});
                    double acc = b ? dkk_get(b, (int64_t[]){o}) : 0;
                    const int64_t grp = o / opg;
                    for (int64_t c = grp * cpg; c < (grp + 1) * cpg; c++)
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < kw; j++) {
                                const int64_t d = c / cpog, tap = d * kh * kw + i * kw + j;
                                const double py = (double)(y * p->sh - p->ph + i * p->dh) +
                                                  dkk_get(off, (int64_t[]){n, 2 * tap, y, xo});
                                const double px = (double)(xo * p->sw - p->pw + j * p->dw) +
                                                  dkk_get(off, (int64_t[]){n, 2 * tap + 1, y, xo});
                                const double mv = m ? dkk_get(m, (int64_t[]){n, tap, y, xo}) : 1;
                                double wt[4];
                                int64_t cy[4], cx[4];
                                bool in[4];
                                const double v = ref_sample(x, n, c, py, px, wt, cy, cx, in);
                                const double wv = dkk_get(w, (int64_t[]){o, c - grp * cpg, i, j});
                                acc += wv * mv * v;
                                /* gradients */
                                const int64_t wi[4] = {o, c - grp * cpg, i, j};
                                dkk_set(r.gw, wi, dkk_get(r.gw, wi) + g * mv * v);
                                if (m) {
                                    const int64_t mi[4] = {n, tap, y, xo};
                                    dkk_set(r.gm, mi, dkk_get(r.gm, mi) + g * wv * v);
                                }
                                for (int k = 0; k < 4; k++)
                                    if (wt[k] != 0) {
                                        const int64_t xi[4] = {n, c, cy[k], cx[k]};
                                        dkk_set(r.gx, xi, dkk_get(r.gx, xi) + g * wv * mv * wt[k]);
                                    }
                                /* d sample / d py, d px from the corners inside the map; MMCV's
                                 * only where the sample is live */
                                const bool live = py > -1 && py < H && px > -1 && px < W;
                                if (p->geometry == 1 && !live) continue;
                                double cv[4];
                                for (int k = 0; k < 4; k++)
                                    cv[k] = in[k] ? dkk_get(x, (int64_t[]){n, c, cy[k], cx[k]}) : 0;
                                const double ly = py - floor(py), lx = px - floor(px);
                                const double dy = lx * (cv[3] - cv[1]) + (1 - lx) * (cv[2] - cv[0]);
                                const double dx = ly * (cv[3] - cv[2]) + (1 - ly) * (cv[1] - cv[0]);
                                if (!isfinite(py) || !isfinite(px) || py <= -2 || px <= -2) continue;
                                const int64_t oy[4] = {n, 2 * tap, y, xo}, ox[4] = {n, 2 * tap + 1, y, xo};
                                dkk_set(r.goff, oy, dkk_get(r.goff, oy) + g * wv * mv * dy);
                                dkk_set(r.goff, ox, dkk_get(r.goff, ox) + g * wv * mv * dx);
                            }
                    dkk_set(r.out, (int64_t[]){n, o, y, xo}, acc);
                    dkk_set(r.gb, (int64_t[]){o}, dkk_get(r.gb, (int64_t[]){o}) + g);
                }
    (void)H, (void)W;
    return r;
}

static void ref_free(ref_result *r)
{
    dkk_free(r->out), dkk_free(r->gx), dkk_free(r->gw), dkk_free(r->goff), dkk_free(r->gm), dkk_free(r->gb);
}

/* ---- cases ------------------------------------------------------------------------------- */

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};

static double tolerance(dk_dtype dt)
{
    return dt == DK_FLOAT64 ? 1e-10 : dt == DK_FLOAT32 ? 2e-4 : dt == DK_FLOAT16 ? 4e-3 : 3e-2;
}

typedef struct {
    int64_t N, Cin, H, W, Cout, kh, kw;
    params p;
    bool mask, bias, nhwc;
} shape;

/* Runs forward and backward on random tensors of `s` and checks every result against the
 * reference; `keep` (when not NULL) receives the float32 results for a bits comparison. */
static void check(dk_dtype dt, const shape *s, dkk_rng *r, dkk_tensor **keep)
{
    char what[200];
    snprintf(what, sizeof what,
             "%s N%lld Cin%lld %lldx%lld Cout%lld k%lldx%lld g%lld og%lld s%lld,%lld p%lld,%lld "
             "d%lld,%lld mask%d bias%d nhwc%d geo%d",
             dk_dtype_name(dt), (long long)s->N, (long long)s->Cin, (long long)s->H, (long long)s->W,
             (long long)s->Cout, (long long)s->kh, (long long)s->kw, (long long)s->p.groups, (long long)s->p.og,
             (long long)s->p.sh, (long long)s->p.sw, (long long)s->p.ph, (long long)s->p.pw, (long long)s->p.dh,
             (long long)s->p.dw, s->mask, s->bias, s->nhwc, s->p.geometry);
    const params *p = &s->p;
    const int64_t Ho = (s->H + 2 * p->ph - (p->dh * (s->kh - 1) + 1)) / p->sh + 1;
    const int64_t Wo = (s->W + 2 * p->pw - (p->dw * (s->kw - 1) + 1)) / p->sw + 1;
    const int64_t taps = p->og * s->kh * s->kw;
    const int *order = s->nhwc ? (int[]){0, 2, 3, 1} : NULL;
    dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){s->N, s->Cin, s->H, s->W}, order, s->nhwc ? 1 : 0);
    dkk_tensor *w = dkk_new(dt, 4, (int64_t[]){s->Cout, s->Cin / p->groups, s->kh, s->kw}, NULL, 0);
    dkk_tensor *off = dkk_new(dt, 4, (int64_t[]){s->N, 2 * taps, Ho, Wo}, order, 0);
    dkk_tensor *m = s->mask ? dkk_new(dt, 4, (int64_t[]){s->N, taps, Ho, Wo}, NULL, 2) : NULL;
    dkk_tensor *b = s->bias ? dkk_new(dt, 1, (int64_t[]){s->Cout}, NULL, 0) : NULL;
    dkk_fill_uniform(x, r, -2, 2);
    dkk_fill_uniform(w, r, -1, 1);
    dkk_fill_uniform(off, r, -3, 3);
    if (m) dkk_fill_uniform(m, r, 0, 1);
    if (b) dkk_fill_uniform(b, r, -1, 1);
    /* some offsets put samples exactly on whole pixels and on the -1 edge */
    int64_t idx[4] = {0};
    int64_t count = 0;
    do {
        if (count++ % 7 == 0) dkk_set(off, idx, (double)(int64_t)dkk_get(off, idx));
    } while (dkk_next(off, idx));
    if (Ho > 0 && Wo > 0 && s->N > 0) {
        /* tap 0 at output (0, 0): py = -ph + offset = -1 exactly */
        dkk_set(off, (int64_t[]){0, 0, 0, 0}, (double)p->ph - 1);
        dkk_set(off, (int64_t[]){0, 1, 0, 0}, 0.25);
    }
    dkk_tensor *out = dkk_new(dt, 4, (int64_t[]){s->N, s->Cout, Ho, Wo}, NULL, 1);
    assert_ok(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, m ? &m->t : NULL, b ? &b->t : NULL, &out->t, p->sh, p->sw,
                                       p->ph, p->pw, p->dh, p->dw, p->groups, p->og));
    dkk_tensor *go = dkk_new(dt, 4, (int64_t[]){s->N, s->Cout, Ho, Wo}, order, 0);
    dkk_fill_uniform(go, r, -1, 1);
    ref_result want = ref_run(x, w, off, m, b, go, p);
    const double tol = tolerance(dt);
    /* sums of Cin kh kw terms of size ~ 1: an absolute tolerance that scales with them */
    const double scale = (double)(s->Cin / p->groups * s->kh * s->kw) + 1;
    dkk_assert_close(out, want.out, tol * scale, tol, what);
    dkk_tensor *gx = dkk_new(dt, 4, x->t.shape, order, 1), *gw = dkk_new(dt, 4, w->t.shape, NULL, 1);
    dkk_tensor *goff = dkk_new(dt, 4, off->t.shape, NULL, 0);
    dkk_tensor *gm = m ? dkk_new(dt, 4, m->t.shape, order, 0) : NULL;
    dkk_tensor *gb = dkk_new(dt, 1, (int64_t[]){s->Cout}, NULL, 0);
    dkk_fill_uniform(gx, r, 7, 8), dkk_fill_uniform(gw, r, 7, 8), dkk_fill_uniform(goff, r, 7, 8);
    if (gm) dkk_fill_uniform(gm, r, 7, 8);
    dkk_fill_uniform(gb, r, 7, 8); /* all overwritten */
    assert_ok(dk_deform_conv2d_backward(&go->t, &x->t, &w->t, &off->t, m ? &m->t : NULL, &gx->t, &gw->t, &goff->t,
                                        gm ? &gm->t : NULL, &gb->t, p->sh, p->sw, p->ph, p->pw, p->dh, p->dw, p->groups,
                                        p->og, p->geometry));
    const double many = (double)(s->N * Ho * Wo) + scale;
    char w2[240];
    snprintf(w2, sizeof w2, "%s grad_input", what);
    dkk_assert_close(gx, want.gx, tol * scale * 4, tol * 4, w2);
    snprintf(w2, sizeof w2, "%s grad_weight", what);
    dkk_assert_close(gw, want.gw, tol * many * 2, tol * 4, w2);
    snprintf(w2, sizeof w2, "%s grad_offset", what);
    dkk_assert_close(goff, want.goff, tol * scale * 8, tol * 8, w2);
    if (gm) {
        snprintf(w2, sizeof w2, "%s grad_mask", what);
        dkk_assert_close(gm, want.gm, tol * scale * 4, tol * 4, w2);
    }
    snprintf(w2, sizeof w2, "%s grad_bias", what);
    dkk_assert_close(gb, want.gb, tol * many, tol, w2);
    if (keep) {
        keep[0] = out, keep[1] = gx, keep[2] = gw, keep[3] = goff, keep[4] = gb;
    } else {
        dkk_free(out), dkk_free(gx), dkk_free(gw), dkk_free(goff), dkk_free(gb);
    }
    ref_free(&want);
    dkk_free(x), dkk_free(w), dkk_free(off), dkk_free(m), dkk_free(b), dkk_free(go), dkk_free(gm);
}

static const shape SHAPES[] = {
    {2, 4, 7, 6, 6, 3, 3, {1, 1, 1, 1, 1, 1, 2, 2, 0}, true, true, false},
    {3, 3, 5, 8, 2, 2, 3, {2, 1, 0, 2, 2, 1, 1, 1, 1}, false, false, true},
    {1, 6, 9, 9, 4, 3, 2, {1, 2, 2, 0, 1, 2, 2, 3, 1}, true, false, true},
    {2, 2, 4, 4, 2, 1, 1, {1, 1, 0, 0, 1, 1, 1, 1, 0}, true, true, false},
    {2, 8, 6, 5, 8, 3, 3, {1, 1, 1, 1, 1, 1, 8, 4, 1}, true, true, false},
};

static void every_dtype_and_shape(void **state)
{
    (void)state;
    dkk_rng r = {0xdc01};
    for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++)
        for (size_t i = 0; i < DK_COUNTOF(SHAPES); i++) check(DTYPES[d], &SHAPES[i], &r, NULL);
}

/* Columns of 2,304 x 1,600 floats (14.7 MB): more than one block per image (Note [Deformable
 * convolution on a CPU]). */
static void images_larger_than_a_block(void **state)
{
    (void)state;
    dkk_rng r = {0xdc02};
    const shape s = {2, 256, 40, 40, 2, 3, 3, {1, 1, 1, 1, 1, 1, 1, 1, 0}, true, true, false};
    check(DK_FLOAT32, &s, &r, NULL);
}

/* The same bits on every run and for every thread count (Note [Deformable convolution on a
 * CPU]: the backward's slots depend on the batch only), for a batch below and above the slots. */
static void bits_and_thread_counts(void **state)
{
    (void)state;
    for (int64_t N = 5; N <= 19; N += 14) {
        const shape s = {N, 4, 6, 6, 4, 3, 3, {1, 1, 1, 1, 1, 1, 2, 2, 0}, true, true, false};
        dkk_tensor *first[4][5];
        for (int t = 1; t <= 3; t++) {
            assert_ok(dk_set_num_threads(t));
            dkk_rng r = {0xdc03};
            check(DK_FLOAT32, &s, &r, first[t]);
            dkk_rng r2 = {0xdc03};
            dkk_tensor *again[5];
            check(DK_FLOAT32, &s, &r2, again);
            for (int k = 0; k < 5; k++) {
                dkk_assert_identical(again[k], first[t][k], "the same thread count twice");
                dkk_free(again[k]);
            }
            if (t > 1)
                for (int k = 0; k < 5; k++) dkk_assert_identical(first[t][k], first[1][k], "any thread count");
        }
        assert_ok(dk_set_num_threads(0));
        for (int t = 1; t <= 3; t++)
            for (int k = 0; k < 5; k++) dkk_free(first[t][k]);
    }
}

/* MMCV's tests/test_ops/test_modulated_deform_conv.py: ModulatedDeformConv2dPack(1, 1, 2,
 * padding 1) with zero offsets (its conv_offset starts at zero), mask sigmoid(0) = 0.5, weights
 * 1, the gradient of the sum: output, grad_input, grad_weight; and the offset gradient's
 * channel sums, which are its conv_offset bias gradient (-3, -1.5 per tap: MMCV's edge rule). */
static void mmcv_published_vectors(void **state)
{
    (void)state;
    dkk_tensor *x = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 3, 3}, NULL, 0);
    for (int i = 0; i < 9; i++) dkk_set(x, (int64_t[]){0, 0, i / 3, i % 3}, (double)(i % 3 + 1));
    dkk_tensor *w = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 2, 2}, NULL, 0);
    dkk_fill_uniform(w, &(dkk_rng){1}, 1, 1);
    dkk_tensor *off = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 8, 4, 4}, NULL, 0);
    dkk_tensor *m = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 4, 4, 4}, NULL, 0);
    dkk_fill_uniform(m, &(dkk_rng){1}, 0.5, 0.5);
    dkk_tensor *out = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 4, 4}, NULL, 0);
    assert_ok(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, 1, 1, 1, 1, 1, 1));
    static const double want[16] = {0.5, 1.5, 2.5, 1.5, 1, 3, 5, 3, 1, 3, 5, 3, 0.5, 1.5, 2.5, 1.5};
    for (int i = 0; i < 16; i++) assert_true(fabs(dkk_get(out, (int64_t[]){0, 0, i / 4, i % 4}) - want[i]) < 1e-6);
    dkk_tensor *go = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 4, 4}, NULL, 0);
    dkk_fill_uniform(go, &(dkk_rng){1}, 1, 1);
    dkk_tensor *gx = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 3, 3}, NULL, 0);
    dkk_tensor *gw = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 1, 2, 2}, NULL, 0);
    dkk_tensor *goff = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 8, 4, 4}, NULL, 0);
    dkk_tensor *gm = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 4, 4, 4}, NULL, 0);
    assert_ok(dk_deform_conv2d_backward(&go->t, &x->t, &w->t, &off->t, &m->t, &gx->t, &gw->t, &goff->t, &gm->t, NULL, 1,
                                        1, 1, 1, 1, 1, 1, 1, DK_DEFORM_CONV_MMCV));
    for (int i = 0; i < 9; i++) assert_true(fabs(dkk_get(gx, (int64_t[]){0, 0, i / 3, i % 3}) - 2) < 1e-6);
    /* MMCV's dcn_w_grad is 9 for mask 1 ... of its sigmoid(0): 18 x 0.5 */
    for (int i = 0; i < 4; i++) assert_true(fabs(dkk_get(gw, (int64_t[]){0, 0, i / 2, i % 2}) - 9) < 1e-5);
    static const double bias_grad[8] = {-3, -1.5, -3, -1.5, -3, -1.5, -3, -1.5};
    for (int c = 0; c < 8; c++) {
        double sum = 0;
        for (int i = 0; i < 16; i++) sum += dkk_get(goff, (int64_t[]){0, c, i / 4, i % 4});
        assert_true(fabs(sum - bias_grad[c]) < 1e-5);
    }
    dkk_free(x), dkk_free(w), dkk_free(off), dkk_free(m), dkk_free(out), dkk_free(go), dkk_free(gx), dkk_free(gw);
    dkk_free(goff), dkk_free(gm);
}

static void empty_batch(void **state)
{
    (void)state;
    dkk_tensor *x = dkk_new(DK_FLOAT32, 4, (int64_t[]){0, 2, 4, 4}, NULL, 0);
    dkk_tensor *w = dkk_new(DK_FLOAT32, 4, (int64_t[]){3, 2, 3, 3}, NULL, 0);
    dkk_tensor *off = dkk_new(DK_FLOAT32, 4, (int64_t[]){0, 18, 2, 2}, NULL, 0);
    dkk_tensor *out = dkk_new(DK_FLOAT32, 4, (int64_t[]){0, 3, 2, 2}, NULL, 0);
    assert_ok(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, NULL, NULL, &out->t, 1, 1, 0, 0, 1, 1, 1, 1));
    dkk_tensor *gw = dkk_new(DK_FLOAT32, 4, (int64_t[]){3, 2, 3, 3}, NULL, 0);
    dkk_tensor *gb = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 0);
    dkk_fill_uniform(gw, &(dkk_rng){1}, 1, 2), dkk_fill_uniform(gb, &(dkk_rng){1}, 1, 2);
    assert_ok(dk_deform_conv2d_backward(&out->t, &x->t, &w->t, &off->t, NULL, &x->t, &gw->t, &off->t, NULL, &gb->t, 1,
                                        1, 0, 0, 1, 1, 1, 1, 0));
    dkk_tensor *zw = dkk_new(DK_FLOAT32, 4, (int64_t[]){3, 2, 3, 3}, NULL, 0),
               *zb = dkk_new(DK_FLOAT32, 1, (int64_t[]){3}, NULL, 0);
    dkk_assert_identical(gw, zw, "grad_weight of no image");
    dkk_assert_identical(gb, zb, "grad_bias of no image");
    dkk_free(x), dkk_free(w), dkk_free(off), dkk_free(out), dkk_free(gw), dkk_free(gb), dkk_free(zw), dkk_free(zb);
}

static void bad_input(void **state)
{
    (void)state;
    static const char F[] = "deform_conv2d_forward: ";
    char msg[300];
    dkk_tensor *x = dkk_new(DK_FLOAT32, 4, (int64_t[]){2, 4, 5, 5}, NULL, 0);
    dkk_tensor *w = dkk_new(DK_FLOAT32, 4, (int64_t[]){6, 2, 3, 3}, NULL, 0);
    dkk_tensor *off = dkk_new(DK_FLOAT32, 4, (int64_t[]){2, 36, 5, 5}, NULL, 0);
    dkk_tensor *m = dkk_new(DK_FLOAT32, 4, (int64_t[]){2, 18, 5, 5}, NULL, 0);
    dkk_tensor *out = dkk_new(DK_FLOAT32, 4, (int64_t[]){2, 6, 5, 5}, NULL, 0);
    assert_ok(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, 1, 1, 1, 1, 2, 2));
    dkk_tensor *off35 = dkk_new(DK_FLOAT32, 4, (int64_t[]){2, 35, 5, 5}, NULL, 0);
    snprintf(msg, sizeof msg, "%soffset.shape[1] is not valid: got: 35 expected: 36", F);
    assert_error(dk_deform_conv2d_forward(&x->t, &w->t, &off35->t, &m->t, NULL, &out->t, 1, 1, 1, 1, 1, 1, 2, 2),
                 DK_EINVAL, msg);
    dkk_tensor *m9 = dkk_new(DK_FLOAT32, 4, (int64_t[]){2, 9, 5, 5}, NULL, 0);
    snprintf(msg, sizeof msg, "%smask.shape[1] is not valid: got: 9 expected: 18", F);
    assert_error(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m9->t, NULL, &out->t, 1, 1, 1, 1, 1, 1, 2, 2),
                 DK_EINVAL, msg);
    snprintf(msg, sizeof msg, "%sstride_h: 0 stride_w: 1 (positive, below 2^31)", F);
    assert_error(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m->t, NULL, &out->t, 0, 1, 1, 1, 1, 1, 2, 2),
                 DK_EINVAL, msg);
    snprintf(msg, sizeof msg, "%spad_h: -1 pad_w: 1 (non-negative, below 2^31)", F);
    assert_error(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, -1, 1, 1, 1, 2, 2),
                 DK_EINVAL, msg);
    snprintf(msg, sizeof msg, "%sdilation_h: 1 dilation_w: 4294967296 (positive, below 2^31)", F);
    assert_error(
        dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, 1, 1, 1, (int64_t)1 << 32, 2, 2),
        DK_EINVAL, msg);
    snprintf(msg, sizeof msg, "%sweight.shape[1] * groups must be input.shape[1]: got 2 * 1 for 4 input channels", F);
    assert_error(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, 1, 1, 1, 1, 1, 2),
                 DK_EINVAL, msg);
    snprintf(msg, sizeof msg, "%soffset output dims: (5, 5) - computed output dims: (3, 3)", F);
    assert_error(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, 0, 0, 1, 1, 2, 2),
                 DK_EINVAL, msg);
    snprintf(msg, sizeof msg, "%sCalculated output size too small - out_h: 0 out_w: 0", F);
    assert_error(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, 0, 0, 4, 4, 2, 2),
                 DK_EINVAL, msg);
    dkk_tensor *x64 = dkk_new(DK_FLOAT64, 4, (int64_t[]){2, 4, 5, 5}, NULL, 0);
    snprintf(msg, sizeof msg, "%s'weight' must have the dtype of 'input' (float64), got float32", F);
    assert_error(dk_deform_conv2d_forward(&x64->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, 1, 1, 1, 1, 2, 2),
                 DK_ETYPE, msg);
    dkk_tensor *xi = dkk_new(DK_INT32, 4, (int64_t[]){2, 4, 5, 5}, NULL, 0);
    assert_int_equal(dk_deform_conv2d_forward(&xi->t, &w->t, &off->t, &m->t, NULL, &out->t, 1, 1, 1, 1, 1, 1, 2, 2),
                     DK_ETYPE);
    dkk_tensor *off1 = dkk_new(DK_FLOAT32, 4, (int64_t[]){1, 36, 5, 5}, NULL, 0);
    snprintf(msg, sizeof msg, "%sinvalid batch size of offset", F);
    assert_error(dk_deform_conv2d_forward(&x->t, &w->t, &off1->t, &m->t, NULL, &out->t, 1, 1, 1, 1, 1, 1, 2, 2),
                 DK_EINVAL, msg);
    dkk_tensor *gb = dkk_new(DK_FLOAT32, 1, (int64_t[]){6}, NULL, 0);
    dkk_tensor *gx = dkk_new(DK_FLOAT32, 4, (int64_t[]){2, 4, 5, 5}, NULL, 0);
    dkk_tensor *gw = dkk_new(DK_FLOAT32, 4, (int64_t[]){6, 2, 3, 3}, NULL, 0);
    dkk_tensor *goff = dkk_new(DK_FLOAT32, 4, (int64_t[]){2, 36, 5, 5}, NULL, 0);
    assert_ok(dk_deform_conv2d_backward(&out->t, &x->t, &w->t, &off->t, &m->t, &gx->t, &gw->t, &goff->t, NULL, &gb->t,
                                        1, 1, 1, 1, 1, 1, 2, 2, 1));
    assert_error(dk_deform_conv2d_backward(&out->t, &x->t, &w->t, &off->t, NULL, &gx->t, &gw->t, &goff->t, NULL, &gb->t,
                                           1, 1, 1, 1, 1, 1, 2, 2, 2),
                 DK_EINVAL, "deform_conv2d_backward: geometry must be 0 (torchvision) or 1 (mmcv), got 2");
    dkk_free(x), dkk_free(w), dkk_free(off), dkk_free(m), dkk_free(out), dkk_free(off35), dkk_free(m9);
    dkk_free(x64), dkk_free(xi), dkk_free(off1), dkk_free(gb), dkk_free(gx), dkk_free(gw), dkk_free(goff);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_dtype_and_shape),
        cmocka_unit_test(images_larger_than_a_block),
        cmocka_unit_test(bits_and_thread_counts),
        cmocka_unit_test(mmcv_published_vectors),
        cmocka_unit_test(empty_batch),
        cmocka_unit_test(bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
