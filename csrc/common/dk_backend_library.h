/*
 * dk_backend_library.h — backends as shared libraries, loaded at run time.
 *
 * A backend library links libdkit and defines one entry point:
 *
 *     DK_BACKEND_ENTRY(myvendor)
 *     {
 *         dk_key key;
 *         dk_status st = dk_backend_register(&myvendor_backend, &key);   // its dk_backend
 *         if (st) return st;
 *         return dk_register_device_impl(&dk_roi_align_forward_op, key, (dk_fnptr)my_kernel,
 *                                        "my_kernel", NULL);
 *     }
 *
 * dk_load_backend(path) dlopens it, checks the ABI version it was built with, and runs the
 * entry. dk_unload_backend(name) undoes what the entry registered; the library itself stays
 * mapped, as its kernels may be in flight on other threads (Note [Unloading a backend] in
 * dk_backend_library.c).
 *
 * Note [A failed load leaves nothing behind]
 * An entry point that fails (returns an error) may already have claimed a key and registered
 * kernels, fallbacks or a backend object. All of it is undone before dk_load_backend returns the
 * error: the registrations made by the loading thread while the entry ran are recorded
 * (Note [Registration journal]) and unregistered, the keys it claimed are released, and its
 * backend object is removed. The library itself stays mapped (code of it may have been handed
 * out), but nothing in dkit refers to it any more.
 */
#ifndef DK_BACKEND_LIBRARY_H
#define DK_BACKEND_LIBRARY_H

#include <stdint.h>

#include "dk_backend.h"
#include "dk_export.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#define DK__EXTERN_C extern "C"
#else
#define DK__EXTERN_C
#endif

#define DK_BACKEND_ENTRY(name)                                                  \
    DK__EXTERN_C DK_API const uint32_t dk_backend_abi_version;                  \
    DK__EXTERN_C DK_API const uint32_t dk_backend_abi_version = DK_ABI_VERSION; \
    DK__EXTERN_C DK_API const char dk_backend_name[];                           \
    DK__EXTERN_C DK_API const char dk_backend_name[] = #name;                   \
    DK__EXTERN_C DK_API dk_status dk_backend_init(void);                        \
    DK__EXTERN_C DK_API dk_status dk_backend_init(void)

/* Errors: DK_ENOENT (no such file, unreadable, or not loadable: dlerror's text), DK_EINVAL (not a
 * well-formed ELF shared object for this machine, refused before dlopen with what is wrong: Note
 * [Refused before dlopen] in dk_backend_library.c; or no dk_backend_abi_version or
 * dk_backend_init: not a dkit backend), DK_EABI (built for another ABI), or whatever the entry
 * returned (Note [A failed load leaves nothing behind]). Loading the same path twice is a no-op.
 * A path without a slash names a file in the current directory (never the library search path). */
DK_API dk_status dk_load_backend(const char *path);

/* Unregisters everything the entry point of the library loaded as backend `name` registered, and
 * releases its backend object and keys: every dispatch table is again what it was before the
 * load. The library stays mapped (Note [Unloading a backend]); loading it again runs its entry
 * again. DK_ENOENT: no library of that name is loaded; DK_EINVAL: a built-in backend. */
DK_API dk_status dk_unload_backend(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* DK_BACKEND_LIBRARY_H */
