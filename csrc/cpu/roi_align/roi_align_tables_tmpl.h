/*
 * roi_align/roi_align_tables_tmpl.h — per-RoI weight tables: each bin's merged bilinear taps
 * along each axis, regrouped into column pairs, and the evaluation order of each RoI.
 * A template (Note [Templates in C] in kernels/dk_template.h), instantiated by roi_align_cpu.c
 * for its compute types; its short names (T, V4, AXIS, ...) are roi_align_names_tmpl.h's.
 *
 * Note [Separable weight tables]
 * A sample's bilinear weight is a product wy(y) * wx(x) and a bin's samples form a grid, so
 *     out[ph, pw] = 1/count * sum_iy sum_ix sum_taps wy * wx * v[r, x]
 *                 = sum_r WY_ph(r) * sum_x WX_pw(x) * v[r, x]
 * where WY_ph(r) adds up the y taps of bin row ph that land on row r, divided by grid_h (an
 * invalid y contributes no tap, which zeroes the product exactly as the per-sample rule does),
 * and likewise WX_pw. Per RoI and bin we store the list of (index, weight) with duplicate
 * indices merged: a bin's samples are monotonic, so a repeated index is always one of the last
 * two entries. A list is never longer than the number of distinct rows (columns) it touches, so a
 * huge box costs memory proportional to the input, not to its number of samples (the tables'
 * room is that bound, or the exact count where the bound would be large; dk__rc_axis_tables).
 *
 * For evaluation the x taps of each bin are regrouped into column pairs (Note [Pairs]), and
 * each RoI is evaluated in whichever order is cheaper for its tables (dk__rc_choose):
 *   sparse  for each bin row: for each pair, sum the y-tap rows (four at a time, in registers),
 *           then dot with the pair's x weights. Best for fixed sampling of large bins.
 *   dense   for each bin row: sum the y-tap rows over the RoI's whole column span (contiguous,
 *           vectorised), then dot each bin's pairs. Best when samples are dense (adaptive
 *           grids, small boxes).
 * Results differ from the per-sample references only by float rounding (sums associate
 * differently).
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE
#include "roi_align/roi_align_names_tmpl.h"

/*
 * Note [Pairs]
 * A pair is two adjacent columns (a, a + 1) with weights (wa, wb), stored as the lane weights
 * (wa, wa, wb, wb) of the interleaved load (ch0 a, ch1 a, ch0 a+1, ch1 a+1). A bin's x taps
 * become pairs in one of two ways:
 *   sparse  a tap and its right neighbour form a pair; a lone tap gets a zero-weight partner,
 *           inside [0, W) (so W >= 2). Fixed sampling of a wide bin: one pair per sample.
 *   dense   the bin's window [first, last] in steps of two columns, zero weights in the gaps;
 *           read from the row buffer t, which is padded so the last pair may overhang.
 */
typedef struct {
    T w[4];
    int32_t a;
} PAIR;

/* Every per-RoI entry is indexed by the RoI's slot (Note [RoIs in row order]): slot j is RoI
 * gr->order[j], the RoIs of each image in the order they are evaluated. */
typedef struct {
    /* Merged taps (Note [Separable weight tables]); slot k, bin p: [beg[k * P + p], beg[.. + 1]),
     * indices ascending within a bin. */
    int64_t *ybeg, *xbeg;
    int32_t *yidx, *xidx;
    T *yw, *xw;
    /* The x taps as pairs (Note [Pairs]): slot k, bin pw: [pbeg[k * PW + pw], pbeg[.. + 1]). */
    int64_t *pbeg;
    PAIR *pairs;
    int32_t *c0, *span;   /* per RoI: first column and width of the columns its x taps use */
    unsigned char *dense; /* per RoI: evaluation order */
    int32_t *rlo, *rhi;   /* per image: rows used by any of its RoIs (rlo > rhi: none) */
    int32_t *yhi;         /* per slot: the last row the RoI reads (-1: none; Note [RoIs in row order]) */
    int64_t max_ny;       /* most y taps of one bin row */
    int64_t max_pairs;    /* most pairs of one RoI */
} TABLES;

/* Per-thread scratch for evaluating RoIs (dk__ra_scratch_at). */
typedef struct {
    T *acc;       /* 2 * PH * PW: one RoI's outputs (or grad_output), interleaved [ph][pw][ch] */
    T *t;         /* 2 * (W + 4): a bin row summed over its y taps (dense) */
    int64_t *off; /* max_ny: buffer offsets of a bin row's y-tap rows */
    V4 *vb;       /* max_pairs: per-pair partial sums (sparse) */
} SCRATCH;

