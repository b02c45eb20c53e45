/*
 * dk_tls.h — the thread-local included and excluded key sets.
 *
 * The keys of a call are
 *     (union of its tensors' keys | included) & ~excluded
 * so exclusion wins over inclusion. A thread changes its sets in two ways:
 *
 *   dk_tls_push_include / dk_tls_push_exclude / dk_tls_pop: push returns the previous state and
 *     pop restores it: nested scopes of one thread that end in order (C code: a fallback excluding
 *     keys around a call, a test including a key).
 *   dk_tls_scope_enter / dk_tls_scope_exit: a scope adds keys until it ends, whatever the order
 *     in which scopes end and on whichever thread it ends (Note [Scopes that end out of order]).
 *     The Python context managers (dkit.profile(), dkit.dispatch.include/exclude) use these.
 *
 * Note [Scopes that end out of order]
 * Python scopes do not always end in order: two `with dkit.profile()` blocks driven by
 * generators or tasks can exit inner-before-outer or the other way round, and a context manager
 * finalised by the garbage collector may exit on another thread. Restoring a saved state then
 * restores the wrong one, and a key could stay included for good (every later call profiled).
 * So a scope does not save a state: it records the keys it adds, and the thread's sets are the
 * union of what its live scopes add (on top of the push/pop state). Ending a scope removes its
 * keys from its own thread's sets, from any thread; each scope ends once.
 */
#ifndef DK_TLS_H
#define DK_TLS_H

#include <stdint.h>

#include "dk_export.h"
#include "dk_keys.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    dk_keyset included;
    dk_keyset excluded;
} dk_tls_state;

/* This thread's sets, as calls see them. */
DK_API dk_tls_state dk_tls_get(void);
DK_API dk_tls_state dk_tls_push_include(dk_keyset ks);
DK_API dk_tls_state dk_tls_push_exclude(dk_keyset ks);
DK_API void dk_tls_pop(dk_tls_state previous);

/* A scope's token: nonzero, never reused. */
typedef uint64_t dk_tls_scope;
/* Adds `include` and `exclude` to this thread's sets until dk_tls_scope_exit(*out). */
DK_API dk_status dk_tls_scope_enter(dk_keyset include, dk_keyset exclude, dk_tls_scope *out);
/* Ends a scope, from any thread; DK_EINVAL for an unknown, ended, or dead thread's scope. */
DK_API dk_status dk_tls_scope_exit(dk_tls_scope scope);

/*
 * Note [TLS on the fast path]
 * The state is read inline by every typed op entry, so it is an exported thread-local with the
 * initial-exec model: two instructions per read instead of a __tls_get_addr call. That needs a
 * few bytes of static TLS when libdkit is dlopen'ed (by Python); glibc reserves a surplus for
 * exactly this, and 16 bytes fit comfortably. Its fields are read and written atomically
 * (relaxed: plain moves on x86), because a scope ending on another thread writes them.
 */
#if defined(__GNUC__)
#define DK__TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define DK__TLS_MODEL
#endif
#ifdef __cplusplus
DK_API extern thread_local dk_tls_state dk__tls DK__TLS_MODEL;
#else
DK_API extern _Thread_local dk_tls_state dk__tls DK__TLS_MODEL;
#endif

/* (tensor keys | included) & ~excluded, for the dispatch fast path. */
static inline dk_keyset dk_tls_apply(dk_keyset tensor_keys)
{
    return (tensor_keys | __atomic_load_n(&dk__tls.included, __ATOMIC_RELAXED)) &
           ~__atomic_load_n(&dk__tls.excluded, __ATOMIC_RELAXED);
}

#ifdef __cplusplus
}
#endif
#endif /* DK_TLS_H */
