/*
 * roi_pool/ps_roi_align_tmpl.h — ps_roi_align (position-sensitive RoIAlign) on the CPU, for one
 * storage type (Note [Templates in C] in kernels/dk_template.h). roi_pool_cpu.c instantiates it
 * after the templates whose helpers it uses: roi_pool_tmpl.h's RoI readers and ps_roi_pool_tmpl.h's
 * view, tasks and channels-last blocks. Note [RoIAlign's position-sensitive form on a CPU] in ps_roi_pool_cpu.h says how the work
 * is split.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* One RoI's geometry, found once per call (every task that serves the RoI reads it): the batch
 * index (-1: no image, or no samples), the axes and the count. */
typedef struct {
    DK_TFN(dk_roi_align_axis) ay, ax;
    DK_T count, inv; /* inv: 1 / count where that is exact (count a power of two), else 0 */
    int64_t n;
    /* the 1-D taps of sample i of row bin ph, rows[ph grid + i], and of column bin pw, cols[pw
     * grid + i] (lo -1: the sample contributes nothing); NULL where the call keeps no tables */
    const DK_TFN(dk_roi_align_taps) *rows, *cols;
} DK_SFN(dk__psa_roi_entry);

/* The 1-D taps of every sample along axis a (pooled bins) into t, lo -1 where a sample
 * contributes nothing. */
static void DK_SFN(dk__psa_axis_taps)(const DK_TFN(dk_roi_align_axis) *a, int64_t pooled, int64_t size,
                                      DK_TFN(dk_roi_align_taps) *t)
{
    for (int64_t p = 0; p < pooled; p++)
        for (int64_t i = 0; i < a->grid; i++, t++)
            if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(a, p, i), size, t)) t->lo = -1;
}

/* The call's plan: every RoI's entry (cx->table) and each image's RoIs in order (cx->image_rois:
 * N + 1 offsets, then the RoI numbers, a counting sort), in `ar`. */
static dk_status DK_SFN(dk__psa_plan)(dk__rp_ctx *cx, dk_arena *ar, const char *what)
{
    DK_SFN(dk__psa_roi_entry) *table = (DK_SFN(dk__psa_roi_entry) *)dk_arena_take_n(ar, (size_t)cx->K,
                                                                                    sizeof(DK_SFN(dk__psa_roi_entry)));
    int64_t *lists = (int64_t *)dk_arena_take_n(ar, (size_t)(cx->N + 1 + cx->K), sizeof(int64_t));
    if ((!table && cx->K > 0) || !lists)
        return dk_error(DK_ENOMEM, "%s: out of memory for the geometry of %lld RoIs", what, (long long)cx->K);
    for (int64_t k = 0; k < cx->K; k++) {
        DK_SFN(dk__psa_roi_entry) *e = &table[k];
        DK_TFN(dk_ps_roi_align_roi_init)(DK_SFN(dk__rp_roi_value)(cx, k, 1), DK_SFN(dk__rp_roi_value)(cx, k, 2),
                                         DK_SFN(dk__rp_roi_value)(cx, k, 3), DK_SFN(dk__rp_roi_value)(cx, k, 4),
                                         (DK_T)cx->scale, cx->PH, cx->PW, cx->sampling_ratio, cx->H, cx->W, &e->ay,
                                         &e->ax);
        e->count = DK_TFN(dk_roi_align_count)(&e->ay, &e->ax);
        /* count, an integer in [1, 2^62], a power of two: its reciprocal is exact and normal, and
         * multiplying by it divides exactly */
        const int64_t ci = (int64_t)e->count;
        e->inv = (ci & (ci - 1)) == 0 ? (DK_T)1 / e->count : (DK_T)0;
        e->n = e->ay.grid > 0 && e->ax.grid > 0 ? dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx, k, 0), cx->N) : -1;
    }
    int64_t samples = 0; /* per bin, of every RoI with an image (saturating: the grids may be huge) */
    for (int64_t k = 0; k < cx->K; k++)
        if (table[k].n >= 0) {
            const int64_t gh = table[k].ay.grid, gw = table[k].ax.grid;
            samples = gh > INT64_MAX / 4 / gw || samples > INT64_MAX / 2 - gh * gw ? INT64_MAX / 2 : samples + gh * gw;
        }
    dk__rp_image_rois(table ? &table[0].n : NULL, sizeof *table, cx->K, cx->N, lists);
    /* the tables of taps, where they take at most DK__PSA_TABLE_TAPS (a grid that large is an
     * explicit sampling_ratio's; past it, without memory for them, or with the tunable
     * ps_roi_align.tap_tables 0, every task finds its taps itself: the same values) */
    int64_t taps = 0;
    for (int64_t k = 0; k < cx->K && taps <= DK__PSA_TABLE_TAPS; k++)
        if (table[k].n >= 0) taps += table[k].ay.grid * cx->PH + table[k].ax.grid * cx->PW;
    const bool tabled = cx->psa_tables && taps <= DK__PSA_TABLE_TAPS;
    DK_TFN(dk_roi_align_taps) *t = tabled ? (DK_TFN(dk_roi_align_taps) *)dk_arena_take_n(
                                                ar, (size_t)taps, sizeof(DK_TFN(dk_roi_align_taps)))
                                          : NULL;
    for (int64_t k = 0; k < cx->K; k++) {
        DK_SFN(dk__psa_roi_entry) *e = &table[k];
        e->rows = e->cols = NULL;
        if (!t || e->n < 0) continue;
        DK_SFN(dk__psa_axis_taps)(&e->ay, cx->PH, cx->H, t), e->rows = t, t += e->ay.grid * cx->PH;
        DK_SFN(dk__psa_axis_taps)(&e->ax, cx->PW, cx->W, t), e->cols = t, t += e->ax.grid * cx->PW;
    }
    cx->table = table;
    cx->image_rois = lists;
    cx->ps_work = samples;
    return DK_OK;
}

