/*
 * deform_conv_gpu_tmpl.cuh — deform_conv2d's GPU kernels and their launchers (Note [Deformable
 * convolution on a GPU] in deform_conv_gpu.h), a template (Note [Templates in C] in
 * kernels/dk_template.h) instantiated for every float storage type by deform_conv_gpu.cu: DK_S
 * the storage type, DK_T the compute type.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT

/* The sample of tap `tap` of offset group d at output (y, x) of image n, and its mask. */
__device__ static inline DK_T DK_SFN(dk__dc_gpu_sample)(const DK_S *__restrict__ off, const DK_S *__restrict__ mask,
                                                        const dk__dc_gpu_args &a, int64_t n, int64_t d, int64_t tap,
                                                        int64_t y, int64_t x, DK_TFN(dk_deform_conv_sample) *s)
{
    const int64_t i = tap / a.kw, j = tap % a.kw, ch = 2 * (d * a.kk + tap);
    const int64_t o = n * a.off_s[0] + y * a.off_s[2] + x * a.off_s[3];
    const DK_T py = DK_TFN(dk_deform_conv_base)(y, a.sh, a.ph, i, a.dh) + DK_LOAD(off[o + ch * a.off_s[1]]);
    const DK_T px = DK_TFN(dk_deform_conv_base)(x, a.sw, a.pw, j, a.dw) + DK_LOAD(off[o + (ch + 1) * a.off_s[1]]);
    DK_TFN(dk_deform_conv_sample_init)(py, px, a.H, a.W, a.x_s[2], a.x_s[3], a.geometry, s);
    return a.has_mask ? DK_LOAD(mask[n * a.m_s[0] + (d * a.kk + tap) * a.m_s[1] + y * a.m_s[2] + x * a.m_s[3]])
                      : (DK_T)1;
}

__device__ static inline void DK_SFN(dk__dc_gpu_corners)(const DK_S *plane, const DK_TFN(dk_deform_conv_sample) *s,
                                                         DK_T v[4])
{
    for (int k = 0; k < 4; k++) v[k] = s->in[k] ? DK_LOAD(plane[s->off[k]]) : (DK_T)0;
}

__global__ void DK_SFN(dk__dc_gpu_forward_kernel)(const DK_S *__restrict__ x, const DK_S *__restrict__ w,
                                                  const DK_S *__restrict__ off, const DK_S *__restrict__ mask,
                                                  const DK_S *__restrict__ bias, DK_S *__restrict__ out,
                                                  dk__dc_gpu_args a)
{
    const int64_t total = a.N * a.Cout * a.Ho * a.Wo;
    for (int64_t e = DK_GPU_FIRST(); e < total; e += DK_GPU_STRIDE()) {
        const int64_t xo = e % a.Wo, yo = e / a.Wo % a.Ho, o = e / (a.Wo * a.Ho) % a.Cout,
                      n = e / (a.Wo * a.Ho * a.Cout);
        const int64_t g = o / a.opg;
        DK_T acc = a.has_bias ? DK_LOAD(bias[o * a.b_s]) : (DK_T)0;
        for (int64_t c = g * a.cpg; c < (g + 1) * a.cpg; c++) {
            const DK_S *plane = x + n * a.x_s[0] + c * a.x_s[1];
            for (int64_t tap = 0; tap < a.kk; tap++) {
                DK_TFN(dk_deform_conv_sample) s;
                const DK_T m = DK_SFN(dk__dc_gpu_sample)(off, mask, a, n, c / a.cpog, tap, yo, xo, &s);
                DK_T v[4];
                DK_SFN(dk__dc_gpu_corners)(plane, &s, v);
                const DK_T wv = DK_LOAD(
                    w[o * a.w_s[0] + (c - g * a.cpg) * a.w_s[1] + tap / a.kw * a.w_s[2] + tap % a.kw * a.w_s[3]]);
                acc += wv * (m * DK_TFN(dk_deform_conv_value)(&s, v));
            }
        }
        out[n * a.o_s[0] + o * a.o_s[1] + yo * a.o_s[2] + xo * a.o_s[3]] = DK_STORE(acc);
    }
}

/* The column gradient of channel c, tap `tap`, at (n, y, x): the sum over its group's output
 * channels of weight x grad_output. */
__device__ static inline DK_T DK_SFN(dk__dc_gpu_gcol)(const DK_S *__restrict__ w, const DK_S *__restrict__ gout,
                                                      const dk__dc_gpu_args &a, int64_t n, int64_t c, int64_t tap,
                                                      int64_t y, int64_t x)
{
    const int64_t g = c / a.cpg;
    DK_T sum = 0;
    for (int64_t o = g * a.opg; o < (g + 1) * a.opg; o++)
        sum += DK_LOAD(w[o * a.w_s[0] + (c - g * a.cpg) * a.w_s[1] + tap / a.kw * a.w_s[2] + tap % a.kw * a.w_s[3]]) *
               DK_LOAD(gout[n * a.o_s[0] + o * a.o_s[1] + y * a.o_s[2] + x * a.o_s[3]]);
    return sum;
}