/* Adds weight w at index i to the list (idx, wt) of n entries, merging with the last two. */
static inline int64_t DK_TFN(dk__ra_add_tap)(int32_t *restrict idx, T *restrict wt, int64_t n, int32_t i, T w)
{
    if (n >= 1 && idx[n - 1] == i) {
        wt[n - 1] += w;
        return n;
    }
    if (n >= 2 && idx[n - 2] == i) {
        wt[n - 2] += w;
        return n;
    }
    idx[n] = i;
    wt[n] = w;
    return n + 1;
}

/* The merged taps of bin p of axis a (size pixels long) into (idx, wt), ascending; returns their
 * number, at most min(2 * grid, size). */
static inline int64_t DK_TFN(dk__ra_bin_taps)(const AXIS *a, int64_t p, int64_t size, int32_t *restrict idx,
                                              T *restrict wt)
{
    int64_t n = 0;
    /* Adding each sample's taps in the direction the samples move keeps the list monotonic. */
    const bool down = a->bin < (T)0;
    for (int64_t i = 0; i < a->grid; ++i) {
        DK_TFN(dk_roi_align_taps) t;
        if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(a, p, i), size, &t)) continue;
        if (down) {
            n = DK_TFN(dk__ra_add_tap)(idx, wt, n, (int32_t)t.hi, t.whi);
            n = DK_TFN(dk__ra_add_tap)(idx, wt, n, (int32_t)t.lo, t.wlo);
        } else {
            n = DK_TFN(dk__ra_add_tap)(idx, wt, n, (int32_t)t.lo, t.wlo);
            n = DK_TFN(dk__ra_add_tap)(idx, wt, n, (int32_t)t.hi, t.whi);
        }
    }
    if (n > 0) {
        const T inv = (T)1 / (T)a->grid;
        for (int64_t e = 0; e < n; ++e) wt[e] *= inv;
        for (int64_t e = 0; down && e < n / 2; ++e) { /* make it ascending */
            const int32_t ti = idx[e];
            const T tw = wt[e];
            idx[e] = idx[n - 1 - e];
            wt[e] = wt[n - 1 - e];
            idx[n - 1 - e] = ti;
            wt[n - 1 - e] = tw;
        }
    }
    return n;
}

/* beg[1..n] hold counts on entry; on return beg[i] is the sum of the first i counts. */
static int64_t DK_TFN(dk__ra_prefix)(int64_t *beg, int64_t n)
{
    beg[0] = 0;
    for (int64_t i = 1; i <= n; ++i) beg[i] += beg[i - 1];
    return beg[n];
}

/*
 * One axis' taps for all RoIs, in one pass into room for at most min(2 * grid, size) taps per
 * bin (two per sample; after merging, at most one per pixel), or, if that bound is large, in
 * two passes (count, then fill) into exactly the room needed.
 *
 * Note [One parallel region per call]
 * Building the tables is serial on purpose: it takes about a millisecond, while every OpenMP
 * region ends in a barrier, and with more runnable threads than cores (a data loader, another
 * process) a barrier waiting for a preempted thread costs a scheduler time slice. Parallel
 * table loops measured up to 80 ms per call that way on a shared 2-core machine; with the
 * tables serial, each call has one parallel region (the plane loop, dynamically scheduled).
 *
 * The bound is within 2x of the exact size for adaptive sampling and fixed small ratios (the
 * common cases), so the count pass, which evaluates every sample a second time, is only paid
 * where the bound could waste real memory (a huge sampling_ratio on many RoIs).
 */
