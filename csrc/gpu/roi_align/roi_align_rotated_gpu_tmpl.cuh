/*
 * roi_align_rotated_gpu_tmpl.cuh — roi_align_rotated's GPU kernels and their per-dtype launchers,
 * a template (Note [Templates in C] in kernels/dk_template.h) instantiated for every float
 * storage type by roi_align_rotated_gpu.cu: DK_S the storage type, DK_T the compute type. Every
 * kernel is a grid-stride loop over 64-bit indices (Note [Grid-stride loops] in dk_gpu.h).
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* RoI k's image (-1: not one of the N images; ops/roi_align.c refuses those where it can read
 * the RoIs, this keeps a kernel in bounds regardless) and geometry. */
__device__ DK_INLINE int64_t DK_SFN(dk__rar_gpu_roi)(const DK_S *rois, const dk__rar_gpu_args *a, int64_t k,
                                                     DK_TFN(dk_roi_align_rotated) *r)
{
    const DK_S *p = rois + k * a->roi_s[0];
    const int64_t s = a->roi_s[1];
    DK_TFN(dk_roi_align_rotated_init)(DK_LOAD(p[s]), DK_LOAD(p[2 * s]), DK_LOAD(p[3 * s]), DK_LOAD(p[4 * s]),
                                      DK_LOAD(p[5 * s]), (DK_T)a->spatial_scale, a->PH, a->PW, a->sampling_ratio,
                                      a->aligned != 0, a->clockwise != 0, a->H, a->W, r);
    const DK_T b = DK_LOAD(p[0]);
    return b >= (DK_T)0 && b < (DK_T)a->N && b == (DK_T)(int64_t)b ? (int64_t)b : -1;
}

__global__ void DK_SFN(dk__rar_gpu_forward_kernel)(const DK_S *__restrict__ input, const DK_S *__restrict__ rois,
                                                   DK_S *__restrict__ output, dk__rar_gpu_args a)
{
    const int64_t total = a.K * a.C * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t pw = i % a.PW, ph = i / a.PW % a.PH, c = i / (a.PW * a.PH) % a.C, k = i / (a.PW * a.PH * a.C);
        DK_TFN(dk_roi_align_rotated) r;
        const int64_t n = DK_SFN(dk__rar_gpu_roi)(rois, &a, k, &r);
        DK_T v = (DK_T)0;
        if (n >= 0)
            v = DK_SFN(dk_roi_align_rotated_forward)(input + n * a.img_s[0] + c * a.img_s[1], a.img_s[2], a.img_s[3],
                                                     a.H, a.W, &r, ph, pw);
        output[k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]] = DK_STORE(v);
    }
}

/* A RoI as the gather reads it (Note [Deterministic rotated backward on a GPU]). */
typedef struct {
    int64_t n; /* -1: absent, or no samples */
    DK_TFN(dk_roi_align_rotated) r;
} DK_SFN(dk__rar_gpu_entry);

__global__ void DK_SFN(dk__rar_gpu_table_kernel)(const DK_S *__restrict__ rois, dk__rar_gpu_args a,
                                                 DK_SFN(dk__rar_gpu_entry) *__restrict__ table)
{
    for (int64_t k = DK_GPU_FIRST(); k < a.K; k += DK_GPU_STRIDE()) {
        DK_SFN(dk__rar_gpu_entry) e;
        e.n = DK_SFN(dk__rar_gpu_roi)(rois, &a, k, &e.r);
        if (e.r.ay.grid <= 0 || e.r.ax.grid <= 0) e.n = -1;
        table[k] = e;
    }
}

