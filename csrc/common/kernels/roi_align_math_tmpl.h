/*
 * kernels/roi_align_math_tmpl.h — the template body of kernels/roi_align_math.h (Note [Templates
 * in C] in dk_template.h): the geometry in the compute pass, the per-element functions in the
 * float storage pass. Included only through dk_instantiate.h.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE
/* ------------------------------------------------------------------------------------------ */
/* Compute pass: compute type DK_T, names suffixed by DK_TFN.                                 */

/* One axis of one RoI. */
typedef struct {
    DK_T start;   /* coordinate of the first bin's edge, in input pixels */
    DK_T bin;     /* bin size; 0 or negative for degenerate aligned boxes, NaN for NaN boxes */
    int64_t grid; /* samples per bin along this axis; 0 when there are none */
} DK_TFN(dk_roi_align_axis);

/* Two bilinear taps along one axis: value = wlo * v[lo] + whi * v[hi]. */
typedef struct {
    int64_t lo, hi;
    DK_T wlo, whi;
} DK_TFN(dk_roi_align_taps);

/* Four taps in torchvision's naming: w1 (y_low, x_low), w2 (y_low, x_high), w3 (y_high, x_low),
 * w4 (y_high, x_high). */
typedef struct {
    int64_t y_low, y_high, x_low, x_high;
    DK_T w1, w2, w3, w4;
} DK_TFN(dk_roi_align_bilinear);

/* One axis from its first bin's edge and its length (before the division into bins), in input
 * pixels. `size` bounds the adaptive grid (DK_ROI_ALIGN_MAX_ADAPTIVE_GRID). */
DK_HD DK_INLINE DK_TFN(dk_roi_align_axis)
    DK_TFN(dk_roi_align_axis_make)(DK_T start, DK_T len, int64_t pooled, int64_t sampling_ratio, int64_t size)
{
    DK_TFN(dk_roi_align_axis) a;
    a.start = start;
    a.bin = len / (DK_T)pooled;
    if (sampling_ratio > 0) {
        a.grid = sampling_ratio;
    } else {
        /* ceil(len / pooled) is ceil(bin): the same expression, the same rounding. */
        const DK_T g = DK_CEIL(a.bin);
        const int64_t cap = DK_ROI_ALIGN_MAX_ADAPTIVE_GRID(size, pooled);
        /* !(g >= 1) catches 0, negatives and NaN; the cap catches inf. */
        a.grid = !(g >= (DK_T)1) ? 0 : (g >= (DK_T)cap ? cap : (int64_t)g);
    }
    return a;
}

/* Geometry of one axis of a box from its two coordinates c1 <= c2 (x1, x2 or y1, y2), in input
 * coordinates before spatial_scale. `size` is the input's extent along the axis (W or H). */
DK_HD DK_INLINE DK_TFN(dk_roi_align_axis)
    DK_TFN(dk_roi_align_axis_init)(DK_T c1, DK_T c2, DK_T spatial_scale, int64_t pooled, int64_t sampling_ratio,
                                   bool aligned, int64_t size)
{
    const DK_T offset = aligned ? (DK_T)0.5 : (DK_T)0;
    const DK_T start = c1 * spatial_scale - offset;
    const DK_T end = c2 * spatial_scale - offset;
    DK_T len = end - start;
    if (!aligned && len < (DK_T)1) /* std::max(len, 1) of the references: NaN stays NaN */
        len = (DK_T)1;
    return DK_TFN(dk_roi_align_axis_make)(start, len, pooled, sampling_ratio, size);
}

