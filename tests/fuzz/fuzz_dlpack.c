/*
 * fuzz_dlpack.c — DLPack import (dk_dlpack_accept, dk_check.c) of managed tensors built from the
 * input, then each accepted tensor in every tensor role of roi_align forward and backward.
 *
 * From the input: legacy DLManagedTensor or DLManagedTensorVersioned (version, flags), whether the
 * consumer wants to write; ndim (mostly 0..6; 64, 65, negative and huge too); the dtype (the four
 * float types mostly, then any code, bits and lanes); the device (CPU, pinned host memory, GPUs,
 * any type and id); shape and strides, each NULL or an array, with sizes and strides small or
 * hostile (negative, zero, 2^31, 2^62, INT64_MIN); the byte offset (0, to the first element, past
 * it with data moved back, 2^63 and beyond); data NULL or memory.
 *
 * Memory is exact, so that AddressSanitizer sees any read past what the producer really gave:
 *  - the managed struct is allocated to its size; with a major version other than 1 only to the
 *    fields every version shares (version, manager_ctx, deleter: dk_dlpack_accept must read
 *    nothing else), and its deleter aborts (accepting consumes nothing);
 *  - shape and strides hold ndim entries when 0 <= ndim <= DK_MAX_NDIM. Above the rank bound, or
 *    for a negative ndim, the producer declares more than is there: the arrays hold 0..8
 *    entries, and the core must refuse without reading them (Note [Untrusted tensors]: the rank
 *    bound is what keeps such a lie small; below it a lie cannot be caught, so it is not made);
 *  - a host tensor's elements are one malloc'd block of exactly their byte range (up to 64 KiB;
 *    beyond, or when the range overflows, data points at one byte, and the tensor is only
 *    imported); a device tensor's data is a pointer nothing may dereference.
 *
 * Contracts (a broken one aborts with "contract broken: ..."):
 *  - dk_dlpack_accept returns a known status; a failure sets a message and leaves *out alone;
 *  - it accepts exactly the valid tensors, by this harness's own reading of Note [Untrusted
 *    tensors] and of the version and flag rules (dk_check.h), and *out is then the managed
 *    tensor's DLTensor;
 *  - in roi_align (fz_verify): a failure changes nothing and has a message; a success writes only
 *    output elements. The other tensors of each call are shaped after the accepted one, so that
 *    calls get past the shape checks into the kernels.
 */
#include "fuzz_common.h"

#include "dk_check.h"

#define FZ_DL_MAX_BYTES (64 << 10) /* host memory given to one imported tensor */
#define FZ_DL_MAX_NUMEL 4096       /* elements of a tensor used in roi_align */

/* A poison address for device memory: dereferencing it faults. */
#define FZ_DEVICE_DATA ((void *)(uintptr_t)0xdead0000u)

static void fz_deleter_legacy(DLManagedTensor *self)
{
    (void)self;
    FZ_ASSERT(0, "dk_dlpack_accept called the deleter of a legacy managed tensor");
}

static void fz_deleter_versioned(DLManagedTensorVersioned *self)
{
    (void)self;
    FZ_ASSERT(0, "dk_dlpack_accept called the deleter of a versioned managed tensor");
}

/* ------------------------------------------------------------------------------------------ */
/* The producer's tensor                                                                      */

static int32_t fz_ndim(fz_in *in)
{
    const uint8_t b = fz_u8(in);
    if (b < 224) return b % 7; /* 0..6 */
    static const int32_t odd[] = {8, 63, DK_MAX_NDIM, DK_MAX_NDIM + 1, 1000, -1, INT32_MIN, INT32_MAX};
    return odd[b % 8];
}

