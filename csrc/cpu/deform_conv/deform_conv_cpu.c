/*
 * deform_conv/deform_conv_cpu.c — deform_conv2d forward and backward on the CPU: the entry
 * points the dispatcher calls, the products, and their registration. The sampling math is
 * kernels/deform_conv_math.h's; deform_conv_cpu.h says how the work is split. The argument
 * checks were done by ops/deform_conv.c.
 */
#include "deform_conv_cpu.h"

#include <stdbool.h>

#include "dk_gemm.h"
#include "dk_registry.h"
#include "kernels/dk_template.h"

/* C = alpha op(A) op(B) + beta C (Note [dk_sgemm's contract]), by compute type: dk_sgemm for
 * float (float16, bfloat16 and float32 storage); a plain blocked loop for double, which
 * dk_sgemm does not take (float64 is for checking gradients, not for speed). */
static void dk__dc_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                            const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m > 0 && n > 0) dk_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void dk__dc_gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                            int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
    enum { BK = 64 };
    for (int64_t l0 = 0; l0 < k; l0 += BK) {
        const int64_t l1 = l0 + BK < k ? l0 + BK : k;
        for (int64_t i = 0; i < m; i++) {
            double *ci = c + i * ldc;
            for (int64_t l = l0; l < l1; l++) {
                const double ail = alpha * (ta ? a[l * lda + i] : a[i * lda + l]);
                if (!tb) {
                    const double *bl = b + l * ldb;
                    for (int64_t j = 0; j < n; j++) ci[j] += ail * bl[j];
                } else {
                    for (int64_t j = 0; j < n; j++) ci[j] += ail * b[j * ldb + l];
                }
            }
        }
    }
}

#define DK_TEMPLATE "deform_conv/deform_conv_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

/* The call's sizes, and the block of output positions per task (Note [Deformable convolution
 * on a CPU]): the fewest blocks whose columns stay under the cap, of equal size. */
static dk__dc_ctx dk__dc_ctx_of(const dk_tensor *input, const dk_tensor *weight, const dk_tensor *offset,
                                const dk_tensor *mask, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                                int64_t dw, int64_t groups, int64_t og, int64_t Ho, int64_t Wo)
{
    dk__dc_ctx cx = {.input = input,
                     .weight = weight,
                     .offset = offset,
                     .mask = mask,
                     .N = input->shape[0],
                     .Cin = input->shape[1],
                     .H = input->shape[2],
                     .W = input->shape[3],
                     .Cout = weight->shape[0],
                     .kh = weight->shape[2],
                     .kw = weight->shape[3],
                     .Ho = Ho,
                     .Wo = Wo,
                     .P = Ho * Wo,
                     .sh = sh,
                     .sw = sw,
                     .ph = ph,
                     .pw = pw,
                     .dh = dh,
                     .dw = dw,
                     .groups = groups,
                     .og = og};
    cx.kk = cx.kh * cx.kw;
    cx.K = cx.Cin * cx.kk;
    cx.Kg = cx.K / groups;
    cx.Coutg = cx.Cout / groups;
    cx.cpog = cx.Cin / og;
    const size_t tsize = dk_tensor_dtype(input) == DK_FLOAT64 ? 8 : 4;
    const size_t row = dk_sat_mul((size_t)(cx.K > 0 ? cx.K : 1), tsize);
    const int64_t fit = (int64_t)(DK__DC_COLUMN_BYTES / row > 0 ? DK__DC_COLUMN_BYTES / row : 1);
    const int64_t nb = cx.P > 0 ? (cx.P + fit - 1) / fit : 1;
    cx.block = cx.P > 0 ? (cx.P + nb - 1) / nb : 1;
    cx.blocks = cx.P > 0 ? (cx.P + cx.block - 1) / cx.block : 0;
    return cx;
}

