/* dk_check.c — the checks every op needs (dk_check.h), and the aliasing check of every entry. */
#include "dk_check.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "dk_dispatch.h"
#include "dk_keys.h"
#include "kernels/dk_half.h"

static const char *dk__shape_str(const dk_tensor *t, int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && used < n; i++) {
        if (shape && shape[i] < 0) used += (size_t)snprintf(buf + used, n - used, "%s*", i ? ", " : "");
        else
            used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "",
                                     (long long)(shape ? shape[i] : t->shape[i]));
    }
    return buf;
}

dk_status dk_check_ndim(const char *op, const char *name, const dk_tensor *t, int ndim, const char *layout)
{
    if (t->ndim == ndim) return DK_OK;
    return dk_error(DK_EINVAL, "%s: '%s' must be %d-d %s, got %d dimensions", op, name, ndim, layout ? layout : "",
                    (int)t->ndim);
}

dk_status dk_check_shape(const char *op, const char *name, const dk_tensor *t, int ndim, const int64_t *shape)
{
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = shape[i] < 0 ? t->shape[i] >= 0 : t->shape[i] == shape[i];
    if (same) return DK_OK;
    /* Formatting is for the error path only: these checks run on every call. */
    char want[160], got[160];
    return dk_error(DK_EINVAL, "%s: '%s' must have shape [%s], got [%s]", op, name,
                    dk__shape_str(t, ndim, shape, want, sizeof want), dk__shape_str(t, t->ndim, NULL, got, sizeof got));
}

dk_status dk_check_dtype(const char *op, const char *name, const dk_tensor *t, dk_dtype dtype)
{
    char got[64];
    if (dk_tensor_dtype(t) == dtype) return DK_OK;
    return dk_error(DK_ETYPE, "%s: '%s' must be %s, got %s", op, name, dk_dtype_name(dtype),
                    dk_dl_dtype_str(t->dtype, got, sizeof got));
}

dk_status dk_check_float(const char *op, const char *name, const dk_tensor *t)
{
    char got[64];
    switch (dk_tensor_dtype(t)) {
    case DK_FLOAT16:
    case DK_BFLOAT16:
    case DK_FLOAT32:
    case DK_FLOAT64: return DK_OK;
    default:
        return dk_error(DK_ETYPE, "%s: '%s' must be float16, bfloat16, float32 or float64, got %s", op, name,
                        dk_dl_dtype_str(t->dtype, got, sizeof got));
    }
}

dk_status dk_check_same_dtype(const char *op, const char *name, const dk_tensor *t, const char *ref_name,
                              const dk_tensor *ref)
{
    char a[64], b[64];
    if (t->dtype.code == ref->dtype.code && t->dtype.bits == ref->dtype.bits && t->dtype.lanes == ref->dtype.lanes)
        return DK_OK;
    return dk_error(DK_ETYPE, "%s: '%s' must have the dtype of '%s' (%s), got %s", op, name, ref_name,
                    dk_dl_dtype_str(ref->dtype, b, sizeof b), dk_dl_dtype_str(t->dtype, a, sizeof a));
}

dk_status dk_tensor_validate(const dk_tensor *t, const char *op, const char *arg)
{
    if (!t) return dk_error(DK_EINVAL, "%s: parameter '%s' is NULL", op, arg);
    if (t->ndim < 0 || t->ndim > DK_MAX_NDIM)
        return dk_error(DK_EBUFFER, "%s: parameter '%s' has %d dimensions (0 to %d are supported)", op, arg,
                        (int)t->ndim, DK_MAX_NDIM);
    if (t->ndim > 0 && !t->shape)
        return dk_error(DK_EBUFFER, "%s: parameter '%s' is a malformed DLTensor (ndim %d, shape NULL)", op, arg,
                        (int)t->ndim);
    if (t->dtype.lanes < 1 || t->dtype.bits == 0 || ((unsigned)t->dtype.bits * t->dtype.lanes) % 8 != 0)
        return dk_error(DK_EBUFFER, "%s: parameter '%s' has a malformed dtype (code %u, bits %u, lanes %u)", op, arg,
                        t->dtype.code, t->dtype.bits, t->dtype.lanes);
    if (t->byte_offset > (uint64_t)INT64_MAX)
        return dk_error(DK_EBUFFER, "%s: parameter '%s' has a byte offset beyond 2^63", op, arg);
    uintptr_t lo, hi;
    const int e = dk_tensor_extent(t, &lo, &hi);
    if (e < 0)
        return dk_error(DK_EBUFFER, "%s: parameter '%s' has a shape and strides that overflow 64-bit offsets", op, arg);
    if (e > 0 && !t->data)
        return dk_error(DK_EBUFFER,
                        "%s: parameter '%s' has elements but no memory (a NULL data pointer, e.g. torch's efficient "
                        "zero tensor, a wrapper subclass, or a storage freed with resize_(0))",
                        op, arg);
    return DK_OK;
}

