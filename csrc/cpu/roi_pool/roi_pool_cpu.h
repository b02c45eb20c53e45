/*
 * roi_pool/roi_pool_cpu.h — what the CPU roi_pool kernel's entry points (roi_pool_cpu.c) and its
 * per-dtype bodies (roi_pool_tmpl.h) share: the context, the bins, the backward's runs, and the
 * family's notes on them. The forward's tiles and their streamed runs are roi_pool_tiles_cpu.h.
 *
 * Note [RoIPool on a CPU]
 * Forward, two ways to walk the same bins (roi_pool.layout, a tunable: Note [Tunables]):
 *  - channels-last blocks (the usual one): a task per (image, block of DK__RP_BLOCK channels)
 *    first copies that block of the image into a per-thread [H][W][DK__RP_BLOCK] buffer in the
 *    compute type (one 64-byte line per pixel for float), then serves every RoI of the image,
 *    a tile of its bins at a time (Note [RoIPool tiles]): each bin's pixels are visited once and
 *    each visit takes the maximum of all the block's channels in one vector operation
 *    (dk_roi_pool_wins as a select; one 16-lane one with AVX-512), and large outputs are
 *    streamed (Note [RoIPool tiles]). In
 *    NCHW a channel's bin is a few scattered pixels on its own plane, and torchvision walks it
 *    one channel at a time, a compare and a branch per pixel: here the copy costs a pass over
 *    the image block, and the pooling a vector operation per pixel and block of channels.
 *  - planes: one task per RoI and block of 16 channels, each channel's bin walked on its plane
 *    (dk_roi_pool_max). It reads only the pixels under the RoIs, so it wins when the RoIs cover
 *    less than the image (the cost model compares the pixels of all bins with the image's), and
 *    it serves maps whose plane index does not fit int32 or whose block would not fit in
 *    DK__RP_BLOCK_MAX_BYTES per thread.
 * Both compute the same values and argmax: the same bins, the same start, the same order of
 * pixels, the same comparison. argmax is written only when the caller passes one (the backward
 * needs it; inference does not), as int32 (torchvision's) or int64.
 * Backward: one task per block of 16 channels, which zeroes them in grad_input in every image and
 * then adds the gradients of every RoI in order (k, then ph, pw per channel): blocks are disjoint in
 * grad_input, so the threads never meet, and each element receives its additions in torchvision's
 * CPU order, whatever the thread count: the same bits. A block (not a channel) per task, because a
 * RoI's argmax and gradients for a block of channels are one contiguous run, where a channel's are
 * 49 elements every C x 49 (a page apart, for every RoI). In the usual layouts (NCHW grad_input,
 * [K, C, PH, PW] int32 argmax and grad_output: what autograd passes) the planes are zeroed with
 * memset and each RoI's block read as two runs, an index a plane offset (57M instructions per
 * backward of bench_roi_pool.py's case, from 105M).
 * What bounds the backward (measured on that case, one thread, a C harness, 2026-11-27 at a load
 * average of 3-4, CPU time): not memory. Reading its 51 MB of argmax and gradients in its own
 * order (16-channel runs, RoI after RoI) takes 2.1-2.4 ms warm and 3.9 ms after 128 MB written
 * elsewhere, the memset of grad_input 0.3 ms, and grad_input is written once, not twice (the
 * memset's lines are in L2 when the additions come); the backward takes 7-9 ms, and the same loop
 * without its read-modify-write (reading the runs and testing the index alone) takes as long. It
 * is the scalar loop over 6.4 million elements (8 instructions each, a fifth of them -1 from bins
 * off the map), and what was tried to shorten it did not: prefetching the next RoI's runs (no
 * change), one vectorised test of a run's indices so that the run adds without a branch (no
 * change: 64M instructions either way, the third of runs that hold a -1 take the tested loop),
 * a branch-free add (an off-plane index redirected to a dummy: slower, the dummy chains the
 * additions; with a dummy per bin, so that nothing chains, still slower: the training step's
 * medians 10.69-10.84 ms against 10.21-10.36 ms, three runs on the Zen 4 host, 2026-11-29: the
 * branches on -1 predict well), two or four channels' runs walked side by side (within the
 * noise then, 0-10%; two are now the loop, below), and
 * AVX-512, 16 channels' gradients gathered, added and scattered per bin (their 16 pixels lie on
 * 16 planes, so one scatter never writes an element twice: the same bits, but twice as slow as
 * the scalar loop on this CPU). Adding into a per-thread channels-last block instead
 * (as ps_roi_align's backward does) would not shorten it either: a bin's 16 channels still add at
 * 16 different pixels, one scalar read-modify-write each, and its saving (the memset, and
 * grad_input written back streamed) is the 0.3 ms above.
 * Since (branch rpb, 2026-11-27, bench_roi_pool.py's case, one thread, thread CPU time after 128 MB
 * written elsewhere, load average 0.7-3.9 from other sessions) the loop walks two channels' runs
 * side by side, element j of channel c and then of c + 1 (their planes do not overlap; each
 * channel's additions keep their order: the same bits). Measured with the variant switched per
 * call in one process (41 calls each, alternating, so that the load falls on both): the backward's
 * minimum / first quartile / median 7.7-9.6 / 8.5-12.0 / 9.4-12.6 ms against 8.4-11.4 / 9.2-13.2
 * / 11.3-13.8 ms one channel at a time, in five runs; four channels side by side 9.3-9.7 /
 * 9.8-12.5 / 10.3-12.8 ms, in between. The two builds alternating in separate processes: the
 * backward 8.3-8.5 ms (minimum of 11) against 8.7-10.0 ms, the training step 16.0-16.2 ms against
 * 16.7-22.3 ms. Why two help and four help less was not pinned down (this VM has no performance
 * counters); a likely reading: the 16.6% of additions that hit the pixel of the bin before (below)
 * wait on that store, and a second channel's independent additions fill the wait.
 * Measured at the same time and dropped, each against the loop one channel at a time:
 *  - channels-last blocks with vector adds: a task per (image, 16 channels), a zeroed [H][W][16]
 *    float block in L2, each RoI's two runs turned [bin][channel] (dk_cl_gather32's 8 x 8 AVX2
 *    tiles), and per bin one AVX-512 masked addition per pixel of the window that the bin's 16
 *    argmax span (rows from their least and greatest index, columns from their remainders by W;
 *    an exact test per lane, so any argmax is served, in the same order: the same bits, checked
 *    against torchvision), the block stored once with dk_cl_scatter32. 13.5-15.5 ms against the
 *    planes' 7.4-9.0 ms. Its parts: the two transpositions alone take 7.0-7.3 ms (4.9-5.5 ms with
 *    the next RoI's runs prefetched: a RoI's 3 KB runs, 50 KB apart, are latency-bound once the
 *    reading no longer hides behind the adds), which leaves the adds under 3.5 ms to win; they take
 *    5.2 ms as scalar adds into the block (10.4-10.7 ms in all, prefetched) and about 7.5 ms as
 *    masked windows (12.6-13.2 ms): a bin's 16 channels fall on 5.2 distinct pixels on average,
 *    but each bin pays four horizontal reductions and a window loop whose trip counts vary with
 *    the data (its exits mispredict), which costs more than the 16 scalar additions it replaces.
 *    Storing argmax channels-last in the forward would save one of the two transpositions, not
 *    the adds (and it is the forward's output, [K, C, PH, PW], which autograd saves).
 *  - store-to-load forwarding chains: 16.6% of the additions go to the pixel of the bin before in
 *    the same channel (20% of the bins are -1, off the map). Summing runs of equal consecutive
 *    indices in a register (one load and one store per run, the same additions in the same order:
 *    the same bits) took 18-25 ms against 8.7-11 ms: the run test mispredicts more than the
 *    chains cost.
 *  - the -1 test: redirecting an off-plane index to a per-bin scratch element (dummy[j], so that
 *    no chain forms) 9.7-10.1 ms against 8.3-8.8 ms; compressing each
 *    run's valid (index, gradient) pairs with AVX-512 (vpcompressd) and adding them untested
 *    10.6-13.9 ms against 9.4-11.1 ms. The branch predicts well (a RoI's -1 pattern repeats for
 *    its 16 channels).
 *  - prefetching RoI k + 1 .. k + 4's runs in this loop (no change, as before), and tasks of 32 or
 *    64 channels (within the noise).
 *  - fewer instructions: the run's loop in a function of restrict pointers with a 32-bit index,
 *    7 instructions an element where GCC's four-fold unroll of the loop here takes 8 (movslq,
 *    cmp, jae, add, lea, movss, addss, movss): 9.5-9.6 ms against 8.8-9.6 ms, no faster.
 * Reading ahead, revisited (2026-11-28, the AMD host): with the gradients and argmax in cache
 * (bench_roi_pool.py's case cut to 16 channels, a C harness) the loop takes 0.82 ns an element,
 * which over all 256 channels would be 5.3 ms, against 8.2 ms measured: the reading's 3 ms were
 * not overlapped at all. Prefetching the next RoI's whole runs at once (74 lines, above) had
 * changed nothing; spread out, a channel pair's runs (11 lines) prefetched by the pair before the
 * same pair of RoI k + 4 (roi_pool.read_ahead, a tunable), the backward took 6.8-10.4 ms against
 * 8.4-12.6 ms (medians of 25 calls after _disturb(), in one process, the tunable switched per call;
 * 2, 3, 4 and 8 RoIs ahead alike, 1 about half the gain), and the Python training step 21.7-25.0
 * ms against 23.7-27.9 ms. Presumably the burst of 74 filled the core's miss buffers, where 11 at
 * a time leave the loop's own loads room.
 * Nor is it L2's size: a task per (image, block of channels), whose grad_input is then one image's
 * 218 KB rather than both images' 435 KB (RoIs of other images skipped; each element's additions
 * in the same order, the same bits), took minima / medians of 6.63-6.73 / 7.68-9.96 ms against
 * 6.31-6.91 / 8.12-10.14 ms (2026-11-28, the AMD host, one thread, a C harness, 41 calls each
 * after 128 MB written elsewhere, the two switched per call, three runs): no change, dropped.
 * Three more, measured the same night (the AMD host, one thread, a standalone copy of the loop on
 * bench_roi_pool.py's case built as the core is, -O3, 31 calls each after 128 MB written elsewhere,
 * each variant alternating with a copy of the loop here, minima of each run):
 *  - L1 rather than L2: a task per (image, block), walking one channel pair over all the image's
 *    RoIs before the next pair, so that the pair's two planes (27 KB) stay in L1 (each pair's
 *    runs read ahead 4 RoIs on, the same bits): 8.2-11.8 ms against 7.5-11.6 ms, eight runs.
 *    Again on the Zen 4 host (1 MB of L2, 2026-11-29; a stand-alone model of the loop, int16
 *    argmax, 41 calls each after 64 MB written and 64 MB read, checked equal), with blocks of 16,
 *    8 or 4 channels so that an image's runs of a block fit in L2: minima 5.5-5.6 ms against
 *    4.2 ms, medians 5.6-5.7 against 4.3 ms. A pair's runs, 49 elements of each RoI, are read
 *    25-50 KB apart, where the loop here reads each RoI's block as one run. In the same model the
 *    loop took 0.61-0.64 ns (2.2-2.3 cycles) an element with its data in cache, and as long with
 *    every index masked into a 1 KB plane (so in L1): neither memory nor L2 bounds it there;
 *    nor its loads (eight gradients loaded at once: medians 4.35 against 4.43 ms, the noise).
 *    Four channels' runs side by side instead of two: medians 5.2-5.3 against 4.4-4.5 ms.
 *    With the bench's own argmax (from torchvision, 16.6% of indices repeating the one before)
 *    the loop took minima of 4.44-4.51 ms after _disturb(); with each repeat moved to another
 *    pixel (timing only) 4.24-4.34 ms: the chains through a store and a load cost about a tenth.
 *    Keeping each channel's running element in a register instead (its memory value loaded
 *    first, the last element stored every step, the register taken where the index repeats: no
 *    branch, the same bits) made every step wait on the one before: 11.7-11.8 ms.
 *  - no index test at all (a timing-only copy, each -1 replaced by a valid index spread over the
 *    plane, so a quarter more additions and no branch): 8.2-10.6 ms against 7.4-10.8 ms, six runs,
 *    the same. The loop is not bound by its instructions or its branch.
 *  - vector additions without gathers: argmax kept channels-last ([K][C / 16][PH PW][16], as the
 *    forward's tiles find it, so that only the gradients need turning), a zeroed [H][W][16] block
 *    per (image, block), and for every pixel of every bin's window (from the bins' geometry, 284
 *    pixels per RoI here) one comparison of the bin's 16 indices with the pixel's, the matching
 *    lanes' gradients added and -0.0 in the others (x + -0.0 is x for every x, -0.0 and NaN
 *    included, so the sums keep their bits: checked equal). 14.2-17.2 ms against 8.3-11.4 ms, four
 *    runs: the 2.3 million window visits alone took 10.7 ms walked bin by bin (their trip counts
 *    vary with the data) and 12.6 ms from a flat list of (pixel, bin) built once per call (no
 *    data-dependent branch, but about 16 instructions a visit: callgrind counts 61M instructions
 *    a call, before the gradients are turned, against the scalar loop's 48M).
 * So neither the instructions, the branch nor the reading alone bound the backward: it moves
 * 51 MB (its reading, 2.1-3.9 ms, overlapped with the adds) and makes 6.4 million
 * read-modify-writes at data-dependent addresses of a 435 KB block of grad_input (the 16
 * channels' planes of both images: in L2, not L1), and every rearrangement measured, but the
 * pairs, added more work than it saved. What the Python step adds beyond the two
 * kernels is 0.3-0.5 ms (autograd, the output allocations: out and argmax come from the host
 * output cache, Note [Host output cache]; grad_input, 7.0 MB, is below large_output.min_bytes,
 * and serving it from the cache measured no faster: 8.98 against 9.03 ms).
 *
 * Note [A narrow argmax]
 * The training step's forward writes the output and the argmax, and its backward reads them back
 * with the gradients: for bench_roi_pool.py's case 25 MB of float32 outputs, 25 MB of int32 argmax
 * and 25 MB of gradients, each written or read once at DRAM speed (the backward's reading alone
 * was measured at 2.1-3.9 ms, Note [RoIPool on a CPU]). A plane index needs 16 bits wherever
 * H W < 2^15 (every detector head: a 50 x 68 map has 3,400 pixels), so on the CPU the Python layer
 * takes an int16 argmax there (dkit/_ops/roi_pool.py; ops/roi_pool.c refuses one that cannot index
 * the plane): a quarter of the step's bytes fewer. The forward's tiles still find the indices as
 * 32-bit lanes and narrow each bin's as they store it; a whole tile is then transposed as int16 in
 * L1 (dk__rp_tile_run16_avx2; before 2026-11-29 it was transposed as int32 and narrowed after, a
 * pass more; the Zen 4 host's training step, bench_roi_pool.py's case, one thread, after
 * _disturb(), the two builds alternating, five runs of 9 calls: medians 10.24-12.03 -> 10.14-10.59
 * ms, lower in all five, minima 10.11-11.19 -> 9.96-10.37 ms)
 * and written as one run, streamed where the output is; the backward's runs read either width
 * through one loop (DK__RP_BACKWARD_RUNS). The values and the gradients are the same bits whatever
 * the width. GPU tensors keep int32 (the GPU kernels read and write int16 as well, tested emulated,
 * but not measured on a GPU). Measured on bench_roi_pool.py's training step (a 2-core AMD EPYC VM
 * with AVX2, 2026-11-27, one thread, the two widths switched per call in one process, 31 calls
 * each after _disturb(), two runs): the backward 13.0-14.4 ms against 14.6-16.8 ms with int32, the
 * step 23.8-27.5 ms against 25.0-30.3 ms; the forward is no faster (11.3-13.7 against 11.0-13.5 ms:
 * the narrowing costs about what the smaller writes save).
 * Narrower still does not pay. An 8-bit argmax relative to its bin (row offset x 16 + column
 * offset, 255 for none: that case's bins are at most 5 x 5 pixels) would halve the argmax's bytes
 * again, but the backward must then rebuild each plane index from the bin's corner, a 49-entry
 * table per RoI. A standalone copy of the backward's loop, measured both ways on the same data
 * (2026-11-28, the AMD host, one thread, 15 calls each after 128 MB written elsewhere, the index
 * rebuilt through a 256-entry offset table or by a shift and a multiply, three runs each): minima
 * of 11.1-17.6 ms against 7.9-12.2 ms with the int16 plane index, for the same additions. The
 * corner's load and the offset lengthen each addition's chain to its address, and the loop is
 * bound by those chains (Note [RoIPool on a CPU]), not by the 6.4 MB it would save. Nor does it
 * pay with the chains left as they are: each channel pair's two runs first decoded into int32
 * plane indices in L1, eight at a time with AVX2 (zero-extend, split row and column, add the bin's
 * corner, -1 for none), then the int16 loop's additions over them: minima of 8.5-9.2 ms against
 * 7.2-8.0 ms (the same harness, four runs, 2026-11-28 evening). The decoding costs more than the
 * 6.4 MB read.
 * Nor does the argmax pay kept in the tiles' order ([K][C / 16][PH PW][16], private to the training
 * step, which would spare the forward the indices' transposition). Measured 2026-11-28 night (the
 * AMD host, one thread): the forward with the transposition skipped (a timing-only build, the
 * two alternating in one C program, 21-41 calls each after 64-128 MB written elsewhere, eight
 * runs) took medians of 13.8-17.0 ms against 15.4-17.6 ms, about 0.5-1 ms less; but the backward
 * reading its pairs from that layout (a standalone copy of the loop, alternating with the loop
 * here, five runs) took medians of 12.8-14.1 ms against 12.2-13.5 ms, 0.4-0.7 ms more in four of
 * the five: a net of a few percent of the step at best, for an argmax that the op's callers could
 * no longer read as [K, C, PH, PW]. Walking a bin's 16 channels at once in that layout (16 planes a
 * bin) took 22-25 ms against 10-11.5 ms.
 */
