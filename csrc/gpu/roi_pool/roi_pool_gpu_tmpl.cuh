/*
 * roi_pool_gpu_tmpl.cuh — roi_pool's GPU kernels and their launchers (Note [RoIPool on a GPU] in
 * roi_pool_gpu.h), a template (Note [Templates in C] in kernels/dk_template.h) instantiated for
 * every float storage type by roi_pool_gpu.cu: DK_S the storage type, DK_T the compute type.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* argmax element ao, of any width (ops/roi_pool.c: int16, int32 or int64). */
__device__ static inline int64_t DK_SFN(dk__rp_gpu_arg)(const dk__rp_gpu_args &a, const void *arg, int64_t ao)
{
    return a.arg_bits == 64   ? ((const int64_t *)arg)[ao]
           : a.arg_bits == 16 ? ((const int16_t *)arg)[ao]
                              : ((const int32_t *)arg)[ao];
}

/* RoI k's batch index, or -1 when it is not one of the N images (the CPU's dk__rp_batch). */
__device__ static inline int64_t DK_SFN(dk__rp_gpu_batch)(const DK_S *rois, const dk__rp_gpu_args &a, int64_t k)
{
    const double b = (double)DK_LOAD(rois[k * a.rois_s[0]]);
    return b >= 0 && b < (double)a.N && b == (double)(int64_t)b ? (int64_t)b : -1;
}

__global__ void DK_SFN(dk__rp_gpu_forward_kernel)(const DK_S *__restrict__ x, const DK_S *__restrict__ rois,
                                                  DK_S *__restrict__ y, void *__restrict__ arg, dk__rp_gpu_args a)
{
    const int64_t total = a.K * a.C * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        int64_t k, c, ph, pw;
        dk_gpu_bin_of(a.narrow, a.channel_major, a.K, a.C, a.PH, a.PW, i, &k, &c, &ph, &pw);
        const int64_t n = DK_SFN(dk__rp_gpu_batch)(rois, a, k);
        const DK_S *r = rois + k * a.rois_s[0];
        const DK_TFN(dk_roi_pool_roi) g = DK_TFN(dk_roi_pool_roi_init)(
            DK_LOAD(r[a.rois_s[1]]), DK_LOAD(r[2 * a.rois_s[1]]), DK_LOAD(r[3 * a.rois_s[1]]),
            DK_LOAD(r[4 * a.rois_s[1]]), (DK_T)a.scale, a.PH, a.PW, a.bins_kind);
        int64_t h0, h1, w0, w1, am = -1;
        DK_T m = 0;
        if (n >= 0) {
            const bool some = DK_TFN(dk_roi_pool_bin)(&g, ph, pw, a.H, a.W, &h0, &h1, &w0, &w1);
            m = DK_SFN(dk_roi_pool_max)(x + n * a.img_s[0] + c * a.img_s[1], a.img_s[2], a.img_s[3], a.W, some, h0, h1,
                                        w0, w1, &am);
        }
        y[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]] = DK_STORE(m);
        const int64_t ao = k * a.arg_s[0] + c * a.arg_s[1] + ph * a.arg_s[2] + pw * a.arg_s[3];
        if (a.arg_bits == 64) ((int64_t *)arg)[ao] = am;
        else if (a.arg_bits == 32) ((int32_t *)arg)[ao] = (int32_t)am; /* ops/roi_pool.c: it fits */
        else if (a.arg_bits == 16) ((int16_t *)arg)[ao] = (int16_t)am;
    }
}

/* grad_input = 0, any strides. */
__global__ void DK_SFN(dk__rp_gpu_zero_kernel)(DK_S *__restrict__ gin, dk__rp_gpu_args a)
{
    const int64_t total = a.N * a.C * a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t x = i % a.W, y = i / a.W % a.H, c = i / (a.W * a.H) % a.C, n = i / (a.W * a.H * a.C);
        gin[n * a.img_s[0] + c * a.img_s[1] + y * a.img_s[2] + x * a.img_s[3]] = DK_STORE((DK_T)0);
    }
}

/* Deterministic backward (Note [RoIPool on a GPU]): one block per (n, c) plane (grid-stride over
 * planes). The block reads the bins (k, ph, pw) in the CPU's order, a chunk of blockDim at a time,
 * into shared memory: each bin's argmax (-1 when its RoI is another image's or it pooled nothing)
 * and gradient; then the thread that owns a pixel (pixel % blockDim) adds, in the chunk's order,
 * every bin whose argmax is that pixel. Each pixel's additions are the CPU's, in the CPU's order,
 * by one thread: its bits, no atomics, N C blocks sharing the reads. */
