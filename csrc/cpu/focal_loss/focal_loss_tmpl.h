/*
 * focal_loss/focal_loss_tmpl.h — the CPU focal losses for one storage type (Note [Templates in C]
 * in kernels/dk_template.h), instantiated by focal_loss_cpu.c; the split of the work is Note
 * [Focal loss on a CPU] in focal_loss_cpu.h.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* Columns [c0, c0 + len) of row n of a [N, C] array at p0, strides s0 and s1, as compute-type
 * values: the array's own memory where it already is such an array, else gathered into buf. */
static inline const DK_T *DK_SFN(dk__fl_row_at)(const DK_S *p0, int64_t s0, int64_t s1, int64_t n, int64_t c0,
                                                int64_t len, DK_T *buf)
{
    const DK_S *p = p0 + n * s0;
    if (DK_S_IS_T && s1 == 1) return (const DK_T *)(const void *)(p + c0);
    for (int64_t k = 0; k < len; k++) buf[k] = DK_LOAD(p[(c0 + k) * s1]);
    return buf;
}

/* dk__fl_row_at of a [N, C] tensor. */
static inline const DK_T *DK_SFN(dk__fl_row)(const dk_tensor *t, int64_t n, int64_t c0, int64_t len, DK_T *buf)
{
    return DK_SFN(dk__fl_row_at)((const DK_S *)dk_tensor_data(t), dk_tensor_stride(t, 0), dk_tensor_stride(t, 1), n, c0,
                                 len, buf);
}

/* dk__fl_row_at of the input, with the strides cx keeps (the softmax reads it per row). */
static inline const DK_T *DK_SFN(dk__fl_input_row)(const dk__fl_ctx *cx, int64_t n, int64_t c0, int64_t len, DK_T *buf)
{
    return DK_SFN(dk__fl_row_at)((const DK_S *)dk_tensor_data(cx->input), cx->xs[0], cx->xs[1], n, c0, len, buf);
}

/* buf's len values to columns [c0, c0 + len) of row n of a [N, C] tensor. */
static inline void DK_SFN(dk__fl_store_row)(dk_tensor *t, int64_t n, int64_t c0, int64_t len, const DK_T *buf)
{
    DK_S *p = (DK_S *)dk_tensor_data(t) + n * dk_tensor_stride(t, 0);
    const int64_t sc = dk_tensor_stride(t, 1);
    for (int64_t k = 0; k < len; k++) p[(c0 + k) * sc] = DK_STORE(buf[k]);
}

/* Row n's targets over columns [c0, c0 + len): the float targets' values, or class index l as
 * 0s with a 1 at column l; *w the row's weight (ops/focal_loss.h). */
static inline const DK_T *DK_SFN(dk__fl_targets)(const dk__fl_ctx *cx, int64_t n, int64_t c0, int64_t len, DK_T *buf,
                                                 DK_T *w)
{
    *w = 1;
    if (!cx->classes) return DK_SFN(dk__fl_row)(cx->targets, n, c0, len, buf);
    const int64_t l = dk__fl_label(cx, n);
    for (int64_t k = 0; k < len; k++) buf[k] = 0;
    if (l >= c0 && l < c0 + len) buf[l - c0] = 1;
    if (cx->weight && l >= 0 && l < cx->C)
        *w = DK_LOAD(((const DK_S *)dk_tensor_data(cx->weight))[l * dk_tensor_stride(cx->weight, 0)]);
    return buf;
}

/* The loop the math runs in: plain arrays, `kind` a constant at each call (so that it vectorises). */
static inline
    __attribute__((always_inline)) void DK_SFN(dk__fl_sig_losses)(const DK_T *restrict x, const DK_T *restrict t,
                                                                  DK_T *restrict loss, int64_t len, DK_T g, DK_T ap,
                                                                  DK_T an, int kind)
{
    for (int64_t k = 0; k < len; k++) loss[k] = DK_TFN(dk_focal_sigmoid_loss)(x[k], t[k], g, ap, an, kind);
}

/* The fused forward's loop (Note [The backward in the forward] in ops/focal_loss.h): the losses,
 * and the gradients for grad_output 1, w d/dx gs, gs = 1 / divisor. */
