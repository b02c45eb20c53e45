/*
 * roi_align/roi_align_rotated_cpu.c — roi_align_rotated (RoIAlign on rotated boxes, MMCV's)
 * forward and backward on the CPU: the entry points the dispatcher calls, their scratch and
 * threads, and their registration. The geometry and the per-sample math are
 * kernels/roi_align_math.h's (dk_roi_align_rotated_*, with RoIAlign's bilinear taps); the
 * per-dtype bodies are roi_align_rotated_tmpl.h. ops/roi_align.c checked the arguments.
 *
 * Note [Rotated RoIAlign on a CPU]
 * A rotated box's samples are not separable into rows and columns, as roi_align's are (Note
 * [Separable weight tables] in roi_align_cpu.h), but they do not depend on the channel: each
 * sample's four taps (offsets and weights) are found once per RoI and serve every channel, as
 * MMCV's CPU kernel does with its pre_calc. They are tabulated a run of bins at a time (at most
 * DK__RAR_RUN bins and DK__RAR_TABLE samples per thread); only the samples inside the map are
 * kept, which is what the per-element math adds up, in the same order (iy, then ix), so the
 * output has the per-element math's bits (which the GPU kernel runs): a bin with more samples
 * than the table holds is computed by that math directly.
 *  - Forward: one task per image and block of channels (dk__rar_blocks), which copies the
 *    block's planes into channel rows (Note [Rotated RoIAlign's channel rows]) and evaluates the
 *    image's RoIs on them: the rows stay in cache while every RoI of the image reads them (one
 *    task per RoI, reading each RoI's window of all channels, took 1.5-2x as long on the
 *    benchmark's problem: the windows came from memory each time), at the cost of tabulating
 *    each RoI once per block.
 *  - Backward, deterministic without atomics: the same tasks, each of which owns its channels
 *    of its image in grad_input: it zeroes channel rows of the compute type, adds the gradients
 *    of the image's RoIs in index order (each RoI's bins (ph, pw) in order, each bin's samples
 *    (iy, ix), each sample's taps w1..w4, each term (g / count) w: MMCV's (g w) / count rounds
 *    differently where count is no power of 2), and stores them once into the planes. Each
 *    element's terms and their order do not depend on the block, the lanes or the thread
 *    count: the same bits for any number of threads; and the GPU's gather (Note [Deterministic
 *    rotated backward on a GPU] in roi_align_rotated_gpu.h) sums them in this order too.
 *
 * Note [Rotated RoIAlign's channel rows]
 * A task keeps its block of channels channels-last, [H * W][cblock] in the compute type (16-bit
 * storage converted once): a tap is then a row of contiguous channels, and one pass over a run's
 * table serves a chunk of channels as vector operations: the forward's
 * s += w1 v1 + w2 v2 + w3 v3 + w4 v4 and the backward's row += g w, a few vector operations per
 * tap instead of one scalar one per channel through as many planes. Each lane is one channel's
 * per-element arithmetic, operation for operation (ISO C contracts nothing into FMAs, and
 * target("avx2") has none), so the bits are those of the planar loops this replaced, on either
 * ISA build (roi_align_rotated.isa, Note [AVX2 spans] in box_iou/box_iou_cpu.h). Float rows
 * (float32 and the 16-bit types) run chunks of DK__RAR_WIDE (32) lanes, then of DK__RAR_LANES
 * (16), in dk__rar_{forward,backward}{32,16}_avx2, whose sums and gradients stay in 4 or 2
 * registers (GCC keeps the loops' 16-lane arrays in memory, and unrolls a plain 16-lane loop
 * into scalars, hence DK__RAR_LANE_LOOP); 32 lanes load each sample's offsets and broadcast its
 * weights once for twice the channels (the forward's runs 56M -> 38M instructions). Double
 * rows, the rest of a block and the baseline ISA run the loops of DK__RAR_LANES.
 * float32 with AVX2 moves between planes and rows in 8 x 8 tiles (Note [Channels-last copies]
 * in dk_channels_last.h): the forward's copy in, its outputs (a run's [bin][channel] sums into
 * the output's [channel][bin] runs, where the run's bins are contiguous: dk__rar_dense), the
 * backward's grad_output runs into [bin][channel] rows, and its copy out; the other dtypes,
 * strides and the baseline ISA move element by element, DK__RAR_LANES channels of a pixel at a
 * time. The tiles move bits and compute nothing, so either way gives the same result.
 * The table of a run of bins needs each sample's (y, x): the products of the RoI's rows of
 * sample coordinates (yy cos, yy sin) and columns (xx sin, xx cos) are found once per RoI
 * (dk__rar_turns, at most DK__RAR_AXIS rows and columns) and turned onto the map per sample by
 * dk_roi_align_rotated_turn, the expression that dk_roi_align_rotated_sample (the GPU's)
 * evaluates: the same bits, without the per-sample divisions of dk_roi_align_axis_sample.
 * Measured with callgrind on this 2-core host, one thread, the benchmark's problem ([2, 256, 50,
 * 68] float32, 512 RoIs, sampling_ratio 2, AVX2), instructions of one call:
 *   forward   125M -> 66M: runs 56M -> 38M, their stores 30M -> 5.4M, tables 25M -> 19M, copy
 *             in 11M -> 1.2M
 *   backward  170M -> 108M: runs 66M -> 63M, grad_output into rows and divided by count 68M ->
 *             about 11M (the tiles 5M, the division passes), tables 25M -> 19M, zeroing 7M,
 *             copy out 11M -> 1.2M
 *   adaptive forward (sampling_ratio 0) 155M -> 87M
 * (the history: 656M for the backward before the channel rows). In time, one thread, dkit's
 * own medians of 21 calls taking turns with the merged tree's build in the same minutes (load
 * average 3.3-3.6): forward 18.5-19.0 -> 13.6-14.3 ms, forward + backward 41.9-49.5 ->
 * 31.8-35.0 ms, adaptive forward 21.7-22.2 -> 16.6-17.4 ms; bench_roi_align_rotated.py at load
 * 1.2-2.1, 10.2-12.5x the reference forward and 10.9-12.5x forward + backward (the merged tree
 * in the same minutes 9.7-10.2x and 8.3-9.5x: bench/README.md). What is left is the runs: per
 * sample and 32 channels the forward loads 4 offsets, broadcasts 4 weights and does 16 vector
 * multiplies and 16 adds (about 48 instructions), the backward a read-modify-write of 4 rows
 * (4 vectors each); and the tables (about 95 instructions a sample, once per RoI and block:
 * the bilinear rule's branches and the stores of 4 offsets and 4 weights). Blocks grew from 64
 * to 128 channels (1.7 MB of rows for a 50 x 68 map, in a 2 MB L2), which halved the
 * tabulation. Memory: a thread's rows are a block's planes (at least one plane: a 4,000 x 4,000
 * map takes 64 MB per thread in float32), as the backward's accumulator always did; the
 * forward now takes them too, and a run's [DK__RAR_RUN][cblock] outputs.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dk_arena.h"
#include "dk_channels_last.h"
#include "dk_parallel.h"
#include "dk_registry.h"
#include "dk_tensor.h"
#include "dk_tunables.h"
#include "kernels/dk_template.h"
#include "kernels/roi_align_math.h"
#include "roi_align.h" /* ops/roi_align.h */

