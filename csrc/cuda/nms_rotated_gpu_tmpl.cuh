/*
 * nms_rotated_gpu_tmpl.cuh — nms_rotated's part of the shared NMS driver (Note [Rotated NMS on a
 * GPU] in nms_rotated_gpu.h), a template (Note [Templates in C] in kernels/dk_template.h): the
 * storage pass gathers boxes of any float dtype and strides (and their labels' keys) in score
 * order, the compute pass is the rotated overlap the mask kernel is instantiated with.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* Step 2: sorted box i = box ord[i] as (cx, cy, w, h, angle) in the compute type; its label's
 * key into cls[i] when there are labels. */
__global__ void DK_SFN(dk__nmsr_gpu_gather_kernel)(const DK_S *__restrict__ dets, int64_t ds0, int64_t ds1,
                                                   const void *__restrict__ labels, int ldt, int64_t ls0,
                                                   const int64_t *__restrict__ ord, int64_t n,
                                                   DK_T *__restrict__ sorted, uint64_t *__restrict__ cls)
{
    for (int64_t i = DK_GPU_FIRST(); i < n; i += DK_GPU_STRIDE()) {
        const int64_t j = ord[i];
        const DK_S *r = dets + j * ds0;
        for (int d = 0; d < 5; d++) sorted[5 * i + d] = DK_LOAD(r[d * ds1]);
        if (cls) cls[i] = dk_label_key(labels, j * ls0, ldt);
    }
}

static dk_status DK_SFN(dk__nmsr_gpu_gather)(const dk__nms_gpu_job *job, const int64_t *ord, void *sorted,
                                             uint64_t *cls, void *stream)
{
    const dk_tensor *labels = ((const dk__nmsr_gpu_args *)job->args)->labels;
    DK_GPU_LAUNCH(DK_SFN(dk__nmsr_gpu_gather_kernel), dk_gpu_blocks(job->n), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(job->boxes), dk_tensor_stride(job->boxes, 0),
                  dk_tensor_stride(job->boxes, 1), labels ? dk_tensor_data(labels) : NULL,
                  labels ? (int)dk_tensor_dtype(labels) : 0, labels ? dk_tensor_stride(labels, 0) : 0, ord, job->n,
                  (DK_T *)sorted, cls);
    return dk__gpu_launched(job->op);
}

#elif DK_TMPL_PASS == DK_TMPL_COMPUTE

/* The rotated overlap (nms_gpu_mask.cuh): kept box a suppresses the later box b when
 * dk_rbox_overlap(a, b) >= thr; boxes clearly apart are skipped when thr > 0 (skip_apart). */
struct DK_TFN(dk__nmsr_gpu_overlap) {
    typedef DK_T T;
    typedef double X; /* the bounding-circle radius */
    enum { D = 5 };
    double thr;
    bool clockwise, skip_apart;
    __device__ double prep(const DK_T *b) const { return DK_TFN(dk_rbox_radius)(b); }
    __device__ bool suppresses(const DK_T *a, double ra, const DK_T *b, double rb) const
    {
        if (skip_apart && DK_TFN(dk_rbox_apart)(a, ra, b, rb)) return false;
        return (double)DK_TFN(dk_rbox_overlap)(a, b, DK_RBOX_IOU, clockwise) >= thr;
    }
};

#endif
