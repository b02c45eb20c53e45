/*
 * dk_op.h — ops, kernels, boxed values, and the dispatcher's public face.
 *
 * An op is defined once, by an X-macro argument list:
 *
 *     #define DK_MY_OP_ARGS(X)         \
 *         X(TENSOR, input)             \
 *         X(TENSOR_OUT, output)        \
 *         X(FLOAT, scale)
 *     DK_DECLARE_OP(my_op, DK_MY_OP_ARGS)        // in ops/my_op.h
 *     DK_DEFINE_OP(my_op, DK_MY_OP_ARGS)         // in ops/my_op.c, followed by the check body
 *     {
 *         if (scale <= 0) return dk_error(DK_EINVAL, "my_op: scale must be > 0");
 *         return DK_OK;
 *     }
 *
 * From that one list come: the typed kernel type `dk_my_op_fn`, the typed entry `dk_my_op(...)`
 * (device check, the check body above, dispatch), `dk_my_op_redispatch(ks, ...)`, the boxed
 * adapters in both directions, and the schema string
 *     dkit::my_op(Tensor input, Tensor(a!) output, float scale) -> ()
 *
 * Argument kinds:   TENSOR  const dk_tensor *      OPT_TENSOR      const dk_tensor * or NULL
 *                   TENSOR_OUT  dk_tensor *         OPT_TENSOR_OUT  dk_tensor * or NULL
 *                   INT int64_t   FLOAT double   BOOL bool   STR const char *   INT_LIST dk_int_list
 * Outputs are written in place (the caller's framework allocated them), so ops return only a
 * status.
 */
#ifndef DK_OP_H
#define DK_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dk_export.h"
#include "dk_keys.h"
#include "dk_pp.h"
#include "dk_status.h"
#include "dk_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A type-erased function pointer; cast back to the op's dk_<op>_fn before calling. */
typedef void (*dk_fnptr)(void);

/* ------------------------------------------------------------------------------------------ */
/* Boxed values                                                                              */

typedef enum {
    DK_TYPE_NONE = 0,
    DK_TYPE_TENSOR,
    DK_TYPE_INT,
    DK_TYPE_FLOAT,
    DK_TYPE_BOOL,
    DK_TYPE_STR,
    DK_TYPE_INT_LIST,
} dk_type;

typedef struct {
    const int64_t *data;
    int64_t size;
} dk_int_list;

typedef struct {
    dk_type tag;
    union {
        dk_tensor *t;
        int64_t i;
        double f;
        bool b;
        const char *s;
        dk_int_list il;
    } u;
} dk_value;

/*
 * A stack of values. A boxed call finds its op's arguments as the top `op->nargs` values, in
 * schema order, and pops them when it returns. Fixed capacity keeps it on the C stack: no
 * allocation on any dispatch path.
 */
#define DK_STACK_MAX 32
typedef struct {
    int size;
    dk_value v[DK_STACK_MAX];
} dk_stack;

static inline void dk_stack_init(dk_stack *s) { s->size = 0; }
DK_API dk_status dk_stack_push(dk_stack *s, dk_value v);
static inline dk_value dk_value_tensor(dk_tensor *t) { dk_value v; v.tag = t ? DK_TYPE_TENSOR : DK_TYPE_NONE; v.u.t = t; return v; }
static inline dk_value dk_value_int(int64_t i) { dk_value v; v.tag = DK_TYPE_INT; v.u.i = i; return v; }
static inline dk_value dk_value_float(double f) { dk_value v; v.tag = DK_TYPE_FLOAT; v.u.f = f; return v; }
static inline dk_value dk_value_bool(bool b) { dk_value v; v.tag = DK_TYPE_BOOL; v.u.b = b; return v; }
static inline dk_value dk_value_str(const char *s) { dk_value v; v.tag = DK_TYPE_STR; v.u.s = s; return v; }
static inline dk_value dk_value_int_list(dk_int_list l) { dk_value v; v.tag = DK_TYPE_INT_LIST; v.u.il = l; return v; }
static inline dk_value dk_value_none(void) { dk_value v; v.tag = DK_TYPE_NONE; v.u.t = NULL; return v; }

/* ------------------------------------------------------------------------------------------ */
/* Ops                                                                                        */

