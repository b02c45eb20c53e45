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
                                  DK_LOAD(r[4 * a->roi_s[1]]), (DK_T)a->spatial_scale, a->PH, a->PW, a->sampling_ratio,
                                  a->aligned != 0, a->H, a->W, ay, ax);
    return true;
}

/* Forward: one thread per output element (k, c, ph, pw), in the order of Note [The GPU order of
 * roi_align's bins]. */
template <bool MAX> /* max pooling: a kernel of its own, so that avg's registers are avg's alone */
__global__ void DK_SFN(dk__ra_gpu_forward_kernel)(const DK_S *__restrict__ input, const DK_S *__restrict__ rois,
                                                  DK_S *__restrict__ output, DK_T *__restrict__ amy,
                                                  DK_T *__restrict__ amx, dk__ra_gpu_args a)
{
    const int64_t total = a.K * a.C * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        int64_t k, c, ph, pw, n;
        dk_gpu_bin_of(a.narrow, a.channel_major, a.K, a.C, a.PH, a.PW, i, &k, &c, &ph, &pw);
        const int64_t o = k * a.bins_s[0] + c * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3];
        DK_TFN(dk_roi_align_axis) ay, ax;
        DK_T v = (DK_T)0, my = (DK_T)-1, mx = (DK_T)-1;
        if (DK_SFN(dk__ra_gpu_roi)(rois, &a, k, &n, &ay, &ax)) {
            const DK_S *plane = input + n * a.img_s[0] + c * a.img_s[1];
            v = MAX ? DK_SFN(dk_roi_align_forward_max)(plane, a.img_s[2], a.img_s[3], a.H, a.W, &ay, &ax, ph, pw, &my,
                                                       &mx)
                    : DK_SFN(dk_roi_align_forward_avg)(plane, a.img_s[2], a.img_s[3], a.H, a.W, &ay, &ax, ph, pw);
        }
        output[o] = DK_STORE(v);
        if (MAX) {
            amy[k * a.amy_s[0] + c * a.amy_s[1] + ph * a.amy_s[2] + pw * a.amy_s[3]] = my;
            amx[k * a.amx_s[0] + c * a.amx_s[1] + ph * a.amx_s[2] + pw * a.amx_s[3]] = mx;
        }
    }
}

/* Atomic backward: one thread per grad_output element scatters g times each tap's weight (avg:
 * divided by the sample count) into acc, the compute-type accumulator of grad_input with
 * strides acc_s (grad_input itself for float32 and float64; a float scratch for 16-bit storage,
 * which has no fast atomics of its own). */
