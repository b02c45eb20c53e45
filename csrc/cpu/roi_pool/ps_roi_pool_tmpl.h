/*
 * roi_pool/ps_roi_pool_tmpl.h — ps_roi_pool (R-FCN's position-sensitive RoIPool) on the CPU, for one
 * storage type (Note [Templates in C] in kernels/dk_template.h). roi_pool_cpu.c instantiates it
 * after the templates whose helpers it uses: roi_pool_tmpl.h's RoI readers. Note [Position-sensitive
 * RoIPool on a CPU] in ps_roi_pool_cpu.h says how the work is split.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* What a position-sensitive forward task per RoI and block of output channels reads of its call
 * (ps_roi_align's forward: ps_roi_align_tmpl.h): the input and output, their strides, the
 * output's channels and their blocks of DK__RP_CHANNELS. */
typedef struct {
    const DK_S *x;
    DK_S *y;
    int64_t xs[4], ys[4], cout, chunks;
} DK_SFN(dk__rp_ps_view);

static inline DK_SFN(dk__rp_ps_view) DK_SFN(dk__rp_ps_view_of)(const dk__rp_ctx *cx)
{
    DK_SFN(dk__rp_ps_view) v;
    v.x = (const DK_S *)dk_tensor_data(cx->img);
    v.y = (DK_S *)dk_tensor_data(cx->bins);
    dk__rp_strides(cx->img, v.xs), dk__rp_strides(cx->bins, v.ys);
    v.cout = cx->bins->shape[1];
    v.chunks = (v.cout + DK__RP_CHANNELS - 1) / DK__RP_CHANNELS;
    return v;
}

/* Whether to work on channels-last blocks (cx->ps_layout, or the cost model: cx->ps_work at least
 * one per `per_pixel` pixels of the map, Notes [Position-sensitive RoIPool on a CPU] and [RoIAlign's
 * position-sensitive form on a CPU]), and if so a block per thread (cx->block). The blocks come
 * from the host cache (Note [Host output cache]), not the arena: a call's arena is new memory each
 * time, whose pages the threads fault in (on two threads glibc returned the blocks to the system
 * after every call: some 290 faults a call), where the cache's stay mapped; the arena holds them
 * only when the cache has none. dk__ps_blocks_release gives them back. */
static dk_status DK_SFN(dk__ps_blocks)(dk__rp_ctx *cx, dk_arena *ar, int nthreads, int64_t per_pixel, const char *what)
{
    const bool fits = cx->H * cx->W <= DK__RP_BLOCK_MAX_BYTES / ((int64_t)sizeof(DK_T) * DK__RP_CHANNELS);
    const bool blocks = cx->ps_layout == 1 ||
                        (cx->ps_layout == -1 && fits && cx->ps_work >= cx->N * cx->H * cx->W / per_pixel);
    cx->block = NULL;
    cx->block_owner = NULL;
    if (!blocks) return DK_OK;
    const size_t n = dk_sat_mul((size_t)nthreads, dk_sat_mul((size_t)(cx->H * cx->W), DK__RP_CHANNELS));
    if (n < SIZE_MAX / sizeof(DK_T) && dk_host_cache_alloc(n * sizeof(DK_T), &cx->block, &cx->block_owner) != DK_OK)
        cx->block = NULL, cx->block_owner = NULL;
    if (!cx->block) cx->block = dk_arena_take_n(ar, n, sizeof(DK_T));
    /* the cost model's choice falls back to the planes; a forced one says why it cannot */
    return cx->block || cx->ps_layout == -1
               ? DK_OK
               : dk_error(DK_ENOMEM, "%s: out of memory for %d channels-last blocks of %lld x %lld x %d", what,
                          nthreads, (long long)cx->H, (long long)cx->W, DK__RP_CHANNELS);
}

/* A task's share of the work: image n, bin (ph, pw), output channels [c0, c0 + nc), so input
 * channels (c PH + ph) PW + pw, planes `cstep` elements apart (of a tensor with strides s). */
typedef struct {
    int64_t n, ph, pw, c0, cstep;
    int nc;
} DK_SFN(dk__ps_task);

static inline DK_SFN(dk__ps_task)
    DK_SFN(dk__ps_task_of)(const dk__rp_ctx *cx, int64_t t, int64_t cout, const int64_t s[4])
{
    const int64_t chunks = (cout + DK__RP_CHANNELS - 1) / DK__RP_CHANNELS, bins = cx->PH * cx->PW;
    DK_SFN(dk__ps_task) a;
    a.c0 = t % chunks * DK__RP_CHANNELS;
    a.nc = (int)(a.c0 + DK__RP_CHANNELS < cout ? DK__RP_CHANNELS : cout - a.c0);
    const int64_t b = t / chunks % bins;
    a.n = t / chunks / bins, a.ph = b / cx->PW, a.pw = b % cx->PW;
    a.cstep = bins * s[1];
    return a;
}

/* The block's planes, channels last in the compute type: buf[(h W + w) L + j] is plane j's
 * (h, w), L = DK__PSA_LANES(nc) lanes, those past nc a copy of plane nc - 1 (no branch per plane;
 * never stored: the tasks compute them and drop them). A row at a time (its part of the block
 * stays in L1), four planes' rows at a time, read as streams and transposed four pixels at a time
 * (eight with AVX2 for float32: dk__ps_row_load_avx2) where the storage is the compute type and
 * the columns are dense. */