/* The column gradient of (c, tap) at (n, y, x): read from gcol (the tiled kernels' buffer of
 * images n0 .. n0 + nn - 1, [c][tap][image - n0][y][x]) or, without one, computed. */
__device__ static inline DK_T DK_SFN(dk__dc_gpu_gcol_at)(const DK_T *__restrict__ gcol, const DK_S *__restrict__ w,
                                                         const DK_S *__restrict__ gout, const dk__dc_gpu_args &a,
                                                         int64_t n0, int64_t nn, int64_t n, int64_t c, int64_t tap,
                                                         int64_t y, int64_t x)
{
    if (!gcol) return DK_SFN(dk__dc_gpu_gcol)(w, gout, a, n, c, tap, y, x);
    return gcol[(c * a.kk + tap) * (nn * a.Ho * a.Wo) + ((n - n0) * a.Ho + y) * a.Wo + x];
}

/* grad_input's scatter into acc (contiguous NCHW, compute type), for images n0 .. n0 + nn - 1. */
__global__ void DK_SFN(dk__dc_gpu_grad_input_kernel)(const DK_S *__restrict__ w, const DK_S *__restrict__ off,
                                                     const DK_S *__restrict__ mask, const DK_S *__restrict__ gout,
                                                     const DK_T *__restrict__ gcol, int64_t n0, int64_t nn, DK_T *acc,
                                                     dk__dc_gpu_args a)
{
    const int64_t total = nn * a.Cin * a.kk * a.Ho * a.Wo;
    for (int64_t e = DK_GPU_FIRST(); e < total; e += DK_GPU_STRIDE()) {
        const int64_t xo = e % a.Wo, yo = e / a.Wo % a.Ho, tap = e / (a.Wo * a.Ho) % a.kk;
        const int64_t c = e / (a.Wo * a.Ho * a.kk) % a.Cin, n = n0 + e / (a.Wo * a.Ho * a.kk * a.Cin);
        DK_TFN(dk_deform_conv_sample) s;
        const DK_T m = DK_SFN(dk__dc_gpu_sample)(off, mask, a, n, c / a.cpog, tap, yo, xo, &s);
        if (!s.any) continue;
        const DK_T t = DK_SFN(dk__dc_gpu_gcol_at)(gcol, w, gout, a, n0, nn, n, c, tap, yo, xo) * m;
        DK_T *plane = acc + (n * a.Cin + c) * a.H * a.W;
        const int64_t o0 = s.y0 * a.W + s.x0;
        if (s.in[0]) atomicAdd(plane + o0, t * s.w[0]);
        if (s.in[1]) atomicAdd(plane + o0 + 1, t * s.w[1]);
        if (s.in[2]) atomicAdd(plane + o0 + a.W, t * s.w[2]);
        if (s.in[3]) atomicAdd(plane + o0 + a.W + 1, t * s.w[3]);
    }
}

/* grad_input = acc, any strides. */
__global__ void DK_SFN(dk__dc_gpu_store_kernel)(const DK_T *__restrict__ acc, DK_S *__restrict__ gin, dk__dc_gpu_args a)
{
    const int64_t total = a.N * a.Cin * a.H * a.W;
    for (int64_t e = DK_GPU_FIRST(); e < total; e += DK_GPU_STRIDE()) {
        const int64_t x = e % a.W, y = e / a.W % a.H, c = e / (a.W * a.H) % a.Cin, n = e / (a.W * a.H * a.Cin);
        gin[n * a.gx_s[0] + c * a.gx_s[1] + y * a.gx_s[2] + x * a.gx_s[3]] = DK_STORE(acc[e]);
    }
}

