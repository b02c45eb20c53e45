/*
 * rotated/nms_rotated_cpu.c — nms_rotated on the CPU (ops/rotated.h): the entry point
 * the dispatcher calls, its registration, and the driver nms_quadri's entry (nms_quadri_cpu.c)
 * shares. The decisions are MMCV's CPU kernel's (Note
 * [Rotated suppression] in nms_rotated_tmpl.h says how few overlaps it takes to reach them).
 */
#include "nms_rotated_cpu.h"

#include "dk_registry.h"
#include "dk_tunables.h"
#include "kernels/dk_half.h"
#include "kernels/dk_template.h"
#include "kernels/sort_key.h"

DK_TUNABLE(dk__nmsr_block, "nms_rotated.block", DK__NMSR_BLOCK_DEFAULT, 1, INT64_MAX,
           "nms_rotated's and nms_quadri's candidates per block (Note [Rotated suppression in blocks] in "
           "rotated/nms_rotated_tmpl.h): each block is tested in parallel against the boxes kept before it")

#define DK_TEMPLATE "rotated/nms_rotated_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

dk_status dk__nmsr_cpu_run(dk__nmsr_ctx *cx, const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels,
                           dk_tensor *keep, dk_tensor *num)
{
    const int64_t n = dets->shape[0];
    int64_t *numv = (int64_t *)dk_tensor_data(num);
    if (n == 0) {
        *numv = 0;
        return DK_OK;
    }
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    cx->n = n;
    cx->ar = &ar;
    cx->block = dk_tunable(&dk__nmsr_block);
    dk_status st = DK_OK;
    cx->order = (int64_t *)dk_arena_take_n(&ar, (size_t)n, sizeof *cx->order);
    if (!cx->order) st = dk_error(DK_ENOMEM, "%s: out of memory for %lld boxes", cx->op, (long long)n);
    if (!st && labels) {
        uint64_t *lab = (uint64_t *)dk_arena_take_n(&ar, (size_t)n, sizeof *lab);
        if (!lab) st = dk_error(DK_ENOMEM, "%s: out of memory for %lld labels", cx->op, (long long)n);
        for (int64_t i = 0; !st && i < n; i++)
            lab[i] = dk_label_key(dk_tensor_data(labels), i * dk_tensor_stride(labels, 0),
                                  (int)dk_tensor_dtype(labels));
        cx->label = lab;
    }
    cx->keep = (int64_t *)dk_tensor_data(keep);
    cx->keep_s = dk_tensor_stride(keep, 0);
    if (!st) {
        DK_SWITCH_FLOAT(dk_tensor_dtype(dets), st, dk__nmsr, (cx, dets, scores),
                        st = dk_error(DK_ETYPE, "%s: unsupported dtype", cx->op))
    }
    if (!st) *numv = cx->kept;
    dk_arena_free(&ar);
    return st;
}

dk_status dk_nms_rotated_cpu(const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels, dk_tensor *keep,
                             dk_tensor *num, double iou_threshold, bool clockwise)
{
    dk__nmsr_ctx cx = {.op = "nms_rotated", .thr = dk_rbox_nms_threshold(iou_threshold), .clockwise = clockwise};
    return dk__nmsr_cpu_run(&cx, dets, scores, labels, keep, num);
}

DK_REGISTER_DEVICE_IMPL(nms_rotated, CPU, dk_nms_rotated_cpu)