__global__ void DK_SFN(dk__rp_gpu_backward_kernel)(const DK_S *__restrict__ gout, const DK_S *__restrict__ rois,
                                                   const void *__restrict__ arg, DK_S *__restrict__ gin,
                                                   dk__rp_gpu_args a)
{
    __shared__ int64_t s_pix[DK_GPU_THREADS];
    __shared__ int s_own[DK_GPU_THREADS];
    __shared__ DK_T s_g[DK_GPU_THREADS];
    const int64_t planes = a.N * a.C, bins = a.PH * a.PW, entries = a.K * bins, plane = a.H * a.W;
    const int tid = (int)threadIdx.x, T = (int)blockDim.x;
    for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
        const int64_t c = p % a.C, n = p / a.C;
        DK_S *img = gin + n * a.img_s[0] + c * a.img_s[1];
        for (int64_t j0 = 0; j0 < entries; j0 += T) {
            const int64_t j = j0 + tid;
            int64_t pix = -1;
            DK_T g = (DK_T)0;
            if (j < entries) {
                const int64_t k = j / bins, ph = j % bins / a.PW, pw = j % a.PW;
                if (DK_SFN(dk__rp_gpu_batch)(rois, a, k) == n) {
                    const int64_t ao = k * a.arg_s[0] + c * a.arg_s[1] + ph * a.arg_s[2] + pw * a.arg_s[3];
                    const int64_t am = DK_SFN(dk__rp_gpu_arg)(a, arg, ao);
                    if (am >= 0 && am < plane) { /* -1: nothing was pooled (ops/roi_pool.c) */
                        pix = am;
                        g = DK_LOAD(gout[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]);
                    }
                }
            }
            s_pix[tid] = pix;
            s_own[tid] = pix >= 0 ? (int)(pix % T) : -1;
            s_g[tid] = g;
            __syncthreads();
            const int m = entries - j0 < T ? (int)(entries - j0) : T;
            for (int e = 0; e < m; e++) {
                if (s_own[e] != tid) continue;
                DK_S *x = img + (s_pix[e] / a.W) * a.img_s[2] + (s_pix[e] % a.W) * a.img_s[3];
                *x = DK_STORE(DK_LOAD(*x) + s_g[e]);
            }
            __syncthreads();
        }
    }
}

/* Atomic backward (Note [RoIPool on a GPU]): one thread per grad_output element (k, c, ph, pw)
 * adds its gradient at its bin's argmax into acc, the compute-type accumulator of grad_input
 * with strides acc_s (grad_input itself for float32 and float64; a float scratch for 16-bit
 * storage, which has no fast atomics of its own). */
__global__ void DK_SFN(dk__rp_gpu_backward_atomic_kernel)(const DK_S *__restrict__ gout, const DK_S *__restrict__ rois,
                                                          const void *__restrict__ arg, DK_T *acc, dk__rp_gpu_args a,
                                                          dk__rp_gpu_acc_s s)
{
    const int64_t total = a.K * a.C * a.PH * a.PW, plane = a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t pw = i % a.PW, ph = i / a.PW % a.PH, c = i / (a.PW * a.PH) % a.C, k = i / (a.PW * a.PH * a.C);
        const int64_t n = DK_SFN(dk__rp_gpu_batch)(rois, a, k);
        if (n < 0) continue;
        const int64_t ao = k * a.arg_s[0] + c * a.arg_s[1] + ph * a.arg_s[2] + pw * a.arg_s[3];
        const int64_t am = DK_SFN(dk__rp_gpu_arg)(a, arg, ao);
        if (am < 0 || am >= plane) continue; /* -1: nothing was pooled (ops/roi_pool.c) */
        atomicAdd(acc + n * s.s[0] + c * s.s[1] + (am / a.W) * s.s[2] + (am % a.W) * s.s[3],
                  DK_LOAD(gout[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]));
    }
}

/* grad_input = acc (16-bit storage: the float accumulator, contiguous NCHW, rounded once). */
__global__ void DK_SFN(dk__rp_gpu_store_kernel)(const DK_T *__restrict__ acc, DK_S *__restrict__ gin, dk__rp_gpu_args a)
{
    const int64_t total = a.N * a.C * a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t x = i % a.W, y = i / a.W % a.H, c = i / (a.W * a.H) % a.C, n = i / (a.W * a.H * a.C);
        gin[n * a.img_s[0] + c * a.img_s[1] + y * a.img_s[2] + x * a.img_s[3]] = DK_STORE(acc[i]);
    }
}

/* The atomic backwards' accumulator: grad_input itself, zeroed (float32, float64), or a zeroed
 * float scratch (16-bit storage); *acc, its strides *s and the scratch to free (*scratch, or
 * NULL). Then dk__rp_gpu_acc_end stores the scratch into grad_input and frees it. */
static dk_status DK_SFN(dk__rp_gpu_acc_begin)(dk_tensor *grad_input, const dk__rp_gpu_args *a, void *stream,
                                              const char *op, DK_T **acc, dk__rp_gpu_acc_s *s, void **scratch)
{
    *scratch = NULL;
#if DK_S_IS_T
    *acc = (DK_T *)dk_tensor_data(grad_input);
    for (int d = 0; d < 4; d++) s->s[d] = a->img_s[d];
    DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_zero_kernel), dk_gpu_blocks(a->N * a->C * a->H * a->W), DK_GPU_THREADS, stream,
                  (DK_S *)*acc, *a);
    return dk__gpu_launched(op);
