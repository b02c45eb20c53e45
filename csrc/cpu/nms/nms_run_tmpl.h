/*
 * nms/nms_run_tmpl.h — the suppression loop: exactly the references' decisions, with far fewer
 * overlaps computed. A template (Note [Templates in C] in kernels/dk_template.h), the compute
 * pass: boxes arrive as x[4][n] (x1, y1, x2, y2) and area[n] in the compute type.
 *
 * Note [What can suppress what]
 * The references test every later box against every kept one: N^2 / 2 overlaps, 50 million for
 * 10,000 boxes. But for a threshold >= 0 a kept box i suppresses a candidate j only when their
 * overlap exceeds it, hence only when w > 0 and h > 0 (kernels/box_math.h), i.e. when their
 * extents [x1, x2 + offset] x [y1, y2 + offset] overlap: a box meets only the kept boxes near it.
 * And a box with a non-finite coordinate or area, or an empty extent, neither suppresses nor is
 * suppressed (its overlap with anything is 0 or NaN, never above a threshold >= 0): it is simply
 * kept. So the kept boxes go into a uniform grid of cells about the size of a typical box; a
 * candidate is tested against the kept boxes of the cells its extent covers, with the
 * references' own arithmetic (dk_box_nms_overlap), in the references' order (score order, each
 * candidate against the boxes kept before it). The decisions, and so the kept set and its order,
 * are theirs exactly; the work is about N times the few boxes near each one. Boxes far larger
 * than the cells, or with coordinates beyond 2^40 (where cell arithmetic in double could round),
 * are "loose": tested against every kept box of their category, and every candidate against
 * them. A NaN or negative threshold changes what can suppress what (0 > -0.5), and takes the
 * references' double loop.
 *
 * Categories (batched_nms): boxes of different categories never interact, so each category is
 * suppressed on its own, with its own grid; the kept set is then reported in the global score
 * order, as torchvision reports batched_nms.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

#define X1(i) x[(i)]
#define Y1(i) x[n + (i)]
#define X2(i) x[2 * n + (i)]
#define Y2(i) x[3 * n + (i)]

/* Does kept box k suppress candidate j? (the references' test, their argument order) */
static inline bool DK_TFN(dk__nms_suppresses)(const DK_T *x, const DK_T *area, int64_t n, int64_t k, int64_t j,
                                              DK_T off, double thr)
{
    const DK_T ovr = DK_TFN(dk_box_nms_overlap)(X1(k), Y1(k), X2(k), Y2(k), area[k], X1(j), Y1(j), X2(j), Y2(j),
                                                area[j], off);
    return (double)ovr > thr;
}

/* The references' double loop (any threshold), over the boxes of ord[0 .. m). */
static void DK_TFN(dk__nms_quadratic)(const DK_T *x, const DK_T *area, int64_t n, const int64_t *ord, int64_t m,
                                      DK_T off, double thr, unsigned char *kept)
{
    for (int64_t a = 0; a < m; a++) {
        const int64_t j = ord[a];
        bool sup = false;
        for (int64_t b = 0; b < a && !sup; b++)
            if (kept[ord[b]]) sup = DK_TFN(dk__nms_suppresses)(x, area, n, ord[b], j, off, thr);
        kept[j] = !sup;
    }
}

/* The kind of box i (Note [What can suppress what]; Note [Reach] says why a grid box must be
 * upright, large enough and within 2^40 of the origin). */
static int DK_TFN(dk__nms_kind)(const DK_T *x, const DK_T *area, int64_t n, int64_t i, DK_T off)
{
    const DK_T c[4] = {X1(i), Y1(i), X2(i), Y2(i)};
    for (int d = 0; d < 4; d++)
        if (!isfinite((double)c[d])) return DK__NMS_ISOLATED;
    if (!isfinite((double)area[i])) return DK__NMS_ISOLATED;
    /* an empty extent: w (or h) is <= 0 against any box (monotone arithmetic) */
    if (!(c[2] - c[0] + off > (DK_T)0) || !(c[3] - c[1] + off > (DK_T)0)) return DK__NMS_ISOLATED;
    const double big = 1099511627776.0; /* 2^40 */
    for (int d = 0; d < 4; d++)
        if (fabs((double)c[d]) >= big) return DK__NMS_LOOSE;
    if (c[2] < c[0] || c[3] < c[1] || !((double)area[i] >= 0x1p-60)) return DK__NMS_LOOSE;
    return DK__NMS_GRID;
}

