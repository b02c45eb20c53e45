/*
 * dk_gpu_emu.h — runs dkit's CUDA/HIP kernels on the host, for tests only (C++17, g++).
 *
 * Note [Emulating a GPU on the host]
 * gpu/dk_gpu.h includes this header when DK_GPU_EMULATE is defined, and the kernel and launcher
 * sources of csrc/cuda/ then compile with the host C++ compiler, unchanged. A launch runs the
 * grid's blocks one after another on the calling thread; within a block, each GPU thread is a
 * fiber with a stack of its own (ucontext). __syncthreads() switches back to the block's
 * scheduler, which resumes the next fiber; once every fiber of the block has reached the
 * barrier (or finished), a new round starts. So a kernel sees exactly the guarantees a GPU gives
 * (shared memory written before a barrier is visible after it, in every thread of the block) and
 * no more: no ordering between threads except at barriers, and a bug that relies on one (a
 * missing barrier) shows up as a wrong result, since fibers run in thread order between
 * barriers, never interleaved (a GPU would often hide it).
 * __shared__ is `static`: the fibers of a block share the one OS thread and blocks run in turn,
 * so a function-local static is block-shared memory. Atomics are plain read-modify-writes: only
 * one fiber runs at a time. Built-ins (blockIdx, threadIdx, blockDim, gridDim) are thread_local
 * variables that the scheduler sets before it resumes a fiber.
 * Not emulated (no dkit kernel uses them yet): warp shuffles and votes, dynamic shared memory,
 * streams (every call is synchronous), cooperative groups. ROCm's HIP-CPU implements the same
 * idea in full for C++17; this is the small part dkit needs, written for it.
 */
#ifndef DK_GPU_EMU_H
#define DK_GPU_EMU_H

#ifndef __cplusplus
#error "dk_gpu_emu.h is C++: the kernels it runs are CUDA/HIP C++"
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csetjmp>
#include <ucontext.h>
#include <vector>

struct dk_emu_dim3 {
    unsigned x, y, z;
    dk_emu_dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dk_emu_dim3 dim3;

inline thread_local dk_emu_dim3 blockIdx, threadIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

/* The block being run: its fibers and the scheduler's jump buffer. */
struct dk_emu_fiber {
    ucontext_t ctx; /* to start it */
    jmp_buf jb;     /* to resume it at its barrier */
    bool started, done;
};
struct dk_emu_block {
    jmp_buf sched;
    ucontext_t sched_ctx;
    std::vector<dk_emu_fiber> fibers;
    int current = -1;
};
inline thread_local dk_emu_block *dk_emu_current_block = nullptr;

/*
 * Switching. A fiber starts with swapcontext (once per fiber and block), and every later switch
 * is _setjmp/_longjmp, which unlike swapcontext saves no signal mask: two system calls less per
 * switch, the emulation's main cost in kernels with a barrier in a loop. A fiber never returns
 * from its function: it jumps back to the scheduler, so no stale context is ever resumed. These
 * functions return twice; kept out of line, they cannot clobber their callers' variables.
 */
__attribute__((noinline)) inline void dk_emu_resume(dk_emu_block *b, size_t t)
{
    dk_emu_fiber *f = &b->fibers[t];
    if (_setjmp(b->sched) == 0) {
        if (!f->started) {
            f->started = true;
            swapcontext(&b->sched_ctx, &f->ctx); /* returns only through b->sched */
        } else {
            _longjmp(f->jb, 1);
        }
    }
}

/* A barrier: back to the scheduler, which resumes this fiber in the next round. */
__attribute__((noinline)) inline void __syncthreads()
{
    dk_emu_block *b = dk_emu_current_block;
    if (!b) return; /* not inside a launch */
    if (_setjmp(b->fibers[(size_t)b->current].jb) == 0) _longjmp(b->sched, 1);
}

inline float atomicAdd(float *p, float v)
{
    const float old = *p;
    *p = old + v;
    return old;
}
inline double atomicAdd(double *p, double v)
{
    const double old = *p;
    *p = old + v;
    return old;
}
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    const unsigned long long old = *p;
    *p = old + v;
    return old;
}
inline int atomicAdd(int *p, int v)
{
    const int old = *p;
    *p = old + v;
    return old;
}

