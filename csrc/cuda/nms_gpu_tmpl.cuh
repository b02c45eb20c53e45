/*
 * nms_gpu_tmpl.cuh — NMS's GPU kernels (Note [NMS on a GPU] in nms_gpu.h), a template (Note
 * [Templates in C] in kernels/dk_template.h): the storage pass reads boxes and scores of any
 * float dtype and strides, the compute pass (DK_T: float, or double for float64 boxes) builds and
 * walks the mask. The bitonic steps and the gathering are not per type: they are in nms_gpu.cu.
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

/* Step 2: sorted box i = box ord[i], in the compute type, as (x1, y1, x2, y2) rows; categories
 * likewise (int64) when there are any. */
__global__ void DK_SFN(dk__nms_gpu_gather_boxes_kernel)(const DK_S *__restrict__ boxes, int64_t bs0, int64_t bs1,
                                                        const void *__restrict__ idxs, int idxs64, int64_t is0,
                                                        const int64_t *__restrict__ ord, int64_t n,
                                                        DK_T *__restrict__ sorted, int64_t *__restrict__ cls)
{
    for (int64_t i = DK_GPU_FIRST(); i < n; i += DK_GPU_STRIDE()) {
        const int64_t j = ord[i];
        const DK_S *r = boxes + j * bs0;
        for (int d = 0; d < 4; d++) sorted[4 * i + d] = DK_LOAD(r[d * bs1]);
        if (cls)
            cls[i] = idxs64 ? ((const int64_t *)idxs)[j * is0] : (int64_t)((const int32_t *)idxs)[j * is0];
    }
}

#elif DK_TMPL_PASS == DK_TMPL_COMPUTE

/* Step 3 for row blocks [rb0, rb0 + gridDim.y) and column block blockIdx.x: mask rows are
 * relative to the chunk's first row, 64 * rb0. Launched with 64 threads per block. */
__global__ void DK_TFN(dk__nms_gpu_mask_kernel)(const DK_T *__restrict__ sorted, const int64_t *__restrict__ cls,
                                                int64_t n, int64_t words, int64_t rb0, DK_T off, double thr,
                                                uint64_t *__restrict__ mask)
{
    const int64_t rb = rb0 + (int64_t)blockIdx.y, cb = (int64_t)blockIdx.x;
    if (cb < rb) return; /* earlier boxes are never suppressed by later ones: not read */
    __shared__ DK_T col[DK_NMS_GPU_BLOCK][5];
    __shared__ int64_t col_cls[DK_NMS_GPU_BLOCK];
    const int64_t c0 = cb * DK_NMS_GPU_BLOCK;
    const int64_t ncol = n - c0 < DK_NMS_GPU_BLOCK ? n - c0 : DK_NMS_GPU_BLOCK;
    const int t = (int)threadIdx.x;
    if (t < ncol) {
        const DK_T *b = sorted + 4 * (c0 + t);
        for (int d = 0; d < 4; d++) col[t][d] = b[d];
        col[t][4] = DK_TFN(dk_box_nms_area)(b[0], b[1], b[2], b[3], off);
        col_cls[t] = cls ? cls[c0 + t] : 0;
    }
    __syncthreads();
    const int64_t row = rb * DK_NMS_GPU_BLOCK + t;
    if (row >= n) return;
    const DK_T *a = sorted + 4 * row;
    const DK_T area = DK_TFN(dk_box_nms_area)(a[0], a[1], a[2], a[3], off);
    const int64_t my_cls = cls ? cls[row] : 0;
    uint64_t bits = 0;
    for (int64_t b = cb == rb ? t + 1 : 0; b < ncol; b++) {
        if (col_cls[b] != my_cls) continue;
        const DK_T ovr = DK_TFN(dk_box_nms_overlap)(a[0], a[1], a[2], a[3], area, col[b][0], col[b][1], col[b][2],
                                                    col[b][3], col[b][4], off);
        if ((double)ovr > thr) bits |= (uint64_t)1 << b;
    }
    mask[(row - rb0 * DK_NMS_GPU_BLOCK) * words + cb] = bits;
}

#endif