/* Samples per thread's table: 128 KB of offsets and 64 KB of float weights (128 KB for double);
 * a 7 x 7 output with up to 9 x 9 samples per bin is one table; and bins per run of the table. */
#define DK__RAR_TABLE 4096
#define DK__RAR_RUN 64

/* Rows (PH x grid) and columns (PW x grid) of samples whose coordinates' products with the
 * angle's cosine and sine a thread tabulates per RoI (dk_roi_align_rotated_turn): 16 KB for float;
 * an RoI with more takes each sample's coordinates from dk_roi_align_rotated_sample. */
#define DK__RAR_AXIS 1024

/* Channels a pass over a run's table serves (Note [Rotated RoIAlign's channel rows]): the loops'
 * and the AVX2 runs' narrow chunks, and the AVX2 runs' wide chunks. */
#define DK__RAR_LANES 16
#define DK__RAR_WIDE 32

/* Channel rows' bytes per task at most: its channel block shrinks (to 1) to fit; and the most
 * channels per block (Note [Rotated RoIAlign's channel rows]). */
#define DK__RAR_ACC_BYTES ((int64_t)4 << 20)
#define DK__RAR_MAX_BLOCK 128

/* One call: `img` is input (forward) or grad_input (backward), `bins` output or grad_output. */
typedef struct {
    const dk_tensor *img, *bins, *rois;
    int64_t N, C, H, W, K, PH, PW;
    double scale;
    int64_t sampling_ratio;
    bool aligned, clockwise;
    int64_t cblock; /* channels per task (dk__rar_blocks), the channel rows' width */
    bool avx2;      /* the runs' AVX2 build (Note [AVX2 spans] in box_iou/box_iou_cpu.h) */
    char *scratch;  /* per thread: scratch + tid * per_thread bytes */
    size_t per_thread;
    dk_parallel_counter counter;
} dk__rar_ctx;

