/*
 * dk_op_private.h — the dispatcher's private view of ops and registrations, shared by the
 * core's files that read it (dk_dispatcher.c owns it; dk_introspect.c, dk_dispatch_errors.c and
 * dk_profile.c read it). Not installed.
 */
#ifndef DK_OP_PRIVATE_H
#define DK_OP_PRIVATE_H

#include "dk_introspect.h"
#include "dk_op.h"

enum { DK__REG_KERNEL, DK__REG_COMPOSITE, DK__REG_FALLBACK };

/* dk_kernel.flags bit of the core's CPU fallback (dk_cpu_fallback.c), whose slots the tables show
 * as DK_PROV_CPU_COPY. Not a public flag: only the core sets it. */
#define DK__KERNEL_CPU_COPY (1u << 8)

struct dk__registration {
    struct dk__registration *below;               /* the registration this one shadows in its stack */
    struct dk__registration *all_prev, *all_next; /* every live registration, for handle checks */
    dk_op *op;                                    /* NULL for fallbacks */
    int kind;
    dk_key key; /* unused for composites */
    dk_kernel kernel;
    char name[]; /* the kernel's name, owned */
};

/* Written under the registry lock (dk_lock_private.h). */
struct dk__op_private {
    int index;                                     /* position in the op list, fixed */
    struct dk__registration *kernels[DK_NUM_KEYS]; /* stack tops, newest first */
    struct dk__registration *composite;
    dk_provenance prov[DK_NUM_KEYS];
    const char *slot_name[DK_NUM_KEYS];
    char *schema;
};

/* Gives the op its private part and a place in the op list. Idempotent. Lock held. */
dk_status dk__op_ensure_locked(dk_op *op);

/* dk_init.c's dk__op_announce: the op joins the list. A failure is only warned about: it runs
 * from a constructor, and the op's first registration reports the same error. */
void dk__op_add(dk_op *op);

/* The op's index in the op list (its order of announcement), or -1 if it was never announced.
 * Fixed for the op's life: Profile keys its counters by it. */
int dk__op_index(const dk_op *op);

/* Whether key k is shown in this op's table: claimed, or with something registered for it
 * (a composite alone fills every backend slot, claimed or not, and does not count). Lock held. */
bool dk__op_key_shown_locked(const dk_op *op, dk_key k);

/*
 * Note [Registration journal]
 * A thread may ask for the handles of every registration it makes from now on (dk_backend.c does,
 * around a backend's entry point, so that a failed load can undo them). Thread-local: another
 * thread registering meanwhile is not recorded. `n` counts every registration, even those past
 * `cap` (then the journal overflowed, and its owner must say so).
 */
typedef struct {
    dk_handle *handles; /* grown with realloc; the owner frees it */
    int cap, n;
    bool overflow; /* a realloc failed: some registration was not recorded */
} dk__journal;

/* Starts recording this thread's registrations into j (NULL stops); returns the previous one. */
dk__journal *dk__journal_swap(dk__journal *j);

#endif /* DK_OP_PRIVATE_H */