dk_status dk_dlpack_accept(void *managed, bool versioned, bool writable, const char *op, const char *arg,
                           dk_tensor **out)
{
    if (!managed) return dk_error(DK_EBUFFER, "%s: parameter '%s' is a DLPack capsule holding NULL", op, arg);
    dk_tensor *t;
    if (versioned) {
        DLManagedTensorVersioned *mv = (DLManagedTensorVersioned *)managed;
        /* Only version and deleter are stable across major versions: read nothing else. */
        if (mv->version.major != DLPACK_MAJOR_VERSION)
            return dk_error(DK_EBUFFER, "%s: parameter '%s' has DLPack version %u.%u; dkit understands %d.x", op, arg,
                            (unsigned)mv->version.major, (unsigned)mv->version.minor, DLPACK_MAJOR_VERSION);
        if (writable && (mv->flags & DLPACK_FLAG_BITMASK_READ_ONLY))
            return dk_error(DK_EBUFFER, "%s: parameter '%s' is read-only", op, arg);
        /* A producer may answer __dlpack__() with a copy (the spec's copy=None); results written
         * into it would never reach the caller's array. */
        if (writable && (mv->flags & DLPACK_FLAG_BITMASK_IS_COPIED))
            return dk_error(DK_EBUFFER,
                            "%s: parameter '%s' was exported as a copy (DLPACK_FLAG_BITMASK_IS_COPIED): results "
                            "written to it would be lost; pass an array that shares its memory",
                            op, arg);
        t = &mv->dl_tensor;
    } else {
        t = &((DLManagedTensor *)managed)->dl_tensor;
    }
    dk_status st = dk_tensor_validate(t, op, arg);
    if (st == DK_OK) *out = t;
    return st;
}

bool dk_tensor_host_readable(const dk_tensor *t)
{
    switch ((int)t->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLROCMHost: return true;
    default: return false;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Aliasing (Note [Aliasing])                                                                 */

static int64_t dk__elem_bytes(const dk_tensor *t) { return ((int64_t)t->dtype.bits * t->dtype.lanes + 7) / 8; }

int dk_tensor_extent(const dk_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    int64_t below = 0, above = 0; /* element offsets of the lowest and highest element */
    int64_t compact = 1;
    *lo = *hi = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] <= 0) return 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const int64_t n = t->shape[d];
        const int64_t s = t->strides ? t->strides[d] : compact;
        int64_t e;
        if (__builtin_mul_overflow(n - 1, s, &e)) goto too_large;
        if (e < 0 ? __builtin_add_overflow(below, e, &below) : __builtin_add_overflow(above, e, &above)) goto too_large;
        if (!t->strides && __builtin_mul_overflow(compact, n, &compact)) goto too_large;
    }
    const int64_t es = dk__elem_bytes(t);
    int64_t b0, b1;
    if (__builtin_mul_overflow(below, es, &b0) || __builtin_add_overflow(above, 1, &b1) ||
        __builtin_mul_overflow(b1, es, &b1))
        goto too_large;
    const uintptr_t base = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    *lo = base + (uintptr_t)b0; /* b0 <= 0: the unsigned wrap is the subtraction */
    *hi = base + (uintptr_t)b1;
    return 1;
too_large:
    dk_error(DK_EINVAL, "a tensor's shape and strides overflow 64-bit offsets");
    return -1;
}

