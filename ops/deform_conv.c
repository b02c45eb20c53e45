/*
 * ops/deform_conv.c — deform_conv2d's forward and backward: definitions and validation, with
 * torchvision's messages where a user sees them ("the shape of the offset", "offset.shape[1] is
 * not valid", "mask.shape[1] is not valid", ...: torchvision's csrc/ops/cpu/deform_conv2d_kernel.cpp).
 * Everything a kernel may assume is established here, once, for every backend.
 */
#include "deform_conv.h"

#include "dk_check.h"
#include "kernels/deform_conv_math.h"

/* The largest parameter the references take (C ints), and far from any overflow below. */
#define DK__DC_INT_MAX INT32_MAX

/* What both directions check: the shapes of input, weight, offset and mask, the parameters,
 * and the output size, which *ho and *wo receive. */
static dk_status dk__dc_check(const char *op, const dk_tensor *input, const dk_tensor *weight, const dk_tensor *offset,
                              const dk_tensor *mask, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                              int64_t dil_h, int64_t dil_w, int64_t groups, int64_t offset_groups, int64_t *ho,
                              int64_t *wo)
{
    dk_status st;
    if ((st = dk_check_ndim(op, "input", input, 4, "[N, Cin, H, W]"))) return st;
    if ((st = dk_check_ndim(op, "weight", weight, 4, "[Cout, Cin / groups, kh, kw]"))) return st;
    if ((st = dk_check_ndim(op, "offset", offset, 4, "[N, 2 offset_groups kh kw, Ho, Wo]"))) return st;
    if (mask && (st = dk_check_ndim(op, "mask", mask, 4, "[N, offset_groups kh kw, Ho, Wo]"))) return st;
    if ((st = dk_check_float(op, "input", input))) return st;
    if ((st = dk_check_same_dtype(op, "weight", weight, "input", input))) return st;
    if ((st = dk_check_same_dtype(op, "offset", offset, "input", input))) return st;
    if (mask && (st = dk_check_same_dtype(op, "mask", mask, "input", input))) return st;
    const int64_t kh = weight->shape[2], kw = weight->shape[3];
    if (kh <= 0 || kw <= 0)
        return dk_error(DK_EINVAL, "%s: weight_h: %lld weight_w: %lld", op, (long long)kh, (long long)kw);
    if (stride_h <= 0 || stride_w <= 0 || stride_h > DK__DC_INT_MAX || stride_w > DK__DC_INT_MAX)
        return dk_error(DK_EINVAL, "%s: stride_h: %lld stride_w: %lld (positive, below 2^31)", op, (long long)stride_h,
                        (long long)stride_w);
    if (pad_h < 0 || pad_w < 0 || pad_h > DK__DC_INT_MAX || pad_w > DK__DC_INT_MAX)
        return dk_error(DK_EINVAL, "%s: pad_h: %lld pad_w: %lld (non-negative, below 2^31)", op, (long long)pad_h,
                        (long long)pad_w);
    if (dil_h <= 0 || dil_w <= 0 || dil_h > DK__DC_INT_MAX || dil_w > DK__DC_INT_MAX)
        return dk_error(DK_EINVAL, "%s: dilation_h: %lld dilation_w: %lld (positive, below 2^31)", op, (long long)dil_h,
                        (long long)dil_w);
    const int64_t n = input->shape[0], cin = input->shape[1], h = input->shape[2], w = input->shape[3];
    if (n < 0 || cin < 0 || h < 0 || w < 0) return dk_error(DK_EINVAL, "%s: 'input' has a negative dimension", op);
    if (groups <= 0 || groups > DK__DC_INT_MAX || offset_groups <= 0 || offset_groups > DK__DC_INT_MAX)
        return dk_error(DK_EINVAL, "%s: groups (%lld) and offset_groups (%lld) must be positive and below 2^31", op,
                        (long long)groups, (long long)offset_groups);
    if (cin % groups != 0 || weight->shape[1] != cin / groups)
        return dk_error(DK_EINVAL,
                        "%s: weight.shape[1] * groups must be input.shape[1]: got %lld * %lld for %lld input channels",
                        op, (long long)weight->shape[1], (long long)groups, (long long)cin);
    if (weight->shape[0] % groups != 0)
        return dk_error(DK_EINVAL, "%s: weight.shape[0] (%lld) must be a multiple of groups (%lld)", op,
                        (long long)weight->shape[0], (long long)groups);
    /* kh, kw < 2^31 each (a tensor's sizes fit memory); offset_groups < 2^31: no overflow */
    if (kh > DK__DC_INT_MAX || kw > DK__DC_INT_MAX)
        return dk_error(DK_EINVAL, "%s: kernel size %lld x %lld is too large", op, (long long)kh, (long long)kw);
    const int64_t taps = kh * kw;
    if (taps > DK__DC_INT_MAX / 2 || offset_groups * 2 * taps / (2 * taps) != offset_groups)
        return dk_error(DK_EINVAL, "%s: kernel size %lld x %lld is too large", op, (long long)kh, (long long)kw);
    if (offset->shape[1] != offset_groups * 2 * taps)
        return dk_error(DK_EINVAL, "%s: offset.shape[1] is not valid: got: %lld expected: %lld", op,
                        (long long)offset->shape[1], (long long)(offset_groups * 2 * taps));
    if (mask && mask->shape[1] != offset_groups * taps)
        return dk_error(DK_EINVAL, "%s: mask.shape[1] is not valid: got: %lld expected: %lld", op,
                        (long long)mask->shape[1], (long long)(offset_groups * taps));
    if (cin % offset_groups != 0)
        return dk_error(DK_EINVAL, "%s: input.shape[1] (%lld) must be a multiple of offset_groups (%lld)", op,
                        (long long)cin, (long long)offset_groups);
    if (offset->shape[0] != n) return dk_error(DK_EINVAL, "%s: invalid batch size of offset", op);
    if (mask && mask->shape[0] != n) return dk_error(DK_EINVAL, "%s: invalid batch size of mask", op);
    /* every term below 2^33: no overflow */
    const int64_t oh = (h + 2 * pad_h - (dil_h * (kh - 1) + 1)) / stride_h + 1;
    const int64_t ow = (w + 2 * pad_w - (dil_w * (kw - 1) + 1)) / stride_w + 1;
    if (h + 2 * pad_h < dil_h * (kh - 1) + 1 || w + 2 * pad_w < dil_w * (kw - 1) + 1 || oh <= 0 || ow <= 0)
        return dk_error(DK_EINVAL, "%s: Calculated output size too small - out_h: %lld out_w: %lld", op,
                        (long long)(h + 2 * pad_h < dil_h * (kh - 1) + 1 ? 0 : oh),
                        (long long)(w + 2 * pad_w < dil_w * (kw - 1) + 1 ? 0 : ow));
    if (offset->shape[2] != oh || offset->shape[3] != ow)
        return dk_error(DK_EINVAL, "%s: offset output dims: (%lld, %lld) - computed output dims: (%lld, %lld)", op,
                        (long long)offset->shape[2], (long long)offset->shape[3], (long long)oh, (long long)ow);
    if (mask && (mask->shape[2] != oh || mask->shape[3] != ow))
        return dk_error(DK_EINVAL, "%s: mask output dims: (%lld, %lld) - computed output dims: (%lld, %lld)", op,
                        (long long)mask->shape[2], (long long)mask->shape[3], (long long)oh, (long long)ow);
    *ho = oh;
    *wo = ow;
    return DK_OK;
}

