/*
 * gemm/sgemm.c — dk_sgemm (Note [dk_sgemm's contract] in dk_gemm.h): the blocked driver (Note
 * [GotoBLAS blocking] in gemm/sgemm_arch.h) and the choice of its micro-kernel.
 */
#include <stddef.h> /* NULL, for DK_TUNABLE */

#include "dk_gemm.h"
#include "dk_tunables.h"
#include "gemm/sgemm_arch.h"

/*
 * Note [Choosing the micro-kernel]
 * The core is built for x86-64-v2 (SSE4.2), so the AVX2+FMA and AVX-512 micro-kernels are
 * compiled with target attributes, and a call takes the widest the CPU has. The CPU is asked once
 * (__builtin_cpu_supports, which also checks that the OS saves the wider registers); the answer
 * is cached in an atomic, and two threads that race on the first call store the same value. The
 * tunable "gemm.isa" (Note [Tunables] in dk_tunables.h) asks for a narrower one (0 portable, 1
 * AVX2, 2 AVX-512; -1, the default, the widest), so that the tests run every micro-kernel this CPU
 * has on the same inputs; a wider one than the CPU has is not taken. Other compilers and
 * platforms have the portable micro-kernel alone.
 */
DK_TUNABLE(dk__sgemm_isa_tunable, "gemm.isa", -1, -1, 2,
           "dk_sgemm's micro-kernel: -1 the widest the CPU has, 0 portable, 1 AVX2+FMA, 2 AVX-512 (where the CPU "
           "has it; Note [Choosing the micro-kernel])")

static int dk__sgemm_widest(void)
{
    static int widest = -1;
    int w = __atomic_load_n(&widest, __ATOMIC_RELAXED);
    if (w >= 0) return w;
    w = DK__SGEMM_PORTABLE;
#if DK__SGEMM_X86
    __builtin_cpu_init(); /* idempotent; needed where this runs before libgcc's constructor */
    if (__builtin_cpu_supports("avx512f")) w = DK__SGEMM_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) w = DK__SGEMM_AVX2;
#endif
    __atomic_store_n(&widest, w, __ATOMIC_RELAXED);
    return w;
}

int dk__sgemm_isa(void)
{
    const int widest = dk__sgemm_widest();
    const int64_t asked = dk_tunable(&dk__sgemm_isa_tunable);
    return asked < 0 || asked > widest ? widest : (int)asked;
}

static const dk__sgemm_arch *dk__sgemm_arch_of(int isa)
{
#if DK__SGEMM_X86
    if (isa == DK__SGEMM_AVX512) return &dk__sgemm_avx512;
    if (isa == DK__SGEMM_AVX2) return &dk__sgemm_avx2;
#endif
    (void)isa;
    return &dk__sgemm_portable;
}

/*
 * Note [Packing buffers]
 * The contract says dk_sgemm allocates nothing and cannot fail, so the packed A block and B
 * micro-panel live in thread-local buffers of fixed size (each thread that multiplies has its own:
 * callers run dk_sgemm on several workers at once), sized by the largest blocking of any arch:
 * 256 KiB + 32 KiB. That is why Bp is one micro-panel rather than GotoBLAS's panel of megabytes
 * (Note [GotoBLAS blocking]). dk_sgemm never calls itself, so one set per thread is enough.
 */
static _Thread_local float dk__sgemm_apack[DK__SGEMM_MAX_AB] __attribute__((aligned(64)));
static _Thread_local float dk__sgemm_bpack[DK__SGEMM_MAX_KC * DK__SGEMM_MAX_NR] __attribute__((aligned(64)));

/* C = beta * C (k == 0 or alpha == 0: BLAS reads neither A nor B then); beta == 0 writes zeros
 * without reading C. */
static void dk__sgemm_scale(int64_t m, int64_t n, float beta, float *c, int64_t ldc)
{
    if (beta == 1.0f) return;
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        if (beta == 0.0f)
            for (int64_t j = 0; j < n; j++) ci[j] = 0.0f;
        else
            for (int64_t j = 0; j < n; j++) ci[j] *= beta;
    }
}

/* An edge tile (rows < MR or cols < NR): the micro-kernel writes the whole tile, alpha applied,
 * into t (row stride nr), and only its rows x cols corner goes into C. */
static void dk__sgemm_edge(const dk__sgemm_arch *ar, int64_t kb, const float *ap, const float *bp, float *c,
                           int64_t ldc, int rows, int cols, float alpha, float beta)
{
    _Alignas(64) float t[DK__SGEMM_MAX_MR * DK__SGEMM_MAX_NR];
    ar->ukernel(kb, ap, bp, t, ar->nr, alpha, 0.0f);
    for (int i = 0; i < rows; i++) {
        const float *ti = t + i * ar->nr;
        float *ci = c + i * ldc;
        if (beta == 0.0f) /* Note [dk_sgemm's contract]: C is not read */
            for (int j = 0; j < cols; j++) ci[j] = ti[j];
        else
            for (int j = 0; j < cols; j++) ci[j] = ti[j] + beta * ci[j];
    }
}

static int64_t dk__ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void dk_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        dk__sgemm_scale(m, n, beta, c, ldc);
        return;
    }
    const dk__sgemm_arch *ar = dk__sgemm_arch_of(dk__sgemm_isa());
    const int mr = ar->mr, nr = ar->nr;
    float *const ap = dk__sgemm_apack, *const bp = dk__sgemm_bpack;

    /* Slabs of equal depth, at most kc: k = 576 is three slabs of 192, not 256 + 256 + 64. */
    const int64_t kslab = dk__ceil_div(k, dk__ceil_div(k, ar->kc));
    for (int64_t pc = 0; pc < k; pc += kslab) {
        const int64_t kb = k - pc < kslab ? k - pc : kslab;
        /* the first slab applies beta; the next ones add to what it wrote */
        const float beta_p = pc == 0 ? beta : 1.0f;
        /* A blocks of equal height, a multiple of mr, within the arch's L2 budget */
        const int64_t mc_max = ar->ab / kb / mr * mr;
        const int64_t mc = dk__ceil_div(dk__ceil_div(m, dk__ceil_div(m, mc_max)), mr) * mr;
        for (int64_t ic = 0; ic < m; ic += mc) {
            const int64_t mb = m - ic < mc ? m - ic : mc;
            dk__sgemm_pack_a(mr, trans_a, a, lda, ic, pc, mb, kb, ap);
            for (int64_t jr = 0; jr < n; jr += nr) {
                const int cols = n - jr < nr ? (int)(n - jr) : nr;
                dk__sgemm_pack_b(nr, trans_b, b, ldb, pc, jr, kb, cols, bp);
                for (int64_t ir = 0; ir < mb; ir += mr) {
                    const int rows = mb - ir < mr ? (int)(mb - ir) : mr;
                    float *ct = c + (ic + ir) * ldc + jr;
                    const float *api = ap + ir * kb; /* micro-panel ir / mr, mr x kb floats each */
                    if (rows == mr && cols == nr) ar->ukernel(kb, api, bp, ct, ldc, alpha, beta_p);
                    else dk__sgemm_edge(ar, kb, api, bp, ct, ldc, rows, cols, alpha, beta_p);
                }
            }
        }
    }
}
