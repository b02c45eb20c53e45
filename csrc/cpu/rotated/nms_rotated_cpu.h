/*
 * rotated/nms_rotated_cpu.h — what the parts of the CPU nms_rotated kernel share.
 *
 *   nms_rotated_cpu.c      entry point, labels, dtype switch, registration (start here)
 *   nms_quadri_cpu.c       nms_quadri's: the same kernel for quadrilaterals
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
#include "dk_parallel.h"
#include "kernels/rotated_math.h"
#include "rotated.h" /* ops/rotated.h */

/* One call. */
typedef struct {
    const char *op; /* for errors */
    int64_t n;
    const uint64_t *label; /* per box category key (labels), or NULL: one category */
    double thr;            /* the threshold as MMCV compares it: rounded to float32 */
    bool clockwise;
    bool quad; /* nms_quadri: quadrilaterals, 8 values per box (else 5) */
    dk_arena *ar;
    int64_t *order; /* boxes by decreasing score */
    int64_t *keep;  /* out: kept indices (int64 storage of `keep`, stride keep_s) */
    int64_t keep_s;
    int64_t kept;
    /* Note [Rotated suppression in blocks]: the boxes in the compute type (box, and the kept ones
     * packed in kept order, kbox), every box's bounding circle (circ, x y r) and the kept ones'
     * (kcirc) and labels (klab); the block of candidates order[a0 .. a1) that a parallel pass
     * tests against the first kept0 kept boxes, sup[a - a0] its verdicts */
    const void *box;
    void *kbox;
    double *circ, *kcirc;
    uint64_t *klab;
    int64_t block; /* candidates per block (nms_rotated.block) */
    int64_t a0, a1, kept0;
    uint8_t *sup;
    dk_parallel_counter counter;
} dk__nmsr_ctx;

/* Candidates a block holds, at most (Note [Rotated suppression in blocks]): nms_rotated.block, a
 * tunable (tests make it small, so that calls of a few hundred boxes run many blocks). */
#define DK__NMSR_BLOCK_DEFAULT 64
/* dk_parallel_threads_for's units in one pair's test: most pairs are a bounding-circle reject of
 * a few multiplications, the rest an overlap of some 0.4 us (DK__BIR_PAIR_WORK, box_iou_rotated's
 * estimate for the same mix). */
#define DK__NMSR_PAIR_WORK 64

/* The entry points' common part (nms_rotated_cpu.c): cx has op, thr, clockwise and quad set. */
dk_status dk__nmsr_cpu_run(dk__nmsr_ctx *cx, const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels,
                           dk_tensor *keep, dk_tensor *num);

#endif /* DK_NMS_ROTATED_CPU_H */
