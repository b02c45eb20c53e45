/*
 * roi_pool/roi_pool_tmpl.h — the CPU roi_pool for one storage type (Note [Templates in C] in
 * kernels/dk_template.h), instantiated by roi_pool_cpu.c; the split of the work is
 * roi_pool_cpu.h's.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

static inline DK_T DK_SFN(dk__rp_roi_value)(const dk__rp_ctx *cx, int64_t k, int j)
{
    return DK_LOAD(((const DK_S *)dk_tensor_data(cx->rois))[k * cx->roi_s0 + j * cx->roi_s1]);
}

/* Channels per planar forward task: a bin's bounds, found once, serve them all (Note [RoIPool on
 * a CPU] in roi_pool_cpu.h). */
#ifndef DK__RP_CHANNELS
#define DK__RP_CHANNELS 16
#endif

/* RoI k's bins. */
static inline DK_TFN(dk_roi_pool_roi) DK_SFN(dk__rp_roi)(const dk__rp_ctx *cx, int64_t k)
{
    return DK_TFN(dk_roi_pool_roi_init)(DK_SFN(dk__rp_roi_value)(cx, k, 1), DK_SFN(dk__rp_roi_value)(cx, k, 2),
                                        DK_SFN(dk__rp_roi_value)(cx, k, 3), DK_SFN(dk__rp_roi_value)(cx, k, 4),
                                        (DK_T)cx->scale, cx->PH, cx->PW, cx->bins_kind);
}

/* The bins of every RoI, [K][PH][PW] x (h0, h1, w0, w1), h0 = -1 for an empty bin or a RoI of no
 * image: found once for the tasks that all read them (roi_pool's channels-last forward). int32:
 * the blocks serve only maps whose plane index fits (dk__rp_use_blocks), so every bound does, and
 * each task reads its image's part of the table once per block of channels, 400 KB of int64 for
 * bench_roi_pool.py's case, more than this host's L2 beside the block. Measured (2026-11-28, the
 * AMD host, one thread, a C harness calling both builds alternately in one process, 31 calls each
 * after 128 MB written elsewhere, three runs): inference's minima 4.27-4.47 ms against 4.47-4.69
 * with int64, the forward with an argmax 6.37-6.64 ms against 6.44-6.75. Each axis is found once
 * per RoI (PH + PW of them, where dk_roi_pool_bin per bin finds 2 PH PW) and the rois' strides are
 * read once per call (cx->roi_s0, roi_s1), not through dk_tensor_stride per value: callgrind, that
 * case, 2.1M instructions fewer a forward (of about 62M), 0.11M fewer in ps_roi_pool's dk__psp_table
 * (0.56M a call); the same table, and within the noise in time. */
static void DK_SFN(dk__rp_bin_table)(const dk__rp_ctx *cx, int32_t *bins)
{
    const int64_t PH = cx->PH, PW = cx->PW;
    for (int64_t k = 0; k < cx->K; k++) {
        int32_t *rk = bins + k * PH * PW * 4;
        const int64_t n = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx, k, 0), cx->N);
        const DK_TFN(dk_roi_pool_roi) r = DK_SFN(dk__rp_roi)(cx, k);
        if (n < 0 || r.none) { /* every bin empty: dk_roi_pool_bin's zeros */
            for (int64_t b = 0; b < PH * PW; b++) rk[b * 4] = -1, rk[b * 4 + 1] = rk[b * 4 + 2] = rk[b * 4 + 3] = 0;
            continue;
        }
        /* dk_roi_pool_bin's bounds, each axis found once (PH + PW of them, not 2 PH PW): a column's
         * go to the first row's bins, and from there to every row's */
        for (int64_t pw = 0; pw < PW; pw++) {
            int64_t w0, w1;
            DK_TFN(dk_roi_pool_axis)(&r, false, pw, cx->W, &w0, &w1);
            rk[pw * 4 + 2] = (int32_t)w0, rk[pw * 4 + 3] = (int32_t)w1;
        }
        for (int64_t ph = 0; ph < PH; ph++) {
            int64_t h0, h1;
            DK_TFN(dk_roi_pool_axis)(&r, true, ph, cx->H, &h0, &h1);
            for (int64_t pw = 0; pw < PW; pw++) {
                int32_t *e = rk + (ph * PW + pw) * 4;
                const int32_t w0 = rk[pw * 4 + 2], w1 = rk[pw * 4 + 3];
                e[0] = h1 > h0 && w1 > w0 ? (int32_t)h0 : -1; /* -1: empty */
                e[1] = (int32_t)h1, e[2] = w0, e[3] = w1;
            }
        }
    }
}

