/*
 * fuzz_roi_align.c — roi_align's check (ops/roi_align.c) and CPU kernel (csrc/cpu/roi_align/) on
 * small hostile problems: forward, then backward when forward succeeded.
 *
 * From the input: N, C, H, W, K, PH, PW in 0..9 (one of them in 1..40); the dtype (float16,
 * bfloat16, float32, float64, sometimes a wrong one for one tensor); each tensor's layout
 * (contiguous, channels-last, permuted, padded, negative, zero or overlapping strides; outputs
 * too, which the core must then refuse); values with NaN, infinities and huge ones; boxes with
 * any coordinates and batch indices (non-integer, negative, out of range, NaN); spatial_scale
 * (0, negative, NaN, huge), sampling_ratio (-2..100, and huge), pool_mode (0, 1, other),
 * aligned, argmax tensors present or not; and the tunables that pick the kernel's evaluation
 * paths (fuzz_common.h: order, taps bound, serial threshold, large-output thresholds, threads).
 *
 * Every call is checked against the contract (fz_verify): an error changes nothing and has a
 * message; a success writes only output elements and leaves inputs untouched.
 *
 * One bound (fz_cost): an explicit sampling_ratio is honoured as given, at sampling_ratio^2
 * samples per output element (kernels/roi_align_math.h: "its cost is the caller's choice"), so a
 * huge ratio on a non-empty problem is a legitimately long call, not a hang. Such ratios are kept
 * where the call has no work (K or C is 0) or is refused anyway; a call whose samples (explicit or
 * adaptive) would number more than ~50,000 is folded into one with an explicit ratio of 1..4, so
 * that the fuzzer spends its time on paths rather than on long loops.
 */
#include "fuzz_common.h"

/* Samples one axis of a box takes per bin, as kernels/roi_align_math.h counts them (roughly:
 * rounding aside; NaN and infinite lengths count as the adaptive cap). */
static double fz_grid(double c1, double c2, double scale, int64_t pooled, int64_t sr, bool aligned, int64_t size)
{
    if (sr > 0) return (double)sr;
    const double cap = (double)((4 * (size + 1) + pooled - 1) / pooled);
    double len = (c2 - c1) * scale;
    if (!aligned && !(len >= 1)) len = isnan(len) ? len : 1;
    const double g = ceil(len / (double)pooled);
    return !(g == g) ? cap : g < 1 ? 0 : g > cap ? cap : g;
}

/* Sample evaluations of a call (forward or backward), roughly. */
static double fz_cost(const double (*box)[5], int64_t C, int64_t H, int64_t W, int64_t K, int64_t PH, int64_t PW,
                      double scale, int64_t sr, bool aligned)
{
    if (K <= 0 || C <= 0 || PH <= 0 || PW <= 0) return 0;
    double cost = 0;
    for (int64_t k = 0; k < K; k++) {
        const double gh = fz_grid(box[k][2], box[k][4], scale, PH, sr, aligned, H);
        const double gw = fz_grid(box[k][1], box[k][3], scale, PW, sr, aligned, W);
        cost += (double)PH * gh + (double)PW * gw + (double)C * (double)PH * (double)PW * gh * gw;
    }
    return cost;
}

static DLDataType fz_float_dtype(int i)
{
    static const dk_dtype f[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};
    return dk_dtype_to_dl(f[i & 3]);
}

