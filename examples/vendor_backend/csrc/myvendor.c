/*
 * myvendor.c — the backend library of a "toy accelerator", built against dkit's installed
 * headers and libdkit.so only (dkit.get_include(), dkit.get_library()).
 *
 * The toy device is DLPack's kDLExtDev, the device type DLPack reserves for out-of-tree devices.
 * Its memory is host memory that this library allocates itself: only its backend object's copy
 * moves data between it and the host, as on a real accelerator, so every path that dkit runs on
 * the device really copies (the CPU fallback's copies in and out, a tensor's upload and
 * download). The library registers three things from its entry point:
 *
 *   1. its backend object (dk_backend.h): alloc, free and copy for its memory, which is what dkit
 *      needs to run any op on the device (the CPU fallback copies through it) and to allocate
 *      outputs for tensors no framework owns (myvendor.Tensor; Note [Outputs on a backend's
 *      device] in dkit/_frameworks/backend.py);
 *   2. a kernel of its own for roi_align_forward (a typed kernel, DK_REGISTER_DEVICE_IMPL_AT);
 *   3. dkit's CPU fallback (dk_register_cpu_fallback, Note [The CPU fallback]) for every other
 *      op: roi_align_backward, nms, soft_nms, box_iou, and any op added to dkit later.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dkit.h"
#include "kernels/roi_align_math.h"
#include "roi_align.h"

/* ------------------------------------------------------------------------------------------ */
/* The backend object                                                                         */

/* What the library did, for the checks (myvendor_counters): a real runtime has such counters
 * too. Atomic: kernels and copies may run on several threads. */
static atomic_long n_alloc, n_free, n_h2d, n_d2h, n_d2d;

static dk_status myvendor_available(void *ctx, char *why, size_t n)
{
    (void)ctx, (void)why, (void)n;
    return DK_OK;
}

static int myvendor_device_count(void *ctx)
{
    (void)ctx;
    return 1;
}

static dk_status myvendor_get_device(void *ctx, int32_t *device)
{
    (void)ctx;
    *device = 0;
    return DK_OK;
}

static dk_status myvendor_set_device(void *ctx, int32_t device)
{
    (void)ctx;
    return device == 0 ? DK_OK : dk_error(DK_EINVAL, "myvendor: no device %d (it has one)", (int)device);
}

static dk_status myvendor_synchronize(void *ctx, int32_t device, void *stream)
{
    (void)ctx, (void)device, (void)stream; /* copies and kernels run synchronously */
    return DK_OK;
}

/* 64-byte aligned, as device allocators align; never NULL on DK_OK, even for 0 bytes. */
static dk_status myvendor_alloc(void *ctx, int32_t device, size_t bytes, void *stream, void **out)
{
    (void)ctx, (void)device, (void)stream;
    const size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
    if (rounded < bytes) return dk_error(DK_ENOMEM, "myvendor: cannot allocate %zu bytes", bytes);
    *out = aligned_alloc(64, rounded);
    if (!*out) return dk_error(DK_ENOMEM, "myvendor: out of device memory (%zu bytes)", bytes);
    atomic_fetch_add(&n_alloc, 1);
    return DK_OK;
}

static void myvendor_free(void *ctx, int32_t device, void *ptr, void *stream)
{
    (void)ctx, (void)device, (void)stream;
    if (ptr) atomic_fetch_add(&n_free, 1);
    free(ptr);
}

static dk_status myvendor_copy(void *ctx, int32_t device, void *dst, const void *src, size_t bytes, dk_copy_kind kind,
                               void *stream)
{
    (void)ctx, (void)device, (void)stream;
    atomic_fetch_add(kind == DK_COPY_HOST_TO_DEVICE ? &n_h2d : kind == DK_COPY_DEVICE_TO_HOST ? &n_d2h : &n_d2d, 1);
    memmove(dst, src, bytes);
    return DK_OK;
}

static const dk_backend myvendor_backend = {
    .abi = DK_ABI_VERSION,
    .name = "myvendor",
    .device_type = kDLExtDev,
    .available = myvendor_available,
    .device_count = myvendor_device_count,
    .get_device = myvendor_get_device,
    .set_device = myvendor_set_device,
    .synchronize = myvendor_synchronize,
    .alloc = myvendor_alloc,
    .free = myvendor_free,
    .copy = myvendor_copy,
};

