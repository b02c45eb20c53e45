/*
 * nms/soft_nms_tmpl.h — MMCV's soft_nms, step for step. A template (Note [Templates in C] in
 * kernels/dk_template.h): the compute pass holds the procedure, the float storage pass loads
 * the boxes and stores the results.
 *
 * Note [Soft-NMS as MMCV runs it]
 * MMCV's CPU soft_nms works on one array of boxes in place: step i finds the highest score among
 * positions i..n-1 (the first such position on ties: `max < s[p]`), swaps that box into position
 * i and emits it, then decays the score of every later position by its overlap with it
 * (dk_box_soft_nms_weight) and, where a score falls below min_score, moves the last box into that
 * position and shortens the array by one. Which of two equal scores wins therefore depends on
 * every earlier swap, so the procedure is reproduced exactly, swaps included, in the compute type
 * (MMCV: float), with the thresholds rounded to it as MMCV's float parameters are. It costs
 * n^2 / 2 score comparisons and overlaps, as MMCV's; scores decay continuously, so the
 * neighbourhood pruning of nms (Note [What can suppress what]) would change which equal scores
 * meet first, and is not used.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* The arrays of the procedure: box p is (x1[p], y1[p], x2[p], y2[p]), area[p], score sc[p],
 * original index ind[p]. Emits positions 0 .. kept-1; returns kept. */
static int64_t DK_TFN(dk__soft_nms_run)(const dk__soft_nms_args *a, DK_T *x1, DK_T *y1, DK_T *x2, DK_T *y2, DK_T *area,
                                        DK_T *sc, int64_t *ind)
{
    const DK_T off = (DK_T)a->offset, thr = (DK_T)a->thr, sigma = (DK_T)a->sigma, min_score = (DK_T)a->min_score;
    int64_t n = a->n;
#define DK__SWAP(arr, p, q)                   \
    do {                                      \
        const __typeof__(arr[0]) t_ = arr[p]; \
        arr[p] = arr[q];                      \
        arr[q] = t_;                          \
    } while (0)
    for (int64_t i = 0; i < n; i++) {
        int64_t best = i;
        DK_T top = sc[i];
        for (int64_t p = i + 1; p < n; p++)
            if (top < sc[p]) {
                top = sc[p];
                best = p;
            }
        DK__SWAP(x1, i, best);
        DK__SWAP(y1, i, best);
        DK__SWAP(x2, i, best);
        DK__SWAP(y2, i, best);
        DK__SWAP(area, i, best);
        DK__SWAP(sc, i, best);
        DK__SWAP(ind, i, best);
        for (int64_t p = i + 1; p < n; p++) {
            const DK_T ovr = DK_TFN(dk_box_nms_overlap)(x1[i], y1[i], x2[i], y2[i], area[i], x1[p], y1[p], x2[p], y2[p],
                                                        area[p], off);
            sc[p] *= DK_TFN(dk_box_soft_nms_weight)(ovr, a->method, thr, sigma);
            if (sc[p] < min_score) { /* the last box takes its place, and is decayed next */
                n--;
                x1[p] = x1[n];
                y1[p] = y1[n];
                x2[p] = x2[n];
                y2[p] = y2[n];
                area[p] = area[n];
                sc[p] = sc[n];
                ind[p] = ind[n];
                p--;
            }
        }
    }
#undef DK__SWAP
    return n;
}

#endif

#if DK_TMPL_PASS == DK_TMPL_FLOAT

static dk_status DK_SFN(dk__soft_nms)(dk__soft_nms_args *a, const dk_tensor *boxes, const dk_tensor *scores,
                                      dk_tensor *dets, dk_tensor *inds)
{
    const int64_t n = a->n;
    DK_T *v = (DK_T *)dk_arena_take_n(a->ar, (size_t)n, 6 * sizeof(DK_T));
    int64_t *ind = (int64_t *)dk_arena_take_n(a->ar, (size_t)n, sizeof(int64_t));
    if (!v || !ind) return dk_error(DK_ENOMEM, "soft_nms: out of memory for %lld boxes", (long long)n);
    DK_T *x1 = v, *y1 = v + n, *x2 = v + 2 * n, *y2 = v + 3 * n, *area = v + 4 * n, *sc = v + 5 * n;
    int64_t bs[2], ss[1], ds[2], is[1];
    dk_tensor_strides(boxes, bs, 2);
    dk_tensor_strides(scores, ss, 1);
    dk_tensor_strides(dets, ds, 2);
    dk_tensor_strides(inds, is, 1);
    const DK_S *b = (const DK_S *)dk_tensor_data(boxes);
    const DK_S *s = (const DK_S *)dk_tensor_data(scores);
    const DK_T off = (DK_T)a->offset;
    for (int64_t i = 0; i < n; i++) {
        const DK_S *r = b + i * bs[0];
        x1[i] = DK_LOAD(r[0]);
        y1[i] = DK_LOAD(r[bs[1]]);
        x2[i] = DK_LOAD(r[2 * bs[1]]);
        y2[i] = DK_LOAD(r[3 * bs[1]]);
        area[i] = DK_TFN(dk_box_nms_area)(x1[i], y1[i], x2[i], y2[i], off);
        sc[i] = DK_LOAD(s[i * ss[0]]);
        ind[i] = i;
    }
    a->kept = DK_TFN(dk__soft_nms_run)(a, x1, y1, x2, y2, area, sc, ind);
    DK_S *d = (DK_S *)dk_tensor_data(dets);
    int64_t *o = (int64_t *)dk_tensor_data(inds);
    for (int64_t k = 0; k < a->kept; k++) {
        DK_S *r = d + k * ds[0];
        r[0] = DK_STORE(x1[k]);
        r[ds[1]] = DK_STORE(y1[k]);
        r[2 * ds[1]] = DK_STORE(x2[k]);
        r[3 * ds[1]] = DK_STORE(y2[k]);
        r[4 * ds[1]] = DK_STORE(sc[k]);
        o[k * is[0]] = ind[k];
    }
    return DK_OK;
}

#endif