/* What a roi_pool forward task reads of its call: the input and output, and the strides of
 * them and of argmax (zeros when there is none). */
typedef struct {
    const DK_S *x;
    DK_S *y;
    int64_t xs[4], ys[4], as[4];
} DK_SFN(dk__rp_view);

static inline DK_SFN(dk__rp_view) DK_SFN(dk__rp_view_of)(const dk__rp_ctx *cx)
{
    DK_SFN(dk__rp_view) v = {(const DK_S *)dk_tensor_data(cx->img), (DK_S *)dk_tensor_data(cx->bins), {0}, {0}, {0}};
    dk__rp_strides(cx->img, v.xs), dk__rp_strides(cx->bins, v.ys);
    if (cx->arg) dk__rp_strides(cx->argmax, v.as);
    return v;
}

/* Planes: a task per RoI and DK__RP_CHANNELS channels, each channel's bin on its plane. */
static void DK_SFN(dk__rp_forward_planes_worker)(void *p, int tid)
{
    (void)tid;
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_SFN(dk__rp_view) v = DK_SFN(dk__rp_view_of)(cx);
    const DK_S *x = v.x;
    DK_S *y = v.y;
    const int64_t *xs = v.xs, *ys = v.ys, *as = v.as;
    const int64_t chunks = (cx->C + DK__RP_CHANNELS - 1) / DK__RP_CHANNELS;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->K * chunks;) {
        const int64_t k = t / chunks, c0 = t % chunks * DK__RP_CHANNELS;
        const int64_t c1 = c0 + DK__RP_CHANNELS < cx->C ? c0 + DK__RP_CHANNELS : cx->C;
        const int64_t n = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx, k, 0), cx->N);
        const DK_TFN(dk_roi_pool_roi) r = DK_SFN(dk__rp_roi)(cx, k);
        for (int64_t ph = 0; ph < cx->PH; ph++)
            for (int64_t pw = 0; pw < cx->PW; pw++) {
                int64_t h0 = 0, h1 = 0, w0 = 0, w1 = 0;
                const bool some = n >= 0 && DK_TFN(dk_roi_pool_bin)(&r, ph, pw, cx->H, cx->W, &h0, &h1, &w0, &w1);
                for (int64_t c = c0; c < c1; c++) {
                    int64_t a = -1;
                    DK_T m = 0;
                    if (n >= 0) {
                        const DK_S *plane = x + n * xs[0] + c * xs[1];
                        /* rows of contiguous pixels (NCHW): the compiler sees the unit stride */
                        m = xs[3] == 1 ? DK_SFN(dk_roi_pool_max)(plane, xs[2], 1, cx->W, some, h0, h1, w0, w1, &a)
                                       : DK_SFN(dk_roi_pool_max)(plane, xs[2], xs[3], cx->W, some, h0, h1, w0, w1, &a);
                    }
                    y[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]] = DK_STORE(m);
                    if (cx->arg) dk__rp_arg_store(cx, k * as[0] + c * as[1] + ph * as[2] + pw * as[3], a);
                }
            }
    }
}

/* Channels-last blocks: a task per (image, DK__RP_BLOCK channels); the block copied to this
 * thread's [H][W][DK__RP_BLOCK] buffer, then every RoI of the image pooled from it (Note [RoIPool
 * on a CPU]). cx->image_rois lists each image's RoIs. */
