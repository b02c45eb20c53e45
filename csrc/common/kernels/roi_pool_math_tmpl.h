/*
 * kernels/roi_pool_math_tmpl.h — the template body of kernels/roi_pool_math.h (Note [Templates in
 * C] in dk_template.h). Included only through dk_instantiate.h.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* One RoI along both axes: torchvision's whole-pixel start (istart) or MMCV's continuous start
 * (start), and the bin size; `none`: MMCV's box of no width or height, every bin empty; `ps`:
 * ps_roi_pool's bins (roi_pool_math.h). */
typedef struct {
    int64_t istart_h, istart_w;
    DK_T start_h, start_w, bin_h, bin_w;
    int mmcv, none, ps;
} DK_TFN(dk_roi_pool_roi);

/* C's round (half away from zero) in the compute type. */
DK_HD DK_INLINE DK_T DK_TFN(dk__roi_pool_round)(DK_T v) { return DK_TMATH(round)(v); }

/* kind: DK_ROI_POOL_BINS_TORCHVISION, _MMCV or _PS (roi_pool_math.h). */
DK_HD DK_INLINE DK_TFN(dk_roi_pool_roi)
    DK_TFN(dk_roi_pool_roi_init)(DK_T x1, DK_T y1, DK_T x2, DK_T y2, DK_T scale, int64_t ph, int64_t pw, int kind)
{
    DK_TFN(dk_roi_pool_roi) r;
    const int mmcv = kind == DK_ROI_POOL_BINS_MMCV;
    r.mmcv = mmcv;
    r.ps = kind == DK_ROI_POOL_BINS_PS;
    r.none = 0;
    r.istart_h = r.istart_w = 0;
    if (mmcv) {
        r.start_w = x1 * scale;
        r.start_h = y1 * scale;
        const DK_T len_w = (x2 + (DK_T)1) * scale - r.start_w;
        const DK_T len_h = (y2 + (DK_T)1) * scale - r.start_h;
        r.none = len_w <= (DK_T)0 || len_h <= (DK_T)0;
        r.bin_w = len_w / (DK_T)pw;
        r.bin_h = len_h / (DK_T)ph;
        return r;
    }
    r.start_h = r.start_w = 0;
    r.istart_w = dk_roi_pool_int((double)DK_TFN(dk__roi_pool_round)(x1 * scale));
    r.istart_h = dk_roi_pool_int((double)DK_TFN(dk__roi_pool_round)(y1 * scale));
    const int64_t end_w = dk_roi_pool_int((double)DK_TFN(dk__roi_pool_round)(x2 * scale));
    const int64_t end_h = dk_roi_pool_int((double)DK_TFN(dk__roi_pool_round)(y2 * scale));
    const int64_t one = r.ps ? 0 : 1; /* roi_pool counts both end pixels, ps_roi_pool one */
    const int64_t len_w = end_w - r.istart_w + one > 1 ? end_w - r.istart_w + one : 1; /* "at least 1 x 1" */
    const int64_t len_h = end_h - r.istart_h + one > 1 ? end_h - r.istart_h + one : 1;
    r.bin_w = (DK_T)len_w / (DK_T)pw;
    r.bin_h = (DK_T)len_h / (DK_T)ph;
    return r;
}

/* The pixel bounds [lo, hi) of bin p along one axis of `size` pixels: dk_roi_pool_bin's, one axis
 * at a time, for a caller that tabulates a RoI's rows and columns once (ps_roi_pool's CPU tables,
 * Note [Position-sensitive RoIPool on a CPU]); a `none` RoI's bins are empty whatever this gives. */
DK_HD DK_INLINE void DK_TFN(dk_roi_pool_axis)(const DK_TFN(dk_roi_pool_roi) *r, bool rows, int64_t p, int64_t size,
                                              int64_t *lo, int64_t *hi)
{
    const DK_T bin = rows ? r->bin_h : r->bin_w;
    if (r->mmcv) {
        const DK_T start = rows ? r->start_h : r->start_w;
        /* MMCV's floorf / ceilf: the argument in float, whatever T is */
        *lo = dk_roi_pool_int((double)floorf((float)((DK_T)p * bin + start)));
        *hi = dk_roi_pool_int((double)ceilf((float)((DK_T)(p + 1) * bin + start)));
    } else {
        const int64_t start = rows ? r->istart_h : r->istart_w;
        *lo = dk_roi_pool_int((double)DK_TMATH(floor)((DK_T)p * bin)) + start;
        *hi = dk_roi_pool_int((double)DK_TMATH(ceil)((DK_T)(p + 1) * bin)) + start;
    }
    /* ps_roi_pool clamps to size - 1 (its forward never reaches the last row or column) */
    const int64_t top = r->ps ? size - 1 : size;
    *lo = dk_roi_pool_clamp(*lo, top);
    *hi = dk_roi_pool_clamp(*hi, top);
}

