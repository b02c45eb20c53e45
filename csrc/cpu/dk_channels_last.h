/*
 * dk_channels_last.h — moving 32-bit elements between channel planes and channels-last rows: a
 * block of NCHW planes into a per-task [pixel][channel] buffer, and back (Note [Channels-last
 * copies]). Header-only, like dk_vec.h: each kernel that uses it gets its own copy.
 *
 * Note [Channels-last copies]
 * The RoI kernels keep a task's block of channels channels-last (a bilinear tap or a pixel is
 * then a row of contiguous channels: Note [Rotated RoIAlign's channel rows]), which takes a
 * transposition of the planes in and, where a kernel accumulates there, out again; the same
 * move turns a block of an output's or a gradient's [channel][bin] runs into [bin][channel]
 * rows and back. Element by element the move costs a load, a store and the index arithmetic
 * of one element (about 7 instructions: an 8-apart store per element, which is what the scalar
 * loops compiled to); in 8 x 8 tiles transposed in AVX2 registers, 8 loads, 24 shuffles and 8
 * stores move 64 elements. The copies move bits, they compute nothing: any element's value is
 * the scalar loop's, whatever the path, so a kernel may take either (its ISA tunable forces the
 * scalar one, for the tests). Tiles go channel group by channel group (8 planes at a time, each
 * read or written in order: eight streams the hardware prefetches, where a tile across all the
 * block's channels makes as many streams as channels); the pixels past the last whole tile are
 * moved one by one, and so are the gather's channels past the last group of 8. The scatter takes
 * those r < 8 channels in tiles too: each pixel's row is loaded with its lanes past the last
 * channel masked off (vmaskmovps, which reads nothing there, so a row that ends the buffer is not
 * read past), and the tile's first r rows are stored whole. One by one, each element's load was
 * ld elements from the one before and its store one line of r: ps_roi_align's backward (10
 * channels, bench_roi_pool.py's case) spent half of its scatter's time on its last 2 channels,
 * and with the masked tiles the scatter took 3.9M instructions instead of 6.4M (callgrind, one
 * forward and backward). The gather's tail would need masked stores (slow on AMD's cores, and
 * past the last channel a row's lanes are the next row's) and stays one by one.
 *   dk_cl_gather32  rows[p ld + c] = planes[c cs + p]   (planes -> channels-last)
 *   dk_cl_scatter32 planes[c cs + p] = rows[p ld + c]   (channels-last -> planes)
 * for channels c < nc and pixels p < npix: the planes' pixels of unit stride (a map whose rows
 * are not contiguous is moved a row at a time), elements of 32 bits (float32; the 16-bit types
 * and double take their kernels' own loops, which convert or move 8 bytes).
 */
#ifndef DK_CHANNELS_LAST_H
#define DK_CHANNELS_LAST_H

#include <stdbool.h>
#include <stdint.h>

/* The AVX2 tiles: GCC on x86-64 (its target attribute, as Note [AVX2 spans] in
 * box_iou/box_iou_cpu.h); elsewhere the element loops alone. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DK_CL_AVX2 1
#include <immintrin.h>

/* An 8 x 8 tile of 32-bit lanes transposed: r[i][j] becomes r[j][i]. */
__attribute__((target("avx2"), always_inline)) static inline void dk_cl_transpose8_avx2(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++)
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]),
              t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++)
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20), r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
}

/* Eight planes' pixels p0.. p0 + 7 (plane i at a + i as, pixel p at p) into eight rows of eight
 * channels (row p at b + p bs): one tile. Both directions are this move with the roles swapped. */
