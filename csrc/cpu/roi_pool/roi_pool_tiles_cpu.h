/*
 * roi_pool/roi_pool_tiles_cpu.h — roi_pool's channels-last forward (Note [RoIPool tiles]): the tiles
 * that pool a RoI's bins over a block of channels (portable, AVX2 and AVX-512), their transposed
 * stores and the streamed runs of their results, which ps_roi_pool's and ps_roi_align's kernels
 * (ps_roi_pool_cpu.h) stream through as well. A header of its own: roi_pool_cpu.h keeps the
 * context, the bins, the backward's runs and the family's notes on them.
 */
#ifndef DK_ROI_POOL_TILES_CPU_H
#define DK_ROI_POOL_TILES_CPU_H

#include "dk_channels_last.h"
#include "dk_large_output.h"
#include "dk_vec.h"
#include "roi_pool_cpu.h"

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

#endif /* DK_ROI_POOL_TILES_CPU_H */