typedef enum {
    DK_ARG_TENSOR,
    DK_ARG_OPT_TENSOR,
    DK_ARG_INT,
    DK_ARG_FLOAT,
    DK_ARG_BOOL,
    DK_ARG_STR,
    DK_ARG_INT_LIST,
} dk_arg_kind;

typedef struct {
    const char *name;
    dk_arg_kind kind;
    bool out; /* written by the op: shown as Tensor(a!) in the schema */
} dk_arg_info;

/* "Tensor", "Tensor?", "int", "float", "bool", "str", "int[]": the schema's spelling. */
DK_API const char *dk_arg_kind_name(dk_arg_kind k);

struct dk_op;
struct dk__op_private;

/* A boxed kernel: `ks` holds the keys of this call after masking; its highest key is the one
 * being served, so dk_op_redispatch_boxed(op, ks, stack) continues below it. */
typedef dk_status (*dk_boxed_fn)(const struct dk_op *op, dk_keyset ks, dk_stack *stack, void *ctx);
/* Calls a typed kernel with arguments taken from args[0..nargs). Generated per op. */
typedef dk_status (*dk_unbox_fn)(dk_fnptr typed, const dk_value *args);

/* One computed table entry. `fast` is what the inlined fast path calls: the typed kernel, or NULL
 * when the slot has none or when tracing is on (so every call then takes the slow path, which
 * traces; the fast path pays no flag test). `unboxed`/`boxed` are what the slow path calls;
 * both NULL means "no kernel". */
typedef struct {
    dk_fnptr fast;
    dk_fnptr unboxed;
    dk_boxed_fn boxed;
    void *ctx;
} dk_slot;

/*
 * Note [Lock-free table reads]
 * Registration (rare) rebuilds an op's table under one process-wide mutex. Calls (hot) take no
 * lock: they read `seq`, then the mask and one slot, then `seq` again, and retry if a writer
 * was active (odd) or finished in between (changed) — a seqlock. Every field is read and written
 * with atomic builtins, so a call never mixes halves of two registrations and the thread
 * sanitizer sees no race. Kernels are code and are never freed (backends are never unloaded),
 * so a call that raced an unregistration still calls valid code.
 */
typedef struct dk_op {
    /* Fixed at compile time by DK_DEFINE_OP. */
    const char *name;
    const dk_arg_info *args;
    int nargs;
    dk_unbox_fn unbox;
    dk_fnptr entry;      /* the typed entry dk_<op>, used for boxed calls from outside */
    dk_fnptr error_stub; /* typed; returns dk_last_status() (DK_DISPATCH_DEVICE_IMPL's failure path) */
    /* Dispatcher state: zero at start, owned by the registry lock. */
    uint32_t seq;
    dk_keyset mask; /* keys that take part: all but those resolved to fallthrough */
    dk_slot table[DK_NUM_KEYS];
    struct dk__op_private *priv;
} dk_op;

/* ------------------------------------------------------------------------------------------ */
/* Kernels and registration                                                                   */

#define DK_KERNEL_FALLTHROUGH 1u

typedef struct {
    dk_fnptr unboxed;  /* typed kernel of the op's dk_<op>_fn type, or NULL */
    dk_boxed_fn boxed; /* boxed kernel, or NULL; fallbacks must be boxed */
    void *ctx;         /* passed to the boxed kernel; owned by the registrant */
    const char *name;  /* shown in table dumps and traces */
    unsigned flags;    /* DK_KERNEL_FALLTHROUGH */
} dk_kernel;

static inline dk_kernel dk_kernel_unboxed(dk_fnptr fn, const char *name)
{
    dk_kernel k = {fn, NULL, NULL, name, 0};
    return k;
}
static inline dk_kernel dk_kernel_boxed(dk_boxed_fn fn, void *ctx, const char *name)
{
    dk_kernel k = {NULL, fn, ctx, name, 0};
    return k;
}
static inline dk_kernel dk_kernel_fallthrough(void)
{
    dk_kernel k = {NULL, NULL, NULL, "fallthrough", DK_KERNEL_FALLTHROUGH};
    return k;
}

typedef struct dk__registration *dk_handle;

