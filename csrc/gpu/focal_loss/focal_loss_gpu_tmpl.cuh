/*
 * focal_loss_gpu_tmpl.cuh — the focal losses' GPU kernels and their launchers (Note [Focal losses
 * on a GPU] in focal_loss_gpu.h), a template (Note [Templates in C] in kernels/dk_template.h)
 * instantiated for every float storage type by focal_loss_gpu.cu: DK_S the storage type, DK_T
 * the compute type. Each element is computed as the CPU kernel computes it, in the same order.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* Element (n, c)'s logit, target and row weight (the CPU's dk__fl_targets). */
__device__ static inline void DK_SFN(dk__fl_gpu_elem)(const DK_S *x, const void *tgt, const DK_S *wt,
                                                      const dk__fl_gpu_args &a, int64_t n, int64_t c, DK_T *xv,
                                                      DK_T *tv, DK_T *w)
{
    *xv = DK_LOAD(x[n * a.x_s[0] + c * a.x_s[1]]);
    *w = 1;
    if (!a.classes) {
        *tv = DK_LOAD(((const DK_S *)tgt)[n * a.t_s[0] + c * a.t_s[1]]);
        return;
    }
    const int64_t l = ((const int64_t *)tgt)[n * a.t_s[0]];
    *tv = l == c ? (DK_T)1 : (DK_T)0;
    if (wt && l >= 0 && l < a.C) *w = DK_LOAD(wt[l * a.w_s]);
}

__device__ static inline DK_T DK_SFN(dk__fl_gpu_loss)(const DK_S *x, const void *tgt, const DK_S *wt,
                                                      const dk__fl_gpu_args &a, int64_t i)
{
    DK_T xv, tv, w;
    DK_SFN(dk__fl_gpu_elem)(x, tgt, wt, a, i / a.C, i % a.C, &xv, &tv, &w);
    return w * DK_TFN(dk_focal_sigmoid_loss)(xv, tv, (DK_T)a.gamma, (DK_T)a.alpha_pos, (DK_T)a.alpha_neg, a.kind);
}

/* Every element's loss. */
__global__ void DK_SFN(dk__fl_gpu_sig_forward_kernel)(const DK_S *__restrict__ x, const void *__restrict__ tgt,
                                                      const DK_S *__restrict__ wt, DK_S *__restrict__ out,
                                                      dk__fl_gpu_args a)
{
    const int64_t total = a.N * a.C;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE())
        out[i / a.C * a.out_s[0] + i % a.C * a.out_s[1]] = DK_STORE(DK_SFN(dk__fl_gpu_loss)(x, tgt, wt, a, i));
}

/* A block's chunk sum (Note [A deterministic sum]): the block has put the chunk's `count` terms
 * in vals; four of its threads add one lane each, in order, and thread 0 adds the lanes. The
 * terms were computed in parallel, the additions are the CPU's, in its order. */
__device__ static inline double DK_SFN(dk__fl_gpu_block_sum)(const double *vals, int64_t count, double *lanes)
{
    __syncthreads();
    if (threadIdx.x < 4) {
        double acc = 0;
        for (int64_t i = threadIdx.x; i < count; i += 4) acc += vals[i];
        lanes[threadIdx.x] = acc;
    }
    __syncthreads();
    const double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    __syncthreads(); /* vals and lanes are free for the next chunk */
    return sum;
}

/* One block per chunk (grid-stride over chunks): each element's term, and with gi its gradient
 * for grad_output 1 too (Note [The backward in the forward] in ops/focal_loss.h), by the
 * block's threads side by side (coalesced), then the chunk's four-lane sum. */
__global__ void DK_SFN(dk__fl_gpu_sig_chunks_kernel)(const DK_S *__restrict__ x, const void *__restrict__ tgt,
                                                     const DK_S *__restrict__ wt, double *__restrict__ partials,
                                                     DK_S *__restrict__ gi, int64_t chunks, dk__fl_gpu_args a)
{
    __shared__ double vals[DK_FOCAL_CHUNK];
    __shared__ double lanes[4];
    const int64_t total = a.N * a.C;
    const DK_T gs = (DK_T)(1.0 / a.divisor);
    for (int64_t j = blockIdx.x; j < chunks; j += gridDim.x) {
        const int64_t i0 = j * DK_FOCAL_CHUNK, count = total - i0 < DK_FOCAL_CHUNK ? total - i0 : DK_FOCAL_CHUNK;
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
            const int64_t i = i0 + e;
            if (!gi) {
                vals[e] = (double)DK_SFN(dk__fl_gpu_loss)(x, tgt, wt, a, i);
                continue;
            }
            const int64_t n = i / a.C, c = i % a.C;
            DK_T xv, tv, w, dt, v;
            DK_SFN(dk__fl_gpu_elem)(x, tgt, wt, a, n, c, &xv, &tv, &w);
            const DK_T dx = DK_TFN(dk_focal_sigmoid_grad)(xv, tv, (DK_T)a.gamma, (DK_T)a.alpha_pos, (DK_T)a.alpha_neg,
                                                          a.kind, &dt, &v);
            vals[e] = (double)(w * v);
            gi[n * a.fused_s[0] + c * a.fused_s[1]] = DK_STORE(w * dx * gs);
        }
        const double sum = DK_SFN(dk__fl_gpu_block_sum)(vals, count, lanes);
        if (threadIdx.x == 0) partials[j] = sum;
    }
}

