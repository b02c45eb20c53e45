/*
 * ops/roi_align.c — roi_align_forward / roi_align_backward: definitions and validation.
 *
 * Everything a kernel may assume is established here, once, for every backend: ranks, shapes,
 * dtypes, parameter ranges, and — where the RoIs are readable from the host — their values.
 * The core has already refused outputs that overlap anything (Note [Aliasing] in dk_check.h).
 */
#include "roi_align.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "dk_check.h"

/* The argmax tensors hold sample coordinates; 16 bits cannot hold them exactly. */
static dk_dtype dk__argmax_dtype(dk_dtype in) { return (in == DK_FLOAT16 || in == DK_BFLOAT16) ? DK_FLOAT32 : in; }

/* spatial_scale, for every op of the family. */
static dk_status dk__check_scale(const char *op, double spatial_scale, dk_dtype dt)
{
    if (!(spatial_scale > 0) || !isfinite(spatial_scale))
        return dk_error(DK_EINVAL, "%s: spatial_scale must be a positive finite number, got %g", op, spatial_scale);
    /* Note [Scale in the compute type]
     * Kernels compute float16, bfloat16 and float32 inputs in float32 (kernels/roi_align_math.h),
     * spatial_scale included: a scale that is finite as a double but becomes infinite or 0 in
     * float32 (1e300, 1e-300) would turn every box into infinities or a point, and the output
     * into zeros, silently. So it must be a positive finite float32 there, and each box
     * coordinate times it must stay finite in the compute type (dk__check_roi_values). */
    if (dt != DK_FLOAT64 && (isinf((float)spatial_scale) || (float)spatial_scale == 0.0f))
        return dk_error(DK_EINVAL,
                        "%s: spatial_scale (%g) %s float32, in which %s inputs are computed; it must lie within "
                        "[%g, %g]",
                        op, spatial_scale, isinf((float)spatial_scale) ? "overflows" : "underflows to 0 in",
                        dk_dtype_name(dt), (double)FLT_TRUE_MIN, (double)FLT_MAX);
    return DK_OK;
}

/* Checks shared by forward and backward: `feat` is input (forward) or grad_input (backward). */
static dk_status dk__check_common(const char *op, const dk_tensor *feat, const char *feat_name, const dk_tensor *rois,
                                  const dk_tensor *pooled, const char *pooled_name, const dk_tensor *argmax_y,
                                  const dk_tensor *argmax_x, int64_t ph, int64_t pw, double spatial_scale,
                                  int64_t sampling_ratio, int64_t pool_mode)
{
    dk_status st;
    if ((st = dk_check_ndim(op, feat_name, feat, 4, "[N, C, H, W]"))) return st;
    if ((st = dk_check_float(op, feat_name, feat))) return st;
    const dk_dtype dt = dk_tensor_dtype(feat);
    if ((st = dk_check_rois(op, rois, dt))) return st;
    /* Upper bounds: MMCV's and torchvision's kernels take these as C int; here they also keep
     * the kernels' size arithmetic (PH * grid + PW * grid, 2 * PH * PW) far from overflow. */
    if (ph <= 0 || pw <= 0 || ph > INT32_MAX || pw > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: output size must be positive and below 2^31, got (%lld, %lld)", op,
                        (long long)ph, (long long)pw);
    if ((st = dk__check_scale(op, spatial_scale, dt))) return st;
    if (sampling_ratio < -1 || sampling_ratio > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: sampling_ratio must be >= -1 (<= 0 is adaptive) and below 2^31, got %lld", op,
                        (long long)sampling_ratio);
    if (pool_mode != DK_POOL_MAX && pool_mode != DK_POOL_AVG)
        return dk_error(DK_EINVAL, "%s: pool_mode must be 0 (max) or 1 (avg), got %lld", op, (long long)pool_mode);
    for (int i = 0; i < 4; i++)
        if (feat->shape[i] < 0) return dk_error(DK_EINVAL, "%s: '%s' has a negative dimension", op, feat_name);

    const int64_t shape[4] = {rois->shape[0], feat->shape[1], ph, pw};
    if ((st = dk_check_shape(op, pooled_name, pooled, 4, shape))) return st;
    if ((st = dk_check_dtype(op, pooled_name, pooled, dt))) return st;
    /* Kernels read argmax only in max mode; refusing them in avg mode keeps every backend from
     * having to guard against an unchecked (wrong rank, wrong size) tensor there. */
    if (pool_mode == DK_POOL_AVG && (argmax_y || argmax_x))
        return dk_error(DK_EINVAL, "%s: 'argmax_y' and 'argmax_x' are for max pooling; pass none in avg mode", op);
    if (pool_mode == DK_POOL_MAX) {
        if (!argmax_y || !argmax_x) return dk_error(DK_EINVAL, "%s: max pooling needs 'argmax_y' and 'argmax_x'", op);
        const dk_dtype adt = dk__argmax_dtype(dt);
        if ((st = dk_check_shape(op, "argmax_y", argmax_y, 4, shape))) return st;
        if ((st = dk_check_shape(op, "argmax_x", argmax_x, 4, shape))) return st;
        if ((st = dk_check_dtype(op, "argmax_y", argmax_y, adt))) return st;
        if ((st = dk_check_dtype(op, "argmax_x", argmax_x, adt))) return st;
    }
    /* No work, nothing read: a kernel never looks at the RoIs of an empty output. */
    if (dk_tensor_numel(pooled) == 0) return DK_OK;
    return dk_check_roi_values(op, rois, feat->shape[0], spatial_scale);
}

