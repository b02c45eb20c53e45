/*
 * nms_quadri_gpu.h — nms_quadri on CUDA and HIP (ops/rotated.h), written once (Note [One source
 * for CUDA and HIP] in csrc/gpu/dk_gpu.h). Note [Rotated NMS on a GPU] (nms_rotated_gpu.h)
 * holds as it is, with quadrilaterals (8 values a box) and dk_quad_overlap, their bounding
 * circles from dk_quad_circle: the CPU kernel's decisions, MMCV's CPU rules.
 */
#ifndef DK_NMS_QUADRI_GPU_H
#define DK_NMS_QUADRI_GPU_H

#include "nms_rotated_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif
dk_status dk_nms_quadri_gpu(const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels, dk_tensor *keep,
                            dk_tensor *num, double iou_threshold);
#ifdef __cplusplus
}
#endif

#endif /* DK_NMS_QUADRI_GPU_H */