/* Both axes of the box (x1, y1, x2, y2) for an input of height x width. */
DK_HD DK_INLINE void DK_TFN(dk_roi_align_roi_init)(DK_T x1, DK_T y1, DK_T x2, DK_T y2, DK_T spatial_scale,
                                                   int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio,
                                                   bool aligned, int64_t height, int64_t width,
                                                   DK_TFN(dk_roi_align_axis) *ay, DK_TFN(dk_roi_align_axis) *ax)
{
    *ay = DK_TFN(dk_roi_align_axis_init)(y1, y2, spatial_scale, pooled_height, sampling_ratio, aligned, height);
    *ax = DK_TFN(dk_roi_align_axis_init)(x1, x2, spatial_scale, pooled_width, sampling_ratio, aligned, width);
}

/* Coordinate of sample i (0 <= i < grid) of bin p. Parenthesised exactly like the references:
 * (start + p * bin) + ((i + 0.5) * bin) / grid. */
DK_HD DK_INLINE DK_T DK_TFN(dk_roi_align_axis_sample)(const DK_TFN(dk_roi_align_axis) *a, int64_t p, int64_t i)
{
    return a->start + (DK_T)p * a->bin + ((DK_T)i + (DK_T)0.5) * a->bin / (DK_T)a->grid;
}

/* The bilinear taps of coordinate v on an axis of `size` pixels. Returns false when the sample
 * contributes nothing (v outside [-1, size], NaN, or size <= 0); then *t is not written.
 * Whenever it returns true, 0 <= lo <= hi <= size - 1. */
DK_HD DK_INLINE bool DK_TFN(dk_roi_align_taps_init)(DK_T v, int64_t size, DK_TFN(dk_roi_align_taps) *t)
{
    if (!(v >= (DK_T)-1 && v <= (DK_T)size) || size <= 0) return false;
    if (v <= (DK_T)0) v = (DK_T)0;
    int64_t lo = (int64_t)v; /* v in [0, size]: the truncation is a floor and cannot overflow */
    int64_t hi;
    if (lo >= size - 1) {
        lo = hi = size - 1;
        v = (DK_T)lo;
    } else {
        hi = lo + 1;
    }
    const DK_T l = v - (DK_T)lo;
    t->lo = lo;
    t->hi = hi;
    t->wlo = (DK_T)1 - l;
    t->whi = l;
    return true;
}

/* The four taps of a sample from its two 1-D taps (a kernel that keeps 1-D taps in a table forms
 * the 2-D ones with this, and so with the same weights' bits). */
DK_HD DK_INLINE void DK_TFN(dk_roi_align_bilinear_of)(const DK_TFN(dk_roi_align_taps) *typ,
                                                      const DK_TFN(dk_roi_align_taps) *txp,
                                                      DK_TFN(dk_roi_align_bilinear) *b)
{
    const DK_TFN(dk_roi_align_taps) ty = *typ, tx = *txp;
    b->y_low = ty.lo;
    b->y_high = ty.hi;
    b->x_low = tx.lo;
    b->x_high = tx.hi;
    b->w1 = ty.wlo * tx.wlo;
    b->w2 = ty.wlo * tx.whi;
    b->w3 = ty.whi * tx.wlo;
    b->w4 = ty.whi * tx.whi;
}

/* The four taps of sample (y, x) on a height x width plane; false when it contributes nothing. */
DK_HD DK_INLINE bool DK_TFN(dk_roi_align_bilinear_init)(DK_T y, DK_T x, int64_t height, int64_t width,
                                                        DK_TFN(dk_roi_align_bilinear) *b)
{
    DK_TFN(dk_roi_align_taps) ty, tx;
    if (!DK_TFN(dk_roi_align_taps_init)(y, height, &ty) || !DK_TFN(dk_roi_align_taps_init)(x, width, &tx)) return false;
    DK_TFN(dk_roi_align_bilinear_of)(&ty, &tx, b);
    return true;
}