#else
    const int64_t img = a->N * a->C * a->H * a->W;
    size_t bytes;
    if (__builtin_mul_overflow((size_t)img, sizeof(DK_T), &bytes))
        return dk_error(DK_EINVAL, "%s: grad_input too large (%lld elements)", op, (long long)img);
    dk_status st = dk_device_alloc(grad_input->device, bytes, scratch);
    if (st) return st;
    *acc = (DK_T *)*scratch;
    s->s[0] = a->C * a->H * a->W, s->s[1] = a->H * a->W, s->s[2] = a->W, s->s[3] = 1;
    if (dkgMemsetAsync(*scratch, 0, bytes, (dkgStream_t)stream) != dkgSuccess) st = dk__gpu_launched(op);
    return st;
#endif
}

static dk_status DK_SFN(dk__rp_gpu_acc_end)(dk_status st, dk_tensor *grad_input, const dk__rp_gpu_args *a, void *stream,
                                            const char *op, void *scratch)
{
    if (!scratch) return st;
    if (!st) {
        DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_store_kernel), dk_gpu_blocks(a->N * a->C * a->H * a->W), DK_GPU_THREADS, stream,
                      (const DK_T *)scratch, (DK_S *)dk_tensor_data(grad_input), *a);
        st = dk__gpu_launched(op);
    }
    dk_device_free(grad_input->device, scratch); /* stream-ordered: after the kernels before it */
    return st;
}

static dk_status DK_SFN(dk__rp_gpu_forward)(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                            dk_tensor *argmax, const dk__rp_gpu_args *a, void *stream)
{
    const int64_t total = a->K * a->C * a->PH * a->PW;
    DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_forward_kernel), dk_gpu_blocks(total), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(input), (const DK_S *)dk_tensor_data(rois),
                  (DK_S *)dk_tensor_data(output), argmax ? dk_tensor_data(argmax) : NULL, *a);
    return dk__gpu_launched("roi_pool_forward");
}

static dk_status DK_SFN(dk__rp_gpu_backward)(const dk_tensor *grad_output, const dk_tensor *rois,
                                             const dk_tensor *argmax, dk_tensor *grad_input, const dk__rp_gpu_args *a,
                                             bool deterministic, void *stream)
{
    if (!deterministic) {
        DK_T *acc;
        dk__rp_gpu_acc_s s;
        void *scratch;
        dk_status st = DK_SFN(dk__rp_gpu_acc_begin)(grad_input, a, stream, "roi_pool_backward", &acc, &s, &scratch);
        const int64_t bins = a->K * a->C * a->PH * a->PW;
        if (!st && bins > 0) {
            DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_backward_atomic_kernel), dk_gpu_blocks(bins), DK_GPU_THREADS, stream,
                          (const DK_S *)dk_tensor_data(grad_output), (const DK_S *)dk_tensor_data(rois),
                          (const void *)dk_tensor_data(argmax), acc, *a, s);
            st = dk__gpu_launched("roi_pool_backward");
        }
        return DK_SFN(dk__rp_gpu_acc_end)(st, grad_input, a, stream, "roi_pool_backward", scratch);
    }
    DK_S *gin = (DK_S *)dk_tensor_data(grad_input);
    DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_zero_kernel), dk_gpu_blocks(a->N * a->C * a->H * a->W), DK_GPU_THREADS, stream, gin,
                  *a);
    dk_status st = dk__gpu_launched("roi_pool_backward");
    if (st || a->K == 0 || a->PH == 0 || a->PW == 0) return st;
    const int64_t planes = a->N * a->C;
    DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_backward_kernel),
                  (unsigned)(planes < DK_GPU_MAX_BLOCKS ? planes : DK_GPU_MAX_BLOCKS), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(grad_output), (const DK_S *)dk_tensor_data(rois),
                  (const void *)dk_tensor_data(argmax), gin, *a);
    return dk__gpu_launched("roi_pool_backward");
}

/* ---- ps_roi_pool ---------------------------------------------------------------------------- */

__device__ static inline DK_TFN(dk_roi_pool_roi)
    DK_SFN(dk__rp_gpu_ps_roi)(const DK_S *rois, const dk__rp_gpu_args &a, int64_t k)
{
    const DK_S *r = rois + k * a.rois_s[0];
    return DK_TFN(dk_roi_pool_roi_init)(DK_LOAD(r[a.rois_s[1]]), DK_LOAD(r[2 * a.rois_s[1]]),
                                        DK_LOAD(r[3 * a.rois_s[1]]), DK_LOAD(r[4 * a.rois_s[1]]), (DK_T)a.scale, a.PH,
                                        a.PW, DK_ROI_POOL_BINS_PS);
}

