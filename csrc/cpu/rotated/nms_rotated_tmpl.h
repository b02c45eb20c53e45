/*
 * rotated/nms_rotated_tmpl.h — the CPU nms_rotated and nms_quadri (cx->quad) for one storage type. A template (Note
 * [Templates in C] in kernels/dk_template.h), the float storage pass: boxes into a packed
 * compute-type array, scores sorted as torch sorts them, then the suppression loop.
 *
 * Note [Rotated suppression]
 * MMCV's loop takes each kept box in score order and suppresses every later box j with
 * IoU(kept, j) >= threshold. Equivalently, a candidate j is kept unless some box kept before it
 * suppresses it, so dkit walks the candidates in score order and tests each against the kept
 * boxes only (packed in kept order, with their bounding-circle radii), stopping at the first
 * that suppresses it: the same decisions with the same arithmetic and argument order
 * (dk_rbox_overlap(kept, candidate)), and at most N x kept overlaps instead of N^2 / 2. A pair
 * whose bounding circles are clearly apart (Note [Bounding circles] in
 * kernels/rotated_math_tmpl.h) has IoU 0 in MMCV's arithmetic, which suppresses only when
 * the threshold is <= 0; so for a threshold > 0 such pairs are skipped after a few
 * multiplications, and they are most pairs of a real image. A NaN threshold suppresses nothing
 * (every comparison is false): every box is kept, in score order.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

static dk_status DK_SFN(dk__nmsr)(dk__nmsr_ctx *cx, const dk_tensor *dets, const dk_tensor *scores)
{
    const int64_t n = cx->n;
    const int w = cx->quad ? 8 : 5;
    dk_arena *ar = cx->ar;
    DK_T *box = (DK_T *)dk_arena_take_n(ar, (size_t)n, (size_t)w * sizeof(DK_T));
    DK_T *kbox = (DK_T *)dk_arena_take_n(ar, (size_t)n, (size_t)w * sizeof(DK_T));
    double *kcirc = (double *)dk_arena_take_n(ar, (size_t)n, 3 * sizeof(double));
    uint64_t *klab = (uint64_t *)dk_arena_take_n(ar, (size_t)n, sizeof(uint64_t));
    if (!box || !kbox || !kcirc || !klab)
        return dk_error(DK_ENOMEM, "%s: out of memory for %lld boxes", cx->op, (long long)n);
    int64_t bs[2], ss[1];
    dk_tensor_strides(dets, bs, 2);
    dk_tensor_strides(scores, ss, 1);
    const DK_S *b = (const DK_S *)dk_tensor_data(dets);
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < w; d++) box[i * w + d] = DK_LOAD(b[i * bs[0] + d * bs[1]]);
    const DK_S *s = (const DK_S *)dk_tensor_data(scores);
    dk_status st;
#if DK_S_IS_T && DK_T_BYTES == 4
    st = dk_argsort_desc_f32(cx->order, s, ss[0], n, ar);
#elif DK_S_IS_T
    st = dk_argsort_desc_f64(cx->order, s, ss[0], n, ar);
#else
    { /* 16-bit scores: widened exactly, then sorted as float */
        float *f = (float *)dk_arena_take_n(ar, (size_t)n, sizeof *f);
        if (!f) return dk_error(DK_ENOMEM, "%s: out of memory for %lld scores", cx->op, (long long)n);
        for (int64_t i = 0; i < n; i++) f[i] = DK_LOAD(s[i * ss[0]]);
        st = dk_argsort_desc_f32(cx->order, f, 1, n, ar);
    }
#endif
    if (st) return st;
    /* Note [Rotated suppression] */
    const double thr = cx->thr;
    const bool skip_apart = thr > 0;
    int64_t kept = 0;
    for (int64_t a = 0; a < n; a++) {
        const int64_t j = cx->order[a];
        const DK_T *bj = box + j * w;
        double cj[3]; /* its bounding circle */
        if (cx->quad) {
            DK_TFN(dk_quad_circle)(bj, cj);
        } else {
            cj[0] = (double)bj[0], cj[1] = (double)bj[1];
            cj[2] = DK_TFN(dk_rbox_radius)(bj);
        }
        const uint64_t lj = cx->label ? cx->label[j] : 0;
        bool sup = false;
        if (thr == thr) /* a NaN threshold suppresses nothing */
            for (int64_t k = 0; k < kept && !sup; k++) {
                if (klab[k] != lj) continue;
                const DK_T *bk = kbox + k * w;
                const double *ck = kcirc + 3 * k;
                if (skip_apart && dk_rbox_apart_at(ck[0], ck[1], ck[2], cj[0], cj[1], cj[2])) continue;
                const DK_T ovr = cx->quad ? DK_TFN(dk_quad_overlap)(bk, bj, DK_RBOX_IOU)
                                          : DK_TFN(dk_rbox_overlap)(bk, bj, DK_RBOX_IOU, cx->clockwise);
                sup = (double)ovr >= thr;
            }
        if (sup) continue;
        for (int d = 0; d < w; d++) kbox[kept * w + d] = bj[d];
        for (int d = 0; d < 3; d++) kcirc[3 * kept + d] = cj[d];
        klab[kept] = lj;
        cx->keep[kept * cx->keep_s] = j;
        kept++;
    }
    cx->kept = kept;
    return DK_OK;
}

#endif
