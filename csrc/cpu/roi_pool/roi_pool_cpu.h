/*
 * roi_pool/roi_pool_cpu.h — what the CPU roi_pool kernel's entry points (roi_pool_cpu.c) and its
 * per-dtype bodies (roi_pool_tmpl.h) share.
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
#include "dk_channels_last.h"
#include "dk_host_cache.h"
#include "dk_large_output.h"
#include "dk_parallel.h"
#include "dk_tensor.h"
#include "dk_vec.h"
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

/*
 * A bin's maximum over a channels-last block: m[c], a[c] for the DK__RP_BLOCK channels of the
 * pixels [h0, h1) x [w0, w1) of buf ([H][W][DK__RP_BLOCK], W wide), from `start`: each pixel takes
 * a channel's maximum only when greater (dk_roi_pool_wins, as a vector comparison: NaN never
 * wins, the first of equals stays), and a[c] its plane index h W + w, or -1 when none did. float
 * in 4-lane vectors, four per pixel; double one lane at a time.
 */
typedef int32_t dk__rp_v4_i32 __attribute__((vector_size(16)));

static inline void dk__rp_block_bin_f32(const float *buf, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1,
                                        float start, float *m, int32_t *a)
{
    dk_v4_f32 mv[DK__RP_BLOCK / 4];
    dk__rp_v4_i32 av[DK__RP_BLOCK / 4];
    for (int j = 0; j < DK__RP_BLOCK / 4; j++)
        mv[j] = (dk_v4_f32){start, start, start, start}, av[j] = (dk__rp_v4_i32){-1, -1, -1, -1};
    for (int64_t h = h0; h < h1; h++) {
        const float *px = buf + (h * W + w0) * DK__RP_BLOCK;
        int32_t i = (int32_t)(h * W + w0);
        for (int64_t w = w0; w < w1; w++, px += DK__RP_BLOCK, i++) {
            const dk__rp_v4_i32 at = {i, i, i, i};
            for (int j = 0; j < DK__RP_BLOCK / 4; j++) {
                dk_v4_f32 v;
                dk_ld4_f32(&v, px + 4 * j);
                const dk__rp_v4_i32 win = (dk__rp_v4_i32)(v > mv[j]); /* -1 where v wins */
                av[j] = (at & win) | (av[j] & ~win);
                mv[j] = (dk_v4_f32)(((dk__rp_v4_i32)v & win) | ((dk__rp_v4_i32)mv[j] & ~win));
            }
        }
    }
    for (int j = 0; j < DK__RP_BLOCK / 4; j++) dk_st4_f32(m + 4 * j, &mv[j]), memcpy(a + 4 * j, &av[j], sizeof av[j]);
}

static inline void dk__rp_block_bin_f64(const double *buf, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1,
                                        double start, double *m, int32_t *a)
{
    for (int c = 0; c < DK__RP_BLOCK; c++) m[c] = start, a[c] = -1;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
            const double *px = buf + (h * W + w) * DK__RP_BLOCK;
            for (int c = 0; c < DK__RP_BLOCK; c++)
                if (dk_roi_pool_wins_f64(px[c], m[c])) m[c] = px[c], a[c] = (int32_t)(h * W + w);
        }
}