/* The samples of an axis with `pooled` bins that may have a tap on pixel p, as a range of sample
 * numbers j = bin * grid + i (bin = j / grid, i = j % grid): all of them are in [*lo, *hi], a
 * range of a few samples, or the whole axis where the arithmetic below cannot promise that.
 * A superset only: the caller still tests each candidate's taps exactly, in increasing j, which
 * is the order of a loop over every sample, so skipping the others changes no sum's bits.
 *
 * Why it holds: a tap of sample v lands on p only if v is in [p - 1, p + 1] (the clamps at the
 * edges: v in [-1, 0] taps 0 and 1, v in [size - 1, size] taps size - 1), so the window
 * [p - 2, p + 2] keeps a pixel of slack each side. Sample j sits at start + (j + 0.5) * s,
 * s = bin / grid, up to the rounding of dk_roi_align_axis_sample: a few ulps of the
 * coordinates' magnitude, which the guard s > 1e-5 * magnitude keeps below a twentieth of s; the
 * range is widened by two samples each side on top. A bin that is not positive and finite
 * (degenerate or NaN boxes) or samples closer than that guard get the whole axis.
 * dk_roi_align_axis_window_of takes the window [vlo, vhi] in the axis' own coordinates, and
 * `extra`, a magnitude that the sample coordinates carry besides the axis' own (a rotated box's
 * centre), for the guard. */
DK_HD DK_INLINE void DK_TFN(dk_roi_align_axis_window_of)(const DK_TFN(dk_roi_align_axis) *a, int64_t pooled, double vlo,
                                                         double vhi, double extra, int64_t *lo, int64_t *hi)
{
    const int64_t n = a->grid > 0 ? pooled * a->grid : 0;
    *lo = 0;
    *hi = n - 1;
    const double start = (double)a->start, bin = (double)a->bin;
    if (n == 0 || !(bin > 0.0 && bin < 1e300 && start > -1e300 && start < 1e300)) return;
    const double s = bin / (double)a->grid;
    const double mag = (start < 0.0 ? -start : start) + bin * (double)pooled + extra + 4.0;
    if (!(s > 1e-5 * mag)) return;
    const double jlo = ceil((vlo - start) / s - 0.5) - 2.0;
    const double jhi = floor((vhi - start) / s - 0.5) + 2.0;
    *lo = jlo <= 0.0 ? 0 : jlo >= (double)n ? n : (int64_t)jlo;
    *hi = jhi >= (double)(n - 1) ? n - 1 : jhi < 0.0 ? -1 : (int64_t)jhi;
}

/* The samples of pixel p: the coordinates [p - 2, p + 2] (see above). */
DK_HD DK_INLINE void DK_TFN(dk_roi_align_axis_window)(const DK_TFN(dk_roi_align_axis) *a, int64_t pooled, int64_t p,
                                                      int64_t *lo, int64_t *hi)
{
    DK_TFN(dk_roi_align_axis_window_of)(a, pooled, (double)p - 2.0, (double)p + 2.0, 0.0, lo, hi);
}

/* Divisor of average pooling: max(grid_h * grid_w, 1). */
DK_HD DK_INLINE DK_T DK_TFN(dk_roi_align_count)(const DK_TFN(dk_roi_align_axis) *ay,
                                                const DK_TFN(dk_roi_align_axis) *ax)
{
    const DK_T c = (DK_T)ay->grid * (DK_T)ax->grid;
    return c > (DK_T)1 ? c : (DK_T)1;
}

/* A rotated RoI (ops/roi_align.h's roi_align_rotated): its centre, the cosine and sine of its
 * angle (clockwise already negated), and its two axes in the box's own frame, centred on 0. */
typedef struct {
    DK_T cy, cx, cos_t, sin_t;
    DK_TFN(dk_roi_align_axis) ay, ax;
} DK_TFN(dk_roi_align_rotated);

/* The RoI (cx, cy, w, h, theta) on a height x width input, MMCV's expressions: the centre less
 * the offset, the size not (only scaled, and at least 1 without `aligned`), the axes starting at
 * -size / 2. The adaptive grid's cap is that of a box along the map's half perimeter, which no
 * rotated box inside the map exceeds. */