/* ps_roi_align's two axes of RoI k. */
__device__ static inline void DK_SFN(dk__psa_gpu_roi)(const DK_S *rois, const dk__rp_gpu_args &a, int64_t k,
                                                      DK_TFN(dk_roi_align_axis) *ay, DK_TFN(dk_roi_align_axis) *ax)
{
    const DK_S *r = rois + k * a.rois_s[0];
    DK_TFN(dk_ps_roi_align_roi_init)(DK_LOAD(r[a.rois_s[1]]), DK_LOAD(r[2 * a.rois_s[1]]), DK_LOAD(r[3 * a.rois_s[1]]),
                                     DK_LOAD(r[4 * a.rois_s[1]]), (DK_T)a.scale, a.PH, a.PW, a.sampling_ratio, a.H, a.W,
                                     ay, ax);
}

/* One thread per output element (k, c, ph, pw); a.C is the output's channel count here. */
__global__ void DK_SFN(dk__rp_gpu_ps_forward_kernel)(const DK_S *__restrict__ x, const DK_S *__restrict__ rois,
                                                     DK_S *__restrict__ y, dk__rp_gpu_args a)
{
    const int64_t total = a.K * a.C * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t pw = i % a.PW, ph = i / a.PW % a.PH, c = i / (a.PW * a.PH) % a.C, k = i / (a.PW * a.PH * a.C);
        const int64_t n = DK_SFN(dk__rp_gpu_batch)(rois, a, k);
        const DK_TFN(dk_roi_pool_roi) g = DK_SFN(dk__rp_gpu_ps_roi)(rois, a, k);
        int64_t h0 = 0, h1 = 0, w0 = 0, w1 = 0;
        const bool some = n >= 0 && DK_TFN(dk_roi_pool_bin)(&g, ph, pw, a.H, a.W, &h0, &h1, &w0, &w1);
        const int64_t cin = (c * a.PH + ph) * a.PW + pw;
        const DK_T v = some ? DK_SFN(dk_roi_pool_avg)(x + n * a.img_s[0] + cin * a.img_s[1], a.img_s[2], a.img_s[3],
                                                      true, h0, h1, w0, w1)
                            : (DK_T)0;
        y[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]] = DK_STORE(v);
    }
}

/* The deterministic gathers' RoI table: for each RoI its image and the pixels its bins can reach
 * (ps_roi_pool: the union of its bins' bounds; ps_roi_align: its samples' span, 2 pixels of slack
 * each side, the whole axis where a sample is not finite). */
__device__ static inline void DK_SFN(dk__rp_gpu_reach_axis)(DK_T c0, DK_T c1, int64_t size, int64_t *lo, int64_t *hi)
{
    const DK_T a = c0 < c1 ? c0 : c1, b = c0 < c1 ? c1 : c0;
    *lo = 0;
    *hi = size - 1;
    if (a != a || b != b) return;             /* NaN: the whole axis (its taps decide) */
    if (a > (DK_T)size + 4 || b < (DK_T)-4) { /* wholly beyond an edge: no pixel */
        *lo = 0, *hi = -1;
        return;
    }
    if (a >= (DK_T)-4) *lo = (int64_t)floor((double)a) - 2 < 0 ? 0 : (int64_t)floor((double)a) - 2;
    if (b <= (DK_T)size + 4) *hi = (int64_t)ceil((double)b) + 2 > size - 1 ? size - 1 : (int64_t)ceil((double)b) + 2;
}

__global__ void DK_SFN(dk__rp_gpu_ps_table_kernel)(const DK_S *__restrict__ rois, dk__rp_gpu_args a, int align,
                                                   dk__rp_gpu_reach *__restrict__ table)
{
    for (int64_t k = DK_GPU_FIRST(); k < a.K; k += DK_GPU_STRIDE()) {
        dk__rp_gpu_reach e;
        e.n = DK_SFN(dk__rp_gpu_batch)(rois, a, k);
        e.y0 = e.x0 = 0;
        e.y1 = e.x1 = -1;
        if (e.n >= 0 && !align) {
            const DK_TFN(dk_roi_pool_roi) g = DK_SFN(dk__rp_gpu_ps_roi)(rois, a, k);
            int64_t lo, hi;
            e.y0 = a.H, e.x0 = a.W;
            for (int64_t p = 0; p < a.PH && !g.none; p++) {
                DK_TFN(dk_roi_pool_axis)(&g, true, p, a.H, &lo, &hi);
                if (hi > lo) e.y0 = lo < e.y0 ? lo : e.y0, e.y1 = hi - 1 > e.y1 ? hi - 1 : e.y1;
            }
            for (int64_t p = 0; p < a.PW && !g.none; p++) {
                DK_TFN(dk_roi_pool_axis)(&g, false, p, a.W, &lo, &hi);
                if (hi > lo) e.x0 = lo < e.x0 ? lo : e.x0, e.x1 = hi - 1 > e.x1 ? hi - 1 : e.x1;
            }
        } else if (e.n >= 0) {
            DK_TFN(dk_roi_align_axis) ay, ax;
            DK_SFN(dk__psa_gpu_roi)(rois, a, k, &ay, &ax);
            if (ay.grid > 0 && ax.grid > 0) {
                DK_SFN(dk__rp_gpu_reach_axis)(DK_TFN(dk_roi_align_axis_sample)(&ay, 0, 0),
                                              DK_TFN(dk_roi_align_axis_sample)(&ay, a.PH - 1, ay.grid - 1), a.H, &e.y0,
                                              &e.y1);
                DK_SFN(dk__rp_gpu_reach_axis)(DK_TFN(dk_roi_align_axis_sample)(&ax, 0, 0),
                                              DK_TFN(dk_roi_align_axis_sample)(&ax, a.PW - 1, ax.grid - 1), a.W, &e.x0,
                                              &e.x1);
            }
        }
        if (e.y0 > e.y1 || e.x0 > e.x1) e.n = -1;
        table[k] = e;
    }
}

