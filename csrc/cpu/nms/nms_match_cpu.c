/*
 * nms/nms_match_cpu.c — MMCV's nms_match on the CPU (ops/nms.h): the entry point the dispatcher
 * calls, and its registration. The boxes are loaded as nms loads them (nms_load_tmpl.h, offset
 * 0); the grouping is nms_match_tmpl.h's (Note [nms_match's groups]).
 */
#include "nms_cpu.h"

#include "dk_registry.h"
#include "kernels/dk_template.h"

#define DK_TEMPLATE "nms/nms_match_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "kernels/dk_instantiate.h"
#define DK__NMS_RUN dk__nms_match_run
#define DK_TEMPLATE "nms/nms_load_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

dk_status dk_nms_match_cpu(const dk_tensor *boxes, const dk_tensor *scores, dk_tensor *members, dk_tensor *starts,
                           dk_tensor *num, double iou_threshold)
{
    const int64_t n = boxes->shape[0];
    int64_t *numv = (int64_t *)dk_tensor_data(num);
    if (n == 0) {
        *numv = 0;
        return DK_OK;
    }
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk__nms_ctx cx = {.n = n, .thr = iou_threshold, .offset = 0, .ar = &ar};
    dk_status st = DK_OK;
    cx.order = (int64_t *)dk_arena_take_n(&ar, (size_t)n, sizeof *cx.order);
    if (!cx.order) st = dk_error(DK_ENOMEM, "nms_match: out of memory for %lld boxes", (long long)n);
    cx.keep = (int64_t *)dk_tensor_data(members);
    cx.keep_s = dk_tensor_stride(members, 0);
    cx.starts = (int64_t *)dk_tensor_data(starts);
    cx.starts_s = dk_tensor_stride(starts, 0);
    if (!st) {
        DK_SWITCH_FLOAT(dk_tensor_dtype(boxes), st, dk__nms, (&cx, boxes, scores),
                        st = dk_error(DK_ETYPE, "nms_match: unsupported dtype"))
    }
    if (!st) *numv = cx.kept;
    dk_arena_free(&ar);
    return st;
}

DK_REGISTER_DEVICE_IMPL(nms_match, CPU, dk_nms_match_cpu)