/*
 * Registration. Each (op, key), each op's composite and each key's fallback is a stack: the
 * newest registration wins (a warning names the one it overrides) and dk_unregister(handle)
 * restores what was there before, whatever order handles are released in. Thread-safe.
 */
DK_API dk_status dk_op_register(dk_op *op, dk_key key, dk_kernel k, dk_handle *out);
/* A device-generic kernel built from other dkit ops; serves backend keys with no kernel. */
DK_API dk_status dk_op_register_composite(dk_op *op, dk_kernel k, dk_handle *out);
/* A boxed kernel serving every op at `key` that has neither kernel nor (backend keys) composite. */
DK_API dk_status dk_register_fallback(dk_key key, dk_kernel k, dk_handle *out);
DK_API dk_status dk_unregister(dk_handle h);

/* ------------------------------------------------------------------------------------------ */
/* Introspection                                                                              */

typedef enum {
    DK_PROV_MISSING = 0,
    DK_PROV_KERNEL,
    DK_PROV_COMPOSITE,
    DK_PROV_FALLBACK,
    DK_PROV_FALLTHROUGH,
} dk_provenance;

DK_API const char *dk_provenance_name(dk_provenance p); /* "kernel", "composite", ... */

typedef struct {
    dk_key key;
    dk_provenance provenance;
    const char *kernel_name; /* NULL when missing */
    bool boxed;              /* served through the boxed convention */
} dk_table_entry;

/* The computed slot of every claimed key (backends and functionality keys in use), highest
 * priority first. Returns the number of entries, writing at most `max`. */
DK_API int dk_op_table(const dk_op *op, dk_table_entry *out, int max);
/* The table as text, one line per key; caller frees with dk_free. NULL on allocation failure. */
DK_API char *dk_op_dump(const dk_op *op);
DK_API void dk_free(void *p);

/* "dkit::name(Tensor input, Tensor(a!) output, float scale) -> ()". Stable for the op's life. */
DK_API const char *dk_op_schema(const dk_op *op);
DK_API dk_op *dk_op_find(const char *name);
DK_API int dk_op_count(void);
DK_API dk_op *dk_op_at(int i);

/* DKIT_DISPATCH_TRACE=1 in the environment (read at load) or this call turns tracing on. */
DK_API void dk_dispatch_set_trace(bool on);

/* ------------------------------------------------------------------------------------------ */
/* Boxed calls                                                                                */

/* Call an op from outside with its arguments on the stack: tags are checked against the schema
 * (ints are accepted for floats), then the op's typed entry runs. Pops the arguments. */
DK_API dk_status dk_op_call_boxed(const dk_op *op, dk_stack *stack);
/* From a boxed kernel: dispatch the same arguments to the keys of `ks` below its highest. */
DK_API dk_status dk_op_redispatch_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack);
/* The op's arguments on a stack a boxed kernel received. */
static inline dk_value *dk_stack_args(dk_stack *s, const dk_op *op) { return s->v + s->size - op->nargs; }

/* ------------------------------------------------------------------------------------------ */
/* Internals used by the generated code. Not for direct use.                                  */

DK_API extern int dk__trace_enabled;
DK_API extern uint8_t dk__device_keys[32];
/* The same map as one-bit key sets, so the entry's fast path turns a device into its key set
 * with a single load (0 for device types no backend serves). */
DK_API extern dk_keyset dk__device_keysets[32];

DK_API void dk__op_announce(dk_op *op);
DK_API dk_status dk__op_no_kernel(const dk_op *op, dk_keyset ks);
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

static inline dk_key dk__key_of_device_type(int32_t t)
{
    return (t >= 0 && t < 32) ? (dk_key)__atomic_load_n(&dk__device_keys[t], __ATOMIC_RELAXED) : DK_KEY_UNDEFINED;
}

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

/* Per-kind pieces of the generated code. */
#define DK__CTYPE_TENSOR const dk_tensor *
#define DK__CTYPE_TENSOR_OUT dk_tensor *
#define DK__CTYPE_OPT_TENSOR const dk_tensor *
#define DK__CTYPE_OPT_TENSOR_OUT dk_tensor *
#define DK__CTYPE_INT int64_t
#define DK__CTYPE_FLOAT double
#define DK__CTYPE_BOOL bool
#define DK__CTYPE_STR const char *
#define DK__CTYPE_INT_LIST dk_int_list