/* grad_offset and grad_mask of (n, d, tap, y, x): the CPU's sums over the group's channels. */
__global__ void DK_SFN(dk__dc_gpu_grad_offset_kernel)(const DK_S *__restrict__ x, const DK_S *__restrict__ w,
                                                      const DK_S *__restrict__ off, const DK_S *__restrict__ mask,
                                                      const DK_S *__restrict__ gout, DK_S *__restrict__ goff,
                                                      DK_S *__restrict__ gmask, const DK_T *__restrict__ gcol,
                                                      int64_t n0, int64_t nn, dk__dc_gpu_args a)
{
    const int64_t total = nn * a.og * a.kk * a.Ho * a.Wo;
    for (int64_t e = DK_GPU_FIRST(); e < total; e += DK_GPU_STRIDE()) {
        const int64_t xo = e % a.Wo, yo = e / a.Wo % a.Ho, tap = e / (a.Wo * a.Ho) % a.kk;
        const int64_t d = e / (a.Wo * a.Ho * a.kk) % a.og, n = n0 + e / (a.Wo * a.Ho * a.kk * a.og);
        DK_TFN(dk_deform_conv_sample) s;
        const DK_T m = DK_SFN(dk__dc_gpu_sample)(off, mask, a, n, d, tap, yo, xo, &s);
        DK_T ay = 0, ax = 0, am = 0;
        for (int64_t c = d * a.cpog; c < (d + 1) * a.cpog; c++) {
            DK_T v[4];
            DK_SFN(dk__dc_gpu_corners)(x + n * a.x_s[0] + c * a.x_s[1], &s, v);
            const DK_T gc = DK_SFN(dk__dc_gpu_gcol_at)(gcol, w, gout, a, n0, nn, n, c, tap, yo, xo), t = gc * m;
            am += gc * DK_TFN(dk_deform_conv_value)(&s, v);
            ay += t * DK_TFN(dk_deform_conv_dy)(&s, v);
            ax += t * DK_TFN(dk_deform_conv_dx)(&s, v);
        }
        const int64_t ch = d * a.kk + tap, o = n * a.goff_s[0] + yo * a.goff_s[2] + xo * a.goff_s[3];
        goff[o + 2 * ch * a.goff_s[1]] = DK_STORE(ay);
        goff[o + (2 * ch + 1) * a.goff_s[1]] = DK_STORE(ax);
        if (gmask) gmask[n * a.gm_s[0] + ch * a.gm_s[1] + yo * a.gm_s[2] + xo * a.gm_s[3]] = DK_STORE(am);
    }
}

/* grad_weight[o, c', i, j] and, for the threads of c' = i = j = 0, grad_bias[o]. */
__global__ void DK_SFN(dk__dc_gpu_grad_weight_kernel)(const DK_S *__restrict__ x, const DK_S *__restrict__ off,
                                                      const DK_S *__restrict__ mask, const DK_S *__restrict__ gout,
                                                      DK_S *__restrict__ gw, DK_S *__restrict__ gb, dk__dc_gpu_args a)
{
    const int64_t total = a.Cout * a.cpg * a.kk;
    for (int64_t e = DK_GPU_FIRST(); e < total; e += DK_GPU_STRIDE()) {
        const int64_t tap = e % a.kk, cg = e / a.kk % a.cpg, o = e / (a.kk * a.cpg);
        const int64_t c = o / a.opg * a.cpg + cg;
        DK_T sum = 0, bsum = 0;
        for (int64_t n = 0; n < a.N; n++) {
            const DK_S *plane = x + n * a.x_s[0] + c * a.x_s[1];
            for (int64_t yo = 0; yo < a.Ho; yo++)
                for (int64_t xo = 0; xo < a.Wo; xo++) {
                    DK_TFN(dk_deform_conv_sample) s;
                    const DK_T m = DK_SFN(dk__dc_gpu_sample)(off, mask, a, n, c / a.cpog, tap, yo, xo, &s);
                    DK_T v[4];
                    DK_SFN(dk__dc_gpu_corners)(plane, &s, v);
                    const DK_T g = DK_LOAD(gout[n * a.o_s[0] + o * a.o_s[1] + yo * a.o_s[2] + xo * a.o_s[3]]);
                    sum += g * (m * DK_TFN(dk_deform_conv_value)(&s, v));
                    bsum += g;
                }
        }
        gw[o * a.gw_s[0] + cg * a.gw_s[1] + tap / a.kw * a.gw_s[2] + tap % a.kw * a.gw_s[3]] = DK_STORE(sum);
        if (gb && cg == 0 && tap == 0) gb[o * a.gb_s] = DK_STORE(bsum);
    }
}

/* The tiled kernels (Note [Deformable convolution on a GPU]): the column of group g, row
 * k = (c - g cpg) kk + tap, position p = (n, y, x): mask x sample, as the direct kernels' terms. */
__device__ static inline DK_T DK_SFN(dk__dc_gpu_col)(const DK_S *__restrict__ x, const DK_S *__restrict__ off,
                                                     const DK_S *__restrict__ mask, const dk__dc_gpu_args &a, int64_t c,
                                                     int64_t tap, int64_t p)
{
    const int64_t xo = p % a.Wo, yo = p / a.Wo % a.Ho, n = p / (a.Wo * a.Ho);
    DK_TFN(dk_deform_conv_sample) s;
    const DK_T m = DK_SFN(dk__dc_gpu_sample)(off, mask, a, n, c / a.cpog, tap, yo, xo, &s);
    DK_T v[4];
    DK_SFN(dk__dc_gpu_corners)(x + n * a.x_s[0] + c * a.x_s[1], &s, v);
    return m * DK_TFN(dk_deform_conv_value)(&s, v);
}

/* weight[o, k] of group g's rows (k = cg kk + tap), any strides. */
__device__ static inline DK_T DK_SFN(dk__dc_gpu_w)(const DK_S *__restrict__ w, const dk__dc_gpu_args &a, int64_t o,
                                                   int64_t k)
{
    const int64_t cg = k / a.kk, tap = k % a.kk;
    return DK_LOAD(w[o * a.w_s[0] + cg * a.w_s[1] + tap / a.kw * a.w_s[2] + tap % a.kw * a.w_s[3]]);
}

