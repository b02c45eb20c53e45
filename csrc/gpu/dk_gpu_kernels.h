/*
 * dk_gpu_kernels.h — the GPU kernels of this library, each registered from its own file.
 *
 * Note [GPU kernels register themselves]
 * A CPU kernel registers from its own file with DK_REGISTER_DEVICE_IMPL, a constructor that runs
 * when libdkit loads, because the CPU's dispatch key is fixed. A GPU backend's key is handed out
 * when the backend registers (dk_backend_register, in its entry point: Note [No GPU call at load
 * time] in dk_gpu_backend.cu), so its kernels cannot register at load time. Each kernel file
 * instead adds an entry to this library's list with DK_GPU_KERNEL(op, fn) (a static
 * initializer), and the entry point registers every entry under the key it got. No table
 * elsewhere lists the kernels: a new op's GPU kernel is declared in its own file and nowhere
 * else. The entry's typed pointer checks the kernel's signature against the op's when it
 * compiles. Under the tests' host emulation the list is filled and never read: those tests call
 * the kernels directly.
 */
#ifndef DK_GPU_KERNELS_H
#define DK_GPU_KERNELS_H

#include "dk_gpu.h"
#include "dk_registry.h"

typedef struct dk_gpu_kernel {
    dk_op *op;
    dk_fnptr fn;
    const char *name; /* "dk_<op>_cuda": what dkit.dispatch.table() shows */
    struct dk_gpu_kernel *next;
} dk_gpu_kernel;

/* The list, newest first (dk_gpu_kernels.cu). */
extern dk_gpu_kernel *dk_gpu_kernel_list;
int dk_gpu_kernel_add(dk_gpu_kernel *k);

/* At file scope, once per op: `fn` (of the op's type, dk_<op>_fn) becomes op's kernel on this
 * backend when the backend loads. */
#define DK_GPU_KERNEL(op, fn)                                                                \
    static const dk_##op##_fn dk__gpu_typed_##op = (fn);                                     \
    static dk_gpu_kernel dk__gpu_kernel_##op = {&dk_##op##_op, (dk_fnptr)dk__gpu_typed_##op, \
                                                "dk_" #op "_" DK_GPU_BACKEND_NAME, nullptr}; \
    [[maybe_unused]] static const int dk__gpu_kernel_added_##op = dk_gpu_kernel_add(&dk__gpu_kernel_##op)

#endif /* DK_GPU_KERNELS_H */
