/*
 * nms_rotated_gpu_tmpl.cuh — nms_rotated's part of the shared NMS driver (Note [Rotated NMS on a
 * GPU] in nms_rotated_gpu.h), a template (Note [Templates in C] in kernels/dk_template.h): the
 * rotated overlap the mask kernel is instantiated with, for each compute type. Loading, sorting
 * and gathering the boxes are the driver's (nms_gpu_tmpl.cuh).
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

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

static dk_status DK_TFN(dk__nmsr_gpu_mask)(const dk__nms_gpu_job *job, const void *sorted, const uint64_t *cls,
                                           int64_t words, int64_t rb0, int64_t nb, uint64_t *mask, void *stream)
{
    const dk__nmsr_gpu_args *a = (const dk__nmsr_gpu_args *)job->args;
    const DK_TFN(dk__nmsr_gpu_overlap) o = {a->thr, a->clockwise, a->thr > 0};
    return dk__nms_gpu_launch_mask(o, job, sorted, cls, words, rb0, nb, mask, stream);
}

#endif