__global__ void DK_SFN(dk__ra_gpu_backward_atomic_kernel)(const DK_S *__restrict__ gout, const DK_S *__restrict__ rois,
                                                          const DK_T *__restrict__ amy, const DK_T *__restrict__ amx,
                                                          DK_T *acc, dk__ra_gpu_args a, int64_t acc_s0, int64_t acc_s1,
                                                          int64_t acc_s2, int64_t acc_s3)
{
    const int64_t total = a.K * a.C * a.PH * a.PW;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        int64_t k, c, ph, pw, n;
        dk_gpu_bin_of(a.narrow, a.channel_major, a.K, a.C, a.PH, a.PW, i, &k, &c, &ph, &pw);
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
__global__ void DK_SFN(dk__ra_gpu_store_kernel)(const DK_T *__restrict__ acc, DK_S *__restrict__ gin, dk__ra_gpu_args a)
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

/* One RoI as the deterministic backward reads it (Note [Deterministic backward on a GPU]): its
 * image (-1: absent, or no samples), both axes, and the pixels its taps can reach, [y0, y1] x
 * [x0, x1]. */
typedef struct {
    int64_t n;
    DK_TFN(dk_roi_align_axis) ay, ax;
    int64_t y0, y1, x0, x1;
} DK_SFN(dk__ra_gpu_roi_entry);

/* The pixels, along one axis, that the taps of samples from c0 to c1 (the first and the last
 * sample, in either order) can reach: floor(min) - 2 .. ceil(max) + 2, clamped; the whole axis
 * when they are not both finite. Conservative: the taps themselves decide. */
__device__ DK_INLINE void DK_SFN(dk__ra_gpu_reach)(DK_T c0, DK_T c1, int64_t size, int64_t *lo, int64_t *hi)
{
    const DK_T a = c0 < c1 ? c0 : c1, b = c0 < c1 ? c1 : c0;
    *lo = 0;
    *hi = size - 1;
    if (!(a >= (DK_T)-4 && a <= (DK_T)size + 4)) { /* beyond the edges, or NaN */
        if (a > (DK_T)size + 4) *lo = size;        /* wholly past the far edge: no pixel */
    } else {
        *lo = (int64_t)floor((double)a) - 2 < 0 ? 0 : (int64_t)floor((double)a) - 2;
    }
    if (b >= (DK_T)-4 && b <= (DK_T)size + 4) {
        const int64_t h = (int64_t)ceil((double)b) + 2;
        *hi = h > size - 1 ? size - 1 : h;
    } else if (b < (DK_T)-4) {
        *hi = -1; /* wholly before the near edge: no pixel */
    }
}

__global__ void DK_SFN(dk__ra_gpu_roi_table_kernel)(const DK_S *__restrict__ rois, dk__ra_gpu_args a,
                                                    DK_SFN(dk__ra_gpu_roi_entry) *__restrict__ table)
{
    for (int64_t k = DK_GPU_FIRST(); k < a.K; k += DK_GPU_STRIDE()) {
        DK_SFN(dk__ra_gpu_roi_entry) e;
        if (!DK_SFN(dk__ra_gpu_roi)(rois, &a, k, &e.n, &e.ay, &e.ax) || e.ay.grid <= 0 || e.ax.grid <= 0) {
            e.n = -1;
            e.y0 = e.x0 = 0;
            e.y1 = e.x1 = -1;
        } else {
            DK_SFN(dk__ra_gpu_reach)(DK_TFN(dk_roi_align_axis_sample)(&e.ay, 0, 0),
                                     DK_TFN(dk_roi_align_axis_sample)(&e.ay, a.PH - 1, e.ay.grid - 1), a.H, &e.y0,
                                     &e.y1);
            DK_SFN(dk__ra_gpu_reach)(DK_TFN(dk_roi_align_axis_sample)(&e.ax, 0, 0),
                                     DK_TFN(dk_roi_align_axis_sample)(&e.ax, a.PW - 1, e.ax.grid - 1), a.W, &e.x0,
                                     &e.x1);
        }
        table[k] = e;
    }
}

/* Deterministic backward (Note [Deterministic backward on a GPU]): one thread per pixel (y, x)
 * of an image n and DK__RA_GPU_CHANNELS channels from c0; the RoIs of its tile's list in index
 * order, within a RoI its bins and samples in order (only those whose window reaches the pixel:
 * dk_roi_align_axis_window), each channel's sum in a register, one store per element. The terms
 * and their order are those of a loop over every RoI and every sample. */
template <bool MAX> /* max pooling: a kernel of its own, so that avg's registers are avg's alone */
__global__ void DK_SFN(dk__ra_gpu_backward_gather_kernel)(const DK_S *__restrict__ gout,
                                                          const DK_SFN(dk__ra_gpu_roi_entry) *__restrict__ table,
                                                          const int32_t *__restrict__ lists,
                                                          const int32_t *__restrict__ counts,
                                                          const DK_T *__restrict__ amy, const DK_T *__restrict__ amx,
                                                          DK_S *__restrict__ gin, dk__ra_gpu_args a, dk__ra_gpu_tiles g)
{
    const int64_t area = g.tile * g.tile, chunks = (a.C + DK__RA_GPU_CHANNELS - 1) / DK__RA_GPU_CHANNELS;
    const int64_t total = a.N * chunks * g.ty * g.tx * area;
    for (int64_t i = DK_GPU_FIRST(); i < total; i += DK_GPU_STRIDE()) {
        /* a block's threads share a tile (area is a multiple of the block size, or the tile is
         * smaller than a block), so they walk the same list */
        const int64_t px = i % area, t_img = i / area % (g.ty * g.tx), cc = i / (area * g.ty * g.tx) % chunks;
        const int64_t n = i / (area * g.ty * g.tx * chunks);
        const int64_t y = t_img / g.tx * g.tile + px / g.tile, x = t_img % g.tx * g.tile + px % g.tile;
        if (y >= a.H || x >= a.W) continue;
        const int64_t c0 = cc * DK__RA_GPU_CHANNELS;
        const int nc = (int)(a.C - c0 < DK__RA_GPU_CHANNELS ? a.C - c0 : DK__RA_GPU_CHANNELS);
        DK_T sum[DK__RA_GPU_CHANNELS];
        DK_GPU_UNROLL
        for (int j = 0; j < DK__RA_GPU_CHANNELS; ++j) sum[j] = (DK_T)0;
        const int64_t t = n * g.ty * g.tx + t_img;
        const int32_t *list = lists + t * a.K;
        for (int32_t li = 0; li < counts[t]; ++li) {
            const int64_t k = list[li];
            const DK_SFN(dk__ra_gpu_roi_entry) *e = &table[k];
            if (y < e->y0 || y > e->y1 || x < e->x0 || x > e->x1) continue;
            const DK_TFN(dk_roi_align_axis) ay = e->ay, ax = e->ax;
            int64_t jy0, jy1, jx0, jx1;
            if (g.window) {
                DK_TFN(dk_roi_align_axis_window)(&ay, a.PH, y, &jy0, &jy1);
                DK_TFN(dk_roi_align_axis_window)(&ax, a.PW, x, &jx0, &jx1);
            } else {
                jy0 = jx0 = 0;
                jy1 = a.PH * ay.grid - 1;
                jx1 = a.PW * ax.grid - 1;
            }
            if (jy0 > jy1 || jx0 > jx1) continue;
            const DK_S *gk = gout + k * a.bins_s[0] + c0 * a.bins_s[1];
            if (MAX) {
                /* the argmax of bin (ph, pw) is one of its samples: the bins of the windows; each
                 * channel has its own argmax, and its sum takes its terms in (ph, pw) order */
                const int64_t ph1 = jy1 / ay.grid, pw0 = jx0 / ax.grid, pw1 = jx1 / ax.grid;
                for (int64_t ph = jy0 / ay.grid; ph <= ph1; ++ph)
                    for (int64_t pw = pw0; pw <= pw1; ++pw) {
                        DK_GPU_UNROLL
                        for (int j = 0; j < DK__RA_GPU_CHANNELS; ++j) {
                            if (j >= nc) continue;
                            const int64_t c = c0 + j;
                            const DK_T sy = amy[k * a.amy_s[0] + c * a.amy_s[1] + ph * a.amy_s[2] + pw * a.amy_s[3]];
                            const DK_T sx = amx[k * a.amx_s[0] + c * a.amx_s[1] + ph * a.amx_s[2] + pw * a.amx_s[3]];
                            DK_TFN(dk_roi_align_bilinear) b;
                            if (sy == (DK_T)-1 || !DK_TFN(dk_roi_align_bilinear_init)(sy, sx, a.H, a.W, &b)) continue;
                            const DK_T gv = DK_LOAD(gk[j * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]);
                            if (b.y_low == y && b.x_low == x) sum[j] += gv * b.w1;
                            if (b.y_low == y && b.x_high == x) sum[j] += gv * b.w2;
                            if (b.y_high == y && b.x_low == x) sum[j] += gv * b.w3;
                            if (b.y_high == y && b.x_high == x) sum[j] += gv * b.w4;
                        }
                    }
                continue;
            }
            const DK_T count = DK_TFN(dk_roi_align_count)(&ay, &ax);
            for (int64_t jy = jy0; jy <= jy1; ++jy) {
                const int64_t ph = jy / ay.grid;
                DK_TFN(dk_roi_align_taps) ty;
                if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(&ay, ph, jy % ay.grid), a.H, &ty))
                    continue;
                if (ty.lo != y && ty.hi != y) continue;
                for (int64_t jx = jx0; jx <= jx1; ++jx) {
                    const int64_t pw = jx / ax.grid;
                    DK_TFN(dk_roi_align_taps) tx;
                    if (!DK_TFN(dk_roi_align_taps_init)(DK_TFN(dk_roi_align_axis_sample)(&ax, pw, jx % ax.grid), a.W,
                                                        &tx))
                        continue;
                    if (tx.lo != x && tx.hi != x) continue;
                    DK_GPU_UNROLL
                    for (int j = 0; j < DK__RA_GPU_CHANNELS; ++j) {
                        if (j >= nc) continue;
                        /* the four taps' weights as dk_roi_align_bilinear_init forms them */
                        const DK_T gc = DK_LOAD(gk[j * a.bins_s[1] + ph * a.bins_s[2] + pw * a.bins_s[3]]) / count;
                        if (ty.lo == y && tx.lo == x) sum[j] += gc * (ty.wlo * tx.wlo);
                        if (ty.lo == y && tx.hi == x) sum[j] += gc * (ty.wlo * tx.whi);
                        if (ty.hi == y && tx.lo == x) sum[j] += gc * (ty.whi * tx.wlo);
                        if (ty.hi == y && tx.hi == x) sum[j] += gc * (ty.whi * tx.whi);
                    }
                }
            }
        }
        DK_S *out = gin + n * a.img_s[0] + c0 * a.img_s[1] + y * a.img_s[2] + x * a.img_s[3];
        DK_GPU_UNROLL
        for (int j = 0; j < DK__RA_GPU_CHANNELS; ++j)
            if (j < nc) out[j * a.img_s[1]] = DK_STORE(sum[j]);
    }
}

