/*
 * rotated/nms_rotated_tmpl.h — the CPU nms_rotated and nms_quadri (cx->quad) for one storage type. A template (Note
 * [Templates in C] in kernels/dk_template.h), the float storage pass: boxes into a packed
 * compute-type array, scores sorted as torch sorts them, then the suppression loop.
 *
 * Note [Rotated suppression]
 * MMCV's loop takes each kept box in score order and suppresses every later box j with
 * IoU(kept, j) >= threshold. Equivalently, a candidate j is kept unless some box kept before it
 * suppresses it, so dkit walks the candidates in score order and tests each against the kept
 * boxes only (packed in kept order, with their bounding-circle radii), stopping at the first
 * that suppresses it: the same decisions with the same arithmetic and argument order
 * (dk_rbox_overlap(kept, candidate)), and at most N x kept overlaps instead of N^2 / 2. A pair
 * whose bounding circles are clearly apart (Note [Bounding circles] in
 * kernels/rotated_math_tmpl.h) has IoU 0 in MMCV's arithmetic, which suppresses only when
 * the threshold is <= 0; so for a threshold > 0 such pairs are skipped after a few
 * multiplications, and they are most pairs of a real image. A NaN threshold suppresses nothing
 * (every comparison is false): every box is kept, in score order.
 *
 * Note [Rotated suppression in blocks]
 * The walk above is serial: each candidate's verdict needs every box kept before it. But most of
 * its tests are against boxes kept long before, which are known when a block of candidates
 * begins. So the candidates go in blocks of cx->block in score order: a parallel pass tests every
 * candidate of the block against the kept0 boxes kept before the block (dk_parallel_run, a task
 * per candidate), then a serial pass walks the block in order and tests each candidate that
 * survived against the boxes kept since, within the block, and keeps it or not. A candidate is
 * still kept exactly when no box kept before it suppresses it, tested in kept order with the same
 * arithmetic and stopping at the first that does (the kept boxes before the block are a prefix of
 * those before the candidate): the same decisions, the same overlaps computed, on any number of
 * threads. What stays serial is the tests within a block, about block / (2 kept) of the work.
 * Measured (2,000 boxes, threshold 0.5, a 2-core AMD EPYC VM, 2026-11-28, medians of 7 calls in a
 * row): nms_rotated 24.4-25.3 ms on one thread, 13.1-16.9 ms on two; nms_quadri 20.4 and
 * 10.1-10.3 ms; one thread as before within the noise. Blocks of 16 to 256 measured alike on one
 * thread; 64 keeps the serial part small and a pass's join (some microseconds) rare.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* Whether one of the kept boxes k0 .. k1 - 1 suppresses box bj (bounding circle cj, label lj):
 * tested in kept order, stopping at the first that does (Note [Rotated suppression]). */
static bool DK_SFN(dk__nmsr_suppressed)(const dk__nmsr_ctx *cx, const DK_T *bj, const double *cj, uint64_t lj,
                                        int64_t k0, int64_t k1)
{
    const double thr = cx->thr;
    if (thr != thr) return false; /* a NaN threshold suppresses nothing */
    const int w = cx->quad ? 8 : 5;
    const bool skip_apart = thr > 0;
    const DK_T *kbox = (const DK_T *)cx->kbox;
    for (int64_t k = k0; k < k1; k++) {
        if (cx->klab[k] != lj) continue;
        const double *ck = cx->kcirc + 3 * k;
        if (skip_apart && dk_rbox_apart_at(ck[0], ck[1], ck[2], cj[0], cj[1], cj[2])) continue;
        const DK_T *bk = kbox + k * w;
        const DK_T ovr = cx->quad ? DK_TFN(dk_quad_overlap)(bk, bj, DK_RBOX_IOU)
                                  : DK_TFN(dk_rbox_overlap)(bk, bj, DK_RBOX_IOU, cx->clockwise);
        if ((double)ovr >= thr) return true;
    }
    return false;
}

/* The parallel pass of Note [Rotated suppression in blocks]: candidate order[a0 + t] against the
 * boxes kept before the block. */
static void DK_SFN(dk__nmsr_block_worker)(void *p, int tid)
{
    (void)tid;
    dk__nmsr_ctx *cx = (dk__nmsr_ctx *)p;
    const int w = cx->quad ? 8 : 5;
    const DK_T *box = (const DK_T *)cx->box;
    for (int64_t t; (t = dk_parallel_claim(&cx->counter)) < cx->a1 - cx->a0;) {
        const int64_t j = cx->order[cx->a0 + t];
        cx->sup[t] = DK_SFN(dk__nmsr_suppressed)(cx, box + j * w, cx->circ + 3 * j, cx->label ? cx->label[j] : 0, 0,
                                                 cx->kept0);
    }
}

