/*
 * box_iou/box_iou_tmpl.h — boxes2 into SoA scratch, and the workers over blocks of rows (Note
 * [Rows against columns] in box_iou_cpu.h). A template (Note [Templates in C] in
 * kernels/dk_template.h): the float storage pass (computed in DK_T with kernels/box_iou_math.h's
 * dk_box_iou_pair) and the integer storage pass (dk_box_iou_pair_int, float32 results).
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* The compute type's dtype: out's dtype for every float kind but MMCV's on 16-bit boxes. */
#define DK__BI_TDTYPE (DK_T_BYTES == 4 ? DK_FLOAT32 : DK_FLOAT64)

/* Row i of boxes [*, 4] (any strides) in the compute type. */
static inline void DK_SFN(dk__box_iou_row)(const dk_tensor *t, int64_t i, DK_T *a)
{
    const DK_S *p = (const DK_S *)dk_tensor_data(t) + i * dk_tensor_stride(t, 0);
    const int64_t s = dk_tensor_stride(t, 1);
    for (int d = 0; d < 4; d++) a[d] = DK_LOAD(p[d * s]);
}

/* boxes2 transposed: x1[m], y1[m], x2[m], y2[m], and aspect[m] for complete IoU. */
static void DK_SFN(dk__box_iou_soa)(const dk_tensor *t, DK_T *soa, int kind)
{
    const int64_t m = t->shape[0];
    for (int64_t j = 0; j < m; j++) {
        DK_T b[4];
        DK_SFN(dk__box_iou_row)(t, j, b);
        for (int d = 0; d < 4; d++) soa[d * m + j] = b[d];
        soa[4 * m + j] = kind == DK_BOX_CIOU ? DK_TFN(dk_box_aspect)(b) : (DK_T)0;
    }
}

/* v[0 .. cnt) into out, from element `at` on, every `step` elements, in out's dtype. */
static void DK_SFN(dk__box_iou_put)(const dk__box_iou_ctx *cx, int64_t at, int64_t step, const DK_T *v, int64_t cnt)
{
    if (cx->odt == DK__BI_TDTYPE) {
        DK_T *o = (DK_T *)(void *)cx->out + at;
        for (int64_t j = 0; j < cnt; j++) o[j * step] = v[j];
    } else { /* MMCV's kinds on 16-bit boxes: out is of the boxes' dtype */
        DK_S *o = (DK_S *)(void *)cx->out + at;
        for (int64_t j = 0; j < cnt; j++) o[j * step] = DK_STORE(v[j]);
    }
}

static void DK_SFN(dk__box_iou_worker)(void *p, int tid)
{
    dk__box_iou_ctx *cx = (dk__box_iou_ctx *)p;
    const DK_T *soa = (const DK_T *)cx->soa;
    DK_T *buf = (DK_T *)cx->buf + (size_t)tid * DK__BOX_IOU_COLS;
    const DK_T eps = (DK_T)cx->eps, off = (DK_T)cx->offset;
    const int64_t n = cx->n, m = cx->m;
    const bool direct = cx->odt == DK__BI_TDTYPE && cx->os1 == 1;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->tasks;) {
        const int64_t r0 = t * cx->rows, r1 = r0 + cx->rows < n ? r0 + cx->rows : n;
        if (cx->aligned) {
            for (int64_t i = r0; i < r1; i++) {
                DK_T a[4];
                DK_SFN(dk__box_iou_row)(cx->boxes1, i, a);
                const DK_T b[4] = {soa[i], soa[m + i], soa[2 * m + i], soa[3 * m + i]};
                const DK_T v = DK_TFN(dk_box_iou_pair)(a, b, cx->kind, eps, off, cx->narrow);
                DK_SFN(dk__box_iou_put)(cx, i * cx->os0, 0, &v, 1);
            }
            continue;
        }
        for (int64_t c0 = 0; c0 < m; c0 += DK__BOX_IOU_COLS) {
            const int64_t cnt = m - c0 < DK__BOX_IOU_COLS ? m - c0 : DK__BOX_IOU_COLS;
            for (int64_t i = r0; i < r1; i++) {
                DK_T a[4];
                DK_SFN(dk__box_iou_row)(cx->boxes1, i, a);
                DK_T *const to = (DK_T *)(void *)cx->out + i * cx->os0 + c0;
                DK_T *dst = direct && !cx->stream ? to : buf;
#if DK__BOX_IOU_AVX2
                if (cx->avx2) DK_TFN(dk__box_iou_span_avx2)(a, soa, m, c0, cnt, dst, cx->kind, eps, off, cx->narrow);
                else
#endif
                    DK_TFN(dk__box_iou_span)(a, soa, m, c0, cnt, dst, cx->kind, eps, off, cx->narrow);
                if (direct && cx->stream) {
                    int64_t j = 0;
                    for (; j + 4 <= cnt; j += 4) {
                        DK_TFN(dk_v4) v;
                        DK_TFN(dk_ld4)(&v, buf + j);
                        DK_TFN(dk_stream4)(to + j, &v);
                    }
                    for (; j < cnt; j++) to[j] = buf[j];
                } else if (!direct) DK_SFN(dk__box_iou_put)(cx, i * cx->os0 + c0 * cx->os1, cx->os1, buf, cnt);
            }
        }
    }
    if (cx->stream) dk_sfence();
}

