/*
 * roi_pool/ps_roi_pool_cpu.h — what the position-sensitive ops' CPU kernels (ps_roi_pool_tmpl.h,
 * ps_roi_align_tmpl.h, entry points in roi_pool_cpu.c) share beyond roi_pool_cpu.h and
 * roi_pool_tiles_cpu.h: their tasks' cost models, the plane-major gathers, the buffered backward's
 * additions and the AVX2 copy of their channels-last blocks. A header of its own: the RoI pooling
 * family's one (roi_pool_cpu.h) keeps the context and the bins, roi_pool_tiles_cpu.h roi_pool's
 * tiles and the streamed runs.
 *
 * Note [Position-sensitive RoIPool on a CPU]
 * ps_roi_pool's output channel c at bin (ph, pw) reads input channel (c PH + ph) PW + pw: every
 * bin of a RoI is on a plane of its own, and output channels c .. c + 15 at one bin read planes
 * that sit at the same pixels. Walked per RoI (a task per RoI and 16 output channels), each bin
 * row was a cache miss on a 13 MB map. Every RoI's axes are found once per call (dk__psp_table:
 * its image, the rows of each ph and the columns of each pw, laid out [PH][K] and [PW][K] so that
 * a task reads them in order of k; dk_roi_pool_bin's bounds, one axis at a time), with each
 * image's RoIs in order (dk__rp_image_rois). The forward has three ways (ps_roi_pool.layout, a
 * tunable: -1 the cost model, 0 planes, 1 blocks, 2 plane-major):
 *  - plane-major (the cost model's choice for float32 where ps_roi_pool.isa is 2, not the default,
 *    and the CPU has AVX-512: Note [AVX-512 for position-sensitive pooling]):
 *    ps_roi_align's task split, a task per (image, bin, block of DK__RP_CHANNELS output channels),
 *    whose planes it reads in place, in their own layout, two at a time: no copy. Each plane serves
 *    bin (ph, pw) of every RoI of the image, 16 RoIs to a vector (dk__psp_group, in the order of
 *    dk__psp_order: by the size of their largest bins, so that a group's window is close to each
 *    of its bins), one masked gather per pixel of the group's window (dk__psp_gather): each lane
 *    adds dk_roi_pool_avg's terms in its order (rows, then columns, from +0), +0 where its bin has
 *    no such pixel (+0 added to a sum that started at +0 never changes it), and divides by the same
 *    area: the same bits, with no branch per bin (the blocks' sums mispredicted about 3 branches per
 *    RoI and task on bins of 1-4 rows of 1-4 pixels). The next two planes are read ahead a few
 *    lines per group. Without AVX-512 (isa 0 or 1, or another dtype where forced) each RoI's bin is
 *    dk_roi_pool_avg on the plane, in the same tasks.
 *  - channels-last blocks (the cost model's choice otherwise): the same tasks copy their planes
 *    channels-last into a per-thread buffer (dk__ps_block_load, shared with ps_roi_align; float32
 *    rows in 8-pixel AVX2 spans where the CPU has them, ps_roi_pool.isa 1 or 2) and sum every RoI
 *    of the image from it, one vector addition per pixel per four output channels (per eight
 *    with AVX2, dk__psp_pool_block_avx2: the forward's medians 6-8% lower on the bench's case,
 *    in a C harness with both builds alternating, six runs, 2026-11-29), each lane
 *    dk_roi_pool_avg's terms in its order, divided by the same area (a vector division rounds each
 *    lane as the scalar one does). The cost model takes blocks when a bin's pixels over all RoIs
 *    number at least one per DK__PSP_PIXELS_PER_PIXEL pixels of the map (the copy is a pass over
 *    the planes; the bench has about one per 2 pixels) and the block fits in
 *    DK__RP_BLOCK_MAX_BYTES. The blocks (ps_roi_align's as well) come from the host cache (Note
 *    [Host output cache]): from the call's arena they were new pages every call on two threads
 *    (some 400 page faults per forward of the bench, which made two threads slower than one). The
 *    sums go to a stage and then to the output in a second pass (Note [Staged outputs]).
 *  - planes: a task per output channel c and block of RoIs (DK__PSP_ROIS, fewer where that would
 *    leave threads without work), sweeping the PH PW input planes of c and pooling every RoI of the
 *    block from each (dk_roi_pool_avg), prefetching the next plane of every image a line or two per
 *    RoI: it reads only the lines under the RoIs.
 * The backward, a task per bin row ph and output channel c, which owns input channels
 * (c PH + ph) PW + pw for every pw (with the AVX2 additions two output channels, c and c + 1, a
 * task: dk__psp_grad_image_avx2), two ways:
 *  - buffered planes (every layout but 0, where a thread's planes take at most
 *    DK__PSP_PLANES_MAX_BYTES): for each image its PW planes are zeroed in a per-thread buffer (95
 *    KB a channel for the bench, in L2), each RoI of the image adds its share, g / area, over its PW bins in
 *    order of k, rounded to the storage type after every addition as in place (float32 with
 *    AVX-512 where ps_roi_pool.isa is 2: one masked 16-lane addition per bin row,
 *    dk__psp_grad_image; with AVX2 (isa 1, the default, PW <= 8), a RoI's PW shares from one
 *    8-lane division and one 8-lane addition per bin row, +0 in the lanes past the bin,
 *    dk__psp_grad_image_avx2; each pixel still gets its one addition), and the planes are written
 *    into grad_input once, streamed where it is large (Note [Streaming stores]): grad_input is
 *    written once and never read, where the in-place planes memset it and then read-modify-write
 *    the lines under the bins. Float32 planes streamed
 *    with AVX2 write the buffer 0 behind them (dk__rp_stream_run32_clear_avx2), so that only a
 *    thread's first planes take a memset: the memsets were 5% of the training step's samples, and
 *    the backward's minima went 1.43-1.50 -> 1.31-1.38 ms (C harness, 2026-11-28, four runs).
 *  - in place (layout 0, and larger maps): the planes zeroed in every image (one memset per image
 *    for contiguous planes: all-zero bits are +0 in every dtype), then each RoI's share added to
 *    grad_input itself, RoIs in order.
 * (A backward on channels-last blocks, forced-only, took half the planes' instructions but no less
 * time, 4.1-4.6 ms against 3.6-4.2 ms, and was dropped for the buffered planes. Also dropped,
 * 2026-11-29: streaming each image's planes while the next image's RoIs are added, so that the
 * writes to memory would overlap the additions. That took two buffers a thread, and a part of
 * the last planes went out every RoI or every 8 RoIs. In a C harness, both builds alternating, 41
 * calls each after 128 MB written: medians 4.5-4.7 ms against 3.6-3.9 ms streaming every RoI,
 * and 4.58-4.71 ms against 4.18-4.46 ms every 8 RoIs, three runs each. The non-temporal stores
 * among the additions slowed the additions by more than the overlap saved. Two more were measured
 * and dropped later that day, with the AVX2 additions; a C harness, both builds alternating, 61
 * calls each, medians:
 *  - Walking a band of 4 rows at a time, so that a walk's lines stay in L1 (the 190 KB of a
 *    task's planes do not): each image's bins of row ph sorted by band once a call, a bin over two
 *    bands cut in two, the RoIs in order within a band (the same bits), and each band's rows
 *    streamed to grad_input as soon as its walks were done. In a stand-alone model with the
 *    planes in cache, the walks alone took 0.96-1.13 ms banded against 1.34-1.66 ms. In the
 *    backward they gained nothing: 2.31-3.39 ms against 2.29-3.01 ms after 64 MB written and 64
 *    MB read, as _disturb() leaves the caches (six runs, slower in every one), and 2.77-4.18
 *    against 2.98-3.77 ms after 128 MB written (nine runs, either way). Timed inside it (rdtsc),
 *    the walks took about 1 ms a call, the stream 1.5 ms, the shares 0.75 ms.
 *  - Finding every share in a pass of its own before the tasks, reading the gradient once in
 *    order into a [c PH + ph][i][8] table that each task then reads in order: the pass took as
 *    long as the tasks' own shares had (1.5-1.9 M cycles a call against 1.7-2.5 M), with its
 *    table's stores cached or streamed, and the backward's medians moved by -0.26 to +0.04 ms
 *    (six runs after 128 MB written). What the shares wait on was not pinned down: the divisions
 *    take about 5 cycles each in a loop of their own (0.08 ms a call), and with the gradient read
 *    into cache beforehand the tasks' own shares still took 1.4-1.9 M cycles. A sampling profile
 *    puts a third of the additions' samples on the two divisions, but they are not what costs:
 *    the backward with each division a multiplication (wrong bits, timing only) took medians
 *    -0.09 to +0.11 ms from HEAD's, and with the gradients' masked loads plain ones -0.08 to
 *    +0.03 ms (four runs each of 41 calls after 128 MB written, both builds alternating,
 *    2026-11-29).)
 * On a CPU without AVX-512 (a 2-core AMD EPYC VM, AVX2, 2026-11-27, the bench's case, one thread,
 * thread CPU time of the backward after _disturb(), the two switched per call in one process, 41
 * calls each, four runs): the AVX2 additions take medians of 3.1-4.0 ms against 4.3-5.4 ms pixel by
 * pixel (minima 2.4-3.0 against 2.9-3.2). Pixel by pixel, perf's samples sat on the division,
 * whose result the next addition waited for, and on the load of the gradient (a line per RoI);
 * a first AVX2 version that built the division's lanes in memory lost much of the gain to the
 * vector load of eight scalars just stored. There the plane-major forward was tried with 8-lane
 * AVX2 gathers (each half of a group over its own window, the same bits): 3.7-4.4 ms against the
 * blocks' 2.6-2.8 ms (medians; 41 calls each way, in one process), so the cost model keeps the
 * blocks without AVX-512 and the AVX2 gathers were not kept.
 * Every way computes every output element in one task, and every grad_input element receives
 * torchvision's additions in torchvision's order (its backward walks the output in order of k), on
 * any thread count, with no two tasks on one element: the same bits.
 * Measured on bench_roi_pool.py's case (2 x 490 x 50 x 68, 512 RoIs, 7 x 7 bins, 10 output
 * channels, one thread). Before the plane-major forward: 33.5M instructions on the planes, 12.1M on
 * blocks with the AVX2 copy (the copy 5.6M, the sums 5.8M, the tables 0.6M), 1.5-2.1 ms, of which
 * the copy about half. How much of the map must be read: a bin's pixels over all RoIs of an image
 * cover 34% of its plane's pixels but 86% of its 64-byte lines, so the forward reads the map about
 * whole either way. Plane-major (2026-11-27, load average 1.3-2.8 from other sessions, thread CPU
 * time): 190,610 gathers a call (47% of their lanes used), 1.0-1.4 ms when the map is in cache and
 * 2.0-2.2 ms after _disturb() (blocks: 1.7 / 2.4-2.6 ms). Its memory floor: 11.4 MB of lines at the
 * 10-12.7 GB/s one thread reads here after the same _disturb() (a 13 MB torch sum, 1.05-1.3 ms),
 * 0.9-1.1 ms, against torchvision's 9.6-10 ms: 10x is the floor itself. The backward on buffered
 * planes: 2.7-3.0 ms against 3.7-4.7 ms in place (memset and read-modify-write); its floor is
 * writing 13.3 MB (7-10 GB/s here), 1.3-1.9 ms, so forward + backward cannot pass about 2.3-3 ms,
 * against torchvision's 17 ms: the floor forbids 10x there (it allows about 6-7x).
 * Those floors were a busy day's. On 2026-11-28 (the AMD host: Zen 3, AVX2, 512 KB of L2 a core)
 * one thread read 13.3 MB at 17.5-18.6 GB/s and streamed it out at 21-22 GB/s (a C loop after
 * 128 MB written elsewhere: 0.6-0.76 ms each), and the step was bound by its instructions instead:
 * 31M a forward and backward (callgrind) at an estimated 2-3 a cycle; the backward's additions took the same
 * time with their buffer confined to L1 (a test build), and prefetching the next task's planes or
 * the copy's rows ahead changed nothing or lost. Three changes took it to 21M: the staged outputs
 * (the pooling loop 8.2M -> 3.2M, and 0.5M to move the stage), the AVX2 stream of the backward's
 * planes (dk__ps_stream_run: 6.7M -> 1.7M) and the additions compiled per PW
 * (dk__psp_grad_image_avx2: 9.3M -> 4.5M). The training step of bench_roi_pool.py's case (one
 * process, 41 calls, minima): 3.08 ms staged, 3.28 ms with ps_roi_pool.stage 0, where before the
 * other two changes the same script gave 3.78-4.39 ms (three runs); a C harness with the builds
 * alternating (four runs of 41 calls after 128 MB written): forward medians 1.59-2.31 ms against
 * 1.68-2.58 ms, backward 1.57-1.89 ms against 1.86-2.62 ms.
 *
 * Note [RoIAlign's position-sensitive form on a CPU]
 * Output channel c's bin (ph, pw) reads input plane (c PH + ph) PW + pw only, so a RoI's 7 x 7
 * bins and 10 channels read 490 planes, a few pixels on each, 13.6 KB apart: walked a RoI at a
 * time (torchvision's order, and dkit's until issue 22) every bin is a cache miss. Both passes
 * are instead a task per (image, bin, block of DK__RP_CHANNELS output channels), which serves
 * every RoI of the image in order: its planes are the block's, and no other task's.
 *  - Channels-last blocks (the usual way): the task copies its planes (dk__ps_block_load, shared
 *    with ps_roi_pool), four rows of four at a time (dk_transpose4; float32 in 8-pixel AVX2
 *    spans where the CPU has them, ps_roi_pool.isa), into a per-thread [H][W][L] buffer in the compute type (L, the
 *    channels rounded up to whole 4-lane vectors; 163 KB for the bench's 10 channels of 50 x
 *    68, held in L2), and each sample's four taps are then four vector loads per four channels.
 *    The forward sums w1 v1 + w2 v2 + w3 v3 + w4 v4 per lane and adds it to the lane's sum,
 *    dk_roi_align_forward_avg's terms in its order; the backward adds each tap's share, g w /
 *    count per lane (dk_ps_roi_align_share; (g w) 2^-k where count is 2^k, the same bits), tap
 *    by tap as torchvision does (two taps are one pixel at an edge), to a zeroed buffer, and
 *    writes the buffer back once, streamed when grad_input is large (Note [Streaming stores];
 *    it also gets huge pages, Note [Huge pages for large outputs]): through whole planes where
 *    grad_input's planes are dense (ps_roi_align.grad_planes 1, and a thread's DK__RP_CHANNELS
 *    planes within DK__PSP_PLANES_MAX_BYTES, ps_roi_pool's bound for its buffered planes:
 *    dk__psa_grad_store turns the block into dense planes of the storage type in a second
 *    per-thread buffer from the host cache, float32 in dk_cl_scatter32's AVX2 tiles, and writes
 *    each plane as one run, ps_roi_pool's dk__ps_stream_run), else a row of four planes at a
 *    time (dk__ps_block_store). 16-bit maps are computed in float32 in the buffer and rounded
 *    once when stored.
 *  - Channel planes: the same tasks, each channel's samples read from (or added to) its plane in
 *    place, scalar; 16-bit gradients add in per-thread float planes (cx->scratch). It costs no
 *    copy, so it serves a map that few samples touch, and one whose block would pass
 *    DK__RP_BLOCK_MAX_BYTES.
 * The blocks come from the host cache, as ps_roi_pool's (Note [Position-sensitive RoIPool on a
 * CPU]). The cost model (ps_roi_align.layout -1; 0 and 1 force a way, Note [Tunables]) takes blocks
 * when a bin's samples over all RoIs number at least one per DK__PSA_SAMPLES_PER_PIXEL pixels of
 * the map (the copy is a pass over the planes; the bench has about one sample per 2.3 pixels).
 * Every RoI's axes, count and 1-D taps (rows[ph grid + iy], cols[pw grid + ix]) are found once
 * per call (torchvision finds them per output element and sample; the tables are dropped past
 * DK__PSA_TABLE_TAPS, or with ps_roi_align.tap_tables 0, and each task finds its own: the same
 * values), and a task forms a bin's 2-D taps DK__PSA_SAMPLES at a time. Each output element, and
 * each grad_input element, gets torchvision's terms in torchvision's order on any number of
 * threads, whichever way is taken: the same bits. RoIs with no image or no samples are written 0
 * by the forward and skipped by the backward. Measured on the bench (one thread, CPU time):
 * forward 10 ms before, 2.4-2.6 ms now, torchvision 30-41 ms; backward 13-15 ms before,
 * 6.3-6.8 ms now (torchvision 30-37 ms), where a third is writing the 13 MB grad_input and much
 * of the rest the divisions by a count that is no power of two (four per sample and channel).
 * Since (branch ps-speed): the backward block's additions specialized by the number of 4-lane
 * vectors (the gradients held in registers, the power-of-two test once per RoI): its worker's
 * instructions 27.2M to 15.8M (callgrind), forward + backward CPU time 13.1 ms to 12.1-12.4 ms
 * at a load average of 3.0-3.4; the divisions are unchanged (each is one lane's g w / count,
 * whose bits a multiplication by a reciprocal would not keep).
 * Since (branch psab, 2026-11-27 15:57-16:09 UTC, load average 0.9-2.1 from other sessions, thread
 * CPU time, the two stores switched per call in one process, 61 calls each, after 128 MB written
 * and read elsewhere): the block's store through whole planes. A row of four planes at a time
 * streamed the block's 10 planes side by side, a 272-byte row of each in turn, so the lines
 * that straddle two rows (two of every four or five) left the write-combining buffers half
 * full before the next row came to fill them: the store alone (the additions and the memset
 * skipped) took 3.9-4.3 ms (medians of two runs; minimum 3.8 ms: 3.5 GB/s for 13.3 MB). Whole
 * planes, each one run of whole lines, take 2.1-3.1 ms (minimum 2.0 ms), near the floor of
 * writing 13.3 MB at the 7-10 GB/s one thread writes here (1.3-1.9 ms), for an extra pass over a
 * 136 KB buffer in L2. The backward: medians 4.8-8.1 ms
 * against 6.7-9.5 ms (1.4-1.9 ms less in every run). What is left: the additions and the
 * memset 2.0-2.2 ms (the divisions by a count that is no power of two), the plan and the
 * call 0.6-0.7 ms, and the store at its floor.
 */