/* The chunks' sums in order, over the divisor: one thread. */
__global__ void DK_SFN(dk__fl_gpu_total_kernel)(const double *__restrict__ partials, int64_t chunks,
                                                DK_S *__restrict__ out, double divisor)
{
    if (DK_GPU_FIRST() != 0) return;
    double total = 0;
    for (int64_t j = 0; j < chunks; j++) total += partials[j];
    *out = DK_STORE((DK_T)(total / divisor));
}

__global__ void DK_SFN(dk__fl_gpu_sig_backward_kernel)(const DK_S *__restrict__ go, const DK_S *__restrict__ x,
                                                       const void *__restrict__ tgt, const DK_S *__restrict__ wt,
                                                       DK_S *__restrict__ gi, DK_S *__restrict__ gt, dk__fl_gpu_args a)
{
    const int64_t total = a.N * a.C;
    const DK_T gs = a.reduction == DK_FOCAL_SUM ? (DK_T)((double)DK_LOAD(go[0]) / a.divisor) : (DK_T)0;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t n = i / a.C, c = i % a.C;
        DK_T xv, tv, w, dt, v;
        DK_SFN(dk__fl_gpu_elem)(x, tgt, wt, a, n, c, &xv, &tv, &w);
        const DK_T gr = a.reduction == DK_FOCAL_SUM ? gs : DK_LOAD(go[n * a.go_s[0] + c * a.go_s[1]]);
        const DK_T dx = DK_TFN(dk_focal_sigmoid_grad)(xv, tv, (DK_T)a.gamma, (DK_T)a.alpha_pos, (DK_T)a.alpha_neg,
                                                      a.kind, &dt, &v);
        gi[n * a.out_s[0] + c * a.out_s[1]] = DK_STORE(w * dx * gr);
        if (a.want_dt) gt[n * a.gt_s[0] + c * a.gt_s[1]] = DK_STORE(dt * gr);
    }
}

/* ---- softmax ------------------------------------------------------------------------------- */

/* Row n's loss (w included), its max, sum of exps and factor b (the CPU's dk__fl_soft_row); 0
 * for a target outside [0, C) (the host refuses C or more where it can read the targets). */
__device__ static inline DK_T DK_SFN(dk__fl_gpu_soft_row)(const DK_S *x, const int64_t *tgt, const DK_S *wt,
                                                          const dk__fl_gpu_args &a, int64_t n, DK_T *mx, DK_T *total,
                                                          DK_T *b)
{
    const int64_t l = tgt[n * a.t_s[0]];
    *b = 0;
    if (l < 0 || l >= a.C) return 0;
    const DK_S *row = x + n * a.x_s[0];
    DK_T lse;
    DK_SFN(dk_focal_softmax_row)(row, a.C, a.x_s[1], mx, total, &lse);
    DK_T buff;
    const DK_T v = DK_TFN(dk_focal_softmax_loss)(DK_LOAD(row[l * a.x_s[1]]), *mx, lse, (DK_T)a.gamma, (DK_T)a.alpha_pos,
                                                 &buff);
    const DK_T w = wt ? DK_LOAD(wt[l * a.w_s]) : (DK_T)1;
    *b = buff * w;
    return v * w;
}

__global__ void DK_SFN(dk__fl_gpu_soft_forward_kernel)(const DK_S *__restrict__ x, const int64_t *__restrict__ tgt,
                                                       const DK_S *__restrict__ wt, DK_S *__restrict__ out,
                                                       dk__fl_gpu_args a)
{
    for (int64_t n = DK_GPU_FIRST(); n < a.N; n += DK_GPU_STRIDE()) {
        DK_T mx, total, b;
        out[n * a.out_s[0]] = DK_STORE(DK_SFN(dk__fl_gpu_soft_row)(x, tgt, wt, a, n, &mx, &total, &b));
    }
}