/* Bin (ph, pw) of an H x W map: rows [*h0, *h1), columns [*w0, *w1); false when it is empty. */
DK_HD DK_INLINE bool DK_TFN(dk_roi_pool_bin)(const DK_TFN(dk_roi_pool_roi) *r, int64_t ph, int64_t pw, int64_t H,
                                             int64_t W, int64_t *h0, int64_t *h1, int64_t *w0, int64_t *w1)
{
    if (r->none) {
        *h0 = *h1 = *w0 = *w1 = 0;
        return false;
    }
    DK_TFN(dk_roi_pool_axis)(r, true, ph, H, h0, h1);
    DK_TFN(dk_roi_pool_axis)(r, false, pw, W, w0, w1);
    return *h1 > *h0 && *w1 > *w0;
}

/* ps_roi_align's two axes of RoI (x1, y1, x2, y2) on an H x W map (roi_pool_math.h). */
DK_HD DK_INLINE void DK_TFN(dk_ps_roi_align_roi_init)(DK_T x1, DK_T y1, DK_T x2, DK_T y2, DK_T scale, int64_t ph,
                                                      int64_t pw, int64_t sampling_ratio, int64_t H, int64_t W,
                                                      DK_TFN(dk_roi_align_axis) *ay, DK_TFN(dk_roi_align_axis) *ax)
{
    /* roi_align's sampling_ratio <= 0 is its adaptive grid, as torchvision's is */
    DK_TFN(dk_roi_align_roi_init)(x1, y1, x2, y2, scale, ph, pw, sampling_ratio > 0 ? sampling_ratio : 0, true, H, W,
                                  ay, ax);
}

/* A bin's maximum before its first pixel: -FLT_MAX for a bin with pixels (both references start
 * there, whatever the dtype), 0 for an empty one. */
DK_HD DK_INLINE DK_T DK_TFN(dk_roi_pool_start)(bool nonempty) { return nonempty ? (DK_T)-FLT_MAX : (DK_T)0; }

/* Whether pixel value v takes a bin's maximum m: only when greater, so NaN never does and the
 * first of equal values stays (the pixels come in rows, then columns). */
DK_HD DK_INLINE bool DK_TFN(dk_roi_pool_wins)(DK_T v, DK_T m) { return v > m; }

/* The gradient a tap of weight w receives from a bin's gradient g over `count` samples:
 * torchvision's (g * w) / count, in that order. */
DK_HD DK_INLINE DK_T DK_TFN(dk_ps_roi_align_share)(DK_T g, DK_T w, DK_T count) { return g * w / count; }

#elif DK_TMPL_PASS == DK_TMPL_FLOAT

/*
 * The maximum of bin [h0, h1) x [w0, w1) of one plane (element (0, 0) at `plane`, strides sy, sx;
 * W the map's width, for the argmax), as the references take it: from 0 for an empty bin, else
 * from -FLT_MAX, a value winning only when greater (NaN never does, the first of equals stays);
 * *argmax = h * W + w of the winner, or -1.
 */
DK_HD DK_INLINE DK_T DK_SFN(dk_roi_pool_max)(const DK_S *plane, int64_t sy, int64_t sx, int64_t W, bool nonempty,
                                             int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t *argmax)
{
    DK_T m = DK_TFN(dk_roi_pool_start)(nonempty);
    int64_t arg = -1;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
            const DK_T v = DK_LOAD(plane[h * sy + w * sx]);
            if (DK_TFN(dk_roi_pool_wins)(v, m)) {
                m = v;
                arg = h * W + w;
            }
        }
    *argmax = arg;
    return m;
}

/* ps_roi_pool's average of bin [h0, h1) x [w0, w1): the sum in the compute type, row by row, over
 * the bin's area; 0 for an empty bin. */
DK_HD DK_INLINE DK_T DK_SFN(dk_roi_pool_avg)(const DK_S *plane, int64_t sy, int64_t sx, bool nonempty, int64_t h0,
                                             int64_t h1, int64_t w0, int64_t w1)
{
    if (!nonempty) return (DK_T)0;
    DK_T sum = 0;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) sum += DK_LOAD(plane[h * sy + w * sx]);
    return sum / (DK_T)((h1 - h0) * (w1 - w0));
}

#endif