/* Sample i's 1-D taps along axis a, bin p, from the table where there is one; false when it
 * contributes nothing. */
static inline bool DK_SFN(dk__psa_taps)(const DK_TFN(dk_roi_align_axis) *a, const DK_TFN(dk_roi_align_taps) *table,
                                        int64_t p, int64_t i, int64_t size, DK_TFN(dk_roi_align_taps) *t)
{
    if (table) {
        *t = table[p * a->grid + i];
        return t->lo >= 0;
    }
    return DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(a, p, i), size, t);
}

/* The samples of RoI e's bin (ph, pw) from sample (*iy, *ix) on, rows then columns: the taps of
 * those that contribute, in order, up to DK__PSA_SAMPLES of them into b; (*iy, *ix) moves past the
 * last one looked at (*iy reaches the grid at the end). Returns how many were kept. */
static int DK_SFN(dk__psa_samples)(const DK_SFN(dk__psa_roi_entry) *e, int64_t ph, int64_t pw, int64_t H, int64_t W,
                                   int64_t *iy, int64_t *ix, DK_TFN(dk_roi_align_bilinear) *b)
{
    const int64_t gh = e->ay.grid, gw = e->ax.grid;
    int m = 0;
    DK_TFN(dk_roi_align_taps) ty, tx;
    while (*iy < gh && m < DK__PSA_SAMPLES) {
        if (!DK_SFN(dk__psa_taps)(&e->ay, e->rows, ph, *iy, H, &ty)) {
            ++*iy, *ix = 0; /* the row contributes nothing */
            continue;
        }
        for (; *ix < gw && m < DK__PSA_SAMPLES; ++*ix)
            if (DK_SFN(dk__psa_taps)(&e->ax, e->cols, pw, *ix, W, &tx))
                DK_TFN(dk_roi_align_bilinear_of)(&ty, &tx, &b[m++]);
        if (*ix == gw) ++*iy, *ix = 0;
    }
    return m;
}

/* Forward on channel planes: a task per (image, bin, block of output channels), which serves
 * every RoI of the image: each RoI's samples in the bin found once for the block, then each
 * channel's sum in dk_roi_align_forward_avg's order (samples by rows, then columns): its bits. */
