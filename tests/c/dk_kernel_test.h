/*
 * dk_kernel_test.h — the kernel-test harness: tensors that own host memory, in any dtype and
 * layout, filled with reproducible random values; reading and writing elements as double; and
 * comparing a kernel's output with a reference's, element by element, with a report of the worst
 * element when they differ.
 *
 * A kernel test runs a kernel (a CPU kernel directly, a GPU kernel body on the host through the
 * emulation of the GPU issue) on such tensors and compares it with a reference written
 * independently, usually per element from the shared math in csrc/common/kernels/. Header-only,
 * included by each test executable (one translation unit each).
 */
#ifndef DK_KERNEL_TEST_H
#define DK_KERNEL_TEST_H

#include <math.h>

#include "dk_test.h"
#include "kernels/dk_half.h"

typedef struct {
    dk_tensor t;
    int64_t shape[8], strides[8];
    void *mem;    /* owned */
    size_t bytes; /* of mem */
} dkk_tensor;

/* A tensor of `dt` with `ndim` dims. order lists the dims from outermost to innermost in memory
 * (NULL: row-major; {0, 2, 3, 1}: channels-last for 4-d); `gap` extra elements after each
 * innermost run make it non-contiguous (0: compact). Elements are zero. */
static inline dkk_tensor *dkk_new(dk_dtype dt, int ndim, const int64_t *shape, const int *order, int64_t gap)
{
    dkk_tensor *k = calloc(1, sizeof *k);
    assert_non_null(k);
    assert_true(ndim >= 0 && ndim <= 8);
    int ord[8];
    for (int i = 0; i < ndim; i++) ord[i] = order ? order[i] : i;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        const int d = ord[i];
        k->shape[d] = shape[d];
        k->strides[d] = stride;
        stride *= shape[d] + (i == ndim - 1 ? gap : 0);
    }
    const size_t es = dk_dtype_size(dt);
    k->bytes = (size_t)(stride > 0 ? stride : 1) * es;
    k->mem = calloc(1, k->bytes);
    assert_non_null(k->mem);
    k->t.data = k->mem;
    k->t.device.device_type = kDLCPU;
    k->t.ndim = ndim;
    k->t.dtype = dk_dtype_to_dl(dt);
    k->t.shape = k->shape;
    k->t.strides = k->strides;
    return k;
}

static inline void dkk_free(dkk_tensor *k)
{
    if (!k) return;
    free(k->mem);
    free(k);
}

static inline int64_t dkk_offset(const dkk_tensor *k, const int64_t *idx)
{
    int64_t o = 0;
    for (int d = 0; d < k->t.ndim; d++) o += idx[d] * k->strides[d];
    return o;
}

static inline double dkk_read_at(const dk_tensor *t, int64_t off)
{
    const char *p = (const char *)dk_tensor_data(t);
    switch (dk_tensor_dtype(t)) {
    case DK_FLOAT32: return ((const float *)p)[off];
    case DK_FLOAT64: return ((const double *)p)[off];
    case DK_FLOAT16: return dk_half_to_float(((const uint16_t *)p)[off]);
    case DK_BFLOAT16: return dk_bfloat16_to_float(((const uint16_t *)p)[off]);
    case DK_INT32: return ((const int32_t *)p)[off];
    case DK_INT64: return (double)((const int64_t *)p)[off];
    case DK_UINT8: return ((const uint8_t *)p)[off];
    case DK_INT8: return ((const int8_t *)p)[off];
    case DK_INT16: return ((const int16_t *)p)[off];
    default: fail_msg("dkk_read_at: dtype %d", (int)dk_tensor_dtype(t)); return NAN;
    }
}

