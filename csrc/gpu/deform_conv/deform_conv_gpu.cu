/*
 * deform_conv_gpu.cu — deform_conv2d forward and backward on CUDA and HIP (and on the host, for
 * the tests): the entry points the backend registers and their dtype switches. The kernels are
 * deform_conv_gpu_tmpl.cuh; deform_conv_gpu.h has the Note.
 */
#include "deform_conv_gpu.h"

#include "dk_determinism.h"
#include "dk_gpu_status.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "dk_tunables.h"
#include "kernels/deform_conv_math.h"

/* Note [Deformable convolution on a GPU]: 1 the tiled kernels, 0 the direct ones. */
DK_TUNABLE(dk__dc_gpu_tiled, "deform_conv.gpu_tiled", 1, 0, 1,
           "deform_conv2d on a GPU: 1 tiled kernels (columns in shared memory, grad_weight by fixed chunks), "
           "0 the direct kernels (one thread per output element or weight)")

/* The most column gradients the tiled backward holds at once, images in batches beyond (tests
 * set it small to run several batches). */
DK_TUNABLE(dk__dc_gpu_gcol_elems, "deform_conv.gpu_column_elements", (int64_t)1 << 24, 1, (int64_t)1 << 40,
           "deform_conv2d backward on a GPU, tiled: the most column gradients held at once (images in batches)")

/* The tiled kernels' tiles (Note [Deformable convolution on a GPU]); their thread layouts assume
 * DK_DC_THREADS = 256 = 16 x 16 and tiles of 32 rows and positions (64 for DK_DC_FO). */
#define DK_DC_THREADS 256
#define DK_DC_P 32  /* positions per tile */
#define DK_DC_K 32  /* column rows (channel, tap) per tile */
#define DK_DC_FO 64 /* output channels per forward tile */
#define DK_DC_WO 32 /* output channels per grad_weight tile */
/* the most blocks a tiled launch asks for: its kernels loop over their tiles beyond */
#define DK_DC_MAX_BLOCKS (1 << 20)
/* grad_weight's and grad_bias's chunks aim at this many blocks in all (several per SM of any
 * current GPU), and their scratch at most DK_DC_MAX_PARTS partial sums */
#define DK_DC_BLOCKS_AIM 1024
#define DK_DC_MAX_PARTS ((int64_t)1 << 24)

static unsigned dk__dc_gpu_grid(int64_t tiles)
{
    return (unsigned)(tiles < 1 ? 1 : tiles > DK_DC_MAX_BLOCKS ? DK_DC_MAX_BLOCKS : tiles);
}

/* The chunks of P positions for a reduction of `tiles` tiles with `outputs` sums each chunk:
 * enough chunks to reach DK_DC_BLOCKS_AIM blocks, each at least `step` positions (and a
 * multiple of it), within DK_DC_MAX_PARTS partial sums. The sizes alone decide them, so the
 * order of every sum is fixed. */
static void dk__dc_gpu_chunks(int64_t P, int64_t tiles, int64_t outputs, int64_t step, int64_t *chunks, int64_t *chunk)
{
    int64_t n = tiles > 0 ? (DK_DC_BLOCKS_AIM + tiles - 1) / tiles : 1;
    const int64_t most = P / step > 1 ? P / step : 1;
    if (n > most) n = most;
    if (outputs > 0 && n > DK_DC_MAX_PARTS / outputs) n = DK_DC_MAX_PARTS / outputs;
    if (n < 1) n = 1;
    int64_t c = (P + n - 1) / n;
    c = (c + step - 1) / step * step;
    if (c < step) c = step;
    *chunk = c;
    *chunks = (P + c - 1) / c > 1 ? (P + c - 1) / c : 1;
}

#define DK_TEMPLATE "deform_conv/deform_conv_gpu_tmpl.cuh"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

static void dk__dc_gpu_strides(const dk_tensor *t, int64_t s[4])
{
    for (int d = 0; d < 4; d++) s[d] = t ? dk_tensor_stride(t, d) : 0;
}

