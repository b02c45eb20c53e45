/*
 * box_iou_rotated_gpu_tmpl.cuh — box_iou_rotated's GPU kernel and its launcher (Note [Rotated
 * overlaps on a GPU] in box_iou_rotated_gpu.h), a template (Note [Templates in C] in
 * kernels/dk_template.h) instantiated for every float storage type: DK_S the storage type, DK_T
 * the compute type.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

__global__ void DK_SFN(dk__bir_gpu_kernel)(const DK_S *__restrict__ b1, const DK_S *__restrict__ b2,
                                           DK_S *__restrict__ out, dk__bir_gpu_args a)
{
    dk_gpu_for_pairs<5, DK_T>(
        a.pairs, b1, b2, [](DK_S v) { return (DK_T)DK_LOAD(v); },
        [&](const DK_T *p, const DK_T *q, int64_t o) {
            const bool apart = DK_TFN(dk_rbox_apart)(p, DK_TFN(dk_rbox_radius)(p), q, DK_TFN(dk_rbox_radius)(q));
            const DK_T v = apart ? (DK_T)0 : DK_TFN(dk_rbox_overlap)(p, q, a.mode, a.clockwise != 0);
            out[o] = DK_STORE(v);
        });
}

static dk_status DK_SFN(dk__bir_gpu)(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *ious,
                                     const dk__bir_gpu_args *a, void *stream)
{
    const int64_t total = dk_gpu_pairs_count(&a->pairs);
    DK_GPU_LAUNCH(DK_SFN(dk__bir_gpu_kernel), dk_gpu_blocks(total), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(boxes1), (const DK_S *)dk_tensor_data(boxes2),
                  (DK_S *)dk_tensor_data(ious), *a);
    return dk__gpu_launched("box_iou_rotated");
}

#endif
