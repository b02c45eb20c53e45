/*
 * kernels/rotated_math_tmpl.h — the template body of kernels/rotated_math.h (Note
 * [Templates in C] in dk_template.h), instantiated for the compute types. Included only through
 * dk_instantiate.h. Points are kept as separate x and y arrays; every expression is written in
 * the order MMCV evaluates it (its Point operators round after each operation).
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* MMCV's cross_2d(A, B) and dot_2d(A, B). */
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_cross)(DK_T ax, DK_T ay, DK_T bx, DK_T by) { return ax * by - bx * ay; }
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_dot)(DK_T ax, DK_T ay, DK_T bx, DK_T by) { return ax * bx + ay * by; }

/* The four corners of a box (step 3 of the header), in MMCV's order p0, p1, p2, p3. */
DK_HD DK_INLINE void DK_TFN(dk_rbox_corners)(DK_T cx, DK_T cy, DK_T w, DK_T h, DK_T angle, bool clockwise, DK_T *px,
                                            DK_T *py)
{
    const double theta = clockwise ? (double)angle : -(double)angle;
    const DK_T c = (DK_T)cos(theta) * (DK_T)0.5;
    const DK_T s = (DK_T)sin(theta) * (DK_T)0.5;
    px[0] = cx - s * h - c * w;
    py[0] = cy + c * h - s * w;
    px[1] = cx + s * h - c * w;
    py[1] = cy - c * h - s * w;
    px[2] = (DK_T)2 * cx - px[0];
    py[2] = (DK_T)2 * cy - py[0];
    px[3] = (DK_T)2 * cx - px[1];
    py[3] = (DK_T)2 * cy - py[1];
}

/* Corners of box p (px, py) inside box q, appended to (ix, iy) from index n; returns the new n.
 * P is inside ABCD when its projections on AB and AD fall within those edges. */
DK_HD DK_INLINE int DK_TFN(dk_rbox_corners_inside)(const DK_T *px, const DK_T *py, const DK_T *qx, const DK_T *qy,
                                                  DK_T *ix, DK_T *iy, int n)
{
    const DK_T abx = qx[1] - qx[0], aby = qy[1] - qy[0]; /* edge 0: A -> B */
    const DK_T dax = qx[0] - qx[3], day = qy[0] - qy[3]; /* edge 3: D -> A */
    const DK_T ab2 = DK_TFN(dk_rbox_dot)(abx, aby, abx, aby);
    const DK_T ad2 = DK_TFN(dk_rbox_dot)(dax, day, dax, day);
    for (int i = 0; i < 4; i++) {
        const DK_T apx = px[i] - qx[0], apy = py[i] - qy[0];
        const DK_T ap_ab = DK_TFN(dk_rbox_dot)(apx, apy, abx, aby);
        const DK_T ap_ad = -DK_TFN(dk_rbox_dot)(apx, apy, dax, day);
        if (ap_ab >= 0 && ap_ad >= 0 && ap_ab <= ab2 && ap_ad <= ad2) {
            ix[n] = px[i];
            iy[n] = py[i];
            n++;
        }
    }
    return n;
}

/*
 * The candidate vertices of the intersection of two boxes' corner quadrilaterals (step 4):
 * (ix, iy) must hold DK_RBOX_MAX_POINTS; returns how many were written.
 */
DK_HD DK_INLINE int DK_TFN(dk_rbox_clip_points)(const DK_T *p1x, const DK_T *p1y, const DK_T *p2x, const DK_T *p2y,
                                               DK_T *ix, DK_T *iy)
{
    DK_T v1x[4], v1y[4], v2x[4], v2y[4];
    for (int i = 0; i < 4; i++) {
        v1x[i] = p1x[(i + 1) % 4] - p1x[i];
        v1y[i] = p1y[(i + 1) % 4] - p1y[i];
        v2x[i] = p2x[(i + 1) % 4] - p2x[i];
        v2y[i] = p2y[(i + 1) % 4] - p2y[i];
    }
    int n = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const DK_T det = DK_TFN(dk_rbox_cross)(v2x[j], v2y[j], v1x[i], v1y[i]);
            if (fabs((double)det) <= 1e-14) continue; /* parallel edges (NaN goes on, and fails below) */
            const DK_T wx = p2x[j] - p1x[i], wy = p2y[j] - p1y[i];
            const DK_T t1 = DK_TFN(dk_rbox_cross)(v2x[j], v2y[j], wx, wy) / det;
            const DK_T t2 = DK_TFN(dk_rbox_cross)(v1x[i], v1y[i], wx, wy) / det;
            if (t1 >= (DK_T)0 && t1 <= (DK_T)1 && t2 >= (DK_T)0 && t2 <= (DK_T)1) {
                ix[n] = p1x[i] + v1x[i] * t1;
                iy[n] = p1y[i] + v1y[i] * t1;
                n++;
            }
        }
    n = DK_TFN(dk_rbox_corners_inside)(p1x, p1y, p2x, p2y, ix, iy, n);
    return DK_TFN(dk_rbox_corners_inside)(p2x, p2y, p1x, p1y, ix, iy, n);
}