/* Bytes of one thread's table for weights of `w` bytes: 4 offsets and 4 weights per sample, a
 * count per bin of the run, and 2 products per row and per column of samples; a multiple of 64. */
static size_t dk__rar_table_bytes(size_t w)
{
    return (size_t)DK__RAR_TABLE * 4 * (sizeof(int64_t) + w) + DK__RAR_RUN * sizeof(int64_t) +
           (size_t)DK__RAR_AXIS * 4 * w;
}

/* Whether bins b0..b1 - 1 of a tensor of strides s ([K, C, PH, PW]) are consecutive elements, a
 * channel's run that the AVX2 tiles move (Note [Channels-last copies] in dk_channels_last.h). */
static bool dk__rar_dense(const dk__rar_ctx *cx, int64_t b0, int64_t b1, const int64_t s[4])
{
    return s[3] == 1 && (s[2] == cx->PW || b0 / cx->PW == (b1 - 1) / cx->PW);
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DK__RAR_AVX2 1
#else
#define DK__RAR_AVX2 0
#endif

/* GCC unrolls a lane loop of a known 16 iterations into scalars before its vectoriser sees it;
 * kept a loop, it becomes vectors. */
#if defined(__GNUC__) && !defined(__clang__)
#define DK__RAR_LANE_LOOP _Pragma("GCC unroll 1")
#else
#define DK__RAR_LANE_LOOP
#endif

#if DK__RAR_AVX2
#include <immintrin.h>

/* The float runs' full chunks on AVX2 (Note [Rotated RoIAlign's channel rows]): nv registers
 * of sums or gradients (nv 8-lane vectors: 16 or DK__RAR_WIDE lanes) stay in registers across
 * a bin's samples, where the loops' arrays go through memory. The same operations in the same
 * order as the loops of roi_align_rotated_tmpl.h, lane for lane ("avx2" has no FMA to contract
 * them into). */
__attribute__((target("avx2"), always_inline)) static inline void
dk__rar_forward_avx2_body(const float *rows, const int64_t *o, const float *w, const int64_t *nb, int64_t bins,
                          float count, float *res, int64_t rs, const int nv)
{
    const __m256 c = _mm256_set1_ps(count);
    for (int64_t b = 0; b < bins; b++, res += rs) {
        __m256 s[DK__RAR_WIDE / 8];
        for (int v = 0; v < nv; v++) s[v] = _mm256_setzero_ps();
        for (int64_t i = 0, m = nb[b]; i < m; i++, o += 4, w += 4) {
            const float *v0 = rows + o[0], *v1 = rows + o[1], *v2 = rows + o[2], *v3 = rows + o[3];
            const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]);
            const __m256 w2 = _mm256_set1_ps(w[2]), w3 = _mm256_set1_ps(w[3]);
            for (int v = 0; v < nv; v++) {
                __m256 t = _mm256_add_ps(_mm256_mul_ps(w0, _mm256_loadu_ps(v0 + 8 * v)),
                                         _mm256_mul_ps(w1, _mm256_loadu_ps(v1 + 8 * v)));
                t = _mm256_add_ps(t, _mm256_mul_ps(w2, _mm256_loadu_ps(v2 + 8 * v)));
                s[v] = _mm256_add_ps(s[v], _mm256_add_ps(t, _mm256_mul_ps(w3, _mm256_loadu_ps(v3 + 8 * v))));
            }
        }
        for (int v = 0; v < nv; v++) _mm256_storeu_ps(res + 8 * v, _mm256_div_ps(s[v], c));
    }
}

