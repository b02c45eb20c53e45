/*
 * roi_align/roi_align_planes_tmpl.h — moving data between tensors (any strides, any float
 * storage) and the per-thread channel-pair buffers the evaluation works on.
 * A template (Note [Templates in C] in kernels/dk_template.h), instantiated by roi_align_cpu.c
 * for its float storage types; its short names (T, S, V4, AXIS, ...) are roi_align_names_tmpl.h's.
 *
 * Note [Channel pairs]
 * Planes are handled two channels at a time: the used rows of channels c and c + 1 are copied,
 * interleaved element by element, into a per-thread buffer buf[r][x][2]. One 4-lane load at
 * column pair (x, x + 1) then holds both channels at both columns, so every lane of every vector
 * operation is useful and the per-RoI bookkeeping is shared by two channels. The copy is cheap
 * (a sequential read of the band) and pays for itself: the RoI loop always runs on the same
 * cache- and TLB-warm buffer, whereas reading each new plane in place measured a third slower.
 * Backward accumulates into the same kind of buffer and writes it out once at the end. An odd
 * last channel is paired with itself. Any layout goes through these copies, which read and
 * write through the strides: for channels-last, one iteration takes as many pairs as one cache
 * line of channels holds and copies pixel by pixel, so every line is used whole.
 */
#if DK_TMPL_PASS == DK_TMPL_FLOAT
#include "roi_align/roi_align_names_tmpl.h"

/* Batch index and geometry of every RoI; batch[k] = -1 for an index that is not an integer in
 * [0, N) (the op's check rejects those; this only keeps the kernel in bounds regardless). */
static void DK_SFN(dk__ra_read_rois)(const dk_tensor *rois, const dk__ra_shape *sh, int64_t *batch, AXIS *ay, AXIS *ax)
{
    const S *r = (const S *)dk_tensor_data(rois);
    int64_t rs[2];
    dk_tensor_strides(rois, rs, 2);
    const int64_t s0 = rs[0], s1 = rs[1];
    const T scale = (T)sh->spatial_scale;
    for (int64_t k = 0; k < sh->K; ++k) {
        const S *row = r + k * s0;
        const double b = (double)LOAD(row);
        batch[k] = (b >= 0 && b < (double)sh->N && b == (double)(int64_t)b) ? (int64_t)b : -1;
        DK_TFN(dk_roi_align_roi_init)(LOAD(row + s1), LOAD(row + 2 * s1), LOAD(row + 3 * s1), LOAD(row + 4 * s1), scale,
                                      sh->PH, sh->PW, sh->sampling_ratio, sh->aligned, sh->H, sh->W, &ay[k], &ax[k]);
    }
}

/* e[2x] = a[x * sx], e[2x + 1] = b[x * sx] for x < n, converted to T: two channels
 * interleaved (Note [Channel pairs]); b may be a. Unit strides go four columns at a time.
 * Returns whether every value was finite (Note [Non-finite values]): v - v is 0 for a finite v
 * and NaN otherwise, and a sum of them stays 0 only if all are 0. */
static inline bool DK_SFN(dk__ra_zip)(T *restrict e, const S *restrict a, const S *restrict b, int64_t n, int64_t sx)
{
    int64_t x = 0;
    T z = (T)0;
#if DK_S_IS_T
    if (sx == 1) {
        V4 vz = {0, 0, 0, 0};
        for (; x + 4 <= n; x += 4) {
            V4 va, vb;
            DK_TFN(dk_ld4)(&va, a + x);
            DK_TFN(dk_ld4)(&vb, b + x);
            const V4 lo = DK_SHUF(va, vb, 0, 4, 1, 5), hi = DK_SHUF(va, vb, 2, 6, 3, 7);
            DK_TFN(dk_st4)(e + 2 * x, &lo);
            DK_TFN(dk_st4)(e + 2 * x + 4, &hi);
            vz += (va - va) + (vb - vb);
        }
        z = (vz[0] + vz[1]) + (vz[2] + vz[3]);
    }
#endif
    for (; x < n; ++x) {
        const T va = LOAD(a + x * sx), vb = LOAD(b + x * sx);
        e[2 * x] = va;
        e[2 * x + 1] = vb;
        z += (va - va) + (vb - vb);
    }
    return z == 0;
}

