/*
 * dk_keys.c — key names, run-time key slots, and the device-type map.
 *
 * A leaf of the core: it takes the registry lock (dk_lock_private.h) to claim a slot and calls nothing
 * else. Claiming a key changes no dispatch table: tables already fill every backend slot,
 * claimed or not (Note [Slot precedence] in dk_dispatcher.c), and no device reaches a slot
 * before its key is claimed, because the device-type map is written last.
 */
#include "dk_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dk_keys_private.h"
#include "dk_lock_private.h"

const char *dk__key_names[DK_NUM_KEYS] = {
    [DK_KEY_CPU] = "cpu",
    [DK_KEY_CUDA] = "cuda",
    [DK_KEY_HIP] = "hip",
    [DK_KEY_PROFILE] = "Profile",
};

/* DLPack device type -> backend key. Pinned host memory is CPU-readable, so CPU kernels serve
 * it; managed memory goes to CUDA. Read lock-free by every call (dk__key_of_device_type). */
/* Lookup tables, one entry per line (clang-format would pack them into columns). */
// clang-format off
uint8_t dk__device_keys[32] = {
    [kDLCPU] = DK_KEY_CPU,
    [kDLCUDAHost] = DK_KEY_CPU,
    [kDLROCMHost] = DK_KEY_CPU,
    [kDLCUDA] = DK_KEY_CUDA,
    [kDLCUDAManaged] = DK_KEY_CUDA,
    [kDLROCM] = DK_KEY_HIP,
};

dk_keyset dk__device_keysets[32] = {
    [kDLCPU] = DK_KEYSET(DK_KEY_CPU),
    [kDLCUDAHost] = DK_KEYSET(DK_KEY_CPU),
    [kDLROCMHost] = DK_KEYSET(DK_KEY_CPU),
    [kDLCUDA] = DK_KEYSET(DK_KEY_CUDA),
    [kDLCUDAManaged] = DK_KEYSET(DK_KEY_CUDA),
    [kDLROCM] = DK_KEYSET(DK_KEY_HIP),
};
// clang-format on

const char *dk_key_name(dk_key k)
{
    static const char *const unclaimed[DK_NUM_KEYS] = {
#define DK__K(i) [i] = "key" #i
        DK__K(0),  DK__K(1),  DK__K(2),  DK__K(3),  DK__K(4),  DK__K(5),  DK__K(6),  DK__K(7),  DK__K(8),  DK__K(9),
        DK__K(10), DK__K(11), DK__K(12), DK__K(13), DK__K(14), DK__K(15), DK__K(16), DK__K(17), DK__K(18), DK__K(19),
        DK__K(20), DK__K(21), DK__K(22), DK__K(23), DK__K(24), DK__K(25), DK__K(26), DK__K(27), DK__K(28), DK__K(29),
        DK__K(30), DK__K(31), DK__K(32), DK__K(33), DK__K(34), DK__K(35), DK__K(36), DK__K(37), DK__K(38), DK__K(39),
        DK__K(40), DK__K(41), DK__K(42), DK__K(43), DK__K(44), DK__K(45), DK__K(46), DK__K(47), DK__K(48), DK__K(49),
        DK__K(50), DK__K(51), DK__K(52), DK__K(53), DK__K(54), DK__K(55), DK__K(56), DK__K(57), DK__K(58), DK__K(59),
        DK__K(60), DK__K(61), DK__K(62), DK__K(63),
#undef DK__K
    };
    if (k < 0 || k >= DK_NUM_KEYS) return "key?";
    const char *n = __atomic_load_n(&dk__key_names[k], __ATOMIC_ACQUIRE);
    return n ? n : unclaimed[k];
}

dk_status dk_key_lookup(const char *name, dk_key *out)
{
    if (!name || !out) return dk_error(DK_EINVAL, "dk_key_lookup: NULL argument");
    for (dk_key k = 0; k < DK_NUM_KEYS; k++) {
        const char *n = __atomic_load_n(&dk__key_names[k], __ATOMIC_ACQUIRE);
        if (n && strcmp(n, name) == 0) {
            *out = k;
            return DK_OK;
        }
    }
    return dk_error(DK_ENOENT, "no dispatch key named '%s'", name);
}

const char *dk_keyset_str(dk_keyset ks, char *buf, size_t n)
{
    size_t used = 0;
    if (n == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, n, "{");
    bool first = true;
    for (dk_key k = DK_NUM_KEYS - 1; k >= 0 && used < n; k--) {
        if (!dk_keyset_has(ks, k)) continue;
        used += (size_t)snprintf(buf + used, n - used, "%s%s", first ? "" : ", ", dk_key_name(k));
        first = false;
    }
    if (used < n) snprintf(buf + used, n - used, "}");
    return buf;
}

static _Thread_local dk_keyset dk__tls_claimed;

dk_keyset dk__keys_claimed_swap(dk_keyset start)
{
    dk_keyset prev = dk__tls_claimed;
    dk__tls_claimed = start;
    return prev;
}