static inline void dkk_write_at(dk_tensor *t, int64_t off, double v)
{
    char *p = (char *)dk_tensor_data(t);
    switch (dk_tensor_dtype(t)) {
    case DK_FLOAT32: ((float *)p)[off] = (float)v; break;
    case DK_FLOAT64: ((double *)p)[off] = v; break;
    case DK_FLOAT16: ((uint16_t *)p)[off] = dk_float_to_half((float)v); break;
    case DK_BFLOAT16: ((uint16_t *)p)[off] = dk_float_to_bfloat16((float)v); break;
    case DK_INT32: ((int32_t *)p)[off] = (int32_t)v; break;
    case DK_INT64: ((int64_t *)p)[off] = (int64_t)v; break;
    case DK_UINT8: ((uint8_t *)p)[off] = (uint8_t)v; break;
    case DK_INT8: ((int8_t *)p)[off] = (int8_t)v; break;
    case DK_INT16: ((int16_t *)p)[off] = (int16_t)v; break;
    default: fail_msg("dkk_write_at: dtype %d", (int)dk_tensor_dtype(t));
    }
}

static inline double dkk_get(const dkk_tensor *k, const int64_t *idx) { return dkk_read_at(&k->t, dkk_offset(k, idx)); }
static inline void dkk_set(dkk_tensor *k, const int64_t *idx, double v) { dkk_write_at(&k->t, dkk_offset(k, idx), v); }

