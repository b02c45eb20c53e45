/*
 * roi_align/roi_align_cpu.c — RoIAlign forward and backward on the CPU: the entry points the
 * dispatcher calls, and their registration.
 *
 * Semantics (MMCV's) and the per-sample math come from kernels/roi_align_math.h; the parts of
 * this kernel decide loop order, memory layout and threading (roi_align_cpu.h lists them, with
 * the Notes that explain the design). The argument checks (shapes, dtypes, batch indices,
 * pool_mode, argmax presence, aliasing) were done by ops/roi_align.c and the core before
 * dispatch; the kernel still never indexes out of bounds if they were not (dk__ra_read_rois).
 */
#include "roi_align_cpu.h"

#include "dk_registry.h"
#include "kernels/dk_template.h"

/* Note [Tunables]: every evaluation path is reachable on small inputs (tests force each). */
DK_TUNABLE(dk__ra_order, "roi_align.order", -1, -1, 1,
           "evaluation order of every RoI: -1 by the cost model, 0 sparse, 1 dense (Note [Separable weight tables])")
DK_TUNABLE(dk__ra_taps_bound, "roi_align.taps_bound_bytes", (int64_t)8 << 20, 0, INT64_MAX,
           "one axis' tap tables, sized by the per-bin bound, above which they are counted first (0: always)")

/* The kernel's parts, instantiated per dtype (Note [Templates in C] in kernels/dk_template.h). */
#define DK_TEMPLATE "roi_align/roi_align_tables_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "kernels/dk_instantiate.h"
#define DK_TEMPLATE "roi_align/roi_align_eval_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_COMPUTE
#include "kernels/dk_instantiate.h"
#define DK_TEMPLATE "roi_align/roi_align_planes_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"
#define DK_TEMPLATE "roi_align/roi_align_drivers_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

/* Shape and strides common to both directions; `img` is input or grad_input, `bins` is output
 * or grad_output. */
static dk_status dk__ra_shape_init(dk__ra_shape *sh, const dk_tensor *img, const dk_tensor *bins, const dk_tensor *rois,
                                   const dk_tensor *amy, const dk_tensor *amx, int64_t PH, int64_t PW, double scale,
                                   int64_t sampling_ratio, int64_t pool_mode, bool aligned, bool backward)
{
    const char *op = backward ? "roi_align_backward" : "roi_align_forward";
    sh->N = img->shape[0];
    sh->C = img->shape[1];
    sh->H = img->shape[2];
    sh->W = img->shape[3];
    sh->K = rois->shape[0];
    sh->PH = PH;
    sh->PW = PW;
    sh->sampling_ratio = sampling_ratio;
    sh->spatial_scale = scale;
    sh->aligned = aligned;
    sh->max_mode = pool_mode == DK_POOL_MAX;
    sh->backward = backward;
    dk_tensor_strides(img, sh->in_s, 4);
    dk_tensor_strides(bins, sh->out_s, 4);
    dk_tensor_strides(amy, sh->amy_s, 4);
    dk_tensor_strides(amx, sh->amx_s, 4);
    /* The weight tables index rows and columns with int32. */
    if (sh->H > INT32_MAX - 1 || sh->W > INT32_MAX - 1)
        return dk_error(DK_EINVAL, "%s: input height and width must be below 2^31 - 1 (got %lld x %lld)", op,
                        (long long)sh->H, (long long)sh->W);
    /* Note [Sizes that cannot wrap]: the kernel's buffers hold a plane (H x W), a RoI's bins
     * (PH x PW) and per-RoI table rows (K x PH, K x PW); with each of these below 2^48 elements no
     * size computed from them overflows 64 bits (they are multiplied by at most a thread count
     * and an element size), so none can wrap into a small allocation that is then overrun. */
    int64_t hw, kph, kpw, phpw;
    const int64_t most = (int64_t)1 << 48;
    if (__builtin_mul_overflow(sh->H, sh->W, &hw) || hw >= most || __builtin_mul_overflow(sh->K, PH, &kph) ||
        kph >= most || __builtin_mul_overflow(sh->K, PW, &kpw) || kpw >= most ||
        __builtin_mul_overflow(PH, PW, &phpw) || phpw >= most)
        return dk_error(DK_EINVAL,
                        "%s: sizes too large for the CPU kernel (H x W = %lld x %lld, K = %lld, output %lld x %lld): "
                        "each of H * W, K * PH, K * PW and PH * PW must be below 2^48",
                        op, (long long)sh->H, (long long)sh->W, (long long)sh->K, (long long)PH, (long long)PW);
    return DK_OK;
}

