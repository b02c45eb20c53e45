/*
 * deform_conv/deform_conv_tmpl.h — the CPU deform_conv2d for one storage type (Note [Templates
 * in C] in kernels/dk_template.h), instantiated by deform_conv_cpu.c; the split of the work is
 * Note [Deformable convolution on a CPU] in deform_conv_cpu.h.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* Element (i0, i1, i2, i3) of a 4-d tensor of this storage type, in the compute type. */
static inline DK_T DK_SFN(dk__dc_get4)(const dk_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const DK_S *p = (const DK_S *)dk_tensor_data(t);
    return DK_LOAD(p[a * dk_tensor_stride(t, 0) + b * dk_tensor_stride(t, 1) + c * dk_tensor_stride(t, 2) +
                     d * dk_tensor_stride(t, 3)]);
}

/* One sample of the block, and its mask. */
typedef struct {
    DK_TFN(dk_deform_conv_sample) s;
    DK_T m;
} DK_SFN(dk__dc_entry);

/* The samples of tap `tap` of offset group d for image n at output positions [p0, p0 + pb). */
static void DK_SFN(dk__dc_table)(const dk__dc_ctx *cx, int64_t n, int64_t d, int64_t tap, int64_t p0, int64_t pb,
                                 int64_t sy, int64_t sx, DK_SFN(dk__dc_entry) *e)
{
    const int64_t i = tap / cx->kw, j = tap % cx->kw;
    const int64_t ch = 2 * (d * cx->kk + tap);
    for (int64_t q = 0; q < pb; q++) {
        const int64_t p = p0 + q, y = p / cx->Wo, x = p % cx->Wo;
        const DK_T py = DK_TFN(dk_deform_conv_base)(y, cx->sh, cx->ph, i, cx->dh) +
                        DK_SFN(dk__dc_get4)(cx->offset, n, ch, y, x);
        const DK_T px = DK_TFN(dk_deform_conv_base)(x, cx->sw, cx->pw, j, cx->dw) +
                        DK_SFN(dk__dc_get4)(cx->offset, n, ch + 1, y, x);
        DK_TFN(dk_deform_conv_sample_init)(py, px, cx->H, cx->W, sy, sx, cx->geometry, &e[q].s);
        e[q].m = cx->mask ? DK_SFN(dk__dc_get4)(cx->mask, n, d * cx->kk + tap, y, x) : (DK_T)1;
    }
}

/* The corners' values of sample s on `plane` (0 for those outside). */
static inline void DK_SFN(dk__dc_corners)(const DK_S *plane, const DK_TFN(dk_deform_conv_sample) *s, DK_T v[4])
{
    for (int k = 0; k < 4; k++) v[k] = s->in[k] ? DK_LOAD(plane[s->off[k]]) : (DK_T)0;
}

/* Per thread (forward): columns [K, block], the product [Cout, block], a table [block]. */
static size_t DK_SFN(dk__dc_forward_bytes)(const dk__dc_ctx *cx)
{
    const size_t b = (size_t)cx->block;
    size_t n = dk_sat_mul(dk_sat_mul((size_t)cx->K, b), sizeof(DK_T));
    n = dk_sat_add(n, dk_sat_mul(dk_sat_mul((size_t)cx->Cout, b), sizeof(DK_T)));
    n = dk_sat_add(n, dk_sat_mul(b, sizeof(DK_SFN(dk__dc_entry))));
    /* the worker rounds the columns and the product up to 8 elements each and puts 64 bytes
     * after each: without the 2 x 7 elements, float64 ran up to 48 bytes past its share (K = 36,
     * Cout = 6, a block of 99: 16 bytes, a corrupted heap) */
    return dk_sat_add(n, 3 * 64 + 2 * 8 * sizeof(DK_T));
}

/* Fills the columns [K, pb] (row c kk + tap) of image n's block at p0, masked. */
static void DK_SFN(dk__dc_im2col)(const dk__dc_ctx *cx, int64_t n, int64_t p0, int64_t pb, DK_T *cols,
                                  DK_SFN(dk__dc_entry) *e)
{
    const dk_tensor *in = cx->input;
    const DK_S *x = (const DK_S *)dk_tensor_data(in);
    const int64_t xs0 = dk_tensor_stride(in, 0), xs1 = dk_tensor_stride(in, 1);
    const int64_t sy = dk_tensor_stride(in, 2), sx = dk_tensor_stride(in, 3);
    for (int64_t d = 0; d < cx->og; d++)
        for (int64_t tap = 0; tap < cx->kk; tap++) {
            DK_SFN(dk__dc_table)(cx, n, d, tap, p0, pb, sy, sx, e);
            for (int64_t c = d * cx->cpog; c < (d + 1) * cx->cpog; c++) {
                const DK_S *plane = x + n * xs0 + c * xs1;
                DK_T *row = cols + (c * cx->kk + tap) * pb;
                for (int64_t q = 0; q < pb; q++) {
                    DK_T v[4];
                    DK_SFN(dk__dc_corners)(plane, &e[q].s, v);
                    row[q] = e[q].m * DK_TFN(dk_deform_conv_value)(&e[q].s, v);
                }
            }
        }
}

