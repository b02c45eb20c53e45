/*
 * ops/roi_pool.c — the RoI pooling family's ops (roi_pool, ps_roi_pool, ps_roi_align, forward
 * and backward): definitions and validation. Everything a
 * kernel may assume is established here, once, for every backend; the core has already refused
 * outputs that overlap anything (Note [Aliasing] in dk_check.h).
 */
#include "roi_pool.h"

#include <float.h>
#include <math.h>

#include "dk_check.h"

/* A positive finite spatial_scale, also in float32, in which the kernels compute 16- and 32-bit
 * inputs (Note [Scale in the compute type] in ops/roi_align.c). */
static dk_status dk__check_scale(const char *op, double spatial_scale, dk_dtype dt)
{
    if (!(spatial_scale > 0) || !isfinite(spatial_scale))
        return dk_error(DK_EINVAL, "%s: spatial_scale must be a positive finite number, got %g", op, spatial_scale);
    if (dt != DK_FLOAT64 && (isinf((float)spatial_scale) || (float)spatial_scale == 0.0f))
        return dk_error(DK_EINVAL, "%s: spatial_scale (%g) %s float32, in which %s inputs are computed", op,
                        spatial_scale, isinf((float)spatial_scale) ? "overflows" : "underflows to 0 in",
                        dk_dtype_name(dt));
    return DK_OK;
}

/* argmax: int16, int32 or int64 (ops/roi_pool.h); the narrower ones only where they hold every
 * plane index h W + w. */
static dk_status dk__check_argmax(const char *op, const dk_tensor *argmax, const int64_t shape[4], int64_t H, int64_t W)
{
    dk_status st;
    if ((st = dk_check_shape(op, "argmax", argmax, 4, shape))) return st;
    const dk_dtype dt = dk_tensor_dtype(argmax);
    if (dt != DK_INT16 && dt != DK_INT32 && dt != DK_INT64) {
        char got[64];
        return dk_error(DK_ETYPE, "%s: 'argmax' must be int16, int32 or int64, got %s", op,
                        dk_dl_dtype_str(argmax->dtype, got, sizeof got));
    }
    const int64_t most = dt == DK_INT16 ? INT16_MAX : dt == DK_INT32 ? INT32_MAX : INT64_MAX;
    if (W > 0 && H > most / W)
        return dk_error(DK_EINVAL, "%s: an %s 'argmax' cannot index a plane of %lld x %lld pixels; use %s", op,
                        dk_dtype_name(dt), (long long)H, (long long)W, dt == DK_INT16 ? "int32" : "int64");
    return DK_OK;
}

DK_DEFINE_OP(roi_pool_forward, DK_ROI_POOL_FORWARD_ARGS)
{
    static const char op[] = "roi_pool_forward";
    dk_status st;
    if ((st = dk_check_ndim(op, "input", input, 4, "[N, C, H, W]"))) return st;
    if ((st = dk_check_float(op, "input", input))) return st;
    const dk_dtype dt = dk_tensor_dtype(input);
    if ((st = dk_check_rois(op, rois, dt))) return st;
    /* C ints in both references' kernels; here they also keep bin arithmetic far from overflow */
    if (pooled_height <= 0 || pooled_width <= 0 || pooled_height > INT32_MAX || pooled_width > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: output size must be positive and below 2^31, got (%lld, %lld)", op,
                        (long long)pooled_height, (long long)pooled_width);
    if ((st = dk__check_scale(op, spatial_scale, dt))) return st;
    if (geometry != DK_ROI_POOL_TORCHVISION && geometry != DK_ROI_POOL_MMCV)
        return dk_error(DK_EINVAL, "%s: geometry must be 0 (torchvision) or 1 (mmcv), got %lld", op,
                        (long long)geometry);
    for (int i = 0; i < 4; i++)
        if (input->shape[i] < 0) return dk_error(DK_EINVAL, "%s: 'input' has a negative dimension", op);
    const int64_t shape[4] = {rois->shape[0], input->shape[1], pooled_height, pooled_width};
    if ((st = dk_check_shape(op, "output", output, 4, shape))) return st;
    if ((st = dk_check_dtype(op, "output", output, dt))) return st;
    if (argmax && (st = dk__check_argmax(op, argmax, shape, input->shape[2], input->shape[3]))) return st;
    if (dk_tensor_numel(output) == 0) return DK_OK; /* no work: a kernel never reads the rois */
    return dk_check_roi_values(op, rois, input->shape[0], spatial_scale);
}

/*
 * The backward trusts argmax only as far as it can check it cheaply: its shape and dtype. Its
 * values index one (batch_index, c) plane of grad_input, so each kernel ignores a value outside
 * [-1, H * W) rather than write out of bounds (argmax is the forward's output, unless the caller
 * made one up).
 */
