/*
 * dk_gemm.h — the single-precision matrix product of CPU kernels that reduce to one (deform_conv2d's
 * columns times its weights, and the two products of its backward).
 *
 * dkit links no BLAS: the core depends on libc, libm and OpenMP's runtime only, so that a vendor or
 * a NumPy user gets the same library as a torch user. The product lives here, once.
 *
 * It is built as GotoBLAS and BLIS build theirs (csrc/cpu/dk_sgemm*: Note [GotoBLAS blocking] in
 * dk_sgemm_private.h): operands packed into cache-sized blocks, a register-blocked micro-kernel
 * for AVX-512, AVX2+FMA or plain C chosen at run time (Note [Choosing the micro-kernel] in
 * dk_sgemm.c). Figures against torch.mm and oneDNN: bench/bench_gemm.py, bench/README.md.
 */
#ifndef DK_GEMM_H
#define DK_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "dk_export.h"

/*
 * Note [dk_sgemm's contract]
 * C = alpha * op(A) · op(B) + beta * C, row-major float32, as cblas_sgemm(CblasRowMajor, ...):
 *   op(A) is m x k: A itself (m x k, row stride lda) or, with trans_a, the transpose of A (k x m);
 *   op(B) is k x n: B itself (k x n, row stride ldb) or, with trans_b, the transpose of B (n x k);
 *   C is m x n with row stride ldc.
 * beta == 0 writes C without reading it (NaN or garbage there is ignored), as BLAS does; k == 0
 * scales C by beta. One thread: callers split the product across dk_parallel_run's workers (rows of
 * C, or blocks of its columns), which keeps the threading policy with the op. Sizes are the
 * caller's to check (they come from tensors already checked). Nothing fails: a thread allocates
 * its packing buffers once, on its first product, and packs through a small stack block when that
 * allocation fails (Note [Packing buffers] in dk_sgemm.c), so there is no status to return.
 * alpha == 0 reads neither A nor B, as BLAS does. Results are within float32 rounding of the
 * exact product but not bitwise the same across CPUs: the micro-kernel, chosen by the CPU,
 * fuses multiply and add (FMA) or does not.
 */
DK_API void dk_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

#endif /* DK_GEMM_H */
