/*
 * roi_align/roi_align_rotated_tmpl.h — the CPU roi_align_rotated for one storage type (Note
 * [Templates in C] in kernels/dk_template.h), instantiated by roi_align_rotated_cpu.c, whose
 * Note [Rotated RoIAlign on a CPU] says how the work is split and Note [Rotated RoIAlign's
 * channel rows] how a task's channels are laid out.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* RoI k's image (-1 for none: ops/roi_align.c refuses those where it can read the RoIs; this
 * keeps the kernel in bounds regardless) and geometry. */
static int64_t DK_SFN(dk__rar_roi)(const dk__rar_ctx *cx, int64_t k, DK_TFN(dk_roi_align_rotated) *r)
{
    const DK_S *p = (const DK_S *)dk_tensor_data(cx->rois) + k * dk_tensor_stride(cx->rois, 0);
    const int64_t s = dk_tensor_stride(cx->rois, 1);
    const DK_T b = DK_LOAD(p[0]);
    DK_TFN(dk_roi_align_rotated_init)(DK_LOAD(p[s]), DK_LOAD(p[2 * s]), DK_LOAD(p[3 * s]), DK_LOAD(p[4 * s]),
                                      DK_LOAD(p[5 * s]), (DK_T)cx->scale, cx->PH, cx->PW, cx->sampling_ratio,
                                      cx->aligned, cx->clockwise, cx->H, cx->W, r);
    return b >= (DK_T)0 && b < (DK_T)cx->N && b == (DK_T)(int64_t)b ? (int64_t)b : -1;
}

/* One thread's scratch (Note [Rotated RoIAlign on a CPU]): per sample inside the map its taps'
 * offsets in the rows (pixel * cblock) and weights; per bin of the run, its count of them; the
 * RoI's rows of samples' (yy cos, yy sin) and columns' (xx sin, xx cos), where `turned`; the
 * task's channel rows, [H * W][cblock] (Note [Rotated RoIAlign's channel rows]); and a run's
 * values divided by the count, [DK__RAR_RUN][cblock]: the backward's gradients, the AVX2
 * forward's outputs on their way to the planes. */
typedef struct {
    int64_t *off;
    DK_T *w;
    int64_t *n;
    DK_T *ty, *tx;
    bool turned;
    DK_T *rows, *bins;
} DK_SFN(dk__rar_table);

static DK_SFN(dk__rar_table) DK_SFN(dk__rar_table_of)(const dk__rar_ctx *cx, int tid)
{
    char *p = cx->scratch + (size_t)tid * cx->per_thread;
    DK_SFN(dk__rar_table) t;
    t.off = (int64_t *)p;
    t.n = t.off + 4 * DK__RAR_TABLE;
    t.w = (DK_T *)(t.n + DK__RAR_RUN);
    t.ty = t.w + 4 * DK__RAR_TABLE;
    t.tx = t.ty + 2 * DK__RAR_AXIS;
    t.turned = false;
    t.rows = (DK_T *)(p + dk__rar_table_bytes(sizeof(DK_T)));
    t.bins = t.rows + cx->cblock * cx->H * cx->W;
    return t;
}

/* The RoI's products of its samples' coordinates with the angle's cosine and sine, once for all
 * its bins (dk_roi_align_rotated_turn): t->turned says whether they fit. */
static void DK_SFN(dk__rar_turns)(const dk__rar_ctx *cx, const DK_TFN(dk_roi_align_rotated) *r,
                                  DK_SFN(dk__rar_table) *t)
{
    const int64_t ny = cx->PH * r->ay.grid, nx = cx->PW * r->ax.grid;
    t->turned = ny <= DK__RAR_AXIS && nx <= DK__RAR_AXIS;
    if (!t->turned) return;
    for (int64_t j = 0; j < ny; j++) {
        const DK_T yy = DK_TFN(dk_roi_align_axis_sample)(&r->ay, j / r->ay.grid, j % r->ay.grid);
        t->ty[2 * j] = yy * r->cos_t;
        t->ty[2 * j + 1] = yy * r->sin_t;
    }
    for (int64_t j = 0; j < nx; j++) {
        const DK_T xx = DK_TFN(dk_roi_align_axis_sample)(&r->ax, j / r->ax.grid, j % r->ax.grid);
        t->tx[2 * j] = xx * r->sin_t;
        t->tx[2 * j + 1] = xx * r->cos_t;
    }
}

