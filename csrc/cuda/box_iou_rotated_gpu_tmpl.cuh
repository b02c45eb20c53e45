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
    const int64_t total = a.aligned ? a.n : a.n * a.m;
    for (int64_t k = DK_GPU_FIRST(); k < total; k += DK_GPU_STRIDE()) {
        const int64_t i = a.aligned ? k : k / a.m, j = a.aligned ? k : k % a.m;
        DK_T p[5], q[5];
        for (int d = 0; d < 5; d++) {
            p[d] = DK_LOAD(b1[i * a.b1_s[0] + d * a.b1_s[1]]);
            q[d] = DK_LOAD(b2[j * a.b2_s[0] + d * a.b2_s[1]]);
        }
        const DK_T v = DK_TFN(dk_rbox_apart)(p, DK_TFN(dk_rbox_radius)(p), q, DK_TFN(dk_rbox_radius)(q))
                           ? (DK_T)0
                           : DK_TFN(dk_rbox_overlap)(p, q, a.mode, a.clockwise != 0);
        out[a.aligned ? i * a.out_s[0] : i * a.out_s[0] + j * a.out_s[1]] = DK_STORE(v);
    }
}

static dk_status DK_SFN(dk__bir_gpu)(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *ious,
                                     const dk__bir_gpu_args *a, void *stream)
{
    const int64_t total = a->aligned ? a->n : a->n * a->m;
    DK_GPU_LAUNCH(DK_SFN(dk__bir_gpu_kernel), dk_gpu_blocks(total), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(boxes1), (const DK_S *)dk_tensor_data(boxes2),
                  (DK_S *)dk_tensor_data(ious), *a);
    return dk__gpu_launched("box_iou_rotated");
}

#endif
