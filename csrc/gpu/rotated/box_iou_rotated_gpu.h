/*
 * box_iou_rotated_gpu.h — box_iou_rotated on CUDA and HIP (ops/rotated.h), written once
 * (Note [One source for CUDA and HIP] in csrc/gpu/dk_gpu.h): what its kernel
 * (box_iou_rotated_gpu_tmpl.cuh) and launcher (box_iou_rotated_gpu.cu) share.
 *
 * Note [Rotated overlaps on a GPU]
 * One thread per output element, in a grid-stride loop over 64-bit indices (dk_gpu_pairs.cuh):
 * it reads its two boxes with the tensors' strides, widens them to the compute type (float for
 * 16-bit boxes), and writes dk_rbox_overlap's value (kernels/rotated_math.h,
 * the function the CPU kernel calls), or the +0 that value is for boxes whose bounding circles
 * are clearly apart, skipped as the CPU kernel skips them (Note [Bounding circles]: the skip
 * changes no value). A pair is independent
 * work of up to a few hundred operations with small fixed-size arrays (the 24 candidate vertices),
 * as in MMCV's CUDA kernel; no scratch memory, no synchronisation.
 */
#ifndef DK_BOX_IOU_ROTATED_GPU_H
#define DK_BOX_IOU_ROTATED_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "rotated.h" /* ops/rotated.h */
#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"

#ifdef __cplusplus
#include "dk_gpu_pairs.cuh"

/* One call: its pairs, and the op's parameters. */
typedef struct {
    dk_gpu_pairs pairs;
    int mode, clockwise;
} dk__bir_gpu_args;

extern "C" {
#endif
dk_status dk_box_iou_rotated_gpu(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *ious, int64_t mode,
                                 bool aligned, bool clockwise);
#ifdef __cplusplus
}
#endif

#endif /* DK_BOX_IOU_ROTATED_GPU_H */