static void DK_SFN(dk__psa_forward_planes)(const dk__rp_ctx *cx, const DK_SFN(dk__rp_ps_view) *v,
                                           const DK_SFN(dk__ps_task) *a, DK_TFN(dk_roi_align_bilinear) *b)
{
    const DK_SFN(dk__psa_roi_entry) *table = (const DK_SFN(dk__psa_roi_entry) *)cx->table;
    const int64_t *xs = v->xs, *ys = v->ys;
    const DK_S *base = v->x + a->n * xs[0] + ((a->c0 * cx->PH + a->ph) * cx->PW + a->pw) * xs[1];
    for (int64_t i = cx->image_rois[a->n]; i < cx->image_rois[a->n + 1]; i++) {
        const int64_t k = cx->image_rois[cx->N + 1 + i];
        const DK_SFN(dk__psa_roi_entry) *e = &table[k];
        DK_T acc[DK__RP_CHANNELS];
        for (int j = 0; j < DK__RP_CHANNELS; j++) acc[j] = (DK_T)0;
        for (int64_t iy = 0, ix = 0; iy < e->ay.grid;) {
            const int m = DK_SFN(dk__psa_samples)(e, a->ph, a->pw, cx->H, cx->W, &iy, &ix, b);
            for (int j = 0; j < a->nc; j++) {
                const DK_S *plane = base + j * a->cstep;
                DK_T sum = acc[j];
                if (xs[3] == 1) /* unit column stride (NCHW): the compiler sees it */
                    for (int q = 0; q < m; q++) sum += DK_SFN(dk_roi_align_interp)(plane, xs[2], 1, &b[q]);
                else
                    for (int q = 0; q < m; q++) sum += DK_SFN(dk_roi_align_interp)(plane, xs[2], xs[3], &b[q]);
                acc[j] = sum;
            }
        }
        DK_S *out = v->y + k * ys[0] + a->c0 * ys[1] + a->ph * ys[2] + a->pw * ys[3];
        for (int j = 0; j < a->nc; j++) out[j * ys[1]] = DK_STORE(acc[j] / e->count);
    }
}

/* Forward on a channels-last block (Note [RoIAlign's position-sensitive form on a CPU]): the
 * same terms in the same order per channel, four channels to a vector. */
static void DK_SFN(dk__psa_forward_block)(const dk__rp_ctx *cx, const DK_SFN(dk__rp_ps_view) *v,
                                          const DK_SFN(dk__ps_task) *a, DK_TFN(dk_roi_align_bilinear) *b, DK_T *buf)
{
    const DK_SFN(dk__psa_roi_entry) *table = (const DK_SFN(dk__psa_roi_entry) *)cx->table;
    const int64_t *xs = v->xs, *ys = v->ys;
    const int L = DK__PSA_LANES(a->nc), nv = L / 4;
    DK_SFN(dk__ps_block_load)(cx, v->x + a->n * xs[0] + ((a->c0 * cx->PH + a->ph) * cx->PW + a->pw) * xs[1], xs, a,
                              buf);
    /* this bin's row of the staged outputs (Note [Staged outputs]), at the task's first lane */
    DK_T *stage = cx->stage ? (DK_T *)cx->stage + (a->ph * cx->PW + a->pw) * cx->ps_stage_row + a->c0 : NULL;
    for (int64_t i = cx->image_rois[a->n]; i < cx->image_rois[a->n + 1]; i++) {
        const int64_t k = cx->image_rois[cx->N + 1 + i];
        const DK_SFN(dk__psa_roi_entry) *e = &table[k];
        DK_TFN(dk_v4) acc[DK__RP_CHANNELS / 4];
        for (int u = 0; u < DK__RP_CHANNELS / 4; u++) acc[u] = (DK_TFN(dk_v4)){0, 0, 0, 0};
        for (int64_t iy = 0, ix = 0; iy < e->ay.grid;) {
            const int m = DK_SFN(dk__psa_samples)(e, a->ph, a->pw, cx->H, cx->W, &iy, &ix, b);
            for (int q = 0; q < m; q++) {
                const DK_TFN(dk_roi_align_bilinear) *t = &b[q];
                const DK_T *p1 = buf + (t->y_low * cx->W + t->x_low) * L,
                           *p2 = buf + (t->y_low * cx->W + t->x_high) * L;
                const DK_T *p3 = buf + (t->y_high * cx->W + t->x_low) * L,
                           *p4 = buf + (t->y_high * cx->W + t->x_high) * L;
                for (int u = 0; u < nv; u++) {
                    DK_TFN(dk_v4) x1, x2, x3, x4;
                    DK_TFN(dk_ld4)(&x1, p1 + 4 * u), DK_TFN(dk_ld4)(&x2, p2 + 4 * u);
                    DK_TFN(dk_ld4)(&x3, p3 + 4 * u), DK_TFN(dk_ld4)(&x4, p4 + 4 * u);
                    /* dk_roi_align_interp's w1 v1 + w2 v2 + w3 v3 + w4 v4, left to right, per lane */
                    acc[u] += t->w1 * x1 + t->w2 * x2 + t->w3 * x3 + t->w4 * x4;
                }
            }
        }
        if (stage) { /* Note [Staged outputs]: a vector division rounds each lane as the scalar one does */
            for (int u = 0; u < nv; u++) {
                const DK_TFN(dk_v4) r = acc[u] / e->count;
                DK_TFN(dk_st4)(stage + k * cx->ps_stage_lanes + 4 * u, &r);
            }
            continue;
        }
        DK_S *out = v->y + k * ys[0] + a->c0 * ys[1] + a->ph * ys[2] + a->pw * ys[3];
        for (int j = 0; j < a->nc; j++) out[j * ys[1]] = DK_STORE(acc[j / 4][j % 4] / e->count);
    }
}