DK_HD DK_INLINE void DK_TFN(dk_roi_align_rotated_init)(DK_T cx, DK_T cy, DK_T w, DK_T h, DK_T theta, DK_T spatial_scale,
                                                       int64_t pooled_height, int64_t pooled_width,
                                                       int64_t sampling_ratio, bool aligned, bool clockwise,
                                                       int64_t height, int64_t width, DK_TFN(dk_roi_align_rotated) *r)
{
    const DK_T offset = aligned ? (DK_T)0.5 : (DK_T)0;
    r->cx = cx * spatial_scale - offset;
    r->cy = cy * spatial_scale - offset;
    DK_T rw = w * spatial_scale, rh = h * spatial_scale;
    if (clockwise) theta = -theta;
    if (!aligned) { /* max(size, 1): NaN stays NaN */
        if (rw < (DK_T)1) rw = (DK_T)1;
        if (rh < (DK_T)1) rh = (DK_T)1;
    }
    double s, c; /* Note [One sine for every backend] in dk_trig.h: the GPU's are the CPU's bits */
    dk_sincos((double)theta, &s, &c);
    r->cos_t = (DK_T)c;
    r->sin_t = (DK_T)s;
    const int64_t span = height + width;
    r->ay = DK_TFN(dk_roi_align_axis_make)(-rh / (DK_T)2, rh, pooled_height, sampling_ratio, span);
    r->ax = DK_TFN(dk_roi_align_axis_make)(-rw / (DK_T)2, rw, pooled_width, sampling_ratio, span);
}

/* A sample rotated and moved onto the input, (*y, *x), from the products of its coordinates in
 * the box's frame (yy, xx) with the angle's cosine and sine: yc = yy cos, ys = yy sin, xs = xx
 * sin, xc = xx cos. A kernel that tabulates the products once per row and column of samples
 * turns them with this, and so to dk_roi_align_rotated_sample's bits. */
DK_HD DK_INLINE void DK_TFN(dk_roi_align_rotated_turn)(const DK_TFN(dk_roi_align_rotated) *r, DK_T yc, DK_T ys, DK_T xs,
                                                       DK_T xc, DK_T *y, DK_T *x)
{
    *y = yc - xs + r->cy;
    *x = ys + xc + r->cx;
}

/* Sample (iy, ix) of bin (ph, pw), rotated and moved onto the input: (*y, *x). */
DK_HD DK_INLINE void DK_TFN(dk_roi_align_rotated_sample)(const DK_TFN(dk_roi_align_rotated) *r, int64_t ph, int64_t pw,
                                                         int64_t iy, int64_t ix, DK_T *y, DK_T *x)
{
    const DK_T yy = DK_TFN(dk_roi_align_axis_sample)(&r->ay, ph, iy);
    const DK_T xx = DK_TFN(dk_roi_align_axis_sample)(&r->ax, pw, ix);
    DK_TFN(dk_roi_align_rotated_turn)(r, yy * r->cos_t, yy * r->sin_t, xx * r->sin_t, xx * r->cos_t, y, x);
}

/* The samples of a rotated RoI whose taps may land on pixel (py, px), as ranges of sample numbers
 * along each of its axes (dk_roi_align_axis_window_of): a tap of sample (y, x) lands there only
 * if |y - py| <= 2 and |x - px| <= 2 (|.| <= 1 inside the map; a sample in [-1, 0] also taps
 * pixel 1, with weight 0), so the box's own coordinates of such a sample lie within the square
 * [py - 3, py + 3] x [px - 3, px + 3] turned back by the angle (a pixel of slack for the
 * rotation's rounding), whose extent along each axis is the centre's projection
 * +- 3 (|cos| + |sin|). The slack holds while the coordinates' magnitude is below 1e5 pixels
 * (their rounding is then a hundredth of a pixel in float32); beyond it, and for a NaN angle,
 * every sample is visited. The spacing guard of dk_roi_align_axis_window_of counts the centre. */
