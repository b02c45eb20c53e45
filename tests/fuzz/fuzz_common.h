/*
 * fuzz_common.h — what dkit's libFuzzer targets share (tests/fuzz/rules.mk builds them):
 *
 *  - fz_in: reading the fuzzer's bytes as numbers, choices and special values (zeros once the
 *    input runs out, so every input decodes to something);
 *  - fz_tensor: a CPU tensor whose memory is one malloc'd block covering exactly its byte range
 *    (AddressSanitizer fences it on both sides), in any layout: permuted, padded, negative or
 *    zero strides, overlapping; with the mask of the bytes its elements occupy;
 *  - the contract of every dkit call (dk_status.h), checked around each op call: an error leaves
 *    every tensor unchanged and sets a message; a success leaves inputs unchanged and writes
 *    outputs only inside their elements (never the gaps of a padded layout).
 * A broken contract aborts, which libFuzzer reports as a crash, like a sanitizer finding.
 *
 * Each target is one translation unit that includes this header once.
 */
#ifndef DK_FUZZ_COMMON_H
#define DK_FUZZ_COMMON_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dk_parallel.h"
#include "dkit.h"
#include "dk_tunables.h"
#include "kernels/dk_half.h"
#include "roi_align.h"

/* The harness's own loops (masks, fills, comparisons) are not what is being fuzzed: no coverage
 * instrumentation there, which would only slow every execution down (AddressSanitizer still
 * checks them). FZ_HARNESS_BLOCK is for the few loops that only walk the harness's own blocks,
 * whole, by their recorded sizes (fz_tensor: mem, mask, snap): they go without AddressSanitizer
 * as well, so that they vectorise; they were a third of fuzz_dlpack's time. */
/* FZ_HARNESS_LOOP marks the harness functions with loops over elements: they also stay out of
 * line, since clang 14 inlines them into an instrumented caller and instruments the loop there
 * (fz_fill inlined into fuzz_boxed's entry point: a fifth of its time in comparison tracing). */
#if defined(__clang__)
#define FZ_HARNESS __attribute__((no_sanitize("coverage")))
#define FZ_HARNESS_LOOP __attribute__((no_sanitize("coverage"), noinline))
#define FZ_HARNESS_BLOCK __attribute__((no_sanitize("coverage", "address"), noinline))
#else
#define FZ_HARNESS
#define FZ_HARNESS_LOOP
#define FZ_HARNESS_BLOCK
#endif

/* ------------------------------------------------------------------------------------------ */
/* Failing                                                                                    */

#define FZ_ASSERT(cond, ...)                                                                    \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "fuzz: %s:%d: contract broken: %s\n  ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fprintf(stderr, "\n  last dkit error: %s\n", dk_last_error());                      \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Reading the input                                                                          */

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_in;