/* The column gradients of images n0 .. n0 + nn - 1 as a tiled product, gcol[c][tap][image -
 * n0][y][x] = the sum over the group's output channels o of weight[o, c', tap] x
 * grad_output[n, o, y, x]: a block's tile is DK_DC_K column rows of one group by DK_DC_P
 * positions; per step of DK_DC_WO output channels the weights' and grad_output's tiles go to
 * shared memory once, and each thread adds its 2 x 2 sums' terms in increasing o, as
 * dk__dc_gpu_gcol does: the same bits. */
__global__ void DK_SFN(dk__dc_gpu_gcol_kernel)(const DK_S *__restrict__ w, const DK_S *__restrict__ gout,
                                               DK_T *__restrict__ gcol, int64_t n0, int64_t nn, dk__dc_gpu_args a)
{
    __shared__ DK_T ws[DK_DC_WO][DK_DC_K + 1];
    __shared__ DK_T gs[DK_DC_WO][DK_DC_P];
    const int t = (int)threadIdx.x, tp = t % 16, tk = t / 16;
    const int64_t PB = nn * a.Ho * a.Wo, K = a.cpg * a.kk;
    const int64_t ptiles = (PB + DK_DC_P - 1) / DK_DC_P, ktiles = (K + DK_DC_K - 1) / DK_DC_K;
    const int64_t tiles = a.groups * ktiles * ptiles;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t p0 = tile % ptiles * DK_DC_P, k0 = tile / ptiles % ktiles * DK_DC_K, g = tile / (ptiles * ktiles);
        DK_T acc[2][2] = {{0, 0}, {0, 0}};
        for (int64_t o0 = 0; o0 < a.opg; o0 += DK_DC_WO) {
            for (int e = t; e < DK_DC_WO * DK_DC_K; e += DK_DC_THREADS) {
                const int64_t o = o0 + e / DK_DC_K, k = k0 + e % DK_DC_K;
                ws[e / DK_DC_K][e % DK_DC_K] = o < a.opg && k < K ? DK_SFN(dk__dc_gpu_w)(w, a, g * a.opg + o, k)
                                                                  : (DK_T)0;
            }
            for (int e = t; e < DK_DC_WO * DK_DC_P; e += DK_DC_THREADS) {
                const int64_t o = o0 + e / DK_DC_P, p = p0 + e % DK_DC_P;
                DK_T v = 0;
                if (o < a.opg && p < PB) {
                    const int64_t xo = p % a.Wo, yo = p / a.Wo % a.Ho, n = n0 + p / (a.Wo * a.Ho);
                    v = DK_LOAD(gout[n * a.o_s[0] + (g * a.opg + o) * a.o_s[1] + yo * a.o_s[2] + xo * a.o_s[3]]);
                }
                gs[e / DK_DC_P][e % DK_DC_P] = v;
            }
            __syncthreads();
            const int on = (int)(a.opg - o0 < DK_DC_WO ? a.opg - o0 : DK_DC_WO);
            for (int o = 0; o < on; o++) {
                const DK_T w0 = ws[o][tk], w1 = ws[o][tk + 16], g0 = gs[o][tp], g1 = gs[o][tp + 16];
                acc[0][0] += w0 * g0;
                acc[0][1] += w0 * g1;
                acc[1][0] += w1 * g0;
                acc[1][1] += w1 * g1;
            }
            __syncthreads();
        }
        DK_GPU_UNROLL
        for (int q = 0; q < 2; q++) DK_GPU_UNROLL
        for (int r = 0; r < 2; r++) {
            const int64_t k = k0 + tk + 16 * q, p = p0 + tp + 16 * r;
            if (k < K && p < PB) gcol[(g * K + k) * PB + p] = acc[q][r];
        }
    }
}

/* The forward as a tiled product: a block's tile is DK_DC_FO output channels of one group by
 * DK_DC_P positions; per step of DK_DC_K column rows it computes the column tile once into
 * shared memory (and the weights' tile), and each thread adds its 4 x 2 outputs' terms in
 * increasing k, after the bias: the direct kernel's order, so the same bits. */
