/*
 * csrc/cpu/roi_align_cpu.c — RoIAlign forward and backward on the CPU, OpenMP-parallel.
 *
 * Semantics (MMCV's) and the per-sample math come from kernels/roi_align.h; this file only
 * decides loop order, memory layout and threading. The argument checks (shapes, dtypes, batch
 * indices, pool_mode, argmax presence) were done by ops/roi_align.c before dispatch; the kernels
 * still never index out of bounds if they were not (see dk__rc_read_rois).
 *
 * Note [Loop order: planes outside, RoIs inside]
 * torchvision loops over RoIs, then channels: each (RoI, channel) pair pulls the RoI's window
 * of a different 200 KB plane from memory, and the core mostly waits on it. Here the parallel
 * loop runs over input planes: a plane stays in L2 while every RoI of its image is served from
 * it, in RoI index order. What a RoI needs from a plane does not depend on the channel, so it is
 * precomputed once per call and shared by all planes and threads (Note [Separable weight
 * tables]).
 *
 * Note [Channel pairs]
 * Planes are handled two channels at a time: the used rows of channels c and c + 1 are copied,
 * interleaved element by element, into a per-thread buffer buf[r][x][2]. One 4-lane load at
 * column pair (x, x + 1) then holds both channels at both columns, so every lane of every vector
 * operation is useful and the per-RoI bookkeeping is shared by two channels. The copy is cheap
 * (a sequential read of the band) and pays for itself: the RoI loop always runs on the same
 * cache- and TLB-warm buffer, whereas reading each new plane in place measured a third slower.
 * Backward accumulates into the same kind of buffer and writes it out once at the end. An odd
 * last channel is paired with itself. Any layout goes through these copies, which read and
 * write through the strides: for channels-last, one iteration takes as many pairs as one cache
 * line of channels holds and copies pixel by pixel, so every line is used whole.
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
 *
 * Note [Deterministic backward]
 * grad_input must come out bit-identical for any thread count and on every run, so there are
 * no atomics: each channel pair of each image of grad_input is owned by exactly one iteration of
 * the parallel loop, which zeroes its buffer, adds the contributions of the RoIs of that image
 * in RoI index order (each RoI in a fixed order), and writes every element of the pair. Which
 * thread runs an iteration does not matter; the sparse/dense choice depends only on the RoI and
 * the direction. Max pooling is organised the same way, per plane.
 *
 * Note [Non-finite values]
 * The separable evaluation touches columns that no sample reads, with weight 0: a lone tap's
 * partner (Note [Pairs]) and the gaps of a dense window. With an infinite or NaN value there,
 * 0 * inf = NaN would reach bins that the references, which read only the taps of each sample,
 * leave finite (likewise an infinite or NaN grad_output in backward). So the copies that feed
 * the evaluation also tell whether everything they copied is finite, at one subtraction per
 * element of a copy that mostly waits on memory; a channel pair whose input band is not (a RoI
 * whose grad_output is not, in backward) is evaluated per sample from the shared math instead,
 * exactly as the references do, non-finite values included. Max pooling reads only sample taps
 * and needs nothing of the kind.
 */
#if defined(DK__RC_TEMPLATE)
/* ========================================================================================== */
/* Template body, instantiated below once per dtype (the self-include is explained by Note     */
/* [One template, several types] in kernels/roi_align.h).                                     */
/*   DK__RC_T      compute type (float / double)    DK__RC_TFN(x)  x suffixed _f32 / _f64      */
/*   DK__RC_S      storage type                     DK__RC_SFN(x)  x suffixed _f32/_f64/_f16/_bf16 */
/*   DK__RC_EMIT_T 1 in the first instantiation of a compute type: emit the T-only part        */
#define T DK__RC_T
#define S DK__RC_S
#define V4 DK__RC_TFN(dk__rc_v4)
#define AXIS DK__RC_TFN(dk_roi_align_axis)
#define PAIR DK__RC_TFN(dk__rc_pair)
#define TABLES DK__RC_TFN(dk__rc_tables)
#define SCRATCH DK__RC_TFN(dk__rc_scratch)
#define SAMPLE DK__RC_TFN(dk__rc_sample)
#define LOAD(p) DK__RC_SFN(dk_roi_align_load)(p)
#define STORE(p, v) DK__RC_SFN(dk_roi_align_store)((p), (v))

#if DK__RC_EMIT_T
/* ------------------------------------------------------------------------------------------ */
/* Compute-type part: weight tables and the evaluation of one RoI on one channel pair.        */

/* Four lanes of T. GCC/Clang generic vectors: SSE on x86-64-v2, whatever the target has
 * elsewhere; no intrinsics. Helpers pass them through pointers: four doubles are 32 bytes,
 * whose by-value convention differs with and without AVX (gcc's -Wpsabi). */
typedef T V4 __attribute__((vector_size(4 * sizeof(T))));

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

typedef struct {
    /* Merged taps (Note [Separable weight tables]); RoI k, bin p: [beg[k * P + p], beg[.. + 1]),
     * indices ascending within a bin. */
    int64_t *ybeg, *xbeg;
    int32_t *yidx, *xidx;
    T *yw, *xw;
    /* The x taps as pairs (Note [Pairs]): RoI k, bin pw: [pbeg[k * PW + pw], pbeg[.. + 1]). */
    int64_t *pbeg;
    PAIR *pairs;
    int32_t *c0, *span;   /* per RoI: first column and width of the columns its x taps use */
    unsigned char *dense; /* per RoI: evaluation order */
    int32_t *rlo, *rhi;   /* per image: rows used by any of its RoIs (rlo > rhi: none) */
    int64_t max_ny;       /* most y taps of one bin row */
    int64_t max_pairs;    /* most pairs of one RoI */
} TABLES;

/* Per-thread scratch for evaluating RoIs (dk__rc_scratch_at). */
typedef struct {
    T *acc;       /* 2 * PH * PW: one RoI's outputs (or grad_output), interleaved [ph][pw][ch] */
    T *t;         /* 2 * (W + 4): a bin row summed over its y taps (dense) */
    int64_t *off; /* max_ny: buffer offsets of a bin row's y-tap rows */
    V4 *vb;       /* max_pairs: per-pair partial sums (sparse) */
} SCRATCH;

/* Adds weight w at index i to the list (idx, wt) of n entries, merging with the last two. */
static inline int64_t DK__RC_TFN(dk__rc_add_tap)(int32_t *restrict idx, T *restrict wt, int64_t n,
                                                 int32_t i, T w)
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
static inline int64_t DK__RC_TFN(dk__rc_bin_taps)(const AXIS *a, int64_t p, int64_t size,
                                           int32_t *restrict idx, T *restrict wt)
{
    int64_t n = 0;
    /* Adding each sample's taps in the direction the samples move keeps the list monotonic. */
    const bool down = a->bin < (T)0;
    for (int64_t i = 0; i < a->grid; ++i) {
        DK__RC_TFN(dk_roi_align_taps) t;
        if (!DK__RC_TFN(dk_roi_align_taps_init)(DK__RC_TFN(dk_roi_align_axis_sample)(a, p, i),
                                                size, &t))
            continue;
        if (down) {
            n = DK__RC_TFN(dk__rc_add_tap)(idx, wt, n, (int32_t)t.hi, t.whi);
            n = DK__RC_TFN(dk__rc_add_tap)(idx, wt, n, (int32_t)t.lo, t.wlo);
        } else {
            n = DK__RC_TFN(dk__rc_add_tap)(idx, wt, n, (int32_t)t.lo, t.wlo);
            n = DK__RC_TFN(dk__rc_add_tap)(idx, wt, n, (int32_t)t.hi, t.whi);
        }
    }
    if (n > 0) {
        const T inv = (T)1 / (T)a->grid;
        for (int64_t e = 0; e < n; ++e)
            wt[e] *= inv;
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
static int64_t DK__RC_TFN(dk__rc_prefix)(int64_t *beg, int64_t n)
{
    beg[0] = 0;
    for (int64_t i = 1; i <= n; ++i)
        beg[i] += beg[i - 1];
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
static dk_status DK__RC_TFN(dk__rc_axis_tables)(dk__rc_arena *ar, const AXIS *axes, int64_t K,
                                                int64_t P, int64_t size, int64_t **beg_out,
                                                int32_t **idx_out, T **w_out)
{
    int64_t *beg = (int64_t *)dk__rc_take(ar, (size_t)(K * P + 1) * sizeof *beg);
    if (!beg) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
    int64_t room = 0, most = 0; /* the bound, in all and for one bin */
    for (int64_t k = 0; k < K; ++k) {
        const int64_t g = axes[k].grid, b = g >= size ? size : (2 * g < size ? 2 * g : size);
        room += P * b;
        most = b > most ? b : most;
    }
    if ((size_t)room * (sizeof(int32_t) + sizeof(T)) > DK__RC_TAPS_BOUND_BYTES) {
        /* Count into room for one bin (bounded by size, so by the input). */
        int32_t *ti = (int32_t *)dk__rc_take(ar, (size_t)most * sizeof *ti);
        T *tw = (T *)dk__rc_take(ar, (size_t)most * sizeof *tw);
        if (!ti || !tw) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
        for (int64_t k = 0; k < K; ++k)
            for (int64_t p = 0; p < P; ++p)
                beg[k * P + p + 1] = DK__RC_TFN(dk__rc_bin_taps)(&axes[k], p, size, ti, tw);
        room = DK__RC_TFN(dk__rc_prefix)(beg, K * P);
    }
    int32_t *idx = (int32_t *)dk__rc_take(ar, (size_t)room * sizeof *idx);
    T *w = (T *)dk__rc_take(ar, (size_t)room * sizeof *w);
    if (!idx || !w)
        return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables (%lld entries)",
                        (long long)room);
    int64_t n = 0;
    for (int64_t k = 0; k < K; ++k)
        for (int64_t p = 0; p < P; ++p) {
            beg[k * P + p] = n;
            n += DK__RC_TFN(dk__rc_bin_taps)(&axes[k], p, size, idx + n, w + n);
        }
    beg[K * P] = n;
    *beg_out = beg;
    *idx_out = idx;
    *w_out = w;
    return DK_OK;
}

static inline void DK__RC_TFN(dk__rc_pair_set)(PAIR *p, int32_t a, T wa, T wb)
{
    p->a = a;
    p->w[0] = p->w[1] = wa;
    p->w[2] = p->w[3] = wb;
}

/* Sparse pairs of one bin's taps (Note [Pairs]); out == NULL: count only. */
static int64_t DK__RC_TFN(dk__rc_sparse_pairs)(const int32_t *idx, const T *w, int64_t n,
                                               int64_t size, PAIR *out)
{
    int64_t np = 0;
    for (int64_t i = 0; i < n; ++np) {
        if (i + 1 < n && idx[i + 1] == idx[i] + 1) {
            if (out) DK__RC_TFN(dk__rc_pair_set)(&out[np], idx[i], w[i], w[i + 1]);
            i += 2;
        } else if (idx[i] + 1 < size) {
            if (out) DK__RC_TFN(dk__rc_pair_set)(&out[np], idx[i], w[i], (T)0);
            i += 1;
        } else { /* the last column: pair it with the one before */
            if (out) DK__RC_TFN(dk__rc_pair_set)(&out[np], idx[i] - 1, (T)0, w[i]);
            i += 1;
        }
    }
    return np;
}

/* Dense pairs of one bin's taps (Note [Pairs]); out == NULL: count only. */
static int64_t DK__RC_TFN(dk__rc_dense_pairs)(const int32_t *idx, const T *w, int64_t n,
                                              PAIR *out)
{
    if (n == 0) return 0;
    const int64_t first = idx[0], np = ((int64_t)idx[n - 1] - first + 2) / 2;
    if (out) {
        for (int64_t j = 0; j < np; ++j)
            DK__RC_TFN(dk__rc_pair_set)(&out[j], (int32_t)(first + 2 * j), (T)0, (T)0);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t col = idx[i] - first;
            out[col / 2].w[2 * (col % 2)] = out[col / 2].w[2 * (col % 2) + 1] = w[i];
        }
    }
    return np;
}

static int64_t DK__RC_TFN(dk__rc_bin_pairs)(const TABLES *tb, int64_t k, int64_t pw, int64_t PW,
                                            int64_t W, bool dense, PAIR *out)
{
    const int64_t e0 = tb->xbeg[k * PW + pw], n = tb->xbeg[k * PW + pw + 1] - e0;
    return dense ? DK__RC_TFN(dk__rc_dense_pairs)(tb->xidx + e0, tb->xw + e0, n, out)
                 : DK__RC_TFN(dk__rc_sparse_pairs)(tb->xidx + e0, tb->xw + e0, n, W, out);
}

/*
 * Per RoI: its column span and evaluation order. The costs are rough instruction counts, per
 * channel pair, of the loops of dk__rc_forward_roi (forward: sparse does a 4-lane multiply-add
 * per (y tap, pair) plus each pair's bookkeeping per bin row; dense sums the y-tap rows over the
 * span, then dots every pair of the row buffer) and of dk__rc_backward_roi (below). The scales
 * DK__RC_*_DENSE were fitted on fixed and adaptive sampling of small, mixed and large boxes.
 * The choice depends only on the RoI and the direction, never on threads.
 */
static int64_t DK__RC_TFN(dk__rc_choose)(TABLES *tb, const dk__rc_shape *sh, int64_t k)
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
        nsparse += DK__RC_TFN(dk__rc_bin_pairs)(tb, k, pw, PW, sh->W, false, NULL);
        ndense += DK__RC_TFN(dk__rc_bin_pairs)(tb, k, pw, PW, sh->W, true, NULL);
    }
    int64_t sparse_cost, dense_cost;
    if (!sh->backward) {
        sparse_cost = 3 * ny * nsparse + DK__RC_FWD_PAIR * PH * nsparse;
        dense_cost = (DK__RC_FWD_DENSE * (ny * span + PH * (2 * span + 12 * ndense))) / 100;
    } else {
        /* sparse: a load-add-store per (y tap, pair); dense: scatter the pairs into a row
         * buffer, then a load-add-store per 4 lanes of each y-tap row over the span. */
        sparse_cost = 5 * ny * nsparse + DK__RC_BWD_PAIR * PH * nsparse;
        dense_cost = (DK__RC_BWD_DENSE * (2 * ny * span + PH * (span / 2 + 5 * ndense))) / 100;
    }
    bool dense = DK__RC_DENSE < 0 ? dense_cost <= sparse_cost : DK__RC_DENSE > 0;
    if (sh->W < 2) dense = true; /* sparse pairs need two columns */
    tb->dense[k] = (unsigned char)dense;
    return dense ? ndense : nsparse;
}