static void DK_SFN(dk__ps_block_load)(const dk__rp_ctx *cx, const DK_S *img, const int64_t xs[4],
                                      const DK_SFN(dk__ps_task) *a, DK_T *buf)
{
    const int L = DK__PSA_LANES(a->nc);
    const bool vec = xs[3] == 1 && sizeof(DK_S) == sizeof(DK_T);
    const int64_t ahead = xs[3] == 1 ? cx->ps_copy_ahead : 0, last = (cx->W - 1) * (int64_t)sizeof(DK_S);
    _Static_assert(DK__RP_CHANNELS <= 16, "dk__ps_row_load_avx2 is compiled for 4, 8, 12 and 16 lanes");
    const DK_S *plane[DK__RP_CHANNELS], *src[DK__RP_CHANNELS];
    for (int j = 0; j < L; j++) plane[j] = img + (j < a->nc ? j : a->nc - 1) * a->cstep;
    for (int64_t h = 0; h < cx->H; h++) {
        DK_T *row = buf + h * cx->W * L;
        /* the planes' rows `ahead` rows on (the first ones too, at the first row): Note [Copying ahead] */
        for (int64_t r = h == 0 ? 1 : h + ahead; ahead > 0 && r <= h + ahead && r < cx->H; r++)
            for (int i = 0; i < a->nc; i++) {
                const uintptr_t end = (uintptr_t)(const void *)(plane[i] + r * xs[2]) + (uintptr_t)last;
                uintptr_t q = (uintptr_t)(const void *)(plane[i] + r * xs[2]) & ~(uintptr_t)63;
                for (; q <= end; q += 64) __builtin_prefetch((const void *)q);
            }
        for (int j = 0; j < L; j++) src[j] = plane[j] + h * xs[2];
        int64_t w0 = 0;
#if DK__RP_AVX2
        if (vec && cx->ps_avx2 && sizeof(DK_T) == sizeof(float))
            w0 = dk__ps_row_load_avx2((const float *const *)(const void *)src, (float *)(void *)row, L, cx->W);
#endif
        for (int u = 0; u < L; u += 4) {
            int64_t w = w0;
            if (vec)
                for (; w + 4 <= cx->W; w += 4) {
                    DK_TFN(dk_v4) v[4];
                    for (int i = 0; i < 4; i++) DK_TFN(dk_ld4)(&v[i], (const DK_T *)(const void *)(src[u + i] + w));
                    DK_TFN(dk_transpose4)(v);
                    for (int i = 0; i < 4; i++) DK_TFN(dk_st4)(row + (w + i) * L + u, &v[i]);
                }
            for (; w < cx->W; w++)
                for (int i = 0; i < 4; i++) row[w * L + u + i] = DK_LOAD(src[u + i][w * xs[3]]);
        }
    }
}

/* Four pixels of four planes from a channels-last row (lanes u .. u + 3 of row[(w + i) L]) to
 * dst[0 .. n4)[w ..], transposed; streamed where `stream` (16-byte aligned stores). */
__attribute__((always_inline)) static inline void DK_SFN(dk__ps_store4)(const DK_T *row, int L, int u, int64_t w,
                                                                        DK_S *const dst[4], int n4, bool stream)
{
    DK_TFN(dk_v4) v[4];
    for (int i = 0; i < 4; i++) DK_TFN(dk_ld4)(&v[i], row + (w + i) * L + u);
    DK_TFN(dk_transpose4)(v);
    for (int i = 0; i < n4; i++) {
        DK_T *to = (DK_T *)(void *)(dst[i] + w);
        if (stream) DK_TFN(dk_stream4)(to, &v[i]);
        else DK_TFN(dk_st4)(to, &v[i]);
    }
}

/* The block back into its planes (dk__ps_block_load's inverse): a row at a time, four planes at a
 * time, streamed (Note [Streaming stores]) where cx->stream asks and the planes are aligned alike.
 * Whole groups of four planes, streamed or not, each a loop of its own with no branch per store. */
static void DK_SFN(dk__ps_block_store)(const dk__rp_ctx *cx, DK_S *img, const int64_t xs[4],
                                       const DK_SFN(dk__ps_task) *a, const DK_T *buf)
{
    const int L = DK__PSA_LANES(a->nc);
    const bool vec = xs[3] == 1 && sizeof(DK_S) == sizeof(DK_T);
    const bool stream = cx->stream && vec && a->cstep * (int64_t)sizeof(DK_S) % 16 == 0;
    for (int64_t h = 0; h < cx->H; h++) {
        const DK_T *row = buf + h * cx->W * L;
        for (int u = 0; u < a->nc; u += 4) {
            const int n4 = a->nc - u < 4 ? a->nc - u : 4;
            DK_S *dst[4];
            for (int i = 0; i < 4; i++) dst[i] = img + (u + (i < n4 ? i : 0)) * a->cstep + h * xs[2];
            int64_t w = 0;
            if (stream) /* to the first 16-byte boundary, the same in every plane */
                for (; w < cx->W && (uintptr_t)(dst[0] + w) % 16 != 0; w++)
                    for (int i = 0; i < n4; i++) dst[i][w] = DK_STORE(row[w * L + u + i]);
            if (vec && n4 == 4 && stream)
                for (; w + 4 <= cx->W; w += 4) DK_SFN(dk__ps_store4)(row, L, u, w, dst, 4, true);
            else if (vec && n4 == 4)
                for (; w + 4 <= cx->W; w += 4) DK_SFN(dk__ps_store4)(row, L, u, w, dst, 4, false);
            else if (vec)
                for (; w + 4 <= cx->W; w += 4) DK_SFN(dk__ps_store4)(row, L, u, w, dst, n4, stream);
            for (; w < cx->W; w++)
                for (int i = 0; i < n4; i++) dst[i][w * xs[3]] = DK_STORE(row[w * L + u + i]);
        }
    }
}

/* Every RoI's axes, found once per call for the tasks that all read them (Note [Position-sensitive
 * RoIPool on a CPU]): cx->roi_batch[k] (its image, or -1), and in cx->bin_table the rows of
 * [PH][K] x (h0, h1) followed by the columns of [PW][K] x (w0, w1), so that the task of bin
 * (ph, pw) reads its two rows of bounds in order of k. dk_roi_pool_bin's bounds, one axis at a
 * time (what it computes per axis: a bin is (rows of ph) x (columns of pw), empty when either is).
 * Also each image's RoIs (cx->image_rois) and the cost model's pixels of a bin (cx->ps_work: over
 * the RoIs with an image, their bins' pixels over PH PW). */
static void DK_SFN(dk__psp_table)(dk__rp_ctx *cx)
{
    const int64_t K = cx->K;
    int64_t *rows = cx->bin_table, *cols = cx->bin_table + cx->PH * K * 2, *batch = cx->roi_batch;
    for (int64_t k = 0; k < K; k++) {
        batch[k] = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx, k, 0), cx->N);
        const DK_TFN(dk_roi_pool_roi) r = DK_SFN(dk__rp_roi)(cx, k);
        for (int64_t ph = 0; ph < cx->PH; ph++)
            DK_TFN(dk_roi_pool_axis)(&r, true, ph, cx->H, rows + (ph * K + k) * 2, rows + (ph * K + k) * 2 + 1);
        for (int64_t pw = 0; pw < cx->PW; pw++)
            DK_TFN(dk_roi_pool_axis)(&r, false, pw, cx->W, cols + (pw * K + k) * 2, cols + (pw * K + k) * 2 + 1);
        if (r.none) batch[k] = -1; /* dk_roi_pool_bin's every bin empty (MMCV's kind only) */
    }
    double pixels = 0; /* in double: PH H x PW W per RoI may pass int64 */
    for (int64_t k = 0; k < K; k++) {
        if (batch[k] < 0) continue;
        int64_t hs = 0, ws = 0;
        for (int64_t ph = 0; ph < cx->PH; ph++) hs += dk__psp_len(rows + (ph * K + k) * 2);
        for (int64_t pw = 0; pw < cx->PW; pw++) ws += dk__psp_len(cols + (pw * K + k) * 2);
        pixels += (double)hs * (double)ws;
    }
    pixels /= (double)(cx->PH * cx->PW);
    cx->ps_work = pixels < (double)(INT64_MAX / 2) ? (int64_t)pixels : INT64_MAX / 2;
    dk__rp_image_rois(batch, sizeof *batch, K, cx->N, cx->image_rois);
}

