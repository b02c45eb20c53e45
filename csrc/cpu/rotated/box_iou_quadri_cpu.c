/*
 * rotated/box_iou_quadri_cpu.c — box_iou_quadri on the CPU (ops/rotated.h): the entry point the
 * dispatcher calls, and its registration. The kernel is box_iou_rotated's, for quadrilaterals
 * (dk__bir_ctx.quad): every element is dk_quad_overlap's (Note [Quadrilaterals] in
 * kernels/rotated_math.h).
 */
#include "box_iou_rotated_cpu.h"

#include "dk_registry.h"

dk_status dk_box_iou_quadri_cpu(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *ious, int64_t mode,
                                bool aligned)
{
    dk__bir_ctx cx = {.n = boxes1->shape[0],
                      .m = boxes2->shape[0],
                      .mode = (int)mode,
                      .aligned = aligned,
                      .quad = true,
                      .out = (char *)dk_tensor_data(ious)};
    return dk__bir_cpu_run(&cx, boxes1, boxes2, ious);
}

DK_REGISTER_DEVICE_IMPL(box_iou_quadri, CPU, dk_box_iou_quadri_cpu)