static void DK_SFN(dk__rp_forward_blocks_worker)(void *p, int tid)
{
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const DK_SFN(dk__rp_view) v = DK_SFN(dk__rp_view_of)(cx);
    const DK_S *x = v.x;
    DK_S *y = v.y;
    const int64_t *xs = v.xs, *ys = v.ys, *as = v.as;
    const int64_t H = cx->H, W = cx->W, B = DK__RP_BLOCK;
    int64_t *arg64 = cx->arg && cx->arg64 ? (int64_t *)cx->arg : NULL;
    int32_t *arg32 = cx->arg && !cx->arg64 && !cx->arg16 ? (int32_t *)cx->arg : NULL;
    int16_t *arg16 = cx->arg && cx->arg16 ? (int16_t *)cx->arg : NULL;
    DK_T *buf = (DK_T *)cx->block + (size_t)tid * (size_t)(H * W * B);
    const int64_t blocks = (cx->C + B - 1) / B;
    const int64_t *first = cx->image_rois, *list = cx->image_rois + cx->N + 1, P = cx->PH * cx->PW;
    DK_T m[DK__RP_TILE * DK__RP_BLOCK];
    int32_t a[DK__RP_TILE * DK__RP_BLOCK];   /* plane indices: H W < 2^31 on this path */
    int16_t a16[DK__RP_TILE * DK__RP_BLOCK]; /* or narrowed, for an int16 argmax's runs */
    /* float32 storage with AVX2: the copy and the stores in 8 x 8 transposes */
    const bool fast32 = DK_DTYPE == DK_FLOAT32 && cx->avx2;
    (void)fast32; /* read only where DK__RP_AVX2 (not in a clang build: roi_pool_tiles_cpu.h) */
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->N * blocks;) {
        const int64_t n = t / blocks, c0 = t % blocks * B, nb = cx->C - c0 < B ? cx->C - c0 : B;
        if (first[n] == first[n + 1]) continue; /* no RoI on this image */
                                                /* the copy: lanes past the last channel read 0, and are never stored */
#if DK__RP_AVX2
        if (fast32 && nb == B && xs[3] == 1) { /* a row at a time, in the tiles of Note [Channels-last copies] */
            const float *plane0 = (const float *)(x + n * xs[0] + c0 * xs[1]);
            for (int64_t h = 0; h < H; h++)
                dk_cl_gather32_avx2(plane0 + h * xs[2], xs[1], B, W, (float *)buf + h * W * B, B);
        } else
#endif
            for (int64_t c = 0; c < B; c++) {
                const DK_S *plane = x + n * xs[0] + (c0 + c) * xs[1];
                for (int64_t h = 0; h < H; h++) {
                    DK_T *row = buf + h * W * B + c;
                    if (c >= nb)
                        for (int64_t w = 0; w < W; w++) row[w * B] = (DK_T)0;
                    else if (xs[3] == 1)
                        for (int64_t w = 0; w < W; w++) row[w * B] = DK_LOAD(plane[h * xs[2] + w]);
                    else
                        for (int64_t w = 0; w < W; w++) row[w * B] = DK_LOAD(plane[h * xs[2] + w * xs[3]]);
                }
            }
        for (int64_t i = first[n]; i < first[n + 1]; i++) {
            const int64_t k = list[i];
            for (int64_t b0 = 0; b0 < P; b0 += DK__RP_TILE) {
                const int64_t nbins = P - b0 < DK__RP_TILE ? P - b0 : DK__RP_TILE;
                /* an int16 argmax's whole runs: the tile's indices narrowed as they are found, transposed
                 * as int16 (dk__rp_tile_run16_avx2) */
                bool runs16 = false;
#if DK__RP_AVX2
                runs16 = arg16 && cx->avx2 && nb == B && nbins == P && dk__rp_runs(as, cx->PW, P);
#endif
                DK_TFN(dk__rp_block_tile_on)(cx, buf, W, cx->roi_bins + (k * P + b0) * 4, nbins, m, a,
                                             runs16 ? a16 : NULL, cx->arg != NULL);
                DK_S *yk = y + k * ys[0] + c0 * ys[1];
#if DK__RP_AVX2
                if (fast32 && runs16 && cx->stream_out && dk__rp_runs(ys, cx->PW, P)) {
                    /* training's usual case: both runs at once */
                    dk__rp_tile_stream_pair16_avx2((float *)yk, arg16 + k * as[0] + c0 * as[1], P, (const float *)m,
                                                   a16);
                    continue;
                }
                if (fast32 && nb == B && dk__rp_runs(ys, cx->PW, P)) {
                    if (cx->stream_out && nbins == P) dk__rp_tile_stream32_avx2(yk, P, m);
                    else dk__rp_tile_store32_avx2(yk, P, b0, m, nbins);
                } else
#endif
                    DK__RP_TILE_STORE(yk, ys, m, DK_STORE, cx->PW, P, b0, nbins, nb);
                if (arg64) {
                    DK__RP_TILE_STORE(arg64 + k * as[0] + c0 * as[1], as, a, (int64_t), cx->PW, P, b0, nbins, nb);
                } else if (arg32) {
                    int32_t *ak = arg32 + k * as[0] + c0 * as[1];
#if DK__RP_AVX2
                    if (cx->avx2 && nb == B && dk__rp_runs(as, cx->PW, P)) {
                        if (cx->stream_out && nbins == P) dk__rp_tile_stream32_avx2(ak, P, a);
                        else dk__rp_tile_store32_avx2(ak, P, b0, a, nbins);
                    } else
#endif
                        DK__RP_TILE_STORE(ak, as, a, , cx->PW, P, b0, nbins, nb);
                } else if (arg16) { /* Note [A narrow argmax] */
                    int16_t *ak = arg16 + k * as[0] + c0 * as[1];
#if DK__RP_AVX2
                    if (runs16) dk__rp_tile_run16_avx2(ak, P, a16, cx->stream_out);
                    else
#endif
                        DK__RP_TILE_STORE(ak, as, a, (int16_t), cx->PW, P, b0, nbins, nb);
                }
            }
        }
    }
    if (cx->stream_out) dk_sfence();
}