/*
 * Note [AVX-512 for position-sensitive pooling]
 * ps_roi_pool's two AVX-512 ways, the plane-major forward's 16-lane gathers (dk__psp_gather) and
 * the backward's masked 16-lane additions (dk__psp_grad_image), were the defaults on CPUs with
 * AVX-512 (ps_roi_pool.isa 2) from their first measurement, on the first host (an Intel VM):
 * there plane-major took 2.0-2.2 ms against the blocks' 2.4-2.6 ms. The blocks have since been
 * made faster (staged outputs, copying ahead, the copy compiled per number of lanes), and the AVX2
 * additions (two channels a task, the shares first, compiled per PW) came after the AVX-512 ones
 * and were never set against them. On an AMD EPYC with AVX-512 (Zen 4: family 25, model 17, 1 MB
 * of L2 a core; 2026-11-29, bench_roi_pool.py's case, one thread, after 64 MB written and 64 MB
 * read, in one process with the settings switched per call, 15 calls each, three runs), the
 * forward took medians of 3.11-3.15 ms with isa 2 (plane-major) and 1.33-1.38 ms with isa 1 (the
 * blocks), and the training step 4.97-5.09 ms against 2.69-2.72 ms: the backward 1.9 ms with the
 * AVX-512 additions, 1.35 ms with the AVX2 ones (torchvision's step took 15-18 ms). A likely
 * reading, not measured apart: Zen 4's gathers cost about a load per lane, and it runs 512-bit
 * operations as two 256-bit halves, so 16 lanes buy no more than the AVX2 ways' 8. So the
 * default is isa 1 on every CPU, and isa 2 keeps both AVX-512 ways for a host where they may win;
 * no Intel host with AVX-512 was at hand to measure them again against today's blocks.
 */
