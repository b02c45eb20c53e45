/*
 * rotated/box_iou_rotated_tmpl.h — the CPU kernel of box_iou_rotated and box_iou_quadri (cx->quad)
 * for one storage type: both box sets into packed compute-type arrays (any strides, 16-bit
 * widened exactly), then the rows of the output in parallel. A template (Note [Templates in C] in kernels/dk_template.h), the float
 * storage pass. Each output element is dk_rbox_overlap's (dk_quad_overlap's) value for its pair, whichever thread
 * computes it: the same bits for any thread count. Pairs whose bounding circles are apart are
 * written as the +0 dk_rbox_overlap gives them, without computing it (Note [Bounding circles]
 * in kernels/rotated_math_tmpl.h).
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* The boxes of t as packed compute-type rows of w values, and their bounding circles (x, y, r). */
static void DK_SFN(dk__bir_load)(const dk_tensor *t, int w, DK_T *dst, double *circ)
{
    int64_t s[2];
    dk_tensor_strides(t, s, 2);
    const DK_S *p = (const DK_S *)dk_tensor_data(t);
    for (int64_t i = 0; i < t->shape[0]; i++) {
        DK_T *b = dst + i * w;
        for (int d = 0; d < w; d++) b[d] = DK_LOAD(p[i * s[0] + d * s[1]]);
        if (w == 8) {
            DK_TFN(dk_quad_circle)(b, circ + 3 * i);
        } else {
            circ[3 * i] = (double)b[0], circ[3 * i + 1] = (double)b[1];
            circ[3 * i + 2] = DK_TFN(dk_rbox_radius)(b);
        }
    }
}

/* One pair: the overlap, or +0 for boxes apart. */
static inline DK_T DK_SFN(dk__bir_pair)(const dk__bir_ctx *cx, const DK_T *a, const double *ca, const DK_T *b,
                                        const double *cb)
{
    if (dk_rbox_apart_at(ca[0], ca[1], ca[2], cb[0], cb[1], cb[2])) return (DK_T)0;
    return cx->quad ? DK_TFN(dk_quad_overlap)(a, b, cx->mode) : DK_TFN(dk_rbox_overlap)(a, b, cx->mode, cx->clockwise);
}

static void DK_SFN(dk__bir_worker)(void *ctx, int tid)
{
    (void)tid;
    dk__bir_ctx *cx = (dk__bir_ctx *)ctx;
    const DK_T *b1 = (const DK_T *)cx->b1, *b2 = (const DK_T *)cx->b2;
    const double *c1 = cx->c1, *c2 = cx->c2;
    const int w = cx->quad ? 8 : 5;
    DK_S *out = (DK_S *)cx->out;
    for (int64_t blk; (blk = dk_parallel_claim(&cx->counter)) < cx->nblocks;) {
        const int64_t lo = blk * cx->rows_per_claim;
        const int64_t hi = lo + cx->rows_per_claim < cx->n ? lo + cx->rows_per_claim : cx->n;
        for (int64_t i = lo; i < hi; i++) {
            if (cx->aligned) {
                out[i * cx->os0] = DK_STORE(DK_SFN(dk__bir_pair)(cx, b1 + i * w, c1 + 3 * i, b2 + i * w, c2 + 3 * i));
                continue;
            }
            for (int64_t j = 0; j < cx->m; j++)
                out[i * cx->os0 + j * cx->os1] = DK_STORE(
                    DK_SFN(dk__bir_pair)(cx, b1 + i * w, c1 + 3 * i, b2 + j * w, c2 + 3 * j));
        }
    }
}

static dk_status DK_SFN(dk__bir)(dk__bir_ctx *cx, const dk_tensor *boxes1, const dk_tensor *boxes2, dk_arena *ar)
{
    const int w = cx->quad ? 8 : 5;
    DK_T *b1 = (DK_T *)dk_arena_take_n(ar, (size_t)cx->n, (size_t)w * sizeof(DK_T));
    DK_T *b2 = (DK_T *)dk_arena_take_n(ar, (size_t)cx->m, (size_t)w * sizeof(DK_T));
    double *c1 = (double *)dk_arena_take_n(ar, (size_t)cx->n, 3 * sizeof(double));
    double *c2 = (double *)dk_arena_take_n(ar, (size_t)cx->m, 3 * sizeof(double));
    if (!b1 || !b2 || !c1 || !c2)
        return dk_error(DK_ENOMEM, "%s: out of memory for %lld + %lld boxes",
                        cx->quad ? "box_iou_quadri" : "box_iou_rotated", (long long)cx->n, (long long)cx->m);
    DK_SFN(dk__bir_load)(boxes1, w, b1, c1);
    DK_SFN(dk__bir_load)(boxes2, w, b2, c2);
    cx->b1 = b1;
    cx->b2 = b2;
    cx->c1 = c1;
    cx->c2 = c2;
    dk_parallel_run(cx->nthreads, &cx->counter, DK_SFN(dk__bir_worker), cx);
    return DK_OK;
}

#endif
