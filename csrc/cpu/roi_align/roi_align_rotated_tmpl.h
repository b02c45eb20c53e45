/*
 * roi_align/roi_align_rotated_tmpl.h — the CPU roi_align_rotated for one storage type (Note
 * [Templates in C] in kernels/dk_template.h), instantiated by roi_align_rotated_cpu.c, whose
 * Note [Rotated RoIAlign on a CPU] says how the work is split.
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

/* One thread's table (Note [Rotated RoIAlign on a CPU]): per sample inside the map its taps'
 * plane offsets (row stride sy, column stride sx) and weights; per bin, its count of them. */
typedef struct {
    int64_t *off;
    DK_T *w;
    int64_t *n;
} DK_SFN(dk__rar_table);

static DK_SFN(dk__rar_table) DK_SFN(dk__rar_table_of)(const dk__rar_ctx *cx, int tid)
{
    char *p = cx->scratch + (size_t)tid * cx->per_thread;
    DK_SFN(dk__rar_table) t;
    t.off = (int64_t *)p;
    t.n = t.off + 4 * DK__RAR_TABLE;
    t.w = (DK_T *)(t.n + DK__RAR_TABLE);
    return t;
}

/* Tabulates bins b0, b0 + 1, ... (bin b is (b / PW, b % PW)) while their samples fit; returns the
 * end of the run (b0 itself when bin b0 alone does not fit). */
