/*
 * dk_backend.h — the backend object: what a kind of device gives the core and its kernels.
 *
 * Every backend key that serves tensors (cpu, cuda, hip, a vendor's) has one dk_backend: its
 * name and DLPack device type, whether it can run now and why not, its devices, and the
 * device-side services a kernel needs that are not kernels themselves: synchronisation, scratch
 * memory, copies between host and device, and making a device current. The CPU backend
 * implements it trivially (csrc/cpu/dk_cpu_backend.c); GPU and vendor backends implement it
 * fully and register it from their library's entry point (dk_backend_library.h).
 *
 * Note [The current stream]
 * A kernel finds its stream as PyTorch's and MMCV's kernels do: the calling thread's current
 * stream for the tensors' device, dk_current_stream(device), which is NULL (the device's default
 * stream) unless the caller set one with dk_set_current_stream. It is not an op argument, for
 * three reasons: an op's signature is device-neutral and generated from one argument list
 * (schemas, boxed stacks, the Python binding, the torch bridge would all carry a parameter that
 * CPU kernels ignore); a caller sets it once around any number of calls (the Python layer does,
 * from torch's current stream or the DLPack consumer stream); and it composes like a guard
 * (set, call, restore). The core keeps it per thread and per device, so backends need no
 * thread-local state of their own.
 *
 * Every function of a dk_backend may be NULL where it makes no sense (the CPU has no streams);
 * the dk_device_* helpers below then do the obvious thing or report that it is unsupported.
 */
#ifndef DK_BACKEND_H
#define DK_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dk_dlpack.h"
#include "dk_export.h"
#include "dk_keys.h"
#include "dk_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DK_COPY_HOST_TO_DEVICE,
    DK_COPY_DEVICE_TO_HOST,
    DK_COPY_DEVICE_TO_DEVICE,
} dk_copy_kind;

typedef struct dk_backend {
    uint32_t abi;        /* DK_ABI_VERSION, the layout of this struct */
    const char *name;    /* "cpu", "cuda", "hip", or a vendor's name (its dispatch key's name) */
    int32_t device_type; /* the DLPack device type of its tensors (kDLCPU, kDLCUDA, kDLExtDev, ...) */
    void *ctx;           /* handed back to every function below */

    /* DK_OK when kernels can run now. Otherwise an error status, with the reason written into
     * why[0..n) (e.g. "no CUDA driver"). Called lazily, never at load time. */
    dk_status (*available)(void *ctx, char *why, size_t n);
    /* Devices of this kind present now; 0 when unavailable. */
    int (*device_count)(void *ctx);
    /* The calling thread's current device, and making `device` current (the device guard). */
    dk_status (*get_device)(void *ctx, int32_t *device);
    dk_status (*set_device)(void *ctx, int32_t device);
    /* Waits for all work queued on `stream` (NULL: the device's default stream). */
    dk_status (*synchronize)(void *ctx, int32_t device, void *stream);
    /* Scratch memory for a kernel, usable in stream order on `stream`; freed on the same
     * stream. *out is never NULL on DK_OK, even for 0 bytes. */
    dk_status (*alloc)(void *ctx, int32_t device, size_t bytes, void *stream, void **out);
    void (*free)(void *ctx, int32_t device, void *ptr, void *stream);
    /* `bytes` from src to dst in stream order on `stream`; `device` is the device side. */
    dk_status (*copy)(void *ctx, int32_t device, void *dst, const void *src, size_t bytes, dk_copy_kind kind,
                      void *stream);
} dk_backend;

/*
 * Registers a backend object for its device type; the object must outlive the process (static
 * storage). The built-in names cpu, cuda and hip take their built-in keys (the device type must
 * be theirs); any other name claims a vendor key (dk_backend_key_register). Registering the same
 * object again is a no-op; another object for a key that has one is DK_EINVAL.
 */
DK_API dk_status dk_backend_register(const dk_backend *b, dk_key *out);

/* The object registered for a key or a device, or NULL. Lock-free. */
DK_API const dk_backend *dk_backend_of_key(dk_key key);
DK_API const dk_backend *dk_backend_of_device(DLDevice device);

/* DK_OK when the device's backend can run kernels; otherwise the reason, as an error. */
DK_API dk_status dk_device_available(DLDevice device);

/* The calling thread's current stream for `device` (Note [The current stream]); NULL is the
 * device's default stream. dk_set_current_stream returns the previous one, to restore. */
DK_API void *dk_current_stream(DLDevice device);
DK_API dk_status dk_set_current_stream(DLDevice device, void *stream, void **previous);

/* Device services, in the current stream of `device`, through its backend object. */
DK_API dk_status dk_device_alloc(DLDevice device, size_t bytes, void **out);
DK_API void dk_device_free(DLDevice device, void *ptr);
DK_API dk_status dk_device_copy(DLDevice device, void *dst, const void *src, size_t bytes, dk_copy_kind kind);
DK_API dk_status dk_device_synchronize(DLDevice device);

/* Makes a tensor's device current for a scope, and restores the previous one. */
typedef struct {
    const dk_backend *backend;
    int32_t previous;
    bool switched;
} dk_device_guard;
DK_API dk_status dk_device_guard_enter(dk_device_guard *g, DLDevice device);
DK_API void dk_device_guard_exit(dk_device_guard *g);

/* The backends the core knows, in registration order: the built-in CPU backend first, then
 * backend libraries (dk_backend_library.h) and objects registered by them. */
typedef struct {
    const char *name;
    const char *path;          /* the library it came from; NULL when built into libdkit */
    dk_key key;                /* DK_KEY_UNDEFINED for a library that registered no key */
    const dk_backend *backend; /* NULL for a library that registered no backend object */
} dk_backend_info;

DK_API int dk_backend_count(void);
DK_API dk_backend_info dk_backend_at(int i);

#ifdef __cplusplus
}
#endif
#endif /* DK_BACKEND_H */