/* Every RoI's order and pairs: counted while choosing, then filled. */
static dk_status DK__RC_TFN(dk__rc_pair_tables)(dk__rc_arena *ar, TABLES *tb,
                                                const dk__rc_shape *sh)
{
    const int64_t K = sh->K, PW = sh->PW;
    tb->pbeg = (int64_t *)dk__rc_take(ar, (size_t)(K * PW + 1) * sizeof *tb->pbeg);
    if (!tb->pbeg) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
    int64_t total = 0;
    for (int64_t k = 0; k < K; ++k) total += DK__RC_TFN(dk__rc_choose)(tb, sh, k);
    tb->pairs = (PAIR *)dk__rc_take(ar, (size_t)total * sizeof *tb->pairs);
    if (!tb->pairs) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
    int64_t n = 0;
    tb->max_pairs = 0;
    for (int64_t k = 0; k < K; ++k) {
        const int64_t n0 = n;
        for (int64_t pw = 0; pw < PW; ++pw) {
            tb->pbeg[k * PW + pw] = n;
            n += DK__RC_TFN(dk__rc_bin_pairs)(tb, k, pw, PW, sh->W, tb->dense[k], tb->pairs + n);
        }
        tb->max_pairs = n - n0 > tb->max_pairs ? n - n0 : tb->max_pairs;
    }
    tb->pbeg[K * PW] = n;
    return DK_OK;
}

/* Per-image used rows (only that band of a plane is copied) and the largest bin row. */
static void DK__RC_TFN(dk__rc_row_ranges)(TABLES *tb, const dk__rc_shape *sh,
                                          const dk__rc_groups *gr)
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
            const int64_t *yb = tb->ybeg + gr->order[j] * PH;
            for (int64_t ph = 0; ph < PH; ++ph) { /* a bin's taps are ascending */
                if (yb[ph] == yb[ph + 1]) continue;
                lo = tb->yidx[yb[ph]] < lo ? tb->yidx[yb[ph]] : lo;
                hi = tb->yidx[yb[ph + 1] - 1] > hi ? tb->yidx[yb[ph + 1] - 1] : hi;
            }
        }
        tb->rlo[n] = hi >= 0 ? lo : 0;
        tb->rhi[n] = hi;
    }
}

/* All tables of one call, in the arena. */
static dk_status DK__RC_TFN(dk__rc_tables_build)(dk__rc_arena *ar, TABLES *tb,
                                                 const dk__rc_shape *sh, const dk__rc_groups *gr,
                                                 const AXIS *ay, const AXIS *ax)
{
    memset(tb, 0, sizeof *tb);
    dk_status st = DK__RC_TFN(dk__rc_axis_tables)(ar, ay, sh->K, sh->PH, sh->H, &tb->ybeg,
                                                  &tb->yidx, &tb->yw);
    if (st != DK_OK) return st;
    st = DK__RC_TFN(dk__rc_axis_tables)(ar, ax, sh->K, sh->PW, sh->W, &tb->xbeg, &tb->xidx,
                                        &tb->xw);
    if (st != DK_OK) return st;
    const size_t K = (size_t)sh->K, N = (size_t)sh->N;
    tb->c0 = (int32_t *)dk__rc_take(ar, K * sizeof *tb->c0);
    tb->span = (int32_t *)dk__rc_take(ar, K * sizeof *tb->span);
    tb->dense = (unsigned char *)dk__rc_take(ar, K);
    tb->rlo = (int32_t *)dk__rc_take(ar, N * sizeof *tb->rlo);
    tb->rhi = (int32_t *)dk__rc_take(ar, N * sizeof *tb->rhi);
    if (!tb->c0 || !tb->span || !tb->dense || !tb->rlo || !tb->rhi)
        return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
    if ((st = DK__RC_TFN(dk__rc_pair_tables)(ar, tb, sh)) != DK_OK) return st;
    DK__RC_TFN(dk__rc_row_ranges)(tb, sh, gr);
    return DK_OK;
}

/* Per-thread scratch in elements of T, each part rounded to 8 elements so that, from a 64-byte
 * aligned base, every part is aligned for V4. */
static size_t DK__RC_TFN(dk__rc_roi_scratch)(const TABLES *tb, const dk__rc_shape *sh)
{
    return dk__rc_round8((size_t)(2 * sh->PH * sh->PW)) + dk__rc_round8(2 * (size_t)sh->W + 8) +
           dk__rc_round8(((size_t)tb->max_ny * sizeof(int64_t) + sizeof(T) - 1) / sizeof(T)) +
           dk__rc_round8((size_t)tb->max_pairs * 4);
}

static SCRATCH DK__RC_TFN(dk__rc_scratch_at)(const TABLES *tb, const dk__rc_shape *sh, T *base)
{
    SCRATCH sc;
    sc.acc = base;
    sc.t = sc.acc + dk__rc_round8((size_t)(2 * sh->PH * sh->PW));
    T *off = sc.t + dk__rc_round8(2 * (size_t)sh->W + 8);
    sc.off = (int64_t *)(void *)off;
    sc.vb = (V4 *)(void *)(off + dk__rc_round8(((size_t)tb->max_ny * sizeof(int64_t) +
                                                sizeof(T) - 1) / sizeof(T)));
    return sc;
}

static inline void DK__RC_TFN(dk__rc_ld4)(V4 *v, const T *p) { memcpy(v, p, sizeof *v); }
static inline void DK__RC_TFN(dk__rc_st4)(T *p, const V4 *v) { memcpy(p, v, sizeof *v); }

/* *v to p (16-byte aligned) with non-temporal stores, which do not read the line first (Note
 * [Streaming grad_input]); plain stores where there are none. */
static inline void DK__RC_TFN(dk__rc_stream4)(T *p, const V4 *v)
{
#if defined(__SSE2__) && DK__RC_T_BYTES == 4
    float __attribute__((vector_size(16))) x;
    memcpy(&x, v, sizeof x);
    __builtin_ia32_movntps((float *)(void *)p, x);
#elif defined(__SSE2__) && DK__RC_T_BYTES == 8
    double __attribute__((vector_size(16))) x;
    memcpy(&x, v, sizeof x);
    __builtin_ia32_movntpd((double *)(void *)p, x);
    memcpy(&x, (const char *)v + sizeof x, sizeof x);
    __builtin_ia32_movntpd((double *)(void *)p + 2, x);
#else
    DK__RC_TFN(dk__rc_st4)(p, v);
#endif
}

/* t[0..n) += sum of w[i] * row_i[c .. c + n) over nr (1..4) y taps, row r at
 * buf + (r - rbase) * sy: the dense vertical pass, four rows per sweep so that t is loaded and
 * stored once per four rows. */
static inline void DK__RC_TFN(dk__rc_vsum)(T *restrict t, int64_t n, const T *buf, int64_t sy,
                                           int64_t rbase, int64_t c, const int32_t *idx,
                                           const T *w, int64_t nr)
{
#define DK__RC_ROW(i) (buf + (idx[i] - rbase) * sy + c)
    const T *restrict a = DK__RC_ROW(0);
    const T wa = w[0];
    if (nr >= 4) {
        const T *restrict b = DK__RC_ROW(1), *restrict d = DK__RC_ROW(2), *restrict e = DK__RC_ROW(3);
        const T wb = w[1], wd = w[2], we = w[3];
        for (int64_t j = 0; j < n; ++j)
            t[j] += wa * a[j] + wb * b[j] + wd * d[j] + we * e[j];
    } else if (nr == 3) {
        const T *restrict b = DK__RC_ROW(1), *restrict d = DK__RC_ROW(2);
        const T wb = w[1], wd = w[2];
        for (int64_t j = 0; j < n; ++j)
            t[j] += wa * a[j] + wb * b[j] + wd * d[j];
    } else if (nr == 2) {
        const T *restrict b = DK__RC_ROW(1);
        const T wb = w[1];
        for (int64_t j = 0; j < n; ++j)
            t[j] += wa * a[j] + wb * b[j];
    } else {
        for (int64_t j = 0; j < n; ++j)
            t[j] += wa * a[j];
    }
#undef DK__RC_ROW
}

/* Sparse vertical pass over up to four y taps (rows idx, weights w; row r at
 * buf + (r - rbase) * sy): for every pair q[p] of the RoI, vb[p] (= if first, else +=)
 * sum_i w[i] * row_i[2a .. + 3]. Four taps per sweep keep their offsets and weights in
 * registers. */
static inline void DK__RC_TFN(dk__rc_sparse_rows)(V4 *restrict vb, const PAIR *restrict q,
                                                  int64_t np, const T *buf, int64_t sy,
                                                  int64_t rbase, const int32_t *idx, const T *w,
                                                  int64_t nr, bool first)
{
    int64_t o[4];
    for (int i = 0; i < 4; ++i) o[i] = (idx[i < nr ? i : 0] - rbase) * sy;
#define DK__RC_TAP(i) DK__RC_TFN(dk__rc_ld4)(&x, pa + o##i); v += w##i * x;
#define DK__RC_SWEEP(TAPS)                                                                      \
    for (int64_t p = 0; p < np; ++p) {                                                          \
        const T *pa = buf + 2 * (int64_t)q[p].a;                                                \
        V4 x, v = {0, 0, 0, 0};                                                                 \
        TAPS                                                                                    \
        if (first) vb[p] = v;                                                                   \
        else vb[p] += v;                                                                        \
    }
    const int64_t o0 = o[0];
    const T w0 = w[0];
    if (nr >= 4) {
        const int64_t o1 = o[1], o2 = o[2], o3 = o[3];
        const T w1 = w[1], w2 = w[2], w3 = w[3];
        DK__RC_SWEEP(DK__RC_TAP(0) DK__RC_TAP(1) DK__RC_TAP(2) DK__RC_TAP(3))
    } else if (nr == 3) {
        const int64_t o1 = o[1], o2 = o[2];
        const T w1 = w[1], w2 = w[2];
        DK__RC_SWEEP(DK__RC_TAP(0) DK__RC_TAP(1) DK__RC_TAP(2))
    } else if (nr == 2) {
        const int64_t o1 = o[1];
        const T w1 = w[1];
        DK__RC_SWEEP(DK__RC_TAP(0) DK__RC_TAP(1))
    } else {
        DK__RC_SWEEP(DK__RC_TAP(0))
    }
#undef DK__RC_SWEEP
#undef DK__RC_TAP
}

/* *s = sum over the pairs [p0, p1) of their weights times their lanes: vb[p - vb0] (sparse) or
 * the row buffer t at the pair (dense; t starts at column c0). */
static inline void DK__RC_TFN(dk__rc_bin_dot)(V4 *s, const PAIR *pr, int64_t p0, int64_t p1,
                                              const V4 *vb, int64_t vb0, const T *t, int64_t c0)
{
    V4 acc = {0, 0, 0, 0}, w, v;
    for (int64_t p = p0; p < p1; ++p) {
        DK__RC_TFN(dk__rc_ld4)(&w, pr[p].w);
        if (vb)
            v = vb[p - vb0];
        else
            DK__RC_TFN(dk__rc_ld4)(&v, t + 2 * ((int64_t)pr[p].a - c0));
        acc += w * v;
    }
    *s = acc;
}

/* One bin row of both channels: acc2[2 * pw + ch] = (lane ch) + (lane ch + 2) of the bin's dot,
 * two bins per shuffle. */
