/*
 * dk_gpu_emu.h — runs dkit's CUDA/HIP kernels on the host, for tests only (C++17, g++).
 *
 * Note [Emulating a GPU on the host]
 * The tests' build compiles the kernel and launcher sources of csrc/gpu/ with the host C++
 * compiler, unchanged, with DK_GPU_EMULATE defined and this header forced in first (-include
 * dk_gpu_emu.h, csrc/gpu/rules.mk), where csrc/gpu/dk_gpu.h expects it. A launch runs the
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
 * Warp shuffles and votes (Note [Emulated warps]) are barriers of one warp. Not emulated: dynamic
 * shared memory, streams (every call is synchronous), cooperative groups. ROCm's HIP-CPU
 * implements the same idea in full for C++17; this is the small part dkit needs, written for it.
 *
 * Note [Emulated warps]
 * The threads of a block form warps of dk_emu_warp_size consecutive threads (32, CUDA's; a test
 * sets 64 to run a kernel as gfx9's wavefronts). A shuffle (__shfl_sync, __shfl_up_sync,
 * __shfl_down_sync, __shfl_xor_sync) or a vote (__ballot_sync, __any_sync, __all_sync) stores
 * the lane's value and waits, like a barrier, until every lane of its warp that has not finished
 * has stored one; then each lane reads its source lane's value. Each fiber therefore waits for
 * one of two things, and the scheduler resumes it only when that has happened: its warp at a
 * shuffle, or the whole block at __syncthreads. Values live in two generations of slots, so a
 * lane that runs ahead to the warp's next shuffle cannot overwrite a value a slower lane has yet
 * to read. Only full warps (mask 0xffffffff) are emulated, as dkit's kernels use no other; a
 * warp whose lanes disagree (one at a barrier, one at a shuffle, or one finished while the others
 * shuffle) is a kernel bug that a GPU would hang on or leave undefined: the emulation stops the
 * test with a message instead.
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

/* What a fiber waits for (Note [Emulated warps]). */
enum dk_emu_wait { DK_EMU_RUN, DK_EMU_AT_BARRIER, DK_EMU_AT_SHUFFLE, DK_EMU_DONE };

/* The block being run: its fibers and the scheduler's jump buffer. */
struct dk_emu_fiber {
    ucontext_t ctx; /* to start it */
    jmp_buf jb;     /* to resume it at its barrier */
    bool started, done;
    dk_emu_wait wait;
    unsigned shuffles; /* shuffles passed: the generation of its next one */
};
struct dk_emu_block {
    jmp_buf sched;
    ucontext_t sched_ctx;
    std::vector<dk_emu_fiber> fibers;
    std::vector<uint64_t> slots[2]; /* a value per thread, per shuffle generation */
    int current = -1;
};
inline thread_local dk_emu_block *dk_emu_current_block = nullptr;
/* Note [Emulated warps]: 32 lanes, or DK_EMU_WARP=64 in the environment (gfx9's wavefronts) */
inline int dk_emu_warp_from_env()
{
    const char *w = getenv("DK_EMU_WARP");
    return w && !strcmp(w, "64") ? 64 : 32;
}
inline thread_local int dk_emu_warp_size = dk_emu_warp_from_env();
#define warpSize dk_emu_warp_size

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

/* Back to the scheduler, waiting for `why`; it resumes this fiber once that has happened. */
__attribute__((noinline)) inline void dk_emu_wait_for(dk_emu_block *b, dk_emu_wait why)
{
    b->fibers[(size_t)b->current].wait = why;
    if (_setjmp(b->fibers[(size_t)b->current].jb) == 0) _longjmp(b->sched, 1);
}

/* A barrier of the whole block. */
inline void __syncthreads()
{
    dk_emu_block *b = dk_emu_current_block;
    if (b) dk_emu_wait_for(b, DK_EMU_AT_BARRIER); /* outside a launch: nothing to wait for */
}

/* Stores this lane's bits, waits for its warp, and returns the bits of lane `src` of the warp
 * (a lane outside [0, warp size) reads its own, as a GPU does for lanes past the width). */
inline uint64_t dk_emu_exchange(uint64_t bits, int src)
{
    dk_emu_block *b = dk_emu_current_block;
    if (!b) return bits;
    const size_t t = (size_t)b->current;
    dk_emu_fiber *f = &b->fibers[t];
    std::vector<uint64_t> &slot = b->slots[f->shuffles & 1];
    slot[t] = bits;
    dk_emu_wait_for(b, DK_EMU_AT_SHUFFLE);
    f = &b->fibers[t];
    f->shuffles++;
    const size_t base = t - t % (size_t)dk_emu_warp_size;
    if (src < 0 || src >= dk_emu_warp_size || base + (size_t)src >= b->fibers.size()) return bits;
    return slot[base + (size_t)src];
}