/* The first and last RoI (k0, k1) of forward task t, and its output channel. */
static inline int64_t DK_SFN(dk__psp_task)(const dk__rp_ctx *cx, int64_t t, int64_t *k0, int64_t *k1)
{
    const int64_t blocks = (cx->K + cx->roi_block - 1) / cx->roi_block, b = t % blocks;
    *k0 = b * cx->roi_block;
    *k1 = *k0 + cx->roi_block < cx->K ? *k0 + cx->roi_block : cx->K;
    return t / blocks;
}

/* Forward: a task per output channel c and block of cx->roi_block RoIs, walking the PH PW input
 * channels of c one plane at a time: bin (ph, pw) of each RoI of the block on input channel
 * (c PH + ph) PW + pw, dk_roi_pool_avg's sum in its order. While it pools one plane it prefetches
 * the next (Note [Position-sensitive RoIPool on a CPU]). */
static void DK_SFN(dk__rp_ps_forward_worker)(void *p, int tid)
{
    (void)tid;
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_S *x = (const DK_S *)dk_tensor_data(cx->img);
    DK_S *y = (DK_S *)dk_tensor_data(cx->bins);
    int64_t xs[4], ys[4];
    dk__rp_strides(cx->img, xs), dk__rp_strides(cx->bins, ys);
    const int64_t K = cx->K, PH = cx->PH, PW = cx->PW, *batch = cx->roi_batch;
    const int64_t *rows = cx->bin_table, *cols = cx->bin_table + PH * K * 2;
    const int64_t tasks = cx->bins->shape[1] * ((K + cx->roi_block - 1) / cx->roi_block);
    /* planes of whole rows are read ahead: the next plane of each image, `bytes` from its start */
    const bool dense = xs[3] == 1 && xs[2] == cx->W;
    const int64_t bytes = cx->H * cx->W * (int64_t)sizeof(DK_S), image = xs[0] * (int64_t)sizeof(DK_S);
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < tasks;) {
        int64_t k0, k1;
        const int64_t c = DK_SFN(dk__psp_task)(cx, t, &k0, &k1);
        const int64_t per = (cx->N * bytes / 64) / (k1 - k0) + 1; /* lines per RoI */
        for (int64_t b = 0; b < PH * PW; b++) {
            const int64_t ph = b / PW, pw = b % PW;
            const DK_S *plane = x + (c * PH * PW + b) * xs[1];
            const int64_t *hb = rows + ph * K * 2, *wb = cols + pw * K * 2;
            DK_S *out = y + c * ys[1] + ph * ys[2] + pw * ys[3];
            /* the line to prefetch next (NULL: none left), the end of its image's plane, and that image */
            const char *pf = dense && bytes > 0 && b + 1 < PH * PW ? (const char *)(plane + xs[1]) : NULL;
            const char *pf_end = pf ? pf + bytes : NULL;
            int64_t pf_n = 0;
            for (int64_t k = k0; k < k1; k++) {
                for (int64_t j = 0; pf && j < per; j++) {
                    __builtin_prefetch(pf);
                    if ((pf += 64) < pf_end) continue;
                    if (++pf_n < cx->N) pf = (const char *)(plane + xs[1]) + pf_n * image, pf_end = pf + bytes;
                    else pf = NULL;
                }
                const int64_t n = batch[k], h0 = hb[2 * k], h1 = hb[2 * k + 1], w0 = wb[2 * k], w1 = wb[2 * k + 1];
                const bool some = n >= 0 && h1 > h0 && w1 > w0;
                const DK_S *img = plane + (some ? n : 0) * xs[0];
                /* rows of contiguous pixels (NCHW): the compiler sees the unit stride */
                const DK_T v = xs[3] == 1 ? DK_SFN(dk_roi_pool_avg)(img, xs[2], 1, some, h0, h1, w0, w1)
                                          : DK_SFN(dk_roi_pool_avg)(img, xs[2], xs[3], some, h0, h1, w0, w1);
                out[k * ys[0]] = DK_STORE(v);
            }
        }
    }
}

/* The output lines of the RoI DK__PSP_OUT_AHEAD places after the i-th of task a's image
 * (Note [Storing ahead]), prefetched. */
static inline void DK_SFN(dk__ps_store_ahead)(const dk__rp_ctx *cx, const DK_SFN(dk__rp_ps_view) *v,
                                              const DK_SFN(dk__ps_task) *a, int64_t i)
{
    if (i + DK__PSP_OUT_AHEAD >= cx->image_rois[a->n + 1]) return;
    const int64_t k = cx->image_rois[cx->N + 1 + i + DK__PSP_OUT_AHEAD];
    const DK_S *o = v->y + k * v->ys[0] + a->c0 * v->ys[1] + a->ph * v->ys[2] + a->pw * v->ys[3];
    for (int j = 0; j < a->nc; j++) __builtin_prefetch(o + j * v->ys[1], 1);
}

/* Forward on a channels-last block (Note [Position-sensitive RoIPool on a CPU]): task a's planes
 * copied into buf, then every RoI of its image pooled from it, nv vectors of four output channels
 * per pixel, taken two at a time (dk_v8: one AVX register for float where the caller is compiled
 * for AVX2, dk__psp_pool_block_avx2): each lane's sum is dk_roi_pool_avg's, the same terms in the
 * same order, divided by the same area (a vector division rounds each lane as the scalar one does).
 * nv a constant in each caller (dk__psp_pool_block_nv), so the lanes' loops unroll. */
