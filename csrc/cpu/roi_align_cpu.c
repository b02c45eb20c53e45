/*
 * csrc/cpu/roi_align_cpu.c — RoIAlign forward and backward on the CPU, OpenMP-parallel.
 *
 * Semantics (MMCV's) and the per-sample math come from kernels/roi_align.h; this file only
 * decides loop order, memory layout and threading. The argument checks (shapes, dtypes, batch
 * indices, pool_mode, argmax presence) were done by ops/roi_align.c before dispatch.
 *
 * Note [Loop order: planes outside, RoIs inside]
 * torchvision loops over RoIs, then channels: each (RoI, channel) pair pulls the RoI's window
 * of a different 200 KB plane from memory, and the core mostly waits on it. Here the parallel
 * loop runs over (n, c) planes: one plane stays in L2 while every RoI of image n is served from
 * it, in RoI index order. What a RoI needs from a plane does not depend on the channel, so it is
 * precomputed once per call and shared by all planes and threads (Note [Separable weight
 * tables]). Channels-last input (channel stride 1) instead runs over (n, block of channels), a
 * block being one cache line of channels, vectorised across the block.
 *
 * Note [Separable weight tables]
 * A sample's bilinear weight is a product wy(y) * wx(x) and a bin's samples form a grid, so
 *     out[ph, pw] = 1/count * sum_iy sum_ix sum_taps wy * wx * v[r, c]
 *                 = sum_r WY_ph(r) * sum_c WX_pw(c) * v[r, c]
 * where WY_ph(r) adds up the y-taps of bin row ph that land on row r, divided by grid_h (an
 * invalid y contributes no tap, which zeroes the product exactly as the per-sample rule does),
 * and likewise WX_pw. Per RoI and bin we store the list of (index, weight) with duplicate indices
 * merged: a bin's samples are monotonic, so a repeated index is always one of the last two
 * entries. A list is never longer than the number of distinct rows (columns) it touches, so a
 * huge box costs memory proportional to the input, not to its number of samples. The tables are
 * built in two passes (count, then fill) so their memory is exact.
 *
 * Each RoI is then evaluated in whichever order is cheaper for its tables:
 *   direct  out[ph, pw] = sum_(r, wy) wy * sum_(c, wx) wx * v[r, c]                (gathers)
 *   dense   t[c] = sum_(r, wy) wy * v[r, c] over the RoI's whole column span, contiguous and
 *           vectorised; then out[ph, pw] = sum_(c, wx) wx * t[c]
 * Dense wins when samples are closer than a few columns apart (adaptive grids, small boxes);
 * direct wins for sparse fixed sampling of wide boxes. Results differ from the per-sample
 * references only by float rounding (the sums are associated differently).
 *
 * Note [Deterministic backward]
 * grad_input must come out bit-identical for any thread count and on every run, so there are
 * no atomics: each plane (or channels-last channel block) of grad_input is owned by exactly one
 * iteration of the parallel loop, which zeroes it and then adds the contributions of the RoIs
 * of its image in RoI index order, each RoI in a fixed (ph, row, pw, column) order. Which thread
 * runs an iteration does not matter; the dense/direct choice depends only on the RoI.
 */
#if defined(DK__RC_TEMPLATE)
/* ========================================================================================== */
/* Template body, instantiated below once per dtype (Note [One template, several types] in    */
/* kernels/roi_align.h explains the self-include).                                            */
/*   DK__RC_T  compute type (float / double)       DK__RC_TFN(x)  x suffixed _f32 / _f64       */
/*   DK__RC_S  storage type                        DK__RC_SFN(x)  x suffixed _f32/_f64/_f16/_bf16 */
/*   DK__RC_EMIT_T  1 in the first instantiation of a compute type: emit the T-only part      */
/*   DK__RC_SAME    1 when storage == compute type: planes may be used in place                */
#define T DK__RC_T
#define S DK__RC_S
#define AXIS DK__RC_TFN(dk_roi_align_axis)
#define TABLES DK__RC_TFN(dk__rc_tables)
#define CHUNK DK__RC_TFN(dk__rc_chunk)
#define SCRATCH DK__RC_TFN(dk__rc_scratch)
#define V4 DK__RC_TFN(dk__rc_v4)
#define LOAD(p) DK__RC_SFN(dk_roi_align_load)(p)
#define STORE(p, v) DK__RC_SFN(dk_roi_align_store)((p), (v))

#if DK__RC_EMIT_T
/* ------------------------------------------------------------------------------------------ */
/* Compute-type part: weight tables and the per-plane evaluation.                             */

/* Four lanes of T. GCC/Clang generic vectors: SSE on x86-64-v2, whatever the target has
 * elsewhere; no intrinsics, so the file stays portable. */
typedef T V4 __attribute__((vector_size(4 * sizeof(T))));

/* Four x taps of one bin, loaded as two column pairs: lanes (a, a + 1, b, b + 1). */
typedef struct {
    T w[4];
    int32_t a, b;
} CHUNK;

typedef struct {
    /* Merged taps (Note [Separable weight tables]); RoI k, bin p: [beg[k * P + p], beg[.. + 1]),
     * indices ascending within a bin. */
    int64_t *ybeg, *xbeg;
    int32_t *yidx, *xidx;
    T *yw, *xw;
    /* The x taps regrouped into chunks for the plane path (Note [Chunks]). */
    int64_t *cbeg; /* RoI k, bin pw: chunks [cbeg[k * PW + pw], cbeg[k * PW + pw + 1]) */
    CHUNK *ch;
    int32_t *c0, *span;   /* per RoI: first column and width of the columns its x taps use */
    unsigned char *dense; /* per RoI: evaluation order */
    int32_t *rlo, *rhi;   /* per image: rows used by any of its RoIs (rlo > rhi: none) */
    int64_t max_ny;       /* most y taps in one bin */
    int64_t max_chunks;   /* most chunks in one RoI */
} TABLES;

/* Per-thread scratch of the plane path (dk__rc_scratch_at). */
typedef struct {
    T *acc;      /* PH * PW: one RoI's outputs (forward) or grad_output (backward) */
    T *t;        /* W + 4: a bin row summed over its y taps (dense; chunks may overhang by 3) */
    int64_t *off; /* max_ny: element offsets of a bin row's y taps */
    V4 *vb;      /* max_chunks: per-chunk partial sums (sparse) */
} SCRATCH;

static void DK__RC_TFN(dk__rc_tables_free)(TABLES *tb)
{
    free(tb->ybeg);
    free(tb->xbeg);
    free(tb->yidx);
    free(tb->xidx);
    free(tb->yw);
    free(tb->xw);
    free(tb->cbeg);
    free(tb->ch);
    free(tb->c0);
    free(tb->span);
    free(tb->dense);
    free(tb->rlo);
    free(tb->rhi);
    memset(tb, 0, sizeof *tb);
}

/* Adds weight w at index i to the list (idx, wt) of n entries, merging with the last two. */
static inline int64_t DK__RC_TFN(dk__rc_add_tap)(int32_t *idx, T *wt, int64_t n, int32_t *last,
                                                 int32_t i, T w)
{
    if (n >= 1 && last[0] == i) {
        if (wt) wt[n - 1] += w;
        return n;
    }
    if (n >= 2 && last[1] == i) {
        if (wt) wt[n - 2] += w;
        return n;
    }
    if (idx) {
        idx[n] = i;
        wt[n] = w;
    }
    last[1] = last[0];
    last[0] = i;
    return n + 1;
}

/* The merged taps of bin p of axis a (size pixels long) into (idx, wt), ascending; returns their
 * number. With idx == NULL it only counts. */
