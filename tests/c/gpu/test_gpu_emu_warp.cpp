/*
 * test_gpu_emu_warp.cpp — the emulation's warps (Note [Emulated warps] in tests/c/dk_gpu_emu.h)
 * against what CUDA and HIP define for shuffles and votes, through dkit's portable spellings
 * (Note [Warp shuffles] in csrc/gpu/dk_gpu.h), at warp sizes 32 (NVIDIA) and 64 (gfx9). Emulation
 * only: these kernels are the test's own, not dkit's.
 */
#include <assert.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include <cmocka.h>
}

#include "dk_gpu.h"

/* Each thread: the sum of its warp's values by a shfl_down tree (lane 0 holds it), broadcast
 * back with a shuffle from lane 0. */
__global__ void warp_sum(const int64_t *in, int64_t *out)
{
    const unsigned t = threadIdx.x + blockIdx.x * blockDim.x;
    int64_t v = in[t];
    for (int d = warpSize / 2; d > 0; d /= 2) v += DK_GPU_SHFL_DOWN(v, d);
    out[t] = DK_GPU_SHFL(v, 0);
}

/* The maximum of the warp by an xor butterfly: every lane ends with it. */
__global__ void warp_max(const double *in, double *out)
{
    const unsigned t = threadIdx.x;
    double v = in[t];
    for (int m = warpSize / 2; m > 0; m /= 2) {
        const double o = DK_GPU_SHFL_XOR(v, m);
        v = o > v ? o : v;
    }
    out[t] = v;
}

/* Votes, and shuffles between barriers: each warp shuffles a different number of times (its
 * index + 1) between two barriers of the block, and reads shared memory written before them. */
__global__ void mixed(const int *in, unsigned long long *ballots, int *out)
{
    __shared__ int total[1];
    const unsigned t = threadIdx.x, w = t / (unsigned)warpSize;
    if (t == 0) total[0] = 0;
    __syncthreads();
    int v = in[t];
    for (unsigned k = 0; k <= w; k++) v = DK_GPU_SHFL(v, (DK_GPU_LANE() + 1) % warpSize); /* rotate */
    atomicAdd(&total[0], in[t]);
    __syncthreads();
    const unsigned long long even = DK_GPU_BALLOT(in[t] % 2 == 0); /* every lane votes */
    if (DK_GPU_LANE() == 0) ballots[w] = even;
    assert(__any_sync(0xffffffffu, 1) && !__any_sync(0xffffffffu, 0) && __all_sync(0xffffffffu, 1));
    out[t] = v * 1000 + (int)(total[0] == 0);
    if (t == 0) out[blockDim.x] = total[0];
}

/* A lane that leaves early while its warp shuffles is a kernel bug; an early exit of a whole
 * warp is fine: the other warps go on shuffling and meet at the barrier without it. */
__global__ void warp_exits(int *out)
{
    const unsigned t = threadIdx.x;
    if (t / (unsigned)warpSize == 1) return;
    int v = (int)t;
    v = DK_GPU_SHFL_DOWN(v, 1);
    __syncthreads();
    out[t] = v;
}

/* Half a warp shuffles while the other half waits at the block's barrier: a GPU would hang. */
__global__ void diverged(int *out)
{
    const unsigned t = threadIdx.x;
    if (t % 32 < 16) out[t] = DK_GPU_SHFL_DOWN((int)t, 1);
    __syncthreads();
}

static void test_warp_sum_and_broadcast(void **state)
{
    (void)state;
    for (int warp : {32, 64}) {
        dk_emu_warp_size = warp;
        const int threads = 128, blocks = 3, n = threads * blocks;
        int64_t in[n], out[n];
        for (int i = 0; i < n; i++) in[i] = (int64_t)i * i - 1000000007LL * (i % 3); /* 64-bit values */
        DK_GPU_LAUNCH(warp_sum, blocks, threads, nullptr, in, out);
        for (int i = 0; i < n; i++) {
            int64_t expect = 0;
            for (int j = i / warp * warp; j < i / warp * warp + warp; j++) expect += in[j];
            assert_int_equal(out[i], expect);
        }
    }
    dk_emu_warp_size = 32;
}

static void test_xor_butterfly_max(void **state)
{
    (void)state;
    for (int warp : {32, 64}) {
        dk_emu_warp_size = warp;
        double in[192], out[192];
        for (int i = 0; i < 192; i++) in[i] = (double)((i * 37) % 101) - 50.5;
        DK_GPU_LAUNCH(warp_max, 1, 192, nullptr, in, out);
        for (int i = 0; i < 192; i++) {
            double expect = in[i / warp * warp];
            for (int j = i / warp * warp; j < i / warp * warp + warp; j++) expect = in[j] > expect ? in[j] : expect;
            assert_true(out[i] == expect);
        }
    }
    dk_emu_warp_size = 32;
}

static void test_votes_and_shuffles_between_barriers(void **state)
{
    (void)state;
    for (int warp : {32, 64}) {
        dk_emu_warp_size = warp;
        const int threads = 256, warps = threads / warp;
        int in[threads], out[threads + 1];
        unsigned long long ballots[8] = {0};
        int sum = 0;
        for (int i = 0; i < threads; i++) sum += in[i] = (i * 7 + 3) % 11;
        DK_GPU_LAUNCH(mixed, 1, threads, nullptr, in, ballots, out);
        assert_int_equal(out[threads], sum);
        for (int i = 0; i < threads; i++) {
            const int w = i / warp, lane = i % warp;
            const int src = w * warp + (lane + w + 1) % warp; /* rotated w + 1 times */
            assert_int_equal(out[i], in[src] * 1000);         /* and the total was complete: not 0 */
        }
        for (int w = 0; w < warps; w++) {
            unsigned long long expect = 0;
            for (int l = 0; l < warp; l++)
                if (in[w * warp + l] % 2 == 0) expect |= 1ull << l;
            assert_true(ballots[w] == expect);
        }
    }
    dk_emu_warp_size = 32;
}

static void test_a_whole_warp_may_exit(void **state)
{
    (void)state;
    int out[96];
    for (int i = 0; i < 96; i++) out[i] = -1;
    DK_GPU_LAUNCH(warp_exits, 1, 96, nullptr, out);
    for (int i = 0; i < 96; i++) {
        if (i / 32 == 1) assert_int_equal(out[i], -1);
        else assert_int_equal(out[i], i % 32 == 31 ? i : i + 1); /* the last lane reads its own */
    }
}

static void test_a_diverged_warp_stops_the_test(void **state)
{
    (void)state;
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2); /* the emulation's message is expected */
        int out[32];
        DK_GPU_LAUNCH(diverged, 1, 32, nullptr, out);
        _exit(0); /* not stopped: the parent fails the test */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warp_sum_and_broadcast),
        cmocka_unit_test(test_xor_butterfly_max),
        cmocka_unit_test(test_votes_and_shuffles_between_barriers),
        cmocka_unit_test(test_a_whole_warp_may_exit),
        cmocka_unit_test(test_a_diverged_warp_stops_the_test),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
