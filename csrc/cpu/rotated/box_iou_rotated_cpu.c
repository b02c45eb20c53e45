/*
 * rotated/box_iou_rotated_cpu.c — box_iou_rotated on the CPU (ops/rotated.h):
 * the entry point the dispatcher calls, its registration, and the kernel's driver, which
 * box_iou_quadri's entry (box_iou_quadri_cpu.c) shares. Rows of the output run in
 * parallel (dk_parallel); every element is MMCV's single_box_iou_rotated
 * (kernels/rotated_math.h).
 */
#include "box_iou_rotated_cpu.h"

#include "dk_registry.h"
#include "kernels/dk_template.h"

#define DK_TEMPLATE "rotated/box_iou_rotated_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

dk_status dk__bir_cpu_run(dk__bir_ctx *cx, const dk_tensor *boxes1, const dk_tensor *boxes2, const dk_tensor *ious)
{
    /* pairs to compute: n (aligned) or n * m, both below 2^62 (n, m < 2^31, ops/rotated.c) */
    const int64_t pairs = cx->aligned ? cx->n : cx->n * cx->m;
    if (pairs == 0) return DK_OK;
    cx->os0 = dk_tensor_stride(ious, 0);
    cx->os1 = cx->aligned ? 0 : dk_tensor_stride(ious, 1);
    const int64_t per_row = cx->aligned ? 1 : cx->m;
    cx->rows_per_claim = per_row >= DK__BIR_BLOCK_PAIRS ? 1 : DK__BIR_BLOCK_PAIRS / per_row;
    cx->nblocks = (cx->n + cx->rows_per_claim - 1) / cx->rows_per_claim;
    const int64_t work = pairs > INT64_MAX / DK__BIR_PAIR_WORK ? INT64_MAX : pairs * DK__BIR_PAIR_WORK;
    cx->nthreads = dk_parallel_threads_for(work);
    if (cx->nthreads > cx->nblocks) cx->nthreads = (int)cx->nblocks;
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(boxes1), st, dk__bir, (cx, boxes1, boxes2, &ar),
                    st = dk_error(DK_ETYPE, "box_iou_rotated: unsupported dtype"))
    dk_arena_free(&ar);
    return st;
}

dk_status dk_box_iou_rotated_cpu(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *ious, int64_t mode,
                                 bool aligned, bool clockwise)
{
    dk__bir_ctx cx = {.n = boxes1->shape[0],
                      .m = boxes2->shape[0],
                      .mode = (int)mode,
                      .aligned = aligned,
                      .clockwise = clockwise,
                      .out = (char *)dk_tensor_data(ious)};
    return dk__bir_cpu_run(&cx, boxes1, boxes2, ious);
}

DK_REGISTER_DEVICE_IMPL(box_iou_rotated, CPU, dk_box_iou_rotated_cpu)
