/*
 * roi_pool/ps_roi_align_tmpl.h — ps_roi_align (position-sensitive RoIAlign) on the CPU, for one
 * storage type (Note [Templates in C] in kernels/dk_template.h). roi_pool_cpu.c instantiates it
 * after the templates whose helpers it uses: roi_pool_tmpl.h's RoI readers and ps_roi_pool_tmpl.h's
 * view. roi_pool_cpu.h says how the work is split.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* RoI k's two axes, ps_roi_align's geometry (kernels/roi_pool_math.h). */
static inline void DK_SFN(dk__psa_roi)(const dk__rp_ctx *cx, int64_t k, DK_TFN(dk_roi_align_axis) *ay,
                                       DK_TFN(dk_roi_align_axis) *ax)
{
    DK_TFN(dk_ps_roi_align_roi_init)(DK_SFN(dk__rp_roi_value)(cx->rois, k, 1), DK_SFN(dk__rp_roi_value)(cx->rois, k, 2),
                                     DK_SFN(dk__rp_roi_value)(cx->rois, k, 3), DK_SFN(dk__rp_roi_value)(cx->rois, k, 4),
                                     (DK_T)cx->scale, cx->PH, cx->PW, cx->sampling_ratio, cx->H, cx->W, ay, ax);
}

/* The column taps of bin pw's first min(grid, DK__PSA_TAPS) samples (Note [RoIAlign's
 * position-sensitive form on a CPU] in roi_pool_cpu.h); ok[i] false where a sample contributes
 * nothing. Returns how many are kept. */
static inline int64_t DK_SFN(dk__psa_columns)(const DK_TFN(dk_roi_align_axis) *ax, int64_t pw, int64_t W,
                                              DK_TFN(dk_roi_align_taps) *taps, bool *ok)
{
    const int64_t m = ax->grid < DK__PSA_TAPS ? ax->grid : DK__PSA_TAPS;
    for (int64_t i = 0; i < m; i++)
        ok[i] = DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(ax, pw, i), W, &taps[i]);
    return m;
}

/* Column sample i's taps: the table's, or computed past its end; false when it contributes nothing. */
static inline bool DK_SFN(dk__psa_column)(const DK_TFN(dk_roi_align_axis) *ax, int64_t pw, int64_t i, int64_t W,
                                          const DK_TFN(dk_roi_align_taps) *taps, const bool *ok, int64_t m,
                                          DK_TFN(dk_roi_align_taps) *t)
{
    if (i < m) {
        *t = taps[i];
        return ok[i];
    }
    return DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(ax, pw, i), W, t);
}

/* Forward: a task per RoI and block of output channels; each bin's taps found once and used for
 * the block's channels, each channel's sum in dk_roi_align_forward_avg's order (samples by rows,
 * then columns): its bits. */
static void DK_SFN(dk__psa_forward_worker)(void *p, int tid)
{
    (void)tid;
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_SFN(dk__rp_ps_view) v = DK_SFN(dk__rp_ps_view_of)(cx);
    const DK_S *x = v.x;
    DK_S *y = v.y;
    const int64_t *xs = v.xs, *ys = v.ys, cout = v.cout, chunks = v.chunks;
    const int64_t cstep = cx->PH * cx->PW * xs[1]; /* from output channel c's plane to c + 1's */
    DK_TFN(dk_roi_align_taps) taps[DK__PSA_TAPS];
    bool ok[DK__PSA_TAPS];
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->K * chunks;) {
        const int64_t k = t / chunks, c0 = t % chunks * DK__RP_CHANNELS;
        const int nc = (int)(c0 + DK__RP_CHANNELS < cout ? DK__RP_CHANNELS : cout - c0);
        const int64_t n = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx->rois, k, 0), cx->N);
        DK_TFN(dk_roi_align_axis) ay, ax;
        DK_SFN(dk__psa_roi)(cx, k, &ay, &ax);
        const DK_T count = DK_TFN(dk_roi_align_count)(&ay, &ax);
        for (int64_t ph = 0; ph < cx->PH; ph++)
            for (int64_t pw = 0; pw < cx->PW; pw++) {
                DK_T acc[DK__RP_CHANNELS];
                for (int j = 0; j < DK__RP_CHANNELS; j++) acc[j] = (DK_T)0;
                if (n >= 0) {
                    const int64_t m = DK_SFN(dk__psa_columns)(&ax, pw, cx->W, taps, ok);
                    const DK_S *base = x + n * xs[0] + ((c0 * cx->PH + ph) * cx->PW + pw) * xs[1];
                    for (int64_t iy = 0; iy < ay.grid; iy++) {
                        DK_TFN(dk_roi_align_taps) ty, tx;
                        if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(&ay, ph, iy), cx->H, &ty))
                            continue;
                        for (int64_t ix = 0; ix < ax.grid; ix++) {
                            if (!DK_SFN(dk__psa_column)(&ax, pw, ix, cx->W, taps, ok, m, &tx)) continue;
                            DK_TFN(dk_roi_align_bilinear) b;
                            DK_TFN(dk_roi_align_bilinear_of)(&ty, &tx, &b);
                            /* unit column stride (NCHW): the compiler sees it */
                            if (xs[3] == 1)
                                for (int j = 0; j < nc; j++)
                                    acc[j] += DK_SFN(dk_roi_align_interp)(base + j * cstep, xs[2], 1, &b);
                            else
                                for (int j = 0; j < nc; j++)
                                    acc[j] += DK_SFN(dk_roi_align_interp)(base + j * cstep, xs[2], xs[3], &b);
                        }
                    }
                }
                for (int j = 0; j < nc; j++)
                    y[k * ys[0] + (c0 + j) * ys[1] + ph * ys[2] + pw * ys[3]] = DK_STORE(acc[j] / count);
            }
    }
}