/* RoIs of no image (dk__rp_batch): every bin 0, argmax -1 (the planar path writes the same). */
static void DK_SFN(dk__rp_forward_strays)(const dk__rp_ctx *cx)
{
    DK_S *y = (DK_S *)dk_tensor_data(cx->bins);
    int64_t ys[4], as[4] = {0, 0, 0, 0};
    dk__rp_strides(cx->bins, ys);
    if (cx->arg) dk__rp_strides(cx->argmax, as);
    for (int64_t k = 0; k < cx->K; k++) {
        if (dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx, k, 0), cx->N) >= 0) continue;
        for (int64_t c = 0; c < cx->C; c++)
            for (int64_t ph = 0; ph < cx->PH; ph++)
                for (int64_t pw = 0; pw < cx->PW; pw++) {
                    y[k * ys[0] + c * ys[1] + ph * ys[2] + pw * ys[3]] = DK_STORE((DK_T)0);
                    if (cx->arg) dk__rp_arg_store(cx, k * as[0] + c * as[1] + ph * as[2] + pw * as[3], -1);
                }
    }
}

/* Whether the channels-last blocks pay (Note [RoIPool on a CPU]): `layout` is the tunable (-1 the
 * cost model). Fills cx->image_rois from `ar` when they do. */
static bool DK_SFN(dk__rp_use_blocks)(dk__rp_ctx *cx, int64_t layout, int nthreads, dk_arena *ar)
{
    const int64_t H = cx->H, W = cx->W;
    if (layout == 0 || H == 0 || W == 0 || H > (int64_t)INT32_MAX / W) return false;
    if (H * W > DK__RP_BLOCK_MAX_BYTES / (DK__RP_BLOCK * (int64_t)sizeof(DK_T))) return false;
    /* each image's RoIs (a counting sort by image, RoIs in order), and the pixels of all bins */
    int64_t *ir = (int64_t *)dk_arena_take_n(ar, (size_t)(cx->N + 1 + cx->K), sizeof(int64_t));
    if (!ir) return false;
    int64_t *first = ir, *list = ir + cx->N + 1;
    for (int64_t n = 0; n <= cx->N; n++) first[n] = 0;
    int64_t visits = 0;
    for (int64_t k = 0; k < cx->K; k++) {
        const int64_t n = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx, k, 0), cx->N);
        if (n < 0) continue;
        first[n + 1]++;
        const DK_TFN(dk_roi_pool_roi) r = DK_SFN(dk__rp_roi)(cx, k);
        int64_t h0, h1, w0, w1, g0, g1, v0, v1;
        /* the bins tile the RoI's span, overlapping by at most a pixel each: the corner bins bound it */
        DK_TFN(dk_roi_pool_bin)(&r, 0, 0, H, W, &h0, &h1, &w0, &w1);
        DK_TFN(dk_roi_pool_bin)(&r, cx->PH - 1, cx->PW - 1, H, W, &g0, &g1, &v0, &v1);
        if (g1 > h0 && v1 > w0) visits += (g1 - h0) * (v1 - w0);
    }
    int64_t images = 0;
    for (int64_t n = 0; n < cx->N; n++) images += first[n + 1] > 0;
    if (layout == -1 && visits < images * H * W) return false; /* the copy would cost more than the bins */
    for (int64_t n = 0; n < cx->N; n++) first[n + 1] += first[n];
    int64_t *fill = (int64_t *)dk_arena_take_n(ar, (size_t)cx->N + 1, sizeof(int64_t));
    cx->block = dk_arena_take_n(ar, dk_sat_mul((size_t)nthreads, (size_t)(H * W * DK__RP_BLOCK)), sizeof(DK_T));
    cx->roi_bins = (int32_t *)dk_arena_take_n(ar, dk_sat_mul((size_t)cx->K, (size_t)(cx->PH * cx->PW)),
                                              4 * sizeof(int32_t));
    if (!fill || !cx->block || !cx->roi_bins) return false;
    DK_SFN(dk__rp_bin_table)(cx, cx->roi_bins);
    for (int64_t n = 0; n <= cx->N; n++) fill[n] = first[n];
    for (int64_t k = 0; k < cx->K; k++) {
        const int64_t n = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx, k, 0), cx->N);
        if (n >= 0) list[fill[n]++] = k;
    }
    cx->image_rois = ir;
    return true;
}

