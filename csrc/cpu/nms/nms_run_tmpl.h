/*
 * nms/nms_run_tmpl.h — the suppression loop: exactly the references' decisions, with far fewer
 * overlaps computed. A template (Note [Templates in C] in kernels/dk_template.h), the compute
 * pass: boxes arrive as x[4][n] (x1, y1, x2, y2) and area[n] in the compute type.
 *
 * Note [What can suppress what]
 * The references test every later box against every kept one: N^2 / 2 overlaps, 50 million for
 * 10,000 boxes. But for a threshold >= 0 a kept box i suppresses a candidate j only when their
 * overlap exceeds it, hence only when w > 0 and h > 0 (kernels/nms_math.h), i.e. when their
 * extents [x1, x2 + offset] x [y1, y2 + offset] overlap: a box meets only the kept boxes near it.
 * And a box with a non-finite coordinate or area, or an empty extent, neither suppresses nor is
 * suppressed (its overlap with anything is 0 or NaN, never above a threshold >= 0): it is simply
 * kept. A larger threshold confines it much further (Note [Reach]): at 0.5, a box suppresses
 * another only if each one's centre lies inside the other's extent. So each kept box goes into
 * one cell of a uniform grid, the cell of its centre (cells about half a typical box wide,
 * Note [Cell size]); a candidate is tested against the kept boxes of the cells its reach covers,
 * first by a few comparisons of centres and reaches, then with the references' own arithmetic
 * (dk_box_nms_overlap), in the references' order (score order, each candidate against the boxes
 * kept before it). The decisions, and so the kept set and its order, are theirs exactly; the work
 * is about N times the few boxes near each one. Boxes that are inverted (x2 < x1, possible with
 * an offset of 1), smaller than 2^-60 in area, or with coordinates beyond 2^40 (where the cell
 * arithmetic in double could round) are "loose": tested against every kept box of their
 * category, and every candidate against them. A NaN or negative threshold changes what can
 * suppress what (0 > -0.5), and takes the references' double loop.
 *
 * Categories (batched_nms): boxes of different categories never interact, so each category is
 * suppressed on its own, in the one grid of the call; the kept set is then reported in the global
 * score order, as torchvision reports batched_nms.
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

/* The largest finite value of the compute type. */
static inline DK_T DK_TFN(dk__nms_big)(void) { return sizeof(DK_T) == sizeof(float) ? (DK_T)FLT_MAX : (DK_T)DBL_MAX; }

/* The kind of box i (Note [What can suppress what]; Note [Reach] says why a grid box must be
 * upright, large enough and within 2^40 of the origin). */
