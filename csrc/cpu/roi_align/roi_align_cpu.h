/*
 * roi_align/roi_align_cpu.h — what the parts of roi_align's CPU kernel share: one call's sizes,
 * context and parallel job, and the constants of its cost model.
 *
 * The kernel, in reading order:
 *   roi_align_cpu.c            entry points, threads, dtype switch, registration (start here)
 *   roi_align_tables_tmpl.h    per-RoI weight tables (Note [Separable weight tables])
 *   roi_align_eval_tmpl.h      evaluating one RoI on one channel pair, forward and backward
 *   roi_align_planes_tmpl.h    moving channel pairs in and out (Note [Channel pairs])
 *   roi_align_drivers_tmpl.h   the plane loops and their workers, avg and max pooling
 * The per-sample math is kernels/roi_align_math.h, shared with every backend; the machinery that
 * is not about roi_align (scratch arena, parallel loop, large outputs, prefetching, vectors,
 * grouping) is the CPU runtime in csrc/cpu/dk_*.h.
 *
 * Note [Loop order: planes outside, RoIs inside]
 * torchvision loops over RoIs, then channels: each (RoI, channel) pair pulls the RoI's window
 * of a different 200 KB plane from memory, and the core mostly waits on it. Here the parallel
 * loop runs over input planes: a plane stays near the core while every RoI of its image is
 * served from it (Note [RoIs in row order]). What a RoI needs from a plane does not depend on
 * the channel, so it is precomputed once per call and shared by all planes and threads (Note
 * [Separable weight tables]).
 *
 * Note [RoIs in row order]
 * A channel pair's band (2 x 200 x 272 floats = 435 KB in the benchmark) and the weight tables
 * of its image's RoIs (about as much again) do not fit a 512 KB L2 together, and RoIs in index
 * order jump all over the band: cachegrind counted 3.6M L2 misses per call of the benchmark's
 * forward, one per 64-byte line of every band each time it is read. So, per call:
 *  - each image's RoIs are evaluated in the order of the row where they end (the group order,
 *    gr->order, sorted by that row; ties in index order), and their geometry and tables are
 *    stored in that order, by slot (slot j is RoI order[j]): consecutive RoIs read neighbouring
 *    rows and consecutive table entries;
 *  - forward copies one pair's band as its RoIs come to need it (rows up to the last row of the
 *    RoI at hand, tb->yhi), so the rows a RoI reads were mostly copied just before, and are
 *    still in L1 or L2. Whether the copied values are finite is known for every row copied so
 *    far, which covers every row the RoI reads (Note [Non-finite values]).
 * Together, per call of the benchmark's forward (cachegrind, 512 KB L2): L2 misses of the RoI
 * evaluation 3.6M -> 1.1M (the copies' own misses, the input from memory, stay at 3.5M), and
 * the forward about 9% faster on one thread (57-59 ms -> 52-54 ms in quiet moments of this
 * shared host). The order is a function of the RoIs alone: results are the same for every
 * thread count.
 *
 * Note [Deterministic backward]
 * grad_input must come out bit-identical for any thread count and on every run, so there are
 * no atomics: each channel pair of each image of grad_input is owned by exactly one iteration of
 * the parallel loop, which zeroes its buffer, adds the contributions of the RoIs of that image
 * in the group's order (Note [RoIs in row order]; each RoI in a fixed order), and writes every
 * element of the pair. Which
 * thread runs an iteration does not matter; the sparse/dense choice depends only on the RoI and
 * the direction. Max pooling is organised the same way, per plane.
 *
 * Note [Non-finite values]
 * The separable evaluation touches columns that no sample reads, with weight 0: a lone tap's
 * partner (Note [Pairs]) and the gaps of a dense window. With an infinite or NaN value there,
 * 0 * inf = NaN would reach bins that the references, which read only the taps of each sample,
 * leave finite (likewise an infinite or NaN grad_output in backward). So the copies that feed
 * the evaluation also tell whether everything they copied is finite, at one subtraction per
 * element of a copy that mostly waits on memory; a channel pair whose input band is not (a RoI
 * whose grad_output is not, in backward) is evaluated per sample from the shared math instead,
 * exactly as the references do, non-finite values included. Max pooling reads only sample taps
 * and needs nothing of the kind.
 */
#ifndef DK_ROI_ALIGN_CPU_H
#define DK_ROI_ALIGN_CPU_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dk_arena.h"
#include "dk_argsort.h"
#include "dk_group.h"
#include "dk_large_output.h"
#include "dk_parallel.h"
#include "dk_prefetch.h"
#include "dk_tunables.h"
#include "dk_vec.h"
#include "kernels/roi_align_math.h"
#include "roi_align.h" /* ops/roi_align.h: the op's declaration */

/* The cost model of dk__ra_choose: the bookkeeping of one (bin row, pair) of the sparse order,
 * and a scale in percent on the dense order's estimate, per direction; fitted by measurement on
 * fixed and adaptive sampling of small, mixed and large boxes. */
enum {
    DK__RA_FWD_PAIR = 8,
    DK__RA_FWD_DENSE = 175,
    DK__RA_BWD_PAIR = 8,
    DK__RA_BWD_DENSE = 100,
};

/* Results staged per thread while thread 0 faults a fresh output in (Note [Faulting in the
 * shadow] in dk_large_output.h): at most this many iterations. */
#define DK__RA_STAGE_ITS 64

/* Max pooling tabulates each RoI's samples per plane unless a RoI has more than this many. */
#define DK__RA_MAX_SAMPLE_TABLE (1 << 20)

/* Sizes, options and element strides of one call. in_s is input (forward) or grad_input
 * (backward), [n, c, h, w]; out_s is output or grad_output, [k, c, ph, pw]. */
typedef struct {
    int64_t N, C, H, W, K, PH, PW;
    int64_t sampling_ratio;
    double spatial_scale;
    bool aligned;
    bool max_mode;
    bool backward;
    int64_t in_s[4], out_s[4], amy_s[4], amx_s[4];
} dk__ra_shape;

/* One call: its sizes, the RoIs grouped by image, its scratch, its threads, and its output. */
typedef struct {
    const dk__ra_shape *sh;
    dk_groups *gr;
    dk_arena *ar;
    int nthreads;
    bool stream;         /* write grad_input with streaming stores (Note [Streaming stores]) */
    dk_large_output out; /* the forward output (Note [Faulting in the shadow]) */
} dk__ra_ctx;

/* One plane loop (Note [Serial calls] in dk_parallel.h): what its workers read. */
typedef struct {
    dk_parallel_counter counter;
    dk__ra_ctx *cx;
    const void *tb;              /* the weight tables (average pooling) */
    const void *plan;            /* and the sizes of its plane loop */
    const void *ay, *ax;         /* per-RoI geometry, by slot (Note [RoIs in row order]) */
    const void *src;             /* input (forward) or grad_output (backward) */
    void *dst;                   /* output (forward) or grad_input (backward) */
    void *amy, *amx;             /* argmax_y / argmax_x written by forward max pooling */
    const void *amy_in, *amx_in; /* and read by backward */
    char *scratch;               /* thread t's part: scratch + t * per_thread bytes (or elements) */
    size_t per_thread;
    int64_t *staged_its; /* per thread, DK__RA_STAGE_ITS staged iterations */
} dk__ra_job;

/* One iteration of an average-pooling plane loop: image n, channel pairs [q0, q0 + nq), the
 * image's RoIs order[j0 .. j1). */
typedef struct {
    int64_t n, q0, nq, j0, j1;
} dk__ra_it;

#endif /* DK_ROI_ALIGN_CPU_H */