__global__ void DK_SFN(dk__dc_gpu_forward_tiled_kernel)(const DK_S *__restrict__ x, const DK_S *__restrict__ w,
                                                        const DK_S *__restrict__ off, const DK_S *__restrict__ mask,
                                                        const DK_S *__restrict__ bias, DK_S *__restrict__ out,
                                                        dk__dc_gpu_args a)
{
    __shared__ DK_T col[DK_DC_K][DK_DC_P];
    __shared__ DK_T ws[DK_DC_FO][DK_DC_K + 1];
    const int t = (int)threadIdx.x, tp = t % 16, to = t / 16;
    const int64_t P = a.N * a.Ho * a.Wo, K = a.cpg * a.kk;
    const int64_t ptiles = (P + DK_DC_P - 1) / DK_DC_P, otiles = (a.opg + DK_DC_FO - 1) / DK_DC_FO;
    const int64_t tiles = a.groups * otiles * ptiles;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t p0 = tile % ptiles * DK_DC_P, o0 = tile / ptiles % otiles * DK_DC_FO,
                      g = tile / (ptiles * otiles);
        DK_T acc[4][2];
        DK_GPU_UNROLL
        for (int r = 0; r < 4; r++) {
            const int64_t o = o0 + to + 16 * r;
            const DK_T b = a.has_bias && o < a.opg ? DK_LOAD(bias[(g * a.opg + o) * a.b_s]) : (DK_T)0;
            acc[r][0] = acc[r][1] = b;
        }
        for (int64_t k0 = 0; k0 < K; k0 += DK_DC_K) {
            for (int e = t; e < DK_DC_K * DK_DC_P; e += DK_DC_THREADS) {
                const int64_t k = k0 + e / DK_DC_P, p = p0 + e % DK_DC_P;
                col[e / DK_DC_P][e % DK_DC_P] = k < K && p < P ? DK_SFN(dk__dc_gpu_col)(
                                                                     x, off, mask, a, g * a.cpg + k / a.kk, k % a.kk, p)
                                                               : (DK_T)0;
            }
            for (int e = t; e < DK_DC_FO * DK_DC_K; e += DK_DC_THREADS) {
                const int64_t o = o0 + e / DK_DC_K, k = k0 + e % DK_DC_K;
                ws[e / DK_DC_K][e % DK_DC_K] = o < a.opg && k < K ? DK_SFN(dk__dc_gpu_w)(w, a, g * a.opg + o, k)
                                                                  : (DK_T)0;
            }
            __syncthreads();
            const int kn = (int)(K - k0 < DK_DC_K ? K - k0 : DK_DC_K);
            for (int k = 0; k < kn; k++) {
                const DK_T c0 = col[k][tp], c1 = col[k][tp + 16];
                DK_GPU_UNROLL
                for (int r = 0; r < 4; r++) {
                    const DK_T wv = ws[to + 16 * r][k];
                    acc[r][0] += wv * c0;
                    acc[r][1] += wv * c1;
                }
            }
            __syncthreads();
        }
        DK_GPU_UNROLL
        for (int r = 0; r < 4; r++) DK_GPU_UNROLL
        for (int q = 0; q < 2; q++) {
            const int64_t o = o0 + to + 16 * r, p = p0 + tp + 16 * q;
            if (o >= a.opg || p >= P) continue;
            const int64_t xo = p % a.Wo, yo = p / a.Wo % a.Ho, n = p / (a.Wo * a.Ho);
            out[n * a.o_s[0] + (g * a.opg + o) * a.o_s[1] + yo * a.o_s[2] + xo * a.o_s[3]] = DK_STORE(acc[r][q]);
        }
    }
}

/* grad_weight's partial sums: a block's tile is DK_DC_WO output channels by DK_DC_K column rows
 * of one group, over one of `chunks` fixed ranges of positions (chunk positions each, a
 * multiple of DK_DC_P); per step of DK_DC_P positions it computes the column tile and the
 * grad_output tile once into shared memory, and each thread adds its 2 x 2 sums' terms in
 * increasing position. part[chunk][o][k] (compute type, o over every channel). */
