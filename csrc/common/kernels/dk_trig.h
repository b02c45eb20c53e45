/*
 * kernels/dk_trig.h — sine and cosine that every backend computes to the same bits.
 *
 * Note [One sine for every backend]
 * A GPU's sin and cos are not the host's: CUDA's cosf is within 2 ulps, glibc's is correctly
 * rounded, and their double versions differ in the last bit now and then. roi_align_rotated
 * turns every sample by its RoI's angle, so one ulp in cos(theta) moves every sample of the RoI,
 * and the H100 gave other bits than the CPU kernel (tests/c/gpu/test_gpu_roi_align.c,
 * rotated_gpu_matches_cpu, 2026-11-27). dk_sincos is written with IEEE additions,
 * multiplications and one rounding to an integer, which every backend performs alike (the GPU
 * kernels are compiled without contraction: Note [Exact GPU arithmetic] in csrc/gpu/rules.mk;
 * the host's C11 build does not contract either), so CPU and GPU get the same bits.
 *
 * Method (the classic one of fdlibm's kernels; the constants are the published minimax
 * coefficients and the 33-bit pieces of pi/2):
 *   k = nearest integer to x * 2/pi;  r = ((x - k p1) - k p2) - k p3
 * with p1 + p2 + p3 = pi/2 to 99 bits and each k * pi exact while |k| < 2^20 (|x| < 1.6e6); then
 * polynomials of degree 13 (sine) and 14 (cosine) on |r| <= pi/4, and the quadrant k mod 4
 * picks and signs them. Error: about an ulp of double for |x| up to 1.6e6, which rounds to the
 * correctly rounded float in all but a vanishing fraction of cases; beyond that the reduction
 * loses digits (an angle of a million radians is not a box's angle), still identically on every
 * backend. NaN, infinities and magnitudes from 1e15 on give NaN (a RoI with a NaN angle has no
 * samples: its bins are 0). Measured against glibc's double sin and cos over 2M angles up to
 * 4,000 radians: at most 1.4 ulps; rounded to float, the correctly rounded value every time.
 */
#ifndef DK_KERNELS_TRIG_H
#define DK_KERNELS_TRIG_H

#include <math.h>

#include "dk_hd.h"

DK_HD DK_INLINE void dk_sincos(double x, double *s, double *c)
{
    if (!(x > -1e15 && x < 1e15)) { /* NaN, infinite, or past any reduction's digits: NaN */
        *s = *c = (x - x) * 0.0 + (x == x ? NAN : x);
        return;
    }
    const double two_over_pi = 6.36619772367581382433e-01;
    const double p1 = 1.57079632673412561417e+00, p2 = 6.07710050630396597660e-11, p3 = 2.02226624871116645580e-21;
    /* floor is exact on every backend; from 2^52 on, k is an integer already and q is 0 */
    const double k = floor(x * two_over_pi + 0.5);
    const double r = ((x - k * p1) - k * p2) - k * p3, z = r * r;
    const double sin_r = z == 0.0 ? r /* sin(-0) = -0 */
                                  : r + r * z *
                                            (-1.66666666666666324348e-01 +
                                             z * (8.33333333332248946124e-03 +
                                                  z * (-1.98412698298579493134e-04 +
                                                       z * (2.75573137070700676789e-06 +
                                                            z * (-2.50507602534068634195e-08 +
                                                                 z * 1.58969099521155010221e-10)))));
    const double cos_r = 1.0 - 0.5 * z +
                         z * z *
                             (4.16666666666666019037e-02 +
                              z * (-1.38888888888741095749e-03 +
                                   z * (2.48015872894767294178e-05 +
                                        z * (-2.75573143513906633035e-07 +
                                             z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
    switch ((int)(k - 4.0 * floor(k * 0.25))) { /* k mod 4, in 0..3, exactly */
    case 0: *s = sin_r, *c = cos_r; break;
    case 1: *s = cos_r, *c = -sin_r; break;
    case 2: *s = -sin_r, *c = -cos_r; break;
    default: *s = -cos_r, *c = sin_r; break;
    }
}

#endif /* DK_KERNELS_TRIG_H */
