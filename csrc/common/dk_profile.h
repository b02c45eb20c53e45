/*
 * dk_profile.h — the Profile functionality key.
 *
 * A boxed fallback at DK_KEY_PROFILE serves every op: it times the redispatch below it and adds
 * one count and the wall time to the (op, backend) row. It runs only on threads that include
 * the key (dk_tls_push_include(DK_KEYSET(DK_KEY_PROFILE))); counters are atomic, so threads
 * profile concurrently.
 */
#ifndef DK_PROFILE_H
#define DK_PROFILE_H

#include <stdint.h>

#include "dk_op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const dk_op *op;
    dk_key backend;
    uint64_t count;
    uint64_t total_ns;
} dk_profile_row;

/* Rows with a non-zero count, ops in registration order. Returns the number of rows; writes
 * at most `max`. */
DK_API int dk_profile_rows(dk_profile_row *out, int max);
DK_API dk_status dk_profile_get(const dk_op *op, dk_key backend, uint64_t *count, uint64_t *total_ns);
/* Of dk_profile_get's calls, those that the core's CPU fallback served (Note [The CPU fallback]
 * in dk_cpu_fallback.h); dk_profile_format shows them as rows of their own, "<backend> (cpu
 * copy)", as dkit.profile() does. */
DK_API dk_status dk_profile_get_fallback(const dk_op *op, dk_key backend, uint64_t *count, uint64_t *total_ns);
DK_API void dk_profile_reset(void);
/* The rows as a table of text; free with dk_free. */
DK_API char *dk_profile_format(void);

#ifdef __cplusplus
}
#endif
#endif /* DK_PROFILE_H */
