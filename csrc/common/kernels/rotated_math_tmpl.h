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

/*
 * One step of Sutherland-Hodgman (Note [Clipping rotated boxes] in rotated_math.h): the polygon
 * (px, py)[0 .. n) clipped by the half-plane on the inner side of the directed line s -> e
 * (orient: +1 when the inner side is to the left, -1 to the right) into (qx, qy), which hold
 * DK_RBOX_MAX_POINTS; returns the new count. A vertex on the line counts as inside; a crossing
 * point is made only between a vertex strictly inside and one strictly outside, so the
 * parameter t is strictly between 0 and 1 and its denominator is never 0.
 */
DK_HD DK_INLINE int DK_TFN(dk_rbox_clip_half)(const DK_T *px, const DK_T *py, int n, DK_T sx, DK_T sy, DK_T ex, DK_T ey,
                                              DK_T orient, DK_T *qx, DK_T *qy)
{
    if (n == 0) return 0;
    const DK_T dx = ex - sx, dy = ey - sy;
    DK_T ax = px[n - 1], ay = py[n - 1];
    DK_T da = orient * DK_TFN(dk_rbox_cross)(dx, dy, ax - sx, ay - sy);
    int m = 0;
    for (int i = 0; i < n; i++) {
        const DK_T bx = px[i], by = py[i];
        const DK_T db = orient * DK_TFN(dk_rbox_cross)(dx, dy, bx - sx, by - sy);
        if (((da > 0 && db < 0) || (da < 0 && db > 0)) && m < DK_RBOX_MAX_POINTS) {
            const DK_T t = da / (da - db);
            qx[m] = ax + (bx - ax) * t;
            qy[m] = ay + (by - ay) * t;
            m++;
        }
        if (db >= 0 && m < DK_RBOX_MAX_POINTS) {
            qx[m] = bx;
            qy[m] = by;
            m++;
        }
        ax = bx, ay = by, da = db;
    }
    return m;
}

/* The area of a polygon of m vertices in order (either way round), as a fan of triangles from
 * vertex 0 (differences from one vertex keep the products small). */
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_polygon_area)(const DK_T *qx, const DK_T *qy, int m)
{
    if (m <= 2) return (DK_T)0;
    DK_T area = 0;
    for (int i = 1; i < m - 1; i++)
        area += DK_TFN(dk_rbox_cross)(qx[i] - qx[0], qy[i] - qy[0], qx[i + 1] - qx[0], qy[i + 1] - qy[0]);
    return (DK_T)(fabs((double)area) / 2.0);
}

/* Whether the 4 + 4 vertices are all finite (x - x is NaN for an infinite or NaN x). */
DK_HD DK_INLINE bool DK_TFN(dk_rbox_finite)(const DK_T *px, const DK_T *py, const DK_T *bx, const DK_T *by)
{
    DK_T sum = 0;
    for (int i = 0; i < 4; i++) sum += (px[i] - px[i]) + (py[i] - py[i]) + (bx[i] - bx[i]) + (by[i] - by[i]);
    return sum == 0;
}

/*
 * The area of quadrilateral (px, py)[0 .. 4) clipped by the four edges of the convex
 * quadrilateral (bx, by), whose inside is to the left of its edges when orient is +1, to the
 * right when -1 (Note [Clipping rotated boxes]; rotated boxes and quadrilaterals alike).
 * (px, py) hold DK_RBOX_MAX_POINTS and are overwritten.
 */
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_clip_quad)(DK_T *px, DK_T *py, const DK_T *bx, const DK_T *by, DK_T orient)
{
    DK_T qx[DK_RBOX_MAX_POINTS], qy[DK_RBOX_MAX_POINTS];
    int n = 4;
    for (int e = 0; e < 4; e += 2) { /* two edges per round: (px, py) -> (qx, qy) -> (px, py) */
        n = DK_TFN(dk_rbox_clip_half)(px, py, n, bx[e], by[e], bx[e + 1], by[e + 1], orient, qx, qy);
        n = DK_TFN(dk_rbox_clip_half)(qx, qy, n, bx[e + 1], by[e + 1], bx[(e + 2) % 4], by[(e + 2) % 4], orient, px,
                                      py);
    }
    return DK_TFN(dk_rbox_polygon_area)(px, py, n);
}