static DLDataType fz_dtype(fz_in *in)
{
    const uint8_t b = fz_u8(in);
    if (b < 192) {
        static const dk_dtype f[] = {DK_FLOAT32, DK_FLOAT64, DK_FLOAT16, DK_BFLOAT16};
        return dk_dtype_to_dl(f[b & 3]);
    }
    if (b < 224) {
        static const DLDataType other[] = {{kDLInt, 32, 1},     {kDLInt, 64, 1},   {kDLUInt, 8, 1},
                                           {kDLFloat, 32, 2},   {kDLFloat, 8, 1},  {kDLBool, 8, 1},
                                           {kDLComplex, 64, 1}, {kDLFloat, 12, 1}, {kDLFloat, 32, 0},
                                           {kDLFloat, 0, 1},    {kDLFloat, 4, 1},  {kDLFloat4_e2m1fn, 4, 2}};
        return other[b % 12];
    }
    DLDataType d;
    d.code = fz_u8(in);
    d.bits = fz_u8(in);
    d.lanes = fz_u16(in);
    return d;
}

static DLDevice fz_device(fz_in *in)
{
    const uint8_t b = fz_u8(in);
    DLDevice d = {kDLCPU, 0};
    if (b < 160) return d;
    static const int32_t types[] = {kDLCUDAHost, kDLROCMHost, kDLCUDA, kDLROCM, kDLExtDev, kDLOneAPI, 0, 31, 32, -1};
    d.device_type = (DLDeviceType)types[b % 10];
    if (b >= 240) d.device_id = (int32_t)fz_u32(in);
    return d;
}

static int64_t fz_size(fz_in *in)
{
    const uint8_t b = fz_u8(in);
    if (b < 232) return b % 6;
    static const int64_t odd[] = {-1,        64,        (int64_t)1 << 31,   (int64_t)1 << 40, (int64_t)1 << 62,
                                  INT64_MAX, INT64_MIN, -((int64_t)1 << 40)};
    return odd[b % 8];
}

static int64_t fz_stride(fz_in *in, int64_t compact)
{
    const uint8_t b = fz_u8(in);
    if (b < 128) return compact;               /* row-major */
    if (b < 200) return (int64_t)(b % 13) - 4; /* small, zero, negative */
    if (b < 232) {                             /* padded */
        int64_t s;
        return __builtin_mul_overflow(compact, (b % 3) + 2, &s) ? compact : s;
    }
    static const int64_t odd[] = {(int64_t)1 << 31, (int64_t)1 << 40,    (int64_t)1 << 62, INT64_MAX,
                                  INT64_MIN,        -((int64_t)1 << 62), INT64_MIN + 1,    (int64_t)1 << 32};
    return odd[b % 8];
}

/* The element range in elements, below and above the first element, as the spec defines it
 * (NULL strides: row-major). 1: it has elements, 0: it has none (a size <= 0), -1: an offset
 * overflows 64 bits. Written from the spec, not from dk_tensor_extent. */
FZ_HARNESS_LOOP static int fz_range_of(int32_t ndim, const int64_t *shape, const int64_t *strides, int64_t es,
                                       int64_t *below_bytes, int64_t *above_bytes)
{
    *below_bytes = *above_bytes = 0;
    for (int d = 0; d < ndim; d++)
        if (shape[d] <= 0) return 0;
    int64_t below = 0, above = 0, row = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        const int64_t s = strides ? strides[d] : row;
        int64_t e;
        if (__builtin_mul_overflow(shape[d] - 1, s, &e)) return -1;
        if (__builtin_add_overflow(e < 0 ? below : above, e, e < 0 ? &below : &above)) return -1;
        if (!strides && __builtin_mul_overflow(row, shape[d], &row)) return -1;
    }
    if (__builtin_mul_overflow(below, es, below_bytes)) return -1;
    if (__builtin_add_overflow(above, 1, &above) || __builtin_mul_overflow(above, es, above_bytes)) return -1;
    return 1;
}

/* What the harness built: the managed tensor and the memory behind it. */
typedef struct {
    void *managed; /* DLManagedTensor or DLManagedTensorVersioned (possibly truncated) */
    bool versioned, truncated;
    DLTensor *dl; /* inside managed; NULL when truncated */
    int64_t *shape, *strides;
    unsigned char *block; /* the elements' memory (host tensors whose range fits), or NULL */
    size_t bytes;         /* of block */
    size_t first;         /* byte index in block of the first element */
    bool backed;          /* block holds every element */
    bool expect_ok;       /* the harness's verdict */
} fz_dl;