static dk__dc_gpu_args dk__dc_gpu_args_of(const dk_tensor *input, const dk_tensor *weight, const dk_tensor *offset,
                                          const dk_tensor *mask, const dk_tensor *out, int64_t sh, int64_t sw,
                                          int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, int64_t og)
{
    dk__dc_gpu_args a;
    a.N = input->shape[0], a.Cin = input->shape[1], a.H = input->shape[2], a.W = input->shape[3];
    a.Cout = weight->shape[0], a.kh = weight->shape[2], a.kw = weight->shape[3];
    a.Ho = out->shape[2], a.Wo = out->shape[3];
    a.sh = sh, a.sw = sw, a.ph = ph, a.pw = pw, a.dh = dh, a.dw = dw, a.groups = groups, a.og = og;
    a.cpg = a.Cin / groups, a.opg = a.Cout / groups, a.cpog = a.Cin / og, a.kk = a.kh * a.kw;
    a.geometry = DK_DEFORM_CONV_TORCHVISION;
    a.has_mask = mask != NULL, a.has_bias = 0;
    dk__dc_gpu_strides(input, a.x_s), dk__dc_gpu_strides(weight, a.w_s), dk__dc_gpu_strides(offset, a.off_s);
    dk__dc_gpu_strides(mask, a.m_s), dk__dc_gpu_strides(out, a.o_s);
    a.b_s = 0;
    for (int d = 0; d < 4; d++) a.gx_s[d] = a.gw_s[d] = a.goff_s[d] = a.gm_s[d] = 0;
    a.gb_s = 0;
    return a;
}

extern "C" dk_status dk_deform_conv2d_forward_gpu(const dk_tensor *input, const dk_tensor *weight,
                                                  const dk_tensor *offset, const dk_tensor *mask, const dk_tensor *bias,
                                                  dk_tensor *output, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                                  int64_t pad_w, int64_t dilation_h, int64_t dilation_w, int64_t groups,
                                                  int64_t offset_groups)
{
    dk__dc_gpu_args a = dk__dc_gpu_args_of(input, weight, offset, mask, output, stride_h, stride_w, pad_h, pad_w,
                                           dilation_h, dilation_w, groups, offset_groups);
    a.has_bias = bias != NULL;
    a.b_s = bias ? dk_tensor_stride(bias, 0) : 0;
    if (dk_tensor_numel(output) == 0) return DK_OK; /* nothing to write */
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__dc_gpu_forward,
                    (input, weight, offset, mask, bias, output, &a, dk_tunable(&dk__dc_gpu_tiled) != 0, stream),
                    st = dk__gpu_unsupported("deform_conv2d_forward", input))
    dk_device_guard_exit(&g);
    return st;
}

extern "C" dk_status dk_deform_conv2d_backward_gpu(const dk_tensor *grad_output, const dk_tensor *input,
                                                   const dk_tensor *weight, const dk_tensor *offset,
                                                   const dk_tensor *mask, dk_tensor *grad_input, dk_tensor *grad_weight,
                                                   dk_tensor *grad_offset, dk_tensor *grad_mask, dk_tensor *grad_bias,
                                                   int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                                   int64_t dilation_h, int64_t dilation_w, int64_t groups,
                                                   int64_t offset_groups, int64_t geometry)
{
    dk__dc_gpu_args a = dk__dc_gpu_args_of(input, weight, offset, mask, grad_output, stride_h, stride_w, pad_h, pad_w,
                                           dilation_h, dilation_w, groups, offset_groups);
    a.geometry = (int)geometry;
    dk__dc_gpu_strides(grad_input, a.gx_s), dk__dc_gpu_strides(grad_weight, a.gw_s);
    dk__dc_gpu_strides(grad_offset, a.goff_s), dk__dc_gpu_strides(grad_mask, a.gm_s);
    a.gb_s = grad_bias ? dk_tensor_stride(grad_bias, 0) : 0;
    dk_device_guard g;
    dk_status st = dk__gpu_enter(&g, input->device);
    if (st) return st;
    void *stream = dk_current_stream(input->device);
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__dc_gpu_backward,
                    (grad_output, input, weight, offset, mask, grad_input, grad_weight, grad_offset, grad_mask,
                     grad_bias, &a, dk_deterministic(), dk_tunable(&dk__dc_gpu_tiled) != 0,
                     dk_tunable(&dk__dc_gpu_gcol_elems), stream),
                    st = dk__gpu_unsupported("deform_conv2d_backward", input))
    dk_device_guard_exit(&g);
    return st;
}

/* Note [GPU kernels register themselves] in dk_gpu_kernels.h */
DK_GPU_KERNEL(deform_conv2d_forward, dk_deform_conv2d_forward_gpu);
DK_GPU_KERNEL(deform_conv2d_backward, dk_deform_conv2d_backward_gpu);