/* Tabulates bins b0, b0 + 1, ... (bin b is (b / PW, b % PW)), at most DK__RAR_RUN of them, while
 * their samples fit; returns the end of the run (b0 itself when bin b0 alone does not fit). */
static int64_t DK_SFN(dk__rar_tabulate)(const dk__rar_ctx *cx, const DK_TFN(dk_roi_align_rotated) *r, int64_t b0,
                                        DK_SFN(dk__rar_table) *t)
{
    /* locals, which the table's stores cannot alias: the compiler keeps them in registers */
    const DK_TFN(dk_roi_align_rotated) rr = *r;
    const int64_t gy = rr.ay.grid, gx = rr.ax.grid, H = cx->H, W = cx->W, PW = cx->PW;
    const int64_t per_bin = gy * gx, nbins = cx->PH * PW, sx = cx->cblock, sy = W * sx;
    const bool turned = t->turned;
    int64_t *restrict off = t->off, *restrict n = t->n;
    DK_T *restrict wt = t->w;
    const DK_T *restrict ty0 = t->ty, *restrict tx0 = t->tx;
    int64_t used = 0, b = b0;
    for (; b < nbins && b - b0 < DK__RAR_RUN && used + per_bin <= DK__RAR_TABLE; ++b) {
        const int64_t ph = b / PW, pw = b % PW, first = used;
        const DK_T *ty = ty0 + 2 * ph * gy, *tx = tx0 + 2 * pw * gx;
        for (int64_t iy = 0; iy < gy; ++iy)
            for (int64_t ix = 0; ix < gx; ++ix) {
                DK_T y, x;
                if (turned)
                    DK_TFN(dk_roi_align_rotated_turn)(&rr, ty[2 * iy], ty[2 * iy + 1], tx[2 * ix], tx[2 * ix + 1], &y,
                                                      &x);
                else DK_TFN(dk_roi_align_rotated_sample)(&rr, ph, pw, iy, ix, &y, &x);
                DK_TFN(dk_roi_align_bilinear) q;
                if (!DK_TFN(dk_roi_align_bilinear_init)(y, x, H, W, &q)) continue;
                int64_t *o = off + 4 * used;
                DK_T *w = wt + 4 * used;
                o[0] = q.y_low * sy + q.x_low * sx;
                o[1] = q.y_low * sy + q.x_high * sx;
                o[2] = q.y_high * sy + q.x_low * sx;
                o[3] = q.y_high * sy + q.x_high * sx;
                w[0] = q.w1;
                w[1] = q.w2;
                w[2] = q.w3;
                w[3] = q.w4;
                used++;
            }
        n[b - b0] = used - first;
    }
    return b;
}

/* Forward of a run of `bins` bins on n <= DK__RAR_LANES channels: `rows` points at the first
 * channel's lane of pixel 0, y at its output element of the run's first bin, bo[b] at each
 * bin's offset from there, ycs is the output's channel stride. Each lane is one channel's
 * per-element math: the samples' ((w1 v1 + w2 v2) + w3 v3) + w4 v4 added in order, divided by
 * count. */