/*
 * The convex hull of (px, py)[0 .. n), n >= 3, by Graham scan (step 5), relative to its lowest
 * point: (qx, qy) receive the hull's vertices in order (room for DK_RBOX_MAX_POINTS); returns
 * their count (1 when every point coincides with the origin).
 */
DK_HD DK_INLINE int DK_TFN(dk_rbox_hull)(const DK_T *px, const DK_T *py, int n, DK_T *qx, DK_T *qy)
{
    int t = 0;
    for (int i = 1; i < n; i++)
        if (py[i] < py[t] || (py[i] == py[t] && px[i] < px[t])) t = i;
    for (int i = 0; i < n; i++) {
        qx[i] = px[i] - px[t];
        qy[i] = py[i] - py[t];
    }
    DK_T tmp = qx[0];
    qx[0] = qx[t];
    qx[t] = tmp;
    tmp = qy[0];
    qy[0] = qy[t];
    qy[t] = tmp;
    DK_T dist[DK_RBOX_MAX_POINTS];
    for (int i = 0; i < n; i++) dist[i] = DK_TFN(dk_rbox_dot)(qx[i], qy[i], qx[i], qy[i]);
    /* Note [The hull's sort] in rotated_math.h */
    for (int i = 1; i < n - 1; i++)
        for (int j = i + 1; j < n; j++) {
            const DK_T cr = DK_TFN(dk_rbox_cross)(qx[i], qy[i], qx[j], qy[j]);
            if ((double)cr < -1e-6 || (fabs((double)cr) < 1e-6 && dist[i] > dist[j])) {
                tmp = qx[i], qx[i] = qx[j], qx[j] = tmp;
                tmp = qy[i], qy[i] = qy[j], qy[j] = tmp;
                tmp = dist[i], dist[i] = dist[j], dist[j] = tmp;
            }
        }
    int k = 1;
    while (k < n && !((double)dist[k] > 1e-8)) k++;
    if (k == n) return 1; /* a single point: no area */
    qx[1] = qx[k];
    qy[1] = qy[k];
    int m = 2;
    for (int i = k + 1; i < n; i++) {
        while (m > 1 && DK_TFN(dk_rbox_cross)(qx[i] - qx[m - 2], qy[i] - qy[m - 2], qx[m - 1] - qx[m - 2],
                                              qy[m - 1] - qy[m - 2]) >= (DK_T)0)
            m--;
        qx[m] = qx[i];
        qy[m] = qy[i];
        m++;
    }
    return m;
}

/* The area of a convex polygon of m vertices, as a fan of triangles from vertex 0. */
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_polygon_area)(const DK_T *qx, const DK_T *qy, int m)
{
    if (m <= 2) return (DK_T)0;
    DK_T area = 0;
    for (int i = 1; i < m - 1; i++)
        area += (DK_T)fabs((double)DK_TFN(dk_rbox_cross)(qx[i] - qx[0], qy[i] - qy[0], qx[i + 1] - qx[0],
                                                         qy[i + 1] - qy[0]));
    return (DK_T)((double)area / 2.0);
}

/*
 * The area of the intersection of two boxes b = (cx, cy, w, h, angle), already in the
 * coordinates the caller chose (dk_rbox_overlap centres them): steps 3 to 5 of the header.
 */
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_intersection)(const DK_T *a, const DK_T *b, bool clockwise)
{
    DK_T p1x[4], p1y[4], p2x[4], p2y[4];
    DK_T ix[DK_RBOX_MAX_POINTS], iy[DK_RBOX_MAX_POINTS], qx[DK_RBOX_MAX_POINTS], qy[DK_RBOX_MAX_POINTS];
    DK_TFN(dk_rbox_corners)(a[0], a[1], a[2], a[3], a[4], clockwise, p1x, p1y);
    DK_TFN(dk_rbox_corners)(b[0], b[1], b[2], b[3], b[4], clockwise, p2x, p2y);
    const int n = DK_TFN(dk_rbox_clip_points)(p1x, p1y, p2x, p2y, ix, iy);
    if (n <= 2) return (DK_T)0;
    const int m = DK_TFN(dk_rbox_hull)(ix, iy, n, qx, qy);
    return DK_TFN(dk_rbox_polygon_area)(qx, qy, m);
}

