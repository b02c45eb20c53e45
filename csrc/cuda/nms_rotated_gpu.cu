/*
 * nms_rotated_gpu.cu — nms_rotated on CUDA and HIP (and on the host, for the tests): the entry
 * point the backend registers, as a job of nms's driver (Note [Rotated NMS on a GPU] in
 * nms_rotated_gpu.h).
 */
#include "nms_rotated_gpu.h"

#include "dk_gpu_status.h"
#include "gpu/dk_gpu.h"
#include "kernels/rotated_box_math.h"
#include "kernels/sort_key.h"
#include "nms_gpu_mask.cuh"

/* nms_rotated's own arguments (dk__nms_gpu_job.args). */
typedef struct {
    const dk_tensor *labels; /* or NULL */
    double thr;              /* rounded as MMCV rounds it (dk_rbox_nms_threshold) */
    bool clockwise;
} dk__nmsr_gpu_args;

#define DK_TEMPLATE "nms_rotated_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
#include "kernels/dk_instantiate.h"

static dk_status dk__nmsr_gpu_mask(const dk__nms_gpu_job *job, const void *sorted, const uint64_t *cls, int64_t words,
                                   int64_t rb0, int64_t nb, uint64_t *mask, void *stream)
{
    const dk__nmsr_gpu_args *a = (const dk__nmsr_gpu_args *)job->args;
    const bool skip = a->thr > 0;
    if (job->tbytes == sizeof(double))
        return dk__nms_gpu_launch_mask(dk__nmsr_gpu_overlap_f64{a->thr, a->clockwise, skip}, job, sorted, cls, words,
                                       rb0, nb, mask, stream);
    return dk__nms_gpu_launch_mask(dk__nmsr_gpu_overlap_f32{a->thr, a->clockwise, skip}, job, sorted, cls, words, rb0,
                                   nb, mask, stream);
}

static dk_status dk__nmsr_gpu_gather_any(const dk__nms_gpu_job *job, const int64_t *ord, void *sorted, uint64_t *cls,
                                         void *stream)
{
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(job->boxes), st, dk__nmsr_gpu_gather, (job, ord, sorted, cls, stream), (void)0)
    return st;
}

extern "C" dk_status dk_nms_rotated_gpu(const dk_tensor *dets, const dk_tensor *scores, const dk_tensor *labels,
                                        dk_tensor *keep, dk_tensor *num, double iou_threshold, bool clockwise)
{
    const dk__nmsr_gpu_args a = {labels, dk_rbox_nms_threshold(iou_threshold), clockwise};
    const dk__nms_gpu_job job = {"nms_rotated", dets, scores, dets->shape[0], 5,
                                 dk_tensor_dtype(dets) == DK_FLOAT64 ? sizeof(double) : sizeof(float),
                                 labels != NULL, &a, dk__nmsr_gpu_gather_any, dk__nmsr_gpu_mask};
    return dk__nms_gpu_run(&job, keep, num);
}
