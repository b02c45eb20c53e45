/*
 * soft_nms_gpu.cu — MMCV's soft_nms on CUDA and HIP (and on the host, for the tests): the entry
 * point the backend registers and its dtype switch. The kernels are soft_nms_gpu_tmpl.cuh;
 * soft_nms_gpu.h has the Note.
 */
#include "soft_nms_gpu.h"

#include "dk_gpu_status.h"
#include "dk_tunables.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "kernels/nms_math.h"

/* Note [Soft-NMS on a GPU]: threads of the one block (rounded down to a power of two); small
 * values make the tests' runs of positions long. */
DK_TUNABLE(dk__snms_gpu_threads, "soft_nms.gpu_threads", 512, 1, DK_SOFT_NMS_GPU_MAX_THREADS,
           "soft_nms on a GPU: threads of the block that runs the procedure (a power of two)")

#define DK_TEMPLATE "nms/soft_nms_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
#include "kernels/dk_instantiate.h"

extern "C" dk_status dk_soft_nms_gpu(const dk_tensor *boxes, const dk_tensor *scores, dk_tensor *dets, dk_tensor *inds,
                                     dk_tensor *num, double iou_threshold, double sigma, double min_score,
                                     int64_t method, int64_t offset)
{
    const dk__snms_gpu_args a = {boxes->shape[0], iou_threshold, sigma, min_score, (double)offset, (int)method};
    int threads = 1;
    while (threads * 2 <= dk_tunable(&dk__snms_gpu_threads)) threads *= 2;
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, boxes->device);
    if (st) return st;
    void *stream = dk_current_stream(boxes->device);
    int64_t *numv = (int64_t *)dk_tensor_data(num);
    if (dkgMemsetAsync(numv, 0, sizeof *numv, (dkgStream_t)stream) != dkgSuccess) st = dk__gpu_launched("soft_nms");
    else if (a.n > 0)
        DK_SWITCH_FLOAT(dk_tensor_dtype(boxes), st, dk__snms_gpu,
                        (&a, boxes, scores, dets, inds, numv, threads, stream),
                        st = dk__gpu_unsupported("soft_nms", boxes))
    dk_device_guard_exit(&g);
    return st;
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(soft_nms, dk_soft_nms_gpu);