static void fz_dl_free(fz_dl *p)
{
    free(p->managed);
    free(p->shape);
    free(p->strides);
    free(p->block);
}

/* Builds the producer's tensor from the input, and decides whether a consumer must accept it. */
static void fz_dl_build(fz_dl *p, fz_in *in, bool writable)
{
    memset(p, 0, sizeof *p);
    const uint8_t kind = fz_u8(in);
    p->versioned = kind & 1;
    bool ok = true;
    if (p->versioned) {
        DLPackVersion v = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
        if ((kind & 6) == 6) { /* another version */
            static const uint32_t majors[] = {0, 2, UINT32_MAX, 1};
            v.major = majors[fz_pick(in, 4)];
            v.minor = fz_u32(in);
        }
        uint64_t flags = 0;
        const uint8_t fb = fz_u8(in);
        if (fb & 1) flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
        if (fb & 2) flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
        if (fb & 4) flags |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
        if (fb & 8) flags |= (uint64_t)fz_u8(in) << 56; /* bits the spec has not given a meaning */
        p->truncated = v.major != DLPACK_MAJOR_VERSION;
        /* Another major version may lay out the rest differently: only the shared head exists. */
        const size_t size = p->truncated ? offsetof(DLManagedTensorVersioned, flags) : sizeof(DLManagedTensorVersioned);
        DLManagedTensorVersioned *mv = (DLManagedTensorVersioned *)calloc(1, size);
        if (!mv) abort();
        mv->version = v;
        mv->deleter = fz_deleter_versioned;
        if (!p->truncated) {
            mv->flags = flags;
            p->dl = &mv->dl_tensor;
            if (writable && (flags & (DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED))) ok = false;
        } else {
            ok = false;
        }
        p->managed = mv;
    } else {
        DLManagedTensor *m = (DLManagedTensor *)calloc(1, sizeof *m);
        if (!m) abort();
        m->deleter = fz_deleter_legacy;
        p->dl = &m->dl_tensor;
        p->managed = m;
    }
    if (!p->dl) {
        p->expect_ok = false;
        return;
    }
    DLTensor *t = p->dl;
    t->ndim = fz_ndim(in);
    t->dtype = fz_dtype(in);
    t->device = fz_device(in);
    const bool in_bound = t->ndim >= 0 && t->ndim <= DK_MAX_NDIM;
    /* Entries really there: all of them within the rank bound, else a few. */
    const int real = in_bound ? t->ndim : fz_pick(in, 9);
    const uint8_t arrays = fz_u8(in);
    const bool null_shape = (arrays & 7) == 0, null_strides = (arrays & 24) != 0;
    if (!null_shape) {
        p->shape = (int64_t *)malloc((size_t)(real ? real : 1) * sizeof(int64_t));
        if (!p->shape) abort();
        for (int d = 0; d < real; d++) p->shape[d] = fz_size(in);
    }
    if (!null_strides) {
        p->strides = (int64_t *)malloc((size_t)(real ? real : 1) * sizeof(int64_t));
        if (!p->strides) abort();
        int64_t compact = 1;
        for (int d = real - 1; d >= 0; d--) {
            p->strides[d] = fz_stride(in, compact);
            const int64_t n = p->shape && p->shape[d] > 0 ? p->shape[d] : 1;
            if (__builtin_mul_overflow(compact, n, &compact)) compact = 1;
        }
    }
    t->shape = p->shape;
    t->strides = p->strides;

    /* The verdict on the tensor itself (Note [Untrusted tensors]). */
    const unsigned bits = (unsigned)t->dtype.bits * t->dtype.lanes;
    if (!in_bound) ok = false;
    if (in_bound && t->ndim > 0 && !t->shape) ok = false;
    if (t->dtype.lanes < 1 || t->dtype.bits == 0 || bits % 8 != 0) ok = false;
    const int64_t es = (int64_t)(bits / 8);
    int range = 0;
    int64_t below = 0, above = 0;
    if (in_bound && (t->ndim == 0 || t->shape) && es > 0) {
        range = fz_range_of(t->ndim, t->shape, t->strides, es, &below, &above);
        if (range < 0) ok = false;
    }

    /* Memory, and the byte offset. */
    const uint8_t mb = fz_u8(in);
    const bool host = dk_tensor_host_readable(t);
    const bool fits = range == 1 && below >= -FZ_DL_MAX_BYTES && above <= FZ_DL_MAX_BYTES &&
                      above - below <= FZ_DL_MAX_BYTES;
    uint64_t offset = 0;
    if ((mb & 7) == 0) {
        t->data = NULL; /* fine only without elements */
        if (range == 1) ok = false;
        p->backed = range == 0;
        offset = (mb & 8) ? (uint64_t)fz_u8(in) : 0;
    } else if (!host) {
        t->data = FZ_DEVICE_DATA;
        offset = (mb & 8) ? (uint64_t)fz_u8(in) * 4 : 0;
    } else if (fits) {
        p->bytes = (size_t)(above - below);
        p->first = (size_t)(-below);
        p->block = (unsigned char *)malloc(p->bytes);
        if (!p->block) abort();
        p->backed = true;
        /* The producer splits the first element's address between data and byte_offset. */
        const uintptr_t first = (uintptr_t)p->block + p->first;
        switch ((mb >> 3) & 3) {
        case 0: offset = 0; break;
        case 1: offset = p->first; break;
        case 2: offset = p->first + (uint64_t)fz_u8(in) * 64; break;
        default: offset = (uint64_t)fz_u16(in); break;
        }
        t->data = (void *)(first - (uintptr_t)offset);
    } else {
        /* Too large to give memory to (or no elements): one byte, never to be read. */
        p->block = (unsigned char *)malloc(1);
        if (!p->block) abort();
        t->data = p->block;
        p->backed = range == 0;
    }
    if ((mb & 0xc0) == 0xc0) { /* offsets past what the core takes */
        static const uint64_t big[] = {(uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX, (uint64_t)1 << 62};
        offset = big[fz_pick(in, 4)];
        p->backed = false;
    }
    t->byte_offset = offset;
    if (offset > (uint64_t)INT64_MAX) ok = false;
    p->expect_ok = ok;
}

/* ------------------------------------------------------------------------------------------ */
/* The accepted tensor as an fz_tensor (its memory, snapshot and mask), for fz_verify          */

/* Wraps an accepted host tensor with at most FZ_MAX_NDIM dims and FZ_DL_MAX_NUMEL elements;
 * false when it does not qualify. The fz_tensor takes the block. */
FZ_HARNESS_LOOP static bool fz_wrap(fz_tensor *f, fz_dl *p, fz_in *in)
{
    const DLTensor *t = p->dl;
    if (!p->backed || t->ndim > FZ_MAX_NDIM || t->device.device_type != kDLCPU) return false;
    memset(f, 0, sizeof *f);
    f->t = *t;
    int64_t n = 1, row = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] > FZ_DL_MAX_NUMEL * 64) return false; /* before the products below */
        f->shape[d] = t->shape[d];
        f->strides[d] = t->strides ? t->strides[d] : row;
        row *= t->shape[d] > 0 ? t->shape[d] : 1;
        n *= t->shape[d] > 0 ? t->shape[d] : 0;
        if (n > FZ_DL_MAX_NUMEL || row > FZ_DL_MAX_NUMEL * 64) return false;
    }
    /* A tensor without elements may have no memory at all; the harness still wants a block. */
    f->mem = p->block ? p->block : (unsigned char *)malloc(1);
    if (!f->mem) abort();
    f->bytes = p->bytes;
    p->block = NULL;
    f->snap = (unsigned char *)malloc(f->bytes ? f->bytes : 1);
    f->mask = (unsigned char *)calloc(f->bytes ? f->bytes : 1, 1);
    if (!f->snap || !f->mask) abort();
    if (f->bytes) memset(f->mem, 0xA5, f->bytes);
    if (n == 0) return true;
    const size_t es = fz_elem_size(t->dtype);
    int64_t idx[FZ_MAX_NDIM] = {0};
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * f->strides[d];
        const size_t b = p->first + (size_t)(off * (int64_t)es);
        FZ_ASSERT(b + es <= f->bytes, "harness: element outside the block");
        for (size_t k = 0; k < es; k++) f->repeats |= f->mask[b + k] != 0;
        memset(f->mask + b, 1, es);
        memset(f->mem + b, 0, es);
        int d = t->ndim - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
        if (d < 0) break;
    }
    fz_fill(f, in);
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* roi_align roles                                                                            */