__attribute__((target("avx2"), always_inline)) static inline void dk_cl_tile8_avx2(const float *a, int64_t as, float *b,
                                                                                   int64_t bs)
{
    __m256 r[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(a + i * as);
    dk_cl_transpose8_avx2(r);
    for (int i = 0; i < 8; i++) _mm256_storeu_ps(b + i * bs, r[i]);
}

/* noipa: fed one caller's constant counts (roi_pool's 16 channels), GCC's interprocedural value
 * ranges made -Waggressive-loop-optimizations fire on the channel tail those calls never enter;
 * a call per row or run of pixels costs nothing measurable. */
__attribute__((target("avx2"), noipa)) static void dk_cl_gather32_avx2(const float *planes, int64_t cs, int64_t nc,
                                                                       int64_t npix, float *rows, int64_t ld)
{
    int64_t c = 0;
    for (; c + 8 <= nc; c += 8) {
        const float *s = planes + c * cs;
        float *d = rows + c;
        int64_t p = 0;
        for (; p + 8 <= npix; p += 8) dk_cl_tile8_avx2(s + p, cs, d + p * ld, ld);
        for (; p < npix; p++)
            for (int i = 0; i < 8; i++) d[p * ld + i] = s[i * cs + p];
    }
    for (; c < nc; c++)
        for (int64_t p = 0; p < npix; p++) rows[p * ld + c] = planes[c * cs + p];
}

__attribute__((target("avx2"), noipa)) static void dk_cl_scatter32_avx2(const float *rows, int64_t ld, int64_t npix,
                                                                        int64_t nc, float *planes, int64_t cs)
{
    int64_t c = 0;
    for (; c + 8 <= nc; c += 8) {
        const float *s = rows + c;
        float *d = planes + c * cs;
        int64_t p = 0;
        for (; p + 8 <= npix; p += 8) dk_cl_tile8_avx2(s + p * ld, ld, d + p, cs);
        for (; p < npix; p++)
            for (int i = 0; i < 8; i++) d[i * cs + p] = s[p * ld + i];
    }
    if (c < nc) { /* the last r < 8 channels: tiles too, their loads masked (Note [Channels-last copies]) */
        const int r = (int)(nc - c);
        const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const float *s = rows + c;
        float *d = planes + c * cs;
        int64_t p = 0;
        for (; p + 8 <= npix; p += 8) {
            __m256 t[8];
            for (int i = 0; i < 8; i++) t[i] = _mm256_maskload_ps(s + (p + i) * ld, lanes);
            dk_cl_transpose8_avx2(t);
            for (int i = 0; i < r; i++) _mm256_storeu_ps(d + i * cs + p, t[i]);
        }
        for (; p < npix; p++)
            for (int i = 0; i < r; i++) d[i * cs + p] = s[p * ld + i];
    }
}
#else
#define DK_CL_AVX2 0
#endif

/* rows[p ld + c] = planes[c cs + p] for c < nc, p < npix; in AVX2 tiles where `avx2` (the caller
 * found the CPU has it), element by element otherwise: the same elements either way. */
static inline void dk_cl_gather32(const float *planes, int64_t cs, int64_t nc, int64_t npix, float *rows, int64_t ld,
                                  bool avx2)
{
#if DK_CL_AVX2
    if (avx2) {
        dk_cl_gather32_avx2(planes, cs, nc, npix, rows, ld);
        return;
    }
#endif
    (void)avx2;
    for (int64_t c = 0; c < nc; c++)
        for (int64_t p = 0; p < npix; p++) rows[p * ld + c] = planes[c * cs + p];
}

/* planes[c cs + p] = rows[p ld + c] for c < nc, p < npix; as dk_cl_gather32. */
static inline void dk_cl_scatter32(const float *rows, int64_t ld, int64_t npix, int64_t nc, float *planes, int64_t cs,
                                   bool avx2)
{
#if DK_CL_AVX2
    if (avx2) {
        dk_cl_scatter32_avx2(rows, ld, npix, nc, planes, cs);
        return;
    }
#endif
    (void)avx2;
    for (int64_t c = 0; c < nc; c++)
        for (int64_t p = 0; p < npix; p++) planes[c * cs + p] = rows[p * ld + c];
}

#endif /* DK_CHANNELS_LAST_H */