static int64_t DK__RC_TFN(dk__rc_bin_taps)(const AXIS *a, int64_t p, int64_t size, int32_t *idx,
                                           T *wt)
{
    int64_t n = 0;
    int32_t last[2] = {-1, -1};
    /* Adding each sample's taps in the direction the samples move keeps the list monotonic. */
    const bool down = a->bin < (T)0;
    for (int64_t i = 0; i < a->grid; ++i) {
        DK__RC_TFN(dk_roi_align_taps) t;
        if (!DK__RC_TFN(dk_roi_align_taps_init)(DK__RC_TFN(dk_roi_align_axis_sample)(a, p, i),
                                                size, &t))
            continue;
        if (down) {
            n = DK__RC_TFN(dk__rc_add_tap)(idx, wt, n, last, (int32_t)t.hi, t.whi);
            n = DK__RC_TFN(dk__rc_add_tap)(idx, wt, n, last, (int32_t)t.lo, t.wlo);
        } else {
            n = DK__RC_TFN(dk__rc_add_tap)(idx, wt, n, last, (int32_t)t.lo, t.wlo);
            n = DK__RC_TFN(dk__rc_add_tap)(idx, wt, n, last, (int32_t)t.hi, t.whi);
        }
    }
    if (idx && n > 0) {
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

/* One axis' taps for all RoIs: counts, then allocation, then fill. */
static dk_status DK__RC_TFN(dk__rc_axis_tables)(const AXIS *axes, int64_t K, int64_t P,
                                                int64_t size, int64_t **beg_out,
                                                int32_t **idx_out, T **w_out)
{
    int64_t *beg = (int64_t *)malloc((size_t)(K * P + 1) * sizeof *beg);
    if (!beg) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
#pragma omp parallel for schedule(static) if (K > 64)
    for (int64_t k = 0; k < K; ++k)
        for (int64_t p = 0; p < P; ++p)
            beg[k * P + p + 1] = DK__RC_TFN(dk__rc_bin_taps)(&axes[k], p, size, NULL, NULL);
    const int64_t total = DK__RC_TFN(dk__rc_prefix)(beg, K * P);
    int32_t *idx = (int32_t *)malloc((size_t)(total > 0 ? total : 1) * sizeof *idx);
    T *w = (T *)malloc((size_t)(total > 0 ? total : 1) * sizeof *w);
    if (!idx || !w) {
        free(beg);
        free(idx);
        free(w);
        return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables (%lld entries)",
                        (long long)total);
    }
#pragma omp parallel for schedule(static) if (K > 64)
    for (int64_t k = 0; k < K; ++k)
        for (int64_t p = 0; p < P; ++p)
            DK__RC_TFN(dk__rc_bin_taps)(&axes[k], p, size, idx + beg[k * P + p], w + beg[k * P + p]);
    *beg_out = beg;
    *idx_out = idx;
    *w_out = w;
    return DK_OK;
}

/*
 * Note [Chunks]
 * The plane path evaluates x taps four lanes at a time, as two column pairs (a, a + 1) and
 * (b, b + 1): a pair is one 64-bit load for float. Two groupings of a bin's taps:
 *   sparse  each pair is a sample's two taps (taps not adjacent to another get a zero-weight
 *           partner inside [0, size)); two pairs per chunk. Fixed sampling of a wide bin then
 *           needs one chunk per two samples instead of a window over the whole bin.
 *   dense   the bin's window [first, last] in runs of four columns (b = a + 2), zero weights in
 *           the gaps; read from the per-RoI row buffer t, which is padded so a run may overhang.
 * A chunk whose second pair is unused points it at the first pair, with zero weights.
 */
static int64_t DK__RC_TFN(dk__rc_sparse_chunks)(const int32_t *idx, const T *w, int64_t n,
                                                int64_t size, CHUNK *out)
{
    int64_t nc = 0;
    bool open = false; /* the last chunk has a free second pair */
    for (int64_t i = 0; i < n;) {
        int32_t c;
        T w0, w1;
        if (i + 1 < n && idx[i + 1] == idx[i] + 1) {
            c = idx[i];
            w0 = w[i];
            w1 = w[i + 1];
            i += 2;
        } else if (idx[i] + 1 < size) {
            c = idx[i];
            w0 = w[i];
            w1 = (T)0;
            i += 1;
        } else { /* the last column: pair it with the one before (size >= 2 in sparse mode) */
            c = idx[i] - 1;
            w0 = (T)0;
            w1 = w[i];
            i += 1;
        }
        if (!open) {
            if (out) {
                out[nc].a = out[nc].b = c;
                out[nc].w[0] = w0;
                out[nc].w[1] = w1;
                out[nc].w[2] = out[nc].w[3] = (T)0;
            }
            nc++;
            open = true;
        } else {
            if (out) {
                out[nc - 1].b = c;
                out[nc - 1].w[2] = w0;
                out[nc - 1].w[3] = w1;
            }
            open = false;
        }
    }
    return nc;
}

static int64_t DK__RC_TFN(dk__rc_dense_chunks)(const int32_t *idx, const T *w, int64_t n,
                                               CHUNK *out)
{
    if (n == 0) return 0;
    const int64_t first = idx[0], nc = ((int64_t)idx[n - 1] - first + 1 + 3) / 4;
    if (out) {
        for (int64_t j = 0; j < nc; ++j) {
            out[j].a = (int32_t)(first + 4 * j);
            out[j].b = (int32_t)(first + 4 * j + 2);
            out[j].w[0] = out[j].w[1] = out[j].w[2] = out[j].w[3] = (T)0;
        }
        for (int64_t i = 0; i < n; ++i) {
            const int64_t col = idx[i] - first;
            out[col / 4].w[col % 4] = w[i];
        }
    }
    return nc;
}

/* Chunks of bin pw of RoI k in its chosen grouping (out == NULL: count only). */
static int64_t DK__RC_TFN(dk__rc_bin_chunks)(const TABLES *tb, int64_t k, int64_t pw, int64_t PW,
                                             int64_t W, bool dense, CHUNK *out)
{
    const int64_t e0 = tb->xbeg[k * PW + pw], n = tb->xbeg[k * PW + pw + 1] - e0;
    return dense ? DK__RC_TFN(dk__rc_dense_chunks)(tb->xidx + e0, tb->xw + e0, n, out)
                 : DK__RC_TFN(dk__rc_sparse_chunks)(tb->xidx + e0, tb->xw + e0, n, W, out);
}

/*
 * Per RoI: column span and the evaluation order. The costs are rough micro-op counts of the
 * two loops below (dk__rc_forward_sparse / _dense), per plane: sparse touches every (row tap,
 * chunk) pair of a bin row; dense sums whole rows of the span four columns at a time, then
 * dots each bin's window.
 */
static void DK__RC_TFN(dk__rc_choose)(TABLES *tb, const dk__rc_shape *sh, int64_t k)
{
    const int64_t PH = sh->PH, PW = sh->PW;
    const int64_t ex0 = tb->xbeg[k * PW], ex1 = tb->xbeg[(k + 1) * PW];
    const int64_t ny = tb->ybeg[(k + 1) * PH] - tb->ybeg[k * PH];
    int32_t lo = INT32_MAX, hi = -1;
    for (int64_t e = ex0; e < ex1; ++e) {
        lo = tb->xidx[e] < lo ? tb->xidx[e] : lo;
        hi = tb->xidx[e] > hi ? tb->xidx[e] : hi;
    }
    const int64_t span = hi >= lo ? (int64_t)hi - lo + 1 : 0;
    tb->c0[k] = hi >= lo ? lo : 0;
    tb->span[k] = (int32_t)span;
    int64_t nsparse = 0, ndense = 0;
    for (int64_t pw = 0; pw < PW; ++pw) {
        nsparse += DK__RC_TFN(dk__rc_bin_chunks)(tb, k, pw, PW, sh->W, false, NULL);
        ndense += DK__RC_TFN(dk__rc_bin_chunks)(tb, k, pw, PW, sh->W, true, NULL);
    }
    const int64_t sparse_cost = 7 * ny * nsparse + 4 * PH * nsparse;
    const int64_t dense_cost = 7 * ny * ((span + 3) / 4) / 2 + PH * ((span + 3) / 4 + 6 * ndense);
    bool dense = DK__RC_DENSE < 0 ? dense_cost <= sparse_cost : DK__RC_DENSE > 0;
    if (sh->W < 2) dense = true; /* sparse pairs need two columns */
    tb->dense[k] = (unsigned char)dense;
}

static dk_status DK__RC_TFN(dk__rc_chunk_tables)(TABLES *tb, const dk__rc_shape *sh)
{
    const int64_t K = sh->K, PW = sh->PW;
    tb->cbeg = (int64_t *)malloc((size_t)(K * PW + 1) * sizeof *tb->cbeg);
    if (!tb->cbeg) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
#pragma omp parallel for schedule(static) if (K > 64)
    for (int64_t k = 0; k < K; ++k) {
        DK__RC_TFN(dk__rc_choose)(tb, sh, k);
        for (int64_t pw = 0; pw < PW; ++pw)
            tb->cbeg[k * PW + pw + 1] =
                DK__RC_TFN(dk__rc_bin_chunks)(tb, k, pw, PW, sh->W, tb->dense[k], NULL);
    }
    const int64_t total = DK__RC_TFN(dk__rc_prefix)(tb->cbeg, K * PW);
    tb->max_chunks = 0;
    for (int64_t k = 0; k < K; ++k) {
        const int64_t n = tb->cbeg[(k + 1) * PW] - tb->cbeg[k * PW];
        tb->max_chunks = n > tb->max_chunks ? n : tb->max_chunks;
    }
    tb->ch = (CHUNK *)malloc((size_t)(total > 0 ? total : 1) * sizeof *tb->ch);
    if (!tb->ch) return dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
#pragma omp parallel for schedule(static) if (K > 64)
    for (int64_t k = 0; k < K; ++k)
        for (int64_t pw = 0; pw < PW; ++pw)
            DK__RC_TFN(dk__rc_bin_chunks)(tb, k, pw, PW, sh->W, tb->dense[k],
                                          tb->ch + tb->cbeg[k * PW + pw]);
    return DK_OK;
}

/* Per-image row ranges (for converting only the used band of a plane) and the largest bin. */
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
            const int64_t k = gr->order[j];
            for (int64_t e = tb->ybeg[k * PH]; e < tb->ybeg[(k + 1) * PH]; ++e) {
                lo = tb->yidx[e] < lo ? tb->yidx[e] : lo;
                hi = tb->yidx[e] > hi ? tb->yidx[e] : hi;
            }
        }
        tb->rlo[n] = hi >= 0 ? lo : 0;
        tb->rhi[n] = hi;
    }
}

