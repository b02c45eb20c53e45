/*
 * dk_sgemm_private.h — what dk_sgemm's driver (dk_sgemm.c) knows of a micro-kernel: its tile, its
 * blocking, and the one function that multiplies two packed panels. Internal to dk_sgemm*.
 *
 * Note [GotoBLAS blocking]
 * dk_sgemm is structured as GotoBLAS and BLIS are. C = alpha op(A) op(B) + beta C is cut into
 *   slabs of KC of the inner dimension             (loop pc)
 *     blocks of MC rows of op(A)                    (loop ic): packed into Ap
 *       micro-panels of NR columns of op(B)         (loop jr): packed into Bp
 *         tiles of MR x NR of C                     (loop ir): the micro-kernel, kc steps
 * Packing copies each operand into the order the micro-kernel reads it: Ap as micro-panels of MR
 * rows, each kc steps of MR consecutive floats (one column of the tile); Bp as kc steps of NR
 * consecutive floats (one row of the tile). The transposes of op(A) and op(B) are absorbed there,
 * so one micro-kernel serves every layout. Partial micro-panels are padded with zeros, so the
 * micro-kernel always computes a whole tile; only the store of an edge tile differs (through a
 * tile on the stack, dk_sgemm.c).
 *   The micro-kernel's inner step loads one row of Bp (NR floats, whole vectors) and broadcasts
 * the MR floats of a column of Ap: MR x NR/width fused multiply-adds for NR/width + MR loads. The
 * Bp micro-panel (KC x NR) is reused by every tile of the A block, so it stays in L1 across loop
 * ir; the A block (MC x KC) is reused by every micro-panel of op(B), so it stays in L2. Each arch
 * sizes KC and MC for those caches (its file says how).
 *   GotoBLAS packs a whole panel of op(B) (KC x NC, megabytes) once per slab and reuses it across
 * the A blocks; here Bp is one micro-panel, packed again for each A block. With the A block sized
 * to hold all of op(A)'s rows for the products dkit makes (deform_conv2d: m = Cout <= 256, or
 * m = Cin*kh*kw with a short k), op(B) is still packed once, and the buffers stay small enough
 * to be thread-local (Note [Packing buffers] in dk_sgemm.c).
 */
#ifndef DK_SGEMM_PRIVATE_H
#define DK_SGEMM_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_export.h"

/*
 * One tile of C: C[0:MR, 0:NR] (row stride ldc) = alpha * Ap·Bp + beta * C over kc steps, where ap
 * is an MR-row micro-panel and bp an NR-column one (Note [GotoBLAS blocking]). beta == 0 writes C
 * without reading it. ap and bp are 64-byte aligned; c and ldc are anything.
 */
typedef void (*dk__sgemm_ukernel_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha,
                                     float beta);

typedef struct dk__sgemm_arch {
    const char *name;
    int mr, nr; /* the tile */
    int kc;     /* the slab */
    int ab;     /* the A block's floats, MC x KC at most: its L2 budget */
    dk__sgemm_ukernel_fn ukernel;
} dk__sgemm_arch;

/* The largest tile and blocking of any arch: the packing buffers' sizes (dk_sgemm.c) and the
 * edge tile's. Each arch's file checks its own figures against them (_Static_assert); ab must
 * hold one micro-panel of kc steps. */
#define DK__SGEMM_MAX_MR 16
#define DK__SGEMM_MAX_NR 48
#define DK__SGEMM_MAX_KC 256
#define DK__SGEMM_MAX_AB (256 * 256)

/* The archs, by the value of the tunable "gemm.isa" that forces each (Note [Choosing the
 * micro-kernel] in dk_sgemm.c). */
enum { DK__SGEMM_PORTABLE = 0, DK__SGEMM_AVX2 = 1, DK__SGEMM_AVX512 = 2 };

extern const dk__sgemm_arch dk__sgemm_portable;
#if defined(__x86_64__) && defined(__GNUC__)
/* GCC and Clang compile a function for a wider ISA than the file's (target attribute); the
 * driver calls it only where the CPU has that ISA. */
#define DK__SGEMM_X86 1
extern const dk__sgemm_arch dk__sgemm_avx2;
extern const dk__sgemm_arch dk__sgemm_avx512;
#else
#define DK__SGEMM_X86 0
#endif

/* Packing (dk_sgemm_pack.c), Note [GotoBLAS blocking]. op(A)[i0:i0+mb, p0:p0+kb] into
 * micro-panels of mr rows; op(B)[p0:p0+kb, j0:j0+nb] into micro-panels of nr columns. */
void dk__sgemm_pack_a(int mr, bool trans, const float *a, int64_t lda, int64_t i0, int64_t p0, int64_t mb, int64_t kb,
                      float *ap);
void dk__sgemm_pack_b(int nr, bool trans, const float *b, int64_t ldb, int64_t p0, int64_t j0, int64_t kb, int64_t nb,
                      float *bp);

/* The arch dk_sgemm uses now (DK__SGEMM_*): the CPU's best, or the one "gemm.isa" asks for where
 * the CPU has it. Exported for the tests, which force each arch and check that they got it. */
DK_API int dk__sgemm_isa(void);

#endif /* DK_SGEMM_PRIVATE_H */