DK_HD DK_INLINE void DK_TFN(dk_roi_align_rotated_window)(const DK_TFN(dk_roi_align_rotated) *r, int64_t pooled_height,
                                                         int64_t pooled_width, int64_t py, int64_t px, int64_t *jy0,
                                                         int64_t *jy1, int64_t *jx0, int64_t *jx1)
{
    const double c = (double)r->cos_t, s = (double)r->sin_t;
    const double dy = (double)py - (double)r->cy, dx = (double)px - (double)r->cx;
    const double reach = 3.0 * ((c < 0 ? -c : c) + (s < 0 ? -s : s));
    const double cy = (double)r->cy, cx = (double)r->cx, sy = (double)r->ay.start, sx = (double)r->ax.start;
    const double extra = (cy < 0 ? -cy : cy) + (cx < 0 ? -cx : cx);
    const double mag = extra + 2.0 * ((sy < 0 ? -sy : sy) + (sx < 0 ? -sx : sx)) + 4.0;
    const double yy = dy * c + dx * s, xx = dx * c - dy * s;
    if (!(reach <= 4.5 && mag < 1e5)) { /* a NaN angle, or coordinates too large for the slack */
        *jy0 = *jx0 = 0;
        *jy1 = r->ay.grid > 0 ? pooled_height * r->ay.grid - 1 : -1;
        *jx1 = r->ax.grid > 0 ? pooled_width * r->ax.grid - 1 : -1;
        return;
    }
    DK_TFN(dk_roi_align_axis_window_of)(&r->ay, pooled_height, yy - reach, yy + reach, extra, jy0, jy1);
    DK_TFN(dk_roi_align_axis_window_of)(&r->ax, pooled_width, xx - reach, xx + reach, extra, jx0, jx1);
}

#elif DK_TMPL_PASS == DK_TMPL_FLOAT
/* ------------------------------------------------------------------------------------------ */
/* Storage pass: storage type DK_S, computed in DK_T (whose math functions carry the suffix   */
/* DK_TFN), names suffixed by DK_SFN, conversions DK_LOAD / DK_STORE.                         */

DK_HD DK_INLINE DK_T DK_SFN(dk_roi_align_load)(const DK_S *p) { return DK_LOAD(*p); }

DK_HD DK_INLINE void DK_SFN(dk_roi_align_store)(DK_S *p, DK_T v) { *p = DK_STORE(v); }

/* w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4, summed left to right like the references. */
DK_HD DK_INLINE DK_T DK_SFN(dk_roi_align_interp)(const DK_S *plane, int64_t sy, int64_t sx,
                                                 const DK_TFN(dk_roi_align_bilinear) *b)
{
    const DK_T v1 = DK_LOAD(plane[b->y_low * sy + b->x_low * sx]);
    const DK_T v2 = DK_LOAD(plane[b->y_low * sy + b->x_high * sx]);
    const DK_T v3 = DK_LOAD(plane[b->y_high * sy + b->x_low * sx]);
    const DK_T v4 = DK_LOAD(plane[b->y_high * sy + b->x_high * sx]);
    return b->w1 * v1 + b->w2 * v2 + b->w3 * v3 + b->w4 * v4;
}

/* Average-pooled output (ph, pw) of one RoI on one plane. */
DK_HD DK_INLINE DK_T DK_SFN(dk_roi_align_forward_avg)(const DK_S *plane, int64_t sy, int64_t sx, int64_t height,
                                                      int64_t width, const DK_TFN(dk_roi_align_axis) *ay,
                                                      const DK_TFN(dk_roi_align_axis) *ax, int64_t ph, int64_t pw)
{
    DK_T sum = (DK_T)0;
    for (int64_t iy = 0; iy < ay->grid; ++iy) {
        const DK_T y = DK_TFN(dk_roi_align_axis_sample)(ay, ph, iy);
        for (int64_t ix = 0; ix < ax->grid; ++ix) {
            const DK_T x = DK_TFN(dk_roi_align_axis_sample)(ax, pw, ix);
            DK_TFN(dk_roi_align_bilinear) b;
            if (DK_TFN(dk_roi_align_bilinear_init)(y, x, height, width, &b))
                sum += DK_SFN(dk_roi_align_interp)(plane, sy, sx, &b);
        }
    }
    return sum / DK_TFN(dk_roi_align_count)(ay, ax);
}