__attribute__((target("avx2"), always_inline)) static inline void
dk__rar_backward_avx2_body(float *rows, const int64_t *o, const float *w, const int64_t *nb, int64_t bins,
                           const float *g, int64_t cblock, const int nv)
{
    for (int64_t b = 0; b < bins; b++, g += cblock) {
        __m256 gv[DK__RAR_WIDE / 8];
        for (int v = 0; v < nv; v++) gv[v] = _mm256_loadu_ps(g + 8 * v);
        for (int64_t i = 0, m = nb[b]; i < m; i++, o += 4, w += 4)
            for (int q = 0; q < 4; q++) { /* in order: two taps may be the same pixel */
                float *a = rows + o[q];
                const __m256 wq = _mm256_set1_ps(w[q]);
                for (int v = 0; v < nv; v++)
                    _mm256_storeu_ps(a + 8 * v, _mm256_add_ps(_mm256_loadu_ps(a + 8 * v), _mm256_mul_ps(gv[v], wq)));
            }
    }
}

/* The runs' chunks of DK__RAR_LANES and of DK__RAR_WIDE lanes: rows, o, w and nb as the loops';
 * res gets a row of sums per bin, rs apart; g has a row of gradients per bin, cblock apart. */
__attribute__((target("avx2"))) static void dk__rar_forward16_avx2(const float *rows, const int64_t *o, const float *w,
                                                                   const int64_t *nb, int64_t bins, float count,
                                                                   float *res, int64_t rs)
{
    dk__rar_forward_avx2_body(rows, o, w, nb, bins, count, res, rs, DK__RAR_LANES / 8);
}
__attribute__((target("avx2"))) static void dk__rar_forward32_avx2(const float *rows, const int64_t *o, const float *w,
                                                                   const int64_t *nb, int64_t bins, float count,
                                                                   float *res, int64_t rs)
{
    dk__rar_forward_avx2_body(rows, o, w, nb, bins, count, res, rs, DK__RAR_WIDE / 8);
}
__attribute__((target("avx2"))) static void dk__rar_backward16_avx2(float *rows, const int64_t *o, const float *w,
                                                                    const int64_t *nb, int64_t bins, const float *g,
                                                                    int64_t cblock)
{
    dk__rar_backward_avx2_body(rows, o, w, nb, bins, g, cblock, DK__RAR_LANES / 8);
}
__attribute__((target("avx2"))) static void dk__rar_backward32_avx2(float *rows, const int64_t *o, const float *w,
                                                                    const int64_t *nb, int64_t bins, const float *g,
                                                                    int64_t cblock)
{
    dk__rar_backward_avx2_body(rows, o, w, nb, bins, g, cblock, DK__RAR_WIDE / 8);
}
#endif

DK_TUNABLE(dk__rar_isa, "roi_align_rotated.isa", 1, 0, 1,
           "roi_align_rotated's runs: 1 AVX2 where the CPU has it, 0 the baseline (Note [AVX2 spans])")

#define DK_TEMPLATE "roi_align/roi_align_rotated_tmpl.h"
#define DK_TEMPLATE_TYPES DK_TYPES_FLOAT
#include "kernels/dk_instantiate.h"

static dk__rar_ctx dk__rar_ctx_of(const dk_tensor *img, const dk_tensor *bins, const dk_tensor *rois, double scale,
                                  int64_t sampling_ratio, bool aligned, bool clockwise)
{
    return (dk__rar_ctx)
    {
        .img = img, .bins = bins, .rois = rois, .N = img->shape[0], .C = img->shape[1], .H = img->shape[2],
        .W = img->shape[3], .K = rois->shape[0], .PH = bins->shape[2], .PW = bins->shape[3], .scale = scale,
        .sampling_ratio = sampling_ratio, .aligned = aligned, .clockwise = clockwise,
#if DK__RAR_AVX2
        .avx2 = dk_tunable(&dk__rar_isa) == 1 && __builtin_cpu_supports("avx2")
#else
        .avx2 = false
#endif
    };
}

/* Channels per task (Note [Rotated RoIAlign on a CPU]): each task tabulates every RoI of its image
 * once, so as many as DK__RAR_MAX_BLOCK and the budget of DK__RAR_ACC_BYTES for their planes
 * (`bytes` per element) allow, while leaving four tasks per thread. The block changes no
 * element's terms or their order, so no result bit. */
static void dk__rar_blocks(dk__rar_ctx *cx, int nthreads, int64_t bytes)
{
    const int64_t plane = cx->H * cx->W > 0 ? cx->H * cx->W : 1;
    const int64_t by_memory = DK__RAR_ACC_BYTES / (plane * bytes);
    const int64_t by_threads = (cx->N > 0 ? cx->N : 1) * cx->C / (4 * (int64_t)nthreads);
    const int64_t cb = by_memory < by_threads ? by_memory : by_threads;
    cx->cblock = cb < 1 ? 1 : cb > DK__RAR_MAX_BLOCK ? DK__RAR_MAX_BLOCK : cb > cx->C ? cx->C : cb;
}