/*
 * MMCV's single_box_iou_rotated(a, b, mode): the overlap of boxes a and b, each
 * (cx, cy, w, h, angle) in the compute type, mode DK_RBOX_IOU or DK_RBOX_IOF (inter / area of a).
 * Argument order matters to the last bit (a is NMS's kept box, b the candidate).
 */
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_overlap)(const DK_T *a, const DK_T *b, int mode, bool clockwise)
{
    const double sx = (double)(DK_T)(a[0] + b[0]) / 2.0;
    const double sy = (double)(DK_T)(a[1] + b[1]) / 2.0;
    const DK_T ca[5] = {(DK_T)((double)a[0] - sx), (DK_T)((double)a[1] - sy), a[2], a[3], a[4]};
    const DK_T cb[5] = {(DK_T)((double)b[0] - sx), (DK_T)((double)b[1] - sy), b[2], b[3], b[4]};
    const DK_T area1 = ca[2] * ca[3];
    const DK_T area2 = cb[2] * cb[3];
    if ((double)area1 < 1e-14 || (double)area2 < 1e-14) return (DK_T)0;
    const DK_T inter = DK_TFN(dk_rbox_intersection)(ca, cb, clockwise);
    const DK_T base = mode == DK_RBOX_IOF ? area1 : area1 + area2 - inter;
    return inter / base;
}

/*
 * Note [Bounding circles]
 * Every corner of a box lies on the circle of radius sqrt(w^2 + h^2) / 2 about its centre, so
 * two boxes whose circles are apart do not meet: their true intersection is empty. The CPU
 * kernels use this to skip such pairs (most pairs of a real image) after a few multiplications,
 * writing the 0 that dk_rbox_overlap computes for them; for that, rounding must not be able to
 * create an intersection in dk_rbox_overlap. dk_rbox_apart therefore asks for a clear gap:
 * centre distance d > (r_a + r_b) (1 + 2^-10), in double. The gap is then at least about
 * d / 2^11, while the corners dk_rbox_overlap computes (near the origin after its centre shift,
 * every coordinate below d) are off by a few units in the last place of d (2^-24 d in float32):
 * thousands of times less. No projection test can then put a corner inside the other box, and an
 * edge pair can pass the crossing test only if its parameters t1, t2 are rounding noise, which
 * needs edges parallel to within rounding (|det| of the order of its own rounding error); even
 * then the points such a pair adds lie on one edge of box a, so a hull of them has no area to
 * speak of. That case was sought and not found: 6 million pairs built to provoke it (equal and
 * perpendicular angles, edges collinear along a shared axis, gaps from 2^-10 to 1% of the reach,
 * float32 and float64) all gave exactly 0 (test_kernel_rotated.c repeats a part of that search).
 * So the skip changes no value, and so no NMS decision; were the parallel case ever to occur, it
 * would replace a rounding-noise IoU (of order 2^-24 d^2 / area) by the true 0.
 * A NaN value or an infinite w or h never counts as apart (a comparison with NaN is false, an
 * infinite reach is never exceeded), so such boxes take the full computation; an infinite centre
 * with a finite size does count as apart, and dk_rbox_overlap gives it 0 too (its shifted centre
 * is NaN). A pair skipped is worth +0: what dk_rbox_overlap returns for boxes that do not meet
 * (0 / (area_a + area_b), or 0 / area_a; an area below 1e-14 returns 0 directly).
 */

/* The radius of a box's bounding circle (NaN or infinite for such w or h). */
DK_HD DK_INLINE double DK_TFN(dk_rbox_radius)(const DK_T *b)
{
    return 0.5 * sqrt((double)b[2] * (double)b[2] + (double)b[3] * (double)b[3]);
}

/* Whether boxes a and b, of bounding-circle radii ra and rb, are clearly apart (the Note). */
DK_HD DK_INLINE bool DK_TFN(dk_rbox_apart)(const DK_T *a, double ra, const DK_T *b, double rb)
{
    const double dx = (double)a[0] - (double)b[0], dy = (double)a[1] - (double)b[1];
    const double reach = (ra + rb) * (1.0 + 1.0 / 1024.0);
    return dx * dx + dy * dy > reach * reach;
}

#endif