static inline uint8_t fz_u8(fz_in *in)
{
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

static inline uint16_t fz_u16(fz_in *in) { return (uint16_t)(fz_u8(in) | (unsigned)fz_u8(in) << 8); }
static inline uint32_t fz_u32(fz_in *in) { return fz_u16(in) | (uint32_t)fz_u16(in) << 16; }
static inline uint64_t fz_u64(fz_in *in) { return fz_u32(in) | (uint64_t)fz_u32(in) << 32; }
static inline bool fz_bool(fz_in *in) { return fz_u8(in) & 1; }
/* An integer in [0, n), n <= 256. */
static inline int fz_pick(fz_in *in, int n) { return n <= 1 ? 0 : fz_u8(in) % n; }
/* An integer in [lo, hi], hi - lo < 256. */
static inline int64_t fz_range(fz_in *in, int64_t lo, int64_t hi) { return lo + fz_pick(in, (int)(hi - lo + 1)); }

/* A double: small values mostly, then the ones that break arithmetic. */
static inline double fz_special(int i)
{
    static const double s[] = {0.0,
                               -0.0,
                               1.0,
                               -1.0,
                               0.5,
                               NAN,
                               INFINITY,
                               -INFINITY,
                               1e30,
                               -1e30,
                               65504.0,
                               65536.0,
                               1e-40,
                               5e-324,
                               1e300,
                               -1e300,
                               1.7976931348623157e308,
                               4294967296.0,
                               -2.5,
                               0.25};
    return s[(unsigned)i % (sizeof s / sizeof s[0])]; /* unsigned: callers pass any bits */
}

static inline double fz_f64(fz_in *in)
{
    const uint8_t b = fz_u8(in);
    if (b < 200) return ((double)b - 100.0) / 8.0;
    if (b < 250) return fz_special(b - 200);
    double d;
    uint64_t u = fz_u64(in);
    memcpy(&d, &u, sizeof d);
    return d;
}

/* splitmix64: values for large fills without spending input bytes on each. */
FZ_HARNESS static inline uint64_t fz_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------------------------ */
/* Tensors over exactly their memory                                                          */

#define FZ_MAX_NDIM 8

typedef struct {
    dk_tensor t;
    int64_t shape[FZ_MAX_NDIM], strides[FZ_MAX_NDIM];
    unsigned char *mem; /* malloc'd: exactly the bytes of [first element, last element] */
    size_t bytes;
    unsigned char *snap; /* the bytes before a call */
    unsigned char *mask; /* 1 where a byte belongs to an element */
    bool out;            /* written by the call under test */
    bool repeats;        /* two indices share memory (stride 0, or overlapping strides) */
} fz_tensor;

static inline size_t fz_elem_size(DLDataType dt) { return ((size_t)dt.bits * dt.lanes + 7) / 8; }

/* Element offsets below and above the first element (saturating is not needed: callers keep
 * shapes small). */
FZ_HARNESS static inline void fz_span(const fz_tensor *f, int64_t *below, int64_t *above)
{
    *below = *above = 0;
    for (int d = 0; d < f->t.ndim; d++) {
        const int64_t e = (f->shape[d] - 1) * f->strides[d];
        if (e < 0) *below += e;
        else *above += e;
    }
}

FZ_HARNESS static inline int64_t fz_numel(const fz_tensor *f)
{
    int64_t n = 1;
    for (int d = 0; d < f->t.ndim; d++) n *= f->shape[d] > 0 ? f->shape[d] : 0;
    return n;
}

/* memset, as single stores for one element of 1 to 8 bytes (memset itself, a call into
 * AddressSanitizer's interceptor, was most of fz_mark_elements' time for strided tensors). */
#if defined(__clang__)
__attribute__((no_sanitize("coverage", "address"), always_inline))
#endif
static inline void
fz_set_bytes(unsigned char *p, unsigned char v, size_t n)
{
    const uint64_t x = v * UINT64_C(0x0101010101010101);
    switch (n) {
    case 1: *p = v; return;
    case 2: memcpy(p, &x, 2); return;
    case 4: memcpy(p, &x, 4); return;
    case 8: memcpy(p, &x, 8); return;
    default: memset(p, v, n); return;
    }
}

/* Marks f's elements in its mask (noting elements that share bytes) and zeroes them. Offsets are
 * within the block by fz_span's construction (asserted, since AddressSanitizer is off here). */
FZ_HARNESS_BLOCK static inline void fz_mark_elements(fz_tensor *f, size_t first, size_t es)
{
    const int ndim = f->t.ndim;
    int64_t idx[FZ_MAX_NDIM] = {0};
    bool repeats = false;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < ndim; d++) off += idx[d] * f->strides[d];
        const size_t b = first + (size_t)(off * (int64_t)es);
        /* The innermost dimension at once when its elements are adjacent (stride 1). */
        const bool run = ndim > 0 && f->strides[ndim - 1] == 1;
        const size_t len = run ? (size_t)f->shape[ndim - 1] * es : es;
        if (b + len > f->bytes) abort(); /* the harness's own bug: fz_span is wrong */
        unsigned char seen = 0;
        for (size_t k = 0; k < len; k++) seen |= f->mask[b + k];
        repeats |= seen != 0;
        fz_set_bytes(f->mask + b, 1, len);
        fz_set_bytes(f->mem + b, 0, len);
        int d = run ? ndim - 2 : ndim - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < f->shape[d]) break;
            idx[d] = 0;
        }
        if (d < 0) break;
    }
    f->repeats = repeats;
}