/* Visits every index of k in row-major order: idx is updated in place; false once past the end. */
static inline bool dkk_next(const dkk_tensor *k, int64_t *idx)
{
    for (int d = k->t.ndim - 1; d >= 0; d--) {
        if (++idx[d] < k->shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/* Reproducible random numbers (splitmix64): the same seed, the same tensors on any machine. */
typedef struct {
    uint64_t s;
} dkk_rng;

static inline uint64_t dkk_u64(dkk_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static inline double dkk_uniform(dkk_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(dkk_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

static inline void dkk_fill_uniform(dkk_tensor *k, dkk_rng *r, double lo, double hi)
{
    int64_t idx[8] = {0};
    if (dk_tensor_numel(&k->t) == 0) return;
    do dkk_set(k, idx, dkk_uniform(r, lo, hi));
    while (dkk_next(k, idx));
}

/* k RoIs [k, 5] of `dt` over n images of h x w feature pixels at `scale` (box coordinates in image
 * pixels, h / scale by w / scale): each box starts up to a fifth of the image before its top-left
 * corner, so that some pass the borders, and every seventh has no width (i % 7 == 3) or a negative
 * height (i % 7 == 5). Image i % n. */
static inline dkk_tensor *dkk_roi_boxes(dk_dtype dt, dkk_rng *r, int64_t k, int64_t n, double h, double w, double scale)
{
    dkk_tensor *t = dkk_new(dt, 2, (int64_t[]){k, 5}, NULL, 0);
    const double ih = h / scale, iw = w / scale;
    for (int64_t i = 0; i < k; i++) {
        const double x1 = dkk_uniform(r, -0.2 * iw, iw), y1 = dkk_uniform(r, -0.2 * ih, ih);
        const double x2 = i % 7 == 3 ? x1 : x1 + dkk_uniform(r, 0.5, 0.8 * iw);
        const double y2 = i % 7 == 5 ? y1 - 1.0 : y1 + dkk_uniform(r, 0.5, 0.8 * ih);
        const double v[5] = {(double)(i % n), x1, y1, x2, y2};
        for (int j = 0; j < 5; j++) dkk_set(t, (int64_t[]){i, j}, v[j]);
    }
    return t;
}

/* Copies every element of src into dst (same shape; any dtypes and layouts). */
static inline void dkk_copy(dkk_tensor *dst, const dkk_tensor *src)
{
    assert_int_equal(dst->t.ndim, src->t.ndim);
    int64_t idx[8] = {0};
    if (dk_tensor_numel(&src->t) == 0) return;
    do dkk_set(dst, idx, dkk_get(src, idx));
    while (dkk_next(src, idx));
}

/*
 * |actual - expected| <= atol + rtol * |expected| for every element, NaN only where expected is
 * NaN, infinities equal; on failure the test fails naming the worst element. `what` names the
 * comparison in that message.
 */
static inline void dkk_assert_close(const dkk_tensor *actual, const dkk_tensor *expected, double atol, double rtol,
                                    const char *what)
{
    assert_int_equal(actual->t.ndim, expected->t.ndim);
    for (int d = 0; d < actual->t.ndim; d++) assert_int_equal(actual->shape[d], expected->shape[d]);
    if (dk_tensor_numel(&actual->t) == 0) return;
    int64_t idx[8] = {0}, worst[8] = {0};
    double worst_excess = 0, wa = 0, we = 0;
    bool bad = false;
    do {
        const double a = dkk_get(actual, idx), e = dkk_get(expected, idx);
        double excess;
        if (isnan(e) || isnan(a)) excess = isnan(e) && isnan(a) ? 0 : INFINITY;
        else if (isinf(e) || isinf(a)) excess = a == e ? 0 : INFINITY;
        else excess = fabs(a - e) - (atol + rtol * fabs(e));
        if (excess > 0 && (!bad || excess > worst_excess)) {
            bad = true;
            worst_excess = excess;
            memcpy(worst, idx, sizeof worst);
            wa = a;
            we = e;
        }
    } while (dkk_next(actual, idx));
    if (bad) {
        char at[128];
        size_t used = 0;
        for (int d = 0; d < actual->t.ndim && used < sizeof at; d++)
            used += (size_t)snprintf(at + used, sizeof at - used, "%s%lld", d ? ", " : "", (long long)worst[d]);
        fail_msg("%s: element [%s] is %.9g, expected %.9g (atol %g, rtol %g)", what, at, wa, we, atol, rtol);
    }
}

/* Whether the element at p (dtype dt) is a NaN. */
static inline bool dkk_is_nan_at(const void *p, dk_dtype dt)
{
    uint64_t bits = 0;
    const size_t es = dk_dtype_size(dt);
    memcpy(&bits, p, es); /* little-endian: the low es bytes */
    switch (dt) {
    case DK_FLOAT64: return (bits & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    case DK_FLOAT32: return (bits & 0x7fffffffu) > 0x7f800000u;
    case DK_FLOAT16: return (bits & 0x7fffu) > 0x7c00u;
    case DK_BFLOAT16: return (bits & 0x7fffu) > 0x7f80u;
    default: return false;
    }
}

/*
 * The same values, bit for bit, except that any NaN equals any NaN: IEEE 754 leaves a NaN's
 * sign and payload to the hardware (an x86 CPU's default NaN is negative, an NVIDIA GPU's
 * canonical NaN positive, and each propagates an input NaN's payload its own way), and no kernel
 * of dkit promises them. Everything else, the sign of zero and infinities included, must match.
 */
static inline void dkk_assert_same_values(const dkk_tensor *a, const dkk_tensor *b, const char *what)
{
    assert_int_equal(a->t.ndim, b->t.ndim);
    if (dk_tensor_numel(&a->t) == 0) return;
    const dk_dtype dt = dk_tensor_dtype(&a->t);
    const size_t es = dk_dtype_size(dt);
    int64_t idx[8] = {0};
    do {
        const char *pa = (const char *)a->mem + dkk_offset(a, idx) * (int64_t)es;
        const char *pb = (const char *)b->mem + dkk_offset(b, idx) * (int64_t)es;
        if (memcmp(pa, pb, es) == 0 || (dkk_is_nan_at(pa, dt) && dkk_is_nan_at(pb, dt))) continue;
        fail_msg("%s: the values differ at flat index %lld: %.9g, expected %.9g", what, (long long)dkk_offset(a, idx),
                 dkk_get(a, idx), dkk_get(b, idx));
    } while (dkk_next(a, idx));
}

/* Bitwise equality of two tensors' elements (same dtype): for determinism checks. */
static inline void dkk_assert_identical(const dkk_tensor *a, const dkk_tensor *b, const char *what)
{
    assert_int_equal(a->t.ndim, b->t.ndim);
    if (dk_tensor_numel(&a->t) == 0) return;
    const size_t es = dk_dtype_size(dk_tensor_dtype(&a->t));
    int64_t idx[8] = {0};
    do {
        const char *pa = (const char *)a->mem + dkk_offset(a, idx) * (int64_t)es;
        const char *pb = (const char *)b->mem + dkk_offset(b, idx) * (int64_t)es;
        if (memcmp(pa, pb, es) != 0)
            fail_msg("%s: the bits differ at flat index %lld", what, (long long)dkk_offset(a, idx));
    } while (dkk_next(a, idx));
}

#endif /* DK_KERNEL_TEST_H */