/* One thread per grad_input element (n, cin, h, w); a.C is grad_input's channel count here. The
 * RoIs of its tile's list, in index order: the others add nothing to it. */
__global__ void DK_SFN(dk__rp_gpu_ps_backward_kernel)(const DK_S *__restrict__ gout, const DK_S *__restrict__ rois,
                                                      const int32_t *__restrict__ lists,
                                                      const int32_t *__restrict__ counts, DK_S *__restrict__ gin,
                                                      dk__rp_gpu_args a, dk__rp_gpu_tiles tg)
{
    const int64_t total = a.N * a.C * a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t w = i % a.W, h = i / a.W % a.H, cin = i / (a.W * a.H) % a.C, n = i / (a.W * a.H * a.C);
        const int64_t pw = cin % a.PW, ph = cin / a.PW % a.PH, c = cin / (a.PW * a.PH);
        const int64_t t = (n * tg.ty + h / tg.tile) * tg.tx + w / tg.tile;
        DK_S acc = DK_STORE((DK_T)0);
        for (int32_t li = 0; li < counts[t]; li++) {
            const int64_t k = lists[t * a.K + li];
            const DK_TFN(dk_roi_pool_roi) g = DK_SFN(dk__rp_gpu_ps_roi)(rois, a, k);
            int64_t h0, h1, w0, w1;
            if (!DK_TFN(dk_roi_pool_bin)(&g, ph, pw, a.H, a.W, &h0, &h1, &w0, &w1)) continue;
            if (h < h0 || h >= h1 || w < w0 || w >= w1) continue;
            const DK_T d = DK_LOAD(gout[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]) /
                           (DK_T)((h1 - h0) * (w1 - w0));
            acc = DK_STORE(DK_LOAD(acc) + d); /* rounded to the storage type at each addition, as the CPU */
        }
        gin[n * a.img_s[0] + cin * a.img_s[1] + h * a.img_s[2] + w * a.img_s[3]] = acc;
    }
}

/* Atomic backward: one thread per grad_output element (k, co, ph, pw) adds its share, g over its
 * bin's area (the CPU's term), to every pixel of its bin in its one input channel; a.C is
 * grad_input's channel count here, co * PH * PW + ph * PW + pw the input channel. */
__global__ void DK_SFN(dk__rp_gpu_ps_backward_atomic_kernel)(const DK_S *__restrict__ gout,
                                                             const DK_S *__restrict__ rois, DK_T *acc,
                                                             dk__rp_gpu_args a, dk__rp_gpu_acc_s s)
{
    const int64_t CO = a.C / (a.PH * a.PW), total = a.K * CO * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t pw = i % a.PW, ph = i / a.PW % a.PH, c = i / (a.PW * a.PH) % CO, k = i / (a.PW * a.PH * CO);
        const int64_t n = DK_SFN(dk__rp_gpu_batch)(rois, a, k);
        if (n < 0) continue;
        const DK_TFN(dk_roi_pool_roi) g = DK_SFN(dk__rp_gpu_ps_roi)(rois, a, k);
        int64_t h0, h1, w0, w1;
        if (!DK_TFN(dk_roi_pool_bin)(&g, ph, pw, a.H, a.W, &h0, &h1, &w0, &w1)) continue;
        const DK_T d = DK_LOAD(gout[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]) /
                       (DK_T)((h1 - h0) * (w1 - w0));
        DK_T *plane = acc + n * s.s[0] + ((c * a.PH + ph) * a.PW + pw) * s.s[1];
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) atomicAdd(plane + h * s.s[2] + w * s.s[3], d);
    }
}