template <class T> inline T dk_emu_shuffle(T v, int src)
{
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffles move 32- and 64-bit values");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = dk_emu_exchange(bits, src);
    T out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

inline int dk_emu_lane() { return (int)(threadIdx.x % (unsigned)dk_emu_warp_size); }
/* The segment of `width` lanes this lane belongs to starts at lane ... */
inline int dk_emu_segment(int width) { return dk_emu_lane() / width * width; }

template <class T> inline T __shfl_sync(unsigned, T v, int src, int width = dk_emu_warp_size)
{
    return dk_emu_shuffle(v, dk_emu_segment(width) + ((src % width) + width) % width);
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = dk_emu_warp_size)
{
    const int l = dk_emu_lane(), seg = dk_emu_segment(width);
    return dk_emu_shuffle(v, l - seg + (int)delta < width ? l + (int)delta : l);
}
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned delta, int width = dk_emu_warp_size)
{
    const int l = dk_emu_lane(), seg = dk_emu_segment(width);
    return dk_emu_shuffle(v, l - (int)delta >= seg ? l - (int)delta : l);
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int mask, int width = dk_emu_warp_size)
{
    const int l = dk_emu_lane(), seg = dk_emu_segment(width), s = l ^ mask;
    return dk_emu_shuffle(v, s >= seg && s < seg + width ? s : l);
}

/* A bit per lane whose predicate is true (64 lanes at most: gfx9's wavefronts). */
inline unsigned long long __ballot_sync(unsigned, int pred)
{
    unsigned long long bits = 0;
    for (int src = 0; src < dk_emu_warp_size; src++) {
        /* each round of the exchange is one shuffle of the warp: the predicate of lane src */
        if (dk_emu_shuffle<int>(pred != 0, src)) bits |= 1ull << src;
    }
    return bits;
}
inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0; }
inline int __all_sync(unsigned m, int pred)
{
    dk_emu_block *b = dk_emu_current_block;
    const size_t base = b ? (size_t)b->current - (size_t)b->current % (size_t)dk_emu_warp_size : 0;
    size_t lanes = b ? b->fibers.size() - base : 1;
    if (lanes > (size_t)dk_emu_warp_size) lanes = (size_t)dk_emu_warp_size;
    const unsigned long long all = lanes >= 64 ? ~0ull : (1ull << lanes) - 1;
    return __ballot_sync(m, pred) == all;
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
inline unsigned long long atomicOr(unsigned long long *p, unsigned long long v)
{
    const unsigned long long old = *p;
    *p = old | v;
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
    f->wait = DK_EMU_RUN;
    f->shuffles = 0;
}

/* Ends the waits that are over: a warp whose unfinished lanes are all at a shuffle, then the
 * block's barrier once every unfinished fiber is at it. Returns false when every fiber has
 * finished; stops the test when fibers wait on each other for ever. */
inline bool dk_emu_release(dk_emu_block *b)
{
    const size_t n = b->fibers.size(), w = (size_t)dk_emu_warp_size;
    bool any_left = false, at_barrier_only = true;
    for (size_t base = 0; base < n; base += w) {
        size_t shuffling = 0, left = 0;
        for (size_t t = base; t < base + w && t < n; t++) {
            const dk_emu_wait s = b->fibers[t].wait;
            if (s == DK_EMU_DONE) continue;
            left++;
            shuffling += s == DK_EMU_AT_SHUFFLE;
        }
        if (shuffling && shuffling != left) {
            fprintf(stderr,
                    "dk_gpu_emu: warp %zu: lanes at a shuffle while others are at a barrier or finished "
                    "(Note [Emulated warps])\n",
                    base / w);
            abort(); /* tests only: a kernel bug a GPU would hang on */
        }
        if (shuffling) {
            for (size_t t = base; t < base + w && t < n; t++)
                if (b->fibers[t].wait == DK_EMU_AT_SHUFFLE) b->fibers[t].wait = DK_EMU_RUN;
            at_barrier_only = false;
        }
        any_left |= left != 0;
    }
    if (!any_left) return false;
    if (at_barrier_only)
        for (size_t t = 0; t < n; t++)
            if (b->fibers[t].wait == DK_EMU_AT_BARRIER) b->fibers[t].wait = DK_EMU_RUN;
    return true;
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
    b.slots[0].resize(nthreads);
    b.slots[1].resize(nthreads);
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
                /* Rounds: every fiber free to run runs to its next wait or its end; then the
                 * waits that are over end (Note [Emulated warps]). */
                for (;;) {
                    for (size_t t = 0; t < nthreads; t++) {
                        if (b.fibers[t].wait != DK_EMU_RUN) continue;
                        threadIdx = dk_emu_dim3((unsigned)(t % block.x), (unsigned)(t / block.x % block.y),
                                                (unsigned)(t / ((size_t)block.x * block.y)));
                        b.current = (int)t;
                        dk_emu_resume(&b, t);
                        if (b.fibers[t].done) b.fibers[t].wait = DK_EMU_DONE;
                    }
                    if (!dk_emu_release(&b)) break;
                }
            }
    dk_emu_current_block = saved_block;
    dk_emu_body = saved_body;
}

#define DK_GPU_LAUNCH(kernel, grid, block, stream, ...) \
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