DK_INLINE void DK_SFN(dk__rar_forward_lanes)(const DK_T *rows, const DK_SFN(dk__rar_table) *t, int64_t bins, DK_T count,
                                             DK_S *y, const int64_t *bo, int64_t ycs, int n)
{
    const int64_t *o = t->off;
    const DK_T *w = t->w;
    for (int64_t b = 0; b < bins; b++) {
        DK_T s[DK__RAR_LANES];
        for (int j = 0; j < n; j++) s[j] = (DK_T)0;
        for (int64_t i = 0, m = t->n[b]; i < m; i++, o += 4, w += 4) {
            const DK_T *v0 = rows + o[0], *v1 = rows + o[1], *v2 = rows + o[2], *v3 = rows + o[3];
            const DK_T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
            DK__RAR_LANE_LOOP
            for (int j = 0; j < n; j++) s[j] += w0 * v0[j] + w1 * v1[j] + w2 * v2[j] + w3 * v3[j];
        }
        DK_S *yb = y + bo[b];
        for (int j = 0; j < n; j++) yb[j * ycs] = DK_STORE(s[j] / count);
    }
}

/* The forward of a run on the task's nc channels, DK__RAR_LANES at a time. */
DK_INLINE void DK_SFN(dk__rar_forward_run_body)(const DK_T *rows, int64_t nc, const DK_SFN(dk__rar_table) *t,
                                                int64_t bins, DK_T count, DK_S *y, const int64_t *bo, int64_t ycs)
{
    int64_t j = 0;
    for (; j + DK__RAR_LANES <= nc; j += DK__RAR_LANES)
        DK_SFN(dk__rar_forward_lanes)(rows + j, t, bins, count, y + j * ycs, bo, ycs, DK__RAR_LANES);
    if (j < nc) DK_SFN(dk__rar_forward_lanes)(rows + j, t, bins, count, y + j * ycs, bo, ycs, (int)(nc - j));
}

/* Backward of a run on n <= DK__RAR_LANES channels: `rows` as above (the accumulator), g at the
 * run's first bin's gradient of the first channel, one row of cblock per bin. Each lane is one
 * channel's sequence of terms: the bins, their samples, their taps w1..w4 in order. */
DK_INLINE void DK_SFN(dk__rar_backward_lanes)(DK_T *restrict rows, const DK_SFN(dk__rar_table) *t, int64_t bins,
                                              const DK_T *restrict g, int64_t cblock, int n)
{
    const int64_t *o = t->off;
    const DK_T *w = t->w;
    for (int64_t b = 0; b < bins; b++, g += cblock)
        for (int64_t i = 0, m = t->n[b]; i < m; i++, o += 4, w += 4) {
            /* the taps in order, one after the other: two of them may be the same pixel */
            for (int q = 0; q < 4; q++) {
                DK_T *a = rows + o[q];
                const DK_T wq = w[q];
                DK__RAR_LANE_LOOP
                for (int j = 0; j < n; j++) a[j] += g[j] * wq;
            }
        }
}

DK_INLINE void DK_SFN(dk__rar_backward_run_body)(DK_T *rows, int64_t nc, const DK_SFN(dk__rar_table) *t, int64_t bins,
                                                 const DK_T *g, int64_t cblock)
{
    int64_t j = 0;
    for (; j + DK__RAR_LANES <= nc; j += DK__RAR_LANES)
        DK_SFN(dk__rar_backward_lanes)(rows + j, t, bins, g + j, cblock, DK__RAR_LANES);
    if (j < nc) DK_SFN(dk__rar_backward_lanes)(rows + j, t, bins, g + j, cblock, (int)(nc - j));
}

/* The runs for the baseline ISA and for AVX2 (Note [AVX2 spans] in box_iou/box_iou_cpu.h): the
 * same source, the same operations in the same order, more lanes at once. */
static void DK_SFN(dk__rar_forward_run)(const DK_T *rows, int64_t nc, const DK_SFN(dk__rar_table) *t, int64_t bins,
                                        DK_T count, DK_S *y, const int64_t *bo, int64_t ycs)
{
    DK_SFN(dk__rar_forward_run_body)(rows, nc, t, bins, count, y, bo, ycs);
}

static void DK_SFN(dk__rar_backward_run)(DK_T *rows, int64_t nc, const DK_SFN(dk__rar_table) *t, int64_t bins,
                                         const DK_T *g, int64_t cblock)
{
    DK_SFN(dk__rar_backward_run_body)(rows, nc, t, bins, g, cblock);
}

