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

/*
 * One category: the candidates ord[0 .. m) in score order; kept[] is written for each. scratch
 * comes from the arena, sized for the largest category (dk__nms_run).
 */
/* A kept box in one cell of the grid: its coordinates and area inline, so that testing a
 * candidate against a cell reads one entry after another instead of five arrays at random. */
typedef struct {
    DK_T c[5];        /* x1, y1, x2, y2, area: copies, so the references' arithmetic is unchanged */
    int32_t next;     /* the cell's next entry, -1 at the end */
    int32_t cx0, cy0; /* the box's lowest cell (Note [One test per pair]) */
} DK_TFN(dk__nms_entry);

typedef struct {
    unsigned char *kind; /* per box */
    int64_t *cell_lo, *cell_hi; /* per box: cx0, cy0 / cx1, cy1 packed as 2 x int32 */
    int32_t *head;       /* per cell: first entry, -1 if none */
    DK_TFN(dk__nms_entry) *ent;
    int64_t *grid_kept;  /* kept grid boxes of the category (for loose candidates) */
    int64_t *loose_kept; /* kept loose boxes */
    double *tmp;         /* extents, for the cell size */
} DK_TFN(dk__nms_scratch);

static void DK_TFN(dk__nms_category)(const DK_T *x, const DK_T *area, int64_t n, const int64_t *ord, int64_t m,
                                     DK_T off, double thr, unsigned char *kept, DK_TFN(dk__nms_scratch) *sc)
{
    /* cell size from the extents of the grid boxes (Note [Cell size]), origin: their lowest corner */
    int64_t ng = 0;
    double ox = INFINITY, oy = INFINITY, ex = -INFINITY, ey = -INFINITY;
    for (int64_t a = 0; a < m; a++) {
        const int64_t i = ord[a];
        sc->kind[i] = (unsigned char)DK_TFN(dk__nms_kind)(x, area, n, i, off);
        if (sc->kind[i] != DK__NMS_GRID) continue;
        const double w = (double)X2(i) + (double)off - (double)X1(i), h = (double)Y2(i) + (double)off - (double)Y1(i);
        sc->tmp[ng++] = w > h ? w : h;
        ox = fmin(ox, (double)X1(i));
        oy = fmin(oy, (double)Y1(i));
        ex = fmax(ex, (double)X2(i) + (double)off);
        ey = fmax(ey, (double)Y2(i) + (double)off);
    }
    /* Note [Cell size]: smaller cells mean fewer kept boxes met that cannot overlap; a box that
     * spans more than 4 cells along an axis becomes loose (tested against everything), so the
     * cells stay wide enough for nearly all boxes: 0.55 of the median extent (measured: 25% fewer
     * instructions than the median itself on the benchmark's boxes), but at least 1/3.5 of the
     * 95th percentile; and where boxes are sparse (one category of many, batched_nms), at least
     * the side of the area per box, so that a box sits in few cells (9% fewer instructions for
     * 20,000 boxes in 80 categories). */
    double s = 1.0;
    if (ng) {
        const double median = DK_TFN(dk__nms_select)(sc->tmp, ng, ng / 2);
        const double p95 = DK_TFN(dk__nms_select)(sc->tmp, ng, ng - 1 - ng / 20);
        s = fmax(fmax(0.55 * median, p95 / 3.5), sqrt((ex - ox) * (ey - oy) / (double)ng));
    }
    if (!(s > 0)) s = 1.0;
    /* at most about 4 cells per grid box in all (and at least the span / 2^20 per cell) */
    double gx = ng ? floor((ex - ox) / s) + 1 : 1, gy = ng ? floor((ey - oy) / s) + 1 : 1;
    const double most = 4.0 * (double)ng + 16.0;
    while (gx * gy > most) {
        s *= 1.5;
        gx = floor((ex - ox) / s) + 1;
        gy = floor((ey - oy) / s) + 1;
    }
    const int64_t GX = (int64_t)gx, GY = (int64_t)gy;
    /* each grid box's cell range; a box wider than 4 cells along an axis is loose */
    int64_t entries = 0;
    for (int64_t a = 0; a < m; a++) {
        const int64_t i = ord[a];
        if (sc->kind[i] != DK__NMS_GRID) continue;
        const int64_t cx0 = (int64_t)floor(((double)X1(i) - ox) / s), cy0 = (int64_t)floor(((double)Y1(i) - oy) / s);
        const int64_t cx1 = (int64_t)floor(((double)X2(i) + (double)off - ox) / s);
        const int64_t cy1 = (int64_t)floor(((double)Y2(i) + (double)off - oy) / s);
        if (cx1 - cx0 >= 4 || cy1 - cy0 >= 4) {
            sc->kind[i] = DK__NMS_LOOSE;
            continue;
        }
        sc->cell_lo[i] = cx0 | cy0 << 32;
        sc->cell_hi[i] = cx1 | cy1 << 32;
        entries += (cx1 - cx0 + 1) * (cy1 - cy0 + 1);
    }
    (void)entries; /* bounded by 16 per box: the caller sized the pool so */
    for (int64_t c = 0; c < GX * GY; c++) sc->head[c] = -1;
    int64_t nent = 0, ngk = 0, nlk = 0;
    for (int64_t a = 0; a < m; a++) {
        const int64_t j = ord[a];
        const int kind = sc->kind[j];
        if (kind == DK__NMS_ISOLATED) {
            kept[j] = 1;
            continue;
        }
        bool sup = false;
        for (int64_t b = 0; b < nlk && !sup; b++) sup = DK_TFN(dk__nms_suppresses)(x, area, n, sc->loose_kept[b], j, off, thr);
        if (!sup && kind == DK__NMS_LOOSE) {
            for (int64_t b = 0; b < ngk && !sup; b++) sup = DK_TFN(dk__nms_suppresses)(x, area, n, sc->grid_kept[b], j, off, thr);
        } else if (!sup) {
            /* Note [One test per pair]: a kept box sits in every cell its extent covers, so it
             * can meet the candidate in several cells; the pair is tested only in the lowest
             * cell the two share, (max of the cx0s, max of the cy0s), which both cover. */
            const int32_t cx0 = (int32_t)sc->cell_lo[j], cy0 = (int32_t)(sc->cell_lo[j] >> 32);
            const int32_t cx1 = (int32_t)sc->cell_hi[j], cy1 = (int32_t)(sc->cell_hi[j] >> 32);
            const DK_T jx1 = X1(j), jy1 = Y1(j), jx2 = X2(j), jy2 = Y2(j), ja = area[j];
            for (int32_t cy = cy0; cy <= cy1 && !sup; cy++)
                for (int32_t cx = cx0; cx <= cx1 && !sup; cx++)
                    for (int32_t e = sc->head[(int64_t)cy * GX + cx]; e >= 0; e = sc->ent[e].next) {
                        const DK_TFN(dk__nms_entry) *k = &sc->ent[e];
                        if ((k->cx0 > cx0 ? k->cx0 : cx0) != cx || (k->cy0 > cy0 ? k->cy0 : cy0) != cy) continue;
                        /* w <= 0 or h <= 0 makes the overlap 0 (or NaN), never above a threshold
                         * >= 0: the references' own first steps, taken alone, reject most pairs
                         * before the division */
                        if (!(DK_TFN(dk_box_std_min)(k->c[2], jx2) - DK_TFN(dk_box_std_max)(k->c[0], jx1) + off > (DK_T)0) ||
                            !(DK_TFN(dk_box_std_min)(k->c[3], jy2) - DK_TFN(dk_box_std_max)(k->c[1], jy1) + off > (DK_T)0))
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
        const int64_t cx0 = (int32_t)sc->cell_lo[j], cy0 = sc->cell_lo[j] >> 32;
        const int64_t cx1 = (int32_t)sc->cell_hi[j], cy1 = sc->cell_hi[j] >> 32;
        for (int64_t cy = cy0; cy <= cy1; cy++)
            for (int64_t cx = cx0; cx <= cx1; cx++) {
                DK_TFN(dk__nms_entry) *en = &sc->ent[nent];
                en->c[0] = X1(j), en->c[1] = Y1(j), en->c[2] = X2(j), en->c[3] = Y2(j), en->c[4] = area[j];
                en->cx0 = (int32_t)cx0, en->cy0 = (int32_t)cy0;
                en->next = sc->head[cy * GX + cx];
                sc->head[cy * GX + cx] = (int32_t)nent++;
            }
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
        sc.kind = (unsigned char *)dk_arena_take_n(cx->ar, (size_t)n, 1);
        sc.cell_lo = (int64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof(int64_t));
        sc.cell_hi = (int64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof(int64_t));
        sc.head = (int32_t *)dk_arena_take_n(cx->ar, 4 * L + 16, sizeof(int32_t));
        sc.ent = (DK_TFN(dk__nms_entry) *)dk_arena_take_n(cx->ar, 16 * L + 1, sizeof(DK_TFN(dk__nms_entry)));
        sc.grid_kept = (int64_t *)dk_arena_take_n(cx->ar, L + 1, sizeof(int64_t));
        sc.loose_kept = (int64_t *)dk_arena_take_n(cx->ar, L + 1, sizeof(int64_t));
        sc.tmp = (double *)dk_arena_take_n(cx->ar, L + 1, sizeof(double));
        if (!sc.kind || !sc.cell_lo || !sc.cell_hi || !sc.head || !sc.ent || !sc.grid_kept ||
            !sc.loose_kept || !sc.tmp)
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
