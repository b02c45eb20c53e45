/*
 * kernels/focal_loss_math.h — the focal losses' per-element math, written once for every backend
 * (host and device; plain C that also compiles as CUDA/HIP C++). ops/focal_loss.h says what the
 * ops compute.
 *
 * Note [Focal loss arithmetic]
 * Every quantity comes from e = exp(-|x|), which never overflows: p = sigmoid(x) and q = 1 - p
 * are (1 or e) / (1 + e), so neither is a difference of nearly equal numbers; the binary
 * cross-entropy is (1 - t) x + max(-x, 0) + log1p(e); m = 1 - p_t = p (1 - t) + q t; and
 * p - t = p (1 - t) - q t. torchvision's composite and MMCV's kernel both form 1 - p by
 * subtraction, so where p rounds to 1 they lose what dkit keeps (MMCV then clamps its log to
 * FLT_MIN: see ops/focal_loss.h). In float (float32, float16 and bfloat16 inputs), exp and log1p
 * are the polynomials below rather than libm's: the CPU kernel's loops over them vectorise (the
 * loss is then a few times cheaper than with libm's scalar calls, bench/README.md), and every
 * backend computes the same bits, since the GPU kernels, built without contraction (Note [Exact
 * GPU arithmetic]), run the same additions and multiplications. They are within 2 ulp of the
 * exact values; exp(y) is 0 below y = -87 (where exp(y) is below 2^-125 and would be subnormal:
 * p and q are then 0 or 1, as the references' float32 sigmoid gives them). Double uses libm.
 * Selects are written as a choice between values already computed (`x >= 0 ? 1 : e`): GCC
 * if-converts those, and the loop vectorises; a choice between expressions it would keep as a
 * branch. The functions a CPU loop calls per element are DK_INLINE_ALWAYS: as plain inline
 * functions GCC called a clone of dk_focal_sigmoid_grad from the sigmoid's fused forward, element
 * by element, and that loop never vectorised (found 2026-11-28; focal_loss_tmpl.h has the figures).
 *
 * Note [A deterministic sum]
 * A reduced loss is the sum of the elements' losses in a fixed order, whatever runs it: the
 * elements (rows, for the softmax) in chunks of DK_FOCAL_CHUNK (DK_FOCAL_CHUNK_ROWS), each
 * chunk's sum taken in double over four lanes (element i in lane i % 4, the lanes added as
 * (0 + 1) + (2 + 3)), then the chunks' sums added in order, in double. The CPU's threads each
 * take whole chunks, and a GPU thread one chunk, so the result has the same bits for any thread
 * count, on every run and (emulated) on the GPU: no atomics.
 *
 * Note [A row in lanes]
 * The softmax's row maximum and log-sum-exp are taken in DK_FOCAL_ROW_LANES lanes, column c in
 * lane c % 8, each lane in order of c: a lane's maximum by v > m ? v : m, then the lanes' maxima
 * in lane order the same way; the exps' sum per lane, then the lanes as a fixed tree
 * (dk_focal_row_sum). One pass of either over a row in order is a chain of 80 dependent
 * operations (a maxss or an addss each, 3-4 cycles); in lanes the CPU's loops are one 8-lane
 * vmaxps and vaddps per 8 columns (bench_focal_loss.py's MMCV softmax row, one thread, a 2-core
 * AMD EPYC VM, 2026-11-27: the training step took 101 ms before and the chains were half of
 * dk__fl_soft_stats' samples under perf). Every backend takes the same lanes (the GPU's row in
 * dk_focal_softmax_row, the CPU's in blocks in focal_loss_tmpl.h), so they keep one another's bits.
 * NaN never wins a comparison, in any order; only which of +0 and -0 is the maximum of a row whose
 * maximum is 0 may differ from one pass in order, and the results then differ at most in the sign
 * of a zero.
 *
 * Note [The softmax's backward]
 * d loss / d x_c = b (delta(c, l) - s_c) needs every column's probability s_c. It is taken as
 * e_c (1 / total), e_c = exp(x_c - max) the very values whose lanes' sum is the row's total (the
 * statistics' pass computes them), not as exp((x_c - max) - lse): the CPU keeps a row's e_c from
 * that pass (rows of up to DK__FL_BLOCK columns; longer rows take them again, the same bits) and
 * so takes C exps per row, not 2 C, and the GPU, which keeps no row, takes them again with the
 * same function on the same values: the same bits on every backend. (A reciprocal per row and a
 * multiplication per column, within about an ulp of e_c / total, where exp((x_c - max) - lse)
 * carries the rounding of lse into its argument: at x_c - max = -20, some 20 ulp; the row's C
 * divisions were some 2 ms of bench_focal_loss.py's backward on an AVX2 host.)
 * bench_focal_loss.py's MMCV softmax step: see focal_loss_tmpl.h.
 *
 * What is here, for compute type float (_f32) and double (_f64):
 *   dk_focal_expneg_*, dk_focal_log1p_*    exp(y) for y <= 0, log1p(e) for e in [0, 1] (float:
 *                                          dk_focal_expneg_poly, dk_focal_log1p_poly)
 *   dk_focal_omexp_*                       1 - exp(y) for y <= 0 (float: dk_focal_omexp_poly)
 *   dk_focal_sigmoid_loss_*                one element's sigmoid focal loss (w = 1)
 *   dk_focal_sigmoid_grad_*                its derivatives with respect to x and t
 *   dk_focal_softmax_loss_*                one row's softmax focal loss, and MMCV's "buff"
 *   dk_focal_softmax_inv_*, _prob_*        a column's probability for the backward
 * and per storage type (f32, f64, f16, bf16):
 *   dk_focal_softmax_row_S                 a row's maximum, sum of exps and log-sum-exp
 */