/* All tables of one call. `chunks`: also build the plane path's chunks. */
static dk_status DK__RC_TFN(dk__rc_tables_build)(TABLES *tb, const dk__rc_shape *sh,
                                                 const dk__rc_groups *gr, const AXIS *ay,
                                                 const AXIS *ax, bool chunks)
{
    memset(tb, 0, sizeof *tb);
    dk_status st = DK__RC_TFN(dk__rc_axis_tables)(ay, sh->K, sh->PH, sh->H, &tb->ybeg, &tb->yidx,
                                                  &tb->yw);
    if (st != DK_OK) goto fail;
    st = DK__RC_TFN(dk__rc_axis_tables)(ax, sh->K, sh->PW, sh->W, &tb->xbeg, &tb->xidx, &tb->xw);
    if (st != DK_OK) goto fail;
    const size_t k1 = (size_t)(sh->K > 0 ? sh->K : 1), n1 = (size_t)(sh->N > 0 ? sh->N : 1);
    tb->c0 = (int32_t *)malloc(k1 * sizeof *tb->c0);
    tb->span = (int32_t *)malloc(k1 * sizeof *tb->span);
    tb->dense = (unsigned char *)malloc(k1);
    tb->rlo = (int32_t *)malloc(n1 * sizeof *tb->rlo);
    tb->rhi = (int32_t *)malloc(n1 * sizeof *tb->rhi);
    if (!tb->c0 || !tb->span || !tb->dense || !tb->rlo || !tb->rhi) {
        st = dk_error(DK_ENOMEM, "roi_align: out of memory for the weight tables");
        goto fail;
    }
    if (chunks && (st = DK__RC_TFN(dk__rc_chunk_tables)(tb, sh)) != DK_OK) goto fail;
    DK__RC_TFN(dk__rc_row_ranges)(tb, sh, gr);
    return DK_OK;
fail:
    DK__RC_TFN(dk__rc_tables_free)(tb);
    return st;
}

/* The V4 helpers take and return vectors through pointers: four doubles are 32 bytes, whose
 * by-value calling convention differs with and without AVX (gcc's -Wpsabi). Inlined anyway. */

/* *v = lanes (a[0], a[1], b[0], b[1]). */
static inline void DK__RC_TFN(dk__rc_ld22)(V4 *v, const T *a, const T *b)
{
#if DK__RC_TBITS == 32
    /* One 64-bit load per pair (gcc otherwise emits a load and an insert per lane). */
    typedef double dk__rc_v2d __attribute__((vector_size(16)));
    double x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    const dk__rc_v2d d = {x, y};
    memcpy(v, &d, sizeof *v);
#else
    const V4 r = {a[0], a[1], b[0], b[1]};
    *v = r;
#endif
}

static inline void DK__RC_TFN(dk__rc_ldw)(V4 *v, const CHUNK *q) { memcpy(v, q->w, sizeof *v); }

static inline T DK__RC_TFN(dk__rc_hsum)(const V4 *v) { return ((*v)[0] + (*v)[1]) + ((*v)[2] + (*v)[3]); }

/* out[i] = hsum(s[i]) for four vectors at once (a 4x4 transpose-add), same association. */
static inline void DK__RC_TFN(dk__rc_hsum4)(T *out, const V4 *s)
{
    const V4 u01 = DK__RC_SHUF(s[0], s[1], 0, 2, 4, 6) + DK__RC_SHUF(s[0], s[1], 1, 3, 5, 7);
    const V4 u23 = DK__RC_SHUF(s[2], s[3], 0, 2, 4, 6) + DK__RC_SHUF(s[2], s[3], 1, 3, 5, 7);
    const V4 r = DK__RC_SHUF(u01, u23, 0, 2, 4, 6) + DK__RC_SHUF(u01, u23, 1, 3, 5, 7);
    memcpy(out, &r, sizeof r);
}

/* acc[pw] = sum over the chunks c of bin pw of hsum(w_c * v_c), where v_c is vb[c - vb0]
 * (sparse) or the lanes of t at the chunk's pairs (dense, t holding columns from c0 on). */
static inline void DK__RC_TFN(dk__rc_bin_dot)(V4 *out, const CHUNK *ch, int64_t c_begin,
                                              int64_t c_end, const V4 *vb, int64_t vb0,
                                              const T *t, int64_t c0)
{
    V4 s = {0, 0, 0, 0}, w, v;
    for (int64_t c = c_begin; c < c_end; ++c) {
        DK__RC_TFN(dk__rc_ldw)(&w, &ch[c]);
        if (vb)
            v = vb[c - vb0];
        else
            DK__RC_TFN(dk__rc_ld22)(&v, t + (ch[c].a - c0), t + (ch[c].b - c0));
        s += w * v;
    }
    *out = s;
}

static inline void DK__RC_TFN(dk__rc_bin_row)(T *restrict acc, const CHUNK *ch, const int64_t *cb,
                                              int64_t PW, const V4 *vb, const T *t, int64_t c0)
{
    int64_t pw = 0;
    for (; pw + 4 <= PW; pw += 4) {
        V4 s[4];
        for (int i = 0; i < 4; ++i)
            DK__RC_TFN(dk__rc_bin_dot)(&s[i], ch, cb[pw + i], cb[pw + i + 1], vb, cb[0], t, c0);
        DK__RC_TFN(dk__rc_hsum4)(acc + pw, s);
    }
    for (; pw < PW; ++pw) {
        V4 s;
        DK__RC_TFN(dk__rc_bin_dot)(&s, ch, cb[pw], cb[pw + 1], vb, cb[0], t, c0);
        acc[pw] = DK__RC_TFN(dk__rc_hsum)(&s);
    }
}

/* t[0..n) += sum of w[i] * row_i[c0 .. c0 + n) over nr (1..4) y taps: the dense vertical pass,
 * four rows per sweep so that t is loaded and stored once per four rows. */