#ifndef DK_PS_ROI_POOL_CPU_H
#define DK_PS_ROI_POOL_CPU_H

#include "roi_pool_tiles_cpu.h" /* and roi_pool_cpu.h */

/* The position-sensitive backwards: grad_input (cx->img, of `elem`-byte elements) is about to be
 * written whole, once: huge pages hinted where it is large, and then worth streaming (Note [Huge
 * pages for large outputs], Note [Streaming stores] in dk_large_output.h): returns whether. */
static inline bool dk__ps_prepare_grad_input(dk__rp_ctx *cx, size_t elem)
{
    int64_t xs[4];
    dk__rp_strides(cx->img, xs);
    dk_large_output gl;
    return dk_large_output_prepare(&gl, dk_tensor_data(cx->img), 4, cx->img->shape, xs, elem, false);
}

/* ps_roi_align: the samples of a bin a task finds at a time (Note [RoIAlign's position-sensitive
 * form on a CPU]); an adaptive grid of 8 x 8 (a bin over 7 pixels each way) fits. */
#define DK__PSA_SAMPLES 64

/* ps_roi_align: the most 1-D taps a call keeps in its tables (32 or 48 bytes each). */
#define DK__PSA_TABLE_TAPS ((int64_t)1 << 20)

/* ps_roi_align's cost model: channels-last blocks when a bin's samples over the RoIs number at
 * least one per DK__PSA_SAMPLES_PER_PIXEL pixels of the map (Note [RoIAlign's position-sensitive
 * form on a CPU]). */
