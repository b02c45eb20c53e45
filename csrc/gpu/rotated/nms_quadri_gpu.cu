/*
 * nms_quadri_gpu.cu — nms_quadri on CUDA and HIP (and on the host, for the tests): the entry
 * point the backend registers, as a job of nms's driver (nms_quadri_gpu.h).
 */
#include "nms_quadri_gpu.h"

#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/rotated_math.h"
#include "nms/nms_gpu_mask.cuh" /* the nms family's GPU driver: nms_quadri is one of its jobs */

#define DK_TEMPLATE "rotated/nms_quadri_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "kernels/dk_instantiate.h"

extern "C" dk_status dk_nms_quadri_gpu(const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels,
                                       dk_tensor *keep, dk_tensor *num, double iou_threshold)
{
    const double thr = dk_rbox_nms_threshold(iou_threshold); /* rounded as MMCV rounds it */
    const dk__nms_gpu_job job = {
        "nms_quadri", dets, scores, labels, dets->shape[0], 8, &thr, {dk__nmsq_gpu_mask_f32, dk__nmsq_gpu_mask_f64},
        NULL};
    return dk__nms_gpu_run(&job, keep, num);
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(nms_quadri, dk_nms_quadri_gpu);
