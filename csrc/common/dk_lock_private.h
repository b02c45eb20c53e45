/*
 * dk_lock_private.h — the core's registry lock, a leaf: it depends on nothing else in dkit.
 *
 * Note [The registry lock]
 * Every write to the core's shared state (claimed keys, ops and their tables, registrations,
 * fallbacks, the backend list) happens under this one mutex; calls never take it (Note
 * [Lock-free table reads] in dk_op.h). It is a plain (non-recursive) mutex: nothing that holds it
 * calls out of the core (warnings are issued after unlocking, backend entry points run under the
 * loader's own lock, dk_backend.c), so it never needs to be taken twice by one thread.
 *
 * fork(): a child has only the thread that forked, so a lock some other thread held at that
 * moment would stay locked in the child forever. The lock is therefore taken around fork()
 * (pthread_atfork, installed on first use) and released on both sides, so the child starts with
 * a consistent, unlocked registry.
 */
#ifndef DK_LOCK_PRIVATE_H
#define DK_LOCK_PRIVATE_H

#ifdef __cplusplus
extern "C" {
#endif

void dk__lock(void);
void dk__unlock(void);

#ifdef __cplusplus
}
#endif
#endif /* DK_LOCK_PRIVATE_H */
