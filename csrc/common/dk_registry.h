/*
 * dk_registry.h — the device registry: MMCV's REGISTER_DEVICE_IMPL / DISPATCH_DEVICE_IMPL in C.
 *
 * Per op, a table of typed function pointers indexed by device kind. It is not a second table:
 * a device-registry entry is the op's dispatcher kernel at that backend key, so the full
 * dispatcher (dk_<op>(...)) and this direct path always agree. DK_DISPATCH_DEVICE_IMPL skips the
 * functionality keys, thread-local sets and the op's check: it is the MMCV-style fast path for
 * code that already validated its arguments (e.g. a composite calling a sibling op).
 *
 *     DK_REGISTER_DEVICE_IMPL(roi_align_forward, CPU, dk_roi_align_forward_cpu);
 *     dk_status st = DK_DISPATCH_DEVICE_IMPL(roi_align_forward, input, rois, output, ...);
 */
#ifndef DK_REGISTRY_H
#define DK_REGISTRY_H

#include "dk_dispatch.h"
#include "dk_op.h"
#include "dk_pp.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Note [Registration at load time]
 * The registration runs from a constructor, so a kernel file needs no init call. The linker
 * keeps every .init_array entry (KEEP in the default scripts), so --gc-sections cannot drop it
 * or the kernel it names. What a linker can drop is a whole archive member nobody references:
 * link kernel archives with -Wl,--whole-archive (as MMCV's users do), or as objects. Both are
 * tested (tests/c/test_static_link.*).
 */
#define DK_REGISTER_DEVICE_IMPL(op, DEV, fn)                                                                         \
    DK__CONSTRUCTOR(DK__CAT(dk__register_##op##_##DEV##_, __LINE__))                                                 \
    {                                                                                                                \
        dk_##op##_fn dk__typed = (fn); /* a signature mismatch fails to compile here */                              \
        dk__register_device_impl(DK_ABI_VERSION, &dk_##op##_op, DK_KEY_OF_##DEV, (dk_fnptr)dk__typed, #fn, __FILE__, \
                                 __LINE__);                                                                          \
    }

/*
 * Note [Schemas are checked at registration]
 * A backend library is compiled against one version of dkit's headers and may be loaded into
 * another. Struct layouts and calling conventions are covered by DK_ABI_VERSION (dk_export.h); an
 * op's argument list is not: dkit may add an argument to an op without changing any layout. A typed
 * kernel compiled against the old list would then be called with the new one and read garbage.
 * So a vendor registers typed kernels with DK_REGISTER_DEVICE_IMPL_AT, which
 *   - checks the kernel's C type against the op's typed signature at compile time, and
 *   - passes the argument list the vendor's headers declared (dk_<op>_signature(), kinds and
 *     names) to the core, which compares it with the running op's list and refuses a difference
 *     with DK_EABI, naming the op and both lists ("rebuild the backend against this dkit").
 * Inside an entry point the refusal fails the load (Note [A failed load leaves nothing behind]),
 * and dkit.backends() lists the backend as unavailable with that reason. A renamed argument is a
 * difference too: names are how boxed callers and the schema string address arguments. Boxed
 * kernels read op->args at run time and need no such check. dk_register_device_impl (below) is
 * the unchecked form, for callers that were compiled with the core (tests, in-tree code).
 */
#define DK_REGISTER_DEVICE_IMPL_AT(op, key, fn, out)                                         \
    dk__register_device_impl_at(DK_ABI_VERSION, &dk_##op##_op, dk_##op##_signature(), (key), \
                                (dk_fnptr)(dk_##op##_fn){(fn)}, #fn, (out))

/* Same, for a key known only at run time (a vendor slot); returns the handle. Unchecked: prefer
 * DK_REGISTER_DEVICE_IMPL_AT outside dkit's own build. */
DK_API dk_status dk_register_device_impl(dk_op *op, dk_key key, dk_fnptr fn, const char *name, dk_handle *out);

/* Expression of type dk_status. Ints, floats and other non-tensors are skipped by _Generic. */
#define DK_DISPATCH_DEVICE_IMPL(op, ...)                                                    \
    ((dk_##op##_fn)dk__device_impl_find(                                                    \
        &dk_##op##_op, (const dk_tensor *const[]){DK__FOREACH(DK__AS_TENSOR, __VA_ARGS__)}, \
        (const char *const[]){DK__FOREACH(DK__STR_I, __VA_ARGS__)}, DK__NARG(__VA_ARGS__)))(__VA_ARGS__)

#ifdef __cplusplus
#define DK__AS_TENSOR(x) dk__as_tensor(x)
#else
/* clang-format 14 reads _Generic's `type: value` pairs as bit-fields. */
// clang-format off
#define DK__AS_TENSOR(x)                                                                      \
    _Generic((x), dk_tensor *: (x), const dk_tensor *: (x), default: (const dk_tensor *)0)
// clang-format on
#endif

/* Internals of the macros above. */
DK_API void dk__register_device_impl(unsigned abi, dk_op *op, dk_key key, dk_fnptr fn, const char *name,
                                     const char *file, int line);
DK_API dk_status dk__register_device_impl_at(unsigned abi, dk_op *op, const char *signature, dk_key key, dk_fnptr fn,
                                             const char *name, dk_handle *out);
/* Returns the kernel for the tensors' common device, or op->error_stub with the error set. */
DK_API dk_fnptr dk__device_impl_lookup(const dk_op *op, const dk_tensor *const *tensors, const char *const *names,
                                       int n);

/*
 * Inlined into each DK_DISPATCH_DEVICE_IMPL: `n` and the NULL entries (non-tensor arguments) are
 * compile-time constants there, so the loop folds to one device comparison per tensor. The common
 * case (one device, served, a typed kernel present, tracing off) reads one slot; everything else,
 * including every error, goes to dk__device_impl_lookup.
 */
static inline dk_fnptr dk__device_impl_find(const dk_op *op, const dk_tensor *const *tensors, const char *const *names,
                                            int n)
{
    const dk_tensor *first = NULL;
    uint64_t dev = 0;
    bool mixed = false;
    for (int i = 0; i < n; i++)
        if (tensors[i]) dk__same_device(&first, &dev, &mixed, tensors[i]);
    if (DK_LIKELY(first != NULL && !mixed)) {
        dk_keyset ks = dk__keyset_of_device_type((int32_t)first->device.device_type);
        dk_fnptr fn = ks ? dk__op_select_unboxed(op, ks) : NULL;
        if (DK_LIKELY(fn != NULL)) return fn;
    }
    return dk__device_impl_lookup(op, tensors, names, n);
}

#ifdef __cplusplus
}
static inline const dk_tensor *dk__as_tensor(const dk_tensor *t) { return t; }
template <typename T> static inline const dk_tensor *dk__as_tensor(T) { return nullptr; }
#endif
#endif /* DK_REGISTRY_H */