static dk_status DK_SFN(dk__rp_forward)(dk__rp_ctx *cx, int nthreads, int64_t layout)
{
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    if (DK_SFN(dk__rp_use_blocks)(cx, layout, nthreads, &ar)) {
        /* the output (and argmax) written whole, once: huge pages, and the AVX2 runs streamed when
         * large (Note [Huge pages for large outputs], Note [Streaming stores] in dk_large_output.h) */
        int64_t s[4];
        dk_large_output lo;
        dk__rp_strides(cx->bins, s);
        cx->stream_out = dk_large_output_prepare(&lo, dk_tensor_data(cx->bins), 4, cx->bins->shape, s, sizeof(DK_S),
                                                 false) &&
                         cx->avx2;
        if (cx->arg) {
            dk__rp_strides(cx->argmax, s);
            dk_large_output_prepare(&lo, cx->arg, 4, cx->argmax->shape, s, dk__rp_arg_bytes(cx), false);
        }
        DK_SFN(dk__rp_forward_strays)(cx);
        dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__rp_forward_blocks_worker), cx);
    } else {
        dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__rp_forward_planes_worker), cx);
    }
    dk_arena_free(&ar);
    return DK_OK;
}

/* Backward: a task per block of DK__RP_CHANNELS channels (Note [RoIPool on a CPU]): their planes
 * zeroed in every image, then every RoI's gradients added, RoIs in order, each channel's bins in
 * (ph, pw) order: per element, torchvision's order of additions. A block's argmax and gradients
 * of one RoI are one contiguous run in the usual [K, C, PH, PW] layout. */
