/*
 * roi_align_gpu_tmpl.cuh — roi_align's GPU kernels and their per-dtype launchers, a template
 * (Note [Templates in C] in kernels/dk_template.h) instantiated for every float storage type by
 * roi_align_gpu.cu: DK_S is the storage type, DK_T the compute type (float for float16 and
 * bfloat16: float accumulation), and the argmax tensors hold DK_T (ops/roi_align.h: float32 for
 * 16-bit inputs). Every kernel is a grid-stride loop over 64-bit indices (Note [Grid-stride
 * loops] in csrc/gpu/dk_gpu.h).
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* RoI k's batch index and geometry; false for a RoI to treat as absent (Note [RoIs the GPU
 * cannot check]). */
__device__ DK_INLINE bool DK_SFN(dk__ra_gpu_roi)(const DK_S *rois, const dk__ra_gpu_args *a, int64_t k, int64_t *n,
                                                 DK_TFN(dk_roi_align_axis) *ay, DK_TFN(dk_roi_align_axis) *ax)
{
    const DK_S *r = rois + k * a->roi_s[0];
    const DK_T b = DK_LOAD(r[0]);
    if (!(b >= (DK_T)0 && b < (DK_T)a->N)) return false;
    *n = (int64_t)b;
    DK_TFN(dk_roi_align_roi_init)(DK_LOAD(r[a->roi_s[1]]), DK_LOAD(r[2 * a->roi_s[1]]), DK_LOAD(r[3 * a->roi_s[1]]),
                                  DK_LOAD(r[4 * a->roi_s[1]]), (DK_T)a->spatial_scale, a->PH, a->PW,
                                  a->sampling_ratio, a->aligned != 0, a->H, a->W, ay, ax);
    return true;
}

/* Forward: one thread per output element (k, c, ph, pw). */
__global__ void DK_SFN(dk__ra_gpu_forward_kernel)(const DK_S *__restrict__ input, const DK_S *__restrict__ rois,
                                                  DK_S *__restrict__ output, DK_T *__restrict__ amy,
                                                  DK_T *__restrict__ amx, dk__ra_gpu_args a)
{
    const int64_t total = a.K * a.C * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t pw = i % a.PW, ph = i / a.PW % a.PH, c = i / (a.PW * a.PH) % a.C, k = i / (a.PW * a.PH * a.C);
        const int64_t o = k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3];
        int64_t n;
        DK_TFN(dk_roi_align_axis) ay, ax;
        DK_T v = (DK_T)0, my = (DK_T)-1, mx = (DK_T)-1;
        if (DK_SFN(dk__ra_gpu_roi)(rois, &a, k, &n, &ay, &ax)) {
            const DK_S *plane = input + n * a.img_s[0] + c * a.img_s[1];
            v = a.max_mode ? DK_SFN(dk_roi_align_forward_max)(plane, a.img_s[2], a.img_s[3], a.H, a.W, &ay, &ax, ph,
                                                              pw, &my, &mx)
                           : DK_SFN(dk_roi_align_forward_avg)(plane, a.img_s[2], a.img_s[3], a.H, a.W, &ay, &ax, ph,
                                                              pw);
        }
        output[o] = DK_STORE(v);
        if (a.max_mode) {
            amy[k * a.amy_s[0] + c * a.amy_s[1] + ph * a.amy_s[2] + pw * a.amy_s[3]] = my;
            amx[k * a.amx_s[0] + c * a.amx_s[1] + ph * a.amx_s[2] + pw * a.amx_s[3]] = mx;
        }
    }
}

/* Atomic backward: one thread per grad_output element scatters g times each tap's weight (avg:
 * divided by the sample count) into acc, the compute-type accumulator of grad_input with
 * strides acc_s (grad_input itself for float32 and float64; a float scratch for 16-bit storage,
 * which has no fast atomics of its own). */