/*
 * A tensor of `dt` with `ndim` dims of sizes shape[] (each >= 0, small), laid out by `layout`
 * (a byte from the input: dimension order, padding, negative, zero and overlapping strides),
 * with its memory allocated to exactly its elements' range. `null_strides` asks for NULL
 * strides (only for a compact row-major layout). Elements are zero; gaps hold 0xA5.
 */
FZ_HARNESS_LOOP static inline void fz_tensor_init(fz_tensor *f, DLDataType dt, int ndim, const int64_t *shape,
                                                  fz_in *in, bool allow_repeats)
{
    memset(f, 0, sizeof *f);
    f->t.device.device_type = kDLCPU;
    f->t.ndim = ndim;
    f->t.dtype = dt;
    f->t.shape = f->shape;
    for (int d = 0; d < ndim; d++) f->shape[d] = shape[d];
    const uint8_t layout = fz_u8(in);
    int order[FZ_MAX_NDIM];
    for (int d = 0; d < ndim; d++) order[d] = d;
    switch (layout & 7) {
    case 0: /* row-major, NULL strides */
    case 1: /* row-major, explicit */ break;
    case 2: /* channels-last for 4-d, else reversed */
        if (ndim == 4) {
            order[0] = 0, order[1] = 2, order[2] = 3, order[3] = 1;
        } else {
            for (int d = 0; d < ndim; d++) order[d] = ndim - 1 - d;
        }
        break;
    default: /* a permutation from the input */
        for (int d = ndim - 1; d > 0; d--) {
            const int j = fz_pick(in, d + 1), t = order[d];
            order[d] = order[j];
            order[j] = t;
        }
        break;
    }
    const int64_t gap = (layout & 8) ? fz_range(in, 1, 3) : 0; /* padding after each innermost run */
    const bool pad_all = (layout & 16) != 0;                   /* and after every other dimension */
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        const int d = order[i];
        f->strides[d] = stride;
        stride *= (shape[d] > 0 ? shape[d] : 1) + ((i == ndim - 1 || pad_all) ? gap : 0);
    }
    if (layout & 32) /* negative strides: the dimension runs backwards */
        for (int d = 0; d < ndim; d++)
            if (fz_bool(in)) f->strides[d] = -f->strides[d];
    if ((layout & 64) && allow_repeats) /* expanded or overlapping: stride 0 or a small stride */
        for (int d = 0; d < ndim; d++) {
            const int c = fz_pick(in, 4);
            if (c == 1) f->strides[d] = 0;
            if (c == 2) f->strides[d] = fz_range(in, -2, 2);
        }
    const bool compact_rm = (layout & 0x7f) == 0;
    f->t.strides = (compact_rm && !(layout & 128)) ? NULL : f->strides;
    if (!f->t.strides) { /* NULL strides mean row-major: keep f->strides equal for fz_span */
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            f->strides[d] = s;
            s *= shape[d] > 0 ? shape[d] : 1;
        }
    }
    const size_t es = fz_elem_size(dt);
    int64_t below, above;
    fz_span(f, &below, &above);
    const bool empty = fz_numel(f) == 0;
    f->bytes = empty ? 0 : (size_t)(above - below + 1) * es;
    f->mem = (unsigned char *)malloc(f->bytes ? f->bytes : 1);
    f->mask = (unsigned char *)calloc(f->bytes ? f->bytes : 1, 1);
    f->snap = (unsigned char *)malloc(f->bytes ? f->bytes : 1);
    if (!f->mem || !f->mask || !f->snap) abort();
    memset(f->mem, 0xA5, f->bytes);
    /* The first element sits -below elements into the block; the pointer goes either in data or
     * in byte_offset (as DLPack producers do both). Empty tensors get memory or NULL. */
    const size_t first = (size_t)(-below) * es;
    if (empty && (layout & 128)) {
        f->t.data = NULL;
    } else if (fz_bool(in)) {
        f->t.data = f->mem;
        f->t.byte_offset = first;
    } else {
        f->t.data = f->mem + first;
    }
    if (empty) return;
    fz_mark_elements(f, first, es);
}