static inline void DK__RC_TFN(dk__rc_vsum)(T *restrict t, int64_t n, const T *plane, int64_t sy,
                                           int64_t rbase, int64_t c0, const int32_t *idx,
                                           const T *w, int64_t nr)
{
#define DK__RC_ROW(i) (plane + (idx[i] - rbase) * sy + c0)
    const T *restrict a = DK__RC_ROW(0);
    const T wa = w[0];
    if (nr >= 4) {
        const T *restrict b = DK__RC_ROW(1), *restrict c = DK__RC_ROW(2), *restrict d = DK__RC_ROW(3);
        const T wb = w[1], wc = w[2], wd = w[3];
        for (int64_t j = 0; j < n; ++j)
            t[j] += wa * a[j] + wb * b[j] + wc * c[j] + wd * d[j];
    } else if (nr == 3) {
        const T *restrict b = DK__RC_ROW(1), *restrict c = DK__RC_ROW(2);
        const T wb = w[1], wc = w[2];
        for (int64_t j = 0; j < n; ++j)
            t[j] += wa * a[j] + wb * b[j] + wc * c[j];
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

/* Per-thread scratch of the plane path, in elements of T; every part rounded to 8 elements,
 * so with a 64-byte aligned base every part is aligned for V4. */
static size_t DK__RC_TFN(dk__rc_roi_scratch)(const TABLES *tb, const dk__rc_shape *sh)
{
    return dk__rc_round8((size_t)(sh->PH * sh->PW)) + dk__rc_round8((size_t)sh->W + 4) +
           dk__rc_round8(((size_t)tb->max_ny * sizeof(int64_t) + sizeof(T) - 1) / sizeof(T)) +
           dk__rc_round8((size_t)tb->max_chunks * 4);
}

static SCRATCH DK__RC_TFN(dk__rc_scratch_at)(const TABLES *tb, const dk__rc_shape *sh, T *base)
{
    SCRATCH sc;
    sc.acc = base;
    sc.t = sc.acc + dk__rc_round8((size_t)(sh->PH * sh->PW));
    T *off = sc.t + dk__rc_round8((size_t)sh->W + 4);
    sc.off = (int64_t *)(void *)off;
    sc.vb = (V4 *)(void *)(off + dk__rc_round8(((size_t)tb->max_ny * sizeof(int64_t) + sizeof(T) - 1) /
                                              sizeof(T)));
    return sc;
}

/*
 * Sparse vertical pass over up to four y taps (offsets o, weights w): for every chunk q[c] of
 * the RoI, vb[c] (=, or += unless first) sum_i w[i] * plane[o[i] + (a, a + 1, b, b + 1)].
 * Four taps per sweep keep the offsets and weights in registers.
 */
static inline void DK__RC_TFN(dk__rc_sparse_rows)(V4 *restrict vb, const CHUNK *restrict q,
                                                  int64_t nch, const T *plane, const int64_t *o,
                                                  const T *w, int64_t nr, bool first)
{
#define DK__RC_TAP(i) DK__RC_TFN(dk__rc_ld22)(&x, pa + o##i, pb + o##i); v += w##i * x;
#define DK__RC_SWEEP(TAPS)                                                                      \
    for (int64_t c = 0; c < nch; ++c) {                                                         \
        const T *pa = plane + q[c].a, *pb = plane + q[c].b;                                     \
        V4 x, v = {0, 0, 0, 0};                                                                 \
        TAPS                                                                                    \
        if (first) vb[c] = v;                                                                   \
        else vb[c] += v;                                                                        \
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

/* p[a .. a + 1] += d lanes 0, 1; then p[b .. b + 1] += lanes 2, 3. One pair after the other:
 * they may overlap (a + 1 == b, or b == a with zero weights). */
static inline void DK__RC_TFN(dk__rc_add22)(T *a, T *b, const V4 *d)
{
    typedef T dk__rc_v2 __attribute__((vector_size(2 * sizeof(T))));
    dk__rc_v2 lo, hi, x;
    memcpy(&lo, d, sizeof lo);
    memcpy(&hi, (const char *)d + sizeof lo, sizeof hi);
    memcpy(&x, a, sizeof x);
    x += lo;
    memcpy(a, &x, sizeof x);
    memcpy(&x, b, sizeof x);
    x += hi;
    memcpy(b, &x, sizeof x);
}

/* Sparse scatter over up to four y taps: for every chunk, grad[o[i] + pairs] += w[i] * vb[c]. */
static inline void DK__RC_TFN(dk__rc_sparse_scatter)(T *grad, const CHUNK *restrict q, int64_t nch,
                                                     const V4 *restrict vb, const int64_t *o,
                                                     const T *w, int64_t nr)
{
    for (int64_t c = 0; c < nch; ++c) {
        T *pa = grad + q[c].a, *pb = grad + q[c].b;
        for (int64_t i = 0; i < nr; ++i) {
            const V4 d = w[i] * vb[c];
            DK__RC_TFN(dk__rc_add22)(pa + o[i], pb + o[i], &d);
        }
    }
}

/*
 * Forward of RoI k on one plane: sc->acc[ph * PW + pw] = out[ph, pw]. The plane has unit column
 * stride and row stride sy; its row r is at plane + (r - rbase) * sy (rbase > 0 when only a band
 * of rows was converted into a buffer).
 */
static void DK__RC_TFN(dk__rc_forward_roi)(const TABLES *tb, int64_t k, int64_t PH, int64_t PW,
                                           const T *plane, int64_t sy, int64_t rbase,
                                           const SCRATCH *sc)
{
    const int64_t *yb = tb->ybeg + k * PH, *cb = tb->cbeg + k * PW;
    const CHUNK *ch = tb->ch;
    T *restrict acc = sc->acc;
    if (tb->dense[k]) {
        T *restrict t = sc->t;
        const int64_t c0 = tb->c0[k], span = tb->span[k];
        for (int64_t ph = 0; ph < PH; ++ph) {
            memset(t, 0, (size_t)(span + 4) * sizeof *t);
            for (int64_t e = yb[ph]; e < yb[ph + 1]; e += 4)
                DK__RC_TFN(dk__rc_vsum)(t, span, plane, sy, rbase, c0, tb->yidx + e, tb->yw + e,
                                        yb[ph + 1] - e);
            DK__RC_TFN(dk__rc_bin_row)(acc + ph * PW, ch, cb, PW, NULL, t, c0);
        }
    } else {
        const CHUNK *q = ch + cb[0];
        const int64_t nch = cb[PW] - cb[0];
        int64_t *restrict off = sc->off;
        V4 *restrict vb = sc->vb;
        for (int64_t ph = 0; ph < PH; ++ph) {
            const int64_t e0 = yb[ph], ny = yb[ph + 1] - e0;
            if (ny == 0) {
                for (int64_t pw = 0; pw < PW; ++pw) acc[ph * PW + pw] = (T)0;
                continue;
            }
            for (int64_t i = 0; i < ny; ++i) off[i] = (tb->yidx[e0 + i] - rbase) * sy;
            for (int64_t i = 0; i < ny; i += 4)
                DK__RC_TFN(dk__rc_sparse_rows)(vb, q, nch, plane, off + i, tb->yw + e0 + i,
                                               ny - i, i == 0);
            DK__RC_TFN(dk__rc_bin_row)(acc + ph * PW, ch, cb, PW, vb, NULL, 0);
        }
    }
}

/*
 * Backward of RoI k on one plane: grad[r, c] += sum over (ph, pw) of g[ph * PW + pw] times the
 * separable weight, in a fixed order (Note [Deterministic backward]); g is sc->acc. Layout as
 * for forward, with rbase 0.
 */
static void DK__RC_TFN(dk__rc_backward_roi)(const TABLES *tb, int64_t k, int64_t PH, int64_t PW,
                                            T *grad, int64_t sy, const SCRATCH *sc)
{
    const int64_t *yb = tb->ybeg + k * PH, *cb = tb->cbeg + k * PW;
    const CHUNK *ch = tb->ch;
    const T *restrict g = sc->acc;
    if (tb->dense[k]) {
        T *restrict u = sc->t;
        const int64_t c0 = tb->c0[k], span = tb->span[k];
        for (int64_t ph = 0; ph < PH; ++ph) {
            if (yb[ph] == yb[ph + 1]) continue;
            memset(u, 0, (size_t)(span + 4) * sizeof *u);
            for (int64_t pw = 0; pw < PW; ++pw) {
                const T gv = g[ph * PW + pw];
                for (int64_t c = cb[pw]; c < cb[pw + 1]; ++c) {
                    V4 d;
                    DK__RC_TFN(dk__rc_ldw)(&d, &ch[c]);
                    d *= gv;
                    DK__RC_TFN(dk__rc_add22)(u + (ch[c].a - c0), u + (ch[c].b - c0), &d);
                }
            }
            for (int64_t ey = yb[ph]; ey < yb[ph + 1]; ++ey) {
                T *restrict row = grad + tb->yidx[ey] * sy + c0;
                const T wy = tb->yw[ey];
                for (int64_t j = 0; j < span; ++j)
                    row[j] += wy * u[j];
            }
        }
    } else {
        const CHUNK *q = ch + cb[0];
        const int64_t nch = cb[PW] - cb[0];
        int64_t *restrict off = sc->off;
        V4 *restrict vb = sc->vb;
        for (int64_t ph = 0; ph < PH; ++ph) {
            const int64_t e0 = yb[ph], ny = yb[ph + 1] - e0;
            if (ny == 0) continue;
            for (int64_t i = 0; i < ny; ++i) off[i] = tb->yidx[e0 + i] * sy;
            for (int64_t pw = 0; pw < PW; ++pw) {
                const T gv = g[ph * PW + pw];
                for (int64_t c = cb[pw]; c < cb[pw + 1]; ++c) {
                    V4 d;
                    DK__RC_TFN(dk__rc_ldw)(&d, &ch[c]);
                    vb[c - cb[0]] = d * gv;
                }
            }
            for (int64_t i = 0; i < ny; i += 4)
                DK__RC_TFN(dk__rc_sparse_scatter)(grad, q, nch, vb, off + i, tb->yw + e0 + i,
                                                  ny - i < 4 ? ny - i : 4);
        }
    }
}
#endif /* DK__RC_EMIT_T */

/* ------------------------------------------------------------------------------------------ */
/* Storage-type part: reading RoIs, converting planes, the drivers.                           */

/* Batch index and geometry of every RoI; batch[k] = -1 for an index that is not an integer in
 * [0, N) (the op's check rejects those; this only keeps the kernel in bounds regardless). */
static void DK__RC_SFN(dk__rc_read_rois)(const dk_tensor *rois, const dk__rc_shape *sh,
                                         int64_t *batch, AXIS *ay, AXIS *ax)
{
    const S *r = (const S *)dk_tensor_data(rois);
    const int64_t s0 = dk_tensor_stride(rois, 0), s1 = dk_tensor_stride(rois, 1);
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

/* Rows [r0, r1] of a strided plane into a dense buffer of W-element rows, converted to T. */
static void DK__RC_SFN(dk__rc_plane_in)(T *restrict dst, const S *restrict src, int64_t sy,
                                        int64_t sx, int64_t r0, int64_t r1, int64_t W)
{
    for (int64_t r = r0; r <= r1; ++r) {
        const S *restrict s = src + r * sy;
        T *restrict d = dst + (r - r0) * W;
        if (sx == 1)
            for (int64_t c = 0; c < W; ++c) d[c] = LOAD(s + c);
        else
            for (int64_t c = 0; c < W; ++c) d[c] = LOAD(s + c * sx);
    }
}

/* A dense H x W buffer into a strided plane, converted to S. */
static void DK__RC_SFN(dk__rc_plane_out)(S *restrict dst, int64_t sy, int64_t sx,
                                         const T *restrict src, int64_t H, int64_t W)
{
    for (int64_t r = 0; r < H; ++r) {
        S *restrict d = dst + r * sy;
        const T *restrict s = src + r * W;
        if (sx == 1)
            for (int64_t c = 0; c < W; ++c) STORE(d + c, s[c]);
        else
            for (int64_t c = 0; c < W; ++c) STORE(d + c * sx, s[c]);
    }
}

/* PH x PW results of one (RoI, channel) into the output, converted to S. */
static void DK__RC_SFN(dk__rc_store_bins)(S *restrict out, const int64_t *os, const T *acc,
                                          int64_t PH, int64_t PW)
{
    for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw)
            STORE(out + ph * os[2] + pw * os[3], acc[ph * PW + pw]);
}

static void DK__RC_SFN(dk__rc_load_bins)(T *restrict g, const S *restrict gout, const int64_t *gs,
                                         int64_t PH, int64_t PW)
{
    for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw)
            g[ph * PW + pw] = LOAD(gout + ph * gs[2] + pw * gs[3]);
}

/* Forward, average pooling, input with unit column stride or any strides (plane path). */
static dk_status DK__RC_SFN(dk__rc_forward_avg_planes)(const dk__rc_ctx *cx, const TABLES *tb,
                                                       const S *in, S *out)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t H = sh->H, W = sh->W, PH = sh->PH, PW = sh->PW, NC = sh->N * sh->C;
    const int64_t *is = sh->in_s, *os = sh->out_s;
    /* In place when the plane already is T with unit column stride; otherwise each plane's band
     * of used rows is converted into a per-thread buffer first. */
    const bool in_place = DK__RC_SAME && is[3] == 1 && !DK__RC_COPY_IN;
    const int nt = cx->nthreads;
    const size_t roi_scratch = DK__RC_TFN(dk__rc_roi_scratch)(tb, sh);
    const size_t per_thread = roi_scratch + (in_place ? 0 : dk__rc_round8((size_t)(H * W)));
    const int64_t run = dk__rc_run_length(NC, nt);
    const bool out_blocks = os[3] == 1 && os[2] == PW; /* each (k, c) output is one block */
    T *scratch = (T *)dk__rc_alloc((size_t)nt * per_thread * sizeof(T));
    if (!scratch) return dk_error(DK_ENOMEM, "roi_align_forward: out of memory for scratch");
#pragma omp parallel num_threads(nt)
    {
        T *base = scratch + (size_t)omp_get_thread_num() * per_thread;
        const SCRATCH sc = DK__RC_TFN(dk__rc_scratch_at)(tb, sh, base);
        T *buf = base + roi_scratch;
        /* Note [Prefetching]: runs of consecutive planes per thread, so the next one is known. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t r0 = 0; r0 < NC; r0 += run) {
            const int64_t r1 = r0 + run < NC ? r0 + run : NC;
            for (int64_t nc = r0; nc < r1; ++nc) {
                const int64_t n = nc / sh->C, c = nc % sh->C;
                const int64_t j0 = cx->gr->beg[n], j1 = cx->gr->beg[n + 1];
                if (j0 == j1) continue;
                const S *src = in + n * is[0] + c * is[1];
                dk__rc_band next;
#if DK__RC_PF_MODE == 1
                dk__rc_band_init(&next, cx, tb->rlo, tb->rhi, in, nc, (int64_t)sizeof(S), 1);
                dk__rc_band_step(&next, 0);
                next.base = NULL;
#elif DK__RC_PF_MODE == 2
                dk__rc_band_init(&next, cx, tb->rlo, tb->rhi, in, nc, (int64_t)sizeof(S), 1);
                if (next.base) {
                    volatile char sink = 0;
                    char acc8 = 0;
                    for (int64_t r = 0; r < next.lines / next.lines_per_row; ++r)
                        for (int64_t l = 0; l < next.lines_per_row; ++l)
                            acc8 ^= next.base[r * next.row_stride + l * 64];
                    sink = acc8;
                    (void)sink;
                }
                next.base = NULL;
#else
                dk__rc_band_init(&next, cx, tb->rlo, tb->rhi, in, nc + 1 < r1 ? nc + 1 : -1,
                                 (int64_t)sizeof(S), j1 - j0);
#endif
                const T *plane;
                int64_t sy, rbase;
                if (in_place) {
                    plane = (const T *)(const void *)src;
                    sy = is[2];
                    rbase = 0;
                } else {
                    DK__RC_SFN(dk__rc_plane_in)(buf, src, is[2], is[3], tb->rlo[n], tb->rhi[n], W);
                    plane = buf;
                    sy = W;
                    rbase = tb->rlo[n];
                }
                for (int64_t j = j0; j < j1; ++j) {
                    const int64_t k = cx->gr->order[j];
                    dk__rc_band_step(&next, j - j0);
                    if (out_blocks && j + 2 < j1)
                        dk__rc_prefetch_w(out + cx->gr->order[j + 2] * os[0] + c * os[1],
                                          (size_t)(PH * PW) * sizeof(S));
                    DK__RC_TFN(dk__rc_forward_roi)(tb, k, PH, PW, plane, sy, rbase, &sc);
                    DK__RC_SFN(dk__rc_store_bins)(out + k * os[0] + c * os[1], os, sc.acc, PH, PW);
                }
            }
        }
    }
    dk__rc_free(scratch);
    return DK_OK;
}

/* Forward, average pooling, channel stride 1 (channels-last): vectorised across a block of
 * channels, direct evaluation per bin. */
static dk_status DK__RC_SFN(dk__rc_forward_avg_nhwc)(const dk__rc_ctx *cx, const TABLES *tb,
                                                     const S *in, S *out)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t PH = sh->PH, PW = sh->PW, C = sh->C;
    const int64_t *is = sh->in_s, *os = sh->out_s;
    const int64_t CB = DK__RC_BLOCK_BYTES / (int64_t)sizeof(S);
    const int64_t nb = (C + CB - 1) / CB;
    const int nt = cx->nthreads;
#pragma omp parallel num_threads(nt)
    {
        T acc[DK__RC_BLOCK_BYTES / 2];
#pragma omp for schedule(dynamic, 1)
        for (int64_t nbk = 0; nbk < sh->N * nb; ++nbk) {
            const int64_t n = nbk / nb, cb0 = (nbk % nb) * CB;
            const int64_t cbn = C - cb0 < CB ? C - cb0 : CB;
            const S *base = in + n * is[0] + cb0;
            for (int64_t j = cx->gr->beg[n]; j < cx->gr->beg[n + 1]; ++j) {
                const int64_t k = cx->gr->order[j];
                const int64_t *yb = tb->ybeg + k * PH, *xb = tb->xbeg + k * PW;
                for (int64_t ph = 0; ph < PH; ++ph)
                    for (int64_t pw = 0; pw < PW; ++pw) {
                        for (int64_t i = 0; i < cbn; ++i) acc[i] = (T)0;
                        for (int64_t ey = yb[ph]; ey < yb[ph + 1]; ++ey) {
                            const S *row = base + tb->yidx[ey] * is[2];
                            for (int64_t ex = xb[pw]; ex < xb[pw + 1]; ++ex) {
                                const T w = tb->yw[ey] * tb->xw[ex];
                                const S *restrict px = row + tb->xidx[ex] * is[3];
                                for (int64_t i = 0; i < cbn; ++i) acc[i] += w * LOAD(px + i);
                            }
                        }
                        S *o = out + k * os[0] + cb0 * os[1] + ph * os[2] + pw * os[3];
                        for (int64_t i = 0; i < cbn; ++i) STORE(o + i * os[1], acc[i]);
                    }
            }
        }
    }
    return DK_OK;
}

/* Backward, average pooling, plane path (Note [Deterministic backward]). */
static dk_status DK__RC_SFN(dk__rc_backward_avg_planes)(const dk__rc_ctx *cx, const TABLES *tb,
                                                        const S *gout, S *gin)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t H = sh->H, W = sh->W, PH = sh->PH, PW = sh->PW, NC = sh->N * sh->C;
    const int64_t *is = sh->in_s, *os = sh->out_s;
    const bool in_place = DK__RC_SAME && is[3] == 1 && !DK__RC_COPY_OUT;
    const int nt = cx->nthreads;
    const size_t roi_scratch = DK__RC_TFN(dk__rc_roi_scratch)(tb, sh);
    const size_t per_thread = roi_scratch + (in_place ? 0 : dk__rc_round8((size_t)(H * W)));
    const int64_t run = dk__rc_run_length(NC, nt);
    const bool g_blocks = os[3] == 1 && os[2] == PW;
    T *scratch = (T *)dk__rc_alloc((size_t)nt * per_thread * sizeof(T));
    if (!scratch) return dk_error(DK_ENOMEM, "roi_align_backward: out of memory for scratch");
#pragma omp parallel num_threads(nt)
    {
        T *base = scratch + (size_t)omp_get_thread_num() * per_thread;
        const SCRATCH sc = DK__RC_TFN(dk__rc_scratch_at)(tb, sh, base);
        T *buf = base + roi_scratch;
#pragma omp for schedule(dynamic, 1)
        for (int64_t r0 = 0; r0 < NC; r0 += run) {
            const int64_t r1 = r0 + run < NC ? r0 + run : NC;
            for (int64_t nc = r0; nc < r1; ++nc) {
                const int64_t n = nc / sh->C, c = nc % sh->C;
                const int64_t j0 = cx->gr->beg[n], j1 = cx->gr->beg[n + 1];
                S *dst = gin + n * is[0] + c * is[1];
                T *plane;
                int64_t sy;
                if (in_place) {
                    plane = (T *)(void *)dst;
                    sy = is[2];
                    if (sy == W) {
                        memset(plane, 0, (size_t)(H * W) * sizeof(T));
                    } else {
                        for (int64_t r = 0; r < H; ++r) memset(plane + r * sy, 0, (size_t)W * sizeof(T));
                    }
                } else {
                    plane = buf;
                    sy = W;
                    memset(plane, 0, (size_t)(H * W) * sizeof(T));
                }
                for (int64_t j = j0; j < j1; ++j) {
                    const int64_t k = cx->gr->order[j];
                    if (g_blocks && j + 2 < j1)
                        dk__rc_prefetch_r(gout + cx->gr->order[j + 2] * os[0] + c * os[1],
                                          (size_t)(PH * PW) * sizeof(S));
                    DK__RC_SFN(dk__rc_load_bins)(sc.acc, gout + k * os[0] + c * os[1], os, PH, PW);
                    DK__RC_TFN(dk__rc_backward_roi)(tb, k, PH, PW, plane, sy, &sc);
                }
                if (!in_place) DK__RC_SFN(dk__rc_plane_out)(dst, is[2], is[3], buf, H, W);
            }
        }
    }
    dk__rc_free(scratch);
    return DK_OK;
}

/* Backward, average pooling, channel stride 1: each iteration owns one channel block of one
 * image of grad_input (Note [Deterministic backward]). */
static dk_status DK__RC_SFN(dk__rc_backward_avg_nhwc)(const dk__rc_ctx *cx, const TABLES *tb,
                                                      const S *gout, S *gin)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t H = sh->H, W = sh->W, PH = sh->PH, PW = sh->PW, C = sh->C;
    const int64_t *is = sh->in_s, *os = sh->out_s;
    const int64_t CB = DK__RC_BLOCK_BYTES / (int64_t)sizeof(S);
    const int64_t nb = (C + CB - 1) / CB;
    /* Accumulate in a dense H x W x CB buffer of T unless grad_input already is T. */
    const bool in_place = DK__RC_SAME;
    const int nt = cx->nthreads;
    const size_t per_thread = in_place ? 1 : (size_t)(H * W * CB);
    T *scratch = (T *)malloc((size_t)nt * per_thread * sizeof(T));
    if (!scratch) return dk_error(DK_ENOMEM, "roi_align_backward: out of memory for scratch");
#pragma omp parallel num_threads(nt)
    {
        T *buf = scratch + (size_t)omp_get_thread_num() * per_thread;
        T g[DK__RC_BLOCK_BYTES / 2];
#pragma omp for schedule(dynamic, 1)
        for (int64_t nbk = 0; nbk < sh->N * nb; ++nbk) {
            const int64_t n = nbk / nb, cb0 = (nbk % nb) * CB;
            const int64_t cbn = C - cb0 < CB ? C - cb0 : CB;
            S *dst = gin + n * is[0] + cb0;
            T *acc;
            int64_t ay_s, ax_s;
            if (in_place) {
                acc = (T *)(void *)dst;
                ay_s = is[2];
                ax_s = is[3];
                for (int64_t r = 0; r < H; ++r)
                    for (int64_t q = 0; q < W; ++q)
                        memset(acc + r * ay_s + q * ax_s, 0, (size_t)cbn * sizeof(T));
            } else {
                acc = buf;
                ay_s = W * CB;
                ax_s = CB;
                memset(acc, 0, (size_t)(H * W * CB) * sizeof(T));
            }
            for (int64_t j = cx->gr->beg[n]; j < cx->gr->beg[n + 1]; ++j) {
                const int64_t k = cx->gr->order[j];
                const int64_t *yb = tb->ybeg + k * PH, *xb = tb->xbeg + k * PW;
                for (int64_t ph = 0; ph < PH; ++ph)
                    for (int64_t pw = 0; pw < PW; ++pw) {
                        const S *go = gout + k * os[0] + cb0 * os[1] + ph * os[2] + pw * os[3];
                        for (int64_t i = 0; i < cbn; ++i) g[i] = LOAD(go + i * os[1]);
                        for (int64_t ey = yb[ph]; ey < yb[ph + 1]; ++ey) {
                            T *row = acc + tb->yidx[ey] * ay_s;
                            for (int64_t ex = xb[pw]; ex < xb[pw + 1]; ++ex) {
                                const T w = tb->yw[ey] * tb->xw[ex];
                                T *restrict px = row + tb->xidx[ex] * ax_s;
                                for (int64_t i = 0; i < cbn; ++i) px[i] += w * g[i];
                            }
                        }
                    }
            }
            if (!in_place)
                for (int64_t r = 0; r < H; ++r)
                    for (int64_t q = 0; q < W; ++q)
                        for (int64_t i = 0; i < cbn; ++i)
                            STORE(dst + r * is[2] + q * is[3] + i, buf[(r * W + q) * CB + i]);
        }
    }
    dk__rc_free(scratch);
    return DK_OK;
}

/* Forward, max pooling: per element with the shared math; planes outside for cache reuse. */
static dk_status DK__RC_SFN(dk__rc_forward_max)(const dk__rc_ctx *cx, const AXIS *ay,
                                                const AXIS *ax, const S *in, S *out, T *amy,
                                                T *amx)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t *is = sh->in_s, *os = sh->out_s, *ys = sh->amy_s, *xs = sh->amx_s;
#pragma omp parallel for schedule(dynamic, 1) num_threads(cx->nthreads)
    for (int64_t nc = 0; nc < sh->N * sh->C; ++nc) {
        const int64_t n = nc / sh->C, c = nc % sh->C;
        const S *plane = in + n * is[0] + c * is[1];
        for (int64_t j = cx->gr->beg[n]; j < cx->gr->beg[n + 1]; ++j) {
            const int64_t k = cx->gr->order[j];
            for (int64_t ph = 0; ph < sh->PH; ++ph)
                for (int64_t pw = 0; pw < sh->PW; ++pw) {
                    T my, mx;
                    const T v = DK__RC_SFN(dk_roi_align_forward_max)(
                        plane, is[2], is[3], sh->H, sh->W, &ay[k], &ax[k], ph, pw, &my, &mx);
                    STORE(out + k * os[0] + c * os[1] + ph * os[2] + pw * os[3], v);
                    amy[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]] = my;
                    amx[k * xs[0] + c * xs[1] + ph * xs[2] + pw * xs[3]] = mx;
                }
        }
    }
    return DK_OK;
}

