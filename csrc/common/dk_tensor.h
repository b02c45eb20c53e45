/*
 * dk_tensor.h — dkit's tensor is DLPack's DLTensor, plus the helpers every op needs.
 *
 * dkit never owns tensor memory: outputs are allocated by the caller's framework and handed in,
 * so a dk_tensor is only a view. Strides count elements; NULL strides mean row-major contiguous.
 */
#ifndef DK_TENSOR_H
#define DK_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dk_dlpack.h"
#include "dk_export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef DLTensor dk_tensor;

/* The dtypes dkit kernels understand. DK_DTYPE_UNSUPPORTED covers every other DLDataType. */
#define DK_DTYPE_TABLE(X)                     \
    X(DK_FLOAT16, "float16", kDLFloat, 16)    \
    X(DK_BFLOAT16, "bfloat16", kDLBfloat, 16) \
    X(DK_FLOAT32, "float32", kDLFloat, 32)    \
    X(DK_FLOAT64, "float64", kDLFloat, 64)    \
    X(DK_INT32, "int32", kDLInt, 32)          \
    X(DK_INT64, "int64", kDLInt, 64)          \
    X(DK_UINT8, "uint8", kDLUInt, 8)          \
    X(DK_BOOL, "bool", kDLBool, 8)            \
    X(DK_INT8, "int8", kDLInt, 8)             \
    X(DK_INT16, "int16", kDLInt, 16)

typedef enum {
#define DK__DTYPE_ENUM(e, name, code, bits) e,
    DK_DTYPE_TABLE(DK__DTYPE_ENUM)
#undef DK__DTYPE_ENUM
        DK_DTYPE_UNSUPPORTED
} dk_dtype;

DK_API dk_dtype dk_dtype_from_dl(DLDataType t);
DK_API DLDataType dk_dtype_to_dl(dk_dtype d);
/* "float32", ...; "unsupported" for DK_DTYPE_UNSUPPORTED. */
DK_API const char *dk_dtype_name(dk_dtype d);
/* Writes the dtype's name into buf ("float32", also for dtypes dkit does not compute with:
 * "int8", "uint16", "complex64", "float8_e4m3fn"), or "dtype(code 0, bits 16, lanes 2)" for
 * vectors and codes DLPack does not define; returns buf. */
DK_API const char *dk_dl_dtype_str(DLDataType t, char *buf, size_t n);
DK_API size_t dk_dtype_size(dk_dtype d);

static inline dk_dtype dk_tensor_dtype(const dk_tensor *t) { return dk_dtype_from_dl(t->dtype); }

/* Product of the shape (1 for ndim 0). Saturates at INT64_MAX instead of overflowing. */
DK_API int64_t dk_tensor_numel(const dk_tensor *t);
DK_API int64_t dk_tensor_nbytes(const dk_tensor *t);

/* Element stride of dimension `dim` (negative counts from the end), honouring NULL strides. */
DK_API int64_t dk_tensor_stride(const dk_tensor *t, int dim);

/* Row-major contiguous: NULL strides, or strides equal to the compact ones (size-1 dims free). */
DK_API bool dk_tensor_is_contiguous(const dk_tensor *t);

/* 4-d NHWC in memory (strides C=1, W=C, H=W*C, N=H*W*C; size-1 dims free) — PyTorch's
 * torch.channels_last. A tensor can be both contiguous and channels-last (e.g. C == 1). */
DK_API bool dk_tensor_is_channels_last(const dk_tensor *t);

/* A dimension whose elements all share memory (size > 1, stride 0: an expanded / broadcast
 * view), or -1 if there is none. Written through, such a tensor makes parallel writes race and
 * keeps only one of them; ops refuse it as an output, as PyTorch does. */
DK_API int dk_tensor_repeated_dim(const dk_tensor *t);

/* The first n strides of t into s (compact row-major ones when it has none), or zeros when t is
 * NULL (an absent optional tensor). Inline: a small call reads many. */
static inline void dk_tensor_strides(const dk_tensor *t, int64_t *s, int n)
{
    if (!t) {
        for (int d = 0; d < n; ++d) s[d] = 0;
    } else if (t->strides) {
        for (int d = 0; d < n; ++d) s[d] = t->strides[d];
    } else {
        /* unsigned: the product of an empty tensor's other sizes may not fit, and is not used */
        uint64_t e = 1;
        for (int d = n - 1; d >= 0; --d) {
            s[d] = (int64_t)e;
            e *= (uint64_t)t->shape[d];
        }
    }
}

/* First element's address. In integer arithmetic: a tensor without elements may have no memory
 * (data NULL, Note [Untrusted tensors] in dk_check.h), and NULL + offset is undefined in C even
 * for offset 0; here it is NULL + offset, never dereferenced. */
static inline void *dk_tensor_data(const dk_tensor *t)
{
    return (void *)((uintptr_t)t->data + (uintptr_t)t->byte_offset);
}

/* "cpu", "cuda:1", "hip:0", or a vendor backend's name. Writes into buf; returns buf. */
DK_API const char *dk_device_str(DLDevice d, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* DK_TENSOR_H */
