/*
 * nms_rotated_gpu.h — nms_rotated on CUDA and HIP (ops/rotated.h), written once (Note [One
 * source for CUDA and HIP] in csrc/gpu/dk_gpu.h).
 *
 * Note [Rotated NMS on a GPU]
 * The greedy procedure is nms's (Note [NMS on a GPU] in nms_gpu.h), run by the same driver and
 * the same 64-box mask kernel (nms_gpu_mask.cuh) with another overlap: sorted box i suppresses a
 * later box j of its category when dk_rbox_overlap(i, j) >= the threshold rounded to float32
 * (kernels/rotated_math.h; MMCV's CPU kernel, whose decisions the CPU kernel makes too). A
 * candidate is kept unless a kept box before it suppresses it, which is exactly what the mask
 * and its walk in score order decide, so the decisions are the CPU kernel's (Note [Rotated
 * suppression] in csrc/cpu/rotated/nms_rotated_tmpl.h). The sort is nms's (torch's order);
 * labels of any accepted dtype become kernels/sort_key.h's dk_label_key keys while the boxes
 * are gathered. Pairs whose bounding circles are clearly apart are skipped for a threshold > 0,
 * as on the CPU (Note [Bounding circles] in kernels/rotated_math_tmpl.h: the skip changes no
 * value), which spares most pairs of a real image the polygon clipping. Memory is nms's: bounded
 * by nms.gpu_chunk_bytes (Note [Bounded NMS memory]).
 */
#ifndef DK_NMS_ROTATED_GPU_H
#define DK_NMS_ROTATED_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "rotated.h" /* ops/rotated.h */

#ifdef __cplusplus
extern "C" {
#endif
dk_status dk_nms_rotated_gpu(const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels, dk_tensor *keep,
                             dk_tensor *num, double iou_threshold, bool clockwise);
#ifdef __cplusplus
}
#endif

#endif /* DK_NMS_ROTATED_GPU_H */