/* Work of a call, for the thread count (saturating: the sizes may be huge and expanded). */
static int64_t dk__ra_work(const dk__ra_shape *sh)
{
    int64_t a, b, w;
    if (__builtin_mul_overflow(sh->K, sh->C, &a) || __builtin_mul_overflow(a, sh->PH, &a) ||
        __builtin_mul_overflow(a, sh->PW, &a))
        return INT64_MAX;
    if (__builtin_mul_overflow(sh->N, sh->C, &b) || __builtin_mul_overflow(b, sh->H, &b) ||
        __builtin_mul_overflow(b, sh->W, &b))
        return INT64_MAX;
    return __builtin_add_overflow(a, b, &w) ? INT64_MAX : w;
}

static dk_status dk__ra_unsupported(const char *op, const dk_tensor *t)
{
    char got[64];
    return dk_error(DK_ETYPE, "%s: unsupported dtype %s", op, dk_dl_dtype_str(t->dtype, got, sizeof got));
}

/* What forward reads of an input without elements (H or W is 0; N and C are 0 only without
 * work): nothing, since no sample is inside it; but the plane loops still form each plane's
 * address from the data pointer and the strides, and such a tensor may have no memory (data
 * NULL: Note [Untrusted tensors]), where NULL + offset is undefined. So it is replaced by this
 * element with strides 0: every address formed is this one, never read. */
static const double dk__ra_no_input[1];
static const int64_t dk__ra_no_strides[4];

dk_status dk_roi_align_forward_cpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                   dk_tensor *argmax_y, dk_tensor *argmax_x, int64_t aligned_height,
                                   int64_t aligned_width, double spatial_scale, int64_t sampling_ratio,
                                   int64_t pool_mode, bool aligned)
{
    dk_tensor empty;
    if (dk_tensor_numel(input) == 0) {
        empty = *input;
        empty.data = (void *)dk__ra_no_input;
        empty.byte_offset = 0;
        empty.strides = (int64_t *)dk__ra_no_strides;
        input = &empty;
    }
    dk__ra_shape sh;
    dk_status st = dk__ra_shape_init(&sh, input, output, rois, argmax_y, argmax_x, aligned_height, aligned_width,
                                     spatial_scale, sampling_ratio, pool_mode, aligned, false);
    if (st != DK_OK) return st;
    if (sh.K == 0 || sh.C == 0) return DK_OK;
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    dk_groups gr;
    dk__ra_ctx cx = {.sh = &sh, .gr = &gr, .ar = &ar, .nthreads = dk_parallel_threads_for(dk__ra_work(&sh))};
    DK_SWITCH_FLOAT(dk_tensor_dtype(input), st, dk__ra_forward, (&cx, input, rois, output, argmax_y, argmax_x),
                    st = dk__ra_unsupported("roi_align_forward", input))
    dk_arena_free(&ar);
    return st;
}

dk_status dk_roi_align_backward_cpu(const dk_tensor *grad_output, const dk_tensor *rois, const dk_tensor *argmax_y,
                                    const dk_tensor *argmax_x, dk_tensor *grad_input, int64_t aligned_height,
                                    int64_t aligned_width, double spatial_scale, int64_t sampling_ratio,
                                    int64_t pool_mode, bool aligned)
{
    dk__ra_shape sh;
    dk_status st = dk__ra_shape_init(&sh, grad_input, grad_output, rois, argmax_y, argmax_x, aligned_height,
                                     aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned, true);
    if (st != DK_OK) return st;
    if (sh.N == 0 || sh.C == 0 || sh.H == 0 || sh.W == 0) return DK_OK; /* nothing to write */
    DK_ARENA_ON_STACK(ar);                                              /* Note [Scratch arena] */
    dk_groups gr;
    dk__ra_ctx cx = {.sh = &sh, .gr = &gr, .ar = &ar, .nthreads = dk_parallel_threads_for(dk__ra_work(&sh))};
    DK_SWITCH_FLOAT(dk_tensor_dtype(grad_output), st, dk__ra_backward,
                    (&cx, grad_output, rois, argmax_y, argmax_x, grad_input),
                    st = dk__ra_unsupported("roi_align_backward", grad_output))
    dk_arena_free(&ar);
    return st;
}

DK_REGISTER_DEVICE_IMPL(roi_align_forward, CPU, dk_roi_align_forward_cpu)
DK_REGISTER_DEVICE_IMPL(roi_align_backward, CPU, dk_roi_align_backward_cpu)
