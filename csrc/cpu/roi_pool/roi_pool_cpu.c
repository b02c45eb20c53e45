/*
 * roi_pool/roi_pool_cpu.c — RoIPool forward and backward on the CPU: the entry points the
 * dispatcher calls, and their registration. The bins and the max are kernels/roi_pool_math.h's;
 * roi_pool_cpu.h says how the work is split. The argument checks were done by ops/roi_pool.c.
 */
#include "ps_roi_pool_cpu.h" /* and roi_pool_tiles_cpu.h, roi_pool_cpu.h */

#include "dk_registry.h"
#include "kernels/dk_template.h"

#include "dk_tunables.h"

DK_TUNABLE(dk__rp_isa, "roi_pool.isa", 2, 0, 2,
           "roi_pool's channels-last forward: 2 AVX-512, 1 AVX2 (each where the CPU has it, else the next), 0 "
           "the baseline (Note [RoIPool tiles])")
DK_TUNABLE(dk__rp_read_ahead, "roi_pool.read_ahead", 4, 0, 64,
           "roi_pool's backward: the RoI whose runs each channel pair prefetches, this many ahead (0: none; Note "
           "[RoIPool on a CPU])")
DK_TUNABLE(dk__rp_layout, "roi_pool.layout", -1, -1, 1,
           "roi_pool's forward: -1 the cost model, 0 channel planes, 1 channels-last blocks (Note [RoIPool on a CPU])")
DK_TUNABLE(dk__psa_layout, "ps_roi_align.layout", -1, -1, 1,
           "ps_roi_align: -1 the cost model, 0 channel planes, 1 channels-last blocks (Note [RoIAlign's "
           "position-sensitive form on a CPU])")
DK_TUNABLE(dk__psp_layout, "ps_roi_pool.layout", -1, -1, 2,
           "ps_roi_pool: -1 the cost model, 0 channel planes in place, 1 channels-last blocks (the forward), 2 "
           "plane-major (the forward; the backward takes its buffered planes unless 0) (Note [Position-sensitive "
           "RoIPool on a CPU])")
DK_TUNABLE(dk__ps_isa, "ps_roi_pool.isa", 1, 0, 2,
           "ps_roi_pool's and ps_roi_align's float32 vectors: 1 the channels-last copy and ps_roi_pool's backward "
           "additions with AVX2, 2 also ps_roi_pool's AVX-512 ways (the plane-major forward's gathers, the cost "
           "model's choice then, and the backward's masked additions), each where the CPU has it; 0 the baseline "
           "(Note [AVX-512 for position-sensitive pooling] in ps_roi_pool_cpu.h)")
DK_TUNABLE(dk__ps_copy_ahead, "ps_roi_pool.copy_ahead", 2, 0, 64,
           "ps_roi_pool's and ps_roi_align's channels-last copy: each row of its planes prefetched this many rows "
           "ahead (0: none; Note [Copying ahead])")
DK_TUNABLE(dk__psp_stage, "ps_roi_pool.stage", 1, 0, 1,
           "ps_roi_pool's and ps_roi_align's forward on blocks: 1 their outputs staged [bin][RoI][channel] and moved "
           "to the output in a second pass, 0 each stored in place as it is found (the same values; Note [Staged "
           "outputs])")
DK_TUNABLE(dk__psa_grad_planes, "ps_roi_align.grad_planes", 1, 0, 1,
           "ps_roi_align's backward on blocks: 1 each block's planes staged whole and written once as one run "
           "(streamed where large), 0 written back a row of four planes at a time (the same values; Note "
           "[RoIAlign's position-sensitive form on a CPU])")
DK_TUNABLE(dk__psa_tables, "ps_roi_align.tap_tables", 1, 0, 1,
           "ps_roi_align: 1 each RoI's taps tabled once per call, 0 found by every task (the same values)")

/* One template per op; the position-sensitive ones use roi_pool_tmpl.h's RoI readers, and
 * ps_roi_align ps_roi_pool's view, so they come in this order. */
