/*
 * rotated/nms_quadri_cpu.c — nms_quadri on the CPU (ops/rotated.h): the entry point the
 * dispatcher calls, and its registration. The kernel is nms_rotated's, for quadrilaterals
 * (dk__nmsr_ctx.quad): MMCV's nms_quadri decisions with dk_quad_overlap (Note [Quadrilaterals]
 * in kernels/rotated_math.h), Note [Rotated suppression]'s loop.
 */
#include "nms_rotated_cpu.h"

#include "dk_registry.h"

dk_status dk_nms_quadri_cpu(const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels, dk_tensor *keep,
                            dk_tensor *num, double iou_threshold)
{
    dk__nmsr_ctx cx = {.op = "nms_quadri", .thr = dk_rbox_nms_threshold(iou_threshold), .quad = true};
    return dk__nmsr_cpu_run(&cx, dets, scores, labels, keep, num);
}

DK_REGISTER_DEVICE_IMPL(nms_quadri, CPU, dk_nms_quadri_cpu)