static inline void DK__RC_TFN(dk__rc_bin_row)(T *restrict acc2, const PAIR *pr, const int64_t *pb,
                                              int64_t PW, const V4 *vb, const T *t, int64_t c0)
{
    int64_t pw = 0;
    for (; pw + 2 <= PW; pw += 2) {
        V4 s0, s1;
        DK__RC_TFN(dk__rc_bin_dot)(&s0, pr, pb[pw], pb[pw + 1], vb, pb[0], t, c0);
        DK__RC_TFN(dk__rc_bin_dot)(&s1, pr, pb[pw + 1], pb[pw + 2], vb, pb[0], t, c0);
        const V4 r = DK__RC_SHUF(s0, s1, 0, 1, 4, 5) + DK__RC_SHUF(s0, s1, 2, 3, 6, 7);
        DK__RC_TFN(dk__rc_st4)(acc2 + 2 * pw, &r);
    }
    if (pw < PW) {
        V4 s;
        DK__RC_TFN(dk__rc_bin_dot)(&s, pr, pb[pw], pb[pw + 1], vb, pb[0], t, c0);
        acc2[2 * pw] = s[0] + s[2];
        acc2[2 * pw + 1] = s[1] + s[3];
    }
}

/*
 * Forward of RoI k on one channel pair: sc->acc[2 * (ph * PW + pw) + ch] = out[ph, pw]. buf is
 * the interleaved band (Note [Channel pairs]): row r at buf + (r - rbase) * 2W.
 */
static void DK__RC_TFN(dk__rc_forward_roi)(const TABLES *tb, int64_t k, int64_t PH, int64_t PW,
                                           int64_t W, const T *buf, int64_t rbase,
                                           const SCRATCH *sc)
{
    const int64_t *yb = tb->ybeg + k * PH, *pb = tb->pbeg + k * PW;
    const PAIR *pr = tb->pairs;
    const int64_t sy = 2 * W;
    T *restrict acc = sc->acc;
    if (tb->dense[k]) {
        T *restrict t = sc->t;
        const int64_t c0 = tb->c0[k], span = tb->span[k];
        for (int64_t ph = 0; ph < PH; ++ph) {
            memset(t, 0, (size_t)(2 * span + 4) * sizeof *t);
            for (int64_t e = yb[ph]; e < yb[ph + 1]; e += 4)
                DK__RC_TFN(dk__rc_vsum)(t, 2 * span, buf, sy, rbase, 2 * c0, tb->yidx + e,
                                        tb->yw + e, yb[ph + 1] - e);
            DK__RC_TFN(dk__rc_bin_row)(acc + 2 * ph * PW, pr, pb, PW, NULL, t, c0);
        }
    } else {
        const PAIR *q = pr + pb[0];
        const int64_t np = pb[PW] - pb[0];
        for (int64_t ph = 0; ph < PH; ++ph) {
            const int64_t e0 = yb[ph], ny = yb[ph + 1] - e0;
            if (ny == 0) {
                memset(acc + 2 * ph * PW, 0, (size_t)(2 * PW) * sizeof *acc);
                continue;
            }
            for (int64_t i = 0; i < ny; i += 4)
                DK__RC_TFN(dk__rc_sparse_rows)(sc->vb, q, np, buf, sy, rbase, tb->yidx + e0 + i,
                                               tb->yw + e0 + i, ny - i, i == 0);
            DK__RC_TFN(dk__rc_bin_row)(acc + 2 * ph * PW, pr, pb, PW, sc->vb, NULL, 0);
        }
    }
}

/* g2 = (g0, g1, g0, g1) of bin (ph, pw) of the interleaved grad_output block. */
static inline void DK__RC_TFN(dk__rc_g2)(V4 *g2, const T *g)
{
    const V4 r = {g[0], g[1], g[0], g[1]};
    *g2 = r;
}

/*
 * Backward of RoI k on one channel pair: buf[r, x, ch] += sum over (ph, pw) of
 * g[ph, pw, ch] times the separable weight, in a fixed order (Note [Deterministic backward]);
 * g is sc->acc, buf holds all H rows (rbase 0).
 */
static void DK__RC_TFN(dk__rc_backward_roi)(const TABLES *tb, int64_t k, int64_t PH, int64_t PW,
                                            int64_t W, T *buf, const SCRATCH *sc)
{
    const int64_t *yb = tb->ybeg + k * PH, *pb = tb->pbeg + k * PW;
    const PAIR *pr = tb->pairs;
    const int64_t sy = 2 * W;
    const T *restrict g = sc->acc;
    if (tb->dense[k]) {
        T *restrict u = sc->t;
        const int64_t c0 = tb->c0[k], span = tb->span[k];
        for (int64_t ph = 0; ph < PH; ++ph) {
            if (yb[ph] == yb[ph + 1]) continue;
            memset(u, 0, (size_t)(2 * span + 4) * sizeof *u);
            for (int64_t pw = 0; pw < PW; ++pw) {
                V4 g2, w, x;
                DK__RC_TFN(dk__rc_g2)(&g2, g + 2 * (ph * PW + pw));
                for (int64_t p = pb[pw]; p < pb[pw + 1]; ++p) {
                    T *up = u + 2 * ((int64_t)pr[p].a - c0);
                    DK__RC_TFN(dk__rc_ld4)(&w, pr[p].w);
                    DK__RC_TFN(dk__rc_ld4)(&x, up);
                    x += w * g2;
                    DK__RC_TFN(dk__rc_st4)(up, &x);
                }
            }
            for (int64_t ey = yb[ph]; ey < yb[ph + 1]; ++ey) {
                T *restrict row = buf + tb->yidx[ey] * sy + 2 * c0;
                const T wy = tb->yw[ey];
                for (int64_t j = 0; j < 2 * span; ++j)
                    row[j] += wy * u[j];
            }
        }
    } else {
        const PAIR *q = pr + pb[0];
        const int64_t np = pb[PW] - pb[0];
        int64_t *restrict off = sc->off;
        V4 *restrict vb = sc->vb;
        for (int64_t ph = 0; ph < PH; ++ph) {
            const int64_t e0 = yb[ph], ny = yb[ph + 1] - e0;
            if (ny == 0) continue;
            for (int64_t i = 0; i < ny; ++i) off[i] = tb->yidx[e0 + i] * sy;
            for (int64_t pw = 0; pw < PW; ++pw) {
                V4 g2, w;
                DK__RC_TFN(dk__rc_g2)(&g2, g + 2 * (ph * PW + pw));
                for (int64_t p = pb[pw]; p < pb[pw + 1]; ++p) {
                    DK__RC_TFN(dk__rc_ld4)(&w, pr[p].w);
                    vb[p - pb[0]] = w * g2;
                }
            }
            /* Pairs may overlap (the edge case of Note [Pairs]): each update is a complete
             * load-add-store before the next. */
            for (int64_t p = 0; p < np; ++p) {
                T *pa = buf + 2 * (int64_t)q[p].a;
                for (int64_t i = 0; i < ny; ++i) {
                    V4 x;
                    DK__RC_TFN(dk__rc_ld4)(&x, pa + off[i]);
                    x += tb->yw[e0 + i] * vb[p];
                    DK__RC_TFN(dk__rc_st4)(pa + off[i], &x);
                }
            }
        }
    }
}
/* Backward of one RoI (axes ay, ax) on one channel pair per sample, as the references do it
 * (Note [Non-finite values]): each sample of each bin adds g * w / count to its four taps,
 * with g[ph, pw, ch] from sc->acc; buf as in dk__rc_backward_roi. */
static void DK__RC_TFN(dk__rc_backward_roi_exact)(const AXIS *ay, const AXIS *ax, int64_t PH,
                                                  int64_t PW, int64_t H, int64_t W, T *buf,
                                                  const SCRATCH *sc)
{
    const T count = DK__RC_TFN(dk_roi_align_count)(ay, ax);
    for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw)
            for (int64_t iy = 0; iy < ay->grid; ++iy) {
                const T y = DK__RC_TFN(dk_roi_align_axis_sample)(ay, ph, iy);
                for (int64_t ix = 0; ix < ax->grid; ++ix) {
                    const T x = DK__RC_TFN(dk_roi_align_axis_sample)(ax, pw, ix);
                    DK__RC_TFN(dk_roi_align_bilinear) b;
                    if (!DK__RC_TFN(dk_roi_align_bilinear_init)(y, x, H, W, &b)) continue;
                    for (int64_t i = 0; i < 2; ++i) {
                        const T g = sc->acc[2 * (ph * PW + pw) + i];
                        T *p = buf + i;
                        p[2 * (b.y_low * W + b.x_low)] += g * b.w1 / count;
                        p[2 * (b.y_low * W + b.x_high)] += g * b.w2 / count;
                        p[2 * (b.y_high * W + b.x_low)] += g * b.w3 / count;
                        p[2 * (b.y_high * W + b.x_high)] += g * b.w4 / count;
                    }
                }
            }
}

/* One sample coordinate along one axis and its taps (ok: it contributes). */
typedef struct {
    T v;
    int ok;
    DK__RC_TFN(dk_roi_align_taps) t;
} SAMPLE;

/* The samples of every bin of one axis: s[p * grid + i] for bin p, sample i. */
static void DK__RC_TFN(dk__rc_axis_samples)(SAMPLE *s, const AXIS *a, int64_t P, int64_t size)
{
    for (int64_t p = 0; p < P; ++p)
        for (int64_t i = 0; i < a->grid; ++i) {
            SAMPLE *e = &s[p * a->grid + i];
            e->v = DK__RC_TFN(dk_roi_align_axis_sample)(a, p, i);
            e->ok = DK__RC_TFN(dk_roi_align_taps_init)(e->v, size, &e->t);
            if (!e->ok) { /* taps_init leaves t unset; dk__rc_max_bin still forms row pointers */
                e->t.lo = e->t.hi = 0;
                e->t.wlo = e->t.whi = (T)0;
            }
        }
}

/*
 * Max-pooled bin from per-axis sample tables, on a T plane with row stride sy and unit column
 * stride: the same computation, operation for operation, as dk_roi_align_forward_max_* (same
 * taps, w1..w4 as the same products, the same sum order), so results and argmax are identical;
 * only the per-sample geometry is hoisted out of the bins and channels.
 */
static inline T DK__RC_TFN(dk__rc_max_bin)(const T *plane, int64_t sy, const SAMPLE *ys,
                                           int64_t gh, const SAMPLE *xs, int64_t gw,
                                           T *argmax_y, T *argmax_x)
{
    if (gh <= 0 || gw <= 0) {
        *argmax_y = *argmax_x = (T)-1;
        return (T)0;
    }
    T maxval = (T)-FLT_MAX;
    int64_t by = -1, bx = -1;
    for (int64_t iy = 0; iy < gh; ++iy) {
        const SAMPLE *y = &ys[iy];
        const T *rlo = plane + y->t.lo * sy, *rhi = plane + y->t.hi * sy;
        for (int64_t ix = 0; ix < gw; ++ix) {
            const SAMPLE *x = &xs[ix];
            T val = (T)0;
            if (y->ok && x->ok) {
                const T w1 = y->t.wlo * x->t.wlo, w2 = y->t.wlo * x->t.whi;
                const T w3 = y->t.whi * x->t.wlo, w4 = y->t.whi * x->t.whi;
                val = w1 * rlo[x->t.lo] + w2 * rlo[x->t.hi] + w3 * rhi[x->t.lo] + w4 * rhi[x->t.hi];
            }
            /* No branch: on real data "is this sample the new max" is a coin toss that the
             * branch predictor loses. The winner is kept as indices, selected with a mask (gcc
             * turns plain ?: selects back into a branch here), the maximum as MAXSS. */
            const int64_t m = -(int64_t)(val > maxval);
            by ^= (by ^ iy) & m;
            bx ^= (bx ^ ix) & m;
            maxval = val > maxval ? val : maxval;
        }
    }
    *argmax_y = by >= 0 ? ys[by].v : (T)-1;
    *argmax_x = bx >= 0 ? xs[bx].v : (T)-1;
    return maxval;
}
#endif /* DK__RC_EMIT_T */

/* ------------------------------------------------------------------------------------------ */
/* Storage-type part: reading RoIs, moving planes in and out, the drivers.                    */

/* Batch index and geometry of every RoI; batch[k] = -1 for an index that is not an integer in
 * [0, N) (the op's check rejects those; this only keeps the kernel in bounds regardless). */
static void DK__RC_SFN(dk__rc_read_rois)(const dk_tensor *rois, const dk__rc_shape *sh,
                                         int64_t *batch, AXIS *ay, AXIS *ax)
{
    const S *r = (const S *)dk_tensor_data(rois);
    int64_t rs[2];
    dk__rc_strides(rois, rs, 2);
    const int64_t s0 = rs[0], s1 = rs[1];
    const T scale = (T)sh->spatial_scale;
    for (int64_t k = 0; k < sh->K; ++k) {
        const S *row = r + k * s0;
        const double b = (double)LOAD(row);
        batch[k] = (b >= 0 && b < (double)sh->N && b == (double)(int64_t)b) ? (int64_t)b : -1;
        DK__RC_TFN(dk_roi_align_roi_init)(LOAD(row + s1), LOAD(row + 2 * s1), LOAD(row + 3 * s1),
                                          LOAD(row + 4 * s1), scale, sh->PH, sh->PW,
                                          sh->sampling_ratio, sh->aligned, sh->H, sh->W, &ay[k],
                                          &ax[k]);
    }
}