static inline void fz_tensor_free(fz_tensor *f)
{
    free(f->mem);
    free(f->mask);
    free(f->snap);
    f->mem = f->mask = f->snap = NULL;
}

/* Address of element `lin` (row-major index) of f. */
FZ_HARNESS static inline void *fz_elem(const fz_tensor *f, int64_t lin)
{
    int64_t off = 0;
    for (int d = f->t.ndim - 1; d >= 0; d--) {
        const int64_t n = f->shape[d];
        off += (lin % n) * f->strides[d];
        lin /= n;
    }
    return (char *)dk_tensor_data(&f->t) + off * (int64_t)fz_elem_size(f->t.dtype);
}

/* Writes v at p, an element of f (whose dtype is dt), converted to dt (raw bits for dtypes dkit
 * does not take). */
FZ_HARNESS static inline void fz_store(const fz_tensor *f, dk_dtype dt, void *p, double v)
{
    switch (dt) {
    case DK_FLOAT32: {
        const float x = (float)v;
        memcpy(p, &x, 4);
        break;
    }
    case DK_FLOAT64: memcpy(p, &v, 8); break;
    case DK_FLOAT16: {
        const uint16_t h = dk_float_to_half((float)v);
        memcpy(p, &h, 2);
        break;
    }
    case DK_BFLOAT16: {
        const uint16_t h = dk_float_to_bfloat16((float)v);
        memcpy(p, &h, 2);
        break;
    }
    default: {
        uint64_t bits;
        memcpy(&bits, &v, 8);
        const size_t es = fz_elem_size(f->t.dtype);
        memcpy(p, &bits, es < 8 ? es : 8);
    }
    }
}

/* Writes v into element `lin` (row-major index). */
FZ_HARNESS static inline void fz_set(fz_tensor *f, int64_t lin, double v)
{
    fz_store(f, dk_tensor_dtype(&f->t), fz_elem(f, lin), v);
}

/* Fills every element: from a seed with special values at a rate chosen by the input, or from
 * the input itself. */
