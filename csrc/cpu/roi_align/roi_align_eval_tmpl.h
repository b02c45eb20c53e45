/*
 * roi_align/roi_align_eval_tmpl.h — one RoI on one channel pair: forward (sparse or dense order),
 * backward (the same, transposed, in a fixed order), per sample where values are not finite,
 * and max pooling's per-sample tables.
 * A template (Note [Templates in C] in kernels/dk_template.h), instantiated by roi_align_cpu.c
 * for its compute types; its short names (T, V4, AXIS, ...) are roi_align_names_tmpl.h's.
 *
 * Everything here works on a per-thread buffer holding a channel pair interleaved (Note [Channel
 * pairs] in roi_align_planes_tmpl.h) and on the weight tables of roi_align_tables_tmpl.h.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE
#include "roi_align/roi_align_names_tmpl.h"

/* t[0..n) += sum of w[i] * row_i[c .. c + n) over nr (1..4) y taps, row r at
 * buf + (r - rbase) * sy: the dense vertical pass, four rows per sweep so that t is loaded and
 * stored once per four rows. */
static inline void DK_TFN(dk__ra_vsum)(T *restrict t, int64_t n, const T *buf, int64_t sy, int64_t rbase, int64_t c,
                                       const int32_t *idx, const T *w, int64_t nr)
{
#define DK__RA_ROW(i) (buf + (idx[i] - rbase) * sy + c)
    const T *restrict a = DK__RA_ROW(0);
    const T wa = w[0];
    if (nr >= 4) {
        const T *restrict b = DK__RA_ROW(1), *restrict d = DK__RA_ROW(2), *restrict e = DK__RA_ROW(3);
        const T wb = w[1], wd = w[2], we = w[3];
        for (int64_t j = 0; j < n; ++j) t[j] += wa * a[j] + wb * b[j] + wd * d[j] + we * e[j];
    } else if (nr == 3) {
        const T *restrict b = DK__RA_ROW(1), *restrict d = DK__RA_ROW(2);
        const T wb = w[1], wd = w[2];
        for (int64_t j = 0; j < n; ++j) t[j] += wa * a[j] + wb * b[j] + wd * d[j];
    } else if (nr == 2) {
        const T *restrict b = DK__RA_ROW(1);
        const T wb = w[1];
        for (int64_t j = 0; j < n; ++j) t[j] += wa * a[j] + wb * b[j];
    } else {
        for (int64_t j = 0; j < n; ++j) t[j] += wa * a[j];
    }
#undef DK__RA_ROW
}

/* Sparse vertical pass over up to four y taps (rows idx, weights w; row r at
 * buf + (r - rbase) * sy): for every pair q[p] of the RoI, vb[p] (= if first, else +=)
 * sum_i w[i] * row_i[2a .. + 3]. Four taps per sweep keep their offsets and weights in
 * registers. */