static dk_status DK_SFN(dk__box_iou_run)(dk__box_iou_ctx *cx, int nthreads, const dk_tensor *boxes2)
{
    DK_SFN(dk__box_iou_soa)(boxes2, (DK_T *)cx->soa, cx->kind);
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__box_iou_worker), cx);
    return DK_OK;
}

#undef DK__BI_TDTYPE

#elif DK_TMPL_PASS == DK_TMPL_INT

static inline void DK_SFN(dk__box_iou_row)(const dk_tensor *t, int64_t i, int64_t *a)
{
    const DK_S *p = (const DK_S *)dk_tensor_data(t) + i * dk_tensor_stride(t, 0);
    const int64_t s = dk_tensor_stride(t, 1);
    for (int d = 0; d < 4; d++) a[d] = (int64_t)p[d * s];
}

/* Integer boxes: scalar pairs (Note [Integer boxes] in kernels/box_iou_math.h), float32 out. */
static void DK_SFN(dk__box_iou_worker)(void *p, int tid)
{
    (void)tid;
    dk__box_iou_ctx *cx = (dk__box_iou_ctx *)p;
    const int64_t *soa = (const int64_t *)cx->soa;
    float *out = (float *)(void *)cx->out;
    const float eps = (float)cx->eps;
    const int64_t n = cx->n, m = cx->m;
    const int kind = cx->kind, w32 = cx->w32, narrow = cx->narrow;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->tasks;) {
        const int64_t r0 = t * cx->rows, r1 = r0 + cx->rows < n ? r0 + cx->rows : n;
        for (int64_t i = r0; i < r1; i++) {
            int64_t a[4];
            DK_SFN(dk__box_iou_row)(cx->boxes1, i, a);
            const int64_t j0 = cx->aligned ? i : 0, j1 = cx->aligned ? i + 1 : m;
            float *o = out + i * cx->os0;
            for (int64_t j = j0; j < j1; j++) {
                const int64_t b[4] = {soa[j], soa[m + j], soa[2 * m + j], soa[3 * m + j]};
                o[cx->aligned ? 0 : j * cx->os1] = dk_box_iou_pair_int(a, b, kind, eps, w32, narrow);
            }
        }
    }
}

static dk_status DK_SFN(dk__box_iou_run)(dk__box_iou_ctx *cx, int nthreads, const dk_tensor *boxes2)
{
    int64_t *soa = (int64_t *)cx->soa;
    const int64_t m = cx->m;
    for (int64_t j = 0; j < m; j++) {
        int64_t b[4];
        DK_SFN(dk__box_iou_row)(boxes2, j, b);
        for (int d = 0; d < 4; d++) soa[d * m + j] = b[d];
    }
    cx->w32 = sizeof(DK_S) < 8; /* int8, uint8 and int16 are computed in int32 (_upcast) */
    dk_parallel_run(nthreads, &cx->counter, DK_SFN(dk__box_iou_worker), cx);
    return DK_OK;
}

#endif
