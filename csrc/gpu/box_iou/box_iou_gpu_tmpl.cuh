/*
 * box_iou_gpu_tmpl.cuh — box_iou's GPU kernels and their launchers (Note [Box overlaps on a GPU]
 * in box_iou_gpu.h), a template (Note [Templates in C] in kernels/dk_template.h) instantiated for
 * the float storage types (computed in DK_T with dk_box_iou_pair) and the integer ones (int64
 * arithmetic with torch's wrap-around, float32 results: dk_box_iou_pair_int).
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

__global__ void DK_SFN(dk__box_iou_gpu_kernel)(const DK_S *__restrict__ b1, const DK_S *__restrict__ b2,
                                               void *__restrict__ out, dk__box_iou_gpu_args a)
{
    const DK_T eps = (DK_T)a.eps, off = (DK_T)a.offset;
    dk_gpu_for_pairs<4, DK_T>(
        a.pairs, b1, b2, [](DK_S v) { return (DK_T)DK_LOAD(v); },
        [&](const DK_T *p, const DK_T *q, int64_t o) {
            const DK_T v = DK_TFN(dk_box_iou_pair)(p, q, a.kind, eps, off, a.narrow);
            if (a.out_storage) ((DK_S *)out)[o] = DK_STORE(v);
            else ((DK_T *)out)[o] = v;
        });
}

#elif DK_TMPL_PASS == DK_TMPL_INT

/* Integer boxes as int64, exactly (not through DK_LOAD's double); float32 out. */
__global__ void DK_SFN(dk__box_iou_gpu_kernel)(const DK_S *__restrict__ b1, const DK_S *__restrict__ b2,
                                               void *__restrict__ out, dk__box_iou_gpu_args a)
{
    dk_gpu_for_pairs<4, int64_t>(
        a.pairs, b1, b2, [](DK_S v) { return (int64_t)v; },
        [&](const int64_t *p, const int64_t *q, int64_t o) {
            ((float *)out)[o] = dk_box_iou_pair_int(p, q, a.kind, (float)a.eps, sizeof(DK_S) < 8, a.narrow);
        });
}

#endif

#if DK_TMPL_PASS == DK_TMPL_FLOAT || DK_TMPL_PASS == DK_TMPL_INT

static dk_status DK_SFN(dk__box_iou_gpu)(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *out,
                                         const dk__box_iou_gpu_args *a, void *stream)
{
    const int64_t total = dk_gpu_pairs_count(&a->pairs);
    DK_GPU_LAUNCH(DK_SFN(dk__box_iou_gpu_kernel), dk_gpu_blocks(total), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(boxes1), (const DK_S *)dk_tensor_data(boxes2), dk_tensor_data(out), *a);
    return dk__gpu_launched("box_iou");
}

#endif
