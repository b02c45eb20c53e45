/*
 * kernels/box_iou_math_tmpl.h — the template body of kernels/box_iou_math.h (Note [Templates in
 * C] in dk_template.h), instantiated for the compute types. Included only through
 * dk_instantiate.h.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* torch.maximum / torch.minimum / clamp(min=0): NaN propagates. */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_nan_max)(DK_T a, DK_T b) { return ((a > b) | (a != a)) ? a : b; }
DK_HD DK_INLINE DK_T DK_TFN(dk_box_nan_min)(DK_T a, DK_T b) { return ((a < b) | (a != a)) ? a : b; }

/* A difference computed in the boxes' own 16-bit dtype (narrow: 1 float16, 2 bfloat16; 0 none). */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_narrow)(DK_T v, int narrow)
{
    if (narrow == 1) return (DK_T)dk_half_to_float(dk_float_to_half((float)v));
    if (narrow == 2) return (DK_T)dk_bfloat16_to_float(dk_float_to_bfloat16((float)v));
    return v;
}

/* complete IoU's per-box term atan(w / h); torchvision computes it per box too, before pairing. */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_aspect)(const DK_T *a) { return DK_TMATH(atan)((a[2] - a[0]) / (a[3] - a[1])); }

/*
 * One pair of the box-IoU family (the header's tensor semantics), a = (a1, a2, a3, a4) from the
 * first set and b from the second, already in the compute type. `narrow` rounds each result the
 * references compute in the boxes' own 16-bit dtype (dk_box_narrow; 0 for 32- and 64-bit boxes):
 * Note [16-bit boxes] in box_iou_math.h says which. eps: the DIoU/CIoU epsilon; offset: MMCV's.
 * aspect_a, aspect_b: dk_box_aspect of a and b, read by complete IoU only (a kernel computes them
 * once per box, and its loop over pairs then has no call to atan and vectorises);
 * dk_box_iou_pair computes them itself.
 */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_iou_pair_aspect)(const DK_T *a, const DK_T *b, int kind, DK_T eps, DK_T offset,
                                                    int narrow, DK_T aspect_a, DK_T aspect_b)
{
#define DK__NARROW(v) DK_TFN(dk_box_narrow)((v), narrow)
    if (kind == DK_BOX_MMCV_IOU || kind == DK_BOX_MMCV_IOF) {
        /* MMCV's CPU kernel: wh = (rb - lt + offset).clamp(0, INT_MAX * 1.f), every tensor op in
         * the boxes' dtype; the upper bound is the float 2^31 (INT_MAX rounded), in any dtype */
        DK_T w = DK__NARROW(DK__NARROW(DK_TFN(dk_box_nan_min)(a[2], b[2]) - DK_TFN(dk_box_nan_max)(a[0], b[0])) +
                            offset);
        DK_T h = DK__NARROW(DK__NARROW(DK_TFN(dk_box_nan_min)(a[3], b[3]) - DK_TFN(dk_box_nan_max)(a[1], b[1])) +
                            offset);
        const DK_T top = (DK_T)2147483648.0;
        w = w != w ? w : w < (DK_T)0 ? (DK_T)0 : w > top ? top : w;
        h = h != h ? h : h < (DK_T)0 ? (DK_T)0 : h > top ? top : h;
        const DK_T overlap = DK__NARROW(DK__NARROW(w) * DK__NARROW(h));
        const DK_T area1 = DK__NARROW(DK__NARROW(DK__NARROW(a[2] - a[0]) + offset) *
                                      DK__NARROW(DK__NARROW(a[3] - a[1]) + offset));
        if (kind == DK_BOX_MMCV_IOF) return overlap / area1;
        const DK_T area2 = DK__NARROW(DK__NARROW(DK__NARROW(b[2] - b[0]) + offset) *
                                      DK__NARROW(DK__NARROW(b[3] - b[1]) + offset));
        return overlap / DK__NARROW(DK__NARROW(area1 + area2) - overlap);
    }
    const DK_T area1 = (a[2] - a[0]) * (a[3] - a[1]);
    const DK_T area2 = (b[2] - b[0]) * (b[3] - b[1]);
    const DK_T w = DK_TFN(dk_box_nan_max)(
        DK__NARROW(DK_TFN(dk_box_nan_min)(a[2], b[2]) - DK_TFN(dk_box_nan_max)(a[0], b[0])), (DK_T)0);
    const DK_T h = DK_TFN(dk_box_nan_max)(
        DK__NARROW(DK_TFN(dk_box_nan_min)(a[3], b[3]) - DK_TFN(dk_box_nan_max)(a[1], b[1])), (DK_T)0);
    const DK_T inter = w * h;
    const DK_T uni = area1 + area2 - inter;
    const DK_T iou = inter / uni;
    if (kind == DK_BOX_IOU) return iou;
    /* the smallest enclosing box */
    const DK_T wi = DK_TFN(dk_box_nan_max)(
        DK__NARROW(DK_TFN(dk_box_nan_max)(a[2], b[2]) - DK_TFN(dk_box_nan_min)(a[0], b[0])), (DK_T)0);
    const DK_T hi = DK_TFN(dk_box_nan_max)(
        DK__NARROW(DK_TFN(dk_box_nan_max)(a[3], b[3]) - DK_TFN(dk_box_nan_min)(a[1], b[1])), (DK_T)0);
    if (kind == DK_BOX_GIOU) {
        const DK_T areai = wi * hi;
        return iou - (areai - uni) / areai;
    }
    const DK_T diag = wi * wi + hi * hi + eps;
    const DK_T xp = (a[0] + a[2]) / (DK_T)2, yp = (a[1] + a[3]) / (DK_T)2;
    const DK_T xg = (b[0] + b[2]) / (DK_T)2, yg = (b[1] + b[3]) / (DK_T)2;
    const DK_T dx = xp - xg, dy = yp - yg;
    const DK_T diou = iou - (dx * dx + dy * dy) / diag;
    if (kind == DK_BOX_DIOU) return diou;
    /* complete IoU: the aspect-ratio term, 4 / pi^2 as torchvision's (a double rounded to T) */
    const DK_T at = aspect_a - aspect_b;
    const DK_T v = (DK_T)0.40528473456935108578 * (at * at);
    const DK_T alpha = v / ((DK_T)1 - iou + v + eps);
    return diou - alpha * v;
#undef DK__NARROW
}

/* One pair, computing complete IoU's per-box terms here. */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_iou_pair)(const DK_T *a, const DK_T *b, int kind, DK_T eps, DK_T offset, int narrow)
{
    const bool ciou = kind == DK_BOX_CIOU;
    return DK_TFN(dk_box_iou_pair_aspect)(a, b, kind, eps, offset, narrow, ciou ? DK_TFN(dk_box_aspect)(a) : (DK_T)0,
                                          ciou ? DK_TFN(dk_box_aspect)(b) : (DK_T)0);
}

#endif