dk_status dk_check_no_internal_overlap(const char *op, const char *name, const dk_tensor *t)
{
    if (!t->strides) return DK_OK;
    /* The dimensions of size > 1 by increasing |stride| (insertion sort: ndim is small). */
    int64_t st[64], sz[64];
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) return DK_OK; /* no elements */
        if (t->shape[d] == 1) continue;
        if (t->strides[d] == 0)
            return dk_error(DK_EINVAL,
                            "%s: '%s' repeats its elements (dimension %d has stride 0, e.g. an expanded view), so "
                            "results written to it would overwrite each other; pass a tensor with distinct elements",
                            op, name, d);
        if (n == 64) return dk_error(DK_EINVAL, "%s: '%s' has more than 64 dimensions", op, name);
        if (t->strides[d] == INT64_MIN)
            return dk_error(DK_EINVAL, "%s: '%s' spans more memory than an address space holds", op, name);
        const int64_t a = t->strides[d] < 0 ? -t->strides[d] : t->strides[d];
        int i = n++;
        while (i > 0 && st[i - 1] > a) {
            st[i] = st[i - 1];
            sz[i] = sz[i - 1];
            i--;
        }
        st[i] = a;
        sz[i] = t->shape[d];
    }
    /* Nested strides: each one beyond the span of the dimensions inside it. */
    int64_t span = 0;
    for (int i = 0; i < n; i++) {
        if (st[i] <= span)
            return dk_error(DK_EINVAL,
                            "%s: '%s' has strides under which its elements may overlap (each stride must exceed the "
                            "span of the dimensions with smaller strides), so results written to it could overwrite "
                            "each other; pass a tensor with distinct elements",
                            op, name);
        int64_t e;
        if (__builtin_mul_overflow(sz[i] - 1, st[i], &e) || __builtin_add_overflow(span, e, &span))
            return dk_error(DK_EINVAL, "%s: '%s' spans more memory than an address space holds", op, name);
    }
    return DK_OK;
}

/* Row-major with no gaps (size-1 dimensions free): then no two indices share an element. */
static bool dk__compact(const dk_tensor *t)
{
    if (!t->strides) return true;
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

static inline uint64_t dk__device_word(const dk_tensor *t)
{
    uint64_t w;
    __builtin_memcpy(&w, &t->device, sizeof w);
    return w;
}

/* Note [Aliasing], exactly and with overflow checks: what the inlined check of every entry
 * (dk__op_check_aliasing in dk_dispatch.h) leaves to it. */
dk_status dk__op_check_aliasing_slow(const dk_op *op, const dk_tensor *const *t)
{
    uintptr_t lo[DK_STACK_MAX], hi[DK_STACK_MAX];
    uint32_t live = 0, outs = 0;
    const int n = op->nargs;
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        const int e = dk_tensor_extent(t[i], &lo[i], &hi[i]);
        if (DK_UNLIKELY(e < 0))
            return dk_error(DK_EINVAL, "%s: parameter '%s' has a shape and strides that overflow 64-bit offsets",
                            op->name, op->args[i].name);
        if (e == 0) continue;
        live |= 1u << i;
        if (op->args[i].out) outs |= 1u << i;
    }
    for (uint32_t o = outs; o; o &= o - 1) {
        const int i = __builtin_ctz(o);
        if (!dk__compact(t[i])) {
            dk_status st = dk_check_no_internal_overlap(op->name, op->args[i].name, t[i]);
            if (st) return st;
        }
        const uint64_t dev = dk__device_word(t[i]);
        for (uint32_t r = live & ~(1u << i); r; r &= r - 1) {
            const int j = __builtin_ctz(r);
            if (lo[i] < hi[j] && lo[j] < hi[i] && dk__device_word(t[j]) == dev)
                return dk_error(
                    DK_EINVAL,
                    "%s: output '%s' overlaps %s '%s' in memory; an op's outputs must not share memory with "
                    "its other arguments (pass a separate tensor)",
                    op->name, op->args[i].name, op->args[j].out ? "output" : "argument", op->args[j].name);
        }
    }
    return DK_OK;
}

/* ---- RoIs (dk_check.h) ---- */

