/*
 * nms/nms_cpu.h — what the parts of the CPU NMS kernel share.
 *
 *   nms_cpu.c         entry point, dtype switch, registration (start here)
 *   nms_load_tmpl.h   boxes and scores, any float storage and strides, into compute-type arrays
 *   nms_run_tmpl.h    the suppression loop over a spatial index of the kept boxes
 *   nms_match_cpu.c   MMCV's nms_match: entry point, registration (loads as nms does)
 *   nms_match_tmpl.h  its grouping (Note [nms_match's groups])
 *   soft_nms_cpu.c    MMCV's soft_nms: entry point, registration
 *   soft_nms_tmpl.h   its procedure (Note [Soft-NMS as MMCV runs it])
 */
#ifndef DK_NMS_CPU_H
#define DK_NMS_CPU_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dk_argsort.h"
#include "dk_arena.h"
#include "kernels/nms_math.h"
#include "nms.h" /* ops/nms.h */

/* How a box takes part (Note [What can suppress what] in nms_run_tmpl.h). */
enum { DK__NMS_ISOLATED = 0, DK__NMS_GRID = 1, DK__NMS_LOOSE = 2 };

/* One call. */
typedef struct {
    int64_t n;
    const int64_t *cls; /* per box category (idxs), or NULL: one category */
    double thr;
    int offset;
    dk_arena *ar;
    int64_t *order; /* boxes by decreasing score */
    int64_t *keep;  /* out: kept indices (int64 storage of `keep`, stride keep_s); nms_match: members */
    int64_t keep_s;
    int64_t *starts; /* out, nms_match only: where each group starts in members (stride starts_s) */
    int64_t starts_s;
    int64_t kept;
} dk__nms_ctx;

/* One soft_nms call. */
typedef struct {
    int64_t n;
    double thr, sigma, min_score;
    int method, offset;
    dk_arena *ar;
    int64_t kept; /* out */
} dk__soft_nms_args;

#endif /* DK_NMS_CPU_H */