static void DK_SFN(dk__dc_forward_worker)(void *p, int tid)
{
    dk__dc_ctx *cx = (dk__dc_ctx *)p;
    char *mine = (char *)cx->scratch + (size_t)tid * cx->scratch_bytes;
    DK_T *cols = (DK_T *)mine;
    DK_T *prod = (DK_T *)(mine + dk_round8((size_t)(cx->K * cx->block)) * sizeof(DK_T) + 64);
    DK_SFN(dk__dc_entry) *e = (DK_SFN(dk__dc_entry) *)((char *)prod +
                                                       dk_round8((size_t)(cx->Cout * cx->block)) * sizeof(DK_T) + 64);
    const DK_T *wt = (const DK_T *)cx->wt;
    const dk_tensor *out = cx->output;
    DK_S *y = (DK_S *)dk_tensor_data(out);
    const int64_t os[4] = {dk_tensor_stride(out, 0), dk_tensor_stride(out, 1), dk_tensor_stride(out, 2),
                           dk_tensor_stride(out, 3)};
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->N * cx->blocks;) {
        const int64_t n = t / cx->blocks, p0 = t % cx->blocks * cx->block;
        const int64_t pb = p0 + cx->block < cx->P ? cx->block : cx->P - p0;
        DK_SFN(dk__dc_im2col)(cx, n, p0, pb, cols, e);
        for (int64_t g = 0; g < cx->groups; g++)
            DK_TFN(dk__dc_gemm)(false, false, cx->Coutg, pb, cx->Kg, (DK_T)1, wt + g * cx->Coutg * cx->Kg, cx->Kg,
                                cols + g * cx->Kg * pb, pb, (DK_T)0, prod + g * cx->Coutg * pb, pb);
        for (int64_t o = 0; o < cx->Cout; o++) {
            const DK_T b = cx->bias
                               ? DK_LOAD(((const DK_S *)dk_tensor_data(cx->bias))[o * dk_tensor_stride(cx->bias, 0)])
                               : (DK_T)0;
            const DK_T *row = prod + o * pb;
            for (int64_t q = 0; q < pb; q++) {
                const int64_t pp = p0 + q;
                y[n * os[0] + o * os[1] + pp / cx->Wo * os[2] + pp % cx->Wo * os[3]] = DK_STORE(row[q] + b);
            }
        }
    }
}

/* Per thread (backward): columns and grad columns [K, block], grad_output's block [Cout, block]
 * and its transpose, a table [block], the three sums [3, block], grad_input's planes [Cin, H,
 * W]. */
static size_t DK_SFN(dk__dc_backward_bytes)(const dk__dc_ctx *cx)
{
    const size_t b = (size_t)cx->block, t = sizeof(DK_T);
    size_t n = dk_sat_mul(dk_sat_mul(dk_sat_mul((size_t)cx->K, b), t), 2);
    n = dk_sat_add(n, dk_sat_mul(dk_sat_mul(dk_sat_mul((size_t)cx->Cout, b), t), 2));
    n = dk_sat_add(n, dk_sat_mul(b, sizeof(DK_SFN(dk__dc_entry))));
    n = dk_sat_add(n, dk_sat_mul(dk_sat_mul(b, 3), t));
    n = dk_sat_add(n, dk_sat_mul(dk_sat_mul(dk_sat_mul((size_t)cx->Cin, (size_t)cx->H), (size_t)cx->W), t));
    return dk_sat_add(n, 8 * 64 + 7 * 8 * t);
}

/* Per slot (backward): grad_weight transposed per group [groups, Kg, Cout / groups] and
 * grad_bias [Cout]. */
static size_t DK_SFN(dk__dc_slot_bytes)(const dk__dc_ctx *cx)
{
    const size_t t = sizeof(DK_T);
    size_t n = dk_sat_mul(dk_sat_mul((size_t)cx->Cout, (size_t)cx->Kg), t);
    n = dk_sat_add(n, dk_sat_mul((size_t)cx->Cout, t));
    return dk_sat_add(n, 2 * 64 + 2 * 8 * t);
}