/* RoIs [K, width]: `layout` names the columns in the message. */
static dk_status dk__check_rois(const char *op, const dk_tensor *rois, dk_dtype dt, int64_t width, const char *layout)
{
    if (rois->ndim != 2 || rois->shape[1] != width || rois->shape[0] < 0)
        return dk_error(DK_EINVAL, "%s: 'rois' must have shape [K, %lld] (%s), got %d-d%s", op, (long long)width,
                        layout, (int)rois->ndim,
                        rois->ndim != 2           ? ""
                        : rois->shape[1] != width ? " with a different width"
                                                  : " with K < 0");
    return dk_check_dtype(op, "rois", rois, dt);
}

/* dk_check.h */
dk_status dk_check_rois(const char *op, const dk_tensor *rois, dk_dtype dt)
{
    return dk__check_rois(op, rois, dt, 5, "batch_index, x1, y1, x2, y2");
}

/* dk_check.h */
dk_status dk_check_rotated_rois(const char *op, const dk_tensor *rois, dk_dtype dt)
{
    return dk__check_rois(op, rois, dt, 6, "batch_index, cx, cy, w, h, angle");
}

/* Element `off` of a rois tensor's data p, of dtype dt (both read once per call: reading them per
 * element was two calls into dk_tensor.c, most of the check's 180 instructions per RoI). */
static inline double dk__roi_load(const char *p, dk_dtype dt, int64_t off)
{
    switch (dt) {
    case DK_FLOAT32: return ((const float *)p)[off];
    case DK_FLOAT64: return ((const double *)p)[off];
    case DK_FLOAT16: return dk_half_to_float(((const uint16_t *)p)[off]);
    case DK_BFLOAT16: return dk_bfloat16_to_float(((const uint16_t *)p)[off]);
    default: return NAN;
    }
}

/* Columns 1 to 4 are lengths or coordinates, scaled by spatial_scale; any further column (the
 * rotated boxes' angle) need only be finite. */
static dk_status dk__check_roi_values(const char *op, const dk_tensor *rois, int64_t n, double spatial_scale, int width)
{
    const bool in_float = dk_tensor_dtype(rois) != DK_FLOAT64; /* Note [Scale in the compute type] */
    if (!dk_tensor_host_readable(rois)) return DK_OK;
    const int64_t s0 = dk_tensor_stride(rois, 0), s1 = dk_tensor_stride(rois, 1);
    const char *p = (const char *)dk_tensor_data(rois);
    const dk_dtype dt = dk_tensor_dtype(rois);
    const int64_t k = s0 == 0 && rois->shape[0] > 0 ? 1 : rois->shape[0];
    for (int64_t i = 0; i < k; i++) {
        double b = dk__roi_load(p, dt, i * s0);
        if (!(b >= 0 && b < (double)n) || b != floor(b))
            return dk_error(DK_EINDEX, "%s: rois[%lld] has batch index %.17g, which is not an integer in [0, %lld)", op,
                            (long long)i, b, (long long)n);
        for (int j = 1; j < width; j++) {
            double c = dk__roi_load(p, dt, i * s0 + j * s1);
            if (!isfinite(c))
                return dk_error(DK_EINVAL, "%s: rois[%lld] has a non-finite %s (%g)", op, (long long)i,
                                j < 5 ? "coordinate" : "angle", c);
            if (j < 5 && (in_float ? !isfinite((float)c * (float)spatial_scale) : !isfinite(c * spatial_scale)))
                return dk_error(DK_EINVAL,
                                "%s: rois[%lld] has a coordinate (%g) that overflows %s when multiplied by "
                                "spatial_scale (%g)",
                                op, (long long)i, c, in_float ? "float32" : "float64", spatial_scale);
        }
    }
    return DK_OK;
}

/* dk_check.h */
dk_status dk_check_roi_values(const char *op, const dk_tensor *rois, int64_t n, double spatial_scale)
{
    return dk__check_roi_values(op, rois, n, spatial_scale, 5);
}

/* dk_check.h */
dk_status dk_check_rotated_roi_values(const char *op, const dk_tensor *rois, int64_t n, double spatial_scale)
{
    return dk__check_roi_values(op, rois, n, spatial_scale, 6);
}
