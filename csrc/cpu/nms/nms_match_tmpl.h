/*
 * nms/nms_match_tmpl.h — MMCV's nms_match on the CPU: the grouping, in the compute type. A
 * template (Note [Templates in C] in kernels/dk_template.h), the compute pass: boxes arrive as
 * x[4][n] (x1, y1, x2, y2), area[n] (offset 0) and cx->order, by decreasing score.
 *
 * Note [nms_match's groups]
 * MMCV's loop (nms_match_cpu): for each box i in score order that is not yet suppressed, keep it
 * and test every later box j not yet suppressed; j joins i's group, and is suppressed, when
 * overlap(i, j) >= threshold (kernels/nms_math.h's dk_box_nms_overlap with offset 0, i first:
 * MMCV's arithmetic, in float for float boxes, with its threshold rounded to float). The same
 * decisions here, with the candidates still unsuppressed kept in a list, in score order, that
 * each kept box compacts: a kept box is the list's head, the boxes it suppresses are appended to
 * members right after it (in score order, as MMCV appends them to its group), the others stay.
 * So members is written group after group, each group once, with no second pass, and each kept
 * box tests only the boxes no earlier one took (MMCV tests them all and skips the suppressed).
 * Like MMCV's, the work is one overlap per (kept box, later surviving box) pair: quadratic when
 * nearly every box is kept. Any threshold: at 0 every finite pair suppresses (an overlap of 0
 * is >= 0), a NaN threshold suppresses nothing, a NaN overlap never suppresses.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

static dk_status DK_TFN(dk__nms_match_run)(dk__nms_ctx *cx, const DK_T *x, const DK_T *area)
{
    const int64_t n = cx->n;
    const DK_T thr = (DK_T)cx->thr, zero = (DK_T)0;
    /* the boxes in score order, one row each, so that a pass reads them in sequence; live[] the
     * positions (in that order) of the boxes no kept box has taken yet */
    DK_T *s = (DK_T *)dk_arena_take_n(cx->ar, (size_t)n, 5 * sizeof(DK_T));
    int64_t *live = (int64_t *)dk_arena_take_n(cx->ar, (size_t)n, sizeof *live);
    if (!s || !live) return dk_error(DK_ENOMEM, "nms_match: out of memory for %lld boxes", (long long)n);
    for (int64_t a = 0; a < n; a++) {
        const int64_t i = cx->order[a];
        DK_T *r = s + 5 * a;
        r[0] = x[i], r[1] = x[n + i], r[2] = x[2 * n + i], r[3] = x[3 * n + i], r[4] = area[i];
        live[a] = a;
    }
    int64_t m = n, out = 0, groups = 0;
    while (m > 0) {
        const DK_T *k = s + 5 * live[0]; /* the kept box: the first survivor */
        cx->starts[groups++ * cx->starts_s] = out;
        cx->keep[out++ * cx->keep_s] = cx->order[live[0]];
        int64_t left = 0;
        for (int64_t b = 1; b < m; b++) {
            const int64_t p = live[b];
            const DK_T *c = s + 5 * p;
            const DK_T ovr = DK_TFN(dk_box_nms_overlap)(k[0], k[1], k[2], k[3], k[4], c[0], c[1], c[2], c[3], c[4],
                                                        zero);
            if (ovr >= thr) cx->keep[out++ * cx->keep_s] = cx->order[p];
            else live[left++] = p;
        }
        m = left;
    }
    cx->kept = groups;
    return DK_OK;
}

#endif