/* Backward, max pooling: the gradient goes bilinearly to each bin's argmax sample. Each plane
 * is owned by one iteration (Note [Deterministic backward]). */
static dk_status DK__RC_SFN(dk__rc_backward_max)(const dk__rc_ctx *cx, const S *gout,
                                                 const T *amy, const T *amx, S *gin)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t H = sh->H, W = sh->W;
    const int64_t *is = sh->in_s, *os = sh->out_s, *ys = sh->amy_s, *xs = sh->amx_s;
    const int nt = cx->nthreads;
    T *scratch = (T *)malloc((size_t)nt * (size_t)(H * W) * sizeof(T) + sizeof(T));
    if (!scratch) return dk_error(DK_ENOMEM, "roi_align_backward: out of memory for scratch");
#pragma omp parallel num_threads(nt)
    {
        T *buf = scratch + (size_t)omp_get_thread_num() * (size_t)(H * W);
#pragma omp for schedule(dynamic, 1)
        for (int64_t nc = 0; nc < sh->N * sh->C; ++nc) {
            const int64_t n = nc / sh->C, c = nc % sh->C;
            memset(buf, 0, (size_t)(H * W) * sizeof(T));
            for (int64_t j = cx->gr->beg[n]; j < cx->gr->beg[n + 1]; ++j) {
                const int64_t k = cx->gr->order[j];
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
            DK__RC_SFN(dk__rc_plane_out)(gin + n * is[0] + c * is[1], is[2], is[3], buf, H, W);
        }
    }
    dk__rc_free(scratch);
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

static dk_status DK__RC_SFN(dk__rc_forward)(dk__rc_ctx *cx, const dk_tensor *input,
                                            const dk_tensor *rois, dk_tensor *output,
                                            dk_tensor *argmax_y, dk_tensor *argmax_x)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t K = sh->K;
    AXIS *ay = (AXIS *)malloc((size_t)(K > 0 ? K : 1) * sizeof *ay);
    AXIS *ax = (AXIS *)malloc((size_t)(K > 0 ? K : 1) * sizeof *ax);
    int64_t *batch = (int64_t *)malloc((size_t)(K > 0 ? K : 1) * sizeof *batch);
    TABLES tb;
    memset(&tb, 0, sizeof tb);
    dk_status st = DK_OK;
    if (!ay || !ax || !batch) {
        st = dk_error(DK_ENOMEM, "roi_align_forward: out of memory");
        goto cleanup;
    }
    DK__RC_SFN(dk__rc_read_rois)(rois, sh, batch, ay, ax);
    st = dk__rc_groups_build(cx, batch);
    if (st != DK_OK) goto cleanup;
    const S *in = (const S *)dk_tensor_data(input);
    S *out = (S *)dk_tensor_data(output);
    T *amy = argmax_y ? (T *)dk_tensor_data(argmax_y) : NULL;
    T *amx = argmax_x ? (T *)dk_tensor_data(argmax_x) : NULL;
    if (sh->max_mode) {
        st = DK__RC_SFN(dk__rc_forward_max)(cx, ay, ax, in, out, amy, amx);
    } else {
        st = DK__RC_TFN(dk__rc_tables_build)(&tb, sh, cx->gr, ay, ax, !dk__rc_use_nhwc(sh));
        if (st != DK_OK) goto cleanup;
        if (dk__rc_use_nhwc(sh))
            st = DK__RC_SFN(dk__rc_forward_avg_nhwc)(cx, &tb, in, out);
        else
            st = DK__RC_SFN(dk__rc_forward_avg_planes)(cx, &tb, in, out);
    }
    if (st == DK_OK) DK__RC_SFN(dk__rc_forward_orphans)(cx, out, amy, amx);
cleanup:
    DK__RC_TFN(dk__rc_tables_free)(&tb);
    free(ay);
    free(ax);
    free(batch);
    return st;
}

