/*
 * kernels/dk_half.h — float16 and bfloat16 <-> float32 on raw uint16_t bit patterns.
 *
 * dkit stores 16-bit floats as uint16_t so that C, CUDA and HIP code share one representation
 * without depending on a compiler's half type. Kernels load 16-bit values, compute in float32
 * and round back on store.
 *
 * Formats (IEEE 754 binary16 and Google's bfloat16):
 *   float32   1 sign | 8 exponent (bias 127) | 23 fraction
 *   float16   1 sign | 5 exponent (bias 15)  | 10 fraction
 *   bfloat16  1 sign | 8 exponent (bias 127) | 7 fraction   (the top half of a float32)
 * Widening is exact. Narrowing rounds to nearest, ties to even, overflows to infinity, keeps
 * subnormals (float16 has them down to 2^-24) and turns NaN into a quiet NaN of the same sign.
 */
#ifndef DK_KERNELS_HALF_H
#define DK_KERNELS_HALF_H

#include <stdint.h>
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#include <string.h>
#endif

#include "dk_hd.h"

DK_HD DK_INLINE uint32_t dk_float_to_bits(float f)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

DK_HD DK_INLINE float dk_bits_to_float(uint32_t u)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

DK_HD DK_INLINE float dk_half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t frac = h & 0x3ffu;
    if (exp == 0x1fu) /* inf / NaN: all-ones exponent, fraction (payload) carried over */
        return dk_bits_to_float(sign | 0x7f800000u | (frac << 13));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return dk_bits_to_float(sign | ((exp + 112u) << 23) | (frac << 13));
    /* zero or subnormal: frac * 2^-24, exact in float32 (every half subnormal is a float normal) */
    const float mag = (float)frac * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
}

DK_HD DK_INLINE uint16_t dk_float_to_half(float f)
{
    const uint32_t x = dk_float_to_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    /* 65520 = 0x477ff000 is halfway between 65504 (largest half, odd fraction) and 2^16: a tie
     * that rounds to even, i.e. to infinity. Everything from there up, incl. inf, becomes inf. */
    if (ax >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* >= 2^-14: a normal half */
        uint32_t h = ((ax >> 23) - 112u) << 10 | ((ax >> 13) & 0x3ffu);
        const uint32_t rest = ax & 0x1fffu; /* the 13 dropped fraction bits */
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++; /* a carry out of the fraction correctly bumps the exponent */
        return (uint16_t)(sign | h);
    }
    /* Below 2^-14: the result is the subnormal count n = round(|f| * 2^24). With the float's
     * significand m (implicit bit set) and biased exponent e, |f| * 2^24 = m * 2^(e - 126), so n
     * is m shifted right by 126 - e >= 14 bits, rounded to nearest even. A shift beyond 24 leaves
     * less than half of the smallest subnormal: zero (this also covers float subnormals). */
    const uint32_t shift = 126u - (ax >> 23);
    if (shift > 24u)
        return sign;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t n = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (n & 1u)))
        n++; /* may become 0x400, the smallest normal: still the right encoding */
    return (uint16_t)(sign | n);
}

DK_HD DK_INLINE float dk_bfloat16_to_float(uint16_t b) { return dk_bits_to_float((uint32_t)b << 16); }

DK_HD DK_INLINE uint16_t dk_float_to_bfloat16(float f)
{
    const uint32_t x = dk_float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncating could clear the payload -> inf */
        return (uint16_t)((x >> 16) | 0x0040u);
    /* Round to nearest even on the 16 dropped bits; a carry may overflow into inf, as it should. */
    const uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + bias) >> 16);
}

#endif /* DK_KERNELS_HALF_H */