static void DK_SFN(dk__psa_forward_worker)(void *p, int tid)
{
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_SFN(dk__rp_ps_view) v = DK_SFN(dk__rp_ps_view_of)(cx);
    DK_T *buf = cx->block ? (DK_T *)cx->block + (size_t)tid * (size_t)(cx->H * cx->W * DK__RP_CHANNELS) : NULL;
    DK_TFN(dk_roi_align_bilinear) b[DK__PSA_SAMPLES];
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->N * cx->PH * cx->PW * v.chunks;) {
        const DK_SFN(dk__ps_task) a = DK_SFN(dk__ps_task_of)(cx, t, v.cout, v.xs);
        if (cx->image_rois[a.n] == cx->image_rois[a.n + 1]) continue; /* no RoI on this image */
        if (buf) DK_SFN(dk__psa_forward_block)(cx, &v, &a, b, buf);
        else DK_SFN(dk__psa_forward_planes)(cx, &v, &a, b);
    }
}

static dk_status DK_SFN(dk__psa_forward)(dk__rp_ctx *cx, int nthreads)
{
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk_status st = DK_SFN(dk__psa_plan)(cx, &ar, "ps_roi_align_forward");
    if (st == DK_OK) st = DK_SFN(dk__ps_blocks)(cx, &ar, nthreads, DK__PSA_SAMPLES_PER_PIXEL, "ps_roi_align_forward");
    if (st != DK_OK) {
        dk_arena_free(&ar);
        return st;
    }
    const DK_SFN(dk__rp_ps_view) v = DK_SFN(dk__rp_ps_view_of)(cx);
    if (cx->block) DK_SFN(dk__ps_stage_take)(cx, &v); /* Note [Staged outputs] */
    const DK_SFN(dk__psa_roi_entry) *table = (const DK_SFN(dk__psa_roi_entry) *)cx->table;
    for (int64_t k = 0; k < cx->K; k++) /* the RoIs no task serves (no image, or no samples) pool to 0 */
        if (table[k].n < 0) DK_SFN(dk__ps_zero_roi)(cx, &v, k);
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__psa_forward_worker), cx);
    DK_SFN(dk__ps_stage_flush)(cx, nthreads);
    dk_host_cache_release(cx->block_owner);
    dk_arena_free(&ar);
    return DK_OK;
}

/* Backward on channel planes: the block's planes zeroed, then every RoI of the image in order
 * adds its samples' shares to each plane, torchvision's additions in torchvision's order. float32
 * and float64 add in grad_input itself; 16-bit storage adds in the thread's float planes
 * (cx->scratch) and stores once. */