#if DK__RAR_AVX2
/* For float rows (float32, float16, bfloat16) the chunks of 16 lanes are roi_align_rotated_cpu.c's
 * AVX2 code; for double, the loops compiled for AVX2. */
__attribute__((target("avx2"))) static void DK_SFN(dk__rar_forward_run_avx2)(const DK_T *rows, int64_t nc,
                                                                             const DK_SFN(dk__rar_table) *t,
                                                                             int64_t bins, DK_T count, DK_S *y,
                                                                             const int64_t *bo, int64_t ycs,
                                                                             int64_t cblock, bool dense)
{
    if (sizeof(DK_T) != sizeof(float)) {
        DK_SFN(dk__rar_forward_run_body)(rows, nc, t, bins, count, y, bo, ycs);
        return;
    }
    /* the full chunks' results, [bin][channel] in t->bins, then to the output's [channel][bin] */
    float *res = (float *)t->bins;
    int64_t full = 0;
    for (; full + DK__RAR_WIDE <= nc; full += DK__RAR_WIDE)
        dk__rar_forward32_avx2((const float *)(rows + full), t->off, (const float *)t->w, t->n, bins, (float)count,
                               res + full, cblock);
    for (; full + DK__RAR_LANES <= nc; full += DK__RAR_LANES)
        dk__rar_forward16_avx2((const float *)(rows + full), t->off, (const float *)t->w, t->n, bins, (float)count,
                               res + full, cblock);
    if (DK_DTYPE == DK_FLOAT32 && dense) dk_cl_scatter32(res, cblock, bins, full, (float *)(y + bo[0]), ycs, true);
    else
        for (int64_t j = 0; j < full; j++)
            for (int64_t b = 0; b < bins; b++) y[j * ycs + bo[b]] = DK_STORE((DK_T)res[b * cblock + j]);
    if (full < nc)
        DK_SFN(dk__rar_forward_lanes)(rows + full, t, bins, count, y + full * ycs, bo, ycs, (int)(nc - full));
}

__attribute__((target("avx2"))) static void DK_SFN(dk__rar_backward_run_avx2)(DK_T *rows, int64_t nc,
                                                                              const DK_SFN(dk__rar_table) *t,
                                                                              int64_t bins, const DK_T *g,
                                                                              int64_t cblock)
{
    if (sizeof(DK_T) != sizeof(float)) {
        DK_SFN(dk__rar_backward_run_body)(rows, nc, t, bins, g, cblock);
        return;
    }
    int64_t j = 0;
    for (; j + DK__RAR_WIDE <= nc; j += DK__RAR_WIDE)
        dk__rar_backward32_avx2((float *)(rows + j), t->off, (const float *)t->w, t->n, bins, (const float *)(g + j),
                                cblock);
    for (; j + DK__RAR_LANES <= nc; j += DK__RAR_LANES)
        dk__rar_backward16_avx2((float *)(rows + j), t->off, (const float *)t->w, t->n, bins, (const float *)(g + j),
                                cblock);
    if (j < nc) DK_SFN(dk__rar_backward_lanes)(rows + j, t, bins, g + j, cblock, (int)(nc - j));
}
#endif

/* Offsets of bins b0..b1 - 1 from bin 0 in a tensor of row stride s2 and column stride s3. */
static void DK_SFN(dk__rar_bin_offsets)(const dk__rar_ctx *cx, int64_t b0, int64_t b1, int64_t s2, int64_t s3,
                                        int64_t *bo)
{
    for (int64_t b = b0; b < b1; b++) bo[b - b0] = b / cx->PW * s2 + b % cx->PW * s3;
}

/* The task's channels c0..c0 + nc - 1 of one image (plane at p, strides s) into the channel rows,
 * DK__RAR_LANES channels at a time, pixel by pixel: that many planes are read in order, which
 * the hardware prefetches (a tile of pixels across all the block's channels read as many
 * streams as channels, and was slower on a cold map), and each pixel's lanes are one line of
 * the rows; and back (dk__rar_put_rows). float32 planes whose pixels have unit stride move in
 * AVX2 tiles, a plane or a row at a time (Note [Channels-last copies] in dk_channels_last.h). */