/* The k-th smallest of v[0 .. m) (v is reordered). */
static double DK_TFN(dk__nms_select)(double *v, int64_t m, int64_t k)
{
    int64_t lo = 0, hi = m - 1;
    while (lo < hi) {
        const double p = v[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < p) i++;
            while (v[j] > p) j--;
            if (i <= j) {
                const double t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else break;
    }
    return v[k];
}

/* A kept box in the cell of its centre: what the pair test reads, in one entry, so that a cell
 * is read entry after entry instead of from five arrays at random. */
typedef struct {
    double sx, sy; /* twice the centre of the extent: x1 + x2 + offset, y1 + y2 + offset */
    double rx, ry; /* reach along x and y (Note [Reach]) */
    DK_T c[5];     /* x1, y1, x2, y2, area: copies, so the references' arithmetic is unchanged */
} DK_TFN(dk__nms_entry);

/* A candidate's centre and reach, by its position in the category. */
typedef struct {
    double sx, sy, rx, ry;
} DK_TFN(dk__nms_geo);

typedef struct {
    unsigned char *kind;        /* per position */
    DK_TFN(dk__nms_geo) *geo;   /* per position */
    int32_t *cell;              /* per position: the cell of a grid box's centre */
    int32_t *slot;              /* per cell (and one more): where its entries begin, then end */
    DK_TFN(dk__nms_entry) *ent; /* each cell's room: as many entries as grid boxes centred there */
    int64_t *grid_kept;         /* kept grid boxes of the category (for loose candidates) */
    int64_t *loose_kept;        /* kept loose boxes */
    double *tmp;                /* extents, for the cell size */
} DK_TFN(dk__nms_scratch);

/*
 * Note [Reach]
 * A kept box i suppresses candidate j when their overlap, computed as the references compute
 * it, exceeds t. For t >= 0 that needs w > 0, which for boxes i and j with extents Ex (x2 - x1 +
 * offset) and twice-centres Sx (x1 + x2 + offset) means, exactly, |Sx_i - Sx_j| < Ex_i + Ex_j.
 * A larger t bounds much more: the overlap exceeds t only if w > t' max(Ex_i, Ex_j), with
 * t' = t (1 - 2^-16) - 2^-16 (the references' rounding, float's included, costs less than that:
 * the intersection is at most either area, exactly, in their arithmetic, and the union at least
 * the larger area but for a few roundings; grid boxes are upright, at least 2^-60 in area and
 * within 2^40 of the origin, so that none of it underflows and an offset of 1 adds little
 * error). With w <= min(Ex_i, Ex_j) and w <= (Ex_i + Ex_j - |Sx_i - Sx_j|) / 2 that gives
 *     |Sx_i - Sx_j| < 2 rho(t') min(Ex_i, Ex_j),   rho = 1 - t' (t' >= 1/2), 1/(2t') - 1/2 (below)
 * and likewise along y: at the usual t = 0.5, each box's centre lies inside the other's extent,
 * and the two extents differ less than twofold. So each box gets a reach per axis,
 *     r = min(2 rho E, E + Emax) (1 + 2^-20) + 2^-48 (|S| + E)
 * (Emax: the largest extent of the category's grid boxes; the last terms cover the rounding of
 * S, E and r in double), and a pair can suppress only if |Sx_i - Sx_j| < min(rx_i, rx_j) and
 * likewise along y, computed in double: a test of a few instructions that rejects nearly every
 * pair before the references' division, and that no pair they would suppress fails. A t' above
 * 1 suppresses nothing (r < 0); below 2^-20, rho is infinite and only the overlap bound remains.
 *
 * Note [Cell size]
 * Each kept grid box sits in one cell, the one of its centre; a candidate visits the cells its
 * reach covers. Smaller cells mean fewer kept boxes met that cannot suppress, more cells visited
 * for each: measured on the benchmark's boxes (bench/bench_nms_cg.c), 0.55 of the median extent
 * is best; where boxes are sparse (one category of many, batched_nms), at least the side of the
 * area per box, so that a cell is not nearly always empty. For thresholds below 1/2 the reach
 * grows with Emax, so there boxes wider than 4 cells are "loose" (tested against every kept box
 * of their category, and every candidate against them) and leave Emax to the others.
 */
static void DK_TFN(dk__nms_category)(const DK_T *x, const DK_T *area, int64_t n, const int64_t *ord, int64_t m,
                                     DK_T off, double thr, unsigned char *kept, DK_TFN(dk__nms_scratch) *sc)
{
    const double offd = (double)off;
    /* Note [Reach]: rho of the threshold (negative: nothing suppresses; infinite: overlap only) */
    const double tq = thr * (1.0 - 0x1p-16) - 0x1p-16;
    const double rho = tq >= 0.5 ? 1.0 - tq : tq > 0x1p-20 ? 0.5 / tq - 0.5 : INFINITY;
    /* kinds, centres and extents; cell size from the extents (Note [Cell size]), origin: the
     * lowest centre */
    int64_t ng = 0;
    double ox = INFINITY, oy = INFINITY, ex = -INFINITY, ey = -INFINITY;
    for (int64_t a = 0; a < m; a++) {
        const int64_t i = ord[a];
        const int kind = DK_TFN(dk__nms_kind)(x, area, n, i, off);
        sc->kind[a] = (unsigned char)kind;
        if (kind != DK__NMS_GRID) continue;
        DK_TFN(dk__nms_geo) *g = &sc->geo[a];
        g->sx = (double)X1(i) + (double)X2(i) + offd;
        g->sy = (double)Y1(i) + (double)Y2(i) + offd;
        g->rx = (double)X2(i) - (double)X1(i) + offd; /* the extents, for now */
        g->ry = (double)Y2(i) - (double)Y1(i) + offd;
        sc->tmp[ng++] = g->rx > g->ry ? g->rx : g->ry;
        ox = g->sx < ox ? g->sx : ox;
        oy = g->sy < oy ? g->sy : oy;
        ex = g->sx > ex ? g->sx : ex;
        ey = g->sy > ey ? g->sy : ey;
    }
    double s = 1.0;
    if (ng) {
        const double median = DK_TFN(dk__nms_select)(sc->tmp, ng, ng / 2);
        s = 0.55 * median;
        const double sparse = sqrt((ex - ox) * (ey - oy) / (double)ng) * 0.5;
        s = s > sparse ? s : sparse;
    }
    if (!(s > 0)) s = 1.0;
    /* wide boxes are loose where the reach grows with Emax (Note [Cell size]) */
    double emx = 0, emy = 0;
    for (int64_t a = 0; a < m; a++) {
        if (sc->kind[a] != DK__NMS_GRID) continue;
        const DK_TFN(dk__nms_geo) *g = &sc->geo[a];
        if (rho > 0.5 && (g->rx > 4 * s || g->ry > 4 * s)) {
            sc->kind[a] = DK__NMS_LOOSE;
            continue;
        }
        emx = g->rx > emx ? g->rx : emx;
        emy = g->ry > emy ? g->ry : emy;
    }
    /* cells of side s in centre coordinates, 2s in the doubled ones; at most about 4 per box */
    double S = 2 * s, gx = 1, gy = 1;
    if (ng) {
        gx = floor((ex - ox) / S) + 1, gy = floor((ey - oy) / S) + 1;
        while (gx * gy > 4.0 * (double)ng + 16.0) {
            S *= 1.5;
            gx = floor((ex - ox) / S) + 1;
            gy = floor((ey - oy) / S) + 1;
        }
    }
    const int32_t GX = (int32_t)gx, GY = (int32_t)gy;
    /* reaches, cells, and each cell's room */
    for (int64_t c = 0; c <= (int64_t)GX * GY; c++) sc->slot[c] = 0;
    for (int64_t a = 0; a < m; a++) {
        if (sc->kind[a] != DK__NMS_GRID) continue;
        DK_TFN(dk__nms_geo) *g = &sc->geo[a];
        const double rx = 2 * rho * g->rx < g->rx + emx ? 2 * rho * g->rx : g->rx + emx;
        const double ry = 2 * rho * g->ry < g->ry + emy ? 2 * rho * g->ry : g->ry + emy;
        g->rx = rx * (1 + 0x1p-20) + 0x1p-48 * (fabs(g->sx) + g->rx);
        g->ry = ry * (1 + 0x1p-20) + 0x1p-48 * (fabs(g->sy) + g->ry);
        const int32_t cx = (int32_t)((g->sx - ox) / S), cy = (int32_t)((g->sy - oy) / S);
        const int32_t c = (cy < GY ? cy : GY - 1) * GX + (cx < GX ? cx : GX - 1);
        sc->cell[a] = c;
        sc->slot[c + 1]++;
    }
    for (int64_t c = 0; c < (int64_t)GX * GY; c++) sc->slot[c + 1] += sc->slot[c];
    /* slot[c] now where cell c's entries begin; as boxes are kept it moves to where they end,
     * and cell c's entries are those from slot[c - 1]'s start ... kept in `fill` order */
    int32_t *beg = sc->slot, *end = sc->slot + (int64_t)GX * GY + 1;
    for (int64_t c = 0; c < (int64_t)GX * GY; c++) end[c] = beg[c];
    int64_t ngk = 0, nlk = 0;
    for (int64_t a = 0; a < m; a++) {
        const int64_t j = ord[a];
        const int kind = sc->kind[a];
        if (kind == DK__NMS_ISOLATED) {
            kept[j] = 1;
            continue;
        }
        bool sup = false;
        for (int64_t b = 0; b < nlk && !sup; b++) sup = DK_TFN(dk__nms_suppresses)(x, area, n, sc->loose_kept[b], j, off, thr);
        if (!sup && kind == DK__NMS_LOOSE) {
            for (int64_t b = 0; b < ngk && !sup; b++) sup = DK_TFN(dk__nms_suppresses)(x, area, n, sc->grid_kept[b], j, off, thr);
        } else if (!sup && sc->geo[a].rx > 0 && sc->geo[a].ry > 0) {
            const DK_TFN(dk__nms_geo) g = sc->geo[a];
            /* the cells the reach covers, clamped to the grid (every centre is inside it) */
            double lo = (g.sx - g.rx - ox) / S, hi = (g.sx + g.rx - ox) / S;
            const int32_t cx0 = lo > 0 ? (int32_t)lo : 0, cx1 = hi < gx - 1 ? (int32_t)hi : GX - 1;
            lo = (g.sy - g.ry - oy) / S, hi = (g.sy + g.ry - oy) / S;
            const int32_t cy0 = lo > 0 ? (int32_t)lo : 0, cy1 = hi < gy - 1 ? (int32_t)hi : GY - 1;
            const DK_T jx1 = X1(j), jy1 = Y1(j), jx2 = X2(j), jy2 = Y2(j), ja = area[j];
            for (int32_t cy = cy0; cy <= cy1 && !sup; cy++)
                for (int32_t c = cy * GX + cx0; c <= cy * GX + cx1 && !sup; c++)
                    for (int32_t e = beg[c]; e < end[c]; e++) {
                        const DK_TFN(dk__nms_entry) *k = &sc->ent[e];
                        if (!(fabs(k->sx - g.sx) < (k->rx < g.rx ? k->rx : g.rx)) ||
                            !(fabs(k->sy - g.sy) < (k->ry < g.ry ? k->ry : g.ry)))
                            continue;
                        const DK_T ovr = DK_TFN(dk_box_nms_overlap)(k->c[0], k->c[1], k->c[2], k->c[3], k->c[4], jx1,
                                                                     jy1, jx2, jy2, ja, off);
                        if ((double)ovr > thr) {
                            sup = true;
                            break;
                        }
                    }
        }
        kept[j] = !sup;
        if (sup) continue;
        if (kind == DK__NMS_LOOSE) {
            sc->loose_kept[nlk++] = j;
            continue;
        }
        sc->grid_kept[ngk++] = j;
        DK_TFN(dk__nms_entry) *en = &sc->ent[end[sc->cell[a]]++];
        en->sx = sc->geo[a].sx, en->sy = sc->geo[a].sy, en->rx = sc->geo[a].rx, en->ry = sc->geo[a].ry;
        en->c[0] = X1(j), en->c[1] = Y1(j), en->c[2] = X2(j), en->c[3] = Y2(j), en->c[4] = area[j];
    }
}

/* All categories; writes the kept indices in score order into cx->keep. */
static dk_status DK_TFN(dk__nms_run)(dk__nms_ctx *cx, const DK_T *x, const DK_T *area)
{
    const int64_t n = cx->n;
    const DK_T off = (DK_T)cx->offset;
    unsigned char *kept = (unsigned char *)dk_arena_take_n(cx->ar, (size_t)n, 1);
    /* Categories: each box's segment, and each segment's candidates in score order. */
    int64_t *seg_of = NULL, *seg_beg = NULL, *seg_ord = NULL, nseg = 1;
    if (!kept) goto oom;
    if (cx->cls) {
        int64_t *by_cls = (int64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof *by_cls);
        uint64_t *key = (uint64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof *key);
        seg_of = (int64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof *seg_of);
        if (!by_cls || !key || !seg_of) goto oom;
        for (int64_t i = 0; i < n; i++) {
            by_cls[i] = i;
            key[i] = (uint64_t)cx->cls[i] ^ 0x8000000000000000u; /* ascending as int64 */
        }
        dk_status st = dk_argsort_u64(by_cls, key, n, cx->ar);
        if (st) return st;
        nseg = 0;
        for (int64_t a = 0; a < n; a++) {
            if (a > 0 && cx->cls[by_cls[a]] != cx->cls[by_cls[a - 1]]) nseg++;
            seg_of[by_cls[a]] = nseg;
        }
        nseg = n ? nseg + 1 : 0;
    }
    seg_beg = (int64_t *)dk_arena_take_n(cx->ar, (size_t)nseg + 1, sizeof *seg_beg);
    seg_ord = (int64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof *seg_ord);
    if (!seg_beg || !seg_ord) goto oom;
    memset(seg_beg, 0, ((size_t)nseg + 1) * sizeof *seg_beg);
    for (int64_t i = 0; i < n; i++) seg_beg[(seg_of ? seg_of[i] : 0) + 1]++;
    int64_t largest = 0;
    for (int64_t g = 0; g < nseg; g++) {
        largest = seg_beg[g + 1] > largest ? seg_beg[g + 1] : largest;
        seg_beg[g + 1] += seg_beg[g];
    }
    {
        int64_t *fill = (int64_t *)dk_arena_take_n(cx->ar, (size_t)nseg + 1, sizeof *fill);
        if (!fill) goto oom;
        memcpy(fill, seg_beg, ((size_t)nseg + 1) * sizeof *fill);
        for (int64_t a = 0; a < n; a++) { /* stable: each segment in score order */
            const int64_t i = cx->order[a];
            seg_ord[fill[seg_of ? seg_of[i] : 0]++] = i;
        }
    }
    if (!(cx->thr >= 0)) {
        for (int64_t g = 0; g < nseg; g++)
            DK_TFN(dk__nms_quadratic)(x, area, n, seg_ord + seg_beg[g], seg_beg[g + 1] - seg_beg[g], off, cx->thr, kept);
    } else {
        DK_TFN(dk__nms_scratch) sc;
        const size_t L = (size_t)largest;
        sc.kind = (unsigned char *)dk_arena_take_n(cx->ar, L + 1, 1);
        sc.geo = (DK_TFN(dk__nms_geo) *)dk_arena_take_n(cx->ar, L + 1, sizeof *sc.geo);
        sc.cell = (int32_t *)dk_arena_take_n(cx->ar, L + 1, sizeof(int32_t));
        sc.slot = (int32_t *)dk_arena_take_n(cx->ar, 2 * (4 * L + 16) + 2, sizeof(int32_t));
        sc.ent = (DK_TFN(dk__nms_entry) *)dk_arena_take_n(cx->ar, L + 1, sizeof(DK_TFN(dk__nms_entry)));
        sc.grid_kept = (int64_t *)dk_arena_take_n(cx->ar, L + 1, sizeof(int64_t));
        sc.loose_kept = (int64_t *)dk_arena_take_n(cx->ar, L + 1, sizeof(int64_t));
        sc.tmp = (double *)dk_arena_take_n(cx->ar, L + 1, sizeof(double));
        if (!sc.kind || !sc.geo || !sc.cell || !sc.slot || !sc.ent || !sc.grid_kept || !sc.loose_kept || !sc.tmp)
            goto oom;
        for (int64_t g = 0; g < nseg; g++)
            DK_TFN(dk__nms_category)(x, area, n, seg_ord + seg_beg[g], seg_beg[g + 1] - seg_beg[g], off, cx->thr, kept,
                                     &sc);
    }
    /* the kept boxes in score order */
    int64_t k = 0;
    for (int64_t a = 0; a < n; a++)
        if (kept[cx->order[a]]) cx->keep[k++ * cx->keep_s] = cx->order[a];
    cx->kept = k;
    return DK_OK;
oom:
    return dk_error(DK_ENOMEM, "nms: out of memory for %lld boxes", (long long)n);
}

#undef X1
#undef Y1
#undef X2
#undef Y2

#endif
