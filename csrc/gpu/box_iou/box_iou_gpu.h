/*
 * box_iou_gpu.h — box_iou on CUDA and HIP (ops/box_iou.h: torchvision's IoU family and MMCV's
 * bbox_overlaps), written once (Note [One source for CUDA and HIP] in csrc/gpu/dk_gpu.h): what its
 * kernels (box_iou_gpu_tmpl.cuh) and launcher (box_iou_gpu.cu) share.
 *
 * Note [Box overlaps on a GPU]
 * One thread per output element, in a grid-stride loop over 64-bit indices (dk_gpu_pairs.cuh;
 * an [N, M] output has up to 2^62 elements): it reads its two boxes with the tensors' strides,
 * widens them to the compute type (float for 16-bit boxes, double for float64; int64 for
 * integer boxes), and writes the value of the function the CPU kernel calls for the pair
 * (dk_box_iou_pair, or dk_box_iou_pair_int for integer boxes, kernels/box_iou_math.h), with the same
 * `narrow` (dk_box_iou_narrow), eps and offset, so the values are the CPU's to the bit
 * (complete IoU's atan excepted on a real GPU, whose library may differ by an ulp). The kind is
 * the same for every thread, so its branches never diverge. The CPU transposes boxes2 and
 * precomputes complete IoU's per-box atan to vectorise its rows; a GPU thread needs neither (a
 * pair's two atan are a few dozen instructions of a kernel bound by its stores), so the kernel
 * needs no scratch memory and one launch.
 */
#ifndef DK_BOX_IOU_GPU_H
#define DK_BOX_IOU_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "box_iou.h" /* ops/box_iou.h */
#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"

#ifdef __cplusplus
#include "dk_gpu_pairs.cuh"

/* One call: its pairs, and the op's parameters. */
typedef struct {
    dk_gpu_pairs pairs;
    int kind, narrow;
    int out_storage; /* out has the boxes' 16-bit dtype (MMCV's kinds), not the compute type's */
    double eps, offset;
} dk__box_iou_gpu_args;

extern "C" {
#endif
dk_status dk_box_iou_gpu(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *out, int64_t kind, bool aligned,
                         double eps, int64_t offset);
#ifdef __cplusplus
}
#endif

#endif /* DK_BOX_IOU_GPU_H */