dk_status dk_deform_conv2d_forward_cpu(const dk_tensor *input, const dk_tensor *weight, const dk_tensor *offset,
                                       const dk_tensor *mask, const dk_tensor *bias, dk_tensor *output,
                                       int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                       int64_t dilation_h, int64_t dilation_w, int64_t groups, int64_t offset_groups)
{
    dk__dc_ctx cx = dk__dc_ctx_of(input, weight, offset, mask, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                                  groups, offset_groups, output->shape[2], output->shape[3]);
    cx.bias = bias;
    cx.output = output;
    if (dk_tensor_numel(output) == 0) return DK_OK; /* nothing to write */
    /* work: a GEMM's multiply-adds and the samples' 4 corners */
    int nthreads = dk_parallel_threads_for(cx.N * cx.P * (cx.K * cx.Coutg + 8 * cx.K));
    if ((int64_t)nthreads > cx.N * cx.blocks) nthreads = (int)(cx.N * cx.blocks);
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__dc_run, (&cx, &ar, nthreads, 0),
                    st = dk_error(DK_ETYPE, "deform_conv2d_forward: unsupported dtype"))
    dk_arena_free(&ar);
    return st;
}

/* Zeroes a tensor of any strides (grad_weight and grad_bias of an empty batch). */
static void dk__dc_zero(dk_tensor *t)
{
    if (!t || dk_tensor_numel(t) == 0) return;
    const size_t size = dk_tensor_dtype(t) == DK_FLOAT64 ? 8 : dk_tensor_dtype(t) == DK_FLOAT32 ? 4 : 2;
    int64_t idx[8] = {0};
    const int nd = t->ndim;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += idx[d] * dk_tensor_stride(t, d);
        char *p = (char *)dk_tensor_data(t) + off * (int64_t)size;
        for (size_t b = 0; b < size; b++) p[b] = 0; /* +0.0 in every float format */
        int d = nd - 1;
        while (d >= 0 && ++idx[d] == t->shape[d]) idx[d--] = 0;
        if (d < 0) return;
    }
}

dk_status dk_deform_conv2d_backward_cpu(const dk_tensor *grad_output, const dk_tensor *input, const dk_tensor *weight,
                                        const dk_tensor *offset, const dk_tensor *mask, dk_tensor *grad_input,
                                        dk_tensor *grad_weight, dk_tensor *grad_offset, dk_tensor *grad_mask,
                                        dk_tensor *grad_bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                        int64_t pad_w, int64_t dilation_h, int64_t dilation_w, int64_t groups,
                                        int64_t offset_groups, int64_t geometry)
{
    dk__dc_ctx cx = dk__dc_ctx_of(input, weight, offset, mask, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                                  groups, offset_groups, grad_output->shape[2], grad_output->shape[3]);
    cx.out = grad_output;
    cx.grad_input = grad_input;
    cx.grad_weight = grad_weight;
    cx.grad_offset = grad_offset;
    cx.grad_mask = grad_mask;
    cx.grad_bias = grad_bias;
    cx.geometry = (int)geometry;
    if (cx.N == 0) { /* no image: the weights and the bias have no gradient */
        dk__dc_zero(grad_weight);
        dk__dc_zero(grad_bias);
        return DK_OK;
    }
    /* Note [Deformable convolution on a CPU]: the slots depend on the batch only */
    cx.slots = cx.N < DK__DC_SLOTS ? cx.N : DK__DC_SLOTS;
    int nthreads = dk_parallel_threads_for(cx.N * cx.P * (2 * cx.K * cx.Coutg + 16 * cx.K));
    if ((int64_t)nthreads > cx.slots) nthreads = (int)cx.slots;
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__dc_run, (&cx, &ar, nthreads, 1),
                    st = dk_error(DK_ETYPE, "deform_conv2d_backward: unsupported dtype"))
    dk_arena_free(&ar);
    return st;
}

DK_REGISTER_DEVICE_IMPL(deform_conv2d_forward, CPU, dk_deform_conv2d_forward_cpu)
DK_REGISTER_DEVICE_IMPL(deform_conv2d_backward, CPU, dk_deform_conv2d_backward_cpu)