#define DK__INFO_TENSOR DK_ARG_TENSOR, false
#define DK__INFO_TENSOR_OUT DK_ARG_TENSOR, true
#define DK__INFO_OPT_TENSOR DK_ARG_OPT_TENSOR, false
#define DK__INFO_OPT_TENSOR_OUT DK_ARG_OPT_TENSOR, true
#define DK__INFO_INT DK_ARG_INT, false
#define DK__INFO_FLOAT DK_ARG_FLOAT, false
#define DK__INFO_BOOL DK_ARG_BOOL, false
#define DK__INFO_STR DK_ARG_STR, false
#define DK__INFO_INT_LIST DK_ARG_INT_LIST, false

/* value -> C (tags were checked by dk_op_call_boxed or written by the generated boxer) */
#define DK__UNBOX_TENSOR(v) ((const dk_tensor *)(v).u.t)
#define DK__UNBOX_TENSOR_OUT(v) ((v).u.t)
#define DK__UNBOX_OPT_TENSOR(v) ((v).tag == DK_TYPE_TENSOR ? (const dk_tensor *)(v).u.t : NULL)
#define DK__UNBOX_OPT_TENSOR_OUT(v) ((v).tag == DK_TYPE_TENSOR ? (v).u.t : NULL)
#define DK__UNBOX_INT(v) ((v).u.i)
#define DK__UNBOX_FLOAT(v) ((v).u.f)
#define DK__UNBOX_BOOL(v) ((v).u.b)
#define DK__UNBOX_STR(v) ((v).u.s)
#define DK__UNBOX_INT_LIST(v) ((v).u.il)

/* C -> value */
#define DK__BOX_TENSOR(x) dk_value_tensor((dk_tensor *)(x))
#define DK__BOX_TENSOR_OUT(x) dk_value_tensor(x)
#define DK__BOX_OPT_TENSOR(x) dk_value_tensor((dk_tensor *)(x))
#define DK__BOX_OPT_TENSOR_OUT(x) dk_value_tensor(x)
#define DK__BOX_INT(x) dk_value_int(x)
#define DK__BOX_FLOAT(x) dk_value_float(x)
#define DK__BOX_BOOL(x) dk_value_bool(x)
#define DK__BOX_STR(x) dk_value_str(x)
#define DK__BOX_INT_LIST(x) dk_value_int_list(x)

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
static inline dk_keyset dk__keyset_of_device_type(int32_t t)
{
    return (uint32_t)t < 32u ? __atomic_load_n(&dk__device_keysets[t], __ATOMIC_RELAXED)
                             : 0;
}

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

#define DK__SAME_TENSOR(x) if (DK_UNLIKELY(!(x))) return dk__op_null_tensor(dk__op_self, #x); dk__same_device(&dk__first, &dk__dev, &dk__mixed, x);
#define DK__SAME_TENSOR_OUT(x) DK__SAME_TENSOR(x)
#define DK__SAME_OPT_TENSOR(x) if (x) dk__same_device(&dk__first, &dk__dev, &dk__mixed, x);
#define DK__SAME_OPT_TENSOR_OUT(x) DK__SAME_OPT_TENSOR(x)
#define DK__SAME_INT(x)
#define DK__SAME_FLOAT(x)
#define DK__SAME_BOOL(x)
#define DK__SAME_STR(x)
#define DK__SAME_INT_LIST(x)

/* Device collection: required tensors must be non-NULL. */
#define DK__COLLECT_TENSOR(dc, x) if (DK_UNLIKELY(!(x))) return dk__op_null_tensor(dk__op_self, #x); dk__collect(dc, x, #x);
#define DK__COLLECT_TENSOR_OUT(dc, x) DK__COLLECT_TENSOR(dc, x)
#define DK__COLLECT_OPT_TENSOR(dc, x) dk__collect(dc, x, #x);
#define DK__COLLECT_OPT_TENSOR_OUT(dc, x) dk__collect(dc, x, #x);
#define DK__COLLECT_INT(dc, x)
#define DK__COLLECT_FLOAT(dc, x)
#define DK__COLLECT_BOOL(dc, x)
#define DK__COLLECT_STR(dc, x)
#define DK__COLLECT_INT_LIST(dc, x)

