/*
 * nms_gpu_tmpl.cuh — NMS's GPU kernels (Note [NMS on a GPU] in nms_gpu.h), a template (Note
 * [Templates in C] in kernels/dk_template.h): the storage pass reads scores and boxes of any
 * float dtype and strides (step 1's keys, step 2's gathering of the boxes, for every job of the
 * driver), the compute pass (DK_T: float, or double for float64 boxes) is nms's own: the
 * axis-aligned overlap the mask kernel (nms_gpu_mask.cuh) is instantiated with. The bitonic steps and the gathering
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

/* Step 2: sorted box i = box ord[i], its `width` values in the compute type; its category's
 * key (dk_label_key) into cls[i] when there are categories. */
__global__ void DK_SFN(dk__nms_gpu_gather_kernel)(const DK_S *__restrict__ boxes, int64_t bs0, int64_t bs1, int width,
                                                  const void *__restrict__ cats, int cdt, int64_t cs0,
                                                  const int64_t *__restrict__ ord, int64_t n, DK_T *__restrict__ sorted,
                                                  uint64_t *__restrict__ cls)
{
    for (int64_t i = DK_GPU_FIRST(); i < n; i += DK_GPU_STRIDE()) {
        const int64_t j = ord[i];
        const DK_S *r = boxes + j * bs0;
        for (int d = 0; d < width; d++) sorted[width * i + d] = DK_LOAD(r[d * bs1]);
        if (cls) cls[i] = dk_label_key(cats, j * cs0, cdt);
    }
}

static dk_status DK_SFN(dk__nms_gpu_gather)(const dk__nms_gpu_job *job, const int64_t *ord, void *sorted, uint64_t *cls,
                                            void *stream)
{
    const dk_tensor *c = job->cats;
    DK_GPU_LAUNCH(DK_SFN(dk__nms_gpu_gather_kernel), dk_gpu_blocks(job->n), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(job->boxes), dk_tensor_stride(job->boxes, 0),
                  dk_tensor_stride(job->boxes, 1), job->width, c ? dk_tensor_data(c) : NULL,
                  c ? (int)dk_tensor_dtype(c) : 0, c ? dk_tensor_stride(c, 0) : 0, ord, job->n, (DK_T *)sorted, cls);
    return dk__gpu_launched(job->op);
}

#elif DK_TMPL_PASS == DK_TMPL_COMPUTE

/* nms's overlap (nms_gpu_mask.cuh): box i suppresses a later box j when their NMS overlap
 * (kernels/nms_math.h, i the kept box) is above the threshold, compared in double. */
struct DK_TFN(dk__nms_gpu_overlap) {
    typedef DK_T T;
    typedef DK_T X; /* the area */
    enum { D = 4 };
    DK_T off;
    double thr;
    __device__ DK_T prep(const DK_T *b) const { return DK_TFN(dk_box_nms_area)(b[0], b[1], b[2], b[3], off); }
    __device__ bool suppresses(const DK_T *a, DK_T area_a, const DK_T *b, DK_T area_b) const
    {
        const DK_T ovr = DK_TFN(dk_box_nms_overlap)(a[0], a[1], a[2], a[3], area_a, b[0], b[1], b[2], b[3], area_b,
                                                    off);
        return (double)ovr > thr;
    }
};

static dk_status DK_TFN(dk__nms_gpu_mask)(const dk__nms_gpu_job *job, const void *sorted, const uint64_t *cls,
                                          int64_t words, int64_t rb0, int64_t nb, uint64_t *mask, void *stream)
{
    const dk__nms_gpu_args *a = (const dk__nms_gpu_args *)job->args;
    const DK_TFN(dk__nms_gpu_overlap) o = {(DK_T)a->offset, a->thr};
    return dk__nms_gpu_launch_mask(o, job, sorted, cls, words, rb0, nb, mask, stream);
}

#endif
