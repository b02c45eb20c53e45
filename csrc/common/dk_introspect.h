/*
 * dk_introspect.h — looking inside the dispatcher: the op list, schemas, and each op's computed
 * table with the provenance of every slot (which rule of Note [Slot precedence] filled it).
 */
#ifndef DK_INTROSPECT_H
#define DK_INTROSPECT_H

#include "dk_op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DK_PROV_MISSING = 0,
    DK_PROV_KERNEL,
    DK_PROV_COMPOSITE,
    DK_PROV_FALLBACK,
    DK_PROV_FALLTHROUGH,
    DK_PROV_CPU_COPY, /* the core's CPU fallback (dk_cpu_fallback.h): "fallback (cpu copy)" */
} dk_provenance;

DK_API const char *dk_provenance_name(dk_provenance p); /* "kernel", "composite", ... */

typedef struct {
    dk_key key;
    dk_provenance provenance;
    const char *kernel_name; /* NULL when missing */
    bool boxed;              /* served through the boxed convention */
} dk_table_entry;

/* The computed slot of every claimed key (backends and functionality keys in use) and of every
 * key with something registered for this op, highest priority first. Returns the number of
 * entries, writing at most `max`. The names stay valid while their registration does. */
DK_API int dk_op_table(const dk_op *op, dk_table_entry *out, int max);
/* The table as text, one line per key; caller frees with dk_free. NULL on allocation failure. */
DK_API char *dk_op_dump(const dk_op *op);
DK_API void dk_free(void *p);

/* "dkit::name(Tensor input, Tensor(a!) output, float scale) -> ()". Stable for the op's life. */
DK_API const char *dk_op_schema(const dk_op *op);
DK_API dk_op *dk_op_find(const char *name);
DK_API int dk_op_count(void);
DK_API dk_op *dk_op_at(int i);

#ifdef __cplusplus
}
#endif
#endif /* DK_INTROSPECT_H */
