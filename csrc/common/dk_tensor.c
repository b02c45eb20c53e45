/* dk_tensor.c — dtypes and layout helpers over DLTensor. */
#include "dk_tensor.h"

#include <stdio.h>

#include "dk_keys.h"

dk_dtype dk_dtype_from_dl(DLDataType t)
{
    /* One switch on (code, bits): every op's check calls this several times per call. */
    if (t.lanes != 1) return DK_DTYPE_UNSUPPORTED;
    switch ((unsigned)t.code << 8 | t.bits) {
#define DK__DTYPE_CASE(e, name, c, b) \
    case (unsigned)(c) << 8 | (b): return e;
        DK_DTYPE_TABLE(DK__DTYPE_CASE)
#undef DK__DTYPE_CASE
    default: return DK_DTYPE_UNSUPPORTED;
    }
}

DLDataType dk_dtype_to_dl(dk_dtype d)
{
    DLDataType t = {0, 0, 0};
    switch (d) {
#define DK__DTYPE_TO(e, name, c, b) \
    case e:                         \
        t.code = (uint8_t)(c);      \
        t.bits = (uint8_t)(b);      \
        t.lanes = 1;                \
        break;
        DK_DTYPE_TABLE(DK__DTYPE_TO)
#undef DK__DTYPE_TO
    default: break;
    }
    return t;
}

const char *dk_dtype_name(dk_dtype d)
{
    switch (d) {
#define DK__DTYPE_NAME(e, name, c, b) \
    case e: return name;
        DK_DTYPE_TABLE(DK__DTYPE_NAME)
#undef DK__DTYPE_NAME
    default: return "unsupported";
    }
}

/* DLPack's type codes by name, for messages about dtypes dkit does not compute with: an int8
 * input is "int8", not a code. Float8 codes name their format whole (their bits are always 8). */
static const char *dk__dl_code_name(uint8_t code, bool *with_bits)
{
    *with_bits = true;
    switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLOpaqueHandle: return "opaque_handle";
    case kDLBool: *with_bits = false; return "bool";
    default: break;
    }
    *with_bits = false;
    switch (code) {
    case kDLFloat8_e3m4: return "float8_e3m4";
    case kDLFloat8_e4m3: return "float8_e4m3";
    case kDLFloat8_e4m3b11fnuz: return "float8_e4m3b11fnuz";
    case kDLFloat8_e4m3fn: return "float8_e4m3fn";
    case kDLFloat8_e4m3fnuz: return "float8_e4m3fnuz";
    case kDLFloat8_e5m2: return "float8_e5m2";
    case kDLFloat8_e5m2fnuz: return "float8_e5m2fnuz";
    case kDLFloat8_e8m0fnu: return "float8_e8m0fnu";
    default: return NULL;
    }
}

const char *dk_dl_dtype_str(DLDataType t, char *buf, size_t n)
{
    dk_dtype d = dk_dtype_from_dl(t);
    bool with_bits;
    const char *name = dk__dl_code_name(t.code, &with_bits);
    if (d != DK_DTYPE_UNSUPPORTED) snprintf(buf, n, "%s", dk_dtype_name(d));
    else if (name && t.lanes == 1 && with_bits) snprintf(buf, n, "%s%u", name, t.bits);
    else if (name && t.lanes == 1 && (t.code != kDLBool || t.bits == 8)) snprintf(buf, n, "%s", name);
    else snprintf(buf, n, "dtype(code %u, bits %u, lanes %u)", t.code, t.bits, t.lanes);
    return buf;
}

size_t dk_dtype_size(dk_dtype d)
{
    DLDataType t = dk_dtype_to_dl(d);
    return (size_t)t.bits / 8u;
}

int64_t dk_tensor_numel(const dk_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        int64_t s = t->shape[i];
        if (s <= 0) return 0;
        if (n > INT64_MAX / s) return INT64_MAX;
        n *= s;
    }
    return n;
}

int64_t dk_tensor_nbytes(const dk_tensor *t)
{
    int64_t n = dk_tensor_numel(t);
    int64_t es = (int64_t)(t->dtype.bits * t->dtype.lanes + 7) / 8;
    return (es && n > INT64_MAX / es) ? INT64_MAX : n * es;
}

int64_t dk_tensor_stride(const dk_tensor *t, int dim)
{
    if (dim < 0) dim += t->ndim;
    if (dim < 0 || dim >= t->ndim) return 0;
    if (t->strides) return t->strides[dim];
    int64_t s = 1;
    for (int i = t->ndim - 1; i > dim; i--) s *= t->shape[i];
    return s;
}

/* Do `strides` describe a compact layout visiting dims in order perm[0] (outermost) .. last? */
static bool dk__is_compact(const dk_tensor *t, const int *perm)
{
    if (!t->strides) return perm == NULL;
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int d = perm ? perm[i] : i;
        if (t->shape[d] != 1 && t->strides[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

bool dk_tensor_is_contiguous(const dk_tensor *t) { return t->strides == NULL || dk__is_compact(t, NULL); }

int dk_tensor_repeated_dim(const dk_tensor *t)
{
    if (!t->strides) return -1;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1 && t->strides[d] == 0) return d;
    return -1;
}

bool dk_tensor_is_channels_last(const dk_tensor *t)
{
    static const int nhwc[4] = {0, 2, 3, 1};
    if (t->ndim != 4) return false;
    if (!t->strides) return t->shape[1] == 1 || (t->shape[2] == 1 && t->shape[3] == 1);
    return dk__is_compact(t, nhwc);
}

const char *dk_device_str(DLDevice d, char *buf, size_t n)
{
    const char *name;
    switch ((int)d.device_type) {
    case kDLCPU: name = "cpu"; break; /* "cpu:1" only when the id is not 0 */
    case kDLCUDA: name = "cuda"; break;
    case kDLCUDAHost: name = "cuda_host"; break;
    case kDLCUDAManaged: name = "cuda_managed"; break;
    case kDLROCM: name = "hip"; break;
    case kDLROCMHost: name = "hip_host"; break;
    case kDLOpenCL: name = "opencl"; break;
    case kDLVulkan: name = "vulkan"; break;
    case kDLMetal: name = "metal"; break;
    case kDLOneAPI: name = "oneapi"; break;
    default: {
        dk_key k = dk_key_for_device_type((int32_t)d.device_type);
        if (k != DK_KEY_UNDEFINED) {
            name = dk_key_name(k);
        } else {
            snprintf(buf, n, "device_type_%d:%d", (int)d.device_type, (int)d.device_id);
            return buf;
        }
    }
    }
    if (d.device_type == kDLCPU && d.device_id == 0) snprintf(buf, n, "%s", name);
    else snprintf(buf, n, "%s:%d", name, (int)d.device_id);
    return buf;
}
