/*
 * box_iou_gpu_tmpl.cuh — box_iou's GPU kernels and their launchers (Note [Box overlaps on a GPU]
 * in box_iou_gpu.h), a template (Note [Templates in C] in kernels/dk_template.h) instantiated for
 * the float storage types (computed in DK_T with dk_box_iou_pair) and the integer ones (int64
 * arithmetic with torch's wrap-around, float32 results: dk_box_iou_pair_int).
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT || DK_TMPL_PASS == DK_TMPL_INT

#if DK_TMPL_PASS == DK_TMPL_FLOAT
#define DK__BIG_V DK_T /* a box value in the kernel */
#define DK__BIG_LOAD(v) DK_LOAD(v)
#else
#define DK__BIG_V int64_t
#define DK__BIG_LOAD(v) ((int64_t)(v)) /* exact: not through DK_LOAD's double */
#endif

__global__ void DK_SFN(dk__box_iou_gpu_kernel)(const DK_S *__restrict__ b1, const DK_S *__restrict__ b2,
                                               void *__restrict__ out, dk__box_iou_gpu_args a)
{
    const int64_t total = a.aligned ? a.n : a.n * a.m;
    for (int64_t k = DK_GPU_FIRST(); k < total; k += DK_GPU_STRIDE()) {
        const int64_t i = a.aligned ? k : k / a.m, j = a.aligned ? k : k % a.m;
        DK__BIG_V p[4], q[4];
        for (int d = 0; d < 4; d++) {
            p[d] = DK__BIG_LOAD(b1[i * a.b1_s[0] + d * a.b1_s[1]]);
            q[d] = DK__BIG_LOAD(b2[j * a.b2_s[0] + d * a.b2_s[1]]);
        }
        const int64_t o = a.aligned ? i * a.out_s[0] : i * a.out_s[0] + j * a.out_s[1];
#if DK_TMPL_PASS == DK_TMPL_FLOAT
        const DK_T v = DK_TFN(dk_box_iou_pair)(p, q, a.kind, (DK_T)a.eps, (DK_T)a.offset, a.narrow);
        if (a.out_storage) ((DK_S *)out)[o] = DK_STORE(v);
        else ((DK_T *)out)[o] = v;
#else
        ((float *)out)[o] = dk_box_iou_pair_int(p, q, a.kind, (float)a.eps, sizeof(DK_S) == 4);
#endif
    }
}

static dk_status DK_SFN(dk__box_iou_gpu)(const dk_tensor *boxes1, const dk_tensor *boxes2, dk_tensor *out,
                                         const dk__box_iou_gpu_args *a, void *stream)
{
    const int64_t total = a->aligned ? a->n : a->n * a->m;
    DK_GPU_LAUNCH(DK_SFN(dk__box_iou_gpu_kernel), dk_gpu_blocks(total), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(boxes1), (const DK_S *)dk_tensor_data(boxes2), dk_tensor_data(out), *a);
    return dk__gpu_launched("box_iou");
}

#undef DK__BIG_V
#undef DK__BIG_LOAD
#endif