/*
 * The area of the intersection of two boxes b = (cx, cy, w, h, angle), already in the
 * coordinates the caller chose (dk_rbox_overlap centres them): box a's corner quadrilateral
 * clipped by the four edges of box b's (Note [Clipping rotated boxes]). Non-finite corners
 * (NaN or infinite values) give 0, as no candidate vertex did in MMCV's procedure.
 */
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_intersection)(const DK_T *a, const DK_T *b, bool clockwise)
{
    DK_T px[DK_RBOX_MAX_POINTS], py[DK_RBOX_MAX_POINTS];
    DK_T bx[4], by[4];
    DK_TFN(dk_rbox_corners)(a[0], a[1], a[2], a[3], a[4], clockwise, px, py);
    DK_TFN(dk_rbox_corners)(b[0], b[1], b[2], b[3], b[4], clockwise, bx, by);
    if (!DK_TFN(dk_rbox_finite)(px, py, bx, by)) return (DK_T)0;
    /* box b's inner side: its corners run one way round, the sign of one turn says which */
    const DK_T turn = DK_TFN(dk_rbox_cross)(bx[1] - bx[0], by[1] - by[0], bx[2] - bx[1], by[2] - by[1]);
    return DK_TFN(dk_rbox_clip_quad)(px, py, bx, by, turn >= 0 ? (DK_T)1 : (DK_T)-1);
}

/* iou (inter / union) or iof (inter / area1) of an intersection of two shapes of areas area1,
 * area2 (both at least 1e-14): the intersection clamped to the smaller area first (rounding may
 * exceed it) and a NaN one taken as 0, so that the result is within [0, 1]. */
DK_HD DK_INLINE DK_T DK_TFN(dk_rbox_ratio)(DK_T inter, DK_T area1, DK_T area2, int mode)
{
    const DK_T smaller = area1 < area2 ? area1 : area2;
    if (inter != inter) inter = 0;
    else if (inter > smaller) inter = smaller;
    const DK_T base = mode == DK_RBOX_IOF ? area1 : area1 + area2 - inter;
    return inter / base;
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
    /* an intersection is never larger than either box: rounding may not make it so, and the
     * overlap then stays within [0, 1] (a box against itself written another way gives 1) */
    return DK_TFN(dk_rbox_ratio)(DK_TFN(dk_rbox_intersection)(ca, cb, clockwise), area1, area2, mode);
}

/*
 * MMCV's single_box_iou_quadri(a, b, mode) for quadrilaterals a and b, each (x1, y1, ..., x4, y4)
 * in the compute type (Note [Quadrilaterals] in rotated_math.h): both moved by the mean of their
 * eight vertices (summed in the compute type in MMCV's order, divided in double, the shifted
 * vertices rounded back), the areas, then a clipped by b's edges. Argument order matters to the
 * last bit (a is NMS's kept box, b the candidate).
 */