/* ---- launchers (host) -------------------------------------------------------------------- */

static dk_status DK_SFN(dk__ra_gpu_forward)(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                            dk_tensor *argmax_y, dk_tensor *argmax_x, const dk__ra_gpu_args *a,
                                            void *stream)
{
    const int64_t total = a->K * a->C * a->PH * a->PW;
    const DK_S *in = (const DK_S *)dk_tensor_data(input), *r = (const DK_S *)dk_tensor_data(rois);
    DK_S *out = (DK_S *)dk_tensor_data(output);
    DK_T *my = argmax_y ? (DK_T *)dk_tensor_data(argmax_y) : (DK_T *)NULL;
    DK_T *mx = argmax_x ? (DK_T *)dk_tensor_data(argmax_x) : (DK_T *)NULL;
    if (a->max_mode)
        DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_forward_kernel) < true >, dk_gpu_blocks(total), DK_GPU_THREADS, stream, in, r,
                      out, my, mx, *a);
    else
        DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_forward_kernel) < false >, dk_gpu_blocks(total), DK_GPU_THREADS, stream, in, r,
                      out, my, mx, *a);
    return dk__gpu_launched("roi_align_forward");
}

static dk_status DK_SFN(dk__ra_gpu_backward)(const dk_tensor *grad_output, const dk_tensor *rois,
                                             const dk_tensor *argmax_y, const dk_tensor *argmax_x,
                                             dk_tensor *grad_input, const dk__ra_gpu_args *a, const dk__ra_gpu_tiles *g,
                                             void *stream)
{
    const DK_S *gout = (const DK_S *)dk_tensor_data(grad_output);
    const DK_S *r = (const DK_S *)dk_tensor_data(rois);
    const DK_T *my = argmax_y ? (const DK_T *)dk_tensor_data(argmax_y) : (const DK_T *)NULL;
    const DK_T *mx = argmax_x ? (const DK_T *)dk_tensor_data(argmax_x) : (const DK_T *)NULL;
    DK_S *gin = (DK_S *)dk_tensor_data(grad_input);
    const int64_t img = a->N * a->C * a->H * a->W, bins = a->K * a->C * a->PH * a->PW;
    if (g) { /* deterministic */
        /* scratch: the RoI table, then the tiles' lists and counts (int32, after the table) */
        const int64_t tiles = a->N * g->ty * g->tx;
        const size_t table = (size_t)a->K * sizeof(DK_SFN(dk__ra_gpu_roi_entry));
        const size_t lists = ((size_t)tiles * (size_t)a->K + (size_t)tiles) * sizeof(int32_t);
        void *scratch = NULL;
        dk_status st = dk_device_alloc(grad_input->device, table + lists, &scratch);
        if (st) return st;
        DK_SFN(dk__ra_gpu_roi_entry) *tab = (DK_SFN(dk__ra_gpu_roi_entry) *)scratch;
        int32_t *list = (int32_t *)((char *)scratch + table), *count = list + tiles * a->K;
        if (a->K > 0) {
            DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_roi_table_kernel), dk_gpu_blocks(a->K), DK_GPU_THREADS, stream, r, *a, tab);
            st = dk__gpu_launched("roi_align_backward");
        }
        if (!st) {
            DK_GPU_LAUNCH(dk_gpu_tile_lists_kernel, dk_gpu_blocks(tiles), DK_GPU_THREADS, stream, tab, a->N, a->K,
                          g->tile, g->ty, g->tx, list, count);
            st = dk__gpu_launched("roi_align_backward");
        }
        if (!st) {
            const int64_t chunks = (a->C + DK__RA_GPU_CHANNELS - 1) / DK__RA_GPU_CHANNELS;
            const unsigned blocks = dk_gpu_blocks(tiles * chunks * g->tile * g->tile);
            if (a->max_mode)
                DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_backward_gather_kernel) < true >, blocks, DK_GPU_THREADS, stream, gout,
                              tab, list, count, my, mx, gin, *a, *g);
            else
                DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_backward_gather_kernel) < false >, blocks, DK_GPU_THREADS, stream, gout,
                              tab, list, count, my, mx, gin, *a, *g);
            st = dk__gpu_launched("roi_align_backward");
        }
        dk_device_free(grad_input->device, scratch); /* stream-ordered: after the kernels above */
        return st;
    }