__attribute__((always_inline)) static inline void DK_SFN(dk__psp_pool_block)(const dk__rp_ctx *cx,
                                                                             const DK_SFN(dk__rp_ps_view) *v,
                                                                             const DK_SFN(dk__ps_task) *a,
                                                                             const DK_T *buf, int nv)
{
    const int64_t K = cx->K, W = cx->W, L = 4 * nv, *list = cx->image_rois + cx->N + 1, SL = cx->ps_stage_lanes;
    const int64_t *hb = cx->bin_table + a->ph * K * 2, *wb = cx->bin_table + (cx->PH + a->pw) * K * 2;
    const int n8 = nv / 2, odd = nv % 2; /* lanes [0, 8 n8) in pairs, then one vector of four if odd */
    /* this bin's row of the staged outputs (Note [Staged outputs]), at the task's first lane */
    DK_T *stage = cx->stage ? (DK_T *)cx->stage + (a->ph * cx->PW + a->pw) * cx->ps_stage_row + a->c0 : NULL;
    for (int64_t i = cx->image_rois[a->n]; i < cx->image_rois[a->n + 1]; i++) {
        const int64_t k = list[i], h0 = hb[2 * k], h1 = hb[2 * k + 1], w0 = wb[2 * k], w1 = wb[2 * k + 1];
        if (!stage) DK_SFN(dk__ps_store_ahead)(cx, v, a, i);
        DK_TFN(dk_v8) acc[2] = {{0}, {0}};
        DK_TFN(dk_v4) tail = {0, 0, 0, 0};
        if (h1 > h0 && w1 > w0) { /* else 0, as dk_roi_pool_avg gives an empty bin */
            for (int64_t h = h0; h < h1; h++) {
                const DK_T *px = buf + (h * W + w0) * L;
                for (int64_t w = w0; w < w1; w++, px += L) {
                    for (int u = 0; u < n8; u++) {
                        DK_TFN(dk_v8) x;
                        DK_TFN(dk_ld8)(&x, px + 8 * u);
                        acc[u] += x;
                    }
                    if (odd) {
                        DK_TFN(dk_v4) x;
                        DK_TFN(dk_ld4)(&x, px + 8 * n8);
                        tail += x;
                    }
                }
            }
            const DK_T area = (DK_T)((h1 - h0) * (w1 - w0));
            for (int u = 0; u < n8; u++) acc[u] = acc[u] / area;
            if (odd) tail = tail / area;
        }
        if (stage) { /* whole vectors: the lanes past nc are the stage's padding */
            for (int u = 0; u < n8; u++) DK_TFN(dk_st8)(stage + k * SL + 8 * u, &acc[u]);
            if (odd) DK_TFN(dk_st4)(stage + k * SL + 8 * n8, &tail);
            continue;
        }
        DK_S *out = v->y + k * v->ys[0] + a->c0 * v->ys[1] + a->ph * v->ys[2] + a->pw * v->ys[3];
        for (int j = 0; j < a->nc; j++) out[j * v->ys[1]] = DK_STORE(j < 8 * n8 ? acc[j / 8][j % 8] : tail[j % 4]);
    }
}

/* dk__psp_pool_block for task a's number of vectors, each a constant. */
__attribute__((always_inline)) static inline void DK_SFN(dk__psp_pool_block_nv)(const dk__rp_ctx *cx,
                                                                                const DK_SFN(dk__rp_ps_view) *v,
                                                                                const DK_SFN(dk__ps_task) *a,
                                                                                const DK_T *buf)
{
    switch (DK__PSA_LANES(a->nc) / 4) {
    case 1: DK_SFN(dk__psp_pool_block)(cx, v, a, buf, 1); break;
    case 2: DK_SFN(dk__psp_pool_block)(cx, v, a, buf, 2); break;
    case 3: DK_SFN(dk__psp_pool_block)(cx, v, a, buf, 3); break;
    default: DK_SFN(dk__psp_pool_block)(cx, v, a, buf, 4); break;
    }
}

#if DK__RP_AVX2
/* The same compiled for AVX2, where the CPU has it (cx->ps_avx2): a pair of float vectors is one
 * register, so a bin's pixel is one load and one addition per eight channels. */
__attribute__((target("avx2"))) static void DK_SFN(dk__psp_pool_block_avx2)(const dk__rp_ctx *cx,
                                                                            const DK_SFN(dk__rp_ps_view) *v,
                                                                            const DK_SFN(dk__ps_task) *a,
                                                                            const DK_T *buf)
{
    DK_SFN(dk__psp_pool_block_nv)(cx, v, a, buf);
}
#endif

/* The staged outputs (Note [Staged outputs]) into the output: a task per DK__PS_UNSTAGE_ROIS
 * RoIs, each RoI's [bin][channel] rows transposed to its [channel][bin] (float32 in
 * dk_cl_scatter32's AVX2 tiles where the output is dense, element by element otherwise). */
static void DK_SFN(dk__ps_unstage_worker)(void *p, int tid)
{
    (void)tid;
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_SFN(dk__rp_ps_view) v = DK_SFN(dk__rp_ps_view_of)(cx);
    const int64_t K = cx->K, PW = cx->PW, B = cx->PH * PW, C = v.cout, SL = cx->ps_stage_lanes, R = cx->ps_stage_row;
    const DK_T *st = (const DK_T *)cx->stage;
    const bool dense = DK_S_IS_T && sizeof(DK_T) == sizeof(float) && v.ys[3] == 1 && v.ys[2] == PW && v.ys[1] == B;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < (K + DK__PS_UNSTAGE_ROIS - 1) / DK__PS_UNSTAGE_ROIS;) {
        const int64_t k1 = (t + 1) * DK__PS_UNSTAGE_ROIS < K ? (t + 1) * DK__PS_UNSTAGE_ROIS : K;
        for (int64_t k = t * DK__PS_UNSTAGE_ROIS; k < k1; k++) {
            if (dense)
                dk_cl_scatter32((const float *)(const void *)(st + k * SL), R, B, C,
                                (float *)(void *)(v.y + k * v.ys[0]), B, cx->ps_avx2);
            else
                for (int64_t c = 0; c < C; c++)
                    for (int64_t b = 0; b < B; b++)
                        v.y[k * v.ys[0] + c * v.ys[1] + b / PW * v.ys[2] + b % PW * v.ys[3]] = DK_STORE(
                            st[b * R + k * SL + c]);
        }
    }
}