#define DK__PSA_SAMPLES_PER_PIXEL 4

/* ps_roi_pool's cost model: channels-last blocks when a bin's pixels over the RoIs number at least
 * one per DK__PSP_PIXELS_PER_PIXEL pixels of the map (Note [Position-sensitive RoIPool on a CPU]). */
#define DK__PSP_PIXELS_PER_PIXEL 4

#if DK__RP_AVX2
/* Part of dk__ps_block_load's row for float32 planes, with 8-lane AVX2 vectors (Note [AVX2 spans]
 * in box_iou_cpu.h; ps_roi_pool.isa picks): pixels w .. w + 7 of the L planes' rows src[j] to
 * row[w L + j], each four planes' rows in 4 x 4 transposes in both 128-bit halves at once, half the
 * shuffles of the 4-lane ones. Elements moved, not computed. L (4, 8, 12 or 16: whole 4-lane
 * vectors) a constant in each caller (dk__ps_row_load_avx2), so that the stores' offsets are
 * too: with L a variable, each span of four planes took 33 instructions, 25 now (callgrind, Note
 * [Copying ahead]). Returns the pixels done, a multiple of 8; the caller does the rest. */
__attribute__((target("avx2"), always_inline)) static inline int64_t
dk__ps_row_load_avx2_l(const float *const *src, float *row, int64_t W, const int L)
{
    const int64_t spans = W / 8 * 8;
    for (int u = 0; u < L; u += 4) {
        const float *s0 = src[u], *s1 = src[u + 1], *s2 = src[u + 2], *s3 = src[u + 3];
        float *p = row + u;
        for (int64_t w = 0; w < spans; w += 8, p += 8 * L) {
            const __m256 r0 = _mm256_loadu_ps(s0 + w), r1 = _mm256_loadu_ps(s1 + w);
            const __m256 r2 = _mm256_loadu_ps(s2 + w), r3 = _mm256_loadu_ps(s3 + w);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 v[4] = {_mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
                                 _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2))}; /* pixels i | 4 + i */
            for (int i = 0; i < 4; i++)
                _mm_storeu_ps(p + i * L, _mm256_castps256_ps128(v[i])),
                    _mm_storeu_ps(p + (4 + i) * L, _mm256_extractf128_ps(v[i], 1));
        }
    }
    return spans;
}

__attribute__((target("avx2"))) static int64_t dk__ps_row_load_avx2(const float *const *src, float *row, int L,
                                                                    int64_t W)
{
    switch (L) {
    case 4: return dk__ps_row_load_avx2_l(src, row, W, 4);
    case 8: return dk__ps_row_load_avx2_l(src, row, W, 8);
    case 12: return dk__ps_row_load_avx2_l(src, row, W, 12);
    default: return dk__ps_row_load_avx2_l(src, row, W, 16);
    }
}
#endif

/* The pixels of one axis of a ps_roi_pool bin, e = {lo, hi}: none when empty. */
static inline int64_t dk__psp_len(const int64_t e[2]) { return e[1] > e[0] ? e[1] - e[0] : 0; }

/* ps_roi_pool's plane-major forward (AVX-512): each image's RoIs (cx->image_rois's lists) into
 * cx->ps_order, by the rows, then the columns of their largest bins (a stable counting sort of keys
 * up to 15 x 15), so that 16 consecutive ones make a group whose window (dk__psp_group) is close to
 * each of its bins. The order is free: every output element is one RoI's, on its own. */
static inline void dk__psp_order(dk__rp_ctx *cx)
{
    const int64_t K = cx->K, *rows = cx->bin_table, *cols = cx->bin_table + cx->PH * K * 2;
    const int64_t *list = cx->image_rois + cx->N + 1;
    for (int64_t n = 0; n < cx->N; n++) {
        int64_t count[257] = {0};
        const int64_t first = cx->image_rois[n], last = cx->image_rois[n + 1];
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t i = first; i < last; i++) {
                const int64_t k = list[i];
                int64_t r = 0, c = 0;
                for (int64_t ph = 0; ph < cx->PH; ph++) {
                    const int64_t len = dk__psp_len(rows + (ph * K + k) * 2);
                    r = len > r ? len : r;
                }
                for (int64_t pw = 0; pw < cx->PW; pw++) {
                    const int64_t len = dk__psp_len(cols + (pw * K + k) * 2);
                    c = len > c ? len : c;
                }
                const int64_t key = (r < 15 ? r : 15) * 16 + (c < 15 ? c : 15);
                if (pass == 0) count[key + 1]++;
                else cx->ps_order[first + count[key]++] = k;
            }
            if (pass == 0)
                for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        }
    }
}

/* ps_roi_pool's backward on buffered planes: the most bytes of a thread's PW planes (Note
 * [Position-sensitive RoIPool on a CPU]); a larger map takes the in-place planes. Also the most of
 * a thread's DK__RP_CHANNELS planes in ps_roi_align's backward through whole planes (Note
 * [RoIAlign's position-sensitive form on a CPU]); a larger map is stored a row at a time. */
#define DK__PSP_PLANES_MAX_BYTES ((int64_t)1 << 20)

/* ps_roi_align's lanes in a channels-last block of nc channels: whole 4-lane vectors. */
#define DK__PSA_LANES(nc) (((nc) + 3) / 4 * 4)

/* ps_roi_pool's plane-major forward (Note [Position-sensitive RoIPool on a CPU]): a group of up
 * to 16 RoIs of one image, one lane each, and their bins at one (ph, pw): the offset of each bin's
 * first pixel in its plane, its rows and columns (0 for a lane with no bin: nothing is loaded), the
 * divisor (its area; 1 where there is no bin, so that the lane's +0 stays +0), and the window that
 * covers every lane's bin. */
