/*
 * box_iou/box_iou_rows_tmpl.h — one row of boxes1 against a span of the transposed boxes2 (Note
 * [Rows against columns] in box_iou_cpu.h). A template (Note [Templates in C] in
 * kernels/dk_template.h), the compute pass.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/*
 * Note [AVX2 clones]
 * dkit builds for x86-64-v2 (SSE4.2: 4 floats a vector), and the span loop is compute-bound
 * (a 4,000 x 4,000 box_iou writes its 64 MB in about a third of the time it computes). So the
 * span is compiled twice, for AVX2 (8 floats) and for the baseline, and the loader picks one
 * for the machine (GCC's target_clones, an ifunc): 1.4-1.5x faster on AVX2 machines (box_iou
 * 4,000 x 4,000 on one thread: 25 -> 17 ms). The results are the same bits: "avx2" does not
 * include FMA, and ISO C mode contracts nothing, so both clones run the same IEEE operations in
 * the same order, only more of them at once. Other compilers and platforms get the baseline.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define DK__BOX_IOU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DK__BOX_IOU_CLONES
#endif

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
        dst[j] = DK_TFN(dk_box_iou_pair_aspect)(ar, b, kind, eps, off, narrow, asp_a, kind == DK_BOX_CIOU ? asp[j] : (DK_T)0);
    }
}

/* The span [c0, c0 + cnt) of row a; soa holds x1[m], y1[m], x2[m], y2[m] and, for complete IoU,
 * each box's dk_box_aspect in aspect[m]. */
DK__BOX_IOU_CLONES static void DK_TFN(dk__box_iou_span)(const DK_T *a, const DK_T *soa, int64_t m, int64_t c0, int64_t cnt, DK_T *dst,
                                     int kind, DK_T eps, DK_T off, int narrow)
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
    case DK_BOX_MMCV_IOU: DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, DK_BOX_MMCV_IOU, eps, off, 0); break;
    default: DK_TFN(dk__box_iou_loop)(a, x1, y1, x2, y2, asp, cnt, dst, DK_BOX_MMCV_IOF, eps, off, 0); break;
    }
}

#endif