__global__ void DK_SFN(dk__dc_gpu_grad_weight_tiled_kernel)(const DK_S *__restrict__ x, const DK_S *__restrict__ off,
                                                            const DK_S *__restrict__ mask,
                                                            const DK_S *__restrict__ gout, DK_T *__restrict__ part,
                                                            int64_t chunks, int64_t chunk, dk__dc_gpu_args a)
{
    __shared__ DK_T col[DK_DC_K][DK_DC_P + 1];
    __shared__ DK_T gs[DK_DC_WO][DK_DC_P + 1];
    const int t = (int)threadIdx.x, tk = t % 16, to = t / 16;
    const int64_t P = a.N * a.Ho * a.Wo, K = a.cpg * a.kk;
    const int64_t ktiles = (K + DK_DC_K - 1) / DK_DC_K, otiles = (a.opg + DK_DC_WO - 1) / DK_DC_WO;
    const int64_t tiles = a.groups * otiles * ktiles * chunks;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t kt = tile % ktiles, ot = tile / ktiles % otiles, ch = tile / (ktiles * otiles) % chunks,
                      g = tile / (ktiles * otiles * chunks);
        const int64_t k0 = kt * DK_DC_K, o0 = ot * DK_DC_WO, pbeg = ch * chunk,
                      pend = pbeg + chunk < P ? pbeg + chunk : P;
        DK_T acc[2][2] = {{0, 0}, {0, 0}};
        for (int64_t p0 = pbeg; p0 < pend; p0 += DK_DC_P) {
            for (int e = t; e < DK_DC_K * DK_DC_P; e += DK_DC_THREADS) {
                const int64_t k = k0 + e / DK_DC_P, p = p0 + e % DK_DC_P;
                col[e / DK_DC_P][e % DK_DC_P] = k < K && p < pend
                                                    ? DK_SFN(dk__dc_gpu_col)(x, off, mask, a, g * a.cpg + k / a.kk,
                                                                             k % a.kk, p)
                                                    : (DK_T)0;
            }
            for (int e = t; e < DK_DC_WO * DK_DC_P; e += DK_DC_THREADS) {
                const int64_t o = o0 + e / DK_DC_P, p = p0 + e % DK_DC_P;
                DK_T v = 0;
                if (o < a.opg && p < pend) {
                    const int64_t xo = p % a.Wo, yo = p / a.Wo % a.Ho, n = p / (a.Wo * a.Ho);
                    v = DK_LOAD(gout[n * a.o_s[0] + (g * a.opg + o) * a.o_s[1] + yo * a.o_s[2] + xo * a.o_s[3]]);
                }
                gs[e / DK_DC_P][e % DK_DC_P] = v;
            }
            __syncthreads();
            const int pn = (int)(pend - p0 < DK_DC_P ? pend - p0 : DK_DC_P);
            for (int p = 0; p < pn; p++) {
                const DK_T g0 = gs[to][p], g1 = gs[to + 16][p], c0 = col[tk][p], c1 = col[tk + 16][p];
                acc[0][0] += g0 * c0;
                acc[0][1] += g0 * c1;
                acc[1][0] += g1 * c0;
                acc[1][1] += g1 * c1;
            }
            __syncthreads();
        }
        DK_GPU_UNROLL
        for (int r = 0; r < 2; r++) DK_GPU_UNROLL
        for (int q = 0; q < 2; q++) {
            const int64_t o = o0 + to + 16 * r, k = k0 + tk + 16 * q;
            if (o < a.opg && k < K) part[(ch * a.Cout + g * a.opg + o) * K + k] = acc[r][q];
        }
    }
}

/* grad_bias's partial sums: block (chunk, o) sums grad_output[., o, ., .] over its fixed range
 * of positions, each thread a strided share, then a tree in shared memory: part[chunk][o]. */
__global__ void DK_SFN(dk__dc_gpu_grad_bias_kernel)(const DK_S *__restrict__ gout, DK_T *__restrict__ part,
                                                    int64_t chunks, int64_t chunk, dk__dc_gpu_args a)
{
    __shared__ DK_T red[DK_DC_THREADS];
    const int t = (int)threadIdx.x;
    const int64_t P = a.N * a.Ho * a.Wo;
    for (int64_t b = blockIdx.x; b < chunks * a.Cout; b += gridDim.x) {
        const int64_t o = b % a.Cout, ch = b / a.Cout, pbeg = ch * chunk, pend = pbeg + chunk < P ? pbeg + chunk : P;
        DK_T sum = 0;
        for (int64_t p = pbeg + t; p < pend; p += DK_DC_THREADS) {
            const int64_t xo = p % a.Wo, yo = p / a.Wo % a.Ho, n = p / (a.Wo * a.Ho);
            sum += DK_LOAD(gout[n * a.o_s[0] + o * a.o_s[1] + yo * a.o_s[2] + xo * a.o_s[3]]);
        }
        red[t] = sum;
        __syncthreads();
        for (int h = DK_DC_THREADS / 2; h > 0; h /= 2) {
            if (t < h) red[t] += red[t + h];
            __syncthreads();
        }
        if (t == 0) part[ch * a.Cout + o] = red[0];
        __syncthreads(); /* red[0] read before the next block's sums */
    }
}

/* The partial sums' total in chunk order: grad_weight (count = Cout K) or grad_bias (Cout). */
__global__ void DK_SFN(dk__dc_gpu_sum_chunks_kernel)(const DK_T *__restrict__ part, int64_t chunks, int64_t count,
                                                     int bias, DK_S *__restrict__ dst, dk__dc_gpu_args a)
{
    const int64_t K = a.cpg * a.kk;
    for (int64_t e = DK_GPU_FIRST(); e < count; e += DK_GPU_STRIDE()) {
        DK_T sum = 0;
        for (int64_t ch = 0; ch < chunks; ch++) sum += part[ch * count + e];
        if (bias) dst[e * a.gb_s] = DK_STORE(sum);
        else {
            const int64_t o = e / K, cg = e % K / a.kk, tap = e % a.kk;
            dst[o * a.gw_s[0] + cg * a.gw_s[1] + tap / a.kw * a.gw_s[2] + tap % a.kw * a.gw_s[3]] = DK_STORE(sum);
        }
    }
}

/* grad_weight and grad_bias by the tiled kernels: partial sums over a fixed number of chunks of
 * positions (a function of the sizes only, so the same bits on every run and every GPU) into a
 * scratch buffer, then their totals in chunk order. */