#ifndef DK_ROI_POOL_CPU_H
#define DK_ROI_POOL_CPU_H

#include <stdint.h>
#include <string.h>

#include "dk_arena.h"
#include "dk_host_cache.h"
#include "dk_large_output.h"
#include "dk_parallel.h"
#include "dk_tensor.h"
#include "kernels/roi_pool_math.h"
#include "roi_pool.h" /* ops/roi_pool.h */

/* Channels of a channels-last block, and the most one thread's block may take. */
#define DK__RP_BLOCK 16
#define DK__RP_BLOCK_MAX_BYTES ((int64_t)32 << 20)

typedef struct {
    const dk_tensor *img, *bins, *rois, *argmax; /* input or grad_input; output or grad_output */
    int64_t roi_s0, roi_s1;                      /* rois' strides, read once (dk__rp_roi_value) */
    void *arg;                                   /* argmax's data, or NULL (the forward's inference) */
    bool arg64;                                  /* argmax is int64 (else int32, or int16:) */
    bool arg16;                                  /* argmax is int16 (Note [A narrow argmax]) */
    bool avx2;                                   /* channels-last forward: the AVX2 tiles (Note [RoIPool tiles]) */
    bool avx512;                                 /* and the AVX-512 tiles (Note [RoIPool tiles]) */
    bool stream_out;                             /* and large outputs streamed (Note [RoIPool tiles]) */
    void *block;                                 /* channels-last forward: a block buffer per thread */
    int64_t N, C, H, W, K, PH, PW;
    double scale;
    int bins_kind;          /* DK_ROI_POOL_BINS_* (kernels/roi_pool_math.h) */
    int32_t *roi_bins;      /* roi_pool's channels-last forward: every RoI's bins (dk__rp_bin_table) */
    int64_t *bin_table;     /* ps_roi_pool: every RoI's axes (dk__psp_table) */
    int64_t *roi_batch;     /* ps_roi_pool: each RoI's image, or -1 (dk__psp_table) */
    int64_t roi_block;      /* ps_roi_pool's forward: RoIs per task (dk__psp_roi_block) */
    int64_t sampling_ratio; /* ps_roi_align */
    float *scratch;      /* ps_roi_align's 16-bit backward on planes: DK__RP_CHANNELS float H x W planes per thread */
    const void *table;   /* ps_roi_align's backward: every RoI's geometry (dk__psa_roi_entry) */
    int64_t *image_rois; /* the position-sensitive ops: each image's RoIs (dk__rp_image_rois) */
    int64_t ps_work;     /* the position-sensitive ops' cost models: a bin's samples (ps_roi_align) or pixels
                      * (ps_roi_pool), summed over the RoIs with an image */
    int ps_layout;       /* ps_roi_align, ps_roi_pool: its layout tunable (-1 cost model, 0 planes, 1 blocks) */
    bool stream;       /* ps_roi_align's, ps_roi_pool's backward: blocks stream grad_input (Note [Streaming stores]) */
    bool psa_tables;   /* ps_roi_align: keep each RoI's taps in tables (its tunable) */
    bool ps_avx2;      /* the position-sensitive blocks: copy float32 planes with AVX2 (dk__ps_row_load_avx2) */
    int ps_copy_ahead; /* the position-sensitive blocks' copy: rows read ahead (Note [Copying ahead]), 0 none */
    int32_t *ps_cols8; /* ps_roi_pool's AVX2 backward: each RoI's columns (dk__psp_cols8), or NULL */
    int64_t ps_grad_channels; /* ps_roi_pool's buffered backward: output channels a task takes (1 or 2) */
    bool ps_avx512;    /* ps_roi_pool's plane-major forward: float32 bins gathered with AVX-512 (dk__psp_gather) */
    int64_t *ps_order; /* ps_roi_pool's plane-major forward: each image's RoIs by their bins' size */
    void *ps_groups;   /* and its per-thread groups (dk__psp_group), DK__PSP_GROUPS(K, N) each */
    dk_host_block *block_owner; /* the position-sensitive blocks' memory (dk__ps_blocks), or NULL */
    bool psa_grad_planes;       /* ps_roi_align's backward: blocks stored through whole planes (its tunable) */
    void *stage; /* ps_roi_align's backward: then a thread's DK__RP_CHANNELS dense planes (dk__psa_grad_store);
                  * either position-sensitive forward on blocks: every output, [PH PW][K][ps_stage_lanes] (Note
                  * [Staged outputs]); or NULL */
    dk_host_block *stage_owner; /* their memory, or NULL */
    int64_t ps_stage_lanes;     /* the staged outputs: a RoI's lanes, its channels in whole vectors */
    int64_t ps_stage_row;       /* and a bin's row of them (K RoIs, padded), in elements */
    bool ps_stage;              /* the position-sensitive forwards: stage the blocks' outputs (ps_roi_pool.stage) */
    dk_parallel_counter counter;
} dk__rp_ctx;