__global__ void DK_SFN(dk__ra_gpu_backward_atomic_kernel)(const DK_S *__restrict__ gout,
                                                          const DK_S *__restrict__ rois,
                                                          const DK_T *__restrict__ amy,
                                                          const DK_T *__restrict__ amx, DK_T *acc,
                                                          dk__ra_gpu_args a, int64_t acc_s0, int64_t acc_s1,
                                                          int64_t acc_s2, int64_t acc_s3)
{
    const int64_t total = a.K * a.C * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t pw = i % a.PW, ph = i / a.PW % a.PH, c = i / (a.PW * a.PH) % a.C, k = i / (a.PW * a.PH * a.C);
        int64_t n;
        DK_TFN(dk_roi_align_axis) ay, ax;
        if (!DK_SFN(dk__ra_gpu_roi)(rois, &a, k, &n, &ay, &ax)) continue;
        const DK_T g = DK_LOAD(gout[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]);
        DK_T *plane = acc + n * acc_s0 + c * acc_s1;
        DK_TFN(dk_roi_align_bilinear) b;
        if (a.max_mode) {
            const DK_T y = amy[k * a.amy_s[0] + c * a.amy_s[1] + ph * a.amy_s[2] + pw * a.amy_s[3]];
            const DK_T x = amx[k * a.amx_s[0] + c * a.amx_s[1] + ph * a.amx_s[2] + pw * a.amx_s[3]];
            if (y == (DK_T)-1 || !DK_TFN(dk_roi_align_bilinear_init)(y, x, a.H, a.W, &b)) continue;
            atomicAdd(plane + b.y_low * acc_s2 + b.x_low * acc_s3, g * b.w1);
            atomicAdd(plane + b.y_low * acc_s2 + b.x_high * acc_s3, g * b.w2);
            atomicAdd(plane + b.y_high * acc_s2 + b.x_low * acc_s3, g * b.w3);
            atomicAdd(plane + b.y_high * acc_s2 + b.x_high * acc_s3, g * b.w4);
            continue;
        }
        const DK_T gc = g / DK_TFN(dk_roi_align_count)(&ay, &ax);
        for (int64_t iy = 0; iy < ay.grid; ++iy) {
            const DK_T y = DK_TFN(dk_roi_align_axis_sample)(&ay, ph, iy);
            for (int64_t ix = 0; ix < ax.grid; ++ix) {
                const DK_T x = DK_TFN(dk_roi_align_axis_sample)(&ax, pw, ix);
                if (!DK_TFN(dk_roi_align_bilinear_init)(y, x, a.H, a.W, &b)) continue;
                atomicAdd(plane + b.y_low * acc_s2 + b.x_low * acc_s3, gc * b.w1);
                atomicAdd(plane + b.y_low * acc_s2 + b.x_high * acc_s3, gc * b.w2);
                atomicAdd(plane + b.y_high * acc_s2 + b.x_low * acc_s3, gc * b.w3);
                atomicAdd(plane + b.y_high * acc_s2 + b.x_high * acc_s3, gc * b.w4);
            }
        }
    }
}

/* grad_input = acc (16-bit storage: the float accumulator, contiguous NCHW, rounded once). */
__global__ void DK_SFN(dk__ra_gpu_store_kernel)(const DK_T *__restrict__ acc, DK_S *__restrict__ gin,
                                                dk__ra_gpu_args a)
{
    const int64_t total = a.N * a.C * a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t x = i % a.W, y = i / a.W % a.H, c = i / (a.W * a.H) % a.C, n = i / (a.W * a.H * a.C);
        gin[n * a.img_s[0] + c * a.img_s[1] + y * a.img_s[2] + x * a.img_s[3]] = DK_STORE(acc[i]);
    }
}

/* grad_input = 0, any strides (float32 and float64 before the atomic backward). */
__global__ void DK_SFN(dk__ra_gpu_zero_kernel)(DK_S *__restrict__ gin, dk__ra_gpu_args a)
{
    const int64_t total = a.N * a.C * a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t x = i % a.W, y = i / a.W % a.H, c = i / (a.W * a.H) % a.C, n = i / (a.W * a.H * a.C);
        gin[n * a.img_s[0] + c * a.img_s[1] + y * a.img_s[2] + x * a.img_s[3]] = DK_STORE((DK_T)0);
    }
}

/* The sum of the tap weights of coordinate v that land on pixel p (0, 1 or 2 taps: the edge
 * clamp makes both taps the same pixel, with weights 1 and 0). */
__device__ DK_INLINE DK_T DK_SFN(dk__ra_gpu_tap_weight)(const DK_TFN(dk_roi_align_taps) *t, int64_t p)
{
    return (t->lo == p ? t->wlo : (DK_T)0) + (t->hi == p ? t->whi : (DK_T)0);
}

/* Deterministic backward (Note [Deterministic backward on a GPU]): one thread per grad_input
 * element (n, c, y, x), RoIs in index order, bins and samples in order, one store. A sample at
 * coordinate v touches pixels floor(clamp(v)) and the next, so a RoI whose samples along an axis
 * all lie more than 2 pixels away cannot touch the element; the test is conservative (the
 * exact taps decide), it only skips work. */