static inline void DK_TFN(dk__ra_sparse_rows)(V4 *restrict vb, const PAIR *restrict q, int64_t np, const T *buf,
                                              int64_t sy, int64_t rbase, const int32_t *idx, const T *w, int64_t nr,
                                              bool first)
{
    int64_t o[4];
    for (int i = 0; i < 4; ++i) o[i] = (idx[i < nr ? i : 0] - rbase) * sy;
#define DK__RA_TAP(i)              \
    DK_TFN(dk_ld4)(&x, pa + o##i); \
    v += w##i * x;
#define DK__RA_SWEEP(TAPS)                       \
    for (int64_t p = 0; p < np; ++p) {           \
        const T *pa = buf + 2 * (int64_t)q[p].a; \
        V4 x, v = {0, 0, 0, 0};                  \
        TAPS                                     \
        if (first) vb[p] = v;                    \
        else vb[p] += v;                         \
    }
    const int64_t o0 = o[0];
    const T w0 = w[0];
    if (nr >= 4) {
        const int64_t o1 = o[1], o2 = o[2], o3 = o[3];
        const T w1 = w[1], w2 = w[2], w3 = w[3];
        DK__RA_SWEEP(DK__RA_TAP(0) DK__RA_TAP(1) DK__RA_TAP(2) DK__RA_TAP(3))
    } else if (nr == 3) {
        const int64_t o1 = o[1], o2 = o[2];
        const T w1 = w[1], w2 = w[2];
        DK__RA_SWEEP(DK__RA_TAP(0) DK__RA_TAP(1) DK__RA_TAP(2))
    } else if (nr == 2) {
        const int64_t o1 = o[1];
        const T w1 = w[1];
        DK__RA_SWEEP(DK__RA_TAP(0) DK__RA_TAP(1))
    } else {
        DK__RA_SWEEP(DK__RA_TAP(0))
    }
#undef DK__RA_SWEEP
#undef DK__RA_TAP
}

/* *s = sum over the pairs [p0, p1) of their weights times their lanes: vb[p - vb0] (sparse) or
 * the row buffer t at the pair (dense; t starts at column c0). */
static inline void DK_TFN(dk__ra_bin_dot)(V4 *s, const PAIR *pr, int64_t p0, int64_t p1, const V4 *vb, int64_t vb0,
                                          const T *t, int64_t c0)
{
    V4 acc = {0, 0, 0, 0}, w, v;
    for (int64_t p = p0; p < p1; ++p) {
        DK_TFN(dk_ld4)(&w, pr[p].w);
        if (vb) v = vb[p - vb0];
        else DK_TFN(dk_ld4)(&v, t + 2 * ((int64_t)pr[p].a - c0));
        acc += w * v;
    }
    *s = acc;
}

/* One bin row of both channels: acc2[2 * pw + ch] = (lane ch) + (lane ch + 2) of the bin's dot,
 * two bins per shuffle. */
static inline void DK_TFN(dk__ra_bin_row)(T *restrict acc2, const PAIR *pr, const int64_t *pb, int64_t PW, const V4 *vb,
                                          const T *t, int64_t c0)
{
    int64_t pw = 0;
    for (; pw + 2 <= PW; pw += 2) {
        V4 s0, s1;
        DK_TFN(dk__ra_bin_dot)(&s0, pr, pb[pw], pb[pw + 1], vb, pb[0], t, c0);
        DK_TFN(dk__ra_bin_dot)(&s1, pr, pb[pw + 1], pb[pw + 2], vb, pb[0], t, c0);
        const V4 r = DK_SHUF(s0, s1, 0, 1, 4, 5) + DK_SHUF(s0, s1, 2, 3, 6, 7);
        DK_TFN(dk_st4)(acc2 + 2 * pw, &r);
    }
    if (pw < PW) {
        V4 s;
        DK_TFN(dk__ra_bin_dot)(&s, pr, pb[pw], pb[pw + 1], vb, pb[0], t, c0);
        acc2[2 * pw] = s[0] + s[2];
        acc2[2 * pw + 1] = s[1] + s[3];
    }
}

/* A bin row's first four y taps as buffer offsets and weights (rows idx, weights w, nr of them;
 * row r at buf + (r - rbase) * sy), padded with the first row at weight 0: the one-pass rows
 * below keep them in registers. */
static inline void DK_TFN(dk__ra_taps4)(const int32_t *idx, const T *w, int64_t nr, int64_t rbase, int64_t sy,
                                        int64_t o[4], T wt[4])
{
    for (int i = 0; i < 4; ++i) {
        o[i] = ((int64_t)idx[i < nr ? i : 0] - rbase) * sy;
        wt[i] = i < nr ? w[i] : (T)0;
    }
}

/* One bin row of both channels in one pass, for at most four y taps (rows idx, weights w; row r
 * at buf + (r - rbase) * sy): for each bin, sum over its pairs of the pair's weights times the
 * y-weighted sum of its four lanes, which dk__ra_sparse_rows and dk__ra_bin_row do in two
 * passes through a per-pair buffer. acc2 as in dk__ra_bin_row. The taps' offsets and weights
 * stay in registers for the whole row; each pair costs its loads and multiply-adds only. */
static inline void DK_TFN(dk__ra_sparse_bin_row)(T *restrict acc2, const PAIR *pr, const int64_t *pb, int64_t PW,
                                                 const T *buf, int64_t sy, int64_t rbase, const int32_t *idx,
                                                 const T *w, int64_t nr)
{
    int64_t o[4];
    T wt[4];
    DK_TFN(dk__ra_taps4)(idx, w, nr, rbase, sy, o, wt);
#define DK__RA_TAP(i)              \
    DK_TFN(dk_ld4)(&x, pa + o##i); \
    v += w##i * x;
#define DK__RA_BIN(s, p0, p1, TAPS)                   \
    do {                                              \
        V4 a = {0, 0, 0, 0}, x, pwt;                  \
        for (int64_t p = (p0); p < (p1); ++p) {       \
            const T *pa = buf + 2 * (int64_t)pr[p].a; \
            V4 v = {0, 0, 0, 0};                      \
            TAPS                                      \
            DK_TFN(dk_ld4)(&pwt, pr[p].w);            \
            a += pwt * v;                             \
        }                                             \
        s = a;                                        \
    } while (0)
#define DK__RA_ROW(TAPS)                                                            \
    do {                                                                            \
        int64_t pw = 0;                                                             \
        for (; pw + 2 <= PW; pw += 2) {                                             \
            V4 s0, s1;                                                              \
            DK__RA_BIN(s0, pb[pw], pb[pw + 1], TAPS);                               \
            DK__RA_BIN(s1, pb[pw + 1], pb[pw + 2], TAPS);                           \
            const V4 r = DK_SHUF(s0, s1, 0, 1, 4, 5) + DK_SHUF(s0, s1, 2, 3, 6, 7); \
            DK_TFN(dk_st4)(acc2 + 2 * pw, &r);                                      \
        }                                                                           \
        if (pw < PW) {                                                              \
            V4 s;                                                                   \
            DK__RA_BIN(s, pb[pw], pb[pw + 1], TAPS);                                \
            acc2[2 * pw] = s[0] + s[2];                                             \
            acc2[2 * pw + 1] = s[1] + s[3];                                         \
        }                                                                           \
    } while (0)
    const int64_t o0 = o[0], o1 = o[1], o2 = o[2], o3 = o[3];
    const T w0 = wt[0], w1 = wt[1], w2 = wt[2], w3 = wt[3];
    if (nr >= 4) DK__RA_ROW(DK__RA_TAP(0) DK__RA_TAP(1) DK__RA_TAP(2) DK__RA_TAP(3));
    else if (nr == 3) DK__RA_ROW(DK__RA_TAP(0) DK__RA_TAP(1) DK__RA_TAP(2));
    else if (nr == 2) DK__RA_ROW(DK__RA_TAP(0) DK__RA_TAP(1));
    else DK__RA_ROW(DK__RA_TAP(0));
    (void)o1, (void)o2, (void)o3, (void)w1, (void)w2, (void)w3;
#undef DK__RA_ROW
#undef DK__RA_BIN
#undef DK__RA_TAP
}

/*
 * Forward of RoI k on one channel pair: sc->acc[2 * (ph * PW + pw) + ch] = out[ph, pw]. buf is
 * the interleaved band (Note [Channel pairs]): row r at buf + (r - rbase) * 2W.
 */
static void DK_TFN(dk__ra_forward_roi)(const TABLES *tb, int64_t k, int64_t PH, int64_t PW, int64_t W, const T *buf,
                                       int64_t rbase, const SCRATCH *sc)
{
    const int64_t *yb = tb->ybeg + k * PH, *pb = tb->pbeg + k * PW;
    const PAIR *pr = tb->pairs;
    const int64_t sy = 2 * W;
    T *restrict acc = sc->acc;
    if (tb->dense[k]) {
        T *restrict t = sc->t;
        const int64_t c0 = tb->c0[k], span = tb->span[k];
        for (int64_t ph = 0; ph < PH; ++ph) {
            memset(t, 0, (size_t)(2 * span + 4) * sizeof *t);
            for (int64_t e = yb[ph]; e < yb[ph + 1]; e += 4)
                DK_TFN(dk__ra_vsum)(t, 2 * span, buf, sy, rbase, 2 * c0, tb->yidx + e, tb->yw + e, yb[ph + 1] - e);
            DK_TFN(dk__ra_bin_row)(acc + 2 * ph * PW, pr, pb, PW, NULL, t, c0);
        }
    } else {
        const PAIR *q = pr + pb[0];
        const int64_t np = pb[PW] - pb[0];
        for (int64_t ph = 0; ph < PH; ++ph) {
            const int64_t e0 = yb[ph], ny = yb[ph + 1] - e0;
            if (ny == 0) {
                memset(acc + 2 * ph * PW, 0, (size_t)(2 * PW) * sizeof *acc);
                continue;
            }
            if (ny <= 4) {
                DK_TFN(dk__ra_sparse_bin_row)(acc + 2 * ph * PW, pr, pb, PW, buf, sy, rbase, tb->yidx + e0, tb->yw + e0,
                                              ny);
                continue;
            }
            for (int64_t i = 0; i < ny; i += 4)
                DK_TFN(dk__ra_sparse_rows)(sc->vb, q, np, buf, sy, rbase, tb->yidx + e0 + i, tb->yw + e0 + i, ny - i,
                                           i == 0);
            DK_TFN(dk__ra_bin_row)(acc + 2 * ph * PW, pr, pb, PW, sc->vb, NULL, 0);
        }
    }
}

/* g2 = (g0, g1, g0, g1) of bin (ph, pw) of the interleaved grad_output block. */
static inline void DK_TFN(dk__ra_g2)(V4 *g2, const T *g)
{
    const V4 r = {g[0], g[1], g[0], g[1]};
    *g2 = r;
}

/* The sparse backward of one bin row with at most four y taps (rows idx, weights w; row r at
 * buf + r * sy): for each pair of each bin, its weights times the bin's g2, added to its four
 * lanes in each tap row. The same operations in the same order as the general loop of
 * dk__ra_backward_roi (so the same bits), with the taps' offsets and weights in registers and
 * no per-pair buffer. Pairs may overlap (the edge case of Note [Pairs]): each update is a
 * complete load-add-store before the next. */
static inline void DK_TFN(dk__ra_sparse_bwd_row)(T *buf, const PAIR *pr, const int64_t *pb, int64_t PW, const T *g,
                                                 int64_t sy, const int32_t *idx, const T *w, int64_t nr)
{
    int64_t o[4];
    T wt[4];
    DK_TFN(dk__ra_taps4)(idx, w, nr, 0, sy, o, wt);
#define DK__RA_TAP(i)              \
    DK_TFN(dk_ld4)(&x, pa + o##i); \
    x += w##i * v;                 \
    DK_TFN(dk_st4)(pa + o##i, &x);
#define DK__RA_ROW(TAPS)                                \
    for (int64_t pw = 0; pw < PW; ++pw) {               \
        V4 g2, pwt, v, x;                               \
        DK_TFN(dk__ra_g2)(&g2, g + 2 * pw);             \
        for (int64_t p = pb[pw]; p < pb[pw + 1]; ++p) { \
            T *pa = buf + 2 * (int64_t)pr[p].a;         \
            DK_TFN(dk_ld4)(&pwt, pr[p].w);              \
            v = pwt * g2;                               \
            TAPS                                        \
        }                                               \
    }
    const int64_t o0 = o[0], o1 = o[1], o2 = o[2], o3 = o[3];
    const T w0 = wt[0], w1 = wt[1], w2 = wt[2], w3 = wt[3];
    if (nr >= 4) {
        DK__RA_ROW(DK__RA_TAP(0) DK__RA_TAP(1) DK__RA_TAP(2) DK__RA_TAP(3))
    } else if (nr == 3) {
        DK__RA_ROW(DK__RA_TAP(0) DK__RA_TAP(1) DK__RA_TAP(2))
    } else if (nr == 2) {
        DK__RA_ROW(DK__RA_TAP(0) DK__RA_TAP(1))
    } else {
        DK__RA_ROW(DK__RA_TAP(0))
    }
    (void)o1, (void)o2, (void)o3, (void)w1, (void)w2, (void)w3;
#undef DK__RA_ROW
#undef DK__RA_TAP
}

/*
 * Backward of RoI k on one channel pair: buf[r, x, ch] += sum over (ph, pw) of
 * g[ph, pw, ch] times the separable weight, in a fixed order (Note [Deterministic backward]);
 * g is sc->acc, buf holds all H rows (rbase 0).
 */
static void DK_TFN(dk__ra_backward_roi)(const TABLES *tb, int64_t k, int64_t PH, int64_t PW, int64_t W, T *buf,
                                        const SCRATCH *sc)
{
    const int64_t *yb = tb->ybeg + k * PH, *pb = tb->pbeg + k * PW;
    const PAIR *pr = tb->pairs;
    const int64_t sy = 2 * W;
    const T *restrict g = sc->acc;
    if (tb->dense[k]) {
        T *restrict u = sc->t;
        const int64_t c0 = tb->c0[k], span = tb->span[k];
        for (int64_t ph = 0; ph < PH; ++ph) {
            if (yb[ph] == yb[ph + 1]) continue;
            memset(u, 0, (size_t)(2 * span + 4) * sizeof *u);
            for (int64_t pw = 0; pw < PW; ++pw) {
                V4 g2, w, x;
                DK_TFN(dk__ra_g2)(&g2, g + 2 * (ph * PW + pw));
                for (int64_t p = pb[pw]; p < pb[pw + 1]; ++p) {
                    T *up = u + 2 * ((int64_t)pr[p].a - c0);
                    DK_TFN(dk_ld4)(&w, pr[p].w);
                    DK_TFN(dk_ld4)(&x, up);
                    x += w * g2;
                    DK_TFN(dk_st4)(up, &x);
                }
            }
            for (int64_t ey = yb[ph]; ey < yb[ph + 1]; ++ey) {
                T *restrict row = buf + tb->yidx[ey] * sy + 2 * c0;
                const T wy = tb->yw[ey];
                for (int64_t j = 0; j < 2 * span; ++j) row[j] += wy * u[j];
            }
        }
    } else {
        const PAIR *q = pr + pb[0];
        const int64_t np = pb[PW] - pb[0];
        int64_t *restrict off = sc->off;
        V4 *restrict vb = sc->vb;
        for (int64_t ph = 0; ph < PH; ++ph) {
            const int64_t e0 = yb[ph], ny = yb[ph + 1] - e0;
            if (ny == 0) continue;
            if (ny <= 4) {
                DK_TFN(dk__ra_sparse_bwd_row)(buf, pr, pb, PW, g + 2 * ph * PW, sy, tb->yidx + e0, tb->yw + e0, ny);
                continue;
            }
            for (int64_t i = 0; i < ny; ++i) off[i] = tb->yidx[e0 + i] * sy;
            for (int64_t pw = 0; pw < PW; ++pw) {
                V4 g2, w;
                DK_TFN(dk__ra_g2)(&g2, g + 2 * (ph * PW + pw));
                for (int64_t p = pb[pw]; p < pb[pw + 1]; ++p) {
                    DK_TFN(dk_ld4)(&w, pr[p].w);
                    vb[p - pb[0]] = w * g2;
                }
            }
            /* Pairs may overlap (the edge case of Note [Pairs]): each update is a complete
             * load-add-store before the next. */
            for (int64_t p = 0; p < np; ++p) {
                T *pa = buf + 2 * (int64_t)q[p].a;
                for (int64_t i = 0; i < ny; ++i) {
                    V4 x;
                    DK_TFN(dk_ld4)(&x, pa + off[i]);
                    x += tb->yw[e0 + i] * vb[p];
                    DK_TFN(dk_st4)(pa + off[i], &x);
                }
            }
        }
    }
}
/* Backward of one RoI (axes ay, ax) on one channel pair per sample, as the references do it
 * (Note [Non-finite values]): each sample of each bin adds g * w / count to its four taps,
 * with g[ph, pw, ch] from sc->acc; buf as in dk__ra_backward_roi. */
static void DK_TFN(dk__ra_backward_roi_exact)(const AXIS *ay, const AXIS *ax, int64_t PH, int64_t PW, int64_t H,
                                              int64_t W, T *buf, const SCRATCH *sc)
{
    const T count = DK_TFN(dk_roi_align_count)(ay, ax);
    for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw)
            for (int64_t iy = 0; iy < ay->grid; ++iy) {
                const T y = DK_TFN(dk_roi_align_axis_sample)(ay, ph, iy);
                for (int64_t ix = 0; ix < ax->grid; ++ix) {
                    const T x = DK_TFN(dk_roi_align_axis_sample)(ax, pw, ix);
                    DK_TFN(dk_roi_align_bilinear) b;
                    if (!DK_TFN(dk_roi_align_bilinear_init)(y, x, H, W, &b)) continue;
                    for (int64_t i = 0; i < 2; ++i) {
                        const T g = sc->acc[2 * (ph * PW + pw) + i];
                        T *p = buf + i;
                        p[2 * (b.y_low * W + b.x_low)] += g * b.w1 / count;
                        p[2 * (b.y_low * W + b.x_high)] += g * b.w2 / count;
                        p[2 * (b.y_high * W + b.x_low)] += g * b.w3 / count;
                        p[2 * (b.y_high * W + b.x_high)] += g * b.w4 / count;
                    }
                }
            }
}

/* One sample coordinate along one axis and its taps (ok: it contributes). */
typedef struct {
    T v;
    int ok;
    DK_TFN(dk_roi_align_taps) t;
} SAMPLE;

/* The samples of every bin of one axis: s[p * grid + i] for bin p, sample i. */
static void DK_TFN(dk__ra_axis_samples)(SAMPLE *s, const AXIS *a, int64_t P, int64_t size)
{
    for (int64_t p = 0; p < P; ++p)
        for (int64_t i = 0; i < a->grid; ++i) {
            SAMPLE *e = &s[p * a->grid + i];
            e->v = DK_TFN(dk_roi_align_axis_sample)(a, p, i);
            e->ok = DK_TFN(dk_roi_align_taps_init)(e->v, size, &e->t);
            if (!e->ok) { /* taps_init leaves t unset; dk__ra_max_bin still forms row pointers */
                e->t.lo = e->t.hi = 0;
                e->t.wlo = e->t.whi = (T)0;
            }
        }
}

/*
 * Max-pooled bin from per-axis sample tables, on a T plane with row stride sy and unit column
 * stride: the same computation, operation for operation, as dk_roi_align_forward_max_* (same
 * taps, w1..w4 as the same products, the same sum order), so results and argmax are identical;
 * only the per-sample geometry is hoisted out of the bins and channels.
 */
static inline T DK_TFN(dk__ra_max_bin)(const T *plane, int64_t sy, const SAMPLE *ys, int64_t gh, const SAMPLE *xs,
                                       int64_t gw, T *argmax_y, T *argmax_x)
{
    if (gh <= 0 || gw <= 0) {
        *argmax_y = *argmax_x = (T)-1;
        return (T)0;
    }
    T maxval = (T)-FLT_MAX;
    int64_t by = -1, bx = -1;
    for (int64_t iy = 0; iy < gh; ++iy) {
        const SAMPLE *y = &ys[iy];
        const T *rlo = plane + y->t.lo * sy, *rhi = plane + y->t.hi * sy;
        for (int64_t ix = 0; ix < gw; ++ix) {
            const SAMPLE *x = &xs[ix];
            T val = (T)0;
            if (y->ok && x->ok) {
                const T w1 = y->t.wlo * x->t.wlo, w2 = y->t.wlo * x->t.whi;
                const T w3 = y->t.whi * x->t.wlo, w4 = y->t.whi * x->t.whi;
                val = w1 * rlo[x->t.lo] + w2 * rlo[x->t.hi] + w3 * rhi[x->t.lo] + w4 * rhi[x->t.hi];
            }
            /* No branch: on real data "is this sample the new max" is a coin toss that the
             * branch predictor loses. The winner is kept as indices, selected with a mask (gcc
             * turns plain ?: selects back into a branch here), the maximum as MAXSS. */
            const int64_t m = -(int64_t)(val > maxval);
            by ^= (by ^ iy) & m;
            bx ^= (bx ^ ix) & m;
            maxval = val > maxval ? val : maxval;
        }
    }
    *argmax_y = by >= 0 ? ys[by].v : (T)-1;
    *argmax_x = bx >= 0 ? xs[bx].v : (T)-1;
    return maxval;
}

#include "roi_align/roi_align_names_end_tmpl.h"
#endif