#define DK_TEMPLATE "roi_pool/roi_pool_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"
#define DK_TEMPLATE "roi_pool/ps_roi_pool_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"
#define DK_TEMPLATE "roi_pool/ps_roi_align_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

/* Whether the CPU has AVX2 (the position-sensitive blocks' copy, dk__ps_row_load_avx2), and
 * AVX-512 (ps_roi_pool's gathers, dk__psp_gather). */
static bool dk__ps_cpu_avx2(void)
{
#if DK__RP_AVX2
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}
static bool dk__ps_cpu_avx512(void)
{
#if DK__RP_AVX2
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

/* One call's tensors and sizes: `img` is input or grad_input, `bins` output or grad_output. */
static dk__rp_ctx dk__rp_ctx_of(const dk_tensor *img, const dk_tensor *bins, const dk_tensor *rois,
                                const dk_tensor *argmax, double scale, int bins_kind)
{
    return (dk__rp_ctx){.img = img,
                        .ps_avx2 = bins_kind == DK_ROI_POOL_BINS_PS && DK__RP_AVX2 && dk_tunable(&dk__ps_isa) >= 1 &&
                                   dk__ps_cpu_avx2(),
                        .ps_copy_ahead = (int)dk_tunable(&dk__ps_copy_ahead),
                        .bins = bins,
                        .rois = rois,
                        .roi_s0 = dk_tensor_stride(rois, 0),
                        .roi_s1 = dk_tensor_stride(rois, 1),
                        .argmax = argmax,
                        .arg = argmax ? dk_tensor_data(argmax) : NULL,
                        .arg64 = argmax && dk_tensor_dtype(argmax) == DK_INT64,
                        .arg16 = argmax && dk_tensor_dtype(argmax) == DK_INT16,
                        .N = img->shape[0],
                        .C = img->shape[1],
                        .H = img->shape[2],
                        .W = img->shape[3],
                        .K = rois->shape[0],
                        .PH = bins->shape[2],
                        .PW = bins->shape[3],
                        .scale = scale,
                        .bins_kind = bins_kind};
}

dk_status dk_roi_pool_forward_cpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output, dk_tensor *argmax,
                                  int64_t pooled_height, int64_t pooled_width, double spatial_scale, int64_t geometry)
{
    dk__rp_ctx cx = dk__rp_ctx_of(input, output, rois, argmax, spatial_scale,
                                  geometry == DK_ROI_POOL_MMCV ? DK_ROI_POOL_BINS_MMCV : DK_ROI_POOL_BINS_TORCHVISION);
    if (cx.K == 0 || cx.C == 0) return DK_OK; /* nothing to write */
    /* work: about one comparison per pixel of every bin; a bin covers about H W / (PH PW) */
    const int nthreads = dk_parallel_threads_for(cx.K * cx.C * (cx.PH * cx.PW + cx.H * cx.W / 4 + 1));
    dk_status st = DK_OK;
#if DK__RP_AVX2
    const int64_t isa = dk_tunable(&dk__rp_isa);
    cx.avx2 = isa >= 1 && __builtin_cpu_supports("avx2");
    cx.avx512 = isa >= 2 && cx.avx2 && __builtin_cpu_supports("avx512f");
#endif
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__rp_forward, (&cx, nthreads, dk_tunable(&dk__rp_layout)),
                    st = dk_error(DK_ETYPE, "roi_pool_forward: unsupported dtype"))
    return st;
}

dk_status dk_roi_pool_backward_cpu(const dk_tensor *grad_output, const dk_tensor *rois, const dk_tensor *argmax,
                                   dk_tensor *grad_input)
{
    dk__rp_ctx cx = dk__rp_ctx_of(grad_input, grad_output, rois, argmax, 1.0, DK_ROI_POOL_BINS_TORCHVISION);
    if (cx.N == 0 || cx.C == 0 || cx.H == 0 || cx.W == 0) return DK_OK; /* nothing to write */
    const int nthreads = dk_parallel_threads_for(cx.C * (cx.N * cx.H * cx.W + cx.K * cx.PH * cx.PW));
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__rp_backward, (&cx, nthreads),
                    st = dk_error(DK_ETYPE, "roi_pool_backward: unsupported dtype"))
    return st;
}

