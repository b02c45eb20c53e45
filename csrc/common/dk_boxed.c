/* dk_boxed.c — boxed calls: the stack, tag checks against the schema, redispatch (dk_boxed.h). */
#include "dk_boxed.h"

#include "dk_check.h"
#include "dk_dispatch.h"

dk_status dk_stack_push(dk_stack *s, dk_value v)
{
    if (!s) return dk_error(DK_EINVAL, "dk_stack_push: stack is NULL");
    if (s->size >= DK_STACK_MAX) return dk_error(DK_EINVAL, "dkit stack overflow (%d values)", DK_STACK_MAX);
    s->v[s->size++] = v;
    return DK_OK;
}

static const char *dk__tag_name(dk_type t)
{
    switch (t) {
    case DK_TYPE_NONE: return "None";
    case DK_TYPE_TENSOR: return "Tensor";
    case DK_TYPE_INT: return "int";
    case DK_TYPE_FLOAT: return "float";
    case DK_TYPE_BOOL: return "bool";
    case DK_TYPE_STR: return "str";
    case DK_TYPE_INT_LIST: return "int[]";
    }
    return "?";
}

/* Checks tags against the schema; widens int to float in place (as Python would). */
static dk_status dk__check_args(const dk_op *op, dk_value *v)
{
    for (int i = 0; i < op->nargs; i++) {
        const dk_arg_info *a = &op->args[i];
        dk_type want = DK_TYPE_NONE;
        switch (a->kind) {
        case DK_ARG_TENSOR: want = DK_TYPE_TENSOR; break;
        case DK_ARG_OPT_TENSOR:
            if (v[i].tag == DK_TYPE_NONE || (v[i].tag == DK_TYPE_TENSOR && v[i].u.t)) continue;
            want = DK_TYPE_TENSOR;
            break;
        case DK_ARG_INT: want = DK_TYPE_INT; break;
        case DK_ARG_FLOAT:
            if (v[i].tag == DK_TYPE_INT) {
                v[i] = dk_value_float((double)v[i].u.i);
                continue;
            }
            want = DK_TYPE_FLOAT;
            break;
        case DK_ARG_BOOL: want = DK_TYPE_BOOL; break;
        case DK_ARG_STR: want = DK_TYPE_STR; break;
        case DK_ARG_INT_LIST: want = DK_TYPE_INT_LIST; break;
        }
        if (v[i].tag != want || (want == DK_TYPE_TENSOR && !v[i].u.t) || (want == DK_TYPE_STR && !v[i].u.s))
            return dk_error(DK_ETYPE, "%s: argument '%s' expects %s, got %s", op->name, a->name,
                            dk_arg_kind_name(a->kind),
                            (v[i].tag == DK_TYPE_TENSOR && !v[i].u.t) || (v[i].tag == DK_TYPE_STR && !v[i].u.s)
                                ? "None"
                                : dk__tag_name(v[i].tag));
    }
    /* A boxed stack comes from outside (a binding, a backend's fallback, a fuzzer): its tensors
     * are validated before the entry's aliasing check and the op's check read their shapes and
     * strides (Note [Untrusted tensors] in dk_check.h). */
    for (int i = 0; i < op->nargs; i++) {
        if (v[i].tag != DK_TYPE_TENSOR) continue;
        dk_status st = dk_tensor_validate(v[i].u.t, op->name, op->args[i].name);
        if (st != DK_OK) return st;
    }
    return DK_OK;
}

dk_status dk_op_call_boxed(const dk_op *op, dk_stack *stack)
{
    if (!op || !stack) return dk_error(DK_EINVAL, "dk_op_call_boxed: %s is NULL", op ? "stack" : "op");
    if (stack->size < op->nargs)
        return dk_error(DK_ETYPE, "%s: expects %d arguments, the stack holds %d", op->name, op->nargs, stack->size);
    dk_value *args = dk_stack_args(stack, op);
    dk_clear_error(); /* Note [Failures without a message] */
    dk_status st = dk__check_args(op, args);
    if (st == DK_OK) {
        st = op->unbox(op->entry, args);
        if (DK_UNLIKELY(st != DK_OK) && !dk_last_error()[0]) st = dk__op_failed_silently(op, args, st);
    }
    stack->size -= op->nargs;
    return st;
}

dk_status dk_op_dispatch_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack)
{
    dk_slot slot;
    dk_keyset m;
    dk_key k = dk__op_select(op, ks, &slot, &m);
    if (DK_UNLIKELY(dk__trace_on())) dk__op_trace(op, ks, k);
    if (slot.unboxed) return op->unbox(slot.unboxed, dk_stack_args(stack, op));
    if (slot.boxed) return slot.boxed(op, m, stack, slot.ctx);
    return dk__op_no_kernel(op, ks);
}

dk_status dk_op_redispatch_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack)
{
    return dk_op_dispatch_boxed(op, dk_keyset_below(ks, dk_keyset_highest(ks)), stack);
}
