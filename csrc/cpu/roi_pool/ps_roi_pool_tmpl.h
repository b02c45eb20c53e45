/*
 * roi_pool/ps_roi_pool_tmpl.h — ps_roi_pool (R-FCN's position-sensitive RoIPool) on the CPU, for one
 * storage type (Note [Templates in C] in kernels/dk_template.h). roi_pool_cpu.c instantiates it
 * after the templates whose helpers it uses: roi_pool_tmpl.h's RoI readers. Note [Position-sensitive
 * RoIPool on a CPU] in roi_pool_cpu.h says how the work is split.
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

/* Every RoI's axes, found once per call for the tasks that all read them (Note [Position-sensitive
 * RoIPool on a CPU]): cx->roi_batch[k] (its image, or -1), and in cx->bin_table the rows of
 * [PH][K] x (h0, h1) followed by the columns of [PW][K] x (w0, w1), so that the task of bin
 * (ph, pw) reads its two rows of bounds in order of k. dk_roi_pool_bin's bounds, one axis at a
 * time (what it computes per axis: a bin is (rows of ph) x (columns of pw), empty when either is). */
static void DK_SFN(dk__psp_table)(dk__rp_ctx *cx)
{
    const int64_t K = cx->K;
    int64_t *rows = cx->bin_table, *cols = cx->bin_table + cx->PH * K * 2, *batch = cx->roi_batch;
    for (int64_t k = 0; k < K; k++) {
        batch[k] = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx->rois, k, 0), cx->N);
        const DK_TFN(dk_roi_pool_roi) r = DK_SFN(dk__rp_roi)(cx, k);
        for (int64_t ph = 0; ph < cx->PH; ph++)
            DK_TFN(dk__roi_pool_axis)(&r, true, ph, cx->H, rows + (ph * K + k) * 2, rows + (ph * K + k) * 2 + 1);
        for (int64_t pw = 0; pw < cx->PW; pw++)
            DK_TFN(dk__roi_pool_axis)(&r, false, pw, cx->W, cols + (pw * K + k) * 2, cols + (pw * K + k) * 2 + 1);
        if (r.none) batch[k] = -1; /* dk_roi_pool_bin's every bin empty (MMCV's kind only) */
    }
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

static dk_status DK_SFN(dk__rp_ps_forward)(dk__rp_ctx *cx, int nthreads)
{
    DK_SFN(dk__psp_table)(cx);
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__rp_ps_forward_worker), cx);
    return DK_OK;
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

static dk_status DK_SFN(dk__rp_ps_backward)(dk__rp_ctx *cx, int nthreads)
{
    DK_SFN(dk__psp_table)(cx);
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__rp_ps_backward_worker), cx);
    return DK_OK;
}

#endif