/* Allocations, frees and copies (host to device, device to host, device to device) so far. The
 * checks read them (dlsym in C, ctypes in myvendor.counters()). */
DK_API void myvendor_counters(long out[5]);
DK_API void myvendor_counters(long out[5])
{
    out[0] = atomic_load(&n_alloc);
    out[1] = atomic_load(&n_free);
    out[2] = atomic_load(&n_h2d);
    out[3] = atomic_load(&n_d2h);
    out[4] = atomic_load(&n_d2d);
}

/* ------------------------------------------------------------------------------------------ */
/* roi_align_forward                                                                          */

/*
 * The kernel a GPU backend would launch, one "thread" per output element (k, c, ph, pw): the
 * per-element math is dkit's public kernels/roi_align_math.h, the functions dkit's own GPU
 * kernels use, so the results equal dkit's GPU kernels' bit for bit and its CPU kernel's to
 * rounding (the CPU kernel sums the same samples in another order). What a vendor writes is the
 * launch: the tensors' strides, the dtype, and the checks the op leaves to kernels that can read
 * their memory. roi_align checks RoI batch indices only for CPU tensors (the outer check cannot
 * read device memory), so a device kernel checks them itself before it reads the input.
 *
 * S is the storage type, CT the compute type (float for float16 and bfloat16), SFX and TFX their
 * suffixes in roi_align_math.h. The argmax of max pooling holds sample coordinates in the
 * compute type (float32 for 16-bit inputs: ops/roi_align.h).
 */
#define MYVENDOR_ROI_ALIGN_FORWARD(S, CT, SFX, TFX)                                                                \
    static dk_status myvendor_roi_align_forward_##SFX(const dk_tensor *input, const dk_tensor *rois,               \
                                                      dk_tensor *output, dk_tensor *argmax_y, dk_tensor *argmax_x, \
                                                      int64_t pooled_h, int64_t pooled_w, double spatial_scale,    \
                                                      int64_t sampling_ratio, int64_t pool_mode, bool aligned)     \
    {                                                                                                              \
        const int64_t N = input->shape[0], C = input->shape[1], H = input->shape[2], W = input->shape[3];          \
        const int64_t K = rois->shape[0];                                                                          \
        const int64_t isn = dk_tensor_stride(input, 0), isc = dk_tensor_stride(input, 1),                          \
                      ish = dk_tensor_stride(input, 2), isw = dk_tensor_stride(input, 3);                          \
        const int64_t rsk = dk_tensor_stride(rois, 0), rsj = dk_tensor_stride(rois, 1);                            \
        const S *in = (const S *)dk_tensor_data(input), *r = (const S *)dk_tensor_data(rois);                      \
        for (int64_t k = 0; k < K; k++) {                                                                          \
            const CT b = dk_roi_align_load_##SFX(r + k * rsk);                                                     \
            if (!(b >= 0 && b < (CT)N && b == (CT)(int64_t)b))                                                     \
                return dk_error(DK_EINDEX,                                                                         \
                                "myvendor: roi_align: RoI %lld has batch index %g, not an integer in [0, %lld)",   \
                                (long long)k, (double)b, (long long)N);                                            \
        }                                                                                                          \
        S *out = (S *)dk_tensor_data(output);                                                                      \
        CT *amy = pool_mode == DK_POOL_MAX ? (CT *)dk_tensor_data(argmax_y) : NULL;                                \
        CT *amx = pool_mode == DK_POOL_MAX ? (CT *)dk_tensor_data(argmax_x) : NULL;                                \
        int64_t os[4], as[4] = {0, 0, 0, 0};                                                                       \
        for (int d = 0; d < 4; d++) {                                                                              \
            os[d] = dk_tensor_stride(output, d);                                                                   \
            if (amy) as[d] = dk_tensor_stride(argmax_y, d);                                                        \
        }                                                                                                          \
        for (int64_t k = 0; k < K; k++) {                                                                          \
            const S *box = r + k * rsk;                                                                            \
            dk_roi_align_axis_##TFX ay, ax;                                                                        \
            dk_roi_align_roi_init_##TFX(                                                                           \
                dk_roi_align_load_##SFX(box + 1 * rsj), dk_roi_align_load_##SFX(box + 2 * rsj),                    \
                dk_roi_align_load_##SFX(box + 3 * rsj), dk_roi_align_load_##SFX(box + 4 * rsj), (CT)spatial_scale, \
                pooled_h, pooled_w, sampling_ratio, aligned, H, W, &ay, &ax);                                      \
            const int64_t n = (int64_t)dk_roi_align_load_##SFX(box);                                               \
            for (int64_t c = 0; c < C; c++) {                                                                      \
                const S *plane = in + n * isn + c * isc;                                                           \
                for (int64_t ph = 0; ph < pooled_h; ph++)                                                          \
                    for (int64_t pw = 0; pw < pooled_w; pw++) {                                                    \
                        const int64_t o = k * os[0] + c * os[1] + ph * os[2] + pw * os[3];                         \
                        CT v;                                                                                      \
                        if (amy) {                                                                                 \
                            const int64_t a = k * as[0] + c * as[1] + ph * as[2] + pw * as[3];                     \
                            v = dk_roi_align_forward_max_##SFX(plane, ish, isw, H, W, &ay, &ax, ph, pw, &amy[a],   \
                                                               &amx[a]);                                           \
                        } else {                                                                                   \
                            v = dk_roi_align_forward_avg_##SFX(plane, ish, isw, H, W, &ay, &ax, ph, pw);           \
                        }                                                                                          \
                        dk_roi_align_store_##SFX(&out[o], v);                                                      \
                    }                                                                                              \
            }                                                                                                      \
        }                                                                                                          \
        return DK_OK;                                                                                              \
    }

