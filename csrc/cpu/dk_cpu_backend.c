/*
 * dk_cpu_backend.c — the CPU's backend object (dk_backend.h): always available, one device, no
 * streams, host memory. Registered by dk_init.
 */
#include <stdlib.h>
#include <string.h>

#include "dk_backend_private.h"

static int dk__cpu_device_count(void *ctx)
{
    (void)ctx;
    return 1;
}

/* Cache-line aligned, like the CPU runtime's arena (dk_arena.h). */
static dk_status dk__cpu_alloc(void *ctx, int32_t device, size_t bytes, void *stream, void **out)
{
    (void)ctx, (void)device, (void)stream;
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n < bytes) return dk_error(DK_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
    *out = aligned_alloc(64, n ? n : 64);
    return *out ? DK_OK : dk_error(DK_ENOMEM, "cpu: out of memory allocating %zu bytes", bytes);
}

static void dk__cpu_free(void *ctx, int32_t device, void *ptr, void *stream)
{
    (void)ctx, (void)device, (void)stream;
    free(ptr);
}

static dk_status dk__cpu_copy(void *ctx, int32_t device, void *dst, const void *src, size_t bytes, dk_copy_kind kind,
                              void *stream)
{
    (void)ctx, (void)device, (void)kind, (void)stream;
    if (bytes) memmove(dst, src, bytes);
    return DK_OK;
}

const dk_backend dk__cpu_backend = {
    .abi = DK_ABI_VERSION,
    .name = "cpu",
    .device_type = kDLCPU,
    .device_count = dk__cpu_device_count,
    .alloc = dk__cpu_alloc,
    .free = dk__cpu_free,
    .copy = dk__cpu_copy,
};
