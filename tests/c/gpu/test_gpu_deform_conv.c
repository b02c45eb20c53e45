/*
 * test_gpu_deform_conv.c — deform_conv2d's GPU kernels against its CPU kernels (whose results are
 * the definition's, test_kernel_deform_conv.c): the forward and the five gradients, every float
 * dtype, both edge geometries, any strides, groups and offset groups, stride, padding and
 * dilation, with and without mask and bias, an empty batch. The GPU sums in other orders (Note
 * [Deformable convolution on a GPU]), so values are compared within the dtype's tolerance, on
 * every build. Every case runs with both kernel sets (deform_conv.gpu_tiled 1 and 0), and the
 * tiled backward also with its column gradients one image at a time; emulated, the tiled
 * forward, grad_offset and grad_mask must equal the direct kernels' exactly (the same terms in
 * the same order). Built twice (gpu/dk_gpu_test.h): emulated on the host in `make test-c`, on a
 * real GPU in `make test-gpu`.
 */
#include <math.h>
#include <string.h>

#include "deform_conv.h"
#include "dk_determinism.h"
#include "dk_tunables.h"
#include "gpu/dk_gpu_test.h"
#include "kernels/deform_conv_math.h"

#ifdef DKT_GPU_EMULATED
#include "deform_conv/deform_conv_gpu.h"
#define GPU_FORWARD dk_deform_conv2d_forward_gpu
#define GPU_BACKWARD dk_deform_conv2d_backward_gpu
#else
#define GPU_FORWARD dk_deform_conv2d_forward
#define GPU_BACKWARD dk_deform_conv2d_backward
#endif

static const dk_dtype DTYPES[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};

typedef struct {
    int64_t N, Cin, H, W, Cout, kh, kw, sh, sw, ph, pw, dh, dw, groups, og;
    bool mask, bias, nhwc;
    int geometry;
} shape;

static const shape SHAPES[] = {
    {2, 4, 7, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2, true, true, false, 0},
    {2, 3, 5, 8, 2, 2, 3, 2, 1, 0, 2, 2, 1, 1, 1, false, false, true, 1},
    {1, 6, 9, 9, 4, 3, 2, 1, 2, 2, 0, 1, 2, 2, 3, true, false, true, 1},
    {0, 2, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true, false, 0},
    /* the tiled kernels' tiles (32 positions and column rows, 64 and 32 output channels) cut
     * in several places, and several chunks of positions for grad_weight and grad_bias */
    {3, 8, 16, 16, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, true, true, false, 0},
    {2, 10, 13, 12, 132, 3, 3, 2, 2, 2, 2, 2, 2, 2, 1, false, true, true, 1},
    {3, 4, 9, 11, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 2, true, true, false, 0}, /* the Python GPU test's */
};

static double tolerance(dk_dtype dt)
{
    return dt == DK_FLOAT64 ? 1e-11 : dt == DK_FLOAT32 ? 1e-4 : dt == DK_FLOAT16 ? 4e-3 : 3e-2;
}

/* a on the GPU against b on the CPU, within tol scaled by the sums' size. */
static void assert_near(dkk_tensor *gpu, dkk_tensor *cpu, double tol, double scale, const char *what, const char *part)
{
    char w[240];
    snprintf(w, sizeof w, "%s: %s", what, part);
    dkk_assert_close(gpu, cpu, tol * scale, tol * 4, w);
}