typedef struct {
    DK_T *cols, *gcols, *g, *gt, *sums, *gin, *gw, *gb;
    DK_SFN(dk__dc_entry) *e;
} DK_SFN(dk__dc_slot);

/* Thread tid's buffers and slot s's sums. */
static DK_SFN(dk__dc_slot) DK_SFN(dk__dc_slot_of)(const dk__dc_ctx *cx, int tid, int64_t s)
{
    char *p = (char *)cx->scratch + (size_t)tid * cx->scratch_bytes;
    DK_SFN(dk__dc_slot) r;
#define DK__DC_CARVE(field, type, count) \
    r.field = (type *)p;                 \
    p += (dk_round8((size_t)(count)) * sizeof(type) + 63) & ~(size_t)63;
    DK__DC_CARVE(cols, DK_T, cx->K * cx->block)
    DK__DC_CARVE(gcols, DK_T, cx->K * cx->block)
    DK__DC_CARVE(g, DK_T, cx->Cout * cx->block)
    DK__DC_CARVE(gt, DK_T, cx->Cout * cx->block)
    DK__DC_CARVE(sums, DK_T, 3 * cx->block)
    DK__DC_CARVE(gin, DK_T, cx->Cin * cx->H * cx->W)
    DK__DC_CARVE(e, DK_SFN(dk__dc_entry), cx->block)
    p = (char *)cx->sums + (size_t)s * cx->slot_bytes;
    DK__DC_CARVE(gw, DK_T, cx->Cout * cx->Kg)
    DK__DC_CARVE(gb, DK_T, cx->Cout)
#undef DK__DC_CARVE
    return r;
}

/* One block of image n: everything but the store of grad_input (Note [Deformable convolution on
 * a CPU]). */
