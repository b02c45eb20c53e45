/*
 * box_iou_rotated/box_iou_rotated_tmpl.h — the CPU kernel for one storage type: both box sets
 * into packed compute-type arrays (any strides, 16-bit widened exactly), then the rows of the
 * output in parallel. A template (Note [Templates in C] in kernels/dk_template.h), the float
 * storage pass. Each output element is one call of dk_rbox_overlap, whichever thread computes
 * it: the result is the same bits for any thread count.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

static void DK_SFN(dk__bir_load)(const dk_tensor *t, DK_T *dst)
{
    int64_t s[2];
    dk_tensor_strides(t, s, 2);
    const DK_S *p = (const DK_S *)dk_tensor_data(t);
    for (int64_t i = 0; i < t->shape[0]; i++)
        for (int d = 0; d < 5; d++) dst[i * 5 + d] = DK_LOAD(p[i * s[0] + d * s[1]]);
}

static void DK_SFN(dk__bir_worker)(void *ctx, int tid)
{
    (void)tid;
    dk__bir_ctx *cx = (dk__bir_ctx *)ctx;
    const DK_T *b1 = (const DK_T *)cx->b1, *b2 = (const DK_T *)cx->b2;
    DK_S *out = (DK_S *)cx->out;
    for (int64_t blk; (blk = dk_parallel_claim(&cx->counter)) < cx->nblocks;) {
        const int64_t lo = blk * cx->rows_per_claim;
        const int64_t hi = lo + cx->rows_per_claim < cx->n ? lo + cx->rows_per_claim : cx->n;
        for (int64_t i = lo; i < hi; i++) {
            if (cx->aligned) {
                out[i * cx->os0] = DK_STORE(DK_TFN(dk_rbox_overlap)(b1 + i * 5, b2 + i * 5, cx->mode, cx->clockwise));
                continue;
            }
            for (int64_t j = 0; j < cx->m; j++)
                out[i * cx->os0 + j * cx->os1] =
                    DK_STORE(DK_TFN(dk_rbox_overlap)(b1 + i * 5, b2 + j * 5, cx->mode, cx->clockwise));
        }
    }
}

static dk_status DK_SFN(dk__bir)(dk__bir_ctx *cx, const dk_tensor *boxes1, const dk_tensor *boxes2, dk_arena *ar)
{
    DK_T *b1 = (DK_T *)dk_arena_take_n(ar, (size_t)cx->n, 5 * sizeof(DK_T));
    DK_T *b2 = (DK_T *)dk_arena_take_n(ar, (size_t)cx->m, 5 * sizeof(DK_T));
    if (!b1 || !b2)
        return dk_error(DK_ENOMEM, "box_iou_rotated: out of memory for %lld + %lld boxes", (long long)cx->n,
                        (long long)cx->m);
    DK_SFN(dk__bir_load)(boxes1, b1);
    DK_SFN(dk__bir_load)(boxes2, b2);
    cx->b1 = b1;
    cx->b2 = b2;
    dk_parallel_run(cx->nthreads, &cx->counter, DK_SFN(dk__bir_worker), cx);
    return DK_OK;
}

#endif
