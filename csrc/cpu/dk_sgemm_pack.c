/*
 * dk_sgemm_pack.c — packing of op(A) and op(B) into the micro-kernel's order (Note [GotoBLAS
 * blocking] in dk_sgemm_private.h), with the transposes absorbed here.
 *
 * Each operand is read in the order its memory is laid out (whole rows of the stored matrix) and
 * written with a stride of mr or nr floats into a buffer that is in L1 or L2: the strided side
 * is the cheap one. Rows or columns past the matrix's edge are zeros, so that the micro-kernel's
 * edge tiles compute zeros there and read nothing uninitialised.
 */
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "dk_sgemm_private.h"

/* One micro-panel from stored rows that are the panel's rows: ap[p * mr + i] = x[i * ldx + p] for
 * i < rows, p < kb (a transpose) ... On x86 it moves 4 x 4 blocks through SSE registers (the
 * baseline has SSE), four loads, a register transpose and four stores for 16 floats where the
 * scalar loop makes 16 scattered stores: it is the packing of op(B) for C = A·B^T
 * (deform_conv2d's weight gradient), where op(B) is as large as the product is deep. */
static void dk__pack_rows(int mr, int rows, const float *x, int64_t ldx, int64_t kb, float *restrict ap)
{
    int i = 0;
#if defined(__SSE__)
    for (; i + 4 <= rows; i += 4) {
        const float *x0 = x + i * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
        int64_t p = 0;
        for (; p + 4 <= kb; p += 4) {
            __m128 r0 = _mm_loadu_ps(x0 + p), r1 = _mm_loadu_ps(x1 + p), r2 = _mm_loadu_ps(x2 + p),
                   r3 = _mm_loadu_ps(x3 + p);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            float *dst = ap + p * mr + i;
            _mm_storeu_ps(dst, r0);
            _mm_storeu_ps(dst + mr, r1);
            _mm_storeu_ps(dst + 2 * mr, r2);
            _mm_storeu_ps(dst + 3 * mr, r3);
        }
        for (; p < kb; p++) {
            float *dst = ap + p * mr + i;
            dst[0] = x0[p];
            dst[1] = x1[p];
            dst[2] = x2[p];
            dst[3] = x3[p];
        }
    }
#endif
    for (; i < rows; i++) {
        const float *restrict src = x + i * ldx;
        for (int64_t p = 0; p < kb; p++) ap[p * mr + i] = src[p];
    }
    for (i = rows; i < mr; i++)
        for (int64_t p = 0; p < kb; p++) ap[p * mr + i] = 0.0f;
}

/* ... or from stored rows that are the panel's steps: ap[p * mr + i] = x[p * ldx + i], a copy of
 * rows floats per step.
 *
 * Note [Prefetching the next micro-panel]
 * This is how op(B) = B is packed for C = A·B (deform_conv2d's forward and its columns' gradient):
 * kb short pieces (nr floats, one or two cache lines) of rows ldx floats apart, kilobytes apart
 * for L in the thousands, so each piece is on a page of its own and the hardware prefetchers,
 * which follow streams within a page, do not fetch them ahead: each line came from L3 or memory
 * while the packing waited. The next micro-panel's pieces are the lines just right of these, so
 * the packing asks for them now (__builtin_prefetch; a hint, which never faults, even past the
 * matrix's end), and they arrive while the micro-kernels of this panel run. Measured on
 * 64 x 576 · 576 x 4096 with the AVX2 micro-kernel: 33 -> 61 GFLOP/s. */
static void dk__pack_cols(int mr, int rows, const float *x, int64_t ldx, int64_t kb, float *restrict ap)
{
    for (int64_t p = 0; p < kb; p++) {
        const float *restrict src = x + p * ldx;
        float *restrict dst = ap + p * mr;
        /* Note [Prefetching the next micro-panel] */
        for (int o = 0; o < mr; o += 16) __builtin_prefetch(src + mr + o);
        /* a loop, not memcpy: a call per 64-byte piece cost more than the copy */
        for (int i = 0; i < rows; i++) dst[i] = src[i];
        for (int i = rows; i < mr; i++) dst[i] = 0.0f;
    }
}

void dk__sgemm_pack_a(int mr, bool trans, const float *a, int64_t lda, int64_t i0, int64_t p0, int64_t mb, int64_t kb,
                      float *ap)
{
    for (int64_t r = 0; r < mb; r += mr, ap += (int64_t)mr * kb) {
        const int rows = mb - r < mr ? (int)(mb - r) : mr;
        if (trans) dk__pack_cols(mr, rows, a + p0 * lda + i0 + r, lda, kb, ap); /* op(A)[i][p] = a[p][i] */
        else dk__pack_rows(mr, rows, a + (i0 + r) * lda + p0, lda, kb, ap);
    }
}

void dk__sgemm_pack_b(int nr, bool trans, const float *b, int64_t ldb, int64_t p0, int64_t j0, int64_t kb, int64_t nb,
                      float *bp)
{
    for (int64_t c = 0; c < nb; c += nr, bp += (int64_t)nr * kb) {
        const int cols = nb - c < nr ? (int)(nb - c) : nr;
        if (trans) dk__pack_rows(nr, cols, b + (j0 + c) * ldb + p0, ldb, kb, bp); /* op(B)[p][j] = b[j][p] */
        else dk__pack_cols(nr, cols, b + p0 * ldb + j0 + c, ldb, kb, bp);
    }
}
