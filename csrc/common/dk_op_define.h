/*
 * dk_op_define.h — defining an op: everything is generated from one X-macro argument list.
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
 * (device check, aliasing check, the check body above, dispatch), `dk_my_op_redispatch(ks, ...)`,
 * the boxed adapters in both directions, and the schema string
 *     dkit::my_op(Tensor input, Tensor(a!) output, float scale) -> ()
 *
 * Argument kinds:   TENSOR  const dk_tensor *      OPT_TENSOR      const dk_tensor * or NULL
 *                   TENSOR_OUT  dk_tensor *         OPT_TENSOR_OUT  dk_tensor * or NULL
 *                   INT int64_t   FLOAT double   BOOL bool   STR const char *   INT_LIST dk_int_list
 * Outputs are written in place (the caller's framework allocated them), so ops return only a
 * status. An op whose output size depends on the data takes its output sized to an upper bound
 * and an int64 count output (Note [Data-dependent output sizes] in ops/nms.h).
 */
#ifndef DK_OP_DEFINE_H
#define DK_OP_DEFINE_H

#include "dk_boxed.h"
#include "dk_dispatch.h"
#include "dk_op.h"
#include "dk_pp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Announces an op to the core when its library loads (dk_init.c): the op joins the op list. */
DK_API void dk__op_announce(dk_op *op);

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