#ifndef DK_KERNELS_FOCAL_LOSS_MATH_H
#define DK_KERNELS_FOCAL_LOSS_MATH_H

#include <math.h>
#include <stdint.h>

#include "dk_half.h"
#include "dk_hd.h"
#include "dk_template.h"

/* Note [A row in lanes]: the softmax row's lanes (dk_focal_row_sum adds 8). */
#define DK_FOCAL_ROW_LANES 8

/* Chunks of Note [A deterministic sum]: elements (sigmoid), rows (softmax); multiples of 4. */
#define DK_FOCAL_CHUNK 4096
#define DK_FOCAL_CHUNK_ROWS 64

/* How m^gamma is taken: DK_FOCAL_POW_2 for gamma == 2 (the default of both references: m * m,
 * and the loop vectorises), DK_FOCAL_POW_ANY for any gamma (pow). A constant at each call, so
 * the branch on it folds away. */
enum { DK_FOCAL_POW_ANY = 0, DK_FOCAL_POW_2 = 2 };

/* exp(y) for y <= 0, within 2 ulp: Cephes' expf polynomial on r = y - n ln 2, |r| <= ln 2 / 2,
 * scaled by 2^n built in the exponent bits; 0 below -87 (Note [Focal loss arithmetic]), so 0 for
 * -inf; NaN for NaN. n is rounded by adding 1.5 * 2^23, whose low mantissa bits then hold it (no
 * float-to-int conversion, undefined for NaN). y is clamped to -87 in its bits (an unsigned
 * minimum, which vectorises where a float comparison's select does not); that also turns a
 * negative NaN into -87, so NaN is added back at the end. */
DK_HD DK_INLINE_ALWAYS float dk_focal_expneg_poly(float y)
{
    const uint32_t bits = dk_float_to_bits(y), minus87 = 0xC2AE0000u; /* -87.0f */
    const float yc = dk_bits_to_float(bits > minus87 ? minus87 : bits);
    const float j = yc * 1.44269504088896341f + 12582912.0f;
    const float n = j - 12582912.0f;
    const float r = (yc - n * 0.693359375f) - n * -2.12194440e-4f;
    const float poly = ((((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) *
                              r +
                          1.6666665459e-1f) *
                             r +
                         5.0000001201e-1f) *
                            (r * r) +
                        r) +
                       1.0f;
    const float scale = dk_bits_to_float((dk_float_to_bits(j) - 0x4B400000u + 127u) << 23);
    const float keep = y < -87.0f ? 0.0f : 1.0f;
    const float nan = y == y ? 0.0f : y;
    return poly * scale * keep + nan;
}

/* 1 - exp(y) for y <= 0 (-expm1(y), the softmax loss's 1 - s): for y > -ln 2 / 2 (exp(y) > 0.707)
 * the series of -expm1 to y^8 by Horner (the next term is below 2^-27 of the value), so that
 * 1 - s keeps its digits as s nears 1; below, 1 - dk_focal_expneg_poly(y), whose subtraction then
 * costs at most a bit (1 - exp(y) >= 0.29). 1 at -inf, NaN for NaN. */
DK_HD DK_INLINE_ALWAYS float dk_focal_omexp_poly(float y)
{
    const float q = (((((y * (1.0f / 40320.0f) + 1.0f / 5040.0f) * y + 1.0f / 720.0f) * y + 1.0f / 120.0f) * y +
                      1.0f / 24.0f) *
                         y +
                     1.0f / 6.0f) *
                        y +
                    0.5f;
    const float near = -(y + (y * y) * q), far = 1.0f - dk_focal_expneg_poly(y);
    return y > -0.34657359f ? near : far;
}

/* log1p(e) for e in [0, 1], within 2 ulp: 2 atanh(u), u = e / (2 + e) <= 1/3, by its series to
 * u^15 (the next term is below 2^-26 of the sum). Exact in the limit e -> 0 (log1p(e) = e). */
DK_HD DK_INLINE_ALWAYS float dk_focal_log1p_poly(float e)
{
    const float u = e / (2.0f + e), s = u * u;
    const float q = ((((((s * (1.0f / 15.0f) + 1.0f / 13.0f) * s + 1.0f / 11.0f) * s + 1.0f / 9.0f) * s + 1.0f / 7.0f) *
                          s +
                      1.0f / 5.0f) *
                         s +
                     1.0f / 3.0f) *
                    s;
    return 2.0f * u + 2.0f * u * q;
}

#define DK_TEMPLATE "kernels/focal_loss_math_tmpl.h"
#define DK_TEMPLATE_TYPES (DK_TYPES_COMPUTE | DK_TYPES_FLOAT)
#include "dk_instantiate.h"

#endif /* DK_KERNELS_FOCAL_LOSS_MATH_H */