typedef struct {
    _Alignas(64) int32_t off[16];
    int32_t rows[16], cols[16];
    float area[16];
    int32_t max_rows, max_cols, n;
    const int64_t *k; /* the lanes' RoIs (n of them) */
} dk__psp_group;

/* The most groups one image's RoIs make, K RoIs over N images. */
#define DK__PSP_GROUPS(K, N) ((K) / 16 + (N) + 1)

/* ps_roi_pool's buffered backward (Note [Position-sensitive RoIPool on a CPU]): BODY for each bin of
 * row ph of image n's RoIs list[first .. last), RoIs in order, then pw: k, pw and the bin's rows
 * [h0, h1) and columns [w0, w1) in scope, empty bins skipped. hb: the rows of ph, cols the columns
 * of every pw (dk__psp_table). BODY adds the RoI's share, grow[k gk + pw gw] / area, to the task's
 * plane pw in buf (dense H x W each). A macro: the same walk for every storage type and for the
 * AVX-512 additions. */
#define DK__PSP_GRAD_BINS(BODY)                                                         \
    for (int64_t i = first; i < last; i++) {                                            \
        const int64_t k = list[i], h0 = hb[2 * k], h1 = hb[2 * k + 1];                  \
        if (h1 <= h0) continue;                                                         \
        for (int64_t pw = 0; pw < PW; pw++) {                                           \
            const int64_t w0 = cols[(pw * K + k) * 2], w1 = cols[(pw * K + k) * 2 + 1]; \
            if (w1 <= w0) continue;                                                     \
            BODY                                                                        \
        }                                                                               \
    }

#if DK__RP_AVX2
/* The group's sums on two float32 planes (p1 may be p0: the same sums twice), one 16-lane gather
 * per pixel of the window, masked to each lane's bin: each lane adds dk_roi_pool_avg's terms in its
 * order (rows, then columns) from +0, and +0 where its bin has no such pixel (+0 added to a sum
 * that started at +0 never changes it), then divides by the same area: the same bits. Offsets in
 * int32: the caller checked that the plane's span fits. */
__attribute__((target("avx512f"))) static void dk__psp_gather(const float *p0, const float *p1, int64_t sy, int64_t sx,
                                                              const dk__psp_group *g, float *r0, float *r1)
{
    const __m512i off = _mm512_load_si512(g->off), nr = _mm512_load_si512(g->rows);
    const __m512i nc = _mm512_load_si512(g->cols);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    for (int32_t i = 0; i < g->max_rows; i++) {
        const __mmask16 rm = _mm512_cmpgt_epi32_mask(nr, _mm512_set1_epi32(i));
        for (int32_t j = 0; j < g->max_cols; j++) {
            const __mmask16 m = rm & _mm512_cmpgt_epi32_mask(nc, _mm512_set1_epi32(j));
            const __m512i at = _mm512_add_epi32(off, _mm512_set1_epi32((int32_t)(i * sy + j * sx)));
            a0 = _mm512_add_ps(a0, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at, p0, 4));
            a1 = _mm512_add_ps(a1, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at, p1, 4));
        }
    }
    const __m512 area = _mm512_load_ps(g->area);
    _mm512_storeu_ps(r0, _mm512_div_ps(a0, area)), _mm512_storeu_ps(r1, _mm512_div_ps(a1, area));
}

/* ps_roi_pool's buffered backward for float32 (Note [Position-sensitive RoIPool on a CPU]): image
 * n's RoIs in order (DK__PSP_GRAD_BINS), one masked 16-lane addition per bin row where the bin is
 * at most 16 pixels wide (each pixel still gets its one addition, in the same order; no branch per
 * pixel), pixel by pixel where it is wider. */
__attribute__((target("avx512f"))) static void dk__psp_grad_image(float *buf, int64_t H, int64_t W, int64_t K,
                                                                  int64_t PW, const int64_t *list, int64_t first,
                                                                  int64_t last, const int64_t *hb, const int64_t *cols,
                                                                  const float *grow, int64_t gk, int64_t gw)
{
    DK__PSP_GRAD_BINS({
        const float d = grow[k * gk + pw * gw] / (float)((h1 - h0) * (w1 - w0));
        float *p = buf + pw * H * W + h0 * W + w0;
        if (w1 - w0 <= 16) {
            const __mmask16 m = (__mmask16)((1u << (w1 - w0)) - 1);
            const __m512 dv = _mm512_set1_ps(d);
            for (int64_t h = h0; h < h1; h++, p += W)
                _mm512_mask_storeu_ps(p, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), dv));
        } else
            for (int64_t h = h0; h < h1; h++, p += W)
                for (int64_t w = 0; w < w1 - w0; w++) p[w] += d;
    });
}
/* The same additions with AVX2, for RoIs of at most 8 bins a row (PW <= 8): a RoI's PW shares come
 * from one 8-lane division (each lane rounds as the scalar division does), and each bin row of at
 * most 8 pixels is one unmasked 8-lane load, addition and store in which the lanes past the bin add
 * +0. That is the identity on every element of the buffer: it starts at +0 and a sum of rounded
 * additions from +0 is never -0 (x + -x is +0 when rounding to nearest), so the bits are those of
 * the addition per pixel. The lanes may reach 7 elements past the thread's planes, into its
 * DK__PSP_GRAD_PAD (zeroed with them); with two channels, the first channel's lanes may reach into
 * the second's first plane, the same identity, in the same thread.
 * Two output channels a task, and the shares before the walks: a task's RoIs are walked once for
 * both channels (the same rows and columns), and DK__PSP_GRAD_CHUNK RoIs' shares are found first, a
 * RoI's loads of its gradients (C_out PH PW elements apart, a line per RoI and channel, from memory
 * after other work) and its divisions one after another with nothing waiting on them, then the
 * walks, which read the shares from L1. Before, each walk's stores waited on its load and division,
 * after the mispredicted end of the last walk's rows: a sampling profile put a third of the
 * additions' samples on the division. In a stand-alone model of the additions (the bench's bins,
 * their buffer in cache) the walks took 1.9-2.5 ms one channel at a time and 1.2-1.5 ms two at a
 * time with the shares first; in the C harness (both builds alternating after 128 MB written, 61
 * calls each, four runs, 2026-11-29, a slow hour) the backward's medians went 3.87-4.70 -> 3.66-4.02
 * ms (6-14% less), its minima unchanged (3.06-3.84 -> 3.10-3.50 ms): the stream into grad_input
 * is the rest, and it is near its floor: in a stand-alone loop (the bench's 140 runs of 7 planes,
 * after 128 MB written) streaming them from such a buffer took medians of 0.95-1.13 ms, and
 * streaming one non-zero constant over the same 13.3 MB 0.84-0.87 ms (zeros went faster still,
 * 0.58-0.71 ms, so a floor measured with zeros would mislead). Four channels a task took no less
 * time than two; prefetching the gradients in the first pass changed nothing. Nor did 4-lane
 * additions for a RoI whose bins are all at most 4 wide (457 of the bench's 512 RoIs), which
 * cross a line in 3 of 16 places, not 7 (2026-11-29, ten runs of 61 calls in a C harness, both
 * builds alternating): the backward's median 0.06 ms lower, the median of the runs' differences,
 * which went from -0.17 to +0.15 ms; the same build against itself, -0.01 ms (-0.21 to +0.12).
 * Within the noise, so not kept.
 * A RoI's columns come from cols8 (dk__psp_cols8: its PW first columns' offsets, its PW widths and
 * the widths' complements to 8, as three 8-lane int32 rows), so that its areas, shares and masks are
 * a few vector operations: gathering them
 * from the [PW][K] table a lane at a time took 390 instructions per RoI and task, 40% of the
 * backward's (callgrind, bench_roi_pool.py's case).
 * The body is compiled once per PW and NC (dk__psp_grad_roi_avx2's constants): a RoI's PW masked
 * shares and bin addresses are set up once, in registers, and each of its rows (the same rows in
 * every bin of row ph) is then PW loads, additions and stores with no branch per bin; an empty bin
 * (width 0, first column 0) adds +0 to the first 8 pixels of each of its rows, the identity. A RoI
 * with a bin wider than 8 takes the bin-by-bin loop. That took the additions from 258 to 124
 * instructions per RoI and task (callgrind, bench_roi_pool.py's case: PW = 7, bins of 1-5 rows). */