/* Usually `want`; sometimes another dtype, which the check must refuse. */
static DLDataType fz_maybe_wrong(fz_in *in, DLDataType want, bool wrong)
{
    if (!wrong || fz_pick(in, 4) != 0) return want;
    static const DLDataType others[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1},  {kDLInt, 32, 1},
                                        {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 32, 2}};
    return others[fz_pick(in, 6)];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_tunables(&in);

    /* Sizes. */
    int64_t dims[7];
    for (int i = 0; i < 7; i++) dims[i] = fz_range(&in, 0, 9);
    const uint8_t big = fz_u8(&in);
    if (big < 7 * 8 && (big & 7) == 0) dims[big / 8] = fz_range(&in, 1, 40);
    const int64_t N = dims[0], C = dims[1], H = dims[2], W = dims[3], K = dims[4];
    int64_t PH = dims[5], PW = dims[6];

    /* Options. */
    const uint8_t opt = fz_u8(&in);
    const DLDataType dt = fz_float_dtype(opt);
    const bool wrong_dtypes = (opt & 4) != 0;
    const int64_t pool_mode = (opt & 8) ? DK_POOL_MAX : (opt & 16) ? DK_POOL_AVG : fz_range(&in, -2, 3);
    const bool aligned = (opt & 32) != 0;
    const uint8_t am = fz_u8(&in); /* argmax tensors: as the mode wants them, or not */
    const bool with_argmax = (am & 3) == 0 ? pool_mode == DK_POOL_MAX : (am & 3) == 1 ? false : (am & 3) == 2;
    static const double scales[] = {1.0,  0.5, 0.25,     0.125, 2.0,    1.0 / 16, 0.0,
                                    -1.0, NAN, INFINITY, 1e300, 1e-300, -0.0,     3.0};
    const uint8_t sb = fz_u8(&in);
    const double spatial_scale = sb < 14 * 16 ? scales[sb % 14] : fz_f64(&in);
    const uint8_t rb = fz_u8(&in);
    static const int64_t huge_ratios[] = {INT32_MAX, (int64_t)INT32_MAX + 1, INT64_MAX, INT64_MIN, 1000, 1 << 20};
    int64_t sampling_ratio = rb < 240 ? (int64_t)(rb % 103) - 2 : huge_ratios[(rb - 240) % 6];
    /* The output size the call passes: the tensors' own, or another (refused). */
    int64_t aligned_height = PH, aligned_width = PW;
    const uint8_t ob = fz_u8(&in);
    if (ob == 1) aligned_height = fz_range(&in, -3, 12);
    if (ob == 2) aligned_width = fz_range(&in, -3, 12);
    if (ob == 3) aligned_height = (int64_t)INT32_MAX + 1;

    /* Tensors. */
    fz_tensor x, rois, out, amy, amx;
    const int64_t xs[4] = {N, C, H, W}, rs[2] = {K, 5}, os[4] = {K, C, PH, PW};
    fz_tensor_init(&x, fz_maybe_wrong(&in, dt, wrong_dtypes), 4, xs, &in, true);
    fz_tensor_init(&rois, fz_maybe_wrong(&in, dt, wrong_dtypes), 2, rs, &in, true);
    fz_tensor_init(&out, fz_maybe_wrong(&in, dt, wrong_dtypes), 4, os, &in, fz_pick(&in, 8) == 0);
    const bool half = dk_tensor_dtype(&x.t) == DK_FLOAT16 || dk_tensor_dtype(&x.t) == DK_BFLOAT16;
    const DLDataType adt = half ? dk_dtype_to_dl(DK_FLOAT32) : x.t.dtype;
    fz_tensor_init(&amy, fz_maybe_wrong(&in, adt, wrong_dtypes), 4, os, &in, fz_pick(&in, 8) == 0);
    fz_tensor_init(&amx, fz_maybe_wrong(&in, adt, wrong_dtypes), 4, os, &in, fz_pick(&in, 8) == 0);
    out.out = amy.out = amx.out = true;
    fz_fill(&x, &in);
    /* Boxes: mostly plausible, some hostile. */
    double(*box)[5] = (double(*)[5])calloc((size_t)K + 1, sizeof *box);
    if (!box) abort();
    for (int64_t k = 0; k < K; k++) {
        const uint8_t bb = fz_u8(&in);
        double b;
        if (bb < 224) b = N > 0 ? (double)(bb % N) : 0.0;
        else {
            static const double bad[] = {-1.0, 0.5, NAN, 1e20, -0.0, INFINITY, 2.0, 1.0 - 1e-9};
            b = bad[bb % 8];
            if (bb % 8 == 6) b = (double)N; /* one past the end */
        }
        fz_set(&rois, k * 5, b);
        box[k][0] = b;
        for (int j = 1; j < 5; j++) {
            const uint8_t cb = fz_u8(&in);
            const double c = cb < 200 ? ((double)cb - 40.0) / 4.0 : cb < 248 ? fz_special(cb - 200) : fz_f64(&in);
            fz_set(&rois, k * 5 + j, c);
            box[k][j] = c;
        }
    }
    /* The bound of the header comment: a call of more than ~50,000 sample evaluations is folded
     * into a cheaper one (an explicit ratio of 1..4), unless it is refused anyway. */
    if (sampling_ratio >= -1 && sampling_ratio <= INT32_MAX && spatial_scale > 0 && isfinite(spatial_scale) &&
        (pool_mode == DK_POOL_MAX || pool_mode == DK_POOL_AVG) &&
        fz_cost((const double(*)[5])box, C, H, W, K, PH, PW, spatial_scale, sampling_ratio, aligned) > 5e4)
        sampling_ratio = 1 + (sampling_ratio & 3);
    free(box);
    fz_tensor *const fwd_ts[5] = {&x, &rois, &out, &amy, &amx};
    /* Argmax tensors not passed are no part of the call's contract (they may repeat elements). */
    fz_tensor *const fwd_given[5] = {&x, &rois, &out, with_argmax ? &amy : NULL, with_argmax ? &amx : NULL};
    fz_snapshot(fwd_given, 5);
    dk_clear_error();
    dk_status st = dk_roi_align_forward(&x.t, &rois.t, &out.t, with_argmax ? &amy.t : NULL, with_argmax ? &amx.t : NULL,
                                        aligned_height, aligned_width, spatial_scale, sampling_ratio, pool_mode,
                                        aligned);
    fz_verify("roi_align_forward", st, fwd_given, 5);

    if (st == DK_OK) {
        /* Backward: grad_output in its own layout and values; argmax from forward; a fresh
         * grad_input (fully overwritten). */
        fz_tensor gout, gin;
        fz_tensor_init(&gout, fz_maybe_wrong(&in, out.t.dtype, wrong_dtypes), 4, os, &in, true);
        fz_tensor_init(&gin, fz_maybe_wrong(&in, x.t.dtype, wrong_dtypes), 4, xs, &in, fz_pick(&in, 8) == 0);
        gin.out = true;
        amy.out = amx.out = false;
        fz_fill(&gout, &in);
        fz_fill(&gin, &in); /* stale values: backward must overwrite every element */
        fz_tensor *const bwd_ts[5] = {&gout, &rois, with_argmax ? &amy : NULL, with_argmax ? &amx : NULL, &gin};
        fz_snapshot(bwd_ts, 5);
        dk_clear_error();
        st = dk_roi_align_backward(&gout.t, &rois.t, with_argmax ? &amy.t : NULL, with_argmax ? &amx.t : NULL, &gin.t,
                                   aligned_height, aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned);
        fz_verify("roi_align_backward", st, bwd_ts, 5);
        fz_tensor_free(&gout);
        fz_tensor_free(&gin);
    }
    for (int i = 0; i < 5; i++) fz_tensor_free(fwd_ts[i]);
    return 0;
}