static dk_status DK_SFN(dk__rp_gpu_ps_forward)(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                               const dk__rp_gpu_args *a, void *stream)
{
    DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_ps_forward_kernel), dk_gpu_blocks(a->K * a->C * a->PH * a->PW), DK_GPU_THREADS,
                  stream, (const DK_S *)dk_tensor_data(input), (const DK_S *)dk_tensor_data(rois),
                  (DK_S *)dk_tensor_data(output), *a);
    return dk__gpu_launched("ps_roi_pool_forward");
}

static dk_status DK_SFN(dk__rp_gpu_ps_gather)(const dk_tensor *grad_output, const dk_tensor *rois,
                                              dk_tensor *grad_input, const dk__rp_gpu_args *a,
                                              const dk__rp_gpu_tiles *g, bool align, void *stream);

/* Both position-sensitive backwards (Note [RoIPool on a GPU]): `scatter`'s atomics into the
 * accumulator, or with tiles (deterministic kernels asked for) the gather; `align` names the op. */
typedef void (*DK_SFN(dk__rp_gpu_ps_scatter))(const DK_S *, const DK_S *, DK_T *, dk__rp_gpu_args, dk__rp_gpu_acc_s);
static dk_status DK_SFN(dk__rp_gpu_ps_backward_by)(DK_SFN(dk__rp_gpu_ps_scatter) scatter, bool align,
                                                   const dk_tensor *grad_output, const dk_tensor *rois,
                                                   dk_tensor *grad_input, const dk__rp_gpu_args *a,
                                                   const dk__rp_gpu_tiles *tiles, void *stream)
{
    if (tiles) return DK_SFN(dk__rp_gpu_ps_gather)(grad_output, rois, grad_input, a, tiles, align, stream);
    const char *op = align ? "ps_roi_align_backward" : "ps_roi_pool_backward";
    DK_T *acc;
    dk__rp_gpu_acc_s s;
    void *scratch;
    dk_status st = DK_SFN(dk__rp_gpu_acc_begin)(grad_input, a, stream, op, &acc, &s, &scratch);
    const int64_t bins = a->K * a->C; /* K x CO x PH x PW */
    if (!st && bins > 0) {
        DK_GPU_LAUNCH(scatter, dk_gpu_blocks(bins), DK_GPU_THREADS, stream, (const DK_S *)dk_tensor_data(grad_output),
                      (const DK_S *)dk_tensor_data(rois), acc, *a, s);
        st = dk__gpu_launched(op);
    }
    return DK_SFN(dk__rp_gpu_acc_end)(st, grad_input, a, stream, op, scratch);
}

static dk_status DK_SFN(dk__rp_gpu_ps_backward)(const dk_tensor *grad_output, const dk_tensor *rois,
                                                dk_tensor *grad_input, const dk__rp_gpu_args *a,
                                                const dk__rp_gpu_tiles *tiles, void *stream)
{
    return DK_SFN(dk__rp_gpu_ps_backward_by)(DK_SFN(dk__rp_gpu_ps_backward_atomic_kernel), false, grad_output, rois,
                                             grad_input, a, tiles, stream);
}

/* ---- ps_roi_align -------------------------------------------------------------------------- */

/* One thread per output element (k, c, ph, pw); a.C is the output's channel count here. */
__global__ void DK_SFN(dk__psa_gpu_forward_kernel)(const DK_S *__restrict__ x, const DK_S *__restrict__ rois,
                                                   DK_S *__restrict__ y, dk__rp_gpu_args a)
{
    const int64_t total = a.K * a.C * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t pw = i % a.PW, ph = i / a.PW % a.PH, c = i / (a.PW * a.PH) % a.C, k = i / (a.PW * a.PH * a.C);
        const int64_t n = DK_SFN(dk__rp_gpu_batch)(rois, a, k);
        DK_T v = (DK_T)0;
        if (n >= 0) {
            DK_TFN(dk_roi_align_axis) ay, ax;
            DK_SFN(dk__psa_gpu_roi)(rois, a, k, &ay, &ax);
            const int64_t cin = (c * a.PH + ph) * a.PW + pw;
            v = DK_SFN(dk_roi_align_forward_avg)(x + n * a.img_s[0] + cin * a.img_s[1], a.img_s[2], a.img_s[3], a.H,
                                                 a.W, &ay, &ax, ph, pw);
        }
        y[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]] = DK_STORE(v);
    }
}

/* Samples [*lo, *hi] of bin p (numbers within the bin) whose taps may reach pixel q: the axis
 * window's (dk_roi_align_axis_window) within the bin. */
__device__ static inline void DK_SFN(dk__psa_gpu_window)(const DK_TFN(dk_roi_align_axis) *a, int64_t pooled, int64_t p,
                                                         int64_t q, int64_t *lo, int64_t *hi)
{
    int64_t j0, j1;
    DK_TFN(dk_roi_align_axis_window)(a, pooled, q, &j0, &j1);
    const int64_t b0 = p * a->grid, b1 = b0 + a->grid - 1;
    *lo = (j0 > b0 ? j0 : b0) - b0;
    *hi = (j1 < b1 ? j1 : b1) - b0;
}