__global__ void DK_SFN(dk__ra_gpu_backward_gather_kernel)(const DK_S *__restrict__ gout,
                                                          const DK_S *__restrict__ rois,
                                                          const DK_T *__restrict__ amy,
                                                          const DK_T *__restrict__ amx, DK_S *__restrict__ gin,
                                                          dk__ra_gpu_args a)
{
    const int64_t total = a.N * a.C * a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t x = i % a.W, y = i / a.W % a.H, c = i / (a.W * a.H) % a.C, n = i / (a.W * a.H * a.C);
        DK_T sum = (DK_T)0;
        for (int64_t k = 0; k < a.K; ++k) {
            int64_t rn;
            DK_TFN(dk_roi_align_axis) ay, ax;
            if (!DK_SFN(dk__ra_gpu_roi)(rois, &a, k, &rn, &ay, &ax) || rn != n) continue;
            if (ay.grid <= 0 || ax.grid <= 0) continue;
            /* the extent of the RoI's samples along each axis (NaN compares false: not skipped) */
            const DK_T y0 = DK_TFN(dk_roi_align_axis_sample)(&ay, 0, 0);
            const DK_T y1 = DK_TFN(dk_roi_align_axis_sample)(&ay, a.PH - 1, ay.grid - 1);
            const DK_T x0 = DK_TFN(dk_roi_align_axis_sample)(&ax, 0, 0);
            const DK_T x1 = DK_TFN(dk_roi_align_axis_sample)(&ax, a.PW - 1, ax.grid - 1);
            const DK_T ylo = y0 < y1 ? y0 : y1, yhi = y0 < y1 ? y1 : y0;
            const DK_T xlo = x0 < x1 ? x0 : x1, xhi = x0 < x1 ? x1 : x0;
            if ((DK_T)y > yhi + (DK_T)2 || (DK_T)y < ylo - (DK_T)2 || (DK_T)x > xhi + (DK_T)2 ||
                (DK_T)x < xlo - (DK_T)2)
                continue;
            const DK_S *g = gout + k * a.bins_s[0] + c * a.bins_s[1];
            if (a.max_mode) {
                const DK_T *my = amy + k * a.amy_s[0] + c * a.amy_s[1];
                const DK_T *mx = amx + k * a.amx_s[0] + c * a.amx_s[1];
                for (int64_t ph = 0; ph < a.PH; ++ph)
                    for (int64_t pw = 0; pw < a.PW; ++pw) {
                        const DK_T sy = my[ph * a.amy_s[2] + pw * a.amy_s[3]];
                        const DK_T sx = mx[ph * a.amx_s[2] + pw * a.amx_s[3]];
                        DK_TFN(dk_roi_align_bilinear) b;
                        if (sy == (DK_T)-1 || !DK_TFN(dk_roi_align_bilinear_init)(sy, sx, a.H, a.W, &b)) continue;
                        const DK_T gv = DK_LOAD(g[ph * a.bins_s[2] + pw * a.bins_s[3]]);
                        if (b.y_low == y && b.x_low == x) sum += gv * b.w1;
                        if (b.y_low == y && b.x_high == x) sum += gv * b.w2;
                        if (b.y_high == y && b.x_low == x) sum += gv * b.w3;
                        if (b.y_high == y && b.x_high == x) sum += gv * b.w4;
                    }
                continue;
            }
            const DK_T count = DK_TFN(dk_roi_align_count)(&ay, &ax);
            for (int64_t ph = 0; ph < a.PH; ++ph)
                for (int64_t iy = 0; iy < ay.grid; ++iy) {
                    DK_TFN(dk_roi_align_taps) ty;
                    if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(&ay, ph, iy), a.H, &ty))
                        continue;
                    if (ty.lo != y && ty.hi != y) continue;
                    for (int64_t pw = 0; pw < a.PW; ++pw) {
                        const DK_T gc = DK_LOAD(g[ph * a.bins_s[2] + pw * a.bins_s[3]]) / count;
                        for (int64_t ix = 0; ix < ax.grid; ++ix) {
                            DK_TFN(dk_roi_align_taps) tx;
                            if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(&ax, pw, ix), a.W,
                                                                &tx))
                                continue;
                            if (tx.lo != x && tx.hi != x) continue;
                            /* the four taps' weights as dk_roi_align_bilinear_init forms them */
                            if (ty.lo == y && tx.lo == x) sum += gc * (ty.wlo * tx.wlo);
                            if (ty.lo == y && tx.hi == x) sum += gc * (ty.wlo * tx.whi);
                            if (ty.hi == y && tx.lo == x) sum += gc * (ty.whi * tx.wlo);
                            if (ty.hi == y && tx.hi == x) sum += gc * (ty.whi * tx.whi);
                        }
                    }
                }
        }
        gin[n * a.img_s[0] + c * a.img_s[1] + y * a.img_s[2] + x * a.img_s[3]] = DK_STORE(sum);
    }
}

