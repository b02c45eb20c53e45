/*
 * bench/bench_dispatch.c — what one call through each dkit layer costs.
 *
 * A trivial op, bench_nop(Tensor a, Tensor(a!) out, int n), whose CPU kernel writes one value,
 * is called through four paths:
 *
 *   (a) direct     the kernel itself, through a volatile function pointer
 *   (b) registry   DK_DISPATCH_DEVICE_IMPL(bench_nop, ...): MMCV-style device lookup, no checks
 *   (c) unboxed    the typed entry dk_bench_nop(...): device check, the aliasing check of its
 *                  output (Note [Aliasing] in dk_check.h), the op's check, TLS sets, seqlock
 *                  table read, call
 *   (c0) unboxed, no output: the typed entry of bench_read(Tensor a, int n), the same kernel
 *                  work on a counter, so (c0) - (a) is dispatch alone and (c) - (c0) the
 *                  aliasing check of one output
 *   (d) boxed      dk_op_call_boxed(&dk_bench_nop_op, &stack), the stack built on every call
 *
 * Note [Fair calls]
 * The kernel and the typed entry live in this file, so the compiler could inline them into the
 * loop and measure nothing. (a) and (c) therefore call through a volatile function pointer,
 * reloaded every iteration; (b) and (d) cross into libdkit (an exported, not inlinable
 * function) and reach the kernel through a pointer read from the op's table. Every path ends
 * in exactly one indirect call of the same kernel, so "minus (a)" is the dispatch cost alone.
 *
 * Modes:
 *   bench_dispatch                          timing table: median (and min) ns/call of each path
 *   bench_dispatch --iters N --reps R       same, with N calls per repetition, R repetitions
 *   bench_dispatch --variant V --iters N    run one path N times, print nothing but a checksum;
 *                                           V is a, b, c, d or empty (the bare loop). Used by
 *                                           bench/callgrind.sh to count instructions per call.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dkit.h"

/* ------------------------------------------------------------------------------------------ */
/* The op                                                                                     */

#define DK_BENCH_NOP_ARGS(X) \
    X(TENSOR, a)             \
    X(TENSOR_OUT, out)       \
    X(INT, n)

DK_DECLARE_OP(bench_nop, DK_BENCH_NOP_ARGS)

DK_DEFINE_OP(bench_nop, DK_BENCH_NOP_ARGS)
{
    /* Nothing to validate: the bench measures dispatch, not checks. */
    (void)a;
    (void)out;
    (void)n;
    return DK_OK;
}

/* One store, so the call has an observable effect and cannot be dropped. */
static dk_status bench_nop_cpu(const dk_tensor *a, dk_tensor *out, int64_t n)
{
    (void)a;
    ((int64_t *)out->data)[0] = n;
    return DK_OK;
}

DK_REGISTER_DEVICE_IMPL(bench_nop, CPU, bench_nop_cpu)

/* The same op without an output, for (c0): its entry runs no aliasing check. */
#define DK_BENCH_READ_ARGS(X) \
    X(TENSOR, a)              \
    X(INT, n)

DK_DECLARE_OP(bench_read, DK_BENCH_READ_ARGS)

DK_DEFINE_OP(bench_read, DK_BENCH_READ_ARGS)
{
    (void)a;
    (void)n;
    return DK_OK;
}

static int64_t bench_read_sink;
static dk_status bench_read_cpu(const dk_tensor *a, int64_t n)
{
    (void)a;
    bench_read_sink = n;
    return DK_OK;
}

DK_REGISTER_DEVICE_IMPL(bench_read, CPU, bench_read_cpu)

/* ------------------------------------------------------------------------------------------ */
/* The four paths. Each loop sums statuses so a failing path shows up (the sum must be 0).    */

static dk_bench_nop_fn volatile bench_kernel_ptr = bench_nop_cpu;
static dk_bench_nop_fn volatile bench_entry_ptr = dk_bench_nop;
static dk_bench_read_fn volatile bench_read_entry_ptr = dk_bench_read;