#define DK__PSP_GRAD_PAD 16

/* dk__psp_grad_image_avx2's rows of columns: for each RoI k, DK__PSP_COLS8 int32 at
 * cols8 + DK__PSP_COLS8 k, three 8-lane rows over pw < 8: the offset of its bin's first column in
 * the task's PW planes, pw H W + w0 (pw H W where the bin is empty, and 0 past PW); its width n (0
 * past PW and for empty bins); and 8 - n (dk__psp_grad_roi_avx2's mask), from the [PW][K] table of
 * dk__psp_table. PW <= 8 and PW H W < 2^31 (DK__PSP_PLANES_MAX_BYTES). */
#define DK__PSP_COLS8 24
static inline void dk__psp_cols8(const int64_t *cols, int64_t K, int64_t PW, int64_t HW, int32_t *cols8)
{
    for (int64_t k = 0; k < K; k++)
        for (int64_t pw = 0; pw < 8; pw++) {
            const int64_t w0 = pw < PW ? cols[(pw * K + k) * 2] : 0, w1 = pw < PW ? cols[(pw * K + k) * 2 + 1] : 0;
            const int32_t n = w1 > w0 ? (int32_t)(w1 - w0) : 0;
            cols8[k * DK__PSP_COLS8 + pw] = pw < PW ? (int32_t)(pw * HW + (n > 0 ? w0 : 0)) : 0;
            cols8[k * DK__PSP_COLS8 + 8 + pw] = n;
            cols8[k * DK__PSP_COLS8 + 16 + pw] = 8 - n;
        }
}

/* The RoIs dk__psp_grad_rois_avx2 finds shares for at a time (a thread's stack: 16 KB at NC = 2). */
#define DK__PSP_GRAD_CHUNK 256

/* One RoI's bins of row ph (rows [h0, h1), h1 > h0) in the task's PW planes at buf (HW elements
 * apart, rows W elements apart) and, where NC is 2, in the second channel's PW planes at buf + cs;
 * c its row of dk__psp_cols8, d[8 j + pw] channel j's share of bin pw: see
 * dk__psp_grad_image_avx2. */
__attribute__((target("avx2"), always_inline)) static inline void
dk__psp_grad_roi_avx2(float *buf, int64_t W, int64_t h0, int64_t h1, const int32_t *c, const float *d, int64_t cs,
                      const int PW, const int NC)
{
    float *row = buf + h0 * W;
    const __m256i nv = _mm256_load_si256((const __m256i *)(const void *)(c + 8)); /* 0 past PW, empty bins */
    if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(nv, _mm256_set1_epi32(8))))) {
        for (int j = 0; j < NC; j++) /* a bin wider than 8: pixel by pixel */
            for (int pw = 0; pw < PW; pw++)
                for (int64_t r = j * cs; r < j * cs + (h1 - h0) * W; r += W)
                    for (int32_t w = 0; w < c[8 + pw]; w++) row[c[pw] + r + w] += d[8 * j + pw];
        return;
    }
    /* lane < n: a window into 8 ones and 8 zeros, at 8 - n */
    static const int32_t ones_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    __m256 share[2][8];
    float *at[8];
    for (int pw = 0; pw < PW; pw++) { /* unrolled: PW and NC are constants */
        const __m256 m = _mm256_loadu_ps((const float *)(const void *)(ones_zeros + c[16 + pw]));
        for (int j = 0; j < NC; j++) share[j][pw] = _mm256_and_ps(m, _mm256_broadcast_ss(d + 8 * j + pw));
        at[pw] = row + c[pw];
    }
    for (int64_t r = 0; r < (h1 - h0) * W; r += W)
        for (int pw = 0; pw < PW; pw++)
            for (int j = 0; j < NC; j++)
                _mm256_storeu_ps(at[pw] + j * cs + r,
                                 _mm256_add_ps(_mm256_loadu_ps(at[pw] + j * cs + r), share[j][pw]));
}

/* Image n's RoIs list[first .. last) into buf's PW planes (and NC = 2: the second channel's, gradients
 * grow + g1, at buf + cs), RoIs in order (DK__PSP_GRAD_BINS's walk, PW and NC constants in each
 * caller: dk__psp_grad_image_avx2), DK__PSP_GRAD_CHUNK RoIs at a time: first their shares, then
 * their walks, so that a walk's stores wait on no load of a gradient and no division. */
