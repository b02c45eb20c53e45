/*
 * roi_pool/ps_roi_pool_tmpl.h — ps_roi_pool (R-FCN's position-sensitive RoIPool) on the CPU, for one
 * storage type (Note [Templates in C] in kernels/dk_template.h). roi_pool_cpu.c instantiates it
 * after the templates whose helpers it uses: roi_pool_tmpl.h's RoI readers. roi_pool_cpu.h
 * says how the work is split.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* What a position-sensitive forward task reads of its call: the input and output, their strides,
 * the output's channels and their blocks of DK__RP_CHANNELS (one task each per RoI). */
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

/* Forward: a task per RoI and block of output channels; bins found once per (ph, pw). Output
 * channel c at bin (ph, pw) reads input channel (c PH + ph) PW + pw. */
static void DK_SFN(dk__rp_ps_forward_worker)(void *p, int tid)
{
    (void)tid;
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_SFN(dk__rp_ps_view) v = DK_SFN(dk__rp_ps_view_of)(cx);
    const DK_S *x = v.x;
    DK_S *y = v.y;
    const int64_t *xs = v.xs, *ys = v.ys, cout = v.cout, chunks = v.chunks;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->K * chunks;) {
        const int64_t k = t / chunks, c0 = t % chunks * DK__RP_CHANNELS;
        const int64_t c1 = c0 + DK__RP_CHANNELS < cout ? c0 + DK__RP_CHANNELS : cout;
        const int64_t n = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx->rois, k, 0), cx->N);
        const DK_TFN(dk_roi_pool_roi) r = DK_SFN(dk__rp_roi)(cx, k);
        for (int64_t ph = 0; ph < cx->PH; ph++)
            for (int64_t pw = 0; pw < cx->PW; pw++) {
                int64_t h0 = 0, h1 = 0, w0 = 0, w1 = 0;
                const bool some = n >= 0 && DK_TFN(dk_roi_pool_bin)(&r, ph, pw, cx->H, cx->W, &h0, &h1, &w0, &w1);
                for (int64_t c = c0; c < c1; c++) {
                    const int64_t cin = (c * cx->PH + ph) * cx->PW + pw;
                    const DK_T v = some ? DK_SFN(dk_roi_pool_avg)(x + n * xs[0] + cin * xs[1], xs[2], xs[3], true, h0,
                                                                  h1, w0, w1)
                                        : (DK_T)0;
                    y[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]] = DK_STORE(v);
                }
            }
    }
}

static dk_status DK_SFN(dk__rp_ps_forward)(dk__rp_ctx *cx, int nthreads)
{
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__rp_ps_forward_worker), cx);
    return DK_OK;
}

/* Backward: a task per input channel (its bin is fixed: (ph, pw) from the channel), zeroed in every
 * image, then each RoI's gradient spread over its bin, RoIs in order: torchvision's order. */
static void DK_SFN(dk__rp_ps_backward_worker)(void *p, int tid)
{
    (void)tid;
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const dk_tensor *gi = cx->img, *go = cx->bins;
    DK_S *x = (DK_S *)dk_tensor_data(gi);
    const DK_S *g = (const DK_S *)dk_tensor_data(go);
    int64_t xs[4], gs[4];
    dk__rp_strides(gi, xs), dk__rp_strides(go, gs);
    for (int64_t cin; (cin = dk_parallel_claim(&cx->counter)) < cx->C;) {
        const int64_t pw = cin % cx->PW, ph = cin / cx->PW % cx->PH, c = cin / (cx->PW * cx->PH);
        for (int64_t n = 0; n < cx->N; n++)
            for (int64_t h = 0; h < cx->H; h++)
                for (int64_t w = 0; w < cx->W; w++)
                    x[n * xs[0] + cin * xs[1] + h * xs[2] + w * xs[3]] = DK_STORE((DK_T)0);
        for (int64_t k = 0; k < cx->K; k++) {
            const int64_t *e = cx->bin_table + (k * cx->PH * cx->PW + ph * cx->PW + pw) * 4;
            if (e[0] < 0) continue;
            const int64_t n = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx->rois, k, 0), cx->N);
            const int64_t h0 = e[0], h1 = e[1], w0 = e[2], w1 = e[3];
            const DK_T d = DK_LOAD(g[k * gs[0] + c * gs[1] + ph * gs[2] + pw * gs[3]]) / (DK_T)((h1 - h0) * (w1 - w0));
            DK_S *img = x + n * xs[0] + cin * xs[1];
            for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) {
                    DK_S *e = img + h * xs[2] + w * xs[3];
                    *e = DK_STORE(DK_LOAD(*e) + d);
                }
        }
    }
}

static dk_status DK_SFN(dk__rp_ps_backward)(dk__rp_ctx *cx, int nthreads)
{
    DK_SFN(dk__rp_bin_table)(cx, cx->bin_table);
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__rp_ps_backward_worker), cx);
    return DK_OK;
}

#endif
