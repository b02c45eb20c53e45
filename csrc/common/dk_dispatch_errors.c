/*
 * dk_dispatch_errors.c — what a call reports when it cannot be served (no kernel, mixed devices,
 * a missing tensor), and the dispatch trace (DKIT_DISPATCH_TRACE=1). Off the fast path: these
 * run only on errors and while tracing.
 */
#include <stdio.h>

#include "dk_dispatch.h"
#include "dk_lock_private.h"
#include "dk_op_private.h"

/* "cpu, cuda": the keys at which this op has something to run. Lock held. */
static void dk__registered_keys_locked(const dk_op *op, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    if (op->priv) {
        for (dk_key k = 1; k < DK_NUM_KEYS && used < n; k++) {
            dk_provenance p = op->priv->prov[k];
            if (p != DK_PROV_KERNEL && p != DK_PROV_COMPOSITE) continue;
            if (!dk__op_key_shown_locked(op, k)) continue; /* a composite's unclaimed slots */
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", dk_key_name(k));
        }
    }
    if (!buf[0]) snprintf(buf, n, "none");
}

dk_status dk__op_no_kernel(const dk_op *op, dk_keyset ks)
{
    char have[512], keys[256];
    dk__lock();
    dk_keyset m = ks & op->mask;
    dk_key k = dk_keyset_highest(m);
    dk__registered_keys_locked(op, have, sizeof have);
    dk__unlock();
    if (k == DK_KEY_UNDEFINED)
        return dk_error(DK_ENOTIMPL, "%s: no dispatch key left for this call (keys %s; registered: %s)", op->name,
                        dk_keyset_str(ks, keys, sizeof keys), have);
    return dk_error(DK_ENOTIMPL, "%s: no kernel for %s %s (registered: %s)", op->name,
                    dk_key_is_backend(k) ? "device" : "key", dk_key_name(k), have);
}

dk_status dk__op_device_error(const dk_op *op, const dk__device_check *dc)
{
    char a[64], b[64];
    dk_device_str(dc->bad->device, a, sizeof a);
    if (dk__key_of_device_type((int32_t)dc->bad->device.device_type) == DK_KEY_UNDEFINED)
        return dk_error(DK_EINVAL, "%s: parameter '%s' is on %s, which no loaded dkit backend serves", op->name,
                        dc->bad_name, a);
    dk_device_str(dc->first->device, b, sizeof b);
    return dk_error(DK_EINVAL, "%s: parameter '%s' is on %s but '%s' is on %s", op->name, dc->bad_name, a,
                    dc->first_name, b);
}

/*
 * Note [Failures without a message]
 * A kernel (a vendor's, usually) may fail with a bare status and no message of its own. The
 * caller would then see only the status's text, "invalid argument", naming neither the op nor
 * the kernel. Boxed calls (dk_op_call_boxed: every binding, Python's included) clear the
 * thread's message before the call, so a failure that left it empty is known to have come
 * without one; the message is then supplied here: the op, the backend that served the call and
 * the kernel's registered name, the status. Found as the call found them: the backend key of
 * the first tensor argument's device, under this thread's key sets (a Profile layer above it
 * only times the call). The status is returned unchanged. Typed C calls tail-call their kernel
 * (Note [Dispatch fast path]) and return its status as it is, message or not.
 */
dk_status dk__op_failed_silently(const dk_op *op, const dk_value *args, dk_status st)
{
    const dk_tensor *first = NULL;
    for (int i = 0; i < op->nargs && !first; i++)
        if (args[i].tag == DK_TYPE_TENSOR && args[i].u.t) first = args[i].u.t;
    dk_key k = DK_KEY_UNDEFINED;
    char name[128] = "";
    if (first) {
        const dk_keyset ks = dk_tls_apply(dk__keyset_of_device_type((int32_t)first->device.device_type));
        dk__lock();
        k = dk_keyset_highest(ks & op->mask & DK_BACKEND_KEYS);
        /* Copied under the lock, as in dk__op_trace. */
        if (op->priv && k != DK_KEY_UNDEFINED && op->priv->slot_name[k])
            snprintf(name, sizeof name, "%s", op->priv->slot_name[k]);
        dk__unlock();
    }
    const char *status = dk_status_name(st);
    if (k == DK_KEY_UNDEFINED) return dk_error(st, "%s: a kernel failed with %s without a message", op->name, status);
    return dk_error(st, "%s: the %s kernel%s%s%s failed with %s without a message", op->name, dk_key_name(k),
                    name[0] ? " '" : "", name, name[0] ? "'" : "", status);
}

dk_status dk__op_null_tensor(const dk_op *op, const char *name)
{
    return dk_error(DK_ETYPE, "%s: parameter '%s' is a required tensor but got none", op->name, name);
}

void dk__op_trace(const dk_op *op, dk_keyset ks, dk_key k)
{
    char keys[256], name[128] = "-";
    const char *prov = "missing";
    dk__lock();
    if (op->priv && k != DK_KEY_UNDEFINED) {
        prov = dk_provenance_name(op->priv->prov[k]);
        /* Copied under the lock: another thread may release that registration (and free its
         * name) as soon as we unlock. */
        if (op->priv->slot_name[k]) snprintf(name, sizeof name, "%s", op->priv->slot_name[k]);
    }
    dk__unlock();
    fprintf(stderr, "[dkit dispatch] %s keys=%s -> %s (%s %s)\n", op->name, dk_keyset_str(ks, keys, sizeof keys),
            dk_key_name(k), prov, name);
}