/* A stage for a forward on blocks (Note [Staged outputs]): cx->stage, where cx->ps_stage asks, the
 * stage takes at most DK__PS_STAGE_MAX_BYTES and the host cache has room; else NULL (the tasks
 * store in place). Each bin's row of K RoIs takes whole 4 KB pages and one line more, so that the
 * unstaging's 8 x 8 tiles (8 rows, a RoI each) fall in 8 different sets of L1: rows of 512 RoIs x
 * 12 lanes had been 6 pages apart, all in one set, and the unstaging took three times its
 * instructions' share of the time. */
static void DK_SFN(dk__ps_stage_take)(dk__rp_ctx *cx, const DK_SFN(dk__rp_ps_view) *v)
{
    cx->stage = NULL, cx->stage_owner = NULL;
    cx->ps_stage_lanes = (v->chunks - 1) * DK__RP_CHANNELS + DK__PSA_LANES(v->cout - (v->chunks - 1) * DK__RP_CHANNELS);
    const size_t row_bytes = dk_sat_mul((size_t)cx->K, (size_t)cx->ps_stage_lanes * sizeof(DK_T));
    if (!cx->ps_stage || row_bytes > DK__PS_STAGE_MAX_BYTES) return;
    const size_t row = (row_bytes + 4095) / 4096 * 4096 + 64;
    cx->ps_stage_row = (int64_t)(row / sizeof(DK_T));
    const size_t bytes = dk_sat_mul((size_t)(cx->PH * cx->PW), row);
    if (bytes > DK__PS_STAGE_MAX_BYTES || dk_host_cache_alloc(bytes, &cx->stage, &cx->stage_owner) != DK_OK)
        cx->stage = NULL, cx->stage_owner = NULL;
}

/* RoI k's outputs 0 (a RoI no task serves): in the stage where there is one, which then moves them. */
static void DK_SFN(dk__ps_zero_roi)(const dk__rp_ctx *cx, const DK_SFN(dk__rp_ps_view) *v, int64_t k)
{
    for (int64_t c = 0; c < v->cout; c++)
        for (int64_t ph = 0; ph < cx->PH; ph++)
            for (int64_t pw = 0; pw < cx->PW; pw++)
                if (cx->stage)
                    ((DK_T *)cx->stage)[(ph * cx->PW + pw) * cx->ps_stage_row + k * cx->ps_stage_lanes + c] = (DK_T)0;
                else v->y[k * v->ys[0] + c * v->ys[1] + ph * v->ys[2] + pw * v->ys[3]] = DK_STORE((DK_T)0);
}

/* The stage, if any, into the output (dk__ps_unstage_worker), and given back. */
static void DK_SFN(dk__ps_stage_flush)(dk__rp_ctx *cx, int nthreads)
{
    if (cx->stage) dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__ps_unstage_worker), cx);
    dk_host_cache_release(cx->stage_owner);
    cx->stage = NULL, cx->stage_owner = NULL;
}

static void DK_SFN(dk__psp_forward_block)(const dk__rp_ctx *cx, const DK_SFN(dk__rp_ps_view) *v,
                                          const DK_SFN(dk__ps_task) *a, DK_T *buf)
{
    const int64_t *xs = v->xs;
    DK_SFN(dk__ps_block_load)(cx, v->x + a->n * xs[0] + ((a->c0 * cx->PH + a->ph) * cx->PW + a->pw) * xs[1], xs, a,
                              buf);
#if DK__RP_AVX2
    if (cx->ps_avx2) {
        DK_SFN(dk__psp_pool_block_avx2)(cx, v, a, buf);
        return;
    }
#endif
    DK_SFN(dk__psp_pool_block_nv)(cx, v, a, buf);
}

/* Forward on channels-last blocks: a task per (image, bin, block of DK__RP_CHANNELS output
 * channels), as ps_roi_align's (dk__ps_task). */
static void DK_SFN(dk__psp_forward_blocks_worker)(void *p, int tid)
{
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_SFN(dk__rp_ps_view) v = DK_SFN(dk__rp_ps_view_of)(cx);
    DK_T *buf = (DK_T *)cx->block + (size_t)tid * (size_t)(cx->H * cx->W * DK__RP_CHANNELS);
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->N * cx->PH * cx->PW * v.chunks;) {
        const DK_SFN(dk__ps_task) a = DK_SFN(dk__ps_task_of)(cx, t, v.cout, v.xs);
        if (cx->image_rois[a.n] == cx->image_rois[a.n + 1]) continue; /* no RoI on this image */
        DK_SFN(dk__psp_forward_block)(cx, &v, &a, buf);
    }
}

/* Forward, plane-major (Note [Position-sensitive RoIPool on a CPU]): task a's planes read in place
 * in their own layout, one at a time (two with AVX-512), each serving bin (ph, pw) of every RoI of
 * the image; no copy. With AVX-512 for float32 (cx->ps_avx512) the RoIs go 16 to a vector in the
 * order of cx->ps_order, their bins gathered (dk__psp_gather), while the next planes are read
 * ahead a few lines per group; else each RoI's bin is dk_roi_pool_avg on the plane. */
