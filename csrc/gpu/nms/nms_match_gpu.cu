/*
 * nms_match_gpu.cu — MMCV's nms_match on CUDA and HIP (and on the host, for the tests): the entry
 * point the backend registers, a job of nms's driver that reports groups (Note [nms_match on a
 * GPU] in nms_match_gpu.h).
 */
#include "nms_match_gpu.h"

#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/nms_math.h"
#include "nms_gpu_mask.cuh"

#define DK_TEMPLATE "nms/nms_match_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "kernels/dk_instantiate.h"

extern "C" dk_status dk_nms_match_gpu(const dk_tensor *boxes, const dk_tensor *scores, dk_tensor *members,
                                      dk_tensor *starts, dk_tensor *num, double iou_threshold)
{
    const dk__nms_gpu_job job = {
        "nms_match",     boxes, scores,         NULL,
        boxes->shape[0], 4,     &iou_threshold, {dk__nms_match_gpu_mask_f32, dk__nms_match_gpu_mask_f64},
        starts};
    return dk__nms_gpu_run(&job, members, num);
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(nms_match, dk_nms_match_gpu);