DK_API dk_status dk__op_null_tensor(const dk_op *op, const char *name);

/* X-macro callbacks */
#define DK__X_PARAM(K, n) , DK__CTYPE_##K n
#define DK__X_NAME(K, n) , n
#define DK__X_VOID(K, n) (void)n;
#define DK__X_INFO(K, n) {#n, DK__INFO_##K},
#define DK__X_UNBOX(K, n) DK__CTYPE_##K n = DK__UNBOX_##K(dk__v[dk__i]); dk__i++;
#define DK__X_BOX(K, n) dk__s.v[dk__s.size++] = DK__BOX_##K(n);
#define DK__X_COLLECT(K, n) DK__COLLECT_##K(&dk__dc, n)
#define DK__X_SAME(K, n) DK__SAME_##K(n)
#define DK__X_COUNT(K, n) +1

#define DK__PARAMS(ARGS) DK__TAIL(ARGS(DK__X_PARAM))
#define DK__NAMES(ARGS) DK__TAIL(ARGS(DK__X_NAME))
#define DK__NARGS(ARGS) (0 ARGS(DK__X_COUNT))

#if defined(__GNUC__)
#define DK__NOINLINE __attribute__((noinline))
#define DK__ALWAYS_INLINE __attribute__((always_inline))
#define DK__CONSTRUCTOR(fn) static void fn(void) __attribute__((constructor, used)); static void fn(void)
#else
#error "dkit needs a compiler with __attribute__((constructor))"
#endif