/* ps_roi_pool's tables (dk__psp_table) in `ar`: the axes of every RoI, [PH + PW][K] x 2, their
 * images, K, and each image's RoIs, N + 1 + K; false when they do not fit in memory. Also the
 * layout tunable's value. */
static bool dk__psp_take_table(dk__rp_ctx *cx, dk_arena *ar)
{
    const size_t k = (size_t)cx->K, axes = dk_sat_mul(dk_sat_mul(k, (size_t)cx->PH + (size_t)cx->PW), 2);
    cx->bin_table = (int64_t *)dk_arena_take_n(ar, axes, sizeof(int64_t));
    cx->roi_batch = (int64_t *)dk_arena_take_n(ar, k, sizeof(int64_t));
    cx->image_rois = (int64_t *)dk_arena_take_n(ar, (size_t)cx->N + 1 + k, sizeof(int64_t));
    cx->ps_layout = (int)dk_tunable(&dk__psp_layout);
    return ((cx->bin_table && cx->roi_batch) || k == 0) && cx->image_rois;
}

/* RoIs per ps_roi_pool forward task: DK__PSP_ROIS, or fewer where a task per output channel and
 * block would leave threads idle (few output channels: about 8 tasks per thread then). */
static int64_t dk__psp_roi_block(int64_t K, int64_t cout, int nthreads)
{
    if (nthreads <= 1) return DK__PSP_ROIS;
    const int64_t want = (8 * (int64_t)nthreads + cout - 1) / cout; /* blocks per output channel */
    const int64_t block = (K + want - 1) / want;
    return block < 1 ? 1 : block > DK__PSP_ROIS ? DK__PSP_ROIS : block;
}

dk_status dk_ps_roi_pool_forward_cpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                     double spatial_scale)
{
    dk__rp_ctx cx = dk__rp_ctx_of(input, output, rois, NULL, spatial_scale, DK_ROI_POOL_BINS_PS);
    if (dk_tensor_numel(output) == 0) return DK_OK; /* nothing to write */
    const int nthreads = dk_parallel_threads_for(cx.K * (cx.C + cx.PH * cx.PW) * (cx.H * cx.W / (cx.PH * cx.PW) + 1));
    cx.roi_block = dk__psp_roi_block(cx.K, output->shape[1], nthreads);
    /* the gathers: float32, and every pixel of a plane at an int32 offset (dk__psp_gather) */
    const int64_t sy = dk_tensor_stride(input, 2), sx = dk_tensor_stride(input, 3);
    cx.ps_avx512 = dk_tensor_dtype(input) == DK_FLOAT32 && dk_tunable(&dk__ps_isa) == 2 && dk__ps_cpu_avx512() &&
                   sy >= 0 && sx >= 0 && (cx.H - 1) * sy + (cx.W - 1) * sx < INT32_MAX;
    cx.ps_stage = dk_tunable(&dk__psp_stage) == 1;
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    if (!dk__psp_take_table(&cx, &ar)) {
        dk_arena_free(&ar);
        return dk_error(DK_ENOMEM, "ps_roi_pool_forward: out of memory for the bins of %lld RoIs", (long long)cx.K);
    }
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__rp_ps_forward, (&cx, nthreads),
                    st = dk_error(DK_ETYPE, "ps_roi_pool_forward: unsupported dtype"))
    dk_arena_free(&ar);
    return st;
}

