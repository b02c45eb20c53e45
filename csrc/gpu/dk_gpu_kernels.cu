/*
 * dk_gpu_kernels.cu — the list the kernel files of this library add themselves to (Note [GPU
 * kernels register themselves] in dk_gpu_kernels.h). Zero-initialised, so it is empty before any
 * file's initializer runs, whatever their order.
 */
#include "dk_gpu_kernels.h"

dk_gpu_kernel *dk_gpu_kernel_list;

int dk_gpu_kernel_add(dk_gpu_kernel *k)
{
    k->next = dk_gpu_kernel_list;
    dk_gpu_kernel_list = k;
    return 0;
}
