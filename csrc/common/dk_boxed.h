/*
 * dk_boxed.h — calling an op with its arguments on a stack (dk_value.h), and continuing a call
 * from inside a boxed kernel.
 */
#ifndef DK_BOXED_H
#define DK_BOXED_H

#include "dk_op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Call an op from outside with its arguments on the stack: tags are checked against the schema
 * (ints are accepted for floats), every tensor is validated (dk_tensor_validate: Note [Untrusted
 * tensors]), then the op's typed entry runs. Pops the arguments whatever the outcome; a stack
 * holding fewer values than the op has arguments is refused as it is. */
DK_API dk_status dk_op_call_boxed(const dk_op *op, dk_stack *stack);
/* From a boxed kernel: dispatch the same arguments to the keys of `ks` below its highest. */
DK_API dk_status dk_op_redispatch_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack);
/* From a boxed kernel that hands its call back to the table: dispatch the same arguments to
 * whatever serves `ks` now, its highest key included. For a kernel that was unregistered while
 * a call was on its way to it (a call reads its slot without a lock: Note [Lock-free table
 * reads]) and serves that call as the table now says (Note [Python kernels] in
 * csrc/python/dk_pykernel.c); a kernel still registered at that slot would call itself. */
DK_API dk_status dk_op_dispatch_boxed(const dk_op *op, dk_keyset ks, dk_stack *stack);
/* The op's arguments on a stack a boxed kernel received. */
static inline dk_value *dk_stack_args(dk_stack *s, const dk_op *op) { return s->v + s->size - op->nargs; }

#ifdef __cplusplus
}
#endif
#endif /* DK_BOXED_H */
