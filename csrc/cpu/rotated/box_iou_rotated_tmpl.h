/*
 * rotated/box_iou_rotated_tmpl.h — the CPU kernel for one storage type: both box sets
 * into packed compute-type arrays (any strides, 16-bit widened exactly), then the rows of the
 * output in parallel. A template (Note [Templates in C] in kernels/dk_template.h), the float
 * storage pass. Each output element is dk_rbox_overlap's value for its pair, whichever thread
 * computes it: the same bits for any thread count. Pairs whose bounding circles are apart are
 * written as the +0 dk_rbox_overlap gives them, without computing it (Note [Bounding circles]
 * in kernels/rotated_math_tmpl.h).
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* The boxes of t as packed compute-type rows, and their bounding-circle radii. */
static void DK_SFN(dk__bir_load)(const dk_tensor *t, DK_T *dst, double *rad)
{
    int64_t s[2];
    dk_tensor_strides(t, s, 2);
    const DK_S *p = (const DK_S *)dk_tensor_data(t);
    for (int64_t i = 0; i < t->shape[0]; i++) {
        for (int d = 0; d < 5; d++) dst[i * 5 + d] = DK_LOAD(p[i * s[0] + d * s[1]]);
        rad[i] = DK_TFN(dk_rbox_radius)(dst + i * 5);
    }
}

/* One pair: the overlap, or +0 for boxes apart. */
static inline DK_T DK_SFN(dk__bir_pair)(const DK_T *a, double ra, const DK_T *b, double rb, int mode, bool cw)
{
    if (DK_TFN(dk_rbox_apart)(a, ra, b, rb)) return (DK_T)0;
    return DK_TFN(dk_rbox_overlap)(a, b, mode, cw);
}

static void DK_SFN(dk__bir_worker)(void *ctx, int tid)
{
    (void)tid;
    dk__bir_ctx *cx = (dk__bir_ctx *)ctx;
    const DK_T *b1 = (const DK_T *)cx->b1, *b2 = (const DK_T *)cx->b2;
    const double *r1 = cx->r1, *r2 = cx->r2;
    DK_S *out = (DK_S *)cx->out;
    for (int64_t blk; (blk = dk_parallel_claim(&cx->counter)) < cx->nblocks;) {
        const int64_t lo = blk * cx->rows_per_claim;
        const int64_t hi = lo + cx->rows_per_claim < cx->n ? lo + cx->rows_per_claim : cx->n;
        for (int64_t i = lo; i < hi; i++) {
            if (cx->aligned) {
                out[i * cx->os0] = DK_STORE(
                    DK_SFN(dk__bir_pair)(b1 + i * 5, r1[i], b2 + i * 5, r2[i], cx->mode, cx->clockwise));
                continue;
            }
            for (int64_t j = 0; j < cx->m; j++)
                out[i * cx->os0 + j * cx->os1] = DK_STORE(
                    DK_SFN(dk__bir_pair)(b1 + i * 5, r1[i], b2 + j * 5, r2[j], cx->mode, cx->clockwise));
        }
    }
}

static dk_status DK_SFN(dk__bir)(dk__bir_ctx *cx, const dk_tensor *boxes1, const dk_tensor *boxes2, dk_arena *ar)
{
    DK_T *b1 = (DK_T *)dk_arena_take_n(ar, (size_t)cx->n, 5 * sizeof(DK_T));
    DK_T *b2 = (DK_T *)dk_arena_take_n(ar, (size_t)cx->m, 5 * sizeof(DK_T));
    double *r1 = (double *)dk_arena_take_n(ar, (size_t)cx->n, sizeof(double));
    double *r2 = (double *)dk_arena_take_n(ar, (size_t)cx->m, sizeof(double));
    if (!b1 || !b2 || !r1 || !r2)
        return dk_error(DK_ENOMEM, "box_iou_rotated: out of memory for %lld + %lld boxes", (long long)cx->n,
                        (long long)cx->m);
    DK_SFN(dk__bir_load)(boxes1, b1, r1);
    DK_SFN(dk__bir_load)(boxes2, b2, r2);
    cx->b1 = b1;
    cx->b2 = b2;
    cx->r1 = r1;
    cx->r2 = r2;
    dk_parallel_run(cx->nthreads, &cx->counter, DK_SFN(dk__bir_worker), cx);
    return DK_OK;
}

#endif