static void DK_SFN(dk__rar_get_rows)(const dk__rar_ctx *cx, const DK_S *p, const int64_t *s, int64_t nc, DK_T *rows)
{
    const int64_t cb = cx->cblock;
    if (DK_DTYPE == DK_FLOAT32 && cx->avx2 && s[3] == 1) {
        const bool whole = s[2] == cx->W; /* rows of the plane back to back: one run of H W pixels */
        for (int64_t h = 0; h < (whole ? 1 : cx->H); h++)
            dk_cl_gather32((const float *)(p + h * s[2]), s[1], nc, whole ? cx->H * cx->W : cx->W,
                           (float *)(rows + h * cx->W * cb), cb, true);
        return;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += DK__RAR_LANES) {
        const int64_t n = j0 + DK__RAR_LANES < nc ? DK__RAR_LANES : nc - j0;
        for (int64_t h = 0; h < cx->H; h++)
            for (int64_t w = 0; w < cx->W; w++) {
                const DK_S *pw = p + j0 * s[1] + h * s[2] + w * s[3];
                DK_T *r = rows + (h * cx->W + w) * cb + j0;
                for (int64_t j = 0; j < n; j++) r[j] = DK_LOAD(pw[j * s[1]]);
            }
    }
}

static void DK_SFN(dk__rar_put_rows)(const dk__rar_ctx *cx, const DK_T *rows, int64_t nc, DK_S *p, const int64_t *s)
{
    const int64_t cb = cx->cblock;
    if (DK_DTYPE == DK_FLOAT32 && cx->avx2 && s[3] == 1) {
        const bool whole = s[2] == cx->W;
        for (int64_t h = 0; h < (whole ? 1 : cx->H); h++)
            dk_cl_scatter32((const float *)(rows + h * cx->W * cb), cb, whole ? cx->H * cx->W : cx->W, nc,
                            (float *)(p + h * s[2]), s[1], true);
        return;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += DK__RAR_LANES) {
        const int64_t n = j0 + DK__RAR_LANES < nc ? DK__RAR_LANES : nc - j0;
        for (int64_t h = 0; h < cx->H; h++)
            for (int64_t w = 0; w < cx->W; w++) {
                DK_S *pw = p + j0 * s[1] + h * s[2] + w * s[3];
                const DK_T *r = rows + (h * cx->W + w) * cb + j0;
                for (int64_t j = 0; j < n; j++) pw[j * s[1]] = DK_STORE(r[j]);
            }
    }
}

