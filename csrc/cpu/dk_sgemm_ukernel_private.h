/*
 * dk_sgemm_ukernel_private.h — the register-blocked micro-kernel (Note [GotoBLAS blocking] in
 * dk_sgemm_private.h), written once for every x86 vector width. The including file defines:
 *   DK__UK_NAME     the function's name
 *   DK__UK_TARGET   its target attribute ("avx2,fma", "avx512f")
 *   DK__UK_MR, DK__UK_NV, DK__UK_W   rows of the tile, vectors per row, floats per vector
 *   DK__V           the vector type, and the intrinsics DK__ZERO(), DK__LOAD(p) (aligned),
 *                   DK__LOADU(p), DK__STOREU(p, v), DK__SET1(x), DK__FMA(a, b, c) (a*b + c), DK__MUL(a, b)
 * The accumulators are DK__UK_MR x DK__UK_NV vectors; with the loops unrolled the compiler keeps
 * them in registers (checked with objdump: no spill in the k loop), so the tile must fit the
 * register file with DK__UK_NV + 1 to spare.
 */
#define DK__UK_NR (DK__UK_NV * DK__UK_W)

__attribute__((target(DK__UK_TARGET))) static void DK__UK_NAME(int64_t kc, const float *restrict ap,
                                                               const float *restrict bp, float *restrict c, int64_t ldc,
                                                               float alpha, float beta)
{
    DK__V acc[DK__UK_MR][DK__UK_NV];
#pragma GCC unroll 16
    for (int i = 0; i < DK__UK_MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < DK__UK_NV; v++) acc[i][v] = DK__ZERO();

    for (int64_t p = 0; p < kc; p++) {
        DK__V b[DK__UK_NV];
#pragma GCC unroll 4
        for (int v = 0; v < DK__UK_NV; v++) b[v] = DK__LOAD(bp + v * DK__UK_W);
#pragma GCC unroll 16
        for (int i = 0; i < DK__UK_MR; i++) {
            const DK__V a = DK__SET1(ap[i]);
#pragma GCC unroll 4
            for (int v = 0; v < DK__UK_NV; v++) acc[i][v] = DK__FMA(a, b[v], acc[i][v]);
        }
        ap += DK__UK_MR;
        bp += DK__UK_NR;
    }

    const DK__V va = DK__SET1(alpha);
    if (beta == 0.0f) { /* Note [dk_sgemm's contract]: C is not read */
#pragma GCC unroll 16
        for (int i = 0; i < DK__UK_MR; i++)
#pragma GCC unroll 4
            for (int v = 0; v < DK__UK_NV; v++) DK__STOREU(c + i * ldc + v * DK__UK_W, DK__MUL(va, acc[i][v]));
    } else {
        const DK__V vb = DK__SET1(beta);
#pragma GCC unroll 16
        for (int i = 0; i < DK__UK_MR; i++)
#pragma GCC unroll 4
            for (int v = 0; v < DK__UK_NV; v++) {
                float *cv = c + i * ldc + v * DK__UK_W;
                DK__STOREU(cv, DK__FMA(va, acc[i][v], DK__MUL(vb, DK__LOADU(cv))));
            }
    }
}

#undef DK__UK_NR