static void DK_SFN(dk__rp_backward_worker)(void *p, int tid)
{
    (void)tid;
    dk__rp_ctx *cx = (dk__rp_ctx *)p;
    const dk_tensor *gi = cx->img, *go = cx->bins, *am = cx->argmax;
    DK_S *x = (DK_S *)dk_tensor_data(gi);
    const DK_S *g = (const DK_S *)dk_tensor_data(go);
    int64_t xs[4], gs[4];
    dk__rp_strides(gi, xs), dk__rp_strides(go, gs);
    int64_t as[4];
    dk__rp_strides(am, as);
    const int64_t plane = cx->H * cx->W, W = cx->W, P = cx->PH * cx->PW;
    /* rows of whole width (NCHW or NHWC): a plane index is an element offset, no division */
    const bool rows = xs[2] == W * xs[3];
    /* the usual layouts (NCHW grad_input, [K, C, PH, PW] int32 or int16 argmax and grad_output): planes
     * zeroed as runs, and each RoI's block read as one run, an index a plane offset */
    const bool runs = rows && xs[3] == 1 && !cx->arg64 && dk__rp_runs(as, cx->PW, P) && dk__rp_runs(gs, cx->PW, P);
    const int16_t *arg16 = cx->arg16 ? (const int16_t *)cx->arg : NULL; /* Note [A narrow argmax] */
    const int32_t *arg32 = cx->arg16 ? NULL : (const int32_t *)cx->arg;
    /* and whether two channels' planes never share an element, so that a pair's runs may be walked
     * side by side (a grad_input of overlapping planes would see their additions interleaved) */
    const bool pairs = xs[1] >= plane;
    const int64_t ahead = dk_tunable(&dk__rp_read_ahead); /* Note [RoIPool on a CPU] */
    const int64_t blocks = (cx->C + DK__RP_CHANNELS - 1) / DK__RP_CHANNELS;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < blocks;) {
        const int64_t c0 = t * DK__RP_CHANNELS, c1 = c0 + DK__RP_CHANNELS < cx->C ? c0 + DK__RP_CHANNELS : cx->C;
        for (int64_t n = 0; n < cx->N; n++)
            for (int64_t c = c0; c < c1; c++)
                if (runs) memset(x + n * xs[0] + c * xs[1], 0, (size_t)plane * sizeof(DK_S)); /* 0.0 in every type */
                else
                    for (int64_t h = 0; h < cx->H; h++)
                        for (int64_t w = 0; w < W; w++)
                            x[n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3]] = DK_STORE((DK_T)0);
        for (int64_t k = 0; k < cx->K; k++) {
            const int64_t n = dk__rp_batch((double)DK_SFN(dk__rp_roi_value)(cx, k, 0), cx->N);
            if (n < 0) continue;
            if (runs) {
                /* the runs of RoI k + ahead, read ahead a channel pair at a time (none past the last) */
                const bool next = ahead > 0 && k + ahead < cx->K;
                const int64_t kn = next ? k + ahead : k;
                const DK_S *gn = next ? g + kn * gs[0] + c0 * gs[1] : NULL;
                if (arg16)
                    DK__RP_BACKWARD_RUNS(arg16 + k * as[0] + c0 * as[1], g + k * gs[0] + c0 * gs[1],
                                         x + n * xs[0] + c0 * xs[1], arg16 + kn * as[0] + c0 * as[1], gn);
                else
                    DK__RP_BACKWARD_RUNS(arg32 + k * as[0] + c0 * as[1], g + k * gs[0] + c0 * gs[1],
                                         x + n * xs[0] + c0 * xs[1], arg32 + kn * as[0] + c0 * as[1], gn);
                continue;
            }
            for (int64_t c = c0; c < c1; c++) {
                DK_S *img = x + n * xs[0] + c * xs[1];
                const int64_t ab = k * as[0] + c * as[1], gb = k * gs[0] + c * gs[1];
                for (int64_t ph = 0; ph < cx->PH; ph++)
                    for (int64_t pw = 0; pw < cx->PW; pw++) {
                        const int64_t a = dk__rp_arg_load(cx, ab + ph * as[2] + pw * as[3]);
                        if (a < 0 || a >= plane) continue; /* -1: nothing was pooled (ops/roi_pool.c) */
                        DK_S *e = img + (rows ? a * xs[3] : (a / W) * xs[2] + (a % W) * xs[3]);
                        *e = DK_STORE(DK_LOAD(*e) + DK_LOAD(g[gb + ph * gs[2] + pw * gs[3]]));
                    }
            }
        }
    }
}

static dk_status DK_SFN(dk__rp_backward)(dk__rp_ctx *cx, int nthreads)
{
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__rp_backward_worker), cx);
    return DK_OK;
}

#endif