/* The batch index of RoI k, or -1 when it is not one of the N images (ops/roi_pool.c refuses
 * those where the host can read the RoIs; this keeps a kernel in bounds regardless). */
static inline int64_t dk__rp_batch(double b, int64_t n)
{
    return b >= 0 && b < (double)n && b == (double)(int64_t)b ? (int64_t)b : -1;
}

/* Each image's RoIs in order of k, for the position-sensitive tasks that serve one image: lists[0
 * .. N] the offsets of each image's run in lists[N + 1 ..], which holds the RoI numbers (a stable
 * counting sort). RoI k's image is *(const int64_t *)((const char *)n + k stride), -1 for none
 * (in no list). */
static inline void dk__rp_image_rois(const int64_t *n, size_t stride, int64_t K, int64_t N, int64_t *lists)
{
#define DK__RP_IMAGE_OF(k) (*(const int64_t *)(const void *)((const char *)n + (size_t)(k)*stride))
    for (int64_t i = 0; i <= N; i++) lists[i] = 0;
    for (int64_t k = 0; k < K; k++)
        if (DK__RP_IMAGE_OF(k) >= 0) lists[DK__RP_IMAGE_OF(k) + 1]++;
    for (int64_t i = 0; i < N; i++) lists[i + 1] += lists[i];
    for (int64_t k = 0, *fill = lists + N + 1; k < K; k++)
        if (DK__RP_IMAGE_OF(k) >= 0) fill[lists[DK__RP_IMAGE_OF(k)]++] = k;
    for (int64_t i = N; i > 0; i--) lists[i] = lists[i - 1]; /* the fill moved each start to the next's */
    lists[0] = 0;
#undef DK__RP_IMAGE_OF
}