static void DK_SFN(dk__psa_backward_planes)(const dk__rp_ctx *cx, DK_S *img, const int64_t xs[4], const DK_S *g,
                                            const int64_t gs[4], const DK_SFN(dk__ps_task) *a,
                                            DK_TFN(dk_roi_align_bilinear) *b, DK_T *scratch)
{
    const DK_SFN(dk__psa_roi_entry) *table = (const DK_SFN(dk__psa_roi_entry) *)cx->table;
    const bool direct = sizeof(DK_S) == sizeof(DK_T); /* storage is the compute type */
    const int64_t HW = cx->H * cx->W;
    /* plane j of the block: at acc + j cs, rows sy and columns sx apart */
    DK_T *acc = direct ? (DK_T *)img : scratch;
    const int64_t cs = direct ? a->cstep : HW, sy = direct ? xs[2] : cx->W, sx = direct ? xs[3] : 1;
    for (int j = 0; j < a->nc; j++)
        for (int64_t h = 0; h < cx->H; h++)
            for (int64_t w = 0; w < cx->W; w++) acc[j * cs + h * sy + w * sx] = (DK_T)0;
    for (int64_t i = cx->image_rois[a->n]; i < cx->image_rois[a->n + 1]; i++) {
        const int64_t k = cx->image_rois[cx->N + 1 + i];
        const DK_SFN(dk__psa_roi_entry) *e = &table[k];
        const DK_S *gk = g + k * gs[0] + a->c0 * gs[1] + a->ph * gs[2] + a->pw * gs[3];
        for (int64_t iy = 0, ix = 0; iy < e->ay.grid;) {
            const int m = DK_SFN(dk__psa_samples)(e, a->ph, a->pw, cx->H, cx->W, &iy, &ix, b);
            for (int j = 0; j < a->nc; j++) {
                const DK_T gj = DK_LOAD(gk[j * gs[1]]);
                DK_T *plane = acc + j * cs;
                for (int q = 0; q < m; q++) {
                    /* the four shares, dk_ps_roi_align_share's g w / count, in one vector:
                     * each lane rounds as the scalar would; (g w) / 2^k is (g w) 2^-k */
                    const DK_TFN(dk_v4) wt = {b[q].w1, b[q].w2, b[q].w3, b[q].w4};
                    const DK_TFN(dk_v4) sh = e->inv != (DK_T)0 ? gj * wt * e->inv : gj * wt / e->count;
                    plane[b[q].y_low * sy + b[q].x_low * sx] += sh[0];
                    plane[b[q].y_low * sy + b[q].x_high * sx] += sh[1];
                    plane[b[q].y_high * sy + b[q].x_low * sx] += sh[2];
                    plane[b[q].y_high * sy + b[q].x_high * sx] += sh[3];
                }
            }
        }
    }
    if (!direct)
        for (int j = 0; j < a->nc; j++)
            for (int64_t h = 0; h < cx->H; h++)
                for (int64_t w = 0; w < cx->W; w++)
                    img[j * a->cstep + h * xs[2] + w * xs[3]] = DK_STORE(acc[j * HW + h * cx->W + w]);
}

/* Backward on a channels-last block: the same additions per element, in the same order, in a
 * zeroed block (so every dtype adds in the compute type), four channels to a vector; the block
 * then stored into its planes. */
/* One sample's four taps into the block: p[r] += (g w[r]) scaled per lane, tap by tap as
 * torchvision adds them (two taps may be one element, at an edge); each lane's share is
 * dk_ps_roi_align_share's g w / count, or (g w) 2^-k where inv is exact (`exact`). */
__attribute__((always_inline)) static inline void DK_SFN(dk__psa_add_taps)(DK_T *const p[4], const DK_T w[4],
                                                                           const DK_TFN(dk_v4) gv[4], int nv,
                                                                           bool exact, DK_T inv, DK_T count)
{
    for (int r = 0; r < 4; r++)
        for (int u = 0; u < nv; u++) {
            DK_TFN(dk_v4) x;
            DK_TFN(dk_ld4)(&x, p[r] + 4 * u);
            x += exact ? gv[u] * w[r] * inv : gv[u] * w[r] / count;
            DK_TFN(dk_st4)(p[r] + 4 * u, &x);
        }
}

/* dk__psa_backward_block's additions, nv vectors of four channels (a constant in each caller, so
 * the lanes' loop unrolls and the gradients stay in registers). */