/* One thread per grad_input element (n, cin, h, w); a.C is grad_input's channel count here. The
 * RoIs of its tile's list, in index order: the others add nothing to it. */
__global__ void DK_SFN(dk__psa_gpu_backward_kernel)(const DK_S *__restrict__ gout, const DK_S *__restrict__ rois,
                                                    const int32_t *__restrict__ lists,
                                                    const int32_t *__restrict__ counts, DK_S *__restrict__ gin,
                                                    dk__rp_gpu_args a, dk__rp_gpu_tiles tg)
{
    const int64_t total = a.N * a.C * a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t w = i % a.W, h = i / a.W % a.H, cin = i / (a.W * a.H) % a.C, n = i / (a.W * a.H * a.C);
        const int64_t pw = cin % a.PW, ph = cin / a.PW % a.PH, c = cin / (a.PW * a.PH);
        const int64_t t = (n * tg.ty + h / tg.tile) * tg.tx + w / tg.tile;
        DK_T sum = (DK_T)0;
        for (int32_t li = 0; li < counts[t]; li++) {
            const int64_t k = lists[t * a.K + li];
            DK_TFN(dk_roi_align_axis) ay, ax;
            DK_SFN(dk__psa_gpu_roi)(rois, a, k, &ay, &ax);
            if (ay.grid <= 0 || ax.grid <= 0) continue;
            int64_t iy0, iy1, ix0, ix1;
            DK_SFN(dk__psa_gpu_window)(&ay, a.PH, ph, h, &iy0, &iy1);
            DK_SFN(dk__psa_gpu_window)(&ax, a.PW, pw, w, &ix0, &ix1);
            if (iy0 > iy1 || ix0 > ix1) continue;
            const DK_T count = DK_TFN(dk_roi_align_count)(&ay, &ax);
            const DK_T gk = DK_LOAD(gout[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]);
            for (int64_t iy = iy0; iy <= iy1; iy++) {
                DK_TFN(dk_roi_align_taps) ty, tx;
                if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(&ay, ph, iy), a.H, &ty)) continue;
                if (ty.lo != h && ty.hi != h) continue;
                for (int64_t ix = ix0; ix <= ix1; ix++) {
                    if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(&ax, pw, ix), a.W, &tx))
                        continue;
                    if (tx.lo != w && tx.hi != w) continue;
                    DK_TFN(dk_roi_align_bilinear) b;
                    DK_TFN(dk_roi_align_bilinear_of)(&ty, &tx, &b);
                    /* the CPU's four additions, those that land here, in its order */
                    if (b.y_low == h && b.x_low == w) sum += DK_TFN(dk_ps_roi_align_share)(gk, b.w1, count);
                    if (b.y_low == h && b.x_high == w) sum += DK_TFN(dk_ps_roi_align_share)(gk, b.w2, count);
                    if (b.y_high == h && b.x_low == w) sum += DK_TFN(dk_ps_roi_align_share)(gk, b.w3, count);
                    if (b.y_high == h && b.x_high == w) sum += DK_TFN(dk_ps_roi_align_share)(gk, b.w4, count);
                }
            }
        }
        gin[n * a.img_s[0] + cin * a.img_s[1] + h * a.img_s[2] + w * a.img_s[3]] = DK_STORE(sum);
    }
}

/* Atomic backward: one thread per grad_output element (k, co, ph, pw) adds, for each sample of
 * its bin, each of the four taps' share (dk_ps_roi_align_share: the CPU's term) in its one input
 * channel; a.C is grad_input's channel count here. */
__global__ void DK_SFN(dk__psa_gpu_backward_atomic_kernel)(const DK_S *__restrict__ gout, const DK_S *__restrict__ rois,
                                                           DK_T *acc, dk__rp_gpu_args a, dk__rp_gpu_acc_s s)
{
    const int64_t CO = a.C / (a.PH * a.PW), total = a.K * CO * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t pw = i % a.PW, ph = i / a.PW % a.PH, c = i / (a.PW * a.PH) % CO, k = i / (a.PW * a.PH * CO);
        const int64_t n = DK_SFN(dk__rp_gpu_batch)(rois, a, k);
        if (n < 0) continue;
        DK_TFN(dk_roi_align_axis) ay, ax;
        DK_SFN(dk__psa_gpu_roi)(rois, a, k, &ay, &ax);
        if (ay.grid <= 0 || ax.grid <= 0) continue;
        const DK_T count = DK_TFN(dk_roi_align_count)(&ay, &ax);
        const DK_T gk = DK_LOAD(gout[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]);
        DK_T *plane = acc + n * s.s[0] + ((c * a.PH + ph) * a.PW + pw) * s.s[1];
        for (int64_t iy = 0; iy < ay.grid; iy++) {
            const DK_T y = DK_TFN(dk_roi_align_axis_sample)(&ay, ph, iy);
            for (int64_t ix = 0; ix < ax.grid; ix++) {
                DK_TFN(dk_roi_align_bilinear) b;
                if (!DK_TFN(dk_roi_align_bilinear_init)(y, DK_TFN(dk_roi_align_axis_sample)(&ax, pw, ix), a.H, a.W, &b))
                    continue;
                atomicAdd(plane + b.y_low * s.s[2] + b.x_low * s.s[3], DK_TFN(dk_ps_roi_align_share)(gk, b.w1, count));
                atomicAdd(plane + b.y_low * s.s[2] + b.x_high * s.s[3], DK_TFN(dk_ps_roi_align_share)(gk, b.w2, count));
                atomicAdd(plane + b.y_high * s.s[2] + b.x_low * s.s[3], DK_TFN(dk_ps_roi_align_share)(gk, b.w3, count));
                atomicAdd(plane + b.y_high * s.s[2] + b.x_high * s.s[3],
                          DK_TFN(dk_ps_roi_align_share)(gk, b.w4, count));
            }
        }
    }
}