static inline
    __attribute__((always_inline)) void DK_SFN(dk__fl_sig_fused)(const DK_T *restrict x, const DK_T *restrict t,
                                                                 DK_T *restrict loss, DK_T *restrict gi, int64_t len,
                                                                 DK_T w, DK_T gs, DK_T g, DK_T ap, DK_T an, int kind)
{
    for (int64_t k = 0; k < len; k++) {
        DK_T dt, v;
        const DK_T dx = DK_TFN(dk_focal_sigmoid_grad)(x[k], t[k], g, ap, an, kind, &dt, &v);
        loss[k] = v;
        gi[k] = w * dx * gs;
    }
}

/* Sigmoid forward over flat elements [i0, i1) (row-major): written, or added to acc's lanes (and
 * the fused gradients written). */
DK__ALWAYS_INLINE static inline void DK_SFN(dk__fl_sig_forward_range)(const dk__fl_ctx *cx, int64_t i0, int64_t i1,
                                                                      double *acc)
{
    DK_T xb[DK__FL_BLOCK], tb[DK__FL_BLOCK], lb[DK__FL_BLOCK], ib[DK__FL_BLOCK];
    const DK_T g = (DK_T)cx->gamma, ap = (DK_T)cx->alpha_pos, an = (DK_T)cx->alpha_neg;
    const DK_T gs = (DK_T)(1.0 / cx->divisor); /* the backward's for grad_output 1 */
    const int64_t C = cx->C;
    for (int64_t i = i0; i < i1;) {
        const int64_t n = i / C, c0 = i % C, rest = C - c0 < i1 - i ? C - c0 : i1 - i;
        const int64_t len = rest < DK__FL_BLOCK ? rest : DK__FL_BLOCK;
        DK_T w;
        const DK_T *xp = DK_SFN(dk__fl_input_row)(cx, n, c0, len, xb);
        const DK_T *tp = DK_SFN(dk__fl_targets)(cx, n, c0, len, tb, &w);
        if (cx->fused) {
            if (cx->kind == DK_FOCAL_POW_2)
                DK_SFN(dk__fl_sig_fused)(xp, tp, lb, ib, len, w, gs, g, ap, an, DK_FOCAL_POW_2);
            else DK_SFN(dk__fl_sig_fused)(xp, tp, lb, ib, len, w, gs, g, ap, an, DK_FOCAL_POW_ANY);
            DK_SFN(dk__fl_store_row)(cx->fused, n, c0, len, ib);
        } else if (cx->kind == DK_FOCAL_POW_2) {
            DK_SFN(dk__fl_sig_losses)(xp, tp, lb, len, g, ap, an, DK_FOCAL_POW_2);
        } else {
            DK_SFN(dk__fl_sig_losses)(xp, tp, lb, len, g, ap, an, DK_FOCAL_POW_ANY);
        }
        if (cx->reduction == DK_FOCAL_SUM) {
            for (int64_t k = 0; k < len; k++) acc[(i + k) & 3] += (double)(w * lb[k]);
        } else {
            for (int64_t k = 0; k < len; k++) lb[k] = w * lb[k];
            DK_SFN(dk__fl_store_row)(cx->out, n, c0, len, lb);
        }
        i += len;
    }
}

/* The backward's loop: gi = w d/dx * gr, and where `want_dt` dt = d/dt * gr. */
static inline
    __attribute__((always_inline)) void DK_SFN(dk__fl_sig_grads)(const DK_T *restrict x, const DK_T *restrict t,
                                                                 const DK_T *restrict gr, DK_T *restrict gi,
                                                                 DK_T *restrict gt, int64_t len, DK_T w, DK_T g,
                                                                 DK_T ap, DK_T an, int kind, bool want_dt)
{
    for (int64_t k = 0; k < len; k++) {
        DK_T dt, loss;
        const DK_T dx = DK_TFN(dk_focal_sigmoid_grad)(x[k], t[k], g, ap, an, kind, &dt, &loss);
        gi[k] = w * dx * gr[k];
        if (want_dt) gt[k] = dt * gr[k];
    }
}