static void DK_SFN(dk__psp_forward_plane_task)(const dk__rp_ctx *cx, const DK_SFN(dk__rp_ps_view) *v,
                                               const DK_SFN(dk__ps_task) *a, dk__psp_group *groups)
{
    const int64_t K = cx->K, *xs = v->xs, *ys = v->ys, first = cx->image_rois[a->n], last = cx->image_rois[a->n + 1];
    const int64_t *hb = cx->bin_table + a->ph * K * 2, *wb = cx->bin_table + (cx->PH + a->pw) * K * 2;
    const DK_S *base = v->x + a->n * xs[0] + ((a->c0 * cx->PH + a->ph) * cx->PW + a->pw) * xs[1];
    DK_S *out = v->y + a->c0 * ys[1] + a->ph * ys[2] + a->pw * ys[3];
#if DK__RP_AVX2
    if (DK_S_IS_T && sizeof(DK_T) == sizeof(float) && cx->ps_avx512) {
        int64_t ng = 0;
        for (int64_t i = first; i < last; i += 16) {
            dk__psp_group *g = &groups[ng++];
            g->n = (int32_t)(last - i < 16 ? last - i : 16), g->k = cx->ps_order + i;
            g->max_rows = g->max_cols = 0;
            for (int l = 0; l < 16; l++) {
                const int64_t k = l < g->n ? g->k[l] : 0, h0 = hb[2 * k], h1 = hb[2 * k + 1];
                const int64_t w0 = wb[2 * k], w1 = wb[2 * k + 1];
                const bool some = l < g->n && h1 > h0 && w1 > w0;
                g->rows[l] = some ? (int32_t)(h1 - h0) : 0, g->cols[l] = some ? (int32_t)(w1 - w0) : 0;
                g->off[l] = some ? (int32_t)(h0 * xs[2] + w0 * xs[3]) : 0;
                g->area[l] = some ? (float)((h1 - h0) * (w1 - w0)) : 1.0f; /* dk_roi_pool_avg's divisor */
                g->max_rows = g->rows[l] > g->max_rows ? g->rows[l] : g->max_rows;
                g->max_cols = g->cols[l] > g->max_cols ? g->cols[l] : g->max_cols;
            }
        }
        /* the next two planes read ahead where each is one run of whole rows */
        const int64_t lines = xs[2] == cx->W && xs[3] == 1 && ng > 0 ? (cx->H * cx->W * 4 + 63) / 64 : 0;
        const int64_t per = (lines + ng - 1) / (ng > 0 ? ng : 1);
        for (int j = 0; j < a->nc; j += 2) {
            const float *p0 = (const float *)(const void *)(base + j * a->cstep);
            const float *p1 = j + 1 < a->nc ? p0 + a->cstep : p0;
            const char *pf0 = j + 2 < a->nc ? (const char *)(p0 + 2 * a->cstep) : NULL;
            const char *pf1 = j + 3 < a->nc ? (const char *)(p0 + 3 * a->cstep) : NULL;
            for (int64_t gi = 0; gi < ng; gi++) {
                const dk__psp_group *g = &groups[gi];
                for (int64_t q = gi * per; pf0 && q < (gi + 1) * per && q < lines; q++) {
                    __builtin_prefetch(pf0 + q * 64);
                    if (pf1) __builtin_prefetch(pf1 + q * 64);
                }
                _Alignas(64) float r0[16], r1[16];
                dk__psp_gather(p0, p1, xs[2], xs[3], g, r0, r1);
                DK_S *o = out + j * ys[1];
                for (int l = 0; l < g->n; l++) o[g->k[l] * ys[0]] = DK_STORE(r0[l]);
                if (j + 1 < a->nc)
                    for (int l = 0; l < g->n; l++) o[g->k[l] * ys[0] + ys[1]] = DK_STORE(r1[l]);
            }
        }
        return;
    }
#endif
    (void)groups;
    const int64_t *list = cx->image_rois + cx->N + 1;
    for (int j = 0; j < a->nc; j++) {
        const DK_S *plane = base + j * a->cstep;
        for (int64_t i = first; i < last; i++) {
            const int64_t k = list[i], h0 = hb[2 * k], h1 = hb[2 * k + 1], w0 = wb[2 * k], w1 = wb[2 * k + 1];
            const bool some = h1 > h0 && w1 > w0;
            const DK_T r = xs[3] == 1 ? DK_SFN(dk_roi_pool_avg)(plane, xs[2], 1, some, h0, h1, w0, w1)
                                      : DK_SFN(dk_roi_pool_avg)(plane, xs[2], xs[3], some, h0, h1, w0, w1);
            out[k * ys[0] + j * ys[1]] = DK_STORE(r);
        }
    }
}

static void DK_SFN(dk__psp_forward_planes_worker)(void *p, int tid)
{
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_SFN(dk__rp_ps_view) v = DK_SFN(dk__rp_ps_view_of)(cx);
    dk__psp_group *groups = (dk__psp_group *)cx->ps_groups + (size_t)tid * (size_t)DK__PSP_GROUPS(cx->K, cx->N);
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->N * cx->PH * cx->PW * v.chunks;) {
        const DK_SFN(dk__ps_task) a = DK_SFN(dk__ps_task_of)(cx, t, v.cout, v.xs);
        if (cx->image_rois[a.n] == cx->image_rois[a.n + 1]) continue; /* no RoI on this image */
        DK_SFN(dk__psp_forward_plane_task)(cx, &v, &a, groups);
    }
}

static dk_status DK_SFN(dk__rp_ps_forward)(dk__rp_ctx *cx, int nthreads)
{
    DK_SFN(dk__psp_table)(cx);
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    /* plane-major where forced, or where the gathers serve it (the cost model's first choice where
     * ps_roi_pool.isa is 2: Note [AVX-512 for position-sensitive pooling]) */
    bool planes = cx->ps_layout == 2 || (cx->ps_layout == -1 && DK_S_IS_T && cx->ps_avx512);
    dk_status st = DK_OK;
    cx->block = NULL, cx->block_owner = NULL;
    if (planes) {
        cx->ps_order = (int64_t *)dk_arena_take_n(&ar, (size_t)cx->K, sizeof(int64_t));
        cx->ps_groups = dk_arena_take_n(&ar, dk_sat_mul((size_t)nthreads, (size_t)DK__PSP_GROUPS(cx->K, cx->N)),
                                        sizeof(dk__psp_group));
        if (cx->ps_order && cx->ps_groups) dk__psp_order(cx);
        else if (cx->ps_layout == 2) /* forced: say why it cannot; the cost model's choice falls back */
            st = dk_error(DK_ENOMEM, "ps_roi_pool_forward: out of memory for the groups of %lld RoIs",
                          (long long)cx->K);
        else planes = false;
    }
    if (!planes) st = DK_SFN(dk__ps_blocks)(cx, &ar, nthreads, DK__PSP_PIXELS_PER_PIXEL, "ps_roi_pool_forward");
    if (st == DK_OK && (planes || cx->block)) {
        const DK_SFN(dk__rp_ps_view) v = DK_SFN(dk__rp_ps_view_of)(cx);
        if (!planes) DK_SFN(dk__ps_stage_take)(cx, &v); /* Note [Staged outputs] */
        for (int64_t k = 0; k < cx->K; k++)             /* the RoIs no task serves (no image) pool to 0 */
            if (cx->roi_batch[k] < 0) DK_SFN(dk__ps_zero_roi)(cx, &v, k);
        dk_parallel_run(nthreads, &cx->counter,
                        planes ? DK_SFN(dk__psp_forward_planes_worker) : DK_SFN(dk__psp_forward_blocks_worker), cx);
        DK_SFN(dk__ps_stage_flush)(cx, nthreads);
    } else if (st == DK_OK) dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__rp_ps_forward_worker), cx);
    dk_host_cache_release(cx->block_owner);
    dk_arena_free(&ar);
    return st;
}