__attribute__((target("avx2"), always_inline)) static inline void
dk__psp_grad_rois_avx2(float *buf, int64_t W, const int64_t *list, int64_t first, int64_t last, const int64_t *hb,
                       const int32_t *cols8, const float *grow, int64_t g1, int64_t cs, int64_t gk, int64_t gw,
                       const int PW, const int NC)
{
    const __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32(PW), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _Alignas(32) float d[DK__PSP_GRAD_CHUNK * 2 * 8];
    for (int64_t i0 = first; i0 < last; i0 += DK__PSP_GRAD_CHUNK) {
        const int64_t i1 = last - i0 < DK__PSP_GRAD_CHUNK ? last : i0 + DK__PSP_GRAD_CHUNK;
        for (int64_t i = i0; i < i1; i++) {
            const int64_t k = list[i];
            const int32_t *c = cols8 + k * DK__PSP_COLS8;
            const __m256i nv = _mm256_load_si256((const __m256i *)(const void *)(c + 8)); /* 0 past PW, empty bins */
            /* the area (h1 - h0) n, exact in int32 and float (a thread's planes hold at most 2^18
             * pixels: DK__PSP_PLANES_MAX_BYTES); 1 for an empty bin, whose share adds nowhere, and
             * for a RoI with no rows, which is not walked */
            const int32_t rows = hb[2 * k + 1] > hb[2 * k] ? (int32_t)(hb[2 * k + 1] - hb[2 * k]) : 1;
            const __m256 area = _mm256_blendv_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(nv, _mm256_set1_epi32(rows))),
                                                 _mm256_set1_ps(1.0f),
                                                 _mm256_castsi256_ps(_mm256_cmpeq_epi32(nv, _mm256_setzero_si256())));
            for (int j = 0; j < NC; j++) {
                __m256 g;
                if (gw == 1) g = _mm256_maskload_ps(grow + j * g1 + k * gk, in);
                else {
                    _Alignas(32) float gs[8] = {0};
                    for (int pw = 0; pw < PW; pw++) gs[pw] = grow[j * g1 + k * gk + pw * gw];
                    g = _mm256_load_ps(gs);
                }
                _mm256_store_ps(d + ((i - i0) * NC + j) * 8, _mm256_div_ps(g, area));
            }
        }
        for (int64_t i = i0; i < i1; i++) {
            const int64_t k = list[i], h0 = hb[2 * k], h1 = hb[2 * k + 1];
            if (h1 > h0)
                dk__psp_grad_roi_avx2(buf, W, h0, h1, cols8 + k * DK__PSP_COLS8, d + (i - i0) * NC * 8, cs, PW, NC);
        }
    }
}

/* NC (1 or 2) output channels' planes at once: buf's PW planes take grow's gradients, and where
 * NC is 2 the PW planes at buf + cs take grow + g1's. */
__attribute__((target("avx2"))) static void dk__psp_grad_image_avx2(float *buf, int64_t W, int64_t PW,
                                                                    const int64_t *list, int64_t first, int64_t last,
                                                                    const int64_t *hb, const int32_t *cols8,
                                                                    const float *grow, int64_t g1, int64_t cs, int NC,
                                                                    int64_t gk, int64_t gw)
{
#define DK__PSP_GRAD_PW(P, NC_) \
    dk__psp_grad_rois_avx2(buf, W, list, first, last, hb, cols8, grow, g1, cs, gk, gw, P, NC_)
#define DK__PSP_GRAD_NC(P)                  \
    case P:                                 \
        if (NC == 2) DK__PSP_GRAD_PW(P, 2); \
        else DK__PSP_GRAD_PW(P, 1);         \
        break;
    switch (PW) {
        DK__PSP_GRAD_NC(1)
        DK__PSP_GRAD_NC(2)
        DK__PSP_GRAD_NC(3)
        DK__PSP_GRAD_NC(4)
        DK__PSP_GRAD_NC(5)
        DK__PSP_GRAD_NC(6)
        DK__PSP_GRAD_NC(7)
    default:
        if (NC == 2) DK__PSP_GRAD_PW(8, 2);
        else DK__PSP_GRAD_PW(8, 1);
        break;
    }
#undef DK__PSP_GRAD_NC
#undef DK__PSP_GRAD_PW
}

#else
#define DK__PSP_GRAD_PAD 0
#endif

/*
 * Note [Storing ahead]
 * ps_roi_pool's channels-last forward task writes each RoI's outputs as its
 * block's channels of one bin: DK__RP_CHANNELS elements PH PW apart, each on a line of its own
 * that other tasks (the other bins) write too, so that every store misses L1 (a task touches a
 * line per RoI and channel: 160 KB for bench_roi_pool.py's case). perf put a quarter of
 * ps_roi_pool's pooling loop on those stores. So the task prefetches the lines of the RoI
 * DK__PSP_OUT_AHEAD places ahead in its list: measured 2026-11-28 (the AMD host, a C harness on
 * the bench's case, one thread, the builds alternating, medians of eight runs' minima) the
 * forward took 1.84 -> 1.72 ms with its map in cache and 2.3 -> 2.15 ms after 128 MB written
 * elsewhere. (A prefetch for reading: x86-64-v2, the baseline, has no PREFETCHW.) ps_roi_align's
 * forward, whose RoIs take more work each, measured no clear change (within this VM's noise), and
 * does not.
 */
#define DK__PSP_OUT_AHEAD 4