/*
 * Note [RoIPool tiles]
 * The channels-last forward pools a RoI's bins for its block of channels as one tile: up to
 * DK__RP_TILE bins (all 49 of 7 x 7) x DK__RP_BLOCK channels, bin by bin into a small buffer,
 * [bin][channel], with no call or table walk between bins (one function per tile, the bin loop
 * inside it, where the CPU overlaps one bin's chain of comparisons with the next's). The tile
 * then goes to the output transposed, [channel][bin]: in the usual [K, C, PH, PW] layout the
 * block's outputs (and argmax) of one RoI are one contiguous run of DK__RP_BLOCK x PH PW
 * elements, so the stores are sequential, where storing each bin's channels at once writes 16
 * elements PH PW apart, 16 lines per bin (before tiles, those stores and a call per bin took most
 * of the forward's instructions).
 * With AVX2 and float32, the transposes (and the channels-last copy) go 8 x 8 lanes at a time,
 * and inference's tile, with no argmax to find, keeps the maxima alone. On bench_roi_pool.py's
 * case (callgrind, one thread) a forward with an int32 argmax took 205M instructions before the
 * tiles, 74M after; inference 43M.
 * With AVX-512 (roi_pool.isa 2, the default where the CPU has it) a block's 16 channels are one
 * vector: a pixel of a bin is a load, a maxps and, with an argmax, a comparison into a mask and a
 * masked move, 7 instructions with the loop where the AVX2 tile takes 13 (16 before 2026-11-28: GCC
 * broadcast the index afresh and loaded each half twice per pixel). It serves the forward
 * with an argmax (training): 15.5-19.4 ms -> 7.2-7.6 ms together with the streaming below (the
 * AVX2 tile with streaming: 9.8 ms); inference's tile is bound by its chain of maxps per bin, not
 * by instructions, and takes the same time either way. (valgrind does not run AVX-512: callgrind
 * counts the AVX2 tile.)
 * The output and argmax are written once and not read again by this call: 51 MB for the bench's
 * case with an argmax. Written with plain stores, each line is read first; after 128 MB written
 * elsewhere (as a training step leaves the caches) that write took 8.5 ms in the forward's order,
 * and 3.2 ms with non-temporal stores. So where the output is large (dk_large_output_prepare:
 * large_output.min_bytes, 8 MiB by default; 0 forces it, as the tests do) and a RoI's block is
 * one tile and one run (PH PW <= DK__RP_TILE, a whole block, the usual layout), the transposed
 * tile goes to an L1 buffer and from there to the output as whole 64-byte lines, streamed
 * (dk__rp_tile_stream32_avx2; plain stores at an unaligned head and tail): with the AVX2 tile,
 * forward with an argmax 15-19 ms -> 9.8 ms, inference 7.5-10 ms -> 4.9-5.6 ms (C harness, CPU
 * time, load 2-5), 81.6M and 47.1M instructions (the staging copy adds 9M and 4M).
 * With an int16 argmax (training on the CPU, Note [A narrow argmax]) a RoI's two runs go out
 * together (dk__rp_tile_stream_pair16_avx2): both tiles transposed, then each run read back and
 * streamed, so that no read-back waits on transposed stores still in flight. Measured 2026-11-28
 * (the AMD host, one thread, a C harness on bench_roi_pool.py's case, the two builds alternating,
 * ten runs each, minimum of 15 calls): the forward with an argmax 7.9 -> 6.9 ms (medians of the
 * runs) with its caches warm, where perf had put the transpositions at a quarter of its time;
 * after 128 MB written elsewhere, 6.9 ms either way (the writes bound it there). Writing each
 * RoI's runs out a RoI later (a ring of two transposed tiles per task, so that no read-back meets
 * a transposed store still in flight) measured no faster (2026-11-28 night, one thread, the two
 * builds alternating in one C program, 41 calls each after 64 MB written elsewhere, the same bits:
 * medians 11.5-18.1 ms against 12.1-17.6 ms over five runs of a slow stretch), and was dropped.
 * The block's copy is not what is left either (2026-11-28, the AMD host, one thread, a C harness,
 * after 128 MB written elsewhere): the copies alone take 0.86-0.98 ms of a forward, and the forward
 * without them (pooling stale blocks) 3.8-4.1 ms for inference and 6.0-6.9 ms with an argmax,
 * against 4.3-5.7 and 6.5-7.9 ms with them (minima of 15, five runs): about half of the copy
 * already overlaps the pooling. Reading the next task's planes ahead into L2, a share of their
 * lines per RoI pooled, changed neither the minima nor the medians of 31 calls (alternating with
 * the plain build in one process, four runs), and was dropped.
 * Nor is it the bins' walk (2026-11-29, the Zen 4 host at 3.66 GHz, a stand-alone copy of the AVX-512
 * tile on the bench's bins, one 50 x 68 block in L2, 16 passes of 512 RoIs, 2.2 million visits a
 * call, five runs). The tile took 2.0-2.2 ms (3.3-3.6 cycles a visit), 1.5-1.6 ms without the
 * argmax; a vmaxps chain alone is 2.2 cycles a step. Three walks with the same results (checked
 * against the tile here on random data, on data of three values and on signed zeros) were slower:
 *  - separable: per bin row, each column's maximum and first row over the row's span, then each
 *    bin's over its columns (the greater value, or on equal values the lower plane index: the
 *    first in torchvision's order). 2.6-2.9 ms.
 *  - every bin over the tile's widest window, columns past its own repeating its last one (a repeat
 *    never wins v > m), so that the loops' trip counts stay fixed for a RoI: 3.1-3.2 ms, and with
 *    the tallest window as well 3.7-3.8 ms. Visits, not mispredicted loop exits, are what costs:
 *    bins all 3 x 3 took more per visit than the bench's bins of 1-5.
 *  - without the argmax, two bins of a row walked side by side (two chains): 1.8-2.1 ms against
 *    1.5-1.6 ms; with it, bins (ph, pw) and (ph + 1, pw) side by side (the same columns, the
 *    shorter one's last row repeated): 2.5-3.0 ms (while other work ran); each row's pixels two at
 *    a time: 2.6 ms.
 * e: the tile's bins from cx->roi_bins (h0, h1, w0, w1 each; h0 = -1 empty), m and a: nbins x
 * DK__RP_BLOCK. The same bins, pixels in the same order, the same comparison: the same results.
 */