static void DK_SFN(dk__rar_forward_worker)(void *p, int tid)
{
    dk__rar_ctx *cx = (dk__rar_ctx *)p;
    const dk_tensor *in = cx->img, *out = cx->bins;
    const DK_S *x = (const DK_S *)dk_tensor_data(in);
    DK_S *y = (DK_S *)dk_tensor_data(out);
    const int64_t xs[4] = {dk_tensor_stride(in, 0), dk_tensor_stride(in, 1), dk_tensor_stride(in, 2),
                           dk_tensor_stride(in, 3)};
    const int64_t ys[4] = {dk_tensor_stride(out, 0), dk_tensor_stride(out, 1), dk_tensor_stride(out, 2),
                           dk_tensor_stride(out, 3)};
    DK_SFN(dk__rar_table) t = DK_SFN(dk__rar_table_of)(cx, tid);
    const int64_t nbins = cx->PH * cx->PW, blocks = (cx->C + cx->cblock - 1) / cx->cblock;
    const int64_t images = cx->N > 0 ? cx->N : 1;
    int64_t bo[DK__RAR_RUN];
    for (int64_t task; (task = dk_parallel_claim(&cx->counter)) < images * blocks;) {
        const int64_t img = task / blocks, c0 = task % blocks * cx->cblock;
        const int64_t nc = c0 + cx->cblock < cx->C ? cx->cblock : cx->C - c0;
        bool have_rows = false; /* read in at the first RoI that samples them */
        for (int64_t k = 0; k < cx->K; k++) {
            DK_TFN(dk_roi_align_rotated) r;
            const int64_t n = DK_SFN(dk__rar_roi)(cx, k, &r);
            /* the RoIs of image img; those of no image are image 0's to write (as zeros) */
            if (n != img && !(n < 0 && img == 0)) continue;
            DK_S *yk = y + k * ys[0] + c0 * ys[1];
            if (n < 0 || r.ay.grid <= 0 || r.ax.grid <= 0 || cx->H <= 0 || cx->W <= 0) { /* no sample: zeros */
                for (int64_t c = 0; c < nc; c++)
                    for (int64_t b = 0; b < nbins; b++)
                        yk[c * ys[1] + b / cx->PW * ys[2] + b % cx->PW * ys[3]] = DK_STORE((DK_T)0);
                continue;
            }
            if (!have_rows) DK_SFN(dk__rar_get_rows)(cx, x + n * xs[0] + c0 * xs[1], xs, nc, t.rows);
            have_rows = true;
            const DK_T count = DK_TFN(dk_roi_align_count)(&r.ay, &r.ax);
            DK_SFN(dk__rar_turns)(cx, &r, &t);
            for (int64_t b0 = 0; b0 < nbins;) {
                const int64_t b1 = DK_SFN(dk__rar_tabulate)(cx, &r, b0, &t);
                if (b1 == b0) { /* one bin with more samples than the table: the per-element math */
                    const DK_S *xn = x + n * xs[0] + c0 * xs[1];
                    for (int64_t c = 0; c < nc; c++)
                        yk[c * ys[1] + b0 / cx->PW * ys[2] + b0 % cx->PW * ys[3]] = DK_STORE(
                            DK_SFN(dk_roi_align_rotated_forward)(xn + c * xs[1], xs[2], xs[3], cx->H, cx->W, &r,
                                                                 b0 / cx->PW, b0 % cx->PW));
                    b0++;
                    continue;
                }
                DK_SFN(dk__rar_bin_offsets)(cx, b0, b1, ys[2], ys[3], bo);
                DK_S *yb = yk + b0 / cx->PW * ys[2] + b0 % cx->PW * ys[3];
#if DK__RAR_AVX2
                if (cx->avx2)
                    DK_SFN(dk__rar_forward_run_avx2)(t.rows, nc, &t, b1 - b0, count, yb - bo[0], bo, ys[1], cx->cblock,
                                                     dk__rar_dense(cx, b0, b1, ys));
                else
#endif
                    DK_SFN(dk__rar_forward_run)(t.rows, nc, &t, b1 - b0, count, yb - bo[0], bo, ys[1]);
                b0 = b1;
            }
        }
    }
}

