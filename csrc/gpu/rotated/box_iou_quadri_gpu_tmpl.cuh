/*
 * box_iou_quadri_gpu_tmpl.cuh — box_iou_quadri's GPU kernel and its launcher
 * (box_iou_quadri_gpu.h), a template (Note [Templates in C] in kernels/dk_template.h)
 * instantiated for every float storage type: DK_S the storage type, DK_T the compute type.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

__global__ void DK_SFN(dk__biq_gpu_kernel)(const DK_S *__restrict__ b1, const DK_S *__restrict__ b2,
                                           DK_S *__restrict__ out, dk__bir_gpu_args a)
{
    dk_gpu_for_pairs<8, DK_T>(
        a.pairs, b1, b2, [](DK_S v) { return (DK_T)DK_LOAD(v); },
        [&](const DK_T *p, const DK_T *q, int64_t o) {
            double cp[3], cq[3];
            DK_TFN(dk_quad_circle)(p, cp);
            DK_TFN(dk_quad_circle)(q, cq);
            const bool apart = dk_rbox_apart_at(cp[0], cp[1], cp[2], cq[0], cq[1], cq[2]);
            out[o] = DK_STORE(apart ? (DK_T)0 : DK_TFN(dk_quad_overlap)(p, q, a.mode));
        });
}

static dk_status DK_SFN(dk__biq_gpu)(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *ious,
                                     const dk__bir_gpu_args *a, void *stream)
{
    const int64_t total = dk_gpu_pairs_count(&a->pairs);
    DK_GPU_LAUNCH(DK_SFN(dk__biq_gpu_kernel), dk_gpu_blocks(total), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(boxes1), (const DK_S *)dk_tensor_data(boxes2),
                  (DK_S *)dk_tensor_data(ious), *a);
    return dk__gpu_launched("box_iou_quadri");
}

#endif