static dk_status DK_SFN(dk__psa_forward)(dk__rp_ctx *cx, int nthreads)
{
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__psa_forward_worker), cx);
    return DK_OK;
}

/* One RoI's geometry for the backward, found once per call (its tasks, one per plane, all read
 * it): the batch index (-1: no image, or no samples), the axes and the count. A task walks its
 * image's RoIs only, from cx->image_rois. */
typedef struct {
    DK_TFN(dk_roi_align_axis) ay, ax;
    DK_T count, inv; /* inv: 1 / count where that is exact (count a power of two), else 0 */
    int64_t n;
} DK_SFN(dk__psa_roi_entry);

/* Backward: a task per (image, input channel) plane, whose bin (ph, pw) the channel fixes: the
 * plane zeroed, then every RoI of the image in order adds its samples' shares, torchvision's
 * additions in torchvision's order. float32 and float64 add in grad_input itself; 16-bit
 * storage adds in the thread's float plane (cx->scratch) and stores once. */
static void DK_SFN(dk__psa_backward_worker)(void *p, int tid)
{
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const dk_tensor *gi = cx->img, *go = cx->bins;
    const DK_SFN(dk__psa_roi_entry) *table = (const DK_SFN(dk__psa_roi_entry) *)cx->table;
    DK_S *x = (DK_S *)dk_tensor_data(gi);
    const DK_S *g = (const DK_S *)dk_tensor_data(go);
    int64_t xs[4], gs[4];
    dk__rp_strides(gi, xs), dk__rp_strides(go, gs);
    const bool direct = sizeof(DK_S) == sizeof(DK_T); /* storage is the compute type */
    DK_T *scratch = direct ? NULL : (DK_T *)cx->scratch + (int64_t)tid * cx->H * cx->W;
    DK_TFN(dk_roi_align_taps) taps[DK__PSA_TAPS];
    bool ok[DK__PSA_TAPS];
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->N * cx->C;) {
        const int64_t n = t / cx->C, cin = t % cx->C;
        const int64_t pw = cin % cx->PW, ph = cin / cx->PW % cx->PH, c = cin / (cx->PW * cx->PH);
        DK_S *img = x + n * xs[0] + cin * xs[1];
        DK_T *acc = direct ? (DK_T *)img : scratch;
        const int64_t sy = direct ? xs[2] : cx->W, sx = direct ? xs[3] : 1;
        for (int64_t h = 0; h < cx->H; h++)
            for (int64_t w = 0; w < cx->W; w++) acc[h * sy + w * sx] = (DK_T)0;
        for (int64_t i = cx->image_rois[n]; i < cx->image_rois[n + 1]; i++) {
            const int64_t k = cx->image_rois[cx->N + 1 + i];
            const DK_SFN(dk__psa_roi_entry) *e = &table[k];
            const DK_T gk = DK_LOAD(g[k * gs[0] + c * gs[1] + ph * gs[2] + pw * gs[3]]);
            const int64_t m = DK_SFN(dk__psa_columns)(&e->ax, pw, cx->W, taps, ok);
            for (int64_t iy = 0; iy < e->ay.grid; iy++) {
                DK_TFN(dk_roi_align_taps) ty, tx;
                if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(&e->ay, ph, iy), cx->H, &ty))
                    continue;
                for (int64_t ix = 0; ix < e->ax.grid; ix++) {
                    if (!DK_SFN(dk__psa_column)(&e->ax, pw, ix, cx->W, taps, ok, m, &tx)) continue;
                    DK_TFN(dk_roi_align_bilinear) b;
                    DK_TFN(dk_roi_align_bilinear_of)(&ty, &tx, &b);
                    /* the four shares side by side, so that the compiler may form them in one
                     * vector multiply and divide (each lane rounds as the scalar would) */
                    const DK_T wt[4] = {b.w1, b.w2, b.w3, b.w4};
                    DK_T sh[4];
                    if (e->inv != (DK_T)0) /* (g w) / 2^k is (g w) 2^-k, both rounded once: the same bits */
                        for (int j = 0; j < 4; j++) sh[j] = gk * wt[j] * e->inv;
                    else
                        for (int j = 0; j < 4; j++) sh[j] = DK_TFN(dk_ps_roi_align_share)(gk, wt[j], e->count);
                    acc[b.y_low * sy + b.x_low * sx] += sh[0];
                    acc[b.y_low * sy + b.x_high * sx] += sh[1];
                    acc[b.y_high * sy + b.x_low * sx] += sh[2];
                    acc[b.y_high * sy + b.x_high * sx] += sh[3];
                }
            }
        }
        if (!direct)
            for (int64_t h = 0; h < cx->H; h++)
                for (int64_t w = 0; w < cx->W; w++) img[h * xs[2] + w * xs[3]] = DK_STORE(acc[h * cx->W + w]);
    }
}

