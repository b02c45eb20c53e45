/*
 * box_iou_gpu.cu — box_iou on CUDA and HIP (and on the host, for the tests): the entry point the
 * backend registers and its dtype switch. The kernels are box_iou_gpu_tmpl.cuh; box_iou_gpu.h
 * has the Note.
 */
#include "box_iou_gpu.h"

#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/box_iou_math.h"

#define DK_TEMPLATE "box_iou/box_iou_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES (DK_TYPES_FLOAT | DK_TYPES_INT)
#include "kernels/dk_instantiate.h"

extern "C" dk_status dk_box_iou_gpu(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *out, int64_t kind,
                                    bool aligned, double eps, int64_t offset)
{
    const dk_dtype dt = dk_tensor_dtype(boxes1);
    dk__box_iou_gpu_args a;
    a.pairs = dk_gpu_pairs_of(boxes1, boxes2, out, aligned);
    a.kind = (int)kind;
    a.narrow = dk_box_iou_narrow(kind, dt);
    a.out_storage = dk_tensor_dtype(out) == dt && (dt == DK_FLOAT16 || dt == DK_BFLOAT16);
    a.eps = eps;
    a.offset = (double)offset;
    if (dk_gpu_pairs_count(&a.pairs) == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, boxes1->device);
    if (st) return st;
    void *stream = dk_current_stream(boxes1->device);
    if (dt == DK_INT8 || dt == DK_UINT8 || dt == DK_INT16 || dt == DK_INT32 || dt == DK_INT64) {
        DK_SWITCH_INT(dt, st, dk__box_iou_gpu, (boxes1, boxes2, out, &a, stream), (void)0)
    } else {
        DK_SWITCH_FLOAT(dt, st, dk__box_iou_gpu, (boxes1, boxes2, out, &a, stream),
                        st = dk__gpu_unsupported("box_iou", boxes1))
    }
    dk_device_guard_exit(&g);
    return st;
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(box_iou, dk_box_iou_gpu);