/* The inverse of dk__ra_zip, converted to S: a[x * sx] = e[2x] and, unless b is NULL (an odd
 * last channel), b[x * sx] = e[2x + 1]; `stream`: with non-temporal stores where a and b can
 * both be aligned to 16 bytes. */
static inline void DK_SFN(dk__ra_unzip)(S *restrict a, S *restrict b, const T *restrict e, int64_t n, int64_t sx,
                                        bool stream)
{
    int64_t x = 0;
#if DK_S_IS_T
    if (sx == 1) {
        for (; stream && x < n && ((uintptr_t)(a + x) & 15) != 0; ++x) {
            a[x] = e[2 * x];
            if (b) b[x] = e[2 * x + 1];
        }
        stream = stream && (!b || ((uintptr_t)(b + x) & 15) == 0);
        for (; x + 4 <= n; x += 4) {
            V4 lo, hi;
            DK_TFN(dk_ld4)(&lo, e + 2 * x);
            DK_TFN(dk_ld4)(&hi, e + 2 * x + 4);
            const V4 va = DK_SHUF(lo, hi, 0, 2, 4, 6), vb = DK_SHUF(lo, hi, 1, 3, 5, 7);
            if (stream) {
                DK_TFN(dk_stream4)(a + x, &va);
                if (b) DK_TFN(dk_stream4)(b + x, &vb);
            } else {
                DK_TFN(dk_st4)(a + x, &va);
                if (b) DK_TFN(dk_st4)(b + x, &vb);
            }
        }
    }
#else
    (void)stream;
#endif
    for (; x < n; ++x) {
        STORE(a + x * sx, e[2 * x]);
        if (b) STORE(b + x * sx, e[2 * x + 1]);
    }
}

/*
 * Channels [c, c + 2 * np) of image `img` (rows r0..r1; channel stride is[1], row is[2], column
 * is[3]) into np pair buffers (buf + q * stride, whose first row is rbase <= r0), interleaved
 * (Note [Channel pairs]) and converted to T; a channel index past C repeats C - 1. With
 * channels as the minor dimension (channels-last) all channels of a pixel are one cache line,
 * so the copy goes pixel by pixel, channels inside, prefetching a few pixels ahead; otherwise
 * row by row.
 */
static bool DK_SFN(dk__ra_pairs_in)(T *restrict buf, size_t stride, const S *img, const int64_t *is, int64_t c,
                                    int64_t np, int64_t C, int64_t rbase, int64_t r0, int64_t r1, int64_t W)
{
    const int64_t sc = is[1], sx = is[3];
    /* Rows that follow each other in memory are copied as one (NCHW: the whole band). */
    const bool one = sc >= sx && sx == 1 && is[2] == W;
    bool finite = true; /* Note [Non-finite values] */
    T z = (T)0;
    for (int64_t r = r0; r <= (one ? r0 : r1); ++r) {
        const S *row = img + r * is[2];
        T *restrict d = buf + (size_t)((r - rbase) * 2 * W);
        if (sc < sx) {
            for (int64_t x = 0; x < W; ++x) {
                if (x + 8 < W) __builtin_prefetch(row + (x + 8) * sx + c * sc, 0, 3);
                for (int64_t q = 0; q < np; ++q) {
                    const int64_t ca = c + 2 * q, cb = ca + 1 < C ? ca + 1 : C - 1;
                    const T va = LOAD(row + x * sx + ca * sc), vb = LOAD(row + x * sx + cb * sc);
                    d[(size_t)q * stride + 2 * x] = va;
                    d[(size_t)q * stride + 2 * x + 1] = vb;
                    z += (va - va) + (vb - vb);
                }
            }
            continue;
        }
        for (int64_t q = 0; q < np; ++q) {
            const int64_t ca = c + 2 * q, cb = ca + 1 < C ? ca + 1 : C - 1;
            finite &= DK_SFN(dk__ra_zip)(d + (size_t)q * stride, row + ca * sc, row + cb * sc,
                                         one ? (r1 - r0 + 1) * W : W, sx);
        }
    }
    return finite && z == 0;
}

