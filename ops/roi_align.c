/*
 * ops/roi_align.c — roi_align_forward / roi_align_backward: definitions and validation.
 *
 * Everything a kernel may assume is established here, once, for every backend: ranks, shapes,
 * dtypes, parameter ranges, and — where the RoIs are readable from the host — their values.
 */
#include "roi_align.h"

#include <math.h>
#include <stdio.h>

#include "dk_keys.h"
#include "kernels/dk_half.h"

static bool dk__is_float(dk_dtype d)
{
    return d == DK_FLOAT32 || d == DK_FLOAT64 || d == DK_FLOAT16 || d == DK_BFLOAT16;
}

/* The argmax tensors hold sample coordinates; 16 bits cannot hold them exactly. */
static dk_dtype dk__argmax_dtype(dk_dtype in)
{
    return (in == DK_FLOAT16 || in == DK_BFLOAT16) ? DK_FLOAT32 : in;
}

static dk_status dk__expect_shape(const char *op, const char *what, const dk_tensor *t, int ndim,
                                  const int64_t *shape)
{
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (same) return DK_OK;
    /* Formatting is for the error path only: this check runs on every call. */
    char want[128], got[128];
    size_t a = 0, b = 0;
    want[0] = got[0] = '\0';
    for (int i = 0; i < ndim && a < sizeof want; i++)
        a += (size_t)snprintf(want + a, sizeof want - a, "%s%lld", i ? ", " : "", (long long)shape[i]);
    for (int i = 0; i < t->ndim && b < sizeof got; i++)
        b += (size_t)snprintf(got + b, sizeof got - b, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    return dk_error(DK_EINVAL, "%s: '%s' must have shape [%s], got [%s]", op, what, want, got);
}

/* A tensor the op writes must not repeat elements (dk_tensor_repeated_dim). */
static dk_status dk__expect_distinct(const char *op, const char *what, const dk_tensor *t)
{
    const int d = t ? dk_tensor_repeated_dim(t) : -1;
    if (d < 0) return DK_OK;
    return dk_error(DK_EINVAL,
                    "%s: '%s' repeats its elements (dimension %d has stride 0, e.g. an expanded view), so "
                    "results written to it would overwrite each other; pass a tensor with distinct elements",
                    op, what, d);
}

static dk_status dk__expect_dtype(const char *op, const char *what, const dk_tensor *t, dk_dtype d)
{
    char got[64];
    if (dk_tensor_dtype(t) == d) return DK_OK;
    return dk_error(DK_ETYPE, "%s: '%s' must be %s, got %s", op, what, dk_dtype_name(d),
                    dk_dl_dtype_str(t->dtype, got, sizeof got));
}

static double dk__load(const dk_tensor *t, int64_t off)
{
    const char *p = (const char *)dk_tensor_data(t);
    switch (dk_tensor_dtype(t)) {
    case DK_FLOAT32: return ((const float *)p)[off];
    case DK_FLOAT64: return ((const double *)p)[off];
    case DK_FLOAT16: return dk_half_to_float(((const uint16_t *)p)[off]);
    case DK_BFLOAT16: return dk_bfloat16_to_float(((const uint16_t *)p)[off]);
    default: return NAN;
    }
}

/*
 * RoI values, checked when the host can read them (CPU and pinned memory). Batch indices must be
 * integers in [0, N): anything else would index another image's memory. Coordinates must be
 * finite: a NaN box has no defined bins, and torchvision silently returns zeros or garbage for
 * it, so dkit raises instead. On GPUs the kernels clamp instead of reading out of bounds.
 */
static dk_status dk__check_roi_values(const char *op, const dk_tensor *rois, int64_t n)
{
    if (dk_key_for_device_type((int32_t)rois->device.device_type) != DK_KEY_CPU) return DK_OK;
    int64_t k = rois->shape[0], s0 = dk_tensor_stride(rois, 0), s1 = dk_tensor_stride(rois, 1);
    for (int64_t i = 0; i < k; i++) {
        double b = dk__load(rois, i * s0);
        if (!(b >= 0 && b < (double)n) || b != floor(b))
            return dk_error(DK_EINDEX, "%s: rois[%lld] has batch index %g, which is not an integer in [0, %lld)",
                            op, (long long)i, b, (long long)n);
        for (int j = 1; j < 5; j++) {
            double c = dk__load(rois, i * s0 + j * s1);
            if (!isfinite(c))
                return dk_error(DK_EINVAL, "%s: rois[%lld] has a non-finite coordinate (%g)", op, (long long)i, c);
        }
    }
    return DK_OK;
}

/* Checks shared by forward and backward: `feat` is input (forward) or grad_input (backward). */
static dk_status dk__check_common(const char *op, const dk_tensor *feat, const char *feat_name,
                                  const dk_tensor *rois, const dk_tensor *pooled, const char *pooled_name,
                                  const dk_tensor *argmax_y, const dk_tensor *argmax_x, int64_t ph, int64_t pw,
                                  double spatial_scale, int64_t sampling_ratio, int64_t pool_mode)
{
    char got[64];
    dk_status st;
    if (feat->ndim != 4)
        return dk_error(DK_EINVAL, "%s: '%s' must be 4-d [N, C, H, W], got %d dimensions", op, feat_name, (int)feat->ndim);
    dk_dtype dt = dk_tensor_dtype(feat);
    if (!dk__is_float(dt))
        return dk_error(DK_ETYPE, "%s: '%s' must be float16, bfloat16, float32 or float64, got %s", op, feat_name,
                        dk_dl_dtype_str(feat->dtype, got, sizeof got));
    if (rois->ndim != 2 || rois->shape[1] != 5 || rois->shape[0] < 0)
        return dk_error(DK_EINVAL, "%s: 'rois' must have shape [K, 5] (batch_index, x1, y1, x2, y2), got %d-d%s", op,
                        (int)rois->ndim, rois->ndim != 2 ? "" : rois->shape[1] != 5 ? " with a different width" : " with K < 0");
    if ((st = dk__expect_dtype(op, "rois", rois, dt))) return st;
    /* Upper bounds: MMCV's and torchvision's kernels take these as C int; here they also keep
     * the kernels' size arithmetic (PH * grid + PW * grid, 2 * PH * PW) far from overflow. */
    if (ph <= 0 || pw <= 0 || ph > INT32_MAX || pw > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: output size must be positive and below 2^31, got (%lld, %lld)", op,
                        (long long)ph, (long long)pw);
    if (!(spatial_scale > 0) || !isfinite(spatial_scale))
        return dk_error(DK_EINVAL, "%s: spatial_scale must be a positive finite number, got %g", op, spatial_scale);
    if (sampling_ratio < -1 || sampling_ratio > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: sampling_ratio must be >= -1 (<= 0 is adaptive) and below 2^31, got %lld",
                        op, (long long)sampling_ratio);
    if (pool_mode != DK_POOL_MAX && pool_mode != DK_POOL_AVG)
        return dk_error(DK_EINVAL, "%s: pool_mode must be 0 (max) or 1 (avg), got %lld", op, (long long)pool_mode);
    for (int i = 0; i < 4; i++)
        if (feat->shape[i] < 0) return dk_error(DK_EINVAL, "%s: '%s' has a negative dimension", op, feat_name);

    int64_t shape[4] = {rois->shape[0], feat->shape[1], ph, pw};
    if ((st = dk__expect_shape(op, pooled_name, pooled, 4, shape))) return st;
    if ((st = dk__expect_dtype(op, pooled_name, pooled, dt))) return st;
    /* Kernels read argmax only in max mode; refusing them in avg mode keeps every backend from
     * having to guard against an unchecked (wrong rank, wrong size) tensor there. */
    if (pool_mode == DK_POOL_AVG && (argmax_y || argmax_x))
        return dk_error(DK_EINVAL, "%s: 'argmax_y' and 'argmax_x' are for max pooling; pass none in avg mode", op);
    if (pool_mode == DK_POOL_MAX) {
        if (!argmax_y || !argmax_x)
            return dk_error(DK_EINVAL, "%s: max pooling needs 'argmax_y' and 'argmax_x'", op);
        if ((st = dk__expect_shape(op, "argmax_y", argmax_y, 4, shape))) return st;
        if ((st = dk__expect_shape(op, "argmax_x", argmax_x, 4, shape))) return st;
        if ((st = dk__expect_dtype(op, "argmax_y", argmax_y, dk__argmax_dtype(dt)))) return st;
        if ((st = dk__expect_dtype(op, "argmax_x", argmax_x, dk__argmax_dtype(dt)))) return st;
    }
    return dk__check_roi_values(op, rois, feat->shape[0]);
}

DK_DEFINE_OP(roi_align_forward, DK_ROI_ALIGN_FORWARD_ARGS)
{
    (void)aligned;
    const char *op = "roi_align_forward";
    dk_status st = dk__check_common(op, input, "input", rois, output, "output", argmax_y, argmax_x, aligned_height,
                                    aligned_width, spatial_scale, sampling_ratio, pool_mode);
    if (!st) st = dk__expect_distinct(op, "output", output);
    if (!st) st = dk__expect_distinct(op, "argmax_y", argmax_y);
    if (!st) st = dk__expect_distinct(op, "argmax_x", argmax_x);
    return st;
}

DK_DEFINE_OP(roi_align_backward, DK_ROI_ALIGN_BACKWARD_ARGS)
{
    (void)aligned;
    const char *op = "roi_align_backward";
    dk_status st = dk__check_common(op, grad_input, "grad_input", rois, grad_output, "grad_output", argmax_y,
                                    argmax_x, aligned_height, aligned_width, spatial_scale, sampling_ratio, pool_mode);
    return st ? st : dk__expect_distinct(op, "grad_input", grad_input);
}