/* In a header: the kernel type, the op object and the typed entries. */
#define DK_DECLARE_OP(name, ARGS)                                                           \
    typedef dk_status (*dk_##name##_fn)(DK__PARAMS(ARGS));                                  \
    DK_API extern dk_op dk_##name##_op;                                                     \
    DK_API dk_status dk_##name(DK__PARAMS(ARGS));                                           \
    DK_API dk_status dk_##name##_redispatch(dk_keyset ks, DK__PARAMS(ARGS));

/*
 * In exactly one .c file: defines the op and everything generated from its argument list, and
 * ends with the signature of the op's check function, whose body the author writes next. The
 * check runs once per call, at the entry, after the device check and before dispatch; kernels
 * may rely on everything it verified.
 */
#define DK_DEFINE_OP(name, ARGS)                                                            \
    static dk_status dk__##name##_check(DK__PARAMS(ARGS));                                  \
    static dk_status dk__##name##_unbox(dk_fnptr dk__fn, const dk_value *dk__v)             \
    {                                                                                       \
        int dk__i = 0;                                                                      \
        ARGS(DK__X_UNBOX)                                                                   \
        (void)dk__i;                                                                        \
        return ((dk_##name##_fn)dk__fn)(DK__NAMES(ARGS));                                   \
    }                                                                                       \
    static dk_status dk__##name##_stub(DK__PARAMS(ARGS))                                    \
    {                                                                                       \
        ARGS(DK__X_VOID)                                                                    \
        return dk_last_status();                                                            \
    }                                                                                       \
    static const dk_arg_info dk__##name##_args[] = {ARGS(DK__X_INFO)};                      \
    _Static_assert(DK__NARGS(ARGS) <= DK_STACK_MAX, "too many arguments for a dkit op");     \
    dk_op dk_##name##_op = {#name, dk__##name##_args, DK__NARGS(ARGS), dk__##name##_unbox,  \
                            (dk_fnptr)dk_##name, (dk_fnptr)dk__##name##_stub, 0, 0, {{0}},  \
                            NULL};                                                          \
    DK__CONSTRUCTOR(dk__##name##_announce) { dk__op_announce(&dk_##name##_op); }            \
    /* Note [Dispatch fast path]                                                           \
     * The fast path reads one table slot and tail-calls its typed kernel; it makes no other \
     * call, so the arguments stay in their registers and the entry needs no stack frame.    \
     * Everything that would call out (tracing, the boxed convention with its ~530-byte      \
     * stack, the missing-kernel error) is here, out of line. It selects the slot again: a   \
     * registration racing in between only makes the call as if it had started a moment     \
     * later. Measured by bench/bench_dispatch.c (make bench, make bench-callgrind). */     \
    DK__NOINLINE static dk_status dk__##name##_call_slow(dk_keyset dk__ks, DK__PARAMS(ARGS)) \
    {                                                                                       \
        dk_op *const dk__op_self = &dk_##name##_op;                                         \
        dk_slot dk__slot;                                                                   \
        dk_keyset dk__m;                                                                    \
        dk_key dk__k = dk__op_select(dk__op_self, dk__ks, &dk__slot, &dk__m);               \
        if (dk__trace_on()) dk__op_trace(dk__op_self, dk__ks, dk__k);                       \
        if (dk__slot.unboxed != NULL) return ((dk_##name##_fn)dk__slot.unboxed)(DK__NAMES(ARGS)); \
        if (dk__slot.boxed == NULL) return dk__op_no_kernel(dk__op_self, dk__ks);           \
        dk_stack dk__s;                                                                     \
        dk__s.size = 0;                                                                     \
        ARGS(DK__X_BOX)                                                                     \
        return dk__slot.boxed(dk__op_self, dk__m, &dk__s, dk__slot.ctx);                    \
    }                                                                                       \
    DK__ALWAYS_INLINE static inline dk_status dk__##name##_call(dk_keyset dk__ks,           \
                                                                DK__PARAMS(ARGS))           \
    {                                                                                       \
        dk_fnptr dk__fn = dk__op_select_unboxed(&dk_##name##_op, dk__ks);                   \
        if (DK_LIKELY(dk__fn != NULL))                                                      \
            return ((dk_##name##_fn)dk__fn)(DK__NAMES(ARGS));                               \
        return dk__##name##_call_slow(dk__ks, DK__NAMES(ARGS));                             \
    }                                                                                       \
    /* The general device check (Note [Device check fast path]): finds the offending       \
     * tensor for the error, and accepts different device types that share a backend key  \
     * (e.g. kDLCPU with kDLCUDAHost). */                                                   \
    DK__NOINLINE static dk_status dk__##name##_entry_slow(DK__PARAMS(ARGS))                  \
    {                                                                                       \
        dk_op *const dk__op_self = &dk_##name##_op;                                         \
        dk__device_check dk__dc = {0, NULL, NULL, NULL, NULL};                              \
        (void)dk__op_self;                                                                  \
        ARGS(DK__X_COLLECT)                                                                 \
        if (dk__dc.bad != NULL) return dk__op_device_error(dk__op_self, &dk__dc);           \
        dk_status dk__st = dk__##name##_check(DK__NAMES(ARGS));                             \
        if (dk__st != DK_OK) return dk__st;                                                 \
        return dk__##name##_call(dk_tls_apply(dk__dc.keys), DK__NAMES(ARGS));               \
    }                                                                                       \
    dk_status dk_##name(DK__PARAMS(ARGS))                                                   \
    {                                                                                       \
        dk_op *const dk__op_self = &dk_##name##_op;                                         \
        const dk_tensor *dk__first = NULL;                                                  \
        uint64_t dk__dev = 0;                                                               \
        bool dk__mixed = false;                                                             \
        (void)dk__op_self;                                                                  \
        (void)dk__dev;                                                                      \
        ARGS(DK__X_SAME)                                                                    \
        dk_keyset dk__kset = dk__first ? dk__keyset_of_device_type((int32_t)dk__first->device.device_type) \
                                       : 0;                                                 \
        if (DK_UNLIKELY(dk__mixed || dk__kset == 0))                                        \
            return dk__##name##_entry_slow(DK__NAMES(ARGS));                                \
        dk_status dk__st = dk__##name##_check(DK__NAMES(ARGS));                             \
        if (DK_UNLIKELY(dk__st != DK_OK)) return dk__st;                                    \
        return dk__##name##_call(dk_tls_apply(dk__kset), DK__NAMES(ARGS));                  \
    }                                                                                       \
    dk_status dk_##name##_redispatch(dk_keyset dk__ks, DK__PARAMS(ARGS))                    \
    {                                                                                       \
        return dk__##name##_call(dk_keyset_below(dk__ks, dk_keyset_highest(dk__ks)),         \
                                 DK__NAMES(ARGS));                                          \
    }                                                                                       \
    static dk_status dk__##name##_check(DK__PARAMS(ARGS))

#ifdef __cplusplus
}
#endif
#endif /* DK_OP_H */