#define DK__RP_TILE 64

/* dk__rp_block_tile_f32 and _f64: the bins of a tile in order, each by dk__rp_block_bin_*. */
#define DK__RP_BLOCK_TILE(SUF, T)                                                                              \
    static inline void dk__rp_block_tile_##SUF(const T *buf, int64_t W, const int32_t *e, int64_t nbins, T *m, \
                                               int32_t *a)                                                     \
    {                                                                                                          \
        for (int64_t b = 0; b < nbins; b++, e += 4) {                                                          \
            const bool some = e[0] >= 0;                                                                       \
            dk__rp_block_bin_##SUF(buf, W, some ? e[0] : 0, some ? e[1] : 0, some ? e[2] : 0, some ? e[3] : 0, \
                                   dk_roi_pool_start_##SUF(some), m + b * DK__RP_BLOCK, a + b * DK__RP_BLOCK); \
        }                                                                                                      \
    }
DK__RP_BLOCK_TILE(f32, float)
DK__RP_BLOCK_TILE(f64, double)

/* A tile's results (Note [RoIPool tiles]), t [bin][channel] for bins b0 .. b0 + nbins of one RoI
 * and its channels c0 .. c0 + nb, to the output or argmax at `dst` (element (k, c0, 0, 0)), strides
 * ds, each through CONV: [channel][bin] as one run where the RoI's [C, PH, PW] is contiguous (P =
 * PH PW), else element by element. A macro: the same walk for the output of every storage type
 * and for argmax of either width. */
static inline bool dk__rp_runs(const int64_t ds[4], int64_t PW, int64_t P)
{
    return ds[3] == 1 && ds[2] == PW && ds[1] == P;
}
#define DK__RP_TILE_STORE(dst, ds, t, CONV, PW, P, b0, nbins, nb)                                                   \
    do {                                                                                                            \
        if (dk__rp_runs((ds), (PW), (P))) {                                                                         \
            for (int64_t c_ = 0; c_ < (nb); c_++)                                                                   \
                for (int64_t b_ = 0; b_ < (nbins); b_++)                                                            \
                    (dst)[c_ * (P) + (b0) + b_] = CONV((t)[b_ * DK__RP_BLOCK + c_]);                                \
        } else {                                                                                                    \
            for (int64_t b_ = 0; b_ < (nbins); b_++) {                                                              \
                const int64_t o_ = ((b0) + b_) / (PW) * (ds)[2] + ((b0) + b_) % (PW) * (ds)[3];                     \
                for (int64_t c_ = 0; c_ < (nb); c_++) (dst)[o_ + c_ * (ds)[1]] = CONV((t)[b_ * DK__RP_BLOCK + c_]); \
            }                                                                                                       \
        }                                                                                                           \
    } while (0)