FZ_HARNESS_LOOP static inline void fz_fill(fz_tensor *f, fz_in *in)
{
    const int64_t n = fz_numel(f);
    const uint8_t mode = fz_u8(in);
    uint64_t seed = fz_u32(in);
    const int ndim = f->t.ndim;
    const int64_t es = (int64_t)fz_elem_size(f->t.dtype);
    const dk_dtype dt = dk_tensor_dtype(&f->t);
    char *const base = (char *)dk_tensor_data(&f->t);
    int64_t idx[FZ_MAX_NDIM] = {0}, off = 0; /* element i's row-major index and its offset */
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (mode & 3) {
        case 0: v = (double)(int64_t)(fz_mix(&seed) % 2001 - 1000) / 100.0; break;
        case 1: {
            const uint64_t r = fz_mix(&seed);
            v = (r & 31) == 0 ? fz_special((int)(r >> 8)) : (double)(int64_t)(r % 2001 - 1000) / 100.0;
            break;
        }
        case 2: v = fz_f64(in); break;
        default: v = (double)(i % 7); break;
        }
        fz_store(f, dt, base + off * es, v);
        /* Steps only between offsets of real elements, so a stride of any size (a fuzzed
         * extent-1 dimension with stride -2^63) never overflows. */
        for (int d = ndim - 1; d >= 0; d--) {
            if (idx[d] + 1 < f->shape[d]) {
                off += f->strides[d];
                idx[d]++;
                break;
            }
            off -= idx[d] * f->strides[d];
            idx[d] = 0;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The contract of a call                                                                     */

FZ_HARNESS_LOOP static inline void fz_snapshot(fz_tensor *const *ts, int n)
{
    for (int i = 0; i < n; i++)
        if (ts[i]) memcpy(ts[i]->snap, ts[i]->mem, ts[i]->bytes);
}

/* The first byte of f that differs from its snapshot (f->bytes when none): 8 bytes at a time. */
FZ_HARNESS_BLOCK static inline size_t fz_first_change(const fz_tensor *f)
{
    size_t b = 0;
    for (; b + 8 <= f->bytes; b += 8) {
        uint64_t x, y;
        memcpy(&x, f->mem + b, 8);
        memcpy(&y, f->snap + b, 8);
        if (x != y) return b;
    }
    for (; b < f->bytes; b++)
        if (f->mem[b] != f->snap[b]) return b;
    return b;
}

/* After a call that returned st: an error changed nothing and has a message; a success wrote
 * only the elements of outputs. */
FZ_HARNESS_LOOP static inline void fz_verify(const char *what, dk_status st, fz_tensor *const *ts, int n)
{
    FZ_ASSERT((int)st >= 0 && (int)st < DK_STATUS_COUNT, "%s returned status %d", what, (int)st);
    if (st != DK_OK)
        FZ_ASSERT(dk_last_error()[0] != '\0', "%s failed (%s) without a message", what, dk_status_name(st));
    for (int i = 0; i < n; i++) {
        const fz_tensor *f = ts[i];
        if (!f) continue;
        /* Note [Aliasing] in dk_check.h: an output whose elements share memory is refused. */
        FZ_ASSERT(st != DK_OK || !f->out || !f->repeats, "%s accepted output tensor %d, whose elements overlap", what,
                  i);
        const size_t b0 = fz_first_change(f);
        for (size_t b = b0; b < f->bytes; b++) {
            if (f->mem[b] == f->snap[b]) continue;
            FZ_ASSERT(st == DK_OK, "%s failed (%s) but changed byte %zu of tensor %d", what, dk_status_name(st), b, i);
            FZ_ASSERT(f->out, "%s changed byte %zu of its input tensor %d", what, b, i);
            FZ_ASSERT(f->mask[b], "%s wrote byte %zu of output tensor %d, which is between its elements", what, b, i);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Tunables and threads (Note [Tunables] in dk_tunables.h): every evaluation path of roi_align's
 * CPU kernel, chosen by the input.                                                           */

static inline void fz_tunables(fz_in *in)
{
    static const int64_t bounds[] = {0, 64, 4096, (int64_t)8 << 20};
    static const int64_t works[] = {0, 1, 32768, INT64_MAX};
    static const int64_t large[] = {0, 1, 256, (int64_t)8 << 20};
    const uint8_t b = fz_u8(in);
    dk_status st = dk_tunable_set("roi_align.order", (int64_t)(b % 3) - 1, NULL);
    st |= dk_tunable_set("roi_align.taps_bound_bytes", bounds[(b >> 2) & 3], NULL);
    st |= dk_tunable_set("parallel.min_work", works[(b >> 4) & 3], NULL);
    st |= dk_tunable_set("large_output.min_bytes", large[(b >> 6) & 3], NULL);
    const uint8_t c = fz_u8(in);
    st |= dk_tunable_set("large_output.stage_bytes", (c & 1) ? 0 : (c & 2) ? 256 : (int64_t)8 << 20, NULL);
    /* Without OpenMP the parallel loop starts pthreads (dk_parallel.c): its split and the
     * per-thread scratch sizes are what a count changes. One input in eight asks for 2 to 4
     * threads: starting threads costs more than most calls here, and would otherwise halve the
     * campaign's executions. */
    st |= dk_set_num_threads((c & 0x1c) == 0x1c ? 2 + (c >> 5) % 3 : (c >> 2) & 1);
    FZ_ASSERT(st == DK_OK, "setting a tunable failed");
}

#endif /* DK_FUZZ_COMMON_H */