static dk_status DK_TFN(dk__ra_axis_tables)(dk_arena *ar, const AXIS *axes, int64_t K, int64_t P, int64_t size,
                                            int64_t **beg_out, int32_t **idx_out, T **w_out)
{
    int64_t *beg = (int64_t *)dk_arena_take_n(ar, (size_t)(K * P + 1), sizeof *beg); /* K * P: dk__ra_shape_init */
    if (!beg) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
    size_t room = 0;  /* the bound, in all (saturating: SIZE_MAX fails to allocate) */
    int64_t most = 0; /* and for one bin */
    for (int64_t k = 0; k < K; ++k) {
        const int64_t g = axes[k].grid, b = g >= size ? size : (2 * g < size ? 2 * g : size);
        room = dk_sat_add(room, dk_sat_mul((size_t)P, (size_t)b));
        most = b > most ? b : most;
    }
    if (dk_sat_mul(room, sizeof(int32_t) + sizeof(T)) > (uint64_t)dk_tunable(&dk__ra_taps_bound)) {
        /* Count into room for one bin (bounded by size, so by the input). */
        int32_t *ti = (int32_t *)dk_arena_take_n(ar, (size_t)most, sizeof *ti);
        T *tw = (T *)dk_arena_take_n(ar, (size_t)most, sizeof *tw);
        if (!ti || !tw) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
        for (int64_t k = 0; k < K; ++k)
            for (int64_t p = 0; p < P; ++p) beg[k * P + p + 1] = DK_TFN(dk__ra_bin_taps)(&axes[k], p, size, ti, tw);
        room = (size_t)DK_TFN(dk__ra_prefix)(beg, K * P);
    }
    int32_t *idx = (int32_t *)dk_arena_take_n(ar, (size_t)room, sizeof *idx);
    T *w = (T *)dk_arena_take_n(ar, (size_t)room, sizeof *w);
    if (!idx || !w)
        return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables (%lld entries)", (long long)room);
    int64_t n = 0;
    for (int64_t k = 0; k < K; ++k)
        for (int64_t p = 0; p < P; ++p) {
            beg[k * P + p] = n;
            n += DK_TFN(dk__ra_bin_taps)(&axes[k], p, size, idx + n, w + n);
        }
    beg[K * P] = n;
    *beg_out = beg;
    *idx_out = idx;
    *w_out = w;
    return DK_OK;
}

static inline void DK_TFN(dk__ra_pair_set)(PAIR *p, int32_t a, T wa, T wb)
{
    p->a = a;
    p->w[0] = p->w[1] = wa;
    p->w[2] = p->w[3] = wb;
}

/* Sparse pairs of one bin's taps (Note [Pairs]); out == NULL: count only. */
static int64_t DK_TFN(dk__ra_sparse_pairs)(const int32_t *idx, const T *w, int64_t n, int64_t size, PAIR *out)
{
    int64_t np = 0;
    for (int64_t i = 0; i < n; ++np) {
        if (i + 1 < n && idx[i + 1] == idx[i] + 1) {
            if (out) DK_TFN(dk__ra_pair_set)(&out[np], idx[i], w[i], w[i + 1]);
            i += 2;
        } else if (idx[i] + 1 < size) {
            if (out) DK_TFN(dk__ra_pair_set)(&out[np], idx[i], w[i], (T)0);
            i += 1;
        } else { /* the last column: pair it with the one before */
            if (out) DK_TFN(dk__ra_pair_set)(&out[np], idx[i] - 1, (T)0, w[i]);
            i += 1;
        }
    }
    return np;
}

/* Dense pairs of one bin's taps (Note [Pairs]); out == NULL: count only. */
static int64_t DK_TFN(dk__ra_dense_pairs)(const int32_t *idx, const T *w, int64_t n, PAIR *out)
{
    if (n == 0) return 0;
    const int64_t first = idx[0], np = ((int64_t)idx[n - 1] - first + 2) / 2;
    if (out) {
        for (int64_t j = 0; j < np; ++j) DK_TFN(dk__ra_pair_set)(&out[j], (int32_t)(first + 2 * j), (T)0, (T)0);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t col = idx[i] - first;
            out[col / 2].w[2 * (col % 2)] = out[col / 2].w[2 * (col % 2) + 1] = w[i];
        }
    }
    return np;
}

static int64_t DK_TFN(dk__ra_bin_pairs)(const TABLES *tb, int64_t k, int64_t pw, int64_t PW, int64_t W, bool dense,
                                        PAIR *out)
{
    const int64_t e0 = tb->xbeg[k * PW + pw], n = tb->xbeg[k * PW + pw + 1] - e0;
    return dense ? DK_TFN(dk__ra_dense_pairs)(tb->xidx + e0, tb->xw + e0, n, out)
                 : DK_TFN(dk__ra_sparse_pairs)(tb->xidx + e0, tb->xw + e0, n, W, out);
}