__attribute__((always_inline)) static inline void DK_SFN(dk__psa_grad_block)(const dk__rp_ctx *cx, const DK_S *g,
                                                                             const int64_t gs[4],
                                                                             const DK_SFN(dk__ps_task) *a,
                                                                             DK_TFN(dk_roi_align_bilinear) *b,
                                                                             DK_T *buf, int nv)
{
    const DK_SFN(dk__psa_roi_entry) *table = (const DK_SFN(dk__psa_roi_entry) *)cx->table;
    const int64_t L = 4 * nv, W = cx->W;
    for (int64_t i = cx->image_rois[a->n]; i < cx->image_rois[a->n + 1]; i++) {
        const int64_t k = cx->image_rois[cx->N + 1 + i];
        const DK_SFN(dk__psa_roi_entry) *e = &table[k];
        const DK_S *gk = g + k * gs[0] + a->c0 * gs[1] + a->ph * gs[2] + a->pw * gs[3];
        DK_T gl[DK__RP_CHANNELS];
        for (int j = 0; j < L; j++) gl[j] = j < a->nc ? DK_LOAD(gk[j * gs[1]]) : (DK_T)0;
        DK_TFN(dk_v4) gv[4];
        for (int u = 0; u < nv; u++) DK_TFN(dk_ld4)(&gv[u], gl + 4 * u);
        const bool exact = e->inv != (DK_T)0;
        for (int64_t iy = 0, ix = 0; iy < e->ay.grid;) {
            const int m = DK_SFN(dk__psa_samples)(e, a->ph, a->pw, cx->H, cx->W, &iy, &ix, b);
            for (int q = 0; q < m; q++) {
                const DK_TFN(dk_roi_align_bilinear) *t = &b[q];
                DK_T *const p[4] = {buf + (t->y_low * W + t->x_low) * L, buf + (t->y_low * W + t->x_high) * L,
                                    buf + (t->y_high * W + t->x_low) * L, buf + (t->y_high * W + t->x_high) * L};
                const DK_T w[4] = {t->w1, t->w2, t->w3, t->w4};
                if (exact) DK_SFN(dk__psa_add_taps)(p, w, gv, nv, true, e->inv, e->count);
                else DK_SFN(dk__psa_add_taps)(p, w, gv, nv, false, e->inv, e->count);
            }
        }
    }
}

/* The block into its planes through whole planes (Note [RoIAlign's position-sensitive form on a
 * CPU]): its nc lanes turned into nc dense H x W planes of the storage type in `stage` (float32 in
 * dk_cl_scatter32's AVX2 tiles; the others element by element, each rounded once as
 * dk__ps_block_store rounds it: the same bits), then each plane written into grad_input as one run
 * of whole rows (planes dense: the caller checked), streamed where cx->stream. */
static void DK_SFN(dk__psa_grad_store)(const dk__rp_ctx *cx, DK_S *img, const DK_SFN(dk__ps_task) *a, const DK_T *buf,
                                       DK_S *stage)
{
    const int L = DK__PSA_LANES(a->nc);
    const int64_t HW = cx->H * cx->W;
    if (DK_S_IS_T && sizeof(DK_T) == sizeof(float))
        dk_cl_scatter32((const float *)(const void *)buf, L, HW, a->nc, (float *)(void *)stage, HW, cx->ps_avx2);
    else
        for (int j = 0; j < a->nc; j++)
            for (int64_t p = 0; p < HW; p++) stage[j * HW + p] = DK_STORE(buf[p * L + j]);
    for (int j = 0; j < a->nc; j++) {
        if (DK_S_IS_T && cx->stream) DK_SFN(dk__ps_stream_run)(img + j * a->cstep, stage + j * HW, HW, cx->ps_avx2);
        else memcpy(img + j * a->cstep, stage + j * HW, (size_t)HW * sizeof(DK_S));
    }
}

static void DK_SFN(dk__psa_backward_block)(const dk__rp_ctx *cx, DK_S *img, const int64_t xs[4], const DK_S *g,
                                           const int64_t gs[4], const DK_SFN(dk__ps_task) *a,
                                           DK_TFN(dk_roi_align_bilinear) *b, DK_T *buf, DK_S *stage)
{
    const int L = DK__PSA_LANES(a->nc);
    memset(buf, 0, (size_t)(cx->H * cx->W * L) * sizeof(DK_T));
    switch (L / 4) {
    case 1: DK_SFN(dk__psa_grad_block)(cx, g, gs, a, b, buf, 1); break;
    case 2: DK_SFN(dk__psa_grad_block)(cx, g, gs, a, b, buf, 2); break;
    case 3: DK_SFN(dk__psa_grad_block)(cx, g, gs, a, b, buf, 3); break;
    default: DK_SFN(dk__psa_grad_block)(cx, g, gs, a, b, buf, 4); break;
    }
    if (stage) DK_SFN(dk__psa_grad_store)(cx, img, a, buf, stage);
    else DK_SFN(dk__ps_block_store)(cx, img, xs, a, buf);
}

