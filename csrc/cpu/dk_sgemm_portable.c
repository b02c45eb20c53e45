/*
 * dk_sgemm_portable.c — dk_sgemm's portable micro-kernel: a 4 x 8 tile in plain C (Note
 * [GotoBLAS blocking] in dk_sgemm_private.h), for CPUs without AVX2 and compilers without target
 * attributes, and on aarch64.
 *
 * With constant bounds the compiler unrolls the tile and vectorises its rows: two SSE vectors
 * (x86-64-v2, the core's baseline) or NEON vectors a row, 8 accumulators, within the 16 registers
 * SSE has. ISO C contracts nothing, so a multiply and an add each, not an FMA.
 */
#include "dk_sgemm_private.h"

#define DK__PT_MR 4
#define DK__PT_NR 8

static void dk__sgemm_ukernel_portable(int64_t kc, const float *restrict ap, const float *restrict bp,
                                       float *restrict c, int64_t ldc, float alpha, float beta)
{
    float acc[DK__PT_MR][DK__PT_NR] = {{0}};
    for (int64_t p = 0; p < kc; p++) {
        for (int i = 0; i < DK__PT_MR; i++)
            for (int j = 0; j < DK__PT_NR; j++) acc[i][j] += ap[i] * bp[j];
        ap += DK__PT_MR;
        bp += DK__PT_NR;
    }
    for (int i = 0; i < DK__PT_MR; i++) {
        float *ci = c + i * ldc;
        if (beta == 0.0f) /* Note [dk_sgemm's contract]: C is not read */
            for (int j = 0; j < DK__PT_NR; j++) ci[j] = alpha * acc[i][j];
        else
            for (int j = 0; j < DK__PT_NR; j++) ci[j] = alpha * acc[i][j] + beta * ci[j];
    }
}

_Static_assert(DK__PT_MR <= DK__SGEMM_MAX_MR && DK__PT_NR <= DK__SGEMM_MAX_NR, "tile");
_Static_assert(256 <= DK__SGEMM_MAX_KC && 128 * 256 <= DK__SGEMM_MAX_AB, "blocking");

/* KC x NR = 8 KiB of Bp in L1, MC x KC up to 128 KiB of Ap in L2. */
const dk__sgemm_arch dk__sgemm_portable = {
    .name = "portable",
    .mr = DK__PT_MR,
    .nr = DK__PT_NR,
    .kc = 256,
    .ab = 128 * 256,
    .ukernel = dk__sgemm_ukernel_portable,
};