/* ---- launchers (host) -------------------------------------------------------------------- */

static dk_status DK_SFN(dk__ra_gpu_forward)(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                            dk_tensor *argmax_y, dk_tensor *argmax_x, const dk__ra_gpu_args *a,
                                            void *stream)
{
    const int64_t total = a->K * a->C * a->PH * a->PW;
    DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_forward_kernel), dk_gpu_blocks(total), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(input), (const DK_S *)dk_tensor_data(rois),
                  (DK_S *)dk_tensor_data(output), argmax_y ? (DK_T *)dk_tensor_data(argmax_y) : (DK_T *)NULL,
                  argmax_x ? (DK_T *)dk_tensor_data(argmax_x) : (DK_T *)NULL, *a);
    return dk__gpu_launched("roi_align_forward");
}

static dk_status DK_SFN(dk__ra_gpu_backward)(const dk_tensor *grad_output, const dk_tensor *rois,
                                             const dk_tensor *argmax_y, const dk_tensor *argmax_x,
                                             dk_tensor *grad_input, const dk__ra_gpu_args *a, bool deterministic,
                                             void *stream)
{
    const DK_S *gout = (const DK_S *)dk_tensor_data(grad_output);
    const DK_S *r = (const DK_S *)dk_tensor_data(rois);
    const DK_T *my = argmax_y ? (const DK_T *)dk_tensor_data(argmax_y) : (const DK_T *)NULL;
    const DK_T *mx = argmax_x ? (const DK_T *)dk_tensor_data(argmax_x) : (const DK_T *)NULL;
    DK_S *gin = (DK_S *)dk_tensor_data(grad_input);
    const int64_t img = a->N * a->C * a->H * a->W, bins = a->K * a->C * a->PH * a->PW;
    if (deterministic) {
        DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_backward_gather_kernel), dk_gpu_blocks(img), DK_GPU_THREADS, stream, gout, r,
                      my, mx, gin, *a);
        return dk__gpu_launched("roi_align_backward");
    }
#if DK_S_IS_T
    DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_zero_kernel), dk_gpu_blocks(img), DK_GPU_THREADS, stream, gin, *a);
    dk_status st = dk__gpu_launched("roi_align_backward");
    if (st) return st;
    if (bins == 0) return DK_OK;
    DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_backward_atomic_kernel), dk_gpu_blocks(bins), DK_GPU_THREADS, stream, gout, r, my,
                  mx, gin, *a, a->img_s[0], a->img_s[1], a->img_s[2], a->img_s[3]);
    return dk__gpu_launched("roi_align_backward");
#else
    /* 16-bit storage: accumulate in a float scratch (contiguous NCHW), round once at the end. */
    size_t bytes;
    if (__builtin_mul_overflow((size_t)img, sizeof(DK_T), &bytes))
        return dk_error(DK_EINVAL, "roi_align_backward: grad_input too large (%lld elements)", (long long)img);
    void *accv = NULL;
    dk_status st = dk_device_alloc(grad_input->device, bytes, &accv);
    if (st) return st;
    DK_T *acc = (DK_T *)accv;
    if (dkgMemsetAsync(acc, 0, bytes, (dkgStream_t)stream) != dkgSuccess) st = dk__gpu_launched("roi_align_backward");
    if (!st && bins > 0) {
        DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_backward_atomic_kernel), dk_gpu_blocks(bins), DK_GPU_THREADS, stream, gout, r,
                      my, mx, acc, *a, a->C * a->H * a->W, a->H * a->W, a->W, (int64_t)1);
        st = dk__gpu_launched("roi_align_backward");
    }
    if (!st) {
        DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_store_kernel), dk_gpu_blocks(img), DK_GPU_THREADS, stream, acc, gin, *a);
        st = dk__gpu_launched("roi_align_backward");
    }
    dk_device_free(grad_input->device, accv); /* stream-ordered: after the kernels above */
    return st;
#endif
}

#endif