/* One thread per grad_input element (n, c, y, x): its terms in the CPU's order, one store. */
__global__ void DK_SFN(dk__rar_gpu_backward_kernel)(const DK_S *__restrict__ gout,
                                                    const DK_SFN(dk__rar_gpu_entry) *__restrict__ table,
                                                    DK_S *__restrict__ gin, dk__rar_gpu_args a)
{
    const int64_t total = a.N * a.C * a.H * a.W;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        const int64_t x = i % a.W, y = i / a.W % a.H, c = i / (a.W * a.H) % a.C, n = i / (a.W * a.H * a.C);
        DK_T sum = (DK_T)0;
        for (int64_t k = 0; k < a.K; ++k) {
            if (table[k].n != n) continue;
            const DK_TFN(dk_roi_align_rotated) r = table[k].r;
            const int64_t gh = r.ay.grid, gw = r.ax.grid;
            int64_t jy0, jy1, jx0, jx1;
            DK_TFN(dk_roi_align_rotated_window)(&r, a.PH, a.PW, y, x, &jy0, &jy1, &jx0, &jx1);
            if (jy0 > jy1 || jx0 > jx1) continue;
            const DK_T count = DK_TFN(dk_roi_align_count)(&r.ay, &r.ax);
            const DK_S *gk = gout + k * a.bins_s[0] + c * a.bins_s[1];
            for (int64_t ph = jy0 / gh; ph <= jy1 / gh; ++ph)
                for (int64_t pw = jx0 / gw; pw <= jx1 / gw; ++pw) {
                    const DK_T gc = DK_LOAD(gk[ph * a.bins_s[2] + pw * a.bins_s[3]]) / count;
                    const int64_t iy0 = jy0 > ph * gh ? jy0 - ph * gh : 0,
                                  iy1 = jy1 < ph * gh + gh ? jy1 - ph * gh : gh - 1;
                    const int64_t ix0 = jx0 > pw * gw ? jx0 - pw * gw : 0,
                                  ix1 = jx1 < pw * gw + gw ? jx1 - pw * gw : gw - 1;
                    for (int64_t iy = iy0; iy <= iy1; ++iy)
                        for (int64_t ix = ix0; ix <= ix1; ++ix) {
                            DK_T sy, sx;
                            DK_TFN(dk_roi_align_rotated_sample)(&r, ph, pw, iy, ix, &sy, &sx);
                            DK_TFN(dk_roi_align_bilinear) b;
                            if (!DK_TFN(dk_roi_align_bilinear_init)(sy, sx, a.H, a.W, &b)) continue;
                            if (b.y_low == y && b.x_low == x) sum += gc * b.w1;
                            if (b.y_low == y && b.x_high == x) sum += gc * b.w2;
                            if (b.y_high == y && b.x_low == x) sum += gc * b.w3;
                            if (b.y_high == y && b.x_high == x) sum += gc * b.w4;
                        }
                }
        }
        gin[n * a.img_s[0] + c * a.img_s[1] + y * a.img_s[2] + x * a.img_s[3]] = DK_STORE(sum);
    }
}

/* ---- launchers (host) -------------------------------------------------------------------- */

static dk_status DK_SFN(dk__rar_gpu_forward)(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                             const dk__rar_gpu_args *a, void *stream)
{
    const int64_t total = a->K * a->C * a->PH * a->PW;
    DK_GPU_LAUNCH(DK_SFN(dk__rar_gpu_forward_kernel), dk_gpu_blocks(total), DK_GPU_THREADS, stream,
                  (const DK_S *)dk_tensor_data(input), (const DK_S *)dk_tensor_data(rois),
                  (DK_S *)dk_tensor_data(output), *a);
    return dk__gpu_launched("roi_align_rotated_forward");
}

static dk_status DK_SFN(dk__rar_gpu_backward)(const dk_tensor *grad_output, const dk_tensor *rois,
                                              dk_tensor *grad_input, const dk__rar_gpu_args *a, void *stream)
{
    void *scratch = NULL;
    const size_t bytes = (size_t)(a->K > 0 ? a->K : 1) * sizeof(DK_SFN(dk__rar_gpu_entry));
    dk_status st = dk_device_alloc(grad_input->device, bytes, &scratch);
    if (st) return st;
    DK_SFN(dk__rar_gpu_entry) *table = (DK_SFN(dk__rar_gpu_entry) *)scratch;
    if (a->K > 0) {
        DK_GPU_LAUNCH(DK_SFN(dk__rar_gpu_table_kernel), dk_gpu_blocks(a->K), DK_GPU_THREADS, stream,
                      (const DK_S *)dk_tensor_data(rois), *a, table);
        st = dk__gpu_launched("roi_align_rotated_backward");
    }
    if (!st) {
        DK_GPU_LAUNCH(DK_SFN(dk__rar_gpu_backward_kernel), dk_gpu_blocks(a->N * a->C * a->H * a->W), DK_GPU_THREADS,
                      stream, (const DK_S *)dk_tensor_data(grad_output), table, (DK_S *)dk_tensor_data(grad_input), *a);
        st = dk__gpu_launched("roi_align_rotated_backward");
    }
    dk_device_free(grad_input->device, scratch); /* stream-ordered: after the kernels above */
    return st;
}

#endif