enum { R_INPUT, R_ROIS, R_OUTPUT, R_AMY, R_AMX, R_GOUT, R_BROIS, R_BAMY, R_BAMX, R_GIN, R_COUNT };

/* The partner tensors' sizes: from the accepted tensor where its role fixes them, small and from
 * the input elsewhere. */
static int64_t fz_dim_of(const fz_tensor *f, int d, int64_t fallback)
{
    if (d >= f->t.ndim) return fallback;
    const int64_t s = f->shape[d];
    return s < 0 ? 0 : s;
}

static void fz_rois_values(fz_tensor *r, int64_t N, fz_in *in)
{
    const int64_t K = r->shape[0];
    for (int64_t k = 0; k < K; k++) {
        const uint8_t b = fz_u8(in);
        fz_set(r, k * 5, b < 240 && N > 0 ? (double)(b % N) : (double)b - 245.0);
        for (int j = 1; j < 5; j++) fz_set(r, k * 5 + j, ((double)fz_u8(in) - 40.0) / 8.0);
    }
}

static bool trace_roles(void)
{
    static int trace = -1;
    if (trace < 0) trace = getenv("FZ_TRACE") != NULL;
    return trace;
}

static void fz_role(fz_tensor *acc, int role, fz_in *in)
{
    const bool fwd = role < R_GOUT;
    const bool feat_role = role == R_INPUT || role == R_GIN;
    const bool rois_role = role == R_ROIS || role == R_BROIS;
    const bool pooled_role = !feat_role && !rois_role;
    static const int64_t lo[7] = {1, 1, 1, 1, 1, 1, 1}, hi[7] = {3, 3, 6, 6, 4, 3, 3}; /* empty: from the tensor */
    int64_t small[7];
    for (int i = 0; i < 7; i++) small[i] = fz_range(in, lo[i], hi[i]); /* in order: a loop, not an initializer */
    const int64_t N = feat_role ? fz_dim_of(acc, 0, 1) : small[0];
    const int64_t C = feat_role ? fz_dim_of(acc, 1, 1) : pooled_role ? fz_dim_of(acc, 1, 1) : small[1];
    const int64_t H = feat_role ? fz_dim_of(acc, 2, 1) : small[2];
    const int64_t W = feat_role ? fz_dim_of(acc, 3, 1) : small[3];
    const int64_t K = rois_role || pooled_role ? fz_dim_of(acc, 0, 1) : small[4];
    const int64_t PH = pooled_role ? fz_dim_of(acc, 2, 1) : small[5];
    const int64_t PW = pooled_role ? fz_dim_of(acc, 3, 1) : small[6];
    /* Partners too large to build are not built: the call would only be refused. */
    if (N * C * H * W > FZ_DL_MAX_NUMEL * 4 || K * C * PH * PW > FZ_DL_MAX_NUMEL * 4) return;

    DLDataType dt = acc->t.dtype;
    const dk_dtype d = dk_tensor_dtype(&acc->t);
    const bool is_float = d == DK_FLOAT32 || d == DK_FLOAT64 || d == DK_FLOAT16 || d == DK_BFLOAT16;
    if (!is_float || role == R_AMY || role == R_AMX || role == R_BAMY || role == R_BAMX)
        dt = is_float && d != DK_FLOAT16 && d != DK_BFLOAT16 ? acc->t.dtype : dk_dtype_to_dl(DK_FLOAT32);
    const bool half = dk_dtype_from_dl(dt) == DK_FLOAT16 || dk_dtype_from_dl(dt) == DK_BFLOAT16;
    const DLDataType adt = half ? dk_dtype_to_dl(DK_FLOAT32) : dt;
    const uint8_t ob = fz_u8(in);
    const int64_t pool_mode = (ob & 3) == 3 ? 7 : (ob & 1) ? DK_POOL_AVG : DK_POOL_MAX;
    const bool aligned = (ob & 4) != 0;
    /* Sampling: explicit and small on anything but small problems (cost, as in fuzz_roi_align). */
    const bool tiny = H <= 8 && W <= 8 && K <= 8 && C <= 8;
    const int64_t sr = (ob & 8) && tiny ? 0 : 1 + ((ob >> 4) & 1);
    const double scale = (ob & 32) ? 1.0 : 0.5;

    const int64_t xs[4] = {N, C, H, W}, rs[2] = {K, 5}, os[4] = {K, C, PH, PW};
    fz_tensor p[5];
    fz_tensor *ts[5];
    /* Slots: forward (input, rois, output, amy, amx), backward (gout, rois, amy, amx, gin). */
    const int slot = fwd ? role : role - R_GOUT;
    for (int i = 0; i < 5; i++) {
        if (i == slot) {
            ts[i] = acc;
            continue;
        }
        const bool feat = i == (fwd ? 0 : 4), roi = i == 1;
        const bool is_am = fwd ? (i == 3 || i == 4) : (i == 2 || i == 3);
        fz_tensor_init(&p[i], is_am ? adt : dt,
                       feat  ? 4
                       : roi ? 2
                             : 4,
                       feat  ? xs
                       : roi ? rs
                             : os,
                       in, fz_pick(in, 8) == 0);
        if (roi) fz_rois_values(&p[i], N, in);
        else fz_fill(&p[i], in);
        ts[i] = &p[i];
    }
    if (slot == 1 && (fz_u8(in) & 1) && acc->t.ndim == 2 && acc->shape[1] == 5 && acc->shape[0] <= 64 && !acc->repeats)
        fz_rois_values(acc, N, in); /* plausible boxes in the accepted tensor */
    const bool with_am = pool_mode == DK_POOL_MAX || slot == (fwd ? 3 : 2) || slot == (fwd ? 4 : 3);
    for (int i = 0; i < 5; i++) ts[i]->out = fwd ? i >= 2 : i == 4;
    /* What the call is given: argmax tensors not passed are no part of its contract. */
    fz_tensor *given[5];
    for (int i = 0; i < 5; i++) {
        const bool is_am = fwd ? (i == 3 || i == 4) : (i == 2 || i == 3);
        given[i] = is_am && !with_am ? NULL : ts[i];
    }
    fz_snapshot(given, 5);
    dk_clear_error();
    dk_status st;
    if (fwd) {
        st = dk_roi_align_forward(&ts[0]->t, &ts[1]->t, &ts[2]->t, with_am ? &ts[3]->t : NULL,
                                  with_am ? &ts[4]->t : NULL, PH, PW, scale, sr, pool_mode, aligned);
        if (trace_roles())
            fprintf(stderr, "fuzz_dlpack: role %d: %s %s\n", role, dk_status_name(st), st ? dk_last_error() : "");
        fz_verify("roi_align_forward", st, given, 5);
    } else {
        st = dk_roi_align_backward(&ts[0]->t, &ts[1]->t, with_am ? &ts[2]->t : NULL, with_am ? &ts[3]->t : NULL,
                                   &ts[4]->t, PH, PW, scale, sr, pool_mode, aligned);
        if (trace_roles())
            fprintf(stderr, "fuzz_dlpack: role %d: %s %s\n", role, dk_status_name(st), st ? dk_last_error() : "");
        fz_verify("roi_align_backward", st, given, 5);
    }
    acc->out = false;
    for (int i = 0; i < 5; i++)
        if (i != slot) fz_tensor_free(&p[i]);
}