static dk_status DK_SFN(dk__psa_backward)(dk__rp_ctx *cx, int nthreads)
{
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    DK_SFN(dk__psa_roi_entry) *table = (DK_SFN(dk__psa_roi_entry) *)dk_arena_take_n(&ar, (size_t)cx->K,
                                                                                    sizeof(DK_SFN(dk__psa_roi_entry)));
    /* each image's RoIs in order: [N + 1] offsets, then the RoI numbers (a counting sort) */
    int64_t *lists = (int64_t *)dk_arena_take_n(&ar, (size_t)(cx->N + 1 + cx->K), sizeof(int64_t));
    if ((!table && cx->K > 0) || !lists) {
        dk_arena_free(&ar);
        return dk_error(DK_ENOMEM, "ps_roi_align_backward: out of memory for the geometry of %lld RoIs",
                        (long long)cx->K);
    }
    for (int64_t k = 0; k < cx->K; k++) {
        DK_SFN(dk__psa_roi_entry) *e = &table[k];
        DK_SFN(dk__psa_roi)(cx, k, &e->ay, &e->ax);
        e->count = DK_TFN(dk_roi_align_count)(&e->ay, &e->ax);
        /* count, an integer in [1, 2^62], a power of two: its reciprocal is exact and normal, and
         * multiplying by it divides exactly */
        const int64_t ci = (int64_t)e->count;
        e->inv = (ci & (ci - 1)) == 0 ? (DK_T)1 / e->count : (DK_T)0;
        e->n = e->ay.grid > 0 && e->ax.grid > 0 ? dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx->rois, k, 0), cx->N)
                                                : -1;
    }
    for (int64_t i = 0; i <= cx->N; i++) lists[i] = 0;
    for (int64_t k = 0; k < cx->K; k++)
        if (table[k].n >= 0) lists[table[k].n + 1]++;
    for (int64_t i = 0; i < cx->N; i++) lists[i + 1] += lists[i];
    for (int64_t k = 0, *fill = lists + cx->N + 1; k < cx->K; k++)
        if (table[k].n >= 0) fill[lists[table[k].n]++] = k;
    for (int64_t i = cx->N; i > 0; i--) lists[i] = lists[i - 1]; /* the fill moved each start to the next's */
    lists[0] = 0;
    cx->table = table;
    cx->image_rois = lists;
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__psa_backward_worker), cx);
    dk_arena_free(&ar);
    return DK_OK;
}

#endif