dk_status dk_ps_roi_pool_backward_cpu(const dk_tensor *grad_output, const dk_tensor *rois, dk_tensor *grad_input,
                                      double spatial_scale)
{
    dk__rp_ctx cx = dk__rp_ctx_of(grad_input, grad_output, rois, NULL, spatial_scale, DK_ROI_POOL_BINS_PS);
    if (cx.N == 0 || cx.C == 0 || cx.H == 0 || cx.W == 0) return DK_OK; /* nothing to write */
    const int nthreads = dk_parallel_threads_for(cx.C * (cx.N * cx.H * cx.W + cx.K * 4));
    /* the buffered planes' masked additions (dk__psp_grad_image) */
    cx.ps_avx512 = dk_tensor_dtype(grad_input) == DK_FLOAT32 && dk_tunable(&dk__ps_isa) == 2 && dk__ps_cpu_avx512();
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    if (!dk__psp_take_table(&cx, &ar)) {
        dk_arena_free(&ar);
        return dk_error(DK_ENOMEM, "ps_roi_pool_backward: out of memory for the bins of %lld RoIs", (long long)cx.K);
    }
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__rp_ps_backward, (&cx, nthreads),
                    st = dk_error(DK_ETYPE, "ps_roi_pool_backward: unsupported dtype"))
    dk_arena_free(&ar);
    return st;
}

dk_status dk_ps_roi_align_forward_cpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                      double spatial_scale, int64_t sampling_ratio)
{
    dk__rp_ctx cx = dk__rp_ctx_of(input, output, rois, NULL, spatial_scale, DK_ROI_POOL_BINS_PS);
    cx.sampling_ratio = sampling_ratio;
    if (dk_tensor_numel(output) == 0) return DK_OK; /* nothing to write */
    /* work: about 4 x 4 samples of 4 taps per output element, and a RoI's geometry */
    const int nthreads = dk_parallel_threads_for(dk_tensor_numel(output) * 64 + cx.K * 64);
    cx.ps_layout = (int)dk_tunable(&dk__psa_layout);
    cx.psa_tables = dk_tunable(&dk__psa_tables) == 1;
    cx.ps_stage = dk_tunable(&dk__psp_stage) == 1;
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__psa_forward, (&cx, nthreads),
                    st = dk_error(DK_ETYPE, "ps_roi_align_forward: unsupported dtype"))
    return st;
}

dk_status dk_ps_roi_align_backward_cpu(const dk_tensor *grad_output, const dk_tensor *rois, dk_tensor *grad_input,
                                       double spatial_scale, int64_t sampling_ratio)
{
    dk__rp_ctx cx = dk__rp_ctx_of(grad_input, grad_output, rois, NULL, spatial_scale, DK_ROI_POOL_BINS_PS);
    cx.sampling_ratio = sampling_ratio;
    if (cx.N == 0 || cx.C == 0 || cx.H == 0 || cx.W == 0) return DK_OK; /* nothing to write */
    const int nthreads = dk_parallel_threads_for(cx.N * cx.C * (cx.H * cx.W + 1) + dk_tensor_numel(grad_output) * 64);
    cx.ps_layout = (int)dk_tunable(&dk__psa_layout);
    cx.psa_tables = dk_tunable(&dk__psa_tables) == 1;
    cx.psa_grad_planes = dk_tunable(&dk__psa_grad_planes) == 1;
    dk_status st = DK_OK;
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__psa_backward, (&cx, nthreads),
                    st = dk_error(DK_ETYPE, "ps_roi_align_backward: unsupported dtype"))
    return st;
}

DK_REGISTER_DEVICE_IMPL(roi_pool_forward, CPU, dk_roi_pool_forward_cpu)
DK_REGISTER_DEVICE_IMPL(roi_pool_backward, CPU, dk_roi_pool_backward_cpu)
DK_REGISTER_DEVICE_IMPL(ps_roi_pool_forward, CPU, dk_ps_roi_pool_forward_cpu)
DK_REGISTER_DEVICE_IMPL(ps_roi_pool_backward, CPU, dk_ps_roi_pool_backward_cpu)
DK_REGISTER_DEVICE_IMPL(ps_roi_align_forward, CPU, dk_ps_roi_align_forward_cpu)
DK_REGISTER_DEVICE_IMPL(ps_roi_align_backward, CPU, dk_ps_roi_align_backward_cpu)