static dk_status DK__RC_SFN(dk__rc_backward)(dk__rc_ctx *cx, const dk_tensor *grad_output,
                                             const dk_tensor *rois, const dk_tensor *argmax_y,
                                             const dk_tensor *argmax_x, dk_tensor *grad_input)
{
    const dk__rc_shape *sh = cx->sh;
    const int64_t K = sh->K;
    AXIS *ay = (AXIS *)malloc((size_t)(K > 0 ? K : 1) * sizeof *ay);
    AXIS *ax = (AXIS *)malloc((size_t)(K > 0 ? K : 1) * sizeof *ax);
    int64_t *batch = (int64_t *)malloc((size_t)(K > 0 ? K : 1) * sizeof *batch);
    TABLES tb;
    memset(&tb, 0, sizeof tb);
    dk_status st = DK_OK;
    if (!ay || !ax || !batch) {
        st = dk_error(DK_ENOMEM, "roi_align_backward: out of memory");
        goto cleanup;
    }
    DK__RC_SFN(dk__rc_read_rois)(rois, sh, batch, ay, ax);
    st = dk__rc_groups_build(cx, batch);
    if (st != DK_OK) goto cleanup;
    const S *gout = (const S *)dk_tensor_data(grad_output);
    S *gin = (S *)dk_tensor_data(grad_input);
    if (sh->max_mode) {
        st = DK__RC_SFN(dk__rc_backward_max)(cx, gout, (const T *)dk_tensor_data(argmax_y),
                                             (const T *)dk_tensor_data(argmax_x), gin);
    } else {
        st = DK__RC_TFN(dk__rc_tables_build)(&tb, sh, cx->gr, ay, ax, !dk__rc_use_nhwc(sh));
        if (st != DK_OK) goto cleanup;
        if (dk__rc_use_nhwc(sh))
            st = DK__RC_SFN(dk__rc_backward_avg_nhwc)(cx, &tb, gout, gin);
        else
            st = DK__RC_SFN(dk__rc_backward_avg_planes)(cx, &tb, gout, gin);
    }
cleanup:
    DK__RC_TFN(dk__rc_tables_free)(&tb);
    free(ay);
    free(ax);
    free(batch);
    return st;
}

