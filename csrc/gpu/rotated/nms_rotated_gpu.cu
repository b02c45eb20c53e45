/*
 * nms_rotated_gpu.cu — nms_rotated on CUDA and HIP (and on the host, for the tests): the entry
 * point the backend registers, as a job of nms's driver (Note [Rotated NMS on a GPU] in
 * nms_rotated_gpu.h).
 */
#include "nms_rotated_gpu.h"

#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/rotated_math.h"
#include "nms/nms_gpu_mask.cuh" /* the nms family's GPU driver: nms_rotated is one of its jobs */

/* nms_rotated's own arguments (dk__nms_gpu_job.args). */
typedef struct {
    double thr; /* rounded as MMCV rounds it (dk_rbox_nms_threshold) */
    bool clockwise;
} dk__nmsr_gpu_args;

#define DK_TEMPLATE "rotated/nms_rotated_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "kernels/dk_instantiate.h"

extern "C" dk_status dk_nms_rotated_gpu(const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels,
                                        dk_tensor *keep, dk_tensor *num, double iou_threshold, bool clockwise)
{
    const dk__nmsr_gpu_args a = {dk_rbox_nms_threshold(iou_threshold), clockwise};
    const dk__nms_gpu_job job = {
        "nms_rotated", dets, scores, labels, dets->shape[0], 5, &a, {dk__nmsr_gpu_mask_f32, dk__nmsr_gpu_mask_f64},
        NULL};
    return dk__nms_gpu_run(&job, keep, num);
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(nms_rotated, dk_nms_rotated_gpu);