static dk_status DK_SFN(dk__nmsr)(dk__nmsr_ctx *cx, const dk_tensor *dets, const dk_tensor *scores)
{
    const int64_t n = cx->n, B = cx->block < n ? cx->block : n;
    const int w = cx->quad ? 8 : 5;
    dk_arena *ar = cx->ar;
    DK_T *box = (DK_T *)dk_arena_take_n(ar, (size_t)n, (size_t)w * sizeof(DK_T));
    DK_T *kbox = (DK_T *)dk_arena_take_n(ar, (size_t)n, (size_t)w * sizeof(DK_T));
    double *circ = (double *)dk_arena_take_n(ar, (size_t)n, 3 * sizeof(double));
    double *kcirc = (double *)dk_arena_take_n(ar, (size_t)n, 3 * sizeof(double));
    uint64_t *klab = (uint64_t *)dk_arena_take_n(ar, (size_t)n, sizeof(uint64_t));
    uint8_t *sup = (uint8_t *)dk_arena_take_n(ar, (size_t)B, 1);
    if (!box || !kbox || !circ || !kcirc || !klab || !sup)
        return dk_error(DK_ENOMEM, "%s: out of memory for %lld boxes", cx->op, (long long)n);
    int64_t bs[2], ss[1];
    dk_tensor_strides(dets, bs, 2);
    dk_tensor_strides(scores, ss, 1);
    const DK_S *b = (const DK_S *)dk_tensor_data(dets);
    for (int64_t i = 0; i < n; i++) {
        DK_T *bi = box + i * w;
        for (int d = 0; d < w; d++) bi[d] = DK_LOAD(b[i * bs[0] + d * bs[1]]);
        double *ci = circ + 3 * i; /* its bounding circle */
        if (cx->quad) {
            DK_TFN(dk_quad_circle)(bi, ci);
        } else {
            ci[0] = (double)bi[0], ci[1] = (double)bi[1];
            ci[2] = DK_TFN(dk_rbox_radius)(bi);
        }
    }
    const DK_S *s = (const DK_S *)dk_tensor_data(scores);
    dk_status st;
#if DK_S_IS_T && DK_T_BYTES == 4
    st = dk_argsort_desc_f32(cx->order, s, ss[0], n, ar);
#elif DK_S_IS_T
    st = dk_argsort_desc_f64(cx->order, s, ss[0], n, ar);
#else
    { /* 16-bit scores: widened exactly, then sorted as float */
        float *f = (float *)dk_arena_take_n(ar, (size_t)n, sizeof *f);
        if (!f) return dk_error(DK_ENOMEM, "%s: out of memory for %lld scores", cx->op, (long long)n);
        for (int64_t i = 0; i < n; i++) f[i] = DK_LOAD(s[i * ss[0]]);
        st = dk_argsort_desc_f32(cx->order, f, 1, n, ar);
    }
#endif
    if (st) return st;
    /* Note [Rotated suppression in blocks] */
    cx->box = box, cx->kbox = kbox, cx->circ = circ, cx->kcirc = kcirc, cx->klab = klab, cx->sup = sup;
    int64_t kept = 0;
    for (int64_t a0 = 0; a0 < n; a0 += B) {
        const int64_t a1 = n - a0 < B ? n : a0 + B;
        cx->a0 = a0, cx->a1 = a1, cx->kept0 = kept;
        const int64_t work = kept > 0 && a1 - a0 > INT64_MAX / DK__NMSR_PAIR_WORK / kept
                                 ? INT64_MAX
                                 : (a1 - a0) * kept * DK__NMSR_PAIR_WORK; /* saturated */
        dk_parallel_run(dk_parallel_threads_for(work), &cx->counter, DK_SFN(dk__nmsr_block_worker), cx);
        for (int64_t a = a0; a < a1; a++) {
            const int64_t j = cx->order[a];
            const DK_T *bj = box + j * w;
            const double *cj = circ + 3 * j;
            const uint64_t lj = cx->label ? cx->label[j] : 0;
            if (sup[a - a0] || DK_SFN(dk__nmsr_suppressed)(cx, bj, cj, lj, cx->kept0, kept)) continue;
            for (int d = 0; d < w; d++) kbox[kept * w + d] = bj[d];
            for (int d = 0; d < 3; d++) kcirc[3 * kept + d] = cj[d];
            klab[kept] = lj;
            cx->keep[kept * cx->keep_s] = j;
            kept++;
        }
    }
    cx->kept = kept;
    return DK_OK;
}

#endif