/* e[2x] = a[x * sx], e[2x + 1] = b[x * sx] for x < n, converted to T: two channels
 * interleaved (Note [Channel pairs]); b may be a. Unit strides go four columns at a time.
 * Returns whether every value was finite (Note [Non-finite values]): v - v is 0 for a finite v
 * and NaN otherwise, and a sum of them stays 0 only if all are 0. */
static inline bool DK__RC_SFN(dk__rc_zip)(T *restrict e, const S *restrict a, const S *restrict b,
                                          int64_t n, int64_t sx)
{
    int64_t x = 0;
    T z = (T)0;
#if DK__RC_S_IS_T
    if (sx == 1) {
        V4 vz = {0, 0, 0, 0};
        for (; x + 4 <= n; x += 4) {
            V4 va, vb;
            DK__RC_TFN(dk__rc_ld4)(&va, a + x);
            DK__RC_TFN(dk__rc_ld4)(&vb, b + x);
            const V4 lo = DK__RC_SHUF(va, vb, 0, 4, 1, 5), hi = DK__RC_SHUF(va, vb, 2, 6, 3, 7);
            DK__RC_TFN(dk__rc_st4)(e + 2 * x, &lo);
            DK__RC_TFN(dk__rc_st4)(e + 2 * x + 4, &hi);
            vz += (va - va) + (vb - vb);
        }
        z = (vz[0] + vz[1]) + (vz[2] + vz[3]);
    }
#endif
    for (; x < n; ++x) {
        const T va = LOAD(a + x * sx), vb = LOAD(b + x * sx);
        e[2 * x] = va;
        e[2 * x + 1] = vb;
        z += (va - va) + (vb - vb);
    }
    return z == 0;
}

/* The inverse of dk__rc_zip, converted to S: a[x * sx] = e[2x] and, unless b is NULL (an odd
 * last channel), b[x * sx] = e[2x + 1]; `stream`: with non-temporal stores where a and b can
 * both be aligned to 16 bytes. */
static inline void DK__RC_SFN(dk__rc_unzip)(S *restrict a, S *restrict b, const T *restrict e,
                                            int64_t n, int64_t sx, bool stream)
{
    int64_t x = 0;
#if DK__RC_S_IS_T
    if (sx == 1) {
        for (; stream && x < n && ((uintptr_t)(a + x) & 15) != 0; ++x) {
            a[x] = e[2 * x];
            if (b) b[x] = e[2 * x + 1];
        }
        stream = stream && (!b || ((uintptr_t)(b + x) & 15) == 0);
        for (; x + 4 <= n; x += 4) {
            V4 lo, hi;
            DK__RC_TFN(dk__rc_ld4)(&lo, e + 2 * x);
            DK__RC_TFN(dk__rc_ld4)(&hi, e + 2 * x + 4);
            const V4 va = DK__RC_SHUF(lo, hi, 0, 2, 4, 6), vb = DK__RC_SHUF(lo, hi, 1, 3, 5, 7);
            if (stream) {
                DK__RC_TFN(dk__rc_stream4)(a + x, &va);
                if (b) DK__RC_TFN(dk__rc_stream4)(b + x, &vb);
            } else {
                DK__RC_TFN(dk__rc_st4)(a + x, &va);
                if (b) DK__RC_TFN(dk__rc_st4)(b + x, &vb);
            }
        }
    }
#else
    (void)stream;
#endif
    for (; x < n; ++x) {
        STORE(a + x * sx, e[2 * x]);
        if (b) STORE(b + x * sx, e[2 * x + 1]);
    }
}

/*
 * Channels [c, c + 2 * np) of image `img` (rows r0..r1; channel stride is[1], row is[2], column
 * is[3]) into np pair buffers (buf + q * stride), interleaved (Note [Channel pairs]) and
 * converted to T; a channel index past C repeats C - 1. With channels as the minor dimension
 * (channels-last) all channels of a pixel are one cache line, so the copy goes pixel by pixel,
 * channels inside, prefetching a few pixels ahead; otherwise row by row.
 */
static bool DK__RC_SFN(dk__rc_pairs_in)(T *restrict buf, size_t stride, const S *img,
                                        const int64_t *is, int64_t c, int64_t np, int64_t C,
                                        int64_t r0, int64_t r1, int64_t W)
{
    const int64_t sc = is[1], sx = is[3];
    /* Rows that follow each other in memory are copied as one (NCHW: the whole band). */
    const bool one = sc >= sx && sx == 1 && is[2] == W;
    bool finite = true; /* Note [Non-finite values] */
    T z = (T)0;
    for (int64_t r = r0; r <= (one ? r0 : r1); ++r) {
        const S *row = img + r * is[2];
        T *restrict d = buf + (size_t)((r - r0) * 2 * W);
        if (sc < sx) {
            for (int64_t x = 0; x < W; ++x) {
                if (x + 8 < W) __builtin_prefetch(row + (x + 8) * sx + c * sc, 0, 3);
                for (int64_t q = 0; q < np; ++q) {
                    const int64_t ca = c + 2 * q, cb = ca + 1 < C ? ca + 1 : C - 1;
                    const T va = LOAD(row + x * sx + ca * sc), vb = LOAD(row + x * sx + cb * sc);
                    d[(size_t)q * stride + 2 * x] = va;
                    d[(size_t)q * stride + 2 * x + 1] = vb;
                    z += (va - va) + (vb - vb);
                }
            }
            continue;
        }
        for (int64_t q = 0; q < np; ++q) {
            const int64_t ca = c + 2 * q, cb = ca + 1 < C ? ca + 1 : C - 1;
            finite &= DK__RC_SFN(dk__rc_zip)(d + (size_t)q * stride, row + ca * sc, row + cb * sc,
                                             one ? (r1 - r0 + 1) * W : W, sx);
        }
    }
    return finite && z == 0;
}

/* The np pair buffers (all H rows) into channels [c, c + 2 * np) of image `img`, converted
 * to S; channels past C are dropped. Loop order as in dk__rc_pairs_in; for channels-last every
 * pixel's line is written in one go, the next ones prefetched for writing. */
static void DK__RC_SFN(dk__rc_pairs_out)(S *img, const int64_t *is, int64_t c, int64_t np,
                                         int64_t C, const T *restrict buf, size_t stride,
                                         int64_t H, int64_t W, bool stream)
{
    const int64_t sc = is[1], sx = is[3];
    const int64_t nc = C - c < 2 * np ? C - c : 2 * np; /* channels actually written */
    const bool one = sc >= sx && sx == 1 && is[2] == W;
    for (int64_t r = 0; r < (one ? 1 : H); ++r) {
        S *row = img + r * is[2];
        const T *restrict s = buf + (size_t)(r * 2 * W);
        if (sc < sx) {
            for (int64_t x = 0; x < W; ++x) {
                if (x + 8 < W) __builtin_prefetch(row + (x + 8) * sx + c * sc, 1, 3);
                for (int64_t i = 0; i < nc; ++i)
                    STORE(row + x * sx + (c + i) * sc, s[(size_t)(i / 2) * stride + 2 * x + i % 2]);
            }
            continue;
        }
        for (int64_t i = 0; i < nc; i += 2)
            DK__RC_SFN(dk__rc_unzip)(row + (c + i) * sc, i + 1 < nc ? row + (c + i + 1) * sc : NULL,
                                     s + (size_t)(i / 2) * stride, one ? H * W : W, sx, stream);
    }
}

/* A RoI's interleaved results (see dk__rc_forward_roi) into output blocks o0 and o1 (o1 NULL:
 * single channel), converted to S. */
static void DK__RC_SFN(dk__rc_store_bins)(S *o0, S *o1, const int64_t *os, const T *acc,
                                          int64_t PH, int64_t PW)
{
    if (os[3] == 1 && os[2] == PW) { /* one block */
        DK__RC_SFN(dk__rc_unzip)(o0, o1, acc, PH * PW, 1, false);
        return;
    }
    for (int64_t ph = 0; ph < PH; ++ph)
        DK__RC_SFN(dk__rc_unzip)(o0 + ph * os[2], o1 ? o1 + ph * os[2] : NULL, acc + 2 * ph * PW,
                                 PW, os[3], false);
}

/* grad_output blocks g0 and g1 (g1 == g0 for an unpaired channel) interleaved into acc. */
static bool DK__RC_SFN(dk__rc_load_bins)(T *restrict acc, const S *g0, const S *g1,
                                         const int64_t *gs, int64_t PH, int64_t PW)
{
    if (gs[3] == 1 && gs[2] == PW) return DK__RC_SFN(dk__rc_zip)(acc, g0, g1, PH * PW, 1);
    bool finite = true;
    for (int64_t ph = 0; ph < PH; ++ph)
        finite &= DK__RC_SFN(dk__rc_zip)(acc + 2 * ph * PW, g0 + ph * gs[2], g1 + ph * gs[2], PW,
                                         gs[3]);
    return finite;
}

/* Outputs of one RoI (axes ay, ax) on channels c and c + two of image `img`, per sample from the
 * shared math, interleaved into acc as dk__rc_forward_roi leaves them (Note [Non-finite
 * values]). */
static void DK__RC_SFN(dk__rc_forward_roi_exact)(const dk__rc_shape *sh, const S *img, int64_t c,
                                                 int64_t two, const AXIS *ay, const AXIS *ax,
                                                 T *acc)
{
    const int64_t *is = sh->in_s;
    for (int64_t i = 0; i < 2; ++i) {
        const S *plane = img + (c + i * two) * is[1];
        for (int64_t ph = 0; ph < sh->PH; ++ph)
            for (int64_t pw = 0; pw < sh->PW; ++pw)
                acc[2 * (ph * sh->PW + pw) + i] = DK__RC_SFN(dk_roi_align_forward_avg)(
                    plane, is[2], is[3], sh->H, sh->W, ay, ax, ph, pw);
    }
}

/* Pairs per iteration: 1 when columns are unit-stride (NCHW); when channels are the minor
 * dimension (channels-last), as many as one cache line of channels holds, so the copies in and
 * out use whole lines (Note [Channel pairs]), within 16 MB of buffers per thread. */
static int64_t DK__RC_SFN(dk__rc_group)(const dk__rc_shape *sh)
{
    if (sh->in_s[3] == 1 || sh->in_s[1] >= sh->in_s[3]) return 1;
    const int64_t per_pair = 2 * sh->H * sh->W * (int64_t)sizeof(T);
    int64_t g = 64 / (2 * (int64_t)sizeof(S));
    while (g > 1 && g * per_pair > ((int64_t)16 << 20)) g /= 2;
    const int64_t cp = (sh->C + 1) / 2;
    return g < cp ? g : cp;
}

/* Sizes of the average-pooling plane loop (Note [Channel pairs]): G pairs per iteration, NG
 * iterations per image; a thread's scratch is its RoI scratch, then G pair buffers. */
typedef struct {
    int64_t CP, G, NG;
    size_t roi_scratch, pair_buf, stage, per_thread; /* in elements of T */
} DK__RC_SFN(dk__rc_avg_plan);

static DK__RC_SFN(dk__rc_avg_plan) DK__RC_SFN(dk__rc_avg_plan_of)(const dk__rc_shape *sh,
                                                                   const dk__rc_groups *gr,
                                                                   const TABLES *tb,
                                                                   size_t stage_bytes)
{
    DK__RC_SFN(dk__rc_avg_plan) pl;
    pl.CP = (sh->C + 1) / 2;
    pl.G = DK__RC_SFN(dk__rc_group)(sh);
    pl.NG = (pl.CP + pl.G - 1) / pl.G;
    pl.roi_scratch = DK__RC_TFN(dk__rc_roi_scratch)(tb, sh);
    pl.pair_buf = dk__rc_round8((size_t)(2 * sh->H * sh->W));
    pl.stage = 0;
    if (stage_bytes) { /* whole iterations' results (Note [Faulting in the shadow]) */
        int64_t most = 0; /* RoIs of the busiest image */
        for (int64_t n = 0; n < sh->N; ++n)
            most = gr->beg[n + 1] - gr->beg[n] > most ? gr->beg[n + 1] - gr->beg[n] : most;
        const size_t one = (size_t)(pl.G * most * 2 * sh->PH * sh->PW); /* one iteration */
        const size_t room = stage_bytes / sizeof(T);
        pl.stage = one > 0 && one <= room ? room / one * one : 0;
    }
    pl.per_thread = pl.roi_scratch + (size_t)pl.G * pl.pair_buf + pl.stage;
    return pl;
}

/* Thread tid's part of the scratch of an average-pooling plane loop: its RoI scratch (into sc)
 * and, returned, its G pair buffers (then the stage, if any). */
static T *DK__RC_SFN(dk__rc_avg_scratch)(const dk__rc_job *jb, const DK__RC_SFN(dk__rc_avg_plan) *pl,
                                         int tid, SCRATCH *sc)
{
    T *base = (T *)(void *)(jb->scratch + (size_t)tid * pl->per_thread * sizeof(T));
    *sc = DK__RC_TFN(dk__rc_scratch_at)((const TABLES *)jb->tb, jb->cx->sh, base);
    return base + pl->roi_scratch;
}