DK_DEFINE_OP(roi_align_forward, DK_ROI_ALIGN_FORWARD_ARGS)
{
    (void)aligned;
    return dk__check_common("roi_align_forward", input, "input", rois, output, "output", argmax_y, argmax_x,
                            aligned_height, aligned_width, spatial_scale, sampling_ratio, pool_mode);
}

DK_DEFINE_OP(roi_align_backward, DK_ROI_ALIGN_BACKWARD_ARGS)
{
    (void)aligned;
    return dk__check_common("roi_align_backward", grad_input, "grad_input", rois, grad_output, "grad_output", argmax_y,
                            argmax_x, aligned_height, aligned_width, spatial_scale, sampling_ratio, pool_mode);
}

/* roi_align_rotated's checks, forward and backward: `feat` is input or grad_input, `pooled`
 * output or grad_output. */
static dk_status dk__check_rotated(const char *op, const dk_tensor *feat, const char *feat_name, const dk_tensor *rois,
                                   const dk_tensor *pooled, const char *pooled_name, int64_t ph, int64_t pw,
                                   double spatial_scale, int64_t sampling_ratio)
{
    dk_status st;
    if ((st = dk_check_ndim(op, feat_name, feat, 4, "[N, C, H, W]"))) return st;
    if ((st = dk_check_float(op, feat_name, feat))) return st;
    const dk_dtype dt = dk_tensor_dtype(feat);
    if ((st = dk_check_rotated_rois(op, rois, dt))) return st;
    if (ph <= 0 || pw <= 0 || ph > INT32_MAX || pw > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: output size must be positive and below 2^31, got (%lld, %lld)", op,
                        (long long)ph, (long long)pw);
    if ((st = dk__check_scale(op, spatial_scale, dt))) return st;
    /* MMCV's C int; every value <= 0 is adaptive there, and here */
    if (sampling_ratio < INT32_MIN || sampling_ratio > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: sampling_ratio must be a C int (<= 0 is adaptive), got %lld", op,
                        (long long)sampling_ratio);
    for (int i = 0; i < 4; i++)
        if (feat->shape[i] < 0) return dk_error(DK_EINVAL, "%s: '%s' has a negative dimension", op, feat_name);
    const int64_t shape[4] = {rois->shape[0], feat->shape[1], ph, pw};
    if ((st = dk_check_shape(op, pooled_name, pooled, 4, shape))) return st;
    if ((st = dk_check_dtype(op, pooled_name, pooled, dt))) return st;
    if (dk_tensor_numel(pooled) == 0) return DK_OK; /* no work: a kernel never reads the rois */
    return dk_check_rotated_roi_values(op, rois, feat->shape[0], spatial_scale);
}

DK_DEFINE_OP(roi_align_rotated_forward, DK_ROI_ALIGN_ROTATED_FORWARD_ARGS)
{
    (void)aligned;
    (void)clockwise;
    return dk__check_rotated("roi_align_rotated_forward", input, "input", rois, output, "output", pooled_height,
                             pooled_width, spatial_scale, sampling_ratio);
}

/* The output size is grad_output's. */
DK_DEFINE_OP(roi_align_rotated_backward, DK_ROI_ALIGN_ROTATED_BACKWARD_ARGS)
{
    (void)aligned;
    (void)clockwise;
    static const char op[] = "roi_align_rotated_backward";
    dk_status st;
    if ((st = dk_check_ndim(op, "grad_output", grad_output, 4, "[K, C, PH, PW]"))) return st;
    return dk__check_rotated(op, grad_input, "grad_input", rois, grad_output, "grad_output", grad_output->shape[2],
                             grad_output->shape[3], spatial_scale, sampling_ratio);
}