/*
 * Per RoI: its column span and evaluation order. The costs are rough instruction counts, per
 * channel pair, of the loops of dk__ra_forward_roi (forward: sparse does a 4-lane multiply-add
 * per (y tap, pair) plus each pair's bookkeeping per bin row; dense sums the y-tap rows over the
 * span, then dots every pair of the row buffer) and of dk__ra_backward_roi (below). The scales
 * DK__RA_*_DENSE were fitted on fixed and adaptive sampling of small, mixed and large boxes.
 * The choice depends only on the RoI and the direction, never on threads.
 */
static int64_t DK_TFN(dk__ra_choose)(TABLES *tb, const dk__ra_shape *sh, int64_t k)
{
    const int64_t PH = sh->PH, PW = sh->PW;
    const int64_t ny = tb->ybeg[(k + 1) * PH] - tb->ybeg[k * PH];
    int32_t lo = INT32_MAX, hi = -1;
    for (int64_t pw = 0; pw < PW; ++pw) { /* a bin's taps are ascending */
        const int64_t e0 = tb->xbeg[k * PW + pw], e1 = tb->xbeg[k * PW + pw + 1];
        if (e0 == e1) continue;
        lo = tb->xidx[e0] < lo ? tb->xidx[e0] : lo;
        hi = tb->xidx[e1 - 1] > hi ? tb->xidx[e1 - 1] : hi;
    }
    const int64_t span = hi >= lo ? (int64_t)hi - lo + 1 : 0;
    tb->c0[k] = hi >= lo ? lo : 0;
    tb->span[k] = (int32_t)span;
    int64_t nsparse = 0, ndense = 0;
    for (int64_t pw = 0; pw < PW; ++pw) {
        nsparse += DK_TFN(dk__ra_bin_pairs)(tb, k, pw, PW, sh->W, false, NULL);
        ndense += DK_TFN(dk__ra_bin_pairs)(tb, k, pw, PW, sh->W, true, NULL);
    }
    int64_t sparse_cost, dense_cost;
    if (!sh->backward) {
        sparse_cost = 3 * ny * nsparse + DK__RA_FWD_PAIR * PH * nsparse;
        dense_cost = (DK__RA_FWD_DENSE * (ny * span + PH * (2 * span + 12 * ndense))) / 100;
    } else {
        /* sparse: a load-add-store per (y tap, pair); dense: scatter the pairs into a row
         * buffer, then a load-add-store per 4 lanes of each y-tap row over the span. */
        sparse_cost = 5 * ny * nsparse + DK__RA_BWD_PAIR * PH * nsparse;
        dense_cost = (DK__RA_BWD_DENSE * (2 * ny * span + PH * (span / 2 + 5 * ndense))) / 100;
    }
    const int64_t order = dk_tunable(&dk__ra_order); /* Note [Tunables] */
    bool dense = order < 0 ? dense_cost <= sparse_cost : order > 0;
    if (sh->W < 2) dense = true; /* sparse pairs need two columns */
    tb->dense[k] = (unsigned char)dense;
    return dense ? ndense : nsparse;
}

/* Every RoI's order and pairs: counted while choosing, then filled. */
static dk_status DK_TFN(dk__ra_pair_tables)(dk_arena *ar, TABLES *tb, const dk__ra_shape *sh)
{
    const int64_t K = sh->K, PW = sh->PW;
    tb->pbeg = (int64_t *)dk_arena_take_n(ar, (size_t)(K * PW + 1), sizeof *tb->pbeg);
    if (!tb->pbeg) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
    int64_t total = 0;
    for (int64_t k = 0; k < K; ++k) total += DK_TFN(dk__ra_choose)(tb, sh, k);
    tb->pairs = (PAIR *)dk_arena_take_n(ar, (size_t)total, sizeof *tb->pairs);
    if (!tb->pairs) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
    int64_t n = 0;
    tb->max_pairs = 0;
    for (int64_t k = 0; k < K; ++k) {
        const int64_t n0 = n;
        for (int64_t pw = 0; pw < PW; ++pw) {
            tb->pbeg[k * PW + pw] = n;
            n += DK_TFN(dk__ra_bin_pairs)(tb, k, pw, PW, sh->W, tb->dense[k], tb->pairs + n);
        }
        tb->max_pairs = n - n0 > tb->max_pairs ? n - n0 : tb->max_pairs;
    }
    tb->pbeg[K * PW] = n;
    return DK_OK;
}

