/*
 * dk_sgemm_avx2.c — dk_sgemm's AVX2+FMA micro-kernel: a 6 x 16 tile (Note [GotoBLAS blocking] in
 * dk_sgemm_private.h).
 *
 * Note [AVX2 tile]
 * 16 ymm registers: 6 rows x 2 vectors of 8 floats = 12 accumulators, 2 for the row of Bp and 1
 * for the broadcast of Ap (the classic Haswell tile of BLIS and OpenBLAS). Per k step: 2 loads and
 * 6 broadcasts for 12 FMAs (6 cycles on two FMA ports).
 * Blocking: the Bp micro-panel, KC x 16 floats, in L1 (32 KiB on Haswell-Skylake): KC = 256 is 16
 * KiB, leaving room for the Ap micro-panel. The A block, MC x KC up to 128 KiB, in a 256 KiB L2.
 */
#include "dk_sgemm_private.h"

#if DK__SGEMM_X86
#include <immintrin.h>

#define DK__UK_NAME dk__sgemm_ukernel_avx2
#define DK__UK_TARGET "avx2,fma"
#define DK__UK_MR 6
#define DK__UK_NV 2
#define DK__UK_W 8
#define DK__V __m256
#define DK__ZERO() _mm256_setzero_ps()
#define DK__LOAD(p) _mm256_load_ps(p)
#define DK__LOADU(p) _mm256_loadu_ps(p)
#define DK__STOREU(p, v) _mm256_storeu_ps(p, v)
#define DK__SET1(x) _mm256_set1_ps(x)
#define DK__FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define DK__MUL(a, b) _mm256_mul_ps(a, b)
#include "dk_sgemm_ukernel_private.h"

_Static_assert(DK__UK_MR <= DK__SGEMM_MAX_MR && DK__UK_NV * DK__UK_W <= DK__SGEMM_MAX_NR, "tile");
_Static_assert(256 <= DK__SGEMM_MAX_KC && 128 * 256 <= DK__SGEMM_MAX_AB, "blocking");

const dk__sgemm_arch dk__sgemm_avx2 = {
    .name = "avx2",
    .mr = DK__UK_MR,
    .nr = DK__UK_NV * DK__UK_W,
    .kc = 256,
    .ab = 128 * 256,
    .ukernel = dk__sgemm_ukernel_avx2,
};
#endif