/* makecontext passes ints: the body's address goes through a thread_local. */
struct dk_emu_body_base {
    virtual void run() = 0;
    virtual ~dk_emu_body_base() {}
};
inline thread_local dk_emu_body_base *dk_emu_body = nullptr;

inline void dk_emu_fiber_main()
{
    dk_emu_block *b = dk_emu_current_block;
    dk_emu_body->run();
    b->fibers[(size_t)b->current].done = true;
    _longjmp(b->sched, 1);
}

/* getcontext returns twice too: out of line for the same reason. */
__attribute__((noinline)) inline void dk_emu_make_fiber(dk_emu_fiber *f, char *stack, size_t bytes)
{
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = stack;
    f->ctx.uc_stack.ss_size = bytes;
    f->ctx.uc_link = nullptr; /* fibers never return (dk_emu_fiber_main) */
    makecontext(&f->ctx, dk_emu_fiber_main, 0);
    f->started = f->done = false;
}

template <class F> struct dk_emu_body_of : dk_emu_body_base {
    F f;
    explicit dk_emu_body_of(F f_) : f(f_) {}
    void run() override { f(); }
};

/* Runs `f` (a call of the kernel) as grid x block GPU threads. 1-d and 2-d grids suffice for
 * dkit's kernels; z is honoured too. */
template <class F> void dk_emu_launch(dk_emu_dim3 grid, dk_emu_dim3 block, F f)
{
    const size_t nthreads = (size_t)block.x * block.y * block.z;
    const size_t stack_bytes = 64 * 1024;
    /* Fiber stacks, kept from launch to launch: allocating (and faulting in) megabytes for every
     * launch would dominate the tests' time. Never freed: a test process is short-lived. */
    static thread_local char *stacks = nullptr;
    static thread_local size_t stacks_for = 0;
    if (stacks_for < nthreads) {
        free(stacks);
        stacks = (char *)malloc(nthreads * stack_bytes);
        if (!stacks) {
            fprintf(stderr, "dk_gpu_emu: out of memory for %zu fiber stacks\n", nthreads);
            abort(); /* tests only: a test that cannot run must not pass */
        }
        stacks_for = nthreads;
    }
    dk_emu_body_of<F> body(f);
    dk_emu_block b;
    b.fibers.resize(nthreads);
    dk_emu_block *saved_block = dk_emu_current_block;
    dk_emu_body_base *saved_body = dk_emu_body;
    dk_emu_current_block = &b;
    dk_emu_body = &body;
    gridDim = grid;
    blockDim = block;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = dk_emu_dim3(bx, by, bz);
                for (size_t t = 0; t < nthreads; t++) {
                    dk_emu_make_fiber(&b.fibers[t], stacks + t * stack_bytes, stack_bytes);
                }
                /* Rounds: every unfinished fiber runs to its next barrier or its end. */
                for (bool alive = true; alive;) {
                    alive = false;
                    for (size_t t = 0; t < nthreads; t++) {
                        if (b.fibers[t].done) continue;
                        threadIdx = dk_emu_dim3((unsigned)(t % block.x), (unsigned)(t / block.x % block.y),
                                                (unsigned)(t / ((size_t)block.x * block.y)));
                        b.current = (int)t;
                        dk_emu_resume(&b, t);
                        if (!b.fibers[t].done) alive = true;
                    }
                }
            }
    dk_emu_current_block = saved_block;
    dk_emu_body = saved_body;
}

#define DK_GPU_LAUNCH(kernel, grid, block, stream, ...)                                         \
    dk_emu_launch(dk_emu_dim3(grid), dk_emu_dim3(block), [&]() { kernel(__VA_ARGS__); })

/* The runtime calls the launchers make, on host memory, synchronously. */
typedef int dkgError_t;
typedef void *dkgStream_t;
#define dkgSuccess 0
inline dkgError_t dkgGetLastError(void) { return 0; }
inline const char *dkgGetErrorString(dkgError_t e) { return e ? "emulated error" : "no error"; }
inline dkgError_t dkgMemsetAsync(void *p, int v, size_t n, dkgStream_t s)
{
    (void)s;
    if (n) memset(p, v, n);
    return 0;
}

#endif /* DK_GPU_EMU_H */