__attribute__((noinline)) static unsigned run_empty(const dk_tensor *a, dk_tensor *out, uint64_t iters)
{
    unsigned bad = 0;
    for (uint64_t i = 0; i < iters; i++) {
        /* Keeps the loop (and its counter) alive without calling anything. */
        __asm__ volatile("" : : "r"(a), "r"(out), "r"(i) : "memory");
    }
    return bad;
}

__attribute__((noinline)) static unsigned run_direct(const dk_tensor *a, dk_tensor *out, uint64_t iters)
{
    unsigned bad = 0;
    for (uint64_t i = 0; i < iters; i++) bad += (unsigned)bench_kernel_ptr(a, out, (int64_t)i);
    return bad;
}

__attribute__((noinline)) static unsigned run_registry(const dk_tensor *a, dk_tensor *out, uint64_t iters)
{
    unsigned bad = 0;
    for (uint64_t i = 0; i < iters; i++) bad += (unsigned)DK_DISPATCH_DEVICE_IMPL(bench_nop, a, out, (int64_t)i);
    return bad;
}

__attribute__((noinline)) static unsigned run_unboxed(const dk_tensor *a, dk_tensor *out, uint64_t iters)
{
    unsigned bad = 0;
    for (uint64_t i = 0; i < iters; i++) bad += (unsigned)bench_entry_ptr(a, out, (int64_t)i);
    return bad;
}

__attribute__((noinline)) static unsigned run_unboxed_no_output(const dk_tensor *a, dk_tensor *out, uint64_t iters)
{
    unsigned bad = 0;
    (void)out;
    for (uint64_t i = 0; i < iters; i++) bad += (unsigned)bench_read_entry_ptr(a, (int64_t)i);
    return bad;
}

/* Built with dk_stack_push, as an outside caller (the Python binding) does. */
__attribute__((noinline)) static unsigned run_boxed(const dk_tensor *a, dk_tensor *out, uint64_t iters)
{
    unsigned bad = 0;
    for (uint64_t i = 0; i < iters; i++) {
        dk_stack s;
        dk_stack_init(&s);
        dk_stack_push(&s, dk_value_tensor((dk_tensor *)a));
        dk_stack_push(&s, dk_value_tensor(out));
        dk_stack_push(&s, dk_value_int((int64_t)i));
        bad += (unsigned)dk_op_call_boxed(&dk_bench_nop_op, &s);
    }
    return bad;
}

typedef unsigned (*bench_run_fn)(const dk_tensor *, dk_tensor *, uint64_t);

typedef struct {
    const char *id;
    const char *label;
    bench_run_fn run;
} bench_variant;

static const bench_variant bench_variants[] = {
    {"a", "(a) direct call (volatile fn ptr)", run_direct},
    {"b", "(b) DK_DISPATCH_DEVICE_IMPL", run_registry},
    {"c0", "(c0) typed entry, op without output", run_unboxed_no_output},
    {"c", "(c) typed entry dk_bench_nop()", run_unboxed},
    {"d", "(d) dk_op_call_boxed, stack per call", run_boxed},
};
enum { BENCH_NVARIANTS = (int)DK_COUNTOF(bench_variants) };

/* ------------------------------------------------------------------------------------------ */
/* Timing                                                                                     */

static double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int bench_cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define BENCH_MAX_REPS 101

