/*
 * focal_loss/focal_loss_cpu.h — what the CPU focal loss kernels' entry points (focal_loss_cpu.c)
 * and their per-dtype bodies (focal_loss_tmpl.h) share.
 *
 * Note [Focal loss on a CPU]
 * The sigmoid loss is elementwise: tasks are the chunks of Note [A deterministic sum]
 * (kernels/focal_loss_math.h), each walked row segment by row segment in blocks of up to
 * DK__FL_BLOCK elements. A block's inputs are first made contiguous arrays of the compute type
 * (float32 rows with unit stride are read in place; other dtypes and strides are gathered, and
 * class-index targets become a row of 0s with one 1), so that the loop over the block that runs
 * the math is a plain loop over arrays, which GCC vectorises (Note [Focal loss arithmetic]);
 * the results are then stored, or added to the chunk's four lanes. The softmax loss is per row:
 * tasks are chunks of DK_FOCAL_CHUNK_ROWS rows. Reduced, each chunk's sum goes to its slot of
 * `partials`, which are added in order once every thread is done: the same bits for any thread
 * count.
 */
#ifndef DK_FOCAL_LOSS_CPU_H
#define DK_FOCAL_LOSS_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_arena.h"
#include "dk_parallel.h"
#include "dk_tensor.h"
#include "focal_loss.h" /* ops/focal_loss.h */
#include "kernels/focal_loss_math.h"

/* Elements per block of Note [Focal loss on a CPU]: three arrays of it stay in L1. A multiple of
 * the softmax row's lanes (Note [A row in lanes]). */
#define DK__FL_BLOCK 256
_Static_assert(DK__FL_BLOCK % DK_FOCAL_ROW_LANES == 0, "a block keeps column c in lane c % DK_FOCAL_ROW_LANES");

/*
 * Note [Rows together]
 * A softmax row's statistics and loss are one chain of dependent steps: its lanes' maxima, the
 * row's maximum from them, its exps, the lanes' sums and their tree, the log of the total, then
 * the loss's exp, 1 - s and power, each a few cycles' latency, some hundreds of cycles a row in
 * all, for about as many instructions; taken a row at a time, the next row's chain could start
 * only as the core's window reached it. So the CPU takes DK__FL_ROWS rows at a time, step by step:
 * every row's maxima, then every row's maximum, every row's exps and sums, every row's total and
 * log, every row's loss (dk__fl_soft_stats, dk__fl_soft_rows), so that the rows' chains overlap.
 * Each row's values go through the same operations in the same order as before: the same bits,
 * and still those of the GPU's dk_focal_softmax_row (the emulated GPU test compares them bit for
 * bit). Measured on bench_focal_loss.py's MMCV softmax case (100,000 x 80, mean, one thread, an
 * AMD EPYC with AVX-512, Zen 4, 2026-11-29): a script timing forward and backward apart (medians
 * of 9, three runs before and two after) took the forward from 17.9-18.1 to 13.8-14.2 ms and the
 * backward from 15.3 to 11.8-12.1 ms; the bench's training step from 28.5 ms (two runs) to
 * 21.4-21.5 ms, against the torch reference's 18.9-25.0 ms in the same runs. What is left is
 * mostly the exps' loop (some 60% of the forward's samples under perf): each vector's exp is a
 * chain of about 20 dependent operations, which a shorter polynomial scheme would shorten at the
 * price of every backend's bits.
 */
#define DK__FL_ROWS 8

/* The softmax's AVX2 workers (focal_loss_tmpl.h): GCC or Clang on x86-64. */
#if defined(__GNUC__) && defined(__x86_64__)
#define DK__FL_AVX2 1
#else
#define DK__FL_AVX2 0
#endif

/* In focal_loss_tmpl.h: the worker DK_SFN(worker) running DK_SFN(body) as the library is built,
 * and where DK__FL_AVX2 its twin DK_SFN(worker_avx2) built for AVX2: the same source inlined whole
 * into each, the same bits (ISO C: no contraction, and AVX2 without FMA), chosen at run time by
 * cx->avx2 (focal_loss.isa). Functions of their own rather than target clones: a clone's ifunc
 * resolver runs while the library is relocated, before a sanitizer's runtime is ready. */
#define DK__FL_WORKER_AS(worker, body, attr)          \
    attr static void DK_SFN(worker)(void *p, int tid) \
    {                                                 \
        (void)tid;                                    \
        DK_SFN(body)((dk__fl_ctx *)p);                \
    }
#if DK__FL_AVX2
#define DK__FL_WORKERS(worker, body) \
    DK__FL_WORKER_AS(worker, body, ) \
    DK__FL_WORKER_AS(worker##_avx2, body, __attribute__((target("avx2"))))
#else
#define DK__FL_WORKERS(worker, body) DK__FL_WORKER_AS(worker, body, )
#endif

/* One call's tensors and scalars. `out`: output (forward) or grad_input (backward). */
typedef struct {
    const dk_tensor *input, *targets, *weight, *grad_output;
    dk_tensor *out, *grad_targets;
    dk_tensor *fused; /* the forward's grad_input (Note [The backward in the forward] in ops/focal_loss.h) */
    int64_t N, C;
    /* the input's strides and the targets': read per row by the softmax, whose rows cost some
     * hundred operations (dk_tensor_stride is a call into the core) */
    int64_t xs[2], ts;
    double gamma, alpha_pos, alpha_neg, divisor;
    int reduction; /* DK_FOCAL_NONE or DK_FOCAL_SUM */
    int kind;      /* DK_FOCAL_POW_2 or DK_FOCAL_POW_ANY (kernels/focal_loss_math.h) */
    bool classes;  /* int64 class-index targets */
    bool avx2;     /* the softmax's workers built for AVX2 (focal_loss.isa; Note [A row in lanes]) */
    int64_t chunks;
    double *partials; /* reduced: each chunk's sum */
    dk_parallel_counter counter;
} dk__fl_ctx;

/* The class index of row n (any stride). */
static inline int64_t dk__fl_label(const dk__fl_ctx *cx, int64_t n)
{
    return ((const int64_t *)dk_tensor_data(cx->targets))[n * cx->ts];
}

#endif /* DK_FOCAL_LOSS_CPU_H */