/* Iteration `it` of the plane loop: image n, channel pairs [q0, q0 + nq), the image's RoIs
 * order[j0 .. j1). */
static inline dk__rc_it DK__RC_SFN(dk__rc_it_of)(const DK__RC_SFN(dk__rc_avg_plan) *pl,
                                                  const dk__rc_groups *gr, int64_t it)
{
    dk__rc_it p;
    p.n = it / pl->NG;
    p.q0 = (it % pl->NG) * pl->G;
    p.nq = pl->CP - p.q0 < pl->G ? pl->CP - p.q0 : pl->G;
    p.j0 = gr->beg[p.n];
    p.j1 = gr->beg[p.n + 1];
    return p;
}

/* Writes the results of the `count` staged iterations its[] (Note [Faulting in the shadow]),
 * laid out as the forward worker staged them, to the output. */
static void DK__RC_SFN(dk__rc_unstage)(dk__rc_job *jb, const DK__RC_SFN(dk__rc_avg_plan) *pl,
                                       const T *stage, const int64_t *its, int count)
{
    const dk__rc_shape *sh = jb->cx->sh;
    const dk__rc_groups *gr = jb->cx->gr;
    const int64_t *os = sh->out_s, PH = sh->PH, PW = sh->PW, C = sh->C;
    S *out = (S *)jb->dst;
    for (int i = 0; i < count; ++i) {
        const dk__rc_it p = DK__RC_SFN(dk__rc_it_of)(pl, gr, its[i]);
        for (int64_t q = 0; q < p.nq; ++q) {
            const int64_t c = 2 * (p.q0 + q), two = c + 1 < C;
            for (int64_t j = p.j0; j < p.j1; ++j) {
                S *o = out + gr->order[j] * os[0] + c * os[1];
                DK__RC_SFN(dk__rc_store_bins)(o, two ? o + os[1] : NULL, os, stage, PH, PW);
                stage += 2 * PH * PW;
            }
        }
    }
}

/* Forward, average pooling, any layout (Note [Channel pairs]): thread `tid`'s share of the
 * plane loop (Note [Serial calls]). */
static void DK__RC_SFN(dk__rc_forward_avg_worker)(dk__rc_job *jb, int tid)
{
    const dk__rc_shape *sh = jb->cx->sh;
    const dk__rc_groups *gr = jb->cx->gr;
    const TABLES *tb = (const TABLES *)jb->tb;
    const AXIS *ay = (const AXIS *)jb->ay, *ax = (const AXIS *)jb->ax;
    const S *in = (const S *)jb->src;
    S *out = (S *)jb->dst;
    const int64_t W = sh->W, PH = sh->PH, PW = sh->PW, C = sh->C;
    const int64_t *is = sh->in_s, *os = sh->out_s;
    const DK__RC_SFN(dk__rc_avg_plan) pl = *(const DK__RC_SFN(dk__rc_avg_plan) *)jb->plan;
    const bool blocks = os[3] == 1 && os[2] == PW; /* one (k, c) output is one block */
    SCRATCH sc;
    T *buf = DK__RC_SFN(dk__rc_avg_scratch)(jb, &pl, tid, &sc);
    const int64_t total = sh->N * pl.NG;
    /* Note [Read-ahead]: bands are one range per channel for whole-row NCHW inputs. */
    const bool ahead = pl.G == 1 && is[3] == 1 && is[2] == W && is[1] >= W;
    /* Note [Faulting in the shadow]: thread 0 faults the output in, the others stage. */
    if (pl.stage && tid == 0) {
        dk__rc_populate(jb->cx);
        atomic_store_explicit(&jb->filled, 1, memory_order_release);
    }
    T *const stage = pl.stage && tid != 0 ? buf + (size_t)pl.G * pl.pair_buf : NULL;
    int64_t *const its = stage ? jb->staged_its + (size_t)tid * DK__RC_STAGE_ITS : NULL;
    size_t staged = 0; /* elements of stage in use */
    int nits = 0;
    for (int64_t it = dk__rc_claim(jb), nx; it < total; it = nx) {
        nx = dk__rc_claim(jb);
        const dk__rc_it p = DK__RC_SFN(dk__rc_it_of)(&pl, gr, it);
        if (p.j0 == p.j1) continue;
        const size_t need = (size_t)(p.nq * (p.j1 - p.j0) * 2 * PH * PW);
        T *st = NULL; /* where this iteration's results go, if staged */
        if (stage) {
            const bool filled = atomic_load_explicit(&jb->filled, memory_order_acquire);
            if (nits && (filled || staged + need > pl.stage || nits == DK__RC_STAGE_ITS)) {
                DK__RC_SFN(dk__rc_unstage)(jb, &pl, stage, its, nits);
                staged = 0;
                nits = 0;
            }
            if (!filled && staged + need <= pl.stage) {
                st = stage + staged;
                staged += need;
                its[nits++] = it;
            }
        }
        const bool finite = DK__RC_SFN(dk__rc_pairs_in)(buf, pl.pair_buf, in + p.n * is[0], is,
                                                        2 * p.q0, p.nq, C, tb->rlo[p.n],
                                                        tb->rhi[p.n], W);
        dk__rc_ahead ra = {NULL, NULL, 0, 0, 0};
        if (ahead && nx < total) {
            const dk__rc_it p2 = DK__RC_SFN(dk__rc_it_of)(&pl, gr, nx); /* G == 1: one pair */
            if (p2.j0 != p2.j1) {
                const int64_t c2 = 2 * p2.q0, r0 = tb->rlo[p2.n];
                const S *band = in + p2.n * is[0] + c2 * is[1] + r0 * is[2];
                const size_t bytes = (size_t)((tb->rhi[p2.n] - r0 + 1) * W) * sizeof(S);
                dk__rc_ahead_init(&ra, band, c2 + 1 < C ? band + is[1] : NULL, bytes,
                                  p.nq * (p.j1 - p.j0));
            }
        }
        for (int64_t q = 0; q < p.nq; ++q) {
            const int64_t c = 2 * (p.q0 + q), two = c + 1 < C;
            for (int64_t j = p.j0; j < p.j1; ++j) {
                const int64_t k = gr->order[j];
                if (blocks && !st && j + 2 < p.j1) /* the store misses otherwise stall the loop */
                    dk__rc_prefetch_w(out + gr->order[j + 2] * os[0] + c * os[1],
                                      (size_t)((1 + two) * PH * PW) * sizeof(S));
                if (finite)
                    DK__RC_TFN(dk__rc_forward_roi)(tb, k, PH, PW, W, buf + (size_t)q * pl.pair_buf,
                                                   tb->rlo[p.n], &sc);
                else /* Note [Non-finite values] */
                    DK__RC_SFN(dk__rc_forward_roi_exact)(sh, in + p.n * is[0], c, two, &ay[k],
                                                         &ax[k], sc.acc);
                if (st) {
                    memcpy(st, sc.acc, (size_t)(2 * PH * PW) * sizeof(T));
                    st += 2 * PH * PW;
                } else {
                    S *o = out + k * os[0] + c * os[1];
                    DK__RC_SFN(dk__rc_store_bins)(o, two ? o + os[1] : NULL, os, sc.acc, PH, PW);
                }
                dk__rc_ahead_step(&ra);
            }
        }
    }
    if (nits) DK__RC_SFN(dk__rc_unstage)(jb, &pl, stage, its, nits);
}

/* Backward, average pooling, any layout (Notes [Channel pairs], [Deterministic backward]). */
static void DK__RC_SFN(dk__rc_backward_avg_worker)(dk__rc_job *jb, int tid)
{
    const dk__rc_shape *sh = jb->cx->sh;
    const dk__rc_groups *gr = jb->cx->gr;
    const TABLES *tb = (const TABLES *)jb->tb;
    const AXIS *ay = (const AXIS *)jb->ay, *ax = (const AXIS *)jb->ax;
    const S *gout = (const S *)jb->src;
    S *gin = (S *)jb->dst;
    const int64_t H = sh->H, W = sh->W, PH = sh->PH, PW = sh->PW, C = sh->C;
    const int64_t *is = sh->in_s, *os = sh->out_s;
    const DK__RC_SFN(dk__rc_avg_plan) pl = *(const DK__RC_SFN(dk__rc_avg_plan) *)jb->plan;
    const bool blocks = os[3] == 1 && os[2] == PW;
    SCRATCH sc;
    T *buf = DK__RC_SFN(dk__rc_avg_scratch)(jb, &pl, tid, &sc);
    for (int64_t it; (it = dk__rc_claim(jb)) < sh->N * pl.NG;) {
        const dk__rc_it p = DK__RC_SFN(dk__rc_it_of)(&pl, gr, it);
        for (int64_t q = 0; q < p.nq; ++q) {
            const int64_t c = 2 * (p.q0 + q), two = c + 1 < C;
            T *qbuf = buf + (size_t)q * pl.pair_buf;
            memset(qbuf, 0, (size_t)(2 * H * W) * sizeof(T));
            for (int64_t j = p.j0; j < p.j1; ++j) {
                const int64_t k = gr->order[j];
                if (blocks && j + 2 < p.j1)
                    dk__rc_prefetch_r(gout + gr->order[j + 2] * os[0] + c * os[1],
                                      (size_t)((1 + two) * PH * PW) * sizeof(S));
                const S *g = gout + k * os[0] + c * os[1];
                if (DK__RC_SFN(dk__rc_load_bins)(sc.acc, g, g + two * os[1], os, PH, PW))
                    DK__RC_TFN(dk__rc_backward_roi)(tb, k, PH, PW, W, qbuf, &sc);
                else /* Note [Non-finite values] */
                    DK__RC_TFN(dk__rc_backward_roi_exact)(&ay[k], &ax[k], PH, PW, H, W, qbuf, &sc);
            }
        }
        DK__RC_SFN(dk__rc_pairs_out)(gin + p.n * is[0], is, 2 * p.q0, p.nq, C, buf, pl.pair_buf,
                                     H, W, jb->cx->stream);
    }
    if (jb->cx->stream) dk__rc_sfence();
}

/* Runs an average-pooling worker over the plane loop, with its scratch from the arena. */
static dk_status DK__RC_SFN(dk__rc_avg)(const dk__rc_ctx *cx, const TABLES *tb, const AXIS *ay,
                                        const AXIS *ax, const S *src, S *dst,
                                        void (*worker)(dk__rc_job *, int))
{
    /* a stage per thread but the one faulting in: no more in all than the output itself */
    size_t stage_bytes = 0;
    if (cx->fill && cx->nthreads > 1 && !cx->sh->backward) {
        stage_bytes = cx->fill_bytes / (size_t)(cx->nthreads - 1);
        stage_bytes = stage_bytes < DK__RC_STAGE_BYTES ? stage_bytes : DK__RC_STAGE_BYTES;
    }
    const DK__RC_SFN(dk__rc_avg_plan) pl =
        DK__RC_SFN(dk__rc_avg_plan_of)(cx->sh, cx->gr, tb, stage_bytes);
    dk__rc_job jb = {.cx = cx, .tb = tb, .plan = &pl, .ay = ay, .ax = ax, .src = src, .dst = dst};
    jb.scratch = (char *)dk__rc_take(cx->ar, (size_t)cx->nthreads * pl.per_thread * sizeof(T));
    if (pl.stage)
        jb.staged_its = (int64_t *)dk__rc_take(cx->ar, (size_t)cx->nthreads * DK__RC_STAGE_ITS *
                                                           sizeof *jb.staged_its);
    if (!jb.scratch || (pl.stage && !jb.staged_its))
        return dk_error(DK_ENOMEM, "%s: out of memory for scratch",
                        cx->sh->backward ? "roi_align_backward" : "roi_align_forward");
    dk__rc_run(worker, &jb);
    return DK_OK;
}

/* Samples per RoI beyond which max pooling evaluates per element instead of from tables. */
#define DK__RC_MAX_SAMPLE_TABLE (1 << 20)

/* Bytes of one thread's sample tables in forward max pooling (dk__rc_forward_max_worker). */
static size_t DK__RC_SFN(dk__rc_max_tab_bytes)(const dk__rc_shape *sh, const AXIS *ay,
                                               const AXIS *ax)
{
    int64_t most = 1;
    for (int64_t k = 0; k < sh->K; ++k) {
        /* below 2^63: PH, PW and an explicit grid are below 2^31 (ops/roi_align.c), and an
         * adaptive grid times PH (PW) is at most about 4 (H + 1) (kernels/roi_align.h) */
        const int64_t n = sh->PH * ay[k].grid + sh->PW * ax[k].grid;
        if (n <= DK__RC_MAX_SAMPLE_TABLE && n > most) most = n;
    }
    return dk__rc_round8((size_t)most * sizeof(SAMPLE));
}

/* Forward, max pooling: per element; planes outside for cache reuse, each plane copied as T
 * into a per-thread buffer (as in Note [Channel pairs], one channel) and each RoI's samples
 * tabulated per plane; per element from the shared math for absurd sampling ratios. */