/* Backward: a task per (image, bin, block of output channels), so per block of input planes,
 * which no other task touches. */
static void DK_SFN(dk__psa_backward_worker)(void *p, int tid)
{
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const dk_tensor *gi = cx->img, *go = cx->bins;
    DK_S *x = (DK_S *)dk_tensor_data(gi);
    const DK_S *g = (const DK_S *)dk_tensor_data(go);
    int64_t xs[4], gs[4];
    dk__rp_strides(gi, xs), dk__rp_strides(go, gs);
    const int64_t cout = go->shape[1], chunks = (cout + DK__RP_CHANNELS - 1) / DK__RP_CHANNELS;
    const size_t per_thread = (size_t)(cx->H * cx->W * DK__RP_CHANNELS);
    DK_T *buf = cx->block ? (DK_T *)cx->block + (size_t)tid * per_thread : NULL;
    DK_T *scratch = cx->scratch ? (DK_T *)cx->scratch + (size_t)tid * per_thread : NULL;
    DK_S *stage = cx->stage ? (DK_S *)cx->stage + (size_t)tid * per_thread : NULL;
    DK_TFN(dk_roi_align_bilinear) b[DK__PSA_SAMPLES];
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->N * cx->PH * cx->PW * chunks;) {
        const DK_SFN(dk__ps_task) a = DK_SFN(dk__ps_task_of)(cx, t, cout, xs);
        DK_S *img = x + a.n * xs[0] + ((a.c0 * cx->PH + a.ph) * cx->PW + a.pw) * xs[1];
        if (buf) DK_SFN(dk__psa_backward_block)(cx, img, xs, g, gs, &a, b, buf, stage);
        else DK_SFN(dk__psa_backward_planes)(cx, img, xs, g, gs, &a, b, scratch);
    }
    if (cx->stream) dk_sfence();
}

static dk_status DK_SFN(dk__psa_backward)(dk__rp_ctx *cx, int nthreads)
{
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk_status st = DK_SFN(dk__psa_plan)(cx, &ar, "ps_roi_align_backward");
    const char *what = "ps_roi_align_backward";
    if (st == DK_OK) st = DK_SFN(dk__ps_blocks)(cx, &ar, nthreads, DK__PSA_SAMPLES_PER_PIXEL, what);
    cx->stream = dk__ps_prepare_grad_input(cx, sizeof(DK_S)) && cx->block;
    /* the blocks' whole planes (dk__psa_grad_store): ps_roi_align.grad_planes 1, dense planes, and
     * a thread's DK__RP_CHANNELS planes within DK__PSP_PLANES_MAX_BYTES; else (or without memory
     * for them) the rows of dk__ps_block_store */
    int64_t xs[4];
    dk__rp_strides(cx->img, xs);
    const int64_t HW = cx->H * cx->W;
    cx->stage = NULL, cx->stage_owner = NULL;
    if (st == DK_OK && cx->block && cx->psa_grad_planes && xs[3] == 1 && xs[2] == cx->W &&
        HW <= DK__PSP_PLANES_MAX_BYTES / (DK__RP_CHANNELS * (int64_t)sizeof(DK_S))) {
        const size_t n = (size_t)(nthreads * DK__RP_CHANNELS * HW) * sizeof(DK_S);
        if (dk_host_cache_alloc(n, &cx->stage, &cx->stage_owner) != DK_OK) cx->stage = NULL, cx->stage_owner = NULL;
        if (!cx->stage) cx->stage = dk_arena_take(&ar, n);
    }
    if (st == DK_OK && !cx->block && sizeof(DK_S) != sizeof(DK_T)) /* 16-bit planes add in float */
        st = (cx->scratch = (float *)dk_arena_take_n(
                  &ar, dk_sat_mul((size_t)nthreads, (size_t)(cx->H * cx->W * DK__RP_CHANNELS)), sizeof(float)))
                 ? DK_OK
                 : dk_error(DK_ENOMEM, "%s: out of memory for %d threads' float planes", what, nthreads);
    if (st == DK_OK) dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__psa_backward_worker), cx);
    dk_host_cache_release(cx->block_owner);
    dk_host_cache_release(cx->stage_owner);
    dk_arena_free(&ar);
    return st;
}

#endif
