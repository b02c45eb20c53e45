/*
 * box_iou/box_iou_cpu.h — what the parts of the CPU box_iou kernel share (ops/box_iou.h).
 *
 *   box_iou_cpu.c        entry point, scratch, threads, dtype switch, registration (start here)
 *   box_iou_rows_tmpl.h  a span of one row against the transposed boxes2, one kind at a time,
 *                        for the compiler to vectorise (compute pass)
 *   box_iou_tmpl.h       boxes2 into SoA scratch, and the workers over blocks of rows, for float
 *                        and integer storage
 *
 * Note [Rows against columns]
 * torchvision computes box_iou as a dozen tensor expressions over [N, M] and [N, M, 2]
 * temporaries: every pair is written to memory and read back several times. Here each pair is
 * computed once, in registers, from kernels/box_iou_math.h: boxes2 is transposed once into arrays
 * (x1, y1, x2, y2 in the compute type, SoA, and complete IoU's per-box atan), so that the inner
 * loop over a row's columns reads unit-stride streams and writes one, and the compiler vectorises it (the kind is a
 * constant in each instantiation of the loop, so its branches fold away). Threads take blocks of
 * rows (dk_parallel), and within a block the columns go in blocks whose SoA slice (4 x 1024
 * floats, 16 KiB) stays in L1 while every row of the block reads it. Results go straight into
 * the output row when it is unit-stride and of the compute type; otherwise through a per-thread
 * buffer of one column block, converted and scattered with the output's strides. (Non-temporal
 * stores, which roi_align uses for large outputs, made a fresh 64 MB output 10-15% slower here:
 * the pages are faulted in, and cleared, by the first store either way.) Each output
 * element is computed by one thread from the same inputs, so the bits do not depend on the
 * number of threads.
 */
#ifndef DK_BOX_IOU_CPU_H
#define DK_BOX_IOU_CPU_H

#include "dk_vec.h"
#include <stdbool.h>
#include <stdint.h>

#include "dk_arena.h"
#include "dk_parallel.h"
#include "box_iou.h" /* ops/box_iou.h */

/*
 * Note [AVX2 spans]
 * dkit builds for x86-64-v2 (SSE4.2: 4 floats a vector), and the span loop is compute-bound (a
 * 4,000 x 4,000 box_iou writes its 64 MB in about a third of the time it computes). So the span
 * is compiled twice, for the baseline and for AVX2 (8 floats; GCC's target attribute), and a
 * call takes the AVX2 one when the CPU has AVX2 (__builtin_cpu_supports): 1.4-1.5x faster
 * (box_iou 4,000 x 4,000 on one thread: 25 -> 17 ms). Both give the same bits: "avx2" does not
 * include FMA, and ISO C mode contracts nothing, so both run the same IEEE operations in the same
 * order, only more at once. The tunable "box_iou.isa" (0: baseline, 1: AVX2 where the CPU has
 * it) lets the kernel tests run both. Other compilers and platforms get the baseline alone.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DK__BOX_IOU_AVX2 1
#else
#define DK__BOX_IOU_AVX2 0
#endif

/*
 * Note [Streaming rows]
 * A 4,000 x 4,000 result is 64 MB that no cache holds, so writing it costs memory traffic more
 * than arithmetic. With plain stores every line is read before it is written (64 MB in, 64 MB
 * out); streaming (non-temporal) stores only write. Measured on this 2-core host, box_iou
 * 4,000 x 4,000 float32, dkit.ops (a fresh output per call) / into an output written before:
 *   1 thread,  plain stores      15.4-17.8 ms / 11.5-11.6 ms
 *   1 thread,  streaming stores  19.3-19.7 ms / 14.1-14.4 ms
 *   2 threads, plain stores      13.6-19.8 ms /  5.2-9.6 ms
 *   2 threads, streaming stores  10.3-11.8 ms /  6.3-7.1 ms
 * One thread is faster with plain stores: a fresh page is zeroed by the kernel at its first
 * touch and its lines are still in cache when the rows overwrite them, and one core's streaming
 * stores drain slower than its plain ones. Two threads share the memory bus, where the reads of
 * plain stores cost the most. So rows stream when several threads write a large fresh output
 * (at least large_output.min_bytes, not yet faulted in: dk_large_output.h), each row's column
 * block computed into the thread's buffer first (L1-resident), then copied out 16 bytes at a
 * time. An output already in memory (the usual case since large torch outputs come from the host
 * output cache, Note [Host output cache] in dk_host_cache.h) takes plain stores on any number of
 * threads: measured here, one thread 11.3 ms plain against 17.0 ms streaming, two threads 5.95
 * against 8.0 ms (a 1.90x speed-up plain). The tunable box_iou.stream (-1: this rule, 0: never,
 * 1: whenever the rows are aligned) lets the kernel tests run both ways.
 */

/* Columns per block (Note [Rows against columns]). */
#define DK__BOX_IOU_COLS 1024

/* One call. */
typedef struct {
    int64_t n, m;
    int kind, narrow, aligned, w32;
    bool avx2;   /* Note [AVX2 spans] */
    bool stream; /* rows through the buffer, to out with streaming stores (Note [Streaming rows]) */
    double eps, offset;
    const dk_tensor *boxes1;
    char *out;        /* out's first element */
    int64_t os0, os1; /* out's strides in elements (os1 unused when aligned) */
    dk_dtype odt;
    const void *soa; /* boxes2: x1[m], y1[m], x2[m], y2[m] (, aspect[m]) in the compute type (int64: integers) */
    void *buf;       /* per-thread column-block buffers of the compute type, DK__BOX_IOU_COLS each */
    int64_t rows;    /* rows per task */
    int64_t tasks;
    dk_parallel_counter counter;
} dk__box_iou_ctx;

#endif /* DK_BOX_IOU_CPU_H */