static void DK__RC_SFN(dk__rc_forward_max_worker)(dk__rc_job *jb, int tid)
{
    const dk__rc_shape *sh = jb->cx->sh;
    const dk__rc_groups *gr = jb->cx->gr;
    const AXIS *ay = (const AXIS *)jb->ay, *ax = (const AXIS *)jb->ax;
    const S *in = (const S *)jb->src;
    S *out = (S *)jb->dst;
    T *amy = (T *)jb->amy, *amx = (T *)jb->amx;
    const int64_t *is = sh->in_s, *os = sh->out_s, *ys = sh->amy_s, *xs = sh->amx_s;
    const int64_t H = sh->H, W = sh->W, PH = sh->PH, PW = sh->PW;
    char *base = jb->scratch + (size_t)tid * jb->per_thread;
    SAMPLE *ysm = (SAMPLE *)(void *)base;
    T *buf = (T *)(void *)(base + DK__RC_SFN(dk__rc_max_tab_bytes)(sh, ay, ax));
    for (int64_t nc; (nc = dk__rc_claim(jb)) < sh->N * sh->C;) {
        const int64_t n = nc / sh->C, c = nc % sh->C;
        const int64_t j0 = gr->beg[n], j1 = gr->beg[n + 1];
        if (j0 == j1) continue;
        const S *plane = in + n * is[0] + c * is[1];
        for (int64_t r = 0; r < H; ++r)
            for (int64_t x = 0; x < W; ++x) buf[r * W + x] = LOAD(plane + r * is[2] + x * is[3]);
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t k = gr->order[j];
            const int64_t gh = ay[k].grid, gw = ax[k].grid;
            const bool tab = PH * gh + PW * gw <= DK__RC_MAX_SAMPLE_TABLE;
            SAMPLE *xsm = ysm + PH * gh;
            if (tab) {
                DK__RC_TFN(dk__rc_axis_samples)(ysm, &ay[k], PH, H);
                DK__RC_TFN(dk__rc_axis_samples)(xsm, &ax[k], PW, W);
            }
            for (int64_t ph = 0; ph < PH; ++ph)
                for (int64_t pw = 0; pw < PW; ++pw) {
                    T my, mx;
                    const T v = tab ? DK__RC_TFN(dk__rc_max_bin)(buf, W, ysm + ph * gh, gh,
                                                                 xsm + pw * gw, gw, &my, &mx)
                                    : DK__RC_TFN(dk_roi_align_forward_max)(
                                          buf, W, 1, H, W, &ay[k], &ax[k], ph, pw, &my, &mx);
                    STORE(out + k * os[0] + c * os[1] + ph * os[2] + pw * os[3], v);
                    amy[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]] = my;
                    amx[k * xs[0] + c * xs[1] + ph * xs[2] + pw * xs[3]] = mx;
                }
        }
    }
}

static dk_status DK__RC_SFN(dk__rc_forward_max)(const dk__rc_ctx *cx, const AXIS *ay,
                                                const AXIS *ax, const S *in, S *out, T *amy,
                                                T *amx)
{
    const dk__rc_shape *sh = cx->sh;
    dk__rc_job jb = {.cx = cx, .ay = ay, .ax = ax, .src = in, .dst = out, .amy = amy, .amx = amx};
    jb.per_thread = DK__RC_SFN(dk__rc_max_tab_bytes)(sh, ay, ax) +
                    dk__rc_round8((size_t)(sh->H * sh->W) * sizeof(T));
    jb.scratch = (char *)dk__rc_take(cx->ar, (size_t)cx->nthreads * jb.per_thread);
    if (!jb.scratch) return dk_error(DK_ENOMEM, "roi_align_forward: out of memory for scratch");
    dk__rc_run(DK__RC_SFN(dk__rc_forward_max_worker), &jb);
    return DK_OK;
}

/* Backward, max pooling: the gradient goes bilinearly to each bin's argmax sample. Each plane
 * is owned by one iteration (Note [Deterministic backward]). */
static void DK__RC_SFN(dk__rc_backward_max_worker)(dk__rc_job *jb, int tid)
{
    const dk__rc_shape *sh = jb->cx->sh;
    const dk__rc_groups *gr = jb->cx->gr;
    const S *gout = (const S *)jb->src;
    S *gin = (S *)jb->dst;
    const T *amy = (const T *)jb->amy_in, *amx = (const T *)jb->amx_in;
    const int64_t H = sh->H, W = sh->W;
    const int64_t *is = sh->in_s, *os = sh->out_s, *ys = sh->amy_s, *xs = sh->amx_s;
    T *buf = (T *)(void *)(jb->scratch + (size_t)tid * jb->per_thread);
    for (int64_t nc; (nc = dk__rc_claim(jb)) < sh->N * sh->C;) {
        const int64_t n = nc / sh->C, c = nc % sh->C;
        memset(buf, 0, (size_t)(H * W) * sizeof(T));
        for (int64_t j = gr->beg[n]; j < gr->beg[n + 1]; ++j) {
            const int64_t k = gr->order[j];
            for (int64_t ph = 0; ph < sh->PH; ++ph)
                for (int64_t pw = 0; pw < sh->PW; ++pw) {
                    const T y = amy[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]];
                    const T x = amx[k * xs[0] + c * xs[1] + ph * xs[2] + pw * xs[3]];
                    DK__RC_TFN(dk_roi_align_bilinear) b;
                    if (y == (T)-1 || !DK__RC_TFN(dk_roi_align_bilinear_init)(y, x, H, W, &b))
                        continue;
                    const T gv = LOAD(gout + k * os[0] + c * os[1] + ph * os[2] + pw * os[3]);
                    buf[b.y_low * W + b.x_low] += gv * b.w1;
                    buf[b.y_low * W + b.x_high] += gv * b.w2;
                    buf[b.y_high * W + b.x_low] += gv * b.w3;
                    buf[b.y_high * W + b.x_high] += gv * b.w4;
                }
        }
        S *dst = gin + n * is[0] + c * is[1];
        for (int64_t r = 0; r < H; ++r)
            for (int64_t x = 0; x < W; ++x) STORE(dst + r * is[2] + x * is[3], buf[r * W + x]);
    }
}

static dk_status DK__RC_SFN(dk__rc_backward_max)(const dk__rc_ctx *cx, const S *gout,
                                                 const T *amy, const T *amx, S *gin)
{
    const dk__rc_shape *sh = cx->sh;
    dk__rc_job jb = {.cx = cx, .src = gout, .dst = gin, .amy_in = amy, .amx_in = amx};
    jb.per_thread = dk__rc_round8((size_t)(sh->H * sh->W) * sizeof(T));
    jb.scratch = (char *)dk__rc_take(cx->ar, (size_t)cx->nthreads * jb.per_thread);
    if (!jb.scratch) return dk_error(DK_ENOMEM, "roi_align_backward: out of memory for scratch");
    dk__rc_run(DK__RC_SFN(dk__rc_backward_max_worker), &jb);
    return DK_OK;
}

/* Outputs of RoIs whose batch index is unusable: 0, argmax -1 (see dk__rc_read_rois). */
static void DK__RC_SFN(dk__rc_forward_orphans)(const dk__rc_ctx *cx, S *out, T *amy, T *amx)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t *os = sh->out_s, *ys = sh->amy_s, *xs = sh->amx_s;
    for (int64_t j = 0; j < cx->gr->norphans; ++j) {
        const int64_t k = cx->gr->orphans[j];
        for (int64_t c = 0; c < sh->C; ++c)
            for (int64_t ph = 0; ph < sh->PH; ++ph)
                for (int64_t pw = 0; pw < sh->PW; ++pw) {
                    STORE(out + k * os[0] + c * os[1] + ph * os[2] + pw * os[3], (T)0);
                    if (amy) {
                        amy[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]] = (T)-1;
                        amx[k * xs[0] + c * xs[1] + ph * xs[2] + pw * xs[3]] = (T)-1;
                    }
                }
    }
}

/* RoI geometry and groups, in the arena. */
static dk_status DK__RC_SFN(dk__rc_prepare)(dk__rc_ctx *cx, const dk_tensor *rois, AXIS **ay,
                                            AXIS **ax)
{
    const size_t K = (size_t)cx->sh->K;
    *ay = (AXIS *)dk__rc_take(cx->ar, K * sizeof **ay);
    *ax = (AXIS *)dk__rc_take(cx->ar, K * sizeof **ax);
    int64_t *batch = (int64_t *)dk__rc_take(cx->ar, K * sizeof *batch);
    if (!*ay || !*ax || !batch) return dk_error(DK_ENOMEM, "roi_align: out of memory");
    DK__RC_SFN(dk__rc_read_rois)(rois, cx->sh, batch, *ay, *ax);
    return dk__rc_groups_build(cx, batch);
}

static dk_status DK__RC_SFN(dk__rc_forward)(dk__rc_ctx *cx, const dk_tensor *input,
                                            const dk_tensor *rois, dk_tensor *output,
                                            dk_tensor *argmax_y, dk_tensor *argmax_x)
{
    AXIS *ay, *ax;
    dk_status st = DK__RC_SFN(dk__rc_prepare)(cx, rois, &ay, &ax);
    if (st != DK_OK) return st;
    const S *in = (const S *)dk_tensor_data(input);
    S *out = (S *)dk_tensor_data(output);
    T *amy = argmax_y ? (T *)dk_tensor_data(argmax_y) : NULL;
    T *amx = argmax_x ? (T *)dk_tensor_data(argmax_x) : NULL;
    const dk__rc_shape *sh = cx->sh;
    const int64_t bins[4] = {sh->K, sh->C, sh->PH, sh->PW};
    dk__rc_large_output(cx, out, bins, sh->out_s, sizeof(S));
    if (amy) dk__rc_large_output(NULL, amy, bins, sh->amy_s, sizeof(T));
    if (amx) dk__rc_large_output(NULL, amx, bins, sh->amx_s, sizeof(T));
    if (sh->max_mode) {
        st = DK__RC_SFN(dk__rc_forward_max)(cx, ay, ax, in, out, amy, amx);
    } else {
        TABLES tb;
        st = DK__RC_TFN(dk__rc_tables_build)(cx->ar, &tb, sh, cx->gr, ay, ax);
        if (st == DK_OK)
            st = DK__RC_SFN(dk__rc_avg)(cx, &tb, ay, ax, in, out,
                                        DK__RC_SFN(dk__rc_forward_avg_worker));
    }
    if (st == DK_OK) DK__RC_SFN(dk__rc_forward_orphans)(cx, out, amy, amx);
    return st;
}

static dk_status DK__RC_SFN(dk__rc_backward)(dk__rc_ctx *cx, const dk_tensor *grad_output,
                                             const dk_tensor *rois, const dk_tensor *argmax_y,
                                             const dk_tensor *argmax_x, dk_tensor *grad_input)
{
    AXIS *ay, *ax;
    dk_status st = DK__RC_SFN(dk__rc_prepare)(cx, rois, &ay, &ax);
    if (st != DK_OK) return st;
    const S *gout = (const S *)dk_tensor_data(grad_output);
    S *gin = (S *)dk_tensor_data(grad_input);
    const dk__rc_shape *sh = cx->sh;
    const int64_t img[4] = {sh->N, sh->C, sh->H, sh->W};
    cx->stream = dk__rc_large_output(NULL, gin, img, sh->in_s, sizeof(S));
    if (sh->max_mode) {
        st = DK__RC_SFN(dk__rc_backward_max)(cx, gout, (const T *)dk_tensor_data(argmax_y),
                                             (const T *)dk_tensor_data(argmax_x), gin);
    } else {
        TABLES tb;
        st = DK__RC_TFN(dk__rc_tables_build)(cx->ar, &tb, sh, cx->gr, ay, ax);
        if (st == DK_OK)
            st = DK__RC_SFN(dk__rc_avg)(cx, &tb, ay, ax, gout, gin,
                                        DK__RC_SFN(dk__rc_backward_avg_worker));
    }
    return st;
}

#undef T
#undef S
#undef V4
#undef AXIS
#undef PAIR
#undef TABLES
#undef SCRATCH
#undef SAMPLE
#undef LOAD
#undef STORE

#else /* !DK__RC_TEMPLATE */
/* ========================================================================================== */

#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "dk_parallel.h"
#include "dk_registry.h"
#include "kernels/roi_align.h"
#include "roi_align.h" /* ops/roi_align.h: the op's declaration */

/* Evaluation order: -1 picks per RoI by cost (Note [Separable weight tables]); 0 or 1 force
 * sparse or dense everywhere (tests build it all three ways to cover both loops). */
#ifndef DK__RC_DENSE
#define DK__RC_DENSE -1
#endif
/* Cost model of dk__rc_choose: the bookkeeping of one (bin row, pair) of the sparse order, and
 * a scale in percent on the dense order's estimate, per direction; fitted by measurement. */
#ifndef DK__RC_FWD_PAIR
#define DK__RC_FWD_PAIR 8
#endif
#ifndef DK__RC_FWD_DENSE
#define DK__RC_FWD_DENSE 175
#endif
#ifndef DK__RC_BWD_PAIR
#define DK__RC_BWD_PAIR 8
#endif
#ifndef DK__RC_BWD_DENSE
#define DK__RC_BWD_DENSE 100
#endif
/* Size of one axis' tap tables, by the per-bin bound, above which they are counted before
 * being filled (dk__rc_axis_tables); 0 always counts (the harness builds it both ways). */