/* The float tile with 8-lane vectors, two per pixel, for CPUs with AVX2 (Note [AVX2 spans] in
 * box_iou_cpu.h; roi_pool.isa picks). A pixel's value v takes a channel's maximum m where v > m
 * (ordered: NaN never does), which is what maxps(v, m) returns (v > m ? v : m), and its index
 * where the same comparison holds: the same selections as the baseline, so the same results. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DK__RP_AVX2 1
#include <immintrin.h>

/* Inference's tile: the maxima alone, two loads and two maxps a pixel. */
__attribute__((target("avx2"))) static void dk__rp_block_tile_max_f32_avx2(const float *buf, int64_t W,
                                                                           const int32_t *e, int64_t nbins, float *m)
{
    for (int64_t b = 0; b < nbins; b++, e += 4) {
        const bool some = e[0] >= 0;
        __m256 m0 = _mm256_set1_ps(dk_roi_pool_start_f32(some)), m1 = m0;
        const int64_t h1 = some ? e[1] : 0, w0 = some ? e[2] : 0, w1 = some ? e[3] : 0;
        for (int64_t h = some ? e[0] : 0; h < h1; h++) {
            const float *px = buf + (h * W + w0) * DK__RP_BLOCK, *end = px + (w1 - w0) * DK__RP_BLOCK;
            for (; px < end; px += DK__RP_BLOCK)
                m0 = _mm256_max_ps(_mm256_loadu_ps(px), m0), m1 = _mm256_max_ps(_mm256_loadu_ps(px + 8), m1);
        }
        _mm256_storeu_ps(m + b * DK__RP_BLOCK, m0), _mm256_storeu_ps(m + b * DK__RP_BLOCK + 8, m1);
    }
}

/* The training forward's tile: the maxima and their indices. The pixel's index is a vector that
 * steps by one along the row (a broadcast per pixel costs two instructions more), and each
 * pixel's two halves are loaded once: 12 instructions a pixel with the loop. Rows in pairs, each
 * row of a pair into its own maxima and indices merged at the end of the bin (the greater maximum,
 * on a tie the earlier index with its own value), halve a bin's chain of maxps and share the loop
 * step between two pixels; measured and dropped (2026-11-28, the AMD host, bench_roi_pool.py's
 * case in a C harness, one thread, the two builds alternating, five runs each warm and five after
 * 128 MB written elsewhere): the forward with an argmax 7.4-9.9 ms (minima of 15) against
 * 6.9-7.7 ms, and 13.0 against 12.8 ms in a pair of runs that met one of the host's slow
 * stretches. That case's bins are one to five rows high (its RoIs span 1-25 pixels of the map),
 * so the merge and the odd row's own loop cost more than the shorter chains save. */
__attribute__((target("avx2"), always_inline)) static inline void
dk__rp_block_tile_arg_f32_avx2_body(const float *buf, int64_t W, const int32_t *e, int64_t nbins, float *m, int32_t *a,
                                    int16_t *a16)
{
    const __m256i one = _mm256_set1_epi32(1);
    for (int64_t b = 0; b < nbins; b++, e += 4) {
        const bool some = e[0] >= 0;
        __m256 m0 = _mm256_set1_ps(dk_roi_pool_start_f32(some)), m1 = m0;
        __m256 a0 = _mm256_castsi256_ps(_mm256_set1_epi32(-1)), a1 = a0;
        const int64_t h1 = some ? e[1] : 0, w0 = some ? e[2] : 0, w1 = some ? e[3] : 0;
        for (int64_t h = some ? e[0] : 0; h < h1; h++) {
            const float *px = buf + (h * W + w0) * DK__RP_BLOCK, *end = px + (w1 - w0) * DK__RP_BLOCK;
            __m256i at = _mm256_set1_epi32((int32_t)(h * W + w0));
            for (; px < end; px += DK__RP_BLOCK, at = _mm256_add_epi32(at, one)) {
                const __m256 v0 = _mm256_loadu_ps(px), v1 = _mm256_loadu_ps(px + 8);
                const __m256 atf = _mm256_castsi256_ps(at);
                a0 = _mm256_blendv_ps(a0, atf, _mm256_cmp_ps(v0, m0, _CMP_GT_OQ));
                a1 = _mm256_blendv_ps(a1, atf, _mm256_cmp_ps(v1, m1, _CMP_GT_OQ));
                m0 = _mm256_max_ps(v0, m0), m1 = _mm256_max_ps(v1, m1);
            }
        }
        _mm256_storeu_ps(m + b * DK__RP_BLOCK, m0), _mm256_storeu_ps(m + b * DK__RP_BLOCK + 8, m1);
        if (a16) { /* packs interleaves the 128-bit halves (a0 lo, a1 lo, a0 hi, a1 hi): put back in order */
            const __m256i p = _mm256_packs_epi32(_mm256_castps_si256(a0), _mm256_castps_si256(a1));
            _mm256_storeu_si256((__m256i *)(void *)(a16 + b * DK__RP_BLOCK),
                                _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0)));
        } else {
            _mm256_storeu_ps((float *)(void *)(a + b * DK__RP_BLOCK), a0);
            _mm256_storeu_ps((float *)(void *)(a + b * DK__RP_BLOCK + 8), a1);
        }
    }
}

