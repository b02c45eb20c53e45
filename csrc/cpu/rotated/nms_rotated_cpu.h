/*
 * rotated/nms_rotated_cpu.h — what the parts of the CPU nms_rotated kernel share.
 *
 *   nms_rotated_cpu.c      entry point, labels, dtype switch, registration (start here)
 *   nms_rotated_tmpl.h     loading and sorting, and the suppression loop
 *
 * The per-pair math is kernels/rotated_math.h's (MMCV's single_box_iou_rotated).
 */
#ifndef DK_NMS_ROTATED_CPU_H
#define DK_NMS_ROTATED_CPU_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dk_argsort.h"
#include "dk_arena.h"
#include "kernels/rotated_math.h"
#include "rotated.h" /* ops/rotated.h */

/* One call. */
typedef struct {
    int64_t n;
    const uint64_t *label; /* per box category key (labels), or NULL: one category */
    double thr;            /* the threshold as MMCV compares it: rounded to float32 */
    bool clockwise;
    dk_arena *ar;
    int64_t *order; /* boxes by decreasing score */
    int64_t *keep;  /* out: kept indices (int64 storage of `keep`, stride keep_s) */
    int64_t keep_s;
    int64_t kept;
} dk__nmsr_ctx;

#endif /* DK_NMS_ROTATED_CPU_H */
