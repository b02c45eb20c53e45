/*
 * dk_gemm.c — dk_sgemm (Note [dk_sgemm's contract]).
 *
 * A plain, correct product: row of C times the rows of op(B), accumulated in float. It is the
 * reference the tuned kernel replaces.
 */
#include "dk_gemm.h"

void dk_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int64_t j = 0; j < n; j++) ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
        for (int64_t p = 0; p < k; p++) {
            const float aip = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
            if (trans_b)
                for (int64_t j = 0; j < n; j++) ci[j] += aip * b[j * ldb + p];
            else
                for (int64_t j = 0; j < n; j++) ci[j] += aip * b[p * ldb + j];
        }
    }
}
