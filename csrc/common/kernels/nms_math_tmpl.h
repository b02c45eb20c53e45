/*
 * kernels/nms_math_tmpl.h — the template body of kernels/nms_math.h (Note [Templates in C] in
 * dk_template.h), instantiated for the compute types. Included only through dk_instantiate.h.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* C++'s std::max / std::min, NaN behaviour included (the references' scalar NMS code). */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_std_max)(DK_T a, DK_T b) { return a < b ? b : a; }
DK_HD DK_INLINE DK_T DK_TFN(dk_box_std_min)(DK_T a, DK_T b) { return b < a ? b : a; }
/* NMS's per-box area (offset 0 or 1). */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_nms_area)(DK_T x1, DK_T y1, DK_T x2, DK_T y2, DK_T offset)
{
    return (x2 - x1 + offset) * (y2 - y1 + offset);
}

/* NMS's overlap of kept box i with candidate j (the header's NMS semantics). */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_nms_overlap)(DK_T ix1, DK_T iy1, DK_T ix2, DK_T iy2, DK_T iarea, DK_T jx1, DK_T jy1,
                                                DK_T jx2, DK_T jy2, DK_T jarea, DK_T offset)
{
    const DK_T xx1 = DK_TFN(dk_box_std_max)(ix1, jx1), yy1 = DK_TFN(dk_box_std_max)(iy1, jy1);
    const DK_T xx2 = DK_TFN(dk_box_std_min)(ix2, jx2), yy2 = DK_TFN(dk_box_std_min)(iy2, jy2);
    const DK_T w = DK_TFN(dk_box_std_max)((DK_T)0, xx2 - xx1 + offset);
    const DK_T h = DK_TFN(dk_box_std_max)((DK_T)0, yy2 - yy1 + offset);
    const DK_T inter = w * h;
    return inter / (iarea + jarea - inter);
}

/*
 * Soft-NMS's factor (dk_soft_nms_method in nms_math.h) for a candidate whose NMS overlap with the
 * box just selected is ovr (MMCV's soft_nms; Bodla et al. 2017), in the compute type as MMCV
 * computes it in float:
 *   naive     0 when ovr >= thr, else 1 (hard NMS, but with >=)
 *   linear    1 - ovr when ovr >= thr, else 1
 *   gaussian  exp(-ovr^2 / sigma), whatever thr
 */
DK_HD DK_INLINE DK_T DK_TFN(dk_box_soft_nms_weight)(DK_T ovr, int method, DK_T thr, DK_T sigma)
{
    if (method == DK_SOFT_NMS_NAIVE) return ovr >= thr ? (DK_T)0 : (DK_T)1;
    if (method == DK_SOFT_NMS_LINEAR) return ovr >= thr ? (DK_T)1 - ovr : (DK_T)1;
    /* exp(-0 / sigma) is exactly 1: most pairs do not overlap, and skip the exponential */
    if (ovr == (DK_T)0) return (DK_T)1;
    return DK_TMATH(exp)(-(ovr * ovr) / sigma);
}

#endif
