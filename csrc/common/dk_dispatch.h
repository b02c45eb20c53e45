/*
 * dk_dispatch.h — the dispatcher's inlined fast path: what every generated op entry
 * (dk_op_define.h) and DK_DISPATCH_DEVICE_IMPL (dk_registry.h) compile into their callers.
 * Internal to dkit's generated code; not for direct use.
 */
#ifndef DK_DISPATCH_H
#define DK_DISPATCH_H

#include "dk_op.h"
#include "dk_tls.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* State and slow paths the inlined code below reaches.                                       */

DK_API extern int dk__trace_enabled;

DK_API dk_status dk__op_no_kernel(const dk_op *op, dk_keyset ks);
/* A boxed call's kernel failed with status `st` and left no message: sets one naming the op,
 * the backend and the kernel (Note [Failures without a message]); returns st. */
DK_API dk_status dk__op_failed_silently(const dk_op *op, const dk_value *args, dk_status st);
DK_API void dk__op_trace(const dk_op *op, dk_keyset ks, dk_key k);

/* Atomic (relaxed) because dk_dispatch_set_trace may flip it while other threads call: a plain
 * read is a data race to the thread sanitizer. Same single load on x86. */
static inline bool dk__trace_on(void) { return __atomic_load_n(&dk__trace_enabled, __ATOMIC_RELAXED) != 0; }

typedef struct {
    dk_keyset keys;
    const dk_tensor *first;
    const char *first_name;
    const dk_tensor *bad;
    const char *bad_name;
} dk__device_check;

DK_API dk_status dk__op_device_error(const dk_op *op, const dk__device_check *dc);

/* Adds one tensor argument's key; records the first tensor on another device or on a device
 * no backend serves (NULL tensors are skipped here; required ones are checked by the caller). */
static inline void dk__collect(dk__device_check *dc, const dk_tensor *t, const char *name)
{
    if (!t) return;
    dk_key k = dk__key_of_device_type((int32_t)t->device.device_type);
    dc->keys |= DK_KEYSET(k);
    if (!dc->first) {
        dc->first = t;
        dc->first_name = name;
        if (DK_UNLIKELY(k == DK_KEY_UNDEFINED) && !dc->bad) {
            dc->bad = t;
            dc->bad_name = name;
        }
    } else if (DK_UNLIKELY(k != dk__key_of_device_type((int32_t)dc->first->device.device_type) ||
                           t->device.device_id != dc->first->device.device_id) &&
               !dc->bad) {
        dc->bad = t;
        dc->bad_name = name;
    }
}

/* Seqlock read of the slot serving `ks` (Note [Lock-free table reads]). */
static inline dk_key dk__op_select(const dk_op *op, dk_keyset ks, dk_slot *out, dk_keyset *masked)
{
    for (;;) {
        /* Acquire loads rather than an acquire fence: the same ordering (plain moves on x86),
         * and -fsanitize=thread, which does not support fences, understands them. */
        uint32_t s0 = __atomic_load_n(&op->seq, __ATOMIC_ACQUIRE);
        dk_keyset m = ks & __atomic_load_n(&op->mask, __ATOMIC_ACQUIRE);
        dk_key k = dk_keyset_highest(m);
        out->fast = NULL; /* not used by the slow paths */
        out->unboxed = __atomic_load_n(&op->table[k].unboxed, __ATOMIC_ACQUIRE);
        out->boxed = __atomic_load_n(&op->table[k].boxed, __ATOMIC_ACQUIRE);
        out->ctx = __atomic_load_n(&op->table[k].ctx, __ATOMIC_ACQUIRE);
        if (DK_LIKELY(!(s0 & 1u) && __atomic_load_n(&op->seq, __ATOMIC_RELAXED) == s0)) {
            *masked = m;
            return k;
        }
    }
}

/*
 * The fast path's read: only the typed kernel of the slot serving `ks`, or NULL when the slot
 * has none (boxed, missing); dk__op_select reads the whole slot for the slow path. Same
 * seqlock (Note [Lock-free table reads]), with three differences that cost nothing:
 *  - `s0 & ~1`: a read that began during a write (odd seq) fails the final comparison, since
 *    every later value of seq differs from it; no separate odd test.
 *  - acquire loads of mask and slot instead of an acquire fence: they keep the second read of
 *    seq after them just the same (plain moves on x86), and -fsanitize=thread, which does not
 *    support fences, understands them.
 *  - `m | 1`: dk_keyset_highest(m) without its zero test. Bit 0 (undefined) is never in an
 *    op's mask, and an empty set still selects key 0, whose slot is always empty.
 */
static inline dk_fnptr dk__op_select_unboxed(const dk_op *op, dk_keyset ks)
{
    for (;;) {
        uint32_t s0 = __atomic_load_n(&op->seq, __ATOMIC_ACQUIRE) & ~1u;
        dk_keyset m = ks & __atomic_load_n(&op->mask, __ATOMIC_ACQUIRE);
        dk_key k = 63 ^ __builtin_clzll(m | 1u); /* == 63 - clz, for clz in [0, 63] */
        dk_fnptr fn = __atomic_load_n(&op->table[k].fast, __ATOMIC_ACQUIRE);
        if (DK_LIKELY(__atomic_load_n(&op->seq, __ATOMIC_RELAXED) == s0)) return fn;
    }
}