MYVENDOR_ROI_ALIGN_FORWARD(float, float, f32, f32)
MYVENDOR_ROI_ALIGN_FORWARD(double, double, f64, f64)
MYVENDOR_ROI_ALIGN_FORWARD(uint16_t, float, f16, f32)
MYVENDOR_ROI_ALIGN_FORWARD(uint16_t, float, bf16, f32)

/* The op's check (ops/roi_align.c) already ran: ranks, widths, one dtype and one device for every
 * tensor, output shapes, the scalars. */
static dk_status myvendor_roi_align_forward(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                            dk_tensor *argmax_y, dk_tensor *argmax_x, int64_t pooled_h,
                                            int64_t pooled_w, double spatial_scale, int64_t sampling_ratio,
                                            int64_t pool_mode, bool aligned)
{
    switch (dk_tensor_dtype(input)) {
    case DK_FLOAT32:
        return myvendor_roi_align_forward_f32(input, rois, output, argmax_y, argmax_x, pooled_h, pooled_w,
                                              spatial_scale, sampling_ratio, pool_mode, aligned);
    case DK_FLOAT64:
        return myvendor_roi_align_forward_f64(input, rois, output, argmax_y, argmax_x, pooled_h, pooled_w,
                                              spatial_scale, sampling_ratio, pool_mode, aligned);
    case DK_FLOAT16:
        return myvendor_roi_align_forward_f16(input, rois, output, argmax_y, argmax_x, pooled_h, pooled_w,
                                              spatial_scale, sampling_ratio, pool_mode, aligned);
    case DK_BFLOAT16:
        return myvendor_roi_align_forward_bf16(input, rois, output, argmax_y, argmax_x, pooled_h, pooled_w,
                                               spatial_scale, sampling_ratio, pool_mode, aligned);
    default: return dk_error(DK_ETYPE, "myvendor: roi_align_forward: no kernel for this dtype");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The entry point: dk_load_backend runs it, and dk_unload_backend undoes all it registered.  */

DK_BACKEND_ENTRY(myvendor)
{
    dk_key key;
    dk_status st = dk_backend_register(&myvendor_backend, &key);
    if (st != DK_OK) return st;
    /* Checked twice: the kernel's C type at compile time, and the op's argument list this library
     * was compiled against when it loads (Note [Schemas are checked at registration]). */
    st = DK_REGISTER_DEVICE_IMPL_AT(roi_align_forward, key, myvendor_roi_align_forward, NULL);
    if (st != DK_OK) return st;
    return dk_register_cpu_fallback(key, NULL);
}