#define DK__SAME_TENSOR(x)                                             \
    if (DK_UNLIKELY(!(x))) return dk__op_null_tensor(dk__op_self, #x); \
    dk__same_device(&dk__first, &dk__dev, &dk__mixed, x);
#define DK__SAME_TENSOR_OUT(x) DK__SAME_TENSOR(x)
#define DK__SAME_OPT_TENSOR(x) \
    if (x) dk__same_device(&dk__first, &dk__dev, &dk__mixed, x);
#define DK__SAME_OPT_TENSOR_OUT(x) DK__SAME_OPT_TENSOR(x)
#define DK__SAME_INT(x)
#define DK__SAME_FLOAT(x)
#define DK__SAME_BOOL(x)
#define DK__SAME_STR(x)
#define DK__SAME_INT_LIST(x)

/* Device collection: required tensors must be non-NULL. */
#define DK__COLLECT_TENSOR(dc, x)                                      \
    if (DK_UNLIKELY(!(x))) return dk__op_null_tensor(dk__op_self, #x); \
    dk__collect(dc, x, #x);
#define DK__COLLECT_TENSOR_OUT(dc, x) DK__COLLECT_TENSOR(dc, x)
#define DK__COLLECT_OPT_TENSOR(dc, x) dk__collect(dc, x, #x);
#define DK__COLLECT_OPT_TENSOR_OUT(dc, x) dk__collect(dc, x, #x);
#define DK__COLLECT_INT(dc, x)
#define DK__COLLECT_FLOAT(dc, x)
#define DK__COLLECT_BOOL(dc, x)
#define DK__COLLECT_STR(dc, x)
#define DK__COLLECT_INT_LIST(dc, x)

/* The argument as a tensor pointer, or NULL when it is not a tensor (the aliasing check). */
#define DK__TPTR_TENSOR(x) (x)
#define DK__TPTR_TENSOR_OUT(x) (x)
#define DK__TPTR_OPT_TENSOR(x) (x)
#define DK__TPTR_OPT_TENSOR_OUT(x) (x)
#define DK__TPTR_INT(x) NULL
#define DK__TPTR_FLOAT(x) NULL
#define DK__TPTR_BOOL(x) NULL
#define DK__TPTR_STR(x) NULL
#define DK__TPTR_INT_LIST(x) NULL
/* Whether an argument kind is written by the op. */
#define DK__ISOUT_TENSOR 0
#define DK__ISOUT_TENSOR_OUT 1
#define DK__ISOUT_OPT_TENSOR 0
#define DK__ISOUT_OPT_TENSOR_OUT 1
#define DK__ISOUT_INT 0
#define DK__ISOUT_FLOAT 0
#define DK__ISOUT_BOOL 0
#define DK__ISOUT_STR 0
#define DK__ISOUT_INT_LIST 0
/* The aliasing check's gathering of one argument (dk__alias_add in dk_dispatch.h). */
#define DK__ALIAS_TENSOR(s, x) dk__alias_add(s, x, false);
#define DK__ALIAS_TENSOR_OUT(s, x) dk__alias_add(s, x, true);
#define DK__ALIAS_OPT_TENSOR(s, x) dk__alias_add(s, x, false);
#define DK__ALIAS_OPT_TENSOR_OUT(s, x) dk__alias_add(s, x, true);
#define DK__ALIAS_INT(s, x)
#define DK__ALIAS_FLOAT(s, x)
#define DK__ALIAS_BOOL(s, x)
#define DK__ALIAS_STR(s, x)
#define DK__ALIAS_INT_LIST(s, x)

/* X-macro callbacks */
#define DK__X_PARAM(K, n) , DK__CTYPE_##K n
#define DK__X_NAME(K, n) , n
#define DK__X_VOID(K, n) (void)n;
#define DK__X_INFO(K, n) {#n, DK__INFO_##K},
#define DK__X_SIG(K, n) #K " " #n ";"
#define DK__X_UNBOX(K, n)                          \
    DK__CTYPE_##K n = DK__UNBOX_##K(dk__v[dk__i]); \
    dk__i++;
#define DK__X_BOX(K, n) dk__s.v[dk__s.size++] = DK__BOX_##K(n);
#define DK__X_COLLECT(K, n) DK__COLLECT_##K(&dk__dc, n)
#define DK__X_SAME(K, n) DK__SAME_##K(n)
#define DK__X_COUNT(K, n) +1
#define DK__X_TPTR(K, n) (const dk_tensor *)DK__TPTR_##K(n),
#define DK__X_NOUT(K, n) +DK__ISOUT_##K
#define DK__X_ALIAS(K, n) DK__ALIAS_##K(&dk__al, n)

#define DK__PARAMS(ARGS) DK__TAIL(ARGS(DK__X_PARAM))
#define DK__NAMES(ARGS) DK__TAIL(ARGS(DK__X_NAME))
#define DK__NARGS(ARGS) (0 ARGS(DK__X_COUNT))
#define DK__NOUTS(ARGS) (0 ARGS(DK__X_NOUT))

/* In a header: the kernel type, the op object, the typed entries, and dk_<name>_signature(): the
 * argument list as the including code was compiled against it (Note [Schemas are checked at
 * registration] in dk_registry.h). */
#define DK_DECLARE_OP(name, ARGS)                                            \
    typedef dk_status (*dk_##name##_fn)(DK__PARAMS(ARGS));                   \
    DK_API extern dk_op dk_##name##_op;                                      \
    DK_API dk_status dk_##name(DK__PARAMS(ARGS));                            \
    DK_API dk_status dk_##name##_redispatch(dk_keyset ks, DK__PARAMS(ARGS)); \
    static inline const char *dk_##name##_signature(void) { return "" ARGS(DK__X_SIG); }

/*
 * In exactly one .c file: defines the op and everything generated from its argument list, and
 * ends with the signature of the op's check function, whose body the author writes next. The
 * check runs once per call, at the entry, after the device check and before dispatch; kernels
 * may rely on everything it verified.
 */
/* The block comments inside this macro span continuation lines, whose
 * backslashes clang-format cannot move (they are part of the comment). */
// clang-format off
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
    /* Validation, before dispatch: outputs must not overlap themselves or any other tensor   \
     * argument (checked here, for every op: Note [Aliasing] in dk_check.h), then the op's   \
     * own check. */                                                                        \
    DK__ALWAYS_INLINE static inline dk_status dk__##name##_validate(DK__PARAMS(ARGS))        \
    {                                                                                       \
        if (DK__NOUTS(ARGS) > 0) {                                                          \
            dk__alias_set dk__al;                                                           \
            dk__al.out = 0;                                                                 \
            dk__al.n = 0;                                                                   \
            dk__al.slow = false;                                                            \
            ARGS(DK__X_ALIAS)                                                               \
            if (DK_UNLIKELY(dk__alias_suspect(&dk__al))) {                                  \
                const dk_tensor *const dk__t[DK__NARGS(ARGS) + 1] = {ARGS(DK__X_TPTR) NULL}; \
                dk_status dk__ast = dk__op_check_aliasing_slow(&dk_##name##_op, dk__t);     \
                if (dk__ast != DK_OK) return dk__ast;                                       \
            }                                                                               \
        }                                                                                   \
        return dk__##name##_check(DK__NAMES(ARGS));                                         \
    }                                                                                       \
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
        dk_status dk__st = dk__##name##_validate(DK__NAMES(ARGS));                          \
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
        dk_status dk__st = dk__##name##_validate(DK__NAMES(ARGS));                          \
        if (DK_UNLIKELY(dk__st != DK_OK)) return dk__st;                                    \
        return dk__##name##_call(dk_tls_apply(dk__kset), DK__NAMES(ARGS));                  \
    }                                                                                       \
    dk_status dk_##name##_redispatch(dk_keyset dk__ks, DK__PARAMS(ARGS))                    \
    {                                                                                       \
        return dk__##name##_call(dk_keyset_below(dk__ks, dk_keyset_highest(dk__ks)),         \
                                 DK__NAMES(ARGS));                                          \
    }                                                                                       \
    static dk_status dk__##name##_check(DK__PARAMS(ARGS))
// clang-format on

#ifdef __cplusplus
}
#endif
#endif /* DK_OP_DEFINE_H */