/* argmax element i (an offset in elements), any width. */
static inline int64_t dk__rp_arg_load(const dk__rp_ctx *cx, int64_t i)
{
    return cx->arg64   ? ((const int64_t *)cx->arg)[i]
           : cx->arg16 ? ((const int16_t *)cx->arg)[i]
                       : ((const int32_t *)cx->arg)[i];
}
static inline void dk__rp_arg_store(const dk__rp_ctx *cx, int64_t i, int64_t v)
{
    if (cx->arg64) ((int64_t *)cx->arg)[i] = v;
    else if (cx->arg16) ((int16_t *)cx->arg)[i] = (int16_t)v; /* ops/roi_pool.c: only where every index fits */
    else ((int32_t *)cx->arg)[i] = (int32_t)v;
}

/* The backward's usual layouts (dk__rp_backward_worker): RoI k's block of channels c0 .. c1, its
 * argmax AR0 (int32 or int16: Note [A narrow argmax]) and gradients GR0 as runs of P, added into
 * the planes from IMG0 (channel c0 of image n), two channels' runs side by side (Note [RoIPool on
 * a CPU]): each channel's additions in its own order, on planes that do not overlap (`pairs`).
 * Each pair first prefetches the same two channels' runs of a later RoI, NAR and NGR (NGR NULL:
 * none). -1 (nothing was pooled: ops/roi_pool.c), or any index off the plane, wraps high and is
 * skipped. A
 * macro: the same loop for both widths, and every storage type. */