#undef T
#undef S
#undef AXIS
#undef TABLES
#undef CHUNK
#undef SCRATCH
#undef V4
#undef LOAD
#undef STORE

#else /* !DK__RC_TEMPLATE */
/* ========================================================================================== */

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dk_registry.h"
#include "kernels/roi_align.h"
#include "roi_align.h" /* ops/roi_align.h: the op's declaration */

/* Evaluation order of the plane path: -1 picks per RoI by cost (Note [Separable weight tables]);
 * 0 or 1 force direct or dense everywhere (tests build it both ways to cover both). */
#ifndef DK__RC_COPY_OUT
#define DK__RC_COPY_OUT 0
#endif
#ifndef DK__RC_COPY_IN
#define DK__RC_COPY_IN 0
#endif
#ifndef DK__RC_PF_MODE
#define DK__RC_PF_MODE 0
#endif
#ifndef DK__RC_DENSE
#define DK__RC_DENSE -1
#endif

/* Bytes of channels one channels-last iteration handles: one cache line per pixel. */
#define DK__RC_BLOCK_BYTES 64

/* Sizes, options and element strides of one call. in_s is input (forward) or grad_input
 * (backward), [n, c, h, w]; out_s is output or grad_output, [k, c, ph, pw]. */
typedef struct {
    int64_t N, C, H, W, K, PH, PW;
    int64_t sampling_ratio;
    double spatial_scale;
    bool aligned;
    bool max_mode;
    int64_t in_s[4], out_s[4], amy_s[4], amx_s[4];
} dk__rc_shape;

/* The RoIs of each image in index order: order[beg[n] .. beg[n + 1]). */
typedef struct {
    int64_t *beg;     /* N + 1 */
    int64_t *order;   /* K */
    int64_t *orphans; /* RoIs with an unusable batch index */
    int64_t norphans;
} dk__rc_groups;

typedef struct {
    const dk__rc_shape *sh;
    dk__rc_groups *gr;
    int nthreads;
} dk__rc_ctx;

static size_t dk__rc_round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Lane shuffle of two generic vectors (indices 4..7 pick from b). */
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

/* Scratch is 64-byte aligned (a cache line; V4 of double needs 32). */
static void *dk__rc_alloc(size_t bytes) { return aligned_alloc(64, (bytes + 64) & ~(size_t)63); }
static void dk__rc_free(void *p) { free(p); }

/*
 * Note [Prefetching]
 * A plane (200 KB for 200x272 float) is read by its RoIs in no order a hardware prefetcher can
 * follow, so its first touch costs one memory latency per cache line, which measured as a third
 * of the forward time. Each thread therefore walks runs of consecutive planes, and while it
 * serves the RoIs of one plane it prefetches the used band of the next plane into L2, a slice
 * per RoI. Output (forward) and grad_output (backward) blocks are prefetched two RoIs ahead.
 */
#define DK__RC_LINE 64

static void dk__rc_prefetch_w(const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += DK__RC_LINE) __builtin_prefetch((const char *)p + o, 1, 3);
}

static void dk__rc_prefetch_r(const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += DK__RC_LINE) __builtin_prefetch((const char *)p + o, 0, 3);
}

/* Planes per scheduling unit: long runs for prefetching, enough units to balance threads. */
static int64_t dk__rc_run_length(int64_t planes, int nthreads)
{
    const int64_t run = planes / ((int64_t)nthreads * 8);
    return run < 1 ? 1 : (run > 16 ? 16 : run);
}

/* The used band of one plane, prefetched in `steps` slices. */
typedef struct {
    const char *base; /* first used row; NULL: nothing to prefetch */
    int64_t row_stride, lines_per_row, lines, steps;
} dk__rc_band;

/* Band of plane `nc` (< 0: none) of `data`, whose elements are `esize` bytes; only for unit
 * column stride. rlo / rhi are the per-image used rows from the weight tables. */
