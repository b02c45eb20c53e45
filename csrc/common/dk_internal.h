/* dk_internal.h — shared between the core's own .c files; not installed. */
#ifndef DK_INTERNAL_H
#define DK_INTERNAL_H

#include <pthread.h>

#include "dk_op.h"

/*
 * The registry lock. Every write to keys, ops, registrations and fallbacks happens under it;
 * the hot path never takes it (Note [Lock-free table reads]). Recursive because a registration
 * made from inside a backend's entry point may run while dk_load_backend holds it.
 */
void dk__lock(void);
void dk__unlock(void);

/* Recompute every announced op's table (after a fallback or a key changed). Lock held. */
void dk__recompute_all_locked(void);

/* Names of claimed keys; NULL for unclaimed slots. Lock held for writes. */
extern const char *dk__key_names[DK_NUM_KEYS];

/* Per-op profile counters live in the op's private part (dk_dispatcher.c). */
void dk__profile_add(const dk_op *op, dk_key backend, uint64_t ns);
void dk__profile_read(const dk_op *op, dk_key backend, uint64_t *count, uint64_t *ns);
void dk__profile_clear(const dk_op *op);

/* The core's own registrations, made on first use (Note [Core init without constructors]). */
void dk__backend_note_builtin(const char *name);
void dk__profile_install(void);

#endif /* DK_INTERNAL_H */
