/*
 * dk_op.h — the op object, kernels, and registering them.
 *
 * An op is defined once, by an X-macro argument list (dk_op_define.h generates everything else
 * from it). This header holds what the rest of the core and every backend needs to know about an
 * op: its argument list (the schema), its dispatch table, the kinds of kernels, and how they are
 * registered. Related headers, one concern each:
 *   dk_value.h        boxed values and the stack
 *   dk_boxed.h        calling an op boxed, and redispatching from a boxed kernel
 *   dk_introspect.h   tables with provenance, schemas, the op list
 *   dk_dispatch.h     the inlined fast path the generated entries use
 *   dk_op_define.h    DK_DECLARE_OP / DK_DEFINE_OP
 */
#ifndef DK_OP_H
#define DK_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dk_export.h"
#include "dk_keys.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "dk_value.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A type-erased function pointer; cast back to the op's dk_<op>_fn before calling. */
typedef void (*dk_fnptr)(void);

/* ------------------------------------------------------------------------------------------ */
/* The argument list                                                                          */

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

/* ------------------------------------------------------------------------------------------ */
/* The op                                                                                     */

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

/* DKIT_DISPATCH_TRACE=1 in the environment (read at load) or this call turns tracing on. */
DK_API void dk_dispatch_set_trace(bool on);

#ifdef __cplusplus
}
#endif
#endif /* DK_OP_H */
