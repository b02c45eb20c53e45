/* dk_registry.c — the device registry (MMCV layer) on top of the dispatcher's tables. */
#include "dk_registry.h"

#include <stdio.h>
#include <string.h>

#include "dk_introspect.h"

void dk__register_device_impl(unsigned abi, dk_op *op, dk_key key, dk_fnptr fn, const char *name, const char *file,
                              int line)
{
    /* Runs from a constructor: nobody can receive a status, so failures become warnings (and a
     * backend built for another ABI is also refused by dk_load_backend with an error). */
    if (abi != DK_ABI_VERSION) {
        dk_warn("%s: kernel '%s' (%s:%d) was built for dkit ABI %u, this dkit has ABI %u; not registered", op->name,
                name, file, line, abi, DK_ABI_VERSION);
        return;
    }
    char label[256];
    snprintf(label, sizeof label, "%s", name);
    if (dk_op_register(op, key, dk_kernel_unboxed(fn, label), NULL) != DK_OK)
        dk_warn("%s (%s:%d)", dk_last_error(), file, line);
}

dk_status dk_register_device_impl(dk_op *op, dk_key key, dk_fnptr fn, const char *name, dk_handle *out)
{
    if (!op) return dk_error(DK_EINVAL, "dk_register_device_impl: op is NULL");
    if (!dk_key_is_backend(key))
        return dk_error(DK_EINVAL, "%s: device kernels go to backend keys; %s is not one", op->name, dk_key_name(key));
    if (!fn) return dk_error(DK_EINVAL, "%s: kernel for %s is NULL", op->name, dk_key_name(key));
    return dk_op_register(op, key, dk_kernel_unboxed(fn, name), out);
}

/* op's argument list in dk_<op>_signature()'s spelling ("TENSOR input;TENSOR_OUT output;...").
 * Returns false when buf is too small. */
static bool dk__live_signature(const dk_op *op, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < op->nargs; i++) {
        const dk_arg_info *a = &op->args[i];
        const char *kind = "?";
        switch (a->kind) {
        case DK_ARG_TENSOR: kind = a->out ? "TENSOR_OUT" : "TENSOR"; break;
        case DK_ARG_OPT_TENSOR: kind = a->out ? "OPT_TENSOR_OUT" : "OPT_TENSOR"; break;
        case DK_ARG_INT: kind = "INT"; break;
        case DK_ARG_FLOAT: kind = "FLOAT"; break;
        case DK_ARG_BOOL: kind = "BOOL"; break;
        case DK_ARG_STR: kind = "STR"; break;
        case DK_ARG_INT_LIST: kind = "INT_LIST"; break;
        }
        int w = snprintf(buf + used, cap - used, "%s %s;", kind, a->name);
        if (w < 0 || (size_t)w >= cap - used) return false;
        used += (size_t)w;
    }
    return true;
}

dk_status dk__register_device_impl_at(unsigned abi, dk_op *op, const char *signature, dk_key key, dk_fnptr fn,
                                      const char *name, dk_handle *out)
{
    if (abi != DK_ABI_VERSION)
        return dk_error(DK_EABI, "%s: kernel '%s' was built for dkit ABI %u, this dkit has ABI %u", op ? op->name : "?",
                        name ? name : "?", abi, DK_ABI_VERSION);
    if (!op) return dk_error(DK_EINVAL, "dk_register_device_impl: op is NULL");
    char live[2048];
    if (!signature || !dk__live_signature(op, live, sizeof live) || strcmp(signature, live) != 0)
        return dk_error(DK_EABI,
                        "%s: kernel '%s' was compiled against another argument list of the op; rebuild the "
                        "backend against this dkit's headers (built: %s; this dkit: %s)",
                        op->name, name ? name : "?", signature ? signature : "(none)", live);
    return dk_register_device_impl(op, key, fn, name, out);
}

static dk_status dk__lookup_error(const dk_op *op, dk_key k, const dk_tensor *t)
{
    dk_table_entry e[DK_NUM_KEYS];
    int n = dk_op_table(op, e, DK_NUM_KEYS);
    char have[512], dev[64];
    size_t used = 0;
    have[0] = '\0';
    /* Lowest key first reads naturally: "cpu, cuda". */
    for (int i = (n < DK_NUM_KEYS ? n : DK_NUM_KEYS) - 1; i >= 0 && used < sizeof have; i--) {
        if (!dk_key_is_backend(e[i].key) ||
            !(e[i].provenance == DK_PROV_KERNEL || e[i].provenance == DK_PROV_COMPOSITE))
            continue;
        used += (size_t)snprintf(have + used, sizeof have - used, "%s%s", used ? ", " : "", dk_key_name(e[i].key));
    }
    if (k == DK_KEY_UNDEFINED) {
        dk_device_str(t->device, dev, sizeof dev);
        return dk_error(DK_ENOTIMPL,
                        "%s: no kernel for device %s, which no loaded dkit backend serves (registered: %s)", op->name,
                        dev, used ? have : "none");
    }
    return dk_error(DK_ENOTIMPL, "%s: no kernel for device %s (registered: %s)", op->name, dk_key_name(k),
                    used ? have : "none");
}

dk_fnptr dk__device_impl_lookup(const dk_op *op, const dk_tensor *const *tensors, const char *const *names, int n)
{
    dk__device_check dc = {0, NULL, NULL, NULL, NULL};
    for (int i = 0; i < n; i++) dk__collect(&dc, tensors[i], names[i]);
    if (!dc.first) {
        dk_error(DK_EINVAL, "%s: DK_DISPATCH_DEVICE_IMPL needs at least one tensor argument", op->name);
        return op->error_stub;
    }
    /* A bad tensor other than the first is on another device, or on one no backend serves; a
     * bad first tensor (unserved device) gets the lookup error below, which lists the kernels. */
    if (dc.bad && dc.bad != dc.first) {
        dk__op_device_error(op, &dc);
        return op->error_stub;
    }
    dk_key k = dk__key_of_device_type((int32_t)dc.first->device.device_type);
    dk_slot slot = {0};
    dk_keyset m;
    if (k != DK_KEY_UNDEFINED) dk__op_select(op, DK_KEYSET(k), &slot, &m);
    if (!slot.unboxed) {
        dk__lookup_error(op, k, dc.first);
        return op->error_stub;
    }
    return slot.unboxed;
}