/*
 * Note [Copying ahead]
 * The channels-last copy (dk__ps_block_load) reads its 4-16 planes a row of each at a time: as
 * many streams, each a few 4 KB pages long (13.6 KB for bench_roi_pool.py's 50 x 68), which the
 * hardware prefetchers pick up afresh at every page. perf put half the copy's samples on its
 * loads. So at each row it prefetches the planes' row ps_roi_pool.copy_ahead (a tunable, default 2)
 * rows on, where the planes' columns are dense (each row one run). Measured 2026-11-28 (the AMD
 * host, one thread, bench_roi_pool.py's ps_roi_pool forward after 128 MB written elsewhere): a C
 * harness's medians 2.05-2.3 ms at 1-3 rows ahead against 2.33-3.45 ms without (three runs of 41
 * calls each); in one process, switched per call, 2.24-2.25 ms against 2.27-2.50 (two runs), and
 * ps_roi_align's forward 5.31-5.43 ms against 5.48-5.52 ms. Earlier (before the staged outputs
 * and the lighter additions) the same prefetch had measured no change.
 * Since 2026-11-29: each task finds its planes once, and the AVX2 spans are compiled per number
 * of lanes (dk__ps_row_load_avx2). The copy went from 7.3M to 5.6M instructions per forward of
 * the bench's case, the forward from 11.4M to 9.8M (callgrind). In time (a C harness, both builds
 * linked in and alternating, 41-61 calls each): within the noise after 128 MB written elsewhere
 * (medians -0.1 to +0.1 ms, eight runs of ps_roi_pool and ps_roi_align), 1-7% less with the map in
 * cache (six runs). The copy waits on memory (the block in L2 as much as the map: below), not on
 * its instructions. Issuing the prefetches four to an iteration, a loop with a third of the
 * instructions, was slower: the forward's medians +1-7% in five runs of five. Spread over the
 * copy's rows they keep pace with it; in bursts they do not. So it stays one prefetch per
 * iteration.
 * Also measured that day and dropped: reading the next task's planes ahead while a task pools
 * (each thread claiming its next task first, and prefetching a few of its lines per RoI). In
 * one process, switched per call, 41 calls each, three runs after 128 MB written: medians
 * 3.03-3.18 ms against 2.57-2.67 ms alongside the copy's own prefetch, 2.67-2.82 ms without it.
 * With the map in cache the forward still took 2.28-2.40 ms, against 2.57-2.67 ms after 128 MB
 * written: the forward is bound by the copy's and the sums' passes over the block in L2, not by
 * reading the map.
 * Three more ways were measured and dropped the next day (float32, the bench's case, one thread,
 * medians of 41 calls after 128 MB written; a C harness with both builds linked in, alternating,
 * unless said):
 *  - Summing each RoI's bin as soon as the copy has passed the bin's last row, the image's RoIs
 *    ordered by that row, so that the sums read rows still in L1. After every row: 2.9-3.7 ms
 *    against 2.2-2.6 ms; after every 8 rows: 3.4 against 2.7 ms. Copying every row first and
 *    changing only the order: 3.07-3.19 against 2.54-2.80 ms, and 2.60-2.62 against 2.32-2.40 ms
 *    with the map in cache. Out of order of k, the stage's stores miss where they had been a
 *    stream, even with its lines prefetched along the copy. The same with the stage written in
 *    order (2026-11-29): each row copied alone into an L1 buffer, each RoI's sums kept in an L1
 *    array in its image's order and staged in order of k after the last row, each row's RoIs
 *    from lists made once a call per (image, ph): the same bits, but 2.34-2.73 ms against
 *    2.22-2.51 ms (two runs), 2.63 against 2.35 ms with the map in cache; with every bin row
 *    summed as 4 masked pixels from entries built per task (no branch on its width, no chain of
 *    loads through the tables), 2.73-2.94 against 2.53-2.72 ms (three runs), 10.3M instructions a
 *    forward against the blocks' 8.2M (callgrind). Without the copy and the sums (the outputs
 *    wrong) either took 1.3-1.5 ms, the reading of the map, the tables and the unstaging: a floor
 *    under every way here; the copy and the sums took 1.1-1.4 ms over it.
 *  - Pooling each image's RoIs in order of their bins' shapes, so that the sums' short loops end
 *    where the branch predictor expects, with the stage written in that order: within the noise
 *    (four runs, 2.41-3.11 against 2.48-3.19 ms).
 *  - No copy: each bin summed from the planes in place, a task's 10 channels as 10 scalar chains,
 *    the next task's planes prefetched a few lines per RoI (a stand-alone C model of the
 *    forward): 2.6-3.6 ms, and 2.0-3.2 ms with the map in cache. One AVX2 gather per pixel for
 *    8 of the channels (and a masked one for the rest) costs about 10 ns a pixel on this host
 *    with the planes in L2: some 1.3 ms for the bench's 128K bin pixels, before reading the map.
 *    In the library itself (2026-11-29: the plane-major tasks, a gather per pixel per 8 channels,
 *    the next task's planes prefetched a few lines per RoI), 3.43-3.47 ms against 2.58-2.68 ms.
 *  - The copy's prefetches into L2 alone (prefetcht2) or past the caches (prefetchnta), not
 *    prefetcht0 (2026-11-29, ten runs of 41-61 calls): medians -0.19 to +0.09 ms, within the noise.
 *  - The copy four planes at a time, all rows of planes 0-3, then of 4-7, then 8-11, so that 4
 *    streams are read at once, not 10-16 (the same prefetch, 2 or 4 rows ahead, of those planes
 *    only; 2026-11-29, three runs of 41 calls, with a control run of the same build beside):
 *    medians +0.35-0.49 ms (2.48-3.16 against 2.08-2.79 ms; the control within 0.09 ms). Each
 *    pass then writes a third of every line of the 163 KB block, which stays in L2, where a row at
 *    a time writes its part of the block whole while it is in L1: the number of streams is not
 *    what the copy waits on.
 * Two more for the sums, 2026-11-29 (a C harness with the old build and the new one's two ways
 * alternating, 41 calls each), no better in any run, so dropped:
 *  - prefetching the block's first two rows of the next bin, one or two RoIs ahead (six runs after
 *    128 MB written): the forward's medians 2.41-3.13 against 2.45-2.91 ms without;
 *  - bins up to 4 pixels wide summed as 4 pixels, those past the bin read as +0 from a vector of
 *    zeros (the same bits, no branch on the width; three runs after 128 MB written, three with the
 *    map in cache): 2.56-3.21 against 2.35-3.09 ms.
 * And one on the Zen 4 host (Note [AVX-512 for position-sensitive pooling]; 2026-11-29, one
 * thread, settings switched per call in one process after 64 MB written and 64 MB read, 15 calls
 * each): copying the next task's block while pooling the current one, so that the copy's wait on
 * memory would overlap the sums (two blocks a thread, each thread claiming its next task first,
 * one row of the next block copied every RoIs / H RoIs pooled, or five rows every 5 RoIs / H, the
 * rows left after the last RoI; the same bits). The forward's medians 1.37-1.43 ms against
 * 1.23-1.31 ms copying and pooling in turn (three runs a row at a time, two five rows at a time,
 * slower in every one), so it was not kept:
 * the sums' loads of one block and the copy's stores into the other share L2, and the copy is
 * at 0.8 ms a forward already near reading the map alone (a 13.3 MB torch sum after the same
 * 128 MB: 0.66 ms).
 */

/*
 * Note [Staged outputs]
 * Storing ahead (above) hid the misses of the scattered stores, not their instructions: a RoI's
 * DK__RP_CHANNELS outputs went out one lane at a time, each lane taken out of its vector and
 * stored PH PW elements from the last, with a prefetch each: about 130 of the 330 instructions
 * per RoI and task of the pooling loop (callgrind, bench_roi_pool.py's case). So where the host
 * cache has room (at most DK__PS_STAGE_MAX_BYTES), the blocks' tasks write their sums whole, one
 * vector store per four channels, into a stage laid out [PH PW][K][L] (L: each block of
 * DK__RP_CHANNELS channels in whole 4-lane vectors, the lanes past the channels unused; each bin's
 * row padded to whole pages and a line, cx->ps_stage_row): a task's bin is one row of it, written
 * in order of k. A second parallel loop then moves each RoI's
 * [bin][channel] to the output's [channel][bin] (dk__ps_unstage_worker: float32 in
 * dk_cl_scatter32's 8 x 8 AVX2 tiles where the output is dense). The values are the sums
 * themselves, stored once more: the same bits. Without a stage (no room, or a stage past
 * DK__PS_STAGE_MAX_BYTES: some 8 K RoIs of 10 x 7 x 7 bins) the tasks store ahead as before.
 * ps_roi_align's forward on blocks stages its outputs the same way (dk__ps_stage_take,
 * dk__ps_zero_roi, dk__ps_stage_flush, shared), each vector divided by the RoI's count at once
 * where each lane had been divided alone: on bench_roi_pool.py's case after 128 MB written
 * elsewhere, in one process with ps_roi_pool.stage switched per call, its forward took medians of
 * 3.01-3.05 ms against 3.68-3.69 ms (two runs of 41 calls, 2026-11-28).
 */
#define DK__PS_STAGE_MAX_BYTES ((size_t)64 << 20)
#define DK__PS_UNSTAGE_ROIS 16

/* ps_roi_pool's forward: RoIs per task; their outputs (PH PW elements apart for each plane) stay in
 * cache while the task sweeps its planes (Note [Position-sensitive RoIPool on a CPU]). */
#define DK__PSP_ROIS 1024

#endif /* DK_PS_ROI_POOL_CPU_H */
