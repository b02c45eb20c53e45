/*
 * dk_check.h — the checks every op's validation needs, written once.
 *
 * Each returns DK_OK, or an error whose message names the op and the parameter. An op's check
 * (the body after DK_DEFINE_OP) composes them; kernels may then rely on what was verified.
 * The aliasing check (Note [Aliasing]) needs no call: the generated entry of every op runs it.
 *
 * Note [Aliasing]
 * A kernel writes its outputs while it reads its other arguments, often from several threads.
 * So before the op's own check, the core refuses, for every op:
 *   - an output whose elements overlap each other: a stride 0 over a dimension of size > 1 (an
 *     expanded view), or strides that take two different indices to one element;
 *   - an output whose memory range overlaps the range of any other tensor argument on the same
 *     device, input or output, partly or fully (PyTorch refuses the same for out= arguments).
 * Ranges are compared, not elements, so two interleaved views of one buffer (x[:, 0::2] and
 * x[:, 1::2]) are refused too, as in PyTorch; and a layout whose elements do not overlap but
 * whose strides are not nested (each stride larger than the span of the dimensions inside it)
 * is refused as an output, a conservative answer where the exact one is expensive. Tensors with
 * no elements never overlap anything.
 */
#ifndef DK_CHECK_H
#define DK_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_export.h"
#include "dk_status.h"
#include "dk_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exactly `ndim` dimensions; `layout` names them for the message, e.g. "[N, C, H, W]". */
DK_API dk_status dk_check_ndim(const char *op, const char *name, const dk_tensor *t, int ndim, const char *layout);
/* Exactly this shape; an entry of -1 accepts any size >= 0 in that dimension. */
DK_API dk_status dk_check_shape(const char *op, const char *name, const dk_tensor *t, int ndim, const int64_t *shape);
/* Exactly this dtype. */
DK_API dk_status dk_check_dtype(const char *op, const char *name, const dk_tensor *t, dk_dtype dtype);
/* One of float16, bfloat16, float32, float64. */
DK_API dk_status dk_check_float(const char *op, const char *name, const dk_tensor *t);
/* The same dtype as `ref` (named `ref_name`). */
DK_API dk_status dk_check_same_dtype(const char *op, const char *name, const dk_tensor *t, const char *ref_name,
                                     const dk_tensor *ref);

/* RoIs [K, 5] (batch_index, x1, y1, x2, y2) of dtype `dt` (the features'), for the RoI ops of
 * every family. */
DK_API dk_status dk_check_rois(const char *op, const dk_tensor *rois, dk_dtype dt);
/* Rotated RoIs [K, 6] (batch_index, cx, cy, w, h, angle), likewise. */
DK_API dk_status dk_check_rotated_rois(const char *op, const dk_tensor *rois, dk_dtype dt);

/*
 * The values of RoIs [K, 5] (batch_index, x1, y1, x2, y2) of a float dtype, for the RoI ops of
 * every family, checked when the host can read them (CPU and pinned memory; on GPUs the kernels
 * clamp instead of reading out of bounds): each batch index an integer in [0, n), anything else
 * would index another image's memory; each coordinate finite, and finite once multiplied by
 * spatial_scale in the compute type (float32 for 16- and 32-bit RoIs; Note [Scale in the compute
 * type] in ops/roi_align.c). A NaN box has no defined bins, and the references silently return
 * zeros or garbage for it, so dkit raises instead. Rows that share memory (a stride of 0 along
 * K, e.g. boxes.expand(K, 5)) are one row: it is read once, however large K is.
 */
DK_API dk_status dk_check_roi_values(const char *op, const dk_tensor *rois, int64_t n, double spatial_scale);
/* The same for rotated RoIs [K, 6] (batch_index, cx, cy, w, h, angle): cx, cy, w and h as the
 * coordinates above, the angle (radians, not scaled) finite. */
DK_API dk_status dk_check_rotated_roi_values(const char *op, const dk_tensor *rois, int64_t n, double spatial_scale);

/*
 * Note [Untrusted tensors]
 * A DLTensor from outside (a producer's DLPack capsule: dk_dlpack_accept; a boxed stack built
 * by a binding, a backend or a fuzzer: dk_op_call_boxed) is validated before anything else reads
 * it: at most DK_MAX_NDIM dimensions, a
 * shape array when it has any, a dtype whose element size is a whole number of bytes (lanes >=
 * 1), a byte offset below 2^63, byte offsets of every element that fit 64 bits (shape times
 * strides), and memory (a non-NULL data pointer) whenever it has elements. Everything else is
 * each op's check: ranks, dtypes and devices it accepts, and sizes, which it compares with the
 * sizes it expects (dk_check_shape refuses a negative size even where any size is allowed), so
 * that a negative size is refused with what the dimension means. (A tensor with a negative size
 * has no elements to the core: it overlaps nothing and holds no memory.) A
 * producer that lies about the length of its shape or strides arrays cannot be caught by
 * looking at them; the rank bound keeps what such a lie can make dkit read small.
 */
#define DK_MAX_NDIM 64
DK_API dk_status dk_tensor_validate(const dk_tensor *t, const char *op, const char *arg);

/* A producer's managed tensor, as a consumer accepts it: a DLManagedTensorVersioned (versioned)
 * of DLPack major version 1, not read-only nor a copy when it is to be written (`writable`), or a
 * legacy DLManagedTensor; then dk_tensor_validate. *out is its DLTensor. Nothing is consumed. */
DK_API dk_status dk_dlpack_accept(void *managed, bool versioned, bool writable, const char *op, const char *arg,
                                  dk_tensor **out);

/* Whether the host can read the tensor's memory directly (CPU and pinned host memory): an op's
 * check may then verify values (indices, coordinates) that kernels rely on. */
DK_API bool dk_tensor_host_readable(const dk_tensor *t);

/* The byte range [*lo, *hi) the tensor's elements occupy: returns 1, or 0 when it has no
 * elements, or -1 (DK_EINVAL set) when its shape and strides overflow 64-bit arithmetic. */
DK_API int dk_tensor_extent(const dk_tensor *t, uintptr_t *lo, uintptr_t *hi);

/* Note [Aliasing]: the output `name` must not overlap itself. */
DK_API dk_status dk_check_no_internal_overlap(const char *op, const char *name, const dk_tensor *t);

#ifdef __cplusplus
}
#endif
#endif /* DK_CHECK_H */