static int bench_table(const dk_tensor *a, dk_tensor *out, uint64_t iters, int reps)
{
    static double ns[BENCH_NVARIANTS][BENCH_MAX_REPS];
    double med[BENCH_NVARIANTS], min[BENCH_NVARIANTS];

    /* Warm up caches, branch predictors and lazy PLT binding; check every path works. */
    for (int v = 0; v < BENCH_NVARIANTS; v++) {
        if (bench_variants[v].run(a, out, 100000) != 0) {
            fprintf(stderr, "bench_dispatch: %s failed: %s\n", bench_variants[v].label, dk_last_error());
            return 1;
        }
    }
    /* Repetitions outermost, so a burst of noise from a neighbour hits every path alike. */
    for (int r = 0; r < reps; r++) {
        for (int v = 0; v < BENCH_NVARIANTS; v++) {
            double t0 = bench_now_ns();
            unsigned bad = bench_variants[v].run(a, out, iters);
            double t1 = bench_now_ns();
            if (bad) {
                fprintf(stderr, "bench_dispatch: %s failed: %s\n", bench_variants[v].label, dk_last_error());
                return 1;
            }
            ns[v][r] = (t1 - t0) / (double)iters;
        }
    }
    for (int v = 0; v < BENCH_NVARIANTS; v++) {
        med[v] = bench_median(ns[v], reps);
        min[v] = ns[v][0]; /* sorted by bench_median */
    }

    printf("dkit dispatch overhead: bench_nop(Tensor a, Tensor(a!) out, int n), CPU kernel writes one int64\n");
    printf("%" PRIu64 " calls x %d repetitions, CLOCK_MONOTONIC; ns/call is the median over repetitions\n\n", iters,
           reps);
    printf("%-40s %9s %9s %9s %11s\n", "path", "ns/call", "min", "x (a)", "- (a) ns");
    for (int v = 0; v < BENCH_NVARIANTS; v++)
        printf("%-40s %9.2f %9.2f %9.2f %+11.2f\n", bench_variants[v].label, med[v], min[v], med[v] / med[0],
               med[v] - med[0]);
    printf("\ntargets: (c) - (a) <= 10 ns: %s (%.2f ns);  (d) - (a) <= 50 ns: %s (%.2f ns)\n",
           med[2] - med[0] <= 10.0 ? "met" : "MISSED", med[2] - med[0], med[3] - med[0] <= 50.0 ? "met" : "MISSED",
           med[3] - med[0]);
    printf("instructions per call: make bench-callgrind\n");
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

static int bench_usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--iters N] [--reps R]\n"
            "       %s --variant a|b|c|d|empty --iters N   (one path, for callgrind)\n",
            argv0, argv0);
    return 2;
}

static int bench_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s) return 1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || s[0] == '-') return 1;
    *out = (uint64_t)v;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t iters = 10000000, reps = 7;
    const char *variant = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            if (bench_parse_u64(argv[++i], &iters)) return bench_usage(argv[0]);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            if (bench_parse_u64(argv[++i], &reps) || reps < 1 || reps > BENCH_MAX_REPS) return bench_usage(argv[0]);
        } else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
            variant = argv[++i];
        } else {
            return bench_usage(argv[0]);
        }
    }

    int64_t shape[1] = {1}, a_val = 0, out_val = 0;
    dk_tensor a = {0}, out = {0};
    a.data = &a_val;
    out.data = &out_val;
    a.device.device_type = out.device.device_type = kDLCPU;
    a.ndim = out.ndim = 1;
    a.shape = out.shape = shape;
    a.dtype = out.dtype = dk_dtype_to_dl(DK_INT64);

    if (!variant) return bench_table(&a, &out, iters, (int)reps);

    /* One path only: callgrind counts every instruction of the process, so this mode does the
     * same start-up work for any N and callgrind.sh subtracts an N = 0 run. */
    bench_run_fn run = NULL;
    if (strcmp(variant, "empty") == 0) run = run_empty;
    for (int v = 0; v < BENCH_NVARIANTS && !run; v++)
        if (strcmp(variant, bench_variants[v].id) == 0) run = bench_variants[v].run;
    if (!run) return bench_usage(argv[0]);
    unsigned bad = run(&a, &out, iters);
    if (bad) {
        fprintf(stderr, "bench_dispatch: variant %s failed: %s\n", variant, dk_last_error());
        return 1;
    }
    printf("variant %s: %" PRIu64 " calls, last value written %" PRId64 "\n", variant, iters, out_val);
    return 0;
}