/* tiled: the tunable deform_conv.gpu_tiled (Note [Deformable convolution on a GPU]). */
static void check(dk_dtype dt, const shape *s, dkk_rng *r, int tiled)
{
    char what[160];
    snprintf(what, sizeof what,
             "deform_conv2d %s N%lld Cin%lld Cout%lld k%lldx%lld g%lld og%lld mask%d bias%d geo%d tiled%d",
             dk_dtype_name(dt), (long long)s->N, (long long)s->Cin, (long long)s->Cout, (long long)s->kh,
             (long long)s->kw, (long long)s->groups, (long long)s->og, s->mask, s->bias, s->geometry, tiled);
    assert_ok(dk_tunable_set("deform_conv.gpu_tiled", tiled, NULL));
    const int64_t Ho = (s->H + 2 * s->ph - (s->dh * (s->kh - 1) + 1)) / s->sh + 1;
    const int64_t Wo = (s->W + 2 * s->pw - (s->dw * (s->kw - 1) + 1)) / s->sw + 1;
    const int64_t taps = s->og * s->kh * s->kw;
    const int *order = s->nhwc ? (const int[]){0, 2, 3, 1} : NULL;
    dkk_tensor *x = dkk_new(dt, 4, (int64_t[]){s->N, s->Cin, s->H, s->W}, order, 1);
    dkk_tensor *w = dkk_new(dt, 4, (int64_t[]){s->Cout, s->Cin / s->groups, s->kh, s->kw}, NULL, 0);
    dkk_tensor *off = dkk_new(dt, 4, (int64_t[]){s->N, 2 * taps, Ho, Wo}, NULL, 0);
    dkk_tensor *m = s->mask ? dkk_new(dt, 4, (int64_t[]){s->N, taps, Ho, Wo}, order, 0) : NULL;
    dkk_tensor *b = s->bias ? dkk_new(dt, 1, (int64_t[]){s->Cout}, NULL, 0) : NULL;
    dkk_fill_uniform(x, r, -2, 2), dkk_fill_uniform(w, r, -1, 1), dkk_fill_uniform(off, r, -3, 3);
    if (m) dkk_fill_uniform(m, r, 0, 1);
    if (b) dkk_fill_uniform(b, r, -1, 1);
    if (s->N > 0) { /* a sample exactly on the -1 edge, where the geometries differ */
        dkk_set(off, (int64_t[]){0, 0, 0, 0}, (double)s->ph - 1);
        dkk_set(off, (int64_t[]){0, 1, 0, 0}, 0.25);
    }
    const int64_t oshape[4] = {s->N, s->Cout, Ho, Wo};
    dkk_tensor *out = dkk_new(dt, 4, oshape, NULL, 0), *gout = dkk_new(dt, 4, oshape, NULL, 2);
    memset(gout->mem, 0x7f, gout->bytes); /* every element must be written */
    assert_ok(dk_deform_conv2d_forward(&x->t, &w->t, &off->t, m ? &m->t : NULL, b ? &b->t : NULL, &out->t, s->sh, s->sw,
                                       s->ph, s->pw, s->dh, s->dw, s->groups, s->og));
    dkg_tensor dx, dw, doff, dm, db, dout;
    dkg_up(&dx, x), dkg_up(&dw, w), dkg_up(&doff, off), dkg_up(&dout, gout);
    if (m) dkg_up(&dm, m);
    if (b) dkg_up(&db, b);
    assert_ok(GPU_FORWARD(&dx.dev, &dw.dev, &doff.dev, m ? &dm.dev : NULL, b ? &db.dev : NULL, &dout.dev, s->sh, s->sw,
                          s->ph, s->pw, s->dh, s->dw, s->groups, s->og));
    dkg_down(&dout);
#ifdef DKT_GPU_EMULATED
    if (tiled) { /* the tiled forward adds the direct kernel's terms in its order: the same bits */
        dkk_tensor *direct = dkk_new(dt, 4, oshape, NULL, 0);
        dkg_tensor ddirect;
        dkg_up(&ddirect, direct);
        assert_ok(dk_tunable_set("deform_conv.gpu_tiled", 0, NULL));
        assert_ok(GPU_FORWARD(&dx.dev, &dw.dev, &doff.dev, m ? &dm.dev : NULL, b ? &db.dev : NULL, &ddirect.dev, s->sh,
                              s->sw, s->ph, s->pw, s->dh, s->dw, s->groups, s->og));
        assert_ok(dk_tunable_set("deform_conv.gpu_tiled", tiled, NULL));
        dkg_down(&ddirect);
        dkk_assert_close(gout, direct, 0, 0, what); /* tolerance 0: equal values */
        dkg_release(&ddirect);
        dkk_free(direct);
    }
#endif
    const double tol = tolerance(dt), terms = (double)(s->Cin / s->groups * s->kh * s->kw) + 1;
    assert_near(gout, out, tol, terms, what, "output");
    /* backward */
    dkk_tensor *g = dkk_new(dt, 4, oshape, NULL, 0);
    dkk_fill_uniform(g, r, -1, 1);
    dkk_tensor *gx = dkk_new(dt, 4, x->t.shape, NULL, 0), *gw = dkk_new(dt, 4, w->t.shape, NULL, 0);
    dkk_tensor *goff = dkk_new(dt, 4, off->t.shape, NULL, 0);
    dkk_tensor *gm = m ? dkk_new(dt, 4, m->t.shape, NULL, 0) : NULL;
    dkk_tensor *gb = dkk_new(dt, 1, (int64_t[]){s->Cout}, NULL, 0);
    assert_ok(dk_deform_conv2d_backward(&g->t, &x->t, &w->t, &off->t, m ? &m->t : NULL, &gx->t, &gw->t, &goff->t,
                                        gm ? &gm->t : NULL, &gb->t, s->sh, s->sw, s->ph, s->pw, s->dh, s->dw, s->groups,
                                        s->og, s->geometry));
    dkk_tensor *hx = dkk_new(dt, 4, x->t.shape, order, 3), *hw = dkk_new(dt, 4, w->t.shape, NULL, 1);
    dkk_tensor *hoff = dkk_new(dt, 4, off->t.shape, order, 0);
    dkk_tensor *hm = m ? dkk_new(dt, 4, m->t.shape, NULL, 1) : NULL;
    dkk_tensor *hb = dkk_new(dt, 1, (int64_t[]){s->Cout}, NULL, 1);
    memset(hx->mem, 0x7f, hx->bytes), memset(hw->mem, 0x7f, hw->bytes), memset(hoff->mem, 0x7f, hoff->bytes);
    if (hm) memset(hm->mem, 0x7f, hm->bytes);
    memset(hb->mem, 0x7f, hb->bytes);
    dkg_tensor dg, dhx, dhw, dhoff, dhm, dhb;
    dkg_up(&dg, g), dkg_up(&dhx, hx), dkg_up(&dhw, hw), dkg_up(&dhoff, hoff), dkg_up(&dhb, hb);
    if (hm) dkg_up(&dhm, hm);
    assert_ok(GPU_BACKWARD(&dg.dev, &dx.dev, &dw.dev, &doff.dev, m ? &dm.dev : NULL, &dhx.dev, &dhw.dev, &dhoff.dev,
                           hm ? &dhm.dev : NULL, &dhb.dev, s->sh, s->sw, s->ph, s->pw, s->dh, s->dw, s->groups, s->og,
                           s->geometry));
    dkg_down(&dhx), dkg_down(&dhw), dkg_down(&dhoff), dkg_down(&dhb);
    if (hm) dkg_down(&dhm);
#ifdef DKT_GPU_EMULATED
    if (tiled) { /* the tiled column gradients are the direct ones, bit for bit: so grad_offset, grad_mask */
        dkk_tensor *eoff = dkk_new(dt, 4, off->t.shape, NULL, 0), *em = m ? dkk_new(dt, 4, m->t.shape, NULL, 0) : NULL;
        dkk_tensor *ex = dkk_new(dt, 4, x->t.shape, NULL, 0), *ew = dkk_new(dt, 4, w->t.shape, NULL, 0);
        dkk_tensor *eb = dkk_new(dt, 1, (int64_t[]){s->Cout}, NULL, 0);
        dkg_tensor deoff, dem, dex, dew, deb;
        dkg_up(&deoff, eoff), dkg_up(&dex, ex), dkg_up(&dew, ew), dkg_up(&deb, eb);
        if (em) dkg_up(&dem, em);
        assert_ok(dk_tunable_set("deform_conv.gpu_tiled", 0, NULL));
        assert_ok(GPU_BACKWARD(&dg.dev, &dx.dev, &dw.dev, &doff.dev, m ? &dm.dev : NULL, &dex.dev, &dew.dev, &deoff.dev,
                               em ? &dem.dev : NULL, &deb.dev, s->sh, s->sw, s->ph, s->pw, s->dh, s->dw, s->groups,
                               s->og, s->geometry));
        assert_ok(dk_tunable_set("deform_conv.gpu_tiled", tiled, NULL));
        dkg_down(&deoff);
        dkk_assert_close(hoff, eoff, 0, 0, what);
        if (em) dkg_down(&dem), dkk_assert_close(hm, em, 0, 0, what), dkg_release(&dem);
        dkg_release(&deoff), dkg_release(&dex), dkg_release(&dew), dkg_release(&deb);
        dkk_free(eoff), dkk_free(em), dkk_free(ex), dkk_free(ew), dkk_free(eb);
    }
#endif
    const double many = (double)(s->N * Ho * Wo) + terms;
    assert_near(hx, gx, tol * 4, terms, what, "grad_input");
    assert_near(hw, gw, tol * 2, many, what, "grad_weight");
    assert_near(hoff, goff, tol * 8, terms, what, "grad_offset");
    if (hm) assert_near(hm, gm, tol * 4, terms, what, "grad_mask");
    assert_near(hb, gb, tol, many, what, "grad_bias");
    dkg_release(&dx), dkg_release(&dw), dkg_release(&doff), dkg_release(&dout), dkg_release(&dg);
    dkg_release(&dhx), dkg_release(&dhw), dkg_release(&dhoff), dkg_release(&dhb);
    if (m) dkg_release(&dm), dkg_release(&dhm);
    if (b) dkg_release(&db);
    dkk_free(x), dkk_free(w), dkk_free(off), dkk_free(m), dkk_free(b), dkk_free(out), dkk_free(gout), dkk_free(g);
    dkk_free(gx), dkk_free(gw), dkk_free(goff), dkk_free(gm), dkk_free(gb);
    dkk_free(hx), dkk_free(hw), dkk_free(hoff), dkk_free(hm), dkk_free(hb);
}