#define DK__RP_BACKWARD_RUNS(AR0, GR0, IMG0, NAR, NGR)                                                        \
    do {                                                                                                      \
        const __typeof__(*(AR0)) *ar = (AR0);                                                                 \
        const DK_S *gr = (GR0);                                                                               \
        const char *nar = (const char *)(NAR), *ngr = (const char *)(NGR);                                    \
        DK_S *img = (IMG0);                                                                                   \
        int64_t c = c0;                                                                                       \
        for (; pairs && c + 1 < c1; c += 2, ar += 2 * P, gr += 2 * P, img += 2 * xs[1]) {                     \
            DK_S *img2 = img + xs[1];                                                                         \
            if (ngr) {                                                                                        \
                const int64_t o = (c - c0) * P;                                                               \
                for (int64_t b = 0; b < 2 * P * (int64_t)sizeof(DK_S); b += 64)                               \
                    __builtin_prefetch(ngr + o * (int64_t)sizeof(DK_S) + b);                                  \
                for (int64_t b = 0; b < 2 * P * (int64_t)sizeof(*ar); b += 64)                                \
                    __builtin_prefetch(nar + o * (int64_t)sizeof(*ar) + b);                                   \
            }                                                                                                 \
            _Pragma("GCC unroll 2") for (int64_t j = 0; j < P; j++)                                           \
            {                                                                                                 \
                const int64_t a = ar[j], b = ar[P + j];                                                       \
                if ((uint64_t)a < (uint64_t)plane) img[a] = DK_STORE(DK_LOAD(img[a]) + DK_LOAD(gr[j]));       \
                if ((uint64_t)b < (uint64_t)plane) img2[b] = DK_STORE(DK_LOAD(img2[b]) + DK_LOAD(gr[P + j])); \
            }                                                                                                 \
        }                                                                                                     \
        for (; c < c1; c++, ar += P, gr += P, img += xs[1]) {                                                 \
            _Pragma("GCC unroll 4") for (int64_t j = 0; j < P; j++)                                           \
            {                                                                                                 \
                const int64_t a = ar[j];                                                                      \
                if ((uint64_t)a < (uint64_t)plane) img[a] = DK_STORE(DK_LOAD(img[a]) + DK_LOAD(gr[j]));       \
            }                                                                                                 \
        }                                                                                                     \
    } while (0)

/* The bytes of one argmax element. */
static inline size_t dk__rp_arg_bytes(const dk__rp_ctx *cx) { return cx->arg64 ? 8 : cx->arg16 ? 2 : 4; }

/* t's four strides, in elements. */
static inline void dk__rp_strides(const dk_tensor *t, int64_t s[4])
{
    for (int d = 0; d < 4; d++) s[d] = dk_tensor_stride(t, d);
}

#endif /* DK_ROI_POOL_CPU_H */