DK_DEFINE_OP(roi_pool_backward, DK_ROI_POOL_BACKWARD_ARGS)
{
    static const char op[] = "roi_pool_backward";
    dk_status st;
    if ((st = dk_check_ndim(op, "grad_input", grad_input, 4, "[N, C, H, W]"))) return st;
    if ((st = dk_check_float(op, "grad_input", grad_input))) return st;
    const dk_dtype dt = dk_tensor_dtype(grad_input);
    if ((st = dk_check_rois(op, rois, dt))) return st;
    if ((st = dk_check_ndim(op, "grad_output", grad_output, 4, "[K, C, PH, PW]"))) return st;
    for (int i = 0; i < 4; i++)
        if (grad_input->shape[i] < 0 || grad_output->shape[i] < 0)
            return dk_error(DK_EINVAL, "%s: a negative dimension", op);
    const int64_t shape[4] = {rois->shape[0], grad_input->shape[1], grad_output->shape[2], grad_output->shape[3]};
    if ((st = dk_check_shape(op, "grad_output", grad_output, 4, shape))) return st;
    if ((st = dk_check_dtype(op, "grad_output", grad_output, dt))) return st;
    if ((st = dk__check_argmax(op, argmax, shape, grad_input->shape[2], grad_input->shape[3]))) return st;
    if (dk_tensor_numel(grad_output) == 0) return DK_OK;
    return dk_check_roi_values(op, rois, grad_input->shape[0], 1.0);
}

/* ps_roi_pool: `feat` is input or grad_input, `pooled` output or grad_output, whose last two
 * sizes are the output size. */
static dk_status dk__check_ps(const char *op, const dk_tensor *feat, const char *feat_name, const dk_tensor *rois,
                              const dk_tensor *pooled, const char *pooled_name, double spatial_scale)
{
    dk_status st;
    if ((st = dk_check_ndim(op, feat_name, feat, 4, "[N, C, H, W]"))) return st;
    if ((st = dk_check_float(op, feat_name, feat))) return st;
    const dk_dtype dt = dk_tensor_dtype(feat);
    if ((st = dk_check_rois(op, rois, dt))) return st;
    if ((st = dk_check_ndim(op, pooled_name, pooled, 4, "[K, C / (PH PW), PH, PW]"))) return st;
    for (int i = 0; i < 4; i++)
        if (feat->shape[i] < 0 || pooled->shape[i] < 0) return dk_error(DK_EINVAL, "%s: a negative dimension", op);
    const int64_t ph = pooled->shape[2], pw = pooled->shape[3];
    if (ph <= 0 || pw <= 0 || ph > INT32_MAX || pw > INT32_MAX)
        return dk_error(DK_EINVAL, "%s: output size must be positive and below 2^31, got (%lld, %lld)", op,
                        (long long)ph, (long long)pw);
    /* ph, pw < 2^31: their product fits int64 */
    if (feat->shape[1] % (ph * pw) != 0)
        return dk_error(DK_EINVAL,
                        "%s: input channels must be a multiple of pooling height * pooling width, got %lld channels "
                        "for %lld x %lld bins",
                        op, (long long)feat->shape[1], (long long)ph, (long long)pw);
    if ((st = dk__check_scale(op, spatial_scale, dt))) return st;
    const int64_t shape[4] = {rois->shape[0], feat->shape[1] / (ph * pw), ph, pw};
    if ((st = dk_check_shape(op, pooled_name, pooled, 4, shape))) return st;
    if ((st = dk_check_dtype(op, pooled_name, pooled, dt))) return st;
    if (dk_tensor_numel(pooled) == 0) return DK_OK;
    return dk_check_roi_values(op, rois, feat->shape[0], spatial_scale);
}

DK_DEFINE_OP(ps_roi_pool_forward, DK_PS_ROI_POOL_FORWARD_ARGS)
{
    return dk__check_ps("ps_roi_pool_forward", input, "input", rois, output, "output", spatial_scale);
}

DK_DEFINE_OP(ps_roi_pool_backward, DK_PS_ROI_POOL_BACKWARD_ARGS)
{
    return dk__check_ps("ps_roi_pool_backward", grad_input, "grad_input", rois, grad_output, "grad_output",
                        spatial_scale);
}

/* sampling_ratio: a C int in torchvision's kernels; every value <= 0 means the adaptive grid. */
static dk_status dk__check_sampling_ratio(const char *op, int64_t sampling_ratio)
{
    if (sampling_ratio > INT32_MAX || sampling_ratio < INT32_MIN)
        return dk_error(DK_EINVAL, "%s: sampling_ratio must fit a 32-bit int (<= 0 is adaptive), got %lld", op,
                        (long long)sampling_ratio);
    return DK_OK;
}

DK_DEFINE_OP(ps_roi_align_forward, DK_PS_ROI_ALIGN_FORWARD_ARGS)
{
    static const char op[] = "ps_roi_align_forward";
    dk_status st = dk__check_sampling_ratio(op, sampling_ratio);
    return st ? st : dk__check_ps(op, input, "input", rois, output, "output", spatial_scale);
}

DK_DEFINE_OP(ps_roi_align_backward, DK_PS_ROI_ALIGN_BACKWARD_ARGS)
{
    static const char op[] = "ps_roi_align_backward";
    dk_status st = dk__check_sampling_ratio(op, sampling_ratio);
    return st ? st : dk__check_ps(op, grad_input, "grad_input", rois, grad_output, "grad_output", spatial_scale);
}