__attribute__((target("avx2"))) static void
dk__rp_block_tile_arg_f32_avx2(const float *buf, int64_t W, const int32_t *e, int64_t nbins, float *m, int32_t *a)
{
    dk__rp_block_tile_arg_f32_avx2_body(buf, W, e, nbins, m, a, NULL);
}

__attribute__((target("avx2"))) static void
dk__rp_block_tile_arg16_f32_avx2(const float *buf, int64_t W, const int32_t *e, int64_t nbins, float *m, int16_t *a16)
{
    dk__rp_block_tile_arg_f32_avx2_body(buf, W, e, nbins, m, NULL, a16);
}

/* a NULL: the maxima alone (inference), a left as it was. */
__attribute__((target("avx2"))) static void dk__rp_block_tile_f32_avx2(const float *buf, int64_t W, const int32_t *e,
                                                                       int64_t nbins, float *m, int32_t *a)
{
    if (a) dk__rp_block_tile_arg_f32_avx2(buf, W, e, nbins, m, a);
    else dk__rp_block_tile_max_f32_avx2(buf, W, e, nbins, m);
}

/* The same tile with AVX-512 (roi_pool.isa 2): a block's 16 channels are one 16-lane vector, so a
 * pixel is one load, one maxps and, with an argmax, one comparison into a mask and one masked move
 * of its index (the AVX2 tile's selections, lane for lane: the same results). */
_Static_assert(DK__RP_BLOCK == 16, "the AVX-512 tile holds a block in one vector");
__attribute__((target("avx512f"), always_inline)) static inline void
dk__rp_block_tile_f32_avx512_body(const float *buf, int64_t W, const int32_t *e, int64_t nbins, float *m, int32_t *a,
                                  int16_t *a16, bool arg)
{
    for (int64_t b = 0; b < nbins; b++, e += 4) {
        const bool some = e[0] >= 0;
        __m512 mv = _mm512_set1_ps(dk_roi_pool_start_f32(some));
        __m512i av = _mm512_set1_epi32(-1);
        const int64_t h1 = some ? e[1] : 0, w0 = some ? e[2] : 0, w1 = some ? e[3] : 0;
        for (int64_t h = some ? e[0] : 0; h < h1; h++) {
            const float *px = buf + (h * W + w0) * DK__RP_BLOCK;
            int32_t i = (int32_t)(h * W + w0);
            for (int64_t w = w0; w < w1; w++, px += DK__RP_BLOCK, i++) {
                const __m512 v = _mm512_loadu_ps(px);
                if (arg) av = _mm512_mask_mov_epi32(av, _mm512_cmp_ps_mask(v, mv, _CMP_GT_OQ), _mm512_set1_epi32(i));
                mv = _mm512_max_ps(v, mv);
            }
        }
        _mm512_storeu_ps(m + b * DK__RP_BLOCK, mv);
        if (arg && a16) _mm256_storeu_si256((__m256i *)(void *)(a16 + b * DK__RP_BLOCK), _mm512_cvtepi32_epi16(av));
        else if (arg) _mm512_storeu_si512(a + b * DK__RP_BLOCK, av);
    }
}

