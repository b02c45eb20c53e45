/*
 * nms/soft_nms_cpu.c — MMCV's soft_nms on the CPU (ops/nms.h): entry point and registration; the
 * procedure is in soft_nms_tmpl.h.
 */
#include "nms_cpu.h"

#include "dk_registry.h"
#include "kernels/dk_template.h"

#define DK_TEMPLATE "nms/soft_nms_tmpl.h"
#define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
#include "kernels/dk_instantiate.h"

dk_status dk_soft_nms_cpu(const dk_tensor *boxes, const dk_tensor *scores, dk_tensor *dets, dk_tensor *inds,
                          dk_tensor *num, double iou_threshold, double sigma, double min_score, int64_t method,
                          int64_t offset)
{
    const int64_t n = boxes->shape[0];
    int64_t *numv = (int64_t *)dk_tensor_data(num);
    if (n == 0) {
        *numv = 0;
        return DK_OK;
    }
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk__soft_nms_args a = {.n = n,
                           .thr = iou_threshold,
                           .sigma = sigma,
                           .min_score = min_score,
                           .method = (int)method,
                           .offset = (int)offset,
                           .ar = &ar};
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(boxes), st, dk__soft_nms, (&a, boxes, scores, dets, inds),
                    st = dk_error(DK_ETYPE, "soft_nms: unsupported dtype"))
    if (!st) *numv = a.kept;
    dk_arena_free(&ar);
    return st;
}

DK_REGISTER_DEVICE_IMPL(soft_nms, CPU, dk_soft_nms_cpu)
