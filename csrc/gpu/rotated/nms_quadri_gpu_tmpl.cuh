/*
 * nms_quadri_gpu_tmpl.cuh — nms_quadri's part of the shared NMS driver (nms_quadri_gpu.h), a
 * template (Note [Templates in C] in kernels/dk_template.h): the quadrilateral overlap the mask
 * kernel is instantiated with, for each compute type.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* Kept quadrilateral a suppresses the later b when dk_quad_overlap(a, b) >= thr; quadrilaterals
 * clearly apart are skipped when thr > 0 (skip_apart), as on the CPU. */
struct DK_TFN(dk__nmsq_gpu_overlap) {
    typedef DK_T T;
    struct X {
        double c[3]; /* the bounding circle (dk_quad_circle) */
    };
    enum { D = 8 };
    double thr;
    bool skip_apart;
    __device__ X prep(const DK_T *b) const
    {
        X x;
        DK_TFN(dk_quad_circle)(b, x.c);
        return x;
    }
    __device__ bool suppresses(const DK_T *a, const X &xa, const DK_T *b, const X &xb) const
    {
        if (skip_apart && dk_rbox_apart_at(xa.c[0], xa.c[1], xa.c[2], xb.c[0], xb.c[1], xb.c[2])) return false;
        return (double)DK_TFN(dk_quad_overlap)(a, b, DK_RBOX_IOU) >= thr;
    }
};

static dk_status DK_TFN(dk__nmsq_gpu_mask)(const dk__nms_gpu_job *job, const void *sorted, const uint64_t *cls,
                                           int64_t words, int64_t rb0, int64_t nb, uint64_t *mask, void *stream)
{
    const double thr = *(const double *)job->args;
    const DK_TFN(dk__nmsq_gpu_overlap) o = {thr, thr > 0};
    return dk__nms_gpu_launch_mask(o, job, sorted, cls, words, rb0, nb, mask, stream);
}

#endif