/* Per-image used rows (only that band of a plane is copied) and the largest bin row. */
static void DK_TFN(dk__ra_row_ranges)(TABLES *tb, const dk__ra_shape *sh, const dk_groups *gr)
{
    const int64_t PH = sh->PH;
    tb->max_ny = 0;
    for (int64_t i = 0; i < sh->K * PH; ++i) {
        const int64_t ny = tb->ybeg[i + 1] - tb->ybeg[i];
        tb->max_ny = ny > tb->max_ny ? ny : tb->max_ny;
    }
    for (int64_t n = 0; n < sh->N; ++n) {
        int32_t lo = INT32_MAX, hi = -1;
        for (int64_t j = gr->beg[n]; j < gr->beg[n + 1]; ++j) {
            const int64_t *yb = tb->ybeg + j * PH; /* tables are by slot (dk__ra_prepare) */
            int32_t last = -1;
            for (int64_t ph = 0; ph < PH; ++ph) { /* a bin's taps are ascending */
                if (yb[ph] == yb[ph + 1]) continue;
                lo = tb->yidx[yb[ph]] < lo ? tb->yidx[yb[ph]] : lo;
                last = tb->yidx[yb[ph + 1] - 1] > last ? tb->yidx[yb[ph + 1] - 1] : last;
            }
            tb->yhi[j] = last;
            hi = last > hi ? last : hi;
        }
        tb->rlo[n] = hi >= 0 ? lo : 0;
        tb->rhi[n] = hi;
    }
}

/* All tables of one call, in the arena. */
static dk_status DK_TFN(dk__ra_tables_build)(dk_arena *ar, TABLES *tb, const dk__ra_shape *sh, const dk_groups *gr,
                                             const AXIS *ay, const AXIS *ax)
{
    memset(tb, 0, sizeof *tb);
    dk_status st = DK_TFN(dk__ra_axis_tables)(ar, ay, sh->K, sh->PH, sh->H, &tb->ybeg, &tb->yidx, &tb->yw);
    if (st != DK_OK) return st;
    st = DK_TFN(dk__ra_axis_tables)(ar, ax, sh->K, sh->PW, sh->W, &tb->xbeg, &tb->xidx, &tb->xw);
    if (st != DK_OK) return st;
    const size_t K = (size_t)sh->K, N = (size_t)sh->N;
    tb->c0 = (int32_t *)dk_arena_take_n(ar, K, sizeof *tb->c0);
    tb->span = (int32_t *)dk_arena_take_n(ar, K, sizeof *tb->span);
    tb->dense = (unsigned char *)dk_arena_take_n(ar, K, 1);
    tb->rlo = (int32_t *)dk_arena_take_n(ar, N, sizeof *tb->rlo);
    tb->rhi = (int32_t *)dk_arena_take_n(ar, N, sizeof *tb->rhi);
    tb->yhi = (int32_t *)dk_arena_take_n(ar, K, sizeof *tb->yhi);
    if (!tb->c0 || !tb->span || !tb->dense || !tb->rlo || !tb->rhi || !tb->yhi)
        return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
    if ((st = DK_TFN(dk__ra_pair_tables)(ar, tb, sh)) != DK_OK) return st;
    DK_TFN(dk__ra_row_ranges)(tb, sh, gr);
    return DK_OK;
}

/* Per-thread scratch in elements of T, each part rounded to 8 elements so that, from a 64-byte
 * aligned base, every part is aligned for V4. */
static size_t DK_TFN(dk__ra_roi_scratch)(const TABLES *tb, const dk__ra_shape *sh)
{
    return dk_round8((size_t)(2 * sh->PH * sh->PW)) + dk_round8(2 * (size_t)sh->W + 8) +
           dk_round8(((size_t)tb->max_ny * sizeof(int64_t) + sizeof(T) - 1) / sizeof(T)) +
           dk_round8((size_t)tb->max_pairs * 4);
}

static SCRATCH DK_TFN(dk__ra_scratch_at)(const TABLES *tb, const dk__ra_shape *sh, T *base)
{
    SCRATCH sc;
    sc.acc = base;
    sc.t = sc.acc + dk_round8((size_t)(2 * sh->PH * sh->PW));
    T *off = sc.t + dk_round8(2 * (size_t)sh->W + 8);
    sc.off = (int64_t *)(void *)off;
    sc.vb = (V4 *)(void *)(off + dk_round8(((size_t)tb->max_ny * sizeof(int64_t) + sizeof(T) - 1) / sizeof(T)));
    return sc;
}

#include "roi_align/roi_align_names_end_tmpl.h"
#endif