static void DK_SFN(dk__dc_backward_block)(const dk__dc_ctx *cx, const DK_SFN(dk__dc_slot) *sl, int64_t n, int64_t p0,
                                          int64_t pb)
{
    const DK_T *wt = (const DK_T *)cx->wt;
    const dk_tensor *go = cx->out;
    const DK_S *gy = (const DK_S *)dk_tensor_data(go);
    const int64_t gs[4] = {dk_tensor_stride(go, 0), dk_tensor_stride(go, 1), dk_tensor_stride(go, 2),
                           dk_tensor_stride(go, 3)};
    for (int64_t o = 0; o < cx->Cout; o++) {
        DK_T *row = sl->g + o * pb, sum = 0;
        for (int64_t q = 0; q < pb; q++) {
            const int64_t pp = p0 + q;
            row[q] = DK_LOAD(gy[n * gs[0] + o * gs[1] + pp / cx->Wo * gs[2] + pp % cx->Wo * gs[3]]);
            sum += row[q];
        }
        sl->gb[o] += sum;
    }
    for (int64_t g = 0; g < cx->groups; g++)
        DK_TFN(dk__dc_gemm)(true, false, cx->Kg, pb, cx->Coutg, (DK_T)1, wt + g * cx->Coutg * cx->Kg, cx->Kg,
                            sl->g + g * cx->Coutg * pb, pb, (DK_T)0, sl->gcols + g * cx->Kg * pb, pb);
    const dk_tensor *in = cx->input;
    const DK_S *x = (const DK_S *)dk_tensor_data(in);
    const int64_t xs0 = dk_tensor_stride(in, 0), xs1 = dk_tensor_stride(in, 1);
    const int64_t sy = dk_tensor_stride(in, 2), sx = dk_tensor_stride(in, 3);
    DK_T *ay = sl->sums, *ax = sl->sums + pb, *am = sl->sums + 2 * pb;
    DK_SFN(dk__dc_entry) *e = sl->e;
    for (int64_t d = 0; d < cx->og; d++)
        for (int64_t tap = 0; tap < cx->kk; tap++) {
            DK_SFN(dk__dc_table)(cx, n, d, tap, p0, pb, sy, sx, e);
            for (int64_t q = 0; q < pb; q++) ay[q] = ax[q] = am[q] = (DK_T)0;
            for (int64_t c = d * cx->cpog; c < (d + 1) * cx->cpog; c++) {
                const DK_S *plane = x + n * xs0 + c * xs1;
                /* grad_input's plane, contiguous: addressed by the corners' rows and columns */
                DK_T *gplane = sl->gin + c * cx->H * cx->W;
                DK_T *col = sl->cols + (c * cx->kk + tap) * pb;
                const DK_T *gcol = sl->gcols + (c * cx->kk + tap) * pb;
                for (int64_t q = 0; q < pb; q++) {
                    const DK_TFN(dk_deform_conv_sample) *s = &e[q].s;
                    DK_T v[4];
                    DK_SFN(dk__dc_corners)(plane, s, v);
                    const DK_T val = DK_TFN(dk_deform_conv_value)(s, v);
                    const DK_T m = e[q].m, gc = gcol[q], t = gc * m;
                    col[q] = m * val;
                    am[q] += gc * val;
                    ay[q] += t * DK_TFN(dk_deform_conv_dy)(s, v);
                    ax[q] += t * DK_TFN(dk_deform_conv_dx)(s, v);
                    if (s->any) {
                        const int64_t o0 = s->y0 * cx->W + s->x0; /* gplane is contiguous */
                        if (s->in[0]) gplane[o0] += t * s->w[0];
                        if (s->in[1]) gplane[o0 + 1] += t * s->w[1];
                        if (s->in[2]) gplane[o0 + cx->W] += t * s->w[2];
                        if (s->in[3]) gplane[o0 + cx->W + 1] += t * s->w[3];
                    }
                }
            }
            for (int64_t q = 0; q < pb; q++) {
                const int64_t pp = p0 + q, yy = pp / cx->Wo, xx = pp % cx->Wo;
                const int64_t ch = d * cx->kk + tap;
                DK_S *go_ = (DK_S *)dk_tensor_data(cx->grad_offset);
                const dk_tensor *t = cx->grad_offset;
                go_[n * dk_tensor_stride(t, 0) + 2 * ch * dk_tensor_stride(t, 1) + yy * dk_tensor_stride(t, 2) +
                    xx * dk_tensor_stride(t, 3)] = DK_STORE(ay[q]);
                go_[n * dk_tensor_stride(t, 0) + (2 * ch + 1) * dk_tensor_stride(t, 1) + yy * dk_tensor_stride(t, 2) +
                    xx * dk_tensor_stride(t, 3)] = DK_STORE(ax[q]);
                if (cx->grad_mask) {
                    const dk_tensor *u = cx->grad_mask;
                    ((DK_S *)dk_tensor_data(
                        u))[n * dk_tensor_stride(u, 0) + ch * dk_tensor_stride(u, 1) + yy * dk_tensor_stride(u, 2) +
                            xx * dk_tensor_stride(u, 3)] = DK_STORE(am[q]);
                }
            }
        }
    /* grad_weight^T += columns g^T, with g transposed first: both operands then stream by rows
     * (a product with a transposed right operand reads it down its columns) */
    for (int64_t o = 0; o < cx->Cout; o++)
        for (int64_t q = 0; q < pb; q++) sl->gt[q * cx->Cout + o] = sl->g[o * pb + q];
    for (int64_t g = 0; g < cx->groups; g++)
        DK_TFN(dk__dc_gemm)(false, false, cx->Kg, cx->Coutg, pb, (DK_T)1, sl->cols + g * cx->Kg * pb, pb,
                            sl->gt + g * cx->Coutg, cx->Cout, (DK_T)1, sl->gw + g * cx->Kg * cx->Coutg, cx->Coutg);
}

static void DK_SFN(dk__dc_backward_worker)(void *p, int tid)
{
    dk__dc_ctx *cx = (dk__dc_ctx *)p;
    const dk_tensor *gi = cx->grad_input;
    DK_S *gx = (DK_S *)dk_tensor_data(gi);
    const int64_t gs[4] = {dk_tensor_stride(gi, 0), dk_tensor_stride(gi, 1), dk_tensor_stride(gi, 2),
                           dk_tensor_stride(gi, 3)};
    for (int64_t s; (s = dk_parallel_claim(&cx->counter)) < cx->slots;) {
        const DK_SFN(dk__dc_slot) sl = DK_SFN(dk__dc_slot_of)(cx, tid, s);
        for (int64_t i = 0; i < cx->Cout * cx->Kg; i++) sl.gw[i] = (DK_T)0;
        for (int64_t i = 0; i < cx->Cout; i++) sl.gb[i] = (DK_T)0;
        for (int64_t n = cx->N * s / cx->slots; n < cx->N * (s + 1) / cx->slots; n++) {
            const int64_t plane = cx->H * cx->W;
            for (int64_t i = 0; i < cx->Cin * plane; i++) sl.gin[i] = (DK_T)0;
            for (int64_t b = 0; b < cx->blocks; b++) {
                const int64_t p0 = b * cx->block, pb = p0 + cx->block < cx->P ? cx->block : cx->P - p0;
                DK_SFN(dk__dc_backward_block)(cx, &sl, n, p0, pb);
            }
            for (int64_t c = 0; c < cx->Cin; c++)
                for (int64_t h = 0; h < cx->H; h++)
                    for (int64_t w = 0; w < cx->W; w++)
                        gx[n * gs[0] + c * gs[1] + h * gs[2] + w * gs[3]] = DK_STORE(sl.gin[c * plane + h * cx->W + w]);
        }
    }
}