/* The np pair buffers (all H rows) into channels [c, c + 2 * np) of image `img`, converted
 * to S; channels past C are dropped. Loop order as in dk__ra_pairs_in; for channels-last every
 * pixel's line is written in one go, the next ones prefetched for writing. */
static void DK_SFN(dk__ra_pairs_out)(S *img, const int64_t *is, int64_t c, int64_t np, int64_t C, const T *restrict buf,
                                     size_t stride, int64_t H, int64_t W, bool stream)
{
    const int64_t sc = is[1], sx = is[3];
    const int64_t nc = C - c < 2 * np ? C - c : 2 * np; /* channels actually written */
    const bool one = sc >= sx && sx == 1 && is[2] == W;
    for (int64_t r = 0; r < (one ? 1 : H); ++r) {
        S *row = img + r * is[2];
        const T *restrict s = buf + (size_t)(r * 2 * W);
        if (sc < sx) {
            for (int64_t x = 0; x < W; ++x) {
                if (x + 8 < W) __builtin_prefetch(row + (x + 8) * sx + c * sc, 1, 3);
                for (int64_t i = 0; i < nc; ++i)
                    STORE(row + x * sx + (c + i) * sc, s[(size_t)(i / 2) * stride + 2 * x + i % 2]);
            }
            continue;
        }
        for (int64_t i = 0; i < nc; i += 2)
            DK_SFN(dk__ra_unzip)(row + (c + i) * sc, i + 1 < nc ? row + (c + i + 1) * sc : NULL,
                                 s + (size_t)(i / 2) * stride, one ? H * W : W, sx, stream);
    }
}

/* A RoI's interleaved results (see dk__ra_forward_roi) into output blocks o0 and o1 (o1 NULL:
 * single channel), converted to S. */
static void DK_SFN(dk__ra_store_bins)(S *o0, S *o1, const int64_t *os, const T *acc, int64_t PH, int64_t PW)
{
    if (os[3] == 1 && os[2] == PW) { /* one block */
        DK_SFN(dk__ra_unzip)(o0, o1, acc, PH * PW, 1, false);
        return;
    }
    for (int64_t ph = 0; ph < PH; ++ph)
        DK_SFN(dk__ra_unzip)(o0 + ph * os[2], o1 ? o1 + ph * os[2] : NULL, acc + 2 * ph * PW, PW, os[3], false);
}

/* grad_output blocks g0 and g1 (g1 == g0 for an unpaired channel) interleaved into acc. */
static bool DK_SFN(dk__ra_load_bins)(T *restrict acc, const S *g0, const S *g1, const int64_t *gs, int64_t PH,
                                     int64_t PW)
{
    if (gs[3] == 1 && gs[2] == PW) return DK_SFN(dk__ra_zip)(acc, g0, g1, PH * PW, 1);
    bool finite = true;
    for (int64_t ph = 0; ph < PH; ++ph)
        finite &= DK_SFN(dk__ra_zip)(acc + 2 * ph * PW, g0 + ph * gs[2], g1 + ph * gs[2], PW, gs[3]);
    return finite;
}

/* Outputs of one RoI (axes ay, ax) on channels c and c + two of image `img`, per sample from the
 * shared math, interleaved into acc as dk__ra_forward_roi leaves them (Note [Non-finite
 * values]). */
static void DK_SFN(dk__ra_forward_roi_exact)(const dk__ra_shape *sh, const S *img, int64_t c, int64_t two,
                                             const AXIS *ay, const AXIS *ax, T *acc)
{
    const int64_t *is = sh->in_s;
    for (int64_t i = 0; i < 2; ++i) {
        const S *plane = img + (c + i * two) * is[1];
        for (int64_t ph = 0; ph < sh->PH; ++ph)
            for (int64_t pw = 0; pw < sh->PW; ++pw)
                acc[2 * (ph * sh->PW + pw) + i] = DK_SFN(dk_roi_align_forward_avg)(plane, is[2], is[3], sh->H, sh->W,
                                                                                   ay, ax, ph, pw);
    }
}

#include "roi_align/roi_align_names_end_tmpl.h"
#endif
