/*
 * nms_gpu_tmpl.cuh — NMS's GPU kernels (Note [NMS on a GPU] in nms_gpu.h), a template (Note
 * [Templates in C] in kernels/dk_template.h): the storage pass reads scores and boxes of any
 * float dtype and strides (step 1's keys, shared with nms_rotated; step 2's gathering of the
 * boxes), the compute pass (DK_T: float, or double for float64 boxes) is the axis-aligned overlap
 * the mask kernel (nms_gpu_mask.cuh) is instantiated with. The bitonic steps and the gathering
 * of the keep are not per type: they are in nms_gpu.cu.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* Step 1's input: key and index of every box, padding up to P. */
__global__ void DK_SFN(dk__nms_gpu_keys_kernel)(const DK_S *__restrict__ scores, int64_t ss, int64_t n, int64_t P,
                                                uint64_t *__restrict__ keys, int64_t *__restrict__ ord)
{
    for (int64_t i = DK_GPU_FIRST(); i < P; i += DK_GPU_STRIDE()) {
        keys[i] = i < n ? dk_sort_key_desc((double)DK_LOAD(scores[i * ss])) : UINT64_MAX;
        ord[i] = i;
    }
}

static dk_status DK_SFN(dk__nms_gpu_keys)(const dk__nms_gpu_job *job, int64_t P, uint64_t *keys, int64_t *ord,
                                          void *stream)
{
    DK_GPU_LAUNCH(DK_SFN(dk__nms_gpu_keys_kernel), dk_gpu_blocks(P), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(job->scores), dk_tensor_stride(job->scores, 0), job->n, P, keys, ord);
    return dk__gpu_launched(job->op);
}

/* Step 2 of nms: sorted box i = box ord[i], in the compute type, as (x1, y1, x2, y2) rows;
 * categories likewise when there are any. */
__global__ void DK_SFN(dk__nms_gpu_gather_boxes_kernel)(const DK_S *__restrict__ boxes, int64_t bs0, int64_t bs1,
                                                        const void *__restrict__ idxs, int idxs64, int64_t is0,
                                                        const int64_t *__restrict__ ord, int64_t n,
                                                        DK_T *__restrict__ sorted, uint64_t *__restrict__ cls)
{
    for (int64_t i = DK_GPU_FIRST(); i < n; i += DK_GPU_STRIDE()) {
        const int64_t j = ord[i];
        const DK_S *r = boxes + j * bs0;
        for (int d = 0; d < 4; d++) sorted[4 * i + d] = DK_LOAD(r[d * bs1]);
        if (cls)
            cls[i] = (uint64_t)(idxs64 ? ((const int64_t *)idxs)[j * is0] : (int64_t)((const int32_t *)idxs)[j * is0]);
    }
}

static dk_status DK_SFN(dk__nms_gpu_gather)(const dk__nms_gpu_job *job, const int64_t *ord, void *sorted,
                                            uint64_t *cls, void *stream)
{
    const dk_tensor *idxs = ((const dk__nms_gpu_args *)job->args)->idxs;
    DK_GPU_LAUNCH(DK_SFN(dk__nms_gpu_gather_boxes_kernel), dk_gpu_blocks(job->n), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(job->boxes), dk_tensor_stride(job->boxes, 0),
                  dk_tensor_stride(job->boxes, 1), idxs ? dk_tensor_data(idxs) : NULL,
                  idxs && dk_tensor_dtype(idxs) == DK_INT64, idxs ? dk_tensor_stride(idxs, 0) : 0, ord, job->n,
                  (DK_T *)sorted, cls);
    return dk__gpu_launched(job->op);
}

#elif DK_TMPL_PASS == DK_TMPL_COMPUTE

/* nms's overlap (nms_gpu_mask.cuh): box i suppresses a later box j when their NMS overlap
 * (kernels/box_math.h, i the kept box) is above the threshold, compared in double. */
struct DK_TFN(dk__nms_gpu_overlap) {
    typedef DK_T T;
    typedef DK_T X; /* the area */
    enum { D = 4 };
    DK_T off;
    double thr;
    __device__ DK_T prep(const DK_T *b) const { return DK_TFN(dk_box_nms_area)(b[0], b[1], b[2], b[3], off); }
    __device__ bool suppresses(const DK_T *a, DK_T area_a, const DK_T *b, DK_T area_b) const
    {
        const DK_T ovr = DK_TFN(dk_box_nms_overlap)(a[0], a[1], a[2], a[3], area_a, b[0], b[1], b[2], b[3], area_b, off);
        return (double)ovr > thr;
    }
};

#endif
