/*
 * dk_sgemm_avx512.c — dk_sgemm's AVX-512 micro-kernel: an 8 x 48 tile (Note [GotoBLAS blocking]
 * in dk_sgemm_private.h).
 *
 * Note [AVX-512 tile]
 * 32 zmm registers: 8 rows x 3 vectors of 16 floats = 24 accumulators, 3 for the row of Bp and 1
 * for the broadcast of Ap. Per k step: 3 loads and 8 broadcasts for 24 FMAs, which two FMA ports
 * retire in 12 cycles while the two load ports have 11 loads to do: compute-bound, as a
 * micro-kernel must be. 14 x 32 (28 accumulators) does as well on a whole tile, but dkit's
 * products have m = Cout (64, 128, 256) or m = Cin * kh * kw (576 for 64 x 3 x 3): multiples of
 * 8, which 14 rows leave a partial tile of (64 = 4 x 14 + 8: 9% of the work wasted), and n = K
 * (576 = 12 x 48). Measured on Sapphire Rapids, one thread, 64 x 576 · 576 x 4096: 14 x 32 at 107
 * GFLOP/s, 12 x 32 at 105, 8 x 48 at 117-120 (the machine's FMA peak is 175).
 * Blocking: the Bp micro-panel, KC x 48 floats, stays in L1 (48 KiB on Ice Lake and Sapphire
 * Rapids) beside the streaming Ap micro-panel: KC = 192 is 36 KiB (128 measured 2-5% slower,
 * 256 no faster). The A block, MC x KC, stays in L2 (1-2 MiB on AVX-512 cores): up to 256 KiB,
 * so that 256 rows (deform_conv2d's largest Cout) are one block of a 256-step slab.
 */
#include "dk_sgemm_private.h"

#if DK__SGEMM_X86
#include <immintrin.h>

#define DK__UK_NAME dk__sgemm_ukernel_avx512
#define DK__UK_TARGET "avx512f"
#define DK__UK_MR 8
#define DK__UK_NV 3
#define DK__UK_W 16
#define DK__V __m512
#define DK__ZERO() _mm512_setzero_ps()
#define DK__LOAD(p) _mm512_load_ps(p)
#define DK__LOADU(p) _mm512_loadu_ps(p)
#define DK__STOREU(p, v) _mm512_storeu_ps(p, v)
#define DK__SET1(x) _mm512_set1_ps(x)
#define DK__FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define DK__MUL(a, b) _mm512_mul_ps(a, b)
#include "dk_sgemm_ukernel_private.h"

#define DK__AVX512_KC 192
#define DK__AVX512_AB (256 * 256)
_Static_assert(DK__UK_MR <= DK__SGEMM_MAX_MR && DK__UK_NV * DK__UK_W <= DK__SGEMM_MAX_NR, "tile");
_Static_assert(DK__AVX512_KC <= DK__SGEMM_MAX_KC && DK__AVX512_AB <= DK__SGEMM_MAX_AB, "blocking");

const dk__sgemm_arch dk__sgemm_avx512 = {
    .name = "avx512",
    .mr = DK__UK_MR,
    .nr = DK__UK_NV * DK__UK_W,
    .kc = DK__AVX512_KC,
    .ab = DK__AVX512_AB,
    .ukernel = dk__sgemm_ukernel_avx512,
};
#endif
