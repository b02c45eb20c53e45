/*
 * kernels/deform_conv_math_tmpl.h — the template body of kernels/deform_conv_math.h (Note
 * [Templates in C] in dk_template.h). Included only through dk_instantiate.h.
 */
#if DK_TMPL_PASS == DK_TMPL_COMPUTE

/* One sample's corners: plane offsets (0 for a corner outside, whose weight and validity are 0),
 * bilinear weights (0 outside, all 0 for a sample outside), and which corners are inside for
 * the derivatives (which torchvision takes even for a sample on the -1 edge). */
typedef struct {
    int64_t off[4];
    int64_t y0, x0; /* the top left corner, which may be outside (-1) */
    DK_T w[4];
    DK_T ly, lx;
    bool in[4];
    bool any; /* the sample's value can be non-zero */
} DK_TFN(dk_deform_conv_sample);

/* The sample at (py, px) of an H x W plane whose rows and columns are sy and sx elements apart.
 * NaN or a coordinate beyond the map is "outside". */
DK_HD DK_INLINE void DK_TFN(dk_deform_conv_sample_init)(DK_T py, DK_T px, int64_t H, int64_t W, int64_t sy, int64_t sx,
                                                        int geometry, DK_TFN(dk_deform_conv_sample) *s)
{
    for (int k = 0; k < 4; k++) s->off[k] = 0, s->w[k] = (DK_T)0, s->in[k] = false;
    s->ly = s->lx = (DK_T)0;
    s->y0 = s->x0 = 0;
    s->any = false;
    /* the derivatives' corners exist for py in (-2, H) (floor in [-2, H - 1]); beyond, nothing;
     * MMCV's derivatives exist only where the value does */
    const DK_T lo = geometry == DK_DEFORM_CONV_MMCV ? (DK_T)-1 : (DK_T)-2;
    if (!(py > lo && py < (DK_T)H && px > lo && px < (DK_T)W)) return;
    const DK_T fy = DK_TMATH(floor)(py), fx = DK_TMATH(floor)(px);
    const int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
    s->y0 = y0;
    s->x0 = x0;
    s->ly = py - fy;
    s->lx = px - fx;
    const bool y0in = y0 >= 0 && y0 < H, y1in = y0 + 1 >= 0 && y0 + 1 < H;
    const bool x0in = x0 >= 0 && x0 < W, x1in = x0 + 1 >= 0 && x0 + 1 < W;
    s->in[0] = y0in && x0in;
    s->in[1] = y0in && x1in;
    s->in[2] = y1in && x0in;
    s->in[3] = y1in && x1in;
    const int64_t o[4] = {y0 * sy + x0 * sx, y0 * sy + (x0 + 1) * sx, (y0 + 1) * sy + x0 * sx,
                          (y0 + 1) * sy + (x0 + 1) * sx};
    for (int k = 0; k < 4; k++) s->off[k] = s->in[k] ? o[k] : 0;
    s->any = py > (DK_T)-1 && px > (DK_T)-1; /* (and py < H, px < W from above) */
    if (!s->any) return;
    const DK_T hy = (DK_T)1 - s->ly, hx = (DK_T)1 - s->lx;
    const DK_T w[4] = {hy * hx, hy * s->lx, s->ly * hx, s->ly * s->lx};
    for (int k = 0; k < 4; k++) s->w[k] = s->in[k] ? w[k] : (DK_T)0;
}

/* The corners' values v (read by the caller at s->off, 0 where !s->in): the sample. */
DK_HD DK_INLINE DK_T DK_TFN(dk_deform_conv_value)(const DK_TFN(dk_deform_conv_sample) *s, const DK_T v[4])
{
    return s->w[0] * v[0] + s->w[1] * v[1] + s->w[2] * v[2] + s->w[3] * v[3];
}

/* The sample's derivative along y (torchvision's coordinate weight, is_y_direction). */
DK_HD DK_INLINE DK_T DK_TFN(dk_deform_conv_dy)(const DK_TFN(dk_deform_conv_sample) *s, const DK_T v[4])
{
    return s->lx * (v[3] - v[1]) + ((DK_T)1 - s->lx) * (v[2] - v[0]);
}

/* ... and along x. */
DK_HD DK_INLINE DK_T DK_TFN(dk_deform_conv_dx)(const DK_TFN(dk_deform_conv_sample) *s, const DK_T v[4])
{
    return s->ly * (v[3] - v[2]) + ((DK_T)1 - s->ly) * (v[1] - v[0]);
}

/* The sampling position of tap (i, j) at output (y, x), before its offset. */
DK_HD DK_INLINE DK_T DK_TFN(dk_deform_conv_base)(int64_t out, int64_t stride, int64_t pad, int64_t tap,
                                                 int64_t dilation)
{
    return (DK_T)(out * stride - pad + tap * dilation);
}

#endif