static dk_status DK_SFN(dk__dc_gpu_grad_weight_tiled)(const DK_S *g, const dk_tensor *input, const DK_S *off,
                                                      const DK_S *m, dk_tensor *grad_weight, dk_tensor *grad_bias,
                                                      const dk__dc_gpu_args *a, void *stream)
{
    const DK_S *x = (const DK_S *)dk_tensor_data(input);
    const int64_t P = a->N * a->Ho * a->Wo, K = a->cpg * a->kk, weights = a->Cout * K;
    const int64_t tiles = a->groups * ((a->opg + DK_DC_WO - 1) / DK_DC_WO) * ((K + DK_DC_K - 1) / DK_DC_K);
    int64_t wchunks, wchunk, bchunks, bchunk;
    dk__dc_gpu_chunks(P, tiles, weights, DK_DC_P, &wchunks, &wchunk);
    dk__dc_gpu_chunks(P, a->Cout, a->Cout, DK_DC_THREADS, &bchunks, &bchunk);
    const int64_t welems = wchunks * weights, belems = grad_bias ? bchunks * a->Cout : 0;
    void *partv = NULL;
    dk_status st = dk_device_alloc(grad_weight->device, (size_t)(welems + belems) * sizeof(DK_T), &partv);
    if (st) return st;
    DK_T *wpart = (DK_T *)partv, *bpart = wpart + welems;
    DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_grad_weight_tiled_kernel), dk__dc_gpu_grid(tiles * wchunks), DK_DC_THREADS, stream,
                  x, off, m, g, wpart, wchunks, wchunk, *a);
    st = dk__gpu_launched("deform_conv2d_backward");
    if (!st) {
        DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_sum_chunks_kernel), dk_gpu_blocks(weights), DK_GPU_THREADS, stream, wpart,
                      wchunks, weights, 0, (DK_S *)dk_tensor_data(grad_weight), *a);
        st = dk__gpu_launched("deform_conv2d_backward");
    }
    if (!st && grad_bias && a->Cout > 0) {
        DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_grad_bias_kernel), dk__dc_gpu_grid(bchunks * a->Cout), DK_DC_THREADS, stream, g,
                      bpart, bchunks, bchunk, *a);
        st = dk__gpu_launched("deform_conv2d_backward");
        if (!st) {
            DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_sum_chunks_kernel), dk_gpu_blocks(a->Cout), DK_GPU_THREADS, stream, bpart,
                          bchunks, a->Cout, 1, (DK_S *)dk_tensor_data(grad_bias), *a);
            st = dk__gpu_launched("deform_conv2d_backward");
        }
    }
    dk_device_free(grad_weight->device, partv); /* stream-ordered: after the kernels above */
    return st;
}

static dk_status DK_SFN(dk__dc_gpu_forward)(const dk_tensor *input, const dk_tensor *weight, const dk_tensor *offset,
                                            const dk_tensor *mask, const dk_tensor *bias, dk_tensor *output,
                                            const dk__dc_gpu_args *a, bool tiled, void *stream)
{
    if (tiled) {
        const int64_t P = a->N * a->Ho * a->Wo;
        const int64_t tiles = a->groups * ((a->opg + DK_DC_FO - 1) / DK_DC_FO) * ((P + DK_DC_P - 1) / DK_DC_P);
        DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_forward_tiled_kernel), dk__dc_gpu_grid(tiles), DK_DC_THREADS, stream,
                      (const DK_S *)dk_tensor_data(input), (const DK_S *)dk_tensor_data(weight),
                      (const DK_S *)dk_tensor_data(offset), mask ? (const DK_S *)dk_tensor_data(mask) : (const DK_S *)0,
                      bias ? (const DK_S *)dk_tensor_data(bias) : (const DK_S *)0, (DK_S *)dk_tensor_data(output), *a);
        return dk__gpu_launched("deform_conv2d_forward");
    }
    DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_forward_kernel), dk_gpu_blocks(a->N * a->Cout * a->Ho * a->Wo), DK_GPU_THREADS,
                  stream, (const DK_S *)dk_tensor_data(input), (const DK_S *)dk_tensor_data(weight),
                  (const DK_S *)dk_tensor_data(offset), mask ? (const DK_S *)dk_tensor_data(mask) : (const DK_S *)0,
                  bias ? (const DK_S *)dk_tensor_data(bias) : (const DK_S *)0, (DK_S *)dk_tensor_data(output), *a);
    return dk__gpu_launched("deform_conv2d_forward");
}