DK__ALWAYS_INLINE static inline void DK_SFN(dk__fl_sig_backward_range)(const dk__fl_ctx *cx, int64_t i0, int64_t i1)
{
    DK_T xb[DK__FL_BLOCK], tb[DK__FL_BLOCK], gb[DK__FL_BLOCK], ib[DK__FL_BLOCK], db[DK__FL_BLOCK];
    const DK_T g = (DK_T)cx->gamma, ap = (DK_T)cx->alpha_pos, an = (DK_T)cx->alpha_neg;
    const int64_t C = cx->C;
    const bool want_dt = cx->grad_targets != NULL;
    /* a reduced loss: one gradient for every element, divided once */
    const DK_T gs = cx->reduction == DK_FOCAL_SUM
                        ? (DK_T)((double)DK_LOAD(*(const DK_S *)dk_tensor_data(cx->grad_output)) / cx->divisor)
                        : (DK_T)0;
    for (int64_t i = i0; i < i1;) {
        const int64_t n = i / C, c0 = i % C, rest = C - c0 < i1 - i ? C - c0 : i1 - i;
        const int64_t len = rest < DK__FL_BLOCK ? rest : DK__FL_BLOCK;
        DK_T w;
        const DK_T *xp = DK_SFN(dk__fl_input_row)(cx, n, c0, len, xb);
        const DK_T *tp = DK_SFN(dk__fl_targets)(cx, n, c0, len, tb, &w);
        const DK_T *gp = gb;
        if (cx->reduction == DK_FOCAL_SUM)
            for (int64_t k = 0; k < len; k++) gb[k] = gs;
        else gp = DK_SFN(dk__fl_row)(cx->grad_output, n, c0, len, gb);
        if (cx->kind == DK_FOCAL_POW_2) {
            if (want_dt) DK_SFN(dk__fl_sig_grads)(xp, tp, gp, ib, db, len, w, g, ap, an, DK_FOCAL_POW_2, true);
            else DK_SFN(dk__fl_sig_grads)(xp, tp, gp, ib, db, len, w, g, ap, an, DK_FOCAL_POW_2, false);
        } else {
            if (want_dt) DK_SFN(dk__fl_sig_grads)(xp, tp, gp, ib, db, len, w, g, ap, an, DK_FOCAL_POW_ANY, true);
            else DK_SFN(dk__fl_sig_grads)(xp, tp, gp, ib, db, len, w, g, ap, an, DK_FOCAL_POW_ANY, false);
        }
        DK_SFN(dk__fl_store_row)(cx->out, n, c0, len, ib);
        if (want_dt) DK_SFN(dk__fl_store_row)(cx->grad_targets, n, c0, len, db);
        i += len;
    }
}