/* n elements from src to dst (storage the compute type) with non-temporal stores where dst is
 * 16-byte aligned (Note [Streaming stores] in dk_large_output.h), plain ones at an unaligned head
 * and a tail; 32-bit elements in whole 64-byte lines of 32-byte AVX2 stores where `avx2` (the CPU
 * has it: cx->ps_avx2), a quarter of the 4-lane loop's instructions (that loop was 6.7M of the
 * ps_roi_pool backward's 17M on bench_roi_pool.py's case, callgrind). The caller ends the
 * thread's stores with dk_sfence(). */
static void DK_SFN(dk__ps_stream_run)(DK_S *dst, const DK_S *src, int64_t n, bool avx2)
{
#if DK__RP_AVX2
    if (avx2 && sizeof(DK_S) == 4) {
        dk__rp_stream_run32_avx2(dst, src, n);
        return;
    }
#endif
    (void)avx2;
    int64_t i = 0;
    for (; i < n && (uintptr_t)(dst + i) % 16 != 0; i++) dst[i] = src[i];
    if ((uintptr_t)(dst + i) % 16 == 0)
        for (; i + 4 <= n; i += 4) {
            DK_TFN(dk_v4) v;
            DK_TFN(dk_ld4)(&v, (const DK_T *)(const void *)(src + i));
            DK_TFN(dk_stream4)((DK_T *)(void *)(dst + i), &v);
        }
    for (; i < n; i++) dst[i] = src[i];
}

/* Backward: a task per output channel c and bin row ph, which owns the PW input channels
 * (c PH + ph) PW + pw: zeroed in every image, then each RoI's gradient spread over its PW bins,
 * RoIs in order, so every element gets torchvision's additions in torchvision's order (Note
 * [Position-sensitive RoIPool on a CPU]). */
static void DK_SFN(dk__rp_ps_backward_worker)(void *p, int tid)
{
    (void)tid;
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    DK_S *x = (DK_S *)dk_tensor_data(cx->img);
    const DK_S *g = (const DK_S *)dk_tensor_data(cx->bins);
    int64_t xs[4], gs[4];
    dk__rp_strides(cx->img, xs), dk__rp_strides(cx->bins, gs);
    const int64_t K = cx->K, PH = cx->PH, PW = cx->PW, H = cx->H, W = cx->W, *batch = cx->roi_batch;
    const int64_t tasks = cx->C / PW; /* C = C_out PH PW (ops/roi_pool.c) */
    /* the PW planes of a task, in every image, one run of whole rows: zeroed as one */
    const bool dense = xs[3] == 1 && xs[2] == W && xs[1] == H * W;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < tasks;) {
        const int64_t ph = t % PH, c = t / PH;
        DK_S *planes = x + t * PW * xs[1]; /* input channel t PW + pw = (c PH + ph) PW + pw */
        for (int64_t n = 0; n < cx->N; n++)
            if (dense) memset(planes + n * xs[0], 0, (size_t)(PW * H * W) * sizeof(DK_S)); /* 0 bits: +0, every dtype */
            else
                for (int64_t pw = 0; pw < PW; pw++)
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t w = 0; w < W; w++)
                            planes[n * xs[0] + pw * xs[1] + h * xs[2] + w * xs[3]] = DK_STORE((DK_T)0);
        const int64_t *hb = cx->bin_table + ph * K * 2, *cols = cx->bin_table + PH * K * 2;
        const DK_S *grow = g + c * gs[1] + ph * gs[2];
        for (int64_t k = 0; k < K; k++) {
            const int64_t n = batch[k], h0 = hb[2 * k], h1 = hb[2 * k + 1];
            if (n < 0 || h1 <= h0) continue;
            if (k + 8 < K) __builtin_prefetch(grow + (k + 8) * gs[0]); /* a line per RoI, C_out PH PW apart */
            for (int64_t pw = 0; pw < PW; pw++) {
                const int64_t w0 = cols[(pw * K + k) * 2], w1 = cols[(pw * K + k) * 2 + 1];
                if (w1 <= w0) continue;
                const DK_T d = DK_LOAD(grow[k * gs[0] + pw * gs[3]]) / (DK_T)((h1 - h0) * (w1 - w0));
                DK_S *img = planes + n * xs[0] + pw * xs[1];
                if (xs[3] == 1) /* one addition per element: a vector of them is the same sums */
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++)
                            img[h * xs[2] + w] = DK_STORE(DK_LOAD(img[h * xs[2] + w]) + d);
                else
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) {
                            DK_S *e = img + h * xs[2] + w * xs[3];
                            *e = DK_STORE(DK_LOAD(*e) + d);
                        }
            }
        }
    }
}

/* dk__psp_grad_image (ps_roi_pool_cpu.h) for every storage type, pixel by pixel, each addition rounded
 * to the storage type as in place. */
static void DK_SFN(dk__psp_grad_image)(DK_S *buf, int64_t H, int64_t W, int64_t K, int64_t PW, const int64_t *list,
                                       int64_t first, int64_t last, const int64_t *hb, const int64_t *cols,
                                       const DK_S *grow, int64_t gk, int64_t gw)
{
    DK__PSP_GRAD_BINS({
        const DK_T d = DK_LOAD(grow[k * gk + pw * gw]) / (DK_T)((h1 - h0) * (w1 - w0));
        DK_S *img = buf + pw * H * W;
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) img[h * W + w] = DK_STORE(DK_LOAD(img[h * W + w]) + d);
    });
}

/* Backward on planes built in a buffer (Note [Position-sensitive RoIPool on a CPU]): the tasks of
 * dk__rp_ps_backward_worker, a task per output channel c and bin row ph, which owns the PW input
 * planes (c PH + ph) PW + pw; for each image they are zeroed in the thread's buffer (cx->block: PW
 * dense H x W planes in the storage type, in L2), each RoI of the image adds its share over its PW
 * bins in order of k, rounded to the storage type after every addition as in place, and the planes
 * are then written into grad_input once, streamed where it is large (cx->stream): no memset of
 * grad_input, and no read of it. */