#ifndef DK__RC_TAPS_BOUND_BYTES
#define DK__RC_TAPS_BOUND_BYTES ((size_t)8 << 20)
#endif

/* Sizes, options and element strides of one call. in_s is input (forward) or grad_input
 * (backward), [n, c, h, w]; out_s is output or grad_output, [k, c, ph, pw]. */
typedef struct {
    int64_t N, C, H, W, K, PH, PW;
    int64_t sampling_ratio;
    double spatial_scale;
    bool aligned;
    bool max_mode;
    bool backward;
    int64_t in_s[4], out_s[4], amy_s[4], amx_s[4];
} dk__rc_shape;

/* The RoIs of each image in index order: order[beg[n] .. beg[n + 1]). */
typedef struct {
    int64_t *beg;     /* N + 1 */
    int64_t *order;   /* K */
    int64_t *orphans; /* RoIs with an unusable batch index */
    int64_t norphans;
} dk__rc_groups;

/*
 * Note [Scratch arena]
 * Everything a call needs besides its tensors (RoI geometry, groups, weight tables, per-thread
 * buffers) is carved from one bump allocator and released at once when the call returns. Its
 * first block is a buffer on the caller's stack, so a small call makes no heap allocation at
 * all (a dozen malloc/free pairs were a third of the instructions of a tiny call); when a part
 * does not fit, a heap block of at least four times the previous one is chained, so a large
 * call makes a few allocations. Parts are 64-byte aligned: a cache line (threads' parts never
 * share one) and enough for any V4. Under AddressSanitizer every part is a heap block of its
 * own instead, so that its redzones still fence each part.
 */
#if defined(__SANITIZE_ADDRESS__)
#define DK__RC_ARENA_EXACT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DK__RC_ARENA_EXACT 1
#endif
#endif
#ifndef DK__RC_ARENA_EXACT
#define DK__RC_ARENA_EXACT 0
#endif
#define DK__RC_STACK_BYTES (DK__RC_ARENA_EXACT ? 64 : 16384)

typedef struct {
    char *p, *end;  /* free room of the current block */
    size_t block;   /* size of the current block */
    void *heap;     /* newest heap block; each starts with a pointer to the one before */
} dk__rc_arena;

/* dk__rc_take when the current block is full: chains a new one. */
static void *dk__rc_take_slow(dk__rc_arena *a, size_t n)
{
    size_t sz = a->block > SIZE_MAX / 4 ? SIZE_MAX : 4 * a->block;
    if (DK__RC_ARENA_EXACT || sz - 64 < n) sz = n + 64;
    if (sz < n) return NULL; /* overflow */
    char *b = (char *)aligned_alloc(64, sz);
    if (!b) return NULL;
    memcpy(b, &a->heap, sizeof a->heap);
    a->heap = b;
    a->block = sz;
    a->p = b + 64 + n;
    a->end = b + sz;
    return b + 64;
}

static inline void *dk__rc_take(dk__rc_arena *a, size_t bytes)
{
    const size_t n = ((bytes ? bytes : 1) + 63) & ~(size_t)63; /* never NULL for 0 bytes */
    if (n < bytes) return NULL;                                  /* overflow */
    if (n > (size_t)(a->end - a->p)) return dk__rc_take_slow(a, n);
    char *r = a->p;
    a->p += n;
    return r;
}

static void dk__rc_arena_free(dk__rc_arena *a)
{
    while (a->heap) {
        void *b = a->heap;
        memcpy(&a->heap, b, sizeof a->heap);
        free(b);
    }
}

typedef struct {
    const dk__rc_shape *sh;
    dk__rc_groups *gr;
    dk__rc_arena *ar;
    int nthreads;
    bool stream; /* write grad_input with non-temporal stores (Note [Streaming grad_input]) */
    char *fill; /* whole huge pages of a fresh forward output (Note [Faulting in the shadow]) */
    size_t fill_bytes;
} dk__rc_ctx;

/*
 * Note [Huge pages for large outputs]
 * A caller that allocates its outputs per call (torch.empty, as torchvision does) hands over
 * fresh pages, and the first write to each 4 KiB page is a page fault: ~12,000 faults for a
 * 51 MB forward output, ~27,000 for a 111 MB grad_input, 20 to 40 ms per call here, as much
 * as the computation itself. With transparent huge pages in "madvise" mode (Debian's default)
 * a range marked MADV_HUGEPAGE faults in 2 MiB at a time instead (51 MB output: 20 ms of faults
 * down to 3 ms). So before writing a large output the kernel marks the 2 MiB aligned part of
 * its byte range; PyTorch's allocator does the same for its own blocks under
 * THP_MEM_ALLOC_ENABLE. It is only a hint: pages already touched stay as they are, memory that
 * is not anonymous (a file mapping) makes it fail, and either way it is ignored. Small outputs
 * are left alone: their faults are few and the system call would cost more than it saves.
 *
 * The order of the writes does not matter with huge pages: the forward output's 51 MB are 25
 * of them, so the plane loop's scattered blocks (every RoI of an image, per channel pair) cost
 * no more TLB misses or faults than a contiguous sweep would; what remains is the kernel
 * clearing the pages (3 to 4 ms per call on one thread). Having all threads fault in disjoint
 * 2 MiB regions before the plane loop was tried twice: no faster, and once runs of calls got 3x
 * slower on this VM. What helps is overlapping the clearing with computation (Note [Faulting in
 * the shadow]).
 */
#ifndef DK__RC_HUGE_MIN
#define DK__RC_HUGE_MIN ((uint64_t)8 << 20)
#endif
#define DK__RC_HUGE ((uintptr_t)2 << 20) /* the PMD size of x86-64 and 4 KiB-page arm64 */

/* Whether the page-aligned range [p, p + bytes) looks faulted in already: 8 pages spread over
 * it are resident (one mincore call each; an error answers yes, so that nothing is done). */
static bool dk__rc_resident(void *p, size_t bytes)
{
#if defined(__linux__)
    const size_t page = 4096;
    for (int i = 0; i < 8; ++i) {
        unsigned char v = 1;
        char *at = (char *)p + (bytes / page * (size_t)i / 8) * page;
        if (mincore(at, page, &v) == 0 && !(v & 1)) return false;
    }
#else
    (void)p, (void)bytes;
#endif
    return true;
}

/* An output of shape n[4], strides s[4] (elements of `elem` bytes) at data, about to be
 * written: if it is large, hints huge pages for it and returns true; if it is not faulted in
 * yet, records its huge pages in cx->fill (Note [Faulting in the shadow]). */
static bool dk__rc_large_output(dk__rc_ctx *cx, void *data, const int64_t *n, const int64_t *s,
                                size_t elem)
{
    int64_t lo = 0, hi = 0; /* element offsets of the first and last element */
    for (int d = 0; d < 4; ++d) {
        if (n[d] <= 0) return false;
        const int64_t e = (n[d] - 1) * s[d];
        if (e < 0) lo += e;
        else hi += e;
    }
    const uint64_t bytes = (uint64_t)(hi - lo + 1) * elem;
    if (bytes < DK__RC_HUGE_MIN) return false;
    char *first = (char *)data + lo * (int64_t)elem;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t a = ((uintptr_t)first + DK__RC_HUGE - 1) & ~(DK__RC_HUGE - 1);
    const uintptr_t b = ((uintptr_t)first + bytes) & ~(DK__RC_HUGE - 1);
    /* The hint fails on memory that is not anonymous (a file mapping, e.g. numpy.memmap);
     * then nothing is populated either: faulting in a file's pages could dirty them. */
    const bool anon = b > a && madvise((void *)a, b - a, MADV_HUGEPAGE) == 0;
    if (anon && cx && !dk__rc_resident((void *)a, b - a)) {
        cx->fill = (char *)a;
        cx->fill_bytes = b - a;
    }
#else
    (void)cx, (void)first;
#endif
    return true;
}

/*
 * Note [Faulting in the shadow]
 * A fresh forward output (torch.empty per call) is faulted in on first touch, and the OS clears
 * each page: for the benchmark's 51 MB, 3 ms on one thread and, with two, 4 ms, because every
 * iteration of the plane loop writes a block for every RoI of its image, so both threads start
 * by faulting the same pages, stalled, at the same time. Instead, with several threads, thread
 * 0 first faults the whole output in at once (MADV_POPULATE_WRITE: no byte changes), while the
 * other threads run their first iterations into a per-thread stage (up to DK__RC_STAGE_BYTES
 * and DK__RC_STAGE_ITS iterations) and write it out once the pages are there, or the stage is
 * full. The clearing then overlaps computation: with two threads the cost of a fresh output
 * went from 3.7-4.7 ms to 1.5-2.7 ms a call. Forward results do not depend on when or by which
 * thread they are written. An output already faulted in (dk__rc_resident: 8 sample pages) is
 * left alone, since populating it again would only cost time; on kernels without
 * MADV_POPULATE_WRITE the madvise fails, the stage is written out at once, and the output
 * faults in as before.
 */
#ifndef DK__RC_STAGE_BYTES
#define DK__RC_STAGE_BYTES ((size_t)8 << 20)
#endif
#define DK__RC_STAGE_ITS 64

static void dk__rc_populate(const dk__rc_ctx *cx)
{
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    (void)madvise(cx->fill, cx->fill_bytes, MADV_POPULATE_WRITE);
#else
    (void)cx;
#endif
}

/*
 * Note [Streaming grad_input]
 * Backward writes each plane of grad_input once, whole, from its accumulation buffer; a large
 * grad_input (the same threshold as huge pages: far beyond the caches) will not be read again
 * before it has left them. Plain stores first read every line they write into the cache (111 MB
 * of useless reads for the benchmark's grad_input, whose writing is 5 of the 41 ms on one
 * thread); non-temporal stores write the lines straight to memory: 2 ms less on one thread,
 * 1 ms on two. After its last one each thread issues a store fence, so that the values are
 * visible to whoever joins it.
 */
static inline void dk__rc_sfence(void)
{
#if defined(__SSE2__)
    __builtin_ia32_sfence();
#endif
}

/*
 * Note [Serial calls]
 * The plane loop of each driver is a worker function, dk__rc_*_worker(job, tid), that claims
 * iterations from a shared counter (the same schedule as OpenMP's dynamic, 1) until none are
 * left. dk__rc_run runs it in an OpenMP region when the call uses several threads, and calls it
 * directly otherwise: entering even a one-thread region cost about 1,100 instructions in
 * libgomp, a quarter of what a tiny call now executes in all. Which thread runs an iteration
 * never changes its result (Note [Deterministic backward]), so both ways give the same bits.
 */
typedef struct dk__rc_job {
    const dk__rc_ctx *cx;
    const void *tb;             /* TABLES (average pooling) */
    const void *plan;           /* and the sizes of its plane loop (dk__rc_avg_plan) */
    const void *ay, *ax;        /* per-RoI AXIS arrays */
    const void *src;            /* input (forward) or grad_output (backward) */
    void *dst;                  /* output (forward) or grad_input (backward) */
    void *amy, *amx;            /* argmax_y / argmax_x written by forward max pooling */
    const void *amy_in, *amx_in; /* and read by backward */
    char *scratch;              /* thread t's part: scratch + t * per_thread bytes (or T) */
    size_t per_thread;
    atomic_llong next;          /* the next unclaimed iteration */
    atomic_int filled;          /* the output is faulted in (Note [Faulting in the shadow]) */
    int64_t *staged_its;        /* per thread, DK__RC_STAGE_ITS staged iterations */
} dk__rc_job;

/* One iteration of an average-pooling plane loop (dk__rc_it_of). */
typedef struct {
    int64_t n, q0, nq, j0, j1;
} dk__rc_it;

static inline int64_t dk__rc_claim(dk__rc_job *jb)
{
    return (int64_t)atomic_fetch_add_explicit(&jb->next, 1, memory_order_relaxed);
}

static void dk__rc_run(void (*worker)(dk__rc_job *, int), dk__rc_job *jb)
{
    const int nt = jb->cx->nthreads;
    atomic_init(&jb->next, 0);
    atomic_init(&jb->filled, 0);
    if (nt <= 1) {
        worker(jb, 0);
        return;
    }
#pragma omp parallel num_threads(nt)
    worker(jb, omp_get_thread_num());
}

static size_t dk__rc_round8(size_t n) { return (n + 7) & ~(size_t)7; }

/*
 * Note [Read-ahead]
 * Copying a channel pair's band in (dk__rc_pairs_in) reads 2 x 217 KB from memory for the
 * benchmark's planes, and one core of the machine this was tuned on already draws all the
 * memory bandwidth there is (37 GB/s read by one thread, 41 GB/s by two): a thread waiting on
 * its copy is waiting on the bus, and so is every other thread. So each thread claims its next
 * iteration one ahead and, while it serves the RoIs of the current pair from cache, prefetches
 * the next pair's bands a few lines per RoI: the reads then overlap computation instead of
 * queueing behind the other thread's, and the copy finds its lines in cache. Which thread runs
 * which iteration still does not change any result.
 */