DK__ALWAYS_INLINE static inline void DK_SFN(dk__fl_sig_body)(dk__fl_ctx *cx)
{
    const int64_t total = cx->N * cx->C;
    for (int64_t j; (j = dk_parallel_claim(&cx->counter)) < cx->chunks;) {
        const int64_t i0 = j * DK_FOCAL_CHUNK, i1 = total - i0 < DK_FOCAL_CHUNK ? total : i0 + DK_FOCAL_CHUNK;
        if (cx->grad_output) {
            DK_SFN(dk__fl_sig_backward_range)(cx, i0, i1);
            continue;
        }
        double acc[4] = {0, 0, 0, 0};
        DK_SFN(dk__fl_sig_forward_range)(cx, i0, i1, acc);
        if (cx->partials) cx->partials[j] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
}

/* The sigmoid's worker and its AVX2 twin (DK__FL_WORKERS), 8 lanes to a vector. Measured with bench_focal_loss.py (100,000 x 80,
 * one thread, a 2-core AMD EPYC VM with AVX2, 2026-11-28, medians of 5, two runs): forward
 * ("sum", its gradient fused) 30-33 ms against 52-56 ms as built, forward + backward 44-47 ms
 * against 74-76 ms; the loops vectorise at all since their math is always inlined (DK_INLINE_ALWAYS
 * in kernels/dk_hd.h: GCC had called a clone of dk_focal_sigmoid_grad from the fused forward's
 * loop, element by element). */
DK__FL_WORKERS(dk__fl_sig_worker, dk__fl_sig_body)

/* ---- softmax ------------------------------------------------------------------------------- */

/* Rows n .. n + R - 1's maxima, sums of exps and log-sum-exps (R <= DK__FL_ROWS), each as
 * dk_focal_softmax_row (kernels/focal_loss_math.h) takes it, in the same lanes (Note [A row in
 * lanes]), a block of columns at a time (DK__FL_BLOCK is a multiple of the lanes, so column c is in
 * lane c % 8 here too): eight columns' lanes at a time, which vectorises (an 8-lane max and
 * addition with AVX2, the workers' twins), and the exps in a loop of their own, into eb[r]
 * (DK__FL_BLOCK values): a row of up to DK__FL_BLOCK columns leaves its exps there for the
 * backward (Note [The softmax's backward]). Each step is taken for every row before the next
 * (Note [Rows together]). */
DK__ALWAYS_INLINE static inline void DK_SFN(dk__fl_soft_stats)(const dk__fl_ctx *cx, int64_t n, int R, DK_T *mx,
                                                               DK_T *total, DK_T *lse, DK_T (*eb)[DK__FL_BLOCK])
{
    enum { L = DK_FOCAL_ROW_LANES };
    DK_T xb[DK__FL_BLOCK];
    for (int r = 0; r < R; r++) {
        DK_T m[L]; /* one row's lanes in a local array, which vectorises */
        for (int j = 0; j < L; j++) m[j] = -(DK_T)INFINITY;
        for (int64_t c0 = 0; c0 < cx->C; c0 += DK__FL_BLOCK) {
            const int64_t len = cx->C - c0 < DK__FL_BLOCK ? cx->C - c0 : DK__FL_BLOCK;
            const DK_T *xp = DK_SFN(dk__fl_input_row)(cx, n + r, c0, len, xb);
            int64_t k = 0;
            for (; k + L <= len; k += L)
                for (int j = 0; j < L; j++) m[j] = xp[k + j] > m[j] ? xp[k + j] : m[j];
            for (; k < len; k++) m[k % L] = xp[k] > m[k % L] ? xp[k] : m[k % L];
        }
        mx[r] = DK_TFN(dk_focal_row_max)(m);
    }
    for (int r = 0; r < R; r++) {
        DK_T sum[L];
        for (int j = 0; j < L; j++) sum[j] = 0;
        for (int64_t c0 = 0; c0 < cx->C; c0 += DK__FL_BLOCK) {
            const int64_t len = cx->C - c0 < DK__FL_BLOCK ? cx->C - c0 : DK__FL_BLOCK;
            const DK_T *xp = DK_SFN(dk__fl_input_row)(cx, n + r, c0, len, xb);
            const DK_T top = mx[r];
            DK_T *e = eb[r];
            for (int64_t k = 0; k < len; k++) e[k] = DK_TFN(dk_focal_expneg)(xp[k] - top);
            int64_t k = 0;
            for (; k + L <= len; k += L)
                for (int j = 0; j < L; j++) sum[j] += e[k + j];
            for (; k < len; k++) sum[k % L] += e[k];
        }
        total[r] = DK_TFN(dk_focal_row_sum)(sum);
    }
    for (int r = 0; r < R; r++) lse[r] = DK_TFN(dk_focal_log)(total[r]);
}

/* Rows n .. n + R - 1's losses v[r] (w included) and their factors b[r] (ops/focal_loss.h); 0 and
 * 0 for a target outside [0, C) (negative: ignored; C or more: refused by ops/focal_loss.c), whose
 * statistics are taken all the same and not used. mx, total and eb: dk__fl_soft_stats'. */
DK__ALWAYS_INLINE static inline void DK_SFN(dk__fl_soft_rows)(const dk__fl_ctx *cx, int64_t n, int R, DK_T *mx,
                                                              DK_T *total, DK_T *v, DK_T *b, DK_T (*eb)[DK__FL_BLOCK])
{
    DK_T lse[DK__FL_ROWS];
    DK_SFN(dk__fl_soft_stats)(cx, n, R, mx, total, lse, eb);
    const DK_S *x = (const DK_S *)dk_tensor_data(cx->input);
    for (int r = 0; r < R; r++) {
        const int64_t l = dk__fl_label(cx, n + r);
        v[r] = 0, b[r] = 0;
        if (l < 0 || l >= cx->C) continue;
        DK_T buff;
        v[r] = DK_TFN(dk_focal_softmax_loss)(DK_LOAD(x[(n + r) * cx->xs[0] + l * cx->xs[1]]), mx[r], lse[r],
                                             (DK_T)cx->gamma, (DK_T)cx->alpha_pos, &buff);
        DK_T w = 1;
        if (cx->weight) w = DK_LOAD(((const DK_S *)dk_tensor_data(cx->weight))[l * dk_tensor_stride(cx->weight, 0)]);
        b[r] = buff * w;
        v[r] = v[r] * w;
    }
}

DK__ALWAYS_INLINE static inline void DK_SFN(dk__fl_soft_forward_body)(dk__fl_ctx *cx)
{
    DK_S *out = (DK_S *)dk_tensor_data(cx->out);
    const int64_t so = cx->reduction == DK_FOCAL_SUM ? 0 : dk_tensor_stride(cx->out, 0);
    DK_T eb[DK__FL_ROWS][DK__FL_BLOCK];
    for (int64_t j; (j = dk_parallel_claim(&cx->counter)) < cx->chunks;) {
        const int64_t n0 = j * DK_FOCAL_CHUNK_ROWS;
        const int64_t n1 = cx->N - n0 < DK_FOCAL_CHUNK_ROWS ? cx->N : n0 + DK_FOCAL_CHUNK_ROWS;
        double acc[4] = {0, 0, 0, 0};
        for (int64_t n = n0; n < n1; n += DK__FL_ROWS) {
            const int R = n1 - n < DK__FL_ROWS ? (int)(n1 - n) : DK__FL_ROWS;
            DK_T mx[DK__FL_ROWS], total[DK__FL_ROWS], v[DK__FL_ROWS], b[DK__FL_ROWS];
            DK_SFN(dk__fl_soft_rows)(cx, n, R, mx, total, v, b, eb);
            for (int r = 0; r < R; r++)
                if (cx->reduction == DK_FOCAL_SUM) acc[(n + r) & 3] += (double)v[r];
                else out[(n + r) * so] = DK_STORE(v[r]);
        }
        if (cx->partials) cx->partials[j] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
}

/* Backward: a row's gradients, a block of columns at a time, in a loop that vectorises; each
 * column's probability is its exp from the row's statistics over their total (Note [The softmax's
 * backward]): kept from the statistics' pass where the row is one block, else taken again.
 * Measured with bench_focal_loss.py's MMCV softmax step (100,000 x 80, one thread, a 2-core AMD
 * EPYC VM with AVX2, 2026-11-28, this and the previous build alternating in separate processes,
 * two runs each, medians of 5): 37.7-39.9 ms against 44.9-51.4 ms before (the 1 - s polynomial
 * and the strides kept in the context included); the torch reference took 31-44 ms in the same
 * runs, so the op is level with it still: the forward and the backward each take a row's C exps,
 * as log_softmax and its backward do. Since then rows go eight at a time (Note [Rows together]). */
DK__ALWAYS_INLINE static inline void DK_SFN(dk__fl_soft_backward_body)(dk__fl_ctx *cx)
{
    const DK_S *go = (const DK_S *)dk_tensor_data(cx->grad_output);
    DK_S *gi = (DK_S *)dk_tensor_data(cx->out);
    const int64_t sin = dk_tensor_stride(cx->out, 0), sic = dk_tensor_stride(cx->out, 1);
    const bool sum = cx->reduction == DK_FOCAL_SUM;
    const int64_t sg = sum ? 0 : dk_tensor_stride(cx->grad_output, 0);
    DK_T xb[DK__FL_BLOCK], ebs[DK__FL_ROWS][DK__FL_BLOCK], vb[DK__FL_BLOCK];
    const bool kept = cx->C <= DK__FL_BLOCK; /* the statistics' pass leaves the row's exps in ebs */
    for (int64_t j; (j = dk_parallel_claim(&cx->counter)) < cx->chunks;) {
        const int64_t n0 = j * DK_FOCAL_CHUNK_ROWS;
        const int64_t n1 = cx->N - n0 < DK_FOCAL_CHUNK_ROWS ? cx->N : n0 + DK_FOCAL_CHUNK_ROWS;
        DK_T mxs[DK__FL_ROWS], totals[DK__FL_ROWS], vs[DK__FL_ROWS], bs[DK__FL_ROWS];
        for (int64_t n = n0; n < n1; n++) {
            const int r = (int)((n - n0) % DK__FL_ROWS);
            if (r == 0) {
                const int R = n1 - n < DK__FL_ROWS ? (int)(n1 - n) : DK__FL_ROWS;
                DK_SFN(dk__fl_soft_rows)(cx, n, R, mxs, totals, vs, bs, ebs);
            }
            const DK_T mx = mxs[r], total = totals[r], b = bs[r];
            DK_T *eb = ebs[r];
            const int64_t l = dk__fl_label(cx, n);
            const DK_T gr = sum ? (DK_T)((double)DK_LOAD(go[0]) / cx->divisor) : DK_LOAD(go[n * sg]);
            const bool live = l >= 0 && l < cx->C;
            const DK_T inv = DK_TFN(dk_focal_softmax_inv)(total);
            for (int64_t c0 = 0; c0 < cx->C; c0 += DK__FL_BLOCK) {
                const int64_t len = cx->C - c0 < DK__FL_BLOCK ? cx->C - c0 : DK__FL_BLOCK;
                if (live) {
                    if (!kept) {
                        const DK_T *xp = DK_SFN(dk__fl_input_row)(cx, n, c0, len, xb);
                        for (int64_t k = 0; k < len; k++) eb[k] = DK_TFN(dk_focal_expneg)(xp[k] - mx);
                    }
                    for (int64_t k = 0; k < len; k++) {
                        const DK_T s = DK_TFN(dk_focal_softmax_prob)(eb[k], inv);
                        vb[k] = b * ((c0 + k == l ? (DK_T)1 : (DK_T)0) - s) * gr;
                    }
                } else {
                    for (int64_t k = 0; k < len; k++) vb[k] = 0;
                }
                DK_S *o = gi + n * sin + c0 * sic;
                for (int64_t k = 0; k < len; k++) o[k * sic] = DK_STORE(vb[k]);
            }
        }
    }
}

/* The softmax's workers and their AVX2 twins (DK__FL_WORKERS; Note [A row in lanes]). */
DK__FL_WORKERS(dk__fl_soft_forward_worker, dk__fl_soft_forward_body)
DK__FL_WORKERS(dk__fl_soft_backward_worker, dk__fl_soft_backward_body)

static dk_status DK_SFN(dk__fl_run)(dk__fl_ctx *cx, int nthreads, bool softmax)
{
    void (*worker)(void *, int) = !softmax          ? DK_SFN(dk__fl_sig_worker)
                                  : cx->grad_output ? DK_SFN(dk__fl_soft_backward_worker)
                                                    : DK_SFN(dk__fl_soft_forward_worker);
#if DK__FL_AVX2
    if (softmax && cx->avx2)
        worker = cx->grad_output ? DK_SFN(dk__fl_soft_backward_worker_avx2) : DK_SFN(dk__fl_soft_forward_worker_avx2);
    if (!softmax && cx->avx2) worker = DK_SFN(dk__fl_sig_worker_avx2);
#endif
    dk_parallel_run(nthreads, &cx->counter, worker, cx);
    if (cx->partials) { /* Note [A deterministic sum] */
        double total = 0;
        for (int64_t j = 0; j < cx->chunks; j++) total += cx->partials[j];
        *(DK_S *)dk_tensor_data(cx->out) = DK_STORE((DK_T)(total / cx->divisor));
    }
    return DK_OK;
}

#endif
