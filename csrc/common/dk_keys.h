/*
 * dk_keys.h — dispatch keys and key sets.
 *
 * Note [Key layout]
 * A key set is a 64-bit word, one bit per key; a higher bit is a higher priority, so the key
 * that serves a call is the highest set bit (one clz instruction).
 *
 *   bit 0            unused (an empty set means "no key")
 *   bits 1..3        built-in backends: cpu, cuda, hip
 *   bits 4..19       vendor backend slots, claimed at run time with a name and a DLPack device type
 *   bits 32..55      functionality slots claimed at run time (tests, tracing, user layers)
 *   bit 56           Profile
 *
 * Every functionality key sits above every backend key, so functionality kernels always run
 * before the backend kernel and reach it by redispatch. A tensor contributes its device's
 * backend key; a functionality key joins a call only through the thread's included set.
 */
#ifndef DK_KEYS_H
#define DK_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_dlpack.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t dk_keyset;
typedef int dk_key;

enum {
    DK_KEY_UNDEFINED = 0,
    DK_KEY_CPU = 1,
    DK_KEY_CUDA = 2,
    DK_KEY_HIP = 3,
    DK_KEY_VENDOR_FIRST = 4,
    DK_KEY_VENDOR_LAST = 19,
    DK_KEY_BACKEND_LAST = DK_KEY_VENDOR_LAST,
    DK_KEY_FUNC_FIRST = 32,
    DK_KEY_FUNC_LAST = 55,
    DK_KEY_PROFILE = 56,
    DK_NUM_KEYS = 64
};

/* The short key names used by the registration macros: DK_REGISTER_DEVICE_IMPL(op, CPU, fn). */
#define DK_KEY_OF_CPU DK_KEY_CPU
#define DK_KEY_OF_CUDA DK_KEY_CUDA
#define DK_KEY_OF_HIP DK_KEY_HIP

#define DK_KEYSET(k) ((dk_keyset)1 << (k))
/* Every backend key: bits 1..DK_KEY_BACKEND_LAST. */
#define DK_BACKEND_KEYS ((DK_KEYSET(DK_KEY_BACKEND_LAST + 1) - 1) & ~(dk_keyset)1)

static inline dk_key dk_keyset_highest(dk_keyset ks) { return ks ? 63 - __builtin_clzll(ks) : DK_KEY_UNDEFINED; }
static inline bool dk_keyset_has(dk_keyset ks, dk_key k) { return (ks >> k) & 1u; }
/* Keys strictly below k. */
static inline dk_keyset dk_keyset_below(dk_keyset ks, dk_key k) { return ks & (DK_KEYSET(k) - 1); }
static inline bool dk_key_is_backend(dk_key k) { return k >= DK_KEY_CPU && k <= DK_KEY_BACKEND_LAST; }

/* "cpu", "Profile", a vendor's name, or "key<N>" for an unclaimed slot. Never NULL. */
DK_API const char *dk_key_name(dk_key k);
/* Looks a key up by name; DK_ENOENT if nothing has that name. */
DK_API dk_status dk_key_lookup(const char *name, dk_key *out);
/* Writes "{Profile, cpu}" into buf (truncating safely); returns buf. */
DK_API const char *dk_keyset_str(dk_keyset ks, char *buf, size_t n);

/*
 * Claim a vendor backend slot for tensors whose DLPack device type is `device_type`. Claiming the
 * same name with the same device type again returns the same key (backends may be loaded twice).
 * Fails with DK_EINVAL if the device type is already served by another key, or DK_ENOMEM when
 * all vendor slots are taken.
 */
DK_API dk_status dk_backend_key_register(const char *name, int32_t device_type, dk_key *out);
/* Claim a functionality slot; slots are handed out in increasing priority. Same-name re-claim
 * returns the same key. */
DK_API dk_status dk_functionality_key_register(const char *name, dk_key *out);

/* The backend key serving a DLPack device type, or DK_KEY_UNDEFINED. Lock-free. */
DK_API dk_key dk_key_for_device_type(int32_t device_type);

/* The device-type map, read lock-free by every call (the dispatch fast path, dk_dispatch.h). */
DK_API extern uint8_t dk__device_keys[32];
/* The same map as one-bit key sets, so the entry's fast path turns a device into its key set
 * with a single load (0 for device types no backend serves). */
DK_API extern dk_keyset dk__device_keysets[32];

static inline dk_key dk__key_of_device_type(int32_t t)
{
    return (t >= 0 && t < 32) ? (dk_key)__atomic_load_n(&dk__device_keys[t], __ATOMIC_RELAXED) : DK_KEY_UNDEFINED;
}

static inline dk_keyset dk__keyset_of_device_type(int32_t t)
{
    return (uint32_t)t < 32u ? __atomic_load_n(&dk__device_keysets[t], __ATOMIC_RELAXED) : 0;
}

#ifdef __cplusplus
}
#endif
#endif /* DK_KEYS_H */