typedef struct {
    const char *a, *b; /* the next bands of channels c and c + 1 (b NULL: none) */
    size_t bytes;      /* bytes per band */
    size_t done;       /* bytes prefetched so far, per band */
    size_t step;       /* bytes per dk__rc_ahead_step */
} dk__rc_ahead;

/* Spreads bands a and b (each `bytes` long) over `steps` calls of dk__rc_ahead_step. */
static void dk__rc_ahead_init(dk__rc_ahead *ra, const void *a, const void *b, size_t bytes,
                              int64_t steps)
{
    ra->a = (const char *)a;
    ra->b = (const char *)b;
    ra->bytes = bytes;
    ra->done = 0;
    /* whole lines, finishing a little early: the last RoIs' results still have to be stored */
    const size_t per = bytes / (size_t)(steps > 1 ? steps - steps / 8 : 1) + 64;
    ra->step = (per + 63) & ~(size_t)63;
}

static inline void dk__rc_ahead_step(dk__rc_ahead *ra)
{
    if (ra->done >= ra->bytes) return;
    const size_t end = ra->done + ra->step < ra->bytes ? ra->done + ra->step : ra->bytes;
    for (size_t o = ra->done; o < end; o += 64) {
        __builtin_prefetch(ra->a + o, 0, 2);
        if (ra->b) __builtin_prefetch(ra->b + o, 0, 2);
    }
    ra->done = end;
}

static void dk__rc_prefetch_w(const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 1, 3);
}

static void dk__rc_prefetch_r(const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, 3);
}

/* Lane shuffle of two generic 4-lane vectors (indices 4..7 pick from b). */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define DK__RC_SHUF(a, b, i, j, k, l) __builtin_shufflevector(a, b, i, j, k, l)
#else
#define DK__RC_SHUF(a, b, i, j, k, l)                                                             \
    __extension__({                                                                               \
        __typeof__(a) dk__x = (a), dk__y = (b), dk__r;                                            \
        dk__r[0] = (i) < 4 ? dk__x[(i) & 3] : dk__y[(i) & 3];                                      \
        dk__r[1] = (j) < 4 ? dk__x[(j) & 3] : dk__y[(j) & 3];                                      \
        dk__r[2] = (k) < 4 ? dk__x[(k) & 3] : dk__y[(k) & 3];                                      \
        dk__r[3] = (l) < 4 ? dk__x[(l) & 3] : dk__y[(l) & 3];                                      \
        dk__r;                                                                                    \
    })
#endif

/* Counting sort of the RoIs by batch index, stable, so each image's RoIs stay in index order
 * (in the arena). */
static dk_status dk__rc_groups_build(dk__rc_ctx *cx, const int64_t *batch)
{
    const int64_t N = cx->sh->N, K = cx->sh->K;
    dk__rc_groups *gr = cx->gr;
    gr->beg = (int64_t *)dk__rc_take(cx->ar, ((size_t)N + 2) * sizeof *gr->beg);
    gr->order = (int64_t *)dk__rc_take(cx->ar, (size_t)K * sizeof *gr->order);
    gr->orphans = (int64_t *)dk__rc_take(cx->ar, (size_t)K * sizeof *gr->orphans);
    if (!gr->beg || !gr->order || !gr->orphans)
        return dk_error(DK_ENOMEM, "roi_align: out of memory");
    memset(gr->beg, 0, ((size_t)N + 2) * sizeof *gr->beg);
    gr->norphans = 0;
    for (int64_t k = 0; k < K; ++k) {
        if (batch[k] >= 0) gr->beg[batch[k] + 2]++;
        else gr->orphans[gr->norphans++] = k;
    }
    for (int64_t n = 0; n < N; ++n) gr->beg[n + 2] += gr->beg[n + 1];
    /* beg[n + 1] is now the start of image n; filling advances it to the end of image n,
     * which leaves beg[n] = start of image n. */
    for (int64_t k = 0; k < K; ++k)
        if (batch[k] >= 0) gr->order[gr->beg[batch[k] + 1]++] = k;
    return DK_OK;
}

/* The first n strides of t (compact when it has none), or zeros for no tensor; inline, since
 * a tiny call reads 18 of them. */
static void dk__rc_strides(const dk_tensor *t, int64_t *s, int n)
{
    if (!t) {
        for (int d = 0; d < n; ++d) s[d] = 0;
    } else if (t->strides) {
        for (int d = 0; d < n; ++d) s[d] = t->strides[d];
    } else {
        /* unsigned: the product of an empty tensor's other sizes may not fit, and is not used */
        uint64_t e = 1;
        for (int d = n - 1; d >= 0; --d) {
            s[d] = (int64_t)e;
            e *= (uint64_t)t->shape[d];
        }
    }
}

/* Instantiations (see the template at the top of this file). */
#define DK__RC_CAT_I(a, b) a##b
#define DK__RC_CAT(a, b) DK__RC_CAT_I(a, b)
#define DK__RC_TFN(name) DK__RC_CAT(name, DK__RC_TSUFFIX)
#define DK__RC_SFN(name) DK__RC_CAT(name, DK__RC_SSUFFIX)
#define DK__RC_TEMPLATE

#define DK__RC_T float
#define DK__RC_TSUFFIX _f32
#define DK__RC_T_BYTES 4
#define DK__RC_S float
#define DK__RC_SSUFFIX _f32
#define DK__RC_S_IS_T 1 /* storage is the compute type: vector copies */
#define DK__RC_EMIT_T 1
#include "roi_align_cpu.c"
#undef DK__RC_S
#undef DK__RC_SSUFFIX
#undef DK__RC_S_IS_T
#undef DK__RC_EMIT_T

#define DK__RC_S uint16_t
#define DK__RC_SSUFFIX _f16
#define DK__RC_S_IS_T 0
#define DK__RC_EMIT_T 0
#include "roi_align_cpu.c"
#undef DK__RC_S
#undef DK__RC_SSUFFIX
#undef DK__RC_S_IS_T
#undef DK__RC_EMIT_T

#define DK__RC_S uint16_t
#define DK__RC_SSUFFIX _bf16
#define DK__RC_S_IS_T 0
#define DK__RC_EMIT_T 0
#include "roi_align_cpu.c"
#undef DK__RC_S
#undef DK__RC_SSUFFIX
#undef DK__RC_S_IS_T
#undef DK__RC_EMIT_T
#undef DK__RC_T
#undef DK__RC_TSUFFIX
#undef DK__RC_T_BYTES

#define DK__RC_T double
#define DK__RC_TSUFFIX _f64
#define DK__RC_T_BYTES 8
#define DK__RC_S double
#define DK__RC_SSUFFIX _f64
#define DK__RC_S_IS_T 1
#define DK__RC_EMIT_T 1
#include "roi_align_cpu.c"
#undef DK__RC_S
#undef DK__RC_SSUFFIX
#undef DK__RC_S_IS_T
#undef DK__RC_EMIT_T
#undef DK__RC_T
#undef DK__RC_TSUFFIX
#undef DK__RC_T_BYTES
#undef DK__RC_TEMPLATE

/* Shape and strides common to both directions; `img` is input or grad_input, `bins` is output
 * or grad_output. */
static dk_status dk__rc_shape_init(dk__rc_shape *sh, const dk_tensor *img, const dk_tensor *bins,
                                   const dk_tensor *rois, const dk_tensor *amy,
                                   const dk_tensor *amx, int64_t PH, int64_t PW, double scale,
                                   int64_t sampling_ratio, int64_t pool_mode, bool aligned,
                                   bool backward)
{
    const char *op = backward ? "roi_align_backward" : "roi_align_forward";
    sh->N = img->shape[0];
    sh->C = img->shape[1];
    sh->H = img->shape[2];
    sh->W = img->shape[3];
    sh->K = rois->shape[0];
    sh->PH = PH;
    sh->PW = PW;
    sh->sampling_ratio = sampling_ratio;
    sh->spatial_scale = scale;
    sh->aligned = aligned;
    sh->max_mode = pool_mode == DK_POOL_MAX;
    sh->backward = backward;
    dk__rc_strides(img, sh->in_s, 4);
    dk__rc_strides(bins, sh->out_s, 4);
    dk__rc_strides(amy, sh->amy_s, 4);
    dk__rc_strides(amx, sh->amx_s, 4);
    /* The weight tables index rows and columns with int32. */
    if (sh->H > INT32_MAX - 1 || sh->W > INT32_MAX - 1)
        return dk_error(DK_EINVAL,
                        "%s: input height and width must be below 2^31 - 1 (got %lld x %lld)", op,
                        (long long)sh->H, (long long)sh->W);
    return DK_OK;
}

static int dk__rc_threads(const dk__rc_shape *sh)
{
    /* Tiny calls are not worth waking the team. */
    const int64_t work = sh->K * sh->C * sh->PH * sh->PW + sh->N * sh->C * sh->H * sh->W;
    return work < 32768 ? 1 : dk_get_num_threads();
}

dk_status dk_roi_align_forward_cpu(const dk_tensor *input, const dk_tensor *rois,
                                   dk_tensor *output, dk_tensor *argmax_y, dk_tensor *argmax_x,
                                   int64_t aligned_height, int64_t aligned_width,
                                   double spatial_scale, int64_t sampling_ratio, int64_t pool_mode,
                                   bool aligned)
{
    dk__rc_shape sh;
    dk_status st = dk__rc_shape_init(&sh, input, output, rois, argmax_y, argmax_x, aligned_height,
                                     aligned_width, spatial_scale, sampling_ratio, pool_mode,
                                     aligned, false);
    if (st != DK_OK) return st;
    if (sh.K == 0 || sh.C == 0) return DK_OK;
    _Alignas(64) char stack[DK__RC_STACK_BYTES]; /* Note [Scratch arena] */
    dk__rc_arena ar = {stack, stack + sizeof stack, sizeof stack, NULL};
    dk__rc_groups gr = {NULL, NULL, NULL, 0};
    dk__rc_ctx cx = {.sh = &sh, .gr = &gr, .ar = &ar, .nthreads = dk__rc_threads(&sh)};
    switch (dk_tensor_dtype(input)) {
    case DK_FLOAT32: st = dk__rc_forward_f32(&cx, input, rois, output, argmax_y, argmax_x); break;
    case DK_FLOAT64: st = dk__rc_forward_f64(&cx, input, rois, output, argmax_y, argmax_x); break;
    case DK_FLOAT16: st = dk__rc_forward_f16(&cx, input, rois, output, argmax_y, argmax_x); break;
    case DK_BFLOAT16: st = dk__rc_forward_bf16(&cx, input, rois, output, argmax_y, argmax_x); break;
    default:
        st = dk_error(DK_ETYPE, "roi_align_forward: unsupported dtype %s",
                      dk_dtype_name(dk_tensor_dtype(input)));
    }
    dk__rc_arena_free(&ar);
    return st;
}

dk_status dk_roi_align_backward_cpu(const dk_tensor *grad_output, const dk_tensor *rois,
                                    const dk_tensor *argmax_y, const dk_tensor *argmax_x,
                                    dk_tensor *grad_input, int64_t aligned_height,
                                    int64_t aligned_width, double spatial_scale,
                                    int64_t sampling_ratio, int64_t pool_mode, bool aligned)
{
    dk__rc_shape sh;
    dk_status st = dk__rc_shape_init(&sh, grad_input, grad_output, rois, argmax_y, argmax_x,
                                     aligned_height, aligned_width, spatial_scale, sampling_ratio,
                                     pool_mode, aligned, true);
    if (st != DK_OK) return st;
    if (sh.N == 0 || sh.C == 0 || sh.H == 0 || sh.W == 0) return DK_OK; /* nothing to write */
    _Alignas(64) char stack[DK__RC_STACK_BYTES]; /* Note [Scratch arena] */
    dk__rc_arena ar = {stack, stack + sizeof stack, sizeof stack, NULL};
    dk__rc_groups gr = {NULL, NULL, NULL, 0};
    dk__rc_ctx cx = {.sh = &sh, .gr = &gr, .ar = &ar, .nthreads = dk__rc_threads(&sh)};
    switch (dk_tensor_dtype(grad_output)) {
    case DK_FLOAT32:
        st = dk__rc_backward_f32(&cx, grad_output, rois, argmax_y, argmax_x, grad_input);
        break;
    case DK_FLOAT64:
        st = dk__rc_backward_f64(&cx, grad_output, rois, argmax_y, argmax_x, grad_input);
        break;
    case DK_FLOAT16:
        st = dk__rc_backward_f16(&cx, grad_output, rois, argmax_y, argmax_x, grad_input);
        break;
    case DK_BFLOAT16:
        st = dk__rc_backward_bf16(&cx, grad_output, rois, argmax_y, argmax_x, grad_input);
        break;
    default:
        st = dk_error(DK_ETYPE, "roi_align_backward: unsupported dtype %s",
                      dk_dtype_name(dk_tensor_dtype(grad_output)));
    }
    dk__rc_arena_free(&ar);
    return st;
}

DK_REGISTER_DEVICE_IMPL(roi_align_forward, CPU, dk_roi_align_forward_cpu)
DK_REGISTER_DEVICE_IMPL(roi_align_backward, CPU, dk_roi_align_backward_cpu)

#endif /* DK__RC_TEMPLATE */