/* grad_weight and grad_bias: the slots' sums, in slot order. */
static void DK_SFN(dk__dc_backward_reduce)(dk__dc_ctx *cx)
{
    const dk_tensor *gw = cx->grad_weight;
    DK_S *w = (DK_S *)dk_tensor_data(gw);
    for (int64_t o = 0; o < cx->Cout; o++)
        for (int64_t k = 0; k < cx->Kg; k++) {
            DK_T sum = 0;
            const int64_t at = (o / cx->Coutg * cx->Kg + k) * cx->Coutg + o % cx->Coutg; /* [g, k, o'] */
            for (int64_t s = 0; s < cx->slots; s++) sum += DK_SFN(dk__dc_slot_of)(cx, 0, s).gw[at];
            const int64_t c = k / cx->kk, tap = k % cx->kk;
            w[o * dk_tensor_stride(gw, 0) + c * dk_tensor_stride(gw, 1) + tap / cx->kw * dk_tensor_stride(gw, 2) +
              tap % cx->kw * dk_tensor_stride(gw, 3)] = DK_STORE(sum);
        }
    if (!cx->grad_bias) return;
    DK_S *b = (DK_S *)dk_tensor_data(cx->grad_bias);
    for (int64_t o = 0; o < cx->Cout; o++) {
        DK_T sum = 0;
        for (int64_t s = 0; s < cx->slots; s++) sum += DK_SFN(dk__dc_slot_of)(cx, 0, s).gb[o];
        b[o * dk_tensor_stride(cx->grad_bias, 0)] = DK_STORE(sum);
    }
}

/* The weights as [Cout, Kg] in the compute type. */
static void DK_SFN(dk__dc_load_weights)(dk__dc_ctx *cx)
{
    DK_T *wt = (DK_T *)cx->wt;
    for (int64_t o = 0; o < cx->Cout; o++)
        for (int64_t k = 0; k < cx->Kg; k++) {
            const int64_t c = k / cx->kk, tap = k % cx->kk;
            wt[o * cx->Kg + k] = DK_SFN(dk__dc_get4)(cx->weight, o, c, tap / cx->kw, tap % cx->kw);
        }
}

/* ar: the call's arena; what == 0 forward, 1 backward. */
static dk_status DK_SFN(dk__dc_run)(dk__dc_ctx *cx, dk_arena *ar, int nthreads, int what)
{
    cx->wt = dk_arena_take_n(ar, dk_sat_mul((size_t)cx->Cout, (size_t)cx->Kg), sizeof(DK_T));
    if (!cx->wt) return dk_error(DK_ENOMEM, "deform_conv2d: out of memory for the weights");
    DK_SFN(dk__dc_load_weights)(cx);
    const int64_t parts = nthreads;
    cx->scratch_bytes = (what == 0 ? DK_SFN(dk__dc_forward_bytes)(cx) : DK_SFN(dk__dc_backward_bytes)(cx));
    cx->scratch_bytes = (cx->scratch_bytes + 63) & ~(size_t)63;
    cx->scratch = dk_arena_take_n(ar, (size_t)parts, cx->scratch_bytes);
    if (!cx->scratch)
        return dk_error(DK_ENOMEM, "deform_conv2d: out of memory for %lld column buffers of %lld x %lld",
                        (long long)parts, (long long)cx->K, (long long)cx->block);
    if (what == 0) {
        dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__dc_forward_worker), cx);
    } else {
        cx->slot_bytes = (DK_SFN(dk__dc_slot_bytes)(cx) + 63) & ~(size_t)63;
        cx->sums = dk_arena_take_n(ar, (size_t)cx->slots, cx->slot_bytes);
        if (!cx->sums)
            return dk_error(DK_ENOMEM, "deform_conv2d: out of memory for %lld weight gradients of %lld x %lld",
                            (long long)cx->slots, (long long)cx->Cout, (long long)cx->Kg);
        dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__dc_backward_worker), cx);
        DK_SFN(dk__dc_backward_reduce)(cx);
    }
    return DK_OK;
}

#endif