static int DK_TFN(dk__nms_kind)(const DK_T *x, const DK_T *area, int64_t n, int64_t i, DK_T off)
{
    const DK_T c[4] = {X1(i), Y1(i), X2(i), Y2(i)};
    const DK_T big = (DK_T)1099511627776.0; /* 2^40, exact in any compute type; NaN is not below it */
    const bool near = (c[0] < big) & (c[0] > -big) & (c[1] < big) & (c[1] > -big) & (c[2] < big) & (c[3] < big);
    /* an empty extent: w (or h) is <= 0 against any box (monotone arithmetic) */
    const bool extent = (c[2] - c[0] + off > (DK_T)0) & (c[3] - c[1] + off > (DK_T)0);
    /* upright (x2 >= x1 > -2^40, so x2 > -2^40 too), finite area of at least 2^-60 */
    if (near & extent & (c[2] >= c[0]) & (c[3] >= c[1]) & (area[i] >= (DK_T)0x1p-60) &
        (area[i] <= DK_TFN(dk__nms_big)()))
        return DK__NMS_GRID;
    for (int d = 0; d < 4; d++)
        if (!isfinite((double)c[d])) return DK__NMS_ISOLATED;
    if (!isfinite((double)area[i]) || !extent) return DK__NMS_ISOLATED;
    return DK__NMS_LOOSE;
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

/* A box's centre and reach (Note [Reach]). */
typedef struct {
    double sx, sy; /* twice the centre of the extent: x1 + x2 + offset, y1 + y2 + offset */
    double rx, ry; /* reach along x and y */
} DK_TFN(dk__nms_geo);

/* A kept box in the cell of its centre: what the pair test reads, in one entry, so that a cell
 * is read entry after entry instead of from five arrays at random. */
typedef struct {
    DK_TFN(dk__nms_geo) g;
    DK_T c[5]; /* x1, y1, x2, y2, area: copies, so the references' arithmetic is unchanged */
} DK_TFN(dk__nms_entry);

/* One call's grid (Note [Cell size]), shared by its categories, and its scratch. */
typedef struct {
    unsigned char *kind;        /* per box */
    DK_TFN(dk__nms_geo) *geo;   /* per box (grid boxes) */
    int32_t *cell;              /* per box: the cell of a grid box's centre */
    int32_t *count;             /* per cell: grid boxes of the category centred there, else 0 */
    int32_t *span;              /* per cell: its kept entries, ent[span[2c] .. span[2c + 1]) */
    DK_TFN(dk__nms_entry) *ent; /* each cell's room: as many entries as its category's grid boxes */
    int64_t *grid_kept;         /* kept grid boxes of the category (for loose candidates) */
    int64_t *loose_kept;        /* kept loose boxes */
    double ox, oy, inv;         /* the lowest centre (doubled), 1 / the side of a cell (doubled) */
    int32_t gx, gy;             /* cells along x and y */
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
 * (Emax: the largest extent of the grid boxes; the last terms cover the rounding of S, E and r in
 * double), and a pair can suppress only if |Sx_i - Sx_j| < min(rx_i, rx_j) and likewise along y,
 * computed in double: a test of a few instructions that rejects nearly every pair before the
 * references' division, and that no pair they would suppress fails. A t' above 1 suppresses
 * nothing (r < 0); below 2^-20, rho is infinite and only the overlap bound remains.
 *
 * Note [Cell size]
 * Each kept grid box sits in one cell, the one of its centre; a candidate visits the cells its
 * reach covers. Smaller cells mean fewer kept boxes met that cannot suppress, more cells visited
 * for each: measured on the benchmark's boxes (bench/bench_nms_cg.c), 0.55 of the median extent
 * (of up to 1024 boxes spread over the call) is about best, and the count is flat around it;
 * where boxes are sparse (the categories of batched_nms), at least 0.7 of the side of the area
 * per box of the largest category, so that cells are not nearly all empty. One grid serves
 * every category: a category fills and then empties only the cells of its own boxes, so its
 * cost is its boxes', whatever the grid's size. Where the reach grows with Emax (thresholds
 * below about 0.2), boxes wider than 4 cells are "loose" (tested against every kept box of their
 * category, and every candidate against them) and leave Emax to the others.
 */
static void DK_TFN(dk__nms_grid)(const DK_T *x, const DK_T *area, int64_t n, DK_T off, double thr, int64_t largest,
                                 DK_TFN(dk__nms_scratch) *sc)
{
    const double offd = (double)off;
    const double tq = thr * (1.0 - 0x1p-16) - 0x1p-16;
    const double rho = tq >= 0.5 ? 1.0 - tq : tq > 0x1p-20 ? 0.5 / tq - 0.5 : INFINITY;
    /* kinds, centres, extents (in rx, ry for now); the lowest and highest centres */
    int64_t ng = 0;
    double ox = INFINITY, oy = INFINITY, ex = -INFINITY, ey = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        const int kind = DK_TFN(dk__nms_kind)(x, area, n, i, off);
        sc->kind[i] = (unsigned char)kind;
        if (kind != DK__NMS_GRID) continue;
        DK_TFN(dk__nms_geo) *g = &sc->geo[i];
        g->sx = (double)X1(i) + (double)X2(i) + offd;
        g->sy = (double)Y1(i) + (double)Y2(i) + offd;
        g->rx = (double)X2(i) - (double)X1(i) + offd;
        g->ry = (double)Y2(i) - (double)Y1(i) + offd;
        ox = g->sx < ox ? g->sx : ox;
        oy = g->sy < oy ? g->sy : oy;
        ex = g->sx > ex ? g->sx : ex;
        ey = g->sy > ey ? g->sy : ey;
        ng++;
    }
    double s = 1.0; /* the side of a cell in centre coordinates */
    if (ng) {
        double sample[1024];
        int64_t k = 0;
        const int64_t step = n / 1024 + 1;
        for (int64_t i = 0; i < n && k < 1024; i += step)
            if (sc->kind[i] == DK__NMS_GRID)
                sample[k++] = sc->geo[i].rx > sc->geo[i].ry ? sc->geo[i].rx : sc->geo[i].ry;
        const double median = k ? DK_TFN(dk__nms_select)(sample, k, k / 2) : 1.0;
        const double sparse = 0.35 * sqrt((ex - ox) * (ey - oy) / (double)(largest < ng ? largest : ng));
        s = 0.55 * median > sparse ? 0.55 * median : sparse;
    }
    if (!(s > 0)) s = 1.0;
    double emx = 0, emy = 0;
    for (int64_t i = 0; i < n && rho > 1; i++) { /* Emax: the overlap bound, where it can be the lower */
        if (sc->kind[i] != DK__NMS_GRID) continue;
        const DK_TFN(dk__nms_geo) *g = &sc->geo[i];
        if (rho > 2 && (g->rx > 4 * s || g->ry > 4 * s)) {
            sc->kind[i] = DK__NMS_LOOSE; /* wide (Note [Cell size]) */
            continue;
        }
        emx = g->rx > emx ? g->rx : emx;
        emy = g->ry > emy ? g->ry : emy;
    }
    /* cells of side 2s in the doubled coordinates, at most about 4 per grid box */
    double S = 2 * s, gx = 1, gy = 1;
    if (ng) {
        gx = floor((ex - ox) / S) + 1, gy = floor((ey - oy) / S) + 1;
        while (gx * gy > 4.0 * (double)ng + 16.0) {
            S *= 1.5;
            gx = floor((ex - ox) / S) + 1;
            gy = floor((ey - oy) / S) + 1;
        }
    }
    sc->ox = ox, sc->oy = oy, sc->inv = 1.0 / S, sc->gx = (int32_t)gx, sc->gy = (int32_t)gy;
    /* reaches and cells; x * inv is monotone in x, so a centre inside a reach is in its cells */
    const double inv = sc->inv;
    for (int64_t i = 0; i < n; i++) {
        if (sc->kind[i] != DK__NMS_GRID) continue;
        DK_TFN(dk__nms_geo) *g = &sc->geo[i];
        const double rx = rho <= 1 || 2 * rho * g->rx < g->rx + emx ? 2 * rho * g->rx : g->rx + emx;
        const double ry = rho <= 1 || 2 * rho * g->ry < g->ry + emy ? 2 * rho * g->ry : g->ry + emy;
        g->rx = rx * (1 + 0x1p-20) + 0x1p-48 * (fabs(g->sx) + g->rx);
        g->ry = ry * (1 + 0x1p-20) + 0x1p-48 * (fabs(g->sy) + g->ry);
        const int32_t cx = (int32_t)((g->sx - ox) * inv), cy = (int32_t)((g->sy - oy) * inv);
        sc->cell[i] = (cy < sc->gy ? cy : sc->gy - 1) * sc->gx + (cx < sc->gx ? cx : sc->gx - 1);
    }
    memset(sc->count, 0, (size_t)sc->gx * (size_t)sc->gy * sizeof *sc->count);
    memset(sc->span, 0, 2 * (size_t)sc->gx * (size_t)sc->gy * sizeof *sc->span);
}

/* Does a kept box of ent[e0 .. e1) suppress the candidate (its reach g, its box jb: x1, y1, x2,
 * y2, area)? The reach test (Note [Reach]) first, then the references' own. */
static inline bool DK_TFN(dk__nms_scan)(const DK_TFN(dk__nms_entry) *ent, int32_t e0, int32_t e1,
                                        const DK_TFN(dk__nms_geo) *g, const DK_T *jb, DK_T off, double thr)
{
    for (int32_t e = e0; e < e1; e++) {
        const DK_TFN(dk__nms_entry) *k = &ent[e];
        if (!(fabs(k->g.sx - g->sx) < (k->g.rx < g->rx ? k->g.rx : g->rx)) ||
            !(fabs(k->g.sy - g->sy) < (k->g.ry < g->ry ? k->g.ry : g->ry)))
            continue;
        const DK_T ovr = DK_TFN(dk_box_nms_overlap)(k->c[0], k->c[1], k->c[2], k->c[3], k->c[4], jb[0], jb[1], jb[2],
                                                    jb[3], jb[4], off);
        if ((double)ovr > thr) return true;
    }
    return false;
}

/* One category: the candidates ord[0 .. m) in score order; kept[] is written for each. */
static void DK_TFN(dk__nms_category)(const DK_T *x, const DK_T *area, int64_t n, const int64_t *ord, int64_t m,
                                     DK_T off, double thr, unsigned char *kept, DK_TFN(dk__nms_scratch) *sc)
{
    /* each cell of the category's grid boxes gets room for them all, in one array */
    for (int64_t a = 0; a < m; a++)
        if (sc->kind[ord[a]] == DK__NMS_GRID) sc->count[sc->cell[ord[a]]]++;
    int32_t room = 0;
    for (int64_t a = 0; a < m; a++) {
        if (sc->kind[ord[a]] != DK__NMS_GRID) continue;
        const int32_t c = sc->cell[ord[a]];
        if (!sc->count[c]) continue;
        sc->span[2 * c] = sc->span[2 * c + 1] = room;
        room += sc->count[c];
        sc->count[c] = 0;
    }
    const double ox = sc->ox, oy = sc->oy, inv = sc->inv, gxm = sc->gx - 1, gym = sc->gy - 1;
    int64_t ngk = 0, nlk = 0, nkept = 0;
    for (int64_t a = 0; a < m; a++) {
        const int64_t j = ord[a];
        const int kind = sc->kind[j];
        if (kind == DK__NMS_ISOLATED) {
            kept[j] = 1;
            continue;
        }
        bool sup = false;
        for (int64_t b = 0; b < nlk && !sup; b++)
            sup = DK_TFN(dk__nms_suppresses)(x, area, n, sc->loose_kept[b], j, off, thr);
        if (!sup && kind == DK__NMS_LOOSE) {
            for (int64_t b = 0; b < ngk && !sup; b++)
                sup = DK_TFN(dk__nms_suppresses)(x, area, n, sc->grid_kept[b], j, off, thr);
        } else if (!sup && sc->geo[j].rx > 0 && sc->geo[j].ry > 0) {
            const DK_TFN(dk__nms_geo) g = sc->geo[j];
            /* the cells the reach covers, clamped to the grid (every centre is inside it) */
            double lo = (g.sx - g.rx - ox) * inv, hi = (g.sx + g.rx - ox) * inv;
            const int32_t cx0 = lo > 0 ? (int32_t)lo : 0, cx1 = hi < gxm ? (int32_t)hi : (int32_t)gxm;
            lo = (g.sy - g.ry - oy) * inv, hi = (g.sy + g.ry - oy) * inv;
            const int32_t cy0 = lo > 0 ? (int32_t)lo : 0, cy1 = hi < gym ? (int32_t)hi : (int32_t)gym;
            const DK_T jb[5] = {X1(j), Y1(j), X2(j), Y2(j), area[j]};
            /* Where most candidates so far were suppressed, the candidate's own cell first: a
             * suppressor is likeliest there (its centre inside the candidate's extent, Note
             * [Reach]), and finding it ends the search. Where most were kept, every cell is
             * searched anyway, once each. (The decision does not depend on the order.) */
            const int32_t own = sc->cell[j];
            const bool first = a - nkept > nkept;
            if (first) {
                sup = DK_TFN(dk__nms_scan)(sc->ent, sc->span[2 * own], sc->span[2 * own + 1], &g, jb, off, thr);
                for (int32_t cy = cy0; cy <= cy1 && !sup; cy++)
                    for (int32_t c = cy * sc->gx + cx0; c <= cy * sc->gx + cx1 && !sup; c++)
                        sup = c != own &&
                              DK_TFN(dk__nms_scan)(sc->ent, sc->span[2 * c], sc->span[2 * c + 1], &g, jb, off, thr);
            } else {
                for (int32_t cy = cy0; cy <= cy1; cy++) {
                    const int32_t *p = sc->span + 2 * ((int64_t)cy * sc->gx + cx0), *pe = p + 2 * (cx1 - cx0 + 1);
                    for (; p < pe; p += 2)
                        if (DK_TFN(dk__nms_scan)(sc->ent, p[0], p[1], &g, jb, off, thr)) {
                            sup = true;
                            goto searched;
                        }
                }
            searched:;
            }
        }
        kept[j] = !sup;
        if (sup) continue;
        nkept++;
        if (kind == DK__NMS_LOOSE) {
            sc->loose_kept[nlk++] = j;
            continue;
        }
        sc->grid_kept[ngk++] = j;
        DK_TFN(dk__nms_entry) *en = &sc->ent[sc->span[2 * sc->cell[j] + 1]++];
        en->g = sc->geo[j];
        en->c[0] = X1(j), en->c[1] = Y1(j), en->c[2] = X2(j), en->c[3] = Y2(j), en->c[4] = area[j];
    }
    /* empty the category's cells again for the next */
    for (int64_t a = 0; a < m; a++)
        if (sc->kind[ord[a]] == DK__NMS_GRID) sc->span[2 * sc->cell[ord[a]] + 1] = sc->span[2 * sc->cell[ord[a]]];
}

/* All categories; writes the kept indices in score order into cx->keep. */
static dk_status DK_TFN(dk__nms_run)(dk__nms_ctx *cx, const DK_T *x, const DK_T *area)
{
    const int64_t n = cx->n;
    const DK_T off = (DK_T)cx->offset;
    unsigned char *kept = (unsigned char *)dk_arena_take_n(cx->ar, (size_t)n, 1);
    /* Categories: each box's segment, and each segment's candidates in score order (one
     * category: the score order itself). */
    int64_t *seg_of = NULL, *seg_beg = NULL, *seg_ord = cx->order, nseg = 1, largest = n;
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
        seg_beg = (int64_t *)dk_arena_take_n(cx->ar, (size_t)nseg + 1, sizeof *seg_beg);
        seg_ord = (int64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof *seg_ord);
        int64_t *fill = (int64_t *)dk_arena_take_n(cx->ar, (size_t)nseg + 1, sizeof *fill);
        if (!seg_beg || !seg_ord || !fill) goto oom;
        memset(seg_beg, 0, ((size_t)nseg + 1) * sizeof *seg_beg);
        for (int64_t i = 0; i < n; i++) seg_beg[seg_of[i] + 1]++;
        largest = 0;
        for (int64_t g = 0; g < nseg; g++) {
            largest = seg_beg[g + 1] > largest ? seg_beg[g + 1] : largest;
            seg_beg[g + 1] += seg_beg[g];
        }
        memcpy(fill, seg_beg, ((size_t)nseg + 1) * sizeof *fill);
        for (int64_t a = 0; a < n; a++) /* stable: each segment in score order */
            seg_ord[fill[seg_of[cx->order[a]]]++] = cx->order[a];
    } else {
        seg_beg = (int64_t *)dk_arena_take_n(cx->ar, 2, sizeof *seg_beg);
        if (!seg_beg) goto oom;
        seg_beg[0] = 0, seg_beg[1] = n;
    }
    if (!(cx->thr >= 0)) {
        for (int64_t g = 0; g < nseg; g++)
            DK_TFN(dk__nms_quadratic)(x, area, n, seg_ord + seg_beg[g], seg_beg[g + 1] - seg_beg[g], off, cx->thr,
                                      kept);
    } else {
        DK_TFN(dk__nms_scratch) sc;
        const size_t N = (size_t)n, L = (size_t)largest, cells = 4 * N + 16;
        sc.kind = (unsigned char *)dk_arena_take_n(cx->ar, N, 1);
        sc.geo = (DK_TFN(dk__nms_geo) *)dk_arena_take_n(cx->ar, N, sizeof *sc.geo);
        sc.cell = (int32_t *)dk_arena_take_n(cx->ar, N, sizeof(int32_t));
        sc.count = (int32_t *)dk_arena_take_n(cx->ar, cells, sizeof(int32_t));
        sc.span = (int32_t *)dk_arena_take_n(cx->ar, 2 * cells, sizeof(int32_t));
        sc.ent = (DK_TFN(dk__nms_entry) *)dk_arena_take_n(cx->ar, L, sizeof(DK_TFN(dk__nms_entry)));
        sc.grid_kept = (int64_t *)dk_arena_take_n(cx->ar, L, sizeof(int64_t));
        sc.loose_kept = (int64_t *)dk_arena_take_n(cx->ar, L, sizeof(int64_t));
        if (!sc.kind || !sc.geo || !sc.cell || !sc.count || !sc.span || !sc.ent || !sc.grid_kept || !sc.loose_kept)
            goto oom;
        DK_TFN(dk__nms_grid)(x, area, n, off, cx->thr, largest, &sc);
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
