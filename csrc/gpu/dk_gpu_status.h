/*
 * dk_gpu_status.h — a runtime error (CUDA's, HIP's) as a dk_status with the runtime's message,
 * for the backend object and the launchers alike.
 */
#ifndef DK_GPU_STATUS_H
#define DK_GPU_STATUS_H

#include "dk_backend.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "dk_gpu.h"

static inline dk_status dk__gpu_status(dkgError_t e, const char *what)
{
    if (e == dkgSuccess) return DK_OK;
    return dk_error(DK_ERUNTIME, "%s: %s error %d: %s", what, DK_GPU_BACKEND_NAME, (int)e, dkgGetErrorString(e));
}

/* After a launch: a bad configuration or an earlier asynchronous fault shows up here. */
static inline dk_status dk__gpu_launched(const char *op) { return dk__gpu_status(dkgGetLastError(), op); }

/* A kernel's refusal of a dtype it has no instantiation for (the op's check lets through only
 * dtypes some backend serves). */
static inline dk_status dk__gpu_unsupported(const char *op, const dk_tensor *t)
{
    char got[64];
    return dk_error(DK_ETYPE, "%s: unsupported dtype %s", op, dk_dl_dtype_str(t->dtype, got, sizeof got));
}

/* Makes the tensors' device current for a kernel (dk_device_guard_enter). When that fails
 * because the backend cannot run at all (no driver, no device), the error says so, naming the
 * backend and the reason, rather than repeating the runtime's code for it; availability is
 * asked only then, so a working call pays nothing for it. */
static inline dk_status dk__gpu_enter(dk_device_guard *g, DLDevice device)
{
    const dk_status st = dk_device_guard_enter(g, device);
    if (st && dk_device_available(device) != DK_OK) return dk_last_status();
    return st;
}

#endif /* DK_GPU_STATUS_H */