/* Runs `worker` on nthreads threads, each with per_thread bytes of scratch. */
static dk_status dk__rar_run(dk__rar_ctx *cx, int nthreads, size_t per_thread, void (*worker)(void *, int),
                             const char *op)
{
    DK_ARENA_ON_STACK(ar); /* Note [Scratch arena] */
    cx->per_thread = dk_round8(per_thread);
    cx->scratch = (char *)dk_arena_take_n(&ar, (size_t)nthreads, cx->per_thread);
    if (!cx->scratch) {
        dk_arena_free(&ar);
        return dk_error(DK_ENOMEM, "%s: out of memory for %d threads' scratch of %zu bytes", op, nthreads,
                        cx->per_thread);
    }
    dk_parallel_run(nthreads, &cx->counter, worker, cx);
    dk_arena_free(&ar);
    return DK_OK;
}

static dk_status dk_roi_align_rotated_forward_cpu(const dk_tensor *input, const dk_tensor *rois, dk_tensor *output,
                                                  int64_t pooled_height, int64_t pooled_width, double spatial_scale,
                                                  int64_t sampling_ratio, bool aligned, bool clockwise)
{
    (void)pooled_height;
    (void)pooled_width;
    dk__rar_ctx cx = dk__rar_ctx_of(input, output, rois, spatial_scale, sampling_ratio, aligned, clockwise);
    if (cx.K == 0 || cx.C == 0) return DK_OK; /* nothing to write */
    const dk_dtype dt = dk_tensor_dtype(input);
    const int64_t tsize = dt == DK_FLOAT64 ? 8 : 4;
    const int nthreads = dk_parallel_threads_for(cx.K * cx.C * cx.PH * cx.PW * 16);
    dk__rar_blocks(&cx, nthreads, tsize);
    void (*worker)(void *, int) = NULL;
    DK_SWITCH_FLOAT(dt, worker, dk__rar_forward_worker, , worker = NULL)
    if (!worker) return dk_error(DK_ETYPE, "roi_align_rotated_forward: unsupported dtype");
    return dk__rar_run(&cx, nthreads,
                       dk__rar_table_bytes((size_t)tsize) + (size_t)((cx.H * cx.W + DK__RAR_RUN) * cx.cblock * tsize),
                       worker, "roi_align_rotated_forward");
}

static dk_status dk_roi_align_rotated_backward_cpu(const dk_tensor *grad_output, const dk_tensor *rois,
                                                   dk_tensor *grad_input, double spatial_scale, int64_t sampling_ratio,
                                                   bool aligned, bool clockwise)
{
    dk__rar_ctx cx = dk__rar_ctx_of(grad_input, grad_output, rois, spatial_scale, sampling_ratio, aligned, clockwise);
    if (cx.N == 0 || cx.C == 0 || cx.H == 0 || cx.W == 0) return DK_OK; /* nothing to write */
    const dk_dtype dt = dk_tensor_dtype(grad_output);
    const int64_t tsize = dt == DK_FLOAT64 ? 8 : 4, plane = cx.H * cx.W;
    const int nthreads = dk_parallel_threads_for(cx.N * cx.C * plane + cx.K * cx.C * cx.PH * cx.PW * 16);
    dk__rar_blocks(&cx, nthreads, tsize);
    void (*worker)(void *, int) = NULL;
    DK_SWITCH_FLOAT(dt, worker, dk__rar_backward_worker, , worker = NULL)
    if (!worker) return dk_error(DK_ETYPE, "roi_align_rotated_backward: unsupported dtype");
    return dk__rar_run(&cx, nthreads,
                       dk__rar_table_bytes((size_t)tsize) + (size_t)((plane + DK__RAR_RUN) * cx.cblock * tsize), worker,
                       "roi_align_rotated_backward");
}

DK_REGISTER_DEVICE_IMPL(roi_align_rotated_forward, CPU, dk_roi_align_rotated_forward_cpu)
DK_REGISTER_DEVICE_IMPL(roi_align_rotated_backward, CPU, dk_roi_align_rotated_backward_cpu)