#if DK_S_IS_T
    /* grad_input = 0: dense storage by a memset (all-zero bits are +0.0), other strides by a kernel
     * (whose 64-bit index arithmetic per element cost more than the memset on the H100) */
    dk_status st = DK_OK;
    if (dk_tensor_is_contiguous(grad_input)) {
        if (dkgMemsetAsync(gin, 0, (size_t)img * sizeof(DK_S), (dkgStream_t)stream) != dkgSuccess)
            st = dk__gpu_launched("roi_align_backward");
    } else {
        DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_zero_kernel), dk_gpu_blocks(img), DK_GPU_THREADS, stream, gin, *a);
        st = dk__gpu_launched("roi_align_backward");
    }
    if (!st && bins > 0) {
        DK_GPU_LAUNCH(DK_SFN(dk__ra_gpu_backward_atomic_kernel), dk_gpu_blocks(bins), DK_GPU_THREADS, stream, gout, r,
                      my, mx, gin, *a, a->img_s[0], a->img_s[1], a->img_s[2], a->img_s[3]);
        st = dk__gpu_launched("roi_align_backward");
    }
    return st;
#else
    /* 16-bit storage: accumulate in a float scratch (contiguous NCHW), round once at the end. */
    size_t bytes;
    void *accv = NULL;
    dk_status st = DK_OK;
    if (__builtin_mul_overflow((size_t)img, sizeof(DK_T), &bytes))
        st = dk_error(DK_EINVAL, "roi_align_backward: grad_input too large (%lld elements)", (long long)img);
    if (!st) st = dk_device_alloc(grad_input->device, bytes, &accv);
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
