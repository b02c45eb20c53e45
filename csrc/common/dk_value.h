/*
 * dk_value.h — boxed values and the stack a boxed call passes them on.
 *
 * The boxed convention is how code that knows no particular op (backend fallbacks, Profile, the
 * Python binding, a vendor's "run it elsewhere" kernel) calls any op: arguments become tagged
 * values, in schema order, on a dk_stack. Every op's typed signature also has boxed adapters in
 * both directions, generated from its argument list (dk_op_define.h).
 */
#ifndef DK_VALUE_H
#define DK_VALUE_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_export.h"
#include "dk_status.h"
#include "dk_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

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
static inline dk_value dk_value_tensor(dk_tensor *t)
{
    dk_value v;
    v.tag = t ? DK_TYPE_TENSOR : DK_TYPE_NONE;
    v.u.t = t;
    return v;
}
static inline dk_value dk_value_int(int64_t i)
{
    dk_value v;
    v.tag = DK_TYPE_INT;
    v.u.i = i;
    return v;
}
static inline dk_value dk_value_float(double f)
{
    dk_value v;
    v.tag = DK_TYPE_FLOAT;
    v.u.f = f;
    return v;
}
static inline dk_value dk_value_bool(bool b)
{
    dk_value v;
    v.tag = DK_TYPE_BOOL;
    v.u.b = b;
    return v;
}
static inline dk_value dk_value_str(const char *s)
{
    dk_value v;
    v.tag = DK_TYPE_STR;
    v.u.s = s;
    return v;
}
static inline dk_value dk_value_int_list(dk_int_list l)
{
    dk_value v;
    v.tag = DK_TYPE_INT_LIST;
    v.u.il = l;
    return v;
}
static inline dk_value dk_value_none(void)
{
    dk_value v;
    v.tag = DK_TYPE_NONE;
    v.u.t = NULL;
    return v;
}

#ifdef __cplusplus
}
#endif
#endif /* DK_VALUE_H */