static int64_t DK_SFN(dk__rar_tabulate)(const dk__rar_ctx *cx, const DK_TFN(dk_roi_align_rotated) *r, int64_t b0,
                                        int64_t sy, int64_t sx, DK_SFN(dk__rar_table) *t)
{
    const int64_t per_bin = r->ay.grid * r->ax.grid, nbins = cx->PH * cx->PW;
    int64_t used = 0, b = b0;
    for (; b < nbins && used + per_bin <= DK__RAR_TABLE; ++b) {
        const int64_t ph = b / cx->PW, pw = b % cx->PW, first = used;
        for (int64_t iy = 0; iy < r->ay.grid; ++iy)
            for (int64_t ix = 0; ix < r->ax.grid; ++ix) {
                DK_T y, x;
                DK_TFN(dk_roi_align_rotated_sample)(r, ph, pw, iy, ix, &y, &x);
                DK_TFN(dk_roi_align_bilinear) q;
                if (!DK_TFN(dk_roi_align_bilinear_init)(y, x, cx->H, cx->W, &q)) continue;
                int64_t *o = t->off + 4 * used;
                DK_T *w = t->w + 4 * used;
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
        t->n[b - b0] = used - first;
    }
    return b;
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
    for (int64_t task; (task = dk_parallel_claim(&cx->counter)) < images * blocks;) {
        const int64_t img = task / blocks, c0 = task % blocks * cx->cblock;
        const int64_t c1 = c0 + cx->cblock < cx->C ? c0 + cx->cblock : cx->C;
        for (int64_t k = 0; k < cx->K; k++) {
            DK_TFN(dk_roi_align_rotated) r;
            const int64_t n = DK_SFN(dk__rar_roi)(cx, k, &r);
            /* the RoIs of image img; those of no image are image 0's to write (as zeros) */
            if (n != img && !(n < 0 && img == 0)) continue;
            DK_S *yk = y + k * ys[0];
            if (n < 0 || r.ay.grid <= 0 || r.ax.grid <= 0 || cx->H <= 0 || cx->W <= 0) { /* no sample: zeros */
                for (int64_t c = c0; c < c1; c++)
                    for (int64_t b = 0; b < nbins; b++)
                        yk[c * ys[1] + b / cx->PW * ys[2] + b % cx->PW * ys[3]] = DK_STORE((DK_T)0);
                continue;
            }
            const DK_T count = DK_TFN(dk_roi_align_count)(&r.ay, &r.ax);
            const DK_S *xn = x + n * xs[0];
            for (int64_t b0 = 0; b0 < nbins;) {
                const int64_t b1 = DK_SFN(dk__rar_tabulate)(cx, &r, b0, xs[2], xs[3], &t);
                if (b1 == b0) { /* one bin with more samples than the table: the per-element math */
                    for (int64_t c = c0; c < c1; c++)
                        yk[c * ys[1] + b0 / cx->PW * ys[2] + b0 % cx->PW * ys[3]] = DK_STORE(
                            DK_SFN(dk_roi_align_rotated_forward)(xn + c * xs[1], xs[2], xs[3], cx->H, cx->W, &r,
                                                                 b0 / cx->PW, b0 % cx->PW));
                    b0++;
                    continue;
                }
                /* four channels at a time: each table entry, read once, serves them all */
                int64_t c = c0;
                for (; c + 4 <= c1; c += 4) {
                    const DK_S *p0 = xn + c * xs[1], *p1 = p0 + xs[1], *p2 = p1 + xs[1], *p3 = p2 + xs[1];
                    const int64_t *o = t.off;
                    const DK_T *w = t.w;
                    for (int64_t b = b0; b < b1; b++) {
                        DK_T s0 = (DK_T)0, s1 = (DK_T)0, s2 = (DK_T)0, s3 = (DK_T)0;
                        for (int64_t i = 0, m = t.n[b - b0]; i < m; i++, o += 4, w += 4) {
                            s0 += w[0] * DK_LOAD(p0[o[0]]) + w[1] * DK_LOAD(p0[o[1]]) + w[2] * DK_LOAD(p0[o[2]]) +
                                  w[3] * DK_LOAD(p0[o[3]]);
                            s1 += w[0] * DK_LOAD(p1[o[0]]) + w[1] * DK_LOAD(p1[o[1]]) + w[2] * DK_LOAD(p1[o[2]]) +
                                  w[3] * DK_LOAD(p1[o[3]]);
                            s2 += w[0] * DK_LOAD(p2[o[0]]) + w[1] * DK_LOAD(p2[o[1]]) + w[2] * DK_LOAD(p2[o[2]]) +
                                  w[3] * DK_LOAD(p2[o[3]]);
                            s3 += w[0] * DK_LOAD(p3[o[0]]) + w[1] * DK_LOAD(p3[o[1]]) + w[2] * DK_LOAD(p3[o[2]]) +
                                  w[3] * DK_LOAD(p3[o[3]]);
                        }
                        DK_S *yb = yk + c * ys[1] + b / cx->PW * ys[2] + b % cx->PW * ys[3];
                        yb[0] = DK_STORE(s0 / count);
                        yb[ys[1]] = DK_STORE(s1 / count);
                        yb[2 * ys[1]] = DK_STORE(s2 / count);
                        yb[3 * ys[1]] = DK_STORE(s3 / count);
                    }
                }
                for (; c < c1; c++) {
                    const DK_S *plane = xn + c * xs[1];
                    const int64_t *o = t.off;
                    const DK_T *w = t.w;
                    for (int64_t b = b0; b < b1; b++) {
                        DK_T sum = (DK_T)0;
                        for (int64_t i = 0, m = t.n[b - b0]; i < m; i++, o += 4, w += 4)
                            sum += w[0] * DK_LOAD(plane[o[0]]) + w[1] * DK_LOAD(plane[o[1]]) +
                                   w[2] * DK_LOAD(plane[o[2]]) + w[3] * DK_LOAD(plane[o[3]]);
                        yk[c * ys[1] + b / cx->PW * ys[2] + b % cx->PW * ys[3]] = DK_STORE(sum / count);
                    }
                }
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
    /* the accumulator of the task's channels, [cblock][H][W], after the table */
    DK_T *acc = (DK_T *)(cx->scratch + (size_t)tid * cx->per_thread + dk__rar_table_bytes(dk_tensor_dtype(go)));
    const int64_t plane = cx->H * cx->W, nbins = cx->PH * cx->PW, blocks = (cx->C + cx->cblock - 1) / cx->cblock;
    for (int64_t task; (task = dk_parallel_claim(&cx->counter)) < cx->N * blocks;) {
        const int64_t n = task / blocks, c0 = task % blocks * cx->cblock;
        const int64_t nc = c0 + cx->cblock < cx->C ? cx->cblock : cx->C - c0;
        memset(acc, 0, (size_t)(nc * plane) * sizeof(DK_T));
        for (int64_t k = 0; k < cx->K; k++) {
            DK_TFN(dk_roi_align_rotated) r;
            if (DK_SFN(dk__rar_roi)(cx, k, &r) != n || r.ay.grid <= 0 || r.ax.grid <= 0) continue;
            const DK_T count = DK_TFN(dk_roi_align_count)(&r.ay, &r.ax);
            const DK_S *gk = g + k * gs[0] + c0 * gs[1];
            for (int64_t b0 = 0; b0 < nbins;) {
                const int64_t b1 = DK_SFN(dk__rar_tabulate)(cx, &r, b0, cx->W, 1, &t);
                if (b1 == b0) { /* one bin with more samples than the table: its samples one by one */
                    const int64_t ph = b0 / cx->PW, pw = b0 % cx->PW;
                    for (int64_t j = 0; j < nc; j++) {
                        const DK_T gc = DK_LOAD(gk[j * gs[1] + ph * gs[2] + pw * gs[3]]) / count;
                        DK_T *a = acc + j * plane;
                        for (int64_t iy = 0; iy < r.ay.grid; ++iy)
                            for (int64_t ix = 0; ix < r.ax.grid; ++ix) {
                                DK_T sy, sx;
                                DK_TFN(dk_roi_align_rotated_sample)(&r, ph, pw, iy, ix, &sy, &sx);
                                DK_TFN(dk_roi_align_bilinear) q;
                                if (!DK_TFN(dk_roi_align_bilinear_init)(sy, sx, cx->H, cx->W, &q)) continue;
                                a[q.y_low * cx->W + q.x_low] += gc * q.w1;
                                a[q.y_low * cx->W + q.x_high] += gc * q.w2;
                                a[q.y_high * cx->W + q.x_low] += gc * q.w3;
                                a[q.y_high * cx->W + q.x_high] += gc * q.w4;
                            }
                    }
                    b0++;
                    continue;
                }
                int64_t j = 0;
                for (; j + 4 <= nc; j += 4) { /* four channels per table entry read */
                    DK_T *a0 = acc + j * plane, *a1 = a0 + plane, *a2 = a1 + plane, *a3 = a2 + plane;
                    const int64_t *o = t.off;
                    const DK_T *w = t.w;
                    for (int64_t b = b0; b < b1; b++) {
                        const DK_S *gb = gk + j * gs[1] + b / cx->PW * gs[2] + b % cx->PW * gs[3];
                        const DK_T g0 = DK_LOAD(gb[0]) / count, g1 = DK_LOAD(gb[gs[1]]) / count;
                        const DK_T g2 = DK_LOAD(gb[2 * gs[1]]) / count, g3 = DK_LOAD(gb[3 * gs[1]]) / count;
                        for (int64_t i = 0, m = t.n[b - b0]; i < m; i++, o += 4, w += 4) {
                            /* in locals: the stores below may not alias them (all are DK_T) */
                            const int64_t o0 = o[0], o1 = o[1], o2 = o[2], o3 = o[3];
                            const DK_T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
                            a0[o0] += g0 * w0, a0[o1] += g0 * w1, a0[o2] += g0 * w2, a0[o3] += g0 * w3;
                            a1[o0] += g1 * w0, a1[o1] += g1 * w1, a1[o2] += g1 * w2, a1[o3] += g1 * w3;
                            a2[o0] += g2 * w0, a2[o1] += g2 * w1, a2[o2] += g2 * w2, a2[o3] += g2 * w3;
                            a3[o0] += g3 * w0, a3[o1] += g3 * w1, a3[o2] += g3 * w2, a3[o3] += g3 * w3;
                        }
                    }
                }
                for (; j < nc; j++) {
                    DK_T *a = acc + j * plane;
                    const int64_t *o = t.off;
                    const DK_T *w = t.w;
                    for (int64_t b = b0; b < b1; b++) {
                        const DK_T gc = DK_LOAD(gk[j * gs[1] + b / cx->PW * gs[2] + b % cx->PW * gs[3]]) / count;
                        for (int64_t i = 0, m = t.n[b - b0]; i < m; i++, o += 4, w += 4)
                            for (int q = 0; q < 4; q++) a[o[q]] += gc * w[q];
                    }
                }
                b0 = b1;
            }
        }
        for (int64_t j = 0; j < nc; j++) {
            DK_S *xc = x + n * xs[0] + (c0 + j) * xs[1];
            const DK_T *a = acc + j * plane;
            for (int64_t h = 0; h < cx->H; h++)
                for (int64_t w = 0; w < cx->W; w++) xc[h * xs[2] + w * xs[3]] = DK_STORE(a[h * cx->W + w]);
        }
    }
}

#endif