static void against_the_cpu(void **state)
{
    (void)state;
    dkk_rng r = {0xdc61};
    for (int tiled = 1; tiled >= 0; tiled--) {
        for (size_t d = 0; d < DK_COUNTOF(DTYPES); d++)
            for (size_t i = 0; i < DK_COUNTOF(SHAPES); i++) check(DTYPES[d], &SHAPES[i], &r, tiled);
        /* deterministic kernels asked for: grad_input's scatter as one thread (Note [Deformable
         * convolution on a GPU]), the same values */
        const bool previous = dk_set_deterministic(true);
        for (size_t i = 0; i < DK_COUNTOF(SHAPES); i++) check(DK_FLOAT32, &SHAPES[i], &r, tiled);
        dk_set_deterministic(previous);
        /* the tiled backward's column gradients one image at a time */
        assert_ok(dk_tunable_set("deform_conv.gpu_column_elements", 1, NULL));
        check(DK_FLOAT32, &SHAPES[0], &r, tiled), check(DK_FLOAT64, &SHAPES[4], &r, tiled);
        assert_ok(dk_tunable_set("deform_conv.gpu_column_elements", (int64_t)1 << 24, NULL));
    }
    dk_tunables_reset();
}

int main(void)
{
    if (dkg_setup()) return 0;
    const struct CMUnitTest tests[] = {cmocka_unit_test(against_the_cpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
