/*
 * gemm/sgemm_avx512.c — dk_sgemm's AVX-512 micro-kernel: a 14 x 32 tile (Note [GotoBLAS blocking]
 * in gemm/sgemm_arch.h).
 *
 * Note [AVX-512 tile]
 * 32 zmm registers: 14 rows x 2 vectors of 16 floats = 28 accumulators, 2 for the row of Bp and
 * 1 for the broadcast of Ap. Per k step: 2 loads and 14 broadcasts (folded into the FMAs as
 * {1to16} memory operands) for 28 FMAs, which two FMA ports retire in 14 cycles while the two load
 * ports have 16 loads to do: compute-bound, as a micro-kernel must be.
 * Blocking: the Bp micro-panel, KC x 32 floats, must stay in L1 (48 KiB on the Sapphire Rapids
 * this was tuned on, 32 KiB on older cores) beside the streaming Ap micro-panel: KC = 256 is 32
 * KiB. The A block, MC x KC, stays in L2 (1-2 MiB on AVX-512 cores): 256 KiB, so that 256 rows
 * (deform_conv2d's largest Cout) are one block of a 256-step slab.
 */
#include "gemm/sgemm_arch.h"

#if DK__SGEMM_X86
#include <immintrin.h>

#define DK__UK_NAME dk__sgemm_ukernel_avx512
#define DK__UK_TARGET "avx512f"
#define DK__UK_MR 14
#define DK__UK_NV 2
#define DK__UK_W 16
#define DK__V __m512
#define DK__ZERO() _mm512_setzero_ps()
#define DK__LOAD(p) _mm512_load_ps(p)
#define DK__LOADU(p) _mm512_loadu_ps(p)
#define DK__STOREU(p, v) _mm512_storeu_ps(p, v)
#define DK__SET1(x) _mm512_set1_ps(x)
#define DK__FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define DK__MUL(a, b) _mm512_mul_ps(a, b)
#include "gemm/sgemm_ukernel_tmpl.h"

_Static_assert(DK__UK_MR <= DK__SGEMM_MAX_MR && DK__UK_NV * DK__UK_W <= DK__SGEMM_MAX_NR, "tile");
_Static_assert(256 * 256 <= DK__SGEMM_MAX_AB, "A block");

const dk__sgemm_arch dk__sgemm_avx512 = {
    .name = "avx512",
    .mr = DK__UK_MR,
    .nr = DK__UK_NV * DK__UK_W,
    .kc = 256,
    .ab = 256 * 256,
    .ukernel = dk__sgemm_ukernel_avx512,
};
#endif
