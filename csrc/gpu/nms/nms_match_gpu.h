/*
 * nms_match_gpu.h — MMCV's nms_match on CUDA and HIP (ops/nms.h), written once (Note [One source
 * for CUDA and HIP] in csrc/gpu/dk_gpu.h).
 *
 * Note [nms_match on a GPU]
 * nms_match keeps the boxes nms keeps with its own overlap (offset 0, >= threshold in the compute
 * type: Note [nms_match's groups] in csrc/cpu/nms/nms_match_tmpl.h), so it is a job of nms's
 * driver (Note [NMS on a GPU] in nms_gpu.h): the same sort, the same 64-box mask (with
 * nms_match's overlap) and the same walk of the rows in score order. What it adds is which kept
 * box takes each box: MMCV's kept box i takes every later box still unsuppressed that it
 * overlaps, i.e. a box belongs to the first kept box (in score order) whose mask row has its bit.
 * The walk ORs kept rows into the removed bits in exactly that order (the block's rows one by one
 * on the diagonal word, then, for each later word, the kept rows of the block in order), so the
 * bits a kept row adds that were not yet set are the boxes it takes: their group, the kept row's
 * rank, is written then (grp[position] = rank; a kept row's own, too). After the walk, the
 * (group, sorted position) pairs sorted by nms's bitonic network give the members group after
 * group, each in score order, and where each group starts: a position whose group differs from
 * the one before it. Same decisions as the CPU kernel, and so MMCV's. Scratch: nms's, plus 16
 * bytes per padded box for the pairs.
 */
#ifndef DK_NMS_MATCH_GPU_H
#define DK_NMS_MATCH_GPU_H

#include <stdint.h>

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "nms.h" /* ops/nms.h */

#ifdef __cplusplus
extern "C" {
#endif
dk_status dk_nms_match_gpu(const dk_tensor *boxes, const dk_tensor *scores, dk_tensor *members, dk_tensor *starts,
                           dk_tensor *num, double iou_threshold);
#ifdef __cplusplus
}
#endif

#endif /* DK_NMS_MATCH_GPU_H */