static void DK_SFN(dk__psp_backward_buffered_worker)(void *p, int tid)
{
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    DK_S *x = (DK_S *)dk_tensor_data(cx->img);
    const DK_S *g = (const DK_S *)dk_tensor_data(cx->bins);
    int64_t xs[4], gs[4];
    dk__rp_strides(cx->img, xs), dk__rp_strides(cx->bins, gs);
    const int64_t K = cx->K, PH = cx->PH, PW = cx->PW, H = cx->H, W = cx->W, HW = H * W;
    const int64_t NC = cx->ps_grad_channels, C_out = cx->C / (PH * PW); /* C = C_out PH PW (ops/roi_pool.c) */
    const int64_t *list = cx->image_rois + cx->N + 1, *cols = cx->bin_table + PH * K * 2;
    DK_S *buf = (DK_S *)cx->block + (size_t)tid * (size_t)(NC * PW * HW + DK__PSP_GRAD_PAD);
    /* the PW planes of a channel, in every image, one run of whole rows */
    const bool dense = xs[3] == 1 && xs[2] == W && xs[1] == HW;
    /* float32 planes streamed with AVX2 leave the buffer zero behind them: no memset but the first */
    const bool clear = DK__RP_AVX2 && dense && DK_S_IS_T && cx->stream && sizeof(DK_S) == 4 && cx->ps_avx2;
    bool zero = false;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < (C_out + NC - 1) / NC * PH;) {
        const int64_t ph = t % PH, c = t / PH * NC, nc = C_out - c < NC ? C_out - c : NC,
                      *hb = cx->bin_table + ph * K * 2;
        const DK_S *grow = g + c * gs[1] + ph * gs[2];
        for (int64_t n = 0; n < cx->N; n++) {
            /* zeroed (0 bits: +0, every dtype), or left zero by the last planes' stream (clear) */
            if (!zero) memset(buf, 0, (size_t)(NC * PW * HW + DK__PSP_GRAD_PAD) * sizeof(DK_S));
            zero = clear;
#if DK__RP_AVX2
            if (DK_S_IS_T && sizeof(DK_T) == sizeof(float) && cx->ps_avx512)
                for (int64_t j = 0; j < nc; j++)
                    dk__psp_grad_image((float *)(void *)buf + j * PW * HW, H, W, K, PW, list, cx->image_rois[n],
                                       cx->image_rois[n + 1], hb, cols, (const float *)(const void *)(grow + j * gs[1]),
                                       gs[0], gs[3]);
            else if (cx->ps_cols8)
                dk__psp_grad_image_avx2((float *)(void *)buf, W, PW, list, cx->image_rois[n], cx->image_rois[n + 1], hb,
                                        cx->ps_cols8, (const float *)(const void *)grow, gs[1], PW * HW, (int)nc, gs[0],
                                        gs[3]);
            else
#endif
                for (int64_t j = 0; j < nc; j++)
                    DK_SFN(dk__psp_grad_image)(buf + j * PW * HW, H, W, K, PW, list, cx->image_rois[n],
                                               cx->image_rois[n + 1], hb, cols, grow + j * gs[1], gs[0], gs[3]);
            for (int64_t j = 0; j < nc; j++) {
                /* input channel ((c + j) PH + ph) PW + pw */
                DK_S *planes = x + n * xs[0] + ((c + j) * PH + ph) * PW * xs[1];
                DK_S *from = buf + j * PW * HW;
                if (clear) {
#if DK__RP_AVX2
                    dk__rp_stream_run32_clear_avx2(planes, from, PW * HW);
#endif
                } else if (dense && DK_S_IS_T && cx->stream)
                    DK_SFN(dk__ps_stream_run)(planes, from, PW * HW, cx->ps_avx2);
                else if (dense) memcpy(planes, from, (size_t)(PW * HW) * sizeof(DK_S));
                else
                    for (int64_t pw = 0; pw < PW; pw++)
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t w = 0; w < W; w++)
                                planes[pw * xs[1] + h * xs[2] + w * xs[3]] = from[pw * HW + h * W + w];
            }
        }
    }
    if (cx->stream) dk_sfence();
}

static dk_status DK_SFN(dk__rp_ps_backward)(dk__rp_ctx *cx, int nthreads)
{
    DK_SFN(dk__psp_table)(cx);
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    /* the buffered planes unless the in-place ones are forced (ps_roi_pool.layout 0) or a thread's
     * PW planes would pass DK__PSP_PLANES_MAX_BYTES (a map too large for the buffer's gain: it stays in
     * cache) or not fit in memory */
    const int64_t HW = cx->H * cx->W;
    cx->block = NULL, cx->block_owner = NULL, cx->stream = false;
    /* the AVX2 additions take two output channels a task (dk__psp_grad_image_avx2) */
    const bool avx2 = DK__RP_AVX2 && !cx->ps_avx512 && DK_S_IS_T && sizeof(DK_T) == sizeof(float) && cx->ps_avx2 &&
                      cx->PW <= 8;
    cx->ps_grad_channels = avx2 && cx->C / (cx->PH * cx->PW) > 1 &&
                                   HW <= DK__PSP_PLANES_MAX_BYTES / (2 * cx->PW * (int64_t)sizeof(DK_S))
                               ? 2
                               : 1;
    if (cx->ps_layout != 0 &&
        HW <= DK__PSP_PLANES_MAX_BYTES / (cx->ps_grad_channels * cx->PW * (int64_t)sizeof(DK_S))) {
        const size_t n = (size_t)(nthreads * (cx->ps_grad_channels * cx->PW * HW + DK__PSP_GRAD_PAD)) * sizeof(DK_S);
        if (dk_host_cache_alloc(n, &cx->block, &cx->block_owner) != DK_OK) cx->block = NULL, cx->block_owner = NULL;
        if (!cx->block) cx->block = dk_arena_take(&ar, n);
    }
    if (cx->block) cx->stream = dk__ps_prepare_grad_input(cx, sizeof(DK_S));
    cx->ps_cols8 = NULL;
#if DK__RP_AVX2
    /* the AVX2 additions' rows of columns (dk__psp_cols8), 32-byte aligned */
    if (cx->block && avx2) {
        char *c8 = (char *)dk_arena_take_n(&ar, dk_sat_mul((size_t)cx->K, DK__PSP_COLS8) + 8, sizeof(int32_t));
        if (c8) {
            cx->ps_cols8 = (int32_t *)(void *)(c8 + ((32 - ((uintptr_t)c8 & 31)) & 31));
            dk__psp_cols8(cx->bin_table + cx->PH * cx->K * 2, cx->K, cx->PW, HW, cx->ps_cols8);
        }
    }
#endif
    dk_parallel_run(nthreads, &cx->counter,
                    cx->block ? DK_SFN(dk__psp_backward_buffered_worker) : DK_SFN(dk__rp_ps_backward_worker), cx);
    dk_host_cache_release(cx->block_owner);
    dk_arena_free(&ar);
    return DK_OK;
}

#endif
