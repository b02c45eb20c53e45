/* dk_keys_private.h — the key slots' names, for the core's own files; not installed. */
#ifndef DK_KEYS_PRIVATE_H
#define DK_KEYS_PRIVATE_H

#include "dk_keys.h"

/* Names of claimed keys; NULL for unclaimed slots. Written under the registry lock, read with
 * acquire loads (dk_key_name) or under the lock. */
extern const char *dk__key_names[DK_NUM_KEYS];

/* Whether slot k has been claimed (the built-in keys always are). */
static inline bool dk__key_claimed(dk_key k)
{
    return k > 0 && k < DK_NUM_KEYS && __atomic_load_n(&dk__key_names[k], __ATOMIC_ACQUIRE) != NULL;
}

/* Keys the calling thread claimed since the last swap: returns them and starts afresh from
 * `start` (Note [A failed load leaves nothing behind] in dk_backend_library.h). */
dk_keyset dk__keys_claimed_swap(dk_keyset start);
/* Gives a claimed vendor or functionality slot back: no device type maps to it any more and it
 * is unnamed (the name's copy is kept, not freed: a concurrent dk_key_name may be reading it). */
void dk__key_release(dk_key k);

#endif /* DK_KEYS_PRIVATE_H */