static dk_status DK_SFN(dk__dc_gpu_backward)(const dk_tensor *grad_output, const dk_tensor *input,
                                             const dk_tensor *weight, const dk_tensor *offset, const dk_tensor *mask,
                                             dk_tensor *grad_input, dk_tensor *grad_weight, dk_tensor *grad_offset,
                                             dk_tensor *grad_mask, dk_tensor *grad_bias, const dk__dc_gpu_args *a,
                                             bool deterministic, bool tiled, int64_t gcol_elems, void *stream)
{
    const DK_S *x = (const DK_S *)dk_tensor_data(input), *w = (const DK_S *)dk_tensor_data(weight);
    const DK_S *off = (const DK_S *)dk_tensor_data(offset), *g = (const DK_S *)dk_tensor_data(grad_output);
    const DK_S *m = mask ? (const DK_S *)dk_tensor_data(mask) : (const DK_S *)0;
    dk_status st = DK_OK;
    const int64_t img = a->N * a->Cin * a->H * a->W, plane = a->Ho * a->Wo;
    const int64_t cols = a->Cin * a->kk * plane, samples = a->og * a->kk * plane; /* per image */
    void *accv = NULL, *gcolv = NULL;
    if (img > 0) { /* grad_input: the atomic accumulator, then its store */
        size_t bytes;
        if (__builtin_mul_overflow((size_t)img, sizeof(DK_T), &bytes))
            return dk_error(DK_EINVAL, "deform_conv2d_backward: grad_input too large (%lld elements)", (long long)img);
        st = dk_device_alloc(grad_input->device, bytes, &accv);
        if (st) return st;
        if (dkgMemsetAsync(accv, 0, bytes, (dkgStream_t)stream) != dkgSuccess)
            st = dk__gpu_launched("deform_conv2d_backward");
    }
    /* tiled: the column gradients of `batch` images at a time, computed once into gcol for
     * grad_input's scatter and grad_offset's gather (the direct kernels compute them in each) */
    int64_t batch = a->N > 0 ? a->N : 1;
    if (!st && tiled && cols > 0 && a->N > 0) {
        const int64_t most = gcol_elems / cols > 1 ? gcol_elems / cols : 1;
        const int64_t passes = (a->N + most - 1) / most;
        batch = (a->N + passes - 1) / passes;
        st = dk_device_alloc(grad_input->device, (size_t)(batch * cols) * sizeof(DK_T), &gcolv);
    }
    const DK_T *gcol = (const DK_T *)gcolv;
    for (int64_t n0 = 0; !st && n0 < a->N; n0 += batch) {
        const int64_t nn = a->N - n0 < batch ? a->N - n0 : batch;
        if (gcol) {
            const int64_t tiles = a->groups * ((a->cpg * a->kk + DK_DC_K - 1) / DK_DC_K) *
                                  ((nn * plane + DK_DC_P - 1) / DK_DC_P);
            DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_gcol_kernel), dk__dc_gpu_grid(tiles), DK_DC_THREADS, stream, w, g,
                          (DK_T *)gcolv, n0, nn, *a);
            if ((st = dk__gpu_launched("deform_conv2d_backward"))) break;
        }
        if (accv && cols > 0) {
            /* deterministic: one thread adds in a fixed order of columns (slow, and the same
             * bits on every run); else every column at once, in whatever order (Note
             * [Deformable convolution on a GPU]) */
            DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_grad_input_kernel), deterministic ? 1u : dk_gpu_blocks(nn * cols),
                          deterministic ? 1u : (unsigned)DK_GPU_THREADS, stream, w, off, m, g, gcol, n0, nn,
                          (DK_T *)accv, *a);
            if ((st = dk__gpu_launched("deform_conv2d_backward"))) break;
        }
        if (samples > 0) {
            DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_grad_offset_kernel), dk_gpu_blocks(nn * samples), DK_GPU_THREADS, stream, x,
                          w, off, m, g, (DK_S *)dk_tensor_data(grad_offset),
                          grad_mask ? (DK_S *)dk_tensor_data(grad_mask) : (DK_S *)0, gcol, n0, nn, *a);
            st = dk__gpu_launched("deform_conv2d_backward");
        }
    }
    if (!st && accv) {
        DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_store_kernel), dk_gpu_blocks(img), DK_GPU_THREADS, stream, (const DK_T *)accv,
                      (DK_S *)dk_tensor_data(grad_input), *a);
        st = dk__gpu_launched("deform_conv2d_backward");
    }
    /* stream-ordered: after the kernels above */
    if (gcolv) dk_device_free(grad_input->device, gcolv);
    if (accv) dk_device_free(grad_input->device, accv);
    if (st) return st;
    const int64_t weights = a->Cout * a->cpg * a->kk;
    if (tiled && weights > 0)
        return DK_SFN(dk__dc_gpu_grad_weight_tiled)(g, input, off, m, grad_weight, grad_bias, a, stream);
    if (weights > 0) {
        DK_GPU_LAUNCH(DK_SFN(dk__dc_gpu_grad_weight_kernel), dk_gpu_blocks(weights), DK_GPU_THREADS, stream, x, off, m,
                      g, (DK_S *)dk_tensor_data(grad_weight), grad_bias ? (DK_S *)dk_tensor_data(grad_bias) : (DK_S *)0,
                      *a);
        st = dk__gpu_launched("deform_conv2d_backward");
    }
    return st;
}

#endif