/* A device tensor in the input role beside host partners: refused (mixed devices, or no kernel),
 * without its memory ever being touched (it is a poison address). */
static void fz_device_role(fz_dl *p, fz_in *in)
{
    fz_tensor x, rois, out;
    const int64_t rs[2] = {1, 5}, os[4] = {1, 1, 1, 1}, xs[4] = {1, 1, 1, 1};
    fz_tensor_init(&x, dk_dtype_to_dl(DK_FLOAT32), 4, xs, in, false);
    fz_tensor_init(&rois, dk_dtype_to_dl(DK_FLOAT32), 2, rs, in, false);
    fz_tensor_init(&out, dk_dtype_to_dl(DK_FLOAT32), 4, os, in, false);
    out.out = true;
    fz_tensor *ts[3] = {&x, &rois, &out};
    fz_snapshot(ts, 3);
    const dk_tensor *feat = p->dl;
    dk_clear_error();
    dk_status st = dk_roi_align_forward(feat, &rois.t, &out.t, NULL, NULL, 1, 1, 1.0, 1, DK_POOL_AVG, false);
    FZ_ASSERT(st != DK_OK, "roi_align_forward succeeded on a device tensor (device type %d) with host partners",
              (int)p->dl->device.device_type);
    fz_verify("roi_align_forward (device input)", st, ts, 3);
    for (int i = 0; i < 3; i++) fz_tensor_free(ts[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_tunables(&in);
    const uint8_t how = fz_u8(&in);
    const bool writable = how & 1;
    fz_dl p;
    fz_dl_build(&p, &in, writable);

    dk_tensor *out = (dk_tensor *)(uintptr_t)0x1; /* a sentinel: a failure must leave it */
    dk_clear_error();
    const dk_status st = dk_dlpack_accept((how & 2) && !p.versioned ? NULL : p.managed, p.versioned, writable, "fuzz",
                                          "x", &out);
    FZ_ASSERT((int)st >= 0 && (int)st < DK_STATUS_COUNT, "dk_dlpack_accept returned status %d", (int)st);
    static int trace = -1; /* FZ_TRACE=1: one line per input, to see what a corpus reaches */
    if (trace < 0) trace = getenv("FZ_TRACE") != NULL;
    if (trace) fprintf(stderr, "fuzz_dlpack: accept: %s %s\n", dk_status_name(st), st ? dk_last_error() : "");
    if ((how & 2) && !p.versioned) {
        FZ_ASSERT(st != DK_OK, "dk_dlpack_accept accepted a NULL managed tensor");
        p.expect_ok = false;
    }
    if (st != DK_OK) {
        FZ_ASSERT(dk_last_error()[0] != '\0', "dk_dlpack_accept failed (%s) without a message", dk_status_name(st));
        FZ_ASSERT(out == (dk_tensor *)(uintptr_t)0x1, "dk_dlpack_accept failed but wrote *out");
        FZ_ASSERT(!p.expect_ok, "dk_dlpack_accept refused a valid tensor (%s)", dk_status_name(st));
    } else {
        FZ_ASSERT(p.expect_ok, "dk_dlpack_accept accepted an invalid tensor (ndim %d, dtype %u/%u/%u, offset %llu)",
                  p.dl ? (int)p.dl->ndim : -1, p.dl ? p.dl->dtype.code : 0, p.dl ? p.dl->dtype.bits : 0,
                  p.dl ? p.dl->dtype.lanes : 0, p.dl ? (unsigned long long)p.dl->byte_offset : 0ull);
        FZ_ASSERT(out == p.dl, "dk_dlpack_accept answered another DLTensor than the managed one's");
        fz_tensor acc;
        if (!dk_tensor_host_readable(p.dl)) {
            if (p.dl->data) fz_device_role(&p, &in);
            fz_device_role(&p, &in);
        } else if (fz_wrap(&acc, &p, &in)) {
            for (int role = 0; role < R_COUNT; role++) fz_role(&acc, role, &in);
            fz_tensor_free(&acc);
        }
    }
    fz_dl_free(&p);
    return 0;
}