DK_HD DK_INLINE DK_T DK_TFN(dk_quad_overlap)(const DK_T *a, const DK_T *b, int mode)
{
    const double sx = (double)(DK_T)(a[0] + b[0] + a[2] + b[2] + a[4] + b[4] + a[6] + b[6]) / 8.0;
    const double sy = (double)(DK_T)(a[1] + b[1] + a[3] + b[3] + a[5] + b[5] + a[7] + b[7]) / 8.0;
    DK_T px[DK_RBOX_MAX_POINTS], py[DK_RBOX_MAX_POINTS], bx[4], by[4];
    for (int k = 0; k < 4; k++) {
        px[k] = (DK_T)((double)a[2 * k] - sx), py[k] = (DK_T)((double)a[2 * k + 1] - sy);
        bx[k] = (DK_T)((double)b[2 * k] - sx), by[k] = (DK_T)((double)b[2 * k + 1] - sy);
    }
    /* twice the signed areas (a fan from vertex 0: positive counter-clockwise with y up) */
    const DK_T sa = DK_TFN(dk_rbox_cross)(px[1] - px[0], py[1] - py[0], px[2] - px[0], py[2] - py[0]) +
                    DK_TFN(dk_rbox_cross)(px[2] - px[0], py[2] - py[0], px[3] - px[0], py[3] - py[0]);
    const DK_T sb = DK_TFN(dk_rbox_cross)(bx[1] - bx[0], by[1] - by[0], bx[2] - bx[0], by[2] - by[0]) +
                    DK_TFN(dk_rbox_cross)(bx[2] - bx[0], by[2] - by[0], bx[3] - bx[0], by[3] - by[0]);
    const DK_T area1 = (DK_T)(fabs((double)sa) / 2.0), area2 = (DK_T)(fabs((double)sb) / 2.0);
    if ((double)area1 < 1e-14 || (double)area2 < 1e-14) return (DK_T)0;
    const DK_T inter = DK_TFN(dk_rbox_finite)(px, py, bx, by)
                           ? DK_TFN(dk_rbox_clip_quad)(px, py, bx, by, sb >= 0 ? (DK_T)1 : (DK_T)-1)
                           : (DK_T)0;
    return DK_TFN(dk_rbox_ratio)(inter, area1, area2, mode);
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
 * thousands of times less. The clipper keeps a point only on the inner side of all four of box
 * b's edge lines (to within that rounding), and box a lies wholly outside one of those lines or
 * box b wholly outside one of a's: in the first case every vertex is cut away at once; in the
 * second the points that survive lie within rounding of a's edge, a sliver with no area to speak
 * of. test_kernel_rotated.c searches for a counterexample (equal and perpendicular angles, edges
 * collinear along a shared axis, gaps from 2^-10 to 1% of the reach, float32 and float64): every
 * such pair gives exactly 0. So the skip changes no value, and so no NMS decision; were a sliver
 * ever to occur, it would replace a rounding-noise IoU (of order 2^-24 d^2 / area) by the true 0.
 * A NaN value or an infinite w or h never counts as apart (a comparison with NaN is false, an
 * infinite reach is never exceeded), so such boxes take the full computation; an infinite centre
 * with a finite size does count as apart, and dk_rbox_overlap gives it 0 too (its shifted centre
 * is NaN). A pair skipped is worth +0: what dk_rbox_overlap returns for boxes that do not meet
 * (0 / (area_a + area_b), or 0 / area_a; an area below 1e-14 returns 0 directly).
 * Quadrilaterals (Note [Quadrilaterals]) take the same test with dk_quad_circle's circle (the
 * mean of the vertices, the distance to the farthest, in double): the argument above needs only
 * that two disjoint convex polygons are separated by the line of an edge of one of them, and
 * their shifted vertices are rounded once, less than rotated corners are. A quadrilateral with a
 * non-finite vertex has a NaN radius and is never apart, so it takes the full computation (NaN
 * or 0, as dk_quad_overlap gives it).
 */

/* A quadrilateral's bounding circle (x, y, r): the mean of its vertices and the distance to the
 * farthest, in double; r is NaN when a vertex is not finite, so that such a quadrilateral is
 * never apart from anything (dk_rbox_apart_at) and takes the full computation. */
DK_HD DK_INLINE void DK_TFN(dk_quad_circle)(const DK_T *q, double *c)
{
    const double x = ((double)q[0] + (double)q[2] + (double)q[4] + (double)q[6]) / 4.0;
    const double y = ((double)q[1] + (double)q[3] + (double)q[5] + (double)q[7]) / 4.0;
    double r2 = 0, fin = 0;
    for (int k = 0; k < 4; k++) {
        const double dx = (double)q[2 * k] - x, dy = (double)q[2 * k + 1] - y;
        r2 = dx * dx + dy * dy > r2 ? dx * dx + dy * dy : r2;
        fin += ((double)q[2 * k] - (double)q[2 * k]) + ((double)q[2 * k + 1] - (double)q[2 * k + 1]);
    }
    c[0] = x, c[1] = y, c[2] = fin == 0 ? sqrt(r2) : NAN;
}

/* The radius of a box's bounding circle (NaN or infinite for such w or h). */
DK_HD DK_INLINE double DK_TFN(dk_rbox_radius)(const DK_T *b)
{
    return 0.5 * sqrt((double)b[2] * (double)b[2] + (double)b[3] * (double)b[3]);
}

/* Whether boxes a and b, of bounding-circle radii ra and rb, are clearly apart (the Note). */
DK_HD DK_INLINE bool DK_TFN(dk_rbox_apart)(const DK_T *a, double ra, const DK_T *b, double rb)
{
    return dk_rbox_apart_at((double)a[0], (double)a[1], ra, (double)b[0], (double)b[1], rb);
}

#endif