/*
 * Note [Device check fast path]
 * The entry first checks only that every tensor argument has the very same DLDevice (type
 * and id compared as one 64-bit word) and that a backend serves it. That holds for nearly
 * every call, and then the call's backend keys are exactly that device's key, as the
 * general check (dk__collect over all tensors) would find. Anything else (mixed devices,
 * device types aliasing one key, an unserved device, no tensor at all) takes the general
 * check out of line, which produces the exact error or the keys. Required tensors are
 * checked for NULL first, in argument order, on both paths.
 */
#ifdef __cplusplus
static_assert(sizeof(DLDevice) == sizeof(uint64_t), "DLDevice is two 32-bit fields");
#else
_Static_assert(sizeof(DLDevice) == sizeof(uint64_t), "DLDevice is two 32-bit fields");
#endif
static inline void dk__same_device(const dk_tensor **first, uint64_t *dev, bool *mixed, const dk_tensor *t)
{
    uint64_t d;
    __builtin_memcpy(&d, &t->device, sizeof d);
    if (!*first) {
        *first = t;
        *dev = d;
    } else {
        *mixed |= d != *dev;
    }
}

DK_API dk_status dk__op_null_tensor(const dk_op *op, const char *name);

/*
 * The aliasing check of every op with outputs (Note [Aliasing] in dk_check.h), inlined into the
 * op's entry: the generated code adds each tensor argument's byte range (dk__alias_add; non-tensor
 * arguments generate nothing) and compares the written ones with the others. Anything unusual
 * (sizes or strides of 2^28 or more, a written tensor whose strides are not compact row-major,
 * an overlap) is decided out of line by dk__op_check_aliasing_slow, which also words the error.
 * t[i] there is argument i, NULL when it is not a tensor or is absent.
 */
DK_API dk_status dk__op_check_aliasing_slow(const dk_op *op, const dk_tensor *const *t);

/* Products and sums are taken in unsigned arithmetic, which wraps instead of overflowing: their
 * results are used only when every size and |stride| is below 2^28, where nothing wraps. */
DK__ALWAYS_INLINE static inline bool dk__aliasing_range(const dk_tensor *t, bool out, uintptr_t *lo, uintptr_t *hi,
                                                        bool *slow)
{
    const int64_t *sh = t->shape, *st = t->strides;
    const int nd = t->ndim;
    uint64_t big = (uint64_t)nd;   /* ndim >= 2^28 (or negative) also goes the slow way */
    uint64_t below = 0, above = 0; /* element offsets below and above the data pointer */
    bool empty = false;
    if (!st) {
        uint64_t numel = 1;
        for (int d = 0; d < nd; d++) {
            big |= (uint64_t)sh[d];
            empty |= sh[d] <= 0;
            numel *= (uint64_t)sh[d];
        }
        above = numel - 1;
    } else {
        uint64_t expect = 1;
        bool compact = true;
        for (int d = nd - 1; d >= 0; d--) {
            const int64_t n = sh[d], s = st[d];
            const uint64_t a = s < 0 ? 0 - (uint64_t)s : (uint64_t)s, e = ((uint64_t)n - 1) * a;
            big |= (uint64_t)n | a;
            empty |= n <= 0;
            below += s < 0 ? e : 0;
            above += s < 0 ? 0 : e;
            compact &= n == 1 || (uint64_t)s == expect;
            expect *= (uint64_t)n;
        }
        *slow |= out && !compact;
    }
    /* Below 2^28 (and ndim below 64) no product or sum above can wrap. */
    *slow |= (big >> 28) != 0 || nd > 64;
    const uint64_t es = ((uint64_t)t->dtype.bits * t->dtype.lanes + 7) >> 3;
    const uintptr_t base = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    *lo = base - (uintptr_t)(below * es);
    *hi = base + (uintptr_t)((above + 1) * es);
    return !empty;
}

/* The ranges of one call's tensor arguments, gathered by the generated entry (one
 * dk__alias_add per tensor argument, in argument order). */
typedef struct {
    uintptr_t lo[DK_STACK_MAX], hi[DK_STACK_MAX];
    uint64_t dev[DK_STACK_MAX];
    uint32_t out; /* which entries are written */
    int n;
    bool slow;
} dk__alias_set;

DK__ALWAYS_INLINE static inline void dk__alias_add(dk__alias_set *s, const dk_tensor *t, bool out)
{
    uintptr_t lo, hi;
    if (!t || !dk__aliasing_range(t, out, &lo, &hi, &s->slow)) return;
    const int i = s->n++;
    s->lo[i] = lo;
    s->hi[i] = hi;
    __builtin_memcpy(&s->dev[i], &t->device, sizeof s->dev[i]);
    s->out |= (uint32_t)out << i;
}

/* Whether the out-of-line check must decide (something unusual, or a written range overlapping
 * another on the same device). */
DK__ALWAYS_INLINE static inline bool dk__alias_suspect(const dk__alias_set *s)
{
    bool hit = s->slow;
    for (uint32_t o = s->out; o; o &= o - 1) {
        const int i = __builtin_ctz(o);
        for (int j = 0; j < s->n; j++)
            hit |= j != i && s->lo[i] < s->hi[j] && s->lo[j] < s->hi[i] && s->dev[i] == s->dev[j];
    }
    return hit;
}

#ifdef __cplusplus
}
#endif
#endif /* DK_DISPATCH_H */