/*
 * Max-pooled output (ph, pw) and the sample that produced it, MMCV's rules: a sample outside
 * the input has value 0 and competes like any other; the first strictly greater value wins
 * (NaN never wins); the maximum starts at -FLT_MAX. The argmax is the sample's coordinate
 * before edge clamping, so backward recomputes the same taps from it.
 * A bin without samples (only a degenerate or non-finite box has one) gives 0 with argmax
 * (-1, -1): MMCV would return its initial -FLT_MAX (-10000 on its CPU path) there.
 */
DK_HD DK_INLINE DK_T DK_SFN(dk_roi_align_forward_max)(const DK_S *plane, int64_t sy, int64_t sx, int64_t height,
                                                      int64_t width, const DK_TFN(dk_roi_align_axis) *ay,
                                                      const DK_TFN(dk_roi_align_axis) *ax, int64_t ph, int64_t pw,
                                                      DK_T *argmax_y, DK_T *argmax_x)
{
    DK_T maxval = (DK_T)-FLT_MAX;
    DK_T my = (DK_T)-1, mx = (DK_T)-1;
    if (ay->grid <= 0 || ax->grid <= 0) {
        *argmax_y = my;
        *argmax_x = mx;
        return (DK_T)0;
    }
    for (int64_t iy = 0; iy < ay->grid; ++iy) {
        const DK_T y = DK_TFN(dk_roi_align_axis_sample)(ay, ph, iy);
        for (int64_t ix = 0; ix < ax->grid; ++ix) {
            const DK_T x = DK_TFN(dk_roi_align_axis_sample)(ax, pw, ix);
            DK_TFN(dk_roi_align_bilinear) b;
            const DK_T val = DK_TFN(dk_roi_align_bilinear_init)(y, x, height, width, &b)
                                 ? DK_SFN(dk_roi_align_interp)(plane, sy, sx, &b)
                                 : (DK_T)0;
            if (val > maxval) {
                maxval = val;
                my = y;
                mx = x;
            }
        }
    }
    *argmax_y = my;
    *argmax_x = mx;
    return maxval;
}

/* roi_align_rotated's output (ph, pw) of one RoI on one plane: the samples' bilinear values
 * summed in MMCV's order (iy, then ix), divided by max(grid_h * grid_w, 1). */
DK_HD DK_INLINE DK_T DK_SFN(dk_roi_align_rotated_forward)(const DK_S *plane, int64_t sy, int64_t sx, int64_t height,
                                                          int64_t width, const DK_TFN(dk_roi_align_rotated) *r,
                                                          int64_t ph, int64_t pw)
{
    DK_T sum = (DK_T)0;
    for (int64_t iy = 0; iy < r->ay.grid; ++iy)
        for (int64_t ix = 0; ix < r->ax.grid; ++ix) {
            DK_T y, x;
            DK_TFN(dk_roi_align_rotated_sample)(r, ph, pw, iy, ix, &y, &x);
            DK_TFN(dk_roi_align_bilinear) b;
            if (DK_TFN(dk_roi_align_bilinear_init)(y, x, height, width, &b))
                sum += DK_SFN(dk_roi_align_interp)(plane, sy, sx, &b);
        }
    return sum / DK_TFN(dk_roi_align_count)(&r->ay, &r->ax);
}

#endif