/* Claim slot `k` for `name`; the name is copied and lives as long as the process. Lock held. */
static dk_status dk__claim(dk_key k, const char *name)
{
    char *copy = strdup(name);
    if (!copy) return dk_error(DK_ENOMEM, "out of memory naming key '%s'", name);
    __atomic_store_n(&dk__key_names[k], copy, __ATOMIC_RELEASE);
    dk__tls_claimed |= DK_KEYSET(k);
    return DK_OK;
}

/* Names of released keys: a dk_key_name that loaded the pointer just before may still read it,
 * so they are kept (and stay reachable for leak checkers) instead of freed. Lock held. */
struct dk__retired_name {
    struct dk__retired_name *next;
    const char *name;
};
static struct dk__retired_name *dk__retired_names;

void dk__key_release(dk_key k)
{
    if (k < DK_KEY_VENDOR_FIRST || k >= DK_NUM_KEYS || (k > DK_KEY_VENDOR_LAST && k < DK_KEY_FUNC_FIRST) ||
        k > DK_KEY_FUNC_LAST)
        return; /* built-in keys are never released */
    dk__lock();
    for (int t = 0; t < 32; t++) {
        if (dk__device_keys[t] != (uint8_t)k) continue;
        /* The device map first: from here on no call reaches the key. */
        __atomic_store_n(&dk__device_keysets[t], 0, __ATOMIC_RELEASE);
        __atomic_store_n(&dk__device_keys[t], (uint8_t)DK_KEY_UNDEFINED, __ATOMIC_RELEASE);
    }
    const char *old = dk__key_names[k];
    __atomic_store_n(&dk__key_names[k], NULL, __ATOMIC_RELEASE);
    struct dk__retired_name *r = old ? malloc(sizeof *r) : NULL;
    if (r) { /* without memory to record it, the name is simply leaked */
        r->name = old;
        r->next = dk__retired_names;
        dk__retired_names = r;
    }
    dk__unlock();
}

static bool dk__name_ok(const char *name) { return name && name[0] && strlen(name) < 64; }

dk_status dk_backend_key_register(const char *name, int32_t device_type, dk_key *out)
{
    if (!dk__name_ok(name)) return dk_error(DK_EINVAL, "backend name must be 1..63 characters");
    if (device_type < 0 || device_type >= 32)
        return dk_error(DK_EINVAL, "backend '%s': DLPack device type %d is outside [0, 32)", name, (int)device_type);
    dk_status st = DK_OK;
    dk__lock();
    dk_key have = DK_KEY_UNDEFINED;
    for (dk_key k = DK_KEY_CPU; k <= DK_KEY_BACKEND_LAST; k++)
        if (dk__key_names[k] && strcmp(dk__key_names[k], name) == 0) have = k;
    dk_key owner = dk__device_keys[device_type];
    if (have != DK_KEY_UNDEFINED) {
        if (owner != have) {
            st = dk_error(DK_EINVAL, "backend '%s' is already registered for another device type", name);
        } else {
            *out = have;
        }
        goto done;
    }
    if (owner != DK_KEY_UNDEFINED) {
        st = dk_error(DK_EINVAL, "backend '%s': DLPack device type %d is already served by '%s'", name,
                      (int)device_type, dk_key_name(owner));
        goto done;
    }
    for (dk_key k = DK_KEY_VENDOR_FIRST; k <= DK_KEY_VENDOR_LAST; k++) {
        if (dk__key_names[k]) continue;
        st = dk__claim(k, name);
        if (st) goto done;
        __atomic_store_n(&dk__device_keys[device_type], (uint8_t)k, __ATOMIC_RELEASE);
        __atomic_store_n(&dk__device_keysets[device_type], DK_KEYSET(k), __ATOMIC_RELEASE);
        *out = k;
        goto done;
    }
    st = dk_error(DK_ENOMEM, "backend '%s': all %d vendor backend slots are taken", name,
                  DK_KEY_VENDOR_LAST - DK_KEY_VENDOR_FIRST + 1);
done:
    dk__unlock();
    return st;
}

dk_status dk_functionality_key_register(const char *name, dk_key *out)
{
    if (!dk__name_ok(name)) return dk_error(DK_EINVAL, "key name must be 1..63 characters");
    dk_status st = DK_OK;
    dk__lock();
    for (dk_key k = DK_KEY_FUNC_FIRST; k <= DK_KEY_PROFILE; k++) {
        if (dk__key_names[k] && strcmp(dk__key_names[k], name) == 0) {
            *out = k;
            goto done;
        }
    }
    for (dk_key k = DK_KEY_FUNC_FIRST; k <= DK_KEY_FUNC_LAST; k++) {
        if (dk__key_names[k]) continue;
        st = dk__claim(k, name);
        if (!st) *out = k;
        goto done;
    }
    st = dk_error(DK_ENOMEM, "key '%s': all functionality slots are taken", name);
done:
    dk__unlock();
    return st;
}

dk_key dk_key_for_device_type(int32_t device_type) { return dk__key_of_device_type(device_type); }