/* One block per chunk of rows, one thread per row's loss, then the chunk's four-lane sum. */
__global__ void DK_SFN(dk__fl_gpu_soft_chunks_kernel)(const DK_S *__restrict__ x, const int64_t *__restrict__ tgt,
                                                      const DK_S *__restrict__ wt, double *__restrict__ partials,
                                                      int64_t chunks, dk__fl_gpu_args a)
{
    __shared__ double vals[DK_FOCAL_CHUNK_ROWS];
    __shared__ double lanes[4];
    for (int64_t j = blockIdx.x; j < chunks; j += gridDim.x) {
        const int64_t n0 = j * DK_FOCAL_CHUNK_ROWS;
        const int64_t count = a.N - n0 < DK_FOCAL_CHUNK_ROWS ? a.N - n0 : DK_FOCAL_CHUNK_ROWS;
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
            DK_T mx, total, b;
            vals[e] = (double)DK_SFN(dk__fl_gpu_soft_row)(x, tgt, wt, a, n0 + e, &mx, &total, &b);
        }
        const double sum = DK_SFN(dk__fl_gpu_block_sum)(vals, count, lanes);
        if (threadIdx.x == 0) partials[j] = sum;
    }
}

__global__ void DK_SFN(dk__fl_gpu_soft_backward_kernel)(const DK_S *__restrict__ go, const DK_S *__restrict__ x,
                                                        const int64_t *__restrict__ tgt, const DK_S *__restrict__ wt,
                                                        DK_S *__restrict__ gi, dk__fl_gpu_args a)
{
    for (int64_t n = DK_GPU_FIRST(); n < a.N; n += DK_GPU_STRIDE()) {
        DK_T mx = 0, total = 1, b;
        (void)DK_SFN(dk__fl_gpu_soft_row)(x, tgt, wt, a, n, &mx, &total, &b);
        const int64_t l = tgt[n * a.t_s[0]];
        const bool live = l >= 0 && l < a.C;
        const DK_T gr = a.reduction == DK_FOCAL_SUM ? (DK_T)((double)DK_LOAD(go[0]) / a.divisor)
                                                    : DK_LOAD(go[n * a.go_s[0]]);
        const DK_T inv = DK_TFN(dk_focal_softmax_inv)(total);
        for (int64_t c = 0; c < a.C; c++) {
            DK_T v = 0;
            if (live) {
                /* Note [The softmax's backward]: the statistics' exps, taken again */
                const DK_T e = DK_TFN(dk_focal_expneg)(DK_LOAD(x[n * a.x_s[0] + c * a.x_s[1]]) - mx);
                const DK_T s = DK_TFN(dk_focal_softmax_prob)(e, inv);
                v = b * ((c == l ? (DK_T)1 : (DK_T)0) - s) * gr;
            }
            gi[n * a.out_s[0] + c * a.out_s[1]] = DK_STORE(v);
        }
    }
}

/* ---- launchers ------------------------------------------------------------------------------ */

/* A reduced forward: the chunks' sums into scratch, then their total (Note [Focal losses on a
 * GPU]). */
static dk_status DK_SFN(dk__fl_gpu_reduced)(const dk_tensor *input, const dk_tensor *targets, const dk_tensor *weight,
                                            dk_tensor *output, dk_tensor *fused, const dk__fl_gpu_args *a, bool softmax,
                                            void *stream, const char *op)
{
    const int64_t items = softmax ? a->N : a->N * a->C, per = softmax ? DK_FOCAL_CHUNK_ROWS : DK_FOCAL_CHUNK;
    const int64_t chunks = (items + per - 1) / per;
    void *mem = NULL;
    dk_status st = dk_device_alloc(input->device, (size_t)(chunks + 1) * sizeof(double), &mem);
    if (st) return st;
    double *partials = (double *)mem;
    const DK_S *x = (const DK_S *)dk_tensor_data(input), *wt = weight ? (const DK_S *)dk_tensor_data(weight) : NULL;
    if (chunks > 0) {
        /* a block per chunk (Note [Focal losses on a GPU]) */
        const unsigned blocks = (unsigned)(chunks < DK_GPU_MAX_BLOCKS ? chunks : DK_GPU_MAX_BLOCKS);
        if (softmax)
            DK_GPU_LAUNCH(DK_SFN(dk__fl_gpu_soft_chunks_kernel), blocks, DK_FOCAL_CHUNK_ROWS, stream, x,
                          (const int64_t *)dk_tensor_data(targets), wt, partials, chunks, *a);
        else
            DK_GPU_LAUNCH(DK_SFN(dk__fl_gpu_sig_chunks_kernel), blocks, DK_GPU_THREADS, stream, x,
                          (const void *)dk_tensor_data(targets), wt, partials,
                          fused ? (DK_S *)dk_tensor_data(fused) : (DK_S *)NULL, chunks, *a);
        st = dk__gpu_launched(op);
    }
    if (!st) {
        DK_GPU_LAUNCH(DK_SFN(dk__fl_gpu_total_kernel), 1, 1, stream, (const double *)partials, chunks,
                      (DK_S *)dk_tensor_data(output), a->divisor);
        st = dk__gpu_launched(op);
    }
    dk_device_free(input->device, mem); /* stream-ordered: after the kernels above */
    return st;
}