static void DK_SFN(dk__rar_backward_worker)(void *p, int tid)
{
    dk__rar_ctx *cx = (dk__rar_ctx *)p;
    const dk_tensor *gi = cx->img, *go = cx->bins;
    DK_S *x = (DK_S *)dk_tensor_data(gi);
    const DK_S *g = (const DK_S *)dk_tensor_data(go);
    const int64_t xs[4] = {dk_tensor_stride(gi, 0), dk_tensor_stride(gi, 1), dk_tensor_stride(gi, 2),
                           dk_tensor_stride(gi, 3)};
    const int64_t gs[4] = {dk_tensor_stride(go, 0), dk_tensor_stride(go, 1), dk_tensor_stride(go, 2),
                           dk_tensor_stride(go, 3)};
    DK_SFN(dk__rar_table) t = DK_SFN(dk__rar_table_of)(cx, tid);
    const int64_t cb = cx->cblock, plane = cx->H * cx->W, nbins = cx->PH * cx->PW;
    const int64_t blocks = (cx->C + cb - 1) / cb;
    int64_t bo[DK__RAR_RUN];
    for (int64_t task; (task = dk_parallel_claim(&cx->counter)) < cx->N * blocks;) {
        const int64_t n = task / blocks, c0 = task % blocks * cb;
        const int64_t nc = c0 + cb < cx->C ? cb : cx->C - c0;
        memset(t.rows, 0, (size_t)(plane * cb) * sizeof(DK_T));
        for (int64_t k = 0; k < cx->K; k++) {
            DK_TFN(dk_roi_align_rotated) r;
            if (DK_SFN(dk__rar_roi)(cx, k, &r) != n || r.ay.grid <= 0 || r.ax.grid <= 0) continue;
            const DK_T count = DK_TFN(dk_roi_align_count)(&r.ay, &r.ax);
            const DK_S *gk = g + k * gs[0] + c0 * gs[1];
            DK_SFN(dk__rar_turns)(cx, &r, &t);
            for (int64_t b0 = 0; b0 < nbins;) {
                const int64_t b1 = DK_SFN(dk__rar_tabulate)(cx, &r, b0, &t);
                if (b1 == b0) { /* one bin with more samples than the table: its samples one by one */
                    const int64_t ph = b0 / cx->PW, pw = b0 % cx->PW;
                    for (int64_t j = 0; j < nc; j++) {
                        const DK_T gc = DK_LOAD(gk[j * gs[1] + ph * gs[2] + pw * gs[3]]) / count;
                        DK_T *a = t.rows + j;
                        for (int64_t iy = 0; iy < r.ay.grid; ++iy)
                            for (int64_t ix = 0; ix < r.ax.grid; ++ix) {
                                DK_T sy, sx;
                                DK_TFN(dk_roi_align_rotated_sample)(&r, ph, pw, iy, ix, &sy, &sx);
                                DK_TFN(dk_roi_align_bilinear) q;
                                if (!DK_TFN(dk_roi_align_bilinear_init)(sy, sx, cx->H, cx->W, &q)) continue;
                                a[(q.y_low * cx->W + q.x_low) * cb] += gc * q.w1;
                                a[(q.y_low * cx->W + q.x_high) * cb] += gc * q.w2;
                                a[(q.y_high * cx->W + q.x_low) * cb] += gc * q.w3;
                                a[(q.y_high * cx->W + q.x_high) * cb] += gc * q.w4;
                            }
                    }
                    b0++;
                    continue;
                }
                /* the run's gradients of the task's channels, divided by count, a row per bin: float32
                 * runs of contiguous bins in AVX2 tiles (Note [Channels-last copies]) */
                DK_SFN(dk__rar_bin_offsets)(cx, b0, b1, gs[2], gs[3], bo);
                const bool tiles = DK_DTYPE == DK_FLOAT32 && cx->avx2 && dk__rar_dense(cx, b0, b1, gs);
                if (tiles) dk_cl_gather32((const float *)(gk + bo[0]), gs[1], nc, b1 - b0, (float *)t.bins, cb, true);
                for (int64_t b = 0; b < b1 - b0; b++) {
                    DK_T *gr = t.bins + b * cb;
                    const DK_S *gj = gk + bo[b];
                    if (!tiles)
                        for (int64_t j = 0; j < nc; j++, gj += gs[1]) gr[j] = DK_LOAD(*gj);
                    for (int64_t j = 0; j < nc; j++) gr[j] /= count; /* a pass of its own: vectors */
                }
#if DK__RAR_AVX2
                if (cx->avx2) DK_SFN(dk__rar_backward_run_avx2)(t.rows, nc, &t, b1 - b0, t.bins, cb);
                else
#endif
                    DK_SFN(dk__rar_backward_run)(t.rows, nc, &t, b1 - b0, t.bins, cb);
                b0 = b1;
            }
        }
        DK_SFN(dk__rar_put_rows)(cx, t.rows, nc, x + n * xs[0] + c0 * xs[1], xs);
    }
}

#endif
