/*
 * rotated/box_iou_rotated_cpu.h — what the parts of the CPU box_iou_rotated kernel share.
 *
 *   box_iou_rotated_cpu.c      entry point, dtype switch, registration (start here)
 *   box_iou_quadri_cpu.c       box_iou_quadri's: the same kernel for quadrilaterals
 *   box_iou_rotated_tmpl.h     loading the boxes, and the parallel loop over rows
 *
 * The per-pair math is kernels/rotated_math.h's (MMCV's single_box_iou_rotated and
 * single_box_iou_quadri).
 */
#ifndef DK_BOX_IOU_ROTATED_CPU_H
#define DK_BOX_IOU_ROTATED_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "rotated.h" /* ops/rotated.h */
#include "dk_arena.h"
#include "dk_parallel.h"
#include "kernels/rotated_math.h"

/*
 * One call. Work is claimed in blocks of `rows_per_claim` rows of the output (Note [Serial
 * calls] in dk_parallel.h): a row of an [N, M] output is M pairs, of an aligned one a single pair,
 * so blocks hold at least a few hundred pairs and the shared counter stays cold.
 */
typedef struct {
    int64_t n, m;
    int mode;
    bool aligned, clockwise;
    bool quad;             /* box_iou_quadri: quadrilaterals, 8 values per box (else 5) */
    const void *b1, *b2;   /* boxes in the compute type, 5 (8) per box, packed */
    const double *c1, *c2; /* their bounding circles, (x, y, r) (Note [Bounding circles]) */
    char *out;             /* ious' storage */
    int64_t os0, os1;      /* ious' strides (elements) */
    int64_t rows_per_claim, nblocks;
    int nthreads;
    dk_parallel_counter counter;
} dk__bir_ctx;

/* The entry points' common part (box_iou_rotated_cpu.c): cx has every field the op sets. */
dk_status dk__bir_cpu_run(dk__bir_ctx *cx, const dk_tensor *boxes1, const dk_tensor *boxes2, const dk_tensor *ious);

/* Pairs per claimed block, at least. */
#define DK__BIR_BLOCK_PAIRS 256
/* The parallel threshold's unit (dk_parallel_threads_for) is about a multiply-add; a pair costs
 * ten (boxes apart) to a thousand (boxes that meet: about 0.4 us). */
#define DK__BIR_PAIR_WORK 64

#endif /* DK_BOX_IOU_ROTATED_CPU_H */
