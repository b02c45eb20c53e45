/*
 * box_iou_quadri_gpu.cu — box_iou_quadri on CUDA and HIP (and on the host, for the tests): the
 * entry point the backend registers and its dtype switch. The kernel is
 * box_iou_quadri_gpu_tmpl.cuh.
 */
#include "box_iou_quadri_gpu.h"

#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/rotated_math.h"

#define DK_TEMPLATE "rotated/box_iou_quadri_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

extern "C" dk_status dk_box_iou_quadri_gpu(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *ious,
                                           int64_t mode, bool aligned)
{
    dk__bir_gpu_args a;
    a.pairs = dk_gpu_pairs_of(boxes1, boxes2, ious, aligned);
    a.mode = (int)mode;
    a.clockwise = 1;
    if (dk_gpu_pairs_count(&a.pairs) == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, boxes1->device);
    if (st) return st;
    void *stream = dk_current_stream(boxes1->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(boxes1), st, dk__biq_gpu, (boxes1, boxes2, ious, &a, stream),
                    st = dk__gpu_unsupported("box_iou_quadri", boxes1))
    dk_device_guard_exit(&g);
    return st;
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(box_iou_quadri, dk_box_iou_quadri_gpu);
