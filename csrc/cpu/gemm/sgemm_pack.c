/*
 * gemm/sgemm_pack.c — packing of op(A) and op(B) into the micro-kernel's order (Note [GotoBLAS
 * blocking] in gemm/sgemm_arch.h), with the transposes absorbed here.
 *
 * Each operand is read in the order its memory is laid out (whole rows of the stored matrix) and
 * written with a stride of mr or nr floats into a buffer that is in L1 or L2: the strided side
 * is the cheap one. Rows or columns past the matrix's edge are zeros, so that the micro-kernel's
 * edge tiles compute zeros there and read nothing uninitialised.
 */
#include <string.h>

#include "gemm/sgemm_arch.h"

/* One micro-panel of rows (mr x kb, from rows rows of the matrix): ap[p * mr + i] = X[i][p], where
 * X[i][p] = x[i * ldx + p] (stored rows are the panel's rows) ... */
static void dk__pack_rows(int mr, int rows, const float *x, int64_t ldx, int64_t kb, float *restrict ap)
{
    for (int i = 0; i < rows; i++) {
        const float *restrict src = x + i * ldx;
        for (int64_t p = 0; p < kb; p++) ap[p * mr + i] = src[p];
    }
    for (int i = rows; i < mr; i++)
        for (int64_t p = 0; p < kb; p++) ap[p * mr + i] = 0.0f;
}

/* ... or X[i][p] = x[p * ldx + i] (stored rows are the panel's steps: a copy of rows floats each). */
static void dk__pack_cols(int mr, int rows, const float *x, int64_t ldx, int64_t kb, float *restrict ap)
{
    for (int64_t p = 0; p < kb; p++) {
        const float *restrict src = x + p * ldx;
        float *restrict dst = ap + p * mr;
        /* Note [Prefetching the next micro-panel] */
        for (int o = 0; o < mr; o += 16) __builtin_prefetch(src + mr + o);
        memcpy(dst, src, (size_t)rows * sizeof(float));
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
