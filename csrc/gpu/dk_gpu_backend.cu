/*
 * dk_gpu_backend.cu — the CUDA backend (nvcc: libdkit_cuda.so) and the HIP backend (hipcc: the
 * same file, libdkit_hip.so): their backend object (dk_backend.h) and the entry point that
 * registers it and every GPU kernel (dk_backend_library.h; the kernels are declared by their own
 * files: Note [GPU kernels register themselves] in dk_gpu_kernels.h). Note [One source for CUDA and HIP]
 * in csrc/gpu/dk_gpu.h says how one file serves both.
 *
 * Note [No GPU call at load time]
 * Loading the library runs only the entry point, which registers a static object and function
 * pointers: no runtime call. The runtime (its driver, its devices) is first touched when someone
 * asks for it: available(), device_count(), or a kernel on a tensor of this device type, and
 * such a tensor cannot exist without a driver. So `import dkit` costs no driver initialisation
 * (hundreds of ms with CUDA, and a hard failure on some broken installs), and works on machines
 * without one, where dkit.backends() says why the backend is unavailable.
 * What does run at load is the toolchain's own: the constructor that nvcc and hipcc emit to
 * register the library's kernels with the runtime (__cudaRegisterFatBinary with the static
 * CUDA runtime, __hipRegisterFatBinary in libamdhip64). Neither opens the driver; both were
 * checked here without one (libdkit_cuda.so loads and reports "no CUDA driver", libdkit_hip.so
 * "no HIP device"). The CUDA runtime is linked statically (nvcc's default), so the library needs
 * nothing of CUDA's installed but the driver, and only when used; the HIP one needs
 * libamdhip64 to load at all (Debian: libamdhip64-5), else dkit warns and goes on without it.
 */
#include "dk_backend_library.h"
#include "dk_gpu.h"
#include "dk_gpu_kernels.h"
#include "dk_gpu_status.h"

#include <stdio.h>

#ifndef DK_GPU_ARCHS
#define DK_GPU_ARCHS "unknown architectures" /* the Makefile passes the list it built for */
#endif

/* What this library was built for, for dkit.backends() and dkit.show_config(), which look it up
 * by name in the library (the backend object has no field for it: it is not the core's
 * business, and vendor backends describe themselves differently). */
extern "C" DK_API const char *dk_gpu_archs(void);
extern "C" DK_API const char *dk_gpu_archs(void) { return DK_GPU_ARCHS; }

static dk_status dk__gpu_available(void *ctx, char *why, size_t n)
{
    (void)ctx;
    int count = 0;
    const dkgError_t e = dkgGetDeviceCount(&count);
    if (e == dkgSuccess && count > 0) return DK_OK;
    if (e == dkgErrorInsufficientDriver) {
        int version = 0;
        /* a driver that is present but older than the runtime also answers "insufficient" */
        if (dkgDriverGetVersion(&version) == dkgSuccess && version > 0)
            snprintf(why, n, "the %s driver (version %d) is older than the runtime dkit was built with",
                     DK_GPU_RUNTIME_NAME, version);
        else snprintf(why, n, "%s", DK_GPU_NO_DRIVER);
    } else if (e == dkgErrorNoDevice || (e == dkgSuccess && count == 0)) {
        snprintf(why, n, "no %s device", DK_GPU_RUNTIME_NAME);
    } else {
        snprintf(why, n, "%s error %d: %s", DK_GPU_RUNTIME_NAME, (int)e, dkgGetErrorString(e));
    }
    (void)dkgGetLastError(); /* the runtime keeps the failure as its sticky "last error": clear it */
    return DK_ENOTIMPL;
}

static int dk__gpu_device_count(void *ctx)
{
    (void)ctx;
    int count = 0;
    if (dkgGetDeviceCount(&count) != dkgSuccess) {
        (void)dkgGetLastError();
        return 0;
    }
    return count;
}

static dk_status dk__gpu_get_device(void *ctx, int32_t *device)
{
    (void)ctx;
    int d = 0;
    dk_status st = dk__gpu_status(dkgGetDevice(&d), DK_GPU_BACKEND_NAME ": get_device");
    *device = d;
    return st;
}

static dk_status dk__gpu_set_device(void *ctx, int32_t device)
{
    (void)ctx;
    return dk__gpu_status(dkgSetDevice(device), DK_GPU_BACKEND_NAME ": set_device");
}

static dk_status dk__gpu_synchronize(void *ctx, int32_t device, void *stream)
{
    (void)ctx, (void)device;
    return dk__gpu_status(dkgStreamSynchronize((dkgStream_t)stream), DK_GPU_BACKEND_NAME ": synchronize");
}

/* Stream-ordered: the memory may be used by work queued on `stream` after this call, and goes
 * back to the pool once the work queued before dk__gpu_free has run, without a synchronisation
 * (cudaMallocAsync's pool, as PyTorch's caching allocator does it for its own tensors). */
static dk_status dk__gpu_alloc(void *ctx, int32_t device, size_t bytes, void *stream, void **out)
{
    (void)ctx, (void)device;
    *out = NULL;
    const dk_status st = dk__gpu_status(dkgMallocAsync(out, bytes ? bytes : 1, (dkgStream_t)stream),
                                        DK_GPU_BACKEND_NAME ": alloc");
    if (st) *out = NULL;
    return st;
}

static void dk__gpu_free(void *ctx, int32_t device, void *ptr, void *stream)
{
    (void)ctx, (void)device;
    if (ptr && dkgFreeAsync(ptr, (dkgStream_t)stream) != dkgSuccess) (void)dkgGetLastError();
}

static dk_status dk__gpu_copy(void *ctx, int32_t device, void *dst, const void *src, size_t bytes, dk_copy_kind kind,
                              void *stream)
{
    (void)ctx, (void)device;
    if (!bytes) return DK_OK;
    const auto k = kind == DK_COPY_HOST_TO_DEVICE   ? dkgMemcpyHostToDevice
                   : kind == DK_COPY_DEVICE_TO_HOST ? dkgMemcpyDeviceToHost
                                                    : dkgMemcpyDeviceToDevice;
    return dk__gpu_status(dkgMemcpyAsync(dst, src, bytes, k, (dkgStream_t)stream), DK_GPU_BACKEND_NAME ": copy");
}

static const dk_backend dk__gpu_backend = {
    DK_ABI_VERSION,      DK_GPU_BACKEND_NAME,  DK_GPU_DEVICE_TYPE, NULL,
    dk__gpu_available,   dk__gpu_device_count, dk__gpu_get_device, dk__gpu_set_device,
    dk__gpu_synchronize, dk__gpu_alloc,        dk__gpu_free,       dk__gpu_copy,
};

/* The backend object, then every GPU kernel of this library (Note [No GPU call at load time];
 * Note [GPU kernels register themselves] in dk_gpu_kernels.h: each kernel file declared its own).
 * batched_nms and MMCV's nms are composites over nms: they need nothing. */
static dk_status dk__gpu_init(void)
{
    dk_key key;
    dk_status st = dk_backend_register(&dk__gpu_backend, &key);
    for (const dk_gpu_kernel *k = dk_gpu_kernel_list; !st && k; k = k->next)
        st = dk_register_device_impl(k->op, key, k->fn, k->name, NULL);
    return st;
}

#if defined(__HIPCC__)
DK_BACKEND_ENTRY(hip) { return dk__gpu_init(); }
#else
DK_BACKEND_ENTRY(cuda) { return dk__gpu_init(); }
#endif
