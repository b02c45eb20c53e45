/*
 * box_iou/box_iou_rows_tmpl.h — one row of boxes1 against a span of the transposed boxes2 (Note
 * [Rows against columns] in box_iou_cpu.h). A template (Note [Templates in C] in
 * kernels/dk_template.h), the compute pass.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* dst[j] = the pair (a, column j) for j < cnt. Always inlined into dk__box_iou_span with
 * constant kind and narrow, so that each kind is a loop of its own without branches, which the
 * compiler vectorises. */
static inline __attribute__((always_inline)) void DK_TFN(dk__box_iou_loop)(
    const DK_T *a, const DK_T *restrict x1, const DK_T *restrict y1, const DK_T *restrict x2, const DK_T *restrict y2,
    const DK_T *restrict asp, int64_t cnt, DK_T *restrict dst, const int kind, DK_T eps, DK_T off, const int narrow)
{
    const DK_T ar[4] = {a[0], a[1], a[2], a[3]};
    const DK_T asp_a = kind == DK_BOX_CIOU ? DK_TFN(dk_box_aspect)(ar) : (DK_T)0;
    for (int64_t j = 0; j < cnt; j++) {
        const DK_T b[4] = {x1[j], y1[j], x2[j], y2[j]};
        dst[j] = DK_TFN(dk_box_iou_pair_aspect)(ar, b, kind, eps, off, narrow, asp_a,
                                                kind == DK_BOX_CIOU ? asp[j] : (DK_T)0);
    }
}

/* The span [c0, c0 + cnt) of row a; soa holds x1[m], y1[m], x2[m], y2[m] and, for complete IoU,
 * each box's dk_box_aspect in aspect[m]. */
static inline
    __attribute__((always_inline)) void DK_TFN(dk__box_iou_span_body)(const DK_T *a, const DK_T *soa, int64_t m,
                                                                      int64_t c0, int64_t cnt, DK_T *dst, int kind,
                                                                      DK_T eps, DK_T off, int narrow)
{
    const DK_T *x1 = soa + c0, *y1 = soa + m + c0, *x2 = soa + 2 * m + c0, *y2 = soa + 3 * m + c0;
    const DK_T *asp = soa + 4 * m + c0;
    if (narrow) { /* 16-bit boxes: the rounding to 16 bits is scalar code anyway */
        DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, kind, eps, off, narrow);
        return;
    }
    switch (kind) {
    case DK_BOX_IOU: DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, DK_BOX_IOU, eps, off, 0); break;
    case DK_BOX_GIOU: DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, DK_BOX_GIOU, eps, off, 0); break;
    case DK_BOX_DIOU: DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, DK_BOX_DIOU, eps, off, 0); break;
    case DK_BOX_CIOU: DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, DK_BOX_CIOU, eps, off, 0); break;
    case DK_BOX_MMCV_IOU:
        DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, DK_BOX_MMCV_IOU, eps, off, 0);
        break;
    default: DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, DK_BOX_MMCV_IOF, eps, off, 0); break;
    }
}

/* The span, for the baseline ISA and (Note [AVX2 spans] in box_iou_cpu.h) for AVX2. */
static void DK_TFN(dk__box_iou_span)(const DK_T *a, const DK_T *soa, int64_t m, int64_t c0, int64_t cnt, DK_T *dst,
                                     int kind, DK_T eps, DK_T off, int narrow)
{
    DK_TFN(dk__box_iou_span_body)(a, soa, m, c0, cnt, dst, kind, eps, off, narrow);
}

#if DK__BOX_IOU_AVX2
__attribute__((target("avx2"))) static void DK_TFN(dk__box_iou_span_avx2)(const DK_T *a, const DK_T *soa, int64_t m,
                                                                          int64_t c0, int64_t cnt, DK_T *dst, int kind,
                                                                          DK_T eps, DK_T off, int narrow)
{
    DK_TFN(dk__box_iou_span_body)(a, soa, m, c0, cnt, dst, kind, eps, off, narrow);
}
#endif

#endif
