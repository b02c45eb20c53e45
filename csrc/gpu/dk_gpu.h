/*
 * dk_gpu.h — the one header through which dkit's GPU code (csrc/gpu/) speaks to CUDA, HIP,
 * or the host emulation of the tests, so that every kernel and launcher is written once.
 *
 * Note [One source for CUDA and HIP]
 * The kernels and the backend object are written once, in the .cu files of csrc/gpu/, against the names
 * below: dkg* for the runtime API (dkgMallocAsync is cudaMallocAsync or hipMallocAsync), the
 * usual CUDA qualifiers and built-ins (__global__, __shared__, blockIdx, __syncthreads,
 * atomicAdd), which hipcc and the emulation both provide, and DK_GPU_LAUNCH for a launch.
 * nvcc builds them into libdkit_cuda.so, hipcc (-x hip) the same files into libdkit_hip.so,
 * and g++ with DK_GPU_EMULATE (tests only, tests/c/dk_gpu_emu.h) into the tests that run every
 * kernel on the host. There is no hipify step and no copy to keep in step: a name that differs
 * between the runtimes gets one line in each runtime's header, and only there:
 * csrc/cuda/dk_cuda_runtime.h and csrc/hip/dk_hip_runtime.h (which also say how the backend
 * names its runtime in messages, DK_GPU_RUNTIME_NAME and DK_GPU_NO_DRIVER).
 *
 * DK_GPU_BACKEND_NAME is "cuda" or "hip"; DK_GPU_DEVICE_TYPE the DLPack device type of its
 * tensors; DK_GPU_KEY its dispatch key.
 */
#ifndef DK_GPU_H
#define DK_GPU_H

#include <stddef.h>
#include <stdint.h>

#if defined(DK_GPU_EMULATE)
/* The host emulation of the tests (tests/c/dk_gpu_emu.h, Note [Emulating a GPU on the host]),
 * which the tests' build brings in with -include: no header of the library names a test's. */
#ifndef DK_GPU_EMU_H
#error "DK_GPU_EMULATE: build with -include dk_gpu_emu.h (csrc/gpu/rules.mk's EMU_FLAGS)"
#endif
#define DK_GPU_BACKEND_NAME "emu"
#define DK_GPU_DEVICE_TYPE kDLCPU
#define DK_GPU_KEY DK_KEY_CPU
#define DK_GPU_WARP dk_emu_warp_size /* 32, or 64 for a test of gfx9's wavefronts */
/* Note [Warp shuffles]: CUDA's spelling, which the emulation provides (Note [Emulated warps]). */
#define DK_GPU_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src))
#define DK_GPU_SHFL_DOWN(v, delta) __shfl_down_sync(0xffffffffu, (v), (delta))
#define DK_GPU_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define DK_GPU_BALLOT(pred) ((unsigned long long)__ballot_sync(0xffffffffu, (pred)))

#elif defined(__HIPCC__)
#include "dk_hip_runtime.h" /* csrc/hip */

#elif defined(__CUDACC__)
#include "dk_cuda_runtime.h" /* csrc/cuda */

#else
#error "dk_gpu.h is for nvcc, hipcc, or the host emulation of the tests (DK_GPU_EMULATE)"
#endif

#if !defined(DK_GPU_EMULATE)
/* kernel<<<grid, block, 0, stream>>>(args...): hipcc accepts the triple-chevron syntax too. The
 * emulation defines its own DK_GPU_LAUNCH, which runs the blocks on the calling thread. */
#define DK_GPU_LAUNCH(kernel, grid, block, stream, ...) \
    kernel<<<(grid), (block), 0, (dkgStream_t)(stream)>>>(__VA_ARGS__)
#endif

/*
 * Note [Warp shuffles]
 * One spelling for the warp-level exchanges, on every runtime (DK_GPU_SHFL, DK_GPU_SHFL_DOWN,
 * DK_GPU_SHFL_XOR, DK_GPU_BALLOT, defined with each runtime's names above): CUDA's _sync forms
 * with the full mask (the emulation provides them, Note [Emulated warps] in
 * tests/c/dk_gpu_emu.h), HIP's mask-free forms (ROCm 5.2 has no _sync variants; a wavefront
 * always runs converged there).
 * Only whole warps shuffle: every lane of the warp calls them, with the same arguments' shape.
 * Warps are DK_GPU_WARP lanes: 32 on NVIDIA, 64 on gfx9; a kernel that reduces across a warp
 * loops up to warpSize, never a constant, so that both are right. Lanes count from threadIdx.x
 * (1-d blocks).
 */
#define DK_GPU_LANE() ((int)(threadIdx.x % (unsigned)warpSize))

/* Before a loop with a constant trip count whose body indexes a small array by the loop counter:
 * unrolled, the array lives in registers instead of the stack. Nothing for the host emulation. */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define DK_GPU_UNROLL _Pragma("unroll")
#else
#define DK_GPU_UNROLL
#endif

/* Threads per block of dkit's elementwise kernels, and the most blocks a grid-stride launch asks
 * for: enough to fill any current GPU several times over (132 SMs x 2048 threads / 256 = 1056
 * blocks per wave on an H100), and small enough that a grid never exceeds the 2^31 - 1 blocks
 * allowed in x (Note [Grid-stride loops]). */
#define DK_GPU_THREADS 256
#define DK_GPU_MAX_BLOCKS 4096

/*
 * Note [Grid-stride loops]
 * Every elementwise kernel loops `for (i = first; i < n; i += stride)` over a 64-bit i, with
 * first = blockIdx.x * blockDim.x + threadIdx.x and stride = gridDim.x * blockDim.x, and is
 * launched with min(ceil(n / 256), DK_GPU_MAX_BLOCKS) blocks. So the grid stays within every
 * runtime's limits whatever n is, the index never overflows (n < 2^63, since it counts
 * elements of a tensor), and threads do enough work each to amortise their setup. Per-element
 * index arithmetic is 64-bit only where a product of sizes can exceed 2^31 (offsets into
 * tensors); loop counters bounded by the op's checks (bins, samples) stay narrow.
 */
static inline unsigned dk_gpu_blocks(int64_t n)
{
    const int64_t b = (n + DK_GPU_THREADS - 1) / DK_GPU_THREADS;
    return (unsigned)(b < 1 ? 1 : b > DK_GPU_MAX_BLOCKS ? DK_GPU_MAX_BLOCKS : b);
}

#define DK_GPU_FIRST() ((int64_t)blockIdx.x * (int64_t)blockDim.x + (int64_t)threadIdx.x)
#define DK_GPU_STRIDE() ((int64_t)gridDim.x * (int64_t)blockDim.x)

#endif /* DK_GPU_H */