/* The position-sensitive deterministic backwards (Note [RoIPool on a GPU]): the RoI table, each
 * tile's list, then the gather (ps_roi_align's when `align`), in one scratch allocation. */
static dk_status DK_SFN(dk__rp_gpu_ps_gather)(const dk_tensor *grad_output, const dk_tensor *rois,
                                              dk_tensor *grad_input, const dk__rp_gpu_args *a,
                                              const dk__rp_gpu_tiles *g, bool align, void *stream)
{
    const char *op = align ? "ps_roi_align_backward" : "ps_roi_pool_backward";
    const int64_t tiles = a->N * g->ty * g->tx;
    const size_t table = (size_t)a->K * sizeof(dk__rp_gpu_reach);
    const size_t lists = ((size_t)tiles * (size_t)a->K + (size_t)tiles) * sizeof(int32_t);
    void *scratch = NULL;
    dk_status st = dk_device_alloc(grad_input->device, table + lists, &scratch);
    if (st) return st;
    dk__rp_gpu_reach *tab = (dk__rp_gpu_reach *)scratch;
    int32_t *list = (int32_t *)((char *)scratch + table), *count = list + tiles * a->K;
    const DK_S *r = (const DK_S *)dk_tensor_data(rois);
    if (a->K > 0) {
        DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_ps_table_kernel), dk_gpu_blocks(a->K), DK_GPU_THREADS, stream, r, *a,
                      (int)align, tab);
        st = dk__gpu_launched(op);
    }
    if (!st) {
        DK_GPU_LAUNCH(dk_gpu_tile_lists_kernel, dk_gpu_blocks(tiles), DK_GPU_THREADS, stream, tab, a->N, a->K, g->tile,
                      g->ty, g->tx, list, count);
        st = dk__gpu_launched(op);
    }
    if (!st) {
        const unsigned blocks = dk_gpu_blocks(a->N * a->C * a->H * a->W);
        const DK_S *gout = (const DK_S *)dk_tensor_data(grad_output);
        DK_S *gin = (DK_S *)dk_tensor_data(grad_input);
        if (align)
            DK_GPU_LAUNCH(DK_SFN(dk__psa_gpu_backward_kernel), blocks, DK_GPU_THREADS, stream, gout, r, list, count,
                          gin, *a, *g);
        else
            DK_GPU_LAUNCH(DK_SFN(dk__rp_gpu_ps_backward_kernel), blocks, DK_GPU_THREADS, stream, gout, r, list, count,
                          gin, *a, *g);
        st = dk__gpu_launched(op);
    }
    dk_device_free(grad_input->device, scratch); /* stream-ordered: after the kernels above */
    return st;
}

static dk_status DK_SFN(dk__psa_gpu_forward)(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                             const dk__rp_gpu_args *a, void *stream)
{
    DK_GPU_LAUNCH(DK_SFN(dk__psa_gpu_forward_kernel), dk_gpu_blocks(a->K * a->C * a->PH * a->PW), DK_GPU_THREADS,
                  stream, (const DK_S *)dk_tensor_data(input), (const DK_S *)dk_tensor_data(rois),
                  (DK_S *)dk_tensor_data(output), *a);
    return dk__gpu_launched("ps_roi_align_forward");
}

static dk_status DK_SFN(dk__psa_gpu_backward)(const dk_tensor *grad_output, const dk_tensor *rois,
                                              dk_tensor *grad_input, const dk__rp_gpu_args *a,
                                              const dk__rp_gpu_tiles *tiles, void *stream)
{
    return DK_SFN(dk__rp_gpu_ps_backward_by)(DK_SFN(dk__psa_gpu_backward_atomic_kernel), true, grad_output, rois,
                                             grad_input, a, tiles, stream);
}

#endif
