/*
 * nms/nms_load_tmpl.h — boxes and scores of any float storage and strides into compute-type
 * arrays (x1, y1, x2, y2, area) and the score order, then the includer's procedure in the
 * compute type: DK__NMS_RUN, the name of a compute-pass template function (cx, x, area) —
 * nms's suppression (nms_run_tmpl.h) or nms_match's grouping (nms_match_tmpl.h). A template
 * (Note [Templates in C] in kernels/dk_template.h), the float storage pass.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* x[4][n] = the boxes' coordinates, area[n], and ctx->order by decreasing score. */
static dk_status DK_SFN(dk__nms_load)(dk__nms_ctx *cx, const dk_tensor *boxes, const dk_tensor *scores, DK_T *x,
                                      DK_T *area)
{
    const int64_t n = cx->n;
    int64_t bs[2], ss[1];
    dk_tensor_strides(boxes, bs, 2);
    dk_tensor_strides(scores, ss, 1);
    const DK_S *b = (const DK_S *)dk_tensor_data(boxes);
    const DK_T off = (DK_T)cx->offset;
    for (int64_t i = 0; i < n; i++) {
        const DK_S *r = b + i * bs[0];
        x[i] = DK_LOAD(r[0]);
        x[n + i] = DK_LOAD(r[bs[1]]);
        x[2 * n + i] = DK_LOAD(r[2 * bs[1]]);
        x[3 * n + i] = DK_LOAD(r[3 * bs[1]]);
        area[i] = DK_TFN(dk_box_nms_area)(x[i], x[n + i], x[2 * n + i], x[3 * n + i], off);
    }
    const DK_S *s = (const DK_S *)dk_tensor_data(scores);
#if DK_S_IS_T && DK_T_BYTES == 4
    return dk_argsort_desc_f32(cx->order, s, ss[0], n, cx->ar);
#elif DK_S_IS_T
    return dk_argsort_desc_f64(cx->order, s, ss[0], n, cx->ar);
#else
    /* 16-bit scores: widened exactly, then sorted as float */
    float *f = (float *)dk_arena_take_n(cx->ar, (size_t)n, sizeof *f);
    if (!f) return dk_error(DK_ENOMEM, "nms: out of memory for %lld scores", (long long)n);
    for (int64_t i = 0; i < n; i++) f[i] = DK_LOAD(s[i * ss[0]]);
    return dk_argsort_desc_f32(cx->order, f, 1, n, cx->ar);
#endif
}

/* One call for this storage type. */
static dk_status DK_SFN(dk__nms)(dk__nms_ctx *cx, const dk_tensor *boxes, const dk_tensor *scores)
{
    DK_T *x = (DK_T *)dk_arena_take_n(cx->ar, (size_t)cx->n, 5 * sizeof(DK_T));
    if (!x) return dk_error(DK_ENOMEM, "nms: out of memory for %lld boxes", (long long)cx->n);
    dk_status st = DK_SFN(dk__nms_load)(cx, boxes, scores, x, x + 4 * cx->n);
    return st ? st : DK_TFN(DK__NMS_RUN)(cx, x, x + 4 * cx->n);
}

#endif