/* a16 (not NULL only with a): the indices narrowed to int16 ([bin][channel], Note [A narrow argmax]), a unused. */
__attribute__((target("avx512f"))) static void dk__rp_block_tile_f32_avx512(const float *buf, int64_t W,
                                                                            const int32_t *e, int64_t nbins, float *m,
                                                                            int32_t *a, int16_t *a16)
{
    if (a16) dk__rp_block_tile_f32_avx512_body(buf, W, e, nbins, m, NULL, a16, true);
    else if (a) dk__rp_block_tile_f32_avx512_body(buf, W, e, nbins, m, a, NULL, true);
    else dk__rp_block_tile_f32_avx512_body(buf, W, e, nbins, m, NULL, NULL, false);
}

/* DK__RP_TILE_STORE's contiguous run for 32-bit elements (float outputs, int32 argmax) and a whole
 * block: t [bin][channel] (nbins x DK__RP_BLOCK) to dst[c P + b0 + b], in the 8 x 8 tiles of
 * Note [Channels-last copies] (32-bit lanes moved, not computed: the int32 argmax as well). */
__attribute__((target("avx2"))) static void dk__rp_tile_store32_avx2(void *dst, int64_t P, int64_t b0, const void *t,
                                                                     int64_t nbins)
{
    dk_cl_scatter32_avx2((const float *)t, DK__RP_BLOCK, nbins, DK__RP_BLOCK, (float *)dst + b0, P);
}

/* n 32-bit elements from src to dst with non-temporal stores (Note [Streaming stores] in
 * dk_large_output.h) where they fill whole 64-byte lines of dst, plain ones at an unaligned head
 * and a tail; where `clear` (a constant in each caller), src is written 0 behind them, each line
 * while it is in L1 (ps_roi_pool's buffered backward, Note [Position-sensitive RoIPool on a CPU]).
 * The caller ends the thread's stores with dk_sfence(). */
__attribute__((target("avx2"), always_inline)) static inline void dk__rp_stream_run32_body(void *dst, void *src,
                                                                                           int64_t n, const bool clear)
{
    char *d = (char *)dst;
    char *s = (char *)src;
    int64_t head = (int64_t)((64 - ((uintptr_t)d & 63)) & 63) / 4; /* elements before a line starts */
    if (((uintptr_t)d & 3) || head > n) head = n;                  /* (argmax and outputs are 4-aligned) */
    memcpy(d, s, (size_t)head * 4);
    if (clear) memset(s, 0, (size_t)head * 4);
    int64_t i = head;
    for (; i + 16 <= n; i += 16) {
        _mm256_stream_si256((__m256i *)(d + i * 4), _mm256_loadu_si256((const __m256i *)(s + i * 4)));
        _mm256_stream_si256((__m256i *)(d + i * 4 + 32), _mm256_loadu_si256((const __m256i *)(s + i * 4 + 32)));
        if (clear) {
            _mm256_storeu_si256((__m256i *)(s + i * 4), _mm256_setzero_si256());
            _mm256_storeu_si256((__m256i *)(s + i * 4 + 32), _mm256_setzero_si256());
        }
    }
    memcpy(d + i * 4, s + i * 4, (size_t)(n - i) * 4);
    if (clear) memset(s + i * 4, 0, (size_t)(n - i) * 4);
}

__attribute__((target("avx2"))) static void dk__rp_stream_run32_avx2(void *dst, const void *src, int64_t n)
{
    dk__rp_stream_run32_body(dst, (void *)(uintptr_t)src, n, false); /* src only read */
}

__attribute__((target("avx2"))) static void dk__rp_stream_run32_clear_avx2(void *dst, void *src, int64_t n)
{
    dk__rp_stream_run32_body(dst, src, n, true);
}

/* A RoI's whole tile (nbins = P) of a whole block, t [bin][channel], to its run of DK__RP_BLOCK P
 * elements at dst ([channel][bin]), streamed: transposed into an L1 buffer first, so that the
 * lines go out whole and in order (the transposes' 32-byte stores, P elements apart, would leave
 * the write-combining buffers half full). */
__attribute__((target("avx2"))) static void dk__rp_tile_stream32_avx2(void *dst, int64_t P, const void *t)
{
    _Alignas(64) float run[DK__RP_BLOCK * DK__RP_TILE];
    dk__rp_tile_store32_avx2(run, P, 0, t, P);
    dk__rp_stream_run32_avx2(dst, run, DK__RP_BLOCK * P);
}

