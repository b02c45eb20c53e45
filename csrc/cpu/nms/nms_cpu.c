/*
 * nms/nms_cpu.c — NMS on the CPU (ops/nms.h): the entry point the dispatcher calls, and its
 * registration. The decisions are the references' (Note [What can suppress what] in
 * nms_run_tmpl.h says how few overlaps it takes to reach them).
 */
#include "nms_cpu.h"

#include "dk_registry.h"
#include "kernels/dk_template.h"

#define DK_TEMPLATE "nms/nms_run_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "kernels/dk_instantiate.h"
#define DK__NMS_RUN dk__nms_run
#define DK_TEMPLATE "nms/nms_load_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

dk_status dk_nms_cpu(const dk_tensor *boxes, const dk_tensor *scores, const dk_tensor *idxs, dk_tensor *keep,
                     dk_tensor *num, double iou_threshold, int64_t offset)
{
    const int64_t n = boxes->shape[0];
    int64_t *numv = (int64_t *)dk_tensor_data(num);
    if (n == 0) {
        *numv = 0;
        return DK_OK;
    }
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk__nms_ctx cx = {.n = n, .thr = iou_threshold, .offset = (int)offset, .ar = &ar};
    dk_status st = DK_OK;
    cx.order = (int64_t *)dk_arena_take_n(&ar, (size_t)n, sizeof *cx.order);
    if (!cx.order) st = dk_error(DK_ENOMEM, "nms: out of memory for %lld boxes", (long long)n);
    if (!st && idxs) { /* categories as int64, whatever their storage and stride */
        int64_t *cls = (int64_t *)dk_arena_take_n(&ar, (size_t)n, sizeof *cls);
        if (!cls) st = dk_error(DK_ENOMEM, "nms: out of memory for %lld boxes", (long long)n);
        const int64_t s = dk_tensor_stride(idxs, 0);
        const char *p = (const char *)dk_tensor_data(idxs);
        const bool wide = dk_tensor_dtype(idxs) == DK_INT64;
        for (int64_t i = 0; !st && i < n; i++)
            cls[i] = wide ? ((const int64_t *)p)[i * s] : ((const int32_t *)p)[i * s];
        cx.cls = cls;
    }
    cx.keep = (int64_t *)dk_tensor_data(keep);
    cx.keep_s = dk_tensor_stride(keep, 0);
    if (!st) {
        DK_SWITCH_FLOAT(dk_tensor_dtype(boxes), st, dk__nms, (&cx, boxes, scores),
                        st = dk_error(DK_ETYPE, "nms: unsupported dtype"))
    }
    if (!st) *numv = cx.kept;
    dk_arena_free(&ar);
    return st;
}

DK_REGISTER_DEVICE_IMPL(nms, CPU, dk_nms_cpu)