static dk_status DK_SFN(dk__fl_gpu_sig_forward)(const dk_tensor *input, const dk_tensor *targets,
                                                const dk_tensor *weight, dk_tensor *output, dk_tensor *fused,
                                                const dk__fl_gpu_args *a, void *stream)
{
    static const char op[] = "sigmoid_focal_loss_forward";
    if (a->reduction == DK_FOCAL_SUM)
        return DK_SFN(dk__fl_gpu_reduced)(input, targets, weight, output, fused, a, false, stream, op);
    if (a->N * a->C == 0) return DK_OK;
    DK_GPU_LAUNCH(DK_SFN(dk__fl_gpu_sig_forward_kernel), dk_gpu_blocks(a->N * a->C), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(input), (const void *)dk_tensor_data(targets),
                  weight ? (const DK_S *)dk_tensor_data(weight) : (const DK_S *)NULL, (DK_S *)dk_tensor_data(output),
                  *a);
    return dk__gpu_launched(op);
}

static dk_status DK_SFN(dk__fl_gpu_sig_backward)(const dk_tensor *grad_output, const dk_tensor *input,
                                                 const dk_tensor *targets, const dk_tensor *weight,
                                                 dk_tensor *grad_input, dk_tensor *grad_targets,
                                                 const dk__fl_gpu_args *a, void *stream)
{
    if (a->N * a->C == 0) return DK_OK;
    DK_GPU_LAUNCH(
        DK_SFN(dk__fl_gpu_sig_backward_kernel), dk_gpu_blocks(a->N * a->C), DK_GPU_THREADS, stream,
        (const DK_S *)dk_tensor_data(grad_output), (const DK_S *)dk_tensor_data(input),
        (const void *)dk_tensor_data(targets), weight ? (const DK_S *)dk_tensor_data(weight) : (const DK_S *)NULL,
        (DK_S *)dk_tensor_data(grad_input), grad_targets ? (DK_S *)dk_tensor_data(grad_targets) : (DK_S *)NULL, *a);
    return dk__gpu_launched("sigmoid_focal_loss_backward");
}

static dk_status DK_SFN(dk__fl_gpu_soft_forward)(const dk_tensor *input, const dk_tensor *targets,
                                                 const dk_tensor *weight, dk_tensor *output, const dk__fl_gpu_args *a,
                                                 void *stream)
{
    static const char op[] = "softmax_focal_loss_forward";
    if (a->reduction == DK_FOCAL_SUM)
        return DK_SFN(dk__fl_gpu_reduced)(input, targets, weight, output, NULL, a, true, stream, op);
    if (a->N == 0) return DK_OK;
    DK_GPU_LAUNCH(DK_SFN(dk__fl_gpu_soft_forward_kernel), dk_gpu_blocks(a->N), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(input), (const int64_t *)dk_tensor_data(targets),
                  weight ? (const DK_S *)dk_tensor_data(weight) : (const DK_S *)NULL, (DK_S *)dk_tensor_data(output),
                  *a);
    return dk__gpu_launched(op);
}

static dk_status DK_SFN(dk__fl_gpu_soft_backward)(const dk_tensor *grad_output, const dk_tensor *input,
                                                  const dk_tensor *targets, const dk_tensor *weight,
                                                  dk_tensor *grad_input, const dk__fl_gpu_args *a, void *stream)
{
    if (a->N * a->C == 0) return DK_OK;
    DK_GPU_LAUNCH(DK_SFN(dk__fl_gpu_soft_backward_kernel), dk_gpu_blocks(a->N), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(grad_output), (const DK_S *)dk_tensor_data(input),
                  (const int64_t *)dk_tensor_data(targets),
                  weight ? (const DK_S *)dk_tensor_data(weight) : (const DK_S *)NULL,
                  (DK_S *)dk_tensor_data(grad_input), *a);
    return dk__gpu_launched("softmax_focal_loss_backward");
}

#endif