/* A whole tile's int16 indices, t [bin][channel] (P x DK__RP_BLOCK, as the tiles narrow them: Note
 * [A narrow argmax]), to dst [channel][bin] (DK__RP_BLOCK x P): 16 bins at a time as a 16 x 16
 * transposition of 16-bit lanes in four rounds of unpacks (16 bits, 32, 64, then the 128-bit halves),
 * the bins past the last 16 one by one. Half the bytes of the int32 tile's transposition, and no
 * narrowing pass after it. */
_Static_assert(DK__RP_BLOCK == 16, "a block's int16 indices are one 256-bit row");
__attribute__((target("avx2"))) static void dk__rp_tile_transpose16_avx2(int16_t *dst, int64_t P, const int16_t *t)
{
    int64_t b0 = 0;
    for (; b0 + 16 <= P; b0 += 16) {
        __m256i r[16], s[16];
        for (int i = 0; i < 16; i++) r[i] = _mm256_loadu_si256((const __m256i *)(const void *)(t + (b0 + i) * 16));
        /* bins 2i and 2i + 1 interleaved: s[2i] channels 0-3 | 8-11, s[2i + 1] channels 4-7 | 12-15 */
        for (int i = 0; i < 8; i++) {
            s[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
            s[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
        }
        /* four bins: r[4q + j] channels 2j, 2j + 1 | 2j + 8, 2j + 9 of bins 4q .. 4q + 3 */
        for (int q = 0; q < 4; q++) {
            const __m256i *u = s + 4 * q;
            r[4 * q] = _mm256_unpacklo_epi32(u[0], u[2]), r[4 * q + 1] = _mm256_unpackhi_epi32(u[0], u[2]);
            r[4 * q + 2] = _mm256_unpacklo_epi32(u[1], u[3]), r[4 * q + 3] = _mm256_unpackhi_epi32(u[1], u[3]);
        }
        /* eight bins: s[8o + c] channel c | c + 8 of bins 8o .. 8o + 7 */
        for (int o = 0; o < 2; o++)
            for (int j = 0; j < 4; j++) {
                s[8 * o + 2 * j] = _mm256_unpacklo_epi64(r[8 * o + j], r[8 * o + 4 + j]);
                s[8 * o + 2 * j + 1] = _mm256_unpackhi_epi64(r[8 * o + j], r[8 * o + 4 + j]);
            }
        for (int c = 0; c < 8; c++) { /* channel c's 16 bins from the low halves, c + 8's from the high */
            _mm256_storeu_si256((__m256i *)(void *)(dst + c * P + b0), _mm256_permute2x128_si256(s[c], s[8 + c], 0x20));
            _mm256_storeu_si256((__m256i *)(void *)(dst + (c + 8) * P + b0),
                                _mm256_permute2x128_si256(s[c], s[8 + c], 0x31));
        }
    }
    for (; b0 < P; b0++)
        for (int c = 0; c < DK__RP_BLOCK; c++) dst[c * P + b0] = t[b0 * DK__RP_BLOCK + c];
}

/* A RoI's whole tile (nbins = P) of a whole block's int16 indices, t [bin][channel], to its run of
 * DK__RP_BLOCK P int16 elements at dst ([channel][bin]; Note [A narrow argmax]): transposed into an
 * L1 buffer and written as one run, streamed where `stream` (a run of whole 4-byte units:
 * DK__RP_BLOCK P is even). */
__attribute__((target("avx2"))) static void dk__rp_tile_run16_avx2(int16_t *dst, int64_t P, const int16_t *t,
                                                                   bool stream)
{
    _Alignas(64) int16_t narrow[DK__RP_BLOCK * DK__RP_TILE];
    dk__rp_tile_transpose16_avx2(narrow, P, t);
    if (stream) dk__rp_stream_run32_avx2(dst, narrow, DK__RP_BLOCK * P / 2);
    else memcpy(dst, narrow, (size_t)(DK__RP_BLOCK * P) * sizeof(int16_t));
}

/* The training forward's streamed pair: a RoI's whole tile of maxima m to its run of floats at y
 * (dk__rp_tile_stream32_avx2) and of int16 indices a16 to its run at arg (dk__rp_tile_run16_avx2),
 * in an order that lets each buffer's stores retire before it is read back. A transposition's
 * stores land P elements apart (49 for 7 x 7), so every aligned load that reads the run back
 * spans two of them, and a load that needs two stores still in flight waits for both to reach the
 * cache (no store-to-load forwarding): streaming each run straight after its transposition made the
 * transpositions a quarter of the forward's time at half its rate of instructions. Here both are
 * transposed first, so the maxima are read back behind the indices' stores, and the indices behind
 * the maxima's streaming. The same elements reach the same places.
 * The indices come narrowed from the tile and are transposed as int16 (dk__rp_tile_transpose16_avx2).
 * Before (2026-11-29), the tile's int32 indices were transposed as the maxima are and then narrowed
 * in a pass of their own; on the Zen 4 host the training step without that transposition and pass
 * at all (a timing-only build) took 9.4-9.8 ms against 10.5-11.0 ms (medians of 9, three runs). */
__attribute__((target("avx2"))) static void dk__rp_tile_stream_pair16_avx2(float *y, int16_t *arg, int64_t P,
                                                                           const float *m, const int16_t *a16)
{
    _Alignas(64) float run_m[DK__RP_BLOCK * DK__RP_TILE];
    _Alignas(64) int16_t narrow[DK__RP_BLOCK * DK__RP_TILE];
    dk__rp_tile_store32_avx2(run_m, P, 0, m, P);
    dk__rp_tile_transpose16_avx2(narrow, P, a16);
    dk__rp_stream_run32_avx2(y, run_m, DK__RP_BLOCK * P);
    dk__rp_stream_run32_avx2(arg, narrow, DK__RP_BLOCK * P / 2);
}

#else
#define DK__RP_AVX2 0
#endif

/* A tile's int32 indices a (nbins x DK__RP_BLOCK) narrowed into a16, for the tiles that find them
 * as int32 only (every value in [-1, 32767): Note [A narrow argmax]). */
static inline void dk__rp_tile_narrow(int16_t *a16, const int32_t *a, int64_t nbins)
{
    for (int64_t i = 0; i < nbins * DK__RP_BLOCK; i++) a16[i] = (int16_t)a[i];
}

/* dk__rp_block_tile_*, the AVX2 one where the call chose it; `arg`: whether a is wanted (the
 * AVX2 one then skips the argmax; the others fill a regardless); a16, where not NULL (with arg),
 * takes the indices narrowed to int16 instead ([bin][channel], for dk__rp_tile_run16_avx2 and
 * dk__rp_tile_stream_pair16_avx2; the vector tiles narrow them as they store them). */
static inline void dk__rp_block_tile_on_f32(const dk__rp_ctx *cx, const float *buf, int64_t W, const int32_t *e,
                                            int64_t nbins, float *m, int32_t *a, int16_t *a16, bool arg)
{
#if DK__RP_AVX2
    if (cx->avx512) {
        dk__rp_block_tile_f32_avx512(buf, W, e, nbins, m, arg ? a : NULL, arg ? a16 : NULL);
        return;
    }
    if (cx->avx2) {
        if (arg && a16) dk__rp_block_tile_arg16_f32_avx2(buf, W, e, nbins, m, a16);
        else dk__rp_block_tile_f32_avx2(buf, W, e, nbins, m, arg ? a : NULL);
        return;
    }
#endif
    dk__rp_block_tile_f32(buf, W, e, nbins, m, a);
    if (arg && a16) dk__rp_tile_narrow(a16, a, nbins);
}
static inline void dk__rp_block_tile_on_f64(const dk__rp_ctx *cx, const double *buf, int64_t W, const int32_t *e,
                                            int64_t nbins, double *m, int32_t *a, int16_t *a16, bool arg)
{
    (void)cx;
    dk__rp_block_tile_f64(buf, W, e, nbins, m, a);
    if (arg && a16) dk__rp_tile_narrow(a16, a, nbins);
}

/* t's four strides, in elements. */
static inline void dk__rp_strides(const dk_tensor *t, int64_t s[4])
{
    for (int d = 0; d < 4; d++) s[d] = dk_tensor_stride(t, d);
}

#endif /* DK_ROI_POOL_CPU_H */
