/*
 * nms_match_gpu_tmpl.cuh — nms_match's overlap for the mask kernel (nms_gpu_mask.cuh), a
 * template over the compute type (Note [Templates in C] in kernels/dk_template.h).
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* Box i takes a later box j when their overlap (kernels/nms_math.h, offset 0, i first) is >= the
 * threshold in the compute type (MMCV's float comparison; Note [nms_match's groups]). */
struct DK_TFN(dk__nms_match_gpu_overlap) {
    typedef DK_T T;
    typedef DK_T X; /* the area */
    enum { D = 4 };
    DK_T thr;
    __device__ DK_T prep(const DK_T *b) const { return DK_TFN(dk_box_nms_area)(b[0], b[1], b[2], b[3], (DK_T)0); }
    __device__ bool suppresses(const DK_T *a, DK_T area_a, const DK_T *b, DK_T area_b) const
    {
        return DK_TFN(dk_box_nms_overlap)(a[0], a[1], a[2], a[3], area_a, b[0], b[1], b[2], b[3], area_b, (DK_T)0) >=
               thr;
    }
};

static dk_status DK_TFN(dk__nms_match_gpu_mask)(const dk__nms_gpu_job *job, const void *sorted, const uint64_t *cls,
                                                int64_t words, int64_t rb0, int64_t nb, uint64_t *mask, void *stream)
{
    const DK_TFN(dk__nms_match_gpu_overlap) o = {(DK_T) * (const double *)job->args};
    return dk__nms_gpu_launch_mask(o, job, sorted, cls, words, rb0, nb, mask, stream);
}

#endif
