/*
 * dk_sgemm.c — dk_sgemm (Note [dk_sgemm's contract] in dk_gemm.h): the blocked driver (Note
 * [GotoBLAS blocking] in dk_sgemm_private.h) and the choice of its micro-kernel.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include "dk_gemm.h"
#include "dk_tunables.h"
#include "dk_sgemm_private.h"

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
 * The packed A block and B micro-panel (Note [GotoBLAS blocking]) need a few hundred KiB, and
 * the contract says dk_sgemm cannot fail. Each thread that multiplies (callers run dk_sgemm on
 * several workers at once) has its own buffer, made on its first product and freed when the
 * thread exits (a pthread key's destructor), as dk_status.c keeps its message buffers; only a
 * pointer is thread-local. Not a thread-local array: libdkit's thread-locals all come out of
 * glibc's small static TLS surplus when Python dlopens it (Note [TLS on the fast path] in
 * dk_tls.h), and 304 KiB there fails the import ("cannot allocate memory in static TLS block").
 * A thread that cannot get its buffer (out of memory, or no key) packs into 20 KiB on its stack
 * with shorter slabs and smaller blocks instead: the same code, slower, never failing. The
 * tunable "gemm.buffer" (0) forces that, for the tests. dk_sgemm never calls itself, so one
 * buffer per thread is enough.
 */
DK_TUNABLE(dk__sgemm_buffer_tunable, "gemm.buffer", 1, 0, 1,
           "dk_sgemm's packing buffer: 1 the thread's own (made on first use), 0 20 KiB on the stack, smaller "
           "blocks (what a thread gets when out of memory; Note [Packing buffers])")

#define DK__SGEMM_HEAP_FLOATS (DK__SGEMM_MAX_AB + DK__SGEMM_MAX_KC * DK__SGEMM_MAX_NR)
/* The stack fallback: slabs of 64 steps, A blocks of 2048 floats (at least two 16-row
 * micro-panels), one B micro-panel of 64 x 48. */
#define DK__SGEMM_STACK_KC 64
#define DK__SGEMM_STACK_AB 2048
_Static_assert(DK__SGEMM_STACK_AB >= DK__SGEMM_STACK_KC * DK__SGEMM_MAX_MR, "a stack A block holds a micro-panel");

static _Thread_local float *dk__sgemm_buf;
static pthread_key_t dk__sgemm_buf_key;
static pthread_once_t dk__sgemm_buf_once = PTHREAD_ONCE_INIT;
static bool dk__sgemm_buf_key_ok;

static void dk__sgemm_buf_key_init(void) { dk__sgemm_buf_key_ok = pthread_key_create(&dk__sgemm_buf_key, free) == 0; }

/* This thread's buffer, DK__SGEMM_HEAP_FLOATS floats, 64-byte aligned; NULL when there is none. */
static float *dk__sgemm_thread_buffer(void)
{
    if (dk__sgemm_buf) return dk__sgemm_buf;
    pthread_once(&dk__sgemm_buf_once, dk__sgemm_buf_key_init);
    if (!dk__sgemm_buf_key_ok) return NULL; /* it could not be freed at exit: no buffer, no leak */
    void *p;
    if (posix_memalign(&p, 64, DK__SGEMM_HEAP_FLOATS * sizeof(float)) != 0) return NULL;
    if (pthread_setspecific(dk__sgemm_buf_key, p) != 0) {
        free(p);
        return NULL;
    }
    return dk__sgemm_buf = p;
}

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

/* The product with the given buffers: ap holds ab floats (an A block), bp kc_max x nr (a B
 * micro-panel). Note [GotoBLAS blocking]. */
static void dk__sgemm_blocked(const dk__sgemm_arch *ar, int64_t kc_max, int64_t ab, float *ap, float *bp, bool trans_a,
                              bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                              const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    const int mr = ar->mr, nr = ar->nr;
    /* Slabs of equal depth, at most kc_max: k = 576 is three slabs of 192, not 256 + 256 + 64. */
    const int64_t kslab = dk__ceil_div(k, dk__ceil_div(k, kc_max));
    for (int64_t pc = 0; pc < k; pc += kslab) {
        const int64_t kb = k - pc < kslab ? k - pc : kslab;
        /* the first slab applies beta; the next ones add to what it wrote */
        const float beta_p = pc == 0 ? beta : 1.0f;
        /* A blocks of equal height, a multiple of mr, within ab floats */
        const int64_t mc_max = ab / kb / mr * mr;
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

void dk_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        dk__sgemm_scale(m, n, beta, c, ldc);
        return;
    }
    const dk__sgemm_arch *ar = dk__sgemm_arch_of(dk__sgemm_isa());
    float *buf = dk_tunable(&dk__sgemm_buffer_tunable) ? dk__sgemm_thread_buffer() : NULL;
    if (buf) {
        dk__sgemm_blocked(ar, ar->kc, ar->ab, buf, buf + DK__SGEMM_MAX_AB, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                          ldb, beta, c, ldc);
    } else { /* Note [Packing buffers] */
        _Alignas(64) float ap[DK__SGEMM_STACK_AB], bp[DK__SGEMM_STACK_KC * DK__SGEMM_MAX_NR];
        dk__sgemm_blocked(ar, ar->kc < DK__SGEMM_STACK_KC ? ar->kc : DK__SGEMM_STACK_KC, DK__SGEMM_STACK_AB, ap, bp,
                          trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
}
