/*
 * nms_gpu_mask.cuh — the greedy NMS of Note [NMS on a GPU] (nms_gpu.h) for any kind of box: the
 * steps that do not depend on the box (sort, chunked mask, gathering of the keep) are
 * dk__nms_gpu_run in nms_gpu.cu (the boxes are gathered in score order as `width` values in
 * the compute type, the categories as kernels/sort_key.h keys); what does (whether one box
 * suppresses another) is a job's. nms (axis-aligned boxes, IoU > threshold), nms_match (its groups,
 * IoU >= threshold) and nms_rotated (rotated boxes, IoU >= threshold) are jobs of one driver and one
 * mask kernel, templated over the overlap.
 * C++ (nvcc, hipcc, the emulation): included by the .cu files only.
 */
#ifndef DK_NMS_GPU_MASK_CUH
#define DK_NMS_GPU_MASK_CUH

#include <stdint.h>

#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "nms_gpu.h"

struct dk__nms_gpu_job;

/* Step 3 of a job, for row blocks [rb0, rb0 + nb) (dk__nms_gpu_launch_mask with the job's overlap). */
typedef dk_status (*dk__nms_gpu_mask_fn)(const dk__nms_gpu_job *job, const void *sorted, const uint64_t *cls,
                                         int64_t words, int64_t rb0, int64_t nb, uint64_t *mask, void *stream);

/* One call: its op, its tensors, and the overlap it decides with. */
struct dk__nms_gpu_job {
    const char *op;                  /* for errors */
    const dk_tensor *boxes, *scores; /* [n, width] and [n], of one float dtype, any strides */
    const dk_tensor *cats;           /* [n] categories (kernels/sort_key.h's dk_label_key dtypes), or NULL */
    int64_t n;                       /* boxes, < 2^31 (the ops check) */
    int width;                       /* values per box (4, or 5 rotated) */
    const void *args;                /* the op's own arguments, for its mask step */
    dk__nms_gpu_mask_fn mask[2];     /* by compute type: float (16- and 32-bit boxes), double (float64) */
    dk_tensor *starts;               /* nms_match's groups (Note [nms_match on a GPU]), or NULL: nms's keep */
};

/* Steps 1 to 4 on the job's tensors' device; keep and num as ops/nms.h says (with starts:
 * nms_match's members, starts and num). */
dk_status dk__nms_gpu_run(const dk__nms_gpu_job *job, dk_tensor *keep, dk_tensor *num);

/*
 * Step 3 for row blocks [rb0, rb0 + gridDim.y) and column block blockIdx.x, 64 threads a block:
 * bit b of mask[row][cb] is set when sorted box `row` would suppress box 64 cb + b, a later one
 * of its category. Mask rows are relative to the chunk's first row, 64 rb0. The overlap O says
 * what a box is and when one suppresses another:
 *   O::T        the compute type; O::D values per box
 *   O::X        a per-box value computed once (the area; a rotated box's bounding radius)
 *   o.prep(b)   that value for box b
 *   o.suppresses(a, xa, b, xb)   whether kept box a suppresses the later box b
 * The 64 boxes of the column block, their values and categories are staged in shared memory.
 */
template <class O>
__global__ void dk__nms_gpu_mask_kernel(const typename O::T *__restrict__ sorted, const uint64_t *__restrict__ cls,
                                        int64_t n, int64_t words, int64_t rb0, O o, uint64_t *__restrict__ mask)
{
    typedef typename O::T T;
    typedef typename O::X X;
    const int64_t rb = rb0 + (int64_t)blockIdx.y, cb = (int64_t)blockIdx.x;
    if (cb < rb) return; /* earlier boxes are never suppressed by later ones: not read */
    __shared__ T col[DK_NMS_GPU_BLOCK][O::D];
    __shared__ X col_x[DK_NMS_GPU_BLOCK];
    __shared__ uint64_t col_cls[DK_NMS_GPU_BLOCK];
    const int64_t c0 = cb * DK_NMS_GPU_BLOCK;
    const int64_t ncol = n - c0 < DK_NMS_GPU_BLOCK ? n - c0 : DK_NMS_GPU_BLOCK;
    const int t = (int)threadIdx.x;
    if (t < ncol) {
        const T *b = sorted + O::D * (c0 + t);
        for (int d = 0; d < O::D; d++) col[t][d] = b[d];
        col_x[t] = o.prep(b);
        col_cls[t] = cls ? cls[c0 + t] : 0;
    }
    __syncthreads();
    const int64_t row = rb * DK_NMS_GPU_BLOCK + t;
    if (row >= n) return;
    T a[O::D];
    for (int d = 0; d < O::D; d++) a[d] = sorted[O::D * row + d];
    const X xa = o.prep(a);
    const uint64_t my_cls = cls ? cls[row] : 0;
    uint64_t bits = 0;
    for (int64_t b = cb == rb ? t + 1 : 0; b < ncol; b++) {
        if (col_cls[b] != my_cls) continue;
        if (o.suppresses(a, xa, col[b], col_x[b])) bits |= (uint64_t)1 << b;
    }
    mask[(row - rb0 * DK_NMS_GPU_BLOCK) * words + cb] = bits;
}

/* A job's step 3 with overlap o: the launch of the mask kernel for row blocks [rb0, rb0 + nb). */
template <class O>
static dk_status dk__nms_gpu_launch_mask(const O &o, const dk__nms_gpu_job *job, const void *sorted,
                                         const uint64_t *cls, int64_t words, int64_t rb0, int64_t nb, uint64_t *mask,
                                         void *stream)
{
    const dim3 grid((unsigned)words, (unsigned)nb); /* words < 2^25; nb <= 65535 (dk__nms_gpu_run) */
    DK_GPU_LAUNCH(dk__nms_gpu_mask_kernel<O>, grid, DK_NMS_GPU_BLOCK, stream, (const typename O::T *)sorted, cls,
                  job->n, words, rb0, o, mask);
    return dk__gpu_launched(job->op);
}

#endif /* DK_NMS_GPU_MASK_CUH */