/* `t` (named `name`) has `ref`'s shape and the input's dtype. */
static dk_status dk__dc_like(const char *op, const char *name, const dk_tensor *t, const dk_tensor *ref,
                             const dk_tensor *input)
{
    dk_status st = dk_check_shape(op, name, t, ref->ndim, ref->shape);
    return st ? st : dk_check_same_dtype(op, name, t, "input", input);
}

DK_DEFINE_OP(deform_conv2d_forward, DK_DEFORM_CONV2D_FORWARD_ARGS)
{
    static const char op[] = "deform_conv2d_forward";
    int64_t ho, wo;
    dk_status st = dk__dc_check(op, input, weight, offset, mask, stride_h, stride_w, pad_h, pad_w, dilation_h,
                                dilation_w, groups, offset_groups, &ho, &wo);
    if (st) return st;
    if (bias) {
        if ((st = dk_check_shape(op, "bias", bias, 1, (int64_t[]){weight->shape[0]}))) return st;
        if ((st = dk_check_same_dtype(op, "bias", bias, "input", input))) return st;
    }
    const int64_t shape[4] = {input->shape[0], weight->shape[0], ho, wo};
    if ((st = dk_check_shape(op, "output", output, 4, shape))) return st;
    return dk_check_same_dtype(op, "output", output, "input", input);
}

DK_DEFINE_OP(deform_conv2d_backward, DK_DEFORM_CONV2D_BACKWARD_ARGS)
{
    static const char op[] = "deform_conv2d_backward";
    int64_t ho, wo;
    dk_status st = dk__dc_check(op, input, weight, offset, mask, stride_h, stride_w, pad_h, pad_w, dilation_h,
                                dilation_w, groups, offset_groups, &ho, &wo);
    if (st) return st;
    const int64_t shape[4] = {input->shape[0], weight->shape[0], ho, wo};
    if ((st = dk_check_shape(op, "grad_output", grad_output, 4, shape))) return st;
    if ((st = dk_check_same_dtype(op, "grad_output", grad_output, "input", input))) return st;
    if ((st = dk__dc_like(op, "grad_input", grad_input, input, input))) return st;
    if ((st = dk__dc_like(op, "grad_weight", grad_weight, weight, input))) return st;
    if ((st = dk__dc_like(op, "grad_offset", grad_offset, offset, input))) return st;
    if (geometry != DK_DEFORM_CONV_TORCHVISION && geometry != DK_DEFORM_CONV_MMCV)
        return dk_error(DK_EINVAL, "%s: geometry must be 0 (torchvision) or 1 (mmcv), got %lld", op,
                        (long long)geometry);
    if (grad_mask && !mask) return dk_error(DK_EINVAL, "%s: grad_mask given without a mask", op);
    if (grad_mask && (st = dk__dc_like(op, "grad_mask", grad_mask, mask, input))) return st;
    if (grad_bias) {
        if ((st = dk_check_shape(op, "grad_bias", grad_bias, 1, (int64_t[]){weight->shape[0]}))) return st;
        if ((st = dk_check_same_dtype(op, "grad_bias", grad_bias, "input", input))) return st;
    }
    return DK_OK;
}
