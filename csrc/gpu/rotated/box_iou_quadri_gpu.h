/*
 * box_iou_quadri_gpu.h — box_iou_quadri on CUDA and HIP (ops/rotated.h), written once (Note [One
 * source for CUDA and HIP] in csrc/gpu/dk_gpu.h). Note [Rotated overlaps on a GPU]
 * (box_iou_rotated_gpu.h) holds for quadrilaterals as it is: one thread per output element,
 * writing dk_quad_overlap's value (kernels/rotated_math.h, the function the CPU kernel calls), or
 * the +0 it is for quadrilaterals whose bounding circles are clearly apart (dk_quad_circle).
 */
#ifndef DK_BOX_IOU_QUADRI_GPU_H
#define DK_BOX_IOU_QUADRI_GPU_H

#include "box_iou_rotated_gpu.h" /* dk__bir_gpu_args */

#ifdef __cplusplus
extern "C" {
#endif
dk_status dk_box_iou_quadri_gpu(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *ious, int64_t mode,
                                bool aligned);
#ifdef __cplusplus
}
#endif

#endif /* DK_BOX_IOU_QUADRI_GPU_H */