static void dk__rc_band_init(dk__rc_band *b, const dk__rc_ctx *cx, const int32_t *rlo,
                             const int32_t *rhi, const void *data, int64_t nc, int64_t esize,
                             int64_t steps)
{
    const dk__rc_shape *sh = cx->sh;
    b->base = NULL;
    if (nc < 0 || sh->in_s[3] != 1) return;
    const int64_t n = nc / sh->C, c = nc % sh->C;
    if (rlo[n] > rhi[n]) return;
    b->base = (const char *)data + (n * sh->in_s[0] + c * sh->in_s[1] + rlo[n] * sh->in_s[2]) * esize;
    b->row_stride = sh->in_s[2] * esize;
    b->lines_per_row = (sh->W * esize + DK__RC_LINE - 1) / DK__RC_LINE;
    b->lines = (rhi[n] - rlo[n] + 1) * b->lines_per_row;
    b->steps = steps > 0 ? steps : 1;
}

/* Slice i of b->steps. */
static void dk__rc_band_step(const dk__rc_band *b, int64_t i)
{
    if (!b->base) return;
    for (int64_t l = i * b->lines / b->steps; l < (i + 1) * b->lines / b->steps; ++l)
        __builtin_prefetch(b->base + (l / b->lines_per_row) * b->row_stride +
                               (l % b->lines_per_row) * DK__RC_LINE, 0, 2);
}

/* Channels-last kernels when channels are the unit-stride dimension and columns are not. */
static bool dk__rc_use_nhwc(const dk__rc_shape *sh) { return sh->in_s[1] == 1 && sh->in_s[3] != 1 && sh->C > 1; }

/* Counting sort of the RoIs by batch index, stable, so each image's RoIs stay in index order. */
static dk_status dk__rc_groups_build(dk__rc_ctx *cx, const int64_t *batch)
{
    const int64_t N = cx->sh->N, K = cx->sh->K;
    dk__rc_groups *gr = cx->gr;
    gr->beg = (int64_t *)calloc((size_t)N + 2, sizeof *gr->beg);
    gr->order = (int64_t *)malloc((size_t)(K > 0 ? K : 1) * sizeof *gr->order);
    gr->orphans = (int64_t *)malloc((size_t)(K > 0 ? K : 1) * sizeof *gr->orphans);
    if (!gr->beg || !gr->order || !gr->orphans)
        return dk_error(DK_ENOMEM, "roi_align: out of memory");
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

static void dk__rc_groups_free(dk__rc_groups *gr)
{
    free(gr->beg);
    free(gr->order);
    free(gr->orphans);
}

static void dk__rc_strides(const dk_tensor *t, int64_t *s)
{
    for (int d = 0; d < 4; ++d) s[d] = t ? dk_tensor_stride(t, d) : 0;
}

/* Instantiations (see the template at the top of this file). */
#define DK__RC_CAT_I(a, b) a##b
#define DK__RC_CAT(a, b) DK__RC_CAT_I(a, b)
#define DK__RC_TFN(name) DK__RC_CAT(name, DK__RC_TSUFFIX)
#define DK__RC_SFN(name) DK__RC_CAT(name, DK__RC_SSUFFIX)
#define DK__RC_TEMPLATE

#define DK__RC_T float
#define DK__RC_TBITS 32
#define DK__RC_TSUFFIX _f32
#define DK__RC_S float
#define DK__RC_SSUFFIX _f32
#define DK__RC_EMIT_T 1
#define DK__RC_SAME 1
#include "roi_align_cpu.c"
#undef DK__RC_S
#undef DK__RC_SSUFFIX
#undef DK__RC_EMIT_T
#undef DK__RC_SAME

#define DK__RC_S uint16_t
#define DK__RC_SSUFFIX _f16
#define DK__RC_EMIT_T 0
#define DK__RC_SAME 0
#include "roi_align_cpu.c"
#undef DK__RC_S
#undef DK__RC_SSUFFIX
#undef DK__RC_EMIT_T
#undef DK__RC_SAME

#define DK__RC_S uint16_t
#define DK__RC_SSUFFIX _bf16
#define DK__RC_EMIT_T 0
#define DK__RC_SAME 0
#include "roi_align_cpu.c"
#undef DK__RC_S
#undef DK__RC_SSUFFIX
#undef DK__RC_EMIT_T
#undef DK__RC_SAME
#undef DK__RC_T
#undef DK__RC_TBITS
#undef DK__RC_TSUFFIX

#define DK__RC_T double
#define DK__RC_TBITS 64
#define DK__RC_TSUFFIX _f64
#define DK__RC_S double
#define DK__RC_SSUFFIX _f64
#define DK__RC_EMIT_T 1
#define DK__RC_SAME 1
#include "roi_align_cpu.c"
#undef DK__RC_S
#undef DK__RC_SSUFFIX
#undef DK__RC_EMIT_T
#undef DK__RC_SAME
#undef DK__RC_T
#undef DK__RC_TBITS
#undef DK__RC_TSUFFIX
#undef DK__RC_TEMPLATE

/* Shape and strides common to both directions; `img` is input or grad_input, `bins` is output
 * or grad_output. */
static dk_status dk__rc_shape_init(dk__rc_shape *sh, const dk_tensor *img, const dk_tensor *bins,
                                   const dk_tensor *rois, const dk_tensor *amy,
                                   const dk_tensor *amx, int64_t PH, int64_t PW, double scale,
                                   int64_t sampling_ratio, int64_t pool_mode, bool aligned,
                                   const char *op)
{
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
    dk__rc_strides(img, sh->in_s);
    dk__rc_strides(bins, sh->out_s);
    dk__rc_strides(amy, sh->amy_s);
    dk__rc_strides(amx, sh->amx_s);
    /* The weight tables index rows and columns with int32. */
    if (sh->H > INT32_MAX - 1 || sh->W > INT32_MAX - 1)
        return dk_error(DK_EINVAL, "%s: input height and width must be below 2^31 - 1 (got %lld x %lld)",
                        op, (long long)sh->H, (long long)sh->W);
    return DK_OK;
}

static int dk__rc_threads(const dk__rc_shape *sh)
{
    /* Tiny calls are not worth waking the team. */
    const int64_t work = sh->K * sh->C * sh->PH * sh->PW + sh->N * sh->C * sh->H * sh->W;
    return work < 32768 ? 1 : omp_get_max_threads();
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
                                     aligned, "roi_align_forward");
    if (st != DK_OK) return st;
    if (sh.K == 0 || sh.C == 0) return DK_OK;
    dk__rc_groups gr = {NULL, NULL, NULL, 0};
    dk__rc_ctx cx = {&sh, &gr, dk__rc_threads(&sh)};
    switch (dk_tensor_dtype(input)) {
    case DK_FLOAT32: st = dk__rc_forward_f32(&cx, input, rois, output, argmax_y, argmax_x); break;
    case DK_FLOAT64: st = dk__rc_forward_f64(&cx, input, rois, output, argmax_y, argmax_x); break;
    case DK_FLOAT16: st = dk__rc_forward_f16(&cx, input, rois, output, argmax_y, argmax_x); break;
    case DK_BFLOAT16: st = dk__rc_forward_bf16(&cx, input, rois, output, argmax_y, argmax_x); break;
    default:
        st = dk_error(DK_ETYPE, "roi_align_forward: unsupported dtype %s",
                      dk_dtype_name(dk_tensor_dtype(input)));
    }
    dk__rc_groups_free(&gr);
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
                                     pool_mode, aligned, "roi_align_backward");
    if (st != DK_OK) return st;
    if (sh.N == 0 || sh.C == 0 || sh.H == 0 || sh.W == 0) return DK_OK; /* nothing to write */
    dk__rc_groups gr = {NULL, NULL, NULL, 0};
    dk__rc_ctx cx = {&sh, &gr, dk__rc_threads(&sh)};
    switch (dk_tensor_dtype(grad_output)) {
    case DK_FLOAT32: st = dk__rc_backward_f32(&cx, grad_output, rois, argmax_y, argmax_x, grad_input); break;
    case DK_FLOAT64: st = dk__rc_backward_f64(&cx, grad_output, rois, argmax_y, argmax_x, grad_input); break;
    case DK_FLOAT16: st = dk__rc_backward_f16(&cx, grad_output, rois, argmax_y, argmax_x, grad_input); break;
    case DK_BFLOAT16: st = dk__rc_backward_bf16(&cx, grad_output, rois, argmax_y, argmax_x, grad_input); break;
    default:
        st = dk_error(DK_ETYPE, "roi_align_backward: unsupported dtype %s",
                      dk_dtype_name(dk_tensor_dtype(grad_output)));
    }
    dk__rc_groups_free(&gr);
    return st;
}

DK_REGISTER_DEVICE_IMPL(roi_align_forward, CPU, dk_roi_align_forward_cpu)
DK_REGISTER_DEVICE_IMPL(roi_align_backward, CPU, dk_roi_align_backward_cpu)

#endif /* DK__RC_TEMPLATE */
